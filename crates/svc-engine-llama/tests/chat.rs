//! The chat layer end to end on tiny GGUF models the tests write themselves:
//! JSON output forced by a grammar (random weights, so the grammar does all
//! the work), tool calls (forced and parsed), think blocks of thinking
//! templates, and the explicit two-pass reasoning.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{Value, json};
use svc_core::engine::{
    ChatMessage, EngineError, EngineEvent, EventStream, FinishReason, GenerateRequest, Generator,
    OutputFormat, Sampling, TokenLogprob, TokenUsage, ToolCallChunk, ToolCallSpec, ToolChoiceSpec,
    ToolSpec,
};
use svc_engine_llama::testing::{HARMONY_CONTROLS, HARMONY_TEMPLATE, TINY_TEMPLATE, TinyModel};
use svc_engine_llama::{LlamaEngine, LlamaEngineOptions, ReasoningFormat, ToolFormat};
use tempfile::TempDir;

const HELLO: &str = "Hello, world! é 😀 end.";

struct Fixture {
    engine: LlamaEngine,
    _dir: TempDir,
}

fn engine(model: &TinyModel, context: u32) -> Fixture {
    engine_with(model, context, |_| {})
}

/// [`engine`] with settings of the test's own.
fn engine_with(
    model: &TinyModel,
    context: u32,
    settings: impl FnOnce(&mut LlamaEngineOptions),
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    model.write(&path).unwrap();
    let mut options = LlamaEngineOptions::new(&path);
    options.parallel = 2;
    // Both choices of an `n = 2` request at once: the prompt sharing these
    // tests check (the share of one client is tests/engine.rs's).
    options.slots_per_client = Some(2);
    options.queue_capacity = 4;
    options.context_per_sequence = context;
    options.threads = Some(2);
    settings(&mut options);
    let engine = LlamaEngine::load(&options).unwrap();
    Fixture { engine, _dir: dir }
}

fn greedy() -> Sampling {
    Sampling {
        temperature: 0.0,
        ..Sampling::default()
    }
}

fn request(user: &str) -> GenerateRequest {
    GenerateRequest {
        messages: vec![ChatMessage::User(user.into())],
        sampling: greedy(),
        max_tokens: Some(200),
        stop: vec![],
        tools: vec![],
        tool_choice: ToolChoiceSpec::Auto,
        output: OutputFormat::Text,
        reasoning: false,
        stream: true,
        ..GenerateRequest::default()
    }
}

/// Everything a stream said, in order.
#[derive(Debug, Default)]
struct Outcome {
    events: Vec<EngineEvent>,
    reason: Option<FinishReason>,
    usage: TokenUsage,
}

impl Outcome {
    fn text(&self) -> String {
        self.events
            .iter()
            .filter_map(|e| match e {
                EngineEvent::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    fn reasoning(&self) -> String {
        self.events
            .iter()
            .filter_map(|e| match e {
                EngineEvent::Reasoning(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The tool calls, assembled from their chunks: (id, name, arguments).
    fn calls(&self) -> Vec<(String, String, String)> {
        let mut calls: Vec<(String, String, String)> = Vec::new();
        for e in &self.events {
            if let EngineEvent::ToolCall(chunk) = e {
                let i = chunk.index as usize;
                if i == calls.len() {
                    calls.push((
                        chunk.id.clone().expect("the first chunk has the id"),
                        chunk.name.clone().expect("the first chunk has the name"),
                        String::new(),
                    ));
                } else {
                    assert!(chunk.id.is_none() && chunk.name.is_none(), "{chunk:?}");
                }
                calls[i].2.push_str(&chunk.arguments);
            }
        }
        calls
    }

    /// Reasoning never follows text or tool calls.
    fn assert_reasoning_first(&self) {
        let first_other = self
            .events
            .iter()
            .position(|e| !matches!(e, EngineEvent::Reasoning(_)))
            .unwrap_or(self.events.len());
        assert!(
            self.events[first_other..]
                .iter()
                .all(|e| !matches!(e, EngineEvent::Reasoning(_))),
            "{:?}",
            self.events
        );
    }
}

async fn collect(mut stream: EventStream) -> Outcome {
    let mut out = Outcome::default();
    let next = async {
        while let Some(event) = stream.next().await {
            match event.unwrap() {
                EngineEvent::Finish { reason, usage } => {
                    assert!(stream.next().await.is_none(), "events after finish");
                    out.reason = Some(reason);
                    out.usage = usage;
                    return;
                }
                EngineEvent::Text(t) | EngineEvent::Reasoning(t) if t.is_empty() => {
                    panic!("empty text event")
                }
                event => out.events.push(event),
            }
        }
        panic!("stream ended without a finish event");
    };
    tokio::time::timeout(Duration::from_secs(120), next)
        .await
        .expect("generation timed out");
    out
}

async fn run(engine: &LlamaEngine, request: GenerateRequest) -> Outcome {
    collect(engine.generate(request).await.unwrap()).await
}

fn valid(schema: &Value, instance: &Value) -> bool {
    jsonschema::validator_for(schema)
        .unwrap()
        .is_valid(instance)
}

/// A schema whose every value is bounded, so even random weights must end it.
fn city_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "windy": {"type": "boolean"}
        },
        "required": ["city", "days", "unit", "windy"],
        "additionalProperties": false
    })
}

fn weather_tool(city: Value) -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: Some("The weather in a city".into()),
        parameters: json!({
            "type": "object",
            "properties": {
                "city": city,
                "unit": {"enum": ["celsius", "fahrenheit"]}
            },
            "required": ["city"]
        }),
    }
}

fn time_tool() -> ToolSpec {
    ToolSpec {
        name: "get_time".into(),
        description: None,
        parameters: json!({
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 8}},
            "required": ["zone"],
            "additionalProperties": false
        }),
    }
}

#[tokio::test]
async fn json_schema_output_is_forced_even_on_random_weights() {
    let f = engine(&TinyModel::hello(), 512);
    let schema = city_schema();
    for sampling in [
        greedy(),
        Sampling {
            temperature: 1.0,
            seed: Some(3),
            ..Sampling::default()
        },
        Sampling {
            temperature: 1.0,
            seed: Some(4),
            ..Sampling::default()
        },
    ] {
        let mut req = request("Weather?");
        req.sampling = sampling;
        req.output = OutputFormat::JsonSchema {
            name: "weather".into(),
            schema: schema.clone(),
        };
        let out = run(&f.engine, req).await;
        let text = out.text();
        // Generation ended because the JSON was complete, not at max_tokens.
        assert_eq!(out.reason, Some(FinishReason::Stop), "{text}");
        assert!(out.usage.completion_tokens < 200);
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(valid(&schema, &value), "{text}");
        assert_eq!(text.trim(), text, "whitespace around the value is trimmed");
    }
}

#[tokio::test]
async fn json_object_output_follows_the_model_within_the_grammar() {
    // A model that wants to write JSON writes it unchanged...
    let f = engine(&TinyModel::scripted(&["{\"a\"", ": [1, ", "true]}"]), 256);
    let mut req = request("JSON please");
    req.output = OutputFormat::JsonObject;
    let out = run(&f.engine, req.clone()).await;
    assert_eq!(out.text(), "{\"a\": [1, true]}");
    assert_eq!(out.reason, Some(FinishReason::Stop));
    // ...and one that does not is made to start an object.
    let f = engine(&TinyModel::hello(), 256);
    req.max_tokens = Some(8);
    let out = run(&f.engine, req).await;
    assert!(out.text().starts_with('{'), "{}", out.text());
}

#[tokio::test]
async fn an_unsupported_schema_is_an_invalid_request() {
    let f = engine(&TinyModel::hello(), 256);
    let mut req = request("Hi");
    req.output = OutputFormat::JsonSchema {
        name: "x".into(),
        schema: json!({"$ref": "https://example.com/remote.json"}),
    };
    match f.engine.generate(req).await.err() {
        Some(EngineError::InvalidRequest { param, .. }) => {
            assert_eq!(param.as_deref(), Some("response_format.json_schema.schema"))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_named_tool_choice_forces_a_schema_valid_call() {
    let f = engine(&TinyModel::hello(), 1024);
    let weather = weather_tool(json!({"type": "string", "maxLength": 16}));
    for seed in [None, Some(1), Some(2)] {
        let mut req = request("What is the weather in Paris?");
        if seed.is_some() {
            req.sampling = Sampling {
                temperature: 1.0,
                seed,
                ..Sampling::default()
            };
        }
        req.tools = vec![time_tool(), weather.clone()];
        req.tool_choice = ToolChoiceSpec::Function("get_weather".into());
        let out = run(&f.engine, req).await;
        assert_eq!(out.reason, Some(FinishReason::ToolCalls), "{out:?}");
        assert_eq!(out.text(), "", "no text beside a forced call");
        let calls = out.calls();
        assert_eq!(calls.len(), 1, "{out:?}");
        let (id, name, arguments) = &calls[0];
        assert!(id.starts_with("call_") && id.len() == 29, "{id}");
        assert_eq!(name, "get_weather");
        let arguments: Value = serde_json::from_str(arguments).unwrap();
        assert!(valid(&weather.parameters, &arguments), "{arguments}");
    }
}

#[tokio::test]
async fn required_tool_choice_calls_one_of_the_tools() {
    let f = engine(&TinyModel::hello(), 1024);
    let tools = vec![
        time_tool(),
        weather_tool(json!({"type": "string", "maxLength": 16})),
    ];
    let mut req = request("Anything");
    req.tools = tools.clone();
    req.tool_choice = ToolChoiceSpec::Required;
    let out = run(&f.engine, req).await;
    assert_eq!(out.reason, Some(FinishReason::ToolCalls), "{out:?}");
    let calls = out.calls();
    assert_eq!(calls.len(), 1);
    let tool = tools.iter().find(|t| t.name == calls[0].1).unwrap();
    let arguments: Value = serde_json::from_str(&calls[0].2).unwrap();
    assert!(valid(&tool.parameters, &arguments), "{arguments}");

    // Naming a function that is not offered, or requiring a call of nothing, is refused.
    let mut req = request("Anything");
    req.tools = tools;
    req.tool_choice = ToolChoiceSpec::Function("launch".into());
    let err = f.engine.generate(req.clone()).await.err();
    assert!(
        matches!(&err, Some(EngineError::InvalidRequest { param: Some(p), .. }) if p == "tool_choice"),
        "{err:?}"
    );
    req.tools = vec![];
    req.tool_choice = ToolChoiceSpec::Required;
    let err = f.engine.generate(req).await.err();
    assert!(
        matches!(&err, Some(EngineError::InvalidRequest { param: Some(p), .. }) if p == "tool_choice"),
        "{err:?}"
    );
}

/// A model that says a few words, then calls get_weather for Paris.
fn calling_model() -> TinyModel {
    TinyModel::scripted(&[
        "Let",
        " me",
        " check.\n",
        "<tool_call>\n",
        "{\"name\": \"get_weather\", ",
        "\"arguments\": {\"city\": \"Paris\"}}",
        "\n</tool_call>",
    ])
}

#[tokio::test]
async fn tool_calls_in_the_output_become_tool_call_chunks() {
    let f = engine(&calling_model(), 1024);
    let mut req = request("Weather in Paris?");
    req.tools = vec![weather_tool(json!({"type": "string"}))];
    let out = run(&f.engine, req.clone()).await;
    assert_eq!(out.reason, Some(FinishReason::ToolCalls));
    assert_eq!(out.text(), "Let me check.");
    let calls = out.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].1, "get_weather");
    assert_eq!(calls[0].2, "{\"city\": \"Paris\"}");
    // Text comes before the call; no markup leaks into it.
    let first_call = out
        .events
        .iter()
        .position(|e| matches!(e, EngineEvent::ToolCall(_)))
        .unwrap();
    assert!(
        out.events[first_call..]
            .iter()
            .all(|e| matches!(e, EngineEvent::ToolCall(_)))
    );

    // A function that was not offered is not a call: the block stays text.
    let mut other = req.clone();
    other.tools = vec![time_tool()];
    let out = run(&f.engine, other).await;
    assert_eq!(out.reason, Some(FinishReason::Stop));
    assert!(out.calls().is_empty());
    assert!(out.text().contains("<tool_call>"), "{}", out.text());

    // With tool_choice none there are no tools in the prompt and no parsing.
    let mut none = req;
    none.tool_choice = ToolChoiceSpec::None;
    let out = run(&f.engine, none).await;
    assert_eq!(out.reason, Some(FinishReason::Stop));
    assert!(out.text().ends_with("</tool_call>"), "{}", out.text());
}

/// A template of Mistral's family: it lists the tools and writes calls
/// after `[TOOL_CALLS]`, a control token of the model's vocabulary.
const MISTRAL_TEMPLATE: &str = "{%- if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{%- endif %}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}{% if message.tool_calls %}{{ '[TOOL_CALLS]' + (message.tool_calls | tojson) }}{% else %}{{ message['content'] }}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

#[tokio::test]
async fn a_mistral_family_model_calls_tools_in_its_own_syntax() {
    // `[TOOL_CALLS]` and `[ARGS]` are control tokens: the engine must
    // write their text for the family's parser to see the call.
    let model = TinyModel::scripted(&[
        "Sure",
        ".",
        "[TOOL_CALLS]",
        "get_weather",
        "[ARGS]",
        "{\"city\": ",
        "\"Paris\"}",
    ])
    .with_controls(&["[TOOL_CALLS]", "[ARGS]"])
    .with_template(MISTRAL_TEMPLATE);
    let f = engine(&model, 1024);
    let mut req = request("Weather in Paris?");
    req.tools = vec![weather_tool(json!({"type": "string"}))];
    let out = run(&f.engine, req.clone()).await;
    assert_eq!(out.text(), "Sure.");
    let calls = out.calls();
    assert_eq!(calls.len(), 1, "{:?}", out.events);
    assert_eq!(calls[0].1, "get_weather");
    // Streamed as the model wrote them.
    assert_eq!(calls[0].2, "{\"city\": \"Paris\"}");
    assert_eq!(out.reason, Some(FinishReason::ToolCalls));

    // A function that was not offered is not a call: the section is text.
    let mut other = req;
    other.tools = vec![time_tool()];
    let out = run(&f.engine, other).await;
    assert!(out.calls().is_empty());
    assert_eq!(
        out.text(),
        "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}"
    );
    assert_eq!(out.reason, Some(FinishReason::Stop));
}

/// A Hermes call of get_weather for Paris after "Sure.", its markers
/// written as the pieces `open` and `close` (one token each, or spelled in
/// several).
fn hermes_script<'a>(open: &[&'a str], close: &[&'a str]) -> Vec<&'a str> {
    let mut pieces = vec!["Sure."];
    pieces.extend(open);
    pieces.extend([
        "\n{\"name\": \"get_weather\", ",
        "\"arguments\": {\"city\": \"Paris\"}}\n",
    ]);
    pieces.extend(close);
    pieces
}

#[tokio::test]
async fn a_call_spelled_in_plain_tokens_is_text_where_its_markers_are_tokens() {
    // A client's prompt can coax a model into echoing a call's markup in
    // plain tokens: where the vocabulary has tokens for the markers, only
    // the markers written as those tokens make a call.
    let mut req = request("Weather in Paris?");
    req.tools = vec![weather_tool(json!({"type": "string"}))];
    let spelled = "Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    let markers = ["<tool_call>", "</tool_call>"];
    // Hermes' markers as user-defined tokens (Qwen's) and as control tokens.
    for user_defined in [true, false] {
        let model = |pieces: &[&str]| {
            let model = TinyModel::scripted(pieces);
            if user_defined {
                model.with_user_defined(&markers)
            } else {
                model.with_controls(&markers)
            }
        };
        let f = engine(&model(&hermes_script(&[markers[0]], &[markers[1]])), 1024);
        let out = run(&f.engine, req.clone()).await;
        assert_eq!(out.text(), "Sure.", "user-defined {user_defined}");
        let calls = out.calls();
        assert_eq!(calls.len(), 1, "{:?}", out.events);
        assert_eq!(calls[0].2, "{\"city\": \"Paris\"}");
        assert_eq!(out.reason, Some(FinishReason::ToolCalls));

        let plain = model(&hermes_script(&["<tool", "_call>"], &["</tool_", "call>"]));
        let f = engine(&plain, 1024);
        let out = run(&f.engine, req.clone()).await;
        assert!(out.calls().is_empty(), "{:?}", out.events);
        assert_eq!(out.text(), spelled);
        assert_eq!(out.reason, Some(FinishReason::Stop));
    }

    // Mistral's, control tokens.
    let f = engine(
        &TinyModel::scripted(&[
            "Sure",
            ".",
            "[TOOL_",
            "CALLS]",
            "get_weather",
            "[AR",
            "GS]",
            "{\"city\": ",
            "\"Paris\"}",
        ])
        .with_controls(&["[TOOL_CALLS]", "[ARGS]"])
        .with_template(MISTRAL_TEMPLATE),
        1024,
    );
    let out = run(&f.engine, req.clone()).await;
    assert!(out.calls().is_empty(), "{:?}", out.events);
    assert_eq!(
        out.text(),
        "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}"
    );

    // Under a grammar (a forced call) the grammar writes the markup, in
    // whatever tokens: the call is the grammar's.
    let f = engine(&model_spelling_markers(), 1024);
    let mut forced = req;
    forced.tool_choice = ToolChoiceSpec::Function("get_weather".into());
    let out = run(&f.engine, forced).await;
    assert_eq!(out.calls().len(), 1, "{:?}", out.events);
}

/// A model with Hermes' markers as tokens that spells them nonetheless
/// (random weights under a grammar write whatever tokens it allows).
fn model_spelling_markers() -> TinyModel {
    TinyModel::scripted(&hermes_script(&["<tool", "_call>"], &["</tool_", "call>"]))
        .with_user_defined(&["<tool_call>", "</tool_call>"])
}

#[tokio::test]
async fn a_gpt_oss_family_model_reasons_and_calls_in_harmony() {
    // Its channels' markers are control tokens: the engine shows them to
    // the parser, and none reaches the client.
    let calling = TinyModel::harmony_calling();
    let f = engine(&calling, 1024);
    let mut req = request("Weather in Paris?");
    req.tools = vec![weather_tool(json!({"type": "string"}))];
    req.reasoning = true;
    let out = run(&f.engine, req.clone()).await;
    assert_eq!(out.reasoning(), "Need the weather.", "{:?}", out.events);
    assert_eq!(out.text(), "");
    let calls = out.calls();
    assert_eq!(calls.len(), 1, "{:?}", out.events);
    assert_eq!(calls[0].1, "get_weather");
    assert_eq!(calls[0].2, "{\"city\": \"Paris\"}");
    assert_eq!(out.reason, Some(FinishReason::ToolCalls));
    // Its arguments streamed: more than one chunk after the call's first.
    let chunks = out
        .events
        .iter()
        .filter(|e| matches!(e, EngineEvent::ToolCall(c) if c.id.is_none()))
        .count();
    assert!(chunks >= 2, "{:?}", out.events);

    // Without reasoning asked for, the analysis channel is dropped.
    req.reasoning = false;
    let out = run(&f.engine, req).await;
    assert_eq!(out.reasoning(), "");
    assert_eq!(out.calls().len(), 1);

    let answering = TinyModel::scripted(&[
        "<|channel|>",
        "analysis",
        "<|message|>",
        "Greeting.",
        "<|end|>",
        "<|start|>",
        "assistant<|channel|>final<|message|>",
        "Hello",
        "!",
    ])
    .with_controls(HARMONY_CONTROLS)
    .with_template(HARMONY_TEMPLATE);
    let f = engine(&answering, 1024);
    let mut req = request("Hi");
    req.reasoning = true;
    let out = run(&f.engine, req).await;
    assert_eq!(out.reasoning(), "Greeting.");
    assert_eq!(out.text(), "Hello!");
    assert_eq!(out.reason, Some(FinishReason::Stop));
}

#[tokio::test]
async fn a_devstral_model_calls_after_the_users_turn_and_answers_after_the_result() {
    // Devstral's own template: a prompt ends `[/INST]` after the user's
    // turn and `[/TOOL_RESULTS]` after a tool's result, and the tiny model
    // calls after the one and answers after the other (as Codex CLI needs).
    let model = TinyModel::devstral_agent();
    // Devstral's default system message is long, in bytes as in tokens here.
    let f = engine(&model, 16384);
    let exec = ToolSpec {
        name: "exec_command".into(),
        description: Some("Runs a command".into()),
        parameters: json!({
            "type": "object",
            "properties": {"cmd": {"type": "string"}},
            "required": ["cmd"]
        }),
    };
    let mut req = request("Run it.");
    req.tools = vec![exec];
    let out = run(&f.engine, req.clone()).await;
    assert_eq!(out.text(), "", "{:?}", out.events);
    let calls = out.calls();
    assert_eq!(calls.len(), 1, "{:?}", out.events);
    assert_eq!(calls[0].1, "exec_command");
    assert_eq!(calls[0].2, "{\"cmd\": \"echo svc-codex-ok\"}");
    assert_eq!(out.reason, Some(FinishReason::ToolCalls));

    req.messages.extend([
        ChatMessage::Assistant {
            content: None,
            tool_calls: vec![ToolCallSpec {
                id: calls[0].0.clone(),
                name: "exec_command".into(),
                arguments: calls[0].2.clone(),
            }],
            reasoning: None,
        },
        ChatMessage::Tool {
            tool_call_id: calls[0].0.clone(),
            content: "svc-codex-ok\n".into(),
        },
    ]);
    let out = run(&f.engine, req).await;
    assert!(out.calls().is_empty(), "{:?}", out.events);
    assert_eq!(out.text(), "Ran it: svc-codex-ok.");
    assert_eq!(out.reason, Some(FinishReason::Stop));
}

#[tokio::test]
async fn a_harmony_reply_under_a_grammar_skips_to_the_final_channel() {
    // A JSON reply: svc opens the final channel itself, so the grammar's
    // JSON is the whole answer (random weights: the grammar decides).
    let model = TinyModel::hello()
        .with_controls(HARMONY_CONTROLS)
        .with_template(HARMONY_TEMPLATE);
    let f = engine(&model, 1024);
    let mut req = request("JSON please");
    req.output = OutputFormat::JsonSchema {
        name: "city".into(),
        schema: city_schema(),
    };
    let out = run(&f.engine, req).await;
    let value: Value = serde_json::from_str(&out.text()).unwrap();
    assert!(valid(&city_schema(), &value), "{value}");
    assert_eq!(out.reasoning(), "");
}

#[tokio::test]
async fn a_magistral_model_thinks_in_think_control_tokens() {
    let model = TinyModel::scripted(&["[THINK]", "Two and two.", "[/THINK]", "\n\n", "Four."])
        .with_controls(&["[THINK]", "[/THINK]"])
        .with_template(
            "{%- if false %}[THINK]{% endif %}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
        );
    let f = engine(&model, 1024);
    let mut req = request("2+2?");
    req.reasoning = true;
    let out = run(&f.engine, req.clone()).await;
    assert_eq!(out.reasoning(), "Two and two.");
    assert_eq!(out.text(), "Four.");
    req.reasoning = false;
    let out = run(&f.engine, req).await;
    assert_eq!(out.reasoning(), "");
    assert_eq!(out.text(), "Four.");
}

#[tokio::test]
async fn settings_name_the_formats_a_template_does_not() {
    // A plain ChatML template teaches neither; the settings say pythonic
    // calls and `<think>` blocks.
    let model = TinyModel::scripted(&[
        "<think>",
        "Use the tool.",
        "</think>",
        "[get_weather(",
        "city=\"Paris\")]",
    ]);
    let f = engine_with(&model, 1024, |options| {
        options.tool_format = Some(ToolFormat::Pythonic);
        options.reasoning_format = Some(ReasoningFormat::Think);
    });
    let mut req = request("Weather in Paris?");
    req.tools = vec![weather_tool(json!({"type": "string"}))];
    req.reasoning = true;
    let out = run(&f.engine, req.clone()).await;
    assert_eq!(out.reasoning(), "Use the tool.");
    let calls = out.calls();
    assert_eq!(calls.len(), 1, "{:?}", out.events);
    assert_eq!(calls[0].2, "{\"city\":\"Paris\"}");

    // Without them, the same output is text: the template's Hermes
    // calls and no reasoning of the model's own.
    let f = engine(&model, 1024);
    req.reasoning = false;
    let out = run(&f.engine, req).await;
    assert!(out.calls().is_empty());
    assert_eq!(
        out.text(),
        "<think>Use the tool.</think>[get_weather(city=\"Paris\")]"
    );
}

#[tokio::test]
async fn the_tools_and_a_tool_history_reach_a_template_without_tools() {
    let f = engine(&calling_model(), 1024);
    let tools = vec![weather_tool(json!({"type": "string"}))];
    let messages = vec![
        ChatMessage::User("Weather in Paris?".into()),
        ChatMessage::Assistant {
            content: None,
            tool_calls: vec![ToolCallSpec {
                id: "call_1".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into(),
            }],
            reasoning: None,
        },
        ChatMessage::Tool {
            tool_call_id: "call_1".into(),
            content: "18°C".into(),
        },
    ];
    // The tiny template only knows role and content: the tools become a
    // system block, the call assistant text, the result a user message.
    let mut req = request("");
    req.messages = messages;
    req.tools = tools;
    let out = run(&f.engine, req.clone()).await;
    assert_eq!(out.calls().len(), 1);
    let prompt_tokens = out.usage.prompt_tokens;
    let plain = f
        .engine
        .render_prompt(&req.messages[..1], &[], &Default::default())
        .unwrap();
    assert!(prompt_tokens > f.engine.tokenize(&plain).len() as u64 + 100);
}

#[tokio::test]
async fn auto_tools_with_a_json_format_allow_a_call_or_json() {
    let calls_at_once = TinyModel::scripted(&[
        "<tool_call>\n",
        "{\"name\": \"get_weather\", ",
        "\"arguments\": {\"city\": \"Paris\"}}",
        "\n</tool_call>",
    ]);
    let f = engine(&calls_at_once, 1024);
    let mut req = request("Weather in Paris?");
    req.tools = vec![weather_tool(json!({"type": "string"}))];
    req.output = OutputFormat::JsonSchema {
        name: "weather".into(),
        schema: city_schema(),
    };
    let out = run(&f.engine, req.clone()).await;
    assert_eq!(out.reason, Some(FinishReason::ToolCalls), "{out:?}");
    assert_eq!(out.calls()[0].2, "{\"city\": \"Paris\"}");

    // A model that does not want either writes one or the other (random
    // weights: every string is bounded, so it must end).
    let f = engine(&TinyModel::hello(), 1024);
    req.tools = vec![weather_tool(json!({"type": "string", "maxLength": 16}))];
    let out = run(&f.engine, req).await;
    if out.calls().is_empty() {
        let value: Value =
            serde_json::from_str(&out.text()).unwrap_or_else(|e| panic!("{e}: {out:?}"));
        assert!(valid(&city_schema(), &value), "{}", out.text());
    } else {
        assert_eq!(out.reason, Some(FinishReason::ToolCalls));
        assert_eq!(out.text(), "");
    }
}

/// A Qwen3-like template: `enable_thinking=false` closes an empty think block.
const QWEN3_LIKE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}";

/// A DeepSeek-R1-like template: the generation prompt opens the think block.
const R1_LIKE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}";

#[tokio::test]
async fn a_thinking_models_think_block_is_reasoning() {
    let model = TinyModel::scripted(&[
        "<think>",
        "\nPon",
        "dering.",
        "\n</think>",
        " Hi",
        " there",
        "!",
    ])
    .with_template(QWEN3_LIKE);
    let f = engine(&model, 512);
    let mut req = request("Hi");
    req.reasoning = true;
    let out = run(&f.engine, req.clone()).await;
    out.assert_reasoning_first();
    assert_eq!(out.reasoning(), "Pondering.");
    assert_eq!(out.text(), "Hi there!");
    assert_eq!(out.reason, Some(FinishReason::Stop));
    // svc: no reasoning, ever (the block is dropped).
    req.reasoning = false;
    let out = run(&f.engine, req).await;
    assert_eq!(out.reasoning(), "");
    assert_eq!(out.text(), "Hi there!");
}

#[tokio::test]
async fn a_think_block_opened_by_the_template_is_reasoning() {
    let model = TinyModel::scripted(&["Pon", "dering.", "\n</think>", " Hi", " there", "!"])
        .with_template(R1_LIKE);
    let f = engine(&model, 512);
    let mut req = request("Hi");
    req.reasoning = true;
    let out = run(&f.engine, req.clone()).await;
    assert_eq!(out.reasoning(), "Pondering.");
    assert_eq!(out.text(), "Hi there!");
    req.reasoning = false;
    let out = run(&f.engine, req).await;
    assert_eq!(out.reasoning(), "");
    assert_eq!(out.text(), "Hi there!");
}

#[tokio::test]
async fn a_thinking_model_thinks_before_a_grammar_constrained_answer() {
    let model = TinyModel::scripted(&["Pon", "dering.", "\n</think>", " Hi", " there", "!"])
        .with_template(R1_LIKE);
    let f = engine(&model, 1024);
    let mut req = request("Weather?");
    req.reasoning = true;
    req.output = OutputFormat::JsonSchema {
        name: "weather".into(),
        schema: city_schema(),
    };
    let before = f.engine.stats();
    let out = run(&f.engine, req).await;
    let after = f.engine.stats();
    out.assert_reasoning_first();
    assert_eq!(out.reasoning(), "Pondering.");
    let value: Value = serde_json::from_str(&out.text()).unwrap();
    assert!(valid(&city_schema(), &value), "{}", out.text());
    // Two passes: usage covers both; the answer pass reused the cells of
    // the reasoning pass's prompt, which it starts with.
    let reused = after.reused_prompt_tokens - before.reused_prompt_tokens;
    assert!(reused > 0, "{after:?}");
    assert_eq!(
        out.usage.prompt_tokens,
        after.prompt_tokens - before.prompt_tokens + reused
    );
    assert_eq!(
        out.usage.completion_tokens,
        after.generated_tokens - before.generated_tokens
    );
}

#[tokio::test]
async fn without_a_thinking_template_reasoning_is_a_pass_of_its_own() {
    assert!(!TINY_TEMPLATE.contains("think"));
    let f = engine(&TinyModel::hello(), 1024);
    let mut req = request("Hi");
    req.reasoning = true;
    let before = f.engine.stats();
    let out = run(&f.engine, req.clone()).await;
    let after = f.engine.stats();
    out.assert_reasoning_first();
    // The reasoning pass starts the model off with "Let me think step by
    // step."; the tiny model's "." is followed by its end of turn.
    assert_eq!(out.reasoning(), "Let me think step by step.");
    assert_eq!(out.text(), HELLO);
    assert_eq!(out.reason, Some(FinishReason::Stop));
    // Both passes' prompts and generated tokens are counted; the answer
    // pass reused the cells of the prompt it shares with the reasoning pass.
    let reused = after.reused_prompt_tokens - before.reused_prompt_tokens;
    assert!(reused > 0, "{after:?}");
    assert_eq!(
        out.usage.prompt_tokens,
        after.prompt_tokens - before.prompt_tokens + reused
    );
    assert_eq!(out.usage.completion_tokens, 1 + 13);
    assert_eq!(
        out.usage.completion_tokens,
        after.generated_tokens - before.generated_tokens
    );
    // svc does not reason.
    req.reasoning = false;
    let out = run(&f.engine, req).await;
    assert_eq!(out.reasoning(), "");
    assert_eq!(out.text(), HELLO);
    assert_eq!(out.usage.completion_tokens, 13);
}

#[tokio::test]
async fn reasoning_tokens_count_against_max_tokens() {
    // The looping model never ends its turn: both passes run to their caps.
    let f = engine(&TinyModel::looping(), 1024);
    let mut req = request("Go");
    req.reasoning = true;
    req.max_tokens = Some(40);
    let out = run(&f.engine, req).await;
    out.assert_reasoning_first();
    assert!(out.reasoning().starts_with("Let me think step by step."));
    assert!(out.text().starts_with("Hello"), "{}", out.text());
    assert_eq!(out.reason, Some(FinishReason::Length));
    assert_eq!(out.usage.completion_tokens, 40);
}

#[tokio::test]
async fn dropping_the_stream_cancels_either_pass() {
    let f = engine(&TinyModel::looping(), 4096);
    let mut req = request("Go on");
    req.reasoning = true;
    req.max_tokens = None;

    // During the reasoning pass.
    let mut stream = f.engine.generate(req.clone()).await.unwrap();
    for _ in 0..3 {
        assert!(matches!(
            stream.next().await,
            Some(Ok(EngineEvent::Reasoning(_)))
        ));
    }
    drop(stream);
    wait_idle(&f.engine, 1).await;

    // During the answer pass.
    let mut stream = f.engine.generate(req).await.unwrap();
    loop {
        match stream.next().await {
            Some(Ok(EngineEvent::Reasoning(_))) => {}
            Some(Ok(EngineEvent::Text(_))) => break,
            other => panic!("{other:?}"),
        }
    }
    drop(stream);
    wait_idle(&f.engine, 2).await;
    let stats = f.engine.stats();
    // 2 reasoning passes of at most 256 tokens, and a few answer tokens.
    assert!(stats.generated_tokens < 2 * 256 + 100, "{stats:?}");
}

async fn wait_idle(engine: &LlamaEngine, cancelled: u64) {
    for _ in 0..200 {
        let stats = engine.stats();
        if stats.cancelled == cancelled && stats.active_sequences == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not cancelled: {:?}", engine.stats());
}

/// A model that calls get_weather for Paris, its arguments over several tokens.
fn slow_calling_model() -> TinyModel {
    TinyModel::scripted(&[
        "<tool_call>\n",
        "{\"name\": \"get_weather\", ",
        "\"arguments\": {",
        "\"city\": ",
        "\"Par",
        "is\"",
        "}}",
        "\n</tool_call>",
    ])
}

#[tokio::test]
async fn tool_call_arguments_stream_as_they_decode() {
    let f = engine(&slow_calling_model(), 1024);
    let mut req = request("Weather in Paris?");
    req.tools = vec![weather_tool(json!({"type": "string"}))];
    let out = run(&f.engine, req).await;
    assert_eq!(out.reason, Some(FinishReason::ToolCalls));
    let calls = out.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].1, "get_weather");
    assert_eq!(calls[0].2, "{\"city\": \"Paris\"}");
    // The first chunk names the call; the arguments follow in pieces, as
    // the tokens that make them decode (not whole once the call closes).
    let chunks: Vec<&ToolCallChunk> = out
        .events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::ToolCall(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(chunks[0].arguments, "", "{chunks:?}");
    assert!(chunks[0].id.is_some() && chunks[0].name.is_some());
    assert!(chunks.len() >= 4, "{chunks:?}");
    assert!(chunks.iter().all(|c| c.index == 0));
}

#[tokio::test]
async fn a_tool_call_cut_by_max_tokens_is_returned_with_length() {
    let f = engine(&slow_calling_model(), 1024);
    let mut req = request("Weather in Paris?");
    req.tools = vec![weather_tool(json!({"type": "string"}))];
    req.max_tokens = Some(5);
    let out = run(&f.engine, req.clone()).await;
    assert_eq!(out.reason, Some(FinishReason::Length));
    let calls = out.calls();
    assert_eq!(calls.len(), 1, "{:?}", out.events);
    assert_eq!(calls[0].1, "get_weather");
    assert_eq!(calls[0].2, "{\"city\": \"Par");
    assert_eq!(out.text(), "");

    // Cut right after the function's name: the call, with no arguments yet.
    req.max_tokens = Some(2);
    let out = run(&f.engine, req).await;
    assert_eq!(out.reason, Some(FinishReason::Length));
    let calls = out.calls();
    assert_eq!(calls.len(), 1, "{:?}", out.events);
    assert_eq!(
        (calls[0].1.as_str(), calls[0].2.as_str()),
        ("get_weather", "")
    );
}

/// The log probabilities of a stream, each event's tokens with the text that follows.
fn logprob_tokens(out: &Outcome) -> Vec<TokenLogprob> {
    let mut tokens = Vec::new();
    for (i, e) in out.events.iter().enumerate() {
        if let EngineEvent::Logprobs(more) = e {
            assert!(
                matches!(out.events.get(i + 1), Some(EngineEvent::Text(_))),
                "log probabilities come right before text: {:?}",
                out.events
            );
            tokens.extend(more.iter().cloned());
        }
    }
    tokens
}

#[tokio::test]
async fn logprobs_come_with_their_text() {
    let f = engine(&TinyModel::hello(), 512);
    let mut req = request("Hi");
    req.logprobs = Some(3);
    let out = run(&f.engine, req.clone()).await;
    assert_eq!(out.text(), HELLO);
    let tokens = logprob_tokens(&out);
    // One entry per generated token of the text (the end of turn is none).
    assert_eq!(tokens.len(), 12, "{tokens:?}");
    assert_eq!(tokens.len() as u64 + 1, out.usage.completion_tokens);
    let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.bytes.clone()).collect();
    assert_eq!(bytes, HELLO.as_bytes());
    assert_eq!(tokens[0].token, "Hel");
    // Half a character: its bytes, and the text lossily.
    assert_eq!(tokens[6].bytes, b" \xC3");
    for t in &tokens {
        assert!(t.logprob <= 0.0 && t.logprob.is_finite(), "{t:?}");
        assert_eq!(t.top.len(), 3);
        assert!(t.top.windows(2).all(|w| w[0].logprob >= w[1].logprob));
        // Greedy draws the model's most likely token.
        assert_eq!(t.top[0].bytes, t.bytes);
        assert!((t.top[0].logprob - t.logprob).abs() < 1e-6);
    }
    // The scripted successor is far more likely than anything else.
    assert!(tokens[0].logprob > -0.5, "{:?}", tokens[0]);

    // Without top_logprobs: no alternatives. Without logprobs: no events.
    req.logprobs = Some(0);
    let out = run(&f.engine, req.clone()).await;
    assert!(logprob_tokens(&out).iter().all(|t| t.top.is_empty()));
    req.logprobs = None;
    let out = run(&f.engine, req.clone()).await;
    assert!(logprob_tokens(&out).is_empty());

    // The tokens of a stop sequence are not reported.
    req.logprobs = Some(0);
    req.stop = vec!["world".into()];
    let out = run(&f.engine, req).await;
    assert_eq!(out.text(), "Hello, ");
    let texts: Vec<String> = logprob_tokens(&out).into_iter().map(|t| t.token).collect();
    assert_eq!(texts, ["Hel", "lo", ",", " wor"]);
}

/// The replies of an `n > 1` stream: (text, finish reason, usage) by choice.
async fn collect_n(mut stream: EventStream, n: usize) -> Vec<(String, FinishReason, TokenUsage)> {
    let mut out: Vec<(String, Option<FinishReason>, TokenUsage)> = (0..n)
        .map(|_| (String::new(), None, TokenUsage::default()))
        .collect();
    let mut current = 0;
    let next = async {
        while let Some(event) = stream.next().await {
            match event.unwrap() {
                EngineEvent::Choice(i) => current = i as usize,
                EngineEvent::Text(t) => {
                    assert!(out[current].1.is_none(), "text after the finish");
                    out[current].0.push_str(&t);
                }
                EngineEvent::Finish { reason, usage } => {
                    assert!(out[current].1.replace(reason).is_none(), "two finishes");
                    out[current].2 = usage;
                }
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(120), next)
        .await
        .expect("generation timed out");
    out.into_iter()
        .map(|(text, reason, usage)| (text, reason.expect("every choice finishes"), usage))
        .collect()
}

#[tokio::test]
async fn n_replies_with_seeds_of_their_own() {
    let f = engine(&TinyModel::looping(), 256);
    let mut req = request("Tell me something");
    req.max_tokens = Some(30);
    req.sampling = Sampling {
        temperature: 1.0,
        seed: Some(41),
        ..Sampling::default()
    };
    let alone = |seed: u64| {
        let mut one = req.clone();
        one.sampling.seed = Some(seed);
        run(&f.engine, one)
    };
    let (first, second) = (alone(41).await, alone(42).await);

    req.n = 2;
    let before = f.engine.stats();
    let replies = collect_n(f.engine.generate(req.clone()).await.unwrap(), 2).await;
    // The prompt was decoded once (all but its last token reused from the
    // requests before); the second choice started from a copy.
    let after = f.engine.stats();
    assert_eq!(after.shared_prompts - before.shared_prompts, 1);
    assert_eq!(after.prompt_tokens - before.prompt_tokens, 1);
    assert_eq!(
        after.reused_prompt_tokens - before.reused_prompt_tokens,
        first.usage.prompt_tokens - 1
    );
    // Choice i is seeded with seed + i: the same replies as alone.
    assert_eq!(replies[0].0, first.text());
    assert_eq!(replies[1].0, second.text());
    assert_ne!(replies[0].0, replies[1].0);
    for (reply, alone) in replies.iter().zip([&first, &second]) {
        assert_eq!(Some(reply.1), alone.reason);
        assert_eq!(reply.2.completion_tokens, alone.usage.completion_tokens);
    }
    // The prompt counts once, in reply 0.
    assert_eq!(replies[0].2.prompt_tokens, first.usage.prompt_tokens);
    assert_eq!(replies[1].2.prompt_tokens, 0);

    // More replies than the engine decodes in parallel (2): refused.
    req.n = 3;
    let err = f.engine.generate(req).await.err();
    assert!(
        matches!(&err, Some(EngineError::InvalidRequest { param: Some(p), .. }) if p == "n"),
        "{err:?}"
    );
}

#[tokio::test]
async fn each_choice_gets_its_own_logprobs() {
    let f = engine(&TinyModel::hello(), 512);
    let mut req = request("Hi");
    req.n = 2;
    req.logprobs = Some(1);
    let mut stream = f.engine.generate(req).await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event.unwrap());
    }
    let mut current = 0;
    let mut text = [String::new(), String::new()];
    let mut tokens = [Vec::new(), Vec::new()];
    for (i, event) in events.iter().enumerate() {
        match event {
            EngineEvent::Choice(c) => current = *c as usize,
            EngineEvent::Text(t) => text[current].push_str(t),
            EngineEvent::Logprobs(more) => {
                // Right before the text of the same choice.
                assert!(
                    matches!(events.get(i + 1), Some(EngineEvent::Text(_))),
                    "{events:?}"
                );
                tokens[current].extend(more.iter().flat_map(|t| t.bytes.clone()));
            }
            _ => {}
        }
    }
    for c in 0..2 {
        assert_eq!(text[c], HELLO);
        assert_eq!(tokens[c], HELLO.as_bytes(), "choice {c}");
    }
}
