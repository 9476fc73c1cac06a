//! A small HTTP load generator for svc's benchmarks: POSTs one JSON body
//! to one URL, either open-loop at a fixed rate (latency measured from
//! each request's scheduled start, so a stalled server is not hidden by a
//! stalled generator) or closed-loop with N concurrent workers (peak
//! throughput). Prints one JSON line of results on stdout.
//!
//! `svc-loadgen --url URL [--body JSON] [--header 'Name: value']...
//!              (--rate RPS | --concurrency N) [--duration SECS] [--warmup SECS]`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::sync::Mutex;

struct Args {
    url: String,
    body: String,
    headers: HeaderMap,
    rate: Option<f64>,
    concurrency: Option<usize>,
    duration: Duration,
    warmup: Duration,
}

fn parse() -> Args {
    let mut args = std::env::args().skip(1);
    let mut parsed = Args {
        url: String::new(),
        body: String::new(),
        headers: HeaderMap::new(),
        rate: None,
        concurrency: None,
        duration: Duration::from_secs(10),
        warmup: Duration::from_secs(2),
    };
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--url" => parsed.url = value(),
            "--body" => parsed.body = value(),
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
    assert!(!parsed.url.is_empty(), "--url is required");
    assert!(
        parsed.rate.is_some() != parsed.concurrency.is_some(),
        "give exactly one of --rate and --concurrency"
    );
    parsed
}

#[derive(Default)]
struct Results {
    /// Microseconds, of requests that got a 2xx.
    latencies: Vec<u64>,
    errors: u64,
}

async fn one(client: &reqwest::Client, args: &Args) -> bool {
    let request = if args.body.is_empty() {
        client.get(&args.url)
    } else {
        client
            .post(&args.url)
            .header("content-type", "application/json")
            .body(args.body.clone())
    };
    match request.headers(args.headers.clone()).send().await {
        Ok(response) => {
            let ok = response.status().is_success();
            ok && response.bytes().await.is_ok()
        }
        Err(_) => false,
    }
}

#[tokio::main]
async fn main() {
    let args = Arc::new(parse());
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .tcp_nodelay(true)
        .build()
        .expect("client");
    let results = Arc::new(Mutex::new(Results::default()));
    let started = Instant::now();
    let end = started + args.warmup + args.duration;
    let measure_from = started + args.warmup;
    if let Some(rate) = args.rate {
        let period = Duration::from_secs_f64(1.0 / rate);
        let mut tasks = Vec::new();
        let mut next = started;
        while next < end {
            tokio::time::sleep_until(next.into()).await;
            let scheduled = next;
            let (client, args, results) = (client.clone(), args.clone(), results.clone());
            tasks.push(tokio::spawn(async move {
                let ok = one(&client, &args).await;
                if scheduled >= measure_from {
                    let mut r = results.lock().await;
                    if ok {
                        r.latencies.push(scheduled.elapsed().as_micros() as u64);
                    } else {
                        r.errors += 1;
                    }
                }
            }));
            next += period;
        }
        for t in tasks {
            let _ = t.await;
        }
    } else {
        let workers = args.concurrency.unwrap_or(1);
        let mut tasks = Vec::new();
        for _ in 0..workers {
            let (client, args, results) = (client.clone(), args.clone(), results.clone());
            tasks.push(tokio::spawn(async move {
                let mut mine = Results::default();
                while Instant::now() < end {
                    let at = Instant::now();
                    let ok = one(&client, &args).await;
                    if at >= measure_from {
                        if ok {
                            mine.latencies.push(at.elapsed().as_micros() as u64);
                        } else {
                            mine.errors += 1;
                        }
                    }
                }
                let mut r = results.lock().await;
                r.latencies.extend(mine.latencies);
                r.errors += mine.errors;
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    }
    let mut r = results.lock().await;
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
