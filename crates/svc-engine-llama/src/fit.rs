//! Whether text can fit a context, judged from its length alone, before it
//! is tokenized: tokenizing is the costly step (a 1 MB one-word prompt took
//! 1.3 CPU-s and 95 MB of memory only to be refused for its length), so a
//! text far past the context is refused without it.
//!
//! The judgement is sound only for tokenizers that cover every byte of the
//! text with tokens, each token standing for at most the bytes of its own
//! text: byte-level BPE and SentencePiece's BPE, which are what chat models
//! use. For them a text of `B` bytes makes at least `B / longest` tokens,
//! where `longest` is the vocabulary's longest token text (read once at
//! load). WordPiece and Unigram tokenizers may make one `[UNK]` of a whole
//! word, so no length says anything about their count: they get no bound.
//! Tokens that eat the whitespace beside them (llama.cpp's LSTRIP/RSTRIP,
//! Phi-3's) make whitespace free, so for such vocabularies only the other
//! bytes count.

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token_type::LlamaTokenAttr;
use svc_core::engine::EngineError;

/// How far past the context a text must be (its fewest tokens, in
/// contexts) to be refused untokenized. Nearer than that it is tokenized,
/// so the refusal says how many tokens it really has; the work stays
/// bounded by the context all the same.
pub(crate) const FAR_PAST: u64 = 2;

/// The fewest bytes a token is counted to stand for: a client's text that
/// spells a control token is written into the prompt as a 7-byte
/// placeholder (see `prompt`), which becomes at least one token.
const PLACEHOLDER_BYTES: u64 = 7;

/// The fewest tokens a text can make, from its bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TextBound {
    /// The most bytes of text one token covers; `None`: the tokenizer may
    /// make fewer tokens than that (no bound).
    token_bytes: Option<u64>,
    /// Some token eats the whitespace beside it: only other bytes count.
    strips: bool,
}

impl TextBound {
    /// The bound of `model`'s vocabulary.
    pub(crate) fn of(model: &LlamaModel) -> Self {
        // llama.cpp's tokenizer, by the name its loader reads: `gpt2` is
        // byte-level BPE, `llama` SentencePiece's BPE. (llama-cpp-2's
        // `vocab_type` panics on the others.)
        let tokenizer = model
            .meta_val_str("tokenizer.ggml.model")
            .unwrap_or_default();
        if !matches!(tokenizer.as_str(), "gpt2" | "llama") {
            return TextBound::default();
        }
        let vocab = model.vocab();
        let mut longest = 0;
        let mut strips = false;
        for id in 0..model.n_vocab() {
            let token = LlamaToken(id);
            // The stored text is never shorter than the text the token
            // stands for: `Ġ` (2 bytes) for a space, `▁` (3) for a space or
            // for itself, `<0x0A>` (6) for one byte.
            let bytes = vocab.text(token).map_or(0, |text| text.to_bytes().len());
            longest = longest.max(bytes as u64);
            let attr = vocab.attr(token);
            strips |=
                attr.contains(LlamaTokenAttr::LStrip) || attr.contains(LlamaTokenAttr::RStrip);
        }
        Self::new(longest, strips)
    }

    /// A bound of tokens of at most `token_bytes` bytes each.
    pub(crate) fn new(token_bytes: u64, strips: bool) -> Self {
        TextBound {
            token_bytes: Some(token_bytes.max(PLACEHOLDER_BYTES)),
            strips,
        }
    }

    /// Whether lengths say anything for this vocabulary.
    pub(crate) fn is_known(&self) -> bool {
        self.token_bytes.is_some()
    }

    /// The bytes of `text` that must become tokens.
    pub(crate) fn counted(&self, text: &[u8]) -> u64 {
        if self.strips {
            text.iter()
                .filter(|b| !b.is_ascii_whitespace() && **b != 0x0B)
                .count() as u64
        } else {
            text.len() as u64
        }
    }

    /// The fewest tokens `counted` bytes (see [`TextBound::counted`]) make; 0 when unknown.
    pub(crate) fn fewest_tokens(&self, counted: u64) -> u64 {
        self.token_bytes.map_or(0, |bytes| counted.div_ceil(bytes))
    }

    /// `Err` (the context's own error) when `texts`, one prompt together,
    /// are so long that their fewest tokens are [`FAR_PAST`] times the
    /// `context` or more; the error's token count is that lower bound.
    pub(crate) fn check(&self, texts: &[&str], context: u32) -> Result<(), EngineError> {
        if !self.is_known() {
            return Ok(());
        }
        let counted = texts.iter().map(|t| self.counted(t.as_bytes())).sum();
        self.refuse_past(counted, context)
    }

    /// `Err` when `counted` bytes are too many for `context` (see [`TextBound::check`]).
    pub(crate) fn refuse_past(&self, counted: u64, context: u32) -> Result<(), EngineError> {
        let fewest = self.fewest_tokens(counted);
        if fewest >= FAR_PAST.saturating_mul(u64::from(context)) {
            return Err(EngineError::ContextLengthExceeded {
                prompt_tokens: fewest,
                context: u64::from(context),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_texts_far_past_the_context_are_refused() {
        let bound = TextBound::new(16, false);
        // 199 tokens of at most 16 bytes at least: under 2 × 100.
        assert!(bound.check(&["x".repeat(3_184).as_str()], 100).is_ok());
        match bound.check(&["x".repeat(3_100).as_str(), "y".repeat(100).as_str()], 100) {
            Err(EngineError::ContextLengthExceeded {
                prompt_tokens,
                context,
            }) => assert_eq!((prompt_tokens, context), (200, 100)),
            other => panic!("{other:?}"),
        }
        // No bound, no refusal.
        assert!(
            TextBound::default()
                .check(&["x".repeat(1 << 20).as_str()], 10)
                .is_ok()
        );
    }

    #[test]
    fn whitespace_counts_only_where_no_token_eats_it() {
        let text = b" a\n\t b \x0B\x0C\r";
        assert_eq!(TextBound::new(16, false).counted(text), text.len() as u64);
        assert_eq!(TextBound::new(16, true).counted(text), 2);
        // Placeholders are 7 bytes: a token never counts for fewer.
        assert_eq!(TextBound::new(1, false).fewest_tokens(70), 10);
    }
}
