//! The blocking half of an audio upload: the form's parts parsed
//! ([`crate::multipart`]), its `file` written to a temporary file beside the
//! Batch API's files and measured once whole ([`super::length`]), and its
//! other fields kept (each short, a few of them). Its `model` is checked
//! ([`UploadGate::model`]) as soon as its field ends: before the file is
//! written when the form names it first, as OpenAI's Python library
//! does, and the upload given up at once when it names it after. It runs
//! on blocking threads, a batch of the body's chunks at a time
//! ([`crate::upload::receive`]).

use std::io::Write as _;
use std::path::PathBuf;

use svc_core::{AudioFile, ValidationError};

use super::length::{Length, measure};
use crate::admission::UploadGate;
use crate::batches::upload::MAX_FILENAME;
use crate::error::ApiError;
use crate::multipart::{Form, Parser, Part};
use crate::upload::{Receiving, Spool, Spooled};

/// The most bytes of one field other than the file (a `prompt` is the
/// longest OpenAI takes: 224 tokens).
pub(super) const MAX_FIELD: usize = 16 * 1024;
/// The most fields other than the file.
const MAX_FIELDS: usize = 32;
/// What a form holds beside its file, at most: its fields and the parts'
/// headers and boundaries.
pub(super) const FORM_OVERHEAD: usize = MAX_FIELDS * (MAX_FIELD + 512) + 64 * 1024;

/// An audio form being received.
#[derive(Debug)]
pub(super) struct Receiver {
    parser: Parser,
    parts: Parts,
}

/// A form received whole: its file (removed when this is dropped) and its
/// other fields in order.
#[derive(Debug)]
pub(super) struct Received {
    pub file: Option<Kept>,
    pub fields: Vec<(String, String)>,
}

impl Receiver {
    /// A form of `boundary` whose file is written in `dir`, its bytes
    /// counted in `spool` while it is there; `limit` is the largest file
    /// (for a 413); its `model` is checked by `gate`.
    pub(super) fn new(
        boundary: &str,
        dir: PathBuf,
        spool: Spool,
        limit: usize,
        gate: UploadGate,
    ) -> Self {
        Receiver {
            parser: Parser::new(boundary),
            parts: Parts {
                gate,
                dir,
                spool,
                limit,
                current: Current::Between,
                fields: Vec::new(),
                file: None,
            },
        }
    }
}

impl Receiving for Receiver {
    type Received = Received;

    fn feed(&mut self, chunks: &[bytes::Bytes]) -> Result<(), ApiError> {
        for chunk in chunks {
            self.parser.feed(chunk, &mut self.parts)?;
        }
        Ok(())
    }

    fn finish(self) -> Result<Received, ApiError> {
        self.parser.finish()?;
        let Parts { fields, file, .. } = self.parts;
        let file = file
            .map(|mut kept| {
                kept.length = measure(&kept.audio.path, kept.audio.bytes)?;
                if let Length::Decoded(seconds) = kept.length {
                    kept.audio.seconds = Some(seconds);
                }
                Ok::<_, ValidationError>(kept)
            })
            .transpose()?;
        Ok(Received { file, fields })
    }
}

#[derive(Debug)]
struct Parts {
    gate: UploadGate,
    dir: PathBuf,
    spool: Spool,
    limit: usize,
    current: Current,
    fields: Vec<(String, String)>,
    file: Option<Kept>,
}

#[derive(Debug)]
enum Current {
    Between,
    Field(String, Vec<u8>),
    File(Box<Writing>),
    /// A second file, or a field past the count.
    Skipped,
}

#[derive(Debug)]
struct Writing {
    /// Before `kept`, so that a file given up is closed before it is
    /// removed.
    out: std::io::BufWriter<std::fs::File>,
    kept: Kept,
}

/// The uploaded file on disk, removed when dropped.
#[derive(Debug)]
pub(super) struct Kept {
    pub audio: AudioFile,
    /// How long it plays (measured once it is whole).
    pub length: Length,
    /// Its bytes' share of the uploads' room on disk, given back once it
    /// is removed.
    spooled: Spooled,
}

impl Drop for Kept {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.audio.path);
    }
}

impl Form for Parts {
    type Error = ApiError;

    fn part(&mut self, part: Part) -> Result<(), ApiError> {
        self.current = match part.name {
            Some(name) if name == "file" && self.file.is_none() => {
                let filename = part.filename.unwrap_or_else(|| "audio".to_owned());
                if filename.len() > MAX_FILENAME {
                    return Err(ValidationError::new(
                        "file",
                        format!(
                            "the filename is {} bytes long; a filename has at most {MAX_FILENAME} bytes",
                            filename.len()
                        ),
                    )
                    .into());
                }
                Current::File(Box::new(self.create(filename, part.content_type)?))
            }
            Some(name) if name != "file" && self.fields.len() < MAX_FIELDS => {
                if name.len() > 256 {
                    return Err(ApiError::InvalidBody {
                        param: None,
                        message: "a form field's name has at most 256 bytes".into(),
                    });
                }
                Current::Field(name, Vec::new())
            }
            _ => Current::Skipped,
        };
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> Result<(), ApiError> {
        match &mut self.current {
            Current::Field(name, value) => {
                if value.len() + bytes.len() > MAX_FIELD {
                    return Err(ValidationError::new(
                        name.clone(),
                        format!("{name} has at most {MAX_FIELD} bytes"),
                    )
                    .into());
                }
                value.extend_from_slice(bytes);
            }
            Current::File(writing) => {
                writing.kept.audio.bytes += bytes.len() as u64;
                if writing.kept.audio.bytes > self.limit as u64 {
                    return Err(ApiError::PayloadTooLarge { limit: self.limit });
                }
                writing.kept.spooled.grow(bytes.len())?;
                writing.out.write_all(bytes).map_err(cannot_write)?;
            }
            Current::Between | Current::Skipped => {}
        }
        Ok(())
    }

    fn end(&mut self) -> Result<(), ApiError> {
        match std::mem::replace(&mut self.current, Current::Between) {
            Current::Field(name, value) => {
                let value = String::from_utf8(value).map_err(|_| {
                    ValidationError::new(name.clone(), format!("{name} must be UTF-8 text"))
                })?;
                if name == "model" {
                    super::valid::model_id(&value)?;
                    self.gate.model(&value)?;
                }
                self.fields.push((name, value));
            }
            Current::File(writing) => {
                let Writing { out, kept } = *writing;
                out.into_inner().map_err(|e| cannot_write(e.into_error()))?;
                self.file = Some(kept);
            }
            Current::Between | Current::Skipped => {}
        }
        Ok(())
    }
}

impl Parts {
    fn create(&self, filename: String, content_type: Option<String>) -> Result<Writing, ApiError> {
        crate::state::files::remake_dir(&self.dir)
            .map_err(|e| ApiError::Internal(format!("cannot make the files directory: {e}")))?;
        let path = self.dir.join(format!(
            ".audio-{}",
            hex::encode(rand::random::<[u8; 12]>())
        ));
        let out = std::fs::File::create(&path).map_err(cannot_write)?;
        Ok(Writing {
            out: std::io::BufWriter::with_capacity(64 * 1024, out),
            kept: Kept {
                audio: AudioFile {
                    path,
                    filename,
                    content_type,
                    bytes: 0,
                    seconds: None,
                },
                length: Length::Bound(0.0),
                spooled: self.spool.share(),
            },
        })
    }
}

fn cannot_write(e: std::io::Error) -> ApiError {
    ApiError::Internal(format!("cannot write the audio file: {e}"))
}
