//! The Projects section: organization owners see every project, create
//! projects, set a project's allowed models and MCP servers and its token
//! budget, and add
//! members or change their role; a project's owners see the projects they
//! own and manage their members (as their admin keys may in the admin
//! API). To anyone else the section does not exist (404), and neither does
//! a project the person cannot see, whatever its id.
//!
//! The changes themselves (checks and audit entries) are
//! [`svc_core::projects`]'s, shared with the admin API.

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use minijinja::{Value, context};
use serde::Deserialize;
use svc_core::projects::{self, ProjectChanges};
use svc_core::{
    AdminReach, KeyKind, KeyOrigin, KeyScope, KeyState, NewKey, ProjectId, ProjectRecord,
    ProjectRole, now,
};
use svc_core::{MemberRemoval, UserId};

use super::forms::{
    PERIODS, budget_bar, budget_fields, form_budget, form_mcp_servers, form_models, list_field,
    mcp_servers_text, models_text,
};
use super::pages::{PageError, render, time};
use super::session::SignedIn;
use super::session::layout;
use crate::budget::Scope;
use crate::state::AppState;

/// The projects `who` sees: all for an organization owner, those they own
/// otherwise; for someone who owns none, the section does not exist.
async fn visible_projects(
    state: &AppState,
    who: &SignedIn,
) -> Result<Vec<ProjectRecord>, PageError> {
    if who.user.is_admin {
        return Ok(state.store.list_projects().await?);
    }
    let owned = state.store.owned_projects(&who.user.id).await?;
    if owned.is_empty() {
        return Err(PageError::NotFound);
    }
    Ok(owned)
}

/// The project `id` if `who` sees it; otherwise the 404 of one that does
/// not exist.
async fn visible_project(
    state: &AppState,
    who: &SignedIn,
    id: &str,
) -> Result<ProjectRecord, PageError> {
    let id = ProjectId(id.to_owned());
    let sees = who.user.is_admin
        || state.store.project_role(&id, &who.user.id).await? == Some(ProjectRole::Owner);
    let found = if sees {
        state.store.project_by_id(&id).await?
    } else {
        None
    };
    found.ok_or(PageError::NotFound)
}

/// Only organization owners change projects.
fn organization_owner(who: &SignedIn) -> Result<(), PageError> {
    if who.user.is_admin {
        Ok(())
    } else {
        Err(PageError::NotFound)
    }
}

async fn project_row(state: &AppState, project: &ProjectRecord) -> Result<Value, PageError> {
    let members = state.store.list_project_members(&project.id).await?.len();
    let budget = state
        .admission
        .budgets
        .status(Scope::Project, &project.id.0, project.budget)
        .await;
    Ok(context! {
        id => project.id.0.clone(),
        name => project.name.clone(),
        models => models_text(&project.allowed_models),
        mcp_servers => mcp_servers_text(&project.allowed_mcp_servers),
        budget => budget_bar(budget, state.admission.budgets.alert_percent()),
        members,
    })
}

/// What a successful form said, by the code its redirect carries.
fn done_text(done: Option<&str>) -> Option<&'static str> {
    match done? {
        "created" => Some("The project was created."),
        "settings" => Some(
            "The project's models, MCP servers and budget were saved; its keys follow from their next request.",
        ),
        "member" => Some("The member was saved."),
        "removed" => Some(
            "The member was removed from the project. Their keys in it were left as they are: revoke them on the keys page if they should stop working.",
        ),
        _ => None,
    }
}

#[derive(Debug, Deserialize)]
pub struct DoneQuery {
    done: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
    who: SignedIn,
    Query(query): Query<DoneQuery>,
) -> Result<Html<String>, PageError> {
    render_list(&state, &who, done_text(query.done.as_deref()), None).await
}

/// The create form as it was sent, shown again with an error.
#[derive(Debug, Default, Deserialize)]
pub struct CreateForm {
    csrf: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    models: String,
    #[serde(default)]
    mcp_servers: String,
    #[serde(default)]
    tokens: String,
    #[serde(default)]
    unit: String,
    #[serde(default)]
    period: String,
}

async fn render_list(
    state: &AppState,
    who: &SignedIn,
    done: Option<&str>,
    error: Option<(String, &CreateForm)>,
) -> Result<Html<String>, PageError> {
    let mut rows = Vec::new();
    for project in visible_projects(state, who).await? {
        rows.push(project_row(state, &project).await?);
    }
    let (error, form) = match error {
        Some((message, form)) => (
            Some(message),
            context! {
                name => &form.name, models => &form.models,
                mcp_servers => &form.mcp_servers, tokens => &form.tokens,
                unit => &form.unit, period => &form.period,
            },
        ),
        None => (None, context! { period => "month" }),
    };
    render(
        "projects.html",
        context! {
            ..layout(who, "projects"),
            ..context! {
                projects => rows,
                can_create => who.user.is_admin,
                periods => PERIODS.to_vec(),
                done,
                error,
                form,
            }
        },
    )
}

pub async fn create(
    State(state): State<AppState>,
    who: SignedIn,
    Form(form): Form<CreateForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    organization_owner(&who)?;
    let checked = (|| {
        let name = projects::name(&form.name).map_err(|_| {
            format!(
                "Give the project a name of 1 to {} characters, on one line.",
                projects::MAX_NAME_CHARS
            )
        })?;
        Ok::<_, String>((
            name,
            form_models(&form.models)?,
            form_mcp_servers(&form.mcp_servers)?,
            form_budget(&form.tokens, &form.unit, &form.period)?,
        ))
    })();
    let (name, allowed_models, allowed_mcp_servers, budget) = match checked {
        Ok(checked) => checked,
        Err(message) => {
            let page = render_list(&state, &who, None, Some((message, &form))).await?;
            return Ok((StatusCode::BAD_REQUEST, page).into_response());
        }
    };
    let project = ProjectRecord {
        id: ProjectId::generate(),
        name,
        created_at: now(),
        archived_at: None,
        allowed_models,
        allowed_mcp_servers,
        budget,
    };
    state.projects.create(&who.actor(), &project).await?;
    Ok(Redirect::to(&format!("/dashboard/projects/{}?done=created", project.id)).into_response())
}

/// Which form on a project's page an error belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Settings,
    Members,
    AdminKey,
}

pub async fn show(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
    Query(query): Query<DoneQuery>,
) -> Result<Html<String>, PageError> {
    let project = visible_project(&state, &who, &id).await?;
    render_project(
        &state,
        &who,
        &project,
        done_text(query.done.as_deref()),
        None,
    )
    .await
}

/// The project page again, a 400, with `message` at `section`'s form and
/// what was `sent` in it.
async fn refused(
    state: &AppState,
    who: &SignedIn,
    project: &ProjectRecord,
    section: Section,
    message: String,
    sent: Value,
) -> Result<Response, PageError> {
    let page = render_project(state, who, project, None, Some((section, message, sent))).await?;
    Ok((StatusCode::BAD_REQUEST, page).into_response())
}

async fn render_project(
    state: &AppState,
    who: &SignedIn,
    project: &ProjectRecord,
    done: Option<&str>,
    error: Option<(Section, String, Value)>,
) -> Result<Html<String>, PageError> {
    let members: Vec<Value> = state
        .store
        .list_project_members(&project.id)
        .await?
        .into_iter()
        .map(|m| {
            context! {
                id => m.user_id.0,
                email => m.email,
                role => m.role.as_str(),
                added => time(m.added_at),
            }
        })
        .collect();
    let at = now();
    let keys: Vec<Value> = state
        .store
        .list_project_keys(&project.id)
        .await?
        .into_iter()
        .map(|k| {
            context! {
                name => k.name.clone(),
                hint => k.hint.clone(),
                kind => k.kind.name(),
                state => KeyState::of(&k, at).as_str(),
            }
        })
        .collect();
    let (settings_error, members_error, admin_key_error, sent) = match error {
        Some((Section::Settings, message, sent)) => (Some(message), None, None, sent),
        Some((Section::Members, message, sent)) => (None, Some(message), None, sent),
        Some((Section::AdminKey, message, sent)) => (None, None, Some(message), sent),
        None => (None, None, None, Value::from(())),
    };
    let settings = match (&settings_error, &project.budget) {
        (Some(_), _) => sent.clone(),
        (None, budget) => context! {
            models => list_field(project.allowed_models.0.as_ref()),
            mcp_servers => list_field(project.allowed_mcp_servers.0.as_ref()),
            ..budget_fields(*budget)
        },
    };
    let member_form = if members_error.is_some() {
        sent.clone()
    } else {
        context! { role => "member" }
    };
    let admin_key_form = if admin_key_error.is_some() {
        sent
    } else {
        Value::from(())
    };
    render(
        "project.html",
        context! {
            ..layout(who, "projects"),
            ..context! {
                project => project_row(state, project).await?,
                members,
                keys,
                can_change => who.user.is_admin,
                registered => state.mcp.labels().map(str::to_owned).collect::<Vec<_>>(),
                periods => PERIODS.to_vec(),
                done,
                settings_error,
                members_error,
                settings,
                member_form,
                admin_key_error,
                admin_key_form,
            }
        },
    )
}

#[derive(Debug, Deserialize)]
pub struct SettingsForm {
    csrf: String,
    #[serde(default)]
    models: String,
    /// Absent (a form from before MCP servers): the project's list is kept.
    #[serde(default)]
    mcp_servers: Option<String>,
    #[serde(default)]
    tokens: String,
    #[serde(default)]
    unit: String,
    #[serde(default)]
    period: String,
}

/// Sets a project's allowed models and MCP servers and its budget
/// (organization owners only: a project's owner cannot widen what the
/// organization allowed it).
pub async fn set_settings(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<SettingsForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    organization_owner(&who)?;
    let mut project = visible_project(&state, &who, &id).await?;
    let checked = (|| {
        Ok::<_, String>((
            form_models(&form.models)?,
            form.mcp_servers
                .as_deref()
                .map(form_mcp_servers)
                .transpose()?,
            form_budget(&form.tokens, &form.unit, &form.period)?,
        ))
    })();
    let (allowed_models, allowed_mcp_servers, budget) = match checked {
        Ok(checked) => checked,
        Err(message) => {
            let sent = context! {
                models => form.models, mcp_servers => form.mcp_servers, tokens => form.tokens,
                unit => form.unit, period => form.period,
            };
            return refused(&state, &who, &project, Section::Settings, message, sent).await;
        }
    };
    let changes = ProjectChanges {
        name: None,
        allowed_models: Some(allowed_models),
        allowed_mcp_servers,
        budget: Some(budget),
    };
    if !state
        .projects
        .update(&who.actor(), &mut project, changes)
        .await?
    {
        return Err(PageError::NotFound);
    }
    Ok(Redirect::to(&format!("/dashboard/projects/{}?done=settings", project.id)).into_response())
}

#[derive(Debug, Deserialize)]
pub struct MemberForm {
    csrf: String,
    #[serde(default)]
    email: String,
    #[serde(default)]
    role: String,
}

/// Adds an account to the project by email, or changes its role there.
pub async fn set_member(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<MemberForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    let project = visible_project(&state, &who, &id).await?;
    let email = form.email.trim().to_lowercase();
    let user = if email.is_empty() {
        None
    } else {
        state.accounts.user_by_email(&email).await?
    };
    let checked = match (ProjectRole::parse(&form.role), user) {
        (Err(_), _) => Err("Choose a role from the list: owner or member.".to_owned()),
        (Ok(_), None) => Err(format!(
            "There is no account with the email “{}”. The operator creates accounts with svc users create.",
            form.email.trim()
        )),
        (Ok(role), Some(user)) => Ok((role, user)),
    };
    let (role, user) = match checked {
        Ok(checked) => checked,
        Err(message) => {
            let sent = context! { email => form.email, role => form.role };
            return refused(&state, &who, &project, Section::Members, message, sent).await;
        }
    };
    state
        .projects
        .set_member(&who.actor(), &project, &user.id, role)
        .await?;
    Ok(Redirect::to(&format!("/dashboard/projects/{}?done=member", project.id)).into_response())
}

#[derive(Debug, Deserialize)]
pub struct AdminKeyForm {
    csrf: String,
    #[serde(default)]
    name: String,
}

/// Makes the signed-in person an admin key for this project (its owners,
/// and organization owners): it acts as them and reaches this project
/// only, whatever their roles become. This is how a project's owner gets
/// an admin key: nobody may make one for another account.
pub async fn create_admin_key(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<AdminKeyForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    let project = visible_project(&state, &who, &id).await?;
    let name = match projects::name(&form.name) {
        Ok(name) => name,
        Err(_) => {
            let message = "Give the key a name of at most 100 characters, on one line.".to_owned();
            let sent = context! { name => form.name };
            return refused(&state, &who, &project, Section::AdminKey, message, sent).await;
        }
    };
    let (key, record) = state
        .keys
        .create(
            NewKey {
                name,
                owner_id: Some(who.user.id.clone()),
                created_via: KeyOrigin::Dashboard,
                expires_in: None,
                scope: KeyScope {
                    project_id: Some(project.id.clone()),
                    kind: KeyKind::Admin(AdminReach::Project),
                    ..KeyScope::default()
                },
            },
            &who.actor(),
        )
        .await?;
    super::keys::show_once(&state, &who, &record, &key).await
}

/// Removes an account from the project (organization owners and the
/// project's owners, as for adding one); never its last owner. The
/// account's keys in the project are left as they are.
pub async fn remove_member(
    State(state): State<AppState>,
    who: SignedIn,
    Path((id, user_id)): Path<(String, String)>,
    Form(form): Form<super::account::CsrfForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    let project = visible_project(&state, &who, &id).await?;
    let user = UserId(user_id);
    match state
        .projects
        .remove_member(&who.actor(), &project, &user)
        .await?
    {
        MemberRemoval::Removed(_) => {}
        MemberRemoval::NotMember => return Err(PageError::NotFound),
        MemberRemoval::LastOwner => {
            let email = state
                .accounts
                .user(&user)
                .await?
                .map_or_else(|| user.0.clone(), |u| u.email);
            let message = format!(
                "{email} is the last owner of this project: make another member an owner first."
            );
            let sent = context! { role => "owner" };
            return refused(&state, &who, &project, Section::Members, message, sent).await;
        }
    }
    // Someone who removed themselves may no longer see the project.
    let to = match visible_project(&state, &who, &id).await {
        Ok(_) => format!("/dashboard/projects/{}?done=removed", project.id),
        Err(_) => "/dashboard/keys".to_owned(),
    };
    Ok(Redirect::to(&to).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollar_amounts_read_commas_only_as_thousands() {
        let usd = |text: &str| form_budget(text, "usd", "month").map(|b| b.map(|b| b.limit));
        assert_eq!(usd("2.50"), Ok(Some(2_500_000)));
        assert_eq!(usd("$1,250.5"), Ok(Some(1_250_500_000)));
        assert!(usd("2,50").is_err(), "a decimal comma is not 250");
        assert!(usd("12,5").is_err());
        assert_eq!(usd(""), Ok(None));
        assert!(form_budget("10", "eur", "month").is_err());
        assert_eq!(
            form_budget("1,000", "tokens", "day").map(|b| b.map(|b| b.limit)),
            Ok(Some(1000))
        );
    }
}
