//! Every way a key can be refused, and that refusal is immediate.

use svc_core::KeyId;
use svc_test_support::TestApp;

use crate::{body, expect_error};

async fn models_with(app: &TestApp, authorization: Option<&str>) -> reqwest::Response {
    let mut request = app.client.get(app.url("/v1/models"));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn missing_key_is_401() {
    let app = TestApp::spawn().await;
    let response = models_with(&app, None).await;
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    let message = expect_error(
        response,
        401,
        "invalid_request_error",
        "invalid_api_key",
        None,
    )
    .await;
    assert!(message.contains("didn't provide an API key"), "{message}");
    let response = models_with(&app, Some("Basic abc")).await;
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
async fn malformed_key_is_401_without_echo() {
    let app = TestApp::spawn().await;
    for bad in [
        "sk-other-1234",
        "sk-svc-NOTHEX0000000000000000000000000000000000",
    ] {
        let response = models_with(&app, Some(&format!("Bearer {bad}"))).await;
        let message = expect_error(
            response,
            401,
            "invalid_request_error",
            "invalid_api_key",
            None,
        )
        .await;
        assert!(message.starts_with("Malformed API key"), "{message}");
        assert!(!message.contains(bad), "the key was echoed: {message}");
    }
}

#[tokio::test]
async fn unknown_key_is_401_without_echo() {
    let app = TestApp::spawn().await;
    let stranger = format!("sk-svc-{}", "0123456789".repeat(4));
    let response = models_with(&app, Some(&format!("Bearer {stranger}"))).await;
    let message = expect_error(
        response,
        401,
        "invalid_request_error",
        "invalid_api_key",
        None,
    )
    .await;
    assert_eq!(message, "Incorrect API key provided.");
}

#[tokio::test]
async fn valid_key_works_and_scheme_is_case_insensitive() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let response = models_with(&app, Some(&format!("bearer {key}"))).await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn revoked_key_is_refused_on_the_very_next_request() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    assert_eq!(app.chat(&key, &body("svc", "hi")).await.status(), 200);
    let id = app.keys.list(None).await.unwrap()[0].id.clone();
    assert!(
        app.keys
            .revoke(&id, &svc_core::Actor::Operator)
            .await
            .unwrap()
    );
    let message = expect_error(
        app.chat(&key, &body("svc", "hi")).await,
        401,
        "invalid_request_error",
        "invalid_api_key",
        None,
    )
    .await;
    assert_eq!(message, "This API key has been revoked.");
    assert!(
        !app.keys
            .revoke(&id, &svc_core::Actor::Operator)
            .await
            .unwrap(),
        "revoking twice reports nothing done"
    );
    assert!(
        !app.keys
            .revoke(&KeyId("key_nope".into()), &svc_core::Actor::Operator)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn expired_key_is_refused() {
    let app = TestApp::spawn().await;
    let key = app.create_key_expiring(Some(-1)).await;
    let message = expect_error(
        models_with(&app, Some(&format!("Bearer {key}"))).await,
        401,
        "invalid_request_error",
        "invalid_api_key",
        None,
    )
    .await;
    assert_eq!(message, "This API key has expired.");
}

#[tokio::test]
async fn use_is_recorded() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    assert_eq!(app.keys.list(None).await.unwrap()[0].last_used_at, None);
    models_with(&app, Some(&format!("Bearer {key}"))).await;
    assert!(app.keys.list(None).await.unwrap()[0].last_used_at.is_some());
}
