//! The bounds every call runs under, so no server can hold a caller or its
//! memory: a time limit per call, a size limit per response, a page limit
//! for `tools/list`.

use std::time::Duration;

/// The bounds of one client's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most one call may take, from its first byte sent to its result,
    /// including the protocol negotiation a first call does.
    pub timeout: Duration,
    /// The most a TCP and TLS connection may take to open.
    pub connect_timeout: Duration,
    /// The most bytes read of one HTTP response (the JSON body, or the whole
    /// event stream); reading stops at the bound.
    pub max_response_bytes: usize,
    /// The most pages `tools/list` follows through `nextCursor`.
    pub max_tool_pages: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            max_response_bytes: 4 * 1024 * 1024,
            max_tool_pages: 20,
        }
    }
}
