//! The one error type of the HTTP edge: every failure becomes a status and
//! an OpenAI-shaped body `{"error":{"message","type","param","code"}}`.

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use svc_api::{ErrorBody, ErrorObject};
use svc_core::{AuthError, EngineError, StoreError, ValidationError};
use thiserror::Error;

/// Everything a request can fail with.
#[derive(Debug, Error)]
pub enum ApiError {
    #[error(transparent)]
    Auth(AuthError),
    #[error(transparent)]
    Validation(#[from] ValidationError),
    /// The body is not JSON, or JSON of the wrong shape.
    #[error("{message}")]
    InvalidBody {
        param: Option<String>,
        message: String,
    },
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    #[error("request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// The body did not arrive within the body timeout.
    #[error("{0}")]
    BodyTimeout(crate::body::BodyTimedOut),
    #[error("The model `{0}` does not exist or you do not have access to it.")]
    ModelNotFound(String),
    #[error("Invalid URL ({method} {path})")]
    UnknownUrl { method: String, path: String },
    #[error("Method {method} is not allowed for {path}")]
    MethodNotAllowed { method: String, path: String },
    #[error(transparent)]
    Engine(EngineError),
    /// Authenticated, but not allowed to do this.
    #[error("{0}")]
    Forbidden(String),
    #[error("{}", rate_limit_message(.0))]
    RateLimited(crate::ratelimit::Verdict),
    /// The key already has as many requests of this kind in flight as it
    /// may (`what` names them).
    #[error(
        "Too many {what} requests in flight for this API key: Limit {limit} at a time. Please wait for the previous one to finish."
    )]
    TooManyInFlight { what: &'static str, limit: usize },
    /// A budget (tokens or spend) of the key or its project is spent.
    #[error("{}", quota_message(.0))]
    QuotaExceeded(crate::budget::BudgetState),
    /// Storing the response would take its project past the storage
    /// quota: 400 on `store` (waiting does not help, `store: false` does).
    #[error("{}", storage_quota_message(.usage, .quota))]
    StorageQuotaExceeded {
        usage: svc_core::StorageUsage,
        quota: svc_core::StorageQuota,
    },
    #[error("the store is unavailable")]
    Unavailable,
    /// The uploads in progress, all keys together, hold as many bytes on
    /// disk as they may (`uploads_disk_bytes`): 503, retry shortly.
    #[error(
        "The uploads in progress fill the server's room for them ({limit} bytes); retry shortly."
    )]
    UploadSpaceFull { limit: usize },
    /// `Cache-Control: only-if-cached`, and the response cache holds no
    /// reply to this request (RFC 9111: 504).
    #[error("The response cache holds no reply to this request (Cache-Control: only-if-cached).")]
    NotCached,
    /// A resource other than a model that does not exist (or is not the
    /// caller's): `code` `not_found`.
    #[error("{message}")]
    NotFound {
        param: Option<String>,
        message: String,
    },
    /// `error`, blamed on the request field `param` (a dialect whose
    /// fields are named otherwise than chat's, such as `input` for the
    /// messages).
    #[error("{error}")]
    OnParam {
        param: &'static str,
        error: Box<ApiError>,
    },
    /// An MCP server a request's `mcp` tool names could not list its
    /// tools (down, slow, refusing): 424, as OpenAI answers, blamed on
    /// the tool (`param`). The message names the server's label and why,
    /// never its URL or headers.
    #[error("Error retrieving tool list from MCP server '{label}': {reason}")]
    ToolServer {
        param: String,
        label: String,
        reason: String,
    },
    /// Anything else: logged with the request id, never shown.
    #[error("internal: {0}")]
    Internal(String),
}

impl From<AuthError> for ApiError {
    fn from(err: AuthError) -> Self {
        match err {
            AuthError::Store(e) => ApiError::from(e),
            other => ApiError::Auth(other),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            // The database is down or not answering: a 503 the client may
            // retry, not a 500 that says the server is broken.
            StoreError::Unavailable(cause) => {
                tracing::warn!(%cause, "the store is unavailable");
                ApiError::Unavailable
            }
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<crate::ratelimit::InFlightError> for ApiError {
    fn from(err: crate::ratelimit::InFlightError) -> Self {
        match err {
            crate::ratelimit::InFlightError::TooMany { what, limit } => {
                ApiError::TooManyInFlight { what, limit }
            }
            crate::ratelimit::InFlightError::Failed(cause) => ApiError::Internal(cause),
        }
    }
}

impl From<crate::budget::Spent> for ApiError {
    fn from(crate::budget::Spent(state): crate::budget::Spent) -> Self {
        ApiError::QuotaExceeded(state)
    }
}

impl From<EngineError> for ApiError {
    fn from(err: EngineError) -> Self {
        ApiError::Engine(err)
    }
}

impl ApiError {
    /// The answer to a request for a path no route serves.
    #[expect(
        clippy::unused_async,
        reason = "the router's fallback: an axum handler, so an async fn"
    )]
    pub(crate) async fn unknown_url(request: Request) -> ApiError {
        ApiError::UnknownUrl {
            method: request.method().to_string(),
            path: request.uri().path().to_owned(),
        }
    }

    /// The answer to a request with a method its path does not serve.
    #[expect(
        clippy::unused_async,
        reason = "the router's fallback: an axum handler, so an async fn"
    )]
    pub(crate) async fn method_not_allowed(request: Request) -> ApiError {
        ApiError::MethodNotAllowed {
            method: request.method().to_string(),
            path: request.uri().path().to_owned(),
        }
    }

    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Auth(_) => StatusCode::UNAUTHORIZED,
            ApiError::Validation(_)
            | ApiError::InvalidBody { .. }
            | ApiError::UnsupportedMediaType
            | ApiError::StorageQuotaExceeded { .. } => StatusCode::BAD_REQUEST,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::ModelNotFound(_)
            | ApiError::UnknownUrl { .. }
            | ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::OnParam { error, .. } => error.status(),
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::TooManyInFlight { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Engine(e) => match e {
                EngineError::ContextLengthExceeded { .. } | EngineError::InvalidRequest { .. } => {
                    StatusCode::BAD_REQUEST
                }
                EngineError::Overloaded(_) => StatusCode::TOO_MANY_REQUESTS,
                EngineError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                EngineError::BadGateway(_) => StatusCode::BAD_GATEWAY,
                EngineError::GatewayTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
                EngineError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            },
            ApiError::Unavailable | ApiError::UploadSpaceFull { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::NotCached => StatusCode::GATEWAY_TIMEOUT,
            ApiError::RateLimited(_) | ApiError::QuotaExceeded(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::ToolServer { .. } => StatusCode::FAILED_DEPENDENCY,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The OpenAI-shaped body. Server errors say little and carry the
    /// request id; their cause is logged here, once.
    pub fn body(&self) -> ErrorBody {
        if let ApiError::OnParam { param, error } = self {
            let mut body = error.body();
            body.error.param = Some((*param).to_owned());
            return body;
        }
        let (kind, param, code) = self.parts();
        let message = if self.status().is_server_error()
            && !matches!(
                self,
                ApiError::NotCached
                    | ApiError::UploadSpaceFull { .. }
                    | ApiError::Engine(
                        EngineError::Unavailable(_)
                            | EngineError::BadGateway(_)
                            | EngineError::GatewayTimeout(_)
                    )
            ) {
            let id = crate::scoped::request_id().unwrap_or_else(|| "unknown".into());
            tracing::error!(request_id = %id, cause = %self, "request failed");
            format!(
                "The server had an error while processing your request. Quote request id {id} when asking for help."
            )
        } else {
            self.to_string()
        };
        ErrorBody {
            error: ErrorObject {
                message,
                kind: kind.to_owned(),
                param,
                code: code.map(str::to_owned),
            },
        }
    }

    /// The body's `type` (`invalid_request_error`, `server_error`, …),
    /// without logging anything.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::OnParam { error, .. } => error.kind(),
            _ => self.parts().0,
        }
    }

    /// The body's `type`, `param` and `code`.
    fn parts(&self) -> (&'static str, Option<String>, Option<&'static str>) {
        let invalid = "invalid_request_error";
        let (kind, param, code): (&str, Option<String>, Option<&str>) = match self {
            ApiError::Auth(_) => (invalid, None, Some("invalid_api_key")),
            ApiError::Validation(v) => (invalid, Some(v.param.clone()), Some("invalid_value")),
            ApiError::InvalidBody { param, .. } => (invalid, param.clone(), Some("invalid_json")),
            ApiError::UnsupportedMediaType => (invalid, None, Some("unsupported_content_type")),
            ApiError::PayloadTooLarge { .. } => (invalid, None, Some("request_too_large")),
            ApiError::BodyTimeout(_) => (invalid, None, Some("request_timeout")),
            ApiError::ModelNotFound(_) => (invalid, Some("model".into()), Some("model_not_found")),
            ApiError::UnknownUrl { .. } => (invalid, None, Some("unknown_url")),
            ApiError::NotFound { param, .. } => (invalid, param.clone(), Some("not_found")),
            // Answered above.
            ApiError::OnParam { .. } => (invalid, None, None),
            ApiError::MethodNotAllowed { .. } => (invalid, None, Some("method_not_allowed")),
            ApiError::Engine(e) => {
                let (param, code) = match e {
                    EngineError::ContextLengthExceeded { .. } => {
                        (Some("messages".into()), "context_length_exceeded")
                    }
                    EngineError::InvalidRequest { param, .. } => (param.clone(), "invalid_value"),
                    EngineError::Overloaded(_) => (None, "engine_overloaded"),
                    EngineError::Unavailable(_) => (None, "model_unavailable"),
                    EngineError::BadGateway(_) => (None, "bad_gateway"),
                    EngineError::GatewayTimeout(_) => (None, "gateway_timeout"),
                    EngineError::Internal(_) => (None, "internal_error"),
                };
                (crate::request_log::failure_type(e), param, Some(code))
            }
            ApiError::Unavailable => ("server_error", None, Some("service_unavailable")),
            ApiError::UploadSpaceFull { .. } => ("server_error", None, Some("upload_space_full")),
            ApiError::NotCached => (invalid, None, Some("not_cached")),
            ApiError::Forbidden(_) => (invalid, None, Some("insufficient_permissions")),
            ApiError::RateLimited(v) => match v.exceeded {
                Some(crate::ratelimit::Exceeded::Tokens) => {
                    ("tokens", None, Some("rate_limit_exceeded"))
                }
                _ => ("requests", None, Some("rate_limit_exceeded")),
            },
            ApiError::TooManyInFlight { .. } => ("requests", None, Some("rate_limit_exceeded")),
            ApiError::QuotaExceeded(_) => ("insufficient_quota", None, Some("insufficient_quota")),
            ApiError::StorageQuotaExceeded { .. } => (
                invalid,
                Some("store".into()),
                Some("storage_quota_exceeded"),
            ),
            ApiError::ToolServer { param, .. } => (
                "external_connector_error",
                Some(param.clone()),
                Some("mcp_list_tools_failed"),
            ),
            ApiError::Internal(_) => ("server_error", None, Some("internal_error")),
        };
        (kind, param, code)
    }
}

impl ApiError {
    /// The error's `type` in Anthropic's Messages API, where the route
    /// answers in that dialect (see [`Rendered`]).
    pub fn anthropic_type(&self) -> &'static str {
        let invalid = "invalid_request_error";
        match self {
            ApiError::Auth(_) => "authentication_error",
            ApiError::Validation(_)
            | ApiError::InvalidBody { .. }
            | ApiError::UnsupportedMediaType
            | ApiError::PayloadTooLarge { .. }
            | ApiError::BodyTimeout(_)
            | ApiError::MethodNotAllowed { .. }
            | ApiError::StorageQuotaExceeded { .. }
            | ApiError::NotCached => invalid,
            ApiError::ModelNotFound(_)
            | ApiError::UnknownUrl { .. }
            | ApiError::NotFound { .. } => "not_found_error",
            ApiError::OnParam { error, .. } => error.anthropic_type(),
            ApiError::Forbidden(_) => "permission_error",
            ApiError::RateLimited(_)
            | ApiError::QuotaExceeded(_)
            | ApiError::TooManyInFlight { .. } => "rate_limit_error",
            ApiError::Engine(e) => match e {
                EngineError::ContextLengthExceeded { .. } | EngineError::InvalidRequest { .. } => {
                    invalid
                }
                EngineError::Overloaded(_) | EngineError::Unavailable(_) => "overloaded_error",
                EngineError::GatewayTimeout(_) => "timeout_error",
                EngineError::BadGateway(_) | EngineError::Internal(_) => "api_error",
            },
            ApiError::UploadSpaceFull { .. } => "overloaded_error",
            ApiError::ToolServer { .. } | ApiError::Unavailable | ApiError::Internal(_) => {
                "api_error"
            }
        }
    }
}

impl ApiError {
    /// `message` (the OpenAI body's) as Anthropic's body says it: with no
    /// `param` field there, the field at fault leads the message, as in
    /// `messages[0].content[1].type: ...`.
    pub fn anthropic_message(&self, message: String) -> String {
        let param = match self {
            ApiError::Validation(v) => Some(v.param.as_str()),
            ApiError::Engine(EngineError::InvalidRequest { param, .. }) => param.as_deref(),
            ApiError::OnParam { param, .. } => Some(*param),
            _ => None,
        };
        match param {
            Some(param) if !message.contains(param) => format!("{param}: {message}"),
            _ => message,
        }
    }
}

/// What an error response said, kept in its extensions so that a route of
/// another dialect (Anthropic's Messages API) can say it in its own shape
/// without parsing the body.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The error's type in Anthropic's dialect.
    pub anthropic_type: &'static str,
    /// The message of the body (a server error's quotes the request id).
    pub message: String,
}

/// Headers from names and values (those that are not valid header names
/// or values are left out).
pub(crate) fn header_map(pairs: Vec<(String, String)>) -> HeaderMap {
    pairs
        .into_iter()
        .filter_map(|(name, value)| {
            Some((
                HeaderName::try_from(name).ok()?,
                HeaderValue::try_from(value).ok()?,
            ))
        })
        .collect()
}

/// The code of an error response, in its extensions (for the metrics).
#[derive(Debug, Clone)]
pub struct ErrorCode(pub String);

/// An error answer's `type` (`invalid_request_error`, `requests`, …), for
/// the request log.
#[derive(Debug, Clone)]
pub struct ErrorType(pub String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = self.body();
        let code = body.error.code.clone();
        let rendered = Rendered {
            anthropic_type: self.anthropic_type(),
            message: self.anthropic_message(body.error.message.clone()),
        };
        let kind = ErrorType(body.error.kind.clone());
        let mut response = (status, axum::Json(body)).into_response();
        response.extensions_mut().insert(rendered);
        response.extensions_mut().insert(kind);
        if let Some(code) = code {
            response.extensions_mut().insert(ErrorCode(code));
        }
        let headers = response.headers_mut();
        if let ApiError::QuotaExceeded(state) = &self {
            headers.extend(header_map(state.headers()));
            let wait = (state.resets_at - svc_core::now()).max(1);
            if let Ok(value) = HeaderValue::try_from(wait.to_string()) {
                headers.insert(header::RETRY_AFTER, value);
            }
            return response;
        }
        if let ApiError::RateLimited(verdict) = &self {
            headers.extend(header_map(verdict.headers()));
            if let Ok(value) = HeaderValue::try_from(verdict.retry_after().to_string()) {
                headers.insert(header::RETRY_AFTER, value);
            }
            return response;
        }
        match status {
            StatusCode::UNAUTHORIZED => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}

/// Which of the project's storage quotas a refused response would pass,
/// with the setting that raises it, and what to do instead.
fn storage_quota_message(usage: &svc_core::StorageUsage, quota: &svc_core::StorageQuota) -> String {
    let passed = if usage.responses >= quota.responses {
        format!(
            "its quota of {} stored responses (response_quota_count)",
            quota.responses
        )
    } else {
        format!(
            "its quota of {} bytes of stored responses (response_quota_bytes)",
            quota.bytes
        )
    };
    format!(
        "This project keeps {} stored responses in {} bytes; storing this one would pass {passed}. \
         Delete stored responses (DELETE /v1/responses/{{id}}), wait for them to expire, \
         or send store: false.",
        usage.responses, usage.bytes
    )
}

/// OpenAI's wording for a refused request.
fn quota_message(state: &crate::budget::BudgetState) -> String {
    let scope = match state.scope {
        crate::budget::Scope::Key => "this API key",
        crate::budget::Scope::Project => "this API key's project",
    };
    let resets = chrono::DateTime::from_timestamp(state.resets_at, 0)
        .map_or_else(|| state.resets_at.to_string(), |t| t.to_rfc3339());
    match state.unit {
        svc_core::BudgetUnit::Tokens => format!(
            "You exceeded the token budget of {scope} ({} tokens); it renews at {resets}.",
            state.limit
        ),
        svc_core::BudgetUnit::Usd => format!(
            "You exceeded the spend budget of {scope} (${}); it renews at {resets}.",
            crate::budget::dollars(state.limit)
        ),
    }
}

fn rate_limit_message(verdict: &crate::ratelimit::Verdict) -> String {
    use crate::ratelimit::Exceeded;
    let (what, quota) = match verdict.exceeded {
        Some(Exceeded::Tokens) => ("tokens per min (TPM)", verdict.tokens),
        _ => ("requests per min (RPM)", verdict.requests),
    };
    let limit = quota.map_or(0, |q| q.limit);
    format!(
        "Rate limit reached for this API key on {what}: Limit {limit}. Please try again in {}s.",
        verdict.retry_after()
    )
}
