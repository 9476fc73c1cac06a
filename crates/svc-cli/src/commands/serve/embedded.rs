//! The embedded engine (llama.cpp in-process), present when svc-cli is
//! built with its `embedded` feature (the default). This is the one place
//! that knows whether it is: built with `--no-default-features`, svc is a
//! gateway that needs no C++ toolchain, and a model served from a GGUF file
//! (the default `svc` and `svc-thinking` included) is refused at start,
//! before anything is fetched.

#[cfg(feature = "embedded")]
mod engines {
    use std::path::PathBuf;
    use std::sync::Arc;

    use anyhow::Context;
    use svc_core::Engine;
    use svc_engine_llama::{LlamaEmbedder, LlamaEngine, LlamaEngineOptions};

    use crate::config::{EngineConfig, KvType};
    use crate::output::errln;

    /// The embedded engines of one `svc serve`: ids on the same file with
    /// the same options share one engine.
    pub struct EmbeddedEngines<'a> {
        settings: &'a EngineConfig,
        loaded: Vec<(LlamaEngineOptions, Arc<dyn Engine>)>,
        embedders: Vec<(PathBuf, Arc<dyn Engine>)>,
    }

    impl<'a> EmbeddedEngines<'a> {
        /// Engines for the model ids `_local`, served from GGUF files.
        pub fn new(settings: &'a EngineConfig, _local: &[&str]) -> anyhow::Result<Self> {
            Ok(EmbeddedEngines {
                settings,
                loaded: Vec::new(),
                embedders: Vec::new(),
            })
        }

        /// The engine for the GGUF at `path`: one already loaded with the
        /// same options, or a new one; an embedding model's embedder.
        pub async fn load(
            &mut self,
            path: PathBuf,
            context: Option<u32>,
            parallel: Option<u32>,
        ) -> anyhow::Result<Arc<dyn Engine>> {
            if svc_engine_llama::is_embedding_model(&path) {
                return self.load_embedder(path).await;
            }
            let mut options = LlamaEngineOptions::new(path);
            options.context_per_sequence = context.unwrap_or(self.settings.context);
            options.parallel = parallel.unwrap_or(self.settings.parallel);
            options.threads = self.settings.threads;
            options.queue_capacity = self.settings.queue;
            options.slots_per_client = self.settings.slots_per_client;
            options.kv_cache = self.settings.kv_cache;
            options.kv_type = match self.settings.kv_type {
                KvType::F16 => svc_engine_llama::KvType::F16,
                KvType::Q8_0 => svc_engine_llama::KvType::Q8_0,
            };
            options.prefix_cache_bytes = self.settings.prefix_cache;
            options.repack = self.settings.repack;
            options.batch_invariant = self.settings.batch_invariant;
            if let Some((_, engine)) = self.loaded.iter().find(|(o, _)| *o == options) {
                return Ok(engine.clone());
            }
            errln!("loading {} ...", options.model_path.display());
            let load = options.clone();
            let engine = tokio::task::spawn_blocking(move || LlamaEngine::load(&load))
                .await
                .context("the model loader stopped")??;
            let info = engine.info();
            errln!(
                "  {}: context {} tokens, {} sequences sharing {} {} KV cells",
                info.name.as_deref().unwrap_or("model"),
                info.context_per_sequence,
                info.parallel,
                info.kv_cache,
                info.kv_type.name()
            );
            let engine: Arc<dyn Engine> = Arc::new(engine);
            self.loaded.push((options, engine.clone()));
            Ok(engine)
        }

        /// The embedding model at `path` (see `LlamaEmbedder`): one already
        /// loaded from the same file, or a new one.
        async fn load_embedder(&mut self, path: PathBuf) -> anyhow::Result<Arc<dyn Engine>> {
            if let Some((_, engine)) = self.embedders.iter().find(|(p, _)| *p == path) {
                return Ok(engine.clone());
            }
            errln!("loading {} ...", path.display());
            let threads = self.settings.threads;
            let load = path.clone();
            let embedder = tokio::task::spawn_blocking(move || LlamaEmbedder::load(&load, threads))
                .await
                .context("the model loader stopped")??;
            let info = embedder.info();
            errln!(
                "  {}: embeddings of {} dimensions, inputs of up to {} tokens",
                info.name.as_deref().unwrap_or("model"),
                info.dimensions,
                info.max_input_tokens
            );
            let engine: Arc<dyn Engine> = Arc::new(embedder);
            self.embedders.push((path, engine.clone()));
            Ok(engine)
        }
    }
}

#[cfg(not(feature = "embedded"))]
mod engines {
    use std::path::PathBuf;
    use std::sync::Arc;

    use svc_core::Engine;

    use crate::config::EngineConfig;

    /// Without the embedded engine there are none.
    pub struct EmbeddedEngines<'a> {
        _settings: &'a EngineConfig,
    }

    impl<'a> EmbeddedEngines<'a> {
        /// Refuses when any model id in `local` is to be served from a GGUF
        /// file, naming them and the two ways out.
        pub fn new(settings: &'a EngineConfig, local: &[&str]) -> anyhow::Result<Self> {
            if !local.is_empty() {
                anyhow::bail!(
                    "{} the embedded engine (a GGUF file), but this svc was built without the \
                     embedded engine; rebuild with default features or configure upstreams \
                     (a [models.<id>] table with `upstreams` for each)",
                    describe(local)
                );
            }
            Ok(EmbeddedEngines {
                _settings: settings,
            })
        }

        /// Never reached: [`new`](Self::new) refused every id this would load.
        #[expect(
            clippy::unused_async,
            reason = "the embedded build's load awaits; callers are the same for both"
        )]
        pub async fn load(
            &mut self,
            path: PathBuf,
            _context: Option<u32>,
            _parallel: Option<u32>,
        ) -> anyhow::Result<Arc<dyn Engine>> {
            anyhow::bail!(
                "cannot serve {}: this svc was built without the embedded engine; rebuild with \
                 default features or configure upstreams",
                path.display()
            )
        }
    }

    /// "model svc needs" / "models svc, svc-thinking need".
    fn describe(ids: &[&str]) -> String {
        match ids {
            [one] => format!("model {one} needs"),
            many => format!("models {} need", many.join(", ")),
        }
    }
}

pub use engines::EmbeddedEngines;
