//! Placement and prefix reuse: which free slot a new sequence takes, and
//! the longest prefix of its prompt at hand it starts with (the slot's own
//! cells, a copy of another slot's, or a state from the host cache), so that
//! only the rest of the prompt is decoded; and the host cache's side of a
//! slot's cells given up (saved when worth keeping, restored). The order of
//! the cells in the pool is `pool`'s.

use llama_cpp_2::LlamaStateSeqFlags;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::session::SeqState;
use llama_cpp_2::token::LlamaToken;

use crate::prefix;

use super::sequence::Sequence;
use super::{Batcher, Job, seq_id};

impl Batcher<'_, '_> {
    /// Starts `job` in a free slot: the one that best continues its prompt,
    /// given the longest prefix any slot or the host cache has (see the
    /// module's docs).
    pub(super) fn place(&mut self, ctx: &mut LlamaContext<'_>, job: Job) {
        if let Some(seq) = self.start(job) {
            self.seat(ctx, seq);
        }
    }

    /// Puts `seq`, whose prompt is not started, in a free slot: following
    /// a sequence decoding the same prompt, or with the longest prefix of
    /// its prompt at hand.
    pub(super) fn seat(&mut self, ctx: &mut LlamaContext<'_>, mut seq: Sequence) {
        let scored = seq.score.is_some().then_some(seq.logprobs);
        seq.follows = self.leader_for(&seq.prompt, scored);
        let (slot, reused) = if seq.follows.is_some() || seq.score.is_some() {
            // A follower gets a copy of its leader's cells once they are
            // decoded; a scored prompt decodes every token for its logits.
            (self.take_slot(ctx, None), 0)
        } else {
            self.reuse(ctx, &seq.prompt)
        };
        seq.prompt_fed = reused;
        seq.cached = reused;
        self.shared.counters.reused(reused as u64);
        self.clock += 1;
        let slot = &mut self.slots[slot];
        slot.seq = Some(seq);
        slot.used_at = self.clock;
    }

    /// Picks the slot for a new sequence with `prompt` and puts the longest
    /// prefix of it that is at hand in that slot's cells: the slot's own,
    /// a copy of another slot's, or a state from the host cache. Returns
    /// the slot and the prompt tokens it holds (never the whole prompt: the
    /// last token is decoded for the reply's first logits).
    pub(super) fn reuse(
        &mut self,
        ctx: &mut LlamaContext<'_>,
        prompt: &[LlamaToken],
    ) -> (usize, usize) {
        if !self.cell_memory {
            return (self.take_slot(ctx, None), 0);
        }
        let limit = prompt.len().saturating_sub(1);
        let shared = |tokens: &[LlamaToken]| prefix::common_prefix(tokens, prompt).min(limit);
        // The slot (running or not) sharing the longest prefix; free ones
        // first on a tie, then the one that would lose the fewest cells.
        let source = (0..self.slots.len())
            .map(|i| (i, shared(&self.slots[i].tokens)))
            .filter(|&(_, n)| n > 0)
            .max_by_key(|&(i, n)| {
                let slot = &self.slots[i];
                (n, slot.is_free(), usize::MAX - slot.tokens.len())
            });
        let in_slots = source.map_or(0, |(_, n)| n);
        if let Some((entry, n)) = self.host.best(prompt)
            && n.min(limit) > in_slots
            && n >= prefix::MIN_HOST_TOKENS
        {
            // Moved out when used whole, copied when only a prefix of it is.
            let (tokens, state) = if n == self.host.tokens(entry).len() {
                self.host.take(entry)
            } else {
                self.host.copy(entry)
            };
            self.host_gauges();
            let slot = self.take_slot(ctx, None);
            return (slot, self.restore(ctx, slot, tokens, &state, n.min(limit)));
        }
        let Some((source, n)) = source else {
            return (self.take_slot(ctx, None), 0);
        };
        if self.slots[source].is_free() && self.in_place(source, n) {
            // Continue in place: the slot's cells after the prefix go (to
            // the host cache first, when they are worth keeping).
            if self.slots[source].tokens.len() - n >= prefix::MIN_HOST_TOKENS {
                self.save(ctx, source);
            }
            self.trim(ctx, source, n);
            return (source, n);
        }
        let slot = self.take_slot(ctx, Some(source));
        let copied = ctx
            .kv_cache_seq_cp(seq_id(source), seq_id(slot), Some(0), u32::try_from(n).ok())
            .map_err(|e| tracing::error!(error = %e, "cannot copy a prefix's KV cells"));
        if copied.is_err() {
            return (slot, 0);
        }
        self.slots[slot].tokens = prompt[..n].to_vec();
        (slot, n)
    }

    /// Whether a new sequence sharing `n` tokens with free slot `source`
    /// should continue in it rather than copy them to another free slot:
    /// when it loses nothing there, or fewer cells than the other slot
    /// would (an empty slot loses none).
    fn in_place(&self, source: usize, n: usize) -> bool {
        let lost_here = self.slots[source].tokens.len() - n;
        if lost_here == 0 {
            return true;
        }
        let other = (0..self.slots.len())
            .filter(|&i| i != source && self.slots[i].is_free())
            .map(|i| &self.slots[i])
            .min_by_key(|s| (!s.tokens.is_empty(), s.used_at));
        other.is_none_or(|s| !s.tokens.is_empty() && lost_here <= s.tokens.len())
    }

    /// A free slot other than `except`, emptied for a new sequence: an
    /// empty one when there is one, else the least recently used (its
    /// state goes to the host cache when worth keeping).
    pub(super) fn take_slot(&mut self, ctx: &mut LlamaContext<'_>, except: Option<usize>) -> usize {
        let candidates =
            || (0..self.slots.len()).filter(|&i| Some(i) != except && self.slots[i].is_free());
        let slot = candidates()
            .find(|&i| self.slots[i].tokens.is_empty())
            .or_else(|| candidates().min_by_key(|&i| self.slots[i].used_at));
        // `admit` calls this only with a free slot, and `reuse` keeps one
        // besides `except` (it continues in place when the source is the only one).
        let slot = slot.unwrap_or_else(|| except.unwrap_or(0));
        self.clear_slot(ctx, slot);
        slot
    }

    /// Frees the cells of slot `i` (a free slot), keeping its state in the
    /// host cache first when it is worth keeping.
    pub(super) fn clear_slot(&mut self, ctx: &mut LlamaContext<'_>, i: usize) {
        if self.slots[i].tokens.is_empty() {
            return;
        }
        self.save(ctx, i);
        self.forget(ctx, i);
    }

    /// Gives up the cells of slot `i` (see [`Batcher::park`]), and forgets its tokens.
    pub(super) fn forget(&mut self, ctx: &mut LlamaContext<'_>, i: usize) {
        self.park(ctx, i, 0);
        self.slots[i].tokens.clear();
    }

    /// Cuts slot `i`'s cells back to its first `n` tokens (see [`Batcher::park`]).
    fn trim(&mut self, ctx: &mut LlamaContext<'_>, i: usize, n: usize) {
        let keep = if self.park(ctx, i, n) { n } else { 0 };
        self.slots[i].tokens.truncate(keep);
    }

    /// Copies slot `i`'s state to the host cache, unless the cache is off,
    /// the prefix is short, or another slot or a cached state already
    /// holds it (or a longer sequence starting with it).
    fn save(&mut self, ctx: &mut LlamaContext<'_>, i: usize) {
        let tokens = &self.slots[i].tokens;
        if !self.host.enabled() || tokens.len() < prefix::MIN_HOST_TOKENS {
            return;
        }
        let elsewhere = self.slots.iter().enumerate().any(|(j, other)| {
            j != i && prefix::common_prefix(&other.tokens, tokens) == tokens.len()
        });
        if elsewhere || self.host.covers(tokens) {
            return;
        }
        let state = match ctx.state_seq_get(seq_id(i), LlamaStateSeqFlags::empty()) {
            Ok(state) => state,
            Err(e) => {
                tracing::error!(error = %e, "cannot copy a sequence's state to host memory");
                return;
            }
        };
        let bytes = state.byte_len();
        if let Some(dropped) = self.host.insert(tokens.clone(), state, bytes) {
            self.shared.counters.host_saved(dropped as u64);
        }
        self.host_gauges();
    }

    /// Puts a state from the host cache (of `tokens`) into slot `slot`
    /// (emptied) and cuts it back to its first `n` tokens; returns the
    /// tokens the slot then holds (0 when llama.cpp could not place it,
    /// e.g. no run of free cells long enough).
    fn restore(
        &mut self,
        ctx: &mut LlamaContext<'_>,
        slot: usize,
        tokens: Vec<LlamaToken>,
        state: &SeqState,
        n: usize,
    ) -> usize {
        // Parked cells may hold the room it needs.
        let mut put = ctx.state_seq_set(state, seq_id(slot));
        if put.is_err() && self.unpark(ctx) {
            put = ctx.state_seq_set(state, seq_id(slot));
        }
        if let Err(e) = put {
            tracing::warn!(error = %e, "cannot restore a cached prefix; decoding it again");
            self.forget(ctx, slot);
            return 0;
        }
        self.shared.counters.host_restored();
        self.slots[slot].tokens = tokens;
        self.trim(ctx, slot, n);
        self.slots[slot].tokens.len()
    }

    pub(super) fn host_gauges(&self) {
        self.shared
            .counters
            .set_host_cache(self.host.bytes() as u64, self.host.len() as u64);
    }
}
