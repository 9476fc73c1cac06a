//! Fallbacks across models (issue 34): a model that fails before its first
//! event is answered by the next in its `fallbacks`, whole and streamed, in
//! every dialect, and the reply says which model served it (`model`,
//! `x-svc-served-model`), as do usage and the request log. A failure after
//! the first event ends the stream with the dialect's error and switches
//! nothing. A prompt past the context falls back only when the model says
//! so; a fallback the key may not use is skipped.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use svc_core::{EngineError, KeyScope, ModelAccess};
use svc_server::{Fallbacks, ModelRegistry, ModelRoute, ServerConfig};
use svc_test_support::{Database, FakeEngine, Probe, Script, TestApp, fake_models};

/// The test models and these, each falling back to `svc`:
/// `down` refuses before any event (an upstream whose endpoints all
/// failed); `broken-start` answers, then fails before its first event;
/// `fails-midway` fails after two words; `tiny-falls` and `tiny-stays`
/// refuse every prompt as too long, and only the first falls back then.
async fn app() -> (TestApp, Arc<Probe>) {
    app_with(ServerConfig::default()).await
}

async fn app_with(config: ServerConfig) -> (TestApp, Arc<Probe>) {
    let probe = Arc::new(Probe::default());
    let mut routes: Vec<ModelRoute> = fake_models(probe.clone()).iter().cloned().collect();
    let falling = |id: &str, script: Script, on_context_length: bool| ModelRoute {
        id: id.into(),
        engine: Arc::new(FakeEngine::new(script, probe.clone())),
        reasoning: false,
        created: 0,
        owned_by: "svc".into(),
        default_system_prompt: None,
        fallbacks: Fallbacks {
            models: vec!["svc-thinking".into(), "svc".into()],
            on_context_length,
        },
    };
    routes.extend([
        falling(
            "down",
            Script::Refuse(EngineError::BadGateway("every endpoint failed".into())),
            false,
        ),
        falling("broken-start", Script::FailAfter { words: 0 }, false),
        falling("fails-midway", Script::FailAfter { words: 2 }, false),
        falling("tiny-falls", Script::ContextTooSmall, true),
        falling("tiny-stays", Script::ContextTooSmall, false),
    ]);
    let models = ModelRegistry::new(routes);
    models.check_fallbacks().unwrap();
    let app = TestApp::spawn_models(Database::Sqlite, config, models, probe.clone()).await;
    (app, probe)
}

/// The three dialects: their path and a request for `model` saying `text`.
const DIALECTS: [&str; 3] = ["/v1/chat/completions", "/v1/responses", "/v1/messages"];

fn request(path: &str, model: &str, text: &str, stream: bool) -> Value {
    match path {
        "/v1/responses" => json!({"model": model, "input": text, "store": false, "stream": stream}),
        "/v1/messages" => json!({"model": model, "max_tokens": 50, "stream": stream,
            "messages": [{"role": "user", "content": text}]}),
        _ => json!({"model": model, "stream": stream,
            "messages": [{"role": "user", "content": text}]}),
    }
}

async fn post(app: &TestApp, key: &str, path: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url(path))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap()
}

fn served_header(response: &reqwest::Response) -> String {
    response.headers()["x-svc-served-model"]
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_model_that_fails_before_answering_is_served_by_its_fallback() {
    let (app, _) = app().await;
    // The key may not use svc-thinking, the first fallback: it is skipped.
    let key = app
        .create_scoped_key(
            None,
            KeyScope {
                allowed_models: ModelAccess(Some(vec![
                    "down".into(),
                    "broken-start".into(),
                    "svc".into(),
                ])),
                ..KeyScope::default()
            },
        )
        .await;
    for model in ["down", "broken-start"] {
        for path in DIALECTS {
            // Whole: the reply names the model that served it.
            let response = post(
                &app,
                &key,
                path,
                &request(path, model, "hello there", false),
            )
            .await;
            assert_eq!(response.status(), 200, "{model} {path}");
            assert_eq!(served_header(&response), "svc", "{model} {path}");
            let reply: Value = response.json().await.unwrap();
            assert_eq!(reply["model"], "svc", "{model} {path}: {reply}");
            assert!(
                reply.to_string().contains("You said: hello there"),
                "{reply}"
            );
            // Streamed: the same, in every event that names a model.
            let response = post(&app, &key, path, &request(path, model, "hello there", true)).await;
            assert_eq!(response.status(), 200, "{model} {path}");
            assert_eq!(served_header(&response), "svc", "{model} {path}");
            let text = response.text().await.unwrap();
            assert!(text.contains("hello"), "{model} {path}: {text}");
            assert!(
                text.contains(r#""model":"svc""#)
                    && !text.contains(&format!(r#""model":"{model}""#)),
                "{model} {path}: {text}"
            );
            assert!(!text.contains(r#""error":{"#), "{model} {path}: {text}");
        }
    }
}

#[tokio::test]
async fn a_failure_after_the_first_event_ends_the_stream_and_switches_nothing() {
    let (app, probe) = app().await;
    let key = app.create_key().await;
    for path in DIALECTS {
        let started = probe.started.load(Ordering::SeqCst);
        let response = post(
            &app,
            &key,
            path,
            &request(path, "fails-midway", "one two three four", true),
        )
        .await;
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(served_header(&response), "fails-midway");
        let text = response.text().await.unwrap();
        assert!(
            text.contains(r#""error":{"#),
            "{path}: the dialect's error event: {text}"
        );
        assert!(!text.contains(r#""model":"svc""#), "{path}: {text}");
        assert_eq!(
            probe.started.load(Ordering::SeqCst),
            started + 1,
            "{path}: no other model was asked"
        );
        // Whole: the failure is the reply's.
        let response = post(
            &app,
            &key,
            path,
            &request(path, "fails-midway", "one two three four", false),
        )
        .await;
        assert_eq!(response.status(), 500, "{path}");
        assert_eq!(probe.started.load(Ordering::SeqCst), started + 2, "{path}");
    }
}

#[tokio::test]
async fn a_prompt_past_the_context_falls_back_only_when_the_model_says_so() {
    let (app, _) = app().await;
    let key = app.create_key().await;
    let response = app
        .chat(&key, &crate::body("tiny-falls", "a long prompt"))
        .await;
    assert_eq!(response.status(), 200);
    // svc-thinking, the first fallback, serves it.
    assert_eq!(served_header(&response), "svc-thinking");
    let reply: Value = response.json().await.unwrap();
    assert_eq!(reply["model"], "svc-thinking");

    let response = app
        .chat(&key, &crate::body("tiny-stays", "a long prompt"))
        .await;
    crate::expect_error(
        response,
        400,
        "invalid_request_error",
        "context_length_exceeded",
        Some("messages"),
    )
    .await;
}

#[tokio::test]
async fn a_fallback_the_key_may_not_use_is_never_asked() {
    let (app, probe) = app().await;
    let key = app
        .create_scoped_key(
            None,
            KeyScope {
                allowed_models: ModelAccess(Some(vec!["down".into()])),
                ..KeyScope::default()
            },
        )
        .await;
    let started = probe.started.load(Ordering::SeqCst);
    let response = app.chat(&key, &crate::body("down", "hi")).await;
    assert_eq!(response.status(), 502);
    assert_eq!(probe.started.load(Ordering::SeqCst), started);
}

/// Issue 43: a key allowed only `down` was refused the fallback's answer
/// when it asked, then given another key's, made by `svc-thinking`, from
/// the response cache.
#[tokio::test]
async fn a_cached_reply_of_a_fallback_is_not_served_to_a_key_that_may_not_use_it() {
    let (app, _) = app_with(ServerConfig {
        response_cache_ttl: Duration::from_secs(3600),
        ..ServerConfig::default()
    })
    .await;
    let open = app.create_key().await;
    let only_down = app
        .create_scoped_key(
            None,
            KeyScope {
                allowed_models: ModelAccess(Some(vec!["down".into()])),
                ..KeyScope::default()
            },
        )
        .await;
    let mut body = crate::body("down", "cache me");
    body["temperature"] = json!(0);
    let response = app.chat(&open, &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-svc-served-model"], "svc-thinking");
    // Kept once its last byte went out: the open key finds it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let response = app
            .client
            .post(app.url("/v1/chat/completions"))
            .bearer_auth(&open)
            .header("cache-control", "only-if-cached")
            .json(&body)
            .send()
            .await
            .unwrap();
        if response.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never cached");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let response = app.chat(&only_down, &body).await;
    let status = response.status();
    let cache = response.headers().get("x-svc-cache").cloned();
    let served = response.headers().get("x-svc-served-model").cloned();
    assert_eq!(status, 502, "{:?}", response.text().await);
    assert_ne!(cache.as_ref().map(|v| v.as_bytes()), Some(&b"hit"[..]));
    assert_eq!(served, None);
}

#[tokio::test]
async fn usage_and_the_request_log_count_the_model_that_served() {
    let (app, _) = app().await;
    let key = app.create_key().await;
    let admin = app.create_admin_key().await;
    let response = app.chat(&key, &crate::body("down", "count me")).await;
    assert_eq!(response.status(), 200);
    let deadline = Instant::now() + Duration::from_secs(20);
    let row = loop {
        let list: Value = app
            .client
            .get(app.url("/v1/organization/request_logs"))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let found = list["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["endpoint"] == "POST /v1/chat/completions")
            .cloned();
        if let Some(row) = found {
            break row;
        }
        assert!(Instant::now() < deadline, "no row: {list}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // svc-thinking, the first fallback, served it.
    assert_eq!(row["model"], "svc-thinking", "{row}");
    assert!(row["completion_tokens"].as_i64().unwrap() > 0, "{row}");
    let metrics = app.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("svc_tokens_total") && l.contains(r#"model="svc-thinking""#)),
        "{metrics}"
    );
    assert!(
        !metrics
            .lines()
            .any(|l| l.starts_with("svc_tokens_total") && l.contains(r#"model="down""#)),
        "{metrics}"
    );
}
