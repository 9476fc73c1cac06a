//! The dashboard's operator controls (issue 20), on SQLite and PostgreSQL,
//! as a browser without JavaScript uses them: an account's organization
//! role on the Users page, removing a project's member, a key's models
//! and kind when it is made and its models later, and the MCP servers a
//! project or a key may use (and the registered ones, on the Models page).
//! Each change is the admin
//! API's (the same service call, the same audit entry); people who may not
//! make it get the 404 of a page that does not exist; bad input is the
//! form again (400) with the message; the last owner stays one.

use serde_json::{Value, json};
use svc_core::{KeyScope, ProjectRole, ProjectStore, UserId};
use svc_server::ServerConfig;
use svc_server::config::McpConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Browser, Database, Page, TestApp};

use crate::budgets::admin_get;

on_both_databases!(
    admins_change_organization_roles_on_the_users_page,
    two_owners_demoting_each_other_at_once_leave_one,
    project_owners_remove_members_but_never_the_last_owner,
    keys_are_made_with_models_and_a_kind_and_their_models_changed,
    projects_and_keys_get_mcp_server_lists_and_the_models_page_lists_the_servers,
);

/// Posts `fields` with the CSRF token of the page at `from`.
async fn submit(browser: &Browser, from: &str, path: &str, fields: &[(&str, &str)]) -> Page {
    let page = browser.get(from).await;
    assert_eq!(page.status, 200, "GET {from}: {}", page.body);
    let csrf = page.csrf();
    let mut form = vec![("csrf", csrf.as_str())];
    form.extend_from_slice(fields);
    browser.post(path, &form).await
}

/// The organization role the admin API shows for `user`.
async fn org_role(app: &TestApp, admin_key: &str, user: &UserId) -> Value {
    let path = format!("/v1/organization/users/{}", user.0);
    admin_get(app, admin_key, &path).await["role"].clone()
}

/// The model ids `GET /v1/models` lists to `key`.
async fn listed_models(app: &TestApp, key: &str) -> Vec<String> {
    let response = app
        .client
        .get(app.url("/v1/models"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let mut ids: Vec<String> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// Audit entries of `kind`, newest first.
async fn audit_entries(app: &TestApp, admin_key: &str, kind: &str) -> Vec<Value> {
    let path = format!("/v1/organization/audit_logs?event_types[]={kind}&limit=100");
    admin_get(app, admin_key, &path).await["data"]
        .as_array()
        .unwrap()
        .clone()
}

async fn admins_change_organization_roles_on_the_users_page(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let admin_key = app.create_admin_key().await;
    let (ada, ada_user) = app.signed_in("ada@example.com", true).await;
    let (bob, bob_user) = app.signed_in("bob@example.com", false).await;
    let carol = app
        .create_user("carol@example.com", "password123", false)
        .await;

    // Each other account's row has a labelled role form; one's own has none.
    let users = ada.get("/dashboard/users").await;
    assert_eq!(users.status, 200);
    assert!(
        users
            .body
            .contains(&format!("action=\"/dashboard/users/{}/role\"", bob_user.id)),
        "{}",
        users.body
    );
    assert!(users.body.contains(&format!(
        "<label for=\"role-{}\" class=\"visually-hidden\">Organization role of bob@example.com</label>",
        bob_user.id
    )));
    assert!(
        !users
            .body
            .contains(&format!("/dashboard/users/{}/role", ada_user.id)),
        "no role form for one's own account"
    );

    // Bob made an organization owner: the admin API says so, and Bob sees
    // the Users page; then a reader again, and he does not.
    let role_path = format!("/dashboard/users/{}/role", bob_user.id);
    let made = submit(&ada, "/dashboard/users", &role_path, &[("role", "owner")]).await;
    assert_eq!(made.status, 303, "{}", made.body);
    let shown = ada.follow(made).await;
    assert!(
        shown
            .body
            .contains("bob@example.com is an organization owner"),
        "{}",
        shown.body
    );
    assert_eq!(org_role(&app, &admin_key, &bob_user.id).await, "owner");
    assert_eq!(bob.get("/dashboard/users").await.status, 200);
    let made = submit(&ada, "/dashboard/users", &role_path, &[("role", "reader")]).await;
    assert_eq!(made.status, 303, "{}", made.body);
    assert_eq!(org_role(&app, &admin_key, &bob_user.id).await, "reader");
    assert_eq!(bob.get("/dashboard/users").await.status, 404);

    // Audited as the admin API's role change: user.updated with the role.
    let entries = audit_entries(&app, &admin_key, "user.updated").await;
    let roles: Vec<Value> = entries
        .iter()
        .filter(|e| e["user.updated"]["id"] == bob_user.id.0.as_str())
        .map(|e| {
            assert_eq!(e["actor"]["type"], "session", "{e}");
            e["user.updated"]["changes_requested"]["role"].clone()
        })
        .collect();
    assert_eq!(roles, [json!("reader"), json!("owner")]);

    // A reader may not: the 404 of a page that does not exist.
    let csrf = bob.get("/dashboard/keys").await.csrf();
    for target in [&bob_user.id, &carol.id, &ada_user.id] {
        let sent = bob
            .post(
                &format!("/dashboard/users/{}/role", target.0),
                &[("csrf", &csrf), ("role", "owner")],
            )
            .await;
        assert_eq!(sent.status, 404, "{}", target.0);
    }
    assert_eq!(org_role(&app, &admin_key, &bob_user.id).await, "reader");
    assert_eq!(org_role(&app, &admin_key, &carol.id).await, "reader");

    // One's own role, or a role not on the list: the page again, a 400
    // with the message; an unknown account: 404; no CSRF token: 403.
    for (target, role, message) in [
        (
            &ada_user.id,
            "reader",
            "You cannot change your own organization role",
        ),
        (&carol.id, "admin", "Choose a role from the list"),
    ] {
        let refused = submit(
            &ada,
            "/dashboard/users",
            &format!("/dashboard/users/{}/role", target.0),
            &[("role", role)],
        )
        .await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert!(refused.body.contains(message), "{}", refused.body);
        assert!(refused.body.contains("role=\"alert\""));
        assert!(refused.body.contains("carol@example.com"), "the list again");
    }
    let unknown = submit(
        &ada,
        "/dashboard/users",
        "/dashboard/users/usr_0000000000000000/role",
        &[("role", "owner")],
    )
    .await;
    assert_eq!(unknown.status, 404);
    for csrf in ["", "0000"] {
        let sent = ada
            .post(&role_path, &[("csrf", csrf), ("role", "owner")])
            .await;
        assert_eq!(sent.status, 403);
    }
    assert_eq!(org_role(&app, &admin_key, &ada_user.id).await, "owner");
    assert_eq!(org_role(&app, &admin_key, &carol.id).await, "reader");
    assert_eq!(org_role(&app, &admin_key, &bob_user.id).await, "reader");
}

/// The last owner can only be reached by a race: an admin cannot demote
/// themselves here, and while they are an owner, another is not the last.
/// Two owners demoting each other at once: one wins, the other is refused
/// (the 400 page naming the last owner, or the 404 of a reader when its
/// request came after the change), never a 500, and one owner is left.
async fn two_owners_demoting_each_other_at_once_leave_one(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let admin_key = app.create_admin_key().await;
    let (ada, ada_user) = app.signed_in("ada@example.com", true).await;
    let (bob, bob_user) = app.signed_in("bob@example.com", true).await;
    // Usually both requests pass the admin check before either commits,
    // and the second gets the 400 page; whether they overlap is up to the
    // scheduler, so only what must hold either way is asserted.
    for _ in 0..5 {
        let ada_csrf = ada.get("/dashboard/users").await.csrf();
        let bob_csrf = bob.get("/dashboard/users").await.csrf();
        let ada_path = format!("/dashboard/users/{}/role", bob_user.id);
        let bob_path = format!("/dashboard/users/{}/role", ada_user.id);
        let ada_form = [("csrf", ada_csrf.as_str()), ("role", "reader")];
        let bob_form = [("csrf", bob_csrf.as_str()), ("role", "reader")];
        let (by_ada, by_bob) = tokio::join!(
            ada.post(&ada_path, &ada_form),
            bob.post(&bob_path, &bob_form),
        );
        let mut done = 0;
        for page in [&by_ada, &by_bob] {
            match page.status.as_u16() {
                303 => done += 1,
                400 => {
                    assert!(
                        page.body
                            .contains("is the last enabled organization owner and stays one"),
                        "{}",
                        page.body
                    );
                }
                404 => {}
                other => panic!("{other}: {}", page.body),
            }
        }
        assert_eq!(done, 1, "{} / {}", by_ada.status, by_bob.status);
        let owners = [
            org_role(&app, &admin_key, &ada_user.id).await,
            org_role(&app, &admin_key, &bob_user.id).await,
        ];
        assert_eq!(
            owners.iter().filter(|r| **r == "owner").count(),
            1,
            "{owners:?}"
        );
        // Both owners again for the next round, by the operator.
        for user in [&ada_user, &bob_user] {
            let fresh = app.accounts.user(&user.id).await.unwrap().unwrap();
            app.accounts
                .set_admin(&fresh, true, &svc_core::Actor::Operator)
                .await
                .unwrap();
        }
    }
}

async fn project_owners_remove_members_but_never_the_last_owner(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let admin_key = app.create_admin_key().await;
    let (ada, _) = app.signed_in("ada@example.com", true).await;
    let (bob, bob_user) = app.signed_in("bob@example.com", false).await;
    let (dave, dave_user) = app.signed_in("dave@example.com", false).await;
    let carol = app
        .create_user("carol@example.com", "password123", false)
        .await;
    let team = app.create_project("Team B", Default::default()).await;
    for (user, role) in [
        (&bob_user.id, ProjectRole::Owner),
        (&carol.id, ProjectRole::Member),
        (&dave_user.id, ProjectRole::Member),
    ] {
        app.store
            .set_project_member(&team.id, user, role, 1)
            .await
            .unwrap();
    }
    // Carol has a key in Team B: removing her leaves it as it is.
    let carol_key = app
        .create_scoped_key(
            Some(&carol.id),
            KeyScope {
                project_id: Some(team.id.clone()),
                ..KeyScope::default()
            },
        )
        .await;
    let page = format!("/dashboard/projects/{}", team.id);
    let remove =
        |user: &UserId| format!("/dashboard/projects/{}/members/{}/remove", team.id, user.0);

    // Every member row has a Remove button, named for whom it removes.
    let shown = bob.get(&page).await;
    assert_eq!(shown.status, 200);
    assert!(
        shown
            .body
            .contains("aria-label=\"Remove carol@example.com from Team B\""),
        "{}",
        shown.body
    );
    assert!(
        shown
            .body
            .contains(&format!("action=\"{}\"", remove(&carol.id)))
    );
    assert!(shown.body.contains("left as they are"), "the page says so");

    // A plain member of the project: the 404 of a page that does not
    // exist, and nothing removed.
    assert_eq!(dave.get(&page).await.status, 404);
    let csrf = dave.get("/dashboard/keys").await.csrf();
    let sent = dave.post(&remove(&carol.id), &[("csrf", &csrf)]).await;
    assert_eq!(sent.status, 404);
    assert_eq!(
        app.store.project_role(&team.id, &carol.id).await.unwrap(),
        Some(ProjectRole::Member)
    );

    // The project's owner removes Carol; her key still works.
    let removed = submit(&bob, &page, &remove(&carol.id), &[]).await;
    assert_eq!(removed.status, 303, "{}", removed.body);
    assert_eq!(
        removed.location.as_deref(),
        Some(format!("{page}?done=removed").as_str())
    );
    let shown = bob.follow(removed).await;
    assert!(
        shown.body.contains("The member was removed"),
        "{}",
        shown.body
    );
    assert!(!shown.body.contains("carol@example.com"));
    assert_eq!(
        app.store.project_role(&team.id, &carol.id).await.unwrap(),
        None
    );
    assert_eq!(listed_models(&app, &carol_key).await.len(), 12);
    // Removed already, or never a member: 404.
    for user in [&carol.id, &UserId("usr_0000000000000000".into())] {
        let again = submit(&bob, &page, &remove(user), &[]).await;
        assert_eq!(again.status, 404, "{}", user.0);
    }

    // An organization owner removes Dave.
    let removed = submit(&ada, &page, &remove(&dave_user.id), &[]).await;
    assert_eq!(removed.status, 303, "{}", removed.body);
    assert_eq!(
        app.store
            .project_role(&team.id, &dave_user.id)
            .await
            .unwrap(),
        None
    );

    // Bob is the last owner: neither Ada nor Bob removes him.
    for browser in [&ada, &bob] {
        let refused = submit(browser, &page, &remove(&bob_user.id), &[]).await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert!(
            refused
                .body
                .contains("bob@example.com is the last owner of this project"),
            "{}",
            refused.body
        );
        assert!(refused.body.contains("role=\"alert\""));
    }
    assert_eq!(
        app.store
            .project_role(&team.id, &bob_user.id)
            .await
            .unwrap(),
        Some(ProjectRole::Owner)
    );

    // Without the CSRF token: refused.
    for csrf in ["", "0000"] {
        let sent = ada.post(&remove(&bob_user.id), &[("csrf", csrf)]).await;
        assert_eq!(sent.status, 403);
    }

    // With another owner, Bob may leave; the project is then not his to
    // see, so he lands on his keys.
    app.store
        .set_project_member(&team.id, &carol.id, ProjectRole::Owner, 2)
        .await
        .unwrap();
    let left = submit(&bob, &page, &remove(&bob_user.id), &[]).await;
    assert_eq!(left.status, 303, "{}", left.body);
    assert_eq!(left.location.as_deref(), Some("/dashboard/keys"));
    assert_eq!(bob.get(&page).await.status, 404);

    // Audited in the project as the admin API audits membership changes:
    // user.deleted, by the dashboard session.
    let entries = audit_entries(&app, &admin_key, "user.deleted").await;
    let removed: Vec<&str> = entries
        .iter()
        .map(|e| {
            assert_eq!(e["actor"]["type"], "session", "{e}");
            assert_eq!(e["project"]["id"], team.id.0.as_str(), "{e}");
            e["user.deleted"]["id"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        removed,
        [
            bob_user.id.0.as_str(),
            dave_user.id.0.as_str(),
            carol.id.0.as_str()
        ]
    );
}

async fn keys_are_made_with_models_and_a_kind_and_their_models_changed(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let admin_key = app.create_admin_key().await;
    let (alice, _) = app.signed_in("alice@example.com", false).await;

    // A restricted key for two models, made on the keys page.
    let created = submit(
        &alice,
        "/dashboard/keys",
        "/dashboard/keys",
        &[
            ("name", "ci"),
            ("expires", "never"),
            ("models", "svc*"),
            ("kind", "restricted"),
            ("permissions", "api.model.read"),
            ("permissions", "model.request"),
        ],
    )
    .await;
    assert_eq!(created.status, 303, "{}", created.body);
    let secret = alice
        .get("/dashboard/keys/new")
        .await
        .value_by_id("new-key")
        .unwrap();
    assert_eq!(listed_models(&app, &secret).await, ["svc", "svc-thinking"]);
    let chat =
        |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(app.chat(&secret, &chat("svc")).await.status(), 200);
    assert_eq!(app.chat(&secret, &chat("fake-slow")).await.status(), 404);
    // Outside its permissions: 403 insufficient_permissions.
    let response = app
        .client
        .post(app.url("/v1/responses"))
        .bearer_auth(&secret)
        .json(&json!({"model": "svc", "input": "hi"}))
        .send()
        .await
        .unwrap();
    let message = crate::expect_error(
        response,
        403,
        "invalid_request_error",
        "insufficient_permissions",
        None,
    )
    .await;
    assert!(message.contains("api.responses.write"), "{message}");

    // The list shows its kind, permissions and models; the admin API the
    // same.
    let keys = alice.get("/dashboard/keys").await;
    let id = keys
        .body
        .split("<tr id=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    let row = row_of(&keys.body, &id);
    assert!(
        row.contains("restricted") && row.contains("model.request, api.model.read"),
        "{row}"
    );
    assert!(row.contains("svc*"), "{row}");
    assert!(
        row.contains(&format!("href=\"/dashboard/keys/{id}/access\"")),
        "{row}"
    );
    let key_path = format!("/v1/organization/projects/proj_default/api_keys/{id}");
    let shown = admin_get(&app, &admin_key, &key_path).await;
    assert_eq!(shown["kind"], "restricted");
    assert_eq!(
        shown["permissions"],
        json!(["model.request", "api.model.read"])
    );
    assert_eq!(shown["allowed_models"], json!(["svc*"]));

    // Without models and kind: every model, as before.
    let created = submit(
        &alice,
        "/dashboard/keys",
        "/dashboard/keys",
        &[
            ("name", "plain"),
            ("expires", "never"),
            ("models", " "),
            ("kind", "all"),
        ],
    )
    .await;
    assert_eq!(created.status, 303, "{}", created.body);
    let plain = alice
        .get("/dashboard/keys/new")
        .await
        .value_by_id("new-key")
        .unwrap();
    assert_eq!(listed_models(&app, &plain).await.len(), 12);

    // Bad input: the form again with what was sent and the message; no
    // key made (admin keys are not made here).
    let long = "x".repeat(300);
    for (fields, message) in [
        (
            vec![("kind", "admin")],
            "Choose a kind from the list: all or restricted.",
        ),
        (vec![("kind", "restricted")], "Tick at least one permission"),
        (
            vec![("kind", "all"), ("permissions", "model.request")],
            "Permissions are for a restricted key",
        ),
        (
            vec![
                ("kind", "restricted"),
                ("permissions", "api.management.write"),
            ],
            "Choose permissions from the list.",
        ),
        (
            vec![("kind", "all"), ("models", long.as_str())],
            "Allowed models:",
        ),
    ] {
        let mut form = vec![("name", "refused"), ("expires", "30d")];
        form.extend_from_slice(&fields);
        let refused = submit(&alice, "/dashboard/keys", "/dashboard/keys", &form).await;
        assert_eq!(refused.status, 400, "{fields:?}: {}", refused.body);
        assert!(
            refused.body.contains(message),
            "{message}: {}",
            refused.body
        );
        assert!(refused.body.contains("role=\"alert\""));
        assert!(refused.body.contains("value=\"refused\""), "the name again");
        assert!(
            refused.body.contains("<option value=\"30d\" selected>"),
            "the expiry again"
        );
    }
    let listed = admin_get(
        &app,
        &admin_key,
        "/v1/organization/projects/proj_default/api_keys?limit=100",
    )
    .await;
    assert!(
        listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["name"] != "refused"),
        "{listed}"
    );

    // Its owner changes the key's models: from the next request, and
    // audited as api_key.updated, as the admin API's key changes are.
    let access = format!("/dashboard/keys/{id}/access");
    let form = alice.get(&access).await;
    assert_eq!(form.status, 200);
    assert!(
        form.body.contains("<label for=\"access-models\">"),
        "{}",
        form.body
    );
    assert_eq!(form.input_value("models").as_deref(), Some("svc*"));
    let saved = submit(&alice, &access, &access, &[("models", "svc")]).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    assert_eq!(listed_models(&app, &secret).await, ["svc"]);
    assert_eq!(
        admin_get(&app, &admin_key, &key_path).await["allowed_models"],
        json!(["svc"])
    );
    let refused = submit(&alice, &access, &access, &[("models", long.as_str())]).await;
    assert_eq!(refused.status, 400);
    assert!(refused.body.contains("Allowed models:"), "{}", refused.body);
    assert!(refused.body.contains("role=\"alert\""));
    assert_eq!(
        listed_models(&app, &secret).await,
        ["svc"],
        "nothing changed"
    );

    // Another account: 404; an admin: may; no CSRF token: 403.
    let (bob, _) = app.signed_in("bob@example.com", false).await;
    assert_eq!(bob.get(&access).await.status, 404);
    let csrf = bob.get("/dashboard/keys").await.csrf();
    let sent = bob.post(&access, &[("csrf", &csrf), ("models", "")]).await;
    assert_eq!(sent.status, 404);
    for csrf in ["", "0000"] {
        let sent = alice.post(&access, &[("csrf", csrf), ("models", "")]).await;
        assert_eq!(sent.status, 403);
    }
    assert_eq!(listed_models(&app, &secret).await, ["svc"]);
    let (ada, _) = app.signed_in("ada@example.com", true).await;
    let saved = submit(&ada, &access, &access, &[("models", "")]).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    assert_eq!(listed_models(&app, &secret).await.len(), 12, "every model");

    let entries = audit_entries(&app, &admin_key, "api_key.updated").await;
    let changes: Vec<Value> = entries
        .iter()
        .map(|e| {
            assert_eq!(e["actor"]["type"], "session", "{e}");
            assert_eq!(e["api_key.updated"]["id"], id.as_str(), "{e}");
            e["api_key.updated"]["changes_requested"].clone()
        })
        .collect();
    assert_eq!(
        changes,
        [
            json!({"allowed_models": null}),
            json!({"allowed_models": ["svc"]})
        ]
    );
    let actors: Vec<&str> = entries
        .iter()
        .map(|e| e["actor"]["session"]["user"]["email"].as_str().unwrap())
        .collect();
    assert_eq!(actors, ["ada@example.com", "alice@example.com"]);
}

/// The table row with this id.
fn row_of<'a>(body: &'a str, id: &str) -> &'a str {
    let start = body
        .find(&format!("<tr id=\"{id}\""))
        .unwrap_or_else(|| panic!("no row {id}: {body}"));
    let end = start + body[start..].find("</tr>").unwrap();
    &body[start..end]
}

async fn projects_and_keys_get_mcp_server_lists_and_the_models_page_lists_the_servers(
    db: Database,
) {
    let mcp: McpConfig = serde_json::from_value(json!({"servers": {
        "docs": {"url": "https://svc:pw-s3cret@mcp.example.com/mcp",
            "headers": {"authorization": "Bearer header-s3cret"},
            "allowed_tools": ["search"], "description": "The team's docs"},
        "wiki": {"url": "http://127.0.0.1:9/mcp"},
    }}))
    .unwrap();
    let config = ServerConfig {
        mcp,
        ..ServerConfig::default()
    };
    let app = TestApp::spawn_with(db, config).await;
    let admin_key = app.create_admin_key().await;
    let (ada, _) = app.signed_in("ada@example.com", true).await;
    let (alice, _) = app.signed_in("alice@example.com", false).await;

    // An organization owner sees every registered server and where it
    // is, never a secret.
    let models = ada.get("/dashboard/models").await;
    assert_eq!(models.status, 200);
    assert!(
        models.body.contains("Registered MCP servers"),
        "{}",
        models.body
    );
    let docs = row_of(&models.body, "mcp-docs");
    for shown in [
        "The team&#x27;s docs",
        "<code>search</code>",
        // Escaped as HTML escapes every `/`.
        "https:&#x2f;&#x2f;svc:***@mcp.example.com&#x2f;mcp",
        "<code>authorization</code>",
    ] {
        assert!(docs.contains(shown), "{shown}: {docs}");
    }
    assert!(row_of(&models.body, "mcp-wiki").contains("all it offers"));
    assert!(
        !models.body.contains("s3cret"),
        "no password or header value: {}",
        models.body
    );

    // The default project's list, set on its page, narrows what its
    // members see: only the label, what it is for and its tools.
    let page = "/dashboard/projects/proj_default";
    let settings = "/dashboard/projects/proj_default/settings";
    let form = ada.get(page).await;
    assert!(
        form.body.contains("<label for=\"settings-mcp-servers\">"),
        "{}",
        form.body
    );
    assert!(
        form.body
            .contains("Registered now: <code>docs</code>, <code>wiki</code>.")
    );
    let saved = submit(
        &ada,
        page,
        settings,
        &[("models", ""), ("mcp_servers", "docs")],
    )
    .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let project = admin_get(&app, &admin_key, "/v1/organization/projects/proj_default").await;
    assert_eq!(project["allowed_mcp_servers"], json!(["docs"]));
    assert_eq!(
        ada.get(page).await.input_value("mcp_servers").as_deref(),
        Some("docs")
    );
    let mine = alice.get("/dashboard/models").await;
    assert!(
        mine.body.contains("MCP servers you may use"),
        "{}",
        mine.body
    );
    assert!(row_of(&mine.body, "mcp-docs").contains("The team&#x27;s docs"));
    assert!(!mine.body.contains("mcp-wiki"), "{}", mine.body);
    assert!(
        !mine.body.contains("mcp.example.com") && !mine.body.contains("authorization"),
        "where a server is is for organization owners: {}",
        mine.body
    );
    let refused = submit(
        &ada,
        page,
        settings,
        &[("models", ""), ("mcp_servers", &"x".repeat(300))],
    )
    .await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.body.contains("Allowed MCP servers:"),
        "{}",
        refused.body
    );

    // A project made with a list of its own.
    let created = submit(
        &ada,
        "/dashboard/projects",
        "/dashboard/projects",
        &[("name", "Wiki team"), ("mcp_servers", "wiki, docs")],
    )
    .await;
    assert_eq!(created.status, 303, "{}", created.body);
    let id = created
        .location
        .as_deref()
        .and_then(|l| l.strip_prefix("/dashboard/projects/"))
        .and_then(|rest| rest.strip_suffix("?done=created"))
        .unwrap()
        .to_owned();
    let made = admin_get(&app, &admin_key, &format!("/v1/organization/projects/{id}")).await;
    assert_eq!(made["allowed_mcp_servers"], json!(["wiki", "docs"]));
    assert!(row_of(&ada.get("/dashboard/projects").await.body, &id).contains("wiki, docs"));

    // A key made with a list, shown in the list, then changed on its
    // access page: only the list that changed is written and audited.
    let created = submit(
        &alice,
        "/dashboard/keys",
        "/dashboard/keys",
        &[
            ("name", "agent"),
            ("expires", "never"),
            ("kind", "all"),
            ("mcp_servers", "docs"),
        ],
    )
    .await;
    assert_eq!(created.status, 303, "{}", created.body);
    let keys = alice.get("/dashboard/keys").await;
    let id = keys
        .body
        .split("<tr id=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    assert!(
        row_of(&keys.body, &id).contains("<td>docs</td>"),
        "{}",
        keys.body
    );
    let key_path = format!("/v1/organization/projects/proj_default/api_keys/{id}");
    assert_eq!(
        admin_get(&app, &admin_key, &key_path).await["allowed_mcp_servers"],
        json!(["docs"])
    );
    let refused = submit(
        &alice,
        "/dashboard/keys",
        "/dashboard/keys",
        &[
            ("name", "bad"),
            ("expires", "never"),
            ("kind", "all"),
            ("mcp_servers", &"x".repeat(300)),
        ],
    )
    .await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.body.contains("Allowed MCP servers:"),
        "{}",
        refused.body
    );

    let access = format!("/dashboard/keys/{id}/access");
    let form = alice.get(&access).await;
    assert_eq!(form.input_value("mcp_servers").as_deref(), Some("docs"));
    assert!(
        form.body.contains("MCP servers docs"),
        "the project's list: {}",
        form.body
    );
    let saved = submit(
        &alice,
        &access,
        &access,
        &[("models", ""), ("mcp_servers", "")],
    )
    .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    assert_eq!(
        admin_get(&app, &admin_key, &key_path).await["allowed_mcp_servers"],
        Value::Null
    );
    let refused = submit(
        &alice,
        &access,
        &access,
        &[("models", ""), ("mcp_servers", "a\u{7}")],
    )
    .await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.body.contains("Allowed MCP servers:"),
        "{}",
        refused.body
    );
    let changes: Vec<Value> = audit_entries(&app, &admin_key, "api_key.updated")
        .await
        .iter()
        .map(|e| e["api_key.updated"]["changes_requested"].clone())
        .collect();
    assert_eq!(
        changes,
        [json!({"allowed_mcp_servers": null})],
        "the models did not change"
    );
}
