//! Shaping engine events into OpenAI's wire forms: one `chat.completion`
//! body, or `chat.completion.chunk` Server-Sent Events ending in
//! `data: [DONE]`. With `n > 1` the engine's `Choice` events say which
//! choice the events that follow belong to; with `logprobs` its `Logprobs`
//! events go out with the text that follows them.

use std::convert::Infallible;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use svc_api::{
    AssistantMessage, ChatCompletion, ChatCompletionChunk, Choice, ChoiceLogprobs, ChunkChoice,
    Delta, FunctionCall, FunctionCallDelta, PromptTokensDetails, ToolCall, ToolCallDelta, Usage,
};
use svc_core::engine::TokenLogprob;
use svc_core::{EngineEvent, EventStream, FinishReason, TokenUsage};

use crate::error::ApiError;

/// What every chunk and the whole body repeat.
#[derive(Debug, Clone)]
pub struct CompletionMeta {
    pub id: String,
    pub created: i64,
    pub model: String,
    /// Choices asked for (the engine sends a `Finish` for each).
    pub n: u32,
    /// Whether `logprobs` was asked for (choices then carry a `logprobs` object).
    pub logprobs: bool,
    /// The engine's `system_fingerprint`, when it has one.
    pub fingerprint: Option<String>,
}

impl CompletionMeta {
    /// A fresh `chatcmpl-` id for `model`, created now: one choice, no log probabilities.
    pub fn new(model: String) -> Self {
        CompletionMeta {
            id: format!("chatcmpl-{}", hex::encode(rand::random::<[u8; 12]>())),
            created: svc_core::now(),
            model,
            n: 1,
            logprobs: false,
            fingerprint: None,
        }
    }

    /// The same, for `n` choices and with log probabilities when `logprobs`.
    pub fn with_choices(mut self, n: u32, logprobs: bool) -> Self {
        self.n = n.max(1);
        self.logprobs = logprobs;
        self
    }

    /// The same, with the engine's `system_fingerprint`.
    pub fn with_fingerprint(mut self, fingerprint: Option<String>) -> Self {
        self.fingerprint = fingerprint;
        self
    }
}

/// Engine log probabilities in OpenAI's shape.
fn logprobs(tokens: Vec<TokenLogprob>) -> ChoiceLogprobs {
    ChoiceLogprobs {
        content: Some(
            tokens
                .into_iter()
                .map(|t| svc_api::TokenLogprob {
                    token: t.token,
                    logprob: t.logprob,
                    bytes: Some(t.bytes),
                    top_logprobs: t
                        .top
                        .into_iter()
                        .map(|a| svc_api::TopLogprob {
                            token: a.token,
                            logprob: a.logprob,
                            bytes: Some(a.bytes),
                        })
                        .collect(),
                })
                .collect(),
        ),
        refusal: None,
    }
}

/// One choice of a whole reply, as it is collected.
#[derive(Default)]
struct Collected {
    content: String,
    reasoning: String,
    calls: Vec<ToolCall>,
    logprobs: Vec<TokenLogprob>,
    finish: Option<FinishReason>,
}

pub(crate) fn usage(u: TokenUsage) -> Usage {
    Usage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        total_tokens: u.prompt_tokens + u.completion_tokens,
        prompt_tokens_details: PromptTokensDetails {
            cached_tokens: u.cached_tokens,
        },
    }
}

/// Collects a whole generation into one `chat.completion` (with `meta.n`
/// choices, the usage summed over them).
pub async fn collect(
    meta: CompletionMeta,
    mut events: EventStream,
) -> Result<ChatCompletion, ApiError> {
    let n = meta.n as usize;
    let mut choices: Vec<Collected> = (0..n).map(|_| Collected::default()).collect();
    let mut current = 0usize;
    let mut finished = 0usize;
    let mut used = TokenUsage::default();
    while finished < n {
        let event = match events.next().await {
            Some(Ok(event)) => event,
            Some(Err(e)) => return Err(e.into()),
            None => {
                return Err(ApiError::Internal(
                    "engine stream ended without finishing".into(),
                ));
            }
        };
        if let EngineEvent::Choice(i) = event {
            current = i as usize;
            if current >= n {
                return Err(ApiError::Internal(format!(
                    "choice index {current} out of range"
                )));
            }
            continue;
        }
        let choice = &mut choices[current];
        match event {
            EngineEvent::Text(t) => choice.content.push_str(&t),
            EngineEvent::Reasoning(t) => choice.reasoning.push_str(&t),
            EngineEvent::ToolCall(chunk) => {
                let index = chunk.index as usize;
                let calls = &mut choice.calls;
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
            EngineEvent::Logprobs(tokens) => choice.logprobs.extend(tokens),
            EngineEvent::Finish { reason, usage } => {
                if choice.finish.replace(reason).is_none() {
                    finished += 1;
                }
                used.add(usage);
            }
            // Only a text prompt is scored.
            EngineEvent::Choice(_) | EngineEvent::PromptLogprobs(_) => {}
        }
    }
    let choices = choices
        .into_iter()
        .enumerate()
        .map(|(index, c)| {
            let has_calls = !c.calls.is_empty();
            Choice {
                index: index as u32,
                message: AssistantMessage {
                    role: "assistant".into(),
                    content: if has_calls && c.content.is_empty() {
                        None
                    } else {
                        Some(c.content)
                    },
                    reasoning_content: (!c.reasoning.is_empty()).then_some(c.reasoning),
                    tool_calls: has_calls.then_some(c.calls),
                },
                finish_reason: c.finish.unwrap_or(FinishReason::Stop).as_str().into(),
                logprobs: meta.logprobs.then(|| logprobs(c.logprobs)),
            }
        })
        .collect();
    Ok(ChatCompletion {
        mcp_calls: None,
        id: meta.id,
        object: "chat.completion".into(),
        created: meta.created,
        model: meta.model,
        system_fingerprint: meta.fingerprint,
        choices,
        usage: usage(used),
    })
}

/// One SSE event: `data: <json>\n\n`.
pub(crate) fn event(json: &impl serde::Serialize) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"data: ");
    // Serializing our own wire types cannot fail.
    let _ = serde_json::to_writer(&mut buf, json);
    buf.extend_from_slice(b"\n\n");
    Bytes::from(buf)
}

/// The literal terminator of a stream.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// Turns engine events into the SSE byte stream: each choice's chunks carry
/// its `index` (a first chunk with the role for every choice, then deltas
/// in the order the engine makes them), one chunk with each choice's
/// `finish_reason`, then the usage of all (when asked) and `[DONE]`.
/// Dropping the returned stream (the client went away) drops `events`,
/// which stops the engine.
pub fn sse(
    meta: CompletionMeta,
    include_usage: bool,
    mut events: EventStream,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let request_id = crate::scoped::request_id();
    let n = meta.n;
    let with_logprobs = meta.logprobs;
    let chunk = move |index: u32,
                      delta: Delta,
                      finish: Option<FinishReason>,
                      tokens: Option<Vec<TokenLogprob>>| ChatCompletionChunk {
        id: meta.id.clone(),
        object: "chat.completion.chunk".into(),
        created: meta.created,
        model: meta.model.clone(),
        system_fingerprint: meta.fingerprint.clone(),
        choices: vec![ChunkChoice {
            index,
            delta,
            finish_reason: finish.map(|f| f.as_str().to_owned()),
            logprobs: tokens.map(logprobs),
        }],
        usage: include_usage.then_some(None),
    };
    async_stream::stream! {
        for index in 0..n {
            let first = Delta { role: Some("assistant".into()), content: Some(String::new()), ..Delta::default() };
            yield Ok(event(&chunk(index, first, None, with_logprobs.then(Vec::new))));
        }
        let mut current = 0u32;
        let mut finished = 0u32;
        let mut used = TokenUsage::default();
        // Each choice's log probabilities waiting for the text they go with.
        let mut tokens: Vec<Vec<TokenLogprob>> = (0..n).map(|_| Vec::new()).collect();
        loop {
            let delta = match events.next().await {
                Some(Ok(EngineEvent::Text(text))) => {
                    let tokens = with_logprobs.then(|| tokens.get_mut(current as usize).map(std::mem::take).unwrap_or_default());
                    yield Ok(event(&chunk(current, Delta { content: Some(text), ..Delta::default() }, None, tokens)));
                    continue;
                }
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
                Some(Ok(EngineEvent::Logprobs(more))) => {
                    if let Some(held) = tokens.get_mut(current as usize) {
                        held.extend(more);
                    }
                    continue;
                }
                Some(Ok(EngineEvent::Choice(index))) => {
                    current = index;
                    continue;
                }
                // Only a text prompt is scored.
                Some(Ok(EngineEvent::PromptLogprobs(_))) => continue,
                Some(Ok(EngineEvent::Finish { reason, usage: more })) => {
                    // Log probabilities no text took (none from svc's engines) go with the finish.
                    let rest = tokens
                        .get_mut(current as usize)
                        .filter(|held| with_logprobs && !held.is_empty())
                        .map(std::mem::take);
                    yield Ok(event(&chunk(current, Delta::default(), Some(reason), rest)));
                    used.add(more);
                    finished += 1;
                    if finished < n {
                        continue;
                    }
                    if include_usage {
                        let mut last = chunk(0, Delta::default(), None, None);
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
            yield Ok(event(&chunk(current, delta, None, None)));
        }
    }
}

/// The one event that ends a stream which failed after it started. Built as
/// if inside the request, so a server error quotes its id.
pub(crate) fn error_event(request_id: Option<&str>, err: ApiError) -> Bytes {
    match request_id {
        Some(id) => crate::scoped::in_request(id.to_owned(), || event(&err.body())),
        None => event(&err.body()),
    }
}
