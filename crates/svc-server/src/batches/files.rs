//! `/v1/files`: a project's files. An upload (`multipart/form-data`, a
//! `file` and `purpose: batch`) is checked line by line as it arrives and
//! written to a temporary file beside the others; only a whole, valid
//! file within the project's quota is renamed into place and recorded.
//! The handler only forwards the body's chunks: parsing, checking and
//! writing them is done on blocking threads ([`super::upload`]), so that a
//! hostile body costs the async threads nothing else.

use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;
use svc_api::batches::{DeletedFile, FileList, FileObject, UploadFile};
use svc_core::batch::FileRecord;
use svc_core::{KeyRecord, ValidationError, now};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::lines::Checker;
use super::upload::{Received, Receiver, past_quota};
use crate::endpoint::Endpoint;
use crate::error::ApiError;
use crate::extract::{Key, scope};
use crate::multipart;
use crate::openapi::shared;
use crate::pipeline::json_response;
use crate::routes::organization::{QueryPairs, page_within};
use crate::state::AppState;
use crate::upload::receive;

/// What this endpoint is: its OpenAPI group, its paths and dialect, and
/// what batches and the response cache make of it.
pub(crate) const ENDPOINT: Endpoint = Endpoint::new(
    "files",
    "Files: the Batch API's input files, and the output and error files of batches.",
)
.paths(&["/v1/files"]);

pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(upload, list))
        .routes(routes!(retrieve, delete))
        .routes(routes!(content))
}

crate::openapi::parameters! {
    /// A file of `/v1/files/{file_id}`.
    FilePath {
        ("file_id", Path, true, "The id of a file (`file-...`).", {"type": "string"}),
    }
    /// `GET /v1/files`'s query.
    FileQuery {
        ("purpose", Query, false, "Only files of this purpose (`batch`, `batch_output`).", {"type": "string"}),
        ("limit", Query, false, "At most this many (1 to 10000; default 10000).", {"type": "integer", "minimum": 1, "maximum": 10000}),
        ("after", Query, false, "The files listed after this one (a file id).", {"type": "string"}),
        ("order", Query, false, "Only `desc`: newest first.", {"type": "string", "enum": ["desc"]}),
    }
}

#[utoipa::path(post, path = "/v1/files", tag = "files", operation_id = "createFile",
    summary = "Upload a file for a batch: JSON Lines, one request a line.",
    description = "A `multipart/form-data` body with `file` and `purpose` (`batch`). Each line must be `{\"custom_id\": ..., \"method\": \"POST\", \"url\": ..., \"body\": {...}}`, with a `url` a batch can call (`/v1/chat/completions`, `/v1/responses`, `/v1/embeddings`, `/v1/completions`, `/v1/rerank`), a `body.model`, no `body.stream`, and a `custom_id` unique in the file; a wrong line is a 400 naming it (`line 3: ...`, `param` `file`), and nothing is kept. The file and its name (at most 255 bytes) count against its project's quota of file bytes (`files_quota_bytes`), with its running batches and their answers.",
    security(("bearer" = ["api.files.write"])),
    request_body(content = UploadFile, content_type = "multipart/form-data"),
    responses(
        (status = 200, description = "The file, kept.", body = FileObject),
        (status = 400, response = shared::BadRequest),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 413, response = shared::PayloadTooLarge),
        (status = 429, response = shared::TooManyRequests),
        (status = 500, response = shared::InternalServerError),
        (status = 503, response = shared::ServiceUnavailable),
    ))]
pub async fn upload(
    Key(key, _): Key<scope::FilesWrite>,
    State(state): State<AppState>,
    request: Request,
) -> Result<Response, ApiError> {
    // Before a byte of the body is read: a project whose files already
    // fill its quota is refused, and another's upload is given up as soon
    // as its file would take it past (the insert below decides, uploads at
    // once included).
    let quota = i64::try_from(state.batches.quota_bytes).unwrap_or(i64::MAX);
    let stored = state.store.stored_bytes(&key.project_id).await?;
    if stored >= quota {
        return Err(past_quota(None, quota));
    }
    let place = state.batches.uploads.admit(&key.id)?;
    let limit = state.batches.file_max_bytes;
    let boundary = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(multipart::boundary)
        .ok_or_else(|| ApiError::InvalidBody {
            param: None,
            message: "Send the file as multipart/form-data, with the fields `file` and `purpose`."
                .into(),
        })?;
    let receiver = Receiver::new(
        &boundary,
        state.batches.dir.clone(),
        state.batches.spool.clone(),
        // A line holds a request body, and its own fields beside it.
        Checker::new(state.body_limit.0 + 4096, state.batches.callable.clone()),
        limit,
        (quota, stored),
    );
    let Received { filename, upload } =
        receive(&place, receiver, request.into_body(), limit).await?;
    let record = FileRecord {
        id: upload.id.clone(),
        project_id: key.project_id.clone(),
        purpose: "batch".into(),
        filename,
        bytes: i64::try_from(upload.bytes).unwrap_or(i64::MAX),
        created_at: now(),
    };
    let path = state
        .batches
        .path(&record.id)
        .ok_or_else(|| ApiError::Internal("a file id that names no path".into()))?;
    upload.keep(&path).await?;
    let kept = state.store.insert_file(&record, quota).await;
    if !matches!(kept, Ok(true)) {
        let _ = tokio::fs::remove_file(&path).await;
    }
    if !kept? {
        return Err(past_quota(
            Some((record.bytes, record.filename.len())),
            quota,
        ));
    }
    audit(&state, &key, "file.created", &record.id).await;
    Ok(json_response(&shape(&record)))
}

#[utoipa::path(get, path = "/v1/files", tag = "files", operation_id = "listFiles",
    summary = "The project's files, newest first.",
    security(("bearer" = ["api.files.read"])),
    params(FileQuery),
    responses(
        (status = 200, description = "The files.", body = FileList),
        (status = 400, response = shared::BadRequest),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 500, response = shared::InternalServerError),
        (status = 503, response = shared::ServiceUnavailable),
    ))]
pub async fn list(
    Key(key, _): Key<scope::FilesRead>,
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let pairs = QueryPairs::parse(query.as_deref())?;
    let page = page_within(query.as_deref(), 10_000, 10_000)?;
    if let Some(order) = pairs.last("order").filter(|o| *o != "desc") {
        return Err(ValidationError::new(
            "order",
            format!("order must be `desc` (newest first), not `{order}`"),
        )
        .into());
    }
    let files = state
        .store
        .list_files(
            &key.project_id,
            pairs.last("purpose").filter(|p| !p.is_empty()),
            page.after.as_deref(),
            page.read_limit(),
        )
        .await?;
    let (files, has_more) = page.cut(files);
    let data: Vec<FileObject> = files.iter().map(shape).collect();
    Ok(json_response(&FileList {
        object: "list".into(),
        first_id: data.first().map(|f| f.id.clone()),
        last_id: data.last().map(|f| f.id.clone()),
        has_more,
        data,
    }))
}

#[utoipa::path(get, path = "/v1/files/{file_id}", tag = "files", operation_id = "retrieveFile",
    summary = "A file of the project.",
    security(("bearer" = ["api.files.read"])),
    params(FilePath),
    responses(
        (status = 200, description = "The file.", body = FileObject),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 404, description = "No file of this project has this id (`code` `not_found`).", body = svc_api::ErrorBody),
        (status = 500, response = shared::InternalServerError),
        (status = 503, response = shared::ServiceUnavailable),
    ))]
pub async fn retrieve(
    Key(key, _): Key<scope::FilesRead>,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let file = find(&state, &key, &id).await?;
    Ok(json_response(&shape(&file)))
}

#[utoipa::path(delete, path = "/v1/files/{file_id}", tag = "files", operation_id = "deleteFile",
    summary = "Delete a file of the project (a batch already created from it goes on).",
    security(("bearer" = ["api.files.write"])),
    params(FilePath),
    responses(
        (status = 200, description = "Deleted.", body = DeletedFile),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 404, description = "No file of this project has this id (`code` `not_found`).", body = svc_api::ErrorBody),
        (status = 500, response = shared::InternalServerError),
        (status = 503, response = shared::ServiceUnavailable),
    ))]
pub async fn delete(
    Key(key, _): Key<scope::FilesWrite>,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let file = find(&state, &key, &id).await?;
    if !state.store.delete_file(&key.project_id, &file.id).await? {
        return Err(not_found(&id));
    }
    if let Some(path) = state.batches.path(&file.id)
        && let Err(e) = tokio::fs::remove_file(&path).await
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(file = %file.id, error = %e, "cannot delete a deleted file's bytes");
    }
    audit(&state, &key, "file.deleted", &file.id).await;
    Ok(json_response(&DeletedFile {
        id: file.id,
        object: "file".into(),
        deleted: true,
    }))
}

#[utoipa::path(get, path = "/v1/files/{file_id}/content", tag = "files", operation_id = "downloadFile",
    summary = "A file's bytes: a batch's input, output or error lines.",
    security(("bearer" = ["api.files.read"])),
    params(FilePath),
    responses(
        (status = 200, description = "The file's bytes (JSON Lines).", content_type = "application/octet-stream", body = String),
        (status = 401, response = shared::Unauthorized),
        (status = 403, response = shared::Forbidden),
        (status = 404, description = "No file of this project has this id (`code` `not_found`).", body = svc_api::ErrorBody),
        (status = 500, response = shared::InternalServerError),
        (status = 503, response = shared::ServiceUnavailable),
    ))]
pub async fn content(
    Key(key, _): Key<scope::FilesRead>,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let file = find(&state, &key, &id).await?;
    download(&state, &file).await
}

/// The bytes of `file`, as an attachment (the API, and the dashboard's
/// download links).
pub(crate) async fn download(state: &AppState, file: &FileRecord) -> Result<Response, ApiError> {
    let path = state
        .batches
        .path(&file.id)
        .ok_or_else(|| not_found(&file.id))?;
    let opened = tokio::fs::File::open(&path).await.map_err(|e| {
        ApiError::Internal(format!(
            "file {} is recorded but its bytes cannot be read at {} ({e}): replicas must share files_dir",
            file.id,
            path.display()
        ))
    })?;
    let body =
        Body::from_stream(tokio_util::io::ReaderStream::new(opened).map_err(axum::Error::new));
    let disposition = HeaderValue::from_str(&format!(
        "attachment; filename=\"{}\"",
        file.filename.replace(['"', '\\', '\r', '\n'], "_")
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("attachment"));
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            ),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        body,
    )
        .into_response())
}

/// The project's file `id`, or the 404 of one that does not exist.
pub(super) async fn find(
    state: &AppState,
    key: &KeyRecord,
    id: &str,
) -> Result<FileRecord, ApiError> {
    state
        .store
        .file(&key.project_id, id)
        .await?
        .ok_or_else(|| not_found(id))
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound {
        param: Some("file_id".into()),
        message: format!("No file with id '{id}' exists in this project."),
    }
}

/// A file as the API shows it.
pub(super) fn shape(file: &FileRecord) -> FileObject {
    FileObject {
        id: file.id.clone(),
        object: "file".into(),
        bytes: file.bytes,
        created_at: file.created_at,
        expires_at: None,
        filename: file.filename.clone(),
        purpose: file.purpose.clone(),
        status: "processed".into(),
    }
}

/// Writes `kind` (`file.created`, `batch.cancelled`, ...) about `id` to
/// the audit log, in the key's project; a failure is logged, not answered.
pub(super) async fn audit(state: &AppState, key: &KeyRecord, kind: &str, id: &str) {
    let entry = async {
        let actor = crate::routes::organization::key_actor(state, key).await?;
        let mut entry =
            svc_core::audit::AuditEntry::new(kind, &actor, serde_json::json!({ "id": id }));
        if let Some(project) = state.store.project_by_id(&key.project_id).await? {
            entry = entry.in_project(&project);
        }
        svc_core::audit::record(state.store.as_ref(), entry)
            .await
            .map_err(ApiError::from)
    };
    if let Err(e) = entry.await {
        tracing::warn!(kind, id, error = %e, "cannot write the audit log");
    }
}
