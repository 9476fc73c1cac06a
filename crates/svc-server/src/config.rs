//! The server's configuration: what the HTTP layer needs, as typed values.
//! The command line builds it from defaults, the TOML file, `SVC_*`
//! environment and flags; this crate only says what each key holds (its
//! serde form) and its default, never where a value came from.

pub mod mcp;

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use svc_core::{DeviceConfig, KeyLimits};
use url::Url;

pub use mcp::McpConfig;

/// The default share of a budget (percent) whose use is written to the
/// audit log (`budget.threshold_reached`, once a window) and marked on the
/// dashboard's budget bars.
pub const DEFAULT_ALERT_PERCENT: u8 = 80;

/// Default cap on request bodies: 4 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// Default time a client has to send a request's headers (and, on a kept-
/// alive connection, to start the next request).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(20);
/// Default time a client has to send a request's whole body.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// Default cap on open connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default cap on open connections from one client address.
pub const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = 256;

/// Everything the HTTP layer needs to know. Its serde form is the flat
/// keys of the configuration file (`bind`, `public_url`, ...); `device`,
/// `rate_limits` and `sso` are sections of their own ([`DeviceConfig`],
/// [`RateLimitConfig`], [`SsoConfig`]), nested here but with their keys
/// beside these (`device_interval`, not `device.interval`), and `prices`
/// is the file's `[prices.<model id>]` tables. Serializing it is for
/// showing: secrets come out hidden.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct ServerConfig {
    /// Address to listen on; port 0 picks a free port.
    #[serde(with = "svc_core::config::text")]
    pub bind: SocketAddr,
    /// The `{base_url}` printed in responses and pages, without `/v1`;
    /// `None` derives it from the bound address.
    #[serde(
        deserialize_with = "optional_http_url",
        serialize_with = "optional_url"
    )]
    pub public_url: Option<Url>,
    /// PEM certificate chain to serve TLS with on `bind` (with `tls_key`;
    /// both or neither). Read again when it changes on disk.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`'s first certificate.
    pub tls_key: Option<PathBuf>,
    /// Requests with bigger bodies get 413.
    #[serde(with = "svc_core::config::byte_count")]
    pub max_body_bytes: usize,
    /// Where people reach the dashboard (the device flow's
    /// `verification_uri` is this + `/device`); `None` is
    /// `<public_url>/dashboard`.
    #[serde(
        deserialize_with = "optional_http_url",
        serialize_with = "optional_url"
    )]
    pub dashboard_url: Option<Url>,
    /// Whether anyone may create an account on the sign-in page.
    pub allow_signup: bool,
    /// Timings of the device authorization flow.
    pub device: DeviceConfig,
    /// Rate limits of keys that have none of their own (`None`: unlimited),
    /// read as a [`RateLimitConfig`].
    #[serde(with = "rate_limits")]
    pub rate_limits: KeyLimits,
    /// `redis://…`: count rate limits in Redis, shared by every replica;
    /// `None` counts in this process.
    #[serde(deserialize_with = "redis_url")]
    pub redis_url: Option<SecretUrl>,
    /// After shutdown is asked for, how long in-flight requests (streams
    /// included) may take to finish before their connections are closed.
    #[serde(with = "svc_core::config::duration")]
    pub shutdown_grace: Duration,
    /// A connection that has not sent a whole request head this long after
    /// it opened (or after its previous request) is closed.
    #[serde(with = "svc_core::config::duration")]
    pub header_timeout: Duration,
    /// A request whose body has not fully arrived this long after its head
    /// is answered 408 and its connection closed.
    #[serde(with = "svc_core::config::duration")]
    pub body_timeout: Duration,
    /// Open connections at most; more are closed as soon as accepted.
    #[serde(with = "svc_core::config::at_least_one")]
    pub max_connections: usize,
    /// Open connections from one client address (an IPv6 /64) at most;
    /// trusted proxies count only towards `max_connections`.
    #[serde(with = "svc_core::config::at_least_one")]
    pub max_connections_per_address: usize,
    /// Peers whose `X-Forwarded-For` / `Forwarded` headers name the client.
    #[serde(with = "svc_core::config::text_list")]
    pub trusted_proxies: Vec<Cidr>,
    /// When set, `/metrics` wants `Authorization: Bearer <token>`.
    pub metrics_token: Option<MetricsToken>,
    /// When set, `/metrics` is served on this address only.
    #[serde(with = "svc_core::config::optional_text")]
    pub metrics_bind: Option<SocketAddr>,
    /// How long a stored Responses API response (`store: true`) is kept
    /// for `GET /v1/responses/{id}` and `previous_response_id`.
    #[serde(with = "svc_core::config::duration")]
    pub response_retention: Duration,
    /// Most bytes of stored responses one project may keep (each
    /// response's object and conversation); one more is refused with 400
    /// `storage_quota_exceeded`.
    #[serde(with = "svc_core::config::byte_count")]
    pub response_quota_bytes: usize,
    /// Most stored responses one project may keep.
    #[serde(with = "svc_core::config::at_least_one")]
    pub response_quota_count: u64,
    /// Days an audit-log entry is kept; older ones are deleted by the
    /// server's hourly sweep. 0 keeps them forever.
    pub audit_retention_days: u32,
    /// Where to send OpenTelemetry traces (OTLP over HTTP with protobuf:
    /// `<url>/v1/traces`); `None` sends none.
    #[serde(
        deserialize_with = "optional_http_url",
        serialize_with = "optional_url"
    )]
    pub otlp_endpoint: Option<Url>,
    /// How long a request-log row (one per API request) is kept before the
    /// hourly sweep deletes it; `off` records none.
    #[serde(with = "svc_core::config::duration_or_off")]
    pub request_log_retention: Duration,
    /// How long the reply to a reproducible request (greedy or seeded) is
    /// served again to the same project for the same request; `off` (the
    /// default) caches nothing.
    #[serde(with = "svc_core::config::duration_or_off")]
    pub response_cache_ttl: Duration,
    /// The most bytes of cached replies the store keeps (without Redis;
    /// Redis's own memory policy bounds them there).
    #[serde(with = "svc_core::config::byte_count")]
    pub response_cache_bytes: usize,
    /// Where uploaded files and batches' output files are kept (one file
    /// each); `None`: `files` in the data directory (`svc serve`), or the
    /// system's temporary directory. Replicas sharing a database must share
    /// it too.
    pub files_dir: Option<PathBuf>,
    /// The largest file uploaded (`POST /v1/files`).
    #[serde(with = "svc_core::config::byte_count")]
    pub files_max_bytes: usize,
    /// The largest audio file transcribed or translated
    /// (`POST /v1/audio/transcriptions`, `/v1/audio/translations`): it is
    /// written to `files_dir` while it arrives, never held in memory.
    #[serde(with = "svc_core::config::byte_count")]
    pub audio_max_bytes: usize,
    /// The most bytes the uploads in progress (files and audio, all keys
    /// together) hold on disk in `files_dir` while they arrive; an upload
    /// past it is refused with a 503 (retry shortly).
    #[serde(with = "svc_core::config::byte_count")]
    pub uploads_disk_bytes: usize,
    /// The most bytes of files one project keeps; an upload past it is
    /// refused (400 naming `file`).
    #[serde(with = "svc_core::config::byte_count")]
    pub files_quota_bytes: usize,
    /// Batch lines one replica runs at once (its share of the engines'
    /// capacity for batches).
    #[serde(with = "svc_core::config::at_least_one")]
    pub batch_concurrency: usize,
    /// How long a replica holds the batch lines it runs before another may
    /// take them (it renews them while it works): how soon the work of a
    /// replica that died is taken up.
    #[serde(with = "svc_core::config::duration")]
    pub batch_lease: Duration,
    /// How long an ended batch, its lines and its files are kept.
    #[serde(with = "svc_core::config::duration")]
    pub batch_retention: Duration,
    /// The share of a budget (percent, 1 to 100) whose use is written to
    /// the audit log (`budget.threshold_reached`, once a window) and marked
    /// on the dashboard's budget bars.
    #[serde(deserialize_with = "percent")]
    pub budget_alert_percent: u8,
    /// Each model's prices (US dollars per million prompt and completion
    /// tokens), by model id, for spend budgets: the file's `[prices.<id>]`
    /// tables.
    pub prices: std::collections::BTreeMap<String, svc_core::ModelPrice>,
    /// Single sign-on through an OpenID Connect provider, and whether
    /// passwords still sign in.
    pub sso: SsoConfig,
    /// The MCP servers tools are called on: the file's `[mcp]` table.
    pub mcp: McpConfig,
}

/// Dashboard sign-in through an OpenID Connect provider: the `oidc_*` and
/// `password_sign_in` keys of the configuration.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct SsoConfig {
    /// The provider; `None` (neither `oidc_issuer` nor `oidc_client_id`
    /// given) turns single sign-on off.
    pub provider: Option<OidcProvider>,
    /// This service's client secret at the provider.
    pub oidc_client_secret: Option<Secret>,
    /// The provider's name on the sign-in button ("Sign in with …").
    pub oidc_name: String,
    /// Whether a verified email without an account gets one on its first
    /// sign-in (else it is refused).
    pub oidc_create_accounts: bool,
    /// The project an account created on first sign-in joins.
    pub oidc_default_project: String,
    /// Its role there: `member` or `owner`.
    #[serde(with = "project_role")]
    pub oidc_default_role: svc_core::ProjectRole,
    /// Whether email and password still sign in to the dashboard (and
    /// self sign-up is offered); `false` needs `oidc_issuer`.
    pub password_sign_in: bool,
}

/// The OpenID Connect provider of single sign-on: `oidc_issuer` and
/// `oidc_client_id`, given both or neither (one alone is refused, naming
/// the other).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OidcProvider {
    /// The provider's issuer URL (its discovery document is
    /// `<issuer>/.well-known/openid-configuration`).
    #[serde(rename = "oidc_issuer", with = "http_url")]
    pub issuer: Url,
    /// This service's client id at the provider.
    #[serde(rename = "oidc_client_id")]
    pub client_id: String,
}

impl OidcProvider {
    /// The provider at `issuer` that knows this service as `client_id`.
    pub fn new(issuer: Url, client_id: impl Into<String>) -> Self {
        OidcProvider {
            issuer,
            client_id: client_id.into(),
        }
    }
}

impl Default for SsoConfig {
    fn default() -> Self {
        SsoConfig {
            provider: None,
            oidc_client_secret: None,
            oidc_name: "single sign-on".to_owned(),
            oidc_create_accounts: false,
            oidc_default_project: svc_core::DEFAULT_PROJECT_ID.to_owned(),
            oidc_default_role: svc_core::ProjectRole::Member,
            password_sign_in: true,
        }
    }
}

impl SsoConfig {
    /// Why these settings (with `allow_signup`) cannot work together, or
    /// would be unsafe, if so.
    pub fn check(&self, allow_signup: bool) -> Result<(), String> {
        let Some(provider) = &self.provider else {
            if !self.password_sign_in {
                return Err(
                    "password_sign_in = false needs single sign-on (oidc_issuer and \
                     oidc_client_id): nobody could sign in"
                        .to_owned(),
                );
            }
            return Ok(());
        };
        // Single sign-on matches accounts by email: an account anyone made
        // for someone else's email by signing up would be theirs on their
        // first sign-in through the provider, its password still the maker's.
        if allow_signup {
            return Err(
                "allow_signup cannot be used with single sign-on: self sign-up does not prove \
                 the email, and single sign-on signs in to the account with that email \
                 (use oidc_create_accounts to let people in)"
                    .to_owned(),
            );
        }
        // Over plain http anyone on the way could hand out their own keys.
        let issuer = &provider.issuer;
        let loopback = match issuer.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(name)) => name == "localhost",
            None => false,
        };
        if issuer.scheme() != "https" && !loopback {
            return Err(
                "oidc_issuer must be an https:// URL (plain http only on this machine)".to_owned(),
            );
        }
        Ok(())
    }
}

/// `oidc_default_role`: `member` or `owner`.
mod project_role {
    use serde::{Deserialize, Deserializer, Serializer};
    use svc_core::ProjectRole;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ProjectRole, D::Error> {
        let text = String::deserialize(d)?;
        ProjectRole::parse(text.trim())
            .map_err(|_| serde::de::Error::custom("must be member or owner"))
    }

    pub fn serialize<S: Serializer>(role: &ProjectRole, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(role.as_str())
    }
}

/// Default days an audit-log entry is kept: a year.
pub const DEFAULT_AUDIT_RETENTION_DAYS: u32 = 365;

/// `response_cache_bytes`' default: 256 MiB.
pub const DEFAULT_RESPONSE_CACHE_BYTES: usize = 256 << 20;

/// Default time a request-log row is kept: 30 days.
pub const DEFAULT_REQUEST_LOG_RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// Default time a stored response is kept: 30 days, as OpenAI does.
pub const DEFAULT_RESPONSE_RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// Default bytes of stored responses one project may keep: 1 GiB.
pub const DEFAULT_RESPONSE_QUOTA_BYTES: usize = 1 << 30;
/// Default number of stored responses one project may keep.
pub const DEFAULT_RESPONSE_QUOTA_COUNT: u64 = 100_000;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: None,
            tls_cert: None,
            tls_key: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            dashboard_url: None,
            allow_signup: false,
            device: DeviceConfig::default(),
            rate_limits: KeyLimits::default(),
            redis_url: None,
            shutdown_grace: Duration::from_secs(30),
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            trusted_proxies: Vec::new(),
            metrics_token: None,
            metrics_bind: None,
            response_retention: DEFAULT_RESPONSE_RETENTION,
            response_quota_bytes: DEFAULT_RESPONSE_QUOTA_BYTES,
            response_quota_count: DEFAULT_RESPONSE_QUOTA_COUNT,
            audit_retention_days: DEFAULT_AUDIT_RETENTION_DAYS,
            request_log_retention: DEFAULT_REQUEST_LOG_RETENTION,
            response_cache_ttl: Duration::ZERO,
            response_cache_bytes: DEFAULT_RESPONSE_CACHE_BYTES,
            otlp_endpoint: None,
            files_dir: None,
            files_max_bytes: 200 * 1024 * 1024,
            audio_max_bytes: 256 * 1024 * 1024,
            uploads_disk_bytes: 4 * 1024 * 1024 * 1024,
            files_quota_bytes: 10 * 1024 * 1024 * 1024,
            batch_concurrency: 4,
            batch_lease: Duration::from_secs(60),
            batch_retention: Duration::from_secs(30 * 86_400),
            budget_alert_percent: DEFAULT_ALERT_PERCENT,
            prices: std::collections::BTreeMap::new(),
            sso: SsoConfig::default(),
            mcp: McpConfig::default(),
        }
    }
}

/// `public_url`, `dashboard_url` and `oidc_issuer`: an `http://` or
/// `https://` URL.
mod http_url {
    use serde::{Deserializer, Serializer};
    use url::Url;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Url, D::Error> {
        let url: Url = svc_core::config::text::deserialize(d)?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(serde::de::Error::custom(format!(
                "must start with http:// or https:// (got {:?})",
                url.as_str()
            )));
        }
        Ok(url)
    }

    pub fn serialize<S: Serializer>(url: &Url, s: S) -> Result<S::Ok, S::Error> {
        svc_core::config::text::serialize(url, s)
    }
}

/// An optional [`http_url`].
fn optional_http_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Url>, D::Error> {
    http_url::deserialize(d).map(Some)
}

fn optional_url<S: Serializer>(url: &Option<Url>, s: S) -> Result<S::Ok, S::Error> {
    svc_core::config::optional_text::serialize(url, s)
}

/// `budget_alert_percent`: 1 to 100.
fn percent<'de, D: Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    let value = u8::deserialize(d)?;
    if !(1..=100).contains(&value) {
        return Err(serde::de::Error::custom(
            "must be a percentage from 1 to 100",
        ));
    }
    Ok(value)
}

/// `redis_url`: `redis://` or `rediss://`.
fn redis_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SecretUrl>, D::Error> {
    let url = SecretUrl::deserialize(d)?;
    if !matches!(url.scheme(), "redis" | "rediss") {
        // The URL is not echoed: it may hold a password.
        return Err(serde::de::Error::custom(
            "must start with redis:// or rediss://",
        ));
    }
    Ok(Some(url))
}

/// The default rate limits of keys: the `rate_limit_*` keys of the
/// configuration, where 0 is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct RateLimitConfig {
    /// Requests per minute of a key without its own limit; 0 is unlimited.
    pub rate_limit_rpm: u32,
    /// Tokens per minute of a key without its own limit; 0 is unlimited.
    pub rate_limit_tpm: u32,
}

impl From<RateLimitConfig> for KeyLimits {
    fn from(config: RateLimitConfig) -> Self {
        let limit = |n: u32| (n > 0).then_some(i64::from(n));
        KeyLimits {
            requests_per_minute: limit(config.rate_limit_rpm),
            tokens_per_minute: limit(config.rate_limit_tpm),
        }
    }
}

impl From<KeyLimits> for RateLimitConfig {
    fn from(limits: KeyLimits) -> Self {
        let limit = |n: Option<i64>| n.map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
        RateLimitConfig {
            rate_limit_rpm: limit(limits.requests_per_minute),
            rate_limit_tpm: limit(limits.tokens_per_minute),
        }
    }
}

/// [`ServerConfig::rate_limits`] in its configuration form, a
/// [`RateLimitConfig`].
mod rate_limits {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use svc_core::KeyLimits;

    use super::RateLimitConfig;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<KeyLimits, D::Error> {
        RateLimitConfig::deserialize(d).map(KeyLimits::from)
    }

    pub fn serialize<S: Serializer>(limits: &KeyLimits, s: S) -> Result<S::Ok, S::Error> {
        RateLimitConfig::from(*limits).serialize(s)
    }
}

/// A URL that may hold a password (a database's, Redis'): `Debug`,
/// `Display` and serializing show it with the password hidden; only
/// [`SecretUrl::expose`] gives it whole, for connecting.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(Url);

impl SecretUrl {
    /// The whole URL, password included: for connecting only.
    pub fn expose(&self) -> &str {
        self.0.as_str()
    }

    /// The URL's scheme, such as `postgres`.
    pub fn scheme(&self) -> &str {
        self.0.scheme()
    }

    /// The URL with its password (if any) replaced by `***`.
    pub fn redacted(&self) -> String {
        let mut url = self.0.clone();
        if url.password().is_some() {
            let _ = url.set_password(Some("***"));
        }
        url.to_string()
    }
}

impl FromStr for SecretUrl {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        // The parser's message never includes the text, which may hold a password.
        Url::parse(text.trim())
            .map(SecretUrl)
            .map_err(|e| format!("not a URL: {e}"))
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretUrl({})", self.redacted())
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl<'de> Deserialize<'de> for SecretUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        svc_core::config::text::deserialize(d)
    }
}

impl Serialize for SecretUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.redacted())
    }
}

impl ServerConfig {
    /// Lowers `max_connections` so that connections leave file descriptors
    /// for the rest (database, model files, upstreams, Redis) under a
    /// process limit of `open_files`, and `max_connections_per_address` to
    /// a quarter of that, so that one address never takes every place;
    /// returns whether either was lowered.
    pub fn fit_file_limit(&mut self, open_files: u64) -> bool {
        let reserve = (open_files / 2).min(128);
        let fits = usize::try_from(open_files - reserve)
            .unwrap_or(usize::MAX)
            .max(1);
        let mut lowered = false;
        if self.max_connections > fits {
            self.max_connections = fits;
            lowered = true;
        }
        let share = (self.max_connections / 4).max(1);
        if self.max_connections_per_address > share {
            self.max_connections_per_address = share;
            lowered = true;
        }
        lowered
    }
}

/// A secret setting (the bearer token `/metrics` wants, a client secret):
/// its `Debug` and serialized forms never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

/// The bearer token `/metrics` wants.
pub type MetricsToken = Secret;

impl Secret {
    pub fn new(token: impl Into<String>) -> Self {
        Secret(token.into())
    }

    /// The secret itself: for sending it where it belongs only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is the token, in time that does not depend on
    /// where they differ.
    pub fn matches(&self, candidate: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), candidate.as_bytes());
        let differ = a
            .iter()
            .zip(b)
            .fold(u8::from(a.len() != b.len()), |acc, (x, y)| acc | (x ^ y));
        differ == 0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let token = String::deserialize(d)?;
        if token.trim().is_empty() {
            // The token is never echoed.
            return Err(serde::de::Error::custom("must not be empty"));
        }
        Ok(Secret::new(token.trim()))
    }
}

/// For showing: the secret comes out hidden.
impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<hidden>")
    }
}

/// An address block such as `10.0.0.0/8` or `fd00::/8`; a bare address is
/// a block of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in the block (an IPv4-mapped IPv6 address counts as
    /// its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                mask_v4(u32::from(ip), self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                mask_v6(u128::from(ip), self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

fn mask_v4(bits: u32, prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        bits & (u32::MAX << (32 - u32::from(prefix)))
    }
}

fn mask_v6(bits: u128, prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        bits & (u128::MAX << (128 - u32::from(prefix)))
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let bad = || format!("{text:?} is not an address or CIDR block (such as 10.0.0.0/8)");
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address: IpAddr = address.parse().map_err(|_| bad())?;
        let address = address.to_canonical();
        let max = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
            None => max,
        };
        let network = match address {
            IpAddr::V4(a) => IpAddr::V4(mask_v4(u32::from(a), prefix).into()),
            IpAddr::V6(a) => IpAddr::V6(mask_v6(u128::from(a), prefix).into()),
        };
        if network != address {
            return Err(format!(
                "{text:?} has host bits set: write {network}/{prefix}"
            ));
        }
        Ok(Cidr { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_contain_their_addresses() {
        let block: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(block.contains("10.1.200.3".parse().unwrap()));
        assert!(block.contains("::ffff:10.1.0.1".parse().unwrap()));
        assert!(!block.contains("10.2.0.1".parse().unwrap()));
        assert!(!block.contains("::1".parse().unwrap()));
        let one: Cidr = "192.0.2.7".parse().unwrap();
        assert!(one.contains("192.0.2.7".parse().unwrap()));
        assert!(!one.contains("192.0.2.8".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("203.0.113.9".parse().unwrap()));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        assert_eq!(v6.to_string(), "fd00::/8");
    }

    #[test]
    fn bad_blocks_are_refused() {
        for bad in ["10.0.0.1/8", "10.0.0.0/33", "nonsense", "10.0.0.0/x", ""] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_file_limit_caps_connections() {
        let mut config = ServerConfig::default();
        assert!(!config.fit_file_limit(1 << 20));
        assert_eq!(config.max_connections, DEFAULT_MAX_CONNECTIONS);
        assert_eq!(
            config.max_connections_per_address,
            DEFAULT_MAX_CONNECTIONS_PER_ADDRESS
        );
        assert!(config.fit_file_limit(256));
        assert_eq!(config.max_connections, 128);
        assert_eq!(config.max_connections_per_address, 32, "a quarter");
        assert!(!config.fit_file_limit(1024));
        assert_eq!(config.max_connections, 128, "never raised");
    }

    #[test]
    fn tokens_are_compared_whole_and_never_shown() {
        let token = MetricsToken::new("s3cret");
        assert!(token.matches("s3cret"));
        assert!(!token.matches("s3cre"));
        assert!(!token.matches("s3cret!"));
        assert!(!token.matches("S3cret"));
        assert!(!format!("{token:?}").contains("s3cret"));
    }
}
