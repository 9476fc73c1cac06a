//! Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`)
//! on the scripted engine: the whole reply, the byte-level event stream as
//! Anthropic's reference gives it, tool use, stop reasons, both ways of
//! sending the key, and every error in Anthropic's shape.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use svc_core::{Engine, EngineError, EventStream, GenerateRequest, KeyLimits};
use svc_server::{ModelRegistry, ModelRoute, ServerConfig};
use svc_test_support::{Database, Probe, TestApp};

/// A minimal Messages request for `model` saying `text`.
fn message(model: &str, text: &str) -> Value {
    json!({"model": model, "max_tokens": 256, "messages": [{"role": "user", "content": text}]})
}

async fn post(app: &TestApp, path: &str, key: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url(path))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn create(app: &TestApp, key: &str, body: &Value) -> reqwest::Response {
    post(app, "/v1/messages", key, body).await
}

/// Asserts Anthropic's error shape with this status and type; returns the message.
async fn expect_error(response: reqwest::Response, status: u16, kind: &str) -> String {
    assert_eq!(response.status().as_u16(), status, "status");
    assert_eq!(response.headers()["content-type"], "application/json");
    let request_id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], kind, "{body}");
    assert_eq!(body["request_id"], request_id.as_str(), "{body}");
    assert_eq!(body.as_object().unwrap().len(), 3, "{body}");
    assert_eq!(body["error"].as_object().unwrap().len(), 2, "{body}");
    body["error"]["message"].as_str().unwrap().to_owned()
}

/// One `event: <name>\ndata: <json>\n\n` frame.
#[derive(Debug)]
struct Event {
    name: String,
    data: Value,
}

/// Splits a whole stream into frames, failing on anything else.
fn events(raw: &str) -> Vec<Event> {
    assert!(raw.ends_with("\n\n"), "{raw:?}");
    raw[..raw.len() - 2]
        .split("\n\n")
        .map(|frame| {
            let (event, data) = frame.split_once('\n').unwrap();
            let name = event.strip_prefix("event: ").unwrap().to_owned();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(data["type"], name.as_str(), "the name is the type");
            Event { name, data }
        })
        .collect()
}

async fn stream(app: &TestApp, key: &str, mut body: Value) -> Vec<Event> {
    body["stream"] = json!(true);
    let response = create(app, key, &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    events(&response.text().await.unwrap())
}

fn names(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.name.as_str()).collect()
}

#[tokio::test]
async fn a_whole_reply_is_a_message() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let response = create(&app, &key, &message("svc", "hello world")).await;
    assert_eq!(response.status(), 200);
    let reply: Value = response.json().await.unwrap();
    let id = reply["id"].as_str().unwrap();
    assert!(id.starts_with("msg_"), "{id}");
    assert_eq!(
        reply,
        json!({
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": "svc",
            "content": [{"type": "text", "text": "You said: hello world"}],
            "stop_reason": "end_turn",
            "stop_sequence": null,
            "usage": {"input_tokens": 3, "output_tokens": 4,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        })
    );
}

#[tokio::test]
async fn the_stream_is_anthropics_event_sequence() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let all = stream(&app, &key, message("svc", "hello world")).await;
    assert_eq!(
        names(&all),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let start = &all[0].data["message"];
    assert!(start["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(start["content"], json!([]));
    assert_eq!(start["stop_reason"], Value::Null);
    assert_eq!(start["role"], "assistant");
    assert_eq!(
        all[1].data,
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    );
    assert_eq!(all[2].data, json!({"type": "ping"}));
    let text: String = all[3..7]
        .iter()
        .map(|e| {
            assert_eq!(e.data["index"], 0);
            assert_eq!(e.data["delta"]["type"], "text_delta");
            e.data["delta"]["text"].as_str().unwrap()
        })
        .collect();
    assert_eq!(text, "You said: hello world");
    assert_eq!(
        all[7].data,
        json!({"type": "content_block_stop", "index": 0})
    );
    assert_eq!(
        all[8].data,
        json!({"type": "message_delta",
               "delta": {"stop_reason": "end_turn", "stop_sequence": null},
               "usage": {"input_tokens": 3, "output_tokens": 4,
                         "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}})
    );
    assert_eq!(all[9].data, json!({"type": "message_stop"}));
}

#[tokio::test]
async fn thinking_comes_first_as_a_signed_thinking_block() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let mut body = message("svc-thinking", "hi");
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 100});
    let all = stream(&app, &key, body.clone()).await;
    assert_eq!(
        names(&all)[..7],
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop"
        ]
    );
    assert_eq!(
        all[1].data["content_block"],
        json!({"type": "thinking", "thinking": "", "signature": ""})
    );
    assert_eq!(all[3].data["delta"]["type"], "thinking_delta");
    assert_eq!(all[5].data["delta"]["type"], "signature_delta");
    assert_eq!(all[7].data["index"], 1, "the text block is the second");
    assert_eq!(all[7].data["content_block"]["type"], "text");

    let reply: Value = create(&app, &key, &body).await.json().await.unwrap();
    assert_eq!(
        reply["content"][0],
        json!({"type": "thinking", "thinking": "Thinking it over. Done thinking.", "signature": "svc"})
    );
    assert_eq!(reply["content"][1]["text"], "You said: hi");
    // Disabled, the reasoning is not shown.
    body["thinking"] = json!({"type": "disabled"});
    let reply: Value = create(&app, &key, &body).await.json().await.unwrap();
    assert_eq!(reply["content"].as_array().unwrap().len(), 1, "{reply}");
}

#[tokio::test]
async fn a_forced_tool_is_a_tool_use_block() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let mut body = message("fake-tools", "weather in Paris?");
    body["tools"] = json!([
        {"name": "get_weather", "description": "Weather", "input_schema":
            {"type": "object", "properties": {"city": {"type": "string"}}}},
        {"type": "web_search_20250305", "name": "web_search"}
    ]);
    body["tool_choice"] = json!({"type": "tool", "name": "get_weather"});
    let reply: Value = create(&app, &key, &body).await.json().await.unwrap();
    assert_eq!(reply["stop_reason"], "tool_use", "{reply}");
    let block = &reply["content"][0];
    assert_eq!(block["type"], "tool_use");
    assert!(
        block["id"].as_str().unwrap().starts_with("toolu_"),
        "{block}"
    );
    assert_eq!(block["name"], "get_weather");
    assert_eq!(block["input"], json!({"city": "Paris"}));

    let all = stream(&app, &key, body.clone()).await;
    assert_eq!(
        names(&all),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(all[1].data["content_block"]["type"], "tool_use");
    assert_eq!(all[1].data["content_block"]["input"], json!({}));
    let json: String = all[3..5]
        .iter()
        .map(|e| {
            assert_eq!(e.data["delta"]["type"], "input_json_delta");
            e.data["delta"]["partial_json"].as_str().unwrap()
        })
        .collect();
    assert_eq!(json, r#"{"city":"Paris"}"#);
    assert_eq!(all[6].data["delta"]["stop_reason"], "tool_use");

    // The result goes back as a tool_result block.
    let mut next = body.clone();
    next["model"] = json!("svc");
    next["messages"] = json!([
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": [block]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": block["id"], "content": "sunny"},
            {"type": "text", "text": "and so?"}
        ]}
    ]);
    let reply: Value = create(&app, &key, &next).await.json().await.unwrap();
    assert_eq!(reply["content"][0]["text"], "You said: and so?", "{reply}");
}

#[tokio::test]
async fn max_tokens_and_stop_sequences_say_why_the_reply_ended() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let mut body = message("svc", "one two three four");
    body["max_tokens"] = json!(2);
    let reply: Value = create(&app, &key, &body).await.json().await.unwrap();
    assert_eq!(reply["stop_reason"], "max_tokens");
    assert_eq!(reply["content"][0]["text"], "You said: ");
    assert_eq!(reply["usage"]["output_tokens"], 2);

    let mut body = message("svc", "one two STOP three");
    body["stop_sequences"] = json!(["never", "STOP"]);
    let reply: Value = create(&app, &key, &body).await.json().await.unwrap();
    assert_eq!(reply["stop_reason"], "stop_sequence", "{reply}");
    assert_eq!(reply["stop_sequence"], "STOP");
    assert_eq!(reply["content"][0]["text"], "You said: one two ");
    // The engine sent the four words up to the stop, then was stopped.
    assert_eq!(reply["usage"]["output_tokens"], 5, "{reply}");
    assert!(reply["usage"]["input_tokens"].as_u64().unwrap() > 0);

    let all = stream(&app, &key, body).await;
    let end = &all[all.len() - 2].data;
    assert_eq!(
        end["delta"],
        json!({"stop_reason": "stop_sequence", "stop_sequence": "STOP"})
    );
    // A stop sequence that never appears: the reply ends as usual.
    let mut body = message("svc", "one two");
    body["stop_sequences"] = json!(["two!"]);
    let reply: Value = create(&app, &key, &body).await.json().await.unwrap();
    assert_eq!(reply["stop_reason"], "end_turn");
    assert_eq!(reply["content"][0]["text"], "You said: one two");
}

#[tokio::test]
async fn the_key_is_read_from_x_api_key_or_a_bearer_token() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let bearer = app
        .client
        .post(app.url("/v1/messages?beta=true"))
        .bearer_auth(&key)
        .header("anthropic-beta", "interleaved-thinking-2025-05-14")
        .json(&message("svc", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 200);
    let with_header = post(&app, "/v1/messages?beta=true", &key, &message("svc", "hi")).await;
    assert_eq!(with_header.status(), 200);

    let wrong = post(&app, "/v1/messages", "sk-svc-nope", &message("svc", "hi")).await;
    expect_error(wrong, 401, "authentication_error").await;
    let none = app
        .client
        .post(app.url("/v1/messages"))
        .json(&message("svc", "hi"))
        .send()
        .await
        .unwrap();
    expect_error(none, 401, "authentication_error").await;
    let counted = post(&app, "/v1/messages/count_tokens", "", &message("svc", "hi")).await;
    expect_error(counted, 401, "authentication_error").await;
}

#[tokio::test]
async fn bad_requests_are_invalid_request_errors_naming_the_field() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let mut body = message("svc", "hi");
    body["messages"][0]["content"] = json!([
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
    ]);
    let text = expect_error(
        create(&app, &key, &body).await,
        400,
        "invalid_request_error",
    )
    .await;
    // The embedded model has no vision: the image block is named.
    assert!(text.contains("messages[0].content[0]"), "{text}");
    assert!(text.contains("images"), "{text}");
    body["messages"][0]["content"] = json!([
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}
    ]);
    let text = expect_error(
        create(&app, &key, &body).await,
        400,
        "invalid_request_error",
    )
    .await;
    assert!(text.contains("messages[0].content[0].type"), "{text}");
    assert!(text.contains("document"), "{text}");

    let mut body = message("svc", "hi");
    body["temperature"] = json!(1.5);
    let text = expect_error(
        create(&app, &key, &body).await,
        400,
        "invalid_request_error",
    )
    .await;
    assert!(text.contains("temperature"), "{text}");

    let mut body = message("svc", "hi");
    body.as_object_mut().unwrap().remove("max_tokens");
    let text = expect_error(
        create(&app, &key, &body).await,
        400,
        "invalid_request_error",
    )
    .await;
    assert!(text.contains("max_tokens"), "{text}");

    let not_json = app
        .client
        .post(app.url("/v1/messages"))
        .header("x-api-key", &key)
        .header("content-type", "application/json")
        .body("{nope")
        .send()
        .await
        .unwrap();
    expect_error(not_json, 400, "invalid_request_error").await;

    // Fields Claude Code sends that do not apply are ignored.
    let mut body = message("svc", "hi");
    body["context_management"] = json!({"edits": []});
    body["output_config"] = json!({"effort": "high"});
    body["service_tier"] = json!("auto");
    body["metadata"] = json!({"user_id": "someone"});
    body["system"] =
        json!([{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]);
    body["messages"][0]["content"] =
        json!([{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]);
    assert_eq!(create(&app, &key, &body).await.status(), 200);

    // A prompt longer than the context.
    let text = expect_error(
        create(&app, &key, &message("fake-tiny", "hi")).await,
        400,
        "invalid_request_error",
    )
    .await;
    assert!(text.contains("context length"), "{text}");
}

#[tokio::test]
async fn a_wrong_method_or_path_under_messages_is_in_anthropics_shape() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let get = app
        .client
        .get(app.url("/v1/messages"))
        .header("x-api-key", &key)
        .send()
        .await
        .unwrap();
    assert_eq!(get.headers()["allow"], "POST");
    expect_error(get, 405, "invalid_request_error").await;
    let nowhere = post(&app, "/v1/messages/batches", &key, &message("svc", "hi")).await;
    expect_error(nowhere, 404, "not_found_error").await;
    // Elsewhere errors stay OpenAI's.
    let chat = app
        .client
        .get(app.url("/v1/chat/completions"))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 405);
    let body: Value = chat.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");
}

#[tokio::test]
async fn unknown_models_are_not_found_errors() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let text = expect_error(
        create(&app, &key, &message("claude-sonnet-4-5", "hi")).await,
        404,
        "not_found_error",
    )
    .await;
    assert!(text.contains("claude-sonnet-4-5"), "{text}");
    let counted = post(
        &app,
        "/v1/messages/count_tokens",
        &key,
        &json!({"model": "nope", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    expect_error(counted, 404, "not_found_error").await;
}

#[tokio::test]
async fn a_body_over_the_limit_is_an_invalid_request_error() {
    let config = ServerConfig {
        max_body_bytes: 1024,
        ..ServerConfig::default()
    };
    let app = TestApp::spawn_with(Database::Sqlite, config).await;
    let key = app.create_key().await;
    let big = message("svc", &"x".repeat(4096));
    expect_error(create(&app, &key, &big).await, 413, "invalid_request_error").await;
}

#[tokio::test]
async fn over_the_rate_limit_is_a_rate_limit_error() {
    let ms = chrono::Utc::now().timestamp_millis().rem_euclid(60_000);
    if ms > 50_000 {
        tokio::time::sleep(std::time::Duration::from_millis((60_500 - ms) as u64)).await;
    }
    let config = ServerConfig {
        rate_limits: KeyLimits {
            requests_per_minute: Some(1),
            tokens_per_minute: None,
        },
        ..ServerConfig::default()
    };
    let app = TestApp::spawn_with(Database::Sqlite, config).await;
    let key = app.create_key().await;
    assert_eq!(
        create(&app, &key, &message("svc", "hi")).await.status(),
        200
    );
    let refused = create(&app, &key, &message("svc", "hi")).await;
    assert!(refused.headers().contains_key("retry-after"));
    assert_eq!(refused.headers()["x-ratelimit-limit-requests"], "1");
    expect_error(refused, 429, "rate_limit_error").await;
}

/// An engine that refuses every request with one error.
struct Refusing(EngineError);

#[async_trait]
impl svc_core::Generator for Refusing {
    async fn generate(&self, _: GenerateRequest) -> Result<EventStream, EngineError> {
        Err(self.0.clone())
    }

    async fn count_tokens(&self, request: &GenerateRequest) -> Result<u64, EngineError> {
        Ok(svc_core::estimate_tokens(request))
    }

    fn sees_images(&self) -> bool {
        false
    }
}

impl Engine for Refusing {
    svc_core::offers!(generator);

    fn name(&self) -> &str {
        "refusing"
    }
}

#[tokio::test]
async fn engine_failures_keep_their_status_in_anthropics_shape() {
    let refusing = |id: &str, error: EngineError| ModelRoute {
        id: id.into(),
        engine: Arc::new(Refusing(error)),
        reasoning: false,
        created: 0,
        owned_by: "svc".into(),
        default_system_prompt: None,
        fallbacks: svc_server::Fallbacks::default(),
    };
    let probe = Arc::new(Probe::default());
    let models = ModelRegistry::new(vec![
        refusing("busy", EngineError::Overloaded("queue full".into())),
        refusing("down", EngineError::Unavailable("loading".into())),
        refusing("broken", EngineError::Internal("oops".into())),
        refusing("slow", EngineError::GatewayTimeout("upstream".into())),
    ]);
    let app = TestApp::spawn_models(Database::Sqlite, ServerConfig::default(), models, probe).await;
    let key = app.create_key().await;
    for (model, status, kind) in [
        ("busy", 529, "overloaded_error"),
        ("down", 503, "overloaded_error"),
        ("broken", 500, "api_error"),
        ("slow", 504, "timeout_error"),
    ] {
        let response = create(&app, &key, &message(model, "hi")).await;
        let text = expect_error(response, status, kind).await;
        if model == "broken" {
            assert!(!text.contains("oops"), "causes are not shown: {text}");
            assert!(text.contains("req_"), "{text}");
        }
    }
    // Chat completions keep OpenAI's statuses.
    let response = app.chat(&key, &crate::body("busy", "hi")).await;
    assert_eq!(response.status(), 429);
}

#[tokio::test]
async fn an_error_after_the_stream_started_is_an_error_event() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let all = stream(&app, &key, message("fake-fail", "one two three")).await;
    let last = all.last().unwrap();
    assert_eq!(last.name, "error");
    assert_eq!(last.data["error"]["type"], "api_error");
    assert!(
        last.data["request_id"]
            .as_str()
            .unwrap()
            .starts_with("req_")
    );
    assert_eq!(names(&all)[0], "message_start");
}

#[tokio::test]
async fn count_tokens_counts_through_the_engine() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let body = json!({
        "model": "svc",
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "hello world"}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}]
    });
    let response = post(&app, "/v1/messages/count_tokens", &key, &body).await;
    assert_eq!(response.status(), 200);
    let counted: Value = response.json().await.unwrap();
    // As the fake engine counts its prompts: a token a word and one a
    // message ("Be brief." and "hello world").
    assert_eq!(counted, json!({"input_tokens": 3 + 3}));
    // Nothing was generated.
    assert_eq!(
        app.probe.started.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

/// Attack (issue 29, finding 6): counting tokens cost nothing, so a key
/// whose budget was spent went on counting 1 MiB prompts, many at once,
/// and held up other clients. Now a spent budget refuses it as it refuses
/// generation, and a key has one count in flight at a time (another key's
/// count still goes through).
#[tokio::test]
async fn count_tokens_stops_on_a_spent_budget_and_runs_one_at_a_time_per_key() {
    let app = TestApp::spawn().await;
    let budgeted = app
        .create_scoped_key(
            None,
            svc_core::KeyScope {
                budget: Some(svc_core::Budget {
                    limit: 5,
                    unit: svc_core::BudgetUnit::Tokens,
                    period: svc_core::BudgetPeriod::Day,
                }),
                ..svc_core::KeyScope::default()
            },
        )
        .await;
    let count = json!({"model": "svc", "messages": [{"role": "user", "content": "one two"}]});
    let counted = post(&app, "/v1/messages/count_tokens", &budgeted, &count).await;
    assert_eq!(counted.status(), 200);
    // A reply spends the five tokens, and more.
    assert_eq!(
        create(&app, &budgeted, &message("svc", "one two"))
            .await
            .status(),
        200
    );
    let mut refused = None;
    for _ in 0..50 {
        let response = post(&app, "/v1/messages/count_tokens", &budgeted, &count).await;
        if response.status() == 429 {
            refused = Some(response);
            break;
        }
        // The reply's usage settles just after it is answered.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let message = expect_error(
        refused.expect("refused once spent"),
        429,
        "rate_limit_error",
    )
    .await;
    assert!(message.contains("token budget"), "{message}");

    // Four counts of one key at once (each takes 500 ms on fake-slow):
    // one is counted, the others are refused at once; another key's
    // count, sent meanwhile, waits its turn and is counted.
    let (key, other) = (app.create_key().await, app.create_key().await);
    let slow = json!({"model": "fake-slow", "messages": [{"role": "user", "content": "one two"}]});
    let started = std::time::Instant::now();
    let (same, theirs) = tokio::join!(
        futures::future::join_all((0..4).map(|_| post(
            &app,
            "/v1/messages/count_tokens",
            &key,
            &slow
        ))),
        async {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            post(&app, "/v1/messages/count_tokens", &other, &slow).await
        }
    );
    let statuses: Vec<u16> = same.iter().map(|r| r.status().as_u16()).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?} after {:?}",
        started.elapsed()
    );
    assert_eq!(theirs.status(), 200);
    for response in same.into_iter().filter(|r| r.status() == 429) {
        let message = expect_error(response, 429, "rate_limit_error").await;
        assert!(message.contains("count_tokens"), "{message}");
    }
    // Once done, the key counts again.
    assert_eq!(
        post(&app, "/v1/messages/count_tokens", &key, &count)
            .await
            .status(),
        200
    );
}
