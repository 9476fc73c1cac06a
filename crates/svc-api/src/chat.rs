//! `POST /v1/chat/completions`: the request as clients send it, the whole
//! response, and the streamed chunks.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{
    AnyOfBuilder, ArrayBuilder, Discriminator, Object, ObjectBuilder, OneOfBuilder, Schema, Type,
};
use utoipa::{PartialSchema, ToSchema};

use crate::schema::{collect, constant, keywords, null, or_null, reference, typed};

crate::schema::twin_schema! {
    /// A chat completion request exactly as it arrives. Unknown fields are
    /// ignored; `null` is read as "not given", as OpenAI does. Its schema is
    /// [`request_schema`]: the derived one with the rules between fields.
    #[derive(Debug, Clone, Default, Serialize, Deserialize)]
    pub struct ChatCompletionRequest {
        /// A model id from GET /v1/models.
        #[serde(deserialize_with = "crate::model_id")]
        #[schema(min_length = 1, max_length = 256, examples("svc"))]
        pub model: String,
        /// The conversation so far.
        #[schema(schema_with = messages_schema)]
        pub messages: Vec<Message>,
        /// Stream the reply as Server-Sent Events.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(default = false)]
        pub stream: Option<bool>,
        /// Only allowed when `stream` is true.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(inline)]
        pub stream_options: Option<StreamOptions>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = 0, maximum = 2, default = 0.7)]
        pub temperature: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = 0, maximum = 1, default = 1)]
        pub top_p: Option<f64>,
        /// Cap on completion tokens; `max_completion_tokens` wins when both are given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = 1, maximum = 4294967295_i64)]
        pub max_tokens: Option<i64>,
        /// Cap on completion tokens.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = 1, maximum = 4294967295_i64)]
        pub max_completion_tokens: Option<i64>,
        /// Up to 4 non-empty sequences that end the reply.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(schema_with = stop_schema)]
        pub stop: Option<Stop>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = -9223372036854775808_i64, maximum = 9223372036854775807_i64)]
        pub seed: Option<i64>,
        /// Number of choices, each with its own `index` and `finish_reason`;
        /// the usage counts every choice's tokens. The embedded model serves at
        /// most its parallel sequences; upstream models serve 1.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = 1, maximum = 128, default = 1)]
        pub n: Option<i64>,
        /// Return each content token's log probability in `choices[].logprobs`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(default = false)]
        pub logprobs: Option<bool>,
        /// With `logprobs`, also the most likely tokens at each position (0 to 20).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = 0, maximum = 20)]
        pub top_logprobs: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = -2, maximum = 2, default = 0)]
        pub presence_penalty: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = -2, maximum = 2, default = 0)]
        pub frequency_penalty: Option<f64>,
        /// Functions the model may call; names must be distinct.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(max_items = 128)]
        pub tools: Option<Vec<Tool>>,
        /// `none`, `auto`, `required` (needs tools), or a function named among `tools`. Default: `auto` with tools, `none` without.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(schema_with = tool_choice_schema)]
        pub tool_choice: Option<ToolChoice>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub parallel_tool_calls: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(schema_with = response_format_schema)]
        pub response_format: Option<ResponseFormat>,
        /// An end-user id; accepted and ignored.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub user: Option<String>,
        /// How hard a reasoning model thinks: `none`, `minimal`, `low`,
        /// `medium` or `high` (any other value is a 400 naming it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(schema_with = reasoning_effort_schema)]
        pub reasoning_effort: Option<String>,
    }
    #[schema(
        as = CreateChatCompletionRequest,
        description = "Unknown fields are ignored; `null` in an optional field means the field is not given."
    )]
    struct ChatCompletionRequestSchema;
}

impl PartialSchema for ChatCompletionRequest {
    fn schema() -> RefOr<Schema> {
        request_schema()
    }
}

impl ToSchema for ChatCompletionRequest {
    fn name() -> std::borrow::Cow<'static, str> {
        ChatCompletionRequestSchema::name()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        ChatCompletionRequestSchema::schemas(schemas);
        // What the fields written out (`schema_with`) refer to.
        collect::<Message>(schemas);
        ToolChoice::schemas(schemas);
        ResponseFormat::schemas(schemas);
    }
}

/// `CreateChatCompletionRequest`: the derived schema of the fields, and
/// the rules between them that JSON Schema can say (`stream_options` needs
/// `stream: true`; `tool_choice` `required` or named needs tools;
/// `top_logprobs` needs `logprobs: true`).
pub fn request_schema() -> RefOr<Schema> {
    let RefOr::T(Schema::Object(fields)) = ChatCompletionRequestSchema::schema() else {
        return ChatCompletionRequestSchema::schema();
    };
    let rules = json!([
        {
            "description": "`stream_options` needs `stream: true`.",
            "if": {"required": ["stream_options"], "properties": {"stream_options": {"type": "object"}}},
            "then": {"required": ["stream"], "properties": {"stream": {"const": true}}}
        },
        {
            "description": "`tool_choice` `required` or naming a function needs tools (and the named function among them).",
            "if": {
                "required": ["tool_choice"],
                "properties": {"tool_choice": {"anyOf": [{"const": "required"}, {"type": "object"}]}}
            },
            "then": {"required": ["tools"], "properties": {"tools": {"type": "array", "minItems": 1}}}
        },
        {
            "description": "`top_logprobs` needs `logprobs: true`.",
            "if": {"required": ["top_logprobs"], "properties": {"top_logprobs": {"type": "integer"}}},
            "then": {"required": ["logprobs"], "properties": {"logprobs": {"const": true}}}
        }
    ]);
    keywords(fields, [("allOf", rules)]).into()
}

/// `stream_options`: only `include_usage` has a meaning.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct StreamOptions {
    /// Send a last chunk with the usage and empty choices; every other chunk has `usage: null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
}

/// `stop`: one string or a list of them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged, expecting = "a string or an array of strings")]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// One message of the conversation, by role. Its schema is `ChatMessage`:
/// one named schema per role (see the [`ToSchema`] impl below).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    System {
        content: Content,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// OpenAI's newer name for a system message.
    Developer {
        content: Content,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    User {
        content: Content,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    Assistant {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<Content>,
        /// The reasoning the model wrote before this reply, sent back
        /// (DeepSeek's and vLLM's name, as svc's replies carry it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<String>,
        /// vLLM's newer name for `reasoning_content` (read when that is absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_calls: Option<Vec<ToolCall>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    Tool {
        content: Content,
        tool_call_id: String,
    },
}

/// Message content: a plain string or an array of typed parts.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged, expecting = "a string or an array of content parts")]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl From<&str> for Content {
    fn from(text: &str) -> Self {
        Content::Text(text.to_owned())
    }
}

/// One part of an array content: `{"type":"text","text":...}`, or in a
/// user message `{"type":"image_url","image_url":{"url":...,"detail":...}}`.
/// Other types (audio, files) are read so that validation can name them
/// and refuse; the schema shows the text part (the image part is
/// [`ImageContentPart`]).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = TextContentPart, description = "A text part.")]
pub struct ContentPart {
    #[serde(rename = "type")]
    #[schema(schema_with = type_text)]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, nullable = false)]
    pub text: Option<String>,
    /// The image of an `image_url` part (read in svc-core, so that a wrong
    /// shape is a 400 naming the part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub image_url: Option<Value>,
}

/// `{"type":"image_url","image_url":{"url":...,"detail":...}}`: an image
/// in a user message, by URL (passed on to the engine, never fetched by
/// svc) or as a `data:image/...;base64,` URI.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(
    description = "An image, in a user message. Only models served by an upstream engine with vision read images; others answer 400 naming the part."
)]
pub struct ImageContentPart {
    #[serde(rename = "type")]
    #[schema(schema_with = type_image_url)]
    pub kind: String,
    pub image_url: ImageUrl,
}

/// Where an image is: an `https:`/`http:` URL or a `data:` URI.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ImageUrl {
    #[schema(min_length = 1)]
    pub url: String,
    /// `auto`, `low` or `high`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

fn type_image_url() -> Object {
    crate::schema::constant("image_url")
}

/// A function the model may call.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Tool {
    /// `function`, or `mcp` (an MCP server whose tools svc calls).
    #[serde(rename = "type")]
    #[schema(schema_with = type_tool)]
    pub kind: String,
    /// The function (`function` tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionDefinition>,
    /// `mcp`: a registered server's label (enough alone), or the label of
    /// the ad-hoc server at `server_url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_label: Option<String>,
    /// `mcp`: an ad-hoc server's URL, allowed where `mcp.allow_urls` match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_url: Option<String>,
    /// `mcp`: headers sent to the server, never shown.
    #[serde(default, skip_serializing)]
    #[schema(value_type = Option<std::collections::BTreeMap<String, String>>, write_only)]
    pub headers: Option<Value>,
    /// `mcp`: a token sent as `Authorization: Bearer`, never shown.
    #[serde(default, skip_serializing)]
    #[schema(write_only)]
    pub authorization: Option<String>,
    /// `mcp`: the only tools offered (a list, or `{"tool_names", "read_only"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub allowed_tools: Option<Value>,
    /// `mcp`: `"never"` (the default here): Chat Completions cannot wait
    /// for an approval (the Responses API can).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub require_approval: Option<Value>,
}

/// The function part of a tool definition.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FunctionDefinition {
    #[schema(pattern = "^[a-zA-Z0-9_-]{1,64}$")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON Schema for the arguments; default: an object with no properties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `tool_choice`: `"none"`, `"auto"`, `"required"` or a named function.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "\"none\", \"auto\", \"required\" or {\"type\":\"function\",\"function\":{\"name\":...}}"
)]
pub enum ToolChoice {
    Mode(String),
    Named(NamedToolChoice),
}

/// `{"type":"function","function":{"name":...}}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(description = "A function to call, by name.")]
pub struct NamedToolChoice {
    #[serde(rename = "type")]
    #[schema(schema_with = type_function)]
    pub kind: String,
    #[schema(inline)]
    pub function: FunctionName,
}

/// A function referred to by name.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FunctionName {
    pub name: String,
}

/// `response_format`. Its schema is one named schema per type.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: JsonSchemaFormat },
}

/// The `json_schema` member of `response_format`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JsonSchemaFormat {
    #[schema(pattern = "^[a-zA-Z0-9_-]{1,64}$")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// A tool call made by the assistant (in responses and in history).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    #[schema(schema_with = type_function)]
    pub kind: String,
    #[schema(inline)]
    pub function: FunctionCall,
}

/// Name and JSON-encoded arguments of a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FunctionCall {
    pub name: String,
    /// The arguments as a JSON-encoded string.
    pub arguments: String,
}

/// Why a choice ended, as `finish_reason` says it (the wire types keep it
/// a string; this is its schema, and the values the server sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(
    description = "`stop`: the reply ended or hit a stop sequence; `length`: the token cap was reached; `tool_calls`: the model called tools."
)]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
}

impl FinishReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
        }
    }
}

/// Token counts of one completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    #[serde(default)]
    #[schema(inline)]
    pub prompt_tokens_details: PromptTokensDetails,
}

/// `prompt_tokens_details`: of the prompt's tokens, those served from a
/// prefix the engine kept from an earlier request (or an upstream's cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct PromptTokensDetails {
    pub cached_tokens: u64,
}

/// The whole (non-streamed) response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatCompletion {
    #[schema(pattern = "^chatcmpl-")]
    pub id: String,
    /// Always `chat.completion`.
    #[schema(schema_with = object_completion)]
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
    #[schema(inline)]
    pub choices: Vec<Choice>,
    pub usage: Usage,
    /// svc's extension: the calls of `mcp` tools svc made to reach this
    /// reply, in order (absent without `mcp` tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_calls: Option<Vec<McpCallRecord>>,
}

/// One call of an MCP tool that svc made for a chat completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpCallRecord {
    pub id: String,
    pub server_label: String,
    pub name: String,
    /// The model's arguments, as JSON text.
    pub arguments: String,
    /// What the tool answered, when it did.
    pub output: Option<String>,
    /// Why it failed, when it did (the model read this instead).
    pub error: Option<String>,
}

/// One choice of a whole response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Choice {
    pub index: u32,
    pub message: AssistantMessage,
    #[schema(value_type = FinishReason)]
    pub finish_reason: String,
    /// The content tokens' log probabilities when `logprobs` was asked for; else null.
    #[serde(default)]
    #[schema(required = true)]
    pub logprobs: Option<ChoiceLogprobs>,
}

/// `logprobs` of a choice (or of a chunk: the tokens of its delta).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct ChoiceLogprobs {
    /// One entry per content token, in order.
    #[schema(required = true)]
    pub content: Option<Vec<TokenLogprob>>,
    /// Always null.
    #[serde(default)]
    #[schema(required = true, schema_with = null)]
    pub refusal: Option<Value>,
}

/// One token's log probability, and the most likely tokens at its position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
    /// The token's UTF-8 bytes (a token may hold part of a character).
    #[schema(required = true)]
    pub bytes: Option<Vec<u8>>,
    /// The `top_logprobs` most likely tokens, most likely first.
    pub top_logprobs: Vec<TopLogprob>,
}

/// An alternative token at one position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    #[schema(required = true)]
    pub bytes: Option<Vec<u8>>,
}

/// The assistant's reply in a whole response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AssistantMessage {
    /// Always `assistant`.
    #[schema(schema_with = role_assistant)]
    pub role: String,
    /// Null only when the reply is tool calls alone.
    #[schema(required = true)]
    pub content: Option<String>,
    /// The model's reasoning, for reasoning models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// One streamed chunk (`chat.completion.chunk`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(description = "One Server-Sent Event of a streamed completion.")]
pub struct ChatCompletionChunk {
    #[schema(pattern = "^chatcmpl-")]
    pub id: String,
    /// Always `chat.completion.chunk`.
    #[schema(schema_with = object_chunk)]
    pub object: String,
    pub created: i64,
    pub model: String,
    /// Identifies the weights, engine build and numeric settings that made
    /// the reply: the same request with the same seed (or greedy) gives
    /// the same text while it stays the same. Absent where the engine cannot
    /// say (an upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^fp_")]
    pub system_fingerprint: Option<String>,
    /// One choice; empty only in the usage chunk.
    #[schema(inline)]
    pub choices: Vec<ChunkChoice>,
    /// Absent unless `stream_options.include_usage`; then `null` on every
    /// chunk but the last, which carries the counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = chunk_usage)]
    pub usage: Option<Option<Usage>>,
}

/// One choice of a chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    #[schema(required = true, value_type = Option<FinishReason>)]
    pub finish_reason: Option<String>,
    /// With `logprobs`, the log probabilities of this chunk's content tokens; else null.
    #[serde(default)]
    #[schema(required = true)]
    pub logprobs: Option<ChoiceLogprobs>,
}

/// What a chunk adds; every field absent in the final chunk.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[schema(
    as = ChatCompletionDelta,
    description = "What a chunk adds to the reply; empty in the chunk that carries the finish_reason."
)]
pub struct Delta {
    /// `assistant`, in the first chunk only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = role_assistant)]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, inline)]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// A piece of a streamed tool call, addressed by `index`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolCallDelta {
    pub index: u32,
    /// In the first piece of a call only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub id: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = type_function)]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, inline)]
    pub function: Option<FunctionCallDelta>,
}

/// Name (first piece only) and a fragment of the arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FunctionCallDelta {
    /// In the first piece of a call only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub name: Option<String>,
    /// The next fragment of the JSON-encoded arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub arguments: Option<String>,
}

/// The name of the schema of one Server-Sent Event of a streamed
/// completion: no Rust type carries it (the server writes `data: <json>`
/// frames itself), so the schema is written out here.
pub const STREAM_EVENT: &str = "ChatCompletionStreamEvent";

/// The schema named [`STREAM_EVENT`].
pub fn stream_event_schema() -> RefOr<Schema> {
    data_event_schema("ChatCompletionChunk", "A `chat.completion.chunk`")
}

/// The schema of one `data: ...` Server-Sent Event of a stream whose
/// events are `chunk` objects (`what` says what one is), then `[DONE]`; an
/// error after the stream began is an `ErrorResponse` event.
pub fn data_event_schema(chunk: &str, what: &str) -> RefOr<Schema> {
    let json_data = ObjectBuilder::new()
        .schema_type(Type::String)
        .content_media_type("application/json")
        .content_schema(Some(
            OneOfBuilder::new()
                .item(reference(chunk))
                .item(reference("ErrorResponse")),
        ));
    let data = AnyOfBuilder::new()
            .item(json_data)
            .item(constant("[DONE]"))
            .description(Some(format!(
                "{what}, an error (the last event when the stream fails after it began), or the terminator `[DONE]`."
            )));
    ObjectBuilder::new()
            .description(Some(
                "One Server-Sent Event of a streamed completion (the schema describes each event, as `itemSchema` does in OpenAPI 3.2). Events are `data: ...` lines separated by blank lines; svc sets no `event`, `id` or `retry` field.",
            ))
            .property(
                "event",
                typed(Type::String, Some("Absent: every event is a `message`.")),
            )
            .property("data", data)
            .required("data")
            .into()
}

fn type_text() -> Object {
    constant("text")
}

fn type_function() -> Object {
    constant("function")
}

fn type_tool() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["function", "mcp"]))
        .build()
}

fn role_assistant() -> Object {
    constant("assistant")
}

fn object_completion() -> Object {
    constant("chat.completion")
}

fn object_chunk() -> Object {
    constant("chat.completion.chunk")
}

fn chunk_usage() -> Schema {
    or_null(
        reference("Usage"),
        Some("Present only with `stream_options.include_usage`: null on every chunk but the last."),
    )
}

fn messages_schema() -> utoipa::openapi::schema::Array {
    ArrayBuilder::new()
        .items(reference("ChatMessage"))
        .min_items(Some(1))
        .description(Some("The conversation so far."))
        .examples([json!([{"role": "user", "content": "Hello"}])])
        .build()
}

pub(crate) fn stop_schema() -> Schema {
    let sequence = || {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .build()
    };
    AnyOfBuilder::new()
        .item(sequence())
        .item(ArrayBuilder::new().items(sequence()).max_items(Some(4)))
        .item(null())
        .description(Some("Up to 4 non-empty sequences that end the reply."))
        .into()
}

fn reasoning_effort_schema() -> Schema {
    crate::schema::reasoning_effort(
        "How hard a reasoning model (`svc-thinking`) thinks: `none` and `minimal` turn its reasoning off; `low`, `medium` and `high` tune it. A model id that does not reason (`svc`) is not made to. Upstream engines get the value as given.",
    )
}

fn tool_choice_schema() -> Schema {
    AnyOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["none", "auto", "required"])),
        )
        .item(reference("NamedToolChoice"))
        .item(null())
        .description(Some(
            "`none`, `auto`, `required` (needs tools), or a function named among `tools`. Default: `auto` with tools, `none` without.",
        ))
        .into()
}

fn response_format_schema() -> Schema {
    AnyOfBuilder::new()
        .item(reference("ResponseFormatText"))
        .item(reference("ResponseFormatJsonObject"))
        .item(reference("ResponseFormatJsonSchema"))
        .item(null())
        .into()
}

/// `{"type": [ty, "null"]}`.
fn nullable(ty: Type) -> Object {
    ObjectBuilder::new()
        .schema_type(
            [ty, Type::Null]
                .into_iter()
                .collect::<utoipa::openapi::schema::SchemaType>(),
        )
        .build()
}

/// `object` with `description`.
fn with_description(mut object: Object, description: &str) -> Object {
    object.description = Some(description.to_owned());
    object
}

/// A message of `role` with `content` and an optional `name`.
fn message_schema(role: &str, description: Option<&str>) -> Object {
    ObjectBuilder::new()
        .description(description)
        .property("role", constant(role))
        .property("content", reference("MessageContent"))
        .property("name", nullable(Type::String))
        .required("role")
        .required("content")
        .build()
}

fn assistant_message_schema() -> Object {
    let object = ObjectBuilder::new()
        .description(Some(
            "A prior reply of the model. Needs `content` or a non-empty `tool_calls`.",
        ))
        .property("role", constant("assistant"))
        .property("content", or_null(reference("MessageContent"), None))
        .property(
            "reasoning_content",
            with_description(
                nullable(Type::String),
                "The reasoning the model wrote before this reply, as replies carry it: templates that render earlier reasoning show it.",
            ),
        )
        .property(
            "reasoning",
            with_description(
                nullable(Type::String),
                "Another name of `reasoning_content` (vLLM's), read when that is absent.",
            ),
        )
        .property(
            "tool_calls",
            ArrayBuilder::new()
                .schema_type(
                    [Type::Array, Type::Null]
                        .into_iter()
                        .collect::<utoipa::openapi::schema::SchemaType>(),
                )
                .items(reference("ToolCall")),
        )
        .property("name", nullable(Type::String))
        .required("role")
        .build();
    keywords(
        object,
        [(
            "anyOf",
            json!([
                {"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
                {"required": ["tool_calls"], "properties": {"tool_calls": {"type": "array", "minItems": 1}}}
            ]),
        )],
    )
}

fn tool_message_schema() -> Object {
    ObjectBuilder::new()
        .description(Some("The result of a tool call."))
        .property("role", constant("tool"))
        .property("content", reference("MessageContent"))
        .property("tool_call_id", typed(Type::String, None))
        .required("role")
        .required("content")
        .required("tool_call_id")
        .build()
}

/// The named schema of each role, as `ChatMessage` refers to them.
const MESSAGE_SCHEMAS: [(&str, &str); 5] = [
    ("system", "SystemMessage"),
    ("developer", "DeveloperMessage"),
    ("user", "UserMessage"),
    ("assistant", "AssistantRequestMessage"),
    ("tool", "ToolMessage"),
];

impl PartialSchema for Message {
    fn schema() -> RefOr<Schema> {
        let mut one_of = OneOfBuilder::new().description(Some("One message, by `role`."));
        for (_, name) in MESSAGE_SCHEMAS {
            one_of = one_of.item(reference(name));
        }
        one_of
            .discriminator(Some(Discriminator::with_mapping(
                "role",
                MESSAGE_SCHEMAS.map(|(role, name)| (role, format!("#/components/schemas/{name}"))),
            )))
            .into()
    }
}

impl ToSchema for Message {
    fn name() -> std::borrow::Cow<'static, str> {
        "ChatMessage".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        let mut add = |name: &str, schema: Object| schemas.push((name.to_owned(), schema.into()));
        add("SystemMessage", message_schema("system", None));
        add(
            "DeveloperMessage",
            message_schema("developer", Some("The newer name of a system message.")),
        );
        add("UserMessage", message_schema("user", None));
        add("AssistantRequestMessage", assistant_message_schema());
        add("ToolMessage", tool_message_schema());
        schemas.push((Content::name().into_owned(), Content::schema()));
        Content::schemas(schemas);
        schemas.push((ToolCall::name().into_owned(), ToolCall::schema()));
        ToolCall::schemas(schemas);
    }
}

impl PartialSchema for Content {
    fn schema() -> RefOr<Schema> {
        AnyOfBuilder::new()
            .item(typed(Type::String, None))
            .item(
                ArrayBuilder::new().items(
                    AnyOfBuilder::new()
                        .item(reference("TextContentPart"))
                        .item(reference("ImageContentPart")),
                ),
            )
            .description(Some(
                "Message text: a string, or an array of parts: text parts are joined in order; image parts are taken in user messages only (at most 32 a request). Other part types (audio, files) are refused with 400.",
            ))
            .into()
    }
}

impl ToSchema for Content {
    fn name() -> std::borrow::Cow<'static, str> {
        "MessageContent".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((ContentPart::name().into_owned(), ContentPart::schema()));
        schemas.push((
            ImageContentPart::name().into_owned(),
            ImageContentPart::schema(),
        ));
        schemas.push((ImageUrl::name().into_owned(), ImageUrl::schema()));
    }
}

impl PartialSchema for ToolChoice {
    fn schema() -> RefOr<Schema> {
        tool_choice_schema().into()
    }
}

impl ToSchema for ToolChoice {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((
            NamedToolChoice::name().into_owned(),
            NamedToolChoice::schema(),
        ));
        NamedToolChoice::schemas(schemas);
    }
}

impl PartialSchema for Stop {
    fn schema() -> RefOr<Schema> {
        stop_schema().into()
    }
}

impl ToSchema for Stop {}

impl PartialSchema for ResponseFormat {
    fn schema() -> RefOr<Schema> {
        response_format_schema().into()
    }
}

impl ToSchema for ResponseFormat {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        let format = |kind: &str| {
            ObjectBuilder::new()
                .property("type", constant(kind))
                .required("type")
        };
        schemas.push(("ResponseFormatText".into(), format("text").into()));
        schemas.push((
            "ResponseFormatJsonObject".into(),
            format("json_object").into(),
        ));
        schemas.push((
            "ResponseFormatJsonSchema".into(),
            format("json_schema")
                .property("json_schema", JsonSchemaFormat::schema())
                .required("json_schema")
                .into(),
        ));
    }
}

crate::schema::named_schema!(
    /// One Server-Sent Event of a streamed completion ([`STREAM_EVENT`]).
    ChatCompletionStreamEvent = STREAM_EVENT, stream_event_schema;
    refers to ChatCompletionChunk, crate::error::ErrorBody
);
