//! From the wire request to a validated [`GenerateRequest`]: every range and
//! shape check of `POST /v1/chat/completions`, each failure naming its
//! `param` the way OpenAI does. The checks the other OpenAI dialects share
//! (sampling, token caps, stop sequences, tool choice) live here too, for
//! [`crate::completions`] and [`crate::responses`] to use.

use serde_json::Value;
use svc_api::{ChatCompletionRequest, Content, Message, ResponseFormat, Stop, ToolChoice};
use svc_core::ValidationError;
use svc_core::engine::{
    ChatMessage, GenerateRequest, OutputFormat, ReasoningEffort, Sampling, ToolCallSpec,
    ToolChoiceSpec, ToolSpec, UserPart,
};
use svc_core::limits::{MAX_MESSAGE_BYTES, MAX_MESSAGES, MAX_TOOLS};

use crate::tools::{McpToolRequest, spec};

/// Most stop sequences a request may give, as with OpenAI.
pub const MAX_STOP_SEQUENCES: usize = 4;
/// Most choices (`n`) a request may ask for, as with OpenAI; an engine may
/// allow fewer.
pub const MAX_CHOICES: u32 = 128;
/// Most alternatives per token (`top_logprobs`), as with OpenAI.
pub const MAX_TOP_LOGPROBS: u8 = 20;

/// A chat request that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidChatRequest {
    pub model: String,
    pub include_usage: bool,
    pub generate: GenerateRequest,
    /// The `mcp` tools: servers whose tools svc calls (svc's extension, as
    /// LiteLLM takes them).
    pub mcp: Vec<McpToolRequest>,
}

impl TryFrom<ChatCompletionRequest> for ValidChatRequest {
    type Error = ValidationError;

    fn try_from(req: ChatCompletionRequest) -> Result<Self, ValidationError> {
        if req.model.trim().is_empty() {
            return Err(ValidationError::new(
                "model",
                "model must be a non-empty string",
            ));
        }
        let stream = req.stream.unwrap_or(false);
        let include_usage = stream_usage(stream, req.stream_options.as_ref())?;
        let n = choices(req.n)?;
        let logprobs = match (req.logprobs.unwrap_or(false), req.top_logprobs) {
            (true, None) => Some(0),
            (true, Some(k)) => Some(
                u8::try_from(k)
                    .ok()
                    .filter(|&k| k <= MAX_TOP_LOGPROBS)
                    .ok_or_else(|| {
                        ValidationError::new(
                            "top_logprobs",
                            format!(
                                "top_logprobs must be between 0 and {MAX_TOP_LOGPROBS} (got {k})"
                            ),
                        )
                    })?,
            ),
            (false, None) => None,
            (false, Some(_)) => {
                return Err(ValidationError::new(
                    "top_logprobs",
                    "top_logprobs is only allowed when logprobs is true",
                ));
            }
        };

        let sampling = sampling(SamplingFields {
            temperature: req.temperature,
            top_p: req.top_p,
            seed: req.seed,
            presence_penalty: req.presence_penalty,
            frequency_penalty: req.frequency_penalty,
        })?;

        let max_tokens = match (req.max_completion_tokens, req.max_tokens) {
            (Some(n), _) => Some(token_cap(n, "max_completion_tokens")?),
            (None, Some(n)) => Some(token_cap(n, "max_tokens")?),
            (None, None) => None,
        };

        let stop = stop_sequences(req.stop)?;
        let (tools, mcp) = tools(req.tools.unwrap_or_default())?;
        if !mcp.is_empty() && n > 1 {
            return Err(ValidationError::new(
                "n",
                "with mcp tools, n must be 1: svc runs one conversation's tool calls",
            ));
        }
        let tool_choice = match (&req.tool_choice, tools.is_empty() && !mcp.is_empty()) {
            // Only MCP tools, listed later: a mode applies to them.
            (None, true) => ToolChoiceSpec::Auto,
            (Some(ToolChoice::Mode(mode)), true) if mode == "auto" => ToolChoiceSpec::Auto,
            (Some(ToolChoice::Mode(mode)), true) if mode == "required" => ToolChoiceSpec::Required,
            _ => tool_choice(req.tool_choice, &tools)?,
        };
        let output = output_format(req.response_format)?;
        let reasoning_effort =
            reasoning_effort(req.reasoning_effort.as_deref(), "reasoning_effort")?;
        let messages = messages(req.messages)?;

        Ok(ValidChatRequest {
            model: req.model,
            include_usage,
            mcp,
            generate: GenerateRequest {
                messages,
                sampling,
                max_tokens,
                stop,
                tools,
                tool_choice,
                output,
                // Set by the model's route (see `Admission::routed`).
                reasoning: false,
                reasoning_effort,
                stream,
                logprobs,
                n,
                // Set where the key is known (the server's pipeline).
                client: None,
                prompt: None,
                background: false,
            },
        })
    }
}

/// Whether a stream ends with a usage chunk (`stream_options.include_usage`);
/// `stream_options` without `stream` is a 400 naming it.
pub(crate) fn stream_usage(
    stream: bool,
    options: Option<&svc_api::StreamOptions>,
) -> Result<bool, ValidationError> {
    if options.is_some() && !stream {
        return Err(ValidationError::new(
            "stream_options",
            "stream_options is only allowed when stream is true",
        ));
    }
    Ok(options.and_then(|o| o.include_usage).unwrap_or(false))
}

/// An OpenAI reasoning effort (`none`, `minimal`, `low`, `medium`, `high`)
/// given at `param`; any other value is a 400 naming it.
pub(crate) fn reasoning_effort(
    value: Option<&str>,
    param: &str,
) -> Result<Option<ReasoningEffort>, ValidationError> {
    value
        .map(|name| {
            ReasoningEffort::parse(name).ok_or_else(|| {
                ValidationError::new(
                    param,
                    format!(
                        "{param} must be \"none\", \"minimal\", \"low\", \"medium\" or \"high\" (got {name:?})"
                    ),
                )
            })
        })
        .transpose()
}

/// `n`: 1 when absent, else 1 to [`MAX_CHOICES`].
pub(crate) fn choices(n: Option<i64>) -> Result<u32, ValidationError> {
    match n {
        None => Ok(1),
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|n| (1..=MAX_CHOICES).contains(n))
            .ok_or_else(|| {
                ValidationError::new(
                    "n",
                    format!("n must be between 1 and {MAX_CHOICES} (got {n})"),
                )
            }),
    }
}

/// The sampling fields of an OpenAI request, as they arrive.
pub(crate) struct SamplingFields {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
}

/// Range-checked sampling settings, svc's defaults where a field is absent.
pub(crate) fn sampling(fields: SamplingFields) -> Result<Sampling, ValidationError> {
    Ok(Sampling {
        temperature: ranged(fields.temperature, "temperature", 0.0, 2.0)?.unwrap_or(0.7),
        top_p: ranged(fields.top_p, "top_p", 0.0, 1.0)?.unwrap_or(1.0),
        top_k: 0,
        // Negative seeds are accepted, as by OpenAI; their bits are the seed.
        seed: fields.seed.map(|s| s as u64),
        presence_penalty: ranged(fields.presence_penalty, "presence_penalty", -2.0, 2.0)?
            .unwrap_or(0.0),
        frequency_penalty: ranged(fields.frequency_penalty, "frequency_penalty", -2.0, 2.0)?
            .unwrap_or(0.0),
    })
}

pub(crate) fn ranged(
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

pub(crate) fn token_cap(n: i64, param: &str) -> Result<u32, ValidationError> {
    u32::try_from(n).ok().filter(|&n| n >= 1).ok_or_else(|| {
        ValidationError::new(
            param,
            format!("{param} must be a positive integer (got {n})"),
        )
    })
}

pub(crate) fn stop_sequences(stop: Option<Stop>) -> Result<Vec<String>, ValidationError> {
    let stop = match stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    if stop.len() > MAX_STOP_SEQUENCES {
        return Err(ValidationError::new(
            "stop",
            format!(
                "stop may hold at most {MAX_STOP_SEQUENCES} sequences (got {})",
                stop.len()
            ),
        ));
    }
    if stop.iter().any(String::is_empty) {
        return Err(ValidationError::new(
            "stop",
            "stop sequences must not be empty",
        ));
    }
    Ok(stop)
}

pub(crate) fn valid_function_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn tools(
    tools: Vec<svc_api::Tool>,
) -> Result<(Vec<ToolSpec>, Vec<McpToolRequest>), ValidationError> {
    if tools.len() > MAX_TOOLS {
        return Err(ValidationError::new(
            "tools",
            format!(
                "tools may hold at most {MAX_TOOLS} functions (got {})",
                tools.len()
            ),
        ));
    }
    let mut specs: Vec<ToolSpec> = Vec::with_capacity(tools.len());
    let mut mcp = Vec::new();
    for (i, tool) in tools.into_iter().enumerate() {
        if tool.kind == "mcp" {
            mcp.push(mcp_tool(tool, i)?);
            continue;
        }
        if tool.kind != "function" {
            return Err(ValidationError::new(
                format!("tools[{i}].type"),
                format!(
                    "tool type must be \"function\" or \"mcp\" (got {:?})",
                    tool.kind
                ),
            ));
        }
        let Some(f) = tool.function else {
            return Err(ValidationError::new(
                format!("tools[{i}].function"),
                "a function tool needs function",
            ));
        };
        if !valid_function_name(&f.name) {
            return Err(ValidationError::new(
                format!("tools[{i}].function.name"),
                "function names are 1 to 64 characters of a-z, A-Z, 0-9, _ and -",
            ));
        }
        if specs.iter().any(|s| s.name == f.name) {
            return Err(ValidationError::new(
                format!("tools[{i}].function.name"),
                format!("function {:?} is defined twice", f.name),
            ));
        }
        let parameters = match f.parameters {
            None => serde_json::json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p,
            Some(_) => {
                return Err(ValidationError::new(
                    format!("tools[{i}].function.parameters"),
                    "parameters must be a JSON Schema object",
                ));
            }
        };
        specs.push(ToolSpec {
            name: f.name,
            description: f.description,
            parameters,
        });
    }
    Ok((specs, mcp))
}

/// An `mcp` tool, as the Responses API's, except that its calls cannot
/// wait for an approval here: `require_approval` is `"never"`, given or
/// not.
fn mcp_tool(tool: svc_api::Tool, i: usize) -> Result<McpToolRequest, ValidationError> {
    let param = format!("tools[{i}]");
    let approval = tool
        .require_approval
        .clone()
        .unwrap_or(Value::from("never"));
    if approval != "never" {
        return Err(ValidationError::new(
            format!("{param}.require_approval"),
            "Chat Completions cannot wait for an approval: use require_approval \"never\", or the Responses API",
        ));
    }
    let fields = spec::OpenAiMcpTool {
        server_label: tool.server_label,
        server_url: tool.server_url,
        headers: tool.headers.as_ref(),
        authorization: tool.authorization.as_deref(),
        allowed_tools: tool.allowed_tools.as_ref(),
        require_approval: Some(&approval),
    };
    spec::openai_mcp_tool(fields, param)
}

fn tool_choice(
    choice: Option<ToolChoice>,
    tools: &[ToolSpec],
) -> Result<ToolChoiceSpec, ValidationError> {
    let spec = match choice {
        None => tool_choice_mode(None, tools)?,
        Some(ToolChoice::Mode(mode)) => tool_choice_mode(Some(&mode), tools)?,
        Some(ToolChoice::Named(named)) => {
            if named.kind != "function" {
                return Err(ValidationError::new(
                    "tool_choice.type",
                    format!(
                        "tool_choice type must be \"function\" (got {:?})",
                        named.kind
                    ),
                ));
            }
            if tools.is_empty() {
                return Err(ValidationError::new(
                    "tool_choice",
                    "tool_choice naming a function requires tools",
                ));
            }
            let name = named.function.name;
            if !tools.iter().any(|t| t.name == name) {
                return Err(ValidationError::new(
                    "tool_choice.function.name",
                    format!("tool_choice names {name:?}, which is not among tools"),
                ));
            }
            ToolChoiceSpec::Function(name)
        }
    };
    Ok(spec)
}

/// What `tool_choice` given as a mode (`none`, `auto`, `required`), or not
/// given (`None`), means with these function `tools`, in chat completions
/// and the Responses API alike: `auto` (the default) with no tools is
/// `none`, and `required` needs tools.
pub(crate) fn tool_choice_mode(
    mode: Option<&str>,
    tools: &[ToolSpec],
) -> Result<ToolChoiceSpec, ValidationError> {
    Ok(match mode {
        None | Some("auto") if tools.is_empty() => ToolChoiceSpec::None,
        None | Some("auto") => ToolChoiceSpec::Auto,
        Some("none") => ToolChoiceSpec::None,
        Some("required") if tools.is_empty() => {
            return Err(ValidationError::new(
                "tool_choice",
                "tool_choice \"required\" requires tools",
            ));
        }
        Some("required") => ToolChoiceSpec::Required,
        Some(other) => {
            return Err(ValidationError::new(
                "tool_choice",
                format!(
                    "tool_choice must be \"none\", \"auto\", \"required\" or a named function (got {other:?})"
                ),
            ));
        }
    })
}

fn output_format(format: Option<ResponseFormat>) -> Result<OutputFormat, ValidationError> {
    Ok(match format {
        None | Some(ResponseFormat::Text) => OutputFormat::Text,
        Some(ResponseFormat::JsonObject) => OutputFormat::JsonObject,
        Some(ResponseFormat::JsonSchema { json_schema }) => {
            if !valid_function_name(&json_schema.name) {
                return Err(ValidationError::new(
                    "response_format.json_schema.name",
                    "schema names are 1 to 64 characters of a-z, A-Z, 0-9, _ and -",
                ));
            }
            let schema = match json_schema.schema {
                None => serde_json::json!({"type": "object"}),
                Some(s @ Value::Object(_)) => s,
                Some(_) => {
                    return Err(ValidationError::new(
                        "response_format.json_schema.schema",
                        "schema must be a JSON Schema object",
                    ));
                }
            };
            OutputFormat::JsonSchema {
                name: json_schema.name,
                schema,
            }
        }
    })
}

fn text(content: Content, param: &str) -> Result<String, ValidationError> {
    match content {
        Content::Text(text) => Ok(text),
        Content::Parts(parts) => {
            let mut text = String::new();
            for (j, part) in parts.into_iter().enumerate() {
                match (part.kind.as_str(), part.text) {
                    ("text", Some(t)) => text.push_str(&t),
                    ("text", None) => {
                        return Err(ValidationError::new(
                            format!("{param}[{j}].text"),
                            "a text content part needs a text string",
                        ));
                    }
                    (other, _) => {
                        return Err(ValidationError::new(
                            format!("{param}[{j}].type"),
                            format!("only text content parts are supported (got {other:?})"),
                        ));
                    }
                }
            }
            Ok(text)
        }
    }
}

/// A user message: its text, or with `image_url` parts its text and
/// images in order (each image checked, see [`svc_core::images`]).
fn user_message(content: Content, param: &str) -> Result<ChatMessage, ValidationError> {
    let parts = match content {
        Content::Parts(parts) if parts.iter().any(|p| p.kind == "image_url") => parts,
        content => return text(content, param).map(ChatMessage::User),
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, part) in parts.into_iter().enumerate() {
        let at = format!("{param}[{j}]");
        match part.kind.as_str() {
            "image_url" => {
                // `{"url": ..., "detail": ...}`; a bare URL string is taken too.
                let (url, detail) = match &part.image_url {
                    Some(Value::String(url)) => (Some(url.as_str()), None),
                    Some(Value::Object(image)) => (
                        image.get("url").and_then(Value::as_str),
                        image.get("detail").and_then(Value::as_str),
                    ),
                    _ => (None, None),
                };
                let url = url.ok_or_else(|| {
                    ValidationError::new(
                        format!("{at}.image_url"),
                        "an image_url part needs image_url.url, an https: URL or a data: URI",
                    )
                })?;
                out.push(UserPart::Image(svc_core::images::image(url, detail, &at)?));
            }
            "text" => out.push(UserPart::Text(part.text.ok_or_else(|| {
                ValidationError::new(
                    format!("{at}.text"),
                    "a text content part needs a text string",
                )
            })?)),
            other => {
                return Err(ValidationError::new(
                    format!("{at}.type"),
                    format!("only text and image_url content parts are supported (got {other:?})"),
                ));
            }
        }
    }
    Ok(ChatMessage::UserParts(out))
}

fn messages(messages: Vec<Message>) -> Result<Vec<ChatMessage>, ValidationError> {
    if messages.is_empty() {
        return Err(ValidationError::new(
            "messages",
            "messages must contain at least one message",
        ));
    }
    if messages.len() > MAX_MESSAGES {
        return Err(ValidationError::new(
            "messages",
            format!(
                "messages may hold at most {MAX_MESSAGES} messages (got {})",
                messages.len()
            ),
        ));
    }
    let messages: Vec<ChatMessage> = messages
        .into_iter()
        .enumerate()
        .map(|(i, message)| {
            let param = format!("messages[{i}].content");
            Ok(match message {
                Message::System { content, .. } | Message::Developer { content, .. } => {
                    ChatMessage::System(text(content, &param)?)
                }
                Message::User { content, .. } => user_message(content, &param)?,
                Message::Assistant {
                    content,
                    tool_calls,
                    reasoning_content,
                    reasoning,
                    ..
                } => {
                    let content = content.map(|c| text(c, &param)).transpose()?;
                    let tool_calls = tool_calls.unwrap_or_default();
                    if content.is_none() && tool_calls.is_empty() {
                        return Err(ValidationError::new(
                            param,
                            "an assistant message needs content or tool_calls",
                        ));
                    }
                    let tool_calls = tool_calls
                        .into_iter()
                        .enumerate()
                        .map(|(k, call)| {
                            if call.kind != "function" {
                                return Err(ValidationError::new(
                                    format!("messages[{i}].tool_calls[{k}].type"),
                                    "tool call type must be \"function\"",
                                ));
                            }
                            Ok(ToolCallSpec {
                                id: call.id,
                                name: call.function.name,
                                arguments: call.function.arguments,
                            })
                        })
                        .collect::<Result<_, _>>()?;
                    ChatMessage::Assistant {
                        content,
                        tool_calls,
                        // DeepSeek's name first, then vLLM's; an empty one is none.
                        reasoning: reasoning_content.or(reasoning).filter(|r| !r.is_empty()),
                    }
                }
                Message::Tool {
                    content,
                    tool_call_id,
                } => ChatMessage::Tool {
                    tool_call_id,
                    content: text(content, &param)?,
                },
            })
        })
        .collect::<Result<_, _>>()?;
    svc_core::images::within_limit(&messages, "messages")?;
    let bytes: usize = messages.iter().map(ChatMessage::text_bytes).sum();
    if bytes > MAX_MESSAGE_BYTES {
        return Err(ValidationError::new(
            "messages",
            format!(
                "the messages hold {bytes} bytes of text; at most {MAX_MESSAGE_BYTES} are allowed"
            ),
        ));
    }
    Ok(messages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(extra: Value) -> Result<ValidChatRequest, ValidationError> {
        let mut body = serde_json::json!({
            "model": "svc",
            "messages": [{"role": "user", "content": "hi"}],
        });
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let req: ChatCompletionRequest = serde_json::from_value(body).unwrap();
        ValidChatRequest::try_from(req)
    }

    fn param_of(extra: Value) -> String {
        request(extra).unwrap_err().param
    }

    #[test]
    fn defaults() {
        let valid = request(serde_json::json!({})).unwrap();
        assert!(!valid.generate.stream);
        assert_eq!(valid.generate.sampling.temperature, 0.7);
        assert_eq!(valid.generate.max_tokens, None);
        assert_eq!(valid.generate.tool_choice, ToolChoiceSpec::None);
        assert_eq!(
            valid.generate.messages,
            vec![ChatMessage::User("hi".into())]
        );
    }

    #[test]
    fn ranges_name_their_param() {
        use serde_json::json;
        assert_eq!(param_of(json!({"temperature": 2.5})), "temperature");
        assert_eq!(param_of(json!({"temperature": -0.1})), "temperature");
        assert_eq!(param_of(json!({"top_p": 1.5})), "top_p");
        assert_eq!(param_of(json!({"presence_penalty": 3})), "presence_penalty");
        assert_eq!(
            param_of(json!({"frequency_penalty": -3})),
            "frequency_penalty"
        );
        assert_eq!(param_of(json!({"max_tokens": 0})), "max_tokens");
        assert_eq!(
            param_of(json!({"max_completion_tokens": -5})),
            "max_completion_tokens"
        );
        assert_eq!(param_of(json!({"n": 0})), "n");
        assert_eq!(param_of(json!({"n": 129})), "n");
        assert_eq!(param_of(json!({"top_logprobs": 2})), "top_logprobs");
        assert_eq!(
            param_of(json!({"logprobs": false, "top_logprobs": 0})),
            "top_logprobs"
        );
        assert_eq!(
            param_of(json!({"logprobs": true, "top_logprobs": 21})),
            "top_logprobs"
        );
        assert_eq!(
            param_of(json!({"logprobs": true, "top_logprobs": -1})),
            "top_logprobs"
        );
        assert_eq!(param_of(json!({"stop": ["a", "b", "c", "d", "e"]})), "stop");
        assert_eq!(
            param_of(json!({"stream_options": {"include_usage": true}})),
            "stream_options"
        );
        assert_eq!(param_of(json!({"messages": []})), "messages");
        assert_eq!(param_of(json!({"tool_choice": "required"})), "tool_choice");
        assert!(request(json!({"temperature": 2, "top_p": 0, "n": 1})).is_ok());
    }

    #[test]
    fn reasoning_effort_reaches_the_engine_and_an_unknown_one_is_named() {
        use serde_json::json;
        assert_eq!(request(json!({})).unwrap().generate.reasoning_effort, None);
        assert_eq!(
            request(json!({"reasoning_effort": null}))
                .unwrap()
                .generate
                .reasoning_effort,
            None
        );
        for effort in ReasoningEffort::ALL {
            let valid = request(json!({"reasoning_effort": effort.as_str()})).unwrap();
            assert_eq!(valid.generate.reasoning_effort, Some(effort));
        }
        for bad in ["extreme", "HIGH", ""] {
            let err = request(json!({"reasoning_effort": bad})).unwrap_err();
            assert_eq!(err.param, "reasoning_effort");
            assert!(err.message.contains("\"medium\""), "{}", err.message);
        }
    }

    #[test]
    fn an_assistant_turns_reasoning_comes_back_under_either_name() {
        use serde_json::json;
        let history = |assistant: Value| {
            let valid = request(json!({"messages": [
                {"role": "user", "content": "hi"},
                assistant,
                {"role": "user", "content": "again"}
            ]}))
            .unwrap();
            valid.generate.messages[1].clone()
        };
        let reasoning_of = |message: ChatMessage| match message {
            ChatMessage::Assistant { reasoning, .. } => reasoning,
            other => panic!("not an assistant message: {other:?}"),
        };
        assert_eq!(
            history(
                json!({"role": "assistant", "content": "Hello.", "reasoning_content": "Greet back."})
            ),
            ChatMessage::Assistant {
                content: Some("Hello.".into()),
                tool_calls: Vec::new(),
                reasoning: Some("Greet back.".into()),
            }
        );
        assert_eq!(
            reasoning_of(history(
                json!({"role": "assistant", "content": "Hello.", "reasoning": "vLLM's name."})
            )),
            Some("vLLM's name.".into())
        );
        assert_eq!(
            reasoning_of(history(json!({"role": "assistant", "content": "Hello.",
                "reasoning_content": "first", "reasoning": "second"}))),
            Some("first".into()),
            "reasoning_content wins"
        );
        assert_eq!(
            reasoning_of(history(
                json!({"role": "assistant", "content": "Hello.", "reasoning_content": ""})
            )),
            None
        );
        assert_eq!(
            reasoning_of(history(json!({"role": "assistant", "content": "Hello."}))),
            None
        );
    }

    #[test]
    fn logprobs_and_n_reach_the_engine() {
        use serde_json::json;
        let valid = request(json!({})).unwrap();
        assert_eq!((valid.generate.logprobs, valid.generate.n), (None, 1));
        let valid = request(json!({"logprobs": true, "n": 3})).unwrap();
        assert_eq!((valid.generate.logprobs, valid.generate.n), (Some(0), 3));
        let valid = request(json!({"logprobs": true, "top_logprobs": 20, "n": 128})).unwrap();
        assert_eq!((valid.generate.logprobs, valid.generate.n), (Some(20), 128));
        let valid = request(json!({"logprobs": false})).unwrap();
        assert_eq!(valid.generate.logprobs, None);
    }

    #[test]
    fn message_count_and_text_are_bounded() {
        use serde_json::json;
        let many: Vec<Value> = (0..MAX_MESSAGES + 1)
            .map(|_| json!({"role": "user", "content": "hi"}))
            .collect();
        let err = request(json!({ "messages": many })).unwrap_err();
        assert_eq!(err.param, "messages");
        assert!(err.message.contains("at most 2048"), "{}", err.message);
        let enough: Vec<Value> = (0..MAX_MESSAGES)
            .map(|_| json!({"role": "user", "content": "hi"}))
            .collect();
        assert!(request(json!({ "messages": enough })).is_ok());

        let half = "x".repeat(MAX_MESSAGE_BYTES / 2);
        let err = request(json!({"messages": [
            {"role": "system", "content": half},
            {"role": "user", "content": format!("{half}!")}
        ]}))
        .unwrap_err();
        assert_eq!(err.param, "messages");
        assert!(request(json!({"messages": [{"role": "user", "content": half}]})).is_ok());
    }

    #[test]
    fn max_completion_tokens_wins() {
        let valid =
            request(serde_json::json!({"max_tokens": 5, "max_completion_tokens": 7})).unwrap();
        assert_eq!(valid.generate.max_tokens, Some(7));
    }

    #[test]
    fn content_parts_join_and_images_are_checked_where_they_are() {
        let valid = request(
            serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}),
        )
        .unwrap();
        assert_eq!(
            valid.generate.messages,
            vec![ChatMessage::User("ab".into())]
        );
        let png = "data:image/png;base64,iVBORw0KGgo=";
        let with_image = request(serde_json::json!({"messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [
                {"type": "text", "text": "what is"},
                {"type": "image_url", "image_url": {"url": png, "detail": "low"}},
                {"type": "text", "text": "this?"}]}]}))
        .unwrap();
        let ChatMessage::UserParts(parts) = &with_image.generate.messages[1] else {
            panic!("{:?}", with_image.generate.messages);
        };
        assert_eq!(parts.len(), 3);
        let UserPart::Image(image) = &parts[1] else {
            panic!("{parts:?}");
        };
        assert_eq!(image.url, png);
        assert_eq!(image.detail.as_deref(), Some("low"));
        assert_eq!(image.param, "messages[1].content[1]");
        // A URL that is not one svc passes on, a broken data URI, and an
        // image outside a user message are each named.
        for (content, param) in [
            (
                serde_json::json!([{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]),
                "messages[0].content[0]",
            ),
            (
                serde_json::json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}]),
                "messages[0].content[0]",
            ),
            (
                serde_json::json!([{"type": "image_url", "image_url": {}}]),
                "messages[0].content[0].image_url",
            ),
            (
                serde_json::json!([{"type": "image_url", "image_url": {"url": png}}, {"type": "input_audio"}]),
                "messages[0].content[1].type",
            ),
        ] {
            let err =
                request(serde_json::json!({"messages": [{"role": "user", "content": content}]}))
                    .unwrap_err();
            assert_eq!(err.param, param, "{content}");
        }
        let err = request(
            serde_json::json!({"messages": [{"role": "system", "content": [
            {"type": "image_url", "image_url": {"url": png}}]}]}),
        )
        .unwrap_err();
        assert_eq!(err.param, "messages[0].content[0].type");
        let many: Vec<serde_json::Value> = (0..=svc_core::images::MAX_IMAGES)
            .map(|_| serde_json::json!({"type": "image_url", "image_url": {"url": png}}))
            .collect();
        let err = request(serde_json::json!({"messages": [{"role": "user", "content": many}]}))
            .unwrap_err();
        assert_eq!(err.param, "messages");
        // A number is not a type name (serde would read it as a variant index).
        assert!(
            serde_json::from_value::<ChatCompletionRequest>(serde_json::json!({"model": "m",
            "messages": [{"role": "user", "content": [{"type": 0, "text": "a"}]}]}))
            .is_err()
        );
        let err = request(
            serde_json::json!({"messages": [{"role": "user", "content": [
            {"type": "text"}]}]}),
        )
        .unwrap_err();
        assert_eq!(err.param, "messages[0].content[0].text");
    }

    #[test]
    fn tools_and_choices() {
        use serde_json::json;
        let tools = json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
        let valid = request(json!({"tools": tools, "tool_choice":
            {"type": "function", "function": {"name": "get_weather"}}}))
        .unwrap();
        assert_eq!(
            valid.generate.tool_choice,
            ToolChoiceSpec::Function("get_weather".into())
        );
        assert_eq!(
            param_of(
                json!({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "nope"}}})
            ),
            "tool_choice.function.name"
        );
        assert_eq!(
            param_of(json!({"tools": [{"type": "function", "function": {"name": "bad name"}}]})),
            "tools[0].function.name"
        );
        let valid = request(json!({"tools": tools})).unwrap();
        assert_eq!(valid.generate.tool_choice, ToolChoiceSpec::Auto);
    }

    #[test]
    fn tool_history_is_accepted() {
        let valid = request(serde_json::json!({"messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
        ]}))
        .unwrap();
        assert_eq!(valid.generate.messages.len(), 3);
        assert_eq!(
            valid.generate.messages[2],
            ChatMessage::Tool {
                tool_call_id: "call_1".into(),
                content: "sunny".into()
            }
        );
    }
}
