//! Projects and what a key may do: the organization's projects and their
//! members' roles, a key's kind (`all`, `restricted` to permissions, or
//! `admin`), the models and the registered MCP servers a project or a key
//! may use, and [`ProjectStore`], the persistence of projects and
//! memberships.
//!
//! The shape is OpenAI's organization: every key belongs to a project;
//! accounts are project members with the role `owner` or `member`; the
//! organization's roles are `owner` (an account with `is_admin`) and
//! `reader` (every other account). Permission names are OpenAI's
//! restricted-key scopes where OpenAI has one.

use std::fmt;

use async_trait::async_trait;

use crate::budget::Budget;
use crate::error::{StoreError, UnknownValue};
use crate::ids::{ProjectId, UserId};

/// A stored project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectRecord {
    pub id: ProjectId,
    pub name: String,
    pub created_at: i64,
    /// Archived projects are kept for their history (none are archived yet:
    /// the admin API has no archive call so far).
    pub archived_at: Option<i64>,
    /// The models keys of this project may use.
    pub allowed_models: ModelAccess,
    /// The registered MCP servers keys of this project may use.
    pub allowed_mcp_servers: McpServerAccess,
    /// The tokens all its keys together may use per period.
    pub budget: Option<Budget>,
}

/// An account's membership of a project, with its email.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectMember {
    pub user_id: UserId,
    pub email: String,
    pub role: ProjectRole,
    /// When it joined the project.
    pub added_at: i64,
}

/// An account's role in a project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProjectRole {
    /// Manages the project's keys (with an admin key, through the admin API).
    Owner,
    /// Uses the project's models with keys of their own.
    Member,
}

impl ProjectRole {
    /// The stored (and shown) form.
    pub fn as_str(self) -> &'static str {
        match self {
            ProjectRole::Owner => "owner",
            ProjectRole::Member => "member",
        }
    }

    /// Reads the stored form; anything else is an error, never a guess.
    pub fn parse(stored: &str) -> Result<Self, UnknownValue> {
        match stored {
            "owner" => Ok(ProjectRole::Owner),
            "member" => Ok(ProjectRole::Member),
            _ => Err(UnknownValue::new("project role", stored)),
        }
    }
}

/// What became of a request to remove an account from a project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberRemoval {
    /// Removed; it had this role there.
    Removed(ProjectRole),
    /// It was not a member of the project: nothing changed.
    NotMember,
    /// It is the project's last owner: nothing changed.
    LastOwner,
}

/// An account's role in the organization: stored as the account's
/// `is_admin` flag (what "admin" meant before projects).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrgRole {
    /// Today's admin: every project, every account.
    Owner,
    /// Everyone else.
    Reader,
}

impl OrgRole {
    /// The role of an account with this `is_admin` flag.
    pub fn of_admin_flag(is_admin: bool) -> Self {
        if is_admin {
            OrgRole::Owner
        } else {
            OrgRole::Reader
        }
    }

    /// `owner` or `reader`, OpenAI's names.
    pub fn as_str(self) -> &'static str {
        match self {
            OrgRole::Owner => "owner",
            OrgRole::Reader => "reader",
        }
    }
}

/// One thing a key may be allowed to do, by OpenAI's scope name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    /// Inference: `/v1/chat/completions`, `/v1/messages` (and
    /// `count_tokens`), `/v1/embeddings`. OpenAI's `model.request`.
    ModelRequest,
    /// `POST /v1/responses`, `DELETE /v1/responses/{id}`.
    ResponsesWrite,
    /// `GET /v1/responses/{id}`.
    ResponsesRead,
    /// `GET /v1/models`, `GET /v1/models/{id}`.
    ModelRead,
    /// `GET /v1/admin/usage`.
    UsageRead,
    /// Reading the admin API (`/v1/organization/…`): admin keys only.
    ManagementRead,
    /// Changing through the admin API: admin keys only.
    ManagementWrite,
    /// `POST /v1/files`, `DELETE /v1/files/{id}`.
    FilesWrite,
    /// `GET /v1/files`, a file and its content.
    FilesRead,
    /// `POST /v1/batches`, cancelling one.
    BatchWrite,
    /// `GET /v1/batches`, a batch.
    BatchRead,
}

impl Permission {
    /// Every permission, in a stable order.
    pub const ALL: [Permission; 11] = [
        Permission::ModelRequest,
        Permission::ResponsesWrite,
        Permission::ResponsesRead,
        Permission::ModelRead,
        Permission::UsageRead,
        Permission::ManagementRead,
        Permission::ManagementWrite,
        Permission::FilesWrite,
        Permission::FilesRead,
        Permission::BatchWrite,
        Permission::BatchRead,
    ];

    /// OpenAI's scope name.
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::ModelRequest => "model.request",
            Permission::ResponsesWrite => "api.responses.write",
            Permission::ResponsesRead => "api.responses.read",
            Permission::ModelRead => "api.model.read",
            Permission::UsageRead => "api.usage.read",
            Permission::ManagementRead => "api.management.read",
            Permission::ManagementWrite => "api.management.write",
            Permission::FilesWrite => "api.files.write",
            Permission::FilesRead => "api.files.read",
            Permission::BatchWrite => "api.batch.write",
            Permission::BatchRead => "api.batch.read",
        }
    }

    /// By scope name.
    pub fn parse(name: &str) -> Option<Self> {
        Permission::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// Whether only admin keys hold it (a restricted key cannot be given it).
    pub fn is_management(self) -> bool {
        matches!(
            self,
            Permission::ManagementRead | Permission::ManagementWrite
        )
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a key may call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum KeyKind {
    /// Every route but the admin API: what every key could do before kinds.
    #[default]
    All,
    /// Only the routes of these permissions (never management ones).
    Restricted(Vec<Permission>),
    /// The admin API and usage; no inference. How far it reaches is fixed
    /// when it is made.
    Admin(AdminReach),
}

/// How far an admin key may reach, fixed when the key is made: never more
/// than its creator reached then. At each request the key reaches the
/// lesser of this and what its owner's roles reach now, so a demotion
/// takes the reach away and a promotion does not widen an old key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AdminReach {
    /// The key's own project (its owner must be an owner of it).
    Project,
    /// Every project and the organization's accounts (its owner must be
    /// an organization owner; the operator's keys have no owner).
    Organization,
}

impl AdminReach {
    /// `project` or `organization`: the stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            AdminReach::Project => "project",
            AdminReach::Organization => "organization",
        }
    }

    /// The stored form read back; anything else (or nothing: a key from
    /// before reaches were stored and the migration could not place) is
    /// the lesser reach.
    pub fn parse(text: Option<&str>) -> Self {
        match text {
            Some("organization") => AdminReach::Organization,
            _ => AdminReach::Project,
        }
    }
}

impl KeyKind {
    /// `all`, `restricted` or `admin`: the stored and shown form.
    pub fn name(&self) -> &'static str {
        match self {
            KeyKind::All => "all",
            KeyKind::Restricted(_) => "restricted",
            KeyKind::Admin(_) => "admin",
        }
    }

    /// Whether a key of this kind holds `permission`.
    pub fn allows(&self, permission: Permission) -> bool {
        match self {
            KeyKind::All => !permission.is_management(),
            KeyKind::Restricted(list) => list.contains(&permission),
            KeyKind::Admin(_) => permission.is_management() || permission == Permission::UsageRead,
        }
    }

    /// The permissions this kind holds, in [`Permission::ALL`]'s order.
    pub fn permissions(&self) -> Vec<Permission> {
        Permission::ALL
            .into_iter()
            .filter(|p| self.allows(*p))
            .collect()
    }

    /// The reach of an admin key; `None` for other kinds.
    pub fn admin_reach(&self) -> Option<AdminReach> {
        match self {
            KeyKind::Admin(reach) => Some(*reach),
            KeyKind::All | KeyKind::Restricted(_) => None,
        }
    }

    /// This kind for a key made by someone who reaches `creator`: an admin
    /// key reaches no further than its creator (other kinds are as they
    /// are).
    pub fn bounded_by(self, creator: AdminReach) -> Self {
        match self {
            KeyKind::Admin(reach) => KeyKind::Admin(reach.min(creator)),
            other => other,
        }
    }

    /// A kind from its name and, for `restricted`, permission names (sorted
    /// and deduplicated); `admin` is an organization-wide admin key, which
    /// its maker bounds by its own reach ([`KeyKind::bounded_by`]). Errors
    /// say what is wrong, for the caller to show.
    pub fn from_parts(name: &str, permissions: &[String]) -> Result<Self, KeyKindError> {
        match name {
            "all" | "admin" if !permissions.is_empty() => {
                Err(KeyKindError::PermissionsWithoutRestricted)
            }
            "all" => Ok(KeyKind::All),
            "admin" => Ok(KeyKind::Admin(AdminReach::Organization)),
            "restricted" => {
                let mut list = Vec::with_capacity(permissions.len());
                for name in permissions {
                    let permission = Permission::parse(name)
                        .filter(|p| !p.is_management())
                        .ok_or_else(|| KeyKindError::UnknownPermission(name.clone()))?;
                    list.push(permission);
                }
                list.sort();
                list.dedup();
                Ok(KeyKind::Restricted(list))
            }
            other => Err(KeyKindError::UnknownKind(other.to_owned())),
        }
    }
}

/// Why a kind and permissions do not make a [`KeyKind`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyKindError {
    #[error("unknown key kind {0:?}: use all, restricted or admin")]
    UnknownKind(String),
    #[error("unknown permission {0:?}")]
    UnknownPermission(String),
    #[error("permissions are given only with the kind restricted")]
    PermissionsWithoutRestricted,
}

/// The longest model (or MCP server) pattern accepted.
pub const MAX_MODEL_PATTERN_BYTES: usize = 256;
/// The most model (or MCP server) patterns one list may have.
pub const MAX_MODEL_PATTERNS: usize = 256;

/// Which model ids may be used: any (`None`), or those matching one of the
/// patterns, where `*` matches any run of characters (`svc*`). An empty
/// list allows none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelAccess(pub Option<Vec<String>>);

impl ModelAccess {
    /// Every model.
    pub fn any() -> Self {
        ModelAccess(None)
    }

    /// Only models matching one of `patterns`, checked: each non-empty, at
    /// most [`MAX_MODEL_PATTERN_BYTES`], without control characters, and at
    /// most [`MAX_MODEL_PATTERNS`] of them.
    pub fn only(patterns: Vec<String>) -> Result<Self, String> {
        check_patterns(&patterns, "model").map(|()| ModelAccess(Some(patterns)))
    }

    /// Whether `model` may be used.
    pub fn allows(&self, model: &str) -> bool {
        match &self.0 {
            None => true,
            Some(patterns) => patterns.iter().any(|p| glob_matches(p, model)),
        }
    }
}

/// Which registered MCP servers may be used, by label: any (`None`), or
/// those matching one of the patterns, as for [`ModelAccess`] (`*`
/// matches any run of characters; a label never holds one). An empty list
/// allows none. A pattern may name a server not registered (yet): lists
/// are kept across configuration changes, as model lists are.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct McpServerAccess(pub Option<Vec<String>>);

impl McpServerAccess {
    /// Every registered server.
    pub fn any() -> Self {
        McpServerAccess(None)
    }

    /// Only servers whose label matches one of `patterns`, checked as a
    /// model list is ([`ModelAccess::only`]).
    pub fn only(patterns: Vec<String>) -> Result<Self, String> {
        check_patterns(&patterns, "MCP server").map(|()| McpServerAccess(Some(patterns)))
    }

    /// Whether the server labelled `label` may be used.
    pub fn allows(&self, label: &str) -> bool {
        match &self.0 {
            None => true,
            Some(patterns) => patterns.iter().any(|p| glob_matches(p, label)),
        }
    }
}

/// Checks a list of `what` patterns (models, MCP servers): at most
/// [`MAX_MODEL_PATTERNS`], each 1 to [`MAX_MODEL_PATTERN_BYTES`] bytes
/// without control characters; the message names `what` otherwise.
fn check_patterns(patterns: &[String], what: &str) -> Result<(), String> {
    if patterns.len() > MAX_MODEL_PATTERNS {
        return Err(format!("at most {MAX_MODEL_PATTERNS} {what} patterns"));
    }
    for pattern in patterns {
        if pattern.is_empty()
            || pattern.len() > MAX_MODEL_PATTERN_BYTES
            || pattern.chars().any(char::is_control)
        {
            return Err(format!(
                "{what} patterns are 1 to {MAX_MODEL_PATTERN_BYTES} bytes without control characters"
            ));
        }
    }
    Ok(())
}

/// Whether `text` matches `pattern`, where `*` matches any run of
/// characters (none included) and every other character itself.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    // `split` yields at least one part.
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole text must be the pattern.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Persistence of projects and their members.
#[async_trait]
pub trait ProjectStore: Send + Sync {
    /// Stores a new project; [`StoreError::Conflict`] when its id exists.
    async fn insert_project(&self, project: &ProjectRecord) -> Result<(), StoreError>;
    async fn project_by_id(&self, id: &ProjectId) -> Result<Option<ProjectRecord>, StoreError>;
    /// Every project, oldest first.
    async fn list_projects(&self) -> Result<Vec<ProjectRecord>, StoreError>;
    /// The projects `user` is an owner of, oldest first.
    async fn owned_projects(&self, user: &UserId) -> Result<Vec<ProjectRecord>, StoreError>;
    /// Stores a project's name, allowed models and MCP servers, and budget;
    /// false when there is no such project. Announced like a key change
    /// (its keys are judged with its lists and budget), so [`KeyStore::keys_version`](crate::key::KeyStore::keys_version) moves
    /// everywhere.
    async fn update_project(&self, project: &ProjectRecord) -> Result<bool, StoreError>;
    /// Makes `user` a member of `project` with `role` (replacing the role
    /// it had there).
    async fn set_project_member(
        &self,
        project: &ProjectId,
        user: &UserId,
        role: ProjectRole,
        at: i64,
    ) -> Result<(), StoreError>;
    /// The members of `project`, oldest membership first.
    async fn list_project_members(
        &self,
        project: &ProjectId,
    ) -> Result<Vec<ProjectMember>, StoreError>;
    /// `user`'s role in `project`, if a member.
    async fn project_role(
        &self,
        project: &ProjectId,
        user: &UserId,
    ) -> Result<Option<ProjectRole>, StoreError>;
    /// Removes `user` from `project`; refused (`LastOwner`, nothing
    /// changed) when it is the project's only owner, also against a
    /// concurrent removal of the other owners. The account's keys in the
    /// project are left as they are.
    async fn remove_project_member(
        &self,
        project: &ProjectId,
        user: &UserId,
    ) -> Result<MemberRemoval, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_shell_stars_do() {
        assert!(glob_matches("svc", "svc"));
        assert!(!glob_matches("svc", "svc-thinking"));
        assert!(glob_matches("svc*", "svc"));
        assert!(glob_matches("svc*", "svc-thinking"));
        assert!(!glob_matches("svc*", "xsvc"));
        assert!(glob_matches("*", ""));
        assert!(glob_matches("*-thinking", "svc-thinking"));
        assert!(glob_matches("a*b*c", "abc"));
        assert!(glob_matches("a*b*c", "a-b-b-c"));
        assert!(!glob_matches("a*b*c", "a-c"));
        assert!(!glob_matches("ab*ba", "aba"));
        assert!(glob_matches("llama-*-70b", "llama-3.1-70b"));
    }

    #[test]
    fn model_access_any_or_listed() {
        assert!(ModelAccess::any().allows("anything"));
        let only = ModelAccess::only(vec!["svc".into(), "llama*".into()]).unwrap();
        assert!(only.allows("svc"));
        assert!(only.allows("llama-70b"));
        assert!(!only.allows("svc-thinking"));
        assert!(!ModelAccess::only(vec![]).unwrap().allows("svc"));
        assert!(ModelAccess::only(vec![String::new()]).is_err());
        assert!(ModelAccess::only(vec!["a\nb".into()]).is_err());
    }

    #[test]
    fn mcp_server_access_any_or_listed() {
        assert!(McpServerAccess::any().allows("github"));
        let only = McpServerAccess::only(vec!["docs".into(), "git*".into()]).unwrap();
        assert!(only.allows("docs"));
        assert!(only.allows("github"));
        assert!(!only.allows("docs-internal"), "a label matches whole");
        assert!(!McpServerAccess::only(vec![]).unwrap().allows("docs"));
        let err = McpServerAccess::only(vec![String::new()]).unwrap_err();
        assert!(err.starts_with("MCP server patterns"), "{err}");
        let err = McpServerAccess::only(vec!["x".into(); MAX_MODEL_PATTERNS + 1]).unwrap_err();
        assert_eq!(err, "at most 256 MCP server patterns");
    }

    #[test]
    fn kinds_hold_their_permissions() {
        assert!(KeyKind::All.allows(Permission::ModelRequest));
        assert!(!KeyKind::All.allows(Permission::ManagementRead));
        let admin = KeyKind::Admin(AdminReach::Project);
        assert!(!admin.allows(Permission::ModelRequest));
        assert!(admin.allows(Permission::ManagementWrite));
        assert!(admin.allows(Permission::UsageRead));
        let read_only = KeyKind::Restricted(vec![Permission::ModelRead]);
        assert!(read_only.allows(Permission::ModelRead));
        assert!(!read_only.allows(Permission::ModelRequest));
    }

    #[test]
    fn kinds_are_read_from_their_parts() {
        let names = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(KeyKind::from_parts("all", &[]), Ok(KeyKind::All));
        assert_eq!(
            KeyKind::from_parts("admin", &[]),
            Ok(KeyKind::Admin(AdminReach::Organization))
        );
        assert_eq!(
            KeyKind::from_parts(
                "restricted",
                &names(&["api.model.read", "model.request", "model.request"])
            ),
            Ok(KeyKind::Restricted(vec![
                Permission::ModelRequest,
                Permission::ModelRead
            ]))
        );
        assert!(KeyKind::from_parts("restricted", &names(&["api.management.write"])).is_err());
        assert!(KeyKind::from_parts("restricted", &names(&["root"])).is_err());
        assert!(KeyKind::from_parts("all", &names(&["model.request"])).is_err());
        assert!(KeyKind::from_parts("super", &[]).is_err());
        for p in Permission::ALL {
            assert_eq!(Permission::parse(p.as_str()), Some(p));
        }
    }

    #[test]
    fn an_admin_key_reaches_no_further_than_its_maker() {
        let org = KeyKind::Admin(AdminReach::Organization);
        assert_eq!(
            org.clone().bounded_by(AdminReach::Project),
            KeyKind::Admin(AdminReach::Project)
        );
        assert_eq!(org.clone().bounded_by(AdminReach::Organization), org);
        assert_eq!(
            KeyKind::Admin(AdminReach::Project).bounded_by(AdminReach::Organization),
            KeyKind::Admin(AdminReach::Project)
        );
        assert_eq!(KeyKind::All.bounded_by(AdminReach::Project), KeyKind::All);
        for reach in [AdminReach::Project, AdminReach::Organization] {
            assert_eq!(AdminReach::parse(Some(reach.as_str())), reach);
        }
        assert_eq!(AdminReach::parse(None), AdminReach::Project);
    }

    #[test]
    fn roles_round_trip() {
        for role in [ProjectRole::Owner, ProjectRole::Member] {
            assert_eq!(ProjectRole::parse(role.as_str()), Ok(role));
        }
        assert!(ProjectRole::parse("admin").is_err());
        assert_eq!(OrgRole::of_admin_flag(true).as_str(), "owner");
        assert_eq!(OrgRole::of_admin_flag(false).as_str(), "reader");
    }
}
