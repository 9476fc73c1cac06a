//! A small HTTP load generator for svc's benchmarks: POSTs one JSON body
//! to one URL, either open-loop at a fixed rate (latency measured from
//! each request's scheduled start, so a stalled server is not hidden by a
//! stalled generator) or closed-loop with N concurrent workers (peak
//! throughput). Prints one JSON line of results on stdout.
//!
//! `svc-loadgen --url URL [--body JSON] [--header 'Name: value']...
//!              (--rate RPS | --concurrency N) [--duration SECS] [--warmup SECS]`
//!
//! It runs on the same cores as what it measures, so it is kept lean:
//! hyper's own HTTP/1.1 connections (keep-alive, one request at a time on
//! each), no client framework around them. Plain `http://` only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
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

/// One request on `connection`: whether it got a 2xx and its whole body.
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
            let ok = response.status().is_success();
            response.into_body().collect().await.is_ok() && ok
        }
        Err(_) => false,
    }
}

#[derive(Default)]
struct Results {
    /// Microseconds, of requests that got a 2xx.
    latencies: Vec<u64>,
    errors: u64,
}

impl Results {
    fn record(&mut self, ok: bool, latency: Duration) {
        if ok {
            self.latencies.push(latency.as_micros() as u64);
        } else {
            self.errors += 1;
        }
    }
}

#[tokio::main]
async fn main() {
    let args = Arc::new(parse());
    let results = Arc::new(Mutex::new(Results::default()));
    let started = Instant::now();
    let end = started + args.warmup + args.duration;
    let measure_from = started + args.warmup;
    if let Some(rate) = args.rate {
        // Open loop: each request at its scheduled time, on an idle
        // connection if there is one, else on a new one. The pacing runs on
        // a thread of its own with the OS's fine-grained sleep: Tokio's
        // timer ticks in whole milliseconds, which would start requests up
        // to a millisecond late (and count that as latency).
        let idle: Arc<Mutex<Vec<Connection>>> = Arc::default();
        let period = Duration::from_secs_f64(1.0 / rate);
        let runtime = tokio::runtime::Handle::current();
        let (args2, results2) = (args.clone(), results.clone());
        let pacer = std::thread::spawn(move || {
            let mut tasks = Vec::new();
            let mut next = started;
            while next < end {
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let scheduled = next;
                let (args, results, idle) = (args2.clone(), results2.clone(), idle.clone());
                tasks.push(runtime.spawn(async move {
                    let reused = idle.lock().unwrap().pop();
                    let connection = match reused {
                        Some(c) => Some(c),
                        None => connect(&args).await,
                    };
                    let ok = match connection {
                        Some(mut c) => {
                            let ok = one(&mut c, &args).await;
                            if ok {
                                idle.lock().unwrap().push(c);
                            }
                            ok
                        }
                        None => false,
                    };
                    if scheduled >= measure_from {
                        results.lock().unwrap().record(ok, scheduled.elapsed());
                    }
                }));
                next += period;
            }
            tasks
        });
        let tasks = tokio::task::spawn_blocking(move || pacer.join().unwrap())
            .await
            .unwrap();
        for t in tasks {
            let _ = t.await;
        }
    } else {
        // Closed loop: each worker keeps one connection busy.
        let workers = args.concurrency.unwrap_or(1);
        let mut tasks = Vec::new();
        for _ in 0..workers {
            let (args, results) = (args.clone(), results.clone());
            tasks.push(tokio::spawn(async move {
                let mut mine = Results::default();
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
                        mine.record(ok, at.elapsed());
                    }
                }
                let mut r = results.lock().unwrap();
                r.latencies.extend(mine.latencies);
                r.errors += mine.errors;
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    }
    let mut r = results.lock().unwrap();
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
