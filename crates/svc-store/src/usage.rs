//! [`UsageStore`] on SQL: the `usage_daily` table, one row per key per UTC
//! day. Adding is a single upsert, so replicas counting the same key and day
//! at once never lose an increment.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::account::UserId;
use svc_core::key::KeyId;
use svc_core::store::{StoreError, UsageStore};
use svc_core::usage::{UsageDelta, UsageRow};

use crate::SqlStore;
use crate::connect::BACKGROUND_TIMEOUT;
use crate::error::{bounded, query_error};

const ADD: &str = "INSERT INTO usage_daily \
     (key_id, day, requests, prompt_tokens, completion_tokens) VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT (key_id, day) DO UPDATE SET \
     requests = usage_daily.requests + excluded.requests, \
     prompt_tokens = usage_daily.prompt_tokens + excluded.prompt_tokens, \
     completion_tokens = usage_daily.completion_tokens + excluded.completion_tokens";
const SINCE: &str = "SELECT key_id, day, requests, prompt_tokens, completion_tokens \
     FROM usage_daily WHERE day >= $1 ORDER BY day, key_id";
// Usage of a key that is no longer in `api_keys` belongs to nobody.
const SINCE_OF_OWNER: &str = "SELECT u.key_id, u.day, u.requests, u.prompt_tokens, \
     u.completion_tokens \
     FROM usage_daily u JOIN api_keys k ON k.id = u.key_id \
     WHERE k.owner_id = $1 AND u.day >= $2 ORDER BY u.day, u.key_id";

fn row(row: &AnyRow) -> Result<UsageRow, sqlx::Error> {
    Ok(UsageRow {
        key_id: KeyId(row.try_get("key_id")?),
        day: row.try_get("day")?,
        requests: row.try_get("requests")?,
        prompt_tokens: row.try_get("prompt_tokens")?,
        completion_tokens: row.try_get("completion_tokens")?,
    })
}

#[async_trait]
impl UsageStore for SqlStore {
    async fn add_usage(&self, delta: &UsageDelta) -> Result<(), StoreError> {
        let add = sqlx::query(ADD)
            .bind(delta.key_id.0.as_str())
            .bind(delta.day.as_str())
            .bind(delta.requests)
            .bind(delta.prompt_tokens)
            .bind(delta.completion_tokens)
            .execute(&self.pool);
        // The flusher retries what failed; a hung database must not stop it.
        bounded(BACKGROUND_TIMEOUT, async {
            add.await.map(|_| ()).map_err(query_error)
        })
        .await
    }

    async fn usage_since(
        &self,
        owner_id: Option<&UserId>,
        since_day: &str,
    ) -> Result<Vec<UsageRow>, StoreError> {
        let query = match owner_id {
            Some(owner) => sqlx::query(SINCE_OF_OWNER)
                .bind(owner.0.as_str())
                .bind(since_day),
            None => sqlx::query(SINCE).bind(since_day),
        };
        let rows = query.fetch_all(&self.pool).await.map_err(query_error)?;
        rows.iter()
            .map(row)
            .collect::<Result<_, _>>()
            .map_err(query_error)
    }
}
