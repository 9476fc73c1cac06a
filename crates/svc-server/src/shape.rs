//! Shaping engine events into OpenAI's wire forms: one `chat.completion`
//! body, or `chat.completion.chunk` Server-Sent Events ending in
//! `data: [DONE]`.

use std::convert::Infallible;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use svc_api::{
    AssistantMessage, ChatCompletion, ChatCompletionChunk, Choice, ChunkChoice, Delta,
    FunctionCall, FunctionCallDelta, ToolCall, ToolCallDelta, Usage,
};
use svc_core::{EngineEvent, EventStream, FinishReason, TokenUsage};

use crate::error::ApiError;

/// What every chunk and the whole body repeat.
#[derive(Debug, Clone)]
pub struct CompletionMeta {
    pub id: String,
    pub created: i64,
    pub model: String,
}

impl CompletionMeta {
    /// A fresh `chatcmpl-` id for `model`, created now.
    pub fn new(model: String) -> Self {
        CompletionMeta {
            id: format!("chatcmpl-{}", hex::encode(rand::random::<[u8; 12]>())),
            created: svc_core::now(),
            model,
        }
    }
}

fn usage(u: TokenUsage) -> Usage {
    Usage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        total_tokens: u.prompt_tokens + u.completion_tokens,
    }
}

/// Collects a whole generation into one `chat.completion`.
pub async fn collect(
    meta: CompletionMeta,
    mut events: EventStream,
) -> Result<ChatCompletion, ApiError> {
    let mut content = String::new();
    let mut reasoning = String::new();
    let mut calls: Vec<ToolCall> = Vec::new();
    let (reason, used) = loop {
        match events.next().await {
            Some(Ok(EngineEvent::Text(t))) => content.push_str(&t),
            Some(Ok(EngineEvent::Reasoning(t))) => reasoning.push_str(&t),
            Some(Ok(EngineEvent::ToolCall(chunk))) => {
                let index = chunk.index as usize;
                if index == calls.len() {
                    calls.push(ToolCall {
                        id: chunk.id.unwrap_or_default(),
                        kind: "function".into(),
                        function: FunctionCall {
                            name: chunk.name.unwrap_or_default(),
                            arguments: chunk.arguments,
                        },
                    });
                } else if let Some(call) = calls.get_mut(index) {
                    call.function.arguments.push_str(&chunk.arguments);
                } else {
                    return Err(ApiError::Internal(format!(
                        "tool call index {index} out of order"
                    )));
                }
            }
            // Not asked for yet: chat requests have n = 1 and no logprobs.
            Some(Ok(EngineEvent::Logprobs(_) | EngineEvent::Choice(_))) => {}
            Some(Ok(EngineEvent::Finish { reason, usage })) => break (reason, usage),
            Some(Err(e)) => return Err(e.into()),
            None => {
                return Err(ApiError::Internal(
                    "engine stream ended without finishing".into(),
                ));
            }
        }
    };
    let has_calls = !calls.is_empty();
    Ok(ChatCompletion {
        id: meta.id,
        object: "chat.completion".into(),
        created: meta.created,
        model: meta.model,
        choices: vec![Choice {
            index: 0,
            message: AssistantMessage {
                role: "assistant".into(),
                content: if has_calls && content.is_empty() {
                    None
                } else {
                    Some(content)
                },
                reasoning_content: (!reasoning.is_empty()).then_some(reasoning),
                tool_calls: has_calls.then_some(calls),
            },
            finish_reason: reason.as_str().into(),
            logprobs: None,
        }],
        usage: usage(used),
    })
}

/// One SSE event: `data: <json>\n\n`.
fn event(json: &impl serde::Serialize) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"data: ");
    // Serializing our own wire types cannot fail.
    let _ = serde_json::to_writer(&mut buf, json);
    buf.extend_from_slice(b"\n\n");
    Bytes::from(buf)
}

/// The literal terminator of a stream.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// Turns engine events into the SSE byte stream. Dropping the returned
/// stream (the client went away) drops `events`, which stops the engine.
pub fn sse(
    meta: CompletionMeta,
    include_usage: bool,
    mut events: EventStream,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let request_id = crate::request_id::current();
    let chunk = move |delta: Delta, finish: Option<FinishReason>| ChatCompletionChunk {
        id: meta.id.clone(),
        object: "chat.completion.chunk".into(),
        created: meta.created,
        model: meta.model.clone(),
        choices: vec![ChunkChoice {
            index: 0,
            delta,
            finish_reason: finish.map(|f| f.as_str().to_owned()),
            logprobs: None,
        }],
        usage: include_usage.then_some(None),
    };
    async_stream::stream! {
        yield Ok(event(&chunk(
            Delta { role: Some("assistant".into()), content: Some(String::new()), ..Delta::default() },
            None,
        )));
        loop {
            let delta = match events.next().await {
                Some(Ok(EngineEvent::Text(text))) => Delta { content: Some(text), ..Delta::default() },
                Some(Ok(EngineEvent::Reasoning(text))) => Delta { reasoning_content: Some(text), ..Delta::default() },
                Some(Ok(EngineEvent::ToolCall(call))) => Delta {
                    tool_calls: Some(vec![ToolCallDelta {
                        index: call.index,
                        kind: call.id.as_ref().map(|_| "function".to_owned()),
                        id: call.id,
                        function: Some(FunctionCallDelta { name: call.name, arguments: Some(call.arguments) }),
                    }]),
                    ..Delta::default()
                },
                // Not asked for yet: chat requests have n = 1 and no logprobs.
                Some(Ok(EngineEvent::Logprobs(_) | EngineEvent::Choice(_))) => continue,
                Some(Ok(EngineEvent::Finish { reason, usage: used })) => {
                    yield Ok(event(&chunk(Delta::default(), Some(reason))));
                    if include_usage {
                        let mut last = chunk(Delta::default(), None);
                        last.choices.clear();
                        last.usage = Some(Some(usage(used)));
                        yield Ok(event(&last));
                    }
                    yield Ok(Bytes::from_static(DONE));
                    break;
                }
                Some(Err(e)) => {
                    yield Ok(error_event(request_id.as_deref(), e.into()));
                    break;
                }
                None => {
                    let err = ApiError::Internal("engine stream ended without finishing".into());
                    yield Ok(error_event(request_id.as_deref(), err));
                    break;
                }
            };
            yield Ok(event(&chunk(delta, None)));
        }
    }
}

/// The one event that ends a stream which failed after it started. Built as
/// if inside the request, so a server error quotes its id.
fn error_event(request_id: Option<&str>, err: ApiError) -> Bytes {
    match request_id {
        Some(id) => crate::request_id::scope(id.to_owned(), || event(&err.body())),
        None => event(&err.body()),
    }
}
