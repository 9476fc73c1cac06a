//! The registered servers' tools as one server's: listed under
//! `<label>__<tool>` names, each call handed to its server. A server that
//! cannot list its tools is left out of the list (and said in the log),
//! so that one server down does not hide the others'. Only the servers the
//! key may use are listed or called ([`McpServers::usable_by`]): another
//! is, to that key, not registered.

use std::time::Instant;

use serde_json::{Value, json};
use svc_core::KeyRecord;

use super::rpc::{Fault, INTERNAL_ERROR, INVALID_PARAMS};
use crate::config::mcp::SEPARATOR;
use crate::metrics::{Metrics, ToolOutcome};
use crate::state::mcp::McpServers;
use crate::tools::DailyCap;

/// `tools/list`'s result: every offered tool of every registered server
/// `key` may use, by label, those servers asked at once (the others not
/// at all).
pub(crate) async fn list(servers: &McpServers, key: &KeyRecord) -> Value {
    let lists =
        futures::future::join_all(servers.usable_by(key).map(|(label, server)| async move {
            (label, server, server.client.list_tools().await)
        }))
        .await;
    let mut tools = Vec::new();
    for (label, server, listed) in lists {
        match listed {
            Ok(listed) => {
                for tool in listed.into_iter().filter(|t| server.offers(&t.name)) {
                    let name = format!("{label}{SEPARATOR}{}", tool.name);
                    let mut tool = serde_json::to_value(tool).unwrap_or(Value::Null);
                    tool["name"] = json!(name);
                    tools.push(tool);
                }
            }
            Err(e) => {
                tracing::warn!(target: "svc::mcp", server = %label, error = %e, "cannot list the MCP server's tools");
            }
        }
    }
    json!({"tools": tools})
}

/// `tools/call`'s result: the call handed to the server its name's label
/// names, when `key` may use that server and it offers the tool. A name
/// no such server offers is an unknown tool (invalid params, as MCP
/// says), whatever the reason: a server the key may not use is not told
/// apart from one that is not registered.
pub(crate) async fn call(
    servers: &McpServers,
    key: &KeyRecord,
    metrics: &Metrics,
    cap: Option<DailyCap>,
    id: &Value,
    params: &Value,
) -> Result<Value, Fault> {
    let fault = |code, message: String| Fault::new(id.clone(), code, message);
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Err(fault(
            INVALID_PARAMS,
            "Invalid params: `name` must be a string".into(),
        ));
    };
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(arguments @ Value::Object(_)) => arguments.clone(),
        Some(_) => {
            return Err(fault(
                INVALID_PARAMS,
                "Invalid params: `arguments` must be an object".into(),
            ));
        }
    };
    let found = name.split_once(SEPARATOR).and_then(|(label, tool)| {
        let server = servers.usable(key, label)?;
        server.offers(tool).then_some((label, tool, server))
    });
    let Some((label, tool, server)) = found else {
        return Err(fault(INVALID_PARAMS, format!("Unknown tool: {name}")));
    };
    // The project's calls for today spent: a failed call, as the model
    // should read it.
    if let Some(cap) = cap
        && let Err(why) = cap.take().await
    {
        return Ok(json!({"content": [{"type": "text", "text": why}], "isError": true}));
    }
    let started = Instant::now();
    let outcome = server.client.call_tool(tool, arguments).await;
    let elapsed = started.elapsed();
    let ms = elapsed.as_secs_f64() * 1000.0;
    let counted = match &outcome {
        Ok(result) if result.is_error => ToolOutcome::ToolError,
        Ok(_) => ToolOutcome::Ok,
        Err(svc_mcp::Error::Rpc { .. }) => ToolOutcome::Refused,
        Err(_) => ToolOutcome::Failed,
    };
    metrics.tool_called(label, counted, elapsed);
    match outcome {
        Ok(result) => {
            tracing::info!(target: "svc::mcp", server = %label, tool, ms, is_error = result.is_error, "tool called");
            Ok(serde_json::to_value(result).unwrap_or_else(|_| json!({})))
        }
        Err(svc_mcp::Error::Rpc {
            code,
            message,
            data,
        }) => {
            tracing::info!(target: "svc::mcp", server = %label, tool, ms, code, "tool call refused");
            let mut refused = fault(code, message);
            refused.data = data;
            Err(refused)
        }
        Err(e) => {
            // The error names no URL or header (svc-mcp keeps them out).
            tracing::warn!(target: "svc::mcp", server = %label, tool, ms, error = %e, "tool call failed");
            Err(fault(
                INTERNAL_ERROR,
                format!("the MCP server `{label}` failed: {e}"),
            ))
        }
    }
}
