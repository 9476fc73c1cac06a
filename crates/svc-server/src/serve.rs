//! The accept loop: every connection served by hyper (HTTP/1.1 or HTTP/2)
//! on a task of its own, until shutdown, then gracefully.
//!
//! Why not `axum::serve`: a task that wakes itself while it is being polled
//! is taken by Tokio's multi-threaded scheduler for one that yields, so it
//! is queued again and an idle worker thread is woken to share the work.
//! hyper's connection task does that at every request with a body (the
//! handler reading the body signals the connection that it may send more),
//! and svc's upstream client adds its own. On a small virtual machine that
//! wake-up of an idle vCPU cost more than the rest of a gateway request.
//! Here each connection runs under [`LocalWakes`], which polls it again at
//! once instead, and only wake-ups from outside (a socket became ready, a
//! timer fired) reach the runtime.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use futures::task::AtomicWaker;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Serves `router` on `listener` until `shutdown` is cancelled; then stops
/// accepting, lets every connection finish the requests it has under way
/// (idle ones close at once) and returns when all are closed.
pub async fn serve(listener: TcpListener, router: Router, shutdown: CancellationToken) {
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(LocalWakesExecutor);
    loop {
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        // Server-sent events are many small writes: send each at once.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(remote));
            router.clone().oneshot(request)
        });
        let connection = graceful.watch(
            builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned(),
        );
        tokio::spawn(LocalWakes::new(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, %remote, "connection ended with an error");
            }
        }));
    }
    drop(listener);
    graceful.shutdown().await;
}

/// What `axum::serve` (and hyper before it) does: a failed accept because
/// the peer went away is nothing; any other (out of file descriptors) is
/// logged and waited out for a second rather than spun on.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Spawns HTTP/2 streams the way connections are: under [`LocalWakes`].
#[derive(Clone, Copy)]
struct LocalWakesExecutor;

impl<F> hyper::rt::Executor<F> for LocalWakesExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        tokio::spawn(LocalWakes::new(future));
    }
}

/// How often one poll goes round for wake-ups given during it; past that
/// the task yields to the runtime after all (Tokio's cooperative budget
/// wakes a task that must yield, and that must not spin).
const MAX_ROUNDS: usize = 4;

/// A future whose wake-ups during its own poll make it be polled again at
/// once, in the same poll, instead of being handed to the runtime.
pub struct LocalWakes<F> {
    inner: Pin<Box<F>>,
    wakeup: Arc<Wakeup>,
    /// `wakeup` as a waker, made once.
    waker: Waker,
}

impl<F: Future> LocalWakes<F> {
    pub fn new(inner: F) -> Self {
        let wakeup = Arc::new(Wakeup::default());
        LocalWakes {
            inner: Box::pin(inner),
            waker: Waker::from(wakeup.clone()),
            wakeup,
        }
    }
}

impl<F: Future> Future for LocalWakes<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.wakeup.task.register(cx.waker());
        let mut inner = Context::from_waker(&this.waker);
        for _ in 0..MAX_ROUNDS {
            this.wakeup.state.store(POLLING, Ordering::SeqCst);
            if let Poll::Ready(output) = this.inner.as_mut().poll(&mut inner) {
                this.wakeup.state.store(IDLE, Ordering::SeqCst);
                return Poll::Ready(output);
            }
            // Not woken meanwhile: wait for a wake-up from outside.
            if this
                .wakeup
                .state
                .compare_exchange(POLLING, IDLE, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return Poll::Pending;
            }
        }
        this.wakeup.state.store(IDLE, Ordering::SeqCst);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

const IDLE: u8 = 0;
const POLLING: u8 = 1;
const WOKEN: u8 = 2;

/// The waker a [`LocalWakes`] future is polled with: during its poll it
/// only notes the wake-up; otherwise it wakes the task.
#[derive(Default)]
struct Wakeup {
    state: AtomicU8,
    task: AtomicWaker,
}

impl Wake for Wakeup {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match self
            .state
            .compare_exchange(POLLING, WOKEN, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) | Err(WOKEN) => {}
            Err(_) => self.task.wake(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Wakes itself `left` times (`usize::MAX`: for ever), counting its
    /// polls.
    struct SelfWaking {
        left: usize,
        polls: Arc<AtomicUsize>,
    }

    impl Future for SelfWaking {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            match self.left {
                0 => Poll::Ready(()),
                usize::MAX => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                _ => {
                    self.left -= 1;
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            }
        }
    }

    /// A waker that counts its wake-ups.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Polls a [`SelfWaking`] once: its answer, its polls, the task's
    /// wake-ups.
    fn run(left: usize) -> (Poll<()>, usize, usize) {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut future = LocalWakes::new(SelfWaking {
            left,
            polls: polls.clone(),
        });
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let outer = Waker::from(count.clone());
        let poll = Pin::new(&mut future).poll(&mut Context::from_waker(&outer));
        let woken = count.0.load(Ordering::SeqCst);
        (poll, polls.load(Ordering::SeqCst), woken)
    }

    #[test]
    fn wake_ups_during_the_poll_are_polled_at_once() {
        let (poll, polls, woken) = run(2);
        assert!(poll.is_ready());
        assert_eq!((polls, woken), (3, 0));
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields_to_the_runtime() {
        let (poll, polls, woken) = run(usize::MAX);
        assert!(poll.is_pending());
        assert_eq!((polls, woken), (MAX_ROUNDS, 1));
    }

    #[test]
    fn wake_ups_from_outside_reach_the_task() {
        let polls = Arc::new(AtomicUsize::new(0));
        let inner_waker = Arc::new(Mutex::new(None));
        // Pending without waking itself: waits for the outside.
        let mut future = LocalWakes::new(std::future::poll_fn({
            let polls = polls.clone();
            let inner_waker = inner_waker.clone();
            move |cx| {
                polls.fetch_add(1, Ordering::SeqCst);
                *inner_waker.lock().unwrap() = Some(cx.waker().clone());
                Poll::<()>::Pending
            }
        }));
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let outer = Waker::from(count.clone());
        assert!(
            Pin::new(&mut future)
                .poll(&mut Context::from_waker(&outer))
                .is_pending()
        );
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        let stored = inner_waker.lock().unwrap().take().unwrap();
        stored.wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        // Until the task polls again, it has been told once already.
        stored.wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(
            Pin::new(&mut future)
                .poll(&mut Context::from_waker(&outer))
                .is_pending()
        );
        inner_waker.lock().unwrap().take().unwrap().wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }
}
