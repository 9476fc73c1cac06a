//! `svc users create|list|disable|enable|delete`: operator commands for
//! dashboard accounts.

use std::io::{BufRead, IsTerminal};

use anyhow::{Context, bail};
use svc_core::{AccountChange, AccountError, AccountService, Actor, UserRecord};

use crate::cli::{StoreArgs, UsersCommand};
use crate::config::StoreConfig;
use crate::output::{errln, outln, prompt};

pub async fn run(command: UsersCommand) -> anyhow::Result<()> {
    match command {
        UsersCommand::Create {
            store,
            email,
            admin,
        } => {
            let password = read_password()?;
            let accounts = service(&store).await?;
            let user = match accounts
                .create_user(&email, &password, admin, Some(&Actor::Operator))
                .await
            {
                Ok(user) => user,
                Err(AccountError::Store(e)) => {
                    return Err(e).context("cannot create the account");
                }
                Err(e) => bail!("{e}"),
            };
            errln!(
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
            outln!(
                "{:<20}  {:<32}  {:<5}  {:<8}  CREATED",
                "ID",
                "EMAIL",
                "ADMIN",
                "STATE"
            );
            for u in users {
                outln!(
                    "{:<20}  {:<32}  {:<5}  {:<8}  {}",
                    u.id.0,
                    u.email,
                    if u.is_admin { "yes" } else { "no" },
                    if u.disabled_at.is_some() {
                        "disabled"
                    } else {
                        "active"
                    },
                    super::keys::when(Some(u.created_at))
                );
            }
        }
        UsersCommand::Disable { store, email } => {
            let accounts = service(&store).await?;
            let user = find(&accounts, &email).await?;
            let change = accounts
                .disable_user(&user, &Actor::Operator)
                .await
                .context("cannot disable the account")?;
            report(change, &user, "disabled")?;
        }
        UsersCommand::Enable { store, email } => {
            let accounts = service(&store).await?;
            let user = find(&accounts, &email).await?;
            let change = accounts
                .enable_user(&user, &Actor::Operator)
                .await
                .context("cannot enable the account")?;
            report(change, &user, "enabled")?;
        }
        UsersCommand::Delete { store, email, yes } => {
            let accounts = service(&store).await?;
            let user = find(&accounts, &email).await?;
            if !yes {
                confirm_delete(&user)?;
            }
            let change = accounts
                .delete_user(&user, &Actor::Operator)
                .await
                .context("cannot delete the account")?;
            report(change, &user, "deleted; its keys are revoked")?;
        }
    }
    Ok(())
}

async fn find(accounts: &AccountService, email: &str) -> anyhow::Result<UserRecord> {
    accounts
        .user_by_email(email)
        .await
        .context("cannot read the accounts")?
        .with_context(|| format!("there is no account {}", email.trim()))
}

fn report(change: AccountChange, user: &UserRecord, done: &str) -> anyhow::Result<()> {
    match change {
        AccountChange::Done => {
            errln!("Account {} ({}) {done}.", user.email, user.id);
            Ok(())
        }
        AccountChange::Unchanged => {
            errln!("Account {} ({}) was {done} already.", user.email, user.id);
            Ok(())
        }
        AccountChange::NotFound => bail!("there is no account {}", user.email),
        AccountChange::LastAdmin => bail!(
            "{} is the last enabled admin: make another account an admin first \
             (svc users create --admin)",
            user.email
        ),
    }
}

/// Asks on the terminal; without one, `--yes` is required.
fn confirm_delete(user: &UserRecord) -> anyhow::Result<()> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        bail!(
            "deleting {} cannot be undone: pass --yes to confirm",
            user.email
        );
    }
    prompt!(
        "Delete {} and revoke all of its keys? This cannot be undone. Type yes: ",
        user.email
    );
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .context("cannot read the answer")?;
    if line.trim() != "yes" {
        bail!("not deleted");
    }
    Ok(())
}

/// One line from stdin, without its line ending. A prompt goes to stderr
/// when stdin is a terminal (the text is then visible: pipe it in to hide it).
fn read_password() -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        prompt!("Password for the new account (at least 8 characters): ");
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
    let config = StoreConfig::load(args.config.as_deref(), &args.given)?;
    let store = super::open_store(&config).await?;
    Ok(AccountService::new(store))
}
