//! gpt-oss's harmony format in tokens: its control tokens, and the fixed
//! runs of them svc writes itself (the start of a reply it opens, a
//! reasoning pass's stop). A leaf: `reasoning.rs` writes these for the
//! Harmony reasoning format and `harmony.rs` parses the model's output
//! with them, and each stands on this module rather than on the other
//! (when they lived in `harmony.rs`, reasoning, harmony and tools were one
//! import circle).

pub(crate) const START: &str = "<|start|>";
pub(crate) const CHANNEL: &str = "<|channel|>";
pub(crate) const MESSAGE: &str = "<|message|>";
pub(crate) const END: &str = "<|end|>";
pub(crate) const CALL: &str = "<|call|>";
pub(crate) const RETURN: &str = "<|return|>";
pub(crate) const CONSTRAIN: &str = "<|constrain|>";

/// The format's control tokens, whose text the engine must show for the
/// parser to see them.
pub(crate) const MARKERS: &[&str] = &[START, CHANNEL, MESSAGE, END, CALL, RETURN, CONSTRAIN];

/// What opens the reasoning when svc writes the start of the reply itself.
pub(crate) const OPEN_ANALYSIS: &str = "<|channel|>analysis<|message|>";
/// What closes the reasoning and opens the answer.
pub(crate) const TO_FINAL: &str = "<|end|><|start|>assistant<|channel|>final<|message|>";
/// What opens the answer at once, without reasoning.
pub(crate) const OPEN_FINAL: &str = "<|channel|>final<|message|>";
/// What ends the reasoning (a stop string of a reasoning pass).
pub(crate) const END_MESSAGE: &str = END;
