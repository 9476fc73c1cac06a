//! svc's domain, free of HTTP and SQL: API keys and the key service, the
//! validated chat request, and the two boundaries the server depends on:
//! [`Engine`] (inference) and [`Store`] (persistence).

pub mod duration;
pub mod engine;
pub mod key;
pub mod keys;
pub mod request;
pub mod store;

pub use engine::{
    ChatMessage, Engine, EngineError, EngineEvent, EventStream, FinishReason, GenerateRequest,
    OutputFormat, Sampling, TokenUsage, ToolCallChunk, ToolCallSpec, ToolChoiceSpec, ToolSpec,
};
pub use key::{ApiKey, KeyFormatError, KeyHash, KeyId};
pub use keys::{AuthError, KeyService, KeyState, NewKey};
pub use request::{ValidChatRequest, ValidationError};
pub use store::{KeyRecord, Store, StoreError};

/// Seconds since the Unix epoch, the one time unit stored and compared.
pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}
