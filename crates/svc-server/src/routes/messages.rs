//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's
//! Messages API over the same keys, limits, engines, usage and metrics as
//! chat completions. The key comes as `x-api-key` or a bearer token;
//! `anthropic-version`, `anthropic-beta` and `?beta=true` are accepted
//! (svc serves one version of the API). Errors are in Anthropic's shape
//! (see [`crate::anthropic::errors`]).

use axum::body::Body;
use axum::extract::{FromRequest, Request, State};
use axum::response::Response;
use svc_api::messages::{CountTokensRequest, CountTokensResponse, MessagesRequest};
use svc_core::KeyRecord;
use svc_core::messages::{Thinking, ValidCountTokensRequest, ValidMessagesRequest};

use super::chat::{arrived, generate_with, json_response, limited, routed, sse_response};
use crate::anthropic::{self, MessageMeta};
use crate::error::ApiError;
use crate::extract::{AnthropicAuthenticated, ApiJson};
use crate::state::AppState;
use crate::usage::Metering;

pub async fn create(
    AnthropicAuthenticated(key): AnthropicAuthenticated,
    State(state): State<AppState>,
    request: Request,
) -> Response {
    limited(&state, key, |key, metering| {
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
    let arrived = arrived(&request);
    let ApiJson(body) = ApiJson::<MessagesRequest>::from_request(request, state).await?;
    let request = ValidMessagesRequest::try_from(body)?;
    let stream = request.generate.stream;
    let reasoning = state
        .models
        .get(&request.model)
        .is_some_and(|r| r.reasoning);
    let meta = MessageMeta::new(
        request.model.clone(),
        reasoning && request.thinking != Thinking::Disabled,
    );
    let stops = request.stop_sequences;
    let stopped_by = meta.stopped_by.clone();
    let events = generate_with(
        state,
        &key,
        &request.model,
        request.generate,
        arrived,
        metering,
        |engine, generate| {
            // Only a request with stop sequences pays for the matching.
            let with_stops = (!stops.is_empty()).then(|| (engine.clone(), generate.clone(), stops));
            move |events| match with_stops {
                Some((engine, generate, stops)) => {
                    anthropic::stop_sequences(stops, stopped_by, engine, generate, events)
                }
                None => events,
            }
        },
    )
    .await?;
    if !stream {
        let reply = anthropic::collect(meta, events).await?;
        return Ok(json_response(&reply));
    }
    Ok(sse_response(Body::from_stream(anthropic::sse(
        meta, events,
    ))))
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens as the model's
/// engine counts them (exactly for the embedded engine; upstream engines
/// estimate, see [`svc_core::Engine::count_tokens`]). Counts against the
/// key's request limit and is refused once a budget of the key is spent,
/// as generation is; no usage is recorded, as nothing is generated.
/// Counting costs CPU (a whole prompt rendered and tokenized, off the
/// async workers), so a key has one count in flight at a time and the
/// server works on at most half its cores' worth at once (see
/// [`AppState::counting`]).
pub async fn count_tokens(
    AnthropicAuthenticated(key): AnthropicAuthenticated,
    State(state): State<AppState>,
    request: Request,
) -> Response {
    limited(&state, key, |key, _| count(&state, key, request)).await
}

async fn count(state: &AppState, key: KeyRecord, request: Request) -> Result<Response, ApiError> {
    let ApiJson(body) = ApiJson::<CountTokensRequest>::from_request(request, state).await?;
    let request = ValidCountTokensRequest::try_from(body)?;
    let mut generate = request.generate;
    let route = routed(state, &key, &request.model, &mut generate)?;
    state.budgets.refuse_spent(&key, &request.model).await?;
    let _place = state.counting.enter(&key.id).await?;
    let input_tokens = route.engine.count_tokens(&generate).await?;
    Ok(json_response(&CountTokensResponse { input_tokens }))
}
