//! `svc serve`: open the store, assemble the models, serve until SIGTERM or
//! Ctrl-C, then let in-flight requests finish.

mod embedded;

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
use svc_on_demand::ResidentPool;

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
/// `[models.<id>]` table (a GGUF file or upstream endpoints). Every GGUF
/// is a model of one pool (see `svc_on_demand`): the default models are
/// loaded at start and kept, a table's file when first asked unless
/// `preload`; ids on the same file share one. The default models are only fetched when
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
    let embedded = EmbeddedEngines::new(engine, &local)?;
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
    let memory = match engine.models_memory {
        Some(bytes) => Some(bytes as u64),
        None => spare_memory(),
    };
    match (memory, engine.models_memory) {
        (Some(bytes), Some(_)) => errln!("  models memory: {}", mebibytes(bytes)),
        (Some(bytes), None) => errln!(
            "  models memory: {} (90% of what the machine had available; set models_memory to change)",
            mebibytes(bytes)
        ),
        (None, _) => errln!("  models memory: no limit (the machine's free memory is unknown)"),
    }
    if engine.max_hold >= engine.load_timeout {
        errln!(
            "  warning: max_hold ({}) is not below load_timeout ({}): a request for a model \
             waiting for another's room may be answered 503 before that room is given",
            svc_core::config::format_duration(engine.max_hold),
            svc_core::config::format_duration(engine.load_timeout)
        );
    }
    let mut local = LocalModels {
        pool: ResidentPool::sharing(
            memory,
            engine.load_timeout,
            svc_on_demand::Sharing {
                max_hold: engine.max_hold,
                loads_per_minute: engine.max_loads_per_minute,
            },
        ),
        embedded,
        models: Vec::new(),
    };
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
            (Some(ModelSource::File(file)), _) => (local.model(&id, file).await?, None),
            (None, Some((path, prompt))) => (
                local.model(&id, &FileModelConfig::at(path.clone())).await?,
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
            engine: local.model(EMBED_ID, &FileModelConfig::at(path)).await?,
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

/// The local models of the pool, each loaded at start (`preload`) or when
/// first asked; ids on the same file with the same settings share one.
struct LocalModels<'a> {
    pool: ResidentPool,
    embedded: EmbeddedEngines<'a>,
    models: Vec<(FileModelConfig, Arc<dyn Engine>)>,
}

impl LocalModels<'_> {
    /// The engine of `id` on `file`: the one of an id before it on the same
    /// file, or a new model of the pool, loaded now when preloaded (a
    /// failed load stops `svc serve`).
    async fn model(&mut self, id: &str, file: &FileModelConfig) -> anyhow::Result<Arc<dyn Engine>> {
        // The same engine: the same file and engine settings (how long it
        // stays is the first id's).
        let engine_of = |f: &FileModelConfig| FileModelConfig {
            preload: false,
            keep_alive: None,
            ..f.clone()
        };
        let shared = self
            .models
            .iter()
            .find(|(f, _)| engine_of(f) == engine_of(file))
            .map(|(_, engine)| engine.clone());
        if let Some(engine) = shared {
            if file.preload {
                self.preload(id, file, &engine).await?;
            }
            return Ok(engine);
        }
        let loader = self
            .embedded
            .loader(file)
            .with_context(|| format!("models.{id}"))?;
        let counter = self
            .embedded
            .counter(file)
            .with_context(|| format!("models.{id}"))?;
        let engine = self.pool.add(svc_on_demand::Model {
            id: id.to_owned(),
            file: file.path.display().to_string(),
            estimate: self
                .embedded
                .estimate(file)
                .or_else(|| std::fs::metadata(&file.path).ok().map(|m| m.len()))
                .unwrap_or(0),
            keep_alive: file.keep_alive(),
            name: "llama".into(),
            offers: self.embedded.offers(file),
            loader,
            counter: Some(counter),
        });
        if file.preload {
            self.preload(id, file, &engine).await?;
        } else {
            errln!("  {id}: {} (loaded on demand)", file.path.display());
        }
        self.models.push((file.clone(), engine.clone()));
        Ok(engine)
    }

    /// Loads `id`'s model now (a failed load stops `svc serve`).
    async fn preload(
        &self,
        id: &str,
        file: &FileModelConfig,
        engine: &Arc<dyn Engine>,
    ) -> anyhow::Result<()> {
        let Some(residence) = engine.residence() else {
            return Ok(());
        };
        let path = file.path.display();
        if residence.residency().state != svc_core::ResidencyState::Loaded {
            errln!("loading {path} ...");
            residence.load().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        let bytes = residence.residency().memory_bytes;
        errln!("  {id}: {path} ({} in memory)", mebibytes(bytes));
        Ok(())
    }
}

/// What the machine can spare for models now: 90% of the memory available
/// (Linux's `MemAvailable`), or of what the cgroup's `memory.max` leaves
/// when that is less; `None` where neither can be read.
fn spare_memory() -> Option<u64> {
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| meminfo_available(&text));
    let cgroup = (|| {
        let max = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok()?;
        let max: u64 = max.trim().parse().ok()?;
        let current = std::fs::read_to_string("/sys/fs/cgroup/memory.current").ok()?;
        Some(max.saturating_sub(current.trim().parse().ok()?))
    })();
    let spare = match (available, cgroup) {
        (Some(a), Some(c)) => a.min(c),
        (a, c) => a.or(c)?,
    };
    Some(spare / 10 * 9)
}

/// `MemAvailable` of `/proc/meminfo`'s text, in bytes.
fn meminfo_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `bytes` in MiB, for people.
fn mebibytes(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / f64::from(1 << 20))
}

/// The id of the embedding model served beside `svc` and `svc-thinking`.
const EMBED_ID: &str = "svc-embed";

/// `created` of every model in the listing: when svc's model list began.
const MODELS_CREATED: i64 = 1_735_689_600;
