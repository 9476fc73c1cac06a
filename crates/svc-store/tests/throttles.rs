//! The throttles of svc-core's services on a real store, SQLite and
//! PostgreSQL: a burst of parallel attempts gets no more than the limit
//! through, because each attempt counts itself before its work.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

mod common;

use std::sync::Arc;

use common::{Db, join_all};
use svc_core::{
    AccountService, CodeLookup, DeviceClient, DeviceService, SignInError, UserCode, UserId,
};

on_both_backends!(
    parallel_wrong_passwords_get_at_most_the_limit_checked,
    parallel_wrong_user_codes_get_at_most_the_limit_looked_up,
    parallel_code_requests_get_at_most_the_limit_issued,
    new_buckets_sweep_stale_ones,
    the_addresses_of_one_ipv6_64_are_one_client,
);

async fn parallel_wrong_passwords_get_at_most_the_limit_checked(db: &Db) {
    let store = Arc::new(db.store().await);
    let accounts = AccountService::new(store);
    accounts
        .create_user("owner@example.com", "password123", false, None)
        .await
        .unwrap();
    let outcomes = join_all(100, |_| {
        let accounts = accounts.clone();
        async move {
            match accounts
                .sign_in("owner@example.com", "wrong password", Some("203.0.113.5"))
                .await
            {
                Err(SignInError::Invalid) => "checked",
                Err(SignInError::Throttled { .. }) => "throttled",
                other => panic!("{other:?}"),
            }
        }
    })
    .await;
    let checked = outcomes.iter().filter(|o| **o == "checked").count();
    assert_eq!(checked, 5, "argon2 ran once per allowed attempt only");

    // The owner, from another address, is not locked out.
    accounts
        .sign_in("owner@example.com", "password123", Some("198.51.100.7"))
        .await
        .unwrap();
}

async fn parallel_wrong_user_codes_get_at_most_the_limit_looked_up(db: &Db) {
    let store = Arc::new(db.store().await);
    let devices = DeviceService::new(store, Default::default());
    let user = UserId::generate();
    let outcomes = join_all(100, |_| {
        let devices = devices.clone();
        let user = user.clone();
        async move {
            // Well-formed codes that no authorization has.
            let code = UserCode::generate().display();
            match devices.lookup(&code, &user, "203.0.113.5").await.unwrap() {
                CodeLookup::Unknown => "checked",
                CodeLookup::Throttled(_) => "throttled",
                other => panic!("{other:?}"),
            }
        }
    })
    .await;
    let checked = outcomes.iter().filter(|o| **o == "checked").count();
    assert_eq!(checked, 10);
}

async fn parallel_code_requests_get_at_most_the_limit_issued(db: &Db) {
    let store = Arc::new(db.store().await);
    let devices = DeviceService::new(store.clone(), Default::default());
    let client = |address: &str| DeviceClient {
        address: Some(address.to_owned()),
        ..DeviceClient::default()
    };
    let outcomes = join_all(60, |_| {
        let devices = devices.clone();
        let client = client("203.0.113.5");
        async move { devices.start(client).await.unwrap().is_ok() }
    })
    .await;
    assert_eq!(outcomes.iter().filter(|issued| **issued).count(), 20);
    use svc_core::store::DeviceStore;
    assert_eq!(store.count_live_devices(0).await.unwrap(), 20);
    // Another address still gets codes.
    assert!(devices.start(client("198.51.100.7")).await.unwrap().is_ok());
}

async fn new_buckets_sweep_stale_ones(db: &Db) {
    use svc_core::store::ThrottleStore;
    let store = Arc::new(db.store().await);
    // A bucket from long ago, as a past attacker's address leaves behind.
    store.hit("signin-address:198.51.100.1", 0).await.unwrap();
    let devices = DeviceService::new(store.clone(), Default::default());
    let client = DeviceClient {
        address: Some("203.0.113.5".into()),
        ..DeviceClient::default()
    };
    assert!(devices.start(client).await.unwrap().is_ok());
    assert_eq!(
        store.hits("signin-address:198.51.100.1", 0).await.unwrap(),
        0
    );
}

/// Attack (issue 29, finding 8): the connection caps counted IPv6 clients
/// by /64, but the throttles by whole address, so one /64 had 2^64 fresh
/// budgets. Every per-address throttle now counts a /64 as one client.
async fn the_addresses_of_one_ipv6_64_are_one_client(db: &Db) {
    let store = Arc::new(db.store().await);
    let accounts = AccountService::new(store.clone());
    accounts
        .create_user("owner@example.com", "password123", false, None)
        .await
        .unwrap();
    // Wrong passwords from ever new addresses of one /64: the account and
    // address pair allows 5, the /64 as one client.
    let mut checked = 0;
    for n in 1..=10 {
        let address = format!("2001:db8:1:2::{n:x}");
        match accounts
            .sign_in("owner@example.com", "wrong password", Some(&address))
            .await
        {
            Err(SignInError::Invalid) => checked += 1,
            Err(SignInError::Throttled { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(checked, 5);
    // Other emails from the /64: 20 attempts per address in all (5 made).
    let mut checked = 0;
    for n in 0..30 {
        let address = format!("2001:db8:1:2:{n:x}::1");
        match accounts
            .sign_in(
                &format!("u{n}@example.com"),
                "wrong password",
                Some(&address),
            )
            .await
        {
            Err(SignInError::Invalid) => checked += 1,
            Err(SignInError::Throttled { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(checked, 15);
    // The owner, from the next /64, is not locked out.
    accounts
        .sign_in("owner@example.com", "password123", Some("2001:db8:1:3::1"))
        .await
        .unwrap();

    // Device-code requests: 20 per address, whatever part of the /64 asks.
    let devices = DeviceService::new(store, Default::default());
    let client = |address: String| DeviceClient {
        address: Some(address),
        ..DeviceClient::default()
    };
    let mut issued = 0;
    for n in 0..30 {
        let address = format!("2001:db8:9:9:{n:x}:{n:x}::1");
        if devices.start(client(address)).await.unwrap().is_ok() {
            issued += 1;
        }
    }
    assert_eq!(issued, 20);
    assert!(
        devices
            .start(client("2001:db8:9:a::1".into()))
            .await
            .unwrap()
            .is_ok()
    );
}
