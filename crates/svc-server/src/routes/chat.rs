//! `POST /v1/chat/completions`: validate, route to the model's engine, shape
//! the events into one body or a stream.

use axum::body::Body;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use svc_api::ChatCompletionRequest;
use svc_core::{ChatMessage, ValidChatRequest};

use std::time::Instant;

use crate::error::ApiError;
use crate::extract::{ApiJson, Authenticated};
use crate::metrics::Arrived;
use crate::shape::{self, CompletionMeta};
use crate::state::AppState;

/// Counts the request against the key's rate limits before anything else
/// (so failed requests count too), and puts the limits' state on every
/// answer.
pub async fn create(
    Authenticated(key): Authenticated,
    State(state): State<AppState>,
    request: Request,
) -> Response {
    let verdict = state.limiter.check(&key).await;
    if let Some(v) = verdict.filter(|v| v.exceeded.is_some()) {
        return ApiError::RateLimited(v).into_response();
    }
    // Tokens are counted only for keys that have a tokens-per-minute limit.
    let count_tokens = verdict.is_some_and(|v| v.tokens.is_some());
    let mut response = answer(&state, key, request, count_tokens)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    if let Some(v) = verdict {
        response.headers_mut().extend(v.headers());
    }
    response
}

async fn answer(
    state: &AppState,
    key: svc_core::KeyRecord,
    request: Request,
    count_tokens: bool,
) -> Result<Response, ApiError> {
    let arrived = request
        .extensions()
        .get::<Arrived>()
        .map_or_else(Instant::now, |a| a.0);
    let ApiJson(body) = ApiJson::<ChatCompletionRequest>::from_request(request, state).await?;
    let mut request = ValidChatRequest::try_from(body)?;
    let route = state
        .models
        .get(&request.model)
        .ok_or_else(|| ApiError::ModelNotFound(request.model.clone()))?;
    request.generate.reasoning = route.reasoning;
    if let Some(prompt) = &route.default_system_prompt
        && !request
            .generate
            .messages
            .iter()
            .any(|m| matches!(m, ChatMessage::System(_)))
    {
        request
            .generate
            .messages
            .insert(0, ChatMessage::System(prompt.clone()));
    }
    state
        .metrics
        .gateway_overhead(&request.model, arrived.elapsed());
    let stream = request.generate.stream;
    let events = route.engine.generate(request.generate).await?;
    let events =
        crate::usage::metered(events, state, key.id, &request.model, arrived, count_tokens);
    let meta = CompletionMeta::new(request.model);
    if !stream {
        let completion = shape::collect(meta, events).await?;
        // Sized for a typical reply at once: axum's `Json` starts at 128
        // bytes and grows, a visible cost at thousands of replies a second.
        let mut body = Vec::with_capacity(768);
        // Serializing our own wire types cannot fail.
        let _ = serde_json::to_writer(&mut body, &completion);
        let json = HeaderValue::from_static("application/json");
        return Ok(([(header::CONTENT_TYPE, json)], body).into_response());
    }
    let mut response =
        Body::from_stream(shape::sse(meta, request.include_usage, events)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}
