//! The OpenAPI document (generated from the wire types' schemas by
//! `svc_server::openapi_document`) against the real server: it is OpenAPI 3.1, lists
//! exactly the routes the server has, and what the server sends validates
//! against the document's own schemas.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use serde_json::{Value, json};
use svc_test_support::{TestApp, read_sse};

fn document() -> Value {
    svc_server::openapi_document().unwrap().clone()
}

/// Follows a local `$ref` (`#/a/b`) inside the document.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let pointer = reference.strip_prefix('#').expect("local $ref");
            let target = doc
                .pointer(pointer)
                .unwrap_or_else(|| panic!("dangling $ref {reference}"));
            resolve(doc, target)
        }
        None => value,
    }
}

/// A validator for `schema`, a schema taken from the document: its
/// `#/components/...` references resolve against the document's components.
fn validator(doc: &Value, schema: &Value) -> jsonschema::Validator {
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "allOf": [schema],
        "components": doc["components"],
    });
    jsonschema::draft202012::options()
        .build(&root)
        .unwrap_or_else(|e| panic!("schema does not compile: {e}\n{schema:#}"))
}

/// The schema the document gives for `method path` answering `status` as
/// `media`; panics when the document does not describe that response.
fn response_schema(doc: &Value, method: &str, path: &str, status: u16, media: &str) -> Value {
    let operation = &doc["paths"][path][method];
    assert!(operation.is_object(), "no operation {method} {path}");
    let response = operation["responses"]
        .get(status.to_string())
        .unwrap_or_else(|| panic!("{method} {path} does not document status {status}"));
    let response = resolve(doc, response);
    response["content"]
        .get(media)
        .unwrap_or_else(|| panic!("{method} {path} {status} does not document {media}"))["schema"]
        .clone()
}

fn assert_valid(doc: &Value, schema: &Value, instance: &Value, what: &str) {
    let validator = validator(doc, schema);
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not match the document:\n{}\n{instance:#}",
        errors.join("\n")
    );
}

/// Checks `response` is documented for `method path` (status and content
/// type) and that its body matches the schema; returns the body.
async fn check(doc: &Value, method: &str, path: &str, response: reqwest::Response) -> Value {
    let status = response.status().as_u16();
    let media = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().trim().to_owned())
        .unwrap_or_default();
    assert!(
        response.headers().contains_key("x-request-id"),
        "{method} {path} {status}: no x-request-id"
    );
    let schema = response_schema(doc, method, path, status, &media);
    let body: Value = response.json().await.expect("a JSON body");
    assert_valid(doc, &schema, &body, &format!("{method} {path} {status}"));
    body
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

#[test]
fn is_openapi_3_1_with_exactly_the_server_routes() {
    let doc = document();
    let version = doc["openapi"].as_str().expect("an openapi version");
    assert!(version.starts_with("3.1."), "not OpenAPI 3.1: {version}");
    assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());
    assert!(
        doc["servers"].is_array(),
        "a placeholder `servers` is expected"
    );

    // Every path, method and schema, as served: a change to the API shows
    // here (review it, then `cargo insta accept`, or run with
    // INSTA_UPDATE=always).
    insta::assert_json_snapshot!("openapi", doc);

    // Bearer auth on /v1/* (and rerank's aliases, /rerank and /v2/rerank,
    // the paths vLLM's and Cohere's clients use, and svc's own /mcp), naming the one
    // permission the handler's key needs (none: any key); none elsewhere.
    let scheme = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!(scheme["type"], "http");
    assert_eq!(scheme["scheme"], "bearer");
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            let route = format!("{} {path}", method.to_uppercase());
            let security = operation["security"].as_array().expect("explicit security");
            // The device flow is how a client without a key gets one.
            let keyed = path.starts_with("/v1/")
                || path == "/rerank"
                || path == "/v2/rerank"
                || path == "/mcp";
            if keyed && !path.starts_with("/v1/auth/device/") {
                let scopes = &security[0]["bearer"];
                assert!(
                    scopes.as_array().is_some_and(|s| s.len() <= 1),
                    "{route}: {security:?}"
                );
                if path.starts_with("/v1/messages") {
                    // Anthropic's clients send the key as `x-api-key`.
                    assert_eq!(
                        security,
                        &vec![json!({"bearer": scopes}), json!({"apiKey": scopes})],
                        "{route}"
                    );
                } else {
                    assert_eq!(security.len(), 1, "{route}");
                }
                assert!(
                    operation["responses"].get("401").is_some(),
                    "{route} lacks 401"
                );
            } else {
                assert!(security.is_empty(), "{route} must be open");
            }
        }
    }

    // Every component schema compiles (every $ref resolves: below).
    for name in doc["components"]["schemas"].as_object().unwrap().keys() {
        validator(
            &doc,
            &json!({"$ref": format!("#/components/schemas/{name}")}),
        );
    }
    // References really resolve (a dangling one would not reject these).
    let error = validator(&doc, &json!({"$ref": "#/components/schemas/ErrorResponse"}));
    assert!(!error.is_valid(&json!({"error": {"message": "m", "type": "t"}})));
    assert!(
        error.is_valid(
            &json!({"error": {"message": "m", "type": "t", "param": null, "code": null}})
        )
    );
    let chunk = validator(
        &doc,
        &json!({"$ref": "#/components/schemas/ChatCompletionChunk"}),
    );
    assert!(!chunk.is_valid(
        &json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
        "model": "svc", "choices": [{"index": 0, "delta": {}, "finish_reason": "done"}]})
    ));

    // The chat request lists every accepted field, and the error responses
    // the brief promises.
    let request = &doc["components"]["schemas"]["CreateChatCompletionRequest"]["properties"];
    for field in [
        "model",
        "messages",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "seed",
        "n",
        "presence_penalty",
        "frequency_penalty",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "user",
    ] {
        assert!(request.get(field).is_some(), "request schema lacks {field}");
    }
    let chat = &doc["paths"]["/v1/chat/completions"]["post"]["responses"];
    for status in ["200", "400", "401", "404", "413", "429", "500", "503"] {
        assert!(chat.get(status).is_some(), "chat lacks {status}");
    }
    let ok = &chat["200"]["content"];
    assert!(ok.get("application/json").is_some() && ok.get("text/event-stream").is_some());
}

/// Every `$ref` points into the document. The component schemas are those
/// the router collected: the ones the operations name and, through each
/// type's `ToSchema::schemas`, those they refer to; a dangling reference
/// is a type whose schema refers to one that its `schemas` does not name
/// (a field written out with `schema_with`, a schema written by hand).
#[test]
fn every_reference_resolves() {
    fn refs<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    out.push(r);
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let doc = document();
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    let dangling: std::collections::BTreeSet<&str> = all
        .into_iter()
        .filter(|r| {
            let pointer = r.strip_prefix('#').expect("only local references");
            doc.pointer(pointer).is_none()
        })
        .collect();
    assert!(dangling.is_empty(), "dangling references: {dangling:?}");
}

#[tokio::test]
async fn every_documented_route_exists_and_openapi_json_is_served() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let doc = document();

    for path in [
        "/health",
        "/ready",
        "/openapi.json",
        "/metrics",
        "/v1/models",
        "/v1/models/svc",
    ] {
        let response = app
            .client
            .get(app.url(path))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "GET {path}");
    }
    let response = app.client.get(app.url("/health")).send().await.unwrap();
    check(&doc, "get", "/health", response).await;
    let response = app.client.get(app.url("/ready")).send().await.unwrap();
    check(&doc, "get", "/ready", response).await;

    let response = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    let served = check(&doc, "get", "/openapi.json", response).await;
    assert_eq!(served["servers"], json!([{"url": app.base_url}]));
    let mut expected = doc.clone();
    expected["servers"] = served["servers"].clone();
    assert_eq!(
        served, expected,
        "served document differs from the generated one beyond `servers`"
    );
}

#[tokio::test]
async fn model_responses_match_the_document() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let doc = document();

    let response = app
        .client
        .get(app.url("/v1/models"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    let list = check(&doc, "get", "/v1/models", response).await;
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"svc") && ids.contains(&"svc-thinking"),
        "{ids:?}"
    );

    let response = app
        .client
        .get(app.url("/v1/models/svc"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    let model = check(&doc, "get", "/v1/models/{model}", response).await;
    assert_eq!(model["id"], "svc");

    // Ids may contain '/': the whole rest of the path is the id.
    let response = app
        .client
        .get(app.url("/v1/models/org/missing"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let error = check(&doc, "get", "/v1/models/{model}", response).await;
    assert_eq!(error["error"]["code"], "model_not_found");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("org/missing")
    );

    let response = app.client.get(app.url("/v1/models")).send().await.unwrap();
    assert_eq!(response.status(), 401);
    let error = check(&doc, "get", "/v1/models", response).await;
    assert_eq!(error["error"]["code"], "invalid_api_key");
}

#[tokio::test]
async fn completion_responses_match_the_document() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let doc = document();
    let path = "/v1/chat/completions";

    let whole = check(
        &doc,
        "post",
        path,
        app.chat(
            &key,
            &json!({"model": "svc", "messages": user("hello there")}),
        )
        .await,
    )
    .await;
    assert_eq!(
        whole["choices"][0]["message"]["content"],
        "You said: hello there"
    );

    let choices = check(
        &doc,
        "post",
        path,
        app.chat(
            &key,
            &json!({"model": "svc", "messages": user("hi"), "n": 2, "logprobs": true, "top_logprobs": 1}),
        )
        .await,
    )
    .await;
    assert_eq!(
        choices["choices"][1]["logprobs"]["content"][0]["token"],
        "You "
    );

    let thinking = check(
        &doc,
        "post",
        path,
        app.chat(
            &key,
            &json!({"model": "svc-thinking", "messages": user("hm")}),
        )
        .await,
    )
    .await;
    assert!(thinking["choices"][0]["message"]["reasoning_content"].is_string());

    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let called = check(
        &doc,
        "post",
        path,
        app.chat(
            &key,
            &json!({"model": "fake-tools", "messages": user("weather?"), "tools": tools}),
        )
        .await,
    )
    .await;
    assert_eq!(called["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(called["choices"][0]["message"]["content"], Value::Null);

    // Errors.
    let bad = check(
        &doc,
        "post",
        path,
        app.chat(
            &key,
            &json!({"model": "svc", "messages": user("x"), "temperature": 3}),
        )
        .await,
    )
    .await;
    assert_eq!(bad["error"]["param"], "temperature");
    let tiny = check(
        &doc,
        "post",
        path,
        app.chat(&key, &json!({"model": "fake-tiny", "messages": user("x")}))
            .await,
    )
    .await;
    assert_eq!(tiny["error"]["code"], "context_length_exceeded");
    let missing = check(
        &doc,
        "post",
        path,
        app.chat(&key, &json!({"model": "nope", "messages": user("x")}))
            .await,
    )
    .await;
    assert_eq!(missing["error"]["code"], "model_not_found");
    let wrong_key = "sk-svc-0000000000000000000000000000000000000000";
    let unauthorized = check(
        &doc,
        "post",
        path,
        app.chat(wrong_key, &json!({"model": "svc", "messages": user("x")}))
            .await,
    )
    .await;
    assert_eq!(unauthorized["error"]["code"], "invalid_api_key");
    let failed = check(
        &doc,
        "post",
        path,
        app.chat(
            &key,
            &json!({"model": "fake-fail", "messages": user("a b c d")}),
        )
        .await,
    )
    .await;
    assert_eq!(failed["error"]["type"], "server_error");
    let not_json = app
        .client
        .post(app.url(path))
        .bearer_auth(&key)
        .header("content-type", "text/plain")
        .body("hi")
        .send()
        .await
        .unwrap();
    check(&doc, "post", path, not_json).await;
}

#[tokio::test]
async fn streamed_chunks_match_the_document() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let doc = document();
    // The document describes each event (as OpenAPI 3.2's itemSchema does):
    // `{"data": ...}` whose JSON content is a chunk or an error.
    let event_schema = response_schema(
        &doc,
        "post",
        "/v1/chat/completions",
        200,
        "text/event-stream",
    );
    let data_schema = resolve(&doc, &event_schema)["properties"]["data"]["anyOf"]
        .as_array()
        .expect("data: anyOf")
        .iter()
        .find_map(|s| s.get("contentSchema"))
        .expect("a contentSchema for the JSON events")
        .clone();
    let chunk_schema = json!({"$ref": "#/components/schemas/ChatCompletionChunk"});
    let error_schema = json!({"$ref": "#/components/schemas/ErrorResponse"});
    let check_event = |event: &svc_test_support::SseEvent| {
        assert_valid(
            &doc,
            &event_schema,
            &json!({"data": event.data}),
            "a stream event",
        );
        if let Some(payload) = &event.json {
            assert_valid(&doc, &data_schema, payload, "a stream event's JSON");
        }
    };

    let tools = json!([{"type": "function", "function": {"name": "get_weather"}}]);
    let bodies = [
        json!({"model": "svc", "messages": user("one two three"), "stream": true}),
        json!({"model": "svc-thinking", "messages": user("one"), "stream": true, "stream_options": {"include_usage": true}}),
        json!({"model": "fake-tools", "messages": user("w"), "tools": tools, "stream": true, "stream_options": {"include_usage": true}}),
        json!({"model": "svc", "messages": user("one two"), "stream": true, "n": 2, "logprobs": true, "top_logprobs": 2}),
    ];
    for body in &bodies {
        let response = app.chat(&key, body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let events = read_sse(&response.text().await.unwrap());
        assert_eq!(events.last().unwrap().data, "[DONE]");
        for event in &events[..events.len() - 1] {
            let chunk = event.json.as_ref().unwrap();
            assert_valid(&doc, &chunk_schema, chunk, "a stream chunk");
        }
        events.iter().for_each(check_event);
    }

    // A failure mid-stream ends with one error event and no [DONE].
    let response = app
        .chat(
            &key,
            &json!({"model": "fake-fail", "messages": user("a b c d"), "stream": true}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let events = read_sse(&response.text().await.unwrap());
    let last = events.last().unwrap().json.as_ref().unwrap();
    assert_valid(&doc, &error_schema, last, "the error event");
    events.iter().for_each(check_event);
    for event in &events[..events.len() - 1] {
        assert_valid(
            &doc,
            &chunk_schema,
            event.json.as_ref().unwrap(),
            "a stream chunk",
        );
    }
}

/// The request schema agrees with the server: bodies it accepts are
/// served, bodies it rejects get 400 (spot checks, both directions).
#[tokio::test]
async fn request_schema_agrees_with_the_server() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let doc = document();
    let schema = &doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"];
    let request = validator(&doc, schema);
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "d",
        "parameters": {"type": "object"}, "strict": false}}]);

    let accepted = [
        json!({"model": "svc", "messages": user("hi")}),
        json!({"model": "svc", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": [{"type": "text", "text": "really"}], "name": "dev"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "user", "content": "thanks"},
        ]}),
        json!({"model": "svc", "messages": user("hi"), "temperature": 2, "top_p": 0, "max_tokens": 3,
            "max_completion_tokens": 5, "stop": ["x", "y", "z", "w"], "seed": -1, "n": 1,
            "presence_penalty": -2, "frequency_penalty": 2, "user": "u", "parallel_tool_calls": true,
            "tools": tools, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": true}}}),
        json!({"model": "svc", "messages": user("hi"), "stop": "x", "tool_choice": "none",
            "response_format": {"type": "json_object"}, "temperature": null, "stream": null}),
        json!({"model": "svc", "messages": user("hi"), "stream": true, "stream_options": {"include_usage": false},
            "response_format": {"type": "text"}}),
        json!({"model": "svc", "messages": user("hi"), "n": 3, "logprobs": true, "top_logprobs": 20}),
        json!({"model": "svc", "messages": user("hi"), "logprobs": false, "top_logprobs": null}),
    ];
    for body in &accepted {
        assert!(request.is_valid(body), "schema refuses {body}");
        let response = app.chat(&key, body).await;
        assert_eq!(
            response.status(),
            200,
            "server refuses {body}: {}",
            response.text().await.unwrap()
        );
    }

    let refused = [
        json!({"messages": user("hi")}),
        json!({"model": "svc"}),
        json!({"model": "svc", "messages": []}),
        json!({"model": "svc", "messages": [{"role": "robot", "content": "hi"}]}),
        json!({"model": "svc", "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}]}]}),
        json!({"model": "svc", "messages": [{"role": "tool", "content": "x"}]}),
        json!({"model": "svc", "messages": user("hi"), "temperature": 2.5}),
        json!({"model": "svc", "messages": user("hi"), "top_p": -0.1}),
        json!({"model": "svc", "messages": user("hi"), "max_tokens": 0}),
        json!({"model": "svc", "messages": user("hi"), "max_completion_tokens": 0}),
        json!({"model": "svc", "messages": user("hi"), "n": 0}),
        json!({"model": "svc", "messages": user("hi"), "n": 129}),
        json!({"model": "svc", "messages": user("hi"), "top_logprobs": 2}),
        json!({"model": "svc", "messages": user("hi"), "logprobs": false, "top_logprobs": 2}),
        json!({"model": "svc", "messages": user("hi"), "logprobs": true, "top_logprobs": 21}),
        json!({"model": "svc", "messages": user("hi"), "presence_penalty": 2.5}),
        json!({"model": "svc", "messages": user("hi"), "frequency_penalty": -3}),
        json!({"model": "svc", "messages": user("hi"), "stop": ["a", "b", "c", "d", "e"]}),
        json!({"model": "svc", "messages": user("hi"), "stop": ""}),
        json!({"model": "svc", "messages": user("hi"), "tool_choice": "sometimes"}),
        json!({"model": "svc", "messages": user("hi"), "tools": [{"type": "retrieval", "function": {"name": "f"}}]}),
        json!({"model": "svc", "messages": user("hi"), "tools": [{"type": "function", "function": {"name": "bad name"}}]}),
        json!({"model": "svc", "messages": user("hi"), "response_format": {"type": "xml"}}),
        json!({"model": "svc", "messages": user("hi"), "stream": "yes"}),
    ];
    for body in &refused {
        assert!(!request.is_valid(body), "schema accepts {body}");
        let response = app.chat(&key, body).await;
        assert_eq!(response.status(), 400, "server accepts {body}");
        check(&doc, "post", "/v1/chat/completions", response).await;
    }
}

#[tokio::test]
async fn device_flow_responses_match_the_document() {
    let doc = document();
    let app = TestApp::spawn().await;
    let code = app
        .client
        .post(app.url("/v1/auth/device/code"))
        .send()
        .await
        .unwrap();
    let codes = check(&doc, "post", "/v1/auth/device/code", code).await;
    let device_code = codes["device_code"].as_str().unwrap();
    let token = |body: Value| {
        app.client
            .post(app.url("/v1/auth/device/token"))
            .json(&body)
            .send()
    };
    let pending = token(json!({ "device_code": device_code })).await.unwrap();
    let body = check(&doc, "post", "/v1/auth/device/token", pending).await;
    assert_eq!(body, json!({"status": "pending"}));
    let unknown = token(json!({"device_code": "nope"})).await.unwrap();
    check(&doc, "post", "/v1/auth/device/token", unknown).await;
    let form = app
        .client
        .post(app.url("/v1/auth/device/token"))
        .form(&[
            ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
            ("device_code", device_code),
        ])
        .send()
        .await
        .unwrap();
    let body = check(&doc, "post", "/v1/auth/device/token", form).await;
    assert_eq!(body["error"], "slow_down");

    let path = "/.well-known/oauth-authorization-server";
    let metadata = app.client.get(app.url(path)).send().await.unwrap();
    let body = check(&doc, "get", path, metadata).await;
    assert_eq!(body["issuer"], app.base_url.as_str());
}

#[tokio::test]
async fn current_key_responses_match_the_document() {
    let doc = document();
    let app = TestApp::spawn().await;
    let user = app
        .create_user("ada@example.com", "password123", false)
        .await;
    let (key, _) = app
        .keys
        .create(
            svc_core::NewKey {
                name: "laptop".into(),
                owner_id: Some(user.id.clone()),
                created_via: svc_core::KeyOrigin::Device,
                expires_in: Some(60),
                scope: Default::default(),
            },
            &svc_core::Actor::Operator,
        )
        .await
        .unwrap();
    let key = key.expose().to_owned();
    let get = app
        .client
        .get(app.url("/v1/auth/key"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    let body = check(&doc, "get", "/v1/auth/key", get).await;
    assert_eq!(body["owner"]["email"], "ada@example.com");
    assert_eq!(body["name"], "laptop");
    assert!(!body.to_string().contains(&key[7..]), "never the secret");
    let operator_key = app.create_key().await;
    let get = app
        .client
        .get(app.url("/v1/auth/key"))
        .bearer_auth(&operator_key)
        .send()
        .await
        .unwrap();
    assert_eq!(
        check(&doc, "get", "/v1/auth/key", get).await["owner"],
        Value::Null
    );

    let delete = app
        .client
        .delete(app.url("/v1/auth/key"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    let body = check(&doc, "delete", "/v1/auth/key", delete).await;
    assert_eq!(body["revoked"], true);
    let after = app
        .client
        .get(app.url("/v1/auth/key"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    check(&doc, "get", "/v1/auth/key", after).await;
    let models = app
        .client
        .get(app.url("/v1/models"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 401);
}

#[tokio::test]
async fn admin_usage_responses_match_the_document() {
    let doc = document();
    let app = TestApp::spawn().await;
    let admin = app
        .create_user("root@example.com", "password123", true)
        .await;
    let (key, _) = app
        .keys
        .create(
            svc_core::NewKey {
                name: "ops".into(),
                owner_id: Some(admin.id.clone()),
                created_via: svc_core::KeyOrigin::Dashboard,
                expires_in: None,
                scope: Default::default(),
            },
            &svc_core::Actor::Operator,
        )
        .await
        .unwrap();
    let key = key.expose().to_owned();
    let other = app.create_key().await;
    let chat = app
        .chat(&other, &json!({"model": "svc", "messages": user("hi")}))
        .await;
    chat.bytes().await.unwrap();
    let mut rows = Value::Null;
    // Usage is written once a second.
    for _ in 0..200 {
        let response = app
            .client
            .get(app.url("/v1/admin/usage?days=7"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        rows = check(&doc, "get", "/v1/admin/usage", response).await;
        if rows["data"].as_array().is_some_and(|d| !d.is_empty()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(rows["data"][0]["requests"], 1, "{rows}");
    let forbidden = app
        .client
        .get(app.url("/v1/admin/usage"))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap();
    assert_eq!(forbidden.status(), 403);
    check(&doc, "get", "/v1/admin/usage", forbidden).await;
    let bad = app
        .client
        .get(app.url("/v1/admin/usage?days=0"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(
        check(&doc, "get", "/v1/admin/usage", bad).await["error"]["param"],
        "days"
    );
}

/// Responses API answers validate: whole responses (with reasoning, a
/// function call, incomplete), every streamed event (its `data` against the
/// event schema's content schema), stored reads, deletes and their errors.
#[tokio::test]
async fn responses_api_answers_match_the_document() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let doc = document();
    let path = "/v1/responses";
    let post = |body: Value| {
        let request = app.client.post(app.url(path)).bearer_auth(&key).json(&body);
        async move { request.send().await.unwrap() }
    };
    let tools = json!([{"type": "function", "name": "get_weather"}, {"type": "web_search"}]);
    let mut ids = Vec::new();
    for body in [
        json!({"model": "svc", "input": "hi"}),
        json!({"model": "svc-thinking", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}),
        json!({"model": "fake-tools", "input": "w", "tools": tools}),
        json!({"model": "svc", "input": "a b c", "max_output_tokens": 1, "store": false}),
    ] {
        let body = check(&doc, "post", path, post(body).await).await;
        ids.push(body["id"].as_str().unwrap().to_owned());
    }
    check(
        &doc,
        "post",
        path,
        post(json!({"model": "svc", "input": []})).await,
    )
    .await;
    check(
        &doc,
        "post",
        path,
        post(json!({"model": "nope", "input": "x"})).await,
    )
    .await;
    check(
        &doc,
        "post",
        path,
        post(json!({"model": "svc", "input": "x", "previous_response_id": "resp_none"})).await,
    )
    .await;

    let event_schema = response_schema(&doc, "post", path, 200, "text/event-stream");
    let data_schema = resolve(&doc, &event_schema)["properties"]["data"]["contentSchema"].clone();
    for body in [
        json!({"model": "svc-thinking", "input": "one two", "stream": true}),
        json!({"model": "fake-tools", "input": "w", "tools": tools, "stream": true}),
        json!({"model": "fake-fail", "input": "a b c d", "stream": true}),
        json!({"model": "svc", "input": "a b c", "max_output_tokens": 1, "stream": true}),
    ] {
        let response = post(body).await;
        assert_eq!(response.status(), 200);
        let text = response.text().await.unwrap();
        for frame in text.trim_end().split("\n\n") {
            let (event, data) = frame.split_once('\n').unwrap();
            let event = event.strip_prefix("event: ").unwrap();
            let data = data.strip_prefix("data: ").unwrap();
            assert_valid(
                &doc,
                &event_schema,
                &json!({"event": event, "data": data}),
                "an event",
            );
            let payload: Value = serde_json::from_str(data).unwrap();
            assert_valid(&doc, &data_schema, &payload, "an event's JSON");
        }
    }

    let item = format!("{path}/{{response_id}}");
    let id = &ids[0];
    let get = app
        .client
        .get(app.url(&format!("{path}/{id}")))
        .bearer_auth(&key);
    check(&doc, "get", &item, get.send().await.unwrap()).await;
    let delete = app
        .client
        .delete(app.url(&format!("{path}/{id}")))
        .bearer_auth(&key);
    check(&doc, "delete", &item, delete.send().await.unwrap()).await;
    let get = app
        .client
        .get(app.url(&format!("{path}/{id}")))
        .bearer_auth(&key);
    check(&doc, "get", &item, get.send().await.unwrap()).await;
    let delete = app
        .client
        .delete(app.url(&format!("{path}/{id}")))
        .bearer_auth(&key);
    check(&doc, "delete", &item, delete.send().await.unwrap()).await;
}

/// Anthropic's Messages routes answer as documented: whole replies (text,
/// thinking, tool use), every stream event, count_tokens, and errors in
/// Anthropic's shape.
#[tokio::test]
async fn messages_responses_match_the_document() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let doc = document();
    let post = |path: &'static str, body: Value| {
        app.client
            .post(app.url(path))
            .header("x-api-key", &key)
            .json(&body)
            .send()
    };
    let message =
        |model: &str| json!({"model": model, "max_tokens": 64, "messages": user("one two")});
    let mut thinking = message("svc-thinking");
    thinking["thinking"] = json!({"type": "enabled", "budget_tokens": 32});
    let mut tools = message("fake-tools");
    tools["tools"] = json!([{"name": "get_weather", "input_schema": {"type": "object"}}]);
    let mut stopped = message("svc");
    stopped["stop_sequences"] = json!(["two"]);
    for body in [message("svc"), thinking, tools, stopped] {
        let reply = check(
            &doc,
            "post",
            "/v1/messages",
            post("/v1/messages", body.clone()).await.unwrap(),
        )
        .await;
        assert_eq!(reply["type"], "message");

        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let response = post("/v1/messages", streamed).await.unwrap();
        assert_eq!(response.status(), 200);
        let event_schema = response_schema(&doc, "post", "/v1/messages", 200, "text/event-stream");
        let data_schema =
            resolve(&doc, &event_schema)["properties"]["data"]["contentSchema"].clone();
        let raw = response.text().await.unwrap();
        for frame in raw.trim_end().split("\n\n") {
            let (event, data) = frame.split_once('\n').unwrap();
            let name = event.strip_prefix("event: ").unwrap();
            let data = data.strip_prefix("data: ").unwrap();
            assert_valid(
                &doc,
                &event_schema,
                &json!({"event": name, "data": data}),
                "an event",
            );
            let payload: Value = serde_json::from_str(data).unwrap();
            assert_valid(&doc, &data_schema, &payload, "an event's JSON");
        }
    }
    let counted = check(
        &doc,
        "post",
        "/v1/messages/count_tokens",
        post(
            "/v1/messages/count_tokens",
            json!({"model": "svc", "messages": user("hi")}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert!(counted["input_tokens"].as_u64().unwrap() > 0);
    for (body, status) in [
        (json!({"model": "svc"}), 400),
        (message("nope"), 404),
        (message("fake-tiny"), 400),
    ] {
        let response = post("/v1/messages", body).await.unwrap();
        assert_eq!(response.status(), status);
        let error = check(&doc, "post", "/v1/messages", response).await;
        assert_eq!(error["type"], "error");
    }
    let anonymous = app
        .client
        .post(app.url("/v1/messages/count_tokens"))
        .json(&json!({"model": "svc", "messages": user("hi")}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    check(&doc, "post", "/v1/messages/count_tokens", anonymous).await;
}

#[tokio::test]
async fn admin_api_responses_match_the_document() {
    let app = TestApp::spawn().await;
    let admin = app
        .create_scoped_key(
            None,
            svc_core::KeyScope {
                kind: svc_core::KeyKind::Admin(svc_core::AdminReach::Organization),
                ..Default::default()
            },
        )
        .await;
    let user = app
        .create_user("member@example.com", "password123", false)
        .await;
    let doc = document();
    let send = |method: reqwest::Method, path: String, body: Option<Value>| {
        let mut request = app
            .client
            .request(method, app.url(&path))
            .bearer_auth(&admin);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send()
    };
    let projects = "/v1/organization/projects";
    let project = "/v1/organization/projects/{project_id}";
    let keys = "/v1/organization/projects/{project_id}/api_keys";
    let key = "/v1/organization/projects/{project_id}/api_keys/{key_id}";
    let users = "/v1/organization/projects/{project_id}/users";

    let response = send(
        reqwest::Method::POST,
        projects.into(),
        Some(json!({"name": "team", "allowed_models": ["svc*"]})),
    )
    .await
    .unwrap();
    let created = check(&doc, "post", projects, response).await;
    let id = created["id"].as_str().unwrap();
    let at = |template: &str, key_id: &str| {
        template
            .replace("{project_id}", id)
            .replace("{key_id}", key_id)
    };
    let response = send(reqwest::Method::GET, projects.into(), None)
        .await
        .unwrap();
    check(&doc, "get", projects, response).await;
    let response = send(reqwest::Method::GET, at(project, ""), None)
        .await
        .unwrap();
    check(&doc, "get", project, response).await;
    let response = send(
        reqwest::Method::GET,
        project.replace("{project_id}", "proj_nope"),
        None,
    )
    .await
    .unwrap();
    check(&doc, "get", project, response).await;

    let response = send(
        reqwest::Method::POST,
        at(project, ""),
        Some(json!({"name": "renamed", "allowed_models": null})),
    )
    .await
    .unwrap();
    let renamed = check(&doc, "post", project, response).await;
    assert_eq!(renamed["allowed_models"], Value::Null);
    let response = send(
        reqwest::Method::POST,
        at(users, ""),
        Some(json!({"user_id": user.id.0, "role": "owner"})),
    )
    .await
    .unwrap();
    check(&doc, "post", users, response).await;
    let response = send(reqwest::Method::GET, at(users, ""), None)
        .await
        .unwrap();
    check(&doc, "get", users, response).await;

    let response = send(
        reqwest::Method::POST,
        at(keys, ""),
        Some(
            json!({"name": "k", "kind": "restricted", "permissions": ["model.request"],
            "allowed_models": ["svc"], "expires_in": 3600}),
        ),
    )
    .await
    .unwrap();
    let made = check(&doc, "post", keys, response).await;
    assert!(made["value"].is_string());
    // A key for another account is refused, as documented.
    let response = send(
        reqwest::Method::POST,
        at(keys, ""),
        Some(json!({"name": "theirs", "user_id": user.id.0})),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 403);
    check(&doc, "post", keys, response).await;
    let key_id = made["id"].as_str().unwrap();
    let response = send(
        reqwest::Method::POST,
        at(keys, ""),
        Some(json!({"name": ""})),
    )
    .await
    .unwrap();
    check(&doc, "post", keys, response).await;
    let response = send(reqwest::Method::GET, at(keys, ""), None)
        .await
        .unwrap();
    check(&doc, "get", keys, response).await;
    let response = send(reqwest::Method::GET, at(key, key_id), None)
        .await
        .unwrap();
    check(&doc, "get", key, response).await;
    let rotate = "/v1/organization/projects/{project_id}/api_keys/{key_id}/rotate";
    let response = send(
        reqwest::Method::POST,
        at(rotate, key_id),
        Some(json!({"grace_period_seconds": 60})),
    )
    .await
    .unwrap();
    let rotated = check(&doc, "post", rotate, response).await;
    assert_eq!(rotated["rotated_from"], key_id);
    for (path, body) in [
        (at(rotate, key_id), json!({"grace_period_seconds": -1})),
        (at(rotate, "key_0000000000000000"), json!({})),
    ] {
        let response = send(reqwest::Method::POST, path, Some(body)).await.unwrap();
        check(&doc, "post", rotate, response).await;
    }
    let response = send(reqwest::Method::DELETE, at(key, key_id), None)
        .await
        .unwrap();
    check(&doc, "delete", key, response).await;
    let audit = "/v1/organization/audit_logs";
    for query in ["?limit=3", "?event_types[]=api_key.rotated", "?limit=0"] {
        let response = send(reqwest::Method::GET, format!("{audit}{query}"), None)
            .await
            .unwrap();
        let list = check(&doc, "get", audit, response).await;
        if query.contains("rotated") {
            assert_eq!(list["data"][0]["type"], "api_key.rotated");
        }
    }

    // Another kind of key, and none.
    let other = app.create_key().await;
    let response = app
        .client
        .get(app.url(projects))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap();
    check(&doc, "get", projects, response).await;
    let response = app.client.get(app.url(projects)).send().await.unwrap();
    check(&doc, "get", projects, response).await;
}

#[tokio::test]
async fn legacy_completion_and_embedding_responses_match_the_document() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let doc = document();
    let post = |path: &'static str, body: Value| {
        app.client
            .post(app.url(path))
            .bearer_auth(&key)
            .json(&body)
            .send()
    };
    let whole = check(
        &doc,
        "post",
        "/v1/completions",
        post(
            "/v1/completions",
            json!({"model": "svc", "prompt": ["a b", "c"], "n": 2, "logprobs": 2}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(whole["choices"][3]["text"], "You said: c");
    check(
        &doc,
        "post",
        "/v1/completions",
        post(
            "/v1/completions",
            json!({"model": "svc", "prompt": "a", "suffix": "b"}),
        )
        .await
        .unwrap(),
    )
    .await;
    // Each streamed frame's JSON is a `text_completion` too.
    let chunk_schema = json!({"$ref": "#/components/schemas/CreateCompletionResponse"});
    let body = json!({"model": "svc", "prompt": "x y", "stream": true, "echo": true,
        "stream_options": {"include_usage": true}});
    let streamed = post("/v1/completions", body)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events = svc_test_support::sse::read_sse(&streamed);
    assert_eq!(events.last().unwrap().data, "[DONE]");
    for event in &events[..events.len() - 1] {
        let payload = event.json.as_ref().expect("a JSON frame");
        assert_valid(&doc, &chunk_schema, payload, "a text_completion chunk");
    }
    let vectors = check(
        &doc,
        "post",
        "/v1/embeddings",
        post(
            "/v1/embeddings",
            json!({"model": "fake-embed", "input": ["a", "b"]}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(vectors["data"][1]["index"], 1);
}

#[tokio::test]
async fn file_and_batch_responses_match_the_document() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let doc = document();
    let line = json!({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": "svc", "messages": [user("hi")]}});
    let boundary = "doc-boundary";
    let form = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\r\n{line}\r\n--{boundary}--\r\n"
    );
    let uploaded = app
        .client
        .post(app.url("/v1/files"))
        .bearer_auth(&key)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(form)
        .send()
        .await
        .unwrap();
    let file = check(&doc, "post", "/v1/files", uploaded).await;
    let file_id = file["id"].as_str().unwrap();
    let get = |path: String| app.client.get(app.url(&path)).bearer_auth(&key).send();
    check(
        &doc,
        "get",
        "/v1/files",
        get("/v1/files".into()).await.unwrap(),
    )
    .await;
    check(
        &doc,
        "get",
        "/v1/files/{file_id}",
        get(format!("/v1/files/{file_id}")).await.unwrap(),
    )
    .await;
    let created = app
        .client
        .post(app.url("/v1/batches"))
        .bearer_auth(&key)
        .json(&json!({"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}))
        .send()
        .await
        .unwrap();
    let batch = check(&doc, "post", "/v1/batches", created).await;
    let batch_id = batch["id"].as_str().unwrap();
    check(
        &doc,
        "get",
        "/v1/batches",
        get("/v1/batches".into()).await.unwrap(),
    )
    .await;
    let mut ended = Value::Null;
    for _ in 0..300 {
        ended = check(
            &doc,
            "get",
            "/v1/batches/{batch_id}",
            get(format!("/v1/batches/{batch_id}")).await.unwrap(),
        )
        .await;
        if ended["status"] == "completed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(ended["status"], "completed", "{ended}");
    let cancelled = app
        .client
        .post(app.url(&format!("/v1/batches/{batch_id}/cancel")))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    check(&doc, "post", "/v1/batches/{batch_id}/cancel", cancelled).await;
    let deleted = app
        .client
        .delete(app.url(&format!("/v1/files/{file_id}")))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    check(&doc, "delete", "/v1/files/{file_id}", deleted).await;
    let missing = get(format!("/v1/files/{file_id}")).await.unwrap();
    check(&doc, "get", "/v1/files/{file_id}", missing).await;
}

/// A local model's residence for [`model_residency_and_admin_answers_match_the_document`]:
/// loads fail while `fail` is set.
#[derive(Default)]
struct FakeResidence {
    residency: std::sync::Mutex<svc_core::Residency>,
    fail: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl svc_core::Residence for FakeResidence {
    async fn load(&self) -> Result<(), svc_core::EngineError> {
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(svc_core::EngineError::Unavailable("no room".into()));
        }
        let mut r = self.residency.lock().unwrap();
        r.state = svc_core::ResidencyState::Loaded;
        r.memory_bytes = 1 << 20;
        Ok(())
    }

    fn unload(&self, _force: bool) -> svc_core::Unload {
        let mut r = self.residency.lock().unwrap();
        r.state = svc_core::ResidencyState::Unloaded;
        r.memory_bytes = 0;
        svc_core::Unload::Unloaded
    }

    fn residency(&self) -> svc_core::Residency {
        self.residency.lock().unwrap().clone()
    }
}

struct FakeLocal(std::sync::Arc<FakeResidence>);

#[async_trait::async_trait]
impl svc_core::Generator for FakeLocal {
    async fn generate(
        &self,
        _: svc_core::GenerateRequest,
    ) -> Result<svc_core::EventStream, svc_core::EngineError> {
        Err(svc_core::EngineError::Unavailable("not generating".into()))
    }

    async fn count_tokens(
        &self,
        request: &svc_core::GenerateRequest,
    ) -> Result<u64, svc_core::EngineError> {
        Ok(svc_core::estimate_tokens(request))
    }

    fn sees_images(&self) -> bool {
        false
    }
}

impl svc_core::Engine for FakeLocal {
    svc_core::offers!(generator);

    fn name(&self) -> &str {
        "local"
    }

    fn residence(&self) -> Option<&dyn svc_core::Residence> {
        Some(self.0.as_ref())
    }
}

#[tokio::test]
async fn model_residency_and_admin_answers_match_the_document() {
    use std::sync::Arc;
    let probe = Arc::new(svc_test_support::Probe::default());
    let mut routes: Vec<svc_server::ModelRoute> = svc_test_support::fake_models(probe.clone())
        .iter()
        .cloned()
        .collect();
    let residence = Arc::new(FakeResidence::default());
    residence.residency.lock().unwrap().keep_alive = Some(std::time::Duration::from_secs(300));
    let pinned = Arc::new(FakeResidence::default());
    for (id, residence) in [("org/local", &residence), ("pinned", &pinned)] {
        routes.push(svc_server::ModelRoute {
            id: id.into(),
            engine: Arc::new(FakeLocal(residence.clone())),
            reasoning: false,
            created: 1,
            owned_by: "svc".into(),
            default_system_prompt: None,
            fallbacks: svc_server::Fallbacks::default(),
        });
    }
    let app = TestApp::spawn_models(
        svc_test_support::Database::Sqlite,
        svc_server::ServerConfig::default(),
        svc_server::ModelRegistry::new(routes),
        probe,
    )
    .await;
    let key = app.create_key().await;
    let admin = app.create_admin_key().await;
    let doc = document();
    let get = |path: &str| app.client.get(app.url(path)).bearer_auth(&key).send();
    let post = |path: &str, key: &str, body: Value| {
        app.client
            .post(app.url(path))
            .bearer_auth(key)
            .json(&body)
            .send()
    };
    let (load, unload) = ("/v1/admin/models/load", "/v1/admin/models/unload");

    let list = check(&doc, "get", "/v1/models", get("/v1/models").await.unwrap()).await;
    let local = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "org/local")
        .unwrap();
    assert_eq!(local["residency"]["keep_alive_seconds"], 300);
    let pinned_model = check(
        &doc,
        "get",
        "/v1/models/{model}",
        get("/v1/models/pinned").await.unwrap(),
    )
    .await;
    assert_eq!(pinned_model["residency"]["pinned"], true);

    let body = json!({"model": "org/local"});
    let loaded = check(
        &doc,
        "post",
        load,
        post(load, &admin, body.clone()).await.unwrap(),
    )
    .await;
    assert_eq!(loaded["residency"]["state"], "loaded");
    let unloaded = check(
        &doc,
        "post",
        unload,
        post(unload, &admin, body.clone()).await.unwrap(),
    )
    .await;
    assert_eq!(unloaded["unload"], "unloaded");
    // A model with extra fields, with a value outside the enum, would not pass.
    let schema = response_schema(&doc, "post", unload, 200, "application/json");
    let mut wrong = unloaded.clone();
    wrong["unload"] = json!("later");
    assert!(!validator(&doc, &schema).is_valid(&wrong));

    residence
        .fail
        .store(true, std::sync::atomic::Ordering::SeqCst);
    for (path, key, body, status) in [
        (load, admin.as_str(), body.clone(), 503),
        (load, admin.as_str(), json!({"model": "svc"}), 400),
        (unload, admin.as_str(), json!({}), 400),
        (unload, admin.as_str(), json!({"model": "nope"}), 404),
        (load, key.as_str(), body.clone(), 403),
        (
            unload,
            "sk-svc-0000000000000000000000000000000000000000",
            body.clone(),
            401,
        ),
    ] {
        let response = post(path, key, body).await.unwrap();
        assert_eq!(response.status(), status, "{path}");
        check(&doc, "post", path, response).await;
    }
}
