//! Where generation starts ([`generate`]: one choice is chat.rs's), and
//! requests of `n > 1` choices: `n` generations of one prepared request,
//! queued together so the engine decodes their prompt once, and their
//! events merged into one stream with a `Choice` before each switch.
//!
//! A scored prompt (`echo` with `logprobs`) is scored once, by choice 0:
//! the other choices follow its prompt unscored and get a copy of its
//! scores, so `n` choices cost one prompt's work (issue 61: each choice
//! scored the whole prompt again, `n` times the work for one prompt's
//! charge, and held every slot meanwhile).

use std::sync::Arc;

use futures::StreamExt as _;
use svc_core::engine::{
    EngineError, EngineEvent, EventStream, GenerateRequest, PromptLogprob, TokenLogprob,
};

use crate::chat::{self, ChatFeatures, Plan};
use crate::prompt::Cancel;
use crate::runner::Runner;
use crate::template::ChatTemplate;

/// Starts the generation of `request`: fails before anything streams when
/// the request is invalid or its first pass cannot start. Blocks (grammar,
/// rendering, tokenizing): call it off the async workers. Stops with an
/// error at its next step once `cancel` is set. One choice is
/// `chat::generate_one`; here, above it, so that chat.rs needs nothing of
/// this module (the two were an import circle).
pub(crate) fn generate(
    runner: &Runner,
    template: &Arc<ChatTemplate>,
    features: ChatFeatures,
    request: GenerateRequest,
    cancel: &Cancel,
) -> Result<EventStream, EngineError> {
    svc_core::refuse_images(&request)?;
    if request.n > 1 {
        return generate_n(runner, template, features, request, cancel);
    }
    chat::generate_one(runner, template, features, request, cancel)
}

/// `n > 1` replies: `n` generations of their own, each in a slot of its
/// own, choice `i` seeded with the request's seed plus `i`, their events
/// merged as they come with a `Choice` before each switch. They are queued
/// under one hold on admission of their owner (the request's client, or
/// the request itself), so the engine admits them together and decodes
/// their (first pass's) prompt once: the other choices start from a copy
/// of its KV cells. At most the engine's slots per client run at once
/// (half the slots by default): the rest wait in the queue and start as
/// earlier ones end, from the prompt's cells a finished choice left, while
/// other clients' requests take the other slots. The prompt's tokens are
/// counted in reply 0's usage only. `n` may be at most the engine's
/// parallel slots.
pub(crate) fn generate_n(
    runner: &Runner,
    template: &Arc<ChatTemplate>,
    features: ChatFeatures,
    request: GenerateRequest,
    cancel: &Cancel,
) -> Result<EventStream, EngineError> {
    let n = request.n;
    if n > runner.parallel() {
        return Err(EngineError::InvalidRequest {
            param: Some("n".into()),
            message: format!(
                "n must be at most {} on this model (the sequences it decodes in parallel); got {n}",
                runner.parallel()
            ),
        });
    }
    let owner: Arc<str> = match &request.client {
        Some(client) => Arc::from(client.as_str()),
        // A name no API key has (ids have no spaces), unique to this request.
        None => Arc::from(format!("request {}", next_request_serial())),
    };
    let runner = runner.for_owner(owner).in_background(request.background);
    // The choices differ only in their seed: rendered, tokenized and their
    // grammar built once (each choice gets a copy of the sampler), before
    // the hold, which covers only the queueing.
    let one = GenerateRequest { n: 1, ..request };
    let plan = chat::prepare(&runner, template, features, one, cancel)?;
    let scored = plan.scores_prompt();
    let plans: Vec<Plan> = (0..n)
        .map(|i| {
            let plan = plan.clone().with_seed_offset(u64::from(i));
            // Only choice 0 scores the prompt; the others get its scores.
            if i > 0 && scored {
                plan.unscored()
            } else {
                plan
            }
        })
        .collect();
    drop(plan);
    let hold = runner.hold();
    let mut streams = Vec::with_capacity(n as usize);
    for (i, plan) in (0..n).zip(plans) {
        // A failure drops the replies started so far, which cancels them.
        let stream = plan.start(&runner)?;
        streams.push(stream.map(move |event| (i, event)));
    }
    drop(hold);
    let mut merged = futures::stream::select_all(streams);
    Ok(Box::pin(async_stream::stream! {
        let mut merge = Merge::new(n, scored);
        while let Some((i, event)) = merged.next().await {
            for event in merge.on(i, event) {
                let failed = event.is_err();
                yield event;
                if failed {
                    return;
                }
            }
        }
    }))
}

/// Merges the choices' events into one stream (see [`generate_n`]).
struct Merge {
    /// The choice whose events the stream gives now.
    current: u32,
    /// Each choice's log probabilities, held until its next text: another
    /// choice's events may come in between.
    logprobs: Vec<Vec<TokenLogprob>>,
    /// For a scored prompt: choice 0's scores, once they came; until then
    /// the other choices' events wait in `held` (each choice's scores come
    /// before its text).
    scores: Option<Vec<PromptLogprob>>,
    scored: bool,
    held: Vec<Vec<Result<EngineEvent, EngineError>>>,
}

impl Merge {
    fn new(n: u32, scored: bool) -> Self {
        Merge {
            current: 0,
            logprobs: (0..n).map(|_| Vec::new()).collect(),
            scores: None,
            scored,
            held: (0..n).map(|_| Vec::new()).collect(),
        }
    }

    /// What the stream gives for choice `i`'s `event`.
    fn on(
        &mut self,
        i: u32,
        event: Result<EngineEvent, EngineError>,
    ) -> Vec<Result<EngineEvent, EngineError>> {
        let mut out = Vec::new();
        if self.scored && self.scores.is_none() && i > 0 {
            self.held[i as usize].push(event);
            return out;
        }
        let scores = match (&event, i) {
            (Ok(EngineEvent::PromptLogprobs(scores)), 0) if self.scored => Some(scores.clone()),
            _ => None,
        };
        self.give(i, event, &mut out);
        if let Some(scores) = scores {
            // The others' turn: their copy of the scores, then what waited.
            for j in 1..self.held.len() {
                let j32 = u32::try_from(j).unwrap_or(u32::MAX);
                self.give(
                    j32,
                    Ok(EngineEvent::PromptLogprobs(scores.clone())),
                    &mut out,
                );
                for event in std::mem::take(&mut self.held[j]) {
                    self.give(j32, event, &mut out);
                }
            }
            self.scores = Some(scores);
        }
        out
    }

    /// Puts choice `i`'s `event` in `out`, after a `Choice` when the
    /// stream switches to it.
    fn give(
        &mut self,
        i: u32,
        event: Result<EngineEvent, EngineError>,
        out: &mut Vec<Result<EngineEvent, EngineError>>,
    ) {
        let at = i as usize;
        if let Ok(EngineEvent::Logprobs(tokens)) = event {
            self.logprobs[at].extend(tokens);
            return;
        }
        if i != self.current {
            self.current = i;
            out.push(Ok(EngineEvent::Choice(i)));
        }
        if matches!(event, Ok(EngineEvent::Text(_))) && !self.logprobs[at].is_empty() {
            out.push(Ok(EngineEvent::Logprobs(std::mem::take(
                &mut self.logprobs[at],
            ))));
        }
        match event {
            Ok(EngineEvent::Finish { reason, mut usage }) => {
                if i > 0 {
                    usage.prompt_tokens = 0;
                    usage.cached_tokens = 0;
                }
                out.push(Ok(EngineEvent::Finish { reason, usage }));
            }
            event => out.push(event),
        }
    }
}

/// A number no other `n > 1` request of this process had.
fn next_request_serial() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use svc_core::engine::{FinishReason, TokenUsage};

    use super::*;

    fn score(token: &str) -> PromptLogprob {
        PromptLogprob {
            token: token.into(),
            bytes: token.as_bytes().to_vec(),
            logprob: Some(-1.0),
            top: Vec::new(),
        }
    }

    fn finish(prompt_tokens: u64) -> Result<EngineEvent, EngineError> {
        Ok(EngineEvent::Finish {
            reason: FinishReason::Length,
            usage: TokenUsage {
                prompt_tokens,
                ..TokenUsage::default()
            },
        })
    }

    fn shown(events: Vec<Result<EngineEvent, EngineError>>) -> Vec<String> {
        events
            .into_iter()
            .map(|e| match e {
                Ok(EngineEvent::Choice(i)) => format!("choice {i}"),
                Ok(EngineEvent::PromptLogprobs(s)) => format!("scores {}", s.len()),
                Ok(EngineEvent::Finish { usage, .. }) => {
                    format!("finish {}", usage.prompt_tokens)
                }
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn the_other_choices_of_a_scored_prompt_get_choice_0s_scores_before_their_events() {
        let mut merge = Merge::new(3, true);
        let mut out = Vec::new();
        // Choice 2 finishes before choice 0's scores came: it waits.
        out.extend(merge.on(2, finish(5)));
        assert!(out.is_empty());
        out.extend(merge.on(
            0,
            Ok(EngineEvent::PromptLogprobs(vec![score("a"), score("b")])),
        ));
        out.extend(merge.on(0, finish(5)));
        out.extend(merge.on(1, finish(5)));
        assert_eq!(
            shown(out),
            [
                "scores 2", "choice 1", "scores 2", "choice 2", "scores 2", "finish 0", "choice 0",
                "finish 5", "choice 1", "finish 0",
            ]
        );
    }

    #[test]
    fn unscored_choices_pass_as_they_come() {
        let mut merge = Merge::new(2, false);
        let mut out = merge.on(1, Ok(EngineEvent::Text("b".into())));
        out.extend(merge.on(0, Ok(EngineEvent::Text("a".into()))));
        out.extend(merge.on(1, finish(5)));
        let shown = shown(out);
        assert_eq!(shown[0], "choice 1");
        assert_eq!(shown[2], "choice 0");
        assert_eq!(shown[4], "choice 1");
        assert_eq!(shown[5], "finish 0");
    }
}
