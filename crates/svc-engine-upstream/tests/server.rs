//! End to end: the real svc server with a model routed to an upstream
//! engine in front of a fake upstream. svc's framing (ids, `model`, role
//! chunk, usage chunk, `[DONE]`) must be svc's own, the text the upstream's.

#![expect(
    clippy::unwrap_used,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use svc_core::Engine;
use svc_engine_upstream::{EndpointConfig, UpstreamEngine, UpstreamOptions};
use svc_server::{ModelRegistry, ModelRoute, ServerConfig};
use svc_test_support::{Behavior, Database, FakeUpstream, Probe, Reply, TestApp, read_sse};

async fn app_in_front_of(fake: &FakeUpstream) -> TestApp {
    let options = UpstreamOptions {
        first_byte_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(2),
        ..UpstreamOptions::default()
    };
    let engine = UpstreamEngine::new(
        vec![EndpointConfig::new(&fake.base_url, "their-model")],
        options,
    )
    .unwrap();
    let engine: Arc<dyn Engine> = Arc::new(engine);
    let route = |id: &str, reasoning| ModelRoute {
        id: id.into(),
        engine: engine.clone(),
        reasoning,
        created: 1_700_000_000,
        owned_by: "svc".into(),
        default_system_prompt: None,
        fallbacks: svc_server::Fallbacks::default(),
    };
    let models = ModelRegistry::new(vec![route("up", false), route("up-thinking", true)]);
    TestApp::spawn_models(
        Database::Sqlite,
        ServerConfig::default(),
        models,
        Arc::new(Probe::default()),
    )
    .await
}

fn chunks(raw: &str) -> Vec<Value> {
    let events = read_sse(raw);
    assert_eq!(events.last().unwrap().data, "[DONE]");
    events[..events.len() - 1]
        .iter()
        .map(|e| e.json.clone().unwrap())
        .collect()
}

#[tokio::test]
async fn a_streamed_reply_has_svc_framing_and_the_upstream_text() {
    let fake = FakeUpstream::start().await;
    let app = app_in_front_of(&fake).await;
    let key = app.create_key().await;
    let response = app
        .chat(
            &key,
            &json!({"model": "up", "stream": true, "stream_options": {"include_usage": true},
                    "messages": [{"role": "user", "content": "hello from svc"}]}),
        )
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let chunks = chunks(&response.text().await.unwrap());
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-") && id != "chatcmpl-fake", "{id}");
    for chunk in &chunks {
        assert_eq!(chunk["id"], id);
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "up", "svc's model id, not the upstream's");
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Echo: hello from svc");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    // The upstream's usage: 3 prompt words, 4 pieces, none cached.
    assert_eq!(
        chunks.last().unwrap()["usage"],
        json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 0}})
    );
    assert_eq!(fake.last_request().unwrap()["model"], "their-model");
    // `/metrics` says how the request was routed: by load, as a short
    // prompt with one endpoint has no prefix to follow.
    let metrics = app.metrics().await;
    let routed = |route: &str| {
        format!(
            "svc_upstream_routed_total{{model=\"up\",endpoint=\"{}\",route=\"{route}\"}} ",
            fake.base_url
        )
    };
    assert!(metrics.contains(&(routed("load") + "1\n")), "{metrics}");
    assert!(metrics.contains(&(routed("prefix") + "0\n")), "{metrics}");
}

#[tokio::test]
async fn whole_replies_reasoning_and_upstream_failures() {
    let fake = FakeUpstream::start().await;
    fake.set_reply(Reply {
        reasoning: vec!["Thinking.".into()],
        ..Reply::default()
    });
    let app = app_in_front_of(&fake).await;
    let key = app.create_key().await;
    let ask =
        |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});

    let body: Value = app
        .chat(&key, &ask("up-thinking"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "up-thinking");
    assert_eq!(body["choices"][0]["message"]["content"], "Echo: hi");
    assert_eq!(
        body["choices"][0]["message"]["reasoning_content"],
        "Thinking."
    );
    let body: Value = app.chat(&key, &ask("up")).await.json().await.unwrap();
    assert!(
        body["choices"][0]["message"]
            .get("reasoning_content")
            .is_none()
    );

    // No endpoint can serve: an OpenAI-shaped 5xx.
    fake.set_behavior(Behavior::Status(500, "secret internals".into()));
    let response = app.chat(&key, &ask("up")).await;
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "server_error");
    assert_eq!(body["error"]["code"], "bad_gateway");
    assert!(!body.to_string().contains("secret internals"), "{body}");

    // Failing after the first byte: the stream ends with an error event.
    fake.set_behavior(Behavior::DropAfter(2));
    let mut request = ask("up");
    request["stream"] = json!(true);
    let response = app.chat(&key, &request).await;
    assert_eq!(response.status(), 200);
    let raw = response.text().await.unwrap();
    let events = read_sse(&raw);
    let last = events.last().unwrap().json.clone().unwrap();
    assert_eq!(last["error"]["type"], "server_error", "{raw}");
    assert!(!raw.contains("[DONE]"));
}

const PNG: &str = "data:image/png;base64,iVBORw0KGgo=";

/// The user content the fake upstream last received.
fn sent_user_content(fake: &FakeUpstream) -> Value {
    let sent = fake.last_request().unwrap();
    sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .unwrap()["content"]
        .clone()
}

#[tokio::test]
async fn images_of_every_dialect_reach_the_upstream_as_openai_image_parts() {
    let fake = FakeUpstream::start().await;
    let app = app_in_front_of(&fake).await;
    let key = app.create_key().await;
    let post = |path: &'static str, body: Value| {
        app.client
            .post(app.url(path))
            .bearer_auth(&key)
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
    };
    let expected = json!([
        {"type": "text", "text": "what is"},
        {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}},
    ]);

    // Chat: the parts pass through as they came.
    let chat: Value = post(
        "/v1/chat/completions",
        json!({"model": "up", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is"},
            {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}}]}]}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(
        chat["choices"][0]["message"]["content"],
        format!("Echo: what is [image {PNG}]")
    );
    assert_eq!(sent_user_content(&fake), expected);

    // Responses: `input_image` becomes the same part.
    let response = post(
        "/v1/responses",
        json!({"model": "up", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "what is"},
            {"type": "input_image", "image_url": PNG, "detail": "low"}]}]}),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(sent_user_content(&fake), expected);

    // Messages: a base64 source becomes a data: URI, a url source its URL.
    let message = post(
        "/v1/messages",
        json!({"model": "up", "max_tokens": 32, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/b.jpg"}}]}]}),
    )
    .await
    .unwrap();
    assert_eq!(message.status(), 200);
    assert_eq!(
        sent_user_content(&fake),
        json!([
            {"type": "text", "text": "what is"},
            {"type": "image_url", "image_url": {"url": PNG}},
            {"type": "image_url", "image_url": {"url": "https://example.com/b.jpg"}},
        ])
    );
    // svc fetched nothing itself: the upstream got the URL as it was.
    assert_eq!(fake.chat_requests(), 3);
}

#[tokio::test]
async fn a_text_completion_with_a_suffix_is_the_upstreams_fill_in_the_middle() {
    let fake = FakeUpstream::start().await;
    let app = app_in_front_of(&fake).await;
    let key = app.create_key().await;
    let body: Value = app
        .client
        .post(app.url("/v1/completions"))
        .bearer_auth(&key)
        .json(&json!({"model": "up", "prompt": "def f(", "suffix": "):", "max_tokens": 8}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["choices"][0]["text"], "Fill: def f(|):");
    assert_eq!(body["model"], "up");
    let sent = fake.last_request().unwrap();
    assert_eq!(sent["model"], "their-model");
    assert_eq!(sent["max_tokens"], 8);
    assert_eq!(fake.completions_requests(), 1);
}

// Issue 32: an upstream's own count of cached prompt tokens reaches the
// client in each dialect's field (the fake counts the words of the
// messages before the last as cached, as vLLM's prefix cache would).
#[tokio::test]
async fn an_upstreams_cached_tokens_are_passed_on_in_every_dialect() {
    let fake = FakeUpstream::start().await;
    let app = app_in_front_of(&fake).await;
    let key = app.create_key().await;
    let turns = json!([
        {"role": "user", "content": "one two three"},
        {"role": "assistant", "content": "four five"},
        {"role": "user", "content": "six"}
    ]);
    let chat: Value = app
        .chat(&key, &json!({"model": "up", "messages": turns}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(chat["usage"]["prompt_tokens"], 6, "{chat}");
    assert_eq!(
        chat["usage"]["prompt_tokens_details"]["cached_tokens"], 5,
        "{chat}"
    );
    let message: Value = app
        .client
        .post(app.url("/v1/messages"))
        .bearer_auth(&key)
        .json(&json!({"model": "up", "max_tokens": 16, "messages": turns}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(message["usage"]["cache_read_input_tokens"], 5, "{message}");
    assert_eq!(message["usage"]["input_tokens"], 1, "{message}");
}

// Issue 61: a rerank reply is read whole; past its limit the client gets a
// 502 that names the limit (not the upstream's words), and an upstream
// that reports 0 tokens used is charged svc's estimate.
#[tokio::test]
async fn rerank_replies_are_bounded_and_charged_at_least_the_estimate() {
    let fake = FakeUpstream::start().await;
    let app = app_in_front_of(&fake).await;
    let key = app.create_key().await;
    let query = "Where do pandas live?";
    let documents = ["Pandas live in the mountains of China.", "Stocks fell."];
    let rerank = || {
        app.client
            .post(app.url("/v1/rerank"))
            .bearer_auth(&key)
            .json(&json!({"model": "up", "query": query, "documents": documents}))
            .send()
    };

    fake.push_behavior(Behavior::Padded {
        status: 200,
        bytes: 48 << 20,
    });
    let response = rerank().await.unwrap();
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "bad_gateway", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("passed the 16 MiB limit for rerank replies (rerank_reply_limit)"),
        "{message}"
    );
    assert!(!message.contains("xxx"), "{message}");
    assert!(fake.padding_sent() < 48 << 20);

    fake.push_behavior(Behavior::ReportTokens(0));
    let response = rerank().await.unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    // A token per 4 bytes of the query for each document, and of each
    // document: (6 + 10) + (6 + 3).
    let estimate: usize = documents
        .iter()
        .map(|d| query.len().div_ceil(4) + d.len().div_ceil(4))
        .sum();
    assert_eq!(estimate, 25);
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": estimate, "total_tokens": estimate}),
        "{body}"
    );
}
