//! Errors in Anthropic's shape, `{"type": "error", "error": {"type",
//! "message"}, "request_id"}`: every answer of the Messages routes that is
//! not a reply, whatever produced it (authentication, the body's parsing,
//! rate limits and budgets, the engine, a wrong method or path), with the
//! status and headers svc gives the same error anywhere, except that an
//! overloaded engine is Anthropic's 529.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, Rendered};

/// Anthropic's status for an overloaded API.
pub const OVERLOADED: u16 = 529;

/// An [`ApiError`] said in Anthropic's shape.
#[derive(Debug)]
pub struct MessagesError(pub ApiError);

impl<E: Into<ApiError>> From<E> for MessagesError {
    fn from(error: E) -> Self {
        MessagesError(error.into())
    }
}

impl IntoResponse for MessagesError {
    fn into_response(self) -> Response {
        // Status, headers (retry-after, budgets, rate limits) and the
        // message as svc says them anywhere (a server error logged once,
        // its message quoting the request id); then Anthropic's body.
        let response = self.0.into_response();
        let Some(rendered) = response.extensions().get::<Rendered>().cloned() else {
            return response;
        };
        let (mut parts, _) = response.into_parts();
        if rendered.anthropic_type == "overloaded_error"
            && parts.status == StatusCode::TOO_MANY_REQUESTS
            && let Ok(status) = StatusCode::from_u16(OVERLOADED)
        {
            parts.status = status;
        }
        // The request log says the type this dialect answered.
        parts
            .extensions
            .insert(crate::error::ErrorType(rendered.anthropic_type.to_string()));
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let body = super::shape::body(rendered.anthropic_type, rendered.message);
        match serde_json::to_vec(&body) {
            Ok(json) => Response::from_parts(parts, Body::from(json)),
            // Our own body always serializes; were it not to, OpenAI's
            // shape is still an answer.
            Err(e) => ApiError::Internal(format!("an Anthropic error body: {e}")).into_response(),
        }
    }
}
