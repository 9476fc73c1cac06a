//! svc's HTTP service: the OpenAI-compatible API on axum.
//!
//! [`Application::build`] binds the socket and returns the bound address, so
//! tests start the real server exactly the way `svc serve` does.

pub(crate) mod admission;
pub(crate) mod audio;
pub(crate) mod batcher;
pub(crate) mod batches;
pub(crate) mod body;
pub(crate) mod budget;
pub(crate) mod cache;
pub(crate) mod chat;
pub(crate) mod completions;
pub mod config;
pub(crate) mod dashboard;
pub(crate) mod embeddings;
pub(crate) mod endpoint;
pub(crate) mod error;
pub(crate) mod extract;
#[cfg(test)]
mod fixtures;
pub(crate) mod layers;
pub(crate) mod mcp;
pub(crate) mod messages;
pub(crate) mod metrics;
pub(crate) mod multipart;
pub mod oidc;
pub mod openapi;
pub(crate) mod otlp;
pub(crate) mod pipeline;
pub(crate) mod ratelimit;
pub(crate) mod registry;
pub(crate) mod request_id;
pub(crate) mod request_log;
pub(crate) mod rerank;
pub(crate) mod responses;
pub(crate) mod routes;
pub(crate) mod scoped;
mod serve;
pub(crate) mod startup;
pub(crate) mod state;
pub(crate) mod tls;
pub(crate) mod tools;
pub(crate) mod upload;
pub(crate) mod usage;

/// What the fuzz targets in `fuzz/` drive: the parsers of untrusted
/// bodies and the checks that make requests of them (which a test or two
/// use as well). Not part of the API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::audio::fuzz_wav_seconds;
    pub use crate::chat::valid::{MAX_STOP_SEQUENCES, ValidChatRequest};
    pub use crate::extract::parse_json;
    pub use crate::multipart::{FuzzEvent, FuzzForm, fuzz_form};
    pub use crate::responses::valid::ValidResponseRequest;
    pub use crate::routes::{fuzz_code_body, fuzz_token_form};
}

pub use config::ServerConfig;
pub use error::ApiError;
pub use registry::{Fallbacks, ModelRegistry, ModelRoute};
pub use routes::openapi::document as openapi_document;
pub use startup::Application;
