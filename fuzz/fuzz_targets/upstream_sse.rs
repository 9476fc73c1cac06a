//! The upstream engine's event-stream decoder on arbitrary bodies: never a
//! panic, and the same events (and the same error) however the body is cut
//! into network reads, down to single bytes and `\r` apart from its `\n`.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use svc_engine_upstream::fuzzing::{SseDecoder, SseError, SseEvent};

fn decode(pieces: &[&[u8]]) -> (Vec<SseEvent>, Option<SseError>) {
    let mut decoder = SseDecoder::default();
    let mut out = Vec::new();
    for piece in pieces {
        if let Err(e) = decoder.push(piece, &mut out) {
            return (out, Some(e));
        }
    }
    let error = decoder.finish(&mut out).err();
    (out, error)
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let whole = decode(&[body]);
    let cut = decode(&common::byte_pieces(body, seed));
    assert_eq!(whole, cut, "cut with seed {seed}");
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(whole, decode(&bytes), "cut into single bytes");
    for event in &whole.0 {
        assert!(!event.data.contains('\r') || body.contains(&b'\r'));
        assert!(event.event.as_deref().is_none_or(|e| !e.contains('\n')));
    }
});
