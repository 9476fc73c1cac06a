//! [`UpstreamEngine`]: one model served by several OpenAI-compatible
//! endpoints.
//!
//! A generation is attempted at one endpoint after another until one
//! yields its first event; only then does `generate` return. Every failure
//! before that point (no connection, 5xx, 429, a timeout, a body that
//! breaks or is not a chat stream) is retried elsewhere, because nothing
//! reached the caller yet. After it, a failure ends the stream with an
//! error item: text already sent cannot be taken back. Dropping the
//! stream drops the upstream response, which closes its connection and so
//! stops the upstream's generation.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request};
use svc_core::trace::{SpanKind, Value};
use svc_core::{
    EmbedRequest, Embedder, Embeddings, EndpointStatus, Engine, EngineError, EngineEvent,
    EngineStatus, EventStream, GenerateRequest, Generator, RerankRequest, Reranked, Reranker,
    Speaker, Speech, SpeechRequest, TranscribeRequest, Transcriber, Transcript,
};
use tokio::time::{Instant, timeout, timeout_at};

use crate::audio;
use crate::client::{self, BodyError, Exchange, Payload};
use crate::config::{ConfigError, EndpointConfig, Reply, UpstreamOptions};
use crate::embeddings;
use crate::error::{self, Failure};
use crate::pool::{Endpoint, Lease, Pool, Route};
use crate::proxy::Proxies;
use crate::reader::StreamReader;
use crate::request;
use crate::rerank;
use crate::translate::{Step, Translator};

/// An engine whose model runs elsewhere, behind OpenAI-compatible APIs.
pub struct UpstreamEngine {
    pool: Arc<Pool>,
    options: UpstreamOptions,
}

/// What an endpoint looks like from here, for status pages and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSnapshot {
    pub base_url: String,
    pub model: String,
    pub weight: u32,
    /// The health checks' verdict.
    pub healthy: bool,
    /// `closed`, `open` or `half_open`.
    pub breaker: &'static str,
    pub outstanding: usize,
    /// Requests sent here since start, by why (each attempt counts).
    pub routed_by_prefix: u64,
    pub routed_on_fallback: u64,
    pub routed_by_load: u64,
}

impl UpstreamEngine {
    /// Builds the engine and starts its health checks, which end when the
    /// engine and its last stream are dropped. Must run inside a Tokio
    /// runtime.
    pub fn new(
        endpoints: Vec<EndpointConfig>,
        options: UpstreamOptions,
    ) -> Result<Self, ConfigError> {
        if endpoints.is_empty() {
            return Err(ConfigError::NoEndpoints);
        }
        let durations = [
            options.connect_timeout,
            options.first_byte_timeout,
            options.idle_timeout,
            options.whole_timeout,
            options.health_interval,
            options.health_timeout,
        ];
        if durations.contains(&Duration::ZERO) || options.max_attempts == 0 {
            return Err(ConfigError::Timeout);
        }
        let limits = [
            options.chat_reply_limit,
            options.embeddings_reply_limit,
            options.rerank_reply_limit,
            options.transcript_reply_limit,
            options.error_body_limit,
            options.health_body_limit,
        ];
        if limits.contains(&0) {
            return Err(ConfigError::Limit);
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ConfigError::NoRuntime)?;
        let proxies = Proxies::from_env()?;
        let endpoints = endpoints
            .iter()
            .map(|config| Endpoint::new(config, &proxies))
            .collect::<Result<Vec<_>, _>>()?;
        for endpoint in &endpoints {
            if let Some(proxy) = &endpoint.origin.proxy {
                tracing::info!(upstream = %endpoint.base_url, proxy = %proxy.shown, "upstream reached through a proxy");
            }
        }
        let pool = Arc::new(Pool::new(endpoints, &options));
        #[expect(
            clippy::disallowed_methods,
            reason = "the checks hold the pool weakly and end once the engine is dropped"
        )]
        runtime.spawn(health_checks(Arc::downgrade(&pool), options.clone()));
        Ok(UpstreamEngine { pool, options })
    }

    /// Every endpoint's state now.
    pub fn endpoints(&self) -> Vec<EndpointSnapshot> {
        self.pool
            .endpoints
            .iter()
            .map(|e| EndpointSnapshot {
                base_url: e.base_url.clone(),
                model: e.model.clone(),
                weight: e.weight,
                healthy: e.healthy(),
                breaker: e.breaker(),
                outstanding: e.outstanding(),
                routed_by_prefix: e.routed(Route::Prefix),
                routed_on_fallback: e.routed(Route::Fallback),
                routed_by_load: e.routed(Route::Load),
            })
            .collect()
    }

    /// Prompt prefixes whose endpoint is remembered now (at most
    /// [`UpstreamOptions::affinity_entries`]).
    pub fn remembered_prefixes(&self) -> usize {
        self.pool.remembered()
    }

    /// One attempt at the endpoint of `lease`, up to its first event (for
    /// a whole reply: to its end).
    async fn attempt(
        &self,
        lease: &Lease,
        body: Vec<u8>,
        path: request::Path,
        stream: bool,
        mut translator: Translator,
        traceparent: Option<HeaderValue>,
    ) -> Result<Started, Failure> {
        let endpoint = lease.endpoint();
        let path = match path {
            request::Path::Chat => &endpoint.chat_path,
            request::Path::Completions => &endpoint.completions_path,
        };
        let (wait, accept) = if stream {
            (self.options.first_byte_timeout, "text/event-stream")
        } else {
            (self.options.whole_timeout, "application/json")
        };
        let deadline = Instant::now() + wait;
        let late = || {
            Failure::Timeout(if stream {
                format!("no first byte within {wait:?}")
            } else {
                format!("no whole reply within {wait:?}")
            })
        };
        let body = Bytes::from(body);
        let post = || {
            let mut post = endpoint.request(Method::POST, path, body.clone());
            let headers = post.headers_mut();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            headers.insert(ACCEPT, HeaderValue::from_static(accept));
            if let Some(traceparent) = &traceparent {
                headers.insert("traceparent", traceparent.clone());
            }
            post
        };
        let mut exchange = self.answered(endpoint, post, deadline, late).await?;
        let mut first = Vec::new();
        let is_json =
            content_type(&exchange.headers).is_some_and(|v| v.starts_with("application/json"));
        if is_json {
            let limit = self.options.reply_limit(Reply::Chat);
            let bytes = match timeout_at(deadline, exchange.bytes(limit)).await {
                Err(_) => return Err(late()),
                Ok(Err(e)) => return Err(whole_failed(e, Reply::Chat, limit)),
                Ok(Ok(bytes)) => bytes,
            };
            translator.whole(&bytes, &mut first)?;
            return Ok(Started::done(first));
        }
        let mut body = Body {
            exchange,
            reader: StreamReader::new(translator),
        };
        let mut started = false;
        loop {
            let step = if started {
                let idle_timeout = self.options.idle_timeout;
                let deadline = Instant::now() + idle_timeout;
                body.read(deadline, || idle(idle_timeout), &mut first)
                    .await?
            } else {
                body.read(deadline, late, &mut first).await?
            };
            started = true;
            if step == Step::Done {
                body.release();
                return Ok(Started::done(first));
            }
            if !first.is_empty() {
                return Ok(Started {
                    first,
                    rest: Some(body),
                });
            }
        }
    }

    /// Sends the request `post` makes to `endpoint` and reads its answer's
    /// head before `deadline` (else the failure `late` makes). A status
    /// other than 2xx is the endpoint's failure, with the start of the
    /// error body read within what is left of the deadline.
    async fn answered(
        &self,
        endpoint: &Endpoint,
        post: impl Fn() -> Request<Payload>,
        deadline: Instant,
        late: impl FnOnce() -> Failure,
    ) -> Result<Exchange, Failure> {
        let send = endpoint.origin.send(post, self.options.connect_timeout);
        let exchange = match timeout_at(deadline, send).await {
            Err(_) => return Err(late()),
            Ok(Err(e)) => return Err(sending_failed(e)),
            Ok(Ok(exchange)) => exchange,
        };
        if !exchange.status.is_success() {
            return Err(self.refused(exchange, deadline).await);
        }
        Ok(exchange)
    }

    /// The failure an answer of a status other than 2xx is: read from the
    /// start of its body ([`UpstreamOptions::error_body_limit`], before
    /// `deadline`), the rest left unread.
    async fn refused(&self, mut exchange: Exchange, deadline: Instant) -> Failure {
        let limit = self.options.error_body_limit;
        let bytes = timeout_at(deadline, exchange.prefix(limit))
            .await
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        error::from_status(exchange.status.as_u16(), &text)
    }

    /// One request of work answered in one piece (embeddings, rerank, a
    /// transcript) at the endpoint of `lease`: the request `post` makes
    /// for it, the reply (of kind `reply`) read whole within the
    /// whole-reply timeout and its limit, and read by `parse` (given its
    /// content type).
    async fn whole_once<T>(
        &self,
        lease: &Lease,
        reply: Reply,
        post: &impl Fn(&Endpoint) -> Request<Payload>,
        parse: &impl Fn(Option<&str>, &Bytes) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let endpoint = lease.endpoint();
        let wait = self.options.whole_timeout;
        let deadline = Instant::now() + wait;
        let late = || Failure::Timeout(format!("no whole reply within {wait:?}"));
        let send = endpoint
            .origin
            .send(|| post(endpoint), self.options.connect_timeout);
        let mut exchange = match timeout_at(deadline, send).await {
            Err(_) => return Err(late()),
            Ok(Err(e)) => return Err(sending_failed(e)),
            Ok(Ok(exchange)) => exchange,
        };
        if !exchange.status.is_success() {
            return Err(self.refused(exchange, deadline).await);
        }
        let limit = self.options.reply_limit(reply);
        let bytes = match timeout_at(deadline, exchange.bytes(limit)).await {
            Err(_) => return Err(late()),
            Ok(Err(e)) => return Err(whole_failed(e, reply, limit)),
            Ok(Ok(bytes)) => bytes,
        };
        parse(content_type(&exchange.headers), &bytes)
    }

    /// Work answered in one piece (see [`Self::whole_once`]), tried at one
    /// endpoint after another while the failure is worth retrying.
    async fn whole<T>(
        &self,
        what: &str,
        reply: Reply,
        post: impl Fn(&Endpoint) -> Request<Payload>,
        parse: impl Fn(Option<&str>, &Bytes) -> Result<T, Failure>,
    ) -> Result<T, EngineError> {
        let (post, parse) = (&post, &parse);
        let (answer, mut lease) = self
            .attempts(what, &[], |lease, _| async move {
                let outcome = self.whole_once(&lease, reply, post, parse).await;
                (lease, outcome)
            })
            .await?;
        lease.success();
        Ok(answer)
    }

    /// `once` at one endpoint after another (the first picked by the
    /// request's prefix `keys`, where affinity is on) while its failure is
    /// worth retrying, up to the attempts allowed; `what` names the work in
    /// the log, and `once` is told which attempt it is (from 1). The answer
    /// comes with its endpoint's lease, to settle. Every call to an
    /// upstream, generation included, is retried by this one loop.
    async fn attempts<T, F, Fut>(
        &self,
        what: &str,
        keys: &[u64],
        once: F,
    ) -> Result<(T, Lease), EngineError>
    where
        F: Fn(Lease, usize) -> Fut,
        Fut: std::future::Future<Output = (Lease, Result<T, Failure>)>,
    {
        let mut tried = vec![false; self.pool.endpoints.len()];
        let mut worst: Option<Failure> = None;
        for attempt in 1..=self.options.max_attempts {
            let Some(lease) = self.pool.pick(&mut tried, keys) else {
                break;
            };
            let (mut lease, outcome) = once(lease, attempt).await;
            match outcome {
                Ok(answer) => return Ok((answer, lease)),
                Err(failure) => {
                    lease.failure(&failure);
                    if !failure.retryable() {
                        return Err(failure.to_engine_error());
                    }
                    tracing::warn!(
                        upstream = %lease.endpoint().base_url,
                        attempt,
                        detail = ?failure,
                        "upstream {what} attempt failed"
                    );
                    if worst
                        .as_ref()
                        .is_none_or(|w| failure.severity() >= w.severity())
                    {
                        worst = Some(failure);
                    }
                }
            }
        }
        Err(error::exhausted(worst.as_ref()))
    }

    /// One attempt at speaking `request` at the endpoint of `lease`, up to
    /// the audio's first bytes (so that a failure before them is tried
    /// elsewhere): the reply's media type, the exchange, and those bytes.
    async fn speak_once(
        &self,
        lease: &Lease,
        request: &SpeechRequest,
    ) -> Result<(String, Exchange, Bytes), Failure> {
        let endpoint = lease.endpoint();
        let wait = self.options.first_byte_timeout;
        let deadline = Instant::now() + wait;
        let late = || Failure::Timeout(format!("no first byte within {wait:?}"));
        let body = audio::speech_body(request, &endpoint.model);
        let post = || {
            let mut post = json_post(endpoint, &endpoint.speech_path, body.clone());
            post.headers_mut()
                .insert(ACCEPT, HeaderValue::from_static("*/*"));
            post
        };
        let mut exchange = self.answered(endpoint, post, deadline, late).await?;
        let first = match timeout_at(deadline, exchange.chunk()).await {
            Err(_) => return Err(late()),
            Ok(Err(e)) => return Err(body_failed(e)),
            Ok(Ok(None)) => {
                return Err(Failure::BadResponse("the speech has no audio".to_owned()));
            }
            Ok(Ok(Some(first))) => first,
        };
        let content_type = audio::passable(content_type(&exchange.headers))
            .unwrap_or_else(|| audio::speech_type(request))
            .to_owned();
        Ok((content_type, exchange, first))
    }
}

/// A JSON `body` posted to `path` of `endpoint`, a JSON reply expected.
fn json_post(endpoint: &Endpoint, path: &hyper::Uri, body: Bytes) -> Request<Payload> {
    let mut post = endpoint.request(Method::POST, path, body);
    let headers = post.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
    post
}

/// A reply's media type, when it named one.
fn content_type(headers: &hyper::HeaderMap) -> Option<&str> {
    headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok())
}

/// An upstream response body being read as an event stream.
struct Body {
    exchange: Exchange,
    reader: StreamReader,
}

impl Body {
    /// Reads what arrives before `deadline` and translates it into `out`.
    async fn read(
        &mut self,
        deadline: Instant,
        late: impl FnOnce() -> Failure,
        out: &mut Vec<EngineEvent>,
    ) -> Result<Step, Failure> {
        match timeout_at(deadline, self.exchange.chunk()).await {
            Err(_) => self.reader.read(Err(late()), out),
            Ok(Err(e)) => self.reader.read(Err(body_failed(e)), out),
            Ok(Ok(chunk)) => self.reader.read(Ok(chunk.as_deref()), out),
        }
    }

    /// Lets a finished response give its connection back to the pool: the
    /// rest of the body (`[DONE]`, the chunked terminator) is read, at once
    /// when it is already here, else off the caller's path.
    fn release(self) {
        self.exchange.finish();
    }
}

/// An attempt that produced its first events.
struct Started {
    first: Vec<EngineEvent>,
    /// The body still to read; `None` once the `Finish` is among `first`.
    rest: Option<Body>,
}

impl Started {
    fn done(first: Vec<EngineEvent>) -> Self {
        Started { first, rest: None }
    }

    /// The caller's stream: the first events, then the rest of the body as
    /// it arrives, holding the lease (an outstanding request) until dropped.
    fn into_stream(self, mut lease: Lease, idle_timeout: Duration) -> EventStream {
        let Started { first, rest } = self;
        Box::pin(async_stream::stream! {
            for event in first {
                yield Ok(event);
            }
            let Some(mut body) = rest else {
                return;
            };
            let mut out = Vec::new();
            loop {
                let deadline = Instant::now() + idle_timeout;
                let step = body.read(deadline, || idle(idle_timeout), &mut out).await;
                for event in out.drain(..) {
                    yield Ok(event);
                }
                match step {
                    Ok(Step::More) => {}
                    Ok(Step::Done) => {
                        body.release();
                        return;
                    }
                    Err(failure) => {
                        lease.failure(&failure);
                        tracing::warn!(
                            upstream = %lease.endpoint().base_url,
                            detail = ?failure,
                            "upstream stream failed after it started"
                        );
                        yield Err(failure.to_engine_error());
                        return;
                    }
                }
            }
        })
    }
}

fn sending_failed(e: client::Error) -> Failure {
    match e {
        client::Error::Connect(detail) => Failure::Unreachable(detail),
        // Closed or reset before a response: the endpoint's fault.
        client::Error::Http(detail) => Failure::BadResponse(detail),
    }
}

fn body_failed(e: client::Error) -> Failure {
    Failure::BadResponse(format!("the upstream body broke: {e}"))
}

/// Why a reply of kind `reply` was not read whole within `limit` bytes.
fn whole_failed(e: BodyError, reply: Reply, limit: usize) -> Failure {
    match e {
        BodyError::Broke(e) => body_failed(e),
        BodyError::TooLarge => {
            let (what, key) = reply.names();
            Failure::TooLarge { what, key, limit }
        }
    }
}

fn idle(limit: Duration) -> Failure {
    Failure::Timeout(format!("no upstream data for {limit:?}"))
}

#[async_trait]
impl Generator for UpstreamEngine {
    async fn generate(&self, request: GenerateRequest) -> Result<EventStream, EngineError> {
        if request.n > 1 {
            // The translation follows one choice; several would need their
            // own state each. Refused rather than answered with one.
            return Err(EngineError::InvalidRequest {
                param: Some("n".into()),
                message: "n must be 1 on this model (it is served by an upstream)".into(),
            });
        }
        // An upstream is not asked to echo and score the prompt.
        svc_core::refuse_prompt_scoring(&request)?;
        let prompt_estimate = svc_core::estimate_tokens(&request);
        let keys = self.pool.prefix_keys(&request);
        let request = &request;
        let (started, mut lease) = self
            .attempts("generation", &keys, |lease, attempt| async move {
                let body = request::body(request, &lease.endpoint().model);
                let translator = Translator::new(request.reasoning, prompt_estimate);
                let path = request::path_of(request);
                // The attempt is a span of the caller's trace, passed on.
                let span = svc_core::trace::child("upstream attempt", SpanKind::Client);
                let traceparent = span
                    .as_ref()
                    .and_then(|s| HeaderValue::from_str(&s.context.traceparent()).ok());
                let outcome = self
                    .attempt(&lease, body, path, request.stream, translator, traceparent)
                    .await;
                if let Some(span) = span {
                    let attributes = vec![
                        (
                            "url.full".to_owned(),
                            Value::Text(lease.endpoint().base_url.clone()),
                        ),
                        (
                            "svc.attempt".to_owned(),
                            Value::Int(i64::try_from(attempt).unwrap_or(i64::MAX)),
                        ),
                    ];
                    span.end(attributes, outcome.as_ref().err().map(|f| format!("{f:?}")));
                }
                (lease, outcome)
            })
            .await?;
        lease.success();
        svc_core::trace::upstream(&lease.endpoint().base_url);
        Ok(started.into_stream(lease, self.options.idle_timeout))
    }

    /// The estimate ([`svc_core::estimate_tokens`], the same as the prompt
    /// usage of a reply that reports none): an OpenAI-compatible upstream
    /// has no endpoint that counts a chat's tokens, and its tokenizer is not
    /// known here.
    async fn count_tokens(&self, request: &GenerateRequest) -> Result<u64, EngineError> {
        Ok(svc_core::estimate_tokens(request))
    }

    /// The images are sent on; an upstream without vision refuses them.
    fn sees_images(&self) -> bool {
        true
    }
}

#[async_trait]
impl Embedder for UpstreamEngine {
    async fn embed(&self, request: EmbedRequest) -> Result<Embeddings, EngineError> {
        self.whole(
            "embeddings",
            Reply::Embeddings,
            |endpoint| {
                let body = embeddings::body(&request, &endpoint.model);
                json_post(endpoint, &endpoint.embeddings_path, body.into())
            },
            |_, bytes| embeddings::parse(bytes, &request),
        )
        .await
    }
}

#[async_trait]
impl Reranker for UpstreamEngine {
    async fn rerank(&self, request: RerankRequest) -> Result<Reranked, EngineError> {
        self.whole(
            "rerank",
            Reply::Rerank,
            |endpoint| {
                let body = rerank::body(&request, &endpoint.model);
                json_post(endpoint, &endpoint.rerank_path, body.into())
            },
            |_, bytes| rerank::parse(bytes, &request),
        )
        .await
    }
}

#[async_trait]
impl Transcriber for UpstreamEngine {
    async fn transcribe(&self, request: TranscribeRequest) -> Result<Transcript, EngineError> {
        let what = if request.translate {
            "translation"
        } else {
            "transcription"
        };
        self.whole(
            what,
            Reply::Transcript,
            |endpoint| {
                let (body, form_type) = audio::form(&request, &endpoint.model);
                let path = if request.translate {
                    &endpoint.translations_path
                } else {
                    &endpoint.transcriptions_path
                };
                let mut post = endpoint.request(Method::POST, path, body);
                let headers = post.headers_mut();
                if let Ok(form_type) = HeaderValue::from_str(&form_type) {
                    headers.insert(CONTENT_TYPE, form_type);
                }
                headers.insert(ACCEPT, HeaderValue::from_static("*/*"));
                post
            },
            |content_type, bytes| audio::transcript(bytes, content_type, &request.response_format),
        )
        .await
    }
}

#[async_trait]
impl Speaker for UpstreamEngine {
    async fn speak(&self, request: SpeechRequest) -> Result<Speech, EngineError> {
        let request = &request;
        let (started, lease) = self
            .attempts("speech", &[], |lease, _| async move {
                let outcome = self.speak_once(&lease, request).await;
                (lease, outcome)
            })
            .await?;
        let (content_type, exchange, first) = started;
        let idle_timeout = self.options.idle_timeout;
        let audio = Box::pin(async_stream::stream! {
            let mut lease = lease;
            let mut exchange = exchange;
            yield Ok(first);
            loop {
                match timeout(idle_timeout, exchange.chunk()).await {
                    Ok(Ok(Some(piece))) => yield Ok(piece),
                    Ok(Ok(None)) => {
                        lease.success();
                        return;
                    }
                    Ok(Err(e)) => {
                        let failure = body_failed(e);
                        lease.failure(&failure);
                        yield Err(failure.to_engine_error());
                        return;
                    }
                    Err(_) => {
                        let failure = idle(idle_timeout);
                        lease.failure(&failure);
                        yield Err(failure.to_engine_error());
                        return;
                    }
                }
            }
        });
        Ok(Speech {
            content_type,
            audio,
        })
    }
}

/// An upstream is asked for whatever its clients ask: it offers every
/// capability, and the endpoints answer for what they serve.
impl Engine for UpstreamEngine {
    svc_core::offers!(generator, embedder, reranker, transcriber, speaker);

    fn name(&self) -> &str {
        "upstream"
    }

    fn status(&self) -> EngineStatus {
        let endpoints: Vec<EndpointStatus> = self
            .endpoints()
            .into_iter()
            .map(|e| EndpointStatus {
                url: e.base_url,
                healthy: e.healthy && e.breaker != "open",
                outstanding: e.outstanding as u64,
                routed: vec![
                    (Route::Prefix.name(), e.routed_by_prefix),
                    (Route::Fallback.name(), e.routed_on_fallback),
                    (Route::Load.name(), e.routed_by_load),
                ],
            })
            .collect();
        EngineStatus {
            queued: 0,
            running: endpoints.iter().map(|e| e.outstanding).sum(),
            endpoints,
            ..EngineStatus::default()
        }
    }
}

/// Asks every endpoint `GET {base_url}/models` each interval, until the
/// pool is gone.
async fn health_checks(pool: Weak<Pool>, options: UpstreamOptions) {
    let mut ticker = tokio::time::interval(options.health_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        let checks = pool.endpoints.iter().map(|e| check(e, &options));
        let results = futures::future::join_all(checks).await;
        for (endpoint, result) in pool.endpoints.iter().zip(results) {
            let detail = result.as_ref().err().map_or("", String::as_str);
            endpoint.health_checked(result.is_ok(), options.health_failures, detail);
        }
    }
}

async fn check(endpoint: &Endpoint, options: &UpstreamOptions) -> Result<(), String> {
    let get = || endpoint.request(Method::GET, &endpoint.models_path, Bytes::new());
    let checked = async {
        let mut exchange = endpoint
            .origin
            .send(get, options.connect_timeout)
            .await
            .map_err(|e| e.to_string())?;
        // The status is the verdict. The body is read (so the connection
        // goes back to the pool) only up to its limit: a longer one's
        // connection is closed instead.
        let _ = exchange.prefix(options.health_body_limit).await;
        if exchange.status.is_success() {
            Ok(())
        } else {
            Err(format!("GET /models answered {}", exchange.status))
        }
    };
    timeout(options.health_timeout, checked)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {:?}", options.health_timeout)))
}
