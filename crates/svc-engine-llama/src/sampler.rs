//! The per-sequence sampler chain, built from the request's sampling
//! settings. Each sequence owns its chain (and its random state), so what one
//! sequence draws never depends on the others in the batch.

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

/// Builds the chain: end-of-generation ban (when asked), the grammar's
/// sampler (built by the caller, off the engine thread), penalties,
/// then greedy, or top-k, temperature, top-p and a seeded draw.
pub(crate) fn build(
    model: &LlamaModel,
    sampling: &Sampling,
    grammar: Option<LlamaSampler>,
    penalty_window: u32,
    ignore_eos: bool,
) -> Result<LlamaSampler, EngineError> {
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
    if sampling.presence_penalty != 0.0 || sampling.frequency_penalty != 0.0 {
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
    Ok(LlamaSampler::chain(chain, true))
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
    fn seeds_fold_and_never_mean_random() {
        assert_eq!(seed32(Some(7)), 7);
        assert_eq!(seed32(Some(u64::from(u32::MAX))), 0);
        assert_ne!(seed32(Some(1 << 32)), seed32(Some(2 << 32)));
        assert_ne!(seed32(None), LLAMA_RANDOM_SEED);
    }
}
