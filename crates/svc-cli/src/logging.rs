//! Logs go to stderr, filtered by `SVC_LOG` (`info` by default), as text
//! or, with `SVC_LOG_FORMAT=json`, as one JSON object per line whose
//! `request` span carries the request id that is also the response's
//! `x-request-id`. llama.cpp's own messages come through `tracing` (its
//! warnings only, by default), less the ones about settings svc chose
//! itself ([`SpuriousLlamaWarnings`]).

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;

/// Installs the process's logger (once; later calls do nothing).
pub(crate) fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SVC_LOG")
        // llama.cpp reports every tensor at info; keep its warnings only.
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new("info,llama-cpp-2=warn,llama_cpp_2=warn")
        });
    let json = std::env::var("SVC_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .finish()
            .with(SpuriousLlamaWarnings)
            .try_init()
    } else {
        builder.finish().with(SpuriousLlamaWarnings).try_init()
    };
}

/// Drops llama.cpp's warnings about a setting svc chose and checks itself:
/// `n_ctx_seq (32768) > n_ctx_train (8192)`. llama.cpp compares the whole
/// KV pool with the model's training context because svc's sequences
/// share one pool (a unified KV cache); each sequence is capped at the
/// training context by svc (`context per sequence capped at the model's
/// training context`), so no sequence ever overflows it.
pub(crate) struct SpuriousLlamaWarnings;

impl<S: Subscriber> Layer<S> for SpuriousLlamaWarnings {
    fn event_enabled(&self, event: &Event<'_>, _: Context<'_, S>) -> bool {
        if !event.metadata().target().starts_with("llama") {
            return true;
        }
        let mut message = Message(None);
        event.record(&mut message);
        !message.0.is_some_and(|text| is_spurious(&text))
    }
}

/// Whether a llama.cpp message is one of those [`SpuriousLlamaWarnings`] drops.
fn is_spurious(text: &str) -> bool {
    text.contains("n_ctx_seq") && text.contains("n_ctx_train")
}

/// An event's `message` field, as text.
struct Message(Option<String>);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Keeps the messages of the events that reach it.
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<String>>>);

    impl<S: Subscriber> Layer<S> for Seen {
        fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
            let mut message = Message(None);
            event.record(&mut message);
            self.0.lock().unwrap().extend(message.0);
        }
    }

    // Issue 33: the first start printed llama.cpp's
    // `n_ctx_seq (32768) > n_ctx_train (8192)` warning on svc's defaults.
    #[test]
    fn llamas_context_warning_is_dropped_and_nothing_else() {
        let seen = Seen::default();
        let subscriber = tracing_subscriber::registry()
            .with(SpuriousLlamaWarnings)
            .with(seen.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(
                target: "llama-cpp-2",
                "n_ctx_seq (32768) > n_ctx_train (8192) -- possible training context overflow"
            );
            tracing::warn!(target: "llama-cpp-2", "model has unused tensor 42");
            // svc's own messages pass whatever they say.
            tracing::warn!(target: "svc_engine_llama", "n_ctx_seq and n_ctx_train");
        });
        assert_eq!(
            *seen.0.lock().unwrap(),
            ["model has unused tensor 42", "n_ctx_seq and n_ctx_train"]
        );
    }
}
