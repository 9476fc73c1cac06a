//! Uploads (`POST /v1/files`) a hostile client cannot turn against the
//! server (issue 43): a body that never reaches its boundary, or whose
//! part's headers never end, is refused after a bounded number of bytes,
//! parsed off the async threads; filenames are bounded and counted toward
//! the quota; slow uploads of many keys do not keep another project's
//! upload waiting.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Database, TestApp};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::batches::{project_key, stalled_upload};

on_both_databases!(
    a_filename_past_255_bytes_is_refused_before_it_is_kept,
    a_files_name_counts_toward_the_quota,
    slow_uploads_of_many_keys_do_not_hold_back_another_projects,
    the_uploads_of_all_keys_share_a_bounded_room_on_disk,
    an_upload_past_the_projects_quota_is_refused_before_it_is_written,
);

const BOUNDARY: &str = "svc-upload-boundary-43";

/// A form of `purpose` and a file `filename` holding `text`.
fn form(filename: &str, text: &str) -> String {
    format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
         --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n{text}\r\n--{BOUNDARY}--\r\n"
    )
}

/// A JSONL file of `n` chat requests, each with `pad` bytes of content.
fn jsonl(n: usize, pad: usize) -> String {
    let content = "x".repeat(pad);
    (0..n)
        .map(|i| {
            json!({"custom_id": format!("req-{i}"), "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "svc", "messages": [{"role": "user", "content": content}]}})
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `POST /v1/files` with `body` (a form of [`BOUNDARY`]).
async fn post(app: &TestApp, key: &str, body: String) -> (u16, Value) {
    let response = app
        .client
        .post(app.url("/v1/files"))
        .bearer_auth(key)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn files(app: &TestApp, key: &str) -> Vec<Value> {
    let response = app
        .client
        .get(app.url("/v1/files"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let list: Value = response.json().await.unwrap();
    list["data"].as_array().unwrap().clone()
}

/// What the files directory holds (temporary files included).
fn on_disk(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

// Five 20 MB filenames were accepted, and `GET /v1/files` returned 100 MB.
async fn a_filename_past_255_bytes_is_refused_before_it_is_kept(database: Database) {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::spawn_with(
        database,
        ServerConfig {
            files_dir: Some(dir.path().to_owned()),
            ..ServerConfig::default()
        },
    )
    .await;
    let key = app.create_key().await;
    let text = jsonl(1, 10);
    let (status, body) = post(&app, &key, form(&"n".repeat(256), &text)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "file", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 255 bytes"),
        "{body}"
    );
    // A name that does not fit a part's headers at all.
    let (status, body) = post(&app, &key, form(&"n".repeat(1 << 20), &text)).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("headers are longer than"),
        "{body}"
    );
    assert_eq!(files(&app, &key).await, Vec::<Value>::new());
    assert_eq!(on_disk(dir.path()), Vec::<String>::new());
    // 255 bytes (of UTF-8: 85 three-byte characters) fit.
    let name = "名".repeat(85);
    let (status, body) = post(&app, &key, form(&name, &text)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["filename"], name.as_str());
    assert_eq!(body["bytes"], text.len());
}

// An upload under way when a server's data directory was deleted (a test's
// TempDir, removed as its server stopped) made the directory again with
// create_dir_all, and so left it behind for good.
#[tokio::test]
async fn an_upload_never_makes_a_deleted_data_directory_again() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let files_dir = data.join("files");
    let app = TestApp::spawn_with(
        Database::Sqlite,
        ServerConfig {
            files_dir: Some(files_dir.clone()),
            ..ServerConfig::default()
        },
    )
    .await;
    // Made at start, with the folders above it.
    assert!(files_dir.is_dir());
    let key = app.create_key().await;
    // Its files' folder alone is made again when it is gone...
    std::fs::remove_dir(&files_dir).unwrap();
    let (status, body) = post(&app, &key, form("a.jsonl", &jsonl(1, 10))).await;
    assert_eq!(status, 200, "{body}");
    assert!(files_dir.is_dir());
    // ...but not the data directory above it.
    std::fs::remove_dir_all(&data).unwrap();
    let (status, body) = post(&app, &key, form("b.jsonl", &jsonl(1, 10))).await;
    assert_eq!(status, 500, "{body}");
    assert!(!data.exists(), "the upload made {} again", data.display());
}

// The quota counted only the file's bytes: a project kept any number of
// names of any length beside them.
async fn a_files_name_counts_toward_the_quota(database: Database) {
    let text = jsonl(1, 10);
    let app = TestApp::spawn_with(
        database,
        ServerConfig {
            files_quota_bytes: text.len() * 2 + 100,
            ..ServerConfig::default()
        },
    )
    .await;
    let key = app.create_key().await;
    let (status, body) = post(&app, &key, form("a.jsonl", &text)).await;
    assert_eq!(status, 200, "{body}");
    // The file's own size is what the client sees.
    assert_eq!(body["bytes"], text.len());
    // The same bytes again fit, but not with a 250-byte name.
    let long = "n".repeat(250);
    let (status, body) = post(&app, &key, form(&long, &text)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "file", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("quota"),
        "{body}"
    );
    assert_eq!(files(&app, &key).await.len(), 1);
    let (status, body) = post(&app, &key, form("b.jsonl", &text)).await;
    assert_eq!(status, 200, "{body}");
    // Deleting a file frees its bytes and its name's.
    let first = files(&app, &key).await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let deleted = app
        .client
        .delete(app.url(&format!("/v1/files/{first}")))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    let (status, body) = post(&app, &key, form(&"n".repeat(90), &text)).await;
    assert_eq!(status, 200, "{body}");
}

// 16 keys' slow uploads held all 64 places of uploads in all, and another
// project's upload waited 57.9 s, until the body timeout.
async fn slow_uploads_of_many_keys_do_not_hold_back_another_projects(database: Database) {
    let app = TestApp::spawn_with(database, ServerConfig::default()).await;
    let mut stalled = Vec::new();
    let mut keys = Vec::new();
    for _ in 0..16 {
        let key = app.create_key().await;
        for _ in 0..4 {
            stalled.push(stalled_upload(&app, &key).await);
        }
        keys.push(key);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let text = jsonl(2, 10);
    // Each of those keys has its four in flight.
    let (status, body) = post(&app, &keys[0], form("a.jsonl", &text)).await;
    assert_eq!(status, 429, "{body}");
    // Another project's upload goes through at once.
    let other = project_key(&app, "other").await;
    let started = Instant::now();
    let answered = tokio::time::timeout(
        Duration::from_secs(10),
        post(&app, &other, form("a.jsonl", &text)),
    )
    .await;
    let took = started.elapsed();
    let (status, body) = answered.unwrap_or_else(|_| panic!("still waiting after {took:?}"));
    assert_eq!(status, 200, "{body}");
    eprintln!("another project's upload beside 64 stalled ones took {took:?}");
    drop(stalled);
}

// Issue 47's note: each key's uploads were bounded (4 at once, each by
// the largest file), but not their sum: many keys uploading at once could
// fill the files directory. Now all uploads in progress share
// `uploads_disk_bytes`.
async fn the_uploads_of_all_keys_share_a_bounded_room_on_disk(database: Database) {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::spawn_with(
        database,
        ServerConfig {
            files_dir: Some(dir.path().to_owned()),
            uploads_disk_bytes: 150 * 1024,
            ..ServerConfig::default()
        },
    )
    .await;
    // One key's upload sends 100,000 bytes, and stalls.
    let first = app.create_key().await;
    let head = format!(
        "POST /v1/files HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {first}\r\n\
         Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: 1000000\r\n\r\n\
         --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\n\r\n\
         {{\"custom_id\": \"{}",
        app.addr,
        "x".repeat(100_000)
    );
    let mut stalled = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    stalled.write_all(head.as_bytes()).await.unwrap();
    let on_disk_bytes = || -> u64 {
        std::fs::read_dir(dir.path())
            .map(|entries| {
                entries
                    .map(|e| e.unwrap().metadata().map_or(0, |m| m.len()))
                    .sum()
            })
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    // Written through a 64 KiB buffer: once a buffer's worth is on disk,
    // at least that much is counted (bytes are counted before written).
    while on_disk_bytes() < 60_000 {
        assert!(
            Instant::now() < deadline,
            "the upload never reached the disk"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Another project's key: its 100 KB file does not fit beside it.
    let other = project_key(&app, "other").await;
    let text = jsonl(1, 100_000);
    let (status, body) = post(&app, &other, form("b.jsonl", &text)).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "upload_space_full", "{body}");
    assert_eq!(files(&app, &other).await, Vec::<Value>::new());
    // A smaller one fits; once the first is given up, so does the 100 KB one.
    let (status, body) = post(&app, &other, form("c.jsonl", &jsonl(1, 10))).await;
    assert_eq!(status, 200, "{body}");
    drop(stalled);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = post(&app, &other, form("b.jsonl", &text)).await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "{body}");
        assert!(Instant::now() < deadline, "the room was never given back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(files(&app, &other).await.len(), 2);
}

/// The CPU time this process (the server, and the test's client) has
/// used, in seconds (`utime` and `stime` of /proc/self/stat, at 100 ticks
/// a second).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

/// What one upload sent over a raw connection came to.
struct Sent {
    status: u16,
    body: String,
    /// Bytes of body written before the server answered (or closed).
    written: usize,
    took: Duration,
}

/// Sends `POST /v1/files` declaring a body of `total` bytes: `start`, then
/// `filler` over and over, written until all is sent or the server closes;
/// the answer is read meanwhile.
async fn send_raw(app: &TestApp, key: &str, start: Vec<u8>, filler: Vec<u8>, total: usize) -> Sent {
    let head = format!(
        "POST /v1/files HTTP/1.1\r\nHost: svc\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {total}\r\n\r\n"
    );
    let started = Instant::now();
    let stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    // The writing half is kept until the answer is read: hyper closes a
    // connection its client half-closed.
    let writer = tokio::spawn(async move {
        if write.write_all(head.as_bytes()).await.is_err() {
            return (0, write);
        }
        let mut written = start.len().min(total);
        if write.write_all(&start[..written]).await.is_err() {
            return (0, write);
        }
        while written < total {
            let n = filler.len().min(total - written);
            if write.write_all(&filler[..n]).await.is_err() {
                break;
            }
            written += n;
        }
        (written, write)
    });
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let whole = |got: &[u8]| {
        let text = String::from_utf8_lossy(got);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            return false;
        };
        let length = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>().unwrap())
            })
            .unwrap_or(0);
        body.len() >= length
    };
    while !whole(&got) {
        match read.read(&mut buf).await {
            Ok(0) => break,
            Err(e) => {
                eprintln!("reading the answer: {e}");
                break;
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let took = started.elapsed();
    drop(read);
    let (written, write) = writer.await.unwrap();
    drop(write);
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Sent {
        status,
        body,
        written,
        took,
    }
}

/// `/health` answered quickly, `times` times in a row.
async fn health_stays_quick(app: &TestApp, times: usize) -> Duration {
    let mut slowest = Duration::ZERO;
    for _ in 0..times {
        let started = Instant::now();
        let response = app.client.get(app.url("/health")).send().await.unwrap();
        assert_eq!(response.status(), 200);
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    slowest
}

// Four 64 MB uploads without a boundary took 20.2 s of the server's CPU
// (a well-formed one of that size 1.9 s), and `/health` p50 went to
// 421 ms: multer kept the body and searched it again from its start on
// each read, on the async threads. Endless part headers did the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_that_never_reaches_a_boundary_or_ends_its_headers_is_refused_early() {
    const TOTAL: usize = 32 << 20;
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::spawn_with(
        Database::Sqlite,
        ServerConfig {
            files_dir: Some(dir.path().to_owned()),
            ..ServerConfig::default()
        },
    )
    .await;
    let key = app.create_key().await;
    let chunk = 64 * 1024;
    let attacks = [
        (
            "no boundary",
            Vec::new(),
            vec![b'x'; chunk],
            "no boundary line",
        ),
        (
            "endless headers",
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"\r\n")
                .into_bytes(),
            b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"
                .repeat(chunk / 64),
            "headers are longer than",
        ),
    ];
    // The same size, well formed: 32 MB of 1.1 kB lines.
    let good = form("good.jsonl", &jsonl(TOTAL / 1150, 1000));
    let well_formed = {
        let before = cpu_seconds();
        let sent = send_raw(
            &app,
            &key,
            good.clone().into_bytes(),
            Vec::new(),
            good.len(),
        )
        .await;
        let cpu = cpu_seconds() - before;
        eprintln!(
            "well formed: {} after {:?}, {} bytes sent, {cpu:.2} s of CPU, {:.1} ns a byte",
            sent.status,
            sent.took,
            sent.written,
            cpu * 1e9 / sent.written as f64
        );
        assert_eq!(sent.status, 200, "{}", sent.body);
        cpu * 1e9 / sent.written as f64
    };
    for (name, start, filler, message) in attacks {
        // Four at once, and `/health` asked meanwhile.
        let before = cpu_seconds();
        let sends = futures::future::join_all(
            (0..4).map(|_| send_raw(&app, &key, start.clone(), filler.clone(), TOTAL)),
        );
        let (sent, slowest) = tokio::join!(sends, health_stays_quick(&app, 10));
        let cpu = cpu_seconds() - before;
        let written: usize = sent.iter().map(|s| s.written).sum();
        let took = sent.iter().map(|s| s.took).max().unwrap();
        eprintln!(
            "{name}: 4 × {TOTAL} bytes declared, {written} sent, answered within {took:?}, \
             {cpu:.2} s of CPU ({:.1} ns a byte sent, {:.1} ns a declared byte; well formed \
             {well_formed:.1}), /health at most {slowest:?}",
            cpu * 1e9 / written.max(1) as f64,
            cpu * 1e9 / (4 * TOTAL) as f64
        );
        for sent in &sent {
            assert_eq!(sent.status, 400, "{name}: {}", sent.body);
            assert!(sent.body.contains(message), "{name}: {}", sent.body);
        }
        assert!(
            took < Duration::from_secs(10),
            "{name}: answered after {took:?}"
        );
        assert!(
            slowest < Duration::from_secs(1),
            "{name}: /health took {slowest:?}"
        );
    }
    // Nothing was left behind but the well-formed file.
    let left = on_disk(dir.path());
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(!left[0].starts_with(".upload"), "{left:?}");
}

// Issue 61: an upload was written to disk whole before its project's quota
// refused it. Now a project whose files fill its quota is refused before
// the body is read, and an upload is given up as soon as its file passes
// what the quota has left.
async fn an_upload_past_the_projects_quota_is_refused_before_it_is_written(database: Database) {
    let dir = tempfile::tempdir().unwrap();
    let quota = 50_000;
    let app = TestApp::spawn_with(
        database,
        ServerConfig {
            files_dir: Some(dir.path().to_owned()),
            files_quota_bytes: quota,
            ..ServerConfig::default()
        },
    )
    .await;
    let key = project_key(&app, "full").await;
    let uploading = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with(".upload-")
            })
            .count()
    };
    let first = jsonl(1, 40_000);
    let (status, body) = post(&app, &key, form("a.jsonl", &first)).await;
    assert_eq!(status, 200, "{body}");
    // About 10 kB are left: an upload that stalls after 64 KiB of its file
    // is answered all the same.
    let mut stream = stalled_upload(&app, &key).await;
    stream.write_all(&[b'x'; 64 * 1024]).await.unwrap();
    let (status, body) = crate::audio::answer(&mut stream)
        .await
        .expect("an upload past the quota is refused before it is whole");
    assert_eq!(
        (status, &body["error"]["param"]),
        (400, &json!("file")),
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("quota of 50000 bytes"), "{message}");
    assert_eq!(uploading(), 0);
    // A file that fills the quota to the byte, with its name; then an
    // upload is refused before a byte of it is written.
    let base = jsonl(1, 0).len();
    let rest = quota - (first.len() + "a.jsonl".len()) - "b.jsonl".len();
    let (status, body) = post(&app, &key, form("b.jsonl", &jsonl(1, rest - base))).await;
    assert_eq!(status, 200, "{body}");
    let mut stream = stalled_upload(&app, &key).await;
    let (status, body) = crate::audio::answer(&mut stream)
        .await
        .expect("a full project's upload is refused before its body is read");
    assert_eq!(
        (status, &body["error"]["param"]),
        (400, &json!("file")),
        "{body}"
    );
    assert_eq!(uploading(), 0);
    assert_eq!(files(&app, &key).await.len(), 2);
}
