//! What can go wrong getting a model file: one error type for the crate's
//! callers, whose message says what failed and whose `source` says why
//! (shown as `what: why` by the command line).

use thiserror::Error;

/// Why a model could not be named, fetched, verified or installed.
#[derive(Debug, Error)]
pub enum ModelError {
    /// What was asked for, or what came, is not right: a reference `svc
    /// pull` does not know, a download cut short, a file that fails
    /// verification, pip's or the hub's refusal. The message says which.
    #[error("{0}")]
    Failed(String),
    /// A step failed (creating a file, reaching the hub, running pip, a
    /// background task): `what` is the step, `source` why.
    /// A file could not be read or written (the I/O error's own words).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{what}")]
    Step {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// The crate's results.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;

/// `Err(ModelError::Failed(format!(...)))`, returned.
macro_rules! fail {
    ($($message:tt)*) => {
        return Err($crate::error::ModelError::Failed(format!($($message)*)))
    };
}
pub(crate) use fail;

/// Naming the step that failed, as `anyhow::Context` would.
pub(crate) trait Context<T> {
    fn context(self, what: &str) -> Result<T>;
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for Result<T, E> {
    fn context(self, what: &str) -> Result<T> {
        self.with_context(|| what.to_owned())
    }

    fn with_context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| ModelError::Step {
            what: what(),
            source: Box::new(source),
        })
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, what: &str) -> Result<T> {
        self.ok_or_else(|| ModelError::Failed(what.to_owned()))
    }

    fn with_context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.ok_or_else(|| ModelError::Failed(what()))
    }
}
