//! A validated [`GenerateRequest`] as the body of an OpenAI chat request to
//! one upstream: its own model name, streamed with usage asked for when the
//! client streams, else one whole reply (which carries its usage).
//! Only fields every OpenAI-compatible server knows are sent, and optional
//! ones only when they differ from the default, so strict servers (vLLM
//! refuses `tool_choice` without tools, for one) accept the body.
//!
//! The request's reasoning effort goes as `reasoning_effort` (OpenAI's,
//! vLLM's and Ollama's name), only when the client gave one. The reasoning
//! of earlier assistant turns is not sent: OpenAI refuses unknown message
//! fields, and servers disagree on the field's name (`reasoning_content`,
//! `reasoning`) and on whether it may be sent back at all, so the
//! upstream's own template sees the turns without it.

use serde::Serialize;
use serde_json::Value;
use svc_core::{
    ChatMessage, GenerateRequest, OutputFormat, ReasoningEffort, TextPrompt, ToolChoiceSpec,
    UserPart,
};

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<Message<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    temperature: f32,
    top_p: f32,
    /// vLLM's, llama.cpp's and Ollama's `top_k`; sent only when set, since
    /// OpenAI itself refuses unknown fields.
    #[serde(skip_serializing_if = "is_zero_u32")]
    top_k: u32,
    #[serde(skip_serializing_if = "is_zero")]
    presence_penalty: f32,
    #[serde(skip_serializing_if = "is_zero")]
    frequency_penalty: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    stop: &'a [String],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<Value>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    logprobs: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_logprobs: Option<u8>,
    /// Only when the client gave one (models that do not reason refuse it
    /// at OpenAI).
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
}

fn is_zero(x: &f32) -> bool {
    *x == 0.0
}

fn is_zero_u32(x: &u32) -> bool {
    *x == 0
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Message<'a> {
    System {
        content: &'a str,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

/// A user message's content: its text, or (with images) OpenAI's parts.
#[derive(Serialize)]
#[serde(untagged)]
enum UserContent<'a> {
    Text(&'a str),
    Parts(Vec<Part<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl<'a> },
}

#[derive(Serialize)]
struct ImageUrl<'a> {
    url: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'a str>,
}

fn parts(parts: &[UserPart]) -> Vec<Part<'_>> {
    parts
        .iter()
        .map(|part| match part {
            UserPart::Text(text) => Part::Text { text },
            UserPart::Image(image) => Part::ImageUrl {
                image_url: ImageUrl {
                    url: &image.url,
                    detail: image.detail.as_deref(),
                },
            },
        })
        .collect()
}

#[derive(Serialize)]
struct ToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionCall<'a>,
}

#[derive(Serialize)]
struct FunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    parameters: &'a Value,
}

/// A legacy text completion's body (`POST /completions`): the fields every
/// OpenAI-compatible server knows, optional ones only when set.
#[derive(Serialize)]
struct TextBody<'a> {
    model: &'a str,
    prompt: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    suffix: Option<&'a str>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    temperature: f32,
    top_p: f32,
    #[serde(skip_serializing_if = "is_zero")]
    presence_penalty: f32,
    #[serde(skip_serializing_if = "is_zero")]
    frequency_penalty: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<u8>,
}

/// The JSON body asking `model` at an upstream for `request`: a chat
/// completion, or a legacy text completion when the request has a text
/// prompt (see [`path_of`]).
pub fn body(request: &GenerateRequest, model: &str) -> Vec<u8> {
    match &request.prompt {
        Some(prompt) => text_body(request, prompt, model),
        None => chat_body(request, model),
    }
}

/// Which of an endpoint's paths `request` goes to.
pub fn path_of(request: &GenerateRequest) -> Path {
    if request.prompt.is_some() {
        Path::Completions
    } else {
        Path::Chat
    }
}

/// The OpenAI paths a generation is sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Chat,
    Completions,
}

fn text_body(request: &GenerateRequest, prompt: &TextPrompt, model: &str) -> Vec<u8> {
    let body = TextBody {
        model,
        prompt: &prompt.text,
        suffix: prompt.suffix.as_deref(),
        stream: request.stream,
        stream_options: request.stream.then_some(StreamOptions {
            include_usage: true,
        }),
        temperature: request.sampling.temperature,
        top_p: request.sampling.top_p,
        presence_penalty: request.sampling.presence_penalty,
        frequency_penalty: request.sampling.frequency_penalty,
        seed: request.sampling.seed.map(|s| s as i64),
        max_tokens: request.max_tokens,
        stop: &request.stop,
        logprobs: request.logprobs,
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// The JSON body asking `model` at an upstream for `request`'s chat.
fn chat_body(request: &GenerateRequest, model: &str) -> Vec<u8> {
    let messages = request
        .messages
        .iter()
        .map(|m| match m {
            ChatMessage::System(content) => Message::System { content },
            ChatMessage::User(content) => Message::User {
                content: UserContent::Text(content),
            },
            ChatMessage::UserParts(list) => Message::User {
                content: UserContent::Parts(parts(list)),
            },
            // The turn's reasoning is not sent (see the module's doc).
            ChatMessage::Assistant {
                content,
                tool_calls,
                reasoning: _,
            } => Message::Assistant {
                content: content.as_deref(),
                tool_calls: tool_calls
                    .iter()
                    .map(|c| ToolCall {
                        id: &c.id,
                        kind: "function",
                        function: FunctionCall {
                            name: &c.name,
                            arguments: &c.arguments,
                        },
                    })
                    .collect(),
            },
            ChatMessage::Tool {
                tool_call_id,
                content,
            } => Message::Tool {
                tool_call_id,
                content,
            },
        })
        .collect();
    let tools: Vec<Tool<'_>> = request
        .tools
        .iter()
        .map(|t| Tool {
            kind: "function",
            function: Function {
                name: &t.name,
                description: t.description.as_deref(),
                parameters: &t.parameters,
            },
        })
        .collect();
    // `auto` is the default with tools, and without tools no choice is sent.
    let tool_choice = match (&request.tool_choice, tools.is_empty()) {
        (_, true) | (ToolChoiceSpec::Auto, false) => None,
        (ToolChoiceSpec::None, false) => Some(Value::from("none")),
        (ToolChoiceSpec::Required, false) => Some(Value::from("required")),
        (ToolChoiceSpec::Function(name), false) => Some(serde_json::json!({
            "type": "function",
            "function": { "name": name },
        })),
    };
    let response_format = match &request.output {
        OutputFormat::Text => None,
        OutputFormat::JsonObject => Some(serde_json::json!({ "type": "json_object" })),
        OutputFormat::JsonSchema { name, schema } => Some(serde_json::json!({
            "type": "json_schema",
            "json_schema": { "name": name, "schema": schema },
        })),
    };
    let body = Body {
        model,
        messages,
        stream: request.stream,
        // Servers refuse stream_options on a whole request, as OpenAI does.
        stream_options: request.stream.then_some(StreamOptions {
            include_usage: true,
        }),
        temperature: request.sampling.temperature,
        top_p: request.sampling.top_p,
        top_k: request.sampling.top_k,
        presence_penalty: request.sampling.presence_penalty,
        frequency_penalty: request.sampling.frequency_penalty,
        // The client's seed, negative ones included (they are kept as bits).
        seed: request.sampling.seed.map(|s| s as i64),
        max_tokens: request.max_tokens,
        stop: &request.stop,
        tools,
        tool_choice,
        response_format,
        // Passed through; the upstream's content log probabilities come back
        // as svc's own (see `translate`).
        logprobs: request.logprobs.is_some(),
        top_logprobs: request.logprobs.filter(|&k| k > 0),
        reasoning_effort: request.reasoning_effort.map(ReasoningEffort::as_str),
    };
    // Our own types with string keys: serializing cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use svc_core::{Sampling, ToolCallSpec, ToolSpec};

    use super::*;

    fn request() -> GenerateRequest {
        GenerateRequest {
            messages: vec![ChatMessage::User("Hi".into())],
            sampling: Sampling::default(),
            max_tokens: None,
            stop: Vec::new(),
            tools: Vec::new(),
            tool_choice: ToolChoiceSpec::Auto,
            output: OutputFormat::Text,
            reasoning: false,
            stream: true,
            ..GenerateRequest::default()
        }
    }

    fn json_of(request: &GenerateRequest, model: &str) -> Value {
        serde_json::from_slice(&body(request, model)).unwrap()
    }

    #[test]
    fn plain_request_asks_for_a_stream_with_usage() {
        assert_eq!(
            json_of(&request(), "their-model"),
            json!({
                "model": "their-model",
                "messages": [{"role": "user", "content": "Hi"}],
                "stream": true,
                "stream_options": {"include_usage": true},
                "temperature": 0.7,
                "top_p": 1.0,
            })
        );
    }

    #[test]
    fn whole_request_asks_for_a_whole_reply() {
        let mut r = request();
        r.stream = false;
        assert_eq!(
            json_of(&r, "their-model"),
            json!({
                "model": "their-model",
                "messages": [{"role": "user", "content": "Hi"}],
                "stream": false,
                "temperature": 0.7,
                "top_p": 1.0,
            })
        );
    }

    #[test]
    fn every_field_is_translated() {
        let mut r = request();
        r.messages = vec![
            ChatMessage::System("Be brief.".into()),
            ChatMessage::User("Weather in Paris?".into()),
            ChatMessage::Assistant {
                content: None,
                tool_calls: vec![ToolCallSpec {
                    id: "call_1".into(),
                    name: "weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into(),
                }],
                reasoning: None,
            },
            ChatMessage::Tool {
                tool_call_id: "call_1".into(),
                content: "sunny".into(),
            },
            ChatMessage::Assistant {
                content: Some("Sunny.".into()),
                tool_calls: Vec::new(),
                reasoning: None,
            },
        ];
        r.sampling = Sampling {
            temperature: 0.0,
            top_p: 0.5,
            top_k: 40,
            seed: Some(-7i64 as u64),
            presence_penalty: 0.5,
            frequency_penalty: -0.5,
        };
        r.max_tokens = Some(32);
        r.stop = vec!["END".into()];
        r.tools = vec![ToolSpec {
            name: "weather".into(),
            description: Some("Weather by city".into()),
            parameters: json!({"type": "object"}),
        }];
        r.tool_choice = ToolChoiceSpec::Function("weather".into());
        r.output = OutputFormat::JsonSchema {
            name: "w".into(),
            schema: json!({"type": "object"}),
        };
        assert_eq!(
            json_of(&r, "m"),
            json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Weather in Paris?"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function",
                         "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                    {"role": "assistant", "content": "Sunny."},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "temperature": 0.0,
                "top_p": 0.5,
                "top_k": 40,
                "presence_penalty": 0.5,
                "frequency_penalty": -0.5,
                "seed": -7,
                "max_tokens": 32,
                "stop": ["END"],
                "tools": [{"type": "function", "function": {
                    "name": "weather", "description": "Weather by city",
                    "parameters": {"type": "object"}}}],
                "tool_choice": {"type": "function", "function": {"name": "weather"}},
                "response_format": {"type": "json_schema",
                    "json_schema": {"name": "w", "schema": {"type": "object"}}},
            })
        );
    }

    #[test]
    fn the_effort_is_sent_when_given_and_earlier_reasoning_is_not() {
        let mut r = request();
        r.messages = vec![
            ChatMessage::User("Hi".into()),
            ChatMessage::Assistant {
                content: Some("Hello.".into()),
                tool_calls: Vec::new(),
                reasoning: Some("Greet back.".into()),
            },
            ChatMessage::User("Again".into()),
        ];
        let body = json_of(&r, "m");
        assert!(body.get("reasoning_effort").is_none(), "{body}");
        assert_eq!(
            body["messages"][1],
            json!({"role": "assistant", "content": "Hello."})
        );
        for effort in ReasoningEffort::ALL {
            r.reasoning_effort = Some(effort);
            assert_eq!(json_of(&r, "m")["reasoning_effort"], json!(effort.as_str()));
        }
    }

    #[test]
    fn tool_choice_only_with_tools() {
        let mut r = request();
        r.tool_choice = ToolChoiceSpec::Required;
        assert!(json_of(&r, "m").get("tool_choice").is_none());
        r.tools = vec![ToolSpec {
            name: "f".into(),
            description: None,
            parameters: json!({"type": "object"}),
        }];
        assert_eq!(json_of(&r, "m")["tool_choice"], json!("required"));
        r.tool_choice = ToolChoiceSpec::None;
        assert_eq!(json_of(&r, "m")["tool_choice"], json!("none"));
        r.tool_choice = ToolChoiceSpec::Auto;
        assert!(json_of(&r, "m").get("tool_choice").is_none());
        assert!(
            json_of(&r, "m")["tools"][0]["function"]
                .get("description")
                .is_none()
        );
    }

    #[test]
    fn json_object_format() {
        let mut r = request();
        r.output = OutputFormat::JsonObject;
        assert_eq!(
            json_of(&r, "m")["response_format"],
            json!({"type": "json_object"})
        );
    }

    #[test]
    fn prompt_estimate_grows_with_text() {
        let short = svc_core::estimate_tokens(&request());
        let mut r = request();
        r.messages = vec![ChatMessage::User("word ".repeat(100))];
        assert!(svc_core::estimate_tokens(&r) > short + 100);
    }
}
