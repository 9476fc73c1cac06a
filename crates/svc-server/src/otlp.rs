//! OpenTelemetry traces over OTLP/HTTP with protobuf (`otlp_endpoint`):
//! the spans of each API request (see [`crate::request_log`], which builds
//! them) are queued, bounded like the request log, and posted to
//! `<endpoint>/v1/traces` once a second as one `ExportTraceServiceRequest`.
//! The few messages of `opentelemetry/proto/trace/v1` that this needs are
//! encoded here by hand (protobuf's wire format); nothing is sent when no
//! endpoint is set, and the request path only pushes to a queue.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use svc_core::trace::{Span, SpanKind, Value};
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::batcher::{Batcher, Written};

/// Spans waiting to be sent, at most; past it they are dropped.
const QUEUE_CAPACITY: usize = 20_000;
/// Spans in one export, at most.
const BATCH: usize = 2_000;
const SEND_EVERY: Duration = Duration::from_secs(1);
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// The exporter: its queue and where it sends.
pub struct Tracer {
    url: String,
    queue: Arc<Batcher<Span>>,
    client: reqwest::Client,
}

impl Tracer {
    /// Sends to `endpoint` + `/v1/traces` (unless it names that path).
    pub fn new(endpoint: &Url) -> Self {
        let base = endpoint.as_str().trim_end_matches('/');
        let url = if base.ends_with("/v1/traces") {
            base.to_owned()
        } else {
            format!("{base}/v1/traces")
        };
        Tracer {
            url,
            queue: Arc::new(Batcher::new(QUEUE_CAPACITY, BATCH)),
            client: reqwest::Client::builder()
                .timeout(SEND_TIMEOUT)
                .build()
                .unwrap_or_default(),
        }
    }

    /// Spans dropped: the queue was full, or the receiver did not take them.
    pub fn dropped(&self) -> u64 {
        self.queue.dropped()
    }

    /// Queues a request's spans (never waits).
    pub fn push(&self, spans: Vec<Span>) {
        self.queue.push(spans);
    }

    /// Sends what is queued every [`SEND_EVERY`] (or as soon as a batch is
    /// full) until `stop`, then what is left. Traces are best effort: a
    /// batch the receiver did not take is counted and not sent again.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let client = self.client.clone();
        let url = self.url.clone();
        let send = move |batch: Vec<Span>| {
            let sent = client
                .post(&url)
                .header("content-type", "application/x-protobuf")
                .body(export_request(&batch))
                .send();
            let url = url.clone();
            async move {
                let failure = match sent.await {
                    Ok(response) if response.status().is_success() => return Written::Done,
                    Ok(response) => format!("the receiver answered {}", response.status()),
                    Err(e) => e.to_string(),
                };
                tracing::warn!(error = %failure, spans = batch.len(), %url, "exporting traces failed");
                Written::Lost(batch.len())
            }
        };
        self.queue.clone().run(SEND_EVERY, stop, send).await;
    }
}

/// Protobuf's wire format, the part these messages use.
struct Message(Vec<u8>);

impl Message {
    fn new() -> Self {
        Message(Vec::new())
    }

    fn varint(&mut self, mut n: u64) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.0.push(byte);
                return;
            }
            self.0.push(byte | 0x80);
        }
    }

    fn tag(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.tag(field, 2);
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    fn string(&mut self, field: u32, text: &str) {
        self.bytes(field, text.as_bytes());
    }

    fn message(&mut self, field: u32, message: Message) {
        self.bytes(field, &message.0);
    }

    fn uint(&mut self, field: u32, n: u64) {
        self.tag(field, 0);
        self.varint(n);
    }

    fn fixed64(&mut self, field: u32, n: u64) {
        self.tag(field, 1);
        self.0.extend_from_slice(&n.to_le_bytes());
    }
}

/// `KeyValue { key = 1; AnyValue value = 2 }`, `AnyValue { string_value =
/// 1; int_value = 3 }`.
fn key_value(key: &str, value: &Value) -> Message {
    let mut any = Message::new();
    match value {
        Value::Text(text) => any.string(1, text),
        Value::Int(n) => any.uint(3, *n as u64),
    }
    let mut kv = Message::new();
    kv.string(1, key);
    kv.message(2, any);
    kv
}

fn nanos(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// `Span` (opentelemetry/proto/trace/v1/trace.proto).
fn span(span: &Span) -> Message {
    let mut m = Message::new();
    m.bytes(1, &span.context.trace_id);
    m.bytes(2, &span.context.span_id);
    if let Some(parent) = &span.parent {
        m.bytes(4, parent);
    }
    m.string(5, &span.name);
    let kind = match span.kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
    };
    m.uint(6, kind);
    m.fixed64(7, nanos(span.start));
    m.fixed64(8, nanos(span.end));
    for (key, value) in &span.attributes {
        m.message(9, key_value(key, value));
    }
    // Status { message = 2; code = 3 (1 ok, 2 error) }.
    let mut status = Message::new();
    match &span.error {
        Some(error) => {
            status.string(2, error);
            status.uint(3, 2);
        }
        None => status.uint(3, 1),
    }
    m.message(15, status);
    m
}

/// `ExportTraceServiceRequest { ResourceSpans resource_spans = 1 }` with
/// one resource (`service.name = svc`) and one scope (`svc`).
pub fn export_request(spans: &[Span]) -> Vec<u8> {
    let mut resource = Message::new();
    resource.message(1, key_value("service.name", &Value::Text("svc".into())));
    resource.message(
        1,
        key_value(
            "service.version",
            &Value::Text(env!("CARGO_PKG_VERSION").into()),
        ),
    );
    let mut scope = Message::new();
    scope.string(1, "svc");
    scope.string(2, env!("CARGO_PKG_VERSION"));
    let mut scope_spans = Message::new();
    scope_spans.message(1, scope);
    for s in spans {
        scope_spans.message(2, span(s));
    }
    let mut resource_spans = Message::new();
    resource_spans.message(1, resource);
    resource_spans.message(2, scope_spans);
    let mut request = Message::new();
    request.message(1, resource_spans);
    request.0
}

#[cfg(test)]
mod tests {
    use super::Message;

    #[test]
    fn varints_are_protobufs() {
        let mut m = Message::new();
        m.varint(1);
        m.varint(300);
        m.varint(u64::MAX);
        assert_eq!(
            m.0,
            [
                1, 0xac, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
            ]
        );
        let mut m = Message::new();
        m.string(5, "hi");
        assert_eq!(m.0, [5 << 3 | 2, 2, b'h', b'i']);
    }
}
