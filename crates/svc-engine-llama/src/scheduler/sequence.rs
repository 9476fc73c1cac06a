//! A sequence slot and the generation running in it: [`Slot`] (the tokens
//! whose KV cells a slot holds), [`Sequence`] (a generation's sampler, text,
//! counts and scores, and the events it sends), and how the [`Batcher`]
//! makes a sequence of a [`Job`]. Which slot a sequence takes is
//! `placement`'s.

use std::sync::Arc;
use std::time::SystemTime;

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use svc_core::engine::{EngineEvent, FinishReason, PromptLogprob, TokenUsage};
use svc_core::trace::Current;

use crate::logprobs::Pending;
use crate::sampler::{self, Sampler};
use crate::text::TextAssembler;

use super::{Batcher, Job, Sink};

/// A sequence slot: the generation running in it, if any, and the tokens
/// whose KV cells its sequence id (the slot's index) holds at positions
/// `0..tokens.len()`, kept after the generation ends for the next request
/// that starts with them.
#[derive(Default)]
pub(super) struct Slot {
    pub(super) seq: Option<Sequence>,
    pub(super) tokens: Vec<LlamaToken>,
    /// The batcher's clock when a generation last started or ended here.
    pub(super) used_at: u64,
}

impl Slot {
    pub(super) fn is_free(&self) -> bool {
        self.seq.is_none()
    }
}

/// One generation in a slot.
pub(super) struct Sequence {
    /// Which sequence this is, for as long as the engine runs.
    pub(super) serial: u64,
    /// Its job's [`Job::background`].
    pub(super) background: bool,
    /// The serial of the sequence whose prompt (the same as this one's) this
    /// one waits for: once that prompt is decoded, its KV cells are copied
    /// here and this sequence samples from the same logits, so the prompt is
    /// decoded once for both.
    pub(super) follows: Option<u64>,
    pub(super) sink: Sink,
    /// Who asked (see [`Job::owner`]).
    pub(super) owner: Option<Arc<str>>,
    /// Whether its first token stops the engine (tests: see
    /// [`Shared::freeze_at_first_token`]).
    ///
    /// [`Shared::freeze_at_first_token`]: super::Shared::freeze_at_first_token
    pub(super) freezes: bool,
    pub(super) prompt: Vec<LlamaToken>,
    /// Prompt tokens whose KV cells the slot holds (reused or decoded).
    pub(super) prompt_fed: usize,
    /// Prompt tokens whose KV cells were not decoded for it: a prefix
    /// reused from a slot or the host cache, or a leader's whole prompt.
    pub(super) cached: usize,
    /// A sampled token not yet given to the model.
    pub(super) pending: Option<LlamaToken>,
    /// Tokens whose cells were given up while it was suspended without a
    /// copy (see [`Held::Dropped`]), decoded again (no logits) before
    /// anything else; `refill_fed` of them are.
    ///
    /// [`Held::Dropped`]: super::Held::Dropped
    pub(super) refill: Vec<LlamaToken>,
    pub(super) refill_fed: usize,
    /// Index in the current batch whose logits are this sequence's.
    pub(super) logits_at: Option<i32>,
    pub(super) sampler: Sampler,
    pub(super) text: TextAssembler,
    pub(super) generated: u32,
    pub(super) max_tokens: u32,
    /// Alternatives to report per token, when log probabilities were asked for.
    pub(super) logprobs: Option<u8>,
    /// Log probabilities of tokens whose text is not sent yet.
    pub(super) unsent: Pending,
    /// The prompt's scores, while it is scored and not yet sent.
    pub(super) score: Option<Scoring>,
    /// The request's trace, when recorded, and when this was admitted.
    pub(super) trace: Option<(Current, SystemTime)>,
}

impl Sequence {
    /// Sends `text` (when not empty), after the log probabilities of the tokens it starts.
    pub(super) fn send_text(&mut self, text: String) -> bool {
        if text.is_empty() {
            return true;
        }
        if self.logprobs.is_some() {
            let tokens = self.unsent.take(crate::text::unmarked_len(&text));
            if !tokens.is_empty() && self.sink.send(Ok(EngineEvent::Logprobs(tokens))).is_err() {
                return false;
            }
        }
        self.sink.send(Ok(EngineEvent::Text(text))).is_ok()
    }

    fn usage(&self) -> TokenUsage {
        TokenUsage {
            prompt_tokens: self.prompt.len() as u64,
            cached_tokens: self.cached as u64,
            completion_tokens: u64::from(self.generated),
            ..TokenUsage::default()
        }
    }

    /// Sends the held-back text and the finish event.
    pub(super) fn finish(&mut self, reason: FinishReason) {
        let tail = self.text.finish();
        self.send_text(tail);
        let _ = self.sink.send(Ok(EngineEvent::Finish {
            reason,
            usage: self.usage(),
        }));
    }
}

/// A prompt being scored (see [`Job::score_prompt`]).
pub(super) struct Scoring {
    /// Its tokens' log probabilities so far, in order.
    pub(super) tokens: Vec<PromptLogprob>,
    /// Prompt tokens of the current batch, each as (index in the prompt,
    /// index in the batch): the logits there score the prompt's next token.
    pub(super) at: Vec<(usize, i32)>,
}

/// A prompt token's text as the prompt held it: a control token written
/// out, as the prompt's text has it.
pub(super) fn prompt_piece(model: &LlamaModel, token: LlamaToken) -> Vec<u8> {
    let mut piece = Vec::with_capacity(16);
    model
        .vocab()
        .token_to_piece_into(token, &mut piece, true, None);
    piece
}

impl Batcher<'_, '_> {
    /// A sequence for `job`, or `None` (after telling the client) when it cannot start.
    pub(super) fn start(&mut self, job: Job) -> Option<Sequence> {
        let sampler = match sampler::build(
            self.model,
            &job.sampling,
            job.grammar,
            self.penalty_window,
            job.ignore_eos,
        ) {
            Ok(sampler) => sampler,
            Err(e) => {
                let _ = job.sink.send(Err(e));
                return None;
            }
        };
        let serial = self.next_serial;
        self.next_serial += 1;
        let score = job.score_prompt.then(|| {
            // The prompt's first token has no score; a BOS token the model
            // adds is not the prompt's text, and is not listed (a model
            // that adds none may have its BOS in the text: SmolLM2's is
            // `<|im_start|>`).
            let vocab = self.model.vocab();
            let added_bos = |first: LlamaToken| vocab.should_add_bos() && first == vocab.bos();
            let tokens = match job.prompt.first() {
                Some(&first) if !added_bos(first) => {
                    let bytes = prompt_piece(self.model, first);
                    vec![PromptLogprob {
                        token: String::from_utf8_lossy(&bytes).into_owned(),
                        bytes,
                        logprob: None,
                        top: Vec::new(),
                    }]
                }
                _ => Vec::new(),
            };
            Scoring {
                tokens,
                at: Vec::new(),
            }
        });
        Some(Sequence {
            serial,
            follows: None,
            text: if job.mark_markers {
                TextAssembler::new(&job.stop).marking()
            } else {
                TextAssembler::new(&job.stop)
            },
            sink: job.sink,
            owner: job.owner,
            freezes: self.shared.freezes_at_first_token(),
            background: job.background,
            prompt: job.prompt,
            prompt_fed: 0,
            cached: 0,
            pending: None,
            refill: Vec::new(),
            refill_fed: 0,
            logits_at: None,
            sampler,
            generated: 0,
            max_tokens: job.max_tokens,
            logprobs: job.logprobs,
            unsent: Pending::default(),
            score,
            trace: job.trace.map(|(trace, queued)| {
                let now = SystemTime::now();
                trace.span("engine: queue", queued, now, Vec::new());
                (trace, now)
            }),
        })
    }
}
