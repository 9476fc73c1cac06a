//! `GET /v1/organization/users` and `GET /v1/organization/users/{user_id}`:
//! the organization's accounts with their role, for organization-wide admin
//! keys only.

use serde_json::{Value, json};
use svc_core::{KeyKind, KeyScope, ModelAccess, ProjectRole, ProjectStore};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Database, TestApp};

on_both_databases!(the_organizations_users_are_listed_with_their_roles);

async fn get(app: &TestApp, key: &str, path: &str) -> reqwest::Response {
    app.client
        .get(app.url(path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
}

async fn the_organizations_users_are_listed_with_their_roles(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let admin = app.create_admin_key().await;
    let ada = app
        .create_user("ada@example.com", "password123", true)
        .await;
    let bob = app
        .create_user("bob@example.com", "password123", false)
        .await;

    let response = get(&app, &admin, "/v1/organization/users").await;
    assert_eq!(response.status(), 200);
    let list: Value = response.json().await.unwrap();
    assert_eq!(list["object"], "list");
    let data = list["data"].as_array().unwrap();
    assert_eq!(data.len(), 2, "{list}");
    let of = |id: &str| data.iter().find(|u| u["id"] == id).unwrap().clone();
    let (a, b) = (of(&ada.id.0), of(&bob.id.0));
    assert_eq!(a["object"], "organization.user");
    assert_eq!(a["email"], "ada@example.com");
    assert_eq!(a["role"], "owner");
    assert_eq!(b["role"], "reader");
    assert_eq!(b["disabled_at"], Value::Null);
    assert!(data.iter().all(|u| u.get("password_hash").is_none()));
    // Pages of one, in the list's order (oldest first, then by id).
    let first: Value = get(&app, &admin, "/v1/organization/users?limit=1")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(first["has_more"], json!(true));
    assert_eq!(first["last_id"], data[0]["id"]);
    let next: Value = get(
        &app,
        &admin,
        &format!(
            "/v1/organization/users?limit=1&after={}",
            data[0]["id"].as_str().unwrap()
        ),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(next["data"][0]["id"], data[1]["id"]);
    assert_eq!(next["has_more"], json!(false));

    let one: Value = get(
        &app,
        &admin,
        &format!("/v1/organization/users/{}", bob.id.0),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(one["email"], "bob@example.com");
    let missing = get(&app, &admin, "/v1/organization/users/usr_0000000000000000").await;
    assert_eq!(missing.status(), 404);

    // A project owner's admin key reaches its project, not the organization.
    let project = app.create_project("bobs", ModelAccess::any()).await;
    app.store
        .set_project_member(&project.id, &bob.id, ProjectRole::Owner, 1)
        .await
        .unwrap();
    let bobs_admin = app
        .create_scoped_key(
            Some(&bob.id),
            KeyScope {
                project_id: Some(project.id.clone()),
                kind: KeyKind::Admin(svc_core::AdminReach::Organization),
                ..KeyScope::default()
            },
        )
        .await;
    for path in [
        "/v1/organization/users".to_owned(),
        format!("/v1/organization/users/{}", ada.id.0),
    ] {
        let refused = get(&app, &bobs_admin, &path).await;
        crate::expect_error(
            refused,
            403,
            "invalid_request_error",
            "insufficient_permissions",
            None,
        )
        .await;
    }
    // Roles: the last owner stays one; a reader becomes an owner, then the
    // first owner may become a reader; each change is audited.
    let set_role = |id: String, role: &'static str| {
        let (app, admin) = (&app, &admin);
        async move {
            app.client
                .post(app.url(&format!("/v1/organization/users/{id}")))
                .bearer_auth(admin)
                .json(&json!({ "role": role }))
                .send()
                .await
                .unwrap()
        }
    };
    crate::expect_error(
        set_role(ada.id.0.clone(), "reader").await,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("role"),
    )
    .await;
    crate::expect_error(
        set_role(bob.id.0.clone(), "admin").await,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("role"),
    )
    .await;
    assert_eq!(
        set_role("usr_0000000000000000".into(), "owner")
            .await
            .status(),
        404
    );
    let promoted: Value = set_role(bob.id.0.clone(), "owner")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(promoted["role"], "owner", "{promoted}");
    let demoted: Value = set_role(ada.id.0.clone(), "reader")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(demoted["role"], "reader", "{demoted}");
    // Bob's project admin key now reaches the organization.
    assert_eq!(
        get(&app, &bobs_admin, "/v1/organization/users")
            .await
            .status(),
        200
    );
    let log: Value = get(
        &app,
        &admin,
        "/v1/organization/audit_logs?event_types[]=user.updated",
    )
    .await
    .json()
    .await
    .unwrap();
    let roles: Vec<&Value> = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["user.updated"]["changes_requested"]["role"])
        .collect();
    assert_eq!(roles, [&json!("reader"), &json!("owner")], "{log}");

    // Not for keys that are not admin keys.
    let plain = app.create_key().await;
    assert_eq!(
        get(&app, &plain, "/v1/organization/users").await.status(),
        403
    );
}
