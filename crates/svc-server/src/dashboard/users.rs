//! The Users section (admins only): every account with its state and
//! organization role; disable, enable and delete, each behind a
//! confirmation page, and the role (owner or reader) set in the list, each
//! a POST with the session's CSRF token. To anyone else these pages do not exist
//! (404), so account ids cannot be probed. An admin cannot act on their own
//! account here, and the store refuses to remove the last enabled admin.

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use minijinja::{Value, context};
use serde::Deserialize;
use svc_core::{AccountChange, UserId, UserRecord};

use super::pages::{PageError, render, time};
use super::session::SignedIn;
use super::session::layout;
use crate::state::AppState;

/// What can be done to an account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Disable,
    Enable,
    Delete,
}

impl Action {
    fn parse(text: &str) -> Result<Self, PageError> {
        match text {
            "disable" => Ok(Action::Disable),
            "enable" => Ok(Action::Enable),
            "delete" => Ok(Action::Delete),
            _ => Err(PageError::NotFound),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Action::Disable => "disable",
            Action::Enable => "enable",
            Action::Delete => "delete",
        }
    }

    /// Whether the action applies to `user` as it is now.
    fn applies_to(self, user: &UserRecord) -> bool {
        match self {
            Action::Disable => user.disabled_at.is_none(),
            Action::Enable => user.disabled_at.is_some(),
            Action::Delete => true,
        }
    }
}

fn user_row(user: &UserRecord, who: &SignedIn) -> Value {
    context! {
        id => user.id.0.clone(),
        email => user.email.clone(),
        is_admin => user.is_admin,
        created => time(user.created_at),
        disabled => user.disabled_at.map(time),
        is_you => user.id == who.user.id,
    }
}

/// Only admins see this section; to others it does not exist.
fn admin_only(who: &SignedIn) -> Result<(), PageError> {
    if who.user.is_admin {
        Ok(())
    } else {
        Err(PageError::NotFound)
    }
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    done: Option<String>,
    email: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
    who: SignedIn,
    Query(query): Query<ListQuery>,
) -> Result<Html<String>, PageError> {
    admin_only(&who)?;
    let done = match (query.done.as_deref(), query.email) {
        (Some("disable"), Some(email)) => Some(format!(
            "{email} was disabled: its sessions ended and its keys are refused from now on."
        )),
        (Some("enable"), Some(email)) => Some(format!(
            "{email} was enabled: its keys that were not revoked work again."
        )),
        (Some("delete"), Some(email)) => Some(format!("{email} was deleted and its keys revoked.")),
        (Some("owner"), Some(email)) => Some(format!(
            "{email} is an organization owner: an admin of every project and account."
        )),
        (Some("reader"), Some(email)) => Some(format!(
            "{email} is a reader of the organization: no longer an admin. Its admin keys lose their reach from the next request."
        )),
        _ => None,
    };
    render_list(&state, &who, done, None).await
}

/// The Users page, with what was done or (a 400 when the caller says so)
/// why a change was refused.
async fn render_list(
    state: &AppState,
    who: &SignedIn,
    done: Option<String>,
    error: Option<String>,
) -> Result<Html<String>, PageError> {
    let users = state.accounts.list_users().await?;
    let rows: Vec<Value> = users.iter().map(|u| user_row(u, who)).collect();
    render(
        "users.html",
        context! { ..layout(who, "users"), ..context! { users => rows, done, error } },
    )
}

/// The Users page again, a 400, with `message`.
async fn refused(state: &AppState, who: &SignedIn, message: String) -> Result<Response, PageError> {
    let page = render_list(state, who, None, Some(message)).await?;
    Ok((StatusCode::BAD_REQUEST, page).into_response())
}

#[derive(Debug, Deserialize)]
pub struct RoleForm {
    csrf: String,
    #[serde(default)]
    role: String,
}

/// Makes an account an organization owner (an admin) or a reader, as the
/// admin API's `POST /v1/organization/users/{user_id}` does (audited as
/// `user.updated`). Not one's own account; never the last enabled owner.
pub async fn set_role(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<RoleForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    admin_only(&who)?;
    let user = state
        .accounts
        .user(&UserId(id))
        .await?
        .ok_or(PageError::NotFound)?;
    if user.id == who.user.id {
        let message = "You cannot change your own organization role. Ask another admin.";
        return refused(&state, &who, message.into()).await;
    }
    let admin = match form.role.as_str() {
        "owner" => true,
        "reader" => false,
        _ => {
            let message = "Choose a role from the list: owner or reader.";
            return refused(&state, &who, message.into()).await;
        }
    };
    match state.accounts.set_admin(&user, admin, &who.actor()).await? {
        AccountChange::Done | AccountChange::Unchanged => {}
        AccountChange::NotFound => return Err(PageError::NotFound),
        AccountChange::LastAdmin => {
            let message = format!(
                "{} is the last enabled organization owner and stays one: make another account an owner first.",
                user.email
            );
            return refused(&state, &who, message).await;
        }
    }
    let query =
        serde_urlencoded::to_string([("done", form.role.as_str()), ("email", user.email.as_str())])
            .unwrap_or_default();
    Ok(Redirect::to(&format!("/dashboard/users?{query}#{}", user.id)).into_response())
}

/// The account `id` for an admin other than its owner to act on.
async fn target(state: &AppState, who: &SignedIn, id: &str) -> Result<UserRecord, PageError> {
    admin_only(who)?;
    let user = state
        .accounts
        .user(&UserId(id.to_owned()))
        .await?
        .ok_or(PageError::NotFound)?;
    if user.id == who.user.id {
        return Err(PageError::BadRequest(
            "You cannot disable or delete your own account. Ask another admin.".into(),
        ));
    }
    Ok(user)
}

pub async fn confirm_page(
    State(state): State<AppState>,
    who: SignedIn,
    Path((id, action)): Path<(String, String)>,
) -> Result<Response, PageError> {
    let action = Action::parse(&action)?;
    let user = target(&state, &who, &id).await?;
    if !action.applies_to(&user) {
        return Ok(Redirect::to("/dashboard/users").into_response());
    }
    let page = render(
        "user_confirm.html",
        context! {
            ..layout(&who, "users"),
            ..context! { target => user_row(&user, &who), action => action.as_str() }
        },
    )?;
    Ok(page.into_response())
}

pub async fn act(
    State(state): State<AppState>,
    who: SignedIn,
    Path((id, action)): Path<(String, String)>,
    Form(form): Form<super::account::CsrfForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    let action = Action::parse(&action)?;
    let user = target(&state, &who, &id).await?;
    let actor = who.actor();
    let change = match action {
        Action::Disable => state.accounts.disable_user(&user, &actor).await?,
        Action::Enable => state.accounts.enable_user(&user, &actor).await?,
        Action::Delete => state.accounts.delete_user(&user, &actor).await?,
    };
    match change {
        AccountChange::Done | AccountChange::Unchanged => {
            let query = serde_urlencoded::to_string([
                ("done", action.as_str()),
                ("email", user.email.as_str()),
            ])
            .unwrap_or_default();
            Ok(Redirect::to(&format!("/dashboard/users?{query}")).into_response())
        }
        AccountChange::NotFound => Err(PageError::NotFound),
        AccountChange::LastAdmin => {
            let page = render(
                "message.html",
                context! {
                    ..layout(&who, "users"),
                    ..context! {
                        title => "Not possible",
                        message => format!(
                            "{} is the last enabled admin; make another account an admin first.",
                            user.email
                        ),
                        tone => "error",
                    }
                },
            )?;
            Ok((StatusCode::CONFLICT, page).into_response())
        }
    }
}
