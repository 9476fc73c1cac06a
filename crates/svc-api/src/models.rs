//! `GET /v1/models` bodies.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::Object;

use crate::schema::constant;

/// One entry of the model list, as OpenAI shapes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Model {
    #[schema(examples("svc"))]
    pub id: String,
    /// Always `model`.
    #[schema(schema_with = object_model)]
    pub object: String,
    /// Unix time.
    pub created: i64,
    pub owned_by: String,
}

/// `{"object":"list","data":[...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelList {
    /// Always `list`.
    #[schema(schema_with = object_list)]
    pub object: String,
    pub data: Vec<Model>,
}

fn object_model() -> Object {
    constant("model")
}

pub(crate) fn object_list() -> Object {
    constant("list")
}
