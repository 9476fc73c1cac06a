//! Extractors that turn raw requests into typed values, failing with
//! [`ApiError`] instead of axum's plain-text rejections.

use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
use axum::http::{header, request::Parts};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use svc_core::{KeyRecord, KeyService};

use crate::error::ApiError;

/// The key that authenticated this request. Put it first among a handler's
/// arguments so authentication is checked before the body is read.
#[derive(Debug, Clone)]
pub struct Authenticated(pub KeyRecord);

impl<S> FromRequestParts<S> for Authenticated
where
    KeyService: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let keys = KeyService::from_ref(state);
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap_or("\u{0}"));
        let record = keys.authenticate(header).await?;
        Ok(Authenticated(record))
    }
}

/// A JSON body deserialized into `T`, with the failing field named as the
/// error's `param`.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    BodyLimit: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let is_json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|mime| {
                let mime = mime.trim();
                mime.eq_ignore_ascii_case("application/json")
                    || (mime.starts_with("application/") && mime.ends_with("+json"))
            });
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        let limit = BodyLimit::from_ref(state).0;
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge { limit }
                } else {
                    ApiError::InvalidBody {
                        param: None,
                        message: "could not read the request body".into(),
                    }
                }
            })?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// The configured body limit in bytes (also for error messages).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// Deserializes `bytes`, naming the offending field on failure. Valid
/// bodies take serde_json's direct path; only a failure is parsed again,
/// with the path tracking that names the field (and costs a request's
/// worth of time at thousands of requests a second).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    match serde_json::from_slice(bytes) {
        Ok(value) => Ok(value),
        Err(_) => parse_json_tracked(bytes),
    }
}

fn parse_json_tracked<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let syntax_error = |inner: &serde_json::Error| ApiError::InvalidBody {
        param: None,
        message: format!(
            "We could not parse the JSON body of your request: {inner}. Send valid JSON."
        ),
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: Result<T, _> = serde_path_to_error::deserialize(&mut de);
    if value.is_ok() {
        de.end().map_err(|e| syntax_error(&e))?;
    }
    value.map_err(|err| {
        let inner = err.inner();
        let mut param = err.path().to_string();
        if param == "." {
            param.clear();
        }
        if inner.is_syntax() || inner.is_eof() {
            return syntax_error(inner);
        }
        let text = inner.to_string();
        // serde reports a missing field at its parent; name the field itself.
        if let Some(field) = text
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
        {
            param = if param.is_empty() {
                field.to_owned()
            } else {
                format!("{param}.{field}")
            };
        }
        let message = if param.is_empty() {
            format!("Invalid request body: {text}")
        } else {
            format!("Invalid value for '{param}': {text}")
        };
        ApiError::InvalidBody {
            param: (!param.is_empty()).then_some(param),
            message,
        }
    })
}

/// The client's address as the socket saw it (`None` when the server was
/// not started with connection info, as in some tests).
#[derive(Debug, Clone)]
pub struct ClientAddress(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let address = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|info| info.0.ip().to_string());
        Ok(ClientAddress(address))
    }
}
