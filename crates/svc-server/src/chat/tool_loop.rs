//! The tool loop of a chat completion with `mcp` tools (svc's extension,
//! as LiteLLM takes them): the calls the model makes of MCP tools are run
//! by svc, and the model asked again with their results, until it
//! answers, calls one of the client's own functions, or reaches
//! [`MAX_TOOL_CALLS`].
//!
//! The loop is a stream of engine events like any generation's, so the
//! chat shaping (whole or streamed) is unchanged: the text and reasoning
//! of every generation pass through; the MCP calls do not (the client
//! could not answer them), client function calls do (renumbered from 0);
//! one `Finish` ends it, with the usage of all generations. The calls
//! made are kept in [`Calls`], which the reply lists (`mcp_calls`). Each
//! generation goes through admission (keys, budgets, usage), and
//! dropping the stream drops the call or generation under way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use svc_api::chat::McpCallRecord;
use svc_core::{
    ChatMessage, EngineError, EngineEvent, EventStream, FinishReason, GenerateRequest, KeyRecord,
    TokenUsage, ToolCallChunk, ToolCallSpec,
};

use crate::error::ApiError;
use crate::pipeline::Metering;
use crate::state::AppState;
use crate::tools::{MAX_TOOL_CALLS, Toolset};

/// The calls made, in order, for the reply to list.
pub type Calls = Arc<Mutex<Vec<McpCallRecord>>>;

/// What the loop needs besides the first generation's events.
pub struct ToolLoop {
    pub state: AppState,
    pub key: KeyRecord,
    pub model: String,
    pub metering: Metering,
    pub toolset: Arc<Toolset>,
    /// The first generation's request.
    pub request: GenerateRequest,
    pub calls: Calls,
}

/// Where a tool call of the generation goes.
#[derive(Clone, Copy)]
enum Route {
    /// To svc: the MCP call at this place of the generation's.
    Mcp(usize),
    /// To the client, under this index.
    Client(u32),
}

/// The events of the whole loop, from the first generation's `events`.
pub fn events(run: ToolLoop, mut events: EventStream) -> EventStream {
    Box::pin(async_stream::stream! {
        let ToolLoop { state, key, model, metering, toolset, request, calls } = run;
        let mut messages = request.messages.clone();
        let mut used = TokenUsage::default();
        let mut made = 0u32;
        loop {
            let mut routes: HashMap<u32, Route> = HashMap::new();
            let mut mcp: Vec<ToolCallSpec> = Vec::new();
            let mut client = 0u32;
            let (mut text, mut reasoning) = (String::new(), String::new());
            let reason = loop {
                match events.next().await {
                    Some(Ok(EngineEvent::ToolCall(chunk))) => {
                        let route = *routes.entry(chunk.index).or_insert_with(|| {
                            let name = chunk.name.clone().unwrap_or_default();
                            if toolset.server_of(&name).is_some() {
                                let id = chunk.id.clone().unwrap_or_else(|| crate::responses::shape::new_id("call"));
                                mcp.push(ToolCallSpec { id, name, arguments: String::new() });
                                Route::Mcp(mcp.len() - 1)
                            } else {
                                client += 1;
                                Route::Client(client - 1)
                            }
                        });
                        match route {
                            Route::Mcp(at) => mcp[at].arguments.push_str(&chunk.arguments),
                            Route::Client(index) => {
                                yield Ok(EngineEvent::ToolCall(ToolCallChunk { index, ..chunk }));
                            }
                        }
                    }
                    Some(Ok(EngineEvent::Finish { reason, usage })) => {
                        used.add(usage);
                        break reason;
                    }
                    Some(Ok(event)) => {
                        match &event {
                            EngineEvent::Text(t) => text.push_str(t),
                            EngineEvent::Reasoning(r) => reasoning.push_str(r),
                            _ => {}
                        }
                        yield Ok(event);
                    }
                    Some(Err(e)) => {
                        yield Err(e);
                        return;
                    }
                    None => return,
                }
            };
            if mcp.is_empty() {
                yield Ok(EngineEvent::Finish { reason, usage: used });
                return;
            }
            let mut results = Vec::with_capacity(mcp.len());
            let mut stopped = reason == FinishReason::Length;
            for call in &mcp {
                let server = toolset.server_of(&call.name).map(|s| s.label.clone()).unwrap_or_default();
                let outcome = if stopped {
                    crate::tools::CallOutcome {
                        output: None,
                        error: Some("not called: the output was cut at max_tokens".into()),
                    }
                } else if made >= MAX_TOOL_CALLS {
                    stopped = true;
                    crate::tools::CallOutcome {
                        output: None,
                        error: Some(format!("not called: the reply reached its most tool calls ({MAX_TOOL_CALLS})")),
                    }
                } else {
                    made += 1;
                    toolset.call(&state.metrics, &call.name, &call.arguments).await
                };
                if let Ok(mut calls) = calls.lock() {
                    calls.push(McpCallRecord {
                        id: call.id.clone(),
                        server_label: server,
                        name: call.name.clone(),
                        arguments: call.arguments.clone(),
                        output: outcome.output.clone(),
                        error: outcome.error.clone(),
                    });
                }
                let said = match (outcome.output, outcome.error) {
                    (Some(output), _) => output,
                    (None, Some(error)) => format!("error: {error}"),
                    (None, None) => String::new(),
                };
                results.push(ChatMessage::Tool { tool_call_id: call.id.clone(), content: said });
            }
            if stopped || client > 0 {
                // The client answers its own calls; MCP calls past the
                // bound are not the client's to answer.
                let reason = if client > 0 {
                    FinishReason::ToolCalls
                } else if reason == FinishReason::ToolCalls {
                    FinishReason::Stop
                } else {
                    reason
                };
                yield Ok(EngineEvent::Finish { reason, usage: used });
                return;
            }
            // The model again, with the results.
            messages.push(ChatMessage::Assistant {
                content: (!text.is_empty()).then_some(text),
                tool_calls: mcp,
                reasoning: (!reasoning.is_empty()).then_some(reasoning),
            });
            messages.extend(results);
            let next = GenerateRequest { messages: messages.clone(), ..request.clone() };
            match state.admission.generate(&key, &model, next, Instant::now(), metering.clone()).await {
                Ok(generated) => events = generated.events,
                Err(refused) => {
                    yield Err(engine_error(refused.into()));
                    return;
                }
            }
        }
    })
}

/// A refusal of a later generation (a budget spent meanwhile, say), as an
/// engine error the stream can carry.
fn engine_error(error: ApiError) -> EngineError {
    match error {
        ApiError::Engine(e) => e,
        other => EngineError::Unavailable(other.to_string()),
    }
}
