//! `svc pull [MODEL]`: put a model file into the data directory (the default
//! model, or `hf:ORG/REPO/FILE.gguf`) and print its path on stdout; progress
//! and messages go to stderr. Ctrl-C (or SIGTERM) stops it and removes the
//! partial file.

use anyhow::bail;

use crate::cli::PullArgs;
use crate::config::StoreConfig;
use crate::model_files::{self, HfHub, ModelRef};

pub async fn run(args: PullArgs) -> anyhow::Result<()> {
    let model = ModelRef::parse(args.model.as_deref())?;
    let store = StoreConfig::load(args.store.config.as_deref(), &args.store.given)?;
    let data_dir = store.data_dir()?.to_owned();
    let work = async {
        match &model {
            ModelRef::Default => model_files::ensure_default_model(&data_dir).await,
            ModelRef::Hf(hf) => model_files::pull_hf(&data_dir, hf, &HfHub::from_env()).await,
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
    println!("{}", path.display());
    Ok(())
}
