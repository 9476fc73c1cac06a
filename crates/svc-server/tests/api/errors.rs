//! Every client error in OpenAI's shape, with the right status and param.

use serde_json::{Value, json};
use svc_server::ServerConfig;
use svc_test_support::{Database, TestApp};

use crate::{body, expect_error};

async fn post_raw(
    app: &TestApp,
    key: &str,
    content_type: &str,
    payload: impl Into<reqwest::Body>,
) -> reqwest::Response {
    app.client
        .post(app.url("/v1/chat/completions"))
        .bearer_auth(key)
        .header("content-type", content_type)
        .body(payload)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn unknown_model_is_404() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let message = expect_error(
        app.chat(&key, &body("gpt-7", "hi")).await,
        404,
        "invalid_request_error",
        "model_not_found",
        Some("model"),
    )
    .await;
    assert!(message.contains("gpt-7"), "{message}");
    let response = app
        .client
        .get(app.url("/v1/models/gpt-7"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    expect_error(
        response,
        404,
        "invalid_request_error",
        "model_not_found",
        Some("model"),
    )
    .await;
    let response = app
        .client
        .get(app.url("/v1/models/svc"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    let model: Value = response.json().await.unwrap();
    assert_eq!(
        model,
        json!({"id": "svc", "object": "model", "created": 1_700_000_000, "owned_by": "svc"})
    );
}

#[tokio::test]
async fn out_of_range_values_name_their_param() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let cases = [
        (json!({"temperature": 2.01}), "temperature"),
        (json!({"top_p": -0.5}), "top_p"),
        (json!({"max_tokens": 0}), "max_tokens"),
        (
            json!({"max_completion_tokens": -1}),
            "max_completion_tokens",
        ),
        (json!({"n": 0}), "n"),
        (json!({"n": 129}), "n"),
        (json!({"top_logprobs": 2}), "top_logprobs"),
        (
            json!({"logprobs": true, "top_logprobs": 21}),
            "top_logprobs",
        ),
        (json!({"presence_penalty": 2.5}), "presence_penalty"),
        (json!({"frequency_penalty": -9}), "frequency_penalty"),
        (json!({"stop": ["a", "b", "c", "d", "e"]}), "stop"),
        (json!({"messages": []}), "messages"),
        (json!({"tool_choice": "required"}), "tool_choice"),
        (
            json!({"stream_options": {"include_usage": true}}),
            "stream_options",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "bad name"}}}),
            "response_format.json_schema.name",
        ),
    ];
    for (extra, param) in cases {
        let mut request = body("svc", "hi");
        for (k, v) in extra.as_object().unwrap() {
            request[k] = v.clone();
        }
        expect_error(
            app.chat(&key, &request).await,
            400,
            "invalid_request_error",
            "invalid_value",
            Some(param),
        )
        .await;
    }
}

#[tokio::test]
async fn wrong_types_and_missing_fields_name_their_param() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let cases = [
        (
            json!({"messages": [{"role": "user", "content": "hi"}]}),
            "model",
        ),
        (json!({"model": "svc"}), "messages"),
        (json!({"model": "svc", "messages": "hi"}), "messages"),
        (
            json!({"model": "svc", "messages": [{"role": "user", "content": "hi"}], "max_tokens": "ten"}),
            "max_tokens",
        ),
        (
            json!({"model": "svc", "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}),
            "temperature",
        ),
        (
            json!({"model": "svc", "messages": [{"role": "user", "content": 5}]}),
            "messages[0]",
        ),
        (
            json!({"model": "svc", "messages": [{"role": "wizard", "content": "hi"}]}),
            "messages[0].role",
        ),
        (
            json!({"model": "svc", "messages": [{"role": "user", "content": "hi"}], "stream": "yes"}),
            "stream",
        ),
    ];
    for (request, param) in cases {
        let message = expect_error(
            app.chat(&key, &request).await,
            400,
            "invalid_request_error",
            "invalid_json",
            Some(param),
        )
        .await;
        assert!(message.contains(param), "{message}");
    }
    // Unknown fields are ignored, as OpenAI does; null reads as absent.
    let mut request = body("svc", "hi");
    request["some_future_field"] = json!({"x": 1});
    request["temperature"] = Value::Null;
    assert_eq!(app.chat(&key, &request).await.status(), 200);
}

#[tokio::test]
async fn malformed_json_and_wrong_content_type_are_400() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let response = post_raw(&app, &key, "application/json", "{\"model\": \"svc\",").await;
    let message = expect_error(response, 400, "invalid_request_error", "invalid_json", None).await;
    assert!(
        message.contains("could not parse the JSON body"),
        "{message}"
    );
    let trailing = format!("{} trailing", body("svc", "hi"));
    let response = post_raw(&app, &key, "application/json", trailing).await;
    expect_error(response, 400, "invalid_request_error", "invalid_json", None).await;
    let response = post_raw(&app, &key, "text/plain", body("svc", "hi").to_string()).await;
    expect_error(
        response,
        400,
        "invalid_request_error",
        "unsupported_content_type",
        None,
    )
    .await;
    let response = app
        .client
        .post(app.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .body(body("svc", "hi").to_string())
        .send()
        .await
        .unwrap();
    expect_error(
        response,
        400,
        "invalid_request_error",
        "unsupported_content_type",
        None,
    )
    .await;
}

#[tokio::test]
async fn auth_is_checked_before_the_body() {
    let app = TestApp::spawn().await;
    let response = post_raw(&app, "sk-svc-bad", "application/json", "not json").await;
    expect_error(
        response,
        401,
        "invalid_request_error",
        "invalid_api_key",
        None,
    )
    .await;
}

#[tokio::test]
async fn bodies_over_the_limit_are_413() {
    let config = ServerConfig {
        max_body_bytes: 1024,
        ..ServerConfig::default()
    };
    let app = TestApp::spawn_with(Database::Sqlite, config).await;
    let key = app.create_key().await;
    let big = body("svc", &"x".repeat(2048));
    let message = expect_error(
        app.chat(&key, &big).await,
        413,
        "invalid_request_error",
        "request_too_large",
        None,
    )
    .await;
    assert!(message.contains("1024"), "{message}");
    // Chunked bodies (no Content-Length) are cut off the same way.
    let stream = futures::stream::iter(vec![Ok::<_, std::io::Error>(big.to_string())]);
    let response = post_raw(
        &app,
        &key,
        "application/json",
        reqwest::Body::wrap_stream(stream),
    )
    .await;
    expect_error(
        response,
        413,
        "invalid_request_error",
        "request_too_large",
        None,
    )
    .await;
    assert_eq!(app.chat(&key, &body("svc", "small")).await.status(), 200);
}

#[tokio::test]
async fn wrong_paths_and_methods_are_openai_shaped() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let response = app
        .client
        .get(app.url("/v1/chat/completions"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    let message = expect_error(
        response,
        405,
        "invalid_request_error",
        "method_not_allowed",
        None,
    )
    .await;
    assert!(message.contains("GET"), "{message}");
    let response = app
        .client
        .post(app.url("/v1/edits"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    let message = expect_error(response, 404, "invalid_request_error", "unknown_url", None).await;
    assert_eq!(message, "Invalid URL (POST /v1/edits)");
}

#[tokio::test]
async fn context_overflow_is_400() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let message = expect_error(
        app.chat(&key, &body("fake-tiny", "hi")).await,
        400,
        "invalid_request_error",
        "context_length_exceeded",
        Some("messages"),
    )
    .await;
    assert!(
        message.contains("maximum context length is 16 tokens"),
        "{message}"
    );
}

#[tokio::test]
async fn server_errors_say_little_and_quote_the_request_id() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let response = app
        .chat(&key, &body("fake-fail", "one two three four"))
        .await;
    let id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let message = expect_error(response, 500, "server_error", "internal_error", None).await;
    assert!(message.contains(&id), "{message}");
    assert!(!message.contains("scripted"), "internals leaked: {message}");
}
