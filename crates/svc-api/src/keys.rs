//! `GET /v1/auth/key` and `DELETE /v1/auth/key` bodies: the key a request
//! presents, and its revocation.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

use crate::schema::constant;

/// `GET /v1/auth/key`: the key (never its secret) and whose it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = ApiKey)]
pub struct KeyInfo {
    /// Always `api_key`.
    #[schema(schema_with = object_api_key)]
    pub object: String,
    #[schema(pattern = "^key_[0-9a-f]{16}$")]
    pub id: String,
    pub name: String,
    /// `sk-svc-1a2b…9f0e`
    pub hint: String,
    /// How the key was made.
    #[schema(schema_with = created_via)]
    pub created_via: String,
    /// Unix time.
    pub created_at: i64,
    /// Unix time; null when the key does not expire.
    #[schema(required = true)]
    pub expires_at: Option<i64>,
    /// The account the key belongs to; null for operator keys.
    #[schema(required = true)]
    pub owner: Option<KeyOwner>,
}

/// The account a key belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KeyOwner {
    pub id: String,
    pub email: String,
}

/// `DELETE /v1/auth/key`: `{"object":"api_key","id",...,"revoked":true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RevokedKey {
    /// Always `api_key`.
    #[schema(schema_with = object_api_key)]
    pub object: String,
    pub id: String,
    /// Always true.
    #[schema(schema_with = always_true)]
    pub revoked: bool,
}

impl RevokedKey {
    /// The answer to revoking the key `id`.
    pub fn new(id: String) -> Self {
        RevokedKey {
            object: "api_key".into(),
            id,
            revoked: true,
        }
    }
}

fn object_api_key() -> Object {
    constant("api_key")
}

fn always_true() -> Object {
    constant(true)
}

fn created_via() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["dashboard", "device", "cli"]))
        .build()
}
