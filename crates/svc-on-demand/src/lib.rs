//! Models on demand: the local models (GGUF files) of a server, each
//! loaded when first asked (or at start, for a preloaded one), unloaded when
//! idle, and sharing `models_memory`. [`ResidentPool::add`] wraps a model's
//! loader as an [`Engine`] that offers what the loaded engine will offer
//! and forwards every call to it.
//!
//! - A load runs in a task of its own (the GGUF loader on a blocking
//!   thread), so the other models keep serving; the requests that ask
//!   during a load wait for that one load, up to `load_timeout`, then get
//!   [`EngineError::Unavailable`] (503 with `Retry-After`).
//! - A failed load answers every waiting request with an error naming the
//!   file and the cause; the next request tries again.
//! - Each request holds its model (a stream until it ends or is dropped,
//!   see `hold`): no model is unloaded while one is running, unless the
//!   pool ends it (below). After the last one ends the model stays
//!   `keep_alive` (`forever` pins it).
//! - A freshly loaded model is the requests' that waited for it: it is not
//!   evicted before they take it (else two models that do not fit
//!   together evict each other's fresh load, and load again, in turn).
//! - A request that does no inference never loads a model: the prompt's
//!   count of a model not loaded is its tokenizer's (a vocab-only load of
//!   the GGUF, made once, see [`Model::counter`]) or the plain estimate.
//! - `models_memory` bounds the bytes of all resident models of the pool.
//!   Loads take room in the order they asked for it; a later one goes
//!   ahead only into free room that the earlier ones will not need.
//!   Before a load, the least recently used idle, unpinned models are
//!   unloaded until the new one fits. When that is not enough, the models
//!   in use whose room it needs are drained: they take no new request
//!   (those wait for their next load), and once their running requests
//!   have held the room `max_hold` since that model was drained they are
//!   ended with an error and the model is unloaded. A fresh load is
//!   drained only once its waiting requests took it. Only models kept
//!   forever are never drained (when they hold the room, the load fails at
//!   once: nothing would free it).
//! - A model loads at most `max_loads_per_minute` times in any minute; a
//!   load past it waits, up to `load_timeout`.
//! - The admin API loads a model and unloads it ([`Residence`]): an
//!   unload of a model in use waits for its running requests to end, or,
//!   forced, ends them.
//! - A loaded model's bytes are what its engine says it holds now
//!   (weights, KV cells, saved prefixes); before its first load, what
//!   its GGUF's header says it will take. An unloaded engine's bytes count
//!   until its last reference is dropped (a request the pool ended lets go
//!   of it once its work is dropped): a load never starts in memory an
//!   engine still takes.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use svc_core::engine::{
    Capability, EmbedRequest, Embedder, Embeddings, Engine, EngineError, EngineStatus, EventStream,
    GenerateRequest, Generator, RerankRequest, Reranked, Reranker, Residence, Residency,
    ResidencyState, Speaker, Speech, SpeechRequest, TranscribeRequest, Transcriber, Transcript,
    Unload, estimate_tokens,
};
use tokio::sync::{Notify, OnceCell, watch};

use self::hold::{Guarded, Hold};

mod hold;

/// `max_hold` when the configuration gives none (1 minute, half of svc's
/// default `load_timeout`, so that the waiting model's requests are
/// answered): how long the requests running on a model may keep it loaded
/// while another model waits for its room.
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(60);

/// `max_loads_per_minute` when the configuration gives none: 6 loads of one
/// model in any minute.
pub const DEFAULT_MAX_LOADS_PER_MINUTE: u32 = 6;

/// How long an idle model loaded on demand stays loaded (Ollama's
/// `keep_alive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeepAlive {
    /// Pinned: never unloaded, never evicted.
    #[default]
    Forever,
    /// Unloaded this long after its last request ends (zero: at once).
    For(Duration),
}

/// A model just loaded: its engine and the memory it takes.
pub struct Loaded {
    pub engine: Arc<dyn Engine>,
    pub bytes: u64,
}

/// Loads a model; called for each load (the first request after start or
/// after an unload, or after a failed load).
pub type Loader = Arc<dyn Fn() -> BoxFuture<'static, anyhow::Result<Loaded>> + Send + Sync>;

/// Counts a request's prompt tokens as the model's engine would, without
/// the model loaded ([`Generator::count_tokens`]).
pub type Count =
    Arc<dyn Fn(GenerateRequest) -> BoxFuture<'static, Result<u64, EngineError>> + Send + Sync>;

/// Makes a model's [`Count`] (its tokenizer and chat template only); called
/// once, when a prompt of the model is first counted while it is not loaded.
pub type CounterLoader = Arc<dyn Fn() -> BoxFuture<'static, anyhow::Result<Count>> + Send + Sync>;

/// A model of the pool.
pub struct Model {
    /// The model id, for logs and errors.
    pub id: String,
    /// What it is loaded from (the GGUF's path), for logs and errors.
    pub file: String,
    /// The bytes it is expected to take (read off the GGUF's header, else
    /// its file's size), reserved in `models_memory` before it loads.
    pub estimate: u64,
    pub keep_alive: KeepAlive,
    /// [`Engine::name`] of the model's engine.
    pub name: String,
    /// What its engine will offer once loaded ([`Engine::offered`]): the
    /// wrapper offers exactly these before the model is loaded, and
    /// forwards each to the loaded engine.
    pub offers: Vec<Capability>,
    pub loader: Loader,
    /// How a prompt is counted while the model is not loaded (a count never
    /// loads it); `None`, or a counter that fails to load: the plain
    /// estimate ([`estimate_tokens`]).
    pub counter: Option<CounterLoader>,
}

/// How long a model stays loaded when nobody used it after its load
/// (every request waiting for the load timed out), or after a prompt's
/// count (its generation comes next), at least.
const UNUSED_AFTER_LOAD: Duration = Duration::from_secs(5);

/// The span [`Sharing::loads_per_minute`] counts loads over.
const LOAD_WINDOW: Duration = Duration::from_secs(60);

/// How the models of a pool share its memory when they do not fit together.
#[derive(Debug, Clone, Copy)]
pub struct Sharing {
    /// `max_hold`: how long the requests running on a model may keep it
    /// loaded while another model waits for its room; then they are ended.
    pub max_hold: Duration,
    /// `max_loads_per_minute`: loads of one model in any minute.
    pub loads_per_minute: u32,
}

impl Default for Sharing {
    fn default() -> Self {
        Sharing {
            max_hold: DEFAULT_MAX_HOLD,
            loads_per_minute: DEFAULT_MAX_LOADS_PER_MINUTE,
        }
    }
}

/// The resident models loaded on demand, and the memory they share.
#[derive(Clone)]
pub struct ResidentPool {
    inner: Arc<Inner>,
}

struct Inner {
    /// `models_memory`: `None` is no limit.
    memory: Option<u64>,
    load_timeout: Duration,
    sharing: Sharing,
    state: Mutex<State>,
    /// Woken when room may have been made or a load ended: a request
    /// ended, a model was unloaded or loaded, a load stopped draining.
    changed: Notify,
}

struct State {
    slots: Vec<Slot>,
    /// Ticks of use, for least recently used.
    clock: u64,
    /// The last turn given to a load waiting for room.
    turns: u64,
}

struct Slot {
    model: Model,
    phase: Phase,
    /// Requests using the loaded engine now.
    in_flight: u64,
    /// Requests waiting for the load under way, or that ended and have not
    /// yet taken the model: a loaded model is theirs first (not evicted).
    waiting: u64,
    /// The running requests' holds, which the pool may end.
    holds: Vec<Weak<Hold>>,
    /// The load that needs this model's room: it takes no new request
    /// until it is unloaded.
    drained: Option<Drain>,
    /// When each of its loads of the last minute started.
    loads_at: VecDeque<tokio::time::Instant>,
    /// The clock at the last use.
    last_used: u64,
    /// When the idle model is to be unloaded; `None` while it is used (or
    /// pinned, or not loaded).
    idle_until: Option<tokio::time::Instant>,
    /// Whether a task waits for `idle_until`.
    timer: bool,
    /// Wakes that task when `idle_until` changes.
    wake: Arc<Notify>,
    /// The last loaded engine's fingerprint: the model's identity in the
    /// response cache also while it is unloaded.
    fingerprint: Option<String>,
    /// The admin API asked to unload it while requests ran: it is
    /// unloaded when the last one ends.
    unload_when_idle: bool,
    /// Its engines let go of (unloaded) and the bytes each held: they
    /// count in the budget until their last reference is dropped (an ended
    /// request's work may still hold one; the drop itself takes a while).
    leaving: Vec<(Weak<dyn Engine>, u64)>,
    /// Its prompt counter while it is not loaded, made once (`None`: none
    /// could be made, the plain estimate counts).
    counter: Arc<OnceCell<Option<Count>>>,
    /// What happened to it since start.
    counts: Counts,
}

/// A model in use drained for another model's load.
#[derive(Clone, Copy)]
struct Drain {
    /// The load (a model's index) that needs its room.
    load: usize,
    /// Since when: its running requests may keep it `max_hold` from then
    /// (each model's own time: one drained later gets its full `max_hold`).
    since: tokio::time::Instant,
}

/// A model's loads and unloads since start.
#[derive(Default)]
struct Counts {
    loads: u64,
    load_failures: u64,
    load_seconds: f64,
    evictions: u64,
    unloads: u64,
}

/// Why a model is unloaded.
#[derive(Clone, Copy)]
enum Why {
    /// To make room for another.
    Evicted,
    /// Idle past its `keep_alive`.
    Idle,
    /// The admin API asked.
    Asked,
}

impl Why {
    fn as_str(self) -> &'static str {
        match self {
            Why::Evicted => "evicted",
            Why::Idle => "idle",
            Why::Asked => "asked",
        }
    }
}

type LoadResult = Option<Result<(), EngineError>>;

enum Phase {
    Unloaded,
    /// A load is under way; `done` says how it ended.
    Loading {
        done: watch::Receiver<LoadResult>,
        stage: Stage,
    },
    Loaded {
        engine: Arc<dyn Engine>,
        bytes: u64,
    },
}

/// Where a load is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Waiting for the model's loads of the last minute to allow one more.
    Throttled,
    /// Waiting for room, its turn among the loads that wait for room.
    Room(u64),
    /// Reading the model, these bytes held in the budget for it.
    Reading(u64),
}

impl Slot {
    /// Bytes it holds of the budget: what a loaded engine says it holds
    /// now (its saved prefixes grow), else what it took when loaded.
    fn resident(&self) -> u64 {
        match &self.phase {
            Phase::Loaded { engine, .. } => engine.status().memory_bytes.unwrap_or(self.held()),
            _ => self.held(),
        }
    }

    /// Bytes it took when loaded, or reserved for its load, without
    /// asking the engine.
    fn held(&self) -> u64 {
        match &self.phase {
            Phase::Unloaded => 0,
            Phase::Loading {
                stage: Stage::Reading(bytes),
                ..
            } => *bytes,
            Phase::Loading { .. } => 0,
            Phase::Loaded { bytes, .. } => *bytes,
        }
    }

    /// Bytes its engines let go of still hold: their last references are
    /// not dropped yet.
    fn leaving(&self) -> u64 {
        self.leaving
            .iter()
            .filter(|(engine, _)| engine.strong_count() > 0)
            .map(|&(_, bytes)| bytes)
            .sum()
    }

    /// Moves its load under way to `stage`.
    fn stage(&mut self, next: Stage) {
        if let Phase::Loading { stage, .. } = &mut self.phase {
            *stage = next;
        }
    }

    /// Unloads it now (it is loaded and unused): the engine to drop.
    fn unload(&mut self, why: Why) -> Option<Arc<dyn Engine>> {
        let resident = self.resident();
        match std::mem::replace(&mut self.phase, Phase::Unloaded) {
            Phase::Loaded { engine, .. } => {
                self.idle_until = None;
                self.unload_when_idle = false;
                self.drained = None;
                match why {
                    Why::Evicted => self.counts.evictions += 1,
                    Why::Idle | Why::Asked => self.counts.unloads += 1,
                }
                tracing::info!(
                    model = %self.model.id,
                    file = %self.model.file,
                    bytes = resident,
                    reason = why.as_str(),
                    "model unloaded"
                );
                self.leaving.retain(|(engine, _)| engine.strong_count() > 0);
                self.leaving.push((Arc::downgrade(&engine), resident));
                Some(engine)
            }
            other => {
                self.phase = other;
                None
            }
        }
    }

    /// A failed load: it is not loaded, and the next request tries again.
    fn failed(&mut self) {
        self.phase = Phase::Unloaded;
        self.counts.load_failures += 1;
        self.unload_when_idle = false;
    }

    /// Whether it keeps what it holds of the budget whatever happens:
    /// kept forever, and not to be unloaded by the admin API.
    fn pinned(&self) -> bool {
        self.model.keep_alive == KeepAlive::Forever && !self.unload_when_idle
    }

    fn residency(&self) -> Residency {
        Residency {
            memory_bytes: self.resident(),
            ..self.counted()
        }
    }

    /// Its residency with the memory it held when loaded (or reserved),
    /// without asking the engine.
    fn counted(&self) -> Residency {
        Residency {
            state: match self.phase {
                Phase::Unloaded => ResidencyState::Unloaded,
                Phase::Loading { .. } => ResidencyState::Loading,
                Phase::Loaded { .. } => ResidencyState::Loaded,
            },
            memory_bytes: self.held(),
            keep_alive: match self.model.keep_alive {
                KeepAlive::Forever => None,
                KeepAlive::For(keep) => Some(keep),
            },
            loads: self.counts.loads,
            load_failures: self.counts.load_failures,
            load_seconds: self.counts.load_seconds,
            evictions: self.counts.evictions,
            unloads: self.counts.unloads,
        }
    }

    /// Unloads it at `until` unless used before; whether a timer task
    /// must be started for that (else the running one is woken).
    fn idle_until(&mut self, until: tokio::time::Instant) -> bool {
        self.idle_until = Some(until);
        if self.timer {
            self.wake.notify_one();
            false
        } else {
            self.timer = true;
            true
        }
    }

    /// Whether nothing uses it nor waits to: no request runs on it, none
    /// waits to take it after its load.
    fn unused(&self) -> bool {
        self.in_flight == 0 && self.waiting == 0
    }

    /// Whether it may be unloaded to make room: loaded, unused, not pinned.
    fn evictable(&self) -> bool {
        matches!(self.phase, Phase::Loaded { .. }) && self.unused() && !self.pinned()
    }

    /// Whether the room it holds would be given up after its requests:
    /// loaded, in use, not pinned, and taken by every request that waited
    /// for its load (a fresh load is theirs: neither drained nor ended
    /// before they start).
    fn drainable(&self) -> bool {
        matches!(self.phase, Phase::Loaded { .. })
            && self.in_flight > 0
            && self.waiting == 0
            && !self.pinned()
    }

    /// The holds of its running requests that still count in `in_flight`
    /// (an ended one gave its count back).
    fn running(&self) -> Vec<Arc<Hold>> {
        self.holds
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|hold| hold.counted())
            .collect()
    }

    /// A hold on it (it is loaded) for a new request, which stays at least
    /// `linger` once done.
    fn hold(
        &mut self,
        inner: &Arc<Inner>,
        index: usize,
        clock: u64,
        linger: Duration,
    ) -> Arc<Hold> {
        self.in_flight += 1;
        self.last_used = clock;
        self.idle_until = None;
        let hold = Arc::new(Hold::new(InFlight {
            inner: inner.clone(),
            index,
            linger,
        }));
        self.holds.retain(|h| h.strong_count() > 0);
        self.holds.push(Arc::downgrade(&hold));
        hold
    }
}

impl ResidentPool {
    /// A pool sharing `memory` bytes (`None`: no limit), whose requests
    /// wait up to `load_timeout` for a load, with the default [`Sharing`].
    #[cfg(test)]
    pub fn new(memory: Option<u64>, load_timeout: Duration) -> Self {
        Self::sharing(memory, load_timeout, Sharing::default())
    }

    /// [`ResidentPool::new`] with its models sharing the memory as
    /// `sharing` says.
    pub fn sharing(memory: Option<u64>, load_timeout: Duration, sharing: Sharing) -> Self {
        ResidentPool {
            inner: Arc::new(Inner {
                memory,
                load_timeout,
                sharing,
                state: Mutex::new(State {
                    slots: Vec::new(),
                    clock: 0,
                    turns: 0,
                }),
                changed: Notify::new(),
            }),
        }
    }

    /// Adds `model`, not loaded; its engine loads it when first asked.
    pub fn add(&self, model: Model) -> Arc<dyn Engine> {
        let name = model.name.clone();
        let offers = model.offers.clone();
        let mut state = self.inner.lock();
        state.slots.push(Slot {
            model,
            phase: Phase::Unloaded,
            in_flight: 0,
            waiting: 0,
            holds: Vec::new(),
            drained: None,
            loads_at: VecDeque::new(),
            last_used: 0,
            idle_until: None,
            timer: false,
            wake: Arc::new(Notify::new()),
            fingerprint: None,
            unload_when_idle: false,
            leaving: Vec::new(),
            counter: Arc::new(OnceCell::new()),
            counts: Counts::default(),
        });
        Arc::new(OnDemand {
            inner: self.inner.clone(),
            index: state.slots.len() - 1,
            name,
            offers,
        })
    }

    /// Whether model `id` is loaded now, and its bytes.
    #[cfg(test)]
    fn resident(&self, id: &str) -> Option<u64> {
        let state = self.inner.lock();
        state
            .slots
            .iter()
            .find(|s| s.model.id == id)
            .and_then(|s| match s.phase {
                Phase::Loaded { bytes, .. } => Some(bytes),
                _ => None,
            })
    }
}

/// What a load waiting for room does next.
enum Room {
    /// The room is reserved for it.
    Made,
    /// It waits (until a change, or the time given), then tries again;
    /// past the load's deadline it fails with the refusal.
    Wait {
        refusal: String,
        until: Option<tokio::time::Instant>,
    },
    /// The requests holding the room it waited `max_hold` for are ended.
    End(Vec<(Arc<Hold>, EngineError)>),
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Loads model `index` (its phase is `Loading`), and says how it ended
    /// to the requests waiting on `done`.
    async fn load(self: Arc<Self>, index: usize, done: watch::Sender<LoadResult>) {
        let result = match AssertUnwindSafe(self.try_load(index)).catch_unwind().await {
            Ok(result) => result,
            Err(_) => {
                self.undrain(index);
                let mut state = self.lock();
                let slot = &mut state.slots[index];
                slot.failed();
                tracing::error!(model = %slot.model.id, file = %slot.model.file, "the model's loader panicked");
                Err(EngineError::Unavailable(format!(
                    "model {} could not be loaded from {}: its loader failed",
                    slot.model.id, slot.model.file
                )))
            }
        };
        done.send_replace(Some(result));
        self.changed.notify_waiters();
    }

    async fn try_load(self: &Arc<Self>, index: usize) -> Result<(), EngineError> {
        let started = Instant::now();
        let (id, file, loader, estimate) = {
            let state = self.lock();
            let model = &state.slots[index].model;
            (
                model.id.clone(),
                model.file.clone(),
                model.loader.clone(),
                model.estimate,
            )
        };
        let deadline = tokio::time::Instant::now() + self.load_timeout;
        let ready = match self.throttle(index, deadline).await {
            Ok(()) => self.make_room(index, deadline).await,
            Err(e) => Err(e),
        };
        // The models drained for it take requests again (those it needed
        // were unloaded).
        self.undrain(index);
        if let Err(e) = ready {
            self.lock().slots[index].failed();
            tracing::warn!(model = %id, file = %file, error = %e, "model not loaded");
            return Err(e);
        }
        // Counted as it starts: a load given up before (no request waits
        // any more, no room in time) took none of the minute's loads.
        let now = tokio::time::Instant::now();
        self.lock().slots[index].loads_at.push_back(now);
        match loader().await {
            Ok(Loaded { engine, bytes }) => {
                let seconds = started.elapsed().as_secs_f64();
                tracing::info!(
                    model = %id,
                    file = %file,
                    seconds,
                    bytes,
                    estimate,
                    "model loaded"
                );
                let fingerprint = engine.fingerprint();
                let timer = {
                    let mut state = self.lock();
                    state.clock += 1;
                    let clock = state.clock;
                    let slot = &mut state.slots[index];
                    slot.phase = Phase::Loaded { engine, bytes };
                    // The next load's estimate: what this one took.
                    slot.model.estimate = bytes;
                    slot.last_used = clock;
                    slot.fingerprint = fingerprint;
                    slot.counts.loads += 1;
                    slot.counts.load_seconds += seconds;
                    let now = tokio::time::Instant::now();
                    match slot.model.keep_alive {
                        // The admin API asked for an unload during the load.
                        _ if slot.unload_when_idle => slot.idle_until(now),
                        KeepAlive::Forever => false,
                        KeepAlive::For(keep) => slot.idle_until(now + keep.max(UNUSED_AFTER_LOAD)),
                    }
                };
                if timer {
                    self.start_idle_timer(index);
                }
                Ok(())
            }
            Err(e) => {
                let mut state = self.lock();
                let slot = &mut state.slots[index];
                slot.failed();
                slot.counts.load_seconds += started.elapsed().as_secs_f64();
                drop(state);
                tracing::error!(model = %id, file = %file, error = %format!("{e:#}"), "model failed to load");
                Err(EngineError::Unavailable(format!(
                    "model {id} could not be loaded from {file}: {e:#}"
                )))
            }
        }
    }

    /// Waits until model `index` was loaded fewer than `loads_per_minute`
    /// times in the last minute; fails when that would be past `deadline`.
    /// The load is counted when it starts (only it can load the model
    /// meanwhile, and the minute's loads only age, so it still may then).
    async fn throttle(
        &self,
        index: usize,
        deadline: tokio::time::Instant,
    ) -> Result<(), EngineError> {
        let limit = self.sharing.loads_per_minute.max(1) as usize;
        loop {
            let next = {
                let mut state = self.lock();
                let slot = &mut state.slots[index];
                gone(slot)?;
                let now = tokio::time::Instant::now();
                while slot
                    .loads_at
                    .front()
                    .is_some_and(|&at| at + LOAD_WINDOW <= now)
                {
                    slot.loads_at.pop_front();
                }
                match slot.loads_at.front() {
                    Some(&oldest) if slot.loads_at.len() >= limit => {
                        slot.stage(Stage::Throttled);
                        oldest + LOAD_WINDOW
                    }
                    _ => return Ok(()),
                }
            };
            if next > deadline {
                let state = self.lock();
                return Err(EngineError::Unavailable(throttled(
                    &state.slots[index].model.id,
                    limit,
                )));
            }
            tokio::time::sleep_until(next).await;
        }
    }

    /// Reserves model `index`'s estimate in the budget (in its turn among
    /// the loads that wait for room), unloading least recently used idle
    /// models when that makes it fit, else draining models in use and,
    /// after `max_hold`, ending their requests; fails at `deadline`.
    async fn make_room(
        self: &Arc<Self>,
        index: usize,
        deadline: tokio::time::Instant,
    ) -> Result<(), EngineError> {
        let turn = {
            let mut state = self.lock();
            state.turns += 1;
            let turn = state.turns;
            state.slots[index].stage(Stage::Room(turn));
            turn
        };
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (evicted, room) = self.room(index, turn)?;
            if !evicted.is_empty() {
                drop_engines(evicted).await;
                self.changed.notify_waiters();
            }
            match room {
                Room::Made => return Ok(()),
                // Never empty: each end gives a count back, so this loop
                // (which does not wait) ends.
                Room::End(holds) => {
                    for (hold, why) in holds {
                        hold.end(why);
                    }
                }
                Room::Wait { refusal, until } => {
                    let wake = until.map_or(deadline, |until| until.min(deadline));
                    if tokio::time::timeout_at(wake, notified).await.is_err()
                        && tokio::time::Instant::now() >= deadline
                    {
                        return Err(EngineError::Unavailable(refusal));
                    }
                }
            }
        }
    }

    /// One look at the room for model `index`'s load of `turn` (see
    /// [`Inner::make_room`]): the engines it evicted, and what next.
    fn room(&self, index: usize, turn: u64) -> Result<(Vec<Arc<dyn Engine>>, Room), EngineError> {
        let mut state = self.lock();
        let state = &mut *state;
        let slot = &state.slots[index];
        let need = slot.model.estimate;
        let id = slot.model.id.clone();
        gone(slot)?;
        let Some(budget) = self.memory else {
            state.slots[index].stage(Stage::Reading(need));
            return Ok((Vec::new(), Room::Made));
        };
        if need > budget {
            return Err(EngineError::Unavailable(format!(
                "model {id} ({}) needs about {need} bytes, more than models_memory ({budget} bytes)",
                slot.model.file
            )));
        }
        let others = || state.slots.iter().enumerate().filter(|(i, _)| *i != index);
        // What models kept forever hold is never given back: when the rest
        // would not make room, waiting is no use.
        let pinned: u64 = others()
            .filter(|(_, s)| s.pinned())
            .map(|(_, s)| s.resident())
            .sum();
        if pinned + need > budget {
            return Err(EngineError::Unavailable(format!(
                "model {id} ({}) needs about {need} bytes, but models kept forever \
                 (keep_alive = \"forever\", or loaded at start) hold {pinned} of \
                 models_memory ({budget} bytes)",
                slot.model.file
            )));
        }
        let refusal = format!(
            "model {id} is waiting for room: it needs about {need} bytes of models_memory \
             ({budget} bytes), which models in use hold; try again shortly"
        );
        // Engines let go of count until they are dropped: soon (their
        // requests were ended, or they are being dropped), so they are
        // waited for, nothing evicted or drained for them.
        let leaving: u64 = state.slots.iter().map(Slot::leaving).sum();
        let mut used: u64 = others().map(|(_, s)| s.resident()).sum::<u64>() + leaving;
        // Loads take room in the order they asked for it. A later one goes
        // ahead only into room that is free now and that the earlier ones
        // will not need: it evicts and drains nothing, and they still fit
        // beside it once all they may free is freed (else they would drain
        // it in turn, or wait longer for it).
        let mut earlier = others()
            .filter(
                |(_, s)| matches!(s.phase, Phase::Loading { stage: Stage::Room(t), .. } if t < turn),
            )
            .map(|(_, s)| s.model.estimate)
            .peekable();
        if earlier.peek().is_some() {
            let earlier: u64 = earlier.sum();
            let reclaimable: u64 = others()
                .filter(|(_, s)| s.evictable() || s.drainable())
                .map(|(_, s)| s.resident())
                .sum::<u64>()
                + leaving;
            if used + need <= budget && used.saturating_sub(reclaimable) + earlier + need <= budget
            {
                state.slots[index].stage(Stage::Reading(need));
                return Ok((Vec::new(), Room::Made));
            }
            return Ok((
                Vec::new(),
                Room::Wait {
                    refusal,
                    until: None,
                },
            ));
        }
        let mut idle: Vec<usize> = others()
            .filter(|(_, s)| s.evictable())
            .map(|(i, _)| i)
            .collect();
        let freeable: u64 = idle.iter().map(|&i| state.slots[i].resident()).sum();
        if used.saturating_sub(freeable + leaving) + need <= budget {
            let mut evicted = Vec::new();
            idle.sort_by_key(|&i| state.slots[i].last_used);
            for i in idle {
                if used.saturating_sub(leaving) + need <= budget {
                    break;
                }
                let victim = &mut state.slots[i];
                let bytes = victim.resident();
                if let Some(engine) = victim.unload(Why::Evicted) {
                    used -= bytes;
                    tracing::info!(model = %victim.model.id, "unloaded to make room for {id}");
                    evicted.push(engine);
                }
            }
            for slot in &mut state.slots {
                if slot.drained.is_some_and(|d| d.load == index) {
                    slot.drained = None;
                }
            }
            // Made only once what it evicted (and any engine let go of) is
            // dropped: an ended request may still hold its engine.
            if !evicted.is_empty() || leaving > 0 {
                return Ok((
                    evicted,
                    Room::Wait {
                        refusal,
                        until: None,
                    },
                ));
            }
            state.slots[index].stage(Stage::Reading(need));
            return Ok((evicted, Room::Made));
        }
        // The idle models would not make room: drain those in use, least
        // recently used first, until theirs would.
        let mut busy: Vec<usize> = others()
            .filter(|(_, s)| s.drainable())
            .map(|(i, _)| i)
            .collect();
        busy.sort_by_key(|&i| state.slots[i].last_used);
        let mut short = (used.saturating_sub(freeable + leaving) + need).saturating_sub(budget);
        let mut drained = Vec::new();
        for i in busy {
            if short == 0 {
                break;
            }
            short = short.saturating_sub(state.slots[i].resident());
            drained.push(i);
        }
        let now = tokio::time::Instant::now();
        for (i, slot) in state.slots.iter_mut().enumerate() {
            let ours = slot.drained.is_some_and(|d| d.load == index);
            if drained.contains(&i) {
                if !ours {
                    slot.drained = Some(Drain {
                        load: index,
                        since: now,
                    });
                }
            } else if ours {
                slot.drained = None;
            }
        }
        if drained.is_empty() {
            // Loads under way hold the rest: they end.
            return Ok((
                Vec::new(),
                Room::Wait {
                    refusal,
                    until: None,
                },
            ));
        }
        // Those drained `max_hold` ago are ended; the load waits for the
        // next one's time, or (all ended, their requests not yet gone) for
        // the change their end makes.
        let max_hold = self.sharing.max_hold;
        let mut holds = Vec::new();
        let mut next: Option<tokio::time::Instant> = None;
        for &i in &drained {
            let victim = &state.slots[i];
            let Some(drain) = victim.drained else {
                continue;
            };
            let until = drain.since + max_hold;
            if now < until {
                next = Some(next.map_or(until, |next| next.min(until)));
                continue;
            }
            let running = victim.running();
            if running.is_empty() {
                continue;
            }
            let why = EngineError::Unavailable(format!(
                "model {} was unloaded to make room for another model, which waited \
                 {max_hold:?} (max_hold) for its memory; try again shortly",
                victim.model.id
            ));
            tracing::info!(
                model = %victim.model.id,
                requests = running.len(),
                "requests ended after max_hold to make room for {id}"
            );
            holds.extend(running.into_iter().map(|hold| (hold, why.clone())));
        }
        if holds.is_empty() {
            return Ok((
                Vec::new(),
                Room::Wait {
                    refusal,
                    until: next,
                },
            ));
        }
        Ok((Vec::new(), Room::End(holds)))
    }

    /// The models drained for model `index`'s load take requests again.
    fn undrain(&self, index: usize) {
        let mut state = self.lock();
        for slot in &mut state.slots {
            if slot.drained.is_some_and(|d| d.load == index) {
                slot.drained = None;
            }
        }
        drop(state);
        self.changed.notify_waiters();
    }

    /// A request on model `index` ended; the model stays at least
    /// `linger` (unless an unload was asked for).
    fn release(self: &Arc<Self>, index: usize, linger: Duration) {
        let timer = {
            let mut state = self.lock();
            state.clock += 1;
            let clock = state.clock;
            let slot = &mut state.slots[index];
            slot.in_flight = slot.in_flight.saturating_sub(1);
            slot.last_used = clock;
            let now = tokio::time::Instant::now();
            match slot.model.keep_alive {
                _ if slot.in_flight > 0 => false,
                _ if slot.unload_when_idle => slot.idle_until(now),
                KeepAlive::For(keep) => slot.idle_until(now + keep.max(linger)),
                KeepAlive::Forever => false,
            }
        };
        self.changed.notify_waiters();
        if timer {
            self.start_idle_timer(index);
        }
    }

    /// Starts the task that unloads model `index` once `idle_until` passes
    /// with nobody using it (its `timer` is set).
    fn start_idle_timer(self: &Arc<Self>, index: usize) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.lock().slots[index].timer = false;
            return;
        };
        let inner = self.clone();
        #[expect(
            clippy::disallowed_methods,
            reason = "the idle timer only unloads a model; it ends when the model is used again or unloaded, and with the runtime"
        )]
        runtime.spawn(async move { inner.unload_when_idle(index).await });
    }

    async fn unload_when_idle(self: Arc<Self>, index: usize) {
        loop {
            let engine = match self.idle_step(index) {
                Idle::Wait(until, wake) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(until) => {}
                        () = wake.notified() => {}
                    }
                    continue;
                }
                Idle::Unload(engine) => engine,
                Idle::Stop => return,
            };
            drop_engines(vec![engine]).await;
            self.changed.notify_waiters();
            return;
        }
    }

    /// What the idle timer of model `index` does now.
    fn idle_step(&self, index: usize) -> Idle {
        let mut state = self.lock();
        let slot = &mut state.slots[index];
        match slot.idle_until {
            Some(until) if until > tokio::time::Instant::now() => {
                return Idle::Wait(until, slot.wake.clone());
            }
            Some(_) if slot.unused() => {}
            _ => {
                slot.timer = false;
                return Idle::Stop;
            }
        }
        slot.idle_until = None;
        slot.timer = false;
        let why = if slot.unload_when_idle {
            Why::Asked
        } else {
            Why::Idle
        };
        match slot.unload(why) {
            Some(engine) => Idle::Unload(engine),
            None => Idle::Stop,
        }
    }
}

/// A load that waits (for its turn, or for room) goes on only while a
/// request waits for it: else it would drain other models for nobody.
fn gone(slot: &Slot) -> Result<(), EngineError> {
    if slot.waiting == 0 {
        return Err(EngineError::Unavailable(format!(
            "model {}: no request waits for its load any more",
            slot.model.id
        )));
    }
    Ok(())
}

/// Why a load of `id` waits: its loads of the last minute.
fn throttled(id: &str, limit: usize) -> String {
    format!(
        "model {id} was loaded {limit} times in the last minute (max_loads_per_minute); \
         try again shortly"
    )
}

/// The idle timer's next step.
enum Idle {
    Wait(tokio::time::Instant, Arc<Notify>),
    Unload(Arc<dyn Engine>),
    Stop,
}

/// Frees unloaded engines on a blocking thread (a model's memory may take
/// a while to give back).
async fn drop_engines(engines: Vec<Arc<dyn Engine>>) {
    let _ = tokio::task::spawn_blocking(move || drop(engines)).await;
}

/// Drops `engine` on a blocking thread (it may be its last reference:
/// the memory is given back then), then wakes the loads that wait for room.
fn give_back(inner: &Arc<Inner>, engine: Arc<dyn Engine>) {
    let inner = inner.clone();
    let given = move || {
        drop(engine);
        inner.changed.notify_waiters();
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(given)),
        Err(_) => given(),
    }
}

/// The engine of one model of the pool.
struct OnDemand {
    inner: Arc<Inner>,
    index: usize,
    name: String,
    /// What the loaded engine offers ([`Model::offers`]).
    offers: Vec<Capability>,
}

/// One request's count in its model's requests in flight: the model is not
/// unloaded until it is dropped (see [`Hold`]).
struct InFlight {
    inner: Arc<Inner>,
    index: usize,
    /// The least the model then stays idle, whatever its `keep_alive`.
    linger: Duration,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.inner.release(self.index, self.linger);
    }
}

/// A request counted in its model's `waiting` while it waits for a load:
/// uncounted when it takes the model, or gives up.
struct Waiter {
    inner: Arc<Inner>,
    index: usize,
    counted: bool,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.counted {
            let mut state = self.inner.lock();
            let slot = &mut state.slots[self.index];
            slot.waiting = slot.waiting.saturating_sub(1);
            drop(state);
            self.inner.changed.notify_waiters();
        }
    }
}

/// What a request for a model that cannot take it now waits for.
enum Wait {
    /// The load under way.
    Load(watch::Receiver<LoadResult>),
    /// Its unload (it is drained for another model's load), then its next load.
    Drained,
}

impl OnDemand {
    /// The loaded engine, with a hold on it that keeps the model at least
    /// `linger` once done: loads the model first when it is not loaded
    /// (or waits for the load under way), up to `load_timeout`.
    async fn acquire(&self, linger: Duration) -> Result<(Arc<dyn Engine>, Arc<Hold>), EngineError> {
        let deadline = tokio::time::Instant::now() + self.inner.load_timeout;
        let mut waiter: Option<Waiter> = None;
        loop {
            let notified = self.inner.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wait = {
                let mut state = self.inner.lock();
                state.clock += 1;
                let clock = state.clock;
                let slot = &mut state.slots[self.index];
                let wait = match &slot.phase {
                    // A drained model takes only the requests that waited
                    // for its load.
                    Phase::Loaded { engine, .. } if slot.drained.is_none() || waiter.is_some() => {
                        let engine = engine.clone();
                        let hold = slot.hold(&self.inner, self.index, clock, linger);
                        if let Some(mut waited) = waiter.take() {
                            waited.counted = false;
                            slot.waiting = slot.waiting.saturating_sub(1);
                            drop(state);
                            // Taken by all that waited, it may be drained now.
                            self.inner.changed.notify_waiters();
                        }
                        return Ok((engine, hold));
                    }
                    Phase::Loaded { .. } => Wait::Drained,
                    Phase::Loading { done, .. } => Wait::Load(done.clone()),
                    Phase::Unloaded => {
                        let (tx, rx) = watch::channel(None);
                        slot.phase = Phase::Loading {
                            done: rx.clone(),
                            stage: Stage::Throttled,
                        };
                        #[expect(
                            clippy::disallowed_methods,
                            reason = "a load must end (and say how to every waiting request) even when the request that started it goes away; it ends with the loader"
                        )]
                        tokio::spawn(self.inner.clone().load(self.index, tx));
                        Wait::Load(rx)
                    }
                };
                // Counted at once: the load may end before this request
                // looks again, and the model must then be kept for it.
                if matches!(wait, Wait::Load(_)) && waiter.is_none() {
                    slot.waiting += 1;
                    waiter = Some(Waiter {
                        inner: self.inner.clone(),
                        index: self.index,
                        counted: true,
                    });
                }
                wait
            };
            let mut done = match wait {
                Wait::Drained => {
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        return Err(self.still_loading());
                    }
                    continue;
                }
                Wait::Load(done) => done,
            };
            match tokio::time::timeout_at(deadline, done.wait_for(Option::is_some)).await {
                Err(_) => return Err(self.still_loading()),
                Ok(Err(_)) => {
                    let (id, file) = self.names();
                    return Err(EngineError::Unavailable(format!(
                        "model {id}: its load from {file} stopped"
                    )));
                }
                Ok(Ok(result)) => {
                    if let Some(Err(e)) = &*result {
                        return Err(e.clone());
                    }
                }
            }
        }
    }

    /// The loaded engine with a hold on it, when the model is loaded and
    /// takes requests; never loads it.
    fn loaded(&self, linger: Duration) -> Option<(Arc<dyn Engine>, Arc<Hold>)> {
        let mut state = self.inner.lock();
        state.clock += 1;
        let clock = state.clock;
        let slot = &mut state.slots[self.index];
        match &slot.phase {
            Phase::Loaded { engine, .. } if slot.drained.is_none() => {
                let engine = engine.clone();
                let hold = slot.hold(&self.inner, self.index, clock, linger);
                Some((engine, hold))
            }
            _ => None,
        }
    }

    /// `work` on the engine `acquired` with its hold (or the pool's error
    /// once the hold is ended first). The request's references to the
    /// engine are let go of before its count is given back, or, ended,
    /// once its work is dropped: an engine the pool let go of meanwhile
    /// counts in `models_memory` until then, and the loads that wait for
    /// its room are woken.
    async fn on_engine<T, F>(
        &self,
        (engine, hold): (Arc<dyn Engine>, Arc<Hold>),
        work: impl FnOnce(Arc<dyn Engine>) -> F,
    ) -> Result<(T, Arc<Hold>), EngineError>
    where
        F: std::future::Future<Output = Result<T, EngineError>>,
    {
        let done = hold.run(work(engine.clone())).await;
        if hold.is_ended() {
            // The pool may have let the engine go: this may be its last
            // reference, not dropped on an async worker.
            give_back(&self.inner, engine);
        } else {
            drop(engine);
            self.inner.changed.notify_waiters();
        }
        done.map(|value| (value, hold))
    }

    /// The prompt tokens of `request` while the model is not loaded: its
    /// counter's (made on first use), else the plain estimate.
    async fn count_unloaded(&self, request: &GenerateRequest) -> Result<u64, EngineError> {
        let (cell, loader, id) = {
            let state = self.inner.lock();
            let slot = &state.slots[self.index];
            (
                slot.counter.clone(),
                slot.model.counter.clone(),
                slot.model.id.clone(),
            )
        };
        let Some(loader) = loader else {
            return Ok(estimate_tokens(request));
        };
        let count = cell
            .get_or_init(|| async move {
                match AssertUnwindSafe(loader()).catch_unwind().await {
                    Ok(Ok(count)) => Some(count),
                    Ok(Err(e)) => {
                        tracing::warn!(model = %id, error = %format!("{e:#}"), "the model's prompts are estimated while it is not loaded: its tokenizer failed to load");
                        None
                    }
                    Err(_) => {
                        tracing::error!(model = %id, "the model's tokenizer loader panicked");
                        None
                    }
                }
            })
            .await;
        match count {
            Some(count) => count(request.clone()).await,
            None => Ok(estimate_tokens(request)),
        }
    }

    /// The model's id and file.
    fn names(&self) -> (String, String) {
        let state = self.inner.lock();
        let model = &state.slots[self.index].model;
        (model.id.clone(), model.file.clone())
    }

    /// The answer to a request that waited `load_timeout` for the load:
    /// whether the model is still waiting for room or loading.
    fn still_loading(&self) -> EngineError {
        let (id, file, stage, drained) = {
            let state = self.inner.lock();
            let slot = &state.slots[self.index];
            let stage = match slot.phase {
                Phase::Loading { stage, .. } => Some(stage),
                _ => None,
            };
            (
                slot.model.id.clone(),
                slot.model.file.clone(),
                stage,
                slot.drained.is_some(),
            )
        };
        let timeout = self.inner.load_timeout;
        let limit = self.inner.sharing.loads_per_minute.max(1) as usize;
        EngineError::Unavailable(match (self.inner.memory, stage) {
            (_, Some(Stage::Throttled)) => throttled(&id, limit),
            (Some(budget), Some(Stage::Room(_))) => format!(
                "model {id} is waiting for room in models_memory ({budget} bytes), which models \
                 in use hold; try again shortly"
            ),
            _ if drained => format!(
                "model {id} is being unloaded to make room for another model; try again shortly"
            ),
            _ => format!(
                "model {id} is still loading from {file} after {timeout:?}; try again shortly"
            ),
        })
    }
}

/// The loaded engine's `capability`, which its model said it offers; one
/// that does not is the server's error, not the client's.
fn loaded_capability<'e, T: ?Sized>(
    engine: &'e Arc<dyn Engine>,
    capability: Capability,
    get: impl FnOnce(&'e dyn Engine) -> Option<&'e T>,
) -> Result<&'e T, EngineError> {
    get(engine.as_ref()).ok_or_else(|| {
        EngineError::Internal(format!(
            "the loaded model does not offer {}, which it was served for",
            capability.as_str()
        ))
    })
}

#[async_trait]
impl Generator for OnDemand {
    async fn generate(&self, request: GenerateRequest) -> Result<EventStream, EngineError> {
        let acquired = self.acquire(Duration::ZERO).await?;
        let work = |e: Arc<dyn Engine>| async move {
            let generator = loaded_capability(&e, Capability::Generation, |e| e.generator())?;
            generator.generate(request).await
        };
        let (events, hold) = self.on_engine(acquired, work).await?;
        Ok(Guarded::new(events, hold).boxed())
    }

    /// Counts on the loaded engine when the model is loaded (it then stays
    /// at least [`UNUSED_AFTER_LOAD`]: the prompt's generation comes next,
    /// and must not load it again, with `keep_alive = 0` it would); else
    /// without loading it. A count does no inference: it must not make
    /// room, nor wait for it.
    async fn count_tokens(&self, request: &GenerateRequest) -> Result<u64, EngineError> {
        match self.loaded(UNUSED_AFTER_LOAD) {
            Some(acquired) => {
                let work = |e: Arc<dyn Engine>| async move {
                    let generator =
                        loaded_capability(&e, Capability::Generation, |e| e.generator())?;
                    generator.count_tokens(request).await
                };
                Ok(self.on_engine(acquired, work).await?.0)
            }
            None => self.count_unloaded(request).await,
        }
    }

    fn sees_images(&self) -> bool {
        self.offers.contains(&Capability::Vision)
    }
}

#[async_trait]
impl Embedder for OnDemand {
    async fn embed(&self, request: EmbedRequest) -> Result<Embeddings, EngineError> {
        let acquired = self.acquire(Duration::ZERO).await?;
        let work = |e: Arc<dyn Engine>| async move {
            let embedder = loaded_capability(&e, Capability::Embedding, |e| e.embedder())?;
            embedder.embed(request).await
        };
        Ok(self.on_engine(acquired, work).await?.0)
    }
}

#[async_trait]
impl Reranker for OnDemand {
    async fn rerank(&self, request: RerankRequest) -> Result<Reranked, EngineError> {
        let acquired = self.acquire(Duration::ZERO).await?;
        let work = |e: Arc<dyn Engine>| async move {
            let reranker = loaded_capability(&e, Capability::Reranking, |e| e.reranker())?;
            reranker.rerank(request).await
        };
        Ok(self.on_engine(acquired, work).await?.0)
    }
}

#[async_trait]
impl Transcriber for OnDemand {
    async fn transcribe(&self, request: TranscribeRequest) -> Result<Transcript, EngineError> {
        let acquired = self.acquire(Duration::ZERO).await?;
        let work = |e: Arc<dyn Engine>| async move {
            let transcriber =
                loaded_capability(&e, Capability::Transcription, |e| e.transcriber())?;
            transcriber.transcribe(request).await
        };
        Ok(self.on_engine(acquired, work).await?.0)
    }
}

#[async_trait]
impl Speaker for OnDemand {
    async fn speak(&self, request: SpeechRequest) -> Result<Speech, EngineError> {
        let acquired = self.acquire(Duration::ZERO).await?;
        let work = |e: Arc<dyn Engine>| async move {
            let speaker = loaded_capability(&e, Capability::Speech, |e| e.speaker())?;
            speaker.speak(request).await
        };
        let (speech, hold) = self.on_engine(acquired, work).await?;
        Ok(Speech {
            content_type: speech.content_type,
            audio: Guarded::new(speech.audio, hold).boxed(),
        })
    }
}

/// Offers what its model said it would ([`Model::offers`]), each forwarded
/// to the engine loaded when a request comes.
impl Engine for OnDemand {
    fn generator(&self) -> Option<&dyn Generator> {
        self.offers
            .contains(&Capability::Generation)
            .then_some(self as &dyn Generator)
    }

    fn embedder(&self) -> Option<&dyn Embedder> {
        self.offers
            .contains(&Capability::Embedding)
            .then_some(self as &dyn Embedder)
    }

    fn reranker(&self) -> Option<&dyn Reranker> {
        self.offers
            .contains(&Capability::Reranking)
            .then_some(self as &dyn Reranker)
    }

    fn transcriber(&self) -> Option<&dyn Transcriber> {
        self.offers
            .contains(&Capability::Transcription)
            .then_some(self as &dyn Transcriber)
    }

    fn speaker(&self) -> Option<&dyn Speaker> {
        self.offers
            .contains(&Capability::Speech)
            .then_some(self as &dyn Speaker)
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn fingerprint(&self) -> Option<String> {
        self.inner.lock().slots[self.index].fingerprint.clone()
    }

    fn status(&self) -> EngineStatus {
        // Asked with the pool locked (as its memory is): a reference taken
        // out would keep an engine the pool let go of counted, unseen.
        let (status, mut residency) = {
            let state = self.inner.lock();
            let slot = &state.slots[self.index];
            let status = match &slot.phase {
                Phase::Loaded { engine, .. } => engine.status(),
                _ => EngineStatus::default(),
            };
            (status, slot.counted())
        };
        // What the loaded engine says it holds now (else what it took).
        if let Some(bytes) = status.memory_bytes {
            residency.memory_bytes = bytes;
        }
        EngineStatus {
            residency: Some(residency),
            ..status
        }
    }

    fn residence(&self) -> Option<&dyn Residence> {
        Some(self)
    }
}

#[async_trait]
impl Residence for OnDemand {
    async fn load(&self) -> Result<(), EngineError> {
        let (engine, hold) = self.acquire(Duration::ZERO).await?;
        // The engine first: its count given back then wakes the loads.
        drop(engine);
        drop(hold);
        Ok(())
    }

    fn unload(&self, force: bool) -> Unload {
        let (mut engine, mut unload, running, id) = {
            let mut state = self.inner.lock();
            let slot = &mut state.slots[self.index];
            let id = slot.model.id.clone();
            match slot.phase {
                Phase::Unloaded => (None, Unload::NotLoaded, Vec::new(), id),
                Phase::Loaded { .. } if slot.in_flight == 0 => {
                    (slot.unload(Why::Asked), Unload::Unloaded, Vec::new(), id)
                }
                // Forced: its running requests are ended, then it is unloaded.
                Phase::Loaded { .. } if force => {
                    slot.unload_when_idle = true;
                    (None, Unload::WhenIdle, slot.running(), id)
                }
                // Running requests end first; a load under way ends first.
                Phase::Loaded { .. } | Phase::Loading { .. } => {
                    slot.unload_when_idle = true;
                    (None, Unload::WhenIdle, Vec::new(), id)
                }
            }
        };
        if !running.is_empty() {
            let why = EngineError::Unavailable(format!(
                "model {id} was unloaded by an administrator while this request ran"
            ));
            tracing::info!(model = %id, requests = running.len(), "requests ended by a forced unload");
            for hold in running {
                hold.end(why.clone());
            }
            let mut state = self.inner.lock();
            let slot = &mut state.slots[self.index];
            if matches!(slot.phase, Phase::Loaded { .. }) && slot.in_flight == 0 {
                engine = slot.unload(Why::Asked);
                unload = Unload::Unloaded;
            }
        }
        if let Some(engine) = engine {
            // Its memory is given back on a blocking thread (it counts
            // until then, and while the ended requests still hold it).
            give_back(&self.inner, engine);
        }
        unload
    }

    fn residency(&self) -> Residency {
        self.inner.lock().slots[self.index].residency()
    }
}

#[cfg(test)]
mod tests;
