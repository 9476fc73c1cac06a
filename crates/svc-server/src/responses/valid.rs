//! From a Responses API request (`POST /v1/responses`) to a validated
//! [`GenerateRequest`]: the same checks as chat requests, each failure
//! naming its `param` (`input[2].call_id`, `text.format.name`, ...).
//!
//! What goes into the prompt:
//! - `instructions` becomes the first (system) message;
//! - message items become messages (`developer` is `system`); their
//!   content is a string or `input_text`/`output_text`/`refusal` parts
//!   (images, files and audio are refused with 400);
//! - `function_call` items become the assistant's tool calls (joined to
//!   the assistant message before them), `function_call_output` items
//!   tool results;
//! - a `reasoning` item's text (its `reasoning_text` content, else its
//!   `summary_text` summary) is the reasoning of the assistant turn that
//!   follows it (the next assistant message or function call), for
//!   templates that render earlier reasoning; one that no assistant turn
//!   follows (a user message or a tool's output comes first) is left out;
//! - the items of the tools svc cannot run (`web_search_call`,
//!   `local_shell_call`, `custom_tool_call`, ...: every other type) are
//!   left out; `item_reference` is refused (svc does not look items up by id);
//! - `reasoning.effort` is the request's reasoning effort;
//! - every input item counts against the bytes a request's input may hold
//!   ([`MAX_MESSAGE_BYTES`] of JSON), those left out of the prompt too,
//!   and a stored response keeps only what the prompt reads
//!   ([`ValidResponseRequest::conversation_input`]), so that items nothing
//!   reads back cost no space;
//! - tools of type `function` are offered to the model; `mcp` tools are
//!   read into [`McpToolRequest`]s (svc lists and calls their servers'
//!   tools, [`crate::tools`]); every other tool type (`web_search`,
//!   `file_search`, `computer_use_preview`, `local_shell`, `custom`, ...)
//!   is hosted by OpenAI, so it is accepted, returned in the response's
//!   `tools`, and left out of the prompt;
//! - an `mcp_call` item is the assistant's call and its result (output or
//!   error); `mcp_list_tools` and `mcp_approval_request` items are kept
//!   for the tool loop (a list reused, a call approved) but not rendered;
//!   `mcp_approval_response` items are read into [`ApprovalAnswer`]s.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use svc_api::responses::{
    CreateResponseRequest, InputContent, InputItem, InputPart, OutputItem, ReasoningConfig,
    ResponseInput, ResponseObject, ResponseTool, ResponseToolChoice, TextFormat,
};

use svc_core::ValidationError;
use svc_core::engine::{
    ChatMessage, GenerateRequest, OutputFormat, Sampling, ToolCallSpec, ToolChoiceSpec, ToolSpec,
    UserPart,
};
use svc_core::limits::{MAX_MESSAGE_BYTES, MAX_MESSAGES, MAX_TOOLS};

use crate::chat::valid::{
    ranged, reasoning_effort, token_cap, tool_choice_mode, valid_function_name,
};
use crate::tools::{MAX_TOOL_CALLS, McpToolRequest, spec};

/// Most `metadata` pairs, as with OpenAI.
pub const MAX_METADATA: usize = 16;
/// Most earlier responses one continuation (`previous_response_id`) reads:
/// every turn adds a message at least, and a prompt holds at most
/// [`MAX_MESSAGES`].
pub const MAX_CONVERSATION_RESPONSES: u64 = MAX_MESSAGES as u64;
/// Most bytes of stored conversation one continuation reads (the items of
/// every earlier turn, as JSON): four times the text a prompt may hold,
/// room for the JSON around it, and what one request body may hold by
/// default. It bounds the memory a continuation takes.
pub const MAX_CONVERSATION_BYTES: u64 = 4 * MAX_MESSAGE_BYTES as u64;
/// Default sampling temperature (as for chat requests).
const DEFAULT_TEMPERATURE: f32 = 0.7;

/// A Responses API request that passed every check. Its messages are not
/// assembled yet: a `previous_response_id` conversation goes between the
/// instructions and the new input ([`ValidResponseRequest::assemble`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ValidResponseRequest {
    pub model: String,
    /// Everything but the messages.
    pub generate: GenerateRequest,
    pub instructions: Option<String>,
    /// The new input items, as given (stored to continue from).
    pub input: Vec<InputItem>,
    pub store: bool,
    pub previous_response_id: Option<String>,
    /// The `mcp` tools: the servers whose tools svc calls.
    pub mcp: Vec<McpToolRequest>,
    /// The most MCP tool calls for this response.
    pub max_tool_calls: u32,
    /// The input's `mcp_approval_response` items.
    pub approvals: Vec<ApprovalAnswer>,
    /// What the response object repeats of the request.
    echo: Echo,
}

/// An `mcp_approval_response` of the input.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalAnswer {
    /// Where it is (`input[0]`), for errors.
    pub param: String,
    pub request_id: String,
    pub approve: bool,
}

#[derive(Debug, Clone, PartialEq)]
struct Echo {
    parallel_tool_calls: bool,
    reasoning: ReasoningConfig,
    text: Value,
    tool_choice: Value,
    tools: Vec<Value>,
    user: Option<String>,
    metadata: BTreeMap<String, String>,
    prompt_cache_key: Option<String>,
}

impl TryFrom<CreateResponseRequest> for ValidResponseRequest {
    type Error = ValidationError;

    fn try_from(req: CreateResponseRequest) -> Result<Self, ValidationError> {
        if req.model.trim().is_empty() {
            return Err(ValidationError::new(
                "model",
                "model must be a non-empty string",
            ));
        }
        let sampling = Sampling {
            temperature: ranged(req.temperature, "temperature", 0.0, 2.0)?
                .unwrap_or(DEFAULT_TEMPERATURE),
            top_p: ranged(req.top_p, "top_p", 0.0, 1.0)?.unwrap_or(1.0),
            ..Sampling::default()
        };
        let max_tokens = req
            .max_output_tokens
            .map(|n| token_cap(n, "max_output_tokens"))
            .transpose()?;
        let echo_tools: Vec<Value> = req
            .tools
            .iter()
            .flatten()
            .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
            .collect();
        let (tools, mcp) = tools(req.tools.unwrap_or_default())?;
        let echo_choice = match &req.tool_choice {
            None => json!("auto"),
            Some(c) => serde_json::to_value(c).unwrap_or(Value::Null),
        };
        let tool_choice = tool_choice(req.tool_choice, &tools, !mcp.is_empty())?;
        let max_tool_calls = match req.max_tool_calls {
            None => MAX_TOOL_CALLS,
            Some(n) => u32::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_TOOL_CALLS)
                .ok_or_else(|| {
                    ValidationError::new(
                        "max_tool_calls",
                        format!("max_tool_calls must be 0 to {MAX_TOOL_CALLS} (got {n})"),
                    )
                })?,
        };
        let format = req.text.as_ref().and_then(|t| t.format.clone());
        let echo_format = match &format {
            None => json!({"type": "text"}),
            Some(f) => serde_json::to_value(f).unwrap_or(Value::Null),
        };
        let output = output_format(format)?;
        let reasoning_effort = reasoning_effort(
            req.reasoning.as_ref().and_then(|r| r.effort.as_deref()),
            "reasoning.effort",
        )?;
        let metadata = req.metadata.unwrap_or_default();
        if metadata.len() > MAX_METADATA {
            return Err(ValidationError::new(
                "metadata",
                format!(
                    "metadata may hold at most {MAX_METADATA} pairs (got {})",
                    metadata.len()
                ),
            ));
        }
        if metadata.iter().any(|(k, v)| k.len() > 64 || v.len() > 512) {
            return Err(ValidationError::new(
                "metadata",
                "metadata keys are at most 64 characters and values at most 512",
            ));
        }
        let input = match req.input {
            None => Vec::new(),
            Some(ResponseInput::Text(text)) => vec![InputItem {
                role: Some("user".into()),
                content: Some(InputContent::Text(text)),
                ..InputItem::default()
            }],
            Some(ResponseInput::Items(items)) => items,
        };
        // Checked now, so that a bad item is a 400 before anything is read.
        input_bytes(&input)?;
        messages(&input, "input")?;
        let approvals = approvals(&input)?;
        if input.is_empty() && req.previous_response_id.is_none() {
            return Err(ValidationError::new(
                "input",
                "input must be a string or a non-empty list of items",
            ));
        }
        let previous_response_id = req.previous_response_id.filter(|id| !id.is_empty());
        Ok(ValidResponseRequest {
            model: req.model,
            generate: GenerateRequest {
                sampling,
                max_tokens,
                tools,
                tool_choice,
                output,
                reasoning_effort,
                stream: req.stream.unwrap_or(false),
                ..GenerateRequest::default()
            },
            instructions: req.instructions,
            input,
            store: req.store.unwrap_or(true),
            previous_response_id,
            mcp,
            max_tool_calls,
            approvals,
            echo: Echo {
                parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
                reasoning: req.reasoning.unwrap_or_default(),
                text: json!({ "format": echo_format }),
                tool_choice: echo_choice,
                tools: echo_tools,
                user: req.user,
                metadata,
                prompt_cache_key: req.prompt_cache_key,
            },
        })
    }
}

impl ValidResponseRequest {
    /// The generation request: the instructions, then the `earlier`
    /// conversation (a previous response's input items and output, see
    /// [`conversation_items`]), then the new input.
    pub fn assemble(&self, earlier: &[InputItem]) -> Result<GenerateRequest, ValidationError> {
        let mut all = Vec::new();
        if let Some(instructions) = &self.instructions {
            all.push(ChatMessage::System(instructions.clone()));
        }
        all.extend(messages_of(earlier, "previous_response_id")?);
        all.extend(messages(&self.input, "input")?);
        let messages = all;
        svc_core::images::within_limit(&messages, "input")?;
        if !messages
            .iter()
            .any(|m| !matches!(m, ChatMessage::System(_)))
        {
            return Err(ValidationError::new(
                "input",
                "the conversation holds no message besides instructions",
            ));
        }
        if messages.len() > MAX_MESSAGES {
            return Err(ValidationError::new(
                "input",
                format!(
                    "the conversation may hold at most {MAX_MESSAGES} messages (got {})",
                    messages.len()
                ),
            ));
        }
        let bytes: usize = messages.iter().map(ChatMessage::text_bytes).sum();
        if bytes > MAX_MESSAGE_BYTES {
            return Err(ValidationError::new(
                "input",
                format!(
                    "the conversation holds {bytes} bytes of text; at most {MAX_MESSAGE_BYTES} are allowed"
                ),
            ));
        }
        Ok(GenerateRequest {
            messages,
            ..self.generate.clone()
        })
    }

    /// The new input items as a stored response keeps them for its
    /// conversation: those the prompt reads (messages, function calls and
    /// their outputs, the reasoning of an assistant turn), each with only
    /// the fields the prompt reads (a reasoning item as its text). The
    /// reasoning no assistant turn follows, the items of hosted tools, ids
    /// and statuses are left out: nothing reads them back (svc lists no
    /// input items), so keeping them would only cost space.
    pub fn conversation_input(&self) -> Vec<InputItem> {
        self.input
            .iter()
            .enumerate()
            .filter_map(|(i, item)| {
                let kind = item_kind(item)?;
                let kept = match kind {
                    "reasoning" if reasoning_reaches_a_turn(&self.input[i + 1..]) => {
                        reasoning_item(reasoning_text(item)?)
                    }
                    "message" => InputItem {
                        role: item.role.clone(),
                        content: item.content.clone(),
                        ..InputItem::default()
                    },
                    "function_call" => InputItem {
                        call_id: item.call_id.clone(),
                        name: item.name.clone(),
                        arguments: item.arguments.clone(),
                        ..InputItem::default()
                    },
                    "function_call_output" => InputItem {
                        call_id: item.call_id.clone(),
                        output: item.output.clone(),
                        ..InputItem::default()
                    },
                    "mcp_call" | "mcp_list_tools" | "mcp_approval_request" => mcp_item(item),
                    _ => return None,
                };
                Some(InputItem {
                    kind: Some(kind.to_owned()),
                    ..kept
                })
            })
            .collect()
    }

    /// The response object before any output: `in_progress`, no usage.
    pub fn response(&self, id: String, created_at: i64) -> ResponseObject {
        ResponseObject {
            id,
            object: "response".into(),
            created_at,
            status: "in_progress".into(),
            error: None,
            incomplete_details: None,
            instructions: self.instructions.clone(),
            max_output_tokens: self.generate.max_tokens,
            model: self.model.clone(),
            output: Vec::new(),
            parallel_tool_calls: self.echo.parallel_tool_calls,
            previous_response_id: self.previous_response_id.clone(),
            reasoning: self.echo.reasoning.clone(),
            store: self.store,
            temperature: round(self.generate.sampling.temperature),
            text: self.echo.text.clone(),
            tool_choice: self.echo.tool_choice.clone(),
            tools: self.echo.tools.clone(),
            top_p: round(self.generate.sampling.top_p),
            truncation: "disabled".into(),
            usage: None,
            user: self.echo.user.clone(),
            metadata: self.echo.metadata.clone(),
            prompt_cache_key: self.echo.prompt_cache_key.clone(),
        }
    }
}

/// An `f32` setting as the decimal it was given as (0.7, not 0.699999988).
fn round(value: f32) -> f64 {
    (f64::from(value) * 1e6).round() / 1e6
}

/// `earlier` items, then `output` as input items: what a response's
/// conversation holds for the next turn. Reasoning items are left out.
pub fn conversation_items(earlier: Vec<InputItem>, output: &[OutputItem]) -> Vec<InputItem> {
    let mut items = earlier;
    for item in output {
        match item {
            OutputItem::Message { content, .. } => items.push(InputItem {
                kind: Some("message".into()),
                role: Some("assistant".into()),
                content: Some(InputContent::Text(
                    content.iter().map(|p| p.text.as_str()).collect(),
                )),
                ..InputItem::default()
            }),
            OutputItem::FunctionCall {
                call_id,
                name,
                arguments,
                ..
            } => items.push(InputItem {
                kind: Some("function_call".into()),
                call_id: Some(call_id.clone()),
                name: Some(name.clone()),
                arguments: Some(arguments.clone()),
                ..InputItem::default()
            }),
            OutputItem::Reasoning { content, .. } => {
                let text: String = content.iter().map(|p| p.text.as_str()).collect();
                if !text.is_empty() {
                    items.push(reasoning_item(text));
                }
            }
            OutputItem::McpListTools {
                server_label,
                tools,
                error,
                ..
            } => items.push(InputItem {
                kind: Some("mcp_list_tools".into()),
                server_label: Some(server_label.clone()),
                tools: Some(
                    tools
                        .iter()
                        .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
                        .collect(),
                ),
                error: error.clone(),
                ..InputItem::default()
            }),
            OutputItem::McpCall {
                id,
                server_label,
                name,
                arguments,
                output,
                error,
                approval_request_id,
                ..
            } => items.push(InputItem {
                kind: Some("mcp_call".into()),
                id: Some(id.clone()),
                server_label: Some(server_label.clone()),
                name: Some(name.clone()),
                arguments: Some(arguments.clone()),
                output: output.clone().map(InputContent::Text),
                error: error.clone(),
                approval_request_id: approval_request_id.clone(),
                ..InputItem::default()
            }),
            OutputItem::McpApprovalRequest {
                id,
                server_label,
                name,
                arguments,
            } => items.push(InputItem {
                kind: Some("mcp_approval_request".into()),
                id: Some(id.clone()),
                server_label: Some(server_label.clone()),
                name: Some(name.clone()),
                arguments: Some(arguments.clone()),
                ..InputItem::default()
            }),
        }
    }
    items
}

/// The messages `output` (a response's so far) adds to its prompt: what
/// the next generation of the tool loop reads after the prompt.
pub fn output_messages(output: &[OutputItem]) -> Result<Vec<ChatMessage>, ValidationError> {
    messages(&conversation_items(Vec::new(), output), "output")
}

/// The tools the last `mcp_list_tools` item of `items` for the server
/// `label` listed, if one did (without an error).
pub fn listed_tools(items: &[InputItem], label: &str) -> Option<Vec<svc_mcp::Tool>> {
    let listed = items.iter().rev().find(|item| {
        item_kind(item) == Some("mcp_list_tools")
            && item.server_label.as_deref() == Some(label)
            && item.error.is_none()
    })?;
    let tools = listed.tools.as_deref().unwrap_or_default();
    Some(
        tools
            .iter()
            .filter_map(|t| {
                serde_json::from_value::<svc_api::responses::McpToolInfo>(t.clone()).ok()
            })
            .map(|t| svc_mcp::Tool {
                name: t.name,
                title: None,
                description: t.description,
                input_schema: t.input_schema,
                output_schema: None,
                annotations: t.annotations,
            })
            .collect(),
    )
}

/// Whether `item` is one the tool loop reads back from a conversation: a
/// tool list, an approval request, or a call made after one.
pub fn is_tool_item(item: &InputItem) -> bool {
    matches!(
        item_kind(item),
        Some("mcp_list_tools" | "mcp_approval_request" | "mcp_call")
    )
}

/// An MCP item as a conversation keeps it: the fields the tool loop and
/// the prompt read.
fn mcp_item(item: &InputItem) -> InputItem {
    InputItem {
        id: item.id.clone(),
        server_label: item.server_label.clone(),
        name: item.name.clone(),
        arguments: item.arguments.clone(),
        output: item.output.clone(),
        error: item.error.clone(),
        tools: item.tools.clone(),
        approval_request_id: item.approval_request_id.clone(),
        ..InputItem::default()
    }
}

/// The input's `mcp_approval_response` items, each with the request it
/// answers and a boolean `approve`.
fn approvals(input: &[InputItem]) -> Result<Vec<ApprovalAnswer>, ValidationError> {
    let mut out = Vec::new();
    for (i, item) in input.iter().enumerate() {
        if item_kind(item) != Some("mcp_approval_response") {
            continue;
        }
        let param = format!("input[{i}]");
        let request_id = required(
            &item.approval_request_id,
            || format!("{param}.approval_request_id"),
            "approval_request_id",
        )?;
        let Some(approve) = item.approve else {
            return Err(ValidationError::new(
                format!("{param}.approve"),
                "an mcp_approval_response needs approve (a boolean)",
            ));
        };
        if out
            .iter()
            .any(|a: &ApprovalAnswer| a.request_id == request_id)
        {
            return Err(ValidationError::new(
                format!("{param}.approval_request_id"),
                format!("the approval request {request_id:?} is answered twice"),
            ));
        }
        out.push(ApprovalAnswer {
            param,
            request_id: request_id.to_owned(),
            approve,
        });
    }
    Ok(out)
}

/// A reasoning item as a conversation keeps it: its text as `reasoning_text`.
fn reasoning_item(text: String) -> InputItem {
    InputItem {
        kind: Some("reasoning".into()),
        content: Some(InputContent::Parts(vec![InputPart {
            kind: "reasoning_text".into(),
            text: Some(text),
            refusal: None,
            image_url: None,
            detail: None,
            file_id: None,
        }])),
        ..InputItem::default()
    }
}

/// An item's `type`: `message` when only a `role` is given; `None` without either.
fn item_kind(item: &InputItem) -> Option<&str> {
    match (&item.kind, &item.role) {
        (Some(kind), _) => Some(kind.as_str()),
        (None, Some(_)) => Some("message"),
        (None, None) => None,
    }
}

/// The text of a reasoning item: its `reasoning_text` content (or a string
/// content), else its `summary_text` summary, paragraphs apart; `None` when
/// it has neither (only encrypted content, which svc cannot read). Parts
/// of other types are skipped.
fn reasoning_text(item: &InputItem) -> Option<String> {
    let of = |parts: &[InputPart], kind: &str, between: &str| {
        parts
            .iter()
            .filter(|p| p.kind == kind)
            .filter_map(|p| p.text.as_deref())
            .collect::<Vec<_>>()
            .join(between)
    };
    let content = match &item.content {
        Some(InputContent::Text(text)) => text.clone(),
        Some(InputContent::Parts(parts)) => of(parts, "reasoning_text", ""),
        None => String::new(),
    };
    if !content.is_empty() {
        return Some(content);
    }
    let summary = of(
        item.summary.as_deref().unwrap_or_default(),
        "summary_text",
        "\n\n",
    );
    (!summary.is_empty()).then_some(summary)
}

/// Whether a reasoning item followed by `rest` is the reasoning of an
/// assistant turn: an assistant message or a function call comes before
/// any other message or a tool's output (other reasoning, and the items
/// left out of the prompt, may come between). As [`messages`] reads it.
fn reasoning_reaches_a_turn(rest: &[InputItem]) -> bool {
    for item in rest {
        match item_kind(item) {
            Some("message") => return item.role.as_deref() == Some("assistant"),
            Some("function_call") => return true,
            Some("function_call_output") => return false,
            _ => {}
        }
    }
    false
}

/// Messages of stored items: they passed [`messages`] when they came, so a
/// failure here is named after where they came from.
fn messages_of(items: &[InputItem], param: &str) -> Result<Vec<ChatMessage>, ValidationError> {
    messages(items, "input").map_err(|e| ValidationError::new(param, e.message))
}

fn tools(
    tools: Vec<ResponseTool>,
) -> Result<(Vec<ToolSpec>, Vec<McpToolRequest>), ValidationError> {
    if tools.len() > MAX_TOOLS {
        return Err(ValidationError::new(
            "tools",
            format!(
                "tools may hold at most {MAX_TOOLS} tools (got {})",
                tools.len()
            ),
        ));
    }
    let mut specs: Vec<ToolSpec> = Vec::new();
    let mut mcp = Vec::new();
    for (i, tool) in tools.into_iter().enumerate() {
        if tool.kind == "mcp" {
            mcp.push(mcp_tool(tool, format!("tools[{i}]"))?);
            continue;
        }
        // Other hosted tool types (web_search, file_search, local_shell,
        // custom, ...) are OpenAI's to run: accepted and left out.
        if tool.kind != "function" {
            continue;
        }
        let name = tool.name.unwrap_or_default();
        if !valid_function_name(&name) {
            return Err(ValidationError::new(
                format!("tools[{i}].name"),
                "function names are 1 to 64 characters of a-z, A-Z, 0-9, _ and -",
            ));
        }
        if specs.iter().any(|s| s.name == name) {
            return Err(ValidationError::new(
                format!("tools[{i}].name"),
                format!("function {name:?} is defined twice"),
            ));
        }
        let parameters = match tool.parameters {
            None => json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p,
            Some(_) => {
                return Err(ValidationError::new(
                    format!("tools[{i}].parameters"),
                    "parameters must be a JSON Schema object",
                ));
            }
        };
        specs.push(ToolSpec {
            name,
            description: tool.description,
            parameters,
        });
    }
    Ok((specs, mcp))
}

/// An `mcp` tool: a registered `server_label`, or one with its
/// `server_url`, and what of it is offered and approved.
fn mcp_tool(tool: ResponseTool, param: String) -> Result<McpToolRequest, ValidationError> {
    if tool.connector_id.is_some() {
        return Err(ValidationError::new(
            format!("{param}.connector_id"),
            "svc has no connectors: give a registered server_label or a server_url",
        ));
    }
    let Some(label) = tool.server_label else {
        return Err(ValidationError::new(
            format!("{param}.server_label"),
            "an mcp tool needs server_label",
        ));
    };
    spec::check_label(&label, &format!("{param}.server_label"))?;
    let url = tool.server_url.filter(|u| !u.is_empty());
    Ok(McpToolRequest {
        headers: spec::headers(tool.headers.as_ref(), tool.authorization.as_deref(), &param)?,
        allowed: spec::allowed_tools(tool.allowed_tools.as_ref(), &param)?,
        approval: spec::require_approval(tool.require_approval.as_ref(), &param)?,
        param,
        label,
        url,
        fields: spec::Fields::OPENAI,
    })
}

/// `tool_choice`, for the function `tools` and, when `mcp`, the tools of
/// MCP servers (listed later: a mode applies to them too).
fn tool_choice(
    choice: Option<ResponseToolChoice>,
    tools: &[ToolSpec],
    mcp: bool,
) -> Result<ToolChoiceSpec, ValidationError> {
    let mode = |mode: Option<&str>| match (mode, mcp) {
        (None | Some("auto"), true) => Ok(ToolChoiceSpec::Auto),
        (Some("required"), true) => Ok(ToolChoiceSpec::Required),
        _ => tool_choice_mode(mode, tools),
    };
    Ok(match choice {
        None => mode(None)?,
        Some(ResponseToolChoice::Mode(m)) => mode(Some(&m))?,
        Some(ResponseToolChoice::Named { kind, name }) => {
            if kind != "function" {
                return Err(ValidationError::new(
                    "tool_choice.type",
                    format!(
                        "tool_choice may name a function tool only: svc cannot run {kind:?} tools"
                    ),
                ));
            }
            let name = name.unwrap_or_default();
            if !tools.iter().any(|t| t.name == name) {
                return Err(ValidationError::new(
                    "tool_choice.name",
                    format!("tool_choice names {name:?}, which is not among the function tools"),
                ));
            }
            ToolChoiceSpec::Function(name)
        }
    })
}

fn output_format(format: Option<TextFormat>) -> Result<OutputFormat, ValidationError> {
    let Some(format) = format else {
        return Ok(OutputFormat::Text);
    };
    Ok(match format.kind.as_str() {
        "text" => OutputFormat::Text,
        "json_object" => OutputFormat::JsonObject,
        "json_schema" => {
            let name = format.name.unwrap_or_default();
            if !valid_function_name(&name) {
                return Err(ValidationError::new(
                    "text.format.name",
                    "schema names are 1 to 64 characters of a-z, A-Z, 0-9, _ and -",
                ));
            }
            let schema = match format.schema {
                Some(s @ Value::Object(_)) => s,
                _ => {
                    return Err(ValidationError::new(
                        "text.format.schema",
                        "schema must be a JSON Schema object",
                    ));
                }
            };
            OutputFormat::JsonSchema { name, schema }
        }
        other => {
            return Err(ValidationError::new(
                "text.format.type",
                format!(
                    "text.format.type must be \"text\", \"json_object\" or \"json_schema\" (got {other:?})"
                ),
            ));
        }
    })
}

/// A user message: its text, or with `input_image` parts its text and
/// images in order (each checked, see [`svc_core::images`]).
fn user_message(content: &InputContent, param: &str) -> Result<ChatMessage, ValidationError> {
    let parts = match content {
        InputContent::Parts(parts) if parts.iter().any(|p| p.kind == "input_image") => parts,
        content => return text(content, param).map(ChatMessage::User),
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let at = format!("{param}[{j}]");
        if part.kind != "input_image" {
            out.push(UserPart::Text(part_text(part, &at)?.to_owned()));
            continue;
        }
        let Some(url) = part.image_url.as_deref() else {
            let message = if part.file_id.is_some() {
                "an input_image by file_id is not served (svc stores no files); give image_url, an https: URL or a data: URI"
            } else {
                "an input_image needs image_url, an https: URL or a data: URI"
            };
            return Err(ValidationError::new(format!("{at}.image_url"), message));
        };
        out.push(UserPart::Image(svc_core::images::image(
            url,
            part.detail.as_deref(),
            &at,
        )?));
    }
    Ok(ChatMessage::UserParts(out))
}

/// The text of a message's content or a call's output.
fn text(content: &InputContent, param: &str) -> Result<String, ValidationError> {
    match content {
        InputContent::Text(text) => Ok(text.clone()),
        InputContent::Parts(parts) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                text.push_str(part_text(part, &format!("{param}[{j}]"))?);
            }
            Ok(text)
        }
    }
}

/// The text of a text part at `at`; any other part is refused, naming its type.
fn part_text<'a>(part: &'a InputPart, at: &str) -> Result<&'a str, ValidationError> {
    let piece = match part.kind.as_str() {
        "input_text" | "output_text" | "text" => part.text.as_deref(),
        "refusal" => part.refusal.as_deref(),
        other => {
            return Err(ValidationError::new(
                format!("{at}.type"),
                format!(
                    "only text content parts (input_text, output_text), and input_image in user messages, are supported (got {other:?})"
                ),
            ));
        }
    };
    piece.ok_or_else(|| {
        ValidationError::new(
            format!("{at}.text"),
            "a text content part needs a text string",
        )
    })
}

fn required<'a>(
    value: &'a Option<String>,
    param: impl FnOnce() -> String,
    what: &str,
) -> Result<&'a str, ValidationError> {
    match value.as_deref() {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(ValidationError::new(
            param(),
            format!("{what} must be a non-empty string"),
        )),
    }
}

/// The bytes `value` takes as JSON, counted without writing it out.
fn json_bytes(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(bytes.len());
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Items are plain strings and lists: writing them cannot fail, and one
    // that did would count as too large.
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

/// Every input item counts against the [`MAX_MESSAGE_BYTES`] a request's
/// input may hold, as the JSON it arrived as (less unknown fields), those
/// the prompt leaves out as well: they are read, checked and answered all
/// the same. The item that goes past the limit is named.
fn input_bytes(items: &[InputItem]) -> Result<(), ValidationError> {
    let mut total = 0usize;
    for (i, item) in items.iter().enumerate() {
        total = total.saturating_add(json_bytes(item));
        if total > MAX_MESSAGE_BYTES {
            return Err(ValidationError::new(
                format!("input[{i}]"),
                format!(
                    "the input items up to this one hold {total} bytes of JSON; at most {MAX_MESSAGE_BYTES} are allowed, items left out of the prompt (reasoning, hosted tools' calls) included"
                ),
            ));
        }
    }
    Ok(())
}

/// The messages `items` make; `param` names the list (`input`).
fn messages(items: &[InputItem], param: &str) -> Result<Vec<ChatMessage>, ValidationError> {
    if items.len() > MAX_MESSAGES {
        return Err(ValidationError::new(
            param,
            format!(
                "{param} may hold at most {MAX_MESSAGES} items (got {})",
                items.len()
            ),
        ));
    }
    let mut out: Vec<ChatMessage> = Vec::new();
    // The reasoning of the assistant turn to come.
    let mut reasoning: Option<String> = None;
    for (i, item) in items.iter().enumerate() {
        let at = |field: &str| format!("{param}[{i}].{field}");
        let Some(kind) = item_kind(item) else {
            return Err(ValidationError::new(
                at("type"),
                "an input item needs a type (or a role, for a message)",
            ));
        };
        match kind {
            "message" => {
                let role = required(&item.role, || at("role"), "role")?;
                let Some(content) = &item.content else {
                    return Err(ValidationError::new(
                        at("content"),
                        "a message needs content",
                    ));
                };
                if role == "user" {
                    out.push(user_message(content, &at("content"))?);
                    // Reasoning no assistant turn followed is not read.
                    reasoning = None;
                    continue;
                }
                let content = text(content, &at("content"))?;
                out.push(match role {
                    "system" | "developer" => {
                        reasoning = None;
                        ChatMessage::System(content)
                    }
                    "assistant" => ChatMessage::Assistant {
                        content: Some(content),
                        tool_calls: Vec::new(),
                        reasoning: reasoning.take(),
                    },
                    other => {
                        return Err(ValidationError::new(
                            at("role"),
                            format!(
                                "role must be \"user\", \"system\", \"developer\" or \"assistant\" (got {other:?})"
                            ),
                        ));
                    }
                });
            }
            "function_call" => {
                let call = ToolCallSpec {
                    id: required(&item.call_id, || at("call_id"), "call_id")?.to_owned(),
                    name: required(&item.name, || at("name"), "name")?.to_owned(),
                    arguments: item.arguments.clone().ok_or_else(|| {
                        ValidationError::new(at("arguments"), "a function call needs arguments")
                    })?,
                };
                // Calls of one turn join the assistant message before them
                // (and so does reasoning between them).
                if let Some(ChatMessage::Assistant {
                    tool_calls,
                    reasoning: before,
                    ..
                }) = out.last_mut()
                {
                    tool_calls.push(call);
                    if let Some(more) = reasoning.take() {
                        *before = Some(join_reasoning(before.take(), more));
                    }
                } else {
                    out.push(ChatMessage::Assistant {
                        content: None,
                        tool_calls: vec![call],
                        reasoning: reasoning.take(),
                    });
                }
            }
            "function_call_output" => {
                let call_id = required(&item.call_id, || at("call_id"), "call_id")?;
                let Some(output) = &item.output else {
                    return Err(ValidationError::new(
                        at("output"),
                        "a function call output needs output",
                    ));
                };
                out.push(ChatMessage::Tool {
                    tool_call_id: call_id.to_owned(),
                    content: text(output, &at("output"))?,
                });
                reasoning = None;
            }
            "mcp_call" => {
                let call = ToolCallSpec {
                    id: required(&item.id, || at("id"), "id")?.to_owned(),
                    name: required(&item.name, || at("name"), "name")?.to_owned(),
                    arguments: item.arguments.clone().unwrap_or_else(|| "{}".into()),
                };
                let result = match (&item.output, &item.error) {
                    (Some(output), _) => text(output, &at("output"))?,
                    (None, Some(error)) => format!("error: {error}"),
                    (None, None) => String::new(),
                };
                let tool_call_id = call.id.clone();
                out.push(ChatMessage::Assistant {
                    content: None,
                    tool_calls: vec![call],
                    reasoning: reasoning.take(),
                });
                out.push(ChatMessage::Tool {
                    tool_call_id,
                    content: result,
                });
            }
            "reasoning" => {
                if let Some(text) = reasoning_text(item) {
                    reasoning = Some(join_reasoning(reasoning.take(), text));
                }
            }
            "item_reference" => {
                return Err(ValidationError::new(
                    at("type"),
                    "item_reference is not supported: send the items themselves, or previous_response_id",
                ));
            }
            // The items of tools svc cannot run have nothing it can render.
            _ => {}
        }
    }
    svc_core::images::within_limit(&out, param)?;
    Ok(out)
}

/// Reasoning `more` after what came `before` of the same turn, a line apart.
fn join_reasoning(before: Option<String>, more: String) -> String {
    match before {
        Some(before) if !before.is_empty() => format!("{before}\n{more}"),
        _ => more,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> Result<ValidResponseRequest, ValidationError> {
        let mut full = json!({"model": "svc", "input": "hi"});
        for (k, v) in body.as_object().unwrap() {
            full[k] = v.clone();
        }
        ValidResponseRequest::try_from(
            serde_json::from_value::<CreateResponseRequest>(full).unwrap(),
        )
    }

    fn param_of(body: Value) -> String {
        request(body).unwrap_err().param
    }

    #[test]
    fn a_string_is_one_user_message_after_the_instructions() {
        let valid = request(json!({"instructions": "Be brief."})).unwrap();
        assert!(valid.store);
        let generate = valid.assemble(&[]).unwrap();
        assert_eq!(
            generate.messages,
            vec![
                ChatMessage::System("Be brief.".into()),
                ChatMessage::User("hi".into())
            ]
        );
        assert_eq!(generate.tool_choice, ToolChoiceSpec::None);
    }

    #[test]
    fn items_as_the_sdk_sends_them_back() {
        let valid = request(json!({"input": [
            {"role": "developer", "content": "sys"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{}", "status": "completed"},
            {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"}
        ]}))
        .unwrap();
        let messages = valid.assemble(&[]).unwrap().messages;
        assert_eq!(
            messages,
            vec![
                ChatMessage::System("sys".into()),
                ChatMessage::User("weather?".into()),
                ChatMessage::Assistant {
                    content: Some("Let me look.".into()),
                    tool_calls: vec![
                        ToolCallSpec {
                            id: "call_1".into(),
                            name: "get_weather".into(),
                            arguments: "{}".into()
                        },
                        ToolCallSpec {
                            id: "call_2".into(),
                            name: "get_time".into(),
                            arguments: "{}".into()
                        },
                    ],
                    // The reasoning item before the assistant message.
                    reasoning: Some("hm".into()),
                },
                ChatMessage::Tool {
                    tool_call_id: "call_1".into(),
                    content: "sunny".into()
                },
                ChatMessage::Tool {
                    tool_call_id: "call_2".into(),
                    content: "noon".into()
                },
            ]
        );
    }

    #[test]
    fn hosted_tools_are_left_out_and_function_tools_kept() {
        let valid = request(json!({"tools": [
            {"type": "web_search"}, {"type": "local_shell"},
            {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
            {"type": "function", "name": "shell", "description": "Run", "strict": false,
             "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}
        ], "tool_choice": "auto"}))
        .unwrap();
        assert_eq!(valid.generate.tools.len(), 1);
        assert_eq!(valid.generate.tools[0].name, "shell");
        assert_eq!(valid.generate.tool_choice, ToolChoiceSpec::Auto);
        let response = valid.response("resp_1".into(), 1);
        assert_eq!(response.tools.len(), 4, "returned as asked");
        assert_eq!(response.temperature, 0.7);
    }

    #[test]
    fn failures_name_their_param() {
        assert_eq!(param_of(json!({"model": " "})), "model");
        assert_eq!(param_of(json!({"input": []})), "input");
        assert_eq!(param_of(json!({"temperature": 3})), "temperature");
        assert_eq!(param_of(json!({"top_p": -1})), "top_p");
        assert_eq!(
            param_of(json!({"max_output_tokens": 0})),
            "max_output_tokens"
        );
        assert_eq!(
            param_of(json!({"input": [{"content": "x"}]})),
            "input[0].type"
        );
        assert_eq!(
            param_of(json!({"input": [{"role": "tool", "content": "x"}]})),
            "input[0].role"
        );
        assert_eq!(
            param_of(
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})
            ),
            "input[0].content[0]"
        );
        assert_eq!(
            param_of(
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}]})
            ),
            "input[0].content[0].image_url"
        );
        assert_eq!(
            param_of(
                json!({"input": [{"role": "system", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]})
            ),
            "input[0].content[0].type"
        );
        let with_image = request(json!({"input": [{"role": "user", "content": [
            {"type": "input_text", "text": "what is"},
            {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "high"}]}]}))
        .unwrap();
        let assembled = with_image.assemble(&[]).unwrap();
        let images: Vec<_> = assembled
            .messages
            .iter()
            .flat_map(ChatMessage::images)
            .collect();
        assert_eq!(images.len(), 1);
        assert_eq!(images[0].url, "https://example.com/a.png");
        assert_eq!(images[0].param, "input[0].content[1]");
        assert_eq!(
            param_of(json!({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})),
            "input[0].call_id"
        );
        assert_eq!(
            param_of(json!({"input": [{"type": "function_call_output", "call_id": "c"}]})),
            "input[0].output"
        );
        assert_eq!(
            param_of(json!({"input": [{"type": "item_reference", "id": "msg_1"}]})),
            "input[0].type"
        );
        assert_eq!(
            param_of(json!({"tools": [{"type": "function", "name": "bad name"}]})),
            "tools[0].name"
        );
        assert_eq!(param_of(json!({"tool_choice": "required"})), "tool_choice");
        assert_eq!(
            param_of(json!({"tools": [{"type": "function", "name": "f"}],
                "tool_choice": {"type": "function", "name": "g"}})),
            "tool_choice.name"
        );
        assert_eq!(
            param_of(json!({"tool_choice": {"type": "web_search_preview"}})),
            "tool_choice.type"
        );
        assert_eq!(
            param_of(json!({"text": {"format": {"type": "xml"}}})),
            "text.format.type"
        );
        assert_eq!(
            param_of(json!({"text": {"format": {"type": "json_schema", "name": "x"}}})),
            "text.format.schema"
        );
        let many: BTreeMap<String, String> =
            (0..17).map(|i| (i.to_string(), String::new())).collect();
        assert_eq!(param_of(json!({"metadata": many})), "metadata");
    }

    #[test]
    fn every_item_counts_against_the_input_limit() {
        let big = "x".repeat(MAX_MESSAGE_BYTES / 2);
        // Alone, an item the prompt leaves out fits; two together do not,
        // and the second is named.
        assert!(
            request(json!({"input": [
                {"type": "web_search_call", "id": big, "status": "completed"},
                {"role": "user", "content": "hi"}
            ]}))
            .is_ok()
        );
        let error = request(json!({"input": [
            {"type": "reasoning", "id": "rs_1", "content": [{"type": "reasoning_text", "text": big}]},
            {"type": "web_search_call", "id": big},
            {"role": "user", "content": "hi"}
        ]}))
        .unwrap_err();
        assert_eq!(error.param, "input[1]");
        assert!(
            error.message.contains(&MAX_MESSAGE_BYTES.to_string()),
            "{}",
            error.message
        );
        // Fields the prompt never reads count too, and so does a string.
        assert_eq!(
            param_of(
                json!({"input": [{"role": "user", "content": "hi", "id": "x".repeat(MAX_MESSAGE_BYTES)}]})
            ),
            "input[0]"
        );
        assert_eq!(
            param_of(json!({"input": "x".repeat(MAX_MESSAGE_BYTES)})),
            "input[0]"
        );
    }

    #[test]
    fn reasoning_items_are_the_reasoning_of_the_assistant_turn_that_follows() {
        let reasoning = |input: Value| -> Vec<Option<String>> {
            request(json!({ "input": input }))
                .unwrap()
                .assemble(&[])
                .unwrap()
                .messages
                .into_iter()
                .filter_map(|m| match m {
                    ChatMessage::Assistant { reasoning, .. } => Some(reasoning),
                    _ => None,
                })
                .collect()
        };
        let summary = |text: &str| {
            json!({"type": "reasoning", "encrypted_content": "x",
            "summary": [{"type": "summary_text", "text": text}]})
        };
        let content = |text: &str| {
            json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "short"}],
            "content": [{"type": "reasoning_text", "text": text}]})
        };
        let assistant = json!({"role": "assistant", "content": "ok"});
        let call = json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"});
        let user = json!({"role": "user", "content": "hi"});
        // Content wins over the summary; a summary alone is read.
        assert_eq!(
            reasoning(json!([user, content("long"), assistant])),
            [Some("long".into())]
        );
        assert_eq!(
            reasoning(json!([user, summary("short"), assistant])),
            [Some("short".into())]
        );
        // Several summary parts are paragraphs; several items lines.
        assert_eq!(
            reasoning(json!([user, {"type": "reasoning", "summary": [
                {"type": "summary_text", "text": "a"}, {"type": "summary_text", "text": "b"}]},
                content("c"), call])),
            [Some("a\n\nb\nc".into())]
        );
        // Encrypted only: nothing to read.
        assert_eq!(
            reasoning(
                json!([user, {"type": "reasoning", "summary": [], "encrypted_content": "x"}, assistant])
            ),
            [None]
        );
        // Reasoning between a message and its calls joins that turn; hosted
        // tools' items between do not part them.
        assert_eq!(
            reasoning(json!([user, content("a"), assistant, content("b"),
                {"type": "web_search_call", "id": "ws"}, call])),
            [Some("a\nb".into())]
        );
        // Reasoning that no assistant turn follows is left out.
        assert_eq!(
            reasoning(json!([user, assistant, content("lost"), user, assistant])),
            [None, None]
        );
        assert_eq!(
            reasoning(json!([user, call, content("lost"),
                {"type": "function_call_output", "call_id": "c", "output": "x"}, assistant])),
            [None, None]
        );
    }

    #[test]
    fn reasoning_effort_is_read_and_an_unknown_one_named() {
        assert_eq!(request(json!({})).unwrap().generate.reasoning_effort, None);
        assert_eq!(
            request(json!({"reasoning": {"summary": "auto"}}))
                .unwrap()
                .generate
                .reasoning_effort,
            None
        );
        for effort in svc_core::ReasoningEffort::ALL {
            let valid = request(json!({"reasoning": {"effort": effort.as_str()}})).unwrap();
            assert_eq!(valid.generate.reasoning_effort, Some(effort));
            assert_eq!(valid.assemble(&[]).unwrap().reasoning_effort, Some(effort));
        }
        assert_eq!(
            param_of(json!({"reasoning": {"effort": "xhigh"}})),
            "reasoning.effort"
        );
    }

    #[test]
    fn a_conversation_keeps_what_the_prompt_reads() {
        let valid = request(json!({"input": [
            {"role": "developer", "content": "sys", "id": "msg_0", "status": "completed"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{}", "status": "completed"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {"type": "function_call_output", "id": "fco_1", "call_id": "call_1", "output": "sunny"},
            {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "no turn follows"}]},
            {"role": "user", "content": "and?"}
        ]}))
        .unwrap();
        let kept = valid.conversation_input();
        assert_eq!(
            serde_json::to_value(&kept).unwrap(),
            json!([
                {"type": "message", "role": "developer", "content": "sys"},
                {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "hm"}]},
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Let me look."}]},
                {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {"type": "message", "role": "user", "content": "and?"}
            ])
        );
        // The same prompt, from what is kept as from what came.
        let continued = request(json!({"input": null, "previous_response_id": "resp_0"})).unwrap();
        assert_eq!(
            continued.assemble(&kept).unwrap().messages,
            valid.assemble(&[]).unwrap().messages
        );
    }

    #[test]
    fn formats_and_named_choices() {
        let valid = request(json!({
            "tools": [{"type": "function", "name": "f"}],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "name": "out", "strict": true,
                                "schema": {"type": "object"}}, "verbosity": "low"},
            "reasoning": {"effort": "high"}, "include": ["reasoning.encrypted_content"],
            "store": false, "prompt_cache_key": "k"
        }))
        .unwrap();
        assert!(!valid.store);
        assert_eq!(
            valid.generate.tool_choice,
            ToolChoiceSpec::Function("f".into())
        );
        assert!(matches!(
            valid.generate.output,
            OutputFormat::JsonSchema { ref name, .. } if name == "out"
        ));
        let response = valid.response("resp_1".into(), 1);
        assert_eq!(response.text["format"]["name"], "out");
        assert_eq!(response.reasoning.effort.as_deref(), Some("high"));
    }

    #[test]
    fn a_previous_conversation_goes_between_instructions_and_input() {
        let valid = request(json!({"instructions": "sys", "input": "again",
            "previous_response_id": "resp_0"}))
        .unwrap();
        let earlier = conversation_items(
            vec![InputItem {
                role: Some("user".into()),
                content: Some(InputContent::Text("first".into())),
                ..InputItem::default()
            }],
            &[
                OutputItem::Reasoning {
                    id: "rs_0".into(),
                    summary: Vec::new(),
                    content: vec![svc_api::responses::ReasoningText::new("hm".into())],
                    status: "completed".into(),
                },
                OutputItem::Message {
                    id: "msg_0".into(),
                    role: "assistant".into(),
                    status: "completed".into(),
                    content: vec![svc_api::responses::OutputText::new("one".into())],
                },
            ],
        );
        let messages = valid.assemble(&earlier).unwrap().messages;
        assert_eq!(
            messages,
            vec![
                ChatMessage::System("sys".into()),
                ChatMessage::User("first".into()),
                ChatMessage::Assistant {
                    content: Some("one".into()),
                    tool_calls: Vec::new(),
                    // The response's own reasoning, carried to the next turn.
                    reasoning: Some("hm".into()),
                },
                ChatMessage::User("again".into()),
            ]
        );
        // Without input, the previous response alone is enough.
        let valid = request(json!({"input": null, "previous_response_id": "resp_0"})).unwrap();
        assert_eq!(valid.assemble(&earlier).unwrap().messages.len(), 2);
        assert_eq!(valid.assemble(&[]).unwrap_err().param, "input");
    }
}
