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
use futures::StreamExt;
use svc_core::{ChatMessage, EngineError, EventStream, GenerateRequest, KeyRecord};

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
    // A batch's lines keep the batch's own pace, not the key's per-minute limits.
    let verdict = if crate::batches::running() {
        None
    } else {
        state.limiter.check(&key).await
    };
    if let Some(v) = verdict.filter(|v| v.exceeded.is_some()) {
        return E::from(ApiError::RateLimited(v)).into_response();
    }
    let metering = Metering {
        count_tokens: verdict.is_some_and(|v| v.tokens.is_some()),
        budget: BudgetSlot::default(),
        outcome: std::sync::Arc::default(),
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

/// A generation under way: its events, and the model serving it (the one
/// asked for, or one of its fallbacks).
pub(crate) struct Generated {
    pub events: EventStream,
    pub model: String,
}

impl Generated {
    /// The `system_fingerprint` of the serving model's engine.
    pub(crate) fn fingerprint(&self, state: &AppState) -> Option<String> {
        fingerprint(state, &self.model)
    }
}

/// Says which model served a reply (`x-svc-served-model`): the one asked
/// for, or a fallback.
pub(crate) fn served_by(mut response: Response, model: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(model) {
        response.headers_mut().insert("x-svc-served-model", value);
    }
    response
}

/// Routes a validated request to `model`'s engine: the model's reasoning
/// flag and default system prompt apply, the gateway's overhead is
/// recorded, the key's and its project's budgets are charged, and the
/// events are metered into usage, budgets (and the key's token limits when
/// `metering` says so). When the model fails before its first event, its
/// fallbacks are tried in turn (see [`generate_with`]).
pub(crate) async fn generate(
    state: &AppState,
    key: &KeyRecord,
    model: &str,
    request: GenerateRequest,
    arrived: Instant,
    metering: Metering,
) -> Result<Generated, ApiError> {
    generate_with(state, key, model, request, arrived, metering, |_, _| {
        |events| events
    })
    .await
}

/// [`generate`], with `wrap` applied to the engine's events before they are
/// metered (so what it changes, such as an earlier end, is what usage
/// records). `wrap` is called with the serving engine and the request as
/// that engine got it, before its events are read; what it returns wraps
/// the events.
///
/// Fallbacks (`[models.<id>] fallbacks`): when `model` fails before its
/// first event (its engine refuses or fails to start, or its stream's
/// first item is an error) with a failure of the engine's (unavailable,
/// overloaded, a bad or slow gateway, an internal error; a prompt past its
/// context too, when the model says so), the next model in its list that
/// the key may use is asked the same, charged and metered as itself. Once
/// an event was read, a failure is the stream's: nothing switches.
pub(crate) async fn generate_with<W, F>(
    state: &AppState,
    key: &KeyRecord,
    model: &str,
    request: GenerateRequest,
    arrived: Instant,
    metering: Metering,
    wrap: W,
) -> Result<Generated, ApiError>
where
    W: FnOnce(&std::sync::Arc<dyn svc_core::Engine>, &GenerateRequest) -> F,
    F: FnOnce(EventStream) -> EventStream,
{
    let asked = usable(state, key, model)?;
    let fallbacks = asked.fallbacks.clone();
    // The models to try: the one asked for, then its fallbacks the key may use.
    let mut candidates = vec![model.to_owned()];
    for fallback in &fallbacks.models {
        if usable(state, key, fallback).is_ok() {
            candidates.push(fallback.clone());
        }
    }
    let count = candidates.len();
    let mut failure = None;
    let mut original = Some(request);
    let mut wrap = Some(wrap);
    for (at, candidate) in candidates.into_iter().enumerate() {
        let last = at + 1 == count;
        // Each candidate starts from the request as it came.
        let mut request = match (last, &original) {
            (false, Some(original)) => original.clone(),
            _ => original
                .take()
                .ok_or_else(|| ApiError::Internal("no request".into()))?,
        };
        let route = routed(state, key, &candidate, &mut request)?;
        // One key's requests share the engine's per-client share of its slots.
        request.client = Some(key.id.to_string());
        request.background = crate::batches::running();
        let charge = state
            .budgets
            .charge(
                key,
                &candidate,
                &request,
                route.engine.as_ref(),
                &metering.budget,
            )
            .await?;
        if failure.is_none() {
            state
                .metrics
                .gateway_overhead(&candidate, arrived.elapsed());
        }
        let (choices, prompt_tokens) = (request.n, svc_core::estimate_tokens(&request));
        // The engine's part begins (rendering, the queue, the prompt).
        if let Some(row) = crate::request_log::current() {
            row.engine_started();
        }
        let started = if last {
            let wrap = wrap.take().map(|w| w(&route.engine, &request));
            route
                .engine
                .generate(request)
                .await
                .map(|events| match wrap {
                    Some(w) => w(events),
                    None => events,
                })
        } else {
            // With a fallback left, the first event decides.
            match route.engine.generate(request.clone()).await {
                Ok(events) => first_event(events).await.map(|events| match wrap.take() {
                    Some(w) => w(&route.engine, &request)(events),
                    None => events,
                }),
                Err(e) => Err(e),
            }
        };
        let events = match started {
            Ok(events) => events,
            Err(e) if !last && falls_back(&e, fallbacks.on_context_length) => {
                tracing::warn!(model = %candidate, error = %e, "the model failed before answering; its fallback is asked");
                // Dropping the charge gives its estimate back.
                drop(charge);
                failure = Some(e);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let bill = crate::usage::Bill {
            key_id: key.id.clone(),
            choices,
            count_tokens: metering.count_tokens,
            charge,
            prompt_tokens,
        };
        let mut events = crate::usage::metered(events, state, &candidate, arrived, bill);
        if state.cache.enabled() {
            let outcome = metering.outcome.clone();
            events = events.inspect(move |event| outcome.on(event)).boxed();
        }
        return Ok(Generated {
            events,
            model: candidate,
        });
    }
    // The last candidate returns (it never falls back).
    Err(failure.map_or_else(|| ApiError::ModelNotFound(model.to_owned()), ApiError::from))
}

/// The stream, once its first item came: an error then is the start's.
async fn first_event(mut events: EventStream) -> Result<EventStream, EngineError> {
    match events.next().await {
        Some(Err(e)) => Err(e),
        Some(Ok(first)) => Ok(futures::stream::once(async move { Ok(first) })
            .chain(events)
            .boxed()),
        None => Ok(events),
    }
}

/// Whether a model's failure to start sends its request to a fallback:
/// the engine's failures do, the request's own do not (a prompt past the
/// context only when the model's `fallback_on_context_length` says so).
fn falls_back(error: &EngineError, on_context_length: bool) -> bool {
    match error {
        EngineError::Unavailable(_)
        | EngineError::Overloaded(_)
        | EngineError::BadGateway(_)
        | EngineError::GatewayTimeout(_)
        | EngineError::Internal(_) => true,
        EngineError::ContextLengthExceeded { .. } => on_context_length,
        EngineError::InvalidRequest { .. } => false,
    }
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
