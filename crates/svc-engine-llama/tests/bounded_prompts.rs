//! Prompts that would cost far more to prepare than a request is worth
//! (issue 61): a prompt far past the context is refused before it is
//! tokenized, whichever way it comes (chat, legacy completion,
//! `count_tokens`, embeddings), and a chat template that loops or writes
//! without end is stopped at its limits.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed check fails the test"
)]

use svc_core::engine::{
    ChatMessage, EmbedInput, EmbedRequest, Embedder, EngineError, GenerateRequest, Generator,
    Sampling, TextPrompt,
};
use svc_core::limits::MAX_MESSAGE_BYTES;
use svc_engine_llama::testing::TinyModel;
use svc_engine_llama::{LlamaEmbedder, LlamaEngine, LlamaEngineOptions, RenderOptions};
use tempfile::TempDir;

struct Fixture {
    engine: LlamaEngine,
    _dir: TempDir,
}

fn engine(model: &TinyModel, context: u32) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    model.write(&path).unwrap();
    let mut options = LlamaEngineOptions::new(&path);
    options.parallel = 1;
    options.context_per_sequence = context;
    options.threads = Some(1);
    let engine = LlamaEngine::load(&options).unwrap();
    Fixture { engine, _dir: dir }
}

fn chat(content: &str) -> GenerateRequest {
    GenerateRequest {
        messages: vec![ChatMessage::User(content.into())],
        sampling: Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
        max_tokens: Some(4),
        ..GenerateRequest::default()
    }
}

fn legacy(text: String) -> GenerateRequest {
    GenerateRequest {
        prompt: Some(TextPrompt {
            text,
            suffix: None,
            score: false,
        }),
        ..chat("")
    }
}

/// The context error's token count, or a panic naming what came instead.
fn refused_for_context<T>(result: Result<T, EngineError>, context: u64) -> u64 {
    match result {
        Err(EngineError::ContextLengthExceeded {
            prompt_tokens,
            context: got,
        }) => {
            assert_eq!(got, context);
            prompt_tokens
        }
        Err(other) => panic!("not the context's error: {other:?}"),
        Ok(_) => panic!("not refused"),
    }
}

#[tokio::test]
async fn a_prompt_far_past_the_context_is_refused_before_it_is_tokenized() {
    let f = engine(&TinyModel::hello(), 256);
    let e = &f.engine;

    // Near the context: tokenized, and refused with its real count (the
    // tiny vocabulary makes a token of each "x").
    let near = "x".repeat(400);
    let real = e
        .chat_tokens(&chat(&near).messages, &[], &RenderOptions::default())
        .unwrap()
        .len() as u64;
    assert_eq!(
        refused_for_context(e.generate(chat(&near)).await, 256),
        real
    );
    // count_tokens counts it (past the context or not).
    assert_eq!(e.count_tokens(&chat(&near)).await.unwrap(), real);
    let tokenized = e.stats().tokenized_bytes;
    assert!(tokenized >= 2 * 400, "{tokenized}");

    // Far past: a message of the most text a request may hold, one word,
    // and a 50 MB legacy prompt; each refused with at least twice the
    // context, none of it tokenized, by count_tokens too (it cannot count
    // them cheaply).
    let word = chat(&"x".repeat(MAX_MESSAGE_BYTES));
    let text = legacy("x".repeat(50 << 20));
    for request in [word, text] {
        let fewest = refused_for_context(e.generate(request.clone()).await, 256);
        assert!(fewest >= 2 * 256, "{fewest}");
        refused_for_context(e.count_tokens(&request).await, 256);
    }
    assert_eq!(e.stats().tokenized_bytes, tokenized);
}

/// 3,000 × 3,000 loop steps: a few seconds of a debug build, minutes
/// of a hostile template's own size.
const LOOPING: &str = "{% for i in range(3000) %}{% for j in range(3000) %}{% endfor %}{% endfor %}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}{{ '<|im_start|>assistant\\n' }}";

#[tokio::test]
async fn a_chat_template_that_loops_or_writes_without_end_is_stopped() {
    let f = engine(&TinyModel::hello().with_template(LOOPING), 256);
    match f.engine.generate(chat("Hi")).await.err() {
        Some(EngineError::Internal(message)) => {
            assert!(message.contains("step limit"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(f.engine.stats().tokenized_bytes, 0);

    // 64,000 copies of a 1,000-byte message (64 MB): stopped once the
    // prompt can no longer fit, before it is tokenized.
    let writing = "{% for i in range(64000) %}{{ messages[0]['content'] }}{% endfor %}";
    let f = engine(&TinyModel::hello().with_template(writing), 256);
    let fewest = refused_for_context(f.engine.generate(chat(&"x".repeat(1000))).await, 256);
    assert!(fewest >= 2 * 256, "{fewest}");
    assert_eq!(f.engine.stats().tokenized_bytes, 0);
}

#[tokio::test]
async fn an_embedding_input_far_past_the_context_is_refused_untokenized() {
    // The tiny model's byte-level BPE vocabulary, as an embedding model
    // (mean pooling): a BPE embedder, as Qwen3's are.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-embed.gguf");
    let mut gguf = TinyModel::hello().gguf();
    gguf.metadata("llama.pooling_type", 1u32);
    gguf.write(&path).unwrap();
    let embedder = LlamaEmbedder::load(&path, Some(1)).unwrap();
    let most = embedder.info().max_input_tokens;
    let embed = |text: String| EmbedRequest {
        inputs: vec![EmbedInput::Text(text)],
        ..EmbedRequest::default()
    };
    let message = |result: Result<_, EngineError>| match result {
        Err(EngineError::InvalidRequest { param, message }) => {
            assert_eq!(param.as_deref(), Some("input"));
            message
        }
        other => panic!("{other:?}"),
    };
    // Near: tokenized, refused with its count.
    let near = message(embedder.embed(embed("x".repeat(most as usize + 10))).await);
    assert!(
        near.contains(" tokens;") && !near.contains("at least"),
        "{near}"
    );
    // Far past: refused from its length (the count is a lower bound).
    let far = message(embedder.embed(embed("x".repeat(50 << 20))).await);
    assert!(far.contains("at least"), "{far}");
}
