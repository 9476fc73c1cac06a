//! Scripted MCP servers on loopback: a raw one run by a closure, and a fake
//! that speaks either protocol version (or both) and checks what the client
//! sends as the Python SDK's server does.

#![expect(dead_code, reason = "each test file uses its own part of the helpers")]

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub headers: HeaderMap,
    pub body: Value,
}

impl Seen {
    pub fn method(&self) -> &str {
        self.body["method"].as_str().unwrap_or_default()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub type Handler =
    Arc<dyn Fn(Seen) -> Pin<Box<dyn Future<Output = Response> + Send>> + Send + Sync>;

/// A server on loopback whose every POST /mcp is answered by a handler.
pub struct Server {
    pub url: String,
    pub port: u16,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    pub fn methods(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.method().to_owned())
            .collect()
    }
    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Starts a server answering with `handler`, bound to `ip` on a free port.
pub async fn serve_on(ip: &str, handler: Handler) -> Server {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let request = Seen { headers, body };
            log.lock().unwrap().push(request.clone());
            handler(request)
        }),
    );
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server {
        url: format!("http://{ip}:{port}/mcp"),
        port,
        seen,
    }
}

pub async fn serve(handler: Handler) -> Server {
    serve_on("127.0.0.1", handler).await
}

/// A handler from a synchronous closure.
pub fn handler(f: impl Fn(Seen) -> Response + Send + Sync + 'static) -> Handler {
    let f = Arc::new(f);
    Arc::new(move |seen| {
        let f = f.clone();
        Box::pin(async move { f(seen) })
    })
}

pub fn json_response(status: StatusCode, body: Value) -> Response {
    (
        status,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub fn result(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

pub fn error(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({ "code": code, "message": message });
    if let Some(data) = data {
        error["data"] = data;
    }
    json!({ "jsonrpc": "2.0", "id": id, "error": error })
}

/// An event stream that sends a priming event (an id and empty data, as
/// the TypeScript SDK's server opens each stream with), a progress
/// notification, a comment and an event of another id before `message`.
pub fn sse_response(message: &Value) -> Response {
    let progress = json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": { "progressToken": 1, "progress": 0.5 }
    });
    let other = json!({ "jsonrpc": "2.0", "id": 999_999, "result": {} });
    let text = format!(
        "id: priming-1\ndata: \n\n: keepalive\n\nevent: message\ndata: {progress}\n\ndata: {other}\r\n\r\nid: 7\nevent: message\ndata: {message}\n\n"
    );
    (
        StatusCode::OK,
        [("content-type", "text/event-stream")],
        text,
    )
        .into_response()
}

/// Which protocol versions the fake speaks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Speaks {
    /// 2025-11-25 only, as the Python SDK's stateful server: `server/discover`
    /// without a session is a 400.
    Handshake,
    /// 2026-07-28 only: `initialize` is answered with -32022.
    Stateless,
    Both,
}

/// A fake MCP server with a few tools.
pub struct Fake {
    pub speaks: Speaks,
    /// Answer with event streams instead of JSON bodies.
    pub sse: bool,
    /// Tools per `tools/list` page; the fake has `tools` tools in all.
    pub page_size: usize,
    pub tools: usize,
    /// Sessions the fake knows; emptied by `expire`.
    pub sessions: Mutex<HashSet<String>>,
    pub issued: Mutex<usize>,
}

impl Fake {
    pub fn new(speaks: Speaks) -> Self {
        Self {
            speaks,
            sse: false,
            page_size: 100,
            tools: 3,
            sessions: Mutex::new(HashSet::new()),
            issued: Mutex::new(0),
        }
    }

    /// Forgets every session, as a restarted server does.
    pub fn expire(&self) {
        self.sessions.lock().unwrap().clear();
    }

    pub async fn start(self: &Arc<Self>) -> Server {
        let fake = self.clone();
        serve(handler(move |seen| fake.answer(&seen))).await
    }

    /// The fake's answer, for a handler that scripts only some requests.
    pub fn answer_for_test(&self, seen: &Seen) -> Response {
        self.answer(seen)
    }

    fn answer(&self, seen: &Seen) -> Response {
        let id = seen.body.get("id").cloned();
        let method = seen.method().to_owned();
        let Some(id) = id else {
            // A notification: accepted, nothing to say.
            return StatusCode::ACCEPTED.into_response();
        };
        let meta = &seen.body["params"]["_meta"];
        let modern = meta
            .get("io.modelcontextprotocol/protocolVersion")
            .is_some();
        if method == "initialize" {
            if self.speaks == Speaks::Stateless {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    error(
                        &id,
                        -32022,
                        "Unsupported protocol version",
                        Some(json!({ "supported": ["2026-07-28"], "requested": "2025-11-25" })),
                    ),
                );
            }
            let session = {
                let mut issued = self.issued.lock().unwrap();
                *issued += 1;
                format!("session-{issued}")
            };
            self.sessions.lock().unwrap().insert(session.clone());
            let body = result(
                &id,
                json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": { "tools": {} },
                    "serverInfo": { "name": "fake", "version": "1" }
                }),
            );
            let mut response = self.reply(&body);
            response
                .headers_mut()
                .insert("mcp-session-id", session.parse().unwrap());
            return response;
        }
        if modern {
            if self.speaks == Speaks::Handshake {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    error(
                        &Value::Null,
                        -32600,
                        "Bad Request: Missing session ID",
                        None,
                    ),
                );
            }
            if let Err(why) = check_stateless(seen) {
                return json_response(StatusCode::BAD_REQUEST, error(&id, -32020, &why, None));
            }
            if method == "server/discover" {
                return self.reply(&result(
                    &id,
                    json!({
                        "supportedVersions": ["2026-07-28"],
                        "capabilities": { "tools": {} },
                        "resultType": "complete"
                    }),
                ));
            }
        } else {
            if self.speaks == Speaks::Stateless {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    error(&id, -32602, "params._meta is missing", None),
                );
            }
            match seen.header("mcp-session-id") {
                None => {
                    return json_response(
                        StatusCode::BAD_REQUEST,
                        error(
                            &Value::Null,
                            -32600,
                            "Bad Request: Missing session ID",
                            None,
                        ),
                    );
                }
                Some(session) if !self.sessions.lock().unwrap().contains(session) => {
                    return json_response(
                        StatusCode::NOT_FOUND,
                        error(&Value::Null, -32600, "Session not found", None),
                    );
                }
                Some(_) => {}
            }
            if seen.header("mcp-protocol-version") != Some("2025-11-25") {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    error(&id, -32600, "bad MCP-Protocol-Version", None),
                );
            }
        }
        let params = &seen.body["params"];
        let body = match method.as_str() {
            "tools/list" => {
                let start: usize = params["cursor"].as_str().map_or(0, |c| c.parse().unwrap());
                let end = (start + self.page_size).min(self.tools);
                let tools: Vec<Value> = (start..end)
                    .map(|i| {
                        json!({
                            "name": format!("tool{i}"),
                            "description": format!("tool number {i}"),
                            "inputSchema": { "type": "object", "properties": { "text": { "type": "string" } } },
                            "annotations": { "readOnlyHint": i % 2 == 0 }
                        })
                    })
                    .collect();
                let mut page = json!({ "tools": tools });
                if end < self.tools {
                    page["nextCursor"] = json!(end.to_string());
                }
                result(&id, page)
            }
            "tools/call" => match params["name"].as_str() {
                Some("echo" | "météo") => result(
                    &id,
                    json!({
                        "content": [{ "type": "text", "text": params["arguments"]["text"] }],
                        "structuredContent": { "echo": params["arguments"] },
                        "isError": false
                    }),
                ),
                Some("broken") => result(
                    &id,
                    json!({ "content": [{ "type": "text", "text": "it broke" }], "isError": true }),
                ),
                _ => error(
                    &id,
                    -32602,
                    "Unknown tool",
                    Some(json!({ "name": params["name"] })),
                ),
            },
            _ => error(&id, -32601, "Method not found", None),
        };
        self.reply(&body)
    }

    fn reply(&self, body: &Value) -> Response {
        if self.sse {
            sse_response(body)
        } else {
            json_response(StatusCode::OK, body.clone())
        }
    }
}

/// The checks the Python SDK's `classify_inbound_request` makes of a
/// 2026-07-28 request's envelope and headers.
fn check_stateless(seen: &Seen) -> Result<(), String> {
    let meta = &seen.body["params"]["_meta"];
    let version = meta["io.modelcontextprotocol/protocolVersion"].as_str();
    if meta
        .get("io.modelcontextprotocol/clientCapabilities")
        .is_none()
    {
        return Err("missing clientCapabilities".into());
    }
    if version != Some("2026-07-28") || seen.header("mcp-protocol-version") != version {
        return Err("MCP-Protocol-Version does not match".into());
    }
    if seen.header("mcp-method") != Some(seen.method()) {
        return Err("Mcp-Method does not match".into());
    }
    if seen.method() == "tools/call" {
        let name = seen.body["params"]["name"].as_str();
        if decode_header(seen.header("mcp-name")).as_deref() != name {
            return Err("Mcp-Name does not match".into());
        }
    }
    Ok(())
}

fn decode_header(value: Option<&str>) -> Option<String> {
    let value = value?;
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(payload) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(payload)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(value.to_owned()),
    }
}

/// A body of `total` bytes sent in 64 KiB chunks as the client reads them,
/// counting into `sent` what left the server.
pub fn endless_body(total: usize, prefix: &'static str, sent: Arc<Mutex<usize>>) -> Body {
    let chunk = vec![b'x'; 64 * 1024];
    let stream = futures::stream::unfold(0usize, move |done| {
        let sent = sent.clone();
        let chunk = chunk.clone();
        async move {
            if done >= total {
                return None;
            }
            let piece = if done == 0 {
                bytes::Bytes::from(prefix)
            } else {
                bytes::Bytes::from(chunk)
            };
            *sent.lock().unwrap() += piece.len();
            Some((Ok::<_, std::io::Error>(piece.clone()), done + piece.len()))
        }
    });
    Body::from_stream(stream)
}
