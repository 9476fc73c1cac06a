//! Per-key rate limits: OpenAI's headers, the 429, failed requests counted,
//! per-key overrides set in the dashboard, and limits shared through Redis
//! by two servers.

use reqwest::StatusCode;
use serde_json::json;
use svc_core::{KeyId, KeyLimits};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Database, TestApp};

use crate::body;

fn limited(rpm: Option<i64>, tpm: Option<i64>) -> ServerConfig {
    ServerConfig {
        rate_limits: KeyLimits {
            requests_per_minute: rpm,
            tokens_per_minute: tpm,
        },
        ..ServerConfig::default()
    }
}

fn header(response: &reqwest::Response, name: &str) -> String {
    response.headers()[name].to_str().unwrap().to_owned()
}

/// The window is one clock minute; a test that straddles its end would
/// see the counts reset. Wait out the last seconds of a minute.
async fn away_from_a_minute_boundary() {
    let ms = chrono::Utc::now().timestamp_millis().rem_euclid(60_000);
    if ms > 50_000 {
        tokio::time::sleep(std::time::Duration::from_millis((60_500 - ms) as u64)).await;
    }
}

#[tokio::test]
async fn requests_over_the_limit_get_429_with_openais_headers() {
    away_from_a_minute_boundary().await;
    let app = TestApp::spawn_with(Database::Sqlite, limited(Some(3), None)).await;
    let key = app.create_key().await;
    let ok = app.chat(&key, &body("svc", "hi")).await;
    assert_eq!(ok.status(), 200);
    assert_eq!(header(&ok, "x-ratelimit-limit-requests"), "3");
    assert_eq!(header(&ok, "x-ratelimit-remaining-requests"), "2");
    assert!(header(&ok, "x-ratelimit-reset-requests").ends_with('s'));
    assert!(ok.headers().get("x-ratelimit-limit-tokens").is_none());

    // A failed request counts too, and carries the headers.
    let bad = app.chat(&key, &json!({"model": "svc"})).await;
    assert_eq!(bad.status(), 400);
    assert_eq!(header(&bad, "x-ratelimit-remaining-requests"), "1");
    assert_eq!(app.chat(&key, &body("svc", "hi")).await.status(), 200);

    let refused = app.chat(&key, &body("svc", "hi")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: i64 = header(&refused, "retry-after").parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(header(&refused, "x-ratelimit-remaining-requests"), "0");
    let message = crate::expect_error(refused, 429, "requests", "rate_limit_exceeded", None).await;
    assert!(
        message.contains("requests per min (RPM): Limit 3"),
        "{message}"
    );

    // Other keys have their own window.
    let other = app.create_key().await;
    assert_eq!(app.chat(&other, &body("svc", "hi")).await.status(), 200);
}

#[tokio::test]
async fn tokens_per_minute_stop_a_key_once_used_up() {
    away_from_a_minute_boundary().await;
    let app = TestApp::spawn_with(Database::Sqlite, limited(None, Some(5))).await;
    let key = app.create_key().await;
    let first = app.chat(&key, &body("svc", "hello there")).await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "x-ratelimit-limit-tokens"), "5");
    let used: serde_json::Value = first.json().await.unwrap();
    assert!(
        used["usage"]["total_tokens"].as_i64().unwrap() >= 5,
        "{used}"
    );
    // Tokens are counted when the completion finishes, off the response path.
    let mut refused = None;
    for _ in 0..50 {
        let response = app.chat(&key, &body("svc", "again")).await;
        if response.status() == 429 {
            refused = Some(response);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let refused = refused.expect("refused once the tokens are used up");
    assert_eq!(header(&refused, "x-ratelimit-remaining-tokens"), "0");
    crate::expect_error(refused, 429, "tokens", "rate_limit_exceeded", None).await;
}

#[tokio::test]
async fn a_keys_own_limit_beats_the_default_and_admins_set_it_in_the_dashboard() {
    away_from_a_minute_boundary().await;
    let app = TestApp::spawn_with(Database::Sqlite, limited(Some(100), None)).await;
    let (admin, _) = app.signed_in("admin@example.com", true).await;
    let key = app.create_key().await;
    let id = app.keys.list(None).await.unwrap()[0].id.clone();

    let form = admin.get(&format!("/dashboard/keys/{id}/limits")).await;
    assert_eq!(form.status, 200);
    let bad = admin
        .post(
            &format!("/dashboard/keys/{id}/limits"),
            &[("csrf", &form.csrf()), ("rpm", "-1"), ("tpm", "")],
        )
        .await;
    assert_eq!(bad.status, 400);
    let saved = admin
        .post(
            &format!("/dashboard/keys/{id}/limits"),
            &[("csrf", &form.csrf()), ("rpm", "1"), ("tpm", "")],
        )
        .await;
    assert_eq!(saved.status, 303);
    let record = app.keys.get(&KeyId(id.0.clone())).await.unwrap().unwrap();
    assert_eq!(record.limits.requests_per_minute, Some(1));

    let ok = app.chat(&key, &body("svc", "hi")).await;
    assert_eq!(header(&ok, "x-ratelimit-limit-requests"), "1");
    assert_eq!(app.chat(&key, &body("svc", "hi")).await.status(), 429);

    // Not for ordinary users.
    let (user, _) = app.signed_in("user@example.com", false).await;
    assert_eq!(
        user.get(&format!("/dashboard/keys/{id}/limits"))
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn two_servers_share_limits_through_redis() {
    away_from_a_minute_boundary().await;
    let schema = TestSchema::create(&postgres_url()).await.unwrap();
    let config = || ServerConfig {
        redis_url: Some("redis://127.0.0.1:6379".parse().unwrap()),
        ..limited(Some(3), None)
    };
    let first = TestApp::spawn_with(Database::Url(schema.url().to_owned()), config()).await;
    let second = TestApp::spawn_with(Database::Url(schema.url().to_owned()), config()).await;
    let key = first.create_key().await;
    assert_eq!(first.chat(&key, &body("svc", "1")).await.status(), 200);
    assert_eq!(second.chat(&key, &body("svc", "2")).await.status(), 200);
    let third = first.chat(&key, &body("svc", "3")).await;
    assert_eq!(header(&third, "x-ratelimit-remaining-requests"), "0");
    assert_eq!(second.chat(&key, &body("svc", "4")).await.status(), 429);
    drop((first, second));
    schema.remove().await.unwrap();
}
