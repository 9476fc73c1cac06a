//! The order of the KV pool: cells given up while sequences run are parked
//! under [`PARK`], not freed, so that no sequence's next token lands in a
//! hole below its earlier cells; once no sequence runs they are freed and
//! the idle slots' cells moved to the bottom of the pool (see
//! [`Batcher::settle`]); idle slots keep at most `idle_cells` cells, the
//! least recently used going to the host cache. Which slot a sequence takes
//! is `placement`'s.

use llama_cpp_2::LlamaStateSeqFlags;
use llama_cpp_2::context::LlamaContext;

use super::{Batcher, PARK, PARKED_CELLS, free_cells, seq_id};

impl Batcher<'_, '_> {
    /// Keeps the cells of idle slots within `idle_cells`, moving the least
    /// recently used to the host cache. In one KV pool every token of a
    /// step scans the mask of every cell in use (up to the highest), so
    /// cells nobody decodes with slow all sequences down: measured, a pool
    /// holding the idle conversations of earlier requests took a
    /// 1,400-token prompt's TTFT to 13 s (llama-server: 6.8 s) and a single
    /// stream from 74 to 47 tokens/s.
    pub(super) fn shed_idle(&mut self, ctx: &mut LlamaContext<'_>) {
        loop {
            let idle: usize = self
                .slots
                .iter()
                .filter(|s| s.is_free())
                .map(|s| s.tokens.len())
                .sum();
            if idle <= self.idle_cells || !self.evict_idle(ctx) {
                return;
            }
        }
    }

    /// When no sequence runs and cells were given up since the last time,
    /// frees the parked cells and moves the idle slots' cells to the bottom
    /// of the pool, so that the pool has no free cell below one in use.
    ///
    /// llama.cpp puts each new token in the lowest free cell, and its CPU
    /// attention sums a sequence's cells in the order they lie in the pool
    /// (with an f16 accumulator): a sequence whose new tokens went into a
    /// hole below its earlier cells gets other logits than the same prompt
    /// decoded alone, and a seeded reply another text. With no holes when
    /// sequences start, and cells parked rather than freed while they run,
    /// every sequence's cells lie in position order whatever runs beside
    /// it. It also keeps idle prefixes left high up by a burst from widening
    /// every later step (every step attends over the cells up to the highest
    /// in use: in the llama-server benchmark, turn 7 of a conversation
    /// measured 1.09x llama-server's after the 16-stream rows, 1.00x run
    /// alone). The move is a copy out and back of at most [`IDLE_CELLS`]
    /// cells ([`Batcher::shed_idle`] keeps the idle slots within that).
    ///
    /// [`IDLE_CELLS`]: super::IDLE_CELLS
    pub(super) fn settle(&mut self, ctx: &mut LlamaContext<'_>) {
        if !self.cell_memory || self.slots.iter().any(|s| !s.is_free()) {
            return;
        }
        self.unpark(ctx);
        if !self.holes {
            return;
        }
        self.holes = false;
        self.shared.counters.kv_settled();
        let mut states = Vec::new();
        for i in 0..self.slots.len() {
            if self.slots[i].tokens.is_empty() {
                continue;
            }
            match ctx.state_seq_get(seq_id(i), LlamaStateSeqFlags::empty()) {
                Ok(state) => {
                    states.push((i, state));
                    free_cells(ctx, i, 0);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot copy an idle prefix; dropping it");
                    free_cells(ctx, i, 0);
                    self.slots[i].tokens.clear();
                }
            }
        }
        // Put back from the lowest free cell up, each in one run of cells.
        for (i, state) in states {
            if let Err(e) = ctx.state_seq_set(&state, seq_id(i)) {
                tracing::warn!(error = %e, "cannot put an idle prefix back; dropping it");
                free_cells(ctx, i, 0);
                self.slots[i].tokens.clear();
            }
        }
    }

    /// Gives up slot `i`'s cells from position `from` on without freeing
    /// them: they go to [`PARK`], freed by [`Batcher::settle`] once no
    /// sequence runs (or here, beyond [`PARKED_CELLS`]), so that no
    /// sequence's next token lands in a hole below its earlier cells (see
    /// there). False when the cells could not be cut at `from` (recurrent
    /// memory, which is then freed whole).
    pub(super) fn park(&mut self, ctx: &mut LlamaContext<'_>, i: usize, from: usize) -> bool {
        let cells = self.slots[i].tokens.len().saturating_sub(from);
        if self.cell_memory
            && cells > 0
            && ctx
                .kv_cache_seq_cp(seq_id(i), PARK, u32::try_from(from).ok(), None)
                .is_ok()
        {
            self.parked += cells;
        }
        let cut = free_cells(ctx, i, from) || {
            tracing::error!("cannot cut a sequence's KV cells back to a prefix");
            free_cells(ctx, i, 0);
            false
        };
        self.holes = true;
        if self.parked > PARKED_CELLS {
            self.unpark(ctx);
        }
        cut
    }

    /// Frees the parked cells; false when there were none.
    pub(super) fn unpark(&mut self, ctx: &mut LlamaContext<'_>) -> bool {
        if self.parked == 0 {
            return false;
        }
        if let Err(e) = ctx.clear_kv_cache_seq(u32::try_from(PARK).ok(), None, None) {
            tracing::error!(error = %e, "cannot free parked KV cells");
        }
        self.parked = 0;
        self.holes = true;
        true
    }

    /// Frees the cells of the least recently used idle slot that holds
    /// any (keeping its state in the host cache when worth it). False when
    /// no idle slot holds cells.
    pub(super) fn evict_idle(&mut self, ctx: &mut LlamaContext<'_>) -> bool {
        let Some(i) = (0..self.slots.len())
            .filter(|&i| self.slots[i].is_free() && !self.slots[i].tokens.is_empty())
            .min_by_key(|&i| self.slots[i].used_at)
        else {
            return false;
        };
        self.clear_slot(ctx, i);
        self.shared.counters.kv_evicted();
        true
    }
}
