//! Chat-template rendering with arbitrary conversations, as the embedded
//! engine does it: the history rewritten for what the template cannot show
//! (tool calls and results, the tools' system block), then rendered by
//! minijinja with the ChatML fallback and with templates in the style of
//! real models (Qwen2.5 with tools, a Mistral-like one that raises on bad
//! role order, a Qwen3-like thinking one). Message text is data, never
//! template code: rendering never panics, fails only as an invalid
//! `messages` request, and ChatML shows every message's text verbatim.
//!
//! Input: a first byte choosing the shape, then either a chat request body
//! (validated as the server does) or raw material for a conversation.
#![no_main]
#![expect(
    clippy::panic,
    reason = "a target panics on a broken invariant: that is what libFuzzer reports"
)]

use std::sync::LazyLock;

use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use svc_api::ChatCompletionRequest;
use svc_core::engine::{ChatMessage, EngineError, ToolCallSpec, ToolSpec};
use svc_engine_llama::fuzzing::prepare_messages;
use svc_engine_llama::{ChatTemplate, RenderOptions};
use svc_server::fuzzing::ValidChatRequest;

const QWEN25_LIKE: &str = r#"{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- "\n\n# Tools\n\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools><|im_end|>\n" }}
{%- else %}
{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- for message in messages %}
{%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
{%- elif message.role == "assistant" %}
{{- '<|im_start|>' + message.role }}
{%- if message.content %}{{- '\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\n<tool_call>\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}{{- tool_call.arguments | tojson }}{{- '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == "tool" %}
{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' }}{{- message.content }}{{- '\n</tool_response>' }}
{%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"#;

const MISTRAL_LIKE: &str = r#"{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"#;

const QWEN3_LIKE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] | string + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}";

static TEMPLATES: LazyLock<[ChatTemplate; 4]> = LazyLock::new(|| {
    [
        ChatTemplate::new(None, "", "<|im_end|>"),
        ChatTemplate::new(Some(QWEN25_LIKE), "", "<|im_end|>"),
        ChatTemplate::new(Some(MISTRAL_LIKE), "<s>", "</s>"),
        ChatTemplate::new(Some(QWEN3_LIKE), "", "<|im_end|>"),
    ]
});

fn text(u: &mut Unstructured<'_>) -> ArbResult<String> {
    u.arbitrary()
}

/// A conversation and tools made from raw bytes.
fn conversation(u: &mut Unstructured<'_>) -> ArbResult<(Vec<ChatMessage>, Vec<ToolSpec>)> {
    let mut messages = Vec::new();
    for _ in 0..u.int_in_range(1..=6)? {
        messages.push(match u.int_in_range(0..=3)? {
            0 => ChatMessage::System(text(u)?),
            1 => ChatMessage::User(text(u)?),
            2 => {
                let mut tool_calls = Vec::new();
                for _ in 0..u.int_in_range(0..=2)? {
                    tool_calls.push(ToolCallSpec {
                        id: text(u)?,
                        name: text(u)?,
                        arguments: text(u)?,
                    });
                }
                let content = if tool_calls.is_empty() || u.arbitrary()? {
                    Some(text(u)?)
                } else {
                    None
                };
                // Reasoning sent back with the turn: templates render it too.
                let reasoning = if u.arbitrary()? { Some(text(u)?) } else { None };
                ChatMessage::Assistant {
                    content,
                    tool_calls,
                    reasoning,
                }
            }
            _ => ChatMessage::Tool {
                tool_call_id: text(u)?,
                content: text(u)?,
            },
        });
    }
    let mut tools = Vec::new();
    for _ in 0..u.int_in_range(0..=2)? {
        let parameters = serde_json::from_str::<Value>(&text(u)?)
            .unwrap_or_else(|_| serde_json::json!({"type": "object"}));
        tools.push(ToolSpec {
            name: text(u)?,
            description: u.arbitrary()?,
            parameters,
        });
    }
    Ok((messages, tools))
}

fn render(template: &ChatTemplate, messages: &[ChatMessage], tools: &[ToolSpec], think: bool) {
    let messages = prepare_messages(messages, tools, template.source());
    let mut options = RenderOptions::default();
    if think {
        let mut extra = Map::new();
        extra.insert("enable_thinking".into(), Value::Bool(false));
        options.extra = extra;
    }
    match template.render_with(&messages, tools, &options) {
        Ok(prompt) => {
            if !template.is_from_model() {
                // ChatML writes every text as it is.
                for message in &messages {
                    let joined;
                    let text: &str = match message {
                        ChatMessage::System(t) | ChatMessage::User(t) => t,
                        ChatMessage::UserParts(parts) => {
                            joined = ChatMessage::user_text(parts);
                            &joined
                        }
                        ChatMessage::Tool { content, .. } => content,
                        ChatMessage::Assistant { content, .. } => content.as_deref().unwrap_or(""),
                    };
                    assert!(prompt.contains(text), "{text:?} missing from {prompt:?}");
                }
            }
        }
        Err(EngineError::InvalidRequest { param, .. }) => {
            assert!(template.is_from_model(), "ChatML rejected {messages:?}");
            assert_eq!(param.as_deref(), Some("messages"));
        }
        Err(other) => panic!("rendering failed as {other:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (messages, tools) = if mode & 1 == 0 {
        let Ok(request) = serde_json::from_slice::<ChatCompletionRequest>(rest) else {
            return;
        };
        let Ok(valid) = ValidChatRequest::try_from(request) else {
            return;
        };
        (valid.generate.messages, valid.generate.tools)
    } else {
        let mut u = Unstructured::new(rest);
        let Ok(conversation) = conversation(&mut u) else {
            return;
        };
        conversation
    };
    for template in TEMPLATES.iter() {
        render(template, &messages, &tools, mode & 2 == 2);
    }
});
