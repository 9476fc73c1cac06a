//! The server's resolved configuration (the command line builds it from
//! defaults, the TOML file, `SVC_*` environment and flags).

use std::net::SocketAddr;

/// Default cap on request bodies: 4 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Everything the HTTP layer needs to know.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on; port 0 picks a free port.
    pub bind: SocketAddr,
    /// The `{base_url}` printed in responses and pages, without `/v1`;
    /// `None` derives it from the bound address.
    pub public_url: Option<String>,
    /// Requests with bigger bodies get 413.
    pub max_body_bytes: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}
