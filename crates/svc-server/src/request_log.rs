//! The request log (issue 33): one row per API request, written off the
//! request's path.
//!
//! The request-log layer (`crate::layers`) opens a [`Pending`] row for each `/v1/` request and runs
//! the request with it as a task-local, so the parts that learn something
//! fill it in where they are: the key extractor (key, project, account),
//! the pipelines (model, tokens, time to first token, through
//! [`crate::usage`]). The row is finished when the answer's last byte is
//! sent, or when the client goes away (status 499, `client_disconnected`),
//! and handed to [`RequestLog`]: a bounded queue that a background task
//! writes in batches, so a slow or hung database never slows a request.
//! When the queue is full, rows are dropped and counted
//! (`svc_request_log_dropped_total`). Never the prompt or the reply.
//!
//! The same row is the request's trace (with `otlp_endpoint`): its span,
//! continuing the caller's `traceparent`, is the row's data as attributes,
//! with child spans for authentication, the engine (until the first token,
//! then decoding) and each upstream attempt, which carries the trace on.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use svc_core::request_log::RequestLogEntry;
use svc_core::store::RequestLogStore;
use svc_core::trace::{Observer, Span, SpanContext, SpanKind, Value as TraceValue};
use svc_core::{EngineError, ModelPrice, Store, Tokens};
use tokio_util::sync::CancellationToken;

use crate::batcher::{Batcher, Written};
use crate::otlp::Tracer;

/// Rows waiting to be written, at most; past it they are dropped.
pub const QUEUE_CAPACITY: usize = 10_000;
/// Rows written in one transaction, at most.
const BATCH: usize = 1_000;
/// How long the writer waits for more rows before writing what it has.
const WRITE_EVERY: Duration = Duration::from_secs(1);
/// A write that takes longer is given up, and its rows with it: the
/// database may still commit it (SQLite's worker finishes a statement whose
/// caller left), so writing them again could keep them twice, or, for a
/// write slow because it is large, again and again.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

tokio::task_local! {
    static CURRENT: Arc<Pending>;
}

/// A row being filled in while its request runs, and its trace.
pub struct Pending {
    row: Mutex<RequestLogEntry>,
    arrived: Instant,
    /// The request's span (its trace id is the caller's, when it sent a
    /// `traceparent`; without an exporter, the caller's own), the caller's
    /// span it is part of, and when it began.
    span: Option<SpanContext>,
    parent: Option<[u8; 8]>,
    began: SystemTime,
    /// Spans of the request finished so far, and the engine's times.
    spans: Mutex<Vec<Span>>,
    engine: Mutex<EngineTimes>,
    /// An audio model's seconds and characters (the row keeps tokens
    /// only), for the row's cost.
    audio: Mutex<Tokens>,
    /// A batch's line: its cost is at the batch price.
    batch: bool,
}

/// When the engine's reply began, gave its first token, and ended.
#[derive(Default)]
struct EngineTimes {
    started: Option<SystemTime>,
    first_token: Option<SystemTime>,
    ended: Option<SystemTime>,
}

impl Pending {
    /// Fills in part of the row.
    pub fn note(&self, f: impl FnOnce(&mut RequestLogEntry)) {
        f(&mut self.row.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn engine(&self, f: impl FnOnce(&mut EngineTimes)) {
        f(&mut self.engine.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The request was handed to its engine now.
    pub fn engine_started(&self) {
        self.engine(|t| {
            t.started.get_or_insert_with(SystemTime::now);
        });
    }

    /// The first generated token came now (only the first counts).
    pub fn first_token(&self) {
        let ms = millis(self.arrived.elapsed());
        self.note(|row| {
            row.ttft_ms.get_or_insert(ms);
        });
        self.engine(|t| {
            t.first_token.get_or_insert_with(SystemTime::now);
        });
    }

    /// Adds a generation's tokens (its end).
    pub fn tokens(&self, tokens: Tokens) {
        self.note(|row| {
            row.prompt_tokens = row.prompt_tokens.saturating_add(tokens.prompt);
            row.cached_tokens = row.cached_tokens.saturating_add(tokens.cached);
            row.completion_tokens = row.completion_tokens.saturating_add(tokens.completion);
        });
        if tokens.audio_seconds != 0 || tokens.characters != 0 {
            let mut audio = self.audio.lock().unwrap_or_else(|e| e.into_inner());
            audio.audio_seconds = audio.audio_seconds.saturating_add(tokens.audio_seconds);
            audio.characters = audio.characters.saturating_add(tokens.characters);
        }
        self.engine(|t| t.ended = Some(SystemTime::now()));
    }

    /// The request's spans, its own (the root of this service's part)
    /// last, as they stand when the row is finished.
    fn spans(&self, row: &RequestLogEntry) -> Vec<Span> {
        let Some(span) = self.span else {
            return Vec::new();
        };
        let mut spans = std::mem::take(&mut *self.spans.lock().unwrap_or_else(|e| e.into_inner()));
        let engine = std::mem::take(&mut *self.engine.lock().unwrap_or_else(|e| e.into_inner()));
        let now = SystemTime::now();
        let child = |name: &str, start: SystemTime, end: SystemTime| Span {
            context: span.child(),
            parent: Some(span.span_id),
            name: name.to_owned(),
            kind: SpanKind::Internal,
            start,
            end,
            attributes: Vec::new(),
            error: None,
        };
        if let Some(started) = engine.started {
            let end = engine.ended.unwrap_or(now);
            match engine.first_token {
                Some(first) => {
                    spans.push(child("engine: until the first token", started, first));
                    spans.push(child("engine: decode", first, end));
                }
                None => spans.push(child("engine: until the first token", started, end)),
            }
        }
        let text = |key: &str, value: &Option<String>| {
            value
                .as_ref()
                .map(|v| (key.to_owned(), TraceValue::Text(v.clone())))
        };
        let int = |key: &str, value: i64| Some((key.to_owned(), TraceValue::Int(value)));
        let (method, route) = row.endpoint.split_once(' ').unwrap_or(("", &row.endpoint));
        let attributes = [
            text("http.request.method", &Some(method.to_owned())),
            text("http.route", &Some(route.to_owned())),
            int("http.response.status_code", i64::from(row.status)),
            text("svc.request_id", &Some(row.id.clone())),
            text("svc.dialect", &Some(row.dialect.clone())),
            text("gen_ai.request.model", &row.model),
            text("svc.key_id", &row.key_id),
            text("svc.project_id", &row.project_id),
            int("gen_ai.usage.input_tokens", row.prompt_tokens),
            int("gen_ai.usage.cached_input_tokens", row.cached_tokens),
            int("gen_ai.usage.output_tokens", row.completion_tokens),
            row.ttft_ms
                .and_then(|ms| int("svc.time_to_first_token_ms", ms)),
            text("error.type", &row.error_type),
            text("svc.upstream", &row.upstream),
        ];
        spans.push(Span {
            context: span,
            parent: self.parent,
            name: row.endpoint.clone(),
            kind: SpanKind::Server,
            start: self.began,
            end: now,
            attributes: attributes.into_iter().flatten().collect(),
            error: (row.status >= 500).then(|| row.error_type.clone().unwrap_or_default()),
        });
        spans
    }
}

impl Observer for Pending {
    fn span(&self, span: Span) {
        self.spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(span);
    }

    fn upstream(&self, base_url: &str) {
        self.note(|row| row.upstream = Some(base_url.to_owned()));
    }
}

/// The `type` an engine's failure is answered with (and logged as): the
/// request's fault, the engine's load, or the server's.
pub fn failure_type(error: &EngineError) -> &'static str {
    match error {
        EngineError::ContextLengthExceeded { .. } | EngineError::InvalidRequest { .. } => {
            "invalid_request_error"
        }
        EngineError::Overloaded(_) => "rate_limit_exceeded",
        EngineError::Unavailable(_)
        | EngineError::BadGateway(_)
        | EngineError::GatewayTimeout(_)
        | EngineError::Internal(_) => "server_error",
    }
}

/// The row of the request running on this task, if it is logged.
pub fn current() -> Option<Arc<Pending>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// Fills in part of this task's request's row, if it is logged.
pub fn note(f: impl FnOnce(&mut RequestLogEntry)) {
    if let Some(pending) = current() {
        pending.note(f);
    }
}

/// Notes the model this task's request asked for, once its body is read
/// (so a request refused past that point is logged with its model).
pub fn note_model(model: &str) {
    note(|row| row.model = Some(model.to_owned()));
}

/// A span of this task's request (if traced) from now until dropped.
pub struct Timed(&'static str, SystemTime);

pub fn timed(name: &'static str) -> Timed {
    Timed(name, SystemTime::now())
}

impl Drop for Timed {
    fn drop(&mut self) {
        svc_core::trace::record(self.0, self.1, Vec::new());
    }
}

/// Notes the key that authenticated this task's request: its id, project
/// and owner.
pub fn note_key(key: &svc_core::KeyRecord) {
    note(|row| {
        row.key_id = Some(key.id.to_string());
        row.project_id = Some(key.project_id.0.clone());
        row.user_id = key.owner_id.as_ref().map(ToString::to_string);
    });
}

fn millis(elapsed: Duration) -> i64 {
    i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
}

/// The queue of finished rows and what its writer needs.
pub struct RequestLog {
    /// Whether requests are logged at all (`request_log_retention` is not
    /// zero).
    pub(crate) enabled: bool,
    queue: Arc<Batcher<RequestLogEntry>>,
    prices: BTreeMap<String, ModelPrice>,
    /// How long a write may take ([`WRITE_TIMEOUT`]).
    write_timeout: Duration,
}

impl RequestLog {
    pub fn new(enabled: bool, prices: BTreeMap<String, ModelPrice>) -> Self {
        RequestLog::with_capacity(enabled, prices, QUEUE_CAPACITY)
    }

    pub fn with_capacity(
        enabled: bool,
        prices: BTreeMap<String, ModelPrice>,
        capacity: usize,
    ) -> Self {
        RequestLog {
            enabled,
            queue: Arc::new(Batcher::new(capacity, BATCH)),
            prices,
            write_timeout: WRITE_TIMEOUT,
        }
    }

    /// Rows dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.queue.dropped()
    }

    /// Rows waiting to be written.
    pub fn pending(&self) -> usize {
        self.queue.pending()
    }

    /// Queues a finished row (never waits); a batch's line costs its
    /// model's batch price.
    fn push(&self, mut row: RequestLogEntry, batch: bool, audio: Tokens) {
        if let Some(price) = row.model.as_ref().and_then(|m| self.prices.get(m)) {
            let price = if batch { price.for_batch() } else { *price };
            row.cost_micros = price.cost_micros(Tokens {
                prompt: row.prompt_tokens,
                cached: row.cached_tokens,
                completion: row.completion_tokens,
                ..audio
            });
        }
        self.queue.push([row]);
    }

    /// Writes what is queued every [`WRITE_EVERY`] (or as soon as a batch
    /// is full) until `stop`, then what is left. A write that failed keeps
    /// its rows queued for the next (the transaction was rolled back); one
    /// that did not answer in time loses them, counted as dropped, since it
    /// may yet commit: a row is written at most once.
    pub async fn run(self: Arc<Self>, store: Arc<dyn RequestLogStore>, stop: CancellationToken) {
        let timeout = self.write_timeout;
        let write = move |batch: Vec<RequestLogEntry>| {
            let store = store.clone();
            async move {
                match tokio::time::timeout(timeout, store.insert_request_logs(&batch)).await {
                    Ok(Ok(())) => Written::Done,
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, rows = batch.len(), "writing the request log failed; will retry");
                        Written::Retry(batch)
                    }
                    Err(_) => {
                        tracing::warn!(
                            rows = batch.len(),
                            ?timeout,
                            "writing the request log took too long; its rows are given up, not written again (the write may still commit)"
                        );
                        Written::Lost(batch.len())
                    }
                }
            }
        };
        self.queue.clone().run(WRITE_EVERY, stop, write).await;
    }
}

/// Opens the row of a request that arrives now: `dialect` and `endpoint`
/// as the log names them, its span (continuing `parent`, the caller's)
/// when traces are exported.
pub fn open(
    dialect: &str,
    endpoint: String,
    span: Option<SpanContext>,
    parent: Option<[u8; 8]>,
) -> Arc<Pending> {
    Arc::new(Pending {
        row: Mutex::new(RequestLogEntry {
            id: crate::scoped::request_id().unwrap_or_default(),
            started_at_ms: chrono::Utc::now().timestamp_millis(),
            dialect: dialect.to_owned(),
            endpoint,
            ..RequestLogEntry::default()
        }),
        arrived: Instant::now(),
        span,
        parent,
        began: SystemTime::now(),
        spans: Mutex::default(),
        engine: Mutex::default(),
        audio: Mutex::default(),
        batch: crate::scoped::in_batch(),
    })
}

/// Runs `work` with `pending` as its request's row ([`current`]), and as
/// the observer of its trace.
pub async fn scope<F: std::future::Future>(
    pending: Arc<Pending>,
    exporting: bool,
    work: F,
) -> F::Output {
    let current = svc_core::trace::Current {
        context: pending.span,
        exporting,
        observer: pending.clone(),
    };
    CURRENT
        .scope(pending, svc_core::trace::scope(current, work))
        .await
}

/// Hands the row to the log (and its spans to the tracer) when dropped,
/// with the answer's status and error type as last set.
pub struct Finish {
    pub pending: Option<Arc<Pending>>,
    pub log: Arc<RequestLog>,
    pub tracer: Option<Arc<Tracer>>,
    pub status: u16,
    pub error_type: Option<String>,
}

impl Drop for Finish {
    fn drop(&mut self) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        let duration = millis(pending.arrived.elapsed());
        let mut row = std::mem::take(&mut *pending.row.lock().unwrap_or_else(|e| e.into_inner()));
        row.status = self.status;
        row.error_type = row.error_type.take().or_else(|| self.error_type.take());
        row.duration_ms = duration;
        if let Some(tracer) = &self.tracer {
            tracer.push(pending.spans(&row));
        }
        if self.log.enabled {
            let audio = *pending.audio.lock().unwrap_or_else(|e| e.into_inner());
            self.log.push(row, pending.batch, audio);
        }
    }
}

/// Deletes rows older than `retention` (zero keeps them).
pub async fn sweep(store: &dyn Store, retention: Duration) {
    match svc_core::request_log::sweep(store, retention.as_secs()).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(rows = n, "request log: old rows deleted"),
        Err(e) => tracing::warn!(error = %e, "request log: the retention sweep failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_priced_at_its_models_price() {
        let mut prices = BTreeMap::new();
        prices.insert(
            "m".to_owned(),
            ModelPrice {
                input: 2.0,
                cached_input: Some(1.0),
                output: 4.0,
                batch_discount: Some(0.25),
                cached_response: None,
                ..ModelPrice::default()
            },
        );
        let log = RequestLog::new(true, prices);
        let row = RequestLogEntry {
            model: Some("m".into()),
            prompt_tokens: 1_000,
            cached_tokens: 400,
            completion_tokens: 100,
            ..RequestLogEntry::default()
        };
        log.push(row.clone(), false, Tokens::default());
        // 600 × 2 + 400 × 1 + 100 × 4 micro-dollars.
        assert_eq!(log.queue.take()[0].cost_micros, 2_000);
        // A batch's line, a quarter off.
        log.push(row, true, Tokens::default());
        assert_eq!(log.queue.take()[0].cost_micros, 1_500);
    }

    /// A store whose writes commit `delay` after they begin, whether or not
    /// their caller still waits (as SQLite's worker thread does).
    struct Slow {
        rows: Arc<Mutex<Vec<RequestLogEntry>>>,
        delay: Duration,
    }

    #[async_trait::async_trait]
    impl RequestLogStore for Slow {
        async fn insert_request_logs(
            &self,
            rows: &[RequestLogEntry],
        ) -> Result<(), svc_core::StoreError> {
            let (kept, rows, delay) = (self.rows.clone(), rows.to_vec(), self.delay);
            #[expect(
                clippy::disallowed_methods,
                reason = "the commit outlives its caller on purpose: that is what is tested"
            )]
            let commit = tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                kept.lock().unwrap().extend(rows);
            });
            let _ = commit.await;
            Ok(())
        }

        async fn list_request_logs(
            &self,
            _: &svc_core::request_log::RequestLogQuery,
        ) -> Result<Vec<RequestLogEntry>, svc_core::StoreError> {
            Ok(Vec::new())
        }

        async fn delete_request_logs_before(&self, _: i64) -> Result<u64, svc_core::StoreError> {
            Ok(0)
        }
    }

    /// Issue 43: a 3.9 MB model name made every write slower than the
    /// timeout; each was retried and committed anyway, so the same rows
    /// were written about every 11 s until the disk filled.
    #[tokio::test]
    async fn a_write_slower_than_the_timeout_is_written_once() {
        let mut log = RequestLog::new(true, BTreeMap::new());
        log.write_timeout = Duration::from_millis(100);
        let log = Arc::new(log);
        let store = Slow {
            rows: Arc::default(),
            delay: Duration::from_millis(300),
        };
        let rows = store.rows.clone();
        log.push(
            RequestLogEntry {
                id: "req_1".into(),
                ..RequestLogEntry::default()
            },
            false,
            Tokens::default(),
        );
        let stop = CancellationToken::new();
        let writer = log.clone().run(Arc::new(store), stop.clone());
        // The writer tries each second, and once more when stopped.
        let stopper = async {
            tokio::time::sleep(Duration::from_millis(3_500)).await;
            stop.cancel();
        };
        tokio::join!(writer, stopper);
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(rows.lock().unwrap().len(), 1, "written once");
        assert_eq!(log.pending(), 0);
        assert_eq!(log.dropped(), 1, "given up, and counted");
    }
}
