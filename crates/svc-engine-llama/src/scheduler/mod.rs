//! The engine thread: the one OS thread that owns the llama.cpp context and
//! runs continuous batching over a fixed set of sequence slots.
//!
//! All slots share one pool of KV cells (llama.cpp's unified KV cache): a
//! sequence holds only the cells it has used, and cells copied from another
//! sequence are shared, not duplicated. Each step the thread ends sequences
//! whose consumer went away, admits waiting requests into free slots, builds
//! one `llama_batch` with the next token of every generating sequence plus
//! prompt chunks of newly admitted ones, decodes it, and samples one token
//! per sequence that asked for logits. Requests wait in a bounded queue in
//! [`Shared`]; the async side only pushes to it and reads the event channels.
//!
//! **Prefix reuse.** A slot whose generation ended keeps its tokens and KV
//! cells. A new request goes to the free slot whose tokens are a prefix of
//! its prompt; otherwise to an empty or the least recently used free slot,
//! which first gets the longest prefix any slot (running or not) shares with
//! the prompt, as a copy of those cells, or the state the host cache holds
//! for it (see `prefix`) when that goes further. Only the rest of the prompt
//! is decoded, at least its last token (whose logits start the reply). A
//! free slot's cells are given up when a new prompt needs the slot, when
//! idle slots hold more than [`IDLE_CELLS`] (their state then goes to the
//! host cache, when it is worth keeping), or when the pool has no room for
//! a step; when running sequences alone fill the pool, the newest one is
//! ended. Cells given up are parked under a sequence id of their own until
//! no sequence runs, then freed and the idle slots' cells moved to the
//! bottom of the pool: llama.cpp puts a new token in the lowest free cell,
//! and a sequence whose cells lay out of position order would be computed
//! differently (see [`Batcher::settle`]); so a seeded reply does not depend
//! on what runs beside it, as long as the pool has room.
//!
//! A sequence admitted with the same prompt as one whose prompt is not
//! decoded yet (the choices of a request with `n > 1`, admitted together
//! under a [`Hold`]) does not decode it again: once the other's prompt is
//! decoded, its KV cells are copied over and both sample from the same
//! logits, each with its own sampler.
//!
//! **Shares.** A job may name its owner (an API key, or the choices of one
//! request). An owner alone takes every free slot; its share, `per_owner`
//! slots (half of them by default), binds only while another owner's job
//! waits that its own share would let start: then the first owner's further
//! jobs wait while the other's are admitted past them, and when no slot is
//! free, the newest sequence of an owner holding more than its share is
//! suspended within the step to make room. A suspended sequence keeps
//! everything it had (its sampler, its text so far, its pending token) and
//! its KV cells, where they lie, under a spare sequence id, with a copy in
//! host memory when the host budget (`prefix_cache_bytes`, shared with the
//! saved prefixes, which make room for it) has room for one. When the pool
//! needs the room, its cells go: it then resumes from the copy, or, with
//! none, by decoding its tokens again (the same cells, bit for bit: every
//! step is batch-invariant). It resumes as soon as its owner may take a
//! slot again, before its owner's queued jobs, with the same bits as if it
//! had never stopped. So no one client keeps every
//! other waiting for a whole generation, and no slot idles while anyone has
//! work for it.
//!
//! This module must not block on a consumer: events go out on unbounded
//! channels, so a slow client never stalls the other sequences.
//!
//! **Parts.** The [`Batcher`] is split by what each part decides; this
//! module holds its state, the loop, the decoding of a step and what a
//! full pool or a failed decode ends:
//! - `queue`: the queue the async side pushes to ([`Shared`]), holds and
//!   pauses of admission, and which waiting job or suspended sequence takes
//!   a free slot (owners' shares, background work);
//! - `sequence`: a slot, the generation running in it, and how a job
//!   becomes one;
//! - `placement`: which free slot a new sequence takes and the prefix of
//!   its prompt it starts with (a slot's cells, a copy of another's, a
//!   state from the host cache);
//! - `pool`: the order of the KV pool: cells given up are parked while
//!   sequences run and the pool settled once none runs; idle slots keep at
//!   most [`IDLE_CELLS`];
//! - `suspend`: suspending a sequence of an owner beyond its share, where
//!   its cells are meanwhile, and resuming it;
//! - `follow`: one prompt decoded once for the sequences that share it;
//! - `batch`: one step's batch: building it, taking it back when the pool
//!   has no room, and sampling from its logits;
//! - `context`: the llama.cpp context and the size of its KV buffer.

mod batch;
mod context;
mod follow;
mod placement;
mod pool;
mod queue;
mod sequence;
mod suspend;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::SystemTime;

use llama_cpp_2::DecodeError;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::session::SeqState;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use svc_core::engine::{EngineError, EngineEvent, FinishReason, Sampling};
use svc_core::trace::Current;
use tokio::sync::mpsc::UnboundedSender;

use crate::kv_pages;
use crate::numerics::Kernels;
use crate::options::KvType;
use crate::prefix::HostCache;

use self::batch::Undo;
use self::context::{kv_buffer_bytes, new_context};
use self::queue::CloseOnExit;
#[cfg(feature = "testing")]
pub use self::queue::{Freeze, Pause};
pub(crate) use self::queue::{Hold, Shared};
use self::sequence::{Sequence, Slot};
use self::suspend::{Held, Suspended};

/// Where a sequence's events go; dropping the receiver cancels the sequence.
pub(crate) type Sink = UnboundedSender<Result<EngineEvent, EngineError>>;

/// A tokenized request, ready for a slot.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) prompt: Vec<LlamaToken>,
    pub(crate) sampling: Sampling,
    /// The grammar's sampler, built before the job was queued (parsing a
    /// grammar can take long; it must not happen on this thread).
    pub(crate) grammar: Option<LlamaSampler>,
    /// Completion tokens allowed; already fits in the context.
    pub(crate) max_tokens: u32,
    pub(crate) stop: Vec<String>,
    /// Never end at end-of-generation tokens (benchmarks).
    pub(crate) ignore_eos: bool,
    /// Report each token's log probability and this many alternatives.
    pub(crate) logprobs: Option<u8>,
    /// Score the prompt's own tokens (with `logprobs`' alternatives) before
    /// the reply: every prompt token is decoded for it, none reused.
    pub(crate) score_prompt: bool,
    /// Mark the text of the tool-call marker tokens in the reply (see
    /// [`ContextSettings::marked`]).
    pub(crate) mark_markers: bool,
    /// Who asks (an API key, or the choices of one request): while another
    /// owner's work waits, one owner's sequences hold at most
    /// [`Shared::per_owner`] slots, its further jobs waiting while the
    /// other's go ahead (see the module's docs). `None`: no cap.
    pub(crate) owner: Option<Arc<str>>,
    /// Work nobody waits on (a batch's line): started only when no other
    /// waiting job may start, in at most [`Batcher::background_slots`].
    pub(crate) background: bool,
    /// The request's trace, when it is recorded, and when this job was
    /// queued: the thread adds the spans of its wait and its prefill.
    pub(crate) trace: Option<(Current, SystemTime)>,
    pub(crate) sink: Sink,
}

/// The most KV cells idle slots keep in the pool: enough for the shared
/// system prompts of the next requests; whole conversations go to the host
/// cache (a copy each way, milliseconds) instead of widening every step's
/// attention (see [`Batcher::shed_idle`]).
const IDLE_CELLS: usize = 512;

/// The sequence id that holds cells given up while other sequences run
/// (see [`Batcher::park`]): llama.cpp's last (`LLAMA_MAX_SEQ` - 1; one pool
/// takes any id below it), so slots may number at most this many.
pub(crate) const PARK: i32 = 255;

/// The most cells parked at once; beyond this they are freed even while
/// sequences run (the pool's width costs every step more than the order
/// of a few sequences' cells is worth).
const PARKED_CELLS: usize = 1024;

/// Context settings the engine thread needs.
#[derive(Debug, Clone)]
pub(crate) struct ContextSettings {
    pub(crate) context_per_sequence: u32,
    pub(crate) parallel: u32,
    /// Cells of the shared KV pool.
    pub(crate) kv_cells: u32,
    pub(crate) kv_type: KvType,
    /// Host memory for saved prefixes.
    pub(crate) prefix_cache_bytes: usize,
    pub(crate) batch_size: u32,
    pub(crate) threads: i32,
    pub(crate) flash_attention: Option<bool>,
    /// The CPU backend's kernels (batch-invariant ones unless invariance is off).
    pub(crate) kernels: Kernels,
    /// Control tokens written into the reply as their text (the model
    /// family's tool-call markers); every other control token writes none.
    pub(crate) shown: Vec<LlamaToken>,
    /// The tool-call marker tokens, whose text a sequence that marks them
    /// writes with a mark before it (see `crate::text::TextAssembler::marking`).
    pub(crate) marked: Vec<LlamaToken>,
}

/// Runs the engine thread: creates the context, reports the per-sequence
/// context size (or why it failed) on `ready`, then batches until closed.
/// A sequence may use the whole pool, up to `context_per_sequence`.
pub(crate) fn run(
    model: Arc<LlamaModel>,
    settings: ContextSettings,
    shared: Arc<Shared>,
    ready: mpsc::Sender<Result<u32, String>>,
) {
    // On any exit, panics included, refuse new jobs and fail the waiting ones.
    let _guard = CloseOnExit(Arc::clone(&shared));
    let mut pool_bytes = 0;
    let (made, released) = kv_pages::make_context(
        || new_context(&model, &settings),
        |ctx| {
            let bytes = kv_buffer_bytes(&model, ctx.n_ctx(), settings.kv_type);
            pool_bytes = bytes.unwrap_or(0);
            bytes
        },
    );
    let mut ctx = match made {
        Ok(ctx) => ctx,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    shared.counters.kv_pool(pool_bytes as u64, released);
    tracing::debug!(
        cells = ctx.n_ctx(),
        pool_mib = pool_bytes >> 20,
        released_mib = released >> 20,
        "KV pool made; its untouched pages are not resident until used"
    );
    let context_per_sequence = settings.context_per_sequence.min(ctx.n_ctx());
    if ready.send(Ok(context_per_sequence)).is_err() {
        return;
    }
    // Recurrent state is not kept cell by cell: it cannot be cut back to a
    // prefix nor shared between sequences.
    let cell_memory = !model.is_recurrent() && !model.is_hybrid();
    let mut batcher = Batcher {
        model: &model,
        shown: settings.shown.clone(),
        marked: settings.marked.clone(),
        cell_memory,
        slots: (0..settings.parallel).map(|_| Slot::default()).collect(),
        batch: LlamaBatch::new(settings.batch_size as usize, 1),
        batch_size: settings.batch_size as usize,
        penalty_window: context_per_sequence,
        shared: &shared,
        next_serial: 0,
        clock: 0,
        host: HostCache::new(if cell_memory {
            settings.prefix_cache_bytes
        } else {
            0
        }),
        undo: Vec::new(),
        idle_cells: IDLE_CELLS.min(context_per_sequence as usize),
        parked: 0,
        holes: false,
        suspended: VecDeque::new(),
    };
    batcher.run(&mut ctx);
}

/// The engine thread's state: its slots, the batch, the host cache and
/// the suspended sequences. Its methods are spread over this module's parts
/// (see the module's docs).
struct Batcher<'a, 'm> {
    model: &'m LlamaModel,
    /// Control tokens written into replies as their text.
    shown: Vec<LlamaToken>,
    /// Tool-call marker tokens (see [`ContextSettings::marked`]).
    marked: Vec<LlamaToken>,
    /// Whether the model's memory is KV cells (not recurrent state): only
    /// then can a sequence be cut back to a prefix, or copied.
    cell_memory: bool,
    slots: Vec<Slot>,
    batch: LlamaBatch<'a>,
    batch_size: usize,
    penalty_window: u32,
    shared: &'a Shared,
    /// The serial of the next sequence.
    next_serial: u64,
    /// Counts admissions and releases, for least-recently-used choices.
    clock: u64,
    /// States of prefixes whose slot was taken for another prompt.
    host: HostCache<SeqState>,
    /// What the current batch changed (see [`Undo`]).
    undo: Vec<Undo>,
    /// The most cells idle slots keep in the pool (see [`Batcher::shed_idle`]).
    idle_cells: usize,
    /// Cells given up to [`PARK`] since it was last emptied.
    parked: usize,
    /// Whether cells were freed since the idle slots were last moved to the
    /// bottom of the pool (see [`Batcher::settle`]): the pool may have
    /// free cells below cells in use.
    holes: bool,
    /// Sequences that gave their slot to another owner's job, oldest first
    /// (see [`Batcher::preempt`]).
    suspended: VecDeque<Suspended>,
}

impl Batcher<'_, '_> {
    fn run(&mut self, ctx: &mut LlamaContext<'_>) {
        loop {
            self.drop_cancelled(ctx);
            if !self.admit(ctx) {
                return;
            }
            let (sequences, prompt_tokens) = self.build_batch();
            if self.batch.n_tokens() == 0 {
                continue;
            }
            match self.decode(ctx, sequences, prompt_tokens) {
                Ok(()) => {
                    let first_token = self.sample(ctx);
                    self.shared.freeze_point(first_token);
                    self.shed_idle(ctx);
                    self.settle(ctx);
                }
                Err(e) => {
                    tracing::error!(error = %e, "llama_decode failed");
                    self.fail_batch(ctx, &format!("decoding failed: {e}"));
                }
            }
        }
    }

    /// Decodes the batch. When the KV pool has no room for it, frees the
    /// cells of idle slots (least recently used first), then copies those
    /// of suspended sequences to host memory, and tries again; when running
    /// sequences alone fill the pool, ends the newest of them and decodes
    /// the rest.
    fn decode(
        &mut self,
        ctx: &mut LlamaContext<'_>,
        mut sequences: u64,
        mut prompt_tokens: u64,
    ) -> Result<(), DecodeError> {
        loop {
            match ctx.decode(&mut self.batch) {
                Ok(()) => {
                    self.shared.counters.step(sequences, prompt_tokens);
                    return Ok(());
                }
                Err(DecodeError::NoKvCacheSlot) => {
                    if self.unpark(ctx) {
                        continue;
                    }
                    if self.evict_idle(ctx) || self.spill_suspended(ctx) {
                        self.unpark(ctx);
                        continue;
                    }
                    self.take_back();
                    if !self.end_newest(ctx) {
                        return Err(DecodeError::NoKvCacheSlot);
                    }
                    (sequences, prompt_tokens) = self.build_batch();
                    if self.batch.n_tokens() == 0 {
                        return Ok(());
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Ends the most recently admitted sequence because the KV pool is
    /// full: with the reply so far (`length`) when it has one, else as
    /// overloaded (retry later). False when no sequence runs.
    fn end_newest(&mut self, ctx: &mut LlamaContext<'_>) -> bool {
        let Some(i) = (0..self.slots.len())
            .filter(|&i| !self.slots[i].is_free())
            .max_by_key(|&i| self.slots[i].seq.as_ref().map_or(0, |s| s.serial))
        else {
            return false;
        };
        tracing::warn!("the KV cache is full: ending the newest sequence");
        self.shared.counters.kv_full();
        if let Some(mut seq) = self.release(i) {
            if seq.generated == 0 {
                let _ = seq.sink.send(Err(EngineError::Overloaded(
                    "the KV cache is full; retry later".into(),
                )));
            } else {
                seq.finish(FinishReason::Length);
            }
        }
        self.forget(ctx, i);
        true
    }

    /// Ends sequences whose consumer dropped the stream. Their cells stay:
    /// they hold a valid prefix of the prompt (and reply).
    fn drop_cancelled(&mut self, ctx: &mut LlamaContext<'_>) {
        for i in 0..self.slots.len() {
            if self.slots[i]
                .seq
                .as_ref()
                .is_some_and(|s| s.sink.is_closed())
            {
                self.release(i);
                self.shared.counters.cancelled();
            }
        }
        while let Some(at) = self.suspended.iter().position(|s| s.seq.sink.is_closed()) {
            if let Some(gone) = self.suspended.remove(at) {
                self.let_go(ctx, gone.tokens.len(), gone.cells);
            }
            self.shared.counters.cancelled();
        }
    }

    /// Ends every sequence after a failed decode, and frees every cell:
    /// their state is unknown.
    fn fail_batch(&mut self, ctx: &mut LlamaContext<'_>, message: &str) {
        for i in 0..self.slots.len() {
            if let Some(seq) = self.release(i) {
                let _ = seq
                    .sink
                    .send(Err(EngineError::Internal(message.to_owned())));
            }
            self.slots[i].tokens.clear();
        }
        // Suspended sequences whose cells are in the pool lose them too:
        // they resume from their copy, or decode their tokens again.
        for suspended in &mut self.suspended {
            if let Held::Pool(_, copied) = std::mem::replace(&mut suspended.cells, Held::Dropped) {
                suspended.cells = copied.map_or(Held::Dropped, Held::Host);
            }
        }
        ctx.clear_kv_cache();
        self.parked = 0;
        self.holes = false;
    }

    /// Ends the generation in slot `i` and makes the slot available to
    /// waiting and new requests at once. Its cells stay for a request with
    /// the same prefix (recurrent memory is reset when the slot is taken).
    fn release(&mut self, i: usize) -> Option<Sequence> {
        let seq = self.slots[i].seq.take()?;
        self.clock += 1;
        self.slots[i].used_at = self.clock;
        let free = self.slots.iter().filter(|s| s.is_free()).count();
        self.shared.lock().free_slots = free;
        self.shared
            .counters
            .set_active((self.slots.len() - free) as u64);
        Some(seq)
    }
}

/// Frees the KV cells of slot `i`'s sequence from position `from` on (its
/// tokens are the caller's); false when llama.cpp cannot cut it there.
fn free_cells(ctx: &mut LlamaContext<'_>, i: usize, from: usize) -> bool {
    let from = (from > 0).then(|| u32::try_from(from).ok()).flatten();
    match ctx.clear_kv_cache_seq(u32::try_from(i).ok(), from, None) {
        Ok(cut) => cut,
        Err(e) => {
            tracing::error!(error = %e, "cannot free the KV cells of a sequence");
            false
        }
    }
}

/// The sequence id of slot `i`.
fn seq_id(i: usize) -> i32 {
    i32::try_from(i).unwrap_or(i32::MAX)
}

/// The position of the next token of a sequence holding `tokens`.
fn position(tokens: &[LlamaToken]) -> i32 {
    i32::try_from(tokens.len()).unwrap_or(i32::MAX)
}
