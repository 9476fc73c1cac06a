//! Projects, scoped keys, model access and the admin API (issue 20), on
//! SQLite and on PostgreSQL: every route that takes a key refuses a key
//! beyond its scope; a key sees and uses only its models; projects' and
//! keys' MCP server lists are set as model lists are; an admin key
//! reaches only what its owner may, and another project's ids are answered
//! as not found.

use reqwest::Method;
use serde_json::{Value, json};
use svc_core::{KeyKind, KeyScope, ModelAccess, Permission, ProjectId, UserId};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Database, TestApp};

use crate::{body, expect_error};

on_both_databases!(
    every_route_that_takes_a_key_enforces_its_scope,
    models_are_listed_and_served_only_as_the_key_and_project_allow,
    the_admin_api_manages_projects_and_keys,
    a_project_owners_admin_key_cannot_reach_another_project_by_guessed_ids,
    stored_responses_stay_in_their_project,
    members_are_removed_through_the_admin_api_never_the_last_owner,
    mcp_server_lists_are_set_like_model_lists_and_audited,
);

fn scope(kind: KeyKind) -> KeyScope {
    KeyScope {
        kind,
        ..KeyScope::default()
    }
}

/// Every route of the OpenAPI document that takes a key, as (method, path,
/// what the key needs): the scope its security requirement names (the
/// handler's `Key<scope::…>`), or `None` for any key.
fn documented_key_routes() -> Vec<(String, String, Option<Permission>)> {
    let doc = svc_server::openapi_document().unwrap();
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let Some(bearer) = operation["security"]
                .as_array()
                .and_then(|s| s.iter().find_map(|r| r.get("bearer")))
            else {
                continue;
            };
            let need = bearer[0].as_str().map(|scope| {
                Permission::parse(scope)
                    .unwrap_or_else(|| panic!("{method} {path}: unknown scope {scope}"))
            });
            routes.push((method.to_uppercase(), path.clone(), need));
        }
    }
    routes
}

/// A request to `method path` (placeholders filled in) with `key`, with a
/// body that is valid for the route.
async fn call(app: &TestApp, method: &str, path: &str, key: &str) -> reqwest::Response {
    let url = path
        .replace("{model}", "svc")
        .replace("{response_id}", "resp_0000")
        .replace("{project_id}", "proj_default")
        .replace("{key_id}", "key_0000000000000000");
    let method = Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = app
        .client
        .request(method.clone(), app.url(&url))
        .bearer_auth(key);
    if method == Method::POST {
        let json = match url.as_str() {
            "/v1/chat/completions" => body("svc", "hi"),
            "/v1/responses" => json!({"model": "svc", "input": "hi", "store": false}),
            "/v1/messages" | "/v1/messages/count_tokens" => json!({
                "model": "svc", "max_tokens": 16,
                "messages": [{"role": "user", "content": "hi"}]
            }),
            users if users.ends_with("/users") => {
                json!({"user_id": "usr_0000000000000000", "role": "member"})
            }
            _ => json!({"name": "made by the scope test"}),
        };
        request = request.json(&json);
    }
    request.send().await.unwrap()
}

/// Asserts a 403 `insufficient_permissions` naming `missing`, in the
/// route's dialect.
async fn expect_refused(response: reqwest::Response, path: &str, missing: Permission) {
    let what = format!("{path} without {missing}");
    assert_eq!(response.status(), 403, "{what}");
    let body: Value = response.json().await.unwrap();
    let message = if path.starts_with("/v1/messages") {
        assert_eq!(body["type"], "error", "{what}: {body}");
        assert_eq!(body["error"]["type"], "permission_error", "{what}: {body}");
        body["error"]["message"].as_str().unwrap().to_owned()
    } else {
        assert_eq!(
            body["error"]["code"], "insufficient_permissions",
            "{what}: {body}"
        );
        assert_eq!(
            body["error"]["type"], "invalid_request_error",
            "{what}: {body}"
        );
        body["error"]["message"].as_str().unwrap().to_owned()
    };
    assert!(
        message.contains(&format!("Missing scopes: {missing}.")),
        "{what}: {message}"
    );
}

/// Asserts the scope let the request through: neither refused (403) nor
/// unrouted by the scope table (500), nor unauthenticated.
fn expect_let_through(response: &reqwest::Response, what: &str) {
    let status = response.status().as_u16();
    assert!(!matches!(status, 401 | 403 | 500), "{what}: got {status}");
}

async fn every_route_that_takes_a_key_enforces_its_scope(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    // Keys of an admin account, so that usage's own check passes.
    let admin = app
        .create_user("owner@example.com", "password123", true)
        .await;
    let owner = Some(&admin.id);
    let none = app
        .create_scoped_key(owner, scope(KeyKind::Restricted(vec![])))
        .await;
    let all = app.create_scoped_key(owner, scope(KeyKind::All)).await;
    let admin_key = app
        .create_scoped_key(
            owner,
            scope(KeyKind::Admin(svc_core::AdminReach::Organization)),
        )
        .await;

    let documented = documented_key_routes();
    assert!(documented.len() >= 28, "{documented:?}");
    for (method, path, need) in &documented {
        let what = format!("{method} {path}");
        match *need {
            None => {
                // Any key: even one with no permission at all (the
                // DELETE logs it out, so it is tried last, below).
                if method != "DELETE" {
                    let response = call(&app, method, path, &none).await;
                    expect_let_through(&response, &what);
                }
            }
            Some(permission) => {
                let response = call(&app, method, path, &none).await;
                expect_refused(response, path, permission).await;
                // Exactly that permission suffices (admin ones come only
                // with the admin kind).
                let granted = if permission.is_management() {
                    admin_key.clone()
                } else {
                    app.create_scoped_key(owner, scope(KeyKind::Restricted(vec![permission])))
                        .await
                };
                let response = call(&app, method, path, &granted).await;
                expect_let_through(&response, &format!("{what} with {permission}"));
                // `all` is every route but the admin API; `admin` the admin
                // API and usage.
                let response = call(&app, method, path, &all).await;
                if permission.is_management() {
                    expect_refused(response, path, permission).await;
                } else {
                    expect_let_through(&response, &format!("{what} with an `all` key"));
                }
                let response = call(&app, method, path, &admin_key).await;
                if permission.is_management() || permission == Permission::UsageRead {
                    expect_let_through(&response, &format!("{what} with an admin key"));
                } else {
                    expect_refused(response, path, permission).await;
                }
            }
        }
    }
    // The key with no permission may still log itself out.
    let response = call(&app, "DELETE", "/v1/auth/key", &none).await;
    assert_eq!(response.status(), 200);
    let response = call(&app, "GET", "/v1/auth/key", &none).await;
    assert_eq!(response.status(), 401);
}

async fn models_are_listed_and_served_only_as_the_key_and_project_allow(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    // The project allows svc and svc-thinking; the key, svc and fake-*.
    let project = app
        .create_project("limited", ModelAccess::only(vec!["svc*".into()]).unwrap())
        .await;
    let key = app
        .create_scoped_key(
            None,
            KeyScope {
                project_id: Some(project.id.clone()),
                kind: KeyKind::All,
                allowed_models: ModelAccess::only(vec!["svc".into(), "fake-*".into()]).unwrap(),
                ..KeyScope::default()
            },
        )
        .await;
    let get = |path: &str| app.client.get(app.url(path)).bearer_auth(&key).send();
    let list: Value = get("/v1/models").await.unwrap().json().await.unwrap();
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["svc"]);
    assert_eq!(get("/v1/models/svc").await.unwrap().status(), 200);

    // A model the key may not use is answered exactly as one that does
    // not exist, on every route.
    let hidden = ["svc-thinking", "fake-slow"];
    let missing = "no-such-model";
    let not_found = |model: &str| {
        format!("The model `{model}` does not exist or you do not have access to it.")
    };
    for model in hidden.into_iter().chain([missing]) {
        let response = get(&format!("/v1/models/{model}")).await.unwrap();
        let message = expect_error(
            response,
            404,
            "invalid_request_error",
            "model_not_found",
            Some("model"),
        )
        .await;
        assert_eq!(message, not_found(model));
        let response = app.chat(&key, &body(model, "hi")).await;
        let message = expect_error(
            response,
            404,
            "invalid_request_error",
            "model_not_found",
            Some("model"),
        )
        .await;
        assert_eq!(message, not_found(model));
        let response = app
            .client
            .post(app.url("/v1/responses"))
            .bearer_auth(&key)
            .json(&json!({"model": model, "input": "hi"}))
            .send()
            .await
            .unwrap();
        let message = expect_error(
            response,
            404,
            "invalid_request_error",
            "model_not_found",
            Some("model"),
        )
        .await;
        assert_eq!(message, not_found(model));
        for path in ["/v1/messages", "/v1/messages/count_tokens"] {
            let response = app
                .client
                .post(app.url(path))
                .header("x-api-key", &key)
                .header("anthropic-version", "2023-06-01")
                .json(&json!({"model": model, "max_tokens": 16,
                    "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 404, "{path} {model}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["type"], "not_found_error", "{body}");
            assert_eq!(body["error"]["message"], not_found(model), "{body}");
        }
    }
    // What is allowed works.
    assert_eq!(app.chat(&key, &body("svc", "hi")).await.status(), 200);
    let response = app
        .client
        .post(app.url("/v1/messages"))
        .header("x-api-key", &key)
        .json(&json!({"model": "svc", "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    // The project's list changes through the admin API: the key follows
    // from its very next request (what authentication remembered is
    // dropped), on either database.
    let root = app
        .create_scoped_key(
            None,
            scope(KeyKind::Admin(svc_core::AdminReach::Organization)),
        )
        .await;
    let modify = |allowed: Value| {
        app.client
            .post(app.url(&format!("/v1/organization/projects/{}", project.id.0)))
            .bearer_auth(&root)
            .json(&json!({ "allowed_models": allowed }))
            .send()
    };
    let listed = || async {
        let list: Value = get("/v1/models").await.unwrap().json().await.unwrap();
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let changed: Value = modify(json!(["svc-thinking"]))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(changed["allowed_models"], json!(["svc-thinking"]));
    assert_eq!(changed["name"], "limited", "a name left out stays");
    assert!(listed().await.is_empty());
    assert_eq!(app.chat(&key, &body("svc", "hi")).await.status(), 404);
    assert_eq!(modify(Value::Null).await.unwrap().status(), 200);
    assert_eq!(
        listed().await,
        [
            "svc",
            "fake-slow",
            "fake-fail",
            "fake-tools",
            "fake-agent",
            "fake-tiny",
            "fake-cached",
            "fake-template",
            "fake-embed",
            "fake-rerank",
            "fake-speech"
        ]
    );
    assert_eq!(app.chat(&key, &body("fake-slow", "hi")).await.status(), 200);

    // A key of the default project with no list of its own sees everything.
    let open = app.create_key().await;
    let list: Value = app
        .client
        .get(app.url("/v1/models"))
        .bearer_auth(&open)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["data"].as_array().unwrap().len(), 12);
}

/// `method` on the admin API `path` with `key`, and the JSON answer.
async fn admin(
    app: &TestApp,
    key: &str,
    method: Method,
    path: &str,
    json: Option<Value>,
) -> (u16, Value) {
    let mut request = app
        .client
        .request(method, app.url(&format!("/v1/organization{path}")))
        .bearer_auth(key);
    if let Some(json) = json {
        request = request.json(&json);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn the_admin_api_manages_projects_and_keys(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    // The first admin key: the operator's, as `svc keys create --kind admin` makes it.
    let root = app
        .create_scoped_key(
            None,
            scope(KeyKind::Admin(svc_core::AdminReach::Organization)),
        )
        .await;

    let (status, created) = admin(
        &app,
        &root,
        Method::POST,
        "/projects",
        Some(json!({"name": "Team A", "allowed_models": ["svc*"]})),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["object"], "organization.project");
    assert_eq!(created["status"], "active");
    assert_eq!(created["allowed_models"], json!(["svc*"]));
    let team = created["id"].as_str().unwrap().to_owned();
    assert!(team.starts_with("proj_"));

    let (status, list) = admin(&app, &root, Method::GET, "/projects", None).await;
    assert_eq!(status, 200);
    assert_eq!(list["object"], "list");
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&"proj_default") && ids.contains(&team.as_str()));
    assert_eq!(list["first_id"], ids[0]);
    assert_eq!(list["last_id"], ids[1]);
    assert_eq!(list["has_more"], false);
    let (status, page) = admin(&app, &root, Method::GET, "/projects?limit=1", None).await;
    assert_eq!((status, page["has_more"].clone()), (200, json!(true)));
    let after = page["last_id"].as_str().unwrap();
    let (_, next) = admin(
        &app,
        &root,
        Method::GET,
        &format!("/projects?limit=1&after={after}"),
        None,
    )
    .await;
    assert_eq!(next["data"][0]["id"], ids[1]);
    assert_eq!(next["has_more"], false);
    let (status, one) = admin(&app, &root, Method::GET, &format!("/projects/{team}"), None).await;
    assert_eq!((status, one["name"].clone()), (200, json!("Team A")));

    // A restricted key, made through the API: its secret once, then used.
    let (status, key) = admin(
        &app,
        &root,
        Method::POST,
        &format!("/projects/{team}/api_keys"),
        Some(json!({"name": "inference", "kind": "restricted",
            "permissions": ["model.request"], "allowed_models": ["svc"]})),
    )
    .await;
    assert_eq!(status, 200, "{key}");
    assert_eq!(key["object"], "organization.project.api_key");
    assert_eq!(key["kind"], "restricted");
    assert_eq!(key["permissions"], json!(["model.request"]));
    assert_eq!(key["allowed_models"], json!(["svc"]));
    assert_eq!(key["state"], "active");
    assert_eq!(key["owner"], json!({"type": "operator"}));
    let secret = key["value"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("sk-svc-") && secret.len() == 47);
    let key_id = key["id"].as_str().unwrap().to_owned();
    assert_eq!(app.chat(&secret, &body("svc", "hi")).await.status(), 200);
    let response = app
        .client
        .get(app.url("/v1/models"))
        .bearer_auth(&secret)
        .send()
        .await
        .unwrap();
    expect_refused(response, "/v1/models", Permission::ModelRead).await;

    // Reading it back never shows the secret.
    let (status, read) = admin(
        &app,
        &root,
        Method::GET,
        &format!("/projects/{team}/api_keys/{key_id}"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert!(read.get("value").is_none(), "{read}");
    assert!(!read.to_string().contains(&secret));
    assert_eq!(read["redacted_value"], key["redacted_value"]);

    // Lists come in pages.
    for n in 0..2 {
        let (status, _) = admin(
            &app,
            &root,
            Method::POST,
            &format!("/projects/{team}/api_keys"),
            Some(json!({"name": format!("more {n}")})),
        )
        .await;
        assert_eq!(status, 200);
    }
    let (_, keys) = admin(
        &app,
        &root,
        Method::GET,
        &format!("/projects/{team}/api_keys?limit=2"),
        None,
    )
    .await;
    assert_eq!(keys["data"].as_array().unwrap().len(), 2);
    assert_eq!(keys["has_more"], true);
    let (_, rest) = admin(
        &app,
        &root,
        Method::GET,
        &format!(
            "/projects/{team}/api_keys?limit=2&after={}",
            keys["last_id"].as_str().unwrap()
        ),
        None,
    )
    .await;
    assert_eq!(rest["has_more"], false);
    // Newest first (keys made in the same second by id): the two pages
    // hold the three keys, each once.
    let mut paged: Vec<&str> = keys["data"]
        .as_array()
        .unwrap()
        .iter()
        .chain(rest["data"].as_array().unwrap())
        .map(|k| k["id"].as_str().unwrap())
        .collect();
    assert_eq!(paged.len(), 3);
    assert!(paged.contains(&key_id.as_str()));
    paged.sort_unstable();
    paged.dedup();
    assert_eq!(paged.len(), 3);

    // Bad input is a 400 naming the field.
    for (json, param) in [
        (json!({"name": ""}), "name"),
        (json!({"name": "k", "kind": "root"}), "kind"),
        (
            json!({"name": "k", "kind": "restricted", "permissions": ["api.management.write"]}),
            "permissions",
        ),
        (
            json!({"name": "k", "permissions": ["model.request"]}),
            "permissions",
        ),
        (
            json!({"name": "k", "allowed_models": [""]}),
            "allowed_models",
        ),
        (json!({"name": "k", "expires_in": 0}), "expires_in"),
    ] {
        let response = app
            .client
            .post(app.url(&format!("/v1/organization/projects/{team}/api_keys")))
            .bearer_auth(&root)
            .json(&json)
            .send()
            .await
            .unwrap();
        expect_error(
            response,
            400,
            "invalid_request_error",
            "invalid_value",
            Some(param),
        )
        .await;
    }
    let response = app
        .client
        .get(app.url("/v1/organization/projects?limit=0"))
        .bearer_auth(&root)
        .send()
        .await
        .unwrap();
    expect_error(
        response,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("limit"),
    )
    .await;

    // Delete revokes: the next request with the key is refused.
    let (status, deleted) = admin(
        &app,
        &root,
        Method::DELETE,
        &format!("/projects/{team}/api_keys/{key_id}"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        deleted,
        json!({"object": "organization.project.api_key.deleted", "id": key_id, "deleted": true})
    );
    assert_eq!(app.chat(&secret, &body("svc", "hi")).await.status(), 401);
    let (_, read) = admin(
        &app,
        &root,
        Method::GET,
        &format!("/projects/{team}/api_keys/{key_id}"),
        None,
    )
    .await;
    assert_eq!(read["state"], "revoked");

    // Unknown ids are 404s; other keys are 403s; no key is a 401.
    let (status, body) = admin(&app, &root, Method::GET, "/projects/proj_nope", None).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (404, json!("not_found"))
    );
    let all = app.create_key().await;
    let response = app
        .client
        .get(app.url("/v1/organization/projects"))
        .bearer_auth(&all)
        .send()
        .await
        .unwrap();
    expect_refused(
        response,
        "/v1/organization/projects",
        Permission::ManagementRead,
    )
    .await;
    let response = app
        .client
        .get(app.url("/v1/organization/projects"))
        .send()
        .await
        .unwrap();
    expect_error(
        response,
        401,
        "invalid_request_error",
        "invalid_api_key",
        None,
    )
    .await;
}

async fn a_project_owners_admin_key_cannot_reach_another_project_by_guessed_ids(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let root = app
        .create_scoped_key(
            None,
            scope(KeyKind::Admin(svc_core::AdminReach::Organization)),
        )
        .await;
    let new_project = |name: &'static str| {
        let app = &app;
        let root = root.clone();
        async move {
            let (status, project) = admin(
                app,
                &root,
                Method::POST,
                "/projects",
                Some(json!({ "name": name })),
            )
            .await;
            assert_eq!(status, 200);
            ProjectId(project["id"].as_str().unwrap().to_owned())
        }
    };
    let a = new_project("A").await;
    let b = new_project("B").await;
    // Pat owns project A (and is no organization owner); Sam is a member.
    // The operator sets that up, and makes each an admin key in A.
    let pat = app
        .create_user("pat@example.com", "password123", false)
        .await;
    let sam = app
        .create_user("sam@example.com", "password123", false)
        .await;
    for (user, role) in [(&pat, "owner"), (&sam, "member")] {
        let (status, member) = admin(
            &app,
            &root,
            Method::POST,
            &format!("/projects/{}/users", a.0),
            Some(json!({"user_id": user.id.0, "role": role})),
        )
        .await;
        assert_eq!(status, 200, "{member}");
        assert_eq!(member["object"], "organization.project.user");
        assert_eq!(member["email"], user.email.as_str());
        assert_eq!(member["role"], role);
    }
    let (_, users) = admin(
        &app,
        &root,
        Method::GET,
        &format!("/projects/{}/users", a.0),
        None,
    )
    .await;
    assert_eq!(users["data"].as_array().unwrap().len(), 2, "{users}");
    // Each makes an admin key for A on the project's page (nobody may make
    // one for another account).
    let admin_key_for = |user: &UserId| {
        let scope = KeyScope {
            project_id: Some(a.clone()),
            kind: KeyKind::Admin(svc_core::AdminReach::Project),
            ..KeyScope::default()
        };
        let (app, user) = (&app, user.clone());
        async move { app.create_scoped_key(Some(&user), scope).await }
    };
    let pat_admin = admin_key_for(&pat.id).await;
    let sam_admin = admin_key_for(&sam.id).await;
    // A key for anyone else, member or not, is refused, even to the
    // operator's key.
    let outsider = app
        .create_user("out@example.com", "password123", false)
        .await;
    for user in [&outsider.id, &sam.id] {
        let response = app
            .client
            .post(app.url(&format!("/v1/organization/projects/{}/api_keys", a.0)))
            .bearer_auth(&root)
            .json(&json!({"name": "x", "user_id": user.0}))
            .send()
            .await
            .unwrap();
        expect_error(
            response,
            403,
            "invalid_request_error",
            "insufficient_permissions",
            Some("user_id"),
        )
        .await;
    }
    // Project B's key, made by the operator.
    let (_, b_key) = admin(
        &app,
        &root,
        Method::POST,
        &format!("/projects/{}/api_keys", b.0),
        Some(json!({"name": "b's"})),
    )
    .await;
    let b_secret = b_key["value"].as_str().unwrap().to_owned();
    let b_id = b_key["id"].as_str().unwrap().to_owned();

    // Pat sees project A only.
    let (status, list) = admin(&app, &pat_admin, Method::GET, "/projects", None).await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [a.0.as_str()]);
    let (status, _) = admin(
        &app,
        &pat_admin,
        Method::GET,
        &format!("/projects/{}", a.0),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let (status, keys) = admin(
        &app,
        &pat_admin,
        Method::GET,
        &format!("/projects/{}/api_keys", a.0),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(keys["data"].as_array().unwrap().len(), 2, "{keys}");
    assert!(!keys.to_string().contains(&b_id));

    // Every way at project B, or at B's key through A, is a 404 as for an
    // id that does not exist, with the same message shape.
    let not_found = |status: u16, body: &Value, what: &str| {
        assert_eq!(status, 404, "{what}: {body}");
        assert_eq!(body["error"]["code"], "not_found", "{what}: {body}");
        assert_eq!(
            body["error"]["type"], "invalid_request_error",
            "{what}: {body}"
        );
    };
    let attempts = [
        (Method::GET, format!("/projects/{}", b.0), None),
        (Method::GET, format!("/projects/{}/api_keys", b.0), None),
        (
            Method::POST,
            format!("/projects/{}/api_keys", b.0),
            Some(json!({"name": "sneaky"})),
        ),
        (
            Method::GET,
            format!("/projects/{}/api_keys/{b_id}", b.0),
            None,
        ),
        (
            Method::DELETE,
            format!("/projects/{}/api_keys/{b_id}", b.0),
            None,
        ),
        (
            Method::GET,
            format!("/projects/{}/api_keys/{b_id}", a.0),
            None,
        ),
        (
            Method::DELETE,
            format!("/projects/{}/api_keys/{b_id}", a.0),
            None,
        ),
        (Method::GET, "/projects/proj_default".to_owned(), None),
        (Method::GET, format!("/projects/{}/users", b.0), None),
        (
            Method::POST,
            format!("/projects/{}/users", b.0),
            Some(json!({"user_id": pat.id.0, "role": "owner"})),
        ),
        (
            Method::DELETE,
            format!("/projects/{}/users/{}", b.0, pat.id.0),
            None,
        ),
    ];
    for (method, path, json) in attempts {
        let what = format!("{method} {path}");
        let (status, body) = admin(&app, &pat_admin, method.clone(), &path, json.clone()).await;
        not_found(status, &body, &what);
        // The same as for ids that do not exist at all.
        let ghost = path
            .replace(&b.0, "proj_0000000000000000")
            .replace(&b_id, "key_0000000000000000");
        let (ghost_status, ghost_body) = admin(&app, &pat_admin, method, &ghost, json).await;
        not_found(ghost_status, &ghost_body, &ghost);
        let (message, ghost_message) = (
            body["error"]["message"].as_str().unwrap(),
            ghost_body["error"]["message"].as_str().unwrap(),
        );
        assert_eq!(
            message.replace(&b.0, "ID").replace(&b_id, "ID"),
            ghost_message
                .replace("proj_0000000000000000", "ID")
                .replace("key_0000000000000000", "ID"),
            "{what}"
        );
    }
    // B's key still works, and B still has only its own key.
    assert_eq!(app.chat(&b_secret, &body("svc", "hi")).await.status(), 200);
    let (_, b_keys) = admin(
        &app,
        &root,
        Method::GET,
        &format!("/projects/{}/api_keys", b.0),
        None,
    )
    .await;
    assert_eq!(b_keys["data"].as_array().unwrap().len(), 1);

    // Pat cannot change even Pat's own project (nor widen its models).
    let (status, body) = admin(
        &app,
        &pat_admin,
        Method::POST,
        &format!("/projects/{}", a.0),
        Some(json!({"allowed_models": null})),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (403, json!("insufficient_permissions"))
    );
    let (status, body) = admin(
        &app,
        &pat_admin,
        Method::POST,
        &format!("/projects/{}", b.0),
        Some(json!({"name": "mine now"})),
    )
    .await;
    not_found(status, &body, "modify B");

    // Pat cannot make projects, nor read every project's usage.
    let (status, body) = admin(
        &app,
        &pat_admin,
        Method::POST,
        "/projects",
        Some(json!({"name": "mine"})),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (403, json!("insufficient_permissions"))
    );
    let response = app
        .client
        .get(app.url("/v1/admin/usage"))
        .bearer_auth(&pat_admin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);

    // A member's admin key reaches nothing.
    let (status, body) = admin(&app, &sam_admin, Method::GET, "/projects", None).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (403, json!("insufficient_permissions"))
    );
    // The operator's reaches both.
    let (_, all) = admin(&app, &root, Method::GET, "/projects", None).await;
    assert_eq!(all["data"].as_array().unwrap().len(), 3);

    // Demoted to member, Pat's admin key reaches nothing from its next
    // request on.
    let (status, _) = admin(
        &app,
        &root,
        Method::POST,
        &format!("/projects/{}/users", a.0),
        Some(json!({"user_id": pat.id.0, "role": "member"})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = admin(&app, &pat_admin, Method::GET, "/projects", None).await;
    assert_eq!(status, 403);
}

async fn stored_responses_stay_in_their_project(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let user = app
        .create_user("ada@example.com", "password123", false)
        .await;
    let project = app.create_project("other", ModelAccess::any()).await;
    // The same account (and the operator) in two projects.
    for owner in [Some(&user.id), None] {
        let here = app.create_scoped_key(owner, KeyScope::default()).await;
        let there = app
            .create_scoped_key(
                owner,
                KeyScope {
                    project_id: Some(project.id.clone()),
                    ..KeyScope::default()
                },
            )
            .await;
        let response: Value = app
            .client
            .post(app.url("/v1/responses"))
            .bearer_auth(&here)
            .json(&json!({"model": "svc", "input": "hi"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = response["id"].as_str().unwrap();
        let read = |key: &str| {
            app.client
                .get(app.url(&format!("/v1/responses/{id}")))
                .bearer_auth(key)
                .send()
        };
        assert_eq!(read(&here).await.unwrap().status(), 200);
        let response = read(&there).await.unwrap();
        expect_error(response, 404, "invalid_request_error", "not_found", None).await;
        let response = app
            .client
            .post(app.url("/v1/responses"))
            .bearer_auth(&there)
            .json(&json!({"model": "svc", "input": "more", "previous_response_id": id}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404);
        let response = app
            .client
            .delete(app.url(&format!("/v1/responses/{id}")))
            .bearer_auth(&there)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404);
        assert_eq!(read(&here).await.unwrap().status(), 200);
    }
}

async fn members_are_removed_through_the_admin_api_never_the_last_owner(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let root = app
        .create_scoped_key(
            None,
            scope(KeyKind::Admin(svc_core::AdminReach::Organization)),
        )
        .await;
    let team = app.create_project("team", ModelAccess::default()).await;
    let users = format!("/projects/{}/users", team.id.0);
    let owner = app
        .create_user("olive@example.com", "password123", false)
        .await;
    let member = app
        .create_user("mo@example.com", "password123", false)
        .await;
    for (user, role) in [(&owner, "owner"), (&member, "member")] {
        let body = json!({"user_id": user.id.0, "role": role});
        let (status, added) = admin(&app, &root, Method::POST, &users, Some(body)).await;
        assert_eq!(status, 200, "{added}");
    }
    // The member's key stays as it is.
    let kept = app
        .create_scoped_key(Some(&member.id), scope(KeyKind::All))
        .await;
    let path = format!("{users}/{}", member.id.0);
    let (status, removed) = admin(&app, &root, Method::DELETE, &path, None).await;
    assert_eq!(status, 200, "{removed}");
    assert_eq!(
        removed,
        json!({"object": "organization.project.user.deleted", "id": member.id.0, "deleted": true})
    );
    let (_, listed) = admin(&app, &root, Method::GET, &users, None).await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(app.chat(&kept, &body("svc", "hi")).await.status(), 200);
    // Again: not a member any more.
    let (status, again) = admin(&app, &root, Method::DELETE, &path, None).await;
    assert_eq!(status, 404, "{again}");
    assert_eq!(again["error"]["param"], "user_id");
    // The last owner stays.
    let path = format!("{users}/{}", owner.id.0);
    let (status, refused) = admin(&app, &root, Method::DELETE, &path, None).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "user_id");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("last owner"),
        "{refused}"
    );
    // Audited once, in the project.
    let (_, log) = admin(
        &app,
        &root,
        Method::GET,
        "/audit_logs?event_types[]=user.deleted",
        None,
    )
    .await;
    let entries = log["data"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{log}");
    assert_eq!(entries[0]["project"]["id"], team.id.0.as_str(), "{log}");
}

/// The audit entries of `kind`, newest first.
async fn audited(app: &TestApp, key: &str, kind: &str) -> Vec<Value> {
    let path = format!("/audit_logs?event_types[]={kind}&limit=100");
    let (status, list) = admin(app, key, Method::GET, &path, None).await;
    assert_eq!(status, 200, "{list}");
    list["data"].as_array().unwrap().clone()
}

async fn mcp_server_lists_are_set_like_model_lists_and_audited(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let root = app.create_admin_key().await;
    let (status, project) = admin(
        &app,
        &root,
        Method::POST,
        "/projects",
        Some(json!({"name": "tools", "allowed_mcp_servers": ["docs", "git*"]})),
    )
    .await;
    assert_eq!(status, 200, "{project}");
    assert_eq!(project["allowed_mcp_servers"], json!(["docs", "git*"]));
    let team = project["id"].as_str().unwrap().to_owned();
    let (_, open) = admin(&app, &root, Method::GET, "/projects/proj_default", None).await;
    assert_eq!(open["allowed_mcp_servers"], Value::Null, "every server");

    // A key of it with a list of its own; one without has none (null).
    let (status, key) = admin(
        &app,
        &root,
        Method::POST,
        &format!("/projects/{team}/api_keys"),
        Some(json!({"name": "agent", "allowed_mcp_servers": ["github", "wiki"]})),
    )
    .await;
    assert_eq!(status, 200, "{key}");
    assert_eq!(key["allowed_mcp_servers"], json!(["github", "wiki"]));
    let key_id = key["id"].as_str().unwrap().to_owned();
    let key_path = format!("/projects/{team}/api_keys/{key_id}");
    let record = |app: &TestApp| {
        let id = svc_core::KeyId(key_id.clone());
        let keys = app.keys.clone();
        async move { keys.get(&id).await.unwrap().unwrap() }
    };
    let stored = record(&app).await;
    assert!(stored.may_use_mcp_server("github"), "both lists allow it");
    assert!(!stored.may_use_mcp_server("wiki"), "its project does not");
    assert!(!stored.may_use_mcp_server("docs"), "it does not");

    // The project's list changes alone, and back to every server.
    let (status, changed) = admin(
        &app,
        &root,
        Method::POST,
        &format!("/projects/{team}"),
        Some(json!({"allowed_mcp_servers": ["wiki"]})),
    )
    .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["allowed_mcp_servers"], json!(["wiki"]));
    assert!(record(&app).await.may_use_mcp_server("wiki"));
    let (_, renamed) = admin(
        &app,
        &root,
        Method::POST,
        &format!("/projects/{team}"),
        Some(json!({"name": "tools 2"})),
    )
    .await;
    assert_eq!(renamed["allowed_mcp_servers"], json!(["wiki"]), "kept");
    let (_, opened) = admin(
        &app,
        &root,
        Method::POST,
        &format!("/projects/{team}"),
        Some(json!({"allowed_mcp_servers": null})),
    )
    .await;
    assert_eq!(opened["allowed_mcp_servers"], Value::Null);

    // The key's list changes alone: a budget change keeps it.
    let (status, narrowed) = admin(
        &app,
        &root,
        Method::POST,
        &key_path,
        Some(json!({"allowed_mcp_servers": []})),
    )
    .await;
    assert_eq!(status, 200, "{narrowed}");
    assert_eq!(narrowed["allowed_mcp_servers"], json!([]));
    assert!(!record(&app).await.may_use_mcp_server("github"), "none");
    let (_, budgeted) = admin(
        &app,
        &root,
        Method::POST,
        &key_path,
        Some(json!({"budget": {"tokens": 100, "period": "day"}})),
    )
    .await;
    assert_eq!(budgeted["allowed_mcp_servers"], json!([]));
    let (_, read) = admin(&app, &root, Method::GET, &key_path, None).await;
    assert_eq!(read["allowed_mcp_servers"], json!([]));

    // A bad list is a 400 naming the field, and nothing asked with it is
    // done.
    let long = "x".repeat(300);
    for (path, json) in [
        (
            "/projects".to_owned(),
            json!({"name": "p", "allowed_mcp_servers": [""]}),
        ),
        (
            format!("/projects/{team}"),
            json!({"allowed_mcp_servers": [long]}),
        ),
        (
            format!("/projects/{team}/api_keys"),
            json!({"name": "k", "allowed_mcp_servers": ["a\nb"]}),
        ),
        (
            key_path.clone(),
            json!({"budget": null, "allowed_mcp_servers": [""]}),
        ),
    ] {
        let response = app
            .client
            .post(app.url(&format!("/v1/organization{path}")))
            .bearer_auth(&root)
            .json(&json)
            .send()
            .await
            .unwrap();
        expect_error(
            response,
            400,
            "invalid_request_error",
            "invalid_value",
            Some("allowed_mcp_servers"),
        )
        .await;
    }
    let (_, read) = admin(&app, &root, Method::GET, &key_path, None).await;
    assert_eq!(read["budget"]["tokens"], 100, "the budget was not removed");

    // Each is audited as its models are.
    let created = audited(&app, &root, "project.created").await;
    assert_eq!(
        created[0]["project.created"]["data"]["allowed_mcp_servers"],
        json!(["docs", "git*"])
    );
    let updated = audited(&app, &root, "project.updated").await;
    let requested: Vec<&Value> = updated
        .iter()
        .map(|e| &e["project.updated"]["changes_requested"])
        .collect();
    assert_eq!(requested[2], &json!({"allowed_mcp_servers": ["wiki"]}));
    assert_eq!(requested[0], &json!({"allowed_mcp_servers": null}));
    let made = audited(&app, &root, "api_key.created").await;
    let made = made
        .iter()
        .find(|e| e["api_key.created"]["id"] == key_id.as_str())
        .unwrap();
    assert_eq!(
        made["api_key.created"]["data"]["allowed_mcp_servers"],
        json!(["github", "wiki"])
    );
    let key_updates: Vec<Value> = audited(&app, &root, "api_key.updated")
        .await
        .into_iter()
        .map(|e| e["api_key.updated"]["changes_requested"].clone())
        .collect();
    assert_eq!(
        key_updates,
        [
            json!({"budget": {"tokens": 100, "period": "day"}}),
            json!({"allowed_mcp_servers": []})
        ]
    );
}
