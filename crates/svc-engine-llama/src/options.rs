//! How an embedded engine is set up: which GGUF, how much context, how many
//! sequences at once, threads and queue. Plain data with defaults; checking
//! the values against the model happens when the engine loads.

use std::path::PathBuf;

use crate::{ReasoningFormat, ToolFormat};

/// Host memory for saved prefixes by default: 512 MiB, about 23,000
/// tokens of SmolLM2-135M's f16 KV.
pub const DEFAULT_PREFIX_CACHE_BYTES: usize = 512 << 20;

/// The type of the KV cache's cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    /// 16-bit floats, llama.cpp's default.
    #[default]
    F16,
    /// 8-bit blocks: about half the memory of f16.
    Q8_0,
}

impl KvType {
    /// Its name in settings: `f16` or `q8_0`.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
        }
    }

    /// The type named `name` (`f16` or `q8_0`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "f16" => Some(KvType::F16),
            "q8_0" => Some(KvType::Q8_0),
            _ => None,
        }
    }
}

/// Settings of one [`LlamaEngine`](crate::LlamaEngine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlamaEngineOptions {
    /// The GGUF file to load.
    pub model_path: PathBuf,
    /// Context tokens one sequence may use (prompt and reply together);
    /// capped at the model's training context and at `kv_cache`.
    pub context_per_sequence: u32,
    /// Sequences decoded together in one batch.
    pub parallel: u32,
    /// KV cells of the one pool all sequences share (llama.cpp's unified KV
    /// cache), each sequence taking only the cells it uses, finished ones
    /// keeping theirs for the next request with the same prefix until the
    /// cells are needed. `None`: `parallel × context_per_sequence`, so every
    /// slot can hold a whole context at once. llama.cpp allocates the pool
    /// at load and rounds it up to a multiple of 256.
    pub kv_cache: Option<u32>,
    /// How KV cells are stored: f16, or q8_0 at about half the memory
    /// (needs flash attention, which it turns on).
    pub kv_type: KvType,
    /// Bytes of host memory for the states of sequences whose slot was
    /// taken for an unrelated prompt, restored when a request starts the
    /// same way; 0 keeps none.
    pub prefix_cache_bytes: usize,
    /// CPU threads llama.cpp uses; `None` means every core this process may use.
    pub threads: Option<u32>,
    /// Requests that may wait for a free sequence; one more is refused as overloaded.
    pub queue_capacity: usize,
    /// The most slots one client (an API key, see
    /// `GenerateRequest::client`) or one request's `n` choices hold while
    /// another client's request waits: a client alone takes every slot; when
    /// another's request comes, the first's further sequences wait and its
    /// newest beyond this share are suspended to make room (see the
    /// scheduler). `None`: half of `parallel` (at least 1), so that no one
    /// client can keep every other waiting for a whole generation.
    pub slots_per_client: Option<u32>,
    /// Most tokens in one decode step; long prompts are fed in chunks of this size.
    pub batch_size: u32,
    /// Flash attention: `Some(true)` on, `Some(false)` off, `None` llama.cpp's choice.
    pub flash_attention: Option<bool>,
    /// Serve a model whose weights are mostly Q4_1 from a Q8_0 copy of it,
    /// made once beside it (`<stem>.svc-q8_0.gguf`, see `svc_gguf::cache`) and reused
    /// while it is newer than the model and its header matches. llama.cpp's
    /// x86 CPU kernels batch Q8_0 better than Q4_1 (prompt tokens/s about
    /// 1.4x, 16-stream decode about 1.25x on the default model) and the copy
    /// is near-lossless, at 1.5x the file size; single-stream decoding,
    /// bound by reading the weights, is about 0.9x. Off here (a library
    /// writes no file unasked); `svc serve` turns it on by default (see
    /// BENCHMARKS.md). Other models are never touched.
    pub repack: bool,
    /// Batch-invariant numerics: a sequence's logits are the same bits
    /// whatever else is in the batch, whatever the pool held before and
    /// wherever its cells lie, so a greedy or seeded request gives the same
    /// text under any load (see `numerics`). Costs some speed where
    /// llama.cpp's faster attention kernels would apply (BENCHMARKS.md).
    pub batch_invariant: bool,
    /// How the model writes tool calls; `None`: as its chat template
    /// says (see `families`).
    pub tool_format: Option<ToolFormat>,
    /// How the model marks its reasoning; `None`: as its chat template
    /// says (see `reasoning`).
    pub reasoning_format: Option<ReasoningFormat>,
}

impl LlamaEngineOptions {
    /// Default settings for the model at `model_path`.
    pub fn new(model_path: impl Into<PathBuf>) -> Self {
        LlamaEngineOptions {
            model_path: model_path.into(),
            context_per_sequence: 4096,
            parallel: 4,
            kv_cache: None,
            kv_type: KvType::F16,
            prefix_cache_bytes: DEFAULT_PREFIX_CACHE_BYTES,
            threads: None,
            queue_capacity: 64,
            slots_per_client: None,
            batch_size: 512,
            flash_attention: None,
            repack: false,
            batch_invariant: true,
            tool_format: None,
            reasoning_format: None,
        }
    }

    /// The most slots one client holds at once (see [`Self::slots_per_client`]).
    pub fn client_slots(&self) -> u32 {
        self.slots_per_client
            .unwrap_or(self.parallel / 2)
            .clamp(1, self.parallel.max(1))
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
