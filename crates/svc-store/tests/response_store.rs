//! The ResponseStore contract, run on SQLite and on PostgreSQL.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use common::{Db, random_hex};
use svc_core::store::{ResponseStore, StoreError, StoredResponse};

on_both_backends!(
    responses_are_read_by_their_owner_only,
    expired_responses_are_not_served_and_are_swept,
    responses_are_deleted_by_their_owner_only,
    a_duplicate_id_is_a_conflict,
);

fn response(owner: &str, created_at: i64, expires_at: i64) -> StoredResponse {
    let id = format!("resp_{}", random_hex(12));
    StoredResponse {
        response: format!("{{\"id\":\"{id}\",\"text\":\"caf\u{e9} \u{1F600}\"}}"),
        conversation: "[{\"role\":\"user\",\"content\":\"hi\"}]".into(),
        id,
        owner: owner.into(),
        created_at,
        expires_at,
    }
}

async fn responses_are_read_by_their_owner_only(db: &Db) {
    let store = db.store().await;
    let mine = response("user:a", 100, 1000);
    store.insert_response(&mine).await.unwrap();
    let read = store.response_by_id(&mine.id, "user:a", 100).await.unwrap();
    assert_eq!(read.as_ref(), Some(&mine), "stored as given, text intact");
    assert_eq!(
        store.response_by_id(&mine.id, "user:b", 100).await.unwrap(),
        None
    );
    assert_eq!(
        store
            .response_by_id(&mine.id, "operator", 100)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .response_by_id("resp_none", "user:a", 100)
            .await
            .unwrap(),
        None
    );
    // Another replica sees it.
    let other = db.store().await;
    assert!(
        other
            .response_by_id(&mine.id, "user:a", 100)
            .await
            .unwrap()
            .is_some()
    );
}

async fn expired_responses_are_not_served_and_are_swept(db: &Db) {
    let store = db.store().await;
    let old = response("operator", 0, 100);
    let live = response("operator", 0, 200);
    store.insert_response(&old).await.unwrap();
    store.insert_response(&live).await.unwrap();
    assert!(
        store
            .response_by_id(&old.id, "operator", 99)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        store
            .response_by_id(&old.id, "operator", 100)
            .await
            .unwrap(),
        None,
        "expired at expires_at"
    );
    assert_eq!(store.delete_expired_responses(100).await.unwrap(), 1);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM responses").await, 1);
    assert!(
        store
            .response_by_id(&live.id, "operator", 100)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(store.delete_expired_responses(100).await.unwrap(), 0);
}

async fn responses_are_deleted_by_their_owner_only(db: &Db) {
    let store = db.store().await;
    let mine = response("user:a", 0, 1000);
    store.insert_response(&mine).await.unwrap();
    assert!(!store.delete_response(&mine.id, "user:b").await.unwrap());
    assert!(store.delete_response(&mine.id, "user:a").await.unwrap());
    assert!(!store.delete_response(&mine.id, "user:a").await.unwrap());
    assert_eq!(
        store.response_by_id(&mine.id, "user:a", 0).await.unwrap(),
        None
    );
}

async fn a_duplicate_id_is_a_conflict(db: &Db) {
    let store = db.store().await;
    let first = response("user:a", 0, 1000);
    store.insert_response(&first).await.unwrap();
    let again = StoredResponse {
        owner: "user:b".into(),
        ..first.clone()
    };
    assert!(matches!(
        store.insert_response(&again).await,
        Err(StoreError::Conflict)
    ));
}
