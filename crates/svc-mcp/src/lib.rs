//! svc's MCP (Model Context Protocol) client: one [`Client`] per MCP server,
//! over the Streamable HTTP transport, speaking protocol version 2025-11-25
//! (`initialize`, then a session) and 2026-07-28 (stateless, each request
//! carrying its version, client and capabilities in `_meta`), chosen per
//! server as [`client`]'s documentation says.
//!
//! Every call is bounded ([`Limits`]): in time, in the bytes read of a
//! response (read chunk by chunk, so a huge result is never held whole), and
//! in `tools/list` pages; passing a bound is a typed [`Error`], never a hang.
//! Ad-hoc server URLs (named by a request, not the operator) go through the
//! SSRF [`Guard`], which checks the operator's `allow_urls` patterns and the
//! addresses actually connected to, redirects included.
//!
//! This crate knows nothing of svc's API dialects, keys or configuration:
//! the server-side `mcp` tools and svc's own `/mcp` gateway build on it.

pub mod client;
mod error;
pub mod guard;
mod limits;
mod read;
mod wire;

pub use client::{Client, ClientBuilder, VersionPolicy};
pub use error::{AddressKind, Error, Refusal};
pub use guard::{Guard, Lookup, LookupFuture};
pub use limits::Limits;
pub use wire::{
    CLIENT_CAPABILITIES_META_KEY, HANDSHAKE_VERSIONS, PROTOCOL_VERSION_META_KEY, Tool, ToolResult,
    UNSUPPORTED_PROTOCOL_VERSION, Version, decode_header_value,
};
