//! Changes to projects and their members, shared by the admin API
//! (`routes::organization`) and the dashboard (`dashboard::projects`), so
//! that both check names, model lists and budgets the same way and write
//! the same audit entries, and show a budget with the same count.
//!
//! Who may make a change is the caller's decision: nothing here looks at
//! roles.

use serde_json::{Value, json};
use svc_api::BudgetStatus;
use svc_core::audit::{self, Actor, AuditEntry};
use svc_core::{
    Budget, BudgetPeriod, BudgetUnit, ModelAccess, ProjectRecord, ProjectRole, StoreError, UserId,
    ValidationError, now,
};

use crate::budget::Scope;
use crate::state::AppState;

/// The longest project or key name.
pub const MAX_NAME_CHARS: usize = 200;

/// A name: trimmed, 1 to [`MAX_NAME_CHARS`] characters on one line.
pub fn name(text: &str) -> Result<String, ValidationError> {
    let name = text.trim();
    if name.is_empty()
        || name.chars().count() > MAX_NAME_CHARS
        || name.chars().any(char::is_control)
    {
        return Err(ValidationError::new(
            "name",
            format!("name must be 1 to {MAX_NAME_CHARS} characters on one line"),
        ));
    }
    Ok(name.to_owned())
}

/// A model list: `None` allows every model.
pub fn models(list: Option<Vec<String>>) -> Result<ModelAccess, ValidationError> {
    match list {
        None => Ok(ModelAccess::any()),
        Some(list) => ModelAccess::only(list)
            .map_err(|message| ValidationError::new("allowed_models", message)),
    }
}

/// The largest spend budget: a billion dollars (in micro-dollars it
/// stays far inside `i64`).
const MAX_BUDGET_USD: f64 = 1e9;

/// A budget of `tokens` (at least 1) or `usd` (more than 0), exactly one,
/// per `period` (`day`, `week`, `month`).
pub fn budget(
    tokens: Option<i64>,
    usd: Option<f64>,
    period: &str,
) -> Result<Budget, ValidationError> {
    let (limit, unit) = match (tokens, usd) {
        (Some(tokens), None) if tokens >= 1 => (tokens, BudgetUnit::Tokens),
        (Some(_), None) => {
            return Err(ValidationError::new(
                "budget.tokens",
                "budget.tokens must be at least 1",
            ));
        }
        (None, Some(usd)) if usd.is_finite() && usd > 0.0 && usd <= MAX_BUDGET_USD => {
            ((usd * 1e6).round().max(1.0) as i64, BudgetUnit::Usd)
        }
        (None, Some(_)) => {
            return Err(ValidationError::new(
                "budget.usd",
                "budget.usd must be a number of US dollars above 0 (at most 1000000000)",
            ));
        }
        _ => {
            return Err(ValidationError::new(
                "budget",
                "a budget has exactly one of tokens (a token budget) and usd (a spend budget)",
            ));
        }
    };
    let period = BudgetPeriod::parse(period).map_err(|_| {
        ValidationError::new(
            "budget.period",
            format!("budget.period must be day, week or month, not '{period}'"),
        )
    })?;
    Ok(Budget {
        limit,
        unit,
        period,
    })
}

/// A budget as the audit log writes it (`null`: none).
fn budget_json(budget: Option<Budget>) -> Value {
    json!(budget.map(|b| b.to_json()))
}

/// A budget as shown: with its current window's count (`None` when it
/// could not be read) and when it renews.
pub async fn budget_status(
    state: &AppState,
    scope: Scope,
    id: &str,
    budget: Option<Budget>,
) -> Option<BudgetStatus> {
    let budget = budget?;
    let (used, resets_at) = state
        .budgets
        .used(&scope.counter(id, budget.unit), budget)
        .await;
    let (tokens, usd) = match budget.unit {
        BudgetUnit::Tokens => (Some(budget.limit), None),
        BudgetUnit::Usd => (None, Some(svc_core::budget::micros_to_usd(budget.limit))),
    };
    Some(BudgetStatus {
        tokens,
        usd,
        period: budget.period.as_str().into(),
        used,
        resets_at,
    })
}

/// Writes an audit entry of `kind` by `actor` about `project`.
async fn audit_project(
    state: &AppState,
    actor: &Actor,
    kind: &str,
    project: &ProjectRecord,
    details: Value,
) -> Result<(), StoreError> {
    let entry = AuditEntry::new(kind, actor, details).in_project(project);
    audit::record(state.store.as_ref(), entry).await
}

/// Stores a new project (checked already) and audits `project.created`.
pub async fn create(
    state: &AppState,
    actor: &Actor,
    project: &ProjectRecord,
) -> Result<(), StoreError> {
    state.store.insert_project(project).await?;
    let details = json!({"id": project.id.0, "data": {
        "name": project.name,
        "allowed_models": project.allowed_models.0,
        "budget": budget_json(project.budget),
    }});
    audit_project(state, actor, "project.created", project, details).await
}

/// What to change of a project; `None` keeps it.
#[derive(Debug, Default)]
pub struct ProjectChanges {
    pub name: Option<String>,
    pub allowed_models: Option<ModelAccess>,
    /// `Some(None)` removes the budget.
    pub budget: Option<Option<Budget>>,
}

/// Applies `changes` to `project`, stores it and audits `project.updated`
/// with what was asked; false when the project is gone.
pub async fn update(
    state: &AppState,
    actor: &Actor,
    project: &mut ProjectRecord,
    changes: ProjectChanges,
) -> Result<bool, StoreError> {
    let mut requested = serde_json::Map::new();
    if let Some(name) = changes.name {
        requested.insert("name".into(), json!(name));
        project.name = name;
    }
    if let Some(models) = changes.allowed_models {
        requested.insert("allowed_models".into(), json!(models.0));
        project.allowed_models = models;
    }
    if let Some(budget) = changes.budget {
        requested.insert("budget".into(), budget_json(budget));
        project.budget = budget;
    }
    if !state.store.update_project(project).await? {
        return Ok(false);
    }
    let details = json!({"id": project.id.0, "changes_requested": requested});
    audit_project(state, actor, "project.updated", project, details).await?;
    Ok(true)
}

/// Makes `user` a member of `project` with `role`, or changes its role
/// there; audited as `user.added` or `user.updated` when something changed.
pub async fn set_member(
    state: &AppState,
    actor: &Actor,
    project: &ProjectRecord,
    user: &UserId,
    role: ProjectRole,
) -> Result<(), StoreError> {
    let before = state.store.project_role(&project.id, user).await?;
    state
        .store
        .set_project_member(&project.id, user, role, now())
        .await?;
    if before != Some(role) {
        let (kind, field) = match before {
            None => ("user.added", "data"),
            Some(_) => ("user.updated", "changes_requested"),
        };
        let mut details = json!({"id": user.0});
        details[field] = json!({"role": role.as_str()});
        audit_project(state, actor, kind, project, details).await?;
    }
    Ok(())
}

/// Removes `user` from `project`, unless it is the project's last owner;
/// audited as `user.deleted` in the project when it was removed. The
/// account's keys in the project are left as they are.
pub async fn remove_member(
    state: &AppState,
    actor: &Actor,
    project: &ProjectRecord,
    user: &UserId,
) -> Result<svc_core::MemberRemoval, StoreError> {
    let removal = state.store.remove_project_member(&project.id, user).await?;
    if let svc_core::MemberRemoval::Removed(_) = removal {
        let details = json!({"id": user.0});
        audit_project(state, actor, "user.deleted", project, details).await?;
    }
    Ok(removal)
}

/// A key's kind from its name and, for `restricted`, permission names;
/// `param` says which was wrong. Management permissions are for `admin`
/// keys only.
pub fn key_kind(kind: &str, permissions: &[String]) -> Result<svc_core::KeyKind, ValidationError> {
    svc_core::KeyKind::from_parts(kind, permissions).map_err(|e| {
        let param = match e {
            svc_core::project::KeyKindError::UnknownKind(_) => "kind",
            _ => "permissions",
        };
        ValidationError::new(param, e.to_string())
    })
}
