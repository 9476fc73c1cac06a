//! Offboarding through the dashboard (issue 16, finding 8), on SQLite and
//! on PostgreSQL: an admin disables, enables or deletes an account, and its
//! keys, sessions, sign-in and device approvals follow at once; nobody else
//! reaches these controls.

use std::time::{Duration, Instant};

use svc_core::{DeviceConfig, NewKey, UserRecord};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Browser, Database, TestApp};

use crate::device::{decide, poll, start};

on_both_databases!(
    disabling_refuses_keys_sessions_sign_in_and_approvals_at_once,
    deleting_revokes_the_keys_and_removes_the_account,
    only_admins_reach_the_user_controls,
);

async fn spawn(db: Database) -> TestApp {
    let config = ServerConfig {
        device: DeviceConfig {
            interval: 1,
            ..DeviceConfig::default()
        },
        ..ServerConfig::default()
    };
    TestApp::spawn_with(db, config).await
}

async fn models(app: &TestApp, key: &str) -> reqwest::Response {
    app.client
        .get(app.url("/v1/models"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
}

/// A key of `user`'s, as its secret.
async fn key_of(app: &TestApp, user: &UserRecord) -> String {
    let (key, _) = app
        .keys
        .create(
            NewKey {
                name: format!("{}'s key", user.email),
                owner_id: Some(user.id.clone()),
                created_via: svc_core::KeyOrigin::Dashboard,
                expires_in: None,
                scope: Default::default(),
            },
            &svc_core::Actor::Operator,
        )
        .await
        .unwrap();
    key.expose().to_owned()
}

/// Starts a device login and has `browser` approve it; returns the device
/// code, not yet polled.
async fn approved_device_code(app: &TestApp, browser: &Browser) -> String {
    let codes = start(app).await;
    let done = decide(browser, codes["user_code"].as_str().unwrap(), "approve").await;
    assert!(done.body.contains("Device approved"), "{}", done.body);
    codes["device_code"].as_str().unwrap().to_owned()
}

/// The sign-in form's answer for `email` with `password123`.
async fn sign_in_status(app: &TestApp, email: &str) -> (u16, String) {
    let browser = Browser::new(&app.base_url);
    let login = browser.get("/dashboard/login").await;
    let done = browser
        .post(
            "/dashboard/login",
            &[
                ("csrf", &login.csrf()),
                ("email", email),
                ("password", "password123"),
                ("next", "/dashboard/keys"),
            ],
        )
        .await;
    (done.status.as_u16(), done.body)
}

/// Confirms and submits `action` on `user` as `admin`; returns the answer.
async fn act(admin: &Browser, user: &UserRecord, action: &str) -> svc_test_support::Page {
    let path = format!("/dashboard/users/{}/{action}", user.id);
    let confirm = admin.get(&path).await;
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    assert!(confirm.body.contains(&user.email), "{}", confirm.body);
    admin.post(&path, &[("csrf", &confirm.csrf())]).await
}

async fn disabling_refuses_keys_sessions_sign_in_and_approvals_at_once(db: Database) {
    let app = spawn(db).await;
    let (admin, _) = app.signed_in("admin@example.com", true).await;
    let (alice_browser, alice) = app.signed_in("alice@example.com", false).await;
    let (_, bob) = app.signed_in("bob@example.com", false).await;
    let key = key_of(&app, &alice).await;
    let bobs_key = key_of(&app, &bob).await;
    // Used (and remembered by the server) just before.
    assert_eq!(models(&app, &key).await.status(), 200);
    let device_code = approved_device_code(&app, &alice_browser).await;

    let users = admin.get("/dashboard/users").await;
    assert_eq!(users.status, 200);
    assert!(users.body.contains("alice@example.com"));
    let done = act(&admin, &alice, "disable").await;
    assert_eq!(done.status, 303, "{}", done.body);

    // The very next request with the key is refused, without quoting it.
    let refused = models(&app, &key).await;
    let message = crate::expect_error(
        refused,
        401,
        "invalid_request_error",
        "invalid_api_key",
        None,
    )
    .await;
    assert!(message.contains("disabled"), "{message}");
    assert!(!message.contains(&key[7..]), "{message}");
    assert_eq!(models(&app, &bobs_key).await.status(), 200);
    // Signed out everywhere, and cannot sign in again.
    let page = alice_browser.get("/dashboard/keys").await;
    assert_eq!(page.status, 303);
    assert!(page.location.unwrap().starts_with("/dashboard/login"));
    let (status, body) = sign_in_status(&app, "alice@example.com").await;
    assert_eq!(status, 403);
    assert!(body.contains("disabled"), "{body}");
    // The device login approved before is never completed.
    let (status, body) = poll(&app, &device_code).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "access_denied", "{body}");
    assert!(app.keys.list(Some(&alice.id)).await.unwrap().len() == 1);
    let listed = admin.follow(done).await;
    assert!(listed.body.contains("was disabled"), "{}", listed.body);
    // The admin's key list shows the key as disabled, still revocable.
    let keys = admin.get("/dashboard/keys").await;
    let row_at = keys.body.find(&key[7..11]).unwrap();
    let row = &keys.body[row_at..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains("state disabled"), "{row}");
    assert!(row.contains("/revoke"), "{row}");

    // Enabled: the key works again and alice can sign in; the denied
    // device login stays denied.
    let done = act(&admin, &alice, "enable").await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(models(&app, &key).await.status(), 200);
    assert_eq!(sign_in_status(&app, "alice@example.com").await.0, 303);
    let (_, body) = poll(&app, &device_code).await;
    assert_eq!(body["error"]["code"], "access_denied", "{body}");
}

async fn deleting_revokes_the_keys_and_removes_the_account(db: Database) {
    let app = spawn(db).await;
    let (admin, _) = app.signed_in("admin@example.com", true).await;
    let (bob_browser, bob) = app.signed_in("bob@example.com", false).await;
    let key = key_of(&app, &bob).await;
    assert_eq!(models(&app, &key).await.status(), 200);

    let done = act(&admin, &bob, "delete").await;
    assert_eq!(done.status, 303, "{}", done.body);
    let refused = models(&app, &key).await;
    assert_eq!(refused.status(), 401);
    assert_eq!(bob_browser.get("/dashboard/keys").await.status, 303);
    assert_eq!(sign_in_status(&app, "bob@example.com").await.0, 401);
    assert_eq!(app.accounts.user(&bob.id).await.unwrap(), None);
    let users = admin.follow(done).await;
    assert!(users.body.contains("was deleted"), "{}", users.body);
    assert!(!users.body.contains(&bob.id.0));
    // The key's record stays, revoked, for its usage history.
    let keys = app.keys.list(Some(&bob.id)).await.unwrap();
    assert!(keys.len() == 1 && keys[0].revoked_at.is_some());
    // Gone: its pages are not found.
    let path = format!("/dashboard/users/{}/delete", bob.id);
    assert_eq!(admin.get(&path).await.status, 404);
}

async fn only_admins_reach_the_user_controls(db: Database) {
    let app = spawn(db).await;
    let (admin, admin_user) = app.signed_in("admin@example.com", true).await;
    let (mallory, _) = app.signed_in("mallory@example.com", false).await;
    let (_, victim) = app.signed_in("victim@example.com", false).await;
    let key = key_of(&app, &victim).await;

    // To a non-admin the section does not exist, for pages and actions.
    let keys_page = mallory.get("/dashboard/keys").await;
    assert!(!keys_page.body.contains("/dashboard/users"));
    let csrf = keys_page.csrf();
    assert_eq!(mallory.get("/dashboard/users").await.status, 404);
    for action in ["disable", "enable", "delete"] {
        let path = format!("/dashboard/users/{}/{action}", victim.id);
        assert_eq!(mallory.get(&path).await.status, 404, "{action}");
        let attempt = mallory.post(&path, &[("csrf", &csrf)]).await;
        assert_eq!(attempt.status, 404, "{action}");
    }
    assert_eq!(models(&app, &key).await.status(), 200);
    assert!(
        app.accounts
            .user(&victim.id)
            .await
            .unwrap()
            .unwrap()
            .disabled_at
            .is_none()
    );

    // An admin without the form's token is refused too.
    let path = format!("/dashboard/users/{}/disable", victim.id);
    let forged = admin.post(&path, &[("csrf", &"0".repeat(64))]).await;
    assert_eq!(forged.status, 403);
    assert_eq!(models(&app, &key).await.status(), 200);

    // An admin cannot disable or delete their own account here.
    let own_csrf = admin.get("/dashboard/users").await.csrf();
    for action in ["disable", "delete"] {
        let path = format!("/dashboard/users/{}/{action}", admin_user.id);
        let attempt = admin.post(&path, &[("csrf", &own_csrf)]).await;
        assert_eq!(attempt.status, 400, "{action}");
    }
    assert_eq!(admin.get("/dashboard/users").await.status, 200);
    let unknown = admin
        .post(
            "/dashboard/users/usr_0000000000000000/disable",
            &[("csrf", &own_csrf)],
        )
        .await;
    assert_eq!(unknown.status, 404);
    let nonsense = format!("/dashboard/users/{}/promote", victim.id);
    assert_eq!(admin.get(&nonsense).await.status, 404);
}

/// Two servers on one PostgreSQL: an account disabled through one has its
/// key refused by both on their next request.
#[tokio::test]
async fn two_replicas_refuse_a_disabled_accounts_key_at_once() {
    let schema = TestSchema::create(&postgres_url()).await.unwrap();
    let url = schema.url().to_owned();
    let first = spawn(Database::Url(url.clone())).await;
    let second = spawn(Database::Url(url)).await;
    let (admin, _) = first.signed_in("admin@example.com", true).await;
    let (_, alice) = first.signed_in("alice@example.com", false).await;
    let key = key_of(&first, &alice).await;
    assert_eq!(models(&first, &key).await.status(), 200);
    assert_eq!(models(&second, &key).await.status(), 200);

    let done = act(&admin, &alice, "disable").await;
    assert_eq!(done.status, 303, "{}", done.body);
    // The replica that disabled refuses at once; the other as soon as the
    // notification is read (the first waited for its own echo already).
    assert_eq!(models(&first, &key).await.status(), 401);
    let started = Instant::now();
    while models(&second, &key).await.status() != 401 {
        assert!(
            started.elapsed() < Duration::from_millis(250),
            "the other replica still accepts the key"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    drop((first, second));
    schema.remove().await.unwrap();
}
