//! The engine end to end on tiny GGUF models the tests write themselves (see
//! `svc_engine_llama::testing`): greedy replies, seeds, stop sequences,
//! UTF-8, limits, cancellation, the queue, and batching of concurrent requests.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::path::Path;
use std::time::Duration;

use futures::StreamExt as _;
use svc_core::engine::{
    ChatMessage, Engine, EngineError, EngineEvent, EventStream, FinishReason, GenerateRequest,
    OutputFormat, Sampling, TokenUsage, ToolChoiceSpec,
};
use svc_engine_llama::testing::TinyModel;
use svc_engine_llama::{CompletionParams, Grammar, LlamaEngine, LlamaEngineOptions, RenderOptions};
use tempfile::TempDir;

const HELLO: &str = "Hello, world! é 😀 end.";

struct Fixture {
    engine: LlamaEngine,
    _dir: TempDir,
}

fn engine(model: &TinyModel, parallel: u32, queue: usize, context: u32) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    model.write(&path).unwrap();
    let mut options = LlamaEngineOptions::new(&path);
    options.parallel = parallel;
    options.queue_capacity = queue;
    options.context_per_sequence = context;
    options.threads = Some(2);
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
            // 12 scripted tokens and the end-of-turn token.
            completion_tokens: 13,
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

    // The same request again, decoded in one batch with three others.
    let (a, b, c, d) = tokio::join!(
        run(&f.engine, with(seeded(7))),
        run(&f.engine, with(seeded(42))),
        run(&f.engine, with(greedy())),
        run(&f.engine, with(seeded(9))),
    );
    assert_eq!(b.text(), alone);
    assert!(f.engine.stats().max_sequences_per_step >= 2);

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
    let results = futures::future::join_all((0..4).map(|_| run(&f.engine, with()))).await;
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
async fn a_sequence_moved_to_close_a_gap_goes_on_unchanged() {
    let f = engine(&TinyModel::looping(), 3, 4, 256);
    let long = || {
        let mut req = request("Long", seeded(5));
        req.max_tokens = Some(160);
        req
    };
    let alone = run(&f.engine, long()).await.text();
    // The first request takes slot 0 and the long one slot 1; when the first
    // one ends, the long one moves down into slot 0, KV cells and all. The
    // first one ends when its stream is dropped, once both are seen decoding
    // together: a first request that ended by itself could end before the
    // long one arrives on a busy machine, and nothing would move.
    let first = f.engine.generate(request("Short", greedy())).await.unwrap();
    let moved = f.engine.generate(long()).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while f.engine.stats().active_sequences < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            f.engine.stats()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    drop(first);
    let moved = collect(moved).await;
    assert_eq!(moved.text(), alone);
    assert_eq!(f.engine.stats().moved, 1, "{:?}", f.engine.stats());
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
