//! A scripted MCP server for the tests of the dialects' `mcp` tools, and
//! svc with it registered as `docs`.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use svc_server::ServerConfig;
use svc_server::config::McpConfig;
use svc_test_support::{Database, TestApp};

/// The methods the scripted server was asked, with the tool called.
pub type Seen = Arc<Mutex<Vec<String>>>;

/// A stateless (2026-07-28) MCP server with three tools: `echo` says its
/// `text` back, `wipe` says `wiped`, `huge` answers 5 MB.
async fn scripted(State(seen): State<Seen>, Json(message): Json<Value>) -> Response {
    let method = message["method"].as_str().unwrap_or_default().to_owned();
    let tool = message["params"]["name"].as_str().unwrap_or_default();
    seen.lock()
        .unwrap()
        .push(format!("{method} {tool}").trim().to_owned());
    let Some(id) = message.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match method.as_str() {
        "server/discover" => json!({"supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "scripted", "version": "1"}}),
        "tools/list" => json!({"tools": [
            {"name": "echo", "description": "Says the text back.",
             "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
             "annotations": {"readOnlyHint": true}},
            {"name": "wipe", "description": "Deletes everything.",
             "inputSchema": {"type": "object", "properties": {"what": {"type": "string"}}}},
            {"name": "huge", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}
        ]}),
        "tools/call" if tool == "wipe" => json!({"content": [{"type": "text", "text": "wiped"}]}),
        "tools/call" if tool == "huge" => {
            json!({"content": [{"type": "text", "text": "x".repeat(5 << 20)}]})
        }
        "tools/call" => {
            let text = message["params"]["arguments"]["text"].clone();
            json!({"content": [{"type": "text", "text": text}], "isError": false})
        }
        _ => {
            let error = json!({"code": -32601, "message": "Method not found"});
            return Json(json!({"jsonrpc": "2.0", "id": id, "error": error})).into_response();
        }
    };
    Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

/// The scripted server on a free port of `ip`: its URL and what it saw.
pub async fn start_scripted(ip: &str) -> (String, Seen) {
    let seen = Seen::default();
    let app = axum::Router::new()
        .route("/mcp", axum::routing::post(scripted))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind(format!("{ip}:0"))
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}/mcp"), seen)
}

/// svc with the scripted server registered as `docs`, and `allow_urls`.
pub async fn spawn(url: &str, allow_urls: Value) -> TestApp {
    spawn_on(Database::Sqlite, url, allow_urls).await
}

/// The same, on `database` (replicas share one).
pub async fn spawn_on(database: Database, url: &str, allow_urls: Value) -> TestApp {
    let mcp = json!({"servers": {"docs": {"url": url}}, "allow_urls": allow_urls});
    spawn_mcp(database, mcp).await
}

/// svc with the `[mcp]` table `mcp`.
pub async fn spawn_mcp(database: Database, mcp: Value) -> TestApp {
    let mcp: McpConfig = serde_json::from_value(mcp).unwrap();
    let config = ServerConfig {
        mcp,
        ..ServerConfig::default()
    };
    TestApp::spawn_with(database, config).await
}

/// The tools called, in order (`tools/call <name>`).
pub fn seen_calls(seen: &Seen) -> Vec<String> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|m| m.starts_with("tools/call"))
        .cloned()
        .collect()
}
