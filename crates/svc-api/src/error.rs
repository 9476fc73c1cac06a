//! The OpenAI-shaped error body: `{"error":{"message","type","param","code"}}`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The body of every error response, and of an error event in a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = ErrorResponse)]
pub struct ErrorBody {
    pub error: ErrorObject,
}

/// The inner error object; `param` and `code` are always present (maybe null).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorObject {
    /// What went wrong, for a person.
    pub message: String,
    /// The error class: `invalid_request_error`, `rate_limit_exceeded` or `server_error`.
    #[serde(rename = "type")]
    #[schema(examples("invalid_request_error"))]
    pub kind: String,
    /// The request field at fault, as a path such as `messages[0].content`, or null.
    #[schema(required = true)]
    pub param: Option<String>,
    /// A machine-readable code such as `invalid_api_key`, `model_not_found`, `invalid_value`, `context_length_exceeded`.
    #[schema(required = true, examples("invalid_value"))]
    pub code: Option<String>,
}
