//! The embedded engine's text assembler on arbitrary token bytes and stop
//! sequence: never a panic; the released text is the bytes decoded (invalid
//! sequences as U+FFFD) up to the first stop sequence, which never shows,
//! however the bytes are cut into tokens.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use svc_engine_llama::TextAssembler;

/// The text released for `tokens` and whether a stop sequence ended it.
fn assemble(stops: &[String], tokens: &[&[u8]]) -> (String, bool) {
    let mut assembler = TextAssembler::new(stops);
    let mut text = String::new();
    for token in tokens {
        let release = assembler.push(token);
        text.push_str(&release.text);
        if release.stopped {
            return (text, true);
        }
    }
    text.push_str(&assembler.finish());
    (text, false)
}

fuzz_target!(|data: &[u8]| {
    // Input: a seed byte, a shape byte (whether there is a stop sequence,
    // and its length, 1 to 8 bytes), the stop, then the token bytes. One
    // stop only: with several that overlap, which one ends the text rightly
    // depends on the tokens (the first completed wins).
    let [seed, shape, rest @ ..] = data else {
        return;
    };
    let mut rest = rest;
    let mut stops = Vec::new();
    if shape & 1 == 1 {
        let len = usize::from((shape >> 1) & 7) + 1;
        let (stop, tail) = rest.split_at(len.min(rest.len()));
        let stop = String::from_utf8_lossy(stop).into_owned();
        // A character cut off at the very end becomes U+FFFD only when the
        // text is finished, after the last stop check.
        if stop.contains('\u{FFFD}') {
            return;
        }
        stops.push(stop);
        rest = tail;
    }
    let bytes = rest;
    let expected = {
        let text = String::from_utf8_lossy(bytes).into_owned();
        let first = stops
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| text.find(s.as_str()))
            .min();
        match first {
            Some(at) => (text[..at].to_owned(), true),
            None => (text, false),
        }
    };
    let whole = assemble(&stops, &[bytes]);
    assert_eq!(whole, expected, "stops {stops:?}");
    let cut = assemble(&stops, &common::byte_pieces(bytes, *seed));
    assert_eq!(cut, expected, "stops {stops:?}, cut with seed {seed}");
    let single: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(
        assemble(&stops, &single),
        expected,
        "stops {stops:?}, single bytes"
    );
});
