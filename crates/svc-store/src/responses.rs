//! [`ResponseStore`] on SQL: the `responses` table. Ownership and expiry
//! are part of every read, so another owner's or an expired response is
//! never returned; expired rows are deleted by
//! [`ResponseStore::delete_expired_responses`].

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::store::{ResponseStore, StoreError, StoredResponse};

use crate::SqlStore;
use crate::error::query_error;

const INSERT: &str = "INSERT INTO responses \
     (id, owner, created_at, expires_at, response, conversation) \
     VALUES ($1, $2, $3, $4, $5, $6)";
const BY_ID: &str = "SELECT id, owner, created_at, expires_at, response, conversation \
     FROM responses WHERE id = $1 AND owner = $2 AND expires_at > $3";
const DELETE: &str = "DELETE FROM responses WHERE id = $1 AND owner = $2";
// Expired at `at` means `expires_at <= at`, as for keys and sessions.
const DELETE_EXPIRED: &str = "DELETE FROM responses WHERE expires_at <= $1";

fn record(row: &AnyRow) -> Result<StoredResponse, sqlx::Error> {
    Ok(StoredResponse {
        id: row.try_get("id")?,
        owner: row.try_get("owner")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        response: row.try_get("response")?,
        conversation: row.try_get("conversation")?,
    })
}

#[async_trait]
impl ResponseStore for SqlStore {
    async fn insert_response(&self, response: &StoredResponse) -> Result<(), StoreError> {
        sqlx::query(INSERT)
            .bind(response.id.as_str())
            .bind(response.owner.as_str())
            .bind(response.created_at)
            .bind(response.expires_at)
            .bind(response.response.as_str())
            .bind(response.conversation.as_str())
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(query_error)
    }

    async fn response_by_id(
        &self,
        id: &str,
        owner: &str,
        at: i64,
    ) -> Result<Option<StoredResponse>, StoreError> {
        let row = sqlx::query(BY_ID)
            .bind(id)
            .bind(owner)
            .bind(at)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?;
        row.as_ref().map(record).transpose().map_err(query_error)
    }

    async fn delete_response(&self, id: &str, owner: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(DELETE)
            .bind(id)
            .bind(owner)
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn delete_expired_responses(&self, at: i64) -> Result<u64, StoreError> {
        let done = sqlx::query(DELETE_EXPIRED)
            .bind(at)
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        Ok(done.rows_affected())
    }
}
