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
) -> EventStream {
    let mut meter = Meter {
        store: state.store.clone(),
        limiter: state.limiter.clone(),
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
    store: Arc<dyn Store>,
    limiter: RateLimiter,
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
        let store = self.store.clone();
        let limiter = self.limiter.clone();
        // Outside a runtime (never in the server) there is nowhere to write.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let tokens = delta.prompt_tokens + delta.completion_tokens;
                limiter.add_tokens(&delta.key_id, tokens).await;
                if let Err(e) = store.add_usage(&delta).await {
                    tracing::warn!(error = %e, key = %delta.key_id, "recording usage failed");
                }
            });
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        self.record(TokenUsage::default());
    }
}
