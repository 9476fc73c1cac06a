//! The upload route's `multipart/form-data` parser on arbitrary bodies:
//! never a panic, what it holds stays bounded, and the same parts, data
//! and verdict however the body is cut into pieces on its way (at every
//! byte, and as a stream would cut it).
#![no_main]
#![expect(
    clippy::panic,
    reason = "a target panics on a broken invariant: that is what libFuzzer reports"
)]

mod common;

use libfuzzer_sys::fuzz_target;
use svc_server::fuzzing::fuzz_form;

/// The boundary the seeds use; the fuzzer finds others by changing bodies.
const BOUNDARY: &str = "svc-fuzz";

fuzz_target!(|data: &[u8]| {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let whole = fuzz_form(BOUNDARY, &[body]);
    let streamed = fuzz_form(BOUNDARY, &common::byte_pieces(body, seed));
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    let byte_by_byte = fuzz_form(BOUNDARY, &bytes);
    // An error can be found at a different byte (the bounds count what was
    // passed over), but never a different part or verdict before it.
    assert_eq!(
        whole.1.is_ok(),
        streamed.1.is_ok(),
        "{whole:?} {streamed:?}"
    );
    assert_eq!(whole.1.is_ok(), byte_by_byte.1.is_ok());
    if whole.1.is_ok() {
        assert_eq!(whole, streamed);
        assert_eq!(whole, byte_by_byte);
        assert!(whole.0.iter().all(|p| p.ended), "{whole:?}");
    }
});
