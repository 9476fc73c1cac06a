//! `mcp` tools in the Responses API: svc lists a server's tools, the model
//! (the scripted agent, `fake-agent`) calls one, svc runs it and asks the
//! model again with the result, on a scripted MCP server on loopback
//! registered in the configuration; the approval round trip over
//! `previous_response_id` (a denied call never runs, the tool list is not
//! fetched again); `allowed_tools`; the streamed events in order; the
//! bound on calls; ad-hoc `server_url`s refused before anything is sent;
//! headers never repeated. The scripted server is [`crate::scripted_mcp`]'s.

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};
use svc_core::{KeyScope, McpServerAccess, ModelAccess, ProjectRecord, ProjectStore};
use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{Database, TestApp};

use crate::scripted_mcp::{seen_calls, spawn, spawn_mcp, spawn_on, start_scripted};

async fn create(app: &TestApp, key: &str, body: Value) -> (u16, Value) {
    let answer = app
        .client
        .post(app.url("/v1/responses"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap())
}

/// The output items' types.
fn kinds(response: &Value) -> Vec<String> {
    response["output"]
        .as_array()
        .unwrap_or_else(|| panic!("no output: {response}"))
        .iter()
        .map(|item| item["type"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn the_model_calls_a_registered_server_s_tool_and_answers_with_its_result() {
    let (url, seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&url, json!([])).await;
    let key = app.create_key().await;
    let tools = json!([{"type": "mcp", "server_label": "docs", "require_approval": "never",
        "allowed_tools": ["echo", "wipe"]}]);
    let (status, response) = create(
        &app,
        &key,
        json!({"model": "fake-agent", "input": "hello", "tools": tools}),
    )
    .await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(kinds(&response), ["mcp_list_tools", "mcp_call", "message"]);
    let listed = &response["output"][0];
    assert_eq!(listed["server_label"], "docs");
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "wipe"], "`huge` is not allowed");
    assert_eq!(
        listed["tools"][0]["input_schema"]["properties"]["text"]["type"],
        "string"
    );
    let call = &response["output"][1];
    assert_eq!(call["name"], "echo");
    assert_eq!(call["server_label"], "docs");
    assert_eq!(call["arguments"], r#"{"text":"hello"}"#);
    assert_eq!(call["output"], "hello");
    assert_eq!(call["error"], Value::Null);
    assert_eq!(call["status"], "completed");
    assert_eq!(
        response["output"][2]["content"][0]["text"],
        "The tool said: hello"
    );
    assert_eq!(response["status"], "completed");
    // Two generations: the call, then the answer.
    let usage = &response["usage"];
    assert!(usage["output_tokens"].as_u64().unwrap() > 2, "{usage}");
    assert_eq!(seen_calls(&seen), ["tools/call echo"]);
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("svc_mcp_tool_calls_total{server=\"docs\",outcome=\"ok\"} 1"),
        "{metrics}"
    );

    // A conversation continued: its list is reused, not fetched again.
    let listed_before = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|m| *m == "tools/list")
        .count();
    let (status, next) = create(
        &app,
        &key,
        json!({"model": "fake-agent", "input": "again", "tools": tools,
               "previous_response_id": response["id"]}),
    )
    .await;
    assert_eq!(status, 200, "{next}");
    assert_eq!(kinds(&next), ["mcp_call", "message"]);
    assert_eq!(next["output"][0]["output"], "again");
    let listed_after = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|m| *m == "tools/list")
        .count();
    assert_eq!(listed_before, listed_after, "the list was reused");
}

#[tokio::test]
async fn a_call_waits_for_approval_and_a_denied_one_never_runs() {
    let (url, seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&url, json!([])).await;
    let key = app.create_key().await;
    let tools = json!([{"type": "mcp", "server_label": "docs", "require_approval": "always"}]);
    let ask = |previous: Option<&Value>, input: Value| {
        let mut body = json!({"model": "fake-agent", "input": input, "tools": tools});
        if let Some(previous) = previous {
            body["previous_response_id"] = previous["id"].clone();
        }
        body
    };
    let (status, asked) = create(&app, &key, ask(None, json!("hello"))).await;
    assert_eq!(status, 200, "{asked}");
    assert_eq!(kinds(&asked), ["mcp_list_tools", "mcp_approval_request"]);
    let request = &asked["output"][1];
    assert_eq!(request["name"], "echo");
    assert_eq!(request["arguments"], r#"{"text":"hello"}"#);
    assert!(seen_calls(&seen).is_empty(), "nothing ran before approval");

    // Denied: the call never runs (the model asks again).
    let denied = json!([{"type": "mcp_approval_response", "approve": false,
        "approval_request_id": request["id"]}]);
    let (status, after_denial) = create(&app, &key, ask(Some(&asked), denied)).await;
    assert_eq!(status, 200, "{after_denial}");
    assert!(!kinds(&after_denial).contains(&"mcp_call".to_owned()));
    assert!(seen_calls(&seen).is_empty(), "a denied call never runs");

    // Approved: it runs, and the model answers with its result.
    let approved = json!([{"type": "mcp_approval_response", "approve": true,
        "approval_request_id": request["id"]}]);
    let (status, answered) = create(&app, &key, ask(Some(&asked), approved.clone())).await;
    assert_eq!(status, 200, "{answered}");
    assert_eq!(kinds(&answered), ["mcp_call", "message"]);
    assert_eq!(answered["output"][0]["approval_request_id"], request["id"]);
    assert_eq!(answered["output"][0]["output"], "hello");
    assert_eq!(
        answered["output"][1]["content"][0]["text"],
        "The tool said: hello"
    );
    assert_eq!(seen_calls(&seen), ["tools/call echo"]);

    // Answered once: the same approval again, after it, is refused.
    let (status, again) = create(&app, &key, ask(Some(&answered), approved)).await;
    assert_eq!(status, 400, "{again}");
    assert_eq!(again["error"]["param"], "input[0].approval_request_id");
    // An approval of nothing is refused, naming it.
    let unknown = json!([{"type": "mcp_approval_response", "approve": true,
        "approval_request_id": "mcpr_nope"}]);
    let (status, refused) = create(&app, &key, ask(Some(&asked), unknown)).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "input[0].approval_request_id");
    assert_eq!(seen_calls(&seen), ["tools/call echo"]);
}

#[tokio::test]
async fn streamed_the_mcp_events_arrive_in_order() {
    let (url, _seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&url, json!([])).await;
    let key = app.create_key().await;
    let body = json!({"model": "fake-agent", "input": "hello", "stream": true,
        "tools": [{"type": "mcp", "server_label": "docs", "require_approval": "never",
                   "allowed_tools": {"read_only": true, "tool_names": ["echo"]}}]});
    let answer = app
        .client
        .post(app.url("/v1/responses"))
        .bearer_auth(&key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let text = answer.text().await.unwrap();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], i, "{event}");
    }
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let mcp: Vec<&str> = types
        .iter()
        .copied()
        .take_while(|t| !t.starts_with("response.content_part"))
        .collect();
    assert_eq!(
        mcp,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.mcp_list_tools.in_progress",
            "response.mcp_list_tools.completed",
            "response.output_item.done",
            "response.output_item.added",
            "response.mcp_call.in_progress",
            "response.mcp_call_arguments.delta",
            "response.mcp_call_arguments.delta",
            "response.mcp_call_arguments.done",
            "response.mcp_call.completed",
            "response.output_item.done",
            "response.output_item.added",
        ]
    );
    assert_eq!(types.last(), Some(&"response.completed"));
    let done = events.last().unwrap();
    assert_eq!(
        kinds(&done["response"]),
        ["mcp_list_tools", "mcp_call", "message"]
    );
    let call_done = &events[12];
    assert_eq!(call_done["item"]["output"], "hello");
    assert_eq!(call_done["output_index"], 1);
}

#[tokio::test]
async fn a_model_that_calls_tools_forever_stops_at_max_tool_calls() {
    let (url, seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&url, json!([])).await;
    let key = app.create_key().await;
    // `fake-tools` calls the first tool whatever it was told.
    let body = json!({"model": "fake-tools", "input": "hello", "max_tool_calls": 3,
        "tools": [{"type": "mcp", "server_label": "docs", "require_approval": "never"}]});
    let (status, response) = create(&app, &key, body).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["status"], "incomplete");
    assert_eq!(response["incomplete_details"]["reason"], "max_tool_calls");
    let calls: Vec<&Value> = response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "mcp_call")
        .collect();
    assert_eq!(calls.len(), 4, "{response}");
    assert_eq!(calls[3]["status"], "incomplete");
    assert!(
        calls[3]["error"]
            .as_str()
            .unwrap()
            .contains("max_tool_calls")
    );
    assert_eq!(seen_calls(&seen).len(), 3, "the fourth never ran");
    let (status, refused) = create(
        &app,
        &key,
        json!({"model": "fake-tools", "input": "x", "max_tool_calls": 21}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(refused["error"]["param"], "max_tool_calls");
}

#[tokio::test]
async fn a_huge_result_is_the_call_s_error_and_the_response_goes_on() {
    let (url, _seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&url, json!([])).await;
    let key = app.create_key().await;
    let body = json!({"model": "fake-agent", "input": "hello",
        "tools": [{"type": "mcp", "server_label": "docs", "require_approval": "never",
                   "allowed_tools": ["huge"]}]});
    let (status, response) = create(&app, &key, body).await;
    assert_eq!(status, 200, "{response}");
    let call = &response["output"][1];
    assert_eq!(call["status"], "failed", "{call}");
    let error = call["error"].as_str().unwrap();
    assert!(error.contains("larger than"), "{error}");
    assert_eq!(response["status"], "completed");
}

#[tokio::test]
async fn ad_hoc_servers_are_refused_before_anything_is_sent() {
    let (url, seen) = start_scripted("127.0.0.1").await;
    // A redirector on an explicitly allowed address, sending to loopback.
    let redirector = axum::Router::new().route(
        "/mcp",
        axum::routing::post({
            let url = url.clone();
            move || async move {
                (StatusCode::TEMPORARY_REDIRECT, [("location", url.clone())]).into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let redirecting = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, redirector).await });

    let app = spawn(&url, json!(["http://*", "http://127.0.0.2:*"])).await;
    let key = app.create_key().await;
    let ad_hoc = |server_url: &str| {
        json!({"model": "fake-agent", "input": "hello",
            "tools": [{"type": "mcp", "server_label": "adhoc", "server_url": server_url,
                       "require_approval": "never",
                       "headers": {"X-Api-Key": "upstream-secret"}}]})
    };
    for refused_url in [
        url.as_str(),
        "http://10.1.2.3/mcp",
        "http://169.254.169.254/mcp",
    ] {
        let (status, refused) = create(&app, &key, ad_hoc(refused_url)).await;
        assert_eq!(status, 400, "{refused_url}: {refused}");
        assert_eq!(refused["error"]["param"], "tools[0].server_url");
        assert!(!refused.to_string().contains("upstream-secret"));
    }
    // Allowed by name, then redirected to loopback: refused there.
    let (status, failed) = create(&app, &key, ad_hoc(&redirecting)).await;
    assert_eq!(status, 424, "{failed}");
    assert_eq!(failed["error"]["param"], "tools[0]");
    assert!(!failed.to_string().contains("upstream-secret"));
    assert!(seen.lock().unwrap().is_empty(), "nothing reached loopback");

    // With no allow_urls at all, every ad-hoc URL is refused.
    let closed = spawn(&url, json!([])).await;
    let key = closed.create_key().await;
    let (status, refused) = create(&closed, &key, ad_hoc("https://mcp.example.com/mcp")).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "tools[0].server_url");
}

#[tokio::test]
async fn an_ad_hoc_server_s_headers_are_sent_and_never_shown() {
    let (url, seen) = start_scripted("127.0.0.3").await;
    let app = spawn("http://127.0.0.1:9/mcp", json!(["http://127.0.0.3:*"])).await;
    let key = app.create_key().await;
    let body = json!({"model": "fake-agent", "input": "hello",
        "tools": [{"type": "mcp", "server_label": "mine", "server_url": url,
                   "require_approval": "never", "authorization": "user-secret",
                   "headers": {"X-Team": "team-secret"}}]});
    let (status, response) = create(&app, &key, body).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(kinds(&response), ["mcp_list_tools", "mcp_call", "message"]);
    assert_eq!(response["tools"][0]["server_label"], "mine");
    let stored = app
        .client
        .get(app.url(&format!(
            "/v1/responses/{}",
            response["id"].as_str().unwrap()
        )))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for shown in [response.to_string(), stored] {
        assert!(!shown.contains("secret"), "{shown}");
    }
    assert_eq!(seen_calls(&seen), ["tools/call echo"]);

    // An unknown label without a URL names the field.
    let (status, refused) = create(
        &app,
        &key,
        json!({"model": "fake-agent", "input": "x",
            "tools": [{"type": "mcp", "server_label": "nobody"}]}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "tools[0].server_label");
}

#[tokio::test]
async fn a_key_whose_lists_exclude_a_server_cannot_name_it() {
    let (url, seen) = start_scripted("127.0.0.1").await;
    let app = spawn(&url, json!([])).await;
    let project = app.create_project("no tools", ModelAccess::any()).await;
    let project = ProjectRecord {
        allowed_mcp_servers: McpServerAccess::only(vec!["wiki".into()]).unwrap(),
        ..project
    };
    assert!(app.store.update_project(&project).await.unwrap());
    let in_project = |servers: McpServerAccess| KeyScope {
        project_id: Some(project.id.clone()),
        allowed_mcp_servers: servers,
        ..KeyScope::default()
    };
    let body = json!({"model": "fake-agent", "input": "hello",
        "tools": [{"type": "mcp", "server_label": "docs", "require_approval": "never"}]});
    let outside = app
        .create_scoped_key(None, in_project(McpServerAccess::any()))
        .await;
    let (status, refused) = create(&app, &outside, body.clone()).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "tools[0].server_label");
    assert!(
        !refused.to_string().contains(&url),
        "nothing of the server is told: {refused}"
    );
    // A key of the default project, its own list without `docs`: the same.
    let narrowed = app
        .create_scoped_key(
            None,
            KeyScope {
                allowed_mcp_servers: McpServerAccess::only(vec!["wiki".into()]).unwrap(),
                ..KeyScope::default()
            },
        )
        .await;
    let (status, _) = create(&app, &narrowed, body.clone()).await;
    assert_eq!(status, 400);
    assert!(
        seen.lock().unwrap().is_empty(),
        "the server was never asked"
    );
    // A key that may: the loop runs.
    let key = app.create_key().await;
    let (status, response) = create(&app, &key, body).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(kinds(&response), ["mcp_list_tools", "mcp_call", "message"]);
}

/// Two replicas on one PostgreSQL: a call asked on one is approved on
/// the other, which reads the approval request and the tool list from the
/// stored conversation (the list is not fetched again).
#[tokio::test]
async fn an_approval_asked_on_one_replica_is_answered_on_another() {
    let schema = TestSchema::create(&postgres_url()).await.unwrap();
    let (url, seen) = start_scripted("127.0.0.1").await;
    let first = spawn_on(Database::Url(schema.url().to_owned()), &url, json!([])).await;
    let second = spawn_on(Database::Url(schema.url().to_owned()), &url, json!([])).await;
    let key = first.create_key().await;
    let tools = json!([{"type": "mcp", "server_label": "docs"}]);
    let (status, asked) = create(
        &first,
        &key,
        json!({"model": "fake-agent", "input": "hello", "tools": tools}),
    )
    .await;
    assert_eq!(status, 200, "{asked}");
    let request = &asked["output"][1];
    assert_eq!(request["type"], "mcp_approval_request");
    let approved = json!([{"type": "mcp_approval_response", "approve": true,
        "approval_request_id": request["id"]}]);
    let (status, answered) = create(
        &second,
        &key,
        json!({"model": "fake-agent", "input": approved, "tools": tools,
               "previous_response_id": asked["id"]}),
    )
    .await;
    assert_eq!(status, 200, "{answered}");
    assert_eq!(kinds(&answered), ["mcp_call", "message"]);
    assert_eq!(answered["output"][0]["output"], "hello");
    let lists = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|m| *m == "tools/list")
        .count();
    assert_eq!(lists, 1, "the second replica reused the stored list");
    drop((first, second));
    schema.remove().await.unwrap();
}

/// `mcp.max_calls_per_project_per_day`: past it, a call is not made (the
/// model reads why), in the dialects and on `/mcp` alike, for the whole
/// project; another project's keys still call.
#[tokio::test]
async fn a_project_s_daily_calls_are_capped() {
    let (url, seen) = start_scripted("127.0.0.1").await;
    let mcp = json!({"servers": {"docs": {"url": url}}, "max_calls_per_project_per_day": 2});
    let app = spawn_mcp(Database::Sqlite, mcp).await;
    let key = app.create_key().await;
    let body = json!({"model": "fake-tools", "input": "hello", "max_tool_calls": 3,
        "tools": [{"type": "mcp", "server_label": "docs", "require_approval": "never"}]});
    let (status, response) = create(&app, &key, body).await;
    assert_eq!(status, 200, "{response}");
    let calls: Vec<&Value> = response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "mcp_call")
        .collect();
    assert_eq!(calls[0]["status"], "completed");
    assert_eq!(calls[1]["status"], "completed");
    assert_eq!(calls[2]["status"], "failed", "{response}");
    assert!(
        calls[2]["error"]
            .as_str()
            .unwrap()
            .contains("for today are spent")
    );
    assert_eq!(seen_calls(&seen).len(), 2);

    // The same project through /mcp: spent too.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "docs__echo", "arguments": {"text": "x"}}});
    let answer: Value = app
        .client
        .post(app.url("/mcp"))
        .bearer_auth(&key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&call)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(
        seen_calls(&seen).len(),
        2,
        "nothing more reached the server"
    );

    // Another project's key still calls.
    let project = app.create_project("other", ModelAccess::any()).await;
    let other = app
        .create_scoped_key(
            None,
            KeyScope {
                project_id: Some(project.id.clone()),
                ..KeyScope::default()
            },
        )
        .await;
    let body = json!({"model": "fake-agent", "input": "hello",
        "tools": [{"type": "mcp", "server_label": "docs", "require_approval": "never"}]});
    let (status, response) = create(&app, &other, body).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["output"][1]["status"], "completed", "{response}");
}
