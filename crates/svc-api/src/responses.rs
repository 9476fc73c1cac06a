//! `POST /v1/responses` (OpenAI's Responses API): the request as clients
//! send it, the response object, and what `GET`/`DELETE
//! /v1/responses/{id}` answer. The streamed events are written by the
//! server as JSON objects; their schema is [`stream_event_schema`].
//!
//! Requests are read loosely, like chat requests: unknown fields are
//! ignored, and input items and tools are structs of optional fields so
//! that `svc-core` can refuse a wrong one by naming its `param`
//! (`input[2].call_id`) instead of serde failing on a whole union.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{AnyOfBuilder, ArrayBuilder, Object, ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use crate::schema::{collect, constant, keywords, null, reference, typed};

crate::schema::twin_schema! {
    /// A Responses API request exactly as it arrives. Unknown fields are
    /// ignored; `null` is read as "not given".
    #[derive(Debug, Clone, Default, Serialize, Deserialize)]
    pub struct CreateResponseRequest {
        /// A model id from GET /v1/models.
        #[serde(deserialize_with = "crate::model_id")]
        #[schema(min_length = 1, max_length = 256, examples("svc"))]
        pub model: String,
        /// The new input: a string (one user message) or a list of items.
        /// Needed unless `previous_response_id` is given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(schema_with = input_schema)]
        pub input: Option<ResponseInput>,
        /// A system message put first (not carried over by `previous_response_id`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub instructions: Option<String>,
        /// Tools: `function` tools are offered to the model; other types
        /// (hosted tools svc cannot run) are accepted and left out of the prompt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(max_items = 128)]
        pub tools: Option<Vec<ResponseTool>>,
        /// `none`, `auto`, `required` or `{"type":"function","name":...}`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(schema_with = tool_choice_schema)]
        pub tool_choice: Option<ResponseToolChoice>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub parallel_tool_calls: Option<bool>,
        /// Cap on output tokens (reasoning included).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = 1, maximum = 4294967295_i64)]
        pub max_output_tokens: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = 0, maximum = 2, default = 0.7)]
        pub temperature: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = 0, maximum = 1, default = 1)]
        pub top_p: Option<f64>,
        /// The shape of the text output (`text.format`); `verbosity` is accepted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(inline)]
        pub text: Option<TextConfig>,
        /// `effort` (`none`, `minimal`, `low`, `medium` or `high`; any other
        /// value is a 400 naming `reasoning.effort`) tunes a model that
        /// reasons (`svc-thinking`), and `none`/`minimal` turn its reasoning
        /// off; `summary` is accepted. Both are returned.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(inline)]
        pub reasoning: Option<ReasoningConfig>,
        /// Up to 16 string pairs, returned with the response.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub metadata: Option<BTreeMap<String, String>>,
        /// An end-user id; returned with the response.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub user: Option<String>,
        /// Extra output to include; accepted (svc has none to add).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub include: Option<Vec<String>>,
        /// Accepted and returned.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub prompt_cache_key: Option<String>,
        /// Keep the response so that `GET /v1/responses/{id}` and
        /// `previous_response_id` find it (default true).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(default = true)]
        pub store: Option<bool>,
        /// Continue the conversation of a stored response of the same account.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub previous_response_id: Option<String>,
        /// Stream the response as Server-Sent Events.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(default = false)]
        pub stream: Option<bool>,
        /// The most calls of `mcp` tools svc makes for this response
        /// (default and ceiling 20); a model asking for more ends the
        /// response `incomplete`, reason `max_tool_calls`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(minimum = 0, maximum = 20)]
        pub max_tool_calls: Option<i64>,
    }
    #[schema(
        as = CreateResponseRequest,
        description = "Unknown fields are ignored; `null` in an optional field means the field is not given."
    )]
    struct CreateResponseRequestSchema;
}

impl PartialSchema for CreateResponseRequest {
    fn schema() -> RefOr<Schema> {
        CreateResponseRequestSchema::schema()
    }
}

impl ToSchema for CreateResponseRequest {
    fn name() -> std::borrow::Cow<'static, str> {
        CreateResponseRequestSchema::name()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        CreateResponseRequestSchema::schemas(schemas);
        // What `input`, written out (`schema_with`), refers to.
        ResponseInput::schemas(schemas);
    }
}

/// `input`: one user message as a string, or a list of items.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged, expecting = "a string or an array of input items")]
pub enum ResponseInput {
    Text(String),
    Items(Vec<InputItem>),
}

/// One input item, read loosely: a message (`role`, `content`; `type`
/// `message` or absent), a `function_call` (`call_id`, `name`,
/// `arguments`), a `function_call_output` (`call_id`, `output`), a
/// `reasoning` item, or another type of OpenAI's. Which fields must be
/// there depends on `type`; `svc-core` checks them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(
    as = ResponseInputItem,
    description = "A message (`role` user/system/developer/assistant with `content`), a `function_call`, a `function_call_output` or a `reasoning` item, as the Responses API returns them. A reasoning item's text (its `reasoning_text` content, else its `summary_text` summary) is the reasoning of the assistant turn that follows it; the calls of tools svc cannot run are left out of the prompt."
)]
pub struct InputItem {
    /// `message` (the default when `role` is given), `function_call`,
    /// `function_call_output`, `reasoning`, ...
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `user`, `system`, `developer` or `assistant` (messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// A string or a list of `input_text`/`output_text` parts (messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = content_schema)]
    pub content: Option<InputContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The JSON-encoded arguments (function calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    /// A string or a list of `input_text` parts (function call outputs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = content_schema)]
    pub output: Option<InputContent>,
    /// `summary_text` parts (reasoning items): the reasoning's summary, read
    /// when the item has no `reasoning_text` content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Vec<InputPart>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The MCP server of an `mcp_list_tools`, `mcp_call` or
    /// `mcp_approval_request` item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_label: Option<String>,
    /// The tools an `mcp_list_tools` item lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// Why an `mcp_call` failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The `mcp_approval_request` an `mcp_approval_response` answers (or
    /// the one an `mcp_call` ran after).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_request_id: Option<String>,
    /// Whether an `mcp_approval_response` approves the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approve: Option<bool>,
    /// Why, in an `mcp_approval_response` (accepted, not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Message content: a string or typed parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, expecting = "a string or an array of content parts")]
pub enum InputContent {
    Text(String),
    Parts(Vec<InputPart>),
}

/// One content part: text (`input_text`, `output_text`), or in a user
/// message an image (`input_image`); others are read so that validation
/// can name them and refuse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = ResponseInputPart)]
pub struct InputPart {
    /// `input_text`, `output_text` or `input_image` (`refusal` is read as
    /// text too); in a reasoning item, `reasoning_text` or `summary_text`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// An `input_image`'s image: an `https:`/`http:` URL (passed on, never
    /// fetched by svc) or a `data:image/...;base64,` URI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_url: Option<String>,
    /// An `input_image`'s `auto`, `low` or `high`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// An uploaded file's id (not served: files are not stored by svc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_id: Option<String>,
}

/// A tool, read loosely: `function` tools have `name`, `description`,
/// `parameters` and `strict`; other types are accepted and left out.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(
    as = ResponseTool,
    description = "A `function` tool; an `mcp` tool, whose server's tools svc lists and calls itself (`server_label`, `server_url`, `headers`, `authorization`, `allowed_tools`, `require_approval`); or another hosted tool type (`web_search`, `file_search`, `computer_use_preview`, `local_shell`, `custom`, ...) that svc accepts and leaves out of the prompt."
)]
pub struct ResponseTool {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    /// `mcp`: the server's label (a registered server's label alone is enough).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_label: Option<String>,
    /// `mcp`: an ad-hoc server's Streamable HTTP URL, allowed only where the
    /// operator's `mcp.allow_urls` match it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_url: Option<String>,
    /// `mcp`: what the server is for, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_description: Option<String>,
    /// `mcp`: headers sent to the server. Never repeated in the response
    /// nor stored.
    #[serde(default, skip_serializing)]
    #[schema(value_type = Option<BTreeMap<String, String>>, write_only)]
    pub headers: Option<Value>,
    /// `mcp`: an OAuth access token, sent as `Authorization: Bearer`.
    /// Never repeated in the response nor stored.
    #[serde(default, skip_serializing)]
    #[schema(write_only)]
    pub authorization: Option<String>,
    /// `mcp`: the only tools offered: a list of names, or `{"tool_names":
    /// [...], "read_only": bool}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub allowed_tools: Option<Value>,
    /// `mcp`: which calls wait for the client's approval: `"always"` (the
    /// default), `"never"`, or `{"always": {"tool_names": [...]}, "never":
    /// {"tool_names": [...]}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub require_approval: Option<Value>,
    /// `mcp`: OpenAI's connectors, which svc does not have (refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector_id: Option<String>,
}

/// `tool_choice`: a mode or a named tool.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "\"none\", \"auto\", \"required\" or {\"type\":\"function\",\"name\":...}"
)]
pub enum ResponseToolChoice {
    Mode(String),
    Named {
        #[serde(rename = "type")]
        kind: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
}

/// `text`: the output's format, and verbosity (accepted).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct TextConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(inline)]
    pub format: Option<TextFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<String>,
}

/// `text.format`: `text`, `json_object` or `json_schema` (with `name`,
/// `schema`, `strict`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct TextFormat {
    /// `text`, `json_object` or `json_schema`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `reasoning`: the effort asked for, and `summary` (accepted); returned as given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ReasoningConfig {
    #[serde(default)]
    #[schema(schema_with = effort_schema)]
    pub effort: Option<String>,
    #[serde(default)]
    pub summary: Option<String>,
}

/// The response object (`object: "response"`), whole or in the events
/// that carry it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = ResponseObject)]
pub struct ResponseObject {
    #[schema(pattern = "^resp_")]
    pub id: String,
    /// Always `response`.
    #[schema(schema_with = object_response)]
    pub object: String,
    /// Unix time.
    pub created_at: i64,
    /// `in_progress` (in the first events of a stream), `completed`,
    /// `incomplete` or `failed`.
    #[schema(schema_with = status_schema)]
    pub status: String,
    /// Why the response failed (`status: failed`).
    #[schema(required = true)]
    pub error: Option<ResponseError>,
    /// Why the response is incomplete (`status: incomplete`).
    #[schema(required = true)]
    pub incomplete_details: Option<IncompleteDetails>,
    #[schema(required = true)]
    pub instructions: Option<String>,
    #[schema(required = true)]
    pub max_output_tokens: Option<u32>,
    pub model: String,
    pub output: Vec<OutputItem>,
    pub parallel_tool_calls: bool,
    #[schema(required = true)]
    pub previous_response_id: Option<String>,
    #[schema(inline)]
    pub reasoning: ReasoningConfig,
    pub store: bool,
    pub temperature: f64,
    /// `{"format": {...}}`, as asked (default `{"type":"text"}`).
    #[schema(value_type = Object)]
    pub text: Value,
    /// As asked (default `auto`).
    #[schema(value_type = Value)]
    pub tool_choice: Value,
    /// The tools as asked.
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<Value>,
    pub top_p: f64,
    /// Always `disabled`.
    pub truncation: String,
    /// Null until the response is done.
    #[schema(required = true)]
    pub usage: Option<ResponseUsage>,
    #[schema(required = true)]
    pub user: Option<String>,
    pub metadata: BTreeMap<String, String>,
    #[schema(required = true)]
    pub prompt_cache_key: Option<String>,
}

/// `error` of a failed response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = ResponseError)]
pub struct ResponseError {
    pub code: String,
    pub message: String,
}

/// `incomplete_details`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct IncompleteDetails {
    /// `max_output_tokens`.
    pub reason: String,
}

/// One output item, by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    /// The reply's text.
    Message {
        id: String,
        /// Always `assistant`.
        role: String,
        status: String,
        content: Vec<OutputText>,
    },
    /// A call of a function tool.
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
        status: String,
    },
    /// The model's reasoning (`svc-thinking`), as `reasoning_text` content.
    Reasoning {
        id: String,
        /// Always empty: svc does not summarise.
        summary: Vec<Value>,
        content: Vec<ReasoningText>,
        status: String,
    },
    /// The tools an MCP server offered the model.
    McpListTools {
        id: String,
        server_label: String,
        tools: Vec<McpToolInfo>,
        /// Why the list could not be read.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A call of an MCP server's tool, made by svc: its `output`, or its
    /// `error`.
    McpCall {
        id: String,
        server_label: String,
        name: String,
        arguments: String,
        output: Option<String>,
        error: Option<String>,
        /// `in_progress`, `completed`, `failed` or `incomplete`.
        status: String,
        /// The approval request it ran after, if it waited for one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval_request_id: Option<String>,
    },
    /// A call the model asked for that waits for the client's approval
    /// (`mcp_approval_response` in the next request's input).
    McpApprovalRequest {
        id: String,
        server_label: String,
        name: String,
        arguments: String,
    },
}

/// One tool of an `mcp_list_tools` item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = ResponseMcpToolInfo)]
pub struct McpToolInfo {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON Schema of its arguments.
    #[schema(value_type = Object)]
    pub input_schema: Value,
    /// The server's hints (`readOnlyHint`, ...), as it sent them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub annotations: Option<Value>,
}

/// An `output_text` part of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = ResponseOutputText)]
pub struct OutputText {
    /// Always `output_text`.
    #[serde(rename = "type")]
    #[schema(schema_with = type_output_text)]
    pub kind: String,
    pub text: String,
    /// Always empty.
    pub annotations: Vec<Value>,
    /// Always empty.
    pub logprobs: Vec<Value>,
}

impl OutputText {
    pub fn new(text: String) -> Self {
        OutputText {
            kind: "output_text".into(),
            text,
            annotations: Vec::new(),
            logprobs: Vec::new(),
        }
    }
}

/// A `reasoning_text` part of a reasoning item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = ResponseReasoningText)]
pub struct ReasoningText {
    /// Always `reasoning_text`.
    #[serde(rename = "type")]
    #[schema(schema_with = type_reasoning_text)]
    pub kind: String,
    pub text: String,
}

impl ReasoningText {
    pub fn new(text: String) -> Self {
        ReasoningText {
            kind: "reasoning_text".into(),
            text,
        }
    }
}

/// Token counts of one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct ResponseUsage {
    pub input_tokens: u64,
    #[schema(inline)]
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: u64,
    #[schema(inline)]
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: u64,
}

/// `input_tokens_details`: `cached_tokens` of the input's tokens were served
/// from a prefix the engine kept from an earlier request;
/// `cache_write_tokens` is 0 (svc writes no cache entries on request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct InputTokensDetails {
    pub cached_tokens: u64,
    pub cache_write_tokens: u64,
}

/// `output_tokens_details`: engines count reasoning with the output, so
/// `reasoning_tokens` is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct OutputTokensDetails {
    pub reasoning_tokens: u64,
}

/// What `DELETE /v1/responses/{id}` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeletedResponse {
    pub id: String,
    /// Always `response`.
    #[schema(schema_with = object_response)]
    pub object: String,
    /// Always true.
    pub deleted: bool,
}

/// The name of the schema of one streamed event.
pub const RESPONSE_STREAM_EVENT: &str = "ResponseStreamEvent";

/// One event of a streamed response, as the server sends it: the event's
/// own fields, then its `type` and its `sequence_number` (counting every
/// event of the stream from 0). Borrowed from the response being built,
/// so a stream copies nothing to say it.
#[derive(Debug, Serialize)]
pub struct StreamEvent<'a> {
    #[serde(flatten)]
    pub event: ResponseEvent<'a>,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub sequence_number: u64,
}

impl<'a> StreamEvent<'a> {
    pub fn new(event: ResponseEvent<'a>, sequence_number: u64) -> Self {
        StreamEvent {
            kind: event.kind(),
            event,
            sequence_number,
        }
    }
}

/// What one streamed event says, by its `type` ([`ResponseEvent::kind`]).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum ResponseEvent<'a> {
    /// `response.created`.
    Created { response: &'a ResponseObject },
    /// `response.in_progress`.
    InProgress { response: &'a ResponseObject },
    /// `response.completed`.
    Completed { response: &'a ResponseObject },
    /// `response.incomplete` (`max_output_tokens` cut it).
    Incomplete { response: &'a ResponseObject },
    /// `response.failed`, after an `error` event.
    Failed { response: &'a ResponseObject },
    /// `response.output_item.added`: the item as it starts.
    OutputItemAdded {
        output_index: usize,
        item: &'a OutputItem,
    },
    /// `response.output_item.done`: the item whole.
    OutputItemDone {
        output_index: usize,
        item: &'a OutputItem,
    },
    /// `response.content_part.added`.
    ContentPartAdded {
        item_id: &'a str,
        output_index: usize,
        content_index: u32,
        part: ContentPart<'a>,
    },
    /// `response.content_part.done`.
    ContentPartDone {
        item_id: &'a str,
        output_index: usize,
        content_index: u32,
        part: ContentPart<'a>,
    },
    /// `response.output_text.delta`.
    OutputTextDelta {
        item_id: &'a str,
        output_index: usize,
        content_index: u32,
        delta: &'a str,
        /// Always empty.
        logprobs: &'a [Value],
    },
    /// `response.output_text.done`.
    OutputTextDone {
        item_id: &'a str,
        output_index: usize,
        content_index: u32,
        text: &'a str,
        /// Always empty.
        logprobs: &'a [Value],
    },
    /// `response.reasoning_text.delta`.
    ReasoningTextDelta {
        item_id: &'a str,
        output_index: usize,
        content_index: u32,
        delta: &'a str,
    },
    /// `response.reasoning_text.done`.
    ReasoningTextDone {
        item_id: &'a str,
        output_index: usize,
        content_index: u32,
        text: &'a str,
    },
    /// `response.function_call_arguments.delta`.
    FunctionCallArgumentsDelta {
        item_id: &'a str,
        output_index: usize,
        delta: &'a str,
    },
    /// `response.function_call_arguments.done`.
    FunctionCallArgumentsDone {
        item_id: &'a str,
        output_index: usize,
        name: &'a str,
        arguments: &'a str,
    },
    /// `response.mcp_list_tools.in_progress`, `.completed` or `.failed`.
    McpListTools {
        #[serde(skip)]
        phase: McpPhase,
        item_id: &'a str,
        output_index: usize,
    },
    /// `response.mcp_call.in_progress`, `.completed` or `.failed`.
    McpCall {
        #[serde(skip)]
        phase: McpPhase,
        item_id: &'a str,
        output_index: usize,
    },
    /// `response.mcp_call_arguments.delta`.
    McpCallArgumentsDelta {
        item_id: &'a str,
        output_index: usize,
        delta: &'a str,
    },
    /// `response.mcp_call_arguments.done`.
    McpCallArgumentsDone {
        item_id: &'a str,
        output_index: usize,
        arguments: &'a str,
    },
    /// `error`: what ended the stream.
    Error {
        code: &'a str,
        message: &'a str,
        param: Option<&'a str>,
    },
}

impl ResponseEvent<'_> {
    /// The event's `type`, one of [`STREAM_EVENT_TYPES`].
    pub fn kind(&self) -> &'static str {
        match self {
            ResponseEvent::Created { .. } => "response.created",
            ResponseEvent::InProgress { .. } => "response.in_progress",
            ResponseEvent::Completed { .. } => "response.completed",
            ResponseEvent::Incomplete { .. } => "response.incomplete",
            ResponseEvent::Failed { .. } => "response.failed",
            ResponseEvent::OutputItemAdded { .. } => "response.output_item.added",
            ResponseEvent::OutputItemDone { .. } => "response.output_item.done",
            ResponseEvent::ContentPartAdded { .. } => "response.content_part.added",
            ResponseEvent::ContentPartDone { .. } => "response.content_part.done",
            ResponseEvent::OutputTextDelta { .. } => "response.output_text.delta",
            ResponseEvent::OutputTextDone { .. } => "response.output_text.done",
            ResponseEvent::ReasoningTextDelta { .. } => "response.reasoning_text.delta",
            ResponseEvent::ReasoningTextDone { .. } => "response.reasoning_text.done",
            ResponseEvent::FunctionCallArgumentsDelta { .. } => {
                "response.function_call_arguments.delta"
            }
            ResponseEvent::FunctionCallArgumentsDone { .. } => {
                "response.function_call_arguments.done"
            }
            ResponseEvent::McpListTools { phase, .. } => match phase {
                McpPhase::InProgress => "response.mcp_list_tools.in_progress",
                McpPhase::Completed => "response.mcp_list_tools.completed",
                McpPhase::Failed => "response.mcp_list_tools.failed",
            },
            ResponseEvent::McpCall { phase, .. } => match phase {
                McpPhase::InProgress => "response.mcp_call.in_progress",
                McpPhase::Completed => "response.mcp_call.completed",
                McpPhase::Failed => "response.mcp_call.failed",
            },
            ResponseEvent::McpCallArgumentsDelta { .. } => "response.mcp_call_arguments.delta",
            ResponseEvent::McpCallArgumentsDone { .. } => "response.mcp_call_arguments.done",
            ResponseEvent::Error { .. } => "error",
        }
    }
}

/// Where an MCP list or call stands, in its events' names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpPhase {
    InProgress,
    Completed,
    Failed,
}

/// The content part an event is about.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum ContentPart<'a> {
    Text(&'a OutputText),
    Reasoning(&'a ReasoningText),
}

/// The names of every event a stream may carry, in OpenAI's words.
pub const STREAM_EVENT_TYPES: [&str; 27] = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.reasoning_text.delta",
    "response.reasoning_text.done",
    "response.output_item.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "response.mcp_list_tools.in_progress",
    "response.mcp_list_tools.completed",
    "response.mcp_list_tools.failed",
    "response.mcp_call.in_progress",
    "response.mcp_call_arguments.delta",
    "response.mcp_call_arguments.done",
    "response.mcp_call.completed",
    "response.mcp_call.failed",
    "error",
    // Not sent by svc; listed so clients' names are known.
    "response.queued",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
];

/// The schema of one Server-Sent Event of a streamed response: an
/// `event: <type>` line and a `data:` line whose JSON has the same `type`
/// and a `sequence_number` that counts from 0.
pub fn stream_event_schema() -> RefOr<Schema> {
    let payload = keywords(
        ObjectBuilder::new()
            .property(
                "type",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(STREAM_EVENT_TYPES)),
            )
            .property(
                "sequence_number",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(0)),
            )
            .property("response", reference("ResponseObject"))
            .required("type")
            .required("sequence_number")
            .build(),
        [("additionalProperties", json!(true))],
    );
    let data = ObjectBuilder::new()
        .schema_type(Type::String)
        .content_media_type("application/json")
        .content_schema(Some(payload));
    ObjectBuilder::new()
        .description(Some(
            "One Server-Sent Event of a streamed response (the schema describes each event, as `itemSchema` does in OpenAPI 3.2): `event: <type>` and `data: <json>` whose `type` is the same and whose `sequence_number` counts from 0. `response.created`, `response.in_progress` and the last event (`response.completed`, `response.incomplete` or `response.failed`) carry the `response` object; an error after the stream began is an `error` event (`code`, `message`, `param`) before `response.failed`.",
        ))
        .property("event", typed(Type::String, None))
        .property("data", data)
        .required("data")
        .into()
}

fn input_schema() -> Schema {
    AnyOfBuilder::new()
        .item(typed(Type::String, Some("One user message.")))
        .item(ArrayBuilder::new().items(reference("ResponseInputItem")))
        .item(null())
        .examples([json!("Hello")])
        .into()
}

fn content_schema() -> Schema {
    AnyOfBuilder::new()
        .item(typed(Type::String, None))
        .item(ArrayBuilder::new().items(reference("ResponseInputPart")))
        .item(null())
        .into()
}

fn tool_choice_schema() -> Schema {
    AnyOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["none", "auto", "required"])),
        )
        .item(
            ObjectBuilder::new()
                .property("type", constant("function"))
                .property("name", typed(Type::String, None))
                .required("type")
                .required("name"),
        )
        .item(null())
        .into()
}

fn object_response() -> Object {
    constant("response")
}

fn type_output_text() -> Object {
    constant("output_text")
}

fn effort_schema() -> utoipa::openapi::schema::Schema {
    crate::schema::reasoning_effort(
        "How hard a reasoning model (`svc-thinking`) thinks: `none` and `minimal` turn its reasoning off; `low`, `medium` and `high` tune it. A model id that does not reason (`svc`) is not made to. Upstream engines get the value as given.",
    )
}

fn type_reasoning_text() -> Object {
    constant("reasoning_text")
}

fn status_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["in_progress", "completed", "incomplete", "failed"]))
        .build()
}

fn item_status() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["in_progress", "completed", "incomplete"]))
        .build()
}

fn string() -> Object {
    typed(Type::String, None)
}

impl PartialSchema for OutputItem {
    fn schema() -> RefOr<Schema> {
        let message = ObjectBuilder::new()
            .property("type", constant("message"))
            .property("id", string())
            .property("role", constant("assistant"))
            .property("status", item_status())
            .property(
                "content",
                ArrayBuilder::new().items(reference("ResponseOutputText")),
            )
            .required("type")
            .required("id")
            .required("role")
            .required("status")
            .required("content");
        let call = ObjectBuilder::new()
            .property("type", constant("function_call"))
            .property("id", string())
            .property("call_id", string())
            .property("name", string())
            .property("arguments", string())
            .property("status", item_status())
            .required("type")
            .required("id")
            .required("call_id")
            .required("name")
            .required("arguments")
            .required("status");
        let reasoning = ObjectBuilder::new()
            .property("type", constant("reasoning"))
            .property("id", string())
            .property(
                "summary",
                ArrayBuilder::new().items(ObjectBuilder::new().schema_type(Type::Object)),
            )
            .property(
                "content",
                ArrayBuilder::new().items(reference("ResponseReasoningText")),
            )
            .property("status", item_status())
            .required("type")
            .required("id")
            .required("summary")
            .required("content")
            .required("status");
        let nullable = |ty| AnyOfBuilder::new().item(typed(ty, None)).item(null());
        let list_tools = ObjectBuilder::new()
            .property("type", constant("mcp_list_tools"))
            .property("id", string())
            .property("server_label", string())
            .property(
                "tools",
                ArrayBuilder::new().items(reference("ResponseMcpToolInfo")),
            )
            .property("error", nullable(Type::String))
            .required("type")
            .required("id")
            .required("server_label")
            .required("tools");
        let mcp_call = ObjectBuilder::new()
            .property("type", constant("mcp_call"))
            .property("id", string())
            .property("server_label", string())
            .property("name", string())
            .property("arguments", string())
            .property("output", nullable(Type::String))
            .property("error", nullable(Type::String))
            .property(
                "status",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(["in_progress", "completed", "incomplete", "failed"])),
            )
            .property("approval_request_id", string())
            .required("type")
            .required("id")
            .required("server_label")
            .required("name")
            .required("arguments")
            .required("output")
            .required("error")
            .required("status");
        let approval = ObjectBuilder::new()
            .property("type", constant("mcp_approval_request"))
            .property("id", string())
            .property("server_label", string())
            .property("name", string())
            .property("arguments", string())
            .required("type")
            .required("id")
            .required("server_label")
            .required("name")
            .required("arguments");
        AnyOfBuilder::new()
            .item(message)
            .item(call)
            .item(reasoning)
            .item(list_tools)
            .item(mcp_call)
            .item(approval)
            .description(Some(
                "A `message` with `output_text` parts, a `function_call`, a `reasoning` item, or an `mcp` tool's items: `mcp_list_tools`, `mcp_call` (run by svc) and `mcp_approval_request` (a call waiting for the client's `mcp_approval_response`).",
            ))
            .into()
    }
}

impl ToSchema for OutputItem {
    fn name() -> std::borrow::Cow<'static, str> {
        "ResponseOutputItem".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((OutputText::name().into_owned(), OutputText::schema()));
        schemas.push((ReasoningText::name().into_owned(), ReasoningText::schema()));
        schemas.push((McpToolInfo::name().into_owned(), McpToolInfo::schema()));
    }
}

impl PartialSchema for ResponseInput {
    fn schema() -> RefOr<Schema> {
        input_schema().into()
    }
}

impl ToSchema for ResponseInput {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        collect::<InputItem>(schemas);
        // What an item's `content` and `output`, written out
        // (`schema_with`), refer to.
        InputContent::schemas(schemas);
    }
}

impl PartialSchema for InputContent {
    fn schema() -> RefOr<Schema> {
        content_schema().into()
    }
}

impl ToSchema for InputContent {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((InputPart::name().into_owned(), InputPart::schema()));
    }
}

impl PartialSchema for ResponseToolChoice {
    fn schema() -> RefOr<Schema> {
        tool_choice_schema().into()
    }
}

impl ToSchema for ResponseToolChoice {}

crate::schema::named_schema!(
    /// One Server-Sent Event of a streamed response
    /// ([`RESPONSE_STREAM_EVENT`]).
    ResponseStreamEvent = RESPONSE_STREAM_EVENT, stream_event_schema;
    refers to ResponseObject
);
