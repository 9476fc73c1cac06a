//! The dashboard's Projects pages and budget bars (issue 20), on SQLite and
//! PostgreSQL, as a browser without JavaScript uses them: who sees which
//! project (others get the 404 of a page that does not exist, whatever the
//! id), projects made and changed through the forms as the admin API then
//! shows them, members added by email, key budgets set on the keys page,
//! the bars showing what a budgeted key used, form errors as pages (never
//! a 500), and CSRF.

use std::time::Duration;

use serde_json::{Value, json};
use svc_core::{ProjectId, ProjectRole, ProjectStore};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Browser, Database, TestApp};

use crate::audit::admin_json;
use crate::budgets::admin_get;

on_both_databases!(
    project_pages_show_to_organization_and_project_owners_only,
    projects_made_on_the_dashboard_show_in_the_admin_api,
    budget_bars_show_what_a_budgeted_key_used_and_admins_set_key_budgets,
);

/// Posts `fields` (and the page's CSRF token) to the form at `path`,
/// taking the token from the page `from`.
async fn submit(
    browser: &Browser,
    from: &str,
    path: &str,
    fields: &[(&str, &str)],
) -> svc_test_support::Page {
    let page = browser.get(from).await;
    assert_eq!(page.status, 200, "GET {from}: {}", page.body);
    let csrf = page.csrf();
    let mut form = vec![("csrf", csrf.as_str())];
    form.extend_from_slice(fields);
    browser.post(path, &form).await
}

async fn project_pages_show_to_organization_and_project_owners_only(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let (admin, _) = app.signed_in("ada@example.com", true).await;
    let (bob, bob_user) = app.signed_in("bob@example.com", false).await;
    let team = app.create_project("Team B", Default::default()).await;

    // The organization owner sees every project and the link to them.
    let list = admin.get("/dashboard/projects").await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(list.body.contains("Default project") && list.body.contains("Team B"));
    assert!(list.body.contains("<caption"), "tables are captioned");
    assert!(
        list.body.contains("href=\"/dashboard/projects\""),
        "the nav links it"
    );
    let page = admin.get(&format!("/dashboard/projects/{}", team.id)).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Save models, MCP servers and budget"));

    // A member of the default project only: the section does not exist.
    for path in [
        "/dashboard/projects".to_owned(),
        "/dashboard/projects/proj_default".to_owned(),
        format!("/dashboard/projects/{}", team.id),
    ] {
        assert_eq!(bob.get(&path).await.status, 404, "{path}");
    }
    assert!(
        !bob.get("/dashboard/keys")
            .await
            .body
            .contains("href=\"/dashboard/projects\"")
    );

    // Made an owner of Team B, Bob sees Team B (its members and keys),
    // nothing else, and cannot change its models or budget.
    app.store
        .set_project_member(&team.id, &bob_user.id, ProjectRole::Owner, 1)
        .await
        .unwrap();
    let list = bob.get("/dashboard/projects").await;
    assert_eq!(list.status, 200);
    assert!(list.body.contains("Team B") && !list.body.contains("Default project"));
    assert!(
        list.body.contains("href=\"/dashboard/projects\""),
        "the nav links it"
    );
    assert!(
        !list.body.contains("Create project"),
        "only organization owners create"
    );
    let page = bob.get(&format!("/dashboard/projects/{}", team.id)).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("bob@example.com"));
    assert!(!page.body.contains("Save models, MCP servers and budget"));
    for path in [
        "/dashboard/projects/proj_default",
        "/dashboard/projects/proj_0000000000000000",
    ] {
        assert_eq!(bob.get(path).await.status, 404, "{path}");
    }
    let csrf = bob.get("/dashboard/projects").await.csrf();
    let create = bob
        .post("/dashboard/projects", &[("csrf", &csrf), ("name", "mine")])
        .await;
    assert_eq!(
        create.status, 404,
        "only organization owners create projects"
    );
    let settings = bob
        .post(
            &format!("/dashboard/projects/{}/settings", team.id),
            &[("csrf", &csrf), ("models", ""), ("tokens", "")],
        )
        .await;
    assert_eq!(settings.status, 404);
    // Guessed ids of projects Bob does not own: the same 404, no change.
    let carol = app
        .create_user("carol@example.com", "password123", false)
        .await;
    for id in ["proj_default", "proj_0000000000000000"] {
        let added = bob
            .post(
                &format!("/dashboard/projects/{id}/members"),
                &[
                    ("csrf", &csrf),
                    ("email", "carol@example.com"),
                    ("role", "owner"),
                ],
            )
            .await;
        assert_eq!(added.status, 404, "{id}");
    }
    let default = ProjectId::default_project();
    assert_eq!(
        app.store.project_role(&default, &carol.id).await.unwrap(),
        Some(ProjectRole::Member),
        "new accounts join the default project as members; Bob changed nothing"
    );
    // In his own project Bob manages members, as his admin key could.
    let added = bob
        .post(
            &format!("/dashboard/projects/{}/members", team.id),
            &[
                ("csrf", &csrf),
                ("email", "Carol@example.com"),
                ("role", "member"),
            ],
        )
        .await;
    assert_eq!(added.status, 303, "{}", added.body);
    assert_eq!(
        app.store.project_role(&team.id, &carol.id).await.unwrap(),
        Some(ProjectRole::Member)
    );

    // Signed out: the sign-in page, as for every page.
    let anonymous = Browser::new(&app.base_url);
    let page = anonymous.get("/dashboard/projects").await;
    assert_eq!(page.status, 303);
}

async fn projects_made_on_the_dashboard_show_in_the_admin_api(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let admin_key = app.create_admin_key().await;
    let (ada, _) = app.signed_in("ada@example.com", true).await;
    let bob = app
        .create_user("bob@example.com", "password123", false)
        .await;

    let created = submit(
        &ada,
        "/dashboard/projects",
        "/dashboard/projects",
        &[
            ("name", "Team A"),
            ("models", "svc*, llama-3  other"),
            ("tokens", "1000"),
            ("period", "week"),
        ],
    )
    .await;
    assert_eq!(created.status, 303, "{}", created.body);
    let location = created.location.clone().unwrap();
    let id = location
        .strip_prefix("/dashboard/projects/")
        .and_then(|rest| rest.strip_suffix("?done=created"))
        .unwrap()
        .to_owned();
    let shown = ada.follow(created).await;
    assert!(shown.body.contains("The project was created."));
    assert!(
        shown.body.contains("0 / 1000 tokens this week"),
        "{}",
        shown.body
    );

    let path = format!("/v1/organization/projects/{id}");
    let project = admin_get(&app, &admin_key, &path).await;
    assert_eq!(project["name"], "Team A");
    assert_eq!(
        project["allowed_models"],
        json!(["svc*", "llama-3", "other"])
    );
    assert_eq!(project["budget"]["tokens"], 1000);
    assert_eq!(project["budget"]["period"], "week");

    // Models and budget changed, then removed.
    let page = format!("/dashboard/projects/{id}");
    let settings = format!("/dashboard/projects/{id}/settings");
    let saved = submit(
        &ada,
        &page,
        &settings,
        &[("models", "svc"), ("tokens", "2_500"), ("period", "day")],
    )
    .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let project = admin_get(&app, &admin_key, &path).await;
    assert_eq!(project["allowed_models"], json!(["svc"]));
    assert_eq!(project["budget"]["tokens"], 2500);
    assert_eq!(project["budget"]["period"], "day");
    let saved = submit(&ada, &page, &settings, &[("models", " "), ("tokens", "")]).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let project = admin_get(&app, &admin_key, &path).await;
    assert_eq!(project["allowed_models"], Value::Null);
    assert_eq!(project["budget"], Value::Null);

    // A member added by email, then made an owner.
    let members = format!("/dashboard/projects/{id}/members");
    for role in ["member", "owner"] {
        let added = submit(
            &ada,
            &page,
            &members,
            &[("email", "bob@example.com"), ("role", role)],
        )
        .await;
        assert_eq!(added.status, 303, "{}", added.body);
    }
    let users = admin_get(&app, &admin_key, &format!("{path}/users")).await;
    assert_eq!(users["data"][0]["id"], bob.id.0.as_str());
    assert_eq!(users["data"][0]["role"], "owner");
    let detail = ada.get(&page).await;
    assert!(detail.body.contains("bob@example.com"));

    // Bad input is a form error (400, the page again), never a 500 and
    // never a change.
    for (path, fields, message) in [
        (
            "/dashboard/projects".to_owned(),
            vec![("name", " "), ("models", ""), ("tokens", "")],
            "Give the project a name",
        ),
        (
            "/dashboard/projects".to_owned(),
            vec![("name", "x"), ("tokens", "lots"), ("period", "day")],
            "whole number of tokens",
        ),
        (
            settings.clone(),
            vec![("models", ""), ("tokens", "0"), ("period", "day")],
            "at least 1 token",
        ),
        (
            settings.clone(),
            vec![("models", ""), ("tokens", "10"), ("period", "year")],
            "Choose a period",
        ),
        (
            members.clone(),
            vec![("email", "nobody@example.com"), ("role", "member")],
            "There is no account",
        ),
        (
            members.clone(),
            vec![("email", "bob@example.com"), ("role", "admin")],
            "Choose a role",
        ),
    ] {
        let from = if path == "/dashboard/projects" {
            "/dashboard/projects"
        } else {
            page.as_str()
        };
        let refused = submit(&ada, from, &path, &fields).await;
        assert_eq!(refused.status, 400, "{path} {fields:?}");
        assert!(
            refused.body.contains(message),
            "{message}: {}",
            refused.body
        );
        assert!(refused.body.contains("role=\"alert\""));
    }
    let project = admin_get(&app, &admin_key, &path).await;
    assert_eq!(project["budget"], Value::Null, "nothing changed");
    let listed = admin_get(&app, &admin_key, "/v1/organization/projects").await;
    assert_eq!(
        listed["data"].as_array().unwrap().len(),
        2,
        "no project was made"
    );

    // Forms without the session's CSRF token are refused.
    for (path, fields) in [
        ("/dashboard/projects".to_owned(), vec![("name", "sneaky")]),
        (settings.clone(), vec![("tokens", "1"), ("period", "day")]),
        (
            members.clone(),
            vec![("email", "bob@example.com"), ("role", "member")],
        ),
    ] {
        for csrf in ["", "0000"] {
            let mut form = vec![("csrf", csrf)];
            form.extend_from_slice(&fields);
            assert_eq!(ada.post(&path, &form).await.status, 403, "{path}");
        }
    }
    let listed = admin_get(&app, &admin_key, "/v1/organization/projects").await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 2);

    // The audit log names the dashboard session, as for the admin API.
    let log = admin_get(
        &app,
        &admin_key,
        &format!("/v1/organization/audit_logs?project_ids[]={id}&limit=100"),
    )
    .await;
    let mut types: Vec<&str> = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["actor"]["type"], "session", "{e}");
            e["type"].as_str().unwrap()
        })
        .collect();
    types.reverse();
    assert_eq!(
        types,
        [
            "project.created",
            "project.updated",
            "project.updated",
            "user.added",
            "user.updated"
        ]
    );
}

async fn budget_bars_show_what_a_budgeted_key_used_and_admins_set_key_budgets(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let admin_key = app.create_admin_key().await;
    let project = admin_json(
        &app,
        &admin_key,
        "/v1/organization/projects",
        json!({"name": "metered", "budget": {"tokens": 9000, "period": "month"}}),
    )
    .await;
    let project_id = project["id"].as_str().unwrap().to_owned();
    let key = admin_json(
        &app,
        &admin_key,
        &format!("/v1/organization/projects/{project_id}/api_keys"),
        json!({"name": "metered-key", "kind": "restricted", "permissions": ["model.request"],
                "allowed_models": ["svc"], "budget": {"tokens": 5000, "period": "day"}}),
    )
    .await;
    let key_id = key["id"].as_str().unwrap().to_owned();
    let secret = key["value"].as_str().unwrap().to_owned();
    let response = app
        .chat(
            &secret,
            &json!({"model": "svc", "max_tokens": 8, "messages": [{"role": "user", "content": "hello there"}]}),
        )
        .await;
    assert_eq!(response.status(), 200);
    response.text().await.unwrap();

    // The count once the request's settlement is in (it runs after the
    // answer).
    let key_path = format!("/v1/organization/projects/{project_id}/api_keys/{key_id}");
    let mut used = admin_get(&app, &admin_key, &key_path).await["budget"]["used"].clone();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = admin_get(&app, &admin_key, &key_path).await["budget"]["used"].clone();
        if now == used {
            break;
        }
        used = now;
    }
    let used = used.as_i64().unwrap();
    assert!(used > 0);

    let (ada, _) = app.signed_in("ada@example.com", true).await;
    let keys = ada.get("/dashboard/keys").await;
    let row = row_of(&keys.body, &key_id);
    assert!(
        row.contains(&format!("{used} / 5000 tokens this day")),
        "{row}"
    );
    assert!(
        row.contains(&format!("<meter min=\"0\" max=\"5000\" value=\"{used}\"")),
        "{row}"
    );
    assert!(
        row.contains("restricted") && row.contains(">svc<"),
        "kind and models: {row}"
    );
    let projects = ada.get("/dashboard/projects").await;
    let row = row_of(&projects.body, &project_id);
    assert!(
        row.contains(&format!("{used} / 9000 tokens this month")),
        "{row}"
    );
    assert!(row.contains("renews "), "{row}");

    // An admin sets the key's budget on the dashboard; the admin API and
    // the audit log show it.
    let page = format!("/dashboard/keys/{key_id}/budget");
    let saved = submit(
        &ada,
        &page,
        &page,
        &[("tokens", "7000"), ("period", "week")],
    )
    .await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let shown = admin_get(&app, &admin_key, &key_path).await;
    assert_eq!(shown["budget"]["tokens"], 7000);
    assert_eq!(shown["budget"]["period"], "week");
    let refused = submit(&ada, &page, &page, &[("tokens", "-5"), ("period", "week")]).await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.body.contains("at least 1 token"),
        "{}",
        refused.body
    );
    let removed = submit(&ada, &page, &page, &[("tokens", ""), ("period", "week")]).await;
    assert_eq!(removed.status, 303);
    assert_eq!(
        admin_get(&app, &admin_key, &key_path).await["budget"],
        Value::Null
    );
    let keys = ada.get("/dashboard/keys").await;
    let row = row_of(&keys.body, &key_id);
    assert!(row.contains("No budget"), "{row}");
    let log = admin_get(
        &app,
        &admin_key,
        "/v1/organization/audit_logs?event_types[]=api_key.updated",
    )
    .await;
    let entries = log["data"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{log}");
    assert_eq!(
        entries[1]["api_key.updated"]["changes_requested"]["budget"]["tokens"],
        7000
    );
    assert_eq!(entries[0]["actor"]["type"], "session");

    // Without the CSRF token, or not an admin: refused, nothing changed.
    for csrf in ["", "x"] {
        let sent = ada
            .post(&page, &[("csrf", csrf), ("tokens", "1"), ("period", "day")])
            .await;
        assert_eq!(sent.status, 403);
    }
    let (bob, _) = app.signed_in("bob@example.com", false).await;
    assert_eq!(bob.get(&page).await.status, 404);
    let csrf = bob.get("/dashboard/keys").await.csrf();
    let sent = bob
        .post(
            &page,
            &[("csrf", &csrf), ("tokens", "1"), ("period", "day")],
        )
        .await;
    assert_eq!(sent.status, 404);
    assert_eq!(
        admin_get(&app, &admin_key, &key_path).await["budget"],
        Value::Null
    );
}

/// The table row with this id.
fn row_of<'a>(body: &'a str, id: &str) -> &'a str {
    let start = body
        .find(&format!("<tr id=\"{id}\""))
        .unwrap_or_else(|| panic!("no row {id}: {body}"));
    let end = start + body[start..].find("</tr>").unwrap();
    &body[start..end]
}
