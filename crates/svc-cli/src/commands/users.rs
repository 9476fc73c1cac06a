//! `svc users create|list`: operator commands for dashboard accounts.

use std::io::{BufRead, IsTerminal};

use anyhow::{Context, bail};
use svc_core::{AccountError, AccountService};

use crate::cli::{StoreArgs, UsersCommand};
use crate::settings::{FileConfig, StoreSettings};

pub async fn run(command: UsersCommand) -> anyhow::Result<()> {
    match command {
        UsersCommand::Create {
            store,
            email,
            admin,
        } => {
            let password = read_password()?;
            let accounts = service(&store).await?;
            let user = match accounts.create_user(&email, &password, admin).await {
                Ok(user) => user,
                Err(AccountError::Store(e)) => {
                    return Err(e).context("cannot create the account");
                }
                Err(e) => bail!("{e}"),
            };
            eprintln!(
                "Created {}account {} ({}).",
                if user.is_admin { "admin " } else { "" },
                user.email,
                user.id
            );
        }
        UsersCommand::List { store } => {
            let users = service(&store)
                .await?
                .list_users()
                .await
                .context("cannot list accounts")?;
            println!("{:<20}  {:<32}  {:<5}  CREATED", "ID", "EMAIL", "ADMIN");
            for u in users {
                println!(
                    "{:<20}  {:<32}  {:<5}  {}",
                    u.id.0,
                    u.email,
                    if u.is_admin { "yes" } else { "no" },
                    super::keys::when(Some(u.created_at))
                );
            }
        }
    }
    Ok(())
}

/// One line from stdin, without its line ending. A prompt goes to stderr
/// when stdin is a terminal (the text is then visible: pipe it in to hide it).
fn read_password() -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("Password for the new account (at least 8 characters): ");
    }
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .context("cannot read the password from stdin")?;
    let password = line.trim_end_matches(['\n', '\r']).to_owned();
    if password.is_empty() {
        bail!(
            "no password on stdin: pipe it in, e.g. `printf '%s' \"$PASSWORD\" | svc users create ...`"
        );
    }
    Ok(password)
}

async fn service(args: &StoreArgs) -> anyhow::Result<AccountService> {
    let file = FileConfig::load(args.config.as_deref())?;
    let settings = StoreSettings::resolve(args, &file)?;
    let store = super::open_store(&settings).await?;
    Ok(AccountService::new(store))
}
