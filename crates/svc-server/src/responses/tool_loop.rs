//! The tool loop of a response: the model's calls of `mcp` tools run by
//! svc, and the model asked again with their results, until it answers,
//! asks the client (an approval, a call of the client's own function), or
//! reaches the response's most tool calls.
//!
//! [`prepare`] does what must happen before the first generation, so that
//! its failures are the request's status: the servers resolved and their
//! tools listed (or read back from the conversation), the approvals the
//! input answers checked against the requests the conversation holds, and
//! the approved calls run. [`drive`] then reads the generations' events,
//! shaped into the reply (streamed or whole), through the loop; a denied
//! call never runs. The loop is the same on every engine: each generation
//! goes through admission like any other (keys, budgets, usage), and
//! dropping the reply (a client gone) drops the call or the generation
//! under way.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use svc_api::responses::{InputItem, OutputItem, ResponseObject};
use svc_core::{
    EngineEvent, EventStream, FinishReason, GenerateRequest, KeyRecord, TokenUsage, ValidationError,
};

use super::conversations::Keep;
use super::shape::{McpTools, Shaper};
use super::valid::{ValidResponseRequest, listed_tools, output_messages};
use crate::error::ApiError;
use crate::pipeline::Metering;
use crate::state::AppState;
use crate::tools::{CallOutcome, DailyCap, Toolset};

/// What [`prepare`] made ready: the servers, the calls run before the
/// first generation, and the request it reads.
pub struct Prepared {
    pub toolset: Arc<Toolset>,
    /// The approved calls, run: `mcp_call` items, done.
    pub ran: Vec<OutputItem>,
    pub request: GenerateRequest,
}

/// Resolves the request's MCP servers into `request` (their tools offered
/// beside its functions), and runs the calls its approvals approve (a
/// denied one is not run). `tool_items` are the conversation's earlier
/// tool items.
pub async fn prepare(
    state: &AppState,
    key: &KeyRecord,
    valid: &ValidResponseRequest,
    tool_items: &[InputItem],
    mut request: GenerateRequest,
) -> Result<Prepared, ApiError> {
    let toolset = Toolset::resolve(
        &state.mcp,
        |label| may_use(key, label),
        valid.mcp.clone(),
        |label| listed_tools(tool_items, label),
    )
    .await?
    .capped(DailyCap::of(state, key));
    toolset.offer(&mut request)?;
    let mut ran = Vec::new();
    for answer in &valid.approvals {
        let asked = approval_request(tool_items, &valid.input, &answer.request_id);
        let Some((label, name, arguments)) = asked else {
            return Err(ValidationError::new(
                format!("{}.approval_request_id", answer.param),
                format!(
                    "no mcp_approval_request {:?} is in this conversation",
                    answer.request_id
                ),
            )
            .into());
        };
        if answered(tool_items, &answer.request_id) {
            return Err(ValidationError::new(
                format!("{}.approval_request_id", answer.param),
                format!(
                    "the approval request {:?} was answered already",
                    answer.request_id
                ),
            )
            .into());
        }
        if !answer.approve {
            continue;
        }
        if toolset.server_of(&name).is_none_or(|s| s.label != label) {
            return Err(ValidationError::new(
                format!("{}.approval_request_id", answer.param),
                format!(
                    "the approved call is of the tool {name:?} of the MCP server {label:?}, which this request's tools do not offer"
                ),
            )
            .into());
        }
        let outcome = toolset.call(&state.metrics, &name, &arguments).await;
        ran.push(OutputItem::McpCall {
            id: super::shape::new_id("mcp"),
            server_label: label,
            name,
            arguments,
            status: if outcome.error.is_some() {
                "failed"
            } else {
                "completed"
            }
            .into(),
            output: outcome.output,
            error: outcome.error,
            approval_request_id: Some(answer.request_id.clone()),
        });
    }
    if !ran.is_empty() {
        request.messages.extend(output_messages(&ran)?);
    }
    Ok(Prepared {
        toolset: Arc::new(toolset),
        ran,
        request,
    })
}

/// Whether the key may use the registered MCP server `label`.
fn may_use(key: &KeyRecord, label: &str) -> bool {
    key.may_use_mcp_server(label)
}

/// The server, tool and arguments of the approval request `id`, from the
/// conversation or the input.
fn approval_request(
    earlier: &[InputItem],
    input: &[InputItem],
    id: &str,
) -> Option<(String, String, String)> {
    earlier.iter().chain(input).find_map(|item| {
        (item.kind.as_deref() == Some("mcp_approval_request") && item.id.as_deref() == Some(id))
            .then(|| {
                Some((
                    item.server_label.clone()?,
                    item.name.clone()?,
                    item.arguments.clone().unwrap_or_else(|| "{}".into()),
                ))
            })
            .flatten()
    })
}

/// Whether a call ran after the approval request `id` already.
fn answered(earlier: &[InputItem], id: &str) -> bool {
    earlier.iter().any(|item| {
        item.kind.as_deref() == Some("mcp_call") && item.approval_request_id.as_deref() == Some(id)
    })
}

/// How the response ended, for a whole reply: the response, or why it failed.
pub type Ending = Arc<Mutex<Option<Result<ResponseObject, ApiError>>>>;

/// Everything the loop needs after the first generation started.
pub struct Run {
    pub state: AppState,
    pub key: KeyRecord,
    pub model: String,
    pub metering: Metering,
    pub toolset: Arc<Toolset>,
    /// The first generation's request (the prompt, before the output).
    pub request: GenerateRequest,
    pub keep: Option<Keep>,
    pub max_tool_calls: u32,
    /// Calls made before the first generation (approved ones).
    pub calls: u32,
    pub request_id: Option<String>,
}

/// The tools the shaper makes MCP items of: each offered tool's server,
/// and whether its calls wait for approval.
pub fn mcp_tools(toolset: &Toolset) -> McpTools {
    toolset
        .servers()
        .iter()
        .flat_map(|server| {
            server.tools.iter().map(|tool| {
                (
                    tool.name.clone(),
                    (server.label.clone(), toolset.needs_approval(&tool.name)),
                )
            })
        })
        .collect()
}

/// The reply's frames (none for a whole reply), from the first
/// generation's `events` to the end of the loop; `ending` gets the
/// response (kept first when asked) or its failure.
pub fn drive(
    run: Run,
    mut shaper: Shaper,
    mut events: EventStream,
    ending: Ending,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    async_stream::stream! {
        let Run { state, key, model, metering, toolset, request, keep, max_tool_calls, mut calls, request_id } = run;
        let failure: ApiError = loop {
            let since = shaper.output_len();
            // One generation, to its end.
            let finished = loop {
                match events.next().await {
                    Some(Ok(EngineEvent::Finish { reason, usage })) => break Ok((reason, usage)),
                    Some(Ok(event)) => {
                        for frame in shaper.on(event) {
                            yield Ok(frame);
                        }
                    }
                    Some(Err(e)) => break Err(ApiError::from(e)),
                    None => break Err(ApiError::Internal("engine stream ended without finishing".into())),
                }
            };
            let (reason, usage) = match finished {
                Ok(ended) => ended,
                Err(e) => break e,
            };
            for frame in shaper.end_generation(reason, usage) {
                yield Ok(frame);
            }
            let due = shaper.take_due();
            if due.is_empty() {
                for frame in finish(&state, &mut shaper, keep.as_ref(), reason, request_id.as_deref(), &ending).await {
                    yield Ok(frame);
                }
                return;
            }
            let mut stopped = false;
            for call in due {
                let frames = if reason == FinishReason::Length {
                    stopped = true;
                    shaper.call_done(call.output_index, &CallOutcome {
                        output: None,
                        error: Some("not called: the output was cut at max_output_tokens".into()),
                    })
                } else if calls >= max_tool_calls {
                    stopped = true;
                    shaper.call_not_run(call.output_index, max_tool_calls)
                } else {
                    calls += 1;
                    let outcome = toolset.call(&state.metrics, &call.name, &call.arguments).await;
                    shaper.call_done(call.output_index, &outcome)
                };
                for frame in frames {
                    yield Ok(frame);
                }
            }
            if stopped || shaper.waits_for_client(since) {
                for frame in finish(&state, &mut shaper, keep.as_ref(), reason, request_id.as_deref(), &ending).await {
                    yield Ok(frame);
                }
                return;
            }
            // The model again, with the results.
            let mut next = request.clone();
            match output_messages(&shaper.response().output) {
                Ok(more) => next.messages.extend(more),
                Err(e) => break e.into(),
            }
            match state
                .admission
                .generate(&key, &model, next, Instant::now(), metering.clone())
                .await
            {
                Ok(generated) => events = generated.events,
                Err(refused) => break refused.into(),
            }
        };
        for frame in fail(&mut shaper, request_id.as_deref(), &failure) {
            yield Ok(frame);
        }
        set(&ending, Err(failure));
    }
}

/// The end of the response: kept (when asked) before the client hears it
/// is done; one that could not be kept (its project's quota, say) failed.
async fn finish(
    state: &AppState,
    shaper: &mut Shaper,
    keep: Option<&Keep>,
    reason: FinishReason,
    request_id: Option<&str>,
    ending: &Ending,
) -> Vec<Bytes> {
    let mut out = shaper.finish_output(reason, TokenUsage::default());
    let kept = match keep {
        Some(keep) => state.conversations.save(keep, shaper.response()).await,
        None => Ok(()),
    };
    match kept {
        Ok(()) => {
            out.extend(shaper.done());
            set(ending, Ok(shaper.response().clone()));
        }
        Err(e) => {
            out.extend(fail(shaper, request_id, &e));
            set(ending, Err(e));
        }
    }
    out
}

fn set(ending: &Ending, result: Result<ResponseObject, ApiError>) {
    if let Ok(mut slot) = ending.lock() {
        *slot = Some(result);
    }
}

/// The events of a failure, built as if inside the request, so that a
/// server error quotes its id.
fn fail(shaper: &mut Shaper, request_id: Option<&str>, error: &ApiError) -> Vec<Bytes> {
    match request_id {
        Some(id) => crate::scoped::in_request(id.to_owned(), || shaper.fail(error)),
        None => shaper.fail(error),
    }
}
