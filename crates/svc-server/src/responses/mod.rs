//! `POST /v1/responses` (OpenAI's Responses API), whole or streamed, and
//! `GET`/`DELETE /v1/responses/{id}` for stored responses.
//!
//! A request goes through the same pipeline as a chat completion
//! ([`crate::pipeline`]): keys, rate limits, the model's
//! route, usage and metrics apply unchanged. With `store` (the default) the
//! finished response is kept, owned by the key's account (the operator's
//! keys, which have none, share the owner `operator`) and counted against
//! its project's storage quota, for `response_retention`;
//! `previous_response_id` continues its conversation.
//! [`valid`] makes the wire request a domain one; [`conversations`] keeps
//! conversations and reads them back; [`shape`] makes the reply and its
//! events. Errors are OpenAI's shape.

pub(crate) mod conversations;
pub(crate) mod shape;
pub(crate) mod tool_loop;
pub(crate) mod valid;

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use svc_api::responses::{CreateResponseRequest, DeletedResponse};
use svc_core::{EngineError, KeyRecord, StoredResponse, now};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::cache::{Cacheable, Lookup, reproducible};
use crate::endpoint::{Dialect, Endpoint};
use crate::error::ApiError;
use crate::extract::{Key, scope};
use crate::openapi::shared;
use crate::pipeline::{Metering, Opened, json_response, limited, open, sse_response};
use crate::state::AppState;
use conversations::Keep;
use shape::{Shaper, new_id};
use tool_loop::{Ending, Prepared, Run};
use valid::ValidResponseRequest;

/// What this endpoint is: its OpenAPI group, its paths and dialect, and
/// what batches and the response cache make of it.
pub(crate) const ENDPOINT: Endpoint = Endpoint::new(
    "responses",
    "OpenAI's Responses API: replies with output items, streamed events and stored responses.",
)
.paths(&["/v1/responses"])
.dialect(Dialect::Responses)
.batch("/v1/responses")
.generates("createResponse");

impl Cacheable for svc_api::responses::CreateResponseRequest {
    const ROUTE: &'static str = ENDPOINT.tag;
    /// Only a greedy reply that stands alone: not one kept for later
    /// (`store`), nor one that reads a kept conversation (another key of
    /// the project may not), nor one that may call MCP tools.
    fn reproducible(&self) -> bool {
        let refers_to_items = match &self.input {
            Some(svc_api::responses::ResponseInput::Items(items)) => items
                .iter()
                .any(|item| item.kind.as_deref() == Some("item_reference")),
            _ => false,
        };
        // A call of an MCP tool acts on the world: never a cached reply.
        let calls_tools = self.tools.iter().flatten().any(|t| t.kind == "mcp");
        self.store == Some(false)
            && !calls_tools
            && self.previous_response_id.is_none()
            && !refers_to_items
            && reproducible(self.temperature, None)
    }
}

/// The dialect's routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create))
        .routes(routes!(retrieve, delete))
}

#[utoipa::path(post, path = "/v1/responses", tag = "responses", operation_id = "createResponse",
    summary = "Create a response (OpenAI's Responses API): the model's next output items for the input.",
    description = "`input` is a string or a list of items (messages, `function_call`, `function_call_output`, `reasoning`), as the Responses API returns them; `instructions` goes first as a system message. Tools of type `function` are offered to the model; other tool types (`web_search`, `file_search`, `computer_use_preview`, `local_shell`, `custom`, `mcp`, ...) are accepted, returned in `tools`, and left out of the prompt, and so are the items of those tools in `input`. A `reasoning` item's text is the reasoning of the assistant turn that follows it (for templates that render earlier reasoning); one that no assistant turn follows is left out. `reasoning.effort` (`none`, `minimal`, `low`, `medium`, `high`) tunes a model that reasons, `none` and `minimal` turning its reasoning off.\n\nWith `stream` false or absent the reply is one `response` object. With `stream` true it comes as Server-Sent Events (see the `ResponseStreamEvent` schema): `response.created`, `response.in_progress`, then per output item `response.output_item.added`, `response.content_part.added`, deltas and their `.done`, `response.content_part.done`, `response.output_item.done`, and last `response.completed` (or `response.incomplete` when `max_output_tokens` cut it); a failure after the stream began is an `error` event and `response.failed`.\n\nWith `store` (default true) the response is kept for the key's account: `GET /v1/responses/{response_id}` reads it and `previous_response_id` continues its conversation (an unknown, expired or another account's id is 404).",
    security(("bearer" = ["api.responses.write"])),
    request_body = CreateResponseRequest,
    responses(
        (status = 200, description = "The response: whole, or streamed when `stream` is true.",
            content((svc_api::responses::ResponseObject = "application/json"),
                (svc_api::responses::ResponseStreamEvent = "text/event-stream"))),
        (status = 400, response = shared::BadRequest),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 404, description = "The model does not exist (`code` `model_not_found`), or `previous_response_id` names no stored response of this account (`code` `not_found`).", body = svc_api::ErrorBody),
        (status = 413, response = shared::PayloadTooLarge),
        (status = 429, response = shared::TooManyRequests),
        (status = 500, response = shared::InternalServerError),
        (status = 502, response = shared::BadGateway),
        (status = 503, response = shared::ServiceUnavailable),
        (status = 504, response = shared::GatewayTimeout),
    ))]
pub async fn create(
    Key(key, _): Key<scope::ResponsesWrite>,
    State(state): State<AppState>,
    request: Request,
) -> Response {
    limited(&state.admission, key, |key, metering| {
        answer(&state, key, request, metering)
    })
    .await
}

crate::openapi::parameters! {
    /// The response of `/v1/responses/{response_id}`.
    ResponsePath {
        ("response_id", Path, true, "The id of a stored response (`resp_...`).", {"type": "string"}),
    }
}

#[utoipa::path(get, path = "/v1/responses/{response_id}", tag = "responses", operation_id = "getResponse",
    summary = "A stored response of this key's account, by id.",
    security(("bearer" = ["api.responses.read"])),
    params(ResponsePath),
    responses(
        (status = 200, description = "The response.", body = svc_api::responses::ResponseObject),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 404, description = "No stored response of this account has this id (never stored, deleted, expired or another account's; `code` `not_found`).", body = svc_api::ErrorBody),
        (status = 500, response = shared::InternalServerError),
        (status = 503, response = shared::ServiceUnavailable),
    ))]
pub async fn retrieve(
    Key(key, _): Key<scope::ResponsesRead>,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let response = state
        .store
        .response_object(&id, &owner(&key), now())
        .await?
        .ok_or_else(|| not_found(&id))?;
    let json = HeaderValue::from_static("application/json");
    Ok(([(header::CONTENT_TYPE, json)], response).into_response())
}

#[utoipa::path(delete, path = "/v1/responses/{response_id}", tag = "responses", operation_id = "deleteResponse",
    summary = "Delete a stored response of this key's account.",
    security(("bearer" = ["api.responses.write"])),
    params(ResponsePath),
    responses(
        (status = 200, description = "Deleted.", body = svc_api::responses::DeletedResponse),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 404, description = "No stored response of this account has this id (`code` `not_found`).", body = svc_api::ErrorBody),
        (status = 500, response = shared::InternalServerError),
        (status = 503, response = shared::ServiceUnavailable),
    ))]
pub async fn delete(
    Key(key, _): Key<scope::ResponsesWrite>,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if !state.store.delete_response(&id, &owner(&key)).await? {
        return Err(not_found(&id));
    }
    Ok(json_response(&DeletedResponse {
        id,
        object: "response".into(),
        deleted: true,
    }))
}

/// Whose the responses a key makes are.
fn owner(key: &KeyRecord) -> String {
    StoredResponse::owner_of(key.owner_id.as_ref(), &key.project_id)
}

/// OpenAI's answer for an unknown (or another account's, or expired) id.
fn not_found(id: &str) -> ApiError {
    ApiError::NotFound {
        param: None,
        message: format!("Response with id '{id}' not found."),
    }
}

/// Errors before generation: a prompt too long is the input's fault.
fn engine_error(error: ApiError) -> ApiError {
    match error {
        ApiError::Engine(EngineError::ContextLengthExceeded { .. }) => ApiError::OnParam {
            param: "input",
            error: Box::new(error),
        },
        other => other,
    }
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
    } = open::<CreateResponseRequest, _>(request, state).await?;
    let plan = match state
        .cache
        .lookup(&state.admission, directives, &key, &body)
        .await?
    {
        Lookup::Hit(response) => return Ok(response),
        Lookup::Miss(plan) => plan,
    };
    let valid = Arc::new(ValidResponseRequest::try_from(body)?);
    let owner = owner(&key);
    let keep = valid.store.then(|| Keep {
        owner: owner.clone(),
        project: key.project_id.clone(),
        previous: valid.previous_response_id.clone(),
        input: valid.conversation_input(),
    });
    if let Some(keep) = &keep {
        state
            .conversations
            .check_room(&keep.project, keep.input_bytes())
            .await?;
    }
    let (generate_request, tool_items) = state.conversations.prompt(&valid, &owner).await?;
    let Prepared {
        toolset,
        ran,
        request,
    } = tool_loop::prepare(state, &key, &valid, &tool_items, generate_request).await?;
    let stream = request.stream;
    let outcome = metering.outcome.clone();
    let generated = state
        .admission
        .generate(
            &key,
            &valid.model,
            request.clone(),
            arrived,
            metering.clone(),
        )
        .await
        .map_err(|refused| engine_error(refused.into()))?;
    let (events, served) = (generated.events, generated.model);
    let mut object = valid.response(new_id("resp"), now());
    object.model.clone_from(&served);
    let mut shaper = Shaper::new(object, stream).with_mcp(tool_loop::mcp_tools(&toolset));
    let mut first = shaper.start();
    for server in toolset.servers().iter().filter(|s| s.listed) {
        first.extend(shaper.listed(&server.label, &server.tools));
    }
    for item in ran {
        first.extend(shaper.ran(item));
    }
    let calls = u32::try_from(valid.approvals.iter().filter(|a| a.approve).count()).unwrap_or(0);
    let run = Run {
        state: state.clone(),
        key,
        model: valid.model.clone(),
        metering,
        toolset,
        request,
        keep,
        max_tool_calls: valid.max_tool_calls,
        calls,
        request_id: crate::scoped::request_id(),
    };
    let ending = Ending::default();
    let frames = tool_loop::drive(run, shaper, events, ending.clone());
    if !stream {
        frames.for_each(|_| std::future::ready(())).await;
        let ended = ending.lock().ok().and_then(|mut slot| slot.take());
        let response = match ended {
            Some(Ok(response)) => json_response(&response),
            Some(Err(e)) => return Err(e),
            None => {
                return Err(ApiError::Internal(
                    "the response ended without an outcome".into(),
                ));
            }
        };
        return Ok(state.cache.keep(plan, response, &served, outcome));
    }
    let body = futures::stream::iter(first.into_iter().map(Ok::<_, Infallible>)).chain(frames);
    let response = sse_response(Body::from_stream(body));
    Ok(state.cache.keep(plan, response, &served, outcome))
}
