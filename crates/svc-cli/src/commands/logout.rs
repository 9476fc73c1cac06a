//! `svc logout`: revokes the stored key on its server (`DELETE /v1/auth/key`)
//! and deletes it here. When the server cannot revoke it (no such endpoint,
//! or it cannot be reached) the key is deleted here all the same, and the
//! message says where to revoke it by hand.

use crate::client::api::Revocation;
use crate::client::target::process_env;
use crate::client::terminal::{self, expiry};
use crate::client::{Api, CredentialsFile, Failure};
use crate::output::errln;

pub async fn run() -> anyhow::Result<()> {
    let file = CredentialsFile::locate()?;
    let Some(login) = file.load()? else {
        errln!(
            "Not logged in: there is no stored key ({}).",
            file.path().display()
        );
        note_environment();
        return Ok(());
    };
    let hint = login.api_key.hint();
    let api = Api::new(login.base_url.clone(), Some(login.api_key.clone()))?;
    let revocation = tokio::select! {
        revocation = api.revoke_key() => revocation,
        () = terminal::ctrl_c() => {
            return Err(Failure::Interrupted("logout cancelled; the key is still stored".into()).into());
        }
    };
    let by_hand = || {
        format!(
            "it stays valid until you revoke it at {} (or until it expires: {})",
            login.keys_page(),
            expiry(login.expires_at)
        )
    };
    let result = match revocation {
        Ok(Revocation::Revoked) => {
            file.remove()?;
            errln!(
                "Revoked key {hint} on {} and deleted it here.",
                login.base_url
            );
            Ok(())
        }
        Ok(Revocation::AlreadyRefused) => {
            file.remove()?;
            errln!(
                "{} already refused key {hint} (revoked or expired); deleted it here.",
                login.base_url
            );
            Ok(())
        }
        Ok(Revocation::Unsupported) => {
            file.remove()?;
            errln!(
                "Deleted key {hint} here only: {} cannot revoke keys for clients, so {}.",
                login.base_url,
                by_hand()
            );
            Ok(())
        }
        Err(failure) => {
            file.remove()?;
            errln!(
                "Deleted key {hint} here, but could not revoke it on the server: {}.",
                by_hand()
            );
            Err(failure.into())
        }
    };
    if result.is_ok() {
        errln!("Logged out.");
    }
    note_environment();
    result
}

fn note_environment() {
    if process_env("SVC_API_KEY").is_some_and(|k| !k.trim().is_empty()) {
        errln!("Note: SVC_API_KEY is still set, and commands go on using it.");
    }
}
