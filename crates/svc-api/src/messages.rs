//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's
//! Messages API as its clients (the official SDKs, Claude Code) send and
//! read it.
//!
//! Requests are read loosely: unknown fields (`cache_control`,
//! `context_management`, `output_config`, `service_tier`, ...) are ignored,
//! and content blocks of any `type` are read so that validation can name
//! the ones svc refuses (images, documents). Replies serialize exactly in
//! Anthropic's shape.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A Messages request exactly as it arrives.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[schema(
    as = CreateMessageRequest,
    description = "Anthropic's Messages request. Unknown fields are ignored (`cache_control`, `context_management`, `output_config`, `service_tier`, ...)."
)]
pub struct MessagesRequest {
    /// A model id from GET /v1/models.
    #[schema(min_length = 1, max_length = 256, examples("svc"))]
    #[serde(deserialize_with = "crate::model_id")]
    pub model: String,
    /// Cap on the reply's tokens.
    #[schema(minimum = 1, maximum = 4294967295_i64)]
    pub max_tokens: i64,
    /// The conversation: `user` and `assistant` turns.
    #[schema(min_items = 1)]
    pub messages: Vec<InputMessage>,
    /// The system prompt: a string or text blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub system: Option<Content>,
    /// Up to 4 non-empty sequences that end the reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_items = 4)]
    pub stop_sequences: Option<Vec<String>>,
    /// Stream the reply as Server-Sent Events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(default = false)]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1, default = 1)]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1)]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 4294967295_i64)]
    pub top_k: Option<i64>,
    /// Tools the model may call. Tools with a `type` other than `custom`
    /// (Anthropic's server tools: web search, code execution, ...) are
    /// accepted and left out of the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<MessagesTool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<MessagesToolChoice>,
    /// Accepted and ignored (`user_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// `{"type":"enabled","budget_tokens":N}` asks for thinking blocks
    /// (served by reasoning models such as `svc-thinking`), with the effort
    /// its budget says: up to 1024 tokens `low`, up to 8192 `medium`, more
    /// `high`; `{"type":"disabled"}` turns reasoning off (effort `none`);
    /// `{"type":"adaptive"}` leaves the effort to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<ThinkingConfig>,
    /// MCP servers whose tools svc offers the model and calls itself
    /// (Anthropic's MCP connector, beta `mcp-client-2025-11-20` or
    /// `mcp-client-2025-04-04`): the calls and their results come back as
    /// `mcp_tool_use` and `mcp_tool_result` blocks. A server registered in
    /// svc is named by its `name` (its label) or its `url`; any other
    /// `url` is an ad-hoc server, refused unless the operator allows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<Vec<McpServerDefinition>>,
}

/// A server of `mcp_servers`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct McpServerDefinition {
    /// Always `url`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schema(examples("url"))]
    pub kind: Option<String>,
    /// The server's Streamable HTTP endpoint: a registered server's URL
    /// names that server; another URL is an ad-hoc server. For a
    /// registered server, its label (the `name`) may stand here too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, value_type = String, min_length = 1)]
    pub url: Option<String>,
    /// The server's name in `mcp_toolset` tools and `mcp_tool_use` blocks;
    /// a registered server's label names that server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, value_type = String, min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+$")]
    pub name: Option<String>,
    /// A bearer token sent to the server (never shown or logged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_token: Option<String>,
    /// The older form's tool filter (without `mcp_toolset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_configuration: Option<McpToolConfiguration>,
}

/// `tool_configuration` of an MCP server (the older form).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct McpToolConfiguration {
    /// `false` offers none of the server's tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Only these tools are offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
}

/// One tool's (or, as `default_config`, every tool's) setting in an
/// `mcp_toolset`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct McpToolConfig {
    /// Whether the tool is offered (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Accepted; svc offers every enabled tool at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defer_loading: Option<bool>,
}

/// `POST /v1/messages/count_tokens`: a Messages request without the reply's settings.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[schema(description = "Unknown fields are ignored.")]
pub struct CountTokensRequest {
    #[schema(min_length = 1, max_length = 256, examples("svc"))]
    #[serde(deserialize_with = "crate::model_id")]
    pub model: String,
    #[schema(min_items = 1)]
    pub messages: Vec<InputMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub system: Option<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<MessagesTool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<MessagesToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<ThinkingConfig>,
}

/// The answer of `POST /v1/messages/count_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CountTokensResponse {
    /// Tokens the messages, system prompt and tools use.
    pub input_tokens: u64,
}

/// One turn of the conversation.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InputMessage {
    /// `user` or `assistant`.
    #[schema(examples("user"))]
    pub role: String,
    /// A string or content blocks.
    #[schema(value_type = Value)]
    pub content: Content,
}

/// Content: a plain string or a list of blocks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged, expecting = "a string or an array of content blocks")]
pub enum Content {
    Text(String),
    Blocks(Vec<ContentBlockParam>),
}

impl From<&str> for Content {
    fn from(text: &str) -> Self {
        Content::Text(text.to_owned())
    }
}

/// A content block of a request, of any `type`: `text`, `image` (in user
/// turns), `tool_use`, `tool_result`, `thinking`, `redacted_thinking` are
/// served; validation names and refuses the others (`document`, ...). The fields are
/// those of every served type; other fields (`cache_control`, `citations`)
/// are ignored.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct ContentBlockParam {
    #[serde(rename = "type")]
    #[schema(examples("text"))]
    pub kind: String,
    /// `text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// `tool_use`: the call's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `tool_use`: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `tool_use`: the arguments, an object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
    /// `tool_result`: the id of the `tool_use` it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// `tool_result`: a string or text blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub content: Option<Content>,
    /// `tool_result`: whether the tool failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// `thinking`: the reasoning text (in an assistant turn, the reasoning
    /// of that turn, which templates that render earlier reasoning show).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// `thinking`: its signature (ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// `redacted_thinking`: opaque data (ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// An `image` block's image: `{"type":"base64","media_type":...,"data":...}`
    /// or `{"type":"url","url":...}` (passed on, never fetched by svc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub source: Option<Value>,
}

/// A tool: a custom tool has `name`, `description`, `input_schema`; an
/// `mcp_toolset` has `mcp_server_name`, `default_config` and `configs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct MessagesTool {
    /// Absent or `custom` for a custom tool; `mcp_toolset` for the tools of
    /// a server of `mcp_servers`; anything else is a server tool, accepted
    /// and left out of the prompt.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// A custom tool's name (required for one).
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the tool's input (an object schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub input_schema: Option<Value>,
    /// An `mcp_toolset`'s server: a `name` of `mcp_servers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_server_name: Option<String>,
    /// An `mcp_toolset`'s setting for every tool of its server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_config: Option<McpToolConfig>,
    /// An `mcp_toolset`'s settings of single tools, by name, over
    /// `default_config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configs: Option<std::collections::BTreeMap<String, McpToolConfig>>,
}

/// `tool_choice`: `auto`, `any`, `tool` (with `name`) or `none`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct MessagesToolChoice {
    #[serde(rename = "type")]
    #[schema(examples("auto"))]
    pub kind: String,
    /// The tool to call, with `type: "tool"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Accepted; svc's models call one tool at a time or several as they do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_parallel_tool_use: Option<bool>,
}

/// `thinking`: `enabled` (with `budget_tokens`), `disabled` or `adaptive`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct ThinkingConfig {
    #[serde(rename = "type")]
    #[schema(examples("enabled"))]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<i64>,
}

/// The whole reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = MessageResponse)]
pub struct MessageReply {
    /// `msg_...`.
    pub id: String,
    /// Always `message`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Always `assistant`.
    pub role: String,
    pub model: String,
    pub content: Vec<ContentBlock>,
    /// `end_turn`, `max_tokens`, `stop_sequence` or `tool_use`; null in `message_start`.
    pub stop_reason: Option<String>,
    /// The stop sequence that ended the reply, when one did.
    pub stop_sequence: Option<String>,
    pub usage: MessagesUsage,
}

/// A content block of a reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    ToolUse {
        /// `toolu_...`.
        id: String,
        name: String,
        #[schema(value_type = Object)]
        input: Value,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    /// A call of an MCP server's tool, which svc made.
    McpToolUse {
        /// `mcptoolu_...`.
        id: String,
        name: String,
        /// The server's `name` in `mcp_servers`.
        server_name: String,
        #[schema(value_type = Object)]
        input: Value,
    },
    /// What the call of `tool_use_id` came to: its output, or its error
    /// (`is_error`).
    McpToolResult {
        tool_use_id: String,
        is_error: bool,
        content: Vec<McpResultText>,
    },
}

/// A text block of an `mcp_tool_result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpResultText {
    /// Always `text`.
    #[serde(rename = "type")]
    pub kind: String,
    pub text: String,
}

/// Token counts, as Anthropic counts them: `input_tokens` are the prompt's
/// tokens that were computed, `cache_read_input_tokens` those served from a
/// prefix the engine kept from an earlier request (the prompt is their
/// sum). svc writes no cache entries on request, so
/// `cache_creation_input_tokens` is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct MessagesUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

/// One event of a streamed reply, as the `data:` of an SSE event named by its `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MessageStreamEvent {
    MessageStart {
        message: MessageReply,
    },
    ContentBlockStart {
        index: u32,
        content_block: ContentBlock,
    },
    Ping,
    ContentBlockDelta {
        index: u32,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        delta: MessageDelta,
        usage: MessagesUsage,
    },
    MessageStop,
}

impl MessageStreamEvent {
    /// The SSE event name: the `type`.
    pub fn name(&self) -> &'static str {
        match self {
            MessageStreamEvent::MessageStart { .. } => "message_start",
            MessageStreamEvent::ContentBlockStart { .. } => "content_block_start",
            MessageStreamEvent::Ping => "ping",
            MessageStreamEvent::ContentBlockDelta { .. } => "content_block_delta",
            MessageStreamEvent::ContentBlockStop { .. } => "content_block_stop",
            MessageStreamEvent::MessageDelta { .. } => "message_delta",
            MessageStreamEvent::MessageStop => "message_stop",
        }
    }
}

/// What a `content_block_delta` adds to its block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockDelta {
    TextDelta { text: String },
    InputJsonDelta { partial_json: String },
    ThinkingDelta { thinking: String },
    SignatureDelta { signature: String },
}

/// The end of the reply, in `message_delta`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MessageDelta {
    pub stop_reason: Option<String>,
    pub stop_sequence: Option<String>,
}

/// The body of every error on the Messages routes, and of an `error` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = AnthropicErrorResponse)]
pub struct AnthropicErrorBody {
    /// Always `error`.
    #[serde(rename = "type")]
    pub kind: String,
    pub error: AnthropicError,
    /// The `x-request-id` of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// The inner error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AnthropicError {
    /// `invalid_request_error`, `authentication_error`, `permission_error`,
    /// `not_found_error`, `rate_limit_error`, `api_error`,
    /// `overloaded_error` or `timeout_error`.
    #[serde(rename = "type")]
    #[schema(examples("invalid_request_error"))]
    pub kind: String,
    pub message: String,
}

/// The name of the schema of one streamed Messages event.
pub const STREAM_EVENT: &str = "MessageStreamSseEvent";

/// The schema named [`STREAM_EVENT`]: an SSE event whose `event` is the
/// data's `type`.
pub fn stream_event_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};

    use crate::schema::{reference, typed};
    let data = ObjectBuilder::new()
        .schema_type(Type::String)
        .content_media_type("application/json")
        .content_schema(Some(
            OneOfBuilder::new()
                .item(reference("MessageStreamEvent"))
                .item(reference("AnthropicErrorResponse")),
        ))
        .description(Some(
            "A stream event, or an error (the last event when the stream fails after it began).",
        ));
    ObjectBuilder::new()
        .description(Some(
            "One Server-Sent Event of a streamed message (the schema describes each event, as `itemSchema` does in OpenAPI 3.2): `event: <type>` and `data: <json>` lines, then a blank line. The events come in Anthropic's order: `message_start`, then per content block `content_block_start`, `content_block_delta`s and `content_block_stop` (a `ping` after the first block's start), then `message_delta` (stop reason and usage) and `message_stop`.",
        ))
        .property(
            "event",
            typed(Type::String, Some("The data's `type`, or `error`.")),
        )
        .property("data", data)
        .required("event")
        .required("data")
        .into()
}

crate::schema::named_schema!(
    /// One Server-Sent Event of a streamed message ([`STREAM_EVENT`]).
    MessageStreamSseEvent = STREAM_EVENT, stream_event_schema;
    refers to MessageStreamEvent, AnthropicErrorBody
);
