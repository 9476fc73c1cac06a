//! Anthropic's `top_k` in the sampler chain, and `Engine::count_tokens`
//! giving exactly the prompt tokens a generation starts from, on the tiny
//! GGUF models the tests write themselves.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::time::Duration;

use futures::StreamExt as _;
use serde_json::json;
use svc_core::engine::{
    ChatMessage, EngineEvent, GenerateRequest, Generator, Sampling, TokenUsage, ToolCallSpec,
    ToolChoiceSpec, ToolSpec,
};
use svc_engine_llama::testing::TinyModel;
use svc_engine_llama::{LlamaCounter, LlamaEngine, LlamaEngineOptions};
use tempfile::TempDir;

struct Fixture {
    engine: LlamaEngine,
    options: LlamaEngineOptions,
    _dir: TempDir,
}

fn engine(model: &TinyModel) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    model.write(&path).unwrap();
    let mut options = LlamaEngineOptions::new(&path);
    options.parallel = 2;
    options.context_per_sequence = 2048;
    options.threads = Some(2);
    let engine = LlamaEngine::load(&options).unwrap();
    Fixture {
        engine,
        options,
        _dir: dir,
    }
}

fn request(sampling: Sampling) -> GenerateRequest {
    GenerateRequest {
        messages: vec![ChatMessage::User("Tell me something".into())],
        sampling,
        max_tokens: Some(40),
        ..GenerateRequest::default()
    }
}

/// The text and usage of one generation.
async fn run(engine: &LlamaEngine, request: GenerateRequest) -> (String, TokenUsage) {
    let mut stream = engine.generate(request).await.unwrap();
    let all = async {
        let mut text = String::new();
        while let Some(event) = stream.next().await {
            match event.unwrap() {
                EngineEvent::Text(t) => text.push_str(&t),
                EngineEvent::Finish { usage, .. } => return (text, usage),
                _ => {}
            }
        }
        panic!("no finish");
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("generation timed out")
}

#[tokio::test]
async fn top_k_of_one_is_greedy_whatever_the_seed() {
    let f = engine(&TinyModel::looping());
    let greedy = Sampling {
        temperature: 0.0,
        ..Sampling::default()
    };
    let (script, _) = run(&f.engine, request(greedy)).await;
    let seeded = |seed: u64, top_k: u32| Sampling {
        temperature: 1.0,
        top_k,
        seed: Some(seed),
        ..Sampling::default()
    };
    let mut strayed = 0;
    for seed in 1..=4 {
        let (text, _) = run(&f.engine, request(seeded(seed, 1))).await;
        assert_eq!(text, script, "top_k 1 with seed {seed}");
        let (free, _) = run(&f.engine, request(seeded(seed, 0))).await;
        strayed += usize::from(free != script);
    }
    // Without the cut, temperature 1 strays from the script: the test
    // above would pass without top_k otherwise.
    assert!(strayed >= 2, "temperature 1 stayed on the script");
}

#[tokio::test]
async fn count_tokens_is_the_prompt_a_generation_starts_from() {
    let f = engine(&TinyModel::looping());
    let greedy = Sampling {
        temperature: 0.0,
        ..Sampling::default()
    };
    let plain = request(greedy.clone());
    let counted = f.engine.count_tokens(&plain).await.unwrap();
    let (_, usage) = run(&f.engine, plain.clone()).await;
    assert_eq!(counted, usage.prompt_tokens);
    // Not the byte estimate every engine gets by default.
    assert_ne!(counted, svc_core::estimate_tokens(&plain));

    let mut tooled = plain.clone();
    tooled.tools = vec![ToolSpec {
        name: "get_weather".into(),
        description: Some("The weather of a city".into()),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    }];
    tooled.tool_choice = ToolChoiceSpec::Auto;
    tooled.messages.extend([
        ChatMessage::Assistant {
            content: None,
            tool_calls: vec![ToolCallSpec {
                id: "toolu_1".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into(),
            }],
            reasoning: None,
        },
        ChatMessage::Tool {
            tool_call_id: "toolu_1".into(),
            content: "sunny".into(),
        },
    ]);
    let with_tools = f.engine.count_tokens(&tooled).await.unwrap();
    assert!(with_tools > counted, "{with_tools} <= {counted}");
    let (_, usage) = run(&f.engine, tooled).await;
    assert_eq!(with_tools, usage.prompt_tokens);
}

#[tokio::test]
async fn the_vocabulary_alone_counts_as_the_loaded_engine() {
    // What svc counts a model's prompts with while the model is not loaded.
    let f = engine(&TinyModel::looping());
    let counter = LlamaCounter::load(&f.options).unwrap();
    let plain = request(Sampling::default());
    let mut tooled = plain.clone();
    tooled.tools = vec![ToolSpec {
        name: "get_weather".into(),
        description: Some("The weather of a city".into()),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    }];
    tooled.tool_choice = ToolChoiceSpec::Auto;
    let text = GenerateRequest {
        prompt: Some(svc_core::engine::TextPrompt {
            text: "Once upon a time <|im_end|>".into(),
            suffix: None,
            score: false,
        }),
        ..GenerateRequest::default()
    };
    for request in [plain, tooled, text] {
        let loaded = f.engine.count_tokens(&request).await.unwrap();
        assert_eq!(counter.count(&request).unwrap(), loaded);
        assert_ne!(loaded, svc_core::estimate_tokens(&request));
    }
    // A file that is not there is an error naming it.
    let mut missing = f.options.clone();
    missing.model_path = missing.model_path.with_file_name("missing.gguf");
    let error = LlamaCounter::load(&missing).unwrap_err().to_string();
    assert!(error.contains("missing.gguf"), "{error}");
}
