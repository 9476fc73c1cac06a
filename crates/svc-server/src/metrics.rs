//! Prometheus metrics at `/metrics`: requests and their latency by route,
//! time to first token and gateway overhead by model, tokens, errors by
//! code, in-flight requests, and each engine's queue and upstream health.
//!
//! Hand-rolled rather than a metrics crate: a few counters and histograms
//! under short locks, rendered in the text exposition format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use svc_core::EngineStatus;

/// Latency buckets in seconds: fine below a millisecond (gateway
/// overhead), coarse up to a minute (long generations).
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

#[derive(Debug, Clone, Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        if let Some(i) = BUCKETS.iter().position(|b| seconds <= *b) {
            self.counts[i] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, bound) in BUCKETS.iter().enumerate() {
            cumulative += self.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

/// What `/metrics` reports of the parts that keep their own counts.
#[derive(Debug, Default)]
pub struct Reported {
    /// Request-log rows dropped, and waiting to be written.
    pub request_log_dropped: u64,
    pub request_log_pending: usize,
    /// The response cache's counts, when it is on.
    pub cache: Option<CacheCounts>,
    /// Spans not exported, when traces are.
    pub spans_dropped: Option<u64>,
    /// Each model's engine's status, by model id.
    pub engines: Vec<(String, EngineStatus)>,
}

/// The response cache's counts.
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheCounts {
    pub hits: u64,
    pub misses: u64,
    pub saved_tokens: u64,
}

/// When the request arrived, put in its extensions by the metrics layer.
#[derive(Debug, Clone, Copy)]
pub struct Arrived(pub Instant);

#[derive(Default)]
struct Inner {
    /// By route pattern.
    routes: BTreeMap<String, RouteStats>,
    ttft: BTreeMap<String, Histogram>,
    overhead: BTreeMap<String, Histogram>,
    tokens: BTreeMap<String, Tokens>,
    errors: BTreeMap<String, u64>,
    /// Tool calls handed to registered MCP servers, by server label.
    tools: BTreeMap<String, ToolStats>,
}

/// What became of the tool calls handed to one MCP server.
#[derive(Debug, Clone, Default)]
struct ToolStats {
    /// By [`ToolOutcome`], in its order.
    outcomes: [u64; 4],
    latency: Histogram,
}

/// What became of a tool call handed to an MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolOutcome {
    /// It ran and answered.
    Ok,
    /// It ran and said it failed (`isError`): the model sees why.
    ToolError,
    /// The server refused the call with a JSON-RPC error.
    Refused,
    /// The server could not be reached, did not answer in time, or
    /// answered past a bound.
    Failed,
}

impl ToolOutcome {
    const ALL: [ToolOutcome; 4] = [
        ToolOutcome::Ok,
        ToolOutcome::ToolError,
        ToolOutcome::Refused,
        ToolOutcome::Failed,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            ToolOutcome::Ok => "ok",
            ToolOutcome::ToolError => "tool_error",
            ToolOutcome::Refused => "refused",
            ToolOutcome::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone, Default)]
struct RouteStats {
    /// Requests by method and status, in order.
    requests: BTreeMap<String, BTreeMap<u16, u64>>,
    latency: Histogram,
}

#[derive(Debug, Clone, Copy, Default)]
struct Tokens {
    prompt: u64,
    cached_prompt: u64,
    completion: u64,
    /// Audio models' work: seconds transcribed, characters spoken.
    audio_seconds: u64,
    characters: u64,
}

/// The server's metrics.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    in_flight: AtomicI64,
    connections_open: AtomicI64,
    connections_refused: AtomicU64,
    /// What `/metrics` wants as its bearer token, if anything.
    pub(crate) token: Option<crate::config::MetricsToken>,
}

/// The entry of `key`, made only when missing: the hot path looks up an
/// existing label without allocating its key.
#[expect(
    clippy::unreachable,
    reason = "the key was inserted just above; the borrow checker cannot see it"
)]
fn slot<'a, V: Default>(map: &'a mut BTreeMap<String, V>, key: &str) -> &'a mut V {
    if !map.contains_key(key) {
        map.insert(key.to_owned(), V::default());
    }
    map.get_mut(key)
        .unwrap_or_else(|| unreachable!("inserted above"))
}

impl Metrics {
    /// Metrics whose endpoint wants `token`, when given.
    pub fn new(token: Option<crate::config::MetricsToken>) -> Self {
        Metrics {
            token,
            ..Metrics::default()
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Time from arrival to the first generated event of a completion.
    pub fn time_to_first_token(&self, model: &str, elapsed: Duration) {
        self.with(|m| slot(&mut m.ttft, model).observe(elapsed.as_secs_f64()));
    }

    /// Time the gateway spent before the engine got the request (auth,
    /// rate limit, parsing, validation, routing).
    pub fn gateway_overhead(&self, model: &str, elapsed: Duration) {
        self.with(|m| slot(&mut m.overhead, model).observe(elapsed.as_secs_f64()));
    }

    /// Tokens of a finished completion.
    pub fn tokens(&self, model: &str, used: &svc_core::TokenUsage) {
        self.with(|m| {
            let tokens = slot(&mut m.tokens, model);
            tokens.prompt += used.prompt_tokens;
            tokens.cached_prompt += used.cached_tokens;
            tokens.completion += used.completion_tokens;
            tokens.audio_seconds += used.audio_seconds;
            tokens.characters += used.characters;
        });
    }

    /// A tool call handed to the registered MCP server `server` (its
    /// label: the operator's, so a bounded set) ended as `outcome` after
    /// `elapsed`. The tool's name is not a label: a client may ask for any.
    pub fn tool_called(&self, server: &str, outcome: ToolOutcome, elapsed: Duration) {
        self.with(|m| {
            let stats = slot(&mut m.tools, server);
            let at = ToolOutcome::ALL
                .iter()
                .position(|o| *o == outcome)
                .unwrap_or(0);
            stats.outcomes[at] += 1;
            stats.latency.observe(elapsed.as_secs_f64());
        });
    }

    /// A connection was opened (`1`) or closed (`-1`).
    pub(crate) fn connections_open(&self, change: i64) {
        self.connections_open.fetch_add(change, Ordering::Relaxed);
    }

    /// A connection was refused for being past a connection limit.
    pub(crate) fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// A request arrived: it counts in `svc_http_requests_in_flight` until
    /// the guard is dropped.
    pub fn request_started(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self)
    }

    /// A request to `route` (its pattern, never the raw path) was
    /// answered with `status` after `seconds`; `code` is its error code.
    pub fn answered(
        &self,
        route: &str,
        method: &str,
        status: u16,
        seconds: f64,
        code: Option<String>,
    ) {
        self.with(|m| {
            let stats = slot(&mut m.routes, route);
            // A method seen before costs no allocation.
            match stats.requests.get_mut(method) {
                Some(by_status) => *by_status.entry(status).or_default() += 1,
                None => {
                    stats
                        .requests
                        .insert(method.to_owned(), BTreeMap::from([(status, 1)]));
                }
            }
            stats.latency.observe(seconds);
            if let Some(code) = code {
                *m.errors.entry(code).or_default() += 1;
            }
        });
    }

    /// The text exposition of everything, with what others report.
    pub fn render(&self, others: &Reported) -> String {
        let mut out = String::with_capacity(8192);
        let inner = self.with(|m| {
            (
                m.routes.clone(),
                m.ttft.clone(),
                m.overhead.clone(),
                m.tokens.clone(),
                m.errors.clone(),
                m.tools.clone(),
            )
        });
        let (routes, ttft, overhead, tokens, errors, tools) = inner;
        out.push_str("# HELP svc_http_requests_total HTTP requests by route, method and status.\n");
        out.push_str("# TYPE svc_http_requests_total counter\n");
        for (route, stats) in &routes {
            for (method, by_status) in &stats.requests {
                for (status, n) in by_status {
                    let _ = writeln!(
                        out,
                        "svc_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}} {n}"
                    );
                }
            }
        }
        out.push_str("# HELP svc_http_request_duration_seconds Time to the end of the response headers (streams: to the first byte).\n");
        out.push_str("# TYPE svc_http_request_duration_seconds histogram\n");
        for (route, stats) in &routes {
            stats.latency.render(
                &mut out,
                "svc_http_request_duration_seconds",
                &format!("route=\"{route}\""),
            );
        }
        out.push_str(
            "# HELP svc_time_to_first_token_seconds Arrival to the first generated event.\n",
        );
        out.push_str("# TYPE svc_time_to_first_token_seconds histogram\n");
        for (model, h) in &ttft {
            h.render(
                &mut out,
                "svc_time_to_first_token_seconds",
                &format!("model=\"{}\"", escape(model)),
            );
        }
        out.push_str(
            "# HELP svc_gateway_overhead_seconds Arrival to handing the request to the engine.\n",
        );
        out.push_str("# TYPE svc_gateway_overhead_seconds histogram\n");
        for (model, h) in &overhead {
            h.render(
                &mut out,
                "svc_gateway_overhead_seconds",
                &format!("model=\"{}\"", escape(model)),
            );
        }
        out.push_str("# HELP svc_mcp_tool_calls_total Tool calls handed to registered MCP servers, by server label and outcome (ok; tool_error: the tool said it failed; refused: the server's JSON-RPC error; failed: unreachable, too slow or past a bound).\n");
        out.push_str("# TYPE svc_mcp_tool_calls_total counter\n");
        for (server, stats) in &tools {
            for (outcome, n) in ToolOutcome::ALL.iter().zip(stats.outcomes) {
                let _ = writeln!(
                    out,
                    "svc_mcp_tool_calls_total{{server=\"{}\",outcome=\"{}\"}} {n}",
                    escape(server),
                    outcome.label()
                );
            }
        }
        out.push_str("# HELP svc_mcp_tool_call_duration_seconds Time from handing a tool call to its server to its answer.\n");
        out.push_str("# TYPE svc_mcp_tool_call_duration_seconds histogram\n");
        for (server, stats) in &tools {
            stats.latency.render(
                &mut out,
                "svc_mcp_tool_call_duration_seconds",
                &format!("server=\"{}\"", escape(server)),
            );
        }
        out.push_str("# HELP svc_tokens_total Tokens of finished completions (cached_prompt: those of prompt served from a reused prefix).\n");
        out.push_str("# TYPE svc_tokens_total counter\n");
        for (model, t) in &tokens {
            let kinds = [
                ("cached_prompt", t.cached_prompt),
                ("completion", t.completion),
                ("prompt", t.prompt),
            ];
            for (kind, n) in kinds {
                let _ = writeln!(
                    out,
                    "svc_tokens_total{{model=\"{}\",kind=\"{kind}\"}} {n}",
                    escape(model)
                );
            }
        }
        out.push_str("# HELP svc_audio_total Audio models' work: seconds of audio transcribed or translated, characters of text spoken.\n");
        out.push_str("# TYPE svc_audio_total counter\n");
        // Only models that did audio work: the others would show zeros.
        for (model, t) in tokens
            .iter()
            .filter(|(_, t)| t.characters + t.audio_seconds > 0)
        {
            for (kind, n) in [("characters", t.characters), ("seconds", t.audio_seconds)] {
                let _ = writeln!(
                    out,
                    "svc_audio_total{{model=\"{}\",kind=\"{kind}\"}} {n}",
                    escape(model)
                );
            }
        }
        out.push_str("# HELP svc_errors_total Error responses by code.\n");
        out.push_str("# TYPE svc_errors_total counter\n");
        for (code, n) in &errors {
            let _ = writeln!(out, "svc_errors_total{{code=\"{code}\"}} {n}");
        }
        out.push_str("# HELP svc_http_requests_in_flight Requests being answered now.\n");
        out.push_str("# TYPE svc_http_requests_in_flight gauge\n");
        let _ = writeln!(
            out,
            "svc_http_requests_in_flight {}",
            self.in_flight.load(Ordering::Relaxed)
        );
        out.push_str("# HELP svc_http_connections_open Client connections open now.\n");
        out.push_str("# TYPE svc_http_connections_open gauge\n");
        let _ = writeln!(
            out,
            "svc_http_connections_open {}",
            self.connections_open.load(Ordering::Relaxed)
        );
        out.push_str("# HELP svc_http_connections_refused_total Connections closed at once for being past a connection limit.\n");
        out.push_str("# TYPE svc_http_connections_refused_total counter\n");
        let _ = writeln!(
            out,
            "svc_http_connections_refused_total {}",
            self.connections_refused.load(Ordering::Relaxed)
        );

        out.push_str("# HELP svc_request_log_dropped_total Request-log rows dropped because the queue to the database was full.\n");
        out.push_str("# TYPE svc_request_log_dropped_total counter\n");
        let _ = writeln!(
            out,
            "svc_request_log_dropped_total {}",
            others.request_log_dropped
        );
        out.push_str("# HELP svc_request_log_pending Request-log rows waiting to be written.\n");
        out.push_str("# TYPE svc_request_log_pending gauge\n");
        let _ = writeln!(
            out,
            "svc_request_log_pending {}",
            others.request_log_pending
        );

        if let Some(cache) = &others.cache {
            out.push_str("# HELP svc_response_cache_requests_total Reproducible requests looked up in the response cache, by whether their reply was there.\n");
            out.push_str("# TYPE svc_response_cache_requests_total counter\n");
            for (result, n) in [("hit", cache.hits), ("miss", cache.misses)] {
                let _ = writeln!(
                    out,
                    "svc_response_cache_requests_total{{result=\"{result}\"}} {n}"
                );
            }
            out.push_str("# HELP svc_response_cache_saved_tokens_total Prompt and completion tokens the replies served from the response cache took when they were made.\n");
            out.push_str("# TYPE svc_response_cache_saved_tokens_total counter\n");
            let _ = writeln!(
                out,
                "svc_response_cache_saved_tokens_total {}",
                cache.saved_tokens
            );
        }
        if let Some(dropped) = others.spans_dropped {
            out.push_str("# HELP svc_trace_spans_dropped_total Spans not exported: the queue to the OTLP receiver was full, or the receiver did not take them.\n");
            out.push_str("# TYPE svc_trace_spans_dropped_total counter\n");
            let _ = writeln!(out, "svc_trace_spans_dropped_total {}", dropped);
        }

        out.push_str("# HELP svc_engine_queued_requests Requests waiting for an engine.\n");
        out.push_str("# TYPE svc_engine_queued_requests gauge\n");
        let statuses = &others.engines;
        for (model, s) in statuses {
            let _ = writeln!(
                out,
                "svc_engine_queued_requests{{model=\"{}\"}} {}",
                escape(model),
                s.queued
            );
        }
        out.push_str("# HELP svc_engine_running_requests Requests an engine is generating.\n");
        out.push_str("# TYPE svc_engine_running_requests gauge\n");
        for (model, s) in statuses {
            let _ = writeln!(
                out,
                "svc_engine_running_requests{{model=\"{}\"}} {}",
                escape(model),
                s.running
            );
        }
        let caches: Vec<_> = statuses
            .iter()
            .filter_map(|(model, s)| s.prefix_cache.as_ref().map(|c| (model, c)))
            .collect();
        if !caches.is_empty() {
            out.push_str("# HELP svc_engine_prompt_tokens_total Prompt tokens of an embedded engine, by whether the model evaluated them or reused cached KV cells.\n");
            out.push_str("# TYPE svc_engine_prompt_tokens_total counter\n");
            for (model, c) in &caches {
                for (source, n) in [
                    ("evaluated", c.evaluated_tokens),
                    ("reused", c.reused_tokens),
                ] {
                    let _ = writeln!(
                        out,
                        "svc_engine_prompt_tokens_total{{model=\"{}\",source=\"{source}\"}} {n}",
                        escape(model),
                    );
                }
            }
            let gauges = [
                (
                    "svc_engine_prefix_cache_bytes",
                    "Host memory held by saved prompt prefixes and suspended sequences' copies.",
                    "gauge",
                ),
                (
                    "svc_engine_prefix_cache_limit_bytes",
                    "The most host memory saved prompt prefixes and suspended sequences' copies may take together.",
                    "gauge",
                ),
                (
                    "svc_engine_prefix_cache_entries",
                    "Saved prompt prefixes held in host memory.",
                    "gauge",
                ),
                (
                    "svc_engine_prefix_cache_saves_total",
                    "Prompt prefixes saved to host memory when their slot was taken.",
                    "counter",
                ),
                (
                    "svc_engine_prefix_cache_restores_total",
                    "Saved prompt prefixes restored into a slot.",
                    "counter",
                ),
                (
                    "svc_engine_prefix_cache_evictions_total",
                    "Saved prompt prefixes dropped to make room for newer ones.",
                    "counter",
                ),
            ];
            for (i, (name, help, kind)) in gauges.into_iter().enumerate() {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
                for (model, c) in &caches {
                    let value = [
                        c.host_bytes,
                        c.host_limit_bytes,
                        c.host_entries,
                        c.host_saves,
                        c.host_restores,
                        c.host_evictions,
                    ][i];
                    let _ = writeln!(out, "{name}{{model=\"{}\"}} {value}", escape(model));
                }
            }
        }
        models(&mut out, statuses);
        out.push_str("# HELP svc_upstream_healthy Whether an upstream endpoint gets requests (1) or not (0).\n");
        out.push_str("# TYPE svc_upstream_healthy gauge\n");
        for (model, s) in statuses {
            for e in &s.endpoints {
                let _ = writeln!(
                    out,
                    "svc_upstream_healthy{{model=\"{}\",endpoint=\"{}\"}} {}",
                    escape(model),
                    escape(&e.url),
                    u8::from(e.healthy)
                );
            }
        }
        out.push_str("# HELP svc_upstream_outstanding_requests Requests in flight to an upstream endpoint.\n");
        out.push_str("# TYPE svc_upstream_outstanding_requests gauge\n");
        for (model, s) in statuses {
            for e in &s.endpoints {
                let _ = writeln!(
                    out,
                    "svc_upstream_outstanding_requests{{model=\"{}\",endpoint=\"{}\"}} {}",
                    escape(model),
                    escape(&e.url),
                    e.outstanding
                );
            }
        }
        out.push_str("# HELP svc_upstream_routed_total Requests sent to an upstream endpoint, by why: prefix (it served the prompt's prefix before), fallback (another endpoint did but was down or busy), load (least outstanding).\n");
        out.push_str("# TYPE svc_upstream_routed_total counter\n");
        for (model, s) in statuses {
            for e in &s.endpoints {
                for (route, n) in &e.routed {
                    let _ = writeln!(
                        out,
                        "svc_upstream_routed_total{{model=\"{}\",endpoint=\"{}\",route=\"{route}\"}} {n}",
                        escape(model),
                        escape(&e.url),
                    );
                }
            }
        }
        out
    }
}

/// A counter's value, read from a model's residency.
type Count = fn(&svc_core::Residency) -> String;

/// What every `svc_model_*` series' help says of its ids.
const SHARED: &str =
    "By model id as configured: ids on one file are one model, each id showing its numbers.";

/// The local models' residency (loaded or not, loads, unloads) and the
/// memory they hold, by model id as configured: ids on the same file are
/// one model, and each shows its numbers (summing over ids counts it once
/// per id).
fn models(out: &mut String, statuses: &[(String, EngineStatus)]) {
    let resident: Vec<_> = statuses
        .iter()
        .filter_map(|(model, s)| s.residency.as_ref().map(|r| (model, r)))
        .collect();
    let memory: Vec<_> = statuses
        .iter()
        .filter_map(|(model, s)| {
            let bytes = match &s.residency {
                Some(r) => r.memory_bytes,
                None => s.memory_bytes?,
            };
            Some((model, bytes))
        })
        .collect();
    if !resident.is_empty() {
        let _ = writeln!(
            out,
            "# HELP svc_model_loaded Whether a local model is loaded (1) or not (0; also while it loads). {SHARED}\n# TYPE svc_model_loaded gauge"
        );
        for (model, r) in &resident {
            let loaded = u8::from(r.state == svc_core::ResidencyState::Loaded);
            let _ = writeln!(
                out,
                "svc_model_loaded{{model=\"{}\"}} {loaded}",
                escape(model)
            );
        }
    }
    if !memory.is_empty() {
        let _ = writeln!(
            out,
            "# HELP svc_model_memory_bytes Host memory a local model holds now (weights, KV cells, saved prompt prefixes); 0 when unloaded. {SHARED}\n# TYPE svc_model_memory_bytes gauge"
        );
        for (model, bytes) in &memory {
            let _ = writeln!(
                out,
                "svc_model_memory_bytes{{model=\"{}\"}} {bytes}",
                escape(model)
            );
        }
    }
    if resident.is_empty() {
        return;
    }
    let counters: [(&str, &str, Count); 5] = [
        (
            "svc_model_loads_total",
            "Loads of a local model that ended with it loaded (at start, on demand, or asked for).",
            |r| r.loads.to_string(),
        ),
        (
            "svc_model_load_failures_total",
            "Loads of a local model that failed (its file, memory, or the load timeout).",
            |r| r.load_failures.to_string(),
        ),
        (
            "svc_model_load_seconds_total",
            "Seconds the loads of a local model took, together.",
            |r| r.load_seconds.to_string(),
        ),
        (
            "svc_model_evictions_total",
            "Unloads of a local model to make room for another within the memory budget.",
            |r| r.evictions.to_string(),
        ),
        (
            "svc_model_unloads_total",
            "Unloads of a local model after its keep_alive idle, or asked for (admin API, dashboard); evictions not counted.",
            |r| r.unloads.to_string(),
        ),
    ];
    for (name, help, value) in counters {
        let _ = writeln!(out, "# HELP {name} {help} {SHARED}\n# TYPE {name} counter");
        for (model, r) in &resident {
            let _ = writeln!(out, "{name}{{model=\"{}\"}} {}", escape(model), value(r));
        }
    }
}

/// Escapes a label value.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Counts a request in `svc_http_requests_in_flight` while it lives.
pub struct InFlight<'a>(&'a Metrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
