//! A scripted engine: deterministic replies, delays, failures and tool calls
//! on demand, with a [`Probe`] that counts what happened.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use svc_core::engine::{TokenLogprob, TopLogprob};
use svc_core::{
    ChatMessage, EmbedInput, EmbedRequest, Embedder, Embeddings, Engine, EngineError, EngineEvent,
    EventStream, FinishReason, GenerateRequest, Generator, RerankRequest, Reranked, Reranker,
    Speaker, TokenUsage, ToolCallChunk, Transcriber,
};
use svc_server::{ModelRegistry, ModelRoute};

/// What the fake engine does with each request.
#[derive(Debug, Clone)]
pub enum Script {
    /// Replies `You said: <last user message>` word by word, waiting
    /// `delay` before each word. With reasoning asked, thinks first. With
    /// `n > 1`, replies so `n` times, one choice after the other; with
    /// `logprobs`, each word is one token of log probability `-0.5`, its
    /// alternatives the word itself then `alt1`, `alt2`, ... at `-1`, `-2`, ...
    /// A text prompt is echoed as a user message would be; a `suffix` is
    /// refused (naming it), as by a model without fill-in-the-middle tokens,
    /// and a prompt to score too (naming `logprobs`),
    /// and so is an image (naming its part), as by a model without vision.
    Echo { delay: Duration },
    /// Sends `words` words of the echo, then fails.
    FailAfter { words: usize },
    /// Calls the first tool with `{"city":"Paris"}`, in two pieces.
    CallTool,
    /// An agent: calls the first tool offered, each string property of
    /// its schema given the last user message, in two pieces; once the
    /// last message is a tool's result, replies `The tool said: <result>`
    /// word by word (and echoes, as [`Script::Echo`], when no tool is
    /// offered).
    Agent,
    /// Refuses every prompt as too long for a 16-token context.
    ContextTooSmall,
    /// Refuses every request with this error before any event (as an
    /// upstream whose endpoints all failed).
    Refuse(EngineError),
}

/// Counters shared between a test and the engine.
#[derive(Debug, Default)]
pub struct Probe {
    /// Generations started (embeddings requests too, on the embedder).
    pub started: AtomicUsize,
    /// Of those, the ones sent as background work (a batch's lines).
    pub background: AtomicUsize,
    /// Words sent so far, over all generations.
    pub words_sent: AtomicUsize,
    /// Generations whose stream was dropped before it finished.
    pub cancelled: AtomicUsize,
    /// The request of the last generation started.
    pub last_request: Mutex<Option<GenerateRequest>>,
}

impl Probe {
    /// The request of the last generation started (as the engine got it:
    /// validated and routed), if any.
    pub fn last_request(&self) -> Option<GenerateRequest> {
        self.last_request.lock().ok().and_then(|last| last.clone())
    }
}

/// The scripted engine. It counts a prompt token a word plus one a
/// message, and `template_tokens` more for the markup of a chat template
/// (as a real model's template adds), in its usage and in `count_tokens`
/// alike, as a tokenizing engine does.
pub struct FakeEngine {
    script: Script,
    probe: Arc<Probe>,
    template_tokens: u64,
    prefix_cache: bool,
    fingerprint: Option<String>,
}

impl FakeEngine {
    pub fn new(script: Script, probe: Arc<Probe>) -> Self {
        FakeEngine {
            script,
            probe,
            template_tokens: 0,
            prefix_cache: false,
            fingerprint: None,
        }
    }

    /// This engine, naming its numerics `fingerprint` (`system_fingerprint`),
    /// as the embedded engine does.
    pub fn with_fingerprint(self, fingerprint: &str) -> Self {
        FakeEngine {
            fingerprint: Some(fingerprint.to_owned()),
            ..self
        }
    }

    /// This engine, reporting the tokens of every message before the last
    /// as cached (as a prefix cache serves a conversation's earlier turns).
    pub fn with_prefix_cache(self) -> Self {
        FakeEngine {
            prefix_cache: true,
            ..self
        }
    }

    /// This engine, with a chat template of `tokens` tokens a prompt.
    pub fn with_template(self, tokens: u64) -> Self {
        FakeEngine {
            template_tokens: tokens,
            ..self
        }
    }

    fn prompt_tokens(&self, request: &GenerateRequest) -> u64 {
        prompt_tokens(request) + self.template_tokens
    }

    /// What its usage reports: the prompt, with its cached part.
    fn usage(&self, request: &GenerateRequest, completion_tokens: u64) -> TokenUsage {
        let earlier = request.messages.len().saturating_sub(1);
        let cached = if self.prefix_cache && request.prompt.is_none() {
            request.messages[..earlier].iter().map(message_tokens).sum()
        } else {
            0
        };
        TokenUsage {
            prompt_tokens: self.prompt_tokens(request),
            cached_tokens: cached,
            completion_tokens,
            ..TokenUsage::default()
        }
    }
}

/// Counts a generation as cancelled when dropped before `finished` is set.
struct CancelGuard {
    probe: Arc<Probe>,
    finished: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.probe.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The last user message, or a text prompt's text.
fn last_user(request: &GenerateRequest) -> String {
    if let Some(prompt) = &request.prompt {
        return prompt.text.clone();
    }
    request
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            ChatMessage::User(text) => Some(text.clone()),
            ChatMessage::UserParts(parts) => Some(ChatMessage::user_text(parts)),
            _ => None,
        })
        .unwrap_or_default()
}

/// The fake log probability of `word`: `-0.5`, with `top` alternatives.
fn word_logprob(word: &str, top: u8) -> TokenLogprob {
    let alternative = |i: u8| {
        let token = if i == 0 {
            word.to_owned()
        } else {
            format!("alt{i}")
        };
        TopLogprob {
            bytes: token.clone().into_bytes(),
            token,
            logprob: if i == 0 { -0.5 } else { -f32::from(i) },
        }
    };
    TokenLogprob {
        token: word.to_owned(),
        logprob: -0.5,
        bytes: word.as_bytes().to_vec(),
        top: (0..top).map(alternative).collect(),
    }
}

/// Words of `text`, each keeping its trailing space, so they concatenate back.
fn words(text: &str) -> Vec<String> {
    text.split_inclusive(' ').map(str::to_owned).collect()
}

fn prompt_tokens(request: &GenerateRequest) -> u64 {
    if let Some(prompt) = &request.prompt {
        return prompt.text.split_whitespace().count() as u64 + 1;
    }
    request.messages.iter().map(message_tokens).sum()
}

/// A message's tokens: a word each, and one for the message.
/// The call [`Script::Agent`] makes of `tool`: its name, and its schema's
/// string properties each given `text`, as JSON.
fn agent_call(tool: &svc_core::ToolSpec, text: &str) -> (String, String) {
    let mut arguments = serde_json::Map::new();
    if let Some(properties) = tool
        .parameters
        .get("properties")
        .and_then(|p| p.as_object())
    {
        for (name, schema) in properties {
            if schema.get("type").and_then(|t| t.as_str()) == Some("string") {
                arguments.insert(name.clone(), serde_json::Value::String(text.to_owned()));
            }
        }
    }
    (
        tool.name.clone(),
        serde_json::Value::Object(arguments).to_string(),
    )
}

fn message_tokens(message: &ChatMessage) -> u64 {
    let words = match message {
        ChatMessage::System(t) | ChatMessage::User(t) => t.split_whitespace().count(),
        ChatMessage::UserParts(parts) => ChatMessage::user_text(parts).split_whitespace().count(),
        ChatMessage::Assistant { content, .. } => {
            content.as_deref().unwrap_or("").split_whitespace().count()
        }
        ChatMessage::Tool { content, .. } => content.split_whitespace().count(),
    };
    words as u64 + 1
}

#[async_trait]
impl Generator for FakeEngine {
    async fn generate(&self, request: GenerateRequest) -> Result<EventStream, EngineError> {
        let prompt_tokens = self.prompt_tokens(&request);
        if let Script::Refuse(error) = &self.script {
            return Err(error.clone());
        }
        if let Script::ContextTooSmall = self.script {
            return Err(EngineError::ContextLengthExceeded {
                prompt_tokens,
                context: 16,
            });
        }
        svc_core::refuse_images(&request)?;
        svc_core::refuse_prompt_scoring(&request)?;
        if request.prompt.as_ref().is_some_and(|p| p.suffix.is_some()) {
            return Err(EngineError::InvalidRequest {
                param: Some("suffix".into()),
                message: "this model has no fill-in-the-middle tokens".into(),
            });
        }
        self.probe.started.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut last) = self.probe.last_request.lock() {
            *last = Some(request.clone());
        }
        if request.background {
            self.probe.background.fetch_add(1, Ordering::SeqCst);
        }
        let script = self.script.clone();
        let probe = self.probe.clone();
        let after_tool = match request.messages.last() {
            Some(ChatMessage::Tool { content, .. }) => Some(content.clone()),
            _ => None,
        };
        let reply = match (&self.script, &after_tool) {
            (Script::Agent, Some(result)) => words(&format!("The tool said: {result}")),
            _ => words(&format!("You said: {}", last_user(&request))),
        };
        let agent_call = match (&self.script, &after_tool, request.tools.first()) {
            (Script::Agent, None, Some(tool)) => Some(agent_call(tool, &last_user(&request))),
            _ => None,
        };
        let limit = request.max_tokens.map_or(usize::MAX, |n| n as usize);
        let tool = request.tools.first().map(|t| t.name.clone());
        // The prompt's tokens (with their cached part) count in reply 0 only.
        let prompt_usage = self.usage(&request, 0);
        Ok(Box::pin(async_stream::stream! {
            let mut guard = CancelGuard { probe: probe.clone(), finished: false };
            let (delay, fail_after) = match script {
                Script::Echo { delay } => (delay, None),
                Script::FailAfter { words } => (Duration::ZERO, Some(words)),
                Script::CallTool => {
                    let name = tool.unwrap_or_else(|| "none".into());
                    yield Ok(EngineEvent::ToolCall(ToolCallChunk {
                        index: 0, id: Some("call_fake0".into()), name: Some(name), arguments: "{\"city\":".into(),
                    }));
                    yield Ok(EngineEvent::ToolCall(ToolCallChunk {
                        index: 0, id: None, name: None, arguments: "\"Paris\"}".into(),
                    }));
                    guard.finished = true;
                    yield Ok(EngineEvent::Finish {
                        reason: FinishReason::ToolCalls,
                        usage: TokenUsage { completion_tokens: 2, ..prompt_usage },
                    });
                    return;
                }
                Script::Agent => match agent_call {
                    Some((name, arguments)) => {
                        let (head, tail) = arguments.split_at(arguments.len() / 2);
                        yield Ok(EngineEvent::ToolCall(ToolCallChunk {
                            index: 0, id: Some("call_agent0".into()), name: Some(name), arguments: head.into(),
                        }));
                        yield Ok(EngineEvent::ToolCall(ToolCallChunk {
                            index: 0, id: None, name: None, arguments: tail.into(),
                        }));
                        guard.finished = true;
                        yield Ok(EngineEvent::Finish {
                            reason: FinishReason::ToolCalls,
                            usage: TokenUsage { completion_tokens: 2, ..prompt_usage },
                        });
                        return;
                    }
                    None => (Duration::ZERO, None),
                },
                Script::ContextTooSmall | Script::Refuse(_) => unreachable!("refused above"),
            };
            if request.reasoning {
                yield Ok(EngineEvent::Reasoning("Thinking it over. ".into()));
                yield Ok(EngineEvent::Reasoning("Done thinking.".into()));
            }
            let choices = request.n.max(1);
            for choice in 0..choices {
                if choice > 0 {
                    yield Ok(EngineEvent::Choice(choice));
                }
                let mut sent = 0usize;
                for word in &reply {
                    if sent == limit {
                        break;
                    }
                    if fail_after == Some(sent) {
                        guard.finished = true;
                        yield Err(EngineError::Internal("scripted failure".into()));
                        return;
                    }
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    probe.words_sent.fetch_add(1, Ordering::SeqCst);
                    sent += 1;
                    if let Some(top) = request.logprobs {
                        yield Ok(EngineEvent::Logprobs(vec![word_logprob(word, top)]));
                    }
                    yield Ok(EngineEvent::Text(word.clone()));
                }
                let reason = if sent < reply.len() { FinishReason::Length } else { FinishReason::Stop };
                if choice + 1 == choices {
                    guard.finished = true;
                }
                yield Ok(EngineEvent::Finish {
                    reason,
                    usage: TokenUsage {
                        completion_tokens: sent as u64,
                        ..if choice == 0 { prompt_usage } else { TokenUsage::default() }
                    },
                });
            }
        }))
    }

    /// Takes ten words' time of a slow script (as tokenizing a long prompt
    /// takes a while).
    async fn count_tokens(&self, request: &GenerateRequest) -> Result<u64, EngineError> {
        if let Script::Echo { delay } = self.script
            && !delay.is_zero()
        {
            tokio::time::sleep(delay * 10).await;
        }
        Ok(self.prompt_tokens(request))
    }

    /// None: an image is refused, as by a model without vision.
    fn sees_images(&self) -> bool {
        false
    }
}

impl Engine for FakeEngine {
    svc_core::offers!(generator);

    fn name(&self) -> &str {
        "fake"
    }

    fn fingerprint(&self) -> Option<String> {
        self.fingerprint.clone()
    }
}

/// The models a test server serves: `svc` and `svc-thinking` echo at once;
/// `fake-slow` echoes a word every 50 ms; `fake-fail` fails after two words;
/// `fake-tools` calls a tool; `fake-agent` calls the first tool, then
/// answers with its result ([`Script::Agent`]); `fake-tiny` has a 16-token context;
/// `fake-template` echoes at once with a chat template of
/// [`FAKE_TEMPLATE_TOKENS`] tokens; `fake-cached` stands in for the
/// embedded engine: it echoes at once, reports the tokens of the messages
/// before the last as cached ([`FakeEngine::with_prefix_cache`]) and its
/// numerics as [`FAKE_FINGERPRINT`]; `fake-embed` makes embeddings
/// ([`FakeEmbedder`]); `fake-rerank` reranks ([`FakeReranker`]);
/// `fake-speech` transcribes and speaks ([`FakeSpeech`]).
pub fn fake_models(probe: Arc<Probe>) -> ModelRegistry {
    let route_of = |id: &str, engine: FakeEngine, reasoning: bool| ModelRoute {
        id: id.into(),
        engine: Arc::new(engine),
        reasoning,
        created: 1_700_000_000,
        owned_by: "svc".into(),
        default_system_prompt: None,
        fallbacks: svc_server::Fallbacks::default(),
    };
    let route = |id: &str, script: Script, reasoning: bool| {
        route_of(id, FakeEngine::new(script, probe.clone()), reasoning)
    };
    let instant = Script::Echo {
        delay: Duration::ZERO,
    };
    ModelRegistry::new(vec![
        route("svc", instant.clone(), false),
        route("svc-thinking", instant, true),
        route(
            "fake-slow",
            Script::Echo {
                delay: Duration::from_millis(50),
            },
            false,
        ),
        route("fake-fail", Script::FailAfter { words: 2 }, false),
        route("fake-tools", Script::CallTool, false),
        route("fake-agent", Script::Agent, false),
        route("fake-tiny", Script::ContextTooSmall, false),
        route_of(
            "fake-cached",
            FakeEngine::new(
                Script::Echo {
                    delay: Duration::ZERO,
                },
                probe.clone(),
            )
            .with_prefix_cache()
            .with_fingerprint(FAKE_FINGERPRINT),
            false,
        ),
        route_of(
            "fake-template",
            FakeEngine::new(
                Script::Echo {
                    delay: Duration::ZERO,
                },
                probe.clone(),
            )
            .with_template(FAKE_TEMPLATE_TOKENS),
            false,
        ),
        ModelRoute {
            id: "fake-embed".into(),
            engine: Arc::new(FakeEmbedder {
                probe: probe.clone(),
            }),
            reasoning: false,
            created: 1_700_000_000,
            owned_by: "svc".into(),
            default_system_prompt: None,
            fallbacks: svc_server::Fallbacks::default(),
        },
        ModelRoute {
            id: "fake-rerank".into(),
            engine: Arc::new(FakeReranker {
                probe: probe.clone(),
            }),
            reasoning: false,
            created: 1_700_000_000,
            owned_by: "svc".into(),
            default_system_prompt: None,
            fallbacks: svc_server::Fallbacks::default(),
        },
        ModelRoute {
            id: "fake-speech".into(),
            engine: Arc::new(FakeSpeech),
            reasoning: false,
            created: 1_700_000_000,
            owned_by: "svc".into(),
            default_system_prompt: None,
            fallbacks: svc_server::Fallbacks::default(),
        },
    ])
}

/// A scripted audio model: a transcript says what it heard (`<bytes> bytes
/// of <filename>`, as JSON `{"text": ...}` whatever the format) and that
/// the audio lasted a second per 32,000 bytes, rounded up, except in the
/// `text` format, which has no room for a length (as Whisper's servers
/// answer it); speech is the input's bytes, in two pieces, as `audio/mpeg`.
pub struct FakeSpeech;

#[async_trait]
impl Transcriber for FakeSpeech {
    async fn transcribe(
        &self,
        request: svc_core::TranscribeRequest,
    ) -> Result<svc_core::Transcript, EngineError> {
        let heard = std::fs::metadata(&request.audio.path)
            .map_err(|e| EngineError::Internal(format!("the upload is gone: {e}")))?
            .len();
        let text = format!("{heard} bytes of {}", request.audio.filename);
        Ok(svc_core::Transcript {
            body: serde_json::to_vec(&serde_json::json!({"text": text}))
                .unwrap_or_default()
                .into(),
            content_type: "application/json".into(),
            seconds: (request.response_format != "text").then(|| heard.div_ceil(32_000) as f64),
        })
    }
}

#[async_trait]
impl Speaker for FakeSpeech {
    async fn speak(
        &self,
        request: svc_core::SpeechRequest,
    ) -> Result<svc_core::Speech, EngineError> {
        let input = bytes::Bytes::from(request.input.into_bytes());
        let half = input.len() / 2;
        let pieces = vec![Ok(input.slice(..half)), Ok(input.slice(half..))];
        Ok(svc_core::Speech {
            content_type: "audio/mpeg".into(),
            audio: Box::pin(futures::stream::iter(pieces)),
        })
    }
}

impl Engine for FakeSpeech {
    svc_core::offers!(transcriber, speaker);

    fn name(&self) -> &str {
        "fake-speech"
    }
}

/// A scripted reranking model: a document's score is the share of the
/// query's words (lowercase, without punctuation) it holds
/// ([`fake_relevance`]); the tokens it reads are the query's and the
/// document's words plus 3 per document (`[CLS]` and two `[SEP]`). A
/// document of more than [`FAKE_EMBED_MAX_WORDS`] words is refused as too
/// long, naming `documents[i]`.
pub struct FakeReranker {
    probe: Arc<Probe>,
}

/// The lowercase words of `text`, without punctuation.
fn plain_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// `fake-rerank`'s score of `document` for `query`: the share of the
/// query's distinct words the document holds, 0 to 1.
pub fn fake_relevance(query: &str, document: &str) -> f32 {
    let mut wanted = plain_words(query);
    wanted.sort();
    wanted.dedup();
    let held = plain_words(document);
    let found = wanted.iter().filter(|w| held.contains(w)).count();
    found as f32 / wanted.len().max(1) as f32
}

#[async_trait]
impl Reranker for FakeReranker {
    async fn rerank(&self, request: RerankRequest) -> Result<Reranked, EngineError> {
        self.probe.started.fetch_add(1, Ordering::SeqCst);
        if request.background {
            self.probe.background.fetch_add(1, Ordering::SeqCst);
        }
        let query = plain_words(&request.query).len() as u64;
        let mut out = Reranked::default();
        for (i, document) in request.documents.iter().enumerate() {
            let n = plain_words(document).len();
            if n > FAKE_EMBED_MAX_WORDS {
                return Err(EngineError::InvalidRequest {
                    param: Some(format!("documents[{i}]")),
                    message: format!(
                        "documents[{i}] has {n} words; at most {FAKE_EMBED_MAX_WORDS} fit"
                    ),
                });
            }
            out.prompt_tokens += query + n as u64 + 3;
            out.scores.push(fake_relevance(&request.query, document));
        }
        Ok(out)
    }
}

impl Engine for FakeReranker {
    svc_core::offers!(reranker);

    fn name(&self) -> &str {
        "fake-rerank"
    }
}

/// A scripted embedding model: each input's vector is [`fake_vector`] of
/// it, its tokens a word each plus 2 (the `[CLS]`/`[SEP]` a BERT adds);
/// an input of more than [`FAKE_EMBED_MAX_WORDS`] words is refused as too
/// long, naming `input`. Its vectors cannot be shortened.
pub struct FakeEmbedder {
    probe: Arc<Probe>,
}

/// The most words an input to `fake-embed` may have.
pub const FAKE_EMBED_MAX_WORDS: usize = 64;

/// The length of `fake-embed`'s vectors.
pub const FAKE_EMBED_DIMENSIONS: usize = 4;

/// `fake-embed`'s vector of `text`: its bytes, word count, `a`s and
/// length, scaled to length 1.
pub fn fake_vector(text: &str) -> Vec<f32> {
    let raw = [
        text.bytes().map(f32::from).sum::<f32>() / 100.0,
        words(text).len() as f32,
        text.matches('a').count() as f32 + 0.5,
        text.len() as f32,
    ];
    let norm = raw.iter().map(|x| x * x).sum::<f32>().sqrt();
    raw.iter().map(|x| x / norm).collect()
}

#[async_trait]
impl Embedder for FakeEmbedder {
    async fn embed(&self, request: EmbedRequest) -> Result<Embeddings, EngineError> {
        self.probe.started.fetch_add(1, Ordering::SeqCst);
        if request.background {
            self.probe.background.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(d) = request
            .dimensions
            .filter(|&d| d as usize != FAKE_EMBED_DIMENSIONS)
        {
            return Err(EngineError::InvalidRequest {
                param: Some("dimensions".into()),
                message: format!(
                    "this model's vectors have {FAKE_EMBED_DIMENSIONS} dimensions (got {d})"
                ),
            });
        }
        let mut out = Embeddings::default();
        for input in &request.inputs {
            let text = match input {
                EmbedInput::Text(text) => text.clone(),
                EmbedInput::Tokens(ids) => {
                    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
                }
            };
            let n = words(&text).len();
            if n > FAKE_EMBED_MAX_WORDS {
                return Err(EngineError::InvalidRequest {
                    param: Some("input".into()),
                    message: format!(
                        "an input has {} tokens; at most {} fit",
                        n + 2,
                        FAKE_EMBED_MAX_WORDS + 2
                    ),
                });
            }
            out.prompt_tokens += n as u64 + 2;
            out.vectors.push(fake_vector(&text));
        }
        Ok(out)
    }
}

impl Engine for FakeEmbedder {
    svc_core::offers!(embedder);

    fn name(&self) -> &str {
        "fake-embed"
    }
}

/// The prompt tokens `fake-template`'s chat template adds to a prompt.
pub const FAKE_TEMPLATE_TOKENS: u64 = 32;

/// The `system_fingerprint` of `fake-cached`.
pub const FAKE_FINGERPRINT: &str = "fp_fake0c0ffee";
