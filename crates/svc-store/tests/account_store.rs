//! The UserStore and SessionStore contract, run on SQLite and on PostgreSQL.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use common::{Db, join_all, new_user, random_hex};
use svc_core::hashes::{SessionHash, SetupTokenHash};
use svc_core::ids::UserId;
use svc_core::session::SessionRecord;
use svc_core::store::{SessionStore, StoreError, UserStore};

on_both_backends!(
    users_are_found_by_email_and_id,
    duplicate_email_or_id_is_a_conflict,
    users_are_listed_oldest_first_and_counted,
    first_user_needs_a_live_token,
    first_user_is_refused_once_a_user_exists,
    concurrent_first_users_make_exactly_one,
    sessions_are_stored_and_deleted,
    expired_sessions_are_deleted,
    flash_is_taken_once,
    concurrent_flash_takers_get_it_once,
);

async fn users_are_found_by_email_and_id(db: &Db) {
    let store = db.store().await;
    let mut admin = new_user("admin@example.com", 100);
    admin.is_admin = true;
    let plain = new_user("ünïcode+tag@example.com", 200);
    store.insert_user(&admin).await.unwrap();
    store.insert_user(&plain).await.unwrap();

    assert_eq!(
        store.user_by_email("admin@example.com").await.unwrap(),
        Some(admin.clone())
    );
    assert_eq!(store.user_by_id(&admin.id).await.unwrap(), Some(admin));
    assert_eq!(
        store
            .user_by_email("ünïcode+tag@example.com")
            .await
            .unwrap(),
        Some(plain.clone())
    );
    let found = store.user_by_id(&plain.id).await.unwrap().unwrap();
    assert!(!found.is_admin);
    assert_eq!(found.password_hash, plain.password_hash);
    assert_eq!(
        store.user_by_email("nobody@example.com").await.unwrap(),
        None
    );
    assert_eq!(store.user_by_id(&UserId::generate()).await.unwrap(), None);
}

async fn duplicate_email_or_id_is_a_conflict(db: &Db) {
    let store = db.store().await;
    let first = new_user("a@example.com", 1);
    store.insert_user(&first).await.unwrap();

    let same_email = new_user("a@example.com", 2);
    let err = store.insert_user(&same_email).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict), "{err:?}");

    let mut same_id = new_user("b@example.com", 3);
    same_id.id = first.id.clone();
    let err = store.insert_user(&same_id).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict), "{err:?}");

    assert_eq!(store.list_users().await.unwrap(), vec![first]);
}

async fn users_are_listed_oldest_first_and_counted(db: &Db) {
    let store = db.store().await;
    assert_eq!(store.count_users().await.unwrap(), 0);
    assert_eq!(store.list_users().await.unwrap(), vec![]);
    let newest = new_user("c@example.com", 300);
    let oldest = new_user("a@example.com", 100);
    let middle = new_user("b@example.com", 200);
    for user in [&newest, &oldest, &middle] {
        store.insert_user(user).await.unwrap();
    }
    assert_eq!(
        store.list_users().await.unwrap(),
        vec![oldest, middle, newest]
    );
    assert_eq!(store.count_users().await.unwrap(), 3);
}

async fn first_user_needs_a_live_token(db: &Db) {
    let store = db.store().await;
    let admin = new_user("admin@example.com", 1_000);
    store
        .insert_setup_token(&setup("expired"), 1_000)
        .await
        .unwrap();
    store
        .insert_setup_token(&setup("live"), 1_001)
        .await
        .unwrap();

    // Unknown, and expired at `at` (expires_at == at is expired).
    assert!(
        !store
            .create_first_user(&setup("unknown"), &admin, 1_000)
            .await
            .unwrap()
    );
    assert!(
        !store
            .create_first_user(&setup("expired"), &admin, 1_000)
            .await
            .unwrap()
    );
    assert_eq!(store.count_users().await.unwrap(), 0);

    assert!(
        store
            .create_first_user(&setup("live"), &admin, 1_000)
            .await
            .unwrap()
    );
    assert_eq!(store.list_users().await.unwrap(), vec![admin.clone()]);
    // The token is consumed; the expired one was left alone.
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM setup_tokens WHERE token_hash = 'live'")
            .await,
        0
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM setup_tokens WHERE token_hash = 'expired'")
            .await,
        1
    );
    assert!(
        !store
            .create_first_user(&setup("live"), &admin, 1_000)
            .await
            .unwrap()
    );
}

async fn first_user_is_refused_once_a_user_exists(db: &Db) {
    let store = db.store().await;
    let existing = new_user("someone@example.com", 1);
    store.insert_user(&existing).await.unwrap();
    store
        .insert_setup_token(&setup("live"), 2_000)
        .await
        .unwrap();

    let late = new_user("late@example.com", 1_000);
    assert!(
        !store
            .create_first_user(&setup("live"), &late, 1_000)
            .await
            .unwrap()
    );
    assert_eq!(store.list_users().await.unwrap(), vec![existing]);
    // Nothing changed: the token's deletion was rolled back.
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM setup_tokens WHERE token_hash = 'live'")
            .await,
        1
    );
}

async fn concurrent_first_users_make_exactly_one(db: &Db) {
    // Each caller holds a valid token of its own: only "no user yet" can
    // stop all but one, so the check and the insert must not interleave.
    let store = db.store().await;
    for n in 0..8 {
        store
            .insert_setup_token(&setup(&format!("token_{n}")), 10_000)
            .await
            .unwrap();
    }
    let results = join_all(8, |n| {
        let store = store.clone();
        async move {
            let user = new_user(&format!("user{n}@example.com"), 1_000);
            store
                .create_first_user(&setup(&format!("token_{n}")), &user, 1_000)
                .await
                .unwrap()
        }
    })
    .await;
    assert_eq!(
        results.iter().filter(|made| **made).count(),
        1,
        "{results:?}"
    );
    assert_eq!(store.count_users().await.unwrap(), 1);
    // Only the winner's token is gone.
    assert_eq!(db.scalar("SELECT COUNT(*) FROM setup_tokens").await, 7);
}

/// A setup token's hash as the store keeps it (`hash` itself, readable in
/// the table).
fn setup(hash: &str) -> SetupTokenHash {
    SetupTokenHash::from_stored(hash.to_owned())
}

fn new_session(user_id: &UserId, created_at: i64, expires_at: i64) -> SessionRecord {
    SessionRecord {
        token_hash: SessionHash::from_stored(random_hex(32)),
        user_id: user_id.clone(),
        csrf_token: random_hex(16),
        created_at,
        expires_at,
        address: None,
    }
}

async fn sessions_are_stored_and_deleted(db: &Db) {
    let store = db.store().await;
    let user = UserId::generate();
    let mut with_address = new_session(&user, 10, 100);
    with_address.address = Some("2001:db8::1".into());
    let bare = new_session(&user, 20, 200);
    store.insert_session(&with_address).await.unwrap();
    store.insert_session(&bare).await.unwrap();

    assert_eq!(
        store
            .session_by_hash(&with_address.token_hash)
            .await
            .unwrap(),
        Some(with_address.clone())
    );
    assert_eq!(
        store.session_by_hash(&bare.token_hash).await.unwrap(),
        Some(bare.clone())
    );
    assert_eq!(
        store
            .session_by_hash(&SessionHash::from_stored(random_hex(32)))
            .await
            .unwrap(),
        None
    );

    let mut duplicate = new_session(&UserId::generate(), 30, 300);
    duplicate.token_hash = bare.token_hash.clone();
    let err = store.insert_session(&duplicate).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict), "{err:?}");

    assert!(store.delete_session(&bare.token_hash).await.unwrap());
    assert!(!store.delete_session(&bare.token_hash).await.unwrap());
    assert_eq!(store.session_by_hash(&bare.token_hash).await.unwrap(), None);
    assert_eq!(
        store
            .session_by_hash(&with_address.token_hash)
            .await
            .unwrap(),
        Some(with_address)
    );
}

async fn expired_sessions_are_deleted(db: &Db) {
    let store = db.store().await;
    let user = UserId::generate();
    let long_gone = new_session(&user, 0, 50);
    let ends_now = new_session(&user, 0, 100);
    let live = new_session(&user, 0, 101);
    for session in [&long_gone, &ends_now, &live] {
        store.insert_session(session).await.unwrap();
    }
    // A session is expired from its expires_at on, as keys are.
    assert_eq!(store.delete_expired_sessions(100).await.unwrap(), 2);
    assert_eq!(
        store.session_by_hash(&long_gone.token_hash).await.unwrap(),
        None
    );
    assert_eq!(
        store.session_by_hash(&ends_now.token_hash).await.unwrap(),
        None
    );
    assert_eq!(
        store.session_by_hash(&live.token_hash).await.unwrap(),
        Some(live)
    );
    assert_eq!(store.delete_expired_sessions(100).await.unwrap(), 0);
}

async fn flash_is_taken_once(db: &Db) {
    let store = db.store().await;
    let user = UserId::generate();
    let session = new_session(&user, 0, 100);
    let other = new_session(&user, 0, 100);
    store.insert_session(&session).await.unwrap();
    store.insert_session(&other).await.unwrap();
    let hash = &session.token_hash;

    assert_eq!(store.take_session_flash(hash).await.unwrap(), None);
    store
        .set_session_flash(hash, Some("Key “laptop” created"))
        .await
        .unwrap();
    assert_eq!(
        store.take_session_flash(&other.token_hash).await.unwrap(),
        None
    );
    assert_eq!(
        store.take_session_flash(hash).await.unwrap().as_deref(),
        Some("Key “laptop” created")
    );
    assert_eq!(store.take_session_flash(hash).await.unwrap(), None);

    // A newer value replaces an untaken one; None clears it.
    store.set_session_flash(hash, Some("first")).await.unwrap();
    store.set_session_flash(hash, Some("second")).await.unwrap();
    assert_eq!(
        store.take_session_flash(hash).await.unwrap().as_deref(),
        Some("second")
    );
    store
        .set_session_flash(hash, Some("dropped"))
        .await
        .unwrap();
    store.set_session_flash(hash, None).await.unwrap();
    assert_eq!(store.take_session_flash(hash).await.unwrap(), None);

    // The flash is no part of the record, and unknown sessions are no error.
    assert_eq!(store.session_by_hash(hash).await.unwrap(), Some(session));
    store
        .set_session_flash(&SessionHash::from_stored(random_hex(32)), Some("x"))
        .await
        .unwrap();
    assert_eq!(
        store
            .take_session_flash(&SessionHash::from_stored(random_hex(32)))
            .await
            .unwrap(),
        None
    );
}

async fn concurrent_flash_takers_get_it_once(db: &Db) {
    // Two replicas, each with concurrent takers, over many rounds.
    let stores = [db.store().await, db.store().await];
    let session = new_session(&UserId::generate(), 0, 100);
    stores[0].insert_session(&session).await.unwrap();
    for round in 0..20 {
        let value = format!("flash {round}");
        stores[round % 2]
            .set_session_flash(&session.token_hash, Some(&value))
            .await
            .unwrap();
        let taken = join_all(8, |n| {
            let store = stores[n % 2].clone();
            let hash = session.token_hash.clone();
            async move { store.take_session_flash(&hash).await.unwrap() }
        })
        .await;
        let got: Vec<_> = taken.into_iter().flatten().collect();
        assert_eq!(got, vec![value], "round {round}");
    }
}
