//! `POST /v1/rerank` (and `/rerank`, `/v2/rerank`) on the scripted reranker
//! (`fake-rerank`): the Jina/Cohere shape, most relevant first, `top_n` and
//! `return_documents`, the errors naming their parameter, and what every
//! inference gets: the key's scope and model list, rate limits, budgets,
//! usage and metrics.

use serde_json::{Value, json};
use svc_test_support::{FAKE_EMBED_MAX_WORDS, TestApp, fake_relevance};

use crate::expect_error;

async fn rerank(app: &TestApp, path: &str, key: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url(path))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap()
}

const QUERY: &str = "Where do pandas live?";
const DOCUMENTS: [&str; 4] = [
    "Bamboo grows fast.",
    "Pandas live in the mountains of China, where bamboo grows.",
    "Where the river bends, herons live.",
    "The stock market fell.",
];

#[tokio::test]
async fn documents_come_back_most_relevant_first_on_every_path() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let body = json!({"model": "fake-rerank", "query": QUERY,
        "documents": [DOCUMENTS[0], {"text": DOCUMENTS[1]}, DOCUMENTS[2], DOCUMENTS[3]]});
    for path in ["/v1/rerank", "/rerank", "/v2/rerank"] {
        let response = rerank(&app, path, &key, &body).await;
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.headers()["content-type"], "application/json");
        let answer: Value = response.json().await.unwrap();
        assert!(answer["id"].as_str().unwrap().starts_with("rerank-"));
        assert_eq!(answer["model"], "fake-rerank");
        let results = answer["results"].as_array().unwrap();
        let order: Vec<u64> = results
            .iter()
            .map(|r| r["index"].as_u64().unwrap())
            .collect();
        // 4 of 4 query words, 2 of 4 ("where", "live"), then 0 and 0 in order.
        assert_eq!(order, [1, 2, 0, 3], "{path}: {answer}");
        for result in results {
            let i = result["index"].as_u64().unwrap() as usize;
            let score = result["relevance_score"].as_f64().unwrap() as f32;
            assert_eq!(score, fake_relevance(QUERY, DOCUMENTS[i]));
            assert_eq!(result["document"]["text"], DOCUMENTS[i]);
        }
        // Query words (4) and document words plus 3, per document.
        let words: usize = DOCUMENTS.iter().map(|d| d.split(' ').count()).sum();
        let tokens = 4 * (4 + 3) + words;
        assert_eq!(
            answer["usage"],
            json!({"prompt_tokens": tokens, "total_tokens": tokens})
        );
    }
}

#[tokio::test]
async fn top_n_keeps_the_best_and_documents_can_be_left_out() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let body = json!({"model": "fake-rerank", "query": QUERY, "documents": DOCUMENTS,
        "top_n": 2, "return_documents": false});
    let answer: Value = rerank(&app, "/v1/rerank", &key, &body)
        .await
        .json()
        .await
        .unwrap();
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{answer}");
    assert_eq!(results[0]["index"], 1);
    assert_eq!(results[1]["index"], 2);
    assert!(results.iter().all(|r| r.get("document").is_none()));
}

#[tokio::test]
async fn wrong_requests_name_their_parameter() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let long = "w ".repeat(FAKE_EMBED_MAX_WORDS + 1);
    let cases = [
        (
            json!({"model": "fake-rerank", "query": "", "documents": ["a"]}),
            "query",
        ),
        (
            json!({"model": "fake-rerank", "query": "q", "documents": []}),
            "documents",
        ),
        (
            json!({"model": "fake-rerank", "query": "q", "documents": "a"}),
            "documents",
        ),
        (
            json!({"model": "fake-rerank", "query": "q", "documents": ["a", ""]}),
            "documents[1]",
        ),
        (
            json!({"model": "fake-rerank", "query": "q", "documents": ["a", 7]}),
            "documents[1]",
        ),
        (
            json!({"model": "fake-rerank", "query": "q", "documents": ["a", {"title": "t"}]}),
            "documents[1].text",
        ),
        (
            json!({"model": "fake-rerank", "query": "q", "documents": vec!["a"; 1001]}),
            "documents",
        ),
        // Too long for the model: the engine names the document.
        (
            json!({"model": "fake-rerank", "query": "q", "documents": ["a", "b", long]}),
            "documents[2]",
        ),
        (
            json!({"model": "fake-rerank", "query": "q", "documents": ["a"], "top_n": 0}),
            "top_n",
        ),
        // A model that makes text.
        (
            json!({"model": "svc", "query": "q", "documents": ["a"]}),
            "model",
        ),
    ];
    for (body, param) in cases {
        let response = rerank(&app, "/v1/rerank", &key, &body).await;
        expect_error(
            response,
            400,
            "invalid_request_error",
            "invalid_value",
            Some(param),
        )
        .await;
    }
    let missing = rerank(&app, "/v1/rerank", &key, &json!({"model": "fake-rerank"})).await;
    assert_eq!(missing.status(), 400);
    let unknown = rerank(
        &app,
        "/v1/rerank",
        &key,
        &json!({"model": "nope", "query": "q", "documents": ["a"]}),
    )
    .await;
    expect_error(
        unknown,
        404,
        "invalid_request_error",
        "model_not_found",
        Some("model"),
    )
    .await;
    // And chat with the reranking model says which endpoint to use.
    let chat = app.chat(&key, &crate::body("fake-rerank", "hi")).await;
    let message = expect_error(
        chat,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("model"),
    )
    .await;
    assert!(message.contains("/v1/rerank"), "{message}");
}

#[tokio::test]
async fn a_key_needs_model_request_and_the_model_on_its_list() {
    let body = json!({"model": "fake-rerank", "query": "q", "documents": ["a"]});
    crate::needs_model_request_and_the_model_on_the_list("/v1/rerank", &body, "svc").await;
}

#[tokio::test]
async fn reranking_counts_toward_rate_limits_usage_and_metrics() {
    let body =
        json!({"model": "fake-rerank", "query": "one two", "documents": ["one", "two three"]});
    let day =
        crate::counts_toward_limits_usage_and_metrics("/v1/rerank", &body, "fake-rerank").await;
    // Two requests of (2 + 1 + 3) + (2 + 2 + 3) = 13 prompt tokens each.
    assert_eq!(day["prompt_tokens"], 26, "{day}");
    assert_eq!(day["completion_tokens"], 0, "{day}");
}

// The request log took only paths under /v1/: a rerank sent to an alias
// left no row.
#[tokio::test]
async fn every_path_leaves_a_request_log_row_with_its_tokens() {
    let app = TestApp::spawn().await;
    let admin = app.create_admin_key().await;
    let key = app.create_key().await;
    let body =
        json!({"model": "fake-rerank", "query": "one two", "documents": ["one", "two three"]});
    let paths = ["/v1/rerank", "/rerank", "/v2/rerank"];
    for path in paths {
        assert_eq!(rerank(&app, path, &key, &body).await.status(), 200);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let list: Value = app
            .client
            .get(app.url("/v1/organization/request_logs?models[]=fake-rerank"))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let rows = list["data"].as_array().unwrap();
        if rows.len() == paths.len() {
            let mut endpoints: Vec<&str> = rows
                .iter()
                .map(|r| r["endpoint"].as_str().unwrap())
                .collect();
            endpoints.sort_unstable();
            assert_eq!(
                endpoints,
                ["POST /rerank", "POST /v1/rerank", "POST /v2/rerank"]
            );
            assert!(rows.iter().all(|r| r["prompt_tokens"] == 13), "{list}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
