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

pub use spec::McpToolRequest;
pub use toolset::{CallOutcome, Toolset};

/// The most tool calls svc makes for one response (a request may ask
/// fewer): a model that calls tools forever stops here.
pub const MAX_TOOL_CALLS: u32 = 20;

/// The most bytes of one call's output given to the model; a longer one is
/// the call's error (the MCP client already bounds what it reads).
pub const MAX_TOOL_OUTPUT_BYTES: usize = 256 * 1024;
