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

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, header};
use sha2::{Digest, Sha256};
use svc_api::batches::{BatchLineError, BatchOutputLine, BatchResponse};
use svc_core::batch::{BatchRecord, BatchStatus, FileRecord, Lease, LeasedLine, LineAnswer};
use svc_core::{StoreError, now};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::CALLER;
use crate::responses::shape::new_id;
use crate::state::AppState;

/// How often a replica looks for work when nothing wakes it (another
/// replica's new batch, leases that ran out).
const POLL: Duration = Duration::from_secs(1);

/// The largest answer kept for one line.
const MAX_ANSWER: usize = 64 * 1024 * 1024;

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

    /// Writes `batch`'s output and error files and ends it as `to`.
    async fn finish(&self, batch: &BatchRecord, to: BatchStatus) -> Result<(), StoreError> {
        let lines = self.state.store.batch_answers(&batch.id).await?;
        let (mut output, mut errors) = (Vec::new(), Vec::new());
        for line in lines {
            match line.answer {
                Some((true, text)) => output.push(text),
                Some((false, text)) => errors.push(text),
                None => errors.push(unanswered(&line.custom_id, to)),
            }
        }
        let mut files = Vec::new();
        for (kind, lines) in [("output", output), ("error", errors)] {
            if !lines.is_empty() {
                files.push(self.write(batch, kind, &lines).await?);
            }
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

    /// Writes one of `batch`'s files (`kind`: `output` or `error`), under an
    /// id made from the batch's, so a replica ending it again writes the
    /// same file.
    async fn write(
        &self,
        batch: &BatchRecord,
        kind: &str,
        lines: &[String],
    ) -> Result<FileRecord, StoreError> {
        let digest = Sha256::digest(format!("{kind}:{}", batch.id));
        let id = format!("file-{}", &hex::encode(digest)[..24]);
        let failed = |e: std::io::Error| StoreError::Unavailable(format!("cannot write {id}: {e}"));
        let dir = &self.state.batches.dir;
        let path = self
            .state
            .batches
            .path(&id)
            .ok_or_else(|| StoreError::Unavailable(format!("{id} names no path")))?;
        let mut text = lines.join("\n");
        text.push('\n');
        tokio::fs::create_dir_all(dir).await.map_err(failed)?;
        let temporary = dir.join(format!(".write-{id}-{}", self.owner));
        tokio::fs::write(&temporary, text.as_bytes())
            .await
            .map_err(failed)?;
        tokio::fs::rename(&temporary, &path).await.map_err(failed)?;
        Ok(FileRecord {
            id,
            project_id: batch.project_id.clone(),
            purpose: "batch_output".into(),
            filename: format!("{}_{kind}.jsonl", batch.id),
            bytes: i64::try_from(text.len()).unwrap_or(i64::MAX),
            created_at: now(),
        })
    }

    /// How files are kept and batches run, for the server's hourly sweep.
    pub(crate) fn settings(&self) -> Arc<super::Batches> {
        self.state.batches.clone()
    }
}

/// Deletes ended batches past their retention, and their files (the
/// server's hourly sweep calls it).
pub(crate) async fn sweep(store: &dyn svc_core::Store, batches: &super::Batches) {
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

/// Runs one line through `router` as its batch's key and writes its answer.
async fn answer(state: AppState, router: Router, line: LeasedLine) {
    let (ok, output) = ask(router, &line).await;
    let answer = LineAnswer {
        batch_id: line.batch_id.clone(),
        index: line.line.index,
        ok,
        output,
    };
    // A store that fails now may answer in a moment; else the lease runs
    // out and the line runs again.
    for attempt in 0..3 {
        match state.store.answer_line(&answer).await {
            Ok(_) => return,
            Err(e) if attempt == 2 => {
                tracing::warn!(batch = %line.batch_id, line = line.line.index, error = %e, "cannot write a batch line's answer");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// The line's request, answered: whether with a 2xx, and its output line.
async fn ask(router: Router, line: &LeasedLine) -> (bool, String) {
    let request = Request::builder()
        .method(Method::POST)
        .uri(line.endpoint.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(line.line.body.clone()));
    let reply = CALLER
        .scope(line.key_id.clone(), async move {
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
    let line = BatchOutputLine {
        id: new_id("batch_req"),
        custom_id: custom_id.to_owned(),
        response: None,
        error: Some(BatchLineError {
            code: code.into(),
            message: message.into(),
        }),
    };
    serde_json::to_string(&line).unwrap_or_default()
}
