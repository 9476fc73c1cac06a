//! Chat templates: the Jinja template a GGUF carries in
//! `tokenizer.chat_template`, rendered with minijinja the way Hugging Face
//! `transformers` renders it (`trim_blocks`, `lstrip_blocks`, Python string
//! methods, `raise_exception`, a `tojson` that writes what Python's
//! `json.dumps` writes), so the prompt is the one the model's authors wrote.
//!
//! This module turns typed messages into prompt text; it does not tokenize,
//! and it knows nothing of llama.cpp.
//!
//! A template is a program, and `svc pull` brings third parties' ones: a
//! rendering is bounded. It may take [`ChatTemplate::step_limit`] steps
//! (minijinja's fuel, about one per instruction), from a million for a
//! short conversation, at least twice what any real template needs for
//! its messages and tools, and write at most [`MAX_OUTPUT_BYTES`]; a
//! caller's check sees the output as it is written and may stop it sooner
//! (the engine stops a prompt that can no longer fit the context, or whose
//! client went away). A looping template had cost 40 CPU-s a request, one
//! writing 64 MB 104 s and 6.9 GB.

use std::fmt::Write as _;
use std::io;

use chrono::NaiveDateTime;
use minijinja::value::{Kwargs, Rest, Serde, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Output, State};
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

/// How a model that carries no chat template is prompted: the turn format
/// its vocabulary's markers say (`<|start_header_id|>` is Llama 3's,
/// `<start_of_turn>` Gemma's, ...), ChatML when none. Calls in the
/// history are written in Hermes' `<tool_call>` syntax, which the tools'
/// system block asks for (these templates do not render `tools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    ChatMl,
    Llama3,
    Gemma,
    Mistral,
    Phi3,
}

impl Fallback {
    /// The format of a vocabulary: `has(text)` says whether one of its
    /// tokens is `text`.
    pub fn of_vocab(has: impl Fn(&str) -> bool) -> Self {
        if has("<|im_start|>") && has("<|im_end|>") {
            Fallback::ChatMl
        } else if has("<|start_header_id|>") && has("<|eot_id|>") {
            Fallback::Llama3
        } else if has("<start_of_turn>") && has("<end_of_turn>") {
            Fallback::Gemma
        } else if has("<|user|>") && has("<|assistant|>") && has("<|end|>") {
            Fallback::Phi3
        } else if has("[INST]") && has("[/INST]") {
            Fallback::Mistral
        } else {
            Fallback::ChatMl
        }
    }

    /// Its name in the log.
    pub fn name(self) -> &'static str {
        match self {
            Fallback::ChatMl => "chatml",
            Fallback::Llama3 => "llama3",
            Fallback::Gemma => "gemma",
            Fallback::Mistral => "mistral",
            Fallback::Phi3 => "phi3",
        }
    }

    /// The template's source.
    pub fn source(self) -> &'static str {
        match self {
            Fallback::ChatMl => CHATML_TEMPLATE,
            Fallback::Llama3 => LLAMA3_TEMPLATE,
            Fallback::Gemma => GEMMA_TEMPLATE,
            Fallback::Mistral => MISTRAL_TEMPLATE,
            Fallback::Phi3 => PHI3_TEMPLATE,
        }
    }
}

/// A message's text and its calls in Hermes' syntax, as every fallback
/// writes them.
macro_rules! fallback_body {
    () => {
        r#"{%- if message.content %}{{ message.content | trim }}{% endif %}
{%- if message.tool_calls %}
{%- for call in message.tool_calls %}
{{- '\n<tool_call>\n' + ({"name": call.function.name, "arguments": call.function.arguments} | tojson) + '\n</tool_call>' }}
{%- endfor %}
{%- endif %}"#
    };
}

const LLAMA3_TEMPLATE: &str = concat!(
    r#"{{- bos_token }}
{%- for message in messages %}
{{- '<|start_header_id|>' + ('ipython' if message.role == 'tool' else message.role) + '<|end_header_id|>\n\n' }}"#,
    fallback_body!(),
    r#"{{- '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"#
);

/// Gemma has no system role: the system text opens the next user turn.
const GEMMA_TEMPLATE: &str = concat!(
    r#"{{- bos_token }}
{%- set ns = namespace(system='') %}
{%- for message in messages %}
{%- if message.role == 'system' %}{%- set ns.system = ns.system + message.content + '\n\n' %}
{%- else %}
{{- '<start_of_turn>' + ('model' if message.role == 'assistant' else 'user') + '\n' + ns.system }}
{%- set ns.system = '' %}"#,
    fallback_body!(),
    r#"{{- '<end_of_turn>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<start_of_turn>model\n' }}{% endif %}"#
);

/// Mistral's `[INST]` turns: the system text opens the next one.
const MISTRAL_TEMPLATE: &str = concat!(
    r#"{{- bos_token }}
{%- set ns = namespace(system='') %}
{%- for message in messages %}
{%- if message.role == 'system' %}{%- set ns.system = ns.system + message.content + '\n\n' %}
{%- elif message.role == 'assistant' %}
{{- ' ' }}"#,
    fallback_body!(),
    r#"{{- eos_token }}
{%- else %}
{{- '[INST] ' + ns.system + (message.content | trim) + ' [/INST]' }}
{%- set ns.system = '' %}
{%- endif %}
{%- endfor %}"#
);

const PHI3_TEMPLATE: &str = concat!(
    r#"{%- for message in messages %}
{{- '<|' + ('user' if message.role == 'tool' else message.role) + '|>\n' }}"#,
    fallback_body!(),
    r#"{{- '<|end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|assistant|>\n' }}{% endif %}"#
);

const TEMPLATE_NAME: &str = "chat";

/// Template steps any rendering may take: over 800 times what the real
/// templates of the tests (`tests/templates`) take for a short conversation
/// with tools (at most 1,174, Qwen3-Coder's).
pub const STEPS_BASE: u64 = 1_000_000;
/// More steps for each message and tool (`n` of them): over 10 times the
/// most a real template takes a message (88, Qwen3-Coder's)...
pub const STEPS_PER_ITEM: u64 = 1_000;
/// ... and for each pair of them (`n²`): some real templates look through
/// the whole conversation at each message. Twice Command R7B's (22.2
/// million steps for 2,048 messages and 128 tools, about 4.7 a pair;
/// gpt-oss takes 1.0), so the most a request may bring renders.
pub const STEPS_PER_PAIR: u64 = 10;
/// The most bytes any rendering may write, whatever the context: about 32
/// times the most text a request may hold (`svc_core::limits`).
pub const MAX_OUTPUT_BYTES: usize = 32 << 20;

/// The context variable that carries the rendering's time to `strftime_now`
/// (a name no template uses).
const NOW_VARIABLE: &str = "__svc_now";
/// How [`NOW_VARIABLE`] writes the time (to the nanosecond).
const NOW_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.f";

/// Extra settings for one rendering.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// End with the header of an assistant turn, so the model writes the reply.
    pub add_generation_prompt: bool,
    /// More template variables (for example `enable_thinking`).
    pub extra: Map<String, Json>,
    /// The local time `strftime_now` formats (templates write today's date
    /// into the system prompt); `None`: the time of rendering. Tests pin it.
    pub now: Option<NaiveDateTime>,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            add_generation_prompt: true,
            extra: Map::new(),
            now: None,
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
        Self::or_else(source, Fallback::ChatMl, bos_token, eos_token)
    }

    /// Compiles `source`; a missing template or one minijinja cannot
    /// compile falls back to `fallback` (the log says which).
    pub fn or_else(
        source: Option<&str>,
        fallback: Fallback,
        bos_token: &str,
        eos_token: &str,
    ) -> Self {
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
                    tracing::warn!(
                        error = %e,
                        format = fallback.name(),
                        "cannot compile the model's chat template; using its vocabulary's turn format"
                    );
                }
            }
        } else {
            tracing::info!(
                format = fallback.name(),
                "the model carries no chat template; using its vocabulary's turn format"
            );
        }
        let env = Self::compile(fallback.source()).unwrap_or_else(|_| Environment::new());
        ChatTemplate {
            env,
            source: fallback.source().to_owned(),
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
        self.render_checked(messages, tools, options, &mut |_| Ok(()))
    }

    /// The steps a rendering of `messages` and `tools` may take: about a
    /// million for a short conversation, 50 million for the most messages
    /// and tools a request may hold (`svc_core::limits`).
    pub fn step_limit(messages: &[ChatMessage], tools: &[ToolSpec]) -> u64 {
        let n = (messages.len() + tools.len()) as u64;
        STEPS_BASE
            .saturating_add(STEPS_PER_ITEM.saturating_mul(n))
            .saturating_add(STEPS_PER_PAIR.saturating_mul(n).saturating_mul(n))
    }

    /// Renders a conversation within its step limit ([`ChatTemplate::step_limit`])
    /// and [`MAX_OUTPUT_BYTES`], calling `check` with each piece of output
    /// before it is written: its error stops the rendering and is the
    /// result. A template past its step limit is a 500 (the model's
    /// template is at fault: no request within svc's bounds needs that
    /// many), one past the bytes a 400 naming `messages`.
    pub(crate) fn render_checked(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        options: &RenderOptions,
        check: &mut dyn FnMut(&[u8]) -> Result<(), EngineError>,
    ) -> Result<String, EngineError> {
        self.render_limited(
            messages,
            tools,
            options,
            Self::step_limit(messages, tools),
            check,
        )
    }

    fn render_limited(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        options: &RenderOptions,
        steps: u64,
        check: &mut dyn FnMut(&[u8]) -> Result<(), EngineError>,
    ) -> Result<String, EngineError> {
        let items = messages.len() + tools.len();
        // What `apply_chat_template` passes: `tools` and `documents` are
        // always defined, `None` when there are none (templates test
        // `tools is not none`, and some read `tools` without a test).
        let tools = if tools.is_empty() {
            Value::from(())
        } else {
            Value::from(tools.iter().map(tool_value).collect::<Vec<_>>())
        };
        let mut ctx: Vec<(String, Value)> = vec![
            ("messages".into(), messages_value(messages)),
            ("tools".into(), tools),
            ("documents".into(), Value::from(())),
            (
                "add_generation_prompt".into(),
                Value::from(options.add_generation_prompt),
            ),
            ("bos_token".into(), Value::from(self.bos_token.as_str())),
            ("eos_token".into(), Value::from(self.eos_token.as_str())),
        ];
        for (k, v) in &options.extra {
            ctx.push((k.clone(), json_value(v)));
        }
        let now = options
            .now
            .unwrap_or_else(|| chrono::Local::now().naive_local());
        ctx.push((
            NOW_VARIABLE.into(),
            Value::from(now.format(NOW_FORMAT).to_string()),
        ));
        // The fuel is the environment's: a copy (it shares the compiled
        // template) carries this rendering's.
        let mut env = self.env.clone();
        // minijinja counts fuel down in an `isize`.
        env.set_fuel(Some(steps.min(i64::MAX as u64)));
        let template = env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| EngineError::Internal(format!("chat template missing: {e}")))?;
        let mut out = Checked {
            text: Vec::new(),
            check,
            stopped: None,
        };
        let rendered = template.render_captured_to(Value::from_pairs(ctx), &mut out);
        if let Some(stopped) = out.stopped {
            return Err(stopped);
        }
        match rendered {
            Ok(_) => String::from_utf8(out.text)
                .map_err(|_| EngineError::Internal("the chat template wrote invalid UTF-8".into())),
            Err(e) if e.kind() == ErrorKind::OutOfFuel => {
                tracing::warn!(
                    steps,
                    items,
                    "the model's chat template ran past its step limit"
                );
                Err(EngineError::Internal(format!(
                    "the model's chat template ran past its step limit ({steps} steps)"
                )))
            }
            Err(e) => Err(EngineError::InvalidRequest {
                param: Some("messages".into()),
                message: format!(
                    "the model's chat template rejected the messages: {}",
                    e.detail().unwrap_or("template error")
                ),
            }),
        }
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
        env.add_test("iterable", is_iterable);
        env.add_test("sequence", is_sequence);
        env.add_filter("string", string_filter);
        env.set_formatter(python_formatter);
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())?;
        Ok(env)
    }
}

/// A rendering's output: each piece goes through the caller's check and
/// [`MAX_OUTPUT_BYTES`] before it is kept; the first refusal is kept in
/// `stopped` and ends the rendering (minijinja stops at a write error).
struct Checked<'c> {
    text: Vec<u8>,
    check: &'c mut dyn FnMut(&[u8]) -> Result<(), EngineError>,
    stopped: Option<EngineError>,
}

impl io::Write for Checked<'_> {
    fn write(&mut self, piece: &[u8]) -> io::Result<usize> {
        let refused = if self.text.len().saturating_add(piece.len()) > MAX_OUTPUT_BYTES {
            Err(EngineError::InvalidRequest {
                param: Some("messages".into()),
                message: format!(
                    "the model's chat template writes more than {} MiB for these messages",
                    MAX_OUTPUT_BYTES >> 20
                ),
            })
        } else {
            (self.check)(piece)
        };
        if let Err(e) = refused {
            self.stopped.get_or_insert(e);
            return Err(io::Error::other("the rendering was stopped"));
        }
        self.text.extend_from_slice(piece);
        Ok(piece.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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
                reasoning,
            } => {
                // The reasoning under both names templates read, as
                // `apply_chat_template` aliases it: `thinking` (gpt-oss)
                // first, `reasoning_content` (Qwen3, DeepSeek, GLM) after
                // the content.
                let mut m = Vec::new();
                if let Some(reasoning) = reasoning {
                    m.push(("thinking", Value::from(reasoning.as_str())));
                }
                m.push(("role", Value::from("assistant")));
                // A turn of tool calls alone has no text: an empty string, as
                // templates that concatenate or search `content` need (Qwen3,
                // QwQ, DeepSeek R1, Granite, Phi fail on a missing one).
                m.push(("content", Value::from(content.as_deref().unwrap_or(""))));
                if let Some(reasoning) = reasoning {
                    m.push(("reasoning_content", Value::from(reasoning.as_str())));
                }
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
                // The function's name, as Hugging Face's tool-use examples
                // send it: Kimi K2 and Gemma 4 templates print it.
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

/// `strftime_now(format)`: the rendering's time ([`RenderOptions::now`]) in `format`.
fn strftime_now(state: &State, format: String) -> Result<Value, Error> {
    let now = state
        .lookup(NOW_VARIABLE)
        .and_then(|v| {
            v.as_str()
                .and_then(|s| NaiveDateTime::parse_from_str(s, NOW_FORMAT).ok())
        })
        .unwrap_or_else(|| chrono::Local::now().naive_local());
    let mut out = String::new();
    write!(out, "{}", now.format(&format))
        .map_err(|_| Error::new(ErrorKind::InvalidOperation, "invalid strftime format"))?;
    Ok(Value::from(out))
}

/// Jinja2's `iterable`: what Python can iterate. Unlike minijinja's, `none`
/// is not (Qwen3-Coder tests `tools is iterable` on `tools = None`).
fn is_iterable(value: &Value) -> bool {
    value.is_undefined()
        || matches!(
            value.kind(),
            ValueKind::Seq
                | ValueKind::Map
                | ValueKind::Iterable
                | ValueKind::String
                | ValueKind::Bytes
        )
}

/// Jinja2's `sequence`: what has a length and items (strings and mappings
/// too, unlike minijinja's).
fn is_sequence(value: &Value) -> bool {
    value.is_undefined()
        || matches!(
            value.kind(),
            ValueKind::Seq | ValueKind::Map | ValueKind::String | ValueKind::Bytes
        )
}

/// `tojson` as `transformers` defines it: `json.dumps(x, ensure_ascii=False,
/// indent=None, separators=None, sort_keys=False)`, arguments in that order:
/// `", "` and `": "` between items (`","` when indented), floats as Python
/// writes them, no HTML escaping.
fn tojson(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let mut slots: [Option<Value>; 4] = Default::default();
    if args.len() > slots.len() {
        return Err(Error::new(
            ErrorKind::TooManyArguments,
            "tojson takes at most 4 arguments",
        ));
    }
    for (slot, arg) in slots.iter_mut().zip(args.iter()) {
        *slot = Some(arg.clone());
    }
    for (slot, name) in slots
        .iter_mut()
        .zip(["ensure_ascii", "indent", "separators", "sort_keys"])
    {
        if let Some(v) = kwargs.get::<Option<Value>>(name)? {
            *slot = Some(v);
        }
    }
    kwargs.assert_all_used()?;
    let [ensure_ascii, indent, separators, sort_keys] =
        slots.map(|v| v.filter(|v| !v.is_none() && !v.is_undefined()));
    // Python's indent: a string, or a number of spaces.
    let indent: Option<String> = indent.map(|v| match v.as_str() {
        Some(s) => s.to_owned(),
        None => " ".repeat(usize::try_from(v).unwrap_or(0)),
    });
    let (item, key) = match separators {
        Some(pair) => {
            let item = pair.get_item_by_index(0)?;
            let key = pair.get_item_by_index(1)?;
            match (item.as_str(), key.as_str()) {
                (Some(item), Some(key)) => (item.to_owned(), key.to_owned()),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson separators must be two strings",
                    ));
                }
            }
        }
        None if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        None => (", ".to_owned(), ": ".to_owned()),
    };
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(
        &mut out,
        PythonJson {
            item: item.as_bytes(),
            key: key.as_bytes(),
            indent: indent.as_deref().map(str::as_bytes),
            level: 0,
            has_value: false,
        },
    );
    let written = if sort_keys.is_some_and(|v| v.is_true()) {
        // serde_json's maps keep keys sorted.
        serde_json::to_value(value).and_then(|v| v.serialize(&mut ser))
    } else {
        value.serialize(&mut ser)
    };
    written.map_err(|e| {
        Error::new(ErrorKind::InvalidOperation, "cannot serialize to JSON").with_source(e)
    })?;
    let mut text = String::from_utf8(out)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, "JSON is not UTF-8").with_source(e))?;
    if ensure_ascii.is_some_and(|v| v.is_true()) {
        text = ascii_escaped(&text);
    }
    Ok(Value::from_safe_string(text))
}

/// JSON text with every character past ASCII as Python's `ensure_ascii`
/// writes it: `\uXXXX` (lowercase), a surrogate pair past U+FFFF. Such
/// characters only occur inside strings, so the text stays valid JSON.
fn ascii_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        }
    }
    out
}

/// A float as Python's `repr` writes it: the shortest digits that read back
/// the same, in positional notation for exponents -4 to 15 (`250.0`,
/// `0.0001`) and scientific outside (`1e-05`, `1.5e+16`).
fn python_float(value: f64) -> String {
    if value.is_nan() {
        return "nan".to_owned();
    }
    if value.is_infinite() {
        return if value < 0.0 { "-inf" } else { "inf" }.to_owned();
    }
    let sign = if value.is_sign_negative() { "-" } else { "" };
    // Rust's `{:e}` writes the shortest round-trip digits: `2.505e2`, `1e-5`.
    let scientific = format!("{:e}", value.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (-4..16).contains(&exponent) {
        let point = exponent + 1;
        let text = if point <= 0 {
            format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
        } else {
            let point = point as usize;
            if digits.len() > point {
                format!("{}.{}", &digits[..point], &digits[point..])
            } else {
                format!("{digits}{}.0", "0".repeat(point - digits.len()))
            }
        };
        format!("{sign}{text}")
    } else {
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exponent.unsigned_abs())
    }
}

/// `{{ value }}` as Jinja2 writes it: floats as Python does, the rest as
/// minijinja does.
fn python_formatter(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    match f64_of(value) {
        Some(f) => out.write_str(&python_float(f)).map_err(Error::from),
        None => minijinja::escape_formatter(out, state, value),
    }
}

/// The `string` filter: Python's `str` for floats, minijinja's otherwise.
fn string_filter(value: &Value) -> Value {
    match f64_of(value) {
        Some(f) => Value::from(python_float(f)),
        None if value.kind() == ValueKind::String => value.clone(),
        None => Value::from(value.to_string()),
    }
}

/// The float a value holds, if it is one (not an integer).
fn f64_of(value: &Value) -> Option<f64> {
    if value.kind() != ValueKind::Number || value.is_integer() {
        return None;
    }
    f64::try_from(value.clone()).ok()
}

/// `json.dumps`'s layout: `item` and `key` separators, and with an indent, one
/// item a line. Floats as Python writes them.
struct PythonJson<'a> {
    item: &'a [u8],
    key: &'a [u8],
    indent: Option<&'a [u8]>,
    level: usize,
    has_value: bool,
}

impl PythonJson<'_> {
    fn open<W: ?Sized + io::Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.level += 1;
        self.has_value = false;
        w.write_all(bracket)
    }

    fn close<W: ?Sized + io::Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.level -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        w.write_all(bracket)
    }

    fn next_item<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if !first {
            w.write_all(self.item)?;
        }
        self.newline(w)
    }

    fn newline<W: ?Sized + io::Write>(&self, w: &mut W) -> io::Result<()> {
        if let Some(indent) = self.indent {
            w.write_all(b"\n")?;
            for _ in 0..self.level {
                w.write_all(indent)?;
            }
        }
        Ok(())
    }
}

impl serde_json::ser::Formatter for PythonJson<'_> {
    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"[")
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"]")
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.next_item(w, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"{")
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"}")
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.next_item(w, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(self.key)
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn write_f64<W: ?Sized + io::Write>(&mut self, w: &mut W, value: f64) -> io::Result<()> {
        w.write_all(python_float(value).as_bytes())
    }

    fn write_f32<W: ?Sized + io::Write>(&mut self, w: &mut W, value: f32) -> io::Result<()> {
        self.write_f64(w, f64::from(value))
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

    /// A system message, `question`, a call of `get_weather` for Paris and its result.
    fn weather_history(question: &str) -> [ChatMessage; 4] {
        [
            ChatMessage::System("Be brief.".into()),
            user(question),
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
        ]
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
        let messages = weather_history("  Weather in Paris?  ");
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
                    now: None,
                },
            )
            .unwrap();
        assert_eq!(
            out,
            "{\"a\": [1, 2.5, null, true], \"b\": \"<é>\"}|{\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n  \"b\": \"<é>\"\n}|\"quote \\\" and \\n\""
        );
    }

    fn render_extra(source: &str, extra: serde_json::Value) -> String {
        let t = ChatTemplate::new(Some(source), "", "");
        assert!(t.is_from_model());
        let serde_json::Value::Object(extra) = extra else {
            panic!("extra must be an object")
        };
        t.render_with(
            &[],
            &[],
            &RenderOptions {
                add_generation_prompt: false,
                extra,
                now: None,
            },
        )
        .unwrap()
    }

    #[test]
    fn floats_are_written_as_python_writes_them() {
        for (value, python) in [
            (250.0, "250.0"),
            (250.5, "250.5"),
            (0.1, "0.1"),
            (0.0001, "0.0001"),
            (1e-05, "1e-05"),
            (1.5e-07, "1.5e-07"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345678901234567e17, "1.2345678901234566e+17"),
            (-2.5, "-2.5"),
            (-0.0, "-0.0"),
            (1e100, "1e+100"),
        ] {
            assert_eq!(python_float(value), python, "{value:e}");
        }
        let out = render_extra(
            "{{ x }}|{{ x | string }}|{{ x | tojson }}|{{ n }}|{{ n | string }}",
            json!({"x": 1e-05, "n": 7}),
        );
        assert_eq!(out, "1e-05|1e-05|1e-05|7|7");
    }

    #[test]
    fn tojson_takes_transformers_arguments() {
        let x = json!({"b": ["é", 1.0], "a": {}});
        // ensure_ascii, positional or named; sort_keys on maps the template built.
        let out = render_extra(
            "{{ x | tojson(true) }}|{{ x | tojson(ensure_ascii=True) }}|{{ {'z': 1, 'a': [2, 3]} | tojson(sort_keys=true) }}",
            json!({"x": x}),
        );
        assert_eq!(
            out,
            r#"{"a": {}, "b": ["\u00e9", 1.0]}|{"a": {}, "b": ["\u00e9", 1.0]}|{"a": [2, 3], "z": 1}"#
        );
        let out = render_extra(
            "{{ x | tojson(separators=(',', ':')) }}|{{ x | tojson(indent='\t') }}|{{ '😀' | tojson(ensure_ascii=true) }}",
            json!({"x": {"a": [1, 2]}}),
        );
        assert_eq!(
            out,
            "{\"a\":[1,2]}|{\n\t\"a\": [\n\t\t1,\n\t\t2\n\t]\n}|\"\\ud83d\\ude00\""
        );
        let t = ChatTemplate::new(Some("{{ 1 | tojson(1, 2, 3, 4, 5) }}"), "", "");
        assert!(t.render(&[], &[]).is_err());
    }

    #[test]
    fn iterable_and_sequence_are_jinja2s() {
        let out = render_extra(
            "{% for v in [none, 1, 's', [1], {'a': 1}, undefined_name] %}{{ v is iterable }}/{{ v is sequence }} {% endfor %}",
            json!({}),
        );
        assert_eq!(
            out,
            "False/False False/False True/True True/True True/True True/True "
        );
    }

    #[test]
    fn tools_and_documents_are_none_without_tools() {
        let out = render_extra(
            "{{ tools is defined }} {{ tools is none }} {{ documents is none }}",
            json!({}),
        );
        assert_eq!(out, "True True True");
    }

    #[test]
    fn assistant_turns_carry_reasoning_and_an_empty_content() {
        let t = ChatTemplate::new(
            Some(
                "{% for m in messages %}{{ m | tojson }}\n{% endfor %}{{ strftime_now('%d %b %Y') }}",
            ),
            "",
            "",
        );
        let messages = [
            user("Hi"),
            ChatMessage::Assistant {
                content: None,
                tool_calls: vec![ToolCallSpec {
                    id: "call_1".into(),
                    name: "f".into(),
                    arguments: r#"{"x":1}"#.into(),
                }],
                reasoning: Some("Think.".into()),
            },
            ChatMessage::Tool {
                tool_call_id: "call_1".into(),
                content: "ok".into(),
            },
        ];
        let options = RenderOptions {
            now: NaiveDateTime::parse_from_str("2025-03-07T09:30:00", "%Y-%m-%dT%H:%M:%S").ok(),
            ..RenderOptions::default()
        };
        let out = t.render_with(&messages, &[], &options).unwrap();
        assert_eq!(
            out,
            concat!(
                r#"{"role": "user", "content": "Hi"}"#,
                "\n",
                r#"{"thinking": "Think.", "role": "assistant", "content": "", "reasoning_content": "Think.", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}"#,
                "\n",
                r#"{"role": "tool", "tool_call_id": "call_1", "content": "ok", "name": "f"}"#,
                "\n07 Mar 2025"
            )
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

    /// 10,000 × 10,000 loop steps: minutes of CPU unbounded.
    const LOOPING: &str =
        "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}done";

    #[test]
    fn a_looping_template_stops_at_its_step_limit() {
        let t = ChatTemplate::new(Some(LOOPING), "", "");
        assert!(t.is_from_model());
        let messages = [user("Hi")];
        let limit = ChatTemplate::step_limit(&messages, &[]);
        assert!(limit < 100_000_000, "{limit}");
        match t.render(&messages, &[]) {
            Err(EngineError::Internal(message)) => {
                assert!(message.contains("step limit"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        // A loop that fits its steps runs to its end.
        let t = ChatTemplate::new(
            Some("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}done"),
            "",
            "",
        );
        assert_eq!(t.render(&messages, &[]).unwrap(), "done");
    }

    #[test]
    fn a_template_that_writes_too_much_is_stopped_at_the_output_bound() {
        // 100,000 copies of a 1,000-byte message: 100 MB in few steps.
        let t = ChatTemplate::new(
            Some("{% for i in range(100000) %}{{ messages[0].content }}{% endfor %}"),
            "",
            "",
        );
        let messages = [user(&"x".repeat(1000))];
        match t.render(&messages, &[]) {
            Err(EngineError::InvalidRequest { param, message }) => {
                assert_eq!(param.as_deref(), Some("messages"));
                assert!(message.contains("MiB"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // The caller's check sees each piece before it is kept, and its
        // refusal stops the rendering.
        let mut seen = 0usize;
        let refused = t.render_checked(&messages, &[], &RenderOptions::default(), &mut |piece| {
            seen += piece.len();
            if seen > 10_000 {
                return Err(EngineError::ContextLengthExceeded {
                    prompt_tokens: 1,
                    context: 1,
                });
            }
            Ok(())
        });
        assert!(
            matches!(refused, Err(EngineError::ContextLengthExceeded { .. })),
            "{refused:?}"
        );
        assert!(seen <= 11_000, "{seen}");
    }

    #[test]
    fn a_rendering_cancelled_from_another_thread_stops() {
        // Writes a byte a step for 10^8 steps: it would run for minutes
        // (and 32 MiB) if not stopped.
        let t = ChatTemplate::new(
            Some("{% for i in range(10000) %}{% for j in range(10000) %}x{% endfor %}{% endfor %}"),
            "",
            "",
        );
        let cancel = crate::prompt::Cancel::default();
        let guard = cancel.on_drop();
        let (started, wait) = std::sync::mpsc::channel::<()>();
        let canceller = std::thread::spawn(move || {
            // Once the rendering writes, its client goes away.
            let _ = wait.recv();
            drop(guard);
        });
        let mut pieces = 0u64;
        let rendered = t.render_limited(
            &[user("Hi")],
            &[],
            &RenderOptions::default(),
            u64::MAX,
            &mut |_| {
                pieces += 1;
                if pieces == 1 {
                    let _ = started.send(());
                }
                cancel.check()
            },
        );
        canceller.join().unwrap();
        match rendered {
            Err(EngineError::Unavailable(message)) => {
                assert!(message.contains("cancelled"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        assert!(pieces < 10_000_000, "{pieces}");
    }

    #[test]
    fn a_model_without_a_template_is_prompted_in_its_vocabularys_format() {
        let vocab = |tokens: &'static [&'static str]| move |t: &str| tokens.contains(&t);
        let cases = [
            (&["<|im_start|>", "<|im_end|>"][..], Fallback::ChatMl),
            (&["<|start_header_id|>", "<|eot_id|>"][..], Fallback::Llama3),
            (&["<start_of_turn>", "<end_of_turn>"][..], Fallback::Gemma),
            (
                &["<|user|>", "<|assistant|>", "<|end|>"][..],
                Fallback::Phi3,
            ),
            (&["[INST]", "[/INST]"][..], Fallback::Mistral),
            (&["<s>"][..], Fallback::ChatMl),
        ];
        for (tokens, expected) in cases {
            assert_eq!(Fallback::of_vocab(vocab(tokens)), expected, "{tokens:?}");
        }
        let messages = weather_history("Weather in Paris?");
        let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        let expected = [
            (
                Fallback::Llama3,
                format!(
                    "<B><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n\n{call}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n18°C<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
                ),
            ),
            (
                Fallback::Gemma,
                format!(
                    "<B><start_of_turn>user\nBe brief.\n\nWeather in Paris?<end_of_turn>\n<start_of_turn>model\n\n{call}<end_of_turn>\n<start_of_turn>user\n18°C<end_of_turn>\n<start_of_turn>model\n"
                ),
            ),
            (
                Fallback::Mistral,
                format!(
                    "<B>[INST] Be brief.\n\nWeather in Paris? [/INST] \n{call}<E>[INST] 18°C [/INST]"
                ),
            ),
            (
                Fallback::Phi3,
                format!(
                    "<|system|>\nBe brief.<|end|>\n<|user|>\nWeather in Paris?<|end|>\n<|assistant|>\n\n{call}<|end|>\n<|user|>\n18°C<|end|>\n<|assistant|>\n"
                ),
            ),
        ];
        for (fallback, expected) in expected {
            let template = ChatTemplate::or_else(None, fallback, "<B>", "<E>");
            assert!(!template.is_from_model());
            let prompt = template.render(&messages, &[]).unwrap();
            assert_eq!(prompt, expected, "{fallback:?}");
        }
    }
}
