//! Attack: a project owner making herself organization owner through the
//! admin API (issue 29, finding 1). Rita, an organization `reader` who owns
//! project A and holds an admin key for it, added the organization owner to
//! A, minted an admin key "owned" by him, and with it listed every account,
//! read project B's keys and promoted herself. Every step of that sequence
//! is tried here, and each must stop where the rule says: a key is made for
//! its maker only, reaches no further than its maker did, and keeps the
//! reach it was made with.

use serde_json::{Value, json};
use svc_core::{AdminReach, KeyKind, KeyScope, ModelAccess, ProjectRole, ProjectStore};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Database, TestApp};

on_both_databases!(
    a_project_owner_cannot_reach_the_organization_through_another_account,
    a_key_is_rotated_only_by_its_own_account,
    a_project_owner_makes_her_own_admin_key_on_the_dashboard,
);

async fn send(
    app: &TestApp,
    method: reqwest::Method,
    key: &str,
    path: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let request = app.client.request(method, app.url(path)).bearer_auth(key);
    let request = match body {
        Some(body) => request.json(&body),
        None => request,
    };
    request.send().await.unwrap()
}

async fn get(app: &TestApp, key: &str, path: &str) -> reqwest::Response {
    send(app, reqwest::Method::GET, key, path, None).await
}

async fn post(app: &TestApp, key: &str, path: &str, body: Value) -> reqwest::Response {
    send(app, reqwest::Method::POST, key, path, Some(body)).await
}

async fn a_project_owner_cannot_reach_the_organization_through_another_account(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let root = app.create_admin_key().await;
    let olga = app
        .create_user("olga@example.com", "password123", true)
        .await;
    let rita = app
        .create_user("rita@example.com", "password123", false)
        .await;
    let a = app.create_project("a", ModelAccess::any()).await;
    let b = app.create_project("b", ModelAccess::any()).await;
    let b_key = app
        .create_scoped_key(
            None,
            KeyScope {
                project_id: Some(b.id.clone()),
                ..KeyScope::default()
            },
        )
        .await;
    assert!(b_key.starts_with("sk-svc-"));
    // The organization makes Rita an owner of A; she holds an admin key for
    // it (even one made to reach the organization, by the operator, reaches
    // only A while she is a reader).
    let made = post(
        &app,
        &root,
        &format!("/v1/organization/projects/{}/users", a.id.0),
        json!({"user_id": rita.id.0, "role": "owner"}),
    )
    .await;
    assert_eq!(made.status(), 200);
    // Rita's admin key for A, made to reach `reach`.
    let ritas_admin = |reach| {
        let scope = KeyScope {
            project_id: Some(a.id.clone()),
            kind: KeyKind::Admin(reach),
            ..KeyScope::default()
        };
        app.create_scoped_key(Some(&rita.id), scope)
    };
    for reach in [AdminReach::Organization, AdminReach::Project] {
        let ritas = ritas_admin(reach).await;
        attack(&app, &ritas, &rita.id.0, &olga.id.0, &a.id.0, &b.id.0).await;
    }

    // The role a key acts with is fixed when it is made: an admin key Rita
    // makes now reaches A only, and still only A once she is promoted.
    let ritas = ritas_admin(AdminReach::Project).await;
    let own: Value = post(
        &app,
        &ritas,
        &format!("/v1/organization/projects/{}/api_keys", a.id.0),
        json!({"name": "rita-admin", "kind": "admin", "user_id": rita.id.0}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(own["owner"]["user"]["id"], rita.id.0, "{own}");
    let minted = own["value"].as_str().unwrap().to_owned();
    let promoted = post(
        &app,
        &root,
        &format!("/v1/organization/users/{}", rita.id.0),
        json!({"role": "owner"}),
    )
    .await;
    assert_eq!(promoted.status(), 200);
    for key in [&ritas, &minted] {
        assert_eq!(
            get(&app, key, "/v1/organization/users").await.status(),
            403,
            "a key made while she owned only A reaches only A"
        );
        assert_eq!(
            get(
                &app,
                key,
                &format!("/v1/organization/projects/{}/api_keys", b.id.0)
            )
            .await
            .status(),
            404
        );
    }
    // A key made to reach the organization (here by the operator) does
    // reach it now that she is an organization owner.
    let org_wide = ritas_admin(AdminReach::Organization).await;
    assert_eq!(
        get(&app, &org_wide, "/v1/organization/users")
            .await
            .status(),
        200
    );
}

/// Rita's steps with her admin key `ritas` for project `a`; none may get
/// her past project A or act as Olga.
async fn attack(app: &TestApp, ritas: &str, rita: &str, olga: &str, a: &str, b: &str) {
    // Adding the organization owner to her project is hers to do.
    let added = post(
        app,
        ritas,
        &format!("/v1/organization/projects/{a}/users"),
        json!({"user_id": olga, "role": "member"}),
    )
    .await;
    assert_eq!(added.status(), 200);
    // A key "owned" by Olga, admin or not, is refused, naming user_id.
    for kind in ["admin", "all"] {
        let refused = post(
            app,
            ritas,
            &format!("/v1/organization/projects/{a}/api_keys"),
            json!({"name": "olga's", "kind": kind, "user_id": olga}),
        )
        .await;
        crate::expect_error(
            refused,
            403,
            "invalid_request_error",
            "insufficient_permissions",
            Some("user_id"),
        )
        .await;
    }
    // Her own admin key reaches her project only.
    let own: Value = post(
        app,
        ritas,
        &format!("/v1/organization/projects/{a}/api_keys"),
        json!({"name": "rita's", "kind": "admin"}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(own["owner"]["user"]["id"], rita, "{own}");
    let minted = own["value"].as_str().unwrap().to_owned();
    for key in [ritas, minted.as_str()] {
        assert_eq!(get(app, key, "/v1/organization/users").await.status(), 403);
        assert_eq!(
            get(app, key, &format!("/v1/organization/projects/{b}/api_keys"))
                .await
                .status(),
            404
        );
        let promote = post(
            app,
            key,
            &format!("/v1/organization/users/{rita}"),
            json!({"role": "owner"}),
        )
        .await;
        assert_eq!(promote.status(), 403);
        assert_eq!(
            get(app, key, &format!("/v1/organization/projects/{a}/api_keys"))
                .await
                .status(),
            200
        );
    }
    // Nothing made Olga's keys, and Rita is still a reader.
    let users: Value = get(app, &app.create_admin_key().await, "/v1/organization/users")
        .await
        .json()
        .await
        .unwrap();
    let role = |id: &str| {
        users["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["id"] == id)
            .unwrap()["role"]
            .clone()
    };
    assert_eq!(role(rita), "reader");
    assert!(
        app.keys
            .list(Some(&svc_core::UserId(olga.to_owned())))
            .await
            .unwrap()
            .is_empty(),
        "no key acts as Olga"
    );
    // Olga leaves A again, for the next round.
    let removed = send(
        app,
        reqwest::Method::DELETE,
        ritas,
        &format!("/v1/organization/projects/{a}/users/{olga}"),
        None,
    )
    .await;
    assert_eq!(removed.status(), 200);
}

async fn a_key_is_rotated_only_by_its_own_account(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let olga = app
        .create_user("olga@example.com", "password123", true)
        .await;
    let rita = app
        .create_user("rita@example.com", "password123", false)
        .await;
    let a = app.create_project("a", ModelAccess::any()).await;
    for (user, role) in [(&rita, ProjectRole::Owner), (&olga, ProjectRole::Member)] {
        app.store
            .set_project_member(&a.id, &user.id, role, 1)
            .await
            .unwrap();
    }
    let scope = |kind| KeyScope {
        project_id: Some(a.id.clone()),
        kind,
        ..KeyScope::default()
    };
    let ritas = app
        .create_scoped_key(Some(&rita.id), scope(KeyKind::Admin(AdminReach::Project)))
        .await;
    // Olga's organization-wide admin key, in project A.
    let olgas = app
        .create_scoped_key(
            Some(&olga.id),
            scope(KeyKind::Admin(AdminReach::Organization)),
        )
        .await;
    let olgas_id = app.keys.list(Some(&olga.id)).await.unwrap()[0].id.0.clone();
    let rotate = format!(
        "/v1/organization/projects/{}/api_keys/{olgas_id}/rotate",
        a.id.0
    );
    // Rotating it would hand Rita a key that acts as Olga: refused.
    crate::expect_error(
        post(&app, &ritas, &rotate, json!({})).await,
        403,
        "invalid_request_error",
        "insufficient_permissions",
        Some("key_id"),
    )
    .await;
    assert_eq!(app.keys.list(Some(&olga.id)).await.unwrap().len(), 1);
    // Olga rotates her own; Rita may still revoke it, as a project owner.
    assert_eq!(post(&app, &olgas, &rotate, json!({})).await.status(), 200);
    let revoked = send(
        &app,
        reqwest::Method::DELETE,
        &ritas,
        &format!("/v1/organization/projects/{}/api_keys/{olgas_id}", a.id.0),
        None,
    )
    .await;
    assert_eq!(revoked.status(), 200);

    // On the dashboard, an organization owner may revoke another's key,
    // but not rotate it (its successor would be shown to her).
    let olga_browser = svc_test_support::Browser::new(&app.base_url);
    olga_browser
        .sign_in("olga@example.com", "password123")
        .await;
    let ritas_id = app.keys.list(Some(&rita.id)).await.unwrap()[0].id.0.clone();
    let page = olga_browser.get("/dashboard/keys").await;
    assert!(
        page.body
            .contains(&format!("/dashboard/keys/{ritas_id}/revoke"))
    );
    assert!(
        !page
            .body
            .contains(&format!("/dashboard/keys/{ritas_id}/rotate"))
    );
    let rotate = format!("/dashboard/keys/{ritas_id}/rotate");
    assert_eq!(olga_browser.get(&rotate).await.status, 404);
    let done = olga_browser
        .post(&rotate, &[("csrf", &page.csrf()), ("grace", "0")])
        .await;
    assert_eq!(done.status, 404);
    assert_eq!(app.keys.list(Some(&rita.id)).await.unwrap().len(), 1);
}

async fn a_project_owner_makes_her_own_admin_key_on_the_dashboard(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let (browser, rita) = app.signed_in("rita@example.com", false).await;
    let a = app.create_project("a", ModelAccess::any()).await;
    let b = app.create_project("b", ModelAccess::any()).await;
    let path = format!("/dashboard/projects/{}", a.id.0);
    // Not hers yet: the project does not exist for her.
    assert_eq!(browser.get(&path).await.status, 404);
    app.store
        .set_project_member(&a.id, &rita.id, ProjectRole::Owner, 1)
        .await
        .unwrap();
    let page = browser.get(&path).await;
    assert_eq!(page.status, 200);
    let create = format!("{path}/admin_key");
    let forged = browser
        .post(&create, &[("csrf", "forged"), ("name", "x")])
        .await;
    assert_eq!(forged.status, 403);
    let unnamed = browser
        .post(&create, &[("csrf", &page.csrf()), ("name", " ")])
        .await;
    assert_eq!(unnamed.status, 400);
    assert!(unnamed.body.contains("admin-key-error"), "{}", unnamed.body);
    let done = browser
        .post(&create, &[("csrf", &page.csrf()), ("name", "a-admin")])
        .await;
    assert_eq!(done.location.as_deref(), Some("/dashboard/keys/new"));
    let shown = browser.follow(done).await;
    let secret = shown.value_by_id("new-key").unwrap();
    let keys = app.keys.list(Some(&rita.id)).await.unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].kind, KeyKind::Admin(AdminReach::Project));
    assert_eq!(keys[0].project_id, a.id);
    assert_eq!(
        get(
            &app,
            &secret,
            &format!("/v1/organization/projects/{}/users", a.id.0)
        )
        .await
        .status(),
        200
    );
    assert_eq!(
        get(
            &app,
            &secret,
            &format!("/v1/organization/projects/{}", b.id.0)
        )
        .await
        .status(),
        404
    );
    // Once she is no longer an owner of A, the key reaches nothing.
    app.store
        .set_project_member(&a.id, &rita.id, ProjectRole::Member, 1)
        .await
        .unwrap();
    assert_eq!(
        get(
            &app,
            &secret,
            &format!("/v1/organization/projects/{}/users", a.id.0)
        )
        .await
        .status(),
        403
    );
}
