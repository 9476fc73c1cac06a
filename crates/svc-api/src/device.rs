//! Bodies of the device authorization flow (spec sections 2.4, 2.5, 4.2,
//! 4.3; RFC 8628 where the spec is silent).

use serde::{Deserialize, Serialize};

/// The RFC 8628 `grant_type` of a device-code token request.
pub const DEVICE_CODE_GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// `POST /v1/auth/device/code` → the device authorization record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceCodeResponse {
    pub device_code: String,
    /// `XXXX-XXXX`.
    pub user_code: String,
    pub verification_uri: String,
    /// `verification_uri` with the user code filled in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification_uri_complete: Option<String>,
    pub expires_in: i64,
    pub interval: i64,
}

/// `POST /v1/auth/device/token` with a JSON body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceTokenRequest {
    pub device_code: String,
}

/// The JSON answer to a poll: `{"status":"pending"}`, or `approved` with
/// the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceTokenResponse {
    /// `pending` or `approved`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<i64>,
}

/// RFC 6749 section 5.1 success body (to a form-encoded RFC 8628 request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OAuthTokenResponse {
    pub access_token: String,
    pub token_type: String,
    pub expires_in: i64,
}

/// RFC 6749 section 5.2 error body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OAuthErrorResponse {
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_description: Option<String>,
    /// On `slow_down`: the interval to use from now on (an extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<i64>,
}
