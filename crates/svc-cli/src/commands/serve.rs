//! `svc serve`: open the store, assemble the models, serve until SIGTERM or
//! Ctrl-C, then let in-flight requests finish.

mod embedded;
mod resident;

use std::sync::Arc;

use anyhow::Context;
use svc_core::Engine;
use svc_engine_upstream::UpstreamEngine;
use svc_server::{Application, Fallbacks, ModelRegistry, ModelRoute};
use tokio_util::sync::CancellationToken;

use crate::cli::ServeArgs;
use crate::config::{self, FileLayer, FileModelConfig, ModelSource, ServeConfig, Source};
use crate::output::{errln, outln};
use crate::progress::StderrProgress;

use self::embedded::EmbeddedEngines;
use self::resident::ResidentPool;

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let file = FileLayer::load(args.config.as_deref())?;
    let layers = config::merge(&file, &args.given);
    let mut settings = ServeConfig::from_layers(&layers, &file)?;
    if args.print_config {
        let source = file.path.clone().map_or(Source::Default, Source::File);
        let text = config::print::render(&settings, &layers, &source, crate::cli::unset_meaning)?;
        outln!("{}", text.trim_end());
        return Ok(());
    }
    fit_file_limit(&mut settings.server);
    if settings.server.files_dir.is_none() {
        settings.server.files_dir = Some(settings.store.data_dir()?.join("files"));
    }
    let store = super::open_store(&settings.store).await?;
    let models = load_models(&settings).await?;
    let app = Application::build(settings.server.clone(), store, models)
        .await
        .with_context(|| format!("cannot listen on {}", settings.server.bind))?;
    errln!("svc is serving on {}", app.local_url());
    errln!("  API base URL: {}/v1", app.public_url());
    errln!("  dashboard:    {}", app.dashboard_url());
    errln!("  store:        {}", settings.store.describe());
    if let Some(addr) = app.metrics_addr() {
        errln!("  metrics:      http://{addr}/metrics");
    }
    match app.setup_link().await {
        // The one secret svc prints: the operator needs it to get in.
        Ok(Some(link)) => errln!(
            "\nNo account exists yet. Create the first admin within 24 hours at:\n  {link}\n\
             (or run `svc users create --admin --email YOU@EXAMPLE.COM`)\n"
        ),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "cannot prepare the first-admin setup link"),
    }
    let shutdown = CancellationToken::new();
    #[expect(
        clippy::disallowed_methods,
        reason = "the signal watcher starts shutdown; nothing waits for it, and it ends with the process"
    )]
    tokio::spawn(stop_on_signal(shutdown.clone()));
    app.run(shutdown).await;
    errln!("svc stopped");
    Ok(())
}

/// Raises the soft limit on open files to the hard one (the soft default,
/// often 1024, is what a flood of connections would exhaust), then keeps
/// the connection limits below what the limit allows.
fn fit_file_limit(server: &mut svc_server::ServerConfig) {
    let Some(limit) = raise_file_limit() else {
        return;
    };
    if server.fit_file_limit(limit) {
        tracing::warn!(
            open_files = limit,
            max_connections = server.max_connections,
            max_connections_per_address = server.max_connections_per_address,
            "connection limits lowered to fit the open-file limit (raise `ulimit -n` for more)"
        );
    }
}

/// The soft `RLIMIT_NOFILE` after raising it as far as allowed; `None`
/// where it cannot be read.
#[cfg(unix)]
fn raise_file_limit() -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the open-file limit");
            return None;
        }
    };
    if soft >= hard {
        return Some(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => {
            tracing::debug!(from = soft, to = hard, "raised the open-file limit");
            Some(hard)
        }
        Err(e) => {
            tracing::warn!(error = %e, soft, hard, "cannot raise the open-file limit");
            Some(soft)
        }
    }
}

#[cfg(not(unix))]
fn raise_file_limit() -> Option<u64> {
    None
}

async fn stop_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
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

/// Loads the engines and maps model ids to them: `svc` and `svc-thinking` on
/// the default model, `svc-embed` on the embedding model, plus every
/// `[models.<id>]` table (a GGUF file or upstream endpoints). Ids on the
/// same file share one engine; a file with `preload = false` is loaded on
/// demand (see [`resident`]); the default models are only fetched when
/// an id still uses them (the embedding model when the chat model is the
/// default too, or `embedding_model` names one).
async fn load_models(settings: &ServeConfig) -> anyhow::Result<ModelRegistry> {
    let engine = &settings.engine;
    let mut wanted: Vec<(String, bool, Option<&ModelSource>)> = vec![
        ("svc".to_owned(), false, None),
        ("svc-thinking".to_owned(), true, None),
    ];
    for (id, model) in &settings.models {
        wanted.retain(|w| &w.0 != id);
        wanted.push((id.clone(), model.reasoning, Some(&model.source)));
    }
    // Checked before the default model is fetched: a build without the
    // embedded engine refuses here.
    let local: Vec<&str> = wanted
        .iter()
        .filter(|w| !matches!(w.2, Some(ModelSource::Upstream(_))))
        .map(|w| w.0.as_str())
        .collect();
    let mut embedded = EmbeddedEngines::new(engine, &local)?;
    let default = if wanted.iter().any(|w| w.2.is_none()) {
        Some(match &engine.model {
            Some(path) => (path.clone(), None),
            None => {
                let progress: Arc<dyn svc_models::Progress> = Arc::new(StderrProgress::default());
                (
                    svc_models::ensure_default_model(settings.store.data_dir()?, &progress).await?,
                    Some(svc_models::DEFAULT_MODEL_SYSTEM_PROMPT.to_owned()),
                )
            }
        })
    } else {
        None
    };
    // `svc-embed`: on `embedding_model`, else on the default embedding
    // model beside the default chat model (fetched the same way).
    let embed_path = match (&engine.embedding_model, &engine.model, &default) {
        _ if settings.models.contains_key(EMBED_ID) => None,
        (Some(path), _, _) => Some(path.clone()),
        (None, None, Some(_)) => {
            let progress: Arc<dyn svc_models::Progress> = Arc::new(StderrProgress::default());
            Some(
                svc_models::ensure_default_embedding_model(settings.store.data_dir()?, &progress)
                    .await?,
            )
        }
        _ => None,
    };
    let pool = ResidentPool::new(
        engine.models_memory.map(|bytes| bytes as u64),
        engine.load_timeout,
    );
    // Tables with the same settings share one model of the pool.
    let mut on_demand: Vec<(&FileModelConfig, Arc<dyn Engine>)> = Vec::new();
    let mut routes = Vec::new();
    for (id, reasoning, source) in wanted {
        let (engine, default_system_prompt): (Arc<dyn Engine>, _) = match (source, &default) {
            (Some(ModelSource::Upstream(upstream)), _) => {
                let endpoints = &upstream.endpoints;
                let upstream = UpstreamEngine::new(endpoints.clone(), upstream.options.clone())
                    .with_context(|| format!("models.{id}"))?;
                let urls: Vec<&str> = endpoints.iter().map(|e| e.base_url.as_str()).collect();
                errln!("  {id}: upstream {}", urls.join(", "));
                (Arc::new(upstream), None)
            }
            (Some(ModelSource::File(file)), _) if !file.preload => {
                let engine = match on_demand.iter().find(|(f, _)| *f == file) {
                    Some((_, engine)) => engine.clone(),
                    None => {
                        let loader = embedded
                            .on_demand(file)
                            .with_context(|| format!("models.{id}"))?;
                        let engine = pool.add(resident::Model {
                            id: id.clone(),
                            file: file.path.display().to_string(),
                            estimate: std::fs::metadata(&file.path).map_or(0, |m| m.len()),
                            keep_alive: file.keep_alive,
                            name: "llama".into(),
                            loader,
                        });
                        on_demand.push((file, engine.clone()));
                        engine
                    }
                };
                errln!("  {id}: {} (loaded on demand)", file.path.display());
                (engine, None)
            }
            (Some(ModelSource::File(file)), _) => (
                embedded
                    .load(file)
                    .await
                    .with_context(|| format!("models.{id}"))?,
                None,
            ),
            (None, Some((path, prompt))) => (
                embedded.load(&FileModelConfig::at(path.clone())).await?,
                prompt.clone(),
            ),
            (None, None) => anyhow::bail!("no model for {id}"),
        };
        let fallbacks = settings
            .models
            .get(&id)
            .map(|m| Fallbacks {
                models: m.fallbacks.clone(),
                on_context_length: m.fallback_on_context_length,
            })
            .unwrap_or_default();
        routes.push(ModelRoute {
            id,
            engine,
            reasoning,
            created: MODELS_CREATED,
            owned_by: "svc".into(),
            default_system_prompt,
            fallbacks,
        });
    }
    if let Some(path) = embed_path {
        routes.push(ModelRoute {
            id: EMBED_ID.to_owned(),
            engine: embedded.load(&FileModelConfig::at(path)).await?,
            reasoning: false,
            created: MODELS_CREATED,
            owned_by: "svc".into(),
            default_system_prompt: None,
            fallbacks: Fallbacks::default(),
        });
    }
    let registry = ModelRegistry::new(routes);
    registry.check_fallbacks().map_err(anyhow::Error::msg)?;
    Ok(registry)
}

/// The id of the embedding model served beside `svc` and `svc-thinking`.
const EMBED_ID: &str = "svc-embed";

/// `created` of every model in the listing: when svc's model list began.
const MODELS_CREATED: i64 = 1_735_689_600;
