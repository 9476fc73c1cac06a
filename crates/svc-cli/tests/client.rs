//! The command-line client (`svc login`, `logout`, `whoami`, `chat`,
//! `models`): end to end against real servers, and in a real terminal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "client/e2e.rs"]
mod e2e;
#[path = "client/support.rs"]
mod support;
#[path = "client/terminal.rs"]
mod terminal;
