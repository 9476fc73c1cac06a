//! [`DeviceStore`] on SQL: the `device_authorizations` table. Every change of
//! status is one conditional UPDATE, so replicas racing on one authorization
//! agree on a single outcome; redemption also inserts the key, in the same
//! transaction. Code formats and the grant's rules are `svc-core`'s.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::device::{DeviceDecision, DeviceRecord, DeviceState};
use svc_core::hashes::{DeviceCodeHash, UserCodeHash};
use svc_core::ids::{KeyId, UserId};
use svc_core::key::{KeyHash, KeyRecord};
use svc_core::store::{DeviceStore, StoreError};

use crate::SqlStore;
use crate::error::{query_error, unknown_value};
use crate::keys::insert_key_on;

macro_rules! columns {
    () => {
        "id, device_code_hash, user_code_hash, client_id, scope, client_address, user_agent, \
         created_at, expires_at, interval_secs, last_polled_at_ms, status, user_id, \
         decided_at, key_id"
    };
}

const INSERT: &str = concat!(
    "INSERT INTO device_authorizations (",
    columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
);
const BY_CODE_HASH: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM device_authorizations WHERE device_code_hash = $1"
);
const BY_USER_CODE_HASH: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM device_authorizations WHERE user_code_hash = $1"
);
const COUNT_LIVE: &str = "SELECT COUNT(*) FROM device_authorizations WHERE expires_at > $1";
// $3 is the latest earlier poll that still leaves the required gap.
const POLL_IN_TIME: &str = "UPDATE device_authorizations SET last_polled_at_ms = $2 \
     WHERE id = $1 AND (last_polled_at_ms IS NULL OR last_polled_at_ms <= $3)";
const POLL_TOO_SOON: &str = "UPDATE device_authorizations \
     SET interval_secs = interval_secs + $3, last_polled_at_ms = $2 WHERE id = $1";
const DECIDE: &str = "UPDATE device_authorizations SET status = $2, user_id = $3, decided_at = $4 \
     WHERE id = $1 AND status = 'pending' AND expires_at > $4";
// Never for an account disabled since it approved (disabling also denies
// its approvals; this is for one that raced with that). Deleting an account
// denies its approvals in the same transaction as the delete.
const REDEEM: &str = "UPDATE device_authorizations SET status = 'redeemed', key_id = $2 \
     WHERE id = $1 AND status = 'approved' AND expires_at > $3 AND NOT EXISTS (SELECT 1 \
     FROM users WHERE users.id = device_authorizations.user_id \
     AND users.disabled_at IS NOT NULL)";
// Expired at `before` means `expires_at <= before`, as for keys.
const DELETE_EXPIRED: &str = "DELETE FROM device_authorizations WHERE expires_at <= $1";

fn record(row: &AnyRow) -> Result<DeviceRecord, sqlx::Error> {
    let status: String = row.try_get("status")?;
    let state = DeviceState::from_stored(
        &status,
        row.try_get::<Option<String>, _>("user_id")?.map(UserId),
        row.try_get("decided_at")?,
        row.try_get::<Option<String>, _>("key_id")?.map(KeyId),
    )
    .map_err(|e| unknown_value("status", e))?;
    Ok(DeviceRecord {
        id: row.try_get("id")?,
        device_code_hash: DeviceCodeHash::from_stored(row.try_get("device_code_hash")?),
        user_code_hash: UserCodeHash::from_stored(row.try_get("user_code_hash")?),
        client_id: row.try_get("client_id")?,
        scope: row.try_get("scope")?,
        client_address: row.try_get("client_address")?,
        user_agent: row.try_get("user_agent")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        interval: row.try_get("interval_secs")?,
        last_polled_at_ms: row.try_get("last_polled_at_ms")?,
        state,
    })
}

#[async_trait]
impl DeviceStore for SqlStore {
    async fn insert_device(&self, record: &DeviceRecord) -> Result<(), StoreError> {
        sqlx::query(INSERT)
            .bind(record.id.as_str())
            .bind(record.device_code_hash.as_str())
            .bind(record.user_code_hash.as_str())
            .bind(record.client_id.as_deref())
            .bind(record.scope.as_deref())
            .bind(record.client_address.as_deref())
            .bind(record.user_agent.as_deref())
            .bind(record.created_at)
            .bind(record.expires_at)
            .bind(record.interval)
            .bind(record.last_polled_at_ms)
            .bind(record.state.status().as_str())
            .bind(record.state.decided_by().map(|u| u.0.as_str()))
            .bind(record.state.decided_at())
            .bind(record.state.key_id().map(|k| k.0.as_str()))
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(query_error)
    }

    async fn device_by_code_hash(
        &self,
        hash: &DeviceCodeHash,
    ) -> Result<Option<DeviceRecord>, StoreError> {
        self.one_by(BY_CODE_HASH, record, hash.as_str()).await
    }

    async fn device_by_user_code_hash(
        &self,
        user_code_hash: &UserCodeHash,
    ) -> Result<Option<DeviceRecord>, StoreError> {
        self.one_by(BY_USER_CODE_HASH, record, user_code_hash.as_str())
            .await
    }

    async fn count_live_devices(&self, at: i64) -> Result<i64, StoreError> {
        sqlx::query_scalar(COUNT_LIVE)
            .bind(at)
            .fetch_one(&self.pool)
            .await
            .map_err(query_error)
    }

    async fn poll_device(
        &self,
        id: &str,
        at_ms: i64,
        min_gap_ms: i64,
        slow_down_secs: i64,
    ) -> Result<bool, StoreError> {
        let in_time = sqlx::query(POLL_IN_TIME)
            .bind(id)
            .bind(at_ms)
            .bind(at_ms.saturating_sub(min_gap_ms))
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        if in_time.rows_affected() == 1 {
            return Ok(true);
        }
        sqlx::query(POLL_TOO_SOON)
            .bind(id)
            .bind(at_ms)
            .bind(slow_down_secs)
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        Ok(false)
    }

    async fn decide_device(
        &self,
        id: &str,
        user_id: &UserId,
        decision: DeviceDecision,
        at: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(DECIDE)
            .bind(id)
            .bind(decision.status().as_str())
            .bind(user_id.0.as_str())
            .bind(at)
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn redeem_device(
        &self,
        id: &str,
        key: &KeyRecord,
        key_hash: &KeyHash,
        at: i64,
    ) -> Result<bool, StoreError> {
        // The UPDATE takes the row (PostgreSQL) or the database (SQLite) for
        // the rest of the transaction: a concurrent redemption waits, then
        // finds the status no longer `approved`. Dropping `tx` without
        // commit rolls back, so an error below leaves nothing written.
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        let moved = sqlx::query(REDEEM)
            .bind(id)
            .bind(key.id.0.as_str())
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        if moved.rows_affected() != 1 {
            tx.rollback().await.map_err(query_error)?;
            return Ok(false);
        }
        insert_key_on(&mut tx, key, key_hash).await?;
        tx.commit().await.map_err(query_error)?;
        Ok(true)
    }

    async fn delete_expired_devices(&self, before: i64) -> Result<u64, StoreError> {
        let done = sqlx::query(DELETE_EXPIRED)
            .bind(before)
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        Ok(done.rows_affected())
    }
}
