//! `svc serve` as a gateway: every model on upstream endpoints, nothing
//! loaded or fetched. It works in every build; a build without the embedded
//! engine (`--no-default-features`) serves only such models and refuses,
//! at start, a model that would need a GGUF file.

#![expect(
    clippy::unwrap_used,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};
use svc_test_support::{FakeUpstream, ServeProcess};

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

/// A `[models.<id>]` table routed to `base_url`.
fn upstream_table(id: &str, base_url: &str) -> String {
    format!(
        "[models.{id}]\nhealth_interval = \"1s\"\nupstreams = [{{ base_url = \"{base_url}\", model = \"up\" }}]\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn serves_upstream_models_without_loading_or_fetching_one() {
    let upstream = FakeUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let data = data_dir.to_str().unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "{}{}",
            upstream_table("svc", &upstream.base_url),
            upstream_table("svc-thinking", &upstream.base_url)
        ),
    )
    .unwrap();
    let created = svc(&["keys", "create", "--name", "gw", "--data-dir", data]);
    assert!(created.status.success(), "{}", stderr(&created));
    let key = String::from_utf8(created.stdout).unwrap().trim().to_owned();

    let serve = ServeProcess::start(
        SVC,
        &[
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            data,
            "--bind",
            "127.0.0.1:0",
        ],
        &[],
        Duration::from_secs(30),
    );
    let client = reqwest::Client::new();
    let models: Value = client
        .get(format!("{}/v1/models", serve.base_url))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["svc", "svc-thinking"]);

    let reply = client
        .post(format!("{}/v1/chat/completions", serve.base_url))
        .bearer_auth(&key)
        .json(&json!({"model": "svc", "messages": [{"role": "user", "content": "hello there"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let reply: Value = reply.json().await.unwrap();
    assert_eq!(
        reply["choices"][0]["message"]["content"],
        "Echo: hello there"
    );
    assert_eq!(upstream.last_request().unwrap()["model"], "up");
    assert!(
        !data_dir.join("models").exists(),
        "a gateway fetched a model into {}",
        data_dir.display()
    );
}

/// Without the embedded engine, a model that would need it stops the start
/// with a message that names it and the two ways out, before any download.
#[cfg(not(feature = "embedded"))]
#[tokio::test(flavor = "multi_thread")]
async fn a_build_without_the_embedded_engine_refuses_models_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let data = data_dir.to_str().unwrap();
    let refused = |args: &[&str]| {
        let output = svc(&[
            &["serve", "--data-dir", data, "--bind", "127.0.0.1:0"],
            args,
        ]
        .concat());
        assert!(!output.status.success(), "svc serve {args:?} started");
        let text = stderr(&output);
        assert!(
            text.contains("this svc was built without the embedded engine; rebuild with default features or configure upstreams"),
            "{text}"
        );
        text
    };

    // The embedded defaults: both built-in ids need the default model.
    let text = refused(&[]);
    assert!(
        text.contains("models svc, svc-thinking need the embedded engine"),
        "{text}"
    );
    assert!(
        !data_dir.join("models").exists(),
        "the default model was fetched"
    );

    // `svc` on an upstream, `svc-thinking` still on the default model, and
    // one more id on a GGUF file.
    let upstream = FakeUpstream::start().await;
    let config = dir.path().join("mixed.toml");
    std::fs::write(
        &config,
        format!(
            "{}[models.local]\npath = \"/models/local.gguf\"\n",
            upstream_table("svc", &upstream.base_url)
        ),
    )
    .unwrap();
    let text = refused(&["--config", config.to_str().unwrap()]);
    assert!(
        text.contains("models svc-thinking, local need the embedded engine"),
        "{text}"
    );
}
