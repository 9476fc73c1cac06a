//! `svc serve`: open the store, assemble the models, serve until SIGTERM or
//! Ctrl-C, then let in-flight requests finish.

use std::sync::Arc;

use anyhow::Context;
use async_trait::async_trait;
use svc_core::{Engine, EngineError, EventStream, GenerateRequest};
use svc_server::{Application, ModelRegistry, ModelRoute};
use tokio_util::sync::CancellationToken;

use crate::cli::ServeArgs;
use crate::settings::ServeSettings;

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let settings = ServeSettings::resolve(&args)?;
    let store = super::open_store(&settings.store).await?;
    let app = Application::build(settings.server.clone(), store, default_models())
        .await
        .with_context(|| format!("cannot listen on {}", settings.server.bind))?;
    eprintln!("svc is serving on http://{}", app.local_addr());
    eprintln!("  API base URL: {}/v1", app.public_url());
    eprintln!("  store:        {}", settings.store.describe());
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    app.run(shutdown).await.context("the server failed")?;
    eprintln!("svc stopped");
    Ok(())
}

async fn stop_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                shutdown.cancel();
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down: no new connections, finishing in-flight requests");
    shutdown.cancel();
}

/// `svc` and `svc-thinking`, the models every svc serves.
fn default_models() -> ModelRegistry {
    let engine: Arc<dyn Engine> = Arc::new(NoEmbeddedEngine);
    let route = |id: &str, reasoning| ModelRoute {
        id: id.into(),
        engine: engine.clone(),
        reasoning,
        created: 1_735_689_600,
        owned_by: "svc".into(),
    };
    ModelRegistry::new(vec![route("svc", false), route("svc-thinking", true)])
}

/// Stands for the embedded llama.cpp engine until it is part of the build:
/// it answers every request with a clear 503 instead of pretending.
struct NoEmbeddedEngine;

#[async_trait]
impl Engine for NoEmbeddedEngine {
    async fn generate(&self, _request: GenerateRequest) -> Result<EventStream, EngineError> {
        Err(EngineError::Unavailable(
            "this build of svc has no embedded inference engine yet".into(),
        ))
    }

    fn name(&self) -> &str {
        "none"
    }
}
