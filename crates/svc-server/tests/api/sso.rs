//! Single sign-on's server side, without a provider (the browser tests
//! sign in through a real one): the routes exist only when configured, a
//! provider that does not answer gives a page saying so, a callback that
//! is not this browser's sign-in is refused and audited, password sign-in
//! can be turned off, and an account made by single sign-on has no
//! password that signs in.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use svc_core::audit::AuditQuery;
use svc_core::{
    AuditStore, ProjectId, ProjectRole, ProjectStore, SignInError, SsoIdentity, SsoSignInError,
};
use svc_server::ServerConfig;
use svc_server::config::{OidcProvider, SsoConfig};
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Browser, Database, TestApp};

on_both_databases!(
    an_account_made_by_sso_joins_its_project_and_has_no_password,
    sso_refuses_unverified_unknown_and_disabled_accounts,
);

/// The details of every `login.failed` entry of the audit log.
async fn failed_sign_ins(app: &TestApp) -> Vec<Value> {
    let query = AuditQuery {
        limit: 100,
        ..AuditQuery::default()
    };
    let entries = app.store.list_audit(&query).await.unwrap();
    entries
        .into_iter()
        .filter(|e| e.kind == "login.failed")
        .map(|e| e.details)
        .collect()
}

/// Single sign-on through a provider at an address where nothing listens.
fn unreachable_provider(password_sign_in: bool) -> ServerConfig {
    ServerConfig {
        sso: SsoConfig {
            provider: Some(OidcProvider::new(
                "http://127.0.0.1:9/".parse().unwrap(),
                "svc",
            )),
            password_sign_in,
            ..SsoConfig::default()
        },
        ..ServerConfig::default()
    }
}

#[tokio::test]
async fn without_a_provider_there_is_no_sso_route_or_button() {
    let app = TestApp::spawn().await;
    let browser = Browser::new(&app.base_url);
    let login = browser.get("/dashboard/login").await;
    assert_eq!(login.status, StatusCode::OK);
    assert!(
        !login.body.contains("/dashboard/login/sso"),
        "{}",
        login.body
    );
    for path in [
        "/dashboard/login/sso",
        "/dashboard/login/sso/callback?code=c&state=s",
    ] {
        assert_eq!(
            browser.get(path).await.status,
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
}

#[tokio::test]
async fn a_provider_that_does_not_answer_gives_a_page_saying_so() {
    let app = TestApp::spawn_with(Database::Sqlite, unreachable_provider(true)).await;
    let browser = Browser::new(&app.base_url);
    let login = browser.get("/dashboard/login?next=/dashboard/usage").await;
    // (minijinja writes `/` as `&#x2f;` in attributes.)
    let href = login.body.replace("&#x2f;", "/");
    assert!(
        href.contains("href=\"/dashboard/login/sso?next=%2Fdashboard%2Fusage\""),
        "{}",
        login.body
    );
    let started = Instant::now();
    let page = browser.get("/dashboard/login/sso").await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(page.status, StatusCode::BAD_GATEWAY);
    assert!(page.body.contains("did not answer"), "{}", page.body);
    assert!(
        page.body.contains("name=\"password\""),
        "the password form stays"
    );
    assert_eq!(browser.cookie("svc_sso"), None);
}

#[tokio::test]
async fn a_callback_that_is_not_this_browsers_sign_in_is_refused_and_audited() {
    let app = TestApp::spawn_with(Database::Sqlite, unreachable_provider(true)).await;
    let browser = Browser::new(&app.base_url);
    // No sign-in started here: no cookie with the values.
    let page = browser
        .get("/dashboard/login/sso/callback?code=stolen&state=theirs")
        .await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST);
    assert!(page.body.contains("does not belong"), "{}", page.body);
    // A cookie from someone else's sign-in, with another state.
    let theirs = svc_server::oidc::Flow::new("/dashboard/keys".into());
    browser.set_cookie("svc_sso", &theirs.encode());
    let page = browser
        .get("/dashboard/login/sso/callback?code=stolen&state=forged")
        .await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST);
    assert_eq!(browser.cookie("svc_session"), None);
    // A refusal in the provider's name without this browser's state is
    // one more forged answer, not shown.
    let page = browser
        .get("/dashboard/login/sso/callback?error=you_were_hacked")
        .await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST);
    assert!(!page.body.contains("you_were_hacked"), "{}", page.body);
    // With it, the provider's refusal is shown, its code only.
    let ours = svc_server::oidc::Flow::new("/dashboard/keys".into());
    browser.set_cookie("svc_sso", &ours.encode());
    let page = browser
        .get(&format!(
            "/dashboard/login/sso/callback?error=access_denied%3Cscript%3E&state={}",
            ours.state
        ))
        .await;
    assert_eq!(page.status, StatusCode::UNAUTHORIZED);
    // Letters, digits and underscores of it only.
    assert!(page.body.contains("(access_deniedscript)"), "{}", page.body);

    let failed: Vec<String> = failed_sign_ins(&app)
        .await
        .iter()
        .map(Value::to_string)
        .collect();
    assert_eq!(failed.len(), 4, "{failed:?}");
    assert_eq!(
        failed
            .iter()
            .filter(|d| d.contains("sso_state_mismatch"))
            .count(),
        3
    );
    assert!(
        !failed.iter().any(|d| d.contains("stolen")),
        "no code logged"
    );
}

#[tokio::test]
async fn forged_callbacks_from_one_address_are_throttled_before_the_audit_log() {
    let app = TestApp::spawn_with(Database::Sqlite, unreachable_provider(true)).await;
    let browser = Browser::new(&app.base_url);
    for n in 0..20 {
        let page = browser
            .get(&format!(
                "/dashboard/login/sso/callback?code=c{n}&state=s{n}"
            ))
            .await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "answer {n}");
    }
    let page = browser
        .get("/dashboard/login/sso/callback?code=c&state=s")
        .await;
    assert_eq!(page.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(page.body.contains("Too many sign-ins"), "{}", page.body);
    assert_eq!(
        failed_sign_ins(&app).await.len(),
        20,
        "the refused one is not written"
    );
}

#[tokio::test]
async fn with_password_sign_in_off_only_the_provider_signs_in() {
    let app = TestApp::spawn_with(Database::Sqlite, unreachable_provider(false)).await;
    app.create_user("alice@example.com", "password123", false)
        .await;
    let browser = Browser::new(&app.base_url);
    let login = browser.get("/dashboard/login").await;
    assert!(!login.body.contains("name=\"password\""), "{}", login.body);
    assert!(login.body.contains("Sign in with single sign-on"));
    assert!(
        !login.body.contains("/dashboard/signup"),
        "no sign-up either"
    );
    let csrf = browser
        .cookie("svc_csrf")
        .expect("the anonymous CSRF cookie");
    let posted = browser
        .post(
            "/dashboard/login",
            &[
                ("csrf", &csrf),
                ("email", "alice@example.com"),
                ("password", "password123"),
            ],
        )
        .await;
    assert_eq!(posted.status, StatusCode::NOT_FOUND);
    assert_eq!(browser.cookie("svc_session"), None);
    assert_eq!(
        browser.get("/dashboard/signup").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn settings_that_cannot_work_stop_the_start() {
    let provider = |issuer: &str| SsoConfig {
        provider: Some(OidcProvider::new(issuer.parse().unwrap(), "svc")),
        ..SsoConfig::default()
    };
    for (sso, allow_signup) in [
        (
            SsoConfig {
                password_sign_in: false,
                ..SsoConfig::default()
            },
            false,
        ),
        // Self sign-up would let anyone make the account a provider's
        // person then signs in to.
        (provider("https://id.example"), true),
        // Keys fetched over plain http from another machine.
        (provider("http://id.example"), false),
    ] {
        let config = ServerConfig {
            bind: "127.0.0.1:0".parse().unwrap(),
            allow_signup,
            sso,
            ..ServerConfig::default()
        };
        let store = std::sync::Arc::new(
            svc_store::SqlStore::connect("sqlite::memory:")
                .await
                .unwrap(),
        );
        let built = svc_server::Application::build(
            config,
            store,
            svc_test_support::fake_models(std::sync::Arc::default()),
        )
        .await;
        let Err(error) = built else {
            panic!("started with settings that cannot work");
        };
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{error}");
    }
}

fn verified<'a>(email: &'a str, create: Option<(ProjectId, ProjectRole)>) -> SsoIdentity<'a> {
    SsoIdentity {
        issuer: "https://id.example",
        email,
        email_verified: true,
        create,
    }
}

async fn an_account_made_by_sso_joins_its_project_and_has_no_password(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let team = app
        .create_project("team", svc_core::ModelAccess::default())
        .await;
    let opened = app
        .accounts
        .sign_in_sso(
            verified(
                " Dave@Example.com",
                Some((team.id.clone(), ProjectRole::Owner)),
            ),
            Some("127.0.0.2"),
        )
        .await
        .unwrap();
    assert_eq!(opened.user.email, "dave@example.com");
    assert!(!opened.user.is_admin);
    assert_eq!(
        app.store
            .project_role(&team.id, &opened.user.id)
            .await
            .unwrap(),
        Some(ProjectRole::Owner)
    );
    // Signing in again finds the same account.
    let again = app
        .accounts
        .sign_in_sso(verified("dave@example.com", None), None)
        .await
        .unwrap();
    assert_eq!(again.user.id, opened.user.id);
    // No password signs in to it, not even the stored marker.
    for password in ["!sso", "", "password123"] {
        assert!(matches!(
            app.accounts
                .sign_in("dave@example.com", password, Some("127.0.0.3"))
                .await,
            Err(SignInError::Invalid)
        ));
    }
    // A project that does not exist is said, and nobody is made.
    let missing = app
        .accounts
        .sign_in_sso(
            verified(
                "erin@example.com",
                Some((ProjectId("proj_gone".into()), ProjectRole::Member)),
            ),
            None,
        )
        .await;
    assert!(matches!(missing, Err(SsoSignInError::NoProject(_))));
    assert!(
        app.accounts
            .user_by_email("erin@example.com")
            .await
            .unwrap()
            .is_none()
    );
}

async fn sso_refuses_unverified_unknown_and_disabled_accounts(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let carol = app
        .create_user("carol@example.com", "password123", false)
        .await;
    let unverified = SsoIdentity {
        email_verified: false,
        ..verified("carol@example.com", None)
    };
    assert!(matches!(
        app.accounts.sign_in_sso(unverified, None).await,
        Err(SsoSignInError::Unverified)
    ));
    assert!(matches!(
        app.accounts
            .sign_in_sso(verified("nobody@example.com", None), None)
            .await,
        Err(SsoSignInError::NoAccount)
    ));
    assert!(matches!(
        app.accounts.sign_in_sso(verified("", None), None).await,
        Err(SsoSignInError::Unverified)
    ));
    app.accounts
        .disable_user(&carol, &svc_core::Actor::Operator)
        .await
        .unwrap();
    assert!(matches!(
        app.accounts
            .sign_in_sso(
                verified(
                    "carol@example.com",
                    Some((ProjectId::default_project(), ProjectRole::Member))
                ),
                None
            )
            .await,
        Err(SsoSignInError::Disabled)
    ));
    let codes: Vec<String> = failed_sign_ins(&app)
        .await
        .iter()
        .map(|d| d["error_code"].as_str().unwrap_or("").to_owned())
        .collect();
    for code in ["email_not_verified", "no_account", "account_disabled"] {
        assert!(codes.iter().any(|c| c == code), "{code} in {codes:?}");
    }
}
