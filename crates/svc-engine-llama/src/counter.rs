//! [`LlamaCounter`]: a model's prompt counts without the model. Its GGUF is
//! read for the vocabulary only (llama.cpp's `vocab_only`: the metadata and
//! the tokenizer, no weights, no context, no engine thread), its chat
//! template compiled as the engine compiles it, and a prompt counted by the
//! engine's own count. svc counts the prompts of a model loaded on demand
//! with it while the model is not loaded, so that a count (which does no
//! inference) never loads one.

use std::sync::Arc;

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use svc_core::engine::{EngineError, GenerateRequest};

use crate::backend;
use crate::chat::ChatFeatures;
use crate::engine::{LoadError, chat_parts, model_template, prompt_tokens};
use crate::options::LlamaEngineOptions;
use crate::prompt::Cancel;
use crate::runner::Runner;
use crate::template::ChatTemplate;

/// A model's tokenizer and chat template, counting prompts as its engine does.
#[derive(Debug)]
pub struct LlamaCounter {
    runner: Runner,
    template: ChatTemplate,
    features: ChatFeatures,
}

impl LlamaCounter {
    /// Reads the vocabulary of `options`' model (the tool and reasoning
    /// formats as given). This blocks while the file's metadata and
    /// vocabulary are read (call it from `spawn_blocking` inside a runtime).
    pub fn load(options: &LlamaEngineOptions) -> Result<Self, LoadError> {
        let backend = backend::backend().map_err(LoadError::Unsupported)?;
        let path = &options.model_path;
        if !path.is_file() {
            return Err(LoadError::Model {
                path: path.clone(),
                reason: "no such file".into(),
            });
        }
        let params = LlamaModelParams::default().with_vocab_only(true);
        let model =
            LlamaModel::load_from_file(backend, path, &params).map_err(|e| LoadError::Model {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        let model = Arc::new(model);
        let template = model_template(&model);
        let (features, specials, bound) = chat_parts(&model, &template, options);
        // The configured context: the engine's may be smaller (when its KV
        // pool is), so this bound refuses no prompt the engine counts.
        Ok(LlamaCounter {
            runner: Runner::counting(model, specials, bound, options.context_per_sequence),
            template,
            features,
        })
    }

    /// The prompt tokens of `request`: exactly what `Generator::count_tokens`
    /// of the engine loaded with the same options says. This blocks while
    /// the prompt is rendered and tokenized.
    pub fn count(&self, request: &GenerateRequest) -> Result<u64, EngineError> {
        // Nobody cancels a count: it is bounded by the text's length (see `fit`).
        prompt_tokens(
            &self.runner,
            &self.template,
            self.features,
            request,
            &Cancel::default(),
        )
    }
}
