//! Scale-out, end to end with real processes: two `svc serve` replicas
//! sharing PostgreSQL and Redis, in front of two more `svc serve`
//! processes as their upstream engines.
//!
//! Keys, revocation, rate limits and device codes cross replicas; killing
//! one upstream loses no request that had not yet sent the client a byte.

// Serves models from GGUF files: needs the embedded engine.
#![cfg(feature = "embedded")]
#![expect(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use svc_core::store::KeyStore;
use svc_core::{KeyId, KeyLimits};
use svc_engine_llama::testing::TinyModel;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Browser, ServeProcess};

const SVC: &str = env!("CARGO_BIN_EXE_svc");

fn svc(args: &[&str]) -> String {
    let output = Command::new(SVC)
        .args(args)
        .env("SVC_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "svc {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

fn serve(args: &[&str], env: &[(&str, &str)]) -> ServeProcess {
    let args = [&["--bind", "127.0.0.1:0"], args].concat();
    ServeProcess::start(SVC, &args, env, Duration::from_secs(30))
}

fn chat_body(stream: bool) -> Value {
    json!({
        "model": "svc",
        "stream": stream,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
    })
}

async fn models(base: &str, key: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("{base}/v1/models"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn chat(base: &str, key: &str) -> u16 {
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&chat_body(false))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    response.bytes().await.unwrap();
    status
}

/// How a streamed request ended: finished, or failed after or before the
/// client got its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Done,
    FailedAfterBytes,
    FailedBeforeBytes,
}

async fn stream(client: &reqwest::Client, base: &str, key: &str) -> Outcome {
    let response = match client
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&chat_body(true))
        .send()
        .await
    {
        Ok(r) if r.status().is_success() => r,
        _ => return Outcome::FailedBeforeBytes,
    };
    let mut body = response.bytes_stream();
    let mut text = Vec::new();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(bytes) => text.extend_from_slice(&bytes),
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&text);
    if text.ends_with("data: [DONE]\n\n") {
        Outcome::Done
    } else if text.is_empty() {
        Outcome::FailedBeforeBytes
    } else {
        Outcome::FailedAfterBytes
    }
}

#[tokio::test]
async fn replicas_share_keys_limits_and_device_codes_and_survive_an_upstream_dying() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    TinyModel::hello().write(&model).unwrap();
    let model = model.to_str().unwrap();

    // Two upstream svc processes, each with its own store and key.
    let mut upstreams = Vec::new();
    let mut upstream_keys = Vec::new();
    for i in 0..2 {
        let data = dir.path().join(format!("upstream-{i}"));
        let data = data.to_str().unwrap().to_owned();
        upstream_keys.push(svc(&[
            "keys",
            "create",
            "--name",
            "replicas",
            "--data-dir",
            &data,
        ]));
        upstreams.push(Some(serve(&["--data-dir", &data, "--model", model], &[])));
    }
    let endpoints: Vec<String> = upstreams
        .iter()
        .enumerate()
        .map(|(i, u)| {
            format!(
                "{{ base_url = \"{}/v1\", model = \"svc\", api_key_env = \"UPSTREAM_KEY_{i}\" }}",
                u.as_ref().unwrap().base_url
            )
        })
        .collect();
    let config = dir.path().join("replica.toml");
    let table = |id: &str| {
        format!(
            "[models.{id}]\nhealth_interval = \"1s\"\nfirst_byte_timeout = \"10s\"\nupstreams = [{}]\n",
            endpoints.join(", ")
        )
    };
    std::fs::write(
        &config,
        format!("{}{}", table("svc"), table("svc-thinking")),
    )
    .unwrap();

    // Two replicas on one PostgreSQL schema and one Redis.
    let schema = TestSchema::create(&postgres_url()).await.unwrap();
    let db = schema.url().to_owned();
    let replica_args = [
        "--config",
        config.to_str().unwrap(),
        "--database-url",
        &db,
        "--redis-url",
        "redis://127.0.0.1:6379",
        "--device-interval",
        "1",
    ];
    let env = [
        ("UPSTREAM_KEY_0", upstream_keys[0].as_str()),
        ("UPSTREAM_KEY_1", upstream_keys[1].as_str()),
    ];
    let replica_a = serve(&replica_args, &env);
    let replica_b = serve(&replica_args, &env);
    let (a, b) = (replica_a.base_url.clone(), replica_b.base_url.clone());

    // A key made against the shared store works on both; revoked through
    // one (the client's logout), it is refused by the other as soon as
    // PostgreSQL's notification reaches it.
    let key = svc(&["keys", "create", "--name", "shared", "--database-url", &db]);
    assert_eq!(models(&a, &key).await, 200);
    assert_eq!(chat(&b, &key).await, 200);
    let revoked = reqwest::Client::new()
        .delete(format!("{a}/v1/auth/key"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(3);
    while models(&b, &key).await != 401 {
        assert!(Instant::now() < deadline, "B still accepts a revoked key");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }

    // A rate limit of 3 per minute is one budget across both replicas.
    let store = schema.connect().await.unwrap();
    let limited = svc(&["keys", "create", "--name", "limited", "--database-url", &db]);
    let keys = store.list_keys(None).await.unwrap();
    let id = keys
        .iter()
        .find(|k| k.name == "limited")
        .unwrap()
        .id
        .clone();
    assert!(
        store
            .set_key_limits(
                &KeyId(id.0.clone()),
                KeyLimits {
                    requests_per_minute: Some(3),
                    tokens_per_minute: None,
                }
            )
            .await
            .unwrap()
    );
    let second = chrono::Utc::now().timestamp_millis().rem_euclid(60_000);
    if second > 50_000 {
        tokio::time::sleep(Duration::from_millis((61_000 - second) as u64)).await;
    }
    assert_eq!(chat(&a, &limited).await, 200);
    assert_eq!(chat(&b, &limited).await, 200);
    assert_eq!(chat(&a, &limited).await, 200);
    assert_eq!(chat(&b, &limited).await, 429);

    // A device code started on A is approved on B's dashboard and redeemed through A.
    let mut create = Command::new(SVC)
        .args([
            "users",
            "create",
            "--email",
            "ada@example.com",
            "--database-url",
            &db,
        ])
        .env("SVC_LOG", "warn")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    create
        .stdin
        .take()
        .unwrap()
        .write_all(b"password123\n")
        .unwrap();
    assert!(create.wait().unwrap().success());
    let client = reqwest::Client::new();
    let codes: Value = client
        .post(format!("{a}/v1/auth/device/code"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let browser = Browser::new(&b);
    browser.sign_in("ada@example.com", "password123").await;
    // The link fills the code in; submitting the form looks it up.
    let user_code = codes["user_code"].as_str().unwrap();
    let confirm = browser.enter_device_code(user_code).await;
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    let done = browser
        .post(
            "/dashboard/device/decide",
            &[
                ("csrf", &confirm.csrf()),
                ("id", &confirm.input_value("id").unwrap()),
                ("decision", "approve"),
            ],
        )
        .await;
    assert!(done.body.contains("Device approved"));
    let token: Value = client
        .post(format!("{a}/v1/auth/device/token"))
        .json(&json!({"device_code": codes["device_code"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(token["status"], "approved", "{token}");
    let device_key = token["access_token"].as_str().unwrap().to_owned();
    assert_eq!(models(&b, &device_key).await, 200);

    // Streams through both replicas while one upstream is killed: every
    // request that had not yet sent the client a byte still succeeds.
    let work_key = Arc::new(svc(&[
        "keys",
        "create",
        "--name",
        "load",
        "--database-url",
        &db,
    ]));
    let killed = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..6 {
        let base = if w % 2 == 0 { a.clone() } else { b.clone() };
        let (key, killed) = (work_key.clone(), killed.clone());
        workers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut outcomes = Vec::new();
            // Until 3 s have passed and this worker made a request after the kill.
            while started.elapsed() < Duration::from_secs(3)
                || !outcomes.iter().any(|(after, _)| *after)
            {
                let after = killed.load(Ordering::SeqCst);
                outcomes.push((after, stream(&client, &base, &key).await));
            }
            outcomes
        }));
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    drop(upstreams[0].take());
    killed.store(true, Ordering::SeqCst);
    let mut outcomes = Vec::new();
    for w in workers {
        outcomes.extend(w.await.unwrap());
    }
    let lost = outcomes
        .iter()
        .filter(|(_, o)| *o == Outcome::FailedBeforeBytes)
        .count();
    assert_eq!(lost, 0, "requests lost without a byte sent: {outcomes:?}");
    let after: Vec<_> = outcomes.iter().filter(|(after, _)| *after).collect();
    assert!(after.len() >= 6, "{outcomes:?}");
    assert!(
        after.iter().all(|(_, o)| *o == Outcome::Done),
        "requests after the kill go to the live upstream: {outcomes:?}"
    );

    drop((replica_a, replica_b, store));
    schema.remove().await.unwrap();
}
