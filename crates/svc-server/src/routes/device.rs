//! The device authorization flow's API: `POST /v1/auth/device/code`,
//! `POST /v1/auth/device/token`, and the RFC 8414 metadata that points
//! standard OAuth clients at them, `GET /.well-known/oauth-authorization-server`.
//!
//! Anyone may ask for a code, so code requests are throttled per client
//! address and overall (429 with the RFC 8628 name `slow_down` as `code`,
//! and `Retry-After`), and the number of live codes is capped.
//!
//! The token endpoint speaks two dialects, told apart by `Content-Type`:
//! - JSON (the spec's): `{"device_code"}` → `{"status":"pending"}` until
//!   approval, then once `{"status":"approved","access_token",…}`. States
//!   the spec does not show are 400s in OpenAI's error shape whose `code` is
//!   the RFC 8628 error name: `slow_down`, `access_denied`, `expired_token`,
//!   `invalid_grant` (unknown or already used code).
//! - Form-encoded (RFC 8628 section 3.4): `grant_type` and `device_code` →
//!   RFC 6749's success body, or its error body with
//!   `authorization_pending`, `slow_down`, `access_denied`, `expired_token`,
//!   `invalid_grant`, `invalid_request` or `unsupported_grant_type`.

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use svc_api::{
    AUTHORIZATION_SERVER_METADATA_PATH, AuthorizationServerMetadata, DEVICE_AUTHORIZATION_PATH,
    DEVICE_CODE_GRANT_TYPE, DeviceCodeRequest, DeviceCodeResponse, DeviceTokenRequest,
    DeviceTokenResponse, ErrorBody, ErrorObject, OAuthDeviceTokenRequest, OAuthErrorResponse,
    OAuthTokenResponse, TOKEN_PATH,
};
use svc_core::{DeviceClient, PollOutcome, plain_text};

use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::extract::{BodyLimit, ClientAddress, parse_json};
use crate::openapi::{NoStore, shared};
use crate::state::AppState;

/// What this endpoint is: its OpenAPI group, its paths and dialect, and
/// what batches and the response cache make of it.
pub(crate) const ENDPOINT: Endpoint = Endpoint::new(
    "auth",
    "The OAuth 2.0 device authorization flow (RFC 8628) that command-line clients use to obtain a key.",
)
.paths(&["/v1/auth", "/v1/admin/usage"]);

/// Longest `client_id` or `scope` kept; they are shown to the user.
const MAX_CLIENT_FIELD: usize = 200;

crate::openapi::json_schemas! {
    /// The metadata's `Cache-Control`.
    MetadataCacheControl = {"type": "string", "const": METADATA_CACHE_CONTROL};
    /// The token poll's answer: the spec's JSON or RFC 6749's (a form
    /// request).
    TokenAnswer = {"oneOf": [
        {"$ref": "#/components/schemas/DeviceTokenResponse"},
        {"$ref": "#/components/schemas/OAuthTokenResponse"}]}
        refers to svc_api::DeviceTokenResponse, svc_api::OAuthTokenResponse;
    /// The token poll's refusal: OpenAI's error shape or RFC 6749's.
    TokenRefusal = {"oneOf": [
        {"$ref": "#/components/schemas/ErrorResponse"},
        {"$ref": "#/components/schemas/OAuthError"}]}
        refers to svc_api::ErrorBody, svc_api::OAuthErrorResponse;
}

#[utoipa::path(post, path = DEVICE_AUTHORIZATION_PATH, tag = "auth", operation_id = "requestDeviceCode",
    summary = "Start a device login: get a device code to poll with and a user code to show.",
    description = "No body is needed (the spec's form). An RFC 8628 form body with `client_id` and `scope`, or the same as JSON, is accepted; both are shown to the person approving.",
    request_body(content((Option<DeviceCodeRequest> = "application/x-www-form-urlencoded"),
        (Option<DeviceCodeRequest> = "application/json"))),
    responses(
        (status = 200, description = "The device authorization record.", body = DeviceCodeResponse,
            headers(("cache-control" = inline(NoStore), description = "Always `no-store`: token responses carry secrets."))),
        (status = 400, response = shared::BadRequest),
        (status = 413, response = shared::PayloadTooLarge),
        (status = 429, description = "Too many codes requested from this client address or from everyone (`type` `requests`, `code` `slow_down`; a form request gets RFC 6749's `{\"error\":\"slow_down\"}`), or too many codes are live.", body = ErrorBody,
            headers(("Retry-After" = String))),
        (status = 500, response = shared::InternalServerError),
    ))]
pub async fn code(
    State(state): State<AppState>,
    ClientAddress(address): ClientAddress,
    request: Request,
) -> Result<Response, ApiError> {
    let user_agent = header_text(request.headers(), header::USER_AGENT);
    let body = read_body(request, state.body_limit).await?;
    let fields = code_fields(&body)?;
    let started = state
        .devices
        .start(DeviceClient {
            client_id: clip(fields.client_id),
            scope: clip(fields.scope),
            address,
            user_agent: clip(user_agent),
        })
        .await?;
    let issued = match started {
        Ok(issued) => issued,
        Err(throttled) => {
            let message = format!(
                "Too many device codes were requested. Wait {} seconds and try again.",
                throttled.retry_after
            );
            let body = if matches!(body, Body::Form(_)) {
                Json(OAuthErrorResponse {
                    error: "slow_down".into(),
                    error_description: Some(message),
                    interval: None,
                })
                .into_response()
            } else {
                Json(ErrorBody {
                    error: ErrorObject {
                        message,
                        kind: "requests".into(),
                        param: None,
                        code: Some("slow_down".into()),
                    },
                })
                .into_response()
            };
            let mut response = (StatusCode::TOO_MANY_REQUESTS, body).into_response();
            if let Ok(value) = HeaderValue::from_str(&throttled.retry_after.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            return Ok(no_store(response));
        }
    };
    let verification_uri = state.dashboard.device_url();
    let user_code = issued.user_code.display();
    let body = DeviceCodeResponse {
        verification_uri_complete: Some(format!("{verification_uri}?user_code={user_code}")),
        device_code: issued.device_code,
        user_code,
        verification_uri,
        expires_in: issued.expires_in,
        interval: issued.interval,
    };
    Ok(no_store(Json(body).into_response()))
}

/// How long clients may keep the metadata: it changes only when the server
/// restarts with another public URL.
pub(crate) const METADATA_CACHE_CONTROL: &str = "public, max-age=3600";

/// `GET /.well-known/oauth-authorization-server` (RFC 8414): the issuer is
/// the public URL, and the endpoints are built from it as
/// `verification_uri` is, so what a client discovers is what it reaches.
#[utoipa::path(get, path = AUTHORIZATION_SERVER_METADATA_PATH, tag = "auth", operation_id = "getAuthorizationServerMetadata",
    summary = "OAuth 2.0 authorization server metadata (RFC 8414), so that standard OAuth clients discover the device flow.",
    description = "`issuer` is the server's public URL; `device_authorization_endpoint` and `token_endpoint` are the two device flow routes under it. The only grant is the device code grant (RFC 8628), clients are public (`token_endpoint_auth_methods_supported: [\"none\"]`), and there is no authorization endpoint (`response_types_supported: []`).",
    responses(
        (status = 200, description = "The metadata.", body = AuthorizationServerMetadata,
            headers(("cache-control" = inline(MetadataCacheControl), description = "Cacheable: the metadata changes only when the server restarts with another public URL."))),
    ))]
pub async fn metadata(State(state): State<AppState>) -> Response {
    let body = AuthorizationServerMetadata::for_issuer(&state.public_url);
    let mut response = Json(body).into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(METADATA_CACHE_CONTROL),
    );
    response
}

/// A code request's fields as read from its body.
fn code_fields(body: &Body) -> Result<DeviceCodeRequest, ApiError> {
    Ok(match body {
        Body::Empty => DeviceCodeRequest::default(),
        Body::Json(bytes) => parse_json(bytes)?,
        Body::Form(bytes) => {
            serde_urlencoded::from_bytes(bytes).map_err(|e| ApiError::InvalidBody {
                param: None,
                message: format!("We could not parse the form body of your request: {e}."),
            })?
        }
    })
}

/// What a client says about itself, as it is kept and shown to the user.
fn clip(value: Option<String>) -> Option<String> {
    value
        .map(|s| plain_text(&s, MAX_CLIENT_FIELD))
        .filter(|s| !s.is_empty())
}

/// The code request's `client_id` and `scope` as kept, from a JSON or
/// (`form`) form-encoded body: what `POST /v1/auth/device/code` makes of
/// untrusted bytes before the store is asked. For the fuzz targets in
/// `fuzz/`; not part of the API.
#[doc(hidden)]
pub fn fuzz_code_body(
    form: bool,
    bytes: &[u8],
) -> Result<(Option<String>, Option<String>), ApiError> {
    let bytes = Bytes::copy_from_slice(bytes);
    let body = if form {
        Body::Form(bytes)
    } else if bytes.iter().all(u8::is_ascii_whitespace) {
        Body::Empty
    } else {
        Body::Json(bytes)
    };
    let fields = code_fields(&body)?;
    Ok((clip(fields.client_id), clip(fields.scope)))
}

/// The token request's `grant_type`, `device_code` and `client_id` from a
/// form-encoded body, or `None` where `POST /v1/auth/device/token` answers
/// `invalid_request`. For the fuzz targets in `fuzz/`; not part of the API.
#[doc(hidden)]
pub fn fuzz_token_form(bytes: &[u8]) -> Option<[Option<String>; 3]> {
    let fields = serde_urlencoded::from_bytes::<OAuthDeviceTokenRequest>(bytes).ok()?;
    Some([fields.grant_type, fields.device_code, fields.client_id])
}

#[utoipa::path(post, path = TOKEN_PATH, tag = "auth", operation_id = "pollDeviceToken",
    summary = "Poll for the key of a device login.",
    description = "JSON body (the spec's dialect): `{\"status\":\"pending\"}` until the person approves, then once `{\"status\":\"approved\",\"access_token\",\"token_type\":\"bearer\",\"expires_in\"}`. Other states are 400s in the usual error shape whose `code` is the RFC 8628 name: `slow_down` (poll less often: the interval grew by 5 s), `access_denied`, `expired_token`, `invalid_grant` (unknown code, or its key was issued already).\n\nForm body (RFC 8628 section 3.4, for standard OAuth clients): `grant_type=urn:ietf:params:oauth:grant-type:device_code&device_code=...` answers with RFC 6749's bodies: `{\"access_token\",\"token_type\",\"expires_in\"}`, or 400 `{\"error\":\"authorization_pending\"|\"slow_down\"|\"access_denied\"|\"expired_token\"|\"invalid_grant\"|\"invalid_request\"|\"unsupported_grant_type\"}`.",
    request_body(content((DeviceTokenRequest = "application/json"),
        (OAuthDeviceTokenRequest = "application/x-www-form-urlencoded"))),
    responses(
        (status = 200, description = "Pending or approved (JSON dialect), or the RFC 6749 token (form dialect).", body = inline(TokenAnswer),
            headers(("cache-control" = inline(NoStore), description = "Always `no-store`: token responses carry secrets."))),
        (status = 400, description = "Not an answer yet or never: an error in the usual shape (JSON dialect, `code` as above) or RFC 6749's error body (form dialect).", body = inline(TokenRefusal),
            headers(("cache-control" = inline(NoStore), description = "Always `no-store`: token responses carry secrets."))),
        (status = 413, response = shared::PayloadTooLarge),
        (status = 500, response = shared::InternalServerError),
    ))]
pub async fn token(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    match read_body(request, state.body_limit).await? {
        Body::Form(bytes) => Ok(no_store(oauth_token(&state, &bytes).await?)),
        Body::Json(bytes) => {
            let DeviceTokenRequest { device_code } = parse_json(&bytes)?;
            Ok(no_store(json_token(&state, &device_code).await?))
        }
        Body::Empty => Err(ApiError::InvalidBody {
            param: Some("device_code".into()),
            message: "Send {\"device_code\": \"...\"} as JSON, or an RFC 8628 form body.".into(),
        }),
    }
}

async fn json_token(state: &AppState, device_code: &str) -> Result<Response, ApiError> {
    let error = |code: &str, message: String| {
        let body = ErrorBody {
            error: ErrorObject {
                message,
                kind: "invalid_request_error".into(),
                param: Some("device_code".into()),
                code: Some(code.into()),
            },
        };
        (StatusCode::BAD_REQUEST, Json(body)).into_response()
    };
    Ok(match state.devices.poll(device_code, None).await? {
        PollOutcome::Pending => Json(DeviceTokenResponse {
            status: "pending".into(),
            access_token: None,
            token_type: None,
            expires_in: None,
        })
        .into_response(),
        PollOutcome::Approved {
            key, expires_in, ..
        } => Json(DeviceTokenResponse {
            status: "approved".into(),
            access_token: Some(key.expose().to_owned()),
            token_type: Some("bearer".into()),
            expires_in: Some(expires_in),
        })
        .into_response(),
        other => {
            let (code, message) = rfc_error(&other);
            error(code, message)
        }
    })
}

async fn oauth_token(state: &AppState, body: &[u8]) -> Result<Response, ApiError> {
    let error = |status: StatusCode, error: &str, description: String, interval: Option<i64>| {
        let body = OAuthErrorResponse {
            error: error.into(),
            error_description: Some(description),
            interval,
        };
        (status, Json(body)).into_response()
    };
    let Ok(fields) = serde_urlencoded::from_bytes::<OAuthDeviceTokenRequest>(body) else {
        return Ok(error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "The form body could not be read.".into(),
            None,
        ));
    };
    match fields.grant_type.as_deref() {
        Some(DEVICE_CODE_GRANT_TYPE) => {}
        Some(_) => {
            return Ok(error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                format!("Only grant_type={DEVICE_CODE_GRANT_TYPE} is supported here."),
                None,
            ));
        }
        None => {
            return Ok(error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "The grant_type parameter is missing.".into(),
                None,
            ));
        }
    }
    let Some(device_code) = fields.device_code.filter(|c| !c.is_empty()) else {
        return Ok(error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "The device_code parameter is missing.".into(),
            None,
        ));
    };
    Ok(
        match state
            .devices
            .poll(&device_code, fields.client_id.as_deref())
            .await?
        {
            PollOutcome::Approved {
                key, expires_in, ..
            } => Json(OAuthTokenResponse {
                access_token: key.expose().to_owned(),
                token_type: "bearer".into(),
                expires_in,
            })
            .into_response(),
            PollOutcome::Pending => error(
                StatusCode::BAD_REQUEST,
                "authorization_pending",
                "The user has not yet approved this request.".into(),
                None,
            ),
            other => {
                let interval = match other {
                    PollOutcome::SlowDown { interval } => Some(interval),
                    _ => None,
                };
                let (code, message) = rfc_error(&other);
                error(StatusCode::BAD_REQUEST, code, message, interval)
            }
        },
    )
}

/// The RFC 8628 error name and a message for outcomes that are not answers.
fn rfc_error(outcome: &PollOutcome) -> (&'static str, String) {
    match outcome {
        PollOutcome::SlowDown { interval } => (
            "slow_down",
            format!("Polling too fast: wait {interval} seconds between polls."),
        ),
        PollOutcome::Denied => (
            "access_denied",
            "This login was denied, by the user or by disabling the account that approved it. \
             Start a new login to try again."
                .into(),
        ),
        PollOutcome::Expired => (
            "expired_token",
            "This device code has expired. Start a new login.".into(),
        ),
        PollOutcome::AlreadyUsed => (
            "invalid_grant",
            "The key for this device code was issued already; a device code is used once.".into(),
        ),
        PollOutcome::Unknown => (
            "invalid_grant",
            "Unknown device code (or one issued to another client).".into(),
        ),
        PollOutcome::Pending | PollOutcome::Approved { .. } => (
            "authorization_pending",
            "The user has not yet approved this request.".into(),
        ),
    }
}

/// A request body by its media type.
enum Body {
    Empty,
    Json(Bytes),
    Form(Bytes),
}

async fn read_body(request: Request, limit: BodyLimit) -> Result<Body, ApiError> {
    let limit = limit.0;
    let mime = header_text(request.headers(), header::CONTENT_TYPE).map(|v| {
        v.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    });
    let bytes = axum::body::to_bytes(request.into_body(), limit)
        .await
        .map_err(|e| match crate::body::body_timed_out(&e) {
            Some(timed_out) => ApiError::BodyTimeout(timed_out),
            None => ApiError::PayloadTooLarge { limit },
        })?;
    Ok(match mime.as_deref() {
        // A form, even an empty one, is answered in the form dialect.
        Some("application/x-www-form-urlencoded") => Body::Form(bytes),
        _ if bytes.iter().all(u8::is_ascii_whitespace) => Body::Empty,
        Some(m) if m == "application/json" || m.ends_with("+json") => Body::Json(bytes),
        _ => return Err(ApiError::UnsupportedMediaType),
    })
}

fn header_text(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Token responses carry secrets: never cached (RFC 6749 section 5.1).
fn no_store(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    response
}
