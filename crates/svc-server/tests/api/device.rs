//! The device authorization flow over HTTP: the spec's JSON dialect, the
//! RFC 8628 form dialect, and every state, with approval done through the
//! dashboard's pages as a person would.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use svc_core::DeviceConfig;
use svc_server::ServerConfig;
use svc_server::config::Cidr;
use svc_test_support::{Browser, Database, TestApp};

const GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";

async fn spawn(device: DeviceConfig) -> TestApp {
    TestApp::spawn_with(
        Database::Sqlite,
        ServerConfig {
            device,
            ..ServerConfig::default()
        },
    )
    .await
}

/// Polls allowed back to back: an interval of 1 s accepts gaps of 0.8 s.
fn fast() -> DeviceConfig {
    DeviceConfig {
        interval: 1,
        ..DeviceConfig::default()
    }
}

pub(crate) async fn start(app: &TestApp) -> Value {
    let response = app
        .client
        .post(app.url("/v1/auth/device/code"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["cache-control"], "no-store");
    response.json().await.unwrap()
}

pub(crate) async fn poll(app: &TestApp, device_code: &str) -> (StatusCode, Value) {
    let response = app
        .client
        .post(app.url("/v1/auth/device/token"))
        .json(&json!({ "device_code": device_code }))
        .send()
        .await
        .unwrap();
    (response.status(), response.json().await.unwrap())
}

async fn poll_form(app: &TestApp, fields: &[(&str, &str)]) -> (StatusCode, Value) {
    let response = app
        .client
        .post(app.url("/v1/auth/device/token"))
        .form(fields)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["cache-control"], "no-store");
    (response.status(), response.json().await.unwrap())
}

/// Enters `user_code` in `browser`'s session and presses `decision`.
pub(crate) async fn decide(
    browser: &Browser,
    user_code: &str,
    decision: &str,
) -> svc_test_support::Page {
    let confirm = browser.enter_device_code(user_code).await;
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    let id = confirm.input_value("id").unwrap();
    browser
        .post(
            "/dashboard/device/decide",
            &[
                ("csrf", &confirm.csrf()),
                ("id", &id),
                ("decision", decision),
            ],
        )
        .await
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn code_response_has_the_spec_and_rfc_fields() {
    let app = spawn(DeviceConfig::default()).await;
    let codes = start(&app).await;
    let user_code = codes["user_code"].as_str().unwrap();
    assert_eq!(user_code.len(), 9);
    assert_eq!(&user_code[4..5], "-");
    assert!(
        user_code
            .chars()
            .filter(|c| *c != '-')
            .all(|c| "BCDFGHJKLMNPQRSTVWXZ".contains(c)),
        "{user_code}"
    );
    // At least 128 random bits.
    assert!(codes["device_code"].as_str().unwrap().len() >= 32);
    let verification = format!("{}/dashboard/device", app.base_url);
    assert_eq!(codes["verification_uri"], verification.as_str());
    assert_eq!(
        codes["verification_uri_complete"],
        format!("{verification}?user_code={user_code}").as_str()
    );
    assert_eq!(codes["expires_in"], 600);
    assert_eq!(codes["interval"], 5);

    // An RFC 8628 form body is accepted too, and a JSON one.
    let form = app
        .client
        .post(app.url("/v1/auth/device/code"))
        .form(&[("client_id", "svc-cli"), ("scope", "api")])
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 200);
    let json_body = app
        .client
        .post(app.url("/v1/auth/device/code"))
        .json(&json!({"client_id": "svc-cli"}))
        .send()
        .await
        .unwrap();
    assert_eq!(json_body.status(), 200);
    let other: Value = json_body.json().await.unwrap();
    assert_ne!(other["device_code"], codes["device_code"]);
    assert_ne!(other["user_code"], codes["user_code"]);
}

#[tokio::test]
async fn approval_issues_one_key_that_works() {
    let app = spawn(fast()).await;
    let codes = start(&app).await;
    let device_code = codes["device_code"].as_str().unwrap();
    assert_eq!(
        poll(&app, device_code).await,
        (StatusCode::OK, json!({"status": "pending"}))
    );

    let (browser, alice) = app.signed_in("alice@example.com", false).await;
    // Typed in lowercase without the hyphen.
    let typed = codes["user_code"]
        .as_str()
        .unwrap()
        .replace('-', "")
        .to_lowercase();
    let done = decide(&browser, &typed, "approve").await;
    assert_eq!(done.status, 200);
    assert!(done.body.contains("Device approved"), "{}", done.body);

    let (status, body) = poll(&app, device_code).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "approved");
    assert_eq!(body["token_type"], "bearer");
    assert_eq!(body["expires_in"], 2_592_000);
    let key = body["access_token"].as_str().unwrap();
    assert!(key.starts_with("sk-svc-") && key.len() == 47);

    let models = app
        .client
        .get(app.url("/v1/models"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200);

    // Never issued twice.
    let (status, again) = poll(&app, device_code).await;
    assert_eq!(status, 400);
    assert_eq!(error_code(&again), "invalid_grant");

    // Minted for the approver, named after the device, expiring in 30 days.
    let keys = app.keys.list(Some(&alice.id)).await.unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].created_via, svc_core::KeyOrigin::Device);
    assert!(
        keys[0].name.starts_with("Device login: "),
        "{}",
        keys[0].name
    );
    let lifetime = keys[0].expires_at.unwrap() - keys[0].created_at;
    assert_eq!(lifetime, 2_592_000);
}

#[tokio::test]
async fn concurrent_polls_get_the_key_exactly_once() {
    let app = spawn(fast()).await;
    let codes = start(&app).await;
    let device_code = codes["device_code"].as_str().unwrap().to_owned();
    let (browser, _) = app.signed_in("alice@example.com", false).await;
    decide(&browser, codes["user_code"].as_str().unwrap(), "approve").await;

    let polls = (0..8).map(|_| poll(&app, &device_code));
    let results = futures::future::join_all(polls).await;
    let approved: Vec<_> = results.iter().filter(|(s, _)| *s == 200).collect();
    assert_eq!(approved.len(), 1, "{results:?}");
    for (status, body) in &results {
        if *status != 200 {
            assert_eq!(error_code(body), "invalid_grant", "{body}");
        }
    }
    assert_eq!(app.keys.list(None).await.unwrap().len(), 1);
}

#[tokio::test]
async fn denial_and_unknown_codes_are_refused() {
    let app = spawn(fast()).await;
    let codes = start(&app).await;
    let (browser, _) = app.signed_in("alice@example.com", false).await;
    let done = decide(&browser, codes["user_code"].as_str().unwrap(), "deny").await;
    assert!(done.body.contains("Request denied"), "{}", done.body);
    let (status, body) = poll(&app, codes["device_code"].as_str().unwrap()).await;
    assert_eq!(status, 400);
    assert_eq!(error_code(&body), "access_denied");
    assert_eq!(body["error"]["param"], "device_code");

    let (status, body) = poll(&app, "no-such-code").await;
    assert_eq!(status, 400);
    assert_eq!(error_code(&body), "invalid_grant");

    // The denied code cannot be approved afterwards.
    let again = browser
        .enter_device_code(codes["user_code"].as_str().unwrap())
        .await;
    assert_eq!(again.status, 410);
    assert!(again.body.contains("Code denied"));
    assert!(app.keys.list(None).await.unwrap().is_empty());
}

#[tokio::test]
async fn expired_codes_cannot_be_approved_or_redeemed() {
    let app = spawn(DeviceConfig {
        code_lifetime: 1,
        interval: 1,
        ..DeviceConfig::default()
    })
    .await;
    let codes = start(&app).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (status, body) = poll(&app, codes["device_code"].as_str().unwrap()).await;
    assert_eq!(status, 400);
    assert_eq!(error_code(&body), "expired_token");
    let (browser, _) = app.signed_in("alice@example.com", false).await;
    let page = browser
        .enter_device_code(codes["user_code"].as_str().unwrap())
        .await;
    assert_eq!(page.status, 410);
    assert!(page.body.contains("Code expired"), "{}", page.body);
}

#[tokio::test]
async fn polling_faster_than_the_interval_slows_the_client_down() {
    let app = spawn(DeviceConfig::default()).await;
    let codes = start(&app).await;
    let device_code = codes["device_code"].as_str().unwrap();
    assert_eq!(poll(&app, device_code).await.0, 200);
    let (status, body) = poll(&app, device_code).await;
    assert_eq!(status, 400);
    assert_eq!(error_code(&body), "slow_down");
    // RFC dialect: the interval grew by 5 s again.
    let (status, body) =
        poll_form(&app, &[("grant_type", GRANT), ("device_code", device_code)]).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"], "slow_down");
    assert_eq!(body["interval"], 15);
}

#[tokio::test]
async fn rfc_8628_clients_get_oauth_bodies() {
    let app = spawn(fast()).await;
    let codes = start(&app).await;
    let device_code = codes["device_code"].as_str().unwrap();
    let fields = [
        ("grant_type", GRANT),
        ("device_code", device_code),
        ("client_id", "svc-cli"),
    ];
    let (status, body) = poll_form(&app, &fields).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"], "authorization_pending");

    let (status, body) = poll_form(&app, &[("grant_type", "password"), ("device_code", "x")]).await;
    assert_eq!(
        (status.as_u16(), body["error"].as_str()),
        (400, Some("unsupported_grant_type"))
    );
    let (status, body) = poll_form(&app, &[]).await;
    assert_eq!(
        (status.as_u16(), body["error"].as_str()),
        (400, Some("invalid_request")),
        "an empty form is answered in the form dialect"
    );
    let (status, body) = poll_form(&app, &[("grant_type", GRANT)]).await;
    assert_eq!(
        (status.as_u16(), body["error"].as_str()),
        (400, Some("invalid_request"))
    );

    let (browser, _) = app.signed_in("alice@example.com", false).await;
    decide(&browser, codes["user_code"].as_str().unwrap(), "approve").await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    // The code was issued to no client_id here; one issued to a client is
    // not redeemed by another.
    let other = app
        .client
        .post(app.url("/v1/auth/device/code"))
        .form(&[("client_id", "svc-cli")])
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let (status, body) = poll_form(
        &app,
        &[
            ("grant_type", GRANT),
            ("device_code", other["device_code"].as_str().unwrap()),
            ("client_id", "someone-else"),
        ],
    )
    .await;
    assert_eq!(
        (status.as_u16(), body["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    let (status, body) = poll_form(&app, &fields).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["token_type"], "bearer");
    assert_eq!(body["expires_in"], 2_592_000);
    assert!(
        body["access_token"]
            .as_str()
            .unwrap()
            .starts_with("sk-svc-")
    );
    assert!(body.get("status").is_none());
    let (status, body) = poll_form(&app, &fields).await;
    assert_eq!(
        (status.as_u16(), body["error"].as_str()),
        (400, Some("invalid_grant"))
    );
}

#[tokio::test]
async fn bad_token_requests_name_the_problem() {
    let app = spawn(fast()).await;
    let missing = app
        .client
        .post(app.url("/v1/auth/device/token"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    crate::expect_error(
        missing,
        400,
        "invalid_request_error",
        "invalid_json",
        Some("device_code"),
    )
    .await;
    let text = app
        .client
        .post(app.url("/v1/auth/device/token"))
        .header("content-type", "text/plain")
        .body("device_code=x")
        .send()
        .await
        .unwrap();
    assert_eq!(text.status(), 400);
}

#[tokio::test]
async fn the_verification_page_needs_sign_in_and_returns_to_the_code() {
    let app = spawn(fast()).await;
    let codes = start(&app).await;
    let complete = codes["verification_uri_complete"].as_str().unwrap();
    app.create_user("alice@example.com", "password123", false)
        .await;
    let browser = Browser::new(&app.base_url);
    let page = browser.get(complete).await;
    assert_eq!(page.status, 303);
    let login_url = page.location.unwrap();
    assert!(login_url.starts_with("/dashboard/login?next=%2Fdashboard%2Fdevice%3Fuser_code%3D"));
    let login = browser.get(&login_url).await;
    let next = login.input_value("next").unwrap();
    assert!(next.starts_with("/dashboard/device?user_code="), "{next}");
    let signed_in = browser
        .post(
            "/dashboard/login",
            &[
                ("csrf", &login.csrf()),
                ("email", "alice@example.com"),
                ("password", "password123"),
                ("next", &next),
            ],
        )
        .await;
    assert_eq!(signed_in.location.as_deref(), Some(next.as_str()));
    // The link fills the code in; Continue looks it up.
    let form = browser.get(&next).await;
    assert_eq!(form.status, 200);
    let user_code = codes["user_code"].as_str().unwrap();
    assert_eq!(form.input_value("user_code").as_deref(), Some(user_code));
    assert!(!form.body.contains("Approve"));
    let confirm = browser
        .post(
            "/dashboard/device",
            &[("csrf", &form.csrf()), ("user_code", user_code)],
        )
        .await;
    assert_eq!(confirm.status, 200);
    assert!(confirm.body.contains(user_code));
    assert!(
        confirm.body.contains("127.0.0.1"),
        "the requesting address is shown"
    );
    assert!(confirm.body.contains("Approve") && confirm.body.contains("Deny"));
}

#[tokio::test]
async fn wrong_codes_are_throttled_per_user() {
    let app = spawn(fast()).await;
    let (browser, _) = app.signed_in("alice@example.com", false).await;
    for _ in 0..10 {
        let page = browser.enter_device_code("BBBB-BBBB").await;
        assert_eq!(page.status, 404);
        assert!(page.body.contains("not valid"));
    }
    let codes = start(&app).await;
    let page = browser
        .enter_device_code(codes["user_code"].as_str().unwrap())
        .await;
    assert_eq!(page.status, 429, "even a right code waits: {}", page.body);
    assert!(page.body.contains("Too many"));
}

#[tokio::test]
async fn device_codes_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let url = svc_store::SqlStore::data_dir_url(dir.path()).unwrap();
    let config = || ServerConfig {
        device: fast(),
        ..ServerConfig::default()
    };
    let first = TestApp::spawn_with(Database::Url(url.clone()), config()).await;
    let codes = start(&first).await;
    let (browser, _) = first.signed_in("alice@example.com", false).await;
    decide(&browser, codes["user_code"].as_str().unwrap(), "approve").await;
    drop(browser);
    drop(first);
    let second = TestApp::spawn_with(Database::Url(url), config()).await;
    let (status, body) = poll(&second, codes["device_code"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "approved");
}

/// The RFC 8414 document at `base` (no key), after checking it is public,
/// cacheable JSON.
async fn metadata(client: &reqwest::Client, base: &str) -> Value {
    let response = client
        .get(format!("{base}/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(response.headers()["cache-control"], "public, max-age=3600");
    response.json().await.unwrap()
}

#[tokio::test]
async fn metadata_leads_standard_clients_to_the_device_flow() {
    let app = spawn(fast()).await;
    let doc = metadata(&app.client, &app.base_url).await;
    let base = app.base_url.as_str();
    assert_eq!(
        doc,
        json!({
            "issuer": base,
            "device_authorization_endpoint": format!("{base}/v1/auth/device/code"),
            "token_endpoint": format!("{base}/v1/auth/device/token"),
            "grant_types_supported": [GRANT],
            "response_types_supported": [],
            "token_endpoint_auth_methods_supported": ["none"],
        })
    );

    // The advertised endpoints are the ones that answer, as a client that
    // knows nothing but the metadata would use them.
    let started = app
        .client
        .post(doc["device_authorization_endpoint"].as_str().unwrap())
        .form(&[("client_id", "discovering-client")])
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 200);
    let codes: Value = started.json().await.unwrap();
    let device_code = codes["device_code"].as_str().unwrap();
    let poll = || {
        app.client
            .post(doc["token_endpoint"].as_str().unwrap())
            .form(&[("grant_type", GRANT), ("device_code", device_code)])
            .send()
    };
    let pending = poll().await.unwrap();
    assert_eq!(pending.status(), 400);
    let pending: Value = pending.json().await.unwrap();
    assert_eq!(pending["error"], "authorization_pending");

    let browser = Browser::new(&app.base_url);
    app.create_user("alice@example.com", "password123", false)
        .await;
    browser.sign_in("alice@example.com", "password123").await;
    decide(&browser, codes["user_code"].as_str().unwrap(), "approve").await;
    let token = poll().await.unwrap();
    assert_eq!(token.status(), 200);
    let token: Value = token.json().await.unwrap();
    assert!(
        token["access_token"]
            .as_str()
            .unwrap()
            .starts_with("sk-svc-")
    );

    // Only GET: the metadata is not a place to post to.
    let posted = app
        .client
        .post(app.url("/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 405);
}

#[tokio::test]
async fn metadata_uses_the_public_url_not_the_request() {
    // Behind a proxy with a path: the issuer is the public URL as given
    // (less its trailing slash), as `verification_uri` is.
    let app = TestApp::spawn_with(
        Database::Sqlite,
        ServerConfig {
            public_url: Some("https://svc.example/llm/".parse().unwrap()),
            trusted_proxies: vec!["127.0.0.0/8".parse::<Cidr>().unwrap()],
            ..ServerConfig::default()
        },
    )
    .await;
    let response = app
        .client
        .get(app.url("/.well-known/oauth-authorization-server"))
        .header("host", "evil.example")
        .header("x-forwarded-host", "evil.example")
        .header("x-forwarded-proto", "http")
        .header("forwarded", "for=203.0.113.9;host=evil.example;proto=http")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let doc: Value = response.json().await.unwrap();
    let issuer = "https://svc.example/llm";
    assert_eq!(doc["issuer"], issuer);
    assert_eq!(
        doc["device_authorization_endpoint"],
        format!("{issuer}/v1/auth/device/code").as_str()
    );
    assert_eq!(
        doc["token_endpoint"],
        format!("{issuer}/v1/auth/device/token").as_str()
    );
    let codes = start(&app).await;
    assert_eq!(
        codes["verification_uri"],
        format!("{issuer}/dashboard/device").as_str()
    );
}
