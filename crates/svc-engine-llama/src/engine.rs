//! [`LlamaEngine`]: the embedded engine behind svc-core's `Engine` trait.
//!
//! It loads the GGUF, compiles its chat template, and starts the engine
//! thread (see `scheduler`). A request's grammar is built, its prompt
//! rendered and tokenized on a blocking thread (never on an async worker,
//! never on the engine thread), stopped when the caller drops the future
//! (the client went away); then it is checked against the context and
//! queued, and its events come back on a channel the returned stream
//! reads. A prompt far past the context is refused before it is tokenized,
//! and its rendering stopped as soon as it is (see `fit`). Dropping the
//! stream cancels the generation. This file owns the public
//! entry points; batching, sampling, templates, prompts and text assembly
//! live in their own modules.

use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use async_trait::async_trait;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::token::LlamaToken;
use svc_core::engine::{
    ChatMessage, Engine, EngineError, EngineStatus, EventStream, GenerateRequest, Generator,
    PrefixCacheStatus, ToolChoiceSpec, ToolSpec,
};
use svc_gguf::cache::{self, Prepared};
use svc_gguf::repack::RepackTarget;
use thiserror::Error;

use crate::backend;
use crate::chat::{self, ChatFeatures};
use crate::choices;
use crate::fit::TextBound;
use crate::memory::KvShape;
use crate::numerics::{self, Kernels, Numerics};
use crate::options::{KvType, LlamaEngineOptions};
use crate::prompt::{Cancel, Specials};
use crate::runner::{CompletionParams, Runner};
use crate::scheduler::{self, ContextSettings, Shared};
use crate::stats::EngineStats;
use crate::template::{ChatTemplate, Fallback, RenderOptions};

/// Why an engine could not start.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The CPU or llama.cpp itself cannot run here.
    #[error("{0}")]
    Unsupported(String),
    /// The options make no sense.
    #[error("invalid engine option: {0}")]
    InvalidOption(String),
    /// llama.cpp could not read the model.
    #[error("cannot load the model {path}: {reason}")]
    Model { path: PathBuf, reason: String },
    /// llama.cpp could not set up the context.
    #[error("{0}")]
    Context(String),
    /// The engine thread could not start.
    #[error("cannot start the engine thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// What was loaded, and with what limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    /// The GGUF file, as configured.
    pub path: PathBuf,
    /// The file llama.cpp loaded: `path`, or the Q8_0 copy of it that the
    /// engine made or reused (see [`LlamaEngineOptions::repack`]).
    pub loaded_path: PathBuf,
    /// `general.name` from the GGUF, when present.
    pub name: Option<String>,
    /// The context length the model was trained with.
    pub trained_context: u32,
    /// Context tokens each sequence has (prompt and reply together).
    pub context_per_sequence: u32,
    /// Sequences decoded together.
    pub parallel: u32,
    /// KV cells shared by all sequences (as requested; llama.cpp rounds up to 256).
    pub kv_cache: u32,
    /// How the KV cells are stored.
    pub kv_type: KvType,
    /// Host memory for saved prefixes, in bytes.
    pub prefix_cache_bytes: usize,
    /// Tokens in the vocabulary.
    pub vocab_size: u32,
    /// Whether the chat template came from the GGUF (not the ChatML fallback).
    pub chat_template_from_model: bool,
    /// `system_fingerprint`: changes only when the weights, the engine build
    /// or the numeric settings do (see `numerics::fingerprint`).
    pub fingerprint: String,
    /// Host memory the weights and the KV cells take (saved prefixes come
    /// on top, up to `prefix_cache_bytes`).
    pub memory_bytes: u64,
}

/// An in-process llama.cpp engine with continuous batching.
#[derive(Debug)]
pub struct LlamaEngine {
    runner: Runner,
    template: Arc<ChatTemplate>,
    features: ChatFeatures,
    info: ModelInfo,
    thread: Option<JoinHandle<()>>,
}

impl LlamaEngine {
    /// Loads the model and starts the engine thread. This blocks while the
    /// file is read (call it from `spawn_blocking` inside a runtime).
    pub fn load(options: &LlamaEngineOptions) -> Result<Self, LoadError> {
        if options.parallel == 0 {
            return Err(LoadError::InvalidOption(
                "parallel must be at least 1".into(),
            ));
        }
        // One sequence id past the slots' holds cells given up while others run.
        if options.parallel > scheduler::PARK as u32 {
            return Err(LoadError::InvalidOption(format!(
                "parallel must be at most {}",
                scheduler::PARK
            )));
        }
        if options.context_per_sequence == 0 {
            return Err(LoadError::InvalidOption(
                "context_per_sequence must be at least 1".into(),
            ));
        }
        if options.kv_cache == Some(0) {
            return Err(LoadError::InvalidOption(
                "kv_cache must be at least 1 token".into(),
            ));
        }
        let backend = backend::backend().map_err(LoadError::Unsupported)?;
        if !options.model_path.is_file() {
            return Err(LoadError::Model {
                path: options.model_path.clone(),
                reason: "no such file".into(),
            });
        }
        let loaded_path = if options.repack {
            repacked(&options.model_path)
        } else {
            options.model_path.clone()
        };
        let kernels = Kernels::for_model(
            &loaded_path,
            options.batch_invariant,
            options.flash_attention,
        );
        // Invariant kernels need the rows as the file has them: llama.cpp
        // repacks some types for this CPU, and its repacked products round
        // differently for one token than for four.
        let model = numerics::with_plain_weights(kernels != Kernels::Fastest, || {
            LlamaModel::load_from_file(backend, &loaded_path, &LlamaModelParams::default())
        })
        .map_err(LoadError::Unsupported)?
        .map_err(|e| LoadError::Model {
            path: loaded_path.clone(),
            reason: e.to_string(),
        })?;
        let model = Arc::new(model);

        let template = model_template(&model);

        let trained_context = model.n_ctx_train();
        let mut context_per_sequence = options.context_per_sequence;
        if trained_context > 0 && context_per_sequence > trained_context {
            tracing::warn!(
                requested = context_per_sequence,
                trained_context,
                "context per sequence capped at the model's training context"
            );
            context_per_sequence = trained_context;
        }
        let kv_cells = options
            .kv_cache
            .unwrap_or_else(|| options.parallel.saturating_mul(context_per_sequence));
        if kv_cells < context_per_sequence {
            tracing::info!(
                kv_cache = kv_cells,
                "context per sequence capped at the KV cache's size"
            );
            context_per_sequence = kv_cells;
        }
        let (features, specials, bound) = chat_parts(&model, &template, options);
        tracing::info!(
            tool_calls = features.syntax.map_or("hermes", |s| s.name()),
            tool_format_set = options.tool_format.is_some(),
            reasoning = features.reasoning.name(),
            reasoning_format_set = options.reasoning_format.is_some(),
            tokens_only = ?specials.guarded(),
            "the model's tool calls and reasoning are parsed in these formats (the tool-call markers that are tokens count only as those tokens)"
        );
        let shown = specials.tokens_of(&features.markers());
        tracing::info!(kernels = kernels.name(), "the CPU's kernels for this model");
        let settings = ContextSettings {
            context_per_sequence,
            parallel: options.parallel,
            kv_cells,
            kv_type: options.kv_type,
            prefix_cache_bytes: options.prefix_cache_bytes,
            batch_size: options.batch_size.max(options.parallel),
            threads: options.thread_count(),
            flash_attention: options.flash_attention,
            kernels,
            shown,
            marked: specials.guarded_tokens(),
        };
        let fingerprint = numerics::fingerprint(&Numerics {
            weights: &loaded_path,
            kernels,
            kv_type: options.kv_type.name(),
            flash_attention: options.flash_attention,
        })
        .map_err(|e| LoadError::Model {
            path: loaded_path.clone(),
            reason: e.to_string(),
        })?;
        let shared = Arc::new(Shared::new(
            options.parallel as usize,
            options.queue_capacity,
            options.client_slots() as usize,
        ));
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("llama-engine".into())
            .spawn({
                let model = Arc::clone(&model);
                let shared = Arc::clone(&shared);
                move || scheduler::run(model, settings, shared, ready_tx)
            })?;
        let context_per_sequence = match ready_rx.recv() {
            Ok(Ok(n)) => n,
            Ok(Err(reason)) => {
                let _ = thread.join();
                return Err(LoadError::Context(reason));
            }
            Err(_) => {
                let _ = thread.join();
                return Err(LoadError::Context(
                    "the engine thread ended while starting".into(),
                ));
            }
        };
        let info = ModelInfo {
            path: options.model_path.clone(),
            loaded_path,
            name: model.meta_val_str("general.name").ok(),
            trained_context,
            context_per_sequence,
            parallel: options.parallel,
            kv_cache: kv_cells,
            kv_type: options.kv_type,
            prefix_cache_bytes: options.prefix_cache_bytes,
            vocab_size: u32::try_from(model.n_vocab()).unwrap_or(0),
            chat_template_from_model: template.is_from_model(),
            fingerprint,
            memory_bytes: model.size() + KvShape::of_model(&model).bytes(kv_cells, options.kv_type),
        };
        tracing::info!(
            path = %info.path.display(),
            name = info.name.as_deref().unwrap_or(""),
            context_per_sequence,
            parallel = info.parallel,
            slots_per_client = options.client_slots(),
            kv_cache = info.kv_cache,
            kv_type = info.kv_type.name(),
            threads = options.thread_count(),
            devices = numerics::devices(),
            fingerprint = info.fingerprint,
            "llama.cpp engine ready"
        );
        Ok(LlamaEngine {
            runner: Runner::new(model, shared, context_per_sequence, specials, bound),
            template: Arc::new(template),
            features,
            info,
            thread: Some(thread),
        })
    }

    /// What was loaded, and with what limits.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Admits no request until the guard drops; those queued meanwhile
    /// then start together (as far as slots and per-client shares allow),
    /// whatever the machine's timing. For tests.
    #[cfg(feature = "testing")]
    pub fn pause_admission(&self) -> crate::scheduler::Pause {
        self.runner.shared.pause()
    }

    /// Stops the engine after the next step in which a sequence produces
    /// its first token, until the guard drops: nothing is admitted or
    /// decoded meanwhile, so a request queued then is seen before that
    /// sequence's second token, whatever the machine's timing. For tests.
    #[cfg(feature = "testing")]
    pub fn freeze_at_first_token(&self) -> crate::scheduler::Freeze {
        self.runner.shared.freeze_at_first_token()
    }

    /// The engine's counters since it started.
    pub fn stats(&self) -> EngineStats {
        let shared = &self.runner.shared;
        shared.counters.snapshot(shared.waiting() as u64)
    }

    /// The chat template in use.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// Renders a conversation into prompt text with the model's chat template.
    pub fn render_prompt(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        options: &RenderOptions,
    ) -> Result<String, EngineError> {
        self.template.render_with(messages, tools, options)
    }

    /// Tokenizes raw prompt text as [`LlamaEngine::complete`] does (special
    /// tokens parsed, BOS added where the model wants it).
    pub fn tokenize(&self, text: &str) -> Vec<LlamaToken> {
        self.runner.tokenize(text)
    }

    /// The prompt tokens of a conversation rendered as [`LlamaEngine::render_prompt`]
    /// renders it and tokenized as [`Generator::generate`] tokenizes: every
    /// string of the messages and tools is plain text, only the template's
    /// own markup becomes control tokens.
    pub fn chat_tokens(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        options: &RenderOptions,
    ) -> Result<Vec<LlamaToken>, EngineError> {
        let specials = self.runner.specials();
        let prompt = self.template.render_with(
            &specials.escape_messages(messages),
            &specials.escape_tools(tools),
            options,
        )?;
        // Whatever its length (a tool for tests and benchmarks, not a client's).
        specials.tokenize(&self.runner.model, &prompt, &Cancel::default())
    }

    /// Continues `prompt` (already rendered text): the events of one generation.
    ///
    /// Fails before anything streams when the prompt does not fit the context
    /// or the queue is full.
    pub fn complete(
        &self,
        prompt: &str,
        params: CompletionParams,
    ) -> Result<EventStream, EngineError> {
        self.runner.complete(prompt, params, false)
    }
}

#[async_trait]
impl Generator for LlamaEngine {
    /// Renders the conversation (tools, reasoning and response format
    /// included, see `chat`) and starts its first pass.
    ///
    /// That work (grammar, rendering, tokenizing) runs on a blocking thread,
    /// never on an async worker, and stops at its next step when this
    /// future is dropped (the client went away).
    async fn generate(&self, request: GenerateRequest) -> Result<EventStream, EngineError> {
        let cancel = Cancel::default();
        let guard = cancel.on_drop();
        // The request's trace lives on this task; the jobs carry it on.
        let runner = self.runner.clone().traced(svc_core::trace::current());
        let template = Arc::clone(&self.template);
        let features = self.features;
        let task = tokio::task::spawn_blocking(move || {
            let started = choices::generate(&runner, &template, features, request, &cancel);
            if started.is_err() && cancel.is_set() {
                runner.shared.counters.cancelled();
            }
            started
        });
        let started = task
            .await
            .map_err(|e| EngineError::Internal(format!("preparing the request failed: {e}")))?;
        guard.disarm();
        started
    }

    /// Exactly the prompt tokens [`Generator::generate`] would start from:
    /// the conversation and tools prepared and rendered with the model's
    /// chat template as the answer is (reasoning switch included), then
    /// tokenized. A reasoning pass, when the template has none, renders
    /// the prompt once more; that is not counted. Runs on a blocking thread,
    /// stopped when this future is dropped. A prompt far past the context
    /// is not counted: its context error comes back (see `fit`).
    async fn count_tokens(&self, request: &GenerateRequest) -> Result<u64, EngineError> {
        let cancel = Cancel::default();
        let guard = cancel.on_drop();
        let runner = self.runner.clone();
        let template = Arc::clone(&self.template);
        let features = self.features;
        let request = request.clone();
        let task = tokio::task::spawn_blocking(move || {
            prompt_tokens(&runner, &template, features, &request, &cancel)
        });
        let counted = task
            .await
            .map_err(|e| EngineError::Internal(format!("counting tokens failed: {e}")))?;
        guard.disarm();
        counted
    }

    /// No vision yet: a request with images is refused (`refuse_images`).
    fn sees_images(&self) -> bool {
        false
    }
}

/// A chat model generates; it makes no embeddings, reranks nothing, hears
/// and says nothing.
impl Engine for LlamaEngine {
    svc_core::offers!(generator);

    fn name(&self) -> &str {
        "llama"
    }

    fn fingerprint(&self) -> Option<String> {
        Some(self.info.fingerprint.clone())
    }

    fn status(&self) -> EngineStatus {
        let stats = self.stats();
        EngineStatus {
            queued: stats.waiting_requests,
            running: stats.active_sequences,
            endpoints: Vec::new(),
            prefix_cache: Some(PrefixCacheStatus {
                evaluated_tokens: stats.prompt_tokens,
                reused_tokens: stats.reused_prompt_tokens,
                host_bytes: stats.host_cache_bytes,
                host_limit_bytes: self.info.prefix_cache_bytes as u64,
                host_entries: stats.host_cache_entries,
                host_saves: stats.host_cache_saves,
                host_restores: stats.host_cache_restores,
                host_evictions: stats.host_cache_evictions,
            }),
            memory_bytes: Some(self.info.memory_bytes + stats.host_cache_bytes),
            residency: None,
        }
    }
}

/// The chat template of `model` (its GGUF's, else the turn format its
/// vocabulary's markers say), as the engine renders prompts with it.
pub(crate) fn model_template(model: &LlamaModel) -> ChatTemplate {
    let source = model.meta_val_str("tokenizer.chat_template").ok();
    let bos = special_text(model, model.vocab().bos());
    let eos = special_text(model, model.vocab().eos());
    // Without one, the turn format its vocabulary's markers say.
    let fallback =
        Fallback::of_vocab(|text| model.vocab().tokenize(text.as_bytes(), false, true).len() == 1);
    // An empty template is none.
    let source = source.filter(|s| !s.trim().is_empty());
    ChatTemplate::or_else(source.as_deref(), fallback, &bos, &eos)
}

/// What `template` can do with `options`' tool and reasoning formats, the
/// control tokens only it may write (the family's markers among them), and
/// the fewest tokens a text of the model's vocabulary makes: what the
/// engine and the vocabulary-only counter prepare prompts with.
pub(crate) fn chat_parts(
    model: &LlamaModel,
    template: &ChatTemplate,
    options: &LlamaEngineOptions,
) -> (ChatFeatures, Arc<Specials>, TextBound) {
    let features = ChatFeatures::of(
        template.source(),
        options.tool_format,
        options.reasoning_format,
    );
    let specials = Specials::of(model, &features.markers(), &features.call_markers());
    (features, Arc::new(specials), TextBound::of(model))
}

/// The prompt tokens of `request` (see [`LlamaEngine::count_tokens`]).
pub(crate) fn prompt_tokens(
    runner: &Runner,
    template: &ChatTemplate,
    features: ChatFeatures,
    request: &GenerateRequest,
    cancel: &Cancel,
) -> Result<u64, EngineError> {
    svc_core::refuse_images(request)?;
    if let Some(prompt) = &request.prompt {
        return Ok(runner.text_tokens(prompt)?.len() as u64);
    }
    let use_tools = !request.tools.is_empty() && request.tool_choice != ToolChoiceSpec::None;
    let offered: &[ToolSpec] = if use_tools { &request.tools } else { &[] };
    let specials = runner.specials();
    // As `chat::prepare` prepares them (the client's text escaped first).
    let offered = specials.escape_tools(offered);
    let messages = crate::tools::prepare_messages(
        &specials.escape_messages(&request.messages),
        &offered,
        features.tools,
    );
    let tools: Vec<ToolSpec> = if features.tools.tools {
        offered
    } else {
        Vec::new()
    };
    let options = chat::render_options(features, request);
    let prompt = runner.render(template, &messages, &tools, &options, cancel)?;
    let tokens = runner.tokenize_prompt(&prompt, cancel)?;
    Ok(tokens.len() as u64)
}

impl Drop for LlamaEngine {
    fn drop(&mut self) {
        self.runner.shared.close();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the llama.cpp engine thread panicked");
        }
    }
}

/// The file to load for `source`: its Q8_0 copy when it is mostly Q4_1
/// (made now or reused), otherwise `source` itself. Says what it did in the log.
fn repacked(source: &Path) -> PathBuf {
    let target = RepackTarget::Q8_0;
    match cache::prepare(source, target) {
        Prepared::Unchanged => source.to_owned(),
        Prepared::Reused(path) => {
            tracing::info!(
                source = %source.display(),
                copy = %path.display(),
                "using the {} copy of this Q4_1 model (faster batched decoding)",
                target.name()
            );
            path
        }
        Prepared::Converted {
            path,
            summary,
            seconds,
        } => {
            tracing::info!(
                source = %source.display(),
                copy = %path.display(),
                tensors = summary.converted,
                bytes = summary.bytes_written,
                relative_rms_error = summary.relative_rms_error,
                "converted the Q4_1 weights of this model to {} once in {seconds:.1} s (faster batched decoding)",
                target.name()
            );
            path
        }
        Prepared::Failed(reason) => {
            tracing::warn!(
                source = %source.display(),
                %reason,
                "cannot write a {} copy of this Q4_1 model; loading it as it is (slower when several requests decode together)",
                target.name()
            );
            source.to_owned()
        }
    }
}

/// The text of a special token (BOS, EOS) for templates; empty when the model has none.
fn special_text(model: &LlamaModel, token: LlamaToken) -> String {
    if token.0 < 0 || token.0 >= model.n_vocab() {
        return String::new();
    }
    let bytes = model.vocab().token_to_piece(token, true, None);
    String::from_utf8_lossy(&bytes).into_owned()
}
