//! What every generating route shares, whatever its dialect: the key's
//! rate limits ([`limited`]), the model's route and its default system
//! prompt ([`routed`]), budgets, the engine, metrics and usage
//! ([`generate`]), and the replies' framing ([`json_response`],
//! [`sse_response`]). A dialect (`crate::chat`, `crate::responses`,
//! `crate::messages`) parses its request into a `GenerateRequest` and
//! shapes the events it gets back.

use std::future::Future;
use std::time::Instant;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use svc_core::{ChatMessage, EventStream, GenerateRequest, KeyRecord};

use crate::budget::BudgetSlot;
use crate::error::ApiError;
use crate::metrics::Arrived;
use crate::registry::ModelRoute;
use crate::state::AppState;
pub(crate) use crate::usage::Metering;

/// Counts the request against the key's rate limits before anything else
/// (so failed requests count too), runs `answer` when they allow it, and
/// puts the limits' state on every answer, and the state of its budgets
/// when [`generate`] charged them. `answer` is told how to meter the
/// request (tokens count toward a limit only for keys with a
/// tokens-per-minute one). Errors, a refusal included, are said in the
/// dialect of `E` (`ApiError` is OpenAI's).
pub(crate) async fn limited<E, F, Fut>(state: &AppState, key: KeyRecord, answer: F) -> Response
where
    E: From<ApiError> + IntoResponse,
    F: FnOnce(KeyRecord, Metering) -> Fut,
    Fut: Future<Output = Result<Response, E>>,
{
    let verdict = state.limiter.check(&key).await;
    if let Some(v) = verdict.filter(|v| v.exceeded.is_some()) {
        return E::from(ApiError::RateLimited(v)).into_response();
    }
    let metering = Metering {
        count_tokens: verdict.is_some_and(|v| v.tokens.is_some()),
        budget: BudgetSlot::default(),
    };
    let budget = metering.budget.clone();
    let mut response = answer(key, metering)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    if let Some(v) = verdict {
        response.headers_mut().extend(v.headers());
    }
    if let Some(b) = budget.take() {
        response.headers_mut().extend(b.headers());
    }
    response
}

/// When the request arrived (set by the metrics layer), for the gateway's
/// overhead and the latency metrics.
pub(crate) fn arrived(request: &Request) -> Instant {
    request
        .extensions()
        .get::<Arrived>()
        .map_or_else(Instant::now, |a| a.0)
}

/// Routes a validated request to `model`'s engine: the model's reasoning
/// flag and default system prompt apply, the gateway's overhead is
/// recorded, the key's and its project's budgets are charged, and the
/// events are metered into usage, budgets (and the key's token limits when
/// `metering` says so).
pub(crate) async fn generate(
    state: &AppState,
    key: &KeyRecord,
    model: &str,
    request: GenerateRequest,
    arrived: Instant,
    metering: Metering,
) -> Result<EventStream, ApiError> {
    generate_with(state, key, model, request, arrived, metering, |_, _| {
        |events| events
    })
    .await
}

/// [`generate`], with `wrap` applied to the engine's events before they are
/// metered (so what it changes, such as an earlier end, is what usage
/// records). `wrap` is called with the engine and the request as the
/// engine gets it, before generation starts; what it returns wraps the events.
pub(crate) async fn generate_with<W, F>(
    state: &AppState,
    key: &KeyRecord,
    model: &str,
    mut request: GenerateRequest,
    arrived: Instant,
    metering: Metering,
    wrap: W,
) -> Result<EventStream, ApiError>
where
    W: FnOnce(&std::sync::Arc<dyn svc_core::Engine>, &GenerateRequest) -> F,
    F: FnOnce(EventStream) -> EventStream,
{
    let route = routed(state, key, model, &mut request)?;
    // One key's requests share the engine's per-client share of its slots.
    request.client = Some(key.id.to_string());
    let charge = state
        .budgets
        .charge(
            key,
            model,
            &request,
            route.engine.as_ref(),
            &metering.budget,
        )
        .await?;
    state.metrics.gateway_overhead(model, arrived.elapsed());
    let wrap = wrap(&route.engine, &request);
    let (choices, prompt_tokens) = (request.n, svc_core::estimate_tokens(&request));
    let events = wrap(route.engine.generate(request).await?);
    let bill = crate::usage::Bill {
        key_id: key.id.clone(),
        choices,
        count_tokens: metering.count_tokens,
        charge,
        prompt_tokens,
    };
    Ok(crate::usage::metered(events, state, model, arrived, bill))
}

/// `model`'s route, with what it sets applied to `request`: the model's
/// reasoning flag, and its default system prompt when the request has none
/// (neither for a legacy text prompt, which is continued as it is).
/// A model the key may not use (by its own list or its project's) is
/// answered as one that does not exist, so a key cannot learn what else is
/// served.
pub(crate) fn routed<'a>(
    state: &'a AppState,
    key: &KeyRecord,
    model: &str,
    request: &mut GenerateRequest,
) -> Result<&'a ModelRoute, ApiError> {
    let route = usable(state, key, model)?;
    if request.prompt.is_some() {
        // A text prompt is continued as it is: no system prompt, no reasoning.
        return Ok(route);
    }
    request.reasoning = route.reasoning;
    if let Some(prompt) = &route.default_system_prompt
        && !request
            .messages
            .iter()
            .any(|m| matches!(m, ChatMessage::System(_)))
    {
        request
            .messages
            .insert(0, ChatMessage::System(prompt.clone()));
    }
    Ok(route)
}

/// The `system_fingerprint` of `model`'s engine, when it has one (asked
/// once the request was routed there).
pub(crate) fn fingerprint(state: &AppState, model: &str) -> Option<String> {
    state.models.get(model)?.engine.fingerprint()
}

/// `model`'s route when the key may use it (by its own list and its
/// project's); otherwise the model is answered as one that does not exist,
/// so a key cannot learn what else is served.
pub(crate) fn usable<'a>(
    state: &'a AppState,
    key: &KeyRecord,
    model: &str,
) -> Result<&'a ModelRoute, ApiError> {
    state
        .models
        .get(model)
        .filter(|_| key.may_use(model))
        .ok_or_else(|| ApiError::ModelNotFound(model.to_owned()))
}

/// Headers of a Server-Sent Events reply: its type, `Cache-Control:
/// no-cache`, and `X-Accel-Buffering: no` (nginx passes it on unbuffered).
pub(crate) fn sse_response(body: Body) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // nginx buffers proxied responses unless told not to; a stream must
    // reach the client event by event behind it too.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// A JSON reply serialized in one buffer; a value that does not serialize
/// is a logged 500, never an empty 200.
pub(crate) fn json_response<T: serde::Serialize>(value: &T) -> Response {
    // Sized for a typical reply at once: axum's `Json` starts at 128
    // bytes and grows, a visible cost at thousands of replies a second.
    let mut body = Vec::with_capacity(768);
    if let Err(e) = serde_json::to_writer(&mut body, value) {
        return ApiError::Internal(format!("the reply does not serialize: {e}")).into_response();
    }
    let json = HeaderValue::from_static("application/json");
    ([(header::CONTENT_TYPE, json)], body).into_response()
}
