//! The OpenAI-shaped error body: `{"error":{"message","type","param","code"}}`.

use serde::{Deserialize, Serialize};

/// The body of every error response, and of an error event in a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorObject,
}

/// The inner error object; `param` and `code` are always present (maybe null).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}
