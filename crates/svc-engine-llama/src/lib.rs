//! svc's embedded inference engine: GGUF models run in-process by llama.cpp
//! (through the `llama-cpp-2` crate), behind svc-core's `Engine` trait.
//!
//! - `engine`: [`LlamaEngine`], loading, rendering, tokenizing, admission.
//! - `scheduler`: the one engine thread that owns the llama.cpp context and
//!   decodes all sequences together (continuous batching).
//! - `sampler`: per-sequence sampler chains (temperature, top-p, seed, penalties, grammar).
//! - `template`: chat templates from GGUF metadata, rendered with minijinja.
//! - `text`: whole-character, stop-sequence-safe text streaming.
//! - `cpu`, `backend`: the CPU check and the process-wide llama.cpp backend.
//!
//! This crate never sees HTTP or JSON bodies, and it does not parse tool calls
//! or reasoning (later layers do, on top of [`LlamaEngine::complete`]).

mod backend;
pub mod cpu;
mod engine;
mod options;
mod sampler;
mod scheduler;
mod stats;
pub mod template;
#[cfg(feature = "testing")]
pub mod testing;
mod text;

pub use engine::{CompletionParams, LlamaEngine, LoadError, ModelInfo};
pub use options::LlamaEngineOptions;
pub use sampler::Grammar;
pub use stats::EngineStats;
pub use template::{ChatTemplate, RenderOptions};
pub use text::{Release, TextAssembler};
