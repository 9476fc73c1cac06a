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

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::{KvCacheType, LlamaContextParams};
use llama_cpp_2::context::session::SeqState;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::{DecodeError, LlamaStateSeqFlags};
use svc_core::engine::{
    EngineError, EngineEvent, FinishReason, PromptLogprob, Sampling, TokenLogprob, TokenUsage,
};
use svc_core::trace::{Current, Value};
use tokio::sync::mpsc::UnboundedSender;

use crate::backend;
use crate::kv_pages;
use crate::logprobs::{self, Pending};
use crate::numerics::{self, Kernels};
use crate::options::KvType;
use crate::prefill;
use crate::prefix::{self, HostCache};
use crate::sampler::{self, Sampler};
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

/// State shared by the async side and the engine thread.
#[derive(Debug)]
pub(crate) struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    pub(crate) counters: Counters,
    queue_capacity: usize,
    parallel: u32,
    /// The most slots one owner's sequences hold while another owner's work
    /// waits (see [`Job::owner`]); 1 to `parallel`, as `LlamaEngineOptions::client_slots` gives it.
    per_owner: usize,
    /// Sequences admitted now stop the engine at their first token (tests:
    /// see `LlamaEngine::freeze_at_first_token`).
    #[cfg(feature = "testing")]
    freeze_armed: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
struct Queue {
    waiting: VecDeque<Job>,
    /// Slots with no sequence, as of the engine thread's last look.
    free_slots: usize,
    /// No more jobs: the engine is dropped or its thread ended.
    closed: bool,
    /// Owners whose jobs are held back (see [`Shared::hold`]), once per hold.
    held: Vec<Arc<str>>,
    /// No job is admitted (tests: see `LlamaEngine::pause_admission`).
    paused: bool,
    /// The engine thread is stopped for a [`Freeze`] (tests: see
    /// `LlamaEngine::freeze_at_first_token`).
    #[cfg(feature = "testing")]
    frozen: bool,
}

impl Shared {
    pub(crate) fn new(parallel: usize, queue_capacity: usize, per_owner: usize) -> Self {
        Shared {
            queue: Mutex::new(Queue {
                waiting: VecDeque::new(),
                free_slots: parallel,
                closed: false,
                held: Vec::new(),
                paused: false,
                #[cfg(feature = "testing")]
                frozen: false,
            }),
            wake: Condvar::new(),
            counters: Counters::default(),
            queue_capacity,
            parallel: u32::try_from(parallel).unwrap_or(u32::MAX),
            per_owner,
            #[cfg(feature = "testing")]
            freeze_armed: std::sync::atomic::AtomicBool::new(false),
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

    /// Keeps the engine thread from admitting `owner`'s queued jobs until
    /// the guard drops, so that jobs queued meanwhile (the choices of one
    /// request) are admitted in one go, and those with the same prompt
    /// share its decoding (see [`Batcher::admit`]). Other owners' jobs go
    /// on being admitted.
    pub(crate) fn hold(self: &Arc<Self>, owner: Arc<str>) -> Hold {
        self.lock().held.push(Arc::clone(&owner));
        Hold(Arc::clone(self), owner)
    }

    /// Keeps the engine thread from admitting any job until the guard
    /// drops; jobs queued meanwhile are then admitted in one go, as far as
    /// slots and shares allow. For tests that need requests decoded
    /// together whatever the machine's timing.
    #[cfg(feature = "testing")]
    pub(crate) fn pause(self: &Arc<Self>) -> Pause {
        self.lock().paused = true;
        Pause(Arc::clone(self))
    }

    /// Stops the engine thread after the step in which a sequence admitted
    /// from now on produces its first token, and keeps it stopped (no
    /// admission, no decoding) until the guard drops: what a test does
    /// meanwhile (queue another request) happens, whatever the machine's
    /// timing, before that sequence's next token.
    #[cfg(feature = "testing")]
    pub(crate) fn freeze_at_first_token(self: &Arc<Self>) -> Freeze {
        self.freeze_armed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        Freeze(Arc::clone(self))
    }

    /// Whether a sequence admitted now stops the engine at its first token
    /// (see [`Self::freeze_at_first_token`]).
    fn freezes_at_first_token(&self) -> bool {
        #[cfg(feature = "testing")]
        let armed = self.freeze_armed.load(std::sync::atomic::Ordering::SeqCst);
        #[cfg(not(feature = "testing"))]
        let armed = false;
        armed
    }

    /// Where the engine thread waits out a [`Freeze`]; `first_token`:
    /// whether the step just ended gave the first token of a sequence that
    /// stops it.
    fn freeze_point(&self, first_token: bool) {
        #[cfg(feature = "testing")]
        if first_token {
            let mut queue = self.lock();
            // Checked under the lock, which the freeze's drop takes before
            // it wakes this thread: no wake-up is missed.
            while self.freezes_at_first_token() && !queue.closed {
                queue.frozen = true;
                queue = self
                    .wake
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            queue.frozen = false;
        }
        #[cfg(not(feature = "testing"))]
        let _ = first_token;
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

fn new_context<'m>(
    model: &'m LlamaModel,
    settings: &ContextSettings,
) -> Result<LlamaContext<'m>, String> {
    let backend = backend::backend()?;
    let n_ctx = std::num::NonZeroU32::new(settings.kv_cells)
        .ok_or_else(|| "the KV cache must have room for at least one token".to_owned())?;
    let kv_type = match settings.kv_type {
        KvType::F16 => KvCacheType::F16,
        KvType::Q8_0 => KvCacheType::Q8_0,
    };
    let params = LlamaContextParams::default()
        .with_n_ctx(Some(n_ctx))
        .with_n_seq_max(settings.parallel)
        // One pool of cells for all sequences: each takes what it uses, and
        // a prefix copied from one sequence to another shares its cells. A
        // sequence attends only over its own cells (the mask hides others').
        .with_kv_unified(true)
        .with_type_k(kv_type)
        .with_type_v(kv_type)
        .with_n_batch(settings.batch_size)
        .with_n_ubatch(settings.batch_size.min(512))
        .with_n_threads(settings.threads)
        .with_n_threads_batch(settings.threads)
        .with_no_perf(true);
    // A quantized V cache needs flash attention.
    let flash_attention = match settings.kv_type {
        KvType::Q8_0 => Some(true),
        KvType::F16 => settings.flash_attention,
    };
    let params = match flash_attention {
        None => params,
        Some(on) => params.with_flash_attention_policy(if on {
            llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_ENABLED
        } else {
            llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_DISABLED
        }),
    };
    numerics::with_kernels(settings.kernels, || {
        model
            .new_context(backend, params)
            .map_err(|e| format!("cannot create the llama.cpp context: {e}"))
    })?
}

/// The size of the KV pool's buffer as llama.cpp allocates it for `cells`
/// cells (one K and one V tensor per layer, a row of each per cell), or
/// `None` for a model whose cache is laid out otherwise (recurrent state,
/// sliding-window layers in a second cache).
fn kv_buffer_bytes(model: &LlamaModel, cells: u32, kv_type: KvType) -> Option<usize> {
    if model.is_recurrent() || model.is_hybrid() {
        return None;
    }
    let arch = model.meta_val_str("general.architecture").ok()?;
    if model
        .meta_val_str(&format!("{arch}.attention.sliding_window"))
        .is_ok()
    {
        return None;
    }
    let heads = model.n_head() as usize;
    let head_dim = |key: &str| -> Option<usize> {
        match model.meta_val_str(&format!("{arch}.attention.{key}")) {
            Ok(value) => value.parse().ok(),
            Err(_) => (heads > 0).then(|| model.n_embd() as usize / heads),
        }
    };
    let kv_heads = model.n_head_kv() as usize;
    let row = |values: usize| match kv_type {
        KvType::F16 => values * 2,
        // blocks of 32 values: an f16 scale and 32 int8
        KvType::Q8_0 => values.div_ceil(32) * 34,
    };
    let per_layer =
        row(kv_heads * head_dim("key_length")?) + row(kv_heads * head_dim("value_length")?);
    Some(model.n_layer() as usize * cells as usize * per_layer)
}

/// A pause of all admission; see [`Shared::pause`].
#[cfg(feature = "testing")]
pub struct Pause(Arc<Shared>);

#[cfg(feature = "testing")]
impl Drop for Pause {
    fn drop(&mut self) {
        self.0.lock().paused = false;
        self.0.wake.notify_all();
    }
}

/// A freeze of the engine thread; see [`Shared::freeze_at_first_token`].
#[cfg(feature = "testing")]
pub struct Freeze(Arc<Shared>);

#[cfg(feature = "testing")]
impl Freeze {
    /// Waits until the engine thread has stopped (after a sequence's first
    /// token; a chat stream may not show that token's text before the
    /// next ones).
    ///
    /// # Panics
    /// When it has not stopped within a minute.
    pub async fn stopped(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !self.0.lock().frozen {
            assert!(
                std::time::Instant::now() < deadline,
                "the engine never stopped"
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
}

#[cfg(feature = "testing")]
impl Drop for Freeze {
    fn drop(&mut self) {
        self.0
            .freeze_armed
            .store(false, std::sync::atomic::Ordering::SeqCst);
        drop(self.0.lock());
        self.0.wake.notify_all();
    }
}

/// A hold on admission; see [`Shared::hold`].
pub(crate) struct Hold(Arc<Shared>, Arc<str>);

impl Drop for Hold {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        if let Some(at) = queue.held.iter().position(|o| *o == self.1) {
            queue.held.swap_remove(at);
        }
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

/// A sequence slot: the generation running in it, if any, and the tokens
/// whose KV cells its sequence id (the slot's index) holds at positions
/// `0..tokens.len()`, kept after the generation ends for the next request
/// that starts with them.
#[derive(Default)]
struct Slot {
    seq: Option<Sequence>,
    tokens: Vec<LlamaToken>,
    /// The batcher's clock when a generation last started or ended here.
    used_at: u64,
}

impl Slot {
    fn is_free(&self) -> bool {
        self.seq.is_none()
    }
}

/// One generation in a slot.
struct Sequence {
    /// Which sequence this is, for as long as the engine runs.
    serial: u64,
    /// Its job's [`Job::background`].
    background: bool,
    /// The serial of the sequence whose prompt (the same as this one's) this
    /// one waits for: once that prompt is decoded, its KV cells are copied
    /// here and this sequence samples from the same logits, so the prompt is
    /// decoded once for both.
    follows: Option<u64>,
    sink: Sink,
    /// Who asked (see [`Job::owner`]).
    owner: Option<Arc<str>>,
    /// Whether its first token stops the engine (tests: see
    /// [`Shared::freeze_at_first_token`]).
    freezes: bool,
    prompt: Vec<LlamaToken>,
    /// Prompt tokens whose KV cells the slot holds (reused or decoded).
    prompt_fed: usize,
    /// Prompt tokens whose KV cells were not decoded for it: a prefix
    /// reused from a slot or the host cache, or a leader's whole prompt.
    cached: usize,
    /// A sampled token not yet given to the model.
    pending: Option<LlamaToken>,
    /// Tokens whose cells were given up while it was suspended without a
    /// copy (see [`Held::Dropped`]), decoded again (no logits) before
    /// anything else; `refill_fed` of them are.
    refill: Vec<LlamaToken>,
    refill_fed: usize,
    /// Index in the current batch whose logits are this sequence's.
    logits_at: Option<i32>,
    sampler: Sampler,
    text: TextAssembler,
    generated: u32,
    max_tokens: u32,
    /// Alternatives to report per token, when log probabilities were asked for.
    logprobs: Option<u8>,
    /// Log probabilities of tokens whose text is not sent yet.
    unsent: Pending,
    /// The prompt's scores, while it is scored and not yet sent.
    score: Option<Scoring>,
    /// The request's trace, when recorded, and when this was admitted.
    trace: Option<(Current, SystemTime)>,
}

impl Sequence {
    /// Sends `text` (when not empty), after the log probabilities of the tokens it starts.
    fn send_text(&mut self, text: String) -> bool {
        if text.is_empty() {
            return true;
        }
        if self.logprobs.is_some() {
            let tokens = self.unsent.take(crate::text::unmarked_len(&text));
            if !tokens.is_empty() && self.sink.send(Ok(EngineEvent::Logprobs(tokens))).is_err() {
                return false;
            }
        }
        self.sink.send(Ok(EngineEvent::Text(text))).is_ok()
    }

    fn usage(&self) -> TokenUsage {
        TokenUsage {
            prompt_tokens: self.prompt.len() as u64,
            cached_tokens: self.cached as u64,
            completion_tokens: u64::from(self.generated),
            ..TokenUsage::default()
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

/// Most prompt tokens of a scored prompt one step decodes: each keeps a row
/// of logits (a row is the vocabulary's size in floats, 192 KiB for
/// SmolLM2's), and llama.cpp keeps the largest output buffer a step asked
/// for. The scores do not depend on it (the steps are batch-invariant).
const SCORED_PER_STEP: usize = 64;

/// What a scored prompt token takes of a step's room, in plain prompt
/// tokens: its row of logits (the model's output layer for it, and svc's
/// log-softmax over the vocabulary) costs more than the token itself.
/// Measured on the default model, 1 thread, release build: a 502-token
/// prompt took 1.12 s plain and 1.52 s scored (1.36x), rounded up.
const SCORED_COST: usize = 2;

/// A prompt being scored (see [`Job::score_prompt`]).
struct Scoring {
    /// Its tokens' log probabilities so far, in order.
    tokens: Vec<PromptLogprob>,
    /// Prompt tokens of the current batch, each as (index in the prompt,
    /// index in the batch): the logits there score the prompt's next token.
    at: Vec<(usize, i32)>,
}

/// A prompt token's text as the prompt held it: a control token written
/// out, as the prompt's text has it.
fn prompt_piece(model: &LlamaModel, token: LlamaToken) -> Vec<u8> {
    let mut piece = Vec::with_capacity(16);
    model
        .vocab()
        .token_to_piece_into(token, &mut piece, true, None);
    piece
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

/// What building the batch changed in one slot, to take back when the
/// decode found no room for it.
struct Undo {
    slot: usize,
    tokens: usize,
    prompt_fed: usize,
    refill_fed: usize,
    pending: Option<LlamaToken>,
}

impl Undo {
    /// What slot `i` (holding `tokens` cells, running `seq`) is before the
    /// step adds to it, and the token the step takes from `pending`.
    fn of(i: usize, tokens: usize, seq: &Sequence, pending: Option<LlamaToken>) -> Self {
        Undo {
            slot: i,
            tokens,
            prompt_fed: seq.prompt_fed,
            refill_fed: seq.refill_fed,
            pending,
        }
    }
}

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

/// A sequence that gave its slot to another owner's job (see
/// [`Batcher::preempt`]), until a slot is free for it again.
struct Suspended {
    seq: Sequence,
    /// The tokens its cells held, at positions `0..tokens.len()`.
    tokens: Vec<LlamaToken>,
    cells: Held,
}

/// Where a suspended sequence's KV cells are.
enum Held {
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
struct Copied {
    state: SeqState,
    bytes: usize,
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

    /// Keeps the cells of idle slots within `idle_cells`, moving the least
    /// recently used to the host cache. In one KV pool every token of a
    /// step scans the mask of every cell in use (up to the highest), so
    /// cells nobody decodes with slow all sequences down: measured, a pool
    /// holding the idle conversations of earlier requests took a
    /// 1,400-token prompt's TTFT to 13 s (llama-server: 6.8 s) and a single
    /// stream from 74 to 47 tokens/s.
    fn shed_idle(&mut self, ctx: &mut LlamaContext<'_>) {
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
    fn settle(&mut self, ctx: &mut LlamaContext<'_>) {
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
    fn park(&mut self, ctx: &mut LlamaContext<'_>, i: usize, from: usize) -> bool {
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
    fn unpark(&mut self, ctx: &mut LlamaContext<'_>) -> bool {
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
    fn evict_idle(&mut self, ctx: &mut LlamaContext<'_>) -> bool {
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

    /// Moves waiting jobs into free slots; waits when there is nothing to do.
    /// Returns false when the engine is closed.
    fn admit(&mut self, ctx: &mut LlamaContext<'_>) -> bool {
        let mut queue = self.shared.lock();
        loop {
            if queue.closed {
                drop(queue);
                for i in 0..self.slots.len() {
                    if let Some(seq) = &self.slots[i].seq {
                        let _ = seq.sink.send(Err(stopped()));
                    }
                    self.release(i);
                }
                for suspended in std::mem::take(&mut self.suspended) {
                    let _ = suspended.seq.sink.send(Err(stopped()));
                    self.let_go(ctx, suspended.tokens.len(), suspended.cells);
                }
                return false;
            }
            let mut resumable = true;
            loop {
                // Suspended interactive work first, then queued jobs (a
                // background one only when no other may start), then
                // suspended background work.
                while self.slots.iter().any(Slot::is_free) {
                    if resumable && let Some(at) = self.next_suspended(&queue, false) {
                        resumable = self.resume(ctx, at);
                    } else if let Some(job) = self.next_job(&mut queue) {
                        self.place(ctx, job);
                    } else if resumable && let Some(at) = self.next_suspended(&queue, true) {
                        resumable = self.resume(ctx, at);
                    } else {
                        break;
                    }
                }
                if self.slots.iter().any(Slot::is_free) || !self.preempt(ctx, &queue) {
                    break;
                }
            }
            let free = self.slots.iter().filter(|s| s.is_free()).count();
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

    /// The first waiting job that may start now: not held, and of an owner
    /// below its share of the slots; a background job only when no other
    /// may start and fewer than [`Self::background_slots`] run. Jobs whose
    /// client went away are dropped on the way.
    fn next_job(&mut self, queue: &mut Queue) -> Option<Job> {
        if queue.paused {
            return None;
        }
        let room_in_background = self.room_in_background();
        let mut background = None;
        let mut at = 0;
        while at < queue.waiting.len() {
            let job = &queue.waiting[at];
            if job.sink.is_closed() {
                queue.waiting.remove(at);
                self.shared.counters.cancelled();
                continue;
            }
            let may_start = self.may_take(queue, job.owner.as_ref());
            if may_start && !job.background {
                return queue.waiting.remove(at);
            }
            if may_start && room_in_background && background.is_none() {
                background = Some(at);
            }
            at += 1;
        }
        background.and_then(|at| queue.waiting.remove(at))
    }

    /// Whether a sequence of `owner` may take a free slot now: one of no
    /// owner always; else when the owner is not held and holds less than
    /// its share, or more while no other owner's work waits that could start
    /// within its own share (a client alone takes every slot). Beyond the
    /// share only where sequences can be suspended (KV cells, not
    /// recurrent state): another owner's job must be able to take a slot back.
    fn may_take(&self, queue: &Queue, owner: Option<&Arc<str>>) -> bool {
        let Some(owner) = owner else {
            return true;
        };
        !queue.held.contains(owner)
            && (self.running(owner) < self.shared.per_owner
                || (self.cell_memory && !self.others_wait(queue, owner)))
    }

    /// Whether a sequence or interactive job of another owner than `owner`
    /// waits that may start within its share.
    fn others_wait(&self, queue: &Queue, owner: &Arc<str>) -> bool {
        self.claimants(queue)
            .any(|claimant| claimant.is_none_or(|other| other != owner))
    }

    /// The owners (`None`: no owner) of the waiting work that may take a
    /// slot within its share: suspended sequences first, then queued
    /// interactive jobs, in order.
    fn claimants<'q>(&'q self, queue: &'q Queue) -> impl Iterator<Item = Option<&'q Arc<str>>> {
        let suspended = self
            .suspended
            .iter()
            .map(|s| (s.seq.background, s.seq.owner.as_ref()));
        let queued = queue
            .waiting
            .iter()
            .filter(|job| !job.sink.is_closed())
            .map(|job| (job.background, job.owner.as_ref()));
        suspended
            .chain(queued)
            .filter(|(background, _)| !background)
            .map(|(_, owner)| owner)
            .filter(|owner| {
                owner.is_none_or(|owner| {
                    !queue.held.contains(owner) && self.running(owner) < self.shared.per_owner
                })
            })
    }

    /// Whether fewer than [`Self::background_slots`] background sequences run.
    fn room_in_background(&self) -> bool {
        self.slots
            .iter()
            .filter_map(|s| s.seq.as_ref())
            .filter(|s| s.background)
            .count()
            < self.background_slots()
    }

    /// The first suspended sequence that may take a free slot now: of
    /// interactive work, or (`background`) of background work, within the
    /// background's slots, as for a queued job.
    fn next_suspended(&self, queue: &Queue, background: bool) -> Option<usize> {
        if queue.paused || (background && !self.room_in_background()) {
            return None;
        }
        self.suspended.iter().position(|s| {
            s.seq.background == background && self.may_take(queue, s.seq.owner.as_ref())
        })
    }

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
    fn preempt(&mut self, ctx: &mut LlamaContext<'_>, queue: &Queue) -> bool {
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
    fn let_go(&mut self, ctx: &mut LlamaContext<'_>, cells: usize, held: Held) {
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
    fn spill_suspended(&mut self, ctx: &mut LlamaContext<'_>) -> bool {
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
    fn resume(&mut self, ctx: &mut LlamaContext<'_>, at: usize) -> bool {
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

    /// The most slots background jobs hold at once: half (at least one),
    /// so that the others are free for interactive requests as they come.
    fn background_slots(&self) -> usize {
        (self.slots.len() / 2).max(1)
    }

    /// Slots `owner`'s sequences hold.
    fn running(&self, owner: &Arc<str>) -> usize {
        self.slots
            .iter()
            .filter_map(|s| s.seq.as_ref())
            .filter(|s| s.owner.as_ref() == Some(owner))
            .count()
    }

    /// Starts `job` in a free slot: the one that best continues its prompt,
    /// given the longest prefix any slot or the host cache has (see the
    /// module's docs).
    fn place(&mut self, ctx: &mut LlamaContext<'_>, job: Job) {
        if let Some(seq) = self.start(job) {
            self.seat(ctx, seq);
        }
    }

    /// Puts `seq`, whose prompt is not started, in a free slot: following
    /// a sequence decoding the same prompt, or with the longest prefix of
    /// its prompt at hand.
    fn seat(&mut self, ctx: &mut LlamaContext<'_>, mut seq: Sequence) {
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
    fn reuse(&mut self, ctx: &mut LlamaContext<'_>, prompt: &[LlamaToken]) -> (usize, usize) {
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
    fn take_slot(&mut self, ctx: &mut LlamaContext<'_>, except: Option<usize>) -> usize {
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
    fn clear_slot(&mut self, ctx: &mut LlamaContext<'_>, i: usize) {
        if self.slots[i].tokens.is_empty() {
            return;
        }
        self.save(ctx, i);
        self.forget(ctx, i);
    }

    /// Gives up the cells of slot `i` (see [`Batcher::park`]), and forgets its tokens.
    fn forget(&mut self, ctx: &mut LlamaContext<'_>, i: usize) {
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

    fn host_gauges(&self) {
        self.shared
            .counters
            .set_host_cache(self.host.bytes() as u64, self.host.len() as u64);
    }

    /// A sequence whose prompt is `prompt` and whose prompt is not decoded
    /// yet (and that follows no other): a new sequence with the same
    /// prompt can wait for it instead of decoding the prompt again; one
    /// that is `scored` (with that many alternatives a token) only for one
    /// scored alike, whose scores it then gets too. Not for recurrent
    /// memory, whose state is not copied cell by cell.
    fn leader_for(&self, prompt: &[LlamaToken], scored: Option<Option<u8>>) -> Option<u64> {
        if !self.cell_memory {
            return None;
        }
        self.slots
            .iter()
            .filter_map(|s| s.seq.as_ref())
            .find(|s| {
                s.follows.is_none()
                    && scored.is_none_or(|top| s.score.is_some() && s.logprobs == top)
                    && s.generated == 0
                    && s.prompt_fed < s.prompt.len()
                    && s.prompt == prompt
            })
            .map(|s| s.serial)
    }

    /// Followers of a sequence that went away decode their prompt themselves.
    fn orphan_followers(&mut self) {
        let serials: Vec<u64> = self
            .slots
            .iter()
            .filter_map(|s| s.seq.as_ref())
            .map(|s| s.serial)
            .collect();
        for seq in self.slots.iter_mut().filter_map(|s| s.seq.as_mut()) {
            if seq.follows.is_some_and(|leader| !serials.contains(&leader)) {
                seq.follows = None;
            }
        }
    }

    /// For each sequence whose prompt this step finished decoding: its
    /// followers get a copy of its KV cells and sample from its logits;
    /// scored ones get its scores too, suspended ones only its scores (see
    /// [`Batcher::scores_to_suspended`]).
    fn share_prompts(&mut self, ctx: &mut LlamaContext<'_>) {
        let leaders: Vec<(u64, usize, i32)> = (0..self.slots.len())
            .filter_map(|i| {
                let s = self.slots[i].seq.as_ref()?;
                let done = s.generated == 0 && s.prompt_fed == s.prompt.len();
                done.then_some(())?;
                s.logits_at.map(|at| (s.serial, i, at))
            })
            .collect();
        for (serial, leader, at) in leaders {
            let scores = self.slots[leader]
                .seq
                .as_ref()
                .and_then(|s| s.score.as_ref())
                .map(|score| score.tokens.clone());
            for i in 0..self.slots.len() {
                if self.slots[i]
                    .seq
                    .as_ref()
                    .is_none_or(|s| s.follows != Some(serial))
                {
                    continue;
                }
                let tokens = self.slots[leader].tokens.clone();
                let copied = ctx.kv_cache_seq_cp(seq_id(leader), seq_id(i), None, None);
                let Some(seq) = self.slots[i].seq.as_mut() else {
                    continue;
                };
                seq.follows = None;
                if let Err(e) = copied {
                    // It decodes the prompt itself from the next step on.
                    tracing::error!(error = %e, "cannot copy a prompt's KV cells");
                    continue;
                }
                seq.prompt_fed = seq.prompt.len();
                seq.cached = seq.prompt.len();
                seq.logits_at = Some(at);
                if let (Some(score), Some(scores)) = (seq.score.as_mut(), &scores) {
                    score.tokens.clone_from(scores);
                }
                self.slots[i].tokens = tokens;
                self.shared.counters.shared_prompt();
            }
            if let Some(scores) = scores {
                self.scores_to_suspended(serial, &scores);
            }
        }
    }

    /// A scored sequence suspended while it waited for the scored prompt
    /// of sequence `leader` (which just finished) gets its `scores` now and
    /// is no longer scored: it resumes as a new sequence would, with the
    /// prompt's cells at hand; one that asked for nothing more is done.
    fn scores_to_suspended(&mut self, leader: u64, scores: &[PromptLogprob]) {
        let mut at = 0;
        while at < self.suspended.len() {
            let seq = &mut self.suspended[at].seq;
            if seq.follows != Some(leader) || seq.score.is_none() {
                at += 1;
                continue;
            }
            seq.follows = None;
            seq.score = None;
            // A client gone is seen when it resumes, as ever.
            let _ = seq
                .sink
                .send(Ok(EngineEvent::PromptLogprobs(scores.to_vec())));
            self.shared.counters.shared_prompt();
            if seq.max_tokens > 0 {
                at += 1;
                continue;
            }
            if let Some(mut done) = self.suspended.remove(at) {
                // Its prompt's work was the leader's.
                done.seq.cached = done.seq.prompt.len();
                done.seq.finish(FinishReason::Length);
            }
        }
    }

    /// A sequence for `job`, or `None` (after telling the client) when it cannot start.
    fn start(&mut self, job: Job) -> Option<Sequence> {
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
        let score = job.score_prompt.then(|| {
            // The prompt's first token has no score; a BOS token the model
            // adds is not the prompt's text, and is not listed (a model
            // that adds none may have its BOS in the text: SmolLM2's is
            // `<|im_start|>`).
            let vocab = self.model.vocab();
            let added_bos = |first: LlamaToken| vocab.should_add_bos() && first == vocab.bos();
            let tokens = match job.prompt.first() {
                Some(&first) if !added_bos(first) => {
                    let bytes = prompt_piece(self.model, first);
                    vec![PromptLogprob {
                        token: String::from_utf8_lossy(&bytes).into_owned(),
                        bytes,
                        logprob: None,
                        top: Vec::new(),
                    }]
                }
                _ => Vec::new(),
            };
            Scoring {
                tokens,
                at: Vec::new(),
            }
        });
        Some(Sequence {
            serial,
            follows: None,
            text: if job.mark_markers {
                TextAssembler::new(&job.stop).marking()
            } else {
                TextAssembler::new(&job.stop)
            },
            sink: job.sink,
            owner: job.owner,
            freezes: self.shared.freezes_at_first_token(),
            background: job.background,
            prompt: job.prompt,
            prompt_fed: 0,
            cached: 0,
            pending: None,
            refill: Vec::new(),
            refill_fed: 0,
            logits_at: None,
            sampler,
            generated: 0,
            max_tokens: job.max_tokens,
            logprobs: job.logprobs,
            unsent: Pending::default(),
            score,
            trace: job.trace.map(|(trace, queued)| {
                let now = SystemTime::now();
                trace.span("engine: queue", queued, now, Vec::new());
                (trace, now)
            }),
        })
    }

    /// Fills the batch: first the next token of every generating sequence,
    /// then prompt chunks, within the batch size. Returns the sequences in
    /// it and the prompt tokens, and records what it changed in `undo`.
    fn build_batch(&mut self) -> (u64, u64) {
        self.batch.clear();
        self.undo.clear();
        let mut sequences = 0u64;
        let mut prompt_tokens = 0u64;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(seq) = slot.seq.as_mut() else {
                continue;
            };
            seq.logits_at = None;
            if seq.refill_fed < seq.refill.len() {
                continue;
            }
            let Some(token) = seq.pending.take() else {
                continue;
            };
            if self
                .batch
                .add(token, position(&slot.tokens), &[seq_id(i)], true)
                .is_err()
            {
                seq.pending = Some(token);
                continue;
            }
            self.undo
                .push(Undo::of(i, slot.tokens.len(), seq, Some(token)));
            slot.tokens.push(token);
            seq.logits_at = Some(self.batch.n_tokens() - 1);
            sequences += 1;
        }
        self.orphan_followers();
        let room = self
            .batch_size
            .saturating_sub(usize::try_from(self.batch.n_tokens()).unwrap_or(usize::MAX));
        for (i, n) in self.prompt_shares(room) {
            let slot = &mut self.slots[i];
            let Some(seq) = slot.seq.as_mut() else {
                continue;
            };
            self.undo.push(Undo::of(i, slot.tokens.len(), seq, None));
            sequences += 1;
            if seq.refill_fed < seq.refill.len() {
                // Cells given up while suspended, decoded again first.
                let end = seq.refill.len().min(seq.refill_fed + n);
                for &token in &seq.refill[seq.refill_fed..end] {
                    if self
                        .batch
                        .add(token, position(&slot.tokens), &[seq_id(i)], false)
                        .is_err()
                    {
                        break;
                    }
                    slot.tokens.push(token);
                    seq.refill_fed += 1;
                    prompt_tokens += 1;
                }
                continue;
            }
            let last = seq.prompt.len() - 1;
            for j in seq.prompt_fed..seq.prompt_fed + n {
                let scored = seq.score.as_mut().filter(|_| j < last);
                let wants_logits = j == last || scored.is_some();
                let token = seq.prompt[j];
                if self
                    .batch
                    .add(token, position(&slot.tokens), &[seq_id(i)], wants_logits)
                    .is_err()
                {
                    break;
                }
                let at = self.batch.n_tokens() - 1;
                if let Some(score) = scored {
                    score.at.push((j, at));
                }
                if j == last {
                    seq.logits_at = Some(at);
                }
                slot.tokens.push(token);
                seq.prompt_fed += 1;
                prompt_tokens += 1;
            }
        }
        (sequences, prompt_tokens)
    }

    /// The prompt work each sequence that has some takes this step, within
    /// `room` tokens of the batch, as (slot, tokens): shared between owners
    /// in turn, oldest sequence first within an owner (see `prefill`), so
    /// one key's long prompts do not hold another key's first token; a
    /// scored prompt's tokens cost [`SCORED_COST`] each, at most
    /// [`SCORED_PER_STEP`] a step. Tokens to decode again after a
    /// suspension come before a sequence's prompt.
    fn prompt_shares(&self, room: usize) -> Vec<(usize, usize)> {
        let mut claims = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            let Some(seq) = slot.seq.as_ref() else {
                continue;
            };
            if seq.follows.is_some() {
                continue;
            }
            let left = seq.prompt.len() - seq.prompt_fed;
            let (tokens, cost, ends) = if seq.refill_fed < seq.refill.len() {
                (seq.refill.len() - seq.refill_fed, 1, false)
            } else if seq.score.is_some() {
                // Each scored token keeps a row of logits for the step.
                (
                    left.min(SCORED_PER_STEP),
                    SCORED_COST,
                    left <= SCORED_PER_STEP,
                )
            } else {
                (left, 1, true)
            };
            if tokens > 0 {
                let claim = prefill::Claim {
                    // A sequence of no owner is an owner of its own.
                    owner: seq.owner.clone().ok_or(seq.serial),
                    background: seq.background,
                    tokens,
                    cost,
                    ends,
                };
                claims.push((seq.serial, i, claim));
            }
        }
        // Oldest first within an owner.
        claims.sort_by_key(|&(serial, _, _)| serial);
        let (slots, claims): (Vec<usize>, Vec<_>) =
            claims.into_iter().map(|(_, i, claim)| (i, claim)).unzip();
        slots
            .into_iter()
            .zip(prefill::shares(&claims, room))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    /// Takes back what the last `build_batch` changed (its decode did not happen).
    fn take_back(&mut self) {
        for undo in self.undo.drain(..).rev() {
            let slot = &mut self.slots[undo.slot];
            slot.tokens.truncate(undo.tokens);
            if let Some(seq) = slot.seq.as_mut() {
                seq.prompt_fed = undo.prompt_fed;
                seq.refill_fed = undo.refill_fed;
                seq.logits_at = None;
                if let Some(score) = seq.score.as_mut() {
                    score.at.clear();
                }
                if undo.pending.is_some() {
                    seq.pending = undo.pending;
                }
            }
        }
        self.batch.clear();
    }

    /// Samples one token for every sequence whose logits this step
    /// computed. True when one of them was the first of a sequence that
    /// stops the engine (see [`Shared::freeze_at_first_token`]).
    fn sample(&mut self, ctx: &mut LlamaContext<'_>) -> bool {
        self.score_prompts(ctx);
        self.share_prompts(ctx);
        self.send_scores();
        let mut first_token = false;
        for i in 0..self.slots.len() {
            let Some(seq) = self.slots[i].seq.as_mut() else {
                continue;
            };
            let Some(at) = seq.logits_at.take() else {
                continue;
            };
            if seq.max_tokens == 0 {
                // A scored prompt that asked for nothing more.
                if let Some(mut seq) = self.release(i) {
                    seq.finish(FinishReason::Length);
                }
                continue;
            }
            if seq.generated == 0
                && let Some((trace, admitted)) = &seq.trace
            {
                let count = |n: usize| Value::Int(i64::try_from(n).unwrap_or(i64::MAX));
                let attributes = vec![
                    (
                        "gen_ai.usage.input_tokens".to_owned(),
                        count(seq.prompt.len()),
                    ),
                    (
                        "gen_ai.usage.cached_input_tokens".to_owned(),
                        count(seq.cached),
                    ),
                ];
                trace.span("engine: prefill", *admitted, SystemTime::now(), attributes);
            }
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
            first_token |= seq.generated == 0 && seq.freezes;
            match self.on_token(i, token, logprob) {
                Next::Continue => {}
                Next::Finish(reason) => {
                    // Free the slot first: a client that sees the finish event
                    // may send its next request at once, and it must fit.
                    if let Some(mut seq) = self.release(i) {
                        seq.finish(reason);
                    }
                }
                Next::Gone => {
                    self.release(i);
                    self.shared.counters.cancelled();
                }
            }
        }
        first_token
    }

    /// Scores the prompt tokens this step decoded for a scored prompt (the
    /// logits after token `j` give token `j + 1`'s log probability).
    fn score_prompts(&mut self, ctx: &LlamaContext<'_>) {
        let model = self.model;
        for slot in &mut self.slots {
            let Some(seq) = slot.seq.as_mut() else {
                continue;
            };
            let Some(score) = seq.score.as_mut() else {
                continue;
            };
            let top = seq.logprobs.unwrap_or(0);
            for (j, at) in score.at.drain(..) {
                let Some(&next) = seq.prompt.get(j + 1) else {
                    continue;
                };
                let scored =
                    logprobs::token_logprob(ctx.get_logits_ith(at), next.0 as usize, top, |id| {
                        prompt_piece(model, LlamaToken(i32::try_from(id).unwrap_or(0)))
                    });
                score.tokens.push(PromptLogprob {
                    token: scored.token,
                    bytes: scored.bytes,
                    logprob: Some(scored.logprob),
                    top: scored.top,
                });
            }
        }
    }

    /// Sends each scored prompt's scores once all its tokens are decoded
    /// (its own, or its leader's: see [`Batcher::share_prompts`]).
    fn send_scores(&mut self) {
        for seq in self.slots.iter_mut().filter_map(|s| s.seq.as_mut()) {
            if seq.prompt_fed == seq.prompt.len()
                && let Some(score) = seq.score.take()
            {
                // A client gone is seen at the next token, as ever.
                let _ = seq.sink.send(Ok(EngineEvent::PromptLogprobs(score.tokens)));
            }
        }
    }

    /// Streams what `token` adds to the reply of slot `i` and decides whether it goes on.
    fn on_token(&mut self, i: usize, token: LlamaToken, logprob: Option<TokenLogprob>) -> Next {
        let Some(seq) = self.slots[i].seq.as_mut() else {
            return Next::Gone;
        };
        seq.generated += 1;
        let vocab = self.model.vocab();
        if vocab.is_eog(token) {
            return Next::Finish(FinishReason::Stop);
        }
        let mut piece = Vec::with_capacity(16);
        let shown = self.shown.contains(&token);
        vocab.token_to_piece_into(token, &mut piece, shown, None);
        if let Some(logprob) = logprob {
            seq.unsent.push(logprob);
        }
        let release = if self.marked.contains(&token) {
            seq.text.push_marker(&piece)
        } else {
            seq.text.push(&piece)
        };
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
