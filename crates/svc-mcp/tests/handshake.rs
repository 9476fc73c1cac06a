//! Protocol version 2025-11-25 against the scripted server: the handshake,
//! the session kept and renewed, JSON and event-stream answers, pagination
//! and JSON-RPC errors.

#![expect(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, and its tasks end with it"
)]

mod common;

use std::sync::Arc;

use axum::response::IntoResponse;
use common::{Fake, Speaks};
use serde_json::json;
use svc_mcp::{Client, Error, Limits, Version, VersionPolicy};

#[tokio::test]
async fn a_handshake_server_is_found_by_the_probe_and_keeps_its_session() {
    let fake = Arc::new(Fake::new(Speaks::Handshake));
    let server = fake.start().await;
    let client = Client::builder(&server.url)
        .header("authorization", "Bearer secret-token")
        .build()
        .unwrap();

    let tools = client.list_tools().await.unwrap();
    assert_eq!(client.version().await.unwrap(), Version::Handshake);
    assert_eq!(tools.len(), 3);
    assert_eq!(tools[0].name, "tool0");
    assert_eq!(tools[0].description.as_deref(), Some("tool number 0"));
    assert_eq!(
        tools[0].input_schema["properties"]["text"]["type"],
        "string"
    );
    assert!(tools[0].read_only_hint());
    assert!(!tools[1].read_only_hint());

    let seen = server.requests();
    let methods: Vec<&str> = seen.iter().map(common::Seen::method).collect();
    assert_eq!(
        methods,
        [
            "server/discover",
            "initialize",
            "notifications/initialized",
            "tools/list"
        ]
    );
    let initialize = &seen[1];
    assert_eq!(initialize.body["params"]["protocolVersion"], "2025-11-25");
    assert_eq!(initialize.body["params"]["capabilities"], json!({}));
    assert_eq!(initialize.body["params"]["clientInfo"]["name"], "svc");
    assert!(initialize.header("mcp-session-id").is_none());
    assert!(initialize.header("mcp-protocol-version").is_none());
    for later in &seen[2..] {
        assert_eq!(later.header("mcp-session-id"), Some("session-1"));
        assert_eq!(later.header("mcp-protocol-version"), Some("2025-11-25"));
        assert_eq!(later.header("authorization"), Some("Bearer secret-token"));
        let accept = later.header("accept").unwrap();
        assert!(accept.contains("application/json") && accept.contains("text/event-stream"));
    }
    assert!(seen[3].body["params"].get("_meta").is_none());
}

#[tokio::test]
async fn an_expired_session_is_renewed_once_and_the_call_retried() {
    let fake = Arc::new(Fake::new(Speaks::Handshake));
    let server = fake.start().await;
    let client = Client::builder(&server.url)
        .version(VersionPolicy::Only(Version::Handshake))
        .build()
        .unwrap();
    client.list_tools().await.unwrap();
    fake.expire();

    let result = client
        .call_tool("echo", json!({ "text": "hi" }))
        .await
        .unwrap();
    assert_eq!(
        result.content,
        vec![json!({ "type": "text", "text": "hi" })]
    );

    let seen = server.requests();
    let methods: Vec<&str> = seen.iter().map(common::Seen::method).collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/call",
            "initialize",
            "notifications/initialized",
            "tools/call"
        ]
    );
    assert_eq!(seen[3].header("mcp-session-id"), Some("session-1"));
    assert_eq!(seen[6].header("mcp-session-id"), Some("session-2"));
    // The renewed session is kept for the calls after.
    client.list_tools().await.unwrap();
    assert_eq!(
        server.requests()[7].header("mcp-session-id"),
        Some("session-2")
    );
}

#[tokio::test]
async fn a_session_gone_again_after_renewal_is_a_typed_error() {
    let server = common::serve(common::handler(|seen| {
        let id = seen.body["id"].clone();
        match seen.method() {
            "initialize" => {
                let mut response = common::json_response(
                    axum::http::StatusCode::OK,
                    common::result(
                        &id,
                        json!({ "protocolVersion": "2025-11-25", "capabilities": {} }),
                    ),
                );
                response
                    .headers_mut()
                    .insert("mcp-session-id", "s".parse().unwrap());
                response
            }
            "notifications/initialized" => axum::http::StatusCode::ACCEPTED.into_response(),
            _ => axum::http::StatusCode::NOT_FOUND.into_response(),
        }
    }))
    .await;
    let client = Client::builder(&server.url)
        .version(VersionPolicy::Only(Version::Handshake))
        .build()
        .unwrap();
    let err = client.list_tools().await.unwrap_err();
    assert!(matches!(err, Error::SessionExpired), "{err:?}");
    assert_eq!(
        server
            .methods()
            .iter()
            .filter(|m| *m == "initialize")
            .count(),
        2,
        "one renewal, not a loop"
    );
}

#[tokio::test]
async fn answers_as_event_streams_are_read_to_the_response_past_notifications() {
    let fake = Arc::new(Fake {
        sse: true,
        ..Fake::new(Speaks::Handshake)
    });
    let server = fake.start().await;
    let client = Client::builder(&server.url).build().unwrap();
    let result = client
        .call_tool("echo", json!({ "text": "streamed" }))
        .await
        .unwrap();
    assert_eq!(result.content[0]["text"], "streamed");
    assert_eq!(
        result.structured_content,
        Some(json!({ "echo": { "text": "streamed" } }))
    );
    assert!(!result.is_error);
    let broken = client.call_tool("broken", json!({})).await.unwrap();
    assert!(broken.is_error);
}

#[tokio::test]
async fn tools_list_follows_next_cursor_across_pages() {
    let fake = Arc::new(Fake {
        page_size: 2,
        tools: 7,
        ..Fake::new(Speaks::Handshake)
    });
    let server = fake.start().await;
    let client = Client::builder(&server.url).build().unwrap();
    let names: Vec<String> = client
        .list_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(
        names,
        (0..7).map(|i| format!("tool{i}")).collect::<Vec<_>>()
    );
    let cursors: Vec<_> = server
        .requests()
        .iter()
        .filter(|s| s.method() == "tools/list")
        .map(|s| s.body["params"]["cursor"].clone())
        .collect();
    assert_eq!(cursors, [json!(null), json!("2"), json!("4"), json!("6")]);
}

#[tokio::test]
async fn a_tool_list_past_the_page_bound_is_refused() {
    let fake = Arc::new(Fake {
        page_size: 1,
        tools: 50,
        ..Fake::new(Speaks::Handshake)
    });
    let server = fake.start().await;
    let client = Client::builder(&server.url)
        .limits(Limits {
            max_tool_pages: 5,
            ..Limits::default()
        })
        .build()
        .unwrap();
    let err = client.list_tools().await.unwrap_err();
    assert!(matches!(err, Error::TooManyPages { limit: 5 }), "{err:?}");
    let pages = server
        .methods()
        .iter()
        .filter(|m| *m == "tools/list")
        .count();
    assert_eq!(pages, 5);
}

#[tokio::test]
async fn a_json_rpc_error_comes_back_typed_with_its_code_and_data() {
    let fake = Arc::new(Fake::new(Speaks::Handshake));
    let server = fake.start().await;
    let client = Client::builder(&server.url).build().unwrap();
    let err = client
        .call_tool("no_such_tool", json!({}))
        .await
        .unwrap_err();
    match err {
        Error::Rpc {
            code,
            message,
            data,
        } => {
            assert_eq!(code, -32602);
            assert_eq!(message, "Unknown tool");
            assert_eq!(data, Some(json!({ "name": "no_such_tool" })));
        }
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}
