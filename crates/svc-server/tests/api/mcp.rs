//! `POST /mcp`, svc's own MCP server, in front of a scripted MCP server
//! registered in the configuration (a 2025-11-25 server, as most deployed
//! ones are): both protocol eras on svc's side, the registered server's
//! tools under `<label>__<tool>` names and only those allowed, its headers
//! sent to it and never shown, the key as the bearer token (a 401 naming
//! the protected resource's metadata without one), only the servers the
//! key's project and the key allow, and a server that is down answered
//! cleanly.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use svc_core::{Actor, KeyScope, McpServerAccess, ModelAccess, ProjectRecord, ProjectStore};
use svc_server::ServerConfig;
use svc_server::config::McpConfig;
use svc_test_support::{Database, TestApp};

/// What the scripted server saw: each method called, with the
/// `authorization` header it came with.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A 2025-11-25 MCP server with two tools, `echo` and `wipe`: it answers
/// `server/discover` as a server of that version does (unknown method).
async fn scripted(
    State(seen): State<Seen>,
    headers: HeaderMap,
    Json(message): Json<Value>,
) -> Response {
    let method = message["method"].as_str().unwrap_or_default().to_owned();
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    seen.lock().unwrap().push((method.clone(), authorization));
    let Some(id) = message.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match method.as_str() {
        "initialize" => json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "scripted", "version": "1"}}),
        "tools/list" => json!({"tools": [
            {"name": "echo", "description": "Says the text back.",
             "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
            {"name": "wipe", "description": "Deletes everything.", "inputSchema": {"type": "object"}}
        ]}),
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

/// The scripted server on a free loopback port: its URL and what it saw.
async fn start_scripted() -> (String, Seen) {
    let seen = Seen::default();
    let app = axum::Router::new()
        .route("/mcp", axum::routing::post(scripted))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}/mcp"), seen)
}

/// svc with `servers` (`label = {table}`) registered.
async fn spawn(servers: Value) -> TestApp {
    let mcp: McpConfig = serde_json::from_value(json!({"servers": servers})).unwrap();
    let config = ServerConfig {
        mcp,
        ..ServerConfig::default()
    };
    TestApp::spawn_with(Database::Sqlite, config).await
}

async fn post(app: &TestApp, key: &str, message: Value) -> reqwest::Response {
    app.client
        .post(app.url("/mcp"))
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .json(&message)
        .send()
        .await
        .unwrap()
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// The JSON body of the answer to `request`.
async fn sent(request: reqwest::RequestBuilder) -> Value {
    request.send().await.unwrap().json().await.unwrap()
}

/// The JSON-RPC reply to `message`, whatever its status.
async fn reply(app: &TestApp, key: &str, message: Value) -> Value {
    post(app, key, message).await.json().await.unwrap()
}

/// The names `tools/list` gives.
async fn tool_names(app: &TestApp, key: &str) -> Vec<String> {
    let listed = reply(app, key, request(2, "tools/list", json!({}))).await;
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {listed}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_key_lists_and_calls_only_the_allowed_tools_of_a_registered_server() {
    let (url, seen) = start_scripted().await;
    let app = spawn(json!({"docs": {"url": url,
        "headers": {"authorization": "Bearer upstream-secret"},
        "allowed_tools": ["echo"]}}))
    .await;
    let key = app.create_key().await;

    let init = post(
        &app,
        &key,
        request(
            1,
            "initialize",
            json!({
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}),
        ),
    )
    .await;
    assert_eq!(init.status(), 200);
    assert!(
        init.headers().get("mcp-session-id").is_none(),
        "stateless: no session"
    );
    let init: Value = init.json().await.unwrap();
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(init["result"]["serverInfo"]["name"], "svc");
    assert!(init["result"]["capabilities"]["tools"].is_object());
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(&app, &key, initialized).await.status(), 202);

    assert_eq!(
        tool_names(&app, &key).await,
        ["docs__echo"],
        "`wipe` is not allowed"
    );
    let listed = reply(&app, &key, request(2, "tools/list", json!({}))).await;
    assert_eq!(
        listed["result"]["tools"][0]["inputSchema"]["properties"]["text"]["type"],
        "string"
    );

    let called = post(
        &app,
        &key,
        request(
            3,
            "tools/call",
            json!({"name": "docs__echo", "arguments": {"text": "hello"}}),
        ),
    )
    .await;
    assert_eq!(called.status(), 200);
    let called: Value = called.json().await.unwrap();
    assert_eq!(called["id"], 3);
    assert_eq!(called["result"]["content"][0]["text"], "hello", "{called}");

    for hidden in ["docs__wipe", "nobody__echo", "echo"] {
        let call = request(4, "tools/call", json!({"name": hidden, "arguments": {}}));
        let refused = reply(&app, &key, call).await;
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert_eq!(
            refused["error"]["message"],
            format!("Unknown tool: {hidden}")
        );
    }
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("svc_mcp_tool_calls_total{server=\"docs\",outcome=\"ok\"} 1"),
        "{metrics}"
    );
    let seen = seen.lock().unwrap().clone();
    let calls: Vec<&(String, Option<String>)> =
        seen.iter().filter(|(m, _)| m == "tools/call").collect();
    assert_eq!(
        calls.len(),
        1,
        "only the allowed call reached the server: {seen:?}"
    );
    assert!(
        seen.iter()
            .all(|(_, auth)| auth.as_deref() == Some("Bearer upstream-secret")),
        "the registered headers go with every request to the server: {seen:?}"
    );
}

#[tokio::test]
async fn stateless_requests_carry_their_envelope_and_get_its_results() {
    let (url, _) = start_scripted().await;
    let app = spawn(json!({"docs": {"url": url}})).await;
    let key = app.create_key().await;
    let envelope = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let stateless = |method: &'static str, params: Value| {
        app.client
            .post(app.url("/mcp"))
            .bearer_auth(&key)
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .json(&request(9, method, params))
    };
    let discovered = sent(stateless("server/discover", json!({"_meta": envelope}))).await;
    let versions = discovered["result"]["supportedVersions"]
        .as_array()
        .unwrap();
    assert!(versions.contains(&json!("2026-07-28")) && versions.contains(&json!("2025-11-25")));
    assert_eq!(discovered["result"]["resultType"], "complete");

    let listed = sent(stateless("tools/list", json!({"_meta": envelope}))).await;
    assert_eq!(
        listed["result"]["tools"].as_array().unwrap().len(),
        2,
        "{listed}"
    );
    assert_eq!(listed["result"]["cacheScope"], "private");

    let call = json!({"_meta": envelope, "name": "docs__echo", "arguments": {"text": "hi"}});
    let called = sent(stateless("tools/call", call).header("mcp-name", "docs__echo")).await;
    assert_eq!(called["result"]["content"][0]["text"], "hi", "{called}");

    // A method header that disagrees with the body is refused before anything runs.
    let mismatched = app
        .client
        .post(app.url("/mcp"))
        .bearer_auth(&key)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .json(&request(
            10,
            "tools/call",
            json!({"_meta": envelope, "name": "docs__echo"}),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(mismatched.status(), 400);
    let mismatched: Value = mismatched.json().await.unwrap();
    assert_eq!(mismatched["error"]["code"], -32020);
}

#[tokio::test]
async fn without_a_key_the_401_points_at_the_resource_metadata() {
    let app = spawn(json!({})).await;
    let refused = app
        .client
        .post(app.url("/mcp"))
        .json(&request(1, "tools/list", json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let challenge = refused.headers()["www-authenticate"].to_str().unwrap();
    let metadata_url = app.url("/.well-known/oauth-protected-resource/mcp");
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata_url}\"")
    );
    let metadata: Value = app
        .client
        .get(app.url("/.well-known/oauth-protected-resource/mcp"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        metadata["resource"].as_str().unwrap().ends_with("/mcp"),
        "{metadata}"
    );
    let server = metadata["authorization_servers"][0].as_str().unwrap();
    let oauth: Value = app
        .client
        .get(format!("{server}/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        oauth["device_authorization_endpoint"].is_string(),
        "{oauth}"
    );
}

#[tokio::test]
async fn a_server_that_is_down_is_a_clean_error_that_shows_no_secret() {
    // A port that was free a moment ago: nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("http://{}/mcp", listener.local_addr().unwrap());
    drop(listener);
    let (url, _) = start_scripted().await;
    let app = spawn(json!({
        "down": {"url": down, "headers": {"authorization": "Bearer down-secret"}},
        "docs": {"url": url}
    }))
    .await;
    let key = app.create_key().await;
    assert_eq!(
        tool_names(&app, &key).await,
        ["docs__echo", "docs__wipe"],
        "the others' tools are still listed"
    );
    let failed = post(
        &app,
        &key,
        request(2, "tools/call", json!({"name": "down__echo"})),
    )
    .await;
    assert_eq!(failed.status(), 200);
    let text = failed.text().await.unwrap();
    let failed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(failed["error"]["code"], -32603, "{text}");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`down`"),
        "{text}"
    );
    assert!(
        !text.contains("down-secret") && !text.contains(&down),
        "{text}"
    );
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("svc_mcp_tool_calls_total{server=\"down\",outcome=\"failed\"} 1"),
        "{metrics}"
    );

    let unknown = post(&app, &key, request(3, "resources/list", json!({}))).await;
    assert_eq!(unknown.status(), 404);
    let unknown: Value = unknown.json().await.unwrap();
    assert_eq!(unknown["error"]["code"], -32601);
    let get = app
        .client
        .get(app.url("/mcp"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 405);
}

#[tokio::test]
async fn the_admin_api_lists_the_registered_servers_without_their_secrets() {
    let (url, _) = start_scripted().await;
    let app = spawn(json!({"docs": {"url": url,
        "headers": {"authorization": "Bearer upstream-secret"},
        "allowed_tools": ["echo"], "description": "The docs"}}))
    .await;
    let admin = app.create_admin_key().await;
    let listed = app
        .client
        .get(app.url("/v1/organization/mcp_servers"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    let text = listed.text().await.unwrap();
    assert!(!text.contains("upstream-secret"), "{text}");
    let listed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        listed,
        json!({"object": "list", "data": [{"object": "mcp_server", "label": "docs", "url": url,
            "description": "The docs", "allowed_tools": ["echo"], "headers": ["authorization"]}]})
    );
    // A key that is not an admin key does not read it.
    let key = app.create_key().await;
    let refused = app
        .client
        .get(app.url("/v1/organization/mcp_servers"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
}

/// The methods the scripted server behind `seen` was asked.
fn methods(seen: &Seen) -> Vec<String> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|(m, _)| m.clone())
        .collect()
}

#[tokio::test]
async fn a_key_sees_and_calls_only_the_servers_its_project_and_it_allow() {
    let (docs_url, docs_seen) = start_scripted().await;
    let (wiki_url, wiki_seen) = start_scripted().await;
    let app = spawn(json!({"docs": {"url": docs_url}, "wiki": {"url": wiki_url}})).await;
    let project = app.create_project("docs only", ModelAccess::any()).await;
    let project = ProjectRecord {
        allowed_mcp_servers: McpServerAccess::only(vec!["doc*".into()]).unwrap(),
        ..project
    };
    assert!(app.store.update_project(&project).await.unwrap());
    let in_project = |servers: McpServerAccess| KeyScope {
        project_id: Some(project.id.clone()),
        allowed_mcp_servers: servers,
        ..KeyScope::default()
    };
    let key = app
        .create_scoped_key(None, in_project(McpServerAccess::any()))
        .await;

    // The project's list: none of wiki's tools, and wiki is not even asked.
    assert_eq!(tool_names(&app, &key).await, ["docs__echo", "docs__wipe"]);
    assert!(
        !methods(&wiki_seen).contains(&"tools/list".to_owned()),
        "{:?}",
        methods(&wiki_seen)
    );
    // Calling it is the unknown tool a name no server offers is: nothing
    // says the server exists.
    for name in ["wiki__echo", "nobody__echo"] {
        let call = request(
            3,
            "tools/call",
            json!({"name": name, "arguments": {"text": "x"}}),
        );
        let refused = reply(&app, &key, call).await;
        assert_eq!(
            refused["error"],
            json!({"code": -32602, "message": format!("Unknown tool: {name}")}),
            "{refused}"
        );
    }
    assert!(methods(&wiki_seen).is_empty(), "{:?}", methods(&wiki_seen));
    let call = request(
        4,
        "tools/call",
        json!({"name": "docs__echo", "arguments": {"text": "hi"}}),
    );
    assert_eq!(
        reply(&app, &key, call).await["result"]["content"][0]["text"],
        "hi"
    );

    // A key's own list narrows further, from its next request.
    let record = app
        .keys
        .list(None)
        .await
        .unwrap()
        .into_iter()
        .find(|k| k.project_id == project.id)
        .unwrap();
    let none = McpServerAccess::only(vec![]).unwrap();
    assert!(
        app.keys
            .set_allowed_mcp_servers(&record, &none, &Actor::Operator)
            .await
            .unwrap()
    );
    assert!(tool_names(&app, &key).await.is_empty());
    let call = request(
        5,
        "tools/call",
        json!({"name": "docs__echo", "arguments": {"text": "x"}}),
    );
    assert_eq!(reply(&app, &key, call).await["error"]["code"], -32602);

    // A key that allows wiki in a project that does not sees nothing of
    // it either; a key of the default project sees what its own list says.
    let wiki_key = app
        .create_scoped_key(
            None,
            in_project(McpServerAccess::only(vec!["wiki".into()]).unwrap()),
        )
        .await;
    assert!(tool_names(&app, &wiki_key).await.is_empty());
    let elsewhere = app
        .create_scoped_key(
            None,
            KeyScope {
                allowed_mcp_servers: McpServerAccess::only(vec!["wiki".into()]).unwrap(),
                ..KeyScope::default()
            },
        )
        .await;
    assert_eq!(
        tool_names(&app, &elsewhere).await,
        ["wiki__echo", "wiki__wipe"]
    );
    assert_eq!(
        methods(&docs_seen)
            .iter()
            .filter(|m| *m == "tools/call")
            .count(),
        1,
        "only the allowed call reached docs"
    );
    assert!(
        !methods(&wiki_seen).contains(&"tools/call".to_owned()),
        "{:?}",
        methods(&wiki_seen)
    );
}
