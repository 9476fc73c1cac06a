//! The Batches page: a project's batches (the Batch API), newest first,
//! with their status, counts and links to download their output and error
//! files. Organization owners see every project's; anyone else the
//! projects they are a member of.

use axum::extract::{Path, Query, State};
use axum::response::{Html, IntoResponse, Response};
use minijinja::{Value, context};
use serde::Deserialize;
use svc_core::ProjectRecord;
use svc_core::batch::BatchRecord;

use super::pages::{PageError, render};
use super::session::SignedIn;
use super::session::layout;
use crate::state::AppState;

/// Batches shown.
const PAGE: i64 = 50;

#[derive(Debug, Default, Deserialize)]
pub struct BatchesPageQuery {
    project: Option<String>,
}

/// The projects whose batches `who` sees.
async fn visible_projects(
    state: &AppState,
    who: &SignedIn,
) -> Result<Vec<ProjectRecord>, PageError> {
    let all = state.store.list_projects().await?;
    if who.user.is_admin {
        return Ok(all);
    }
    let mut member = Vec::new();
    for project in all {
        if state
            .store
            .project_role(&project.id, &who.user.id)
            .await?
            .is_some()
        {
            member.push(project);
        }
    }
    Ok(member)
}

fn time(seconds: Option<i64>) -> Option<String> {
    seconds
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
}

fn row(project: &ProjectRecord, batch: &BatchRecord) -> Value {
    let link = |file: &Option<String>| {
        file.as_ref()
            .map(|id| format!("/dashboard/batches/{}/files/{id}", project.id.0))
    };
    let done = batch.completed + batch.failed;
    context! {
        id => batch.id.clone(),
        created => time(Some(batch.created_at)),
        ended => time(batch.completed_at.or(batch.cancelled_at).or(batch.expired_at).or(batch.failed_at)),
        endpoint => batch.endpoint.clone(),
        status => batch.status.as_str(),
        total => batch.total,
        completed => batch.completed,
        failed => batch.failed,
        percent => if batch.total > 0 { done * 100 / batch.total } else { 100 },
        output => link(&batch.output_file_id),
        errors => link(&batch.error_file_id),
    }
}

pub async fn page(
    State(state): State<AppState>,
    who: SignedIn,
    Query(query): Query<BatchesPageQuery>,
) -> Result<Html<String>, PageError> {
    let projects = visible_projects(&state, &who).await?;
    let chosen = match query.project.as_deref().filter(|p| !p.is_empty()) {
        Some(id) => Some(
            projects
                .iter()
                .find(|p| p.id.0 == id)
                .ok_or(PageError::NotFound)?,
        ),
        None => projects.first(),
    };
    let rows: Vec<Value> = match chosen {
        Some(project) => state
            .store
            .list_batches(&project.id, None, PAGE)
            .await?
            .iter()
            .map(|b| row(project, b))
            .collect(),
        None => Vec::new(),
    };
    let choices: Vec<Value> = projects
        .iter()
        .map(|p| context! { id => p.id.0.clone(), name => p.name.clone(), chosen => chosen.is_some_and(|c| c.id == p.id) })
        .collect();
    render(
        "batches.html",
        context! {
            ..layout(&who, "batches"),
            ..context! {
                rows,
                projects => choices,
                project => chosen.map(|p| p.name.clone()),
            }
        },
    )
}

/// A batch file's bytes, for a member of its project.
pub async fn download(
    State(state): State<AppState>,
    who: SignedIn,
    Path((project, file)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let projects = visible_projects(&state, &who).await?;
    let project = projects
        .iter()
        .find(|p| p.id.0 == project)
        .ok_or(PageError::NotFound)?;
    let file = state
        .store
        .file(&project.id, &file)
        .await?
        .ok_or(PageError::NotFound)?;
    Ok(crate::batches::files::download(&state, &file)
        .await
        .into_response())
}
