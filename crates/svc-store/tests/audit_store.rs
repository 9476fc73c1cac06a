//! The audit log and key rotation in the store, on both backends: the
//! upgrade of a database made before migration 0009, append-only entries,
//! their filters and cursors, retention, and rotation as one transaction.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use common::{Db, new_key};
use serde_json::json;
use sqlx::{AnyConnection, Connection};
use svc_core::audit::{Actor, ActorUser, AuditEntry, AuditQuery};
use svc_core::ids::{KeyId, ProjectId};
use svc_core::project::KeyKind;
use svc_core::store::{AuditStore, KeyStore};

on_both_backends!(
    a_database_from_before_the_audit_log_upgrades_with_its_keys_intact,
    entries_are_append_only_and_listed_by_filter_and_cursor,
    old_entries_are_deleted_by_retention_only,
    a_rotation_is_one_transaction_of_an_active_key,
);

async fn a_database_from_before_the_audit_log_upgrades_with_its_keys_intact(db: &Db) {
    let mut conn = db.migrated_before(9).await;
    // A key as svc wrote it after projects, before the audit log.
    let (record, hash) = new_key(None, 300);
    sqlx::query(
        "INSERT INTO api_keys (id, key_hash, name, hint, owner_id, created_via, created_at, \
         expires_at, rpm_limit, project_id, kind, permissions) \
         VALUES ($1, $2, $3, $4, NULL, 'cli', 300, 9999999999, 7, 'proj_default', 'restricted', \
         '[\"model.request\"]')",
    )
    .bind(record.id.0.as_str())
    .bind(hash.to_hex())
    .bind(record.name.as_str())
    .bind(record.hint.as_str())
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    // Opening it with this svc applies 0009: the key reads as before, with
    // no predecessor; the log is empty and takes entries.
    let store = db.store().await;
    let read = store.key_by_hash(&hash).await.unwrap().unwrap();
    assert_eq!(read.id, record.id);
    assert_eq!(read.rotated_from, None);
    assert_eq!(read.expires_at, Some(9_999_999_999));
    assert_eq!(read.limits.requests_per_minute, Some(7));
    assert!(matches!(read.kind, KeyKind::Restricted(_)));
    let everything = AuditQuery {
        limit: 100,
        ..AuditQuery::default()
    };
    assert!(store.list_audit(&everything).await.unwrap().is_empty());
    let entry = AuditEntry::new(
        "api_key.created",
        &Actor::Operator,
        json!({"id": read.id.0}),
    );
    store.insert_audit(&entry).await.unwrap();
    assert_eq!(store.list_audit(&everything).await.unwrap(), vec![entry]);
    // A second start changes nothing.
    drop(store);
    let again = db.store().await;
    assert_eq!(again.list_audit(&everything).await.unwrap().len(), 1);
}

/// An entry of `kind` at `at` by `actor`, in `project` when given.
fn entry(kind: &str, at: i64, actor: &Actor, project: Option<&str>) -> AuditEntry {
    let mut entry = AuditEntry::new(kind, actor, json!({"at": at}));
    entry.effective_at = at;
    entry.project = project.map(|p| (ProjectId(p.to_owned()), format!("name of {p}")));
    entry
}

fn ats(entries: &[AuditEntry]) -> Vec<i64> {
    entries
        .iter()
        .map(|e| e.details["at"].as_i64().unwrap())
        .collect()
}

async fn entries_are_append_only_and_listed_by_filter_and_cursor(db: &Db) {
    let store = db.store().await;
    let ada = Actor::Session {
        user: Some(ActorUser {
            id: Some(svc_core::ids::UserId("usr_ada".into())),
            email: "ada@example.com".into(),
        }),
        address: Some("10.0.0.1".into()),
    };
    let key = Actor::ApiKey {
        id: KeyId("key_admin".into()),
        owner: None,
    };
    let written = [
        entry("login.succeeded", 100, &ada, None),
        entry("api_key.created", 200, &ada, Some("proj_a")),
        entry("api_key.created", 300, &key, Some("proj_b")),
        entry("api_key.deleted", 400, &key, Some("proj_a")),
        entry("logout.succeeded", 500, &ada, None),
    ];
    for e in &written {
        store.insert_audit(e).await.unwrap();
    }
    let list = |query: AuditQuery| {
        let store = store.clone();
        async move {
            store
                .list_audit(&AuditQuery {
                    limit: if query.limit == 0 { 100 } else { query.limit },
                    ..query
                })
                .await
                .unwrap()
        }
    };
    let all = list(AuditQuery::default()).await;
    assert_eq!(ats(&all), [500, 400, 300, 200, 100], "newest first");
    assert_eq!(all[4], written[0], "read back whole");
    let of = |f: fn(&mut AuditQuery)| {
        let mut query = AuditQuery::default();
        f(&mut query);
        query
    };
    assert_eq!(
        ats(&list(of(
            |q| q.event_types = vec!["api_key.created".into(), "api_key.deleted".into()]
        ))
        .await),
        [400, 300, 200]
    );
    assert_eq!(
        ats(&list(of(|q| q.actor_ids = vec!["usr_ada".into()])).await),
        [500, 200, 100]
    );
    assert_eq!(
        ats(&list(of(|q| q.actor_ids = vec!["key_admin".into()])).await),
        [400, 300]
    );
    assert_eq!(
        ats(&list(of(|q| q.actor_emails = vec!["ada@example.com".into()])).await),
        [500, 200, 100]
    );
    assert_eq!(
        ats(&list(of(|q| q.project_ids = vec!["proj_a".into()])).await),
        [400, 200]
    );
    assert_eq!(
        ats(&list(of(|q| {
            q.gt = Some(100);
            q.lte = Some(400);
        }))
        .await),
        [400, 300, 200]
    );
    assert_eq!(
        ats(&list(of(|q| {
            q.gte = Some(200);
            q.lt = Some(400);
            q.project_ids = vec!["proj_b".into()];
        }))
        .await),
        [300]
    );
    // Cursors: one more than the limit tells there are more.
    let page = list(AuditQuery {
        limit: 2,
        after: Some(all[1].id.clone()),
        ..AuditQuery::default()
    })
    .await;
    assert_eq!(ats(&page), [300, 200, 100]);
    let back = list(AuditQuery {
        limit: 2,
        before: Some(all[3].id.clone()),
        ..AuditQuery::default()
    })
    .await;
    assert_eq!(
        ats(&back),
        [400, 300, 500],
        "the nearest two, then the extra"
    );
    let unknown = list(AuditQuery {
        after: Some("audit_log-nope".into()),
        ..AuditQuery::default()
    })
    .await;
    assert!(unknown.is_empty());

    // Nothing can change an entry, not even by hand.
    sqlx::any::install_default_drivers();
    let mut conn = AnyConnection::connect(db.url()).await.unwrap();
    let changed = sqlx::query("UPDATE audit_logs SET type = 'login.failed'")
        .execute(&mut conn)
        .await;
    assert!(changed.is_err(), "an update is refused");
    conn.close().await.unwrap();
    assert_eq!(list(AuditQuery::default()).await, all);
}

async fn old_entries_are_deleted_by_retention_only(db: &Db) {
    let store = db.store().await;
    for at in [100, 200, 300] {
        store
            .insert_audit(&entry("login.failed", at, &Actor::Operator, None))
            .await
            .unwrap();
    }
    assert_eq!(store.delete_audit_before(200).await.unwrap(), 1);
    assert_eq!(store.delete_audit_before(200).await.unwrap(), 0);
    let left = store
        .list_audit(&AuditQuery {
            limit: 10,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(ats(&left), [300, 200]);
}

async fn a_rotation_is_one_transaction_of_an_active_key(db: &Db) {
    let store = db.store().await;
    let (old, old_hash) = new_key(None, 100);
    store.insert_key(&old, &old_hash).await.unwrap();
    let version = store.keys_version();
    let (mut new, new_hash) = new_key(None, 1_000);
    new.rotated_from = Some(old.id.clone());
    new.limits.tokens_per_minute = Some(5);
    assert!(
        store
            .rotate_key(&old.id, 1_060, &new, &new_hash, 1_000)
            .await
            .unwrap()
    );
    assert_ne!(store.keys_version(), version, "announced as a key change");
    let old_read = store.key_by_id(&old.id).await.unwrap().unwrap();
    assert_eq!(old_read.expires_at, Some(1_060));
    assert_eq!(old_read.revoked_at, None);
    let new_read = store.key_by_hash(&new_hash).await.unwrap().unwrap();
    assert_eq!(new_read.rotated_from, Some(old.id.clone()));
    assert_eq!(new_read.limits.tokens_per_minute, Some(5));

    // An expired (at 2_000), a revoked and a missing key are not rotated,
    // and nothing is written.
    for (id, at) in [
        (old.id.clone(), 2_000),
        (KeyId("key_missing".into()), 1_000),
    ] {
        let (mut other, other_hash) = new_key(None, at);
        other.rotated_from = Some(id.clone());
        assert!(
            !store
                .rotate_key(&id, at + 60, &other, &other_hash, at)
                .await
                .unwrap()
        );
        assert!(store.key_by_hash(&other_hash).await.unwrap().is_none());
    }
    assert!(store.revoke_key(&new.id, 1_001).await.unwrap());
    let (third, third_hash) = new_key(None, 1_002);
    assert!(
        !store
            .rotate_key(&new.id, 1_100, &third, &third_hash, 1_002)
            .await
            .unwrap()
    );
    assert!(store.key_by_hash(&third_hash).await.unwrap().is_none());
    assert_eq!(
        store.key_by_id(&new.id).await.unwrap().unwrap().expires_at,
        None,
        "a revoked key's expiry is not moved"
    );
}
