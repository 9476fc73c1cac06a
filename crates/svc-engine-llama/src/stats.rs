//! Counters of what the engine thread did, readable from any thread; for
//! metrics and for tests that check batching really happens. Only the engine
//! thread writes them.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the engine's counters since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EngineStats {
    /// `llama_decode` calls.
    pub decode_steps: u64,
    /// The most distinct sequences that shared one decode step.
    pub max_sequences_per_step: u64,
    /// Prompt tokens fed to the model.
    pub prompt_tokens: u64,
    /// Tokens sampled.
    pub generated_tokens: u64,
    /// Sequences that ended, and requests whose preparation stopped,
    /// because their consumer went away.
    pub cancelled: u64,
    /// Sequences moved to a lower slot to keep the batch in one piece.
    pub moved: u64,
    /// Sequences that started from a copy of another's decoded prompt (the
    /// choices of a request with `n > 1`) instead of decoding it again.
    pub shared_prompts: u64,
    /// Sequences decoding now.
    pub active_sequences: u64,
    /// Requests waiting for a free sequence now.
    pub waiting_requests: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    decode_steps: AtomicU64,
    max_sequences_per_step: AtomicU64,
    prompt_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    cancelled: AtomicU64,
    moved: AtomicU64,
    shared_prompts: AtomicU64,
    active_sequences: AtomicU64,
}

impl Counters {
    pub(crate) fn step(&self, sequences: u64, prompt_tokens: u64) {
        self.decode_steps.fetch_add(1, Ordering::Relaxed);
        self.max_sequences_per_step
            .fetch_max(sequences, Ordering::Relaxed);
        self.prompt_tokens
            .fetch_add(prompt_tokens, Ordering::Relaxed);
    }

    pub(crate) fn generated(&self) {
        self.generated_tokens.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn moved(&self) {
        self.moved.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn shared_prompt(&self) {
        self.shared_prompts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_active(&self, n: u64) {
        self.active_sequences.store(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, waiting_requests: u64) -> EngineStats {
        EngineStats {
            decode_steps: self.decode_steps.load(Ordering::Relaxed),
            max_sequences_per_step: self.max_sequences_per_step.load(Ordering::Relaxed),
            prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
            generated_tokens: self.generated_tokens.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            moved: self.moved.load(Ordering::Relaxed),
            shared_prompts: self.shared_prompts.load(Ordering::Relaxed),
            active_sequences: self.active_sequences.load(Ordering::Relaxed),
            waiting_requests,
        }
    }
}
