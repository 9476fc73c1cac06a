//! `POST /v1/chat/completions`, OpenAI's chat completions: validate, run
//! through the shared pipeline ([`crate::pipeline`]), shape the events
//! into one `chat.completion` or a stream of chunks ([`shape`]). Errors
//! are OpenAI's shape, [`ApiError`]'s own. The wire request becomes a
//! domain one in [`valid`].

pub(crate) mod shape;
pub(crate) mod tool_loop;
pub(crate) mod valid;

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use svc_api::ChatCompletionRequest;
use svc_core::KeyRecord;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::cache::{Cacheable, Lookup, reproducible};
use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::extract::{Key, scope};
use crate::openapi::shared;
use crate::pipeline::{Metering, Opened, json_response, limited, open, sse_response};
use crate::state::AppState;
use crate::tools::{DailyCap, Toolset};
use shape::CompletionMeta;
use tool_loop::{Calls, ToolLoop};
use valid::ValidChatRequest;

/// What this endpoint is: its OpenAPI group, its paths and dialect, and
/// what batches and the response cache make of it.
pub(crate) const ENDPOINT: Endpoint = Endpoint::new("chat", "Chat completions.")
    .paths(&["/v1/chat/completions"])
    .batch("/v1/chat/completions")
    .generates("createChatCompletion");

/// Chat's replies are kept when greedy or seeded.
impl Cacheable for ChatCompletionRequest {
    const ROUTE: &'static str = ENDPOINT.tag;
    fn reproducible(&self) -> bool {
        // A call of an MCP tool acts on the world: never a cached reply.
        let calls_tools = self.tools.iter().flatten().any(|t| t.kind == "mcp");
        !calls_tools && reproducible(self.temperature, self.seed)
    }
}

/// The dialect's routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create))
}

#[utoipa::path(post, path = "/v1/chat/completions", tag = "chat", operation_id = "createChatCompletion",
    summary = "Create a chat completion: the model's next reply to a conversation.",
    description = "With `stream` false or absent the reply comes whole as one `chat.completion` object. With `stream` true it comes as Server-Sent Events: `data: <chunk>` frames, each a `chat.completion.chunk` (see the `ChatCompletionChunk` schema), ending with the literal `data: [DONE]`. The first chunk's delta is `{\"role\":\"assistant\",\"content\":\"\"}`; the last chunk with a choice has an empty delta and the finish_reason. With `stream_options.include_usage` every chunk has `usage: null` and one more chunk with empty `choices` and the usage comes before `[DONE]`. An error after the stream has begun is sent as a last `data: {\"error\":{...}}` frame (the `ErrorResponse` schema) and the stream ends without `[DONE]`.",
    security(("bearer" = ["model.request"])),
    request_body = ChatCompletionRequest,
    responses(
        (status = 200, description = "The completion: whole, or streamed when `stream` is true.",
            content((svc_api::ChatCompletion = "application/json"),
                (svc_api::chat::ChatCompletionStreamEvent = "text/event-stream"))),
        shared::InferenceErrors,
    ))]
pub async fn create(
    Key(key, _): Key<scope::ModelRequest>,
    State(state): State<AppState>,
    request: Request,
) -> Response {
    limited(&state.admission, key, |key, metering| {
        answer(&state, key, request, metering)
    })
    .await
}

async fn answer(
    state: &AppState,
    key: KeyRecord,
    request: Request,
    metering: Metering,
) -> Result<Response, ApiError> {
    let Opened {
        arrived,
        directives,
        body,
    } = open::<ChatCompletionRequest, _>(request, state).await?;
    let plan = match state
        .cache
        .lookup(&state.admission, directives, &key, &body)
        .await?
    {
        Lookup::Hit(response) => return Ok(response),
        Lookup::Miss(plan) => plan,
    };
    let ValidChatRequest {
        model,
        include_usage,
        mut generate,
        mcp,
    } = ValidChatRequest::try_from(body)?;
    let toolset = if mcp.is_empty() {
        None
    } else {
        let toolset = Toolset::resolve(
            &state.mcp,
            |label| key.may_use_mcp_server(label),
            mcp,
            |_| None,
        )
        .await?
        .capped(DailyCap::of(state, &key));
        toolset.offer(&mut generate)?;
        Some(Arc::new(toolset))
    };
    let stream = generate.stream;
    let (n, logprobs) = (generate.n, generate.logprobs.is_some());
    let outcome = metering.outcome.clone();
    let generated = state
        .admission
        .generate(&key, &model, generate.clone(), arrived, metering.clone())
        .await?;
    let meta = CompletionMeta::new(generated.model.clone())
        .with_choices(n, logprobs)
        .with_fingerprint(state.admission.fingerprint(&generated.model));
    let calls = Calls::default();
    let events = match toolset.clone() {
        None => generated.events,
        Some(toolset) => {
            let run = ToolLoop {
                state: state.clone(),
                key,
                model,
                metering,
                toolset,
                request: generate,
                calls: calls.clone(),
            };
            tool_loop::events(run, generated.events)
        }
    };
    let response = if stream {
        let listed = toolset.is_some().then(|| Listed {
            id: meta.id.clone(),
            created: meta.created,
            model: meta.model.clone(),
            calls,
        });
        let frames = shape::sse(meta, include_usage, events);
        sse_response(Body::from_stream(with_calls(frames, listed)))
    } else {
        let mut completion = shape::collect(meta, events).await?;
        if toolset.is_some() {
            completion.mcp_calls = calls.lock().ok().map(|calls| calls.clone());
        }
        json_response(&completion)
    };
    Ok(state.cache.keep(plan, response, &generated.model, outcome))
}

/// What a streamed reply with `mcp` tools adds before `[DONE]`: a chunk
/// with no choices listing the calls made (`mcp_calls`).
struct Listed {
    id: String,
    created: i64,
    model: String,
    calls: Calls,
}

/// `frames`, with the chunk `listed` makes before `[DONE]`.
fn with_calls(
    frames: impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
    listed: Option<Listed>,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    frames.flat_map(move |frame| {
        let mut out = Vec::with_capacity(2);
        if let (Ok(bytes), Some(listed)) = (&frame, &listed)
            && bytes.as_ref() == shape::DONE
        {
            let calls = listed.calls.lock().map(|c| c.clone()).unwrap_or_default();
            out.push(Ok(shape::event(&serde_json::json!({
                "id": listed.id,
                "object": "chat.completion.chunk",
                "created": listed.created,
                "model": listed.model,
                "choices": [],
                "mcp_calls": calls,
            }))));
        }
        out.push(frame);
        futures::stream::iter(out)
    })
}
