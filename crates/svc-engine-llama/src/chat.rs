//! The chat layer of [`Generator::generate`](svc_core::engine::Generator): what
//! turns a typed chat request into one or two raw completions and their
//! output into reasoning, text and tool-call events.
//!
//! - Structured output (`json_object`, `json_schema`) and forced tool calls
//!   (`tool_choice` `required` or a named function) become a GBNF grammar
//!   (see `grammar`), so the reply matches even on a tiny model. With
//!   `tool_choice` `auto` and a JSON response format, the grammar accepts
//!   either the JSON reply or tool calls.
//! - Tools go into the prompt through the model's template when it renders
//!   `tools`, else as a Hermes-style system block (see `tools`); the output
//!   is parsed into OpenAI's indexed tool-call chunks. A marker that is a
//!   token of the vocabulary counts only as that token (see
//!   `markup::MarkerGuard`): the engine marks the tokens, the guard hides
//!   the same text spelled plainly from the parsers.
//! - Reasoning: a thinking model's `<think>` block is split into `Reasoning`
//!   events (or dropped, for `svc`); other models get an explicit reasoning
//!   pass, then an answer pass that sees that reasoning (see `reasoning`).
//!
//! Every string of the request (and the model's reasoning, fed back in a
//! second pass) is escaped before rendering and the prompt tokenized so that
//! only the template's markup becomes control tokens (see `prompt`).
//!
//! [`generate_one`] runs on a blocking thread and checks its [`Cancel`] between
//! steps. The returned stream owns the running completion: dropping it
//! cancels whichever pass is running. Failures of a second pass arrive as an
//! error item in the stream.

use std::borrow::Cow;
use std::sync::Arc;

use futures::StreamExt as _;
use llama_cpp_2::sampling::LlamaSampler;
use serde_json::{Value, json};
use svc_core::engine::{
    ChatMessage, EngineError, EngineEvent, EventStream, FinishReason, GenerateRequest,
    OutputFormat, ReasoningEffort, TokenLogprob, TokenUsage, ToolCallChunk, ToolChoiceSpec,
    ToolSpec,
};

use crate::families::{CallParser, Syntax, ToolFormat};
use crate::grammar;
use crate::harmony::{HarmonyParser, Said};
use crate::markup::{MarkerGuard, WsTrim, unmark};
use crate::prompt::Cancel;
use crate::reasoning::{self, Piece, REASONING_PREFILL, ReasoningFormat, ThinkSplitter};
use crate::runner::{CompletionParams, Ready, Runner};
use crate::sampler::Grammar;
use crate::template::{ChatTemplate, RenderOptions};
use crate::tools::{self, Parsed, ToolSupport};

/// The most tokens a reasoning pass may use.
pub(crate) const REASONING_CAP: u32 = 256;

/// What a model's chat template can do, read once at load.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ChatFeatures {
    pub(crate) tools: ToolSupport,
    /// How the model marks its own reasoning, if it writes any.
    pub(crate) reasoning: ReasoningFormat,
    /// The template takes an `enable_thinking` switch.
    pub(crate) enable_thinking: bool,
    /// The tool-call syntax the template teaches its model, when it is not
    /// Hermes' (see [`crate::families`]).
    pub(crate) syntax: Option<Syntax>,
}

impl ChatFeatures {
    /// The features of the template `source`, with the formats a
    /// setting names instead of those it teaches.
    pub(crate) fn of(
        source: &str,
        tool_format: Option<ToolFormat>,
        reasoning_format: Option<ReasoningFormat>,
    ) -> Self {
        let reasoning = reasoning_format.unwrap_or_else(|| ReasoningFormat::of_template(source));
        let syntax = match tool_format {
            Some(format) => format.syntax(),
            // Harmony's calls are messages of their own (`crate::harmony`).
            None if reasoning == ReasoningFormat::Harmony => None,
            None => Syntax::of_template(source),
        };
        ChatFeatures {
            tools: ToolSupport::of(source),
            reasoning,
            enable_thinking: source.contains("enable_thinking"),
            syntax,
        }
    }

    /// The control tokens' texts the engine must show in the reply: the
    /// markup of the model's tool calls and of its reasoning.
    pub(crate) fn markers(&self) -> Vec<&'static str> {
        let mut markers = self.reasoning.markers().to_vec();
        markers.extend(self.call_markers());
        markers
    }

    /// The markup of the model's tool calls: its family's, or Hermes'.
    pub(crate) fn call_markers(&self) -> Vec<&'static str> {
        match self.syntax {
            Some(syntax) => syntax.markers().to_vec(),
            None => vec![tools::CALL_OPEN, tools::CALL_CLOSE],
        }
    }
}

/// The template variables of a request: the family's switches for
/// reasoning. Qwen3's `enable_thinking` follows whether the request wants
/// reasoning; gpt-oss's `reasoning_effort` is the client's (`low`,
/// `medium` or `high`; `none` and `minimal` are `low`, its least), left to
/// the template's default (`medium`) when the client said none.
pub(crate) fn render_options(features: ChatFeatures, request: &GenerateRequest) -> RenderOptions {
    let mut options = RenderOptions::default();
    if features.enable_thinking {
        options
            .extra
            .insert("enable_thinking".into(), Value::Bool(request.reasoning));
    }
    if features.reasoning == ReasoningFormat::Harmony
        && let Some(effort) = request.reasoning_effort
    {
        let effort = match effort {
            ReasoningEffort::None | ReasoningEffort::Minimal | ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        };
        options
            .extra
            .insert("reasoning_effort".into(), Value::from(effort));
    }
    options
}

/// Starts the generation of `request`'s one choice (see
/// `choices::generate`, which hands `n > 1` to `choices::generate_n`).
pub(crate) fn generate_one(
    runner: &Runner,
    template: &Arc<ChatTemplate>,
    features: ChatFeatures,
    request: GenerateRequest,
    cancel: &Cancel,
) -> Result<EventStream, EngineError> {
    let runner = match &request.client {
        Some(client) => runner.for_owner(Arc::from(client.as_str())),
        None => runner.clone(),
    }
    .in_background(request.background);
    prepare(&runner, template, features, request, cancel)?.start(&runner)
}

/// A request rendered, tokenized and with its (first pass's) grammar built:
/// all the slow work of [`generate_one`], done before anything is queued.
#[derive(Clone)]
pub(crate) struct Plan {
    first: Ready,
    /// How the first pass's text becomes events; `None` for a legacy text
    /// completion, whose stream is the pass's own.
    then: Option<Then>,
}

/// What follows the first pass of a chat request (see [`drive`]).
#[derive(Clone)]
struct Then {
    second: Option<Second>,
    out: Output,
    max_tokens: Option<u32>,
}

impl Plan {
    fn chat(first: Ready, second: Option<Second>, out: Output, max_tokens: Option<u32>) -> Self {
        Plan {
            first,
            then: Some(Then {
                second,
                out,
                max_tokens,
            }),
        }
    }

    /// The same request with its seed (every pass's) moved on by `offset`:
    /// choice `i` of an `n > 1` request says what a request seeded `seed + i` says.
    pub(crate) fn with_seed_offset(self, offset: u64) -> Self {
        Plan {
            first: self.first.with_seed_offset(offset),
            then: self.then.map(|then| Then {
                second: then.second.map(|second| second.with_seed_offset(offset)),
                ..then
            }),
        }
    }

    /// Whether the first pass scores its prompt (see [`Ready::scores_prompt`]).
    pub(crate) fn scores_prompt(&self) -> bool {
        self.first.scores_prompt()
    }

    /// The same request without scoring its prompt (see [`Ready::unscored`]).
    pub(crate) fn unscored(self) -> Self {
        Plan {
            first: self.first.unscored(),
            ..self
        }
    }

    /// Queues the first pass; quick (nothing is built here).
    pub(crate) fn start(self, runner: &Runner) -> Result<EventStream, EngineError> {
        let first = runner.submit(self.first, false)?;
        Ok(match self.then {
            None => first,
            Some(then) => drive(
                runner.clone(),
                first,
                then.second,
                then.out,
                then.max_tokens,
            ),
        })
    }
}

/// Tokenizes a rendered chat prompt and makes its pass [`Runner::ready`].
fn ready_prompt(
    runner: &Runner,
    prompt: &str,
    params: CompletionParams,
    built: Option<LlamaSampler>,
    cancel: &Cancel,
) -> Result<Ready, EngineError> {
    let tokens = runner.tokenize_prompt(prompt, cancel)?;
    cancel.check()?;
    runner.ready_with(tokens, params, built)
}

/// Does the slow work of [`generate_one`] (see [`Plan`]).
pub(crate) fn prepare(
    runner: &Runner,
    template: &Arc<ChatTemplate>,
    features: ChatFeatures,
    request: GenerateRequest,
    cancel: &Cancel,
) -> Result<Plan, EngineError> {
    if let Some(prompt) = &request.prompt {
        // A legacy text completion: the text as it is, no chat layer.
        let tokens = runner.text_tokens(prompt)?;
        cancel.check()?;
        let params = CompletionParams {
            sampling: request.sampling,
            max_tokens: request.max_tokens,
            stop: request.stop,
            grammar: None,
            ignore_eos: false,
            logprobs: request.logprobs,
            score_prompt: prompt.score,
            mark_markers: false,
        };
        return Ok(Plan {
            first: runner.ready(tokens, params)?,
            then: None,
        });
    }
    let options = render_options(features, &request);
    let GenerateRequest {
        messages,
        sampling,
        max_tokens,
        stop,
        tools,
        tool_choice,
        output,
        reasoning: wants_reasoning,
        // In the template's variables (`render_options`).
        reasoning_effort: _,
        // Tokens come one by one either way; the server collects them.
        stream: _,
        logprobs,
        n: _,
        client: _,
        // Taken by the runner (`in_background`) before this.
        background: _,
        prompt: _,
    } = request;

    // Tools and the grammar.
    let use_tools = !tools.is_empty() && tool_choice != ToolChoiceSpec::None;
    let (grammar, grammar_param) = match decoding_grammar(&tools, &tool_choice, &output, use_tools)?
    {
        Some((grammar, param)) => (Some(grammar), Some(param)),
        None => (None, None),
    };
    // Built now, so a grammar llama.cpp refuses or takes too long with is
    // a 400 before anything streams, even when only a second pass uses it;
    // a first pass under the grammar takes this sampler.
    let mut built = match &grammar {
        Some(grammar) => Some(
            runner
                .grammar_sampler(grammar)
                .map_err(naming(grammar_param))?,
        ),
        None => None,
    };
    cancel.check()?;
    let offered: &[ToolSpec] = if use_tools { &tools } else { &[] };
    let specials = runner.specials();
    // Escaped before svc writes its own markup into the history (calls and
    // results the template cannot show, the tools' system block): that
    // markup is the model's tokens, the client's text around it plain.
    let offered = specials.escape_tools(offered);
    let messages = tools::prepare_messages(
        &specials.escape_messages(&messages),
        &offered,
        features.tools,
    );
    let template_tools: Vec<ToolSpec> = if features.tools.tools {
        offered
    } else {
        Vec::new()
    };
    cancel.check()?;

    // The tool-call markers that are tokens of the vocabulary count only as
    // those tokens, so a marker the client's text coaxed the model into
    // spelling is text. Under a grammar the grammar writes the markers.
    let guarded = if use_tools && grammar.is_none() {
        specials.guarded()
    } else {
        Vec::new()
    };
    let out = Output {
        think: None,
        keep_reasoning: false,
        guard: (!guarded.is_empty()).then(|| MarkerGuard::new(&guarded)),
        // A grammar that forces calls writes them in Hermes' syntax.
        tools: use_tools.then(|| {
            CallParser::new(
                features.syntax,
                grammar.is_some(),
                !guarded.is_empty(),
                tools.iter().map(|t| t.name.clone()).collect(),
            )
        }),
        json: (grammar.is_some() && !use_tools).then(WsTrim::default),
        next_index: 0,
        logprobs: Vec::new(),
    };
    // Only the answer's tokens have log probabilities (not a reasoning pass's).
    let answer = CompletionParams {
        sampling: sampling.clone(),
        max_tokens,
        stop,
        grammar,
        ignore_eos: false,
        logprobs,
        score_prompt: false,
        mark_markers: !guarded.is_empty(),
    };
    let render = |messages: &[ChatMessage]| {
        let prompt = runner.render(template, messages, &template_tools, &options, cancel)?;
        cancel.check()?;
        Ok::<_, EngineError>(prompt)
    };

    let format = features.reasoning;
    if format.thinks() {
        let mut prompt = render(&messages)?;
        let opened = format.prompt_opens(&prompt);
        if answer.grammar.is_none() {
            // One pass; the reasoning is split off (and dropped for `svc`).
            let names = if use_tools {
                tools.iter().map(|t| t.name.clone()).collect()
            } else {
                Vec::new()
            };
            let out = Output {
                think: Some(Split::new(format, opened, names)),
                keep_reasoning: wants_reasoning,
                ..out
            };
            let first = ready_prompt(runner, &prompt, answer, built.take(), cancel)
                .map_err(naming(grammar_param))?;
            return Ok(Plan::chat(first, None, out, max_tokens));
        }
        if wants_reasoning {
            // The grammar would forbid the reasoning's markup: let the
            // model think freely first, then continue after the reasoning
            // ends, under the grammar.
            if !opened {
                prompt.push_str(&format.open());
            }
            let tokens = runner.tokenize_prompt(&prompt, cancel)?;
            let cap = reasoning_cap(runner, tokens.len(), max_tokens);
            if cap > 0 {
                let think = CompletionParams {
                    sampling,
                    max_tokens: Some(cap),
                    stop: vec![format.stop().to_owned()],
                    grammar: None,
                    ignore_eos: false,
                    logprobs: None,
                    score_prompt: false,
                    mark_markers: false,
                };
                let first = runner.ready(tokens, think)?;
                cancel.check()?;
                let second = Second::AfterThink {
                    prefix: prompt,
                    to_answer: format.to_answer(),
                    params: answer,
                };
                return Ok(Plan::chat(first, Some(second), out, max_tokens));
            }
            // No room to think: answer at once, the reasoning closed.
            prompt.push_str(&format.to_answer());
        } else {
            prompt.push_str(&format.skip(opened));
        }
        let first = ready_prompt(runner, &prompt, answer, built.take(), cancel)
            .map_err(naming(grammar_param))?;
        return Ok(Plan::chat(first, None, out, max_tokens));
    }

    if wants_reasoning {
        let mut prompt = render(&reasoning::reasoning_pass_messages(&messages))?;
        prompt.push_str(REASONING_PREFILL);
        let tokens = runner.tokenize_prompt(&prompt, cancel)?;
        let cap = reasoning_cap(runner, tokens.len(), max_tokens);
        if cap > 0 {
            let think = CompletionParams {
                sampling,
                max_tokens: Some(cap),
                stop: Vec::new(),
                grammar: None,
                ignore_eos: false,
                logprobs: None,
                score_prompt: false,
                mark_markers: false,
            };
            let first = runner.ready(tokens, think)?;
            cancel.check()?;
            let second = Second::Answer {
                template: Arc::clone(template),
                messages,
                tools: template_tools.clone(),
                options: options.clone(),
                params: answer,
            };
            return Ok(Plan::chat(first, Some(second), out, max_tokens));
        }
    }
    let prompt = render(&messages)?;
    let first = ready_prompt(runner, &prompt, answer, built.take(), cancel)
        .map_err(naming(grammar_param))?;
    Ok(Plan::chat(first, None, out, max_tokens))
}

/// Tokens the reasoning pass may use: at most [`REASONING_CAP`], half of
/// `max_tokens`, and half of what its prompt leaves of the context (the
/// answer pass needs room for the reasoning and its own reply). 0: no pass.
fn reasoning_cap(runner: &Runner, prompt_tokens: usize, max_tokens: Option<u32>) -> u32 {
    let prompt = u32::try_from(prompt_tokens).unwrap_or(u32::MAX);
    let room = runner.context().saturating_sub(prompt);
    let mut cap = REASONING_CAP.min(room / 2);
    if let Some(max) = max_tokens {
        cap = cap.min(max / 2);
    }
    cap
}

/// `InvalidRequest` errors without a param (a grammar llama.cpp refused
/// or took too long to build) named after the field the grammar came from.
fn naming(param: Option<&'static str>) -> impl Fn(EngineError) -> EngineError {
    move |e| match e {
        EngineError::InvalidRequest {
            param: None,
            message,
        } => EngineError::InvalidRequest {
            param: param.map(Into::into),
            message,
        },
        e => e,
    }
}

/// The grammar the reply must follow, if any, and the request field it
/// comes from (`tools` or `response_format`).
fn decoding_grammar(
    tools: &[ToolSpec],
    choice: &ToolChoiceSpec,
    output: &OutputFormat,
    use_tools: bool,
) -> Result<Option<(Grammar, &'static str)>, EngineError> {
    let checked = |gbnf: String, param: &'static str| {
        grammar::check_size(&gbnf).map_err(|why| EngineError::InvalidRequest {
            param: Some(param.into()),
            message: format!("this grammar is not supported: {why}"),
        })?;
        Ok(Some((grammar::grammar(gbnf), param)))
    };
    let calls = |chosen: Vec<&ToolSpec>| {
        grammar::tool_call(&chosen).map_err(|(i, why)| {
            let name = &chosen[i].name;
            let at = tools.iter().position(|t| &t.name == name).unwrap_or(i);
            EngineError::InvalidRequest {
                param: Some(format!("tools[{at}].function.parameters")),
                message: format!(
                    "the parameters of the function {name:?} are not supported: {why}"
                ),
            }
        })
    };
    match choice {
        ToolChoiceSpec::Required => {
            if tools.is_empty() {
                return Err(EngineError::InvalidRequest {
                    param: Some("tool_choice".into()),
                    message: "tool_choice is \"required\" but no tools were given".into(),
                });
            }
            return checked(calls(tools.iter().collect())?, "tools");
        }
        ToolChoiceSpec::Function(name) => {
            let Some(tool) = tools.iter().find(|t| &t.name == name) else {
                return Err(EngineError::InvalidRequest {
                    param: Some("tool_choice".into()),
                    message: format!(
                        "tool_choice names the function {name:?}, which is not among the tools"
                    ),
                });
            };
            return checked(calls(vec![tool])?, "tools");
        }
        ToolChoiceSpec::None | ToolChoiceSpec::Auto => {}
    }
    let response = match output {
        OutputFormat::Text => return Ok(None),
        OutputFormat::JsonObject => {
            grammar::from_schema(&json!({"type": "object"})).map_err(EngineError::Internal)?
        }
        OutputFormat::JsonSchema { schema, .. } => {
            grammar::from_schema(schema).map_err(|why| EngineError::InvalidRequest {
                param: Some("response_format.json_schema.schema".into()),
                message: format!("this JSON schema is not supported: {why}"),
            })?
        }
    };
    if use_tools {
        let calls = calls(tools.iter().collect())?;
        return checked(grammar::either(&response, &calls), "tools");
    }
    checked(response, "response_format")
}

/// The second pass of a two-pass generation, built once the first is done.
#[derive(Clone)]
enum Second {
    /// The answer pass of the explicit reasoning: the conversation again
    /// (escaped), with the reasoning in the system message.
    Answer {
        template: Arc<ChatTemplate>,
        messages: Vec<ChatMessage>,
        tools: Vec<ToolSpec>,
        options: RenderOptions,
        params: CompletionParams,
    },
    /// A thinking model's answer under a grammar: its prompt and
    /// reasoning, then `to_answer` (what closes the reasoning and opens
    /// the answer).
    AfterThink {
        prefix: String,
        to_answer: String,
        params: CompletionParams,
    },
}

impl Second {
    /// The same pass with its seed moved on by `offset` (see [`Plan::with_seed_offset`]).
    fn with_seed_offset(mut self, offset: u64) -> Self {
        let (Second::Answer { params, .. } | Second::AfterThink { params, .. }) = &mut self;
        crate::runner::offset_seed(&mut params.sampling, offset);
        self
    }

    /// Text the first pass's prompt already wrote for the model: the start
    /// of the reasoning.
    fn reasoning_prefix(&self) -> &'static str {
        match self {
            Second::Answer { .. } => REASONING_PREFILL,
            Second::AfterThink { .. } => "",
        }
    }

    /// The prompt and settings of the pass, given the first pass's text
    /// (the model's own words: escaped like the client's).
    fn build(
        self,
        runner: &Runner,
        reasoning: &str,
        cancel: &Cancel,
    ) -> Result<(String, CompletionParams), EngineError> {
        let reasoning = runner.specials().escape(reasoning);
        match self {
            Second::Answer {
                template,
                messages,
                tools,
                options,
                params,
            } => {
                let messages = reasoning::answer_pass_messages(&messages, &reasoning);
                let prompt = runner.render(&template, &messages, &tools, &options, cancel)?;
                Ok((prompt, params))
            }
            Second::AfterThink {
                prefix,
                to_answer,
                params,
            } => Ok((
                format!("{prefix}{}{to_answer}", reasoning.trim_end()),
                params,
            )),
        }
    }
}

/// Runs the passes: the first one's text as `Reasoning` when there is a
/// second, the last one's through `out`; one `Finish` with the usage of all.
fn drive(
    runner: Runner,
    first: EventStream,
    second: Option<Second>,
    mut out: Output,
    max_tokens: Option<u32>,
) -> EventStream {
    Box::pin(async_stream::stream! {
        let mut usage = TokenUsage::default();
        let mut stream = first;
        if let Some(second) = second {
            let mut raw = second.reasoning_prefix().to_owned();
            let mut trim = WsTrim::default();
            let prefix = trim.push(&raw);
            if !prefix.is_empty() {
                yield Ok(EngineEvent::Reasoning(prefix));
            }
            let mut finished = false;
            while let Some(event) = stream.next().await {
                match event {
                    Ok(EngineEvent::Text(text)) => {
                        raw.push_str(&text);
                        let text = trim.push(&text);
                        if !text.is_empty() {
                            yield Ok(EngineEvent::Reasoning(text));
                        }
                    }
                    Ok(EngineEvent::Finish { usage: used, .. }) => {
                        usage.add(used);
                        finished = true;
                        break;
                    }
                    Ok(other) => yield Ok(other),
                    Err(e) => {
                        yield Err(e);
                        return;
                    }
                }
            }
            if !finished {
                return;
            }
            // Reasoning tokens count against max_tokens, as OpenAI counts them.
            let used = u32::try_from(usage.completion_tokens).unwrap_or(u32::MAX);
            let runner = runner.clone();
            // Rendering and tokenizing block: not on an async worker. Stopped
            // when this stream is dropped meanwhile (the client went away).
            let cancel = Cancel::default();
            let guard = cancel.on_drop();
            let next = tokio::task::spawn_blocking(move || {
                let (prompt, mut params) = second.build(&runner, &raw, &cancel)?;
                params.max_tokens = max_tokens.map(|max| max.saturating_sub(used).max(1));
                runner.complete_prompt(&prompt, params, true, &cancel)
            })
            .await
            .unwrap_or_else(|e| Err(EngineError::Internal(format!("the second pass failed: {e}"))));
            guard.disarm();
            stream = match next {
                Ok(stream) => stream,
                Err(e) => {
                    yield Err(e);
                    return;
                }
            };
        }
        while let Some(event) = stream.next().await {
            match event {
                Ok(EngineEvent::Text(text)) => {
                    for event in out.push(&text) {
                        yield Ok(event);
                    }
                }
                Ok(EngineEvent::Finish { reason, usage: used }) => {
                    for event in out.finish() {
                        yield Ok(event);
                    }
                    usage.add(used);
                    yield Ok(EngineEvent::Finish { reason: out.reason(reason), usage });
                    return;
                }
                Ok(EngineEvent::Logprobs(tokens)) => out.logprobs.extend(tokens),
                Ok(other) => yield Ok(other),
                Err(e) => {
                    yield Err(e);
                    return;
                }
            }
        }
    })
}

/// Splits a thinking model's reasoning off its output.
#[derive(Clone)]
enum Split {
    /// A block between tags (`<think>…</think>`, `[THINK]…[/THINK]`, ...).
    Tags(ThinkSplitter),
    /// gpt-oss's channels, which carry its calls too.
    Harmony(HarmonyParser),
}

impl Split {
    /// The splitter of `format` (which thinks) for output after a prompt
    /// that `opened` the reasoning or not; `names`: the functions whose
    /// calls harmony may report.
    fn new(format: ReasoningFormat, opened: bool, names: Vec<String>) -> Self {
        match format.tags() {
            Some(tags) => Split::Tags(ThinkSplitter::with_tags(tags, opened)),
            None => Split::Harmony(HarmonyParser::new(names)),
        }
    }
}

/// Turns the text of the (last) pass into events.
#[derive(Clone)]
struct Output {
    /// Splits a thinking model's reasoning off.
    think: Option<Split>,
    /// Send the think block as `Reasoning` (else drop it).
    keep_reasoning: bool,
    /// Reads the marks of the tool-call marker tokens, when the pass
    /// writes them (see [`MarkerGuard`]).
    guard: Option<MarkerGuard>,
    /// Parses tool calls out of the content.
    tools: Option<CallParser>,
    /// Trims the whitespace a JSON grammar allows around the value.
    json: Option<WsTrim>,
    next_index: u32,
    /// Log probabilities of tokens whose text is not out yet.
    logprobs: Vec<TokenLogprob>,
}

impl Output {
    fn push(&mut self, text: &str) -> Vec<EngineEvent> {
        let guarded;
        let text = match self.guard.as_mut() {
            Some(guard) => {
                guarded = guard.push(text);
                guarded.as_str()
            }
            None => text,
        };
        let events = self.read(text);
        self.unmarked(events)
    }

    /// What the parsers make of `text`.
    fn read(&mut self, text: &str) -> Vec<EngineEvent> {
        let mut events = Vec::new();
        match self.think.as_mut() {
            Some(Split::Tags(think)) => {
                let mut pieces = Vec::new();
                think.push(text, &mut pieces);
                self.pieces(pieces, &mut events);
            }
            Some(Split::Harmony(harmony)) => {
                let mut said = Vec::new();
                harmony.push(text, &mut said);
                self.said(said, &mut events);
            }
            None => self.content(text, &mut events),
        }
        self.with_logprobs(events)
    }

    /// `events` with the held log probabilities before their first text.
    /// Tokens that became reasoning or tool calls only are not reported (as
    /// OpenAI reports content tokens only); tokens still held by a parser
    /// wait for the text they make.
    fn with_logprobs(&mut self, mut events: Vec<EngineEvent>) -> Vec<EngineEvent> {
        if self.logprobs.is_empty() || events.is_empty() {
            return events;
        }
        let tokens = std::mem::take(&mut self.logprobs);
        if let Some(at) = events
            .iter()
            .position(|e| matches!(e, EngineEvent::Text(_)))
        {
            events.insert(at, EngineEvent::Logprobs(tokens));
        }
        events
    }

    fn finish(&mut self) -> Vec<EngineEvent> {
        let mut events = match self.guard.as_mut().map(MarkerGuard::finish) {
            Some(rest) if !rest.is_empty() => self.read(&rest),
            _ => Vec::new(),
        };
        match self.think.as_mut() {
            Some(Split::Tags(think)) => {
                let mut pieces = Vec::new();
                think.finish(&mut pieces);
                self.pieces(pieces, &mut events);
            }
            Some(Split::Harmony(harmony)) => {
                let mut said = Vec::new();
                harmony.finish(&mut said);
                self.said(said, &mut events);
            }
            None => {}
        }
        if let Some(tools) = self.tools.as_mut() {
            let mut parsed = Vec::new();
            tools.finish(&mut parsed);
            self.parsed(parsed, &mut events);
        }
        if let Some(json) = self.json.as_mut() {
            json.finish();
        }
        let events = self.with_logprobs(events);
        self.unmarked(events)
    }

    /// `events` with the guard's marks taken out of their text: the
    /// model's text as it wrote it.
    fn unmarked(&self, mut events: Vec<EngineEvent>) -> Vec<EngineEvent> {
        if self.guard.is_none() {
            return events;
        }
        let clean = |text: &mut String| {
            if let Cow::Owned(clean) = unmark(text) {
                *text = clean;
            }
        };
        for event in &mut events {
            match event {
                EngineEvent::Text(text) | EngineEvent::Reasoning(text) => clean(text),
                EngineEvent::ToolCall(chunk) => {
                    clean(&mut chunk.arguments);
                    if let Some(name) = chunk.name.as_mut() {
                        clean(name);
                    }
                }
                _ => {}
            }
        }
        events
    }

    /// The finish reason to report: `tool_calls` when the reply ended by
    /// itself after calling tools.
    fn reason(&self, reason: FinishReason) -> FinishReason {
        let called = self.next_index > 0;
        if called && reason == FinishReason::Stop {
            FinishReason::ToolCalls
        } else {
            reason
        }
    }

    /// What harmony's parser found: pieces, and calls it read itself.
    fn said(&mut self, said: Vec<Said>, events: &mut Vec<EngineEvent>) {
        for item in said {
            match item {
                Said::Piece(piece) => self.pieces(vec![piece], events),
                Said::Call(parsed) => self.parsed(vec![parsed], events),
            }
        }
    }

    fn pieces(&mut self, pieces: Vec<Piece>, events: &mut Vec<EngineEvent>) {
        for piece in pieces {
            match piece {
                Piece::Reasoning(text) => {
                    if self.keep_reasoning {
                        events.push(EngineEvent::Reasoning(text));
                    }
                }
                Piece::Content(text) => self.content(&text, events),
            }
        }
    }

    fn content(&mut self, text: &str, events: &mut Vec<EngineEvent>) {
        if let Some(tools) = self.tools.as_mut() {
            let mut parsed = Vec::new();
            tools.push(text, &mut parsed);
            self.parsed(parsed, events);
        } else if let Some(json) = self.json.as_mut() {
            let text = json.push(text);
            if !text.is_empty() {
                events.push(EngineEvent::Text(text));
            }
        } else if !text.is_empty() {
            events.push(EngineEvent::Text(text.to_owned()));
        }
    }

    /// Parsed output as events: a call is a first chunk with its index, id
    /// and name (and empty arguments), then its arguments, in one chunk or
    /// piece by piece as they decode.
    fn parsed(&mut self, parsed: Vec<Parsed>, events: &mut Vec<EngineEvent>) {
        for item in parsed {
            match item {
                Parsed::Text(text) => events.push(EngineEvent::Text(text)),
                Parsed::CallStart { name } => self.start_call(name, events),
                Parsed::Call { name, arguments } => {
                    self.start_call(name, events);
                    self.arguments(arguments, events);
                }
                Parsed::Args(arguments) => self.arguments(arguments, events),
            }
        }
    }

    fn start_call(&mut self, name: String, events: &mut Vec<EngineEvent>) {
        let index = self.next_index;
        self.next_index += 1;
        events.push(EngineEvent::ToolCall(ToolCallChunk {
            index,
            id: Some(tools::call_id()),
            name: Some(name),
            arguments: String::new(),
        }));
    }

    /// A piece of the arguments of the call that started last.
    fn arguments(&mut self, arguments: String, events: &mut Vec<EngineEvent>) {
        if arguments.is_empty() {
            return;
        }
        events.push(EngineEvent::ToolCall(ToolCallChunk {
            index: self.next_index.saturating_sub(1),
            id: None,
            name: None,
            arguments,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effort_reaches_a_harmony_template_and_thinking_qwen3s() {
        let harmony = ChatFeatures::of("<|channel|>analysis<|message|>", None, None);
        let qwen3 = ChatFeatures::of("{% if enable_thinking %}<think>{% endif %}", None, None);
        let effort = |features, effort, reasoning| {
            let request = GenerateRequest {
                reasoning_effort: effort,
                reasoning,
                ..GenerateRequest::default()
            };
            render_options(features, &request).extra
        };
        for (said, sent) in [
            (ReasoningEffort::None, "low"),
            (ReasoningEffort::Minimal, "low"),
            (ReasoningEffort::Low, "low"),
            (ReasoningEffort::Medium, "medium"),
            (ReasoningEffort::High, "high"),
        ] {
            let extra = effort(harmony, Some(said), true);
            assert_eq!(extra.get("reasoning_effort"), Some(&Value::from(sent)));
        }
        // Unsaid: the template's own default.
        assert!(effort(harmony, None, false).is_empty());
        let extra = effort(qwen3, Some(ReasoningEffort::High), true);
        assert_eq!(extra.get("enable_thinking"), Some(&Value::Bool(true)));
        assert_eq!(extra.get("reasoning_effort"), None);
        let extra = effort(qwen3, Some(ReasoningEffort::None), false);
        assert_eq!(extra.get("enable_thinking"), Some(&Value::Bool(false)));
    }

    /// The families of the real templates in `tests/templates` (as their
    /// GGUFs ship them): each is read in its own formats.
    #[test]
    fn real_templates_are_read_in_their_familys_formats() {
        use ReasoningFormat as R;
        let cases: &[(&str, Option<Syntax>, ReasoningFormat)] = &[
            (
                "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
                Some(Syntax::CommandR),
                R::CommandR,
            ),
            ("GLM-4.6", Some(Syntax::Glm), R::Think),
            ("HuggingFaceTB-SmolLM3-3B", None, R::Think),
            ("Kimi-K2-Instruct", Some(Syntax::Kimi), R::Plain),
            ("moonshotai-Kimi-K2", Some(Syntax::Kimi), R::Plain),
            (
                "Mistral-Small-3.2-24B-Instruct-2506",
                Some(Syntax::Mistral),
                R::Plain,
            ),
            (
                "mistralai-Mistral-Nemo-Instruct-2407",
                Some(Syntax::Mistral),
                R::Plain,
            ),
            (
                "unsloth-mistral-Devstral-Small-2507",
                Some(Syntax::Mistral),
                R::Plain,
            ),
            (
                "mistralai-Ministral-3-14B-Reasoning-2512",
                Some(Syntax::Mistral),
                R::Mistral,
            ),
            (
                "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
                None,
                R::Plain,
            ),
            ("Qwen-Qwen2.5-7B-Instruct", None, R::Plain),
            ("Qwen-QwQ-32B", None, R::Think),
            ("Qwen-Qwen3-0.6B", None, R::Think),
            ("Qwen3-Coder", Some(Syntax::Qwen3Coder), R::Plain),
            (
                "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
                Some(Syntax::DeepSeek),
                R::Think,
            ),
            (
                "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
                Some(Syntax::DeepSeek),
                R::Think,
            ),
            (
                "deepseek-ai-DeepSeek-V3.1",
                Some(Syntax::DeepSeek),
                R::Think,
            ),
            ("google-gemma-2-2b-it", None, R::Plain),
            (
                "ibm-granite-granite-3.3-2B-Instruct",
                Some(Syntax::ToolCallToken),
                R::Think,
            ),
            (
                "meta-llama-Llama-3.1-8B-Instruct",
                Some(Syntax::Llama3),
                R::Plain,
            ),
            // Its bare `{"name": …, "parameters": …}` calls are read by
            // Hermes' parser, which takes a bare call too.
            ("meta-llama-Llama-3.2-3B-Instruct", None, R::Plain),
            ("microsoft-Phi-3.5-mini-instruct", None, R::Plain),
            ("openai-gpt-oss-120b", None, R::Harmony),
        ];
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/templates");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "jinja") {
                seen += 1;
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                let case = cases.iter().find(|c| c.0 == name);
                let (_, syntax, reasoning) = case.unwrap_or_else(|| panic!("no case for {name}"));
                let source = std::fs::read_to_string(&path).unwrap();
                let features = ChatFeatures::of(&source, None, None);
                assert_eq!(
                    (features.syntax, features.reasoning),
                    (*syntax, *reasoning),
                    "{name}"
                );
            }
        }
        assert_eq!(seen, cases.len());
    }

    #[test]
    fn settings_override_what_the_template_teaches() {
        let mistral = "[TOOL_CALLS][THINK]";
        let detected = ChatFeatures::of(mistral, None, None);
        assert_eq!(detected.syntax, Some(Syntax::Mistral));
        assert_eq!(detected.reasoning, ReasoningFormat::Mistral);
        assert!(detected.markers().contains(&"[THINK]"));
        let set = ChatFeatures::of(
            mistral,
            Some(ToolFormat::Hermes),
            Some(ReasoningFormat::Plain),
        );
        assert_eq!(set.syntax, None);
        assert_eq!(set.reasoning, ReasoningFormat::Plain);
        assert_eq!(set.markers(), [tools::CALL_OPEN, tools::CALL_CLOSE]);
        // Harmony carries its own calls, whatever else the template holds.
        let harmony = ChatFeatures::of("<|channel|><|message|><|tool_call|>", None, None);
        assert_eq!(harmony.syntax, None);
    }
}
