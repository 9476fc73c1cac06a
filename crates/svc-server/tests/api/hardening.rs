//! No client can stall or exhaust the server (issue 16): slow clients are
//! cut off after the header and body timeouts, connections are capped in
//! all and per client address, the client address is read from forwarding
//! headers only when a trusted proxy sent them, an aborted request leaves
//! the in-flight gauge, and `/metrics` can be closed to the public. Each
//! attack test also checks that other clients are served meanwhile.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use svc_server::ServerConfig;
use svc_server::config::{Cidr, MetricsToken};
use svc_test_support::{Browser, Database, TestApp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::body;

async fn spawn(config: ServerConfig) -> TestApp {
    TestApp::spawn_with(Database::Sqlite, config).await
}

/// 127.0.0.`host`.
fn loopback(host: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, host])
}

/// A connection to `app` from 127.0.0.`host`.
async fn connect_from(app: &TestApp, host: u8) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(loopback(host), 0)).unwrap();
    socket.connect(app.addr).await.unwrap()
}

/// An HTTP client whose connections come from 127.0.0.`host`.
fn client_from(host: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(loopback(host))
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// Everything the server sends until it closes the connection, or `None`
/// when it is still open at `deadline`.
async fn read_until_closed(stream: &mut TcpStream, deadline: Instant) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let read_all = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout_at(deadline.into(), read_all)
        .await
        .ok()
        .map(|()| got)
}

/// `/health` from a fresh client at 127.0.0.`host` answers 200 quickly.
async fn health_is_answered(app: &TestApp, host: u8) {
    let started = Instant::now();
    let response = client_from(host)
        .get(app.url("/health"))
        .send()
        .await
        .expect("/health is answered");
    assert_eq!(response.status(), 200);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "/health took {took:?}");
}

#[tokio::test]
async fn slow_clients_are_cut_off_while_others_are_served() {
    let app = spawn(ServerConfig {
        header_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        ..ServerConfig::default()
    })
    .await;
    let key = app.create_key().await;
    let chat_head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: svc\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"model\""
    );
    let attacks: [(&str, String); 6] = [
        ("nothing at all", String::new()),
        ("half a head", "GET /health HTTP/1.1\r\nHost: svc\r\nX-Slow: ".into()),
        ("half an HTTP/2 preface", "PRI * HTTP/2.0\r\n".into()),
        ("a promised API body", chat_head),
        (
            "a promised form body",
            "POST /dashboard/login HTTP/1.1\r\nHost: svc\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: 500\r\n\r\nemail=a"
                .into(),
        ),
        (
            "a promised device body",
            "POST /v1/auth/device/code HTTP/1.1\r\nHost: svc\r\nContent-Type: application/json\r\n\
             Content-Length: 500\r\n\r\n{"
                .into(),
        ),
    ];
    // 60 connections from 10 addresses, each holding its request open.
    let mut slow = Vec::new();
    for i in 0..60u8 {
        let (what, sent) = &attacks[usize::from(i) % attacks.len()];
        let mut stream = connect_from(&app, 2 + i % 10).await;
        stream.write_all(sent.as_bytes()).await.unwrap();
        slow.push((*what, stream));
    }
    let started = Instant::now();
    health_is_answered(&app, 100).await;

    let deadline = started + Duration::from_secs(4);
    for (what, stream) in &mut slow {
        let got = read_until_closed(stream, deadline)
            .await
            .unwrap_or_else(|| panic!("{what}: still open after the timeouts"));
        let got = String::from_utf8_lossy(&got);
        if *what == "a promised API body" || *what == "a promised device body" {
            assert!(got.starts_with("HTTP/1.1 408"), "{what}: {got}");
            let body = got.split("\r\n\r\n").nth(1).unwrap_or_default();
            let body: Value = serde_json::from_str(body).unwrap();
            assert_eq!(body["error"]["code"], "request_timeout", "{body}");
            assert_eq!(body["error"]["type"], "invalid_request_error");
        }
    }
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "not cut early"
    );
    health_is_answered(&app, 100).await;
}

#[tokio::test]
async fn a_slow_but_steady_body_is_cut_off_at_the_body_timeout() {
    let app = spawn(ServerConfig {
        body_timeout: Duration::from_secs(1),
        ..ServerConfig::default()
    })
    .await;
    let key = app.create_key().await;
    let mut stream = connect_from(&app, 2).await;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: svc\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    // A byte every 200 ms: never idle, never done.
    let mut answer = Vec::new();
    for _ in 0..15 {
        if stream.write_all(b" ").await.is_err() {
            break;
        }
        let mut buf = [0u8; 1024];
        match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {
                answer.extend_from_slice(&buf[..n]);
                break;
            }
            Ok(_) => break,
            Err(_) => {}
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(started.elapsed() < Duration::from_millis(2500));
}

#[tokio::test]
async fn connections_past_the_per_address_limit_are_refused() {
    let app = spawn(ServerConfig {
        max_connections_per_address: 4,
        ..ServerConfig::default()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(connect_from(&app, 2).await);
    }
    let mut refused = connect_from(&app, 2).await;
    let deadline = Instant::now() + Duration::from_secs(2);
    let got = read_until_closed(&mut refused, deadline)
        .await
        .expect("the fifth connection is closed at once");
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    assert!(got.contains("too_many_connections"), "{got}");

    // Another address is served meanwhile.
    health_is_answered(&app, 3).await;

    // A place freed is a place for the same address again.
    drop(held.pop());
    let mut waited = Duration::ZERO;
    loop {
        let mut again = connect_from(&app, 2).await;
        again
            .write_all(b"GET /health HTTP/1.1\r\nHost: svc\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let got = read_until_closed(&mut again, Instant::now() + Duration::from_secs(2))
            .await
            .unwrap_or_default();
        if got.starts_with(b"HTTP/1.1 200") {
            break;
        }
        assert!(
            waited < Duration::from_secs(2),
            "the freed place was not reused"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
}

/// Sends `GET /health` on `stream`, keeping it open, and reads the answer.
async fn health_on(stream: &mut TcpStream) {
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: svc\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
}

/// A connection from 127.0.0.`host` with a request under way: a streamed
/// reply of `fake-slow` (50 ms a word) to 200 words, its head read.
async fn busy_from(app: &TestApp, key: &str, host: u8) -> TcpStream {
    let mut stream = connect_from(app, host).await;
    let words = vec!["word"; 200].join(" ");
    let mut request = body("fake-slow", &words);
    request["stream"] = serde_json::json!(true);
    let request = request.to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: svc\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        request.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    stream
}

#[tokio::test]
async fn connections_past_the_total_limit_are_refused() {
    let app = spawn(ServerConfig {
        max_connections: 3,
        ..ServerConfig::default()
    })
    .await;
    let key = app.create_key().await;
    // Three clients with requests under way fill every place.
    let mut held = Vec::new();
    for host in 2..5 {
        held.push(busy_from(&app, &key, host).await);
    }
    let mut refused = connect_from(&app, 5).await;
    let got = read_until_closed(&mut refused, Instant::now() + Duration::from_secs(2))
        .await
        .expect("the fourth connection is closed at once");
    assert!(got.starts_with(b"HTTP/1.1 503"));
    drop(held);
    // Closed connections free their places.
    let started = Instant::now();
    loop {
        let response = client_from(6).get(app.url("/health")).send().await;
        if response.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(2));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An HTTP/2 connection (prior knowledge, as h2c clients open it) from
/// 127.0.0.`host` that asked for `/health` once and is now idle, and the
/// task driving it, which ends when the server closes it.
async fn idle_http2_from(
    app: &TestApp,
    host: u8,
) -> (
    hyper::client::conn::http2::SendRequest<String>,
    tokio::task::JoinHandle<()>,
) {
    let stream = connect_from(app, host).await;
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = hyper::Request::get(app.url("/health"))
        .body(String::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.version(), hyper::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    (sender, driver)
}

/// Issue 43: idle HTTP/2 connections were never closed (HTTP/1.1 ones are,
/// after the header timeout).
#[tokio::test]
async fn an_idle_http2_connection_is_closed_after_the_header_timeout() {
    let app = spawn(ServerConfig {
        header_timeout: Duration::from_secs(1),
        ..ServerConfig::default()
    })
    .await;
    let (_sender, driver) = idle_http2_from(&app, 2).await;
    tokio::time::timeout(Duration::from_secs(5), driver)
        .await
        .expect("the idle connection is closed")
        .unwrap();
}

/// Issue 43: 120 idle HTTP/2 connections from 5 addresses held every place
/// under `--max-connections 120`, and new clients were refused. An idle
/// connection (HTTP/2 or a keep-alive HTTP/1.1 one) yields its place.
#[tokio::test]
async fn idle_connections_make_room_for_new_ones() {
    let app = spawn(ServerConfig {
        max_connections: 3,
        ..ServerConfig::default()
    })
    .await;
    let mut idle = Vec::new();
    for host in 2..4 {
        idle.push(idle_http2_from(&app, host).await);
    }
    let mut keep_alive = connect_from(&app, 4).await;
    health_on(&mut keep_alive).await;
    // Every place is held by an idle connection; newcomers are served.
    health_is_answered(&app, 5).await;
    health_is_answered(&app, 6).await;
    // ... and the connections idle the longest were closed for them.
    for (_, driver) in idle {
        tokio::time::timeout(Duration::from_secs(2), driver)
            .await
            .expect("closed to make room")
            .unwrap();
    }
}

#[tokio::test]
async fn when_every_place_is_taken_the_oldest_silent_connection_makes_room() {
    let app = spawn(ServerConfig {
        max_connections: 3,
        ..ServerConfig::default()
    })
    .await;
    // Slow clients from three addresses take every place and say nothing.
    let mut silent = Vec::new();
    for host in 2..5 {
        silent.push(connect_from(&app, host).await);
    }
    // A client that has begun a request is not the one closed.
    let mut busy = connect_from(&app, 5).await;
    health_on(&mut busy).await;
    // A newcomer is served, one after another.
    health_is_answered(&app, 6).await;
    health_is_answered(&app, 7).await;
    // ... and the oldest silent ones were closed for it.
    let deadline = Instant::now() + Duration::from_secs(2);
    for stream in &mut silent[..2] {
        assert!(read_until_closed(stream, deadline).await.is_some());
    }
    health_on(&mut busy).await;
}

/// Starts a device authorization from 127.0.0.`host` with these forwarding
/// headers, and returns the address the approval page shows for it.
async fn address_seen(
    app: &TestApp,
    browser: &Browser,
    host: u8,
    headers: &[(&str, &str)],
) -> String {
    let mut request = client_from(host).post(app.url("/v1/auth/device/code"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let codes: Value = request.send().await.unwrap().json().await.unwrap();
    let user_code = codes["user_code"].as_str().unwrap();
    let page = browser.enter_device_code(user_code).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    page.body
}

#[tokio::test]
async fn forwarding_headers_count_only_from_trusted_proxies() {
    let app = spawn(ServerConfig {
        trusted_proxies: vec!["127.0.0.2".parse::<Cidr>().unwrap()],
        ..ServerConfig::default()
    })
    .await;
    let (browser, _) = app.signed_in("approver@example.com", false).await;

    // The proxy appended the client it saw; the client had put in a lie.
    let page = address_seen(
        &app,
        &browser,
        2,
        &[("x-forwarded-for", "198.51.100.1, 203.0.113.9")],
    )
    .await;
    assert!(page.contains("203.0.113.9"), "{page}");
    assert!(!page.contains("198.51.100.1"));

    let page = address_seen(
        &app,
        &browser,
        2,
        &[("forwarded", "for=\"[2001:db8::7]:4711\";proto=https")],
    )
    .await;
    assert!(page.contains("2001:db8::7"), "{page}");

    // The same headers from anyone else are a spoof.
    let page = address_seen(
        &app,
        &browser,
        3,
        &[
            ("x-forwarded-for", "203.0.113.9"),
            ("forwarded", "for=192.0.2.1"),
        ],
    )
    .await;
    assert!(page.contains("127.0.0.3"), "{page}");
    assert!(!page.contains("203.0.113.9") && !page.contains("192.0.2.1"));
}

#[tokio::test]
async fn trusted_proxies_are_not_held_to_the_per_address_limit() {
    let app = spawn(ServerConfig {
        max_connections_per_address: 2,
        trusted_proxies: vec!["127.0.0.2/32".parse::<Cidr>().unwrap()],
        ..ServerConfig::default()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect_from(&app, 2).await);
    }
    let stream = held.last_mut().unwrap();
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: svc\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let got = read_until_closed(stream, Instant::now() + Duration::from_secs(2))
        .await
        .unwrap();
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

/// The value of `svc_http_requests_in_flight` (counting the request that
/// reads it).
async fn in_flight(app: &TestApp) -> String {
    let page = app.metrics().await;
    page.lines()
        .find_map(|l| l.strip_prefix("svc_http_requests_in_flight "))
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn an_aborted_request_leaves_the_in_flight_gauge() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    assert_eq!(in_flight(&app).await, "1");
    // A whole (non-streamed) reply of 100 words at 50 ms each: 5 s.
    let request = body("fake-slow", &"word ".repeat(100)).to_string();
    let mut stream = connect_from(&app, 2).await;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: svc\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{request}",
        request.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    while app.probe.started.load(Ordering::SeqCst) == 0 {
        assert!(started.elapsed() < Duration::from_secs(3), "never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(in_flight(&app).await, "2");
    drop(stream);
    while app.probe.cancelled.load(Ordering::SeqCst) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "never cancelled"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(in_flight(&app).await, "1");
}

#[tokio::test]
async fn metrics_want_the_token_when_one_is_set() {
    let app = spawn(ServerConfig {
        metrics_token: Some(MetricsToken::new("s3cret-metrics")),
        ..ServerConfig::default()
    })
    .await;
    let get = || app.client.get(app.url("/metrics"));
    for request in [
        get(),
        get().bearer_auth("wrong"),
        get().bearer_auth("s3cret"),
    ] {
        let response = request.send().await.unwrap();
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let message = crate::expect_error(
            response,
            401,
            "invalid_request_error",
            "invalid_metrics_token",
            None,
        )
        .await;
        assert!(!message.contains("s3cret"), "{message}");
    }
    let response = get().bearer_auth("s3cret-metrics").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("svc_http_connections_open")
    );
}

#[tokio::test]
async fn metrics_can_have_an_address_of_their_own() {
    // A free port for the metrics listener.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let app = spawn(ServerConfig {
        metrics_bind: Some(SocketAddr::from(([127, 0, 0, 1], port))),
        ..ServerConfig::default()
    })
    .await;
    let response = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 404, "not on the API's address");
    let metrics = format!("http://127.0.0.1:{port}");
    let response = app
        .client
        .get(format!("{metrics}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let response = app
        .client
        .get(format!("{metrics}/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404, "only /metrics there");
    health_is_answered(&app, 1).await;
}

/// A request sent by hand from 127.0.0.`host` with `content-length` claimed
/// and `sent` bytes of it sent; the whole reply, up to the server's close.
async fn refused_with_body(app: &TestApp, host: u8, claimed: usize, sent: &str) -> String {
    let mut stream = connect_from(app, host).await;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: svc\r\nauthorization: Bearer sk-svc-{}\r\n\
         content-type: application/json\r\ncontent-length: {claimed}\r\n\r\n{sent}",
        "0".repeat(40)
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let got = read_until_closed(&mut stream, Instant::now() + Duration::from_secs(10))
        .await
        .expect("the server closes a connection whose request body it did not read");
    String::from_utf8_lossy(&got).to_ascii_lowercase()
}

#[tokio::test]
async fn a_reply_that_leaves_the_body_unread_says_the_connection_closes() {
    // The `openai` SDK with retries off sent its next request on such a
    // connection (a refused key's 401 came without `connection: close`)
    // and got "server disconnected without sending a response".
    let app = spawn(ServerConfig::default()).await;
    let json = r#"{"model":"svc","messages":[{"role":"user","content":"hi"}]}"#;
    for (host, claimed, sent) in [(2, json.len(), json), (3, 100_000, json)] {
        let reply = refused_with_body(&app, host, claimed, sent).await;
        assert!(reply.starts_with("http/1.1 401"), "{reply}");
        assert!(reply.contains("\r\nconnection: close\r\n"), "{reply}");
    }

    // A request whose body was read keeps its connection.
    let key = app.create_key().await;
    let response = app.chat(&key, &body("svc", "hi")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers().get("connection"), None);
}
