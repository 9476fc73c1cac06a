//! The per-sequence sampler chain, built from the request's sampling
//! settings. Each sequence owns its chain (and its random state), so what one
//! sequence draws never depends on the others in the batch.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token::logit_bias::LlamaLogitBias;
use svc_core::engine::{EngineError, Sampling};

/// llama.cpp reads this seed as "pick one at random".
const LLAMA_RANDOM_SEED: u32 = u32::MAX;

/// A grammar that constrains what the sequence may produce (GBNF).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grammar {
    /// The grammar in llama.cpp's GBNF.
    pub gbnf: String,
    /// The rule the output must match.
    pub root: String,
}

/// How a sequence picks its next token.
pub(crate) enum Sampler {
    /// The most likely token, read straight off the logits: the token
    /// llama.cpp's greedy sampler picks (the first of equal maxima), without
    /// its copy of every logit into a candidate array for each token (49,152
    /// of them a token for SmolLM2, for each sequence of a step).
    Greedy,
    /// llama.cpp's sampler chain.
    Chain(LlamaSampler),
}

impl Sampler {
    /// The next token, from the logits at index `at` of the last batch.
    pub(crate) fn sample(&mut self, ctx: &LlamaContext<'_>, at: i32) -> LlamaToken {
        match self {
            Sampler::Greedy => LlamaToken(argmax(ctx.get_logits_ith(at))),
            Sampler::Chain(chain) => chain.sample(ctx, at),
        }
    }
}

/// The index of the first largest logit.
fn argmax(logits: &[f32]) -> i32 {
    let mut best = 0;
    for (i, &logit) in logits.iter().enumerate().skip(1) {
        if logit > logits[best] {
            best = i;
        }
    }
    i32::try_from(best).unwrap_or(0)
}

/// Builds the sampler: plain greedy when nothing else applies, else the
/// chain: end-of-generation ban (when asked), the grammar's sampler (built
/// by the caller, off the engine thread), penalties, then greedy, or top-k,
/// temperature, top-p and a seeded draw.
pub(crate) fn build(
    model: &LlamaModel,
    sampling: &Sampling,
    grammar: Option<LlamaSampler>,
    penalty_window: u32,
    ignore_eos: bool,
) -> Result<Sampler, EngineError> {
    let penalties = sampling.presence_penalty != 0.0 || sampling.frequency_penalty != 0.0;
    if !ignore_eos && grammar.is_none() && !penalties && sampling.temperature <= 0.0 {
        return Ok(Sampler::Greedy);
    }
    let mut chain = Vec::new();
    if ignore_eos {
        let vocab = model.vocab();
        let bans: Vec<LlamaLogitBias> = (0..model.n_vocab())
            .map(LlamaToken)
            .filter(|&t| vocab.is_eog(t))
            .map(|t| LlamaLogitBias::new(t, f32::NEG_INFINITY))
            .collect();
        chain.push(LlamaSampler::logit_bias(model.n_vocab(), &bans));
    }
    if let Some(grammar) = grammar {
        chain.push(grammar);
    }
    if penalties {
        chain.push(LlamaSampler::penalties(
            model.n_vocab(),
            i32::try_from(penalty_window).unwrap_or(i32::MAX),
            1.0,
            sampling.frequency_penalty,
            sampling.presence_penalty,
        ));
    }
    if sampling.temperature <= 0.0 {
        chain.push(LlamaSampler::greedy());
    } else {
        // Keep the top-k tokens (Anthropic's `top_k`; 0 keeps all), then
        // OpenAI's order: scale by temperature, then keep the top-p mass.
        if sampling.top_k > 0 {
            chain.push(LlamaSampler::top_k(
                i32::try_from(sampling.top_k).unwrap_or(i32::MAX),
            ));
        }
        chain.push(LlamaSampler::temp(sampling.temperature));
        if sampling.top_p < 1.0 {
            chain.push(LlamaSampler::top_p(sampling.top_p, 1));
        }
        chain.push(LlamaSampler::dist(seed32(sampling.seed)));
    }
    Ok(Sampler::Chain(LlamaSampler::chain(chain, true)))
}

/// Folds the request's 64-bit seed into llama.cpp's 32 bits; none picks one at random.
fn seed32(seed: Option<u64>) -> u32 {
    let seed = match seed {
        Some(seed) => (seed ^ (seed >> 32)) as u32,
        None => rand::random::<u32>(),
    };
    if seed == LLAMA_RANDOM_SEED { 0 } else { seed }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_of_equal_maxima() {
        assert_eq!(argmax(&[0.5, 2.0, -1.0, 2.0]), 1);
        assert_eq!(argmax(&[3.0]), 0);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY, -7.0]), 2);
    }

    #[test]
    fn seeds_fold_and_never_mean_random() {
        assert_eq!(seed32(Some(7)), 7);
        assert_eq!(seed32(Some(u64::from(u32::MAX))), 0);
        assert_ne!(seed32(Some(1 << 32)), seed32(Some(2 << 32)));
        assert_ne!(seed32(None), LLAMA_RANDOM_SEED);
    }
}
