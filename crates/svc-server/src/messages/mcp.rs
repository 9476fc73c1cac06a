//! Anthropic's MCP connector read into the dialect-neutral
//! [`McpToolRequest`]s of [`crate::tools`]: the servers of `mcp_servers`
//! and which of their tools are offered, in either form Anthropic has had:
//!
//! - `mcp-client-2025-11-20`: each server named by exactly one
//!   `{"type": "mcp_toolset", "mcp_server_name", "default_config",
//!   "configs"}` tool; `default_config.enabled` (default true) says whether
//!   a tool is offered, `configs.<tool>.enabled` overrides it per tool (an
//!   allowlist when the default is off, a denylist when it is on);
//! - `mcp-client-2025-04-04`: no toolset, the server's own
//!   `tool_configuration` (`enabled`, `allowed_tools`).
//!
//! Which form a request uses is read from its `tools` (any `mcp_toolset`
//! means the newer), not from its `anthropic-beta` header, which svc
//! accepts without reading. There are no approvals in this dialect: svc
//! calls the tools at once. Each failure names the field at fault.
//!
//! A server registered in svc is named by its `name` (its label) or its
//! `url` ([`registered`], which needs the registry and the key, so it runs
//! in the route); every other `url` is an ad-hoc server, which the
//! toolset's SSRF guard checks.

use svc_api::messages::{McpServerDefinition, MessagesTool};
use svc_core::{KeyRecord, ValidationError};

use crate::state::mcp::McpServers;
use crate::tools::McpToolRequest;
use crate::tools::spec::{self, Allowed, Approval, Fields};

/// The most servers one request may name.
pub const MAX_MCP_SERVERS: usize = 16;

/// The servers of `mcp_servers`, each with the tools its toolset in
/// `tools` (or its `tool_configuration`) offers.
pub fn servers(
    servers: Vec<McpServerDefinition>,
    tools: &[MessagesTool],
) -> Result<Vec<McpToolRequest>, ValidationError> {
    if servers.len() > MAX_MCP_SERVERS {
        return Err(ValidationError::new(
            "mcp_servers",
            format!(
                "mcp_servers may hold at most {MAX_MCP_SERVERS} servers (got {})",
                servers.len()
            ),
        ));
    }
    let toolsets: Vec<(usize, &MessagesTool)> = tools
        .iter()
        .enumerate()
        .filter(|(_, t)| t.kind.as_deref() == Some("mcp_toolset"))
        .collect();
    let mut out: Vec<McpToolRequest> = Vec::with_capacity(servers.len());
    for (i, server) in servers.into_iter().enumerate() {
        let param = format!("mcp_servers[{i}]");
        match server.kind.as_deref() {
            None | Some("url") => {}
            Some(other) => {
                return Err(ValidationError::new(
                    format!("{param}.type"),
                    format!("an MCP server's type must be \"url\" (got {other:?})"),
                ));
            }
        }
        let Some(label) = server.name else {
            return Err(ValidationError::new(
                format!("{param}.name"),
                "an MCP server needs a name",
            ));
        };
        spec::check_label(&label, &format!("{param}.name"))?;
        if out.iter().any(|s| s.label == label) {
            return Err(ValidationError::new(
                format!("{param}.name"),
                format!("the MCP server name {label:?} is used twice"),
            ));
        }
        let Some(url) = server.url.filter(|u| !u.is_empty()) else {
            return Err(ValidationError::new(
                format!("{param}.url"),
                "an MCP server needs a url (a registered server's label will do)",
            ));
        };
        let headers = match server.authorization_token.as_deref() {
            None => Vec::new(),
            // The token's own checks, said of this dialect's field.
            Some(token) => spec::headers(None, Some(token), &param).map_err(|e| {
                ValidationError::new(format!("{param}.authorization_token"), e.message)
            })?,
        };
        let allowed = if toolsets.is_empty() {
            configured(server.tool_configuration.as_ref())
        } else {
            if server.tool_configuration.is_some() {
                return Err(ValidationError::new(
                    format!("{param}.tool_configuration"),
                    "with mcp_toolset tools, a server's tools are configured in its toolset",
                ));
            }
            let named = toolsets
                .iter()
                .find(|(_, t)| t.mcp_server_name.as_deref() == Some(label.as_str()));
            let Some((_, toolset)) = named else {
                return Err(ValidationError::new(
                    format!("{param}.name"),
                    format!(
                        "no mcp_toolset in tools names the MCP server {label:?}; each server needs one"
                    ),
                ));
            };
            toolset_allows(toolset)
        };
        out.push(McpToolRequest {
            param,
            label,
            url: Some(url),
            headers,
            allowed,
            approval: Approval::Never,
            fields: Fields::ANTHROPIC,
        });
    }
    // Each toolset names one server, and a server has one toolset.
    for (n, (i, toolset)) in toolsets.iter().enumerate() {
        let at = format!("tools[{i}].mcp_server_name");
        let Some(name) = toolset.mcp_server_name.as_deref() else {
            return Err(ValidationError::new(
                at,
                "an mcp_toolset needs mcp_server_name",
            ));
        };
        if !out.iter().any(|s| s.label == name) {
            return Err(ValidationError::new(
                at,
                format!("no server of mcp_servers is named {name:?}"),
            ));
        }
        if toolsets[..n]
            .iter()
            .any(|(_, t)| t.mcp_server_name.as_deref() == Some(name))
        {
            return Err(ValidationError::new(
                at,
                format!("the MCP server {name:?} has an mcp_toolset already"),
            ));
        }
    }
    Ok(out)
}

/// The older form's `tool_configuration`: `enabled: false` offers nothing,
/// `allowed_tools` only those.
fn configured(config: Option<&svc_api::messages::McpToolConfiguration>) -> Allowed {
    let Some(config) = config else {
        return Allowed::default();
    };
    let names = if config.enabled == Some(false) {
        Some(Vec::new())
    } else {
        config.allowed_tools.clone()
    };
    Allowed {
        names,
        ..Allowed::default()
    }
}

/// An `mcp_toolset`'s tools: every tool enabled by default unless
/// `default_config.enabled` is false, `configs` overriding it by name.
fn toolset_allows(toolset: &MessagesTool) -> Allowed {
    let default_on = toolset
        .default_config
        .as_ref()
        .and_then(|c| c.enabled)
        .unwrap_or(true);
    let configs = toolset.configs.iter().flatten();
    if default_on {
        Allowed {
            denied: configs
                .filter(|(_, c)| c.enabled == Some(false))
                .map(|(name, _)| name.clone())
                .collect(),
            ..Allowed::default()
        }
    } else {
        Allowed {
            names: Some(
                configs
                    .filter(|(_, c)| c.enabled == Some(true))
                    .map(|(name, _)| name.clone())
                    .collect(),
            ),
            ..Allowed::default()
        }
    }
}

/// A server the `key` may use is named by its label or its URL: such a
/// request becomes one of the registered server (its label, the
/// operator's URL and headers). A `url` that is the URL of a registered
/// server the key may use names it whatever its `name`; a `name` that is
/// such a server's label names it when the `url` is its URL or the label
/// itself, and any other `url` with it is refused (which of the two was
/// meant is not guessed). Every other request stays ad-hoc, for the
/// toolset's guard: a server the key may not use is as unknown to it as
/// one never registered.
pub fn registered(
    registry: &McpServers,
    key: &KeyRecord,
    mut request: McpToolRequest,
) -> Result<McpToolRequest, ValidationError> {
    let Some(url) = request.url.clone() else {
        return Ok(request);
    };
    let usable =
        |label: &str| registry.servers.contains_key(label) && key.may_use_mcp_server(label);
    let parsed = url::Url::parse(&url).ok();
    let by_url = parsed.as_ref().and_then(|parsed| {
        registry.servers.iter().find_map(|(label, server)| {
            (url::Url::parse(server.url.as_str()).ok().as_ref() == Some(parsed) && usable(label))
                .then(|| label.clone())
        })
    });
    if let Some(label) = by_url {
        request.label = label;
        request.url = None;
        return Ok(request);
    }
    if usable(&request.label) {
        if url == request.label {
            request.url = None;
            return Ok(request);
        }
        return Err(ValidationError::new(
            format!("{}.url", request.param),
            format!(
                "{:?} is the label of a registered MCP server, whose URL this is not; give its URL or its label as the url, or another name for an ad-hoc server",
                request.label
            ),
        ));
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read(
        servers: serde_json::Value,
        tools: serde_json::Value,
    ) -> Result<Vec<McpToolRequest>, ValidationError> {
        let servers = serde_json::from_value(servers).unwrap_or_default();
        let tools: Vec<MessagesTool> = serde_json::from_value(tools).unwrap_or_default();
        super::servers(servers, &tools)
    }

    fn tool(name: &str) -> svc_mcp::Tool {
        serde_json::from_value(json!({"name": name})).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_toolset_allows_or_denies_by_its_default() {
        let server = json!([{"type": "url", "url": "docs", "name": "docs"}]);
        let deny = read(
            server.clone(),
            json!([{"type": "mcp_toolset", "mcp_server_name": "docs",
                    "configs": {"wipe": {"enabled": false}}}]),
        )
        .unwrap_or_default();
        assert!(deny[0].allowed.offers(&tool("echo")));
        assert!(!deny[0].allowed.offers(&tool("wipe")));
        let allow = read(
            server,
            json!([{"type": "mcp_toolset", "mcp_server_name": "docs",
                    "default_config": {"enabled": false, "defer_loading": true},
                    "configs": {"echo": {"enabled": true}, "wipe": {"defer_loading": true}}}]),
        )
        .unwrap_or_default();
        assert!(allow[0].allowed.offers(&tool("echo")));
        assert!(!allow[0].allowed.offers(&tool("wipe")));
        assert_eq!(allow[0].approval, Approval::Never);
    }

    #[test]
    fn the_older_form_filters_by_tool_configuration() {
        let off = read(
            json!([{"url": "docs", "name": "docs", "tool_configuration": {"enabled": false}}]),
            json!([]),
        )
        .unwrap_or_default();
        assert!(!off[0].allowed.offers(&tool("echo")));
        let listed = read(
            json!([{"url": "docs", "name": "docs",
                    "tool_configuration": {"allowed_tools": ["echo"]}}]),
            json!([]),
        )
        .unwrap_or_default();
        assert!(listed[0].allowed.offers(&tool("echo")));
        assert!(!listed[0].allowed.offers(&tool("wipe")));
    }

    #[test]
    fn each_failure_names_its_field() {
        let param = |servers, tools| read(servers, tools).err().map(|e| e.param);
        let docs = json!({"type": "url", "url": "docs", "name": "docs"});
        let toolset = json!({"type": "mcp_toolset", "mcp_server_name": "docs"});
        assert_eq!(
            param(json!([{"url": "x"}]), json!([])),
            Some("mcp_servers[0].name".into())
        );
        assert_eq!(
            param(json!([{"name": "docs"}]), json!([])),
            Some("mcp_servers[0].url".into())
        );
        assert_eq!(
            param(json!([{"type": "sse", "url": "x", "name": "a"}]), json!([])),
            Some("mcp_servers[0].type".into())
        );
        assert_eq!(
            param(json!([docs, docs]), json!([])),
            Some("mcp_servers[1].name".into())
        );
        assert_eq!(
            param(json!([docs]), json!([toolset, toolset])),
            Some("tools[1].mcp_server_name".into())
        );
        assert_eq!(
            param(
                json!([{"url": "docs", "name": "docs", "tool_configuration": {}}]),
                json!([toolset])
            ),
            Some("mcp_servers[0].tool_configuration".into())
        );
        let token = param(
            json!([{"url": "docs", "name": "docs", "authorization_token": "bad\nsecret"}]),
            json!([]),
        );
        assert_eq!(token, Some("mcp_servers[0].authorization_token".into()));
    }
}
