//! `svc whoami` (alias `svc status`): which server and key the client
//! commands use and where each came from, whose key it is, when it expires,
//! and whether the server accepts it (`GET /v1/auth/key`, or `GET /v1/models`
//! on a server without it). Exits 4 when there is no key or it is refused,
//! 3 when the server cannot be reached.

use crate::cli::ConnectArgs;
use crate::client::terminal::{self, expiry};
use crate::client::{Failure, Source, Target};
use crate::output::outln;

pub async fn run(args: ConnectArgs) -> anyhow::Result<()> {
    let target = Target::from_process(args.base_url.as_deref(), args.api_key.as_deref())?;
    outln!(
        "Server:   {} ({})",
        target.base_url,
        target.base_source.describe("--base-url", "SVC_BASE_URL")
    );
    let key_source = match &target.key {
        Some((key, source)) => {
            outln!(
                "Key:      {} ({})",
                key.hint(),
                source.describe("--api-key", "SVC_API_KEY")
            );
            *source
        }
        None => {
            outln!("Key:      none");
            return Err(target
                .require_key()
                .err()
                .map_or_else(|| anyhow::anyhow!("no key"), anyhow::Error::from));
        }
    };
    // What the stored login remembers, when its key is the one in use.
    let stored = target
        .stored
        .as_ref()
        .filter(|_| key_source == Source::StoredLogin);
    let api = target.api()?;
    let checked = tokio::select! {
        checked = async {
            match api.key_info().await? {
                Some(info) => Ok(Some(info)),
                // A server without /v1/auth/key: /v1/models says whether the key works.
                None => api.models().await.map(|_| None),
            }
        } => checked,
        () = terminal::ctrl_c() => Err(Failure::Interrupted("interrupted".into())),
    };
    let info = match checked {
        Ok(info) => info,
        Err(failure) => {
            if let Some(login) = stored {
                outln!("Expires:  {}", expiry(login.expires_at));
            }
            outln!("Status:   {}", status_of(&failure));
            return Err(failure.into());
        }
    };
    let account = info
        .as_ref()
        .map(|i| i.owner.as_ref().map(|o| o.email.clone()))
        .unwrap_or_else(|| stored.and_then(|s| s.account.clone()));
    outln!(
        "Account:  {}",
        account.as_deref().unwrap_or(match info {
            Some(_) => "none (an operator's key)",
            None => "unknown",
        })
    );
    let name = info
        .as_ref()
        .map(|i| i.name.clone())
        .or_else(|| stored.and_then(|s| s.key_name.clone()));
    if let Some(name) = name {
        outln!("Key name: {name}");
    }
    let expires_at = match &info {
        Some(info) => info.expires_at,
        None => stored.and_then(|s| s.expires_at),
    };
    outln!("Expires:  {}", expiry(expires_at));
    outln!("Status:   accepted by the server");
    Ok(())
}

fn status_of(failure: &Failure) -> &'static str {
    match failure {
        Failure::Unauthorized { .. } => "refused by the server",
        Failure::Network { .. } => "the server cannot be reached",
        _ => "unknown (the server answered with an error)",
    }
}
