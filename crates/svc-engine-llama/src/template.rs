//! Chat templates: the Jinja template a GGUF carries in
//! `tokenizer.chat_template`, rendered with minijinja the way Hugging Face
//! `transformers` renders it (`trim_blocks`, `lstrip_blocks`, Python string
//! methods, `raise_exception`, a `tojson` that writes what Python's
//! `json.dumps` writes), so the prompt is the one the model's authors wrote.
//!
//! This module turns typed messages into prompt text; it does not tokenize,
//! and it knows nothing of llama.cpp.

use std::fmt::Write as _;
use std::io;

use minijinja::value::{Kwargs, Serde, Value};
use minijinja::{Environment, Error, ErrorKind};
use serde::Serialize as _;
use serde_json::{Map, Value as Json};
use svc_core::engine::{ChatMessage, EngineError, ToolSpec};

/// The template used when a model carries none: ChatML, as SmolLM2, Qwen and many others use.
pub const CHATML_TEMPLATE: &str = r#"{%- for message in messages %}
{{- '<|im_start|>' + message.role + '\n' }}
{%- if message.content %}{{ message.content }}{% endif %}
{%- if message.tool_calls %}
{%- for call in message.tool_calls %}
{{- '\n<tool_call>\n' + ({"name": call.function.name, "arguments": call.function.arguments} | tojson) + '\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"#;

const TEMPLATE_NAME: &str = "chat";

/// Extra settings for one rendering.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// End with the header of an assistant turn, so the model writes the reply.
    pub add_generation_prompt: bool,
    /// More template variables (for example `enable_thinking`).
    pub extra: Map<String, Json>,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            add_generation_prompt: true,
            extra: Map::new(),
        }
    }
}

/// A compiled chat template with the model's special token texts.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
    from_model: bool,
}

impl ChatTemplate {
    /// Compiles `source`; a missing template or one minijinja cannot compile falls back to ChatML.
    pub fn new(source: Option<&str>, bos_token: &str, eos_token: &str) -> Self {
        if let Some(source) = source {
            match Self::compile(source) {
                Ok(env) => {
                    return ChatTemplate {
                        env,
                        source: source.to_owned(),
                        bos_token: bos_token.to_owned(),
                        eos_token: eos_token.to_owned(),
                        from_model: true,
                    };
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot compile the model's chat template; using ChatML");
                }
            }
        }
        let env = Self::compile(CHATML_TEMPLATE).unwrap_or_else(|_| Environment::new());
        ChatTemplate {
            env,
            source: CHATML_TEMPLATE.to_owned(),
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            from_model: false,
        }
    }

    /// The template text in use.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the template came from the model (not the ChatML fallback).
    pub fn is_from_model(&self) -> bool {
        self.from_model
    }

    /// Renders a conversation, ending with the assistant's turn header.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
    ) -> Result<String, EngineError> {
        self.render_with(messages, tools, &RenderOptions::default())
    }

    /// Renders a conversation with explicit options.
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        options: &RenderOptions,
    ) -> Result<String, EngineError> {
        let mut ctx: Vec<(String, Value)> = vec![
            ("messages".into(), messages_value(messages)),
            (
                "add_generation_prompt".into(),
                Value::from(options.add_generation_prompt),
            ),
            ("bos_token".into(), Value::from(self.bos_token.as_str())),
            ("eos_token".into(), Value::from(self.eos_token.as_str())),
        ];
        if !tools.is_empty() {
            ctx.push((
                "tools".into(),
                Value::from(tools.iter().map(tool_value).collect::<Vec<_>>()),
            ));
        }
        for (k, v) in &options.extra {
            ctx.push((k.clone(), json_value(v)));
        }
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| EngineError::Internal(format!("chat template missing: {e}")))?;
        template
            .render(Value::from_pairs(ctx))
            .map_err(|e| EngineError::InvalidRequest {
                param: Some("messages".into()),
                message: format!(
                    "the model's chat template rejected the messages: {}",
                    e.detail().unwrap_or("template error")
                ),
            })
    }

    fn compile(source: &str) -> Result<Environment<'static>, Error> {
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()?,
        );
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())?;
        Ok(env)
    }
}

/// Messages in the shape chat templates expect: OpenAI's, keys in OpenAI's
/// order, as `transformers` passes them.
fn messages_value(messages: &[ChatMessage]) -> Value {
    let list: Vec<Value> = messages
        .iter()
        .map(|message| match message {
            ChatMessage::System(content) => Value::from_pairs([
                ("role", Value::from("system")),
                ("content", Value::from(content.as_str())),
            ]),
            ChatMessage::User(content) => Value::from_pairs([
                ("role", Value::from("user")),
                ("content", Value::from(content.as_str())),
            ]),
            // The engine refuses images before rendering; the text alone.
            ChatMessage::UserParts(parts) => Value::from_pairs([
                ("role", Value::from("user")),
                ("content", Value::from(ChatMessage::user_text(parts))),
            ]),
            ChatMessage::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let mut m = vec![
                    ("role", Value::from("assistant")),
                    ("content", Value::from(content.clone())),
                ];
                if !tool_calls.is_empty() {
                    let calls: Vec<Value> = tool_calls
                        .iter()
                        .map(|call| {
                            Value::from_pairs([
                                ("id", Value::from(call.id.as_str())),
                                ("type", Value::from("function")),
                                (
                                    "function",
                                    Value::from_pairs([
                                        ("name", Value::from(call.name.as_str())),
                                        ("arguments", arguments_value(&call.arguments)),
                                    ]),
                                ),
                            ])
                        })
                        .collect();
                    m.push(("tool_calls", Value::from(calls)));
                }
                Value::from_pairs(m)
            }
            ChatMessage::Tool {
                tool_call_id,
                content,
            } => {
                let mut m = vec![
                    ("role", Value::from("tool")),
                    ("tool_call_id", Value::from(tool_call_id.as_str())),
                    ("content", Value::from(content.as_str())),
                ];
                // Some templates (Llama 3, Mistral) print the function's name.
                if let Some(name) = tool_name(messages, tool_call_id) {
                    m.push(("name", Value::from(name)));
                }
                Value::from_pairs(m)
            }
        })
        .collect();
    Value::from(list)
}

/// Arguments as an object where they parse as one: templates write them with
/// `| tojson` (Qwen, Hermes) or as they are, and an object reads right both ways.
fn arguments_value(arguments: &str) -> Value {
    match serde_json::from_str::<Json>(arguments) {
        Ok(value @ Json::Object(_)) => json_value(&value),
        _ => Value::from(arguments),
    }
}

/// The function name of the earlier call `id`.
fn tool_name<'m>(messages: &'m [ChatMessage], id: &str) -> Option<&'m str> {
    messages.iter().find_map(|m| match m {
        ChatMessage::Assistant { tool_calls, .. } => tool_calls
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.name.as_str()),
        _ => None,
    })
}

/// A tool in OpenAI's shape: `{"type": "function", "function": {name, description, parameters}}`.
fn tool_value(tool: &ToolSpec) -> Value {
    let mut function = vec![("name", Value::from(tool.name.as_str()))];
    if let Some(description) = &tool.description {
        function.push(("description", Value::from(description.as_str())));
    }
    function.push(("parameters", json_value(&tool.parameters)));
    Value::from_pairs([
        ("type", Value::from("function")),
        ("function", Value::from_pairs(function)),
    ])
}

fn json_value(value: &Json) -> Value {
    Value::from(Serde(value))
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

fn strftime_now(format: String) -> Result<Value, Error> {
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(&format))
        .map_err(|_| Error::new(ErrorKind::InvalidOperation, "invalid strftime format"))?;
    Ok(Value::from(out))
}

/// `tojson` as `transformers` defines it: `json.dumps(x, ensure_ascii=False,
/// indent=indent)`, so `", "` and `": "` between items, and no HTML escaping.
fn tojson(value: &Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match indent {
        Some(indent) => Some(indent),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    // Accepted for compatibility; output is always `ensure_ascii=False`, keys in given order.
    let _: Option<Value> = kwargs.get("ensure_ascii")?;
    let _: Option<Value> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let indent = indent
        .filter(|v| !v.is_none() && !v.is_undefined())
        .map(|v| usize::try_from(v).unwrap_or(2));
    let mut out = Vec::new();
    let written = match indent {
        Some(width) => {
            let pad = vec![b' '; width];
            let mut ser = serde_json::Serializer::with_formatter(
                &mut out,
                serde_json::ser::PrettyFormatter::with_indent(&pad),
            );
            value.serialize(&mut ser)
        }
        None => {
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonSpaced);
            value.serialize(&mut ser)
        }
    };
    written.map_err(|e| {
        Error::new(ErrorKind::InvalidOperation, "cannot serialize to JSON").with_source(e)
    })?;
    let text = String::from_utf8(out)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, "JSON is not UTF-8").with_source(e))?;
    Ok(Value::from_safe_string(text))
}

/// Python's default JSON separators: `", "` and `": "`.
struct PythonSpaced;

impl serde_json::ser::Formatter for PythonSpaced {
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use svc_core::engine::ToolCallSpec;

    /// SmolLM2-Instruct's template, as its GGUF carries it.
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    /// A Qwen2.5-style template with tools, tool calls and tool responses.
    const QWEN_LIKE: &str = r#"{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
    {{- "\n\n# Tools\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content.strip() + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}{{- '\n' + message.content }}{%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}{{- tool_call.arguments | tojson }}{{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {{- '<|im_start|>user\n<tool_response>\n' }}{{- message.content }}{{- '\n</tool_response><|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
"#;

    fn user(s: &str) -> ChatMessage {
        ChatMessage::User(s.into())
    }

    #[test]
    fn smollm2_template_renders_like_transformers() {
        let t = ChatTemplate::new(Some(SMOLLM2), "<|im_start|>", "<|im_end|>");
        assert!(t.is_from_model());
        let out = t
            .render(&[user("What is the capital of France?")], &[])
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn tools_calls_and_tool_results_render() {
        let t = ChatTemplate::new(Some(QWEN_LIKE), "", "<|im_end|>");
        let tools = [ToolSpec {
            name: "get_weather".into(),
            description: Some("Weather in a city".into()),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }];
        let messages = [
            ChatMessage::System("Be brief.".into()),
            user("  Weather in Paris?  "),
            ChatMessage::Assistant {
                content: None,
                tool_calls: vec![ToolCallSpec {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city":"Paris"}"#.into(),
                }],
                reasoning: None,
            },
            ChatMessage::Tool {
                tool_call_id: "call_1".into(),
                content: "18°C".into(),
            },
        ];
        let out = t.render(&messages, &tools).unwrap();
        let expected = concat!(
            "<|im_start|>system\nBe brief.\n\n# Tools\n\n<tools>\n",
            r#"{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {"properties": {"city": {"type": "string"}}, "type": "object"}}}"#,
            "\n</tools><|im_end|>\n",
            "<|im_start|>user\nWeather in Paris?<|im_end|>\n",
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n",
            "<|im_start|>user\n<tool_response>\n18°C\n</tool_response><|im_end|>\n",
            "<|im_start|>assistant\n",
        );
        assert_eq!(out, expected);
    }

    #[test]
    fn raise_exception_is_an_invalid_request() {
        let t = ChatTemplate::new(
            Some(
                "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}",
            ),
            "",
            "",
        );
        let err = t
            .render(&[ChatMessage::System("x".into())], &[])
            .unwrap_err();
        match err {
            EngineError::InvalidRequest { message, .. } => {
                assert!(message.contains("first must be user"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn missing_or_broken_templates_fall_back_to_chatml() {
        for source in [None, Some("{% for %}")] {
            let t = ChatTemplate::new(source, "", "");
            assert!(!t.is_from_model());
            let out = t
                .render(&[ChatMessage::System("S".into()), user("U")], &[])
                .unwrap();
            assert_eq!(
                out,
                "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
            );
        }
    }

    #[test]
    fn tojson_matches_python() {
        let t = ChatTemplate::new(
            Some("{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ s | tojson }}"),
            "",
            "",
        );
        let mut extra = Map::new();
        extra.insert("x".into(), json!({"a": [1, 2.5, null, true], "b": "<é>"}));
        extra.insert("s".into(), json!("quote \" and \n"));
        let out = t
            .render_with(
                &[],
                &[],
                &RenderOptions {
                    add_generation_prompt: false,
                    extra,
                },
            )
            .unwrap();
        assert_eq!(
            out,
            "{\"a\": [1, 2.5, null, true], \"b\": \"<é>\"}|{\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n  \"b\": \"<é>\"\n}|\"quote \\\" and \\n\""
        );
    }

    #[test]
    fn python_string_methods_and_strftime_work() {
        let t = ChatTemplate::new(
            Some("{{ messages[0].content.strip().upper() }}{{ strftime_now('%Y')|length }}"),
            "",
            "",
        );
        assert_eq!(t.render(&[user("  hi ")], &[]).unwrap(), "HI4");
    }
}
