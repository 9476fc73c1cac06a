//! [`RequestLogStore`] on SQL: the `request_logs` table, written a batch
//! at a time, all or none (multi-row `INSERT`s on PostgreSQL, one
//! statement over a JSON array on SQLite), listed newest first by `seq` with
//! the filters given (every value bound), and swept by age.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::request_log::{RequestLogEntry, RequestLogQuery};
use svc_core::store::{RequestLogStore, StoreError};

use crate::error::query_error;
use crate::filter::{Filter, Value};
use crate::{Backend, SqlStore};

const COLUMNS: &str = "id, started_at_ms, key_id, project_id, user_id, model, dialect, endpoint, \
     status, error_type, prompt_tokens, cached_tokens, completion_tokens, cost_micros, ttft_ms, \
     duration_ms, upstream";
/// Columns a row binds.
const WIDTH: usize = 17;
/// Rows one statement inserts at most (well under both backends' limits
/// on bound values).
const ROWS_PER_STATEMENT: usize = 500;

fn row(row: &AnyRow) -> Result<RequestLogEntry, sqlx::Error> {
    let status: i64 = row.try_get("status")?;
    Ok(RequestLogEntry {
        id: row.try_get("id")?,
        started_at_ms: row.try_get("started_at_ms")?,
        key_id: row.try_get("key_id")?,
        project_id: row.try_get("project_id")?,
        user_id: row.try_get("user_id")?,
        model: row.try_get("model")?,
        dialect: row.try_get("dialect")?,
        endpoint: row.try_get("endpoint")?,
        status: u16::try_from(status).unwrap_or(0),
        error_type: row.try_get("error_type")?,
        prompt_tokens: row.try_get("prompt_tokens")?,
        cached_tokens: row.try_get("cached_tokens")?,
        completion_tokens: row.try_get("completion_tokens")?,
        cost_micros: row.try_get("cost_micros")?,
        ttft_ms: row.try_get("ttft_ms")?,
        duration_ms: row.try_get("duration_ms")?,
        upstream: row.try_get("upstream")?,
    })
}

#[async_trait]
impl RequestLogStore for SqlStore {
    async fn insert_request_logs(&self, rows: &[RequestLogEntry]) -> Result<(), StoreError> {
        match self.backend {
            Backend::Sqlite => self.insert_request_logs_as_json(rows).await,
            Backend::Postgres => self.insert_request_logs_bound(rows).await,
        }
    }

    async fn list_request_logs(
        &self,
        query: &RequestLogQuery,
    ) -> Result<Vec<RequestLogEntry>, StoreError> {
        let mut filter = Filter::default();
        filter.any_of(&["key_id"], &query.key_ids);
        filter.any_of(&["project_id"], &query.project_ids);
        filter.any_of(&["user_id"], &query.user_ids);
        filter.any_of(&["model"], &query.models);
        if !query.statuses.is_empty() {
            let mut ranges = Vec::new();
            for status in &query.statuses {
                let (low, high) = status.range();
                let low = filter.next(Value::Int(i64::from(low)));
                let high = filter.next(Value::Int(i64::from(high)));
                ranges.push(format!("status BETWEEN {low} AND {high}"));
            }
            filter.clauses.push(format!("({})", ranges.join(" OR ")));
        }
        if let Some(since) = query.since_ms {
            let place = filter.next(Value::Int(since));
            filter.clauses.push(format!("started_at_ms >= {place}"));
        }
        if let Some(until) = query.until_ms {
            let place = filter.next(Value::Int(until));
            filter.clauses.push(format!("started_at_ms < {place}"));
        }
        if let Some(after) = &query.after {
            let place = filter.next(Value::Text(after.clone()));
            filter.clauses.push(format!(
                "seq < (SELECT MIN(seq) FROM request_logs WHERE id = {place})"
            ));
        }
        let limit = i64::try_from(query.limit.saturating_add(1)).unwrap_or(i64::MAX);
        let limit_place = filter.next(Value::Int(limit));
        let sql = filter.sql(
            &format!("SELECT {COLUMNS} FROM request_logs"),
            &format!(" ORDER BY seq DESC LIMIT {limit_place}"),
        );
        let rows = filter
            .query(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?;
        rows.iter()
            .map(row)
            .collect::<Result<Vec<_>, _>>()
            .map_err(query_error)
    }

    async fn delete_request_logs_before(&self, before_ms: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM request_logs WHERE started_at_ms < $1")
            .bind(before_ms)
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        Ok(done.rows_affected())
    }
}

impl SqlStore {
    /// PostgreSQL: multi-row `INSERT`s, every value bound, in one
    /// transaction (40,000 rows in 0.73 s here).
    async fn insert_request_logs_bound(&self, rows: &[RequestLogEntry]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(query_error)?;
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            let places: Vec<String> = (0..chunk.len())
                .map(|r| {
                    let row: Vec<String> =
                        (1..=WIDTH).map(|c| format!("${}", r * WIDTH + c)).collect();
                    format!("({})", row.join(", "))
                })
                .collect();
            let sql = format!(
                "INSERT INTO request_logs ({COLUMNS}) VALUES {}",
                places.join(", ")
            );
            let mut statement = sqlx::query(&sql);
            for entry in chunk {
                statement = statement
                    .bind(entry.id.as_str())
                    .bind(entry.started_at_ms)
                    .bind(entry.key_id.as_deref())
                    .bind(entry.project_id.as_deref())
                    .bind(entry.user_id.as_deref())
                    .bind(entry.model.as_deref())
                    .bind(entry.dialect.as_str())
                    .bind(entry.endpoint.as_str())
                    .bind(i64::from(entry.status))
                    .bind(entry.error_type.as_deref())
                    .bind(entry.prompt_tokens)
                    .bind(entry.cached_tokens)
                    .bind(entry.completion_tokens)
                    .bind(entry.cost_micros)
                    .bind(entry.ttft_ms)
                    .bind(entry.duration_ms)
                    .bind(entry.upstream.as_deref());
            }
            statement.execute(&mut *tx).await.map_err(query_error)?;
        }
        tx.commit().await.map_err(query_error)
    }

    /// SQLite: the rows as one bound JSON array of arrays, unpacked by
    /// `json_each` in one statement. Measured here, 40,000 rows: 0.65 s,
    /// against 2.1 s as one prepared row-sized statement a row and 7.5 s as
    /// multi-row statements of 500 rows (sqlx's SQLite driver pays per
    /// statement and per bound value, SQLite's JSON parser hardly).
    async fn insert_request_logs_as_json(
        &self,
        rows: &[RequestLogEntry],
    ) -> Result<(), StoreError> {
        let values: Vec<serde_json::Value> = rows
            .iter()
            .map(|e| {
                serde_json::json!([
                    e.id,
                    e.started_at_ms,
                    e.key_id,
                    e.project_id,
                    e.user_id,
                    e.model,
                    e.dialect,
                    e.endpoint,
                    e.status,
                    e.error_type,
                    e.prompt_tokens,
                    e.cached_tokens,
                    e.completion_tokens,
                    e.cost_micros,
                    e.ttft_ms,
                    e.duration_ms,
                    e.upstream,
                ])
            })
            .collect();
        let json =
            serde_json::to_string(&values).map_err(|e| StoreError::Database(e.to_string()))?;
        let columns: Vec<String> = (0..WIDTH).map(|i| format!("value ->> {i}")).collect();
        let sql = format!(
            "INSERT INTO request_logs ({COLUMNS}) SELECT {} FROM json_each($1)",
            columns.join(", ")
        );
        sqlx::query(&sql)
            .bind(json)
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        Ok(())
    }
}
