//! The real svc server with the scripted fake models, for tests and
//! benchmarks driven from outside Rust (the `openai` SDK conformance tests,
//! schemathesis, load generators). Never part of `svc serve`.
//!
//! Prints two lines on stdout, then serves until killed:
//! `url http://127.0.0.1:PORT` and `key sk-svc-...`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use svc_core::{KeyService, NewKey};
use svc_server::{Application, ServerConfig};
use svc_store::SqlStore;
use svc_test_support::{Probe, fake_models};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut bind: SocketAddr = "127.0.0.1:0".parse()?;
    let mut database_url = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bind" => bind = args.next().expect("--bind ADDR").parse()?,
            "--database-url" => database_url = Some(args.next().expect("--database-url URL")),
            other => {
                anyhow::bail!("unknown argument {other:?} (use --bind ADDR, --database-url URL)")
            }
        }
    }
    let dir = tempfile::tempdir()?;
    let url = match database_url {
        Some(url) => url,
        None => SqlStore::data_dir_url(dir.path())?,
    };
    let store = Arc::new(SqlStore::connect(&url).await?);
    let (key, _) = KeyService::new(store.clone())
        .create(NewKey {
            name: "fake-server".into(),
            owner_id: None,
            created_via: "cli".into(),
            expires_in: None,
        })
        .await?;
    let config = ServerConfig {
        bind,
        ..ServerConfig::default()
    };
    let app = Application::build(config, store, fake_models(Arc::new(Probe::default()))).await?;
    let mut out = std::io::stdout();
    writeln!(out, "url http://{}", app.local_addr())?;
    writeln!(out, "key {}", key.expose())?;
    out.flush()?;
    app.run(CancellationToken::new()).await?;
    Ok(())
}
