//! Writing GGUF: a header (metadata in order, tensor entries, padding to
//! the alignment) and tensor data padded the same way. The repack
//! converter writes its headers with [`write_header`]; [`GgufWriter`]
//! builds whole files from metadata and tensors (the test models).

use std::io::{self, Read, Write};
use std::path::Path;

use crate::header::{DEFAULT_ALIGNMENT, GgufHeader, MetaValue, TensorInfo};
use crate::{GGML_TYPE_F32, GGML_TYPE_Q4_1, MAGIC, quant};

impl MetaValue {
    pub(crate) fn write(&self, out: &mut impl Write) -> io::Result<()> {
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

/// Writes `header` (padded to its alignment); returns the bytes written,
/// which is where its data section starts.
pub(crate) fn write_header(out: &mut impl Write, header: &GgufHeader) -> io::Result<u64> {
    let mut counter = CountingWriter { inner: out, n: 0 };
    let w = &mut counter;
    w.write_all(MAGIC)?;
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

/// Writes one tensor's data and the zeros that pad it to `alignment`; returns the bytes written.
pub(crate) fn write_tensor_data(
    out: &mut impl Write,
    data: &[u8],
    alignment: u64,
) -> io::Result<u64> {
    out.write_all(data)?;
    let len = data.len() as u64;
    let padded = len.next_multiple_of(alignment);
    write_zeros(out, padded - len)?;
    Ok(padded)
}

pub(crate) fn write_bytes(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    out.write_all(&(bytes.len() as u64).to_le_bytes())?;
    out.write_all(bytes)
}

pub(crate) fn write_zeros(out: &mut impl Write, n: u64) -> io::Result<()> {
    io::copy(&mut io::repeat(0).take(n), out).map(drop)
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

/// A tensor's data, as given to [`GgufWriter`].
#[derive(Debug, Clone)]
enum TensorData {
    F32(Vec<f32>),
    /// A ggml type id and the data in that type.
    Raw(u32, Vec<u8>),
}

impl TensorData {
    fn ggml_type(&self) -> u32 {
        match self {
            TensorData::F32(_) => GGML_TYPE_F32,
            TensorData::Raw(t, _) => *t,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        match self {
            TensorData::F32(data) => data.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::Raw(_, bytes) => bytes.clone(),
        }
    }
}

/// Builds GGUF version 3 files from metadata and tensors: F32 tensors, and
/// tensors of other types given as raw bytes.
#[derive(Debug, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<(String, Vec<u64>, TensorData)>,
}

impl GgufWriter {
    /// An empty file.
    pub fn new() -> Self {
        GgufWriter::default()
    }

    /// Adds a metadata entry.
    pub fn metadata(&mut self, key: &str, value: impl Into<MetaValue>) -> &mut Self {
        self.metadata.push((key.to_owned(), value.into()));
        self
    }

    /// Adds an F32 tensor; `dims` in ggml order (the fastest-moving first).
    pub fn tensor(&mut self, name: &str, dims: &[u64], data: Vec<f32>) -> &mut Self {
        debug_assert_eq!(dims.iter().product::<u64>() as usize, data.len(), "{name}");
        self.tensors
            .push((name.to_owned(), dims.to_vec(), TensorData::F32(data)));
        self
    }

    /// Adds a tensor of ggml type `ggml_type` whose data is already encoded.
    pub fn raw_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ggml_type: u32,
        data: Vec<u8>,
    ) -> &mut Self {
        self.tensors.push((
            name.to_owned(),
            dims.to_vec(),
            TensorData::Raw(ggml_type, data),
        ));
        self
    }

    /// The same file with every F32 matrix whose rows are a multiple of 32
    /// values quantized to Q4_1 (as llama.cpp's quantizer does it).
    pub fn with_q4_1_matrices(mut self) -> Self {
        for (_, dims, data) in &mut self.tensors {
            if let TensorData::F32(values) = data
                && dims.len() >= 2
                && dims[0] % 32 == 0
            {
                *data = TensorData::Raw(GGML_TYPE_Q4_1, quant::quantize_row_q4_1(values));
            }
        }
        self
    }

    /// The alignment of tensor data: `general.alignment` when set, else 32.
    fn alignment(&self) -> u64 {
        self.metadata
            .iter()
            .find_map(|(k, v)| match v {
                MetaValue::U32(a) if k == "general.alignment" && *a > 0 => Some(u64::from(*a)),
                _ => None,
            })
            .unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// The whole file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let alignment = self.alignment();
        let data: Vec<(u32, Vec<u8>)> = self
            .tensors
            .iter()
            .map(|(_, _, d)| (d.ggml_type(), d.bytes()))
            .collect();
        let mut offset = 0u64;
        let mut tensors = Vec::with_capacity(self.tensors.len());
        for ((name, dims, _), (ggml_type, bytes)) in self.tensors.iter().zip(&data) {
            tensors.push(TensorInfo {
                name: name.clone(),
                dims: dims.clone(),
                ggml_type: *ggml_type,
                offset,
            });
            offset += (bytes.len() as u64).next_multiple_of(alignment);
        }
        let header = GgufHeader {
            version: 3,
            metadata: self.metadata.clone(),
            tensors,
            alignment,
            data_offset: 0,
            file_len: 0,
        };
        let mut out = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = write_header(&mut out, &header);
        for (_, bytes) in &data {
            let _ = write_tensor_data(&mut out, bytes, alignment);
        }
        out
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        let mut file = std::fs::File::create(path)?;
        file.write_all(&self.to_bytes())?;
        file.sync_all()
    }
}
