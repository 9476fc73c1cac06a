//! Turning sqlx errors into [`StoreError`]s. sqlx's messages carry neither
//! bound values nor connection passwords, so they are safe to log.

use svc_core::store::{StoreError, UnknownValue};

/// A query's error: a unique violation is a [`StoreError::Conflict`]; a
/// database that cannot be reached, or that is shutting down, refusing
/// connections or cancelled the statement, is [`StoreError::Unavailable`].
pub(crate) fn query_error(error: sqlx::Error) -> StoreError {
    match &error {
        sqlx::Error::Database(e) if e.is_unique_violation() => StoreError::Conflict,
        sqlx::Error::Database(e) if e.code().as_deref().is_some_and(unavailable_code) => {
            StoreError::Unavailable(error.to_string())
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => StoreError::Unavailable(error.to_string()),
        _ => StoreError::Database(error.to_string()),
    }
}

/// A stored value of `column` that its type does not read: reported as a
/// decoding error (a [`StoreError::Database`] that names the column and the
/// value), never a panic or a guess.
pub(crate) fn unknown_value(column: &str, error: UnknownValue) -> sqlx::Error {
    sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: Box::new(error),
    }
}

/// PostgreSQL's SQLSTATEs of a server that cannot serve now: connection
/// exceptions (08…), too many connections (53300), shutting down or
/// starting up (57P01-57P03) and a cancelled statement (57014, which
/// `statement_timeout` raises). SQLite's codes are numbers: none match.
fn unavailable_code(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "53300" | "57014" | "57P01" | "57P02" | "57P03")
}

/// Runs one store operation of the request path, giving up after `limit`.
///
/// sqlx bounds the wait for a connection (the pool's acquire timeout) but
/// not a statement on a connection it has: a server that accepted the
/// connection and then stopped answering (a hung process, a lost network)
/// would hold the request forever.
pub(crate) async fn bounded<T>(
    limit: std::time::Duration,
    operation: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(limit, operation)
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::Unavailable(format!(
                "no answer from the database within {limit:?}"
            )))
        })
}

/// An error while doing `what` (e.g. "connecting to PostgreSQL").
pub(crate) fn context(what: &str, error: impl std::fmt::Display) -> StoreError {
    StoreError::Database(format!("{what}: {error}"))
}
