//! The upload route's `multipart/form-data` parser on arbitrary bodies:
//! never a panic; parts, data and ends handed on in order, data never in
//! empty pieces; what it holds beyond the piece being fed stays bounded;
//! and the same parts, data and verdict however the body is cut on its way
//! (whole, at every byte, and as a stream would cut it).
#![no_main]
#![expect(
    clippy::panic,
    reason = "a target panics on a broken invariant: that is what libFuzzer reports"
)]

mod common;

use libfuzzer_sys::fuzz_target;
use svc_server::fuzzing::{FuzzEvent, FuzzForm, fuzz_form};

/// The boundary the seeds use.
const BOUNDARY: &str = "svc-fuzz";
/// The parser's bounds (a preamble, a part's headers) and a delimiter.
const HELD_MAX: usize = 16 * 1024 + 4 + BOUNDARY.len() + 4;

/// The events with each part's data joined, checked to come in order.
fn joined(form: &FuzzForm) -> Vec<FuzzEvent> {
    assert!(form.held <= HELD_MAX, "{} bytes held", form.held);
    let mut out: Vec<FuzzEvent> = Vec::new();
    let mut in_part = false;
    for event in &form.events {
        match event {
            FuzzEvent::Part { .. } => {
                assert!(!in_part, "a part began inside another");
                in_part = true;
                out.push(event.clone());
            }
            FuzzEvent::Data(bytes) => {
                assert!(in_part, "data outside a part");
                assert!(!bytes.is_empty(), "data in an empty piece");
                match out.last_mut() {
                    Some(FuzzEvent::Data(joined)) => joined.extend_from_slice(bytes),
                    _ => out.push(event.clone()),
                }
            }
            FuzzEvent::End => {
                assert!(in_part, "a part ended before it began");
                in_part = false;
                out.push(FuzzEvent::End);
            }
        }
    }
    if form.ended.is_ok() {
        assert!(!in_part, "a whole form with a part left open");
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let whole = fuzz_form(BOUNDARY, &[body]);
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    let cuts = [common::byte_pieces(body, seed), bytes];
    let expected = joined(&whole);
    for pieces in &cuts {
        let cut = fuzz_form(BOUNDARY, pieces);
        let events = joined(&cut);
        // The same verdict; a refusal may come at another byte (what was
        // handed on before it may differ), a whole form is read the same.
        assert_eq!(whole.ended.is_ok(), cut.ended.is_ok(), "{whole:?} {cut:?}");
        if whole.ended.is_ok() {
            assert_eq!(expected, events);
        }
    }
});
