//! `POST /v1/embeddings`: the request as clients send it and the list of
//! vectors, in OpenAI's shape.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{AnyOfBuilder, ArrayBuilder, Object, ObjectBuilder, Schema, Type};

use crate::schema::{constant, null};

/// An embeddings request exactly as it arrives. Unknown fields are
/// ignored; `null` is read as "not given". `input` is read in svc-core,
/// so that a wrong shape is a 400 naming `input`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[schema(
    as = CreateEmbeddingRequest,
    description = "Unknown fields are ignored; `null` in an optional field means the field is not given."
)]
pub struct EmbeddingRequest {
    /// A model id from GET /v1/models that makes embeddings (`svc-embed`).
    #[schema(min_length = 1, max_length = 256, examples("svc-embed"))]
    #[serde(deserialize_with = "crate::model_id")]
    pub model: String,
    /// The text to embed: a string, an array of strings, an array of
    /// token ids, or an array of token-id arrays (at most 2048 inputs,
    /// none empty, each within the model's context).
    #[schema(schema_with = input_schema)]
    pub input: Value,
    /// `float` (default): arrays of numbers; `base64`: each vector's
    /// little-endian 32-bit floats, base64-encoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = encoding_format_schema)]
    pub encoding_format: Option<Value>,
    /// The length of the vectors; only the model's own length unless the
    /// model can shorten its vectors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 4294967295_i64)]
    pub dimensions: Option<i64>,
    /// An id of the end user, for the operator's records (not used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// `{"object":"list","data":[...],"model":...,"usage":...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = CreateEmbeddingResponse)]
pub struct EmbeddingList {
    /// Always `list`.
    #[schema(schema_with = crate::list::object_list)]
    pub object: String,
    /// One vector per input, in the inputs' order.
    pub data: Vec<Embedding>,
    pub model: String,
    pub usage: EmbeddingUsage,
}

/// One input's vector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Embedding {
    /// Always `embedding`.
    #[schema(schema_with = object_embedding)]
    pub object: String,
    /// The input's position in the request.
    #[schema(minimum = 0)]
    pub index: u32,
    pub embedding: EmbeddingVector,
}

/// A vector as numbers, or (with `encoding_format: base64`) as the
/// base64 of its little-endian 32-bit floats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum EmbeddingVector {
    Float(Vec<f32>),
    Base64(String),
}

/// Tokens the inputs used; embeddings have no completion tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EmbeddingUsage {
    #[schema(minimum = 0)]
    pub prompt_tokens: u64,
    #[schema(minimum = 0)]
    pub total_tokens: u64,
}

fn object_embedding() -> Object {
    constant("embedding")
}

fn input_schema() -> Schema {
    let text = || {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .build()
    };
    let tokens = || -> RefOr<Schema> {
        let array: Schema = ArrayBuilder::new()
            .items(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(0))
                    .maximum(Some(4_294_967_295_u32)),
            )
            .min_items(Some(1))
            .into();
        RefOr::T(array)
    };
    AnyOfBuilder::new()
        .item(text())
        .item(
            ArrayBuilder::new()
                .items(text())
                .min_items(Some(1))
                .max_items(Some(2048)),
        )
        .item(tokens())
        .item(
            ArrayBuilder::new()
                .items(tokens())
                .min_items(Some(1))
                .max_items(Some(2048)),
        )
        .description(Some(
            "A string, an array of strings, an array of token ids, or an array of token-id arrays.",
        ))
        .into()
}

fn encoding_format_schema() -> Schema {
    AnyOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["float", "base64"])),
        )
        .item(null())
        .description(Some("`float` (default) or `base64`."))
        .into()
}
