//! Memory and store growth at a batch's ending (issue 43): a batch of
//! embedding lines whose answers are tens of MB is ended reading its
//! answers a page at a time, so the server's peak memory grows by much less
//! than its output file (before, the ending held every answer, and then
//! their join, at once: about 2 to 4 times the output). A test binary of
//! its own, so that no other test's memory is in the process's peak.
#![expect(
    clippy::unwrap_used,
    clippy::print_stderr,
    reason = "test code: a failed check fails the test, and its numbers go to its log"
)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Database, TestApp};

/// Lines in the batch; each answers 2,048 embeddings (about 190 kB).
const LINES: usize = 256;

/// A field of `/proc/self/status`, in bytes.
fn status(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap();
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kb * 1024
}

/// Sets the process's peak resident memory (`VmHWM`) to what it holds now.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// The bytes of the files under `dir`.
fn size_of(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                size_of(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

async fn send(app: &TestApp, key: &str, path: &str, body: Option<Value>) -> Value {
    let request = match &body {
        Some(body) => app.client.post(app.url(path)).json(body),
        None => app.client.get(app.url(path)),
    };
    let response = request.bearer_auth(key).send().await.unwrap();
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

/// Creates a batch of `file` and waits for its end: the batch.
async fn run(app: &TestApp, key: &str, file: &Value) -> Value {
    let started = Instant::now();
    let batch = send(
        app,
        key,
        "/v1/batches",
        Some(
            json!({"input_file_id": file["id"], "endpoint": "/v1/embeddings",
            "completion_window": "24h"}),
        ),
    )
    .await;
    let id = batch["id"].as_str().unwrap().to_owned();
    loop {
        let batch = send(app, key, &format!("/v1/batches/{id}"), None).await;
        if batch["status"] != "in_progress" && batch["status"] != "finalizing" {
            return batch;
        }
        assert!(started.elapsed() < Duration::from_secs(300), "{batch}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs two batches of embedding lines on `database`, and measures the
/// second: the server's peak memory, and the store's growth (SQLite's file
/// and the files, when the database is on disk here).
async fn end_a_large_batch(database: Database, label: &str) {
    let files = tempfile::tempdir().unwrap();
    let app = TestApp::spawn_with(
        database,
        ServerConfig {
            files_dir: Some(files.path().to_owned()),
            ..ServerConfig::default()
        },
    )
    .await;
    let sqlite_dir = app
        .database_url
        .strip_prefix("sqlite://")
        .and_then(|p| p.split('?').next())
        .and_then(|p| Path::new(p).parent().map(Path::to_owned));
    let key = app.create_key().await;
    let input: Vec<&str> = vec!["x"; 2048];
    let text: String = (0..LINES)
        .map(|i| {
            json!({"custom_id": format!("req-{i}"), "method": "POST", "url": "/v1/embeddings",
                "body": {"model": "fake-embed", "input": input}})
            .to_string()
                + "\n"
        })
        .collect();
    let boundary = "svc-memory-boundary";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\r\n{text}\r\n--{boundary}--\r\n"
    );
    let response = app
        .client
        .post(app.url("/v1/files"))
        .bearer_auth(&key)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let file: Value = response.json().await.unwrap();
    let stored_before = sqlite_dir.as_deref().map_or(0, size_of) + size_of(files.path());
    let store_size = || sqlite_dir.as_deref().map_or(0, size_of) + size_of(files.path());

    // A first batch warms the server up (its allocator's arenas, the
    // database's caches), so that the peak of the second is its own.
    let warm_up = Instant::now();
    run(&app, &key, &file).await;
    let warm_up = warm_up.elapsed();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let resident = status("VmRSS");
    reset_peak();
    let started = Instant::now();
    let batch = run(&app, &key, &file).await;
    let peak = status("VmHWM");
    assert_eq!(batch["status"], "completed", "{batch}");
    assert_eq!(batch["request_counts"]["completed"], LINES);
    let output = send(
        &app,
        &key,
        &format!("/v1/files/{}", batch["output_file_id"].as_str().unwrap()),
        None,
    )
    .await;
    let output_bytes = output["bytes"].as_u64().unwrap();
    let stored_after = store_size();
    let mb = |b: u64| b as f64 / 1e6;
    let grown = peak.saturating_sub(resident);
    eprintln!(
        "{label}: {LINES} lines, a {:.1} MB input file, a {:.1} MB output file in {:?} \
         (the first batch: {warm_up:?}); \
         resident {:.1} MB before the second batch, peak {:.1} MB to its end (+{:.1} MB, {:.2}x the output); \
         store (SQLite file and files) {:.1} MB -> {:.1} MB after two batches",
        mb(text.len() as u64),
        mb(output_bytes),
        started.elapsed(),
        mb(resident),
        mb(peak),
        mb(grown),
        grown as f64 / output_bytes as f64,
        mb(stored_before),
        mb(stored_after),
    );
    assert!(output_bytes > 40_000_000, "{output_bytes}");
    assert!(
        grown < output_bytes,
        "the ending held the answers at once: +{grown} bytes for {output_bytes} of output"
    );
}

/// One test, so that the two runs never share the process's peak.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_is_ended_in_bounded_memory() {
    end_a_large_batch(Database::Sqlite, "sqlite").await;
    let schema = TestSchema::create(&postgres_url()).await.unwrap();
    end_a_large_batch(Database::Url(schema.url().to_owned()), "postgres").await;
    schema.remove().await.unwrap();
}
