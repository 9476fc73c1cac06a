//! [`Client`]: one MCP server over Streamable HTTP, at either protocol
//! version, under [`Limits`].
//!
//! How the version is chosen ([`VersionPolicy::Auto`], the default), as the
//! official Python SDK's `mode="auto"` probe does: the first call sends
//! `server/discover` at 2026-07-28. A result naming 2026-07-28 among its
//! `supportedVersions` settles on the stateless version. Any other answer
//! that is not a transport failure (a JSON-RPC error, an HTTP 4xx or 5xx
//! without one, a result naming no modern version) is a server of the
//! handshake era, and the client sends `initialize` at 2025-11-25 instead;
//! the one exception is error -32022 whose `supported` list names neither a
//! version of this client's, which fails with [`Error::UnsupportedVersion`].
//! A timeout or a connection failure is no verdict: it fails the call, and
//! the next call probes again. The outcome is kept for the client's life.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use tokio::sync::Mutex;
use url::Url;

use crate::error::Error;
use crate::guard::{Guard, MAX_REDIRECTS};
use crate::limits::Limits;
use crate::read::Body;
use crate::wire::{self, Tool, ToolPage, ToolResult, Version};

/// How a client picks the protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VersionPolicy {
    /// Probe with `server/discover`, fall back to `initialize` (see the module).
    #[default]
    Auto,
    /// Speak this version only.
    Only(Version),
}

/// Builds a [`Client`].
#[must_use]
pub struct ClientBuilder {
    url: String,
    headers: Vec<(String, String)>,
    limits: Limits,
    policy: VersionPolicy,
    guard: Option<Guard>,
}

impl ClientBuilder {
    /// Adds a header sent with every request, such as `authorization`. Its
    /// value is marked sensitive and never shown in errors or logs.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the bounds of every call.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets how the protocol version is chosen.
    pub fn version(mut self, policy: VersionPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Guards the connection with `guard`: for ad-hoc server URLs, never for
    /// the operator's registered servers.
    pub fn guard(mut self, guard: Guard) -> Self {
        self.guard = Some(guard);
        self
    }

    /// The client; a refusal when guarded and the URL is refused outright
    /// (its name's addresses are checked at connection time).
    pub fn build(self) -> Result<Client, Error> {
        let url =
            Url::parse(&self.url).map_err(|e| Error::Config(format!("the server URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::Config("the server URL must be http or https".into()));
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let name = HeaderName::try_from(name.as_str())
                .map_err(|_| Error::Config(format!("header name {name:?} is not valid")))?;
            let mut value = HeaderValue::try_from(value.as_str())
                .map_err(|_| Error::Config(format!("the value of header {name} is not valid")))?;
            value.set_sensitive(true);
            headers.append(name, value);
        }
        let mut http = reqwest::Client::builder().connect_timeout(self.limits.connect_timeout);
        http = match &self.guard {
            Some(guard) => {
                guard.check_url(&url)?;
                http.dns_resolver(guard.resolver())
                    .redirect(guard.redirect_policy())
                    .no_proxy()
            }
            None => http.redirect(reqwest::redirect::Policy::limited(MAX_REDIRECTS)),
        };
        let http = http
            .build()
            .map_err(|e| Error::Config(format!("the HTTP client: {e}")))?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                url,
                headers,
                limits: self.limits,
                policy: self.policy,
                era: Mutex::new(Era::Unknown),
                next_id: AtomicU64::new(1),
            }),
        })
    }
}

/// A client of one MCP server; cheap to clone, and clones share its session.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    url: Url,
    headers: HeaderMap,
    limits: Limits,
    policy: VersionPolicy,
    /// The version settled on, and the 2025-11-25 session if any. Locked
    /// while negotiating, so concurrent first calls negotiate once.
    era: Mutex<Era>,
    next_id: AtomicU64,
}

/// What the client knows of the server's protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Era {
    Unknown,
    /// After `initialize`: the version the server answered and its session.
    Handshake {
        version: String,
        session: Option<String>,
    },
    Stateless,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("limits", &self.inner.limits)
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

/// What one POST of a request came to.
enum Outcome {
    /// The JSON-RPC result, with the session id the server set, if any.
    Answer {
        result: Value,
        session: Option<String>,
    },
    /// 404 to a request carrying a session id: the session is gone.
    SessionGone,
}

impl Client {
    /// A builder for a client of the server at `url`.
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            url: url.into(),
            headers: Vec::new(),
            limits: Limits::default(),
            policy: VersionPolicy::default(),
            guard: None,
        }
    }

    /// The protocol version in use, negotiating it first if no call has yet.
    pub async fn version(&self) -> Result<Version, Error> {
        self.bounded(async {
            Ok(match self.era().await? {
                Era::Stateless => Version::Stateless,
                _ => Version::Handshake,
            })
        })
        .await
    }

    /// Every tool the server offers, following `nextCursor` for at most
    /// [`Limits::max_tool_pages`] pages.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, Error> {
        self.bounded(async {
            let mut tools = Vec::new();
            let mut cursor: Option<String> = None;
            for _ in 0..self.inner.limits.max_tool_pages {
                let params = match &cursor {
                    Some(cursor) => json!({ "cursor": cursor }),
                    None => json!({}),
                };
                let page = self.request("tools/list", params).await?;
                let page: ToolPage = serde_json::from_value(page)
                    .map_err(|e| Error::Protocol(format!("tools/list: {e}")))?;
                tools.extend(page.tools);
                match page.next_cursor {
                    Some(next) if !next.is_empty() => cursor = Some(next),
                    _ => return Ok(tools),
                }
            }
            Err(Error::TooManyPages {
                limit: self.inner.limits.max_tool_pages,
            })
        })
        .await
    }

    /// Calls the tool `name` with `arguments` (a JSON object). A tool that
    /// failed is a result with `is_error`; a call the server refused is
    /// [`Error::Rpc`].
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<ToolResult, Error> {
        self.bounded(async {
            let result = self
                .request(
                    "tools/call",
                    json!({ "name": name, "arguments": arguments }),
                )
                .await?;
            if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
                return Err(Error::Protocol(
                    "the tool asked for input from the user, which svc does not give".into(),
                ));
            }
            serde_json::from_value(result).map_err(|e| Error::Protocol(format!("tools/call: {e}")))
        })
        .await
    }

    /// Runs `call` under the call's time limit.
    async fn bounded<T>(&self, call: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        let timeout = self.inner.limits.timeout;
        tokio::time::timeout(timeout, call)
            .await
            .unwrap_or(Err(Error::Timeout(timeout)))
    }

    /// Sends the request `method` in the era settled on, renewing an
    /// expired 2025-11-25 session once.
    async fn request(&self, method: &str, params: Value) -> Result<Value, Error> {
        match self.era().await? {
            Era::Stateless => self.stateless(method, params).await,
            Era::Handshake { version, session } => {
                match self
                    .handshake(method, params.clone(), &version, session.as_deref())
                    .await?
                {
                    Outcome::Answer { result, .. } => Ok(result),
                    Outcome::SessionGone => {
                        let (version, session) = self.renew(session).await?;
                        match self
                            .handshake(method, params, &version, session.as_deref())
                            .await?
                        {
                            Outcome::Answer { result, .. } => Ok(result),
                            Outcome::SessionGone => Err(Error::SessionExpired),
                        }
                    }
                }
            }
            Era::Unknown => Err(Error::Protocol("no protocol version was settled".into())),
        }
    }

    /// The era settled on, negotiating it when none is yet.
    async fn era(&self) -> Result<Era, Error> {
        let mut era = self.inner.era.lock().await;
        if *era == Era::Unknown {
            *era = self.negotiate().await?;
        }
        Ok(era.clone())
    }

    /// A new session in place of `expired`, unless another call renewed it
    /// already.
    async fn renew(&self, expired: Option<String>) -> Result<(String, Option<String>), Error> {
        let mut era = self.inner.era.lock().await;
        if let Era::Handshake { version, session } = &*era
            && *session != expired
        {
            return Ok((version.clone(), session.clone()));
        }
        tracing::debug!("MCP session expired; initializing again");
        let renewed = self.initialize().await?;
        *era = renewed.clone();
        match renewed {
            Era::Handshake { version, session } => Ok((version, session)),
            _ => Err(Error::SessionExpired),
        }
    }

    async fn negotiate(&self) -> Result<Era, Error> {
        match self.inner.policy {
            VersionPolicy::Only(Version::Handshake) => self.initialize().await,
            VersionPolicy::Only(Version::Stateless) => Ok(Era::Stateless),
            VersionPolicy::Auto => match self.stateless("server/discover", json!({})).await {
                Ok(result) => {
                    if names_version(result.get("supportedVersions"), Version::Stateless.as_str()) {
                        Ok(Era::Stateless)
                    } else {
                        self.initialize().await
                    }
                }
                Err(Error::Rpc {
                    code: wire::UNSUPPORTED_PROTOCOL_VERSION,
                    data: Some(data),
                    ..
                }) if data.get("supported").is_some_and(|s| {
                    s.as_array().is_some_and(|list| {
                        !list.iter().any(|v| {
                            v.as_str()
                                .is_some_and(|v| wire::HANDSHAKE_VERSIONS.contains(&v))
                        })
                    })
                }) =>
                {
                    let named = data
                        .get("supported")
                        .and_then(Value::as_array)
                        .map(|l| {
                            l.iter()
                                .filter_map(|v| v.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default();
                    Err(Error::UnsupportedVersion(named))
                }
                Err(Error::Rpc { .. } | Error::Status(_) | Error::Protocol(_)) => {
                    self.initialize().await
                }
                Err(other) => Err(other),
            },
        }
    }

    /// The 2025-11-25 handshake: `initialize`, then `notifications/initialized`.
    async fn initialize(&self) -> Result<Era, Error> {
        let id = self.next_id();
        let body = wire::request(id, "initialize", wire::initialize_params());
        let Outcome::Answer { result, session } =
            self.post(&body, id, HeaderMap::new(), false).await?
        else {
            return Err(Error::SessionExpired);
        };
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if !wire::HANDSHAKE_VERSIONS.contains(&version.as_str()) {
            return Err(Error::UnsupportedVersion(vec![version]));
        }
        let headers = handshake_headers(&version, session.as_deref())?;
        self.notify("notifications/initialized", headers).await?;
        Ok(Era::Handshake { version, session })
    }

    /// A request in an established 2025-11-25 era.
    async fn handshake(
        &self,
        method: &str,
        params: Value,
        version: &str,
        session: Option<&str>,
    ) -> Result<Outcome, Error> {
        let id = self.next_id();
        let body = wire::request(id, method, params);
        let headers = handshake_headers(version, session)?;
        self.post(&body, id, headers, session.is_some()).await
    }

    /// A 2026-07-28 request: the `_meta` envelope in the body, mirrored in
    /// `MCP-Protocol-Version`, `Mcp-Method` and, for a method naming
    /// something, `Mcp-Name`.
    async fn stateless(&self, method: &str, params: Value) -> Result<Value, Error> {
        let id = self.next_id();
        let mut headers = HeaderMap::new();
        headers.insert(
            wire::PROTOCOL_VERSION_HEADER,
            HeaderValue::from_static(Version::Stateless.as_str()),
        );
        headers.insert(wire::METHOD_HEADER, header_value(method)?);
        if let Some(key) = wire::name_param(method)
            && let Some(name) = params.get(key).and_then(Value::as_str)
        {
            headers.insert(
                wire::NAME_HEADER,
                header_value(&wire::encode_header_value(name))?,
            );
        }
        let body = wire::request(id, method, wire::with_envelope(params));
        match self.post(&body, id, headers, false).await? {
            Outcome::Answer { result, .. } => Ok(result),
            Outcome::SessionGone => Err(Error::SessionExpired),
        }
    }

    /// POSTs a notification; the server answers 202 with no body.
    async fn notify(&self, method: &str, headers: HeaderMap) -> Result<(), Error> {
        let response = self.send(&wire::notification(method), headers).await?;
        let status = response.status();
        if !status.is_success() {
            return Err(Error::Status(status.as_u16()));
        }
        Ok(())
    }

    /// POSTs the request `body` (whose id is `id`) and reads its answer,
    /// from a JSON body or an event stream, within the size bound.
    async fn post(
        &self,
        body: &Value,
        id: u64,
        headers: HeaderMap,
        has_session: bool,
    ) -> Result<Outcome, Error> {
        let response = self.send(body, headers).await?;
        let status = response.status();
        let session = response
            .headers()
            .get(wire::SESSION_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        if status.as_u16() == 404 && has_session {
            return Ok(Outcome::SessionGone);
        }
        let limits = self.inner.limits;
        if !status.is_success() {
            // A server may put the JSON-RPC error in the body of a 4xx.
            if content_type.starts_with("application/json")
                && let Ok(body) = Body::new(response, limits.max_response_bytes, limits.timeout)
                && let Ok(bytes) = body.whole().await
                && let Ok(wire::Reply::Answer(Err(error))) = wire::reply(&bytes, id)
            {
                return Err(error);
            }
            return Err(Error::Status(status.as_u16()));
        }
        let body = Body::new(response, limits.max_response_bytes, limits.timeout)?;
        if status.as_u16() == 202 {
            return Err(Error::Protocol(
                "the server accepted a request without answering it".into(),
            ));
        }
        let result = if content_type.starts_with("text/event-stream") {
            body.response_in_events(id).await?
        } else if content_type.starts_with("application/json") {
            match wire::reply(&body.whole().await?, id)? {
                wire::Reply::Answer(answer) => answer?,
                wire::Reply::Other => {
                    return Err(Error::Protocol(
                        "the JSON body is not the response to the request".into(),
                    ));
                }
            }
        } else {
            return Err(Error::Protocol(format!(
                "unexpected content type {content_type:?}"
            )));
        };
        Ok(Outcome::Answer { result, session })
    }

    /// Sends one POST with the client's headers and `headers`.
    async fn send(&self, body: &Value, headers: HeaderMap) -> Result<reqwest::Response, Error> {
        let body = serde_json::to_vec(body).map_err(|e| Error::Protocol(e.to_string()))?;
        let mut all = self.inner.headers.clone();
        all.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        all.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        all.extend(headers);
        self.inner
            .http
            .post(self.inner.url.clone())
            .headers(all)
            .body(body)
            .send()
            .await
            .map_err(|e| Error::from_http(e, self.inner.limits.timeout))
    }

    fn next_id(&self) -> u64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// Whether `versions` (a JSON list) names `version`.
fn names_version(versions: Option<&Value>, version: &str) -> bool {
    versions
        .and_then(Value::as_array)
        .is_some_and(|list| list.iter().any(|v| v.as_str() == Some(version)))
}

/// The headers of a request after `initialize`.
fn handshake_headers(version: &str, session: Option<&str>) -> Result<HeaderMap, Error> {
    let mut headers = HeaderMap::new();
    headers.insert(wire::PROTOCOL_VERSION_HEADER, header_value(version)?);
    if let Some(session) = session {
        headers.insert(wire::SESSION_ID_HEADER, header_value(session)?);
    }
    Ok(headers)
}

fn header_value(value: &str) -> Result<HeaderValue, Error> {
    HeaderValue::try_from(value)
        .map_err(|_| Error::Protocol(format!("{value:?} cannot be sent as a header")))
}
