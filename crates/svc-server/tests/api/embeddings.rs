//! `POST /v1/embeddings` on the scripted embedder (`fake-embed`): OpenAI's
//! shape in both encodings, the errors naming their parameter, and what
//! every inference gets: the key's scope and model list, rate limits,
//! budgets, usage and metrics.

use base64::Engine as _;
use serde_json::{Value, json};
use svc_test_support::{FAKE_EMBED_MAX_WORDS, TestApp, fake_vector};

use crate::expect_error;

async fn embed(app: &TestApp, key: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url("/v1/embeddings"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap()
}

fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
}

#[tokio::test]
async fn a_list_input_gets_a_vector_each_in_openais_shape() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let texts = ["the cat sat", "a banana", "one"];
    let response = embed(&app, &key, &json!({"model": "fake-embed", "input": texts})).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(response.headers().contains_key("x-request-id"));
    let list: Value = response.json().await.unwrap();
    assert_eq!(list["object"], "list");
    assert_eq!(list["model"], "fake-embed");
    let data = list["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    for (i, (item, text)) in data.iter().zip(texts).enumerate() {
        assert_eq!(item["object"], "embedding");
        assert_eq!(item["index"], i);
        let got: Vec<f32> = serde_json::from_value(item["embedding"].clone()).unwrap();
        assert!(close(&got, &fake_vector(text)), "{item}");
    }
    // A token a word plus two markers an input.
    assert_eq!(
        list["usage"],
        json!({"prompt_tokens": 12, "total_tokens": 12})
    );
}

#[tokio::test]
async fn base64_vectors_are_little_endian_floats() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let body = json!({"model": "fake-embed", "input": "a banana", "encoding_format": "base64"});
    let list: Value = embed(&app, &key, &body).await.json().await.unwrap();
    let text = list["data"][0]["embedding"].as_str().unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap();
    let got: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(got, fake_vector("a banana"));
}

#[tokio::test]
async fn wrong_requests_name_their_parameter() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let cases = [
        (json!({"model": "fake-embed", "input": ""}), "input"),
        (json!({"model": "fake-embed", "input": []}), "input"),
        (json!({"model": "fake-embed", "input": [1, -2]}), "input"),
        (json!({"model": "fake-embed", "input": {"a": 1}}), "input"),
        (
            json!({"model": "fake-embed", "input": vec!["x"; 2049]}),
            "input",
        ),
        (
            json!({"model": "fake-embed", "input": "w ".repeat(FAKE_EMBED_MAX_WORDS + 1)}),
            "input",
        ),
        (
            json!({"model": "fake-embed", "input": "a", "encoding_format": "int8"}),
            "encoding_format",
        ),
        (
            json!({"model": "fake-embed", "input": "a", "dimensions": 0}),
            "dimensions",
        ),
        (
            json!({"model": "fake-embed", "input": "a", "dimensions": 2}),
            "dimensions",
        ),
        // A model that makes text.
        (json!({"model": "svc", "input": "a"}), "model"),
    ];
    for (body, param) in cases {
        let response = embed(&app, &key, &body).await;
        expect_error(
            response,
            400,
            "invalid_request_error",
            "invalid_value",
            Some(param),
        )
        .await;
    }
    let missing = embed(&app, &key, &json!({"model": "fake-embed"})).await;
    assert_eq!(missing.status(), 400);
    let unknown = embed(&app, &key, &json!({"model": "nope", "input": "a"})).await;
    expect_error(
        unknown,
        404,
        "invalid_request_error",
        "model_not_found",
        Some("model"),
    )
    .await;
    // And chat with the embedding model says which endpoint to use.
    let chat = app.chat(&key, &crate::body("fake-embed", "hi")).await;
    let message = expect_error(
        chat,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("model"),
    )
    .await;
    assert!(message.contains("/v1/embeddings"), "{message}");
}

#[tokio::test]
async fn a_key_needs_model_request_and_the_model_on_its_list() {
    let body = json!({"model": "fake-embed", "input": "a"});
    crate::needs_model_request_and_the_model_on_the_list("/v1/embeddings", &body, "svc").await;
}

#[tokio::test]
async fn embeddings_count_toward_rate_limits_usage_and_metrics() {
    let body = json!({"model": "fake-embed", "input": ["one two", "three"]});
    let day =
        crate::counts_toward_limits_usage_and_metrics("/v1/embeddings", &body, "fake-embed").await;
    // Two requests of 7 prompt tokens each.
    assert_eq!(day["prompt_tokens"], 14, "{day}");
    assert_eq!(day["completion_tokens"], 0, "{day}");
}

#[tokio::test]
async fn a_spent_token_budget_stops_embeddings() {
    let app = TestApp::spawn().await;
    let admin = app.create_admin_key().await;
    let created: Value = app
        .client
        .post(app.url("/v1/organization/projects/proj_default/api_keys"))
        .bearer_auth(&admin)
        .json(&json!({"name": "budgeted", "budget": {"tokens": 20, "period": "month"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key = created["value"].as_str().unwrap();
    // 3 words + 2 markers = 5 tokens a request: four fit in 20.
    let body = json!({"model": "fake-embed", "input": "one two three"});
    let mut served = 0;
    loop {
        let response = embed(&app, key, &body).await;
        if response.status() != 200 {
            expect_error(
                response,
                429,
                "insufficient_quota",
                "insufficient_quota",
                None,
            )
            .await;
            break;
        }
        assert!(response.headers().contains_key("x-budget-remaining-tokens"));
        served += 1;
        assert!(served <= 6, "the budget never stopped the key");
        // Let the settlement in before the next.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!((3..=5).contains(&served), "served {served}");
}
