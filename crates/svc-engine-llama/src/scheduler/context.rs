//! The engine thread's llama.cpp context: made with its settings (one
//! unified pool of KV cells for all sequences, the batch-invariant kernels),
//! and the size llama.cpp gives the pool's buffer (for `kv_pages`, which
//! hands its untouched pages back). It holds no state of its own.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::{KvCacheType, LlamaContextParams};
use llama_cpp_2::model::LlamaModel;

use crate::backend;
use crate::numerics;
use crate::options::KvType;

use super::ContextSettings;

pub(super) fn new_context<'m>(
    model: &'m LlamaModel,
    settings: &ContextSettings,
) -> Result<LlamaContext<'m>, String> {
    let backend = backend::backend()?;
    let n_ctx = std::num::NonZeroU32::new(settings.kv_cells)
        .ok_or_else(|| "the KV cache must have room for at least one token".to_owned())?;
    let kv_type = match settings.kv_type {
        KvType::F16 => KvCacheType::F16,
        KvType::Q8_0 => KvCacheType::Q8_0,
    };
    let params = LlamaContextParams::default()
        .with_n_ctx(Some(n_ctx))
        .with_n_seq_max(settings.parallel)
        // One pool of cells for all sequences: each takes what it uses, and
        // a prefix copied from one sequence to another shares its cells. A
        // sequence attends only over its own cells (the mask hides others').
        .with_kv_unified(true)
        .with_type_k(kv_type)
        .with_type_v(kv_type)
        .with_n_batch(settings.batch_size)
        .with_n_ubatch(settings.batch_size.min(512))
        .with_n_threads(settings.threads)
        .with_n_threads_batch(settings.threads)
        .with_no_perf(true);
    // A quantized V cache needs flash attention.
    let flash_attention = match settings.kv_type {
        KvType::Q8_0 => Some(true),
        KvType::F16 => settings.flash_attention,
    };
    let params = match flash_attention {
        None => params,
        Some(on) => params.with_flash_attention_policy(if on {
            llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_ENABLED
        } else {
            llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_DISABLED
        }),
    };
    numerics::with_kernels(settings.kernels, || {
        model
            .new_context(backend, params)
            .map_err(|e| format!("cannot create the llama.cpp context: {e}"))
    })?
}

/// The size of the KV pool's buffer as llama.cpp allocates it for `cells`
/// cells (one K and one V tensor per layer, a row of each per cell), or
/// `None` for a model whose cache is laid out otherwise (recurrent state,
/// sliding-window layers in a second cache).
pub(super) fn kv_buffer_bytes(model: &LlamaModel, cells: u32, kv_type: KvType) -> Option<usize> {
    if model.is_recurrent() || model.is_hybrid() {
        return None;
    }
    let arch = model.meta_val_str("general.architecture").ok()?;
    if model
        .meta_val_str(&format!("{arch}.attention.sliding_window"))
        .is_ok()
    {
        return None;
    }
    let heads = model.n_head() as usize;
    let head_dim = |key: &str| -> Option<usize> {
        match model.meta_val_str(&format!("{arch}.attention.{key}")) {
            Ok(value) => value.parse().ok(),
            Err(_) => (heads > 0).then(|| model.n_embd() as usize / heads),
        }
    };
    let kv_heads = model.n_head_kv() as usize;
    let row = |values: usize| match kv_type {
        KvType::F16 => values * 2,
        // blocks of 32 values: an f16 scale and 32 int8
        KvType::Q8_0 => values.div_ceil(32) * 34,
    };
    let per_layer =
        row(kv_heads * head_dim("key_length")?) + row(kv_heads * head_dim("value_length")?);
    Some(model.n_layer() as usize * cells as usize * per_layer)
}
