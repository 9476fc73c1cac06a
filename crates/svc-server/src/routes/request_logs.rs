//! `GET /v1/organization/request_logs`: the request log (one row per API
//! request), newest first, with its filters and cursor. Admin keys only; a
//! project owner's admin key sees its project's rows only.

use axum::Json;
use axum::extract::{RawQuery, State};
use svc_api::{RequestLog, RequestLogList};
use svc_core::ValidationError;
use svc_core::request_log::{RequestLogEntry, RequestLogQuery, StatusFilter};

use super::organization::{AdminErrors, PageParams, QueryPairs, page, reach};
use crate::error::ApiError;
use crate::extract::{Key, scope};
use crate::state::AppState;

/// The query's filters (`key_ids[]` or `key_ids`, `statuses[]=4xx`,
/// `start_time`, …), cursor and limit.
pub(crate) fn query(text: Option<&str>) -> Result<RequestLogQuery, ApiError> {
    let pairs = QueryPairs::parse(text)?;
    let list = |name: &str| -> Vec<String> {
        pairs
            .values(name)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let time = |name: &str| -> Result<Option<i64>, ApiError> {
        match pairs.last(name) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse::<i64>()
                .map(|seconds| Some(seconds.saturating_mul(1000)))
                .map_err(|_| {
                    ValidationError {
                        param: name.to_owned(),
                        message: format!("{name} must be a Unix time in seconds"),
                    }
                    .into()
                }),
        }
    };
    let statuses = list("statuses")
        .iter()
        .map(|text| {
            StatusFilter::parse(text).ok_or_else(|| ValidationError {
                param: "statuses[]".into(),
                message: format!("'{text}' is not a status: use a code (429) or a class (4xx)"),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let page = page(text)?;
    Ok(RequestLogQuery {
        key_ids: list("key_ids"),
        project_ids: list("project_ids"),
        user_ids: list("user_ids"),
        models: list("models"),
        statuses,
        since_ms: time("start_time")?,
        until_ms: time("end_time")?,
        after: page.after,
        limit: page.limit,
    })
}

/// One page of rows matching `query` (newest first), and whether more
/// follow.
pub(crate) async fn rows(
    state: &AppState,
    query: &RequestLogQuery,
) -> Result<(Vec<RequestLogEntry>, bool), ApiError> {
    let mut rows = state.store.list_request_logs(query).await?;
    let has_more = rows.len() > query.limit;
    rows.truncate(query.limit);
    Ok((rows, has_more))
}

/// A row as the API shows it.
pub(crate) fn row_body(row: RequestLogEntry) -> RequestLog {
    RequestLog {
        object: "organization.request_log".into(),
        id: row.id,
        started_at_ms: row.started_at_ms,
        api_key_id: row.key_id,
        project_id: row.project_id,
        user_id: row.user_id,
        model: row.model,
        dialect: row.dialect,
        endpoint: row.endpoint,
        status: row.status,
        error_type: row.error_type,
        prompt_tokens: row.prompt_tokens,
        cached_tokens: row.cached_tokens,
        completion_tokens: row.completion_tokens,
        cost_usd: svc_core::budget::micros_to_usd(row.cost_micros),
        ttft_ms: row.ttft_ms,
        duration_ms: row.duration_ms,
        upstream: row.upstream,
    }
}

crate::openapi::parameters! {
    /// The request log's filters.
    Filters {
        ("key_ids[]", Query, false, "Only requests made with these keys (`key_...`).",
            {"type": "array", "items": {"type": "string"}}),
        ("project_ids[]", Query, false, "Only requests in these projects.",
            {"type": "array", "items": {"type": "string"}}),
        ("user_ids[]", Query, false, "Only requests with keys of these accounts (`usr_...`).",
            {"type": "array", "items": {"type": "string"}}),
        ("models[]", Query, false, "Only requests for these models.",
            {"type": "array", "items": {"type": "string"}}),
        ("statuses[]", Query, false, "Only requests answered with these statuses: a code (`429`) or a class (`4xx`).",
            {"type": "array", "items": {"type": "string"}}),
        ("start_time", Query, false, "Only requests that arrived at or after this Unix time (seconds).", {"type": "integer"}),
        ("end_time", Query, false, "Only requests that arrived before this Unix time (seconds).", {"type": "integer"}),
    }
}

/// `GET /v1/organization/request_logs`.
#[utoipa::path(get, path = "/v1/organization/request_logs", tag = "organization", operation_id = "listRequestLogs",
    summary = "The request log, newest first: one row per API request (key, project, account, model, dialect, endpoint, status, error type, tokens, cost, time to first token and duration), kept for `request_log_retention`. Never the prompt or the reply. A project owner's admin key sees its project's rows only.",
    security(("bearer" = ["api.management.read"])),
    params(PageParams, Filters),
    responses(
        (status = 200, description = "A page of rows.", body = RequestLogList),
        (status = 400, description = "A filter or `limit` out of range; `param` names it (`statuses[]`, `start_time`, `limit`).", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn list(
    Key(key, _): Key<scope::ManagementRead>,
    State(state): State<AppState>,
    RawQuery(text): RawQuery,
) -> Result<Json<RequestLogList>, ApiError> {
    let reach = reach(&state, &key).await?;
    let mut query = query(text.as_deref())?;
    let (found, has_more) = if reach.narrow(&mut query.project_ids) {
        rows(&state, &query).await?
    } else {
        (Vec::new(), false)
    };
    let data: Vec<RequestLog> = found.into_iter().map(row_body).collect();
    Ok(Json(RequestLogList {
        object: "list".into(),
        first_id: data.first().map(|r| r.id.clone()),
        last_id: data.last().map(|r| r.id.clone()),
        has_more,
        data,
    }))
}
