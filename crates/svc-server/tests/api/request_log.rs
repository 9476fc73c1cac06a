//! The request log (issue 33), on SQLite and PostgreSQL: a row for every
//! API request — a success (whole and streamed, in each dialect), a 4xx,
//! a 429, an engine failure, a client that went away — with its key,
//! model, status, tokens, cost and timings and never the prompt; listed
//! and filtered by `GET /v1/organization/request_logs`; written off the
//! request's path, so a hung database slows no request. Spans a trace
//! receiver does not take are counted.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use svc_core::request_log::{RequestLogEntry, RequestLogQuery};
use svc_core::store::RequestLogStore;
use svc_core::{KeyLimits, ModelPrice};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Database, TestApp};

use crate::body;

on_both_databases!(
    every_api_request_leaves_one_row_with_what_it_used,
    rows_older_than_the_retention_are_deleted,
    the_dashboard_shows_everyone_their_own_requests_and_admins_all,
    a_model_id_past_its_bound_is_refused_and_never_kept,
);

/// `GET /v1/organization/request_logs?query` with `key`, as JSON.
async fn request_logs(app: &TestApp, key: &str, query: &str) -> Value {
    let response = app
        .client
        .get(app.url(&format!("/v1/organization/request_logs?{query}")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// The rows, once at least `count` are written (the writer runs each
/// second).
async fn rows_once(app: &TestApp, admin: &str, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list = request_logs(app, admin, "limit=100").await;
        let rows = list["data"].as_array().unwrap().clone();
        // The listing itself is a row too, after the others.
        let rows: Vec<Value> = rows
            .into_iter()
            .filter(|r| r["endpoint"] != "GET /v1/organization/request_logs")
            .collect();
        if rows.len() >= count {
            return rows;
        }
        assert!(Instant::now() < deadline, "{count} rows expected: {rows:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn every_api_request_leaves_one_row_with_what_it_used(database: Database) {
    let mut prices = std::collections::BTreeMap::new();
    prices.insert(
        "svc".to_owned(),
        ModelPrice {
            input: 1.0,
            cached_input: None,
            output: 2.0,
            ..ModelPrice::default()
        },
    );
    let config = ServerConfig {
        prices,
        rate_limits: KeyLimits {
            requests_per_minute: Some(6),
            tokens_per_minute: None,
        },
        ..ServerConfig::default()
    };
    let app = TestApp::spawn_with(database, config).await;
    let admin = app.create_admin_key().await;
    let key = app.create_key().await;
    let secret_words = "the secret prompt words";

    // 1: whole, 2: streamed, 3: Anthropic's dialect.
    let whole = app.chat(&key, &body("svc", secret_words)).await;
    assert_eq!(whole.status(), 200);
    let whole_id = whole.headers()["x-request-id"].to_str().unwrap().to_owned();
    let mut streamed = body("svc", "hello there");
    streamed["stream"] = json!(true);
    let streamed = app.chat(&key, &streamed).await;
    assert_eq!(streamed.status(), 200);
    streamed.text().await.unwrap();
    let messages = app
        .client
        .post(app.url("/v1/messages"))
        .header("x-api-key", &key)
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "svc", "max_tokens": 20,
            "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(messages.status(), 200);
    // 4: a 400; 5: an engine failure; 6: a client that leaves mid-stream.
    let invalid = app
        .chat(
            &key,
            &json!({"model": "svc", "temperature": 3,
                "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(invalid.status(), 400);
    let failed = app
        .chat(&key, &body("fake-fail", "one two three four"))
        .await;
    assert_eq!(failed.status(), 500);
    let words = vec!["word"; 40].join(" ");
    let slow = json!({"model": "fake-slow", "stream": true,
        "messages": [{"role": "user", "content": words}]});
    let leaving = app.chat(&key, &slow).await;
    assert_eq!(leaving.status(), 200);
    let mut stream = leaving.bytes_stream();
    let mut received = String::new();
    while received.matches("\"content\":\"").count() < 3 {
        let chunk = stream.next().await.unwrap().unwrap();
        received.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(stream);
    // 7: past the limit of 6 a minute (a request refused early may not
    // have counted towards it: more, until one is refused).
    let mut more = 0;
    loop {
        more += 1;
        let reply = app.chat(&key, &body("svc", "again")).await;
        if reply.status() == 429 {
            break;
        }
        assert_eq!(reply.status(), 200);
        assert!(more < 4, "never limited");
    }
    // 8: no key.
    let unauthenticated = app.chat("sk-svc-not-a-key", &body("svc", "x")).await;
    assert_eq!(unauthenticated.status(), 401);

    let total = 7 + more;
    let rows = rows_once(&app, &admin, total).await;
    assert_eq!(rows.len(), total, "{rows:?}");
    let text = serde_json::to_string(&rows).unwrap();
    assert!(
        !text.contains("secret prompt"),
        "no prompt in the log: {text}"
    );
    assert!(!text.contains(&key), "no key in the log");
    // Newest first.
    let by_status =
        |status: u64| -> Vec<&Value> { rows.iter().filter(|r| r["status"] == status).collect() };
    let first = rows.last().unwrap();
    assert_eq!(first["id"], whole_id.as_str());
    assert_eq!(first["object"], "organization.request_log");
    assert_eq!(first["endpoint"], "POST /v1/chat/completions");
    assert_eq!(first["dialect"], "openai");
    assert_eq!(first["model"], "svc");
    assert_eq!(first["project_id"], "proj_default");
    assert!(first["api_key_id"].as_str().unwrap().starts_with("key_"));
    assert!(first["error_type"].is_null());
    let (prompt, completion) = (
        first["prompt_tokens"].as_i64().unwrap(),
        first["completion_tokens"].as_i64().unwrap(),
    );
    assert!(prompt > 0 && completion > 0, "{first}");
    // $1 and $2 per million tokens, in dollars.
    let cost = first["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - (prompt + 2 * completion) as f64 / 1e6).abs() < 1e-9,
        "{first}"
    );
    assert!(first["ttft_ms"].as_i64().is_some());
    assert!(first["duration_ms"].as_i64().unwrap() >= first["ttft_ms"].as_i64().unwrap());

    assert_eq!(by_status(200).len(), 3 + more - 1, "{rows:?}");
    let anthropic = rows.iter().find(|r| r["dialect"] == "anthropic").unwrap();
    assert_eq!(anthropic["endpoint"], "POST /v1/messages");
    assert!(anthropic["completion_tokens"].as_i64().unwrap() > 0);
    let invalid = by_status(400);
    assert_eq!(invalid[0]["error_type"], "invalid_request_error");
    assert_eq!(invalid[0]["model"], "svc", "refused once its body was read");
    let failed = by_status(500);
    assert_eq!(failed[0]["error_type"], "server_error");
    assert_eq!(failed[0]["model"], "fake-fail");
    let left = by_status(499);
    assert_eq!(left[0]["error_type"], "client_disconnected");
    assert_eq!(left[0]["model"], "fake-slow");
    assert!(
        left[0]["completion_tokens"].as_i64().unwrap() >= 2,
        "{:?}",
        left[0]
    );
    assert!(left[0]["ttft_ms"].as_i64().is_some(), "{:?}", left[0]);
    let limited = by_status(429);
    assert_eq!(limited[0]["error_type"], "requests");
    let unauthenticated = by_status(401);
    assert!(unauthenticated[0]["api_key_id"].is_null());

    // Filters: a class of statuses, a model, a key.
    let errors = request_logs(&app, &admin, "statuses[]=4xx&statuses[]=5xx").await;
    let mut statuses: Vec<u64> = errors["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [400, 401, 429, 499, 500], "{errors}");
    let slow = request_logs(&app, &admin, "models[]=fake-slow").await;
    assert_eq!(slow["data"].as_array().unwrap().len(), 1);
    let key_id = first["api_key_id"].as_str().unwrap();
    let mine = request_logs(&app, &admin, &format!("key_ids[]={key_id}&limit=3")).await;
    assert_eq!(mine["data"].as_array().unwrap().len(), 3);
    assert_eq!(mine["has_more"], true);
    let next = request_logs(
        &app,
        &admin,
        &format!(
            "key_ids[]={key_id}&limit=100&after={}",
            mine["last_id"].as_str().unwrap()
        ),
    )
    .await;
    assert_eq!(next["data"].as_array().unwrap().len(), total - 1 - 3);
    let bad = app
        .client
        .get(app.url("/v1/organization/request_logs?statuses[]=teapot"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    crate::expect_error(
        bad,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("statuses[]"),
    )
    .await;
    // Not for a key that cannot read the organization.
    let refused = app
        .client
        .get(app.url("/v1/organization/request_logs"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
}

// A database that stops answering (the table locked by another session)
// slows no request; the rows wait in memory and are written once it
// answers again.
#[tokio::test]
async fn a_hung_database_slows_no_request_and_loses_no_row() {
    let schema = TestSchema::create(&postgres_url()).await.unwrap();
    let app = TestApp::spawn_with(
        Database::Url(schema.url().to_owned()),
        ServerConfig::default(),
    )
    .await;
    let admin = app.create_admin_key().await;
    let key = app.create_key().await;
    // Warm: the key is known and the first row written.
    assert_eq!(app.chat(&key, &body("svc", "warm")).await.status(), 200);
    rows_once(&app, &admin, 1).await;

    let mut locker = sqlx_lock(schema.url()).await;
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let started = Instant::now();
        let reply = app.chat(&key, &body("svc", &format!("request {i}"))).await;
        assert_eq!(reply.status(), 200);
        slowest = slowest.max(started.elapsed());
    }
    // The writer is stuck on the lock; nothing was answered late.
    assert!(
        slowest < Duration::from_secs(2),
        "slowest request took {slowest:?}"
    );
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("svc_request_log_dropped_total 0"),
        "{metrics}"
    );
    let pending: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("svc_request_log_pending "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(pending >= 1, "rows wait in memory: {pending}");

    unlock(&mut locker).await;
    let rows = rows_once(&app, &admin, 21).await;
    assert_eq!(rows.len(), 21);
    drop(app);
    schema.remove().await.unwrap();
}

/// A session holding `request_logs` locked (every insert waits).
async fn sqlx_lock(url: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut connection = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut connection).await.unwrap();
    sqlx::query("LOCK TABLE request_logs IN ACCESS EXCLUSIVE MODE")
        .execute(&mut connection)
        .await
        .unwrap();
    connection
}

async fn unlock(connection: &mut sqlx::PgConnection) {
    sqlx::query("COMMIT").execute(connection).await.unwrap();
}

/// Issue 43: 100 requests naming an unknown model of 3.9 MB each put
/// 3.69 GB of model names in the request log. A model id is bounded
/// (`svc_api::MAX_MODEL_ID`) on every endpoint that names one, and the
/// refusal keeps none of it.
async fn a_model_id_past_its_bound_is_refused_and_never_kept(database: Database) {
    let app = TestApp::spawn_with(database, ServerConfig::default()).await;
    let admin = app.create_admin_key().await;
    let key = app.create_key().await;
    let long = "m".repeat(300_000);
    let text = json!([{"role": "user", "content": "hi"}]);
    let requests = [
        (
            "/v1/chat/completions",
            json!({"model": long, "messages": text}),
        ),
        ("/v1/completions", json!({"model": long, "prompt": "hi"})),
        ("/v1/embeddings", json!({"model": long, "input": "hi"})),
        ("/v1/responses", json!({"model": long, "input": "hi"})),
        (
            "/v1/messages",
            json!({"model": long, "max_tokens": 5, "messages": text}),
        ),
        (
            "/v1/messages/count_tokens",
            json!({"model": long, "messages": text}),
        ),
    ];
    for (path, request) in &requests {
        let response = app
            .client
            .post(app.url(path))
            .bearer_auth(&key)
            .json(request)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{path}");
        let error = response.text().await.unwrap();
        assert!(error.len() < 1_000, "{path}: the id is not echoed: {error}");
        assert!(error.contains("at most 256 bytes"), "{path}: {error}");
        if !path.starts_with("/v1/messages") {
            let error: Value = serde_json::from_str(&error).unwrap();
            assert_eq!(error["error"]["param"], "model", "{path}");
        }
    }
    // At the bound, a model id is read (and this one is unknown).
    let at_bound = app.chat(&key, &body(&"m".repeat(256), "hi")).await;
    assert_eq!(at_bound.status(), 404);
    let rows = rows_once(&app, &admin, requests.len() + 1).await;
    let listed = serde_json::to_string(&rows).unwrap();
    assert!(listed.len() < 20_000, "{} bytes listed", listed.len());
    assert!(
        rows.iter()
            .all(|r| r["model"].as_str().is_none_or(|m| m.len() <= 256))
    );
}

async fn rows_older_than_the_retention_are_deleted(database: Database) {
    // The server's own sweep (at start, then hourly) keeps a year here, so
    // that only the sweep called below deletes.
    let config = ServerConfig {
        request_log_retention: Duration::from_secs(365 * 86_400),
        ..ServerConfig::default()
    };
    let app = TestApp::spawn_with(database, config).await;
    let now_ms = chrono::Utc::now().timestamp_millis();
    let row = |id: &str, days_ago: i64| RequestLogEntry {
        id: id.to_owned(),
        started_at_ms: now_ms - days_ago * 86_400_000,
        dialect: "openai".into(),
        endpoint: "POST /v1/chat/completions".into(),
        status: 200,
        ..RequestLogEntry::default()
    };
    app.store
        .insert_request_logs(&[row("req_old", 31), row("req_new", 29)])
        .await
        .unwrap();
    let deleted = svc_core::request_log::sweep(&*app.store, 30 * 86_400)
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    let left = app
        .store
        .list_request_logs(&RequestLogQuery {
            limit: 10,
            ..RequestLogQuery::default()
        })
        .await
        .unwrap();
    let ids: Vec<&str> = left.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["req_new"]);
    // Off keeps everything.
    assert_eq!(
        svc_core::request_log::sweep(&*app.store, 0).await.unwrap(),
        0
    );
}

async fn the_dashboard_shows_everyone_their_own_requests_and_admins_all(database: Database) {
    let app = TestApp::spawn_with(database, ServerConfig::default()).await;
    let (admin, _) = app.signed_in("root@example.com", true).await;
    let (ada, ada_record) = app.signed_in("ada@example.com", false).await;
    let (bob, _) = app.signed_in("bob@example.com", false).await;
    let ada_key = app
        .create_scoped_key(Some(&ada_record.id), svc_core::KeyScope::default())
        .await;
    assert_eq!(
        app.chat(&ada_key, &body("svc", "hello")).await.status(),
        200
    );
    assert_eq!(
        app.chat(&ada_key, &json!({"model": "svc"})).await.status(),
        400
    );
    let admin_key = app.create_admin_key().await;
    rows_once(&app, &admin_key, 2).await;

    let mine = ada.get("/dashboard/requests").await;
    assert_eq!(mine.status, 200, "{}", mine.body);
    assert!(mine.body.contains("<h1>Requests</h1>"));
    assert_eq!(
        mine.body.matches("<tr id=\"req_").count(),
        2,
        "{}",
        mine.body
    );
    let failed = ada.get("/dashboard/requests?status=4xx").await;
    assert_eq!(failed.body.matches("<tr id=\"req_").count(), 1);
    assert!(failed.body.contains("invalid_request_error"));
    let bad = ada.get("/dashboard/requests?status=teapot").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("Enter the status"));

    let others = bob.get("/dashboard/requests").await;
    assert_eq!(others.status, 200);
    assert!(!others.body.contains("<tr id=\"req_"), "not Ada's");
    let everyone = admin.get("/dashboard/requests").await;
    assert!(everyone.body.contains("<tr id=\"req_"));
}

// A trace receiver that is down slows no request; the spans it did not
// take are counted in `/metrics`.
#[tokio::test]
async fn spans_a_receiver_refuses_are_counted_and_slow_nothing() {
    // A port that was open a moment ago and is closed now: refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let config = ServerConfig {
        otlp_endpoint: Some(endpoint.parse().unwrap()),
        ..ServerConfig::default()
    };
    let app = TestApp::spawn_with(Database::Sqlite, config).await;
    let key = app.create_key().await;
    let before = app.metrics().await;
    assert!(
        before.contains("svc_trace_spans_dropped_total 0"),
        "{before}"
    );
    for i in 0..3 {
        let started = Instant::now();
        let reply = app.chat(&key, &body("svc", &format!("request {i}"))).await;
        assert_eq!(reply.status(), 200);
        assert!(started.elapsed() < Duration::from_secs(2));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = app.metrics().await;
        let dropped: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("svc_trace_spans_dropped_total "))
            .unwrap()
            .parse()
            .unwrap();
        // Each chat request is at least its own span and authenticate's.
        if dropped >= 6 {
            break;
        }
        assert!(Instant::now() < deadline, "{metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
