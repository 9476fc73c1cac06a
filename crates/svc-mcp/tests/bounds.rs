//! The bounds: a server that never answers, and a 100 MB tool result, each
//! a typed error within the bound and without reading the whole thing.

#![expect(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, and its tasks end with it"
)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;
use svc_mcp::{Client, Error, Limits, Version, VersionPolicy};

fn stateless(url: &str, limits: Limits) -> Client {
    Client::builder(url)
        .version(VersionPolicy::Only(Version::Stateless))
        .limits(limits)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_within_the_bound() {
    let server = common::serve(Arc::new(|_seen| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::OK.into_response()
        })
    }))
    .await;
    let client = stateless(
        &server.url,
        Limits {
            timeout: Duration::from_millis(300),
            ..Limits::default()
        },
    );
    let started = Instant::now();
    let err = client.call_tool("echo", json!({})).await.unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_server_that_stalls_mid_stream_times_out_within_the_bound() {
    let server = common::serve(Arc::new(|_seen| {
        Box::pin(async {
            let stream = futures::stream::once(async {
                Ok::<_, std::io::Error>(bytes::Bytes::from_static(b": started\n\n"))
            })
            .chain(futures::stream::pending());
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(axum::body::Body::from_stream(stream))
                .unwrap()
        })
    }))
    .await;
    let client = stateless(
        &server.url,
        Limits {
            timeout: Duration::from_millis(300),
            ..Limits::default()
        },
    );
    let started = Instant::now();
    let err = client.list_tools().await.unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

/// A server answering with `total` bytes of `content_type`, counting what it sent.
async fn huge(
    content_type: &'static str,
    prefix: &'static str,
) -> (common::Server, Arc<Mutex<usize>>) {
    let sent = Arc::new(Mutex::new(0));
    let counter = sent.clone();
    let server = common::serve(Arc::new(move |_seen| {
        let counter = counter.clone();
        Box::pin(async move {
            Response::builder()
                .header("content-type", content_type)
                .body(common::endless_body(100 * 1024 * 1024, prefix, counter))
                .unwrap()
        })
    }))
    .await;
    (server, sent)
}

#[tokio::test]
async fn a_100_mb_json_result_is_refused_at_the_bound_without_reading_it() {
    let (server, sent) = huge(
        "application/json",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"",
    )
    .await;
    let client = stateless(&server.url, Limits::default());
    let err = client.call_tool("echo", json!({})).await.unwrap_err();
    assert!(
        matches!(err, Error::TooLarge { limit } if limit == 4 * 1024 * 1024),
        "{err:?}"
    );
    // The client stopped reading at 4 MiB; what the server got out beyond
    // that sat in socket buffers, far from the 100 MB it had to send.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = *sent.lock().unwrap();
    assert!(sent < 32 * 1024 * 1024, "the server sent {sent} bytes");
}

#[tokio::test]
async fn a_100_mb_event_stream_is_refused_at_the_bound_without_reading_it() {
    let (server, sent) = huge("text/event-stream", "data: ").await;
    let client = stateless(
        &server.url,
        Limits {
            max_response_bytes: 1024 * 1024,
            ..Limits::default()
        },
    );
    let err = client.list_tools().await.unwrap_err();
    assert!(
        matches!(err, Error::TooLarge { limit: 1_048_576 }),
        "{err:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = *sent.lock().unwrap();
    assert!(sent < 32 * 1024 * 1024, "the server sent {sent} bytes");
}

#[tokio::test]
async fn a_declared_length_past_the_bound_is_refused_before_reading() {
    let server = common::serve(common::handler(|_seen| {
        (
            StatusCode::OK,
            [("content-type", "application/json")],
            vec![b' '; 2 * 1024 * 1024],
        )
            .into_response()
    }))
    .await;
    let client = stateless(
        &server.url,
        Limits {
            max_response_bytes: 1024 * 1024,
            ..Limits::default()
        },
    );
    let err = client.list_tools().await.unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err:?}");
}
