//! `GET /v1/admin/usage` bodies: requests and tokens per key per UTC day.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

use crate::schema::constant;

/// The usage rows since a day, by day then key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageList {
    /// Always `list`.
    #[schema(schema_with = crate::models::object_list)]
    pub object: String,
    /// The first day counted, `YYYY-MM-DD` (UTC).
    #[schema(schema_with = date)]
    pub since: String,
    pub data: Vec<UsageDay>,
}

/// One key's use on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageDay {
    /// Always `usage.day`.
    #[schema(schema_with = object_usage_day)]
    pub object: String,
    pub key_id: String,
    /// `YYYY-MM-DD` (UTC).
    #[schema(schema_with = date)]
    pub day: String,
    #[schema(minimum = 0)]
    pub requests: i64,
    #[schema(minimum = 0)]
    pub prompt_tokens: i64,
    #[schema(minimum = 0)]
    pub completion_tokens: i64,
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
