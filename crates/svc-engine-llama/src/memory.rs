//! The host memory a model takes: its weights as loaded and its KV cells
//! (saved prefixes come on top, up to their own limit). Read off the loaded
//! model ([`ModelInfo::memory_bytes`](crate::ModelInfo::memory_bytes)) or,
//! before loading, off the GGUF's header ([`memory_estimate`]), so that a
//! pool of models loaded on demand can make room for one before it loads.
//!
//! Not counted: llama.cpp's compute buffers (tens of MB; more for a large
//! vocabulary), and the part of the KV cells not yet used, which the
//! engine gives back to the kernel (see `kv_pages`): the KV count is what
//! the cells grow to, not what they hold at first.

use llama_cpp_2::model::LlamaModel;
use svc_gguf::{GgufHeader, MetaValue};

use crate::options::{KvType, LlamaEngineOptions};

/// The KV cells' width: what one cell of every layer stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KvShape {
    pub layers: u64,
    pub heads_kv: u64,
    /// Elements of one head's key.
    pub key_length: u64,
    /// Elements of one head's value.
    pub value_length: u64,
}

impl KvShape {
    /// The bytes of `cells` cells, stored as `kv_type`. llama.cpp rounds
    /// the cells up to 256; a sliding-window layer may keep fewer (not
    /// with the full-size cache llama.cpp makes by default).
    pub fn bytes(self, cells: u32, kv_type: KvType) -> u64 {
        let cells = u64::from(cells).div_ceil(256) * 256;
        let elements = self.layers * cells * self.heads_kv * (self.key_length + self.value_length);
        match kv_type {
            KvType::F16 => elements * 2,
            // 32 values in 34 bytes.
            KvType::Q8_0 => elements.div_ceil(32) * 34,
        }
    }

    /// The shape of a loaded model: each head as long as the GGUF's
    /// `attention.key_length` and `value_length` say, else the embedding
    /// over the heads.
    pub fn of_model(model: &LlamaModel) -> Self {
        let arch = model
            .meta_val_str("general.architecture")
            .unwrap_or_default();
        let length = |key: &str| {
            model
                .meta_val_str(&format!("{arch}.attention.{key}"))
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
        };
        let heads = u64::from(model.n_head().max(1));
        let per_head = u64::try_from(model.n_embd()).unwrap_or(0) / heads;
        KvShape {
            layers: u64::from(model.n_layer()),
            heads_kv: u64::from(model.n_head_kv()),
            key_length: length("key_length").unwrap_or(per_head),
            value_length: length("value_length").unwrap_or(per_head),
        }
    }

    /// The same read off a GGUF's header (`None` when it lacks the keys).
    fn of_header(header: &GgufHeader) -> Option<Self> {
        let arch = header.get("general.architecture")?.as_str()?;
        let number = |key: &str| {
            header
                .get(&format!("{arch}.{key}"))
                .and_then(MetaValue::as_u64)
        };
        let heads = number("attention.head_count")?.max(1);
        let per_head = number("embedding_length")? / heads;
        Some(KvShape {
            layers: number("block_count")?,
            // An array (a count per layer) reads as the query heads: at most.
            heads_kv: number("attention.head_count_kv").unwrap_or(heads),
            key_length: number("attention.key_length").unwrap_or(per_head),
            value_length: number("attention.value_length").unwrap_or(per_head),
        })
    }
}

/// About the memory the engine for `options` will hold once loaded,
/// before it is: the weights (the file's size; a mostly-Q4_1 file that the
/// engine serves from its Q8_0 copy, that copy's size, 34 bytes for 20)
/// and the KV cells the options ask for, capped at the model's training
/// context as the engine caps them. `None` when the file's header cannot
/// be read.
pub fn memory_estimate(options: &LlamaEngineOptions) -> Option<u64> {
    let header = GgufHeader::read(&options.model_path).ok()?;
    let mut weights = header.file_len;
    if options.repack && header.share_of_type(svc_gguf::GGML_TYPE_Q4_1) > svc_gguf::cache::MOSTLY {
        weights = weights / 20 * 34;
    }
    let Some(shape) = KvShape::of_header(&header) else {
        return Some(weights);
    };
    let arch = header
        .get("general.architecture")
        .and_then(MetaValue::as_str)?;
    let trained = header
        .get(&format!("{arch}.context_length"))
        .and_then(MetaValue::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n > 0);
    let context = trained.map_or(options.context_per_sequence, |trained| {
        options.context_per_sequence.min(trained)
    });
    let cells = options
        .kv_cache
        .unwrap_or_else(|| options.parallel.saturating_mul(context));
    Some(weights + shape.bytes(cells, options.kv_type))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TinyModel;

    #[test]
    fn the_estimate_before_loading_is_what_the_loaded_model_says() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        TinyModel::hello().write(&path).unwrap();
        let mut options = LlamaEngineOptions::new(&path);
        options.parallel = 2;
        options.context_per_sequence = 1024;
        let estimate = memory_estimate(&options).unwrap();
        let engine = crate::LlamaEngine::load(&options).unwrap();
        let loaded = engine.info().memory_bytes;
        // The weights: the file against the tensors llama.cpp loaded (the
        // file has its header and padding besides); the KV cells the same.
        let file = std::fs::metadata(&path).unwrap().len();
        assert!(loaded <= estimate, "{loaded} > {estimate}");
        assert!(estimate - loaded <= file, "{estimate} - {loaded} > {file}");
        let kv = estimate - file;
        assert!(kv > 0, "no KV cells counted");
        assert!(loaded > kv, "{loaded} <= {kv}");
    }
}
