//! Audio through an upstream: a [`TranscribeRequest`] as the
//! `multipart/form-data` body OpenAI's `/audio/transcriptions` and
//! `/audio/translations` take (what vLLM, llama-server's whisper siblings,
//! LocalAI and OpenAI serve), its file read from disk as it is sent; the
//! transcript read back with the seconds it covers; and a
//! [`SpeechRequest`] as the JSON body of `/audio/speech`.

use std::path::PathBuf;

use bytes::Bytes;
use futures::{StreamExt as _, TryStreamExt as _};
use serde::Serialize;
use svc_core::{SpeechRequest, TranscribeRequest, Transcript};

use crate::client::Payload;
use crate::error::Failure;

/// The body of `request` for `model` at one endpoint, and its content type.
/// The fields go first and the file last, as OpenAI's own clients send
/// them; the file's bytes are read from disk while the body is sent.
pub(crate) fn form(request: &TranscribeRequest, model: &str) -> (Payload, String) {
    let boundary = format!("svc-{}", hex::encode(rand::random::<[u8; 16]>()));
    let mut head = Vec::with_capacity(1024);
    let mut field = |name: &str, value: &str| {
        head.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        head.extend_from_slice(
            format!(
                "Content-Disposition: form-data; name=\"{}\"\r\n\r\n",
                quoted(name)
            )
            .as_bytes(),
        );
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    };
    field("model", model);
    for (name, value) in &request.fields {
        field(name, value);
    }
    let audio = &request.audio;
    head.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
    head.extend_from_slice(
        format!(
            "Content-Disposition: form-data; name=\"file\"; filename=\"{}\"\r\nContent-Type: {}\r\n\r\n",
            quoted(&audio.filename),
            audio
                .content_type
                .as_deref()
                .filter(|t| is_token_text(t))
                .unwrap_or("application/octet-stream"),
        )
        .as_bytes(),
    );
    let tail = Bytes::from(format!("\r\n--{boundary}--\r\n"));
    let length = head.len() as u64 + audio.bytes + tail.len() as u64;
    let path: PathBuf = audio.path.clone();
    let expected = audio.bytes;
    let file = futures::stream::once(async move { tokio::fs::File::open(path).await })
        .map_ok(|file| tokio_util::io::ReaderStream::with_capacity(file, 64 * 1024))
        .try_flatten();
    // A file that is not the length announced (it changed on disk) must
    // not send a body of another length than its header says.
    let mut sent = 0u64;
    let file = file.map(move |piece| {
        let piece = piece?;
        sent += piece.len() as u64;
        if sent > expected {
            return Err(std::io::Error::other(
                "the audio file grew while it was sent",
            ));
        }
        Ok(piece)
    });
    let body = futures::stream::once(async move { Ok(Bytes::from(head)) })
        .chain(file)
        .chain(futures::stream::once(async move { Ok(tail) }));
    (
        Payload::Stream(Box::pin(body), length),
        format!("multipart/form-data; boundary={boundary}"),
    )
}

/// `value` as it can stand between a header parameter's quotes: quotes,
/// backslashes and line breaks percent-encoded (as browsers do, RFC 7578).
fn quoted(value: &str) -> String {
    value
        .replace('%', "%25")
        .replace('"', "%22")
        .replace('\\', "%5C")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A media type that can go in a header as it is.
fn is_token_text(value: &str) -> bool {
    !value.is_empty() && value.len() <= 255 && value.bytes().all(|b| (b' '..=b'~').contains(&b))
}

/// The upstream's transcript of a request for `format`, with the seconds it
/// says the audio lasts: JSON's `usage.seconds` or `duration`, or the end
/// of the last cue of subtitles. A JSON format whose body is not JSON is
/// the endpoint's fault (502, tried elsewhere). The body is kept, not
/// copied.
pub(crate) fn transcript(
    body: &Bytes,
    content_type: Option<&str>,
    format: &str,
) -> Result<Transcript, Failure> {
    let seconds = match format {
        "json" | "verbose_json" => {
            let json: serde_json::Value = serde_json::from_slice(body)
                .map_err(|e| Failure::BadResponse(format!("the transcript is not JSON: {e}")))?;
            if !json.get("text").is_some_and(serde_json::Value::is_string) {
                return Err(Failure::BadResponse(
                    "the transcript has no `text`".to_owned(),
                ));
            }
            json.pointer("/usage/seconds")
                .or_else(|| json.get("duration"))
                .and_then(serde_json::Value::as_f64)
        }
        "srt" | "vtt" => last_cue_end(&String::from_utf8_lossy(body)),
        _ => None,
    }
    .filter(|s| s.is_finite() && *s >= 0.0);
    let content_type = content_type
        .filter(|t| is_token_text(t))
        .map_or_else(|| default_type(format).to_owned(), str::to_owned);
    Ok(Transcript {
        body: body.clone(),
        content_type,
        seconds,
    })
}

/// The media type of a transcript in `format` when the upstream named none.
fn default_type(format: &str) -> &'static str {
    match format {
        "json" | "verbose_json" => "application/json",
        "vtt" => "text/vtt; charset=utf-8",
        _ => "text/plain; charset=utf-8",
    }
}

/// The latest end time of subtitles' cues (`00:01:02,500 --> 00:01:04,000`
/// in SRT, `.` for the comma in WebVTT, hours optional there), in seconds.
fn last_cue_end(subtitles: &str) -> Option<f64> {
    subtitles
        .lines()
        .filter_map(|line| line.split_once("-->"))
        .filter_map(|(_, end)| timestamp(end.split_whitespace().next()?))
        .reduce(f64::max)
}

/// `HH:MM:SS,mmm`, `HH:MM:SS.mmm` or `MM:SS.mmm` in seconds.
fn timestamp(text: &str) -> Option<f64> {
    let text = text.replace(',', ".");
    let mut parts = text.rsplit(':');
    let seconds: f64 = parts.next()?.parse().ok()?;
    let minutes: f64 = parts.next()?.parse().ok()?;
    let hours: f64 = parts.next().map_or(Some(0.0), |h| h.parse().ok())?;
    if parts.next().is_some() {
        return None;
    }
    Some(hours * 3600.0 + minutes * 60.0 + seconds)
}

#[derive(Serialize)]
struct SpeechBody<'a> {
    model: &'a str,
    input: &'a str,
    voice: &'a str,
    response_format: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    speed: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_format: Option<&'a str>,
}

/// The JSON body asking `model` at one endpoint to speak `request`.
pub(crate) fn speech_body(request: &SpeechRequest, model: &str) -> Bytes {
    let body = SpeechBody {
        model,
        input: &request.input,
        voice: &request.voice,
        response_format: &request.response_format,
        speed: request.speed,
        instructions: request.instructions.as_deref(),
        stream_format: request.stream_format.as_deref(),
    };
    // A struct of strings and numbers always serializes.
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

/// The media type of speech in `format` (`stream_format` `sse`: events)
/// when the upstream named none.
pub(crate) fn speech_type(request: &SpeechRequest) -> &'static str {
    if request.stream_format.as_deref() == Some("sse") {
        return "text/event-stream";
    }
    match request.response_format.as_str() {
        "opus" => "audio/ogg",
        "aac" => "audio/aac",
        "flac" => "audio/flac",
        "wav" => "audio/wav",
        "pcm" => "audio/pcm",
        _ => "audio/mpeg",
    }
}

/// `content_type` when it can be passed on as it is.
pub(crate) fn passable(content_type: Option<&str>) -> Option<&str> {
    content_type.filter(|t| is_token_text(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use svc_core::AudioFile;

    #[tokio::test]
    async fn the_form_streams_the_file_after_the_fields_at_the_length_announced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.wav");
        std::fs::write(&path, vec![7u8; 200_000]).unwrap();
        let request = TranscribeRequest {
            audio: AudioFile {
                path,
                filename: "say \"hi\".wav".into(),
                content_type: Some("audio/wav".into()),
                bytes: 200_000,
                seconds: None,
            },
            fields: vec![("language".into(), "en".into())],
            response_format: "json".into(),
            ..TranscribeRequest::default()
        };
        let (payload, content_type) = form(&request, "whisper-up");
        let Payload::Stream(stream, length) = payload else {
            panic!("a file is streamed");
        };
        let pieces: Vec<Bytes> = stream.try_collect().await.unwrap();
        assert!(pieces.len() > 3, "read in pieces, not whole");
        let body: Vec<u8> = pieces.concat();
        assert_eq!(body.len() as u64, length);
        let boundary = content_type.split("boundary=").nth(1).unwrap();
        let text = String::from_utf8_lossy(&body);
        let model = text.find("name=\"model\"\r\n\r\nwhisper-up\r\n").unwrap();
        let language = text.find("name=\"language\"\r\n\r\nen\r\n").unwrap();
        let file = text
            .find("name=\"file\"; filename=\"say %22hi%22.wav\"\r\nContent-Type: audio/wav")
            .unwrap();
        assert!(model < language && language < file);
        assert!(text.ends_with(&format!("\r\n--{boundary}--\r\n")));
    }

    #[tokio::test]
    async fn a_file_that_grew_breaks_the_body_rather_than_overrun_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.mp3");
        std::fs::write(&path, vec![1u8; 1000]).unwrap();
        let request = TranscribeRequest {
            audio: AudioFile {
                path,
                filename: "a.mp3".into(),
                bytes: 10,
                ..AudioFile::default()
            },
            response_format: "json".into(),
            ..TranscribeRequest::default()
        };
        let (Payload::Stream(stream, _), _) = form(&request, "m") else {
            panic!("a file is streamed");
        };
        assert!(stream.try_collect::<Vec<Bytes>>().await.is_err());
    }

    #[test]
    fn the_seconds_come_from_usage_duration_or_the_last_cue() {
        let json = br#"{"text":"hi","usage":{"type":"duration","seconds":7}}"#;
        assert_eq!(
            transcript(&Bytes::from_static(json), None, "json")
                .unwrap()
                .seconds,
            Some(7.0)
        );
        let verbose = br#"{"text":"hi","duration":12.5,"segments":[]}"#;
        let t = transcript(
            &Bytes::from_static(verbose),
            Some("application/json"),
            "verbose_json",
        )
        .unwrap();
        assert_eq!(t.seconds, Some(12.5));
        let srt =
            "1\n00:00:00,000 --> 00:00:02,500\nhi\n\n2\n00:01:02,000 --> 00:01:04,250\nthere\n";
        let t = transcript(&Bytes::from_static(srt.as_bytes()), None, "srt").unwrap();
        assert_eq!(t.seconds, Some(64.25));
        assert_eq!(t.content_type, "text/plain; charset=utf-8");
        let vtt = "WEBVTT\n\n00:01.000 --> 00:03.500\nhi\n";
        assert_eq!(
            transcript(&Bytes::from_static(vtt.as_bytes()), None, "vtt")
                .unwrap()
                .seconds,
            Some(3.5)
        );
        assert_eq!(
            transcript(&Bytes::from_static(b"hi\n"), None, "text")
                .unwrap()
                .seconds,
            None
        );
    }

    #[test]
    fn a_json_transcript_that_is_not_one_is_the_upstreams_fault() {
        for body in [&b"<html>"[..], br#"{"error":"x"}"#] {
            assert!(matches!(
                transcript(&Bytes::from_static(body), None, "json"),
                Err(Failure::BadResponse(_))
            ));
        }
    }
}
