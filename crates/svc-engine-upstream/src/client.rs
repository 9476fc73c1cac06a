//! svc's HTTP/1.1 client for upstream endpoints: hyper's connection API
//! with a pool of idle connections per origin, each connection driven by
//! the task that uses it.
//!
//! Why not a general client (reqwest, hyper-util's): those run every
//! connection as a task of its own, so a request wakes that task and its
//! reply wakes the caller back. On a multi-threaded runtime each of those
//! wake-ups may rouse a parked worker thread, and on a small virtual
//! machine a wake-up of an idle vCPU costs more than the rest of the
//! gateway's work. Here the caller polls its connection itself, so a
//! request is sent, answered and read in the task of the client's own
//! connection (which absorbs the wake-ups a task gives itself, see
//! svc-server's `serve`), with no hand-off: a connection is only ever
//! polled by the one request that holds it, and an idle one by nobody (it
//! is checked when taken from the pool).
//!
//! Redirects are never followed: an API endpoint has no business
//! redirecting, and following one would send the prompt (and the
//! endpoint's key) elsewhere. A 3xx is an error like any other non-2xx.

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::Full;
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper::header::{HeaderMap, HeaderValue, PROXY_AUTHORIZATION};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::{self, pki_types::ServerName};

use crate::proxy::{Proxies, Proxy};

/// Idle connections kept per origin; more are closed when given back.
const MAX_IDLE: usize = 512;
/// An idle connection older than this is closed rather than reused: the
/// server has likely given up on it.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Why an exchange failed.
#[derive(Debug)]
pub enum Error {
    /// No connection could be opened (refused, unresolvable, TLS refused,
    /// or no answer within the connect timeout).
    Connect(String),
    /// The connection broke or the peer spoke bad HTTP.
    Http(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Connect(detail) => write!(f, "cannot connect: {detail}"),
            Error::Http(detail) => f.write_str(detail),
        }
    }
}

/// An error with its causes (hyper's own message hides them).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn http_error(e: &hyper::Error) -> Error {
    Error::Http(chain(e))
}

/// Where connections go (scheme, host and port of a base URL), and the
/// idle connections to it.
pub struct Origin {
    tls: Option<(ServerName<'static>, Arc<rustls::ClientConfig>)>,
    /// For connecting: an IPv6 literal without its brackets.
    host: String,
    port: u16,
    /// The `Host` header: the URL's authority as written.
    pub authority: HeaderValue,
    /// `host:port` as a proxy's `CONNECT` names it.
    target: String,
    /// The HTTP proxy connections go through, if any.
    pub proxy: Option<Proxy>,
    /// Oldest first.
    idle: Mutex<VecDeque<Conn>>,
}

impl std::fmt::Debug for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Origin")
            .field("tls", &self.tls.is_some())
            .field("host", &self.host)
            .field("port", &self.port)
            .field("proxy", &self.proxy)
            .finish_non_exhaustive()
    }
}

impl Origin {
    /// The origin of an absolute `http://` or `https://` URI, reached
    /// through the proxy `proxies` name for it; `None` for any other
    /// scheme, a missing host, or credentials in the authority.
    pub fn new(uri: &Uri, proxies: &Proxies) -> Option<Origin> {
        Origin::with_tls(uri, proxies, tls_config)
    }

    /// As [`Origin::new`], trusting what `tls` says for `https://`.
    fn with_tls(
        uri: &Uri,
        proxies: &Proxies,
        tls: impl FnOnce() -> Option<Arc<rustls::ClientConfig>>,
    ) -> Option<Origin> {
        let https = match uri.scheme_str()? {
            "http" => false,
            "https" => true,
            _ => return None,
        };
        let authority = uri.authority()?;
        let host = authority.host();
        if host.is_empty() || authority.as_str().contains('@') {
            return None;
        }
        let bare = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let tls = if https {
            Some((ServerName::try_from(bare.clone()).ok()?, tls()?))
        } else {
            None
        };
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        Some(Origin {
            proxy: proxies.for_host(https, host),
            target: format!("{host}:{port}"),
            port,
            authority: HeaderValue::from_str(authority.as_str()).ok()?,
            tls,
            host: bare,
            idle: Mutex::new(VecDeque::new()),
        })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, VecDeque<Conn>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most recently used idle connection that is still open.
    fn checkout(&self) -> Option<Conn> {
        loop {
            let mut conn = self.idle().pop_back()?;
            if conn.idle_since.elapsed() < IDLE_TIMEOUT && conn.still_open() {
                return Some(conn);
            }
        }
    }

    /// Keeps a connection whose exchange ended cleanly for the next one.
    fn checkin(&self, mut conn: Conn) {
        if !conn.still_open() {
            return;
        }
        conn.idle_since = Instant::now();
        let mut idle = self.idle();
        // The oldest goes first when it is stale or there are too many.
        let oldest = if idle
            .front()
            .is_some_and(|c| c.idle_since.elapsed() >= IDLE_TIMEOUT)
            || idle.len() >= MAX_IDLE
        {
            idle.pop_front()
        } else {
            None
        };
        idle.push_back(conn);
        drop(idle);
        // Closed outside the lock.
        drop(oldest);
    }

    async fn connect(&self, limit: Duration) -> Result<Conn, Error> {
        let connect = async {
            let mut tcp = match &self.proxy {
                None => TcpStream::connect((self.host.as_str(), self.port))
                    .await
                    .map_err(|e| Error::Connect(e.to_string()))?,
                Some(proxy) => TcpStream::connect((proxy.host.as_str(), proxy.port))
                    .await
                    .map_err(|e| Error::Connect(format!("proxy {}: {e}", proxy.shown)))?,
            };
            tcp.set_nodelay(true)
                .map_err(|e| Error::Connect(e.to_string()))?;
            if let (Some(_), Some(proxy)) = (&self.tls, &self.proxy) {
                tunnel(&mut tcp, &self.target, proxy).await?;
            }
            Ok(match &self.tls {
                None => Stream::Plain(tcp),
                Some((name, config)) => {
                    let tls = TlsConnector::from(config.clone())
                        .connect(name.clone(), tcp)
                        .await
                        .map_err(|e| Error::Connect(format!("TLS: {}", chain(&e))))?;
                    Stream::Tls(Box::new(tls))
                }
            })
        };
        let stream = match tokio::time::timeout(limit, connect).await {
            Ok(stream) => stream?,
            Err(_) => return Err(Error::Connect(format!("no connection within {limit:?}"))),
        };
        let (send, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| Error::Connect(chain(&e)))?;
        Ok(Conn {
            send,
            conn,
            ended: false,
            idle_since: Instant::now(),
        })
    }

    /// Sends the request `build` makes on an idle connection, or a new one,
    /// and reads the response head. A reused connection can turn out to
    /// have been closed by the server: a request it could not even start
    /// to send goes to another idle connection, and one that went out but
    /// got no answer (the server's keep-alive ran out just as it went) is
    /// built and sent again on a new connection, once. That may repeat a
    /// request the server had received; the engine retries a failure
    /// before the first byte on another endpoint anyway. `build` runs once
    /// per attempt, so the common case copies nothing.
    pub async fn send(
        self: &Arc<Self>,
        build: impl Fn() -> Request<Payload>,
        connect_timeout: Duration,
    ) -> Result<Exchange, Error> {
        let mut fresh_only = false;
        loop {
            let idle = if fresh_only { None } else { self.checkout() };
            let (mut conn, reused) = match idle {
                Some(conn) => (conn, true),
                None => (self.connect(connect_timeout).await?, false),
            };
            let mut sent = pin!(conn.send.try_send_request(self.addressed(build())?));
            let outcome = poll_fn(|cx| conn.poll_with(cx, |cx| sent.as_mut().poll(cx))).await;
            let (error, written) = match outcome {
                Ok(Ok(response)) => {
                    let (head, body) = response.into_parts();
                    return Ok(Exchange {
                        status: head.status,
                        headers: head.headers,
                        body,
                        conn: Some(conn),
                        origin: self.clone(),
                    });
                }
                Ok(Err(mut e)) => {
                    let unsent = e.take_message().is_some();
                    (http_error(e.error()), !unsent)
                }
                Err(ended) => (ended, true),
            };
            if !reused {
                return Err(error);
            }
            if written {
                tracing::debug!(%error, "reused upstream connection failed; sending again");
                fresh_only = true;
            }
        }
    }

    /// `request` as this origin's connections take it: a plain request to
    /// a proxy names the whole URL and carries the proxy's credentials.
    fn addressed(&self, mut request: Request<Payload>) -> Result<Request<Payload>, Error> {
        if let (None, Some(proxy)) = (&self.tls, &self.proxy) {
            let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
            let absolute = format!("http://{}{path}", self.target);
            *request.uri_mut() = absolute
                .parse()
                .map_err(|_| Error::Connect(format!("cannot address {absolute} to the proxy")))?;
            if let Some(auth) = &proxy.authorization {
                request
                    .headers_mut()
                    .insert(PROXY_AUTHORIZATION, auth.clone());
            }
        }
        Ok(request)
    }
}

/// Opens a tunnel to `target` through `proxy` with `CONNECT`, on `tcp`
/// (connected to the proxy).
async fn tunnel(tcp: &mut TcpStream, target: &str, proxy: &Proxy) -> Result<(), Error> {
    let refused = |detail: String| Error::Connect(format!("proxy {}: {detail}", proxy.shown));
    let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n").into_bytes();
    if let Some(auth) = &proxy.authorization {
        head.extend_from_slice(b"Proxy-Authorization: ");
        head.extend_from_slice(auth.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    tcp.write_all(&head)
        .await
        .map_err(|e| refused(e.to_string()))?;
    // The answer's head, and nothing after it: the tunnel is silent until
    // the TLS handshake starts.
    let mut answer = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        if answer.len() > 8192 {
            return Err(refused("an endless answer to CONNECT".into()));
        }
        match tcp.read(&mut byte).await {
            Ok(0) => return Err(refused("closed during CONNECT".into())),
            Ok(_) => answer.push(byte[0]),
            Err(e) => return Err(refused(e.to_string())),
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.lines().next().unwrap_or_default();
    let code = status.split_whitespace().nth(1);
    if !status.starts_with("HTTP/1.") || code != Some("200") {
        return Err(refused(format!("CONNECT {target} answered {status:?}")));
    }
    Ok(())
}

/// Trusting the public web's root certificates; built once: parsing them is
/// not free.
fn tls_config() -> Option<Arc<rustls::ClientConfig>> {
    static CONFIG: OnceLock<Option<Arc<rustls::ClientConfig>>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            client_config(rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            })
        })
        .clone()
}

/// `None` only if ring lacked the default TLS versions, which it does not.
fn client_config(roots: rustls::RootCertStore) -> Option<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Some(Arc::new(config))
}

/// A request's body: bytes at hand (every JSON request), or a stream of
/// them (an upload read from disk as it is sent, never whole in memory).
pub enum Payload {
    Bytes(Full<Bytes>),
    Stream(
        Pin<Box<dyn futures::Stream<Item = std::io::Result<Bytes>> + Send>>,
        u64,
    ),
}

impl Default for Payload {
    fn default() -> Self {
        Payload::Bytes(Full::default())
    }
}

impl From<Bytes> for Payload {
    fn from(bytes: Bytes) -> Self {
        Payload::Bytes(Full::new(bytes))
    }
}

impl hyper::body::Body for Payload {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.get_mut() {
            Payload::Bytes(full) => match Pin::new(full).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
                Poll::Ready(Some(Err(never))) => match never {},
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
            Payload::Stream(stream, _) => stream
                .as_mut()
                .poll_next(cx)
                .map(|next| next.map(|piece| piece.map(Frame::data))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Payload::Bytes(full) => full.is_end_stream(),
            Payload::Stream(..) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Payload::Bytes(full) => full.size_hint(),
            Payload::Stream(_, length) => SizeHint::with_exact(*length),
        }
    }
}

/// One request's response: its head, and its body to read while the
/// connection is driven by the reader.
pub struct Exchange {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: Incoming,
    /// `None` once the body has ended and the connection went back.
    conn: Option<Conn>,
    origin: Arc<Origin>,
}

impl Exchange {
    /// The next piece of the body; `None` at its end, when the connection
    /// goes back to the pool.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(None);
        };
        let body = &mut self.body;
        let data = poll_fn(|cx| conn.poll_with(cx, |cx| poll_data(body, cx))).await?;
        match data {
            Some(Ok(bytes)) => Ok(Some(bytes)),
            Some(Err(e)) => Err(http_error(&e)),
            None => {
                if let Some(conn) = self.conn.take() {
                    self.origin.checkin(conn);
                }
                Ok(None)
            }
        }
    }

    /// The whole body, when it is at most `limit` bytes. A longer one is
    /// refused as soon as that is known, and never read past the limit:
    /// at once when its `Content-Length` says so, else when the bytes
    /// read pass it (what a sender declares is not trusted to hold); its
    /// connection is then closed, the rest unread.
    pub async fn bytes(&mut self, limit: usize) -> Result<Bytes, BodyError> {
        let declared = self.body.size_hint().lower();
        if declared > limit as u64 {
            self.close();
            return Err(BodyError::TooLarge);
        }
        // Room for all of a declared length (within the limit) at once.
        let mut all = BytesMut::with_capacity(usize::try_from(declared).unwrap_or(limit));
        while let Some(chunk) = self.chunk().await.map_err(BodyError::Broke)? {
            if chunk.len() > limit - all.len() {
                self.close();
                return Err(BodyError::TooLarge);
            }
            all.extend_from_slice(&chunk);
        }
        Ok(all.freeze())
    }

    /// The body's first `limit` bytes at most (an error body, for its
    /// message): what arrived before its end, or before it broke. Of a
    /// longer body the rest is never read: its connection is closed.
    pub async fn prefix(&mut self, limit: usize) -> Bytes {
        let mut kept = BytesMut::new();
        while let Ok(Some(chunk)) = self.chunk().await {
            let room = limit - kept.len();
            if chunk.len() > room {
                kept.extend_from_slice(&chunk[..room]);
                self.close();
                break;
            }
            kept.extend_from_slice(&chunk);
        }
        kept.freeze()
    }

    /// Closes the connection, leaving the rest of the body unread.
    fn close(&mut self) {
        self.conn = None;
    }

    /// Reads what is left of a body the caller no longer needs, so the
    /// connection can be reused: at once when it is already here (the
    /// usual case), else in a task of its own for a few seconds. Past
    /// [`DRAIN_LIMIT`] bytes the connection is closed instead.
    pub fn finish(mut self) {
        let mut drained = 0;
        loop {
            match futures::FutureExt::now_or_never(self.chunk()) {
                Some(Ok(Some(chunk))) => {
                    drained += chunk.len();
                    if drained > DRAIN_LIMIT {
                        return;
                    }
                }
                Some(Ok(None) | Err(_)) => return,
                None => break,
            }
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            #[expect(
                clippy::disallowed_methods,
                reason = "draining a body nobody reads for a connection's reuse: at most 5 seconds, and nothing is lost if shutdown cuts it"
            )]
            runtime.spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(5), async {
                    while let Ok(Some(chunk)) = self.chunk().await {
                        drained += chunk.len();
                        if drained > DRAIN_LIMIT {
                            return;
                        }
                    }
                })
                .await;
            });
        }
    }
}

/// The most of a finished body's rest read for its connection's reuse
/// (after a stream's last event there is normally only `[DONE]` and the
/// chunked terminator): more is not worth reading.
const DRAIN_LIMIT: usize = 64 << 10;

/// Why a body was not read whole.
#[derive(Debug)]
pub enum BodyError {
    /// The connection broke or the peer spoke bad HTTP.
    Broke(Error),
    /// The body is longer than the limit it was read within; its
    /// connection was closed.
    TooLarge,
}

fn poll_data(
    body: &mut Incoming,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Bytes, hyper::Error>>> {
    loop {
        let frame = match Pin::new(&mut *body).poll_frame(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
            Poll::Ready(Some(Ok(frame))) => frame,
        };
        // Trailers and empty frames carry nothing for us.
        if let Ok(data) = frame.into_data()
            && !data.is_empty()
        {
            return Poll::Ready(Some(Ok(data)));
        }
    }
}

/// One HTTP/1.1 connection: the handle requests are sent through, and the
/// connection itself, polled by whoever holds it.
struct Conn {
    send: http1::SendRequest<Payload>,
    conn: http1::Connection<TokioIo<Stream>, Payload>,
    /// The connection future finished (closed or failed); never poll it
    /// again.
    ended: bool,
    idle_since: Instant,
}

impl Conn {
    /// Polls `work` (a response or body future of this connection) with
    /// the connection, in the calling task: the connection does the I/O
    /// that lets `work` finish.
    fn poll_with<T>(
        &mut self,
        cx: &mut Context<'_>,
        mut work: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<Result<T, Error>> {
        if let Poll::Ready(value) = work(cx) {
            return Poll::Ready(Ok(value));
        }
        if !self.ended {
            match Pin::new(&mut self.conn).poll(cx) {
                Poll::Pending => {}
                Poll::Ready(result) => {
                    self.ended = true;
                    if let Err(e) = result {
                        tracing::debug!(error = %chain(&e), "upstream connection failed");
                    }
                }
            }
            if let Poll::Ready(value) = work(cx) {
                return Poll::Ready(Ok(value));
            }
        }
        if self.ended {
            // Nothing can make progress without the connection.
            return Poll::Ready(Err(Error::Http(
                "the connection closed before the response ended".into(),
            )));
        }
        Poll::Pending
    }

    /// Whether the connection can take another request: polled once (so a
    /// close by the server is noticed) with no task to wake.
    fn still_open(&mut self) -> bool {
        if !self.ended {
            let mut cx = Context::from_waker(futures::task::noop_waker_ref());
            if Pin::new(&mut self.conn).poll(&mut cx).is_ready() {
                self.ended = true;
            }
        }
        !self.ended && self.send.is_ready()
    }
}

/// A plain or TLS connection.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    #![expect(
        clippy::disallowed_methods,
        reason = "the fake servers' tasks end with the test"
    )]

    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_rustls::TlsAcceptor;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

    use super::*;

    const CERT: &[u8] = include_bytes!("../tests/fixtures/localhost.cert.der");
    const KEY: &[u8] = include_bytes!("../tests/fixtures/localhost.key.der");

    /// Reads one request head (these tests send no bodies).
    async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Option<String> {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.ok()? == 0 {
                return None;
            }
            head.push(byte[0]);
        }
        Some(String::from_utf8_lossy(&head).into_owned())
    }

    /// A server that answers `ok` to `per_connection` requests on each
    /// connection and then closes it without saying so (with `abrupt`:
    /// once the next request has arrived, unanswered); counts connections.
    async fn closing_server(per_connection: usize, abrupt: bool) -> (Uri, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    for _ in 0..per_connection {
                        if read_head(&mut socket).await.is_none() {
                            return;
                        }
                        let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if socket.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                    if abrupt {
                        let _ = read_head(&mut socket).await;
                    }
                });
            }
        });
        (uri.parse().unwrap(), connections)
    }

    fn get(origin: &Origin) -> Request<Payload> {
        Request::get("/")
            .header(hyper::header::HOST, origin.authority.clone())
            .body(Payload::default())
            .unwrap()
    }

    async fn fetch(origin: &Arc<Origin>) -> Result<(StatusCode, Bytes), Error> {
        let mut exchange = origin.send(|| get(origin), Duration::from_secs(5)).await?;
        let body = match exchange.bytes(1 << 20).await {
            Ok(body) => body,
            Err(BodyError::Broke(e)) => return Err(e),
            Err(BodyError::TooLarge) => panic!("a test body over 1 MiB"),
        };
        Ok((exchange.status, body))
    }

    /// A fetch from a [`closing_server`], which answers 200 `ok`.
    async fn fetch_ok(origin: &Arc<Origin>) {
        let (status, body) = fetch(origin).await.unwrap();
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"ok"[..]));
    }

    #[tokio::test]
    async fn a_connection_is_reused_until_the_server_closes_it() {
        let (uri, connections) = closing_server(3, false).await;
        let origin = Arc::new(Origin::new(&uri, &Proxies::default()).unwrap());
        for _ in 0..7 {
            fetch_ok(&origin).await;
            // Time for a close to arrive before the next request.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(connections.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_request_the_server_dropped_on_a_reused_connection_is_sent_again() {
        let (uri, connections) = closing_server(1, true).await;
        let origin = Arc::new(Origin::new(&uri, &Proxies::default()).unwrap());
        for _ in 0..3 {
            fetch_ok(&origin).await;
        }
        // Each connection answers once; the second and third requests went
        // to a reused connection first, then to a new one.
        assert_eq!(connections.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn nothing_listening_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let origin = Arc::new(Origin::new(&uri.parse().unwrap(), &Proxies::default()).unwrap());
        assert!(matches!(fetch(&origin).await, Err(Error::Connect(_))));
    }

    /// A server that answers one request with `head` (a status line and
    /// headers) and then, unless `body` is false, a chunked body of `x`es
    /// with no end, written until the connection closes. The bytes of body
    /// it wrote come back once it stopped (the connection closed).
    async fn endless_server(
        head: &'static str,
        body: bool,
    ) -> (Uri, tokio::sync::oneshot::Receiver<usize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}", listener.local_addr().unwrap());
        let (done, written) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            read_head(&mut socket).await.unwrap();
            socket.write_all(head.as_bytes()).await.unwrap();
            let mut wrote = 0;
            if body {
                let piece = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
                while socket.write_all(piece.as_bytes()).await.is_ok() {
                    wrote += 0x10000;
                }
            } else {
                // Nothing more, until the client closes.
                let _ = socket.read(&mut [0u8; 1]).await;
            }
            let _ = done.send(wrote);
        });
        (uri.parse().unwrap(), written)
    }

    const ENDLESS: &str = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";

    /// What the client's connection may have taken in beyond what it read:
    /// the sockets' buffers on both sides and hyper's read buffer.
    const IN_FLIGHT: usize = 32 << 20;

    async fn exchange(uri: &Uri) -> Exchange {
        let origin = Arc::new(Origin::new(uri, &Proxies::default()).unwrap());
        origin
            .send(|| get(&origin), Duration::from_secs(5))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_declared_length_past_the_limit_is_refused_before_any_body() {
        // The body never comes: only its declared length can refuse it.
        let (uri, closed) = endless_server(
            "HTTP/1.1 200 OK\r\ncontent-length: 1073741824\r\n\r\n",
            false,
        )
        .await;
        let mut exchange = exchange(&uri).await;
        let read = tokio::time::timeout(Duration::from_secs(30), exchange.bytes(1 << 20)).await;
        assert!(matches!(read, Ok(Err(BodyError::TooLarge))));
        drop(exchange);
        // The connection was closed.
        tokio::time::timeout(Duration::from_secs(30), closed)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_read_no_further_and_its_connection_closed() {
        let (uri, written) = endless_server(ENDLESS, true).await;
        let mut exchange = exchange(&uri).await;
        let limit = 1 << 20;
        let read = tokio::time::timeout(Duration::from_secs(60), exchange.bytes(limit)).await;
        assert!(matches!(read, Ok(Err(BodyError::TooLarge))));
        let written = tokio::time::timeout(Duration::from_secs(30), written)
            .await
            .unwrap()
            .unwrap();
        assert!(written < limit + IN_FLIGHT, "{written}");
        drop(exchange);
    }

    #[tokio::test]
    async fn of_an_endless_error_body_only_its_start_is_read() {
        let (uri, written) = endless_server(ENDLESS, true).await;
        let mut exchange = exchange(&uri).await;
        let start = tokio::time::timeout(Duration::from_secs(60), exchange.prefix(1000))
            .await
            .unwrap();
        assert_eq!(&start[..], &[b'x'; 1000][..]);
        let written = tokio::time::timeout(Duration::from_secs(30), written)
            .await
            .unwrap()
            .unwrap();
        assert!(written < IN_FLIGHT, "{written}");
        drop(exchange);
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_read_whole_and_its_connection_kept() {
        let (uri, connections) = closing_server(3, false).await;
        let origin = Arc::new(Origin::new(&uri, &Proxies::default()).unwrap());
        for _ in 0..3 {
            let mut exchange = origin
                .send(|| get(&origin), Duration::from_secs(5))
                .await
                .unwrap();
            // `ok`: exactly the limit.
            assert_eq!(&exchange.bytes(2).await.unwrap()[..], b"ok");
        }
        assert_eq!(connections.load(Ordering::SeqCst), 1);
        let mut exchange = origin
            .send(|| get(&origin), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(matches!(exchange.bytes(1).await, Err(BodyError::TooLarge)));
    }

    /// An HTTP proxy: `CONNECT` tunnels and plain requests in absolute
    /// form, each piped to the address it names (`localhost` is
    /// 127.0.0.1); keeps the first request head of every connection.
    async fn test_proxy() -> (u16, Arc<std::sync::Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = heads.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let Some(head) = read_head(&mut client).await else {
                        return;
                    };
                    seen.lock().unwrap().push(head.clone());
                    let line = head.lines().next().unwrap_or_default().to_owned();
                    let mut words = line.split(' ');
                    let method = words.next().unwrap_or_default();
                    let target = words.next().unwrap_or_default();
                    let address = match method {
                        "CONNECT" => target,
                        _ => target
                            .trim_start_matches("http://")
                            .split('/')
                            .next()
                            .unwrap_or_default(),
                    }
                    .replace("localhost", "127.0.0.1");
                    let Ok(mut server) = TcpStream::connect(address).await else {
                        return;
                    };
                    let opened = if method == "CONNECT" {
                        client
                            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                            .await
                    } else {
                        server.write_all(head.as_bytes()).await
                    };
                    if opened.is_ok() {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        (port, heads)
    }

    fn proxies(vars: &[(&str, String)]) -> Proxies {
        Proxies::from_vars(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        })
        .unwrap()
    }

    #[tokio::test]
    async fn plain_requests_go_to_the_proxy_whole_url_and_credentials() {
        let (uri, connections) = closing_server(10, false).await;
        let (proxy_port, heads) = test_proxy().await;
        let via = proxies(&[(
            "http_proxy",
            format!("http://user:pw@127.0.0.1:{proxy_port}"),
        )]);
        let origin = Arc::new(Origin::new(&uri, &via).unwrap());
        for _ in 0..2 {
            fetch_ok(&origin).await;
        }
        assert_eq!(connections.load(Ordering::SeqCst), 1);
        let first = heads.lock().unwrap().clone();
        assert_eq!(first.len(), 1, "{first:?}");
        let authority = uri.authority().unwrap().as_str().to_owned();
        assert!(
            first[0].starts_with(&format!("GET http://{authority}/ HTTP/1.1\r\n")),
            "{first:?}"
        );
        // "user:pw"
        assert!(
            first[0].contains("proxy-authorization: Basic dXNlcjpwdw==\r\n"),
            "{first:?}"
        );
        // Named in no_proxy: straight to the server.
        let direct = proxies(&[
            ("http_proxy", format!("http://127.0.0.1:{proxy_port}")),
            ("no_proxy", "localhost,127.0.0.0/8".into()),
        ]);
        let origin = Arc::new(Origin::new(&uri, &direct).unwrap());
        fetch_ok(&origin).await;
        assert_eq!(connections.load(Ordering::SeqCst), 2);
        assert_eq!(heads.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn https_goes_through_a_connect_tunnel() {
        let port = tls_server().await;
        let (proxy_port, heads) = test_proxy().await;
        let via = proxies(&[("HTTPS_PROXY", format!("127.0.0.1:{proxy_port}"))]);
        let uri: Uri = format!("https://localhost:{port}/v1").parse().unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from(CERT.to_vec())).unwrap();
        let origin = Arc::new(Origin::with_tls(&uri, &via, || client_config(roots)).unwrap());
        let (status, body) = fetch(&origin).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(&body[..], format!("localhost:{port}").as_bytes());
        let heads = heads.lock().unwrap().clone();
        assert_eq!(
            heads,
            [format!(
                "CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n"
            )]
        );
    }

    #[tokio::test]
    async fn a_proxy_that_refuses_the_tunnel_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let _ = read_head(&mut socket).await;
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n",
                    )
                    .await;
            }
        });
        let via = proxies(&[("all_proxy", format!("http://127.0.0.1:{proxy_port}"))]);
        let uri: Uri = "https://api.example.com/v1".parse().unwrap();
        let origin = Arc::new(Origin::new(&uri, &via).unwrap());
        match fetch(&origin).await {
            Err(Error::Connect(detail)) => assert!(detail.contains("407"), "{detail}"),
            other => panic!("{other:?}"),
        }
    }

    /// An HTTPS server with the test certificate for `localhost`.
    async fn tls_server() -> u16 {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(CERT.to_vec())],
                PrivateKeyDer::try_from(KEY.to_vec()).unwrap(),
            )
            .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(socket).await else {
                        return;
                    };
                    while let Some(head) = read_head(&mut tls).await {
                        let host = head
                            .lines()
                            .find_map(|l| l.strip_prefix("host: "))
                            .unwrap_or("")
                            .to_owned();
                        let reply = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{host}",
                            host.len()
                        );
                        if tls.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn https_is_spoken_and_the_certificate_checked() {
        let port = tls_server().await;
        let uri: Uri = format!("https://localhost:{port}/v1").parse().unwrap();
        // The public roots do not vouch for the test certificate.
        let origin = Arc::new(Origin::new(&uri, &Proxies::default()).unwrap());
        match fetch(&origin).await {
            Err(Error::Connect(detail)) => assert!(detail.contains("certificate"), "{detail}"),
            other => panic!("{other:?}"),
        }
        // Trusting it, the request goes through, twice on one connection.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from(CERT.to_vec())).unwrap();
        let origin =
            Arc::new(Origin::with_tls(&uri, &Proxies::default(), || client_config(roots)).unwrap());
        for _ in 0..2 {
            let (status, body) = fetch(&origin).await.unwrap();
            assert_eq!(status, StatusCode::OK);
            assert_eq!(&body[..], format!("localhost:{port}").as_bytes());
        }
        assert_eq!(origin.idle().len(), 1);
    }
}
