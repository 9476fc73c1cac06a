//! Suspension: a sequence of an owner beyond its share gives its slot to
//! another owner's waiting work within the step, keeping everything it had
//! ([`Suspended`]); its KV cells stay in the pool under a spare sequence id,
//! with a copy in host memory when the budget has room ([`Held`]), until the
//! pool needs the room; it resumes from them, from the copy, or by decoding
//! its tokens again. When a sequence may resume is `queue`'s.

use llama_cpp_2::LlamaStateSeqFlags;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::session::SeqState;
use llama_cpp_2::token::LlamaToken;

use super::queue::Queue;
use super::sequence::{Sequence, Slot};
use super::{Batcher, PARK, PARKED_CELLS, free_cells, seq_id};

/// A sequence that gave its slot to another owner's job (see
/// [`Batcher::preempt`]), until a slot is free for it again.
pub(super) struct Suspended {
    pub(super) seq: Sequence,
    /// The tokens its cells held, at positions `0..tokens.len()`.
    pub(super) tokens: Vec<LlamaToken>,
    pub(super) cells: Held,
}

/// Where a suspended sequence's KV cells are.
pub(super) enum Held {
    /// In the pool, where they were, under this spare sequence id (one of
    /// `parallel..PARK`), so that their order in the pool is kept; and a
    /// copy in host memory when the host budget had room for it, for when
    /// the pool needs the room (llama.cpp copies out only the ids below
    /// `parallel`, so the copy is taken at once or never).
    Pool(i32, Option<Copied>),
    /// In host memory only (no spare id, or the pool needed the room).
    Host(Copied),
    /// Nowhere: the pool needed the room and no copy fit the host budget.
    /// The sequence decodes its tokens again when it resumes.
    Dropped,
}

/// A suspended sequence's cells copied to host memory, and their size, set
/// aside in the host cache's budget until the copy goes
/// ([`Batcher::let_go`]).
pub(super) struct Copied {
    state: SeqState,
    bytes: usize,
}

impl Batcher<'_, '_> {
    /// When no slot is free and waiting work may start within its owner's
    /// share, suspends the newest sequence of the owner furthest beyond its
    /// share (another owner than the waiting work's), so that the waiting
    /// work starts this step, that owner's background work first. Its cells
    /// stay where they lie, under a spare sequence id, with a copy in host
    /// memory for when the pool needs the room (see [`Held`]). False when
    /// nothing was suspended. Not for a sequence others wait on (a prompt's
    /// leader). A follower holds no cells yet: when it resumes it starts as
    /// a new sequence would (see [`Batcher::recompute`]), a scored one with
    /// its leader's scores when they came meanwhile (see
    /// [`Batcher::scores_to_suspended`]).
    pub(super) fn preempt(&mut self, ctx: &mut LlamaContext<'_>, queue: &Queue) -> bool {
        if !self.cell_memory || queue.paused {
            return false;
        }
        let Some(claimant) = self.claimants(queue).next().map(|o| o.cloned()) else {
            return false;
        };
        let per_owner = self.shared.per_owner;
        let followed = |serial: u64| {
            self.slots
                .iter()
                .filter_map(|s| s.seq.as_ref())
                .any(|s| s.follows == Some(serial))
        };
        let victim = (0..self.slots.len())
            .filter_map(|i| {
                let seq = self.slots[i].seq.as_ref()?;
                let owner = seq.owner.as_ref()?;
                let over = self.running(owner).checked_sub(per_owner + 1)?;
                let movable = !followed(seq.serial) && claimant.as_ref() != Some(owner);
                movable.then_some((i, (over, seq.background, seq.serial)))
            })
            .max_by_key(|&(_, order)| order);
        let Some((i, _)) = victim else {
            return false;
        };
        let following = self.slots[i]
            .seq
            .as_ref()
            .is_some_and(|s| s.follows.is_some());
        let cells = if following {
            Held::Dropped
        } else {
            self.hold_cells(ctx, i)
        };
        // Not `release`: the queue is locked here (`admit` counts the free slots).
        let Some(mut seq) = self.slots[i].seq.take() else {
            return false;
        };
        if seq.score.is_none() {
            // It decodes its prompt itself, or follows again, when it resumes.
            seq.follows = None;
        }
        self.clock += 1;
        self.slots[i].used_at = self.clock;
        let tokens = std::mem::take(&mut self.slots[i].tokens);
        self.suspended.push_back(Suspended { seq, tokens, cells });
        self.shared.counters.suspended();
        true
    }

    /// Takes slot `i`'s cells from it for a suspended sequence: moved, in
    /// place, to a spare sequence id (with a copy in host memory when the
    /// budget has room), else copied to host memory, else given up to be
    /// decoded again (see [`Held`]).
    fn hold_cells(&mut self, ctx: &mut LlamaContext<'_>, i: usize) -> Held {
        let spare = (seq_id(self.slots.len())..PARK).find(|id| {
            !self
                .suspended
                .iter()
                .any(|s| matches!(s.cells, Held::Pool(held, _) if held == *id))
        });
        let copied = self.copy_out(ctx, i);
        if let Some(spare) = spare {
            match ctx.kv_cache_seq_cp(seq_id(i), spare, None, None) {
                // The cells stay in use (by the spare id): no hole.
                Ok(()) if free_cells(ctx, i, 0) => return Held::Pool(spare, copied),
                Ok(()) => {
                    let _ = ctx.clear_kv_cache_seq(u32::try_from(spare).ok(), None, None);
                }
                Err(e) => tracing::warn!(error = %e, "cannot move a suspended sequence's cells"),
            }
        }
        self.park(ctx, i, 0);
        copied.map_or(Held::Dropped, Held::Host)
    }

    /// A copy of slot `i`'s cells in host memory, its bytes set aside in
    /// the host cache's budget (cached prefixes make room); `None` when it
    /// does not fit there (or cannot be taken).
    fn copy_out(&mut self, ctx: &mut LlamaContext<'_>, i: usize) -> Option<Copied> {
        if self.slots[i].tokens.is_empty() {
            return None;
        }
        let flags = LlamaStateSeqFlags::empty();
        let bytes = ctx.state_seq_get_size_ext(seq_id(i), flags);
        let dropped = self.host.reserve(bytes)?;
        self.shared.counters.host_evicted(dropped as u64);
        let copied = match ctx.state_seq_get(seq_id(i), flags) {
            Ok(state) => Some(Copied { state, bytes }),
            Err(e) => {
                tracing::warn!(error = %e, "cannot copy a suspended sequence's cells");
                self.host.release(bytes);
                None
            }
        };
        self.host_gauges();
        copied
    }

    /// Gives up what a suspended sequence holds: its cells in the pool, if
    /// there, and its copy's share of the host budget.
    pub(super) fn let_go(&mut self, ctx: &mut LlamaContext<'_>, cells: usize, held: Held) {
        let copied = match held {
            Held::Pool(id, copied) => {
                self.park_held(ctx, id, cells);
                copied
            }
            Held::Host(copied) => Some(copied),
            Held::Dropped => None,
        };
        if let Some(copied) = copied {
            self.host.release(copied.bytes);
            self.host_gauges();
        }
    }

    /// Gives up the cells of the most recently suspended sequence still
    /// holding cells in the pool (see [`Batcher::park`]), which then
    /// resumes from its copy in host memory, or without one by decoding
    /// its tokens again: room for a step. False when none holds any.
    pub(super) fn spill_suspended(&mut self, ctx: &mut LlamaContext<'_>) -> bool {
        let Some(at) = self
            .suspended
            .iter()
            .rposition(|s| matches!(s.cells, Held::Pool(..)))
        else {
            return false;
        };
        let Some(Suspended { seq, tokens, cells }) = self.suspended.remove(at) else {
            return false;
        };
        let cells = match cells {
            Held::Pool(id, copied) => {
                self.park_held(ctx, id, tokens.len());
                self.shared.counters.spilled();
                copied.map_or(Held::Dropped, Held::Host)
            }
            elsewhere => elsewhere,
        };
        self.suspended.insert(at, Suspended { seq, tokens, cells });
        true
    }

    /// Gives up the `cells` cells of spare id `id` to [`PARK`] (see [`Batcher::park`]).
    fn park_held(&mut self, ctx: &mut LlamaContext<'_>, id: i32, cells: usize) {
        if cells > 0 && ctx.kv_cache_seq_cp(id, PARK, None, None).is_ok() {
            self.parked += cells;
        }
        let _ = ctx.clear_kv_cache_seq(u32::try_from(id).ok(), None, None);
        self.holes = true;
        if self.parked > PARKED_CELLS {
            self.unpark(ctx);
        }
    }

    /// Puts suspended sequence `at` back into a free slot, with its cells
    /// (decoded again where they were given up without a copy). False
    /// (and it stays suspended) when they were copied out and the pool has
    /// no room for them even without the idle slots' cells.
    pub(super) fn resume(&mut self, ctx: &mut LlamaContext<'_>, at: usize) -> bool {
        let Some(mut suspended) = self.suspended.remove(at) else {
            return false;
        };
        if matches!(suspended.cells, Held::Dropped) {
            self.recompute(ctx, suspended);
            return true;
        }
        let slot = self.take_slot(ctx, None);
        let put = match &suspended.cells {
            Held::Pool(id, _) => ctx
                .kv_cache_seq_cp(*id, seq_id(slot), None, None)
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    ctx.clear_kv_cache_seq(u32::try_from(*id).ok(), None, None)
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }),
            Held::Host(copied) => {
                let mut put = ctx.state_seq_set(&copied.state, seq_id(slot));
                while put.is_err() && (self.unpark(ctx) || self.evict_idle(ctx)) {
                    put = ctx.state_seq_set(&copied.state, seq_id(slot));
                }
                put.map(|_| ()).map_err(|e| e.to_string())
            }
            Held::Dropped => Ok(()),
        };
        if let Err(e) = put {
            free_cells(ctx, slot, 0);
            if self.slots.iter().all(Slot::is_free) {
                // An empty pool would have taken it: decode it again.
                tracing::warn!(error = %e, "cannot restore a suspended sequence; decoding it again");
                let cells = std::mem::replace(&mut suspended.cells, Held::Dropped);
                self.let_go(ctx, suspended.tokens.len(), cells);
                self.recompute(ctx, suspended);
                return true;
            }
            tracing::debug!(error = %e, "no room to resume a suspended sequence yet");
            self.suspended.insert(at, suspended);
            return false;
        }
        let Suspended { seq, tokens, cells } = suspended;
        // Its cells are back in the slot: only the copy's budget goes.
        let cells = match cells {
            Held::Pool(_, copied) => copied.map_or(Held::Dropped, Held::Host),
            elsewhere => elsewhere,
        };
        self.let_go(ctx, 0, cells);
        self.shared.counters.resumed();
        self.clock += 1;
        let slot = &mut self.slots[slot];
        slot.tokens = tokens;
        slot.seq = Some(seq);
        slot.used_at = self.clock;
        true
    }

    /// Puts a suspended sequence whose cells were given up back into a free
    /// slot: the longest prefix of its tokens at hand (see
    /// [`Batcher::reuse`]), the rest decoded again before its next token.
    /// One that had not started (a follower) is seated as a new one is.
    fn recompute(&mut self, ctx: &mut LlamaContext<'_>, suspended: Suspended) {
        let Suspended {
            mut seq, tokens, ..
        } = suspended;
        if tokens.is_empty() && seq.prompt_fed == 0 {
            self.shared.counters.resumed();
            self.seat(ctx, seq);
            return;
        }
        let (slot, n) = self.reuse(ctx, &tokens);
        // What an earlier resume had not decoded again yet follows.
        let mut refill = tokens[n..].to_vec();
        refill.extend_from_slice(&seq.refill[seq.refill_fed..]);
        seq.refill = refill;
        seq.refill_fed = 0;
        self.shared.counters.resumed();
        self.shared.counters.recomputed();
        self.clock += 1;
        let slot = &mut self.slots[slot];
        slot.seq = Some(seq);
        slot.used_at = self.clock;
    }
}
