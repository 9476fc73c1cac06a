//! From the wire request of `POST /v1/embeddings` to a validated
//! [`EmbedRequest`]: the shape of `input`, its limits, `encoding_format`
//! and `dimensions`, each failure naming its `param` as OpenAI does. What
//! only the model knows (tokens per input, which lengths it can give) the
//! engine checks.

use serde_json::Value;
use svc_api::EmbeddingRequest;
use svc_core::{EmbedInput, EmbedRequest, ValidationError};

/// Most inputs one request may give, as with OpenAI.
pub const MAX_EMBEDDING_INPUTS: usize = 2048;
/// Most bytes of text all inputs of a request may hold together (as for a
/// chat request's messages).
pub const MAX_EMBEDDING_BYTES: usize = svc_core::limits::MAX_MESSAGE_BYTES;

/// An embeddings request that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidEmbeddingRequest {
    pub model: String,
    /// Whether the vectors go back as base64 (else as arrays of numbers).
    pub base64: bool,
    pub embed: EmbedRequest,
}

impl TryFrom<EmbeddingRequest> for ValidEmbeddingRequest {
    type Error = ValidationError;

    fn try_from(req: EmbeddingRequest) -> Result<Self, ValidationError> {
        if req.model.trim().is_empty() {
            return Err(ValidationError::new(
                "model",
                "model must be a non-empty string",
            ));
        }
        let base64 = match req.encoding_format.as_ref() {
            None | Some(Value::Null) => false,
            Some(Value::String(f)) if f == "float" => false,
            Some(Value::String(f)) if f == "base64" => true,
            Some(other) => {
                return Err(ValidationError::new(
                    "encoding_format",
                    format!("encoding_format must be \"float\" or \"base64\" (got {other})"),
                ));
            }
        };
        let dimensions = match req.dimensions {
            None => None,
            Some(d) => Some(u32::try_from(d).ok().filter(|&d| d >= 1).ok_or_else(|| {
                ValidationError::new(
                    "dimensions",
                    format!("dimensions must be a positive integer (got {d})"),
                )
            })?),
        };
        let inputs = inputs(req.input)?;
        Ok(ValidEmbeddingRequest {
            model: req.model,
            base64,
            embed: EmbedRequest {
                inputs,
                dimensions,
                client: None,
                background: false,
            },
        })
    }
}

fn invalid(message: impl Into<String>) -> ValidationError {
    ValidationError::new("input", message)
}

const SHAPES: &str = "input must be a string, an array of strings, an array of token ids, or an array of token-id arrays";

/// `input` in one of its four shapes, each input non-empty, within the
/// request's limits.
fn inputs(input: Value) -> Result<Vec<EmbedInput>, ValidationError> {
    let inputs = match input {
        Value::String(text) => vec![text_input(text, None)?],
        Value::Array(items) if items.is_empty() => {
            return Err(invalid("input must not be an empty array"));
        }
        Value::Array(items) if items.len() > MAX_EMBEDDING_INPUTS => {
            return Err(invalid(format!(
                "input may hold at most {MAX_EMBEDDING_INPUTS} inputs (got {})",
                items.len()
            )));
        }
        Value::Array(items) => match items.first() {
            Some(Value::Number(_)) => vec![EmbedInput::Tokens(token_ids(&items, None)?)],
            Some(Value::String(_)) => items
                .into_iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(text) => text_input(text, Some(i)),
                    _ => Err(invalid(format!(
                        "input[{i}] must be a string, as input[0] is"
                    ))),
                })
                .collect::<Result<_, _>>()?,
            Some(Value::Array(_)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::Array(ids) => token_ids(ids, Some(i)).map(EmbedInput::Tokens),
                    _ => Err(invalid(format!(
                        "input[{i}] must be an array of token ids, as input[0] is"
                    ))),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(invalid(SHAPES)),
        },
        _ => return Err(invalid(SHAPES)),
    };
    let bytes: usize = inputs
        .iter()
        .map(|i| match i {
            EmbedInput::Text(text) => text.len(),
            EmbedInput::Tokens(ids) => ids.len() * 4,
        })
        .sum();
    if bytes > MAX_EMBEDDING_BYTES {
        return Err(invalid(format!(
            "the inputs hold {bytes} bytes; at most {MAX_EMBEDDING_BYTES} are allowed"
        )));
    }
    Ok(inputs)
}

fn text_input(text: String, index: Option<usize>) -> Result<EmbedInput, ValidationError> {
    if text.is_empty() {
        return Err(invalid(match index {
            None => "input must not be an empty string".to_owned(),
            Some(i) => format!("input[{i}] must not be an empty string"),
        }));
    }
    Ok(EmbedInput::Text(text))
}

fn token_ids(ids: &[Value], index: Option<usize>) -> Result<Vec<u32>, ValidationError> {
    let at = index.map_or_else(|| "input".to_owned(), |i| format!("input[{i}]"));
    if ids.is_empty() {
        return Err(invalid(format!(
            "{at} must not be an empty array of token ids"
        )));
    }
    ids.iter()
        .enumerate()
        .map(|(j, id)| {
            id.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| invalid(format!("{at}[{j}] must be a token id (got {id})")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn valid(body: Value) -> Result<ValidEmbeddingRequest, ValidationError> {
        ValidEmbeddingRequest::try_from(serde_json::from_value::<EmbeddingRequest>(body).unwrap())
    }

    fn refused(body: Value) -> (String, String) {
        let e = valid(body).unwrap_err();
        (e.param, e.message)
    }

    #[test]
    fn the_four_shapes_of_input() {
        let one = valid(json!({"model": "m", "input": "hi"})).unwrap();
        assert_eq!(one.embed.inputs, [EmbedInput::Text("hi".into())]);
        assert!(!one.base64);
        let many =
            valid(json!({"model": "m", "input": ["a", "b"], "encoding_format": "base64"})).unwrap();
        assert_eq!(many.embed.inputs.len(), 2);
        assert!(many.base64);
        let ids = valid(json!({"model": "m", "input": [1, 2, 3]})).unwrap();
        assert_eq!(ids.embed.inputs, [EmbedInput::Tokens(vec![1, 2, 3])]);
        let lists =
            valid(json!({"model": "m", "input": [[1], [2, 3]], "dimensions": 384})).unwrap();
        assert_eq!(
            lists.embed.inputs,
            [EmbedInput::Tokens(vec![1]), EmbedInput::Tokens(vec![2, 3])]
        );
        assert_eq!(lists.embed.dimensions, Some(384));
    }

    #[test]
    fn each_wrong_input_names_input() {
        for body in [
            json!({"model": "m", "input": ""}),
            json!({"model": "m", "input": []}),
            json!({"model": "m", "input": ["a", ""]}),
            json!({"model": "m", "input": ["a", 1]}),
            json!({"model": "m", "input": [1, -1]}),
            json!({"model": "m", "input": [[1], []]}),
            json!({"model": "m", "input": [[1], "a"]}),
            json!({"model": "m", "input": {"text": "a"}}),
            json!({"model": "m", "input": null}),
            json!({"model": "m", "input": vec!["a"; MAX_EMBEDDING_INPUTS + 1]}),
            json!({"model": "m", "input": "x".repeat(MAX_EMBEDDING_BYTES + 1)}),
        ] {
            assert_eq!(refused(body.clone()).0, "input", "{body}");
        }
        assert!(valid(json!({"model": "m", "input": vec!["a"; MAX_EMBEDDING_INPUTS]})).is_ok());
    }

    #[test]
    fn format_and_dimensions_are_checked() {
        assert_eq!(
            refused(json!({"model": "m", "input": "a", "encoding_format": "int8"})).0,
            "encoding_format"
        );
        assert_eq!(
            refused(json!({"model": "m", "input": "a", "dimensions": 0})).0,
            "dimensions"
        );
        assert_eq!(refused(json!({"model": " ", "input": "a"})).0, "model");
    }
}
