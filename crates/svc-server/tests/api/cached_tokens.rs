//! Cached prompt tokens (issue 32): each dialect reports them in its own
//! field, whole and streamed, and usage records them for the usage APIs,
//! the dashboard and the metrics. `fake-cached` counts the messages before
//! the last as cached; here "a b c" (4 tokens) and "d e" (3) of a 9-token
//! prompt whose last message is "f".

use std::time::Duration;

use serde_json::{Value, json};
use svc_server::ServerConfig;
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::sse::read_sse;
use svc_test_support::{Database, TestApp};

on_both_databases!(every_dialect_reports_cached_tokens_and_usage_records_them);

const PROMPT: u64 = 9;
const CACHED: u64 = 7;

fn turns() -> Value {
    json!([
        {"role": "user", "content": "a b c"},
        {"role": "assistant", "content": "d e"},
        {"role": "user", "content": "f"}
    ])
}

async fn post(app: &TestApp, path: &str, key: &str, body: &Value) -> reqwest::Response {
    let response = app
        .client
        .post(app.url(path))
        .bearer_auth(key)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response
}

/// The `data:` objects of a streamed reply (chat's frames are `data:`
/// only; the Responses and Messages ones are named with `event:` first).
async fn events(response: reqwest::Response) -> Vec<Value> {
    let body = response.text().await.unwrap();
    if !body.starts_with("event: ") {
        return read_sse(&body).into_iter().filter_map(|e| e.json).collect();
    }
    body.split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

async fn every_dialect_reports_cached_tokens_and_usage_records_them(db: Database) {
    let app = TestApp::spawn_with(db, ServerConfig::default()).await;
    let key = app.create_key().await;

    // Chat, whole and streamed (the usage chunk), and a model without a
    // prefix cache (0).
    let chat = json!({"model": "fake-cached", "messages": turns()});
    let whole: Value = post(&app, "/v1/chat/completions", &key, &chat)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(whole["usage"]["prompt_tokens"], PROMPT, "{whole}");
    assert_eq!(
        whole["usage"]["prompt_tokens_details"],
        json!({"cached_tokens": CACHED}),
        "{whole}"
    );
    let mut streamed = chat.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let chunks = events(post(&app, "/v1/chat/completions", &key, &streamed).await).await;
    let usage = chunks
        .iter()
        .find_map(|c| c.get("usage").filter(|u| !u.is_null()))
        .unwrap_or_else(|| panic!("no usage chunk: {chunks:?}"));
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], CACHED);
    let mut plain = chat.clone();
    plain["model"] = json!("svc");
    let plain: Value = post(&app, "/v1/chat/completions", &key, &plain)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(plain["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

    // Responses: `input_tokens_details.cached_tokens`, whole and streamed.
    let response = json!({"model": "fake-cached", "input": turns(), "store": false});
    let whole: Value = post(&app, "/v1/responses", &key, &response)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(whole["usage"]["input_tokens"], PROMPT, "{whole}");
    assert_eq!(
        whole["usage"]["input_tokens_details"]["cached_tokens"], CACHED,
        "{whole}"
    );
    let mut streamed = response.clone();
    streamed["stream"] = json!(true);
    let completed = events(post(&app, "/v1/responses", &key, &streamed).await)
        .await
        .into_iter()
        .find(|e| e["type"] == "response.completed")
        .unwrap();
    assert_eq!(
        completed["response"]["usage"]["input_tokens_details"]["cached_tokens"],
        CACHED
    );

    // Messages: as Anthropic counts, `input_tokens` leaves the cache reads
    // out; whole and streamed (`message_delta`).
    let message = json!({"model": "fake-cached", "max_tokens": 16, "messages": turns()});
    let whole: Value = post(&app, "/v1/messages", &key, &message)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            &whole["usage"]["input_tokens"],
            &whole["usage"]["cache_read_input_tokens"],
            &whole["usage"]["cache_creation_input_tokens"]
        ),
        (&json!(PROMPT - CACHED), &json!(CACHED), &json!(0)),
        "{whole}"
    );
    let mut streamed = message.clone();
    streamed["stream"] = json!(true);
    let delta = events(post(&app, "/v1/messages", &key, &streamed).await)
        .await
        .into_iter()
        .find(|e| e["type"] == "message_delta")
        .unwrap();
    assert_eq!(delta["usage"]["cache_read_input_tokens"], CACHED, "{delta}");
    assert_eq!(delta["usage"]["input_tokens"], PROMPT - CACHED, "{delta}");

    // Usage: 7 requests, 6 of them with 7 cached tokens each.
    let admin = app.create_admin_key().await;
    let get = |path: String| {
        let (app, admin) = (&app, &admin);
        async move {
            let response = app
                .client
                .get(app.url(&path))
                .bearer_auth(admin)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{path}");
            response.json::<Value>().await.unwrap()
        }
    };
    // Written once a second.
    let mut day = Value::Null;
    for _ in 0..50 {
        day = get("/v1/admin/usage".into()).await["data"][0].clone();
        if day["requests"] == 7 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(day["requests"], 7, "{day}");
    assert_eq!(day["cached_tokens"], 6 * CACHED, "{day}");
    let today = svc_core::now() - svc_core::now().rem_euclid(86_400);
    let page = get(format!(
        "/v1/organization/usage/completions?start_time={today}&group_by[]=model"
    ))
    .await;
    let results = page["data"][0]["results"].as_array().unwrap();
    let of = |model: &str| {
        results
            .iter()
            .find(|r| r["model"] == model)
            .unwrap_or_else(|| panic!("no {model} in {page}"))
            .clone()
    };
    assert_eq!(of("fake-cached")["input_cached_tokens"], 6 * CACHED);
    assert_eq!(of("fake-cached")["input_tokens"], 6 * PROMPT);
    assert_eq!(of("svc")["input_cached_tokens"], 0);

    // The metrics count them apart from the prompt's tokens.
    let metrics = app.metrics().await;
    let line = "svc_tokens_total{model=\"fake-cached\",kind=\"cached_prompt\"} 42";
    assert!(metrics.lines().any(|l| l == line), "{metrics}");

    // The dashboard's usage page shows them beside the prompt's tokens.
    let (browser, _) = app.signed_in("alice@example.com", true).await;
    let page = browser.get("/dashboard/usage").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Of them cached"), "{}", page.body);
    assert!(
        page.body.contains(&format!(
            "<td class=\"num\">{}</td><td class=\"num\">{}</td>",
            6 * PROMPT + PROMPT,
            6 * CACHED
        )),
        "{}",
        page.body
    );
}
