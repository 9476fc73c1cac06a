//! The `svc` command line: `serve` runs the service; `keys`, `users` and
//! `pull` are operator commands against the same store and data directory;
//! `login`, `logout`, `whoami`, `chat` and `models` are the client of a
//! running service (see `client`). Output meant for scripts goes to stdout,
//! all else to stderr.

pub mod cli;
pub mod client;
pub mod commands;
pub mod config;
pub mod config_reference;
mod logging;
mod output;
pub mod progress;

use std::io::Write;
use std::process::ExitCode;

pub use cli::Cli;

use crate::client::Failure;
use crate::output::errln;

/// Runs a parsed command line; the exit code says whether it worked.
pub fn main(cli: Cli) -> ExitCode {
    logging::init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Err(error) = runtime.block_on(commands::run(cli)) else {
        return ExitCode::SUCCESS;
    };
    // A client command's failure has an exit code of its own (see
    // `client::failure`); any other error exits with 1.
    let Some(failure) = error.downcast_ref::<Failure>() else {
        errln!("error: {error:#}");
        return ExitCode::FAILURE;
    };
    let code = failure.exit_code();
    // A reply cut short ends its line on stdout before the message.
    let _ = std::io::stdout().flush();
    errln!("error: {error:#}");
    // As the process exit this replaces did: no waiting for tasks still
    // running (a read of the terminal, an opened browser).
    runtime.shutdown_background();
    ExitCode::from(code)
}
