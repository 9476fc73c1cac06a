//! The first admin key: `svc keys create --kind admin` against the data
//! directory, then the admin API with it; and keys restricted to scopes
//! and models from the command line.

#![expect(
    clippy::unwrap_used,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::process::{Command, Output};

use serde_json::{Value, json};
use svc_server::ServerConfig;
use svc_store::SqlStore;
use svc_test_support::{Database, TestApp};

const SVC: &str = env!("CARGO_BIN_EXE_svc");

fn svc(args: &[&str]) -> Output {
    Command::new(SVC)
        .args(args)
        .env("SVC_LOG", "warn")
        .output()
        .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn created(output: Output) -> String {
    assert!(output.status.success(), "{}", stderr(&output));
    let key = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    assert!(key.starts_with("sk-svc-") && key.len() == 47, "{key}");
    key
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_admin_key_comes_from_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let admin = created(svc(&[
        "keys",
        "create",
        "--name",
        "root",
        "--kind",
        "admin",
        "--data-dir",
        data,
    ]));
    let reader = created(svc(&[
        "keys",
        "create",
        "--name",
        "reader",
        "--kind",
        "restricted",
        "--permission",
        "api.model.read",
        "--model",
        "svc*",
        "--data-dir",
        data,
    ]));
    let list = svc(&["keys", "list", "--data-dir", data]);
    let list = String::from_utf8(list.stdout).unwrap();
    let root_line = list.lines().find(|l| l.contains(" root ")).unwrap();
    assert!(
        root_line.contains("admin") && root_line.contains("proj_default"),
        "{list}"
    );

    // Refused: an unknown scope, management scopes, scopes without
    // `restricted`, an unknown project. Nothing is printed on stdout.
    for bad in [
        &["--kind", "restricted", "--permission", "root"][..],
        &[
            "--kind",
            "restricted",
            "--permission",
            "api.management.write",
        ],
        &["--permission", "model.request"],
        &["--project", "proj_nope"],
    ] {
        let output = svc(&[&["keys", "create", "--name", "x", "--data-dir", data], bad].concat());
        assert!(!output.status.success(), "{bad:?}");
        assert!(output.stdout.is_empty(), "{bad:?}");
    }

    let url = SqlStore::data_dir_url(dir.path()).unwrap();
    let app = TestApp::spawn_with(Database::Url(url), ServerConfig::default()).await;
    let get = |path: &str, key: &str| app.client.get(app.url(path)).bearer_auth(key).send();
    let projects = get("/v1/organization/projects", &admin).await.unwrap();
    assert_eq!(projects.status(), 200);
    let projects: Value = projects.json().await.unwrap();
    assert_eq!(projects["data"][0]["id"], "proj_default");
    // The admin key makes projects and keys; it cannot chat.
    let response = app
        .client
        .post(app.url("/v1/organization/projects"))
        .bearer_auth(&admin)
        .json(&json!({"name": "team"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let chat = app
        .chat(
            &admin,
            &json!({"model": "svc", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(chat.status(), 403);

    // The restricted key lists its models and nothing else.
    let models: Value = get("/v1/models", &reader)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["svc", "svc-thinking"]);
    let chat = app
        .chat(
            &reader,
            &json!({"model": "svc", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(chat.status(), 403);
    let body: Value = chat.json().await.unwrap();
    assert_eq!(body["error"]["code"], "insufficient_permissions");
}

#[tokio::test(flavor = "multi_thread")]
async fn svc_keys_rotate_prints_the_new_key_and_ends_the_old_one_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let old = created(svc(&[
        "keys",
        "create",
        "--name",
        "ci",
        "--kind",
        "restricted",
        "--permission",
        "api.model.read",
        "--data-dir",
        data,
    ]));
    let list = String::from_utf8(svc(&["keys", "list", "--data-dir", data]).stdout).unwrap();
    let id = list
        .lines()
        .find(|l| l.contains(" ci "))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();

    // Out of range, or an unknown key: refused, nothing on stdout.
    for bad in [&["--grace", "31d"][..], &["--grace", "soon"]] {
        let output = svc(&[&["keys", "rotate", &id, "--data-dir", data], bad].concat());
        assert!(!output.status.success(), "{bad:?}");
        assert!(output.stdout.is_empty(), "{bad:?}");
    }
    let output = svc(&["keys", "rotate", "key_0000000000000000", "--data-dir", data]);
    assert!(!output.status.success() && output.stdout.is_empty());

    let rotated = svc(&["keys", "rotate", &id, "--grace", "0", "--data-dir", data]);
    let message = stderr(&rotated);
    let new = created(rotated);
    assert_ne!(new, old);
    assert!(message.contains(&id), "{message}");

    let url = SqlStore::data_dir_url(dir.path()).unwrap();
    let app = TestApp::spawn_with(Database::Url(url), ServerConfig::default()).await;
    let models = |key: String| {
        let request = app.client.get(app.url("/v1/models")).bearer_auth(key);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(models(old.clone()).await, 401, "no grace: refused at once");
    assert_eq!(models(new.clone()).await, 200, "the same scope");
    // Rotating it again is refused: it is no longer active.
    let again = svc(&["keys", "rotate", &id, "--data-dir", data]);
    assert!(!again.status.success());

    // Audited as the operator's, without the secrets.
    use svc_core::AuditStore;
    let entries = app
        .store
        .list_audit(&svc_core::AuditQuery {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let types: Vec<&str> = entries.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(types, ["api_key.rotated", "api_key.created"]);
    assert_eq!(
        entries[0].actor,
        json!({"type": "operator", "operator": {}})
    );
    let text = format!("{entries:?}");
    assert!(!text.contains(&old) && !text.contains(&new));
}
