//! How a client command fails: one message on stderr and an exit code that
//! tells the kinds of failure apart, so scripts can react to them.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done |
//! | 1 | any other failure (the server answered with an error, a local file could not be written) |
//! | 2 | bad usage (unknown flag, nothing to send) |
//! | 3 | the server could not be reached |
//! | 4 | not logged in, or the server refused the key: run `svc login` |
//! | 5 | the login was denied in the browser |
//! | 6 | the login code expired (or was used up) before approval |
//! | 130 | interrupted with Ctrl-C |

/// A failure of a client command that has its own exit code.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// No connection, or it broke before an answer came.
    #[error("cannot reach {url}: {reason}. Is `svc serve` running there?")]
    Network { url: String, reason: String },
    /// No key to send.
    #[error("{0}")]
    NotLoggedIn(String),
    /// The server answered 401.
    #[error("the server refused the key ({hint}): {message} Run `svc login` to get a new one.")]
    Unauthorized { hint: String, message: String },
    /// The person chose Deny on the approval page.
    #[error(
        "the login was denied in the browser; no key was stored. Run `svc login` to try again."
    )]
    Denied,
    /// The device code expired, or the server no longer knows it.
    #[error("{0} Run `svc login` to start again.")]
    Expired(String),
    /// Ctrl-C.
    #[error("{0}")]
    Interrupted(String),
    /// The server answered with an error other than 401.
    #[error("{message} (HTTP {status})")]
    Api { status: u16, message: String },
    /// The server sent an error event in the middle of a streamed reply.
    #[error("the reply failed midway: {0}")]
    Stream(String),
    /// The server's answer was not what the API promises.
    #[error("unexpected answer from the server: {0}")]
    Protocol(String),
    /// Something on this machine failed (writing the reply, a file).
    #[error("{0}")]
    Local(String),
    /// The command line or the input makes no sense.
    #[error("{0}")]
    Usage(String),
}

impl Failure {
    /// The process exit code for this failure (see the module documentation);
    /// `svc_cli::main` returns it.
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Api { .. } | Failure::Stream(_) | Failure::Protocol(_) | Failure::Local(_) => {
                1
            }
            Failure::Usage(_) => 2,
            Failure::Network { .. } => 3,
            Failure::NotLoggedIn(_) | Failure::Unauthorized { .. } => 4,
            Failure::Denied => 5,
            Failure::Expired(_) => 6,
            Failure::Interrupted(_) => 130,
        }
    }
}
