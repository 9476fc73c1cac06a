//! The response cache's table on SQLite and PostgreSQL: an entry is found
//! until it expires, replaced in place, and the sweep deletes the expired
//! and then the oldest past the size bound.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use common::Db;
use svc_core::response_cache::CacheEntry;
use svc_core::store::ResponseCacheStore;

fn entry(key: &str, value: &str, created_at_ms: i64, expires_at_ms: i64) -> CacheEntry {
    CacheEntry {
        key: key.into(),
        value: value.into(),
        created_at_ms,
        expires_at_ms,
    }
}

on_both_backends!(
    an_entry_is_found_until_it_expires_and_replaced_in_place,
    the_sweep_keeps_the_newest_within_the_bound,
);

async fn an_entry_is_found_until_it_expires_and_replaced_in_place(db: &Db) {
    let store = db.store().await;
    assert_eq!(store.cached_response("k", 1_000).await.unwrap(), None);
    store
        .cache_responses(&[entry("k", "first", 1_000, 2_000)])
        .await
        .unwrap();
    assert_eq!(
        store.cached_response("k", 1_999).await.unwrap().as_deref(),
        Some("first")
    );
    assert_eq!(
        store.cached_response("k", 2_000).await.unwrap(),
        None,
        "expired"
    );
    store
        .cache_responses(&[entry("k", "second", 3_000, 9_000)])
        .await
        .unwrap();
    assert_eq!(
        store.cached_response("k", 3_000).await.unwrap().as_deref(),
        Some("second")
    );
}

async fn the_sweep_keeps_the_newest_within_the_bound(db: &Db) {
    let store = db.store().await;
    // Ten bytes each, created at 1..=4, in one batch; "gone" expired already.
    let batch: Vec<CacheEntry> = [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
        .into_iter()
        .map(|(at, key)| entry(key, "0123456789", at, 100))
        .collect();
    store.cache_responses(&batch).await.unwrap();
    store
        .cache_responses(&[entry("gone", "x", 5, 50)])
        .await
        .unwrap();
    let deleted = store.sweep_response_cache(60, 25).await.unwrap();
    assert_eq!(deleted, 3, "the expired one and the two oldest");
    for (key, kept) in [
        ("a", false),
        ("b", false),
        ("c", true),
        ("d", true),
        ("gone", false),
    ] {
        assert_eq!(
            store.cached_response(key, 60).await.unwrap().is_some(),
            kept,
            "{key}"
        );
    }
}
