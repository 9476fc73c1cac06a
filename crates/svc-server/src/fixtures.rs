//! What the crate's unit tests share; compiled only for them.

use svc_core::{
    KeyId, KeyKind, KeyLimits, KeyOrigin, KeyRecord, McpServerAccess, ModelAccess, ProjectId,
};

/// A live key `id` of the default project that may do anything, with no
/// limits or budgets: a test sets on it what it tests.
pub(crate) fn key(id: &str) -> KeyRecord {
    KeyRecord {
        id: KeyId(id.into()),
        name: String::new(),
        hint: String::new(),
        owner_id: None,
        created_via: KeyOrigin::Cli,
        created_at: 0,
        expires_at: None,
        last_used_at: None,
        revoked_at: None,
        limits: KeyLimits::default(),
        owner_disabled_at: None,
        project_id: ProjectId::default_project(),
        kind: KeyKind::All,
        allowed_models: ModelAccess::any(),
        project_allowed_models: ModelAccess::any(),
        allowed_mcp_servers: McpServerAccess::any(),
        project_allowed_mcp_servers: McpServerAccess::any(),
        budget: None,
        project_budget: None,
        rotated_from: None,
        lineage: None,
    }
}
