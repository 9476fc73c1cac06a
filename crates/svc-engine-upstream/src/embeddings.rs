//! Embeddings through an upstream: an [`EmbedRequest`] as the body of an
//! OpenAI embeddings request under the endpoint's own model name (vectors
//! asked for as floats; the server encodes them for its client), and the
//! upstream's list read back into [`Embeddings`], checked: one vector per
//! input, in the inputs' order whatever order the upstream listed them in;
//! its usage counted as the larger of its report and svc's estimate.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use svc_core::{EmbedInput, EmbedRequest, Embeddings};

use crate::error::Failure;

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    input: Vec<Value>,
    encoding_format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<u32>,
}

/// The JSON body asking `model` at one endpoint for `request`'s vectors.
pub(crate) fn body(request: &EmbedRequest, model: &str) -> Vec<u8> {
    let input = request
        .inputs
        .iter()
        .map(|input| match input {
            EmbedInput::Text(text) => Value::from(text.as_str()),
            EmbedInput::Tokens(ids) => Value::from(ids.clone()),
        })
        .collect();
    let body = Body {
        model,
        input,
        encoding_format: "float",
        dimensions: request.dimensions,
    };
    // A struct of strings, numbers and JSON values always serializes.
    serde_json::to_vec(&body).unwrap_or_default()
}

#[derive(Deserialize)]
struct List {
    data: Vec<Item>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Item {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vector,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
}

/// The upstream's answer to a request of `inputs` inputs; a body that is
/// not one vector per input is the endpoint's fault (502, tried elsewhere).
pub(crate) fn parse(bytes: &[u8], request: &EmbedRequest) -> Result<Embeddings, Failure> {
    let bad = |why: String| Failure::BadResponse(format!("not an embeddings list: {why}"));
    let list: List = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    let inputs = request.inputs.len();
    if list.data.len() != inputs {
        return Err(bad(format!(
            "{} vectors for {inputs} inputs",
            list.data.len()
        )));
    }
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; inputs];
    for (position, item) in list.data.into_iter().enumerate() {
        let index = item.index.unwrap_or(position);
        let vector = match item.embedding {
            Vector::Float(v) => v,
            Vector::Base64(text) => decode(&text).ok_or_else(|| bad("bad base64".into()))?,
        };
        match vectors.get_mut(index) {
            Some(slot @ None) => *slot = Some(vector),
            _ => return Err(bad(format!("index {index} out of range or repeated"))),
        }
    }
    let vectors: Vec<Vec<f32>> = vectors.into_iter().flatten().collect();
    if let Some(d) = request.dimensions
        && vectors.iter().any(|v| v.len() != d as usize)
    {
        return Err(bad(format!("vectors of another length than the {d} asked")));
    }
    // As for rerank: the upstream's count only where it is above svc's
    // estimate, so that an upstream reporting less (or 0) does not set
    // what the request is charged.
    let estimate: u64 = request.inputs.iter().map(EmbedInput::estimate_tokens).sum();
    let prompt_tokens = list
        .usage
        .and_then(|u| u.prompt_tokens)
        .unwrap_or(0)
        .max(estimate);
    Ok(Embeddings {
        vectors,
        prompt_tokens,
    })
}

fn decode(text: &str) -> Option<Vec<f32>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    if bytes.len() % 4 != 0 {
        return None;
    }
    Some(
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(n: usize) -> EmbedRequest {
        EmbedRequest {
            inputs: (0..n)
                .map(|i| EmbedInput::Text(format!("text {i}")))
                .collect(),
            dimensions: None,
            client: None,
            background: false,
        }
    }

    #[test]
    fn the_body_is_openais() {
        let mut r = request(1);
        r.inputs.push(EmbedInput::Tokens(vec![1, 2]));
        r.dimensions = Some(8);
        let body: Value = serde_json::from_slice(&body(&r, "bge")).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"model": "bge", "input": ["text 0", [1, 2]], "encoding_format": "float", "dimensions": 8})
        );
    }

    #[test]
    fn vectors_come_back_in_input_order() {
        let got = parse(
            br#"{"data":[{"index":1,"embedding":[2.0]},{"index":0,"embedding":"AACAPw=="}],"usage":{"prompt_tokens":7}}"#,
            &request(2),
        )
        .unwrap();
        assert_eq!(got.vectors, [vec![1.0], vec![2.0]]);
        assert_eq!(got.prompt_tokens, 7);
    }

    #[test]
    fn usage_is_never_below_the_estimate() {
        let request = EmbedRequest {
            inputs: vec![
                EmbedInput::Text("x".repeat(400)),
                EmbedInput::Tokens(vec![7; 50]),
            ],
            ..request(0)
        };
        let data = r#"[{"index":0,"embedding":[1.0]},{"index":1,"embedding":[2.0]}]"#;
        for (usage, charged) in [
            (r#"{"prompt_tokens":0}"#, 150),
            (r#"{"prompt_tokens":3}"#, 150),
            ("null", 150),
            (r#"{"prompt_tokens":700}"#, 700),
        ] {
            let body = format!(r#"{{"data":{data},"usage":{usage}}}"#);
            let got = parse(body.as_bytes(), &request).unwrap();
            assert_eq!(got.prompt_tokens, charged, "{usage}");
        }
    }

    #[test]
    fn a_list_that_does_not_match_the_inputs_is_the_upstreams_fault() {
        for body in [
            &br#"{"data":[{"index":0,"embedding":[1.0]}]}"#[..],
            br#"{"data":[{"index":0,"embedding":[1.0]},{"index":0,"embedding":[1.0]}]}"#,
            br#"{"data":[{"index":5,"embedding":[1.0]},{"index":0,"embedding":[1.0]}]}"#,
            br#"{"error":"no"}"#,
        ] {
            assert!(matches!(
                parse(body, &request(2)),
                Err(Failure::BadResponse(_))
            ));
        }
    }
}
