//! The server's resolved configuration (the command line builds it from
//! defaults, the TOML file, `SVC_*` environment and flags).

use std::net::SocketAddr;
use std::time::Duration;

use svc_core::{DeviceSettings, KeyLimits};

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
    /// Where people reach the dashboard (the device flow's
    /// `verification_uri` is this + `/device`); `None` is
    /// `<public_url>/dashboard`.
    pub dashboard_url: Option<String>,
    /// Whether anyone may create an account on the sign-in page.
    pub allow_signup: bool,
    /// Timings of the device authorization flow.
    pub device: DeviceSettings,
    /// Rate limits of keys that have none of their own (`None`: unlimited).
    pub rate_limits: KeyLimits,
    /// `redis://…`: count rate limits in Redis, shared by every replica;
    /// `None` counts in this process.
    pub redis_url: Option<String>,
    /// After shutdown is asked for, how long in-flight requests (streams
    /// included) may take to finish before their connections are closed.
    pub shutdown_grace: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            dashboard_url: None,
            allow_signup: false,
            device: DeviceSettings::default(),
            rate_limits: KeyLimits::default(),
            redis_url: None,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}
