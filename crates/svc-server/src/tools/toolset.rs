//! The MCP servers of one request, resolved and listed, and the calls of
//! their tools.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use svc_core::{GenerateRequest, ToolSpec, ValidationError};

use super::spec::{Allowed, Approval, McpToolRequest};
use super::{DailyCap, MAX_TOOL_OUTPUT_BYTES};
use crate::error::ApiError;
use crate::metrics::{Metrics, ToolOutcome};
use crate::state::mcp::McpServers;

/// The servers of one request, with the tools each offers the model.
#[derive(Default)]
pub struct Toolset {
    servers: Vec<Server>,
    /// The project's daily cap on calls, if any.
    cap: Option<DailyCap>,
}

/// One server of a request.
pub struct Server {
    pub label: String,
    /// The request's field that named it (`tools[1]`).
    pub param: String,
    client: Arc<svc_mcp::Client>,
    /// Its tools that are offered, in its order.
    pub tools: Vec<svc_mcp::Tool>,
    approval: Approval,
    /// Whether the tools were listed for this request (rather than read
    /// back from the conversation): the dialect shows the list then.
    pub listed: bool,
}

/// What a call came to: the output the model reads, or why it failed
/// (the model reads that too).
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    pub output: Option<String>,
    pub error: Option<String>,
}

impl CallOutcome {
    fn failed(error: impl Into<String>) -> Self {
        CallOutcome {
            output: None,
            error: Some(error.into()),
        }
    }
}

impl Toolset {
    /// Resolves the servers `asked` names: a registered label the key may
    /// use (`may_use`), or an ad-hoc `server_url` that the operator's
    /// patterns allow and whose host is no internal address (refused,
    /// naming the field, before anything is sent). Their tools are read
    /// from `known` (the conversation's earlier list of that label) or
    /// listed now, servers at once; a server that cannot list them fails
    /// the request ([`ApiError::ToolServer`]). Only the tools both the
    /// operator and the request allow are kept.
    pub async fn resolve(
        registry: &McpServers,
        may_use: impl Fn(&str) -> bool,
        asked: Vec<McpToolRequest>,
        known: impl Fn(&str) -> Option<Vec<svc_mcp::Tool>>,
    ) -> Result<Self, ApiError> {
        let mut pending = Vec::with_capacity(asked.len());
        for request in asked {
            if pending
                .iter()
                .any(|(r, _, _): &(McpToolRequest, _, _)| r.label == request.label)
            {
                return Err(ValidationError::new(
                    format!("{}.{}", request.param, request.fields.label),
                    format!("the server label {:?} is used twice", request.label),
                )
                .into());
            }
            let (client, operator) = connect(registry, &may_use, &request).await?;
            pending.push((request, client, operator));
        }
        let listed = futures::future::join_all(pending.into_iter().map(
            |(request, client, operator)| {
                let known = known(&request.label);
                async move {
                    let (tools, listed) = match known {
                        Some(tools) => (tools, false),
                        None => match client.list_tools().await {
                            Ok(tools) => (tools, true),
                            Err(e) => {
                                tracing::warn!(target: "svc::mcp", server = %request.label, error = %e, "cannot list the MCP server's tools");
                                return Err(ApiError::ToolServer {
                                    param: request.param.clone(),
                                    label: request.label.clone(),
                                    reason: e.to_string(),
                                });
                            }
                        },
                    };
                    let tools = tools
                        .into_iter()
                        .filter(|t| operator.offers(t) && request.allowed.offers(t))
                        .collect();
                    Ok(Server {
                        label: request.label,
                        param: request.param,
                        client,
                        tools,
                        approval: request.approval,
                        listed,
                    })
                }
            },
        ))
        .await;
        let servers = listed.into_iter().collect::<Result<Vec<_>, _>>()?;
        let set = Toolset { servers, cap: None };
        set.check_names()?;
        Ok(set)
    }

    /// Two servers offering a tool of the same name would be one tool to
    /// the model: refused, naming the second server.
    fn check_names(&self) -> Result<(), ApiError> {
        let mut seen = std::collections::HashSet::new();
        for server in &self.servers {
            for tool in &server.tools {
                if !seen.insert(tool.name.as_str()) {
                    return Err(ValidationError::new(
                        server.param.clone(),
                        format!(
                            "the tool {:?} of the MCP server {:?} has the name of another tool; narrow allowed_tools",
                            tool.name, server.label
                        ),
                    )
                    .into());
                }
            }
        }
        Ok(())
    }

    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// Every offered tool, as a function tool for the model.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.servers
            .iter()
            .flat_map(|s| &s.tools)
            .map(|tool| ToolSpec {
                name: tool.name.clone(),
                description: tool.description.clone(),
                parameters: match &tool.input_schema {
                    schema @ Value::Object(_) => schema.clone(),
                    _ => serde_json::json!({"type": "object"}),
                },
            })
            .collect()
    }

    /// The same, each call taken from the project's daily `cap`.
    pub fn capped(self, cap: Option<DailyCap>) -> Self {
        Toolset { cap, ..self }
    }

    /// Offers every tool to the model of `request`, beside its functions
    /// (a function of the same name is refused, naming the server).
    pub fn offer(&self, request: &mut GenerateRequest) -> Result<(), ValidationError> {
        for spec in self.specs() {
            if request.tools.iter().any(|t| t.name == spec.name) {
                let server = self.server_of(&spec.name).map(|s| s.param.clone());
                return Err(ValidationError::new(
                    server.unwrap_or_else(|| "tools".into()),
                    format!(
                        "the MCP tool {:?} has the name of a function tool; narrow allowed_tools",
                        spec.name
                    ),
                ));
            }
            request.tools.push(spec);
        }
        if request.tools.is_empty() {
            request.tool_choice = svc_core::ToolChoiceSpec::None;
        }
        Ok(())
    }

    /// The server offering the tool `name`, if one does.
    pub fn server_of(&self, name: &str) -> Option<&Server> {
        self.servers
            .iter()
            .find(|s| s.tools.iter().any(|t| t.name == name))
    }

    /// Whether a call of `name` waits for the client's approval.
    pub fn needs_approval(&self, name: &str) -> bool {
        self.server_of(name)
            .is_some_and(|server| server.approval.needed(name))
    }

    /// Calls the tool `name` with `arguments` (the model's JSON text) on
    /// its server. Nothing is sent when the arguments are no JSON object.
    /// Counted in the metrics, logged and traced as a span of the request
    /// (the server's label, the tool, the time and the outcome; never the
    /// arguments or the output).
    pub async fn call(&self, metrics: &Metrics, name: &str, arguments: &str) -> CallOutcome {
        let Some(server) = self.server_of(name) else {
            return CallOutcome::failed(format!("no MCP server offers the tool {name:?}"));
        };
        let arguments = match serde_json::from_str::<Value>(arguments) {
            Ok(Value::Object(map)) => Value::Object(map),
            Ok(_) | Err(_) if arguments.trim().is_empty() => Value::Object(Default::default()),
            _ => {
                return CallOutcome::failed(
                    "the call's arguments are not a JSON object; the tool was not called",
                );
            }
        };
        if let Some(cap) = &self.cap
            && let Err(why) = cap.take().await
        {
            return CallOutcome::failed(why);
        }
        let label = server.label.as_str();
        let (started, began) = (Instant::now(), std::time::SystemTime::now());
        let result = server.client.call_tool(name, arguments).await;
        let elapsed = started.elapsed();
        let counted = match &result {
            Ok(r) if r.is_error => ToolOutcome::ToolError,
            Ok(_) => ToolOutcome::Ok,
            Err(svc_mcp::Error::Rpc { .. }) => ToolOutcome::Refused,
            Err(_) => ToolOutcome::Failed,
        };
        metrics.tool_called(label, counted, elapsed);
        let ms = elapsed.as_secs_f64() * 1000.0;
        tracing::info!(target: "svc::mcp", server = %label, tool = name, ms, outcome = counted.label(), "tool called");
        // A span of the request's trace, when it is traced.
        let text = |v: &str| svc_core::trace::Value::Text(v.to_owned());
        svc_core::trace::record(
            "mcp.tools/call",
            began,
            vec![
                ("mcp.server.label".into(), text(label)),
                ("mcp.tool.name".into(), text(name)),
                ("mcp.outcome".into(), text(counted.label())),
            ],
        );
        match result {
            Ok(result) => {
                let text = result_text(&result);
                if text.len() > MAX_TOOL_OUTPUT_BYTES {
                    return CallOutcome::failed(format!(
                        "the tool's output is {} bytes; at most {MAX_TOOL_OUTPUT_BYTES} are given to the model",
                        text.len()
                    ));
                }
                if result.is_error {
                    CallOutcome::failed(text)
                } else {
                    CallOutcome {
                        output: Some(text),
                        error: None,
                    }
                }
            }
            // The error names no URL or header (svc-mcp keeps them out).
            Err(e) => CallOutcome::failed(format!("the MCP server `{label}` failed: {e}")),
        }
    }
}

/// A result as the model reads it: its text blocks, a line apart; other
/// blocks as their JSON; the structured content when there is nothing else.
fn result_text(result: &svc_mcp::ToolResult) -> String {
    let parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match (block.get("type"), block.get("text")) {
            (Some(Value::String(kind)), Some(Value::String(text))) if kind == "text" => {
                text.clone()
            }
            _ => block.to_string(),
        })
        .collect();
    if parts.is_empty() {
        return result
            .structured_content
            .as_ref()
            .map(Value::to_string)
            .unwrap_or_default();
    }
    parts.join("\n")
}

/// The client of the server `request` names, and what the operator allows
/// of it.
async fn connect(
    registry: &McpServers,
    may_use: &impl Fn(&str) -> bool,
    request: &McpToolRequest,
) -> Result<(Arc<svc_mcp::Client>, Allowed), ApiError> {
    let Some(url) = &request.url else {
        // A registered server the key may not use is as unknown as one
        // that is not registered: its existence is not told.
        let registered = registry
            .servers
            .get(&request.label)
            .filter(|_| may_use(&request.label));
        let Some(registered) = registered else {
            let fields = request.fields;
            return Err(ValidationError::new(
                format!("{}.{}", request.param, fields.label),
                format!(
                    "no MCP server labelled {:?} is registered for this key; name one, or give its {}",
                    request.label, fields.url
                ),
            )
            .into());
        };
        let operator = Allowed {
            names: registered.allowed_tools.clone(),
            ..Allowed::default()
        };
        if request.headers.is_empty() {
            return Ok((registered.client.clone(), operator));
        }
        // The request's own headers (a user's token) beside the operator's,
        // which win.
        let mut builder = svc_mcp::Client::builder(registered.url.as_str());
        for (name, value) in &request.headers {
            if !registered
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name))
            {
                builder = builder.header(name.as_str(), value.as_str());
            }
        }
        for (name, value) in &registered.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let client = builder
            .build()
            .map_err(|e| ApiError::Internal(format!("mcp.servers.{}: {e}", request.label)))?;
        return Ok((Arc::new(client), operator));
    };
    let param = format!("{}.{}", request.param, request.fields.url);
    let refused = |why: String| ApiError::from(ValidationError::new(param.clone(), why));
    let Some(guard) = &registry.guard else {
        return Err(refused(format!(
            "this server allows no ad-hoc MCP server URLs (mcp.allow_urls); name a registered server by its {}",
            request.fields.label
        )));
    };
    let parsed = url::Url::parse(url).map_err(|e| refused(format!("not a URL: {e}")))?;
    guard
        .check_url(&parsed)
        .map_err(|e| refused(e.to_string()))?;
    guard
        .check(&parsed)
        .await
        .map_err(|e| refused(e.to_string()))?;
    let mut builder = svc_mcp::Client::builder(url.as_str()).guard(guard.clone());
    for (name, value) in &request.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let client = builder.build().map_err(|e| refused(e.to_string()))?;
    Ok((Arc::new(client), Allowed::default()))
}
