//! A small HTTP load generator for svc's benchmarks: POSTs one JSON body
//! to one URL, either open-loop at a fixed rate (latency measured from
//! each request's scheduled start, so a stalled server is not hidden by a
//! stalled generator) or closed-loop with N concurrent workers (peak
//! throughput). Prints one JSON line of results on stdout.
//!
//! `svc-loadgen --url URL [--body JSON] [--header 'Name: value']...
//!              (--rate RPS | --concurrency N) [--duration SECS] [--warmup SECS]
//!              [--trace FILE] [--expect STATUS]`
//!
//! A request is ok when it gets a 2xx, or with `--expect STATUS` exactly
//! that status (a device poll for an unknown code is a 400 by design).
//!
//! `--trace FILE` also writes every measured request as a line
//! `start_us latency_us ok` (start from the end of the warm-up), to see
//! whether slow requests come alone or together.
//!
//! It runs on the same cores as what it measures, so it is kept lean:
//! hyper's own HTTP/1.1 connections (keep-alive, one request at a time on
//! each), no client framework around them, and open loop on one thread
//! paced by a timerfd. Plain `http://` only.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::cell::RefCell;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;

struct Args {
    /// `host:port` to connect to.
    authority: String,
    /// Path and query.
    path: String,
    body: Bytes,
    headers: HeaderMap,
    rate: Option<f64>,
    concurrency: Option<usize>,
    duration: Duration,
    warmup: Duration,
    trace: Option<String>,
    /// The status that counts as ok (`None`: any 2xx).
    expect: Option<u16>,
}

fn parse() -> Args {
    let mut args = std::env::args().skip(1);
    let mut url = String::new();
    let mut parsed = Args {
        authority: String::new(),
        path: String::new(),
        body: Bytes::new(),
        headers: HeaderMap::new(),
        rate: None,
        concurrency: None,
        duration: Duration::from_secs(10),
        warmup: Duration::from_secs(2),
        trace: None,
        expect: None,
    };
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--url" => url = value(),
            "--body" => parsed.body = Bytes::from(value()),
            "--header" => {
                let text = value();
                let (name, v) = text.split_once(':').expect("--header 'Name: value'");
                parsed.headers.insert(
                    HeaderName::try_from(name.trim()).expect("header name"),
                    HeaderValue::try_from(v.trim()).expect("header value"),
                );
            }
            "--rate" => parsed.rate = Some(value().parse().expect("--rate RPS")),
            "--concurrency" => parsed.concurrency = Some(value().parse().expect("--concurrency N")),
            "--duration" => {
                parsed.duration = Duration::from_secs_f64(value().parse().expect("secs"))
            }
            "--warmup" => parsed.warmup = Duration::from_secs_f64(value().parse().expect("secs")),
            "--trace" => parsed.trace = Some(value()),
            "--expect" => parsed.expect = Some(value().parse().expect("--expect STATUS")),
            other => panic!("unknown argument {other}"),
        }
    }
    let rest = url
        .strip_prefix("http://")
        .expect("--url must be an http:// URL");
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    parsed.authority = authority.to_owned();
    parsed.path = path.to_owned();
    parsed.headers.insert(
        hyper::header::HOST,
        HeaderValue::try_from(authority).expect("host"),
    );
    if !parsed.body.is_empty() {
        parsed.headers.insert(
            hyper::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    assert!(
        parsed.rate.is_some() != parsed.concurrency.is_some(),
        "give exactly one of --rate and --concurrency"
    );
    parsed
}

type Connection = SendRequest<Full<Bytes>>;

/// How long an idle connection is kept for reuse, as HTTP clients' pools
/// do (httpx 5 s, Node's undici 4 s): a server closes kept-alive
/// connections that stay idle (svc after `--header-timeout`), and a request
/// sent on one just as it closes is lost, which the soak would count as
/// svc's error.
const IDLE_EXPIRY: Duration = Duration::from_secs(4);

/// The most recently idle connection that has not expired; the expired
/// ones (the oldest, at the front) are dropped.
fn take_idle(idle: &mut Vec<(Connection, Instant)>) -> Option<Connection> {
    let fresh = idle.partition_point(|(_, since)| since.elapsed() >= IDLE_EXPIRY);
    idle.drain(..fresh);
    idle.pop().map(|(c, _)| c)
}

/// Opens a keep-alive connection; its driver runs on a task of its own.
async fn connect(args: &Args) -> Option<Connection> {
    let stream = TcpStream::connect(&args.authority).await.ok()?;
    stream.set_nodelay(true).ok()?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(connection);
    Some(sender)
}

/// One request on `connection`: whether it got the expected status (a 2xx
/// unless `--expect`) and its whole body.
async fn one(connection: &mut Connection, args: &Args) -> bool {
    if connection.ready().await.is_err() {
        return false;
    }
    let method = if args.body.is_empty() {
        Method::GET
    } else {
        Method::POST
    };
    let mut request = Request::new(Full::new(args.body.clone()));
    *request.method_mut() = method;
    *request.uri_mut() = args.path.parse().expect("path");
    *request.headers_mut() = args.headers.clone();
    match connection.send_request(request).await {
        Ok(response) => {
            let status = response.status();
            let ok = match args.expect {
                Some(expected) => status.as_u16() == expected,
                None => status.is_success(),
            };
            response.into_body().collect().await.is_ok() && ok
        }
        Err(_) => false,
    }
}

#[derive(Default)]
struct Results {
    /// Microseconds, of requests that were ok.
    latencies: Vec<u64>,
    errors: u64,
    /// With `--trace`: every measured request's start (µs after the
    /// warm-up), latency (µs) and whether it was ok.
    trace: Option<Vec<(u64, u64, bool)>>,
}

impl Results {
    fn new(args: &Args) -> Results {
        Results {
            trace: args.trace.is_some().then(Vec::new),
            ..Results::default()
        }
    }

    /// Records a request that started at `at` (after `measure_from`) and
    /// has just ended.
    fn record(&mut self, ok: bool, at: Instant, measure_from: Instant) {
        let latency = at.elapsed().as_micros() as u64;
        if ok {
            self.latencies.push(latency);
        } else {
            self.errors += 1;
        }
        if let Some(trace) = &mut self.trace {
            trace.push(((at - measure_from).as_micros() as u64, latency, ok));
        }
    }

    fn merge(&mut self, other: Results) {
        self.latencies.extend(other.latencies);
        self.errors += other.errors;
        if let (Some(all), Some(trace)) = (&mut self.trace, other.trace) {
            all.extend(trace);
        }
    }
}

fn main() {
    let args = parse();
    // Open loop runs on one thread: the pacer, the requests and their
    // connections wake each other without crossing threads, which on a
    // shared 2-core machine costs more than the requests themselves.
    let runtime = if args.rate.is_some() {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
    .enable_all()
    .build()
    .expect("runtime");
    runtime.block_on(run(args));
}

/// Sleeps until an `Instant` with the kernel's high-resolution timers:
/// Tokio's own timer ticks in whole milliseconds, which would start
/// requests up to a millisecond late (and count that as latency).
struct Pacer {
    timer: AsyncFd<Timer>,
}

/// `TimerFd` as Tokio's `AsyncFd` wants it.
struct Timer(TimerFd);

impl AsRawFd for Timer {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

impl Pacer {
    fn new() -> Pacer {
        let timer = Timer(
            TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK).expect("timerfd"),
        );
        // Deprecated because the registration must not outlive the file
        // descriptor: here the AsyncFd owns the timer, so it cannot.
        #[expect(deprecated)]
        let timer = AsyncFd::with_interest(timer, Interest::READABLE).expect("timerfd");
        Pacer { timer }
    }

    async fn sleep_until(&self, at: Instant) {
        let Some(wait) = at.checked_duration_since(Instant::now()) else {
            return;
        };
        if wait.is_zero() {
            return;
        }
        self.timer
            .get_ref()
            .0
            .set(
                Expiration::OneShot(TimeSpec::from_duration(wait)),
                TimerSetTimeFlags::empty(),
            )
            .expect("timerfd set");
        loop {
            let mut ready = self.timer.readable().await.expect("timerfd");
            // Reading resets the expiry count; EAGAIN means not yet.
            match ready.try_io(|fd| fd.get_ref().0.wait().map_err(std::io::Error::from)) {
                Ok(Ok(())) => return,
                Ok(Err(e)) => panic!("timerfd: {e}"),
                Err(_would_block) => {}
            }
        }
    }
}

async fn run(args: Args) {
    let args = Arc::new(args);
    let results = Arc::new(Mutex::new(Results::new(&args)));
    let started = Instant::now();
    let end = started + args.warmup + args.duration;
    let measure_from = started + args.warmup;
    if let Some(rate) = args.rate {
        // Open loop: each request at its scheduled time, on an idle
        // connection if there is one, else on a new one.
        // Idle connections with the time they became idle, newest last.
        let idle: Rc<RefCell<Vec<(Connection, Instant)>>> = Rc::default();
        let period = Duration::from_secs_f64(1.0 / rate);
        let pacer = Pacer::new();
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let mut tasks = Vec::new();
                let mut next = started;
                while next < end {
                    pacer.sleep_until(next).await;
                    let scheduled = next;
                    let (args, results, idle) = (args.clone(), results.clone(), idle.clone());
                    tasks.push(tokio::task::spawn_local(async move {
                        let reused = take_idle(&mut idle.borrow_mut());
                        let connection = match reused {
                            Some(c) => Some(c),
                            None => connect(&args).await,
                        };
                        let ok = match connection {
                            Some(mut c) => {
                                let ok = one(&mut c, &args).await;
                                if ok {
                                    idle.borrow_mut().push((c, Instant::now()));
                                }
                                ok
                            }
                            None => false,
                        };
                        if scheduled >= measure_from {
                            results.lock().unwrap().record(ok, scheduled, measure_from);
                        }
                    }));
                    next += period;
                }
                for t in tasks {
                    let _ = t.await;
                }
            })
            .await;
    } else {
        // Closed loop: each worker keeps one connection busy.
        let workers = args.concurrency.unwrap_or(1);
        let mut tasks = Vec::new();
        for _ in 0..workers {
            let (args, results) = (args.clone(), results.clone());
            tasks.push(tokio::spawn(async move {
                let mut mine = Results::new(&args);
                let mut connection = None;
                while Instant::now() < end {
                    let at = Instant::now();
                    if connection.is_none() {
                        connection = connect(&args).await;
                    }
                    let ok = match connection.as_mut() {
                        Some(c) => one(c, &args).await,
                        None => false,
                    };
                    if !ok {
                        connection = None;
                    }
                    if at >= measure_from {
                        mine.record(ok, at, measure_from);
                    }
                }
                results.lock().unwrap().merge(mine);
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    }
    let mut r = results.lock().unwrap();
    if let (Some(path), Some(trace)) = (&args.trace, &mut r.trace) {
        trace.sort_unstable();
        let mut text = String::with_capacity(trace.len() * 16);
        for (start, latency, ok) in trace.iter() {
            use std::fmt::Write;
            let _ = writeln!(text, "{start} {latency} {}", u8::from(*ok));
        }
        std::fs::write(path, text).expect("--trace FILE");
    }
    r.latencies.sort_unstable();
    let n = r.latencies.len();
    let pct = |p: f64| -> f64 {
        if n == 0 {
            return 0.0;
        }
        let i = ((p / 100.0) * n as f64).ceil() as usize;
        r.latencies[i.clamp(1, n) - 1] as f64 / 1000.0
    };
    let seconds = args.duration.as_secs_f64();
    println!(
        "{{\"ok\":{n},\"errors\":{},\"rps\":{:.1},\"p50_ms\":{:.3},\"p90_ms\":{:.3},\"p99_ms\":{:.3},\"p999_ms\":{:.3},\"max_ms\":{:.3}}}",
        r.errors,
        n as f64 / seconds,
        pct(50.0),
        pct(90.0),
        pct(99.0),
        pct(99.9),
        pct(100.0)
    );
}
