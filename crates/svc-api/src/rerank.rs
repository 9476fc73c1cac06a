//! `POST /v1/rerank` (and `/rerank`, `/v2/rerank`): the request in the
//! shape Jina's and Cohere's clients send, and the results sorted by
//! relevance, as vLLM and llama-server answer.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::schema::{AnyOfBuilder, ArrayBuilder, ObjectBuilder, Schema, Type};

/// A rerank request exactly as it arrives. Unknown fields are ignored;
/// `null` is read as "not given". `documents` is read in the server, so
/// that a wrong document is a 400 naming `documents[i]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[schema(
    as = CreateRerankRequest,
    description = "Unknown fields are ignored; `null` in an optional field means the field is not given."
)]
pub struct RerankRequest {
    /// A model id from GET /v1/models that reranks (a cross-encoder).
    #[schema(min_length = 1, max_length = 256, examples("svc-rerank"))]
    #[serde(deserialize_with = "crate::model_id")]
    pub model: String,
    /// What the documents are ranked against.
    #[schema(min_length = 1)]
    pub query: String,
    /// The documents to rank: strings, or objects with a `text` (at most
    /// 1,000, none empty).
    #[schema(schema_with = documents_schema)]
    pub documents: Value,
    /// How many of the best results to return; all when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 4294967295_i64)]
    pub top_n: Option<i64>,
    /// Whether each result carries its document's text (default: yes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_documents: Option<bool>,
}

/// The documents ranked, most relevant first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = CreateRerankResponse)]
pub struct RerankResponse {
    /// `rerank-` and 24 hex digits.
    pub id: String,
    pub model: String,
    /// One per document (or the `top_n` best), by `relevance_score`,
    /// highest first; ties in the documents' order.
    pub results: Vec<RerankResult>,
    pub usage: RerankUsage,
}

/// One document's place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RerankResult {
    /// The document's position in the request.
    #[schema(minimum = 0)]
    pub index: u32,
    /// Its relevance to the query (the model's score; higher is more relevant).
    pub relevance_score: f32,
    /// The document, unless `return_documents` was false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<RerankDocument>,
}

/// A document's text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RerankDocument {
    pub text: String,
}

/// Tokens the model read: the query with each document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RerankUsage {
    #[schema(minimum = 0)]
    pub prompt_tokens: u64,
    #[schema(minimum = 0)]
    pub total_tokens: u64,
}

fn documents_schema() -> Schema {
    let text = || {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
    };
    let object = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("text", text())
        .required("text");
    ArrayBuilder::new()
        .items(AnyOfBuilder::new().item(text()).item(object))
        .min_items(Some(1))
        .max_items(Some(1000))
        .description(Some(
            "The documents: each a string or an object with a `text`.",
        ))
        .into()
}
