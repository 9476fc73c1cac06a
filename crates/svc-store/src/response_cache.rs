//! [`ResponseCacheStore`] on SQL: the `response_cache` table, one row a
//! reply, written a batch a transaction and replaced in place (`ON
//! CONFLICT`), swept by expiry and then by age down to the size bound.

use async_trait::async_trait;
use sqlx::Row;
use svc_core::response_cache::CacheEntry;
use svc_core::store::{ResponseCacheStore, StoreError};

use crate::SqlStore;
use crate::error::query_error;

#[async_trait]
impl ResponseCacheStore for SqlStore {
    async fn cached_response(&self, key: &str, now_ms: i64) -> Result<Option<String>, StoreError> {
        let row =
            sqlx::query("SELECT value FROM response_cache WHERE key = $1 AND expires_at_ms > $2")
                .bind(key)
                .bind(now_ms)
                .fetch_optional(&self.pool)
                .await
                .map_err(query_error)?;
        row.map(|r| r.try_get("value"))
            .transpose()
            .map_err(query_error)
    }

    async fn cache_responses(&self, entries: &[CacheEntry]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        for entry in entries {
            sqlx::query(
                "INSERT INTO response_cache (key, value, bytes, created_at_ms, expires_at_ms) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value, bytes = excluded.bytes, \
                 created_at_ms = excluded.created_at_ms, expires_at_ms = excluded.expires_at_ms",
            )
            .bind(entry.key.as_str())
            .bind(entry.value.as_str())
            .bind(i64::try_from(entry.value.len()).unwrap_or(i64::MAX))
            .bind(entry.created_at_ms)
            .bind(entry.expires_at_ms)
            .execute(&mut *tx)
            .await
            .map_err(query_error)?;
        }
        tx.commit().await.map_err(query_error)
    }

    async fn sweep_response_cache(&self, now_ms: i64, max_bytes: u64) -> Result<u64, StoreError> {
        let expired = sqlx::query("DELETE FROM response_cache WHERE expires_at_ms <= $1")
            .bind(now_ms)
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        // The newest first: those past the bound, counted from the newest, go.
        let over = sqlx::query(
            "DELETE FROM response_cache WHERE key IN (\
                SELECT key FROM (\
                    SELECT key, SUM(bytes) OVER (ORDER BY created_at_ms DESC, key) AS total \
                    FROM response_cache\
                ) kept WHERE total > $1)",
        )
        .bind(i64::try_from(max_bytes).unwrap_or(i64::MAX))
        .execute(&self.pool)
        .await
        .map_err(query_error)?;
        Ok(expired.rows_affected() + over.rows_affected())
    }
}
