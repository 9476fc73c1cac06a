//! The endpoints of one model and how a request picks one: health (from the
//! periodic checks), a circuit breaker (from request outcomes), and the
//! least outstanding requests weighted by `weight`.
//!
//! Why least-outstanding and not peak-EWMA latency: an LLM request's
//! latency is mostly its own output length, so latency says little about
//! an endpoint's load, while the number of requests in flight is exactly
//! what fills a continuous-batching engine's slots. Ties go round-robin.
//!
//! Before that, prefix affinity (see [`crate::affinity`]): a request that
//! continues one an endpoint served keeps to that endpoint while it is
//! healthy, its breaker admits requests, and it has at most `slack` more
//! requests in flight (per unit of weight) than the least-loaded choice.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hyper::header::{AUTHORIZATION, HOST, HeaderValue};
use hyper::{Method, Request, Uri};

use crate::affinity::{self, Table};
use crate::client::{Origin, Payload};
use crate::config::{ConfigError, EndpointConfig, UpstreamOptions};
use crate::error::Failure;
use crate::proxy::Proxies;

/// The breaker of one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Breaker {
    /// Taking requests; counts consecutive failures.
    Closed { failures: u32 },
    /// Skipped until `until`.
    Open { until: Instant },
    /// Cooled down: one trial request at a time decides.
    HalfOpen { trial_out: bool },
}

#[derive(Debug)]
struct State {
    healthy: bool,
    health_failures: u32,
    breaker: Breaker,
}

/// One endpoint, with what the engine knows of it.
#[derive(Debug)]
pub struct Endpoint {
    /// The base URL without a trailing slash.
    pub base_url: String,
    pub model: String,
    pub weight: u32,
    /// Where requests go, with the idle connections there.
    pub origin: Arc<Origin>,
    /// Paths of the chat and models APIs, parsed once: parsing a URL is a
    /// visible part of a request's cost at thousands of requests a second.
    pub chat_path: Uri,
    /// The legacy text completions path (`completions`).
    pub completions_path: Uri,
    pub embeddings_path: Uri,
    /// `rerank` under the base URL (`/v1/rerank` for a `/v1` base, as
    /// vLLM, llama-server and Jina serve it).
    pub rerank_path: Uri,
    /// `audio/transcriptions`, `audio/translations` and `audio/speech`.
    pub transcriptions_path: Uri,
    pub translations_path: Uri,
    pub speech_path: Uri,
    pub models_path: Uri,
    /// `Bearer <key>`, marked sensitive so it is never logged.
    pub auth: Option<HeaderValue>,
    outstanding: AtomicUsize,
    /// Requests sent here, by [`Route`].
    routed: [AtomicU64; 3],
    state: Mutex<State>,
}

/// Why a request went to the endpoint it went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Its prompt continues one this endpoint served (prefix affinity).
    Prefix,
    /// Its prompt continues one another endpoint served, which was down,
    /// open, busy or already tried: least outstanding instead.
    Fallback,
    /// No prefix remembered (or too short to follow): least outstanding.
    Load,
}

impl Route {
    /// `prefix`, `fallback` or `load`, as the metrics label it.
    pub fn name(self) -> &'static str {
        match self {
            Route::Prefix => "prefix",
            Route::Fallback => "fallback",
            Route::Load => "load",
        }
    }
}

impl EndpointConfig {
    /// Checks what [`UpstreamEngine::new`](crate::UpstreamEngine::new)
    /// would refuse about this endpoint, without starting anything (the
    /// proxy variables are read, and checked, by the engine).
    pub fn validate(&self) -> Result<(), ConfigError> {
        Endpoint::new(self, &Proxies::default()).map(|_| ())
    }
}

impl Endpoint {
    /// The endpoint of `config`, reached through the proxy `proxies` name
    /// for it.
    pub fn new(config: &EndpointConfig, proxies: &Proxies) -> Result<Endpoint, ConfigError> {
        let base_url = config.base_url.trim_end_matches('/').to_owned();
        let bad_url = || ConfigError::BaseUrl(config.base_url.clone());
        let url: Uri = base_url.parse().map_err(|_| bad_url())?;
        // The URL is logged; credentials belong in the key.
        if url.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(ConfigError::Credentials);
        }
        if url.query().is_some() {
            return Err(bad_url());
        }
        let origin = Origin::new(&url, proxies).ok_or_else(bad_url)?;
        if config.model.trim().is_empty() {
            return Err(ConfigError::Model(base_url));
        }
        if config.weight == 0 {
            return Err(ConfigError::Weight(base_url));
        }
        let auth = match &config.api_key {
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose()))
                    .map_err(|_| ConfigError::Key(base_url.clone()))?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let prefix = url.path().trim_end_matches('/');
        let join = |path: &str| -> Result<Uri, ConfigError> {
            format!("{prefix}/{path}").parse().map_err(|_| bad_url())
        };
        Ok(Endpoint {
            chat_path: join("chat/completions")?,
            completions_path: join("completions")?,
            embeddings_path: join("embeddings")?,
            rerank_path: join("rerank")?,
            transcriptions_path: join("audio/transcriptions")?,
            translations_path: join("audio/translations")?,
            speech_path: join("audio/speech")?,
            models_path: join("models")?,
            origin: Arc::new(origin),
            base_url,
            model: config.model.clone(),
            weight: config.weight,
            auth,
            outstanding: AtomicUsize::new(0),
            routed: Default::default(),
            state: Mutex::new(State {
                healthy: true,
                health_failures: 0,
                breaker: Breaker::Closed { failures: 0 },
            }),
        })
    }

    /// A request to `path` here, with the `Host` and the endpoint's key.
    pub fn request(
        &self,
        method: Method,
        path: &Uri,
        body: impl Into<Payload>,
    ) -> Request<Payload> {
        let mut request = Request::new(body.into());
        *request.method_mut() = method;
        *request.uri_mut() = path.clone();
        let headers = request.headers_mut();
        headers.insert(HOST, self.origin.authority.clone());
        if let Some(auth) = &self.auth {
            headers.insert(AUTHORIZATION, auth.clone());
        }
        request
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Requests in flight to this endpoint.
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Relaxed)
    }

    /// Requests sent here by `route` since the engine started (each
    /// attempt counts: a retry elsewhere counts there too).
    pub fn routed(&self, route: Route) -> u64 {
        self.routed[route as usize].load(Ordering::Relaxed)
    }

    /// Whether the health checks consider it up.
    pub fn healthy(&self) -> bool {
        self.state().healthy
    }

    /// `closed`, `open` or `half_open`.
    pub fn breaker(&self) -> &'static str {
        match self.state().breaker {
            Breaker::Closed { .. } => "closed",
            Breaker::Open { .. } => "open",
            Breaker::HalfOpen { .. } => "half_open",
        }
    }

    /// Whether a request could be sent now (healthy or not).
    fn admissible(&self, now: Instant) -> bool {
        match self.state().breaker {
            Breaker::Closed { .. } => true,
            Breaker::Open { until } => now >= until,
            Breaker::HalfOpen { trial_out } => !trial_out,
        }
    }

    /// Takes a place for one request, if the breaker allows.
    fn admit(&self, now: Instant) -> Option<Admission> {
        let mut state = self.state();
        let admission = match state.breaker {
            Breaker::Closed { .. } => Admission::Normal,
            Breaker::Open { until } if now >= until => Admission::Trial,
            Breaker::HalfOpen { trial_out: false } => Admission::Trial,
            Breaker::Open { .. } | Breaker::HalfOpen { trial_out: true } => return None,
        };
        if admission == Admission::Trial {
            state.breaker = Breaker::HalfOpen { trial_out: true };
        }
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        Some(admission)
    }

    fn succeeded(&self) {
        let mut state = self.state();
        if state.breaker != (Breaker::Closed { failures: 0 }) {
            if !matches!(state.breaker, Breaker::Closed { .. }) {
                tracing::info!(upstream = %self.base_url, "upstream breaker closed");
            }
            state.breaker = Breaker::Closed { failures: 0 };
        }
    }

    fn failed(&self, threshold: u32, cooldown: Duration) {
        let mut state = self.state();
        let open = Breaker::Open {
            until: Instant::now() + cooldown,
        };
        match state.breaker {
            Breaker::Closed { failures } if failures + 1 >= threshold => {
                tracing::warn!(
                    upstream = %self.base_url,
                    failures = failures + 1,
                    cooldown_ms = cooldown.as_millis() as u64,
                    "upstream breaker opened"
                );
                state.breaker = open;
            }
            Breaker::Closed { failures } => {
                state.breaker = Breaker::Closed {
                    failures: failures + 1,
                }
            }
            Breaker::HalfOpen { .. } => {
                tracing::warn!(upstream = %self.base_url, "upstream trial failed; breaker open again");
                state.breaker = open;
            }
            Breaker::Open { .. } => {}
        }
    }

    /// A trial request ended without a verdict (the caller went away).
    fn trial_released(&self) {
        let mut state = self.state();
        if state.breaker == (Breaker::HalfOpen { trial_out: true }) {
            state.breaker = Breaker::HalfOpen { trial_out: false };
        }
    }

    /// Records a health check; `threshold` failures in a row mark it down,
    /// one success marks it up.
    pub fn health_checked(&self, ok: bool, threshold: u32, detail: &str) {
        let mut state = self.state();
        if ok {
            state.health_failures = 0;
            if !state.healthy {
                tracing::info!(upstream = %self.base_url, "upstream is up");
                state.healthy = true;
            }
        } else {
            state.health_failures = state.health_failures.saturating_add(1);
            if state.healthy && state.health_failures >= threshold {
                tracing::warn!(upstream = %self.base_url, detail, "upstream is down");
                state.healthy = false;
            }
        }
    }
}

/// How a request got its place at an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Normal,
    /// The one request a half-open breaker lets through.
    Trial,
}

/// Which endpoint served which prompt prefix.
#[derive(Debug)]
struct Affinity {
    table: Mutex<Table>,
    min_bytes: usize,
    slack: usize,
}

/// All endpoints of a model.
#[derive(Debug)]
pub struct Pool {
    pub endpoints: Vec<Endpoint>,
    breaker_failures: u32,
    breaker_cooldown: Duration,
    /// Where the next pick starts looking, so ties go round-robin.
    next: AtomicUsize,
    /// `None` when turned off, or with one endpoint.
    affinity: Option<Affinity>,
}

impl Pool {
    /// The pool of `endpoints` with `options`' breaker and affinity.
    pub fn new(endpoints: Vec<Endpoint>, options: &UpstreamOptions) -> Pool {
        let affinity = (options.affinity_entries > 0 && endpoints.len() > 1).then(|| Affinity {
            table: Mutex::new(Table::new(options.affinity_entries)),
            min_bytes: options.affinity_min_bytes,
            slack: options.affinity_slack,
        });
        Pool {
            endpoints,
            breaker_failures: options.breaker_failures.max(1),
            breaker_cooldown: options.breaker_cooldown,
            next: AtomicUsize::new(0),
            affinity,
        }
    }

    /// The keys `pick` follows for `request`: none when affinity is off.
    pub fn prefix_keys(&self, request: &svc_core::GenerateRequest) -> Vec<u64> {
        match &self.affinity {
            Some(a) => affinity::prefix_keys(request, a.min_bytes),
            None => Vec::new(),
        }
    }

    /// Prefix keys remembered now.
    pub fn remembered(&self) -> usize {
        self.affinity.as_ref().map_or(0, |a| lock(&a.table).len())
    }

    /// The endpoint for the next attempt, among those not `tried`: healthy
    /// ones whose breaker admits a request. With `keys` (from
    /// [`Pool::prefix_keys`]) the endpoint remembered for the longest of
    /// them, unless it is busy; else the one with the fewest requests in
    /// flight per unit of weight. The chosen endpoint is remembered for
    /// the longest key. When every endpoint is marked down the health
    /// checks may be what is wrong, so all are candidates then.
    pub fn pick(self: &Arc<Self>, tried: &mut [bool], keys: &[u64]) -> Option<Lease> {
        let n = self.endpoints.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n.max(1);
        let panic = !self.endpoints.iter().any(Endpoint::healthy);
        let mut excluded = vec![false; n];
        let affinity = self.affinity.as_ref().filter(|_| !keys.is_empty());
        let remembered = affinity.and_then(|a| lock(&a.table).lookup(keys));
        loop {
            let now = Instant::now();
            let candidate = |i: usize| {
                let e = &self.endpoints[i];
                !(tried[i] || excluded[i] || !(panic || e.healthy()) || !e.admissible(now))
            };
            let mut best: Option<(usize, usize, u32)> = None;
            for k in 0..n {
                let i = (start + k) % n;
                let e = &self.endpoints[i];
                if !candidate(i) {
                    continue;
                }
                let load = e.outstanding() + 1;
                let better = match best {
                    None => true,
                    // load / weight < best_load / best_weight, without division.
                    Some((_, best_load, best_weight)) => {
                        (load as u128) * u128::from(best_weight)
                            < (best_load as u128) * u128::from(e.weight)
                    }
                };
                if better {
                    best = Some((i, load, e.weight));
                }
            }
            let (least, least_load, least_weight) = best?;
            let (i, route) = match (remembered, affinity) {
                (Some(r), Some(a)) if r < n && candidate(r) => {
                    // Busy: more than `slack` requests beyond what would
                    // make it as good a choice as the least loaded.
                    let e = &self.endpoints[r];
                    let handicapped = (e.outstanding() + 1).saturating_sub(a.slack) as u128;
                    if handicapped * u128::from(least_weight)
                        <= (least_load as u128) * u128::from(e.weight)
                    {
                        (r, Route::Prefix)
                    } else {
                        (least, Route::Fallback)
                    }
                }
                (Some(_), _) => (least, Route::Fallback),
                (None, _) => (least, Route::Load),
            };
            match self.endpoints[i].admit(now) {
                Some(admission) => {
                    tried[i] = true;
                    let endpoint = &self.endpoints[i];
                    endpoint.routed[route as usize].fetch_add(1, Ordering::Relaxed);
                    if let (Some(a), Some(&key)) = (affinity, keys.last()) {
                        lock(&a.table).record(key, i);
                    }
                    return Some(Lease {
                        pool: self.clone(),
                        index: i,
                        admission,
                        settled: false,
                    });
                }
                // Another request took the half-open trial meanwhile.
                None => excluded[i] = true,
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A request's place at one endpoint: counted as outstanding until dropped;
/// reports the outcome to the breaker once.
#[derive(Debug)]
pub struct Lease {
    pool: Arc<Pool>,
    index: usize,
    admission: Admission,
    settled: bool,
}

impl Lease {
    pub fn endpoint(&self) -> &Endpoint {
        &self.pool.endpoints[self.index]
    }

    /// The endpoint served (or answered sanely); later outcomes are ignored.
    pub fn success(&mut self) {
        if !std::mem::replace(&mut self.settled, true) {
            self.endpoint().succeeded();
        }
    }

    /// The endpoint failed this request, before or after it started.
    pub fn failure(&mut self, failure: &Failure) {
        if !failure.retryable() {
            self.success();
            return;
        }
        // A stream that already counted as a success still counts its
        // failure: an endpoint that breaks every stream must open.
        self.settled = true;
        let pool = &self.pool;
        self.endpoint()
            .failed(pool.breaker_failures, pool.breaker_cooldown);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let endpoint = &self.pool.endpoints[self.index];
        endpoint.outstanding.fetch_sub(1, Ordering::Relaxed);
        if !self.settled && self.admission == Admission::Trial {
            endpoint.trial_released();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(weights: &[u32], failures: u32, cooldown: Duration) -> Arc<Pool> {
        let endpoints = weights
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let mut c = EndpointConfig::new(format!("http://10.0.0.{i}:8000/v1/"), "m");
                c.weight = *w;
                Endpoint::new(&c, &Proxies::default()).unwrap()
            })
            .collect();
        let options = UpstreamOptions {
            breaker_failures: failures,
            breaker_cooldown: cooldown,
            affinity_entries: 4,
            affinity_slack: 2,
            ..UpstreamOptions::default()
        };
        Arc::new(Pool::new(endpoints, &options))
    }

    fn pick(pool: &Arc<Pool>) -> Option<Lease> {
        pool.pick(&mut vec![false; pool.endpoints.len()], &[])
    }

    fn pick_keyed(pool: &Arc<Pool>, keys: &[u64]) -> Option<Lease> {
        pool.pick(&mut vec![false; pool.endpoints.len()], keys)
    }

    #[test]
    fn urls_are_derived_and_checked() {
        let p = pool(&[1], 1, Duration::ZERO);
        let e = &p.endpoints[0];
        assert_eq!(e.chat_path, "/v1/chat/completions");
        assert_eq!(e.models_path, "/v1/models");
        assert_eq!(e.origin.authority, "10.0.0.0:8000");
        let root = Endpoint::new(
            &EndpointConfig::new("https://[::1]", "m"),
            &Proxies::default(),
        )
        .unwrap();
        assert_eq!(root.chat_path, "/chat/completions");
        assert_eq!(root.origin.authority, "[::1]");
        for bad in [
            "ftp://x/v1",
            "not a url",
            "http://",
            "x/v1",
            "http://x/v1?a=b",
        ] {
            assert_eq!(
                Endpoint::new(&EndpointConfig::new(bad, "m"), &Proxies::default()).unwrap_err(),
                ConfigError::BaseUrl(bad.into())
            );
        }
        assert!(
            Endpoint::new(
                &EndpointConfig::new("http://x/v1", " "),
                &Proxies::default()
            )
            .is_err()
        );
        assert_eq!(
            Endpoint::new(
                &EndpointConfig::new("http://u:p@x/v1", "m"),
                &Proxies::default()
            )
            .unwrap_err(),
            ConfigError::Credentials
        );
        let mut c = EndpointConfig::new("http://x/v1", "m");
        c.weight = 0;
        assert!(Endpoint::new(&c, &Proxies::default()).is_err());
        c.weight = 1;
        c.api_key = Some(crate::UpstreamKey::new("sk-secret"));
        let e = Endpoint::new(&c, &Proxies::default()).unwrap();
        assert!(e.auth.as_ref().unwrap().is_sensitive());
        assert!(!format!("{e:?}").contains("sk-secret"));
        assert!(!format!("{c:?}").contains("sk-secret"));
    }

    #[test]
    fn least_outstanding_by_weight() {
        let p = pool(&[1, 3], 5, Duration::from_secs(1));
        // With weights 1:3 and leases kept, three of every four go to the
        // heavier endpoint.
        let leases: Vec<Lease> = (0..8).map(|_| pick(&p).unwrap()).collect();
        let heavy = leases.iter().filter(|l| l.index == 1).count();
        assert_eq!(heavy, 6);
        assert_eq!(p.endpoints[0].outstanding(), 2);
        drop(leases);
        assert_eq!(p.endpoints[1].outstanding(), 0);
    }

    #[test]
    fn ties_go_round_robin() {
        let p = pool(&[1, 1, 1], 5, Duration::from_secs(1));
        let mut seen = [0; 3];
        for _ in 0..30 {
            seen[pick(&p).unwrap().index] += 1;
        }
        assert_eq!(seen, [10, 10, 10]);
    }

    #[test]
    fn each_endpoint_once_per_request() {
        let p = pool(&[1, 1], 5, Duration::from_secs(1));
        let mut tried = vec![false; 2];
        let a = p.pick(&mut tried, &[]).unwrap();
        let b = p.pick(&mut tried, &[]).unwrap();
        assert_ne!(a.index, b.index);
        assert!(p.pick(&mut tried, &[]).is_none());
    }

    #[test]
    fn breaker_opens_then_lets_one_trial_through() {
        let p = pool(&[1], 3, Duration::from_millis(50));
        let boom = Failure::BadResponse("boom".into());
        for _ in 0..2 {
            pick(&p).unwrap().failure(&boom);
            assert_eq!(p.endpoints[0].breaker(), "closed");
        }
        pick(&p).unwrap().failure(&boom);
        assert_eq!(p.endpoints[0].breaker(), "open");
        assert!(pick(&p).is_none());
        std::thread::sleep(Duration::from_millis(60));
        let mut trial = pick(&p).unwrap();
        assert_eq!(trial.admission, Admission::Trial);
        assert!(pick(&p).is_none(), "only one trial at a time");
        trial.failure(&boom);
        drop(trial);
        assert_eq!(p.endpoints[0].breaker(), "open");
        std::thread::sleep(Duration::from_millis(60));
        // A trial whose caller went away frees the place for another.
        drop(pick(&p).unwrap());
        let mut trial = pick(&p).unwrap();
        trial.success();
        assert_eq!(p.endpoints[0].breaker(), "closed");
        assert!(pick(&p).is_some());
    }

    #[test]
    fn refusals_do_not_count_and_success_resets() {
        let p = pool(&[1], 2, Duration::from_secs(60));
        let boom = Failure::Timeout("slow".into());
        pick(&p).unwrap().failure(&boom);
        pick(&p)
            .unwrap()
            .failure(&Failure::Rejected(svc_core::EngineError::InvalidRequest {
                param: None,
                message: "bad".into(),
            }));
        pick(&p).unwrap().failure(&boom);
        assert_eq!(p.endpoints[0].breaker(), "closed");
        pick(&p).unwrap().failure(&boom);
        assert_eq!(p.endpoints[0].breaker(), "open");
    }

    #[test]
    fn down_endpoints_are_skipped_unless_all_are_down() {
        let p = pool(&[1, 1], 5, Duration::from_secs(1));
        p.endpoints[0].health_checked(false, 2, "refused");
        assert!(p.endpoints[0].healthy());
        p.endpoints[0].health_checked(false, 2, "refused");
        assert!(!p.endpoints[0].healthy());
        for _ in 0..4 {
            assert_eq!(pick(&p).unwrap().index, 1);
        }
        p.endpoints[1].health_checked(false, 1, "refused");
        let mut tried = vec![false; 2];
        assert!(p.pick(&mut tried, &[]).is_some() && p.pick(&mut tried, &[]).is_some());
        p.endpoints[0].health_checked(true, 2, "");
        assert!(p.endpoints[0].healthy());
        for _ in 0..4 {
            assert_eq!(pick(&p).unwrap().index, 0);
        }
    }

    #[test]
    fn a_remembered_prefix_keeps_to_its_endpoint_until_it_is_busy() {
        let p = pool(&[1, 1, 1], 5, Duration::from_secs(1));
        let first = pick_keyed(&p, &[10]).unwrap();
        let home = first.index;
        assert_eq!(p.endpoints[home].routed(Route::Load), 1);
        drop(first);
        // The next turn (a longer prompt starting with the first) and
        // another request for the same prompt go to the same endpoint,
        // even with no load elsewhere.
        let mut held = Vec::new();
        for keys in [&[10, 11][..], &[10, 11, 12], &[10]] {
            let lease = pick_keyed(&p, keys).unwrap();
            assert_eq!(lease.index, home);
            held.push(lease);
        }
        assert_eq!(p.endpoints[home].routed(Route::Prefix), 3);
        // `home` has 3 in flight and the others none: 3 more than the
        // least loaded is past the slack of 2, so the next one goes
        // elsewhere and is remembered there.
        let moved = pick_keyed(&p, &[10, 11, 12, 13]).unwrap();
        assert_ne!(moved.index, home);
        assert_eq!(p.endpoints[moved.index].routed(Route::Fallback), 1);
        drop(held);
        let again = pick_keyed(&p, &[10, 11, 12, 13, 14]).unwrap();
        assert_eq!(again.index, moved.index);
    }

    #[test]
    fn a_remembered_endpoint_that_is_down_open_or_tried_is_passed_over() {
        let p = pool(&[1, 1], 1, Duration::from_secs(60));
        let home = pick_keyed(&p, &[1]).unwrap().index;
        let other = 1 - home;
        // Tried already (a retry): the other one, which is then remembered.
        let mut tried = vec![false; 2];
        tried[home] = true;
        assert_eq!(p.pick(&mut tried, &[1]).unwrap().index, other);
        assert_eq!(pick_keyed(&p, &[1]).unwrap().index, other);
        // Down.
        p.endpoints[other].health_checked(false, 1, "refused");
        assert_eq!(pick_keyed(&p, &[1]).unwrap().index, home);
        p.endpoints[other].health_checked(true, 1, "");
        assert_eq!(pick_keyed(&p, &[1]).unwrap().index, home);
        // Breaker open.
        pick_keyed(&p, &[1])
            .unwrap()
            .failure(&Failure::BadResponse("boom".into()));
        assert_eq!(p.endpoints[home].breaker(), "open");
        assert_eq!(pick_keyed(&p, &[1]).unwrap().index, other);
        assert_eq!(p.endpoints[other].routed(Route::Fallback), 2);
        assert_eq!(p.endpoints[home].routed(Route::Fallback), 1);
    }

    #[test]
    fn affinity_is_off_with_no_entries_or_one_endpoint() {
        let mut options = UpstreamOptions {
            affinity_entries: 0,
            ..UpstreamOptions::default()
        };
        let endpoints = |n: usize| {
            (0..n)
                .map(|i| {
                    let c = EndpointConfig::new(format!("http://10.0.0.{i}:8000/v1/"), "m");
                    Endpoint::new(&c, &Proxies::default()).unwrap()
                })
                .collect::<Vec<_>>()
        };
        let long = svc_core::GenerateRequest {
            messages: vec![svc_core::ChatMessage::User("x".repeat(5000))],
            ..svc_core::GenerateRequest::default()
        };
        let off = Arc::new(Pool::new(endpoints(2), &options));
        assert!(off.prefix_keys(&long).is_empty());
        options.affinity_entries = 10;
        assert!(
            Pool::new(endpoints(1), &options)
                .prefix_keys(&long)
                .is_empty()
        );
        let on = Arc::new(Pool::new(endpoints(2), &options));
        let keys = on.prefix_keys(&long);
        assert_eq!(keys.len(), 1);
        // Without affinity the same prompt alternates.
        let a = off.pick(&mut [false; 2], &keys).unwrap().index;
        let b = off.pick(&mut [false; 2], &keys).unwrap().index;
        assert_ne!(a, b);
        let a = on.pick(&mut [false; 2], &keys).unwrap().index;
        let b = on.pick(&mut [false; 2], &keys).unwrap().index;
        assert_eq!(a, b);
        assert_eq!(on.remembered(), 1);
    }
}
