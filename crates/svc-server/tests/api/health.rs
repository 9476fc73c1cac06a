//! Liveness, readiness and request ids.

use serde_json::Value;
use svc_test_support::TestApp;

#[tokio::test]
async fn health_and_ready_need_no_key() {
    let app = TestApp::spawn().await;
    let health = app.client.get(app.url("/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.json::<Value>().await.unwrap()["status"], "ok");
    let ready = app.client.get(app.url("/ready")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json::<Value>().await.unwrap()["status"], "ready");
}

#[tokio::test]
async fn ready_fails_when_the_store_is_gone() {
    let app = TestApp::spawn().await;
    app.store.close().await;
    let ready = app.client.get(app.url("/ready")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["error"]["code"], "service_unavailable");
}

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let app = TestApp::spawn().await;
    let mut seen = Vec::new();
    for path in ["/health", "/v1/models", "/nowhere"] {
        let response = app.client.get(app.url(path)).send().await.unwrap();
        let id = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(id.starts_with("req_") && id.len() == 28, "{id}");
        seen.push(id);
    }
    seen.dedup();
    assert_eq!(seen.len(), 3, "ids are unique");
}
