//! The runner: on every replica, takes a few lines of running batches on a
//! lease, sends each through the service's own router as the batch's key,
//! and writes its answer once; ends the batches that are done (writing
//! their output and error files), cancelled or expired. [`sweep`] deletes
//! ended batches past their retention, in the server's hourly sweep.
//!
//! A replica that stops (even with `kill -9`) leaves its lines on leases
//! that run out; another replica, or this one started again, takes them
//! then. A line answered twice that way is written once: the first answer
//! wins ([`svc_core::batch::BatchStore::answer_line`]).
//!
//! Answers count toward their project's quota of file bytes as they are
//! written: an answer that would pass it is not kept, and the line fails
//! with an error line that names the quota (`quota_exceeded`). A batch is
//! ended by reading its answers a page at a time ([`PAGE_LINES`],
//! [`PAGE_BYTES`]) and writing them to its files as they come, so that
//! ending a batch holds one page in memory, not its answers.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, header};
use sha2::{Digest, Sha256};
use svc_api::batches::{BatchLineError, BatchOutputLine, BatchResponse};
use svc_core::batch::{
    Answered, BatchRecord, BatchStatus, FileRecord, Lease, LeasedLine, LineAnswer,
};
use svc_core::{StoreError, now};
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::responses::shape::new_id;
use crate::state::AppState;

/// How often a replica looks for work when nothing wakes it (another
/// replica's new batch, leases that ran out).
const POLL: Duration = Duration::from_secs(1);

/// The largest answer kept for one line.
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// Lines read at once when a batch ends.
const PAGE_LINES: i64 = 256;
/// Bytes of answers read at once when a batch ends (past it, a page ends
/// early; a page holds one line, however long).
const PAGE_BYTES: i64 = 4 * 1024 * 1024;

/// One replica's runner.
pub(crate) struct Runner {
    state: AppState,
    router: Router,
    /// This replica's name on its leases.
    owner: String,
}

impl Runner {
    /// A runner that sends lines through `router` (the service's, with its
    /// layers).
    pub(crate) fn new(state: AppState, router: Router) -> Self {
        Runner {
            state,
            router,
            owner: format!(
                "{}-{}",
                std::process::id(),
                hex::encode(rand::random::<[u8; 6]>())
            ),
        }
    }

    fn lease(&self) -> Lease {
        let seconds = i64::try_from(self.state.batches.lease.as_secs()).unwrap_or(i64::MAX);
        Lease {
            owner: self.owner.clone(),
            until: now().saturating_add(seconds.max(1)),
        }
    }

    /// Runs until `stop`; lines still running then are left to their
    /// leases.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let batches = self.state.batches.clone();
        let store = self.state.store.clone();
        let mut running: JoinSet<()> = JoinSet::new();
        let mut renew = tokio::time::interval((batches.lease / 3).max(Duration::from_millis(100)));
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.finish_ready().await;
            let free = batches.concurrency.saturating_sub(running.len());
            if free > 0 {
                match store
                    .lease_lines(&self.lease(), now(), i64::try_from(free).unwrap_or(1))
                    .await
                {
                    Ok(lines) => {
                        for line in lines {
                            running.spawn(answer(self.state.clone(), self.router.clone(), line));
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot take batch lines"),
                }
            }
            tokio::select! {
                () = batches.wake.notified() => {}
                Some(_) = running.join_next(), if !running.is_empty() => {}
                _ = renew.tick() => {
                    if !running.is_empty()
                        && let Err(e) = store.renew_line_leases(&self.lease()).await
                    {
                        tracing::warn!(error = %e, "cannot renew the leases of batch lines");
                    }
                }
                () = tokio::time::sleep(POLL) => {}
                () = stop.cancelled() => break,
            }
        }
        running.abort_all();
    }

    /// Ends every batch that is ready to.
    async fn finish_ready(&self) {
        loop {
            match self
                .state
                .store
                .take_batch_to_finish(&self.lease(), now())
                .await
            {
                Ok(Some((batch, to))) => {
                    if let Err(e) = self.finish(&batch, to).await {
                        tracing::warn!(batch = %batch.id, error = %e, "cannot end a batch; it is taken again when its lease runs out");
                        return;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot look for batches to end");
                    return;
                }
            }
        }
    }

    /// Writes `batch`'s output and error files and ends it as `to`: its
    /// answers are read a page at a time and written as they come.
    async fn finish(&self, batch: &BatchRecord, to: BatchStatus) -> Result<(), StoreError> {
        let (mut output, mut errors) = (None, None);
        let mut after = None;
        loop {
            let page = self
                .state
                .store
                .answers_page(&batch.id, after, PAGE_LINES, PAGE_BYTES)
                .await?;
            let Some(last) = page.last() else {
                break;
            };
            after = Some(last.index);
            for line in page {
                let (file, kind, text) = match line.answer {
                    Some((true, text)) => (&mut output, "output", text),
                    Some((false, text)) => (&mut errors, "error", text),
                    None => (&mut errors, "error", unanswered(&line.custom_id, to)),
                };
                let file = match file {
                    Some(file) => file,
                    None => file.insert(self.open(batch, kind).await?),
                };
                file.line(&text).await?;
            }
        }
        let mut files = Vec::new();
        for file in [output, errors].into_iter().flatten() {
            files.push(file.close(batch).await?);
        }
        let ended = self
            .state
            .store
            .finish_batch(&batch.id, &self.owner, to, now(), &files)
            .await?;
        if ended {
            tracing::info!(batch = %batch.id, status = to.as_str(), "batch ended");
        }
        Ok(())
    }

    /// Starts one of `batch`'s files (`kind`: `output` or `error`), under an
    /// id made from the batch's, so a replica ending it again writes the
    /// same file; it is written to a temporary file of this replica's and
    /// renamed into place when closed.
    async fn open(&self, batch: &BatchRecord, kind: &'static str) -> Result<Writing, StoreError> {
        let digest = Sha256::digest(format!("{kind}:{}", batch.id));
        let id = format!("file-{}", &hex::encode(digest)[..24]);
        let dir = &self.state.batches.dir;
        let path = self
            .state
            .batches
            .path(&id)
            .ok_or_else(|| StoreError::Unavailable(format!("{id} names no path")))?;
        crate::state::files::remake_dir(dir).map_err(|e| write_failed(&id, &e))?;
        let temporary = dir.join(format!(".write-{id}-{}", self.owner));
        let file = tokio::fs::File::create(&temporary)
            .await
            .map_err(|e| write_failed(&id, &e))?;
        Ok(Writing {
            id,
            kind,
            temporary,
            path,
            file: tokio::io::BufWriter::new(file),
            bytes: 0,
        })
    }

    /// How files are kept and batches run, for the server's hourly sweep.
    pub(crate) fn settings(&self) -> Arc<crate::state::files::Batches> {
        self.state.batches.clone()
    }
}

/// One of a batch's files, being written.
struct Writing {
    id: String,
    kind: &'static str,
    temporary: std::path::PathBuf,
    path: std::path::PathBuf,
    file: tokio::io::BufWriter<tokio::fs::File>,
    bytes: usize,
}

impl Writing {
    /// Adds a line (`text` and a newline).
    async fn line(&mut self, text: &str) -> Result<(), StoreError> {
        let id = &self.id;
        self.file
            .write_all(text.as_bytes())
            .await
            .map_err(|e| write_failed(id, &e))?;
        self.file
            .write_all(b"\n")
            .await
            .map_err(|e| write_failed(id, &e))?;
        self.bytes = self.bytes.saturating_add(text.len() + 1);
        Ok(())
    }

    /// Puts the file in place: its record, to keep with the batch's end.
    async fn close(mut self, batch: &BatchRecord) -> Result<FileRecord, StoreError> {
        let id = self.id;
        self.file.flush().await.map_err(|e| write_failed(&id, &e))?;
        drop(self.file);
        tokio::fs::rename(&self.temporary, &self.path)
            .await
            .map_err(|e| write_failed(&id, &e))?;
        Ok(FileRecord {
            id,
            project_id: batch.project_id.clone(),
            purpose: "batch_output".into(),
            filename: format!("{}_{}.jsonl", batch.id, self.kind),
            bytes: i64::try_from(self.bytes).unwrap_or(i64::MAX),
            created_at: now(),
        })
    }
}

fn write_failed(id: &str, e: &std::io::Error) -> StoreError {
    StoreError::Unavailable(format!("cannot write {id}: {e}"))
}

/// Deletes ended batches past their retention, and their files (the
/// server's hourly sweep calls it).
pub(crate) async fn sweep(store: &dyn svc_core::Store, batches: &crate::state::files::Batches) {
    let kept = i64::try_from(batches.retention.as_secs()).unwrap_or(i64::MAX);
    match store.sweep_batches(now().saturating_sub(kept)).await {
        Ok(files) => {
            for id in files {
                if let Some(path) = batches.path(&id) {
                    let _ = tokio::fs::remove_file(path).await;
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot delete old batches"),
    }
}

/// Runs one line through `router` as its batch's key and writes its answer,
/// within the project's quota: an answer past it is not kept, and the line
/// fails with an error line that names the quota instead (kept past it:
/// it is a few hundred bytes, and every line is answered).
async fn answer(state: AppState, router: Router, line: LeasedLine) {
    let (ok, output) = ask(router, &line).await;
    let mut answer = LineAnswer {
        batch_id: line.batch_id.clone(),
        index: line.line.index,
        ok,
        output,
    };
    let quota = i64::try_from(state.batches.quota_bytes).unwrap_or(i64::MAX);
    let mut within = Some(quota);
    // A store that fails now may answer in a moment; else the lease runs
    // out and the line runs again.
    let mut attempt = 0;
    while attempt < 3 {
        match state.store.answer_line(&answer, within).await {
            Ok(Answered::PastQuota) => {
                let bytes = answer.output.len();
                answer.ok = false;
                answer.output = past_quota(&line.line.custom_id, bytes, quota);
                within = None;
            }
            Ok(_) => return,
            Err(e) if attempt == 2 => {
                tracing::warn!(batch = %line.batch_id, line = line.line.index, error = %e, "cannot write a batch line's answer");
                return;
            }
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// The error line of a line whose answer (`bytes`) would have taken its
/// project past its quota.
fn past_quota(custom_id: &str, bytes: usize, quota: i64) -> String {
    error_line(
        custom_id,
        "quota_exceeded",
        format!(
            "This request's answer ({bytes} bytes) was not kept: it would take the project's \
             files and batch answers past its quota of {quota} bytes (files_quota_bytes). \
             Delete files to make room."
        ),
    )
}

/// The line's request, answered: whether with a 2xx, and its output line.
async fn ask(router: Router, line: &LeasedLine) -> (bool, String) {
    let request = Request::builder()
        .method(Method::POST)
        .uri(line.endpoint.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(line.line.body.clone()));
    let reply = crate::scoped::as_batch_line(line.key_id.clone(), async move {
        let request = request.map_err(|e| e.to_string())?;
        let Ok::<_, Infallible>(response) = router.oneshot(request).await;
        let status = response.status();
        let request_id = response
            .headers()
            .get(crate::request_id::HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = axum::body::to_bytes(response.into_body(), MAX_ANSWER)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((status, request_id, body))
    })
    .await;
    let id = new_id("batch_req");
    let (ok, response) = match reply {
        Ok((status, request_id, body)) => (
            status.is_success(),
            BatchResponse {
                status_code: status.as_u16(),
                request_id,
                body: serde_json::from_slice(&body).unwrap_or_else(|_| {
                    serde_json::Value::String(String::from_utf8_lossy(&body).into_owned())
                }),
            },
        ),
        Err(e) => (
            false,
            BatchResponse {
                status_code: 500,
                request_id: String::new(),
                body: serde_json::json!({"error": {"message": format!("the line could not be answered: {e}"), "type": "server_error", "param": null, "code": null}}),
            },
        ),
    };
    let line = BatchOutputLine {
        id,
        custom_id: line.line.custom_id.clone(),
        response: Some(response),
        error: None,
    };
    (ok, serde_json::to_string(&line).unwrap_or_default())
}

/// The error line of a line that never ran: its batch was cancelled or
/// expired first.
fn unanswered(custom_id: &str, to: BatchStatus) -> String {
    let (code, message) = match to {
        BatchStatus::Expired => (
            "batch_expired",
            "This request could not be executed before the completion window expired.",
        ),
        _ => (
            "batch_cancelled",
            "This request was not executed: the batch was cancelled.",
        ),
    };
    error_line(custom_id, code, message.into())
}

/// A line of the error file for a line that has no answer of its own:
/// OpenAI's `error` object with `code` and `message`.
fn error_line(custom_id: &str, code: &str, message: String) -> String {
    let line = BatchOutputLine {
        id: new_id("batch_req"),
        custom_id: custom_id.to_owned(),
        response: None,
        error: Some(BatchLineError {
            code: code.into(),
            message,
        }),
    };
    serde_json::to_string(&line).unwrap_or_default()
}
