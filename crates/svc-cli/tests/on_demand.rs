//! Models loaded on demand (a `[models.<id>]` table's GGUF, unless
//! `preload = true`), through a real `svc serve` on tiny generated GGUFs:
//! the model loads on its first request and answers it (a prompt's count
//! does not load it, and counts as the loaded model would); a broken file
//! answers 503 naming itself while the other models keep answering; a
//! preloaded broken file stops `svc serve`. The pool's rules (one load,
//! waiting, eviction, keep_alive, unloads asked for) are tested with
//! scripted engines in `commands::serve::resident`.

// Serves models from GGUF files: needs the embedded engine.
#![cfg(feature = "embedded")]
#![expect(
    clippy::unwrap_used,
    reason = "test code: a failed check fails the test"
)]

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use svc_engine_llama::testing::TinyModel;
use svc_test_support::ServeProcess;

const SVC: &str = env!("CARGO_BIN_EXE_svc");

fn create_key(data_dir: &str, kind: &str) -> String {
    let output = Command::new(SVC)
        .args(["keys", "create", "--name", "t", "--kind", kind])
        .args(["--data-dir", data_dir])
        .env("SVC_LOG", "warn")
        .output()
        .unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_loads_on_its_first_request_and_a_broken_one_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (model, lazy, early, broken) = (
        dir.path().join("tiny.gguf"),
        dir.path().join("lazy.gguf"),
        dir.path().join("early.gguf"),
        dir.path().join("broken.gguf"),
    );
    TinyModel::hello().write(&model).unwrap();
    TinyModel::hello().write(&lazy).unwrap();
    TinyModel::hello().write(&early).unwrap();
    std::fs::write(&broken, b"not a GGUF file at all").unwrap();
    let config = dir.path().join("svc.toml");
    std::fs::write(
        &config,
        format!(
            "load_timeout = \"30s\"\n\
             [models.lazy]\npath = {lazy:?}\nkeep_alive = \"0\"\n\
             [models.early]\npath = {early:?}\npreload = true\n\
             [models.broken]\npath = {broken:?}\n"
        ),
    )
    .unwrap();
    let data_dir = dir.path().join("data");
    std::fs::create_dir_all(&data_dir).unwrap();
    let data_dir = data_dir.to_str().unwrap();
    let key = create_key(data_dir, "all");
    let admin = create_key(data_dir, "admin");
    let serve = ServeProcess::start(
        SVC,
        &[
            "--data-dir",
            data_dir,
            "--bind",
            "127.0.0.1:0",
            "--model",
            model.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(30),
    );
    let log = serve.log().join("\n");
    // On demand is the default; a preloaded one says what it holds; the
    // budget is the machine's when none is set.
    assert!(
        log.contains("lazy: ") && log.contains("lazy.gguf (loaded on demand)"),
        "{log}"
    );
    assert!(log.contains("broken.gguf (loaded on demand)"), "{log}");
    assert!(
        log.contains("early: ") && log.contains("MiB in memory)"),
        "{log}"
    );
    assert!(log.contains("models memory: "), "{log}");
    let base = serve.base_url.clone();
    let client = reqwest::Client::new();
    let listed: Value = client
        .get(format!("{base}/v1/models"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert!(ids.contains(&"lazy") && ids.contains(&"broken"), "{ids:?}");
    let model = |id: &'static str| {
        let (client, base, key) = (client.clone(), base.clone(), key.clone());
        async move {
            let reply = client
                .get(format!("{base}/v1/models/{id}"))
                .bearer_auth(&key)
                .send()
                .await
                .unwrap();
            reply.json::<Value>().await.unwrap()["residency"].clone()
        }
    };

    // Counting a prompt never loads its model: the one not loaded counts it
    // with its vocabulary alone, as the loaded one (the same file) does.
    let count = |model: &str| {
        client
            .post(format!("{base}/v1/messages/count_tokens"))
            .header("x-api-key", &key)
            .header("anthropic-version", "2023-06-01")
            .json(&json!({"model": model,
                "messages": [{"role": "user", "content": "hello there, how are you?"}]}))
            .send()
    };
    let unloaded = count("lazy").await.unwrap();
    assert_eq!(unloaded.status(), 200);
    let unloaded: Value = unloaded.json().await.unwrap();
    let loaded: Value = count("early").await.unwrap().json().await.unwrap();
    assert_eq!(unloaded["input_tokens"], loaded["input_tokens"], "{loaded}");
    assert!(unloaded["input_tokens"].as_u64().unwrap() > 5, "{unloaded}");
    assert_eq!(model("lazy").await["state"], "unloaded");

    let chat = |model: &str| {
        client
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(&key)
            .json(&json!({"model": model, "max_tokens": 4,
                "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    // Loaded by its first request (and, kept 0, again after it ends).
    for _ in 0..2 {
        let reply = chat("lazy").await.unwrap();
        assert_eq!(reply.status(), 200);
        let reply: Value = reply.json().await.unwrap();
        assert!(reply["choices"][0]["message"]["content"].is_string());
    }
    let refused = chat("broken").await.unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    let error: Value = refused.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("could not be loaded from") && message.contains("broken.gguf"),
        "{message}"
    );
    assert_eq!(chat("svc").await.unwrap().status(), 200);
    assert_eq!(chat("lazy").await.unwrap().status(), 200);
    let log = serve.log().join("\n");
    assert!(
        log.contains("model failed to load") && log.contains("broken.gguf"),
        "{log}"
    );

    // The preloaded model, as the list shows it, unloaded by the admin API
    // and loaded again by its next request; /metrics counts both loads.
    let early = model("early").await;
    assert_eq!(early["state"], "loaded", "{early}");
    assert_eq!(early["pinned"], true, "{early}");
    assert!(early["memory_bytes"].as_u64().unwrap() > 0, "{early}");
    assert_eq!(model("broken").await["state"], "unloaded");
    let unload = client
        .post(format!("{base}/v1/admin/models/unload"))
        .bearer_auth(&admin)
        .json(&json!({"model": "early"}))
        .send()
        .await
        .unwrap();
    assert_eq!(unload.status(), 200);
    let unload: Value = unload.json().await.unwrap();
    assert_eq!(unload["unload"], "unloaded", "{unload}");
    let early = model("early").await;
    assert_eq!(early["state"], "unloaded", "{early}");
    assert_eq!(early["memory_bytes"], 0, "{early}");
    assert_eq!(chat("early").await.unwrap().status(), 200);
    assert_eq!(model("early").await["state"], "loaded");
    let metrics = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "svc_model_loads_total{model=\"early\"} 2",
        "svc_model_unloads_total{model=\"early\"} 1",
        "svc_model_load_failures_total{model=\"broken\"} 1",
        "svc_model_loaded{model=\"early\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} not in\n{metrics}"
        );
    }
}

#[test]
fn a_preloaded_model_that_fails_to_load_stops_svc_serve_naming_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let (model, broken) = (dir.path().join("tiny.gguf"), dir.path().join("broken.gguf"));
    TinyModel::hello().write(&model).unwrap();
    std::fs::write(&broken, b"not a GGUF file at all").unwrap();
    let config = dir.path().join("svc.toml");
    std::fs::write(
        &config,
        format!("[models.broken]\npath = {broken:?}\npreload = true\n"),
    )
    .unwrap();
    let data_dir = dir.path().join("data");
    let mut serve = Command::new(SVC)
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(&data_dir)
        .arg("--model")
        .arg(&model)
        .arg("--config")
        .arg(&config)
        .env("SVC_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = serve.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            serve.kill().unwrap();
            serve.wait().unwrap();
            panic!("svc serve kept running with a preloaded model that cannot load");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = serve.wait_with_output().unwrap();
    assert!(!status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("could not be loaded from") && stderr.contains("broken.gguf"),
        "{stderr}"
    );
}
