//! The process-wide llama.cpp backend: initialised once (llama.cpp allows
//! only one), after the CPU check, with llama.cpp's logs sent to `tracing`.
//! Nothing else in the crate calls `LlamaBackend::init`.

use std::sync::OnceLock;

use llama_cpp_2::llama_backend::LlamaBackend;

use crate::{cpu, numerics};

static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();

/// The shared backend, initialising it on first use.
pub(crate) fn backend() -> Result<&'static LlamaBackend, String> {
    BACKEND
        .get_or_init(|| {
            cpu::check()?;
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            let backend =
                LlamaBackend::init().map_err(|e| format!("cannot start llama.cpp: {e}"))?;
            // Before any context exists; an engine that asks for
            // batch-invariant numerics reports it if this failed.
            if let Err(e) = numerics::install() {
                tracing::warn!("batch-invariant numerics are unavailable: {e}");
            }
            Ok(backend)
        })
        .as_ref()
        .map_err(Clone::clone)
}
