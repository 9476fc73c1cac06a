//! `POST /v1/responses` (OpenAI's Responses API), whole or streamed, and
//! `GET`/`DELETE /v1/responses/{id}` for stored responses.
//!
//! A request goes through the same pipeline as a chat completion
//! ([`chat::limited`], [`chat::generate`]): keys, rate limits, the model's
//! route, usage and metrics apply unchanged. With `store` (the default) the
//! finished response is kept, owned by the key's account (the operator's
//! keys, which have none, share the owner `operator`) and counted against
//! its project's storage quota, for `response_retention`;
//! `previous_response_id` continues its conversation.
//! [`crate::conversations`] keeps conversations and reads them back.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use svc_api::responses::{CreateResponseRequest, DeletedResponse};
use svc_core::{EngineError, EngineEvent, KeyRecord, StoredResponse, ValidResponseRequest, now};

use super::chat::{arrived, generate, json_response, limited, sse_response};
use crate::conversations::Keep;
use crate::error::ApiError;
use crate::extract::{ApiJson, Authenticated};
use crate::responses_shape::{Shaper, new_id};
use crate::state::AppState;
use crate::usage::Metering;

pub async fn create(
    Authenticated(key): Authenticated,
    State(state): State<AppState>,
    request: Request,
) -> Response {
    limited(&state, key, |key, metering| {
        answer(&state, key, request, metering)
    })
    .await
}

pub async fn retrieve(
    Authenticated(key): Authenticated,
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

pub async fn delete(
    Authenticated(key): Authenticated,
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
    let arrived = arrived(&request);
    let ApiJson(body) = ApiJson::<CreateResponseRequest>::from_request(request, state).await?;
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
    let generate_request = state.conversations.prompt(&valid, &owner).await?;
    let stream = generate_request.stream;
    let mut events = generate(
        state,
        &key,
        &valid.model,
        generate_request,
        arrived,
        metering,
    )
    .await
    .map_err(engine_error)?;
    let mut shaper = Shaper::new(valid.response(new_id("resp"), now()));
    let conversations = state.conversations.clone();
    if !stream {
        loop {
            match events.next().await {
                Some(Ok(EngineEvent::Finish { reason, usage })) => {
                    shaper.finish(reason, usage);
                    break;
                }
                Some(Ok(event)) => {
                    shaper.on(event);
                }
                Some(Err(e)) => return Err(e.into()),
                None => {
                    return Err(ApiError::Internal(
                        "engine stream ended without finishing".into(),
                    ));
                }
            }
        }
        let response = shaper.into_response();
        if let Some(keep) = &keep {
            conversations.save(keep, &response).await?;
        }
        return Ok(json_response(&response));
    }
    let request_id = crate::request_id::current();
    let body = async_stream::stream! {
        for event in shaper.start() {
            yield Ok::<_, Infallible>(event.to_sse());
        }
        loop {
            let (out, last) = match events.next().await {
                Some(Ok(EngineEvent::Finish { reason, usage })) => {
                    let mut out = shaper.finish_output(reason, usage);
                    // Kept before the client hears it is done, so that a
                    // follow-up at once finds it; a response that could
                    // not be kept (its project's quota, say) failed.
                    let kept = match &keep {
                        Some(keep) => conversations.save(keep, shaper.response()).await,
                        None => Ok(()),
                    };
                    match kept {
                        Ok(()) => out.push(shaper.done()),
                        Err(e) => out.extend(failed(&mut shaper, request_id.as_deref(), e)),
                    }
                    (out, true)
                }
                Some(Ok(event)) => (shaper.on(event), false),
                Some(Err(e)) => (failed(&mut shaper, request_id.as_deref(), e.into()), true),
                None => {
                    let e = ApiError::Internal("engine stream ended without finishing".into());
                    (failed(&mut shaper, request_id.as_deref(), e), true)
                }
            };
            for event in out {
                yield Ok(event.to_sse());
            }
            if last {
                break;
            }
        }
    };
    Ok(sse_response(Body::from_stream(body)))
}

/// The events of a failure, built as if inside the request, so that a
/// server error quotes its id.
fn failed(
    shaper: &mut Shaper,
    request_id: Option<&str>,
    error: ApiError,
) -> Vec<crate::responses_shape::StreamEvent> {
    match request_id {
        Some(id) => crate::request_id::scope(id.to_owned(), || shaper.fail(&error)),
        None => shaper.fail(&error),
    }
}
