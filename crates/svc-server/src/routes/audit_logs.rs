//! `GET /v1/organization/audit_logs`: the audit log in the shape of
//! OpenAI's Administration API, newest first, with its filters and cursors.
//! Admin keys only (the handler takes `Key<scope::ManagementRead>`); a project
//! owner's admin key sees only its project's entries.

use axum::Json;
use axum::extract::{RawQuery, State};
use svc_api::{AuditLog, AuditLogList, AuditLogProject};
use svc_core::ValidationError;
use svc_core::audit::{AuditEntry, AuditQuery, EVENT_TYPES};

use super::organization::{AdminErrors, PageParams, QueryPairs, page, reach};
use crate::error::ApiError;
use crate::extract::{Key, scope};
use crate::state::AppState;

/// The query's filters, cursors and limit, as OpenAI names them (`event_types[]`
/// or `event_types`, `effective_at[gt]`, ...).
pub(crate) fn query(text: Option<&str>) -> Result<AuditQuery, ApiError> {
    let pairs = QueryPairs::parse(text)?;
    let list = |name: &str| -> Vec<String> {
        pairs
            .values(name)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let bound = |op: &str| -> Result<Option<i64>, ApiError> {
        let param = format!("effective_at[{op}]");
        match pairs.last(&param) {
            None => Ok(None),
            Some(v) => v.trim().parse::<i64>().map(Some).map_err(|_| {
                ValidationError {
                    param: param.clone(),
                    message: format!("{param} must be a Unix time in seconds"),
                }
                .into()
            }),
        }
    };
    let event_types = list("event_types");
    if let Some(unknown) = event_types
        .iter()
        .find(|t| !EVENT_TYPES.contains(&t.as_str()))
    {
        return Err(ValidationError {
            param: "event_types[]".into(),
            message: format!(
                "unknown event type '{unknown}'; the types are: {}",
                EVENT_TYPES.join(", ")
            ),
        }
        .into());
    }
    let page = page(text)?;
    let before = pairs
        .last("before")
        .filter(|v| !v.is_empty())
        .map(str::to_owned);
    Ok(AuditQuery {
        event_types,
        actor_ids: list("actor_ids"),
        actor_emails: list("actor_emails")
            .into_iter()
            .map(|e| e.trim().to_lowercase())
            .collect(),
        project_ids: list("project_ids"),
        gt: bound("gt")?,
        gte: bound("gte")?,
        lt: bound("lt")?,
        lte: bound("lte")?,
        after: page.after,
        before,
        limit: page.limit,
    })
}

/// An entry as the API shows it.
pub(crate) fn entry_body(entry: AuditEntry) -> AuditLog {
    let mut details = serde_json::Map::new();
    details.insert(entry.kind.clone(), entry.details);
    AuditLog {
        id: entry.id,
        kind: entry.kind,
        effective_at: entry.effective_at,
        actor: entry.actor,
        project: entry
            .project
            .map(|(id, name)| AuditLogProject { id: id.0, name }),
        details,
    }
}

/// One page of entries matching `query` (newest first), and whether more
/// follow in the direction of paging.
pub(crate) async fn entries(
    state: &AppState,
    query: &AuditQuery,
) -> Result<(Vec<AuditEntry>, bool), ApiError> {
    let mut entries = state.store.list_audit(query).await?;
    let has_more = entries.len() > query.limit;
    entries.truncate(query.limit);
    Ok((entries, has_more))
}

crate::openapi::parameters! {
    /// The log's filters and its backward cursor.
    Filters {
        ("event_types[]", Query, false, "Only events of these types.",
            {"type": "array", "items": {"type": "string", "enum": EVENT_TYPES}}),
        ("actor_ids[]", Query, false, "Only events by these accounts (`usr_...`) or keys (`key_...`).",
            {"type": "array", "items": {"type": "string"}}),
        ("actor_emails[]", Query, false, "Only events by accounts with these emails.",
            {"type": "array", "items": {"type": "string"}}),
        ("project_ids[]", Query, false, "Only events in these projects.",
            {"type": "array", "items": {"type": "string"}}),
        ("effective_at[gt]", Query, false, "Only events after this Unix time.", {"type": "integer"}),
        ("effective_at[gte]", Query, false, "Only events at or after this Unix time.", {"type": "integer"}),
        ("effective_at[lt]", Query, false, "Only events before this Unix time.", {"type": "integer"}),
        ("effective_at[lte]", Query, false, "Only events at or before this Unix time.", {"type": "integer"}),
        ("before", Query, false, "The `first_id` of a page: this page holds the entries just newer than that one.",
            {"type": "string"}),
    }
}

/// `GET /v1/organization/audit_logs`.
#[utoipa::path(get, path = "/v1/organization/audit_logs", tag = "organization", operation_id = "listAuditLogs",
    summary = "The audit log, newest first: sign-ins and sign-outs, keys created, rotated and revoked, rate-limit changes, device approvals and denials, project, user and membership changes. Never a secret. A project owner's admin key sees its project's entries only.",
    security(("bearer" = ["api.management.read"])),
    params(PageParams, Filters),
    responses(
        (status = 200, description = "A page of entries.", body = AuditLogList),
        (status = 400, description = "A filter or `limit` out of range; `param` names it (`event_types[]`, `effective_at[gt]`, `limit`).", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn list(
    Key(key, _): Key<scope::ManagementRead>,
    State(state): State<AppState>,
    RawQuery(text): RawQuery,
) -> Result<Json<AuditLogList>, ApiError> {
    let reach = reach(&state, &key).await?;
    let mut query = query(text.as_deref())?;
    let (found, has_more) = if reach.narrow(&mut query.project_ids) {
        entries(&state, &query).await?
    } else {
        (Vec::new(), false)
    };
    let data: Vec<AuditLog> = found.into_iter().map(entry_body).collect();
    Ok(Json(AuditLogList {
        object: "list".into(),
        first_id: data.first().map(|e| e.id.clone()),
        last_id: data.last().map(|e| e.id.clone()),
        has_more,
        data,
    }))
}
