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
    /// Prompt tokens not fed because their KV cells were reused: from the
    /// slot that ran the same prefix before, from another slot, or restored
    /// from the host cache.
    pub reused_prompt_tokens: u64,
    /// Tokens sampled.
    pub generated_tokens: u64,
    /// Sequences that ended, and requests whose preparation stopped,
    /// because their consumer went away.
    pub cancelled: u64,
    /// Sequence states copied to the host cache (a slot taken for another prompt).
    pub host_cache_saves: u64,
    /// Sequence states restored from the host cache into a slot.
    pub host_cache_restores: u64,
    /// States dropped from the host cache to make room for newer ones.
    pub host_cache_evictions: u64,
    /// Bytes held in the host cache now, with the copies of suspended
    /// sequences (together never above its limit).
    pub host_cache_bytes: u64,
    /// States held in the host cache now.
    pub host_cache_entries: u64,
    /// Idle slots' cached prefixes freed because the KV pool was full.
    pub kv_evictions: u64,
    /// Sequences ended early because the KV pool was full of running ones.
    pub kv_full: u64,
    /// Times the idle slots' prefixes were moved to the bottom of the pool
    /// (when no sequence ran, after the slots had held far more cells).
    pub kv_settles: u64,
    /// The KV pool's size in bytes (0 where the engine cannot tell).
    pub kv_pool_bytes: u64,
    /// Bytes of the KV pool handed back to the kernel when the context was
    /// made, resident again only as cells are used (see `kv_pages.rs`).
    pub kv_released_bytes: u64,
    /// Sequences that started from a copy of another's decoded prompt (the
    /// choices of a request with `n > 1`) instead of decoding it again.
    pub shared_prompts: u64,
    /// Grammars parsed into a sampler (a request with a grammar parses it
    /// once, whatever its `n`; its choices get copies).
    pub grammars_parsed: u64,
    /// Sequences suspended to give their slot to another client's request
    /// (their owner held more than its share of the slots).
    pub suspended: u64,
    /// Suspended sequences put back into a slot, with their cells (moved
    /// back, copied back, or decoded again).
    pub resumed: u64,
    /// Suspended sequences whose cells in the pool were given up because
    /// the pool needed the room (they resume from their copy in host
    /// memory, or decode their tokens again).
    pub spilled: u64,
    /// Suspended sequences that resumed by decoding their tokens again:
    /// their cells were given up and no copy fit the host budget.
    pub recomputed: u64,
    /// Bytes of requests' prompt text tokenized (a prompt far past the
    /// context is refused before, see `fit`).
    pub tokenized_bytes: u64,
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
    reused_prompt_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    cancelled: AtomicU64,
    shared_prompts: AtomicU64,
    grammars_parsed: AtomicU64,
    host_cache_saves: AtomicU64,
    host_cache_restores: AtomicU64,
    host_cache_evictions: AtomicU64,
    host_cache_bytes: AtomicU64,
    host_cache_entries: AtomicU64,
    kv_evictions: AtomicU64,
    kv_full: AtomicU64,
    kv_settles: AtomicU64,
    kv_pool_bytes: AtomicU64,
    kv_released_bytes: AtomicU64,
    suspended: AtomicU64,
    resumed: AtomicU64,
    spilled: AtomicU64,
    recomputed: AtomicU64,
    tokenized_bytes: AtomicU64,
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

    pub(crate) fn reused(&self, tokens: u64) {
        self.reused_prompt_tokens
            .fetch_add(tokens, Ordering::Relaxed);
    }

    pub(crate) fn host_saved(&self, evicted: u64) {
        self.host_cache_saves.fetch_add(1, Ordering::Relaxed);
        self.host_cache_evictions
            .fetch_add(evicted, Ordering::Relaxed);
    }

    pub(crate) fn host_restored(&self) {
        self.host_cache_restores.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_host_cache(&self, bytes: u64, entries: u64) {
        self.host_cache_bytes.store(bytes, Ordering::Relaxed);
        self.host_cache_entries.store(entries, Ordering::Relaxed);
    }

    pub(crate) fn kv_evicted(&self) {
        self.kv_evictions.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn kv_full(&self) {
        self.kv_full.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn kv_settled(&self) {
        self.kv_settles.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn kv_pool(&self, bytes: u64, released: u64) {
        self.kv_pool_bytes.store(bytes, Ordering::Relaxed);
        self.kv_released_bytes.store(released, Ordering::Relaxed);
    }

    pub(crate) fn shared_prompt(&self) {
        self.shared_prompts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn grammar_parsed(&self) {
        self.grammars_parsed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn suspended(&self) {
        self.suspended.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn resumed(&self) {
        self.resumed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn spilled(&self) {
        self.spilled.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn recomputed(&self) {
        self.recomputed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn host_evicted(&self, evicted: u64) {
        self.host_cache_evictions
            .fetch_add(evicted, Ordering::Relaxed);
    }

    pub(crate) fn tokenized(&self, bytes: usize) {
        self.tokenized_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
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
            reused_prompt_tokens: self.reused_prompt_tokens.load(Ordering::Relaxed),
            shared_prompts: self.shared_prompts.load(Ordering::Relaxed),
            grammars_parsed: self.grammars_parsed.load(Ordering::Relaxed),
            host_cache_saves: self.host_cache_saves.load(Ordering::Relaxed),
            host_cache_restores: self.host_cache_restores.load(Ordering::Relaxed),
            host_cache_evictions: self.host_cache_evictions.load(Ordering::Relaxed),
            host_cache_bytes: self.host_cache_bytes.load(Ordering::Relaxed),
            host_cache_entries: self.host_cache_entries.load(Ordering::Relaxed),
            kv_evictions: self.kv_evictions.load(Ordering::Relaxed),
            kv_full: self.kv_full.load(Ordering::Relaxed),
            kv_settles: self.kv_settles.load(Ordering::Relaxed),
            kv_pool_bytes: self.kv_pool_bytes.load(Ordering::Relaxed),
            kv_released_bytes: self.kv_released_bytes.load(Ordering::Relaxed),
            suspended: self.suspended.load(Ordering::Relaxed),
            resumed: self.resumed.load(Ordering::Relaxed),
            spilled: self.spilled.load(Ordering::Relaxed),
            recomputed: self.recomputed.load(Ordering::Relaxed),
            tokenized_bytes: self.tokenized_bytes.load(Ordering::Relaxed),
            active_sequences: self.active_sequences.load(Ordering::Relaxed),
            waiting_requests,
        }
    }
}
