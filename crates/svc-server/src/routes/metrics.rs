//! `GET /metrics`: what [`crate::metrics`] counts, with what the request
//! log, the response cache, the tracer and the engines report.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::metrics::{CacheCounts, Reported};
use crate::state::AppState;

/// `GET /metrics`; with a metrics token configured, only for
/// `Authorization: Bearer <token>`.
#[utoipa::path(get, path = "/metrics", tag = "meta", operation_id = "metrics",
    summary = "Prometheus metrics: requests, latency, time to first token, gateway overhead, tokens, errors by code, connections, engine queues, upstream health.",
    description = "Public unless the server is started with a metrics token (then `Authorization: Bearer <token>` is required; the token is not an API key) or with a metrics address of its own (then it is served only there).",
    responses(
        (status = 401, response = crate::openapi::shared::Unauthorized),
        (status = 200, description = "The text exposition format.", body = String, content_type = "text/plain"),
    ))]
pub async fn endpoint(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(token) = &state.metrics.token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        if !given.is_some_and(|given| token.matches(given)) {
            return unauthorized();
        }
    }
    let body = state.metrics.render(&reported(&state));
    let mut response = body.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// 401 in the API's error shape; the token given, if any, is not echoed.
fn unauthorized() -> Response {
    let body = svc_api::ErrorBody {
        error: svc_api::ErrorObject {
            message: "/metrics needs the metrics token: send Authorization: Bearer <token>.".into(),
            kind: "invalid_request_error".into(),
            param: None,
            code: Some("invalid_metrics_token".into()),
        },
    };
    let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    response
        .extensions_mut()
        .insert(crate::error::ErrorCode("invalid_metrics_token".into()));
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// What the parts that keep their own counts report now.
fn reported(state: &AppState) -> Reported {
    Reported {
        request_log_dropped: state.request_log.dropped(),
        request_log_pending: state.request_log.pending(),
        cache: state.cache.enabled().then(|| CacheCounts {
            hits: state.cache.hits.load(Ordering::Relaxed),
            misses: state.cache.misses.load(Ordering::Relaxed),
            saved_tokens: state.cache.saved_tokens.load(Ordering::Relaxed),
        }),
        spans_dropped: state.tracer.as_ref().map(|t| t.dropped()),
        engines: state
            .models
            .iter()
            .map(|r| (r.id.clone(), r.engine.status()))
            .collect(),
    }
}
