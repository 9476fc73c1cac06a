//! One step's batch: what goes in (the next token of every generating
//! sequence, then prompt chunks shared between owners, see `prefill`),
//! what to take back when the decode finds no room for it ([`Undo`]), and
//! what comes out: prompt scores, and one sampled token per sequence that
//! asked for logits, streamed to its client. When a step runs is the loop's
//! (the parent module's).

use std::time::SystemTime;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::token::LlamaToken;
use svc_core::engine::{EngineEvent, FinishReason, PromptLogprob, TokenLogprob};
use svc_core::trace::Value;

use crate::logprobs;
use crate::prefill;

use super::sequence::{Sequence, prompt_piece};
use super::{Batcher, position, seq_id};

/// Most prompt tokens of a scored prompt one step decodes: each keeps a row
/// of logits (a row is the vocabulary's size in floats, 192 KiB for
/// SmolLM2's), and llama.cpp keeps the largest output buffer a step asked
/// for. The scores do not depend on it (the steps are batch-invariant).
const SCORED_PER_STEP: usize = 64;

/// What a scored prompt token takes of a step's room, in plain prompt
/// tokens: its row of logits (the model's output layer for it, and svc's
/// log-softmax over the vocabulary) costs more than the token itself.
/// Measured on the default model, 1 thread, release build: a 502-token
/// prompt took 1.12 s plain and 1.52 s scored (1.36x), rounded up.
const SCORED_COST: usize = 2;

/// What happened to a sequence after one sampled token.
enum Next {
    /// Feed the token back and go on.
    Continue,
    /// The reply is complete.
    Finish(FinishReason),
    /// The consumer went away.
    Gone,
}

/// What building the batch changed in one slot, to take back when the
/// decode found no room for it.
pub(super) struct Undo {
    slot: usize,
    tokens: usize,
    prompt_fed: usize,
    refill_fed: usize,
    pending: Option<LlamaToken>,
}

impl Undo {
    /// What slot `i` (holding `tokens` cells, running `seq`) is before the
    /// step adds to it, and the token the step takes from `pending`.
    fn of(i: usize, tokens: usize, seq: &Sequence, pending: Option<LlamaToken>) -> Self {
        Undo {
            slot: i,
            tokens,
            prompt_fed: seq.prompt_fed,
            refill_fed: seq.refill_fed,
            pending,
        }
    }
}

impl Batcher<'_, '_> {
    /// Fills the batch: first the next token of every generating sequence,
    /// then prompt chunks, within the batch size. Returns the sequences in
    /// it and the prompt tokens, and records what it changed in `undo`.
    pub(super) fn build_batch(&mut self) -> (u64, u64) {
        self.batch.clear();
        self.undo.clear();
        let mut sequences = 0u64;
        let mut prompt_tokens = 0u64;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(seq) = slot.seq.as_mut() else {
                continue;
            };
            seq.logits_at = None;
            if seq.refill_fed < seq.refill.len() {
                continue;
            }
            let Some(token) = seq.pending.take() else {
                continue;
            };
            if self
                .batch
                .add(token, position(&slot.tokens), &[seq_id(i)], true)
                .is_err()
            {
                seq.pending = Some(token);
                continue;
            }
            self.undo
                .push(Undo::of(i, slot.tokens.len(), seq, Some(token)));
            slot.tokens.push(token);
            seq.logits_at = Some(self.batch.n_tokens() - 1);
            sequences += 1;
        }
        self.orphan_followers();
        let room = self
            .batch_size
            .saturating_sub(usize::try_from(self.batch.n_tokens()).unwrap_or(usize::MAX));
        for (i, n) in self.prompt_shares(room) {
            let slot = &mut self.slots[i];
            let Some(seq) = slot.seq.as_mut() else {
                continue;
            };
            self.undo.push(Undo::of(i, slot.tokens.len(), seq, None));
            sequences += 1;
            if seq.refill_fed < seq.refill.len() {
                // Cells given up while suspended, decoded again first.
                let end = seq.refill.len().min(seq.refill_fed + n);
                for &token in &seq.refill[seq.refill_fed..end] {
                    if self
                        .batch
                        .add(token, position(&slot.tokens), &[seq_id(i)], false)
                        .is_err()
                    {
                        break;
                    }
                    slot.tokens.push(token);
                    seq.refill_fed += 1;
                    prompt_tokens += 1;
                }
                continue;
            }
            let last = seq.prompt.len() - 1;
            for j in seq.prompt_fed..seq.prompt_fed + n {
                let scored = seq.score.as_mut().filter(|_| j < last);
                let wants_logits = j == last || scored.is_some();
                let token = seq.prompt[j];
                if self
                    .batch
                    .add(token, position(&slot.tokens), &[seq_id(i)], wants_logits)
                    .is_err()
                {
                    break;
                }
                let at = self.batch.n_tokens() - 1;
                if let Some(score) = scored {
                    score.at.push((j, at));
                }
                if j == last {
                    seq.logits_at = Some(at);
                }
                slot.tokens.push(token);
                seq.prompt_fed += 1;
                prompt_tokens += 1;
            }
        }
        (sequences, prompt_tokens)
    }

    /// The prompt work each sequence that has some takes this step, within
    /// `room` tokens of the batch, as (slot, tokens): shared between owners
    /// in turn, oldest sequence first within an owner (see `prefill`), so
    /// one key's long prompts do not hold another key's first token; a
    /// scored prompt's tokens cost [`SCORED_COST`] each, at most
    /// [`SCORED_PER_STEP`] a step. Tokens to decode again after a
    /// suspension come before a sequence's prompt.
    fn prompt_shares(&self, room: usize) -> Vec<(usize, usize)> {
        let mut claims = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            let Some(seq) = slot.seq.as_ref() else {
                continue;
            };
            if seq.follows.is_some() {
                continue;
            }
            let left = seq.prompt.len() - seq.prompt_fed;
            let (tokens, cost, ends) = if seq.refill_fed < seq.refill.len() {
                (seq.refill.len() - seq.refill_fed, 1, false)
            } else if seq.score.is_some() {
                // Each scored token keeps a row of logits for the step.
                (
                    left.min(SCORED_PER_STEP),
                    SCORED_COST,
                    left <= SCORED_PER_STEP,
                )
            } else {
                (left, 1, true)
            };
            if tokens > 0 {
                let claim = prefill::Claim {
                    // A sequence of no owner is an owner of its own.
                    owner: seq.owner.clone().ok_or(seq.serial),
                    background: seq.background,
                    tokens,
                    cost,
                    ends,
                };
                claims.push((seq.serial, i, claim));
            }
        }
        // Oldest first within an owner.
        claims.sort_by_key(|&(serial, _, _)| serial);
        let (slots, claims): (Vec<usize>, Vec<_>) =
            claims.into_iter().map(|(_, i, claim)| (i, claim)).unzip();
        slots
            .into_iter()
            .zip(prefill::shares(&claims, room))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    /// Takes back what the last `build_batch` changed (its decode did not happen).
    pub(super) fn take_back(&mut self) {
        for undo in self.undo.drain(..).rev() {
            let slot = &mut self.slots[undo.slot];
            slot.tokens.truncate(undo.tokens);
            if let Some(seq) = slot.seq.as_mut() {
                seq.prompt_fed = undo.prompt_fed;
                seq.refill_fed = undo.refill_fed;
                seq.logits_at = None;
                if let Some(score) = seq.score.as_mut() {
                    score.at.clear();
                }
                if undo.pending.is_some() {
                    seq.pending = undo.pending;
                }
            }
        }
        self.batch.clear();
    }

    /// Samples one token for every sequence whose logits this step
    /// computed. True when one of them was the first of a sequence that
    /// stops the engine (see [`Shared::freeze_at_first_token`]).
    ///
    /// [`Shared::freeze_at_first_token`]: super::Shared::freeze_at_first_token
    pub(super) fn sample(&mut self, ctx: &mut LlamaContext<'_>) -> bool {
        self.score_prompts(ctx);
        self.share_prompts(ctx);
        self.send_scores();
        let mut first_token = false;
        for i in 0..self.slots.len() {
            let Some(seq) = self.slots[i].seq.as_mut() else {
                continue;
            };
            let Some(at) = seq.logits_at.take() else {
                continue;
            };
            if seq.max_tokens == 0 {
                // A scored prompt that asked for nothing more.
                if let Some(mut seq) = self.release(i) {
                    seq.finish(FinishReason::Length);
                }
                continue;
            }
            if seq.generated == 0
                && let Some((trace, admitted)) = &seq.trace
            {
                let count = |n: usize| Value::Int(i64::try_from(n).unwrap_or(i64::MAX));
                let attributes = vec![
                    (
                        "gen_ai.usage.input_tokens".to_owned(),
                        count(seq.prompt.len()),
                    ),
                    (
                        "gen_ai.usage.cached_input_tokens".to_owned(),
                        count(seq.cached),
                    ),
                ];
                trace.span("engine: prefill", *admitted, SystemTime::now(), attributes);
            }
            let token = seq.sampler.sample(ctx, at);
            let logprob = seq.logprobs.map(|top| {
                let vocab = self.model.vocab();
                logprobs::token_logprob(ctx.get_logits_ith(at), token.0 as usize, top, |id| {
                    let mut piece = Vec::with_capacity(16);
                    let id = LlamaToken(i32::try_from(id).unwrap_or(0));
                    vocab.token_to_piece_into(id, &mut piece, false, None);
                    piece
                })
            });
            self.shared.counters.generated();
            first_token |= seq.generated == 0 && seq.freezes;
            match self.on_token(i, token, logprob) {
                Next::Continue => {}
                Next::Finish(reason) => {
                    // Free the slot first: a client that sees the finish event
                    // may send its next request at once, and it must fit.
                    if let Some(mut seq) = self.release(i) {
                        seq.finish(reason);
                    }
                }
                Next::Gone => {
                    self.release(i);
                    self.shared.counters.cancelled();
                }
            }
        }
        first_token
    }

    /// Scores the prompt tokens this step decoded for a scored prompt (the
    /// logits after token `j` give token `j + 1`'s log probability).
    fn score_prompts(&mut self, ctx: &LlamaContext<'_>) {
        let model = self.model;
        for slot in &mut self.slots {
            let Some(seq) = slot.seq.as_mut() else {
                continue;
            };
            let Some(score) = seq.score.as_mut() else {
                continue;
            };
            let top = seq.logprobs.unwrap_or(0);
            for (j, at) in score.at.drain(..) {
                let Some(&next) = seq.prompt.get(j + 1) else {
                    continue;
                };
                let scored =
                    logprobs::token_logprob(ctx.get_logits_ith(at), next.0 as usize, top, |id| {
                        prompt_piece(model, LlamaToken(i32::try_from(id).unwrap_or(0)))
                    });
                score.tokens.push(PromptLogprob {
                    token: scored.token,
                    bytes: scored.bytes,
                    logprob: Some(scored.logprob),
                    top: scored.top,
                });
            }
        }
    }

    /// Sends each scored prompt's scores once all its tokens are decoded
    /// (its own, or its leader's: see [`Batcher::share_prompts`]).
    fn send_scores(&mut self) {
        for seq in self.slots.iter_mut().filter_map(|s| s.seq.as_mut()) {
            if seq.prompt_fed == seq.prompt.len()
                && let Some(score) = seq.score.take()
            {
                // A client gone is seen at the next token, as ever.
                let _ = seq.sink.send(Ok(EngineEvent::PromptLogprobs(score.tokens)));
            }
        }
    }

    /// Streams what `token` adds to the reply of slot `i` and decides whether it goes on.
    fn on_token(&mut self, i: usize, token: LlamaToken, logprob: Option<TokenLogprob>) -> Next {
        let Some(seq) = self.slots[i].seq.as_mut() else {
            return Next::Gone;
        };
        seq.generated += 1;
        let vocab = self.model.vocab();
        if vocab.is_eog(token) {
            return Next::Finish(FinishReason::Stop);
        }
        let mut piece = Vec::with_capacity(16);
        let shown = self.shown.contains(&token);
        vocab.token_to_piece_into(token, &mut piece, shown, None);
        if let Some(logprob) = logprob {
            seq.unsent.push(logprob);
        }
        let release = if self.marked.contains(&token) {
            seq.text.push_marker(&piece)
        } else {
            seq.text.push(&piece)
        };
        if !seq.send_text(release.text) {
            return Next::Gone;
        }
        if release.stopped {
            return Next::Finish(FinishReason::Stop);
        }
        if seq.generated >= seq.max_tokens {
            return Next::Finish(FinishReason::Length);
        }
        seq.pending = Some(token);
        Next::Continue
    }
}
