//! Files and batches, in the shapes of OpenAI's Batch API: `POST /v1/files`
//! (multipart), `GET /v1/files[/{id}[/content]]`, `DELETE /v1/files/{id}`,
//! `POST /v1/batches`, `GET /v1/batches[/{id}]`,
//! `POST /v1/batches/{id}/cancel`, and the lines of a batch's input and
//! output files.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::list::{Page, Paged};

/// A file: uploaded for a batch (`purpose: batch`), or written by one
/// (`batch_output`: its output and error files).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = OpenAIFile)]
pub struct FileObject {
    /// `file-` + 24 hex.
    pub id: String,
    /// Always `file`.
    pub object: String,
    /// Size in bytes.
    pub bytes: i64,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds when the file goes with its batch's retention; `null`:
    /// kept until deleted.
    pub expires_at: Option<i64>,
    pub filename: String,
    /// `batch` or `batch_output`.
    pub purpose: String,
    /// Always `processed` (a file is checked whole before it is kept).
    pub status: String,
}

/// `GET /v1/files`.
pub type FileList = Page<FileObject>;

impl Paged for FileObject {
    const PAGE: &'static str = "ListFilesResponse";
    const PAGE_ABOUT: &'static str = "`GET /v1/files`.";
}

/// `DELETE /v1/files/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = DeleteFileResponse)]
pub struct DeletedFile {
    pub id: String,
    /// Always `file`.
    pub object: String,
    /// Always true.
    pub deleted: bool,
}

/// `POST /v1/batches`. Unknown fields are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBatchRequest {
    /// A file uploaded with `purpose: batch`: one request a line.
    pub input_file_id: String,
    /// `/v1/chat/completions`, `/v1/responses`, `/v1/embeddings`,
    /// `/v1/completions` or `/v1/rerank`: every line's `url`.
    pub endpoint: String,
    /// Always `24h`.
    pub completion_window: String,
    /// At most 16 pairs; keys up to 64 characters, values up to 512.
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// How many of a batch's requests there are and how they went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = BatchRequestCounts)]
pub struct RequestCounts {
    pub total: i64,
    /// Answered with a 2xx.
    pub completed: i64,
    /// Answered otherwise (their lines are in the error file).
    pub failed: i64,
}

/// One of a batch's own errors (a line that cannot run, say).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BatchError {
    pub code: String,
    pub message: String,
    pub param: Option<String>,
    /// The input file's line (from 1).
    pub line: Option<i64>,
}

/// A batch's own errors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BatchErrors {
    /// Always `list`.
    pub object: String,
    pub data: Vec<BatchError>,
}

/// A batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Batch {
    /// `batch_` + 24 hex.
    pub id: String,
    /// Always `batch`.
    pub object: String,
    pub endpoint: String,
    pub errors: Option<BatchErrors>,
    pub input_file_id: String,
    pub completion_window: String,
    /// `validating`, `in_progress`, `finalizing`, `completed`, `failed`,
    /// `expired`, `cancelling` or `cancelled`.
    pub status: String,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub created_at: i64,
    pub in_progress_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub finalizing_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub failed_at: Option<i64>,
    pub expired_at: Option<i64>,
    pub cancelling_at: Option<i64>,
    pub cancelled_at: Option<i64>,
    pub request_counts: RequestCounts,
    pub metadata: Option<BTreeMap<String, String>>,
}

/// `GET /v1/batches`.
pub type BatchList = Page<Batch>;

impl Paged for Batch {
    const PAGE: &'static str = "ListBatchesResponse";
    const PAGE_ABOUT: &'static str = "`GET /v1/batches`.";
}

/// One line of a batch's input file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchInputLine {
    /// Unique within the file; names the line's answer.
    pub custom_id: String,
    /// Always `POST`.
    pub method: String,
    /// The endpoint, as the batch's `endpoint`.
    pub url: String,
    /// The request's body, as the endpoint takes it (without `stream`).
    pub body: serde_json::Map<String, Value>,
}

/// One line of a batch's output or error file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchOutputLine {
    /// `batch_req_` + 24 hex.
    pub id: String,
    pub custom_id: String,
    /// The endpoint's answer, when it ran.
    pub response: Option<BatchResponse>,
    /// Why it did not run (`batch_expired`, `batch_cancelled`).
    pub error: Option<BatchLineError>,
}

/// The endpoint's answer to one line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchResponse {
    pub status_code: u16,
    pub request_id: String,
    pub body: Value,
}

/// Why a line did not run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchLineError {
    pub code: String,
    pub message: String,
}

/// `POST /v1/files`, as `multipart/form-data`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = CreateFileRequest)]
pub struct UploadFile {
    /// The file: JSON Lines, one request a line.
    #[schema(value_type = String, format = Binary)]
    pub file: String,
    /// Always `batch`.
    pub purpose: String,
}
