//! The HTTP edge of [`crate::admission`], which every generating route
//! shares whatever its dialect: the key's rate limits and the limits' and
//! budgets' headers on every answer ([`limited`]), the admission's
//! refusals as errors ([`ApiError`] from [`Refusal`]), and the replies'
//! framing ([`json_response`], [`sse_response`]). A dialect
//! (`crate::chat`, `crate::responses`, `crate::messages`) parses its
//! request into a `GenerateRequest`, has it admitted and generated
//! ([`crate::admission::Admission::generate`]), and shapes the events it
//! gets back.

use std::future::Future;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{FromRef, FromRequest, Request};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use svc_core::KeyRecord;

use crate::admission::{Admission, Refusal};
use crate::budget::BudgetSlot;
use crate::cache::Directives;
use crate::error::{ApiError, header_map};
use crate::extract::{ApiJson, BodyLimit, NamesModel};
use crate::metrics::Arrived;
pub(crate) use crate::usage::Metering;

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::RateLimited(verdict) => ApiError::RateLimited(verdict),
            Refusal::Spent(spent) => ApiError::from(spent),
            Refusal::ModelNotFound(model) => ApiError::ModelNotFound(model),
            Refusal::Engine(error) => ApiError::from(error),
        }
    }
}

/// Counts the request against the key's rate limits before anything else
/// (so failed requests count too), runs `answer` when they allow it, and
/// puts the limits' state on every answer, and the state of its budgets
/// when [`generate`] charged them. `answer` is told how to meter the
/// request (tokens count toward a limit only for keys with a
/// tokens-per-minute one). Errors, a refusal included, are said in the
/// dialect of `E` (`ApiError` is OpenAI's).
pub(crate) async fn limited<E, F, Fut>(admission: &Admission, key: KeyRecord, answer: F) -> Response
where
    E: From<ApiError> + IntoResponse,
    F: FnOnce(KeyRecord, Metering) -> Fut,
    Fut: Future<Output = Result<Response, E>>,
{
    let verdict = match admission.limit(&key).await {
        Ok(verdict) => verdict,
        Err(refused) => return E::from(ApiError::from(refused)).into_response(),
    };
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
        response.headers_mut().extend(header_map(v.headers()));
    }
    if let Some(b) = budget.take() {
        response.headers_mut().extend(header_map(b.headers()));
    }
    response
}

/// A JSON request as every model endpoint first reads it
/// ([`open`]).
pub(crate) struct Opened<T> {
    /// When it arrived, for the gateway's overhead and the latencies.
    pub arrived: Instant,
    /// What its `Cache-Control` asks of the response cache.
    pub directives: Directives,
    pub body: T,
}

/// What every endpoint with a JSON body naming a model does first, written
/// once: when it arrived, its cache directives, its body read as `T` (a
/// 400 naming what is wrong), and its model noted in the request log.
pub(crate) async fn open<T, S>(request: Request, state: &S) -> Result<Opened<T>, ApiError>
where
    T: DeserializeOwned + NamesModel,
    BodyLimit: FromRef<S>,
    S: Send + Sync,
{
    let arrived = arrived(&request);
    let directives = Directives::of(request.headers());
    let ApiJson(body) = ApiJson::<T>::from_request(request, state).await?;
    crate::request_log::note_model(body.model());
    Ok(Opened {
        arrived,
        directives,
        body,
    })
}

/// When the request arrived (set by the metrics layer), for the gateway's
/// overhead and the latency metrics.
pub(crate) fn arrived(request: &Request) -> Instant {
    request
        .extensions()
        .get::<Arrived>()
        .map_or_else(Instant::now, |a| a.0)
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
