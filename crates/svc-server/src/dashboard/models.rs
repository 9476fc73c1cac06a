//! The Models section: the models the signed-in person may use, each local
//! one with whether it is loaded, the memory it holds and how long it stays
//! loaded once idle. Organization owners (who may use the admin API's
//! `POST /v1/admin/models/load` and `…/unload`) also get a Load and an
//! Unload button per local model: POSTs with the session's CSRF token,
//! done and audited as the admin API does them ([`load_model`],
//! [`unload_model`]). To anyone else those POSTs do not exist (404).
//!
//! Who may use which model: an organization owner every model; anyone
//! else the models the default project allows (where the keys made on
//! this dashboard go) and those any of their active keys may use.
//!
//! Below them, when the operator registered MCP servers, the servers the
//! person may use, by the same rule: label, description and offered tools;
//! to organization owners every server, with its URL (a password in it
//! hidden) and its headers' names, as the admin API's
//! `GET /v1/organization/mcp_servers` shows them, never a header's value.

use axum::Form;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Redirect, Response};
use minijinja::{Value, context};
use serde::Deserialize;
use svc_core::{KeyRecord, KeyState, ProjectId, ProjectRecord, now};

use super::pages::{PageError, render};
use super::session::{SignedIn, layout};
use crate::error::ApiError;
use crate::registry::ModelRoute;
use crate::routes::models::{load_model, unload_model};
use crate::state::AppState;

/// `bytes` for people: `512 B`, `1.5 KiB`, `812.4 MiB`, `3.2 GiB`.
pub(crate) fn bytes_text(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = UNITS[0];
    for next in &UNITS[1..] {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = next;
    }
    format!("{value:.1} {unit}")
}

/// Seconds for people: `45 s`, `5 min`, `1 h 30 min`.
pub(crate) fn seconds_text(seconds: u64) -> String {
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3600 if seconds.is_multiple_of(60) => format!("{} min", seconds / 60),
        60..3600 => format!("{} min {} s", seconds / 60, seconds % 60),
        _ if seconds.is_multiple_of(3600) => format!("{} h", seconds / 3600),
        _ => format!("{} h {} min", seconds / 3600, (seconds % 3600) / 60),
    }
}

/// A model as the page shows it.
fn model_row(route: &ModelRoute) -> Value {
    let residency = route.engine.residence().map(|r| r.residency());
    match residency {
        Some(r) => context! {
            id => route.id.clone(),
            local => true,
            state => r.state.as_str(),
            memory => bytes_text(r.memory_bytes),
            keep_alive => match r.keep_alive {
                None => "forever (never unloaded to make room)".to_owned(),
                Some(d) => seconds_text(d.as_secs()),
            },
        },
        None => context! {
            id => route.id.clone(),
            local => false,
            state => "upstream",
            memory => route.engine.status().memory_bytes.map(bytes_text),
        },
    }
}

/// What someone other than an organization owner may use: what the
/// default project allows (where the keys made on this dashboard go) and
/// what any of their active keys may use.
struct Reach {
    default: Option<ProjectRecord>,
    keys: Vec<KeyRecord>,
}

impl Reach {
    async fn of(state: &AppState, who: &SignedIn) -> Result<Self, PageError> {
        let default = state
            .store
            .project_by_id(&ProjectId::default_project())
            .await?;
        let at = now();
        let keys = state
            .keys
            .list(Some(&who.user.id))
            .await?
            .into_iter()
            .filter(|k| KeyState::of(k, at) == KeyState::Active)
            .collect();
        Ok(Reach { default, keys })
    }

    fn model(&self, id: &str) -> bool {
        self.default
            .as_ref()
            .is_some_and(|d| d.allowed_models.allows(id))
            || self.keys.iter().any(|k| k.may_use(id))
    }

    fn mcp_server(&self, label: &str) -> bool {
        self.default
            .as_ref()
            .is_some_and(|d| d.allowed_mcp_servers.allows(label))
            || self.keys.iter().any(|k| k.may_use_mcp_server(label))
    }
}

/// The models `who` may use, in the server's order.
fn usable(state: &AppState, reach: Option<&Reach>) -> Vec<ModelRoute> {
    state
        .models
        .iter()
        .filter(|route| reach.is_none_or(|r| r.model(&route.id)))
        .cloned()
        .collect()
}

/// The registered MCP servers `who` may use, by label, as the page shows
/// them (`reach` `None`: an organization owner, who sees every server and
/// where it is); `None` when none is registered.
fn mcp_rows(state: &AppState, reach: Option<&Reach>) -> Option<Vec<Value>> {
    if state.mcp.servers.is_empty() {
        return None;
    }
    let rows = state
        .mcp
        .servers
        .iter()
        .filter(|(label, _)| reach.is_none_or(|r| r.mcp_server(label)))
        .map(|(label, server)| {
            let shown = &server.shown;
            let manager = reach.is_none();
            context! {
                label => label.clone(),
                description => shown.description.clone(),
                tools => shown.allowed_tools.clone(),
                url => manager.then(|| shown.url.clone()),
                headers => manager.then(|| shown.headers.clone()),
            }
        })
        .collect();
    Some(rows)
}

#[derive(Debug, Deserialize)]
pub struct DoneQuery {
    done: Option<String>,
    model: Option<String>,
}

pub async fn page(
    State(state): State<AppState>,
    who: SignedIn,
    Query(query): Query<DoneQuery>,
) -> Result<Html<String>, PageError> {
    let done = match (query.done.as_deref(), query.model) {
        (Some("loaded"), Some(model)) => Some(format!("{model} is loaded.")),
        (Some("unloaded"), Some(model)) => Some(format!("{model} was unloaded.")),
        (Some("when_idle"), Some(model)) => Some(format!(
            "{model} is in use: it is unloaded when its last running request ends."
        )),
        (Some("not_loaded"), Some(model)) => Some(format!("{model} was not loaded.")),
        _ => None,
    };
    render_page(&state, &who, done, None).await
}

/// The Models page, with what was done or why it was not.
async fn render_page(
    state: &AppState,
    who: &SignedIn,
    done: Option<String>,
    error: Option<String>,
) -> Result<Html<String>, PageError> {
    let reach = if who.user.is_admin {
        None
    } else {
        Some(Reach::of(state, who).await?)
    };
    let rows: Vec<Value> = usable(state, reach.as_ref())
        .iter()
        .map(model_row)
        .collect();
    render(
        "models.html",
        context! {
            ..layout(who, "models"),
            ..context! {
                models => rows,
                mcp_servers => mcp_rows(state, reach.as_ref()),
                can_manage => who.user.is_admin,
                done,
                error,
            }
        },
    )
}

#[derive(Debug, Deserialize)]
pub struct ModelForm {
    csrf: String,
    #[serde(default)]
    model: String,
}

/// Loads the model of the form, as `POST /v1/admin/models/load` does
/// (audited as `model.loaded`): organization owners only.
pub async fn load(
    State(state): State<AppState>,
    who: SignedIn,
    Form(form): Form<ModelForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    manager(&who)?;
    match load_model(&state, &form.model, &who.actor()).await {
        Ok(_) => Ok(done(&form.model, "loaded")),
        Err(e) => refused(&state, &who, e).await,
    }
}

/// Unloads the model of the form, as `POST /v1/admin/models/unload` does
/// (audited as `model.unloaded`): organization owners only.
pub async fn unload(
    State(state): State<AppState>,
    who: SignedIn,
    Form(form): Form<ModelForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    manager(&who)?;
    match unload_model(&state, &form.model, false, &who.actor()).await {
        Ok((_, unload)) => Ok(done(
            &form.model,
            crate::routes::models::unload_text(unload),
        )),
        Err(e) => refused(&state, &who, e).await,
    }
}

/// Only organization owners load and unload models; to others these forms
/// do not exist.
fn manager(who: &SignedIn) -> Result<(), PageError> {
    if who.user.is_admin {
        Ok(())
    } else {
        Err(PageError::NotFound)
    }
}

/// Back to the page, saying what was done to `model`.
fn done(model: &str, what: &str) -> Response {
    let query = serde_urlencoded::to_string([("done", what), ("model", model)]).unwrap_or_default();
    Redirect::to(&format!("/dashboard/models?{query}")).into_response()
}

/// The page again, with the message of `error` (a model that does not
/// exist, an upstream's, one that cannot be loaded now), and the status
/// and `Retry-After` the API would answer it with.
async fn refused(state: &AppState, who: &SignedIn, error: ApiError) -> Result<Response, PageError> {
    let message = error.body().error.message;
    let page = render_page(state, who, None, Some(message)).await?;
    let api = error.into_response();
    let mut response = (api.status(), page).into_response();
    if let Some(wait) = api.headers().get(header::RETRY_AFTER) {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, wait.clone());
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_times_read_as_people_say_them() {
        assert_eq!(bytes_text(0), "0 B");
        assert_eq!(bytes_text(1023), "1023 B");
        assert_eq!(bytes_text(1536), "1.5 KiB");
        assert_eq!(bytes_text(300 * 1024 * 1024), "300.0 MiB");
        assert_eq!(bytes_text(3 * 1024 * 1024 * 1024 + 1), "3.0 GiB");
        assert_eq!(seconds_text(45), "45 s");
        assert_eq!(seconds_text(300), "5 min");
        assert_eq!(seconds_text(90), "1 min 30 s");
        assert_eq!(seconds_text(7200), "2 h");
        assert_eq!(seconds_text(5400), "1 h 30 min");
    }
}
