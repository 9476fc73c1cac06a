//! Files and batches (OpenAI's Batch API, issue 34): what the store keeps
//! of them, and how replicas share a batch's work.
//!
//! A file's bytes live on disk (the server's files directory); the store
//! keeps its record. A batch's input lines are copied into the store when
//! it is created, one row each; a replica takes some of them on a *lease*
//! (its name and a time), runs them, and writes each one's answer once: a
//! line is answered by the first replica to finish it while it is still
//! pending, and counted then, so a line run twice (its replica stopped
//! mid-line and its lease ran out) is still answered and counted once.
//! When no line is left, one replica takes the batch itself on a lease to
//! write its output and error files (finalizing), and the batch ends.
//!
//! What a project keeps counts toward its quota of file bytes, once: its
//! files; the copy of a running batch's lines and the answers written so
//! far. When a batch ends its answers become its output and error files,
//! which count instead, and its lines are deleted, in one transaction. A
//! project holds at most a bounded number of batches that have not ended.
//! Lines are taken fairly: round-robin over the projects with pending
//! lines, then over a project's keys, then oldest batch and line first.

use async_trait::async_trait;

use crate::error::StoreError;
use crate::ids::{KeyId, ProjectId};

/// A file's record (its bytes are on disk, under its id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRecord {
    /// `file-` + 24 hex.
    pub id: String,
    pub project_id: ProjectId,
    /// `batch` (uploaded), `batch_output` (written by a batch).
    pub purpose: String,
    pub filename: String,
    pub bytes: i64,
    pub created_at: i64,
}

impl FileRecord {
    /// A fresh random file id.
    pub fn generate_id() -> String {
        format!("file-{}", hex::encode(rand::random::<[u8; 12]>()))
    }
}

/// Where a batch is in its life, OpenAI's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchStatus {
    Validating,
    InProgress,
    Finalizing,
    Completed,
    Failed,
    Expired,
    Cancelling,
    Cancelled,
}

impl BatchStatus {
    /// Every status, in a stable order.
    pub const ALL: [BatchStatus; 8] = [
        BatchStatus::Validating,
        BatchStatus::InProgress,
        BatchStatus::Finalizing,
        BatchStatus::Completed,
        BatchStatus::Failed,
        BatchStatus::Expired,
        BatchStatus::Cancelling,
        BatchStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BatchStatus::Validating => "validating",
            BatchStatus::InProgress => "in_progress",
            BatchStatus::Finalizing => "finalizing",
            BatchStatus::Completed => "completed",
            BatchStatus::Failed => "failed",
            BatchStatus::Expired => "expired",
            BatchStatus::Cancelling => "cancelling",
            BatchStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        BatchStatus::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// A batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRecord {
    /// `batch_` + 24 hex.
    pub id: String,
    pub project_id: ProjectId,
    /// The key that created it; its lines run as this key.
    pub key_id: KeyId,
    /// `/v1/chat/completions`, `/v1/responses`, `/v1/embeddings` or
    /// `/v1/completions`.
    pub endpoint: String,
    pub input_file_id: String,
    pub completion_window: String,
    pub status: BatchStatus,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    /// The batch's own errors (OpenAI's `errors.data`), as JSON.
    pub errors: Option<String>,
    /// The caller's `metadata`, as JSON.
    pub metadata: Option<String>,
    pub total: i64,
    pub completed: i64,
    pub failed: i64,
    pub created_at: i64,
    pub expires_at: i64,
    pub in_progress_at: Option<i64>,
    pub finalizing_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub failed_at: Option<i64>,
    pub expired_at: Option<i64>,
    pub cancelling_at: Option<i64>,
    pub cancelled_at: Option<i64>,
}

impl BatchRecord {
    /// A fresh random batch id.
    pub fn generate_id() -> String {
        format!("batch_{}", hex::encode(rand::random::<[u8; 12]>()))
    }
}

/// One input line of a batch, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchLine {
    /// Its place in the input file, from 0.
    pub index: i64,
    pub custom_id: String,
    /// The line's request body (JSON).
    pub body: String,
}

/// A line a replica holds on a lease, to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasedLine {
    pub batch_id: String,
    pub key_id: KeyId,
    pub endpoint: String,
    pub line: BatchLine,
}

/// A line's answer: one line of the output file (`ok`) or of the error file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineAnswer {
    pub batch_id: String,
    pub index: i64,
    pub ok: bool,
    /// The output or error file's line (JSON, no newline).
    pub output: String,
}

/// What [`BatchStore::answer_line`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// The answer is written and counted.
    Written,
    /// Nothing: the line was answered already, or its batch is no longer
    /// running.
    Not,
    /// Nothing: the answer would take the project past its quota.
    PastQuota,
}

/// What bounds a project's batches when one is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// The most batches of a project that have not ended.
    pub in_progress: i64,
    /// The project's quota of bytes (files, lines' copies, answers).
    pub quota: i64,
}

/// Why a batch was not created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchRefused {
    /// The project has `limit` batches that have not ended.
    InProgress { limit: i64 },
    /// The copy of its lines (`needed` bytes) would take the project's
    /// `used` bytes past `quota`.
    Quota { used: i64, needed: i64, quota: i64 },
}

/// A batch's answered lines, in input order, for its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnsweredLine {
    pub index: i64,
    pub custom_id: String,
    /// `None`: never answered (the batch was cancelled or expired first).
    pub answer: Option<(bool, String)>,
}

/// What a lease names: who holds it and until when (unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub owner: String,
    pub until: i64,
}

/// Files' and batches' persistence.
#[async_trait]
pub trait BatchStore: Send + Sync {
    /// Records a file whose bytes are already on disk, unless the project's
    /// files would then hold more than `quota` bytes: false then, and
    /// nothing is recorded.
    async fn insert_file(&self, file: &FileRecord, quota: i64) -> Result<bool, StoreError>;
    /// The project's file with this id.
    async fn file(&self, project: &ProjectId, id: &str) -> Result<Option<FileRecord>, StoreError>;
    /// The project's files, newest first: at most `limit`, after the file
    /// `after` (by id, as listed), of `purpose` when given.
    async fn list_files(
        &self,
        project: &ProjectId,
        purpose: Option<&str>,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<FileRecord>, StoreError>;
    /// Deletes the project's file record; false when there was none.
    async fn delete_file(&self, project: &ProjectId, id: &str) -> Result<bool, StoreError>;

    /// Records a batch and its lines, all or none, unless the project
    /// would then have more than `limits.in_progress` batches that have not
    /// ended, or the copy of the lines (their custom ids' and bodies'
    /// bytes) would take it past `limits.quota`: the reason then, and
    /// nothing is recorded. Two creates at once never pass together.
    async fn insert_batch(
        &self,
        batch: &BatchRecord,
        lines: &[BatchLine],
        limits: &BatchLimits,
    ) -> Result<Result<(), BatchRefused>, StoreError>;
    /// The project's batch with this id (any project when `None`).
    async fn batch(
        &self,
        project: Option<&ProjectId>,
        id: &str,
    ) -> Result<Option<BatchRecord>, StoreError>;
    /// The project's batches, newest first: at most `limit`, after `after`.
    async fn list_batches(
        &self,
        project: &ProjectId,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<BatchRecord>, StoreError>;
    /// Moves the project's batch from `validating` or `in_progress` to
    /// `cancelling`; the batch as it is after, `None` when there is none.
    async fn cancel_batch(
        &self,
        project: &ProjectId,
        id: &str,
        at: i64,
    ) -> Result<Option<BatchRecord>, StoreError>;

    /// Takes at most `limit` pending lines of `in_progress` batches whose
    /// lease is free (none, or ended before `now`), for `lease`; two
    /// replicas never take the same line at once. Lines are taken in
    /// turns: each project with pending lines in turn (fewest lines on a
    /// live lease first, then the one served least recently), within a
    /// project each key in turn, within a key the oldest batch first, in
    /// input order. The lines come back in batch and input order.
    async fn lease_lines(
        &self,
        lease: &Lease,
        now: i64,
        limit: i64,
    ) -> Result<Vec<LeasedLine>, StoreError>;
    /// Extends the leases `lease.owner` holds on lines still pending.
    async fn renew_line_leases(&self, lease: &Lease) -> Result<(), StoreError>;
    /// Writes a line's answer and counts it (and its bytes) on its batch,
    /// unless it was answered already, or (with a `quota`) its bytes would
    /// take the project past it: then nothing is written. `None`: kept past
    /// the quota (the short error line that says the quota is reached).
    async fn answer_line(
        &self,
        answer: &LineAnswer,
        quota: Option<i64>,
    ) -> Result<Answered, StoreError>;
    /// The bytes that count toward the project's quota: its files, and the
    /// copies of its running batches' lines and their answers so far.
    async fn stored_bytes(&self, project: &ProjectId) -> Result<i64, StoreError>;

    /// Takes one batch that is ready to end, for `lease`: an `in_progress`
    /// batch with no pending line, a `cancelling` one with no line on a
    /// live lease, one past `expires_at` (by `now`) that has not ended, or
    /// a `finalizing` one whose lease ended. It is `finalizing` then, and
    /// the returned status is where it goes (`completed`, `cancelled` or
    /// `expired`).
    async fn take_batch_to_finish(
        &self,
        lease: &Lease,
        now: i64,
    ) -> Result<Option<(BatchRecord, BatchStatus)>, StoreError>;
    /// A page of a batch's lines after the line `after` (from the first
    /// when `None`), in input order, with their answers: at most `lines`,
    /// and no more once their answers hold `bytes` (always one, however
    /// long): a batch's answers are read a page at a time.
    async fn answers_page(
        &self,
        id: &str,
        after: Option<i64>,
        lines: i64,
        bytes: i64,
    ) -> Result<Vec<AnsweredLine>, StoreError>;
    /// Ends a `finalizing` batch that `owner` holds: its status (`to`), the
    /// time, its files (recorded with it, outside the quota check: they
    /// are its answers, which counted until now), and deletes its lines;
    /// all or none. False when the batch is not `owner`'s to end any more.
    async fn finish_batch(
        &self,
        id: &str,
        owner: &str,
        to: BatchStatus,
        at: i64,
        files: &[FileRecord],
    ) -> Result<bool, StoreError>;

    /// Deletes batches that ended before `before`, with their lines, and
    /// the records of their input, output and error files; the files'
    /// ids, to delete from disk.
    async fn sweep_batches(&self, before: i64) -> Result<Vec<String>, StoreError>;
}
