//! Shaping engine events into Anthropic's Messages API: one `message`
//! body, or its Server-Sent Events (`message_start`, `content_block_*`,
//! `ping`, `message_delta`, `message_stop`), and the error event of a
//! stream that failed.
//!
//! Content blocks follow the events: reasoning is a `thinking` block (when
//! shown), text a `text` block, each tool call a `tool_use` block (an
//! `mcp_tool_use` block for a tool of a server of `mcp_servers`, which
//! svc calls: its result is an `mcp_tool_result` block), each opened when
//! its first piece arrives and closed when another kind of piece (or the
//! end) comes. With MCP servers a reply spans several generations
//! ([`super::tool_loop`]): one `message_start`, their blocks one after
//! another, and one `message_delta` with their usage summed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::Value;
use svc_api::messages::{
    AnthropicError, AnthropicErrorBody, BlockDelta, ContentBlock, McpResultText, MessageDelta,
    MessageReply, MessageStreamEvent, MessagesUsage,
};
use svc_core::{Engine, EngineEvent, EventStream, FinishReason, GenerateRequest, TokenUsage};

use crate::error::ApiError;
use crate::messages::stop::StopMatcher;
use crate::tools::CallOutcome;

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

/// A call of an MCP server's tool the model made, for svc to run.
#[derive(Debug, Clone, PartialEq)]
pub struct McpCall {
    /// Its `mcp_tool_use` block.
    pub block: u32,
    /// `mcptoolu_...`.
    pub id: String,
    pub name: String,
    /// The arguments' JSON text, as the model wrote it.
    pub arguments: String,
}

/// What one generation of the reply said: what the next one reads.
#[derive(Debug, Default)]
pub struct Turn {
    pub text: String,
    pub reasoning: String,
    /// Its calls of MCP tools.
    pub calls: Vec<McpCall>,
}

/// Turns engine events into Messages stream events, one step at a time.
pub struct Shaper {
    meta: MessageMeta,
    open: Option<(Open, u32)>,
    blocks: u32,
    pinged: bool,
    /// Whether the model called a tool of the client's.
    called: bool,
    /// The tools of MCP servers, by name: their server's `name`.
    mcp: HashMap<String, String>,
    /// The generation under way.
    turn: Turn,
    /// The usage of the generations so far.
    usage: MessagesUsage,
}

impl Shaper {
    pub fn new(meta: MessageMeta) -> Self {
        Shaper {
            meta,
            open: None,
            blocks: 0,
            pinged: false,
            called: false,
            mcp: HashMap::new(),
            turn: Turn::default(),
            usage: MessagesUsage::default(),
        }
    }

    /// The tools whose calls are `mcp_tool_use` blocks: each tool's name,
    /// with its server's.
    pub fn with_mcp(mut self, tools: HashMap<String, String>) -> Self {
        self.mcp = tools;
        self
    }

    pub fn start(&self) -> MessageStreamEvent {
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
    pub fn on(&mut self, event: EngineEvent) -> Vec<MessageStreamEvent> {
        let mut out = Vec::new();
        match event {
            EngineEvent::Reasoning(thinking) => {
                if !self.mcp.is_empty() {
                    self.turn.reasoning.push_str(&thinking);
                }
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
                if !self.mcp.is_empty() {
                    self.turn.text.push_str(&text);
                }
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
                let index = match (self.open, chunk.id) {
                    (Some((Open::Tool(open), index)), _) if open == chunk.index => index,
                    (_, id) => {
                        let name = chunk.name.unwrap_or_default();
                        // A new call: `open` finds no block of its index open.
                        self.close(&mut out);
                        match self.mcp.get(&name).cloned() {
                            Some(server_name) => {
                                let id = mcp_tool_use_id();
                                let block = self.open(
                                    Open::Tool(chunk.index),
                                    || ContentBlock::McpToolUse {
                                        id: id.clone(),
                                        name: name.clone(),
                                        server_name,
                                        input: Value::Object(serde_json::Map::new()),
                                    },
                                    &mut out,
                                );
                                self.turn.calls.push(McpCall {
                                    block,
                                    id,
                                    name,
                                    arguments: String::new(),
                                });
                                block
                            }
                            None => {
                                self.called = true;
                                let id = tool_use_id(id.as_deref());
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
                        }
                    }
                };
                if let Some(call) = self.turn.calls.iter_mut().find(|c| c.block == index) {
                    call.arguments.push_str(&chunk.arguments);
                }
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
                out.extend(self.end_generation(usage));
                out.extend(self.finish(reason, None));
            }
        }
        out
    }

    /// The end of one generation: its open block closed, its usage counted.
    pub fn end_generation(&mut self, usage: TokenUsage) -> Vec<MessageStreamEvent> {
        let mut out = Vec::new();
        self.close(&mut out);
        self.usage.input_tokens += usage.uncached_prompt_tokens();
        self.usage.output_tokens += usage.completion_tokens;
        self.usage.cache_read_input_tokens += usage.cached_tokens;
        out
    }

    /// What the generation that ended said (taken).
    pub fn take_turn(&mut self) -> Turn {
        std::mem::take(&mut self.turn)
    }

    /// Whether the model called a tool of the client's: the reply ends
    /// for the client to run it.
    pub fn waits_for_client(&self) -> bool {
        self.called
    }

    /// The `mcp_tool_result` block of `call`.
    pub fn call_done(&mut self, call: &McpCall, outcome: &CallOutcome) -> Vec<MessageStreamEvent> {
        let mut out = Vec::new();
        self.close(&mut out);
        let index = self.blocks;
        self.blocks += 1;
        let (is_error, text) = match (&outcome.output, &outcome.error) {
            (_, Some(error)) => (true, error.clone()),
            (Some(output), None) => (false, output.clone()),
            (None, None) => (false, String::new()),
        };
        out.push(MessageStreamEvent::ContentBlockStart {
            index,
            content_block: ContentBlock::McpToolResult {
                tool_use_id: call.id.clone(),
                is_error,
                content: vec![McpResultText {
                    kind: "text".into(),
                    text,
                }],
            },
        });
        if !std::mem::replace(&mut self.pinged, true) {
            out.push(MessageStreamEvent::Ping);
        }
        out.push(MessageStreamEvent::ContentBlockStop { index });
        out
    }

    /// The end of the reply: why it stopped (`reason` of its last
    /// generation, unless `instead` says otherwise), the usage of every
    /// generation.
    pub fn finish(
        &mut self,
        reason: FinishReason,
        instead: Option<&str>,
    ) -> Vec<MessageStreamEvent> {
        let mut out = Vec::new();
        self.close(&mut out);
        if !std::mem::replace(&mut self.pinged, true) {
            out.push(MessageStreamEvent::Ping);
        }
        let stop_sequence = self.meta.stop_sequence();
        let stop_reason = match (instead, reason) {
            (Some(instead), _) => instead,
            (None, FinishReason::Length) => "max_tokens",
            (None, FinishReason::ToolCalls | FinishReason::Stop) if self.called => "tool_use",
            // Without MCP servers every call is the client's.
            (None, FinishReason::ToolCalls) if self.mcp.is_empty() => "tool_use",
            (None, FinishReason::Stop) if stop_sequence.is_some() => "stop_sequence",
            (None, FinishReason::Stop | FinishReason::ToolCalls) => "end_turn",
        };
        out.push(MessageStreamEvent::MessageDelta {
            delta: MessageDelta {
                stop_reason: Some(stop_reason.into()),
                stop_sequence,
            },
            usage: self.usage,
        });
        out.push(MessageStreamEvent::MessageStop);
        out
    }
}

/// A fresh id of an `mcp_tool_use` block.
fn mcp_tool_use_id() -> String {
    format!("mcptoolu_{}", hex::encode(rand::random::<[u8; 12]>()))
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
    let mut collector = Collector::new(shaper.start())?;
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
            collector.add(out);
        }
        if finished {
            break;
        }
    }
    Ok(collector.reply())
}

/// A whole `message`, built from the stream events of its reply.
pub struct Collector {
    reply: MessageReply,
    /// Tool inputs arrive as JSON text; they are parsed when complete.
    inputs: Vec<Option<String>>,
}

impl Collector {
    /// From the reply's `message_start`.
    pub fn new(start: MessageStreamEvent) -> Result<Self, ApiError> {
        let MessageStreamEvent::MessageStart { message } = start else {
            return Err(ApiError::Internal("no message_start".into()));
        };
        Ok(Collector {
            reply: message,
            inputs: Vec::new(),
        })
    }

    pub fn add(&mut self, event: MessageStreamEvent) {
        let reply = &mut self.reply;
        match event {
            MessageStreamEvent::ContentBlockStart { content_block, .. } => {
                self.inputs.push(
                    matches!(
                        content_block,
                        ContentBlock::ToolUse { .. } | ContentBlock::McpToolUse { .. }
                    )
                    .then(String::new),
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
                        Some(ContentBlock::ToolUse { .. } | ContentBlock::McpToolUse { .. }),
                        BlockDelta::InputJsonDelta { partial_json },
                    ) => {
                        if let Some(Some(json)) = self.inputs.get_mut(i) {
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

    /// The message, its tool inputs parsed.
    pub fn reply(mut self) -> MessageReply {
        for (block, json) in self.reply.content.iter_mut().zip(self.inputs) {
            if let (
                ContentBlock::ToolUse { input, .. } | ContentBlock::McpToolUse { input, .. },
                Some(json),
            ) = (block, json)
            {
                *input = tool_input(&json);
            }
        }
        self.reply
    }
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
pub(crate) fn sse_event(name: &str, json: &impl serde::Serialize) -> Bytes {
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
pub(crate) fn error_event(request_id: Option<&str>, err: ApiError) -> Bytes {
    let make = || sse_event("error", &error_body(&err));
    match request_id {
        Some(id) => crate::scoped::in_request(id.to_owned(), make),
        None => make(),
    }
}
