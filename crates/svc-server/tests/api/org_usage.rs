//! `GET /v1/organization/usage/completions`: day buckets in OpenAI's
//! shape, grouped and filtered by project, key and model, paged, refused
//! with the parameter at fault, and a project owner's admin key sees only
//! its project.

use std::time::Duration;

use serde_json::{Value, json};
use svc_core::{KeyKind, KeyScope, ModelAccess, ProjectRole, ProjectStore};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Database, TestApp};

on_both_databases!(usage_comes_in_day_buckets_grouped_and_filtered);

async fn get(app: &TestApp, key: &str, query: &str) -> reqwest::Response {
    app.client
        .get(app.url(&format!("/v1/organization/usage/completions?{query}")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
}

async fn page(app: &TestApp, key: &str, query: &str) -> Value {
    let response = get(app, key, query).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

fn chat(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

async fn usage_comes_in_day_buckets_grouped_and_filtered(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let admin = app.create_admin_key().await;
    let other = app.create_project("other", ModelAccess::any()).await;
    let here = app.create_key().await;
    let there = app
        .create_scoped_key(
            None,
            KeyScope {
                project_id: Some(other.id.clone()),
                ..KeyScope::default()
            },
        )
        .await;
    // The fake engine counts a token a word: "You said: a b" is 4 reply
    // tokens; the prompt "a b" is 3.
    for (key, model) in [
        (&here, "svc"),
        (&here, "svc"),
        (&here, "svc-thinking"),
        (&there, "svc"),
    ] {
        assert_eq!(app.chat(key, &chat(model, "a b")).await.status(), 200);
    }
    let today = svc_core::now() - svc_core::now().rem_euclid(86_400);
    let yesterday = today - 86_400;
    let query = format!("start_time={yesterday}&group_by[]=project_id&group_by[]=model");
    // Usage is written once a second.
    let mut body = page(&app, &admin, &query).await;
    for _ in 0..50 {
        if body["data"][1]["results"]
            .as_array()
            .is_some_and(|r| r.len() == 3)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        body = page(&app, &admin, &query).await;
    }
    assert_eq!(body["object"], "page");
    assert_eq!(body["has_more"], false);
    assert_eq!(body["next_page"], Value::Null);
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 2, "{body}");
    assert_eq!(data[0]["object"], "bucket");
    assert_eq!(data[0]["start_time"], yesterday);
    assert_eq!(data[0]["end_time"], today);
    assert_eq!(data[0]["results"], json!([]));
    let results = data[1]["results"].as_array().unwrap();
    let find = |project: &str, model: &str| {
        results
            .iter()
            .find(|r| r["project_id"] == project && r["model"] == model)
            .unwrap_or_else(|| panic!("no {project}/{model} in {body}"))
            .clone()
    };
    let svc = find("proj_default", "svc");
    assert_eq!(svc["object"], "organization.usage.completions.result");
    assert_eq!(
        (
            &svc["num_model_requests"],
            &svc["input_tokens"],
            &svc["output_tokens"]
        ),
        (&json!(2), &json!(6), &json!(8)),
        "{svc}"
    );
    assert_eq!(svc["api_key_id"], Value::Null, "not grouped by key");
    assert_eq!(
        find("proj_default", "svc-thinking")["num_model_requests"],
        1
    );
    assert_eq!(find(&other.id.0, "svc")["num_model_requests"], 1);

    // Not grouped: one result a day; filtered by model.
    let all = page(&app, &admin, &format!("start_time={today}")).await;
    assert_eq!(
        all["data"][0]["results"][0]["num_model_requests"], 4,
        "{all}"
    );
    let only = page(
        &app,
        &admin,
        &format!("start_time={today}&models[]=svc-thinking"),
    )
    .await;
    assert_eq!(
        only["data"][0]["results"][0]["num_model_requests"], 1,
        "{only}"
    );

    // One bucket a page: the cursor goes on from the next day.
    let first = page(&app, &admin, &format!("start_time={yesterday}&limit=1")).await;
    assert_eq!(first["has_more"], true);
    let next = first["next_page"].as_str().unwrap().to_owned();
    assert_eq!(next, today.to_string());
    let second = page(
        &app,
        &admin,
        &format!("start_time={yesterday}&limit=1&page={next}"),
    )
    .await;
    assert_eq!(second["data"][0]["start_time"], today);
    assert_eq!(second["has_more"], false);

    // A project owner's admin key sees its project's usage only.
    let owner = app
        .create_user("owner@example.com", "password123", false)
        .await;
    app.store
        .set_project_member(&other.id, &owner.id, ProjectRole::Owner, 1)
        .await
        .unwrap();
    let owners_admin = app
        .create_scoped_key(
            Some(&owner.id),
            KeyScope {
                project_id: Some(other.id.clone()),
                kind: KeyKind::Admin(svc_core::AdminReach::Organization),
                ..KeyScope::default()
            },
        )
        .await;
    let seen = page(
        &app,
        &owners_admin,
        &format!("start_time={today}&group_by[]=project_id"),
    )
    .await;
    let results = seen["data"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{seen}");
    assert_eq!(results[0]["project_id"], other.id.0.as_str());
    let elsewhere = page(
        &app,
        &owners_admin,
        &format!("start_time={today}&project_ids[]=proj_default"),
    )
    .await;
    assert_eq!(elsewhere["data"][0]["results"], json!([]));

    for (query, param) in [
        (String::new(), "start_time"),
        (
            format!("start_time={today}&bucket_width=1h"),
            "bucket_width",
        ),
        (format!("start_time={today}&group_by[]=user_id"), "group_by"),
        (format!("start_time={today}&limit=32"), "limit"),
        (
            format!("start_time={today}&end_time={yesterday}"),
            "end_time",
        ),
        (format!("start_time={today}&page=12"), "page"),
    ] {
        crate::expect_error(
            get(&app, &admin, &query).await,
            400,
            "invalid_request_error",
            "invalid_value",
            Some(param),
        )
        .await;
    }
    // Not for other keys.
    assert_eq!(
        get(&app, &here, &format!("start_time={today}"))
            .await
            .status(),
        403
    );
}
