//! Usage accounting: every completion that reaches an engine adds one
//! request and its tokens to its key's counters for the day, and its tokens
//! to the key's rate-limit window.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use svc_core::{EngineEvent, EventStream, KeyId, Store, TokenUsage, UsageDelta, day_of, now};

use crate::ratelimit::RateLimiter;
use crate::state::AppState;

/// Passes `events` through unchanged and records usage once: with the
/// tokens of the `Finish` event, or as a request without tokens when the
/// stream fails or is dropped (the client went away) before finishing.
/// The write happens on a task of its own, off the response's path.
/// Also reports time to first token and tokens to the metrics.
pub fn metered(
    events: EventStream,
    state: &AppState,
    key_id: KeyId,
    model: &str,
    arrived: Instant,
    count_tokens: bool,
) -> EventStream {
    let mut meter = Meter {
        ledger: state.ledger.clone(),
        limiter: count_tokens.then(|| state.limiter.clone()),
        key_id,
        recorded: false,
    };
    let metrics = state.metrics.clone();
    let model = model.to_owned();
    let mut first = true;
    events
        .inspect(move |event| {
            if std::mem::take(&mut first) && event.is_ok() {
                metrics.time_to_first_token(&model, arrived.elapsed());
            }
            match event {
                Ok(EngineEvent::Finish { usage, .. }) => {
                    metrics.tokens(&model, usage.prompt_tokens, usage.completion_tokens);
                    meter.record(*usage);
                }
                Err(_) => meter.record(TokenUsage::default()),
                Ok(_) => {}
            }
        })
        .boxed()
}

struct Meter {
    ledger: Arc<Ledger>,
    /// Where to count the tokens, when the key has a tokens-per-minute limit.
    limiter: Option<RateLimiter>,
    key_id: KeyId,
    recorded: bool,
}

impl Meter {
    fn record(&mut self, used: TokenUsage) {
        if std::mem::replace(&mut self.recorded, true) {
            return;
        }
        let delta = UsageDelta {
            key_id: self.key_id.clone(),
            day: day_of(now()),
            requests: 1,
            prompt_tokens: i64::try_from(used.prompt_tokens).unwrap_or(i64::MAX),
            completion_tokens: i64::try_from(used.completion_tokens).unwrap_or(i64::MAX),
        };
        let tokens = delta.prompt_tokens + delta.completion_tokens;
        self.ledger.add(delta.clone());
        let Some(limiter) = self.limiter.clone() else {
            return;
        };
        // Outside a runtime (never in the server) there is nowhere to count.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                limiter.add_tokens(&delta.key_id, tokens).await;
            });
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.record(TokenUsage::default());
    }
}

/// Usage not yet written: summed per key and day in memory and written
/// once a second (and at shutdown) in one upsert per key and day, so the
/// database sees a handful of writes per second however many requests
/// there are. A crash loses at most the last second's counts.
#[derive(Default)]
pub struct Ledger {
    pending: std::sync::Mutex<std::collections::HashMap<(KeyId, String), UsageDelta>>,
}

/// How often the ledger is written.
pub const FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Ledger {
    /// Adds one request's usage.
    pub fn add(&self, delta: UsageDelta) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        match pending.entry((delta.key_id.clone(), delta.day.clone())) {
            std::collections::hash_map::Entry::Occupied(mut sum) => {
                let sum = sum.get_mut();
                sum.requests += delta.requests;
                sum.prompt_tokens += delta.prompt_tokens;
                sum.completion_tokens += delta.completion_tokens;
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(delta);
            }
        }
    }

    /// Writes what is pending; what fails to write is kept for next time.
    pub async fn flush(&self, store: &dyn Store) {
        let pending: Vec<UsageDelta> = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending.drain().map(|(_, d)| d).collect()
        };
        for delta in pending {
            if let Err(e) = store.add_usage(&delta).await {
                tracing::warn!(error = %e, key = %delta.key_id, "recording usage failed; will retry");
                self.add(delta);
            }
        }
    }

    /// Flushes every [`FLUSH_EVERY`] until `stop`, then once more.
    pub async fn run(
        self: Arc<Self>,
        store: Arc<dyn Store>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(FLUSH_EVERY) => self.flush(&*store).await,
                () = stop.cancelled() => break,
            }
        }
        self.flush(&*store).await;
    }
}
