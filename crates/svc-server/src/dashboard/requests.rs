//! The Requests page: the request log (one row per API request), newest
//! first, filtered by key, model, status and dates through a plain GET
//! form and paged by links. Organization owners see every request; anyone
//! else the requests made with their own keys.

use axum::extract::{Query, State};
use axum::response::Html;
use minijinja::{Value, context};
use serde::Deserialize;
use svc_core::request_log::{RequestLogEntry, RequestLogQuery, StatusFilter};

use super::pages::{PageError, form_day, form_one, render};
use super::session::SignedIn;
use super::session::layout;
use crate::routes::request_logs::rows;
use crate::state::AppState;

/// Rows per page.
const PAGE: usize = 50;

/// The page's query: the filter form's fields and a cursor.
#[derive(Debug, Default, Deserialize)]
pub struct RequestsPageQuery {
    #[serde(default)]
    key: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
    after: Option<String>,
}

impl RequestsPageQuery {
    /// The filters as the store's query; a date or status that cannot be
    /// read is the person's error, told on the page.
    fn to_query(&self) -> Result<RequestLogQuery, String> {
        // In milliseconds, as the log keeps times.
        let day = |text: &str, field: &str| {
            form_day(text, field).map(|seconds| seconds.map(|s| s * 1000))
        };
        let one = form_one;
        let statuses =
            match self.status.trim() {
                "" => Vec::new(),
                text => vec![StatusFilter::parse(text).ok_or_else(|| {
                    "Enter the status as a code (429) or a class (4xx).".to_owned()
                })?],
            };
        Ok(RequestLogQuery {
            key_ids: one(&self.key),
            models: one(&self.model),
            statuses,
            since_ms: day(&self.from, "from")?,
            // The whole "to" day is included.
            until_ms: day(&self.to, "to")?.map(|t| t + 86_400_000),
            after: self.after.clone().filter(|a| !a.is_empty()),
            limit: PAGE,
            ..RequestLogQuery::default()
        })
    }

    /// The page's address with these filters and, when given, `after`.
    fn link(&self, after: Option<&str>) -> String {
        let pairs = [
            ("key", self.key.as_str()),
            ("model", self.model.as_str()),
            ("status", self.status.as_str()),
            ("from", self.from.as_str()),
            ("to", self.to.as_str()),
            ("after", after.unwrap_or("")),
        ];
        let kept: Vec<(&str, &str)> = pairs.into_iter().filter(|(_, v)| !v.is_empty()).collect();
        let query = serde_urlencoded::to_string(kept).unwrap_or_default();
        format!("/dashboard/requests?{query}")
    }
}

fn row(entry: RequestLogEntry) -> Value {
    let time = chrono::DateTime::from_timestamp_millis(entry.started_at_ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default();
    context! {
        id => entry.id,
        time,
        key => entry.key_id,
        model => entry.model,
        endpoint => entry.endpoint,
        status => entry.status,
        failed => entry.status >= 400,
        error => entry.error_type,
        prompt => entry.prompt_tokens,
        cached => entry.cached_tokens,
        completion => entry.completion_tokens,
        cost => format!("${:.6}", svc_core::budget::micros_to_usd(entry.cost_micros)),
        ttft => entry.ttft_ms,
        duration => entry.duration_ms,
    }
}

pub async fn page(
    State(state): State<AppState>,
    who: SignedIn,
    Query(filter): Query<RequestsPageQuery>,
) -> Result<(axum::http::StatusCode, Html<String>), PageError> {
    let (status, found, error, has_more) = match filter.to_query() {
        Ok(mut query) => {
            if !who.user.is_admin {
                query.user_ids = vec![who.user.id.to_string()];
            }
            let (found, has_more) = rows(&state, &query)
                .await
                .map_err(|e| PageError::Internal(format!("reading the request log: {e}")))?;
            (axum::http::StatusCode::OK, found, None, has_more)
        }
        Err(message) => (
            axum::http::StatusCode::BAD_REQUEST,
            Vec::new(),
            Some(message),
            false,
        ),
    };
    let paged = filter.after.as_deref().is_some_and(|a| !a.is_empty());
    let newest = paged.then(|| filter.link(None));
    let older = match found.last() {
        Some(last) if has_more => Some(filter.link(Some(&last.id))),
        _ => None,
    };
    let rows: Vec<Value> = found.into_iter().map(row).collect();
    let page = render(
        "requests.html",
        context! {
            ..layout(&who, "requests"),
            ..context! {
                rows,
                everyone => who.user.is_admin,
                filter => context! {
                    key => filter.key.clone(),
                    model => filter.model.clone(),
                    status => filter.status.clone(),
                    from => filter.from.clone(),
                    to => filter.to.clone(),
                },
                error,
                newest,
                older,
            }
        },
    )?;
    Ok((status, page))
}
