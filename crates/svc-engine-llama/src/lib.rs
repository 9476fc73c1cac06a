//! svc's embedded inference engine: GGUF models run in-process by llama.cpp
//! (through the `llama-cpp-2` crate), behind svc-core's `Engine` trait.
//!
//! - `engine`: [`LlamaEngine`], loading, rendering, tokenizing, admission.
//! - `scheduler`: the one engine thread that owns the llama.cpp context and
//!   decodes all sequences together (continuous batching), reusing the KV
//!   cells of prompt prefixes it decoded before; in parts: the queue and
//!   admission, placement and prefix reuse, the KV pool's order,
//!   suspension, shared prompts, and the batch of a step.
//! - `kv_pages`: the KV pool's untouched pages handed back to the kernel
//!   once the context is made, so its memory follows the cells in use.
//! - `prefix`: common prefixes and the host-memory cache of sequence states.
//! - `sampler`: per-sequence sampler chains (temperature, top-p, seed, penalties, grammar).
//! - `template`: chat templates from GGUF metadata, rendered with minijinja.
//! - `fit`: whether a text can fit the context, from its length alone.
//! - `prompt`: rendered prompts to tokens, the client's text always plain
//!   text (never control tokens), and the cancellation of a request's preparation.
//! - `text`: whole-character, stop-sequence-safe text streaming.
//! - `logprobs`: generated tokens' log probabilities, and when they go out.
//! - `chat`: the chat layer of `Engine::generate`: tools, reasoning and
//!   response formats on top of raw completions, with `grammar` (JSON
//!   Schema to GBNF), `tools` (tool prompts and the tool-call parser),
//!   `reasoning` (think blocks, the explicit reasoning pass) and `markup`.
//! - `counter`: [`LlamaCounter`], a model's prompt counts from its
//!   vocabulary alone (no weights), for a model that is not loaded.
//! - `embed`: [`LlamaEmbedder`], embedding models (BERT and kin) encoded in
//!   batches that take every waiting request's next input in turn.
//! - `cpu`, `backend`: the CPU check and the process-wide llama.cpp backend.
//! - `numerics`: batch-invariant numerics (the same logits whatever else
//!   is in the batch) and what they are called in `system_fingerprint`.
//!
//! Reading, writing and converting GGUF files (the Q8_0 copy of a Q4_1 model
//! the engine loads when `repack` is on, the test models) is `svc-gguf`'s.
//!
//! This crate never sees HTTP or JSON bodies.

mod backend;
mod chat;
mod choices;
mod counter;
pub mod cpu;
mod embed;
mod engine;
mod families;
mod fit;
#[doc(hidden)]
pub mod fuzzing;
mod grammar;
mod harmony;
mod harmony_tokens;
mod kv_pages;
mod logprobs;
mod markup;
mod memory;
mod numerics;
mod options;
mod prefill;
mod prefix;
mod prompt;
mod reasoning;
mod runner;
mod sampler;
mod scheduler;
mod stats;
pub mod template;
#[cfg(feature = "testing")]
pub mod testing;
mod text;
mod tools;

pub use counter::LlamaCounter;
pub use embed::{BATCH_TOKENS, EmbedderInfo, LlamaEmbedder, is_embedding_model};
pub use engine::{LlamaEngine, LoadError, ModelInfo};
pub use families::ToolFormat;
pub use memory::memory_estimate;
pub use options::{DEFAULT_PREFIX_CACHE_BYTES, KvType, LlamaEngineOptions};
pub use reasoning::ReasoningFormat;
pub use runner::CompletionParams;
pub use sampler::Grammar;
pub use stats::EngineStats;
pub use template::{ChatTemplate, Fallback, RenderOptions};
pub use text::{Release, TextAssembler};
