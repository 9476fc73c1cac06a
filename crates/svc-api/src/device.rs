//! Bodies of the device authorization flow (spec sections 2.4, 2.5, 4.2,
//! 4.3; RFC 8628 where the spec is silent).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

use crate::schema::keywords;

/// The RFC 8628 `grant_type` of a device-code token request.
pub const DEVICE_CODE_GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// `POST /v1/auth/device/code`: optional fields of a code request (RFC 8628
/// section 3.1), as a form or as JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeviceCodeRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub scope: Option<String>,
}

/// `POST /v1/auth/device/code` → the device authorization record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeviceCodeResponse {
    /// Opaque; 256 random bits. Keep it secret and poll with it.
    pub device_code: String,
    /// What the person types at `verification_uri`.
    #[schema(pattern = "^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$")]
    pub user_code: String,
    #[schema(format = "uri")]
    pub verification_uri: String,
    /// `verification_uri` with the user code filled in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, nullable = false, format = "uri")]
    pub verification_uri_complete: Option<String>,
    /// Seconds until the codes expire (default 600).
    #[schema(minimum = 1)]
    pub expires_in: i64,
    /// Seconds to wait between polls (default 5).
    #[schema(minimum = 1)]
    pub interval: i64,
}

/// `POST /v1/auth/device/token` with a JSON body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeviceTokenRequest {
    pub device_code: String,
}

/// `POST /v1/auth/device/token` with a form body (RFC 8628 section 3.4).
/// Every field is optional here so that the server can answer a missing
/// one with RFC 6749's `invalid_request`; the schema says what a valid
/// request holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(description = "The RFC 8628 device access token request.")]
pub struct OAuthDeviceTokenRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, schema_with = grant_type)]
    pub grant_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, nullable = false)]
    pub device_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub client_id: Option<String>,
}

/// The JSON answer to a poll: `{"status":"pending"}`, or `approved` with
/// the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeviceTokenResponse {
    /// `pending` or `approved`.
    #[schema(schema_with = token_status)]
    pub status: String,
    /// Present when approved: a new API key of the approving account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^sk-svc-[0-9a-f]{40}$")]
    pub access_token: Option<String>,
    /// Always `bearer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = bearer)]
    pub token_type: Option<String>,
    /// Present when approved: seconds until the key expires (default 2592000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub expires_in: Option<i64>,
}

/// RFC 6749 section 5.1 success body (to a form-encoded RFC 8628 request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OAuthTokenResponse {
    #[schema(pattern = "^sk-svc-[0-9a-f]{40}$")]
    pub access_token: String,
    #[schema(schema_with = bearer)]
    pub token_type: String,
    pub expires_in: i64,
}

/// RFC 6749 section 5.2 error body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = OAuthError)]
pub struct OAuthErrorResponse {
    #[schema(schema_with = oauth_error)]
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error_description: Option<String>,
    /// On `slow_down`: the interval to use from now on (an extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub interval: Option<i64>,
}

/// `GET /.well-known/oauth-authorization-server`: RFC 8414 authorization
/// server metadata, so that standard OAuth 2.0 clients find the device
/// flow's endpoints. svc is an authorization server for the device grant
/// only: no authorization endpoint, no client registration, public clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuthorizationServerMetadata {
    /// The server's public URL, without a trailing slash.
    #[schema(format = "uri")]
    pub issuer: String,
    /// `POST` here to start a device login (RFC 8628 section 3.1).
    #[schema(format = "uri")]
    pub device_authorization_endpoint: String,
    /// `POST` here to poll for the key (RFC 8628 section 3.4).
    #[schema(format = "uri")]
    pub token_endpoint: String,
    #[schema(schema_with = grant_types)]
    pub grant_types_supported: Vec<String>,
    #[schema(schema_with = no_response_types)]
    pub response_types_supported: Vec<String>,
    #[schema(schema_with = auth_methods)]
    pub token_endpoint_auth_methods_supported: Vec<String>,
}

impl AuthorizationServerMetadata {
    /// The metadata of a server whose public URL is `issuer` (no trailing
    /// slash).
    pub fn for_issuer(issuer: &str) -> Self {
        AuthorizationServerMetadata {
            issuer: issuer.to_owned(),
            device_authorization_endpoint: format!("{issuer}{DEVICE_AUTHORIZATION_PATH}"),
            token_endpoint: format!("{issuer}{TOKEN_PATH}"),
            grant_types_supported: vec![DEVICE_CODE_GRANT_TYPE.to_owned()],
            response_types_supported: Vec::new(),
            token_endpoint_auth_methods_supported: vec!["none".to_owned()],
        }
    }
}

/// The path of the device authorization endpoint.
pub const DEVICE_AUTHORIZATION_PATH: &str = "/v1/auth/device/code";
/// The path of the device flow's token endpoint.
pub const TOKEN_PATH: &str = "/v1/auth/device/token";
/// The path of the RFC 8414 metadata document.
pub const AUTHORIZATION_SERVER_METADATA_PATH: &str = "/.well-known/oauth-authorization-server";

/// An array holding exactly `values`, in this order.
fn exactly(values: &[&str], description: &str) -> Object {
    let items: Vec<serde_json::Value> = values.iter().map(|v| (*v).into()).collect();
    keywords(
        ObjectBuilder::new()
            .schema_type(Type::Array)
            .description(Some(description))
            .build(),
        [("const", serde_json::Value::Array(items))],
    )
}

fn grant_types() -> Object {
    exactly(
        &[DEVICE_CODE_GRANT_TYPE],
        "Only the device code grant (RFC 8628).",
    )
}

fn no_response_types() -> Object {
    exactly(&[], "None: svc has no authorization endpoint.")
}

fn auth_methods() -> Object {
    exactly(
        &["none"],
        "`none`: clients are public; there is no client authentication.",
    )
}

fn strings(values: &[&str]) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values.iter().copied()))
        .build()
}

fn string_constant(value: &str) -> Object {
    keywords(
        ObjectBuilder::new().schema_type(Type::String).build(),
        [("const", value.into())],
    )
}

fn grant_type() -> Object {
    string_constant(DEVICE_CODE_GRANT_TYPE)
}

fn bearer() -> Object {
    string_constant("bearer")
}

fn token_status() -> Object {
    strings(&["pending", "approved"])
}

fn oauth_error() -> Object {
    strings(&[
        "authorization_pending",
        "slow_down",
        "access_denied",
        "expired_token",
        "invalid_grant",
        "invalid_request",
        "unsupported_grant_type",
    ])
}
