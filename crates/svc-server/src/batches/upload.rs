//! The blocking half of `POST /v1/files`: a form's bytes, parsed
//! ([`multipart`](crate::multipart)), the `file`'s lines checked
//! ([`Checker`]) and written with `std::fs` to a temporary file beside the
//! others. It runs on blocking threads, a batch of the body's chunks at a
//! time (see [`crate::ratelimit::InFlightPlace::work`]); it must not block
//! on the network, which the route's handler reads.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use svc_core::ValidationError;
use svc_core::batch::FileRecord;

use super::lines::{Checker, LineError};
use crate::error::ApiError;
use crate::multipart::{Form, Parser, Part};
use crate::upload::{Receiving, Spool, Spooled};

/// The longest filename kept, in bytes (as most file systems allow).
pub(crate) const MAX_FILENAME: usize = 255;
/// The longest `purpose` (any other field is passed over unread).
const MAX_PURPOSE: usize = 1024;

/// A form being received.
#[derive(Debug)]
pub(super) struct Receiver {
    parser: Parser,
    fields: Fields,
}

/// A form received whole: its `file`, written, and its `purpose`.
#[derive(Debug)]
pub(super) struct Received {
    pub filename: String,
    pub upload: Upload,
}

impl Receiver {
    /// A form of `boundary` whose file is written in `dir`, its bytes
    /// counted in `spool` while it arrives, its lines checked by `lines`;
    /// `file_limit` is the largest file (for a 413). Its project
    /// has `stored` bytes of its `quota`: a file (with its name) past what
    /// is left is refused as it arrives.
    pub(super) fn new(
        boundary: &str,
        dir: PathBuf,
        spool: Spool,
        lines: Checker,
        file_limit: usize,
        (quota, stored): (i64, i64),
    ) -> Self {
        Receiver {
            parser: Parser::new(boundary),
            fields: Fields {
                dir,
                spool,
                lines,
                file_limit,
                quota,
                room: u64::try_from(quota.saturating_sub(stored)).unwrap_or(0),
                current: Current::Between,
                purpose: None,
                file: None,
            },
        }
    }
}

impl Receiving for Receiver {
    type Received = Received;

    fn feed(&mut self, chunks: &[bytes::Bytes]) -> Result<(), ApiError> {
        for chunk in chunks {
            self.parser.feed(chunk, &mut self.fields)?;
        }
        Ok(())
    }

    /// The file, when the form is whole and right.
    fn finish(self) -> Result<Received, ApiError> {
        self.parser.finish()?;
        let Fields { purpose, file, .. } = self.fields;
        match purpose.as_deref() {
            Some("batch") => {}
            Some(other) => {
                return Err(ValidationError::new(
                    "purpose",
                    format!(
                        "purpose must be `batch` (files are kept for the Batch API), not `{other}`"
                    ),
                )
                .into());
            }
            None => {
                return Err(ValidationError::new("purpose", "purpose is required: `batch`").into());
            }
        }
        file.ok_or_else(|| ValidationError::new("file", "file is required").into())
    }
}

/// What the form's parts become.
#[derive(Debug)]
struct Fields {
    dir: PathBuf,
    spool: Spool,
    /// The file's lines' checker, before its first byte.
    lines: Checker,
    file_limit: usize,
    /// The project's quota of bytes, and what it has left.
    quota: i64,
    room: u64,
    current: Current,
    purpose: Option<String>,
    file: Option<Received>,
}

/// The part being read.
#[derive(Debug)]
enum Current {
    Between,
    Purpose(Vec<u8>),
    File(Box<Writing>),
    /// A field read and left (OpenAI's `expires_after`, say; a second file).
    Skipped,
}

/// The `file` being written.
#[derive(Debug)]
struct Writing {
    /// Before `upload`, so that a file given up is closed before it is
    /// removed.
    out: std::io::BufWriter<std::fs::File>,
    filename: String,
    upload: Upload,
    checker: Checker,
}

impl Form for Fields {
    type Error = ApiError;

    fn part(&mut self, part: Part) -> Result<(), ApiError> {
        self.current = match part.name.as_deref() {
            Some("purpose") => Current::Purpose(Vec::new()),
            Some("file") if self.file.is_none() => {
                let filename = part.filename.unwrap_or_else(|| "upload.jsonl".to_owned());
                // Checked before it is kept, or copied anywhere.
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
                Current::File(Box::new(self.create(filename)?))
            }
            _ => Current::Skipped,
        };
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> Result<(), ApiError> {
        match &mut self.current {
            Current::Purpose(purpose) => {
                if purpose.len() + bytes.len() > MAX_PURPOSE {
                    return Err(ApiError::PayloadTooLarge {
                        limit: self.file_limit,
                    });
                }
                purpose.extend_from_slice(bytes);
            }
            Current::File(writing) => {
                let taken =
                    writing.upload.bytes + bytes.len() as u64 + writing.filename.len() as u64;
                if taken > self.room {
                    return Err(past_quota(None, self.quota));
                }
                writing.checker.feed(bytes).map_err(|e| refused(&e))?;
                writing.upload.spooled.grow(bytes.len())?;
                writing.out.write_all(bytes).map_err(cannot_write)?;
                writing.upload.bytes += bytes.len() as u64;
            }
            Current::Between | Current::Skipped => {}
        }
        Ok(())
    }

    fn end(&mut self) -> Result<(), ApiError> {
        match std::mem::replace(&mut self.current, Current::Between) {
            Current::Purpose(purpose) => {
                self.purpose = Some(String::from_utf8_lossy(&purpose).into_owned());
            }
            Current::File(writing) => {
                let Writing {
                    filename,
                    upload,
                    out,
                    checker,
                } = *writing;
                checker.finish().map_err(|e| refused(&e))?;
                let file = out.into_inner().map_err(|e| cannot_write(e.into_error()))?;
                file.sync_all().map_err(cannot_write)?;
                self.file = Some(Received { filename, upload });
            }
            Current::Between | Current::Skipped => {}
        }
        Ok(())
    }
}

impl Fields {
    /// A temporary file for the upload.
    fn create(&self, filename: String) -> Result<Writing, ApiError> {
        crate::state::files::remake_dir(&self.dir)
            .map_err(|e| ApiError::Internal(format!("cannot make the files directory: {e}")))?;
        let id = FileRecord::generate_id();
        let upload = Upload {
            temporary: self.dir.join(format!(".upload-{id}")),
            id,
            bytes: 0,
            kept: false,
            spooled: self.spool.share(),
        };
        let out = std::fs::File::create(&upload.temporary).map_err(cannot_write)?;
        Ok(Writing {
            out: std::io::BufWriter::with_capacity(64 * 1024, out),
            filename,
            upload,
            checker: self.lines.clone(),
        })
    }
}

/// The 400 naming `file` for an upload past its project's `quota`: of a
/// file of so many bytes and bytes of name, when it is known.
pub(super) fn past_quota(file: Option<(i64, usize)>, quota: i64) -> ApiError {
    let file = match file {
        Some((bytes, name)) => format!("this file ({bytes} bytes, and {name} of its name)"),
        None => "this file".to_owned(),
    };
    ValidationError::new(
        "file",
        format!("{file} would take the project's files past its quota of {quota} bytes; delete files first"),
    )
    .into()
}

fn refused(e: &LineError) -> ApiError {
    ValidationError::new("file", e.to_string()).into()
}

fn cannot_write(e: std::io::Error) -> ApiError {
    ApiError::Internal(format!("cannot write the file: {e}"))
}

/// A file being received: written to a temporary path, deleted unless kept.
#[derive(Debug)]
pub(super) struct Upload {
    pub id: String,
    temporary: PathBuf,
    pub bytes: u64,
    kept: bool,
    /// Its bytes' share of the uploads' room on disk, given back once it
    /// is removed or kept.
    spooled: Spooled,
}

impl Upload {
    /// Moves the file to `path`.
    pub(super) async fn keep(mut self, path: &Path) -> Result<(), ApiError> {
        tokio::fs::rename(&self.temporary, path)
            .await
            .map_err(|e| ApiError::Internal(format!("cannot keep the file: {e}")))?;
        self.kept = true;
        Ok(())
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}
