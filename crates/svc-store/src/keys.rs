//! [`KeyStore`] on SQL: the `api_keys` table. Only the key's hash is stored;
//! whether a key is usable (revoked, expired) is for the caller to judge.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use svc_core::budget::Budget;
use svc_core::ids::{KeyId, ProjectId, UserId};
use svc_core::key::{KeyHash, KeyLimits, KeyOrigin, KeyRecord};
use svc_core::project::{AdminReach, KeyKind, McpServerAccess, ModelAccess};
use svc_core::store::{KeyStore, StoreError, UnknownValue};

use crate::SqlStore;
use crate::connect::REQUEST_PATH_TIMEOUT;
use crate::error::{bounded, query_error, unknown_value};

// Every key is read with its owner's state and its project's lists: a
// disabled account's keys are refused and a project's model and MCP server
// lists apply to its keys (by svc-core), so what authentication reads must
// include them.
macro_rules! select {
    () => {
        "SELECT k.id, k.name, k.hint, k.owner_id, k.created_via, k.created_at, k.expires_at, \
         k.last_used_at, k.revoked_at, k.rpm_limit, k.tpm_limit, \
         k.project_id, k.kind, k.permissions, k.admin_reach, k.allowed_models, k.rotated_from, \
         k.lineage_id, k.budget_tokens, k.budget_period, k.budget_unit, k.allowed_mcp_servers, \
         p.allowed_models AS project_allowed_models, \
         p.allowed_mcp_servers AS project_allowed_mcp_servers, \
         p.budget_tokens AS project_budget_tokens, p.budget_period AS project_budget_period, \
         p.budget_unit AS project_budget_unit, \
         u.disabled_at AS owner_disabled_at \
         FROM api_keys k LEFT JOIN users u ON u.id = k.owner_id \
         LEFT JOIN projects p ON p.id = k.project_id"
    };
}

const INSERT: &str = "INSERT INTO api_keys (id, key_hash, name, hint, owner_id, created_via, \
     created_at, expires_at, last_used_at, revoked_at, rpm_limit, tpm_limit, \
     project_id, kind, permissions, allowed_models, rotated_from, lineage_id, budget_tokens, \
     budget_period, budget_unit, admin_reach, allowed_mcp_servers) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, \
     $19, $20, $21, $22, $23)";
const OF_PROJECT: &str = concat!(
    select!(),
    " WHERE k.project_id = $1 ORDER BY k.created_at DESC, k.id DESC"
);
const BY_HASH: &str = concat!(select!(), " WHERE k.key_hash = $1");
const BY_ID: &str = concat!(select!(), " WHERE k.id = $1");
const ALL: &str = concat!(select!(), " ORDER BY k.created_at DESC, k.id DESC");
const OF_OWNER: &str = concat!(
    select!(),
    " WHERE k.owner_id = $1 ORDER BY k.created_at DESC, k.id DESC"
);
const REVOKE: &str = "UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL";
// Only an active key is rotated: not revoked, not expired at $3.
const END_IN_GRACE: &str = "UPDATE api_keys SET expires_at = $2 \
     WHERE id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $3)";
const SET_LIMITS: &str = "UPDATE api_keys SET rpm_limit = $2, tpm_limit = $3 WHERE id = $1";
const SET_BUDGET: &str =
    "UPDATE api_keys SET budget_tokens = $2, budget_period = $3, budget_unit = $4 WHERE id = $1";
// PostgreSQL's key-change trigger lists allowed_models (0012), so every
// replica hears of it.
const SET_MODELS: &str = "UPDATE api_keys SET allowed_models = $2 WHERE id = $1";
// Listed in the trigger too (0022).
const SET_MCP_SERVERS: &str = "UPDATE api_keys SET allowed_mcp_servers = $2 WHERE id = $1";
// Replicas may touch one key in any order: the latest time wins.
const TOUCH: &str = "UPDATE api_keys SET last_used_at = $2 \
     WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)";

fn record(row: &AnyRow) -> Result<KeyRecord, sqlx::Error> {
    let created_via: String = row.try_get("created_via")?;
    let created_via =
        KeyOrigin::parse(&created_via).map_err(|e| unknown_value("created_via", e))?;
    Ok(KeyRecord {
        id: KeyId(row.try_get("id")?),
        name: row.try_get("name")?,
        hint: row.try_get("hint")?,
        owner_id: row.try_get::<Option<String>, _>("owner_id")?.map(UserId),
        created_via,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        last_used_at: row.try_get("last_used_at")?,
        revoked_at: row.try_get("revoked_at")?,
        limits: KeyLimits {
            requests_per_minute: row.try_get("rpm_limit")?,
            tokens_per_minute: row.try_get("tpm_limit")?,
        },
        owner_disabled_at: row.try_get("owner_disabled_at")?,
        project_id: ProjectId(row.try_get("project_id")?),
        kind: kind(row)?,
        allowed_models: crate::lists::model_access(row, "allowed_models")?,
        project_allowed_models: crate::lists::model_access(row, "project_allowed_models")?,
        allowed_mcp_servers: crate::lists::mcp_server_access(row, "allowed_mcp_servers")?,
        project_allowed_mcp_servers: crate::lists::mcp_server_access(
            row,
            "project_allowed_mcp_servers",
        )?,
        rotated_from: row.try_get::<Option<String>, _>("rotated_from")?.map(KeyId),
        lineage: row.try_get::<Option<String>, _>("lineage_id")?.map(KeyId),
        budget: crate::budgets::budget(row, "budget_tokens", "budget_period", "budget_unit")?,
        project_budget: crate::budgets::budget(
            row,
            "project_budget_tokens",
            "project_budget_period",
            "project_budget_unit",
        )?,
    })
}

/// The key's kind, from `kind`, (for `restricted`) `permissions` and (for
/// `admin`) `admin_reach`.
fn kind(row: &AnyRow) -> Result<KeyKind, sqlx::Error> {
    let name: String = row.try_get("kind")?;
    let permissions = crate::lists::strings(row, "permissions")?.unwrap_or_default();
    let kind = KeyKind::from_parts(&name, &permissions)
        .map_err(|e| unknown_value("kind", UnknownValue::new("key kind", &e.to_string())))?;
    let reach: Option<String> = row.try_get("admin_reach")?;
    Ok(kind.bounded_by(AdminReach::parse(reach.as_deref())))
}

/// The stored `permissions` of a kind: a JSON array for `restricted`.
fn permissions_of(kind: &KeyKind) -> Option<String> {
    match kind {
        KeyKind::Restricted(list) => Some(crate::lists::to_json(
            list.iter().map(|p| p.as_str().to_owned()),
        )),
        KeyKind::All | KeyKind::Admin(_) => None,
    }
}

/// Inserts a key on `conn`, which may be inside a transaction (a device
/// authorization's redemption inserts its key this way).
pub(crate) async fn insert_key_on(
    conn: &mut AnyConnection,
    record: &KeyRecord,
    hash: &KeyHash,
) -> Result<(), StoreError> {
    sqlx::query(INSERT)
        .bind(record.id.0.as_str())
        .bind(hash.to_hex())
        .bind(record.name.as_str())
        .bind(record.hint.as_str())
        .bind(record.owner_id.as_ref().map(|u| u.0.as_str()))
        .bind(record.created_via.as_str())
        .bind(record.created_at)
        .bind(record.expires_at)
        .bind(record.last_used_at)
        .bind(record.revoked_at)
        .bind(record.limits.requests_per_minute)
        .bind(record.limits.tokens_per_minute)
        .bind(record.project_id.0.as_str())
        .bind(record.kind.name())
        .bind(permissions_of(&record.kind))
        .bind(crate::lists::model_access_json(&record.allowed_models))
        .bind(record.rotated_from.as_ref().map(|k| k.0.as_str()))
        .bind(record.lineage.as_ref().map(|k| k.0.as_str()))
        .bind(crate::budgets::budget_columns(record.budget).limit)
        .bind(crate::budgets::budget_columns(record.budget).period)
        .bind(crate::budgets::budget_columns(record.budget).unit)
        .bind(record.kind.admin_reach().map(AdminReach::as_str))
        .bind(crate::lists::mcp_server_access_json(
            &record.allowed_mcp_servers,
        ))
        .execute(conn)
        .await
        .map(|_| ())
        .map_err(query_error)
}

#[async_trait]
impl KeyStore for SqlStore {
    async fn insert_key(&self, record: &KeyRecord, hash: &KeyHash) -> Result<(), StoreError> {
        let mut conn = self.pool.acquire().await.map_err(query_error)?;
        insert_key_on(&mut conn, record, hash).await
    }

    async fn key_by_hash(&self, hash: &KeyHash) -> Result<Option<KeyRecord>, StoreError> {
        // Every authenticated request may read this: bounded.
        bounded(
            REQUEST_PATH_TIMEOUT,
            self.one_by(BY_HASH, record, &hash.to_hex()),
        )
        .await
    }

    async fn key_by_id(&self, id: &KeyId) -> Result<Option<KeyRecord>, StoreError> {
        self.one_by(BY_ID, record, &id.0).await
    }

    async fn list_keys(&self, owner_id: Option<&UserId>) -> Result<Vec<KeyRecord>, StoreError> {
        let query = match owner_id {
            Some(owner) => sqlx::query(OF_OWNER).bind(owner.0.as_str()),
            None => sqlx::query(ALL),
        };
        let rows = query.fetch_all(&self.pool).await.map_err(query_error)?;
        rows.iter()
            .map(record)
            .collect::<Result<_, _>>()
            .map_err(query_error)
    }

    async fn revoke_key(&self, id: &KeyId, at: i64) -> Result<bool, StoreError> {
        self.change_for_keys(sqlx::query(REVOKE).bind(id.0.as_str()).bind(at))
            .await
    }

    async fn touch_key(&self, id: &KeyId, at: i64) -> Result<(), StoreError> {
        let touch = sqlx::query(TOUCH)
            .bind(id.0.as_str())
            .bind(at)
            .execute(&self.pool);
        bounded(REQUEST_PATH_TIMEOUT, async {
            touch.await.map(|_| ()).map_err(query_error)
        })
        .await
    }

    async fn set_key_limits(&self, id: &KeyId, limits: KeyLimits) -> Result<bool, StoreError> {
        self.change_for_keys(
            sqlx::query(SET_LIMITS)
                .bind(id.0.as_str())
                .bind(limits.requests_per_minute)
                .bind(limits.tokens_per_minute),
        )
        .await
    }

    async fn set_key_budget(&self, id: &KeyId, budget: Option<Budget>) -> Result<bool, StoreError> {
        let columns = crate::budgets::budget_columns(budget);
        self.change_for_keys(
            sqlx::query(SET_BUDGET)
                .bind(id.0.as_str())
                .bind(columns.limit)
                .bind(columns.period)
                .bind(columns.unit),
        )
        .await
    }

    async fn rotate_key(
        &self,
        old: &KeyId,
        old_expires_at: i64,
        new: &KeyRecord,
        hash: &KeyHash,
        at: i64,
    ) -> Result<bool, StoreError> {
        let before = self.key_changes.before_change().await;
        // As a device's redemption: the UPDATE holds the old key's row (the
        // database, on SQLite) until commit, so a concurrent rotation or
        // revocation waits and then finds it no longer active.
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        let ended = sqlx::query(END_IN_GRACE)
            .bind(old.0.as_str())
            .bind(old_expires_at)
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        if ended.rows_affected() != 1 {
            tx.rollback().await.map_err(query_error)?;
            return Ok(false);
        }
        insert_key_on(&mut tx, new, hash).await?;
        tx.commit().await.map_err(query_error)?;
        self.key_changes.changed(before).await;
        Ok(true)
    }

    async fn list_project_keys(&self, project: &ProjectId) -> Result<Vec<KeyRecord>, StoreError> {
        self.all_by(OF_PROJECT, record, &[project.0.as_str()]).await
    }

    async fn set_key_models(&self, id: &KeyId, models: &ModelAccess) -> Result<bool, StoreError> {
        self.change_for_keys(
            sqlx::query(SET_MODELS)
                .bind(id.0.as_str())
                .bind(crate::lists::model_access_json(models)),
        )
        .await
    }

    async fn set_key_mcp_servers(
        &self,
        id: &KeyId,
        servers: &McpServerAccess,
    ) -> Result<bool, StoreError> {
        self.change_for_keys(
            sqlx::query(SET_MCP_SERVERS)
                .bind(id.0.as_str())
                .bind(crate::lists::mcp_server_access_json(servers)),
        )
        .await
    }

    fn keys_version(&self) -> Option<u64> {
        self.key_changes.version()
    }
}
