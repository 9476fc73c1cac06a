//! The storage boundary's errors: [`StoreError`], what every store trait
//! returns, and [`UnknownValue`], a stored value that no type reads. A
//! leaf: it imports nothing else of svc-core, so each aggregate's store
//! trait and value parsers use it without importing the [`Store`](crate::Store)
//! that unites them.

use thiserror::Error;

/// A failure of the storage layer. The message is for logs, not clients.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("a record with the same unique value exists")]
    Conflict,
    #[error("database error: {0}")]
    Database(String),
    /// The database did not answer in time or cannot be reached: the
    /// request may succeed when tried again (an HTTP 503).
    #[error("database unavailable: {0}")]
    Unavailable(String),
}

/// A stored value that no variant of its type reads: a row written by a
/// newer svc, or edited by hand. The store reports it as a database error.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown {what} {value:?} in the store")]
pub struct UnknownValue {
    /// What the value should have been.
    pub what: &'static str,
    /// The value found (cut to 40 characters).
    pub value: String,
}

impl UnknownValue {
    pub fn new(what: &'static str, value: &str) -> Self {
        UnknownValue {
            what,
            value: value.chars().take(40).collect(),
        }
    }
}
