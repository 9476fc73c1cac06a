//! `mcp_servers` in Anthropic's Messages API: svc lists a server's tools,
//! the model (the scripted agent, `fake-agent`) calls one, svc runs it at
//! once and asks the model again with the result; the reply holds the
//! `mcp_tool_use` and `mcp_tool_result` blocks and the answer, whole or
//! streamed as Anthropic streams them. A registered server is named by its
//! name or its URL; an `mcp_toolset`'s configs allow and deny tools (and
//! the older `tool_configuration` too); ad-hoc URLs go through the guard,
//! and a key that may not use a server cannot name it, each refusal an
//! Anthropic 400 naming the field before anything is sent.

use serde_json::{Value, json};
use svc_core::{KeyScope, McpServerAccess};
use svc_test_support::TestApp;

use crate::scripted_mcp::{seen_calls, spawn, start_scripted};

/// A request of `fake-agent` saying `text`, with these servers and tools.
fn asking(text: &str, servers: Value, tools: Value) -> Value {
    json!({"model": "fake-agent", "max_tokens": 256,
        "messages": [{"role": "user", "content": text}],
        "mcp_servers": servers, "tools": tools})
}

/// The `mcp_toolset` of `server` offering only `echo`.
fn only_echo(server: &str) -> Value {
    json!([{"type": "mcp_toolset", "mcp_server_name": server,
        "default_config": {"enabled": false}, "configs": {"echo": {"enabled": true}}}])
}

async fn post(app: &TestApp, key: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url("/v1/messages"))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "mcp-client-2025-11-20")
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn create(app: &TestApp, key: &str, body: &Value) -> (u16, Value) {
    let answer = post(app, key, body).await;
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap())
}

/// The content blocks' types.
fn kinds(message: &Value) -> Vec<String> {
    message["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {message}"))
        .iter()
        .map(|block| block["type"].as_str().unwrap().to_owned())
        .collect()
}

/// Asserts an Anthropic 400 whose message names `param` first.
fn refused_at(status: u16, body: &Value, param: &str) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("{param}: ")),
        "{param}: {message}"
    );
}

#[tokio::test]
async fn a_registered_server_named_by_its_name_is_called_and_the_model_answers() {
    let (url, seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&url, json!([])).await;
    let key = app.create_key().await;
    let servers = json!([{"type": "url", "url": "docs", "name": "docs"}]);
    let body = asking("hello", servers.clone(), only_echo("docs"));
    let (status, message) = create(&app, &key, &body).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(kinds(&message), ["mcp_tool_use", "mcp_tool_result", "text"]);
    let used = &message["content"][0];
    assert!(
        used["id"].as_str().unwrap().starts_with("mcptoolu_"),
        "{used}"
    );
    assert_eq!(used["name"], "echo");
    assert_eq!(used["server_name"], "docs");
    assert_eq!(used["input"], json!({"text": "hello"}));
    let result = &message["content"][1];
    assert_eq!(result["tool_use_id"], used["id"]);
    assert_eq!(result["is_error"], false);
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": "hello"}])
    );
    assert_eq!(message["content"][2]["text"], "The tool said: hello");
    assert_eq!(message["stop_reason"], "end_turn");
    // Two generations, their usage summed.
    assert!(message["usage"]["output_tokens"].as_u64().unwrap() > 2);
    assert_eq!(seen_calls(&seen), ["tools/call echo"]);
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("svc_mcp_tool_calls_total{server=\"docs\",outcome=\"ok\"} 1"),
        "{metrics}"
    );

    // The reply sent back, blocks and all, continues the conversation.
    let mut next = asking("again", servers, only_echo("docs"));
    next["messages"] = json!([
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": message["content"]},
        {"role": "user", "content": "again"},
    ]);
    let (status, again) = create(&app, &key, &next).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["content"][1]["content"][0]["text"], "again");
    assert_eq!(seen_calls(&seen), ["tools/call echo", "tools/call echo"]);
}

#[tokio::test]
async fn a_registered_server_named_by_its_url_keeps_the_request_s_name() {
    let (url, seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&url, json!([])).await;
    let key = app.create_key().await;
    // The older form: no toolset, the server's own tool_configuration.
    let servers = json!([{"type": "url", "url": url, "name": "kb",
        "tool_configuration": {"enabled": true, "allowed_tools": ["echo"]}}]);
    let (status, message) = create(&app, &key, &asking("hi", servers, json!([]))).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(kinds(&message), ["mcp_tool_use", "mcp_tool_result", "text"]);
    assert_eq!(message["content"][0]["server_name"], "kb");
    assert_eq!(message["content"][2]["text"], "The tool said: hi");
    assert_eq!(seen_calls(&seen), ["tools/call echo"]);
    // Counted as the registered server it is.
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("svc_mcp_tool_calls_total{server=\"docs\",outcome=\"ok\"} 1"),
        "{metrics}"
    );

    // A registered label with another server's URL: which was meant is
    // not guessed.
    let servers = json!([{"type": "url", "url": "https://mcp.example.com/mcp", "name": "docs"}]);
    let (status, refused) = create(&app, &key, &asking("hi", servers, only_echo("docs"))).await;
    refused_at(status, &refused, "mcp_servers[0].url");
}

#[tokio::test]
async fn a_toolset_s_configs_deny_a_tool() {
    let (url, seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&url, json!([])).await;
    let key = app.create_key().await;
    let servers = json!([{"type": "url", "url": "docs", "name": "docs"}]);
    // Every tool but `echo`: the agent calls the first tool it is offered.
    let tools = json!([{"type": "mcp_toolset", "mcp_server_name": "docs",
        "configs": {"echo": {"enabled": false}}}]);
    let (status, message) = create(&app, &key, &asking("hello", servers.clone(), tools)).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(message["content"][0]["name"], "wipe", "{message}");
    assert_eq!(message["content"][1]["content"][0]["text"], "wiped");
    assert_eq!(seen_calls(&seen), ["tools/call wipe"]);

    // A toolset of no server, and a server without a toolset, are refused.
    let stray = json!([{"type": "mcp_toolset", "mcp_server_name": "docs"},
        {"type": "mcp_toolset", "mcp_server_name": "nobody"}]);
    let (status, refused) = create(&app, &key, &asking("x", servers.clone(), stray)).await;
    refused_at(status, &refused, "tools[1].mcp_server_name");
    let two = json!([{"type": "url", "url": "docs", "name": "docs"},
        {"type": "url", "url": "docs", "name": "other"}]);
    let (status, refused) = create(&app, &key, &asking("x", two, only_echo("docs"))).await;
    refused_at(status, &refused, "mcp_servers[1].name");
    assert_eq!(seen_calls(&seen), ["tools/call wipe"]);
}

#[tokio::test]
async fn streamed_the_blocks_arrive_as_anthropic_streams_them() {
    let (url, _seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&url, json!([])).await;
    let key = app.create_key().await;
    let mut body = asking(
        "hello",
        json!([{"type": "url", "url": url, "name": "docs"}]),
        only_echo("docs"),
    );
    body["stream"] = json!(true);
    let answer = post(&app, &key, &body).await;
    assert_eq!(answer.status(), 200);
    let text = answer.text().await.unwrap();
    let frames: Vec<(String, Value)> = text
        .split("\n\n")
        .filter(|f| !f.is_empty())
        .map(|frame| {
            let name = frame
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap();
            let data = frame
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap();
            (name.to_owned(), serde_json::from_str(data).unwrap())
        })
        .collect();
    for (name, data) in &frames {
        assert_eq!(data["type"], name.as_str(), "{data}");
    }
    // Deltas of one block collapsed: the order of blocks and events.
    let mut order: Vec<String> = Vec::new();
    for (name, data) in &frames {
        let step = match name.as_str() {
            "content_block_start" => {
                format!("start {} {}", data["index"], data["content_block"]["type"])
            }
            "content_block_delta" => format!("delta {} {}", data["index"], data["delta"]["type"]),
            "content_block_stop" => format!("stop {}", data["index"]),
            other => other.to_owned(),
        };
        if order.last() != Some(&step) {
            order.push(step);
        }
    }
    assert_eq!(
        order,
        [
            "message_start",
            "start 0 \"mcp_tool_use\"",
            "ping",
            "delta 0 \"input_json_delta\"",
            "stop 0",
            "start 1 \"mcp_tool_result\"",
            "stop 1",
            "start 2 \"text\"",
            "delta 2 \"text_delta\"",
            "stop 2",
            "message_delta",
            "message_stop",
        ]
    );
    let started = &frames[1].1["content_block"];
    assert_eq!(started["name"], "echo");
    assert_eq!(started["server_name"], "docs");
    assert_eq!(started["input"], json!({}));
    let input: String = frames
        .iter()
        .filter(|(n, d)| n == "content_block_delta" && d["index"] == 0)
        .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert_eq!(input, r#"{"text":"hello"}"#);
    let result = frames
        .iter()
        .find(|(_, d)| d["content_block"]["type"] == "mcp_tool_result")
        .unwrap();
    assert_eq!(result.1["content_block"]["tool_use_id"], started["id"]);
    assert_eq!(result.1["content_block"]["content"][0]["text"], "hello");
    let answer: String = frames
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "text_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(answer, "The tool said: hello");
    let delta = &frames[frames.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
}

#[tokio::test]
async fn an_ad_hoc_loopback_url_is_refused_before_anything_is_sent() {
    let (registered, _) = start_scripted("127.0.0.1").await;
    let (url, seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&registered, json!(["http://*"])).await;
    let key = app.create_key().await;
    for refused_url in [
        url.as_str(),
        "http://10.1.2.3/mcp",
        "http://169.254.169.254/mcp",
    ] {
        let servers = json!([{"type": "url", "url": refused_url, "name": "adhoc",
            "authorization_token": "user-secret"}]);
        let (status, refused) =
            create(&app, &key, &asking("hello", servers, only_echo("adhoc"))).await;
        refused_at(status, &refused, "mcp_servers[0].url");
        assert!(!refused.to_string().contains("user-secret"), "{refused}");
    }
    assert!(seen.lock().unwrap().is_empty(), "nothing reached loopback");
}

#[tokio::test]
async fn a_key_whose_list_excludes_the_server_cannot_name_it() {
    let (url, seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&url, json!([])).await;
    let narrowed = app
        .create_scoped_key(
            None,
            KeyScope {
                allowed_mcp_servers: McpServerAccess::only(vec!["wiki".into()]).unwrap(),
                ..KeyScope::default()
            },
        )
        .await;
    // By its name, and by its URL: to this key it is no registered server.
    for named in [json!("docs"), json!(url)] {
        let servers = json!([{"type": "url", "url": named, "name": "docs"}]);
        let (status, refused) = create(
            &app,
            &narrowed,
            &asking("hello", servers, only_echo("docs")),
        )
        .await;
        refused_at(status, &refused, "mcp_servers[0].url");
        assert!(!refused.to_string().contains(&url), "{refused}");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "the server was never asked"
    );
}
