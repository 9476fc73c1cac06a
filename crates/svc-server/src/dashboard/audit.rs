//! The Audit log page (organization owners only; to anyone else it does
//! not exist): the admin API's entries, newest first, filtered by event,
//! actor, project and dates through a plain GET form, paged by links.

use axum::extract::{Query, State};
use axum::response::Html;
use minijinja::{Value, context};
use serde::Deserialize;
use svc_core::audit::{AuditEntry, AuditQuery, EVENT_TYPES};

use super::pages::{PageError, form_day, form_one, render, time};
use super::session::SignedIn;
use super::session::layout;
use crate::routes::audit_logs::entries;
use crate::state::AppState;

/// Entries per page.
const PAGE: usize = 50;

/// The page's query: the filter form's fields and a cursor.
#[derive(Debug, Default, Deserialize)]
pub struct AuditPageQuery {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    actor: String,
    #[serde(default)]
    project: String,
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
    after: Option<String>,
    before: Option<String>,
}

impl AuditPageQuery {
    /// The filters as the store's query; a date that is not `YYYY-MM-DD`
    /// is the person's error, told on the page.
    fn to_query(&self) -> Result<AuditQuery, String> {
        let (day, one) = (form_day, form_one);
        let actor = self.actor.trim();
        let (actor_ids, actor_emails) = if actor.contains('@') {
            (Vec::new(), vec![actor.to_lowercase()])
        } else {
            (one(actor), Vec::new())
        };
        Ok(AuditQuery {
            event_types: one(&self.kind),
            actor_ids,
            actor_emails,
            project_ids: one(&self.project),
            gte: day(&self.from, "from")?,
            // The whole "to" day is included.
            lt: day(&self.to, "to")?.map(|t| t + 86_400),
            after: self.after.clone().filter(|a| !a.is_empty()),
            before: self.before.clone().filter(|b| !b.is_empty()),
            limit: PAGE,
            ..AuditQuery::default()
        })
    }

    /// The page's address with these filters and `cursor` (`after` or
    /// `before`, and an entry id).
    fn link(&self, cursor: (&str, &str)) -> String {
        let pairs = [
            ("type", self.kind.as_str()),
            ("actor", self.actor.as_str()),
            ("project", self.project.as_str()),
            ("from", self.from.as_str()),
            ("to", self.to.as_str()),
            cursor,
        ];
        let kept: Vec<(&str, &str)> = pairs.into_iter().filter(|(_, v)| !v.is_empty()).collect();
        let query = serde_urlencoded::to_string(kept).unwrap_or_default();
        format!("/dashboard/audit?{query}")
    }
}

/// Who acted, in words: an account's email, a key's id, or the operator.
fn actor_text(actor: &serde_json::Value) -> String {
    let email = |user: &serde_json::Value| user["email"].as_str().map(str::to_owned);
    match actor["type"].as_str() {
        Some("session") => email(&actor["session"]["user"]).unwrap_or_else(|| "unknown".into()),
        Some("api_key") => {
            let key = &actor["api_key"];
            let id = key["id"].as_str().unwrap_or("unknown key");
            match email(&key["user"]) {
                Some(email) => format!("key {id} of {email}"),
                None => format!("key {id} (operator)"),
            }
        }
        Some("operator") => "operator (command line)".into(),
        _ => "unknown".into(),
    }
}

fn entry_row(entry: AuditEntry) -> Value {
    context! {
        id => entry.id,
        time => time(entry.effective_at),
        kind => entry.kind,
        actor => actor_text(&entry.actor),
        address => entry.actor["session"]["ip_address"].as_str().map(str::to_owned),
        project => entry.project.map(|(id, name)| format!("{name} ({id})")),
        details => entry.details.to_string(),
    }
}

pub async fn page(
    State(state): State<AppState>,
    who: SignedIn,
    Query(filter): Query<AuditPageQuery>,
) -> Result<(axum::http::StatusCode, Html<String>), PageError> {
    if !who.user.is_admin {
        return Err(PageError::NotFound);
    }
    let projects: Vec<Value> = state
        .store
        .list_projects()
        .await?
        .into_iter()
        .map(|p| context! { id => p.id.0, name => p.name })
        .collect();
    let (status, found, error, has_more) = match filter.to_query() {
        Ok(query) => {
            let (found, has_more) = entries(&state, &query)
                .await
                .map_err(|e| PageError::Internal(format!("reading the audit log: {e}")))?;
            (axum::http::StatusCode::OK, found, None, has_more)
        }
        Err(message) => (
            axum::http::StatusCode::BAD_REQUEST,
            Vec::new(),
            Some(message),
            false,
        ),
    };
    let backwards = filter.before.as_deref().is_some_and(|b| !b.is_empty());
    let forwards = filter.after.as_deref().is_some_and(|a| !a.is_empty());
    let newer = match found.first() {
        Some(first) if forwards || (backwards && has_more) => {
            Some(filter.link(("before", &first.id)))
        }
        _ => None,
    };
    let older = match found.last() {
        Some(last) if backwards || has_more => Some(filter.link(("after", &last.id))),
        _ => None,
    };
    let rows: Vec<Value> = found.into_iter().map(entry_row).collect();
    let page = render(
        "audit.html",
        context! {
            ..layout(&who, "audit"),
            ..context! {
                entries => rows,
                event_types => EVENT_TYPES.to_vec(),
                projects,
                filter => context! {
                    kind => filter.kind.clone(),
                    actor => filter.actor.clone(),
                    project => filter.project.clone(),
                    from => filter.from.clone(),
                    to => filter.to.clone(),
                },
                error,
                newer,
                older,
                retention_days => state.audit_retention_days,
            }
        },
    )?;
    Ok((status, page))
}
