//! The API keys section: the list, Create key (the key shown exactly once;
//! optionally restricted to some models and registered MCP servers and,
//! for a `restricted` key, some permissions), the models and MCP servers a
//! key may use changed later, and revocation with a confirmation step.
//! Lists and kinds are read and checked as the admin API reads them
//! ([`svc_core::projects`]); admin keys are not made here.

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use minijinja::{Value, context};
use serde::Deserialize;
use svc_core::keys::{DEFAULT_ROTATION_GRACE, MAX_ROTATION_GRACE};
use svc_core::{
    ApiKey, KeyId, KeyOrigin, KeyRecord, KeyScope, KeyState, NewKey, Permission, UserId, now,
};

use super::forms::{
    PERIODS, budget_bar, budget_fields, form_budget, form_mcp_servers, form_models, list_field,
    mcp_servers_text, models_text,
};
use super::pages::{PageError, render, time};
use super::session::SignedIn;
use super::session::layout;
use crate::budget::Scope;
use crate::state::AppState;

/// Longest key name accepted.
const MAX_NAME_CHARS: usize = 100;

/// The expiry choices of the form, in days (`None` never expires).
const EXPIRY_CHOICES: &[(&str, &str, Option<i64>)] = &[
    ("never", "Never", None),
    ("7d", "7 days", Some(7)),
    ("30d", "30 days", Some(30)),
    ("90d", "90 days", Some(90)),
    ("365d", "1 year", Some(365)),
];

/// The grace periods the rotate form offers, in seconds (24 hours first
/// chosen, as the admin API's default).
const GRACE_CHOICES: &[(&str, &str, i64)] = &[
    ("0", "No time: refuse it now", 0),
    ("1h", "1 hour", 3_600),
    ("24h", "24 hours", DEFAULT_ROTATION_GRACE),
    ("7d", "7 days", 7 * 86_400),
    ("30d", "30 days", MAX_ROTATION_GRACE),
];

/// What a permission a dashboard key may be restricted to allows, as the
/// form says it.
fn permission_text(permission: Permission) -> &'static str {
    match permission {
        Permission::ModelRequest => "chat completions and messages",
        Permission::ResponsesWrite => "create and delete responses",
        Permission::ResponsesRead => "read stored responses",
        Permission::ModelRead => "list the models",
        Permission::UsageRead => "read usage (an admin account's keys)",
        Permission::FilesWrite => "upload and delete files (the Batch API)",
        Permission::FilesRead => "list and download files",
        Permission::BatchWrite => "create and cancel batches",
        Permission::BatchRead => "read batches",
        // Admin keys only: not offered here.
        Permission::ManagementRead | Permission::ManagementWrite => "the admin API",
    }
}

/// The key kinds the create form offers.
const KIND_CHOICES: &[&str] = &["all", "restricted"];

/// A key as the list shows it; `rotated_into` is whether another key
/// replaced it by rotation.
fn key_row(key: &KeyRecord, owners: &[(UserId, String)], rotated_into: bool) -> Value {
    let at = now();
    let state = KeyState::of(key, at);
    let owner = key.owner_id.as_ref().map(|id| {
        owners
            .iter()
            .find(|(uid, _)| uid == id)
            .map(|(_, email)| email.clone())
            .unwrap_or_else(|| id.0.clone())
    });
    context! {
        id => key.id.0.clone(),
        name => key.name.clone(),
        hint => key.hint.clone(),
        created => time(key.created_at),
        last_used => key.last_used_at.map(time),
        expires => key.expires_at.map(time),
        state => state.as_str(),
        active => state == KeyState::Active,
        // A disabled account's keys can still be revoked for good.
        revocable => matches!(state, KeyState::Active | KeyState::Disabled),
        created_via => match key.created_via {
            KeyOrigin::Dashboard => "Dashboard",
            KeyOrigin::Device => "Device login",
            KeyOrigin::Cli => "Operator (svc keys)",
            KeyOrigin::Api => "Admin API",
        },
        owner => owner,
        kind => key.kind.name(),
        // What a restricted key may do (the other kinds say it by name).
        permissions => matches!(key.kind, svc_core::KeyKind::Restricted(_))
            .then(|| key.kind.permissions().iter().map(|p| p.as_str()).collect::<Vec<_>>()),
        models => models_text(&key.allowed_models),
        mcp_servers => mcp_servers_text(&key.allowed_mcp_servers),
        rpm => key.limits.requests_per_minute,
        tpm => key.limits.tokens_per_minute,
        rotated_into,
    }
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    revoked: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
    who: SignedIn,
    Query(query): Query<ListQuery>,
) -> Result<Html<String>, PageError> {
    render_list(&state, &who, query.revoked, None).await
}

/// The list and the create form; `error` is why the form that was `sent`
/// was refused.
async fn render_list(
    state: &AppState,
    who: &SignedIn,
    revoked: Option<String>,
    error: Option<(String, Value)>,
) -> Result<Html<String>, PageError> {
    let owner = (!who.user.is_admin).then_some(&who.user.id);
    let keys = state.keys.list(owner).await?;
    let owners: Vec<(UserId, String)> = if who.user.is_admin {
        state
            .accounts
            .list_users()
            .await?
            .into_iter()
            .map(|u| (u.id, u.email))
            .collect()
    } else {
        Vec::new()
    };
    let revoked_name = match revoked {
        Some(id) => keys.iter().find(|k| k.id.0 == id).map(|k| k.name.clone()),
        None => None,
    };
    let mut rows = Vec::with_capacity(keys.len());
    for k in &keys {
        let replaced = keys.iter().any(|n| n.rotated_from.as_ref() == Some(&k.id));
        rows.push(context! {
            ..key_row(k, &owners, replaced),
            ..context! {
                budget => key_budget(state, k).await,
                // The new key acts as its owner: only they may rotate it.
                rotatable => k.owner_id.as_ref() == Some(&who.user.id),
            }
        });
    }
    let (error, form) = match error {
        Some((message, sent)) => (Some(message), sent),
        None => (None, context! { expires => "never", kind => "all" }),
    };
    let choices: Vec<Value> = EXPIRY_CHOICES
        .iter()
        .map(|(value, label, _)| context! { value => *value, label => *label })
        .collect();
    render(
        "keys.html",
        context! {
            ..layout(who, "keys"),
            ..context! {
                keys => rows,
                expiry_choices => choices,
                kind_choices => KIND_CHOICES.to_vec(),
                permission_choices => permission_choices(),
                revoked_name,
                error,
                form,
                show_owner => who.user.is_admin,
            }
        },
    )
}

/// The permissions a restricted key made here may have: every one but the
/// management ones (admin keys are not made on the dashboard).
fn permission_choices() -> Vec<Value> {
    Permission::ALL
        .into_iter()
        .filter(|p| !p.is_management())
        .map(|p| {
            let name = p.as_str();
            context! { value => name, id => name.replace('.', "-"), what => permission_text(p) }
        })
        .collect()
}

/// The create form as sent. Read from its pairs: `permissions` repeats,
/// one per ticked box.
#[derive(Debug, Default)]
struct CreateForm {
    csrf: String,
    name: String,
    expires: Option<String>,
    models: String,
    mcp_servers: String,
    kind: String,
    permissions: Vec<String>,
}

impl CreateForm {
    fn from_pairs(pairs: Vec<(String, String)>) -> Self {
        let mut form = CreateForm::default();
        for (field, value) in pairs {
            match field.as_str() {
                "csrf" => form.csrf = value,
                "name" => form.name = value,
                "expires" => form.expires = Some(value),
                "models" => form.models = value,
                "mcp_servers" => form.mcp_servers = value,
                "kind" => form.kind = value,
                "permissions" => form.permissions.push(value),
                _ => {}
            }
        }
        form
    }

    /// The fields as sent, to show again with an error.
    fn sent(&self) -> Value {
        context! {
            name => &self.name,
            expires => self.expires.as_deref().unwrap_or("never"),
            models => &self.models,
            mcp_servers => &self.mcp_servers,
            kind => if self.kind.is_empty() { "all" } else { self.kind.as_str() },
            permissions => &self.permissions,
        }
    }

    /// What the form asks for, checked; the message to show otherwise.
    fn checked(&self) -> Result<(String, Option<i64>, KeyScope), String> {
        let name = self.name.trim();
        if name.is_empty() {
            return Err("Give the key a name that says where it is used.".into());
        }
        if name.chars().count() > MAX_NAME_CHARS || name.chars().any(char::is_control) {
            return Err("Use a name of at most 100 characters, on one line.".into());
        }
        let choice = self.expires.as_deref().unwrap_or("never");
        let Some((_, _, days)) = EXPIRY_CHOICES.iter().find(|(v, _, _)| *v == choice) else {
            return Err("Choose an expiry from the list.".into());
        };
        let kind = match self.kind.as_str() {
            "" => "all",
            kind if KIND_CHOICES.contains(&kind) => kind,
            _ => return Err("Choose a kind from the list: all or restricted.".into()),
        };
        if kind == "all" && !self.permissions.is_empty() {
            return Err(
                "Permissions are for a restricted key: choose the kind restricted, or untick them."
                    .into(),
            );
        }
        if kind == "restricted" && self.permissions.is_empty() {
            return Err("Tick at least one permission for a restricted key.".into());
        }
        let kind = svc_core::projects::key_kind(kind, &self.permissions)
            .map_err(|_| "Choose permissions from the list.".to_owned())?;
        let scope = KeyScope {
            kind,
            allowed_models: form_models(&self.models)?,
            allowed_mcp_servers: form_mcp_servers(&self.mcp_servers)?,
            ..KeyScope::default()
        };
        Ok((name.to_owned(), *days, scope))
    }
}

pub async fn create(
    State(state): State<AppState>,
    who: SignedIn,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let form = CreateForm::from_pairs(pairs);
    who.check_csrf(&form.csrf)?;
    let (name, days, scope) = match form.checked() {
        Ok(checked) => checked,
        Err(message) => {
            let page = render_list(&state, &who, None, Some((message, form.sent()))).await?;
            return Ok((axum::http::StatusCode::BAD_REQUEST, page).into_response());
        }
    };
    let (key, record) = state
        .keys
        .create(
            NewKey {
                name,
                owner_id: Some(who.user.id.clone()),
                created_via: KeyOrigin::Dashboard,
                expires_in: days.map(|d| d * 86_400),
                scope,
            },
            &who.actor(),
        )
        .await?;
    show_once(&state, &who, &record, &key).await
}

/// Redirects to the page that shows a new key once: until then the key is
/// kept sealed under the session's token.
pub(super) async fn show_once(
    state: &AppState,
    who: &SignedIn,
    record: &KeyRecord,
    key: &ApiKey,
) -> Result<Response, PageError> {
    state
        .accounts
        .put_flash(&who.token, &format!("{}\n{}", record.id, key.expose()))
        .await?;
    Ok(Redirect::to("/dashboard/keys/new").into_response())
}

/// The rotate form: how long the old key keeps working.
pub async fn rotate_page(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
) -> Result<Html<String>, PageError> {
    let key = rotatable_key(&state, &who, &id).await?;
    let choices: Vec<Value> = GRACE_CHOICES
        .iter()
        .map(|(value, label, seconds)| {
            context! { value => *value, label => *label, default => *seconds == DEFAULT_ROTATION_GRACE }
        })
        .collect();
    render(
        "rotate.html",
        context! {
            ..layout(&who, "keys"),
            ..context! { key => key_row(&key, &[], false), grace_choices => choices }
        },
    )
}

#[derive(Debug, Deserialize)]
pub struct RotateForm {
    csrf: String,
    grace: String,
}

/// Rotates the key and shows the new one once.
pub async fn rotate(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<RotateForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    let key = rotatable_key(&state, &who, &id).await?;
    let Some((_, _, grace)) = GRACE_CHOICES.iter().find(|(v, _, _)| *v == form.grace) else {
        return Err(PageError::BadRequest(
            "Choose a grace period from the list.".into(),
        ));
    };
    let rotated = match KeyState::of(&key, now()) {
        KeyState::Active => state.keys.rotate(&key, *grace, &who.actor()).await?,
        _ => None,
    };
    let Some((secret, record)) = rotated else {
        return Err(PageError::BadRequest(
            "Only an active key can be rotated.".into(),
        ));
    };
    show_once(&state, &who, &record, &secret).await
}

/// The page that shows a new key, once: reloading it finds nothing.
pub async fn created(State(state): State<AppState>, who: SignedIn) -> Result<Response, PageError> {
    let Some(flash) = state.accounts.take_flash(&who.token).await? else {
        return Ok(Redirect::to("/dashboard/keys").into_response());
    };
    let Some((id, secret)) = flash.split_once('\n') else {
        return Ok(Redirect::to("/dashboard/keys").into_response());
    };
    let key = state.keys.get(&KeyId(id.to_owned())).await?;
    let name = key.map(|k| k.name).unwrap_or_default();
    let page = render(
        "key_created.html",
        context! { ..layout(&who, "keys"), ..context! { secret, name } },
    )?;
    Ok(page.into_response())
}

/// The key `id` if `who` may manage it (their own, or any for an admin);
/// otherwise not found, so ids of others' keys cannot be probed.
async fn own_key(state: &AppState, who: &SignedIn, id: &str) -> Result<KeyRecord, PageError> {
    let key = state.keys.get(&KeyId(id.to_owned())).await?;
    match key {
        Some(key) if who.user.is_admin || key.owner_id.as_ref() == Some(&who.user.id) => Ok(key),
        _ => Err(PageError::NotFound),
    }
}

/// The key `id` if `who` may rotate it: their own only, since the new key
/// acts as its owner (an admin may revoke another's key, not take over
/// its successor). Another's key is not found, as in [`own_key`].
async fn rotatable_key(state: &AppState, who: &SignedIn, id: &str) -> Result<KeyRecord, PageError> {
    let key = own_key(state, who, id).await?;
    if key.owner_id.as_ref() != Some(&who.user.id) {
        return Err(PageError::NotFound);
    }
    Ok(key)
}

pub async fn revoke_page(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
) -> Result<Html<String>, PageError> {
    let key = own_key(&state, &who, &id).await?;
    render(
        "revoke.html",
        context! { ..layout(&who, "keys"), ..context! { key => key_row(&key, &[], false) } },
    )
}

pub async fn revoke(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<super::account::CsrfForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    let key = own_key(&state, &who, &id).await?;
    state.keys.revoke(&key.id, &who.actor()).await?;
    Ok(Redirect::to(&format!("/dashboard/keys?revoked={}", key.id)).into_response())
}

/// The access form (the key's owner, or an admin): which models and which
/// registered MCP servers the key may use, within its project's.
pub async fn access_page(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
) -> Result<Html<String>, PageError> {
    let key = own_key(&state, &who, &id).await?;
    let sent = context! {
        models => list_field(key.allowed_models.0.as_ref()),
        mcp_servers => list_field(key.allowed_mcp_servers.0.as_ref()),
    };
    render_access(&state, &who, &key, sent, None).await
}

async fn render_access(
    state: &AppState,
    who: &SignedIn,
    key: &KeyRecord,
    form: Value,
    error: Option<String>,
) -> Result<Html<String>, PageError> {
    let project = state.store.project_by_id(&key.project_id).await?;
    let project_models = project.as_ref().map(|p| models_text(&p.allowed_models));
    let project_mcp_servers = project
        .as_ref()
        .map(|p| mcp_servers_text(&p.allowed_mcp_servers));
    render(
        "key_access.html",
        context! {
            ..layout(who, "keys"),
            ..context! {
                key => key_row(key, &[], false),
                project_name => project.map(|p| p.name),
                project_models,
                project_mcp_servers,
                registered => state.mcp.labels().map(str::to_owned).collect::<Vec<_>>(),
                form,
                error,
            }
        },
    )
}

#[derive(Debug, Deserialize)]
pub struct AccessForm {
    csrf: String,
    #[serde(default)]
    models: String,
    /// Absent (a form from before MCP servers): the key's list is kept.
    #[serde(default)]
    mcp_servers: Option<String>,
}

/// Sets the models and the MCP servers the key may use, from its next
/// request, on every replica: each list that changed, audited as
/// `api_key.updated` (as a key's budget change is); one that did not is
/// neither written nor audited.
pub async fn set_access(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<AccessForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    let key = own_key(&state, &who, &id).await?;
    let servers = form
        .mcp_servers
        .as_deref()
        .map(form_mcp_servers)
        .transpose();
    let (models, servers) = match form_models(&form.models).and_then(|m| Ok((m, servers?))) {
        Ok(checked) => checked,
        Err(message) => {
            let sent = context! { models => form.models, mcp_servers => form.mcp_servers };
            let page = render_access(&state, &who, &key, sent, Some(message)).await?;
            return Ok((axum::http::StatusCode::BAD_REQUEST, page).into_response());
        }
    };
    if models != key.allowed_models
        && !state
            .keys
            .set_allowed_models(&key, &models, &who.actor())
            .await?
    {
        return Err(PageError::NotFound);
    }
    if let Some(servers) = servers.filter(|s| *s != key.allowed_mcp_servers)
        && !state
            .keys
            .set_allowed_mcp_servers(&key, &servers, &who.actor())
            .await?
    {
        return Err(PageError::NotFound);
    }
    Ok(Redirect::to(&format!("/dashboard/keys#{}", key.id)).into_response())
}

/// The limits form (admins only): a per-key override of the defaults.
pub async fn limits_page(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
) -> Result<Html<String>, PageError> {
    let key = admin_key(&state, &who, &id).await?;
    render_limits(&who, &key, None)
}

fn render_limits(
    who: &SignedIn,
    key: &KeyRecord,
    error: Option<&str>,
) -> Result<Html<String>, PageError> {
    render(
        "limits.html",
        context! { ..layout(who, "keys"), ..context! { key => key_row(key, &[], false), error } },
    )
}

async fn admin_key(state: &AppState, who: &SignedIn, id: &str) -> Result<KeyRecord, PageError> {
    if !who.user.is_admin {
        return Err(PageError::NotFound);
    }
    own_key(state, who, id).await
}

#[derive(Debug, Deserialize)]
pub struct LimitsForm {
    csrf: String,
    rpm: String,
    tpm: String,
}

pub async fn set_limits(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<LimitsForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    let key = admin_key(&state, &who, &id).await?;
    let parse = |text: &str| -> Result<Option<i64>, ()> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(None);
        }
        text.parse::<i64>()
            .ok()
            .filter(|n| *n > 0)
            .map(Some)
            .ok_or(())
    };
    let (Ok(rpm), Ok(tpm)) = (parse(&form.rpm), parse(&form.tpm)) else {
        let page = render_limits(
            &who,
            &key,
            Some("Enter whole numbers above 0, or leave a field empty for the server's default."),
        )?;
        return Ok((axum::http::StatusCode::BAD_REQUEST, page).into_response());
    };
    let limits = svc_core::KeyLimits {
        requests_per_minute: rpm,
        tokens_per_minute: tpm,
    };
    state.keys.set_limits(&key, limits, &who.actor()).await?;
    Ok(Redirect::to("/dashboard/keys").into_response())
}

/// A key's budget bar (its window is its lineage's: rotation keeps it).
async fn key_budget(state: &AppState, key: &KeyRecord) -> Value {
    budget_bar(
        state
            .admission
            .budgets
            .status(Scope::Key, &key.budget_holder().0, key.budget)
            .await,
        state.admission.budgets.alert_percent(),
    )
}

/// The budget form (admins only): tokens or dollars per period, or none.
pub async fn budget_page(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
) -> Result<Html<String>, PageError> {
    let key = admin_key(&state, &who, &id).await?;
    render_budget(&state, &who, &key, budget_fields(key.budget), None).await
}

async fn render_budget(
    state: &AppState,
    who: &SignedIn,
    key: &KeyRecord,
    form: Value,
    error: Option<String>,
) -> Result<Html<String>, PageError> {
    render(
        "key_budget.html",
        context! {
            ..layout(who, "keys"),
            ..context! {
                key => key_row(key, &[], false),
                budget => key_budget(state, key).await,
                periods => PERIODS.to_vec(),
                form,
                error,
            }
        },
    )
}

#[derive(Debug, Deserialize)]
pub struct BudgetForm {
    csrf: String,
    #[serde(default)]
    tokens: String,
    #[serde(default)]
    unit: String,
    #[serde(default)]
    period: String,
}

/// Sets or removes the key's budget (audited as `api_key.updated`).
pub async fn set_budget(
    State(state): State<AppState>,
    who: SignedIn,
    Path(id): Path<String>,
    Form(form): Form<BudgetForm>,
) -> Result<Response, PageError> {
    who.check_csrf(&form.csrf)?;
    let key = admin_key(&state, &who, &id).await?;
    let budget = match form_budget(&form.tokens, &form.unit, &form.period) {
        Ok(budget) => budget,
        Err(message) => {
            let sent = context! { tokens => form.tokens, unit => form.unit, period => form.period };
            let page = render_budget(&state, &who, &key, sent, Some(message)).await?;
            return Ok((axum::http::StatusCode::BAD_REQUEST, page).into_response());
        }
    };
    if !state.keys.set_budget(&key, budget, &who.actor()).await? {
        return Err(PageError::NotFound);
    }
    Ok(Redirect::to(&format!("/dashboard/keys#{}", key.id)).into_response())
}
