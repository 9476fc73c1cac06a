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

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use futures::task::AtomicWaker;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::body::BodyTimedOut;
use crate::config::{Cidr, ServerConfig};
use crate::extract::client_ip;
use crate::metrics::Metrics;
use crate::scoped::ClientIp;
use crate::tls::Tls;

/// What the accept loop holds every client to.
#[derive(Debug, Clone)]
pub struct Limits {
    /// From accept (or the end of the previous request) to a whole request
    /// head; then the connection is closed.
    pub header_timeout: Duration,
    /// From a request's head to the end of its body.
    pub body_timeout: Duration,
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    /// Peers whose forwarding headers are believed, and who are not held
    /// to the per-address limit (all clients come through them).
    pub trusted_proxies: Arc<[Cidr]>,
}

impl Limits {
    pub fn new(config: &ServerConfig) -> Self {
        Limits {
            header_timeout: config.header_timeout,
            body_timeout: config.body_timeout,
            max_connections: config.max_connections,
            max_connections_per_address: config.max_connections_per_address,
            trusted_proxies: config.trusted_proxies.clone().into(),
        }
    }
}

/// Serves `router` on `listener` until `shutdown` is cancelled; then stops
/// accepting, lets every connection finish the requests it has under way
/// (idle ones close at once) and returns when all are closed.
///
/// No client can hold the server: a connection that does not send a whole
/// request head within the header timeout is closed, a body that has not
/// arrived within the body timeout is answered 408, and connections past
/// the per-address limit, or past the total one when no silent connection
/// can make room (see [`ConnectionTable`]), are answered 503 and closed at
/// once, so a flood from some addresses leaves room for everyone else.
///
/// With `tls`, each connection's TLS handshake is part of its header
/// timeout: it must be done and a request begun within it.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
    limits: Limits,
    metrics: Arc<Metrics>,
    tls: Option<Arc<Tls>>,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(LocalWakesExecutor);
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    let table = Arc::new(ConnectionTable::new(&limits, metrics));
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
        let peer = remote.ip().to_canonical();
        let trusted = limits.trusted_proxies.iter().any(|b| b.contains(peer));
        let Some(guard) = table.admit(peer, trusted) else {
            // Non-blocking: a fresh socket's send buffer takes it whole, and
            // a client that cannot take it loses nothing it was promised.
            // (A TLS client could not read it: it is only closed.)
            if tls.is_none() {
                let _ = stream.try_write(&TOO_MANY_CONNECTIONS);
            }
            tracing::debug!(%remote, "connection refused: too many connections");
            continue;
        };
        // Server-sent events are many small writes: send each at once.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let router = router.clone();
        let slot = guard.slot.clone();
        let service = hyper::service::service_fn({
            let guard = guard.clone();
            let trusted_proxies = limits.trusted_proxies.clone();
            let body_timeout = limits.body_timeout;
            move |request: hyper::Request<Incoming>| {
                // The connection is busy until this request's answer is
                // sent (or dropped): not idle, so neither timed out nor
                // closed to make room.
                let busy = guard.begin();
                let client = client_ip(peer, request.headers(), &trusted_proxies);
                // hyper closes an HTTP/1 connection whose request body was
                // left unread (a refused key, a body over the limit), but
                // says so in the reply only when it knows before the head
                // is written; a client not told reuses the connection and
                // its next request fails ("server disconnected"). So the
                // body records being read to its end, and a reply that left
                // it unread says `Connection: close` itself.
                let read = (request.version() <= hyper::Version::HTTP_11
                    && !request.body().is_end_stream())
                .then(|| Arc::new(AtomicBool::new(false)));
                let mut request =
                    request.map(|body| TimedBody::new(body, body_timeout, read.clone()));
                request.extensions_mut().insert(ConnectInfo(remote));
                request.extensions_mut().insert(ClientIp(client));
                let response = router.clone().oneshot(request);
                async move {
                    let mut response = response.await?;
                    if read.is_some_and(|read| !read.load(Ordering::Acquire)) {
                        response.headers_mut().insert(
                            hyper::header::CONNECTION,
                            hyper::header::HeaderValue::from_static("close"),
                        );
                    }
                    let response = response.map(|body| crate::body::Watched::body(body, busy));
                    Ok::<_, std::convert::Infallible>(response)
                }
            }
        });
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let tls = tls.clone();
        let deadline = Instant::now() + limits.header_timeout;
        let idle_timeout = limits.header_timeout;
        #[expect(
            clippy::disallowed_methods,
            reason = "shutdown tracks each connection through `graceful`, which it waits for below"
        )]
        tokio::spawn(LocalWakes::new(async move {
            let _guard = guard;
            let Some(tls) = tls.map(|tls| tls.acceptor()) else {
                let connection = builder.serve_connection(TokioIo::new(stream), service);
                return drive(
                    watcher.watch(connection.into_owned()),
                    &slot,
                    idle_timeout,
                    remote,
                )
                .await;
            };
            let stream = tokio::select! {
                handshake = tokio::time::timeout_at(deadline, tls.accept(stream)) => match handshake {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, %remote, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%remote, "connection closed: TLS handshake not done within the header timeout");
                        return;
                    }
                },
                () = slot.evict.notified() => {
                    tracing::debug!(%remote, "connection closed during its TLS handshake, to make room");
                    return;
                }
            };
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            drive(
                watcher.watch(connection.into_owned()),
                &slot,
                idle_timeout,
                remote,
            )
            .await;
        }));
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Runs one connection to its end, or until it has been idle (no request
/// under way) for `idle_timeout`: before its first request (hyper times
/// HTTP/1 heads itself, but not the bytes before it knows the protocol,
/// nor HTTP/2's preface) and between requests, on HTTP/1 as on HTTP/2
/// (whose streams hyper never times). An idle connection is also closed
/// when its place is needed for a new one.
async fn drive<E: std::fmt::Display>(
    connection: impl Future<Output = Result<(), E>>,
    slot: &Slot,
    idle_timeout: Duration,
    remote: std::net::SocketAddr,
) {
    let mut connection = std::pin::pin!(connection);
    let ended = loop {
        let idle_until = slot.idle_since().map(|since| since + idle_timeout);
        tokio::select! {
            ended = &mut connection => break ended,
            () = slot.evict.notified() => {}
            () = slot.activity.notified() => {}
            () = tokio::time::sleep_until(idle_until.unwrap_or_else(Instant::now)), if idle_until.is_some() => {
                if slot.idle_since().is_some_and(|since| since + idle_timeout <= Instant::now()) {
                    tracing::debug!(%remote, started = slot.started.load(Ordering::Relaxed), "connection closed: idle for the header timeout");
                    return;
                }
            }
        }
        // Its place was given to a new connection while it was idle: it
        // closes as soon as it is idle again (now, unless a request began
        // meanwhile).
        if slot.released.load(Ordering::Relaxed) && slot.idle_since().is_some() {
            tracing::debug!(%remote, started = slot.started.load(Ordering::Relaxed), "idle connection closed to make room");
            return;
        }
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, %remote, "connection ended with an error");
    }
}

/// The answer to a connection past a limit, in the API's error shape:
/// written to the socket by hand, before any HTTP handling.
static TOO_MANY_CONNECTIONS: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let body = svc_api::ErrorBody {
        error: svc_api::ErrorObject {
            message:
                "Too many open connections from your address or in all; close some and try again."
                    .into(),
            kind: "server_error".into(),
            param: None,
            code: Some("too_many_connections".into()),
        },
    };
    // Serializing our own wire types cannot fail.
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let mut answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\n\
         content-type: application/json\r\n\
         retry-after: 1\r\n\
         connection: close\r\n\
         content-length: {}\r\n\
         \r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
});

/// Open connections, in all and by client address.
///
/// When every place is taken, the oldest connection that has not begun a
/// request yet (a slow client, most likely: honest ones send theirs at
/// once) is closed to make room, else the one idle the longest (a
/// keep-alive or HTTP/2 connection with no request under way), so neither
/// slow clients nor idle connections from many addresses can lock everyone
/// else out. Only connections with requests under way hold their places.
struct ConnectionTable {
    max_total: usize,
    max_per_address: usize,
    open: Mutex<Open>,
    metrics: Arc<Metrics>,
}

#[derive(Default)]
struct Open {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
    /// Connections without a request yet, oldest first.
    unstarted: BTreeMap<u64, Arc<Slot>>,
    /// Connections whose requests have all been answered, idle the
    /// longest first (by [`Busy::idle_key`]).
    idle: BTreeMap<u64, Arc<Slot>>,
    next_id: u64,
}

impl Open {
    /// Frees `slot`'s place, once; whether it did.
    fn release(&mut self, slot: &Slot) -> bool {
        if slot.released.swap(true, Ordering::Relaxed) {
            return false;
        }
        self.total = self.total.saturating_sub(1);
        if let Some(address) = slot.address
            && let Some(n) = self.by_address.get_mut(&address)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_address.remove(&address);
            }
        }
        true
    }
}

/// One connection's place in the table.
struct Slot {
    id: u64,
    /// Counted under this address (`None`: a trusted proxy).
    address: Option<IpAddr>,
    /// A request has begun on the connection.
    started: AtomicBool,
    /// Its place was freed (closed to make room, or ended).
    released: AtomicBool,
    /// Told when the connection is closed to make room.
    evict: Notify,
    /// Requests under way, and since when there has been none (`None`
    /// while there is one); changed under the table's lock.
    busy: Mutex<Busy>,
    /// Told when the connection becomes idle or busy.
    activity: Notify,
}

struct Busy {
    requests: usize,
    idle_since: Option<Instant>,
    /// Its key in [`Open::idle`] while idle after a request.
    idle_key: u64,
}

impl Slot {
    fn new(id: u64, address: Option<IpAddr>) -> Self {
        Slot {
            id,
            address,
            started: AtomicBool::new(false),
            released: AtomicBool::new(false),
            evict: Notify::new(),
            busy: Mutex::new(Busy {
                requests: 0,
                idle_since: Some(Instant::now()),
                idle_key: 0,
            }),
            activity: Notify::new(),
        }
    }

    fn busy(&self) -> std::sync::MutexGuard<'_, Busy> {
        self.busy.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Since when no request has been under way; `None` while one is.
    fn idle_since(&self) -> Option<Instant> {
        self.busy().idle_since
    }
}

impl ConnectionTable {
    fn new(limits: &Limits, metrics: Arc<Metrics>) -> Self {
        ConnectionTable {
            max_total: limits.max_connections,
            max_per_address: limits.max_connections_per_address,
            open: Mutex::default(),
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a connection from `peer` (towards the total only when `exempt`)
    /// until the guard is dropped; `None` when a limit is reached.
    fn admit(self: &Arc<Self>, peer: IpAddr, exempt: bool) -> Option<ConnectionGuard> {
        let address = (!exempt).then(|| address_key(peer));
        let mut open = self.lock();
        if let Some(a) = address
            && open.by_address.get(&a).copied().unwrap_or(0) >= self.max_per_address
        {
            drop(open);
            self.metrics.connection_refused();
            return None;
        }
        if open.total >= self.max_total {
            let victim = match open.unstarted.pop_first() {
                Some((_, victim)) => victim,
                None => match open.idle.pop_first() {
                    Some((_, victim)) => victim,
                    None => {
                        drop(open);
                        self.metrics.connection_refused();
                        return None;
                    }
                },
            };
            if open.release(&victim) {
                self.metrics.connections_open(-1);
            }
            victim.evict.notify_one();
        }
        if let Some(a) = address {
            *open.by_address.entry(a).or_default() += 1;
        }
        open.total += 1;
        let id = open.next_id;
        open.next_id += 1;
        let slot = Arc::new(Slot::new(id, address));
        open.unstarted.insert(id, slot.clone());
        drop(open);
        self.metrics.connections_open(1);
        Some(ConnectionGuard(Arc::new(Admitted {
            table: self.clone(),
            slot,
        })))
    }
}

/// Clients are counted by IPv4 address, or by IPv6 /64, as every
/// per-address throttle counts them.
fn address_key(ip: IpAddr) -> IpAddr {
    svc_core::throttle::client_network(ip)
}

/// One admitted connection; when the last clone is dropped (the
/// connection's task and its service ended) its place is freed.
#[derive(Clone)]
struct ConnectionGuard(Arc<Admitted>);

struct Admitted {
    table: Arc<ConnectionTable>,
    slot: Arc<Slot>,
}

impl std::ops::Deref for ConnectionGuard {
    type Target = Admitted;

    fn deref(&self) -> &Admitted {
        &self.0
    }
}

impl ConnectionGuard {
    /// A request began: the connection is busy (neither timed out nor
    /// closed to make room) until the returned guard is dropped, with the
    /// answer's body.
    fn begin(&self) -> Underway {
        {
            let mut open = self.table.lock();
            let mut busy = self.slot.busy();
            if busy.requests == 0 {
                open.unstarted.remove(&self.slot.id);
                open.idle.remove(&busy.idle_key);
                busy.idle_since = None;
            }
            busy.requests += 1;
            self.slot.started.store(true, Ordering::Relaxed);
        }
        self.slot.activity.notify_one();
        Underway(self.clone())
    }
}

/// A request under way on a connection; its end (the answer's body sent or
/// dropped) may leave the connection idle.
struct Underway(ConnectionGuard);

impl crate::body::Watcher for Underway {
    fn done(&mut self, _whole: bool) {}
}

impl Drop for Underway {
    fn drop(&mut self) {
        let slot = &self.0.slot;
        {
            let mut open = self.0.table.lock();
            let mut busy = slot.busy();
            busy.requests = busy.requests.saturating_sub(1);
            if busy.requests == 0 {
                busy.idle_since = Some(Instant::now());
                if !slot.released.load(Ordering::Relaxed) {
                    let key = open.next_id;
                    open.next_id += 1;
                    busy.idle_key = key;
                    open.idle.insert(key, slot.clone());
                }
            }
        }
        slot.activity.notify_one();
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let released = {
            let mut open = self.table.lock();
            open.unstarted.remove(&self.slot.id);
            let idle_key = self.slot.busy().idle_key;
            if open
                .idle
                .get(&idle_key)
                .is_some_and(|s| s.id == self.slot.id)
            {
                open.idle.remove(&idle_key);
            }
            open.release(&self.slot)
        };
        if released {
            self.table.metrics.connections_open(-1);
        }
    }
}

/// A request body that fails with [`BodyTimedOut`] when it has not ended
/// by its deadline. The timer is only started once the body is actually
/// waited for, so bodies that arrived with their head cost no timer.
/// `read`, when given, is set once the body has been read to its end.
struct TimedBody {
    inner: Incoming,
    deadline: Instant,
    timeout: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    read: Option<Arc<AtomicBool>>,
}

impl TimedBody {
    fn new(inner: Incoming, timeout: Duration, read: Option<Arc<AtomicBool>>) -> Self {
        TimedBody {
            inner,
            deadline: Instant::now() + timeout,
            timeout,
            sleep: None,
            read,
        }
    }
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            if let Some(read) = &this.read
                && (frame.is_none() || this.inner.is_end_stream())
            {
                read.store(true, Ordering::Release);
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
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
    #[expect(
        clippy::disallowed_methods,
        reason = "an HTTP/2 stream is part of its connection, which shutdown tracks through `graceful`"
    )]
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
    fn the_refusal_is_well_formed() {
        let text = std::str::from_utf8(&TOO_MANY_CONNECTIONS).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"]["code"], "too_many_connections");
    }

    #[test]
    fn the_refusal_is_the_bytes_it_always_was() {
        let before: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 169\r\n\
\r\n\
{\"error\":{\"message\":\"Too many open connections from your address or in all; close some and try again.\",\"type\":\"server_error\",\"param\":null,\"code\":\"too_many_connections\"}}";
        assert_eq!(
            std::str::from_utf8(&TOO_MANY_CONNECTIONS).unwrap(),
            std::str::from_utf8(before).unwrap()
        );
    }

    #[test]
    fn ipv6_clients_are_counted_by_slash_64() {
        let a = address_key("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = address_key("2001:db8:1:2:bbbb::9".parse().unwrap());
        let c = address_key("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        let v4 = "192.0.2.1".parse().unwrap();
        assert_eq!(address_key(v4), v4);
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
