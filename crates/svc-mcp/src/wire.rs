//! What goes over the wire: the protocol versions, the header and `_meta`
//! names, JSON-RPC messages, and the tool types the caller gets.
//!
//! The names follow the official Python SDK (`mcp` 2.3.0 and its
//! `mcp_types`), which is the reference implementation of 2026-07-28.
//! Nothing here does I/O.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::error::Error;

/// The HTTP header carrying the negotiated protocol version.
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
/// The HTTP header carrying a 2025-11-25 session's id.
pub const SESSION_ID_HEADER: &str = "mcp-session-id";
/// The HTTP header mirroring a 2026-07-28 request's JSON-RPC method.
pub const METHOD_HEADER: &str = "mcp-method";
/// The HTTP header mirroring a 2026-07-28 request's named tool, prompt or resource.
pub const NAME_HEADER: &str = "mcp-name";

/// The `_meta` key of a 2026-07-28 request's protocol version.
pub const PROTOCOL_VERSION_META_KEY: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key of a 2026-07-28 request's client name and version.
pub const CLIENT_INFO_META_KEY: &str = "io.modelcontextprotocol/clientInfo";
/// The `_meta` key of a 2026-07-28 request's client capabilities.
pub const CLIENT_CAPABILITIES_META_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

/// The JSON-RPC error code of a request at a protocol version the server does not speak.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// The versions reached through the `initialize` handshake, oldest first.
pub const HANDSHAKE_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The client's name in `clientInfo`.
const CLIENT_NAME: &str = "svc";

/// A protocol version this client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// 2025-11-25: `initialize`, then a session the server may keep.
    Handshake,
    /// 2026-07-28: stateless, each request carrying its version in `_meta`.
    Stateless,
}

impl Version {
    /// The version as it goes on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Handshake => "2025-11-25",
            Self::Stateless => "2026-07-28",
        }
    }
}

/// `clientInfo`: svc's name and version.
pub(crate) fn client_info() -> Value {
    json!({ "name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION") })
}

/// The params of a 2025-11-25 `initialize`.
pub(crate) fn initialize_params() -> Value {
    json!({
        "protocolVersion": Version::Handshake.as_str(),
        "capabilities": {},
        "clientInfo": client_info(),
    })
}

/// `params` with the 2026-07-28 `_meta` envelope added.
pub(crate) fn with_envelope(params: Value) -> Value {
    let mut params = match params {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(
            PROTOCOL_VERSION_META_KEY.to_owned(),
            Value::from(Version::Stateless.as_str()),
        );
        meta.insert(CLIENT_INFO_META_KEY.to_owned(), client_info());
        meta.insert(CLIENT_CAPABILITIES_META_KEY.to_owned(), json!({}));
    }
    Value::Object(params)
}

/// The params key mirrored into `Mcp-Name` for the methods that name something.
pub(crate) fn name_param(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// A header value as the Python SDK's `encode_header_value` writes it: plain
/// printable ASCII without edge whitespace verbatim, anything else wrapped
/// as `=?base64?…?=` so the server can recover the exact string.
pub(crate) fn encode_header_value(value: &str) -> String {
    let printable = value.bytes().all(|b| (0x20..=0x7e).contains(&b));
    let sentinel = value.starts_with("=?base64?") && value.ends_with("?=");
    if printable && value.trim() == value && !sentinel {
        value.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value.as_bytes())
        )
    }
}

/// A header value as [`encode_header_value`] writes it, read back (a
/// server's side of `Mcp-Name`); `None` for a wrapped value that is not
/// base64 of UTF-8.
pub fn decode_header_value(value: &str) -> Option<String> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok()),
        None => Some(value.to_owned()),
    }
}

/// A JSON-RPC request.
pub(crate) fn request(id: u64, method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// A JSON-RPC notification.
pub(crate) fn notification(method: &str) -> Value {
    json!({ "jsonrpc": "2.0", "method": method })
}

/// What one JSON-RPC message from the server means to the request `id`.
pub(crate) enum Reply {
    /// The response to `id`: its result or its error.
    Answer(Result<Value, Error>),
    /// Something else (a notification, a request to the client, another id).
    Other,
}

/// Reads one JSON-RPC message from the server as it concerns the request `id`.
pub(crate) fn reply(message: &[u8], id: u64) -> Result<Reply, Error> {
    let message: Value = serde_json::from_slice(message)
        .map_err(|e| Error::Protocol(format!("not JSON-RPC: {e}")))?;
    let Some(object) = message.as_object() else {
        return Err(Error::Protocol(
            "a JSON-RPC message is not an object".into(),
        ));
    };
    if object.contains_key("method") {
        return Ok(Reply::Other);
    }
    // A server that rejected the request before reading its id answers with
    // `id: null`; that error is this request's.
    let matches = match object.get("id") {
        Some(Value::Number(n)) => n.as_u64() == Some(id),
        Some(Value::String(s)) => s == &id.to_string(),
        Some(Value::Null) | None => object.contains_key("error"),
        _ => false,
    };
    if !matches {
        return Ok(Reply::Other);
    }
    if let Some(error) = object.get("error") {
        return Ok(Reply::Answer(Err(rpc_error(error))));
    }
    match object.get("result") {
        Some(result) => Ok(Reply::Answer(Ok(result.clone()))),
        None => Err(Error::Protocol(
            "a JSON-RPC response has neither result nor error".into(),
        )),
    }
}

/// A JSON-RPC `error` object as the typed error.
pub(crate) fn rpc_error(error: &Value) -> Error {
    Error::Rpc {
        code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
        message: error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        data: error.get("data").cloned(),
    }
}

/// A tool a server offers, as `tools/list` describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    /// The name `tools/call` takes.
    pub name: String,
    /// A display name, if the server gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the tool does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON Schema of the tool's arguments.
    #[serde(default = "empty_object_schema")]
    pub input_schema: Value,
    /// The JSON Schema of the tool's `structuredContent`, if declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// The server's hints (`readOnlyHint`, `destructiveHint`, …), kept as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

impl Tool {
    /// Whether the server hints that the tool changes nothing. A hint only:
    /// an untrusted server may say anything.
    pub fn read_only_hint(&self) -> bool {
        self.annotations
            .as_ref()
            .and_then(|a| a.get("readOnlyHint"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

fn empty_object_schema() -> Value {
    json!({ "type": "object" })
}

/// What `tools/call` returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The content blocks (text, image, resource, …), kept as sent.
    #[serde(default)]
    pub content: Vec<Value>,
    /// The structured result, if the tool gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    /// Whether the tool itself failed (an error the model should see).
    #[serde(default)]
    pub is_error: bool,
}

/// One page of `tools/list`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolPage {
    #[serde(default)]
    pub tools: Vec<Tool>,
    #[serde(default)]
    pub next_cursor: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_outside_printable_ascii_are_wrapped_as_the_python_sdk_does() {
        assert_eq!(encode_header_value("get_weather"), "get_weather");
        for value in ["get_weather", "météo", " x", "=?base64?x?="] {
            assert_eq!(
                decode_header_value(&encode_header_value(value)).as_deref(),
                Some(value)
            );
        }
        assert_eq!(decode_header_value("=?base64?%%?="), None);
        assert_eq!(encode_header_value("météo"), "=?base64?bcOpdMOpbw==?=");
        assert_eq!(encode_header_value(" x"), "=?base64?IHg=?=");
        assert_eq!(
            encode_header_value("=?base64?x?="),
            "=?base64?PT9iYXNlNjQ/eD89?="
        );
    }

    #[test]
    fn an_error_with_a_null_id_answers_the_request() {
        let message = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"bad"}}"#;
        assert!(matches!(
            reply(message, 7),
            Ok(Reply::Answer(Err(Error::Rpc { code: -32600, .. })))
        ));
        let other = br#"{"jsonrpc":"2.0","id":8,"result":{}}"#;
        assert!(matches!(reply(other, 7), Ok(Reply::Other)));
    }
}
