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
    EngineError, EngineEvent, FinishReason, GenerateRequest, Generator, PromptLogprob, Sampling,
    TextPrompt, TokenUsage,
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
    engine_with(model, |_| {})
}

fn engine_with(model: &TinyModel, set: impl FnOnce(&mut LlamaEngineOptions)) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    model.write(&path).unwrap();
    let mut options = LlamaEngineOptions::new(&path);
    options.threads = Some(2);
    options.parallel = 2;
    options.context_per_sequence = 256;
    set(&mut options);
    let engine = LlamaEngine::load(&options).unwrap();
    Fixture { engine, _dir: dir }
}

fn text(prompt: &str, suffix: Option<&str>) -> GenerateRequest {
    GenerateRequest {
        prompt: Some(TextPrompt {
            text: prompt.into(),
            suffix: suffix.map(str::to_owned),
            score: false,
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

/// A scored prompt's events: its scores, the generated text, the finish and usage.
async fn scored(
    engine: &LlamaEngine,
    prompt: &str,
    max_tokens: u32,
) -> (Vec<PromptLogprob>, String, FinishReason, TokenUsage) {
    let mut request = text(prompt, None);
    request.prompt.as_mut().unwrap().score = true;
    request.logprobs = Some(2);
    request.max_tokens = Some(max_tokens);
    let mut stream = engine.generate(request).await.unwrap();
    let (mut scores, mut out) = (None, String::new());
    while let Some(event) = stream.next().await {
        match event.unwrap() {
            EngineEvent::PromptLogprobs(tokens) => {
                assert!(
                    scores.is_none() && out.is_empty(),
                    "scores after the reply began"
                );
                scores = Some(tokens);
            }
            EngineEvent::Logprobs(_) => {}
            EngineEvent::Text(t) => out.push_str(&t),
            EngineEvent::Finish { reason, usage } => {
                return (scores.expect("the prompt's scores"), out, reason, usage);
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
    panic!("stream ended without a finish event");
}

// lm-evaluation-harness's loglikelihood requests: `echo` with `logprobs`
// and `max_tokens` 0. svc answered 400: it did not score prompts.
#[tokio::test]
async fn a_scored_prompt_gives_each_token_its_log_probability_however_it_is_chunked() {
    let f = engine(&TinyModel::hello());
    // The tiny model's script follows a newline: "Hel" then "lo" then ",".
    let prompt = "x\nHello, there";
    let (scores, out, reason, usage) = scored(&f.engine, prompt, 0).await;
    assert_eq!(out, "");
    assert_eq!(reason, FinishReason::Length);
    assert_eq!(usage.completion_tokens, 0);
    // Every token of the prompt, in order, its bytes the prompt's.
    assert_eq!(scores.len() as u64, usage.prompt_tokens);
    let bytes: Vec<u8> = scores.iter().flat_map(|t| t.bytes.clone()).collect();
    assert_eq!(bytes, prompt.as_bytes());
    // The first has no score; the others a log probability and two alternatives.
    assert_eq!(scores[0].logprob, None);
    assert!(scores[0].top.is_empty());
    for t in &scores[1..] {
        let logprob = t.logprob.unwrap();
        assert!(logprob <= 0.0, "{t:?}");
        assert_eq!(t.top.len(), 2, "{t:?}");
        assert!(t.top[0].logprob >= logprob, "{t:?}");
    }
    // Where the script goes on, the prompt's token is the model's first choice.
    let at = |token: &str| scores.iter().position(|t| t.token == token).unwrap();
    for token in ["Hel", "lo", ","] {
        let t = &scores[at(token)];
        assert_eq!(t.top[0].token, token, "{t:?}");
        assert_eq!(t.top[0].logprob, t.logprob.unwrap(), "{t:?}");
    }

    // The same scores, bit for bit, when the prompt goes token by token or
    // in chunks of 3 or 5 tokens.
    for size in [1, 3, 5] {
        let small = engine_with(&TinyModel::hello(), |o| o.batch_size = size);
        let (chunked, ..) = scored(&small.engine, prompt, 0).await;
        assert_eq!(chunked, scores, "chunks of {size}");
    }
    // And when it is scored beside another prompt's generation, after it.
    let (beside, (again, ..)) = tokio::join!(
        run(&f.engine, text("y\n", None)),
        scored(&f.engine, prompt, 0)
    );
    assert_eq!(again, scores);
    assert_eq!(beside.0, HELLO);

    // With max_tokens, the reply follows the scores; the prompt ends in the
    // newline the script follows.
    let (scores, out, reason, usage) = scored(&f.engine, "x\n", 32).await;
    assert_eq!(scores.len(), 2);
    assert_eq!(out, HELLO);
    assert_eq!(reason, FinishReason::Stop);
    assert_eq!(usage.completion_tokens, 13);
}

#[tokio::test]
async fn max_tokens_zero_is_refused_unless_the_prompt_is_scored() {
    let f = engine(&TinyModel::hello());
    let request = GenerateRequest {
        max_tokens: Some(0),
        ..text("x", None)
    };
    let Err(EngineError::InvalidRequest { param, .. }) = f.engine.generate(request).await else {
        panic!("max_tokens 0 was accepted for a prompt not scored");
    };
    assert_eq!(param.as_deref(), Some("max_tokens"));
}
