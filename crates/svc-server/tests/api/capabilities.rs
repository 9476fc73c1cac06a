//! A model asked for work it does not do: the same 400 naming `model` on
//! every endpoint, in the endpoint's dialect, saying what the model serves
//! and where; nothing charged, nothing sent to the engine.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use svc_test_support::TestApp;

use crate::audio::{speech, transcribe};
use crate::expect_error;

/// What every endpoint answers when `fake-embed` is asked for text.
const NO_TEXT: &str =
    "model fake-embed does not generate text; it serves embeddings (POST /v1/embeddings)";

async fn post(app: &TestApp, key: &str, path: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url(path))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_model_asked_for_work_it_does_not_do_is_refused_alike_everywhere() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let text = [
        ("/v1/chat/completions", crate::body("fake-embed", "hi")),
        (
            "/v1/completions",
            json!({"model": "fake-embed", "prompt": "hi"}),
        ),
        (
            "/v1/responses",
            json!({"model": "fake-embed", "input": "hi"}),
        ),
    ];
    for (path, body) in &text {
        let refused = post(&app, &key, path, body).await;
        let message = expect_error(
            refused,
            400,
            "invalid_request_error",
            "invalid_value",
            Some("model"),
        )
        .await;
        assert_eq!(message, NO_TEXT, "{path}");
    }
    // Anthropic's dialect, its own shape, the same words; counting too.
    for path in ["/v1/messages", "/v1/messages/count_tokens"] {
        let refused = app
            .client
            .post(app.url(path))
            .header("x-api-key", &key)
            .header("anthropic-version", "2023-06-01")
            .json(&json!({"model": "fake-embed", "max_tokens": 10,
                "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 400, "{path}");
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["type"], "error", "{path}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{path}");
        assert_eq!(body["error"]["message"], NO_TEXT, "{path}");
    }
    let others = [
        (
            "/v1/embeddings",
            json!({"model": "svc", "input": "hi"}),
            "model svc does not create embeddings; it serves generation (POST /v1/chat/completions)",
        ),
        (
            "/v1/rerank",
            json!({"model": "fake-embed", "query": "q", "documents": ["a"]}),
            "model fake-embed does not rerank documents; it serves embeddings (POST /v1/embeddings)",
        ),
        (
            "/v1/audio/speech",
            speech("fake-rerank"),
            "model fake-rerank does not synthesize speech; it serves rerank (POST /v1/rerank)",
        ),
    ];
    for (path, body, expected) in &others {
        let refused = post(&app, &key, path, body).await;
        let message = expect_error(
            refused,
            400,
            "invalid_request_error",
            "invalid_value",
            Some("model"),
        )
        .await;
        assert_eq!(&message, expected, "{path}");
    }
    let refused = transcribe(&app, &key, "fake-embed", b"ID3 audio").await;
    let message = expect_error(
        refused,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("model"),
    )
    .await;
    assert_eq!(
        message,
        "model fake-embed does not transcribe audio; it serves embeddings (POST /v1/embeddings)"
    );
    // None of it reached an engine.
    assert_eq!(app.probe.started.load(Ordering::SeqCst), 0);
}
