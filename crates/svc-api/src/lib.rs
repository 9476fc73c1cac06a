//! Wire types of the svc HTTP API: what goes over the socket, nothing more.
//!
//! Requests are deserialized loosely here (unknown fields ignored, as OpenAI
//! does); range checks and the mapping into typed domain values happen in
//! `svc-core`. Responses serialize exactly in OpenAI's shape. Every JSON
//! body the server sends or reads is a type here, and each carries its
//! OpenAPI schema (`utoipa::ToSchema`); [`schema::components`] lists them
//! all for the server's `/openapi.json`.

pub mod batches;
pub mod chat;
pub mod completions;
pub mod device;
pub mod embeddings;
pub mod error;
pub mod health;
pub mod keys;
pub mod messages;
pub mod models;
pub mod organization;
pub mod responses;
pub mod schema;
pub mod usage;

pub use chat::*;
pub use completions::{Completion, CompletionRequest};
pub use device::*;
pub use embeddings::{EmbeddingList, EmbeddingRequest};
pub use error::*;
pub use health::*;
pub use keys::*;
pub use models::*;
pub use organization::*;
pub use responses::{CreateResponseRequest, DeletedResponse, ResponseObject, ResponseUsage};
pub use usage::*;
