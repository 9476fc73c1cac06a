//! Usage accounting: every completion that reaches an engine adds one
//! request and its tokens to its key's counters for the day.

use std::sync::Arc;

use futures::StreamExt;
use svc_core::{EngineEvent, EventStream, KeyId, Store, TokenUsage, UsageDelta, day_of, now};

/// Passes `events` through unchanged and records usage once: with the
/// tokens of the `Finish` event, or as a request without tokens when the
/// stream fails or is dropped (the client went away) before finishing.
/// The write happens on a task of its own, off the response's path.
pub fn metered(events: EventStream, store: Arc<dyn Store>, key_id: KeyId) -> EventStream {
    let mut meter = Meter {
        store,
        key_id,
        recorded: false,
    };
    events
        .inspect(move |event| match event {
            Ok(EngineEvent::Finish { usage, .. }) => meter.record(*usage),
            Err(_) => meter.record(TokenUsage::default()),
            Ok(_) => {}
        })
        .boxed()
}

struct Meter {
    store: Arc<dyn Store>,
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
        // Outside a runtime (never in the server) there is nowhere to write.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
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
