//! Server-side tools: the MCP servers a request's `mcp` tools name, whose
//! tools svc offers the model and calls itself, the same in every dialect.
//!
//! A dialect reads its own fields into [`McpToolRequest`]s ([`spec`]); a
//! [`Toolset`] resolves them (a registered server by its label, for a key
//! that may use it, or an ad-hoc `server_url` through the operator's SSRF
//! guard, refused before anything is sent), lists their tools within the
//! request's and the operator's allowlists, offers them to the model as
//! function tools, and runs the calls the model makes, bounded in time,
//! size and number ([`MAX_TOOL_CALLS`]), counted in the metrics and the
//! log. What the calls look like on the wire (output items, content
//! blocks, events) is each dialect's.

pub(crate) mod spec;
pub(crate) mod toolset;

use std::sync::Arc;

use svc_core::{KeyRecord, Store, now};

use crate::state::AppState;

pub use spec::McpToolRequest;
pub use toolset::{CallOutcome, Toolset};

/// The most tool calls svc makes for one response (a request may ask
/// fewer): a model that calls tools forever stops here.
pub const MAX_TOOL_CALLS: u32 = 20;

/// The most bytes of one call's output given to the model; a longer one is
/// the call's error (the MCP client already bounds what it reads).
pub const MAX_TOOL_OUTPUT_BYTES: usize = 256 * 1024;

/// A project's daily cap on MCP tool calls
/// (`mcp.max_calls_per_project_per_day`), counted in the store so that
/// replicas share the count; a UTC day is its window.
#[derive(Clone)]
pub struct DailyCap {
    store: Arc<dyn Store>,
    bucket: String,
    limit: u64,
}

impl DailyCap {
    /// The cap of `key`'s project, when the operator set one.
    pub fn of(state: &AppState, key: &KeyRecord) -> Option<Self> {
        Some(DailyCap {
            store: state.store.clone(),
            bucket: format!("mcp_calls:{}", key.project_id.0),
            limit: state.mcp.daily_calls?,
        })
    }

    /// Takes one of today's calls; why not when none is left (or the
    /// count cannot be read: the cap holds then too).
    pub async fn take(&self) -> Result<(), String> {
        let day = now().div_euclid(86_400) * 86_400;
        match self.store.hit(&self.bucket, day).await {
            Ok(hits) if u64::try_from(hits).unwrap_or(u64::MAX) <= self.limit => Ok(()),
            Ok(_) => {
                if let Err(e) = self.store.unhit(&self.bucket, day).await {
                    tracing::warn!(error = %e, "cannot give back a refused tool call");
                }
                Err(format!(
                    "not called: this project's MCP tool calls for today are spent ({} a day)",
                    self.limit
                ))
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot count a tool call");
                Err("not called: the count of this project's tool calls cannot be read now".into())
            }
        }
    }
}
