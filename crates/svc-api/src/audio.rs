//! `/v1/audio/*`: speech to text (`transcriptions`, `translations`, a
//! `multipart/form-data` upload) and text to speech (`speech`, JSON in,
//! audio bytes out), in OpenAI's shapes.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// `POST /v1/audio/transcriptions` and `/v1/audio/translations`, as
/// `multipart/form-data`. Other fields are passed over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = CreateTranscriptionRequest)]
pub struct TranscriptionForm {
    /// The audio (flac, mp3, mp4, mpeg, mpga, m4a, ogg, wav or webm, as the
    /// model takes it), at most `audio_max_bytes`.
    #[schema(value_type = String, format = Binary)]
    pub file: String,
    /// A model id from GET /v1/models that transcribes.
    #[schema(min_length = 1, max_length = 256, examples("whisper-1"))]
    pub model: String,
    /// The spoken language (ISO-639-1), transcriptions only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// Text to guide the model's style or continue a previous segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// `json` (the default), `text`, `srt`, `verbose_json` or `vtt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(examples("json"))]
    pub response_format: Option<String>,
    /// Sampling temperature, 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1)]
    pub temperature: Option<f64>,
    /// `word` and/or `segment` (with `verbose_json`); sent as
    /// `timestamp_granularities[]`, once per value.
    #[serde(
        default,
        rename = "timestamp_granularities[]",
        skip_serializing_if = "Option::is_none"
    )]
    pub timestamp_granularities: Option<Vec<String>>,
}

/// A transcript in `json` format (`verbose_json` adds the upstream's
/// `language`, `duration`, `segments` and `words`; `text`, `srt` and
/// `vtt` are plain text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = CreateTranscriptionResponse)]
pub struct Transcription {
    pub text: String,
    /// The model's own usage, as it reported it (seconds of audio, or
    /// tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub usage: Option<Value>,
}

/// `POST /v1/audio/speech`: text to speak. Unknown fields are ignored;
/// `null` is read as "not given".
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[schema(as = CreateSpeechRequest)]
pub struct SpeechRequest {
    /// A model id from GET /v1/models that speaks.
    #[schema(min_length = 1, max_length = 256, examples("tts-1"))]
    #[serde(deserialize_with = "crate::model_id")]
    pub model: String,
    /// The text, 1 to 4,096 characters.
    #[schema(min_length = 1, max_length = 4096)]
    pub input: String,
    /// The voice: a name (`alloy`, ...) or `{"id": ...}`, as the model
    /// knows them.
    #[schema(value_type = Object)]
    pub voice: Value,
    /// `mp3` (the default), `opus`, `aac`, `flac`, `wav` or `pcm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<String>,
    /// 0.25 to 4.0 (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0.25, maximum = 4.0)]
    pub speed: Option<f64>,
    /// How to speak (tone, accent), for models that take it; at most
    /// 4,096 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// `audio` (the default: the bytes as they come) or `sse`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_format: Option<String>,
}

/// Speech's bytes, in the format asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[schema(as = SpeechAudio, value_type = String, format = Binary)]
pub struct SpeechAudio(pub Vec<u8>);
