//! The tool loop of a message with `mcp_servers`: the model's calls of the
//! servers' tools run by svc at once (this dialect has no approvals), and
//! the model asked again with their results, until it answers, calls a
//! tool of the client's, or reaches [`MAX_TOOL_CALLS`].
//!
//! [`prepare`] does what must happen before the first generation, so that
//! its failures are the request's status (in Anthropic's shape, naming
//! the field): the servers resolved (a registered one by its name or URL,
//! an ad-hoc one through the guard) and their tools listed and offered.
//! [`drive`] then reads the generations' events into one reply: a single
//! `message_start`, each generation's blocks with an `mcp_tool_result`
//! block after each `mcp_tool_use`, and one `message_delta` with the
//! generations' usage summed. Each generation goes through admission like
//! any other (keys, budgets, usage), on every engine; dropping the reply
//! (a client gone) drops the call or the generation under way.
//!
//! It mirrors [`crate::responses::tool_loop`], less what only Responses
//! has (approvals, stored conversations, tool lists reused).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use svc_api::messages::{MessageReply, MessageStreamEvent};
use svc_core::{
    ChatMessage, EngineEvent, EventStream, FinishReason, GenerateRequest, KeyRecord, ToolCallSpec,
    ToolChoiceSpec, ValidationError,
};

use super::shape::{Collector, McpCall, MessageMeta, Shaper, StoppedBy, error_event, sse_event};
use crate::admission::{Generated, Refusal};
use crate::error::ApiError;
use crate::pipeline::Metering;
use crate::state::AppState;
use crate::tools::{CallOutcome, MAX_TOOL_CALLS, McpToolRequest, Toolset};

/// The servers of a request, resolved, and what the reply calls them.
pub struct Prepared {
    pub toolset: Arc<Toolset>,
    /// Each offered tool's server, by the `name` the request gave it.
    pub servers: HashMap<String, String>,
}

/// Resolves the request's MCP servers (`asked`) and offers their tools in
/// `request`, beside its custom tools.
pub async fn prepare(
    state: &AppState,
    key: &KeyRecord,
    asked: Vec<McpToolRequest>,
    request: &mut GenerateRequest,
) -> Result<Prepared, ApiError> {
    // The request's name of each server, by its field: a registered server
    // named by its URL is resolved under its label.
    let names: HashMap<String, String> = asked
        .iter()
        .map(|r| (r.param.clone(), r.label.clone()))
        .collect();
    let asked = asked
        .into_iter()
        .map(|r| super::mcp::registered(&state.mcp, key, r))
        .collect::<Result<Vec<_>, _>>()?;
    let toolset = Toolset::resolve(
        &state.mcp,
        |label| key.may_use_mcp_server(label),
        asked,
        |_| None,
    )
    .await?;
    let mut servers = HashMap::new();
    for server in toolset.servers() {
        let name = names.get(&server.param).unwrap_or(&server.label);
        for tool in &server.tools {
            servers.insert(tool.name.clone(), name.clone());
        }
    }
    for spec in toolset.specs() {
        if request.tools.iter().any(|t| t.name == spec.name) {
            let server = toolset.server_of(&spec.name).map(|s| s.param.clone());
            return Err(ValidationError::new(
                server.unwrap_or_else(|| "tools".into()),
                format!(
                    "the MCP tool {:?} has the name of a custom tool; disable it in its mcp_toolset",
                    spec.name
                ),
            )
            .into());
        }
        request.tools.push(spec);
    }
    if let ToolChoiceSpec::Function(name) = &request.tool_choice
        && !request.tools.iter().any(|t| t.name == *name)
    {
        return Err(ValidationError::new(
            "tool_choice.name",
            format!("tool_choice names {name:?}, which is not among the tools offered"),
        )
        .into());
    }
    if request.tools.is_empty() {
        request.tool_choice = ToolChoiceSpec::None;
    }
    Ok(Prepared {
        toolset: Arc::new(toolset),
        servers,
    })
}

/// A request's stop sequences, and where the one that ended it is said.
#[derive(Clone)]
pub struct Stops {
    pub sequences: Vec<String>,
    pub stopped_by: StoppedBy,
}

/// One generation of the reply, its text matched against the request's
/// stop sequences (see [`super::shape::stop_sequences`]).
pub async fn generate(
    state: &AppState,
    key: &KeyRecord,
    model: &str,
    request: GenerateRequest,
    arrived: Instant,
    metering: Metering,
    stops: Stops,
) -> Result<Generated, Refusal> {
    let Stops {
        sequences: stops,
        stopped_by,
    } = stops;
    state
        .admission
        .generate_with(
            key,
            model,
            request,
            arrived,
            metering,
            |engine, generate| {
                // Only a request with stop sequences pays for the matching.
                let with_stops =
                    (!stops.is_empty()).then(|| (engine.clone(), generate.clone(), stops));
                move |events| match with_stops {
                    Some((engine, generate, stops)) => {
                        super::shape::stop_sequences(stops, stopped_by, engine, generate, events)
                    }
                    None => events,
                }
            },
        )
        .await
}

/// Everything the loop needs after the first generation started.
pub struct Run {
    pub state: AppState,
    pub key: KeyRecord,
    pub model: String,
    pub metering: Metering,
    pub toolset: Arc<Toolset>,
    /// The first generation's request (the prompt, before the reply).
    pub request: GenerateRequest,
    pub stops: Stops,
}

/// A step of the reply: an event, or the failure that ends it.
pub enum Step {
    Event(MessageStreamEvent),
    Failed(ApiError),
}

/// The reply's events, from the first generation's `events` to the end of
/// the loop.
pub fn drive(
    run: Run,
    meta: MessageMeta,
    servers: HashMap<String, String>,
    mut events: EventStream,
) -> impl Stream<Item = Step> + Send + 'static {
    let Run {
        state,
        key,
        model,
        metering,
        toolset,
        request,
        stops,
    } = run;
    let mut shaper = Shaper::new(meta).with_mcp(servers);
    async_stream::stream! {
        yield Step::Event(shaper.start());
        let mut prompt = request;
        let mut calls = 0u32;
        loop {
            // One generation, to its end.
            let finished = loop {
                match events.next().await {
                    Some(Ok(EngineEvent::Finish { reason, usage })) => break Ok((reason, usage)),
                    Some(Ok(event)) => {
                        for out in shaper.on(event) {
                            yield Step::Event(out);
                        }
                    }
                    Some(Err(e)) => break Err(ApiError::from(e)),
                    None => break Err(ApiError::Internal("engine stream ended without finishing".into())),
                }
            };
            let (reason, usage) = match finished {
                Ok(ended) => ended,
                Err(e) => {
                    yield Step::Failed(e);
                    return;
                }
            };
            for out in shaper.end_generation(usage) {
                yield Step::Event(out);
            }
            let turn = shaper.take_turn();
            if turn.calls.is_empty() {
                for out in shaper.finish(reason, None) {
                    yield Step::Event(out);
                }
                return;
            }
            // Each call runs, or says why it did not.
            let mut stopped = None;
            let mut results = Vec::with_capacity(turn.calls.len());
            for call in &turn.calls {
                let outcome = if reason == FinishReason::Length {
                    stopped = Some("max_tokens");
                    not_called("the output was cut at max_tokens")
                } else if calls >= MAX_TOOL_CALLS {
                    // Anthropic's word for a turn the server broke off: sent
                    // back, the conversation goes on from here.
                    stopped = Some("pause_turn");
                    not_called(&format!("this reply made its most tool calls ({MAX_TOOL_CALLS})"))
                } else {
                    calls += 1;
                    toolset.call(&state.metrics, &call.name, &call.arguments).await
                };
                for out in shaper.call_done(call, &outcome) {
                    yield Step::Event(out);
                }
                results.push(outcome);
            }
            if stopped.is_some() || shaper.waits_for_client() {
                for out in shaper.finish(reason, stopped) {
                    yield Step::Event(out);
                }
                return;
            }
            // The model again, with the results.
            prompt.messages.extend(turn_messages(turn.text, turn.reasoning, &turn.calls, &results));
            match generate(&state, &key, &model, prompt.clone(), Instant::now(), metering.clone(), stops.clone()).await {
                Ok(generated) => events = generated.events,
                Err(refused) => {
                    yield Step::Failed(refused.into());
                    return;
                }
            }
        }
    }
}

fn not_called(why: &str) -> CallOutcome {
    CallOutcome {
        output: None,
        error: Some(format!("not called: {why}")),
    }
}

/// A generation's turn as the next one reads it: the assistant's text
/// and calls, then each call's result as a tool message (an error as
/// `Error: ...`, as a `tool_result` block with `is_error` is read).
fn turn_messages(
    text: String,
    reasoning: String,
    calls: &[McpCall],
    results: &[CallOutcome],
) -> Vec<ChatMessage> {
    let mut out = vec![ChatMessage::Assistant {
        content: (!text.is_empty()).then_some(text),
        tool_calls: calls
            .iter()
            .map(|c| ToolCallSpec {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            })
            .collect(),
        reasoning: (!reasoning.is_empty()).then_some(reasoning),
    }];
    for (call, outcome) in calls.iter().zip(results) {
        let content = match (&outcome.output, &outcome.error) {
            (_, Some(error)) => format!("Error: {error}"),
            (Some(output), None) => output.clone(),
            (None, None) => String::new(),
        };
        out.push(ChatMessage::Tool {
            tool_call_id: call.id.clone(),
            content,
        });
    }
    out
}

/// The reply whole: its events folded into one `message`; a failure is
/// the request's.
pub async fn collect(steps: impl Stream<Item = Step>) -> Result<MessageReply, ApiError> {
    let mut steps = std::pin::pin!(steps);
    let mut collector = None;
    while let Some(step) = steps.next().await {
        match step {
            Step::Event(event @ MessageStreamEvent::MessageStart { .. }) => {
                collector = Some(Collector::new(event)?);
            }
            Step::Event(event) => {
                if let Some(collector) = collector.as_mut() {
                    collector.add(event);
                }
            }
            Step::Failed(e) => return Err(e),
        }
    }
    collector
        .map(Collector::reply)
        .ok_or_else(|| ApiError::Internal("the reply ended without a message".into()))
}

/// The reply streamed: each event as SSE, a failure as the last `error`
/// event.
pub fn sse(
    steps: impl Stream<Item = Step> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let request_id = crate::scoped::request_id();
    steps.map(move |step| {
        Ok(match step {
            Step::Event(event) => sse_event(event.name(), &event),
            Step::Failed(e) => error_event(request_id.as_deref(), e),
        })
    })
}
