//! End to end: `/v1/audio/*` on the real svc server, a model routed to an
//! upstream engine in front of the fake upstream, which says what it
//! received. The upload reaches the upstream as the client sent it (under
//! the endpoint's model name), the answer comes back as the upstream wrote
//! it, and usage counts seconds of audio and characters of speech.

#![expect(
    clippy::unwrap_used,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use svc_core::Engine;
use svc_core::usage::UsageStore as _;
use svc_engine_upstream::{EndpointConfig, UpstreamEngine, UpstreamOptions};
use svc_server::{ModelRegistry, ModelRoute, ServerConfig};
use svc_test_support::{Database, FakeUpstream, Probe, TestApp};

async fn app_in_front_of(fake: &FakeUpstream, config: ServerConfig) -> TestApp {
    let options = UpstreamOptions {
        first_byte_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(2),
        ..UpstreamOptions::default()
    };
    let engine = UpstreamEngine::new(
        vec![EndpointConfig::new(&fake.base_url, "their-whisper")],
        options,
    )
    .unwrap();
    let engine: Arc<dyn Engine> = Arc::new(engine);
    let models = ModelRegistry::new(vec![ModelRoute {
        id: "up".into(),
        engine,
        reasoning: false,
        created: 1_700_000_000,
        owned_by: "svc".into(),
        default_system_prompt: None,
        fallbacks: svc_server::Fallbacks::default(),
    }]);
    TestApp::spawn_models(Database::Sqlite, config, models, Arc::new(Probe::default())).await
}

/// A PCM WAV file of `seconds` at 16 kHz, 16-bit mono, its samples a ramp.
fn wav(seconds: u32) -> Vec<u8> {
    let data = 32_000 * seconds;
    let mut out = Vec::new();
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    for field in [16u32, 1 | (1 << 16), 16_000, 32_000, 2 | (16 << 16)] {
        out.extend_from_slice(&field.to_le_bytes());
    }
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data.to_le_bytes());
    out.extend((0..data).map(|i| (i % 251) as u8));
    out
}

const BOUNDARY: &str = "test-boundary-7";

/// A `multipart/form-data` body of `fields` and then the file.
fn form(fields: &[(&str, &str)], file: Option<(&str, &str, &[u8])>) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    if let Some((filename, content_type, bytes)) = file {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\nContent-Type: {content_type}\r\n\r\n")
                .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

async fn upload(app: &TestApp, path: &str, key: &str, body: Vec<u8>) -> reqwest::Response {
    app.client
        .post(app.url(path))
        .bearer_auth(key)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(body)
        .send()
        .await
        .unwrap()
}

fn sum(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0u64, |sum, b| sum.wrapping_add(u64::from(*b)))
}

/// The seconds and characters recorded for model `up`, once the ledger
/// has written them (it does every second).
async fn audio_usage(app: &TestApp, seconds: i64, characters: i64) {
    let mut seen = (0, 0);
    for _ in 0..50 {
        let rows = app
            .store
            .usage_by_model("2000-01-01", "9999-12-31")
            .await
            .unwrap();
        seen = rows
            .iter()
            .filter(|r| r.model == "up")
            .fold((0, 0), |(s, c), r| (s + r.audio_seconds, c + r.characters));
        if seen == (seconds, characters) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        seen,
        (seconds, characters),
        "seconds and characters of `up`"
    );
}

#[tokio::test]
async fn an_upload_reaches_the_upstream_as_sent_and_its_seconds_are_counted() {
    let fake = FakeUpstream::start().await;
    let files = tempfile::tempdir().unwrap();
    let app = app_in_front_of(&fake, files_in(&files)).await;
    let key = app.create_key().await;
    let audio = wav(3);

    let body = form(
        &[("model", "up"), ("language", "de"), ("prompt", "Grüße")],
        Some(("meeting.wav", "audio/wav", &audio)),
    );
    let response = upload(&app, "/v1/audio/transcriptions", &key, body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(
        answer["text"],
        format!("{} bytes of meeting.wav", audio.len())
    );
    let received = fake.last_audio().unwrap();
    assert_eq!(received["path"], "/v1/audio/transcriptions");
    assert_eq!(
        received["fields"],
        json!({"model": "their-whisper", "language": "de", "prompt": "Grüße"}),
        "the endpoint's model name, the client's fields"
    );
    assert_eq!(
        received["file"],
        json!({"filename": "meeting.wav", "content_type": "audio/wav",
               "bytes": audio.len(), "sum": sum(&audio)})
    );

    // The upstream's own count (json's usage.seconds: 96,044 bytes at
    // 32,000 a second, rounded up) is what counts: 4 seconds.
    audio_usage(&app, 4, 0).await;

    // Subtitles come back as the upstream wrote them; text says no length,
    // so the WAV header's (3 s) counts.
    let body = form(
        &[("model", "up"), ("response_format", "srt")],
        Some(("a.wav", "audio/wav", &audio)),
    );
    let response = upload(&app, "/v1/audio/transcriptions", &key, body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
    let srt = response.text().await.unwrap();
    assert!(
        srt.starts_with("1\n00:00:00,000 --> 00:00:04,000\n"),
        "{srt}"
    );
    audio_usage(&app, 8, 0).await;
    let body = form(
        &[("model", "up"), ("response_format", "text")],
        Some(("a.wav", "audio/wav", &audio)),
    );
    let response = upload(&app, "/v1/audio/translations", &key, body).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert_eq!(
        text,
        format!("translated: {} bytes of a.wav\n", audio.len())
    );
    assert_eq!(fake.last_audio().unwrap()["path"], "/v1/audio/translations");
    audio_usage(&app, 11, 0).await;

    assert!(
        left_in(&files).is_empty(),
        "the uploads are removed once answered"
    );
}

/// The config of an app whose files (and uploads, while needed) are in
/// `dir`.
fn files_in(dir: &tempfile::TempDir) -> ServerConfig {
    ServerConfig {
        files_dir: Some(dir.path().to_owned()),
        ..ServerConfig::default()
    }
}

/// What is in `dir` (uploads being written are `.audio-` files).
fn left_in(dir: &tempfile::TempDir) -> Vec<String> {
    std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[tokio::test]
async fn a_wrong_upload_is_a_400_or_413_naming_what_is_wrong_and_reaches_nobody() {
    let fake = FakeUpstream::start().await;
    let files = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        audio_max_bytes: 100_000,
        ..files_in(&files)
    };
    let app = app_in_front_of(&fake, config).await;
    let key = app.create_key().await;
    let audio = wav(1);
    for (fields, file, param) in [
        (&[("language", "de")][..], true, "model"),
        (&[("model", "up")], false, "file"),
        (
            &[("model", "up"), ("response_format", "xml")],
            true,
            "response_format",
        ),
        (
            &[("model", "up"), ("temperature", "1.5")],
            true,
            "temperature",
        ),
        (&[("model", "up"), ("stream", "true")], true, "stream"),
    ] {
        let body = form(fields, file.then_some(("a.wav", "audio/wav", &audio[..])));
        let response = upload(&app, "/v1/audio/transcriptions", &key, body).await;
        assert_eq!(response.status(), 400, "{fields:?}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["param"], param, "{error}");
        assert_eq!(error["error"]["type"], "invalid_request_error");
    }
    let response = upload(
        &app,
        "/v1/audio/transcriptions",
        &key,
        form(&[("model", "nope")], Some(("a.wav", "audio/wav", &audio))),
    )
    .await;
    assert_eq!(response.status(), 404);
    let big = wav(4);
    let response = upload(
        &app,
        "/v1/audio/transcriptions",
        &key,
        form(&[("model", "up")], Some(("a.wav", "audio/wav", &big))),
    )
    .await;
    assert_eq!(response.status(), 413);
    let response = app
        .client
        .post(app.url("/v1/audio/transcriptions"))
        .bearer_auth(&key)
        .json(&json!({"model": "up"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert!(fake.last_audio().is_none(), "nothing reached the upstream");
    assert!(left_in(&files).is_empty(), "nothing is left on disk");
}

// What the uploads in progress hold on disk is bounded server-wide
// (`uploads_disk_bytes`), whatever the keys: an upload past it is a 503
// (retry shortly) with nothing left behind, and its room is given back.
#[tokio::test]
async fn uploads_past_the_servers_room_on_disk_are_a_503_and_leave_nothing() {
    let fake = FakeUpstream::start().await;
    let files = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        uploads_disk_bytes: 100_000,
        ..files_in(&files)
    };
    let app = app_in_front_of(&fake, config).await;
    let key = app.create_key().await;
    let send = |audio: Vec<u8>| {
        upload(
            &app,
            "/v1/audio/transcriptions",
            &key,
            form(&[("model", "up")], Some(("a.wav", "audio/wav", &audio))),
        )
    };
    for round in 0..2 {
        let response = send(wav(4)).await;
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["retry-after"], "1");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], "upload_space_full", "{error}");
        assert_eq!(error["error"]["type"], "server_error", "{error}");
        if round == 0 {
            assert!(fake.last_audio().is_none(), "nothing reached the upstream");
        }
        assert!(left_in(&files).is_empty(), "nothing is left on disk");
        // The room the refused upload took is given back, and so is the
        // room of one answered.
        let response = send(wav(2)).await;
        assert_eq!(response.status(), 200);
        assert!(left_in(&files).is_empty());
    }
}

#[tokio::test]
async fn speech_streams_back_as_the_upstream_makes_it_and_counts_characters() {
    let fake = FakeUpstream::start().await;
    let app = app_in_front_of(&fake, ServerConfig::default()).await;
    let key = app.create_key().await;
    let speak = |body: Value| {
        app.client
            .post(app.url("/v1/audio/speech"))
            .bearer_auth(&key)
            .json(&body)
            .send()
    };
    let response = speak(
        json!({"model": "up", "input": "Grüß dich", "voice": "alloy",
        "response_format": "wav", "speed": 1.25}),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "audio/wav");
    let sent = fake.last_request().unwrap();
    assert_eq!(
        sent,
        json!({"model": "their-whisper", "input": "Grüß dich", "voice": "alloy",
               "response_format": "wav", "speed": 1.25})
    );
    let mut pieces = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(piece) = futures::StreamExt::next(&mut stream).await {
        pieces.push(piece.unwrap());
    }
    assert!(pieces.len() >= 2, "streamed as it came: {pieces:?}");
    let audio: Vec<u8> = pieces.concat();
    assert_eq!(audio, "fmtwGrüß dichGrüß dichGrüß dich".as_bytes());
    audio_usage(&app, 0, 9).await;

    let response = speak(json!({"model": "up", "input": "", "voice": "alloy"}))
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["param"], "input");
}

#[tokio::test]
async fn a_spend_budget_is_charged_the_seconds_at_the_models_price() {
    let fake = FakeUpstream::start().await;
    let files = tempfile::tempdir().unwrap();
    let mut config = files_in(&files);
    // 10 cents a second: the upstream's 4 seconds cost $0.40.
    config.prices.insert(
        "up".into(),
        svc_core::ModelPrice {
            audio_minute: 6.0,
            ..svc_core::ModelPrice::default()
        },
    );
    let app = app_in_front_of(&fake, config).await;
    let admin = app.create_admin_key().await;
    let created: Value = app
        .client
        .post(app.url("/v1/organization/projects/proj_default/api_keys"))
        .bearer_auth(&admin)
        .json(&json!({"name": "audio", "budget": {"usd": 0.5, "period": "day"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key = created["value"].as_str().unwrap();
    let audio = wav(3);
    let transcribe = || {
        upload(
            &app,
            "/v1/audio/transcriptions",
            key,
            form(&[("model", "up")], Some(("a.wav", "audio/wav", &audio))),
        )
    };
    let first = transcribe().await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["x-budget-limit-usd"], "0.5");
    // Charged its header's 3 seconds ($0.30) up front.
    assert_eq!(first.headers()["x-budget-remaining-usd"], "0.2");
    // Settled to the upstream's 4 ($0.40); the next one's $0.30 passes the
    // budget (as a request that crosses it does), and then it is spent.
    let second = transcribe().await;
    assert_eq!(second.status(), 200);
    assert_eq!(second.headers()["x-budget-remaining-usd"], "0");
    let third = transcribe().await;
    assert_eq!(third.status(), 429);
    let error: Value = third.json().await.unwrap();
    assert_eq!(error["error"]["code"], "insufficient_quota", "{error}");
    audio_usage(&app, 8, 0).await;
    let budget: Value = app
        .client
        .get(app.url(&format!(
            "/v1/organization/projects/proj_default/api_keys/{}",
            created["id"].as_str().unwrap()
        )))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        budget["budget"]["used"], 800_000,
        "two times 4 seconds at 10 cents: {budget}"
    );
}
