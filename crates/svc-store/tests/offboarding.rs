//! Offboarding (issue 16, finding 8): disabling, enabling and deleting
//! accounts, on SQLite and on PostgreSQL. A disabled or deleted account's
//! keys are refused on the very next request, on every store sharing the
//! database; its sessions and unredeemed approvals end with it.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Db, join_all, new_device, new_key, new_user, random_hex};
use svc_core::conversation::{StorageQuota, StorageUsage, Stored, StoredResponse};
use svc_core::device::{DeviceDecision, DeviceStatus};
use svc_core::hashes::{DeviceCodeHash, SessionHash};
use svc_core::ids::{ProjectId, UserId};
use svc_core::key::KeyOrigin;
use svc_core::keys::{AuthError, KeyService, KeyState, NewKey};
use svc_core::session::SessionRecord;
use svc_core::store::{DeviceStore, KeyStore, ResponseStore, SessionStore, UserStore};
use svc_core::user::{AccountChange, UserRecord};
use svc_store::SqlStore;

on_both_backends!(
    disabling_refuses_the_accounts_keys_at_once_on_every_store,
    disabling_ends_sessions_and_approvals_and_enabling_restores_keys,
    an_approval_racing_with_disabling_is_never_redeemed,
    deleting_revokes_keys_and_frees_the_email,
    the_last_enabled_admin_is_never_removed,
    admins_removing_each_other_at_once_leave_one,
);

async fn stored_user(store: &SqlStore, email: &str, admin: bool) -> UserRecord {
    let mut user = new_user(email, 1);
    user.is_admin = admin;
    store.insert_user(&user).await.unwrap();
    user
}

fn session_of(user: &UserId) -> SessionRecord {
    SessionRecord {
        token_hash: SessionHash::from_stored(random_hex(32)),
        user_id: user.clone(),
        csrf_token: random_hex(16),
        created_at: 1,
        expires_at: i64::MAX / 2,
        address: None,
    }
}

/// `store`'s keys version once it has one (PostgreSQL listens in the
/// background).
async fn wait_for_version(store: &SqlStore) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.keys_version().is_none() {
        assert!(Instant::now() < deadline, "no keys version within 5 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How many times `service` still accepts `header`, tried every 5 ms (it
/// must refuse it within 3 s: PostgreSQL's notification comes in the
/// background), and the error it then gives.
async fn accepted_times(service: &KeyService, header: &str) -> (u32, AuthError) {
    let start = Instant::now();
    let mut accepted = 0;
    loop {
        match service.authenticate(Some(header)).await {
            Ok(_) => {
                accepted += 1;
                assert!(start.elapsed() < Duration::from_secs(3), "still accepted");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => return (accepted, e),
        }
    }
}

fn owned_by(user: &UserRecord) -> NewKey {
    NewKey {
        name: "k".into(),
        owner_id: Some(user.id.clone()),
        created_via: KeyOrigin::Dashboard,
        expires_in: None,
        scope: Default::default(),
    }
}

async fn disabling_refuses_the_accounts_keys_at_once_on_every_store(db: &Db) {
    let here: Arc<SqlStore> = Arc::new(db.store().await);
    let service = KeyService::new(here.clone());
    let elsewhere = db.store().await;
    wait_for_version(&here).await;
    let user = stored_user(&elsewhere, "leaver@example.com", false).await;
    let other = stored_user(&elsewhere, "stayer@example.com", false).await;
    let (key, _) = service
        .create(owned_by(&user), &svc_core::Actor::Operator)
        .await
        .unwrap();
    let (kept, _) = service
        .create(owned_by(&other), &svc_core::Actor::Operator)
        .await
        .unwrap();
    let header = format!("Bearer {}", key.expose());
    let kept_header = format!("Bearer {}", kept.expose());
    // Read (and remembered) before the account is disabled elsewhere.
    service.authenticate(Some(&header)).await.unwrap();

    assert_eq!(
        elsewhere
            .set_user_disabled(&user.id, Some(svc_core::now()))
            .await
            .unwrap(),
        AccountChange::Done
    );
    let (accepted, error) = accepted_times(&service, &header).await;
    assert!(matches!(error, AuthError::OwnerDisabled), "{error:?}");
    // SQLite: the change file is read on the next request, so that request
    // is refused already; PostgreSQL: as soon as the notification arrives.
    if let Db::Sqlite { .. } = db {
        assert_eq!(accepted, 0);
    }
    let message = error.to_string();
    assert!(message.contains("disabled"), "{message}");
    assert!(!message.contains(key.expose()), "{message}");
    service.authenticate(Some(&kept_header)).await.unwrap();

    // Enabled again elsewhere: accepted again, as soon as it is known.
    assert_eq!(
        elsewhere.set_user_disabled(&user.id, None).await.unwrap(),
        AccountChange::Done
    );
    let deadline = Instant::now() + Duration::from_secs(3);
    while service.authenticate(Some(&header)).await.is_err() {
        assert!(Instant::now() < deadline, "not accepted after enabling");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // PostgreSQL: disabling by hand (psql) is announced by the trigger too.
    if let Db::Postgres(_) = db {
        db.scalar(&format!(
            "UPDATE users SET disabled_at = 5 WHERE id = '{}' RETURNING CAST(1 AS BIGINT)",
            user.id.0
        ))
        .await;
        let (_, error) = accepted_times(&service, &header).await;
        assert!(matches!(error, AuthError::OwnerDisabled), "{error:?}");
    }
}

async fn disabling_ends_sessions_and_approvals_and_enabling_restores_keys(db: &Db) {
    let store = db.store().await;
    let user = stored_user(&store, "leaver@example.com", false).await;
    let other = stored_user(&store, "stayer@example.com", false).await;
    let (session, other_session) = (session_of(&user.id), session_of(&other.id));
    store.insert_session(&session).await.unwrap();
    store.insert_session(&other_session).await.unwrap();
    let (active, h1) = new_key(Some(&user.id.0), 10);
    let (revoked, h2) = new_key(Some(&user.id.0), 11);
    store.insert_key(&active, &h1).await.unwrap();
    store.insert_key(&revoked, &h2).await.unwrap();
    assert!(store.revoke_key(&revoked.id, 12).await.unwrap());
    let now = svc_core::now();
    let approved = new_device(now, now + 600);
    let pending = new_device(now, now + 600);
    store.insert_device(&approved).await.unwrap();
    store.insert_device(&pending).await.unwrap();
    assert!(
        store
            .decide_device(&approved.id, &user.id, DeviceDecision::Approve, now)
            .await
            .unwrap()
    );

    assert_eq!(
        store.set_user_disabled(&user.id, Some(now)).await.unwrap(),
        AccountChange::Done
    );
    assert_eq!(
        store.set_user_disabled(&user.id, Some(now)).await.unwrap(),
        AccountChange::Unchanged
    );
    let stored = store.user_by_id(&user.id).await.unwrap().unwrap();
    assert_eq!(stored.disabled_at, Some(now));
    assert!(
        store
            .list_users()
            .await
            .unwrap()
            .iter()
            .any(|u| u.id == user.id && u.disabled_at == Some(now))
    );
    assert_eq!(
        store.session_by_hash(&session.token_hash).await.unwrap(),
        None
    );
    assert!(
        store
            .session_by_hash(&other_session.token_hash)
            .await
            .unwrap()
            .is_some()
    );
    let device = |id: &DeviceCodeHash| {
        let id = id.clone();
        let store = store.clone();
        async move {
            let found = store.device_by_code_hash(&id).await.unwrap().unwrap();
            found.state.status()
        }
    };
    assert_eq!(
        device(&approved.device_code_hash).await,
        DeviceStatus::Denied
    );
    assert_eq!(
        device(&pending.device_code_hash).await,
        DeviceStatus::Pending
    );
    let keys = store.list_keys(Some(&user.id)).await.unwrap();
    assert!(keys.iter().all(|k| k.owner_disabled_at == Some(now)));
    let read = store.key_by_hash(&h1).await.unwrap().unwrap();
    assert_eq!(KeyState::of(&read, now), KeyState::Disabled);

    // Enabling: the key that was only disabled works again; the revoked one
    // stays revoked.
    assert_eq!(
        store.set_user_disabled(&user.id, None).await.unwrap(),
        AccountChange::Done
    );
    assert_eq!(
        store.set_user_disabled(&user.id, None).await.unwrap(),
        AccountChange::Unchanged
    );
    let read = store.key_by_hash(&h1).await.unwrap().unwrap();
    assert_eq!(KeyState::of(&read, now), KeyState::Active);
    let read = store.key_by_hash(&h2).await.unwrap().unwrap();
    assert_eq!(KeyState::of(&read, now), KeyState::Revoked);
    assert_eq!(
        store
            .set_user_disabled(&UserId::generate(), Some(now))
            .await
            .unwrap(),
        AccountChange::NotFound
    );
}

async fn an_approval_racing_with_disabling_is_never_redeemed(db: &Db) {
    // The approval lands after the account was disabled (a page submitted
    // just before): redemption still refuses it.
    let store = db.store().await;
    let user = stored_user(&store, "leaver@example.com", false).await;
    let now = svc_core::now();
    let device = new_device(now, now + 600);
    store.insert_device(&device).await.unwrap();
    assert_eq!(
        store.set_user_disabled(&user.id, Some(now)).await.unwrap(),
        AccountChange::Done
    );
    assert!(
        store
            .decide_device(&device.id, &user.id, DeviceDecision::Approve, now)
            .await
            .unwrap()
    );
    let (key, hash) = new_key(Some(&user.id.0), now);
    assert!(
        !store
            .redeem_device(&device.id, &key, &hash, now)
            .await
            .unwrap()
    );
    assert_eq!(store.key_by_hash(&hash).await.unwrap(), None);
}

async fn deleting_revokes_keys_and_frees_the_email(db: &Db) {
    let store = db.store().await;
    let user = stored_user(&store, "leaver@example.com", false).await;
    let session = session_of(&user.id);
    store.insert_session(&session).await.unwrap();
    let (key, hash) = new_key(Some(&user.id.0), 10);
    let (earlier, earlier_hash) = new_key(Some(&user.id.0), 11);
    store.insert_key(&key, &hash).await.unwrap();
    store.insert_key(&earlier, &earlier_hash).await.unwrap();
    assert!(store.revoke_key(&earlier.id, 12).await.unwrap());
    let now = svc_core::now();
    let approved = new_device(now, now + 600);
    store.insert_device(&approved).await.unwrap();
    assert!(
        store
            .decide_device(&approved.id, &user.id, DeviceDecision::Approve, now)
            .await
            .unwrap()
    );
    let conversation = |owner: String, project: &ProjectId| StoredResponse {
        id: format!("resp_{}", random_hex(12)),
        owner,
        project_id: project.clone(),
        created_at: now,
        expires_at: now + 600,
        previous_id: None,
        response: "{}".into(),
        conversation: "[]".into(),
    };
    let default = ProjectId::default_project();
    let other = ProjectId::generate();
    let theirs = conversation(StoredResponse::owner_of(Some(&user.id), &default), &default);
    let theirs_later = StoredResponse {
        previous_id: Some(theirs.id.clone()),
        ..conversation(theirs.owner.clone(), &default)
    };
    let theirs_elsewhere = conversation(StoredResponse::owner_of(Some(&user.id), &other), &other);
    let operators = conversation(StoredResponse::owner_of(None, &default), &default);
    let operators_elsewhere = conversation(StoredResponse::owner_of(None, &other), &other);
    let quota = StorageQuota {
        bytes: 1 << 20,
        responses: 10,
    };
    for response in [
        &theirs,
        &theirs_later,
        &theirs_elsewhere,
        &operators,
        &operators_elsewhere,
    ] {
        assert_eq!(
            store.insert_response(response, quota).await.unwrap(),
            Stored::Kept
        );
    }

    assert_eq!(
        store.delete_user(&user.id, 50).await.unwrap(),
        AccountChange::Done
    );
    // Their stored conversations leave with them (a chain whole); others'
    // stay, and so do their projects' counts of them.
    for gone in [&theirs, &theirs_later, &theirs_elsewhere] {
        assert_eq!(
            store
                .response_by_id(&gone.id, &gone.owner, now)
                .await
                .unwrap(),
            None
        );
    }
    for kept in [&operators, &operators_elsewhere] {
        assert!(
            store
                .response_by_id(&kept.id, &kept.owner, now)
                .await
                .unwrap()
                .is_some()
        );
        assert_eq!(
            store.response_storage(&kept.project_id).await.unwrap(),
            StorageUsage {
                bytes: kept.stored_bytes(),
                responses: 1
            }
        );
    }
    assert_eq!(store.user_by_id(&user.id).await.unwrap(), None);
    assert_eq!(
        store.session_by_hash(&session.token_hash).await.unwrap(),
        None
    );
    // The keys stay, revoked, so their usage history keeps its keys; one
    // revoked before keeps its own time.
    let read = store.key_by_hash(&hash).await.unwrap().unwrap();
    assert_eq!(read.revoked_at, Some(50));
    let read = store.key_by_hash(&earlier_hash).await.unwrap().unwrap();
    assert_eq!(read.revoked_at, Some(12));
    let found = store
        .device_by_code_hash(&approved.device_code_hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.state.status(), DeviceStatus::Denied);
    assert_eq!(
        store.delete_user(&user.id, 60).await.unwrap(),
        AccountChange::NotFound
    );
    // The email can be used again, by a new account that owns nothing.
    let again = stored_user(&store, "leaver@example.com", false).await;
    assert_ne!(again.id, user.id);
    assert!(store.list_keys(Some(&again.id)).await.unwrap().is_empty());
}

async fn the_last_enabled_admin_is_never_removed(db: &Db) {
    let store = db.store().await;
    let first = stored_user(&store, "first@example.com", true).await;
    let plain = stored_user(&store, "plain@example.com", false).await;
    assert_eq!(
        store.set_user_disabled(&first.id, Some(5)).await.unwrap(),
        AccountChange::LastAdmin
    );
    assert_eq!(
        store.delete_user(&first.id, 5).await.unwrap(),
        AccountChange::LastAdmin
    );
    assert_eq!(
        store
            .user_by_id(&first.id)
            .await
            .unwrap()
            .unwrap()
            .disabled_at,
        None
    );
    // Plain accounts come and go whatever the admins.
    assert_eq!(
        store.set_user_disabled(&plain.id, Some(5)).await.unwrap(),
        AccountChange::Done
    );

    // With a second admin, either may go, but not both.
    let second = stored_user(&store, "second@example.com", true).await;
    assert_eq!(
        store.set_user_disabled(&first.id, Some(6)).await.unwrap(),
        AccountChange::Done
    );
    assert_eq!(
        store.set_user_disabled(&second.id, Some(6)).await.unwrap(),
        AccountChange::LastAdmin
    );
    assert_eq!(
        store.delete_user(&second.id, 6).await.unwrap(),
        AccountChange::LastAdmin
    );
    // A disabled admin does not count: deleting it is fine once another is
    // enabled, and the one left stays.
    assert_eq!(
        store.delete_user(&first.id, 7).await.unwrap(),
        AccountChange::Done
    );
    assert!(store.user_by_id(&second.id).await.unwrap().is_some());
}

async fn admins_removing_each_other_at_once_leave_one(db: &Db) {
    let stores = [db.store().await, db.store().await];
    let mut left: Option<UserId> = None;
    for round in 0..4 {
        let a = stored_user(&stores[0], &format!("a{round}@example.com"), true).await;
        let b = stored_user(&stores[0], &format!("b{round}@example.com"), true).await;
        // The admin left by the last round goes, so a and b are the only two.
        if let Some(id) = left.take() {
            assert_eq!(
                stores[1].delete_user(&id, 8).await.unwrap(),
                AccountChange::Done
            );
        }
        let targets = [a.id.clone(), b.id.clone()];
        let results = join_all(2, |n| {
            let store = stores[n].clone();
            let target = targets[n].clone();
            async move {
                if n == 0 {
                    store.set_user_disabled(&target, Some(9)).await.unwrap()
                } else {
                    store.delete_user(&target, 9).await.unwrap()
                }
            }
        })
        .await;
        let done = results
            .iter()
            .filter(|r| **r == AccountChange::Done)
            .count();
        assert_eq!(done, 1, "round {round}: {results:?}");
        let admins: Vec<UserId> = stores[0]
            .list_users()
            .await
            .unwrap()
            .into_iter()
            .filter(|u| u.is_admin && u.disabled_at.is_none())
            .map(|u| u.id)
            .collect();
        assert_eq!(admins.len(), 1, "round {round}");
        left = admins.into_iter().next();
    }
}
