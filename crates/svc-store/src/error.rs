//! Turning sqlx errors into [`StoreError`]s. sqlx's messages carry neither
//! bound values nor connection passwords, so they are safe to log.

use svc_core::store::StoreError;

/// A query's error: a unique violation is a [`StoreError::Conflict`].
pub(crate) fn query_error(error: sqlx::Error) -> StoreError {
    match &error {
        sqlx::Error::Database(e) if e.is_unique_violation() => StoreError::Conflict,
        _ => StoreError::Database(error.to_string()),
    }
}

/// An error while doing `what` (e.g. "connecting to PostgreSQL").
pub(crate) fn context(what: &str, error: impl std::fmt::Display) -> StoreError {
    StoreError::Database(format!("{what}: {error}"))
}
