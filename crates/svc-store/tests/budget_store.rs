//! Token budgets' counters on a real store, SQLite and PostgreSQL: a charge
//! is refused once the count reached the limit, settlements move the count
//! both ways, windows and scopes are apart, replicas racing on the last
//! tokens of a budget get at most one charge past it, and the counts of
//! past windows are swept.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use std::sync::Arc;

use common::{Db, join_all};
use svc_core::store::BudgetStore;

on_both_backends!(
    charges_stop_at_the_limit_and_settle_both_ways,
    racing_replicas_take_the_last_tokens_once,
    the_sweep_deletes_only_windows_that_started_before_its_time,
);

async fn charges_stop_at_the_limit_and_settle_both_ways(db: &Db) {
    let store = db.store().await;
    assert_eq!(store.budget_used("key:a", 100).await.unwrap(), 0);
    assert_eq!(
        store.charge_budget("key:a", 100, 50, 30).await.unwrap(),
        Some(30)
    );
    // Under the limit: charged, even past it.
    assert_eq!(
        store.charge_budget("key:a", 100, 50, 30).await.unwrap(),
        Some(60)
    );
    // At or past it: refused, nothing added.
    assert_eq!(
        store.charge_budget("key:a", 100, 50, 1).await.unwrap(),
        None
    );
    assert_eq!(store.budget_used("key:a", 100).await.unwrap(), 60);
    // A settlement gives back what an estimate was over...
    store.adjust_budget("key:a", 100, -25).await.unwrap();
    assert_eq!(store.budget_used("key:a", 100).await.unwrap(), 35);
    assert_eq!(
        store.charge_budget("key:a", 100, 50, 5).await.unwrap(),
        Some(40)
    );
    // ...or adds what it was under.
    store.adjust_budget("key:a", 100, 12).await.unwrap();
    assert_eq!(store.budget_used("key:a", 100).await.unwrap(), 52);
    // Another window, another scope: counted apart.
    assert_eq!(
        store.charge_budget("key:a", 200, 50, 7).await.unwrap(),
        Some(7)
    );
    assert_eq!(
        store.charge_budget("project:a", 100, 50, 9).await.unwrap(),
        Some(9)
    );
    assert_eq!(store.budget_used("key:a", 100).await.unwrap(), 52);
}

async fn racing_replicas_take_the_last_tokens_once(db: &Db) {
    let first = Arc::new(db.store().await);
    let second = Arc::new(db.store().await);
    first
        .charge_budget("project:p", 1, 1000, 990)
        .await
        .unwrap();
    // 40 requests of 20 tokens on two stores (two replicas, or two
    // processes on one SQLite file) find 10 tokens left.
    let outcomes = join_all(40, |i| {
        let store = if i % 2 == 0 {
            first.clone()
        } else {
            second.clone()
        };
        async move { store.charge_budget("project:p", 1, 1000, 20).await.unwrap() }
    })
    .await;
    let charged: Vec<i64> = outcomes.into_iter().flatten().collect();
    assert_eq!(charged, vec![1010], "only the first gets through");
    assert_eq!(first.budget_used("project:p", 1).await.unwrap(), 1010);
}

async fn the_sweep_deletes_only_windows_that_started_before_its_time(db: &Db) {
    let store = db.store().await;
    for (scope, window) in [
        ("key:a", 100),
        ("key:a", 200),
        ("project:b", 150),
        ("key:c", 300),
    ] {
        store.charge_budget(scope, window, 1000, 5).await.unwrap();
    }
    assert_eq!(store.sweep_budget_usage(200).await.unwrap(), 2);
    assert_eq!(store.budget_used("key:a", 100).await.unwrap(), 0);
    assert_eq!(store.budget_used("project:b", 150).await.unwrap(), 0);
    assert_eq!(store.budget_used("key:a", 200).await.unwrap(), 5);
    assert_eq!(store.budget_used("key:c", 300).await.unwrap(), 5);
    assert_eq!(store.sweep_budget_usage(200).await.unwrap(), 0);
}
