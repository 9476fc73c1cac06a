//! svc's upstream engine: a model served by OpenAI-compatible endpoints
//! (vLLM, llama.cpp's llama-server, TGI, Ollama, another svc) over HTTP.
//!
//! [`UpstreamEngine`] translates a validated request into the upstream's
//! chat dialect, picks an endpoint (health checks, circuit breaker, the
//! endpoint that served the prompt's prefix, least outstanding requests by
//! weight), retries elsewhere until the first event,
//! and translates the upstream's stream back into engine events.
//! Embeddings (`embeddings`) go to the endpoints' `/embeddings` with the same
//! balancing, retries and breaker. It owns no
//! HTTP serving and no svc framing: ids, `model` and SSE framing of svc's
//! responses are the server's.

mod affinity;
mod audio;
mod client;
mod config;
mod embeddings;
mod engine;
mod error;
mod pool;
mod proxy;
mod reader;
mod request;
mod rerank;
mod sse;
mod translate;

pub use config::{ConfigError, EndpointConfig, UpstreamKey, UpstreamOptions};
pub use engine::{EndpointSnapshot, UpstreamEngine};

/// The event-stream decoder, the chunk translator and the body reader that
/// drives them, for the fuzz targets in `fuzz/`, which feed them untrusted
/// upstream bodies. Not part of the API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::reader::StreamReader;
    pub use crate::sse::{MAX_EVENT_BYTES, SseDecoder, SseError, SseEvent};
    pub use crate::translate::{Step, Translator};
}
