//! What a pull reports through `Progress`, recorded call by call, against a
//! small HTTP server in the test standing in for the Hugging Face hub.

#![expect(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, and its tasks end with it"
)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use svc_models::{HfFile, HfHub, Progress, pull_hf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Message(String),
    Start(String, Option<u64>),
    Advance(u64),
    Finish,
    Abandon,
}

/// A `Progress` that keeps every call.
#[derive(Default)]
struct Recording(Mutex<Vec<Event>>);

impl Recording {
    fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }

    fn push(&self, event: Event) {
        self.0.lock().unwrap().push(event);
    }
}

impl Progress for Recording {
    fn message(&self, text: &str) {
        self.push(Event::Message(text.to_owned()));
    }

    fn start(&self, name: &str, total: Option<u64>) {
        self.push(Event::Start(name.to_owned(), total));
    }

    fn advance(&self, bytes: u64) {
        self.push(Event::Advance(bytes));
    }

    fn finish(&self) {
        self.push(Event::Finish);
    }

    fn abandon(&self) {
        self.push(Event::Abandon);
    }
}

/// A GGUF-looking body of `len` bytes.
fn body(len: usize) -> Vec<u8> {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend((0..len - 4).map(|i| (i % 251) as u8));
    bytes
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An HTTP/1.1 server on 127.0.0.1:0: `/o/r/resolve/main/sized.gguf` with a
/// length and the body's SHA-256 as ETag, `/o/r/resolve/main/chunked.gguf`
/// in chunks without a length, `/o/r/resolve/main/bad.gguf` a body that is
/// not GGUF; anything else 404. One request per connection.
async fn hub(sized: Vec<u8>, chunked: Vec<u8>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let (sized, chunked) = (sized.clone(), chunked.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = socket.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    head.extend_from_slice(&buf[..n]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or_default();
                let mut out = Vec::new();
                match path {
                    "/o/r/resolve/main/sized.gguf" => {
                        out.extend_from_slice(
                            format!(
                                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\netag: \"{}\"\r\nconnection: close\r\n\r\n",
                                sized.len(),
                                sha256_hex(&sized)
                            )
                            .as_bytes(),
                        );
                        out.extend_from_slice(&sized);
                    }
                    "/o/r/resolve/main/chunked.gguf" => {
                        out.extend_from_slice(
                            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
                        );
                        for part in chunked.chunks(1000) {
                            out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                            out.extend_from_slice(part);
                            out.extend_from_slice(b"\r\n");
                        }
                        out.extend_from_slice(b"0\r\n\r\n");
                    }
                    "/o/r/resolve/main/bad.gguf" => {
                        out.extend_from_slice(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\nconnection: close\r\n\r\nnot gguf!",
                        );
                    }
                    _ => out.extend_from_slice(
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    ),
                }
                let _ = socket.write_all(&out).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    addr
}

/// The bytes the `Advance` calls add up to.
fn advanced(events: &[Event]) -> u64 {
    events
        .iter()
        .map(|e| match e {
            Event::Advance(n) => *n,
            _ => 0,
        })
        .sum()
}

#[tokio::test]
async fn a_download_reports_start_advance_and_finish() {
    let sized = body(300_000);
    let chunked = body(5_500);
    let addr = hub(sized.clone(), chunked.clone()).await;
    let hub = HfHub {
        endpoint: format!("http://{addr}"),
        token: None,
    };
    let data = tempfile::tempdir().unwrap();
    let recording = Arc::new(Recording::default());
    let progress: Arc<dyn Progress> = recording.clone();

    // With a length: start with the total, advances adding up to it, finish.
    let file = HfFile::parse("hf:o/r/sized.gguf").unwrap();
    let path = pull_hf(data.path(), &file, &hub, &progress).await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), sized);
    let events = recording.take();
    assert_eq!(
        events.first(),
        Some(&Event::Message(format!(
            "Downloading hf:o/r/sized.gguf from http://{addr}"
        )))
    );
    assert_eq!(
        events.get(1),
        Some(&Event::Start("sized.gguf".into(), Some(sized.len() as u64)))
    );
    assert!(
        events[2..events.len() - 2]
            .iter()
            .all(|e| matches!(e, Event::Advance(n) if *n > 0))
    );
    assert_eq!(advanced(&events), sized.len() as u64);
    assert_eq!(events[events.len() - 2], Event::Finish);
    assert_eq!(
        events.last(),
        Some(&Event::Message(format!(
            "Downloaded hf:o/r/sized.gguf ({} bytes, SHA-256 verified).",
            sized.len()
        )))
    );

    // Already there: one line, no transfer.
    pull_hf(data.path(), &file, &hub, &progress).await.unwrap();
    let events = recording.take();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        matches!(&events[0], Event::Message(m) if m.contains("already in place")),
        "{events:?}"
    );

    // Without a length: started with no total; several advances.
    let file = HfFile::parse("hf:o/r/chunked.gguf").unwrap();
    pull_hf(data.path(), &file, &hub, &progress).await.unwrap();
    let events = recording.take();
    assert_eq!(events[1], Event::Start("chunked.gguf".into(), None));
    assert_eq!(advanced(&events), chunked.len() as u64);
    assert_eq!(events.iter().filter(|e| **e == Event::Finish).count(), 1);
    assert!(!events.contains(&Event::Abandon));
    assert!(
        matches!(events.last(), Some(Event::Message(m)) if m.contains("the hub sent no SHA-256 to check")),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_failed_download_is_abandoned_not_finished() {
    let addr = hub(body(100), body(100)).await;
    let hub = HfHub {
        endpoint: format!("http://{addr}"),
        token: None,
    };
    let data = tempfile::tempdir().unwrap();
    let recording = Arc::new(Recording::default());
    let progress: Arc<dyn Progress> = recording.clone();

    let file = HfFile::parse("hf:o/r/bad.gguf").unwrap();
    let err = pull_hf(data.path(), &file, &hub, &progress)
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("not send a GGUF file"),
        "{err:#}"
    );
    let events = recording.take();
    assert_eq!(
        &events[1..],
        [Event::Start("bad.gguf".into(), Some(9)), Event::Abandon],
        "{events:?}"
    );
    assert!(!file.local_path(data.path()).exists());

    // Refused before any byte: no transfer at all.
    let file = HfFile::parse("hf:o/r/missing.gguf").unwrap();
    pull_hf(data.path(), &file, &hub, &progress)
        .await
        .unwrap_err();
    let events = recording.take();
    assert_eq!(events.len(), 1, "{events:?}");
}
