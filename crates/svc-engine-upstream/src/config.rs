//! What an [`UpstreamEngine`](crate::UpstreamEngine) is built from: its
//! endpoints and the timeouts, body limits, health-check and breaker
//! settings shared by all of them. [`UpstreamOptions`]' serde form is the keys a configuration file
//! may set; reading the file is the caller's business.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// An upstream API key. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct UpstreamKey(String);

impl UpstreamKey {
    pub fn new(key: impl Into<String>) -> Self {
        UpstreamKey(key.into())
    }

    /// The key itself, for the `Authorization` header only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for UpstreamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UpstreamKey(<redacted>)")
    }
}

/// One OpenAI-compatible endpoint serving the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointConfig {
    /// The API base, e.g. `http://gpu1:8000/v1` (requests go to
    /// `{base_url}/chat/completions`, health checks to `{base_url}/models`).
    pub base_url: String,
    /// The model's name at that endpoint.
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when present.
    pub api_key: Option<UpstreamKey>,
    /// Share of the load relative to the other endpoints (at least 1).
    pub weight: u32,
}

impl EndpointConfig {
    /// An endpoint with weight 1 and no key.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        EndpointConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            weight: 1,
        }
    }

    // `validate` is in pool.rs, beside the `Endpoint::new` it runs: this
    // module is below the pool and the proxies, and names neither.
}

/// Timeouts, body limits, health checks, breaker and retry settings.
///
/// Its serde form is the keys a configuration file may set (durations as
/// `5s` or `500ms`, sizes as bytes or `16MiB`), each defaulting to
/// [`UpstreamOptions::default`]; the health-check timeout, breaker and
/// attempt settings are not among them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamOptions {
    /// Opening the TCP (and TLS) connection.
    #[serde(with = "svc_core::config::duration")]
    pub connect_timeout: Duration,
    /// From sending the request to the first byte of the response body.
    #[serde(with = "svc_core::config::duration")]
    pub first_byte_timeout: Duration,
    /// Between two reads of the response body once it started.
    #[serde(with = "svc_core::config::duration")]
    pub idle_timeout: Duration,
    /// A whole (non-streamed) reply, from sending the request to the end of
    /// its body: nothing arrives before the upstream has generated it all.
    #[serde(with = "svc_core::config::duration")]
    pub whole_timeout: Duration,
    /// How often `GET {base_url}/models` is asked of every endpoint.
    #[serde(with = "svc_core::config::duration")]
    pub health_interval: Duration,
    /// The whole health-check request.
    #[serde(skip)]
    pub health_timeout: Duration,
    /// Consecutive failed health checks that mark an endpoint down.
    #[serde(skip)]
    pub health_failures: u32,
    /// Consecutive failed requests that open an endpoint's breaker.
    #[serde(skip)]
    pub breaker_failures: u32,
    /// How long an open breaker keeps the endpoint out before one trial.
    #[serde(skip)]
    pub breaker_cooldown: Duration,
    /// Endpoints one request may try; each is tried at most once.
    #[serde(skip)]
    pub max_attempts: usize,
    /// Prefix affinity: how many prompt prefixes the engine remembers the
    /// endpoint of, least recently used forgotten first; 0 turns prefix
    /// affinity off (every request goes by least outstanding).
    pub affinity_entries: usize,
    /// The shortest prompt prefix, in bytes of text (tools and messages),
    /// that affinity follows.
    pub affinity_min_bytes: usize,
    /// How many more requests in flight (per unit of weight) the
    /// remembered endpoint may have than the least loaded one before a
    /// request goes by least outstanding instead.
    pub affinity_slack: usize,
    /// The largest whole (non-streamed) chat or text completion reply.
    #[serde(with = "svc_core::config::byte_count")]
    pub chat_reply_limit: usize,
    /// The largest embeddings reply.
    #[serde(with = "svc_core::config::byte_count")]
    pub embeddings_reply_limit: usize,
    /// The largest rerank reply.
    #[serde(with = "svc_core::config::byte_count")]
    pub rerank_reply_limit: usize,
    /// The largest transcription or translation reply.
    #[serde(with = "svc_core::config::byte_count")]
    pub transcript_reply_limit: usize,
    /// How much of an error reply (a status other than 2xx) is read, for
    /// its message and the log; the rest is left unread.
    #[serde(with = "svc_core::config::byte_count")]
    pub error_body_limit: usize,
    /// How much of a health check's `GET /models` reply is read (its
    /// status is the verdict); the rest is left unread.
    #[serde(with = "svc_core::config::byte_count")]
    pub health_body_limit: usize,
}

/// A kind of reply read whole, each within a limit of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    Chat,
    Embeddings,
    Rerank,
    Transcript,
}

impl Reply {
    /// The replies as a message names them, and the key of their limit.
    pub fn names(self) -> (&'static str, &'static str) {
        match self {
            Reply::Chat => ("whole chat replies", "chat_reply_limit"),
            Reply::Embeddings => ("embeddings replies", "embeddings_reply_limit"),
            Reply::Rerank => ("rerank replies", "rerank_reply_limit"),
            Reply::Transcript => ("transcripts", "transcript_reply_limit"),
        }
    }
}

impl UpstreamOptions {
    /// The limit on a reply of kind `reply`, in bytes.
    pub fn reply_limit(&self, reply: Reply) -> usize {
        match reply {
            Reply::Chat => self.chat_reply_limit,
            Reply::Embeddings => self.embeddings_reply_limit,
            Reply::Rerank => self.rerank_reply_limit,
            Reply::Transcript => self.transcript_reply_limit,
        }
    }
}

impl Default for UpstreamOptions {
    fn default() -> Self {
        UpstreamOptions {
            connect_timeout: Duration::from_secs(5),
            // Time to first token includes the prompt's prefill and any
            // queueing at the engine: generous, or long prompts would fail.
            first_byte_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(30),
            // What the OpenAI SDKs wait for a reply by default.
            whole_timeout: Duration::from_secs(600),
            health_interval: Duration::from_secs(5),
            health_timeout: Duration::from_secs(5),
            health_failures: 2,
            breaker_failures: 5,
            breaker_cooldown: Duration::from_secs(10),
            max_attempts: usize::MAX,
            // Under half a megabyte (a key, an endpoint and a use order of
            // about 100 bytes each); a conversation holds one entry a turn
            // until older turns age out.
            affinity_entries: 4096,
            // About 256 tokens: more than a short shared system prompt.
            affinity_min_bytes: 1024,
            affinity_slack: 4,
            // Replies are read whole before they are parsed, so each kind
            // is held to what a legitimate one can reach: a chat reply with
            // top logprobs for every token of a long answer is tens of
            // megabytes; 2,048 embeddings of 1,024 floats as JSON (up to
            // 20 bytes a float) are about 40 MB, of 3,072 floats about
            // 125 MB; rerank asks for scores only (some 50 bytes a
            // document); a verbose transcript of hours of audio with word
            // timestamps a few megabytes.
            chat_reply_limit: 64 << 20,
            embeddings_reply_limit: 128 << 20,
            rerank_reply_limit: 16 << 20,
            transcript_reply_limit: 16 << 20,
            // Only the first 1,000 characters of a message are passed on
            // or logged.
            error_body_limit: 64 << 10,
            // A `/models` list of a few hundred models with their metadata.
            health_body_limit: 1 << 20,
        }
    }
}

/// A configuration the engine cannot run with.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("an upstream model needs at least one endpoint")]
    NoEndpoints,
    #[error("upstream base_url {0:?} must be an http:// or https:// URL")]
    BaseUrl(String),
    #[error("upstream base_url must not hold credentials; use the endpoint's API key instead")]
    Credentials,
    #[error("upstream {0}: model must not be empty")]
    Model(String),
    #[error("upstream {0}: weight must be at least 1")]
    Weight(String),
    #[error("upstream {0}: the API key is not a valid header value")]
    Key(String),
    #[error("proxy {0:?} must be an http:// URL (no other kind of proxy is spoken to)")]
    Proxy(String),
    #[error("upstream timeouts and intervals must be positive")]
    Timeout,
    #[error("upstream body limits must be at least 1 byte")]
    Limit,
    #[error("the upstream engine must be started inside a Tokio runtime")]
    NoRuntime,
}
