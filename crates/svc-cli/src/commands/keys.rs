//! `svc keys create|list|revoke`: operator commands on the store.

use anyhow::{Context, bail};
use chrono::DateTime;
use svc_core::duration::parse_seconds;
use svc_core::keys::MAX_ROTATION_GRACE;
use svc_core::{
    Actor, KeyId, KeyKind, KeyOrigin, KeyScope, KeyService, KeyState, ModelAccess, NewKey,
    ProjectId, ProjectStore,
};

use crate::cli::{KeysCommand, StoreArgs};
use crate::config::StoreConfig;
use crate::output::{errln, outln};

pub async fn run(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Create {
            store,
            name,
            expires_in,
            kind,
            permissions,
            models,
            project,
        } => {
            let name = name.trim().to_owned();
            if name.is_empty() {
                bail!("--name must not be empty");
            }
            let expires_in = expires_in.as_deref().map(parse_seconds).transpose()?;
            let kind = KeyKind::from_parts(&kind, &permissions).context("--kind/--permission")?;
            let allowed_models = if models.is_empty() {
                ModelAccess::any()
            } else {
                ModelAccess::only(models).map_err(|e| anyhow::anyhow!("--model: {e}"))?
            };
            let project_id = project.map_or_else(ProjectId::default_project, ProjectId);
            let (keys, store) = service_and_store(&store).await?;
            if store
                .project_by_id(&project_id)
                .await
                .context("cannot read the project")?
                .is_none()
            {
                bail!("no project with id {:?}", project_id.0);
            }
            let (key, record) = keys
                .create(
                    NewKey {
                        name,
                        owner_id: None,
                        created_via: KeyOrigin::Cli,
                        expires_in,
                        scope: KeyScope {
                            project_id: Some(project_id),
                            kind,
                            allowed_models,
                            budget: None,
                            ..KeyScope::default()
                        },
                    },
                    &Actor::Operator,
                )
                .await
                .context("cannot create the key")?;
            errln!(
                "Created {} key {} ({}) in {}{}. It is shown only now: store it safely.",
                record.kind.name(),
                record.id,
                record.name,
                record.project_id,
                record
                    .expires_at
                    .map(|t| format!(", expires {}", when(Some(t))))
                    .unwrap_or_default()
            );
            outln!("{}", key.expose());
        }
        KeysCommand::List { store } => {
            let records = service(&store)
                .await?
                .list(None)
                .await
                .context("cannot list keys")?;
            let now = svc_core::now();
            outln!(
                "{:<20}  {:<24}  {:<18}  {:<16}  {:<16}  {:<16}  {:<10}  {:<21}  STATE",
                "ID",
                "NAME",
                "HINT",
                "CREATED",
                "LAST USED",
                "EXPIRES",
                "KIND",
                "PROJECT"
            );
            for r in records {
                outln!(
                    "{:<20}  {:<24}  {:<18}  {:<16}  {:<16}  {:<16}  {:<10}  {:<21}  {}",
                    r.id.0,
                    r.name,
                    r.hint,
                    when(Some(r.created_at)),
                    when(r.last_used_at),
                    when(r.expires_at),
                    r.kind.name(),
                    r.project_id.0,
                    KeyState::of(&r, now).as_str()
                );
            }
        }
        KeysCommand::Revoke { store, id } => {
            let keys = service(&store).await?;
            if keys
                .revoke(&KeyId(id.clone()), &Actor::Operator)
                .await
                .context("cannot revoke the key")?
            {
                errln!("Revoked key {id}. Requests with it are refused from now on.");
            } else {
                bail!("no active key with id {id:?} (see `svc keys list`)");
            }
        }
        KeysCommand::Rotate { store, id, grace } => {
            let grace = match grace.trim() {
                "0" => 0,
                text => parse_seconds(text)?,
            };
            if grace > MAX_ROTATION_GRACE {
                bail!("--grace must be at most 30d");
            }
            let keys = service(&store).await?;
            let old = keys
                .get(&KeyId(id.clone()))
                .await
                .context("cannot read the key")?
                .filter(|k| KeyState::of(k, svc_core::now()) == KeyState::Active);
            let Some(old) = old else {
                bail!("no active key with id {id:?} (see `svc keys list`)");
            };
            let grace_end = svc_core::now().saturating_add(grace);
            let Some((key, record)) = keys
                .rotate(&old, grace, &Actor::Operator)
                .await
                .context("cannot rotate the key")?
            else {
                bail!("key {id} stopped being active while it was being rotated");
            };
            errln!(
                "Rotated {id} into {} ({}). {id} keeps working until {} UTC. The new key is shown only now: store it safely.",
                record.id,
                record.name,
                when(Some(old.expires_at.map_or(grace_end, |e| e.min(grace_end))))
            );
            outln!("{}", key.expose());
        }
    }
    Ok(())
}

async fn service(args: &StoreArgs) -> anyhow::Result<KeyService> {
    Ok(service_and_store(args).await?.0)
}

async fn service_and_store(
    args: &StoreArgs,
) -> anyhow::Result<(KeyService, std::sync::Arc<svc_store::SqlStore>)> {
    let config = StoreConfig::load(args.config.as_deref(), &args.given)?;
    let store = super::open_store(&config).await?;
    Ok((KeyService::new(store.clone()), store))
}

/// `2026-11-22 14:03` (UTC), or `-`.
pub(super) fn when(t: Option<i64>) -> String {
    t.and_then(|t| DateTime::from_timestamp(t, 0))
        .map(|d| d.format("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_else(|| "-".into())
}
