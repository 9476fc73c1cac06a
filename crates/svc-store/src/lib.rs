//! svc's [`Store`](svc_core::store::Store) on sqlx: one type, [`SqlStore`],
//! for both SQLite (embedded, the default) and PostgreSQL (shared by
//! replicas), with the SQL migrations of each backend.
//!
//! Every query is written once, with `$1, $2, …` placeholders (SQLite reads
//! them too), and binds only TEXT and BIGINT (times are unix seconds), so the
//! same code runs on both databases through sqlx's `Any` driver. Queries are
//! built at run time: there is no database at build time. This crate knows
//! nothing of HTTP or of key semantics (expiry and revocation are judged by
//! `svc-core`).
//!
//! One module per store trait: keys, projects, the audit log, users (and the first-user setup token),
//! sessions, device authorizations, usage counters, throttles, Responses
//! API responses, files and batches. What must not be half done (the first user, a device's key) is one transaction; what
//! replicas race on (a flash message, a redemption, a throttle hit) is
//! decided by a single conditional statement, on both backends.

mod audit;
mod batches;
mod budgets;
mod changes;
mod connect;
mod devices;
mod error;
mod filter;
mod health;
mod keys;
mod lists;
mod projects;
mod request_logs;
mod response_cache;
mod responses;
mod sessions;
pub mod testing;
mod throttle;
mod usage;
mod users;

pub use connect::SQLITE_FILE_NAME;

use std::sync::Arc;

use sqlx::AnyPool;

/// Which database a [`SqlStore`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

/// The SQL implementation of svc's store, over SQLite or PostgreSQL.
/// Cloning is cheap and shares the connection pool.
#[derive(Clone)]
pub struct SqlStore {
    pool: AnyPool,
    backend: Backend,
    /// How key changes are announced and seen (see `changes.rs`).
    key_changes: Arc<changes::KeyChanges>,
}

impl SqlStore {
    /// `"sqlite"` or `"postgres"`.
    pub fn backend(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// The one row `sql` finds for `value` (its only parameter), read by
    /// `record`.
    pub(crate) async fn one_by<T>(
        &self,
        sql: &'static str,
        record: fn(&sqlx::any::AnyRow) -> Result<T, sqlx::Error>,
        value: &str,
    ) -> Result<Option<T>, svc_core::store::StoreError> {
        let row = sqlx::query(sql)
            .bind(value)
            .fetch_optional(&self.pool)
            .await
            .map_err(error::query_error)?;
        row.as_ref()
            .map(record)
            .transpose()
            .map_err(error::query_error)
    }

    /// Every row `sql` finds for `values` (its parameters, in order), read
    /// by `record`.
    pub(crate) async fn all_by<T>(
        &self,
        sql: &'static str,
        record: fn(&sqlx::any::AnyRow) -> Result<T, sqlx::Error>,
        values: &[&str],
    ) -> Result<Vec<T>, svc_core::store::StoreError> {
        let mut query = sqlx::query(sql);
        for value in values {
            query = query.bind(*value);
        }
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(error::query_error)?;
        rows.iter()
            .map(record)
            .collect::<Result<_, _>>()
            .map_err(error::query_error)
    }

    /// Runs `query`, which changes at most one row that keys are judged
    /// with (a key's, a project's), and announces the change to every
    /// store (see `changes.rs`) when it changed one; true then.
    pub(crate) async fn change_for_keys<'q>(
        &self,
        query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    ) -> Result<bool, svc_core::store::StoreError> {
        let before = self.key_changes.before_change().await;
        let done = query
            .execute(&self.pool)
            .await
            .map_err(error::query_error)?;
        let changed = done.rows_affected() == 1;
        if changed {
            self.key_changes.changed(before).await;
        }
        Ok(changed)
    }

    /// Closes the pool, waiting for connections in use to be returned, and
    /// stops listening for key changes.
    pub async fn close(&self) {
        self.key_changes.stop();
        self.pool.close().await;
    }
}

// By hand: the pool's `Debug` would print the database URL, password included.
impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("backend", &self.backend())
            .finish_non_exhaustive()
    }
}
