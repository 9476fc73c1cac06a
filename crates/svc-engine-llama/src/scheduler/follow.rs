//! One prompt decoded once for several sequences: a sequence admitted with
//! the same prompt as one whose prompt is not decoded yet (the choices of a
//! request with `n > 1`) follows it, and once that prompt is decoded gets a
//! copy of its KV cells and samples from the same logits (a scored one gets
//! its scores too). Admitting them together is the [`super::Hold`]'s.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::token::LlamaToken;
use svc_core::engine::{EngineEvent, FinishReason, PromptLogprob};

use super::{Batcher, seq_id};

impl Batcher<'_, '_> {
    /// A sequence whose prompt is `prompt` and whose prompt is not decoded
    /// yet (and that follows no other): a new sequence with the same
    /// prompt can wait for it instead of decoding the prompt again; one
    /// that is `scored` (with that many alternatives a token) only for one
    /// scored alike, whose scores it then gets too. Not for recurrent
    /// memory, whose state is not copied cell by cell.
    pub(super) fn leader_for(
        &self,
        prompt: &[LlamaToken],
        scored: Option<Option<u8>>,
    ) -> Option<u64> {
        if !self.cell_memory {
            return None;
        }
        self.slots
            .iter()
            .filter_map(|s| s.seq.as_ref())
            .find(|s| {
                s.follows.is_none()
                    && scored.is_none_or(|top| s.score.is_some() && s.logprobs == top)
                    && s.generated == 0
                    && s.prompt_fed < s.prompt.len()
                    && s.prompt == prompt
            })
            .map(|s| s.serial)
    }

    /// Followers of a sequence that went away decode their prompt themselves.
    pub(super) fn orphan_followers(&mut self) {
        let serials: Vec<u64> = self
            .slots
            .iter()
            .filter_map(|s| s.seq.as_ref())
            .map(|s| s.serial)
            .collect();
        for seq in self.slots.iter_mut().filter_map(|s| s.seq.as_mut()) {
            if seq.follows.is_some_and(|leader| !serials.contains(&leader)) {
                seq.follows = None;
            }
        }
    }

    /// For each sequence whose prompt this step finished decoding: its
    /// followers get a copy of its KV cells and sample from its logits;
    /// scored ones get its scores too, suspended ones only its scores (see
    /// [`Batcher::scores_to_suspended`]).
    pub(super) fn share_prompts(&mut self, ctx: &mut LlamaContext<'_>) {
        let leaders: Vec<(u64, usize, i32)> = (0..self.slots.len())
            .filter_map(|i| {
                let s = self.slots[i].seq.as_ref()?;
                let done = s.generated == 0 && s.prompt_fed == s.prompt.len();
                done.then_some(())?;
                s.logits_at.map(|at| (s.serial, i, at))
            })
            .collect();
        for (serial, leader, at) in leaders {
            let scores = self.slots[leader]
                .seq
                .as_ref()
                .and_then(|s| s.score.as_ref())
                .map(|score| score.tokens.clone());
            for i in 0..self.slots.len() {
                if self.slots[i]
                    .seq
                    .as_ref()
                    .is_none_or(|s| s.follows != Some(serial))
                {
                    continue;
                }
                let tokens = self.slots[leader].tokens.clone();
                let copied = ctx.kv_cache_seq_cp(seq_id(leader), seq_id(i), None, None);
                let Some(seq) = self.slots[i].seq.as_mut() else {
                    continue;
                };
                seq.follows = None;
                if let Err(e) = copied {
                    // It decodes the prompt itself from the next step on.
                    tracing::error!(error = %e, "cannot copy a prompt's KV cells");
                    continue;
                }
                seq.prompt_fed = seq.prompt.len();
                seq.cached = seq.prompt.len();
                seq.logits_at = Some(at);
                if let (Some(score), Some(scores)) = (seq.score.as_mut(), &scores) {
                    score.tokens.clone_from(scores);
                }
                self.slots[i].tokens = tokens;
                self.shared.counters.shared_prompt();
            }
            if let Some(scores) = scores {
                self.scores_to_suspended(serial, &scores);
            }
        }
    }

    /// A scored sequence suspended while it waited for the scored prompt
    /// of sequence `leader` (which just finished) gets its `scores` now and
    /// is no longer scored: it resumes as a new sequence would, with the
    /// prompt's cells at hand; one that asked for nothing more is done.
    fn scores_to_suspended(&mut self, leader: u64, scores: &[PromptLogprob]) {
        let mut at = 0;
        while at < self.suspended.len() {
            let seq = &mut self.suspended[at].seq;
            if seq.follows != Some(leader) || seq.score.is_none() {
                at += 1;
                continue;
            }
            seq.follows = None;
            seq.score = None;
            // A client gone is seen when it resumes, as ever.
            let _ = seq
                .sink
                .send(Ok(EngineEvent::PromptLogprobs(scores.to_vec())));
            self.shared.counters.shared_prompt();
            if seq.max_tokens > 0 {
                at += 1;
                continue;
            }
            if let Some(mut done) = self.suspended.remove(at) {
                // Its prompt's work was the leader's.
                done.seq.cached = done.seq.prompt.len();
                done.seq.finish(FinishReason::Length);
            }
        }
    }
}
