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
use svc_core::store::ResponseCacheStore;

on_both_backends!(
    an_entry_is_found_until_it_expires_and_replaced_in_place,
    the_sweep_keeps_the_newest_within_the_bound,
);

async fn an_entry_is_found_until_it_expires_and_replaced_in_place(db: &Db) {
    let store = db.store().await;
    assert_eq!(store.cached_response("k", 1_000).await.unwrap(), None);
    store
        .cache_response("k", "first", 1_000, 2_000)
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
        .cache_response("k", "second", 3_000, 9_000)
        .await
        .unwrap();
    assert_eq!(
        store.cached_response("k", 3_000).await.unwrap().as_deref(),
        Some("second")
    );
}

async fn the_sweep_keeps_the_newest_within_the_bound(db: &Db) {
    let store = db.store().await;
    // Ten bytes each, created at 1..=4; "gone" expired already.
    for (at, key) in [(1, "a"), (2, "b"), (3, "c"), (4, "d")] {
        store
            .cache_response(key, "0123456789", at, 100)
            .await
            .unwrap();
    }
    store.cache_response("gone", "x", 5, 50).await.unwrap();
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
