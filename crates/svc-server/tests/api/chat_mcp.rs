//! `mcp` tools in Chat Completions (svc's extension, as LiteLLM takes
//! them): svc runs the calls the model makes and answers with the final
//! message, the calls listed in `mcp_calls`, whole or streamed (a chunk
//! with no choices before `[DONE]`); the calls cannot wait for approval.

use serde_json::{Value, json};
use svc_test_support::TestApp;

use crate::scripted_mcp::{seen_calls, spawn, start_scripted};

fn body(extra: Value) -> Value {
    let mut body = json!({"model": "fake-agent",
        "messages": [{"role": "user", "content": "hello"}],
        "tools": [{"type": "mcp", "server_label": "docs", "allowed_tools": ["echo"]}]});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body
}

async fn chat(app: &TestApp, key: &str, body: &Value) -> (u16, reqwest::Response) {
    let answer = app.chat(key, body).await;
    (answer.status().as_u16(), answer)
}

#[tokio::test]
async fn the_reply_uses_the_tool_s_result_and_lists_the_calls() {
    let (url, seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&url, json!([])).await;
    let key = app.create_key().await;
    let (status, answer) = chat(&app, &key, &body(json!({}))).await;
    assert_eq!(status, 200);
    let reply: Value = answer.json().await.unwrap();
    let choice = &reply["choices"][0];
    assert_eq!(
        choice["message"]["content"], "The tool said: hello",
        "{reply}"
    );
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(choice["message"]["tool_calls"], Value::Null, "{reply}");
    let calls = reply["mcp_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{reply}");
    assert_eq!(calls[0]["server_label"], "docs");
    assert_eq!(calls[0]["name"], "echo");
    assert_eq!(calls[0]["arguments"], r#"{"text":"hello"}"#);
    assert_eq!(calls[0]["output"], "hello");
    assert_eq!(seen_calls(&seen), ["tools/call echo"]);
    // The usage of both generations: the call (2 tokens) and the answer.
    assert!(reply["usage"]["completion_tokens"].as_u64().unwrap() > 2);
}

#[tokio::test]
async fn streamed_the_text_comes_and_the_calls_are_listed_before_done() {
    let (url, _seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&url, json!([])).await;
    let key = app.create_key().await;
    let (status, answer) = chat(&app, &key, &body(json!({"stream": true}))).await;
    assert_eq!(status, 200);
    let text = answer.text().await.unwrap();
    let frames: Vec<&str> = text
        .split("\n\n")
        .filter_map(|f| f.strip_prefix("data: "))
        .collect();
    assert_eq!(frames.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect();
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "The tool said: hello");
    assert!(
        chunks
            .iter()
            .all(|c| c["choices"][0]["delta"]["tool_calls"].is_null()),
        "the MCP call is not the client's: {text}"
    );
    let listed = chunks.last().unwrap();
    assert_eq!(listed["choices"], json!([]));
    assert_eq!(listed["mcp_calls"][0]["output"], "hello", "{listed}");
}

#[tokio::test]
async fn calls_cannot_wait_for_approval_and_n_is_one() {
    let (url, seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&url, json!([])).await;
    let key = app.create_key().await;
    let mut asks_approval = body(json!({}));
    asks_approval["tools"][0]["require_approval"] = json!("always");
    for (request, param) in [
        (asks_approval, "tools[0].require_approval"),
        (body(json!({"n": 2})), "n"),
    ] {
        let (status, answer) = chat(&app, &key, &request).await;
        assert_eq!(status, 400);
        let error: Value = answer.json().await.unwrap();
        assert_eq!(error["error"]["param"], param, "{error}");
    }
    assert!(seen.lock().unwrap().is_empty());
}
