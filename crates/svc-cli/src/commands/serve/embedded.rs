//! The embedded engine (llama.cpp in-process), present when svc-cli is
//! built with its `embedded` feature (the default). This is the one place
//! that knows whether it is: built with `--no-default-features`, svc is a
//! gateway that needs no C++ toolchain, and a model served from a GGUF file
//! (the default `svc` and `svc-thinking` included) is refused at start,
//! before anything is fetched.

#[cfg(feature = "embedded")]
mod engines {
    /// The format `name` names (read by `parse`), or an error naming the
    /// key and the formats there are.
    fn named<T, const N: usize>(
        name: &str,
        key: &str,
        parse: fn(&str) -> Option<T>,
        names: [&str; N],
    ) -> anyhow::Result<T> {
        parse(name)
            .ok_or_else(|| anyhow::anyhow!("{key}: {name:?} is not one of {}", names.join(", ")))
    }

    use std::sync::Arc;

    use anyhow::Context;
    use svc_core::engine::EngineError;
    use svc_core::{Capability, Engine};
    use svc_engine_llama::{
        LlamaCounter, LlamaEmbedder, LlamaEngine, LlamaEngineOptions, ReasoningFormat, ToolFormat,
    };

    use crate::config::{EngineConfig, FileModelConfig, KvType};
    use svc_on_demand::{Count, CounterLoader, Loaded, Loader};

    /// The engine's options for the GGUF `file`; a wrong format name is
    /// an error naming its key.
    fn options(
        settings: &EngineConfig,
        file: &FileModelConfig,
    ) -> anyhow::Result<LlamaEngineOptions> {
        let mut options = LlamaEngineOptions::new(&file.path);
        options.context_per_sequence = file.context.unwrap_or(settings.context);
        options.parallel = file.parallel.unwrap_or(settings.parallel);
        options.tool_format = file
            .tool_format
            .as_deref()
            .map(|name| {
                named(
                    name,
                    "tool_format",
                    ToolFormat::parse,
                    ToolFormat::ALL.map(ToolFormat::name),
                )
            })
            .transpose()?;
        options.reasoning_format = file
            .reasoning_format
            .as_deref()
            .map(|name| {
                named(
                    name,
                    "reasoning_format",
                    ReasoningFormat::parse,
                    ReasoningFormat::ALL.map(ReasoningFormat::name),
                )
            })
            .transpose()?;
        options.threads = settings.threads;
        options.queue_capacity = settings.queue;
        options.slots_per_client = settings.slots_per_client;
        options.kv_cache = settings.kv_cache;
        options.kv_type = match settings.kv_type {
            KvType::F16 => svc_engine_llama::KvType::F16,
            KvType::Q8_0 => svc_engine_llama::KvType::Q8_0,
        };
        options.prefix_cache_bytes = settings.prefix_cache;
        options.repack = settings.repack;
        options.batch_invariant = settings.batch_invariant;
        Ok(options)
    }

    /// The embedded engine of one `svc serve`: the loaders of its local
    /// models.
    pub struct EmbeddedEngines<'a> {
        settings: &'a EngineConfig,
    }

    impl<'a> EmbeddedEngines<'a> {
        /// Engines for the model ids `_local`, served from GGUF files.
        pub fn new(settings: &'a EngineConfig, _local: &[&str]) -> anyhow::Result<Self> {
            Ok(EmbeddedEngines { settings })
        }

        /// About the memory the model of `file` will take once loaded:
        /// its weights and KV cells as the engine will make them (an
        /// embedding model's, its file's size).
        pub fn estimate(&self, file: &FileModelConfig) -> Option<u64> {
            if svc_engine_llama::is_embedding_model(&file.path) {
                return std::fs::metadata(&file.path).ok().map(|m| m.len());
            }
            svc_engine_llama::memory_estimate(&options(self.settings, file).ok()?)
        }

        /// What the model of `file` will offer once loaded: an embedding
        /// model's embeddings, else generation.
        pub fn offers(&self, file: &FileModelConfig) -> Vec<Capability> {
            if svc_engine_llama::is_embedding_model(&file.path) {
                vec![Capability::Embedding]
            } else {
                vec![Capability::Generation]
            }
        }

        /// The loader of the GGUF `file` (see `svc_on_demand`): each call loads
        /// it anew on a blocking thread (an embedding model's embedder,
        /// else the chat engine), its size being what the engine says it
        /// holds. The format names are checked now.
        pub fn loader(&self, file: &FileModelConfig) -> anyhow::Result<Loader> {
            let options = options(self.settings, file)?;
            let threads = self.settings.threads;
            Ok(Arc::new(move || {
                let options = options.clone();
                Box::pin(async move {
                    let path = options.model_path.clone();
                    let size = std::fs::metadata(&path)
                        .with_context(|| format!("cannot read {}", path.display()))?
                        .len();
                    let engine =
                        tokio::task::spawn_blocking(move || -> anyhow::Result<Arc<dyn Engine>> {
                            if svc_engine_llama::is_embedding_model(&path) {
                                let embedder = LlamaEmbedder::load(&path, threads)?;
                                let info = embedder.info();
                                tracing::info!(
                                    path = %path.display(),
                                    name = info.name.as_deref().unwrap_or("model"),
                                    dimensions = info.dimensions,
                                    max_input_tokens = info.max_input_tokens,
                                    "embedding model ready"
                                );
                                Ok(Arc::new(embedder))
                            } else {
                                Ok(Arc::new(LlamaEngine::load(&options)?))
                            }
                        })
                        .await
                        .context("the model loader stopped")??;
                    let bytes = engine.status().memory_bytes.unwrap_or(size);
                    Ok(Loaded { engine, bytes })
                })
            }))
        }
    }

    impl EmbeddedEngines<'_> {
        /// The prompt counter of the GGUF `file` while it is not loaded
        /// (see `svc_on_demand`): its vocabulary read alone, on a blocking
        /// thread, counting as its engine does; an embedding model's
        /// refuses as its embedder does.
        pub fn counter(&self, file: &FileModelConfig) -> anyhow::Result<CounterLoader> {
            let options = options(self.settings, file)?;
            Ok(Arc::new(move || {
                let options = options.clone();
                Box::pin(async move {
                    if svc_engine_llama::is_embedding_model(&options.model_path) {
                        let refuses: Count = Arc::new(|_| {
                            Box::pin(async {
                                Err(EngineError::InvalidRequest {
                                    param: Some("model".into()),
                                    message: "this model makes embeddings, not text".into(),
                                })
                            })
                        });
                        return Ok(refuses);
                    }
                    let counter = tokio::task::spawn_blocking(move || LlamaCounter::load(&options))
                        .await
                        .context("the tokenizer loader stopped")??;
                    let counter = Arc::new(counter);
                    let count: Count = Arc::new(move |request| {
                        let counter = counter.clone();
                        Box::pin(async move {
                            tokio::task::spawn_blocking(move || counter.count(&request))
                                .await
                                .map_err(|e| {
                                    EngineError::Internal(format!("counting tokens failed: {e}"))
                                })?
                        })
                    });
                    Ok(count)
                })
            }))
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_format_setting_is_one_of_the_formats() {
            let names = ToolFormat::ALL.map(ToolFormat::name);
            let pythonic = named("pythonic", "tool_format", ToolFormat::parse, names);
            assert_eq!(pythonic.ok(), Some(ToolFormat::Pythonic));
            let wrong = named("json", "tool_format", ToolFormat::parse, names);
            let message = wrong.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(message.starts_with("tool_format: \"json\" is not one of hermes, mistral"));
            let names = ReasoningFormat::ALL.map(ReasoningFormat::name);
            let none = named("none", "reasoning_format", ReasoningFormat::parse, names);
            assert_eq!(none.ok(), Some(ReasoningFormat::Plain));
        }
    }
}

#[cfg(not(feature = "embedded"))]
mod engines {
    use svc_core::Capability;
    use svc_on_demand::{CounterLoader, Loader};

    use crate::config::{EngineConfig, FileModelConfig};

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
    }

    impl EmbeddedEngines<'_> {
        /// Never reached: [`new`](Self::new) refused every id this would load.
        pub fn estimate(&self, _file: &FileModelConfig) -> Option<u64> {
            None
        }

        /// Never reached: [`new`](Self::new) refused every id this would load.
        pub fn offers(&self, _file: &FileModelConfig) -> Vec<Capability> {
            Vec::new()
        }

        /// Never reached: [`new`](Self::new) refused every id this would load.
        pub fn loader(&self, file: &FileModelConfig) -> anyhow::Result<Loader> {
            anyhow::bail!(
                "cannot serve {}: this svc was built without the embedded engine",
                file.path.display()
            )
        }

        /// Never reached: [`new`](Self::new) refused every id this would load.
        pub fn counter(&self, file: &FileModelConfig) -> anyhow::Result<CounterLoader> {
            anyhow::bail!(
                "cannot count for {}: this svc was built without the embedded engine",
                file.path.display()
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
