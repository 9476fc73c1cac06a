//! The local models (GGUF files): a pool of resident models and, for each
//! model, an [`Engine`] that loads it when first asked (or at start, for a
//! preloaded one) and forwards to it.
//!
//! - A load runs in a task of its own (the GGUF loader on a blocking
//!   thread), so the other models keep serving; the requests that ask
//!   during a load wait for that one load, up to `load_timeout`, then get
//!   [`EngineError::Unavailable`] (503 with `Retry-After`).
//! - A failed load answers every waiting request with an error naming the
//!   file and the cause; the next request tries again.
//! - Each request holds an in-flight guard (a stream until it ends or is
//!   dropped): no model is unloaded while one is running. After the last
//!   one ends the model stays `keep_alive` (`forever` pins it).
//! - `models_memory` bounds the bytes of all resident models of the pool:
//!   before a load, the least recently used idle, unpinned models are
//!   unloaded until the new one fits; when the busy and pinned ones leave
//!   no room, the load waits for room up to `load_timeout`, then fails
//!   with the same 503 (at once when only models kept forever hold the
//!   room: nothing would free it).
//! - The admin API loads a model and unloads it ([`Residence`]): an
//!   unload of a model in use waits for its running requests to end.
//! - A loaded model's bytes are what its engine says it holds now
//!   (weights, KV cells, saved prefixes); before its first load, what
//!   its GGUF's header says it will take.

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use svc_core::engine::{
    EmbedRequest, Embeddings, Engine, EngineError, EngineStatus, EventStream, GenerateRequest,
    RerankRequest, Reranked, Residence, Residency, ResidencyState, Unload,
};
use tokio::sync::{Notify, watch};

use crate::config::KeepAlive;

/// A model just loaded: its engine and the memory it takes.
pub struct Loaded {
    pub engine: Arc<dyn Engine>,
    pub bytes: u64,
}

/// Loads a model; called for each load (the first request after start or
/// after an unload, or after a failed load).
pub type Loader = Arc<dyn Fn() -> BoxFuture<'static, anyhow::Result<Loaded>> + Send + Sync>;

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
    pub loader: Loader,
}

/// How long a model stays loaded when nobody used it after its load
/// (every request waiting for the load timed out), or after a prompt's
/// count (its generation comes next), at least.
const UNUSED_AFTER_LOAD: Duration = Duration::from_secs(5);

/// The resident models loaded on demand, and the memory they share.
#[derive(Clone)]
pub struct ResidentPool {
    inner: Arc<Inner>,
}

struct Inner {
    /// `models_memory`: `None` is no limit.
    memory: Option<u64>,
    load_timeout: Duration,
    state: Mutex<State>,
    /// Woken when room may have been made or a load ended: a request
    /// ended, a model was unloaded or loaded.
    changed: Notify,
}

struct State {
    slots: Vec<Slot>,
    /// Ticks of use, for least recently used.
    clock: u64,
}

struct Slot {
    model: Model,
    phase: Phase,
    /// Requests using the loaded engine now.
    in_flight: u64,
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
    /// What happened to it since start.
    counts: Counts,
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
    /// A load is under way; `done` says how it ended. `reserved`: bytes
    /// held in the budget for it once room was made (`None` before).
    Loading {
        done: watch::Receiver<LoadResult>,
        reserved: Option<u64>,
    },
    Loaded {
        engine: Arc<dyn Engine>,
        bytes: u64,
    },
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
            Phase::Loading { reserved, .. } => reserved.unwrap_or(0),
            Phase::Loaded { bytes, .. } => *bytes,
        }
    }

    /// Unloads it now (it is loaded and unused): the engine to drop.
    fn unload(&mut self, why: Why) -> Option<Arc<dyn Engine>> {
        let resident = self.resident();
        match std::mem::replace(&mut self.phase, Phase::Unloaded) {
            Phase::Loaded { engine, .. } => {
                self.idle_until = None;
                self.unload_when_idle = false;
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
                Some(engine)
            }
            other => {
                self.phase = other;
                None
            }
        }
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

    /// Whether it may be unloaded to make room: loaded, unused, not pinned.
    fn evictable(&self) -> bool {
        matches!(self.phase, Phase::Loaded { .. }) && self.in_flight == 0 && !self.pinned()
    }
}

impl ResidentPool {
    /// A pool sharing `memory` bytes (`None`: no limit), whose requests
    /// wait up to `load_timeout` for a load.
    pub fn new(memory: Option<u64>, load_timeout: Duration) -> Self {
        ResidentPool {
            inner: Arc::new(Inner {
                memory,
                load_timeout,
                state: Mutex::new(State {
                    slots: Vec::new(),
                    clock: 0,
                }),
                changed: Notify::new(),
            }),
        }
    }

    /// Adds `model`, not loaded; its engine loads it when first asked.
    pub fn add(&self, model: Model) -> Arc<dyn Engine> {
        let name = model.name.clone();
        let mut state = self.inner.lock();
        state.slots.push(Slot {
            model,
            phase: Phase::Unloaded,
            in_flight: 0,
            last_used: 0,
            idle_until: None,
            timer: false,
            wake: Arc::new(Notify::new()),
            fingerprint: None,
            unload_when_idle: false,
            counts: Counts::default(),
        });
        Arc::new(OnDemand {
            inner: self.inner.clone(),
            index: state.slots.len() - 1,
            name,
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
                let mut state = self.lock();
                let slot = &mut state.slots[index];
                slot.phase = Phase::Unloaded;
                slot.counts.load_failures += 1;
                slot.unload_when_idle = false;
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
        if let Err(e) = self.make_room(index, deadline).await {
            let mut state = self.lock();
            let slot = &mut state.slots[index];
            slot.phase = Phase::Unloaded;
            slot.counts.load_failures += 1;
            slot.unload_when_idle = false;
            drop(state);
            tracing::warn!(model = %id, file = %file, error = %e, "model not loaded");
            return Err(e);
        }
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
                slot.phase = Phase::Unloaded;
                slot.counts.load_failures += 1;
                slot.unload_when_idle = false;
                slot.counts.load_seconds += started.elapsed().as_secs_f64();
                drop(state);
                tracing::error!(model = %id, file = %file, error = %format!("{e:#}"), "model failed to load");
                Err(EngineError::Unavailable(format!(
                    "model {id} could not be loaded from {file}: {e:#}"
                )))
            }
        }
    }

    /// Reserves model `index`'s estimate in the budget, unloading least
    /// recently used idle models when that makes it fit, else waiting for
    /// room until `deadline`.
    async fn make_room(
        self: &Arc<Self>,
        index: usize,
        deadline: tokio::time::Instant,
    ) -> Result<(), EngineError> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (evicted, fits, refusal) = {
                let mut state = self.lock();
                let state = &mut *state;
                let slot = &state.slots[index];
                let need = slot.model.estimate;
                let id = slot.model.id.clone();
                let Some(budget) = self.memory else {
                    reserve(&mut state.slots[index], need);
                    return Ok(());
                };
                if need > budget {
                    return Err(EngineError::Unavailable(format!(
                        "model {id} ({}) needs about {need} bytes, more than models_memory ({budget} bytes)",
                        slot.model.file
                    )));
                }
                let others = || {
                    state
                        .slots
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i != index)
                        .map(|(_, s)| s)
                };
                let mut used: u64 = others().map(Slot::resident).sum();
                // What models kept forever hold is never given back: when
                // the rest would not make room, waiting is no use.
                let pinned: u64 = others().filter(|s| s.pinned()).map(Slot::resident).sum();
                if pinned + need > budget {
                    return Err(EngineError::Unavailable(format!(
                        "model {id} ({}) needs about {need} bytes, but models kept forever \
                         (keep_alive = \"forever\", or loaded at start) hold {pinned} of \
                         models_memory ({budget} bytes)",
                        slot.model.file
                    )));
                }
                let mut idle: Vec<usize> = (0..state.slots.len())
                    .filter(|&i| i != index && state.slots[i].evictable())
                    .collect();
                let freeable: u64 = idle.iter().map(|&i| state.slots[i].resident()).sum();
                let mut evicted = Vec::new();
                if used + need > budget && used - freeable + need <= budget {
                    idle.sort_by_key(|&i| state.slots[i].last_used);
                    for i in idle {
                        if used + need <= budget {
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
                }
                let fits = used + need <= budget;
                if fits {
                    reserve(&mut state.slots[index], need);
                }
                let refusal = format!(
                    "model {id} is waiting for room: it needs about {need} bytes of models_memory \
                     ({budget} bytes), which models in use or kept forever hold; try again shortly"
                );
                (evicted, fits, refusal)
            };
            if !evicted.is_empty() {
                drop_engines(evicted).await;
                self.changed.notify_waiters();
            }
            if fits {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(EngineError::Unavailable(refusal));
            }
        }
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
            Some(_) if slot.in_flight == 0 => {}
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

/// The idle timer's next step.
enum Idle {
    Wait(tokio::time::Instant, Arc<Notify>),
    Unload(Arc<dyn Engine>),
    Stop,
}

/// Holds `need` bytes of the budget for a load.
fn reserve(slot: &mut Slot, need: u64) {
    if let Phase::Loading { reserved, .. } = &mut slot.phase {
        *reserved = Some(need);
    }
}

/// Frees unloaded engines on a blocking thread (a model's memory may take
/// a while to give back).
async fn drop_engines(engines: Vec<Arc<dyn Engine>>) {
    let _ = tokio::task::spawn_blocking(move || drop(engines)).await;
}

/// The engine of one model of the pool.
struct OnDemand {
    inner: Arc<Inner>,
    index: usize,
    name: String,
}

/// One request's hold on a loaded model: it is not unloaded until the
/// guard is dropped.
struct InFlight {
    inner: Arc<Inner>,
    index: usize,
    /// The least the model then stays idle, whatever its `keep_alive`.
    linger: Duration,
}

impl InFlight {
    /// A hold after which the model stays at least [`UNUSED_AFTER_LOAD`]:
    /// a prompt's count is followed by its generation, which must not
    /// load the model again (with `keep_alive = 0`, it would).
    fn lingering(mut self) -> Self {
        self.linger = UNUSED_AFTER_LOAD;
        self
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.inner.release(self.index, self.linger);
    }
}

impl OnDemand {
    /// The loaded engine, with a hold on it: loads the model first when it
    /// is not loaded (or waits for the load under way), up to
    /// `load_timeout`.
    async fn acquire(&self) -> Result<(Arc<dyn Engine>, InFlight), EngineError> {
        let deadline = tokio::time::Instant::now() + self.inner.load_timeout;
        loop {
            let (mut done, id, file) = {
                let mut state = self.inner.lock();
                state.clock += 1;
                let clock = state.clock;
                let slot = &mut state.slots[self.index];
                let done = match &slot.phase {
                    Phase::Loaded { engine, .. } => {
                        let engine = engine.clone();
                        slot.in_flight += 1;
                        slot.last_used = clock;
                        slot.idle_until = None;
                        let guard = InFlight {
                            inner: self.inner.clone(),
                            index: self.index,
                            linger: Duration::ZERO,
                        };
                        return Ok((engine, guard));
                    }
                    Phase::Loading { done, .. } => done.clone(),
                    Phase::Unloaded => {
                        let (tx, rx) = watch::channel(None);
                        slot.phase = Phase::Loading {
                            done: rx.clone(),
                            reserved: None,
                        };
                        #[expect(
                            clippy::disallowed_methods,
                            reason = "a load must end (and say how to every waiting request) even when the request that started it goes away; it ends with the loader"
                        )]
                        tokio::spawn(self.inner.clone().load(self.index, tx));
                        rx
                    }
                };
                (done, slot.model.id.clone(), slot.model.file.clone())
            };
            match tokio::time::timeout_at(deadline, done.wait_for(Option::is_some)).await {
                Err(_) => return Err(self.still_loading(&id, &file)),
                Ok(Err(_)) => {
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
}

impl OnDemand {
    /// The answer to a request that waited `load_timeout` for the load:
    /// whether the model is still waiting for room or loading.
    fn still_loading(&self, id: &str, file: &str) -> EngineError {
        let waits_for_room = matches!(
            self.inner.lock().slots[self.index].phase,
            Phase::Loading { reserved: None, .. }
        );
        let timeout = self.inner.load_timeout;
        EngineError::Unavailable(match self.inner.memory {
            Some(budget) if waits_for_room => format!(
                "model {id} is waiting for room in models_memory ({budget} bytes), which models \
                 in use or kept forever hold; try again shortly"
            ),
            _ => format!(
                "model {id} is still loading from {file} after {timeout:?}; try again shortly"
            ),
        })
    }
}

#[async_trait]
impl Engine for OnDemand {
    async fn generate(&self, request: GenerateRequest) -> Result<EventStream, EngineError> {
        let (engine, guard) = self.acquire().await?;
        let events = engine.generate(request).await?;
        Ok(Guarded {
            events,
            guard: Some(guard),
        }
        .boxed())
    }

    async fn embed(&self, request: EmbedRequest) -> Result<Embeddings, EngineError> {
        let (engine, _guard) = self.acquire().await?;
        engine.embed(request).await
    }

    async fn rerank(&self, request: RerankRequest) -> Result<Reranked, EngineError> {
        let (engine, _guard) = self.acquire().await?;
        engine.rerank(request).await
    }

    async fn count_tokens(&self, request: &GenerateRequest) -> Result<u64, EngineError> {
        let (engine, guard) = self.acquire().await?;
        let _guard = guard.lingering();
        engine.count_tokens(request).await
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn fingerprint(&self) -> Option<String> {
        self.inner.lock().slots[self.index].fingerprint.clone()
    }

    fn status(&self) -> EngineStatus {
        let (engine, mut residency) = {
            let state = self.inner.lock();
            let slot = &state.slots[self.index];
            let engine = match &slot.phase {
                Phase::Loaded { engine, .. } => Some(engine.clone()),
                _ => None,
            };
            (engine, slot.counted())
        };
        let status = engine.map(|e| e.status()).unwrap_or_default();
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
        let (_engine, _guard) = self.acquire().await?;
        Ok(())
    }

    fn unload(&self) -> Unload {
        let (engine, unload) = {
            let mut state = self.inner.lock();
            let slot = &mut state.slots[self.index];
            match slot.phase {
                Phase::Unloaded => (None, Unload::NotLoaded),
                Phase::Loaded { .. } if slot.in_flight == 0 => {
                    (slot.unload(Why::Asked), Unload::Unloaded)
                }
                // Running requests end first; a load under way ends first.
                Phase::Loaded { .. } | Phase::Loading { .. } => {
                    slot.unload_when_idle = true;
                    (None, Unload::WhenIdle)
                }
            }
        };
        if let Some(engine) = engine {
            // Its memory is given back on a blocking thread.
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(move || drop(engine))),
                Err(_) => drop(engine),
            }
            self.inner.changed.notify_waiters();
        }
        unload
    }

    fn residency(&self) -> Residency {
        self.inner.lock().slots[self.index].residency()
    }
}

/// A stream that holds its model until it ends or is dropped.
struct Guarded {
    events: EventStream,
    guard: Option<InFlight>,
}

impl Stream for Guarded {
    type Item = <EventStream as Stream>::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = std::task::ready!(self.events.poll_next_unpin(cx));
        if item.is_none() {
            self.guard = None;
        }
        Poll::Ready(item)
    }
}

#[cfg(test)]
mod tests;
