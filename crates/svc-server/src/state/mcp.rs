//! The MCP servers the operator registered (`[mcp.servers.<label>]`), each
//! with its client, which the state holds, and which of them a key may
//! use (its project's and its own allowlists: [`McpServers::usable_by`]).
//! What is done with them (svc's own `/mcp`, the dialects' `mcp` tools) is
//! `crate::mcp`'s.

use std::collections::BTreeMap;
use std::sync::Arc;

use svc_core::KeyRecord;

use crate::config::McpConfig;

/// The registered servers, by label.
#[derive(Default)]
pub struct McpServers {
    pub(crate) servers: BTreeMap<String, Registered>,
    /// What an ad-hoc `server_url` must pass (`mcp.allow_urls`); `None`
    /// when the operator allows none, and every one is refused.
    pub(crate) guard: Option<svc_mcp::Guard>,
    /// `mcp.max_calls_per_project_per_day`.
    pub(crate) daily_calls: Option<u64>,
}

/// One registered server: its client (headers included) and what of it is
/// offered.
pub(crate) struct Registered {
    pub client: Arc<svc_mcp::Client>,
    /// What the admin API shows of it (its headers' names, never a value).
    pub shown: svc_api::mcp::McpServer,
    /// The only tools offered; all when `None`.
    pub allowed_tools: Option<Vec<String>>,
    /// Its URL and headers, for a client of a request that adds headers
    /// of its own (a user's token): never shown.
    pub url: String,
    pub headers: Vec<(String, String)>,
}

impl Registered {
    /// Whether its tool `name` is offered.
    pub(crate) fn offers(&self, name: &str) -> bool {
        self.allowed_tools
            .as_ref()
            .is_none_or(|allowed| allowed.iter().any(|a| a == name))
    }
}

impl McpServers {
    /// A client for each server `config` registers. Registered servers are
    /// the operator's own: their URLs are not held to `mcp.allow_urls`
    /// (only a request's ad-hoc `server_url` is).
    pub fn new(config: &McpConfig) -> Result<Self, String> {
        let mut servers = BTreeMap::new();
        for (label, server) in &config.servers {
            let mut builder = svc_mcp::Client::builder(server.url.expose());
            for (name, value) in &server.headers {
                builder = builder.header(name.as_str(), value.0.expose());
            }
            let client = builder
                .build()
                .map_err(|e| format!("mcp.servers.{label}: {e}"))?;
            let shown = svc_api::mcp::McpServer {
                object: "mcp_server".into(),
                label: label.clone(),
                url: server.url.redacted(),
                description: server.description.clone(),
                allowed_tools: server.allowed_tools.clone(),
                headers: server.headers.keys().cloned().collect(),
            };
            servers.insert(
                label.clone(),
                Registered {
                    client: Arc::new(client),
                    shown,
                    allowed_tools: server.allowed_tools.clone(),
                    url: server.url.expose().to_owned(),
                    headers: server
                        .headers
                        .iter()
                        .map(|(name, value)| (name.clone(), value.0.expose().to_owned()))
                        .collect(),
                },
            );
        }
        let guard = if config.allow_urls.is_empty() {
            None
        } else {
            Some(
                svc_mcp::Guard::new(&config.allow_urls)
                    .map_err(|e| format!("mcp.allow_urls: {e}"))?,
            )
        };
        Ok(McpServers {
            servers,
            guard,
            daily_calls: config.max_calls_per_project_per_day,
        })
    }

    /// The registered servers' labels, in order.
    pub(crate) fn labels(&self) -> impl Iterator<Item = &str> {
        self.servers.keys().map(String::as_str)
    }

    /// The servers `key` may use (both its project's and its own lists
    /// allow them), by label: all a key is offered or may call. A server
    /// it may not use is, to it, one that is not registered.
    pub(crate) fn usable_by<'a>(
        &'a self,
        key: &'a KeyRecord,
    ) -> impl Iterator<Item = (&'a str, &'a Registered)> + 'a {
        self.servers
            .iter()
            .filter(|(label, _)| key.may_use_mcp_server(label))
            .map(|(label, server)| (label.as_str(), server))
    }

    /// The server `label`, when it is registered and `key` may use it.
    pub(crate) fn usable(&self, key: &KeyRecord, label: &str) -> Option<&Registered> {
        self.servers
            .get(label)
            .filter(|_| key.may_use_mcp_server(label))
    }
}
