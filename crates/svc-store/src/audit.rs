//! [`AuditStore`] on SQL: the `audit_logs` table, append-only (a trigger
//! refuses updates; the retention sweep is the only delete). Lists are
//! ordered by `seq`, the insertion order, and filtered by the copied
//! columns; the query is put together from the filters given, every value
//! bound.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::audit::{AuditEntry, AuditQuery};
use svc_core::ids::ProjectId;
use svc_core::store::{AuditStore, StoreError, UnknownValue};

use crate::SqlStore;
use crate::error::{query_error, unknown_value};
use crate::filter::{Filter, Value};

const INSERT: &str = "INSERT INTO audit_logs (id, type, effective_at, actor, actor_user_id, \
     actor_key_id, actor_email, project_id, project_name, details) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
const COLUMNS: &str = "SELECT id, type, effective_at, actor, actor_user_id, actor_key_id, \
     actor_email, project_id, project_name, details FROM audit_logs";
const DELETE_BEFORE: &str = "DELETE FROM audit_logs WHERE effective_at < $1";

fn json(row: &AnyRow, column: &str) -> Result<serde_json::Value, sqlx::Error> {
    let text: String = row.try_get(column)?;
    serde_json::from_str(&text)
        .map_err(|_| unknown_value(column, UnknownValue::new("JSON value", &text)))
}

fn entry(row: &AnyRow) -> Result<AuditEntry, sqlx::Error> {
    let project_id: Option<String> = row.try_get("project_id")?;
    let project_name: Option<String> = row.try_get("project_name")?;
    Ok(AuditEntry {
        id: row.try_get("id")?,
        kind: row.try_get("type")?,
        effective_at: row.try_get("effective_at")?,
        actor: json(row, "actor")?,
        actor_user_id: row.try_get("actor_user_id")?,
        actor_key_id: row.try_get("actor_key_id")?,
        actor_email: row.try_get("actor_email")?,
        project: project_id.map(|id| (ProjectId(id), project_name.unwrap_or_default())),
        details: json(row, "details")?,
    })
}

/// The audit log's own filters.
impl Filter {
    fn compare(&mut self, op: &str, bound: Option<i64>) {
        if let Some(bound) = bound {
            let place = self.next(Value::Int(bound));
            self.clauses.push(format!("effective_at {op} {place}"));
        }
    }

    fn cursor(&mut self, op: &str, id: Option<&String>) {
        if let Some(id) = id {
            let place = self.next(Value::Text(id.clone()));
            self.clauses.push(format!(
                "seq {op} (SELECT seq FROM audit_logs WHERE id = {place})"
            ));
        }
    }
}

#[async_trait]
impl AuditStore for SqlStore {
    async fn insert_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        let (project_id, project_name) = match &entry.project {
            Some((id, name)) => (Some(id.0.as_str()), Some(name.as_str())),
            None => (None, None),
        };
        sqlx::query(INSERT)
            .bind(entry.id.as_str())
            .bind(entry.kind.as_str())
            .bind(entry.effective_at)
            .bind(entry.actor.to_string())
            .bind(entry.actor_user_id.as_deref())
            .bind(entry.actor_key_id.as_deref())
            .bind(entry.actor_email.as_deref())
            .bind(project_id)
            .bind(project_name)
            .bind(entry.details.to_string())
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(query_error)
    }

    async fn list_audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        let mut filter = Filter::default();
        filter.any_of(&["type"], &query.event_types);
        filter.any_of(&["actor_user_id", "actor_key_id"], &query.actor_ids);
        filter.any_of(&["actor_email"], &query.actor_emails);
        filter.any_of(&["project_id"], &query.project_ids);
        filter.compare(">", query.gt);
        filter.compare(">=", query.gte);
        filter.compare("<", query.lt);
        filter.compare("<=", query.lte);
        filter.cursor("<", query.after.as_ref());
        filter.cursor(">", query.before.as_ref());
        // A page before a cursor is the entries just newer than it: read
        // oldest first from there, then turned around.
        let backwards = query.before.is_some() && query.after.is_none();
        let limit = i64::try_from(query.limit.saturating_add(1)).unwrap_or(i64::MAX);
        let limit_place = filter.next(Value::Int(limit));
        let order = if backwards { "ASC" } else { "DESC" };
        let sql = filter.sql(
            COLUMNS,
            &format!(" ORDER BY seq {order} LIMIT {limit_place}"),
        );
        let rows = filter
            .query(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error)?;
        let mut entries = rows
            .iter()
            .map(entry)
            .collect::<Result<Vec<_>, _>>()
            .map_err(query_error)?;
        if backwards {
            // Newest first, as every page; the extra row (the farthest from
            // the cursor, if any) stays last, where the caller drops it.
            let extra = entries.split_off(entries.len().min(query.limit));
            entries.reverse();
            entries.extend(extra);
        }
        Ok(entries)
    }

    async fn delete_audit_before(&self, before: i64) -> Result<u64, StoreError> {
        let done = sqlx::query(DELETE_BEFORE)
            .bind(before)
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        Ok(done.rows_affected())
    }
}
