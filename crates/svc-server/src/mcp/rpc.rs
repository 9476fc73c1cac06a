//! svc's side of MCP's JSON-RPC over Streamable HTTP, without HTTP: a
//! posted message read (a call, or a notification to acknowledge), the
//! protocol era it is in, and the replies. Both eras are served by one
//! stateless server: 2025-11-25 and before (`initialize`, which svc
//! answers without a session id, so clients send none) and 2026-07-28
//! (each request carries its version in `_meta` and mirrors its method in
//! headers; `server/discover` instead of `initialize`). A request is
//! routed to the 2026-07-28 checks when its `MCP-Protocol-Version` header
//! names a version that is not one of the handshake's, as the official
//! Python SDK routes it.

use serde_json::{Value, json};
pub(crate) use svc_mcp::HANDSHAKE_VERSIONS;
use svc_mcp::{CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY, decode_header_value};

/// The stateless version.
pub(crate) const STATELESS_VERSION: &str = svc_mcp::Version::Stateless.as_str();

/// JSON-RPC's and MCP's error codes.
pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
pub(crate) const INTERNAL_ERROR: i64 = -32603;
pub(crate) const HEADER_MISMATCH: i64 = -32020;
pub(crate) use svc_mcp::UNSUPPORTED_PROTOCOL_VERSION;

/// Which protocol a call is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2025-11-25 or before: results as they were.
    Handshake,
    /// 2026-07-28: every result says `resultType`, lists their caching.
    Stateless,
}

/// The routing headers of a request, as sent.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Headers<'a> {
    /// `MCP-Protocol-Version`.
    pub version: Option<&'a str>,
    /// `Mcp-Method`.
    pub method: Option<&'a str>,
    /// `Mcp-Name`.
    pub name: Option<&'a str>,
}

/// A request to answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    pub id: Value,
    pub method: String,
    /// Its params (an empty object when it has none).
    pub params: Value,
    pub era: Era,
}

/// A JSON-RPC error, with the request's id (`null` when it had none).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fault {
    pub id: Value,
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl Fault {
    pub(crate) fn new(id: Value, code: i64, message: impl Into<String>) -> Self {
        Fault {
            id,
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The HTTP status it is sent with: a message the server could not
    /// take is a 400, an unknown method a 404 (as the Python SDK answers
    /// them); an error of a method it ran, 200.
    pub(crate) fn status(&self) -> u16 {
        match self.code {
            PARSE_ERROR | INVALID_REQUEST | HEADER_MISMATCH | UNSUPPORTED_PROTOCOL_VERSION => 400,
            METHOD_NOT_FOUND => 404,
            _ => 200,
        }
    }

    /// Its JSON-RPC message.
    pub(crate) fn body(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        json!({"jsonrpc": "2.0", "id": self.id, "error": error})
    }
}

/// What a posted body is: a call to answer, or `None` for a notification
/// or a client's response (acknowledged with a 202 and dropped: there is
/// no session for them to act on).
pub(crate) fn read(body: &[u8], headers: Headers<'_>) -> Result<Option<Call>, Fault> {
    let message: Value = serde_json::from_slice(body)
        .map_err(|e| Fault::new(Value::Null, PARSE_ERROR, format!("Parse error: {e}")))?;
    let Value::Object(message) = message else {
        return Err(Fault::new(
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request: one JSON-RPC message a POST (batches are not taken)",
        ));
    };
    let id = message.get("id").cloned();
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Fault::new(
            id.unwrap_or(Value::Null),
            INVALID_REQUEST,
            "Invalid Request: `jsonrpc` must be \"2.0\"",
        ));
    }
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        // A response or an error from the client: nothing asked it.
        if message.contains_key("result") || message.contains_key("error") {
            return Ok(None);
        }
        return Err(Fault::new(
            id.unwrap_or(Value::Null),
            INVALID_REQUEST,
            "Invalid Request: `method` must be a string",
        ));
    };
    let Some(id) = id.filter(|id| id.is_string() || id.is_i64() || id.is_u64()) else {
        if message.contains_key("id") {
            return Err(Fault::new(
                Value::Null,
                INVALID_REQUEST,
                "Invalid Request: `id` must be a string or an integer",
            ));
        }
        return Ok(None);
    };
    let params = match message.get("params") {
        None | Some(Value::Null) => json!({}),
        Some(params @ Value::Object(_)) => params.clone(),
        Some(_) => {
            return Err(Fault::new(
                id,
                INVALID_PARAMS,
                "Invalid params: `params` must be an object",
            ));
        }
    };
    let stateless = headers
        .version
        .is_some_and(|v| !HANDSHAKE_VERSIONS.contains(&v));
    if stateless {
        check_stateless(&id, method, &params, headers)?;
    }
    Ok(Some(Call {
        id,
        method: method.to_owned(),
        params,
        era: if stateless {
            Era::Stateless
        } else {
            Era::Handshake
        },
    }))
}

/// A 2026-07-28 request's envelope and headers, in the Python SDK's order:
/// the `_meta` pair, the headers agreeing with the body, then the version.
fn check_stateless(
    id: &Value,
    method: &str,
    params: &Value,
    headers: Headers<'_>,
) -> Result<(), Fault> {
    let fault = |code, message: String| Fault::new(id.clone(), code, message);
    let Some(meta) = params.get("_meta").and_then(Value::as_object) else {
        return Err(fault(
            INVALID_PARAMS,
            format!(
                "params._meta must be an object carrying {PROTOCOL_VERSION_META_KEY:?} and {CLIENT_CAPABILITIES_META_KEY:?}"
            ),
        ));
    };
    let missing: Vec<&str> = [PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY]
        .into_iter()
        .filter(|key| !meta.contains_key(*key))
        .collect();
    if !missing.is_empty() {
        return Err(fault(
            INVALID_PARAMS,
            format!(
                "params._meta is missing the required envelope key(s): {}",
                missing.join(", ")
            ),
        ));
    }
    let version = &meta[PROTOCOL_VERSION_META_KEY];
    if headers.version != version.as_str() {
        return Err(fault(
            HEADER_MISMATCH,
            "mcp-protocol-version header does not match the request envelope's protocol version"
                .into(),
        ));
    }
    if headers.method != Some(method) {
        return Err(fault(
            HEADER_MISMATCH,
            "mcp-method header does not match the request body's method".into(),
        ));
    }
    if method == "tools/call"
        && let Some(name) = params.get("name").and_then(Value::as_str)
        && headers.name.and_then(decode_header_value).as_deref() != Some(name)
    {
        return Err(fault(
            HEADER_MISMATCH,
            "mcp-name header does not match the request body's 'name' parameter".into(),
        ));
    }
    if version.as_str() != Some(STATELESS_VERSION) {
        let mut unsupported = fault(
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version".into(),
        );
        unsupported.data = Some(json!({"supported": [STATELESS_VERSION], "requested": version}));
        return Err(unsupported);
    }
    Ok(())
}

/// The reply to `call` with its `result`. A 2026-07-28 result says that it
/// is complete, and a cacheable one (`listed`: a list or the server's
/// description) that it may not be cached: what a key may see changes
/// with the key.
pub(crate) fn result(call: &Call, mut result: Value, listed: bool) -> Value {
    if call.era == Era::Stateless
        && let Value::Object(fields) = &mut result
    {
        fields.insert("resultType".into(), json!("complete"));
        if listed {
            fields.insert("ttlMs".into(), json!(0));
            fields.insert("cacheScope".into(), json!("private"));
        }
    }
    json!({"jsonrpc": "2.0", "id": call.id, "result": result})
}

/// The version `initialize` answers with: the client's, when svc speaks
/// it, else svc's latest (the client then decides whether it can go on).
pub(crate) fn negotiated(params: &Value) -> &'static str {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    HANDSHAKE_VERSIONS
        .iter()
        .find(|v| Some(**v) == asked)
        .copied()
        .unwrap_or(HANDSHAKE_VERSIONS[HANDSHAKE_VERSIONS.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stateless<'a>(method: &'a str, name: Option<&'a str>) -> Headers<'a> {
        Headers {
            version: Some(STATELESS_VERSION),
            method: Some(method),
            name,
        }
    }

    fn envelope(method: &str, params: Value) -> Vec<u8> {
        let mut params = params;
        params["_meta"] = json!({
            PROTOCOL_VERSION_META_KEY: STATELESS_VERSION,
            CLIENT_CAPABILITIES_META_KEY: {},
        });
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
            .unwrap()
    }

    #[test]
    fn calls_notifications_and_responses_are_told_apart() {
        let call = read(
            br#"{"jsonrpc":"2.0","id":"a","method":"tools/list"}"#,
            Headers::default(),
        )
        .unwrap()
        .unwrap();
        assert_eq!((call.id, call.era), (json!("a"), Era::Handshake));
        assert_eq!(call.params, json!({}));
        for acknowledged in [
            &br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#[..],
            br#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
        ] {
            assert_eq!(read(acknowledged, Headers::default()), Ok(None));
        }
    }

    #[test]
    fn what_is_no_message_is_a_400_fault_with_its_code() {
        for (body, code) in [
            (&b"{nope"[..], PARSE_ERROR),
            (b"[]", INVALID_REQUEST),
            (
                br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
                INVALID_REQUEST,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
                INVALID_REQUEST,
            ),
        ] {
            let fault = read(body, Headers::default()).unwrap_err();
            assert_eq!((fault.code, fault.status()), (code, 400), "{fault:?}");
        }
        let fault = read(
            br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}"#,
            Headers::default(),
        )
        .unwrap_err();
        assert_eq!((fault.code, fault.id), (INVALID_PARAMS, json!(1)));
    }

    #[test]
    fn a_stateless_request_has_its_envelope_and_matching_headers() {
        let body = envelope("tools/call", json!({"name": "météo"}));
        let encoded = "=?base64?bcOpdMOpbw==?=";
        let call = read(&body, stateless("tools/call", Some(encoded)))
            .unwrap()
            .unwrap();
        assert_eq!(call.era, Era::Stateless);
        let wrong = [
            (stateless("tools/list", Some(encoded)), HEADER_MISMATCH),
            (stateless("tools/call", Some("other")), HEADER_MISMATCH),
            (
                Headers {
                    version: Some("2099-01-01"),
                    ..stateless("tools/call", Some(encoded))
                },
                HEADER_MISMATCH,
            ),
        ];
        for (headers, code) in wrong {
            assert_eq!(read(&body, headers).unwrap_err().code, code);
        }
        let bare = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
        let fault = read(bare, stateless("tools/list", None)).unwrap_err();
        assert_eq!((fault.code, fault.status()), (INVALID_PARAMS, 200));
    }

    #[test]
    fn an_unknown_stateless_version_names_the_one_served() {
        let mut body: Value = serde_json::from_slice(&envelope("tools/list", json!({}))).unwrap();
        body["params"]["_meta"][PROTOCOL_VERSION_META_KEY] = json!("2099-01-01");
        let headers = Headers {
            version: Some("2099-01-01"),
            method: Some("tools/list"),
            name: None,
        };
        let fault = read(&serde_json::to_vec(&body).unwrap(), headers).unwrap_err();
        assert_eq!(fault.code, UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(fault.data.unwrap()["supported"], json!([STATELESS_VERSION]));
    }

    #[test]
    fn results_say_what_their_era_wants() {
        let mut call = Call {
            id: json!(1),
            method: "tools/list".into(),
            params: json!({}),
            era: Era::Handshake,
        };
        assert_eq!(
            result(&call, json!({"tools": []}), true),
            json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}})
        );
        call.era = Era::Stateless;
        let reply = result(&call, json!({"tools": []}), true);
        assert_eq!(reply["result"]["resultType"], "complete");
        assert_eq!(reply["result"]["cacheScope"], "private");
        assert_eq!(
            negotiated(&json!({"protocolVersion": "2025-06-18"})),
            "2025-06-18"
        );
        assert_eq!(
            negotiated(&json!({"protocolVersion": "1999-01-01"})),
            "2025-11-25"
        );
    }
}
