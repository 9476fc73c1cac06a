//! The audio upload's WAV reader (what a transcription is billed) on
//! arbitrary files: never a panic; a length only where the header's fields
//! agree, finite, and no longer than one one-byte frame a second of the
//! file would play; a refusal that names what is wrong.
#![no_main]
#![expect(
    clippy::panic,
    reason = "a target panics on a broken invariant: that is what libFuzzer reports"
)]

use libfuzzer_sys::fuzz_target;
use svc_server::fuzzing::fuzz_wav_seconds;

fuzz_target!(|data: &[u8]| {
    match fuzz_wav_seconds(data) {
        None => {}
        Some(Ok(seconds)) => {
            assert!(seconds.is_finite() && seconds >= 0.0, "{seconds}");
            // A frame is at least a byte, at a sample rate of at least 1 Hz.
            assert!(seconds <= data.len() as f64, "{seconds} s of {} bytes", data.len());
            assert!(data.starts_with(b"RIFF") || data.starts_with(b"RF64"));
        }
        Some(Err(message)) => assert!(message.contains("WAV"), "{message}"),
    }
});
