//! Shared state of the axum app: the infrastructure every handler may
//! reach, and the services that outlive a request, whose types are here
//! ([`dashboard`], [`files`], [`mcp`], [`stored`]) so that the state imports none
//! of the endpoints that use them.

pub(crate) mod dashboard;
pub(crate) mod files;
pub(crate) mod mcp;
pub(crate) mod stored;

use std::sync::Arc;

use axum::extract::FromRef;
use svc_core::{AccountService, DeviceService, KeyService, ProjectService, Store};

use crate::admission::Admission;
use crate::registry::ModelRegistry;
use dashboard::Dashboard;
use files::Batches;
use mcp::McpServers;
use stored::Conversations;

/// What every handler may reach.
#[derive(Clone, FromRef)]
pub struct AppState {
    /// Persistence, for readiness checks.
    pub store: Arc<dyn Store>,
    /// API key creation and authentication.
    pub keys: KeyService,
    /// Model ids and the engines that serve them.
    pub models: Arc<ModelRegistry>,
    /// The public base URL (no trailing slash, no `/v1`).
    pub public_url: Arc<str>,
    /// Users, sign-in and sessions.
    pub accounts: AccountService,
    /// The device authorization grant.
    pub devices: DeviceService,
    /// Changes to projects and their members.
    pub projects: ProjectService,
    /// The dashboard's address and cookie policy.
    pub dashboard: Arc<Dashboard>,
    /// What every request's work goes through: limits, budgets, routes,
    /// usage.
    pub admission: Arc<Admission>,
    /// Token counting (`/v1/messages/count_tokens`) in flight, per key and
    /// in all.
    pub counting: Arc<crate::ratelimit::InFlight>,
    /// What `/metrics` reports.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The largest request body read.
    pub body_limit: crate::extract::BodyLimit,
    /// Stored Responses API responses: their retention, each project's
    /// quota, and the bounds of reading a conversation back.
    pub conversations: Arc<Conversations>,
    /// Days audit-log entries are kept (0: forever), for the dashboard to say.
    pub audit_retention_days: u32,
    /// Finished requests' rows, waiting to be written.
    pub request_log: Arc<crate::request_log::RequestLog>,
    /// Where requests' spans go, when traces are exported.
    pub tracer: Option<Arc<crate::otlp::Tracer>>,
    /// Replies of reproducible requests, served again.
    pub cache: Arc<crate::cache::ResponseCache>,
    /// Files and batches: where they are kept and how batches run.
    pub batches: Arc<Batches>,
    /// The MCP servers the operator registered, with their clients.
    pub mcp: Arc<McpServers>,
}
