//! Log probabilities of generated tokens, as llama-server reports them by
//! default (`n_probs` without `post_sampling_probs`): the softmax of the
//! model's raw logits at the position, before the sampler chain (no
//! temperature, top-p, penalties or grammar), so a token's logprob is what
//! the model gave it, whatever was drawn. The chosen token's log
//! probability and the `k` most likely tokens, most likely first.
//!
//! [`Pending`] pairs them with the text the client sees: a token's log
//! probability goes out with the text that holds its first byte, and the
//! tokens whose text never goes out (a stop sequence) are never reported.

use std::collections::VecDeque;

use svc_core::engine::{TokenLogprob, TopLogprob};

/// What OpenAI writes for a log probability too small to show (JSON has no -inf).
const FLOOR: f32 = -9999.0;

/// The log probability of `token` under the softmax of `logits`, and the
/// `top` most likely tokens; `piece` gives a token's bytes.
pub(crate) fn token_logprob(
    logits: &[f32],
    token: usize,
    top: u8,
    piece: impl Fn(usize) -> Vec<u8>,
) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .map(|&l| f64::from(l - max).exp())
        .sum::<f64>();
    let log_norm = f64::from(max) + sum.ln();
    let logprob = |id: usize| {
        let lp =
            (f64::from(logits.get(id).copied().unwrap_or(f32::NEG_INFINITY)) - log_norm) as f32;
        if lp.is_finite() { lp } else { FLOOR }
    };
    // The `top` largest logits, largest first (ties: lower id first).
    let k = usize::from(top).min(logits.len());
    let mut best: Vec<(f32, usize)> = Vec::with_capacity(k + 1);
    if k > 0 {
        for (id, &l) in logits.iter().enumerate() {
            if best.len() == k && best.last().is_some_and(|&(worst, _)| l <= worst) {
                continue;
            }
            let at = best.partition_point(|&(b, _)| b >= l);
            best.insert(at, (l, id));
            best.truncate(k);
        }
    }
    let bytes = piece(token);
    TokenLogprob {
        token: String::from_utf8_lossy(&bytes).into_owned(),
        logprob: logprob(token),
        bytes,
        top: best
            .into_iter()
            .map(|(_, id)| {
                let bytes = piece(id);
                TopLogprob {
                    token: String::from_utf8_lossy(&bytes).into_owned(),
                    logprob: logprob(id),
                    bytes,
                }
            })
            .collect(),
    }
}

/// Token log probabilities waiting for their text to be sent.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    tokens: VecDeque<TokenLogprob>,
    /// Bytes of sent text not yet matched to a token; below zero, bytes of
    /// tokens already reported whose text is still held back.
    owed: i64,
}

impl Pending {
    /// A generated token (its text not sent yet).
    pub(crate) fn push(&mut self, token: TokenLogprob) {
        self.tokens.push_back(token);
    }

    /// `sent` bytes of text go out now: the tokens whose first byte is among them.
    pub(crate) fn take(&mut self, sent: usize) -> Vec<TokenLogprob> {
        self.owed += i64::try_from(sent).unwrap_or(i64::MAX);
        let mut out = Vec::new();
        while self.owed > 0 {
            let Some(token) = self.tokens.pop_front() else {
                // More text than token bytes (a replacement character): the
                // surplus matches nothing.
                self.owed = 0;
                break;
            };
            self.owed -= i64::try_from(token.bytes.len()).unwrap_or(i64::MAX);
            out.push(token);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lp(token: &str) -> TokenLogprob {
        TokenLogprob {
            token: token.into(),
            logprob: 0.0,
            bytes: token.as_bytes().to_vec(),
            top: vec![],
        }
    }

    fn names(tokens: &[TokenLogprob]) -> Vec<&str> {
        tokens.iter().map(|t| t.token.as_str()).collect()
    }

    #[test]
    fn the_softmax_of_the_logits() {
        let logits = [1.0f32, 3.0, 2.0, 3.0];
        let piece = |id: usize| format!("t{id}").into_bytes();
        let out = token_logprob(&logits, 2, 3, piece);
        let norm: f32 = logits.iter().map(|l| l.exp()).sum::<f32>().ln();
        assert_eq!(out.token, "t2");
        assert_eq!(out.bytes, b"t2");
        assert!((out.logprob - (2.0 - norm)).abs() < 1e-5, "{out:?}");
        let top: Vec<&str> = out.top.iter().map(|t| t.token.as_str()).collect();
        assert_eq!(top, ["t1", "t3", "t2"]);
        assert!((out.top[0].logprob - (3.0 - norm)).abs() < 1e-5);
        assert!(out.top.windows(2).all(|w| w[0].logprob >= w[1].logprob));
        // The probabilities sum to one.
        let total: f32 = (0..4)
            .map(|i| token_logprob(&logits, i, 0, piece).logprob.exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-5);
        assert!(token_logprob(&logits, 0, 0, piece).top.is_empty());
        assert_eq!(token_logprob(&logits, 0, 20, piece).top.len(), 4);
        // A token the model rules out is floored, never -inf.
        let out = token_logprob(&[0.0, f32::NEG_INFINITY], 1, 2, piece);
        assert_eq!(out.logprob, FLOOR);
    }

    #[test]
    fn tokens_go_out_with_their_first_byte() {
        let mut p = Pending::default();
        p.push(lp("ab"));
        p.push(lp("c"));
        // "a" sent: the first token; its "b" is held.
        assert_eq!(names(&p.take(1)), ["ab"]);
        // Nothing sent: nothing.
        assert!(p.take(0).is_empty());
        // "bc": the rest of "ab", then "c".
        assert_eq!(names(&p.take(2)), ["c"]);
        p.push(lp("de"));
        p.push(lp("STOP"));
        // A stop sequence cut the text after "de": "STOP" is never reported.
        assert_eq!(names(&p.take(2)), ["de"]);
        assert!(p.take(0).is_empty());
    }
}
