//! The response cache (issue 34): a greedy or seeded request asked again by
//! the same project is answered with the same bytes, whole and streamed, in
//! each dialect, without the engine; never across projects, never for a
//! reply that failed or a request that is not reproducible, and not when
//! the caller says `Cache-Control: no-cache` or `no-store`. In the store
//! (SQLite and PostgreSQL) and in Redis.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use svc_core::{KeyScope, ModelAccess};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Database, Probe, TestApp, fake_models};

on_both_databases!(
    a_reproducible_request_is_answered_again_with_the_same_bytes,
    what_is_not_reproducible_or_not_whole_is_never_cached,
    hits_are_counted_in_usage_and_priced_at_cached_response,
);

fn config(redis: bool) -> ServerConfig {
    ServerConfig {
        response_cache_ttl: Duration::from_secs(3600),
        redis_url: redis.then(|| "redis://127.0.0.1:6379".parse().unwrap()),
        ..ServerConfig::default()
    }
}

async fn spawn(database: Database, redis: bool) -> (TestApp, Arc<Probe>) {
    let probe = Arc::new(Probe::default());
    let app = TestApp::spawn_models(
        database,
        config(redis),
        fake_models(probe.clone()),
        probe.clone(),
    )
    .await;
    (app, probe)
}

/// Words no earlier run asked (Redis outlives the tests).
fn fresh(text: &str) -> String {
    format!("{text} {}", hex::encode(rand::random::<[u8; 8]>()))
}

async fn post(
    app: &TestApp,
    key: &str,
    path: &str,
    body: &Value,
    cache_control: Option<&str>,
) -> (u16, Option<String>, String) {
    let mut request = app.client.post(app.url(path)).bearer_auth(key).json(body);
    if let Some(directive) = cache_control {
        request = request.header("cache-control", directive);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let cache = response
        .headers()
        .get("x-svc-cache")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, cache, response.text().await.unwrap())
}

/// Asks, with `only-if-cached`, until the reply kept after the last one is
/// there (it is written once its last byte went out, off the request's
/// path); until then each answer is a 504 that asks nothing of the engine.
async fn hit(app: &TestApp, key: &str, path: &str, body: &Value) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, cache, text) = post(app, key, path, body, Some("only-if-cached")).await;
        if status == 200 {
            assert_eq!(cache.as_deref(), Some("hit"));
            return text;
        }
        assert_eq!(status, 504, "{text}");
        assert!(
            text.contains("not_cached") || text.contains("only-if-cached"),
            "{text}"
        );
        assert!(Instant::now() < deadline, "never a hit: {path} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn a_reproducible_request_is_answered_again_with_the_same_bytes(database: Database) {
    cached_in(database, false).await;
}

#[tokio::test]
async fn redis_keeps_the_cache_when_there_is_one() {
    cached_in(Database::Sqlite, true).await;
}

async fn cached_in(database: Database, redis: bool) {
    let (app, probe) = spawn(database, redis).await;
    let key = app.create_key().await;
    let chat = |stream: bool, text: &str| {
        json!({"model": "svc", "temperature": 0, "stream": stream,
            "messages": [{"role": "user", "content": text}]})
    };
    for stream in [false, true] {
        let body = chat(stream, &fresh("hello"));
        let started = probe.started.load(Ordering::SeqCst);
        let (status, cache, first) = post(&app, &key, "/v1/chat/completions", &body, None).await;
        assert_eq!((status, cache.as_deref()), (200, Some("miss")), "{first}");
        let again = hit(&app, &key, "/v1/chat/completions", &body).await;
        assert_eq!(again, first, "the same bytes (stream: {stream})");
        assert_eq!(
            probe.started.load(Ordering::SeqCst),
            started + 1,
            "a hit costs no engine time"
        );
    }
    // Seeded rather than greedy, and the other dialects.
    let seeded = json!({"model": "svc", "seed": 7,
        "messages": [{"role": "user", "content": fresh("seeded")}]});
    let messages = json!({"model": "svc", "max_tokens": 30, "temperature": 0,
        "messages": [{"role": "user", "content": fresh("anthropic")}]});
    let responses =
        json!({"model": "svc", "temperature": 0, "store": false, "input": fresh("responses")});
    for (path, body) in [
        ("/v1/chat/completions", &seeded),
        ("/v1/messages", &messages),
        ("/v1/responses", &responses),
    ] {
        let (status, cache, first) = post(&app, &key, path, body, None).await;
        assert_eq!((status, cache.as_deref()), (200, Some("miss")), "{path}");
        assert_eq!(hit(&app, &key, path, body).await, first, "{path}");
    }

    // Another project asking the same is not answered from this one's.
    let project = app.create_project("other", ModelAccess(None)).await;
    let other = app
        .create_scoped_key(
            None,
            KeyScope {
                project_id: Some(project.id.clone()),
                ..KeyScope::default()
            },
        )
        .await;
    let (_, cache, _) = post(&app, &other, "/v1/messages", &messages, None).await;
    assert_eq!(cache.as_deref(), Some("miss"), "not shared across projects");

    // The caller may skip it.
    let started = probe.started.load(Ordering::SeqCst);
    let (_, cache, _) = post(&app, &key, "/v1/messages", &messages, Some("no-cache")).await;
    assert_eq!(cache.as_deref(), Some("miss"));
    let (_, cache, _) = post(&app, &key, "/v1/messages", &messages, Some("no-store")).await;
    assert_eq!(cache, None);
    assert_eq!(probe.started.load(Ordering::SeqCst), started + 2);

    let metrics = app.metrics().await;
    let hits: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("svc_response_cache_requests_total{result=\"hit\"} "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(hits >= 5, "{metrics}");
    let saved: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("svc_response_cache_saved_tokens_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(saved > 0, "{metrics}");
}

async fn what_is_not_reproducible_or_not_whole_is_never_cached(database: Database) {
    let (app, probe) = spawn(database, false).await;
    let key = app.create_key().await;
    // Sampled (no temperature given: 1): no cache at all.
    let sampled = crate::body("svc", &fresh("sampled"));
    for _ in 0..2 {
        let (status, cache, _) = post(&app, &key, "/v1/chat/completions", &sampled, None).await;
        assert_eq!((status, cache), (200, None));
    }
    // A stored response, or one reading a kept conversation: not cached.
    let stored = json!({"model": "svc", "temperature": 0, "input": fresh("kept")});
    let (_, cache, _) = post(&app, &key, "/v1/responses", &stored, None).await;
    assert_eq!(cache, None);
    // A greedy stream that failed midway is not kept.
    let failing = json!({"model": "fake-fail", "temperature": 0, "stream": true,
        "messages": [{"role": "user", "content": fresh("one two three four")}]});
    let started = probe.started.load(Ordering::SeqCst);
    for _ in 0..2 {
        let (status, cache, text) = post(&app, &key, "/v1/chat/completions", &failing, None).await;
        assert_eq!((status, cache.as_deref()), (200, Some("miss")), "{text}");
        assert!(text.contains(r#""error":{"#), "{text}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(probe.started.load(Ordering::SeqCst), started + 2);
}

/// A hit is a request in usage that used no tokens, with the tokens its
/// reply saved; it costs `[prices.<model>] cached_response` per million of
/// those in spend budgets (`svc` here), and nothing without one
/// (`svc-thinking`).
async fn hits_are_counted_in_usage_and_priced_at_cached_response(database: Database) {
    let mut config = config(false);
    config.prices.insert(
        "svc".into(),
        svc_core::ModelPrice {
            input: 100.0,
            output: 1000.0,
            cached_response: Some(10.0),
            ..svc_core::ModelPrice::default()
        },
    );
    config.prices.insert(
        "svc-thinking".into(),
        svc_core::ModelPrice {
            input: 100.0,
            output: 1000.0,
            ..svc_core::ModelPrice::default()
        },
    );
    let probe = Arc::new(Probe::default());
    let app = TestApp::spawn_models(database, config, fake_models(probe.clone()), probe).await;
    let admin = app.create_admin_key().await;
    let admin_get = |path: String| {
        let request = app.client.get(app.url(&path)).bearer_auth(&admin);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    for (model, rate) in [("svc", Some(10)), ("svc-thinking", None)] {
        let created: Value = app
            .client
            .post(app.url("/v1/organization/projects/proj_default/api_keys"))
            .bearer_auth(&admin)
            .json(&json!({"name": model, "budget": {"usd": 100, "period": "month"}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let (id, key) = (
            created["id"].as_str().unwrap(),
            created["value"].as_str().unwrap(),
        );
        let body = json!({"model": model, "temperature": 0,
            "messages": [{"role": "user", "content": fresh("count my hit")}]});
        let (status, cache, first) = post(&app, key, "/v1/chat/completions", &body, None).await;
        assert_eq!((status, cache.as_deref()), (200, Some("miss")));
        let first: Value = serde_json::from_str(&first).unwrap();
        let saved = first["usage"]["total_tokens"].as_i64().unwrap();
        let budget_path = format!("/v1/organization/projects/proj_default/api_keys/{id}");
        // The miss's settlement, then the hit's.
        let settled = |before: Option<i64>| {
            let path = budget_path.clone();
            let get = &admin_get;
            async move {
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let used = get(path.clone()).await["budget"]["used"].as_i64().unwrap();
                    if before.is_none_or(|b| used != b) || Instant::now() > deadline {
                        return used;
                    }
                }
            }
        };
        let after_miss = settled(None).await;
        hit(&app, key, "/v1/chat/completions", &body).await;
        let after_hit = match rate {
            Some(_) => settled(Some(after_miss)).await,
            None => {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                admin_get(budget_path.clone()).await["budget"]["used"]
                    .as_i64()
                    .unwrap()
            }
        };
        // At $10 per million tokens a token costs 10 micro-dollars.
        assert_eq!(
            after_hit - after_miss,
            rate.map_or(0, |r| r * saved),
            "{model}"
        );
        // Usage: two requests, one from the cache with the tokens it saved.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let usage = admin_get("/v1/admin/usage?days=1".into()).await;
            let row = usage["data"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["key_id"] == id)
                .cloned();
            if let Some(row) = row.filter(|r| r["requests"] == 2) {
                assert_eq!(row["cache_hits"], 1, "{row}");
                assert_eq!(row["cache_saved_tokens"], saved, "{row}");
                assert_eq!(
                    row["prompt_tokens"], first["usage"]["prompt_tokens"],
                    "{row}"
                );
                break;
            }
            assert!(Instant::now() < deadline, "{usage}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // The dashboard's usage page says so.
    let (browser, _) = app.signed_in("owner@example.com", true).await;
    let page = browser.get("/dashboard/usage").await;
    assert!(
        page.body.contains("answered from the response cache"),
        "{}",
        page.body
    );
}
