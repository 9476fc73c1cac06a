//! How an embedded engine is set up: which GGUF, how much context, how many
//! sequences at once, threads and queue. Plain data with defaults; checking
//! the values against the model happens when the engine loads.

use std::path::PathBuf;

/// Settings of one [`LlamaEngine`](crate::LlamaEngine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlamaEngineOptions {
    /// The GGUF file to load.
    pub model_path: PathBuf,
    /// Context tokens each sequence gets (prompt and reply together). llama.cpp
    /// rounds it up to a multiple of 256; it is capped at the model's training context.
    pub context_per_sequence: u32,
    /// Sequences decoded together in one batch (and KV-cache streams).
    pub parallel: u32,
    /// CPU threads llama.cpp uses; `None` means every core this process may use.
    pub threads: Option<u32>,
    /// Requests that may wait for a free sequence; one more is refused as overloaded.
    pub queue_capacity: usize,
    /// Most tokens in one decode step; long prompts are fed in chunks of this size.
    pub batch_size: u32,
    /// Flash attention: `Some(true)` on, `Some(false)` off, `None` llama.cpp's choice.
    pub flash_attention: Option<bool>,
    /// Serve a model whose weights are mostly Q4_1 from a Q8_0 copy of it,
    /// made once beside it (`<stem>.svc-q8_0.gguf`, see `svc_gguf::cache`) and reused
    /// while it is newer than the model and its header matches. llama.cpp's
    /// x86 CPU kernels batch Q8_0 better than Q4_1 (prompt tokens/s about
    /// 1.4x, 16-stream decode about 1.25x on the default model) and the copy
    /// is near-lossless, at 1.5x the file size. Off by default: it does not
    /// reach the 3x 16-vs-1-stream target (see BENCHMARKS.md). Other models
    /// are never touched.
    pub repack: bool,
}

impl LlamaEngineOptions {
    /// Default settings for the model at `model_path`.
    pub fn new(model_path: impl Into<PathBuf>) -> Self {
        LlamaEngineOptions {
            model_path: model_path.into(),
            context_per_sequence: 4096,
            parallel: 4,
            threads: None,
            queue_capacity: 64,
            batch_size: 512,
            flash_attention: None,
            repack: false,
        }
    }

    /// The number of threads to give llama.cpp.
    pub(crate) fn thread_count(&self) -> i32 {
        let n = self.threads.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            |n| n as usize,
        );
        i32::try_from(n.max(1)).unwrap_or(i32::MAX)
    }
}
