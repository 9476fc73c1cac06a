//! [`SessionStore`] on SQL: the `sessions` table, by the hash of the cookie's
//! token (never the token). Whether a session is still valid is for the
//! caller to judge; this module only deletes what it is told has expired.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::hashes::SessionHash;
use svc_core::ids::UserId;
use svc_core::session::SessionRecord;
use svc_core::store::{SessionStore, StoreError};

use crate::SqlStore;
use crate::error::query_error;

const INSERT: &str = "INSERT INTO sessions \
     (token_hash, user_id, csrf_token, created_at, expires_at, address, flash) \
     VALUES ($1, $2, $3, $4, $5, $6, NULL)";
const BY_HASH: &str = "SELECT token_hash, user_id, csrf_token, created_at, expires_at, address \
     FROM sessions WHERE token_hash = $1";
const DELETE: &str = "DELETE FROM sessions WHERE token_hash = $1";
// Expired at `at` means `expires_at <= at`, as for keys.
const DELETE_EXPIRED: &str = "DELETE FROM sessions WHERE expires_at <= $1";
const SET_FLASH: &str = "UPDATE sessions SET flash = $2 WHERE token_hash = $1";
const READ_FLASH: &str = "SELECT flash FROM sessions WHERE token_hash = $1";
// Compare-and-swap: of concurrent takers that read the same value, only the
// first UPDATE still finds it (PostgreSQL re-checks the WHERE after waiting
// for the row; SQLite runs one writer at a time).
const CLEAR_FLASH_IF: &str =
    "UPDATE sessions SET flash = NULL WHERE token_hash = $1 AND flash = $2";

fn record(row: &AnyRow) -> Result<SessionRecord, sqlx::Error> {
    Ok(SessionRecord {
        token_hash: SessionHash::from_stored(row.try_get("token_hash")?),
        user_id: UserId(row.try_get("user_id")?),
        csrf_token: row.try_get("csrf_token")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        address: row.try_get("address")?,
    })
}

#[async_trait]
impl SessionStore for SqlStore {
    async fn insert_session(&self, session: &SessionRecord) -> Result<(), StoreError> {
        sqlx::query(INSERT)
            .bind(session.token_hash.as_str())
            .bind(session.user_id.0.as_str())
            .bind(session.csrf_token.as_str())
            .bind(session.created_at)
            .bind(session.expires_at)
            .bind(session.address.as_deref())
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(query_error)
    }

    async fn session_by_hash(
        &self,
        token_hash: &SessionHash,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let row = sqlx::query(BY_HASH)
            .bind(token_hash.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?;
        row.as_ref().map(record).transpose().map_err(query_error)
    }

    async fn delete_session(&self, token_hash: &SessionHash) -> Result<bool, StoreError> {
        let done = sqlx::query(DELETE)
            .bind(token_hash.as_str())
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn delete_expired_sessions(&self, at: i64) -> Result<u64, StoreError> {
        let done = sqlx::query(DELETE_EXPIRED)
            .bind(at)
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        Ok(done.rows_affected())
    }

    async fn set_session_flash(
        &self,
        token_hash: &SessionHash,
        flash: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query(SET_FLASH)
            .bind(token_hash.as_str())
            .bind(flash)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(query_error)
    }

    async fn take_session_flash(
        &self,
        token_hash: &SessionHash,
    ) -> Result<Option<String>, StoreError> {
        let flash = sqlx::query_scalar::<_, Option<String>>(READ_FLASH)
            .bind(token_hash.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?
            .flatten();
        let Some(flash) = flash else {
            return Ok(None);
        };
        let cleared = sqlx::query(CLEAR_FLASH_IF)
            .bind(token_hash.as_str())
            .bind(flash.as_str())
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        Ok((cleared.rows_affected() == 1).then_some(flash))
    }
}
