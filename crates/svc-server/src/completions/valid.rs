//! From the wire request of `POST /v1/completions` (legacy text
//! completions) to validated [`GenerateRequest`]s, one per prompt: the
//! shape of `prompt`, `suffix`, `echo`, the legacy `logprobs`, and the
//! sampling fields chat shares, each failure naming its `param` as OpenAI
//! does. What only the model knows (its fill-in-the-middle tokens, its
//! context) the engine checks.

use serde_json::Value;
use svc_api::CompletionRequest;
use svc_core::ValidationError;
use svc_core::engine::{GenerateRequest, TextPrompt};
use svc_core::limits::MAX_MESSAGE_BYTES;

use crate::chat::valid::{
    SamplingFields, choices, sampling, stop_sequences, stream_usage, token_cap,
};

/// Most choices one request may ask for in all (prompts times `n`), and so
/// most prompts: each is a generation queued on its own, and at most half
/// of the embedded engine's default queue (64), so that one request never
/// fills the queue other clients' requests wait in.
pub const MAX_COMPLETION_CHOICES: u32 = 32;
/// Most prompts one request may give.
pub const MAX_PROMPTS: usize = MAX_COMPLETION_CHOICES as usize;
/// Most alternatives per token of the legacy `logprobs`, as with OpenAI.
pub const MAX_LEGACY_LOGPROBS: u8 = 5;
/// Completion tokens when `max_tokens` is absent, as with OpenAI.
pub const DEFAULT_MAX_TOKENS: u32 = 16;

/// A completions request that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidCompletionRequest {
    pub model: String,
    pub include_usage: bool,
    /// Whether each choice's text starts with its prompt.
    pub echo: bool,
    /// One generation per prompt, in order: the same settings, each with
    /// its own [`TextPrompt`]. Choice `i` of prompt `p` is `p * n + i`.
    pub prompts: Vec<GenerateRequest>,
}

impl ValidCompletionRequest {
    /// Choices per prompt.
    pub fn n(&self) -> u32 {
        self.prompts.first().map_or(1, |p| p.n)
    }

    /// Whether the reply carries log probabilities.
    pub fn logprobs(&self) -> bool {
        self.prompts.first().is_some_and(|p| p.logprobs.is_some())
    }

    /// Whether the reply is streamed.
    pub fn stream(&self) -> bool {
        self.prompts.first().is_some_and(|p| p.stream)
    }
}

impl TryFrom<CompletionRequest> for ValidCompletionRequest {
    type Error = ValidationError;

    fn try_from(req: CompletionRequest) -> Result<Self, ValidationError> {
        if req.model.trim().is_empty() {
            return Err(ValidationError::new(
                "model",
                "model must be a non-empty string",
            ));
        }
        let stream = req.stream.unwrap_or(false);
        let include_usage = stream_usage(stream, req.stream_options.as_ref())?;
        let n = choices(req.n)?;
        if let Some(best_of) = req.best_of
            && best_of != i64::from(n)
        {
            return Err(ValidationError::new(
                "best_of",
                format!(
                    "best_of must equal n ({n}) when given: every generated choice is returned (got {best_of})"
                ),
            ));
        }
        let echo = req.echo.unwrap_or(false);
        let logprobs = match req.logprobs {
            None => None,
            Some(k) => Some(
                u8::try_from(k)
                    .ok()
                    .filter(|&k| k <= MAX_LEGACY_LOGPROBS)
                    .ok_or_else(|| {
                        ValidationError::new(
                            "logprobs",
                            format!(
                                "logprobs must be between 0 and {MAX_LEGACY_LOGPROBS} (got {k})"
                            ),
                        )
                    })?,
            ),
        };
        // Both: the prompt's own tokens are scored too (what evaluation
        // tools such as lm-evaluation-harness ask), and nothing need be
        // generated (`max_tokens` 0).
        let score = echo && logprobs.is_some();
        let sampling = sampling(SamplingFields {
            temperature: req.temperature,
            top_p: req.top_p,
            seed: req.seed,
            presence_penalty: req.presence_penalty,
            frequency_penalty: req.frequency_penalty,
        })?;
        let max_tokens = match req.max_tokens {
            None => DEFAULT_MAX_TOKENS,
            Some(0) if score => 0,
            Some(m) => token_cap(m, "max_tokens")?,
        };
        let stop = stop_sequences(req.stop)?;
        let texts = prompts(req.prompt)?;
        let suffix_bytes = req.suffix.as_ref().map_or(0, String::len);
        let bytes: usize = texts.iter().map(String::len).sum::<usize>() + suffix_bytes;
        if bytes > MAX_MESSAGE_BYTES {
            return Err(ValidationError::new(
                "prompt",
                format!("the prompts may hold at most {MAX_MESSAGE_BYTES} bytes (got {bytes})"),
            ));
        }
        let total = texts.len() as u64 * u64::from(n);
        if total > u64::from(MAX_COMPLETION_CHOICES) {
            return Err(ValidationError::new(
                "n",
                format!(
                    "prompts times n may be at most {MAX_COMPLETION_CHOICES} choices (got {} prompts and n = {n})",
                    texts.len()
                ),
            ));
        }
        let template = GenerateRequest {
            sampling,
            max_tokens: Some(max_tokens),
            stop,
            stream,
            logprobs,
            n,
            ..GenerateRequest::default()
        };
        let prompts = texts
            .into_iter()
            .map(|text| GenerateRequest {
                prompt: Some(TextPrompt {
                    text,
                    suffix: req.suffix.clone(),
                    score,
                }),
                ..template.clone()
            })
            .collect();
        Ok(ValidCompletionRequest {
            model: req.model,
            include_usage,
            echo,
            prompts,
        })
    }
}

const SHAPES: &str = "prompt must be a string or an array of strings";

/// `prompt` as a string or an array of at most [`MAX_PROMPTS`] strings.
/// Token-id prompts are refused: svc continues text.
fn prompts(prompt: Value) -> Result<Vec<String>, ValidationError> {
    let invalid = |message: String| ValidationError::new("prompt", message);
    match prompt {
        Value::Null => Err(invalid(format!("prompt is required: {SHAPES}"))),
        Value::String(text) => Ok(vec![text]),
        Value::Array(items) => {
            if items.is_empty() {
                return Err(invalid(format!(
                    "prompt must not be an empty array: {SHAPES}"
                )));
            }
            if items.len() > MAX_PROMPTS {
                return Err(invalid(format!(
                    "prompt may hold at most {MAX_PROMPTS} prompts (got {})",
                    items.len()
                )));
            }
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(text) => Ok(text),
                    Value::Number(_) | Value::Array(_) => Err(invalid(format!(
                        "token-id prompts are not accepted; send the prompt as text (prompt[{i}])"
                    ))),
                    other => Err(invalid(format!("{SHAPES} (prompt[{i}] is {other})"))),
                })
                .collect()
        }
        other => Err(invalid(format!("{SHAPES} (got {other})"))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(body: Value) -> Result<ValidCompletionRequest, ValidationError> {
        let mut full = json!({"model": "svc", "prompt": "Once upon"});
        full.as_object_mut()
            .unwrap()
            .extend(body.as_object().unwrap().clone());
        ValidCompletionRequest::try_from(serde_json::from_value::<CompletionRequest>(full).unwrap())
    }

    fn param_of(body: Value) -> String {
        request(body).unwrap_err().param
    }

    #[test]
    fn defaults_follow_openai() {
        let r = request(json!({})).unwrap();
        assert_eq!(r.prompts.len(), 1);
        let p = &r.prompts[0];
        assert_eq!(p.max_tokens, Some(DEFAULT_MAX_TOKENS));
        assert_eq!(p.n, 1);
        assert!(p.messages.is_empty());
        assert_eq!(
            p.prompt,
            Some(TextPrompt {
                text: "Once upon".into(),
                suffix: None,
                score: false,
            })
        );
        assert!(!r.echo && !r.include_usage && !r.stream() && !r.logprobs());
    }

    #[test]
    fn each_prompt_of_an_array_is_a_generation_with_the_same_settings() {
        let r =
            request(json!({"prompt": ["a", "b"], "n": 2, "suffix": "z", "logprobs": 3, "seed": 5}))
                .unwrap();
        assert_eq!(r.prompts.len(), 2);
        assert_eq!(r.prompts[1].prompt.as_ref().unwrap().text, "b");
        assert_eq!(
            r.prompts[1].prompt.as_ref().unwrap().suffix.as_deref(),
            Some("z")
        );
        assert!(r.prompts.iter().all(|p| p.n == 2 && p.logprobs == Some(3)));
        assert_eq!(r.prompts[0].sampling.seed, Some(5));
        assert_eq!(r.n(), 2);
    }

    #[test]
    fn wrong_fields_name_their_param() {
        assert_eq!(param_of(json!({"prompt": null})), "prompt");
        assert_eq!(param_of(json!({"prompt": []})), "prompt");
        assert_eq!(param_of(json!({"prompt": [1, 2, 3]})), "prompt");
        assert_eq!(param_of(json!({"prompt": [[1, 2]]})), "prompt");
        assert_eq!(param_of(json!({"prompt": {"a": 1}})), "prompt");
        assert_eq!(
            param_of(json!({"prompt": vec!["x"; MAX_PROMPTS + 1]})),
            "prompt"
        );
        assert!(request(json!({"prompt": vec!["x"; MAX_PROMPTS]})).is_ok());
        assert_eq!(param_of(json!({"n": 33})), "n");
        assert_eq!(
            param_of(json!({"prompt": "x".repeat(MAX_MESSAGE_BYTES + 1)})),
            "prompt"
        );
        assert_eq!(param_of(json!({"logprobs": 6})), "logprobs");
        assert_eq!(param_of(json!({"logprobs": -1})), "logprobs");
        // With echo the prompt is scored, and may be all that is asked.
        let scored = request(json!({"logprobs": 1, "echo": true, "max_tokens": 0})).unwrap();
        let prompt = scored.prompts[0].prompt.as_ref().unwrap();
        assert!(prompt.score);
        assert_eq!(scored.prompts[0].max_tokens, Some(0));
        assert_eq!(
            param_of(json!({"echo": true, "max_tokens": 0})),
            "max_tokens"
        );
        assert_eq!(
            param_of(json!({"logprobs": 1, "max_tokens": 0})),
            "max_tokens"
        );
        assert_eq!(param_of(json!({"max_tokens": 0})), "max_tokens");
        assert_eq!(param_of(json!({"temperature": 3})), "temperature");
        assert_eq!(param_of(json!({"n": 0})), "n");
        assert_eq!(param_of(json!({"prompt": vec!["x"; 17], "n": 2})), "n");
        assert!(request(json!({"prompt": vec!["x"; 16], "n": 2})).is_ok());
        assert_eq!(param_of(json!({"best_of": 3})), "best_of");
        assert_eq!(
            param_of(json!({"stream_options": {"include_usage": true}})),
            "stream_options"
        );
        assert_eq!(param_of(json!({"stop": ["a", "b", "c", "d", "e"]})), "stop");
        assert_eq!(param_of(json!({"model": " "})), "model");
        assert!(request(json!({"best_of": 1, "echo": true, "prompt": ""})).is_ok());
    }
}
