//! The request log's table on SQLite and PostgreSQL (each writes its own
//! way): every field of every row comes back as written, in order, and a
//! batch larger than one statement is written whole.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use common::Db;
use svc_core::request_log::{RequestLogEntry, RequestLogQuery};
use svc_core::store::RequestLogStore;

on_both_backends!(rows_come_back_as_written, a_large_batch_is_written_whole);

fn full(n: i64) -> RequestLogEntry {
    RequestLogEntry {
        id: format!("req_{n:024}"),
        started_at_ms: 1_795_000_000_000 + n,
        key_id: Some("key_0123456789abcdef".into()),
        project_id: Some("proj_x".into()),
        user_id: Some("user_1".into()),
        model: Some("svc \"quoted\" ✓".into()),
        dialect: "anthropic".into(),
        endpoint: "POST /v1/messages".into(),
        status: 529,
        error_type: Some("overloaded_error".into()),
        prompt_tokens: i64::MAX,
        cached_tokens: 3,
        completion_tokens: 4,
        cost_micros: 5_000_000_000,
        ttft_ms: Some(6),
        duration_ms: 7,
        upstream: Some("http://gpu1:8000/v1".into()),
    }
}

async fn rows_come_back_as_written(db: &Db) {
    let store = db.store().await;
    let sparse = RequestLogEntry {
        id: "req_sparse".into(),
        started_at_ms: 1,
        dialect: "openai".into(),
        endpoint: "GET /v1/models".into(),
        status: 200,
        ..RequestLogEntry::default()
    };
    store
        .insert_request_logs(&[full(1), sparse.clone()])
        .await
        .unwrap();
    let rows = store
        .list_request_logs(&RequestLogQuery {
            limit: 10,
            ..RequestLogQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(rows, [sparse, full(1)], "newest first, every field kept");
}

async fn a_large_batch_is_written_whole(db: &Db) {
    let store = db.store().await;
    let batch: Vec<RequestLogEntry> = (0..1_200).map(full).collect();
    store.insert_request_logs(&batch).await.unwrap();
    let rows = store
        .list_request_logs(&RequestLogQuery {
            limit: 2_000,
            ..RequestLogQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(rows.len(), 1_200);
    assert_eq!(rows[0], full(1_199));
    assert_eq!(rows[1_199], full(0));
}
