//! The network-free half of reading an upstream's event stream: each read
//! of the body (or its end) decoded and translated into engine events.

use svc_core::EngineEvent;

use crate::error::Failure;
use crate::sse::{SseDecoder, SseError, SseEvent};
use crate::translate::{Step, Translator};

/// Decoder and translator of one response body.
#[derive(Debug)]
pub struct StreamReader {
    decoder: SseDecoder,
    translator: Translator,
    /// Decoded and not yet translated (reused between reads).
    events: Vec<SseEvent>,
}

impl StreamReader {
    pub fn new(translator: Translator) -> Self {
        StreamReader {
            decoder: SseDecoder::default(),
            translator,
            events: Vec::new(),
        }
    }

    /// One read of the body: its bytes, `None` when the body ended, or why
    /// it could not be read. What it completes goes to `out`.
    ///
    /// The events a read completed before a malformed line are translated
    /// before the line fails the stream, so the outcome does not depend on
    /// how the body was cut into reads; and a failure once everything but
    /// the usage or `[DONE]` came finishes the reply with what arrived.
    pub fn read(
        &mut self,
        read: Result<Option<&[u8]>, Failure>,
        out: &mut Vec<EngineEvent>,
    ) -> Result<Step, Failure> {
        let step = match read {
            Err(failure) => Err(failure),
            Ok(Some(bytes)) => {
                let decoded = self.decoder.push(bytes, &mut self.events);
                self.translate(decoded, out)
            }
            Ok(None) => {
                let decoded = self.decoder.finish(&mut self.events);
                self.translate(decoded, out).and_then(|step| match step {
                    Step::Done => Ok(Step::Done),
                    Step::More => self.translator.end_of_body(out),
                })
            }
        };
        match step {
            Err(failure) if self.translator.finished() => {
                tracing::debug!(?failure, "upstream stream ended untidily after finishing");
                self.translator.end_of_body(out)
            }
            other => other,
        }
    }

    /// Translates the decoded events, then reports a decoding error.
    fn translate(
        &mut self,
        decoded: Result<(), SseError>,
        out: &mut Vec<EngineEvent>,
    ) -> Result<Step, Failure> {
        for event in self.events.drain(..) {
            let step = self
                .translator
                .event(event.event.as_deref(), &event.data, out)?;
            if step == Step::Done {
                return Ok(Step::Done);
            }
        }
        decoded.map_err(malformed)?;
        Ok(Step::More)
    }
}

fn malformed(e: SseError) -> Failure {
    Failure::BadResponse(format!("malformed upstream stream: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(reads: &[&[u8]]) -> Result<Vec<EngineEvent>, Failure> {
        let mut reader = StreamReader::new(Translator::new(false, 1));
        let mut out = Vec::new();
        for bytes in reads {
            if reader.read(Ok(Some(bytes)), &mut out)? == Step::Done {
                return Ok(out);
            }
        }
        reader.read(Ok(None), &mut out)?;
        Ok(out)
    }

    /// Seen while writing the `upstream_stream` fuzz target (its check that
    /// the outcome does not depend on how the body is cut): a complete reply
    /// followed by a line that is not UTF-8 succeeded when the bad line came
    /// in a later read, and failed when it came in the same read as the
    /// finish (the events before it were dropped untranslated).
    #[test]
    fn events_before_a_malformed_line_count_however_the_reads_fall() {
        let finish = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n";
        let bad = b"data: \xff\n\n";
        let whole = [finish.as_slice(), bad.as_slice()].concat();
        let apart = read_all(&[finish, bad]);
        let together = read_all(&[&whole]);
        assert!(apart.is_ok(), "{apart:?}");
        assert_eq!(together, apart);
    }
}
