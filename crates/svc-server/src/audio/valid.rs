//! The audio requests as they arrive, checked and turned into the
//! engine's: a wrong field is a 400 naming it.

use svc_core::{SpeechRequest, TranscribeRequest, ValidationError};

/// The formats a transcript comes in.
const TRANSCRIPT_FORMATS: [&str; 5] = ["json", "text", "srt", "verbose_json", "vtt"];
/// The formats speech comes in.
const SPEECH_FORMATS: [&str; 6] = ["mp3", "opus", "aac", "flac", "wav", "pcm"];
/// The most characters spoken in one request (OpenAI's bound).
pub(super) const MAX_INPUT_CHARS: usize = 4096;

/// A transcription form's fields, checked.
pub(super) struct Transcription {
    pub model: String,
    pub transcribe: TranscribeRequest,
}

/// Checks a transcription (or translation) form's fields other than its
/// file: `model` given; `response_format`, `temperature` and
/// `timestamp_granularities[]` among what the API takes; `stream` false.
/// The rest (`language`, `prompt`, and fields of newer models) goes to the
/// model as it came.
pub(super) fn transcription(
    fields: Vec<(String, String)>,
    translate: bool,
) -> Result<Transcription, ValidationError> {
    let mut model = None;
    let mut response_format = "json".to_owned();
    let mut passed = Vec::with_capacity(fields.len());
    for (name, value) in fields {
        match name.as_str() {
            "model" => {
                model_id(&value)?;
                model = Some(value);
                continue;
            }
            "response_format" => {
                if !TRANSCRIPT_FORMATS.contains(&value.as_str()) {
                    return Err(ValidationError::new(
                        "response_format",
                        format!(
                            "response_format must be one of {}, not `{value}`",
                            TRANSCRIPT_FORMATS.join(", ")
                        ),
                    ));
                }
                response_format.clone_from(&value);
            }
            // A right one goes to the model with the rest (below).
            "temperature" if !value.parse::<f64>().is_ok_and(|t| (0.0..=1.0).contains(&t)) => {
                return Err(ValidationError::new(
                    "temperature",
                    format!("temperature must be a number from 0 to 1, not `{value}`"),
                ));
            }
            "timestamp_granularities[]" | "timestamp_granularities"
                if !matches!(value.as_str(), "word" | "segment") =>
            {
                return Err(ValidationError::new(
                    "timestamp_granularities",
                    format!("timestamp_granularities are `word` or `segment`, not `{value}`"),
                ));
            }
            "stream" => {
                if value != "false" {
                    return Err(ValidationError::new(
                        "stream",
                        "stream must be false: transcripts are answered whole here",
                    ));
                }
                continue;
            }
            "file" => continue,
            _ => {}
        }
        passed.push((name, value));
    }
    let model = model.ok_or_else(|| ValidationError::new("model", "model is required"))?;
    Ok(Transcription {
        model,
        transcribe: TranscribeRequest {
            translate,
            fields: passed,
            response_format,
            ..TranscribeRequest::default()
        },
    })
}

/// Checks the form's `model` field: a model id of 1 to
/// [`svc_api::MAX_MODEL_ID`] bytes.
pub(super) fn model_id(value: &str) -> Result<(), ValidationError> {
    if value.is_empty() || value.len() > svc_api::MAX_MODEL_ID {
        return Err(ValidationError::new(
            "model",
            format!(
                "model must be a model id of 1 to {} bytes",
                svc_api::MAX_MODEL_ID
            ),
        ));
    }
    Ok(())
}

/// A speech request, checked.
pub(super) struct Speech {
    pub model: String,
    pub speak: SpeechRequest,
}

/// Checks a speech request: `input` of 1 to [`MAX_INPUT_CHARS`]
/// characters, a `voice` (a name, or an object's `id`), a known
/// `response_format` and `stream_format`, `speed` from 0.25 to 4, and
/// `instructions` of at most [`MAX_INPUT_CHARS`].
pub(super) fn speech(body: svc_api::audio::SpeechRequest) -> Result<Speech, ValidationError> {
    let characters = body.input.chars().count();
    if characters == 0 || characters > MAX_INPUT_CHARS {
        return Err(ValidationError::new(
            "input",
            format!("input must be 1 to {MAX_INPUT_CHARS} characters; it has {characters}"),
        ));
    }
    let voice = match &body.voice {
        serde_json::Value::String(name) => Some(name.clone()),
        serde_json::Value::Object(voice) => voice
            .get("id")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
    .filter(|v| !v.is_empty() && v.len() <= 256)
    .ok_or_else(|| {
        ValidationError::new(
            "voice",
            "voice must be a voice's name, or an object with its `id` (1 to 256 bytes)",
        )
    })?;
    let response_format = body.response_format.unwrap_or_else(|| "mp3".to_owned());
    if !SPEECH_FORMATS.contains(&response_format.as_str()) {
        return Err(ValidationError::new(
            "response_format",
            format!(
                "response_format must be one of {}, not `{response_format}`",
                SPEECH_FORMATS.join(", ")
            ),
        ));
    }
    if let Some(speed) = body.speed
        && !(0.25..=4.0).contains(&speed)
    {
        return Err(ValidationError::new(
            "speed",
            format!("speed must be from 0.25 to 4.0, not {speed}"),
        ));
    }
    if let Some(format) = &body.stream_format
        && !matches!(format.as_str(), "audio" | "sse")
    {
        return Err(ValidationError::new(
            "stream_format",
            format!("stream_format must be `audio` or `sse`, not `{format}`"),
        ));
    }
    if body
        .instructions
        .as_ref()
        .is_some_and(|i| i.chars().count() > MAX_INPUT_CHARS)
    {
        return Err(ValidationError::new(
            "instructions",
            format!("instructions have at most {MAX_INPUT_CHARS} characters"),
        ));
    }
    Ok(Speech {
        model: body.model,
        speak: SpeechRequest {
            input: body.input,
            voice,
            response_format,
            speed: body.speed,
            instructions: body.instructions,
            stream_format: body.stream_format,
            client: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_form_keeps_the_models_fields_in_order_and_names_a_wrong_one() {
        let valid = transcription(
            fields(&[
                ("model", "whisper"),
                ("language", "de"),
                ("response_format", "srt"),
                ("timestamp_granularities[]", "word"),
                ("stream", "false"),
            ]),
            false,
        )
        .unwrap();
        assert_eq!(valid.model, "whisper");
        assert_eq!(valid.transcribe.response_format, "srt");
        let names: Vec<&str> = valid
            .transcribe
            .fields
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        assert_eq!(
            names,
            ["language", "response_format", "timestamp_granularities[]"]
        );
        for (pairs, param) in [
            (&[("language", "de")][..], "model"),
            (
                &[("model", "w"), ("response_format", "xml")],
                "response_format",
            ),
            (&[("model", "w"), ("temperature", "2")], "temperature"),
            (&[("model", "w"), ("stream", "true")], "stream"),
            (
                &[("model", "w"), ("timestamp_granularities[]", "char")],
                "timestamp_granularities",
            ),
        ] {
            let e = transcription(fields(pairs), false).err().unwrap();
            assert_eq!(e.param, param, "{pairs:?}");
        }
    }

    #[test]
    fn speech_is_checked_field_by_field() {
        let request = |json: serde_json::Value| {
            speech(serde_json::from_value(json).unwrap()).map(|s| s.speak)
        };
        let spoken = request(serde_json::json!({
            "model": "tts", "input": "Hello", "voice": {"id": "v1"}
        }))
        .unwrap();
        assert_eq!(
            (spoken.voice.as_str(), spoken.response_format.as_str()),
            ("v1", "mp3")
        );
        for (json, param) in [
            (
                serde_json::json!({"model": "t", "input": "", "voice": "a"}),
                "input",
            ),
            (
                serde_json::json!({"model": "t", "input": "x".repeat(4097), "voice": "a"}),
                "input",
            ),
            (
                serde_json::json!({"model": "t", "input": "x", "voice": 3}),
                "voice",
            ),
            (
                serde_json::json!({"model": "t", "input": "x", "voice": "a", "response_format": "ogg"}),
                "response_format",
            ),
            (
                serde_json::json!({"model": "t", "input": "x", "voice": "a", "speed": 9}),
                "speed",
            ),
            (
                serde_json::json!({"model": "t", "input": "x", "voice": "a", "stream_format": "ws"}),
                "stream_format",
            ),
        ] {
            let e = request(json.clone()).err().unwrap();
            assert_eq!(e.param, param, "{json}");
        }
    }
}
