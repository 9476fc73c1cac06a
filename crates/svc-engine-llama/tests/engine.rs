//! The engine end to end on tiny GGUF models the tests write themselves (see
//! `svc_engine_llama::testing`): greedy replies, seeds, stop sequences,
//! UTF-8, limits, cancellation, the queue, and batching of concurrent requests.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::path::Path;
use std::time::Duration;

use futures::StreamExt as _;
use svc_core::engine::{
    ChatMessage, Engine, EngineError, EngineEvent, EventStream, FinishReason, GenerateRequest,
    Generator, OutputFormat, Sampling, TokenUsage, ToolChoiceSpec,
};
use svc_engine_llama::testing::{self, TinyModel};
use svc_engine_llama::{
    CompletionParams, EngineStats, Grammar, LlamaEngine, LlamaEngineOptions, RenderOptions,
};
use tempfile::TempDir;

const HELLO: &str = "Hello, world! é 😀 end.";

struct Fixture {
    engine: LlamaEngine,
    _dir: TempDir,
}

fn engine(model: &TinyModel, parallel: u32, queue: usize, context: u32) -> Fixture {
    engine_with(model, |options| {
        options.parallel = parallel;
        options.queue_capacity = queue;
        options.context_per_sequence = context;
    })
}

/// An engine on `model` with 2 threads and the options `set` sets.
fn engine_with(model: &TinyModel, set: impl FnOnce(&mut LlamaEngineOptions)) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    model.write(&path).unwrap();
    let mut options = LlamaEngineOptions::new(&path);
    options.threads = Some(2);
    set(&mut options);
    let engine = LlamaEngine::load(&options).unwrap();
    Fixture { engine, _dir: dir }
}

fn request(user: &str, sampling: Sampling) -> GenerateRequest {
    GenerateRequest {
        messages: vec![ChatMessage::User(user.into())],
        sampling,
        max_tokens: None,
        stop: vec![],
        tools: vec![],
        tool_choice: ToolChoiceSpec::Auto,
        output: OutputFormat::Text,
        reasoning: false,
        stream: true,
        ..GenerateRequest::default()
    }
}

fn greedy() -> Sampling {
    Sampling {
        temperature: 0.0,
        ..Sampling::default()
    }
}

fn seeded(seed: u64) -> Sampling {
    Sampling {
        temperature: 1.0,
        seed: Some(seed),
        ..Sampling::default()
    }
}

/// Everything one stream says: text pieces, finish reason, usage.
#[derive(Debug)]
struct Outcome {
    pieces: Vec<String>,
    reason: FinishReason,
    usage: TokenUsage,
}

impl Outcome {
    fn text(&self) -> String {
        self.pieces.concat()
    }
}

async fn collect(mut stream: EventStream) -> Outcome {
    let mut pieces = Vec::new();
    let next = async {
        while let Some(event) = stream.next().await {
            match event.unwrap() {
                EngineEvent::Text(t) => {
                    assert!(!t.is_empty(), "empty text event");
                    pieces.push(t);
                }
                EngineEvent::Finish { reason, usage } => {
                    assert!(stream.next().await.is_none(), "events after finish");
                    return (reason, usage);
                }
                other => panic!("unexpected event {other:?}"),
            }
        }
        panic!("stream ended without a finish event");
    };
    let (reason, usage) = tokio::time::timeout(Duration::from_secs(60), next)
        .await
        .expect("generation timed out");
    Outcome {
        pieces,
        reason,
        usage,
    }
}

async fn run(engine: &LlamaEngine, request: GenerateRequest) -> Outcome {
    collect(engine.generate(request).await.unwrap()).await
}

/// Runs `requests` admitted together (see [`testing::together`]).
async fn together(engine: &LlamaEngine, requests: Vec<GenerateRequest>) -> Vec<Outcome> {
    let n = requests.len() as u64;
    let runs = futures::future::join_all(requests.into_iter().map(|r| run(engine, r)));
    testing::together(engine, n, runs).await
}

fn prompt_tokens(engine: &LlamaEngine, user: &str) -> u64 {
    let prompt = engine
        .render_prompt(
            &[ChatMessage::User(user.into())],
            &[],
            &RenderOptions::default(),
        )
        .unwrap();
    engine.tokenize(&prompt).len() as u64
}

#[tokio::test]
async fn greedy_reply_streams_whole_characters_and_counts_real_tokens() {
    let f = engine(&TinyModel::hello(), 1, 4, 256);
    assert!(f.engine.info().chat_template_from_model);
    let out = run(&f.engine, request("Hi there", greedy())).await;
    assert_eq!(out.text(), HELLO);
    assert_eq!(out.reason, FinishReason::Stop);
    // "é" and "😀" each come from two tokens, yet arrive whole.
    assert_eq!(
        out.pieces,
        [
            "Hel", "lo", ",", " wor", "ld", "!", " ", "é", " ", "😀", " end", "."
        ]
    );
    assert!(!out.text().contains('\u{FFFD}'));
    assert_eq!(
        out.usage,
        TokenUsage {
            prompt_tokens: prompt_tokens(&f.engine, "Hi there"),
            cached_tokens: 0,
            // 12 scripted tokens and the end-of-turn token.
            completion_tokens: 13,
            ..TokenUsage::default()
        }
    );
    assert_eq!(f.engine.name(), "llama");
}

#[tokio::test]
async fn stop_sequences_split_across_tokens_never_appear() {
    let f = engine(&TinyModel::hello(), 1, 4, 256);
    for (stop, expected) in [
        ("lo, w", "Hel"),
        ("é 😀", "Hello, world! "),
        ("\u{1F600} e", "Hello, world! é "),
        ("Hello", ""),
    ] {
        let mut req = request("Hi", greedy());
        req.stop = vec!["never".into(), stop.into()];
        let out = run(&f.engine, req).await;
        assert_eq!(out.text(), expected, "stop {stop:?}");
        assert_eq!(out.reason, FinishReason::Stop);
        assert!(out.pieces.iter().all(|p| !p.contains('\u{FFFD}')));
    }
    // A stop that starts to match but never completes holds nothing back for good.
    let mut req = request("Hi", greedy());
    req.stop = vec!["world?".into(), "end!".into()];
    assert_eq!(run(&f.engine, req).await.text(), HELLO);
}

#[tokio::test]
async fn max_tokens_ends_with_length() {
    let f = engine(&TinyModel::hello(), 1, 4, 256);
    let mut req = request("Hi", greedy());
    req.max_tokens = Some(3);
    let out = run(&f.engine, req).await;
    assert_eq!(out.text(), "Hello,");
    assert_eq!(out.reason, FinishReason::Length);
    assert_eq!(out.usage.completion_tokens, 3);

    // Without max_tokens, the reply may fill what the prompt leaves of the context.
    let f = engine(&TinyModel::looping(), 1, 4, 256);
    let out = run(&f.engine, request("Hi", greedy())).await;
    assert_eq!(out.reason, FinishReason::Length);
    let prompt = prompt_tokens(&f.engine, "Hi");
    assert_eq!(out.usage.prompt_tokens + out.usage.completion_tokens, 256);
    assert_eq!(out.usage.prompt_tokens, prompt);
    assert!(out.text().starts_with(&format!("{HELLO}{HELLO}")));
}

#[tokio::test]
async fn same_seed_same_text_even_beside_other_requests() {
    let f = engine(&TinyModel::looping(), 4, 8, 256);
    let with = |sampling: Sampling| {
        let mut req = request("Tell me something", sampling);
        req.max_tokens = Some(40);
        req
    };
    let alone = run(&f.engine, with(seeded(42))).await.text();
    assert_eq!(run(&f.engine, with(seeded(42))).await.text(), alone);

    // The same request as choice 0 of two: the engine admits a request's
    // choices together and decodes them in one batch, whatever the timing
    // (choice 1 is seeded 43).
    let mut two = with(seeded(42));
    two.n = 2;
    let choices = collect_choices(f.engine.generate(two).await.unwrap(), 2).await;
    assert!(f.engine.stats().max_sequences_per_step >= 2);
    assert_eq!(choices[0].0, alone);
    assert_eq!(choices[1].0, run(&f.engine, with(seeded(43))).await.text());

    // And in one batch with three requests of other samplings.
    let [a, b, c, d]: [Outcome; 4] = together(
        &f.engine,
        vec![
            with(seeded(7)),
            with(seeded(42)),
            with(greedy()),
            with(seeded(9)),
        ],
    )
    .await
    .try_into()
    .unwrap();
    assert_eq!(b.text(), alone);
    assert_eq!(f.engine.stats().max_sequences_per_step, 4);

    // Greedy is the script, alone or batched.
    let greedy_alone = run(&f.engine, with(greedy())).await.text();
    assert_eq!(c.text(), greedy_alone);
    assert!(greedy_alone.starts_with(HELLO));

    // Seeds matter: temperature 1 strays from the script differently.
    let mut texts: Vec<String> = vec![alone, a.text(), d.text()];
    for seed in [1, 2, 3] {
        texts.push(run(&f.engine, with(seeded(seed))).await.text());
    }
    texts.sort();
    texts.dedup();
    assert!(texts.len() >= 3, "{texts:?}");
}

#[tokio::test]
async fn concurrent_requests_decode_in_one_batch() {
    let f = engine(&TinyModel::looping(), 4, 8, 512);
    let with = || {
        let mut req = request("Go", greedy());
        req.max_tokens = Some(48);
        req
    };
    let results = together(&f.engine, (0..4).map(|_| with()).collect()).await;
    // A finish event is sent after the slot is free again.
    let stats = f.engine.stats();
    assert_eq!(stats.active_sequences, 0);
    assert_eq!(stats.max_sequences_per_step, 4, "{stats:?}");
    let first = results[0].text();
    assert!(first.starts_with(HELLO));
    for r in &results {
        assert_eq!(r.text(), first);
        assert_eq!(r.usage.completion_tokens, 48);
    }
    // Four sequences of 48 tokens took far fewer than 4 * 48 steps.
    assert!(stats.decode_steps < 100, "{stats:?}");
}

#[tokio::test]
async fn dropping_the_stream_frees_the_slot_at_once() {
    // One slot; the first request would run for about 4000 tokens.
    let f = engine(&TinyModel::looping(), 1, 4, 4096);
    let mut first = f.engine.generate(request("Go on", greedy())).await.unwrap();
    let waiting = f.engine.generate({
        let mut req = request("Short", greedy());
        req.max_tokens = Some(5);
        req
    });
    let waiting = waiting.await.unwrap();
    assert!(matches!(first.next().await, Some(Ok(EngineEvent::Text(_)))));
    drop(first);
    let out = collect(waiting).await;
    assert_eq!(out.text(), "Hello, world");
    let stats = f.engine.stats();
    assert_eq!(stats.active_sequences, 0);
    assert_eq!(stats.cancelled, 1, "{stats:?}");
    assert!(
        stats.generated_tokens < 200,
        "the cancelled sequence kept going: {stats:?}"
    );
}

#[tokio::test]
async fn a_full_queue_is_overloaded() {
    let f = engine(&TinyModel::looping(), 1, 1, 4096);
    let _running = f.engine.generate(request("one", greedy())).await.unwrap();
    let _queued = f.engine.generate(request("two", greedy())).await.unwrap();
    let refused = f.engine.generate(request("three", greedy())).await.err();
    assert!(
        matches!(refused, Some(EngineError::Overloaded(_))),
        "{refused:?}"
    );
}

/// The replies of an `n > 1` stream, by choice: text and completion tokens.
async fn collect_choices(mut stream: EventStream, n: usize) -> Vec<(String, u64)> {
    let mut replies = vec![(String::new(), 0); n];
    let mut current = 0;
    let all = async {
        while let Some(event) = stream.next().await {
            match event.unwrap() {
                EngineEvent::Choice(i) => current = i as usize,
                EngineEvent::Text(t) => replies[current].0.push_str(&t),
                EngineEvent::Finish { usage, .. } => replies[current].1 = usage.completion_tokens,
                other => panic!("unexpected event {other:?}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("generation timed out");
    replies
}

// Issue 29, finding 4: `n` equal to the slots took every slot for the whole
// generation, and another client waited for all of it.
#[tokio::test]
async fn n_equal_to_the_slots_leaves_room_for_another_client() {
    let f = engine(&TinyModel::looping(), 4, 8, 4096);
    let mut long = request("Go on", greedy());
    long.n = 4;
    long.max_tokens = Some(600);
    long.client = Some("key_a".into());
    let mut hog = f.engine.generate(long).await.unwrap();
    assert!(matches!(hog.next().await, Some(Ok(EngineEvent::Text(_)))));

    let mut short = request("Hi", greedy());
    short.max_tokens = Some(5);
    short.client = Some("key_b".into());
    let out = run(&f.engine, short).await;
    assert_eq!(out.text(), "Hello, world");
    // The other client was served while the n = 4 request still runs: it
    // held every slot while alone, and gave one back within a step (one
    // of its choices suspended, resumed when the other's reply ended).
    let stats = f.engine.stats();
    assert!(stats.active_sequences >= 1, "{stats:?}");
    assert_eq!(stats.max_sequences_per_step, 4, "{stats:?}");
    assert!(stats.suspended >= 1, "{stats:?}");

    // Its four choices all finish, each of the whole length.
    let rest = collect_choices(hog, 4).await;
    for (i, (_, tokens)) in rest.iter().enumerate() {
        assert_eq!(*tokens, 600, "choice {i}");
    }
}

// Issue 46: the share bound even when nobody else waited, and one key's
// 16 streams ran 8 at a time while 8 slots stayed idle.
#[tokio::test]
async fn a_client_alone_takes_every_slot_and_gives_back_its_share_when_another_asks() {
    let f = engine_with(&TinyModel::looping(), |o| {
        o.parallel = 4;
        o.queue_capacity = 8;
        o.context_per_sequence = 512;
        o.slots_per_client = Some(3);
    });
    let from = |client: &str, tokens: u32| {
        let mut req = request("Go", greedy());
        req.max_tokens = Some(tokens);
        req.client = Some(client.into());
        req
    };
    // Five requests of one key, alone: four at a time, the fifth as one ends.
    let results = together(&f.engine, (0..5).map(|_| from("key_a", 48)).collect()).await;
    let stats = f.engine.stats();
    assert_eq!(stats.max_sequences_per_step, 4, "{stats:?}");
    assert_eq!(stats.suspended, 0, "{stats:?}");
    for r in &results {
        assert_eq!(r.text(), results[0].text());
        assert_eq!(r.usage.completion_tokens, 48);
    }
    // Another key's request that comes with them takes the slot beyond
    // the first key's share; nothing is suspended for it.
    let both = together(
        &f.engine,
        vec![
            from("key_a", 48),
            from("key_a", 48),
            from("key_a", 48),
            from("key_a", 48),
            from("key_b", 48),
        ],
    )
    .await;
    assert!(both.iter().all(|r| r.usage.completion_tokens == 48));
    assert_eq!(f.engine.stats().suspended, 0);

    // One that comes while the first key holds every slot gets one within
    // a step: the first key's newest sequence is suspended, and resumed
    // with all it had once the slot is free again.
    let alone = run(&f.engine, from("key_c", 400)).await.text();
    let mut hogs = Vec::new();
    for _ in 0..4 {
        let mut hog = f.engine.generate(from("key_a", 400)).await.unwrap();
        let Some(Ok(EngineEvent::Text(head))) = hog.next().await else {
            panic!("no first token");
        };
        hogs.push((head, hog));
    }
    assert_eq!(f.engine.stats().active_sequences, 4);
    let other = run(&f.engine, from("key_b", 8)).await;
    assert_eq!(other.usage.completion_tokens, 8);
    let stats = f.engine.stats();
    assert_eq!(stats.suspended, 1, "{stats:?}");
    assert!(stats.active_sequences >= 3, "{stats:?}");
    for (head, hog) in hogs {
        let out = collect(hog).await;
        assert_eq!(out.usage.completion_tokens, 400);
        assert_eq!(head + &out.text(), alone);
    }
    assert_eq!(f.engine.stats().resumed, 1);
}

// Issue 46: when another key's request needs a slot, the key beyond its
// share gives up its background work (a batch's line) before a sequence
// somebody waits on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_work_is_suspended_before_interactive_work() {
    let f = engine_with(&TinyModel::looping(), |o| {
        o.parallel = 4;
        o.queue_capacity = 8;
        o.context_per_sequence = 1024;
    });
    let ask = |client: &str, background: bool, tokens: u32| {
        let mut req = request("Go", greedy());
        req.max_tokens = Some(tokens);
        req.client = Some(client.into());
        req.background = background;
        req
    };
    // key_a alone: two interactive requests and two lines of a batch (the
    // background's half of the slots), all four admitted in one step.
    let starts = futures::future::join_all(
        [false, false, true, true]
            .map(|background| f.engine.generate(ask("key_a", background, 600))),
    );
    let mut streams: Vec<EventStream> = testing::together(&f.engine, 4, starts)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    for stream in &mut streams {
        assert!(matches!(
            stream.next().await,
            Some(Ok(EngineEvent::Text(_)))
        ));
    }
    assert_eq!(f.engine.stats().active_sequences, 4);
    let other = run(&f.engine, ask("key_b", false, 8)).await;
    assert_eq!(other.usage.completion_tokens, 8);
    assert_eq!(f.engine.stats().suspended, 1);
    // The suspended one missed the other's steps: it has the fewest tokens.
    // (Counted outside tokio's cooperative budget: within it, a task's
    // receivers answer "not ready" after 128 messages, and the streams
    // counted after the first would seem empty.)
    let counts = tokio::task::unconstrained(async {
        let mut counts = Vec::new();
        for stream in &mut streams {
            let mut n = 0;
            while let Some(Some(event)) = futures::FutureExt::now_or_never(stream.next()) {
                if matches!(event, Ok(EngineEvent::Text(_))) {
                    n += 1;
                }
            }
            counts.push(n);
        }
        counts
    })
    .await;
    let fewest = (0..4).min_by_key(|&i| counts[i]).unwrap();
    assert!(fewest >= 2, "an interactive one was suspended: {counts:?}");
    assert!(counts[0].min(counts[1]) >= counts[fewest] + 5, "{counts:?}");
    for stream in streams {
        assert_eq!(collect(stream).await.usage.completion_tokens, 600);
    }
}

// Issue 46: a suspended sequence's cells stay in the pool until it needs
// the room; then they go, and it resumes from its copy in host memory, or
// (with no room for a copy in the host budget) by decoding its tokens
// again. Either way: the same text as alone, nobody ended.
#[tokio::test]
async fn a_suspended_sequence_gives_its_cells_to_a_full_pool_and_resumes_from_host_memory() {
    let stats = suspend_in_a_full_pool(64 << 20).await;
    assert_eq!(stats.recomputed, 0, "{stats:?}");
}

#[tokio::test]
async fn a_suspended_sequence_without_room_for_a_copy_decodes_its_tokens_again() {
    let stats = suspend_in_a_full_pool(0).await;
    assert!(stats.recomputed >= 1, "{stats:?}");
    assert_eq!(stats.host_cache_bytes, 0, "{stats:?}");
}

/// Suspends a sequence for another key's request in a pool with no room
/// for both, its host budget `prefix_cache_bytes`; checks its reply, and
/// returns the engine's counters.
async fn suspend_in_a_full_pool(prefix_cache_bytes: usize) -> EngineStats {
    let f = engine_with(&TinyModel::looping(), |o| {
        o.parallel = 2;
        o.queue_capacity = 4;
        o.context_per_sequence = 512;
        o.kv_cache = Some(512);
        o.prefix_cache_bytes = prefix_cache_bytes;
    });
    let ask = |client: &str, user: &str, tokens: u32| {
        let mut req = request(user, greedy());
        req.max_tokens = Some(tokens);
        req.client = Some(client.into());
        req
    };
    let (long_a, long_b) = ("sand and shells ".repeat(16), "waves and tides ".repeat(16));
    let (a, b) = (
        prompt_tokens(&f.engine, &long_a),
        prompt_tokens(&f.engine, &long_b),
    );
    // The suspended one's cells and the other key's prompt do not both fit
    // beside the running one; each fits beside it alone.
    assert!(a + b + 20 > 512 && a + 40 + 150 + 20 < 512, "{a} {b}");
    let alone = run(&f.engine, ask("key_c", &long_a, 40)).await.text();

    // Both of key_a's requests start in one step, the short one first, and
    // the engine stops at their first tokens until key_b's request is
    // queued: on a busy machine the long one's 40 tokens could otherwise
    // all be decoded before key_b's request comes, or the short one's 150
    // (a tiny model's tokens take a millisecond) before the long one is
    // admitted, and nothing would be suspended (seen in CI: key_b's
    // request then found no room beside the long one and was ended).
    let freeze = f.engine.freeze_at_first_token();
    let pause = f.engine.pause_admission();
    let short = f.engine.generate(ask("key_a", "Go", 150)).await.unwrap();
    let mut long = f.engine.generate(ask("key_a", &long_a, 40)).await.unwrap();
    drop(pause);
    freeze.stopped().await;
    let other = f.engine.generate(ask("key_b", &long_b, 8)).await.unwrap();
    let stats = f.engine.stats();
    assert_eq!(stats.waiting_requests, 1, "{stats:?}");
    drop(freeze);
    let Some(Ok(EngineEvent::Text(head))) = long.next().await else {
        panic!("no first token");
    };
    let other = collect(other).await;
    assert_eq!(other.usage.completion_tokens, 8);
    let long = collect(long).await;
    assert_eq!(head + &long.text(), alone);
    let stats = f.engine.stats();
    assert!(stats.suspended >= 1 && stats.spilled >= 1, "{stats:?}");
    assert_eq!(stats.resumed, stats.suspended, "{stats:?}");
    assert_eq!(stats.kv_full, 0, "{stats:?}");
    assert_eq!(collect(short).await.usage.completion_tokens, 150);
    stats
}

// The copies are counted in the host cache's bytes (and so in the
// model's memory) and never take it past its limit: a copy that does not
// fit is not taken.
#[tokio::test]
async fn a_suspended_sequence_copy_never_takes_the_host_cache_past_its_limit() {
    // The engine's counters while key_a's second sequence is suspended for
    // key_b's, and once all three have ended.
    async fn suspend_one(limit: usize) -> (EngineStats, EngineStats) {
        let f = engine_with(&TinyModel::looping(), |o| {
            o.parallel = 2;
            o.queue_capacity = 4;
            o.context_per_sequence = 512;
            o.prefix_cache_bytes = limit;
        });
        let ask = |client: &str, user: &str, tokens: u32| {
            let mut req = request(user, greedy());
            req.max_tokens = Some(tokens);
            req.client = Some(client.into());
            req
        };
        // key_a's two start in one step and the engine stops at their
        // first tokens until key_b's is queued: a tiny model's 150 tokens
        // take about a millisecond each, and on a busy machine the first
        // could end before the others came (seen: nothing suspended).
        let freeze = f.engine.freeze_at_first_token();
        let pause = f.engine.pause_admission();
        let mut started = Vec::new();
        for (user, tokens) in [("Go".to_owned(), 150), ("sand and shells ".repeat(16), 100)] {
            started.push(
                f.engine
                    .generate(ask("key_a", &user, tokens))
                    .await
                    .unwrap(),
            );
        }
        drop(pause);
        freeze.stopped().await;
        let other = ask("key_b", &"waves and tides ".repeat(16), 60);
        started.push(f.engine.generate(other).await.unwrap());
        drop(freeze);
        for stream in &mut started {
            let Some(Ok(EngineEvent::Text(_))) = stream.next().await else {
                panic!("no first token");
            };
        }
        let during = f.engine.stats();
        for stream in started {
            collect(stream).await;
        }
        (during, f.engine.stats())
    }
    let (during, after) = suspend_one(1 << 20).await;
    assert_eq!(during.suspended, 1, "{during:?}");
    // Nothing else is saved yet: these bytes are the copy's.
    assert_eq!(during.host_cache_entries, 0, "{during:?}");
    assert!(during.host_cache_bytes > 0, "{during:?}");
    assert!(during.host_cache_bytes <= 1 << 20, "{during:?}");
    assert_eq!(after.resumed, 1, "{after:?}");
    assert!(after.host_cache_bytes <= 1 << 20, "{after:?}");

    let copy = usize::try_from(during.host_cache_bytes).unwrap();
    // Half of it (the copy's size varies by the few tokens the sequence
    // has generated when key_b's request comes) does not fit.
    let (during, after) = suspend_one(copy / 2).await;
    assert_eq!(during.suspended, 1, "{during:?}");
    assert_eq!(during.host_cache_bytes, 0, "{during:?}");
    assert_eq!(after.resumed, 1, "{after:?}");
    assert!(after.host_cache_bytes < copy as u64, "{after:?}");
}

#[tokio::test]
async fn background_work_takes_only_the_slots_interactive_requests_leave() {
    let f = engine_with(&TinyModel::looping(), |o| {
        o.parallel = 4;
        o.queue_capacity = 16;
        o.context_per_sequence = 1024;
        o.slots_per_client = Some(4);
    });
    let ask = |client: &str, background: bool, tokens: u32| {
        let mut req = request("Go", greedy());
        req.max_tokens = Some(tokens);
        req.client = Some(client.into());
        req.background = background;
        req
    };
    // Six background requests of six clients: two at a time (half the slots).
    let lines = (0..6)
        .map(|i| ask(&format!("batch_{i}"), true, 48))
        .collect();
    let results = together(&f.engine, lines).await;
    assert!(results.iter().all(|r| r.usage.completion_tokens == 48));
    assert_eq!(f.engine.stats().max_sequences_per_step, 2);

    // Interactive requests that come while background ones run and wait
    // start at once, in the slots the background ones leave: both are
    // answered before any of the (much longer) background requests.
    let started = std::time::Instant::now();
    let timed = |req| {
        let engine = &f.engine;
        async move {
            let reply = run(engine, req).await;
            (reply.usage.completion_tokens, started.elapsed())
        }
    };
    let background =
        futures::future::join_all((0..4).map(|i| timed(ask(&format!("line_{i}"), true, 800))));
    let interactive = async {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        futures::future::join_all((0..2).map(|i| timed(ask(&format!("user_{i}"), false, 8)))).await
    };
    let (background, interactive) = tokio::join!(background, interactive);
    let last_interactive = interactive.iter().map(|r| r.1).max().unwrap();
    let mut background_ends: Vec<_> = background.iter().map(|r| r.1).collect();
    background_ends.sort();
    assert!(
        last_interactive < background_ends[0],
        "interactive ended at {last_interactive:?}, background at {background_ends:?}"
    );
    assert!(interactive.iter().all(|r| r.0 == 8));
    assert!(background.iter().all(|r| r.0 == 800));
}

#[tokio::test]
async fn the_choices_of_a_request_alone_take_every_slot_from_one_decoded_prompt() {
    // No client, nobody else: the request's choices take every slot.
    let f = engine(&TinyModel::looping(), 4, 8, 512);
    let mut req = request(&long_system("choices"), seeded(7));
    req.n = 4;
    req.max_tokens = Some(24);
    let replies = collect_choices(f.engine.generate(req.clone()).await.unwrap(), 4).await;
    let stats = f.engine.stats();
    assert_eq!(stats.max_sequences_per_step, 4, "{stats:?}");
    let prompt = prompt_tokens(&f.engine, &long_system("choices"));
    // Decoded once; the later choices reuse it (all but its last token).
    assert!(
        stats.prompt_tokens < prompt + 8,
        "prompt {prompt}, {stats:?}"
    );
    // Each choice is the one its seed gives alone.
    for (i, (text, tokens)) in replies.iter().enumerate() {
        assert_eq!(*tokens, 24);
        let mut one = req.clone();
        one.n = 1;
        one.sampling.seed = Some(7 + i as u64);
        assert_eq!(*text, run(&f.engine, one).await.text(), "choice {i}");
    }
}

#[tokio::test]
async fn a_finished_slot_takes_the_next_request_at_once() {
    // No queue at all: each request needs the slot the previous one just left.
    let f = engine(&TinyModel::hello(), 1, 0, 256);
    for _ in 0..20 {
        let mut req = request("Hi", greedy());
        req.max_tokens = Some(2);
        assert_eq!(run(&f.engine, req).await.text(), "Hello");
    }
}

#[tokio::test]
async fn a_prompt_longer_than_the_context_is_refused_before_streaming() {
    let f = engine(&TinyModel::hello(), 2, 4, 256);
    let long = "many words ".repeat(200);
    let err = f.engine.generate(request(&long, greedy())).await.err();
    match err {
        Some(EngineError::ContextLengthExceeded {
            prompt_tokens,
            context,
        }) => {
            assert_eq!(context, 256);
            assert_eq!(prompt_tokens, prompt_tokens_of(&f.engine, &long));
            assert!(prompt_tokens > 256);
        }
        other => panic!("{other:?}"),
    }
    // The engine still serves.
    assert_eq!(run(&f.engine, request("Hi", greedy())).await.text(), HELLO);
}

fn prompt_tokens_of(engine: &LlamaEngine, user: &str) -> u64 {
    prompt_tokens(engine, user)
}

#[tokio::test]
async fn frequency_penalty_breaks_the_loop() {
    let f = engine(&TinyModel::looping(), 1, 4, 512);
    let mut plain = request("Go", greedy());
    plain.max_tokens = Some(60);
    let mut penalised = plain.clone();
    penalised.sampling.frequency_penalty = 2.0;
    penalised.sampling.presence_penalty = 1.0;
    let plain = run(&f.engine, plain).await.text();
    let penalised = run(&f.engine, penalised).await.text();
    // 60 tokens are five rounds of the 12-token script.
    assert_eq!(plain.matches(HELLO).count(), 5, "{plain}");
    assert!(penalised.starts_with(HELLO), "{penalised}");
    assert!(penalised.matches(HELLO).count() < 5, "{penalised}");
}

#[tokio::test]
async fn a_grammar_constrains_the_reply() {
    let f = engine(&TinyModel::hello(), 1, 4, 256);
    let prompt = f
        .engine
        .render_prompt(
            &[ChatMessage::User("Hi".into())],
            &[],
            &RenderOptions::default(),
        )
        .unwrap();
    let params = CompletionParams {
        sampling: greedy(),
        grammar: Some(Grammar {
            gbnf: r#"root ::= "Hi" ("!" | "?")"#.into(),
            root: "root".into(),
        }),
        ..CompletionParams::default()
    };
    let out = collect(f.engine.complete(&prompt, params).unwrap()).await;
    assert_eq!(out.text(), "Hi!");
    assert_eq!(out.reason, FinishReason::Stop);

    let bad = CompletionParams {
        grammar: Some(Grammar {
            gbnf: "root ::= (".into(),
            root: "root".into(),
        }),
        ..CompletionParams::default()
    };
    // The grammar is built before the job is queued: refused up front.
    let refused = f.engine.complete(&prompt, bad).map(|_| ());
    assert!(
        matches!(refused, Err(EngineError::InvalidRequest { .. })),
        "{refused:?}"
    );
}

#[test]
fn a_missing_file_is_a_load_error() {
    let options = LlamaEngineOptions::new(Path::new("/nonexistent/model.gguf"));
    let err = LlamaEngine::load(&options).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/model.gguf"), "{err}");
}

#[test]
fn more_slots_than_sequence_ids_is_a_load_error() {
    // llama.cpp takes sequence ids below 256, and the engine keeps one for
    // cells it gives up: 255 slots at most, said before any file is read.
    let mut options = LlamaEngineOptions::new(Path::new("/nonexistent/model.gguf"));
    options.parallel = 256;
    let err = LlamaEngine::load(&options).unwrap_err();
    assert!(
        err.to_string().contains("parallel must be at most 255"),
        "{err}"
    );
}

// --- Prompt prefix reuse (the KV cells of earlier requests) ---

/// A conversation: a system prompt, then user and assistant turns by turns.
fn conversation(system: &str, turns: &[&str]) -> Vec<ChatMessage> {
    let mut messages = vec![ChatMessage::System(system.into())];
    for (i, text) in turns.iter().enumerate() {
        messages.push(if i % 2 == 0 {
            ChatMessage::User((*text).into())
        } else {
            ChatMessage::Assistant {
                content: Some((*text).into()),
                tool_calls: vec![],
                reasoning: None,
            }
        });
    }
    messages
}

fn chat(messages: Vec<ChatMessage>, sampling: Sampling, max_tokens: u32) -> GenerateRequest {
    GenerateRequest {
        messages,
        max_tokens: Some(max_tokens),
        ..request("", sampling)
    }
}

/// Prompt tokens the model evaluated and reused while `work` ran.
async fn counted<T>(engine: &LlamaEngine, work: impl Future<Output = T>) -> (T, u64, u64) {
    let before = engine.stats();
    let out = work.await;
    let after = engine.stats();
    (
        out,
        after.prompt_tokens - before.prompt_tokens,
        after.reused_prompt_tokens - before.reused_prompt_tokens,
    )
}

fn long_system(topic: &str) -> String {
    format!("You answer questions about {topic}. ").repeat(6)
}

#[tokio::test]
async fn a_continued_conversation_evaluates_only_the_new_tokens() {
    let f = engine(&TinyModel::hello(), 2, 4, 512);
    let system = long_system("geography");
    let first = run(
        &f.engine,
        chat(conversation(&system, &["Where is Paris?"]), greedy(), 64),
    )
    .await;
    assert_eq!(first.text(), HELLO);
    assert_eq!(first.usage.cached_tokens, 0, "a cold engine reuses nothing");
    let turn2 = conversation(&system, &["Where is Paris?", &first.text(), "And Rome?"]);
    let (second, evaluated, reused) =
        counted(&f.engine, run(&f.engine, chat(turn2.clone(), greedy(), 64))).await;
    let (p1, p2) = (first.usage.prompt_tokens, second.usage.prompt_tokens);
    assert_eq!(evaluated + reused, p2);
    // Issue 32: the reply reports the reused tokens as cached.
    assert_eq!(second.usage.cached_tokens, reused);
    // The whole first prompt (and more: the reply) came from the slot.
    assert!(reused >= p1, "reused {reused} of the first prompt's {p1}");
    assert!(evaluated <= p2 - p1, "evaluated {evaluated} of {p2}");
    assert!(evaluated >= 1);

    // The same again: only the last token is evaluated.
    let (third, evaluated, reused) =
        counted(&f.engine, run(&f.engine, chat(turn2.clone(), greedy(), 64))).await;
    assert_eq!((evaluated, reused), (1, p2 - 1));
    assert_eq!(third.usage.cached_tokens, p2 - 1);
    assert_eq!(third.text(), second.text());

    // A cold engine says the same.
    let cold = engine(&TinyModel::hello(), 2, 4, 512);
    assert_eq!(
        run(&cold.engine, chat(turn2, greedy(), 64)).await.text(),
        second.text()
    );
}

#[tokio::test]
async fn a_reused_prefix_gives_the_same_text_as_a_cold_run() {
    let warm = engine(&TinyModel::looping(), 2, 4, 1024);
    let cold = || engine(&TinyModel::looping(), 2, 4, 1024);
    let system = long_system("history");
    let mut turns: Vec<String> = vec!["Tell me a story.".into()];
    for turn in 0..3u64 {
        let messages = conversation(
            &system,
            &turns.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let (out, _, reused) = counted(
            &warm.engine,
            run(&warm.engine, chat(messages.clone(), seeded(40 + turn), 24)),
        )
        .await;
        if turn > 0 {
            assert!(reused > 0, "turn {turn} reused nothing");
        }
        let fresh = cold();
        let expected = run(&fresh.engine, chat(messages, seeded(40 + turn), 24)).await;
        assert_eq!(out.text(), expected.text(), "turn {turn}");
        // The same counts, but the warm engine's prompt was partly cached.
        assert_eq!(out.usage.cached_tokens, reused);
        assert_eq!(expected.usage.cached_tokens, 0);
        let counts = |u: TokenUsage| (u.prompt_tokens, u.completion_tokens);
        assert_eq!(counts(out.usage), counts(expected.usage));
        turns.push(out.text());
        turns.push(format!("Go on, part {turn}."));
    }
}

#[tokio::test]
async fn a_cancelled_request_leaves_a_prefix_the_next_one_reuses() {
    let f = engine(&TinyModel::looping(), 1, 4, 1024);
    let messages = conversation(&long_system("cats"), &["Go on and on."]);
    let mut stream = f
        .engine
        .generate(chat(messages.clone(), greedy(), 400))
        .await
        .unwrap();
    for _ in 0..3 {
        assert!(matches!(
            stream.next().await,
            Some(Ok(EngineEvent::Text(_)))
        ));
    }
    drop(stream);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while f.engine.stats().cancelled == 0 || f.engine.stats().active_sequences > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            f.engine.stats()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (out, evaluated, reused) = counted(
        &f.engine,
        run(&f.engine, chat(messages.clone(), seeded(3), 30)),
    )
    .await;
    assert_eq!(evaluated, 1, "reused {reused}");
    assert_eq!(reused, out.usage.prompt_tokens - 1);
    let cold = engine(&TinyModel::looping(), 1, 4, 1024);
    assert_eq!(
        run(&cold.engine, chat(messages, seeded(3), 30))
            .await
            .text(),
        out.text()
    );
}

#[tokio::test]
async fn a_new_request_copies_the_prefix_of_a_running_one() {
    let f = engine(&TinyModel::looping(), 2, 4, 1024);
    let system = long_system("rivers");
    let first = conversation(&system, &["Name them all."]);
    let second = conversation(&system, &["Name one."]);
    let options = RenderOptions::default();
    let a = f.engine.chat_tokens(&first, &[], &options).unwrap();
    let b = f.engine.chat_tokens(&second, &[], &options).unwrap();
    let shared = a.iter().zip(&b).take_while(|(x, y)| x == y).count() as u64;
    assert!(shared > 30, "{shared}");

    let mut running = f.engine.generate(chat(first, greedy(), 400)).await.unwrap();
    assert!(matches!(
        running.next().await,
        Some(Ok(EngineEvent::Text(_)))
    ));
    let (out, evaluated, reused) = counted(
        &f.engine,
        run(&f.engine, chat(second.clone(), seeded(8), 20)),
    )
    .await;
    assert_eq!(reused, shared);
    assert_eq!(out.usage.cached_tokens, shared);
    assert_eq!(evaluated, b.len() as u64 - shared);
    assert_eq!(
        f.engine.stats().active_sequences,
        1,
        "the first one still runs"
    );
    drop(running);

    let cold = engine(&TinyModel::looping(), 2, 4, 1024);
    assert_eq!(
        run(&cold.engine, chat(second, seeded(8), 20)).await.text(),
        out.text()
    );
}

#[tokio::test]
async fn a_prefix_whose_slot_was_taken_comes_back_from_the_host_cache() {
    let limit = 64 << 20;
    let f = engine_with(&TinyModel::hello(), |o| {
        o.parallel = 1;
        o.context_per_sequence = 512;
        o.prefix_cache_bytes = limit;
    });
    let a1 = conversation(&long_system("the sea"), &["How deep is it?"]);
    let first = run(&f.engine, chat(a1.clone(), greedy(), 64)).await;
    // An unrelated conversation takes the only slot: the first one's state
    // goes to host memory.
    run(
        &f.engine,
        chat(
            conversation(&long_system("mountains"), &["How high?"]),
            greedy(),
            64,
        ),
    )
    .await;
    let stats = f.engine.stats();
    assert_eq!(stats.host_cache_saves, 1, "{stats:?}");
    assert_eq!(stats.host_cache_entries, 1);
    assert!(stats.host_cache_bytes > 0 && stats.host_cache_bytes <= limit as u64);

    let a2 = conversation(
        &long_system("the sea"),
        &["How deep is it?", &first.text(), "Why?"],
    );
    let (second, evaluated, reused) =
        counted(&f.engine, run(&f.engine, chat(a2.clone(), greedy(), 64))).await;
    let stats = f.engine.stats();
    assert_eq!(stats.host_cache_restores, 1, "{stats:?}");
    assert!(reused >= first.usage.prompt_tokens, "reused {reused}");
    assert_eq!(evaluated + reused, second.usage.prompt_tokens);
    assert_eq!(
        second.usage.cached_tokens, reused,
        "restored tokens are cached"
    );

    let cold = engine(&TinyModel::hello(), 1, 4, 512);
    assert_eq!(
        run(&cold.engine, chat(a2, greedy(), 64)).await.text(),
        second.text()
    );
}

#[tokio::test]
async fn the_host_cache_never_holds_more_than_its_limit() {
    let topics = ["oak", "pine", "birch", "maple", "cedar", "elm"];
    let run_all = |limit: usize| async move {
        let f = engine_with(&TinyModel::hello(), |o| {
            o.parallel = 1;
            o.context_per_sequence = 512;
            o.prefix_cache_bytes = limit;
        });
        let mut most = 0;
        for topic in topics {
            let messages = conversation(&long_system(topic), &["Describe it."]);
            run(&f.engine, chat(messages, greedy(), 64)).await;
            most = most.max(f.engine.stats().host_cache_bytes);
        }
        (f.engine.stats(), most)
    };
    // How big one saved state is.
    let (roomy, _) = run_all(64 << 20).await;
    assert_eq!(
        roomy.host_cache_entries,
        topics.len() as u64 - 1,
        "{roomy:?}"
    );
    let one = roomy.host_cache_bytes / roomy.host_cache_entries;

    // Room for two states: older ones make way.
    let limit = (one * 5 / 2) as usize;
    let (tight, most) = run_all(limit).await;
    assert!(most <= limit as u64, "{most} > {limit}");
    assert_eq!(tight.host_cache_entries, 2, "{tight:?}");
    assert_eq!(
        tight.host_cache_evictions,
        topics.len() as u64 - 3,
        "{tight:?}"
    );

    // No room for one: nothing is kept.
    let (none, most) = run_all((one / 2) as usize).await;
    assert_eq!((none.host_cache_saves, most), (0, 0), "{none:?}");
}

#[tokio::test]
async fn a_full_kv_pool_gives_up_idle_prefixes_then_ends_the_newest_sequence() {
    // 256 cells for two sequences of up to 256 tokens each.
    let f = engine_with(&TinyModel::looping(), |o| {
        o.parallel = 2;
        o.context_per_sequence = 256;
        o.kv_cache = Some(256);
        o.prefix_cache_bytes = 0;
    });
    let long = |user: &str, max: u32| chat(conversation("", &[user]), greedy(), max);
    // An idle slot's cells make way for a new sequence that needs them.
    let a = run(&f.engine, long("First", 200)).await;
    assert_eq!(a.reason, FinishReason::Length);
    let b = run(&f.engine, long("Second one", 200)).await;
    assert_eq!(
        (b.reason, b.usage.completion_tokens),
        (FinishReason::Length, 200)
    );
    assert!(f.engine.stats().kv_evictions >= 1, "{:?}", f.engine.stats());

    // Two running sequences that cannot both fit: the newer one ends early.
    let older = f.engine.generate(long("Third", 200)).await.unwrap();
    let newer = f.engine.generate(long("Fourth", 200)).await.unwrap();
    let (older, newer) = tokio::join!(collect(older), async {
        let mut stream = newer;
        let mut text = 0;
        loop {
            match stream.next().await {
                Some(Ok(EngineEvent::Text(t))) => text += t.len(),
                Some(Ok(EngineEvent::Finish { reason, usage })) => break Ok((reason, usage, text)),
                Some(Err(e)) => break Err(e),
                Some(Ok(_)) => {}
                None => panic!("no finish"),
            }
        }
    });
    assert_eq!(
        (older.reason, older.usage.completion_tokens),
        (FinishReason::Length, 200)
    );
    match newer {
        Ok((reason, usage, _)) => {
            assert_eq!(reason, FinishReason::Length);
            assert!(usage.completion_tokens < 200, "{usage:?}");
        }
        Err(e) => assert!(matches!(e, EngineError::Overloaded(_)), "{e:?}"),
    }
    assert!(f.engine.stats().kv_full >= 1, "{:?}", f.engine.stats());
    // The engine still serves.
    assert_eq!(run(&f.engine, long("Hi", 5)).await.text(), "Hello, world");
}

#[tokio::test]
async fn a_long_idle_conversation_waits_in_the_host_cache_not_in_the_pool() {
    let f = engine(&TinyModel::hello(), 2, 4, 1024);
    let system = "You answer questions about lighthouses. ".repeat(14);
    let first = run(
        &f.engine,
        chat(conversation(&system, &["Why?"]), greedy(), 64),
    )
    .await;
    assert!(first.usage.prompt_tokens > 512, "{:?}", first.usage);
    // Its cells leave the pool right after it ends (the engine thread's
    // step after the finish event): idle slots keep at most 512 cells
    // there, so that no step attends over cells nobody uses.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // (The save is counted before the eviction: wait for the latter.)
    while f.engine.stats().kv_evictions == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let stats = f.engine.stats();
    assert_eq!(stats.host_cache_saves, 1, "{stats:?}");
    assert!(stats.kv_evictions >= 1, "{stats:?}");

    let next = conversation(&system, &["Why?", &first.text(), "And then?"]);
    let (second, evaluated, reused) =
        counted(&f.engine, run(&f.engine, chat(next.clone(), greedy(), 64))).await;
    assert_eq!(f.engine.stats().host_cache_restores, 1);
    assert!(reused >= first.usage.prompt_tokens, "reused {reused}");
    assert_eq!(evaluated + reused, second.usage.prompt_tokens);
    let cold = engine(&TinyModel::hello(), 2, 4, 1024);
    assert_eq!(
        run(&cold.engine, chat(next, greedy(), 64)).await.text(),
        second.text()
    );
}

/// llama.cpp writes zeros over the whole KV pool when it makes the context;
/// the engine gives those pages back, so a pool far larger than what is in
/// use costs no memory until cells are used.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn an_unused_kv_pool_is_not_resident() {
    let f = engine_with(&TinyModel::hello(), |o| {
        o.parallel = 4;
        o.context_per_sequence = 1024;
        o.kv_cache = Some(1 << 19);
    });
    let stats = f.engine.stats();
    let pool = stats.kv_pool_bytes;
    assert!(pool >= 64 << 20, "a pool of {pool} bytes");
    assert!(
        stats.kv_released_bytes > pool * 99 / 100,
        "{} of {pool} bytes given back",
        stats.kv_released_bytes
    );
    // And the engine works on the pages given back.
    let cold = engine(&TinyModel::hello(), 1, 1, 1024);
    assert_eq!(
        run(&f.engine, request("Hi", greedy())).await.text(),
        run(&cold.engine, request("Hi", greedy())).await.text()
    );
}

/// After a burst that held far more cells than the idle slots keep, the
/// idle prefixes are copied out and back in (to the bottom of the pool)
/// once nothing runs, and they still serve the same requests exactly.
#[tokio::test]
async fn idle_prefixes_left_by_a_burst_move_down_and_still_serve() {
    let f = engine(&TinyModel::hello(), 4, 4, 1024);
    let prompts: Vec<_> = ["tides", "lamps", "gulls", "storms"]
        .iter()
        .map(|topic| conversation(&format!("Notes on {topic}. ").repeat(20), &["Go on."]))
        .collect();
    let burst = futures::future::join_all(
        prompts
            .iter()
            .map(|p| run(&f.engine, chat(p.clone(), greedy(), 64))),
    )
    .await;
    let held: u64 = burst
        .iter()
        .map(|o| o.usage.prompt_tokens + o.usage.completion_tokens)
        .sum();
    assert!(held > 512 + 256, "the burst held {held} cells");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while f.engine.stats().kv_settles == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(f.engine.stats().kv_settles >= 1, "{:?}", f.engine.stats());

    for (prompt, first) in prompts.iter().zip(&burst) {
        let (again, evaluated, reused) = counted(
            &f.engine,
            run(&f.engine, chat(prompt.clone(), greedy(), 64)),
        )
        .await;
        assert_eq!(again.text(), first.text());
        assert_eq!(evaluated, 1, "reused {reused}");
    }
}

#[tokio::test]
async fn an_image_is_refused_naming_its_part_before_anything_runs() {
    let f = engine(&TinyModel::hello(), 1, 4, 256);
    let image = svc_core::ImageInput {
        url: "https://example.com/cat.png".into(),
        detail: None,
        param: "messages[0].content[1]".into(),
    };
    let request = GenerateRequest {
        messages: vec![ChatMessage::UserParts(vec![
            svc_core::UserPart::Text("what is this?".into()),
            svc_core::UserPart::Image(image),
        ])],
        ..request("unused", greedy())
    };
    for refused in [
        f.engine.generate(request.clone()).await.err(),
        f.engine.count_tokens(&request).await.err(),
    ] {
        let Some(EngineError::InvalidRequest { param, message }) = refused else {
            panic!("an image was taken: {refused:?}");
        };
        assert_eq!(param.as_deref(), Some("messages[0].content[1]"));
        assert!(message.contains("images"), "{message}");
    }
    assert_eq!(f.engine.stats().decode_steps, 0);
}
