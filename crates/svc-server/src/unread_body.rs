//! A response sent before its request's body was read to the end (a
//! refused key, a body over the limit, a bad header) ends the connection:
//! hyper cannot read the next request past the unread bytes, so it closes
//! the connection after the response. It says so in the response only when
//! it knows before the head is written, which races with the handler
//! dropping the body; a client that was not told puts the connection back
//! in its pool and its next request fails with "server disconnected" (the
//! `openai` SDK with retries off saw this after a 401). This layer says
//! `Connection: close` whenever the body was left unread, over HTTP/1.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Version, header};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Body as HttpBody, Frame, SizeHint};

/// Middleware: marks the response `Connection: close` when the request had
/// a body that the handler did not read to its end.
pub async fn middleware(request: Request, next: Next) -> Response {
    if request.version() > Version::HTTP_11 || request.body().is_end_stream() {
        return next.run(request).await;
    }
    let read = Arc::new(AtomicBool::new(false));
    let (parts, body) = request.into_parts();
    let body = Body::new(Tracked {
        inner: body,
        read: read.clone(),
    });
    let mut response = next.run(Request::from_parts(parts, body)).await;
    if !read.load(Ordering::Acquire) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A request body that records when it was read to its end.
struct Tracked {
    inner: Body,
    read: Arc<AtomicBool>,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.read.store(true, Ordering::Release),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => {
                self.read.store(true, Ordering::Release);
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
