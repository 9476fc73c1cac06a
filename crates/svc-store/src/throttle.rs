//! [`ThrottleStore`] on SQL: the `throttles` table, one fixed-window counter
//! per bucket. What a bucket is and how many hits are too many are the
//! caller's; this module only counts, in one statement per hit, so replicas
//! sharing the database share the count.

use async_trait::async_trait;
use sqlx::Row;
use svc_core::store::{StoreError, ThrottleStore};

use crate::SqlStore;
use crate::error::query_error;

// A later window starts the count again. A hit stamped with an earlier
// window than the stored one (a replica whose clock is a little behind)
// counts in the stored window instead of resetting it: otherwise two
// replicas alternating between windows would keep the count near 1.
const HIT: &str = "INSERT INTO throttles (bucket, window_start, hits) VALUES ($1, $2, 1) \
     ON CONFLICT (bucket) DO UPDATE SET \
     hits = CASE WHEN throttles.window_start >= excluded.window_start \
     THEN throttles.hits + 1 ELSE 1 END, \
     window_start = CASE WHEN throttles.window_start >= excluded.window_start \
     THEN throttles.window_start ELSE excluded.window_start END \
     RETURNING hits";
const READ: &str = "SELECT window_start, hits FROM throttles WHERE bucket = $1";
const CLEAR: &str = "DELETE FROM throttles WHERE bucket = $1";
const DELETE_STALE: &str = "DELETE FROM throttles WHERE window_start < $1";
// Only in the window the hit was counted in: a newer window's count is not
// the attempt's to take back.
const UNHIT: &str = "UPDATE throttles SET hits = hits - 1 \
     WHERE bucket = $1 AND window_start = $2 AND hits > 0";

#[async_trait]
impl ThrottleStore for SqlStore {
    async fn hit(&self, bucket: &str, window_start: i64) -> Result<i64, StoreError> {
        sqlx::query_scalar(HIT)
            .bind(bucket)
            .bind(window_start)
            .fetch_one(&self.pool)
            .await
            .map_err(query_error)
    }

    async fn hits(&self, bucket: &str, window_start: i64) -> Result<i64, StoreError> {
        let stored = sqlx::query(READ)
            .bind(bucket)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)?;
        let Some(stored) = stored else {
            return Ok(0);
        };
        let stored_start: i64 = stored.try_get("window_start").map_err(query_error)?;
        // As in `hit`: a window newer than the caller's is the current one.
        if stored_start >= window_start {
            stored.try_get("hits").map_err(query_error)
        } else {
            Ok(0)
        }
    }

    async fn unhit(&self, bucket: &str, window_start: i64) -> Result<(), StoreError> {
        sqlx::query(UNHIT)
            .bind(bucket)
            .bind(window_start)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(query_error)
    }

    async fn delete_stale_throttles(&self, before: i64) -> Result<u64, StoreError> {
        sqlx::query(DELETE_STALE)
            .bind(before)
            .execute(&self.pool)
            .await
            .map(|done| done.rows_affected())
            .map_err(query_error)
    }

    async fn clear(&self, bucket: &str) -> Result<(), StoreError> {
        sqlx::query(CLEAR)
            .bind(bucket)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(query_error)
    }
}
