//! The process-wide llama.cpp backend: initialised once (llama.cpp allows
//! only one), after the CPU check, with llama.cpp's logs sent to `tracing`.
//! Nothing else in the crate calls `LlamaBackend::init`.

use std::sync::OnceLock;

use llama_cpp_2::llama_backend::LlamaBackend;

use crate::cpu;

static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();

/// The shared backend, initialising it on first use.
pub(crate) fn backend() -> Result<&'static LlamaBackend, String> {
    BACKEND
        .get_or_init(|| {
            cpu::check()?;
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| format!("cannot start llama.cpp: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}
