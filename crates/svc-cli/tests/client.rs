//! The command-line client (`svc login`, `logout`, `whoami`, `chat`,
//! `models`): end to end against real servers, and in a real terminal.

// Serves models from GGUF files: needs the embedded engine.
#![cfg(feature = "embedded")]
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

#[path = "client/e2e.rs"]
mod e2e;
#[path = "client/support.rs"]
mod support;
#[path = "client/terminal.rs"]
mod terminal;
