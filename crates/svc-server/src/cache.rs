//! The response cache (issue 34, `response_cache_ttl`): the reply to a
//! reproducible request (greedy, `temperature` 0, or seeded), whole or
//! streamed, kept as the bytes that were sent and sent again, the same
//! bytes, to the same project asking the same thing of the same model.
//!
//! The key is a SHA-256 of the model's identity (its engine's
//! `system_fingerprint`; the model id for an engine without one), the key's
//! project (never shared across projects), the route and the request as
//! read (its canonical JSON), so a whole and a streamed request are two
//! entries. Only a complete 200 reply is kept: one that failed, even after
//! it began streaming, or whose client left, is not. Entries live in Redis
//! when the server has one, else in the store (written in batches about a
//! second later, off the request's path, with at most 64 MiB of replies
//! waiting in memory; bounded by `response_cache_bytes`, oldest first), and
//! expire after the TTL. A hit
//! costs no engine time and no budget, says `x-svc-cache: hit`, and counts
//! in `/metrics` with the tokens it saved. `Cache-Control: no-cache` from
//! the caller skips the lookup (the fresh reply is kept), `no-store` skips
//! both, and `only-if-cached` answers from the cache or with a 504.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use hyper::body::Frame;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use svc_core::response_cache::CacheEntry;
use svc_core::{KeyRecord, Store};
use tokio_util::sync::CancellationToken;

use crate::admission::Admission;
use crate::batcher::{Batcher, Written};
use crate::error::ApiError;
use crate::extract::NamesModel;
use crate::ratelimit::Redis;
use crate::usage::Watch;

/// A reply larger than this is not kept.
const MAX_ENTRY_BYTES: usize = 1 << 20;
/// Entries waiting for the store, at most, and their bytes together (past
/// either, replies are not kept).
const QUEUE_CAPACITY: usize = 10_000;
const QUEUE_BYTES: usize = 64 << 20;
/// Entries written in one transaction, at most.
const BATCH: usize = 500;
/// How long the writer waits for more entries before writing.
const WRITE_EVERY: Duration = Duration::from_secs(1);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often, at most, the store's entries are swept (after a write).
const SWEEP_EVERY_MS: i64 = 60_000;

/// What a cached reply holds: the bytes sent, their type, and the tokens
/// they took (what a hit saves).
#[derive(Serialize, Deserialize)]
struct Entry {
    content_type: String,
    served_model: String,
    body: String,
    tokens: u64,
}

/// The cache and its counters.
pub struct ResponseCache {
    ttl: Duration,
    max_bytes: u64,
    store: Arc<dyn Store>,
    redis: Option<Arc<Redis>>,
    /// Entries on their way to the store, written a batch at a time.
    queue: Arc<Batcher<CacheEntry>>,
    last_sweep_ms: AtomicI64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub saved_tokens: AtomicU64,
}

/// What the caller's `Cache-Control` asks of the cache.
#[derive(Clone, Copy, Default)]
pub(crate) struct Directives {
    /// `no-cache`: do not answer from the cache (the reply is still kept).
    no_cache: bool,
    /// `no-store`: neither answer from it nor keep the reply.
    no_store: bool,
    /// `only-if-cached`: answer from it or not at all (504).
    only_if_cached: bool,
}

impl Directives {
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        let mut directives = Directives::default();
        for value in headers.get_all(header::CACHE_CONTROL) {
            for directive in value.to_str().unwrap_or_default().split(',') {
                let directive = directive.trim();
                directives.no_cache |= directive.eq_ignore_ascii_case("no-cache");
                directives.no_store |= directive.eq_ignore_ascii_case("no-store");
                directives.only_if_cached |= directive.eq_ignore_ascii_case("only-if-cached");
            }
        }
        directives
    }
}

/// A request as the cache sees it: each dialect's request says, beside
/// its handler, which route it is for, which model it asks, and whether it
/// gives the same reply each time; the request itself, as read, is the
/// rest of the key.
pub(crate) trait Cacheable: Serialize + NamesModel {
    /// Its route (its endpoint's tag: `chat`, `responses`, ...).
    const ROUTE: &'static str;
    /// Greedy or seeded, and nothing else makes it differ between calls.
    fn reproducible(&self) -> bool;
}

/// Whether a request's reply came from the cache, or where it goes.
pub(crate) enum Lookup {
    /// The kept reply.
    Hit(Response),
    /// Not kept (yet): keep the reply under this plan, if any.
    Miss(Option<Plan>),
}

/// The cache's plan for one request: where its reply is (or will be) kept,
/// and whether to look there first.
pub(crate) struct Plan {
    key: String,
}

impl ResponseCache {
    pub fn new(
        ttl: Duration,
        max_bytes: usize,
        store: Arc<dyn Store>,
        redis: Option<Arc<Redis>>,
    ) -> Self {
        ResponseCache {
            ttl,
            max_bytes: u64::try_from(max_bytes).unwrap_or(u64::MAX),
            store,
            redis,
            queue: Arc::new(
                Batcher::new(QUEUE_CAPACITY, BATCH)
                    .weighed(QUEUE_BYTES, |entry: &CacheEntry| entry.value.len()),
            ),
            last_sweep_ms: AtomicI64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            saved_tokens: AtomicU64::new(0),
        }
    }

    pub fn enabled(&self) -> bool {
        !self.ttl.is_zero()
    }

    /// Looks `request` up, as `key` asks it. A miss says where its reply is
    /// kept: nowhere when the cache is off, the request not reproducible,
    /// the model not one the key may use, or the caller said `no-store`.
    /// With `only-if-cached`, a miss is [`ApiError::NotCached`].
    pub(crate) async fn lookup(
        &self,
        admission: &Admission,
        directives: Directives,
        key: &KeyRecord,
        request: &impl Cacheable,
    ) -> Result<Lookup, ApiError> {
        match self.look(admission, directives, key, request).await? {
            Lookup::Miss(_) if directives.only_if_cached => Err(ApiError::NotCached),
            lookup => Ok(lookup),
        }
    }

    async fn look<R: Cacheable>(
        &self,
        admission: &Admission,
        directives: Directives,
        key: &KeyRecord,
        request: &R,
    ) -> Result<Lookup, ApiError> {
        if !self.enabled() || !request.reproducible() || directives.no_store {
            return Ok(Lookup::Miss(None));
        }
        let model = request.model();
        let Ok(served) = admission.usable(key, model) else {
            return Ok(Lookup::Miss(None));
        };
        let identity = served
            .engine
            .fingerprint()
            .unwrap_or_else(|| format!("model {model}"));
        let Ok(canonical) = serde_json::to_vec(request) else {
            return Ok(Lookup::Miss(None));
        };
        let mut hash = Sha256::new();
        for part in [
            identity.as_bytes(),
            key.project_id.0.as_bytes(),
            R::ROUTE.as_bytes(),
        ] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part);
        }
        hash.update(&canonical);
        let plan = Plan {
            key: hex::encode(hash.finalize()),
        };
        // A reply that a fallback made is one of the model that served it:
        // a key that may not use that model is not given it (it asks, and
        // its own fallbacks decide).
        if !directives.no_cache
            && let Some((hit, served, saved)) = self.get(&plan).await
            && key.may_use(&served)
        {
            // Counted in usage as a request of the model that served it,
            // priced at its `cached_response` rate (else free).
            admission.cache_hit(key, &served, saved).await?;
            return Ok(Lookup::Hit(hit));
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        Ok(Lookup::Miss(Some(plan)))
    }

    fn redis_key(key: &str) -> String {
        format!("svc:response-cache:{key}")
    }

    async fn read(&self, key: &str) -> Option<String> {
        match &self.redis {
            Some(redis) => {
                let name = Self::redis_key(key);
                let got = redis
                    .call(|mut c| async move {
                        redis::cmd("GET")
                            .arg(&name)
                            .query_async::<Option<String>>(&mut c)
                            .await
                    })
                    .await;
                got.and_then(Result::ok).flatten()
            }
            None => {
                let read = self.store.cached_response(key, now_ms()).await;
                read.inspect_err(
                    |e| tracing::warn!(error = %e, "reading the response cache failed"),
                )
                .ok()
                .flatten()
            }
        }
    }

    /// The kept reply, as it was sent, when there is one; the model that
    /// served it and the tokens it took.
    async fn get(&self, plan: &Plan) -> Option<(Response, String, u64)> {
        let entry = self
            .read(&plan.key)
            .await
            .and_then(|value| serde_json::from_str::<Entry>(&value).ok())?;
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.saved_tokens.fetch_add(entry.tokens, Ordering::Relaxed);
        let mut response = (StatusCode::OK, entry.body).into_response();
        let headers = response.headers_mut();
        if let Ok(kind) = HeaderValue::from_str(&entry.content_type) {
            headers.insert(header::CONTENT_TYPE, kind);
        }
        if entry.content_type == "text/event-stream" {
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
        }
        if let Ok(model) = HeaderValue::from_str(&entry.served_model) {
            headers.insert("x-svc-served-model", model);
        }
        headers.insert("x-svc-cache", HeaderValue::from_static("hit"));
        Some((response, entry.served_model, entry.tokens))
    }

    async fn write(self: Arc<Self>, key: String, entry: Entry) {
        let Ok(value) = serde_json::to_string(&entry) else {
            return;
        };
        let ttl_ms = i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX);
        match &self.redis {
            Some(redis) => {
                let name = Self::redis_key(&key);
                let written = redis
                    .call(|mut c| async move {
                        redis::cmd("SET")
                            .arg(&name)
                            .arg(&value)
                            .arg("PX")
                            .arg(ttl_ms.max(1))
                            .query_async::<()>(&mut c)
                            .await
                    })
                    .await;
                if let Some(Err(e)) = written {
                    tracing::warn!(error = %e, "writing the response cache failed");
                }
            }
            None => {
                let now = now_ms();
                self.queue.push([CacheEntry {
                    key,
                    value,
                    created_at_ms: now,
                    expires_at_ms: now.saturating_add(ttl_ms),
                }]);
            }
        }
    }

    /// Writes the entries queued for the store once a second (or a batch
    /// at a time), and sweeps it at most every [`SWEEP_EVERY_MS`], until
    /// `stop`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        if !self.enabled() || self.redis.is_some() {
            return;
        }
        let cache = self.clone();
        let write = move |batch: Vec<CacheEntry>| {
            let cache = cache.clone();
            async move {
                let written =
                    tokio::time::timeout(WRITE_TIMEOUT, cache.store.cache_responses(&batch)).await;
                match written {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(error = %e, "writing the response cache failed"),
                    Err(_) => tracing::warn!("writing the response cache took too long"),
                }
                cache.sweep().await;
                // A reply not kept is asked of the engine again: no retry.
                Written::Done
            }
        };
        self.queue.clone().run(WRITE_EVERY, stop, write).await;
    }

    async fn sweep(&self) {
        let now = now_ms();
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        if now - last >= SWEEP_EVERY_MS
            && self
                .last_sweep_ms
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            && let Err(e) = self.store.sweep_response_cache(now, self.max_bytes).await
        {
            tracing::warn!(error = %e, "sweeping the response cache failed");
        }
    }

    /// `response` (from the model `served`, which it says) on its way to
    /// the client, kept under `plan` (if any) once its last byte went out,
    /// when it is a 200 and `watch` saw no error in the engine's events.
    /// Says `x-svc-cache: miss`.
    pub(crate) fn keep(
        self: &Arc<Self>,
        plan: Option<Plan>,
        response: Response,
        served: &str,
        watch: Arc<Watch>,
    ) -> Response {
        let mut response = served_by(response, served);
        let Some(plan) = plan else {
            return response;
        };
        response
            .headers_mut()
            .insert("x-svc-cache", HeaderValue::from_static("miss"));
        if response.status() != StatusCode::OK {
            return response;
        }
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
            .to_owned();
        let served_model = response
            .headers()
            .get("x-svc-served-model")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let (parts, body) = response.into_parts();
        let tee = Tee {
            kept: Some(BytesMut::new()),
            done: Done {
                cache: self.clone(),
                key: plan.key,
                content_type,
                served_model,
                watch,
            },
        };
        Response::from_parts(parts, crate::body::Watched::body(body, tee))
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// What to keep once the body ended.
struct Done {
    cache: Arc<ResponseCache>,
    key: String,
    content_type: String,
    served_model: String,
    watch: Arc<Watch>,
}

/// A body's copy, kept once the whole body was sent, unless the
/// generation failed.
struct Tee {
    /// `None` once too large to keep, or after a failed frame.
    kept: Option<BytesMut>,
    done: Done,
}

impl crate::body::Watcher for Tee {
    fn frame(&mut self, frame: &Result<Frame<Bytes>, axum::Error>) {
        match frame {
            Ok(frame) => {
                if let (Some(kept), Some(data)) = (&mut self.kept, frame.data_ref()) {
                    if kept.len() + data.len() > MAX_ENTRY_BYTES {
                        self.kept = None;
                    } else {
                        kept.extend_from_slice(data);
                    }
                }
            }
            Err(_) => self.kept = None,
        }
    }

    fn done(&mut self, whole: bool) {
        let Some(kept) = self.kept.take().filter(|_| whole) else {
            return;
        };
        let done = &self.done;
        if done.watch.failed.load(Ordering::Relaxed) {
            return;
        }
        let Ok(body) = String::from_utf8(kept.to_vec()) else {
            return;
        };
        let entry = Entry {
            content_type: done.content_type.clone(),
            served_model: done.served_model.clone(),
            body,
            tokens: done.watch.tokens.load(Ordering::Relaxed),
        };
        #[expect(
            clippy::disallowed_methods,
            reason = "keeping a reply must not hold up its last byte; it ends with the write"
        )]
        tokio::spawn(done.cache.clone().write(done.key.clone(), entry));
    }
}

/// Says which model served a reply (`x-svc-served-model`): the one asked
/// for, or a fallback.
fn served_by(mut response: Response, model: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(model) {
        response.headers_mut().insert("x-svc-served-model", value);
    }
    response
}

/// Whether a request with these sampling settings gives the same reply
/// each time: greedy (`temperature` 0) or seeded.
pub(crate) fn reproducible(temperature: Option<f64>, seed: Option<i64>) -> bool {
    temperature == Some(0.0) || seed.is_some()
}
