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
mod audit;
mod auth;
mod budgets;
mod chat;
mod completions;
mod dashboard;
mod dashboard_controls;
mod dashboard_projects;
mod device;
mod embeddings;
mod errors;
mod failures;
mod hardening;
mod health;
mod images;
mod messages;
mod offboarding;
mod operations;
mod org_usage;
mod org_users;
mod projects;
mod ratelimit;
mod response_storage;
mod responses;
mod sso;
mod streaming;
mod throttles;

use serde_json::{Value, json};

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
