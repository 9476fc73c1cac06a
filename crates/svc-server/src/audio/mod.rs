//! `/v1/audio/*`: speech to text and text to speech, served by models
//! that do it (an upstream's Whisper or TTS model), with what every
//! inference gets (the key's scope and model list, rate limits, budgets,
//! usage, metrics, the request log). Errors are OpenAI's shape.
//!
//! - `POST /v1/audio/transcriptions` and `/v1/audio/translations` take a
//!   `multipart/form-data` upload: its file is written to disk as it
//!   arrives ([`form`]), never whole in memory, bounded by
//!   `audio_max_bytes`, and streamed from there to the engine's upstream.
//!   Nothing is written for a key that could not be served: its rate
//!   limits and spent budgets refuse it before the body is read, and the
//!   form's `model` as soon as its field is. Usage is the seconds of audio
//!   as a decoder gets them from the file ([`length`]), or the upstream's
//!   count where larger; a file not measured is charged its bound up
//!   front and settled at the upstream's count, or the bound without one.
//! - `POST /v1/audio/speech` takes JSON and streams the audio back as it
//!   comes. Usage is the characters of its `input`.

mod form;
mod length;
mod valid;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt as _;
use svc_core::{Capability, KeyRecord, TokenUsage, Tokens};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::admission::Asked;
use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::extract::{Key, scope};
use crate::openapi::shared;
use crate::pipeline::{Metering, Opened, arrived, limited, open};
use crate::state::AppState;
use crate::upload::receive;
use form::{Received, Receiver};
pub use length::fuzz_wav_seconds;

/// What this endpoint is: its OpenAPI group, its paths and dialect, and
/// what batches and the response cache make of it.
pub(crate) const ENDPOINT: Endpoint = Endpoint::new(
    "audio",
    "Audio: speech into text (transcriptions, and translations into English) and text into speech, from a model that does it (an upstream's).",
)
.paths(&["/v1/audio"]);

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(transcriptions))
        .routes(routes!(translations))
        .routes(routes!(speech))
}

#[utoipa::path(post, path = "/v1/audio/transcriptions", tag = "audio", operation_id = "createTranscription",
    summary = "Transcribe audio into text in its own language.",
    description = "A `multipart/form-data` body: `file` (at most `audio_max_bytes`, 256 MiB by default; a larger one is a 413) and `model`, and the model's other fields (`language`, `prompt`, `response_format`, `temperature`, `timestamp_granularities[]`, ...), each at most 16 KiB, passed to the model. Served by a model that transcribes (an upstream's, through its own `/audio/transcriptions`); another model answers 400 naming `model`. The answer is the model's, in the `response_format` asked for (`json`, `text`, `srt`, `verbose_json` or `vtt`). `stream` must be false. Usage counts seconds of audio (priced by `[prices.<model>] audio_minute`).",
    security(("bearer" = ["model.request"])),
    request_body(content = svc_api::audio::TranscriptionForm, content_type = "multipart/form-data"),
    responses(
        (status = 200, description = "The transcript, in the format asked for.", content((svc_api::audio::Transcription = "application/json"), (String = "text/plain"))),
        shared::InferenceErrors,
    ))]
pub async fn transcriptions(
    Key(key, _): Key<scope::ModelRequest>,
    State(state): State<AppState>,
    request: Request,
) -> Response {
    limited(&state.admission, key, |key, metering| {
        transcribe(&state, key, request, metering, false)
    })
    .await
}

#[utoipa::path(post, path = "/v1/audio/translations", tag = "audio", operation_id = "createTranslation",
    summary = "Translate audio into English text.",
    description = "As POST /v1/audio/transcriptions (the same form, limits and answer), into English; served through the upstream's own `/audio/translations`.",
    security(("bearer" = ["model.request"])),
    request_body(content = svc_api::audio::TranscriptionForm, content_type = "multipart/form-data"),
    responses(
        (status = 200, description = "The English text, in the format asked for.", content((svc_api::audio::Transcription = "application/json"), (String = "text/plain"))),
        shared::InferenceErrors,
    ))]
pub async fn translations(
    Key(key, _): Key<scope::ModelRequest>,
    State(state): State<AppState>,
    request: Request,
) -> Response {
    limited(&state.admission, key, |key, metering| {
        transcribe(&state, key, request, metering, true)
    })
    .await
}

async fn transcribe(
    state: &AppState,
    key: KeyRecord,
    request: Request,
    metering: Metering,
    translate: bool,
) -> Result<Response, ApiError> {
    let arrived = arrived(&request);
    // Before a byte of the body is read (the rate limits were counted by
    // `limited`): a spent budget refuses the upload, and the gate checks
    // the form's model as soon as its field is read.
    let gate = state
        .admission
        .admit_upload(&key, Capability::Transcription)
        .await?;
    let place = state.batches.uploads.admit(&key.id)?;
    let boundary = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::multipart::boundary)
        .ok_or_else(|| ApiError::InvalidBody {
            param: None,
            message: "Send the audio as multipart/form-data, with the fields `file` and `model`."
                .into(),
        })?;
    let limit = state.batches.audio_max_bytes;
    let receiver = Receiver::new(
        &boundary,
        state.batches.dir.clone(),
        state.batches.spool.clone(),
        limit,
        gate,
    );
    let Received { file, fields } = receive(
        &place,
        receiver,
        request.into_body(),
        limit.saturating_add(form::FORM_OVERHEAD),
    )
    .await?;
    // The upload's place (one of the key's uploads in flight) is held while
    // its file is on disk; the file is removed off the async threads once
    // the model has answered, whatever the answer.
    let answer = send(
        state,
        key,
        fields,
        file.as_ref(),
        arrived,
        metering,
        translate,
    )
    .await;
    let _ = place.work(move || drop(file)).await;
    answer
}

/// The received form's transcript, from the model it names.
async fn send(
    state: &AppState,
    key: KeyRecord,
    fields: Vec<(String, String)>,
    file: Option<&form::Kept>,
    arrived: std::time::Instant,
    metering: Metering,
    translate: bool,
) -> Result<Response, ApiError> {
    let valid::Transcription {
        model,
        mut transcribe,
    } = valid::transcription(fields, translate)?;
    crate::request_log::note_model(&model);
    let file = file.ok_or_else(|| svc_core::ValidationError::new("file", "file is required"))?;
    transcribe.audio = file.audio.clone();
    let length = file.length;
    let estimate = seconds(length.seconds());
    let id = model.as_str();
    let asked = Asked {
        key: &key,
        model: id,
        capability: Capability::Transcription,
        metering: &metering,
        arrived,
        estimate: Tokens {
            audio_seconds: i64::try_from(estimate).unwrap_or(i64::MAX),
            ..Tokens::default()
        },
    };
    let (transcript, _) = state
        .admission
        .whole(
            asked,
            |engine, origin| {
                transcribe.client = Some(origin.client);
                async move { engine.transcribing(id)?.transcribe(transcribe).await }
            },
            |transcript| TokenUsage {
                audio_seconds: seconds(length.billed(transcript.seconds)),
                ..TokenUsage::default()
            },
        )
        .await?;
    let mut response = transcript.body.into_response();
    if let Ok(value) = HeaderValue::from_str(&transcript.content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    Ok(response)
}

/// Whole seconds, rounded up, at least 1 (a request's audio is not free).
fn seconds(seconds: f64) -> u64 {
    if seconds.is_finite() && seconds > 0.0 {
        (seconds.ceil() as u64).max(1)
    } else {
        1
    }
}

#[utoipa::path(post, path = "/v1/audio/speech", tag = "audio", operation_id = "createSpeech",
    summary = "Speak text: the audio, streamed as it is made.",
    description = "Served by a model that speaks (an upstream's, through its own `/audio/speech`); another model answers 400 naming `model`. `input` is 1 to 4,096 characters, `voice` a name or `{\"id\": ...}`, `response_format` `mp3` (default), `opus`, `aac`, `flac`, `wav` or `pcm`, `speed` 0.25 to 4, `stream_format` `audio` (default) or `sse`; a wrong one is a 400 naming it. The audio is sent as it comes. Usage counts the characters of `input` (priced by `[prices.<model>] characters`).",
    security(("bearer" = ["model.request"])),
    request_body = svc_api::audio::SpeechRequest,
    responses(
        (status = 200, description = "The audio, in the format asked for (`text/event-stream` for `stream_format` `sse`), typed as the model typed it.",
            content((svc_api::audio::SpeechAudio = "audio/mpeg"), (svc_api::audio::SpeechAudio = "audio/ogg"),
                (svc_api::audio::SpeechAudio = "audio/aac"), (svc_api::audio::SpeechAudio = "audio/flac"),
                (svc_api::audio::SpeechAudio = "audio/wav"), (svc_api::audio::SpeechAudio = "audio/pcm"),
                (String = "text/event-stream"))),
        shared::InferenceErrors,
    ))]
pub async fn speech(
    Key(key, _): Key<scope::ModelRequest>,
    State(state): State<AppState>,
    request: Request,
) -> Response {
    limited(&state.admission, key, |key, metering| {
        speak(&state, key, request, metering)
    })
    .await
}

async fn speak(
    state: &AppState,
    key: KeyRecord,
    request: Request,
    metering: Metering,
) -> Result<Response, ApiError> {
    let Opened { arrived, body, .. } =
        open::<svc_api::audio::SpeechRequest, _>(request, state).await?;
    let valid::Speech { model, mut speak } = valid::speech(body)?;
    let characters = speak.input.chars().count() as u64;
    let id = model.as_str();
    let asked = Asked {
        key: &key,
        model: id,
        capability: Capability::Speech,
        metering: &metering,
        arrived,
        estimate: Tokens {
            characters: i64::try_from(characters).unwrap_or(i64::MAX),
            ..Tokens::default()
        },
    };
    let (speech, _) = state
        .admission
        .whole(
            asked,
            |engine, origin| {
                speak.client = Some(origin.client);
                async move { engine.speaking(id)?.speak(speak).await }
            },
            |_| TokenUsage {
                characters,
                ..TokenUsage::default()
            },
        )
        .await?;
    let audio = speech
        .audio
        .map_err(|e| std::io::Error::other(e.to_string()));
    let mut response = Body::from_stream(audio).into_response();
    if let Ok(value) = HeaderValue::from_str(&speech.content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    Ok(response)
}
