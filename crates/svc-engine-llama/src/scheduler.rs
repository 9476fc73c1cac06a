//! The engine thread: the one OS thread that owns the llama.cpp context and
//! runs continuous batching over a fixed set of sequence slots.
//!
//! Each step it drops sequences whose consumer went away (freeing their KV
//! cells at once), admits waiting requests into free slots, moves busy
//! sequences down into gaps (llama.cpp batches separate KV streams together
//! only when their ids are consecutive), builds one `llama_batch` with the
//! next token of every generating sequence plus prompt chunks of newly
//! admitted ones, decodes it, and samples one token per sequence that asked
//! for logits. Requests wait in a bounded queue in [`Shared`]; the async side
//! only pushes to it and reads the event channels.
//!
//! A sequence admitted with the same prompt as one whose prompt is not
//! decoded yet (the choices of a request with `n > 1`, admitted together
//! under a [`Hold`]) does not decode it again: once the other's prompt is
//! decoded, its KV cells are copied over and both sample from the same
//! logits, each with its own sampler.
//!
//! This module must not block on a consumer: events go out on unbounded
//! channels, so a slow client never stalls the other sequences.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use svc_core::engine::{
    EngineError, EngineEvent, FinishReason, Sampling, TokenLogprob, TokenUsage,
};
use tokio::sync::mpsc::UnboundedSender;

use crate::backend;
use crate::logprobs::{self, Pending};
use crate::sampler;
use crate::stats::Counters;
use crate::text::TextAssembler;

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
    pub(crate) sink: Sink,
}

/// State shared by the async side and the engine thread.
#[derive(Debug)]
pub(crate) struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    pub(crate) counters: Counters,
    queue_capacity: usize,
    parallel: u32,
}

#[derive(Debug)]
struct Queue {
    waiting: VecDeque<Job>,
    /// Slots with no sequence, as of the engine thread's last look.
    free_slots: usize,
    /// No more jobs: the engine is dropped or its thread ended.
    closed: bool,
    /// Holds on admission (see [`Shared::hold`]): jobs wait while above zero.
    held: usize,
}

impl Shared {
    pub(crate) fn new(parallel: usize, queue_capacity: usize) -> Self {
        Shared {
            queue: Mutex::new(Queue {
                waiting: VecDeque::new(),
                free_slots: parallel,
                closed: false,
                held: 0,
            }),
            wake: Condvar::new(),
            counters: Counters::default(),
            queue_capacity,
            parallel: u32::try_from(parallel).unwrap_or(u32::MAX),
        }
    }

    /// Sequence slots.
    pub(crate) fn parallel(&self) -> u32 {
        self.parallel
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue holds no invariant a panic could break halfway.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `job`, or refuses it when the free slots and the queue are
    /// taken. A `continuation` (a later pass of a request that already ran
    /// one) goes first and is never refused for a full queue: the request
    /// was admitted already.
    pub(crate) fn submit(&self, job: Job, continuation: bool) -> Result<(), EngineError> {
        let mut queue = self.lock();
        if queue.closed {
            return Err(EngineError::Unavailable("the engine has stopped".into()));
        }
        if continuation {
            queue.waiting.push_front(job);
        } else if queue.waiting.len() >= queue.free_slots + self.queue_capacity {
            return Err(EngineError::Overloaded(format!(
                "{} requests are already waiting",
                queue.waiting.len()
            )));
        } else {
            queue.waiting.push_back(job);
        }
        drop(queue);
        self.wake.notify_one();
        Ok(())
    }

    /// Keeps the engine thread from admitting queued jobs until the guard
    /// drops, so that jobs queued meanwhile (the choices of one request)
    /// are admitted in one go, and those with the same prompt share its
    /// decoding (see [`Batcher::admit`]).
    pub(crate) fn hold(self: &Arc<Self>) -> Hold {
        self.lock().held += 1;
        Hold(Arc::clone(self))
    }

    /// Requests waiting for a slot now.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Stops the engine thread after its current step.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_all();
    }
}

/// Context settings the engine thread needs.
#[derive(Debug, Clone)]
pub(crate) struct ContextSettings {
    pub(crate) context_per_sequence: u32,
    pub(crate) parallel: u32,
    pub(crate) batch_size: u32,
    pub(crate) threads: i32,
    pub(crate) flash_attention: Option<bool>,
}

/// Runs the engine thread: creates the context, reports the per-sequence
/// context size (or why it failed) on `ready`, then batches until closed.
pub(crate) fn run(
    model: Arc<LlamaModel>,
    settings: ContextSettings,
    shared: Arc<Shared>,
    ready: mpsc::Sender<Result<u32, String>>,
) {
    // On any exit, panics included, refuse new jobs and fail the waiting ones.
    let _guard = CloseOnExit(Arc::clone(&shared));
    let mut ctx = match new_context(&model, &settings) {
        Ok(ctx) => ctx,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let context_per_sequence = ctx.n_ctx() / settings.parallel.max(1);
    if ready.send(Ok(context_per_sequence)).is_err() {
        return;
    }
    let mut batcher = Batcher {
        model: &model,
        can_compact: !model.is_recurrent() && !model.is_hybrid(),
        slots: (0..settings.parallel).map(|_| None).collect(),
        batch: LlamaBatch::new(settings.batch_size as usize, 1),
        batch_size: settings.batch_size as usize,
        penalty_window: context_per_sequence,
        shared: &shared,
        next_serial: 0,
    };
    batcher.run(&mut ctx);
}

fn new_context<'m>(
    model: &'m LlamaModel,
    settings: &ContextSettings,
) -> Result<LlamaContext<'m>, String> {
    let backend = backend::backend()?;
    let n_ctx = settings
        .context_per_sequence
        .checked_mul(settings.parallel)
        .and_then(std::num::NonZeroU32::new)
        .ok_or_else(|| "context size must be above zero".to_owned())?;
    let params = LlamaContextParams::default()
        .with_n_ctx(Some(n_ctx))
        .with_n_seq_max(settings.parallel)
        // One KV stream per sequence: a sequence never attends over others'
        // cells, and its numbers do not depend on what else is in the batch.
        .with_kv_unified(false)
        .with_n_batch(settings.batch_size)
        .with_n_ubatch(settings.batch_size.min(512))
        .with_n_threads(settings.threads)
        .with_n_threads_batch(settings.threads)
        .with_no_perf(true);
    let params = match settings.flash_attention {
        None => params,
        Some(on) => params.with_flash_attention_policy(if on {
            llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_ENABLED
        } else {
            llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_DISABLED
        }),
    };
    model
        .new_context(backend, params)
        .map_err(|e| format!("cannot create the llama.cpp context: {e}"))
}

/// A hold on admission; see [`Shared::hold`].
pub(crate) struct Hold(Arc<Shared>);

impl Drop for Hold {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        queue.held = queue.held.saturating_sub(1);
        drop(queue);
        self.0.wake.notify_all();
    }
}

struct CloseOnExit(Arc<Shared>);

impl Drop for CloseOnExit {
    fn drop(&mut self) {
        let waiting = {
            let mut queue = self.0.lock();
            queue.closed = true;
            std::mem::take(&mut queue.waiting)
        };
        for job in waiting {
            let _ = job.sink.send(Err(stopped()));
        }
        self.0.counters.set_active(0);
    }
}

fn stopped() -> EngineError {
    EngineError::Unavailable("the engine has stopped".into())
}

/// One generation in a slot.
struct Sequence {
    /// Which sequence this is, for as long as the engine runs (its `seq_id`
    /// changes when it moves).
    serial: u64,
    /// The serial of the sequence whose prompt (the same as this one's) this
    /// one waits for: once that prompt is decoded, its KV cells are copied
    /// here and this sequence samples from the same logits, so the prompt is
    /// decoded once for both.
    follows: Option<u64>,
    seq_id: i32,
    sink: Sink,
    prompt: Vec<LlamaToken>,
    /// Prompt tokens already given to the model.
    prompt_fed: usize,
    /// Next position in this sequence's KV stream.
    n_past: i32,
    /// A sampled token not yet given to the model.
    pending: Option<LlamaToken>,
    /// Index in the current batch whose logits are this sequence's.
    logits_at: Option<i32>,
    sampler: LlamaSampler,
    text: TextAssembler,
    generated: u32,
    max_tokens: u32,
    /// Alternatives to report per token, when log probabilities were asked for.
    logprobs: Option<u8>,
    /// Log probabilities of tokens whose text is not sent yet.
    unsent: Pending,
}

impl Sequence {
    /// Sends `text` (when not empty), after the log probabilities of the tokens it starts.
    fn send_text(&mut self, text: String) -> bool {
        if text.is_empty() {
            return true;
        }
        if self.logprobs.is_some() {
            let tokens = self.unsent.take(text.len());
            if !tokens.is_empty() && self.sink.send(Ok(EngineEvent::Logprobs(tokens))).is_err() {
                return false;
            }
        }
        self.sink.send(Ok(EngineEvent::Text(text))).is_ok()
    }

    fn usage(&self) -> TokenUsage {
        TokenUsage {
            prompt_tokens: self.prompt.len() as u64,
            completion_tokens: u64::from(self.generated),
        }
    }

    /// Sends the held-back text and the finish event.
    fn finish(&mut self, reason: FinishReason) {
        let tail = self.text.finish();
        self.send_text(tail);
        let _ = self.sink.send(Ok(EngineEvent::Finish {
            reason,
            usage: self.usage(),
        }));
    }
}

/// What happened to a sequence after one sampled token.
enum Next {
    /// Feed the token back and go on.
    Continue,
    /// The reply is complete.
    Finish(FinishReason),
    /// The consumer went away.
    Gone,
}

struct Batcher<'a, 'm> {
    model: &'m LlamaModel,
    /// Whether sequences may move between KV streams (not for recurrent memory).
    can_compact: bool,
    slots: Vec<Option<Sequence>>,
    batch: LlamaBatch<'a>,
    batch_size: usize,
    penalty_window: u32,
    shared: &'a Shared,
    /// The serial of the next sequence.
    next_serial: u64,
}

impl Batcher<'_, '_> {
    fn run(&mut self, ctx: &mut LlamaContext<'_>) {
        loop {
            self.drop_cancelled(ctx);
            if !self.admit(ctx) {
                return;
            }
            self.compact(ctx);
            self.build_batch();
            if self.batch.n_tokens() == 0 {
                continue;
            }
            if let Err(e) = ctx.decode(&mut self.batch) {
                tracing::error!(error = %e, "llama_decode failed");
                self.fail_batch(ctx, &format!("decoding failed: {e}"));
                continue;
            }
            self.sample(ctx);
        }
    }

    /// Ends sequences whose consumer dropped the stream, freeing their KV cells.
    fn drop_cancelled(&mut self, ctx: &mut LlamaContext<'_>) {
        for i in 0..self.slots.len() {
            if self.slots[i].as_ref().is_some_and(|s| s.sink.is_closed()) {
                self.release(ctx, i);
                self.shared.counters.cancelled();
            }
        }
    }

    /// Moves waiting jobs into free slots; waits when there is nothing to do.
    /// Returns false when the engine is closed.
    fn admit(&mut self, ctx: &mut LlamaContext<'_>) -> bool {
        let mut queue = self.shared.lock();
        loop {
            if queue.closed {
                drop(queue);
                for i in 0..self.slots.len() {
                    if let Some(seq) = &self.slots[i] {
                        let _ = seq.sink.send(Err(stopped()));
                    }
                    self.release(ctx, i);
                }
                return false;
            }
            while let Some(free) = self.slots.iter().position(Option::is_none) {
                if queue.held > 0 {
                    break;
                }
                let Some(job) = queue.waiting.pop_front() else {
                    break;
                };
                if job.sink.is_closed() {
                    self.shared.counters.cancelled();
                    continue;
                }
                let mut seq = self.start(free, job);
                if let Some(seq) = seq.as_mut() {
                    seq.follows = self.leader_for(&seq.prompt);
                }
                self.slots[free] = seq;
            }
            let free = self.slots.iter().filter(|s| s.is_none()).count();
            queue.free_slots = free;
            let active = self.slots.len() - free;
            self.shared.counters.set_active(active as u64);
            if active > 0 {
                return true;
            }
            queue = self
                .shared
                .wake
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// A sequence whose prompt is `prompt` and whose decoding has not
    /// started (and that follows no other): a new sequence with the same
    /// prompt can wait for it instead of decoding the prompt again. Not for
    /// recurrent memory, whose state is not copied cell by cell.
    fn leader_for(&self, prompt: &[LlamaToken]) -> Option<u64> {
        if !self.can_compact {
            return None;
        }
        self.slots
            .iter()
            .flatten()
            .find(|s| s.follows.is_none() && s.prompt_fed == 0 && s.prompt == prompt)
            .map(|s| s.serial)
    }

    /// Followers of a sequence that went away decode their prompt themselves.
    fn orphan_followers(&mut self) {
        let serials: Vec<u64> = self.slots.iter().flatten().map(|s| s.serial).collect();
        for seq in self.slots.iter_mut().flatten() {
            if seq.follows.is_some_and(|leader| !serials.contains(&leader)) {
                seq.follows = None;
            }
        }
    }

    /// For each sequence whose prompt this step finished decoding: its
    /// followers get a copy of its KV cells and sample from its logits.
    fn share_prompts(&mut self, ctx: &mut LlamaContext<'_>) {
        let leaders: Vec<(u64, i32, i32, i32)> = self
            .slots
            .iter()
            .flatten()
            .filter(|s| s.generated == 0 && s.prompt_fed == s.prompt.len())
            .filter_map(|s| s.logits_at.map(|at| (s.serial, s.seq_id, s.n_past, at)))
            .collect();
        for (serial, seq_id, n_past, at) in leaders {
            for seq in self.slots.iter_mut().flatten() {
                if seq.follows != Some(serial) {
                    continue;
                }
                seq.follows = None;
                if let Err(e) = ctx.kv_cache_seq_cp(seq_id, seq.seq_id, None, None) {
                    // It decodes the prompt itself from the next step on.
                    tracing::error!(error = %e, "cannot copy a prompt's KV cells");
                    continue;
                }
                seq.prompt_fed = seq.prompt.len();
                seq.n_past = n_past;
                seq.logits_at = Some(at);
                self.shared.counters.shared_prompt();
            }
        }
    }

    /// Keeps the busy slots at the lowest ids. With one KV stream per sequence,
    /// llama.cpp puts sequences in one micro-batch only when their ids are
    /// consecutive, so a free slot below a busy one would split every step in
    /// two. The busy slot with the highest id moves into the gap: its KV stream
    /// is copied cell for cell (same positions, so its numbers do not change).
    /// Admission fills gaps first, so this runs only when nothing is waiting.
    fn compact(&mut self, ctx: &mut LlamaContext<'_>) {
        if !self.can_compact {
            return;
        }
        loop {
            let Some(gap) = self.slots.iter().position(Option::is_none) else {
                return;
            };
            let Some(last) = self.slots.iter().rposition(Option::is_some) else {
                return;
            };
            if last < gap {
                return;
            }
            let Some(mut seq) = self.slots[last].take() else {
                return;
            };
            let to = i32::try_from(gap).unwrap_or(i32::MAX);
            if seq.n_past > 0 {
                if let Err(e) = ctx.kv_cache_seq_cp(seq.seq_id, to, None, None) {
                    tracing::error!(error = %e, "cannot move a sequence's KV cells");
                    self.slots[last] = Some(seq);
                    return;
                }
                let from = u32::try_from(seq.seq_id).ok();
                if let Err(e) = ctx.clear_kv_cache_seq(from, None, None) {
                    tracing::error!(error = %e, "cannot free the KV cells of a sequence");
                }
            }
            seq.seq_id = to;
            self.slots[gap] = Some(seq);
            self.shared.counters.moved();
        }
    }

    /// A sequence for `job` in slot `slot`, or `None` (after telling the client) when it cannot start.
    fn start(&mut self, slot: usize, job: Job) -> Option<Sequence> {
        let sampler = match sampler::build(
            self.model,
            &job.sampling,
            job.grammar,
            self.penalty_window,
            job.ignore_eos,
        ) {
            Ok(sampler) => sampler,
            Err(e) => {
                let _ = job.sink.send(Err(e));
                return None;
            }
        };
        let serial = self.next_serial;
        self.next_serial += 1;
        Some(Sequence {
            serial,
            follows: None,
            seq_id: i32::try_from(slot).unwrap_or(i32::MAX),
            text: TextAssembler::new(&job.stop),
            sink: job.sink,
            prompt: job.prompt,
            prompt_fed: 0,
            n_past: 0,
            pending: None,
            logits_at: None,
            sampler,
            generated: 0,
            max_tokens: job.max_tokens,
            logprobs: job.logprobs,
            unsent: Pending::default(),
        })
    }

    /// Fills the batch: first the next token of every generating sequence,
    /// then prompt chunks, within the batch size.
    fn build_batch(&mut self) {
        self.batch.clear();
        let mut sequences = 0u64;
        let mut prompt_tokens = 0u64;
        for seq in self.slots.iter_mut().flatten() {
            seq.logits_at = None;
            if let Some(token) = seq.pending.take() {
                if self
                    .batch
                    .add(token, seq.n_past, &[seq.seq_id], true)
                    .is_ok()
                {
                    seq.logits_at = Some(self.batch.n_tokens() - 1);
                    seq.n_past += 1;
                    sequences += 1;
                } else {
                    seq.pending = Some(token);
                }
            }
        }
        self.orphan_followers();
        for seq in self.slots.iter_mut().flatten() {
            if seq.follows.is_some() {
                continue;
            }
            let room = self
                .batch_size
                .saturating_sub(usize::try_from(self.batch.n_tokens()).unwrap_or(usize::MAX));
            let left = seq.prompt.len() - seq.prompt_fed;
            if left == 0 || room == 0 {
                continue;
            }
            let take = left.min(room);
            let last = seq.prompt.len() - 1;
            for i in seq.prompt_fed..seq.prompt_fed + take {
                let wants_logits = i == last;
                if self
                    .batch
                    .add(seq.prompt[i], seq.n_past, &[seq.seq_id], wants_logits)
                    .is_err()
                {
                    break;
                }
                if wants_logits {
                    seq.logits_at = Some(self.batch.n_tokens() - 1);
                }
                seq.n_past += 1;
                seq.prompt_fed += 1;
                prompt_tokens += 1;
            }
            sequences += 1;
        }
        if self.batch.n_tokens() > 0 {
            self.shared.counters.step(sequences, prompt_tokens);
        }
    }

    /// Samples one token for every sequence whose logits this step computed.
    fn sample(&mut self, ctx: &mut LlamaContext<'_>) {
        self.share_prompts(ctx);
        for i in 0..self.slots.len() {
            let Some(seq) = self.slots[i].as_mut() else {
                continue;
            };
            let Some(at) = seq.logits_at.take() else {
                continue;
            };
            let token = seq.sampler.sample(ctx, at);
            let logprob = seq.logprobs.map(|top| {
                let vocab = self.model.vocab();
                logprobs::token_logprob(ctx.get_logits_ith(at), token.0 as usize, top, |id| {
                    let mut piece = Vec::with_capacity(16);
                    let id = LlamaToken(i32::try_from(id).unwrap_or(0));
                    vocab.token_to_piece_into(id, &mut piece, false, None);
                    piece
                })
            });
            self.shared.counters.generated();
            match self.on_token(i, token, logprob) {
                Next::Continue => {}
                Next::Finish(reason) => {
                    // Free the slot first: a client that sees the finish event
                    // may send its next request at once, and it must fit.
                    if let Some(mut seq) = self.release(ctx, i) {
                        seq.finish(reason);
                    }
                }
                Next::Gone => {
                    self.release(ctx, i);
                    self.shared.counters.cancelled();
                }
            }
        }
    }

    /// Streams what `token` adds to the reply of slot `i` and decides whether it goes on.
    fn on_token(&mut self, i: usize, token: LlamaToken, logprob: Option<TokenLogprob>) -> Next {
        let Some(seq) = self.slots[i].as_mut() else {
            return Next::Gone;
        };
        seq.generated += 1;
        let vocab = self.model.vocab();
        if vocab.is_eog(token) {
            return Next::Finish(FinishReason::Stop);
        }
        let mut piece = Vec::with_capacity(16);
        vocab.token_to_piece_into(token, &mut piece, false, None);
        if let Some(logprob) = logprob {
            seq.unsent.push(logprob);
        }
        let release = seq.text.push(&piece);
        if !seq.send_text(release.text) {
            return Next::Gone;
        }
        if release.stopped {
            return Next::Finish(FinishReason::Stop);
        }
        if seq.generated >= seq.max_tokens {
            return Next::Finish(FinishReason::Length);
        }
        seq.pending = Some(token);
        Next::Continue
    }

    /// Ends every sequence after a failed decode: their KV cells are in an unknown state.
    fn fail_batch(&mut self, ctx: &mut LlamaContext<'_>, message: &str) {
        for i in 0..self.slots.len() {
            if let Some(seq) = &self.slots[i] {
                let _ = seq
                    .sink
                    .send(Err(EngineError::Internal(message.to_owned())));
                self.release(ctx, i);
            }
        }
    }

    /// Empties slot `i`, frees its KV cells, and makes the slot available to
    /// waiting and new requests at once.
    fn release(&mut self, ctx: &mut LlamaContext<'_>, i: usize) -> Option<Sequence> {
        let seq = self.slots[i].take()?;
        let seq_id = u32::try_from(seq.seq_id).ok();
        if let Err(e) = ctx.clear_kv_cache_seq(seq_id, None, None) {
            tracing::error!(error = %e, "cannot free the KV cells of a sequence");
        }
        let free = self.slots.iter().filter(|s| s.is_none()).count();
        self.shared.lock().free_slots = free;
        self.shared
            .counters
            .set_active((self.slots.len() - free) as u64);
        Some(seq)
    }
}
