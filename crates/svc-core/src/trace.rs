//! The trace of the request being answered, for the parts below the HTTP
//! layer: the server runs each API request inside [`scope`] with its W3C
//! trace context and an [`Observer`]; an engine that calls out (an upstream
//! attempt) asks [`child`] for a span to send on as `traceparent`, and tells
//! the observer how it went. Outside a request (tests, tools) these are
//! no-ops.

use std::sync::Arc;
use std::time::SystemTime;

/// A trace id (16 bytes) and a span id (8 bytes), as W3C Trace Context
/// writes them in `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
}

impl SpanContext {
    /// A new trace's first span.
    pub fn root() -> Self {
        SpanContext {
            trace_id: nonzero(),
            span_id: nonzero(),
        }
    }

    /// A new span in the same trace.
    pub fn child(&self) -> Self {
        SpanContext {
            trace_id: self.trace_id,
            span_id: nonzero(),
        }
    }

    /// `traceparent: 00-<trace id>-<span id>-01` (sampled).
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-01",
            hex::encode(self.trace_id),
            hex::encode(self.span_id)
        )
    }

    /// A caller's `traceparent` header, when it is one (version 00, or a
    /// later version read as 00 says; all-zero ids are invalid).
    pub fn parse(header: &str) -> Option<Self> {
        let mut parts = header.trim().split('-');
        let version = parts.next()?;
        let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
        if version.len() != 2 || version == "ff" || flags.len() != 2 {
            return None;
        }
        if version == "00" && parts.next().is_some() {
            return None;
        }
        let is_hex = |s: &str| s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if ![version, trace, span, flags].iter().all(|p| is_hex(p)) {
            return None;
        }
        let trace_id: [u8; 16] = hex::decode(trace).ok()?.try_into().ok()?;
        let span_id: [u8; 8] = hex::decode(span).ok()?.try_into().ok()?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(SpanContext { trace_id, span_id })
    }
}

fn nonzero<const N: usize>() -> [u8; N] {
    loop {
        let id: [u8; N] = rand::random();
        if id != [0; N] {
            return id;
        }
    }
}

/// A value of a span's attribute.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Text(String),
    Int(i64),
}

/// A finished span: its place in the trace, its name, times and
/// attributes, and whether it failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub context: SpanContext,
    /// The span it is part of (`None`: the trace's root).
    pub parent: Option<[u8; 8]>,
    pub name: String,
    /// `Client` for a call out (an upstream), `Internal` for work inside.
    pub kind: SpanKind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<(String, Value)>,
    /// The failure's description, when it failed.
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Internal,
    Server,
    Client,
}

/// What the request's trace and log learn from below the HTTP layer.
pub trait Observer: Send + Sync {
    /// A span of the request ended.
    fn span(&self, span: Span);
    /// The upstream endpoint (its base URL) that answered.
    fn upstream(&self, base_url: &str);
}

/// The request being answered on this task: its span and who observes it.
#[derive(Clone)]
pub struct Current {
    pub context: SpanContext,
    pub observer: Arc<dyn Observer>,
}

tokio::task_local! {
    static CURRENT: Current;
}

/// Runs `future` as part of the request `current`.
pub async fn scope<F: std::future::Future>(current: Current, future: F) -> F::Output {
    CURRENT.scope(current, future).await
}

/// A span about to start under this task's request, if any: send its
/// context on (`traceparent`), then [`Started::end`] it.
pub fn child(name: &str, kind: SpanKind) -> Option<Started> {
    CURRENT
        .try_with(|current| Started {
            context: current.context.child(),
            parent: current.context.span_id,
            name: name.to_owned(),
            kind,
            start: SystemTime::now(),
            observer: current.observer.clone(),
        })
        .ok()
}

/// Records a finished piece of this task's request that began at `start`
/// and ends now (authentication, say), if the request is traced.
pub fn record(name: &str, start: SystemTime, attributes: Vec<(String, Value)>) {
    if let Some(mut span) = child(name, SpanKind::Internal) {
        span.start = start;
        span.end(attributes, None);
    }
}

/// Tells this task's request which upstream endpoint answered.
pub fn upstream(base_url: &str) {
    let _ = CURRENT.try_with(|current| current.observer.upstream(base_url));
}

/// A span under way.
pub struct Started {
    pub context: SpanContext,
    parent: [u8; 8],
    name: String,
    kind: SpanKind,
    start: SystemTime,
    observer: Arc<dyn Observer>,
}

impl Started {
    /// Ends the span now with `attributes`, failed when `error` says why.
    pub fn end(self, attributes: Vec<(String, Value)>, error: Option<String>) {
        self.observer.span(Span {
            context: self.context,
            parent: Some(self.parent),
            name: self.name,
            kind: self.kind,
            start: self.start,
            end: SystemTime::now(),
            attributes,
            error,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::SpanContext;

    #[test]
    fn traceparent_is_read_and_written_as_w3c_says() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = SpanContext::parse(header).unwrap();
        assert_eq!(context.traceparent(), header);
        let child = context.child();
        assert_eq!(child.trace_id, context.trace_id);
        assert_ne!(child.span_id, context.span_id);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(SpanContext::parse(bad), None, "{bad}");
        }
        // A later version may add fields.
        assert!(
            SpanContext::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
                .is_some()
        );
    }
}
