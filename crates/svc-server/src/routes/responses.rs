//! `POST /v1/responses` (OpenAI's Responses API), whole or streamed, and
//! `GET`/`DELETE /v1/responses/{id}` for stored responses.
//!
//! A request goes through the same pipeline as a chat completion
//! ([`chat::limited`], [`chat::generate`]): keys, rate limits, the model's
//! route, usage and metrics apply unchanged. With `store` (the default) the
//! finished response is kept, owned by the key's account (the operator's
//! keys, which have none, share the owner `operator`), for
//! `response_retention`; `previous_response_id` continues its conversation.

use std::convert::Infallible;

use axum::body::Body;
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use svc_api::responses::{CreateResponseRequest, DeletedResponse, InputItem, ResponseObject};
use svc_core::responses::conversation_items;
use svc_core::{
    EngineError, EngineEvent, KeyRecord, Store, StoredResponse, ValidResponseRequest, now,
};

use super::chat::{arrived, generate, json_response, limited, sse_response};
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
    let stored = state
        .store
        .response_by_id(&id, &owner(&key), now())
        .await?
        .ok_or_else(|| not_found(&id, None))?;
    let json = HeaderValue::from_static("application/json");
    Ok(([(header::CONTENT_TYPE, json)], stored.response).into_response())
}

pub async fn delete(
    Authenticated(key): Authenticated,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if !state.store.delete_response(&id, &owner(&key)).await? {
        return Err(not_found(&id, None));
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
fn not_found(id: &str, param: Option<&str>) -> ApiError {
    ApiError::NotFound {
        param: param.map(str::to_owned),
        message: format!("Response with id '{id}' not found."),
    }
}

/// Where a finished response is kept, when the request asked for it.
struct Keep {
    store: std::sync::Arc<dyn Store>,
    owner: String,
    /// The input items before the response's output.
    conversation: Vec<InputItem>,
    retention: i64,
}

impl Keep {
    async fn save(&self, response: &ResponseObject) -> Result<(), ApiError> {
        let at = now();
        let record = StoredResponse {
            id: response.id.clone(),
            owner: self.owner.clone(),
            created_at: response.created_at,
            expires_at: at.saturating_add(self.retention),
            response: serde_json::to_string(response)
                .map_err(|e| ApiError::Internal(e.to_string()))?,
            conversation: serde_json::to_string(&self.conversation)
                .map_err(|e| ApiError::Internal(e.to_string()))?,
        };
        self.store.insert_response(&record).await?;
        // The sweep: expired responses are never served, and go here.
        if let Err(e) = self.store.delete_expired_responses(at).await {
            tracing::warn!(error = %e, "cannot delete expired responses");
        }
        Ok(())
    }
}

/// The conversation a stored response continues with: its input items
/// and its output.
fn continued(stored: &StoredResponse) -> Result<Vec<InputItem>, ApiError> {
    let earlier: Vec<InputItem> = serde_json::from_str(&stored.conversation)
        .map_err(|e| ApiError::Internal(format!("stored conversation: {e}")))?;
    let response: ResponseObject = serde_json::from_str(&stored.response)
        .map_err(|e| ApiError::Internal(format!("stored response: {e}")))?;
    Ok(conversation_items(earlier, &response.output))
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
    let valid = ValidResponseRequest::try_from(body)?;
    let owner = owner(&key);
    let earlier = match &valid.previous_response_id {
        None => Vec::new(),
        Some(id) => {
            let stored = state
                .store
                .response_by_id(id, &owner, now())
                .await?
                .ok_or_else(|| not_found(id, Some("previous_response_id")))?;
            continued(&stored)?
        }
    };
    let generate_request = valid.assemble(&earlier)?;
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
    let keep = valid.store.then(|| {
        let mut conversation = earlier;
        conversation.extend(valid.input.iter().cloned());
        Keep {
            store: state.store.clone(),
            owner,
            conversation,
            retention: i64::try_from(state.response_retention.as_secs()).unwrap_or(i64::MAX),
        }
    });
    let mut shaper = Shaper::new(valid.response(new_id("resp"), now()));
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
            keep.save(&response).await?;
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
                    let out = shaper.finish(reason, usage);
                    // Kept before the client hears it is done, so that a
                    // follow-up at once finds it.
                    if let Some(keep) = &keep
                        && let Err(e) = keep.save(shaper.response()).await
                    {
                        tracing::warn!(error = %e, "cannot store the response");
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
