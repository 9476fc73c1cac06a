//! Protocol version 2026-07-28 against the scripted server: the probe, the
//! `_meta` envelope and the routing headers on every request, no session,
//! and how the probe's answer picks the version.

#![expect(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, and its tasks end with it"
)]

mod common;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use common::{Fake, Speaks};
use serde_json::json;
use svc_mcp::{Client, Error, Version, VersionPolicy};

#[tokio::test]
async fn a_stateless_server_is_found_by_the_probe_and_never_initialized() {
    let fake = Arc::new(Fake::new(Speaks::Both));
    let server = fake.start().await;
    let client = Client::builder(&server.url).build().unwrap();

    assert_eq!(client.list_tools().await.unwrap().len(), 3);
    let result = client
        .call_tool("echo", json!({ "text": "hi" }))
        .await
        .unwrap();
    assert_eq!(result.content[0]["text"], "hi");
    assert_eq!(client.version().await.unwrap(), Version::Stateless);

    let seen = server.requests();
    let methods: Vec<&str> = seen.iter().map(common::Seen::method).collect();
    assert_eq!(methods, ["server/discover", "tools/list", "tools/call"]);
    for request in &seen {
        let meta = &request.body["params"]["_meta"];
        assert_eq!(
            meta["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        assert_eq!(meta["io.modelcontextprotocol/clientInfo"]["name"], "svc");
        assert_eq!(
            meta["io.modelcontextprotocol/clientCapabilities"],
            json!({})
        );
        assert_eq!(request.header("mcp-protocol-version"), Some("2026-07-28"));
        assert_eq!(request.header("mcp-method"), Some(request.method()));
        assert!(request.header("mcp-session-id").is_none());
    }
    assert_eq!(seen[2].header("mcp-name"), Some("echo"));
    assert!(seen[1].header("mcp-name").is_none());
}

#[tokio::test]
async fn a_tool_name_outside_printable_ascii_goes_in_mcp_name_base64_wrapped() {
    let fake = Arc::new(Fake {
        sse: true,
        ..Fake::new(Speaks::Stateless)
    });
    let server = fake.start().await;
    let client = Client::builder(&server.url)
        .version(VersionPolicy::Only(Version::Stateless))
        .build()
        .unwrap();
    // The fake refuses the call (-32020) unless Mcp-Name decodes to the name.
    let result = client
        .call_tool("météo", json!({ "text": "sunny" }))
        .await
        .unwrap();
    assert_eq!(result.content[0]["text"], "sunny");
    let seen = server.requests();
    assert_eq!(seen.len(), 1, "a fixed stateless version sends no probe");
    assert_eq!(seen[0].header("mcp-name"), Some("=?base64?bcOpdMOpbw==?="));
}

#[tokio::test]
async fn a_modern_only_server_naming_no_version_of_ours_is_a_typed_error() {
    let server = common::serve(common::handler(|seen| {
        let id = seen.body["id"].clone();
        common::json_response(
            StatusCode::BAD_REQUEST,
            common::error(
                &id,
                -32022,
                "Unsupported protocol version",
                Some(json!({ "supported": ["2027-01-01"], "requested": "2026-07-28" })),
            ),
        )
    }))
    .await;
    let client = Client::builder(&server.url).build().unwrap();
    let err = client.list_tools().await.unwrap_err();
    assert!(
        matches!(&err, Error::UnsupportedVersion(named) if named == &["2027-01-01"]),
        "{err:?}"
    );
    assert_eq!(
        server.methods(),
        ["server/discover"],
        "no initialize after a disjoint -32022"
    );
}

#[tokio::test]
async fn a_discover_result_naming_only_handshake_versions_falls_back_to_initialize() {
    let fake = Arc::new(Fake::new(Speaks::Handshake));
    let server = common::serve(common::handler(move |seen| {
        if seen.method() == "server/discover" {
            let id = seen.body["id"].clone();
            return common::json_response(
                StatusCode::OK,
                common::result(
                    &id,
                    json!({ "supportedVersions": ["2025-11-25"], "capabilities": {} }),
                ),
            );
        }
        fake.answer_for_test(&seen)
    }))
    .await;
    let client = Client::builder(&server.url).build().unwrap();
    assert_eq!(client.version().await.unwrap(), Version::Handshake);
    assert_eq!(
        server.methods(),
        ["server/discover", "initialize", "notifications/initialized"]
    );
}

#[tokio::test]
async fn a_probe_answered_by_a_bare_404_falls_back_to_initialize() {
    let fake = Arc::new(Fake::new(Speaks::Handshake));
    let server = common::serve(common::handler(move |seen| {
        if seen.method() == "server/discover" {
            return StatusCode::NOT_FOUND.into_response();
        }
        fake.answer_for_test(&seen)
    }))
    .await;
    let client = Client::builder(&server.url).build().unwrap();
    assert_eq!(client.list_tools().await.unwrap().len(), 3);
    assert_eq!(client.version().await.unwrap(), Version::Handshake);
}
