//! `POST /v1/responses` and `GET`/`DELETE /v1/responses/{id}` (OpenAI's
//! Responses API) on the scripted engine: the event stream byte by byte,
//! whole replies, function calls, the token cap, storage and its owners,
//! and errors naming their param.

use std::time::Duration;

use serde_json::{Value, json};
use svc_core::{KeyOrigin, NewKey, ResponseStore};
use svc_server::ServerConfig;
use svc_test_support::{Database, TestApp};

use crate::expect_error;

pub(crate) async fn post(app: &TestApp, key: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url("/v1/responses"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn create(app: &TestApp, key: &str, body: &Value) -> Value {
    let response = post(app, key, body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    response.json().await.unwrap()
}

/// A key of a fresh account `email`.
async fn account_key(app: &TestApp, email: &str) -> String {
    let user = app.create_user(email, "password123", false).await;
    let (key, _) = app
        .keys
        .create(
            NewKey {
                name: "account".into(),
                owner_id: Some(user.id),
                created_via: KeyOrigin::Dashboard,
                expires_in: None,
                scope: Default::default(),
            },
            &svc_core::Actor::Operator,
        )
        .await
        .unwrap();
    key.expose().to_owned()
}

/// One event of a Responses stream: `event: <type>\ndata: <json>\n\n`.
#[derive(Debug)]
struct Event {
    kind: String,
    data: Value,
}

/// Splits a whole stream into events, strictly: every frame is exactly an
/// `event:` line and a `data:` line whose JSON has the same `type`.
fn events(body: &str) -> Vec<Event> {
    assert!(body.ends_with("\n\n"), "{body:?}");
    body[..body.len() - 2]
        .split("\n\n")
        .map(|frame| {
            let (event, data) = frame
                .split_once('\n')
                .unwrap_or_else(|| panic!("frame of one line: {frame:?}"));
            let kind = event.strip_prefix("event: ").unwrap().to_owned();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(data["type"], kind.as_str(), "{frame}");
            Event { kind, data }
        })
        .collect()
}

async fn stream(app: &TestApp, key: &str, body: &Value) -> Vec<Event> {
    let response = post(app, key, body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let events = events(&response.text().await.unwrap());
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event.data["sequence_number"], i, "{:?}", event.data);
    }
    events
}

fn kinds(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

#[tokio::test]
async fn the_stream_is_openai_s_event_sequence() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let events = stream(
        &app,
        &key,
        &json!({"model": "svc", "input": "one two", "stream": true, "store": false}),
    )
    .await;
    assert_eq!(
        kinds(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let created = &events[0].data["response"];
    assert_eq!(created["status"], "in_progress");
    assert_eq!(created["object"], "response");
    assert_eq!(created["output"], json!([]));
    assert_eq!(created["usage"], Value::Null);
    let id = created["id"].as_str().unwrap();
    assert!(id.starts_with("resp_"), "{id}");

    let added = &events[2].data;
    assert_eq!(added["output_index"], 0);
    assert_eq!(added["item"]["type"], "message");
    assert_eq!(added["item"]["status"], "in_progress");
    let item_id = added["item"]["id"].as_str().unwrap();
    assert!(item_id.starts_with("msg_"));
    let part = &events[3].data;
    assert_eq!(
        (
            &part["item_id"],
            &part["output_index"],
            &part["content_index"]
        ),
        (&json!(item_id), &json!(0), &json!(0))
    );
    assert_eq!(
        part["part"],
        json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []})
    );
    let deltas: Vec<&str> = events[4..8]
        .iter()
        .map(|e| {
            assert_eq!(e.data["item_id"], item_id);
            assert_eq!(e.data["content_index"], 0);
            e.data["delta"].as_str().unwrap()
        })
        .collect();
    assert_eq!(deltas, ["You ", "said: ", "one ", "two"]);
    assert_eq!(events[8].data["text"], "You said: one two");
    assert_eq!(events[9].data["part"]["text"], "You said: one two");
    let item = &events[10].data["item"];
    assert_eq!(item["status"], "completed");
    assert_eq!(item["content"][0]["text"], "You said: one two");

    let done = &events[11].data["response"];
    assert_eq!(done["id"], id);
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"], json!([item]));
    // The fake engine counts a token per word, plus one per message.
    assert_eq!(
        done["usage"],
        json!({"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
               "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 7})
    );
}

#[tokio::test]
async fn a_whole_reply_is_one_response_object() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let reply = create(
        &app,
        &key,
        &json!({"model": "svc", "instructions": "Be brief.", "store": false,
                "input": [{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}],
                "temperature": 0.2, "top_p": 0.9, "max_output_tokens": 50,
                "metadata": {"k": "v"}, "user": "u-1", "prompt_cache_key": "p",
                "reasoning": {"effort": "low"}, "include": ["reasoning.encrypted_content"],
                "text": {"format": {"type": "text"}, "verbosity": "low"}, "truncation": "auto"}),
    )
    .await;
    assert_eq!(reply["object"], "response");
    assert_eq!(reply["status"], "completed");
    assert_eq!(reply["model"], "svc");
    assert_eq!(reply["instructions"], "Be brief.");
    assert_eq!(reply["temperature"], 0.2);
    assert_eq!(reply["top_p"], 0.9);
    assert_eq!(reply["max_output_tokens"], 50);
    assert_eq!(reply["metadata"], json!({"k": "v"}));
    assert_eq!(reply["user"], "u-1");
    assert_eq!(reply["store"], false);
    assert_eq!(reply["error"], Value::Null);
    assert_eq!(reply["incomplete_details"], Value::Null);
    assert_eq!(reply["text"], json!({"format": {"type": "text"}}));
    assert_eq!(reply["tool_choice"], "auto");
    let output = reply["output"].as_array().unwrap();
    assert_eq!(output.len(), 1);
    assert_eq!(output[0]["role"], "assistant");
    assert_eq!(output[0]["content"][0]["text"], "You said: hello");
    assert_eq!(reply["usage"]["input_tokens"], 5);
    assert_eq!(reply["usage"]["total_tokens"], 8);
}

#[tokio::test]
async fn reasoning_comes_as_a_reasoning_item_first() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let events = stream(
        &app,
        &key,
        &json!({"model": "svc-thinking", "input": "hm", "stream": true, "store": false}),
    )
    .await;
    assert_eq!(
        kinds(&events)[..10],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.reasoning_text.delta",
            "response.reasoning_text.delta",
            "response.reasoning_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
        ]
    );
    assert_eq!(events[2].data["item"]["type"], "reasoning");
    assert_eq!(
        events[3].data["part"],
        json!({"type": "reasoning_text", "text": ""})
    );
    assert_eq!(events[6].data["text"], "Thinking it over. Done thinking.");
    assert_eq!(events[9].data["output_index"], 1);
    assert_eq!(events[9].data["item"]["type"], "message");
    let done = &events.last().unwrap().data["response"];
    assert_eq!(done["output"][0]["type"], "reasoning");
    assert_eq!(
        done["output"][0]["content"],
        json!([{"type": "reasoning_text", "text": "Thinking it over. Done thinking."}])
    );
    assert_eq!(done["output"][0]["summary"], json!([]));
    assert_eq!(done["output"][1]["content"][0]["text"], "You said: hm");
}

#[tokio::test]
async fn a_function_call_and_its_output_round_trip() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let tools = json!([
        {"type": "web_search"},
        {"type": "function", "name": "get_weather", "strict": true,
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    ]);
    let events = stream(
        &app,
        &key,
        &json!({"model": "fake-tools", "input": "weather?", "tools": tools, "stream": true}),
    )
    .await;
    assert_eq!(
        kinds(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let added = &events[2].data["item"];
    assert_eq!(added["type"], "function_call");
    assert_eq!(added["call_id"], "call_fake0");
    assert_eq!(added["name"], "get_weather");
    assert_eq!(added["arguments"], "");
    assert_eq!(events[3].data["delta"], "{\"city\":");
    assert_eq!(events[5].data["arguments"], "{\"city\":\"Paris\"}");
    assert_eq!(events[5].data["name"], "get_weather");
    let done = &events[7].data["response"];
    assert_eq!(done["tools"], tools, "tools are returned as asked");
    let call = &done["output"][0];
    assert_eq!(call["status"], "completed");
    assert!(call["id"].as_str().unwrap().starts_with("fc_"));

    // The call and its output, as the SDK sends them back.
    let reply = create(
        &app,
        &key,
        &json!({"model": "svc", "tools": tools, "input": [
            {"role": "user", "content": "weather?"},
            call,
            {"type": "function_call_output", "call_id": "call_fake0", "output": "sunny"},
            {"role": "user", "content": "and now?"}
        ]}),
    )
    .await;
    assert_eq!(
        reply["output"][0]["content"][0]["text"],
        "You said: and now?"
    );
    // Prompt: two user messages (2 + 3 tokens), the call (1), the output (2).
    assert_eq!(reply["usage"]["input_tokens"], 8);

    // Continued from the stored call response instead.
    let reply = create(
        &app,
        &key,
        &json!({"model": "svc", "previous_response_id": done["id"], "input": [
            {"type": "function_call_output", "call_id": "call_fake0", "output": "sunny"},
            {"role": "user", "content": "and now?"}
        ]}),
    )
    .await;
    assert_eq!(reply["usage"]["input_tokens"], 8);
    assert_eq!(reply["previous_response_id"], done["id"]);
}

#[tokio::test]
async fn the_token_cap_makes_an_incomplete_response() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let body = json!({"model": "svc", "input": "a b c d", "max_output_tokens": 2});
    let reply = create(&app, &key, &body).await;
    assert_eq!(reply["status"], "incomplete");
    assert_eq!(
        reply["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(reply["output"][0]["status"], "incomplete");
    assert_eq!(reply["output"][0]["content"][0]["text"], "You said: ");
    assert_eq!(reply["usage"]["output_tokens"], 2);

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = stream(&app, &key, &streamed).await;
    let last = events.last().unwrap();
    assert_eq!(last.kind, "response.incomplete");
    assert_eq!(last.data["response"]["status"], "incomplete");
    assert_eq!(
        last.data["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(
        events[events.len() - 2].data["item"]["status"],
        "incomplete"
    );
}

#[tokio::test]
async fn a_failure_mid_stream_is_an_error_event_then_failed() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let events = stream(
        &app,
        &key,
        &json!({"model": "fake-fail", "input": "a b c d", "stream": true}),
    )
    .await;
    let n = events.len();
    assert_eq!(
        kinds(&events)[n - 5..],
        [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "error",
            "response.failed",
        ]
    );
    let error = &events[n - 2].data;
    assert_eq!(error["code"], "internal_error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("request id req_"),
        "{error}"
    );
    let failed = &events[n - 1].data["response"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"]["code"], "internal_error");
    assert_eq!(failed["output"][0]["status"], "incomplete");
    // A failed response is not kept.
    let id = failed["id"].as_str().unwrap();
    let response = app
        .client
        .get(app.url(&format!("/v1/responses/{id}")))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
}

#[tokio::test]
async fn stored_responses_are_read_continued_and_deleted_by_their_account() {
    let app = TestApp::spawn().await;
    let alice = account_key(&app, "alice@example.com").await;
    let bob = account_key(&app, "bob@example.com").await;
    let operator = app.create_key().await;

    let first = create(
        &app,
        &alice,
        &json!({"model": "svc", "instructions": "Not carried over.", "input": "one"}),
    )
    .await;
    let id = first["id"].as_str().unwrap();
    assert_eq!(first["store"], true);

    let get = |key: &str| {
        let request = app
            .client
            .get(app.url(&format!("/v1/responses/{id}")))
            .bearer_auth(key.to_owned());
        async move { request.send().await.unwrap() }
    };
    let read = get(&alice).await;
    assert_eq!(read.status(), 200);
    assert_eq!(read.headers()["content-type"], "application/json");
    assert_eq!(read.json::<Value>().await.unwrap(), first);

    // Another account's, or the operator's, is a 404 in OpenAI's shape.
    let message = expect_error(
        get(&bob).await,
        404,
        "invalid_request_error",
        "not_found",
        None,
    )
    .await;
    assert_eq!(message, format!("Response with id '{id}' not found."));
    expect_error(
        get(&operator).await,
        404,
        "invalid_request_error",
        "not_found",
        None,
    )
    .await;
    expect_error(
        post(
            &app,
            &bob,
            &json!({"model": "svc", "input": "two", "previous_response_id": id}),
        )
        .await,
        404,
        "invalid_request_error",
        "not_found",
        Some("previous_response_id"),
    )
    .await;

    // Continued: the earlier turn (without its instructions) comes first.
    let second = create(
        &app,
        &alice,
        &json!({"model": "svc", "input": "two", "previous_response_id": id}),
    )
    .await;
    assert_eq!(second["output"][0]["content"][0]["text"], "You said: two");
    // "one" (2) + "You said: one" (4) + "two" (2).
    assert_eq!(second["usage"]["input_tokens"], 8);
    // And a third turn sees both earlier ones.
    let third = create(
        &app,
        &alice,
        &json!({"model": "svc", "input": "three", "previous_response_id": second["id"]}),
    )
    .await;
    assert_eq!(third["usage"]["input_tokens"], 14);

    // Deleted by its account only, once.
    let delete = |key: &str| {
        let request = app
            .client
            .delete(app.url(&format!("/v1/responses/{id}")))
            .bearer_auth(key.to_owned());
        async move { request.send().await.unwrap() }
    };
    expect_error(
        delete(&bob).await,
        404,
        "invalid_request_error",
        "not_found",
        None,
    )
    .await;
    let deleted = delete(&alice).await;
    assert_eq!(deleted.status(), 200);
    assert_eq!(
        deleted.json::<Value>().await.unwrap(),
        json!({"id": id, "object": "response", "deleted": true})
    );
    expect_error(
        delete(&alice).await,
        404,
        "invalid_request_error",
        "not_found",
        None,
    )
    .await;
    expect_error(
        get(&alice).await,
        404,
        "invalid_request_error",
        "not_found",
        None,
    )
    .await;
}

#[tokio::test]
async fn store_false_keeps_nothing() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let reply = create(
        &app,
        &key,
        &json!({"model": "svc", "input": "x", "store": false}),
    )
    .await;
    let id = reply["id"].as_str().unwrap();
    let response = app
        .client
        .get(app.url(&format!("/v1/responses/{id}")))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    expect_error(response, 404, "invalid_request_error", "not_found", None).await;
    let streamed = stream(
        &app,
        &key,
        &json!({"model": "svc", "input": "x", "store": false, "stream": true}),
    )
    .await;
    assert_eq!(streamed.last().unwrap().data["response"]["store"], false);
    assert!(
        app.store
            .response_by_id(id, "operator", 0)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_streamed_response_is_stored_before_it_is_done() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let events = stream(
        &app,
        &key,
        &json!({"model": "svc", "input": "x", "stream": true}),
    )
    .await;
    let done = &events.last().unwrap().data["response"];
    let read: Value = app
        .client
        .get(app.url(&format!("/v1/responses/{}", done["id"].as_str().unwrap())))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(&read, done);
}

#[tokio::test]
async fn expired_responses_are_not_served_and_are_swept() {
    let config = ServerConfig {
        response_retention: Duration::ZERO,
        ..ServerConfig::default()
    };
    let app = TestApp::spawn_with(Database::Sqlite, config).await;
    let key = app.create_key().await;
    let reply = create(&app, &key, &json!({"model": "svc", "input": "x"})).await;
    let id = reply["id"].as_str().unwrap();
    let response = app
        .client
        .get(app.url(&format!("/v1/responses/{id}")))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    expect_error(response, 404, "invalid_request_error", "not_found", None).await;
    expect_error(
        post(
            &app,
            &key,
            &json!({"model": "svc", "input": "y", "previous_response_id": id}),
        )
        .await,
        404,
        "invalid_request_error",
        "not_found",
        Some("previous_response_id"),
    )
    .await;
    // Storing a response sweeps the expired ones (this one as well).
    let stale = svc_core::StoredResponse {
        id: "resp_stale".into(),
        owner: "operator".into(),
        project_id: svc_core::ProjectId::default_project(),
        created_at: 1,
        expires_at: 2,
        previous_id: None,
        response: "{}".into(),
        conversation: "[]".into(),
    };
    let quota = svc_core::StorageQuota {
        bytes: 1 << 20,
        responses: 10,
    };
    app.store.insert_response(&stale, quota).await.unwrap();
    create(&app, &key, &json!({"model": "svc", "input": "z"})).await;
    assert_eq!(
        app.store.delete_expired_responses(i64::MAX).await.unwrap(),
        0
    );
}

#[tokio::test]
async fn bad_input_is_a_400_naming_its_param() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let cases = [
        (json!({"model": "svc"}), "input"),
        (json!({"model": "svc", "input": []}), "input"),
        (
            json!({"model": "svc", "input": "x", "temperature": 5}),
            "temperature",
        ),
        (
            json!({"model": "svc", "input": "x", "max_output_tokens": 0}),
            "max_output_tokens",
        ),
        (
            json!({"model": "svc", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
            "input[0].content[0]",
        ),
        (
            json!({"model": "svc", "input": [{"type": "function_call_output", "output": "x"}]}),
            "input[0].call_id",
        ),
        (
            json!({"model": "svc", "input": "x", "tool_choice": "required"}),
            "tool_choice",
        ),
        (
            json!({"model": "svc", "input": "x", "text": {"format": {"type": "json_schema", "name": "bad name", "schema": {}}}}),
            "text.format.name",
        ),
        (
            json!({"model": "svc", "input": "x", "tools": [{"type": "function"}]}),
            "tools[0].name",
        ),
    ];
    for (body, param) in cases {
        expect_error(
            post(&app, &key, &body).await,
            400,
            "invalid_request_error",
            "invalid_value",
            Some(param),
        )
        .await;
    }
    // Not JSON of the request's shape.
    let response = post(&app, &key, &json!({"model": "svc", "input": 5})).await;
    assert_eq!(response.status(), 400);
    // An unknown model, an unknown previous response.
    expect_error(
        post(&app, &key, &json!({"model": "nope", "input": "x"})).await,
        404,
        "invalid_request_error",
        "model_not_found",
        Some("model"),
    )
    .await;
    // A prompt longer than the context is the input's fault.
    expect_error(
        post(&app, &key, &json!({"model": "fake-tiny", "input": "x"})).await,
        400,
        "invalid_request_error",
        "context_length_exceeded",
        Some("input"),
    )
    .await;
    // Without a key.
    let response = app
        .client
        .post(app.url("/v1/responses"))
        .json(&json!({"model": "svc", "input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
}

/// Codex CLI's request, trimmed: developer and user messages of
/// `input_text` parts, function tools beside hosted and custom ones,
/// `store: false`, `include`, `prompt_cache_key`, `reasoning`, `text`.
#[tokio::test]
async fn codex_s_request_goes_through() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let body = json!({
        "model": "svc",
        "instructions": "You are Codex, a coding agent.",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>read-only</permissions>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>cwd</environment_context>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hi"}]}
        ],
        "tools": [
            {"type": "function", "name": "shell", "description": "Runs a command", "strict": false,
             "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                            "required": ["command"], "additionalProperties": false}},
            {"type": "local_shell"},
            {"type": "web_search", "external_web_access": false},
            {"type": "custom", "name": "apply_patch", "description": "Patch",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}}
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
        "stream": true,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199-session",
        "text": {"verbosity": "medium"}
    });
    let events = stream(&app, &key, &body).await;
    let done = &events.last().unwrap().data["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][0]["content"][0]["text"], "You said: Say hi");
    assert_eq!(done["parallel_tool_calls"], false);
    assert_eq!(done["prompt_cache_key"], "0199-session");
}

#[tokio::test]
async fn usage_and_rate_limits_count_responses() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    create(&app, &key, &json!({"model": "svc", "input": "one two"})).await;
    let body = app.metrics().await;
    assert!(
        body.lines()
            .any(|l| l.contains("tokens") && l.contains("model=\"svc\"")),
        "{body}"
    );
}
