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
    /// The request's span. When the server exports no traces
    /// (`exporting` false), the caller's span, if it sent one: passed on
    /// unchanged, so a trace goes through a service that does not record it.
    pub context: Option<SpanContext>,
    /// Whether spans are recorded (an OTLP endpoint is set).
    pub exporting: bool,
    pub observer: Arc<dyn Observer>,
}

impl std::fmt::Debug for Current {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Current")
            .field("context", &self.context)
            .field("exporting", &self.exporting)
            .finish_non_exhaustive()
    }
}

impl Current {
    /// Records a finished span of this request, from `start` to `end`
    /// (when spans are recorded): for work done off the request's task,
    /// such as an engine's thread.
    pub fn span(
        &self,
        name: &str,
        start: SystemTime,
        end: SystemTime,
        attributes: Vec<(String, Value)>,
    ) {
        let Some(context) = self.context.filter(|_| self.exporting) else {
            return;
        };
        self.observer.span(Span {
            context: context.child(),
            parent: Some(context.span_id),
            name: name.to_owned(),
            kind: SpanKind::Internal,
            start,
            end,
            attributes,
            error: None,
        });
    }
}

tokio::task_local! {
    static CURRENT: Current;
}

/// Runs `future` as part of the request `current`.
pub async fn scope<F: std::future::Future>(current: Current, future: F) -> F::Output {
    CURRENT.scope(current, future).await
}

/// This task's request, when its spans are recorded: to hand to work done
/// elsewhere (see [`Current::span`]).
pub fn current() -> Option<Current> {
    CURRENT
        .try_with(|current| current.exporting.then(|| current.clone()))
        .ok()
        .flatten()
}

/// A span about to start under this task's request, if any: send its
/// context on (`traceparent`), then [`Started::end`] it. When spans are not
/// recorded, its context is the caller's, passed on unchanged.
pub fn child(name: &str, kind: SpanKind) -> Option<Started> {
    CURRENT
        .try_with(|current| {
            let context = current.context?;
            Some(Started {
                context: if current.exporting {
                    context.child()
                } else {
                    context
                },
                parent: context.span_id,
                name: name.to_owned(),
                kind,
                start: SystemTime::now(),
                observer: current.exporting.then(|| current.observer.clone()),
            })
        })
        .ok()
        .flatten()
}

/// Records a finished piece of this task's request that began at `start`
/// and ends now (authentication, say), if the request is traced.
pub fn record(name: &str, start: SystemTime, attributes: Vec<(String, Value)>) {
    if let Some(current) = current() {
        current.span(name, start, SystemTime::now(), attributes);
    }
}

/// Runs `future` as a span named `name` of this task's request, if traced
/// (a store query, say).
pub async fn in_span<F: std::future::Future>(name: &str, future: F) -> F::Output {
    let start = SystemTime::now();
    let output = future.await;
    record(name, start, Vec::new());
    output
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
    /// `None`: not recorded (only its context is passed on).
    observer: Option<Arc<dyn Observer>>,
}

impl Started {
    /// Ends the span now with `attributes`, failed when `error` says why.
    pub fn end(self, attributes: Vec<(String, Value)>, error: Option<String>) {
        let Some(observer) = self.observer else {
            return;
        };
        observer.span(Span {
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
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    struct Seen(Mutex<Vec<Span>>);

    impl Observer for Seen {
        fn span(&self, span: Span) {
            self.0.lock().unwrap().push(span);
        }
        fn upstream(&self, _: &str) {}
    }

    fn current(context: Option<SpanContext>, exporting: bool) -> (Current, Arc<Seen>) {
        let seen = Arc::new(Seen::default());
        let current = Current {
            context,
            exporting,
            observer: seen.clone(),
        };
        (current, seen)
    }

    #[tokio::test]
    async fn a_recorded_request_makes_child_spans_and_sends_them_on() {
        let request = SpanContext::root();
        let (traced, seen) = current(Some(request), true);
        scope(traced, async {
            let attempt = child("upstream attempt", SpanKind::Client).unwrap();
            assert_eq!(attempt.context.trace_id, request.trace_id);
            assert_ne!(attempt.context.span_id, request.span_id);
            attempt.end(Vec::new(), None);
            in_span("store: find the key", async {}).await;
            let elsewhere = super::current().unwrap();
            std::thread::spawn(move || {
                let now = SystemTime::now();
                elsewhere.span("engine: queue", now, now, Vec::new());
            })
            .join()
            .unwrap();
        })
        .await;
        let spans = seen.0.lock().unwrap();
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["upstream attempt", "store: find the key", "engine: queue"]
        );
        assert!(spans.iter().all(|s| s.parent == Some(request.span_id)));
    }

    #[tokio::test]
    async fn without_an_exporter_nothing_is_recorded_and_the_callers_context_goes_on() {
        let caller = SpanContext::root();
        let (untraced, seen) = current(Some(caller), false);
        scope(untraced, async {
            let attempt = child("upstream attempt", SpanKind::Client).unwrap();
            assert_eq!(attempt.context, caller, "passed on as it came");
            attempt.end(Vec::new(), None);
            in_span("store: find the key", async {}).await;
            assert!(super::current().is_none());
        })
        .await;
        let (untraced, _) = current(None, false);
        scope(untraced, async {
            assert!(child("upstream attempt", SpanKind::Client).is_none());
        })
        .await;
        assert!(seen.0.lock().unwrap().is_empty());
    }

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
