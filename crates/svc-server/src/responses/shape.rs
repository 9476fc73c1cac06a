//! Shaping engine events into the Responses API's forms: the output items
//! of one `response` object, and the streamed events that build it.
//!
//! One [`Shaper`] does both: each engine event grows the response's output
//! and, for a stream, yields the Server-Sent Events it makes (typed
//! [`ResponseEvent`]s, serialized at once from what they borrow; a whole
//! reply makes none). The events follow OpenAI's sequence:
//! `response.created`, `response.in_progress`; per output item
//! `response.output_item.added`, its content part's
//! `response.content_part.added`, deltas (`response.output_text.delta`,
//! `response.reasoning_text.delta`, `response.function_call_arguments.delta`),
//! their `.done`, `response.content_part.done`, `response.output_item.done`;
//! then `response.completed` or `response.incomplete`, or after a failure
//! an `error` event and `response.failed`. `sequence_number` counts every
//! event from 0.
//!
//! With `mcp` tools, the response spans several generations (the tool
//! loop): a server's `mcp_list_tools` item comes first
//! (`response.mcp_list_tools.in_progress`, `.completed`); a call of an MCP
//! tool is an `mcp_call` item (`response.mcp_call.in_progress`,
//! `response.mcp_call_arguments.delta`, `.done`), left pending until svc
//! ran it (`response.mcp_call.completed` or `.failed`, then
//! `response.output_item.done` with its output or error); a call that
//! waits for approval is an `mcp_approval_request` item, shown whole when
//! the model is done with it. Usage adds up the generations.

use bytes::Bytes;
use std::collections::HashMap;

use svc_api::responses::{
    ContentPart, IncompleteDetails, InputTokensDetails, McpPhase, McpToolInfo, OutputItem,
    OutputText, OutputTokensDetails, ReasoningText, ResponseError, ResponseEvent, ResponseObject,
    ResponseUsage, StreamEvent,
};
use svc_core::{EngineEvent, FinishReason, TokenUsage, ToolCallChunk};

use crate::error::ApiError;
use crate::tools::CallOutcome;

/// The frames of a stream being written: `event: <type>\ndata: <json>\n\n`
/// each, as OpenAI sends them. For a whole reply, none are written.
struct Frames {
    stream: bool,
    sequence: u64,
    out: Vec<Bytes>,
}

impl Frames {
    fn emit(&mut self, event: ResponseEvent<'_>) {
        if !self.stream {
            return;
        }
        let event = StreamEvent::new(event, self.sequence);
        self.sequence += 1;
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(b"event: ");
        buf.extend_from_slice(event.kind.as_bytes());
        buf.extend_from_slice(b"\ndata: ");
        if let Err(e) = serde_json::to_writer(&mut buf, &event) {
            // Our own types always serialize; were one not to, the stream
            // says so rather than sending a broken frame.
            tracing::error!(error = %e, kind = event.kind, "a stream event does not serialize");
            return;
        }
        buf.extend_from_slice(b"\n\n");
        self.out.push(Bytes::from(buf));
    }

    fn take(&mut self) -> Vec<Bytes> {
        std::mem::take(&mut self.out)
    }
}

/// The output item being generated.
enum Open {
    Reasoning {
        id: String,
        text: String,
    },
    Message {
        id: String,
        text: String,
    },
    Call {
        index: u32,
        item: CallItem,
    },
    /// A call of an MCP server's tool; `approval` when it waits for the
    /// client's (then nothing is shown until it is whole).
    Mcp {
        index: u32,
        item: CallItem,
        label: String,
        approval: bool,
    },
}

/// How a tool the model may call is served, by its name: an MCP server's
/// (its label, and whether a call waits for approval).
pub type McpTools = HashMap<String, (String, bool)>;

/// A call of an MCP tool the model made, due to run.
pub struct DueCall {
    /// Its item's place in the output.
    pub output_index: usize,
    pub name: String,
    pub arguments: String,
}

struct CallItem {
    id: String,
    call_id: String,
    name: String,
    arguments: String,
}

/// Builds one response from engine events.
pub struct Shaper {
    response: ResponseObject,
    open: Option<Open>,
    frames: Frames,
    mcp: McpTools,
    /// The MCP calls made in this generation, not yet run.
    due: Vec<DueCall>,
    /// The usage of the generations before this one.
    used: TokenUsage,
    /// Why the response stops short, when not for its token cap.
    stopped: Option<&'static str>,
}

/// A fresh id: `prefix` and 24 hexadecimal digits.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", hex::encode(rand::random::<[u8; 12]>()))
}

fn usage(u: TokenUsage) -> ResponseUsage {
    ResponseUsage {
        input_tokens: u.prompt_tokens,
        input_tokens_details: InputTokensDetails {
            cached_tokens: u.cached_tokens,
            cache_write_tokens: 0,
        },
        output_tokens: u.completion_tokens,
        output_tokens_details: OutputTokensDetails::default(),
        total_tokens: u.prompt_tokens + u.completion_tokens,
    }
}

impl Shaper {
    /// Starts from the response as it is before any output
    /// (`in_progress`); `stream` says whether events are wanted.
    pub fn new(response: ResponseObject, stream: bool) -> Self {
        Shaper {
            response,
            open: None,
            frames: Frames {
                stream,
                sequence: 0,
                out: Vec::new(),
            },
            mcp: McpTools::new(),
            due: Vec::new(),
            used: TokenUsage::default(),
            stopped: None,
        }
    }

    /// The same, calls of the tools `mcp` names becoming MCP items.
    pub fn with_mcp(self, mcp: McpTools) -> Self {
        Shaper { mcp, ..self }
    }

    /// A server's tools as offered, an `mcp_list_tools` item.
    pub fn listed(&mut self, label: &str, tools: &[svc_mcp::Tool]) -> Vec<Bytes> {
        let output_index = self.next_index();
        let item = OutputItem::McpListTools {
            id: new_id("mcpl"),
            server_label: label.to_owned(),
            tools: tools
                .iter()
                .map(|t| McpToolInfo {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    input_schema: t.input_schema.clone(),
                    annotations: t.annotations.clone(),
                })
                .collect(),
            error: None,
        };
        let OutputItem::McpListTools { id, .. } = &item else {
            return Vec::new();
        };
        let item_id = id.as_str();
        self.frames.emit(ResponseEvent::OutputItemAdded {
            output_index,
            item: &item,
        });
        for phase in [McpPhase::InProgress, McpPhase::Completed] {
            self.frames.emit(ResponseEvent::McpListTools {
                phase,
                item_id,
                output_index,
            });
        }
        self.frames.emit(ResponseEvent::OutputItemDone {
            output_index,
            item: &item,
        });
        self.response.output.push(item);
        self.frames.take()
    }

    /// A call run before the model was asked (one the client approved),
    /// done: its `mcp_call` item, with the events of its run.
    pub fn ran(&mut self, item: OutputItem) -> Vec<Bytes> {
        let OutputItem::McpCall {
            id,
            server_label,
            name,
            arguments,
            approval_request_id,
            error,
            ..
        } = &item
        else {
            return Vec::new();
        };
        let output_index = self.next_index();
        self.added(output_index, || OutputItem::McpCall {
            id: id.clone(),
            server_label: server_label.clone(),
            name: name.clone(),
            arguments: arguments.clone(),
            output: None,
            error: None,
            status: "in_progress".into(),
            approval_request_id: approval_request_id.clone(),
        });
        let item_id = id.as_str();
        let done = if error.is_some() {
            McpPhase::Failed
        } else {
            McpPhase::Completed
        };
        for phase in [McpPhase::InProgress, done] {
            self.frames.emit(ResponseEvent::McpCall {
                phase,
                item_id,
                output_index,
            });
        }
        self.frames.emit(ResponseEvent::OutputItemDone {
            output_index,
            item: &item,
        });
        self.response.output.push(item);
        self.frames.take()
    }

    /// The MCP calls the model made in the generation just ended, to run.
    pub fn take_due(&mut self) -> Vec<DueCall> {
        std::mem::take(&mut self.due)
    }

    /// Whether the generation just ended asked for an approval or called
    /// one of the client's functions: the response ends there.
    pub fn waits_for_client(&self, since: usize) -> bool {
        self.response.output[since.min(self.response.output.len())..]
            .iter()
            .any(|item| {
                matches!(
                    item,
                    OutputItem::McpApprovalRequest { .. } | OutputItem::FunctionCall { .. }
                )
            })
    }

    /// The outcome of the call at `output_index`: its item done, with its
    /// output or error.
    pub fn call_done(&mut self, output_index: usize, outcome: &CallOutcome) -> Vec<Bytes> {
        let Some(OutputItem::McpCall {
            id,
            output,
            error,
            status,
            ..
        }) = self.response.output.get_mut(output_index)
        else {
            return Vec::new();
        };
        output.clone_from(&outcome.output);
        error.clone_from(&outcome.error);
        let failed = outcome.error.is_some();
        *status = if failed { "failed" } else { "completed" }.into();
        let phase = if failed {
            McpPhase::Failed
        } else {
            McpPhase::Completed
        };
        self.frames.emit(ResponseEvent::McpCall {
            phase,
            item_id: id,
            output_index,
        });
        if let Some(item) = self.response.output.get(output_index) {
            self.frames
                .emit(ResponseEvent::OutputItemDone { output_index, item });
        }
        self.frames.take()
    }

    /// The call at `output_index` not run: the response reached its most
    /// tool calls (`max_tool_calls`), and stops there, `incomplete`.
    pub fn call_not_run(&mut self, output_index: usize, limit: u32) -> Vec<Bytes> {
        self.stopped = Some("max_tool_calls");
        let outcome = CallOutcome {
            output: None,
            error: Some(format!(
                "not called: the response reached its most tool calls (max_tool_calls {limit})"
            )),
        };
        let out = self.call_done(output_index, &outcome);
        if let Some(OutputItem::McpCall { status, .. }) = self.response.output.get_mut(output_index)
        {
            *status = "incomplete".into();
        }
        out
    }

    /// Ends one generation of several: its open item closes and its usage
    /// counts.
    pub fn end_generation(&mut self, reason: FinishReason, used: TokenUsage) -> Vec<Bytes> {
        self.close(if reason == FinishReason::Length {
            "incomplete"
        } else {
            "completed"
        });
        self.used.add(used);
        self.frames.take()
    }

    /// How many items the output holds.
    pub fn output_len(&self) -> usize {
        self.response.output.len()
    }

    /// The response as it stands.
    pub fn response(&self) -> &ResponseObject {
        &self.response
    }

    /// `response.created` and `response.in_progress`.
    pub fn start(&mut self) -> Vec<Bytes> {
        let response = &self.response;
        self.frames.emit(ResponseEvent::Created { response });
        self.frames.emit(ResponseEvent::InProgress { response });
        self.frames.take()
    }

    /// The index the next output item gets.
    fn next_index(&self) -> usize {
        self.response.output.len()
    }

    /// The frames of one engine event (`Finish` goes to [`Shaper::finish`]).
    pub fn on(&mut self, event: EngineEvent) -> Vec<Bytes> {
        match event {
            EngineEvent::Reasoning(delta) => self.reasoning(&delta),
            EngineEvent::Text(delta) => self.text(&delta),
            EngineEvent::ToolCall(chunk) => self.tool_call(chunk),
            // Not asked for: Responses requests have n = 1 and no logprobs.
            EngineEvent::Logprobs(_) | EngineEvent::PromptLogprobs(_) | EngineEvent::Choice(_) => {}
            EngineEvent::Finish { reason, usage } => return self.finish(reason, usage),
        }
        self.frames.take()
    }

    /// An item starting at `output_index`, as `response.output_item.added`
    /// shows it (made only for a stream).
    fn added(&mut self, output_index: usize, item: impl FnOnce() -> OutputItem) {
        if self.frames.stream {
            let item = item();
            self.frames.emit(ResponseEvent::OutputItemAdded {
                output_index,
                item: &item,
            });
        }
    }

    fn reasoning(&mut self, delta: &str) {
        if !matches!(self.open, Some(Open::Reasoning { .. })) {
            self.close("completed");
            let output_index = self.next_index();
            let id = new_id("rs");
            self.added(output_index, || OutputItem::Reasoning {
                id: id.clone(),
                summary: Vec::new(),
                content: Vec::new(),
                status: "in_progress".into(),
            });
            let part = ReasoningText::new(String::new());
            self.frames.emit(ResponseEvent::ContentPartAdded {
                item_id: &id,
                output_index,
                content_index: 0,
                part: ContentPart::Reasoning(&part),
            });
            self.open = Some(Open::Reasoning {
                id,
                text: String::new(),
            });
        }
        let output_index = self.next_index();
        if let Some(Open::Reasoning { id, text }) = &mut self.open {
            text.push_str(delta);
            self.frames.emit(ResponseEvent::ReasoningTextDelta {
                item_id: id,
                output_index,
                content_index: 0,
                delta,
            });
        }
    }

    fn text(&mut self, delta: &str) {
        if !matches!(self.open, Some(Open::Message { .. })) {
            self.close("completed");
            let output_index = self.next_index();
            let id = new_id("msg");
            self.added(output_index, || OutputItem::Message {
                id: id.clone(),
                role: "assistant".into(),
                status: "in_progress".into(),
                content: Vec::new(),
            });
            let part = OutputText::new(String::new());
            self.frames.emit(ResponseEvent::ContentPartAdded {
                item_id: &id,
                output_index,
                content_index: 0,
                part: ContentPart::Text(&part),
            });
            self.open = Some(Open::Message {
                id,
                text: String::new(),
            });
        }
        let output_index = self.next_index();
        if let Some(Open::Message { id, text }) = &mut self.open {
            text.push_str(delta);
            self.frames.emit(ResponseEvent::OutputTextDelta {
                item_id: id,
                output_index,
                content_index: 0,
                delta,
                logprobs: &[],
            });
        }
    }

    fn tool_call(&mut self, chunk: ToolCallChunk) {
        let same = matches!(&self.open, Some(Open::Call { index, .. } | Open::Mcp { index, .. }) if *index == chunk.index);
        if !same {
            let served = chunk
                .name
                .as_ref()
                .and_then(|name| self.mcp.get(name))
                .cloned();
            if let Some((label, approval)) = served {
                self.mcp_call(chunk, label, approval);
                return;
            }
            self.close("completed");
            let output_index = self.next_index();
            let item = CallItem {
                id: new_id("fc"),
                call_id: chunk.id.clone().unwrap_or_else(|| new_id("call")),
                name: chunk.name.clone().unwrap_or_default(),
                arguments: String::new(),
            };
            self.added(output_index, || OutputItem::FunctionCall {
                id: item.id.clone(),
                call_id: item.call_id.clone(),
                name: item.name.clone(),
                arguments: String::new(),
                status: "in_progress".into(),
            });
            self.open = Some(Open::Call {
                index: chunk.index,
                item,
            });
        }
        if chunk.arguments.is_empty() {
            return;
        }
        self.arguments(&chunk.arguments);
    }

    /// More of the open call's arguments.
    fn arguments(&mut self, delta: &str) {
        let output_index = self.next_index();
        match &mut self.open {
            Some(Open::Call { item, .. }) => {
                item.arguments.push_str(delta);
                self.frames.emit(ResponseEvent::FunctionCallArgumentsDelta {
                    item_id: &item.id,
                    output_index,
                    delta,
                });
            }
            Some(Open::Mcp { item, approval, .. }) => {
                item.arguments.push_str(delta);
                if !*approval {
                    self.frames.emit(ResponseEvent::McpCallArgumentsDelta {
                        item_id: &item.id,
                        output_index,
                        delta,
                    });
                }
            }
            _ => {}
        }
    }

    /// A call of an MCP server's tool begins (`approval`: one that waits
    /// for the client's, shown once whole).
    fn mcp_call(&mut self, chunk: ToolCallChunk, label: String, approval: bool) {
        self.close("completed");
        let output_index = self.next_index();
        let item = CallItem {
            id: new_id(if approval { "mcpr" } else { "mcp" }),
            call_id: String::new(),
            name: chunk.name.clone().unwrap_or_default(),
            arguments: String::new(),
        };
        if !approval {
            self.added(output_index, || OutputItem::McpCall {
                id: item.id.clone(),
                server_label: label.clone(),
                name: item.name.clone(),
                arguments: String::new(),
                output: None,
                error: None,
                status: "in_progress".into(),
                approval_request_id: None,
            });
            self.frames.emit(ResponseEvent::McpCall {
                phase: McpPhase::InProgress,
                item_id: &item.id,
                output_index,
            });
        }
        self.open = Some(Open::Mcp {
            index: chunk.index,
            item,
            label,
            approval,
        });
        if !chunk.arguments.is_empty() {
            self.arguments(&chunk.arguments);
        }
    }

    /// Ends the open item with `status`: its `.done` events, and the item
    /// joins the output.
    fn close(&mut self, status: &str) {
        let Some(open) = self.open.take() else {
            return;
        };
        let output_index = self.next_index();
        let frames = &mut self.frames;
        let item = match open {
            Open::Reasoning { id, text } => {
                let (item_id, content_index) = (id.as_str(), 0);
                frames.emit(ResponseEvent::ReasoningTextDone {
                    item_id,
                    output_index,
                    content_index,
                    text: &text,
                });
                let part = ReasoningText::new(text);
                frames.emit(ResponseEvent::ContentPartDone {
                    item_id,
                    output_index,
                    content_index,
                    part: ContentPart::Reasoning(&part),
                });
                OutputItem::Reasoning {
                    id,
                    summary: Vec::new(),
                    content: vec![part],
                    status: status.into(),
                }
            }
            Open::Message { id, text } => {
                let (item_id, content_index) = (id.as_str(), 0);
                frames.emit(ResponseEvent::OutputTextDone {
                    item_id,
                    output_index,
                    content_index,
                    text: &text,
                    logprobs: &[],
                });
                let part = OutputText::new(text);
                frames.emit(ResponseEvent::ContentPartDone {
                    item_id,
                    output_index,
                    content_index,
                    part: ContentPart::Text(&part),
                });
                OutputItem::Message {
                    id,
                    role: "assistant".into(),
                    status: status.into(),
                    content: vec![part],
                }
            }
            Open::Mcp {
                item,
                label,
                approval: true,
                ..
            } => {
                let item = OutputItem::McpApprovalRequest {
                    id: item.id,
                    server_label: label,
                    name: item.name,
                    arguments: item.arguments,
                };
                frames.emit(ResponseEvent::OutputItemAdded {
                    output_index,
                    item: &item,
                });
                item
            }
            Open::Mcp { item, label, .. } => {
                frames.emit(ResponseEvent::McpCallArgumentsDone {
                    item_id: &item.id,
                    output_index,
                    arguments: &item.arguments,
                });
                // Done once it ran (`call_done`).
                self.due.push(DueCall {
                    output_index,
                    name: item.name.clone(),
                    arguments: item.arguments.clone(),
                });
                self.response.output.push(OutputItem::McpCall {
                    id: item.id,
                    server_label: label,
                    name: item.name,
                    arguments: item.arguments,
                    output: None,
                    error: None,
                    status: "in_progress".into(),
                    approval_request_id: None,
                });
                return;
            }
            Open::Call { item, .. } => {
                frames.emit(ResponseEvent::FunctionCallArgumentsDone {
                    item_id: &item.id,
                    output_index,
                    name: &item.name,
                    arguments: &item.arguments,
                });
                OutputItem::FunctionCall {
                    id: item.id,
                    call_id: item.call_id,
                    name: item.name,
                    arguments: item.arguments,
                    status: status.into(),
                }
            }
        };
        frames.emit(ResponseEvent::OutputItemDone {
            output_index,
            item: &item,
        });
        self.response.output.push(item);
    }

    /// Closes the open item and the response: `completed`, or `incomplete`
    /// when the token cap cut it.
    pub fn finish(&mut self, reason: FinishReason, used: TokenUsage) -> Vec<Bytes> {
        let mut out = self.finish_output(reason, used);
        out.extend(self.done());
        out
    }

    /// [`Shaper::finish`] but for the event that ends the stream: the
    /// response is whole and may be stored before the client hears it is
    /// done ([`Shaper::done`]), or fails ([`Shaper::fail`]).
    pub fn finish_output(&mut self, reason: FinishReason, used: TokenUsage) -> Vec<Bytes> {
        let cut = reason == FinishReason::Length;
        self.close(if cut { "incomplete" } else { "completed" });
        self.used.add(used);
        self.response.usage = Some(usage(self.used));
        let stopped = if cut {
            Some("max_output_tokens")
        } else {
            self.stopped
        };
        if let Some(reason) = stopped {
            self.response.status = "incomplete".into();
            self.response.incomplete_details = Some(IncompleteDetails {
                reason: reason.into(),
            });
        } else {
            self.response.status = "completed".into();
        }
        self.frames.take()
    }

    /// `response.completed` or `response.incomplete`, after
    /// [`Shaper::finish_output`].
    pub fn done(&mut self) -> Vec<Bytes> {
        let response = &self.response;
        self.frames.emit(if response.status == "incomplete" {
            ResponseEvent::Incomplete { response }
        } else {
            ResponseEvent::Completed { response }
        });
        self.frames.take()
    }

    /// After a failure: an `error` event (the error's `code`, `message` and
    /// `param`), then `response.failed` with what was generated.
    pub fn fail(&mut self, error: &ApiError) -> Vec<Bytes> {
        self.close("incomplete");
        let body = error.body().error;
        let code = body.code.unwrap_or_else(|| "server_error".into());
        self.frames.emit(ResponseEvent::Error {
            code: &code,
            message: &body.message,
            param: body.param.as_deref(),
        });
        self.response.status = "failed".into();
        self.response.error = Some(ResponseError {
            code,
            message: body.message,
        });
        let response = &self.response;
        self.frames.emit(ResponseEvent::Failed { response });
        self.frames.take()
    }
}
