//! OpenAI's usage API: `GET /v1/organization/usage/completions` (tokens
//! and requests), `/audio_speeches` (characters) and `/audio_transcriptions`
//! (seconds) by UTC day (a `page` of `bucket`s, each with its endpoint's
//! `organization.usage.*.result`s), optionally grouped by project, key and
//! model and filtered by them. A model's usage is its audio endpoints' when
//! it counted seconds or characters, else the completions endpoint's. Admin keys only (the handler
//! takes `Key<scope::ManagementRead>`); a project owner's admin key sees its
//! project's usage only. svc counts usage by day, so `bucket_width` is `1d`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{RawQuery, State};
use svc_api::{
    UsageAudioSpeechesBucket, UsageAudioSpeechesPage, UsageAudioSpeechesResult,
    UsageAudioTranscriptionsBucket, UsageAudioTranscriptionsPage, UsageAudioTranscriptionsResult,
    UsageCompletionsBucket, UsageCompletionsPage, UsageCompletionsResult,
};
use svc_core::usage::ModelUsageRow;
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

/// Which of the usage endpoints a query is for: the rows it counts.
#[derive(Clone, Copy)]
enum Kind {
    Completions,
    Speeches,
    Transcriptions,
}

impl Kind {
    fn counts(self, row: &ModelUsageRow) -> bool {
        match self {
            Kind::Completions => row.audio_seconds == 0 && row.characters == 0,
            Kind::Speeches => row.characters > 0,
            Kind::Transcriptions => row.audio_seconds > 0,
        }
    }
}

/// (project, key, model) where grouped.
type Group = (Option<String>, Option<String>, Option<String>);

/// A group's sums in a bucket.
#[derive(Default)]
struct Sums {
    requests: i64,
    input: i64,
    cached: i64,
    output: i64,
    seconds: i64,
    characters: i64,
}

/// The day buckets of a query: each day's start, whether more days follow
/// the page, and each day's groups with their sums.
struct Buckets {
    starts: Vec<i64>,
    has_more: bool,
    groups: BTreeMap<String, BTreeMap<Group, Sums>>,
}

impl Buckets {
    /// Each day of the page with its results, made by `result`.
    fn days<B, R>(
        mut self,
        result: impl Fn(Group, Sums) -> R,
        bucket: impl Fn(i64, Vec<R>) -> B,
    ) -> Vec<B> {
        self.starts
            .iter()
            .map(|&start| {
                let results = self
                    .groups
                    .remove(&day_of(start))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(group, sums)| result(group, sums))
                    .collect();
                bucket(start, results)
            })
            .collect()
    }

    fn next_page(&self) -> Option<String> {
        self.has_more
            .then(|| self.starts.last().map(|last| (last + DAY).to_string()))
            .flatten()
    }
}

/// The usage `text` (the query string) asks for, of the rows `kind` counts,
/// as far as `key` may see it.
async fn buckets(
    state: &AppState,
    key: &svc_core::KeyRecord,
    text: Option<&str>,
    kind: Kind,
) -> Result<Buckets, ApiError> {
    let reach = reach(state, key).await?;
    let query = query(text)?;
    let mut starts: Vec<i64> = (0..)
        .map(|i| query.from + i * DAY)
        .take_while(|s| *s < query.end)
        .take(usize::try_from(query.limit + 1).unwrap_or(usize::MAX))
        .collect();
    let has_more = starts.len() as i64 > query.limit;
    starts.truncate(usize::try_from(query.limit).unwrap_or(usize::MAX));
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
    let mut groups: BTreeMap<String, BTreeMap<Group, Sums>> = BTreeMap::new();
    for row in rows {
        let project = row.project_id.clone().map(|p| p.0);
        let visible = match &reach {
            Reach::Organization => true,
            Reach::Project(own) => project.as_deref() == Some(own.0.as_str()),
        };
        if !visible
            || !kind.counts(&row)
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
        let sums = groups.entry(row.day).or_default().entry(group).or_default();
        sums.requests += row.requests;
        sums.input += row.prompt_tokens;
        sums.cached += row.cached_tokens;
        sums.output += row.completion_tokens;
        sums.seconds += row.audio_seconds;
        sums.characters += row.characters;
    }
    Ok(Buckets {
        starts,
        has_more,
        groups,
    })
}

/// `GET /v1/organization/usage/completions`.
#[utoipa::path(get, path = "/v1/organization/usage/completions", tag = "organization", operation_id = "usageCompletions",
    summary = "Requests and tokens by UTC day, optionally grouped and filtered by project, key and model, in OpenAI's usage shape. Usage from before migration 0011 has no model and is not here; audio models' usage is at the audio endpoints. A project owner's admin key sees its project's usage only.",
    security(("bearer" = ["api.management.read"])),
    params(UsageQuery),
    responses(
        (status = 200, description = "Day buckets.", body = UsageCompletionsPage),
        (status = 400, description = "A parameter out of range; `param` names it (`start_time`, `end_time`, `bucket_width`, `group_by`, `limit`, `page`).", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn completions(
    Key(key, _): Key<scope::ManagementRead>,
    State(state): State<AppState>,
    RawQuery(text): RawQuery,
) -> Result<Json<UsageCompletionsPage>, ApiError> {
    let buckets = buckets(&state, &key, text.as_deref(), Kind::Completions).await?;
    let next_page = buckets.next_page();
    let has_more = buckets.has_more;
    let data = buckets.days(
        |(project_id, api_key_id, model), sums| UsageCompletionsResult {
            object: "organization.usage.completions.result".into(),
            input_tokens: sums.input,
            input_cached_tokens: sums.cached,
            output_tokens: sums.output,
            input_audio_tokens: 0,
            output_audio_tokens: 0,
            num_model_requests: sums.requests,
            project_id,
            user_id: None,
            api_key_id,
            model,
            batch: None,
        },
        |start, results| UsageCompletionsBucket {
            object: "bucket".into(),
            start_time: start,
            end_time: start + DAY,
            results,
        },
    );
    Ok(Json(UsageCompletionsPage {
        object: "page".into(),
        data,
        has_more,
        next_page,
    }))
}

/// `GET /v1/organization/usage/audio_speeches`.
#[utoipa::path(get, path = "/v1/organization/usage/audio_speeches", tag = "organization", operation_id = "usageAudioSpeeches",
    summary = "Characters spoken and requests by UTC day (`POST /v1/audio/speech`), optionally grouped and filtered by project, key and model, in OpenAI's usage shape. A project owner's admin key sees its project's usage only.",
    security(("bearer" = ["api.management.read"])),
    params(UsageQuery),
    responses(
        (status = 200, description = "Day buckets.", body = UsageAudioSpeechesPage),
        (status = 400, description = "A parameter out of range; `param` names it (`start_time`, `end_time`, `bucket_width`, `group_by`, `limit`, `page`).", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn audio_speeches(
    Key(key, _): Key<scope::ManagementRead>,
    State(state): State<AppState>,
    RawQuery(text): RawQuery,
) -> Result<Json<UsageAudioSpeechesPage>, ApiError> {
    let buckets = buckets(&state, &key, text.as_deref(), Kind::Speeches).await?;
    let next_page = buckets.next_page();
    let has_more = buckets.has_more;
    let data = buckets.days(
        |(project_id, api_key_id, model), sums| UsageAudioSpeechesResult {
            object: "organization.usage.audio_speeches.result".into(),
            characters: sums.characters,
            num_model_requests: sums.requests,
            project_id,
            user_id: None,
            api_key_id,
            model,
        },
        |start, results| UsageAudioSpeechesBucket {
            object: "bucket".into(),
            start_time: start,
            end_time: start + DAY,
            results,
        },
    );
    Ok(Json(UsageAudioSpeechesPage {
        object: "page".into(),
        data,
        has_more,
        next_page,
    }))
}

/// `GET /v1/organization/usage/audio_transcriptions`.
#[utoipa::path(get, path = "/v1/organization/usage/audio_transcriptions", tag = "organization", operation_id = "usageAudioTranscriptions",
    summary = "Seconds of audio transcribed or translated and requests by UTC day (`POST /v1/audio/transcriptions`, `/translations`), optionally grouped and filtered by project, key and model, in OpenAI's usage shape. A project owner's admin key sees its project's usage only.",
    security(("bearer" = ["api.management.read"])),
    params(UsageQuery),
    responses(
        (status = 200, description = "Day buckets.", body = UsageAudioTranscriptionsPage),
        (status = 400, description = "A parameter out of range; `param` names it (`start_time`, `end_time`, `bucket_width`, `group_by`, `limit`, `page`).", body = svc_api::ErrorBody),
        AdminErrors,
    ))]
pub async fn audio_transcriptions(
    Key(key, _): Key<scope::ManagementRead>,
    State(state): State<AppState>,
    RawQuery(text): RawQuery,
) -> Result<Json<UsageAudioTranscriptionsPage>, ApiError> {
    let buckets = buckets(&state, &key, text.as_deref(), Kind::Transcriptions).await?;
    let next_page = buckets.next_page();
    let has_more = buckets.has_more;
    let data = buckets.days(
        |(project_id, api_key_id, model), sums| UsageAudioTranscriptionsResult {
            object: "organization.usage.audio_transcriptions.result".into(),
            seconds: sums.seconds,
            num_model_requests: sums.requests,
            project_id,
            user_id: None,
            api_key_id,
            model,
        },
        |start, results| UsageAudioTranscriptionsBucket {
            object: "bucket".into(),
            start_time: start,
            end_time: start + DAY,
            results,
        },
    );
    Ok(Json(UsageAudioTranscriptionsPage {
        object: "page".into(),
        data,
        has_more,
        next_page,
    }))
}
