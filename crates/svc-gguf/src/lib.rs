//! GGUF files in plain Rust, with no llama.cpp underneath: what the repack
//! converter and the test models need, and nothing that runs a model.
//!
//! - `header`: the header as data ([`GgufHeader`], [`MetaValue`],
//!   [`TensorInfo`]), the ggml types whose block layout is known, and the
//!   layout checks (tensors in order, aligned, inside the file).
//! - `read`: parses a header from a file, never allocating past its end.
//! - `write`: writes a header and padded tensor data; [`GgufWriter`] builds
//!   whole files (the test models are written with it).
//! - `quant`: half floats and the Q4_1, Q8_0 and Q4_0 blocks, as ggml's
//!   reference code computes them.
//! - `repack`: the converter, Q4_1 tensors to Q8_0 or Q4_0, everything else
//!   copied byte for byte.
//! - `bert`: a sentence-transformers BERT model (safetensors and
//!   tokenizer.json) to a GGUF that llama.cpp runs as an embedding model.
//! - `cache`: the converted copy beside a model (`<stem>.svc-q8_0.gguf`):
//!   when one is made, reused or rebuilt.
//!
//! This crate never prints and never reaches the network.

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod bert;
pub mod cache;
#[cfg(test)]
mod fixtures;
mod header;
pub mod quant;
mod read;
pub mod repack;
mod write;

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

pub use header::{GgufHeader, MetaValue, TensorInfo};
pub use write::GgufWriter;

/// Every GGUF file starts with these bytes.
pub const MAGIC: &[u8; 4] = b"GGUF";

/// ggml's type id of F32 values.
pub const GGML_TYPE_F32: u32 = 0;
/// Q4_0: 32 values, f16 scale, 4-bit quants.
pub const GGML_TYPE_Q4_0: u32 = 2;
/// Q4_1: 32 values, f16 scale and f16 minimum, 4-bit quants.
pub const GGML_TYPE_Q4_1: u32 = 3;
/// Q8_0: 32 values, f16 scale, 8-bit quants.
pub const GGML_TYPE_Q8_0: u32 = 8;

/// Why a file could not be read or converted.
#[derive(Debug, Error)]
pub enum GgufError {
    /// Reading or writing failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// The file is not a GGUF this crate understands.
    #[error("{} is not a GGUF file svc can convert: {reason}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// A failure before the file name is attached.
#[derive(Debug)]
pub(crate) enum Problem {
    Io(io::Error),
    Format(String),
}

impl From<io::Error> for Problem {
    fn from(e: io::Error) -> Self {
        Problem::Io(e)
    }
}

impl Problem {
    pub(crate) fn at(self, path: &Path) -> GgufError {
        match self {
            Problem::Io(source) => GgufError::Io {
                path: path.to_owned(),
                source,
            },
            Problem::Format(reason) => GgufError::Format {
                path: path.to_owned(),
                reason,
            },
        }
    }
}

pub(crate) fn bad<T>(reason: impl Into<String>) -> Result<T, Problem> {
    Err(Problem::Format(reason.into()))
}
