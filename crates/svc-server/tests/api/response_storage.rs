//! What stored Responses API responses may cost (issue 29, findings 2
//! and 3), on SQLite and PostgreSQL: input items that never reach the
//! prompt count against the request's limits and are not stored; a
//! conversation continued through `previous_response_id` stores each turn
//! once; continuing one reads a bounded conversation, off the async
//! workers, so that memory stays flat and `/health` answers meanwhile;
//! rows an attack left before the upgrade are refused, not read.
//!
//! "Bytes stored" is what the rows hold (their text, before any
//! compression the database applies), read past the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use svc_core::{KeyKind, KeyScope, ModelAccess};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Database, TestApp};

use crate::expect_error;
use crate::responses::post;

on_both_databases!(
    items_left_out_of_the_prompt_count_against_the_limits_and_are_not_stored,
    a_chain_stores_each_turn_once_and_is_continued_in_bounded_memory,
    a_huge_conversation_stored_before_the_upgrade_is_refused_unread,
    a_project_past_its_storage_quota_is_refused_before_generating,
    a_response_that_does_not_fit_the_quota_with_its_output_is_not_kept,
    deleting_a_turn_keeps_the_conversations_that_continue_it,
);

async fn create(app: &TestApp, key: &str, body: &Value) -> Value {
    let response = post(app, key, body).await;
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

/// Lowercase hex of `bytes` random bytes: text no database compresses
/// much.
fn random_text(bytes: usize) -> String {
    let mut text = String::with_capacity(bytes);
    while text.len() < bytes {
        text.push_str(&format!("{:016x}", rand::random::<u64>()));
    }
    text.truncate(bytes);
    text
}

/// The bytes of text every stored response holds together.
async fn stored_bytes(database_url: &str) -> i64 {
    let sql = if database_url.starts_with("sqlite") {
        "SELECT CAST(COALESCE(SUM(length(CAST(response AS BLOB)) \
         + length(CAST(conversation AS BLOB))), 0) AS BIGINT) FROM responses"
    } else {
        "SELECT CAST(COALESCE(SUM(octet_length(response) + octet_length(conversation)), 0) \
         AS BIGINT) FROM responses"
    };
    svc_store::testing::scalar(database_url, sql).await.unwrap()
}

/// This process's resident memory in KiB (the server runs in it).
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The highest resident memory while it runs, sampled every 5 ms on a
/// thread of its own, so that a stalled runtime cannot hide a peak.
struct PeakMemory {
    stop: Arc<AtomicBool>,
    sampler: std::thread::JoinHandle<u64>,
}

impl PeakMemory {
    fn start() -> PeakMemory {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let sampler = std::thread::spawn(move || {
            let mut peak = resident_kib();
            while !stopped.load(Ordering::Relaxed) {
                peak = peak.max(resident_kib());
                std::thread::sleep(Duration::from_millis(5));
            }
            peak.max(resident_kib())
        });
        PeakMemory { stop, sampler }
    }

    /// The peak, in KiB.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.sampler.join().unwrap()
    }
}

/// Most the server's memory may grow while 8 continuations run at once:
/// what one bounded conversation and its parse take, times the 8, with
/// room for whatever else the test process does meanwhile.
const CONTINUATIONS_MAY_GROW_KIB: u64 = 64 * 1024;

/// Sends `body` 8 times at once while `/health` is asked every 50 ms,
/// measuring the process's resident memory; returns the answers (status,
/// body), the longest `/health` took from when it was due (a stalled
/// runtime delays both the asking and the answer) and how much the memory
/// grew (KiB).
async fn eight_at_once(
    app: &TestApp,
    key: &str,
    body: &Value,
) -> (Vec<(u16, Value)>, Duration, u64) {
    let before = resident_kib();
    let peak = PeakMemory::start();
    let done = AtomicBool::new(false);
    let requests = async {
        let answers = futures::future::join_all((0..8).map(|_| async {
            let response = post(app, key, body).await;
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }))
        .await;
        done.store(true, Ordering::Relaxed);
        answers
    };
    let health = async {
        let mut slowest = Duration::ZERO;
        loop {
            let due = Instant::now() + Duration::from_millis(50);
            tokio::time::sleep_until(due.into()).await;
            let response = app.client.get(app.url("/health")).send().await.unwrap();
            assert_eq!(response.status(), 200);
            slowest = slowest.max(due.elapsed());
            if done.load(Ordering::Relaxed) {
                return slowest;
            }
        }
    };
    let (answers, health_took) = tokio::join!(requests, health);
    let grew = peak.stop().saturating_sub(before);
    (answers, health_took, grew)
}

/// Finding 2, flat: one key sent items that never reach the prompt
/// (a `web_search_call` with a 3.9 MB `id`), which were stored whole
/// (879 MB in 70 s). Every item now counts against the 1 MiB the input may
/// hold, and what the prompt cannot use is not kept.
async fn items_left_out_of_the_prompt_count_against_the_limits_and_are_not_stored(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let key = app.create_key().await;

    // 16 requests, 4 at a time, each with 900 kB in an item the prompt
    // leaves out: under the limit, answered, and none of it kept.
    let body = |i: usize| {
        json!({"model": "svc", "input": [
            {"type": "web_search_call", "id": random_text(900_000), "status": "completed"},
            {"role": "user", "content": format!("question {i}")}
        ]})
    };
    for round in 0..4 {
        let replies = futures::future::join_all((0..4).map(|i| {
            let body = body(round * 4 + i);
            let app = &app;
            let key = &key;
            async move { create(app, key, &body).await }
        }))
        .await;
        for reply in replies {
            assert_eq!(reply["status"], "completed");
        }
    }
    let stored = stored_bytes(&app.database_url).await;
    eprintln!("16 responses with 900 kB of web_search_call each: {stored} bytes stored");
    assert!(
        stored < 16 * 8 * 1024,
        "16 responses stored {stored} bytes: the items the prompt leaves out were kept"
    );

    // The finding's item: 3.9 MB in one id is past the limit, and named.
    let huge = json!({"model": "svc", "input": [
        {"role": "user", "content": "hi"},
        {"type": "web_search_call", "id": random_text(3_900_000), "status": "completed"}
    ]});
    let message = expect_error(
        post(&app, &key, &huge).await,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("input[1]"),
    )
    .await;
    assert!(message.contains("1048576"), "{message}");
    // Every item counts: two of 600 kB are over together, and the second
    // is named.
    let two = json!({"model": "svc", "input": [
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": random_text(600_000)}]},
        {"type": "reasoning", "id": "rs_2", "summary": [],
         "content": [{"type": "reasoning_text", "text": random_text(600_000)}]},
        {"role": "user", "content": "hi"}
    ]});
    expect_error(
        post(&app, &key, &two).await,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("input[1]"),
    )
    .await;
    assert_eq!(stored_bytes(&app.database_url).await, stored);
}

/// Finding 2, chained, and finding 3: every turn through
/// `previous_response_id` stored the whole conversation again (33 turns
/// stored 2,639 MB), and continuing it parsed all of it on an async worker
/// (8 at once: 420 MB to 1,814 MB of memory, `/health` 4.57 s). Each turn
/// now stores only what it adds, the conversation is read as a chain, and
/// 8 continuations of it at once leave memory and `/health` as they were.
async fn a_chain_stores_each_turn_once_and_is_continued_in_bounded_memory(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let key = app.create_key().await;
    const TURNS: usize = 20;
    let mut previous: Option<String> = None;
    let mut last = Value::Null;
    for turn in 1..=TURNS {
        let mut body = json!({"model": "svc", "input": [
            {"type": "reasoning", "id": format!("rs_{turn}"), "summary": [],
             "content": [{"type": "reasoning_text", "text": random_text(900_000)}]},
            {"role": "user", "content": format!("turn {turn}")}
        ]});
        if let Some(id) = &previous {
            body["previous_response_id"] = json!(id);
        }
        last = create(&app, &key, &body).await;
        previous = Some(last["id"].as_str().unwrap().to_owned());
    }
    // The whole conversation reached the prompt: per earlier turn "turn i"
    // (3 tokens) and "You said: turn i" (5), then "turn 20" (3).
    assert_eq!(last["usage"]["input_tokens"], 8 * (TURNS - 1) + 3);
    let stored = stored_bytes(&app.database_url).await;
    eprintln!("{TURNS} chained turns with 900 kB of reasoning each: {stored} bytes stored");

    // Eight continuations of the last turn at once.
    let next =
        json!({"model": "svc", "input": "again", "previous_response_id": previous, "store": false});
    let (answers, health_took, grew) = eight_at_once(&app, &key, &next).await;
    eprintln!(
        "8 continuations of {TURNS} turns at once: /health in {health_took:?}, memory grew {grew} KiB"
    );
    assert!(
        health_took < Duration::from_secs(1),
        "/health took {health_took:?}"
    );
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(body["usage"]["input_tokens"], 8 * TURNS + 2, "{body}");
    }
    assert!(
        grew < CONTINUATIONS_MAY_GROW_KIB,
        "8 continuations grew memory by {grew} KiB"
    );
    assert!(
        stored < (TURNS as i64) * 8 * 1024,
        "{TURNS} turns stored {stored} bytes: turns were stored more than once"
    );
}

/// A row stored before the upgrade by the attack of finding 2 (its whole
/// conversation in one row, 32 MB of it an item the prompt never used),
/// beside an ordinary one, in the schema as it was.
async fn database_with_old_rows(db: Database) -> (String, Option<tempfile::TempDir>) {
    let (url, dir) = match db {
        Database::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let url = svc_store::SqlStore::data_dir_url(dir.path()).unwrap();
            (url, Some(dir))
        }
        Database::Url(url) => (url, None),
    };
    svc_store::testing::migrate_before(&url, 14).await.unwrap();
    let now = svc_core::now();
    let response = |id: &str, said: &str| {
        let request: svc_api::responses::CreateResponseRequest =
            serde_json::from_value(json!({"model": "svc", "input": "x"})).unwrap();
        let valid = svc_server::fuzzing::ValidResponseRequest::try_from(request).unwrap();
        let mut response = valid.response(id.into(), now);
        response.status = "completed".into();
        response.output = vec![svc_api::responses::OutputItem::Message {
            id: format!("msg_{id}"),
            role: "assistant".into(),
            status: "completed".into(),
            content: vec![svc_api::responses::OutputText::new(said.into())],
        }];
        serde_json::to_string(&response).unwrap()
    };
    let huge = json!([
        {"type": "web_search_call", "id": random_text(32_000_000), "status": "completed"},
        {"role": "user", "content": "one"}
    ]);
    let small = json!([{"role": "user", "content": "one"}]);
    for (id, conversation) in [("resp_oldhuge", huge), ("resp_oldsmall", small)] {
        let sql = format!(
            "INSERT INTO responses (id, owner, created_at, expires_at, response, conversation) \
             VALUES ('{id}', 'operator', {now}, {}, '{}', '{}')",
            now + 3600,
            response(id, "You said: one"),
            conversation,
        );
        svc_store::testing::execute(&url, &sql).await.unwrap();
    }
    (url, dir)
}

/// Finding 3 on what finding 2's flat attack left before the upgrade: a
/// continuation of a 32 MB stored conversation is refused from the sizes
/// the store keeps, without reading it, 8 at once; an ordinary row stored
/// then still continues.
async fn a_huge_conversation_stored_before_the_upgrade_is_refused_unread(db: Database) {
    let (url, _dir) = database_with_old_rows(db).await;
    let app = TestApp::spawn_with(Database::Url(url), ServerConfig::default()).await;
    let key = app.create_key().await;

    let next = json!({"model": "svc", "input": "two", "previous_response_id": "resp_oldhuge"});
    let (answers, health_took, grew) = eight_at_once(&app, &key, &next).await;
    eprintln!(
        "8 continuations of a 32 MB conversation at once: /health in {health_took:?}, memory grew {grew} KiB"
    );
    assert!(
        health_took < Duration::from_secs(1),
        "/health took {health_took:?}"
    );
    assert!(
        grew < CONTINUATIONS_MAY_GROW_KIB,
        "8 refused continuations grew memory by {grew} KiB"
    );
    for (status, body) in &answers {
        assert_eq!(*status, 400, "{body}");
        assert_eq!(body["error"]["param"], "previous_response_id", "{body}");
        assert_eq!(body["error"]["code"], "invalid_value", "{body}");
    }

    // An ordinary row from before reads and continues as it did:
    // "one" (2) + "You said: one" (4) + "two" (2).
    let read = app
        .client
        .get(app.url("/v1/responses/resp_oldsmall"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    let next = json!({"model": "svc", "input": "two", "previous_response_id": "resp_oldsmall"});
    let reply = create(&app, &key, &next).await;
    assert_eq!(reply["usage"]["input_tokens"], 8);
    let again = json!({"model": "svc", "input": "three", "previous_response_id": reply["id"]});
    let reply = create(&app, &key, &again).await;
    assert_eq!(reply["usage"]["input_tokens"], 14);
}

/// The quota by number: the third response of a project with room for
/// two is refused (400 on `store`, naming the setting) before the engine
/// is asked; `store: false`, another project, and a deletion make room.
async fn a_project_past_its_storage_quota_is_refused_before_generating(db: Database) {
    let config = ServerConfig {
        response_quota_count: 2,
        ..ServerConfig::default()
    };
    let app = TestApp::spawn_with(db, config).await;
    let key = app.create_key().await;
    let body = json!({"model": "svc", "input": "hi"});
    let first = create(&app, &key, &body).await;
    create(&app, &key, &body).await;
    let started = app.probe.started.load(Ordering::Relaxed);
    let message = expect_error(
        post(&app, &key, &body).await,
        400,
        "invalid_request_error",
        "storage_quota_exceeded",
        Some("store"),
    )
    .await;
    assert!(message.contains("response_quota_count"), "{message}");
    assert!(message.contains("2 stored responses"), "{message}");
    assert_eq!(
        app.probe.started.load(Ordering::Relaxed),
        started,
        "nothing was generated"
    );
    // Streamed, the same 400 before any event.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    expect_error(
        post(&app, &key, &streamed).await,
        400,
        "invalid_request_error",
        "storage_quota_exceeded",
        Some("store"),
    )
    .await;
    let unstored = json!({"model": "svc", "input": "hi", "store": false});
    create(&app, &key, &unstored).await;

    // Another project has its own quota.
    let project = app.create_project("other", ModelAccess::any()).await;
    let elsewhere = app
        .create_scoped_key(
            None,
            KeyScope {
                project_id: Some(project.id.clone()),
                kind: KeyKind::All,
                ..KeyScope::default()
            },
        )
        .await;
    create(&app, &elsewhere, &body).await;

    // Deleting one makes room.
    let deleted = app
        .client
        .delete(app.url(&format!("/v1/responses/{}", first["id"].as_str().unwrap())))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    create(&app, &key, &body).await;
}

/// The quota by bytes, checked again with the output when the response
/// is stored: a response whose input fits but not with its output is
/// refused, whole (400) or at the end of its stream (`error`, then
/// `response.failed`), and nothing of it is kept.
async fn a_response_that_does_not_fit_the_quota_with_its_output_is_not_kept(db: Database) {
    let config = ServerConfig {
        response_quota_bytes: 600,
        ..ServerConfig::default()
    };
    let app = TestApp::spawn_with(db, config).await;
    let key = app.create_key().await;
    let body = json!({"model": "svc", "input": "one two three"});
    let message = expect_error(
        post(&app, &key, &body).await,
        400,
        "invalid_request_error",
        "storage_quota_exceeded",
        Some("store"),
    )
    .await;
    assert!(message.contains("response_quota_bytes"), "{message}");
    assert_eq!(
        app.probe.started.load(Ordering::Relaxed),
        1,
        "generated, then refused"
    );

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let response = post(&app, &key, &streamed).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["error", "response.failed"],
        "{kinds:?}"
    );
    assert!(!kinds.contains(&"response.completed"), "{kinds:?}");
    let error = &events[events.len() - 2];
    assert_eq!(error["code"], "storage_quota_exceeded");
    assert_eq!(error["param"], "store");
    let failed = &events[events.len() - 1]["response"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(
        failed["output"][0]["content"][0]["text"],
        "You said: one two three"
    );
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], i);
    }
    let id = failed["id"].as_str().unwrap();
    let read = app
        .client
        .get(app.url(&format!("/v1/responses/{id}")))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 404);
    assert_eq!(stored_bytes(&app.database_url).await, 0);
}

/// Deleting a turn of a conversation: it is not served or continued any
/// more, the turns that continue it keep their whole conversation, and
/// once they are deleted too nothing is left.
async fn deleting_a_turn_keeps_the_conversations_that_continue_it(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let key = app.create_key().await;
    let first = create(&app, &key, &json!({"model": "svc", "input": "one"})).await;
    let second = create(
        &app,
        &key,
        &json!({"model": "svc", "input": "two", "previous_response_id": first["id"]}),
    )
    .await;
    let delete = |id: &Value| {
        let request = app
            .client
            .delete(app.url(&format!("/v1/responses/{}", id.as_str().unwrap())))
            .bearer_auth(&key);
        async move { request.send().await.unwrap().status() }
    };
    assert_eq!(delete(&first["id"]).await, 200);
    let read = app
        .client
        .get(app.url(&format!("/v1/responses/{}", first["id"].as_str().unwrap())))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    expect_error(read, 404, "invalid_request_error", "not_found", None).await;
    expect_error(
        post(
            &app,
            &key,
            &json!({"model": "svc", "input": "x", "previous_response_id": first["id"]}),
        )
        .await,
        404,
        "invalid_request_error",
        "not_found",
        Some("previous_response_id"),
    )
    .await;
    // "one" (2) + "You said: one" (4) + "two" (2) + "You said: two" (4)
    // + "three" (2).
    let third = create(
        &app,
        &key,
        &json!({"model": "svc", "input": "three", "previous_response_id": second["id"]}),
    )
    .await;
    assert_eq!(third["usage"]["input_tokens"], 14);
    assert_eq!(delete(&third["id"]).await, 200);
    assert_eq!(delete(&second["id"]).await, 200);
    assert_eq!(stored_bytes(&app.database_url).await, 0);
}
