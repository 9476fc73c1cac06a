//! Shaping engine events into the Responses API's forms: the output items
//! of one `response` object, and the streamed events that build it.
//!
//! One [`Shaper`] does both: each engine event yields the stream events it
//! makes (which a whole reply drops) and grows the response's output. The
//! events follow OpenAI's sequence: `response.created`,
//! `response.in_progress`; per output item `response.output_item.added`,
//! its content part's `response.content_part.added`, deltas
//! (`response.output_text.delta`, `response.reasoning_text.delta`,
//! `response.function_call_arguments.delta`), their `.done`,
//! `response.content_part.done`, `response.output_item.done`; then
//! `response.completed` or `response.incomplete`, or after a failure an
//! `error` event and `response.failed`. `sequence_number` counts every
//! event from 0.

use bytes::Bytes;
use serde_json::{Value, json};
use svc_api::responses::{
    IncompleteDetails, InputTokensDetails, OutputItem, OutputText, OutputTokensDetails,
    ReasoningText, ResponseError, ResponseObject, ResponseUsage,
};
use svc_core::{EngineEvent, FinishReason, TokenUsage, ToolCallChunk};

use crate::error::ApiError;

/// One streamed event: its `type` and the JSON it carries (with `type`
/// and `sequence_number` in it).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamEvent {
    pub kind: &'static str,
    pub data: Value,
}

impl StreamEvent {
    /// `event: <type>\ndata: <json>\n\n`, as OpenAI sends it.
    pub fn to_sse(&self) -> Bytes {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(b"event: ");
        buf.extend_from_slice(self.kind.as_bytes());
        buf.extend_from_slice(b"\ndata: ");
        // Serializing a `Value` cannot fail.
        let _ = serde_json::to_writer(&mut buf, &self.data);
        buf.extend_from_slice(b"\n\n");
        Bytes::from(buf)
    }
}

/// The output item being generated.
enum Open {
    Reasoning { id: String, text: String },
    Message { id: String, text: String },
    Call { index: u32, item: CallItem },
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
    sequence: u64,
    open: Option<Open>,
}

/// A fresh id: `prefix` and 24 hexadecimal digits.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", hex::encode(rand::random::<[u8; 12]>()))
}

fn usage(u: TokenUsage) -> ResponseUsage {
    ResponseUsage {
        input_tokens: u.prompt_tokens,
        input_tokens_details: InputTokensDetails::default(),
        output_tokens: u.completion_tokens,
        output_tokens_details: OutputTokensDetails::default(),
        total_tokens: u.prompt_tokens + u.completion_tokens,
    }
}

impl Shaper {
    /// Starts from the response as it is before any output
    /// (`in_progress`).
    pub fn new(response: ResponseObject) -> Self {
        Shaper {
            response,
            sequence: 0,
            open: None,
        }
    }

    /// The response as it stands.
    pub fn response(&self) -> &ResponseObject {
        &self.response
    }

    /// The response, once done.
    pub fn into_response(self) -> ResponseObject {
        self.response
    }

    fn event(&mut self, kind: &'static str, mut data: Value) -> StreamEvent {
        if let Value::Object(map) = &mut data {
            map.insert("type".into(), json!(kind));
            map.insert("sequence_number".into(), json!(self.sequence));
        }
        self.sequence += 1;
        StreamEvent { kind, data }
    }

    fn snapshot(&self) -> Value {
        serde_json::to_value(&self.response).unwrap_or(Value::Null)
    }

    /// `response.created` and `response.in_progress`.
    pub fn start(&mut self) -> Vec<StreamEvent> {
        let created = json!({ "response": self.snapshot() });
        let created = self.event("response.created", created);
        let progress = json!({ "response": self.snapshot() });
        vec![created, self.event("response.in_progress", progress)]
    }

    /// The index the next output item gets.
    fn next_index(&self) -> usize {
        self.response.output.len()
    }

    /// The events of one engine event (`Finish` goes to [`Shaper::finish`]).
    pub fn on(&mut self, event: EngineEvent) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        match event {
            EngineEvent::Reasoning(delta) => {
                if !matches!(self.open, Some(Open::Reasoning { .. })) {
                    self.close("completed", &mut out);
                    let id = new_id("rs");
                    let index = self.next_index();
                    let item = json!({"id": id, "type": "reasoning", "summary": [],
                        "content": [], "status": "in_progress"});
                    out.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": index, "item": item}),
                    ));
                    out.push(self.event(
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": index, "content_index": 0,
                            "part": {"type": "reasoning_text", "text": ""}}),
                    ));
                    self.open = Some(Open::Reasoning {
                        id,
                        text: String::new(),
                    });
                }
                let index = self.next_index();
                if let Some(Open::Reasoning { id, text }) = &mut self.open {
                    text.push_str(&delta);
                    let data = json!({"item_id": id, "output_index": index,
                        "content_index": 0, "delta": delta});
                    out.push(self.event("response.reasoning_text.delta", data));
                }
            }
            EngineEvent::Text(delta) => {
                if !matches!(self.open, Some(Open::Message { .. })) {
                    self.close("completed", &mut out);
                    let id = new_id("msg");
                    let index = self.next_index();
                    let item = json!({"id": id, "type": "message", "role": "assistant",
                        "status": "in_progress", "content": []});
                    out.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": index, "item": item}),
                    ));
                    let part = OutputText::new(String::new());
                    out.push(self.event(
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": index, "content_index": 0,
                            "part": part}),
                    ));
                    self.open = Some(Open::Message {
                        id,
                        text: String::new(),
                    });
                }
                let index = self.next_index();
                if let Some(Open::Message { id, text }) = &mut self.open {
                    text.push_str(&delta);
                    let data = json!({"item_id": id, "output_index": index,
                        "content_index": 0, "delta": delta, "logprobs": []});
                    out.push(self.event("response.output_text.delta", data));
                }
            }
            EngineEvent::ToolCall(chunk) => self.tool_call(chunk, &mut out),
            // Not asked for: Responses requests have n = 1 and no logprobs.
            EngineEvent::Logprobs(_) | EngineEvent::Choice(_) => {}
            EngineEvent::Finish { reason, usage } => out = self.finish(reason, usage),
        }
        out
    }

    fn tool_call(&mut self, chunk: ToolCallChunk, out: &mut Vec<StreamEvent>) {
        let same = matches!(&self.open, Some(Open::Call { index, .. }) if *index == chunk.index);
        if !same {
            self.close("completed", out);
            let item = CallItem {
                id: new_id("fc"),
                call_id: chunk.id.clone().unwrap_or_else(|| new_id("call")),
                name: chunk.name.clone().unwrap_or_default(),
                arguments: String::new(),
            };
            let index = self.next_index();
            let added = json!({"output_index": index, "item": {
                "id": item.id, "type": "function_call", "status": "in_progress",
                "call_id": item.call_id, "name": item.name, "arguments": ""}});
            out.push(self.event("response.output_item.added", added));
            self.open = Some(Open::Call {
                index: chunk.index,
                item,
            });
        }
        if chunk.arguments.is_empty() {
            return;
        }
        let index = self.next_index();
        if let Some(Open::Call { item, .. }) = &mut self.open {
            item.arguments.push_str(&chunk.arguments);
            let data = json!({"item_id": item.id, "output_index": index,
                "delta": chunk.arguments});
            out.push(self.event("response.function_call_arguments.delta", data));
        }
    }

    /// Ends the open item with `status`: its `.done` events, and the item
    /// joins the output.
    fn close(&mut self, status: &str, out: &mut Vec<StreamEvent>) {
        let Some(open) = self.open.take() else {
            return;
        };
        let index = self.next_index();
        let item = match open {
            Open::Reasoning { id, text } => {
                out.push(self.event(
                    "response.reasoning_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                ));
                let part = ReasoningText::new(text);
                out.push(self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                ));
                OutputItem::Reasoning {
                    id,
                    summary: Vec::new(),
                    content: vec![part],
                    status: status.into(),
                }
            }
            Open::Message { id, text } => {
                out.push(self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                        "text": text, "logprobs": []}),
                ));
                let part = OutputText::new(text);
                out.push(self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                ));
                OutputItem::Message {
                    id,
                    role: "assistant".into(),
                    status: status.into(),
                    content: vec![part],
                }
            }
            Open::Call { item, .. } => {
                out.push(self.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": item.id, "output_index": index,
                        "name": item.name, "arguments": item.arguments}),
                ));
                OutputItem::FunctionCall {
                    id: item.id,
                    call_id: item.call_id,
                    name: item.name,
                    arguments: item.arguments,
                    status: status.into(),
                }
            }
        };
        let done = json!({"output_index": index, "item": item});
        self.response.output.push(item);
        out.push(self.event("response.output_item.done", done));
    }

    /// Closes the open item and the response: `completed`, or `incomplete`
    /// when the token cap cut it.
    pub fn finish(&mut self, reason: FinishReason, used: TokenUsage) -> Vec<StreamEvent> {
        let mut out = self.finish_output(reason, used);
        out.push(self.done());
        out
    }

    /// [`Shaper::finish`] but for the event that ends the stream: the
    /// response is whole and may be stored before the client hears it is
    /// done ([`Shaper::done`]), or fails ([`Shaper::fail`]).
    pub fn finish_output(&mut self, reason: FinishReason, used: TokenUsage) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        let cut = reason == FinishReason::Length;
        self.close(if cut { "incomplete" } else { "completed" }, &mut out);
        self.response.usage = Some(usage(used));
        if cut {
            self.response.status = "incomplete".into();
            self.response.incomplete_details = Some(IncompleteDetails {
                reason: "max_output_tokens".into(),
            });
        } else {
            self.response.status = "completed".into();
        }
        out
    }

    /// `response.completed` or `response.incomplete`, after
    /// [`Shaper::finish_output`].
    pub fn done(&mut self) -> StreamEvent {
        let kind = if self.response.status == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        let data = json!({ "response": self.snapshot() });
        self.event(kind, data)
    }

    /// After a failure: an `error` event (the error's `code`, `message` and
    /// `param`), then `response.failed` with what was generated.
    pub fn fail(&mut self, error: &ApiError) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        self.close("incomplete", &mut out);
        let body = error.body().error;
        let code = body.code.unwrap_or_else(|| "server_error".into());
        out.push(self.event(
            "error",
            json!({"code": code, "message": body.message, "param": body.param}),
        ));
        self.response.status = "failed".into();
        self.response.error = Some(ResponseError {
            code,
            message: body.message,
        });
        let data = json!({ "response": self.snapshot() });
        out.push(self.event("response.failed", data));
        out
    }
}
