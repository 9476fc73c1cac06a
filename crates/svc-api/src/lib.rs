//! Wire types of the svc HTTP API: what goes over the socket, nothing more.
//!
//! Requests are deserialized loosely here (unknown fields ignored, as OpenAI
//! does); range checks and the mapping into typed domain values happen in
//! `svc-core`. Responses serialize exactly in OpenAI's shape.

pub mod chat;
pub mod device;
pub mod error;
pub mod models;

pub use chat::*;
pub use device::*;
pub use error::*;
pub use models::*;
