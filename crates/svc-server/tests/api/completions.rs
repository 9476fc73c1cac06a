//! `POST /v1/completions` (legacy text completions) on the scripted engine:
//! OpenAI's `text_completion` shape whole and streamed, several prompts and
//! choices, `echo`, the legacy log probabilities, the errors naming their
//! parameter, and what every inference gets: the key's scope and model
//! list, rate limits, usage and metrics.

use serde_json::{Value, json};
use svc_test_support::TestApp;
use svc_test_support::sse::read_sse;

use crate::expect_error;

async fn complete(app: &TestApp, key: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url("/v1/completions"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// The `data:` payloads of a streamed reply, `[DONE]` included as a string.
async fn frames(response: reqwest::Response) -> Vec<Value> {
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let body = response.text().await.unwrap();
    read_sse(&body)
        .into_iter()
        .map(|e| serde_json::from_str(&e.data).unwrap_or(Value::String(e.data)))
        .collect()
}

#[tokio::test]
async fn a_prompt_is_continued_in_openais_shape() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let response = complete(
        &app,
        &key,
        &json!({"model": "svc", "prompt": "the sea is", "max_tokens": 50}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("x-request-id"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "text_completion");
    assert!(body["id"].as_str().unwrap().starts_with("cmpl-"), "{body}");
    assert_eq!(body["model"], "svc");
    let choice = &body["choices"][0];
    assert_eq!(choice["text"], "You said: the sea is");
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(choice["logprobs"], Value::Null);
    // The fake counts a token a word plus one: 3 + 1 in, 5 words out.
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9,
            "prompt_tokens_details": {"cached_tokens": 0}})
    );
}

#[tokio::test]
async fn max_tokens_defaults_to_sixteen_as_with_openai() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let long = "w ".repeat(40);
    let body: Value = complete(&app, &key, &json!({"model": "svc", "prompt": long}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["usage"]["completion_tokens"], 16, "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn prompts_times_n_choices_are_numbered_p_times_n_plus_i_with_echo() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let body: Value = complete(
        &app,
        &key,
        &json!({"model": "svc", "prompt": ["one", "two"], "n": 2, "echo": true}),
    )
    .await
    .json()
    .await
    .unwrap();
    let texts: Vec<&str> = body["choices"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            assert_eq!(c["index"], i);
            c["text"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        texts,
        [
            "oneYou said: one",
            "oneYou said: one",
            "twoYou said: two",
            "twoYou said: two"
        ]
    );
    // Each prompt's tokens once, each choice's 3 words.
    assert_eq!(body["usage"]["prompt_tokens"], 4, "{body}");
    assert_eq!(body["usage"]["completion_tokens"], 12, "{body}");
}

#[tokio::test]
async fn legacy_logprobs_list_tokens_offsets_and_the_likeliest() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let body: Value = complete(
        &app,
        &key,
        &json!({"model": "svc", "prompt": "hé there", "logprobs": 2}),
    )
    .await
    .json()
    .await
    .unwrap();
    let choice = &body["choices"][0];
    assert_eq!(choice["text"], "You said: hé there");
    let logprobs = &choice["logprobs"];
    assert_eq!(
        logprobs["tokens"],
        json!(["You ", "said: ", "hé ", "there"])
    );
    assert_eq!(logprobs["token_logprobs"], json!([-0.5, -0.5, -0.5, -0.5]));
    // Characters, not bytes: "hé " is three characters of four bytes.
    assert_eq!(logprobs["text_offset"], json!([0, 4, 10, 13]));
    // The fake's alternatives: the word itself at -0.5, then alt1 at -1.
    assert_eq!(
        logprobs["top_logprobs"][2],
        json!({"hé ": -0.5, "alt1": -1.0})
    );
}

#[tokio::test]
async fn a_stream_is_text_completion_chunks_then_usage_and_done() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let response = complete(
        &app,
        &key,
        &json!({
            "model": "svc", "prompt": "hi there", "stream": true, "echo": true,
            "stream_options": {"include_usage": true}
        }),
    )
    .await;
    let frames = frames(response).await;
    assert_eq!(frames.last().unwrap(), "[DONE]");
    let chunks = &frames[..frames.len() - 1];
    for chunk in chunks {
        assert_eq!(chunk["object"], "text_completion", "{chunk}");
        assert!(chunk["id"].as_str().unwrap().starts_with("cmpl-"));
    }
    // The echoed prompt first, then the words, then the finish, then the usage.
    assert_eq!(chunks[0]["choices"][0]["text"], "hi there");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(text, "hi thereYou said: hi there");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["choices"][0]["text"], "");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 0}})
    );
    assert!(
        chunks[..chunks.len() - 2]
            .iter()
            .all(|c| c["choices"][0]["finish_reason"].is_null())
    );
}

#[tokio::test]
async fn a_failure_after_the_start_ends_the_stream_with_an_error_frame() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let response = complete(
        &app,
        &key,
        &json!({"model": "fake-fail", "prompt": "a b c d", "stream": true}),
    )
    .await;
    let frames = frames(response).await;
    let last = frames.last().unwrap();
    assert_eq!(last["error"]["type"], "server_error", "{frames:?}");
    assert!(!frames.iter().any(|f| f == "[DONE]"));
    assert_eq!(frames.len(), 3, "two words, then the error: {frames:?}");
}

#[tokio::test]
async fn wrong_requests_name_their_parameter() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let cases = [
        (json!({"model": "svc"}), "prompt"),
        (json!({"model": "svc", "prompt": [1, 2]}), "prompt"),
        (json!({"model": "svc", "prompt": []}), "prompt"),
        (
            json!({"model": "svc", "prompt": "a", "logprobs": 6}),
            "logprobs",
        ),
        (
            json!({"model": "svc", "prompt": "a", "logprobs": 1, "echo": true}),
            "logprobs",
        ),
        (
            json!({"model": "svc", "prompt": "a", "max_tokens": 0}),
            "max_tokens",
        ),
        (
            json!({"model": "svc", "prompt": "a", "best_of": 2}),
            "best_of",
        ),
        (json!({"model": "svc", "prompt": "a", "top_p": 2}), "top_p"),
        // The scripted model, like the default one, has no fill-in-the-middle tokens.
        (
            json!({"model": "svc", "prompt": "a", "suffix": "b"}),
            "suffix",
        ),
        // A model that makes embeddings.
        (json!({"model": "fake-embed", "prompt": "a"}), "model"),
    ];
    for (body, param) in cases {
        let response = complete(&app, &key, &body).await;
        expect_error(
            response,
            400,
            "invalid_request_error",
            "invalid_value",
            Some(param),
        )
        .await;
    }
    let unknown = complete(&app, &key, &json!({"model": "nope", "prompt": "a"})).await;
    expect_error(
        unknown,
        404,
        "invalid_request_error",
        "model_not_found",
        Some("model"),
    )
    .await;
    let too_long = complete(&app, &key, &json!({"model": "fake-tiny", "prompt": "a"})).await;
    expect_error(
        too_long,
        400,
        "invalid_request_error",
        "context_length_exceeded",
        Some("prompt"),
    )
    .await;
}

#[tokio::test]
async fn a_key_needs_model_request_and_the_model_on_its_list() {
    let body = json!({"model": "svc", "prompt": "a"});
    crate::needs_model_request_and_the_model_on_the_list("/v1/completions", &body, "fake-slow")
        .await;
}

#[tokio::test]
async fn completions_count_toward_rate_limits_usage_and_metrics() {
    let body = json!({"model": "svc", "prompt": "one two"});
    let day = crate::counts_toward_limits_usage_and_metrics("/v1/completions", &body, "svc").await;
    // 2 words + 1 in, "You said: one two" (4 words) out, twice.
    assert_eq!(day["prompt_tokens"], 6, "{day}");
    assert_eq!(day["completion_tokens"], 8, "{day}");
}

/// Each prompt's choices are generations queued on their own: one request
/// may ask for at most 32 in all, half the embedded engine's queue, so that
/// it cannot fill the queue other clients wait in. (It could ask for 128.)
#[tokio::test]
async fn one_request_asks_for_at_most_32_generations() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let cases = [
        (json!({"model": "svc", "prompt": vec!["a"; 33]}), "prompt"),
        (
            json!({"model": "svc", "prompt": vec!["a"; 17], "n": 2}),
            "n",
        ),
        (json!({"model": "svc", "prompt": "a", "n": 33}), "n"),
    ];
    for (body, param) in cases {
        let response = complete(&app, &key, &body).await;
        expect_error(
            response,
            400,
            "invalid_request_error",
            "invalid_value",
            Some(param),
        )
        .await;
    }
    let started = |app: &TestApp| app.probe.started.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(started(&app), 0, "nothing was queued");
    let body: Value = complete(
        &app,
        &key,
        &json!({"model": "svc", "prompt": vec!["a"; 16], "n": 2}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(body["choices"].as_array().unwrap().len(), 32);
    assert_eq!(started(&app), 16, "a generation a prompt");
}
