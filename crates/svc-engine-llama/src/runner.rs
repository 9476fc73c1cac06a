//! What starts a completion: [`Runner`] (the model, the scheduler's
//! queue, the context's size, whose jobs they are) and [`Ready`], a
//! generation checked and with its sampler built, from a raw
//! [`CompletionParams`]. Below both the chat layer (`chat.rs`,
//! `choices.rs`), which runs its passes through a runner, and the engine
//! (`engine.rs`), which builds the runner and calls the chat layer: in
//! `engine.rs` these made engine and chat one import circle.

use std::sync::{Arc, mpsc};

use futures::StreamExt as _;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use svc_core::engine::{ChatMessage, EngineError, EventStream, Sampling, TextPrompt, ToolSpec};
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::fit::TextBound;
use crate::prompt::{Cancel, Specials};
use crate::sampler::Grammar;
use crate::scheduler::{Job, Shared};
use crate::template::{ChatTemplate, RenderOptions};

/// The longest a grammar may take to build (llama.cpp parses it and
/// expands its first parse stacks); past it the request is refused.
const GRAMMAR_BUILD_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A raw completion: a prompt that is already text, and how to continue it.
///
/// [`Generator::generate`](svc_core::engine::Generator::generate) is `render_prompt` followed by this; a caller that
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

/// What starting a completion needs; cheap to clone into a stream that runs
/// several passes.
#[derive(Debug, Clone)]
pub(crate) struct Runner {
    /// The model (the engine tokenizes with it too).
    pub(crate) model: Arc<LlamaModel>,
    /// The scheduler's queue and counters (the engine pauses, freezes and
    /// closes it).
    pub(crate) shared: Arc<Shared>,
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
    /// The runner of an engine whose thread serves `shared`'s queue, for
    /// sequences of `context` tokens; its jobs are nobody's in particular
    /// and in the foreground until [`Runner::for_owner`] and
    /// [`Runner::in_background`] say otherwise.
    pub(crate) fn new(
        model: Arc<LlamaModel>,
        shared: Arc<Shared>,
        context: u32,
        specials: Arc<Specials>,
        bound: TextBound,
    ) -> Runner {
        Runner {
            model,
            shared,
            context,
            specials,
            bound,
            owner: None,
            background: false,
            trace: None,
        }
    }

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
