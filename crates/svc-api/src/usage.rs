//! `GET /v1/admin/usage` bodies: requests and tokens per key per UTC day.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

use crate::schema::constant;

/// The usage rows since a day, by day then key.
///
/// The fields of this module's types are in alphabetical order: the order
/// in which the server has always written these bodies (with `json!`), so
/// the bytes stay the same.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(description = "The usage rows since a day, by day then key.")]
pub struct UsageList {
    pub data: Vec<UsageDay>,
    /// Always `list`.
    #[schema(schema_with = crate::list::object_list)]
    pub object: String,
    /// The first day counted, `YYYY-MM-DD` (UTC).
    #[schema(schema_with = date)]
    pub since: String,
}

/// One key's use on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageDay {
    /// Of `requests`, those answered from the response cache (they used
    /// no tokens).
    #[schema(minimum = 0)]
    #[serde(default)]
    pub cache_hits: i64,
    /// The prompt and completion tokens those cached replies took when
    /// they were made: what the cache saved.
    #[schema(minimum = 0)]
    #[serde(default)]
    pub cache_saved_tokens: i64,
    /// Of `prompt_tokens`, those served from a reused prompt prefix.
    #[schema(minimum = 0)]
    #[serde(default)]
    pub cached_tokens: i64,
    #[schema(minimum = 0)]
    pub completion_tokens: i64,
    /// `YYYY-MM-DD` (UTC).
    #[schema(schema_with = date)]
    pub day: String,
    pub key_id: String,
    /// Always `usage.day`.
    #[schema(schema_with = object_usage_day)]
    pub object: String,
    #[schema(minimum = 0)]
    pub prompt_tokens: i64,
    #[schema(minimum = 0)]
    pub requests: i64,
    #[schema(minimum = 0)]
    pub total_tokens: i64,
}

fn object_usage_day() -> Object {
    constant("usage.day")
}

fn date() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .format(Some(utoipa::openapi::schema::SchemaFormat::KnownFormat(
            utoipa::openapi::schema::KnownFormat::Date,
        )))
        .build()
}
