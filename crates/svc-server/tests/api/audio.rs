//! `/v1/audio/*` on the scripted audio model (`fake-speech`): what every
//! inference gets (the key's scope and model list, rate limits, usage,
//! metrics, the request log), a model that does not do audio refused
//! naming `model`, and the Batch API refusing audio lines (an upload is not
//! JSON). The upstream path, byte for byte, is
//! `svc-engine-upstream/tests/audio.rs`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use svc_core::budget::{Budget, BudgetPeriod, BudgetUnit};
use svc_core::{KeyLimits, KeyScope, ModelAccess};
use svc_server::ServerConfig;
use svc_test_support::TestApp;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::expect_error;

pub(crate) fn speech(model: &str) -> Value {
    json!({"model": model, "input": "Hello there", "voice": "alloy"})
}

const BOUNDARY: &str = "audio-test-boundary";

pub(crate) async fn transcribe(
    app: &TestApp,
    key: &str,
    model: &str,
    audio: &[u8],
) -> reqwest::Response {
    transcribe_as(app, key, model, "json", audio).await
}

/// A transcript of `audio` asked for in `format` (the scripted model says
/// how long the audio was, a second per 32,000 bytes, except in `text`).
async fn transcribe_as(
    app: &TestApp,
    key: &str,
    model: &str,
    format: &str,
    audio: &[u8],
) -> reqwest::Response {
    let mut body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n{model}\r\n\
         --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"response_format\"\r\n\r\n{format}\r\n\
         --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.mp3\"\r\n\
         Content-Type: audio/mpeg\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(audio);
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    app.client
        .post(app.url("/v1/audio/transcriptions"))
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

#[tokio::test]
async fn a_key_needs_model_request_and_the_model_on_its_list() {
    crate::needs_model_request_and_the_model_on_the_list(
        "/v1/audio/speech",
        &speech("fake-speech"),
        "svc",
    )
    .await;
}

#[tokio::test]
async fn speech_counts_toward_rate_limits_usage_and_metrics() {
    crate::counts_toward_limits_usage_and_metrics(
        "/v1/audio/speech",
        &speech("fake-speech"),
        "fake-speech",
    )
    .await;
}

#[tokio::test]
async fn transcripts_and_speech_are_counted_in_seconds_and_characters() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let heard = transcribe(&app, &key, "fake-speech", &[7u8; 40_000]).await;
    assert_eq!(heard.status(), 200);
    let text: Value = heard.json().await.unwrap();
    assert_eq!(text["text"], "40000 bytes of a.mp3");
    let spoken = app
        .client
        .post(app.url("/v1/audio/speech"))
        .bearer_auth(&key)
        .json(&speech("fake-speech"))
        .send()
        .await
        .unwrap();
    assert_eq!(spoken.status(), 200);
    assert_eq!(spoken.headers()["content-type"], "audio/mpeg");
    assert_eq!(spoken.bytes().await.unwrap(), "Hello there".as_bytes());
    let metrics = app.metrics().await;
    // 40,000 bytes at 32,000 a second, rounded up; 11 characters.
    for line in [
        "svc_audio_total{model=\"fake-speech\",kind=\"seconds\"} 2",
        "svc_audio_total{model=\"fake-speech\",kind=\"characters\"} 11",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    // OpenAI's usage API has them by day, each at its own endpoint, and
    // not among the completions. Usage is kept by key, day and model, so a
    // model that both transcribes and speaks (this one) has its requests
    // counted at both.
    let admin = app.create_admin_key().await;
    let today = svc_core::now() - svc_core::now().rem_euclid(86_400);
    let usage = |endpoint: &'static str| {
        let request = app
            .client
            .get(app.url(&format!(
                "/v1/organization/usage/{endpoint}?start_time={today}&group_by[]=model"
            )))
            .bearer_auth(&admin)
            .send();
        async move {
            let page: Value = request.await.unwrap().json().await.unwrap();
            page["data"][0]["results"].clone()
        }
    };
    let mut transcribed = Value::Null;
    for _ in 0..50 {
        transcribed = usage("audio_transcriptions").await;
        if transcribed.as_array().is_some_and(|r| !r.is_empty()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        transcribed,
        json!([{"object": "organization.usage.audio_transcriptions.result", "seconds": 2,
            "num_model_requests": 2, "project_id": null, "user_id": null,
            "api_key_id": null, "model": "fake-speech"}])
    );
    assert_eq!(
        usage("audio_speeches").await,
        json!([{"object": "organization.usage.audio_speeches.result", "characters": 11,
            "num_model_requests": 2, "project_id": null, "user_id": null,
            "api_key_id": null, "model": "fake-speech"}])
    );
    assert_eq!(usage("completions").await, json!([]));
    // Each request leaves a request log row naming the model.
    let mut rows = Value::Null;
    for _ in 0..50 {
        rows = app
            .client
            .get(app.url("/v1/organization/request_logs?models[]=fake-speech"))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if rows["data"].as_array().is_some_and(|r| r.len() == 2) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mut endpoints: Vec<&str> = rows["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["endpoint"].as_str().unwrap())
        .collect();
    endpoints.sort_unstable();
    assert_eq!(
        endpoints,
        ["POST /v1/audio/speech", "POST /v1/audio/transcriptions"],
        "{rows}"
    );
}

#[tokio::test]
async fn a_model_without_audio_is_refused_naming_model() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let refused = transcribe(&app, &key, "svc", b"ID3 audio").await;
    let message = expect_error(
        refused,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("model"),
    )
    .await;
    assert_eq!(
        message,
        "model svc does not transcribe audio; it serves generation (POST /v1/chat/completions)"
    );
    let refused = app
        .client
        .post(app.url("/v1/audio/speech"))
        .bearer_auth(&key)
        .json(&speech("svc"))
        .send()
        .await
        .unwrap();
    expect_error(
        refused,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("model"),
    )
    .await;
}

#[tokio::test]
async fn a_batch_line_for_audio_is_refused() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let line = json!({"custom_id": "a", "method": "POST", "url": "/v1/audio/speech",
        "body": speech("fake-speech")});
    let body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
         --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\r\n{line}\r\n--{BOUNDARY}--\r\n"
    );
    let refused = app
        .client
        .post(app.url("/v1/files"))
        .bearer_auth(&key)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    let message = expect_error(
        refused,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("file"),
    )
    .await;
    assert!(message.contains("/v1/audio/speech"), "{message}");
}

/// A 16-bit PCM WAV file of `seconds` at `rate` Hz and `channels`
/// channels; `byte_rate` as its header says it (`None`: the true one).
fn wav(rate: u32, channels: u16, seconds: u32, byte_rate: Option<u32>) -> Vec<u8> {
    let align = channels * 2;
    let data = rate * u32::from(align) * seconds;
    let mut out = Vec::new();
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&channels.to_le_bytes());
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&byte_rate.unwrap_or(rate * u32::from(align)).to_le_bytes());
    out.extend_from_slice(&align.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data.to_le_bytes());
    out.resize(out.len() + data as usize, 0);
    out
}

/// The seconds of audio `/metrics` counts for `fake-speech`.
async fn seconds_counted(app: &TestApp) -> u64 {
    let metrics = app.metrics().await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("svc_audio_total{model=\"fake-speech\",kind=\"seconds\"} "))
        .map_or(0, |n| n.parse().unwrap())
}

// Issue 61: the bill was `data / byte_rate` from the WAV header when the
// model said no length, so `byte_rate = 0xFFFFFFFF` made 8 MiB, 262 s of
// audio cost a second. The header's fields must agree, and the audio is
// its frames at its sample rate.
#[tokio::test]
async fn a_wav_header_that_lies_about_its_length_is_refused_naming_file() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let lying = wav(16_000, 1, 10, Some(u32::MAX));
    let refused = transcribe_as(&app, &key, "fake-speech", "text", &lying).await;
    let message = expect_error(
        refused,
        400,
        "invalid_request_error",
        "invalid_value",
        Some("file"),
    )
    .await;
    assert!(message.contains("byte_rate"), "{message}");
    assert_eq!(seconds_counted(&app).await, 0);
    // The same audio with a true header: its ten seconds.
    let honest = wav(16_000, 1, 10, None);
    let heard = transcribe_as(&app, &key, "fake-speech", "text", &honest).await;
    assert_eq!(heard.status(), 200);
    assert_eq!(seconds_counted(&app).await, 10);
}

// Issue 61: a file whose length is not read here was counted at 16,000
// bytes a second, 8 to 20 times too little for low-bitrate Opus.
#[tokio::test]
async fn a_file_not_measured_is_charged_its_bound_when_the_model_says_no_length() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let heard = transcribe_as(&app, &key, "fake-speech", "text", &[7u8; 40_000]).await;
    assert_eq!(heard.status(), 200);
    // 40,000 bytes at 500 a second (4 kbit/s).
    assert_eq!(seconds_counted(&app).await, 80);
    // Where the model counts the audio, its count stands.
    let heard = transcribe_as(&app, &key, "fake-speech", "json", &[7u8; 40_000]).await;
    assert_eq!(heard.status(), 200);
    assert_eq!(seconds_counted(&app).await, 82);
}

#[tokio::test]
async fn the_larger_of_the_measured_length_and_the_models_count_is_charged() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    // Four seconds at 8 kHz: 64,044 bytes, which the model counts as 3 s.
    let slow = wav(8_000, 1, 4, None);
    let heard = transcribe_as(&app, &key, "fake-speech", "json", &slow).await;
    assert_eq!(heard.status(), 200);
    assert_eq!(seconds_counted(&app).await, 4);
    // A second at 48 kHz stereo: 192,044 bytes, which the model counts as
    // 7 s.
    let rich = wav(48_000, 2, 1, None);
    let heard = transcribe_as(&app, &key, "fake-speech", "json", &rich).await;
    assert_eq!(heard.status(), 200);
    assert_eq!(seconds_counted(&app).await, 11);
}

/// Opens `POST /v1/audio/transcriptions` declaring an 8 MiB form, sends
/// its `model` field and the first 64 KiB of its file, and stalls there.
async fn stalled_transcription(app: &TestApp, key: &str, model: &str) -> tokio::net::TcpStream {
    let mut head = format!(
        "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: 8388608\r\n\r\n\
         --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n{model}\r\n\
         --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.mp3\"\r\n\
         Content-Type: audio/mpeg\r\n\r\n",
        app.addr
    )
    .into_bytes();
    head.resize(head.len() + 64 * 1024, 7);
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    stream.write_all(&head).await.unwrap();
    stream
}

/// The status and body of the answer on `stream`, if one comes within 20
/// seconds (the body is never sent whole).
pub(crate) async fn answer(stream: &mut tokio::net::TcpStream) -> Option<(u16, Value)> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let read = async {
        loop {
            let text = String::from_utf8_lossy(&got).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if body.len() >= length {
                    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                    return (status, serde_json::from_str(body).unwrap());
                }
            }
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed without an answer: {text}");
            got.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .ok()
}

/// The audio files being received in `dir`.
fn spooled(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(".audio-"))
            })
            .count()
    })
}

// Issue 61: an upload refused for its model (404) or its budget (429) was
// written to disk whole first (8.4 MB each). Now the key's limits and
// budgets are checked before the body is read, and the model as soon as
// its field is: this one stalls after 64 KiB of its file, and is answered
// all the same, with nothing written.
#[tokio::test]
async fn an_upload_the_key_cannot_make_is_refused_before_its_file_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let app = TestApp::spawn_with(
        svc_test_support::Database::Sqlite,
        ServerConfig {
            files_dir: Some(dir.path().to_owned()),
            rate_limits: KeyLimits {
                requests_per_minute: Some(2),
                tokens_per_minute: None,
            },
            ..ServerConfig::default()
        },
    )
    .await;
    let other_models = app
        .create_scoped_key(
            None,
            KeyScope {
                allowed_models: ModelAccess(Some(vec!["svc".into()])),
                ..KeyScope::default()
            },
        )
        .await;
    let mut stream = stalled_transcription(&app, &other_models, "fake-speech").await;
    let (status, body) = answer(&mut stream)
        .await
        .expect("a model the key may not use is refused before the file is whole");
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("model_not_found")),
        "{body}"
    );
    assert_eq!(spooled(dir.path()), 0);
    // A key whose budget a chat spent.
    let spent = app
        .create_scoped_key(
            None,
            KeyScope {
                budget: Some(Budget {
                    limit: 1,
                    unit: BudgetUnit::Tokens,
                    period: BudgetPeriod::Day,
                }),
                ..KeyScope::default()
            },
        )
        .await;
    assert_eq!(
        app.chat(&spent, &crate::body("svc", "hello"))
            .await
            .status(),
        200
    );
    let mut stream = stalled_transcription(&app, &spent, "fake-speech").await;
    let (status, body) = answer(&mut stream)
        .await
        .expect("a spent budget is refused before the body is read");
    assert_eq!(
        (status, &body["error"]["code"]),
        (429, &json!("insufficient_quota")),
        "{body}"
    );
    assert_eq!(spooled(dir.path()), 0);
    // A key past its requests a minute.
    let hasty = app.create_key().await;
    for _ in 0..2 {
        assert_eq!(
            app.chat(&hasty, &crate::body("svc", "hello"))
                .await
                .status(),
            200
        );
    }
    let mut stream = stalled_transcription(&app, &hasty, "fake-speech").await;
    let (status, body) = answer(&mut stream)
        .await
        .expect("a key past its rate limit is refused before the body is read");
    assert_eq!(
        (status, &body["error"]["code"]),
        (429, &json!("rate_limit_exceeded")),
        "{body}"
    );
    assert_eq!(spooled(dir.path()), 0);
    // A key that may make it: its file is written as it comes.
    let allowed = app.create_key().await;
    let _stream = stalled_transcription(&app, &allowed, "fake-speech").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while spooled(dir.path()) == 0 {
        assert!(
            Instant::now() < deadline,
            "the upload never reached the disk"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
