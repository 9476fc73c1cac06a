//! `POST /v1/completions`, OpenAI's legacy text completions: the request as
//! clients send it, and the `text_completion` object (whole, or one chunk
//! of a stream).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use utoipa::openapi::schema::{AnyOfBuilder, ArrayBuilder, Object, ObjectBuilder, Schema, Type};

use crate::chat::{FinishReason, Stop, StreamOptions, Usage};
use crate::schema::constant;

/// A completions request exactly as it arrives. Unknown fields are
/// ignored; `null` is read as "not given". `prompt` is read in svc-core, so
/// that a wrong shape is a 400 naming `prompt`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[schema(
    as = CreateCompletionRequest,
    description = "Unknown fields are ignored; `null` in an optional field means the field is not given."
)]
pub struct CompletionRequest {
    /// A model id from GET /v1/models.
    #[schema(min_length = 1, max_length = 256, examples("svc"))]
    #[serde(deserialize_with = "crate::model_id")]
    pub model: String,
    /// The text to continue, as it is (no chat template): a string, or an
    /// array of strings (each continued on its own, `n` choices apiece).
    #[serde(default)]
    #[schema(schema_with = prompt_schema)]
    pub prompt: Value,
    /// Fill in the middle: the text after the gap. Only for models with
    /// fill-in-the-middle tokens (else 400 naming `suffix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
    /// Cap on completion tokens: at least 1, or 0 with `echo` and
    /// `logprobs` (the prompt scored, nothing generated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 4294967295_i64, default = 16)]
    pub max_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 2, default = 0.7)]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1, default = 1)]
    pub top_p: Option<f64>,
    /// Choices per prompt; choice `i` of prompt `p` has index `p * n + i`.
    /// Prompts times `n` may be at most 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 32, default = 1)]
    pub n: Option<i64>,
    /// Accepted when it equals `n` (or is absent): svc returns every choice it generates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 32)]
    pub best_of: Option<i64>,
    /// Stream the reply as Server-Sent Events of `text_completion` chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(default = false)]
    pub stream: Option<bool>,
    /// Only allowed when `stream` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(inline)]
    pub stream_options: Option<StreamOptions>,
    /// Return each generated token's log probability and this many (0 to 5)
    /// most likely tokens at its position; with `echo`, the prompt's tokens'
    /// too (the prompt scored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 5)]
    pub logprobs: Option<i64>,
    /// Put the prompt before the completion in each choice's `text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(default = false)]
    pub echo: Option<bool>,
    /// Up to 4 non-empty sequences that end the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::chat::stop_schema)]
    pub stop: Option<Stop>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = -2, maximum = 2, default = 0)]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = -2, maximum = 2, default = 0)]
    pub frequency_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = -9223372036854775808_i64, maximum = 9223372036854775807_i64)]
    pub seed: Option<i64>,
    /// An end-user id; accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// A `text_completion`: the whole reply, or one chunk of a streamed one
/// (where `finish_reason` is `null` until the choice's last chunk, and
/// `usage` is `null` except in the last chunk when
/// `stream_options.include_usage` asked for it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = CreateCompletionResponse)]
pub struct Completion {
    #[schema(pattern = "^cmpl-")]
    pub id: String,
    /// Always `text_completion`.
    #[schema(schema_with = object_text_completion)]
    pub object: String,
    /// Unix time.
    pub created: i64,
    pub model: String,
    /// Identifies the weights, engine build and numeric settings that made
    /// the reply: the same request with the same seed (or greedy) gives
    /// the same text while it stays the same. Absent where the engine cannot
    /// say (an upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^fp_")]
    pub system_fingerprint: Option<String>,
    pub choices: Vec<CompletionChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One choice: its text (the prompt first, with `echo`), and why it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CompletionChoice {
    pub text: String,
    #[schema(minimum = 0)]
    pub index: u32,
    /// With `logprobs`: the generated tokens and their log probabilities
    /// (with `echo`, the prompt's tokens first).
    pub logprobs: Option<CompletionLogprobs>,
    /// `null` in a streamed chunk before the choice's last.
    pub finish_reason: Option<FinishReason>,
}

/// Log probabilities in the legacy shape: four lists, one entry per token.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    /// `null` for a scored prompt's first token, which has nothing before it.
    pub token_logprobs: Vec<Option<f32>>,
    /// For each token, the most likely tokens at its position (the chosen
    /// one included) and their log probabilities.
    pub top_logprobs: Vec<Option<BTreeMap<String, f32>>>,
    /// Where each token starts in the choice's `text`, in characters.
    pub text_offset: Vec<u32>,
}

fn object_text_completion() -> Object {
    constant("text_completion")
}

fn prompt_schema() -> Schema {
    let text = || ObjectBuilder::new().schema_type(Type::String).build();
    AnyOfBuilder::new()
        .item(text())
        .item(
            ArrayBuilder::new()
                .items(text())
                .min_items(Some(1))
                .max_items(Some(32)),
        )
        .description(Some(
            "A string, or an array of strings (at most 32; each gets `n` choices, at most 32 in all).",
        ))
        .into()
}

/// The name of the schema of one Server-Sent Event of a streamed legacy
/// completion.
pub const STREAM_EVENT: &str = "CompletionStreamEvent";

crate::schema::named_schema!(
    /// One Server-Sent Event of a streamed legacy completion
    /// ([`STREAM_EVENT`]): a `text_completion` chunk, an error, or `[DONE]`.
    CompletionStreamEvent = STREAM_EVENT, completion_stream_event_schema;
    refers to Completion, crate::error::ErrorBody
);

fn completion_stream_event_schema() -> utoipa::openapi::RefOr<Schema> {
    crate::chat::data_event_schema("CreateCompletionResponse", "A `text_completion` chunk")
}
