//! An upstream's response body through the decoder and the translator, as
//! the upstream engine reads it (an event stream, or a whole JSON
//! completion): never a panic; the same outcome however the body is cut
//! into reads; and when it succeeds svc's engine contract holds: exactly one `Finish`, last; tool calls numbered 0, 1, … in order
//! of appearance, each introduced by a piece with its id and name; no
//! reasoning unless asked for.
#![no_main]
#![expect(
    clippy::panic,
    reason = "a target panics on a broken invariant: that is what libFuzzer reports"
)]

mod common;

use libfuzzer_sys::fuzz_target;
use svc_core::EngineEvent;
use svc_engine_upstream::fuzzing::{Step, StreamReader, Translator};

/// The events of a body read in `pieces`, as the engine's body reader
/// makes them (reads until `Done`, then the end of the body).
fn stream(pieces: &[&[u8]], keep_reasoning: bool) -> Result<Vec<EngineEvent>, String> {
    let mut reader = StreamReader::new(Translator::new(keep_reasoning, 7));
    let mut out = Vec::new();
    for piece in pieces {
        if reader
            .read(Ok(Some(piece)), &mut out)
            .map_err(|e| format!("{e:?}"))?
            == Step::Done
        {
            return Ok(out);
        }
    }
    match reader
        .read(Ok(None), &mut out)
        .map_err(|e| format!("{e:?}"))?
    {
        Step::Done => Ok(out),
        Step::More => Err("the end of the body is not the end of the stream".into()),
    }
}

fn check(events: &[EngineEvent], keep_reasoning: bool) {
    let finishes = events
        .iter()
        .filter(|e| matches!(e, EngineEvent::Finish { .. }))
        .count();
    assert_eq!(finishes, 1, "{events:?}");
    assert!(matches!(events.last(), Some(EngineEvent::Finish { .. })));
    let mut calls = 0u32;
    for event in events {
        match event {
            EngineEvent::ToolCall(chunk) => {
                if chunk.index == calls {
                    assert!(
                        chunk.id.as_deref().is_some_and(|id| !id.is_empty()),
                        "{chunk:?}"
                    );
                    assert!(chunk.name.is_some(), "{chunk:?}");
                    calls += 1;
                } else {
                    assert!(chunk.index < calls, "call {} before {calls}", chunk.index);
                    assert!(chunk.id.is_none() && chunk.name.is_none(), "{chunk:?}");
                }
            }
            EngineEvent::Reasoning(text) => {
                assert!(keep_reasoning);
                assert!(!text.is_empty());
            }
            EngineEvent::Text(text) => assert!(!text.is_empty()),
            EngineEvent::Logprobs(tokens) => assert!(!tokens.is_empty()),
            EngineEvent::Finish { .. } => {}
            // svc asks an upstream for one choice (n > 1 is refused before).
            EngineEvent::Choice(index) => {
                panic!("a choice event ({index}) from one upstream reply")
            }
            // An upstream is never asked to score a prompt (refused before).
            EngineEvent::PromptLogprobs(tokens) => {
                panic!(
                    "prompt scores ({} tokens) from an upstream reply",
                    tokens.len()
                )
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let keep_reasoning = seed & 1 == 1;
    if seed & 2 == 2 {
        // A whole `chat.completion` (an upstream that ignored `stream`).
        let mut translator = Translator::new(keep_reasoning, 7);
        let mut out = Vec::new();
        if translator.whole(body, &mut out).is_ok() {
            check(&out, keep_reasoning);
        }
        return;
    }
    let whole = stream(&[body], keep_reasoning);
    if let Ok(events) = &whole {
        check(events, keep_reasoning);
    }
    let cut = stream(&common::byte_pieces(body, seed), keep_reasoning);
    // Generated call ids are random; compare the rest.
    let strip = |r: &Result<Vec<EngineEvent>, String>| {
        r.as_ref()
            .map(|events| {
                events
                    .iter()
                    .map(|e| match e {
                        EngineEvent::ToolCall(c) => {
                            let mut c = c.clone();
                            c.id = c.id.map(|_| String::new());
                            EngineEvent::ToolCall(c)
                        }
                        other => other.clone(),
                    })
                    .collect::<Vec<_>>()
            })
            .map_err(|_| ())
    };
    assert_eq!(strip(&whole), strip(&cut), "cut with seed {seed}");
});
