//! The embedded engine's tool-call parser on arbitrary model output: never
//! a panic; the same calls and text however the output is cut into tokens;
//! only offered functions are called, with (the start of) a JSON object as
//! arguments; and
//! no `<tool_call>` markup leaks around a call that was recognised.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use svc_engine_llama::fuzzing::{ToolOutput, parse_tool_calls};

/// Adjacent texts joined (how they are cut depends on the tokens).
fn joined(out: Vec<ToolOutput>) -> Vec<ToolOutput> {
    let mut merged: Vec<ToolOutput> = Vec::new();
    for piece in out {
        match (merged.last_mut(), piece) {
            (Some(ToolOutput::Text(a)), ToolOutput::Text(b)) => a.push_str(&b),
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
    let names = vec!["get_weather".to_owned(), "search".to_owned()];
    let whole = parse_tool_calls(&names, &[&output]);
    for piece in &whole {
        match piece {
            ToolOutput::Text(text) => assert!(!text.is_empty()),
            ToolOutput::Call { name, arguments } => {
                assert!(names.contains(name), "{name:?}");
                // Streamed arguments are as the model wrote them (cut off,
                // perhaps), but always the start of an object.
                assert!(
                    arguments.is_empty() || arguments.starts_with('{'),
                    "{arguments:?}"
                );
                if let Ok(value) = serde_json::from_str::<serde_json::Value>(arguments) {
                    assert!(value.is_object(), "{arguments:?}");
                }
            }
        }
    }
    let cut = parse_tool_calls(&names, &common::str_pieces(&output, seed));
    assert_eq!(joined(whole.clone()), joined(cut), "cut with seed {seed}");
    let chars: Vec<String> = output.chars().map(String::from).collect();
    let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(
        joined(whole),
        joined(parse_tool_calls(&names, &chars)),
        "cut into characters"
    );
});
