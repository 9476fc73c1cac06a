//! Reasoning across the three dialects: chat's `reasoning_effort`,
//! Responses' `reasoning.effort` and Messages' `thinking` reach the engine
//! as one effort (an unknown one is a 400 naming its field), the effort
//! turns a reasoning model's reasoning off but never turns it on, and the
//! reasoning clients send back with earlier assistant turns reaches the
//! engine with that turn.

use serde_json::{Value, json};
use svc_core::{ChatMessage, GenerateRequest, ReasoningEffort};
use svc_test_support::TestApp;

use crate::{body, expect_error};

/// The request the scripted engine got last.
fn last(app: &TestApp) -> GenerateRequest {
    app.probe.last_request().expect("the engine was asked")
}

/// The reasoning of the assistant messages the engine got last, in order.
fn history_reasoning(app: &TestApp) -> Vec<Option<String>> {
    last(app)
        .messages
        .into_iter()
        .filter_map(|m| match m {
            ChatMessage::Assistant { reasoning, .. } => Some(reasoning),
            _ => None,
        })
        .collect()
}

async fn responses(app: &TestApp, key: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url("/v1/responses"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn messages(app: &TestApp, key: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url("/v1/messages"))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn chat_reasoning_effort_reaches_the_engine_and_turns_reasoning_off_not_on() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;

    let mut request = body("svc-thinking", "why");
    request["reasoning_effort"] = json!("high");
    let reply: Value = app.chat(&key, &request).await.json().await.unwrap();
    assert_eq!(
        reply["choices"][0]["message"]["reasoning_content"],
        "Thinking it over. Done thinking."
    );
    let got = last(&app);
    assert_eq!(got.reasoning_effort, Some(ReasoningEffort::High));
    assert!(got.reasoning);

    // `none` (and `minimal`) turn a reasoning model's reasoning off.
    for effort in ["none", "minimal"] {
        request["reasoning_effort"] = json!(effort);
        let reply: Value = app.chat(&key, &request).await.json().await.unwrap();
        let message = &reply["choices"][0]["message"];
        assert!(message.get("reasoning_content").is_none(), "{reply}");
        assert_eq!(message["content"], "You said: why");
        assert!(!last(&app).reasoning);
    }

    // An effort does not make a model id that does not reason think.
    let mut plain = body("svc", "why");
    plain["reasoning_effort"] = json!("high");
    let reply: Value = app.chat(&key, &plain).await.json().await.unwrap();
    assert!(
        reply["choices"][0]["message"]
            .get("reasoning_content")
            .is_none(),
        "{reply}"
    );
    let got = last(&app);
    assert!(!got.reasoning);
    assert_eq!(got.reasoning_effort, Some(ReasoningEffort::High));

    // Not given, the model id decides, and the engine hears no effort.
    app.chat(&key, &body("svc-thinking", "why")).await;
    let got = last(&app);
    assert!(got.reasoning);
    assert_eq!(got.reasoning_effort, None);
}

#[tokio::test]
async fn an_unknown_effort_is_a_400_naming_its_field_in_each_dialect() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;

    let mut chat = body("svc", "hi");
    chat["reasoning_effort"] = json!("extreme");
    let message = expect_error(
        app.chat(&key, &chat).await,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("reasoning_effort"),
    )
    .await;
    assert!(message.contains("\"extreme\""), "{message}");
    chat["reasoning_effort"] = json!(3);
    expect_error(
        app.chat(&key, &chat).await,
        400,
        "invalid_request_error",
        "invalid_json",
        Some("reasoning_effort"),
    )
    .await;

    let response = json!({"model": "svc", "input": "hi", "reasoning": {"effort": "max"}});
    let message = expect_error(
        responses(&app, &key, &response).await,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("reasoning.effort"),
    )
    .await;
    assert!(message.contains("\"max\""), "{message}");

    // Anthropic's shape has no param: the field leads the message.
    for (thinking, names) in [
        (json!({"type": "sometimes"}), "thinking.type"),
        (json!({"type": "enabled"}), "thinking.budget_tokens"),
        (
            json!({"type": "enabled", "budget_tokens": 0}),
            "thinking.budget_tokens",
        ),
        (json!("enabled"), "thinking"),
    ] {
        let request = json!({"model": "svc", "max_tokens": 64, "thinking": thinking,
            "messages": [{"role": "user", "content": "hi"}]});
        let response = messages(&app, &key, &request).await;
        assert_eq!(response.status(), 400, "{thinking}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["type"], "error", "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(names), "{thinking}: {message}");
    }
    assert_eq!(
        app.probe.last_request(),
        None,
        "no refused request reached the engine"
    );
}

#[tokio::test]
async fn responses_reasoning_effort_reaches_the_engine_and_is_returned() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let request = json!({"model": "svc-thinking", "input": "why",
        "reasoning": {"effort": "low", "summary": "auto"}});
    let reply: Value = responses(&app, &key, &request).await.json().await.unwrap();
    assert_eq!(reply["reasoning"]["effort"], "low", "{reply}");
    assert_eq!(reply["output"][0]["type"], "reasoning", "{reply}");
    assert_eq!(last(&app).reasoning_effort, Some(ReasoningEffort::Low));

    let request = json!({"model": "svc-thinking", "input": "why", "reasoning": {"effort": "none"}});
    let reply: Value = responses(&app, &key, &request).await.json().await.unwrap();
    assert_eq!(reply["output"].as_array().unwrap().len(), 1, "{reply}");
    assert_eq!(reply["output"][0]["type"], "message", "{reply}");
    let got = last(&app);
    assert_eq!(got.reasoning_effort, Some(ReasoningEffort::None));
    assert!(!got.reasoning);
}

#[tokio::test]
async fn messages_thinking_maps_to_an_effort_by_its_budget() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    for (thinking, effort, shown) in [
        (
            json!({"type": "enabled", "budget_tokens": 1024}),
            Some(ReasoningEffort::Low),
            true,
        ),
        (
            json!({"type": "enabled", "budget_tokens": 1025}),
            Some(ReasoningEffort::Medium),
            true,
        ),
        (
            json!({"type": "enabled", "budget_tokens": 8192}),
            Some(ReasoningEffort::Medium),
            true,
        ),
        (
            json!({"type": "enabled", "budget_tokens": 8193}),
            Some(ReasoningEffort::High),
            true,
        ),
        (json!({"type": "adaptive"}), None, true),
        (json!(null), None, true),
        (
            json!({"type": "disabled"}),
            Some(ReasoningEffort::None),
            false,
        ),
    ] {
        let request = json!({"model": "svc-thinking", "max_tokens": 16000, "thinking": thinking,
            "messages": [{"role": "user", "content": "hi"}]});
        let response = messages(&app, &key, &request).await;
        assert_eq!(response.status(), 200, "{thinking}");
        let reply: Value = response.json().await.unwrap();
        let got = last(&app);
        assert_eq!(got.reasoning_effort, effort, "{thinking}");
        assert_eq!(got.reasoning, shown, "{thinking}");
        assert_eq!(
            reply["content"][0]["type"] == "thinking",
            shown,
            "{thinking}: {reply}"
        );
    }
}

#[tokio::test]
async fn reasoning_sent_back_with_earlier_turns_reaches_the_engine_from_each_dialect() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;

    // Chat: `reasoning_content`, or vLLM's `reasoning`.
    let chat = json!({"model": "svc", "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "reasoning_content": "Ask the tool.",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "assistant", "content": "Sunny.", "reasoning": "Say it."},
        {"role": "assistant", "content": "Anything else?"},
        {"role": "user", "content": "thanks"}
    ]});
    assert_eq!(app.chat(&key, &chat).await.status(), 200);
    assert_eq!(
        history_reasoning(&app),
        [Some("Ask the tool.".into()), Some("Say it.".into()), None]
    );

    // Responses: a reasoning item is the reasoning of the assistant turn
    // that follows it (its content, else its summary); one before a user
    // message is left out.
    let request = json!({"model": "svc", "input": [
        {"role": "user", "content": "weather?"},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "Ask the tool."}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "reasoning", "id": "rs_2", "encrypted_content": "opaque",
         "summary": [{"type": "summary_text", "text": "Say"}, {"type": "summary_text", "text": "it."}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Sunny."}]},
        {"type": "reasoning", "id": "rs_3", "summary": [],
         "content": [{"type": "reasoning_text", "text": "No turn follows."}]},
        {"role": "user", "content": "thanks"}
    ]});
    let reply: Value = responses(&app, &key, &request).await.json().await.unwrap();
    assert_eq!(reply["status"], "completed", "{reply}");
    assert_eq!(
        history_reasoning(&app),
        [Some("Ask the tool.".into()), Some("Say\n\nit.".into())]
    );
    // Continued by id, the stored conversation carries it too.
    let next = json!({"model": "svc", "input": "more", "previous_response_id": reply["id"]});
    assert_eq!(responses(&app, &key, &next).await.status(), 200);
    assert_eq!(
        history_reasoning(&app),
        [
            Some("Ask the tool.".into()),
            Some("Say\n\nit.".into()),
            None
        ]
    );
    // A reasoning model's own reasoning is carried to the next turn.
    let first = json!({"model": "svc-thinking", "input": "why"});
    let reply: Value = responses(&app, &key, &first).await.json().await.unwrap();
    let next = json!({"model": "svc", "input": "more", "previous_response_id": reply["id"]});
    assert_eq!(responses(&app, &key, &next).await.status(), 200);
    assert_eq!(
        history_reasoning(&app),
        [Some("Thinking it over. Done thinking.".into())]
    );

    // Messages: an assistant turn's thinking blocks; redacted ones are left out.
    let request = json!({"model": "svc", "max_tokens": 64, "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Ask", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "thinking", "thinking": "the tool.", "signature": "sig"},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
        ]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": "thanks"}
    ]});
    assert_eq!(messages(&app, &key, &request).await.status(), 200);
    assert_eq!(
        history_reasoning(&app),
        [Some("Ask\nthe tool.".into()), None]
    );
}
