//! The real svc server with the scripted fake models, for tests and
//! benchmarks driven from outside Rust (the `openai` SDK conformance tests,
//! schemathesis, load generators). Never part of `svc serve`.
//!
//! Prints two lines on stdout, then serves until SIGTERM or SIGINT (then
//! shuts down gracefully and removes its temporary data directory):
//! `url http://127.0.0.1:PORT` and `key sk-svc-...`; with `--admin-key`, a
//! third, `admin-key sk-svc-...` (the operator's admin key, for the admin
//! API). `--user EMAIL:PASSWORD`
//! and `--admin EMAIL:PASSWORD` create dashboard accounts first (for the
//! browser tests); `--device-interval` and `--device-code-lifetime` (seconds)
//! shorten the device flow's timings. `--oidc-issuer URL`, `--oidc-client-id
//! ID`, `--oidc-client-secret SECRET`, `--oidc-create-accounts` and
//! `--no-password-sign-in` set up single sign-on (for the browser tests'
//! OpenID Connect provider). `--no-request-log` turns the request log off
//! and `--otlp-endpoint URL` exports traces (for bench/observability.sh).
//! `--mcp-server LABEL=URL` registers an MCP server (for bench/mcp.sh).

#![expect(
    clippy::expect_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use svc_core::{AccountService, DeviceConfig, KeyOrigin, KeyService, NewKey};
use svc_server::{Application, ServerConfig};
use svc_store::SqlStore;
use svc_test_support::{Probe, fake_models};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut bind: SocketAddr = "127.0.0.1:0".parse()?;
    let mut database_url = None;
    let mut users = Vec::new();
    let mut device = DeviceConfig::default();
    let mut admin_key = false;
    let mut sso = svc_server::config::SsoConfig::default();
    let (mut oidc_issuer, mut oidc_client_id) = (None, None);
    let mut request_log_retention = svc_server::config::DEFAULT_REQUEST_LOG_RETENTION;
    let mut otlp_endpoint = None;
    let mut response_cache_ttl = std::time::Duration::ZERO;
    let defaults = ServerConfig::default();
    let mut files_dir = None;
    let mut batch_lease = defaults.batch_lease;
    let mut batch_concurrency = defaults.batch_concurrency;
    let mut mcp_servers = serde_json::Map::new();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .unwrap_or_else(|| panic!("{name} needs a value"))
        };
        match arg.as_str() {
            "--bind" => bind = value("--bind").parse()?,
            "--admin-key" => admin_key = true,
            "--database-url" => database_url = Some(value("--database-url")),
            "--user" | "--admin" => {
                let spec = value(&arg);
                let (email, password) = spec.split_once(':').expect("EMAIL:PASSWORD");
                users.push((email.to_owned(), password.to_owned(), arg == "--admin"));
            }
            "--device-interval" => device.interval = value("--device-interval").parse()?,
            "--device-code-lifetime" => {
                device.code_lifetime = value("--device-code-lifetime").parse()?
            }
            "--oidc-issuer" => oidc_issuer = Some(value("--oidc-issuer").parse()?),
            "--oidc-client-id" => oidc_client_id = Some(value("--oidc-client-id")),
            "--oidc-client-secret" => {
                sso.oidc_client_secret = Some(svc_server::config::Secret::new(value(
                    "--oidc-client-secret",
                )))
            }
            "--oidc-create-accounts" => sso.oidc_create_accounts = true,
            "--no-password-sign-in" => sso.password_sign_in = false,
            "--no-request-log" => request_log_retention = std::time::Duration::ZERO,
            "--otlp-endpoint" => otlp_endpoint = Some(value("--otlp-endpoint").parse()?),
            "--response-cache-ttl" => {
                response_cache_ttl =
                    std::time::Duration::from_secs(value("--response-cache-ttl").parse()?)
            }
            "--files-dir" => files_dir = Some(std::path::PathBuf::from(value("--files-dir"))),
            "--batch-lease" => {
                batch_lease = std::time::Duration::from_secs(value("--batch-lease").parse()?)
            }
            "--batch-concurrency" => batch_concurrency = value("--batch-concurrency").parse()?,
            "--mcp-server" => {
                let spec = value("--mcp-server");
                let (label, url) = spec.split_once('=').expect("LABEL=URL");
                mcp_servers.insert(label.to_owned(), serde_json::json!({ "url": url }));
            }
            other => anyhow::bail!(
                "unknown argument {other:?} (use --bind ADDR, --database-url URL, \
                 --user EMAIL:PASSWORD, --admin EMAIL:PASSWORD, --admin-key, \
                 --device-interval SECS, --device-code-lifetime SECS, --oidc-issuer URL, \
                 --oidc-client-id ID, --oidc-client-secret SECRET, --oidc-create-accounts, \
                 --no-password-sign-in, --no-request-log, --otlp-endpoint URL, \
                 --response-cache-ttl SECS, --files-dir DIR, --batch-lease SECS, \
                 --batch-concurrency N, --mcp-server LABEL=URL)"
            ),
        }
    }
    sso.provider = match (oidc_issuer, oidc_client_id) {
        (Some(issuer), Some(client_id)) => {
            Some(svc_server::config::OidcProvider::new(issuer, client_id))
        }
        (None, None) => None,
        _ => anyhow::bail!("--oidc-issuer and --oidc-client-id go together"),
    };
    // A directory of its own only when something goes there: a server
    // given both (a replica, which a test may kill) leaves nothing behind.
    let dir = match (&database_url, &files_dir) {
        (Some(_), Some(_)) => None,
        _ => Some(tempfile::tempdir()?),
    };
    let url = match (database_url, &dir) {
        (Some(url), _) => url,
        (None, Some(dir)) => SqlStore::data_dir_url(dir.path())?,
        (None, None) => anyhow::bail!("no directory for the database"),
    };
    let store = Arc::new(SqlStore::connect(&url).await?);
    let accounts = AccountService::new(store.clone());
    for (email, password, admin) in users {
        accounts
            .create_user(&email, &password, admin, Some(&svc_core::Actor::Operator))
            .await?;
    }
    let keys = KeyService::new(store.clone());
    let new_key = |name: &str, kind: svc_core::KeyKind| {
        keys.create(
            NewKey {
                name: name.into(),
                owner_id: None,
                created_via: KeyOrigin::Cli,
                expires_in: None,
                scope: svc_core::KeyScope {
                    kind,
                    ..Default::default()
                },
            },
            &svc_core::Actor::Operator,
        )
    };
    let (key, _) = new_key("fake-server", svc_core::KeyKind::All).await?;
    let admin = match admin_key {
        true => Some(
            new_key(
                "fake-server-admin",
                svc_core::KeyKind::Admin(svc_core::AdminReach::Organization),
            )
            .await?
            .0,
        ),
        false => None,
    };
    let config = ServerConfig {
        bind,
        device,
        sso,
        request_log_retention,
        otlp_endpoint,
        response_cache_ttl,
        files_dir: files_dir.or_else(|| dir.as_ref().map(|d| d.path().join("files"))),
        batch_lease,
        batch_concurrency,
        mcp: serde_json::from_value(serde_json::json!({ "servers": mcp_servers }))?,
        ..defaults
    };
    let app = Application::build(config, store, fake_models(Arc::new(Probe::default()))).await?;
    let mut out = std::io::stdout();
    writeln!(out, "url http://{}", app.local_addr())?;
    writeln!(out, "key {}", key.expose())?;
    if let Some(admin) = admin {
        writeln!(out, "admin-key {}", admin.expose())?;
    }
    out.flush()?;
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            stop_signal().await;
            shutdown.cancel();
        }
    });
    app.run(shutdown).await;
    Ok(())
}

/// SIGTERM (what the test suites send) or SIGINT: returning from `main`
/// removes the temporary data directory, which being killed would leave.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
