//! Batch-invariant numerics (issue 32, `LlamaEngineOptions::batch_invariant`):
//! a request's log probabilities are the same bits, so its text is the same,
//! on a fresh engine, after a long prompt filled the pool, and beside other
//! streams in the same batch, greedy and seeded. The model is the tiny
//! looping one with its matrices in Q4_1, as the default model's are (F32
//! matrices take other kernels for one token than for several; see the
//! crate's `numerics` module). With `batch_invariant` off, the reply beside
//! other streams differs in its last bits (alone, llama.cpp splits a
//! token's attention over 512 cells or more across threads).

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::path::{Path, PathBuf};

use futures::{Stream, StreamExt as _};
use svc_core::engine::{
    ChatMessage, EngineError, EngineEvent, GenerateRequest, Generator, Sampling,
};
use svc_engine_llama::testing::{self, TinyModel};
use svc_engine_llama::{LlamaEngine, LlamaEngineOptions};
use tempfile::TempDir;

struct Fixture {
    engine: LlamaEngine,
    _dir: TempDir,
}

/// `model` with its matrices in Q4_1, written in `dir` as `name`.
fn tiny_q4_1(dir: &TempDir, name: &str, model: TinyModel) -> PathBuf {
    let path = dir.path().join(name);
    model.gguf().with_q4_1_matrices().write(&path).unwrap();
    path
}

fn engine(batch_invariant: bool) -> Fixture {
    engine_with(|o| o.batch_invariant = batch_invariant)
}

fn engine_with(set: impl FnOnce(&mut LlamaEngineOptions)) -> Fixture {
    engine_of(TinyModel::looping(), set)
}

fn engine_of(model: TinyModel, set: impl FnOnce(&mut LlamaEngineOptions)) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = tiny_q4_1(&dir, "tiny-q4_1.gguf", model);
    let mut options = LlamaEngineOptions::new(&path);
    options.parallel = 4;
    options.context_per_sequence = 1024;
    options.threads = Some(2);
    set(&mut options);
    let engine = LlamaEngine::load(&options).unwrap();
    Fixture { engine, _dir: dir }
}

/// The reply's text and, per token, the bits of its log probability and of
/// its 5 alternatives'.
#[derive(Debug, PartialEq)]
struct Reply {
    text: String,
    bits: Vec<Vec<u32>>,
}

async fn reply(engine: &LlamaEngine, request: GenerateRequest) -> Reply {
    read(engine.generate(request).await.unwrap()).await
}

async fn read(mut stream: impl Stream<Item = Result<EngineEvent, EngineError>> + Unpin) -> Reply {
    let mut out = Reply {
        text: String::new(),
        bits: Vec::new(),
    };
    while let Some(event) = stream.next().await {
        match event.unwrap() {
            EngineEvent::Text(t) => out.text.push_str(&t),
            EngineEvent::Logprobs(tokens) => out.bits.extend(tokens.iter().map(|t| {
                std::iter::once(t.logprob)
                    .chain(t.top.iter().map(|a| a.logprob))
                    .map(f32::to_bits)
                    .collect()
            })),
            EngineEvent::Finish { .. } => return out,
            other => panic!("{other:?}"),
        }
    }
    panic!("no finish event");
}

fn ask(user: String, sampling: Sampling, max_tokens: u32) -> GenerateRequest {
    GenerateRequest {
        messages: vec![ChatMessage::User(user)],
        sampling,
        max_tokens: Some(max_tokens),
        logprobs: Some(5),
        stream: true,
        ..GenerateRequest::default()
    }
}

/// The request every scenario repeats: a prompt of about 600 tokens, so
/// that its own cells span more than 512 and the attention of a token it
/// decodes alone could be split across threads.
fn probe(sampling: &Sampling) -> GenerateRequest {
    ask(
        format!("Say something about {}", "shells and sand ".repeat(38)),
        sampling.clone(),
        32,
    )
}

/// A prompt of about 700 tokens, which leaves the pool's used cells past 512.
fn long_prompt(topic: &str) -> GenerateRequest {
    ask(
        format!("{topic}: {}", "waves and tides ".repeat(45)),
        greedy(),
        8,
    )
}

fn greedy() -> Sampling {
    Sampling {
        temperature: 0.0,
        ..Sampling::default()
    }
}

fn seeded() -> Sampling {
    Sampling {
        temperature: 1.0,
        seed: Some(7),
        ..Sampling::default()
    }
}

/// What the probe gives: cold, after a long prompt, and beside three other
/// streams (one of them a long prompt arriving as it starts).
async fn scenarios(batch_invariant: bool, sampling: &Sampling) -> [Reply; 3] {
    let cold = reply(&engine(batch_invariant).engine, probe(sampling)).await;
    let f = engine(batch_invariant);
    reply(&f.engine, long_prompt("the sea")).await;
    let after_long = reply(&f.engine, probe(sampling)).await;
    let f = engine(batch_invariant);
    let four = async {
        tokio::join!(
            reply(&f.engine, probe(sampling)),
            reply(&f.engine, ask("Count.".into(), greedy(), 48)),
            reply(&f.engine, ask("Go on.".into(), seeded(), 48)),
            reply(&f.engine, long_prompt("mountains")),
        )
    };
    let (beside, ..) = testing::together(&f.engine, 4, four).await;
    assert!(f.engine.stats().max_sequences_per_step >= 2);
    [cold, after_long, beside]
}

#[tokio::test]
async fn a_reply_is_the_same_bits_whatever_ran_before_or_beside_it() {
    for sampling in [greedy(), seeded()] {
        let [cold, after_long, beside] = scenarios(true, &sampling).await;
        assert_eq!(cold.bits.len(), 32, "{cold:?}");
        assert_eq!(after_long, cold, "after a long prompt, {sampling:?}");
        assert_eq!(beside, cold, "beside other streams, {sampling:?}");
    }
}

// Issue 46: svc's attention kernel computes a prompt's attention in one
// order whatever the chunks the engine cuts it into, so the reply after it
// is the same bits when the prompt went in as one chunk, token by token,
// 7, 64 or 100 tokens a step, and on an engine whose pool holds other
// sequences' cells below and among its own.
#[tokio::test]
async fn a_prompt_cut_into_any_chunks_gives_the_same_bits() {
    let before = testing::attention_kernel_nodes();
    let products_before = testing::product_kernel_nodes();
    let chunks = |size| {
        engine_with(|o| {
            o.parallel = 1;
            o.batch_size = size;
        })
    };
    let whole = reply(&chunks(512).engine, probe(&greedy())).await;
    assert_eq!(whole.bits.len(), 32, "{whole:?}");
    for size in [1, 7, 64, 100] {
        let chunked = reply(&chunks(size).engine, probe(&greedy())).await;
        assert_eq!(chunked, whole, "{size} prompt tokens a step");
    }
    // Another layout: a long prompt's cells first, then the probe's prompt
    // arriving while two other sequences take their cells beside its own.
    let f = engine(true);
    reply(&f.engine, long_prompt("the sea")).await;
    let (elsewhere, ..) = tokio::join!(
        reply(&f.engine, probe(&greedy())),
        reply(&f.engine, ask("Count.".into(), seeded(), 40)),
        reply(&f.engine, long_prompt("rivers")),
    );
    assert_eq!(elsewhere, whole, "cells elsewhere in the pool");
    // The engine ran svc's kernels, not ggml's: the attention, and the
    // matrix products of the model's Q4_1 rows.
    assert!(testing::attention_kernel_nodes() > before);
    assert!(testing::product_kernel_nodes() > products_before);
}

// Issue 46: a mixture of experts (each token's feed-forward by 2 of its
// layer's 4 experts: ggml's MUL_MAT_ID) takes svc's product too, each
// expert by the tokens routed to it, so its reply is the same bits with its
// prompt cut into any chunks and beside other streams.
#[tokio::test]
async fn a_mixture_of_experts_gives_the_same_bits_however_it_is_batched() {
    let moe = || TinyModel::looping().with_experts(4, 2);
    let before = testing::mixture_kernel_nodes();
    let chunks = |size| {
        engine_of(moe(), |o| {
            o.parallel = 1;
            o.batch_size = size;
        })
    };
    let whole = reply(&chunks(512).engine, probe(&greedy())).await;
    assert_eq!(whole.bits.len(), 32, "{whole:?}");
    assert!(
        testing::mixture_kernel_nodes() > before,
        "svc's product computed the experts' products"
    );
    for size in [1, 7, 100] {
        let chunked = reply(&chunks(size).engine, probe(&greedy())).await;
        assert_eq!(chunked, whole, "{size} prompt tokens a step");
    }
    let f = engine_of(moe(), |_| {});
    let three = async {
        tokio::join!(
            reply(&f.engine, probe(&greedy())),
            reply(&f.engine, ask("Count.".into(), seeded(), 40)),
            reply(&f.engine, long_prompt("rivers")),
        )
    };
    let (beside, ..) = testing::together(&f.engine, 3, three).await;
    assert_eq!(beside, whole, "beside other streams");
}

// Issue 46: a client alone takes every slot; when another client's request
// comes and none is free, the first client's newest sequence is suspended
// (its cells copied to host memory) and later resumed from that copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_reply_is_the_same_bits_as_one_never_suspended() {
    let with_slots = |parallel| {
        let dir = tempfile::tempdir().unwrap();
        let path = tiny_q4_1(&dir, "tiny-q4_1.gguf", TinyModel::looping());
        let mut options = LlamaEngineOptions::new(&path);
        options.parallel = parallel;
        // Room for both probes, the suspended one's cells parked beside them.
        options.context_per_sequence = 2048;
        options.threads = Some(2);
        Fixture {
            engine: LlamaEngine::load(&options).unwrap(),
            _dir: dir,
        }
    };
    for sampling in [greedy(), seeded()] {
        let long = |client: &str| GenerateRequest {
            client: Some(client.into()),
            ..ask(
                format!("Say something about {}", "shells and sand ".repeat(38)),
                sampling.clone(),
                160,
            )
        };
        let cold = reply(&with_slots(1).engine, long("key_a")).await;
        assert_eq!(cold.bits.len(), 160, "{cold:?}");

        // Two slots, one each by default; key_a alone holds both.
        let f = with_slots(2);
        let (first, second) = tokio::join!(f.engine.generate(long("key_a")), async {
            f.engine.generate(long("key_a")).await
        });
        let mut first = first.unwrap().peekable();
        let mut second = second.unwrap().peekable();
        let (a, b) = tokio::join!(
            std::pin::Pin::new(&mut first).peek(),
            std::pin::Pin::new(&mut second).peek()
        );
        assert!(a.is_some() && b.is_some());
        assert_eq!(f.engine.stats().active_sequences, 2);

        // key_b's request takes a slot back at once and is answered while
        // key_a's go on.
        let other = GenerateRequest {
            client: Some("key_b".into()),
            ..ask("Count.".into(), greedy(), 8)
        };
        let timed = |stream| async move {
            let out = read(stream).await;
            (out, std::time::Instant::now())
        };
        let (first, second, other) = tokio::join!(
            timed(first),
            timed(second),
            timed(f.engine.generate(other).await.unwrap().peekable())
        );
        let stats = f.engine.stats();
        assert!(stats.suspended >= 1 && stats.resumed >= 1, "{stats:?}");
        assert_eq!(stats.max_sequences_per_step, 2, "{stats:?}");
        assert_eq!(other.0.bits.len(), 8);
        assert!(other.1 < first.1 && other.1 < second.1);
        assert_eq!(first.0, cold, "{sampling:?}");
        assert_eq!(second.0, cold, "{sampling:?}");
    }
}

// A suspended sequence whose cells the pool needed, with no room in the
// host budget for a copy, decodes its tokens again when it resumes: its
// cells are the same bits, and so is the rest of its reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_suspended_and_decoded_again_is_the_same_bits() {
    let small = || {
        engine_with(|o| {
            o.parallel = 2;
            o.context_per_sequence = 512;
            o.kv_cache = Some(512);
            o.prefix_cache_bytes = 0;
        })
    };
    let ask_as = |client: &str, user: String, tokens: u32| GenerateRequest {
        client: Some(client.into()),
        ..ask(user, greedy(), tokens)
    };
    let long_a = || ask_as("key_a", "sand and shells ".repeat(16), 40);
    let cold = reply(&small().engine, long_a()).await;
    assert_eq!(cold.bits.len(), 40, "{cold:?}");

    let f = small();
    let mut short = f
        .engine
        .generate(ask_as("key_a", "Go".into(), 150))
        .await
        .unwrap()
        .peekable();
    assert!(std::pin::Pin::new(&mut short).peek().await.is_some());
    let mut long = f.engine.generate(long_a()).await.unwrap().peekable();
    assert!(std::pin::Pin::new(&mut long).peek().await.is_some());
    // key_b's prompt and the suspended one's cells do not both fit beside
    // the running one: the suspended one gives its cells up.
    let other = reply(&f.engine, ask_as("key_b", "waves and tides ".repeat(16), 8)).await;
    assert_eq!(other.bits.len(), 8);
    let long = read(long).await;
    let stats = f.engine.stats();
    assert!(stats.recomputed >= 1, "{stats:?}");
    assert_eq!(long, cold);
    read(short).await;
}

/// What the option buys: without it the same request decoded beside other
/// streams gets other log probabilities than alone (its text may or may
/// not change with them).
#[tokio::test]
async fn without_batch_invariance_other_streams_change_the_bits() {
    let [cold, _, beside] = scenarios(false, &greedy()).await;
    assert_ne!(beside.bits, cold.bits);
}

/// `system_fingerprint` names the weights, the build and the numerics: the
/// same for the same file and settings, another for other weights or with
/// batch invariance off, and never the threads or the slots.
#[test]
fn the_fingerprint_changes_with_the_weights_and_the_numerics_only() {
    let dir = tempfile::tempdir().unwrap();
    let looping = tiny_q4_1(&dir, "looping.gguf", TinyModel::looping());
    let hello = tiny_q4_1(&dir, "hello.gguf", TinyModel::hello());
    let fingerprint = |path: &Path, set: &dyn Fn(&mut LlamaEngineOptions)| {
        let mut options = LlamaEngineOptions::new(path);
        options.context_per_sequence = 256;
        options.threads = Some(2);
        set(&mut options);
        LlamaEngine::load(&options)
            .unwrap()
            .info()
            .fingerprint
            .clone()
    };
    let first = fingerprint(&looping, &|_| {});
    assert!(
        first.len() == 15
            && first.starts_with("fp_")
            && first[3..].bytes().all(|b| b.is_ascii_hexdigit()),
        "{first}"
    );
    let same = fingerprint(&looping, &|o| {
        o.threads = Some(1);
        o.parallel = 2;
    });
    assert_eq!(same, first, "threads and slots change no bit");
    assert_ne!(fingerprint(&hello, &|_| {}), first, "other weights");
    assert_ne!(
        fingerprint(&looping, &|o| o.batch_invariant = false),
        first,
        "other numerics"
    );
}

/// Engines that load at once each describe the build for their fingerprint
/// (llama.cpp's `llama_print_system_info` writes a static buffer: called
/// from several threads at once, it corrupted the heap of a test run).
#[test]
fn engines_loading_at_once_get_the_same_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    let path = tiny_q4_1(&dir, "tiny.gguf", TinyModel::looping());
    let loads: Vec<_> = (0..8)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut options = LlamaEngineOptions::new(&path);
                options.context_per_sequence = 64;
                options.threads = Some(1);
                LlamaEngine::load(&options)
                    .unwrap()
                    .info()
                    .fingerprint
                    .clone()
            })
        })
        .collect();
    let prints: Vec<String> = loads.into_iter().map(|l| l.join().unwrap()).collect();
    assert!(prints.iter().all(|p| *p == prints[0]), "{prints:?}");
}
