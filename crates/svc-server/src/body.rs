//! Bodies on their way: a response body watched on its way to the client
//! (each frame sent, and at the end whether the whole body went out: what
//! the request log, where a client that left mid-stream is 499, and the
//! response cache, which keeps only a whole reply, both need to know), and
//! a request body that did not arrive in time ([`BodyTimedOut`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Frame, SizeHint};

/// What a [`Watched`] body tells.
pub(crate) trait Watcher: Send + Unpin + 'static {
    /// A frame (or a failure) was sent.
    fn frame(&mut self, _frame: &Result<Frame<Bytes>, axum::Error>) {}
    /// The body is done with: `whole` when all of it was sent. The inner
    /// body (and what its end records, such as usage) is dropped first.
    fn done(&mut self, whole: bool);
}

/// `inner`, told to a [`Watcher`].
pub(crate) struct Watched<W: Watcher> {
    inner: Body,
    watcher: W,
    ended: bool,
}

impl<W: Watcher> Watched<W> {
    pub(crate) fn body(inner: Body, watcher: W) -> Body {
        Body::new(Watched {
            inner,
            watcher,
            ended: false,
        })
    }
}

impl<W: Watcher> hyper::body::Body for Watched<W> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        match &frame {
            Poll::Ready(Some(frame)) => this.watcher.frame(frame),
            Poll::Ready(None) => this.ended = true,
            Poll::Pending => {}
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<W: Watcher> Drop for Watched<W> {
    fn drop(&mut self) {
        // hyper drops a body it sent whole without polling past its end
        // (when its size said so); only one dropped early was cut short.
        let whole = self.ended || hyper::body::Body::is_end_stream(&self.inner);
        self.inner = Body::empty();
        self.watcher.done(whole);
    }
}

/// A request body that did not fully arrive in time (see
/// [`crate::ServerConfig::body_timeout`]).
#[derive(Debug, Clone, Copy)]
pub struct BodyTimedOut(pub std::time::Duration);

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "The request body did not arrive within {} seconds.",
            self.0.as_secs_f64()
        )
    }
}

impl std::error::Error for BodyTimedOut {}

/// The [`BodyTimedOut`] somewhere in `error`'s chain of causes, if any.
pub fn body_timed_out(error: &(dyn std::error::Error + 'static)) -> Option<BodyTimedOut> {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(timed_out) = error.downcast_ref::<BodyTimedOut>() {
            return Some(*timed_out);
        }
        cause = error.source();
    }
    None
}
