//! Whole (non-streamed) completions.

use serde_json::{Value, json};
use svc_test_support::TestApp;

use crate::body;

#[tokio::test]
async fn whole_completion_has_the_spec_shape() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let response = app.chat(&key, &body("svc", "hello there")).await;
    assert_eq!(response.status(), 200);
    let reply: Value = response.json().await.unwrap();
    let id = reply["id"].as_str().unwrap();
    assert!(
        id.starts_with("chatcmpl-") && id.len() > "chatcmpl-".len(),
        "{id}"
    );
    assert_eq!(reply["object"], "chat.completion");
    assert!(reply["created"].as_i64().unwrap() > 1_700_000_000);
    assert_eq!(reply["model"], "svc");
    assert_eq!(reply["choices"].as_array().unwrap().len(), 1);
    let choice = &reply["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(
        choice["message"],
        json!({"role": "assistant", "content": "You said: hello there"})
    );
    assert_eq!(choice["finish_reason"], "stop");
    let usage = &reply["usage"];
    assert_eq!(usage["completion_tokens"], 4);
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + 4
    );
}

#[tokio::test]
async fn max_tokens_stops_with_length() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let mut request = body("svc", "a b c d e f");
    request["max_tokens"] = json!(3);
    let reply: Value = app.chat(&key, &request).await.json().await.unwrap();
    assert_eq!(reply["choices"][0]["finish_reason"], "length");
    assert_eq!(reply["choices"][0]["message"]["content"], "You said: a ");
    assert_eq!(reply["usage"]["completion_tokens"], 3);
}

#[tokio::test]
async fn reasoning_model_returns_reasoning_content() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let reply: Value = app
        .chat(&key, &body("svc-thinking", "why"))
        .await
        .json()
        .await
        .unwrap();
    let message = &reply["choices"][0]["message"];
    assert_eq!(
        message["reasoning_content"],
        "Thinking it over. Done thinking."
    );
    assert_eq!(message["content"], "You said: why");
    let plain: Value = app
        .chat(&key, &body("svc", "why"))
        .await
        .json()
        .await
        .unwrap();
    assert!(
        plain["choices"][0]["message"]
            .get("reasoning_content")
            .is_none()
    );
}

#[tokio::test]
async fn tool_calls_in_openai_shape() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let mut request = body("fake-tools", "weather in Paris?");
    request["tools"] = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let reply: Value = app.chat(&key, &request).await.json().await.unwrap();
    let choice = &reply["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    assert_eq!(
        choice["message"]["tool_calls"],
        json!([{"id": "call_fake0", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}])
    );
}

#[tokio::test]
async fn content_parts_and_full_history_are_accepted() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let request = json!({
        "model": "svc",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "second "}, {"type": "text", "text": "part"}]}
        ],
        "temperature": 0, "top_p": 0.9, "seed": -7, "stop": "never", "user": "u-1",
        "presence_penalty": 0.5, "frequency_penalty": -0.5, "n": 1,
        "response_format": {"type": "json_object"}
    });
    let reply: Value = app.chat(&key, &request).await.json().await.unwrap();
    assert_eq!(
        reply["choices"][0]["message"]["content"],
        "You said: second part"
    );
}

#[tokio::test]
async fn models_list_in_openai_shape() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let list: Value = app
        .client
        .get(app.url("/v1/models"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["object"], "list");
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(&ids[..2], ["svc", "svc-thinking"]);
    for model in list["data"].as_array().unwrap() {
        assert_eq!(model["object"], "model");
        assert_eq!(model.as_object().unwrap().len(), 4, "{model}");
    }
}

#[tokio::test]
async fn logprobs_in_openai_shape() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let mut request = body("svc", "hi");
    request["logprobs"] = json!(true);
    request["top_logprobs"] = json!(2);
    let reply: Value = app.chat(&key, &request).await.json().await.unwrap();
    let logprobs = &reply["choices"][0]["logprobs"];
    assert_eq!(logprobs["refusal"], Value::Null, "{reply}");
    let content = logprobs["content"].as_array().unwrap();
    // The fake engine's tokens are the words of "You said: hi".
    let tokens: Vec<&str> = content
        .iter()
        .map(|t| t["token"].as_str().unwrap())
        .collect();
    assert_eq!(tokens, ["You ", "said: ", "hi"]);
    assert_eq!(
        content[0],
        json!({
            "token": "You ",
            "logprob": -0.5,
            "bytes": [89, 111, 117, 32],
            "top_logprobs": [
                {"token": "You ", "logprob": -0.5, "bytes": [89, 111, 117, 32]},
                {"token": "alt1", "logprob": -1.0, "bytes": [97, 108, 116, 49]},
            ],
        })
    );

    // logprobs alone: no alternatives.
    let mut request = body("svc", "hi");
    request["logprobs"] = json!(true);
    let reply: Value = app.chat(&key, &request).await.json().await.unwrap();
    let content = reply["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    assert_eq!(content.len(), 3);
    assert_eq!(content[2]["top_logprobs"], json!([]));

    // Not asked for (or false): null.
    for extra in [json!({}), json!({"logprobs": false})] {
        let mut request = body("svc", "hi");
        for (k, v) in extra.as_object().unwrap() {
            request[k] = v.clone();
        }
        let reply: Value = app.chat(&key, &request).await.json().await.unwrap();
        assert_eq!(reply["choices"][0]["logprobs"], Value::Null, "{reply}");
    }
}

#[tokio::test]
async fn n_choices_each_with_its_index_and_the_usage_of_all() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let one: Value = app
        .chat(&key, &body("svc", "a b c"))
        .await
        .json()
        .await
        .unwrap();
    let mut request = body("svc", "a b c");
    request["n"] = json!(3);
    request["max_tokens"] = json!(4);
    let reply: Value = app.chat(&key, &request).await.json().await.unwrap();
    let choices = reply["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3, "{reply}");
    for (i, choice) in choices.iter().enumerate() {
        assert_eq!(choice["index"], i);
        assert_eq!(choice["message"]["content"], "You said: a b ");
        assert_eq!(choice["finish_reason"], "length");
    }
    // Every choice's completion tokens; the prompt once.
    assert_eq!(reply["usage"]["completion_tokens"], 12);
    assert_eq!(
        reply["usage"]["prompt_tokens"],
        one["usage"]["prompt_tokens"]
    );
    assert_eq!(
        reply["usage"]["total_tokens"].as_u64().unwrap(),
        one["usage"]["prompt_tokens"].as_u64().unwrap() + 12
    );
}
