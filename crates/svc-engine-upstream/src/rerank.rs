//! Reranking through an upstream: a [`RerankRequest`] as the body of a
//! Jina/Cohere-shaped rerank request (what vLLM, llama-server `--rerank`
//! and Cohere-compatible endpoints take) under the endpoint's own model
//! name, every document's score asked for and no text back; and the
//! upstream's results read back into [`Reranked`], checked: one score per
//! document, whatever order the upstream listed them in; its usage counted
//! as the larger of its report and svc's estimate.

use serde::{Deserialize, Serialize};
use svc_core::{RerankRequest, Reranked};

use crate::error::Failure;

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    query: &'a str,
    documents: &'a [String],
    top_n: usize,
    return_documents: bool,
}

/// The JSON body asking `model` at one endpoint for the scores of every
/// document of `request`.
pub(crate) fn body(request: &RerankRequest, model: &str) -> Vec<u8> {
    let body = Body {
        model,
        query: &request.query,
        documents: &request.documents,
        top_n: request.documents.len(),
        return_documents: false,
    };
    // A struct of strings and numbers always serializes.
    serde_json::to_vec(&body).unwrap_or_default()
}

#[derive(Deserialize)]
struct Results {
    results: Vec<Item>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Item {
    index: usize,
    relevance_score: f32,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
}

/// The upstream's answer to `request`; a body that is not one score per
/// document is the endpoint's fault (502, tried elsewhere).
pub(crate) fn parse(bytes: &[u8], request: &RerankRequest) -> Result<Reranked, Failure> {
    let bad = |why: String| Failure::BadResponse(format!("not rerank results: {why}"));
    let results: Results = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    let documents = request.documents.len();
    let mut scores: Vec<Option<f32>> = vec![None; documents];
    for item in results.results {
        match scores.get_mut(item.index) {
            Some(slot @ None) if item.relevance_score.is_finite() => {
                *slot = Some(item.relevance_score);
            }
            _ => {
                return Err(bad(format!(
                    "index {} out of range, repeated, or not a finite score",
                    item.index
                )));
            }
        }
    }
    let scores: Vec<f32> = scores.into_iter().flatten().collect();
    if scores.len() != documents {
        return Err(bad(format!(
            "{} scores for {documents} documents",
            scores.len()
        )));
    }
    // The upstream's count is taken only where it is above svc's own
    // estimate: an upstream that reports less (or 0) would otherwise set
    // what the request is charged.
    let prompt_tokens = results
        .usage
        .and_then(|u| u.prompt_tokens.or(u.total_tokens))
        .unwrap_or(0)
        .max(request.estimate_tokens());
    Ok(Reranked {
        scores,
        prompt_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(documents: usize) -> RerankRequest {
        RerankRequest {
            query: "q".into(),
            documents: vec!["d".into(); documents],
            ..RerankRequest::default()
        }
    }

    #[test]
    fn scores_come_back_in_the_documents_order() {
        let body =
            br#"{"results":[{"index":1,"relevance_score":0.9},{"index":0,"relevance_score":-2.5}],
            "usage":{"total_tokens":12}}"#;
        let reranked = parse(body, &request(2)).unwrap();
        assert_eq!(reranked.scores, [-2.5, 0.9]);
        assert_eq!(reranked.prompt_tokens, 12);
    }

    #[test]
    fn usage_is_never_below_the_estimate() {
        let request = RerankRequest {
            query: "a query of 20 bytes.".into(),
            documents: vec!["d".repeat(400); 3],
            ..RerankRequest::default()
        };
        // (5 + 100) tokens a document.
        assert_eq!(request.estimate_tokens(), 315);
        let results = r#"[{"index":0,"relevance_score":1},{"index":1,"relevance_score":1},{"index":2,"relevance_score":1}]"#;
        for (usage, charged) in [
            (r#"{"total_tokens":0}"#, 315),
            (r#"{"prompt_tokens":12,"total_tokens":12}"#, 315),
            ("null", 315),
            (r#"{"prompt_tokens":900}"#, 900),
        ] {
            let body = format!(r#"{{"results":{results},"usage":{usage}}}"#);
            let reranked = parse(body.as_bytes(), &request).unwrap();
            assert_eq!(reranked.prompt_tokens, charged, "{usage}");
        }
    }

    #[test]
    fn missing_or_repeated_scores_are_the_upstreams_fault() {
        for body in [
            &br#"{"results":[{"index":0,"relevance_score":0.9}]}"#[..],
            br#"{"results":[{"index":0,"relevance_score":0.9},{"index":0,"relevance_score":0.1}]}"#,
            br#"{"results":[{"index":0,"relevance_score":0.9},{"index":2,"relevance_score":0.1}]}"#,
            br#"{"data":[]}"#,
        ] {
            assert!(
                matches!(parse(body, &request(2)), Err(Failure::BadResponse(_))),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn the_body_asks_for_every_score_and_no_text() {
        let body: serde_json::Value = serde_json::from_slice(&body(&request(3), "up")).unwrap();
        assert_eq!(body["model"], "up");
        assert_eq!(body["top_n"], 3);
        assert_eq!(body["return_documents"], false);
        assert_eq!(body["documents"].as_array().unwrap().len(), 3);
    }
}
