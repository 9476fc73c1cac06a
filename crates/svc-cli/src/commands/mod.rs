//! One module per command.

mod chat;
mod keys;
mod login;
mod logout;
mod models;
mod pull;
mod serve;
mod users;
mod whoami;

use std::sync::Arc;

use svc_store::SqlStore;

use crate::cli::{Cli, Command};
use crate::config::StoreConfig;

/// Runs one parsed command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::run(*args).await,
        Command::Keys { command } => keys::run(command).await,
        Command::Pull(args) => pull::run(args).await,
        Command::Users { command } => users::run(command).await,
        Command::Login(args) => login::run(args).await,
        Command::Logout => logout::run().await,
        Command::Whoami(args) => whoami::run(args).await,
        Command::Chat(args) => chat::run(args).await,
        Command::Models(args) => models::run(args).await,
    }
}

/// Opens (and migrates) the store the configuration points at.
pub(crate) async fn open_store(config: &StoreConfig) -> anyhow::Result<Arc<SqlStore>> {
    Ok(Arc::new(config.open().await?))
}
