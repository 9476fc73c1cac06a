//! What an operator relies on: `/metrics` in Prometheus format, and a
//! graceful shutdown that lets streams finish within the grace period.

use std::time::Duration;

use serde_json::json;
use svc_server::ServerConfig;
use svc_test_support::{Database, TestApp};

use crate::body;

/// The value of the sample `name{labels}` in a Prometheus text page.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn methods_a_client_makes_up_add_no_metrics_rows() {
    let app = TestApp::spawn().await;
    for made_up in ["FOOA", "FOOB", "FOOC"] {
        let method = reqwest::Method::from_bytes(made_up.as_bytes()).unwrap();
        let response = app
            .client
            .request(method, app.url("/v1/models"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405);
    }
    let page = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // Before: one row a made-up method, as many as a client liked.
    assert!(!page.contains("FOO"), "{page}");
    assert_eq!(
        sample(
            &page,
            "svc_http_requests_total{route=\"/v1/models\",method=\"other\",status=\"405\"}"
        ),
        Some(3.0),
        "{page}"
    );
}

#[tokio::test]
async fn metrics_count_requests_latency_tokens_and_errors() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    assert_eq!(app.chat(&key, &body("svc", "hello")).await.status(), 200);
    let mut stream = body("svc", "hello");
    stream["stream"] = json!(true);
    let streamed = app.chat(&key, &stream).await;
    streamed.bytes().await.unwrap();
    assert_eq!(app.chat(&key, &body("nope", "x")).await.status(), 404);
    assert_eq!(
        app.chat("sk-svc-wrong", &body("svc", "x")).await.status(),
        401
    );
    // A path with an id is counted under its pattern, not its value.
    app.client
        .get(app.url("/v1/models/svc-thinking"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();

    let response = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let page = response.text().await.unwrap();
    let chat = "svc_http_requests_total{route=\"/v1/chat/completions\",method=\"POST\"";
    assert_eq!(
        sample(&page, &format!("{chat},status=\"200\"}}")),
        Some(2.0),
        "{page}"
    );
    assert_eq!(
        sample(&page, &format!("{chat},status=\"404\"}}")),
        Some(1.0)
    );
    assert_eq!(
        sample(&page, &format!("{chat},status=\"401\"}}")),
        Some(1.0)
    );
    assert!(page.contains("route=\"/v1/models/{*model}\""), "{page}");
    assert!(
        !page.contains("svc-thinking\",method"),
        "no raw paths as labels"
    );
    assert_eq!(
        sample(&page, "svc_errors_total{code=\"model_not_found\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&page, "svc_errors_total{code=\"invalid_api_key\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &page,
            "svc_time_to_first_token_seconds_count{model=\"svc\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(&page, "svc_gateway_overhead_seconds_count{model=\"svc\"}"),
        Some(2.0)
    );
    let completion = sample(&page, "svc_tokens_total{model=\"svc\",kind=\"completion\"}");
    assert!(completion.is_some_and(|n| n > 0.0), "{page}");
    let buckets = page
        .lines()
        .filter(|l| {
            l.starts_with("svc_http_request_duration_seconds_bucket{route=\"/v1/chat/completions\"")
        })
        .count();
    assert!(buckets > 10);
    assert_eq!(
        sample(&page, "svc_engine_queued_requests{model=\"svc\"}"),
        Some(0.0)
    );
}

#[tokio::test]
async fn shutdown_lets_streams_in_flight_finish() {
    let mut app = TestApp::spawn().await;
    let key = app.create_key().await;
    let mut request = body("fake-slow", "one two three four five six");
    request["stream"] = json!(true);
    let response = app.chat(&key, &request).await;
    assert_eq!(response.status(), 200);
    let reading = tokio::spawn(async move { response.text().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(60)).await;
    let took = app.shut_down().await;
    let text = reading.await.unwrap();
    assert!(
        text.ends_with("data: [DONE]\n\n"),
        "the stream finished: {text}"
    );
    assert!(text.contains("six"));
    assert!(took < Duration::from_secs(5), "{took:?}");
    // No new connections after shutdown.
    assert!(reqwest::get(app.url("/health")).await.is_err());
}

#[tokio::test]
async fn shutdown_waits_no_longer_than_the_grace_period() {
    let mut app = TestApp::spawn_with(
        Database::Sqlite,
        ServerConfig {
            shutdown_grace: Duration::from_millis(200),
            ..ServerConfig::default()
        },
    )
    .await;
    let key = app.create_key().await;
    let words = vec!["word"; 200].join(" ");
    let mut request = body("fake-slow", &words);
    request["stream"] = json!(true);
    let response = app.chat(&key, &request).await;
    assert_eq!(response.status(), 200);
    let took = app.shut_down().await;
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert!(
        took < Duration::from_secs(3),
        "a 10 s stream was not waited for: {took:?}"
    );
    drop(response);
}
