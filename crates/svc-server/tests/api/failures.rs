//! Failure injection, as LiteLLM's load tests do it: a TCP relay between
//! the server and its PostgreSQL or Redis is switched, while requests flow,
//! between passing bytes, refusing connections (the service stopped: the
//! port closes and open connections drop) and a black hole (connections are
//! accepted, nothing is ever answered: a hung process or a lost network).
//! Requests that need the store must fail fast with a 503, rate limits fail
//! open without making every request wait, and everything comes back once
//! the relay passes bytes again.
//!
//! Leaving the black hole drops the connections it held, as a restarted
//! server or a timed-out network path does.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use svc_core::KeyLimits;
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Database, TestApp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

use crate::{body, expect_error};

/// The longest any single request of these tests may take before the test
/// gives up on it: far beyond every bound asserted, so a hang fails the
/// assertion instead of the whole run.
const GIVE_UP: Duration = Duration::from_secs(30);
/// What a request that needs an unavailable store may take (the target is
/// about 2 s; generous for a loaded 2-core machine).
const FAIL_FAST: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Bytes pass both ways.
    Pass,
    /// Nothing listens on the port; open connections are dropped.
    Refuse,
    /// Connections are accepted and held; nothing is read or answered.
    Blackhole,
}

/// A TCP relay on loopback in front of `upstream`.
struct Relay {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
}

impl Relay {
    async fn start(upstream: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (mode, watching) = watch::channel(Mode::Pass);
        tokio::spawn(accept(Some(listener), addr, upstream, watching));
        Relay { addr, mode }
    }

    fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }
}

/// Accepts while not refusing; closes the port while refusing.
async fn accept(
    mut listener: Option<TcpListener>,
    addr: SocketAddr,
    upstream: SocketAddr,
    mut mode: watch::Receiver<Mode>,
) {
    loop {
        let now = *mode.borrow_and_update();
        if now == Mode::Refuse {
            listener = None;
        } else if listener.is_none() {
            listener = Some(listen_again(addr).await);
        }
        match &listener {
            None => {
                if mode.changed().await.is_err() {
                    return;
                }
            }
            Some(open) => tokio::select! {
                accepted = open.accept() => {
                    if let Ok((client, _)) = accepted {
                        tokio::spawn(relay(client, upstream, mode.clone()));
                    }
                }
                changed = mode.changed() => if changed.is_err() { return },
            },
        }
    }
}

/// The relay's port, open again.
async fn listen_again(addr: SocketAddr) -> TcpListener {
    for _ in 0..100 {
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        if socket.bind(addr).is_ok()
            && let Ok(listener) = socket.listen(1024)
        {
            return listener;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("cannot listen on {addr} again");
}

/// One relayed connection, as the mode says.
async fn relay(client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>) {
    if *mode.borrow_and_update() != Mode::Pass {
        // Held without a byte read until the mode changes, then dropped.
        let _ = mode.changed().await;
        drop(client);
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut client_in, mut client_out) = client.into_split();
    let (mut server_in, mut server_out) = server.into_split();
    let mut up = vec![0u8; 16 * 1024];
    let mut down = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            read = client_in.read(&mut up) => match read {
                Ok(n) if n > 0 => if server_out.write_all(&up[..n]).await.is_err() { return },
                _ => return,
            },
            read = server_in.read(&mut down) => match read {
                Ok(n) if n > 0 => if client_out.write_all(&down[..n]).await.is_err() { return },
                _ => return,
            },
            changed = mode.changed() => {
                if changed.is_err() {
                    return;
                }
                let now = *mode.borrow_and_update();
                match now {
                    Mode::Pass => {}
                    Mode::Refuse => return,
                    Mode::Blackhole => {
                        let _ = mode.changed().await;
                        return;
                    }
                }
            }
        }
    }
}

/// The address `url` (`scheme://[user@]host:port/…`) connects to, and the
/// `host:port` text it names it by.
async fn address_of(url: &str) -> (SocketAddr, String) {
    let rest = url.split_once("://").unwrap().1;
    let authority = rest.split(['/', '?']).next().unwrap();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let addr = tokio::net::lookup_host(host_port)
        .await
        .unwrap()
        .find(SocketAddr::is_ipv4)
        .unwrap();
    (addr, host_port.to_owned())
}

/// Runs `request`, returning its response and how long it took; panics
/// after [`GIVE_UP`].
async fn timed<T>(what: &str, request: impl std::future::Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let response = tokio::time::timeout(GIVE_UP, request)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {GIVE_UP:?}"));
    (response, started.elapsed())
}

/// GETs `path` (no key).
async fn get(app: &TestApp, path: &str) -> (reqwest::Response, Duration) {
    let (response, took) = timed(path, app.client.get(app.url(path)).send()).await;
    (response.unwrap(), took)
}

/// The app on a fresh PostgreSQL schema reached through a relay the test
/// can hang or cut; the schema, for removing it at the end.
async fn app_on_relayed_postgres() -> (TestApp, Relay, TestSchema) {
    let (upstream, host_port) = address_of(&postgres_url()).await;
    let schema = TestSchema::create(&postgres_url()).await.unwrap();
    let relay = Relay::start(upstream).await;
    let url = schema
        .url()
        .replacen(&host_port, &relay.addr.to_string(), 1);
    let app = TestApp::spawn_with(Database::Url(url), ServerConfig::default()).await;
    (app, relay, schema)
}

#[tokio::test]
async fn a_postgres_outage_gets_quick_503s_and_the_service_recovers() {
    let (app, relay, schema) = app_on_relayed_postgres().await;
    // One key per outage, never used before it, so the store must be read.
    let mut keys = Vec::new();
    for _ in 0..3 {
        keys.push(app.create_key().await);
    }
    let (warm, _) = timed("warm-up", app.chat(&keys[0], &body("svc", "hi"))).await;
    assert_eq!(warm.status(), StatusCode::OK);

    for (mode, key) in [(Mode::Refuse, &keys[1]), (Mode::Blackhole, &keys[2])] {
        relay.set(mode);
        let (response, took) = timed("chat", app.chat(key, &body("svc", "hi"))).await;
        eprintln!("postgres {mode:?}: chat answered in {took:?}");
        expect_error(response, 503, "server_error", "service_unavailable", None).await;
        assert!(took < FAIL_FAST, "{mode:?}: a 503 took {took:?}");

        let (health, took) = get(&app, "/health").await;
        assert_eq!(health.status(), StatusCode::OK);
        assert!(
            took < Duration::from_secs(1),
            "{mode:?}: /health took {took:?}"
        );

        let (ready, took) = get(&app, "/ready").await;
        eprintln!("postgres {mode:?}: /ready answered in {took:?}");
        assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(took < FAIL_FAST, "{mode:?}: /ready took {took:?}");

        relay.set(Mode::Pass);
        let back = Instant::now();
        loop {
            let (response, _) = timed("chat", app.chat(key, &body("svc", "hi"))).await;
            if response.status() == StatusCode::OK {
                break;
            }
            assert!(
                back.elapsed() < Duration::from_secs(10),
                "{mode:?}: still {} {:?} after {:?}",
                response.status(),
                response.text().await,
                back.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!("postgres {mode:?}: recovered in {:?}", back.elapsed());
        assert_eq!(get(&app, "/ready").await.0.status(), StatusCode::OK);
    }
    drop(app);
    schema.remove().await.unwrap();
}

/// Whether `response` was counted by the rate limiter (it carries the
/// limit headers only then).
/// A server that counts rate limits (a high one) in the Redis behind `relay`.
fn counting_in(relay: &Relay) -> ServerConfig {
    ServerConfig {
        redis_url: Some(format!("redis://{}", relay.addr).parse().unwrap()),
        rate_limits: KeyLimits {
            requests_per_minute: Some(100_000),
            tokens_per_minute: None,
        },
        ..ServerConfig::default()
    }
}

fn counted(response: &reqwest::Response) -> bool {
    response
        .headers()
        .contains_key("x-ratelimit-remaining-requests")
}

#[tokio::test]
async fn a_hung_or_stopped_redis_lets_requests_through_quickly_and_counting_resumes() {
    let relay = Relay::start(address_of("redis://127.0.0.1:6379").await.0).await;
    let app = TestApp::spawn_with(Database::Sqlite, counting_in(&relay)).await;
    let key = app.create_key().await;
    let (first, _) = timed("warm-up", app.chat(&key, &body("svc", "hi"))).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert!(counted(&first), "counted in Redis while it answers");

    for mode in [Mode::Blackhole, Mode::Refuse] {
        relay.set(mode);
        // Sequential requests: each may pay for finding Redis gone once,
        // not every one of them for as long as it stays gone.
        let started = Instant::now();
        let mut slowest = Duration::ZERO;
        for i in 0..30 {
            let (response, took) = timed("chat", app.chat(&key, &body("svc", "hi"))).await;
            assert_eq!(response.status(), StatusCode::OK, "{mode:?}: request {i}");
            slowest = slowest.max(took);
        }
        let total = started.elapsed();
        eprintln!("redis {mode:?}: 30 requests in {total:?}, slowest {slowest:?}");
        assert!(
            slowest < Duration::from_secs(2),
            "{mode:?}: slowest {slowest:?}"
        );
        assert!(
            total < Duration::from_secs(5),
            "{mode:?}: 30 requests took {total:?}"
        );
        let (health, took) = get(&app, "/health").await;
        assert_eq!(health.status(), StatusCode::OK);
        assert!(
            took < Duration::from_secs(1),
            "{mode:?}: /health took {took:?}"
        );
        // An outage of some seconds, requests still flowing, so that
        // reconnecting fails more than once before Redis is back.
        while started.elapsed() < Duration::from_secs(4) {
            let (response, took) = timed("chat", app.chat(&key, &body("svc", "hi"))).await;
            assert_eq!(response.status(), StatusCode::OK, "{mode:?}");
            assert!(
                took < Duration::from_secs(2),
                "{mode:?}: a request took {took:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        relay.set(Mode::Pass);
        let back = counted_again(&app, &key, mode).await;
        eprintln!("redis {mode:?}: counted again after {back:?}");
    }
}

/// Sends requests until one is counted in Redis again (within 10 s of
/// `mode` ending); returns how long that took.
async fn counted_again(app: &TestApp, key: &str, mode: Mode) -> Duration {
    let back = Instant::now();
    loop {
        let (response, _) = timed("chat", app.chat(key, &body("svc", "hi"))).await;
        assert_eq!(response.status(), StatusCode::OK);
        if counted(&response) {
            return back.elapsed();
        }
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "{mode:?}: not counted again after {:?}",
            back.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// Issue 33: svc started only once Redis answered (`cannot connect to
// Redis: timed out`), so a replica restarted during a Redis incident
// crash-looped. It now starts, lets requests through uncounted, and counts
// in Redis once it answers: the rule of an outage during traffic.
#[tokio::test]
async fn svc_starts_while_redis_hangs_or_is_down_and_counts_once_it_answers() {
    for mode in [Mode::Blackhole, Mode::Refuse] {
        let relay = Relay::start(address_of("redis://127.0.0.1:6379").await.0).await;
        relay.set(mode);
        let started = Instant::now();
        let app = TestApp::spawn_with(Database::Sqlite, counting_in(&relay)).await;
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(10),
            "{mode:?}: start took {took:?}"
        );
        let key = app.create_key().await;
        let (response, took) = timed("chat", app.chat(&key, &body("svc", "hi"))).await;
        assert_eq!(response.status(), StatusCode::OK, "{mode:?}");
        assert!(!counted(&response), "{mode:?}: counted without Redis");
        assert!(took < Duration::from_secs(2), "{mode:?}: took {took:?}");

        relay.set(Mode::Pass);
        let back = counted_again(&app, &key, mode).await;
        eprintln!("redis {mode:?} at start: counted after {back:?}");
    }
}

/// This process's resident memory in KiB (the server runs in it), where
/// the system tells.
fn resident_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test]
async fn a_burst_into_a_hung_postgres_is_answered_and_leaves_nothing_queued() {
    let (app, relay, schema) = app_on_relayed_postgres().await;
    let key = app.create_key().await;
    relay.set(Mode::Blackhole);
    // Past the authentication cache: the key must be read from the store.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let mut rss = Vec::new();
    for round in 0..2 {
        let started = Instant::now();
        let burst: Vec<_> = (0..100)
            .map(|_| {
                let request = app
                    .client
                    .post(app.url("/v1/chat/completions"))
                    .bearer_auth(&key)
                    .json(&body("svc", "hi"))
                    .send();
                async move {
                    let (response, took) = timed("chat", request).await;
                    (response.unwrap(), took)
                }
            })
            .collect();
        let burst = tokio::spawn(futures::future::join_all(burst));
        // The process keeps answering while the burst waits on the store.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (health, took) = get(&app, "/health").await;
        assert_eq!(health.status(), StatusCode::OK);
        assert!(took < Duration::from_secs(1), "/health took {took:?}");
        let answers = burst.await.unwrap();
        let total = started.elapsed();
        let slowest = answers.iter().map(|(_, t)| *t).max().unwrap();
        for (response, _) in answers {
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        }
        rss.extend(resident_kib());
        eprintln!(
            "postgres Blackhole, burst {round}: 100 concurrent 503s in {total:?}, slowest {slowest:?}, rss {:?} KiB",
            resident_kib()
        );
        assert!(slowest < FAIL_FAST, "slowest of the burst: {slowest:?}");
    }
    if let [first, second] = rss[..] {
        // A second burst like the first must not need much more memory:
        // nothing of the first is still queued or held.
        assert!(
            second < first + 64 * 1024,
            "resident memory grew from {first} to {second} KiB"
        );
    }

    relay.set(Mode::Pass);
    let back = Instant::now();
    loop {
        let (response, _) = timed("chat", app.chat(&key, &body("svc", "hi"))).await;
        if response.status() == StatusCode::OK {
            break;
        }
        assert!(back.elapsed() < Duration::from_secs(10), "no recovery");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "postgres Blackhole after a burst: recovered in {:?}",
        back.elapsed()
    );
    drop(app);
    schema.remove().await.unwrap();
}

/// A budgeted key's request charges its budget in the database before it
/// starts: with PostgreSQL hung (the key still in the authentication
/// cache), the charge must give up as fast as any read on the request
/// path and let the request through (a counter's outage is not an API
/// outage), not hold it until the pool gives up.
#[tokio::test]
async fn a_budget_counter_in_a_hung_postgres_lets_requests_through_quickly() {
    let (app, relay, schema) = app_on_relayed_postgres().await;
    let key = app
        .create_scoped_key(
            None,
            svc_core::KeyScope {
                budget: Some(svc_core::Budget::tokens(
                    1_000_000,
                    svc_core::BudgetPeriod::Day,
                )),
                ..svc_core::KeyScope::default()
            },
        )
        .await;
    // One request, so that the budget's counter row exists.
    assert_eq!(
        app.chat(&key, &body("svc", "hi")).await.status(),
        StatusCode::OK
    );
    // Authenticated just before PostgreSQL hangs, so that the key is in the
    // cache (kept a second) when the chat comes: what is timed is the
    // budget's charge, not a key lookup after a slow first request.
    let models = app
        .client
        .get(app.url("/v1/models"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), StatusCode::OK);
    relay.set(Mode::Blackhole);
    let (response, took) = timed("chat", app.chat(&key, &body("svc", "hi"))).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(took < FAIL_FAST, "a budgeted request took {took:?}");
    relay.set(Mode::Pass);
    drop(app);
    schema.remove().await.unwrap();
}
