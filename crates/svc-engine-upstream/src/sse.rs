//! A Server-Sent Events decoder for upstream response bodies: bytes in, the
//! `data` of each event out. Lines end in `\n` or `\r\n`; comments and the
//! `id`/`retry` fields are ignored; an event's several `data` lines are
//! joined with `\n`. Lines and events are bounded so a body that never ends
//! a line cannot grow memory without limit.

use thiserror::Error;

/// Most bytes one line or one event may hold.
pub const MAX_EVENT_BYTES: usize = 4 << 20;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when one was given (`error` on some servers).
    pub event: Option<String>,
    pub data: String,
}

/// A body that is not an event stream.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SseError {
    #[error("an event stream line is not UTF-8")]
    NotUtf8,
    #[error("an event stream line or event is longer than {MAX_EVENT_BYTES} bytes")]
    TooLong,
}

/// Incremental decoder state.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of a line not yet ended.
    partial: Vec<u8>,
    data: String,
    has_data: bool,
    event: Option<String>,
}

impl SseDecoder {
    /// Feeds `bytes`, appending every event they complete to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut rest = bytes;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(pos);
            rest = &tail[1..];
            if self.partial.is_empty() {
                self.line(head, out)?;
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(head);
                self.line(&line, out)?;
            }
        }
        if self.partial.len() + rest.len() > MAX_EVENT_BYTES {
            return Err(SseError::TooLong);
        }
        self.partial.extend_from_slice(rest);
        Ok(())
    }

    /// The body ended: an event whose data arrived but whose blank line
    /// did not is still dispatched (some servers end without it).
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line(&line, out)?;
        }
        self.dispatch(out);
        Ok(())
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                if self.data.len() + value.len() > MAX_EVENT_BYTES {
                    return Err(SseError::TooLong);
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            // Comments (empty field name), `id`, `retry` and anything else.
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        if self.has_data {
            out.push(SseEvent {
                event: self.event.take(),
                data: std::mem::take(&mut self.data),
            });
            self.has_data = false;
        }
        self.event = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(body: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for chunk in body.chunks(piece) {
            decoder.push(chunk, &mut out).unwrap();
        }
        decoder.finish(&mut out).unwrap();
        out
    }

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn events_survive_any_split() {
        let body = "data: {\"a\":1}\n\n: keep-alive\n\ndata:{\"b\":\"é\"}\r\n\r\nid: 3\nretry: 10\ndata: [DONE]\n\n";
        for piece in 1..body.len() {
            let events = decode_in_pieces(body.as_bytes(), piece);
            assert_eq!(
                data(&events),
                ["{\"a\":1}", "{\"b\":\"é\"}", "[DONE]"],
                "split every {piece} bytes"
            );
        }
    }

    #[test]
    fn multi_line_data_and_event_names() {
        let events = decode_in_pieces(b"event: error\ndata: a\ndata: b\n\ndata: c\n\n", 7);
        assert_eq!(
            events,
            [
                SseEvent {
                    event: Some("error".into()),
                    data: "a\nb".into()
                },
                SseEvent {
                    event: None,
                    data: "c".into()
                },
            ]
        );
    }

    #[test]
    fn a_last_event_without_blank_line_is_kept() {
        assert_eq!(
            data(&decode_in_pieces(b"data: x\n\ndata: [DONE]", 4)),
            ["x", "[DONE]"]
        );
        assert!(decode_in_pieces(b"", 1).is_empty());
        assert!(decode_in_pieces(b"\n\n: only a comment\n\n", 1).is_empty());
    }

    #[test]
    fn endless_lines_and_bad_bytes_are_refused() {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        let big = vec![b'x'; MAX_EVENT_BYTES / 2 + 1];
        decoder.push(&big, &mut out).unwrap();
        assert_eq!(decoder.push(&big, &mut out), Err(SseError::TooLong));
        let mut decoder = SseDecoder::default();
        assert_eq!(
            decoder.push(b"data: \xff\xfe\n\n", &mut out),
            Err(SseError::NotUtf8)
        );
    }
}
