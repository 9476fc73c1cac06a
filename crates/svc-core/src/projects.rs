//! The project service: the rules for projects and their members, shared
//! by the admin API and the dashboard, so that both check names, model
//! and MCP server lists, budgets and key kinds the same way and write the
//! same audit entries.
//!
//! Who may make a change is the caller's decision: nothing here looks at
//! roles. What a budget has used so far is the server's (it counts them).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::audit::{self, Actor, AuditEntry, AuditStore};
use crate::budget::{Budget, BudgetPeriod, BudgetUnit};
use crate::clock::now;
use crate::error::StoreError;
use crate::ids::UserId;
use crate::project::{
    KeyKind, KeyKindError, McpServerAccess, MemberRemoval, ModelAccess, ProjectRecord, ProjectRole,
    ProjectStore,
};
use crate::validation::ValidationError;

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

/// A list of registered MCP servers, by label: `None` allows every one.
pub fn mcp_servers(list: Option<Vec<String>>) -> Result<McpServerAccess, ValidationError> {
    match list {
        None => Ok(McpServerAccess::any()),
        Some(list) => McpServerAccess::only(list)
            .map_err(|message| ValidationError::new("allowed_mcp_servers", message)),
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

/// A key's kind from its name and, for `restricted`, permission names;
/// `param` says which was wrong. Management permissions are for `admin`
/// keys only.
pub fn key_kind(kind: &str, permissions: &[String]) -> Result<KeyKind, ValidationError> {
    KeyKind::from_parts(kind, permissions).map_err(|e| {
        let param = match e {
            KeyKindError::UnknownKind(_) => "kind",
            _ => "permissions",
        };
        ValidationError::new(param, e.to_string())
    })
}

/// A budget as the audit log writes it (`null`: none).
fn budget_json(budget: Option<Budget>) -> Value {
    json!(budget.map(|b| b.to_json()))
}

/// What to change of a project; `None` keeps it.
#[derive(Debug, Default)]
pub struct ProjectChanges {
    pub name: Option<String>,
    pub allowed_models: Option<ModelAccess>,
    pub allowed_mcp_servers: Option<McpServerAccess>,
    /// `Some(None)` removes the budget.
    pub budget: Option<Option<Budget>>,
}

/// What the project service reads and writes: projects and their members,
/// and the audit log. Any [`Store`](crate::Store) is one.
pub trait ProjectServiceStore: ProjectStore + AuditStore {}

impl<T: ProjectStore + AuditStore> ProjectServiceStore for T {}

/// Changes to projects and their members, each audited.
#[derive(Clone)]
pub struct ProjectService {
    store: Arc<dyn ProjectServiceStore>,
}

impl ProjectService {
    pub fn new(store: Arc<dyn ProjectServiceStore>) -> Self {
        ProjectService { store }
    }

    /// Writes an audit entry of `kind` by `actor` about `project`.
    async fn audit(
        &self,
        actor: &Actor,
        kind: &str,
        project: &ProjectRecord,
        details: Value,
    ) -> Result<(), StoreError> {
        let entry = AuditEntry::new(kind, actor, details).in_project(project);
        audit::record(self.store.as_ref(), entry).await
    }

    /// Stores a new project (checked already) and audits `project.created`.
    pub async fn create(&self, actor: &Actor, project: &ProjectRecord) -> Result<(), StoreError> {
        self.store.insert_project(project).await?;
        let details = json!({"id": project.id.0, "data": {
            "name": project.name,
            "allowed_models": project.allowed_models.0,
            "allowed_mcp_servers": project.allowed_mcp_servers.0,
            "budget": budget_json(project.budget),
        }});
        self.audit(actor, "project.created", project, details).await
    }

    /// Applies `changes` to `project`, stores it and audits
    /// `project.updated` with what was asked; false when the project is
    /// gone.
    pub async fn update(
        &self,
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
        if let Some(servers) = changes.allowed_mcp_servers {
            requested.insert("allowed_mcp_servers".into(), json!(servers.0));
            project.allowed_mcp_servers = servers;
        }
        if let Some(budget) = changes.budget {
            requested.insert("budget".into(), budget_json(budget));
            project.budget = budget;
        }
        if !self.store.update_project(project).await? {
            return Ok(false);
        }
        let details = json!({"id": project.id.0, "changes_requested": requested});
        self.audit(actor, "project.updated", project, details)
            .await?;
        Ok(true)
    }

    /// Makes `user` a member of `project` with `role`, or changes its role
    /// there; audited as `user.added` or `user.updated` when something
    /// changed.
    pub async fn set_member(
        &self,
        actor: &Actor,
        project: &ProjectRecord,
        user: &UserId,
        role: ProjectRole,
    ) -> Result<(), StoreError> {
        let before = self.store.project_role(&project.id, user).await?;
        self.store
            .set_project_member(&project.id, user, role, now())
            .await?;
        if before != Some(role) {
            let (kind, field) = match before {
                None => ("user.added", "data"),
                Some(_) => ("user.updated", "changes_requested"),
            };
            let mut details = json!({"id": user.0});
            details[field] = json!({"role": role.as_str()});
            self.audit(actor, kind, project, details).await?;
        }
        Ok(())
    }

    /// Removes `user` from `project`, unless it is the project's last
    /// owner; audited as `user.deleted` in the project when it was removed.
    /// The account's keys in the project are left as they are.
    pub async fn remove_member(
        &self,
        actor: &Actor,
        project: &ProjectRecord,
        user: &UserId,
    ) -> Result<MemberRemoval, StoreError> {
        let removal = self.store.remove_project_member(&project.id, user).await?;
        if let MemberRemoval::Removed(_) = removal {
            let details = json!({"id": user.0});
            self.audit(actor, "user.deleted", project, details).await?;
        }
        Ok(removal)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::audit::AuditQuery;
    use crate::ids::ProjectId;
    use crate::project::ProjectMember;

    #[test]
    fn names_are_trimmed_and_one_line() {
        assert_eq!(name("  Research ").unwrap(), "Research");
        for bad in ["", "   ", "a\nb", &"x".repeat(MAX_NAME_CHARS + 1)] {
            let err = name(bad).unwrap_err();
            assert_eq!(err.param, "name");
            assert_eq!(err.message, "name must be 1 to 200 characters on one line");
        }
        assert!(
            name(&"é".repeat(MAX_NAME_CHARS)).is_ok(),
            "characters, not bytes"
        );
    }

    #[test]
    fn budgets_have_one_unit_and_a_known_period() {
        let tokens = budget(Some(1_000), None, "day").unwrap();
        assert_eq!(tokens, Budget::tokens(1_000, BudgetPeriod::Day));
        let usd = budget(None, Some(2.5), "month").unwrap();
        assert_eq!((usd.limit, usd.unit), (2_500_000, BudgetUnit::Usd));
        assert_eq!(budget(None, Some(1e-9), "week").unwrap().limit, 1);
        for (tokens, usd, period, param) in [
            (Some(0), None, "day", "budget.tokens"),
            (None, Some(0.0), "day", "budget.usd"),
            (None, Some(f64::NAN), "day", "budget.usd"),
            (None, Some(2e9), "day", "budget.usd"),
            (Some(1), Some(1.0), "day", "budget"),
            (None, None, "day", "budget"),
            (Some(1), None, "year", "budget.period"),
        ] {
            let err = budget(tokens, usd, period).unwrap_err();
            assert_eq!(err.param, param, "{tokens:?} {usd:?} {period}");
        }
        assert_eq!(
            budget(Some(1), None, "year").unwrap_err().message,
            "budget.period must be day, week or month, not 'year'"
        );
    }

    #[test]
    fn models_and_kinds_name_the_parameter_that_was_wrong() {
        assert_eq!(models(None).unwrap(), ModelAccess::any());
        let err = models(Some(vec![String::new()])).unwrap_err();
        assert_eq!(err.param, "allowed_models");
        assert_eq!(mcp_servers(None).unwrap(), McpServerAccess::any());
        let err = mcp_servers(Some(vec!["a\tb".into()])).unwrap_err();
        assert_eq!(err.param, "allowed_mcp_servers");
        assert_eq!(key_kind("all", &[]).unwrap(), KeyKind::All);
        let err = key_kind("root", &[]).unwrap_err();
        assert_eq!(err.param, "kind");
        assert_eq!(
            err.message,
            "unknown key kind \"root\": use all, restricted or admin"
        );
        let err = key_kind("restricted", &["api.management.write".into()]).unwrap_err();
        assert_eq!(err.param, "permissions");
    }

    /// Projects, memberships and audit entries in memory: all a
    /// [`ProjectService`] needs of a store.
    #[derive(Default)]
    struct Memory {
        projects: Mutex<Vec<ProjectRecord>>,
        members: Mutex<Vec<(ProjectId, UserId, ProjectRole)>>,
        audit: Mutex<Vec<AuditEntry>>,
    }

    #[async_trait]
    impl ProjectStore for Memory {
        async fn insert_project(&self, project: &ProjectRecord) -> Result<(), StoreError> {
            self.projects.lock().unwrap().push(project.clone());
            Ok(())
        }
        async fn project_by_id(&self, id: &ProjectId) -> Result<Option<ProjectRecord>, StoreError> {
            let projects = self.projects.lock().unwrap();
            Ok(projects.iter().find(|p| &p.id == id).cloned())
        }
        async fn list_projects(&self) -> Result<Vec<ProjectRecord>, StoreError> {
            Ok(self.projects.lock().unwrap().clone())
        }
        async fn owned_projects(&self, _: &UserId) -> Result<Vec<ProjectRecord>, StoreError> {
            Ok(Vec::new())
        }
        async fn update_project(&self, project: &ProjectRecord) -> Result<bool, StoreError> {
            let mut projects = self.projects.lock().unwrap();
            let found = projects.iter_mut().find(|p| p.id == project.id);
            Ok(found.map(|p| *p = project.clone()).is_some())
        }
        async fn set_project_member(
            &self,
            project: &ProjectId,
            user: &UserId,
            role: ProjectRole,
            _at: i64,
        ) -> Result<(), StoreError> {
            let mut members = self.members.lock().unwrap();
            members.retain(|(p, u, _)| !(p == project && u == user));
            members.push((project.clone(), user.clone(), role));
            Ok(())
        }
        async fn list_project_members(
            &self,
            _: &ProjectId,
        ) -> Result<Vec<ProjectMember>, StoreError> {
            Ok(Vec::new())
        }
        async fn project_role(
            &self,
            project: &ProjectId,
            user: &UserId,
        ) -> Result<Option<ProjectRole>, StoreError> {
            let members = self.members.lock().unwrap();
            let member = members.iter().find(|(p, u, _)| p == project && u == user);
            Ok(member.map(|(_, _, role)| *role))
        }
        async fn remove_project_member(
            &self,
            project: &ProjectId,
            user: &UserId,
        ) -> Result<MemberRemoval, StoreError> {
            let role = self.project_role(project, user).await?;
            let mut members = self.members.lock().unwrap();
            members.retain(|(p, u, _)| !(p == project && u == user));
            Ok(role.map_or(MemberRemoval::NotMember, MemberRemoval::Removed))
        }
    }

    #[async_trait]
    impl AuditStore for Memory {
        async fn insert_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
            self.audit.lock().unwrap().push(entry.clone());
            Ok(())
        }
        async fn list_audit(&self, _: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
            Ok(self.audit.lock().unwrap().clone())
        }
        async fn delete_audit_before(&self, _: i64) -> Result<u64, StoreError> {
            Ok(0)
        }
    }

    #[tokio::test]
    async fn each_change_is_audited_in_its_project() {
        let store = Arc::new(Memory::default());
        let service = ProjectService::new(store.clone());
        let actor = Actor::Operator;
        let mut project = ProjectRecord {
            id: ProjectId("proj_1".into()),
            name: "Research".into(),
            created_at: 0,
            archived_at: None,
            allowed_models: ModelAccess::any(),
            allowed_mcp_servers: McpServerAccess::any(),
            budget: None,
        };
        let ada = UserId("usr_ada".into());
        service.create(&actor, &project).await.unwrap();
        let changes = ProjectChanges {
            name: Some("Lab".into()),
            budget: Some(Some(Budget::tokens(5, BudgetPeriod::Week))),
            allowed_mcp_servers: Some(McpServerAccess::only(vec!["docs".into()]).unwrap()),
            ..ProjectChanges::default()
        };
        assert!(service.update(&actor, &mut project, changes).await.unwrap());
        assert_eq!(project.name, "Lab");
        assert!(project.allowed_mcp_servers.allows("docs"));
        assert!(!project.allowed_mcp_servers.allows("github"));
        service
            .set_member(&actor, &project, &ada, ProjectRole::Member)
            .await
            .unwrap();
        // The same role again changes nothing and writes nothing.
        service
            .set_member(&actor, &project, &ada, ProjectRole::Member)
            .await
            .unwrap();
        service
            .set_member(&actor, &project, &ada, ProjectRole::Owner)
            .await
            .unwrap();
        assert_eq!(
            service.remove_member(&actor, &project, &ada).await.unwrap(),
            MemberRemoval::Removed(ProjectRole::Owner)
        );
        assert_eq!(
            service.remove_member(&actor, &project, &ada).await.unwrap(),
            MemberRemoval::NotMember
        );
        let gone = ProjectRecord {
            id: ProjectId("proj_gone".into()),
            ..project.clone()
        };
        let mut gone_too = gone.clone();
        let nothing = ProjectChanges::default();
        assert!(
            !service
                .update(&actor, &mut gone_too, nothing)
                .await
                .unwrap()
        );

        let audit = store.audit.lock().unwrap().clone();
        let kinds: Vec<&str> = audit.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "project.created",
                "project.updated",
                "user.added",
                "user.updated",
                "user.deleted"
            ]
        );
        assert!(
            audit
                .iter()
                .all(|e| e.project.as_ref().map(|p| p.0.0.as_str()) == Some("proj_1"))
        );
        assert_eq!(
            audit[1].details,
            json!({"id": "proj_1", "changes_requested": {
                "name": "Lab", "budget": {"tokens": 5, "period": "week"},
                "allowed_mcp_servers": ["docs"],
            }})
        );
        assert_eq!(
            audit[2].details,
            json!({"id": "usr_ada", "data": {"role": "member"}})
        );
        assert_eq!(
            audit[3].details,
            json!({"id": "usr_ada", "changes_requested": {"role": "owner"}})
        );
        assert_eq!(audit[4].details, json!({"id": "usr_ada"}));
    }
}
