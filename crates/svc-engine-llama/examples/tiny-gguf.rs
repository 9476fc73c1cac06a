//! Writes a tiny GGUF of a model family (see `svc_engine_llama::testing`)
//! for tests that run `svc serve` from another language:
//!
//! ```text
//! cargo run -p svc-engine-llama --example tiny-gguf -- OUT.gguf harmony
//! ```
//!
//! `harmony`: gpt-oss's family; it reasons in the analysis channel and
//! calls `get_weather` for Paris (`TinyModel::harmony_calling`).
//! `devstral`: Devstral's family, for an agent; it calls `exec_command`
//! to echo `svc-codex-ok`, then says it ran it (`TinyModel::devstral_agent`).

#![expect(clippy::print_stderr, reason = "a tool says what went wrong")]

use std::process::ExitCode;

use svc_engine_llama::testing::TinyModel;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out, family] = args.as_slice() else {
        eprintln!("usage: tiny-gguf OUT.gguf harmony|devstral");
        return ExitCode::from(2);
    };
    let model = match family.as_str() {
        "harmony" => TinyModel::harmony_calling(),
        "devstral" => TinyModel::devstral_agent(),
        other => {
            eprintln!("tiny-gguf: no family {other:?} (harmony, devstral)");
            return ExitCode::from(2);
        }
    };
    match model.write(std::path::Path::new(out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tiny-gguf: cannot write {out}: {e}");
            ExitCode::FAILURE
        }
    }
}
