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
//! The converter is plain Rust: it reads the GGUF header (version 2 or 3,
//! every metadata type, tensor infos, `general.alignment`), writes the same
//! metadata in the same order (with `general.file_type` updated and one
//! `svc.repacked_from` entry added at the end), the same tensor infos with new
//! types and offsets, and streams the tensor data through, converting block
//! by block. [`prepare`] is what the engine uses when
//! `LlamaEngineOptions::repack` is on (it is off by default): it converts a
//! model that is mostly Q4_1 once into a cache file beside it and reuses that
//! afterwards.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use thiserror::Error;

/// ggml's type ids used here.
pub const GGML_TYPE_Q4_0: u32 = 2;
/// Q4_1: 32 values, f16 scale and f16 minimum, 4-bit quants.
pub const GGML_TYPE_Q4_1: u32 = 3;
/// Q8_0: 32 values, f16 scale, 8-bit quants.
pub const GGML_TYPE_Q8_0: u32 = 8;

const QK: usize = 32;
const Q4_1_BLOCK: usize = 20;
const Q8_0_BLOCK: usize = 34;
const Q4_0_BLOCK: usize = 18;
const DEFAULT_ALIGNMENT: u64 = 32;
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

/// Why a file could not be read or converted.
#[derive(Debug, Error)]
pub enum RepackError {
    /// Reading or writing failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// The file is not a GGUF this module understands.
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
enum Problem {
    Io(io::Error),
    Format(String),
}

impl From<io::Error> for Problem {
    fn from(e: io::Error) -> Self {
        Problem::Io(e)
    }
}

impl Problem {
    fn at(self, path: &Path) -> RepackError {
        match self {
            Problem::Io(source) => RepackError::Io {
                path: path.to_owned(),
                source,
            },
            Problem::Format(reason) => RepackError::Format {
                path: path.to_owned(),
                reason,
            },
        }
    }
}

fn bad<T>(reason: impl Into<String>) -> Result<T, Problem> {
    Err(Problem::Format(reason.into()))
}

/// A metadata value, as stored.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    /// A string's bytes (UTF-8 in well-formed files; kept as they are).
    Str(Vec<u8>),
    /// An array: the element type id and the elements.
    Array(u32, Vec<MetaValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl MetaValue {
    fn type_id(&self) -> u32 {
        match self {
            MetaValue::U8(_) => 0,
            MetaValue::I8(_) => 1,
            MetaValue::U16(_) => 2,
            MetaValue::I16(_) => 3,
            MetaValue::U32(_) => 4,
            MetaValue::I32(_) => 5,
            MetaValue::F32(_) => 6,
            MetaValue::Bool(_) => 7,
            MetaValue::Str(_) => 8,
            MetaValue::Array(..) => 9,
            MetaValue::U64(_) => 10,
            MetaValue::I64(_) => 11,
            MetaValue::F64(_) => 12,
        }
    }

    /// The value as text, when it is a UTF-8 string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::Str(bytes) => std::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }

    /// The value as an unsigned integer, when it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(u64::from(v)),
            MetaValue::U16(v) => Some(u64::from(v)),
            MetaValue::U32(v) => Some(u64::from(v)),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    fn write(&self, out: &mut impl Write) -> io::Result<()> {
        match self {
            MetaValue::U8(v) => out.write_all(&[*v]),
            MetaValue::I8(v) => out.write_all(&v.to_le_bytes()),
            MetaValue::U16(v) => out.write_all(&v.to_le_bytes()),
            MetaValue::I16(v) => out.write_all(&v.to_le_bytes()),
            MetaValue::U32(v) => out.write_all(&v.to_le_bytes()),
            MetaValue::I32(v) => out.write_all(&v.to_le_bytes()),
            MetaValue::F32(v) => out.write_all(&v.to_le_bytes()),
            MetaValue::Bool(v) => out.write_all(&[u8::from(*v)]),
            MetaValue::Str(bytes) => write_bytes(out, bytes),
            MetaValue::Array(element, items) => {
                out.write_all(&element.to_le_bytes())?;
                out.write_all(&(items.len() as u64).to_le_bytes())?;
                for item in items {
                    item.write(out)?;
                }
                Ok(())
            }
            MetaValue::U64(v) => out.write_all(&v.to_le_bytes()),
            MetaValue::I64(v) => out.write_all(&v.to_le_bytes()),
            MetaValue::F64(v) => out.write_all(&v.to_le_bytes()),
        }
    }
}

/// One tensor's entry in the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name.
    pub name: String,
    /// Its dimensions, in ggml order (the fastest-moving first).
    pub dims: Vec<u64>,
    /// Its ggml type id.
    pub ggml_type: u32,
    /// Where its data starts, from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// The number of values.
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A GGUF file's header: everything but the tensor data.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHeader {
    /// The format version (2 or 3).
    pub version: u32,
    /// Metadata entries, in file order.
    pub metadata: Vec<(String, MetaValue)>,
    /// Tensor entries, in file order (which is also their data order).
    pub tensors: Vec<TensorInfo>,
    /// `general.alignment`, or 32.
    pub alignment: u64,
    /// Where the data section starts, from the start of the file.
    pub data_offset: u64,
    /// The file's length.
    pub file_len: u64,
}

impl GgufHeader {
    /// Reads the header of the GGUF at `path`.
    pub fn read(path: &Path) -> Result<GgufHeader, RepackError> {
        let file = File::open(path).map_err(|e| Problem::Io(e).at(path))?;
        let file_len = file.metadata().map_err(|e| Problem::Io(e).at(path))?.len();
        GgufHeader::parse(&mut BufReader::new(file), file_len).map_err(|p| p.at(path))
    }

    /// A metadata value by key.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The share of all values (weights) held in tensors of `ggml_type`, from 0 to 1.
    pub fn share_of_type(&self, ggml_type: u32) -> f64 {
        let total: u64 = self.tensors.iter().map(TensorInfo::elements).sum();
        let of_type: u64 = self
            .tensors
            .iter()
            .filter(|t| t.ggml_type == ggml_type)
            .map(TensorInfo::elements)
            .sum();
        if total == 0 {
            0.0
        } else {
            of_type as f64 / total as f64
        }
    }

    fn parse(reader: &mut impl Read, file_len: u64) -> Result<GgufHeader, Problem> {
        let mut r = HeaderReader {
            inner: reader,
            pos: 0,
            limit: file_len,
        };
        if r.bytes(4)? != b"GGUF" {
            return bad("no GGUF magic");
        }
        let version = r.u32()?;
        if !(2..=3).contains(&version) {
            return bad(format!(
                "GGUF version {version} (only versions 2 and 3, little-endian, are supported)"
            ));
        }
        let n_tensors = r.count()?;
        let n_kv = r.count()?;
        let mut metadata = Vec::with_capacity(n_kv.min(1024));
        for _ in 0..n_kv {
            let key = r.string()?;
            let key = String::from_utf8(key).or_else(|_| bad("a metadata key is not UTF-8"))?;
            let type_id = r.u32()?;
            let value = r.value(type_id, 0)?;
            metadata.push((key, value));
        }
        let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some((_, MetaValue::U32(a))) if *a > 0 && a.is_power_of_two() => u64::from(*a),
            Some((_, other)) => return bad(format!("bad general.alignment {other:?}")),
        };
        let mut tensors = Vec::with_capacity(n_tensors.min(1 << 16));
        for _ in 0..n_tensors {
            let name = r.string()?;
            let name = String::from_utf8(name).or_else(|_| bad("a tensor name is not UTF-8"))?;
            let n_dims = r.u32()?;
            if n_dims > 4 {
                return bad(format!("tensor {name} has {n_dims} dimensions"));
            }
            let dims = (0..n_dims)
                .map(|_| r.u64())
                .collect::<Result<Vec<_>, _>>()?;
            let ggml_type = r.u32()?;
            let offset = r.u64()?;
            tensors.push(TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
            });
        }
        let data_offset = r.pos.next_multiple_of(alignment);
        let header = GgufHeader {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
            file_len,
        };
        header.check_layout()?;
        Ok(header)
    }

    /// The byte size of each tensor's data (without padding), checking that
    /// the data lies in the file in header order, as llama.cpp requires.
    /// A tensor of a type this module does not know gets the span up to the
    /// next tensor (or the end of the file).
    fn tensor_sizes(&self) -> Result<Vec<u64>, Problem> {
        let data_len = self.file_len.saturating_sub(self.data_offset);
        let mut sizes = Vec::with_capacity(self.tensors.len());
        for (i, t) in self.tensors.iter().enumerate() {
            let end = self.tensors.get(i + 1).map_or(data_len, |next| next.offset);
            if t.offset > end || end > data_len {
                return bad(format!(
                    "tensor {} lies outside the data section or out of order",
                    t.name
                ));
            }
            let span = end - t.offset;
            let size = match nbytes(t) {
                Some(Ok(n)) if n <= span => n,
                Some(Ok(n)) => {
                    return bad(format!("tensor {} needs {n} bytes but has {span}", t.name));
                }
                Some(Err(reason)) => return bad(reason),
                None => span,
            };
            sizes.push(size);
        }
        Ok(sizes)
    }

    fn check_layout(&self) -> Result<(), Problem> {
        if self.tensors.first().is_some_and(|t| t.offset != 0) {
            return bad("the first tensor does not start the data section");
        }
        for t in &self.tensors {
            if t.offset % self.alignment != 0 {
                return bad(format!("tensor {} is not aligned", t.name));
            }
        }
        self.tensor_sizes().map(drop)
    }
}

/// (values per block, bytes per block) of the ggml types this module knows.
fn block_layout(ggml_type: u32) -> Option<(u64, u64)> {
    Some(match ggml_type {
        0 => (1, 4),       // F32
        1 => (1, 2),       // F16
        2 => (32, 18),     // Q4_0
        3 => (32, 20),     // Q4_1
        6 => (32, 22),     // Q5_0
        7 => (32, 24),     // Q5_1
        8 => (32, 34),     // Q8_0
        9 => (32, 36),     // Q8_1
        10 => (256, 84),   // Q2_K
        11 => (256, 110),  // Q3_K
        12 => (256, 144),  // Q4_K
        13 => (256, 176),  // Q5_K
        14 => (256, 210),  // Q6_K
        15 => (256, 292),  // Q8_K
        16 => (256, 66),   // IQ2_XXS
        17 => (256, 74),   // IQ2_XS
        18 => (256, 98),   // IQ3_XXS
        19 => (256, 50),   // IQ1_S
        20 => (32, 18),    // IQ4_NL
        21 => (256, 110),  // IQ3_S
        22 => (256, 82),   // IQ2_S
        23 => (256, 136),  // IQ4_XS
        24 => (1, 1),      // I8
        25 => (1, 2),      // I16
        26 => (1, 4),      // I32
        27 | 28 => (1, 8), // I64, F64
        29 => (256, 56),   // IQ1_M
        30 => (1, 2),      // BF16
        34 => (256, 54),   // TQ1_0
        35 => (256, 66),   // TQ2_0
        39 => (32, 17),    // MXFP4
        40 => (64, 36),    // NVFP4
        41 => (128, 18),   // Q1_0
        42 => (64, 18),    // Q2_0
        _ => return None,
    })
}

/// A tensor's data size in bytes; `None` for an unknown type.
fn nbytes(t: &TensorInfo) -> Option<Result<u64, String>> {
    let (block, bytes) = block_layout(t.ggml_type)?;
    let ne0 = t.dims.first().copied().unwrap_or(1);
    if ne0 % block != 0 {
        return Some(Err(format!(
            "tensor {} has rows of {ne0} values, not a multiple of its block size {block}",
            t.name
        )));
    }
    let rows = t
        .dims
        .iter()
        .skip(1)
        .try_fold(1u64, |acc, &d| acc.checked_mul(d));
    Some(
        rows.and_then(|rows| (ne0 / block).checked_mul(bytes)?.checked_mul(rows))
            .ok_or_else(|| format!("tensor {} is too large", t.name)),
    )
}

/// Reads the header's little-endian fields, never allocating past the file's end.
struct HeaderReader<'a, R> {
    inner: &'a mut R,
    pos: u64,
    limit: u64,
}

impl<R: Read> HeaderReader<'_, R> {
    fn bytes(&mut self, n: u64) -> Result<Vec<u8>, Problem> {
        if n > self.limit.saturating_sub(self.pos) {
            return bad("the header runs past the end of the file");
        }
        let mut buf =
            vec![0u8; usize::try_from(n).or_else(|_| bad("a header field is too large"))?];
        self.inner.read_exact(&mut buf)?;
        self.pos += n;
        Ok(buf)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Problem> {
        let mut buf = [0u8; N];
        if N as u64 > self.limit.saturating_sub(self.pos) {
            return bad("the header runs past the end of the file");
        }
        self.inner.read_exact(&mut buf)?;
        self.pos += N as u64;
        Ok(buf)
    }

    fn u32(&mut self) -> Result<u32, Problem> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, Problem> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A count of entries, each of which takes at least one byte.
    fn count(&mut self) -> Result<usize, Problem> {
        let n = self.u64()?;
        if n > self.limit {
            return bad(format!("implausible count {n}"));
        }
        usize::try_from(n).or_else(|_| bad("a count is too large"))
    }

    fn string(&mut self) -> Result<Vec<u8>, Problem> {
        let len = self.u64()?;
        self.bytes(len)
    }

    fn value(&mut self, type_id: u32, depth: u32) -> Result<MetaValue, Problem> {
        Ok(match type_id {
            0 => MetaValue::U8(u8::from_le_bytes(self.array()?)),
            1 => MetaValue::I8(i8::from_le_bytes(self.array()?)),
            2 => MetaValue::U16(u16::from_le_bytes(self.array()?)),
            3 => MetaValue::I16(i16::from_le_bytes(self.array()?)),
            4 => MetaValue::U32(self.u32()?),
            5 => MetaValue::I32(i32::from_le_bytes(self.array()?)),
            6 => MetaValue::F32(f32::from_le_bytes(self.array()?)),
            7 => match self.array::<1>()? {
                [0] => MetaValue::Bool(false),
                [1] => MetaValue::Bool(true),
                [b] => return bad(format!("bad boolean {b}")),
            },
            8 => MetaValue::Str(self.string()?),
            9 => {
                if depth > 8 {
                    return bad("arrays nested too deeply");
                }
                let element = self.u32()?;
                let n = self.count()?;
                let mut items = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    items.push(self.value(element, depth + 1)?);
                }
                MetaValue::Array(element, items)
            }
            10 => MetaValue::U64(self.u64()?),
            11 => MetaValue::I64(i64::from_le_bytes(self.array()?)),
            12 => MetaValue::F64(f64::from_le_bytes(self.array()?)),
            other => return bad(format!("unknown metadata type {other}")),
        })
    }
}

fn write_bytes(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    out.write_all(&(bytes.len() as u64).to_le_bytes())?;
    out.write_all(bytes)
}

fn write_zeros(out: &mut impl Write, n: u64) -> io::Result<()> {
    io::copy(&mut io::repeat(0).take(n), out).map(drop)
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
fn provenance(source: &Path, source_len: u64, target: RepackTarget) -> String {
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
fn converted_header(
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

fn write_header(out: &mut impl Write, header: &GgufHeader) -> io::Result<u64> {
    let mut counter = CountingWriter { inner: out, n: 0 };
    let w = &mut counter;
    w.write_all(b"GGUF")?;
    w.write_all(&header.version.to_le_bytes())?;
    w.write_all(&(header.tensors.len() as u64).to_le_bytes())?;
    w.write_all(&(header.metadata.len() as u64).to_le_bytes())?;
    for (key, value) in &header.metadata {
        write_bytes(w, key.as_bytes())?;
        w.write_all(&value.type_id().to_le_bytes())?;
        value.write(w)?;
    }
    for t in &header.tensors {
        write_bytes(w, t.name.as_bytes())?;
        w.write_all(&(t.dims.len() as u32).to_le_bytes())?;
        for d in &t.dims {
            w.write_all(&d.to_le_bytes())?;
        }
        w.write_all(&t.ggml_type.to_le_bytes())?;
        w.write_all(&t.offset.to_le_bytes())?;
    }
    let pad = counter.n.next_multiple_of(header.alignment) - counter.n;
    write_zeros(&mut counter, pad)?;
    Ok(counter.n)
}

struct CountingWriter<'a, W> {
    inner: &'a mut W,
    n: u64,
}

impl<W: Write> Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Writes a copy of the GGUF at `source` to `dest` with every Q4_1 tensor
/// converted to `target`; every other tensor is copied byte for byte.
/// `dest` is written in place (see [`prepare`] for an atomic cache file).
pub fn repack_file(
    source: &Path,
    dest: &Path,
    target: RepackTarget,
) -> Result<RepackSummary, RepackError> {
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

fn half_at(block: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([block[at], block[at + 1]]))
}

/// ggml's `dequantize_row_q4_1` for one block: x = d * q + m.
pub fn dequantize_q4_1(block: &[u8], out: &mut [f32; QK]) {
    let d = half_at(block, 0);
    let m = half_at(block, 2);
    for (j, &byte) in block[4..4 + QK / 2].iter().enumerate() {
        out[j] = f32::from(byte & 0x0F) * d + m;
        out[j + QK / 2] = f32::from(byte >> 4) * d + m;
    }
}

/// ggml's `quantize_row_q8_0_ref` for one block: d = max|x| / 127, q = round(x / d).
pub fn quantize_q8_0(x: &[f32; QK], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
    // |x * id| <= 127 (up to rounding), so the cast does not saturate in practice.
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

/// ggml's `dequantize_row_q8_0` for one block.
pub fn dequantize_q8_0(block: &[u8], out: &mut [f32; QK]) {
    let d = half_at(block, 0);
    for (y, &q) in out.iter_mut().zip(&block[2..2 + QK]) {
        *y = f32::from(q as i8) * d;
    }
}

/// ggml's `quantize_row_q4_0_ref` for one block: d = (the value of largest magnitude) / -8.
pub fn quantize_q4_0(x: &[f32; QK], out: &mut Vec<u8>) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
    let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    for j in 0..QK / 2 {
        out.push(q(x[j]) | (q(x[j + QK / 2]) << 4));
    }
}

/// ggml's `dequantize_row_q4_0` for one block.
pub fn dequantize_q4_0(block: &[u8], out: &mut [f32; QK]) {
    let d = half_at(block, 0);
    for (j, &byte) in block[2..2 + QK / 2].iter().enumerate() {
        out[j] = (f32::from(byte & 0x0F) - 8.0) * d;
        out[j + QK / 2] = (f32::from(byte >> 4) - 8.0) * d;
    }
}

/// IEEE half precision to single (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let negative = h & 0x8000 != 0;
    let exp = u32::from((h >> 10) & 0x1F);
    let man = u32::from(h & 0x3FF);
    let sign = u32::from(negative) << 31;
    match exp {
        0 => {
            // Zero or subnormal: man * 2^-24.
            let v = man as f32 * f32::from_bits(0x3380_0000);
            if negative { -v } else { v }
        }
        0x1F => f32::from_bits(sign | 0x7F80_0000 | (man << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (man << 13)),
    }
}

/// Single precision to IEEE half, rounding to nearest, ties to even (as F16C does).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xFF) as i32;
    let man = bits & 0x7F_FFFF;
    if exp == 0xFF {
        let nan = if man != 0 {
            0x200 | (man >> 13) as u16
        } else {
            0
        };
        return sign | 0x7C00 | nan;
    }
    let e = exp - 127 + 15;
    if e >= 0x1F {
        return sign | 0x7C00;
    }
    if e <= 0 {
        // A subnormal half (or zero): the value is m * 2^-24.
        let shift = (14 - e) as u32;
        if shift > 24 || exp == 0 {
            return sign;
        }
        let m = man | 0x80_0000;
        let q = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let halfway = 1 << (shift - 1);
        let up = rem > halfway || (rem == halfway && q & 1 == 1);
        return sign | (q + u32::from(up)) as u16;
    }
    let half = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1FFF;
    let up = rem > 0x1000 || (rem == 0x1000 && half & 1 == 1);
    // A carry out of the mantissa moves to the next exponent, and past the
    // largest finite value to infinity, as it should.
    sign | (half + u32::from(up)) as u16
}

/// The cache file beside `source` for `target`: `<stem>.svc-<type>.gguf`.
pub fn cache_path(source: &Path, target: RepackTarget) -> PathBuf {
    let stem = source
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    source.with_file_name(format!(
        "{stem}.svc-{}.gguf",
        target.name().to_ascii_lowercase()
    ))
}

/// The share of a model's values in Q4_1 tensors above which [`prepare`] converts it.
pub const MOSTLY: f64 = 0.5;

/// What [`prepare`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Prepared {
    /// The model is not mostly Q4_1 (or could not be read here): load it as it is.
    Unchanged,
    /// A valid cache file was already there.
    Reused(PathBuf),
    /// The model was converted into a new cache file.
    Converted {
        /// The cache file.
        path: PathBuf,
        /// The conversion's report.
        summary: RepackSummary,
        /// How long it took, in seconds.
        seconds: f64,
    },
    /// Converting failed (for example, a read-only folder): load the original.
    Failed(String),
}

impl Prepared {
    /// The file to load instead of the source, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Prepared::Reused(path) | Prepared::Converted { path, .. } => Some(path),
            Prepared::Unchanged | Prepared::Failed(_) => None,
        }
    }
}

/// For a model whose values are mostly Q4_1: the `target` copy of it in the
/// cache file beside it ([`cache_path`]), made now unless one is there that is
/// at least as new as the source and whose header matches the source's. The
/// new file is written under a temporary name and renamed into place, so a
/// reader never sees half a file.
pub fn prepare(source: &Path, target: RepackTarget) -> Prepared {
    let Ok(header) = GgufHeader::read(source) else {
        // llama.cpp will say what is wrong with it.
        return Prepared::Unchanged;
    };
    // A model split over several files is left alone: llama.cpp finds the
    // other parts by the first one's name.
    let split = header.get("split.count").and_then(MetaValue::as_u64);
    if header.share_of_type(GGML_TYPE_Q4_1) <= MOSTLY || split.is_some_and(|n| n > 1) {
        return Prepared::Unchanged;
    }
    let cache = cache_path(source, target);
    if cache_is_valid(source, &header, &cache, target) {
        return Prepared::Reused(cache);
    }
    let started = Instant::now();
    let temp = cache.with_file_name(format!(
        ".{}.tmp-{}-{:x}",
        cache
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id(),
        nonce(),
    ));
    let result = repack_file(source, &temp, target).and_then(|summary| {
        std::fs::rename(&temp, &cache)
            .map_err(|e| Problem::Io(e).at(&cache))
            .map(|()| summary)
    });
    match result {
        Ok(summary) => Prepared::Converted {
            path: cache,
            summary,
            seconds: started.elapsed().as_secs_f64(),
        },
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Prepared::Failed(e.to_string())
        }
    }
}

/// A number that differs between calls, for temporary file names.
fn nonce() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (u64::from(now) << 20) ^ NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Whether `cache` is a complete conversion of the current `source`.
fn cache_is_valid(source: &Path, header: &GgufHeader, cache: &Path, target: RepackTarget) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (modified(source), modified(cache)) {
        (Some(s), Some(c)) if c >= s => {}
        _ => return false,
    }
    let Ok(cached) = GgufHeader::read(cache) else {
        return false;
    };
    let Ok(sizes) = header.tensor_sizes() else {
        return false;
    };
    let note = provenance(source, header.file_len, target);
    converted_header(header, &sizes, target, note).is_ok_and(|expected| cached == expected)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::testing::{GgufValue, GgufWriter, TinyModel};

    #[test]
    fn half_round_trips_every_value() {
        for h in 0..=u16::MAX {
            let x = f16_to_f32(h);
            if x.is_nan() {
                assert!(f32_to_f16(x) & 0x7C00 == 0x7C00 && f32_to_f16(x) & 0x3FF != 0);
                continue;
            }
            assert_eq!(f32_to_f16(x), h, "{h:#06x} -> {x}");
        }
    }

    #[test]
    fn half_rounds_to_nearest_even() {
        assert_eq!(f16_to_f32(0x3C00), 1.0);
        assert_eq!(f16_to_f32(0xC000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7BFF), 65504.0);
        for h in 0..0x7BFFu16 {
            let (a, b) = (f16_to_f32(h), f16_to_f32(h + 1));
            let mid = (a + b) / 2.0; // exact: halves need 11 bits
            let even = if h % 2 == 0 { h } else { h + 1 };
            assert_eq!(f32_to_f16(mid), even, "{h:#06x}");
            assert_eq!(f32_to_f16(mid.next_down()), h, "{h:#06x}");
            assert_eq!(f32_to_f16(mid.next_up()), h + 1, "{h:#06x}");
            assert_eq!(f32_to_f16(-mid.next_up()), (h + 1) | 0x8000);
        }
        assert_eq!(f32_to_f16(65520.0), 0x7C00); // rounds past the largest half
        assert_eq!(f32_to_f16(1e-9), 0);
        assert_eq!(f32_to_f16(f32::INFINITY), 0x7C00);
    }

    /// Q4_1 blocks of `x` as ggml's `quantize_row_q4_1_ref` makes them.
    fn q4_1_bytes(x: &[f32]) -> Vec<u8> {
        crate::testing::quantize_q4_1(x)
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        // A mix of offsets and scales, so d and m both matter.
        (0..n)
            .map(|i| {
                let t = (i as f32 * 0.37 + seed as f32).sin();
                t * (1.0 + (i / 32 % 5) as f32) + (i / 32 % 3) as f32 * 0.5
            })
            .collect()
    }

    fn tensor_data(path: &Path, name: &str) -> (TensorInfo, Vec<u8>) {
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

    fn small_file(dir: &Path) -> PathBuf {
        let q = values(4 * 64, 1);
        let mut w = GgufWriter::new();
        w.metadata("general.architecture", GgufValue::Str("llama".into()))
            .metadata("general.file_type", GgufValue::U32(3))
            .metadata("general.alignment", GgufValue::U32(64))
            .metadata(
                "some.strings",
                GgufValue::StrArray(vec!["a".into(), "bé".into()]),
            )
            .metadata("some.ints", GgufValue::I32Array(vec![1, -2, 3]))
            .metadata("some.float", GgufValue::F32(0.5))
            .metadata("some.flag", GgufValue::Bool(true));
        w.tensor("norm", &[3], vec![1.0, 2.0, 3.0]);
        w.raw_tensor("weights", &[64, 4], GGML_TYPE_Q4_1, q4_1_bytes(&q));
        w.tensor("last", &[5], vec![9.0; 5]);
        let path = dir.join("small.gguf");
        w.write(&path).unwrap();
        path
    }

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

    #[test]
    fn q8_0_matches_ggml_reference_on_a_known_block() {
        let mut x = [0f32; QK];
        for (i, v) in x.iter_mut().enumerate() {
            *v = i as f32 - 10.0;
        }
        let mut out = Vec::new();
        quantize_q8_0(&x, &mut out);
        // amax 21, d = 21/127; 21 -> 127, -10 -> round(-60.476) = -60.
        assert_eq!(out[2 + 31] as i8, 127);
        assert_eq!(out[2] as i8, -60);
        assert_eq!(out[2 + 10] as i8, 0);
        let mut y = [0f32; QK];
        dequantize_q8_0(&out, &mut y);
        assert!((y[31] - 21.0).abs() < 0.02);

        let mut out = Vec::new();
        quantize_q4_0(&x, &mut out);
        // The largest magnitude is 21 (positive): d = -21/8, so 21 -> 0 and -10 -> 12.
        assert_eq!(out[2 + 15] >> 4, 0);
        assert_eq!(out[2] & 0xF, 12);
    }

    #[test]
    fn rejects_what_is_not_a_gguf() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.gguf");
        std::fs::write(&path, b"GGUF\x03\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff").unwrap();
        assert!(matches!(
            GgufHeader::read(&path),
            Err(RepackError::Format { .. })
        ));
        std::fs::write(&path, b"not a model").unwrap();
        assert!(GgufHeader::read(&path).is_err());
        let bytes = TinyModel::hello().gguf().to_bytes();
        std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
        assert!(GgufHeader::read(&path).is_err(), "truncated data");
    }

    #[test]
    fn reads_every_metadata_type() {
        let mut out = Vec::new();
        let values = vec![
            ("u8", MetaValue::U8(1)),
            ("i8", MetaValue::I8(-1)),
            ("u16", MetaValue::U16(2)),
            ("i16", MetaValue::I16(-2)),
            ("u32", MetaValue::U32(3)),
            ("i32", MetaValue::I32(-3)),
            ("f32", MetaValue::F32(1.5)),
            ("bool", MetaValue::Bool(true)),
            ("str", MetaValue::Str(b"text".to_vec())),
            (
                "arr",
                MetaValue::Array(9, vec![MetaValue::Array(10, vec![MetaValue::U64(7)])]),
            ),
            ("u64", MetaValue::U64(4)),
            ("i64", MetaValue::I64(-4)),
            ("f64", MetaValue::F64(2.5)),
        ];
        let header = GgufHeader {
            version: 3,
            metadata: values
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            tensors: vec![],
            alignment: 32,
            data_offset: 0,
            file_len: 0,
        };
        let len = write_header(&mut out, &header).unwrap();
        assert_eq!(len, out.len() as u64);
        let parsed = GgufHeader::parse(&mut out.as_slice(), len).unwrap();
        assert_eq!(parsed.metadata, header.metadata);
    }

    /// The tiny test model with its matrices in Q4_1.
    fn tiny_q4_1(dir: &Path) -> PathBuf {
        let path = dir.join("tiny-q4_1.gguf");
        TinyModel::hello()
            .gguf()
            .with_q4_1_matrices()
            .write(&path)
            .unwrap();
        path
    }

    #[test]
    fn llama_cpp_loads_the_result_and_replies_the_same() {
        use crate::{CompletionParams, LlamaEngine, LlamaEngineOptions};
        use futures::StreamExt as _;
        use svc_core::engine::{EngineEvent, Sampling};

        let dir = tempfile::tempdir().unwrap();
        let source = tiny_q4_1(dir.path());
        assert!(
            GgufHeader::read(&source)
                .unwrap()
                .share_of_type(GGML_TYPE_Q4_1)
                > MOSTLY
        );
        assert!(!LlamaEngineOptions::new(&source).repack, "off by default");
        let reply = |path: &Path, repack: bool| {
            let mut options = LlamaEngineOptions::new(path);
            options.parallel = 1;
            options.context_per_sequence = 256;
            options.threads = Some(2);
            options.repack = repack;
            let engine = LlamaEngine::load(&options).unwrap();
            let prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
            let params = CompletionParams {
                sampling: Sampling {
                    temperature: 0.0,
                    ..Sampling::default()
                },
                max_tokens: Some(40),
                ..CompletionParams::default()
            };
            let mut stream = engine.complete(prompt, params).unwrap();
            let text = futures::executor::block_on(async {
                let mut text = String::new();
                while let Some(event) = stream.next().await {
                    if let EngineEvent::Text(t) = event.unwrap() {
                        text.push_str(&t);
                    }
                }
                text
            });
            (text, engine.info().clone())
        };
        let expected = TinyModel::hello().reply();
        let (text, info) = reply(&source, false);
        assert_eq!(text, expected);
        assert_eq!(info.loaded_path, source);
        for target in [RepackTarget::Q8_0, RepackTarget::Q4_0] {
            let dest = dir.path().join(format!("tiny-{}.gguf", target.name()));
            repack_file(&source, &dest, target).unwrap();
            let (text, _) = reply(&dest, false);
            assert_eq!(text, expected, "{target:?}");
        }

        // With `repack` on, the engine converts once and reuses the copy.
        let cache = cache_path(&source, RepackTarget::Q8_0);
        assert!(!cache.exists());
        let (text, info) = reply(&source, true);
        assert_eq!(text, expected);
        assert_eq!(info.path, source);
        assert_eq!(info.loaded_path, cache);
        let first = std::fs::metadata(&cache).unwrap().modified().unwrap();
        let (_, info) = reply(&source, true);
        assert_eq!(info.loaded_path, cache);
        assert_eq!(
            std::fs::metadata(&cache).unwrap().modified().unwrap(),
            first
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.iter().any(|n| n.contains(".tmp-")), "{names:?}");
    }

    #[test]
    fn prepare_skips_models_that_are_not_mostly_q4_1() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f32.gguf");
        TinyModel::hello().write(&path).unwrap();
        assert_eq!(prepare(&path, RepackTarget::Q8_0), Prepared::Unchanged);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let missing = dir.path().join("missing.gguf");
        assert_eq!(prepare(&missing, RepackTarget::Q8_0), Prepared::Unchanged);
    }

    #[test]
    fn prepare_rebuilds_a_stale_or_broken_cache() {
        let dir = tempfile::tempdir().unwrap();
        let source = tiny_q4_1(dir.path());
        let Prepared::Converted { path: cache, .. } = prepare(&source, RepackTarget::Q8_0) else {
            panic!("not converted");
        };
        assert_eq!(
            prepare(&source, RepackTarget::Q8_0),
            Prepared::Reused(cache.clone())
        );
        // Cut short: rebuilt.
        let bytes = std::fs::read(&cache).unwrap();
        std::fs::write(&cache, &bytes[..bytes.len() / 2]).unwrap();
        assert!(matches!(
            prepare(&source, RepackTarget::Q8_0),
            Prepared::Converted { .. }
        ));
        assert_eq!(std::fs::read(&cache).unwrap(), bytes);
        // Another source under the same name (a different model): rebuilt.
        let mut other = TinyModel::hello();
        other.seed = 7;
        std::thread::sleep(std::time::Duration::from_millis(20));
        other.gguf().with_q4_1_matrices().write(&source).unwrap();
        assert!(matches!(
            prepare(&source, RepackTarget::Q8_0),
            Prepared::Converted { .. }
        ));
        assert_ne!(std::fs::read(&cache).unwrap(), bytes);
    }

    #[test]
    fn prepare_reports_a_folder_it_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        let source = tiny_q4_1(dir.path());
        let mut perms = std::fs::metadata(dir.path()).unwrap().permissions();
        perms.set_readonly(true);
        std::fs::set_permissions(dir.path(), perms.clone()).unwrap();
        let outcome = prepare(&source, RepackTarget::Q8_0);
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(dir.path(), perms).unwrap();
        // Root may write anyway; otherwise the failure is reported, not fatal.
        match outcome {
            Prepared::Failed(reason) => assert!(reason.contains("tmp"), "{reason}"),
            Prepared::Converted { .. } => {}
            other => panic!("{other:?}"),
        }
    }
}
