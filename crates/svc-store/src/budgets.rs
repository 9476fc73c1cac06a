//! [`BudgetStore`] on SQL: the `budget_usage` table, one count per scope
//! and window; and the budget columns of keys and projects.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::budget::{Budget, BudgetPeriod};
use svc_core::store::{BudgetStore, StoreError};

use crate::SqlStore;
use crate::error::{query_error, unknown_value};

// The row is made first (a no-op when it exists), then charged by one
// conditional statement: of replicas racing on the last tokens, those that
// find the count at the limit add nothing.
const OPEN: &str = "INSERT INTO budget_usage (scope, window_start, used) VALUES ($1, $2, 0) \
     ON CONFLICT (scope, window_start) DO NOTHING";
const CHARGE: &str = "UPDATE budget_usage SET used = used + $3 \
     WHERE scope = $1 AND window_start = $2 AND used < $4 RETURNING used";
const ADJUST: &str =
    "UPDATE budget_usage SET used = used + $3 WHERE scope = $1 AND window_start = $2";
const USED: &str = "SELECT used FROM budget_usage WHERE scope = $1 AND window_start = $2";

/// The budget in `tokens` and `period` (both NULL: none).
pub(crate) fn budget(
    row: &AnyRow,
    tokens: &str,
    period: &str,
) -> Result<Option<Budget>, sqlx::Error> {
    let Some(amount) = row.try_get::<Option<i64>, _>(tokens)? else {
        return Ok(None);
    };
    let stored: Option<String> = row.try_get(period)?;
    let period = BudgetPeriod::parse(stored.as_deref().unwrap_or(""))
        .map_err(|e| unknown_value(period, e))?;
    Ok(Some(Budget {
        tokens: amount,
        period,
    }))
}

/// The stored columns of `budget`: tokens and period, NULL for none.
pub(crate) fn budget_columns(budget: Option<Budget>) -> (Option<i64>, Option<&'static str>) {
    match budget {
        Some(b) => (Some(b.tokens), Some(b.period.as_str())),
        None => (None, None),
    }
}

#[async_trait]
impl BudgetStore for SqlStore {
    async fn charge_budget(
        &self,
        scope: &str,
        window_start: i64,
        limit: i64,
        tokens: i64,
    ) -> Result<Option<i64>, StoreError> {
        sqlx::query(OPEN)
            .bind(scope)
            .bind(window_start)
            .execute(&self.pool)
            .await
            .map_err(query_error)?;
        sqlx::query_scalar(CHARGE)
            .bind(scope)
            .bind(window_start)
            .bind(tokens)
            .bind(limit)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error)
    }

    async fn adjust_budget(
        &self,
        scope: &str,
        window_start: i64,
        delta: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(ADJUST)
            .bind(scope)
            .bind(window_start)
            .bind(delta)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(query_error)
    }

    async fn budget_used(&self, scope: &str, window_start: i64) -> Result<i64, StoreError> {
        sqlx::query_scalar(USED)
            .bind(scope)
            .bind(window_start)
            .fetch_optional(&self.pool)
            .await
            .map(Option::unwrap_or_default)
            .map_err(query_error)
    }
}
