//! [`BudgetStore`] on SQL: the `budget_usage` table, one count per scope
//! and window; and the budget columns of keys and projects.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;
use svc_core::budget::{Budget, BudgetPeriod, BudgetUnit};
use svc_core::store::{BudgetStore, StoreError};

use crate::SqlStore;
use crate::connect::{BACKGROUND_TIMEOUT, REQUEST_PATH_TIMEOUT};
use crate::error::{bounded, query_error, unknown_value};

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
const SWEEP: &str = "DELETE FROM budget_usage WHERE window_start < $1";

/// The budget in the columns `limit`, `period` and `unit` (the limit
/// NULL: none; the unit NULL: tokens, as before spend budgets).
pub(crate) fn budget(
    row: &AnyRow,
    limit: &str,
    period: &str,
    unit: &str,
) -> Result<Option<Budget>, sqlx::Error> {
    let Some(amount) = row.try_get::<Option<i64>, _>(limit)? else {
        return Ok(None);
    };
    let stored: Option<String> = row.try_get(period)?;
    let period = BudgetPeriod::parse(stored.as_deref().unwrap_or(""))
        .map_err(|e| unknown_value(period, e))?;
    let stored: Option<String> = row.try_get(unit)?;
    let unit = BudgetUnit::parse(stored.as_deref().unwrap_or("tokens"))
        .map_err(|e| unknown_value(unit, e))?;
    Ok(Some(Budget {
        limit: amount,
        unit,
        period,
    }))
}

/// The stored columns of `budget`: limit, period and unit, NULL for none.
pub(crate) struct BudgetColumns {
    pub limit: Option<i64>,
    pub period: Option<&'static str>,
    pub unit: Option<&'static str>,
}

pub(crate) fn budget_columns(budget: Option<Budget>) -> BudgetColumns {
    BudgetColumns {
        limit: budget.map(|b| b.limit),
        period: budget.map(|b| b.period.as_str()),
        unit: budget.map(|b| b.unit.as_str()),
    }
}

// Charging is on the request's path and settling right after it: both are
// bounded like the key lookup, so a database that stopped answering makes
// the budget fail open (the server lets the request through) in time.
#[async_trait]
impl BudgetStore for SqlStore {
    async fn charge_budget(
        &self,
        scope: &str,
        window_start: i64,
        limit: i64,
        tokens: i64,
    ) -> Result<Option<i64>, StoreError> {
        bounded(REQUEST_PATH_TIMEOUT, async {
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
        })
        .await
    }

    async fn adjust_budget(
        &self,
        scope: &str,
        window_start: i64,
        delta: i64,
    ) -> Result<(), StoreError> {
        bounded(BACKGROUND_TIMEOUT, async {
            sqlx::query(ADJUST)
                .bind(scope)
                .bind(window_start)
                .bind(delta)
                .execute(&self.pool)
                .await
                .map(|_| ())
                .map_err(query_error)
        })
        .await
    }

    async fn budget_used(&self, scope: &str, window_start: i64) -> Result<i64, StoreError> {
        bounded(REQUEST_PATH_TIMEOUT, async {
            sqlx::query_scalar(USED)
                .bind(scope)
                .bind(window_start)
                .fetch_optional(&self.pool)
                .await
                .map(Option::unwrap_or_default)
                .map_err(query_error)
        })
        .await
    }

    async fn sweep_budget_usage(&self, before: i64) -> Result<u64, StoreError> {
        bounded(BACKGROUND_TIMEOUT, async {
            sqlx::query(SWEEP)
                .bind(before)
                .execute(&self.pool)
                .await
                .map(|done| done.rows_affected())
                .map_err(query_error)
        })
        .await
    }
}
