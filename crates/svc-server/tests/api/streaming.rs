//! Streamed completions: the byte-exact SSE framing of spec section 4.1,
//! include_usage, errors after the stream started, and disconnects.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use svc_test_support::{SseEvent, TestApp, read_sse};

use crate::body;

async fn stream(
    app: &TestApp,
    key: &str,
    mut request: Value,
) -> (reqwest::header::HeaderMap, String) {
    request["stream"] = json!(true);
    let response = app.chat(key, &request).await;
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    (headers, response.text().await.unwrap())
}

fn chunks(events: &[SseEvent]) -> Vec<&Value> {
    events.iter().filter_map(|e| e.json.as_ref()).collect()
}

#[tokio::test]
async fn framing_is_exactly_as_the_spec_says() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let (headers, raw) = stream(&app, &key, body("svc", "hello world")).await;
    assert_eq!(headers["content-type"], "text/event-stream");
    assert!(raw.ends_with("\n\ndata: [DONE]\n\n"), "{raw:?}");
    assert!(raw.starts_with("data: {"), "{raw:?}");
    let events = read_sse(&raw);
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks = chunks(&events);
    assert_eq!(chunks.len(), events.len() - 1, "only [DONE] is not JSON");
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-"));
    for chunk in &chunks {
        assert_eq!(chunk["id"], id, "one id for the whole stream");
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "svc");
        assert!(
            chunk.get("usage").is_none(),
            "no usage unless asked: {chunk}"
        );
        assert_eq!(chunk["choices"][0]["index"], 0);
    }
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(chunks[0]["choices"][0]["finish_reason"], Value::Null);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["delta"], json!({}));
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    let middle = &chunks[1..chunks.len() - 1];
    assert!(middle.len() >= 2, "content arrives in several chunks");
    let text: String = middle
        .iter()
        .map(|c| {
            assert_eq!(c["choices"][0]["finish_reason"], Value::Null);
            c["choices"][0]["delta"]["content"].as_str().unwrap()
        })
        .collect();
    assert_eq!(text, "You said: hello world");
}

#[tokio::test]
async fn include_usage_adds_a_final_usage_chunk() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let mut request = body("svc", "count me");
    request["stream_options"] = json!({"include_usage": true});
    let (_, raw) = stream(&app, &key, request).await;
    let events = read_sse(&raw);
    let chunks = chunks(&events);
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["completion_tokens"], 4);
    assert_eq!(
        usage_chunk["usage"]["total_tokens"].as_u64().unwrap(),
        usage_chunk["usage"]["prompt_tokens"].as_u64().unwrap() + 4
    );
    for chunk in &chunks[..chunks.len() - 1] {
        assert_eq!(
            chunk["usage"],
            Value::Null,
            "usage is null before the end: {chunk}"
        );
    }
    let finish = chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    // include_usage false is the same as not asking.
    let mut request = body("svc", "count me");
    request["stream_options"] = json!({"include_usage": false});
    let (_, raw) = stream(&app, &key, request).await;
    assert!(!raw.contains("usage"), "{raw}");
}

#[tokio::test]
async fn streamed_length_reasoning_and_tool_calls() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let mut request = body("svc", "a b c d");
    request["max_tokens"] = json!(2);
    let (_, raw) = stream(&app, &key, request).await;
    let events = read_sse(&raw);
    assert_eq!(
        chunks(&events).last().unwrap()["choices"][0]["finish_reason"],
        "length"
    );

    let (_, raw) = stream(&app, &key, body("svc-thinking", "hm")).await;
    let events = read_sse(&raw);
    let deltas: Vec<&Value> = chunks(&events)
        .iter()
        .map(|c| &c["choices"][0]["delta"])
        .collect();
    let first_content = deltas
        .iter()
        .skip(1)
        .position(|d| d.get("content").is_some())
        .unwrap()
        + 1;
    let reasoning: String = deltas[1..first_content]
        .iter()
        .map(|d| d["reasoning_content"].as_str().unwrap())
        .collect();
    assert_eq!(reasoning, "Thinking it over. Done thinking.");

    let mut request = body("fake-tools", "weather");
    request["tools"] = json!([{"type": "function", "function": {"name": "get_weather"}}]);
    let (_, raw) = stream(&app, &key, request).await;
    let events = read_sse(&raw);
    let chunks = chunks(&events);
    assert_eq!(
        chunks[1]["choices"][0]["delta"]["tool_calls"],
        json!([{"index": 0, "id": "call_fake0", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":"}}])
    );
    assert_eq!(
        chunks[2]["choices"][0]["delta"]["tool_calls"],
        json!([{"index": 0, "function": {"arguments": "\"Paris\"}"}}])
    );
    assert_eq!(chunks[3]["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn an_error_after_the_stream_started_is_one_error_event_then_the_end() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let (_, raw) = stream(&app, &key, body("fake-fail", "one two three four")).await;
    let events = read_sse(&raw);
    assert_eq!(events.len(), 4, "role chunk, two words, the error: {raw}");
    let error = events[3].json.as_ref().unwrap();
    assert_eq!(error["error"]["type"], "server_error");
    assert_eq!(error["error"]["code"], "internal_error");
    assert!(error["error"]["message"].as_str().unwrap().contains("req_"));
    assert!(!raw.contains("[DONE]"));
    assert!(!raw.contains("scripted"), "internals leaked");
}

#[tokio::test]
async fn a_client_that_disconnects_stops_the_generation() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let words = "w ".repeat(100);
    let mut request = body("fake-slow", words.trim());
    request["stream"] = json!(true);
    let response = app.chat(&key, &request).await;
    let mut bytes = response.bytes_stream();
    // Read until some content arrived, then hang up.
    let mut seen = String::new();
    while !seen.contains("\"content\":\"You") {
        seen.push_str(std::str::from_utf8(&bytes.next().await.unwrap().unwrap()).unwrap());
    }
    drop(bytes);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while app.probe.cancelled.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "generation was not cancelled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sent = app.probe.words_sent.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        app.probe.words_sent.load(Ordering::SeqCst),
        sent,
        "words kept coming"
    );
    assert!(
        sent < 20,
        "the generation ran on after the disconnect ({sent} words)"
    );
}

#[tokio::test]
async fn streamed_logprobs_and_choices() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let mut request = body("svc", "hi");
    request["n"] = json!(2);
    request["logprobs"] = json!(true);
    request["top_logprobs"] = json!(1);
    request["stream_options"] = json!({"include_usage": true});
    let (_, raw) = stream(&app, &key, request).await;
    assert!(raw.ends_with("\n\ndata: [DONE]\n\n"), "{raw:?}");
    let events = read_sse(&raw);
    let chunks = chunks(&events);
    // A first chunk with the role for each choice.
    for (i, chunk) in chunks[..2].iter().enumerate() {
        assert_eq!(chunk["choices"][0]["index"], i);
        assert_eq!(
            chunk["choices"][0]["delta"],
            json!({"role": "assistant", "content": ""})
        );
    }
    let mut text = [String::new(), String::new()];
    let mut finishes = Vec::new();
    for chunk in &chunks[2..chunks.len() - 1] {
        let choice = &chunk["choices"][0];
        let i = choice["index"].as_u64().unwrap() as usize;
        if let Some(content) = choice["delta"]["content"].as_str() {
            // Each content chunk carries its own tokens' log probabilities.
            let tokens = choice["logprobs"]["content"].as_array().unwrap();
            let joined: String = tokens
                .iter()
                .map(|t| t["token"].as_str().unwrap())
                .collect();
            assert_eq!(joined, content, "{chunk}");
            assert_eq!(tokens[0]["top_logprobs"].as_array().unwrap().len(), 1);
            text[i].push_str(content);
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            assert_eq!(choice["delta"], json!({}));
            finishes.push((i, reason.to_owned()));
        }
    }
    assert_eq!(text, ["You said: hi", "You said: hi"]);
    finishes.sort();
    assert_eq!(finishes, [(0, "stop".to_owned()), (1, "stop".to_owned())]);
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["completion_tokens"], 6, "{usage}");
}

/// Behind nginx, a stream is buffered unless the response says not to
/// (LiteLLM fixed the same report this way): every dialect's stream says
/// `X-Accel-Buffering: no`, and is not cached.
#[tokio::test]
async fn every_dialects_stream_tells_proxies_not_to_buffer_it() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let user = json!([{"role": "user", "content": "hi"}]);
    let streams = [
        (
            "/v1/chat/completions",
            json!({"model": "svc", "messages": user, "stream": true}),
        ),
        (
            "/v1/completions",
            json!({"model": "svc", "prompt": "hi", "stream": true}),
        ),
        (
            "/v1/responses",
            json!({"model": "svc", "input": "hi", "stream": true}),
        ),
        (
            "/v1/messages",
            json!({"model": "svc", "max_tokens": 8, "messages": user, "stream": true}),
        ),
    ];
    for (path, body) in streams {
        let response = app
            .client
            .post(app.url(path))
            .bearer_auth(&key)
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers();
        assert_eq!(headers["content-type"], "text/event-stream", "{path}");
        assert_eq!(headers["x-accel-buffering"], "no", "{path}");
        assert_eq!(headers["cache-control"], "no-cache", "{path}");
        // And the stream itself is whole.
        assert!(!response.text().await.unwrap().is_empty(), "{path}");
    }
    // A whole reply is not a stream: nothing to say to proxies.
    let whole = app.chat(&key, &body("svc", "hi")).await;
    assert!(!whole.headers().contains_key("x-accel-buffering"));
}
