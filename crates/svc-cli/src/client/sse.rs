//! A Server-Sent Events decoder (the WHATWG "event stream" format) for the
//! bytes of a streamed response, fed as they arrive in chunks of any size.
//!
//! Only `data` matters to the chat API: each event's data lines are joined
//! with `\n` and handed out when the blank line that ends the event comes.
//! Comments, `event`, `id` and `retry` fields are read and ignored.

/// Turns chunks of bytes into the data of complete events.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` starting the next belongs to it.
    after_cr: bool,
    /// Data lines of the event being read.
    data: Option<String>,
}

impl SseDecoder {
    pub fn new() -> Self {
        SseDecoder::default()
    }

    /// Feeds `bytes`; returns the data of every event they completed.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        for &byte in bytes {
            if self.after_cr {
                self.after_cr = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(data) = self.end_line(&line) {
                        events.push(data);
                    }
                }
                _ => self.line.push(byte),
            }
        }
        events
    }

    /// Handles one complete line; a blank one ends the event.
    fn end_line(&mut self, line: &[u8]) -> Option<String> {
        if line.is_empty() {
            return self.data.take();
        }
        if line[0] == b':' {
            return None;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        if field == "data" {
            match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {

    use proptest::prelude::*;

    use super::*;

    fn decode_all(chunks: &[&[u8]]) -> Vec<String> {
        let mut decoder = SseDecoder::new();
        chunks.iter().flat_map(|c| decoder.push(c)).collect()
    }

    #[test]
    fn reads_events_fields_and_line_endings() {
        let stream = b": comment\n\nevent: x\nid: 1\ndata: {\"a\":1}\n\ndata:two\r\ndata:  lines\r\n\r\ndata\n\ndata: [DONE]\r\r";
        assert_eq!(
            decode_all(&[stream]),
            ["{\"a\":1}", "two\n lines", "", "[DONE]"]
        );
    }

    #[test]
    fn an_unfinished_event_is_not_handed_out() {
        assert!(decode_all(&[b"data: half"]).is_empty());
        assert!(decode_all(&[b"data: half\n"]).is_empty());
    }

    #[test]
    fn multibyte_text_split_between_chunks_survives() {
        let text = "data: héllo → 世界\n\n".as_bytes();
        let (a, b) = text.split_at(9);
        assert_eq!(decode_all(&[a, b]), ["héllo → 世界"]);
    }

    proptest! {
        /// However the bytes are cut into chunks, the same events come out.
        #[test]
        fn chunking_does_not_matter(
            datas in proptest::collection::vec("[a-zA-Z0-9 {}\":,é世]{0,20}", 1..6),
            crlf in any::<bool>(),
            cuts in proptest::collection::vec(0usize..200, 0..8),
        ) {
            let end = if crlf { "\r\n" } else { "\n" };
            let stream: String = datas.iter().map(|d| format!("data: {d}{end}{end}")).collect();
            let bytes = stream.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut at = 0;
            for cut in cuts {
                chunks.push(&bytes[at..cut]);
                at = cut;
            }
            chunks.push(&bytes[at..]);
            prop_assert_eq!(decode_all(&chunks), datas);
        }
    }
}
