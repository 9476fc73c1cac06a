//! The layers every request goes through, outside the handlers: the
//! metrics by route ([`metrics`]) and the request log with the request's
//! trace ([`request_log`]). What they count and keep is `crate::metrics`'
//! and `crate::request_log`'s, which know nothing of HTTP.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use svc_core::trace::SpanContext;

use crate::body::{Watched, Watcher};
use crate::endpoint::{self, Endpoint};
use crate::error::{ErrorCode, ErrorType};
use crate::metrics::{Arrived, Metrics};
use crate::otlp::Tracer;
use crate::request_log::{self, Finish, RequestLog};

/// Middleware: counts every request by its route pattern (never the raw
/// path, which would make a label per key id), method and status, times
/// it, and counts error codes.
pub async fn metrics(
    State(metrics): State<Arc<Metrics>>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    request.extensions_mut().insert(Arrived(started));
    let route = request.extensions().get::<MatchedPath>().cloned();
    let method = method_label(request.method());
    // A guard, not a pair of calls: a request whose client goes away is
    // dropped at its await, and must leave the gauge too.
    let in_flight = metrics.request_started();
    let response = next.run(request).await;
    drop(in_flight);
    let status = response.status().as_u16();
    let code = response
        .extensions()
        .get::<ErrorCode>()
        .map(|c| c.0.clone());
    // The access log, inside the request's span (which names its id).
    tracing::info!(
        target: "svc::access",
        status,
        ms = started.elapsed().as_secs_f64() * 1000.0,
        code = code.as_deref().unwrap_or(""),
        "answered"
    );
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    metrics.answered(route, method, status, started.elapsed().as_secs_f64(), code);
    response
}

/// The method as a metrics label: HTTP's own methods by name, and any
/// other a client makes up as `other`, so that no client can add labels
/// (and rows that `/metrics` keeps and prints) without bound.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

/// What the request log works with: where rows go, where spans go, and
/// the endpoints, whose paths say which requests are API calls and in
/// which dialect.
pub(crate) type Logging = (
    Arc<RequestLog>,
    Option<Arc<Tracer>>,
    &'static [&'static Endpoint],
);

/// Middleware: logs every API request (the endpoints' declared paths,
/// and any other under `/v1/`; not the dashboard, health checks or
/// `/metrics`) to `log`, and exports its spans to `tracer` when traces
/// are exported.
pub(crate) async fn request_log(
    State((log, tracer, endpoints)): State<Logging>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    let dialect = match endpoint::dialect_of(endpoints, path) {
        Some(dialect) if log.enabled || tracer.is_some() => dialect,
        _ => return next.run(request).await,
    };
    // A caller's trace is continued; else this request begins one.
    let caller = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(SpanContext::parse);
    // Without an exporter, no span of this request is made: the caller's
    // context is passed on as it came.
    let exporting = tracer.is_some();
    let (span, parent) = match (exporting, caller) {
        (true, Some(caller)) => (Some(caller.child()), Some(caller.span_id)),
        (true, None) => (Some(SpanContext::root()), None),
        (false, caller) => (caller, None),
    };
    let pending = request_log::open(
        dialect.name(),
        format!("{} {path}", request.method()),
        span,
        parent,
    );
    // Until the answer is made, the client leaving drops this future, and
    // the guard records the request as abandoned.
    let mut finish = Finish {
        pending: Some(pending.clone()),
        log,
        tracer,
        status: 499,
        error_type: Some("client_disconnected".to_owned()),
    };
    let response = request_log::scope(pending, exporting, next.run(request)).await;
    finish.status = response.status().as_u16();
    finish.error_type = response
        .extensions()
        .get::<ErrorType>()
        .map(|t| t.0.to_owned());
    let (parts, body) = response.into_parts();
    // The body is sent after this returns: the row ends with its last byte.
    Response::from_parts(parts, Watched::body(body, finish))
}

/// Finishes the request's row when its body is done with: a body not sent
/// whole is a client that left mid-stream (499).
impl Watcher for Finish {
    fn done(&mut self, whole: bool) {
        if !whole {
            self.status = 499;
            self.error_type = Some("client_disconnected".to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_a_client_makes_up_is_one_label() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(method_label(&Method::DELETE), "DELETE");
        for made_up in ["FOOA", "FOOB", "X-ANYTHING"] {
            let method = Method::from_bytes(made_up.as_bytes()).unwrap();
            assert_eq!(method_label(&method), "other");
        }
    }
}
