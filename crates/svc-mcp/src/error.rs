//! The one error type of the crate, and the guard's refusal it may carry.
//!
//! Messages never hold a server's URL or headers: the caller knows which
//! server it asked, and the URL or headers may carry credentials.

use std::net::IpAddr;
use std::time::Duration;

/// Why a call to an MCP server failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The call did not finish within its time limit.
    #[error("the MCP server did not answer within {0:?}")]
    Timeout(Duration),
    /// A response was larger than the limit; reading stopped there.
    #[error("the MCP server's response is larger than {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// `tools/list` kept returning a next page past the limit.
    #[error("the MCP server's tool list has more than {limit} pages")]
    TooManyPages {
        /// The most pages read.
        limit: usize,
    },
    /// The server answered the request with a JSON-RPC error.
    #[error("the MCP server answered with error {code}: {message}")]
    Rpc {
        /// The JSON-RPC error code.
        code: i64,
        /// The server's message.
        message: String,
        /// The error's `data`, if any.
        data: Option<serde_json::Value>,
    },
    /// The server answered with an HTTP status that carries no JSON-RPC error.
    #[error("the MCP server answered with HTTP status {0}")]
    Status(u16),
    /// The server's session was gone again right after a fresh `initialize`.
    #[error("the MCP server's session expired and could not be renewed")]
    SessionExpired,
    /// The server speaks no protocol version this client speaks.
    #[error("the MCP server supports none of this client's protocol versions (it named {0:?})")]
    UnsupportedVersion(Vec<String>),
    /// The server's answer is not what the protocol says.
    #[error("the MCP server's answer is malformed: {0}")]
    Protocol(String),
    /// The SSRF guard refused the URL or an address it resolved to.
    #[error("{0}")]
    Refused(#[from] Refusal),
    /// The connection failed (refused, reset, TLS).
    #[error("could not reach the MCP server: {0}")]
    Transport(String),
    /// The client could not be built from its configuration.
    #[error("invalid MCP client configuration: {0}")]
    Config(String),
}

/// Why the SSRF guard refused an ad-hoc server URL, before anything was sent to it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The URL matches none of the operator's `allow_urls` patterns.
    #[error("the server URL is not allowed by the operator's MCP URL patterns")]
    NotAllowed,
    /// The URL's scheme is neither `http` nor `https`, or it has no host.
    #[error("the server URL must be http or https with a host")]
    Scheme,
    /// The host is, or resolved to, an address of a kind refused unless listed.
    #[error("the server URL's host is a {kind} address ({addr}), refused unless listed explicitly")]
    Address {
        /// The address found.
        addr: IpAddr,
        /// Which kind of address it is.
        kind: AddressKind,
    },
    /// The host name resolved to no address.
    #[error("the server URL's host resolved to no address")]
    Unresolved,
    /// Too many redirects were followed.
    #[error("the MCP server redirected too many times")]
    TooManyRedirects,
}

/// The kinds of address the guard refuses unless their host is listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressKind {
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// RFC 1918 and fc00::/7.
    Private,
    /// 169.254.0.0/16 and fe80::/10.
    LinkLocal,
    /// 100.64.0.0/10, carrier-grade NAT.
    SharedNat,
    /// 0.0.0.0/8 and ::.
    Unspecified,
    /// Cloud instance metadata: 169.254.169.254 and fd00:ec2::254.
    Metadata,
    /// Multicast and broadcast, which no server answers from.
    Multicast,
}

impl std::fmt::Display for AddressKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::LinkLocal => "link-local",
            Self::SharedNat => "shared (CGNAT)",
            Self::Unspecified => "unspecified",
            Self::Metadata => "cloud metadata",
            Self::Multicast => "multicast or broadcast",
        })
    }
}

impl Error {
    /// The error for a failed `reqwest` call: the guard's refusal when the
    /// resolver or the redirect policy gave one, never the URL.
    pub(crate) fn from_http(error: reqwest::Error, timeout: Duration) -> Self {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        while let Some(cause) = source {
            if let Some(refusal) = cause.downcast_ref::<Refusal>() {
                return Self::Refused(refusal.clone());
            }
            source = cause.source();
        }
        if error.is_timeout() {
            return Self::Timeout(timeout);
        }
        let error = error.without_url();
        let mut message = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self::Transport(message)
    }
}
