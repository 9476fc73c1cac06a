//! From the wire request of `POST /v1/rerank` to a validated
//! [`RerankRequest`]: the query, the documents (strings or objects with a
//! `text`), their limits, `top_n` and `return_documents`, each failure
//! naming its `param`. What only the model knows (tokens per document) the
//! engine checks.

use serde_json::Value;
use svc_core::{RerankRequest, ValidationError};

/// Most documents one request may rank (Cohere's limit).
pub const MAX_RERANK_DOCUMENTS: usize = 1000;
/// Most bytes one document may hold.
pub const MAX_RERANK_DOCUMENT_BYTES: usize = 64 * 1024;
/// Most bytes the query may hold.
pub const MAX_RERANK_QUERY_BYTES: usize = 16 * 1024;
/// Most bytes of text the documents of a request may hold together (as
/// for a chat request's messages).
pub const MAX_RERANK_BYTES: usize = svc_core::limits::MAX_MESSAGE_BYTES;

/// A rerank request that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidRerankRequest {
    pub model: String,
    /// How many of the best results to return (at most the documents').
    pub top_n: usize,
    /// Whether each result carries its document's text.
    pub return_documents: bool,
    pub rerank: RerankRequest,
}

impl TryFrom<svc_api::RerankRequest> for ValidRerankRequest {
    type Error = ValidationError;

    fn try_from(req: svc_api::RerankRequest) -> Result<Self, ValidationError> {
        if req.model.trim().is_empty() {
            return Err(ValidationError::new(
                "model",
                "model must be a non-empty string",
            ));
        }
        if req.query.is_empty() {
            return Err(ValidationError::new(
                "query",
                "query must not be an empty string",
            ));
        }
        if req.query.len() > MAX_RERANK_QUERY_BYTES {
            return Err(ValidationError::new(
                "query",
                format!(
                    "query holds {} bytes; at most {MAX_RERANK_QUERY_BYTES} are allowed",
                    req.query.len()
                ),
            ));
        }
        let documents = documents(req.documents)?;
        let top_n = match req.top_n {
            None => documents.len(),
            Some(n) => usize::try_from(n)
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| {
                    ValidationError::new(
                        "top_n",
                        format!("top_n must be a positive integer (got {n})"),
                    )
                })?
                .min(documents.len()),
        };
        Ok(ValidRerankRequest {
            model: req.model,
            top_n,
            return_documents: req.return_documents.unwrap_or(true),
            rerank: RerankRequest {
                query: req.query,
                documents,
                client: None,
                background: false,
            },
        })
    }
}

fn invalid(param: impl Into<String>, message: impl Into<String>) -> ValidationError {
    ValidationError::new(param, message)
}

/// `documents`: an array of strings or of objects with a `text`, none
/// empty, within the request's limits.
fn documents(documents: Value) -> Result<Vec<String>, ValidationError> {
    let Value::Array(items) = documents else {
        return Err(invalid(
            "documents",
            "documents must be an array of strings or of objects with a `text`",
        ));
    };
    if items.is_empty() {
        return Err(invalid("documents", "documents must not be an empty array"));
    }
    if items.len() > MAX_RERANK_DOCUMENTS {
        return Err(invalid(
            "documents",
            format!(
                "documents may hold at most {MAX_RERANK_DOCUMENTS} documents (got {})",
                items.len()
            ),
        ));
    }
    let mut total = 0;
    let mut texts = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("documents[{i}]");
        let text = match item {
            Value::String(text) => text,
            Value::Object(mut fields) => match fields.remove("text") {
                Some(Value::String(text)) => text,
                _ => {
                    return Err(invalid(
                        format!("{at}.text"),
                        format!("{at} must have a `text` that is a string"),
                    ));
                }
            },
            other => {
                return Err(invalid(
                    at.as_str(),
                    format!("{at} must be a string or an object with a `text` (got {other})"),
                ));
            }
        };
        if text.is_empty() {
            return Err(invalid(at.as_str(), format!("{at} must not be empty")));
        }
        if text.len() > MAX_RERANK_DOCUMENT_BYTES {
            return Err(invalid(
                at.as_str(),
                format!(
                    "{at} holds {} bytes; at most {MAX_RERANK_DOCUMENT_BYTES} are allowed",
                    text.len()
                ),
            ));
        }
        total += text.len();
        if total > MAX_RERANK_BYTES {
            return Err(invalid(
                "documents",
                format!("the documents hold more than {MAX_RERANK_BYTES} bytes together"),
            ));
        }
        texts.push(text);
    }
    Ok(texts)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn valid(body: Value) -> Result<ValidRerankRequest, ValidationError> {
        ValidRerankRequest::try_from(
            serde_json::from_value::<svc_api::RerankRequest>(body).unwrap(),
        )
    }

    fn refused(body: Value) -> String {
        valid(body).unwrap_err().param
    }

    #[test]
    fn documents_are_strings_or_objects_with_a_text() {
        let r = valid(json!({"model": "m", "query": "q",
            "documents": ["a", {"text": "b", "title": "t"}], "top_n": 5}))
        .unwrap();
        assert_eq!(r.rerank.documents, ["a", "b"]);
        assert_eq!(r.top_n, 2, "top_n beyond the documents is all of them");
        assert!(r.return_documents);
        let r = valid(
            json!({"model": "m", "query": "q", "documents": ["a", "b", "c"],
            "top_n": 1, "return_documents": false}),
        )
        .unwrap();
        assert_eq!((r.top_n, r.return_documents), (1, false));
    }

    #[test]
    fn each_wrong_field_is_named() {
        let doc = |d: Value| json!({"model": "m", "query": "q", "documents": d});
        assert_eq!(refused(doc(json!([]))), "documents");
        assert_eq!(refused(doc(json!("a"))), "documents");
        assert_eq!(refused(doc(json!(["a", ""]))), "documents[1]");
        assert_eq!(refused(doc(json!(["a", 3]))), "documents[1]");
        assert_eq!(
            refused(doc(json!(["a", {"title": "x"}]))),
            "documents[1].text"
        );
        assert_eq!(
            refused(doc(json!(["a", "x".repeat(MAX_RERANK_DOCUMENT_BYTES + 1)]))),
            "documents[1]"
        );
        assert_eq!(
            refused(doc(json!(vec!["a"; MAX_RERANK_DOCUMENTS + 1]))),
            "documents"
        );
        assert!(valid(doc(json!(vec!["a"; MAX_RERANK_DOCUMENTS]))).is_ok());
        assert_eq!(
            refused(json!({"model": "m", "query": "", "documents": ["a"]})),
            "query"
        );
        assert_eq!(
            refused(json!({"model": "m", "query": "q", "documents": ["a"], "top_n": 0})),
            "top_n"
        );
        assert_eq!(
            refused(json!({"model": " ", "query": "q", "documents": ["a"]})),
            "model"
        );
    }
}
