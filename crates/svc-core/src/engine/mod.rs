//! The Engine boundary: what the server asks of a model.
//!
//! An engine offers the capabilities its model has (see [`capability`]):
//! generation, embeddings, reranking, transcription, speech. It gets
//! requests that were already validated and answers with typed results
//! (a generation with a stream of events). It never sees HTTP or JSON
//! bodies; the server never sees tokens. Dropping a stream cancels the
//! generation.

mod capability;

pub use capability::{Capability, Embedder, Engine, Generator, Reranker, Speaker, Transcriber};

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde_json::Value;
use thiserror::Error;

/// A validated, typed generation request.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    pub messages: Vec<ChatMessage>,
    pub sampling: Sampling,
    /// Cap on completion tokens; `None` means what is left of the context.
    pub max_tokens: Option<u32>,
    /// Sequences that end the reply; none of them appears in the output.
    pub stop: Vec<String>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoiceSpec,
    pub output: OutputFormat,
    /// Whether the reply's reasoning is wanted: the model id asked for it
    /// (`svc-thinking`), or the request's effort did (see
    /// [`ReasoningEffort`]). Off for a plain model id unless the client
    /// asked; off when the client set the effort to `none` or `minimal`.
    pub reasoning: bool,
    /// How hard the model should think, as the client said it (chat's
    /// `reasoning_effort`, Responses' `reasoning.effort`, Messages'
    /// `thinking`). `None`: the client did not say, and the engine uses
    /// its model's own default.
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Whether the caller reads the reply as it is generated. When false it
    /// waits for the whole reply, so an engine may produce it in one piece
    /// (an upstream is then asked for one body instead of a stream).
    pub stream: bool,
    /// `None`: no log probabilities. `Some(k)`: each generated token's log
    /// probability and the `k` (0 to 20) most likely alternatives, as
    /// [`EngineEvent::Logprobs`].
    pub logprobs: Option<u8>,
    /// How many replies to generate for the same messages (at least 1); the
    /// events of reply `i > 0` follow an [`EngineEvent::Choice`]`(i)`, and
    /// the replies' events may interleave. An engine that cannot serve this
    /// many refuses with `InvalidRequest` naming `n`.
    pub n: u32,
    /// Who asks: the id of the API key (or of the account signed in). An
    /// engine that runs requests side by side may bound the share of its
    /// capacity one client holds at once (the embedded engine's
    /// `slots_per_client`); `None` bounds only this request's `n`.
    pub client: Option<String>,
    /// Work nobody waits on (a batch's line): an engine that queues runs
    /// it only with capacity interactive requests leave (the embedded
    /// engine: in at most half its slots, and never ahead of a waiting
    /// interactive request).
    pub background: bool,
    /// `Some` for a legacy text completion (`POST /v1/completions`): text
    /// to continue as it is, without the chat template. `messages` and
    /// `tools` are then empty, `output` is text and `reasoning` is off.
    pub prompt: Option<TextPrompt>,
}

/// How much reasoning a request asks for: OpenAI's `reasoning_effort`
/// values, which the other dialects map onto.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    /// No reasoning.
    None,
    /// As little as the model allows (no reasoning where it can skip it).
    Minimal,
    Low,
    Medium,
    High,
}

impl ReasoningEffort {
    /// Every value, least effort first.
    pub const ALL: [ReasoningEffort; 5] = [
        ReasoningEffort::None,
        ReasoningEffort::Minimal,
        ReasoningEffort::Low,
        ReasoningEffort::Medium,
        ReasoningEffort::High,
    ];

    /// The wire name (`none`, `minimal`, `low`, `medium`, `high`).
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }

    /// The value of a wire name; `None` for any other text.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == name)
    }

    /// Whether this effort asks for reasoning at all: `low`, `medium` and
    /// `high` do; `none` and `minimal` ask for a reply without it.
    pub fn thinks(self) -> bool {
        !matches!(self, ReasoningEffort::None | ReasoningEffort::Minimal)
    }
}

/// The prompt of a legacy text completion.
#[derive(Debug, Clone, PartialEq)]
pub struct TextPrompt {
    /// The text to continue (the part before the gap when `suffix` is set).
    pub text: String,
    /// Fill in the middle: the text that follows the gap. An engine whose
    /// model has no fill-in-the-middle tokens refuses it with
    /// `InvalidRequest` naming `suffix`.
    pub suffix: Option<String>,
    /// Score the prompt itself (`echo` with `logprobs`): its tokens' log
    /// probabilities, each given the tokens before it, come first as
    /// [`EngineEvent::PromptLogprobs`] with `logprobs`' alternatives, and
    /// `max_tokens` may then be 0 (the prompt scored, nothing generated).
    /// An engine that cannot refuses it with `InvalidRequest` naming
    /// `logprobs`.
    pub score: bool,
}

impl Default for GenerateRequest {
    /// No messages, default sampling, no limits, tools or format: one reply
    /// in one piece.
    fn default() -> Self {
        GenerateRequest {
            messages: Vec::new(),
            sampling: Sampling::default(),
            max_tokens: None,
            stop: Vec::new(),
            tools: Vec::new(),
            tool_choice: ToolChoiceSpec::Auto,
            output: OutputFormat::Text,
            reasoning: false,
            reasoning_effort: None,
            stream: false,
            logprobs: None,
            n: 1,
            client: None,
            background: false,
            prompt: None,
        }
    }
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatMessage {
    System(String),
    User(String),
    /// A user message with images: its text and images in order. A user
    /// message without images is always [`ChatMessage::User`].
    UserParts(Vec<UserPart>),
    Assistant {
        content: Option<String>,
        tool_calls: Vec<ToolCallSpec>,
        /// The reasoning the model wrote before this turn's content, as the
        /// client sends it back (chat's `reasoning_content`, Responses'
        /// `reasoning` items, Messages' `thinking` blocks); `None` when the
        /// client sent none.
        reasoning: Option<String>,
    },
    Tool {
        tool_call_id: String,
        content: String,
    },
}

/// A piece of a user message with images.
#[derive(Debug, Clone, PartialEq)]
pub enum UserPart {
    Text(String),
    Image(ImageInput),
}

/// An image a request gives, by reference: svc passes it on and never
/// fetches it.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageInput {
    /// An `https:` or `http:` URL, or a `data:image/...;base64,` URI.
    pub url: String,
    /// `auto`, `low` or `high`, when the request said.
    pub detail: Option<String>,
    /// The request field that gave it (`messages[0].content[1]`, `input[0].content[1]`,
    /// `messages[0].content[1]` in Anthropic's form), so that an engine that
    /// takes no images names it when it refuses.
    pub param: String,
}

/// Prompt tokens an image is estimated at where the engine cannot count
/// them (a 1024-pixel square image at OpenAI's high detail).
pub const IMAGE_TOKEN_ESTIMATE: u64 = 765;

impl ChatMessage {
    /// The images of the message, in order.
    pub fn images(&self) -> impl Iterator<Item = &ImageInput> {
        let parts: &[UserPart] = match self {
            ChatMessage::UserParts(parts) => parts,
            _ => &[],
        };
        parts.iter().filter_map(|p| match p {
            UserPart::Image(image) => Some(image),
            UserPart::Text(_) => None,
        })
    }

    /// The message's text, with its images left out.
    pub fn user_text(parts: &[UserPart]) -> String {
        parts
            .iter()
            .filter_map(|p| match p {
                UserPart::Text(text) => Some(text.as_str()),
                UserPart::Image(_) => None,
            })
            .collect()
    }

    /// Bytes of text in the message: content, tool call ids, names and
    /// arguments (not images).
    pub fn text_bytes(&self) -> usize {
        match self {
            ChatMessage::System(text) | ChatMessage::User(text) => text.len(),
            ChatMessage::UserParts(parts) => parts
                .iter()
                .map(|p| match p {
                    UserPart::Text(text) => text.len(),
                    UserPart::Image(_) => 0,
                })
                .sum(),
            ChatMessage::Assistant {
                content,
                tool_calls,
                reasoning,
            } => {
                content.as_ref().map_or(0, String::len)
                    + reasoning.as_ref().map_or(0, String::len)
                    + tool_calls
                        .iter()
                        .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                        .sum::<usize>()
            }
            ChatMessage::Tool {
                tool_call_id,
                content,
            } => tool_call_id.len() + content.len(),
        }
    }
}

/// Sampling settings, already range-checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// 0 means greedy.
    pub temperature: f32,
    pub top_p: f32,
    /// Sample only among the `top_k` most likely tokens; 0 means no limit.
    pub top_k: u32,
    pub seed: Option<u64>,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 0.7,
            top_p: 1.0,
            top_k: 0,
            seed: None,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
        }
    }
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments (an object schema).
    pub parameters: Value,
}

/// A call the assistant made earlier in the conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallSpec {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum ToolChoiceSpec {
    None,
    #[default]
    Auto,
    Required,
    Function(String),
}

/// The shape the reply must take.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum OutputFormat {
    #[default]
    Text,
    JsonObject,
    JsonSchema {
        name: String,
        schema: Value,
    },
}

/// What an engine yields, in order: deltas, then exactly one `Finish`.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineEvent {
    /// New reply text (never a split UTF-8 character).
    Text(String),
    /// New reasoning text, all of it before the first `Text`.
    Reasoning(String),
    /// A piece of a tool call.
    ToolCall(ToolCallChunk),
    /// The log probabilities of the tokens of the `Text` event that follows
    /// (only when the request asked for them). A token goes with the text
    /// that holds its first byte; tokens that make no reply text (reasoning,
    /// tool calls, a stop sequence, the end of turn) are not reported.
    Logprobs(Vec<TokenLogprob>),
    /// The prompt's own tokens, scored (a text prompt's `score`): sent once,
    /// before the reply's first event.
    PromptLogprobs(Vec<PromptLogprob>),
    /// The events that follow, up to the next `Choice`, belong to reply
    /// `index` of a request with `n > 1`; before the first, to reply 0.
    Choice(u32),
    /// The end (of the current reply when `n > 1`: one per reply), with why
    /// and how many tokens were used. With `n > 1` the prompt's tokens are
    /// counted in reply 0's usage only, so the sum over replies is the
    /// request's usage.
    Finish {
        reason: FinishReason,
        usage: TokenUsage,
    },
}

/// One generated token's log probability, with the most likely alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
    /// The token's UTF-8 bytes (a token may hold part of a character).
    pub bytes: Vec<u8>,
    /// The most likely tokens at this position, most likely first.
    pub top: Vec<TopLogprob>,
}

/// One token of a scored prompt: its log probability given the tokens
/// before it, with the most likely alternatives there. The prompt's first
/// token has none (`logprob` is `None`, `top` empty), as in OpenAI's
/// `echo`; a BOS token the model adds is not listed (it is not the
/// prompt's text).
#[derive(Debug, Clone, PartialEq)]
pub struct PromptLogprob {
    pub token: String,
    /// The token's UTF-8 bytes (a token may hold part of a character).
    pub bytes: Vec<u8>,
    pub logprob: Option<f32>,
    /// The most likely tokens at this position, most likely first.
    pub top: Vec<TopLogprob>,
}

/// An alternative token at one position.
#[derive(Debug, Clone, PartialEq)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// A piece of the tool call at `index`: the first piece carries id and name.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallChunk {
    pub index: u32,
    pub id: Option<String>,
    pub name: Option<String>,
    pub arguments: String,
}

/// Why generation ended. The engines' word for it: each dialect says it in
/// its own (`stop`, `length`, `tool_calls` in OpenAI's; `end_turn`,
/// `max_tokens`, `tool_use` in Anthropic's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The reply ended, or hit a stop sequence.
    Stop,
    /// The token cap (or the context) was reached.
    Length,
    /// The model called tools.
    ToolCalls,
}

impl FinishReason {
    /// OpenAI's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
        }
    }
}

/// Real token counts of one generation, and what an audio model's work
/// is counted in instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenUsage {
    pub prompt_tokens: u64,
    /// Of `prompt_tokens`, those not computed again: a prefix whose KV
    /// cells the engine kept from an earlier request (or, through an
    /// upstream, what it reports as cached).
    pub cached_tokens: u64,
    pub completion_tokens: u64,
    /// Seconds of audio transcribed or translated, rounded up.
    pub audio_seconds: u64,
    /// Characters of text spoken (speech synthesis).
    pub characters: u64,
}

impl TokenUsage {
    /// `prompt_tokens` read, nothing generated (embeddings, rerank).
    pub fn prompt_only(prompt_tokens: u64) -> Self {
        TokenUsage {
            prompt_tokens,
            ..TokenUsage::default()
        }
    }

    /// Adds `more` (another pass's or reply's counts), saturating.
    pub fn add(&mut self, more: TokenUsage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(more.prompt_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(more.cached_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(more.completion_tokens);
        self.audio_seconds = self.audio_seconds.saturating_add(more.audio_seconds);
        self.characters = self.characters.saturating_add(more.characters);
    }

    /// Prompt tokens that were computed (not cached).
    pub fn uncached_prompt_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_sub(self.cached_tokens)
    }
}

/// Failures an engine reports, before or during the stream.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum EngineError {
    #[error(
        "this model's maximum context length is {context} tokens, but the messages use {prompt_tokens} tokens"
    )]
    ContextLengthExceeded { prompt_tokens: u64, context: u64 },
    #[error("{message}")]
    InvalidRequest {
        param: Option<String>,
        message: String,
    },
    #[error("the model is overloaded: {0}")]
    Overloaded(String),
    #[error("the model is not available: {0}")]
    Unavailable(String),
    /// An upstream engine sent something that is not a reply (HTTP 502).
    #[error("the upstream engine failed: {0}")]
    BadGateway(String),
    /// An upstream engine did not answer in time (HTTP 504).
    #[error("the upstream engine did not answer in time: {0}")]
    GatewayTimeout(String),
    #[error("engine failure: {0}")]
    Internal(String),
}

/// The events of one generation.
pub type EventStream = BoxStream<'static, Result<EngineEvent, EngineError>>;

/// A validated embeddings request: the inputs to turn into vectors.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EmbedRequest {
    pub inputs: Vec<EmbedInput>,
    /// Length of the vectors wanted; `None` is the model's own. An engine
    /// whose model cannot shorten its vectors refuses another length with
    /// `InvalidRequest` naming `dimensions`.
    pub dimensions: Option<u32>,
    /// Who asks (the API key's id), as in [`GenerateRequest::client`].
    pub client: Option<String>,
    /// Work nobody waits on, as in [`GenerateRequest::background`]: the
    /// embedded embedder encodes it only in batches no interactive input
    /// waits for.
    pub background: bool,
}

/// One input of an embeddings request.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbedInput {
    Text(String),
    /// Token ids of the model's vocabulary.
    Tokens(Vec<u32>),
}

impl EmbedInput {
    /// A token per 4 bytes of text, rounded up; token inputs their length.
    pub fn estimate_tokens(&self) -> u64 {
        match self {
            EmbedInput::Text(text) => text.len().div_ceil(4) as u64,
            EmbedInput::Tokens(tokens) => tokens.len() as u64,
        }
    }
}

/// The vectors of an embeddings request, one per input in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Embeddings {
    pub vectors: Vec<Vec<f32>>,
    /// Tokens of all inputs together, as the model counted them.
    pub prompt_tokens: u64,
}

/// A validated rerank request: documents to score against a query.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RerankRequest {
    pub query: String,
    /// The documents' texts, in the request's order.
    pub documents: Vec<String>,
    /// Who asks (the API key's id), as in [`GenerateRequest::client`].
    pub client: Option<String>,
    /// Work nobody waits on, as in [`GenerateRequest::background`].
    pub background: bool,
}

impl RerankRequest {
    /// A token per 4 bytes of the query, counted once per document, and of
    /// each document, rounded up: what a cross-encoder reads.
    pub fn estimate_tokens(&self) -> u64 {
        let query = self.query.len().div_ceil(4) as u64;
        self.documents
            .iter()
            .map(|d| query + d.len().div_ceil(4) as u64)
            .sum()
    }
}

/// The scores of a rerank request: one per document, in the request's
/// order (the server sorts them).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reranked {
    /// Each document's relevance to the query; higher is more relevant.
    pub scores: Vec<f32>,
    /// Tokens read, as the model counted them (query and document pairs).
    pub prompt_tokens: u64,
}

/// An uploaded audio file, kept on disk while a request needs it (never
/// whole in memory): the server writes it, an engine reads it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AudioFile {
    pub path: std::path::PathBuf,
    /// The client's name for it (its extension tells most servers the
    /// format).
    pub filename: String,
    /// The part's `Content-Type`, when the client sent one.
    pub content_type: Option<String>,
    pub bytes: u64,
    /// Its length, when the server could read it from the file's header
    /// (WAV); else the engine's answer says it.
    pub seconds: Option<f64>,
}

/// A validated transcription (or translation into English) request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TranscribeRequest {
    pub audio: AudioFile,
    /// Into English (`/v1/audio/translations`) rather than in the spoken
    /// language.
    pub translate: bool,
    /// The form's other fields, checked, as the client sent them
    /// (`language`, `prompt`, `response_format`, `temperature`,
    /// `timestamp_granularities[]`, ...), in order; `model` is not among
    /// them (an engine names its own).
    pub fields: Vec<(String, String)>,
    /// `response_format`: `json` (the default), `text`, `srt`,
    /// `verbose_json` or `vtt`.
    pub response_format: String,
    /// Who asks (the API key's id), as in [`GenerateRequest::client`].
    pub client: Option<String>,
}

/// A transcription as the model wrote it, in the format asked for.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Transcript {
    pub body: bytes::Bytes,
    pub content_type: String,
    /// Seconds of audio it covers, when the model said (`usage.seconds`,
    /// `duration`, or the last cue of subtitles).
    pub seconds: Option<f64>,
}

/// A validated speech synthesis request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SpeechRequest {
    /// The text to speak.
    pub input: String,
    pub voice: String,
    /// `mp3` (the default), `opus`, `aac`, `flac`, `wav` or `pcm`.
    pub response_format: String,
    pub speed: Option<f64>,
    pub instructions: Option<String>,
    /// `audio` (bytes as they come) or `sse` (events of base64 chunks).
    pub stream_format: Option<String>,
    /// Who asks (the API key's id), as in [`GenerateRequest::client`].
    pub client: Option<String>,
}

/// Speech being synthesized: its media type, and its bytes as they come.
pub struct Speech {
    pub content_type: String,
    pub audio: BoxStream<'static, Result<bytes::Bytes, EngineError>>,
}

impl std::fmt::Debug for Speech {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Speech")
            .field("content_type", &self.content_type)
            .finish_non_exhaustive()
    }
}

/// A local model that is loaded and unloaded while the server runs.
#[async_trait]
pub trait Residence: Send + Sync {
    /// Loads the model now (or waits for the load under way), up to the
    /// load timeout; an error says why it is not loaded.
    async fn load(&self) -> Result<(), EngineError>;

    /// Unloads the model: now when no request uses it, else as soon as the
    /// last running request ends; with `force`, now, ending the running
    /// requests with an error.
    fn unload(&self, force: bool) -> Unload;

    /// Where the model stands now.
    fn residency(&self) -> Residency;
}

/// What [`Residence::unload`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unload {
    /// It was not loaded (nor loading).
    NotLoaded,
    /// It is unloaded now.
    Unloaded,
    /// Requests are running on it: it is unloaded when the last one ends.
    WhenIdle,
}

/// Whether a local model is loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ResidencyState {
    #[default]
    Unloaded,
    Loading,
    Loaded,
}

impl ResidencyState {
    /// `unloaded`, `loading`, `loaded`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResidencyState::Unloaded => "unloaded",
            ResidencyState::Loading => "loading",
            ResidencyState::Loaded => "loaded",
        }
    }
}

/// Where a local model stands, and what happened to it since start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Residency {
    pub state: ResidencyState,
    /// Host memory it holds now (weights, KV cells, saved prefixes); 0
    /// when unloaded.
    pub memory_bytes: u64,
    /// How long it stays loaded once idle; `None`: forever (pinned, never
    /// unloaded to make room).
    pub keep_alive: Option<std::time::Duration>,
    /// Loads that ended with the model loaded.
    pub loads: u64,
    /// Loads that failed.
    pub load_failures: u64,
    /// Seconds all loads took, together.
    pub load_seconds: f64,
    /// Unloads to make room for another model.
    pub evictions: u64,
    /// Unloads after `keep_alive` idle, or asked for through the admin API.
    pub unloads: u64,
}

/// A token per 4 bytes of the messages' text (contents, tool call ids,
/// names and arguments) and the tools' names, descriptions and schemas,
/// rounded up, plus 4 tokens of markup a message: what
/// [`Engine::count_tokens`] says for engines that cannot tokenize, and the
/// prompt's usage when an upstream reports none.
pub fn estimate_tokens(request: &GenerateRequest) -> u64 {
    let text: usize = request.messages.iter().map(ChatMessage::text_bytes).sum();
    let tools: usize = request
        .tools
        .iter()
        .map(|tool| {
            tool.name.len()
                + tool.description.as_ref().map_or(0, String::len)
                + tool.parameters.to_string().len()
        })
        .sum();
    let prompt = request.prompt.as_ref().map_or(0, |p| {
        p.text.len() + p.suffix.as_ref().map_or(0, String::len)
    });
    let images = request
        .messages
        .iter()
        .flat_map(ChatMessage::images)
        .count() as u64;
    (text + tools + prompt).div_ceil(4) as u64
        + 4 * request.messages.len() as u64
        + IMAGE_TOKEN_ESTIMATE * images
}

/// The first image of `request`, refused by an engine that takes none:
/// `InvalidRequest` naming the field that gave it.
pub fn refuse_images(request: &GenerateRequest) -> Result<(), EngineError> {
    match request.messages.iter().flat_map(ChatMessage::images).next() {
        None => Ok(()),
        Some(image) => Err(EngineError::InvalidRequest {
            param: Some(image.param.clone()),
            message: "this model does not take images (it has no vision); send text, or use a model served by an upstream engine that reads images".into(),
        }),
    }
}

/// A text prompt to score (`echo` with `logprobs`), refused by an engine
/// that cannot: `InvalidRequest` naming `logprobs`.
pub fn refuse_prompt_scoring(request: &GenerateRequest) -> Result<(), EngineError> {
    if request.prompt.as_ref().is_some_and(|p| p.score) {
        return Err(EngineError::InvalidRequest {
            param: Some("logprobs".into()),
            message: "this model does not score prompts (logprobs with echo asks for the prompt's own log probabilities); ask for one or the other".into(),
        });
    }
    Ok(())
}

/// An engine's load and health at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineStatus {
    /// Requests waiting for the engine to take them.
    pub queued: u64,
    /// Requests being generated now.
    pub running: u64,
    /// Upstream endpoints, for engines that route to others.
    pub endpoints: Vec<EndpointStatus>,
    /// The prompt prefix cache, for engines that keep one.
    pub prefix_cache: Option<PrefixCacheStatus>,
    /// Host memory the engine's model holds now (weights, KV cells, saved
    /// prefixes), for engines that run one.
    pub memory_bytes: Option<u64>,
    /// A model loaded on demand: whether it is loaded, and its loads.
    pub residency: Option<Residency>,
}

/// What an engine's prompt prefix cache did since it started, and holds now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrefixCacheStatus {
    /// Prompt tokens the model evaluated.
    pub evaluated_tokens: u64,
    /// Prompt tokens not evaluated because their KV cells were reused.
    pub reused_tokens: u64,
    /// Bytes of host memory holding saved prefixes now, with the copies of
    /// suspended sequences (the same budget).
    pub host_bytes: u64,
    /// The most host memory saved prefixes and suspended sequences' copies
    /// may take together.
    pub host_limit_bytes: u64,
    /// Saved prefixes held now.
    pub host_entries: u64,
    /// Prefixes saved to host memory.
    pub host_saves: u64,
    /// Prefixes restored from host memory.
    pub host_restores: u64,
    /// Saved prefixes dropped to make room for newer ones.
    pub host_evictions: u64,
}

/// One upstream endpoint's state.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointStatus {
    /// The endpoint's base URL (no credentials).
    pub url: String,
    /// Whether the engine currently sends it requests.
    pub healthy: bool,
    /// Requests in flight to it.
    pub outstanding: u64,
    /// Requests sent to it since start, by why: `prefix` (it served the
    /// prompt's prefix before), `fallback` (another endpoint did, but was
    /// down or busy), `load` (no prefix remembered: least outstanding).
    pub routed: Vec<(&'static str, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_efforts_read_and_write_openais_names() {
        for effort in ReasoningEffort::ALL {
            assert_eq!(ReasoningEffort::parse(effort.as_str()), Some(effort));
            assert_eq!(
                serde_json::to_value(effort).unwrap(),
                Value::from(effort.as_str())
            );
            assert_eq!(
                serde_json::from_value::<ReasoningEffort>(Value::from(effort.as_str())).unwrap(),
                effort
            );
        }
        assert_eq!(ReasoningEffort::parse("High"), None);
        assert_eq!(ReasoningEffort::parse("xhigh"), None);
        let thinking: Vec<_> = ReasoningEffort::ALL
            .into_iter()
            .filter(|e| e.thinks())
            .collect();
        assert_eq!(
            thinking,
            [
                ReasoningEffort::Low,
                ReasoningEffort::Medium,
                ReasoningEffort::High
            ]
        );
    }

    #[test]
    fn an_assistant_turns_reasoning_counts_as_text() {
        let turn = ChatMessage::Assistant {
            content: Some("Hello.".into()),
            tool_calls: Vec::new(),
            reasoning: Some("Greet.".into()),
        };
        assert_eq!(turn.text_bytes(), "Hello.".len() + "Greet.".len());
    }
}
