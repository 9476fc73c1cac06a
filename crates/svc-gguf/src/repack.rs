//! Weight repacking: a copy of a GGUF whose Q4_1 tensors are rewritten as
//! Q8_0 (or Q4_0), everything else kept byte for byte.
//!
//! Why: llama.cpp's CPU backend on x86 has batched matrix-multiply kernels
//! (llamafile's sgemm, the CPU repack) for Q4_0, Q8_0, IQ4_NL and a few other
//! types, but none for Q4_1. Decoding many sequences in one batch therefore
//! gains much less on a Q4_1 model than on a Q8_0 one. Q4_1 to Q8_0 is
//! near-lossless (each 32-value block is dequantized and requantized with
//! 8 bits: the new error is at most about 1/254 of the block's largest
//! value), at 1.7 times the size.
//!
//! [`repack_file`] writes the same metadata in the same order (with
//! `general.file_type` updated and one `svc.repacked_from` entry added at
//! the end), the same tensor entries with new types and offsets, and streams
//! the tensor data through, converting block by block. Where the copy is
//! kept, and when it is reused, is `cache`'s business.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::header::{GgufHeader, MetaValue};
use crate::quant::{
    Q4_0_BLOCK, Q4_1_BLOCK, Q8_0_BLOCK, QK, dequantize_q4_0, dequantize_q4_1, dequantize_q8_0,
    quantize_q4_0, quantize_q8_0,
};
use crate::write::{write_header, write_zeros};
use crate::{GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GgufError, Problem, bad};

/// Bumped whenever the converter's output changes, so older cache files are rebuilt.
const CONVERTER_VERSION: u32 = 1;
/// The metadata key the converter adds: where the file came from.
pub const PROVENANCE_KEY: &str = "svc.repacked_from";

/// What Q4_1 tensors become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepackTarget {
    /// Near-lossless, 34 bytes per 32 values.
    Q8_0,
    /// Smaller and faster, but a second 4-bit rounding (18 bytes per 32 values).
    Q4_0,
}

impl RepackTarget {
    /// The ggml type id.
    pub fn ggml_type(self) -> u32 {
        match self {
            RepackTarget::Q8_0 => GGML_TYPE_Q8_0,
            RepackTarget::Q4_0 => GGML_TYPE_Q4_0,
        }
    }

    /// llama.cpp's `llama_ftype` for a model mostly of this type (`general.file_type`).
    pub fn file_type(self) -> u32 {
        match self {
            RepackTarget::Q8_0 => 7,
            RepackTarget::Q4_0 => 2,
        }
    }

    /// The type's name as llama.cpp writes it.
    pub fn name(self) -> &'static str {
        match self {
            RepackTarget::Q8_0 => "Q8_0",
            RepackTarget::Q4_0 => "Q4_0",
        }
    }

    fn block_bytes(self) -> usize {
        match self {
            RepackTarget::Q8_0 => Q8_0_BLOCK,
            RepackTarget::Q4_0 => Q4_0_BLOCK,
        }
    }
}

impl std::str::FromStr for RepackTarget {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "q8_0" => Ok(RepackTarget::Q8_0),
            "q4_0" => Ok(RepackTarget::Q4_0),
            _ => Err(format!("unknown target type {s:?} (expected q8_0 or q4_0)")),
        }
    }
}

/// What a conversion did.
#[derive(Debug, Clone, PartialEq)]
pub struct RepackSummary {
    /// Tensors in the file.
    pub tensors: usize,
    /// Tensors converted from Q4_1.
    pub converted: usize,
    /// Values converted.
    pub converted_values: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// The largest difference between a converted value and its Q4_1 original.
    pub max_abs_error: f32,
    /// Root-mean-square of those differences over the root-mean-square of the originals.
    pub relative_rms_error: f64,
}

/// The `svc.repacked_from` text of a conversion of `source` (file name and
/// size, types, converter version); a cache file with another text is stale.
pub(crate) fn provenance(source: &Path, source_len: u64, target: RepackTarget) -> String {
    let name = source
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(
        "{name} ({source_len} bytes): Q4_1 tensors converted to {} by svc's repack v{CONVERTER_VERSION}",
        target.name()
    )
}

/// The header of the converted file: types, offsets, `general.file_type`,
/// provenance, and where its data starts and the file ends.
pub(crate) fn converted_header(
    header: &GgufHeader,
    sizes: &[u64],
    target: RepackTarget,
    note: String,
) -> io::Result<GgufHeader> {
    let mut out = header.clone();
    for (key, value) in &mut out.metadata {
        if key == "general.file_type" {
            let file_type = target.file_type();
            *value = match value {
                MetaValue::I32(_) => MetaValue::I32(file_type as i32),
                MetaValue::U64(_) => MetaValue::U64(u64::from(file_type)),
                MetaValue::I64(_) => MetaValue::I64(i64::from(file_type)),
                _ => MetaValue::U32(file_type),
            };
        }
    }
    let note = MetaValue::Str(note.into_bytes());
    match out.metadata.iter_mut().find(|(k, _)| k == PROVENANCE_KEY) {
        Some((_, value)) => *value = note,
        None => out.metadata.push((PROVENANCE_KEY.to_owned(), note)),
    }
    let mut offset = 0u64;
    for (t, &size) in out.tensors.iter_mut().zip(sizes) {
        let size = if t.ggml_type == GGML_TYPE_Q4_1 {
            t.ggml_type = target.ggml_type();
            size / Q4_1_BLOCK as u64 * target.block_bytes() as u64
        } else {
            size
        };
        t.offset = offset;
        offset += size.next_multiple_of(header.alignment);
    }
    out.data_offset = write_header(&mut io::sink(), &out)?;
    out.file_len = out.data_offset + offset;
    Ok(out)
}

/// converted to `target`; every other tensor is copied byte for byte.
/// `dest` is written in place (see [`prepare`](crate::cache::prepare) for an atomic cache file).
pub fn repack_file(
    source: &Path,
    dest: &Path,
    target: RepackTarget,
) -> Result<RepackSummary, GgufError> {
    let header = GgufHeader::read(source)?;
    let sizes = header.tensor_sizes().map_err(|p| p.at(source))?;
    let note = provenance(source, header.file_len, target);
    let new =
        converted_header(&header, &sizes, target, note).map_err(|e| Problem::Io(e).at(dest))?;

    let input = File::open(source).map_err(|e| Problem::Io(e).at(source))?;
    let mut input = BufReader::with_capacity(1 << 20, input);
    let output = File::create(dest).map_err(|e| Problem::Io(e).at(dest))?;
    let mut output = BufWriter::with_capacity(1 << 20, output);
    let mut errors = ErrorStats::default();
    let result = (|| -> Result<u64, Problem> {
        let mut written = write_header(&mut output, &new)?;
        let mut chunk = Vec::new();
        let mut converted = Vec::new();
        for ((old, t), &size) in header.tensors.iter().zip(&new.tensors).zip(&sizes) {
            input.seek(SeekFrom::Start(header.data_offset + old.offset))?;
            let out_size = if old.ggml_type == GGML_TYPE_Q4_1 {
                // Whole blocks, about 1 MiB at a time.
                let blocks = size / Q4_1_BLOCK as u64;
                let per_chunk = (1u64 << 20) / Q4_1_BLOCK as u64;
                let mut left = blocks;
                while left > 0 {
                    let n = left.min(per_chunk);
                    chunk.resize(n as usize * Q4_1_BLOCK, 0);
                    input.read_exact(&mut chunk)?;
                    converted.clear();
                    convert_blocks(&chunk, target, &mut converted, &mut errors);
                    output.write_all(&converted)?;
                    left -= n;
                }
                blocks * target.block_bytes() as u64
            } else {
                let copied = io::copy(&mut (&mut input).take(size), &mut output)?;
                if copied != size {
                    return bad(format!("tensor {} is cut short", old.name));
                }
                size
            };
            let padded = out_size.next_multiple_of(header.alignment);
            write_zeros(&mut output, padded - out_size)?;
            if written != new.data_offset + t.offset {
                return bad(format!(
                    "internal error: tensor {} written at the wrong offset",
                    t.name
                ));
            }
            written += padded;
        }
        if written != new.file_len {
            return bad("internal error: the file's length is not the expected one");
        }
        output.flush()?;
        output.get_ref().sync_all()?;
        Ok(written)
    })();
    let bytes_written = result.map_err(|p| p.at(dest))?;
    Ok(RepackSummary {
        tensors: header.tensors.len(),
        converted: header
            .tensors
            .iter()
            .filter(|t| t.ggml_type == GGML_TYPE_Q4_1)
            .count(),
        converted_values: errors.count,
        bytes_written,
        max_abs_error: errors.max,
        relative_rms_error: if errors.sum_sq_values > 0.0 {
            (errors.sum_sq_errors / errors.sum_sq_values).sqrt()
        } else {
            0.0
        },
    })
}

#[derive(Debug, Default)]
struct ErrorStats {
    count: u64,
    max: f32,
    sum_sq_errors: f64,
    sum_sq_values: f64,
}

/// Converts whole Q4_1 blocks to `target` blocks, appending to `out`.
fn convert_blocks(q4_1: &[u8], target: RepackTarget, out: &mut Vec<u8>, stats: &mut ErrorStats) {
    let mut values = [0f32; QK];
    let mut back = [0f32; QK];
    for block in q4_1.chunks_exact(Q4_1_BLOCK) {
        dequantize_q4_1(block, &mut values);
        let start = out.len();
        match target {
            RepackTarget::Q8_0 => quantize_q8_0(&values, out),
            RepackTarget::Q4_0 => quantize_q4_0(&values, out),
        }
        match target {
            RepackTarget::Q8_0 => dequantize_q8_0(&out[start..], &mut back),
            RepackTarget::Q4_0 => dequantize_q4_0(&out[start..], &mut back),
        }
        for (x, y) in values.iter().zip(&back) {
            let e = (x - y).abs();
            stats.max = stats.max.max(e);
            stats.sum_sq_errors += f64::from(e) * f64::from(e);
            stats.sum_sq_values += f64::from(*x) * f64::from(*x);
        }
        stats.count += QK as u64;
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::fixtures::{small_file, tensor_data};
    use crate::quant::{dequantize_q4_1, dequantize_q8_0};

    #[test]
    fn converts_q4_1_to_q8_0_and_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let source = small_file(dir.path());
        let dest = dir.path().join("out.gguf");
        let summary = repack_file(&source, &dest, RepackTarget::Q8_0).unwrap();
        assert_eq!((summary.tensors, summary.converted), (3, 1));
        assert_eq!(summary.converted_values, 256);
        assert_eq!(
            summary.bytes_written,
            std::fs::metadata(&dest).unwrap().len()
        );

        let before = GgufHeader::read(&source).unwrap();
        let after = GgufHeader::read(&dest).unwrap();
        assert_eq!(after.alignment, 64);
        let keys = |h: &GgufHeader| {
            h.metadata
                .iter()
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
        };
        let mut expected_keys = keys(&before);
        expected_keys.push(PROVENANCE_KEY.into());
        assert_eq!(keys(&after), expected_keys);
        for (key, value) in &before.metadata {
            if key != "general.file_type" {
                assert_eq!(after.get(key), Some(value), "{key}");
            }
        }
        assert_eq!(after.get("general.file_type"), Some(&MetaValue::U32(7)));
        assert!(
            after
                .get(PROVENANCE_KEY)
                .unwrap()
                .as_str()
                .unwrap()
                .contains("small.gguf")
        );
        for name in ["norm", "last"] {
            let ((a, x), (b, y)) = (tensor_data(&source, name), tensor_data(&dest, name));
            assert_eq!(x, y, "{name}");
            assert_eq!((a.dims, a.ggml_type), (b.dims, b.ggml_type));
            assert_eq!(b.offset % 64, 0);
        }

        let (t_old, old) = tensor_data(&source, "weights");
        let (t_new, new) = tensor_data(&dest, "weights");
        assert_eq!(t_new.ggml_type, GGML_TYPE_Q8_0);
        assert_eq!(t_new.dims, t_old.dims);
        assert_eq!(new.len(), 8 * Q8_0_BLOCK);
        let mut max_error = 0f32;
        for (a, b) in old.chunks(Q4_1_BLOCK).zip(new.chunks(Q8_0_BLOCK)) {
            let (mut x, mut y) = ([0f32; QK], [0f32; QK]);
            dequantize_q4_1(a, &mut x);
            dequantize_q8_0(b, &mut y);
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (u, v) in x.iter().zip(&y) {
                // Half a Q8_0 step, plus the rounding of the f16 scale.
                assert!((u - v).abs() <= amax / 127.0 * 0.51 + 1e-6, "{u} vs {v}");
                max_error = max_error.max((u - v).abs());
            }
        }
        assert_eq!(max_error, summary.max_abs_error);
        assert!(summary.relative_rms_error < 0.01, "{summary:?}");
    }

    #[test]
    fn converts_q4_1_to_q4_0() {
        let dir = tempfile::tempdir().unwrap();
        let source = small_file(dir.path());
        let dest = dir.path().join("out.gguf");
        let summary = repack_file(&source, &dest, RepackTarget::Q4_0).unwrap();
        let after = GgufHeader::read(&dest).unwrap();
        assert_eq!(after.get("general.file_type"), Some(&MetaValue::U32(2)));
        let (t, data) = tensor_data(&dest, "weights");
        assert_eq!(t.ggml_type, GGML_TYPE_Q4_0);
        assert_eq!(data.len(), 8 * Q4_0_BLOCK);
        assert!(summary.relative_rms_error < 0.15, "{summary:?}");
        assert_eq!(tensor_data(&source, "last").1, tensor_data(&dest, "last").1);
    }
}
