//! Reading a response body under the size bound: a JSON body, or an event
//! stream read until the JSON-RPC response to the request arrives.
//!
//! Reading goes chunk by chunk and stops at the bound, so a server that
//! sends 100 MB costs at most the bound in memory. Time is bounded by the
//! caller's deadline, not here.

use std::time::Duration;

use serde_json::Value;

use crate::error::Error;
use crate::wire::{self, Reply};

/// A response body read chunk by chunk, counting the bytes against a bound.
pub(crate) struct Body {
    response: reqwest::Response,
    read: usize,
    limit: usize,
    timeout: Duration,
}

impl Body {
    /// The body of `response`, bounded by `limit` bytes; `timeout` only names
    /// the call's limit in a timeout error.
    pub(crate) fn new(
        response: reqwest::Response,
        limit: usize,
        timeout: Duration,
    ) -> Result<Self, Error> {
        // A declared length past the bound fails before a byte is read.
        if response
            .content_length()
            .is_some_and(|length| length > limit as u64)
        {
            return Err(Error::TooLarge { limit });
        }
        Ok(Self {
            response,
            read: 0,
            limit,
            timeout,
        })
    }

    /// The next chunk, or `None` at the end.
    async fn chunk(&mut self) -> Result<Option<bytes::Bytes>, Error> {
        let chunk = self
            .response
            .chunk()
            .await
            .map_err(|e| Error::from_http(e, self.timeout))?;
        if let Some(chunk) = &chunk {
            self.read = self.read.saturating_add(chunk.len());
            if self.read > self.limit {
                return Err(Error::TooLarge { limit: self.limit });
            }
        }
        Ok(chunk)
    }

    /// The whole body, at most the bound.
    pub(crate) async fn whole(mut self) -> Result<Vec<u8>, Error> {
        let mut body = Vec::new();
        while let Some(chunk) = self.chunk().await? {
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Reads an event stream until the JSON-RPC response to `id`, skipping
    /// notifications (progress, logging) and anything else in between.
    pub(crate) async fn response_in_events(mut self, id: u64) -> Result<Value, Error> {
        let mut events = Events::default();
        loop {
            let Some(chunk) = self.chunk().await? else {
                return Err(Error::Protocol(
                    "the event stream ended without the response".into(),
                ));
            };
            for data in events.feed(&chunk) {
                if let Reply::Answer(answer) = wire::reply(data.as_bytes(), id)? {
                    return answer;
                }
            }
        }
    }
}

/// A server-sent-events parser fed bytes as they come, yielding the `data`
/// of each complete `message` event.
#[derive(Default)]
pub(crate) struct Events {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The event being read: its type and its data lines so far.
    kind: String,
    data: String,
    has_data: bool,
    /// Whether the last byte was a CR, so a following LF ends nothing.
    after_cr: bool,
}

impl Events {
    /// Feeds `bytes`; returns the data of each event they completed.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut done = Vec::new();
        for &byte in bytes {
            let after_cr = std::mem::replace(&mut self.after_cr, byte == b'\r');
            if byte == b'\n' && after_cr {
                continue;
            }
            if byte == b'\n' || byte == b'\r' {
                let line = std::mem::take(&mut self.line);
                if let Some(data) = self.line_ended(&line) {
                    done.push(data);
                }
            } else {
                self.line.push(byte);
            }
        }
        done
    }

    /// Takes in one line; a blank one ends the event.
    fn line_ended(&mut self, line: &[u8]) -> Option<String> {
        if line.is_empty() {
            let kind = std::mem::take(&mut self.kind);
            let data = std::mem::take(&mut self.data);
            let has_data = std::mem::replace(&mut self.has_data, false);
            // An event whose data is empty is not dispatched (the
            // event-stream standard's rule): the TypeScript SDK's server
            // opens each stream with such a "priming" event, `id: ...` and
            // `data:` alone, for clients to resume from, and it is no
            // JSON-RPC message.
            return (has_data && !data.is_empty() && (kind.is_empty() || kind == "message"))
                .then_some(data);
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (&*line, ""),
        };
        match field {
            "event" => value.clone_into(&mut self.kind),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::Events;

    #[test]
    fn events_split_across_chunks_and_line_endings_come_out_whole() {
        let mut events = Events::default();
        assert!(events.feed(b": ping\r\n\r\nevent: mess").is_empty());
        assert_eq!(
            events.feed(b"age\r\ndata: {\"a\":\r\ndata: 1}\r"),
            Vec::<String>::new()
        );
        assert_eq!(events.feed(b"\n\r\n"), vec!["{\"a\":\n1}".to_owned()]);
        assert_eq!(events.feed(b"id: 3\ndata:x\n\n"), vec!["x".to_owned()]);
        assert!(events.feed(b"event: other\ndata: y\n\n").is_empty());
    }

    #[test]
    fn a_priming_event_with_empty_data_is_not_dispatched() {
        let mut events = Events::default();
        assert!(events.feed(b"id: 18ebf620\ndata: \n\n").is_empty());
        assert!(events.feed(b"id: 1\ndata:\n\n").is_empty());
        assert_eq!(
            events.feed(b"event: message\nid: 2\ndata: {}\n\n"),
            vec!["{}".to_owned()]
        );
    }
}
