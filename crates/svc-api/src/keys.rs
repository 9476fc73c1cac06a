//! `GET /v1/auth/key` and `DELETE /v1/auth/key` bodies: the key a request
//! presents, and its revocation.

use serde::{Deserialize, Serialize};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{Object, ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use crate::schema::{collect, constant, or_null, reference};

crate::schema::twin_schema! {
    /// `GET /v1/auth/key`: the key (never its secret) and whose it is.
    ///
    /// The fields of this module's types are in alphabetical order: the order
    /// in which the server has always written these bodies (with `json!`), so
    /// the bytes stay the same.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct KeyInfo {
        /// Unix time.
        pub created_at: i64,
        /// How the key was made.
        #[schema(schema_with = created_via)]
        pub created_via: String,
        /// Unix time; null when the key does not expire.
        #[schema(required = true)]
        pub expires_at: Option<i64>,
        /// `sk-svc-1a2b…9f0e`
        pub hint: String,
        #[schema(pattern = "^key_[0-9a-f]{16}$")]
        pub id: String,
        pub name: String,
        /// Always `api_key`.
        #[schema(schema_with = object_api_key)]
        pub object: String,
        /// The account the key belongs to; null for operator keys.
        #[schema(required = true, schema_with = owner)]
        pub owner: Option<KeyOwner>,
    }
    #[schema(as = ApiKey, description = "`GET /v1/auth/key`: the key (never its secret) and whose it is.")]
    struct KeyInfoSchema;
}

impl PartialSchema for KeyInfo {
    fn schema() -> RefOr<Schema> {
        KeyInfoSchema::schema()
    }
}

impl ToSchema for KeyInfo {
    fn name() -> std::borrow::Cow<'static, str> {
        KeyInfoSchema::name()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        KeyInfoSchema::schemas(schemas);
        // What `owner`, written out (`schema_with`), refers to.
        collect::<KeyOwner>(schemas);
    }
}

/// The account a key belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KeyOwner {
    pub email: String,
    pub id: String,
}

/// `DELETE /v1/auth/key`: `{"id",...,"object":"api_key","revoked":true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RevokedKey {
    pub id: String,
    /// Always `api_key`.
    #[schema(schema_with = object_api_key)]
    pub object: String,
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
        .enum_values(Some(["dashboard", "device", "cli", "api"]))
        .build()
}

/// Written out (not derived) to keep the field's description beside the
/// union with null; `KeyInfo`'s `ToSchema` collects `KeyOwner` itself.
fn owner() -> Schema {
    or_null(
        reference("KeyOwner"),
        Some("The account the key belongs to; null for operator keys."),
    )
}
