//! The audit log: who did what, when, from where, to which object. Entries
//! are written by the services (keys, accounts, device approvals) and the
//! admin API's project changes, whichever way the change was asked for
//! (dashboard, admin API, operator command), and never changed afterwards.
//!
//! The shape is OpenAI's Administration API audit-log object: a `type`
//! such as `api_key.created`, `effective_at`, an `actor` (`session`,
//! `api_key`, or svc's own `operator`), the `project` when there is one,
//! and the object's details under the type's name. Nothing here may hold a
//! secret: keys appear by id and hint, people by id and email; passwords,
//! session tokens and device or user codes never reach an entry.

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::clock::now;
use crate::error::StoreError;
use crate::ids::{KeyId, ProjectId, UserId};
use crate::key::KeyRecord;
use crate::project::ProjectRecord;
use crate::user::UserRecord;

/// Every type of event svc writes, in the order the dashboard offers them.
pub const EVENT_TYPES: &[&str] = &[
    "api_key.created",
    "api_key.rotated",
    "api_key.updated",
    "budget.threshold_reached",
    "api_key.deleted",
    "rate_limit.updated",
    "login.succeeded",
    "login.failed",
    "logout.succeeded",
    "device.approved",
    "device.denied",
    "project.created",
    "project.updated",
    "user.added",
    "user.updated",
    "user.deleted",
    "file.created",
    "file.deleted",
    "batch.created",
    "batch.cancelled",
    "model.loaded",
    "model.unloaded",
];

/// A person, as an entry names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorUser {
    /// `None` for a failed sign-in with an email that has no account.
    pub id: Option<UserId>,
    pub email: String,
}

impl From<&UserRecord> for ActorUser {
    fn from(user: &UserRecord) -> Self {
        ActorUser {
            id: Some(user.id.clone()),
            email: user.email.clone(),
        }
    }
}

/// Who made a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// Someone at the dashboard (signed in, or signing in), from the client
    /// address the server derives (trusted proxies respected).
    Session {
        user: Option<ActorUser>,
        address: Option<String>,
    },
    /// An API key: the admin API, or a key revoking itself.
    ApiKey {
        id: KeyId,
        /// Its account; `None` for the operator's keys.
        owner: Option<ActorUser>,
    },
    /// The operator at the command line (`svc keys`, `svc users`), against
    /// the store.
    Operator,
}

impl Actor {
    /// OpenAI's actor object.
    pub fn to_json(&self) -> Value {
        let user =
            |u: &ActorUser| json!({"id": u.id.as_ref().map(|id| id.0.clone()), "email": u.email});
        match self {
            Actor::Session { user: who, address } => {
                let mut session = json!({"ip_address": address});
                if let Some(who) = who {
                    session["user"] = user(who);
                }
                json!({"type": "session", "session": session})
            }
            Actor::ApiKey { id, owner } => {
                let api_key = match owner {
                    Some(owner) => json!({"id": id.0, "type": "user", "user": user(owner)}),
                    None => json!({"id": id.0, "type": "operator"}),
                };
                json!({"type": "api_key", "api_key": api_key})
            }
            Actor::Operator => json!({"type": "operator", "operator": {}}),
        }
    }

    fn user(&self) -> Option<&ActorUser> {
        match self {
            Actor::Session { user, .. } => user.as_ref(),
            Actor::ApiKey { owner, .. } => owner.as_ref(),
            Actor::Operator => None,
        }
    }
}

/// One stored entry.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// `audit_log-` + 16 hex.
    pub id: String,
    /// `api_key.created`, `login.failed`, ...
    pub kind: String,
    /// Unix time.
    pub effective_at: i64,
    /// OpenAI's actor object.
    pub actor: Value,
    /// The acting account, for filtering by actor.
    pub actor_user_id: Option<String>,
    /// The acting key, for filtering by actor.
    pub actor_key_id: Option<String>,
    /// The acting account's email (or the email a failed sign-in gave).
    pub actor_email: Option<String>,
    /// The project (id and name when it happened).
    pub project: Option<(ProjectId, String)>,
    /// What the event did, shown under the type's name.
    pub details: Value,
}

impl AuditEntry {
    /// An entry of `kind` by `actor`, now, about `details`.
    pub fn new(kind: &str, actor: &Actor, details: Value) -> Self {
        let user = actor.user();
        AuditEntry {
            id: format!("audit_log-{}", hex::encode(rand::random::<[u8; 8]>())),
            kind: kind.to_owned(),
            effective_at: now(),
            actor: actor.to_json(),
            actor_user_id: user.and_then(|u| u.id.as_ref()).map(|id| id.0.clone()),
            actor_key_id: match actor {
                Actor::ApiKey { id, .. } => Some(id.0.clone()),
                _ => None,
            },
            actor_email: user.map(|u| u.email.clone()),
            project: None,
            details,
        }
    }

    /// The same entry, about `project`.
    pub fn in_project(mut self, project: &ProjectRecord) -> Self {
        self.project = Some((project.id.clone(), project.name.clone()));
        self
    }
}

/// Which entries to list, as `GET /v1/organization/audit_logs` asks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Any of these types (none: every type).
    pub event_types: Vec<String>,
    /// Acting accounts or keys, by id.
    pub actor_ids: Vec<String>,
    pub actor_emails: Vec<String>,
    pub project_ids: Vec<String>,
    /// `effective_at` bounds, each optional.
    pub gt: Option<i64>,
    pub gte: Option<i64>,
    pub lt: Option<i64>,
    pub lte: Option<i64>,
    /// Older than this entry (the next page).
    pub after: Option<String>,
    /// Newer than this entry (the previous page).
    pub before: Option<String>,
    /// Entries wanted; the store returns one more when there are more.
    pub limit: usize,
}

/// The audit log's persistence: append-only entries.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Appends an entry.
    async fn insert_audit(&self, entry: &AuditEntry) -> Result<(), StoreError>;
    /// Entries matching `query`, newest first, at most `query.limit + 1`
    /// (one more tells the caller there are more): those older than
    /// `query.after`, or the ones just newer than `query.before`.
    async fn list_audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError>;
    /// Deletes entries effective before `before` (retention); returns how many.
    async fn delete_audit_before(&self, before: i64) -> Result<u64, StoreError>;
}

/// Writes `entry`. Called after the change it records succeeded; an error
/// here is the caller's error (the change is done, its record is not).
pub async fn record(store: &dyn AuditStore, entry: AuditEntry) -> Result<(), StoreError> {
    store.insert_audit(&entry).await
}

/// Deletes the entries older than `retention_days` days (0: keeps all);
/// returns how many.
pub async fn sweep(store: &dyn AuditStore, retention_days: u32) -> Result<u64, StoreError> {
    if retention_days == 0 {
        return Ok(0);
    }
    let before = now().saturating_sub(i64::from(retention_days) * 86_400);
    store.delete_audit_before(before).await
}

/// The details of an event about key `id` (its name and hint, never the
/// secret).
pub fn key_details(key: &KeyRecord) -> Value {
    json!({
        "id": key.id.0,
        "data": {
            "name": key.name,
            "redacted_value": key.hint,
            "kind": key.kind.name(),
            "scopes": key.kind.permissions().iter().map(|p| p.as_str()).collect::<Vec<_>>(),
            "allowed_models": key.allowed_models.0,
            "allowed_mcp_servers": key.allowed_mcp_servers.0,
            "owner_id": key.owner_id.as_ref().map(|u| u.0.clone()),
            "expires_at": key.expires_at,
            "budget": key.budget.map(|b| b.to_json()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actors_have_openais_shape() {
        let ada = ActorUser {
            id: Some(UserId("usr_1".into())),
            email: "ada@example.com".into(),
        };
        let session = Actor::Session {
            user: Some(ada.clone()),
            address: Some("10.0.0.1".into()),
        };
        assert_eq!(
            session.to_json(),
            json!({"type": "session", "session": {"user": {"id": "usr_1", "email": "ada@example.com"}, "ip_address": "10.0.0.1"}})
        );
        let key = Actor::ApiKey {
            id: KeyId("key_1".into()),
            owner: Some(ada),
        };
        assert_eq!(key.to_json()["api_key"]["type"], "user");
        let entry = AuditEntry::new("api_key.deleted", &key, json!({"id": "key_2"}));
        assert_eq!(entry.actor_user_id.as_deref(), Some("usr_1"));
        assert_eq!(entry.actor_key_id.as_deref(), Some("key_1"));
        assert!(entry.id.starts_with("audit_log-"));
        let operator = AuditEntry::new("user.added", &Actor::Operator, json!({}));
        assert_eq!(operator.actor, json!({"type": "operator", "operator": {}}));
        assert_eq!(operator.actor_email, None);
    }
}
