//! The audit log and key rotation (issue 20), on SQLite and PostgreSQL:
//! every event the dashboard, the admin API and the services make is
//! recorded once, with its actor and client address and never a secret;
//! `GET /v1/organization/audit_logs` filters and pages it in OpenAI's
//! shape; old entries go after the retention; a rotated key works for its
//! grace period and not after, and its successor works at once.

use std::time::Duration;

use serde_json::{Value, json};
use svc_core::audit::{AuditEntry, AuditQuery};
use svc_core::{Actor, AuditStore, KeyKind, KeyScope, ModelAccess};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Browser, Database, TestApp};

use crate::{body, expect_error};

on_both_databases!(
    the_dashboard_and_services_audit_every_event_without_secrets,
    the_admin_api_audits_its_changes_and_lists_them_in_openais_shape,
    a_project_owners_admin_key_reads_only_its_projects_entries,
    a_rotated_key_works_for_its_grace_period_and_its_successor_at_once,
    keys_are_rotated_on_the_dashboard_by_their_owner_only,
    the_dashboard_shows_the_audit_log_to_organization_owners_only,
    entries_older_than_the_retention_are_deleted,
    the_address_is_the_client_the_throttles_see_behind_trusted_proxies,
    the_first_admin_sign_ups_and_a_key_revoking_itself_are_audited,
);

/// `GET /v1/organization/audit_logs?query` with `key`.
async fn audit_logs(app: &TestApp, key: &str, query: &str) -> reqwest::Response {
    app.client
        .get(app.url(&format!("/v1/organization/audit_logs?{query}")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
}

/// The entries' types, newest first, as the API lists them (100 at most).
async fn types(app: &TestApp, key: &str, query: &str) -> Vec<String> {
    let response = audit_logs(app, key, &format!("limit=100&{query}")).await;
    assert_eq!(response.status(), 200);
    let list: Value = response.json().await.unwrap();
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

/// Every stored entry, newest first, straight from the store.
async fn stored(app: &TestApp) -> Vec<AuditEntry> {
    app.store
        .list_audit(&AuditQuery {
            limit: 10_000,
            ..AuditQuery::default()
        })
        .await
        .unwrap()
}

/// All of the stored log as text: every column of every entry.
async fn stored_text(app: &TestApp) -> String {
    format!("{:?}", stored(app).await)
}

/// A POST to the admin API.
async fn admin_post(app: &TestApp, key: &str, path: &str, json: Value) -> reqwest::Response {
    app.client
        .post(app.url(path))
        .bearer_auth(key)
        .json(&json)
        .send()
        .await
        .unwrap()
}

/// A POST to the admin API that must succeed; its answer.
pub(crate) async fn admin_json(app: &TestApp, key: &str, path: &str, json: Value) -> Value {
    let response = admin_post(app, key, path, json).await;
    assert_eq!(response.status(), 200, "POST {path}");
    response.json().await.unwrap()
}

/// Creates a key on the dashboard in `browser`'s session; its secret.
async fn dashboard_key(browser: &Browser, name: &str) -> String {
    let keys = browser.get("/dashboard/keys").await;
    let created = browser
        .post(
            "/dashboard/keys",
            &[("csrf", &keys.csrf()), ("name", name), ("expires", "never")],
        )
        .await;
    let shown = browser.follow(created).await;
    shown.value_by_id("new-key").expect("the new key is shown")
}

async fn the_dashboard_and_services_audit_every_event_without_secrets(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let admin_key = app.create_admin_key().await;
    let ada = app
        .create_user("ada@example.com", "correct horse 1", true)
        .await;
    let bob = app
        .create_user("bob@example.com", "password123", false)
        .await;

    // A failed sign-in with a password that must never be written down,
    // another with an email that has no account, then a good one.
    let wrong_password = "Tr0ub4dor&3-never-logged";
    let browser = Browser::new(&app.base_url);
    let login = browser.get("/dashboard/login").await;
    for (email, password) in [
        ("ada@example.com", wrong_password),
        ("nobody@example.com", wrong_password),
    ] {
        let failed = browser
            .post(
                "/dashboard/login",
                &[
                    ("csrf", &login.csrf()),
                    ("email", email),
                    ("password", password),
                ],
            )
            .await;
        assert_eq!(failed.status, 401);
    }
    browser.sign_in("ada@example.com", "correct horse 1").await;

    // A key made, limited, rotated and revoked on the dashboard.
    let secret = dashboard_key(&browser, "laptop").await;
    let key = app.keys.list(Some(&ada.id)).await.unwrap()[0].clone();
    let page = browser
        .get(&format!("/dashboard/keys/{}/limits", key.id))
        .await;
    let done = browser
        .post(
            &format!("/dashboard/keys/{}/limits", key.id),
            &[("csrf", &page.csrf()), ("rpm", "60"), ("tpm", "")],
        )
        .await;
    assert_eq!(done.status, 303);
    let page = browser
        .get(&format!("/dashboard/keys/{}/rotate", key.id))
        .await;
    let rotated = browser
        .post(
            &format!("/dashboard/keys/{}/rotate", key.id),
            &[("csrf", &page.csrf()), ("grace", "1h")],
        )
        .await;
    let new_secret = browser
        .follow(rotated)
        .await
        .value_by_id("new-key")
        .unwrap();
    let page = browser
        .get(&format!("/dashboard/keys/{}/revoke", key.id))
        .await;
    browser
        .post(
            &format!("/dashboard/keys/{}/revoke", key.id),
            &[("csrf", &page.csrf())],
        )
        .await;

    // A device login approved and another denied.
    for decision in ["approve", "deny"] {
        let codes = crate::device::start(&app).await;
        let done =
            crate::device::decide(&browser, codes["user_code"].as_str().unwrap(), decision).await;
        assert_eq!(done.status, 200, "{}", done.body);
        let user_code = codes["user_code"].as_str().unwrap().to_owned();
        let device_code = codes["device_code"].as_str().unwrap().to_owned();
        // The approved one's key is issued (and audited) on the next poll.
        let (_, polled) = crate::device::poll(&app, &device_code).await;
        let text = stored_text(&app).await;
        assert!(!text.contains(&user_code), "no user code in the log");
        assert!(!text.contains(&device_code), "no device code in the log");
        if decision == "approve" {
            let token = polled["access_token"].as_str().unwrap();
            assert!(!text.contains(token), "no device key in the log");
        }
    }

    // An account disabled, enabled and deleted; then sign out.
    for action in ["disable", "enable", "delete"] {
        let page = browser
            .get(&format!("/dashboard/users/{}/{action}", bob.id))
            .await;
        let done = browser
            .post(
                &format!("/dashboard/users/{}/{action}", bob.id),
                &[("csrf", &page.csrf())],
            )
            .await;
        assert_eq!(done.status, 303, "{action}: {}", done.body);
    }
    let session = browser.cookie("svc_session").unwrap();
    let keys = browser.get("/dashboard/keys").await;
    browser
        .post("/dashboard/logout", &[("csrf", &keys.csrf())])
        .await;

    let seen = types(&app, &admin_key, "").await;
    assert_eq!(
        seen,
        [
            "logout.succeeded",
            "user.deleted",
            "user.updated",
            "user.updated",
            "device.denied",
            "api_key.created",
            "device.approved",
            "api_key.deleted",
            "api_key.rotated",
            "rate_limit.updated",
            "api_key.created",
            "login.succeeded",
            "login.failed",
            "login.failed",
            "user.added",
            "user.added",
            "api_key.created",
        ],
        "newest first"
    );

    // Shapes: the session actor with the address the server derives.
    let list: Value = audit_logs(&app, &admin_key, "limit=100")
        .await
        .json()
        .await
        .unwrap();
    let entry = |kind: &str| -> Value {
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["type"] == kind)
            .cloned()
            .unwrap()
    };
    let created = entry("api_key.rotated");
    assert_eq!(
        created["actor"],
        json!({"type": "session", "session": {
            "user": {"id": ada.id.0, "email": "ada@example.com"},
            "ip_address": "127.0.0.1",
        }})
    );
    assert_eq!(
        created["project"],
        json!({"id": "proj_default", "name": "Default project"})
    );
    assert_eq!(created["api_key.rotated"]["id"], key.id.0);
    assert!(created["id"].as_str().unwrap().starts_with("audit_log-"));
    assert!(created["effective_at"].as_i64().unwrap() > 1_700_000_000);
    let failed = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "login.failed")
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(failed[1]["actor"]["session"]["user"]["id"], ada.id.0);
    assert_eq!(
        failed[0]["actor"]["session"]["user"]["email"],
        "nobody@example.com"
    );
    assert_eq!(failed[0]["actor"]["session"]["user"]["id"], Value::Null);
    assert_eq!(
        failed[0]["login.failed"]["error_code"],
        "invalid_credentials"
    );
    assert_eq!(
        entry("rate_limit.updated")["rate_limit.updated"]["changes_requested"]["max_requests_per_1_minute"],
        60
    );
    assert_eq!(entry("user.deleted")["user.deleted"]["id"], bob.id.0);
    assert_eq!(
        entry("user.updated")["user.updated"]["changes_requested"],
        json!({"disabled": false})
    );
    // The operator's own commands (here: creating the accounts).
    assert_eq!(
        entry("user.added")["actor"],
        json!({"type": "operator", "operator": {}})
    );

    // Never a secret, in any column of any entry, nor in the API's answer.
    let text = stored_text(&app).await;
    let answer = list.to_string();
    for secret in [
        secret.as_str(),
        new_secret.as_str(),
        wrong_password,
        "correct horse 1",
        session.as_str(),
        admin_key.as_str(),
    ] {
        assert!(!text.contains(secret), "the stored log holds a secret");
        assert!(!answer.contains(secret), "the API shows a secret");
    }
}

async fn the_admin_api_audits_its_changes_and_lists_them_in_openais_shape(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let admin_key = app.create_admin_key().await;
    let admin_key_id = app.keys.list(None).await.unwrap()[0].id.clone();
    let pat = app
        .create_user("pat@example.com", "password123", false)
        .await;

    let project: Value = admin_json(
        &app,
        &admin_key,
        "/v1/organization/projects",
        json!({"name": "Team A"}),
    )
    .await;
    let project_id = project["id"].as_str().unwrap().to_owned();
    let base = format!("/v1/organization/projects/{project_id}");
    admin_post(&app, &admin_key, &base, json!({"name": "Team B"})).await;
    let users = format!("{base}/users");
    for role in ["member", "owner", "owner"] {
        let response = admin_post(
            &app,
            &admin_key,
            &users,
            json!({"user_id": pat.id.0, "role": role}),
        )
        .await;
        assert_eq!(response.status(), 200);
    }
    let made: Value = admin_json(
        &app,
        &admin_key,
        &format!("{base}/api_keys"),
        json!({"name": "ci", "kind": "restricted", "permissions": ["model.request"]}),
    )
    .await;
    let key_id = made["id"].as_str().unwrap().to_owned();
    let secret = made["value"].as_str().unwrap().to_owned();
    let rotated: Value = admin_json(
        &app,
        &admin_key,
        &format!("{base}/api_keys/{key_id}/rotate"),
        json!({"grace_period_seconds": 60}),
    )
    .await;
    let new_secret = rotated["value"].as_str().unwrap().to_owned();
    let deleted = app
        .client
        .delete(app.url(&format!("{base}/api_keys/{key_id}")))
        .bearer_auth(&admin_key)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);

    let all = types(&app, &admin_key, "").await;
    assert_eq!(
        all,
        [
            "api_key.deleted",
            "api_key.rotated",
            "api_key.created",
            "user.updated",
            "user.added",
            "project.updated",
            "project.created",
            "user.added",
            "api_key.created",
        ],
        "a role set to what it was already is no change"
    );

    // The list object and an entry, in OpenAI's shape.
    let list: Value = audit_logs(
        &app,
        &admin_key,
        "event_types[]=api_key.created&project_ids[]=",
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(list["object"], "list");
    assert_eq!(list["has_more"], false);
    assert_eq!(list["first_id"], list["data"][0]["id"]);
    assert_eq!(list["last_id"], list["data"][1]["id"]);
    let entry = &list["data"][0];
    assert_eq!(entry["type"], "api_key.created");
    assert_eq!(
        entry["actor"],
        json!({"type": "api_key", "api_key": {"id": admin_key_id.0, "type": "operator"}})
    );
    assert_eq!(
        entry["project"],
        json!({"id": project_id, "name": "Team B"})
    );
    assert_eq!(entry["api_key.created"]["id"], key_id);
    assert_eq!(
        entry["api_key.created"]["data"]["scopes"],
        json!(["model.request"])
    );
    let text = list.to_string() + &stored_text(&app).await;
    assert!(!text.contains(&secret) && !text.contains(&new_secret));

    // Filters.
    let role_changes = types(
        &app,
        &admin_key,
        "event_types[]=user.added&event_types[]=user.updated",
    )
    .await;
    assert_eq!(role_changes, ["user.updated", "user.added", "user.added"]);
    let in_project = types(&app, &admin_key, &format!("project_ids[]={project_id}")).await;
    assert_eq!(in_project.len(), 7);
    assert_eq!(
        types(&app, &admin_key, &format!("actor_ids[]={}", admin_key_id.0))
            .await
            .len(),
        7
    );
    assert_eq!(
        types(&app, &admin_key, "actor_ids[]=usr_nobody")
            .await
            .len(),
        0
    );
    assert_eq!(
        types(&app, &admin_key, "actor_emails[]=nobody@example.com")
            .await
            .len(),
        0
    );
    let now = svc_core::now();
    assert_eq!(
        types(&app, &admin_key, &format!("effective_at[gt]={}", now + 10))
            .await
            .len(),
        0
    );
    assert_eq!(
        types(&app, &admin_key, &format!("effective_at[gte]={}", now - 60))
            .await
            .len(),
        9
    );
    assert_eq!(
        types(&app, &admin_key, &format!("effective_at[lt]={}", now - 60))
            .await
            .len(),
        0
    );
    assert_eq!(
        types(&app, &admin_key, &format!("effective_at[lte]={}", now + 10))
            .await
            .len(),
        9
    );

    // Pages of 2, forwards by `after` and back by `before`.
    let mut ids = Vec::new();
    let mut query = "limit=2".to_owned();
    loop {
        let page: Value = audit_logs(&app, &admin_key, &query)
            .await
            .json()
            .await
            .unwrap();
        for e in page["data"].as_array().unwrap() {
            ids.push(e["id"].as_str().unwrap().to_owned());
        }
        if page["has_more"] == false {
            break;
        }
        query = format!("limit=2&after={}", page["last_id"].as_str().unwrap());
    }
    assert_eq!(ids.len(), 9);
    let page: Value = audit_logs(&app, &admin_key, &format!("limit=2&before={}", ids[5]))
        .await
        .json()
        .await
        .unwrap();
    let back: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(back, [ids[3].as_str(), ids[4].as_str()]);
    assert_eq!(page["has_more"], true);

    // Bad filters name themselves; other keys are refused.
    for (query, param) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("event_types[]=api_key.stolen", "event_types[]"),
        ("effective_at[gt]=yesterday", "effective_at[gt]"),
    ] {
        expect_error(
            audit_logs(&app, &admin_key, query).await,
            400,
            "invalid_request_error",
            "invalid_value",
            Some(param),
        )
        .await;
    }
    let all_key = app.create_key().await;
    expect_error(
        audit_logs(&app, &all_key, "").await,
        403,
        "invalid_request_error",
        "insufficient_permissions",
        None,
    )
    .await;
    assert_eq!(audit_logs(&app, "", "").await.status(), 401);
}

async fn a_project_owners_admin_key_reads_only_its_projects_entries(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let operator = app.create_admin_key().await;
    let pat = app
        .create_user("pat@example.com", "password123", false)
        .await;
    let mut projects = Vec::new();
    for name in ["Mine", "Theirs"] {
        let project = app.create_project(name, ModelAccess::any()).await;
        admin_post(
            &app,
            &operator,
            &format!("/v1/organization/projects/{}/api_keys", project.id),
            json!({"name": format!("key of {name}")}),
        )
        .await;
        projects.push(project);
    }
    admin_post(
        &app,
        &operator,
        &format!("/v1/organization/projects/{}/users", projects[0].id),
        json!({"user_id": pat.id.0, "role": "owner"}),
    )
    .await;
    let pats = app
        .create_scoped_key(
            Some(&pat.id),
            KeyScope {
                project_id: Some(projects[0].id.clone()),
                kind: KeyKind::Admin(svc_core::AdminReach::Organization),
                ..KeyScope::default()
            },
        )
        .await;
    let list: Value = audit_logs(&app, &pats, "limit=100")
        .await
        .json()
        .await
        .unwrap();
    let data = list["data"].as_array().unwrap();
    assert_eq!(
        data.len(),
        3,
        "the key, the membership, Pat's admin key: {list}"
    );
    assert!(data.iter().all(|e| e["project"]["id"] == projects[0].id.0));
    let theirs = types(&app, &pats, &format!("project_ids[]={}", projects[1].id)).await;
    assert!(theirs.is_empty(), "another project's entries are not there");
}

/// The key `secret`'s answer to `GET /v1/models`.
async fn models_status(app: &TestApp, secret: &str) -> u16 {
    app.client
        .get(app.url("/v1/models"))
        .bearer_auth(secret)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn a_rotated_key_works_for_its_grace_period_and_its_successor_at_once(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let admin_key = app.create_admin_key().await;
    let base = "/v1/organization/projects/proj_default/api_keys";
    let made: Value = admin_json(
        &app,
        &admin_key,
        base,
        json!({"name": "ci", "kind": "restricted", "permissions": ["model.request", "api.model.read"],
               "allowed_models": ["svc"], "expires_in": 86400}),
    )
    .await;
    let old_id = made["id"].as_str().unwrap().to_owned();
    let old = made["value"].as_str().unwrap().to_owned();
    let record = app
        .keys
        .get(&svc_core::KeyId(old_id.clone()))
        .await
        .unwrap()
        .unwrap();
    app.keys
        .set_limits(
            &record,
            svc_core::KeyLimits {
                requests_per_minute: Some(100),
                tokens_per_minute: None,
            },
            &Actor::Operator,
        )
        .await
        .unwrap();
    assert_eq!(app.chat(&old, &body("svc", "hi")).await.status(), 200);

    // Three seconds of grace: both work meanwhile, as the list shows.
    let response = admin_post(
        &app,
        &admin_key,
        &format!("{base}/{old_id}/rotate"),
        json!({"grace_period_seconds": 3}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let rotated: Value = response.json().await.unwrap();
    let new = rotated["value"].as_str().unwrap().to_owned();
    let new_id = rotated["id"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    assert_eq!(rotated["rotated_from"], old_id.as_str());
    assert_eq!(rotated["name"], "ci");
    assert_eq!(rotated["kind"], "restricted");
    assert_eq!(
        rotated["permissions"],
        json!(["model.request", "api.model.read"])
    );
    assert_eq!(rotated["allowed_models"], json!(["svc"]));
    let lifetime =
        rotated["expires_at"].as_i64().unwrap() - rotated["created_at"].as_i64().unwrap();
    assert_eq!(lifetime, 86400, "the same lifetime, from now");
    let successor = app
        .keys
        .get(&svc_core::KeyId(new_id.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(successor.limits.requests_per_minute, Some(100));
    assert_eq!(
        successor.rotated_from,
        Some(svc_core::KeyId(old_id.clone()))
    );
    assert_eq!(app.chat(&new, &body("svc", "hi")).await.status(), 200);
    assert_eq!(app.chat(&old, &body("svc", "hi")).await.status(), 200);
    let list: Value = app
        .client
        .get(app.url(base))
        .bearer_auth(&admin_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed_old = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == old_id.as_str())
        .unwrap()
        .clone();
    assert_eq!(listed_old["state"], "active");
    let ends = listed_old["expires_at"].as_i64().unwrap();
    assert!(
        ends <= svc_core::now() + 3,
        "expiring at the end of the grace"
    );
    // The secret is in the answer to the rotation only.
    let listed = list.to_string();
    assert!(!listed.contains(&new) && !listed.contains(&old));
    let one = app
        .client
        .get(app.url(&format!("{base}/{new_id}")))
        .bearer_auth(&admin_key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!one.contains(&new));
    assert!(!stored_text(&app).await.contains(&new));

    // After the grace, the old key is refused as expired; the new one works.
    tokio::time::sleep(Duration::from_millis(
        u64::try_from((ends + 1 - svc_core::now()).max(0) * 1000).unwrap() + 100,
    ))
    .await;
    let message = expect_error(
        app.chat(&old, &body("svc", "hi")).await,
        401,
        "invalid_request_error",
        "invalid_api_key",
        None,
    )
    .await;
    assert!(message.contains("expired"), "{message}");
    assert_eq!(app.chat(&new, &body("svc", "hi")).await.status(), 200);

    // No grace: the old key is refused from the very next request.
    let response = admin_post(
        &app,
        &admin_key,
        &format!("{base}/{new_id}/rotate"),
        json!({"grace_period_seconds": 0}),
    )
    .await;
    let third: Value = response.json().await.unwrap();
    assert_eq!(models_status(&app, &new).await, 401);
    assert_eq!(
        models_status(&app, third["value"].as_str().unwrap()).await,
        200
    );

    // The default grace is a day; out of range, or a key that is not
    // active, is a 400 naming the parameter.
    let third_id = third["id"].as_str().unwrap();
    let fourth: Value = admin_json(
        &app,
        &admin_key,
        &format!("{base}/{third_id}/rotate"),
        json!({}),
    )
    .await;
    let third_record = app
        .keys
        .get(&svc_core::KeyId(third_id.to_owned()))
        .await
        .unwrap()
        .unwrap();
    let day = third_record.expires_at.unwrap() - fourth["created_at"].as_i64().unwrap();
    assert!((86_399..=86_400).contains(&day), "{day}");
    for grace in [-1, 30 * 86400 + 1] {
        expect_error(
            admin_post(
                &app,
                &admin_key,
                &format!("{base}/{third_id}/rotate"),
                json!({"grace_period_seconds": grace}),
            )
            .await,
            400,
            "invalid_request_error",
            "invalid_value",
            Some("grace_period_seconds"),
        )
        .await;
    }
    expect_error(
        admin_post(
            &app,
            &admin_key,
            &format!("{base}/{old_id}/rotate"),
            json!({}),
        )
        .await,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("key_id"),
    )
    .await;

    // Another project's key cannot be rotated by a guessed id through this
    // project, nor an unknown one: both are not found.
    let other = app.create_project("Other", ModelAccess::any()).await;
    let theirs: Value = admin_json(
        &app,
        &admin_key,
        &format!("/v1/organization/projects/{}/api_keys", other.id),
        json!({"name": "theirs"}),
    )
    .await;
    for id in [theirs["id"].as_str().unwrap(), "key_0000000000000000"] {
        expect_error(
            admin_post(&app, &admin_key, &format!("{base}/{id}/rotate"), json!({})).await,
            404,
            "invalid_request_error",
            "not_found",
            None,
        )
        .await;
    }
    assert_eq!(
        models_status(&app, theirs["value"].as_str().unwrap()).await,
        200
    );
}

async fn keys_are_rotated_on_the_dashboard_by_their_owner_only(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let (browser, ada) = app.signed_in("ada@example.com", false).await;
    let old = dashboard_key(&browser, "laptop").await;
    let key = app.keys.list(Some(&ada.id)).await.unwrap()[0].clone();
    let rotate = format!("/dashboard/keys/{}/rotate", key.id);

    // Someone else cannot, and a form without the session's token is refused.
    let (eve, _) = app.signed_in("eve@example.com", false).await;
    assert_eq!(eve.get(&rotate).await.status, 404);
    let eves = eve.get("/dashboard/keys").await;
    assert_eq!(
        eve.post(&rotate, &[("csrf", &eves.csrf()), ("grace", "0")])
            .await
            .status,
        404
    );
    let page = browser.get(&rotate).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("24 hours"));
    assert_eq!(
        browser
            .post(&rotate, &[("csrf", "forged"), ("grace", "0")])
            .await
            .status,
        403
    );
    assert_eq!(models_status(&app, &old).await, 200);

    // With a 24-hour grace, both keys work and the list says until when.
    let done = browser
        .post(&rotate, &[("csrf", &page.csrf()), ("grace", "24h")])
        .await;
    assert_eq!(done.location.as_deref(), Some("/dashboard/keys/new"));
    let shown = browser.follow(done).await;
    let new = shown.value_by_id("new-key").unwrap();
    assert!(shown.body.contains("laptop"));
    assert_eq!(models_status(&app, &new).await, 200);
    assert_eq!(models_status(&app, &old).await, 200);
    let list = browser.get("/dashboard/keys").await;
    assert!(list.body.contains("rotated: works until"), "{}", list.body);
    assert!(!list.body.contains(&new) && !list.body.contains(&old));
    // Shown once: reloading finds nothing.
    let again = browser.get("/dashboard/keys/new").await;
    assert_eq!(again.location.as_deref(), Some("/dashboard/keys"));

    // A rotated key offers no second rotation; the new one rotates, with
    // no grace: its predecessor is refused at once.
    assert!(
        !list
            .body
            .contains(&format!("/dashboard/keys/{}/rotate\"", key.id))
    );
    let keys = app.keys.list(Some(&ada.id)).await.unwrap();
    assert_eq!(keys.len(), 2);
    let successor = keys.into_iter().find(|k| k.id != key.id).unwrap();
    assert_eq!(successor.rotated_from.as_ref(), Some(&key.id));
    let rotate = format!("/dashboard/keys/{}/rotate", successor.id);
    let page = browser.get(&rotate).await;
    let done = browser
        .post(&rotate, &[("csrf", &page.csrf()), ("grace", "0")])
        .await;
    let newest = browser.follow(done).await.value_by_id("new-key").unwrap();
    assert_eq!(models_status(&app, &new).await, 401);
    assert_eq!(models_status(&app, &newest).await, 200);
    let bad = browser
        .post(&rotate, &[("csrf", &page.csrf()), ("grace", "1y")])
        .await;
    assert_eq!(bad.status, 400);
}

async fn the_dashboard_shows_the_audit_log_to_organization_owners_only(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let (admin, _) = app.signed_in("root@example.com", true).await;
    let (member, _) = app.signed_in("ada@example.com", false).await;
    assert_eq!(member.get("/dashboard/audit").await.status, 404);
    let keys = member.get("/dashboard/keys").await;
    assert!(
        !keys.body.contains("/dashboard/audit"),
        "no link for members"
    );

    // 60 entries more: two pages of 50.
    for n in 0..60 {
        let entry = AuditEntry::new(
            "api_key.deleted",
            &Actor::Operator,
            json!({"id": format!("key_{n:016}")}),
        );
        app.store.insert_audit(&entry).await.unwrap();
    }
    let page = admin.get("/dashboard/audit").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("<h1>Audit log</h1>"));
    assert!(page.body.contains("login.succeeded"));
    assert!(page.body.contains("key_0000000000000059"), "newest first");
    assert!(
        !page.body.contains("key_0000000000000000"),
        "on the next page"
    );
    let older = page
        .body
        .split("href=\"")
        .find(|s| s.contains("after="))
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&")
        .replace("&#x2f;", "/");
    let next = admin.get(&older).await;
    assert!(next.body.contains("key_0000000000000000"));
    assert!(next.body.contains("Newer entries"));

    // Filters: by event type, by actor's email, by date.
    let logins = admin.get("/dashboard/audit?type=login.succeeded").await;
    assert!(logins.body.contains("login.succeeded</code>"));
    assert!(
        logins
            .body
            .contains("<option value=\"login.succeeded\" selected>")
    );
    assert!(logins.body.contains("root@example.com"));
    assert!(logins.body.contains("127.0.0.1"));
    assert!(!logins.body.contains("api_key.deleted</code>"));
    let by_ada = admin.get("/dashboard/audit?actor=ada%40example.com").await;
    assert!(by_ada.body.contains("login.succeeded</code>"));
    assert!(!by_ada.body.contains("root@example.com</td>"));
    let long_ago = admin.get("/dashboard/audit?to=2001-01-01").await;
    assert!(long_ago.body.contains("No entries match."));
    let bad = admin.get("/dashboard/audit?from=yesterday").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("YYYY-MM-DD"));
}

async fn entries_older_than_the_retention_are_deleted(db: Database) {
    // Entries written before the server starts: one 3 days old, one 12
    // hours old.
    let (url, _dir) = match &db {
        Database::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            (
                svc_store::SqlStore::data_dir_url(dir.path()).unwrap(),
                Some(dir),
            )
        }
        Database::Url(url) => (url.clone(), None),
    };
    let store = svc_store::SqlStore::connect(&url).await.unwrap();
    let now = svc_core::now();
    for (id, age) in [("old", 3 * 86_400), ("recent", 12 * 3_600)] {
        let mut entry = AuditEntry::new("login.succeeded", &Actor::Operator, json!({"id": id}));
        entry.effective_at = now - age;
        store.insert_audit(&entry).await.unwrap();
    }
    let details = |entries: Vec<AuditEntry>| -> Vec<String> {
        entries
            .into_iter()
            .map(|e| e.details["id"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let all = AuditQuery {
        limit: 100,
        ..AuditQuery::default()
    };
    store.close().await;

    // Kept forever with 0.
    let config = ServerConfig {
        audit_retention_days: 0,
        ..ServerConfig::default()
    };
    let mut app = TestApp::spawn_with(Database::Url(url.clone()), config).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        details(app.store.list_audit(&all).await.unwrap()),
        ["recent", "old"]
    );
    app.shut_down().await;

    // One day: the sweep at start deletes the old one only.
    let config = ServerConfig {
        audit_retention_days: 1,
        ..ServerConfig::default()
    };
    let app = TestApp::spawn_with(Database::Url(url), config).await;
    let mut left = Vec::new();
    for _ in 0..50 {
        left = details(app.store.list_audit(&all).await.unwrap());
        if left.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, ["recent"]);
}

/// A failed sign-in sent with `forwarded_for` as `X-Forwarded-For`; the
/// address its audit entry names.
async fn audited_address(app: &TestApp, forwarded_for: &str) -> String {
    let browser = Browser::new(&app.base_url);
    let login = browser.get("/dashboard/login").await;
    let cookie = format!("svc_csrf={}", browser.cookie("svc_csrf").unwrap());
    let response = app
        .client
        .post(app.url("/dashboard/login"))
        .header("cookie", cookie)
        .header("x-forwarded-for", forwarded_for)
        .form(&[
            ("csrf", login.csrf().as_str()),
            ("email", "ada@example.com"),
            ("password", "not the password"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let entries = stored(app).await;
    assert_eq!(entries[0].kind, "login.failed");
    entries[0].actor["session"]["ip_address"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn the_address_is_the_client_the_throttles_see_behind_trusted_proxies(db: Database) {
    // Behind a trusted proxy, the client it names (not what the client
    // put in the header itself); from anyone else, the header is ignored.
    let proxied = ServerConfig {
        trusted_proxies: vec!["127.0.0.0/8".parse().unwrap()],
        ..ServerConfig::default()
    };
    let app = TestApp::spawn_with(db.clone(), proxied).await;
    assert_eq!(
        audited_address(&app, "198.51.100.1, 203.0.113.9").await,
        "203.0.113.9"
    );
    drop(app);
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    assert_eq!(
        audited_address(&app, "198.51.100.1, 203.0.113.9").await,
        "127.0.0.1"
    );
}

async fn the_first_admin_sign_ups_and_a_key_revoking_itself_are_audited(db: Database) {
    let config = ServerConfig {
        allow_signup: true,
        ..ServerConfig::default()
    };
    let app = TestApp::spawn_with(db, config).await;
    let browser = Browser::new(&app.base_url);
    let token = app.accounts.setup_token().await.unwrap().unwrap();
    let page = browser
        .get(&format!("/dashboard/setup?token={token}"))
        .await;
    let done = browser
        .post(
            "/dashboard/setup",
            &[
                ("csrf", &page.csrf()),
                ("token", &token),
                ("email", "root@example.com"),
                ("password", "first admin pw"),
                ("confirm", "first admin pw"),
            ],
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let stranger = Browser::new(&app.base_url);
    let page = stranger.get("/dashboard/signup").await;
    let done = stranger
        .post(
            "/dashboard/signup",
            &[
                ("csrf", &page.csrf()),
                ("email", "new@example.com"),
                ("password", "sign-up secret"),
                ("confirm", "sign-up secret"),
            ],
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let key = app.create_key().await;
    let revoked = app
        .client
        .delete(app.url("/v1/auth/key"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);

    let entries = stored(&app).await;
    let kinds: Vec<&str> = entries.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "api_key.deleted",
            "api_key.created",
            "user.added",
            "user.added"
        ]
    );
    let key_id = &entries[1].details["id"];
    assert_eq!(
        entries[0].actor,
        json!({"type": "api_key", "api_key": {"id": key_id, "type": "operator"}}),
        "the key itself"
    );
    assert_eq!(
        entries[2].actor,
        json!({"type": "session", "session": {"ip_address": "127.0.0.1"}}),
        "a sign-up is by no one yet"
    );
    assert_eq!(entries[2].details["email"], "new@example.com");
    assert_eq!(
        entries[3].actor["session"]["user"]["email"],
        "root@example.com"
    );
    assert_eq!(entries[3].details["data"]["role"], "owner");
    let text = stored_text(&app).await;
    for secret in [
        "first admin pw",
        "sign-up secret",
        token.as_str(),
        key.as_str(),
    ] {
        assert!(!text.contains(secret), "the stored log holds a secret");
    }
}
