//! The pool with scripted engines: no model file is read.

#![expect(
    clippy::disallowed_methods,
    reason = "test code: the requests that wait run as tasks, which end with the test"
)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use futures::StreamExt;
use svc_core::engine::{EngineEvent, FinishReason, TokenUsage};
use tokio::sync::Semaphore;

use super::*;

/// Answers its id, in `pieces` pieces `every` apart; counts its drops (an
/// unload) and those of engines that served no request (a wasted load);
/// says it holds `memory` bytes (when not 0). It also embeds, reranks,
/// transcribes, speaks and counts, each answer naming it.
struct Fake {
    id: String,
    pieces: usize,
    every: Duration,
    served: AtomicUsize,
    counts: Arc<Counts>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.counts.dropped.fetch_add(1, Ordering::SeqCst);
        if self.served.load(Ordering::SeqCst) == 0 {
            self.counts.wasted.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Fake {
    fn serve(&self) {
        self.served.fetch_add(1, Ordering::SeqCst);
        self.counts.served.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Generator for Fake {
    async fn generate(&self, _: GenerateRequest) -> Result<EventStream, EngineError> {
        self.serve();
        let id = self.id.clone();
        let (pieces, every) = (self.pieces, self.every);
        Ok(async_stream::stream! {
            for _ in 0..pieces {
                tokio::time::sleep(every).await;
                yield Ok(EngineEvent::Text(id.clone()));
            }
            yield Ok(EngineEvent::Finish { reason: FinishReason::Stop, usage: TokenUsage::default() });
        }
        .boxed())
    }

    async fn count_tokens(&self, _: &GenerateRequest) -> Result<u64, EngineError> {
        self.serve();
        Ok(LOADED_COUNT)
    }

    fn sees_images(&self) -> bool {
        true
    }
}

#[async_trait]
impl Embedder for Fake {
    async fn embed(&self, request: EmbedRequest) -> Result<Embeddings, EngineError> {
        self.serve();
        // As long as a stream of it takes.
        tokio::time::sleep(self.every * self.pieces as u32).await;
        Ok(Embeddings {
            vectors: vec![vec![1.0]; request.inputs.len()],
            prompt_tokens: 3,
        })
    }
}

#[async_trait]
impl Reranker for Fake {
    async fn rerank(&self, _: RerankRequest) -> Result<Reranked, EngineError> {
        self.serve();
        Ok(Reranked {
            scores: vec![0.5],
            prompt_tokens: 4,
        })
    }
}

#[async_trait]
impl Transcriber for Fake {
    async fn transcribe(&self, _: TranscribeRequest) -> Result<Transcript, EngineError> {
        self.serve();
        Ok(Transcript {
            body: self.id.clone().into(),
            content_type: "text/plain".into(),
            seconds: Some(1.0),
        })
    }
}

#[async_trait]
impl Speaker for Fake {
    async fn speak(&self, _: SpeechRequest) -> Result<Speech, EngineError> {
        self.serve();
        let id = self.id.clone();
        Ok(Speech {
            content_type: "audio/wav".into(),
            audio: futures::stream::iter([Ok(bytes::Bytes::from(id))]).boxed(),
        })
    }
}

/// The fake does everything.
impl Engine for Fake {
    svc_core::offers!(generator, embedder, reranker, transcriber, speaker);

    fn name(&self) -> &str {
        "fake"
    }

    fn status(&self) -> EngineStatus {
        let bytes = self.counts.memory.load(Ordering::SeqCst);
        EngineStatus {
            memory_bytes: (bytes > 0).then_some(bytes),
            ..EngineStatus::default()
        }
    }
}

/// What a loaded fake counts for any prompt.
const LOADED_COUNT: u64 = 7;
/// What a fake's counter counts for any prompt, the model not loaded.
const COUNTER_COUNT: u64 = 42;

/// What a model's loader did.
#[derive(Default)]
struct Counts {
    loads: AtomicUsize,
    dropped: AtomicUsize,
    /// Engines dropped without having served a request.
    wasted: AtomicUsize,
    /// Calls its engines served, all together.
    served: AtomicUsize,
    /// When each load started.
    started: Mutex<Vec<tokio::time::Instant>>,
    /// Counters made (vocab-only loads).
    counters: AtomicUsize,
    /// What its engines say they hold (0: nothing said).
    memory: AtomicU64,
}

impl Counts {
    fn loads(&self) -> usize {
        self.loads.load(Ordering::SeqCst)
    }
    fn unloads(&self) -> usize {
        self.dropped.load(Ordering::SeqCst)
    }
    fn wasted(&self) -> usize {
        self.wasted.load(Ordering::SeqCst)
    }
    /// Calls its engines served.
    fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }
}

/// How a scripted load goes.
#[derive(Clone)]
enum Script {
    /// At once.
    Quick,
    /// After this long (the runtime's time: paused in some tests).
    Slow(Duration),
    /// On a blocking thread, once the gate gives a permit.
    Gated(Arc<Semaphore>),
    /// Fails, saying why.
    Fails(&'static str),
    /// Panics.
    Panics,
}

/// A model for `pool` whose engine answers in 3 pieces 10 ms apart.
fn add(
    pool: &ResidentPool,
    id: &str,
    bytes: u64,
    keep_alive: KeepAlive,
    script: Script,
) -> (Arc<dyn Engine>, Arc<Counts>) {
    add_model(pool, id, bytes, keep_alive, script, Engines::default())
}

/// What a fake model's engines do beyond loading.
#[derive(Clone, Copy)]
struct Engines {
    pieces: usize,
    every: Duration,
    /// Whether it has a counter (else the plain estimate counts).
    counter: bool,
    /// What the model is served for (the fake itself does everything).
    offers: &'static [Capability],
}

impl Default for Engines {
    fn default() -> Self {
        Engines {
            pieces: 3,
            every: Duration::from_millis(10),
            counter: false,
            offers: &Capability::ALL,
        }
    }
}

fn add_model(
    pool: &ResidentPool,
    id: &str,
    bytes: u64,
    keep_alive: KeepAlive,
    script: Script,
    engines: Engines,
) -> (Arc<dyn Engine>, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let (name, seen) = (id.to_owned(), counts.clone());
    let loader: Loader = Arc::new(move || {
        seen.loads.fetch_add(1, Ordering::SeqCst);
        seen.started
            .lock()
            .unwrap()
            .push(tokio::time::Instant::now());
        let engine: Arc<dyn Engine> = Arc::new(Fake {
            id: name.clone(),
            pieces: engines.pieces,
            every: engines.every,
            served: AtomicUsize::new(0),
            counts: seen.clone(),
        });
        let script = script.clone();
        Box::pin(async move {
            match script {
                Script::Quick => {}
                Script::Slow(took) => tokio::time::sleep(took).await,
                Script::Gated(gate) => {
                    tokio::task::spawn_blocking(move || {
                        let permit =
                            tokio::runtime::Handle::current().block_on(gate.acquire_owned());
                        drop(permit);
                    })
                    .await?;
                }
                Script::Fails(why) => anyhow::bail!("{why}"),
                Script::Panics => panic!("the loader broke"),
            }
            Ok(Loaded { engine, bytes })
        })
    });
    let seen = counts.clone();
    let counter: Option<CounterLoader> = engines.counter.then(|| {
        let loader: CounterLoader = Arc::new(move || {
            seen.counters.fetch_add(1, Ordering::SeqCst);
            let count: Count = Arc::new(|_| Box::pin(async { Ok(COUNTER_COUNT) }));
            Box::pin(async move { Ok(count) })
        });
        loader
    });
    let engine = pool.add(Model {
        id: id.to_owned(),
        file: format!("models/{id}.gguf"),
        estimate: bytes,
        keep_alive,
        name: "fake".into(),
        offers: engines.offers.to_vec(),
        loader,
        counter,
    });
    (engine, counts)
}

const HOUR: KeepAlive = KeepAlive::For(Duration::from_secs(3600));

/// The whole reply's text.
async fn reply(engine: &Arc<dyn Engine>) -> Result<String, EngineError> {
    let mut events = engine
        .generator()
        .unwrap()
        .generate(GenerateRequest::default())
        .await?;
    let mut text = String::new();
    while let Some(event) = events.next().await {
        if let EngineEvent::Text(piece) = event? {
            text.push_str(&piece);
        }
    }
    Ok(text)
}

/// Waits (up to 2 s) until `done` holds.
async fn until(done: impl Fn() -> bool) {
    for _ in 0..200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(done(), "not reached within 2 s");
}

#[tokio::test]
async fn three_models_in_room_for_two_evict_the_least_recently_used_idle_one_never_the_pinned() {
    let pool = ResidentPool::new(Some(200), Duration::from_secs(5));
    let (pinned, p) = add(&pool, "pinned", 100, KeepAlive::Forever, Script::Quick);
    let (a, ca) = add(&pool, "a", 100, HOUR, Script::Quick);
    let (b, cb) = add(&pool, "b", 100, HOUR, Script::Quick);
    assert_eq!(reply(&pinned).await.unwrap(), "pinnedpinnedpinned");
    assert_eq!(reply(&a).await.unwrap(), "aaa");
    // `pinned` was used least recently, but only `a` may go.
    assert_eq!(reply(&b).await.unwrap(), "bbb");
    until(|| ca.unloads() == 1).await;
    assert_eq!(pool.resident("a"), None);
    assert_eq!(pool.resident("b"), Some(100));
    assert_eq!(reply(&a).await.unwrap(), "aaa");
    until(|| cb.unloads() == 1).await;
    assert_eq!(pool.resident("pinned"), Some(100));
    assert_eq!((p.loads(), p.unloads()), (1, 0));
    assert_eq!((ca.loads(), cb.loads()), (2, 1));

    // Without a pinned model: the least recently used of the idle ones.
    let pool = ResidentPool::new(Some(200), Duration::from_secs(5));
    let (a, ca) = add(&pool, "a", 100, HOUR, Script::Quick);
    let (b, cb) = add(&pool, "b", 100, HOUR, Script::Quick);
    let (c, cc) = add(&pool, "c", 100, HOUR, Script::Quick);
    reply(&a).await.unwrap();
    reply(&b).await.unwrap();
    reply(&a).await.unwrap();
    reply(&c).await.unwrap();
    until(|| cb.unloads() == 1).await;
    assert_eq!((ca.unloads(), cc.unloads()), (0, 0));
    assert_eq!(pool.resident("a"), Some(100));
    assert_eq!(pool.resident("c"), Some(100));
}

#[tokio::test]
async fn requests_during_a_load_wait_for_that_one_load_then_answer() {
    let pool = ResidentPool::new(None, Duration::from_secs(5));
    let gate = Arc::new(Semaphore::new(0));
    let (m, counts) = add(&pool, "m", 100, HOUR, Script::Gated(gate.clone()));
    let waiting: Vec<_> = (0..5)
        .map(|_| {
            let m = m.clone();
            tokio::spawn(async move { reply(&m).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(counts.loads(), 1);
    assert!(waiting.iter().all(|w| !w.is_finished()));
    gate.add_permits(1);
    for w in waiting {
        assert_eq!(w.await.unwrap().unwrap(), "mmm");
    }
    assert_eq!(counts.loads(), 1);
    // Loaded: the next request does not load again.
    assert_eq!(reply(&m).await.unwrap(), "mmm");
    assert_eq!(counts.loads(), 1);
}

#[tokio::test]
async fn another_models_stream_keeps_flowing_during_a_slow_load() {
    let pool = ResidentPool::new(None, Duration::from_secs(5));
    let gate = Arc::new(Semaphore::new(0));
    let (fast, _) = add(&pool, "fast", 100, HOUR, Script::Quick);
    let (slow, _) = add(&pool, "slow", 100, HOUR, Script::Gated(gate.clone()));
    reply(&fast).await.unwrap();
    let loading = {
        let slow = slow.clone();
        tokio::spawn(async move { reply(&slow).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    // The whole stream, while the other model's load holds its thread.
    let streamed = tokio::time::timeout(Duration::from_secs(2), reply(&fast)).await;
    assert_eq!(streamed.unwrap().unwrap(), "fastfastfast");
    assert!(!loading.is_finished());
    gate.add_permits(1);
    assert_eq!(loading.await.unwrap().unwrap(), "slowslowslow");
}

#[tokio::test]
async fn an_unload_waits_for_the_requests_running_on_the_model() {
    // keep_alive = 0: unloaded when the last request ends, not before.
    let pool = ResidentPool::new(None, Duration::from_secs(5));
    let (m, counts) = add(
        &pool,
        "m",
        100,
        KeepAlive::For(Duration::ZERO),
        Script::Quick,
    );
    let mut first = m
        .generator()
        .unwrap()
        .generate(GenerateRequest::default())
        .await
        .unwrap();
    let second = m
        .generator()
        .unwrap()
        .generate(GenerateRequest::default())
        .await
        .unwrap();
    first.next().await.unwrap().unwrap();
    drop(second);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(counts.unloads(), 0);
    assert_eq!(pool.resident("m"), Some(100));
    // Read to its end (not dropped): the end releases the model.
    while first.next().await.is_some() {}
    until(|| counts.unloads() == 1).await;
    assert_eq!(pool.resident("m"), None);
    drop(first);

    // Eviction: the only other model is busy, so the new one waits.
    let pool = ResidentPool::new(Some(100), Duration::from_secs(5));
    let (a, ca) = add(&pool, "a", 100, HOUR, Script::Quick);
    let (b, _) = add(&pool, "b", 100, HOUR, Script::Quick);
    let mut running = a
        .generator()
        .unwrap()
        .generate(GenerateRequest::default())
        .await
        .unwrap();
    let waiting = tokio::spawn(async move { reply(&b).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    assert_eq!(ca.unloads(), 0);
    // The running request still streams, then ends.
    assert!(matches!(
        running.next().await,
        Some(Ok(EngineEvent::Text(t))) if t == "a"
    ));
    drop(running);
    assert_eq!(waiting.await.unwrap().unwrap(), "bbb");
    assert_eq!(ca.unloads(), 1);
    assert_eq!(pool.resident("a"), None);
}

#[tokio::test]
async fn keep_alive_unloads_an_idle_model_and_the_next_request_loads_it_again() {
    let pool = ResidentPool::new(None, Duration::from_secs(5));
    let keep = KeepAlive::For(Duration::from_millis(300));
    let (m, counts) = add(&pool, "m", 100, keep, Script::Quick);
    let (pinned, p) = add(&pool, "pinned", 100, KeepAlive::Forever, Script::Quick);
    reply(&m).await.unwrap();
    reply(&pinned).await.unwrap();
    // Used again within keep_alive: the idle time starts over.
    tokio::time::sleep(Duration::from_millis(150)).await;
    reply(&m).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(counts.unloads(), 0);
    until(|| counts.unloads() == 1).await;
    assert_eq!(reply(&m).await.unwrap(), "mmm");
    assert_eq!(counts.loads(), 2);
    assert_eq!((p.loads(), p.unloads()), (1, 0));
}

#[tokio::test]
async fn a_model_that_fails_to_load_names_its_file_and_the_others_keep_serving() {
    let pool = ResidentPool::new(Some(1000), Duration::from_secs(5));
    let (broken, counts) = add(
        &pool,
        "broken",
        100,
        HOUR,
        Script::Fails("not a GGUF file (bad magic)"),
    );
    let (good, _) = add(&pool, "good", 100, HOUR, Script::Quick);
    let Err(EngineError::Unavailable(message)) = reply(&broken).await else {
        panic!("the broken model answered");
    };
    assert!(message.contains("models/broken.gguf"), "{message}");
    assert!(message.contains("not a GGUF file (bad magic)"), "{message}");
    assert_eq!(reply(&good).await.unwrap(), "goodgoodgood");
    // Its reservation was given back, and a later request tries again.
    assert_eq!(pool.resident("broken"), None);
    assert!(reply(&broken).await.is_err());
    assert_eq!(counts.loads(), 2);
    // A loader that panics fails its load alone, and is tried again.
    let (panics, counts) = add(&pool, "panics", 100, HOUR, Script::Panics);
    for _ in 0..2 {
        let Err(EngineError::Unavailable(message)) = reply(&panics).await else {
            panic!("the panicking model answered");
        };
        assert!(message.contains("models/panics.gguf"), "{message}");
    }
    assert_eq!(counts.loads(), 2);
    assert_eq!(reply(&good).await.unwrap(), "goodgoodgood");
}

#[tokio::test]
async fn past_load_timeout_a_request_gets_unavailable() {
    let pool = ResidentPool::new(Some(100), Duration::from_millis(100));
    let gate = Arc::new(Semaphore::new(0));
    let (slow, counts) = add(&pool, "slow", 100, HOUR, Script::Gated(gate.clone()));
    let refused = reply(&slow).await.unwrap_err();
    let EngineError::Unavailable(message) = &refused else {
        panic!("{refused:?}");
    };
    assert!(message.contains("still loading"), "{message}");
    // What the client gets of it (503, Retry-After, the message) is the
    // server's: svc-server's tests/api/models.rs checks it.
    // The load goes on; once done, the next request is answered by it.
    gate.add_permits(1);
    until(|| pool.resident("slow").is_some()).await;
    assert_eq!(reply(&slow).await.unwrap(), "slowslowslow");
    assert_eq!(counts.loads(), 1);

    // No room while the resident model is busy: the same error.
    let (other, other_counts) = add(&pool, "other", 100, HOUR, Script::Quick);
    let running = slow
        .generator()
        .unwrap()
        .generate(GenerateRequest::default())
        .await
        .unwrap();
    let Err(EngineError::Unavailable(message)) = reply(&other).await else {
        panic!("loaded beside a busy model past the budget");
    };
    assert!(message.contains("models_memory"), "{message}");
    assert_eq!(other_counts.loads(), 0);
    drop(running);
    assert_eq!(reply(&other).await.unwrap(), "otherotherother");

    // A model larger than the whole budget is refused at once.
    let (huge, _) = add(&pool, "huge", 1000, HOUR, Script::Quick);
    let Err(EngineError::Unavailable(message)) = reply(&huge).await else {
        panic!("loaded past the budget");
    };
    assert!(message.contains("more than models_memory"), "{message}");
}

/// The whole text of `events`.
async fn text_of(mut events: EventStream) -> String {
    let mut text = String::new();
    while let Some(event) = events.next().await {
        if let Ok(EngineEvent::Text(piece)) = event {
            text.push_str(&piece);
        }
    }
    text
}

#[tokio::test]
async fn an_unload_asked_for_waits_for_the_running_requests_and_the_counts_say_what_happened() {
    let pool = ResidentPool::new(Some(200), Duration::from_secs(5));
    let (m, counts) = add(&pool, "m", 100, KeepAlive::Forever, Script::Quick);
    let residence = m.residence().unwrap();
    assert_eq!(residence.unload(false), Unload::NotLoaded);
    assert_eq!(residence.residency(), Residency::default());
    residence.load().await.unwrap();
    let loaded = residence.residency();
    assert_eq!(loaded.state, ResidencyState::Loaded);
    assert_eq!(
        (loaded.memory_bytes, loaded.loads, loaded.keep_alive),
        (100, 1, None)
    );
    // In use: unloaded when the last request ends, which is not cut; a
    // request that comes meanwhile is served.
    let running = m
        .generator()
        .unwrap()
        .generate(GenerateRequest::default())
        .await
        .unwrap();
    assert_eq!(residence.unload(false), Unload::WhenIdle);
    assert_eq!(reply(&m).await.unwrap(), "mmm");
    assert_eq!(counts.unloads(), 0);
    assert_eq!(text_of(running).await, "mmm");
    until(|| counts.unloads() == 1).await;
    let unloaded = m.status().residency.unwrap();
    assert_eq!(unloaded.state, ResidencyState::Unloaded);
    assert_eq!(
        (unloaded.memory_bytes, unloaded.loads, unloaded.unloads),
        (0, 1, 1)
    );
    // Asked again, a model kept forever loads again (and stays).
    assert_eq!(reply(&m).await.unwrap(), "mmm");
    // Idle: unloaded at once.
    assert_eq!(residence.unload(false), Unload::Unloaded);
    until(|| counts.unloads() == 2).await;
    let again = residence.residency();
    assert_eq!((again.loads, again.unloads, again.evictions), (2, 2, 0));
    assert!(again.load_seconds >= 0.0);
}

#[tokio::test]
async fn a_model_that_cannot_fit_beside_the_models_kept_forever_is_refused_at_once() {
    let pool = ResidentPool::new(Some(150), Duration::from_secs(60));
    let (pinned, _) = add(&pool, "pinned", 100, KeepAlive::Forever, Script::Quick);
    let (other, oc) = add(&pool, "other", 100, HOUR, Script::Quick);
    reply(&pinned).await.unwrap();
    // Not after load_timeout (a minute): nothing would make room.
    let asked = Instant::now();
    let Err(EngineError::Unavailable(message)) = reply(&other).await else {
        panic!("loaded beside a model kept forever past the budget");
    };
    assert!(asked.elapsed() < Duration::from_secs(10));
    assert!(message.contains("kept forever"), "{message}");
    assert_eq!(oc.loads(), 0);
    let failed = other.status().residency.unwrap();
    assert_eq!((failed.loads, failed.load_failures), (0, 1));
    // Unloaded through the admin API, the pinned model makes room.
    assert_eq!(pinned.residence().unwrap().unload(false), Unload::Unloaded);
    assert_eq!(reply(&other).await.unwrap(), "otherotherother");
    // Asked again, the pinned model evicts the idle one.
    assert_eq!(reply(&pinned).await.unwrap(), "pinnedpinnedpinned");
    until(|| oc.unloads() == 1).await;
    let evicted = other.status().residency.unwrap();
    assert_eq!((evicted.evictions, evicted.unloads), (1, 0));
}

#[tokio::test]
async fn a_loaded_model_takes_of_the_budget_what_its_engine_says_it_holds() {
    let pool = ResidentPool::new(Some(300), Duration::from_secs(5));
    let (a, ca) = add(&pool, "a", 100, HOUR, Script::Quick);
    let (b, cb) = add(&pool, "b", 100, HOUR, Script::Quick);
    let (c, _) = add(&pool, "c", 100, HOUR, Script::Quick);
    reply(&a).await.unwrap();
    reply(&b).await.unwrap();
    // `a`'s saved prefixes grew: by its file's size all three would fit.
    ca.memory.store(250, Ordering::SeqCst);
    assert_eq!(a.residence().unwrap().residency().memory_bytes, 250);
    assert_eq!(reply(&c).await.unwrap(), "ccc");
    until(|| ca.unloads() == 1).await;
    assert_eq!(cb.unloads(), 0);
    assert_eq!(pool.resident("b"), Some(100));
}

#[tokio::test]
async fn a_prompts_count_then_its_generation_load_the_model_once_even_kept_0() {
    // What a request with a budget does: count the prompt, then generate.
    let pool = ResidentPool::new(None, Duration::from_secs(5));
    let (m, counts) = add(
        &pool,
        "m",
        100,
        KeepAlive::For(Duration::ZERO),
        Script::Quick,
    );
    m.generator()
        .unwrap()
        .count_tokens(&GenerateRequest::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(reply(&m).await.unwrap(), "mmm");
    assert_eq!(counts.loads(), 1);
    // After the generation, keep_alive = 0 holds: unloaded at once.
    until(|| counts.unloads() == 1).await;
}

/// A pool of `memory` bytes whose requests wait a minute for a load, a
/// model holding another's room `max_hold`, `loads_per_minute`.
fn pool(memory: u64, max_hold: Duration, loads_per_minute: u32) -> ResidentPool {
    ResidentPool::sharing(
        Some(memory),
        Duration::from_secs(60),
        Sharing {
            max_hold,
            loads_per_minute,
        },
    )
}

/// A chat request whose prompt the plain estimate counts as neither
/// [`LOADED_COUNT`] nor [`COUNTER_COUNT`].
fn chat() -> GenerateRequest {
    GenerateRequest {
        messages: vec![svc_core::engine::ChatMessage::User("hello there".into())],
        ..GenerateRequest::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_prompts_count_never_loads_its_model() {
    // Room for one of a and b: b's counts must not evict a (nor load b).
    let pool = pool(100, Duration::from_secs(60), 100);
    let (a, ca) = add(&pool, "a", 100, HOUR, Script::Slow(Duration::from_secs(1)));
    let counted = Engines {
        counter: true,
        ..Engines::default()
    };
    let (b, cb) = add_model(
        &pool,
        "b",
        100,
        HOUR,
        Script::Slow(Duration::from_secs(1)),
        counted,
    );
    assert_eq!(reply(&a).await.unwrap(), "aaa");
    let estimate = estimate_tokens(&chat());
    assert_ne!(estimate, COUNTER_COUNT);
    // The attack's pattern: b's prompt counted once a second beside a's chats.
    for _ in 0..10 {
        assert_eq!(
            b.generator().unwrap().count_tokens(&chat()).await.unwrap(),
            COUNTER_COUNT
        );
        assert_eq!(reply(&a).await.unwrap(), "aaa");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!((ca.loads(), cb.loads()), (1, 0));
    // Its counter was made once, for every count.
    assert_eq!(cb.counters.load(Ordering::SeqCst), 1);
    // Listing it does not load it either.
    assert_eq!(
        b.status().residency.unwrap().state,
        ResidencyState::Unloaded
    );
    assert_eq!(b.fingerprint(), None);
    assert_eq!(cb.loads(), 0);
    // A model without a counter: the plain estimate, no load.
    let (c, cc) = add(&pool, "c", 100, HOUR, Script::Quick);
    assert_eq!(
        c.generator().unwrap().count_tokens(&chat()).await.unwrap(),
        estimate
    );
    assert_eq!(cc.loads(), 0);
    // Loaded, its engine counts.
    assert_eq!(reply(&b).await.unwrap(), "bbb");
    assert_eq!(
        b.generator().unwrap().count_tokens(&chat()).await.unwrap(),
        LOADED_COUNT
    );
    assert_eq!((ca.loads(), cb.loads()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn two_models_in_room_for_one_load_once_per_request_and_a_fresh_load_is_its_requests() {
    // Each request's task is slow to look again once its model is loaded
    // (a busy machine's: the other model's load got there first), while
    // the other model's request waits for the room.
    let pool = pool(100, Duration::from_secs(60), 100);
    let slow = Script::Slow(Duration::from_secs(1));
    let (a, ca) = add(&pool, "a", 100, HOUR, slow.clone());
    let (b, cb) = add(&pool, "b", 100, HOUR, slow);
    let requests = 12;
    // Each turn, a request for the model not loaded, then one for the other.
    for _ in 0..requests / 2 {
        let loaded = |m: &Arc<dyn Engine>| {
            m.status().residency.map(|r| r.state) == Some(ResidencyState::Loaded)
        };
        let (first, second) = if loaded(&b) { (&a, &b) } else { (&b, &a) };
        let mut first_request = first
            .generator()
            .unwrap()
            .generate(GenerateRequest::default());
        // Its model's load starts.
        assert!(futures::poll!(first_request.as_mut()).is_pending());
        let waiting = {
            let second = second.clone();
            tokio::spawn(async move { reply(&second).await })
        };
        // The first model is loaded meanwhile; its request looks again only now.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let events = first_request.await.unwrap();
        assert_eq!(text_of(events).await.len(), 3);
        assert_eq!(waiting.await.unwrap().unwrap().len(), 3);
    }
    let loads = ca.loads() + cb.loads();
    println!("{loads} loads for {requests} requests");
    assert!(loads <= requests, "{loads} loads for {requests} requests");
    // No load was evicted before the request it was made for took it.
    assert_eq!((ca.wasted(), cb.wasted()), (0, 0));
}

/// Reads `events` to their end: the text, and the error that ended them.
async fn read_all(mut events: EventStream) -> (String, Option<EngineError>) {
    let mut text = String::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(EngineEvent::Text(piece)) => text.push_str(&piece),
            Ok(_) => {}
            Err(e) => {
                assert!(events.next().await.is_none(), "items after the error");
                return (text, Some(e));
            }
        }
    }
    (text, None)
}

#[tokio::test(start_paused = true)]
async fn a_model_held_by_a_long_request_is_given_up_after_max_hold_when_another_waits() {
    let max_hold = Duration::from_secs(10);
    let pool = pool(100, max_hold, 100);
    // a streams for 1,000 s.
    let long = Engines {
        pieces: 1000,
        every: Duration::from_secs(1),
        counter: false,
        ..Engines::default()
    };
    let (a, ca) = add_model(&pool, "a", 100, HOUR, Script::Quick, long);
    let (b, cb) = add(&pool, "b", 100, HOUR, Script::Slow(Duration::from_secs(2)));
    let mut stream = a
        .generator()
        .unwrap()
        .generate(GenerateRequest::default())
        .await
        .unwrap();
    assert!(matches!(
        stream.next().await,
        Some(Ok(EngineEvent::Text(_)))
    ));
    let running = tokio::spawn(read_all(stream));
    let asked = tokio::time::Instant::now();
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { reply(&b).await })
    };
    // A new request for a meanwhile waits for a's next load (after b's).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let later = {
        let a = a.clone();
        tokio::spawn(async move { reply(&a).await })
    };
    assert_eq!(waiting.await.unwrap().unwrap(), "bbb");
    let waited = asked.elapsed();
    println!("b answered after {waited:?} beside a's stream (max_hold {max_hold:?})");
    // Within max_hold and its load (a minute's load_timeout would be 503).
    assert!(waited >= max_hold, "{waited:?}");
    assert!(waited < Duration::from_secs(30), "{waited:?}");
    // a's stream was ended with an error naming max_hold.
    let (text, ended) = running.await.unwrap();
    assert!(text.len() < 100, "{text}");
    let Some(EngineError::Unavailable(message)) = ended else {
        panic!("{ended:?}");
    };
    assert!(message.contains("max_hold"), "{message}");
    assert_eq!(ca.unloads(), 1);
    // a's next request is answered once b's is done.
    assert_eq!(later.await.unwrap().unwrap().len(), 1000);
    assert_eq!((ca.loads(), cb.loads()), (2, 1));
    assert_eq!((ca.wasted(), cb.wasted()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_forced_unload_ends_the_running_requests_at_once() {
    let pool = pool(1000, Duration::from_secs(60), 100);
    let long = Engines {
        pieces: 1000,
        every: Duration::from_secs(1),
        counter: false,
        ..Engines::default()
    };
    let (m, counts) = add_model(&pool, "m", 100, HOUR, Script::Quick, long);
    let residence = m.residence().unwrap();
    // A stream whose client reads nothing more, and a call in one piece.
    let mut stream = m
        .generator()
        .unwrap()
        .generate(GenerateRequest::default())
        .await
        .unwrap();
    assert!(matches!(
        stream.next().await,
        Some(Ok(EngineEvent::Text(_)))
    ));
    let embedding = {
        let m = m.clone();
        tokio::spawn(async move {
            let inputs = vec![svc_core::engine::EmbedInput::Text("x".into())];
            m.embedder()
                .unwrap()
                .embed(EmbedRequest {
                    inputs,
                    ..EmbedRequest::default()
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Not forced: it waits for them.
    assert_eq!(residence.unload(false), Unload::WhenIdle);
    assert_eq!(counts.unloads(), 0);
    assert_eq!(residence.unload(true), Unload::Unloaded);
    // The model's memory is given back without the client reading on.
    until(|| counts.unloads() == 1).await;
    assert_eq!(pool.resident("m"), None);
    let (_, ended) = read_all(stream).await;
    let Some(EngineError::Unavailable(message)) = ended else {
        panic!("{ended:?}");
    };
    assert!(message.contains("administrator"), "{message}");
    let Err(EngineError::Unavailable(message)) = embedding.await.unwrap() else {
        panic!("the embedding went on");
    };
    assert!(message.contains("administrator"), "{message}");
    // The next request loads it again.
    assert_eq!(m.residence().unwrap().unload(true), Unload::NotLoaded);
    assert_eq!(
        text_of(
            m.generator()
                .unwrap()
                .generate(GenerateRequest::default())
                .await
                .unwrap()
        )
        .await
        .len(),
        1000
    );
    assert_eq!(counts.loads(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_model_loads_at_most_max_loads_per_minute_times_in_any_minute() {
    let pool = pool(100, Duration::from_secs(60), 3);
    let (a, ca) = add(&pool, "a", 100, HOUR, Script::Quick);
    let (b, cb) = add(&pool, "b", 100, HOUR, Script::Quick);
    // Alternating requests, one a second: each would load its model.
    let started = tokio::time::Instant::now();
    let mut refused = 0;
    for i in 0..40 {
        let model = if i % 2 == 0 { &a } else { &b };
        match reply(model).await {
            Ok(text) => assert_eq!(text.len(), 3),
            Err(EngineError::Unavailable(message)) => {
                assert!(message.contains("max_loads_per_minute"), "{message}");
                refused += 1;
            }
            Err(e) => panic!("{e:?}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let took = started.elapsed();
    for counts in [&ca, &cb] {
        let at = counts.started.lock().unwrap().clone();
        for window in at.windows(4) {
            assert!(
                window[3] - window[0] >= Duration::from_secs(60),
                "4 loads within {:?}",
                window[3] - window[0]
            );
        }
    }
    println!(
        "{} loads for 40 requests over {took:?}, {refused} refused",
        ca.loads() + cb.loads()
    );
    // A load waits for the minute (up to load_timeout), not refused.
    assert_eq!(refused, 0);

    // Past load_timeout, a load is refused at once, saying why.
    let pool = ResidentPool::sharing(
        Some(100),
        Duration::from_secs(10),
        Sharing {
            max_hold: Duration::from_secs(5),
            loads_per_minute: 1,
        },
    );
    let (a, ca) = add(&pool, "a", 100, HOUR, Script::Quick);
    let (b, _) = add(&pool, "b", 100, HOUR, Script::Quick);
    reply(&a).await.unwrap();
    reply(&b).await.unwrap();
    let asked = tokio::time::Instant::now();
    let Err(EngineError::Unavailable(message)) = reply(&a).await else {
        panic!("loaded twice in a minute");
    };
    assert!(message.contains("max_loads_per_minute"), "{message}");
    assert!(asked.elapsed() < Duration::from_secs(1));
    assert_eq!(ca.loads(), 1);
}

/// Every capability the model is served for is offered before it is
/// loaded and reaches the loaded engine: a capability the wrapper did not
/// forward (as transcription and speech once were not) fails here.
#[tokio::test]
async fn every_capability_reaches_the_loaded_model() {
    let pool = ResidentPool::new(None, Duration::from_secs(5));
    let (m, counts) = add(&pool, "m", 100, HOUR, Script::Quick);
    assert_eq!(m.offered(), Capability::ALL.to_vec());
    assert_eq!(counts.loads(), 0, "what it offers is known unloaded");
    for capability in Capability::ALL {
        let before = counts.served();
        match capability {
            Capability::Generation => {
                assert_eq!(reply(&m).await.unwrap(), "mmm");
                let request = chat();
                let count = m.generating("m").unwrap().count_tokens(&request);
                assert_eq!(count.await.unwrap(), LOADED_COUNT);
            }
            Capability::Vision => assert!(m.generator().unwrap().sees_images()),
            Capability::Embedding => {
                let request = EmbedRequest {
                    inputs: vec![svc_core::engine::EmbedInput::Text("x".into())],
                    ..EmbedRequest::default()
                };
                let embedded = m.embedding("m").unwrap().embed(request).await.unwrap();
                assert_eq!(embedded.prompt_tokens, 3);
            }
            Capability::Reranking => {
                let reranking = m.reranking("m").unwrap();
                let reranked = reranking.rerank(RerankRequest::default()).await.unwrap();
                assert_eq!(reranked.prompt_tokens, 4);
            }
            Capability::Transcription => {
                let transcribing = m.transcribing("m").unwrap();
                let request = TranscribeRequest::default();
                let transcript = transcribing.transcribe(request).await.unwrap();
                assert_eq!(transcript.body, "m");
            }
            Capability::Speech => {
                let speaking = m.speaking("m").unwrap();
                let speech = speaking.speak(SpeechRequest::default()).await.unwrap();
                assert_eq!(speech.content_type, "audio/wav");
                let audio: Vec<_> = speech.audio.collect().await;
                assert_eq!(audio.len(), 1);
                assert_eq!(audio[0].as_ref().unwrap(), &bytes::Bytes::from("m"));
            }
        }
        if capability != Capability::Vision {
            assert!(counts.served() > before, "{capability:?} not forwarded");
        }
    }
    assert_eq!(counts.loads(), 1);
}

/// A model served for some capabilities offers only those: asked for
/// another, it refuses as every engine does, without loading.
#[tokio::test]
async fn a_model_offers_only_what_it_is_served_for() {
    let pool = ResidentPool::new(None, Duration::from_secs(5));
    let embeds = Engines {
        offers: &[Capability::Embedding],
        ..Engines::default()
    };
    let (e, counts) = add_model(&pool, "e", 100, HOUR, Script::Quick, embeds);
    assert_eq!(e.offered(), vec![Capability::Embedding]);
    let Err(EngineError::InvalidRequest { param, message }) = e.generating("e") else {
        panic!("an embedding model generates");
    };
    assert_eq!(param.as_deref(), Some("model"));
    assert!(
        message.starts_with("model e does not generate text"),
        "{message}"
    );
    assert!(e.transcriber().is_none() && e.speaker().is_none() && e.reranker().is_none());
    assert_eq!(counts.loads(), 0);
}

/// Runs the future `scenario` makes on a runtime of its own (one thread,
/// paused time) and waits up to a minute of real time for its answer: a
/// pool that loops without awaiting never answers there (nothing else
/// runs), where it would pin a worker thread of a larger runtime.
fn answered_within_a_minute<T, F>(scenario: impl FnOnce() -> F + Send + 'static) -> T
where
    F: std::future::Future<Output = T>,
    T: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let _ = tx.send(runtime.block_on(scenario()));
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(answer) => answer,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("no answer within a minute: the pool loops without awaiting")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("the scenario failed (see its panic above)")
        }
    }
}

#[test]
fn a_fresh_load_is_drained_only_once_its_requests_took_it_and_max_hold_counts_from_then() {
    let (a, c, x, c_wasted) = answered_within_a_minute(|| async {
        let max_hold = Duration::from_secs(10);
        let pool = pool(200, max_hold, 100);
        // a and c stream for 1,000 s; x needs all the room.
        let long = Engines {
            pieces: 1000,
            every: Duration::from_secs(1),
            counter: false,
            ..Engines::default()
        };
        let slow = Script::Slow(Duration::from_secs(20));
        let (a, _) = add_model(&pool, "a", 100, HOUR, Script::Quick, long);
        let (c, cc) = add_model(&pool, "c", 100, HOUR, slow, long);
        let (x, _) = add(&pool, "x", 200, HOUR, Script::Quick);
        let mut stream = a
            .generator()
            .unwrap()
            .generate(GenerateRequest::default())
            .await
            .unwrap();
        assert!(stream.next().await.is_some());
        let a = tokio::spawn(read_all(stream));
        // c's load has room beside a, and takes 20 s.
        let c = tokio::spawn(async move {
            let events = c
                .generator()
                .unwrap()
                .generate(GenerateRequest::default())
                .await
                .unwrap();
            read_all(events).await
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        // x drains a (ended after max_hold), then c once its request took it.
        let x = tokio::spawn(async move { reply(&x).await });
        let (a, c, x) = (a.await.unwrap(), c.await.unwrap(), x.await.unwrap());
        (a, c, x, cc.wasted())
    });
    assert_eq!(x.unwrap(), "xxx");
    for (model, (text, ended)) in [("a", a), ("c", c)] {
        let Some(EngineError::Unavailable(message)) = ended else {
            panic!("{model}: {ended:?}");
        };
        assert!(message.contains("max_hold"), "{model}: {message}");
        // Each streamed about max_hold (10 pieces) after it was drained.
        assert!(text.len() >= 5, "{model} streamed only {text:?}");
    }
    // c's load served the request it was made for.
    assert_eq!(c_wasted, 0);
}

#[tokio::test(start_paused = true)]
async fn a_load_given_up_before_it_started_is_not_counted_in_max_loads_per_minute() {
    let pool = pool(100, Duration::from_secs(60), 2);
    let long = Engines {
        pieces: 1000,
        every: Duration::from_secs(1),
        counter: false,
        ..Engines::default()
    };
    let (a, _) = add_model(&pool, "a", 100, HOUR, Script::Quick, long);
    let (b, cb) = add(&pool, "b", 100, HOUR, Script::Quick);
    let mut stream = a
        .generator()
        .unwrap()
        .generate(GenerateRequest::default())
        .await
        .unwrap();
    assert!(stream.next().await.is_some());
    // The attack: b's requests, each given up while its load waits for a's room.
    for _ in 0..3 {
        let waiting = {
            let b = b.clone();
            tokio::spawn(async move { reply(&b).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        waiting.abort();
        assert!(waiting.await.unwrap_err().is_cancelled());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(cb.loads(), 0);
    drop(stream);
    // No load of b happened: the next loads at once.
    let asked = tokio::time::Instant::now();
    assert_eq!(reply(&b).await.unwrap(), "bbb");
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(cb.loads(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_load_that_fits_in_room_no_earlier_load_needs_goes_ahead_of_them() {
    let max_hold = Duration::from_secs(30);
    let long = Engines {
        pieces: 1000,
        every: Duration::from_secs(1),
        counter: false,
        ..Engines::default()
    };
    for (waits, small_first) in [(150, true), (180, false)] {
        let pool = pool(200, max_hold, 100);
        let (a, _) = add_model(&pool, "a", 100, HOUR, Script::Quick, long);
        let (x, cx) = add(&pool, "x", waits, HOUR, Script::Quick);
        let (s, cs) = add(&pool, "s", 50, HOUR, Script::Quick);
        let mut stream = a
            .generator()
            .unwrap()
            .generate(GenerateRequest::default())
            .await
            .unwrap();
        assert!(stream.next().await.is_some());
        let running = tokio::spawn(read_all(stream));
        // x waits for a's room (up to max_hold).
        let x_request = {
            let x = x.clone();
            tokio::spawn(async move { reply(&x).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        let s_request = tokio::spawn(async move { reply(&s).await });
        tokio::time::sleep(Duration::from_secs(5)).await;
        if small_first {
            // s fits in the free room, and beside x once a is gone: it
            // need not wait for x (max_hold).
            assert!(s_request.is_finished(), "x={waits}: s waits behind x");
        } else {
            // s would take room x needs (x would drain s after a): it
            // waits its turn.
            assert_eq!(cs.loads(), 0, "x={waits}: s took the room x waits for");
        }
        assert_eq!(x_request.await.unwrap().unwrap(), "xxx");
        assert_eq!(s_request.await.unwrap().unwrap(), "sss");
        let (_, ended) = running.await.unwrap();
        assert!(ended.is_some());
        let (x_at, s_at) = (cx.started.lock().unwrap()[0], cs.started.lock().unwrap()[0]);
        assert_eq!(s_at < x_at, small_first);
        assert_eq!((cx.loads(), cs.loads()), (1, 1));
    }
}

/// An embedding request's inputs.
fn embedding() -> EmbedRequest {
    EmbedRequest {
        inputs: vec![svc_core::engine::EmbedInput::Text("x".into())],
        ..EmbedRequest::default()
    }
}

#[tokio::test(start_paused = true)]
async fn an_ended_calls_model_takes_its_memory_until_the_call_let_go_of_it() {
    let pool = pool(100, Duration::from_secs(10), 100);
    // An embedding takes 1,000 s.
    let long = Engines {
        pieces: 1000,
        every: Duration::from_secs(1),
        counter: false,
        ..Engines::default()
    };
    let (m, cm) = add_model(&pool, "m", 100, HOUR, Script::Quick, long);
    let (b, cb) = add(&pool, "b", 100, HOUR, Script::Quick);

    // A forced unload ends the call; its work (this future, which holds
    // m's engine) is not dropped yet.
    assert_eq!(reply(&m).await.unwrap().len(), 1000);
    let mut call = m.embedder().unwrap().embed(embedding());
    assert!(futures::poll!(call.as_mut()).is_pending());
    assert_eq!(m.residence().unwrap().unload(true), Unload::Unloaded);
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { reply(&b).await })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(cm.unloads(), 0);
    assert_eq!(
        cb.loads(),
        0,
        "b loaded while m's engine still took its memory"
    );
    let Err(EngineError::Unavailable(message)) = call.await else {
        panic!("the embedding went on");
    };
    assert!(message.contains("administrator"), "{message}");
    assert_eq!(waiting.await.unwrap().unwrap(), "bbb");
    assert_eq!((cm.unloads(), cb.loads()), (1, 1));

    // The same after max_hold: b's load ends m's call, then waits for it.
    assert_eq!(reply(&m).await.unwrap().len(), 1000);
    let mut call = m.embedder().unwrap().embed(embedding());
    assert!(futures::poll!(call.as_mut()).is_pending());
    assert_eq!(cb.unloads(), 1);
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { reply(&b).await })
    };
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(cm.unloads(), 1);
    assert_eq!(
        cb.loads(),
        1,
        "b loaded while m's engine still took its memory"
    );
    let Err(EngineError::Unavailable(message)) = call.await else {
        panic!("the embedding went on");
    };
    assert!(message.contains("max_hold"), "{message}");
    assert_eq!(waiting.await.unwrap().unwrap(), "bbb");
    assert_eq!((cm.unloads(), cb.loads()), (2, 2));
}
