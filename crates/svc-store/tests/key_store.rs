//! The KeyStore and HealthStore contract, run on SQLite and on PostgreSQL.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unreachable,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use std::time::{Duration, Instant};

use common::{Db, new_key};
use std::sync::Arc;
use svc_core::ids::{KeyId, UserId};
use svc_core::key::{ApiKey, KeyLimits, KeyOrigin};

use svc_core::keys::{AUTH_CACHE_TTL, KeyService, KeyState, NewKey};
use svc_core::store::{HealthStore, KeyStore, StoreError};
use svc_store::SqlStore;

on_both_backends!(
    stored_keys_are_found_by_hash_and_id,
    duplicate_hash_or_id_is_a_conflict,
    list_is_newest_first_and_filters_by_owner,
    revoking_twice_reports_false,
    rate_limits_are_stored_per_key,
    touch_records_the_latest_use,
    expired_keys_are_still_returned,
    ping_answers,
    two_stores_see_each_others_writes_at_once,
    key_changes_change_every_stores_version,
    authentication_reuses_a_key_only_until_it_changes,
    concurrent_connects_and_writers_all_succeed,
    every_origin_reads_back_and_an_unknown_one_is_an_error,
);

async fn every_origin_reads_back_and_an_unknown_one_is_an_error(db: &Db) {
    let store = db.store().await;
    for origin in [
        KeyOrigin::Cli,
        KeyOrigin::Dashboard,
        KeyOrigin::Device,
        KeyOrigin::Api,
    ] {
        let (mut record, hash) = new_key(Some("usr_1"), 10);
        record.created_via = origin;
        store.insert_key(&record, &hash).await.unwrap();
        let stored = store.key_by_id(&record.id).await.unwrap().unwrap();
        assert_eq!(stored.created_via, origin);
        assert_eq!(stored.owner_id, Some(UserId("usr_1".into())));
        let column = format!(
            "SELECT COUNT(*) FROM api_keys WHERE id = '{}' AND created_via = '{origin}'",
            record.id
        );
        assert_eq!(db.scalar(&column).await, 1, "stored as before");
    }

    // A row this svc did not write (a newer one, or a hand edit).
    let (record, hash) = new_key(None, 20);
    store.insert_key(&record, &hash).await.unwrap();
    db.execute(&format!(
        "UPDATE api_keys SET created_via = 'import' WHERE id = '{}'",
        record.id
    ))
    .await;
    for read in [
        store.key_by_id(&record.id).await,
        store.key_by_hash(&hash).await,
    ] {
        match read {
            Err(StoreError::Database(message)) => {
                assert!(message.contains("created_via"), "{message}");
                assert!(message.contains("\"import\""), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        store.list_keys(None).await,
        Err(StoreError::Database(_))
    ));
}

/// `store`'s keys version once it has one (PostgreSQL's listener starts in
/// the background), and different from `not` when given.
async fn version_of(store: &SqlStore, not: Option<u64>) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match store.keys_version() {
            Some(v) if Some(v) != not => return v,
            _ if Instant::now() > deadline => {
                panic!("no keys version other than {not:?} within 5 s")
            }
            _ => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

async fn key_changes_change_every_stores_version(db: &Db) {
    let a = db.store().await;
    let b = db.store().await;
    let (record, hash) = new_key(None, 10);
    let (va, vb) = (version_of(&a, None).await, version_of(&b, None).await);

    // Inserting and using keys changes nothing that was read before.
    a.insert_key(&record, &hash).await.unwrap();
    b.touch_key(&record.id, 20).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!((a.keys_version(), b.keys_version()), (Some(va), Some(vb)));

    // A revocation changes the revoker's version at once, and the other
    // store's as soon as it can know.
    assert!(b.revoke_key(&record.id, 30).await.unwrap());
    assert_ne!(b.keys_version(), Some(vb));
    let (va, vb) = (version_of(&a, Some(va)).await, version_of(&b, None).await);

    assert!(
        a.set_key_limits(&record.id, KeyLimits::default())
            .await
            .unwrap()
    );
    assert_ne!(a.keys_version(), Some(va));
    version_of(&b, Some(vb)).await;
    // What does not change a key announces nothing.
    let va = version_of(&a, None).await;
    assert!(!a.revoke_key(&KeyId::generate(), 40).await.unwrap());
    assert_eq!(a.keys_version(), Some(va));
}

/// How long `service` keeps accepting `key`, checked every 5 ms up to 3 s.
async fn accepted_for(service: &KeyService, key: &str) -> Duration {
    let header = format!("Bearer {key}");
    let start = Instant::now();
    while service.authenticate(Some(&header)).await.is_ok() {
        assert!(start.elapsed() < Duration::from_secs(3), "still accepted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

async fn authentication_reuses_a_key_only_until_it_changes(db: &Db) {
    let here: Arc<SqlStore> = Arc::new(db.store().await);
    let service = KeyService::new(here.clone());
    let elsewhere = db.store().await;
    version_of(&here, None).await;
    let new_key = || NewKey {
        name: "k".into(),
        owner_id: None,
        created_via: KeyOrigin::Cli,
        expires_in: None,
        scope: Default::default(),
    };

    // Revoked by another process (or replica): refused on the next request
    // (PostgreSQL's notification may take a moment to be read).
    let (key, record) = service
        .create(new_key(), &svc_core::Actor::Operator)
        .await
        .unwrap();
    let header = format!("Bearer {}", key.expose());
    service.authenticate(Some(&header)).await.unwrap();
    assert!(
        elsewhere
            .revoke_key(&record.id, svc_core::now())
            .await
            .unwrap()
    );
    let took = accepted_for(&service, key.expose()).await;
    match db {
        Db::Sqlite { .. } => assert!(took < Duration::from_millis(5), "{took:?}"),
        Db::Postgres(_) => assert!(took < Duration::from_millis(250), "{took:?}"),
    }

    // Changed by hand past svc: PostgreSQL's trigger announces it; a SQLite
    // file cannot, so what was read is reused, but never for longer than
    // the cache's limit.
    let (key, record) = service
        .create(new_key(), &svc_core::Actor::Operator)
        .await
        .unwrap();
    let header = format!("Bearer {}", key.expose());
    service.authenticate(Some(&header)).await.unwrap();
    let started = Instant::now();
    db.scalar(&format!(
        "UPDATE api_keys SET revoked_at = 1 WHERE id = '{}' RETURNING CAST(1 AS BIGINT)",
        record.id.0
    ))
    .await;
    let took = accepted_for(&service, key.expose()).await;
    match db {
        Db::Sqlite { .. } => {
            let since_read = started.elapsed();
            assert!(took > Duration::from_millis(100), "not reused: {took:?}");
            assert!(
                since_read <= AUTH_CACHE_TTL + Duration::from_millis(100),
                "{since_read:?}"
            );
        }
        Db::Postgres(_) => assert!(took < Duration::from_millis(250), "{took:?}"),
    }
}

/// A change made past svc (by hand, in psql) is seen too, and so is the
/// loss of the listening connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_announces_changes_by_hand_and_survives_a_lost_listener() {
    let db = Db::postgres().await;
    let store = db.store().await;
    let (record, hash) = new_key(None, 10);
    store.insert_key(&record, &hash).await.unwrap();
    let before = version_of(&store, None).await;
    let updated = db
        .scalar(&format!(
            "UPDATE api_keys SET expires_at = 5 WHERE id = '{}' RETURNING CAST(1 AS BIGINT)",
            record.id.0
        ))
        .await;
    assert_eq!(updated, 1);
    let before = version_of(&store, Some(before)).await;

    // Kill the listening connection: no version may be given until it
    // listens again, and then a new one (what was sent meanwhile is lost).
    let schema = match &db {
        Db::Postgres(schema) => schema.name().to_owned(),
        Db::Sqlite { .. } => unreachable!(),
    };
    let killed = db
        .scalar(&format!(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE query = 'LISTEN \"svc_keys_{schema}\"'"
        ))
        .await;
    assert_eq!(killed, 1);
    version_of(&store, Some(before)).await;
    store.close().await;
    db.finish().await;
}

async fn stored_keys_are_found_by_hash_and_id(db: &Db) {
    let store = db.store().await;
    let (mut full, full_hash) = new_key(Some("user_1"), 1_700_000_000);
    full.expires_at = Some(1_800_000_000);
    full.last_used_at = Some(1_700_000_100);
    full.revoked_at = Some(1_700_000_200);
    full.name = "naïve ☃ 'quoted'".into();
    let (bare, bare_hash) = new_key(None, 1_700_000_001);
    store.insert_key(&full, &full_hash).await.unwrap();
    store.insert_key(&bare, &bare_hash).await.unwrap();

    assert_eq!(
        store.key_by_hash(&full_hash).await.unwrap(),
        Some(full.clone())
    );
    assert_eq!(store.key_by_id(&full.id).await.unwrap(), Some(full));
    assert_eq!(
        store.key_by_hash(&bare_hash).await.unwrap(),
        Some(bare.clone())
    );
    assert_eq!(store.key_by_id(&bare.id).await.unwrap(), Some(bare));
    assert_eq!(
        store.key_by_hash(&ApiKey::generate().hash()).await.unwrap(),
        None
    );
    assert_eq!(store.key_by_id(&KeyId::generate()).await.unwrap(), None);
}

async fn duplicate_hash_or_id_is_a_conflict(db: &Db) {
    let store = db.store().await;
    let (first, hash) = new_key(None, 1);
    store.insert_key(&first, &hash).await.unwrap();

    let (mut same_hash, _) = new_key(None, 2);
    same_hash.id = KeyId::generate();
    let err = store.insert_key(&same_hash, &hash).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict), "{err:?}");

    let (mut same_id, other_hash) = new_key(None, 3);
    same_id.id = first.id.clone();
    let err = store.insert_key(&same_id, &other_hash).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict), "{err:?}");

    assert_eq!(store.list_keys(None).await.unwrap(), vec![first]);
}

async fn list_is_newest_first_and_filters_by_owner(db: &Db) {
    let store = db.store().await;
    let (old, h1) = new_key(Some("alice"), 100);
    let (new, h2) = new_key(Some("bob"), 300);
    let (mid, h3) = new_key(None, 200);
    let (mut tie_a, h4) = new_key(Some("alice"), 250);
    let (mut tie_b, h5) = new_key(Some("alice"), 250);
    tie_a.id = KeyId("key_aaaa".into());
    tie_b.id = KeyId("key_bbbb".into());
    for (record, hash) in [
        (&old, h1),
        (&new, h2),
        (&mid, h3),
        (&tie_a, h4),
        (&tie_b, h5),
    ] {
        store.insert_key(record, &hash).await.unwrap();
    }

    let all = store.list_keys(None).await.unwrap();
    assert_eq!(
        all,
        vec![new, tie_b.clone(), tie_a.clone(), mid, old.clone()]
    );
    let alices = store
        .list_keys(Some(&UserId("alice".into())))
        .await
        .unwrap();
    assert_eq!(alices, vec![tie_b, tie_a, old]);
    assert_eq!(
        store
            .list_keys(Some(&UserId("nobody".into())))
            .await
            .unwrap(),
        vec![]
    );
}

async fn revoking_twice_reports_false(db: &Db) {
    let store = db.store().await;
    let (record, hash) = new_key(None, 10);
    store.insert_key(&record, &hash).await.unwrap();

    assert!(store.revoke_key(&record.id, 20).await.unwrap());
    assert!(!store.revoke_key(&record.id, 30).await.unwrap());
    assert!(!store.revoke_key(&KeyId::generate(), 30).await.unwrap());
    let stored = store.key_by_hash(&hash).await.unwrap().unwrap();
    assert_eq!(
        stored.revoked_at,
        Some(20),
        "the first revocation's time stays"
    );
    assert_eq!(KeyState::of(&stored, 40), KeyState::Revoked);
}

async fn rate_limits_are_stored_per_key(db: &Db) {
    let store = db.store().await;
    let (mut record, hash) = new_key(None, 10);
    record.limits.requests_per_minute = Some(7);
    store.insert_key(&record, &hash).await.unwrap();
    assert_eq!(
        store.key_by_hash(&hash).await.unwrap().unwrap().limits,
        record.limits
    );

    let limits = KeyLimits {
        requests_per_minute: None,
        tokens_per_minute: Some(1000),
    };
    assert!(store.set_key_limits(&record.id, limits).await.unwrap());
    assert_eq!(
        store.key_by_id(&record.id).await.unwrap().unwrap().limits,
        limits
    );
    assert!(
        !store
            .set_key_limits(&KeyId::generate(), limits)
            .await
            .unwrap()
    );
}

async fn touch_records_the_latest_use(db: &Db) {
    let store = db.store().await;
    let (record, hash) = new_key(None, 10);
    store.insert_key(&record, &hash).await.unwrap();

    store.touch_key(&record.id, 500).await.unwrap();
    assert_eq!(
        store
            .key_by_id(&record.id)
            .await
            .unwrap()
            .unwrap()
            .last_used_at,
        Some(500)
    );
    store.touch_key(&record.id, 600).await.unwrap();
    assert_eq!(
        store
            .key_by_id(&record.id)
            .await
            .unwrap()
            .unwrap()
            .last_used_at,
        Some(600)
    );
    // Another replica's older touch arriving late does not move it back.
    store.touch_key(&record.id, 550).await.unwrap();
    assert_eq!(
        store
            .key_by_id(&record.id)
            .await
            .unwrap()
            .unwrap()
            .last_used_at,
        Some(600)
    );
    // Touching a key that is gone is not an error.
    store.touch_key(&KeyId::generate(), 700).await.unwrap();
}

async fn expired_keys_are_still_returned(db: &Db) {
    let store = db.store().await;
    let (mut record, hash) = new_key(None, 10);
    record.expires_at = Some(20);
    store.insert_key(&record, &hash).await.unwrap();

    let stored = store.key_by_hash(&hash).await.unwrap().unwrap();
    assert_eq!(stored, record);
    assert_eq!(KeyState::of(&stored, 30), KeyState::Expired);
    assert_eq!(store.list_keys(None).await.unwrap(), vec![record]);
}

async fn ping_answers(db: &Db) {
    let store = db.store().await;
    store.ping().await.unwrap();
    assert_eq!(
        store.backend(),
        match db {
            Db::Sqlite { .. } => "sqlite",
            Db::Postgres(_) => "postgres",
        }
    );
}

async fn two_stores_see_each_others_writes_at_once(db: &Db) {
    let a = db.store().await;
    let b = db.store().await;
    let (record, hash) = new_key(Some("alice"), 10);
    a.insert_key(&record, &hash).await.unwrap();
    assert_eq!(b.key_by_hash(&hash).await.unwrap(), Some(record.clone()));

    assert!(b.revoke_key(&record.id, 20).await.unwrap());
    let seen_by_a = a.key_by_hash(&hash).await.unwrap().unwrap();
    assert_eq!(seen_by_a.revoked_at, Some(20));
    assert!(!a.revoke_key(&record.id, 30).await.unwrap());

    a.touch_key(&record.id, 40).await.unwrap();
    assert_eq!(
        b.key_by_id(&record.id).await.unwrap().unwrap().last_used_at,
        Some(40)
    );
}

async fn concurrent_connects_and_writers_all_succeed(db: &Db) {
    // Several stores migrate the same fresh database at once, as replicas
    // starting together do, then all write at once.
    let url = db.url().to_owned();
    let stores = futures_join_all(4, |_| {
        let url = url.clone();
        async move { svc_store::SqlStore::connect(&url).await.unwrap() }
    })
    .await;
    let writers = stores.into_iter().enumerate().map(|(n, store)| {
        tokio::spawn(async move {
            for i in 0..25 {
                let (record, hash) = new_key(Some(&format!("owner_{n}")), i);
                store.insert_key(&record, &hash).await.unwrap();
                store.touch_key(&record.id, i + 1).await.unwrap();
            }
        })
    });
    for writer in writers.collect::<Vec<_>>() {
        writer.await.unwrap();
    }
    let store = db.store().await;
    assert_eq!(store.list_keys(None).await.unwrap().len(), 100);
    assert_eq!(
        store
            .list_keys(Some(&UserId("owner_3".into())))
            .await
            .unwrap()
            .len(),
        25
    );
}

/// Runs `count` futures made by `make` concurrently on their own tasks.
async fn futures_join_all<F, T>(count: usize, make: impl Fn(usize) -> F) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let tasks: Vec<_> = (0..count).map(|n| tokio::spawn(make(n))).collect();
    let mut results = Vec::with_capacity(count);
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}
