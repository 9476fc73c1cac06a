//! HTTP tests of the real server (port 0, fresh SQLite, scripted engine).
//! One test binary with a module per concern keeps link time down.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

/// Runs each `async fn name(db: Database)` on a fresh SQLite file and on a
/// fresh PostgreSQL schema (the module needs `TestSchema` and `postgres_url`
/// in scope). Defined before the modules, so that they all see it.
macro_rules! on_both_databases {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(svc_test_support::Database::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    let schema = super::TestSchema::create(&super::postgres_url()).await.unwrap();
                    super::$name(svc_test_support::Database::Url(schema.url().to_owned())).await;
                    schema.remove().await.unwrap();
                }
            )*
        }
    };
}

mod admin_escalation;
mod audio;
mod audit;
mod auth;
mod batches;
mod budgets;
mod cached_tokens;
mod capabilities;
mod chat;
mod chat_mcp;
mod completions;
mod dashboard;
mod dashboard_controls;
mod dashboard_projects;
mod device;
mod embeddings;
mod errors;
mod failures;
mod fallbacks;
mod fingerprint;
mod hardening;
mod health;
mod images;
mod mcp;
mod messages;
mod messages_mcp;
mod models;
mod offboarding;
mod operations;
mod org_usage;
mod org_users;
mod projects;
mod ratelimit;
mod reasoning;
mod request_log;
mod rerank;
mod response_cache;
mod response_storage;
mod responses;
mod responses_mcp;
mod scripted_mcp;
mod sso;
mod streaming;
mod throttles;
mod tls;
mod uploads;

use serde_json::{Value, json};
use svc_core::{KeyKind, KeyLimits, KeyScope, ModelAccess, Permission};
use svc_server::ServerConfig;
use svc_test_support::{Database, TestApp};

/// A minimal valid request body for `model` saying `text`.
pub fn body(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

/// Asserts an OpenAI-shaped error with this status, type, code and param,
/// and returns its message.
pub async fn expect_error(
    response: reqwest::Response,
    status: u16,
    kind: &str,
    code: &str,
    param: Option<&str>,
) -> String {
    assert_eq!(response.status().as_u16(), status, "status");
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "errors are JSON"
    );
    let body: Value = response.json().await.unwrap();
    let error = body["error"]
        .as_object()
        .unwrap_or_else(|| panic!("no error object: {body}"));
    assert_eq!(error.len(), 4, "exactly message, type, param, code: {body}");
    assert_eq!(error["type"], kind, "{body}");
    assert_eq!(error["code"], code, "{body}");
    assert_eq!(error["param"].as_str(), param, "{body}");
    error["message"].as_str().unwrap().to_owned()
}

/// What every inference route gets, checked for one: with a limit of two
/// requests a minute, `body` posted to `path` is served twice (the first
/// answer saying one request is left) and refused the third time; `model`'s
/// tokens show in `/metrics`; and the admin usage API counts the two
/// requests once the ledger is written. Returns that day's usage row.
pub async fn counts_toward_limits_usage_and_metrics(
    path: &str,
    body: &Value,
    model: &str,
) -> Value {
    let config = ServerConfig {
        rate_limits: KeyLimits {
            requests_per_minute: Some(2),
            tokens_per_minute: None,
        },
        ..ServerConfig::default()
    };
    let app = TestApp::spawn_with(Database::Sqlite, config).await;
    let key = app.create_key().await;
    let post = || {
        app.client
            .post(app.url(path))
            .bearer_auth(&key)
            .json(body)
            .send()
    };
    let ok = post().await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers()["x-ratelimit-remaining-requests"], "1");
    assert_eq!(post().await.unwrap().status(), 200);
    let refused = post().await.unwrap();
    expect_error(refused, 429, "requests", "rate_limit_exceeded", None).await;
    let metrics = app.metrics().await;
    let series = format!("model=\"{model}\"");
    assert!(
        metrics
            .lines()
            .any(|l| l.contains("tokens") && l.contains(&series)),
        "{metrics}"
    );
    let admin = app.create_admin_key().await;
    let mut rows = Value::Null;
    for _ in 0..50 {
        rows = app
            .client
            .get(app.url("/v1/admin/usage"))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if rows["data"][0]["requests"] == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(rows["data"][0]["requests"], 2, "{rows}");
    rows["data"][0].clone()
}

/// What every inference route asks of a key, checked for one: `body` (for
/// the model `model`) posted to `path` is a 403 naming `model.request` for a
/// read-only key and served for a key with only that permission; a 404
/// `model_not_found` for a key whose list has only `other_model`; a 401
/// for an unknown key.
pub async fn needs_model_request_and_the_model_on_the_list(
    path: &str,
    body: &Value,
    other_model: &str,
) {
    let app = TestApp::spawn().await;
    let post = |key: String| {
        app.client
            .post(app.url(path))
            .bearer_auth(key)
            .json(body)
            .send()
    };
    let scoped = |scope: KeyScope| app.create_scoped_key(None, scope);
    let read_only = scoped(KeyScope {
        kind: KeyKind::Restricted(vec![Permission::ModelRead]),
        ..KeyScope::default()
    })
    .await;
    let refused = post(read_only).await.unwrap();
    let message = expect_error(
        refused,
        403,
        "invalid_request_error",
        "insufficient_permissions",
        None,
    )
    .await;
    assert!(message.contains("model.request"), "{message}");
    let inference = scoped(KeyScope {
        kind: KeyKind::Restricted(vec![Permission::ModelRequest]),
        ..KeyScope::default()
    })
    .await;
    assert_eq!(post(inference).await.unwrap().status(), 200);
    let other = scoped(KeyScope {
        allowed_models: ModelAccess(Some(vec![other_model.into()])),
        ..KeyScope::default()
    })
    .await;
    let hidden = post(other).await.unwrap();
    expect_error(
        hidden,
        404,
        "invalid_request_error",
        "model_not_found",
        Some("model"),
    )
    .await;
    let unknown = post("sk-svc-nope".into()).await.unwrap();
    assert_eq!(unknown.status(), 401);
}
