//! `/v1/batches`: create a batch from an uploaded file, read, list and
//! cancel a project's batches. Creating one copies the file's lines into
//! the store (where every replica's runner finds them) and wakes the
//! runner.
//!
//! One file can back many batches, and each copies its lines: a project
//! has at most [`BATCHES_IN_PROGRESS`] batches that have not ended, and the
//! copy counts toward its quota while the batch runs (both decided by the
//! store, atomically). The file is read a line at a time, and at most
//! [`CREATES_AT_ONCE`](super::CREATES_AT_ONCE) creates read and copy at once, so that creates hold
//! at most that many files' lines in memory.

use std::collections::BTreeMap;

use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use svc_api::batches::{Batch, BatchErrors, BatchList, CreateBatchRequest, RequestCounts};
use svc_core::batch::{BatchLimits, BatchLine, BatchRecord, BatchRefused, BatchStatus};
use svc_core::{ValidationError, now};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::lines;
use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::extract::{ApiJson, Key, scope};
use crate::openapi::shared;
use crate::pipeline::json_response;
use crate::routes::organization::page;
use crate::state::AppState;

/// What this endpoint is: its OpenAPI group, its paths and dialect, and
/// what batches and the response cache make of it.
pub(crate) const ENDPOINT: Endpoint = Endpoint::new(
    "batches",
    "The Batch API: a file of requests run in the background, at the model's batch price, with their answers and errors as files.",
)
.paths(&["/v1/batches"]);

/// How long a batch may take: OpenAI's only window.
const WINDOW: &str = "24h";
const WINDOW_SECONDS: i64 = 86_400;

/// The most batches of one project that have not ended (more are refused
/// until one ends).
pub(crate) const BATCHES_IN_PROGRESS: i64 = 16;

pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(retrieve))
        .routes(routes!(cancel))
}

crate::openapi::parameters! {
    /// A batch of `/v1/batches/{batch_id}`.
    BatchPath {
        ("batch_id", Path, true, "The id of a batch (`batch_...`).", {"type": "string"}),
    }
    /// `GET /v1/batches`'s query.
    BatchQuery {
        ("limit", Query, false, "At most this many (1 to 100; default 20).", {"type": "integer", "minimum": 1, "maximum": 100}),
        ("after", Query, false, "The batches listed after this one (a batch id).", {"type": "string"}),
    }
}

#[utoipa::path(post, path = "/v1/batches", tag = "batches", operation_id = "createBatch",
    summary = "Create a batch: run every request of an uploaded file, at low priority, within 24 hours.",
    description = "Each line of `input_file_id` is sent to `endpoint` (every line's `url` must be it) as the key that creates the batch: its scopes, models and budgets apply, not its per-minute limits. Lines run at low priority: the embedded engine gives them only slots that interactive requests leave free. Each line is answered once, by its `custom_id`, in the output file (2xx) or the error file; the work survives restarts and is shared by replicas. Lines are taken in turns across projects and keys. A project has at most 16 batches in progress, and a running batch's copy of its lines and its answers count against the project's quota of file bytes (`files_quota_bytes`): a create past either is a 400 naming `input_file_id`, and an answer past the quota fails its line (`quota_exceeded`).",
    security(("bearer" = ["api.batch.write"])),
    request_body = CreateBatchRequest,
    responses(
        (status = 200, description = "The batch, `in_progress`.", body = Batch),
        (status = 400, response = shared::BadRequest),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 404, description = "No file of this project has the id `input_file_id` (`code` `not_found`).", body = svc_api::ErrorBody),
        (status = 413, response = shared::PayloadTooLarge),
        (status = 500, response = shared::InternalServerError),
        (status = 503, response = shared::ServiceUnavailable),
    ))]
pub async fn create(
    Key(key, _): Key<scope::BatchWrite>,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateBatchRequest>,
) -> Result<Response, ApiError> {
    let callable = &state.batches.callable;
    if !callable.contains(&body.endpoint.as_str()) {
        return Err(ValidationError::new(
            "endpoint",
            format!(
                "endpoint must be one of {}, not `{}`",
                callable.join(", "),
                body.endpoint
            ),
        )
        .into());
    }
    if body.completion_window != WINDOW {
        return Err(ValidationError::new(
            "completion_window",
            format!("completion_window must be `{WINDOW}`"),
        )
        .into());
    }
    check_metadata(body.metadata.as_ref())?;
    let file = super::files::find(&state, &key, &body.input_file_id)
        .await
        .map_err(|e| match e {
            ApiError::NotFound { message, .. } => ApiError::NotFound {
                param: Some("input_file_id".into()),
                message,
            },
            e => e,
        })?;
    if file.purpose != "batch" {
        return Err(ValidationError::new(
            "input_file_id",
            format!(
                "file {} has purpose `{}`, not `batch`",
                file.id, file.purpose
            ),
        )
        .into());
    }
    let path = state
        .batches
        .path(&file.id)
        .ok_or_else(|| ApiError::Internal("a file id that names no path".into()))?;
    let _creating = state
        .batches
        .creates
        .acquire()
        .await
        .map_err(|e| ApiError::Internal(format!("the creates' turns are closed: {e}")))?;
    let endpoint = body.endpoint.clone();
    let input = tokio::task::spawn_blocking(move || read_lines(&path, &endpoint))
        .await
        .map_err(|e| ApiError::Internal(format!("reading the lines stopped: {e}")))?;
    let input = match input {
        Ok(input) => input,
        Err(Unread::Io(e)) => {
            return Err(ApiError::Internal(format!(
                "cannot read file {} ({e}): replicas must share files_dir",
                file.id
            )));
        }
        Err(Unread::Line(e)) => {
            return Err(ValidationError::new("input_file_id", e.to_string()).into());
        }
    };
    let at = now();
    let record = BatchRecord {
        id: BatchRecord::generate_id(),
        project_id: key.project_id.clone(),
        key_id: key.id.clone(),
        endpoint: body.endpoint,
        input_file_id: file.id,
        completion_window: body.completion_window,
        status: BatchStatus::InProgress,
        output_file_id: None,
        error_file_id: None,
        errors: None,
        metadata: body
            .metadata
            .map(|m| serde_json::to_string(&m).unwrap_or_default()),
        total: i64::try_from(input.len()).unwrap_or(i64::MAX),
        completed: 0,
        failed: 0,
        created_at: at,
        expires_at: at + WINDOW_SECONDS,
        in_progress_at: Some(at),
        finalizing_at: None,
        completed_at: None,
        failed_at: None,
        expired_at: None,
        cancelling_at: None,
        cancelled_at: None,
    };
    let limits = BatchLimits {
        in_progress: BATCHES_IN_PROGRESS,
        quota: i64::try_from(state.batches.quota_bytes).unwrap_or(i64::MAX),
    };
    match state.store.insert_batch(&record, &input, &limits).await? {
        Ok(()) => {}
        Err(BatchRefused::InProgress { limit }) => {
            return Err(ValidationError::new(
                "input_file_id",
                format!(
                    "the project has {limit} batches in progress, the most it may have; \
                     wait for one to end, or cancel one"
                ),
            )
            .into());
        }
        Err(BatchRefused::Quota {
            used,
            needed,
            quota,
        }) => {
            return Err(ValidationError::new(
                "input_file_id",
                format!(
                    "this batch's copy of the file's lines ({needed} bytes) would take the \
                     project's files and batches ({used} bytes) past its quota of {quota} \
                     bytes; delete files first"
                ),
            )
            .into());
        }
    }
    drop(input);
    super::files::audit(&state, &key, "batch.created", &record.id).await;
    state.batches.wake.notify_one();
    Ok(json_response(&shape(&record)))
}

/// Why a file's lines were not read.
enum Unread {
    Io(std::io::Error),
    Line(lines::LineError),
}

/// The requests of the file at `path`, each to `endpoint`, read a line at a
/// time (the file is never in memory whole); the first line that is not,
/// named.
fn read_lines(path: &std::path::Path, endpoint: &str) -> Result<Vec<BatchLine>, Unread> {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(std::fs::File::open(path).map_err(Unread::Io)?);
    let mut out = Vec::new();
    let mut line = Vec::new();
    let mut at = 0_usize;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(Unread::Io)? == 0 {
            break;
        }
        at += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let error = |message: String| Unread::Line(lines::LineError { line: at, message });
        let request = lines::parse(&line, &[endpoint]).map_err(error)?;
        if request.url != endpoint {
            return Err(error(format!(
                "url `{}` is not the batch's endpoint `{endpoint}`",
                request.url
            )));
        }
        out.push(BatchLine {
            index: i64::try_from(out.len()).unwrap_or(i64::MAX),
            custom_id: request.custom_id,
            body: serde_json::Value::Object(request.body).to_string(),
        });
    }
    Ok(out)
}

/// OpenAI's bounds: 16 pairs, keys of 64 characters, values of 512.
fn check_metadata(metadata: Option<&BTreeMap<String, String>>) -> Result<(), ApiError> {
    let Some(metadata) = metadata else {
        return Ok(());
    };
    if metadata.len() > 16 {
        return Err(ValidationError::new("metadata", "metadata holds at most 16 pairs").into());
    }
    if let Some((k, _)) = metadata
        .iter()
        .find(|(k, v)| k.chars().count() > 64 || v.chars().count() > 512)
    {
        return Err(ValidationError::new(
            format!("metadata.{k}"),
            "metadata keys have at most 64 characters, values at most 512",
        )
        .into());
    }
    Ok(())
}

#[utoipa::path(get, path = "/v1/batches", tag = "batches", operation_id = "listBatches",
    summary = "The project's batches, newest first.",
    security(("bearer" = ["api.batch.read"])),
    params(BatchQuery),
    responses(
        (status = 200, description = "The batches.", body = BatchList),
        (status = 400, response = shared::BadRequest),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 500, response = shared::InternalServerError),
        (status = 503, response = shared::ServiceUnavailable),
    ))]
pub async fn list(
    Key(key, _): Key<scope::BatchRead>,
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let page = page(query.as_deref())?;
    let batches = state
        .store
        .list_batches(&key.project_id, page.after.as_deref(), page.read_limit())
        .await?;
    let (batches, has_more) = page.cut(batches);
    let data: Vec<Batch> = batches.iter().map(shape).collect();
    Ok(json_response(&BatchList {
        object: "list".into(),
        first_id: data.first().map(|b| b.id.clone()),
        last_id: data.last().map(|b| b.id.clone()),
        has_more,
        data,
    }))
}

#[utoipa::path(get, path = "/v1/batches/{batch_id}", tag = "batches", operation_id = "retrieveBatch",
    summary = "A batch of the project: its status, counts and files.",
    security(("bearer" = ["api.batch.read"])),
    params(BatchPath),
    responses(
        (status = 200, description = "The batch.", body = Batch),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 404, description = "No batch of this project has this id (`code` `not_found`).", body = svc_api::ErrorBody),
        (status = 500, response = shared::InternalServerError),
        (status = 503, response = shared::ServiceUnavailable),
    ))]
pub async fn retrieve(
    Key(key, _): Key<scope::BatchRead>,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let batch = state
        .store
        .batch(Some(&key.project_id), &id)
        .await?
        .ok_or_else(|| not_found(&id))?;
    Ok(json_response(&shape(&batch)))
}

#[utoipa::path(post, path = "/v1/batches/{batch_id}/cancel", tag = "batches", operation_id = "cancelBatch",
    summary = "Cancel a batch: no line starts after this; it is `cancelling` until the lines running end, then `cancelled`, with the answers so far in its files.",
    security(("bearer" = ["api.batch.write"])),
    params(BatchPath),
    responses(
        (status = 200, description = "The batch (`cancelling`, or as it was when it had ended already).", body = Batch),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 404, description = "No batch of this project has this id (`code` `not_found`).", body = svc_api::ErrorBody),
        (status = 500, response = shared::InternalServerError),
        (status = 503, response = shared::ServiceUnavailable),
    ))]
pub async fn cancel(
    Key(key, _): Key<scope::BatchWrite>,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let batch = state
        .store
        .cancel_batch(&key.project_id, &id, now())
        .await?
        .ok_or_else(|| not_found(&id))?;
    if batch.status == BatchStatus::Cancelling {
        super::files::audit(&state, &key, "batch.cancelled", &batch.id).await;
        state.batches.wake.notify_one();
    }
    Ok(json_response(&shape(&batch)))
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound {
        param: Some("batch_id".into()),
        message: format!("No batch with id '{id}' exists in this project."),
    }
}

/// A batch as the API shows it.
pub(crate) fn shape(batch: &BatchRecord) -> Batch {
    Batch {
        id: batch.id.clone(),
        object: "batch".into(),
        endpoint: batch.endpoint.clone(),
        errors: batch
            .errors
            .as_deref()
            .and_then(|e| serde_json::from_str::<BatchErrors>(e).ok()),
        input_file_id: batch.input_file_id.clone(),
        completion_window: batch.completion_window.clone(),
        status: batch.status.as_str().into(),
        output_file_id: batch.output_file_id.clone(),
        error_file_id: batch.error_file_id.clone(),
        created_at: batch.created_at,
        in_progress_at: batch.in_progress_at,
        expires_at: Some(batch.expires_at),
        finalizing_at: batch.finalizing_at,
        completed_at: batch.completed_at,
        failed_at: batch.failed_at,
        expired_at: batch.expired_at,
        cancelling_at: batch.cancelling_at,
        cancelled_at: batch.cancelled_at,
        request_counts: RequestCounts {
            total: batch.total,
            completed: batch.completed,
            failed: batch.failed,
        },
        metadata: batch
            .metadata
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok()),
    }
}
