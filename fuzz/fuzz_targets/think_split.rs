//! The embedded engine's `<think>` splitter on arbitrary model output: never
//! a panic; the same reasoning and content however the output is cut into
//! tokens; output with no think block is all content, unchanged; reasoning
//! never holds the closing tag.
#![no_main]
#![expect(
    clippy::panic,
    reason = "a target panics on a broken invariant: that is what libFuzzer reports"
)]

mod common;

use libfuzzer_sys::fuzz_target;
use svc_engine_llama::fuzzing::{ThinkOutput, split_think};

fn joined(out: Vec<ThinkOutput>) -> Vec<ThinkOutput> {
    let mut merged: Vec<ThinkOutput> = Vec::new();
    for piece in out {
        match (merged.last_mut(), piece) {
            (Some(ThinkOutput::Reasoning(a)), ThinkOutput::Reasoning(b))
            | (Some(ThinkOutput::Content(a)), ThinkOutput::Content(b)) => a.push_str(&b),
            (_, piece) => merged.push(piece),
        }
    }
    merged
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, rest)) = data.split_first() else {
        return;
    };
    let output = String::from_utf8_lossy(rest);
    let opened = seed & 1 == 1;
    let whole = joined(split_think(opened, &[&output]));
    assert!(whole.len() <= 2, "{whole:?}");
    for piece in &whole {
        if let ThinkOutput::Reasoning(text) = piece {
            assert!(!text.contains("</think>"), "{text:?}");
            assert_eq!(text.trim(), text, "reasoning is trimmed");
        }
    }
    if !opened && !output.trim_start().starts_with("<think>") {
        let content = match whole.as_slice() {
            [] => String::new(),
            [ThinkOutput::Content(c)] => c.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(content, output, "output without a think block is unchanged");
    }
    let cut = joined(split_think(opened, &common::str_pieces(&output, seed)));
    assert_eq!(whole, cut, "cut with seed {seed}");
});
