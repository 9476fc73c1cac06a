//! Image inputs on a model without vision (the scripted engine, as the
//! embedded one): each dialect's image part is read, checked, and refused
//! with a 400 in the dialect's own error shape naming the part; a malformed
//! or unsafe image is refused before any engine sees it.

use serde_json::{Value, json};
use svc_test_support::TestApp;

use crate::expect_error;

const PNG: &str = "data:image/png;base64,iVBORw0KGgo=";

async fn post(app: &TestApp, key: &str, path: &str, body: Value) -> reqwest::Response {
    app.client
        .post(app.url(path))
        .bearer_auth(key)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_model_without_vision_names_the_image_part_in_each_dialect() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let chat = post(
        &app,
        &key,
        "/v1/chat/completions",
        json!({"model": "svc", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": PNG}}]}]}),
    )
    .await;
    let message = expect_error(
        chat,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("messages[0].content[1]"),
    )
    .await;
    assert!(message.contains("images"), "{message}");

    let response = post(
        &app,
        &key,
        "/v1/responses",
        json!({"model": "svc", "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": "https://example.com/cat.png"}]}]}),
    )
    .await;
    expect_error(
        response,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("input[0].content[0]"),
    )
    .await;

    let message = post(
        &app,
        &key,
        "/v1/messages",
        json!({"model": "svc", "max_tokens": 16, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]}),
    )
    .await;
    assert_eq!(message.status(), 400);
    let body: Value = message.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let text = body["error"]["message"].as_str().unwrap();
    assert!(text.contains("messages[0].content[0]"), "{text}");
}

#[tokio::test]
async fn unsafe_or_malformed_images_are_refused_before_any_engine() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let cases = [
        ("file:///etc/passwd", "messages[0].content[0]"),
        ("data:text/html;base64,PGI+", "messages[0].content[0]"),
        ("data:image/png;base64,@@@", "messages[0].content[0]"),
    ];
    for (url, param) in cases {
        let response = post(
            &app,
            &key,
            "/v1/chat/completions",
            json!({"model": "fake-slow", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": url}}]}]}),
        )
        .await;
        expect_error(
            response,
            400,
            "invalid_request_error",
            "invalid_value",
            Some(param),
        )
        .await;
    }
    let many: Vec<Value> = (0..33)
        .map(|_| json!({"type": "image_url", "image_url": {"url": PNG}}))
        .collect();
    let response = post(
        &app,
        &key,
        "/v1/chat/completions",
        json!({"model": "svc", "messages": [{"role": "user", "content": many}]}),
    )
    .await;
    expect_error(
        response,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("messages"),
    )
    .await;
    assert_eq!(
        app.probe.started.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}
