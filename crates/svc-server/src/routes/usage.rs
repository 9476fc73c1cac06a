//! `GET /v1/admin/usage`: requests and tokens per key per day, for keys of
//! admin accounts and organization-wide admin keys (the dashboard's Usage
//! page shows the same to people).

use axum::Json;
use axum::extract::{RawQuery, State};
use svc_api::{UsageDay, UsageList};
use svc_core::{ValidationError, day_of, now};

use crate::error::ApiError;
use crate::extract::{Key, scope};
use crate::openapi::shared;
use crate::state::AppState;

/// The most days one request may ask for.
pub(crate) const MAX_DAYS: i64 = 400;

crate::openapi::parameters! {
    /// How far back `GET /v1/admin/usage` reads.
    Days {
        ("days", Query, false, "Days back from today, today included (1 to 400; default 30).",
            {"type": "integer", "minimum": 1, "maximum": MAX_DAYS}),
    }
}

#[utoipa::path(get, path = "/v1/admin/usage", tag = "auth", operation_id = "adminUsage",
    summary = "Requests and tokens per key per UTC day, for every key (admin accounts' keys only).",
    security(("bearer" = ["api.usage.read"])),
    params(Days),
    responses(
        (status = 200, description = "Usage rows, by day then key.", body = UsageList),
        (status = 400, response = shared::BadRequest),
        (status = 401, response = shared::Unauthorized),
        (status = 403, description = "The key does not belong to an admin account (`code` `insufficient_permissions`).", body = svc_api::ErrorBody),
        (status = 500, response = shared::InternalServerError),
    ))]
pub async fn admin(
    Key(key, _): Key<scope::UsageRead>,
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Json<UsageList>, ApiError> {
    // Every project's usage: an admin key must reach every project; any
    // other key (`all`, or restricted to `api.usage.read`) an admin's.
    let allowed = if matches!(key.kind, svc_core::KeyKind::Admin(_)) {
        super::organization::reach(&state, &key).await? == super::organization::Reach::Organization
    } else {
        let owner = match &key.owner_id {
            Some(id) => state.accounts.user(id).await?,
            None => None,
        };
        owner.is_some_and(|u| u.is_admin)
    };
    if !allowed {
        return Err(ApiError::Forbidden(
            "This endpoint needs a key of an admin account.".into(),
        ));
    }
    // Read by hand: a malformed query is a 400 in the API's shape, naming
    // the parameter (the last `days` wins when repeated).
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(query.as_deref().unwrap_or("")).unwrap_or_default();
    let days = pairs
        .iter()
        .rev()
        .find(|(k, _)| k == "days")
        .map(|(_, v)| v);
    let days = match days {
        None => 30,
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|d| (1..=MAX_DAYS).contains(d))
            .ok_or_else(|| ValidationError {
                param: "days".into(),
                message: format!("days must be a whole number from 1 to {MAX_DAYS}"),
            })?,
    };
    let since = day_of(now() - (days - 1) * 86_400);
    let rows = state.store.usage_since(None, &since).await?;
    let data = rows
        .into_iter()
        .map(|r| UsageDay {
            object: "usage.day".into(),
            key_id: r.key_id.0,
            day: r.day,
            requests: r.requests,
            prompt_tokens: r.prompt_tokens,
            cached_tokens: r.cached_tokens,
            completion_tokens: r.completion_tokens,
            cache_hits: r.cache_hits,
            cache_saved_tokens: r.cache_saved_tokens,
            total_tokens: r.prompt_tokens + r.completion_tokens,
        })
        .collect();
    Ok(Json(UsageList {
        object: "list".into(),
        since,
        data,
    }))
}
