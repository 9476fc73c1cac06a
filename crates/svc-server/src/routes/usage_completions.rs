//! `GET /v1/organization/usage/completions`: tokens and requests by UTC
//! day, in the shape of OpenAI's usage API (a `page` of `bucket`s, each
//! with `organization.usage.completions.result`s), optionally grouped by
//! project, key and model and filtered by them. Admin keys only (the handler
//! takes `Key<scope::ManagementRead>`); a project owner's admin key sees its
//! project's usage only. svc counts usage by day, so `bucket_width` is `1d`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{RawQuery, State};
use svc_api::{UsageCompletionsBucket, UsageCompletionsPage, UsageCompletionsResult};
use svc_core::usage::day_of;
use svc_core::{ValidationError, now};

use super::organization::{AdminErrors, QueryPairs, Reach, reach};
use crate::error::ApiError;
use crate::extract::{Key, scope};
use crate::state::AppState;

const DAY: i64 = 86_400;
/// `limit`'s default and most for day buckets, as OpenAI's.
const DEFAULT_BUCKETS: i64 = 7;
const MAX_BUCKETS: i64 = 31;
/// What results may be grouped by.
const GROUPS: [&str; 3] = ["project_id", "api_key_id", "model"];

/// The query, checked.
struct Query {
    /// 00:00 UTC of the first day asked for (or of `page`).
    from: i64,
    /// Exclusive.
    end: i64,
    limit: i64,
    group_by: Vec<String>,
    project_ids: Vec<String>,
    api_key_ids: Vec<String>,
    models: Vec<String>,
}

fn invalid(param: &str, message: String) -> ApiError {
    ValidationError {
        param: param.into(),
        message,
    }
    .into()
}

fn query(text: Option<&str>) -> Result<Query, ApiError> {
    let pairs = QueryPairs::parse(text)?;
    let last = |name: &str| pairs.last(name).map(|v| v.trim().to_owned());
    let list = |name: &str| -> Vec<String> {
        pairs
            .values(name)
            .flat_map(|v| v.split(',').map(|s| s.trim().to_owned()))
            .filter(|v| !v.is_empty())
            .collect()
    };
    let time = |name: &str| -> Result<Option<i64>, ApiError> {
        last(name)
            .map(|v| {
                v.parse::<i64>()
                    .ok()
                    .filter(|t| *t >= 0)
                    .ok_or_else(|| invalid(name, format!("{name} must be a Unix time in seconds")))
            })
            .transpose()
    };
    let start = time("start_time")?
        .ok_or_else(|| invalid("start_time", "start_time is required".into()))?;
    let end = time("end_time")?.unwrap_or_else(|| now() + 1);
    if end <= start {
        return Err(invalid(
            "end_time",
            "end_time must be after start_time".into(),
        ));
    }
    if let Some(width) = last("bucket_width")
        && width != "1d"
    {
        return Err(invalid(
            "bucket_width",
            format!("svc keeps usage by day: bucket_width must be 1d, not '{width}'"),
        ));
    }
    let limit = match last("limit") {
        None => DEFAULT_BUCKETS,
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|l| (1..=MAX_BUCKETS).contains(l))
            .ok_or_else(|| invalid("limit", format!("limit must be 1 to {MAX_BUCKETS}")))?,
    };
    let mut from = start - start.rem_euclid(DAY);
    if let Some(page) = last("page") {
        let cursor = page
            .parse::<i64>()
            .ok()
            .filter(|p| *p >= from && p.rem_euclid(DAY) == 0)
            .ok_or_else(|| invalid("page", "page must be a next_page of this query".into()))?;
        from = cursor;
    }
    let group_by = list("group_by");
    if let Some(other) = group_by.iter().find(|g| !GROUPS.contains(&g.as_str())) {
        return Err(invalid(
            "group_by",
            format!(
                "cannot group by '{other}'; svc groups by {}",
                GROUPS.join(", ")
            ),
        ));
    }
    Ok(Query {
        from,
        end,
        limit,
        group_by,
        project_ids: list("project_ids"),
        api_key_ids: list("api_key_ids"),
        models: list("models"),
    })
}

crate::openapi::parameters! {
    /// The days, groups, filters and page of a usage query.
    UsageQuery {
        ("start_time", Query, true, "Unix time: usage from 00:00 UTC of this day on.",
            {"type": "integer", "format": "int64", "minimum": 0}),
        ("end_time", Query, false, "Unix time: usage before this (default: now).",
            {"type": "integer", "format": "int64", "minimum": 0}),
        ("bucket_width", Query, false, "`1d` (svc counts usage by day).", {"type": "string", "enum": ["1d"]}),
        ("group_by[]", Query, false, "Group each day's usage by these fields (the others are null).",
            {"type": "array", "items": {"type": "string", "enum": GROUPS}}),
        ("project_ids[]", Query, false, "Only these projects.", {"type": "array", "items": {"type": "string"}}),
        ("api_key_ids[]", Query, false, "Only these keys.", {"type": "array", "items": {"type": "string"}}),
        ("models[]", Query, false, "Only these models.", {"type": "array", "items": {"type": "string"}}),
        ("limit", Query, false, "Day buckets a page: 1 to 31, default 7.",
            {"type": "integer", "minimum": 1, "maximum": MAX_BUCKETS}),
        ("page", Query, false, "The `next_page` of the previous page.", {"type": "string"}),
    }
}

/// `GET /v1/organization/usage/completions`.
#[utoipa::path(get, path = "/v1/organization/usage/completions", tag = "organization", operation_id = "usageCompletions",
    summary = "Requests and tokens by UTC day, optionally grouped and filtered by project, key and model, in OpenAI's usage shape. Usage from before migration 0011 has no model and is not here. A project owner's admin key sees its project's usage only.",
    security(("bearer" = ["api.management.read"])),
    params(UsageQuery),
    responses(
        (status = 200, description = "Day buckets.", body = UsageCompletionsPage),
        (status = 400, description = "A parameter out of range; `param` names it (`start_time`, `end_time`, `bucket_width`, `group_by`, `limit`, `page`).", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn list(
    Key(key, _): Key<scope::ManagementRead>,
    State(state): State<AppState>,
    RawQuery(text): RawQuery,
) -> Result<Json<UsageCompletionsPage>, ApiError> {
    let reach = reach(&state, &key).await?;
    let query = query(text.as_deref())?;
    let starts: Vec<i64> = (0..)
        .map(|i| query.from + i * DAY)
        .take_while(|s| *s < query.end)
        .take(usize::try_from(query.limit + 1).unwrap_or(usize::MAX))
        .collect();
    let has_more = starts.len() as i64 > query.limit;
    let starts = &starts[..starts.len().min(query.limit as usize)];
    let rows = match (starts.first(), starts.last()) {
        (Some(first), Some(last)) => {
            state
                .store
                .usage_by_model(&day_of(*first), &day_of(last + DAY))
                .await?
        }
        _ => Vec::new(),
    };
    let grouped = |name: &str| query.group_by.iter().any(|g| g == name);
    let wanted = |list: &[String], value: &str| list.is_empty() || list.iter().any(|v| v == value);
    // By day, then by group: (project, key, model) where grouped, and the sums.
    type Group = (Option<String>, Option<String>, Option<String>);
    let mut buckets: BTreeMap<String, BTreeMap<Group, [i64; 4]>> = BTreeMap::new();
    for row in rows {
        let project = row.project_id.map(|p| p.0);
        let visible = match &reach {
            Reach::Organization => true,
            Reach::Project(own) => project.as_deref() == Some(own.0.as_str()),
        };
        if !visible
            || !wanted(&query.project_ids, project.as_deref().unwrap_or(""))
            || !wanted(&query.api_key_ids, &row.key_id.0)
            || !wanted(&query.models, &row.model)
        {
            continue;
        }
        let group = (
            project.filter(|_| grouped("project_id")),
            Some(row.key_id.0).filter(|_| grouped("api_key_id")),
            Some(row.model).filter(|_| grouped("model")),
        );
        let sums = buckets
            .entry(row.day)
            .or_default()
            .entry(group)
            .or_default();
        sums[0] += row.requests;
        sums[1] += row.prompt_tokens;
        sums[2] += row.cached_tokens;
        sums[3] += row.completion_tokens;
    }
    let data = starts
        .iter()
        .map(|&start| UsageCompletionsBucket {
            object: "bucket".into(),
            start_time: start,
            end_time: start + DAY,
            results: buckets
                .remove(&day_of(start))
                .unwrap_or_default()
                .into_iter()
                .map(
                    |((project_id, api_key_id, model), [requests, input, cached, output])| {
                        UsageCompletionsResult {
                            object: "organization.usage.completions.result".into(),
                            input_tokens: input,
                            input_cached_tokens: cached,
                            output_tokens: output,
                            input_audio_tokens: 0,
                            output_audio_tokens: 0,
                            num_model_requests: requests,
                            project_id,
                            user_id: None,
                            api_key_id,
                            model,
                            batch: None,
                        }
                    },
                )
                .collect(),
        })
        .collect();
    Ok(Json(UsageCompletionsPage {
        object: "page".into(),
        data,
        has_more,
        next_page: has_more.then(|| (starts[starts.len() - 1] + DAY).to_string()),
    }))
}
