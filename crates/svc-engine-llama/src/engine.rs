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
use futures::StreamExt as _;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use svc_core::engine::{
    ChatMessage, Embedder, Engine, EngineError, EngineStatus, EventStream, GenerateRequest,
    Generator, PrefixCacheStatus, Reranker, Sampling, Speaker, TextPrompt, ToolChoiceSpec,
    ToolSpec, Transcriber,
};
use svc_gguf::cache::{self, Prepared};
use svc_gguf::repack::RepackTarget;
use thiserror::Error;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::backend;
use crate::chat::{self, ChatFeatures};
use crate::fit::TextBound;
use crate::memory::KvShape;
use crate::numerics::{self, Kernels, Numerics};
use crate::options::{KvType, LlamaEngineOptions};
use crate::prompt::{Cancel, Specials};
use crate::sampler::Grammar;
use crate::scheduler::{self, ContextSettings, Job, Shared};
use crate::stats::EngineStats;
use crate::template::{ChatTemplate, Fallback, RenderOptions};

/// The longest a grammar may take to build (llama.cpp parses it and
/// expands its first parse stacks); past it the request is refused.
const GRAMMAR_BUILD_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

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

/// A raw completion: a prompt that is already text, and how to continue it.
///
/// [`Generator::generate`] is `render_prompt` followed by this; a caller that
/// needs more than one pass (reasoning, then an answer) uses it directly.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CompletionParams {
    /// Sampling settings.
    pub sampling: Sampling,
    /// Cap on completion tokens; `None` (or more than fits) means what is left of the context.
    pub max_tokens: Option<u32>,
    /// Sequences that end the text; none of them is sent.
    pub stop: Vec<String>,
    /// A grammar the text must follow.
    pub grammar: Option<Grammar>,
    /// Keep going past end-of-generation tokens until `max_tokens` (for benchmarks).
    pub ignore_eos: bool,
    /// Report each token's log probability and this many (at most 20) most
    /// likely alternatives, as `Logprobs` events before the text they make.
    pub logprobs: Option<u8>,
    /// Score the prompt's own tokens first (with `logprobs`' alternatives),
    /// as one `PromptLogprobs` event; `max_tokens` may then be 0.
    pub score_prompt: bool,
    /// Mark the text of each tool-call marker the model writes as its
    /// token (U+FDD1 before it), so the chat layer can tell it from the
    /// same text spelled plainly; the chat layer takes the marks out.
    pub mark_markers: bool,
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

/// What starting a completion needs; cheap to clone into a stream that runs
/// several passes.
#[derive(Debug, Clone)]
pub(crate) struct Runner {
    model: Arc<LlamaModel>,
    shared: Arc<Shared>,
    /// Context tokens of one sequence.
    context: u32,
    /// The control tokens only the template may write.
    specials: Arc<Specials>,
    /// The fewest tokens a text can make, from its length: a prompt far
    /// past the context is refused before it is tokenized (see `fit`).
    bound: TextBound,
    /// Whose jobs this runner starts (see `scheduler::Job::owner`).
    owner: Option<Arc<str>>,
    /// Whether its jobs are background work (see `scheduler::Job::background`).
    background: bool,
    /// The trace of the request its jobs are for, when it is recorded:
    /// the engine thread adds its queue and prefill spans.
    trace: Option<svc_core::trace::Current>,
}

impl Runner {
    /// A runner that only tokenizes (no engine thread serves it), for a
    /// `context` of that many tokens: what `counter` counts prompts with.
    pub(crate) fn counting(
        model: Arc<LlamaModel>,
        specials: Arc<Specials>,
        bound: TextBound,
        context: u32,
    ) -> Runner {
        Runner {
            model,
            shared: Arc::new(Shared::new(1, 1, 1)),
            context,
            specials,
            bound,
            owner: None,
            background: false,
            trace: None,
        }
    }

    /// Context tokens of one sequence (prompt and reply together).
    pub(crate) fn context(&self) -> u32 {
        self.context
    }

    /// Sequences the engine decodes in parallel.
    pub(crate) fn parallel(&self) -> u32 {
        self.shared.parallel()
    }

    /// This runner, starting jobs on behalf of `owner`.
    pub(crate) fn for_owner(&self, owner: Arc<str>) -> Runner {
        Runner {
            owner: Some(owner),
            ..self.clone()
        }
    }

    /// This runner, its jobs background work or not.
    pub(crate) fn in_background(self, background: bool) -> Runner {
        Runner { background, ..self }
    }

    /// This runner, its jobs part of the request traced by `trace`.
    pub(crate) fn traced(self, trace: Option<svc_core::trace::Current>) -> Runner {
        Runner { trace, ..self }
    }

    /// Holds the admission of this runner's owner's queued jobs until the
    /// guard drops (see `scheduler::Shared::hold`); `None` without an owner.
    pub(crate) fn hold(&self) -> Option<crate::scheduler::Hold> {
        self.owner.clone().map(|owner| self.shared.hold(owner))
    }

    /// Tokenizes prompt text as the engine does (special tokens parsed, BOS added where the model wants it).
    pub(crate) fn tokenize(&self, text: &str) -> Vec<LlamaToken> {
        let tokens = self.model.vocab().tokenize(text.as_bytes(), false, true);
        crate::prompt::with_bos(&self.model, tokens)
    }

    /// The tokens of a legacy text completion's prompt: the text as it is
    /// (special tokens parsed, BOS added where the model wants it); with a
    /// suffix, the model's fill-in-the-middle form `<PRE> text <SUF> suffix
    /// <MID>` with both parts as plain text. A suffix on a model without
    /// those tokens is a 400 naming `suffix`; a prompt of no tokens one
    /// naming `prompt`.
    pub(crate) fn text_tokens(&self, prompt: &TextPrompt) -> Result<Vec<LlamaToken>, EngineError> {
        let suffix = prompt.suffix.as_deref().unwrap_or("");
        self.bound.check(&[&prompt.text, suffix], self.context)?;
        self.shared
            .counters
            .tokenized(prompt.text.len() + suffix.len());
        let tokens = match &prompt.suffix {
            None => self.tokenize(&prompt.text),
            Some(suffix) => {
                let vocab = self.model.vocab();
                let (pre, suf, mid) = (vocab.fim_pre(), vocab.fim_suf(), vocab.fim_mid());
                let known = |t: LlamaToken| t.0 >= 0 && t.0 < self.model.n_vocab();
                if !(known(pre) && known(suf) && known(mid)) {
                    return Err(EngineError::InvalidRequest {
                        param: Some("suffix".into()),
                        message: "this model has no fill-in-the-middle tokens, so it cannot complete between a prompt and a suffix".into(),
                    });
                }
                let plain = |text: &str| vocab.tokenize(text.as_bytes(), false, false);
                let mut tokens = vec![pre];
                tokens.extend(plain(&prompt.text));
                tokens.push(suf);
                tokens.extend(plain(suffix));
                tokens.push(mid);
                crate::prompt::with_bos(&self.model, tokens)
            }
        };
        if tokens.is_empty() {
            return Err(EngineError::InvalidRequest {
                param: Some("prompt".into()),
                message: "the prompt is empty (it has no tokens)".into(),
            });
        }
        Ok(tokens)
    }

    /// Tokenizes a rendered chat prompt: the template's control tokens as
    /// tokens, the escaped text of the request as plain text (see `prompt`).
    /// A prompt far past the context is refused untokenized (see `fit`).
    pub(crate) fn tokenize_prompt(
        &self,
        text: &str,
        cancel: &Cancel,
    ) -> Result<Vec<LlamaToken>, EngineError> {
        self.bound.check(&[text], self.context)?;
        self.shared.counters.tokenized(text.len());
        self.specials.tokenize(&self.model, text, cancel)
    }

    /// Renders a conversation (already escaped) with `template` for this
    /// engine: stopped as soon as its output is far past the context (the
    /// context's own error, see `fit`) or `cancel` is set, besides the
    /// template's own limits (see `template`).
    pub(crate) fn render(
        &self,
        template: &ChatTemplate,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        options: &RenderOptions,
        cancel: &Cancel,
    ) -> Result<String, EngineError> {
        let (bound, context) = (self.bound, self.context);
        let mut counted = 0u64;
        template.render_checked(messages, tools, options, &mut |piece| {
            cancel.check()?;
            counted = counted.saturating_add(bound.counted(piece));
            bound.refuse_past(counted, context)
        })
    }

    /// The control tokens only the template may write.
    pub(crate) fn specials(&self) -> &Specials {
        &self.specials
    }

    /// Continues `prompt`; see [`LlamaEngine::complete`]. A `continuation`
    /// (the second pass of a request already running) goes to the front of
    /// the queue and is never refused for a full queue.
    pub(crate) fn complete(
        &self,
        prompt: &str,
        params: CompletionParams,
        continuation: bool,
    ) -> Result<EventStream, EngineError> {
        self.start(self.tokenize(prompt), params, continuation)
    }

    /// Continues a rendered chat prompt (see [`Runner::tokenize_prompt`]).
    pub(crate) fn complete_prompt(
        &self,
        prompt: &str,
        params: CompletionParams,
        continuation: bool,
        cancel: &Cancel,
    ) -> Result<EventStream, EngineError> {
        let tokens = self.tokenize_prompt(prompt, cancel)?;
        cancel.check()?;
        self.start(tokens, params, continuation)
    }

    /// The sampler of `grammar`, built on a thread of its own and given up
    /// (a 400 without a param) when llama.cpp refuses the grammar or takes
    /// longer than [`GRAMMAR_BUILD_LIMIT`] to parse it.
    pub(crate) fn grammar_sampler(&self, grammar: &Grammar) -> Result<LlamaSampler, EngineError> {
        let invalid = |message: String| EngineError::InvalidRequest {
            param: None,
            message,
        };
        self.shared.counters.grammar_parsed();
        let (done, built) = mpsc::channel();
        let model = Arc::clone(&self.model);
        let grammar = grammar.clone();
        std::thread::Builder::new()
            .name("llama-grammar".into())
            .spawn(move || {
                let sampler = LlamaSampler::grammar(&model, &grammar.gbnf, &grammar.root);
                let _ = done.send(sampler.map_err(|e| e.to_string()));
            })
            .map_err(|e| EngineError::Internal(format!("cannot start a grammar thread: {e}")))?;
        match built.recv_timeout(GRAMMAR_BUILD_LIMIT) {
            Ok(Ok(sampler)) => Ok(sampler),
            Ok(Err(e)) => Err(invalid(format!("invalid grammar: {e}"))),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(invalid(format!(
                "the decoding grammar of this schema takes too long to build (more than {} s)",
                GRAMMAR_BUILD_LIMIT.as_secs_f32()
            ))),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(EngineError::Internal("the grammar thread failed".into()))
            }
        }
    }

    /// Continues an already tokenized prompt: [`Runner::ready`], then
    /// [`Runner::submit`].
    pub(crate) fn start(
        &self,
        tokens: Vec<LlamaToken>,
        params: CompletionParams,
        continuation: bool,
    ) -> Result<EventStream, EngineError> {
        self.submit(self.ready(tokens, params)?, continuation)
    }

    /// Checks a tokenized prompt and its settings against the context and
    /// builds the grammar's sampler, here, on the caller's thread: parsing
    /// a large grammar must not hold the engine thread (and every other
    /// sequence) back.
    pub(crate) fn ready(
        &self,
        tokens: Vec<LlamaToken>,
        params: CompletionParams,
    ) -> Result<Ready, EngineError> {
        self.ready_with(tokens, params, None)
    }

    /// [`Runner::ready`] with `params.grammar`'s sampler when already built.
    pub(crate) fn ready_with(
        &self,
        tokens: Vec<LlamaToken>,
        params: CompletionParams,
        built: Option<LlamaSampler>,
    ) -> Result<Ready, EngineError> {
        if tokens.is_empty() {
            return Err(EngineError::InvalidRequest {
                param: Some("messages".into()),
                message: "the prompt is empty".into(),
            });
        }
        let context = self.context;
        let prompt_tokens = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        if prompt_tokens >= context {
            return Err(EngineError::ContextLengthExceeded {
                prompt_tokens: tokens.len() as u64,
                context: u64::from(context),
            });
        }
        let room = context - prompt_tokens;
        let max_tokens = params.max_tokens.map_or(room, |m| m.min(room));
        // A scored prompt may ask for nothing more (lm-evaluation-harness's
        // loglikelihood requests do).
        if max_tokens == 0 && !(params.score_prompt && params.max_tokens == Some(0)) {
            return Err(EngineError::InvalidRequest {
                param: Some("max_tokens".into()),
                message: "max_tokens must be at least 1".into(),
            });
        }
        let grammar = match (&params.grammar, built) {
            (None, _) => None,
            (Some(_), Some(built)) => Some(built),
            (Some(grammar), None) => Some(self.grammar_sampler(grammar)?),
        };
        Ok(Ready {
            prompt: tokens,
            sampling: params.sampling,
            grammar,
            max_tokens,
            stop: params.stop,
            ignore_eos: params.ignore_eos,
            logprobs: params.logprobs,
            score_prompt: params.score_prompt,
            mark_markers: params.mark_markers,
        })
    }

    /// Queues a job made [`Runner::ready`]: quick, nothing is built here.
    pub(crate) fn submit(
        &self,
        ready: Ready,
        continuation: bool,
    ) -> Result<EventStream, EngineError> {
        let (sink, events) = tokio::sync::mpsc::unbounded_channel();
        self.shared.submit(
            Job {
                prompt: ready.prompt,
                sampling: ready.sampling,
                grammar: ready.grammar,
                max_tokens: ready.max_tokens,
                stop: ready.stop,
                ignore_eos: ready.ignore_eos,
                logprobs: ready.logprobs,
                score_prompt: ready.score_prompt,
                mark_markers: ready.mark_markers,
                owner: self.owner.clone(),
                background: self.background,
                trace: self
                    .trace
                    .clone()
                    .map(|trace| (trace, std::time::SystemTime::now())),
                sink,
            },
            continuation,
        )?;
        Ok(UnboundedReceiverStream::new(events).boxed())
    }
}

/// A generation checked and with its grammar's sampler built, to be queued
/// by [`Runner::submit`]. A clone shares nothing with it (the sampler is
/// copied, not parsed again), so one preparation serves `n` choices.
#[derive(Clone)]
pub(crate) struct Ready {
    prompt: Vec<LlamaToken>,
    sampling: Sampling,
    grammar: Option<LlamaSampler>,
    /// Fits in the context.
    max_tokens: u32,
    stop: Vec<String>,
    ignore_eos: bool,
    logprobs: Option<u8>,
    score_prompt: bool,
    mark_markers: bool,
}

impl Ready {
    /// The same generation with another sampling seed (`None` stays `None`).
    pub(crate) fn with_seed_offset(mut self, offset: u64) -> Self {
        offset_seed(&mut self.sampling, offset);
        self
    }

    /// Whether the prompt's own tokens are scored first.
    pub(crate) fn scores_prompt(&self) -> bool {
        self.score_prompt
    }

    /// The same generation without scoring its prompt, `max_tokens` 0
    /// still allowed: a choice after the first of a scored request, which
    /// gets the first one's scores (see `choices::generate_n`).
    pub(crate) fn unscored(mut self) -> Self {
        self.score_prompt = false;
        self
    }
}

/// Moves `sampling`'s seed on by `offset` (`None` stays `None`): choice
/// `i` of an `n > 1` request is seeded `seed + i`.
pub(crate) fn offset_seed(sampling: &mut Sampling, offset: u64) {
    sampling.seed = sampling.seed.map(|seed| seed.wrapping_add(offset));
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
            runner: Runner {
                model,
                shared,
                context: context_per_sequence,
                specials,
                bound,
                owner: None,
                background: false,
                trace: None,
            },
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
            let started = chat::generate(&runner, &template, features, request, &cancel);
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
    fn generator(&self) -> Option<&dyn Generator> {
        Some(self)
    }

    fn embedder(&self) -> Option<&dyn Embedder> {
        None
    }

    fn reranker(&self) -> Option<&dyn Reranker> {
        None
    }

    fn transcriber(&self) -> Option<&dyn Transcriber> {
        None
    }

    fn speaker(&self) -> Option<&dyn Speaker> {
        None
    }

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
    // As `chat::generate` prepares them (the client's text escaped first).
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
