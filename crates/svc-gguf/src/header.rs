//! A GGUF header as data: metadata values, tensor entries, and the layout
//! rules a file must follow (tensors in header order, aligned, inside the
//! file). Reading and writing live in `read` and `write`.

use crate::{Problem, bad};

/// The alignment of tensor data when `general.alignment` is not set.
pub(crate) const DEFAULT_ALIGNMENT: u64 = 32;

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
    pub(crate) fn type_id(&self) -> u32 {
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
}

impl From<u32> for MetaValue {
    fn from(v: u32) -> Self {
        MetaValue::U32(v)
    }
}

impl From<i32> for MetaValue {
    fn from(v: i32) -> Self {
        MetaValue::I32(v)
    }
}

impl From<f32> for MetaValue {
    fn from(v: f32) -> Self {
        MetaValue::F32(v)
    }
}

impl From<bool> for MetaValue {
    fn from(v: bool) -> Self {
        MetaValue::Bool(v)
    }
}

impl From<&str> for MetaValue {
    fn from(v: &str) -> Self {
        MetaValue::Str(v.as_bytes().to_vec())
    }
}

impl From<String> for MetaValue {
    fn from(v: String) -> Self {
        MetaValue::Str(v.into_bytes())
    }
}

/// An array of strings.
impl From<Vec<String>> for MetaValue {
    fn from(items: Vec<String>) -> Self {
        MetaValue::Array(8, items.into_iter().map(MetaValue::from).collect())
    }
}

/// An array of I32 values.
impl From<Vec<i32>> for MetaValue {
    fn from(items: Vec<i32>) -> Self {
        MetaValue::Array(5, items.into_iter().map(MetaValue::I32).collect())
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

    /// The byte size of each tensor's data (without padding), checking that
    /// the data lies in the file in header order, as llama.cpp requires.
    /// A tensor of a type this module does not know gets the span up to the
    /// next tensor (or the end of the file).
    pub(crate) fn tensor_sizes(&self) -> Result<Vec<u64>, Problem> {
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

    pub(crate) fn check_layout(&self) -> Result<(), Problem> {
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
