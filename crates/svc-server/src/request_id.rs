//! Request ids: one per request, returned in `x-request-id`, attached to
//! logs, and quoted in 5xx bodies so an operator can find the cause. The
//! id is `crate::scoped::request_id` while the request runs.

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

/// The response header carrying the id.
pub const HEADER: &str = "x-request-id";

fn generate() -> String {
    format!("req_{}", hex::encode(rand::random::<[u8; 12]>()))
}

/// Middleware: assigns the id, runs the request inside a span that names it
/// and the client's address (as resolved through trusted proxies), and sets
/// the response header.
pub async fn middleware(request: Request, next: Next) -> Response {
    let id = generate();
    let client = request
        .extensions()
        .get::<crate::scoped::ClientIp>()
        .map(|c| tracing::field::display(c.0));
    let span = tracing::info_span!("request", id = %id, client, method = %request.method(), path = %request.uri().path());
    let mut response = tracing::Instrument::instrument(
        crate::scoped::as_request(id.clone(), next.run(request)),
        span,
    )
    .await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(HEADER, value);
    }
    response
}
