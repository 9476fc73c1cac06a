//! [`UsageStore`] on SQL: the `usage_daily` table, one row per key per UTC
//! day. Adding is a single upsert, so replicas counting the same key and day
//! at once never lose an increment.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::ids::{KeyId, ProjectId, UserId};
use svc_core::store::{StoreError, UsageStore};
use svc_core::usage::{DayTotals, ModelUsageRow, UsageDelta, UsageRow};

use crate::SqlStore;
use crate::connect::BACKGROUND_TIMEOUT;
use crate::error::{bounded, query_error};

const ADD: &str = "INSERT INTO usage_daily \
     (key_id, day, requests, prompt_tokens, cached_tokens, completion_tokens, \
     cache_hits, cache_saved_tokens) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
     ON CONFLICT (key_id, day) DO UPDATE SET \
     cache_hits = usage_daily.cache_hits + excluded.cache_hits, \
     cache_saved_tokens = usage_daily.cache_saved_tokens + excluded.cache_saved_tokens, \
     requests = usage_daily.requests + excluded.requests, \
     prompt_tokens = usage_daily.prompt_tokens + excluded.prompt_tokens, \
     cached_tokens = usage_daily.cached_tokens + excluded.cached_tokens, \
     completion_tokens = usage_daily.completion_tokens + excluded.completion_tokens";
const ADD_MODEL: &str = "INSERT INTO usage_models \
     (key_id, day, model, requests, prompt_tokens, cached_tokens, completion_tokens, \
     cache_hits, cache_saved_tokens, audio_seconds, characters) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
     ON CONFLICT (key_id, day, model) DO UPDATE SET \
     audio_seconds = usage_models.audio_seconds + excluded.audio_seconds, \
     characters = usage_models.characters + excluded.characters, \
     cache_hits = usage_models.cache_hits + excluded.cache_hits, \
     cache_saved_tokens = usage_models.cache_saved_tokens + excluded.cache_saved_tokens, \
     requests = usage_models.requests + excluded.requests, \
     prompt_tokens = usage_models.prompt_tokens + excluded.prompt_tokens, \
     cached_tokens = usage_models.cached_tokens + excluded.cached_tokens, \
     completion_tokens = usage_models.completion_tokens + excluded.completion_tokens";
const BY_MODEL: &str = "SELECT u.key_id, k.project_id, u.day, u.model, u.requests, \
     u.prompt_tokens, u.cached_tokens, u.completion_tokens, u.cache_hits, \
     u.cache_saved_tokens, u.audio_seconds, u.characters \
     FROM usage_models u LEFT JOIN api_keys k ON k.id = u.key_id \
     WHERE u.day >= $1 AND u.day < $2 ORDER BY u.day, u.key_id, u.model";
const SINCE: &str = "SELECT key_id, day, requests, prompt_tokens, cached_tokens, \
     completion_tokens, cache_hits, cache_saved_tokens FROM usage_daily WHERE day >= $1 ORDER BY day, key_id";
// Usage of a key that is no longer in `api_keys` belongs to nobody.
const SINCE_OF_OWNER: &str = "SELECT u.key_id, u.day, u.requests, u.prompt_tokens, \
     u.cached_tokens, u.completion_tokens, u.cache_hits, u.cache_saved_tokens \
     FROM usage_daily u JOIN api_keys k ON k.id = u.key_id \
     WHERE k.owner_id = $1 AND u.day >= $2 ORDER BY u.day, u.key_id";

const RECENT: &str = "SELECT key_id, day, requests, prompt_tokens, cached_tokens, \
     completion_tokens, cache_hits, cache_saved_tokens FROM usage_daily WHERE day >= $1 \
     ORDER BY day DESC, key_id DESC LIMIT $2";
const RECENT_OF_OWNER: &str = "SELECT u.key_id, u.day, u.requests, u.prompt_tokens, \
     u.cached_tokens, u.completion_tokens, u.cache_hits, u.cache_saved_tokens \
     FROM usage_daily u JOIN api_keys k ON k.id = u.key_id \
     WHERE k.owner_id = $1 AND u.day >= $2 ORDER BY u.day DESC, u.key_id DESC LIMIT $3";
// PostgreSQL sums BIGINTs as NUMERIC: cast back.
const BY_DAY: &str = "SELECT day, CAST(SUM(requests) AS BIGINT) AS requests, \
     CAST(SUM(prompt_tokens) AS BIGINT) AS prompt_tokens, \
     CAST(SUM(cached_tokens) AS BIGINT) AS cached_tokens, \
     CAST(SUM(completion_tokens) AS BIGINT) AS completion_tokens, \
     CAST(SUM(cache_hits) AS BIGINT) AS cache_hits, \
     CAST(SUM(cache_saved_tokens) AS BIGINT) AS cache_saved_tokens \
     FROM usage_daily WHERE day >= $1 GROUP BY day ORDER BY day";
const BY_DAY_OF_OWNER: &str = "SELECT u.day, CAST(SUM(u.requests) AS BIGINT) AS requests, \
     CAST(SUM(u.prompt_tokens) AS BIGINT) AS prompt_tokens, \
     CAST(SUM(u.cached_tokens) AS BIGINT) AS cached_tokens, \
     CAST(SUM(u.completion_tokens) AS BIGINT) AS completion_tokens, \
     CAST(SUM(u.cache_hits) AS BIGINT) AS cache_hits, \
     CAST(SUM(u.cache_saved_tokens) AS BIGINT) AS cache_saved_tokens \
     FROM usage_daily u JOIN api_keys k ON k.id = u.key_id \
     WHERE k.owner_id = $1 AND u.day >= $2 GROUP BY u.day ORDER BY u.day";

fn row(row: &AnyRow) -> Result<UsageRow, sqlx::Error> {
    Ok(UsageRow {
        key_id: KeyId(row.try_get("key_id")?),
        day: row.try_get("day")?,
        requests: row.try_get("requests")?,
        prompt_tokens: row.try_get("prompt_tokens")?,
        cached_tokens: row.try_get("cached_tokens")?,
        completion_tokens: row.try_get("completion_tokens")?,
        cache_hits: row.try_get("cache_hits")?,
        cache_saved_tokens: row.try_get("cache_saved_tokens")?,
    })
}

#[async_trait]
impl UsageStore for SqlStore {
    async fn add_usage(&self, delta: &UsageDelta) -> Result<(), StoreError> {
        // Both rows or neither: the flusher retries the whole delta.
        let add = async {
            let mut tx = self.pool.begin().await?;
            sqlx::query(ADD)
                .bind(delta.key_id.0.as_str())
                .bind(delta.day.as_str())
                .bind(delta.requests)
                .bind(delta.prompt_tokens)
                .bind(delta.cached_tokens)
                .bind(delta.completion_tokens)
                .bind(delta.cache_hits)
                .bind(delta.cache_saved_tokens)
                .execute(&mut *tx)
                .await?;
            sqlx::query(ADD_MODEL)
                .bind(delta.key_id.0.as_str())
                .bind(delta.day.as_str())
                .bind(delta.model.as_str())
                .bind(delta.requests)
                .bind(delta.prompt_tokens)
                .bind(delta.cached_tokens)
                .bind(delta.completion_tokens)
                .bind(delta.cache_hits)
                .bind(delta.cache_saved_tokens)
                .bind(delta.audio_seconds)
                .bind(delta.characters)
                .execute(&mut *tx)
                .await?;
            tx.commit().await
        };
        // The flusher retries what failed; a hung database must not stop it.
        bounded(BACKGROUND_TIMEOUT, async { add.await.map_err(query_error) }).await
    }

    async fn usage_by_model(
        &self,
        from_day: &str,
        to_day: &str,
    ) -> Result<Vec<ModelUsageRow>, StoreError> {
        let rows = sqlx::query(BY_MODEL)
            .bind(from_day)
            .bind(to_day)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?;
        rows.iter()
            .map(|r| {
                Ok(ModelUsageRow {
                    key_id: KeyId(r.try_get("key_id")?),
                    project_id: r.try_get::<Option<String>, _>("project_id")?.map(ProjectId),
                    day: r.try_get("day")?,
                    model: r.try_get("model")?,
                    requests: r.try_get("requests")?,
                    prompt_tokens: r.try_get("prompt_tokens")?,
                    cached_tokens: r.try_get("cached_tokens")?,
                    completion_tokens: r.try_get("completion_tokens")?,
                    cache_hits: r.try_get("cache_hits")?,
                    cache_saved_tokens: r.try_get("cache_saved_tokens")?,
                    audio_seconds: r.try_get("audio_seconds")?,
                    characters: r.try_get("characters")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(query_error)
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

    async fn recent_usage(
        &self,
        owner_id: Option<&UserId>,
        since_day: &str,
        limit: i64,
    ) -> Result<Vec<UsageRow>, StoreError> {
        let query = match owner_id {
            Some(owner) => sqlx::query(RECENT_OF_OWNER)
                .bind(owner.0.as_str())
                .bind(since_day)
                .bind(limit),
            None => sqlx::query(RECENT).bind(since_day).bind(limit),
        };
        let rows = query.fetch_all(&self.pool).await.map_err(query_error)?;
        rows.iter()
            .map(row)
            .collect::<Result<_, _>>()
            .map_err(query_error)
    }

    async fn usage_by_day(
        &self,
        owner_id: Option<&UserId>,
        since_day: &str,
    ) -> Result<Vec<DayTotals>, StoreError> {
        let query = match owner_id {
            Some(owner) => sqlx::query(BY_DAY_OF_OWNER)
                .bind(owner.0.as_str())
                .bind(since_day),
            None => sqlx::query(BY_DAY).bind(since_day),
        };
        let rows = query.fetch_all(&self.pool).await.map_err(query_error)?;
        rows.iter()
            .map(|r| {
                Ok(DayTotals {
                    day: r.try_get("day")?,
                    requests: r.try_get("requests")?,
                    prompt_tokens: r.try_get("prompt_tokens")?,
                    cached_tokens: r.try_get("cached_tokens")?,
                    completion_tokens: r.try_get("completion_tokens")?,
                    cache_hits: r.try_get("cache_hits")?,
                    cache_saved_tokens: r.try_get("cache_saved_tokens")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(query_error)
    }
}
