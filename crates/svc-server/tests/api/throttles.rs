//! Attacks on the anonymous and code-entry paths (issue 16): bursts of
//! wrong passwords and codes, lockouts used as a weapon, floods of device
//! codes, and what sign-up and the pages give away. Distinct clients come
//! from distinct loopback addresses (127.0.0.2 and up).

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use futures::future::join_all;
use reqwest::header::{COOKIE, SET_COOKIE};
use reqwest::redirect::Policy;
use serde_json::{Value, json};
use svc_server::ServerConfig;
use svc_test_support::{Browser, Database, TestApp};

/// A client whose connections come from 127.0.0.`last`.
fn client_from(last: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))
        .redirect(Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// A double-submit CSRF token, as the sign-in page would have set it.
const CSRF: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

/// Posts an anonymous dashboard form (sign-in, sign-up) from `client`.
async fn post_form(
    app: &TestApp,
    client: &reqwest::Client,
    path: &str,
    fields: &[(&str, &str)],
) -> reqwest::Response {
    let mut form = vec![("csrf", CSRF)];
    form.extend_from_slice(fields);
    client
        .post(app.url(path))
        .header(COOKIE, format!("svc_csrf={CSRF}"))
        .form(&form)
        .send()
        .await
        .unwrap()
}

async fn sign_in(
    app: &TestApp,
    client: &reqwest::Client,
    email: &str,
    password: &str,
) -> reqwest::Response {
    post_form(
        app,
        client,
        "/dashboard/login",
        &[("email", email), ("password", password)],
    )
    .await
}

fn sets_session(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .any(|c| c.to_str().unwrap().starts_with("svc_session=") && !c.is_empty())
}

/// The service still answers someone else promptly.
async fn answers_others(app: &TestApp) {
    let started = Instant::now();
    let health = app
        .client
        .get(app.url("/health"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(2));
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

#[tokio::test]
async fn parallel_wrong_passwords_for_one_account_check_only_the_limit() {
    let app = TestApp::spawn().await;
    app.create_user("owner@example.com", "password123", false)
        .await;
    let attacker = client_from(2);
    let started = Instant::now();
    let attempts =
        (0..100).map(|_| sign_in(&app, &attacker, "owner@example.com", "wrong password"));
    let (responses, ()) = tokio::join!(join_all(attempts), answers_others(&app));
    let statuses: Vec<u16> = responses.iter().map(|r| r.status().as_u16()).collect();
    // 401: the password was checked (argon2 ran); 429: refused before.
    assert_eq!(count(&statuses, 401), 5, "{statuses:?}");
    assert_eq!(count(&statuses, 429), 95, "{statuses:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[tokio::test]
async fn an_attacker_elsewhere_does_not_lock_the_owner_out() {
    let app = TestApp::spawn().await;
    app.create_user("owner@example.com", "password123", false)
        .await;
    let attacker = client_from(2);
    let attempts = (0..30).map(|_| sign_in(&app, &attacker, "owner@example.com", "wrong password"));
    let statuses: Vec<u16> = join_all(attempts)
        .await
        .iter()
        .map(|r| r.status().as_u16())
        .collect();
    assert_eq!(count(&statuses, 401), 5, "{statuses:?}");
    // The attacker's address is locked for this account, even with the
    // right password...
    let locked = sign_in(&app, &attacker, "owner@example.com", "password123").await;
    assert_eq!(locked.status(), 429);
    assert!(!sets_session(&locked));
    // ...the owner, from their own address, is not.
    let owner = client_from(3);
    let signed_in = sign_in(&app, &owner, "owner@example.com", "password123").await;
    assert_eq!(signed_in.status(), 303);
    assert!(sets_session(&signed_in));
    answers_others(&app).await;
}

#[tokio::test]
async fn password_hashing_runs_at_most_once_per_core() {
    let app = TestApp::spawn().await;
    // Unknown accounts cost a full argon2 verification too; spread over
    // addresses so no throttle refuses them.
    let clients: Vec<_> = (4..10).map(client_from).collect();
    let attempts = (0..24).map(|n| {
        let client = &clients[n % clients.len()];
        let email = format!("nobody{n}@example.com");
        let app = &app;
        async move { sign_in(app, client, &email, "wrong password").await }
    });
    let started = Instant::now();
    let (responses, ()) = tokio::join!(join_all(attempts), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        answers_others(&app).await;
    });
    for response in &responses {
        assert!(
            [401, 503].contains(&response.status().as_u16()),
            "{}",
            response.status()
        );
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    let stats = svc_core::account::hashing_stats();
    assert!(
        stats.peak <= stats.permits,
        "{} argon2 runs at once, {} allowed",
        stats.peak,
        stats.permits
    );
}

#[tokio::test]
async fn a_control_character_in_next_gets_a_redirect_not_a_500() {
    let app = TestApp::spawn().await;
    app.create_user("owner@example.com", "password123", false)
        .await;
    let client = client_from(2);
    for next in [
        "/dashboard/keys\n",
        "/dashboard/usage\r\nX-Evil: 1",
        "/dashboard/\u{7f}",
    ] {
        let done = post_form(
            &app,
            &client,
            "/dashboard/login",
            &[
                ("email", "owner@example.com"),
                ("password", "password123"),
                ("next", next),
            ],
        )
        .await;
        assert_eq!(done.status(), 303, "{next:?}");
        assert_eq!(done.headers()["location"], "/dashboard/keys", "{next:?}");
        assert!(done.headers().get("x-evil").is_none());
    }
    let page = Browser::new(&app.base_url)
        .get("/dashboard/login?next=%2Fdashboard%2Fkeys%0A")
        .await;
    assert_eq!(page.status, 200);
    assert_eq!(page.input_value("next").as_deref(), Some("/dashboard/keys"));
}

fn with_signup() -> ServerConfig {
    ServerConfig {
        allow_signup: true,
        ..ServerConfig::default()
    }
}

#[tokio::test]
async fn sign_up_answers_the_same_for_taken_and_new_emails() {
    let app = TestApp::spawn_with(Database::Sqlite, with_signup()).await;
    app.create_user("taken@example.com", "password123", false)
        .await;
    let sign_up = |email: &'static str, from: u8| {
        let app = &app;
        async move {
            let client = client_from(from);
            let response = post_form(
                app,
                &client,
                "/dashboard/signup",
                &[
                    ("email", email),
                    ("password", "another password"),
                    ("confirm", "another password"),
                ],
            )
            .await;
            let status = response.status();
            let headers: Vec<(String, String)> = response
                .headers()
                .iter()
                .filter(|(name, _)| !["date", "x-request-id"].contains(&name.as_str()))
                .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
                .collect();
            let body = response.text().await.unwrap();
            (status, headers, body)
        }
    };
    let taken = sign_up("taken@example.com", 2).await;
    let new = sign_up("new@example.com", 3).await;
    assert_eq!(taken, new, "a taken email is answered as a new one");
    assert_eq!(new.0, 303);
    assert!(!new.1.iter().any(|(name, _)| name == "set-cookie"));
    // The new account exists; the taken one keeps its password.
    let users = app.accounts.list_users().await.unwrap();
    assert_eq!(users.len(), 2);
    let owner = client_from(4);
    assert_eq!(
        sign_in(&app, &owner, "taken@example.com", "password123")
            .await
            .status(),
        303
    );
    let login = Browser::new(&app.base_url)
        .get(
            new.1
                .iter()
                .find(|(n, _)| n == "location")
                .unwrap()
                .1
                .as_str(),
        )
        .await;
    assert!(login.body.contains("sign in with the password you chose"));
}

#[tokio::test]
async fn sign_ups_are_throttled_per_address() {
    let app = TestApp::spawn_with(Database::Sqlite, with_signup()).await;
    let client = client_from(2);
    let sign_up = |email: String, client: &reqwest::Client| {
        let app = &app;
        let client = client.clone();
        async move {
            post_form(
                app,
                &client,
                "/dashboard/signup",
                &[
                    ("email", &email),
                    ("password", "password123"),
                    ("confirm", "password123"),
                ],
            )
            .await
            .status()
            .as_u16()
        }
    };
    let statuses = join_all((0..8).map(|n| sign_up(format!("user{n}@example.com"), &client))).await;
    assert_eq!(count(&statuses, 303), 5, "{statuses:?}");
    assert_eq!(count(&statuses, 429), 3, "{statuses:?}");
    assert_eq!(app.accounts.list_users().await.unwrap().len(), 5);
    // Another address still signs up.
    assert_eq!(
        sign_up("other@example.com".into(), &client_from(3)).await,
        303
    );
    answers_others(&app).await;
}

async fn request_code(app: &TestApp, client: &reqwest::Client) -> reqwest::Response {
    client
        .post(app.url("/v1/auth/device/code"))
        .json(&json!({"client_id": "svc-cli"}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn device_code_requests_are_throttled_per_address() {
    let app = TestApp::spawn().await;
    let flooder = client_from(2);
    let responses = join_all((0..25).map(|_| request_code(&app, &flooder))).await;
    let statuses: Vec<u16> = responses.iter().map(|r| r.status().as_u16()).collect();
    assert_eq!(count(&statuses, 200), 20, "{statuses:?}");
    let refused = responses.into_iter().find(|r| r.status() == 429).unwrap();
    let retry_after: i64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=600).contains(&retry_after));
    crate::expect_error(refused, 429, "requests", "slow_down", None).await;
    // The RFC 8628 form dialect gets its own error body.
    let form = flooder
        .post(app.url("/v1/auth/device/code"))
        .form(&[("client_id", "svc-cli")])
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 429);
    assert_eq!(form.json::<Value>().await.unwrap()["error"], "slow_down");
    // Another address still gets codes.
    assert_eq!(request_code(&app, &client_from(3)).await.status(), 200);
    answers_others(&app).await;
}

#[tokio::test]
async fn parallel_wrong_user_codes_look_up_only_the_limit() {
    let app = TestApp::spawn().await;
    let (browser, _) = app.signed_in("alice@example.com", false).await;
    let csrf = browser.get("/dashboard/device").await.csrf();
    let attempts = (0..100).map(|_| {
        let code = svc_core::UserCode::generate().display();
        let browser = &browser;
        let csrf = &csrf;
        async move {
            browser
                .post(
                    "/dashboard/device",
                    &[("csrf", csrf.as_str()), ("user_code", &code)],
                )
                .await
                .status
                .as_u16()
        }
    });
    let (statuses, ()) = tokio::join!(join_all(attempts), answers_others(&app));
    assert_eq!(count(&statuses, 404), 10, "{statuses:?}");
    assert_eq!(count(&statuses, 429), 90, "{statuses:?}");
}

#[tokio::test]
async fn a_link_with_a_user_code_spends_no_attempts() {
    let app = TestApp::spawn().await;
    let (browser, _) = app.signed_in("alice@example.com", false).await;
    // What a page on another site could make the browser open, many times.
    for _ in 0..30 {
        let page = browser.get("/dashboard/device?user_code=BBBB-BBBB").await;
        assert_eq!(page.status, 200);
        assert_eq!(page.input_value("user_code").as_deref(), Some("BBBB-BBBB"));
        assert!(!page.body.contains("not valid"));
    }
    // Looking a code up needs the session's CSRF token.
    let forged = browser
        .post(
            "/dashboard/device",
            &[("csrf", "forged"), ("user_code", "BBBB-BBBB")],
        )
        .await;
    assert_eq!(forged.status, 403);
    let codes = request_code(&app, &app.client)
        .await
        .json::<Value>()
        .await
        .unwrap();
    let confirm = browser
        .enter_device_code(codes["user_code"].as_str().unwrap())
        .await;
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    assert!(confirm.body.contains("Approve"));
}

#[tokio::test]
async fn client_names_cannot_reorder_the_approval_page() {
    let app = TestApp::spawn().await;
    let codes = app
        .client
        .post(app.url("/v1/auth/device/code"))
        .json(&json!({
            "client_id": "svc-cli\u{202E}txt.exe\u{202C}",
            "scope": "chat\u{2066}\u{200F}keys\u{2069}",
        }))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let (browser, _) = app.signed_in("alice@example.com", false).await;
    let confirm = browser
        .enter_device_code(codes["user_code"].as_str().unwrap())
        .await;
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    assert!(confirm.body.contains("svc-clitxt.exe"), "{}", confirm.body);
    assert!(confirm.body.contains("chatkeys"), "{}", confirm.body);
    let hidden = confirm.body.chars().find(|c| {
        matches!(
            c,
            '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
    });
    assert_eq!(hidden, None, "{}", confirm.body);
}
