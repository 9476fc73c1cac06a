//! The dashboard's pages over HTTP, as a browser without JavaScript uses
//! them: sign-in, keys shown once, revocation, isolation between users,
//! CSRF, setup, usage. (Real-browser tests: `tests/browser`.)

use reqwest::StatusCode;
use svc_server::ServerConfig;
use svc_test_support::{Browser, Database, TestApp};

use crate::body;

async fn models(app: &TestApp, key: &str) -> StatusCode {
    app.client
        .get(app.url("/v1/models"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .status()
}

/// Creates a key through the form; returns (id, secret).
async fn create_key(browser: &Browser, name: &str, expires: &str) -> (String, String) {
    let keys = browser.get("/dashboard/keys").await;
    let created = browser
        .post(
            "/dashboard/keys",
            &[("csrf", &keys.csrf()), ("name", name), ("expires", expires)],
        )
        .await;
    assert_eq!(created.status, 303, "{}", created.body);
    assert_eq!(created.location.as_deref(), Some("/dashboard/keys/new"));
    let shown = browser.get("/dashboard/keys/new").await;
    assert_eq!(shown.status, 200);
    let secret = shown.value_by_id("new-key").unwrap();
    assert!(secret.starts_with("sk-svc-"), "{secret}");
    let list = browser.get("/dashboard/keys").await;
    let hint_start = &secret[7..11];
    let row = list.body.find(hint_start).expect("the new key is listed");
    let id_at = list.body[..row].rfind("<tr id=\"").unwrap() + 8;
    let id = list.body[id_at..].split('"').next().unwrap().to_owned();
    (id, secret)
}

#[tokio::test]
async fn pages_need_sign_in() {
    let app = TestApp::spawn().await;
    let browser = Browser::new(&app.base_url);
    for path in [
        "/dashboard/keys",
        "/dashboard/usage",
        "/dashboard/device",
        "/dashboard/keys/new",
        "/dashboard/models",
    ] {
        let page = browser.get(path).await;
        assert_eq!(page.status, 303, "{path}");
        assert!(page.location.unwrap().starts_with("/dashboard/login?next="));
    }
    let page = browser.get("/dashboard/login").await;
    assert_eq!(page.status, 200);
    for (name, value) in [
        ("cache-control", "no-store"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
    ] {
        assert_eq!(page.headers[name], value, "{name}");
    }
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"));
    assert_eq!(browser.get("/dashboard/nothing-here").await.status, 404);
}

#[tokio::test]
async fn a_created_key_is_shown_once_works_and_can_be_revoked() {
    let app = TestApp::spawn().await;
    let (browser, _) = app.signed_in("alice@example.com", false).await;
    let cookie = browser.cookie("svc_session").unwrap();
    assert_eq!(cookie.len(), 64);

    let (id, secret) = create_key(&browser, "production backend", "30d").await;
    assert_eq!(models(&app, &secret).await, 200);

    // Reloading the page does not show the key again.
    let again = browser.get("/dashboard/keys/new").await;
    assert_eq!(again.status, 303);
    let list = browser.get("/dashboard/keys").await;
    assert!(!list.body.contains(&secret));
    assert!(list.body.contains("production backend"));
    assert!(
        list.body
            .contains(&format!("sk-svc-{}…{}", &secret[7..11], &secret[43..]))
    );
    assert!(list.body.contains("active"));

    // The store never held the key in the clear, not even while waiting to be shown.
    let record = app
        .keys
        .get(&svc_core::KeyId(id.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.created_via, svc_core::KeyOrigin::Dashboard);
    assert_eq!(record.expires_at.unwrap() - record.created_at, 30 * 86_400);

    // Revocation asks first, then takes effect on the next request.
    let confirm = browser.get(&format!("/dashboard/keys/{id}/revoke")).await;
    assert_eq!(confirm.status, 200);
    assert!(confirm.body.contains("Revoke key"));
    assert_eq!(models(&app, &secret).await, 200);
    let done = browser
        .post(
            &format!("/dashboard/keys/{id}/revoke"),
            &[("csrf", &confirm.csrf())],
        )
        .await;
    assert_eq!(done.status, 303);
    assert_eq!(models(&app, &secret).await, 401);
    let list = browser.follow(done).await;
    assert!(list.body.contains("was revoked"));
    assert!(list.body.contains("revoked"));
}

#[tokio::test]
async fn the_flash_in_the_store_is_sealed() {
    let app = TestApp::spawn().await;
    let (browser, _) = app.signed_in("alice@example.com", false).await;
    let keys = browser.get("/dashboard/keys").await;
    browser
        .post(
            "/dashboard/keys",
            &[
                ("csrf", &keys.csrf()),
                ("name", "sealed"),
                ("expires", "never"),
            ],
        )
        .await;
    // Read what the database holds for the session, as an attacker with a
    // copy of it would.
    let token = browser.cookie("svc_session").unwrap();
    let hash = svc_core::SessionHash::of(&token);
    use svc_core::store::SessionStore;
    let sealed = app.store.take_session_flash(&hash).await.unwrap().unwrap();
    assert!(!sealed.contains("sk-svc-"));
    assert!(svc_core::session::flash::open("another token", &sealed).is_none());
    let secret = svc_core::session::flash::open(&token, &sealed).unwrap();
    assert!(secret.contains("sk-svc-"));
}

#[tokio::test]
async fn users_see_and_revoke_only_their_own_keys() {
    let app = TestApp::spawn().await;
    let (alice, _) = app.signed_in("alice@example.com", false).await;
    let (bob, _) = app.signed_in("bob@example.com", false).await;
    let (admin, _) = app.signed_in("admin@example.com", true).await;
    let (id, secret) = create_key(&alice, "alice's key", "never").await;

    let bobs_list = bob.get("/dashboard/keys").await;
    assert!(!bobs_list.body.contains(&id));
    assert!(
        !bobs_list.body.contains("alice&#x27;s key") && !bobs_list.body.contains("alice's key")
    );
    // Guessing the id gets "not found", for the page and the action.
    let page = bob.get(&format!("/dashboard/keys/{id}/revoke")).await;
    assert_eq!(page.status, 404);
    let bobs_csrf = bob.get("/dashboard/keys").await.csrf();
    let attempt = bob
        .post(
            &format!("/dashboard/keys/{id}/revoke"),
            &[("csrf", &bobs_csrf)],
        )
        .await;
    assert_eq!(attempt.status, 404);
    assert_eq!(models(&app, &secret).await, 200);

    // An admin sees every key with its owner, and may revoke it.
    let all = admin.get("/dashboard/keys").await;
    assert!(all.body.contains(&id));
    assert!(all.body.contains("alice@example.com"));
    let confirm = admin.get(&format!("/dashboard/keys/{id}/revoke")).await;
    let done = admin
        .post(
            &format!("/dashboard/keys/{id}/revoke"),
            &[("csrf", &confirm.csrf())],
        )
        .await;
    assert_eq!(done.status, 303);
    assert_eq!(models(&app, &secret).await, 401);
}

#[tokio::test]
async fn forms_without_the_right_csrf_token_are_refused() {
    let app = TestApp::spawn().await;
    let (browser, _) = app.signed_in("alice@example.com", false).await;
    for token in [
        "",
        "0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        let page = browser
            .post(
                "/dashboard/keys",
                &[("csrf", token), ("name", "x"), ("expires", "never")],
            )
            .await;
        assert_eq!(page.status, 403, "{token:?}");
    }
    assert!(app.keys.list(None).await.unwrap().is_empty());

    // The sign-in form checks its double-submit cookie.
    app.create_user("bob@example.com", "password123", false)
        .await;
    let other = Browser::new(&app.base_url);
    let login = other.get("/dashboard/login").await;
    other.set_cookie("svc_csrf", &"1".repeat(64));
    let page = other
        .post(
            "/dashboard/login",
            &[
                ("csrf", &login.csrf()),
                ("email", "bob@example.com"),
                ("password", "password123"),
            ],
        )
        .await;
    assert_eq!(page.status, 403);
    assert!(other.cookie("svc_session").is_none());
}

#[tokio::test]
async fn sign_in_failures_are_throttled_and_sign_out_ends_the_session() {
    let app = TestApp::spawn().await;
    app.create_user("alice@example.com", "password123", false)
        .await;
    let browser = Browser::new(&app.base_url);
    let attempt = |password: &'static str| {
        let browser = &browser;
        async move {
            let login = browser.get("/dashboard/login").await;
            browser
                .post(
                    "/dashboard/login",
                    &[
                        ("csrf", &login.csrf()),
                        ("email", "Alice@Example.com"),
                        ("password", password),
                    ],
                )
                .await
        }
    };
    let wrong = attempt("wrong password").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.body.contains("Incorrect email or password"));
    // Unknown accounts get the same answer.
    let login = browser.get("/dashboard/login").await;
    let unknown = browser
        .post(
            "/dashboard/login",
            &[
                ("csrf", &login.csrf()),
                ("email", "nobody@example.com"),
                ("password", "x"),
            ],
        )
        .await;
    assert_eq!(unknown.status, 401);
    assert!(unknown.body.contains("Incorrect email or password"));
    for _ in 0..4 {
        attempt("wrong password").await;
    }
    let locked = attempt("password123").await;
    assert_eq!(locked.status, 429, "even the right password waits");
    assert!(locked.body.contains("Too many failed sign-ins"));

    let (bob, _) = app.signed_in("bob@example.com", false).await;
    let keys = bob.get("/dashboard/keys").await;
    let out = bob
        .post("/dashboard/logout", &[("csrf", &keys.csrf())])
        .await;
    assert_eq!(out.status, 303);
    assert!(bob.cookie("svc_session").is_none());
    assert_eq!(bob.get("/dashboard/keys").await.status, 303);
}

#[tokio::test]
async fn the_session_cookie_is_http_only_lax_and_secure_on_https() {
    let app = TestApp::spawn_with(
        Database::Sqlite,
        ServerConfig {
            public_url: Some("https://svc.example".parse().unwrap()),
            ..ServerConfig::default()
        },
    )
    .await;
    app.create_user("alice@example.com", "password123", false)
        .await;
    let browser = Browser::new(&app.base_url);
    let login = browser.get("/dashboard/login").await;
    let done = browser
        .post(
            "/dashboard/login",
            &[
                ("csrf", &login.csrf()),
                ("email", "alice@example.com"),
                ("password", "password123"),
                ("next", "https://evil.example/"),
            ],
        )
        .await;
    assert_eq!(
        done.location.as_deref(),
        Some("/dashboard/keys"),
        "no open redirect"
    );
    let cookie = done
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|c| c.starts_with("svc_session="))
        .unwrap();
    for part in ["HttpOnly", "SameSite=Lax", "Secure", "Path=/dashboard"] {
        assert!(cookie.contains(part), "{cookie}");
    }
}

#[tokio::test]
async fn the_first_admin_is_created_through_the_one_time_setup_link() {
    let app = TestApp::spawn().await;
    let token = app.accounts.setup_token().await.unwrap().unwrap();
    let browser = Browser::new(&app.base_url);
    let page = browser
        .get(&format!("/dashboard/setup?token={token}"))
        .await;
    assert_eq!(page.status, 200);
    let form = |email: &'static str, token: String, csrf: String| async move {
        vec![
            ("csrf", csrf),
            ("token", token),
            ("email", email.to_owned()),
            ("password", "password123".to_owned()),
            ("confirm", "password123".to_owned()),
        ]
    };
    let fields = form("root@example.com", token.clone(), page.csrf()).await;
    let refs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let done = browser.post("/dashboard/setup", &refs).await;
    assert_eq!(done.status, 303, "{}", done.body);
    let keys = browser.follow(done).await;
    assert!(keys.body.contains("admin"));
    let users = app.accounts.list_users().await.unwrap();
    assert_eq!(users.len(), 1);
    assert!(users[0].is_admin);

    // The link works once.
    let other = Browser::new(&app.base_url);
    let page = other.get(&format!("/dashboard/setup?token={token}")).await;
    let fields = form("evil@example.com", token, page.csrf()).await;
    let refs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let again = other.post("/dashboard/setup", &refs).await;
    assert_eq!(again.status, 400);
    assert!(again.body.contains("invalid, used or expired"));
    assert!(app.accounts.setup_token().await.unwrap().is_none());
}

#[tokio::test]
async fn sign_up_is_off_unless_enabled() {
    let app = TestApp::spawn().await;
    assert_eq!(
        Browser::new(&app.base_url)
            .get("/dashboard/signup")
            .await
            .status,
        404
    );

    let app = TestApp::spawn_with(
        Database::Sqlite,
        ServerConfig {
            allow_signup: true,
            ..ServerConfig::default()
        },
    )
    .await;
    let browser = Browser::new(&app.base_url);
    let page = browser.get("/dashboard/signup").await;
    let short = browser
        .post(
            "/dashboard/signup",
            &[
                ("csrf", &page.csrf()),
                ("email", "new@example.com"),
                ("password", "short"),
                ("confirm", "short"),
            ],
        )
        .await;
    assert_eq!(short.status, 400);
    assert!(short.body.contains("at least 8 characters"));
    let done = browser
        .post(
            "/dashboard/signup",
            &[
                ("csrf", &page.csrf()),
                ("email", "new@example.com"),
                ("password", "password123"),
                ("confirm", "password123"),
            ],
        )
        .await;
    assert_eq!(done.status, 303);
    let users = app.accounts.list_users().await.unwrap();
    assert_eq!(users.len(), 1);
    assert!(!users[0].is_admin);
}

#[tokio::test]
async fn usage_is_counted_per_key_and_shown() {
    let app = TestApp::spawn().await;
    let (browser, _) = app.signed_in("alice@example.com", false).await;
    let (_, secret) = create_key(&browser, "metered", "never").await;
    for stream in [false, true] {
        let mut request = body("svc", "hello");
        request["stream"] = serde_json::json!(stream);
        let response = app.chat(&secret, &request).await;
        assert_eq!(response.status(), 200);
        response.bytes().await.unwrap();
    }
    // Usage is written off the response path, once a second; give it time.
    let mut rows = Vec::new();
    for _ in 0..200 {
        rows = svc_core::store::UsageStore::usage_since(&*app.store, None, "2000-01-01")
            .await
            .unwrap();
        if rows.first().is_some_and(|r| r.requests == 2) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].requests, 2);
    assert!(rows[0].prompt_tokens > 0 && rows[0].completion_tokens > 0);
    let page = browser.get("/dashboard/usage").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<svg"));
    assert!(page.body.contains("metered"));
    assert!(
        page.body
            .contains(&format!("<strong>{}</strong> requests", 2))
    );

    // Another user sees none of it.
    let (bob, _) = app.signed_in("bob@example.com", false).await;
    let page = bob.get("/dashboard/usage").await;
    assert!(page.body.contains("No requests in the last 30 days"));
}

#[tokio::test]
async fn every_page_renders() {
    let app = TestApp::spawn().await;
    let (browser, _) = app.signed_in("alice@example.com", true).await;
    for path in [
        "/dashboard/keys",
        "/dashboard/usage",
        "/dashboard/device",
        "/dashboard/models",
    ] {
        let page = browser.get(path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert!(page.body.contains("alice@example.com"), "{path}");
    }
    let css = browser.get("/dashboard/static/app.css").await;
    assert_eq!(css.status, 200);
    assert!(
        css.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
    assert_eq!(browser.get("/dashboard/static/app.js").await.status, 200);
    assert_eq!(
        browser.get("/dashboard").await.location.as_deref(),
        Some("/dashboard/keys")
    );
}
