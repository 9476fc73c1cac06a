//! `POST /mcp`: svc's own MCP server (Streamable HTTP, stateless, both
//! protocol eras: [`rpc`]), which offers the tools of the MCP servers the
//! operator registered (`[mcp.servers.<label>]`), named
//! `<label>__<tool>`, and hands each call to its server ([`gateway`]):
//! only the servers the key's project and the key itself allow.
//! The key is the bearer token, as for every endpoint; without one, the
//! 401 points MCP clients at the protected resource's metadata (RFC 9728,
//! `GET /.well-known/oauth-protected-resource/mcp`), which names svc as
//! its authorization server (where the device flow is).

mod gateway;
pub(crate) mod rpc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use svc_core::KeyRecord;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::endpoint::{Dialect, Endpoint};
use crate::error::ApiError;
use crate::extract::{Key, scope};
use crate::openapi::shared;
use crate::pipeline::limited;
use crate::state::AppState;
use rpc::{Call, Era, Fault, METHOD_NOT_FOUND};

/// What this endpoint is: its OpenAPI group, its paths and dialect.
pub(crate) const ENDPOINT: Endpoint = Endpoint::new(
    "mcp",
    "svc's own MCP server (Streamable HTTP, protocol versions 2025-11-25 and before, and 2026-07-28): the tools of the MCP servers the operator registered, named `<server>__<tool>`, each call handed to its server, for any key that may request models: the servers its project's and its own `allowed_mcp_servers` allow.",
)
.paths(&["/mcp"])
.dialect(Dialect::Mcp);

/// Where the protected resource's metadata is (RFC 9728, section 3.1: the
/// well-known prefix, then the resource's path).
pub(crate) const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";

/// The name and version svc gives itself as an MCP server.
const SERVER_NAME: &str = "svc";

/// What a client's model is told of the tools.
const INSTRUCTIONS: &str =
    "The tools of the MCP servers registered on this svc server, each named `<server>__<tool>`.";

crate::openapi::json_schemas! {
    /// A JSON-RPC message (a request or a notification).
    JsonRpcMessage = {"type": "object", "required": ["jsonrpc", "method"], "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": {"type": ["string", "integer"], "description": "Absent on a notification."},
        "method": {"type": "string", "examples": ["initialize", "tools/list", "tools/call", "server/discover"]},
        "params": {"type": "object"}
    }};
    /// A JSON-RPC response: its `result`, or its `error`.
    JsonRpcResponse = {"type": "object", "required": ["jsonrpc", "id"], "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": {"type": ["string", "integer", "null"]},
        "result": {"type": "object"},
        "error": {"type": "object", "required": ["code", "message"], "properties": {
            "code": {"type": "integer"}, "message": {"type": "string"}, "data": {}
        }}
    }};
    /// RFC 9728's protected resource metadata.
    ResourceMetadata = {"type": "object", "required": ["resource", "authorization_servers"], "properties": {
        "resource": {"type": "string", "format": "uri"},
        "authorization_servers": {"type": "array", "items": {"type": "string", "format": "uri"}},
        "bearer_methods_supported": {"type": "array", "items": {"type": "string"}},
        "resource_name": {"type": "string"}
    }};
}

/// The routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(serve))
        .routes(routes!(resource_metadata))
        .routes(routes!(list_servers))
}

#[utoipa::path(post, path = "/mcp", tag = "mcp", operation_id = "mcp",
    summary = "One MCP message: `initialize` or `server/discover`, `tools/list`, `tools/call`, `ping`, or a notification.",
    description = "Streamable HTTP without sessions: each POST is one JSON-RPC message, answered with one JSON-RPC response (`application/json`); a notification or a client's response is acknowledged with a 202. A request whose `MCP-Protocol-Version` header names 2026-07-28 must carry the version and client capabilities in `params._meta` and mirror its method (and a tool call's name) in `Mcp-Method` (and `Mcp-Name`), else a 400 with error -32020. Tools are those of the registered servers the key's project and the key allow (`allowed_mcp_servers`), named `<server>__<tool>`; a call of a name no such server offers is error -32602, a server the key may not use answered as one that is not registered. There is no GET stream (405).",
    security(("bearer" = ["model.request"])),
    request_body(content = inline(JsonRpcMessage), content_type = "application/json"),
    responses(
        (status = 200, description = "The JSON-RPC response: the method's `result`, or an `error` (an unknown tool is -32602; a server that failed, -32603).", body = inline(JsonRpcResponse)),
        (status = 202, description = "A notification, or a response from the client: acknowledged, nothing to answer."),
        (status = 400, description = "A body that is no JSON-RPC request (-32700, -32600), or a 2026-07-28 request whose envelope or headers do not agree (-32602, -32020) or whose version is not served (-32022).", body = inline(JsonRpcResponse)),
        (status = 401, description = "The key is missing, unknown, revoked or expired. `WWW-Authenticate` names the protected resource's metadata (`resource_metadata`), for MCP clients to find svc's authorization server.", body = svc_api::ErrorBody),
        (status = 403, response = shared::Forbidden),
        (status = 404, description = "An unknown method (-32601).", body = inline(JsonRpcResponse)),
        (status = 413, response = shared::PayloadTooLarge),
        (status = 429, description = "The key's rate limit (`type` `rate_limit_exceeded`).", body = svc_api::ErrorBody),
        (status = 500, response = shared::InternalServerError),
    ))]
pub async fn serve(
    key: Result<Key<scope::ModelRequest>, ApiError>,
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = match key {
        Ok(Key(key, _)) => key,
        Err(e) => return unauthorized(&state, e),
    };
    let (state, headers, body) = (&state, &headers, &body);
    limited(&state.admission, key, |key, _metering| async move {
        Ok::<_, ApiError>(answer(state, &key, headers, body).await)
    })
    .await
}

/// A refused key's answer: a 401 names where the resource's metadata is.
fn unauthorized(state: &AppState, error: ApiError) -> Response {
    let mut response = error.into_response();
    if response.status() == StatusCode::UNAUTHORIZED {
        let challenge = format!(
            "Bearer resource_metadata=\"{}{RESOURCE_METADATA_PATH}\"",
            state.public_url
        );
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
    }
    response
}

/// The answer to the posted message, for `key`.
async fn answer(state: &AppState, key: &KeyRecord, headers: &HeaderMap, body: &[u8]) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let routing = rpc::Headers {
        version: header("mcp-protocol-version"),
        method: header("mcp-method"),
        name: header("mcp-name"),
    };
    match rpc::read(body, routing) {
        Err(fault) => faulted(&fault),
        Ok(None) => StatusCode::ACCEPTED.into_response(),
        Ok(Some(call)) => match dispatch(state, key, &call).await {
            Ok(reply) => Json(reply).into_response(),
            Err(fault) => faulted(&fault),
        },
    }
}

/// A JSON-RPC error, with its HTTP status.
fn faulted(fault: &Fault) -> Response {
    let status = StatusCode::from_u16(fault.status()).unwrap_or(StatusCode::OK);
    (status, Json(fault.body())).into_response()
}

/// What `call` asks, answered for `key`.
async fn dispatch(state: &AppState, key: &KeyRecord, call: &Call) -> Result<Value, Fault> {
    let server_info = json!({"name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION")});
    let capabilities = json!({"tools": {"listChanged": false}});
    match (call.method.as_str(), call.era) {
        ("initialize", Era::Handshake) => Ok(rpc::result(
            call,
            json!({
                "protocolVersion": rpc::negotiated(&call.params),
                "capabilities": capabilities,
                "serverInfo": server_info,
                "instructions": INSTRUCTIONS,
            }),
            false,
        )),
        ("server/discover", _) => {
            let mut versions: Vec<&str> = rpc::HANDSHAKE_VERSIONS.to_vec();
            versions.push(rpc::STATELESS_VERSION);
            Ok(rpc::result(
                call,
                json!({
                    "supportedVersions": versions,
                    "capabilities": capabilities,
                    "instructions": INSTRUCTIONS,
                }),
                true,
            ))
        }
        ("ping", _) => Ok(rpc::result(call, json!({}), false)),
        ("tools/list", _) => Ok(rpc::result(
            call,
            gateway::list(&state.mcp, key).await,
            true,
        )),
        ("tools/call", _) => {
            let cap = crate::tools::DailyCap::of(state, key);
            let result =
                gateway::call(&state.mcp, key, &state.metrics, cap, &call.id, &call.params).await?;
            Ok(rpc::result(call, result, false))
        }
        (method, _) => Err(Fault::new(
            call.id.clone(),
            METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )),
    }
}

#[utoipa::path(get, path = "/.well-known/oauth-protected-resource/mcp", tag = "mcp", operation_id = "getMcpResourceMetadata",
    summary = "OAuth 2.0 protected resource metadata (RFC 9728) of `/mcp`: svc is its own authorization server.",
    responses((status = 200, description = "The metadata: `resource` is `<public URL>/mcp`, `authorization_servers` the public URL, whose `/.well-known/oauth-authorization-server` describes the device flow.", body = inline(ResourceMetadata))))]
pub async fn resource_metadata(State(state): State<AppState>) -> Json<Value> {
    Json(json!({
        "resource": format!("{}/mcp", state.public_url),
        "authorization_servers": [&*state.public_url],
        "bearer_methods_supported": ["header"],
        "resource_name": SERVER_NAME,
    }))
}

#[utoipa::path(get, path = "/v1/organization/mcp_servers", tag = "mcp", operation_id = "listMcpServers",
    summary = "The MCP servers the operator registered (`[mcp.servers.<label>]`), by label: their URLs, descriptions, allowed tools and the names of their headers, never a header's value.",
    security(("bearer" = ["api.management.read"])),
    responses(
        (status = 200, description = "The registered servers.", body = svc_api::mcp::McpServerList),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 500, response = shared::InternalServerError),
    ))]
pub async fn list_servers(
    Key(_, _): Key<scope::ManagementRead>,
    State(state): State<AppState>,
) -> Json<svc_api::mcp::McpServerList> {
    Json(svc_api::mcp::McpServerList {
        object: "list".into(),
        data: state
            .mcp
            .servers
            .values()
            .map(|s| s.shown.clone())
            .collect(),
    })
}
