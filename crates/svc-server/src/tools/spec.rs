//! What a request asks of an MCP server, read from the dialects' fields:
//! the server (a registered label, or an ad-hoc URL with headers), which
//! of its tools are offered, and which calls wait for the client's
//! approval. Each failure names the field at fault.

use serde_json::Value;
use svc_core::ValidationError;

/// The most headers a request may send to one server.
const MAX_HEADERS: usize = 32;

/// One MCP server a request names, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct McpToolRequest {
    /// Where it came from (`tools[2]`), for errors.
    pub param: String,
    pub label: String,
    /// An ad-hoc server's URL; `None` names a registered server.
    pub url: Option<String>,
    /// Headers to send it, `authorization` included (never shown).
    pub headers: Vec<(String, String)>,
    pub allowed: Allowed,
    pub approval: Approval,
    /// What the dialect calls the label and the URL, for errors.
    pub fields: Fields,
}

/// The names a dialect gives a server's label and URL, which errors name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fields {
    pub label: &'static str,
    pub url: &'static str,
}

impl Fields {
    /// OpenAI's `mcp` tool (Responses, Chat Completions).
    pub const OPENAI: Fields = Fields {
        label: "server_label",
        url: "server_url",
    };
    /// A server of Anthropic's `mcp_servers`.
    pub const ANTHROPIC: Fields = Fields {
        label: "name",
        url: "url",
    };
}

impl Default for Fields {
    fn default() -> Self {
        Fields::OPENAI
    }
}

/// Which of a server's tools are offered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allowed {
    /// Only these; all when `None`.
    pub names: Option<Vec<String>>,
    /// None of these (Anthropic's deny list).
    pub denied: Vec<String>,
    /// Only those the server hints change nothing (`readOnlyHint`).
    pub read_only: bool,
}

impl Allowed {
    /// Whether `tool` is offered.
    pub fn offers(&self, tool: &svc_mcp::Tool) -> bool {
        self.names
            .as_ref()
            .is_none_or(|names| names.contains(&tool.name))
            && !self.denied.contains(&tool.name)
            && (!self.read_only || tool.read_only_hint())
    }
}

/// Which calls wait for the client's approval.
#[derive(Debug, Clone, PartialEq)]
pub enum Approval {
    Always,
    Never,
    /// By name; a tool named in neither list waits.
    Listed {
        always: Vec<String>,
        never: Vec<String>,
    },
}

impl Approval {
    /// Whether a call of `tool` waits for approval.
    pub fn needed(&self, tool: &str) -> bool {
        match self {
            Approval::Always => true,
            Approval::Never => false,
            Approval::Listed { always, never } => {
                always.iter().any(|n| n == tool) || !never.iter().any(|n| n == tool)
            }
        }
    }
}

/// The fields of OpenAI's `mcp` tool (the Responses API's, which Chat
/// Completions take too, as LiteLLM does).
pub struct OpenAiMcpTool<'a> {
    pub server_label: Option<String>,
    pub server_url: Option<String>,
    pub headers: Option<&'a Value>,
    pub authorization: Option<&'a str>,
    pub allowed_tools: Option<&'a Value>,
    pub require_approval: Option<&'a Value>,
}

/// OpenAI's `mcp` tool at `param` (`tools[2]`): a `server_label`, with a
/// `server_url` for an ad-hoc server, and what of it is offered and
/// approved.
pub fn openai_mcp_tool(
    tool: OpenAiMcpTool<'_>,
    param: String,
) -> Result<McpToolRequest, ValidationError> {
    let Some(label) = tool.server_label else {
        return Err(ValidationError::new(
            format!("{param}.server_label"),
            "an mcp tool needs server_label",
        ));
    };
    check_label(&label, &format!("{param}.server_label"))?;
    Ok(McpToolRequest {
        headers: headers(tool.headers, tool.authorization, &param)?,
        allowed: allowed_tools(tool.allowed_tools, &param)?,
        approval: require_approval(tool.require_approval, &param)?,
        url: tool.server_url.filter(|u| !u.is_empty()),
        param,
        label,
        fields: Fields::OPENAI,
    })
}

/// A server label: 1 to 64 characters of letters, digits, `_` and `-`
/// (what a tool name may carry).
pub fn check_label(label: &str, param: &str) -> Result<(), ValidationError> {
    let ok = !label.is_empty()
        && label.len() <= 64
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ValidationError::new(
            param,
            "a server label is 1 to 64 characters of a-z, A-Z, 0-9, _ and -",
        ))
    }
}

/// Headers given as a JSON object of strings, and a bearer token
/// (`authorization`), as one list. Names and values must be valid in
/// HTTP; the token may not come twice.
pub fn headers(
    given: Option<&Value>,
    authorization: Option<&str>,
    param: &str,
) -> Result<Vec<(String, String)>, ValidationError> {
    let mut out = Vec::new();
    match given {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            if map.len() > MAX_HEADERS {
                return Err(ValidationError::new(
                    format!("{param}.headers"),
                    format!("at most {MAX_HEADERS} headers may be sent to a server"),
                ));
            }
            for (name, value) in map {
                let at = format!("{param}.headers.{name}");
                let Some(value) = value.as_str() else {
                    return Err(ValidationError::new(
                        at,
                        "a header's value must be a string",
                    ));
                };
                if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err()
                    || axum::http::HeaderValue::from_str(value).is_err()
                {
                    // The value is not repeated: it may be a secret.
                    return Err(ValidationError::new(
                        at,
                        "not a valid HTTP header name and value",
                    ));
                }
                out.push((name.to_ascii_lowercase(), value.to_owned()));
            }
        }
        Some(_) => {
            return Err(ValidationError::new(
                format!("{param}.headers"),
                "headers must be an object of strings",
            ));
        }
    }
    if let Some(token) = authorization {
        if out.iter().any(|(name, _)| name == "authorization") {
            return Err(ValidationError::new(
                format!("{param}.authorization"),
                "give authorization or an Authorization header, not both",
            ));
        }
        let value = format!("Bearer {token}");
        if token.is_empty() || axum::http::HeaderValue::from_str(&value).is_err() {
            return Err(ValidationError::new(
                format!("{param}.authorization"),
                "authorization must be a non-empty token of printable characters",
            ));
        }
        out.push(("authorization".into(), value));
    }
    Ok(out)
}

/// OpenAI's `allowed_tools`: a list of names, or `{"tool_names": [...],
/// "read_only": bool}`.
pub fn allowed_tools(given: Option<&Value>, param: &str) -> Result<Allowed, ValidationError> {
    let at = format!("{param}.allowed_tools");
    match given {
        None | Some(Value::Null) => Ok(Allowed::default()),
        Some(list @ Value::Array(_)) => Ok(Allowed {
            names: Some(names(list, &at)?),
            ..Allowed::default()
        }),
        Some(Value::Object(filter)) => {
            if let Some(other) = filter
                .keys()
                .find(|k| !matches!(k.as_str(), "tool_names" | "read_only"))
            {
                return Err(ValidationError::new(
                    format!("{at}.{other}"),
                    "allowed_tools takes tool_names and read_only",
                ));
            }
            let names = match filter.get("tool_names") {
                None | Some(Value::Null) => None,
                Some(list) => Some(names(list, &format!("{at}.tool_names"))?),
            };
            let read_only = match filter.get("read_only") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(ValidationError::new(
                        format!("{at}.read_only"),
                        "read_only must be a boolean",
                    ));
                }
            };
            Ok(Allowed {
                names,
                read_only,
                ..Allowed::default()
            })
        }
        Some(_) => Err(ValidationError::new(
            at,
            "allowed_tools must be a list of tool names or {\"tool_names\": [...], \"read_only\": bool}",
        )),
    }
}

/// OpenAI's `require_approval`: `"always"` (the default), `"never"`, or
/// `{"always": {"tool_names": [...]}, "never": {"tool_names": [...]}}`.
pub fn require_approval(given: Option<&Value>, param: &str) -> Result<Approval, ValidationError> {
    let at = format!("{param}.require_approval");
    match given {
        None | Some(Value::Null) => Ok(Approval::Always),
        Some(Value::String(mode)) => match mode.as_str() {
            "always" => Ok(Approval::Always),
            "never" => Ok(Approval::Never),
            other => Err(ValidationError::new(
                at,
                format!(
                    "require_approval must be \"always\", \"never\" or an object (got {other:?})"
                ),
            )),
        },
        Some(Value::Object(lists)) => {
            let mut always = Vec::new();
            let mut never = Vec::new();
            for (which, filter) in lists {
                let names = match filter.get("tool_names") {
                    Some(list) => names(list, &format!("{at}.{which}.tool_names"))?,
                    None => Vec::new(),
                };
                match which.as_str() {
                    "always" => always = names,
                    "never" => never = names,
                    other => {
                        return Err(ValidationError::new(
                            format!("{at}.{other}"),
                            "require_approval's object takes always and never",
                        ));
                    }
                }
            }
            Ok(Approval::Listed { always, never })
        }
        Some(_) => Err(ValidationError::new(
            at,
            "require_approval must be \"always\", \"never\" or an object",
        )),
    }
}

/// A list of tool names.
pub fn names(list: &Value, at: &str) -> Result<Vec<String>, ValidationError> {
    let Some(items) = list.as_array() else {
        return Err(ValidationError::new(at, "must be a list of tool names"));
    };
    items
        .iter()
        .map(|n| {
            n.as_str()
                .map(str::to_owned)
                .ok_or_else(|| ValidationError::new(at, "must be a list of tool names"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(name: &str, read_only: bool) -> svc_mcp::Tool {
        serde_json::from_value(json!({"name": name, "annotations": {"readOnlyHint": read_only}}))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn allowed_tools_as_a_list_or_a_filter() {
        let list = allowed_tools(Some(&json!(["a"])), "tools[0]").unwrap_or_default();
        assert!(list.offers(&tool("a", false)));
        assert!(!list.offers(&tool("b", true)));
        let filter =
            allowed_tools(Some(&json!({"read_only": true})), "tools[0]").unwrap_or_default();
        assert!(filter.offers(&tool("b", true)));
        assert!(!filter.offers(&tool("a", false)));
        let bad = allowed_tools(Some(&json!({"names": []})), "tools[1]");
        assert_eq!(
            bad.map_err(|e| e.param),
            Err("tools[1].allowed_tools.names".into())
        );
    }

    #[test]
    fn approval_defaults_to_always_and_lists_by_name() {
        assert!(require_approval(None, "t").is_ok_and(|a| a.needed("x")));
        let listed = require_approval(Some(&json!({"never": {"tool_names": ["read"]}})), "t");
        assert!(listed.as_ref().is_ok_and(|a| !a.needed("read")));
        assert!(listed.is_ok_and(|a| a.needed("write")));
        assert_eq!(
            require_approval(Some(&json!("sometimes")), "tools[3]").map_err(|e| e.param),
            Err("tools[3].require_approval".into())
        );
    }

    #[test]
    fn headers_are_checked_and_the_token_never_repeated() {
        let out = headers(Some(&json!({"X-Team": "a"})), Some("tok"), "tools[0]");
        assert_eq!(
            out,
            Ok(vec![
                ("x-team".into(), "a".into()),
                ("authorization".into(), "Bearer tok".into())
            ])
        );
        let twice = headers(Some(&json!({"Authorization": "x"})), Some("t"), "tools[0]");
        assert_eq!(
            twice.map_err(|e| e.param),
            Err("tools[0].authorization".into())
        );
        let bad = headers(Some(&json!({"x": "secret\nvalue"})), None, "tools[0]");
        let bad = bad.err().map(|e| e.message).unwrap_or_default();
        assert!(!bad.contains("secret"), "{bad}");
    }
}
