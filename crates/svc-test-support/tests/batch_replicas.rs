//! A batch shared by two replicas on one PostgreSQL (issue 34): 2,000 lines
//! created on one, which is killed with SIGKILL midway; the other takes up
//! its lines once their leases run out, and every line is answered exactly
//! once, by its `custom_id`.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed check fails the test"
)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use svc_store::testing::{TestSchema, postgres_url};

const LINES: usize = 2_000;

struct Replica {
    child: Child,
    url: String,
    key: String,
}

impl Replica {
    fn start(database: &str, files: &std::path::Path) -> Replica {
        let mut child = Command::new(env!("CARGO_BIN_EXE_svc-fake-server"))
            .args(["--bind", "127.0.0.1:0", "--database-url", database])
            .args(["--files-dir", files.to_str().unwrap()])
            // Leases of 2 s: the killed replica's lines are taken up soon.
            .args(["--batch-lease", "2", "--batch-concurrency", "4"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start svc-fake-server");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut fields = BTreeMap::new();
        while fields.len() < 2 {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "the server ended");
            if let Some((k, v)) = line.trim().split_once(' ') {
                fields.insert(k.to_owned(), v.to_owned());
            }
        }
        // Keeps draining stdout so the server never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Replica {
            child,
            url: fields["url"].clone(),
            key: fields["key"].clone(),
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn batch(client: &reqwest::Client, replica: &Replica, key: &str, id: &str) -> Value {
    client
        .get(format!("{}/v1/batches/{id}", replica.url))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_batch_survives_the_kill_of_a_replica_and_answers_each_line_once() {
    let schema = TestSchema::create(&postgres_url()).await.unwrap();
    let files = tempfile::tempdir().unwrap();
    let mut first = Replica::start(schema.url(), files.path());
    let second = Replica::start(schema.url(), files.path());
    let client = reqwest::Client::new();

    let text: String = (0..LINES)
        .map(|i| {
            json!({"custom_id": format!("line-{i}"), "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "svc", "messages": [{"role": "user", "content": format!("number {i}")}]}})
            .to_string()
                + "\n"
        })
        .collect();
    let boundary = "replicas";
    let form = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\r\n{text}\r\n--{boundary}--\r\n"
    );
    let file: Value = client
        .post(format!("{}/v1/files", first.url))
        .bearer_auth(&first.key)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let created: Value = client
        .post(format!("{}/v1/batches", first.url))
        .bearer_auth(&first.key)
        .json(&json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().expect("a batch").to_owned();
    let key = first.key.clone();

    // Killed once a tenth of the lines are answered, with its own in flight.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let now = batch(&client, &second, &key, &id).await;
        if now["request_counts"]["completed"].as_u64().unwrap() >= (LINES / 10) as u64 {
            break;
        }
        assert!(Instant::now() < deadline, "no progress: {now}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let at_kill = batch(&client, &second, &key, &id).await;
    assert_eq!(at_kill["status"], "in_progress", "{at_kill}");

    let ended = loop {
        let now = batch(&client, &second, &key, &id).await;
        if now["status"] != "in_progress" && now["status"] != "finalizing" {
            break now;
        }
        assert!(Instant::now() < deadline, "the batch never ended: {now}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(ended["status"], "completed", "{ended}");
    assert_eq!(
        ended["request_counts"],
        json!({"total": LINES, "completed": LINES, "failed": 0})
    );
    assert_eq!(ended["error_file_id"], Value::Null);
    let output = client
        .get(format!(
            "{}/v1/files/{}/content",
            second.url,
            ended["output_file_id"].as_str().unwrap()
        ))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut seen = BTreeMap::new();
    for line in output.lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        let custom_id = line["custom_id"].as_str().unwrap().to_owned();
        let number = custom_id.trim_start_matches("line-");
        assert_eq!(
            line["response"]["body"]["choices"][0]["message"]["content"],
            format!("You said: number {number}")
        );
        *seen.entry(custom_id).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), LINES, "every line answered");
    assert!(seen.values().all(|n| *n == 1), "each once");
    drop(second);
    schema.remove().await.unwrap();
}
