//! [`BatchStore`] on SQL: the `files`, `batches` and `batch_lines` tables
//! (migrations 0018 and 0020).
//!
//! What replicas race on is decided by one conditional statement each: a
//! file's quota (an `INSERT … SELECT … WHERE` the sum still fits, then a
//! check of the project's running batches too), a batch's creation (an
//! `INSERT … SELECT … WHERE` the project's running batches and bytes still
//! fit), a line's lease (an `UPDATE` of lines still pending and free; on
//! PostgreSQL the lines are picked `FOR UPDATE SKIP LOCKED`, so that
//! replicas leasing at once take different lines, and SQLite runs one
//! writer at a time), a line's answer (an `UPDATE` of the line while it is
//! pending and its bytes fit the quota, then its count on the batch, in one
//! transaction), a batch's finalizing lease (an `UPDATE` that re-checks
//! that the batch is still ready to end) and its end (an `UPDATE` by the
//! lease's owner only). On PostgreSQL, whatever is checked against a
//! project's quota first holds the project's advisory lock (READ COMMITTED
//! would let two writers each miss the other's bytes). Every transaction
//! starts with a write, so that SQLite takes its write lock before it
//! reads.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::batch::{
    Answered, AnsweredLine, BatchLimits, BatchLine, BatchRecord, BatchRefused, BatchStatus,
    BatchStore, FileRecord, Lease, LeasedLine, LineAnswer,
};
use svc_core::ids::{KeyId, ProjectId};
use svc_core::store::{StoreError, UnknownValue};

use crate::error::{query_error, unknown_value};
use crate::filter::{Filter, Value};
use crate::{Backend, SqlStore};

macro_rules! file_columns {
    () => {
        "id, project_id, purpose, filename, bytes, created_at"
    };
}

macro_rules! batch_columns {
    () => {
        "id, project_id, key_id, endpoint, input_file_id, completion_window, status, \
         output_file_id, error_file_id, errors, metadata, total, completed, failed, \
         created_at, expires_at, in_progress_at, finalizing_at, completed_at, failed_at, \
         expired_at, cancelling_at, cancelled_at"
    };
}

/// Where a batch that is not being ended by a live lease goes now (`$1`
/// is now), NULL when it is not ready to end: a `finalizing` batch whose
/// lease ended goes where its first taker meant it to; an `in_progress`
/// one with no pending line is completed; a `cancelling` one with no
/// pending line on a live lease is cancelled; one past its expiry that has
/// not ended otherwise expires (its pending lines stay pending).
macro_rules! ready_to {
    () => {
        "CASE \
           WHEN batches.status = 'finalizing' THEN \
             CASE WHEN batches.lease_until IS NULL OR batches.lease_until < $1 \
               THEN batches.finish_to END \
           WHEN batches.status = 'in_progress' AND NOT EXISTS (\
               SELECT 1 FROM batch_lines l \
               WHERE l.batch_id = batches.id AND l.state = 'pending') \
             THEN 'completed' \
           WHEN batches.status = 'cancelling' AND NOT EXISTS (\
               SELECT 1 FROM batch_lines l \
               WHERE l.batch_id = batches.id AND l.state = 'pending' \
               AND l.lease_until >= $1) \
             THEN 'cancelled' \
           WHEN batches.status IN ('validating', 'in_progress', 'cancelling') \
               AND batches.expires_at < $1 \
             THEN 'expired' \
         END"
    };
}

/// The statuses of a batch that has not ended.
macro_rules! running {
    () => {
        "('validating', 'in_progress', 'cancelling', 'finalizing')"
    };
}

/// What counts toward the quota of the project `$project` (SQL for its
/// id): its files (and their names, as [`INSERT_FILE`] counts them), and
/// the copies of its running batches' lines and their answers so far (an
/// ended batch's answers are its files).
macro_rules! stored_bytes {
    ($project:expr) => {
        concat!(
            "(SELECT COALESCE(SUM(bytes + OCTET_LENGTH(filename)), 0) FROM files \
             WHERE project_id = ",
            $project,
            ") + (SELECT COALESCE(SUM(input_bytes + answer_bytes), 0) FROM batches \
             WHERE project_id = ",
            $project,
            " AND status IN ",
            running!(),
            ")"
        )
    };
}

/// `$1`: a project's bytes toward its quota.
const STORED: &str = concat!("SELECT CAST(", stored_bytes!("$1"), " AS BIGINT) AS used");

/// `$1` to `$7`: a file's columns and the project's quota, which counts
/// each file's name (`$4`) as well as its bytes (`$5`): names are kept too,
/// and listed. What the project keeps already (`stored_bytes!`) counts:
/// its files, and its running batches' copies and answers.
const INSERT_FILE: &str = concat!(
    "INSERT INTO files (",
    file_columns!(),
    ") SELECT $1, $2, $3, $4, $5, $6 WHERE ",
    stored_bytes!("$2"),
    " + $5 + OCTET_LENGTH($4) <= $7"
);
/// PostgreSQL: holds the project's (`$1`) uploads to one at a time until
/// the transaction ends.
const LOCK_PROJECT_FILES: &str =
    "SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock(hashtext('svc files ' || $1))) AS l";
/// PostgreSQL: [`LOCK_PROJECT_FILES`] of the project of batch `$1`.
const LOCK_BATCH_PROJECT: &str = "SELECT 1 AS locked FROM (\
     SELECT pg_advisory_xact_lock(hashtext('svc files ' || project_id)) \
     FROM batches WHERE id = $1) AS l";
/// A batch's output and error files, recorded when it ends without a quota
/// check: they are its answers, which were checked and counted as they
/// came; written once.
const RECORD_FILE: &str = concat!(
    "INSERT INTO files (",
    file_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING"
);
const FILE: &str = concat!(
    "SELECT ",
    file_columns!(),
    " FROM files WHERE project_id = $1 AND id = $2"
);
const DELETE_FILE: &str = "DELETE FROM files WHERE project_id = $1 AND id = $2";

/// `$1` to `$23` a batch's columns, `$24` the bytes of its lines' copy,
/// if the project (`$2`) has fewer than `$25` batches that have not ended
/// and the copy fits its quota (`$26`).
const INSERT_BATCH: &str = concat!(
    "INSERT INTO batches (",
    batch_columns!(),
    ", input_bytes) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, \
     $16, $17, $18, $19, $20, $21, $22, $23, $24 \
     WHERE (SELECT COUNT(*) FROM batches WHERE project_id = $2 AND status IN ",
    running!(),
    ") < $25 AND ",
    stored_bytes!("$2"),
    " + $24 <= $26"
);
/// Why [`INSERT_BATCH`] inserted nothing: the project's (`$1`) batches
/// that have not ended, and its bytes.
const PROJECT_LOAD: &str = concat!(
    "SELECT (SELECT COUNT(*) FROM batches WHERE project_id = $1 AND status IN ",
    running!(),
    ") AS running, CAST(",
    stored_bytes!("$1"),
    " AS BIGINT) AS used"
);
const BATCH: &str = concat!("SELECT ", batch_columns!(), " FROM batches WHERE id = $1");
const PROJECT_BATCH: &str = concat!(
    "SELECT ",
    batch_columns!(),
    " FROM batches WHERE id = $1 AND project_id = $2"
);
const CANCEL: &str = "UPDATE batches SET status = 'cancelling', cancelling_at = $3 \
     WHERE id = $1 AND project_id = $2 AND status IN ('validating', 'in_progress')";

/// Columns a line binds in a multi-row `INSERT` (the batch's id is bound
/// once, as `$1`).
const LINE_WIDTH: usize = 3;
/// Lines one statement inserts at most (1,501 bound values on PostgreSQL,
/// well under its limit).
const LINES_PER_STATEMENT: usize = 500;

/// The lines a lease chooses from (`candidates`), so that a lease reads a
/// few lines of each batch, not all of a 50,000-line one: the lines on a
/// lease, live or ended (a few per replica; the partial index
/// `batch_lines_leased`), and each running batch's first `$4` lines never
/// leased (no batch gives more than `$4`). SQLite has no `LATERAL`: a
/// `CROSS JOIN` (which SQLite keeps in its order) reads each batch's lines
/// up to its `$4`th.
const CANDIDATES_SQLITE: &str = "WITH candidates AS (\
       SELECT l.batch_id, l.idx, l.lease_until FROM batch_lines l INDEXED BY batch_lines_leased \
       WHERE l.lease_owner IS NOT NULL AND l.state = 'pending' \
       UNION ALL \
       SELECT l.batch_id, l.idx, l.lease_until FROM batches b CROSS JOIN batch_lines l \
       ON l.state = 'pending' AND l.batch_id = b.id AND l.idx <= COALESCE((\
         SELECT x.idx FROM batch_lines x \
         WHERE x.state = 'pending' AND x.batch_id = b.id AND x.lease_owner IS NULL \
         ORDER BY x.idx LIMIT 1 OFFSET $4 - 1), 9223372036854775807) \
       WHERE b.status = 'in_progress' AND l.lease_owner IS NULL)";
/// [`CANDIDATES_SQLITE`] on PostgreSQL.
const CANDIDATES_POSTGRES: &str = "WITH candidates AS (\
       SELECT l.batch_id, l.idx, l.lease_until FROM batch_lines l \
       WHERE l.lease_owner IS NOT NULL AND l.state = 'pending' \
       UNION ALL \
       SELECT l.batch_id, l.idx, l.lease_until FROM batches b CROSS JOIN LATERAL (\
         SELECT x.batch_id, x.idx, x.lease_until FROM batch_lines x \
         WHERE x.state = 'pending' AND x.batch_id = b.id AND x.lease_owner IS NULL \
         ORDER BY x.idx LIMIT $4) AS l \
       WHERE b.status = 'in_progress')";
/// The candidates ranked, for [`lease_sql`]: in a project, the lines on a
/// live lease (`free` 0) take the first turns; then each key in turn
/// (`key_turn`: its lines by oldest batch and index; the key served least
/// recently first on a tie); across projects, each project's first turn,
/// then its second, … (the project served least recently first on a tie).
/// `$3` is now. Window functions, which both databases have; PostgreSQL
/// cannot lock rows in the same query, so the lines are locked after, in
/// `picked`.
const RANKED: &str = ", queued AS (\
       SELECT c.batch_id, c.idx, b.project_id, b.key_id, \
         CASE WHEN c.lease_until IS NULL OR c.lease_until < $3 THEN 1 ELSE 0 END AS free, \
         MAX(b.turn) OVER (PARTITION BY b.project_id) AS project_served, \
         MAX(b.turn) OVER (PARTITION BY b.project_id, b.key_id) AS key_served, \
         ROW_NUMBER() OVER (PARTITION BY b.project_id, b.key_id ORDER BY \
           CASE WHEN c.lease_until IS NULL OR c.lease_until < $3 THEN 1 ELSE 0 END, \
           b.created_at, b.id, c.idx) AS key_turn \
       FROM candidates c JOIN batches b ON b.id = c.batch_id \
       WHERE b.status = 'in_progress'), \
     ranked AS (\
       SELECT batch_id, idx, free, project_id, project_served, \
         ROW_NUMBER() OVER (PARTITION BY project_id \
           ORDER BY free, key_turn, key_served, key_id) AS project_turn \
       FROM queued)";

/// The lines leased, with their batch's key, endpoint and creation (to
/// return them oldest batch first).
const LEASED: &str = "RETURNING batch_id, idx, custom_id, body, \
     (SELECT b.key_id FROM batches b WHERE b.id = batch_lines.batch_id) AS key_id, \
     (SELECT b.endpoint FROM batches b WHERE b.id = batch_lines.batch_id) AS endpoint, \
     (SELECT b.created_at FROM batches b WHERE b.id = batch_lines.batch_id) AS batch_created_at";
const RENEW: &str = "UPDATE batch_lines SET lease_until = $2 \
     WHERE lease_owner = $1 AND state = 'pending'";
/// `$1` the state (`ok`, `failed`), `$2` the output, `$5` its bytes. Only
/// a pending line of a batch still running (or cancelling, whose leased
/// lines may finish) is answered: once a batch is finalizing its files are
/// being written, and a late answer would be counted but in no file.
macro_rules! answer {
    () => {
        "UPDATE batch_lines \
         SET state = $1, output = $2, output_bytes = $5, lease_owner = NULL, lease_until = NULL \
         WHERE batch_id = $3 AND idx = $4 AND state = 'pending' \
         AND EXISTS (SELECT 1 FROM batches b \
                     WHERE b.id = $3 AND b.status IN ('in_progress', 'cancelling'))"
    };
}
/// [`answer!`], past any quota.
const ANSWER: &str = answer!();
/// [`answer!`], if the project's bytes and the answer's fit `$6`.
const ANSWER_WITHIN: &str = concat!(
    answer!(),
    " AND ",
    stored_bytes!("(SELECT b.project_id FROM batches b WHERE b.id = $3)"),
    " + $5 <= $6"
);
/// Whether line `$2` of batch `$1` could be answered (so that an answer
/// that was not, was past the quota).
const ANSWERABLE: &str = "SELECT COUNT(*) AS answerable FROM batch_lines l \
     WHERE l.batch_id = $1 AND l.idx = $2 AND l.state = 'pending' \
     AND EXISTS (SELECT 1 FROM batches b \
                 WHERE b.id = $1 AND b.status IN ('in_progress', 'cancelling'))";
/// `$2`: the answer's bytes.
const COUNT_OK: &str =
    "UPDATE batches SET completed = completed + 1, answer_bytes = answer_bytes + $2 WHERE id = $1";
const COUNT_FAILED: &str =
    "UPDATE batches SET failed = failed + 1, answer_bytes = answer_bytes + $2 WHERE id = $1";

/// Batches ready to end (`$1` now), oldest first, at most `$2`.
const READY: &str = concat!(
    "SELECT id, status, ",
    ready_to!(),
    " AS finish_to FROM batches \
     WHERE status IN ('validating', 'in_progress', 'cancelling', 'finalizing') \
     AND ",
    ready_to!(),
    " IS NOT NULL ORDER BY created_at, id LIMIT $2"
);
/// Takes batch `$5`, read in status `$6` and ready to go to `$4`, if it
/// still is (`$1` now, `$2` and `$3` the lease).
const TAKE: &str = concat!(
    "UPDATE batches SET status = 'finalizing', finalizing_at = COALESCE(finalizing_at, $1), \
     lease_owner = $2, lease_until = $3, finish_to = $4 \
     WHERE id = $5 AND status = $6 AND ",
    ready_to!(),
    " = $4 RETURNING ",
    batch_columns!()
);
/// Candidates [`READY`] reads at once: more than one, in case another
/// replica takes the first meanwhile.
const TAKE_CANDIDATES: i64 = 8;
/// The sizes of at most `$3` of batch `$1`'s answers after line `$2`
/// (lines answered before migration 0020 have no `output_bytes`).
const ANSWER_SIZES: &str = "SELECT idx, COALESCE(output_bytes, LENGTH(output), 0) AS size \
     FROM batch_lines WHERE batch_id = $1 AND idx > $2 ORDER BY idx LIMIT $3";
/// Batch `$1`'s lines from after `$2` to `$3`, with their answers.
const ANSWERS: &str = "SELECT idx, custom_id, state, output FROM batch_lines \
     WHERE batch_id = $1 AND idx > $2 AND idx <= $3 ORDER BY idx";
/// An ended batch's lines: its answers are its files now.
const DELETE_LINES: &str = "DELETE FROM batch_lines WHERE batch_id = $1";

/// Ended batches, with the files they name.
const SWEEP: &str = "DELETE FROM batches \
     WHERE status IN ('completed', 'failed', 'expired', 'cancelled') \
     AND COALESCE(completed_at, failed_at, expired_at, cancelled_at) < $1 \
     RETURNING id, input_file_id, output_file_id, error_file_id";
/// Lines of batches that ended before migration 0020 (which deletes them
/// when a batch ends).
const SWEEP_LINES: &str = DELETE_LINES;
const SWEEP_FILE: &str = "DELETE FROM files WHERE id = $1";
/// An input file goes with the last batch that names it.
const SWEEP_INPUT: &str = "DELETE FROM files WHERE id = $1 \
     AND NOT EXISTS (SELECT 1 FROM batches WHERE input_file_id = $1)";

/// A page of a project's files or batches, newest first (by `created_at`,
/// then `id`): at most `limit` of `table`'s rows after the one whose id is
/// `after`.
struct NewestFirst<'a> {
    table: &'static str,
    columns: &'static str,
    project: &'a ProjectId,
    after: Option<&'a str>,
    limit: i64,
}

impl SqlStore {
    /// `page`'s rows that also match `filter`'s clauses, each read by `read`.
    async fn newest_first<T>(
        &self,
        mut filter: Filter,
        page: &NewestFirst<'_>,
        read: fn(&AnyRow) -> Result<T, sqlx::Error>,
    ) -> Result<Vec<T>, StoreError> {
        let NewestFirst {
            table,
            columns,
            project,
            after,
            limit,
        } = *page;
        let project_place = filter.next(Value::Text(project.0.clone()));
        filter.clauses.push(format!("project_id = {project_place}"));
        if let Some(after) = after {
            let place = filter.next(Value::Text(after.to_owned()));
            filter.clauses.push(format!(
                "(created_at, id) < (SELECT created_at, id FROM {table} \
                 WHERE project_id = {project_place} AND id = {place})"
            ));
        }
        let limit_place = filter.next(Value::Int(limit.max(0)));
        let sql = filter.sql(
            &format!("SELECT {columns} FROM {table}"),
            &format!(" ORDER BY created_at DESC, id DESC LIMIT {limit_place}"),
        );
        let rows = filter
            .query(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?;
        rows.iter()
            .map(read)
            .collect::<Result<_, _>>()
            .map_err(query_error)
    }
}

fn file(row: &AnyRow) -> Result<FileRecord, sqlx::Error> {
    Ok(FileRecord {
        id: row.try_get("id")?,
        project_id: ProjectId(row.try_get("project_id")?),
        purpose: row.try_get("purpose")?,
        filename: row.try_get("filename")?,
        bytes: row.try_get("bytes")?,
        created_at: row.try_get("created_at")?,
    })
}

fn status(row: &AnyRow, column: &str) -> Result<BatchStatus, sqlx::Error> {
    let name: String = row.try_get(column)?;
    BatchStatus::parse(&name)
        .ok_or_else(|| unknown_value(column, UnknownValue::new("batch status", &name)))
}

fn batch(row: &AnyRow) -> Result<BatchRecord, sqlx::Error> {
    Ok(BatchRecord {
        id: row.try_get("id")?,
        project_id: ProjectId(row.try_get("project_id")?),
        key_id: KeyId(row.try_get("key_id")?),
        endpoint: row.try_get("endpoint")?,
        input_file_id: row.try_get("input_file_id")?,
        completion_window: row.try_get("completion_window")?,
        status: status(row, "status")?,
        output_file_id: row.try_get("output_file_id")?,
        error_file_id: row.try_get("error_file_id")?,
        errors: row.try_get("errors")?,
        metadata: row.try_get("metadata")?,
        total: row.try_get("total")?,
        completed: row.try_get("completed")?,
        failed: row.try_get("failed")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        in_progress_at: row.try_get("in_progress_at")?,
        finalizing_at: row.try_get("finalizing_at")?,
        completed_at: row.try_get("completed_at")?,
        failed_at: row.try_get("failed_at")?,
        expired_at: row.try_get("expired_at")?,
        cancelling_at: row.try_get("cancelling_at")?,
        cancelled_at: row.try_get("cancelled_at")?,
    })
}

/// A leased line and its batch's creation time.
fn leased(row: &AnyRow) -> Result<(i64, LeasedLine), sqlx::Error> {
    let created_at: i64 = row.try_get("batch_created_at")?;
    Ok((
        created_at,
        LeasedLine {
            batch_id: row.try_get("batch_id")?,
            key_id: KeyId(row.try_get("key_id")?),
            endpoint: row.try_get("endpoint")?,
            line: BatchLine {
                index: row.try_get("idx")?,
                custom_id: row.try_get("custom_id")?,
                body: row.try_get("body")?,
            },
        },
    ))
}

fn answered(row: &AnyRow) -> Result<AnsweredLine, sqlx::Error> {
    let state: String = row.try_get("state")?;
    let output: Option<String> = row.try_get("output")?;
    let answer = match state.as_str() {
        "pending" => None,
        "ok" | "failed" => Some((state == "ok", output.unwrap_or_default())),
        _ => {
            return Err(unknown_value(
                "state",
                UnknownValue::new("line state", &state),
            ));
        }
    };
    Ok(AnsweredLine {
        index: row.try_get("idx")?,
        custom_id: row.try_get("custom_id")?,
        answer,
    })
}

/// The column of a batch's end time for status `to`; an error for a status
/// that is no end.
fn end_column(to: BatchStatus) -> Result<&'static str, StoreError> {
    match to {
        BatchStatus::Completed => Ok("completed_at"),
        BatchStatus::Failed => Ok("failed_at"),
        BatchStatus::Expired => Ok("expired_at"),
        BatchStatus::Cancelled => Ok("cancelled_at"),
        other => Err(StoreError::Database(format!(
            "a batch cannot end as {}",
            other.as_str()
        ))),
    }
}

/// Which of a batch's files is its error file: by name.
fn is_error_file(file: &FileRecord) -> bool {
    file.filename.ends_with("_error.jsonl")
}

#[async_trait]
impl BatchStore for SqlStore {
    async fn insert_file(&self, file: &FileRecord, quota: i64) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        if self.backend == Backend::Postgres {
            // Under READ COMMITTED two uploads of one project would each
            // see the other's bytes missing from the sum, and pass the quota
            // together: one project's uploads are checked one at a time.
            // (SQLite runs one writer at a time.)
            sqlx::query(LOCK_PROJECT_FILES)
                .bind(file.project_id.0.as_str())
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
        }
        let done = sqlx::query(INSERT_FILE)
            .bind(file.id.as_str())
            .bind(file.project_id.0.as_str())
            .bind(file.purpose.as_str())
            .bind(file.filename.as_str())
            .bind(file.bytes)
            .bind(file.created_at)
            .bind(quota)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        tx.commit().await.map_err(query_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn file(&self, project: &ProjectId, id: &str) -> Result<Option<FileRecord>, StoreError> {
        let row = sqlx::query(FILE)
            .bind(project.0.as_str())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?;
        row.as_ref().map(file).transpose().map_err(query_error)
    }

    async fn list_files(
        &self,
        project: &ProjectId,
        purpose: Option<&str>,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<FileRecord>, StoreError> {
        let mut filter = Filter::default();
        if let Some(purpose) = purpose {
            let place = filter.next(Value::Text(purpose.to_owned()));
            filter.clauses.push(format!("purpose = {place}"));
        }
        let page = NewestFirst {
            table: "files",
            columns: file_columns!(),
            project,
            after,
            limit,
        };
        self.newest_first(filter, &page, file).await
    }

    async fn delete_file(&self, project: &ProjectId, id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(DELETE_FILE)
            .bind(project.0.as_str())
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn insert_batch(
        &self,
        batch: &BatchRecord,
        lines: &[BatchLine],
        limits: &BatchLimits,
    ) -> Result<Result<(), BatchRefused>, StoreError> {
        let needed = lines.iter().fold(0_i64, |sum, l| {
            sum.saturating_add(i64::try_from(l.custom_id.len() + l.body.len()).unwrap_or(i64::MAX))
        });
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        if self.backend == Backend::Postgres {
            // As for a file: one project's creates, uploads and answers are
            // checked one at a time.
            sqlx::query(LOCK_PROJECT_FILES)
                .bind(batch.project_id.0.as_str())
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
        }
        let done = sqlx::query(INSERT_BATCH)
            .bind(batch.id.as_str())
            .bind(batch.project_id.0.as_str())
            .bind(batch.key_id.0.as_str())
            .bind(batch.endpoint.as_str())
            .bind(batch.input_file_id.as_str())
            .bind(batch.completion_window.as_str())
            .bind(batch.status.as_str())
            .bind(batch.output_file_id.as_deref())
            .bind(batch.error_file_id.as_deref())
            .bind(batch.errors.as_deref())
            .bind(batch.metadata.as_deref())
            .bind(batch.total)
            .bind(batch.completed)
            .bind(batch.failed)
            .bind(batch.created_at)
            .bind(batch.expires_at)
            .bind(batch.in_progress_at)
            .bind(batch.finalizing_at)
            .bind(batch.completed_at)
            .bind(batch.failed_at)
            .bind(batch.expired_at)
            .bind(batch.cancelling_at)
            .bind(batch.cancelled_at)
            .bind(needed)
            .bind(limits.in_progress)
            .bind(limits.quota)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        if done.rows_affected() != 1 {
            let load = sqlx::query(PROJECT_LOAD)
                .bind(batch.project_id.0.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(query_error)?;
            let running: i64 = load.try_get("running").map_err(query_error)?;
            let used: i64 = load.try_get("used").map_err(query_error)?;
            return Ok(Err(if running >= limits.in_progress {
                BatchRefused::InProgress {
                    limit: limits.in_progress,
                }
            } else {
                BatchRefused::Quota {
                    used,
                    needed,
                    quota: limits.quota,
                }
            }));
        }
        match self.backend {
            Backend::Sqlite => insert_lines_as_json(&mut tx, &batch.id, lines).await?,
            Backend::Postgres => insert_lines_bound(&mut tx, &batch.id, lines).await?,
        }
        tx.commit().await.map_err(query_error)?;
        Ok(Ok(()))
    }

    async fn batch(
        &self,
        project: Option<&ProjectId>,
        id: &str,
    ) -> Result<Option<BatchRecord>, StoreError> {
        let query = match project {
            Some(project) => sqlx::query(PROJECT_BATCH).bind(id).bind(project.0.as_str()),
            None => sqlx::query(BATCH).bind(id),
        };
        let row = query
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?;
        row.as_ref().map(batch).transpose().map_err(query_error)
    }

    async fn list_batches(
        &self,
        project: &ProjectId,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<BatchRecord>, StoreError> {
        let page = NewestFirst {
            table: "batches",
            columns: batch_columns!(),
            project,
            after,
            limit,
        };
        self.newest_first(Filter::default(), &page, batch).await
    }

    async fn cancel_batch(
        &self,
        project: &ProjectId,
        id: &str,
        at: i64,
    ) -> Result<Option<BatchRecord>, StoreError> {
        sqlx::query(CANCEL)
            .bind(id)
            .bind(project.0.as_str())
            .bind(at)
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        self.batch(Some(project), id).await
    }

    /// The lines are ranked ([`RANKED`]), picked, then updated if still
    /// free; on PostgreSQL the rows picked are locked, and those another
    /// replica holds locked are passed over (SQLite runs one write at a
    /// time). Then the batches served are marked with a new turn, so that
    /// the next ties go to the others.
    async fn lease_lines(
        &self,
        lease: &Lease,
        now: i64,
        limit: i64,
    ) -> Result<Vec<LeasedLine>, StoreError> {
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        let rows = sqlx::query(&lease_sql(self.backend))
            .bind(lease.owner.as_str())
            .bind(lease.until)
            .bind(now)
            .bind(limit.max(0))
            .fetch_all(&mut *tx)
            .await
            .map_err(query_error)?;
        let mut lines = rows
            .iter()
            .map(leased)
            .collect::<Result<Vec<_>, _>>()
            .map_err(query_error)?;
        let mut served: Vec<&str> = lines.iter().map(|(_, l)| l.batch_id.as_str()).collect();
        served.sort_unstable();
        served.dedup();
        if !served.is_empty() {
            let places: Vec<String> = (1..=served.len()).map(|i| format!("${i}")).collect();
            // PostgreSQL: a batch row another transaction holds (a line's
            // answer counting on it) keeps its turn rather than wait.
            let lock = match self.backend {
                Backend::Sqlite => "",
                Backend::Postgres => " ORDER BY id FOR UPDATE SKIP LOCKED",
            };
            let sql = format!(
                "UPDATE batches SET turn = (SELECT COALESCE(MAX(turn), 0) + 1 FROM batches) \
                 WHERE id IN (SELECT id FROM batches WHERE id IN ({}){lock})",
                places.join(", ")
            );
            let mut statement = sqlx::query(&sql);
            for id in &served {
                statement = statement.bind(*id);
            }
            statement.execute(&mut *tx).await.map_err(query_error)?;
        }
        tx.commit().await.map_err(query_error)?;
        lines.sort_by(|(a_at, a), (b_at, b)| {
            (a_at, &a.batch_id, a.line.index).cmp(&(b_at, &b.batch_id, b.line.index))
        });
        Ok(lines.into_iter().map(|(_, line)| line).collect())
    }

    async fn renew_line_leases(&self, lease: &Lease) -> Result<(), StoreError> {
        sqlx::query(RENEW)
            .bind(lease.owner.as_str())
            .bind(lease.until)
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        Ok(())
    }

    /// Answers only a pending line of a batch that is `in_progress` or
    /// `cancelling`: a line of a batch already finalizing (its files being
    /// written) or ended is not answered, so that its counts match its
    /// files.
    async fn answer_line(
        &self,
        answer: &LineAnswer,
        quota: Option<i64>,
    ) -> Result<Answered, StoreError> {
        let (state, count) = if answer.ok {
            ("ok", COUNT_OK)
        } else {
            ("failed", COUNT_FAILED)
        };
        let bytes = i64::try_from(answer.output.len()).unwrap_or(i64::MAX);
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        if self.backend == Backend::Postgres {
            sqlx::query(LOCK_BATCH_PROJECT)
                .bind(answer.batch_id.as_str())
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
        }
        let statement = sqlx::query(if quota.is_some() {
            ANSWER_WITHIN
        } else {
            ANSWER
        })
        .bind(state)
        .bind(answer.output.as_str())
        .bind(answer.batch_id.as_str())
        .bind(answer.index)
        .bind(bytes);
        let statement = match quota {
            Some(quota) => statement.bind(quota),
            None => statement,
        };
        let done = statement.execute(&mut *tx).await.map_err(query_error)?;
        if done.rows_affected() != 1 {
            if quota.is_none() {
                return Ok(Answered::Not);
            }
            let answerable: i64 = sqlx::query_scalar(ANSWERABLE)
                .bind(answer.batch_id.as_str())
                .bind(answer.index)
                .fetch_one(&mut *tx)
                .await
                .map_err(query_error)?;
            return Ok(if answerable == 1 {
                Answered::PastQuota
            } else {
                Answered::Not
            });
        }
        sqlx::query(count)
            .bind(answer.batch_id.as_str())
            .bind(bytes)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        tx.commit().await.map_err(query_error)?;
        Ok(Answered::Written)
    }

    async fn stored_bytes(&self, project: &ProjectId) -> Result<i64, StoreError> {
        sqlx::query_scalar(STORED)
            .bind(project.0.as_str())
            .fetch_one(&self.pool)
            .await
            .map_err(query_error)
    }

    /// Of a batch past its expiry, the rules for a batch with no pending
    /// line (completed) or with none on a live lease (cancelled, when it
    /// was cancelling) come first: it expires only when lines it must run
    /// are left.
    async fn take_batch_to_finish(
        &self,
        lease: &Lease,
        now: i64,
    ) -> Result<Option<(BatchRecord, BatchStatus)>, StoreError> {
        let candidates = sqlx::query(READY)
            .bind(now)
            .bind(TAKE_CANDIDATES)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?;
        for candidate in &candidates {
            let (id, read, to) = candidate_parts(candidate).map_err(query_error)?;
            let row = sqlx::query(TAKE)
                .bind(now)
                .bind(lease.owner.as_str())
                .bind(lease.until)
                .bind(to.as_str())
                .bind(id.as_str())
                .bind(read.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(query_error)?;
            if let Some(row) = row {
                return Ok(Some((batch(&row).map_err(query_error)?, to)));
            }
        }
        Ok(None)
    }

    /// The sizes of the page's lines are read first (numbers only), then
    /// the lines that fit.
    async fn answers_page(
        &self,
        id: &str,
        after: Option<i64>,
        lines: i64,
        bytes: i64,
    ) -> Result<Vec<AnsweredLine>, StoreError> {
        let after = after.unwrap_or(-1);
        let sizes = sqlx::query(ANSWER_SIZES)
            .bind(id)
            .bind(after)
            .bind(lines.max(1))
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?;
        let mut last = None;
        let mut total = 0_i64;
        for row in &sizes {
            let index: i64 = row.try_get("idx").map_err(query_error)?;
            let size: i64 = row.try_get("size").map_err(query_error)?;
            if last.is_some() && total.saturating_add(size) > bytes {
                break;
            }
            total = total.saturating_add(size);
            last = Some(index);
        }
        let Some(last) = last else {
            return Ok(Vec::new());
        };
        let rows = sqlx::query(ANSWERS)
            .bind(id)
            .bind(after)
            .bind(last)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?;
        rows.iter()
            .map(answered)
            .collect::<Result<_, _>>()
            .map_err(query_error)
    }

    /// Of `files`, one whose filename ends in `_error.jsonl` becomes the
    /// batch's error file, any other its output file; all are recorded
    /// (once: a file already recorded is left as it is), outside any quota
    /// check. The batch stops counting its lines' copies and answers in the
    /// same transaction (it has ended), so that its answers count once,
    /// as its files: a project at its quota can still end its batches.
    async fn finish_batch(
        &self,
        id: &str,
        owner: &str,
        to: BatchStatus,
        at: i64,
        files: &[FileRecord],
    ) -> Result<bool, StoreError> {
        let column = end_column(to)?;
        let output = files
            .iter()
            .find(|f| !is_error_file(f))
            .map(|f| f.id.as_str());
        let error = files
            .iter()
            .find(|f| is_error_file(f))
            .map(|f| f.id.as_str());
        let sql = format!(
            "UPDATE batches SET status = $1, {column} = $2, \
             output_file_id = COALESCE($3, output_file_id), \
             error_file_id = COALESCE($4, error_file_id), \
             lease_owner = NULL, lease_until = NULL, finish_to = NULL \
             WHERE id = $5 AND status = 'finalizing' AND lease_owner = $6"
        );
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        let done = sqlx::query(&sql)
            .bind(to.as_str())
            .bind(at)
            .bind(output)
            .bind(error)
            .bind(id)
            .bind(owner)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        for file in files {
            sqlx::query(RECORD_FILE)
                .bind(file.id.as_str())
                .bind(file.project_id.0.as_str())
                .bind(file.purpose.as_str())
                .bind(file.filename.as_str())
                .bind(file.bytes)
                .bind(file.created_at)
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
        }
        sqlx::query(DELETE_LINES)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        tx.commit().await.map_err(query_error)?;
        Ok(true)
    }

    /// The ids returned are those of the records deleted: an input file
    /// that a batch not swept also names is kept (it goes with the last).
    async fn sweep_batches(&self, before: i64) -> Result<Vec<String>, StoreError> {
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        let swept = sqlx::query(SWEEP)
            .bind(before)
            .fetch_all(&mut *tx)
            .await
            .map_err(query_error)?;
        let mut deleted = Vec::new();
        for row in &swept {
            let (id, input, outputs) = swept_parts(row).map_err(query_error)?;
            sqlx::query(SWEEP_LINES)
                .bind(id.as_str())
                .execute(&mut *tx)
                .await
                .map_err(query_error)?;
            let files = std::iter::once((SWEEP_INPUT, input))
                .chain(outputs.into_iter().flatten().map(|f| (SWEEP_FILE, f)));
            for (sql, file) in files {
                let done = sqlx::query(sql)
                    .bind(file.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(query_error)?;
                if done.rows_affected() == 1 {
                    deleted.push(file);
                }
            }
        }
        tx.commit().await.map_err(query_error)?;
        Ok(deleted)
    }
}

/// A [`READY`] row: the batch's id, the status it was read in, where it
/// goes.
fn candidate_parts(row: &AnyRow) -> Result<(String, BatchStatus, BatchStatus), sqlx::Error> {
    Ok((
        row.try_get("id")?,
        status(row, "status")?,
        status(row, "finish_to")?,
    ))
}

/// A [`SWEEP`] row: the batch's id, its input file, its output and error
/// files.
fn swept_parts(row: &AnyRow) -> Result<(String, String, [Option<String>; 2]), sqlx::Error> {
    Ok((
        row.try_get("id")?,
        row.try_get("input_file_id")?,
        [
            row.try_get("output_file_id")?,
            row.try_get("error_file_id")?,
        ],
    ))
}

/// Takes lines for a lease (`$1` owner, `$2` until, `$3` now, `$4` at
/// most): the first free lines in [`RANKED`]'s turns, if still free.
fn lease_sql(backend: Backend) -> String {
    let (candidates, lock) = match backend {
        Backend::Sqlite => (CANDIDATES_SQLITE, ""),
        Backend::Postgres => (CANDIDATES_POSTGRES, " FOR UPDATE OF l SKIP LOCKED"),
    };
    format!(
        "{candidates}{RANKED}, picked AS (\
           SELECT l.batch_id, l.idx FROM batch_lines l \
           JOIN ranked r ON r.batch_id = l.batch_id AND r.idx = l.idx \
           WHERE r.free = 1 \
           ORDER BY r.project_turn, r.project_served, r.project_id, r.batch_id, r.idx \
           LIMIT $4{lock}) \
         UPDATE batch_lines SET lease_owner = $1, lease_until = $2 \
         WHERE (batch_id, idx) IN (SELECT batch_id, idx FROM picked) \
         AND state = 'pending' AND (lease_until IS NULL OR lease_until < $3) {LEASED}"
    )
}

/// PostgreSQL: multi-row `INSERT`s of [`LINES_PER_STATEMENT`] lines, every
/// value bound.
async fn insert_lines_bound(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    batch_id: &str,
    lines: &[BatchLine],
) -> Result<(), StoreError> {
    for chunk in lines.chunks(LINES_PER_STATEMENT) {
        let places: Vec<String> = (0..chunk.len())
            .map(|r| {
                let first = 2 + r * LINE_WIDTH;
                format!("($1, ${}, ${}, ${})", first, first + 1, first + 2)
            })
            .collect();
        let sql = format!(
            "INSERT INTO batch_lines (batch_id, idx, custom_id, body) VALUES {}",
            places.join(", ")
        );
        let mut statement = sqlx::query(&sql).bind(batch_id);
        for line in chunk {
            statement = statement
                .bind(line.index)
                .bind(line.custom_id.as_str())
                .bind(line.body.as_str());
        }
        statement.execute(&mut **tx).await.map_err(query_error)?;
    }
    Ok(())
}

/// SQLite: the lines as bound JSON arrays of arrays, unpacked by
/// `json_each`, [`LINES_PER_STATEMENT`] times 4 lines a statement (sqlx's
/// SQLite driver pays per bound value, SQLite's JSON parser hardly; see
/// `request_logs.rs`).
async fn insert_lines_as_json(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    batch_id: &str,
    lines: &[BatchLine],
) -> Result<(), StoreError> {
    const SQL: &str = "INSERT INTO batch_lines (batch_id, idx, custom_id, body) \
         SELECT $1, value ->> 0, value ->> 1, value ->> 2 FROM json_each($2)";
    for chunk in lines.chunks(LINES_PER_STATEMENT * 4) {
        let values: Vec<serde_json::Value> = chunk
            .iter()
            .map(|l| serde_json::json!([l.index, l.custom_id, l.body]))
            .collect();
        let json =
            serde_json::to_string(&values).map_err(|e| StoreError::Database(e.to_string()))?;
        sqlx::query(SQL)
            .bind(batch_id)
            .bind(json)
            .execute(&mut **tx)
            .await
            .map_err(query_error)?;
    }
    Ok(())
}
