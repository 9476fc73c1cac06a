//! The key service: creating, authenticating, listing and revoking API keys
//! on top of any [`KeyServiceStore`]: keys, the projects their audit
//! entries name, and the audit log.
//!
//! Authentication remembers what it read about a key for at most
//! [`AUTH_CACHE_TTL`], and only while the store's
//! [`keys_version`](crate::key::KeyStore::keys_version) stays the same:
//! a revocation anywhere the store can see (this process, another `svc`
//! process on the same SQLite file, another replica on the same
//! PostgreSQL) changes the version, so the very next request reads the
//! store again. Unknown keys are never remembered, so guessing cannot fill
//! the memory.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use thiserror::Error;

use serde_json::json;

use crate::audit::{self, Actor, AuditEntry, AuditStore};
use crate::clock::now;
use crate::error::StoreError;
use crate::ids::{KeyId, ProjectId, UserId};
use crate::key::{ApiKey, KeyFormatError, KeyHash, KeyLimits, KeyOrigin, KeyRecord, KeyStore};
use crate::project::{KeyKind, McpServerAccess, ModelAccess, ProjectStore};

/// How often at most `last_used_at` is written for one key, in seconds:
/// often enough for a dashboard, rare enough to keep writes off the hot path.
const TOUCH_EVERY: i64 = 60;

/// The longest a key read from the store is reused for authentication,
/// whatever the store's version says: the bound for changes the store
/// cannot report (a database edited by hand).
pub const AUTH_CACHE_TTL: Duration = Duration::from_secs(1);

/// How long a rotated key keeps working when the operator does not say.
pub const DEFAULT_ROTATION_GRACE: i64 = 24 * 3600;
/// The longest grace period a rotation may give the old key: 30 days.
pub const MAX_ROTATION_GRACE: i64 = 30 * 24 * 3600;

/// Remembered keys beyond which stale ones are swept before another is added.
const CACHE_SWEEP_AT: usize = 4096;

/// What a new key should be.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub name: String,
    pub owner_id: Option<UserId>,
    pub created_via: KeyOrigin,
    /// Lifetime in seconds; `None` never expires.
    pub expires_in: Option<i64>,
    /// Its project, kind, models and MCP servers (by default: the default
    /// project, kind `all`, any model, any server).
    pub scope: KeyScope,
}

/// Where a key belongs and what it may do.
#[derive(Debug, Clone, Default)]
pub struct KeyScope {
    /// `None`: the default project.
    pub project_id: Option<ProjectId>,
    pub kind: KeyKind,
    pub allowed_models: ModelAccess,
    pub allowed_mcp_servers: McpServerAccess,
    pub budget: Option<crate::budget::Budget>,
}

/// Why a request is not authenticated. The messages never quote the key.
#[derive(Debug, Error)]
pub enum AuthError {
    #[error(
        "You didn't provide an API key. Send it in the Authorization header as \"Bearer sk-svc-...\"."
    )]
    Missing,
    #[error("Malformed API key: {0}.")]
    Malformed(KeyFormatError),
    #[error("Incorrect API key provided.")]
    Unknown,
    #[error("This API key has been revoked.")]
    Revoked,
    #[error("This API key has expired.")]
    Expired,
    #[error("The account this API key belongs to is disabled.")]
    OwnerDisabled,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The state of a key at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    Active,
    Expired,
    Revoked,
    /// The owning account is disabled; enabling it makes the key usable
    /// again (unless it expired meanwhile).
    Disabled,
}

impl KeyState {
    /// The state of `record` at `at`; revocation wins over the owner being
    /// disabled, which wins over expiry.
    pub fn of(record: &KeyRecord, at: i64) -> Self {
        if record.revoked_at.is_some() {
            KeyState::Revoked
        } else if record.owner_disabled_at.is_some() {
            KeyState::Disabled
        } else if record.expires_at.is_some_and(|e| e <= at) {
            KeyState::Expired
        } else {
            KeyState::Active
        }
    }

    /// `active`, `expired`, `revoked` or `disabled`.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Active => "active",
            KeyState::Expired => "expired",
            KeyState::Revoked => "revoked",
            KeyState::Disabled => "disabled",
        }
    }
}

/// What the key service reads and writes: keys, the project an audit entry
/// names, and the audit log. Any [`Store`](crate::Store) is one.
pub trait KeyServiceStore: KeyStore + ProjectStore + AuditStore {}

impl<T: KeyStore + ProjectStore + AuditStore> KeyServiceStore for T {}

/// Key operations shared by the API, the operator commands and the dashboard.
#[derive(Clone)]
pub struct KeyService {
    store: Arc<dyn KeyServiceStore>,
    cache: Arc<AuthCache>,
}

/// Keys read from the store, by hash, with the store's version when read.
#[derive(Default)]
struct AuthCache {
    entries: RwLock<HashMap<KeyHash, Cached>>,
}

struct Cached {
    record: KeyRecord,
    version: u64,
    read_at: Instant,
}

impl Cached {
    fn fresh(&self, version: u64) -> bool {
        self.version == version && self.read_at.elapsed() < AUTH_CACHE_TTL
    }
}

impl AuthCache {
    fn get(&self, hash: &KeyHash, version: u64) -> Option<KeyRecord> {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        let cached = entries.get(hash)?;
        cached.fresh(version).then(|| cached.record.clone())
    }

    fn put(&self, hash: KeyHash, record: KeyRecord, version: u64, read_at: Instant) {
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= CACHE_SWEEP_AT {
            entries.retain(|_, c| c.fresh(version));
        }
        entries.insert(
            hash,
            Cached {
                record,
                version,
                read_at,
            },
        );
    }

    /// Keeps a remembered key's `last_used_at` in step with the store's.
    fn touched(&self, hash: &KeyHash, at: i64) {
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(cached) = entries.get_mut(hash) {
            cached.record.last_used_at = Some(at);
        }
    }
}

impl KeyService {
    pub fn new(store: Arc<dyn KeyServiceStore>) -> Self {
        KeyService {
            store,
            cache: Arc::default(),
        }
    }

    /// Mints a key; the returned [`ApiKey`] is the only copy of the secret.
    /// The project must exist (the caller checks; the store does not).
    /// Audited as `api_key.created` by `actor`.
    pub async fn create(
        &self,
        new: NewKey,
        actor: &Actor,
    ) -> Result<(ApiKey, KeyRecord), StoreError> {
        let key = ApiKey::generate();
        let created_at = now();
        let project_id = new
            .scope
            .project_id
            .unwrap_or_else(ProjectId::default_project);
        let record = KeyRecord {
            id: KeyId::generate(),
            name: new.name,
            hint: key.hint(),
            owner_id: new.owner_id,
            created_via: new.created_via,
            created_at,
            expires_at: new.expires_in.map(|s| created_at.saturating_add(s)),
            last_used_at: None,
            revoked_at: None,
            limits: Default::default(),
            owner_disabled_at: None,
            project_id,
            kind: new.scope.kind,
            allowed_models: new.scope.allowed_models,
            // Read from the project when the key is read back.
            project_allowed_models: ModelAccess::any(),
            allowed_mcp_servers: new.scope.allowed_mcp_servers,
            project_allowed_mcp_servers: McpServerAccess::any(),
            budget: new.scope.budget,
            project_budget: None,
            rotated_from: None,
            lineage: None,
        };
        self.store.insert_key(&record, &key.hash()).await?;
        self.audit(
            "api_key.created",
            actor,
            &record,
            audit::key_details(&record),
        )
        .await?;
        Ok((key, record))
    }

    /// Rotates the active key `old`: a new key (returned, its only copy)
    /// with the same project, owner, kind, models, MCP servers, rate
    /// limits, name and lifetime, whose `rotated_from` names `old`; `old`
    /// keeps working for
    /// `grace_seconds` more (at most until it would have expired anyway),
    /// then is refused as expired. `None`, with nothing changed, when `old`
    /// is not active. Audited as `api_key.rotated`.
    pub async fn rotate(
        &self,
        old: &KeyRecord,
        grace_seconds: i64,
        actor: &Actor,
    ) -> Result<Option<(ApiKey, KeyRecord)>, StoreError> {
        let key = ApiKey::generate();
        let at = now();
        let lifetime = old.expires_at.map(|e| e.saturating_sub(old.created_at));
        let record = KeyRecord {
            id: KeyId::generate(),
            hint: key.hint(),
            created_at: at,
            expires_at: lifetime.map(|l| at.saturating_add(l)),
            last_used_at: None,
            revoked_at: None,
            rotated_from: Some(old.id.clone()),
            lineage: Some(old.budget_holder().clone()),
            ..old.clone()
        };
        let grace_end = at.saturating_add(grace_seconds.max(0));
        let old_expires_at = old.expires_at.map_or(grace_end, |e| e.min(grace_end));
        if !self
            .store
            .rotate_key(&old.id, old_expires_at, &record, &key.hash(), at)
            .await?
        {
            return Ok(None);
        }
        let details = json!({
            "id": old.id.0,
            "data": {
                "new_key_id": record.id.0,
                "new_redacted_value": record.hint,
                "grace_period_seconds": grace_seconds,
                "old_key_expires_at": old_expires_at,
            }
        });
        self.audit("api_key.rotated", actor, &record, details)
            .await?;
        Ok(Some((key, record)))
    }

    /// Writes an audit entry about `key`, in its project.
    async fn audit(
        &self,
        kind: &str,
        actor: &Actor,
        key: &KeyRecord,
        details: serde_json::Value,
    ) -> Result<(), StoreError> {
        let mut entry = AuditEntry::new(kind, actor, details);
        if let Some(project) = self.store.project_by_id(&key.project_id).await? {
            entry = entry.in_project(&project);
        }
        audit::record(self.store.as_ref(), entry).await
    }

    /// Checks an `Authorization` header value. What the store said of the
    /// key is reused only while nothing changed (see the module's doc), so
    /// a revocation takes effect on the very next request.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<KeyRecord, AuthError> {
        let header = authorization.map(str::trim).filter(|h| !h.is_empty());
        let header = header.ok_or(AuthError::Missing)?;
        let token = bearer_token(header).ok_or(AuthError::Missing)?;
        let key = ApiKey::parse(token).map_err(AuthError::Malformed)?;
        let hash = key.hash();
        // Read before the store, so a change racing with the read leaves an
        // entry that is already out of date.
        let version = self.store.keys_version();
        let record = match version.and_then(|v| self.cache.get(&hash, v)) {
            Some(record) => record,
            None => {
                let read_at = Instant::now();
                let record =
                    crate::trace::in_span("store: find the key", self.store.key_by_hash(&hash))
                        .await?
                        .ok_or(AuthError::Unknown)?;
                if let Some(version) = version {
                    self.cache.put(hash, record.clone(), version, read_at);
                }
                record
            }
        };
        let at = now();
        match KeyState::of(&record, at) {
            KeyState::Active => {}
            KeyState::Revoked => return Err(AuthError::Revoked),
            KeyState::Expired => return Err(AuthError::Expired),
            KeyState::Disabled => return Err(AuthError::OwnerDisabled),
        }
        if record.last_used_at.is_none_or(|t| at - t >= TOUCH_EVERY) {
            crate::trace::in_span(
                "store: note the key's use",
                self.store.touch_key(&record.id, at),
            )
            .await?;
            self.cache.touched(&hash, at);
        }
        Ok(record)
    }

    /// The key with this id, when it may still be used (not revoked,
    /// expired, or of a disabled account): for work a key asked for earlier
    /// that runs later (a batch's lines), refused the moment the key is.
    pub async fn authenticate_id(&self, id: &KeyId) -> Result<KeyRecord, AuthError> {
        let record = self.store.key_by_id(id).await?.ok_or(AuthError::Unknown)?;
        match KeyState::of(&record, now()) {
            KeyState::Active => Ok(record),
            KeyState::Revoked => Err(AuthError::Revoked),
            KeyState::Expired => Err(AuthError::Expired),
            KeyState::Disabled => Err(AuthError::OwnerDisabled),
        }
    }

    /// Keys, newest first (an owner's only, when given).
    pub async fn list(&self, owner_id: Option<&UserId>) -> Result<Vec<KeyRecord>, StoreError> {
        self.store.list_keys(owner_id).await
    }

    /// The key with this id (any state).
    pub async fn get(&self, id: &KeyId) -> Result<Option<KeyRecord>, StoreError> {
        self.store.key_by_id(id).await
    }

    /// Sets a key's own rate limits; false when there is no such key.
    /// Audited as `rate_limit.updated`.
    pub async fn set_limits(
        &self,
        key: &KeyRecord,
        limits: KeyLimits,
        actor: &Actor,
    ) -> Result<bool, StoreError> {
        let found = self.store.set_key_limits(&key.id, limits).await?;
        if found {
            let details = json!({
                "id": key.id.0,
                "changes_requested": {
                    "max_requests_per_1_minute": limits.requests_per_minute,
                    "max_tokens_per_1_minute": limits.tokens_per_minute,
                }
            });
            self.audit("rate_limit.updated", actor, key, details)
                .await?;
        }
        Ok(found)
    }

    /// Sets (or removes) a key's token budget; false when there is no such
    /// key. Audited as `api_key.updated`.
    pub async fn set_budget(
        &self,
        key: &KeyRecord,
        budget: Option<crate::budget::Budget>,
        actor: &Actor,
    ) -> Result<bool, StoreError> {
        let found = self.store.set_key_budget(&key.id, budget).await?;
        if found {
            let details = json!({
                "id": key.id.0,
                "changes_requested": {
                    "budget": budget.map(|b| b.to_json()),
                }
            });
            self.audit("api_key.updated", actor, key, details).await?;
        }
        Ok(found)
    }

    /// Revokes a key; false when it does not exist or was already revoked.
    /// Audited as `api_key.deleted` (when it was revoked now).
    pub async fn revoke(&self, id: &KeyId, actor: &Actor) -> Result<bool, StoreError> {
        let revoked = self.store.revoke_key(id, now()).await?;
        if revoked && let Some(key) = self.store.key_by_id(id).await? {
            let details =
                json!({"id": key.id.0, "data": {"name": key.name, "redacted_value": key.hint}});
            self.audit("api_key.deleted", actor, &key, details).await?;
        }
        Ok(revoked)
    }

    /// Sets the models a key may use (its project's list still applies);
    /// false when there is no such key. From the key's next request, on
    /// every replica. Audited as `api_key.updated`.
    pub async fn set_allowed_models(
        &self,
        key: &KeyRecord,
        models: &ModelAccess,
        actor: &Actor,
    ) -> Result<bool, StoreError> {
        let found = self.store.set_key_models(&key.id, models).await?;
        if found {
            let details = json!({
                "id": key.id.0,
                "changes_requested": {"allowed_models": models.0},
            });
            self.audit("api_key.updated", actor, key, details).await?;
        }
        Ok(found)
    }

    /// Sets the registered MCP servers a key may use (its project's list
    /// still applies); false when there is no such key. From the key's
    /// next request, on every replica. Audited as `api_key.updated`, as
    /// its models are.
    pub async fn set_allowed_mcp_servers(
        &self,
        key: &KeyRecord,
        servers: &McpServerAccess,
        actor: &Actor,
    ) -> Result<bool, StoreError> {
        let found = self.store.set_key_mcp_servers(&key.id, servers).await?;
        if found {
            let details = json!({
                "id": key.id.0,
                "changes_requested": {"allowed_mcp_servers": servers.0},
            });
            self.audit("api_key.updated", actor, key, details).await?;
        }
        Ok(found)
    }
}

/// The token of `Bearer <token>`; the scheme is case-insensitive (RFC 7235).
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }

    #[test]
    fn revocation_wins_over_expiry() {
        let mut record = KeyRecord {
            id: KeyId("key_1".into()),
            name: "n".into(),
            hint: "h".into(),
            owner_id: None,
            created_via: KeyOrigin::Cli,
            created_at: 0,
            expires_at: Some(10),
            last_used_at: None,
            revoked_at: None,
            limits: Default::default(),
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
        };
        assert_eq!(KeyState::of(&record, 9), KeyState::Active);
        assert_eq!(KeyState::of(&record, 10), KeyState::Expired);
        record.revoked_at = Some(5);
        assert_eq!(KeyState::of(&record, 10), KeyState::Revoked);
    }

    #[test]
    fn a_disabled_owner_refuses_the_key_until_revoked() {
        let mut record = KeyRecord {
            id: KeyId("key_1".into()),
            name: "n".into(),
            hint: "h".into(),
            owner_id: Some(UserId("usr_1".into())),
            created_via: KeyOrigin::Dashboard,
            created_at: 0,
            expires_at: Some(10),
            last_used_at: None,
            revoked_at: None,
            limits: Default::default(),
            owner_disabled_at: Some(3),
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
        };
        assert_eq!(KeyState::of(&record, 5), KeyState::Disabled);
        assert_eq!(KeyState::of(&record, 20), KeyState::Disabled);
        assert_eq!(KeyState::Disabled.as_str(), "disabled");
        record.revoked_at = Some(4);
        assert_eq!(KeyState::of(&record, 5), KeyState::Revoked);
    }
}
