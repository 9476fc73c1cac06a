//! Wire types of the svc HTTP API: what goes over the socket, nothing more.
//!
//! Requests are deserialized loosely here (unknown fields ignored, as OpenAI
//! does); range checks and the mapping into typed domain values happen in
//! `svc-core`. Responses serialize exactly in OpenAI's shape. Every JSON
//! body the server sends or reads is a type here, and each carries its
//! OpenAPI schema (`utoipa::ToSchema`), and names in it the schemas it
//! refers to ([`utoipa::ToSchema::schemas`]): the server's `/openapi.json`
//! holds those its operations name, and what they refer to ([`schema`]).

pub mod audio;
pub mod batches;
pub mod chat;
pub mod completions;
pub mod device;
pub mod embeddings;
pub mod error;
pub mod health;
pub mod keys;
pub mod list;
pub mod mcp;
pub mod messages;
pub mod models;
pub mod organization;
pub mod rerank;
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
pub use rerank::{RerankRequest, RerankResponse};
pub use responses::{CreateResponseRequest, DeletedResponse, ResponseObject, ResponseUsage};
pub use usage::*;

/// The longest model id a request may name, in bytes. Ids are names such as
/// `svc` or `org/model-7b-instruct:q4_k_m`; a longer one is refused while
/// the body is read (a 400 naming `model`), before any of it is kept in the
/// request log, an error or a trace.
pub const MAX_MODEL_ID: usize = 256;

/// Reads a request's `model`, refusing one longer than [`MAX_MODEL_ID`]
/// (`#[serde(deserialize_with = "crate::model_id")]`).
pub fn model_id<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let id = <String as serde::Deserialize>::deserialize(deserializer)?;
    if id.len() > MAX_MODEL_ID {
        return Err(serde::de::Error::custom(format!(
            "a model id has at most {MAX_MODEL_ID} bytes; this one has {}",
            id.len()
        )));
    }
    Ok(id)
}
