//! What the admin API says of the MCP servers the operator registered
//! (`GET /v1/organization/mcp_servers`): never a header's value.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::Object;

use crate::list::{List, Listed};
use crate::schema::constant;

/// A registered MCP server, as the configuration's `[mcp.servers.<label>]`
/// table gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct McpServer {
    /// Always `mcp_server`.
    #[schema(schema_with = object_mcp_server)]
    pub object: String,
    /// Its label: its tools are `<label>__<tool>` on svc's `/mcp`.
    pub label: String,
    /// Its Streamable HTTP endpoint, a password in it shown as `***`.
    pub url: String,
    /// What it is for.
    pub description: Option<String>,
    /// The only tools of it offered; `null`: all.
    pub allowed_tools: Option<Vec<String>>,
    /// The names of the headers sent to it (their values are never shown).
    pub headers: Vec<String>,
}

/// `GET /v1/organization/mcp_servers`, by label.
pub type McpServerList = List<McpServer>;

impl Listed for McpServer {
    const LIST: &'static str = "McpServerList";
    const LIST_ABOUT: &'static str = "The registered MCP servers, by label.";
}

fn object_mcp_server() -> Object {
    constant("mcp_server")
}
