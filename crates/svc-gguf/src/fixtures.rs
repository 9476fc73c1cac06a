//! Small GGUF files for this crate's tests.

use std::path::{Path, PathBuf};

use crate::header::{GgufHeader, TensorInfo};
use crate::quant::quantize_row_q4_1;
use crate::{GGML_TYPE_Q4_1, GgufWriter, MetaValue};

/// `n` values with a mix of offsets and scales, so that a block's d and m both matter.
pub(crate) fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let t = (i as f32 * 0.37 + seed as f32).sin();
            t * (1.0 + (i / 32 % 5) as f32) + (i / 32 % 3) as f32 * 0.5
        })
        .collect()
}

/// A tensor's entry and its data (without padding).
pub(crate) fn tensor_data(path: &Path, name: &str) -> (TensorInfo, Vec<u8>) {
    let header = GgufHeader::read(path).unwrap();
    let sizes = header.tensor_sizes().unwrap();
    let bytes = std::fs::read(path).unwrap();
    let (i, t) = header
        .tensors
        .iter()
        .enumerate()
        .find(|(_, t)| t.name == name)
        .unwrap();
    let start = (header.data_offset + t.offset) as usize;
    (t.clone(), bytes[start..start + sizes[i] as usize].to_vec())
}

/// A file with metadata of several types, alignment 64, two F32 tensors and
/// one Q4_1 matrix between them (most of its values): `<dir>/small.gguf`.
pub(crate) fn small_file(dir: &Path) -> PathBuf {
    let path = dir.join("small.gguf");
    small_writer(1).write(&path).unwrap();
    path
}

/// [`small_file`]'s content, its Q4_1 values made from `seed`.
pub(crate) fn small_writer(seed: u32) -> GgufWriter {
    let q = values(4 * 64, seed);
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", "llama")
        .metadata("general.file_type", 3u32)
        .metadata("general.alignment", 64u32)
        .metadata("some.strings", vec!["a".to_owned(), "bé".to_owned()])
        .metadata("some.ints", vec![1i32, -2, 3])
        .metadata("some.float", 0.5f32)
        .metadata("some.flag", MetaValue::Bool(true));
    w.tensor("norm", &[3], vec![1.0, 2.0, 3.0]);
    w.raw_tensor("weights", &[64, 4], GGML_TYPE_Q4_1, quantize_row_q4_1(&q));
    w.tensor("last", &[5], vec![9.0; 5]);
    w
}

/// A file of F32 tensors only: `<dir>/f32.gguf`.
pub(crate) fn f32_file(dir: &Path) -> PathBuf {
    let path = dir.join("f32.gguf");
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", "llama");
    w.tensor("norm", &[64], values(64, 2));
    w.tensor("weights", &[64, 4], values(4 * 64, 3));
    w.write(&path).unwrap();
    path
}
