//! Per-key rate limits: requests and tokens per minute, counted in fixed
//! one-minute windows, in this process or (with `--redis-url`) in Redis so
//! that every replica shares them.
//!
//! A request is counted when it arrives, whether it then succeeds or not;
//! tokens are counted when a completion finishes, so a request is refused
//! once the key's tokens of this minute reached the limit. Responses carry
//! OpenAI's `x-ratelimit-*` headers; a refusal is a 429 with `retry-after`.
//! When Redis cannot be reached, requests are let through (and a warning
//! logged): a limiter outage must not become an API outage. A Redis that
//! does not answer within [`REDIS_RESPONSE_TIMEOUT`] counts as unreachable,
//! and after a failure Redis is left alone for [`REDIS_BACKOFF`] (one
//! request then tries it again), so a hung Redis makes one request a
//! second wait, not every request. The same holds at start: a Redis that
//! does not answer then is connected to in the background
//! ([`Redis::connect`]) while requests go through uncounted, so a replica
//! restarted during a Redis incident serves instead of exiting.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use svc_core::{KeyId, KeyLimits, KeyRecord};

/// One minute, the window of both limits.
const WINDOW_MS: i64 = 60_000;

/// The longest a request waits for Redis (its answer, or a reconnection
/// under way) before it goes on uncounted. Redis answers in well under a
/// millisecond when it is well.
pub const REDIS_RESPONSE_TIMEOUT: Duration = Duration::from_millis(250);
/// The longest one attempt at (re)connecting to Redis may take.
const REDIS_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Attempts of one reconnection after the first, and the longest pause
/// between them, in ms. The redis crate's default (6 more, pauses growing
/// to a minute) kept a Redis that was back unused for a minute, and every
/// request that came meanwhile waiting on the reconnection.
const REDIS_RECONNECT_RETRIES: usize = 2;
const REDIS_RECONNECT_MAX_DELAY_MS: u64 = 500;
/// The longest the first connection at start may take before svc starts
/// without it (and keeps trying in the background).
const REDIS_START_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a Redis that did not answer at start is tried again.
const REDIS_START_RETRY: Duration = Duration::from_secs(1);
/// After Redis failed or timed out, how long requests go on without asking
/// it; then one request tries it again.
pub const REDIS_BACKOFF: Duration = Duration::from_secs(1);

/// Where the counters live.
#[derive(Clone)]
pub enum Counters {
    /// This process only (one replica).
    Local(Arc<Mutex<HashMap<String, Window>>>),
    /// Redis, shared by every replica.
    Redis(Arc<Redis>),
}

/// The Redis connection the rate limiter and the budgets share: the
/// connection manager once the first connection is made (it reconnects by
/// itself after that), and the breaker that keeps calls off a Redis that
/// just failed.
pub struct Redis {
    manager: std::sync::OnceLock<redis::aio::ConnectionManager>,
    breaker: Breaker,
}

impl Redis {
    /// Connects to the Redis at `url`. When it does not answer within
    /// [`REDIS_START_TIMEOUT`], a warning says so and a task keeps trying
    /// every [`REDIS_START_RETRY`] (for as long as the connection is in
    /// use); until then every call is `None`, as while the breaker is open.
    /// Fails only when `url` is not a Redis URL.
    pub async fn connect(url: &str) -> Result<Arc<Redis>, redis::RedisError> {
        let client = redis::Client::open(url)?;
        let redis = Arc::new(Redis {
            manager: std::sync::OnceLock::new(),
            breaker: Breaker::default(),
        });
        let first = match Self::try_connect(&client).await {
            Ok(manager) => {
                let _ = redis.manager.set(manager);
                return Ok(redis);
            }
            Err(e) => e,
        };
        tracing::warn!(
            error = %first,
            "Redis does not answer: rate limits and budgets let requests through uncounted until it does; trying again every second"
        );
        let weak = Arc::downgrade(&redis);
        #[expect(
            clippy::disallowed_methods,
            reason = "it ends once Redis answers or the server has let go of the connection"
        )]
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REDIS_START_RETRY).await;
                if weak.strong_count() == 0 {
                    return;
                }
                if let Ok(manager) = Self::try_connect(&client).await {
                    if let Some(redis) = weak.upgrade() {
                        let _ = redis.manager.set(manager);
                        tracing::info!(
                            "Redis answers: rate limits and budgets are counted there again"
                        );
                    }
                    return;
                }
            }
        });
        Ok(redis)
    }

    async fn try_connect(
        client: &redis::Client,
    ) -> Result<redis::aio::ConnectionManager, redis::RedisError> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(REDIS_RESPONSE_TIMEOUT)
            .set_connection_timeout(REDIS_CONNECT_TIMEOUT)
            .set_number_of_retries(REDIS_RECONNECT_RETRIES)
            .set_max_delay(REDIS_RECONNECT_MAX_DELAY_MS);
        let connect = redis::aio::ConnectionManager::new_with_config(client.clone(), config);
        within(REDIS_START_TIMEOUT, connect).await
    }

    /// Runs `call` on a connection (see [`Breaker::call`]); `None` when
    /// Redis is being left alone or was never reached yet.
    pub(crate) async fn call<T, F, Fut>(&self, call: F) -> Option<redis::RedisResult<T>>
    where
        F: FnOnce(redis::aio::ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let connection = self.manager.get()?.clone();
        self.breaker.call(call(connection)).await
    }
}

/// Keeps requests off a Redis that just failed: open for [`REDIS_BACKOFF`]
/// after a failure, then one caller at a time may try it again.
#[derive(Debug)]
pub struct Breaker {
    epoch: Instant,
    /// Milliseconds after `epoch` (plus one) from which Redis may be tried
    /// again; 0 while it answers.
    retry_at: AtomicU64,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            epoch: Instant::now(),
            retry_at: AtomicU64::new(0),
        }
    }
}

impl Breaker {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    fn backoff_ms() -> u64 {
        u64::try_from(REDIS_BACKOFF.as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether Redis may be asked now. Once the backoff is over, the first
    /// caller to ask is let through and the backoff starts again for the
    /// others, so a still-hung Redis holds one request per period.
    fn allow(&self) -> bool {
        let at = self.retry_at.load(Ordering::Acquire);
        if at == 0 {
            return true;
        }
        let now = self.now();
        now >= at
            && self
                .retry_at
                .compare_exchange(
                    at,
                    now.saturating_add(Self::backoff_ms()),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
    }

    /// Runs one Redis call when [`Breaker::allow`] lets it, bounded by
    /// [`REDIS_RESPONSE_TIMEOUT`], and records how it went; `None` when
    /// Redis is being left alone.
    async fn call<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Option<redis::RedisResult<T>> {
        if !self.allow() {
            return None;
        }
        let result = bounded(call).await;
        self.record(&result);
        Some(result)
    }

    fn record<T>(&self, result: &Result<T, redis::RedisError>) {
        let retry_at = match result {
            Ok(_) => 0,
            Err(_) => self.now().saturating_add(Self::backoff_ms()),
        };
        self.retry_at.store(retry_at, Ordering::Release);
    }
}

/// One key's counts in one window.
#[derive(Debug, Clone, Copy, Default)]
pub struct Window {
    start: i64,
    requests: i64,
    tokens: i64,
}

/// Counts one request; returns the requests (this one included) and the
/// tokens of the window.
const ACQUIRE: &str = r"
local r = redis.call('INCR', KEYS[1])
if r == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local t = tonumber(redis.call('GET', KEYS[2]) or '0')
return {r, t}
";

const ADD_TOKENS: &str = r"
local t = redis.call('INCRBY', KEYS[1], ARGV[1])
if t == tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return t
";

/// One limit's state after a request, as the headers say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub limit: i64,
    pub remaining: i64,
    /// Milliseconds until the window resets.
    pub reset_ms: i64,
}

/// What the limiter decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub requests: Option<Quota>,
    pub tokens: Option<Quota>,
    /// Which limit refused the request, if one did.
    pub exceeded: Option<Exceeded>,
}

/// The limit a refused request ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    Requests,
    Tokens,
}

impl Verdict {
    /// Seconds to wait before the next request can succeed.
    pub fn retry_after(&self) -> i64 {
        let reset = self.requests.or(self.tokens).map_or(1000, |q| q.reset_ms);
        (reset + 999) / 1000
    }

    /// OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`,
    /// as names and values.
    pub fn headers(&self) -> Vec<(String, String)> {
        let mut headers = Vec::new();
        for (kind, quota) in [("requests", self.requests), ("tokens", self.tokens)] {
            let Some(q) = quota else { continue };
            for (what, value) in [
                ("limit", q.limit.to_string()),
                ("remaining", q.remaining.max(0).to_string()),
                ("reset", duration_text(q.reset_ms)),
            ] {
                headers.push((format!("x-ratelimit-{what}-{kind}"), value));
            }
        }
        headers
    }
}

/// `120ms`, `1s`, `59.5s`: the form OpenAI's reset headers use.
fn duration_text(ms: i64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        let text = format!("{:.3}", ms as f64 / 1000.0);
        format!("{}s", text.trim_end_matches('0').trim_end_matches('.'))
    }
}

/// The rate limiter of one server.
#[derive(Clone)]
pub struct RateLimiter {
    defaults: KeyLimits,
    counters: Counters,
}

impl RateLimiter {
    /// Limits from `defaults` (overridden per key), counted in `counters`.
    pub fn new(defaults: KeyLimits, counters: Counters) -> Self {
        RateLimiter { defaults, counters }
    }

    /// Counts in this process.
    pub fn local(defaults: KeyLimits) -> Self {
        RateLimiter::new(defaults, Counters::Local(Arc::default()))
    }

    /// Counts in the Redis at `url` (see [`Redis::connect`]: svc starts
    /// whether or not it answers yet).
    pub async fn redis(defaults: KeyLimits, url: &str) -> Result<Self, redis::RedisError> {
        Ok(RateLimiter::new(
            defaults,
            Counters::Redis(Redis::connect(url).await?),
        ))
    }

    /// The Redis connection, when the counters are there (budgets share it).
    pub fn redis_connection(&self) -> Option<Arc<Redis>> {
        match &self.counters {
            Counters::Redis(redis) => Some(redis.clone()),
            Counters::Local(_) => None,
        }
    }

    fn limits_of(&self, key: &KeyRecord) -> KeyLimits {
        KeyLimits {
            requests_per_minute: key
                .limits
                .requests_per_minute
                .or(self.defaults.requests_per_minute)
                .filter(|l| *l > 0),
            tokens_per_minute: key
                .limits
                .tokens_per_minute
                .or(self.defaults.tokens_per_minute)
                .filter(|l| *l > 0),
        }
    }

    /// Counts a request of `key` and says whether it may go on; `None`
    /// when no limit applies to the key.
    pub async fn check(&self, key: &KeyRecord) -> Option<Verdict> {
        let limits = self.limits_of(key);
        if limits.requests_per_minute.is_none() && limits.tokens_per_minute.is_none() {
            return None;
        }
        let now = chrono::Utc::now().timestamp_millis();
        let start = now - now.rem_euclid(WINDOW_MS);
        let reset_ms = start + WINDOW_MS - now;
        let (requests, tokens) = match self.acquire(&key.id, start).await {
            Some(Ok(counts)) => counts,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "rate limiter unavailable; letting the request through");
                return None;
            }
            // Redis failed a moment ago (and that was logged): not asked.
            None => return None,
        };
        let requests_quota = limits.requests_per_minute.map(|limit| Quota {
            limit,
            remaining: limit - requests,
            reset_ms,
        });
        let tokens_quota = limits.tokens_per_minute.map(|limit| Quota {
            limit,
            remaining: limit - tokens,
            reset_ms,
        });
        let exceeded = if requests_quota.is_some_and(|q| q.remaining < 0) {
            Some(Exceeded::Requests)
        } else if tokens_quota.is_some_and(|q| q.remaining <= 0) {
            Some(Exceeded::Tokens)
        } else {
            None
        };
        Some(Verdict {
            requests: requests_quota,
            tokens: tokens_quota,
            exceeded,
        })
    }

    /// Adds the tokens of a finished request to `key`'s current window.
    pub async fn add_tokens(&self, key: &KeyId, tokens: i64) {
        if tokens <= 0 {
            return;
        }
        let now = chrono::Utc::now().timestamp_millis();
        let start = now - now.rem_euclid(WINDOW_MS);
        let result = match &self.counters {
            Counters::Local(map) => {
                let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
                let window = window_of(&mut map, &key.0, start);
                window.tokens += tokens;
                Ok(())
            }
            Counters::Redis(redis) => {
                let script = redis::Script::new(ADD_TOKENS);
                let mut invocation = script.key(redis_key(key, start, "tok"));
                invocation.arg(tokens).arg(WINDOW_MS * 2);
                let add = |mut conn| async move { invocation.invoke_async::<i64>(&mut conn).await };
                match redis.call(add).await {
                    Some(added) => added.map(|_| ()),
                    // Redis failed a moment ago (and that was logged).
                    None => return,
                }
            }
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "rate limiter unavailable; tokens not counted");
        }
    }

    /// Counts a request; `None` when Redis is being left alone.
    async fn acquire(
        &self,
        key: &KeyId,
        start: i64,
    ) -> Option<Result<(i64, i64), redis::RedisError>> {
        match &self.counters {
            Counters::Local(map) => {
                let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
                let window = window_of(&mut map, &key.0, start);
                window.requests += 1;
                Some(Ok((window.requests, window.tokens)))
            }
            Counters::Redis(redis) => {
                let script = redis::Script::new(ACQUIRE);
                let mut invocation = script.key(redis_key(key, start, "req"));
                invocation
                    .key(redis_key(key, start, "tok"))
                    .arg(WINDOW_MS * 2);
                redis
                    .call(|mut conn| async move {
                        invocation.invoke_async::<(i64, i64)>(&mut conn).await
                    })
                    .await
            }
        }
    }
}

/// A Redis call, given up after [`REDIS_RESPONSE_TIMEOUT`] whatever it
/// waits on: the connection manager's own response timeout does not cover
/// waiting for a reconnection under way.
async fn bounded<T>(
    call: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    within(REDIS_RESPONSE_TIMEOUT, call).await
}

/// `call`, or an I/O error when Redis has not answered within `limit`.
async fn within<T>(
    limit: Duration,
    call: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
        Err(redis::RedisError::from((
            redis::ErrorKind::IoError,
            "no answer from Redis in time",
        )))
    })
}

/// `svc:rl:{key_…}:<window>:req`; the braces keep one key's counters on
/// one Redis Cluster slot.
fn redis_key(key: &KeyId, start: i64, kind: &str) -> String {
    format!("svc:rl:{{{}}}:{start}:{kind}", key.0)
}

/// The current window of `key`, starting a new one (and forgetting windows
/// of other keys that ended) when the minute turned.
fn window_of<'a>(map: &'a mut HashMap<String, Window>, key: &str, start: i64) -> &'a mut Window {
    if map.len() > 10_000 {
        map.retain(|_, w| w.start >= start);
    }
    let window = map.entry(key.to_owned()).or_default();
    if window.start != start {
        *window = Window {
            start,
            requests: 0,
            tokens: 0,
        };
    }
    window
}

/// Requests of one kind a key may have in flight at once, and how many the
/// server works on at once in all (the others wait their turn, first come
/// first served): for work that costs CPU or disk but no tokens, such as
/// counting a prompt's tokens or uploading a file, which per-minute limits
/// do not bound. One key cannot
/// take more than its share, and the work in all stays off most cores.
///
/// A request that works all the time it is in flight (counting tokens)
/// holds its turn from [`InFlight::enter`] on. One that mostly waits for its
/// client between pieces of work (an upload waits for the client's next
/// bytes) takes a place with [`InFlight::admit`] and a turn for each piece
/// ([`InFlightPlace::work`]), given back as the piece ends. Turns held for
/// a whole upload let 16 keys' slow uploads hold all 64, and another
/// project's upload waited 57.9 s, until the body timeout; taken piece by
/// piece, a turn is never held while a client is slow. Turns are given
/// first come first served and each request asks for one at a time, so a
/// piece waits behind at most one piece of each other request in flight,
/// and a key has at most `per_key` of those: places are shared fairly
/// across keys.
#[derive(Debug)]
pub struct InFlight {
    /// What the requests are, for the refusal's message.
    what: &'static str,
    per_key: usize,
    running: Mutex<HashMap<KeyId, usize>>,
    all: Arc<tokio::sync::Semaphore>,
}

/// A key's place among the requests in flight; given back when dropped.
pub struct InFlightPlace<'a> {
    gate: &'a InFlight,
    key: KeyId,
    /// The turn held for the whole request ([`InFlight::enter`]).
    turn: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Drop for InFlightPlace<'_> {
    fn drop(&mut self) {
        let mut running = self.gate.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = running.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                running.remove(&self.key);
            }
        }
    }
}

/// Why [`InFlight`] gave no place, or its work no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InFlightError {
    /// The key already has as many requests of this kind in flight as it
    /// may (`what` names them): a 429 `rate_limit_exceeded`.
    TooMany { what: &'static str, limit: usize },
    /// The work's thread failed (it panicked): a 500.
    Failed(String),
}

impl InFlight {
    /// At most `per_key` requests of a key at once, and `all` worked on at
    /// once in all (each at least one).
    pub fn new(what: &'static str, per_key: usize, all: usize) -> Self {
        InFlight {
            what,
            per_key: per_key.max(1),
            running: Mutex::default(),
            all: Arc::new(tokio::sync::Semaphore::new(all.max(1))),
        }
    }

    /// A place for one request of `key`, once it is its turn (held until
    /// the place is dropped); a 429 `rate_limit_exceeded` at once when the
    /// key has its most in flight.
    pub async fn enter(&self, key: &KeyId) -> Result<InFlightPlace<'_>, InFlightError> {
        // Made before waiting, so that a request dropped while it waits
        // gives its place back.
        let mut place = self.admit(key)?;
        // The semaphore is never closed.
        place.turn = self.all.clone().acquire_owned().await.ok();
        Ok(place)
    }

    /// A place for one request of `key` that takes its turns piece by
    /// piece ([`InFlightPlace::work`]); a 429 `rate_limit_exceeded` when the
    /// key has its most in flight.
    pub fn admit(&self, key: &KeyId) -> Result<InFlightPlace<'_>, InFlightError> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let count = running.entry(key.clone()).or_default();
        if *count >= self.per_key {
            return Err(InFlightError::TooMany {
                what: self.what,
                limit: self.per_key,
            });
        }
        *count += 1;
        Ok(InFlightPlace {
            gate: self,
            key: key.clone(),
            turn: None,
        })
    }
}

impl InFlightPlace<'_> {
    /// Runs `work` on a blocking thread in a turn of its own (unless the
    /// place holds one), given back as it ends. The turn goes with the
    /// work, so a request dropped meanwhile does not free it early.
    pub async fn work<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, InFlightError> {
        let turn = match self.turn {
            Some(_) => None,
            // The semaphore is never closed.
            None => self.gate.all.clone().acquire_owned().await.ok(),
        };
        tokio::task::spawn_blocking(move || {
            let _turn = turn;
            work()
        })
        .await
        .map_err(|e| InFlightError::Failed(format!("{} work failed: {e}", self.gate.what)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_admitted_place_holds_a_turn_only_while_it_works() {
        let gate = InFlight::new("file upload", 2, 1);
        let (a, b) = (KeyId("a".into()), KeyId("b".into()));
        let first = gate.admit(&a).unwrap();
        let _second = gate.admit(&a).unwrap();
        assert!(matches!(
            gate.admit(&a),
            Err(InFlightError::TooMany { limit: 2, .. })
        ));
        // One turn in all: `a`'s places, waiting between pieces, hold none.
        let other = gate.admit(&b).unwrap();
        assert_eq!(other.work(|| 1).await.unwrap(), 1);
        assert_eq!(first.work(|| 2).await.unwrap(), 2);
        // A place that entered holds its turn until it is dropped.
        let entered = gate.enter(&b).await.unwrap();
        let waiting = first.work(|| 3);
        tokio::pin!(waiting);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), &mut waiting)
                .await
                .is_err()
        );
        drop(entered);
        assert_eq!(waiting.await.unwrap(), 3);
        drop(other);
        assert!(gate.admit(&b).is_ok());
    }

    #[test]
    fn a_failure_keeps_redis_alone_until_a_success() {
        let breaker = Breaker::default();
        assert!(breaker.allow());
        breaker.record::<()>(&Err(redis::RedisError::from((
            redis::ErrorKind::IoError,
            "gone",
        ))));
        assert!(!breaker.allow(), "left alone during the backoff");
        // The backoff is over: one caller probes, the others still wait.
        breaker.retry_at.store(1, Ordering::Release);
        assert!(breaker.allow());
        assert!(!breaker.allow());
        breaker.record(&Ok(()));
        assert!(breaker.allow() && breaker.allow());
    }

    #[test]
    fn durations_read_like_openais() {
        assert_eq!(duration_text(120), "120ms");
        assert_eq!(duration_text(1000), "1s");
        assert_eq!(duration_text(59_500), "59.5s");
        assert_eq!(duration_text(1_234), "1.234s");
    }
}
