//! The UsageStore and ThrottleStore contract, run on SQLite and on PostgreSQL.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use common::{Db, join_all, new_key};
use svc_core::ids::{KeyId, UserId};
use svc_core::store::{KeyStore, ThrottleStore, UsageStore};
use svc_core::usage::{DayTotals, UsageDelta, UsageRow};

on_both_backends!(
    usage_accumulates_per_key_and_day,
    usage_since_filters_by_day_and_owner,
    usage_by_model_keeps_models_apart_with_the_keys_project,
    cached_tokens_add_up_in_every_view,
    cache_hits_add_up_in_every_view,
    concurrent_usage_adds_are_all_counted,
    throttle_counts_hits_in_a_window,
    throttle_window_resets_and_clears,
    concurrent_hits_are_all_counted,
    throttle_hits_are_taken_back_in_their_window_only,
    stale_throttles_are_deleted,
);

fn delta(key: &KeyId, day: &str, requests: i64, prompt: i64, completion: i64) -> UsageDelta {
    UsageDelta {
        key_id: key.clone(),
        day: day.into(),
        model: "svc".into(),
        requests,
        prompt_tokens: prompt,
        cached_tokens: 0,
        completion_tokens: completion,
        cache_hits: 0,
        cache_saved_tokens: 0,
        audio_seconds: 0,
        characters: 0,
    }
}

fn usage(key: &KeyId, day: &str, requests: i64, prompt: i64, completion: i64) -> UsageRow {
    UsageRow {
        key_id: key.clone(),
        day: day.into(),
        requests,
        prompt_tokens: prompt,
        cached_tokens: 0,
        completion_tokens: completion,
        cache_hits: 0,
        cache_saved_tokens: 0,
    }
}

async fn usage_accumulates_per_key_and_day(db: &Db) {
    let store = db.store().await;
    let key = KeyId("key_0000000000000001".into());
    let other = KeyId("key_0000000000000002".into());
    store
        .add_usage(&delta(&key, "2025-03-01", 1, 10, 20))
        .await
        .unwrap();
    store
        .add_usage(&delta(&key, "2025-03-01", 2, 5, 7))
        .await
        .unwrap();
    store
        .add_usage(&delta(&key, "2025-03-02", 1, 1, 1))
        .await
        .unwrap();
    store
        .add_usage(&delta(&other, "2025-03-01", 1, 100, 0))
        .await
        .unwrap();

    assert_eq!(
        store.usage_since(None, "2025-03-01").await.unwrap(),
        vec![
            usage(&key, "2025-03-01", 3, 15, 27),
            usage(&other, "2025-03-01", 1, 100, 0),
            usage(&key, "2025-03-02", 1, 1, 1),
        ]
    );
}

async fn usage_since_filters_by_day_and_owner(db: &Db) {
    let store = db.store().await;
    let alice = UserId::generate();
    let bob = UserId::generate();
    let (mut alice_1, h1) = new_key(Some(&alice.0), 1);
    let (mut alice_2, h2) = new_key(Some(&alice.0), 2);
    let (mut bob_1, h3) = new_key(Some(&bob.0), 3);
    let (mut ownerless, h4) = new_key(None, 4);
    alice_1.id = KeyId("key_a1".into());
    alice_2.id = KeyId("key_a2".into());
    bob_1.id = KeyId("key_b1".into());
    ownerless.id = KeyId("key_c1".into());
    for (record, hash) in [
        (&alice_1, h1),
        (&alice_2, h2),
        (&bob_1, h3),
        (&ownerless, h4),
    ] {
        store.insert_key(record, &hash).await.unwrap();
    }
    // A key that is gone from api_keys (or never was).
    let orphan = KeyId("key_d1".into());
    for (key, day) in [
        (&alice_2, "2025-02-28"),
        (&alice_2, "2025-03-10"),
        (&alice_1, "2025-03-10"),
        (&bob_1, "2025-03-10"),
        (&alice_1, "2025-03-01"),
        (&ownerless, "2025-03-05"),
    ] {
        store
            .add_usage(&delta(&key.id, day, 1, 2, 3))
            .await
            .unwrap();
    }
    store
        .add_usage(&delta(&orphan, "2025-03-02", 1, 2, 3))
        .await
        .unwrap();

    assert_eq!(
        store.usage_since(Some(&alice), "2025-03-01").await.unwrap(),
        vec![
            usage(&alice_1.id, "2025-03-01", 1, 2, 3),
            usage(&alice_1.id, "2025-03-10", 1, 2, 3),
            usage(&alice_2.id, "2025-03-10", 1, 2, 3),
        ]
    );
    assert_eq!(
        store.usage_since(Some(&bob), "2025-01-01").await.unwrap(),
        vec![usage(&bob_1.id, "2025-03-10", 1, 2, 3)]
    );
    assert_eq!(
        store
            .usage_since(Some(&UserId::generate()), "2025-01-01")
            .await
            .unwrap(),
        vec![]
    );
    assert_eq!(
        store.usage_since(None, "2025-03-02").await.unwrap(),
        vec![
            usage(&orphan, "2025-03-02", 1, 2, 3),
            usage(&ownerless.id, "2025-03-05", 1, 2, 3),
            usage(&alice_1.id, "2025-03-10", 1, 2, 3),
            usage(&alice_2.id, "2025-03-10", 1, 2, 3),
            usage(&bob_1.id, "2025-03-10", 1, 2, 3),
        ]
    );
    assert_eq!(store.usage_since(None, "2025-03-11").await.unwrap(), vec![]);

    // The newest rows, bounded in the query; and each day summed.
    assert_eq!(
        store.recent_usage(None, "2025-03-02", 2).await.unwrap(),
        vec![
            usage(&bob_1.id, "2025-03-10", 1, 2, 3),
            usage(&alice_2.id, "2025-03-10", 1, 2, 3),
        ]
    );
    assert_eq!(
        store
            .recent_usage(Some(&alice), "2025-01-01", 10)
            .await
            .unwrap(),
        vec![
            usage(&alice_2.id, "2025-03-10", 1, 2, 3),
            usage(&alice_1.id, "2025-03-10", 1, 2, 3),
            usage(&alice_1.id, "2025-03-01", 1, 2, 3),
            usage(&alice_2.id, "2025-02-28", 1, 2, 3),
        ]
    );
    let day = |day: &str, n: i64| DayTotals {
        day: day.into(),
        requests: n,
        prompt_tokens: 2 * n,
        cached_tokens: 0,
        completion_tokens: 3 * n,
        cache_hits: 0,
        cache_saved_tokens: 0,
    };
    assert_eq!(
        store.usage_by_day(None, "2025-03-01").await.unwrap(),
        vec![
            day("2025-03-01", 1),
            day("2025-03-02", 1),
            day("2025-03-05", 1),
            day("2025-03-10", 3),
        ]
    );
    assert_eq!(
        store
            .usage_by_day(Some(&alice), "2025-01-01")
            .await
            .unwrap(),
        vec![
            day("2025-02-28", 1),
            day("2025-03-01", 1),
            day("2025-03-10", 2)
        ]
    );
}

async fn concurrent_usage_adds_are_all_counted(db: &Db) {
    let stores = [db.store().await, db.store().await];
    let key = KeyId::generate();
    join_all(8, |n| {
        let store = stores[n % 2].clone();
        let key = key.clone();
        async move {
            for _ in 0..10 {
                store
                    .add_usage(&delta(&key, "2025-03-01", 1, 3, 5))
                    .await
                    .unwrap();
            }
        }
    })
    .await;
    assert_eq!(
        stores[0].usage_since(None, "2025-03-01").await.unwrap(),
        vec![usage(&key, "2025-03-01", 80, 240, 400)]
    );
}

async fn throttle_counts_hits_in_a_window(db: &Db) {
    let store = db.store().await;
    assert_eq!(store.hits("signin:a@example.com", 600).await.unwrap(), 0);
    assert_eq!(store.hit("signin:a@example.com", 600).await.unwrap(), 1);
    assert_eq!(store.hit("signin:a@example.com", 600).await.unwrap(), 2);
    assert_eq!(store.hit("signin:a@example.com", 600).await.unwrap(), 3);
    assert_eq!(store.hits("signin:a@example.com", 600).await.unwrap(), 3);
    // Buckets are independent.
    assert_eq!(store.hits("signin:b@example.com", 600).await.unwrap(), 0);
    assert_eq!(store.hit("signin:b@example.com", 600).await.unwrap(), 1);
    assert_eq!(store.hits("signin:a@example.com", 600).await.unwrap(), 3);
    // A later window has no hits yet.
    assert_eq!(store.hits("signin:a@example.com", 660).await.unwrap(), 0);
}

async fn throttle_window_resets_and_clears(db: &Db) {
    let store = db.store().await;
    let bucket = "code:203.0.113.7";
    for _ in 0..5 {
        store.hit(bucket, 600).await.unwrap();
    }
    // A new window starts the count again.
    assert_eq!(store.hit(bucket, 660).await.unwrap(), 1);
    assert_eq!(store.hits(bucket, 660).await.unwrap(), 1);
    // A replica a little behind, still in the old window, does not reset
    // the count: its hit counts in the newer window.
    assert_eq!(store.hit(bucket, 600).await.unwrap(), 2);
    assert_eq!(store.hits(bucket, 660).await.unwrap(), 2);
    assert_eq!(store.hits(bucket, 600).await.unwrap(), 2);

    store.clear(bucket).await.unwrap();
    assert_eq!(store.hits(bucket, 660).await.unwrap(), 0);
    assert_eq!(store.hit(bucket, 660).await.unwrap(), 1);
    // Clearing what is not there is no error.
    store.clear("never-hit").await.unwrap();
}

async fn concurrent_hits_are_all_counted(db: &Db) {
    let stores = [db.store().await, db.store().await];
    let counts = join_all(8, |n| {
        let store = stores[n % 2].clone();
        async move {
            let mut seen = Vec::new();
            for _ in 0..5 {
                seen.push(store.hit("signin:shared", 1_200).await.unwrap());
            }
            seen
        }
    })
    .await;
    // Every hit saw a different count: none was lost or counted twice.
    let mut all: Vec<i64> = counts.into_iter().flatten().collect();
    all.sort_unstable();
    assert_eq!(all, (1..=40).collect::<Vec<_>>());
    assert_eq!(stores[0].hits("signin:shared", 1_200).await.unwrap(), 40);
}

async fn throttle_hits_are_taken_back_in_their_window_only(db: &Db) {
    let store = db.store().await;
    let bucket = "signin-address:203.0.113.9";
    for _ in 0..3 {
        store.hit(bucket, 600).await.unwrap();
    }
    store.unhit(bucket, 600).await.unwrap();
    assert_eq!(store.hits(bucket, 600).await.unwrap(), 2);
    // An older window's hit is not taken from the newer count.
    assert_eq!(store.hit(bucket, 660).await.unwrap(), 1);
    store.unhit(bucket, 600).await.unwrap();
    assert_eq!(store.hits(bucket, 660).await.unwrap(), 1);
    // Never below zero; nothing there is no error.
    store.unhit(bucket, 660).await.unwrap();
    store.unhit(bucket, 660).await.unwrap();
    assert_eq!(store.hits(bucket, 660).await.unwrap(), 0);
    store.unhit("never-hit", 660).await.unwrap();
    assert_eq!(store.hit(bucket, 660).await.unwrap(), 1);
}

async fn stale_throttles_are_deleted(db: &Db) {
    let store = db.store().await;
    store.hit("old", 100).await.unwrap();
    store.hit("edge", 200).await.unwrap();
    store.hit("new", 300).await.unwrap();
    assert_eq!(store.delete_stale_throttles(200).await.unwrap(), 1);
    assert_eq!(store.hits("old", 100).await.unwrap(), 0);
    assert_eq!(store.hits("edge", 200).await.unwrap(), 1);
    assert_eq!(store.hits("new", 300).await.unwrap(), 1);
    assert_eq!(store.delete_stale_throttles(200).await.unwrap(), 0);
}

// Issue 32: prompt tokens served from a reused prefix are counted apart,
// and every view of usage sums them.
async fn cached_tokens_add_up_in_every_view(db: &Db) {
    let store = db.store().await;
    let (record, hash) = new_key(None, 1);
    store.insert_key(&record, &hash).await.unwrap();
    let with_cached = |model: &str, prompt: i64, cached: i64| UsageDelta {
        model: model.into(),
        cached_tokens: cached,
        ..delta(&record.id, "2025-04-01", 1, prompt, 1)
    };
    for d in [
        with_cached("svc", 100, 64),
        with_cached("svc", 50, 0),
        with_cached("other", 10, 8),
    ] {
        store.add_usage(&d).await.unwrap();
    }
    let since = store.usage_since(None, "2025-04-01").await.unwrap();
    assert_eq!(
        since
            .iter()
            .map(|r| (r.prompt_tokens, r.cached_tokens))
            .collect::<Vec<_>>(),
        vec![(160, 72)]
    );
    let recent = store.recent_usage(None, "2025-04-01", 10).await.unwrap();
    assert_eq!(recent, since);
    let days = store.usage_by_day(None, "2025-04-01").await.unwrap();
    assert_eq!(
        days.iter().map(|d| d.cached_tokens).collect::<Vec<_>>(),
        vec![72]
    );
    let by_model = store
        .usage_by_model("2025-04-01", "2025-04-02")
        .await
        .unwrap();
    let mut by_model: Vec<_> = by_model
        .iter()
        .map(|r| (r.model.as_str(), r.prompt_tokens, r.cached_tokens))
        .collect();
    by_model.sort();
    assert_eq!(by_model, vec![("other", 10, 8), ("svc", 150, 64)]);
}

async fn usage_by_model_keeps_models_apart_with_the_keys_project(db: &Db) {
    let store = db.store().await;
    let (record, hash) = new_key(None, 1);
    store.insert_key(&record, &hash).await.unwrap();
    let gone = KeyId("key_00000000000000ff".into());
    let add = |key: &KeyId, day: &str, model: &str, tokens: i64| UsageDelta {
        model: model.into(),
        ..delta(key, day, 1, tokens, 2 * tokens)
    };
    for d in [
        add(&record.id, "2025-03-01", "svc", 10),
        add(&record.id, "2025-03-01", "svc", 5),
        add(&record.id, "2025-03-01", "other", 1),
        add(&gone, "2025-03-01", "svc", 7),
        add(&record.id, "2025-03-03", "svc", 4),
    ] {
        store.add_usage(&d).await.unwrap();
    }
    let rows = store
        .usage_by_model("2025-03-01", "2025-03-03")
        .await
        .unwrap();
    let mut seen: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.key_id.0.as_str(),
                r.project_id.as_ref().map(|p| p.0.as_str()),
                r.day.as_str(),
                r.model.as_str(),
                r.requests,
                r.prompt_tokens,
                r.completion_tokens,
            )
        })
        .collect();
    // Ordered by day, key and model.
    let mut ordered = seen.clone();
    ordered.sort();
    assert_eq!(seen, ordered);
    seen.retain(|row| row.0 == record.id.0);
    let key = record.id.0.as_str();
    assert_eq!(
        seen,
        vec![
            (key, Some("proj_default"), "2025-03-01", "other", 1, 1, 2),
            (key, Some("proj_default"), "2025-03-01", "svc", 2, 15, 30),
        ]
    );
    // A key that is gone keeps its usage, in no project.
    let gone_rows: Vec<_> = rows.iter().filter(|r| r.key_id == gone).collect();
    assert_eq!(gone_rows.len(), 1);
    assert_eq!(
        (gone_rows[0].project_id.as_ref(), gone_rows[0].prompt_tokens),
        (None, 7)
    );
    // The per-key totals count every model.
    let totals = store.usage_since(None, "2025-03-01").await.unwrap();
    assert!(
        totals.contains(&usage(&record.id, "2025-03-01", 3, 16, 32)),
        "{totals:?}"
    );
}

async fn cache_hits_add_up_in_every_view(db: &Db) {
    let store = db.store().await;
    let (record, hash) = new_key(None, 1);
    store.insert_key(&record, &hash).await.unwrap();
    let hit = |model: &str, saved: i64| UsageDelta {
        model: model.into(),
        cache_hits: 1,
        cache_saved_tokens: saved,
        ..delta(&record.id, "2025-04-01", 1, 0, 0)
    };
    for d in [hit("svc", 30), hit("svc", 12), hit("other", 5)] {
        store.add_usage(&d).await.unwrap();
    }
    store
        .add_usage(&delta(&record.id, "2025-04-01", 1, 7, 3))
        .await
        .unwrap();
    let since = store.usage_since(None, "2025-04-01").await.unwrap();
    assert_eq!(
        since
            .iter()
            .map(|r| (r.requests, r.cache_hits, r.cache_saved_tokens))
            .collect::<Vec<_>>(),
        vec![(4, 3, 47)]
    );
    assert_eq!(
        store.recent_usage(None, "2025-04-01", 10).await.unwrap(),
        since
    );
    let days = store.usage_by_day(None, "2025-04-01").await.unwrap();
    assert_eq!(
        days.iter()
            .map(|d| (d.cache_hits, d.cache_saved_tokens))
            .collect::<Vec<_>>(),
        vec![(3, 47)]
    );
    let mut by_model: Vec<_> = store
        .usage_by_model("2025-04-01", "2025-04-02")
        .await
        .unwrap()
        .iter()
        .map(|r| (r.model.clone(), r.cache_hits, r.cache_saved_tokens))
        .collect();
    by_model.sort();
    assert_eq!(
        by_model,
        vec![("other".into(), 1, 5), ("svc".into(), 2, 42)]
    );
}
