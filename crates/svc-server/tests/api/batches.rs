//! The Batch API (issue 34): files uploaded as `multipart/form-data` and
//! checked line by line; batches that answer every line once, by its
//! `custom_id`, in an output file (2xx) and an error file; cancelling;
//! scopes, projects, budgets and the audit log, as for any endpoint.

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use svc_core::{Budget, BudgetPeriod, BudgetUnit, KeyKind, KeyScope, ModelAccess, Permission};
use svc_server::ServerConfig;
use svc_test_support::{Database, TestApp};

use svc_store::testing::{TestSchema, postgres_url};

on_both_databases!(
    a_chat_batch_answers_every_line_once_in_its_files,
    an_embeddings_batch_returns_vectors,
    a_rerank_batch_returns_ranked_documents,
    a_wrong_line_is_refused_by_its_number_and_nothing_is_kept,
    a_batch_whose_lines_call_another_endpoint_is_refused,
    a_cancelled_batch_ends_with_every_line_accounted_for,
    files_and_batches_need_their_scopes_and_stay_in_their_project,
    a_spent_budget_fails_the_lines_naming_it,
    the_dashboard_shows_a_projects_batches_and_their_files,
    a_batchs_lines_are_charged_at_the_batch_discount,
    an_upload_past_the_projects_quota_is_refused,
    one_key_streams_at_most_four_uploads_at_once,
    an_answer_past_the_projects_quota_fails_its_line_naming_the_quota,
    another_projects_batch_is_not_held_behind_a_large_one,
    a_project_has_a_bounded_number_of_batches_in_progress,
);

/// A server whose files are in its own directory (`TestApp` gives one).
async fn app(database: Database) -> TestApp {
    TestApp::spawn_with(database, ServerConfig::default()).await
}

/// A JSONL file of `n` requests to `url`, each `body(i)`.
fn jsonl(n: usize, url: &str, body: impl Fn(usize) -> Value) -> String {
    (0..n)
        .map(|i| {
            json!({"custom_id": format!("req-{i}"), "method": "POST", "url": url, "body": body(i)})
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `POST /v1/files` with `text` as the file, as the SDKs send it.
async fn upload(app: &TestApp, key: &str, text: &str, purpose: &str) -> reqwest::Response {
    let boundary = "svc-test-boundary-7d1f";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n{purpose}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"input.jsonl\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n{text}\r\n--{boundary}--\r\n"
    );
    app.client
        .post(app.url("/v1/files"))
        .bearer_auth(key)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn uploaded(app: &TestApp, key: &str, text: &str) -> String {
    let response = upload(app, key, text, "batch").await;
    assert_eq!(response.status(), 200);
    let file: Value = response.json().await.unwrap();
    assert_eq!(file["object"], "file");
    assert_eq!(file["purpose"], "batch");
    assert_eq!(file["bytes"], text.len());
    file["id"].as_str().unwrap().to_owned()
}

async fn send(
    app: &TestApp,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = match method {
        "GET" => app.client.get(app.url(path)),
        "DELETE" => app.client.delete(app.url(path)),
        _ => app.client.post(app.url(path)),
    }
    .bearer_auth(key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn create(app: &TestApp, key: &str, file: &str, endpoint: &str) -> (u16, Value) {
    send(
        app,
        key,
        "POST",
        "/v1/batches",
        Some(
            json!({"input_file_id": file, "endpoint": endpoint, "completion_window": "24h",
            "metadata": {"job": "nightly"}}),
        ),
    )
    .await
}

/// Polls the batch until it ends (at most a minute).
async fn ended(app: &TestApp, key: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, batch) = send(app, key, "GET", &format!("/v1/batches/{id}"), None).await;
        assert_eq!(status, 200, "{batch}");
        if ["completed", "failed", "expired", "cancelled"]
            .contains(&batch["status"].as_str().unwrap())
        {
            return batch;
        }
        assert!(Instant::now() < deadline, "the batch never ended: {batch}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A file's lines, parsed.
async fn lines(app: &TestApp, key: &str, file: &Value) -> Vec<Value> {
    let Some(id) = file.as_str() else {
        return Vec::new();
    };
    let response = app
        .client
        .get(app.url(&format!("/v1/files/{id}/content")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn a_chat_batch_answers_every_line_once_in_its_files(database: Database) {
    let app = app(database).await;
    let key = app.create_key().await;
    // 20 lines; the one with index 7 asks for a model that does not exist.
    let text = jsonl(20, "/v1/chat/completions", |i| {
        let model = if i == 7 { "no-such-model" } else { "svc" };
        json!({"model": model, "messages": [{"role": "user", "content": format!("line {i}")}]})
    });
    let file = uploaded(&app, &key, &text).await;
    let (status, batch) = create(&app, &key, &file, "/v1/chat/completions").await;
    assert_eq!(status, 200, "{batch}");
    assert_eq!(batch["object"], "batch");
    assert_eq!(batch["status"], "in_progress");
    assert_eq!(
        batch["request_counts"],
        json!({"total": 20, "completed": 0, "failed": 0})
    );
    assert_eq!(batch["metadata"], json!({"job": "nightly"}));
    assert_eq!(batch["input_file_id"], file);
    let id = batch["id"].as_str().unwrap();
    assert!(id.starts_with("batch_"), "{id}");

    let batch = ended(&app, &key, id).await;
    assert_eq!(batch["status"], "completed", "{batch}");
    assert_eq!(
        batch["request_counts"],
        json!({"total": 20, "completed": 19, "failed": 1})
    );
    // Every line that reached an engine went as background work.
    assert_eq!(app.probe.started.load(SeqCst), 19);
    assert_eq!(app.probe.background.load(SeqCst), 19);
    for at in [
        "in_progress_at",
        "finalizing_at",
        "completed_at",
        "expires_at",
    ] {
        assert!(batch[at].is_i64(), "{at}: {batch}");
    }
    let output = lines(&app, &key, &batch["output_file_id"]).await;
    let errors = lines(&app, &key, &batch["error_file_id"]).await;
    assert_eq!((output.len(), errors.len()), (19, 1));
    // In input order, each custom_id once, each the answer to its own line.
    for (line, i) in output.iter().zip((0..20).filter(|i| *i != 7)) {
        assert_eq!(line["custom_id"], format!("req-{i}"));
        assert!(line["id"].as_str().unwrap().starts_with("batch_req_"));
        assert_eq!(line["error"], Value::Null);
        assert_eq!(line["response"]["status_code"], 200);
        assert!(
            line["response"]["request_id"]
                .as_str()
                .unwrap()
                .starts_with("req_"),
            "{line}"
        );
        let body = &line["response"]["body"];
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(
            body["choices"][0]["message"]["content"],
            format!("You said: line {i}")
        );
    }
    assert_eq!(errors[0]["custom_id"], "req-7");
    assert_eq!(errors[0]["response"]["status_code"], 404);
    assert_eq!(
        errors[0]["response"]["body"]["error"]["code"],
        "model_not_found"
    );

    // The files are the project's, listed newest first.
    let (status, list) = send(&app, &key, "GET", "/v1/files", None).await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{list}");
    assert!(ids.contains(&file.as_str()));
    let (_, output_file) = send(
        &app,
        &key,
        "GET",
        &format!("/v1/files/{}", batch["output_file_id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(output_file["purpose"], "batch_output");
    let (_, listed) = send(&app, &key, "GET", "/v1/batches?limit=1", None).await;
    assert_eq!(listed["data"][0]["id"], id);
    assert_eq!(listed["has_more"], false);

    // Each line was a request of its own, in the metrics as any other.
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(
            "svc_http_requests_total{route=\"/v1/chat/completions\",method=\"POST\",status=\"200\"} 19"
        ),
        "{metrics}"
    );

    // A client's own request is not background work.
    let reply = app
        .chat(
            &key,
            &json!({"model": "svc", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(reply.status(), 200);
    assert_eq!(app.probe.started.load(SeqCst), 20);
    assert_eq!(app.probe.background.load(SeqCst), 19);

    // Deleting the input file leaves the batch; its content is gone.
    let (status, deleted) = send(&app, &key, "DELETE", &format!("/v1/files/{file}"), None).await;
    assert_eq!((status, &deleted["deleted"]), (200, &json!(true)));
    let (status, _) = send(
        &app,
        &key,
        "GET",
        &format!("/v1/files/{file}/content"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = send(&app, &key, "GET", &format!("/v1/batches/{id}"), None).await;
    assert_eq!(status, 200);
}

async fn an_embeddings_batch_returns_vectors(database: Database) {
    let app = app(database).await;
    let key = app.create_key().await;
    let text = jsonl(
        3,
        "/v1/embeddings",
        |i| json!({"model": "fake-embed", "input": format!("text {i}")}),
    );
    let file = uploaded(&app, &key, &text).await;
    let (status, batch) = create(&app, &key, &file, "/v1/embeddings").await;
    assert_eq!(status, 200, "{batch}");
    let batch = ended(&app, &key, batch["id"].as_str().unwrap()).await;
    assert_eq!(
        batch["request_counts"],
        json!({"total": 3, "completed": 3, "failed": 0})
    );
    assert_eq!(batch["error_file_id"], Value::Null);
    assert_eq!(app.probe.background.load(SeqCst), 3);
    for line in lines(&app, &key, &batch["output_file_id"]).await {
        let vector = &line["response"]["body"]["data"][0]["embedding"];
        assert!(vector.as_array().is_some_and(|v| !v.is_empty()), "{line}");
    }
}

async fn a_rerank_batch_returns_ranked_documents(database: Database) {
    let app = app(database).await;
    let key = app.create_key().await;
    let text = jsonl(2, "/v1/rerank", |i| {
        json!({"model": "fake-rerank", "query": format!("word {i}"),
            "documents": ["nothing here", format!("the word {i} is here")]})
    });
    let file = uploaded(&app, &key, &text).await;
    let (status, batch) = create(&app, &key, &file, "/v1/rerank").await;
    assert_eq!(status, 200, "{batch}");
    let batch = ended(&app, &key, batch["id"].as_str().unwrap()).await;
    assert_eq!(
        batch["request_counts"],
        json!({"total": 2, "completed": 2, "failed": 0})
    );
    assert_eq!(app.probe.background.load(SeqCst), 2);
    for line in lines(&app, &key, &batch["output_file_id"]).await {
        let results = &line["response"]["body"]["results"];
        assert_eq!(results[0]["index"], 1, "{line}");
        assert_eq!(results[0]["relevance_score"], 1.0, "{line}");
    }
}

async fn a_wrong_line_is_refused_by_its_number_and_nothing_is_kept(database: Database) {
    let app = app(database).await;
    let key = app.create_key().await;
    let good = jsonl(
        2,
        "/v1/chat/completions",
        |_| json!({"model": "svc", "messages": []}),
    );
    let cases = [
        (format!("{good}\n{{not json"), "line 3: not a request line"),
        (
            format!("{good}\n{}", good.lines().next().unwrap()),
            "line 3: custom_id `req-0` is also on line 1",
        ),
        (
            good.replace("\"POST\"", "\"GET\""),
            "line 1: method must be POST",
        ),
        (
            good.replacen("\"model\":\"svc\"", "\"model\":\"svc\",\"stream\":true", 1),
            "line 1: body.stream",
        ),
        (String::new(), "line 1: the file holds no request"),
    ];
    for (text, message) in cases {
        let response = upload(&app, &key, &text, "batch").await;
        assert_eq!(response.status(), 400, "{text}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["param"], "file", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(message),
            "{body}"
        );
    }
    let response = upload(&app, &key, &good, "fine-tune").await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["param"], "purpose");
    // Not multipart at all.
    let (status, body) = send(&app, &key, "POST", "/v1/files", Some(json!({"file": good}))).await;
    assert_eq!(status, 400, "{body}");
    // Nothing was kept, on the list or on disk.
    let (_, list) = send(&app, &key, "GET", "/v1/files", None).await;
    assert_eq!(list["data"], json!([]), "{list}");
}

async fn a_batch_whose_lines_call_another_endpoint_is_refused(database: Database) {
    let app = app(database).await;
    let key = app.create_key().await;
    let mut text = jsonl(
        2,
        "/v1/chat/completions",
        |_| json!({"model": "svc", "messages": []}),
    );
    text.push('\n');
    text.push_str(&json!({"custom_id": "x", "method": "POST", "url": "/v1/embeddings", "body": {"model": "fake-embed", "input": "a"}}).to_string());
    let file = uploaded(&app, &key, &text).await;
    let (status, body) = create(&app, &key, &file, "/v1/chat/completions").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "input_file_id");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("line 3:"),
        "{body}"
    );
    let (status, body) = create(&app, &key, &file, "/v1/moderations").await;
    assert_eq!(
        (status, body["error"]["param"].as_str()),
        (400, Some("endpoint"))
    );
    let (status, body) = send(&app, &key, "POST", "/v1/batches",
        Some(json!({"input_file_id": file, "endpoint": "/v1/chat/completions", "completion_window": "1h"}))).await;
    assert_eq!(
        (status, body["error"]["param"].as_str()),
        (400, Some("completion_window"))
    );
    let (status, body) = create(
        &app,
        &key,
        "file-0123456789abcdef01234567",
        "/v1/chat/completions",
    )
    .await;
    assert_eq!(
        (status, body["error"]["param"].as_str()),
        (404, Some("input_file_id"))
    );
    let (_, list) = send(&app, &key, "GET", "/v1/batches", None).await;
    assert_eq!(list["data"], json!([]));
}

async fn a_cancelled_batch_ends_with_every_line_accounted_for(database: Database) {
    let app = app(database).await;
    let key = app.create_key().await;
    // fake-slow takes 50 ms a word: 40 lines at 4 at a time take seconds.
    let text = jsonl(
        40,
        "/v1/chat/completions",
        |i| json!({"model": "fake-slow", "messages": [{"role": "user", "content": format!("slow line {i}")}]}),
    );
    let file = uploaded(&app, &key, &text).await;
    let (_, batch) = create(&app, &key, &file, "/v1/chat/completions").await;
    let id = batch["id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (status, cancelling) = send(
        &app,
        &key,
        "POST",
        &format!("/v1/batches/{id}/cancel"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(cancelling["status"], "cancelling", "{cancelling}");
    assert!(cancelling["cancelling_at"].is_i64());
    let batch = ended(&app, &key, &id).await;
    assert_eq!(batch["status"], "cancelled", "{batch}");
    assert!(batch["cancelled_at"].is_i64());
    let output = lines(&app, &key, &batch["output_file_id"]).await;
    let errors = lines(&app, &key, &batch["error_file_id"]).await;
    let done = batch["request_counts"]["completed"].as_u64().unwrap() as usize;
    assert_eq!(output.len(), done);
    assert!(done < 40, "cancelled after every line ran: {batch}");
    // Every line once, in one file or the other.
    let mut seen: Vec<String> = output
        .iter()
        .chain(&errors)
        .map(|l| l["custom_id"].as_str().unwrap().to_owned())
        .collect();
    seen.sort();
    let mut all: Vec<String> = (0..40).map(|i| format!("req-{i}")).collect();
    all.sort();
    assert_eq!(seen, all);
    assert!(
        errors
            .iter()
            .all(|l| l["error"]["code"] == "batch_cancelled"),
        "{errors:?}"
    );
    // Cancelling an ended batch changes nothing.
    let (status, again) = send(
        &app,
        &key,
        "POST",
        &format!("/v1/batches/{id}/cancel"),
        None,
    )
    .await;
    assert_eq!((status, &again["status"]), (200, &json!("cancelled")));
    // The audit log has the file, the batch and the cancel.
    let admin = app.create_admin_key().await;
    let (_, log) = send(
        &app,
        &admin,
        "GET",
        "/v1/organization/audit_logs?limit=50",
        None,
    )
    .await;
    let kinds: Vec<&str> = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    for kind in ["file.created", "batch.created", "batch.cancelled"] {
        assert!(kinds.contains(&kind), "{kind} not in {kinds:?}");
    }
}

async fn files_and_batches_need_their_scopes_and_stay_in_their_project(database: Database) {
    let app = app(database).await;
    let key = app.create_key().await;
    let text = jsonl(
        1,
        "/v1/chat/completions",
        |_| json!({"model": "svc", "messages": []}),
    );
    let file = uploaded(&app, &key, &text).await;
    let (_, batch) = create(&app, &key, &file, "/v1/chat/completions").await;
    let batch = batch["id"].as_str().unwrap().to_owned();

    // A restricted key with model.request only may do neither.
    let restricted = app
        .create_scoped_key(
            None,
            KeyScope {
                kind: KeyKind::Restricted(vec![Permission::ModelRequest]),
                ..KeyScope::default()
            },
        )
        .await;
    let response = upload(&app, &restricted, &text, "batch").await;
    assert_eq!(response.status(), 403);
    let (status, _) = send(
        &app,
        &restricted,
        "GET",
        &format!("/v1/batches/{batch}"),
        None,
    )
    .await;
    assert_eq!(status, 403);
    // With the read scopes it reads, and still may not write.
    let reader = app
        .create_scoped_key(
            None,
            KeyScope {
                kind: KeyKind::Restricted(vec![Permission::FilesRead, Permission::BatchRead]),
                ..KeyScope::default()
            },
        )
        .await;
    let (status, _) = send(&app, &reader, "GET", &format!("/v1/files/{file}"), None).await;
    assert_eq!(status, 200);
    let (status, _) = send(&app, &reader, "GET", &format!("/v1/batches/{batch}"), None).await;
    assert_eq!(status, 200);
    let (status, _) = send(
        &app,
        &reader,
        "POST",
        &format!("/v1/batches/{batch}/cancel"),
        None,
    )
    .await;
    assert_eq!(status, 403);

    // Another project's key sees neither.
    let project = app.create_project("other", ModelAccess(None)).await;
    let other = app
        .create_scoped_key(
            None,
            KeyScope {
                project_id: Some(project.id.clone()),
                ..KeyScope::default()
            },
        )
        .await;
    for path in [
        format!("/v1/files/{file}"),
        format!("/v1/files/{file}/content"),
        format!("/v1/batches/{batch}"),
    ] {
        let (status, body) = send(&app, &other, "GET", &path, None).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    let (status, _) = create(&app, &other, &file, "/v1/chat/completions").await;
    assert_eq!(status, 404);
    let (_, list) = send(&app, &other, "GET", "/v1/files", None).await;
    assert_eq!(list["data"], json!([]));
    let (_, list) = send(&app, &other, "GET", "/v1/batches", None).await;
    assert_eq!(list["data"], json!([]));
}

async fn a_spent_budget_fails_the_lines_naming_it(database: Database) {
    let app = app(database).await;
    let key = app
        .create_scoped_key(
            None,
            KeyScope {
                budget: Some(Budget {
                    limit: 1,
                    unit: BudgetUnit::Tokens,
                    period: BudgetPeriod::Month,
                }),
                ..KeyScope::default()
            },
        )
        .await;
    let text = jsonl(
        6,
        "/v1/chat/completions",
        |i| json!({"model": "svc", "messages": [{"role": "user", "content": format!("spend {i}")}]}),
    );
    let file = uploaded(&app, &key, &text).await;
    let (_, batch) = create(&app, &key, &file, "/v1/chat/completions").await;
    let batch = ended(&app, &key, batch["id"].as_str().unwrap()).await;
    let failed = batch["request_counts"]["failed"].as_u64().unwrap();
    assert!(failed >= 5, "{batch}");
    for line in lines(&app, &key, &batch["error_file_id"]).await {
        assert_eq!(line["response"]["status_code"], 429, "{line}");
        assert_eq!(
            line["response"]["body"]["error"]["code"], "insufficient_quota",
            "{line}"
        );
        assert!(
            line["response"]["body"]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("budget"),
            "{line}"
        );
    }
}

async fn the_dashboard_shows_a_projects_batches_and_their_files(database: Database) {
    let app = app(database).await;
    let project = app.create_project("nightly jobs", ModelAccess(None)).await;
    let key = app
        .create_scoped_key(
            None,
            KeyScope {
                project_id: Some(project.id.clone()),
                ..KeyScope::default()
            },
        )
        .await;
    let text = jsonl(
        3,
        "/v1/chat/completions",
        |i| json!({"model": "svc", "messages": [{"role": "user", "content": format!("page {i}")}]}),
    );
    let file = uploaded(&app, &key, &text).await;
    let (_, batch) = create(&app, &key, &file, "/v1/chat/completions").await;
    let batch = ended(&app, &key, batch["id"].as_str().unwrap()).await;
    let id = batch["id"].as_str().unwrap();
    let output = batch["output_file_id"].as_str().unwrap();

    let (owner, _) = app.signed_in("owner@example.com", true).await;
    let page = owner
        .get(&format!("/dashboard/batches?project={}", project.id.0))
        .await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains(id), "{}", page.body);
    assert!(page.body.contains("nightly jobs"));
    assert!(page.body.contains("completed"));
    let link = format!("/dashboard/batches/{}/files/{output}", project.id.0);
    // The link's slashes are escaped in the page (`&#x2f;`), as minijinja writes them.
    assert!(
        page.body.contains(&link.replace('/', "&#x2f;")),
        "{}",
        page.body
    );
    let download = owner.get(&link).await;
    assert_eq!(download.status, 200);
    assert_eq!(download.body.lines().count(), 3);
    assert!(download.body.contains("You said: page 2"));

    // Someone outside the project sees none of it.
    let (stranger, _) = app.signed_in("stranger@example.com", false).await;
    let page = stranger.get("/dashboard/batches").await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains(id));
    let page = stranger
        .get(&format!("/dashboard/batches?project={}", project.id.0))
        .await;
    assert_eq!(page.status, 404);
    assert_eq!(stranger.get(&link).await.status, 404);
}

async fn a_batchs_lines_are_charged_at_the_batch_discount(database: Database) {
    let mut config = ServerConfig::default();
    config.prices.insert(
        "svc".into(),
        svc_core::ModelPrice {
            input: 100.0,
            output: 1000.0,
            batch_discount: Some(0.5),
            ..svc_core::ModelPrice::default()
        },
    );
    let app = TestApp::spawn_with(database, config).await;
    let admin = app.create_admin_key().await;
    let budgeted = || async {
        let (status, key) = send(
            &app,
            &admin,
            "POST",
            "/v1/organization/projects/proj_default/api_keys",
            Some(json!({"name": "priced", "budget": {"usd": 100, "period": "month"}})),
        )
        .await;
        assert_eq!(status, 200, "{key}");
        (
            key["id"].as_str().unwrap().to_owned(),
            key["value"].as_str().unwrap().to_owned(),
        )
    };
    let spent = |id: String| {
        let admin = admin.clone();
        let app = &app;
        async move {
            // Settled after each answer: read until it stops changing.
            let path = format!("/v1/organization/projects/proj_default/api_keys/{id}");
            let mut last = Value::Null;
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let (_, key) = send(app, &admin, "GET", &path, None).await;
                if key["budget"]["used"] == last["budget"]["used"] {
                    return key["budget"]["used"].as_i64().unwrap();
                }
                last = key;
            }
        }
    };
    let body = |i: usize| json!({"model": "svc", "max_tokens": 8, "messages": [{"role": "user", "content": format!("price me {i}")}]});
    let (asked_id, asked) = budgeted().await;
    for i in 0..4 {
        assert_eq!(app.chat(&asked, &body(i)).await.status(), 200);
    }
    let (batched_id, batched) = budgeted().await;
    let file = uploaded(&app, &batched, &jsonl(4, "/v1/chat/completions", body)).await;
    let (_, batch) = create(&app, &batched, &file, "/v1/chat/completions").await;
    let batch = ended(&app, &batched, batch["id"].as_str().unwrap()).await;
    assert_eq!(batch["request_counts"]["completed"], 4, "{batch}");
    let (full, discounted) = (spent(asked_id).await, spent(batched_id).await);
    assert!(full > 0);
    assert_eq!(discounted * 2, full, "the same requests at half price");
}

async fn an_upload_past_the_projects_quota_is_refused(database: Database) {
    let text = jsonl(
        4,
        "/v1/chat/completions",
        |_| json!({"model": "svc", "messages": []}),
    );
    let app = TestApp::spawn_with(
        database,
        ServerConfig {
            // Two files and their names ("input.jsonl") fit, not three.
            files_quota_bytes: (text.len() + "input.jsonl".len()) * 2 + 10,
            ..ServerConfig::default()
        },
    )
    .await;
    let key = app.create_key().await;
    uploaded(&app, &key, &text).await;
    uploaded(&app, &key, &text).await;
    let response = upload(&app, &key, &text, "batch").await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["param"], "file", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("quota"),
        "{body}"
    );
    let (_, list) = send(&app, &key, "GET", "/v1/files", None).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 2);
    // Another project has its own quota.
    let project = app.create_project("other", ModelAccess(None)).await;
    let other = app
        .create_scoped_key(
            None,
            KeyScope {
                project_id: Some(project.id.clone()),
                ..KeyScope::default()
            },
        )
        .await;
    uploaded(&app, &other, &text).await;
}

/// Opens `POST /v1/files` as `key` and sends the start of a 1 MB file, then
/// nothing more while the connection is kept.
pub(crate) async fn stalled_upload(app: &TestApp, key: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt as _;
    let boundary = "svc-test-boundary-stall";
    let head = format!(
        "POST /v1/files HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: 1000000\r\n\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\n\r\n\
         {{\"custom_id\": ",
        app.addr
    );
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

// Issue 34's note named it: one key could keep any number of uploads
// streaming to disk at once, up to its connection limit.
async fn one_key_streams_at_most_four_uploads_at_once(database: Database) {
    let app = app(database).await;
    let key = app.create_key().await;
    let text = jsonl(
        1,
        "/v1/chat/completions",
        |_| json!({"model": "svc", "messages": []}),
    );
    // Four stalled uploads, then a fifth: refused. (Should the fifth come
    // before the four are in, one of them is the one refused: try again.)
    let mut tries = 0;
    let (mut stalled, refused) = loop {
        tries += 1;
        let mut stalled = Vec::new();
        for _ in 0..4 {
            stalled.push(stalled_upload(&app, &key).await);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let response = upload(&app, &key, &text, "batch").await;
        if response.status() == 429 {
            break (stalled, response.json::<Value>().await.unwrap());
        }
        assert_eq!(response.status(), 200);
        assert!(tries < 10, "a fifth upload was never refused");
    };
    assert_eq!(refused["error"]["code"], "rate_limit_exceeded", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("file upload"),
        "{refused}"
    );
    // Another key is not held back.
    let other = app.create_key().await;
    uploaded(&app, &other, &text).await;
    // A stalled upload given up frees its place.
    stalled.pop();
    let deadline = Instant::now() + Duration::from_secs(20);
    while upload(&app, &key, &text, "batch").await.status() != 200 {
        assert!(Instant::now() < deadline, "the place was never given back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(stalled);
}

/// A key of a new project named `name`.
pub(crate) async fn project_key(app: &TestApp, name: &str) -> String {
    let project = app.create_project(name, ModelAccess(None)).await;
    app.create_scoped_key(
        None,
        KeyScope {
            project_id: Some(project.id.clone()),
            ..KeyScope::default()
        },
    )
    .await
}

async fn an_answer_past_the_projects_quota_fails_its_line_naming_the_quota(database: Database) {
    // Six lines of 100 inputs each: an answer is about 10 kB.
    let text = jsonl(6, "/v1/embeddings", |i| {
        let input: Vec<String> = (0..100).map(|n| format!("line {i} input {n}")).collect();
        json!({"model": "fake-embed", "input": input})
    });
    // The file (and its name), the batch's copy of its lines (about the
    // file again), and room for about two answers.
    let quota = 2 * text.len() + 25_000;
    let app = TestApp::spawn_with(
        database,
        ServerConfig {
            files_quota_bytes: quota,
            batch_concurrency: 1,
            ..ServerConfig::default()
        },
    )
    .await;
    let key = app.create_key().await;
    let file = uploaded(&app, &key, &text).await;
    let (status, batch) = create(&app, &key, &file, "/v1/embeddings").await;
    assert_eq!(status, 200, "{batch}");
    let batch = ended(&app, &key, batch["id"].as_str().unwrap()).await;
    assert_eq!(batch["status"], "completed", "{batch}");
    let counts = &batch["request_counts"];
    let (done, failed) = (
        counts["completed"].as_u64().unwrap(),
        counts["failed"].as_u64().unwrap(),
    );
    eprintln!("quota {quota} bytes: {done} answers kept, {failed} lines past the quota");
    assert_eq!(done + failed, 6, "{batch}");
    assert!((1..=3).contains(&done), "{batch}");
    let output = lines(&app, &key, &batch["output_file_id"]).await;
    let errors = lines(&app, &key, &batch["error_file_id"]).await;
    assert_eq!(output.len() as u64, done);
    for line in &output {
        let vectors = line["response"]["body"]["data"].as_array().unwrap();
        assert_eq!(vectors.len(), 100, "whole answers only");
    }
    assert_eq!(errors.len() as u64, failed);
    for line in &errors {
        assert_eq!(line["response"], Value::Null, "{line}");
        assert_eq!(line["error"]["code"], "quota_exceeded", "{line}");
        let message = line["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("quota of {quota} bytes")),
            "{message}"
        );
        assert!(line["custom_id"].as_str().unwrap().starts_with("req-"));
    }
    // What the project keeps is within its quota: the input file, the
    // output file and the error file (the batch's copy of its lines went
    // with its end).
    let (_, listed) = send(&app, &key, "GET", "/v1/files", None).await;
    let files = listed["data"].as_array().unwrap();
    assert_eq!(files.len(), 3, "{listed}");
    let kept: u64 = files.iter().map(|f| f["bytes"].as_u64().unwrap()).sum();
    assert!((kept as usize) < quota, "{kept} of {quota}");
}

async fn another_projects_batch_is_not_held_behind_a_large_one(database: Database) {
    let app = TestApp::spawn_with(
        database,
        ServerConfig {
            batch_concurrency: 1,
            ..ServerConfig::default()
        },
    )
    .await;
    let (large, small) = (
        project_key(&app, "large").await,
        project_key(&app, "small").await,
    );
    // fake-slow: "You said: slow line N" takes about 250 ms a line.
    let body = |i: usize| json!({"model": "fake-slow", "messages": [{"role": "user", "content": format!("slow line {i}")}]});
    let twenty = uploaded(&app, &large, &jsonl(20, "/v1/chat/completions", body)).await;
    let one = uploaded(&app, &small, &jsonl(1, "/v1/chat/completions", body)).await;
    let (_, first) = create(&app, &large, &twenty, "/v1/chat/completions").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let created = Instant::now();
    let (_, second) = create(&app, &small, &one, "/v1/chat/completions").await;
    let second = ended(&app, &small, second["id"].as_str().unwrap()).await;
    let waited = created.elapsed();
    let (_, first_now) = send(
        &app,
        &large,
        "GET",
        &format!("/v1/batches/{}", first["id"].as_str().unwrap()),
        None,
    )
    .await;
    let before = first_now["request_counts"]["completed"].as_u64().unwrap();
    eprintln!(
        "another project's 1-line batch ended after {waited:?}, with {before} of the 20 lines of the earlier batch answered"
    );
    assert_eq!(second["status"], "completed", "{second}");
    assert!(
        before <= 4,
        "the small batch waited for {before} lines of the large one"
    );
    let first = ended(&app, &large, first["id"].as_str().unwrap()).await;
    assert_eq!(first["request_counts"]["completed"], 20, "{first}");
}

async fn a_project_has_a_bounded_number_of_batches_in_progress(database: Database) {
    let app = TestApp::spawn_with(
        database,
        ServerConfig {
            batch_concurrency: 1,
            ..ServerConfig::default()
        },
    )
    .await;
    let key = app.create_key().await;
    // A line of fake-slow that takes seconds: no batch ends meanwhile.
    let words = vec!["word"; 100].join(" ");
    let text = jsonl(
        1,
        "/v1/chat/completions",
        |_| json!({"model": "fake-slow", "messages": [{"role": "user", "content": words}]}),
    );
    let file = uploaded(&app, &key, &text).await;
    for n in 0..16 {
        let (status, batch) = create(&app, &key, &file, "/v1/chat/completions").await;
        assert_eq!(status, 200, "batch {n}: {batch}");
    }
    let (status, refused) = create(&app, &key, &file, "/v1/chat/completions").await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "input_file_id", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("16 batches in progress"), "{message}");
    let (_, list) = send(&app, &key, "GET", "/v1/batches?limit=100", None).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 16);
    // Another project has its own bound.
    let other = project_key(&app, "other").await;
    let theirs = uploaded(&app, &other, &text).await;
    let (status, batch) = create(&app, &other, &theirs, "/v1/chat/completions").await;
    assert_eq!(status, 200, "{batch}");
}
