//! The embedded engine's parsers of the model families' tool calls and
//! reasoning (Mistral, Llama 3, pythonic, Qwen3-Coder, DeepSeek, Kimi, GLM,
//! Granite, Command R, gpt-oss's harmony) on arbitrary model output: never
//! a panic, and the same text, reasoning and calls however the output is
//! cut into tokens; every call is of a function offered.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use svc_engine_llama::fuzzing::{FamilyOutput, parse_family};

const FORMATS: [&str; 11] = [
    "mistral",
    "llama3",
    "pythonic",
    "qwen3-coder",
    "deepseek",
    "kimi",
    "glm",
    "granite",
    "phi4",
    "command-r",
    "harmony",
];

fuzz_target!(|data: &[u8]| {
    let Some((&seed, rest)) = data.split_first() else {
        return;
    };
    let format = FORMATS[usize::from(seed) % FORMATS.len()];
    let output = String::from_utf8_lossy(rest);
    let names = vec!["get_weather".to_owned(), "add".to_owned()];
    let whole = parse_family(format, &names, &[&output]).unwrap_or_default();
    for item in &whole {
        if let FamilyOutput::Call { name, .. } = item {
            assert!(names.contains(name), "{format}: a call of {name:?}");
        }
    }
    let cut = parse_family(format, &names, &common::str_pieces(&output, seed)).unwrap_or_default();
    assert_eq!(whole, cut, "{format}, cut with seed {seed}");
});
