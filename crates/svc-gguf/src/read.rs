//! Reading a GGUF header: version 2 or 3, little-endian, every metadata
//! type, the tensor entries and `general.alignment`. Every length is checked
//! against the file's size before anything is allocated for it, so a
//! damaged or hostile file costs no more memory than its own size.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use crate::header::{DEFAULT_ALIGNMENT, GgufHeader, MetaValue, TensorInfo};
use crate::{GgufError, MAGIC, Problem, bad};

impl GgufHeader {
    /// Reads the header of the GGUF at `path`.
    pub fn read(path: &Path) -> Result<GgufHeader, GgufError> {
        let file = File::open(path).map_err(|e| Problem::Io(e).at(path))?;
        let file_len = file.metadata().map_err(|e| Problem::Io(e).at(path))?.len();
        GgufHeader::parse(&mut BufReader::new(file), file_len).map_err(|p| p.at(path))
    }

    pub(crate) fn parse(reader: &mut impl Read, file_len: u64) -> Result<GgufHeader, Problem> {
        let mut r = HeaderReader {
            inner: reader,
            pos: 0,
            limit: file_len,
        };
        if r.bytes(4)? != MAGIC {
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

#[cfg(test)]
mod tests {

    use super::*;
    use crate::GgufError;
    use crate::fixtures::small_file;
    use crate::write::write_header;

    #[test]
    fn rejects_what_is_not_a_gguf() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.gguf");
        std::fs::write(&path, b"GGUF\x03\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff").unwrap();
        assert!(matches!(
            GgufHeader::read(&path),
            Err(GgufError::Format { .. })
        ));
        std::fs::write(&path, b"not a model").unwrap();
        assert!(GgufHeader::read(&path).is_err());
        let bytes = std::fs::read(small_file(dir.path())).unwrap();
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
}
