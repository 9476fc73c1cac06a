//! From Anthropic's Messages request to a validated [`GenerateRequest`]:
//! every range and shape check of `POST /v1/messages` (and of
//! `/v1/messages/count_tokens`), each failure naming the field as a path
//! such as `messages[1].content[0].type`.
//!
//! How the conversation maps onto chat messages: `system` (a string or text
//! blocks, joined by newlines) is one system message, and so is a turn of
//! the `system` role (Claude Code sends them); a user turn's text
//! blocks are one user message and each `tool_result` block a tool message,
//! in order; an assistant turn's text blocks are its content and its
//! `tool_use` blocks its tool calls (`input` serialized as the arguments)
//! and its `thinking` blocks its reasoning (joined by newlines), for
//! templates that render earlier reasoning. `redacted_thinking` blocks
//! (encrypted), and `thinking` blocks in user turns, are accepted and left
//! out of the prompt.
//!
//! `thinking` sets the reasoning effort: `{"type":"enabled"}` by its
//! `budget_tokens` (see [`effort_of_budget`]), `{"type":"disabled"}` effort
//! `none`, `{"type":"adaptive"}` none said (the model's own).
//! Images, documents and every other block type are refused. Tools whose
//! `type` is neither absent nor `custom` (Anthropic's server tools, such
//! as web search or code execution, which svc cannot run) are accepted
//! and left out of the prompt.

use serde_json::Value;
use svc_api::messages::{
    Content, ContentBlockParam, CountTokensRequest, InputMessage, MessagesRequest, MessagesTool,
    MessagesToolChoice, ThinkingConfig,
};

use svc_core::ValidationError;
use svc_core::engine::{
    ChatMessage, GenerateRequest, ImageInput, ReasoningEffort, Sampling, ToolCallSpec,
    ToolChoiceSpec, ToolSpec, UserPart,
};
use svc_core::limits::{MAX_MESSAGE_BYTES, MAX_MESSAGES, MAX_TOOLS};

use crate::tools::McpToolRequest;

/// Most stop sequences a Messages request may give.
pub const MAX_STOP_SEQUENCES: usize = 16;
/// The largest thinking budget that is effort `low` (Anthropic's least
/// budget is 1024 tokens).
pub const LOW_THINKING_BUDGET: i64 = 1024;
/// The largest thinking budget that is effort `medium`; larger is `high`.
pub const MEDIUM_THINKING_BUDGET: i64 = 8192;

/// Whether the reply shows the model's reasoning as `thinking` blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    /// Not asked either way: a reasoning model (`svc-thinking`) shows it.
    Default,
    /// `{"type":"enabled"}` with the effort its budget says, or `adaptive`
    /// (`None`: the model's own): shown when the model reasons.
    Enabled(Option<ReasoningEffort>),
    /// `{"type":"disabled"}`: never shown (effort `none`).
    Disabled,
}

impl Thinking {
    /// The reasoning effort this asks for; `None` when it says none.
    pub fn effort(self) -> Option<ReasoningEffort> {
        match self {
            Thinking::Default => None,
            Thinking::Enabled(effort) => effort,
            Thinking::Disabled => Some(ReasoningEffort::None),
        }
    }
}

/// The effort a thinking budget asks for: up to [`LOW_THINKING_BUDGET`]
/// tokens `low`, up to [`MEDIUM_THINKING_BUDGET`] `medium`, more `high`.
pub fn effort_of_budget(budget_tokens: i64) -> ReasoningEffort {
    if budget_tokens <= LOW_THINKING_BUDGET {
        ReasoningEffort::Low
    } else if budget_tokens <= MEDIUM_THINKING_BUDGET {
        ReasoningEffort::Medium
    } else {
        ReasoningEffort::High
    }
}

/// A Messages request that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidMessagesRequest {
    pub model: String,
    pub thinking: Thinking,
    /// `stop_sequences`, which the route matches itself (to say which one
    /// ended the reply); `generate.stop` is left empty.
    pub stop_sequences: Vec<String>,
    pub generate: GenerateRequest,
    /// The servers of `mcp_servers`, with the tools their `mcp_toolset`
    /// (or `tool_configuration`) offers ([`super::mcp`]).
    pub mcp: Vec<McpToolRequest>,
}

impl TryFrom<MessagesRequest> for ValidMessagesRequest {
    type Error = ValidationError;

    fn try_from(req: MessagesRequest) -> Result<Self, ValidationError> {
        model(&req.model)?;
        let max_tokens = u32::try_from(req.max_tokens)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| {
                ValidationError::new(
                    "max_tokens",
                    format!(
                        "max_tokens must be a positive integer (got {})",
                        req.max_tokens
                    ),
                )
            })?;
        let sampling = Sampling {
            temperature: ranged(req.temperature, "temperature", 0.0, 1.0)?.unwrap_or(1.0),
            top_p: ranged(req.top_p, "top_p", 0.0, 1.0)?.unwrap_or(1.0),
            top_k: match req.top_k {
                None => 0,
                Some(k) => u32::try_from(k).map_err(|_| {
                    ValidationError::new(
                        "top_k",
                        format!("top_k must be a non-negative integer (got {k})"),
                    )
                })?,
            },
            ..Sampling::default()
        };
        let stop_sequences = stop_sequences(req.stop_sequences.unwrap_or_default())?;
        let thinking = thinking(req.thinking.as_ref(), Some(max_tokens))?;
        let mcp = super::mcp::servers(
            req.mcp_servers.unwrap_or_default(),
            req.tools.as_deref().unwrap_or_default(),
        )?;
        let (messages, tools, tool_choice) = conversation(
            req.system,
            req.messages,
            req.tools,
            req.tool_choice,
            !mcp.is_empty(),
        )?;
        Ok(ValidMessagesRequest {
            model: req.model,
            thinking,
            stop_sequences,
            mcp,
            generate: GenerateRequest {
                messages,
                sampling,
                max_tokens: Some(max_tokens),
                tools,
                tool_choice,
                reasoning_effort: thinking.effort(),
                stream: req.stream.unwrap_or(false),
                ..GenerateRequest::default()
            },
        })
    }
}

/// A count_tokens request that passed every check: the model and the
/// request whose prompt is counted.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidCountTokensRequest {
    pub model: String,
    pub generate: GenerateRequest,
}

impl TryFrom<CountTokensRequest> for ValidCountTokensRequest {
    type Error = ValidationError;

    fn try_from(req: CountTokensRequest) -> Result<Self, ValidationError> {
        model(&req.model)?;
        let thinking = thinking(req.thinking.as_ref(), None)?;
        let (messages, tools, tool_choice) =
            conversation(req.system, req.messages, req.tools, req.tool_choice, false)?;
        Ok(ValidCountTokensRequest {
            model: req.model,
            generate: GenerateRequest {
                messages,
                tools,
                tool_choice,
                reasoning_effort: thinking.effort(),
                ..GenerateRequest::default()
            },
        })
    }
}

fn model(model: &str) -> Result<(), ValidationError> {
    if model.trim().is_empty() {
        return Err(ValidationError::new(
            "model",
            "model must be a non-empty string",
        ));
    }
    Ok(())
}

fn ranged(
    value: Option<f64>,
    param: &str,
    min: f64,
    max: f64,
) -> Result<Option<f32>, ValidationError> {
    match value {
        None => Ok(None),
        Some(v) if v.is_finite() && (min..=max).contains(&v) => Ok(Some(v as f32)),
        Some(v) => Err(ValidationError::new(
            param,
            format!("{param} must be between {min} and {max} (got {v})"),
        )),
    }
}

fn stop_sequences(stop: Vec<String>) -> Result<Vec<String>, ValidationError> {
    if stop.len() > MAX_STOP_SEQUENCES {
        return Err(ValidationError::new(
            "stop_sequences",
            format!(
                "stop_sequences may hold at most {MAX_STOP_SEQUENCES} sequences (got {})",
                stop.len()
            ),
        ));
    }
    if let Some(i) = stop.iter().position(String::is_empty) {
        return Err(ValidationError::new(
            format!("stop_sequences[{i}]"),
            "stop sequences must not be empty",
        ));
    }
    Ok(stop)
}

fn thinking(
    config: Option<&ThinkingConfig>,
    max_tokens: Option<u32>,
) -> Result<Thinking, ValidationError> {
    let Some(config) = config else {
        return Ok(Thinking::Default);
    };
    match config.kind.as_str() {
        "disabled" => Ok(Thinking::Disabled),
        "adaptive" => Ok(Thinking::Enabled(None)),
        "enabled" => {
            let budget = config.budget_tokens.ok_or_else(|| {
                ValidationError::new(
                    "thinking.budget_tokens",
                    "thinking of type \"enabled\" needs budget_tokens",
                )
            })?;
            if budget < 1 || max_tokens.is_some_and(|max| budget >= i64::from(max)) {
                return Err(ValidationError::new(
                    "thinking.budget_tokens",
                    format!(
                        "budget_tokens must be a positive integer below max_tokens (got {budget})"
                    ),
                ));
            }
            Ok(Thinking::Enabled(Some(effort_of_budget(budget))))
        }
        other => Err(ValidationError::new(
            "thinking.type",
            format!(
                "thinking type must be \"enabled\", \"disabled\" or \"adaptive\" (got {other:?})"
            ),
        )),
    }
}

/// The system prompt, messages, tools and tool choice as chat messages;
/// `mcp` when MCP servers will offer tools beside `tools`.
fn conversation(
    system: Option<Content>,
    input: Vec<InputMessage>,
    tools: Option<Vec<MessagesTool>>,
    choice: Option<MessagesToolChoice>,
    mcp: bool,
) -> Result<(Vec<ChatMessage>, Vec<ToolSpec>, ToolChoiceSpec), ValidationError> {
    let tools = custom_tools(tools.unwrap_or_default())?;
    let tool_choice = tool_choice(choice, &tools, mcp)?;
    if input.is_empty() {
        return Err(ValidationError::new(
            "messages",
            "messages must contain at least one message",
        ));
    }
    if input.len() > MAX_MESSAGES {
        return Err(ValidationError::new(
            "messages",
            format!(
                "messages may hold at most {MAX_MESSAGES} messages (got {})",
                input.len()
            ),
        ));
    }
    let mut messages = Vec::with_capacity(input.len() + 1);
    let mut bytes = 0usize;
    if let Some(system) = system {
        let text = text_of(system, "system")?;
        bytes += text.len();
        if !text.is_empty() {
            messages.push(ChatMessage::System(text));
        }
    }
    for (i, message) in input.into_iter().enumerate() {
        let param = format!("messages[{i}].content");
        let blocks = match message.content {
            Content::Text(text) => vec![ContentBlockParam {
                kind: "text".into(),
                text: Some(text),
                ..ContentBlockParam::default()
            }],
            Content::Blocks(blocks) => blocks,
        };
        match message.role.as_str() {
            "user" => user_turn(blocks, &param, &mut messages, &mut bytes)?,
            "assistant" => assistant_turn(blocks, &param, &mut messages, &mut bytes)?,
            // A system message among the turns (Claude Code sends them).
            "system" => {
                let text = text_of(Content::Blocks(blocks), &param)?;
                bytes += text.len();
                messages.push(ChatMessage::System(text));
            }
            other => {
                return Err(ValidationError::new(
                    format!("messages[{i}].role"),
                    format!("role must be \"user\", \"assistant\" or \"system\" (got {other:?})"),
                ));
            }
        }
    }
    svc_core::images::within_limit(&messages, "messages")?;
    if bytes > MAX_MESSAGE_BYTES {
        return Err(ValidationError::new(
            "messages",
            format!(
                "the messages hold {bytes} bytes of text; at most {MAX_MESSAGE_BYTES} are allowed"
            ),
        ));
    }
    Ok((messages, tools, tool_choice))
}

/// An `image` block's image, from its `source` (checked, see [`svc_core::images`]).
fn image(source: Option<&Value>, param: &str) -> Result<ImageInput, ValidationError> {
    let at = format!("{param}.source");
    let invalid = |message: &str| ValidationError::new(at.clone(), message);
    let source = source.ok_or_else(|| invalid("an image block needs a source"))?;
    let field = |name: &str| source.get(name).and_then(Value::as_str);
    match field("type") {
        Some("base64") => {
            let (Some(media_type), Some(data)) = (field("media_type"), field("data")) else {
                return Err(invalid("a base64 image source needs media_type and data"));
            };
            svc_core::images::base64_image(media_type, data, param)
        }
        Some("url") => {
            let url = field("url").ok_or_else(|| invalid("a url image source needs a url"))?;
            svc_core::images::image(url, None, param)
        }
        _ => Err(invalid(
            "an image source's type must be \"base64\" or \"url\" (files are not stored by svc)",
        )),
    }
}

fn refused(kind: &str) -> String {
    match kind {
        "document" | "search_result" | "container_upload" => format!(
            "content blocks of type {kind:?} are not supported: this service reads text only"
        ),
        other => format!(
            "content block type must be \"text\", \"tool_use\", \"tool_result\", \"thinking\" or \"redacted_thinking\" (got {other:?})"
        ),
    }
}

fn block_text(block: ContentBlockParam, param: &str) -> Result<String, ValidationError> {
    block.text.ok_or_else(|| {
        ValidationError::new(format!("{param}.text"), "a text block needs a text string")
    })
}

/// Text blocks (and only those) as one string, joined by newlines.
fn text_of(content: Content, param: &str) -> Result<String, ValidationError> {
    match content {
        Content::Text(text) => Ok(text),
        Content::Blocks(blocks) => {
            let mut parts = Vec::with_capacity(blocks.len());
            for (j, block) in blocks.into_iter().enumerate() {
                let param = format!("{param}[{j}]");
                if block.kind != "text" {
                    return Err(ValidationError::new(
                        format!("{param}.type"),
                        if block.kind == "image" || block.kind == "document" {
                            refused(&block.kind)
                        } else {
                            format!("only text blocks are allowed here (got {:?})", block.kind)
                        },
                    ));
                }
                parts.push(block_text(block, &param)?);
            }
            Ok(parts.join("\n"))
        }
    }
}

fn user_turn(
    blocks: Vec<ContentBlockParam>,
    param: &str,
    messages: &mut Vec<ChatMessage>,
    bytes: &mut usize,
) -> Result<(), ValidationError> {
    // Text blocks joined by newlines, and images where they are.
    let mut text: Vec<UserPart> = Vec::new();
    let flush =
        |text: &mut Vec<UserPart>, messages: &mut Vec<ChatMessage>| match std::mem::take(text)
            .as_slice()
        {
            [] => {}
            [UserPart::Text(only)] => messages.push(ChatMessage::User(only.clone())),
            parts => messages.push(ChatMessage::UserParts(parts.to_vec())),
        };
    for (j, block) in blocks.into_iter().enumerate() {
        let param = format!("{param}[{j}]");
        match block.kind.as_str() {
            "text" => {
                let t = block_text(block, &param)?;
                *bytes += t.len();
                match text.last_mut() {
                    Some(UserPart::Text(last)) => {
                        last.push('\n');
                        last.push_str(&t);
                    }
                    _ => text.push(UserPart::Text(t)),
                }
            }
            "image" => text.push(UserPart::Image(image(block.source.as_ref(), &param)?)),
            "tool_result" => {
                flush(&mut text, messages);
                let tool_call_id = block.tool_use_id.ok_or_else(|| {
                    ValidationError::new(
                        format!("{param}.tool_use_id"),
                        "a tool_result block needs tool_use_id",
                    )
                })?;
                let mut content = match block.content {
                    None => String::new(),
                    Some(content) => text_of(content, &format!("{param}.content"))?,
                };
                if block.is_error == Some(true) {
                    content = format!("Error: {content}");
                }
                *bytes += tool_call_id.len() + content.len();
                messages.push(ChatMessage::Tool {
                    tool_call_id,
                    content,
                });
            }
            // Earlier reasoning is not part of svc's prompts.
            "thinking" | "redacted_thinking" => {}
            other => {
                return Err(ValidationError::new(
                    format!("{param}.type"),
                    refused(other),
                ));
            }
        }
    }
    flush(&mut text, messages);
    Ok(())
}

fn assistant_turn(
    blocks: Vec<ContentBlockParam>,
    param: &str,
    messages: &mut Vec<ChatMessage>,
    bytes: &mut usize,
) -> Result<(), ValidationError> {
    let mut text: Vec<String> = Vec::new();
    let mut thinking: Vec<String> = Vec::new();
    let mut tool_calls = Vec::new();
    // Whether an `mcp_tool_result` split the turn: what came before it is
    // a message of its own already.
    let mut split = false;
    for (j, block) in blocks.into_iter().enumerate() {
        let param = format!("{param}[{j}]");
        match block.kind.as_str() {
            "text" => {
                let t = block_text(block, &param)?;
                *bytes += t.len();
                text.push(t);
            }
            // The calls svc made for an earlier reply (`mcp_servers`): the
            // model's call and its result, as a function call and a tool
            // message, the rest of the turn after them.
            "mcp_tool_result" => {
                let tool_call_id = block.tool_use_id.ok_or_else(|| {
                    ValidationError::new(
                        format!("{param}.tool_use_id"),
                        "an mcp_tool_result block needs tool_use_id",
                    )
                })?;
                let mut content = match block.content {
                    None => String::new(),
                    Some(content) => text_of(content, &format!("{param}.content"))?,
                };
                if block.is_error == Some(true) {
                    content = format!("Error: {content}");
                }
                *bytes += tool_call_id.len() + content.len();
                messages.push(assistant_message(&mut text, &mut thinking, &mut tool_calls));
                messages.push(ChatMessage::Tool {
                    tool_call_id,
                    content,
                });
                split = true;
            }
            // An MCP server's tool list: what svc lists anew.
            "mcp_tool_listing" => {}
            "tool_use" | "mcp_tool_use" => {
                let kind = block.kind.as_str();
                let id = block.id.ok_or_else(|| {
                    ValidationError::new(
                        format!("{param}.id"),
                        format!("a {kind} block needs an id"),
                    )
                })?;
                let name = block.name.ok_or_else(|| {
                    ValidationError::new(
                        format!("{param}.name"),
                        format!("a {kind} block needs a name"),
                    )
                })?;
                let arguments = match block.input {
                    None => "{}".to_owned(),
                    Some(input @ Value::Object(_)) => input.to_string(),
                    Some(_) => {
                        return Err(ValidationError::new(
                            format!("{param}.input"),
                            format!("a {kind} block's input must be an object"),
                        ));
                    }
                };
                *bytes += id.len() + name.len() + arguments.len();
                tool_calls.push(ToolCallSpec {
                    id,
                    name,
                    arguments,
                });
            }
            "thinking" => {
                // The turn's reasoning; the signature is not checked.
                if let Some(t) = block.thinking.filter(|t| !t.is_empty()) {
                    *bytes += t.len();
                    thinking.push(t);
                }
            }
            // Encrypted reasoning: nothing svc can read.
            "redacted_thinking" => {}
            other => {
                return Err(ValidationError::new(
                    format!("{param}.type"),
                    refused(other),
                ));
            }
        }
    }
    if !split || !text.is_empty() || !tool_calls.is_empty() || !thinking.is_empty() {
        messages.push(assistant_message(&mut text, &mut thinking, &mut tool_calls));
    }
    Ok(())
}

/// The assistant message of the text, reasoning and calls collected (taken).
fn assistant_message(
    text: &mut Vec<String>,
    thinking: &mut Vec<String>,
    tool_calls: &mut Vec<ToolCallSpec>,
) -> ChatMessage {
    let content = (!text.is_empty() || tool_calls.is_empty()).then(|| text.join("\n"));
    let reasoning = (!thinking.is_empty()).then(|| thinking.join("\n"));
    text.clear();
    thinking.clear();
    ChatMessage::Assistant {
        content,
        tool_calls: std::mem::take(tool_calls),
        reasoning,
    }
}

fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The custom tools, as functions; server tools are left out.
fn custom_tools(tools: Vec<MessagesTool>) -> Result<Vec<ToolSpec>, ValidationError> {
    if tools.len() > MAX_TOOLS {
        return Err(ValidationError::new(
            "tools",
            format!(
                "tools may hold at most {MAX_TOOLS} tools (got {})",
                tools.len()
            ),
        ));
    }
    let mut specs: Vec<ToolSpec> = Vec::with_capacity(tools.len());
    for (i, tool) in tools.into_iter().enumerate() {
        if tool.kind.as_deref().is_some_and(|k| k != "custom") {
            continue;
        }
        if !valid_tool_name(&tool.name) {
            return Err(ValidationError::new(
                format!("tools[{i}].name"),
                "tool names are 1 to 128 characters of a-z, A-Z, 0-9, _ and -",
            ));
        }
        if specs.iter().any(|s| s.name == tool.name) {
            return Err(ValidationError::new(
                format!("tools[{i}].name"),
                format!("tool {:?} is defined twice", tool.name),
            ));
        }
        let parameters = match tool.input_schema {
            Some(schema @ Value::Object(_)) => schema,
            Some(_) => {
                return Err(ValidationError::new(
                    format!("tools[{i}].input_schema"),
                    "input_schema must be a JSON Schema object",
                ));
            }
            None => {
                return Err(ValidationError::new(
                    format!("tools[{i}].input_schema"),
                    "a custom tool needs an input_schema",
                ));
            }
        };
        specs.push(ToolSpec {
            name: tool.name,
            description: tool.description,
            parameters,
        });
    }
    Ok(specs)
}

/// `tool_choice` for the custom `tools` and, when `mcp`, the tools of MCP
/// servers (listed later: a choice of one of those is checked then).
fn tool_choice(
    choice: Option<MessagesToolChoice>,
    tools: &[ToolSpec],
    mcp: bool,
) -> Result<ToolChoiceSpec, ValidationError> {
    let none_offered = tools.is_empty() && !mcp;
    let Some(choice) = choice else {
        return Ok(if none_offered {
            ToolChoiceSpec::None
        } else {
            ToolChoiceSpec::Auto
        });
    };
    let needs_tools = |what: &str| {
        ValidationError::new(
            "tool_choice.type",
            format!("tool_choice {what} requires tools"),
        )
    };
    Ok(match choice.kind.as_str() {
        "none" => ToolChoiceSpec::None,
        "auto" if none_offered => ToolChoiceSpec::None,
        "auto" => ToolChoiceSpec::Auto,
        "any" if none_offered => return Err(needs_tools("\"any\"")),
        "any" => ToolChoiceSpec::Required,
        "tool" => {
            let name = choice.name.ok_or_else(|| {
                ValidationError::new(
                    "tool_choice.name",
                    "tool_choice of type \"tool\" needs a name",
                )
            })?;
            if !mcp && !tools.iter().any(|t| t.name == name) {
                return Err(ValidationError::new(
                    "tool_choice.name",
                    format!("tool_choice names {name:?}, which is not among tools"),
                ));
            }
            ToolChoiceSpec::Function(name)
        }
        other => {
            return Err(ValidationError::new(
                "tool_choice.type",
                format!(
                    "tool_choice type must be \"auto\", \"any\", \"tool\" or \"none\" (got {other:?})"
                ),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(extra: Value) -> Result<ValidMessagesRequest, ValidationError> {
        let mut body = json!({
            "model": "svc",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}],
        });
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let req: MessagesRequest = serde_json::from_value(body).unwrap();
        ValidMessagesRequest::try_from(req)
    }

    fn param_of(extra: Value) -> String {
        request(extra).unwrap_err().param
    }

    #[test]
    fn defaults() {
        let valid = request(json!({})).unwrap();
        assert_eq!(valid.generate.max_tokens, Some(64));
        assert_eq!(valid.generate.sampling.temperature, 1.0);
        assert_eq!(valid.generate.sampling.top_k, 0);
        assert_eq!(valid.generate.tool_choice, ToolChoiceSpec::None);
        assert!(valid.generate.stop.is_empty());
        assert_eq!(valid.thinking, Thinking::Default);
        assert_eq!(
            valid.generate.messages,
            vec![ChatMessage::User("hi".into())]
        );
    }

    #[test]
    fn ranges_name_their_param() {
        assert_eq!(param_of(json!({"temperature": 1.5})), "temperature");
        assert_eq!(param_of(json!({"top_p": -0.1})), "top_p");
        assert_eq!(param_of(json!({"top_k": -1})), "top_k");
        assert_eq!(param_of(json!({"max_tokens": 0})), "max_tokens");
        assert_eq!(
            param_of(json!({"stop_sequences": ["a", ""]})),
            "stop_sequences[1]"
        );
        assert_eq!(param_of(json!({"messages": []})), "messages");
        assert_eq!(
            param_of(json!({"messages": [{"role": "tool", "content": "x"}]})),
            "messages[0].role"
        );
        assert_eq!(
            param_of(json!({"thinking": {"type": "enabled", "budget_tokens": 64}})),
            "thinking.budget_tokens"
        );
        assert_eq!(
            param_of(json!({"tool_choice": {"type": "any"}})),
            "tool_choice.type"
        );
        let valid = request(json!({"top_k": 5, "temperature": 0, "top_p": 0.5})).unwrap();
        assert_eq!(valid.generate.sampling.top_k, 5);
        assert_eq!(valid.generate.sampling.temperature, 0.0);
    }

    #[test]
    fn images_become_image_inputs_and_documents_are_refused_by_path() {
        let valid = request(json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "text", "text": "here"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}}
        ]}]}))
        .unwrap();
        let ChatMessage::UserParts(parts) = &valid.generate.messages[0] else {
            panic!("{:?}", valid.generate.messages);
        };
        assert_eq!(parts[0], UserPart::Text("look\nhere".into()));
        let images: Vec<&ImageInput> = valid.generate.messages[0].images().collect();
        assert_eq!(images[0].url, "data:image/png;base64,AA==");
        assert_eq!(images[0].param, "messages[0].content[2]");
        assert_eq!(images[1].url, "https://example.com/a.jpg");
        for (source, param) in [
            (
                json!({"type": "base64", "media_type": "image/bmp", "data": "AA=="}),
                "messages[0].content[0]",
            ),
            (
                json!({"type": "base64", "media_type": "image/png"}),
                "messages[0].content[0].source",
            ),
            (
                json!({"type": "url", "url": "http://169.254.169.254/x"}),
                "",
            ),
            (
                json!({"type": "url", "url": "gopher://x"}),
                "messages[0].content[0]",
            ),
            (
                json!({"type": "file", "file_id": "f"}),
                "messages[0].content[0].source",
            ),
        ] {
            let result = request(json!({"messages": [{"role": "user", "content": [
                {"type": "image", "source": source}]}]}));
            match result {
                // An address is passed on, never fetched: svc cannot be made to reach it.
                Ok(_) => assert_eq!(param, "", "{source}"),
                Err(err) => assert_eq!(err.param, param, "{source}"),
            }
        }
        let err = request(json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}
        ]}))
        .unwrap_err();
        assert_eq!(err.param, "messages[1].content[0].type");
        let err = request(json!({"system": [{"type": "document", "source": {}}]})).unwrap_err();
        assert_eq!(err.param, "system[0].type");
    }

    #[test]
    fn a_tool_round_trip_maps_onto_chat_messages() {
        let valid = request(json!({
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
                       {"type": "text", "text": "Use tools."}],
            "tools": [
                {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}},
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
            ],
            "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "x"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom", "is_error": true},
                    {"type": "text", "text": "thanks"}
                ]}
            ]
        }))
        .unwrap();
        let g = valid.generate;
        assert_eq!(g.tools.len(), 1, "the server tool is left out");
        assert_eq!(
            g.tool_choice,
            ToolChoiceSpec::Function("get_weather".into())
        );
        assert_eq!(
            g.messages,
            vec![
                ChatMessage::System("Be brief.\nUse tools.".into()),
                ChatMessage::User("weather?".into()),
                ChatMessage::Assistant {
                    content: None,
                    tool_calls: vec![ToolCallSpec {
                        id: "toolu_1".into(),
                        name: "get_weather".into(),
                        arguments: "{\"city\":\"Paris\"}".into()
                    }],
                    // The turn's thinking block.
                    reasoning: Some("hmm".into()),
                },
                ChatMessage::Tool {
                    tool_call_id: "toolu_1".into(),
                    content: "sunny".into()
                },
                ChatMessage::Tool {
                    tool_call_id: "toolu_2".into(),
                    content: "Error: boom".into()
                },
                ChatMessage::User("thanks".into()),
            ]
        );
    }

    #[test]
    fn thinking_is_an_effort_by_its_budget() {
        let effort = |thinking: Value| {
            request(json!({"max_tokens": 20000, "thinking": thinking}))
                .unwrap()
                .generate
                .reasoning_effort
        };
        assert_eq!(request(json!({})).unwrap().generate.reasoning_effort, None);
        for (budget, expected) in [
            (1, ReasoningEffort::Low),
            (LOW_THINKING_BUDGET, ReasoningEffort::Low),
            (LOW_THINKING_BUDGET + 1, ReasoningEffort::Medium),
            (MEDIUM_THINKING_BUDGET, ReasoningEffort::Medium),
            (MEDIUM_THINKING_BUDGET + 1, ReasoningEffort::High),
            (19_999, ReasoningEffort::High),
        ] {
            assert_eq!(
                effort(json!({"type": "enabled", "budget_tokens": budget})),
                Some(expected),
                "{budget}"
            );
        }
        assert_eq!(
            effort(json!({"type": "disabled"})),
            Some(ReasoningEffort::None)
        );
        assert_eq!(effort(json!({"type": "adaptive"})), None);
        assert_eq!(
            param_of(json!({"thinking": {"type": "on"}})),
            "thinking.type"
        );
        // count_tokens reads it the same way.
        let count: CountTokensRequest = serde_json::from_value(json!({"model": "svc",
            "messages": [{"role": "user", "content": "hi"}],
            "thinking": {"type": "enabled", "budget_tokens": 9000}}))
        .unwrap();
        assert_eq!(
            ValidCountTokensRequest::try_from(count)
                .unwrap()
                .generate
                .reasoning_effort,
            Some(ReasoningEffort::High)
        );
    }

    #[test]
    fn an_assistant_turns_thinking_blocks_are_its_reasoning() {
        let valid = request(json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "First,", "signature": "x"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Hello."},
                {"type": "thinking", "thinking": "", "signature": "x"},
                {"type": "thinking", "thinking": "then.", "signature": "x"}
            ]},
            {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "More."}]},
            {"role": "user", "content": [{"type": "thinking", "thinking": "not a turn's", "signature": "x"},
                {"type": "text", "text": "again"}]}
        ]}))
        .unwrap();
        assert_eq!(
            valid.generate.messages,
            vec![
                ChatMessage::User("hi".into()),
                ChatMessage::Assistant {
                    content: Some("Hello.".into()),
                    tool_calls: Vec::new(),
                    reasoning: Some("First,\nthen.".into()),
                },
                ChatMessage::Assistant {
                    content: Some("More.".into()),
                    tool_calls: Vec::new(),
                    reasoning: None,
                },
                ChatMessage::User("again".into()),
            ]
        );
    }

    /// Claude Code sends system turns among the messages; they were refused.
    #[test]
    fn system_turns_are_system_messages() {
        let valid = request(json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}
        ]}))
        .unwrap();
        assert_eq!(
            valid.generate.messages,
            vec![
                ChatMessage::User("hi".into()),
                ChatMessage::System("Be brief.".into())
            ]
        );
    }

    #[test]
    fn tool_choice_forms() {
        let tools = json!([{"name": "f", "input_schema": {"type": "object"}}]);
        let choice = |c: Value| request(json!({"tools": tools, "tool_choice": c}));
        assert_eq!(
            choice(json!({"type": "any"})).unwrap().generate.tool_choice,
            ToolChoiceSpec::Required
        );
        assert_eq!(
            choice(json!({"type": "none"}))
                .unwrap()
                .generate
                .tool_choice,
            ToolChoiceSpec::None
        );
        assert_eq!(
            choice(json!({"type": "auto"}))
                .unwrap()
                .generate
                .tool_choice,
            ToolChoiceSpec::Auto
        );
        assert_eq!(
            choice(json!({"type": "tool", "name": "g"}))
                .unwrap_err()
                .param,
            "tool_choice.name"
        );
        assert_eq!(
            choice(json!({"type": "sometimes"})).unwrap_err().param,
            "tool_choice.type"
        );
        assert_eq!(
            param_of(json!({"tools": [{"name": "f"}]})),
            "tools[0].input_schema"
        );
    }

    #[test]
    fn count_tokens_requests_need_no_max_tokens() {
        let req: CountTokensRequest = serde_json::from_value(json!({
            "model": "svc", "messages": [{"role": "user", "content": "hi"}]
        }))
        .unwrap();
        let valid = ValidCountTokensRequest::try_from(req).unwrap();
        assert_eq!(
            valid.generate.messages,
            vec![ChatMessage::User("hi".into())]
        );
    }
}
