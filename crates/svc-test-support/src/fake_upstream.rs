//! [`FakeUpstream`]: an OpenAI-compatible inference server on port 0 that
//! misbehaves on demand, for testing what svc does in front of one.
//!
//! It speaks `POST /v1/chat/completions` (streamed like vLLM, or whole),
//! `POST /v1/completions`, `POST /v1/embeddings`, `POST /v1/rerank`,
//! `POST /v1/audio/transcriptions`, `/v1/audio/translations`,
//! `/v1/audio/speech` and `GET /v1/models` (and `GET /v1/fake/received`:
//! what it last received, for tests in another process). What it does with a chat request is a [`Behavior`]:
//! one for every request, or queued for the next ones. Connections are
//! served by hyper directly so a handler can close its own connection
//! (before or in the middle of a response), and [`FakeUpstream::kill`]
//! drops the listener and every open connection at once.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// What the fake does with a chat request.
#[derive(Debug, Clone, PartialEq)]
pub enum Behavior {
    /// Answers with the [`Reply`].
    Normal,
    /// Waits this long before sending anything, then answers normally.
    Delay(Duration),
    /// Answers this status with an OpenAI-shaped error body and message.
    Status(u16, String),
    /// Closes the connection without answering.
    Close,
    /// Streams the role chunk and `n` pieces of the reply, then closes the
    /// connection in the middle of the stream.
    DropAfter(usize),
    /// Streams the role chunk and `n` pieces, then an event that is not JSON,
    /// and ends the body.
    MalformedAfter(usize),
    /// Accepts the request and never answers.
    Hang,
    /// Streams the role chunk and `n` pieces, then sends nothing more.
    HangAfter(usize),
    /// Answers `status` with what it would have sent (the normal reply for
    /// a 200, an error body otherwise) padded to `bytes` bytes by a
    /// `"pad"` string of `x`es, streamed with no length declared, the
    /// padding 64 KiB a piece as the reader takes it (counted by
    /// [`FakeUpstream::padding_sent`]). For a whole reply: a streamed chat
    /// is answered normally.
    Padded { status: u16, bytes: u64 },
    /// Answers normally, but embeddings and rerank replies report this
    /// many tokens used, whatever the request held.
    ReportTokens(u64),
}

/// A tool call the fake makes, its arguments sent in pieces.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Vec<String>,
}

/// What a normal answer holds. Each reasoning, content and argument piece
/// is one chunk ("piece" in [`Behavior`]), in that order.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// `None`: `Echo: <last user message>`, a word a piece.
    pub content: Option<Vec<String>>,
    pub reasoning: Vec<String>,
    /// Send reasoning as vLLM's `reasoning` instead of `reasoning_content`.
    pub vllm_reasoning: bool,
    pub tool_calls: Vec<FakeToolCall>,
    /// Send usage when the request asks for it (`stream_options`).
    pub usage: bool,
    /// Wait between two chunks.
    pub chunk_delay: Duration,
}

impl Default for Reply {
    fn default() -> Self {
        Reply {
            content: None,
            reasoning: Vec::new(),
            vllm_reasoning: false,
            tool_calls: Vec::new(),
            usage: true,
            chunk_delay: Duration::ZERO,
        }
    }
}

#[derive(Debug)]
struct Shared {
    behavior: Mutex<Behavior>,
    queue: Mutex<VecDeque<Behavior>>,
    reply: Mutex<Reply>,
    api_key: Mutex<Option<String>>,
    models_status: AtomicU16,
    /// Bytes `GET /v1/models` pads its list to, 0 for none.
    models_padding: AtomicU64,
    /// Padding bytes handed to connections by every padded body.
    padding_sent: AtomicU64,
    /// Padded bodies whose connection closed before their end.
    padded_cut: AtomicUsize,
    connections: AtomicUsize,
    chat_requests: AtomicUsize,
    embeddings_requests: AtomicUsize,
    rerank_requests: AtomicUsize,
    completions_requests: AtomicUsize,
    models_requests: AtomicUsize,
    completed: AtomicUsize,
    cancelled: AtomicUsize,
    last_request: Mutex<Option<Value>>,
    /// What the last audio upload held (see [`FakeUpstream::last_audio`]).
    last_audio: Mutex<Option<Value>>,
}

/// The connection a request came on; cancelling it closes the connection.
#[derive(Clone)]
struct Connection(CancellationToken);

/// A running fake upstream.
pub struct FakeUpstream {
    pub addr: SocketAddr,
    /// `http://127.0.0.1:<port>/v1`, what an upstream `base_url` is.
    pub base_url: String,
    shared: Arc<Shared>,
    stop: CancellationToken,
    accept: Mutex<Option<JoinHandle<()>>>,
}

impl FakeUpstream {
    /// Starts a fake upstream on a free port of 127.0.0.1.
    pub async fn start() -> FakeUpstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake upstream");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            behavior: Mutex::new(Behavior::Normal),
            queue: Mutex::new(VecDeque::new()),
            reply: Mutex::new(Reply::default()),
            api_key: Mutex::new(None),
            models_status: AtomicU16::new(200),
            models_padding: AtomicU64::new(0),
            padding_sent: AtomicU64::new(0),
            padded_cut: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            chat_requests: AtomicUsize::new(0),
            embeddings_requests: AtomicUsize::new(0),
            rerank_requests: AtomicUsize::new(0),
            completions_requests: AtomicUsize::new(0),
            models_requests: AtomicUsize::new(0),
            completed: AtomicUsize::new(0),
            cancelled: AtomicUsize::new(0),
            last_request: Mutex::new(None),
            last_audio: Mutex::new(None),
        });
        let router = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/embeddings", post(embeddings))
            .route("/v1/rerank", post(rerank))
            .route("/v1/completions", post(completions))
            .route("/v1/models", get(models))
            .route("/v1/audio/transcriptions", post(transcriptions))
            .route("/v1/audio/translations", post(translations))
            .route("/v1/audio/speech", post(speech))
            .route("/v1/fake/received", get(fake_received))
            .with_state(shared.clone());
        let stop = CancellationToken::new();
        let accept = tokio::spawn(accept_loop(listener, router, shared.clone(), stop.clone()));
        FakeUpstream {
            addr,
            base_url: format!("http://{addr}/v1"),
            shared,
            stop,
            accept: Mutex::new(Some(accept)),
        }
    }

    /// What every request gets unless one is queued.
    pub fn set_behavior(&self, behavior: Behavior) {
        *self.shared.behavior.lock().unwrap() = behavior;
    }

    /// What the next request gets (then the one after, …).
    pub fn push_behavior(&self, behavior: Behavior) {
        self.shared.queue.lock().unwrap().push_back(behavior);
    }

    /// What normal answers hold.
    pub fn set_reply(&self, reply: Reply) {
        *self.shared.reply.lock().unwrap() = reply;
    }

    /// Refuse requests (401) without `Authorization: Bearer <key>`.
    pub fn require_key(&self, key: &str) {
        *self.shared.api_key.lock().unwrap() = Some(key.to_owned());
    }

    /// The status `GET /v1/models` answers (200 unless set).
    pub fn set_models_status(&self, status: u16) {
        self.shared.models_status.store(status, Ordering::SeqCst);
    }

    /// Pads `GET /v1/models`'s list to `bytes` bytes as
    /// [`Behavior::Padded`] does (0: no padding).
    pub fn set_models_padding(&self, bytes: u64) {
        self.shared.models_padding.store(bytes, Ordering::SeqCst);
    }

    /// Bytes of padding that padded bodies handed to their connections
    /// so far (a piece at a time, as the connection took them: at most a
    /// socket's buffers more than the reader read).
    pub fn padding_sent(&self) -> u64 {
        self.shared.padding_sent.load(Ordering::SeqCst)
    }

    /// Padded bodies whose reader closed the connection before their end.
    pub fn padded_cut(&self) -> usize {
        self.shared.padded_cut.load(Ordering::SeqCst)
    }

    /// TCP connections accepted.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Chat requests received, whatever became of them.
    pub fn chat_requests(&self) -> usize {
        self.shared.chat_requests.load(Ordering::SeqCst)
    }

    /// `POST /v1/completions` requests received.
    pub fn completions_requests(&self) -> usize {
        self.shared.completions_requests.load(Ordering::SeqCst)
    }

    /// What the last transcription or translation received: `path`,
    /// `content_type` (the form's), `fields` (name to value, the file
    /// left out), and `file` (`filename`, `content_type`, `bytes`, and
    /// `sum`, the wrapping sum of its bytes, when the body was at most
    /// 32 MiB).
    pub fn last_audio(&self) -> Option<Value> {
        self.shared.last_audio.lock().unwrap().clone()
    }

    /// `POST /v1/rerank` requests received.
    pub fn rerank_requests(&self) -> usize {
        self.shared.rerank_requests.load(Ordering::SeqCst)
    }

    /// `POST /v1/embeddings` requests received.
    pub fn embeddings_requests(&self) -> usize {
        self.shared.embeddings_requests.load(Ordering::SeqCst)
    }

    /// `GET /v1/models` requests received.
    pub fn models_requests(&self) -> usize {
        self.shared.models_requests.load(Ordering::SeqCst)
    }

    /// Streams sent to their end.
    pub fn completed(&self) -> usize {
        self.shared.completed.load(Ordering::SeqCst)
    }

    /// Streams that stopped before their end (the client went away, or
    /// the fake itself cut them).
    pub fn cancelled(&self) -> usize {
        self.shared.cancelled.load(Ordering::SeqCst)
    }

    /// The JSON body of the last chat request.
    pub fn last_request(&self) -> Option<Value> {
        self.shared.last_request.lock().unwrap().clone()
    }

    /// Stops listening and drops every open connection, as a crashed
    /// server would; returns once the port is closed.
    pub async fn kill(&self) {
        self.stop.cancel();
        let accept = self.accept.lock().unwrap().take();
        if let Some(accept) = accept {
            let _ = accept.await;
        }
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept_loop(
    listener: TcpListener,
    router: Router,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    loop {
        let stream = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        shared.connections.fetch_add(1, Ordering::SeqCst);
        let _ = stream.set_nodelay(true);
        let connection = stop.child_token();
        let router = router.clone();
        tokio::spawn(async move {
            let token = connection.clone();
            let service = hyper::service::service_fn(move |mut request| {
                request.extensions_mut().insert(Connection(token.clone()));
                router.clone().oneshot(request)
            });
            let serve = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            // Cancelling drops the connection: its socket closes mid-whatever.
            tokio::select! {
                _ = serve => {}
                _ = connection.cancelled() => {}
            }
        });
    }
}

fn error_body(status: u16, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(error_json(status, message))).into_response()
}

fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    match &*shared.api_key.lock().unwrap() {
        None => true,
        Some(key) => {
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                == Some(format!("Bearer {key}").as_str())
        }
    }
}

/// The OpenAI-shaped error object of `status` with `message`.
fn error_json(status: StatusCode, message: &str) -> Value {
    let kind = if status.is_client_error() {
        "invalid_request_error"
    } else {
        "server_error"
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": status.as_u16()}})
}

/// Counts a padded body dropped before its end (its connection closed).
struct PaddingGuard {
    shared: Arc<Shared>,
    ended: bool,
}

impl Drop for PaddingGuard {
    fn drop(&mut self) {
        if !self.ended {
            self.shared.padded_cut.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Padding, handed out a slice at a time.
static PAD: [u8; 64 * 1024] = [b'x'; 64 * 1024];

/// `status` with `reply` (a JSON object) padded to `bytes` bytes: a
/// `"pad"` string first, then the reply's own fields, streamed with no
/// `Content-Length`, the padding counted as each piece is taken.
fn padded(shared: &Arc<Shared>, status: u16, reply: &Value, bytes: u64) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let head = "{\"pad\":\"";
    let rest = reply.to_string();
    let tail = match rest.strip_prefix('{') {
        Some("}") | None => "\"}".to_owned(),
        Some(fields) => format!("\",{fields}"),
    };
    let mut left = bytes.saturating_sub((head.len() + tail.len()) as u64);
    let shared = shared.clone();
    let stream = async_stream::stream! {
        let mut cut = PaddingGuard { shared, ended: false };
        yield Ok::<_, Infallible>(Bytes::from_static(head.as_bytes()));
        while left > 0 {
            let piece = left.min(PAD.len() as u64) as usize;
            cut.shared.padding_sent.fetch_add(piece as u64, Ordering::SeqCst);
            left -= piece as u64;
            yield Ok(Bytes::from_static(&PAD[..piece]));
        }
        yield Ok(Bytes::from(tail));
        cut.ended = true;
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response()
}

async fn models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    shared.models_requests.fetch_add(1, Ordering::SeqCst);
    if !authorized(&shared, &headers) {
        return error_body(401, "Incorrect API key provided");
    }
    let status = shared.models_status.load(Ordering::SeqCst);
    if status != 200 {
        return error_body(status, "not ready");
    }
    let list = json!({"object": "list", "data": [
        {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}
    ]});
    match shared.models_padding.load(Ordering::SeqCst) {
        0 => Json(list).into_response(),
        bytes => padded(&shared, 200, &list, bytes),
    }
}

/// A normal reply as `behavior` sends it: padded, or as it is.
fn answer(shared: &Arc<Shared>, reply: Value, behavior: &Behavior) -> Response {
    match behavior {
        Behavior::Padded { status, bytes } => padded(shared, *status, &reply, *bytes),
        _ => Json(reply).into_response(),
    }
}

/// The tokens a reply reports: `counted`, unless `behavior` says another.
fn reported(counted: usize, behavior: &Behavior) -> u64 {
    match behavior {
        Behavior::ReportTokens(tokens) => *tokens,
        _ => counted as u64,
    }
}

/// Counts a stream as completed or cancelled, once.
struct StreamGuard {
    shared: Arc<Shared>,
    completed: bool,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let counter = if self.completed {
            &self.shared.completed
        } else {
            &self.shared.cancelled
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

/// The last user message's text; with parts, the text parts joined and
/// each image as `[image <url>]` (so a test sees the images arrived).
fn last_user(request: &Value) -> String {
    let Some(content) = request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| &m["content"])
    else {
        return String::new();
    };
    match content {
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p["type"].as_str() {
                Some("image_url") => {
                    format!("[image {}]", p["image_url"]["url"].as_str().unwrap_or("?"))
                }
                _ => p["text"].as_str().unwrap_or_default().to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.as_str().unwrap_or_default().to_owned(),
    }
}

fn prompt_words(request: &Value) -> u64 {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            m["content"]
                .as_str()
                .unwrap_or("")
                .split_whitespace()
                .count() as u64
        })
        .sum()
}

/// `[words, bytes, 1]` of a text input, `[ids, sum of ids, 1]` of a token
/// input: what the fake's `/v1/embeddings` answers for it (listed in
/// reverse order, with indexes, as a server may).
pub fn fake_upstream_vector(input: &Value) -> Vec<f32> {
    match input {
        Value::String(text) => vec![
            text.split_whitespace().count() as f32,
            text.len() as f32,
            1.0,
        ],
        Value::Array(ids) => vec![
            ids.len() as f32,
            ids.iter().filter_map(Value::as_f64).sum::<f64>() as f32,
            1.0,
        ],
        _ => Vec::new(),
    }
}

/// OpenAI's embeddings, under the same behaviors as chat (a status, a
/// closed connection, a hang, a delay).
async fn embeddings(
    State(shared): State<Arc<Shared>>,
    Extension(connection): Extension<Connection>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.embeddings_requests.fetch_add(1, Ordering::SeqCst);
    let (request, behavior) = match received(&shared, &connection, &headers, &body).await {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    let inputs = match &request["input"] {
        Value::Array(items) => items.clone(),
        one => vec![one.clone()],
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(|(i, input)| json!({"object": "embedding", "index": i, "embedding": fake_upstream_vector(input)}))
        .collect();
    let tokens: usize = inputs
        .iter()
        .map(|i| fake_upstream_vector(i)[0] as usize)
        .sum();
    let tokens = reported(tokens, &behavior);
    let reply = json!({
        "object": "list",
        "data": data,
        "model": request["model"],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    });
    answer(&shared, reply, &behavior)
}

/// A Jina/Cohere-shaped rerank, as vLLM and llama-server answer it, under
/// the same behaviors as chat: each document scored by
/// `svc_test_support::fake_relevance` (listed from the last document to
/// the first, as an upstream may), the first `top_n`, with usage.
async fn rerank(
    State(shared): State<Arc<Shared>>,
    Extension(connection): Extension<Connection>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.rerank_requests.fetch_add(1, Ordering::SeqCst);
    let (request, behavior) = match received(&shared, &connection, &headers, &body).await {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    let query = request["query"].as_str().unwrap_or_default();
    let documents = request["documents"].as_array().cloned().unwrap_or_default();
    let top_n = request["top_n"]
        .as_u64()
        .map_or(documents.len(), |n| n as usize);
    let results: Vec<Value> = documents
        .iter()
        .enumerate()
        .rev()
        .take(top_n)
        .map(|(i, document)| {
            let text = document.as_str().unwrap_or_default();
            json!({"index": i, "relevance_score": crate::fake_relevance(query, text)})
        })
        .collect();
    let tokens: usize = documents
        .iter()
        .map(|d| d.as_str().unwrap_or_default().split_whitespace().count() + 3)
        .sum();
    let reply = json!({
        "id": "rerank-fake",
        "model": request["model"],
        "results": results,
        "usage": {"total_tokens": reported(tokens, &behavior)},
    });
    answer(&shared, reply, &behavior)
}

/// What every endpoint of the fake does first: checks the key, reads the
/// JSON body (kept as the last request), takes the next behavior and acts
/// on the ones that decide before any reply (a delay, a status, a closed
/// connection, a hang). `Err` is the answer instead of a reply.
async fn received(
    shared: &Arc<Shared>,
    connection: &Connection,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Value, Behavior), Response> {
    if !authorized(shared, headers) {
        return Err(error_body(401, "Incorrect API key provided"));
    }
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return Err(error_body(400, "the body is not JSON"));
    };
    let behavior = shared
        .queue
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or_else(|| shared.behavior.lock().unwrap().clone());
    *shared.last_request.lock().unwrap() = Some(request.clone());
    match &behavior {
        Behavior::Delay(delay) => tokio::time::sleep(*delay).await,
        Behavior::Status(status, message) => return Err(error_body(*status, message)),
        Behavior::Close => {
            connection.0.cancel();
            std::future::pending::<()>().await;
        }
        Behavior::Hang => std::future::pending::<()>().await,
        Behavior::Padded { status, bytes } if *status != 200 => {
            let code = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let error = error_json(code, "a padded error");
            return Err(padded(shared, *status, &error, *bytes));
        }
        _ => {}
    }
    Ok((request, behavior))
}

/// Legacy text completions, as vLLM serves them: `Echo: <prompt>` a word
/// a piece (`Fill: <prompt>|<suffix>` with a suffix), the legacy log
/// probabilities when asked (each piece one token at `-0.25`, its
/// likeliest the piece and `alt` at `-3`), whole or streamed with usage.
async fn completions(
    State(shared): State<Arc<Shared>>,
    Extension(connection): Extension<Connection>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.completions_requests.fetch_add(1, Ordering::SeqCst);
    let (request, _) = match received(&shared, &connection, &headers, &body).await {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    let prompt = request["prompt"].as_str().unwrap_or_default();
    let text = match request["suffix"].as_str() {
        Some(suffix) => format!("Fill: {prompt}|{suffix}"),
        None => format!("Echo: {prompt}"),
    };
    let pieces: Vec<&str> = text.split_inclusive(' ').collect();
    let logprobs = |pieces: &[&str], offset: usize| -> Value {
        if request["logprobs"].is_null() {
            return Value::Null;
        }
        let mut at = offset;
        let offsets: Vec<usize> = pieces
            .iter()
            .map(|p| {
                let here = at;
                at += p.chars().count();
                here
            })
            .collect();
        json!({
            "tokens": pieces,
            "token_logprobs": vec![-0.25; pieces.len()],
            "top_logprobs": pieces.iter().map(|p| json!({*p: -0.25, "alt": -3.0})).collect::<Vec<_>>(),
            "text_offset": offsets,
        })
    };
    let prompt_tokens = prompt.split_whitespace().count();
    let usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": pieces.len(),
        "total_tokens": prompt_tokens + pieces.len(),
    });
    let model = request["model"].clone();
    if request["stream"] != true {
        return Json(json!({
            "id": "cmpl-fake", "object": "text_completion", "created": 0, "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": logprobs(&pieces, 0), "finish_reason": "stop"}],
            "usage": usage,
        }))
        .into_response();
    }
    let frame = |choices: Value, usage: Value| {
        let chunk = json!({"id": "cmpl-fake", "object": "text_completion", "created": 0,
            "model": model, "choices": choices, "usage": usage});
        Bytes::from(format!("data: {chunk}\n\n"))
    };
    let mut frames = Vec::new();
    let mut offset = 0;
    for piece in &pieces {
        frames.push(frame(
            json!([{"index": 0, "text": piece, "logprobs": logprobs(&[piece], offset), "finish_reason": null}]),
            Value::Null,
        ));
        offset += piece.chars().count();
    }
    frames.push(frame(
        json!([{"index": 0, "text": "", "logprobs": null, "finish_reason": "stop"}]),
        Value::Null,
    ));
    if request["stream_options"]["include_usage"] == true {
        frames.push(frame(json!([]), usage));
    }
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    let stream = futures::stream::iter(frames.into_iter().map(Ok::<_, Infallible>));
    let mut response = Body::from_stream(stream).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    response
}

async fn chat(
    State(shared): State<Arc<Shared>>,
    Extension(connection): Extension<Connection>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.chat_requests.fetch_add(1, Ordering::SeqCst);
    let (request, behavior) = match received(&shared, &connection, &headers, &body).await {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    let reply = shared.reply.lock().unwrap().clone();
    let content = reply.content.clone().unwrap_or_else(|| {
        format!("Echo: {}", last_user(&request))
            .split_inclusive(' ')
            .map(str::to_owned)
            .collect()
    });
    let prompt_tokens = prompt_words(&request);
    let model = request["model"].as_str().unwrap_or("fake-model").to_owned();
    let stream = request["stream"] == true;
    let include_usage = request["stream_options"]["include_usage"] == true;
    let completion_tokens = (reply.reasoning.len()
        + content.len()
        + reply
            .tool_calls
            .iter()
            .map(|c| c.arguments.len() + 1)
            .sum::<usize>()) as u64;
    // As vLLM with a prefix cache reports it: here, the words of every
    // message before the last.
    let last_words = request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map_or(0, |m| {
            m["content"]
                .as_str()
                .unwrap_or("")
                .split_whitespace()
                .count() as u64
        });
    let usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": prompt_tokens.saturating_sub(last_words)},
    });
    let finish = if reply.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let reasoning_field = if reply.vllm_reasoning {
        "reasoning"
    } else {
        "reasoning_content"
    };
    if !stream {
        let mut message = json!({"role": "assistant", "content": content.concat()});
        if !reply.reasoning.is_empty() {
            message[reasoning_field] = json!(reply.reasoning.concat());
        }
        if !reply.tool_calls.is_empty() {
            message["tool_calls"] = reply
                .tool_calls
                .iter()
                .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments.concat()}}))
                .collect();
        }
        let reply = json!({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        });
        return answer(&shared, reply, &behavior);
    }

    let frame = |choices: Value, usage: Value| {
        let chunk = json!({
            "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
            "model": model, "choices": choices, "usage": usage,
        });
        Bytes::from(format!("data: {chunk}\n\n"))
    };
    let delta = |delta: Value| json!([{"index": 0, "delta": delta, "finish_reason": null}]);
    let role = frame(
        delta(json!({"role": "assistant", "content": ""})),
        Value::Null,
    );
    let mut pieces = Vec::new();
    for text in &reply.reasoning {
        pieces.push(frame(delta(json!({ reasoning_field: text })), Value::Null));
    }
    for text in &content {
        pieces.push(frame(delta(json!({ "content": text })), Value::Null));
    }
    for (i, call) in reply.tool_calls.iter().enumerate() {
        pieces.push(frame(
            delta(
                json!({"tool_calls": [{"index": i, "id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": ""}}]}),
            ),
            Value::Null,
        ));
        for args in &call.arguments {
            pieces.push(frame(
                delta(json!({"tool_calls": [{"index": i, "function": {"arguments": args}}]})),
                Value::Null,
            ));
        }
    }
    let mut end = vec![frame(
        json!([{"index": 0, "delta": {}, "finish_reason": finish}]),
        Value::Null,
    )];
    if reply.usage && include_usage {
        end.push(frame(json!([]), usage));
    }
    end.push(Bytes::from_static(b"data: [DONE]\n\n"));

    let cut = match behavior {
        Behavior::DropAfter(n) | Behavior::MalformedAfter(n) | Behavior::HangAfter(n) => Some(n),
        _ => None,
    };
    let delay = reply.chunk_delay;
    let shared = shared.clone();
    let stream = async_stream::stream! {
        let mut guard = StreamGuard { shared, completed: false };
        yield Ok::<_, Infallible>(role);
        for (sent, piece) in pieces.into_iter().enumerate() {
            if cut == Some(sent) {
                break;
            }
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            yield Ok(piece);
        }
        match behavior {
            Behavior::DropAfter(_) => {
                // Let the chunks so far reach the client, then cut.
                tokio::time::sleep(Duration::from_millis(20)).await;
                connection.0.cancel();
                std::future::pending::<()>().await;
            }
            Behavior::MalformedAfter(_) => {
                yield Ok(Bytes::from_static(b"data: {\"choices\": [oops\n\n"));
                return;
            }
            Behavior::HangAfter(_) => std::future::pending::<()>().await,
            _ => {}
        }
        for piece in end {
            yield Ok(piece);
        }
        guard.completed = true;
    };
    let mut response = Body::from_stream(stream).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    response
}

/// What the fake last received, for a test in another process:
/// `{"request": <the last JSON body>, "audio": <see last_audio>}`.
async fn fake_received(State(shared): State<Arc<Shared>>) -> Response {
    let request = shared.last_request.lock().unwrap().clone();
    let audio = shared.last_audio.lock().unwrap().clone();
    Json(json!({"request": request, "audio": audio})).into_response()
}

/// Bodies up to this size are kept whole (the file's bytes are summed);
/// of a larger one only its start (the fields, which come first) is kept.
const AUDIO_KEPT: usize = 32 * 1024 * 1024;

async fn transcriptions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    audio_text(&shared, &headers, body, "/v1/audio/transcriptions").await
}

async fn translations(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    audio_text(&shared, &headers, body, "/v1/audio/translations").await
}

/// A Whisper-shaped transcription of a `multipart/form-data` upload, read
/// as it arrives: the text says what was heard (`<bytes> bytes of
/// <filename>`, `translated:` before it for a translation), the audio
/// lasts a second per 32,000 bytes (16 kHz 16-bit PCM), in the
/// `response_format` asked for (`usage.seconds` in `json`, `duration` in
/// `verbose_json`, a cue ending then in `srt` and `vtt`).
async fn audio_text(shared: &Shared, headers: &HeaderMap, body: Body, path: &str) -> Response {
    if !authorized(shared, headers) {
        return error_body(401, "Incorrect API key provided");
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let Some(boundary) = content_type
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))
        .map(|b| b.trim_matches('"').to_owned())
    else {
        return error_body(400, "not multipart/form-data");
    };
    let mut kept = Vec::new();
    let mut total = 0usize;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
        let Ok(chunk) = chunk else {
            return error_body(400, "the body broke");
        };
        total += chunk.len();
        if kept.len() < AUDIO_KEPT {
            kept.extend_from_slice(&chunk[..chunk.len().min(AUDIO_KEPT - kept.len())]);
        }
    }
    let whole = total == kept.len();
    let delimiter = format!("--{boundary}");
    let mut fields = serde_json::Map::new();
    let mut file = json!(null);
    let mut at = 0;
    while let Some(found) = find(&kept[at..], delimiter.as_bytes()) {
        let start = at + found + delimiter.len();
        if kept[start..].starts_with(b"--") {
            break;
        }
        let Some(head_end) = find(&kept[start..], b"\r\n\r\n") else {
            break;
        };
        let head = String::from_utf8_lossy(&kept[start..start + head_end]).to_string();
        let data = start + head_end + 4;
        let next = find(&kept[data..], format!("\r\n{delimiter}").as_bytes()).map(|n| data + n);
        let param = |key: &str| {
            head.split(';')
                .find_map(|p| p.trim().strip_prefix(&format!("{key}=\"")))
                .and_then(|v| v.split('"').next())
                .map(str::to_owned)
        };
        let name = param("name").unwrap_or_default();
        if name == "file" {
            let bytes = match next {
                Some(end) => end - data,
                // Past what was kept: the rest less the closing delimiter.
                None => total - data - format!("\r\n{delimiter}--\r\n").len(),
            };
            let part_type = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Type: "))
                .map(str::to_owned);
            let mut description =
                json!({"filename": param("filename"), "content_type": part_type, "bytes": bytes});
            if whole && let Some(end) = next {
                let sum = kept[data..end]
                    .iter()
                    .fold(0u64, |sum, b| sum.wrapping_add(u64::from(*b)));
                description["sum"] = json!(sum);
            }
            file = description;
        } else if let Some(end) = next {
            fields.insert(name, json!(String::from_utf8_lossy(&kept[data..end])));
        }
        match next {
            Some(end) => at = end + 2,
            None => break,
        }
    }
    let bytes = file["bytes"].as_u64().unwrap_or(0);
    let filename = file["filename"].as_str().unwrap_or("?").to_owned();
    *shared.last_audio.lock().unwrap() = Some(json!({
        "path": path, "content_type": content_type, "fields": fields, "file": file,
    }));
    let seconds = bytes.div_ceil(32_000);
    let translated = if path.ends_with("translations") {
        "translated: "
    } else {
        ""
    };
    let text = format!("{translated}{bytes} bytes of {filename}");
    let format = fields
        .get("response_format")
        .and_then(Value::as_str)
        .unwrap_or("json");
    let cue = |comma: char| {
        format!(
            "00:00:00{comma}000 --> {:02}:{:02}:{:02}{comma}000",
            seconds / 3600,
            seconds / 60 % 60,
            seconds % 60
        )
    };
    match format {
        "text" => ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], format!("{text}\n")).into_response(),
        "srt" => ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], format!("1\n{}\n{text}\n\n", cue(','))).into_response(),
        "vtt" => ([(header::CONTENT_TYPE, "text/vtt; charset=utf-8")], format!("WEBVTT\n\n{}\n{text}\n\n", cue('.'))).into_response(),
        "verbose_json" => Json(json!({"task": "transcribe", "language": "english", "duration": seconds, "text": text, "segments": []})).into_response(),
        _ => Json(json!({"text": text, "usage": {"type": "duration", "seconds": seconds}})).into_response(),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Speech as an upstream streams it: the `input`'s bytes three times, a
/// piece every 50 ms, after a four-byte tag of the format (`fmt:` and
/// its first letter), typed as OpenAI types each format.
async fn speech(
    State(shared): State<Arc<Shared>>,
    Extension(connection): Extension<Connection>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (request, _) = match received(&shared, &connection, &headers, &body).await {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    let input = request["input"].as_str().unwrap_or_default().to_owned();
    let format = request["response_format"]
        .as_str()
        .unwrap_or("mp3")
        .to_owned();
    let media = match format.as_str() {
        "wav" => "audio/wav",
        "opus" => "audio/ogg",
        "flac" => "audio/flac",
        "aac" => "audio/aac",
        "pcm" => "audio/pcm",
        _ => "audio/mpeg",
    };
    let tag = format!("fmt{}", &format[..1]);
    let pieces = async_stream::stream! {
        yield Ok::<_, Infallible>(Bytes::from(tag));
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            yield Ok(Bytes::from(input.clone()));
        }
    };
    ([(header::CONTENT_TYPE, media)], Body::from_stream(pieces)).into_response()
}
