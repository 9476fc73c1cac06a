//! End to end on the real default model (SmolLM2-135M-Instruct) through the
//! HTTP API of a real `svc serve`. Needs `SVC_TEST_MODEL` (the GGUF, as
//! `svc pull` leaves it; `scripts/test.sh` provides it); without it each
//! test says so and passes. The same for a third-party GGUF served through a
//! `[models.<id>]` table: Gemma 3 270M, `SVC_TEST_THIRD_PARTY_MODEL` (as
//! `svc pull gemma3` leaves it).

// Serves models from GGUF files: needs the embedded engine.
#![cfg(feature = "embedded")]
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::print_stderr,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};
use svc_test_support::ServeProcess;

const SVC: &str = env!("CARGO_BIN_EXE_svc");

/// One server for the whole file: loading the model is the slow part. It
/// lives in a `static`, never dropped: its watchdog kills it and removes its
/// data directory when the test process ends.
struct Server {
    _serve: ServeProcess,
    base_url: String,
    key: String,
}

fn model() -> Option<PathBuf> {
    match std::env::var_os("SVC_TEST_MODEL") {
        Some(path) => Some(PathBuf::from(path)),
        None => {
            eprintln!("SVC_TEST_MODEL is not set: skipping the real-model test");
            None
        }
    }
}

fn server() -> Option<&'static Server> {
    static SERVER: OnceLock<Server> = OnceLock::new();
    let model = model()?;
    Some(SERVER.get_or_init(|| start(&model)))
}

/// A `svc serve` of the default model at `model`, with a key.
fn start(model: &std::path::Path) -> Server {
    // The default model in a data directory of its own, so `svc serve`
    // runs exactly as on a newcomer's first start (minus the download).
    let dir = tempfile::tempdir().unwrap().keep();
    let models = dir.join("models");
    std::fs::create_dir_all(&models).unwrap();
    std::os::unix::fs::symlink(model, models.join("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    // svc-embed's model, pulled once by scripts/test.sh (else svc fetches it).
    if let Some(embed) = std::env::var_os("SVC_TEST_EMBED_MODEL") {
        std::os::unix::fs::symlink(embed, models.join("all-MiniLM-L6-v2.F32.gguf")).unwrap();
    }
    let data_dir = dir.to_str().unwrap().to_owned();
    let serve = ServeProcess::start_removing(
        SVC,
        &[
            "--bind",
            "127.0.0.1:0",
            "--data-dir",
            &data_dir,
            "--parallel",
            "4",
            "--context",
            "2048",
        ],
        &[],
        Duration::from_secs(120),
        Some(&dir),
    );
    let out = Command::new(SVC)
        .args(["keys", "create", "--name", "e2e", "--data-dir", &data_dir])
        .output()
        .unwrap();
    assert!(out.status.success());
    let key = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    Server {
        base_url: serve.base_url.clone(),
        _serve: serve,
        key,
    }
}

async fn chat(server: &Server, body: Value) -> Value {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.base_url))
        .bearer_auth(&server.key)
        .json(&body)
        .timeout(Duration::from_secs(300))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test]
async fn knows_the_capital_of_france() {
    let Some(server) = server() else { return };
    let reply = chat(
        server,
        json!({"model": "svc", "temperature": 0,
               "messages": [{"role": "user", "content": "What is the capital of France?"}]}),
    )
    .await;
    let content = reply["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.contains("Paris"), "{content}");
    assert!(
        reply["choices"][0]["message"]
            .get("reasoning_content")
            .is_none()
    );
    assert!(reply["usage"]["prompt_tokens"].as_u64().unwrap() > 5);
}

#[tokio::test]
async fn thinking_model_reasons_then_answers() {
    let Some(server) = server() else { return };
    let reply = chat(
        server,
        json!({"model": "svc-thinking", "temperature": 0, "max_tokens": 200,
               "messages": [{"role": "user", "content": "What is 12 plus 30?"}]}),
    )
    .await;
    let message = &reply["choices"][0]["message"];
    let reasoning = message["reasoning_content"].as_str().unwrap_or_default();
    let content = message["content"].as_str().unwrap_or_default();
    assert!(!reasoning.trim().is_empty(), "no reasoning: {reply}");
    assert!(!content.trim().is_empty(), "no answer: {reply}");
}

#[tokio::test]
async fn forced_tool_call_has_schema_valid_arguments() {
    let Some(server) = server() else { return };
    let parameters = json!({"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]});
    let reply = chat(
        server,
        json!({"model": "svc", "temperature": 0,
               "messages": [{"role": "user", "content": "What's the weather in Paris?"}],
               "tools": [{"type": "function", "function": {"name": "get_weather",
                          "description": "Current weather of a city", "parameters": parameters}}],
               "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
    )
    .await;
    let choice = &reply["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{reply}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(call["function"]["name"], "get_weather");
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    let validator = jsonschema::validator_for(&parameters).unwrap();
    assert!(validator.is_valid(&arguments), "{arguments}");
}

#[tokio::test]
async fn json_schema_output_parses_and_validates() {
    let Some(server) = server() else { return };
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name", "age"], "additionalProperties": false});
    let reply = chat(
        server,
        json!({"model": "svc", "temperature": 0, "max_tokens": 200,
               "messages": [{"role": "user", "content": "Invent a person and give their name and age."}],
               "response_format": {"type": "json_schema",
                                   "json_schema": {"name": "person", "schema": schema, "strict": true}}}),
    )
    .await;
    let content = reply["choices"][0]["message"]["content"].as_str().unwrap();
    let value: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{content:?}: {e}"));
    assert!(
        jsonschema::validator_for(&schema).unwrap().is_valid(&value),
        "{value}"
    );
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
}

/// `POST /v1/responses` on `server`; the reply's body.
async fn respond(server: &Server, body: Value) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/responses", server.base_url))
        .bearer_auth(&server.key)
        .json(&body)
        .timeout(Duration::from_secs(300))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The text of a response's message items.
fn output_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "message")
        .flat_map(|item| item["content"].as_array().unwrap())
        .map(|part| part["text"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn the_responses_api_knows_the_capital_of_france() {
    let Some(server) = server() else { return };
    let (status, body) = respond(
        server,
        json!({"model": "svc", "temperature": 0, "store": false,
               "input": "What is the capital of France?"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let reply: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(reply["status"], "completed", "{reply}");
    assert!(output_text(&reply).contains("Paris"), "{reply}");
    assert!(
        reply["usage"]["input_tokens"].as_u64().unwrap() > 5,
        "{reply}"
    );

    // Streamed, the deltas make the same text as the final response.
    let (status, body) = respond(
        server,
        json!({"model": "svc", "temperature": 0, "stream": true,
               "input": "What is the capital of France?"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let events: Vec<Value> = body
        .split("\n\n")
        .filter_map(|frame| frame.split_once("\ndata: "))
        .map(|(_, data)| serde_json::from_str(data).unwrap())
        .collect();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed", "{body}");
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, output_text(&last["response"]));
    assert!(deltas.contains("Paris"), "{deltas}");
}

#[tokio::test]
async fn the_responses_api_json_schema_output_parses_and_validates() {
    let Some(server) = server() else { return };
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name", "age"], "additionalProperties": false});
    let (status, body) = respond(
        server,
        json!({"model": "svc", "temperature": 0, "max_output_tokens": 200, "store": false,
               "input": "Invent a person and give their name and age.",
               "text": {"format": {"type": "json_schema", "name": "person",
                                   "schema": schema, "strict": true}}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let reply: Value = serde_json::from_str(&body).unwrap();
    let text = output_text(&reply);
    let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert!(
        jsonschema::validator_for(&schema).unwrap().is_valid(&value),
        "{value}"
    );
    assert_eq!(reply["status"], "completed");
}

/// Anthropic's Messages API on the real model: a real answer, and
/// `count_tokens` counting exactly the prompt the answer's usage reports.
#[tokio::test]
async fn answers_through_the_messages_api_and_counts_its_prompt_exactly() {
    let Some(server) = server() else { return };
    let client = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        client
            .post(format!("{}{path}", server.base_url))
            .header("x-api-key", &server.key)
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .timeout(Duration::from_secs(300))
            .send()
    };
    let messages = json!([{"role": "user", "content": "What is the capital of France?"}]);
    let reply: Value = post(
        "/v1/messages",
        json!({"model": "svc", "max_tokens": 64, "temperature": 0, "messages": messages}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let text = reply["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("Paris"), "{reply}");
    assert_eq!(reply["type"], "message");
    assert!(["end_turn", "max_tokens"].contains(&reply["stop_reason"].as_str().unwrap()));
    let counted: Value = post(
        "/v1/messages/count_tokens",
        json!({"model": "svc", "messages": messages}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    // As Anthropic counts: the prompt is its computed and its cached tokens
    // (another test may have left this prompt's prefix in a slot).
    let usage = &reply["usage"];
    assert_eq!(
        counted["input_tokens"].as_u64().unwrap(),
        usage["input_tokens"].as_u64().unwrap()
            + usage["cache_read_input_tokens"].as_u64().unwrap(),
        "{counted} {reply}"
    );
}

// Issue 33: a newcomer's first start printed llama.cpp's warnings about
// settings svc chose (`n_ctx_seq (32768) > n_ctx_train (8192)`, and the
// embedder's `n_ctx is not divisible by n_seq_max`).
#[test]
fn the_first_start_on_the_defaults_warns_about_nothing() {
    let Some(model) = model() else { return };
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    std::os::unix::fs::symlink(&model, models.join("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    if let Some(embed) = std::env::var_os("SVC_TEST_EMBED_MODEL") {
        std::os::unix::fs::symlink(embed, models.join("all-MiniLM-L6-v2.F32.gguf")).unwrap();
    }
    let data_dir = dir.path().to_str().unwrap();
    let serve = ServeProcess::start(
        SVC,
        &["--bind", "127.0.0.1:0", "--data-dir", data_dir],
        &[],
        Duration::from_secs(120),
    );
    let warnings: Vec<String> = serve
        .log()
        .into_iter()
        .filter(|line| line.contains("WARN") || line.contains("ERROR"))
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
}

/// `svc_engine_prompt_tokens_total` of model `svc` from `/metrics`: (evaluated, reused).
async fn prompt_token_counts(server: &Server) -> (u64, u64) {
    let text = reqwest::get(format!("{}/metrics", server.base_url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let count = |source: &str| {
        let series =
            format!("svc_engine_prompt_tokens_total{{model=\"svc\",source=\"{source}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&series))
            .unwrap_or_else(|| panic!("no {series} in {text}"))
            .parse::<u64>()
            .unwrap()
    };
    (count("evaluated"), count("reused"))
}

#[tokio::test]
async fn a_conversation_continued_by_id_resumes_from_its_cached_prefix() {
    let Some(model) = model() else { return };
    // A server of its own: the other tests' requests would move its counters.
    let server = start(&model);
    let instructions = "You are a geography tutor. Answer in one short sentence. ".repeat(4);
    let (status, body) = respond(
        &server,
        json!({"model": "svc", "temperature": 0, "instructions": instructions,
               "input": "What is the capital of France?", "max_output_tokens": 24}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let first: Value = serde_json::from_str(&body).unwrap();
    let first_prompt = first["usage"]["input_tokens"].as_u64().unwrap();

    let before = prompt_token_counts(&server).await;
    let (status, body) = respond(
        &server,
        json!({"model": "svc", "temperature": 0, "instructions": instructions,
               "previous_response_id": first["id"], "input": "And of Italy?",
               "max_output_tokens": 24}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let second: Value = serde_json::from_str(&body).unwrap();
    let second_prompt = second["usage"]["input_tokens"].as_u64().unwrap();
    let after = prompt_token_counts(&server).await;
    let (evaluated, reused) = (after.0 - before.0, after.1 - before.1);
    assert_eq!(evaluated + reused, second_prompt);
    assert!(
        reused >= first_prompt,
        "reused {reused} of the first turn's {first_prompt} prompt tokens (evaluated {evaluated})"
    );
}

#[tokio::test]
async fn svc_embed_puts_paraphrases_closer_than_other_topics() {
    let Some(server) = server() else { return };
    let response = reqwest::Client::new()
        .post(format!("{}/v1/embeddings", server.base_url))
        .bearer_auth(&server.key)
        .json(&json!({"model": "svc-embed", "input": [
            "The cat is sleeping on the mat.",
            "A kitten naps on a rug.",
            "Interest rates rose by half a percent.",
        ]}))
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let vectors: Vec<Vec<f64>> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| serde_json::from_value(d["embedding"].clone()).unwrap())
        .collect();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    assert_eq!(vectors[0].len(), 384);
    assert!(
        (dot(&vectors[0], &vectors[0]) - 1.0).abs() < 1e-4,
        "unit length"
    );
    let (near, far) = (dot(&vectors[0], &vectors[1]), dot(&vectors[0], &vectors[2]));
    assert!(near > far + 0.2, "paraphrase {near}, other topic {far}");
    assert_eq!(body["model"], "svc-embed");
}

fn third_party_model() -> Option<PathBuf> {
    match std::env::var_os("SVC_TEST_THIRD_PARTY_MODEL") {
        Some(path) => Some(PathBuf::from(path)),
        None => {
            eprintln!(
                "SVC_TEST_THIRD_PARTY_MODEL is not set: skipping the third-party model test \
                 (`svc pull gemma3` fetches it)"
            );
            None
        }
    }
}

/// Gemma 3 270M (Q4_K_M, `svc pull gemma3`) served as `[models.gemma]` from
/// a config file: listed, a right answer greedily, the same text streamed,
/// and usage counted. It is Google's pretrained model, not the
/// instruction-tuned one, and its GGUF has no chat template (svc prompts it
/// in Gemma's turn format): asked alone, it repeats the question, and it
/// does not end its turn. So the request gives one example turn and few
/// tokens (measured: "The capital of France is Paris." and one more word).
#[tokio::test]
async fn a_third_party_gguf_serves_through_a_models_table() {
    let Some(model) = third_party_model() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("svc.toml");
    let path = toml::Value::String(model.to_str().unwrap().to_owned());
    std::fs::write(&config, format!("[models.gemma]\npath = {path}\n")).unwrap();
    let data_dir = dir.path().join("data");
    let (config, data_dir) = (config.to_str().unwrap(), data_dir.to_str().unwrap());
    // `--model` on the same file, so that no default model is fetched: the
    // ids of one file share one engine.
    let serve = ServeProcess::start(
        SVC,
        &[
            "--config",
            config,
            "--model",
            model.to_str().unwrap(),
            "--bind",
            "127.0.0.1:0",
            "--data-dir",
            data_dir,
            "--parallel",
            "2",
            "--context",
            "1024",
        ],
        &[],
        Duration::from_secs(120),
    );
    let out = Command::new(SVC)
        .args(["keys", "create", "--name", "e2e", "--data-dir", data_dir])
        .output()
        .unwrap();
    assert!(out.status.success());
    let server = Server {
        base_url: serve.base_url.clone(),
        key: String::from_utf8(out.stdout).unwrap().trim().to_owned(),
        _serve: serve,
    };

    let models: Value = reqwest::Client::new()
        .get(format!("{}/v1/models", server.base_url))
        .bearer_auth(&server.key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"gemma"), "{models}");

    let request = json!({"model": "gemma", "temperature": 0, "max_tokens": 8,
        "messages": [
            {"role": "user", "content": "What is the capital of Japan?"},
            {"role": "assistant", "content": "The capital of Japan is Tokyo."},
            {"role": "user", "content": "What is the capital of France?"}]});
    let reply = chat(&server, request.clone()).await;
    assert_eq!(reply["model"], "gemma", "{reply}");
    let content = reply["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.contains("Paris"), "{reply}");
    let usage = &reply["usage"];
    let (prompt, completion) = (
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["completion_tokens"].as_u64().unwrap(),
    );
    assert!(prompt > 20 && completion > 0, "{reply}");
    assert_eq!(usage["total_tokens"].as_u64().unwrap(), prompt + completion);

    // Streamed, the same text, and the same usage.
    let mut streamed = request;
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let body = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.base_url))
        .bearer_auth(&server.key)
        .json(&streamed)
        .timeout(Duration::from_secs(300))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let chunks: Vec<Value> = body
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, content, "{body}");
    let last = chunks.last().unwrap();
    assert_eq!(last["usage"]["prompt_tokens"], prompt, "{body}");
    assert_eq!(last["usage"]["completion_tokens"], completion, "{body}");
}
