//! Shaping engine events into Anthropic's Messages API: one `message`
//! body, or its Server-Sent Events (`message_start`, `content_block_*`,
//! `ping`, `message_delta`, `message_stop`), and the error event of a
//! stream that failed.
//!
//! Content blocks follow the events: reasoning is a `thinking` block (when
//! shown), text a `text` block, each tool call a `tool_use` block, each
//! opened when its first piece arrives and closed when another kind of
//! piece (or the end) comes.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::Value;
use svc_api::messages::{
    AnthropicError, AnthropicErrorBody, BlockDelta, ContentBlock, MessageDelta, MessageReply,
    MessageStreamEvent, MessagesUsage,
};
use svc_core::{Engine, EngineEvent, EventStream, FinishReason, GenerateRequest, TokenUsage};

use crate::error::ApiError;
use crate::messages::stop::StopMatcher;

/// The `signature` of the thinking blocks svc sends. Anthropic signs its
/// thinking so that it can be sent back unchanged; svc ignores thinking
/// sent back, so its signature only says where it came from.
pub const THINKING_SIGNATURE: &str = "svc";

/// What every event of one reply shares.
#[derive(Debug, Clone)]
pub struct MessageMeta {
    pub id: String,
    pub model: String,
    /// Whether reasoning is shown as `thinking` blocks.
    pub show_thinking: bool,
    /// Set by [`stop_sequences`] when a stop sequence ended the reply.
    pub stopped_by: StoppedBy,
}

/// The stop sequence that ended a reply, shared between the stream that
/// finds it and the shaper that reports it.
pub type StoppedBy = Arc<Mutex<Option<String>>>;

impl MessageMeta {
    /// A fresh `msg_` id for `model`.
    pub fn new(model: String, show_thinking: bool) -> Self {
        MessageMeta {
            id: format!("msg_{}", hex::encode(rand::random::<[u8; 12]>())),
            model,
            show_thinking,
            stopped_by: StoppedBy::default(),
        }
    }

    fn stop_sequence(&self) -> Option<String> {
        self.stopped_by.lock().ok().and_then(|s| s.clone())
    }
}

/// Ends the reply at the first of `stops` in its text, which is cut before
/// it: what could start a stop sequence is held back until it is known
/// not to. The engine is not told the stop sequences (it would drop the
/// sequence without saying which one it was); when one appears, its
/// generation is dropped (which stops it) and a `Finish` is made up: the
/// prompt's tokens as the engine counts them, and a token per text piece
/// the engine sent (engines send about one piece per token).
pub fn stop_sequences(
    stops: Vec<String>,
    stopped_by: StoppedBy,
    engine: Arc<dyn Engine>,
    request: GenerateRequest,
    mut events: EventStream,
) -> EventStream {
    let mut matcher = StopMatcher::new(stops);
    async_stream::stream! {
        let mut pieces = 0u64;
        while let Some(event) = events.next().await {
            match event {
                Ok(EngineEvent::Text(text)) => {
                    pieces += 1;
                    let released = matcher.push(&text);
                    if !released.text.is_empty() {
                        yield Ok(EngineEvent::Text(released.text));
                    }
                    if let Some(stop) = released.stop {
                        drop(events);
                        if let Ok(mut slot) = stopped_by.lock() {
                            *slot = Some(stop);
                        }
                        let prompt_tokens = match engine.generator() {
                            Some(generator) => generator.count_tokens(&request).await.unwrap_or(0),
                            None => 0,
                        };
                        yield Ok(EngineEvent::Finish {
                            reason: FinishReason::Stop,
                            usage: TokenUsage { prompt_tokens, completion_tokens: pieces, ..TokenUsage::default() },
                        });
                        return;
                    }
                }
                other => {
                    let held = matcher.finish();
                    if !held.is_empty() {
                        yield Ok(EngineEvent::Text(held));
                    }
                    yield other;
                }
            }
        }
    }
    .boxed()
}

/// The open block's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
    /// The tool call of this engine index.
    Tool(u32),
}

/// Turns engine events into Messages stream events, one step at a time.
struct Shaper {
    meta: MessageMeta,
    open: Option<(Open, u32)>,
    blocks: u32,
    pinged: bool,
    called: bool,
}

impl Shaper {
    fn new(meta: MessageMeta) -> Self {
        Shaper {
            meta,
            open: None,
            blocks: 0,
            pinged: false,
            called: false,
        }
    }

    fn start(&self) -> MessageStreamEvent {
        MessageStreamEvent::MessageStart {
            message: MessageReply {
                id: self.meta.id.clone(),
                kind: "message".into(),
                role: "assistant".into(),
                model: self.meta.model.clone(),
                content: Vec::new(),
                stop_reason: None,
                stop_sequence: None,
                usage: MessagesUsage::default(),
            },
        }
    }

    fn close(&mut self, out: &mut Vec<MessageStreamEvent>) {
        if let Some((kind, index)) = self.open.take() {
            if kind == Open::Thinking {
                out.push(MessageStreamEvent::ContentBlockDelta {
                    index,
                    delta: BlockDelta::SignatureDelta {
                        signature: THINKING_SIGNATURE.into(),
                    },
                });
            }
            out.push(MessageStreamEvent::ContentBlockStop { index });
        }
    }

    /// The index of the open block of `kind`, opening it with `block` first.
    fn open(
        &mut self,
        kind: Open,
        block: impl FnOnce() -> ContentBlock,
        out: &mut Vec<MessageStreamEvent>,
    ) -> u32 {
        if let Some((open, index)) = self.open
            && open == kind
        {
            return index;
        }
        self.close(out);
        let index = self.blocks;
        self.blocks += 1;
        self.open = Some((kind, index));
        out.push(MessageStreamEvent::ContentBlockStart {
            index,
            content_block: block(),
        });
        if !std::mem::replace(&mut self.pinged, true) {
            out.push(MessageStreamEvent::Ping);
        }
        index
    }

    /// The stream events `event` makes.
    fn on(&mut self, event: EngineEvent) -> Vec<MessageStreamEvent> {
        let mut out = Vec::new();
        match event {
            EngineEvent::Reasoning(thinking) => {
                if self.meta.show_thinking && !thinking.is_empty() {
                    let index = self.open(
                        Open::Thinking,
                        || ContentBlock::Thinking {
                            thinking: String::new(),
                            signature: String::new(),
                        },
                        &mut out,
                    );
                    out.push(MessageStreamEvent::ContentBlockDelta {
                        index,
                        delta: BlockDelta::ThinkingDelta { thinking },
                    });
                }
            }
            EngineEvent::Text(text) => {
                if !text.is_empty() {
                    let index = self.open(
                        Open::Text,
                        || ContentBlock::Text {
                            text: String::new(),
                        },
                        &mut out,
                    );
                    out.push(MessageStreamEvent::ContentBlockDelta {
                        index,
                        delta: BlockDelta::TextDelta { text },
                    });
                }
            }
            EngineEvent::ToolCall(chunk) => {
                self.called = true;
                let index = match (self.open, chunk.id) {
                    (Some((Open::Tool(open), index)), _) if open == chunk.index => index,
                    (_, id) => {
                        let id = tool_use_id(id.as_deref());
                        let name = chunk.name.unwrap_or_default();
                        // A new call: `open` finds no block of its index open.
                        self.close(&mut out);
                        self.open(
                            Open::Tool(chunk.index),
                            || ContentBlock::ToolUse {
                                id,
                                name,
                                input: Value::Object(serde_json::Map::new()),
                            },
                            &mut out,
                        )
                    }
                };
                if !chunk.arguments.is_empty() {
                    out.push(MessageStreamEvent::ContentBlockDelta {
                        index,
                        delta: BlockDelta::InputJsonDelta {
                            partial_json: chunk.arguments,
                        },
                    });
                }
            }
            // Not asked for: Messages requests have n = 1 and no logprobs.
            EngineEvent::Logprobs(_) | EngineEvent::PromptLogprobs(_) | EngineEvent::Choice(_) => {}
            EngineEvent::Finish { reason, usage } => {
                self.close(&mut out);
                if !std::mem::replace(&mut self.pinged, true) {
                    out.push(MessageStreamEvent::Ping);
                }
                let stop_sequence = self.meta.stop_sequence();
                let stop_reason = match reason {
                    FinishReason::Length => "max_tokens",
                    FinishReason::ToolCalls => "tool_use",
                    FinishReason::Stop if self.called => "tool_use",
                    FinishReason::Stop if stop_sequence.is_some() => "stop_sequence",
                    FinishReason::Stop => "end_turn",
                };
                out.push(MessageStreamEvent::MessageDelta {
                    delta: MessageDelta {
                        stop_reason: Some(stop_reason.into()),
                        stop_sequence,
                    },
                    usage: MessagesUsage {
                        input_tokens: usage.uncached_prompt_tokens(),
                        output_tokens: usage.completion_tokens,
                        cache_read_input_tokens: usage.cached_tokens,
                        cache_creation_input_tokens: 0,
                    },
                });
                out.push(MessageStreamEvent::MessageStop);
            }
        }
        out
    }
}

/// Anthropic's form of a tool call id: `toolu_` and the engine's id
/// without its `call_` prefix (or a fresh one).
fn tool_use_id(id: Option<&str>) -> String {
    match id {
        Some(id) if id.starts_with("toolu_") => id.to_owned(),
        Some(id) if !id.is_empty() => format!("toolu_{}", id.strip_prefix("call_").unwrap_or(id)),
        _ => format!("toolu_{}", hex::encode(rand::random::<[u8; 12]>())),
    }
}

/// Collects a whole generation into one `message`.
pub async fn collect(meta: MessageMeta, mut events: EventStream) -> Result<MessageReply, ApiError> {
    let mut shaper = Shaper::new(meta);
    let MessageStreamEvent::MessageStart { message: mut reply } = shaper.start() else {
        return Err(ApiError::Internal("no message_start".into()));
    };
    // Tool inputs arrive as JSON text; they are parsed when complete.
    let mut inputs: Vec<Option<String>> = Vec::new();
    loop {
        let event = match events.next().await {
            Some(Ok(event)) => event,
            Some(Err(e)) => return Err(e.into()),
            None => {
                return Err(ApiError::Internal(
                    "engine stream ended without finishing".into(),
                ));
            }
        };
        let finished = matches!(event, EngineEvent::Finish { .. });
        for out in shaper.on(event) {
            match out {
                MessageStreamEvent::ContentBlockStart { content_block, .. } => {
                    inputs.push(
                        matches!(content_block, ContentBlock::ToolUse { .. }).then(String::new),
                    );
                    reply.content.push(content_block);
                }
                MessageStreamEvent::ContentBlockDelta { index, delta } => {
                    let i = index as usize;
                    match (reply.content.get_mut(i), delta) {
                        (Some(ContentBlock::Text { text }), BlockDelta::TextDelta { text: t }) => {
                            text.push_str(&t);
                        }
                        (
                            Some(ContentBlock::Thinking { thinking, .. }),
                            BlockDelta::ThinkingDelta { thinking: t },
                        ) => thinking.push_str(&t),
                        (
                            Some(ContentBlock::Thinking { signature, .. }),
                            BlockDelta::SignatureDelta { signature: s },
                        ) => signature.push_str(&s),
                        (
                            Some(ContentBlock::ToolUse { .. }),
                            BlockDelta::InputJsonDelta { partial_json },
                        ) => {
                            if let Some(Some(json)) = inputs.get_mut(i) {
                                json.push_str(&partial_json);
                            }
                        }
                        _ => {}
                    }
                }
                MessageStreamEvent::MessageDelta { delta, usage } => {
                    reply.stop_reason = delta.stop_reason;
                    reply.stop_sequence = delta.stop_sequence;
                    reply.usage = usage;
                }
                _ => {}
            }
        }
        if finished {
            break;
        }
    }
    for (block, json) in reply.content.iter_mut().zip(inputs) {
        if let (ContentBlock::ToolUse { input, .. }, Some(json)) = (block, json) {
            *input = tool_input(&json);
        }
    }
    Ok(reply)
}

/// A tool call's arguments as the `input` object; arguments that are not a
/// whole JSON object (a call cut by `max_tokens`) give `{}`.
fn tool_input(json: &str) -> Value {
    match serde_json::from_str::<Value>(json) {
        Ok(value @ Value::Object(_)) => value,
        _ => Value::Object(serde_json::Map::new()),
    }
}

/// One SSE event: `event: <name>\ndata: <json>\n\n`.
fn sse_event(name: &str, json: &impl serde::Serialize) -> Bytes {
    let mut buf = Vec::with_capacity(192);
    buf.extend_from_slice(b"event: ");
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b"\ndata: ");
    // Serializing our own wire types cannot fail.
    let _ = serde_json::to_writer(&mut buf, json);
    buf.extend_from_slice(b"\n\n");
    Bytes::from(buf)
}

/// Turns engine events into the SSE byte stream. Dropping the returned
/// stream (the client went away) drops `events`, which stops the engine.
pub fn sse(
    meta: MessageMeta,
    mut events: EventStream,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let request_id = crate::scoped::request_id();
    let mut shaper = Shaper::new(meta);
    async_stream::stream! {
        let start = shaper.start();
        yield Ok(sse_event(start.name(), &start));
        loop {
            let event = match events.next().await {
                Some(Ok(event)) => event,
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
            let finished = matches!(event, EngineEvent::Finish { .. });
            for out in shaper.on(event) {
                yield Ok(sse_event(out.name(), &out));
            }
            if finished {
                break;
            }
        }
    }
}

/// Anthropic's error body for `err`, as it would be answered now.
pub fn error_body(err: &ApiError) -> AnthropicErrorBody {
    body(
        err.anthropic_type(),
        err.anthropic_message(err.body().error.message),
    )
}

pub(crate) fn body(kind: &str, message: String) -> AnthropicErrorBody {
    AnthropicErrorBody {
        kind: "error".into(),
        error: AnthropicError {
            kind: kind.to_owned(),
            message,
        },
        request_id: crate::scoped::request_id(),
    }
}

/// The `error` event that ends a stream which failed after it started.
/// Built as if inside the request, so a server error quotes its id.
fn error_event(request_id: Option<&str>, err: ApiError) -> Bytes {
    let make = || sse_event("error", &error_body(&err));
    match request_id {
        Some(id) => crate::scoped::in_request(id.to_owned(), make),
        None => make(),
    }
}
