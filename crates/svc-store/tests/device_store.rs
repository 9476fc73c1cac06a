//! The DeviceStore contract, run on SQLite and on PostgreSQL.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use common::{Db, join_all, new_device, new_key, random_hex};
use svc_core::device::{DeviceDecision, DeviceState, DeviceStatus};
use svc_core::hashes::{DeviceCodeHash, UserCodeHash};
use svc_core::ids::{KeyId, UserId};
use svc_core::key::KeyOrigin;
use svc_core::store::{DeviceStore, KeyStore, StoreError};

on_both_backends!(
    devices_are_found_by_code_hash_and_user_code_hash,
    duplicate_id_code_hash_or_user_code_hash_is_a_conflict,
    polling_too_soon_slows_the_client_down,
    only_pending_unexpired_authorizations_are_decided,
    approved_authorization_is_redeemed_exactly_once,
    only_approved_unexpired_authorizations_are_redeemed,
    failed_key_insert_leaves_the_authorization_approved,
    expired_authorizations_are_deleted,
    live_authorizations_are_counted,
    issued_user_codes_are_stored_hashed,
    stored_states_that_make_no_sense_are_errors,
);

async fn stored_states_that_make_no_sense_are_errors(db: &Db) {
    let store = db.store().await;
    let device = new_device(0, 900);
    store.insert_device(&device).await.unwrap();
    // Rows this svc did not write (a newer one, or a hand edit): an unknown
    // status, an approval without its approver, a redemption without its key.
    for (set, shown) in [
        ("status = 'expired'", "\"expired\""),
        (
            "status = 'approved', user_id = NULL, decided_at = 5",
            "\"approved\"",
        ),
        (
            "status = 'redeemed', user_id = 'usr_1', decided_at = 5, key_id = NULL",
            "\"redeemed\"",
        ),
    ] {
        db.execute(&format!(
            "UPDATE device_authorizations SET {set} WHERE id = '{}'",
            device.id
        ))
        .await;
        for read in [
            store.device_by_code_hash(&device.device_code_hash).await,
            store.device_by_user_code_hash(&device.user_code_hash).await,
        ] {
            match read {
                Err(StoreError::Database(message)) => {
                    assert!(message.contains("status"), "{message}");
                    assert!(message.contains(shown), "{set}: {message}");
                }
                other => panic!("{set}: {other:?}"),
            }
        }
    }
}

async fn devices_are_found_by_code_hash_and_user_code_hash(db: &Db) {
    let store = db.store().await;
    let bare = new_device(1_000, 1_900);
    let mut full = new_device(1_001, 1_901);
    full.client_id = Some("svc-cli".into());
    full.scope = Some("chat keys".into());
    full.client_address = Some("203.0.113.7".into());
    full.user_agent = Some("svc/0.1 (linux; “quoted”)".into());
    full.interval = 10;
    full.last_polled_at_ms = Some(1_001_500);
    full.state = DeviceState::Redeemed {
        by: UserId::generate(),
        decided_at: 1_002,
        key_id: KeyId::generate(),
    };
    store.insert_device(&bare).await.unwrap();
    store.insert_device(&full).await.unwrap();

    for record in [&bare, &full] {
        assert_eq!(
            store
                .device_by_code_hash(&record.device_code_hash)
                .await
                .unwrap()
                .as_ref(),
            Some(record)
        );
        assert_eq!(
            store
                .device_by_user_code_hash(&record.user_code_hash)
                .await
                .unwrap()
                .as_ref(),
            Some(record)
        );
    }
    assert_eq!(
        store
            .device_by_code_hash(&DeviceCodeHash::from_stored(random_hex(32)))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .device_by_user_code_hash(&UserCodeHash::from_stored(random_hex(32)))
            .await
            .unwrap(),
        None
    );
}

async fn duplicate_id_code_hash_or_user_code_hash_is_a_conflict(db: &Db) {
    let store = db.store().await;
    let first = new_device(0, 900);
    store.insert_device(&first).await.unwrap();

    let mut same_id = new_device(0, 900);
    same_id.id = first.id.clone();
    let mut same_hash = new_device(0, 900);
    same_hash.device_code_hash = first.device_code_hash.clone();
    let mut same_user_code_hash = new_device(0, 900);
    same_user_code_hash.user_code_hash = first.user_code_hash.clone();
    for duplicate in [same_id, same_hash, same_user_code_hash] {
        let err = store.insert_device(&duplicate).await.unwrap_err();
        assert!(matches!(err, StoreError::Conflict), "{err:?}");
    }
    assert_eq!(
        store
            .device_by_user_code_hash(&first.user_code_hash)
            .await
            .unwrap(),
        Some(first)
    );
}

async fn polling_too_soon_slows_the_client_down(db: &Db) {
    let store = db.store().await;
    let device = new_device(0, 900);
    store.insert_device(&device).await.unwrap();
    let stored = || async {
        store
            .device_by_code_hash(&device.device_code_hash)
            .await
            .unwrap()
            .unwrap()
    };

    // The first poll is always in time.
    assert!(
        store
            .poll_device(&device.id, 10_000, 5_000, 5)
            .await
            .unwrap()
    );
    assert_eq!(stored().await.last_polled_at_ms, Some(10_000));
    assert_eq!(stored().await.interval, 5);

    // Too soon: the interval grows and the poll still counts, so the next
    // gap is measured from it.
    assert!(
        !store
            .poll_device(&device.id, 14_999, 5_000, 5)
            .await
            .unwrap()
    );
    let after = stored().await;
    assert_eq!(after.interval, 10);
    assert_eq!(after.last_polled_at_ms, Some(14_999));
    assert!(
        !store
            .poll_device(&device.id, 19_000, 5_000, 5)
            .await
            .unwrap()
    );
    assert_eq!(stored().await.interval, 15);

    // Exactly the gap is enough; nothing else changes.
    assert!(
        store
            .poll_device(&device.id, 24_000, 5_000, 5)
            .await
            .unwrap()
    );
    let after = stored().await;
    assert_eq!(after.interval, 15);
    assert_eq!(after.last_polled_at_ms, Some(24_000));
    assert_eq!(after.state.status(), DeviceStatus::Pending);

    // An unknown authorization is never in time.
    assert!(
        !store
            .poll_device("dev_unknown", 99_000, 5_000, 5)
            .await
            .unwrap()
    );
}

async fn only_pending_unexpired_authorizations_are_decided(db: &Db) {
    let store = db.store().await;
    let alice = UserId::generate();
    let bob = UserId::generate();
    let approved = new_device(0, 900);
    let denied = new_device(0, 900);
    let expired = new_device(0, 900);
    for record in [&approved, &denied, &expired] {
        store.insert_device(record).await.unwrap();
    }

    assert!(
        store
            .decide_device(&approved.id, &alice, DeviceDecision::Approve, 100)
            .await
            .unwrap()
    );
    let stored = store
        .device_by_user_code_hash(&approved.user_code_hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.state.status(), DeviceStatus::Approved);
    assert_eq!(stored.state.decided_by().cloned(), Some(alice.clone()));
    assert_eq!(stored.state.decided_at(), Some(100));
    assert_eq!(stored.state.key_id().cloned(), None);

    // Decided once: neither another decision nor another user changes it.
    for decision in [DeviceDecision::Deny, DeviceDecision::Approve] {
        assert!(
            !store
                .decide_device(&approved.id, &bob, decision, 200)
                .await
                .unwrap()
        );
    }
    let again = store
        .device_by_user_code_hash(&approved.user_code_hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again, stored);

    assert!(
        store
            .decide_device(&denied.id, &bob, DeviceDecision::Deny, 150)
            .await
            .unwrap()
    );
    let stored = store
        .device_by_user_code_hash(&denied.user_code_hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.state.status(), DeviceStatus::Denied);
    assert_eq!(stored.state.decided_by().cloned(), Some(bob.clone()));
    assert!(
        !store
            .decide_device(&denied.id, &bob, DeviceDecision::Approve, 160)
            .await
            .unwrap()
    );

    // Expired at its expires_at.
    assert!(
        !store
            .decide_device(&expired.id, &alice, DeviceDecision::Approve, 900)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .device_by_user_code_hash(&expired.user_code_hash)
            .await
            .unwrap()
            .unwrap(),
        expired
    );
    assert!(
        !store
            .decide_device("dev_unknown", &alice, DeviceDecision::Approve, 100)
            .await
            .unwrap()
    );
}

async fn approved_authorization_is_redeemed_exactly_once(db: &Db) {
    // Eight polls at once, over two replicas, each with a key of its own.
    let stores = [db.store().await, db.store().await];
    let device = new_device(0, 900);
    let owner = UserId::generate();
    stores[0].insert_device(&device).await.unwrap();
    assert!(
        stores[0]
            .decide_device(&device.id, &owner, DeviceDecision::Approve, 100)
            .await
            .unwrap()
    );

    let results = join_all(8, |n| {
        let store = stores[n % 2].clone();
        let id = device.id.clone();
        let owner = owner.clone();
        async move {
            let (mut key, hash) = new_key(Some(&owner.0), 200);
            key.created_via = KeyOrigin::Device;
            let redeemed = store.redeem_device(&id, &key, &hash, 200).await.unwrap();
            (redeemed, key)
        }
    })
    .await;
    let winners: Vec<_> = results
        .into_iter()
        .filter_map(|(redeemed, key)| redeemed.then_some(key))
        .collect();
    assert_eq!(winners.len(), 1);
    let winner = &winners[0];

    assert_eq!(
        stores[1].list_keys(None).await.unwrap(),
        vec![winner.clone()]
    );
    let stored = stores[1]
        .device_by_code_hash(&device.device_code_hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.state.status(), DeviceStatus::Redeemed);
    assert_eq!(stored.state.key_id().cloned(), Some(winner.id.clone()));
    assert_eq!(stored.state.decided_by().cloned(), Some(owner));

    let (late, late_hash) = new_key(None, 300);
    assert!(
        !stores[0]
            .redeem_device(&device.id, &late, &late_hash, 300)
            .await
            .unwrap()
    );
    assert_eq!(stores[0].key_by_id(&late.id).await.unwrap(), None);
}

async fn only_approved_unexpired_authorizations_are_redeemed(db: &Db) {
    let store = db.store().await;
    let user = UserId::generate();
    let pending = new_device(0, 900);
    let denied = new_device(0, 900);
    let expired = new_device(0, 900);
    for record in [&pending, &denied, &expired] {
        store.insert_device(record).await.unwrap();
    }
    assert!(
        store
            .decide_device(&denied.id, &user, DeviceDecision::Deny, 100)
            .await
            .unwrap()
    );
    assert!(
        store
            .decide_device(&expired.id, &user, DeviceDecision::Approve, 100)
            .await
            .unwrap()
    );

    for (id, at) in [
        (pending.id.as_str(), 200),
        (denied.id.as_str(), 200),
        // Approved, but past its expires_at: the device code is dead.
        (expired.id.as_str(), 900),
        ("dev_unknown", 200),
    ] {
        let (key, hash) = new_key(None, at);
        assert!(
            !store.redeem_device(id, &key, &hash, at).await.unwrap(),
            "{id}"
        );
    }
    assert_eq!(store.list_keys(None).await.unwrap(), vec![]);
    let statuses = [
        (&pending, DeviceStatus::Pending),
        (&denied, DeviceStatus::Denied),
        (&expired, DeviceStatus::Approved),
    ];
    for (record, status) in statuses {
        let stored = store
            .device_by_user_code_hash(&record.user_code_hash)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.state.status(), status);
        assert_eq!(stored.state.key_id().cloned(), None);
    }
}

async fn failed_key_insert_leaves_the_authorization_approved(db: &Db) {
    let store = db.store().await;
    let user = UserId::generate();
    let device = new_device(0, 900);
    store.insert_device(&device).await.unwrap();
    assert!(
        store
            .decide_device(&device.id, &user, DeviceDecision::Approve, 100)
            .await
            .unwrap()
    );
    let (existing, hash) = new_key(None, 50);
    store.insert_key(&existing, &hash).await.unwrap();

    // A key whose id is taken: the insert fails inside the transaction.
    let (mut clash, clash_hash) = new_key(None, 200);
    clash.id = existing.id.clone();
    let err = store
        .redeem_device(&device.id, &clash, &clash_hash, 200)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict), "{err:?}");
    let stored = store
        .device_by_user_code_hash(&device.user_code_hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.state.status(), DeviceStatus::Approved);
    assert_eq!(stored.state.key_id().cloned(), None);

    // So the next poll can still get its key.
    let (key, key_hash) = new_key(None, 210);
    assert!(
        store
            .redeem_device(&device.id, &key, &key_hash, 210)
            .await
            .unwrap()
    );
    assert_eq!(store.key_by_hash(&key_hash).await.unwrap(), Some(key));
}

async fn expired_authorizations_are_deleted(db: &Db) {
    let store = db.store().await;
    let long_gone = new_device(0, 50);
    let ends_now = new_device(0, 100);
    let live = new_device(0, 101);
    for record in [&long_gone, &ends_now, &live] {
        store.insert_device(record).await.unwrap();
    }
    assert_eq!(store.delete_expired_devices(100).await.unwrap(), 2);
    assert_eq!(
        store
            .device_by_user_code_hash(&long_gone.user_code_hash)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .device_by_user_code_hash(&ends_now.user_code_hash)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .device_by_user_code_hash(&live.user_code_hash)
            .await
            .unwrap(),
        Some(live)
    );
    assert_eq!(store.delete_expired_devices(100).await.unwrap(), 0);
}

async fn live_authorizations_are_counted(db: &Db) {
    let store = db.store().await;
    assert_eq!(store.count_live_devices(100).await.unwrap(), 0);
    for expires_at in [50, 100, 101, 500] {
        store
            .insert_device(&new_device(0, expires_at))
            .await
            .unwrap();
    }
    // Expired at 100 means expires_at <= 100, as for deletion.
    assert_eq!(store.count_live_devices(100).await.unwrap(), 2);
    assert_eq!(store.count_live_devices(0).await.unwrap(), 4);
    assert_eq!(store.count_live_devices(500).await.unwrap(), 0);
}

async fn issued_user_codes_are_stored_hashed(db: &Db) {
    use sqlx::{Connection, Row};
    let store = std::sync::Arc::new(db.store().await);
    let devices = svc_core::DeviceService::new(store.clone(), Default::default());
    let issued = devices.start(Default::default()).await.unwrap().unwrap();
    let code = issued.user_code.normalised().to_owned();
    // Every text column of every row, as someone with a copy of the
    // database would read them.
    let mut conn = sqlx::AnyConnection::connect(db.url()).await.unwrap();
    let rows = sqlx::query("SELECT * FROM device_authorizations")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let texts: Vec<String> = (0..rows[0].len())
        .filter_map(|i| rows[0].try_get::<Option<String>, _>(i).ok().flatten())
        .collect();
    assert!(
        texts.contains(&issued.user_code.hash().as_str().to_owned()),
        "{texts:?}"
    );
    for text in &texts {
        assert!(!text.contains(&code), "{text}");
    }
    conn.close().await.unwrap();
    // And the code still finds its authorization.
    let found = store
        .device_by_user_code_hash(&svc_core::UserCode::parse(&code).unwrap().hash())
        .await
        .unwrap();
    assert!(found.is_some());
}
