//! How one step's room for prompt work is shared between the sequences
//! that have some: owners (API keys) in turn, not slots in order.
//!
//! Each step decodes the next token of every generating sequence, then as
//! much prompt work (prompt chunks, tokens decoded again after a
//! suspension) as the batch has room for. Given out in slot order, one
//! key's long prompts took every step's room until all of them were
//! decoded, and another key's short prompt waited behind them (issue 61:
//! 12.1 s to its first token beside 8 prompts of 500 tokens, 0.086 s
//! idle). Here the room is shared max-min fairly between owners: each
//! owner with prompt work gets an equal part, an owner that needs less
//! leaves the rest to the others, and within an owner its sequences take
//! their owner's part oldest first. Interactive work is served first;
//! background work (a batch's lines) shares what it leaves.
//!
//! Room is counted in units of one plain prompt token; a token that keeps
//! a row of logits (a scored prompt's) costs more (see [`Claim::cost`]),
//! so that scoring takes no more of a step's time than plain prompts do.
//!
//! Pure arithmetic: no llama.cpp, unit-tested here.

/// One sequence's claim on the step's room for prompt work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim<K> {
    /// Whose part it comes from: the claims of one owner share one part.
    pub(crate) owner: K,
    /// Work nobody waits on: served from what interactive work leaves.
    pub(crate) background: bool,
    /// Tokens it could take this step.
    pub(crate) tokens: usize,
    /// Units of room each of its tokens takes (at least 1).
    pub(crate) cost: usize,
    /// Whether its `tokens` are the rest of its prompt: taken whole, its
    /// first token comes this step.
    pub(crate) ends: bool,
}

impl<K> Claim<K> {
    fn units(&self) -> usize {
        self.tokens.saturating_mul(self.cost.max(1))
    }
}

/// The tokens each claim takes this step, in the claims' order, within
/// `room` units. Interactive owners first: `room` split max-min fairly
/// between them (equal parts, what an owner needs less than its part going
/// to the others); within an owner, its claims in the order given (pass
/// them oldest first). Background owners then share what is left the same
/// way.
///
/// A short prompt goes first and keeps its step short: an interactive
/// owner whose claims all end their prompts within a [`SHORT`]th of the
/// room takes them whole, and the others share at most another such part
/// of the step, so the step that gives a short prompt its first token
/// does not wait on a long prompt's chunk (issue 61: beside one key's
/// 500-token prompts another key's first token took two full steps).
///
/// A claim takes only whole tokens; when the parts are too small for any
/// token to go while there is room and work, the first claim takes what
/// fits, at least one token (a step smaller than a token's cost still
/// takes one), so every step with room makes progress.
pub(crate) fn shares<K: Eq>(claims: &[Claim<K>], room: usize) -> Vec<usize> {
    let mut taken = vec![0; claims.len()];
    let part = room / SHORT;
    let short: Vec<bool> = claims
        .iter()
        .map(|claim| !claim.background && is_short(claims, &claim.owner, part))
        .collect();
    let mut left = room;
    if short.contains(&true) {
        left -= share_among(claims, |i| short[i], left, &mut taken);
        left = left.min(part);
    }
    for background in [false, true] {
        let of_class = |i: usize| !short[i] && claims[i].background == background;
        left -= share_among(claims, of_class, left, &mut taken);
    }
    if room > 0
        && taken.iter().all(|&t| t == 0)
        && let Some(at) = claims.iter().position(|c| c.tokens > 0)
    {
        let claim = &claims[at];
        taken[at] = claim.tokens.min((room / claim.cost.max(1)).max(1));
    }
    taken
}

/// A short prompt's part of a step: at most a `SHORT`th of the room.
const SHORT: usize = 4;

/// Whether `owner`'s interactive claims all end their prompts, within
/// `part` units together.
fn is_short<K: Eq>(claims: &[Claim<K>], owner: &K, part: usize) -> bool {
    let mut units = 0usize;
    for claim in claims.iter().filter(|c| c.owner == *owner && !c.background) {
        if !claim.ends {
            return false;
        }
        units = units.saturating_add(claim.units());
    }
    units > 0 && units <= part
}

/// Shares `room` units between the owners of the claims `chosen` picks,
/// writing their tokens into `taken`. Returns the units used.
fn share_among<K: Eq>(
    claims: &[Claim<K>],
    chosen: impl Fn(usize) -> bool,
    room: usize,
    taken: &mut [usize],
) -> usize {
    // Each owner, at its first chosen claim, with the units it could use.
    let mut owners: Vec<(usize, usize)> = Vec::new();
    for (i, claim) in claims.iter().enumerate() {
        if !chosen(i) || claim.tokens == 0 {
            continue;
        }
        match owners
            .iter_mut()
            .find(|(first, _)| claims[*first].owner == claim.owner)
        {
            Some((_, units)) => *units = units.saturating_add(claim.units()),
            None => owners.push((i, claim.units())),
        }
    }
    // Max-min fairness: the owners needing least first, each getting at
    // most an equal part of what is left.
    owners.sort_by_key(|&(first, units)| (units, first));
    let mut left = room;
    let mut used = 0;
    for (served, &(first, wants)) in owners.iter().enumerate() {
        let part = wants.min(left / (owners.len() - served));
        let mut part_left = part;
        for (i, claim) in claims.iter().enumerate().skip(first) {
            if !chosen(i) || claim.owner != claims[first].owner {
                continue;
            }
            let cost = claim.cost.max(1);
            let tokens = claim.tokens.min(part_left / cost);
            taken[i] = tokens;
            part_left -= tokens * cost;
        }
        left -= part - part_left;
        used += part - part_left;
    }
    used
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(owner: &'static str, tokens: usize) -> Claim<&'static str> {
        Claim {
            owner,
            background: false,
            tokens,
            cost: 1,
            ends: false,
        }
    }

    #[test]
    fn one_owners_prompts_leave_another_owners_prompt_its_part_of_the_step() {
        // Issue 61: key a's prompts came first in slot order and took the
        // whole step; key b's waited for all of them.
        let claims = [
            claim("a", 500),
            claim("a", 500),
            claim("a", 500),
            claim("b", 30),
        ];
        assert_eq!(shares(&claims, 512), [482, 0, 0, 30]);
        // Two owners needing more than half: half each, oldest first within a.
        let claims = [claim("a", 500), claim("a", 500), claim("b", 400)];
        assert_eq!(shares(&claims, 512), [256, 0, 256]);
    }

    #[test]
    fn a_short_prompt_goes_first_and_keeps_its_step_short() {
        let ending = |owner, tokens| Claim {
            ends: true,
            ..claim(owner, tokens)
        };
        // b's whole prompt (30) fits a quarter of 512: it goes whole, and
        // a's long prompts share at most another quarter of the step.
        let claims = [claim("a", 500), claim("a", 500), ending("b", 30)];
        assert_eq!(shares(&claims, 512), [128, 0, 30]);
        // A prompt that ends past a quarter (200 > 128) is shared as ever.
        let claims = [claim("a", 500), ending("b", 200)];
        assert_eq!(shares(&claims, 512), [312, 200]);
        // An owner with a long prompt too is not short.
        let claims = [ending("a", 30), claim("a", 500)];
        assert_eq!(shares(&claims, 512), [30, 482]);
        // Short owners all go whole; background work gets the part left.
        let line = Claim {
            background: true,
            ..claim("batch", 500)
        };
        let claims = [ending("b", 30), ending("c", 40), line];
        assert_eq!(shares(&claims, 512), [30, 40, 128]);
    }

    #[test]
    fn an_owner_alone_takes_the_whole_room() {
        let claims = [claim("a", 300), claim("a", 300)];
        assert_eq!(shares(&claims, 512), [300, 212]);
        assert_eq!(shares(&claims, 1000), [300, 300]);
    }

    #[test]
    fn what_an_owner_does_not_need_goes_to_the_others() {
        let claims = [claim("a", 1000), claim("b", 10), claim("c", 100)];
        // 512 / 3 = 170 each; b takes 10, then c 100 of (502 / 2), a the rest.
        assert_eq!(shares(&claims, 512), [402, 10, 100]);
        assert_eq!(shares(&claims, 512).iter().sum::<usize>(), 512);
    }

    #[test]
    fn a_scored_token_takes_its_cost_in_room() {
        let scored = |owner, tokens| Claim {
            cost: 4,
            ..claim(owner, tokens)
        };
        // a's scored prompts: 512 units are 128 scored tokens.
        assert_eq!(shares(&[scored("a", 64), scored("a", 64)], 512), [64, 64]);
        assert_eq!(shares(&[scored("a", 64), scored("a", 200)], 512), [64, 64]);
        // Beside b's plain prompt: b gets its 30, a what is left of the rest.
        assert_eq!(
            shares(&[scored("a", 64), scored("a", 64), claim("b", 30)], 512),
            [64, 56, 30]
        );
    }

    #[test]
    fn background_work_gets_what_interactive_work_leaves() {
        let line = |owner, tokens| Claim {
            background: true,
            ..claim(owner, tokens)
        };
        let claims = [line("batch", 500), claim("a", 100), line("batch2", 500)];
        assert_eq!(shares(&claims, 512), [206, 100, 206]);
        let claims = [line("batch", 500), claim("a", 600)];
        assert_eq!(shares(&claims, 512), [0, 512]);
    }

    #[test]
    fn a_step_with_room_always_makes_progress() {
        let scored = |owner, tokens| Claim {
            cost: 4,
            ..claim(owner, tokens)
        };
        // Parts of 2 units are too small for a token of 4: what they leave
        // goes on to the last owner, whose part then fits one.
        let claims = [scored("a", 10), scored("b", 10), scored("c", 10)];
        assert_eq!(shares(&claims, 6), [0, 0, 1]);
        // A step smaller than one token's cost: the first takes one.
        assert_eq!(shares(&claims, 3), [1, 0, 0]);
        assert_eq!(shares(&claims, 1), [1, 0, 0]);
        // Less room than a scored token's cost: the plain prompt goes on.
        let claims = [scored("a", 10), claim("b", 10)];
        assert_eq!(shares(&claims, 3), [0, 1]);
        assert_eq!(shares(&[claim("a", 5)], 0), [0]);
    }
}
