//! Shaping engine events into the legacy `text_completion` forms: one body,
//! or chunks ending in `data: [DONE]`. A request with several prompts runs
//! one generation per prompt; their events arrive merged, each tagged with
//! its prompt, and choice `i` of prompt `p` is answered as index `p * n + i`.
//! Log probabilities take the legacy shape: four lists, with each token's
//! offset in the choice's text counted in characters.

use std::collections::BTreeMap;
use std::convert::Infallible;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use svc_api::completions::{Completion, CompletionChoice, CompletionLogprobs};
use svc_core::engine::{PromptLogprob, TokenLogprob};
use svc_core::{EngineError, EngineEvent, EventStream, FinishReason, TokenUsage};

use crate::chat::shape::{DONE, error_event, event, usage};
use crate::error::ApiError;

/// What every chunk and the whole body repeat, and how the choices are laid out.
#[derive(Debug)]
pub struct Meta {
    pub id: String,
    pub created: i64,
    pub model: String,
    /// Choices per prompt.
    pub n: u32,
    /// Whether choices carry log probabilities.
    pub logprobs: bool,
    /// How many prompts the request gave.
    pub prompts: usize,
    /// With `echo`, the prompts in order (each choice's text starts with its
    /// own); empty without.
    pub echoed: Vec<String>,
    /// The engine's `system_fingerprint`, when it has one.
    pub fingerprint: Option<String>,
}

impl Meta {
    /// A fresh `cmpl-` id, created now, for `prompts` prompts; `echoed`
    /// holds them when the request asked for `echo`, else nothing.
    pub fn new(model: String, n: u32, logprobs: bool, prompts: usize, echoed: Vec<String>) -> Self {
        Meta {
            id: format!("cmpl-{}", hex::encode(rand::random::<[u8; 12]>())),
            created: svc_core::now(),
            model,
            n: n.max(1),
            logprobs,
            prompts,
            echoed,
            fingerprint: None,
        }
    }

    /// The same, with the engine's `system_fingerprint`.
    pub fn with_fingerprint(mut self, fingerprint: Option<String>) -> Self {
        self.fingerprint = fingerprint;
        self
    }

    fn choices(&self) -> usize {
        self.prompts * self.n as usize
    }

    /// Whether the prompts are scored (`echo` with `logprobs`): each
    /// choice's echoed prompt then comes with its tokens' log probabilities.
    fn scored(&self) -> bool {
        self.logprobs && !self.echoed.is_empty()
    }

    /// The echoed prompt of choice `index` ("" without `echo`).
    fn echoed(&self, index: usize) -> &str {
        self.echoed
            .get(index / self.n as usize)
            .map_or("", String::as_str)
    }
}

/// The prompts' event streams merged as their events come, each event
/// tagged with its prompt's position.
pub type Merged = BoxStream<'static, (usize, Result<EngineEvent, EngineError>)>;

/// Merges one event stream per prompt. Dropping the result drops them all,
/// which stops their generations.
pub fn merge(streams: Vec<EventStream>) -> Merged {
    futures::stream::select_all(
        streams
            .into_iter()
            .enumerate()
            .map(|(p, events)| events.map(move |event| (p, event)).boxed()),
    )
    .boxed()
}

/// One choice as it is built.
#[derive(Default)]
struct Building {
    text: String,
    /// Characters of the choice's text before the next token (the echoed
    /// prompt's included), counted from the tokens' bytes.
    offset: u32,
    logprobs: CompletionLogprobs,
    finish: Option<FinishReason>,
}

impl Building {
    /// Adds the scored prompt's tokens to the legacy lists (before any
    /// generated token's), their offsets counted from the prompt's start;
    /// its first token has no log probability (`null`), as with OpenAI.
    fn add_prompt(&mut self, tokens: Vec<PromptLogprob>) -> CompletionLogprobs {
        let mut added = CompletionLogprobs::default();
        let mut offset = 0u32;
        for t in tokens {
            let top = t.logprob.map(|logprob| {
                let mut top: BTreeMap<String, f32> =
                    t.top.into_iter().map(|a| (a.token, a.logprob)).collect();
                top.entry(t.token.clone()).or_insert(logprob);
                top
            });
            added.tokens.push(t.token);
            added.token_logprobs.push(t.logprob);
            added.top_logprobs.push(top);
            added.text_offset.push(offset);
            offset = offset.saturating_add(chars(&t.bytes));
        }
        self.extend(&added);
        added
    }

    /// Adds `tokens` (which precede the text they make) to the legacy lists.
    fn add_tokens(&mut self, tokens: Vec<TokenLogprob>) -> CompletionLogprobs {
        let mut added = CompletionLogprobs::default();
        for t in tokens {
            let mut top: BTreeMap<String, f32> =
                t.top.into_iter().map(|a| (a.token, a.logprob)).collect();
            top.entry(t.token.clone()).or_insert(t.logprob);
            added.tokens.push(t.token);
            added.token_logprobs.push(Some(t.logprob));
            added.top_logprobs.push(Some(top));
            added.text_offset.push(self.offset);
            self.offset = self.offset.saturating_add(chars(&t.bytes));
        }
        self.extend(&added);
        added
    }

    /// Appends `added` to the choice's lists.
    fn extend(&mut self, added: &CompletionLogprobs) {
        let all = &mut self.logprobs;
        all.tokens.extend(added.tokens.iter().cloned());
        all.token_logprobs
            .extend(added.token_logprobs.iter().copied());
        all.top_logprobs.extend(added.top_logprobs.iter().cloned());
        all.text_offset.extend(added.text_offset.iter().copied());
    }
}

/// Characters a token's bytes start: one per byte that does not continue one.
fn chars(bytes: &[u8]) -> u32 {
    bytes.iter().filter(|&&b| b & 0xC0 != 0x80).count() as u32
}

/// Which choice each prompt's events are about now, and the choices' state.
struct Choices {
    n: u32,
    /// Per prompt: its choice the events that come now belong to.
    current: Vec<u32>,
    built: Vec<Building>,
    /// Log probabilities waiting for the text they go with, per choice.
    held: Vec<Vec<TokenLogprob>>,
}

impl Choices {
    fn new(meta: &Meta) -> Self {
        let built = (0..meta.choices())
            .map(|i| Building {
                offset: meta.echoed(i).chars().count() as u32,
                ..Building::default()
            })
            .collect();
        Choices {
            n: meta.n,
            current: vec![0; meta.prompts],
            built,
            held: (0..meta.choices()).map(|_| Vec::new()).collect(),
        }
    }

    /// The overall index of the choice prompt `p`'s next event is about.
    fn index(&self, p: usize) -> usize {
        p * self.n as usize + self.current[p] as usize
    }

    /// Notes a switch of prompt `p`'s choice; an index past `n` is the engine's fault.
    fn switch(&mut self, p: usize, choice: u32) -> Result<(), ApiError> {
        if choice >= self.n {
            return Err(ApiError::Internal(format!(
                "choice index {choice} out of range"
            )));
        }
        self.current[p] = choice;
        Ok(())
    }
}

/// Collects every prompt's generations into one `text_completion`, the
/// usage summed over them.
pub async fn collect(meta: Meta, mut events: Merged) -> Result<Completion, ApiError> {
    let mut choices = Choices::new(&meta);
    let total = meta.choices();
    let mut finished = 0usize;
    let mut used = TokenUsage::default();
    while finished < total {
        let (p, event) = match events.next().await {
            Some((p, Ok(event))) => (p, event),
            Some((_, Err(e))) => return Err(e.into()),
            None => {
                return Err(ApiError::Internal(
                    "engine stream ended without finishing".into(),
                ));
            }
        };
        let index = choices.index(p);
        match event {
            EngineEvent::Choice(i) => choices.switch(p, i)?,
            EngineEvent::Text(text) => choices.built[index].text.push_str(&text),
            EngineEvent::Logprobs(tokens) => {
                choices.built[index].add_tokens(tokens);
            }
            EngineEvent::PromptLogprobs(tokens) => {
                choices.built[index].add_prompt(tokens);
            }
            EngineEvent::Finish { reason, usage } => {
                if choices.built[index].finish.replace(reason).is_none() {
                    finished += 1;
                }
                used.add(usage);
            }
            // A text completion has no reasoning or tool calls.
            EngineEvent::Reasoning(_) | EngineEvent::ToolCall(_) => {}
        }
    }
    let choices = choices
        .built
        .into_iter()
        .enumerate()
        .map(|(index, b)| CompletionChoice {
            text: format!("{}{}", meta.echoed(index), b.text),
            index: index as u32,
            logprobs: meta.logprobs.then_some(b.logprobs),
            finish_reason: Some(wire(b.finish.unwrap_or(FinishReason::Stop))),
        })
        .collect();
    Ok(Completion {
        id: meta.id,
        object: "text_completion".into(),
        created: meta.created,
        model: meta.model,
        system_fingerprint: meta.fingerprint,
        choices,
        usage: Some(usage(used)),
    })
}

/// The SSE byte stream: with `echo`, a first chunk of each choice with its
/// prompt; then each piece of text as a chunk of its choice (with the
/// tokens that make it, when log probabilities were asked for); a chunk
/// with each choice's `finish_reason`; the usage of all (when asked) and
/// `[DONE]`. An error after the start is a last `data: {"error":…}` frame
/// and no `[DONE]`. Dropping the stream drops `events`, which stops the
/// generations.
pub fn sse(
    meta: Meta,
    include_usage: bool,
    mut events: Merged,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let request_id = crate::scoped::request_id();
    let chunk = {
        let (id, created, model) = (meta.id.clone(), meta.created, meta.model.clone());
        let fingerprint = meta.fingerprint.clone();
        move |index: usize,
              text: String,
              logprobs: Option<CompletionLogprobs>,
              finish: Option<FinishReason>| Completion {
            id: id.clone(),
            object: "text_completion".into(),
            created,
            model: model.clone(),
            system_fingerprint: fingerprint.clone(),
            choices: vec![CompletionChoice {
                text,
                index: index as u32,
                logprobs,
                finish_reason: finish.map(wire),
            }],
            usage: None,
        }
    };
    async_stream::stream! {
        let mut choices = Choices::new(&meta);
        let total = meta.choices();
        // A scored prompt's echo waits for its scores.
        if !meta.echoed.is_empty() && !meta.scored() {
            for index in 0..total {
                yield Ok(event(&chunk(index, meta.echoed(index).to_owned(), None, None)));
            }
        }
        let mut finished = 0usize;
        let mut used = TokenUsage::default();
        loop {
            let (p, event_) = match events.next().await {
                Some(next) => next,
                None => {
                    let err = ApiError::Internal("engine stream ended without finishing".into());
                    yield Ok(error_event(request_id.as_deref(), err));
                    break;
                }
            };
            let index = choices.index(p);
            match event_ {
                Ok(EngineEvent::Choice(i)) => {
                    if let Err(err) = choices.switch(p, i) {
                        yield Ok(error_event(request_id.as_deref(), err));
                        break;
                    }
                }
                Ok(EngineEvent::Logprobs(tokens)) => choices.held[index].extend(tokens),
                Ok(EngineEvent::PromptLogprobs(tokens)) => {
                    let logprobs = choices.built[index].add_prompt(tokens);
                    let echoed = meta.echoed(index).to_owned();
                    yield Ok(event(&chunk(index, echoed, Some(logprobs), None)));
                }
                Ok(EngineEvent::Text(text)) => {
                    let held = std::mem::take(&mut choices.held[index]);
                    let logprobs = meta.logprobs.then(|| choices.built[index].add_tokens(held));
                    yield Ok(event(&chunk(index, text, logprobs, None)));
                }
                Ok(EngineEvent::Finish { reason, usage: more }) => {
                    yield Ok(event(&chunk(index, String::new(), None, Some(reason))));
                    used.add(more);
                    finished += 1;
                    if finished < total {
                        continue;
                    }
                    if include_usage {
                        let mut last = chunk(0, String::new(), None, None);
                        last.choices.clear();
                        last.usage = Some(usage(used));
                        yield Ok(event(&last));
                    }
                    yield Ok(Bytes::from_static(DONE));
                    break;
                }
                Ok(EngineEvent::Reasoning(_) | EngineEvent::ToolCall(_)) => {}
                Err(e) => {
                    yield Ok(error_event(request_id.as_deref(), e.into()));
                    break;
                }
            }
        }
    }
}

/// A choice's `finish_reason` on the wire.
fn wire(reason: FinishReason) -> svc_api::FinishReason {
    match reason {
        FinishReason::Stop => svc_api::FinishReason::Stop,
        FinishReason::Length => svc_api::FinishReason::Length,
        FinishReason::ToolCalls => svc_api::FinishReason::ToolCalls,
    }
}

#[cfg(test)]
mod tests {
    use svc_core::engine::TopLogprob;

    use super::*;

    fn token(text: &str, logprob: f32) -> TokenLogprob {
        TokenLogprob {
            token: text.into(),
            logprob,
            bytes: text.as_bytes().to_vec(),
            top: vec![TopLogprob {
                token: "x".into(),
                logprob: -9.0,
                bytes: b"x".to_vec(),
            }],
        }
    }

    #[test]
    fn offsets_count_characters_after_the_echoed_prompt() {
        let mut b = Building {
            offset: "héllo".chars().count() as u32,
            ..Building::default()
        };
        let added = b.add_tokens(vec![token("é", -0.5), token(" a", -1.0)]);
        assert_eq!(added.text_offset, [5, 6]);
        assert_eq!(added.tokens, ["é", " a"]);
        assert_eq!(added.token_logprobs, [Some(-0.5), Some(-1.0)]);
        // The chosen token is among its position's likeliest, as OpenAI lists them.
        let top = added.top_logprobs[0].as_ref().unwrap();
        assert_eq!(top.get("é"), Some(&-0.5));
        assert_eq!(top.get("x"), Some(&-9.0));
        assert_eq!(b.offset, 8);
        assert_eq!(b.logprobs, added);
    }

    #[tokio::test]
    async fn prompts_and_choices_are_laid_out_p_times_n_plus_i() {
        let one = |text: &'static str, choice: u32| -> EventStream {
            futures::stream::iter(vec![
                Ok(EngineEvent::Choice(choice)),
                Ok(EngineEvent::Text(text.into())),
                Ok(EngineEvent::Finish {
                    reason: FinishReason::Length,
                    usage: TokenUsage {
                        prompt_tokens: 2,
                        cached_tokens: 0,
                        completion_tokens: 1,
                        ..TokenUsage::default()
                    },
                }),
            ])
            .boxed()
        };
        let first: EventStream = one("a", 1).chain(one("b", 0)).boxed();
        let second: EventStream = one("c", 0).chain(one("d", 1)).boxed();
        let meta = Meta::new("m".into(), 2, false, 2, vec!["P0 ".into(), "P1 ".into()]);
        let done = collect(meta, merge(vec![first, second])).await.unwrap();
        let texts: Vec<&str> = done.choices.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(texts, ["P0 b", "P0 a", "P1 c", "P1 d"]);
        assert_eq!(done.usage.unwrap().prompt_tokens, 8);
        assert!(done.id.starts_with("cmpl-"));
    }

    /// A scored prompt "hé!" (three tokens) then the token " a".
    fn scored_events() -> EventStream {
        let prompt = |text: &str, logprob: Option<f32>| PromptLogprob {
            token: text.into(),
            bytes: text.as_bytes().to_vec(),
            logprob,
            top: logprob.map_or_else(Vec::new, |_| token("x", 0.0).top),
        };
        futures::stream::iter(vec![
            Ok(EngineEvent::PromptLogprobs(vec![
                prompt("h", None),
                prompt("é", Some(-0.25)),
                prompt("!", Some(-2.0)),
            ])),
            Ok(EngineEvent::Logprobs(vec![token(" a", -1.0)])),
            Ok(EngineEvent::Text(" a".into())),
            Ok(EngineEvent::Finish {
                reason: FinishReason::Length,
                usage: TokenUsage::default(),
            }),
        ])
        .boxed()
    }

    #[tokio::test]
    async fn a_scored_prompts_tokens_come_first_with_offsets_from_its_start() {
        let meta = Meta::new("m".into(), 1, true, 1, vec!["hé!".into()]);
        let done = collect(meta, merge(vec![scored_events()])).await.unwrap();
        let choice = &done.choices[0];
        assert_eq!(choice.text, "hé! a");
        let logprobs = choice.logprobs.as_ref().unwrap();
        assert_eq!(logprobs.tokens, ["h", "é", "!", " a"]);
        // The first token has no score, as with OpenAI.
        assert_eq!(
            logprobs.token_logprobs,
            [None, Some(-0.25), Some(-2.0), Some(-1.0)]
        );
        assert_eq!(logprobs.top_logprobs[0], None);
        assert_eq!(
            logprobs.top_logprobs[1].as_ref().unwrap().get("é"),
            Some(&-0.25)
        );
        // Characters from the prompt's start, the reply's after it.
        assert_eq!(logprobs.text_offset, [0, 1, 2, 3]);
    }

    #[tokio::test]
    async fn a_scored_prompts_echo_is_streamed_with_its_scores() {
        let meta = Meta::new("m".into(), 1, true, 1, vec!["hé!".into()]);
        let frames: Vec<Bytes> = sse(meta, false, merge(vec![scored_events()]))
            .map(|frame| frame.unwrap())
            .collect()
            .await;
        let first = std::str::from_utf8(&frames[0]).unwrap();
        let body: serde_json::Value =
            serde_json::from_str(first.strip_prefix("data: ").unwrap().trim()).unwrap();
        let choice = &body["choices"][0];
        assert_eq!(choice["text"], "hé!");
        assert_eq!(
            choice["logprobs"]["tokens"],
            serde_json::json!(["h", "é", "!"])
        );
        assert_eq!(
            choice["logprobs"]["token_logprobs"][0],
            serde_json::Value::Null
        );
        assert_eq!(
            choice["logprobs"]["text_offset"],
            serde_json::json!([0, 1, 2])
        );
        let second = std::str::from_utf8(&frames[1]).unwrap();
        assert!(second.contains("\" a\""), "{second}");
        assert!(second.contains("\"text_offset\":[3]"), "{second}");
    }
}
