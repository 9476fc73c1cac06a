//! `system_fingerprint` (issue 32): chat completions and legacy completions,
//! whole and in every streamed chunk, carry the engine's fingerprint of its
//! weights, build and numerics when it has one (`fake-cached` stands in for
//! the embedded engine), and leave the field out when it has none (an
//! upstream; here `svc`'s scripted engine).

use serde_json::{Value, json};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::sse::read_sse;
use svc_test_support::{Database, FAKE_FINGERPRINT, TestApp};

on_both_databases!(replies_carry_the_engines_fingerprint);

async fn post(app: &TestApp, path: &str, key: &str, body: &Value) -> String {
    let response = app
        .client
        .post(app.url(path))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path} {body}");
    response.text().await.unwrap()
}

/// Every chunk's `system_fingerprint` (`Null` where absent).
fn chunk_fingerprints(body: &str) -> Vec<Value> {
    let chunks: Vec<Value> = read_sse(body).into_iter().filter_map(|e| e.json).collect();
    assert!(chunks.len() >= 3, "{body}");
    chunks
        .iter()
        .map(|c| c.get("system_fingerprint").cloned().unwrap_or(Value::Null))
        .collect()
}

async fn replies_carry_the_engines_fingerprint(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let key = app.create_key().await;
    let routes = [
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a b c"}]}),
        ),
        ("/v1/completions", json!({"prompt": ["a b", "c d"], "n": 2})),
    ];
    for (path, body) in routes {
        for (model, expected) in [
            ("fake-cached", json!(FAKE_FINGERPRINT)),
            ("svc", Value::Null),
        ] {
            let mut whole = body.clone();
            whole["model"] = json!(model);
            let reply: Value = serde_json::from_str(&post(&app, path, &key, &whole).await).unwrap();
            assert_eq!(
                reply
                    .get("system_fingerprint")
                    .cloned()
                    .unwrap_or(Value::Null),
                expected,
                "{path} {model}: {reply}"
            );
            let mut streamed = whole.clone();
            streamed["stream"] = json!(true);
            streamed["stream_options"] = json!({"include_usage": true});
            let body = post(&app, path, &key, &streamed).await;
            for fingerprint in chunk_fingerprints(&body) {
                assert_eq!(fingerprint, expected, "{path} {model}: {body}");
            }
        }
    }
}
