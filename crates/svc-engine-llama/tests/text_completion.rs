//! Legacy text completions on tiny GGUF models the tests write: a prompt
//! continued as it is (no chat template), fill-in-the-middle with the
//! model's own tokens, and the refusals that name `suffix` and `prompt`.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::time::Duration;

use futures::StreamExt as _;
use svc_core::engine::{
    Engine, EngineError, EngineEvent, FinishReason, GenerateRequest, Sampling, TextPrompt,
    TokenUsage,
};
use svc_engine_llama::testing::TinyModel;
use svc_engine_llama::{LlamaEngine, LlamaEngineOptions};
use tempfile::TempDir;

const HELLO: &str = "Hello, world! é 😀 end.";

struct Fixture {
    engine: LlamaEngine,
    _dir: TempDir,
}

fn engine(model: &TinyModel) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    model.write(&path).unwrap();
    let mut options = LlamaEngineOptions::new(&path);
    options.threads = Some(2);
    options.parallel = 2;
    options.context_per_sequence = 256;
    let engine = LlamaEngine::load(&options).unwrap();
    Fixture { engine, _dir: dir }
}

fn text(prompt: &str, suffix: Option<&str>) -> GenerateRequest {
    GenerateRequest {
        prompt: Some(TextPrompt {
            text: prompt.into(),
            suffix: suffix.map(str::to_owned),
        }),
        sampling: Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
        max_tokens: Some(32),
        stream: true,
        ..GenerateRequest::default()
    }
}

/// The text, the number of log-probability entries, the finish and usage.
async fn run(engine: &LlamaEngine, request: GenerateRequest) -> (String, usize, TokenUsage) {
    let mut stream = engine.generate(request).await.unwrap();
    let mut out = String::new();
    let mut logprobs = 0;
    let next = async {
        while let Some(event) = stream.next().await {
            match event.unwrap() {
                EngineEvent::Text(t) => out.push_str(&t),
                EngineEvent::Logprobs(tokens) => logprobs += tokens.len(),
                EngineEvent::Finish { reason, usage } => {
                    assert_eq!(reason, FinishReason::Stop);
                    return usage;
                }
                other => panic!("unexpected event {other:?}"),
            }
        }
        panic!("stream ended without a finish event");
    };
    let usage = tokio::time::timeout(Duration::from_secs(60), next)
        .await
        .expect("generation timed out");
    (out, logprobs, usage)
}

#[tokio::test]
async fn a_prompt_is_continued_as_it_is_without_the_template() {
    let f = engine(&TinyModel::hello());
    // The tiny model follows a newline with its script, whatever came before.
    let prompt = "Once upon a time\n";
    let request = GenerateRequest {
        logprobs: Some(2),
        ..text(prompt, None)
    };
    let counted = f.engine.count_tokens(&request).await.unwrap();
    let (out, logprobs, usage) = run(&f.engine, request).await;
    assert_eq!(out, HELLO);
    // Exactly the prompt's own tokens: no template around them.
    let tokens = f.engine.tokenize(prompt).len() as u64;
    assert_eq!(usage.prompt_tokens, tokens);
    assert_eq!(counted, tokens);
    // The 12 scripted tokens and the end of turn, which makes no text.
    assert_eq!(usage.completion_tokens, 13);
    assert_eq!(logprobs, 12);
    // The chat path wraps the same text in the template: more tokens.
    let chat = GenerateRequest {
        messages: vec![svc_core::ChatMessage::User(prompt.into())],
        ..GenerateRequest::default()
    };
    assert!(f.engine.count_tokens(&chat).await.unwrap() > tokens + 2);
}

#[tokio::test]
async fn a_suffix_is_filled_in_with_the_models_own_tokens() {
    let f = engine(&TinyModel::hello().with_fim());
    let (prefix, suffix) = ("fn main() {", "}\n");
    let request = text(prefix, Some(suffix));
    let counted = f.engine.count_tokens(&request).await.unwrap();
    let (out, _, usage) = run(&f.engine, request).await;
    // The script follows <|fim_middle|>, the last token of the FIM prompt.
    assert_eq!(out, HELLO);
    // <|fim_prefix|> prefix <|fim_suffix|> suffix <|fim_middle|>, with both
    // parts as plain text.
    let plain = |s: &str| f.engine.tokenize(s).len() as u64;
    assert_eq!(usage.prompt_tokens, 3 + plain(prefix) + plain(suffix));
    assert_eq!(counted, usage.prompt_tokens);
    // A suffix that spells a control token is text, not that token.
    let spelled = text("a", Some("<|fim_middle|>"));
    let counted = f.engine.count_tokens(&spelled).await.unwrap();
    assert!(counted > 3 + 1 + 1, "{counted} tokens");
}

#[tokio::test]
async fn a_suffix_on_a_model_without_fim_tokens_is_refused_naming_it() {
    let f = engine(&TinyModel::hello());
    let Err(EngineError::InvalidRequest { param, message }) =
        f.engine.generate(text("fn main() {", Some("}"))).await
    else {
        panic!("a suffix was accepted by a model without fill-in-the-middle tokens");
    };
    assert_eq!(param.as_deref(), Some("suffix"));
    assert!(message.contains("fill-in-the-middle"), "{message}");
}

#[tokio::test]
async fn an_empty_prompt_is_refused_naming_it() {
    let f = engine(&TinyModel::hello());
    let Err(EngineError::InvalidRequest { param, .. }) = f.engine.generate(text("", None)).await
    else {
        panic!("an empty prompt was accepted");
    };
    assert_eq!(param.as_deref(), Some("prompt"));
}

#[tokio::test]
async fn several_choices_of_a_text_prompt_each_finish() {
    let f = engine(&TinyModel::hello());
    let request = GenerateRequest {
        n: 2,
        ..text("x\n", None)
    };
    let mut stream = f.engine.generate(request).await.unwrap();
    let mut texts = [String::new(), String::new()];
    let mut current = 0;
    let mut finished = 0;
    while let Some(event) = stream.next().await {
        match event.unwrap() {
            EngineEvent::Choice(i) => current = i as usize,
            EngineEvent::Text(t) => texts[current].push_str(&t),
            EngineEvent::Finish { .. } => finished += 1,
            other => panic!("unexpected event {other:?}"),
        }
    }
    assert_eq!(finished, 2);
    assert_eq!(texts, [HELLO, HELLO]);
}
