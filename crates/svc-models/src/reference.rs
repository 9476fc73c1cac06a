//! What `svc pull` may be asked for, and how its argument is read.

use crate::error::Result;
use crate::hf::HfFile;

/// What `svc pull` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelRef {
    /// svc's default model.
    Default,
    /// svc's default embedding model (`svc-embed`).
    Embeddings,
    /// Gemma 3 270M (Q4_K_M), the third-party model the tests serve.
    Gemma3,
    /// A GGUF file on Hugging Face.
    Hf(HfFile),
}

impl ModelRef {
    /// Parses `svc pull`'s argument: none or `default`, `embeddings`,
    /// `gemma3`, or `hf:...`.
    pub fn parse(arg: Option<&str>) -> Result<ModelRef> {
        match arg.map(str::trim) {
            None | Some("default") => Ok(ModelRef::Default),
            Some("embeddings" | "svc-embed") => Ok(ModelRef::Embeddings),
            Some("gemma3" | "gemma-3-270m") => Ok(ModelRef::Gemma3),
            Some(text) => HfFile::parse(text).map(ModelRef::Hf),
        }
    }
}
