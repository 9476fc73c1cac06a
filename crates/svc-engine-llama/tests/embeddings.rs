//! The embedder end to end: a tiny sentence-transformers BERT converted by
//! `svc_gguf::bert` (see `svc_engine_llama::testing::tiny_bert`) and run by
//! llama.cpp; and, with `SVC_TEST_EMBED_MODEL` (the default embedding
//! model, which `scripts/test.sh` pulls), its vectors against
//! sentence-transformers' own for the committed texts in
//! `tests/embeddings/reference.json`.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::print_stderr,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::path::PathBuf;

use svc_core::engine::{Capability, EmbedInput, EmbedRequest, Embedder, Engine, EngineError};
use svc_engine_llama::testing::{TINY_BERT_CONTEXT, TINY_BERT_DIMENSIONS, tiny_bert};
use svc_engine_llama::{LlamaEmbedder, is_embedding_model};
use tempfile::TempDir;

struct Fixture {
    embedder: LlamaEmbedder,
    _dir: TempDir,
}

fn tiny() -> Fixture {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("tiny-bert.gguf");
    tiny_bert().unwrap().write(&path).unwrap();
    assert!(is_embedding_model(&path));
    Fixture {
        embedder: LlamaEmbedder::load(&path, Some(2)).unwrap(),
        _dir: dir,
    }
}

fn texts(texts: &[&str]) -> EmbedRequest {
    EmbedRequest {
        inputs: texts
            .iter()
            .map(|t| EmbedInput::Text((*t).to_owned()))
            .collect(),
        dimensions: None,
        client: None,
        background: false,
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

fn invalid_param(e: EngineError) -> String {
    match e {
        EngineError::InvalidRequest { param, .. } => param.unwrap_or_default(),
        other => panic!("not a refusal: {other:?}"),
    }
}

#[tokio::test]
async fn vectors_have_the_models_length_and_unit_norm() {
    let f = tiny();
    assert_eq!(f.embedder.info().dimensions as usize, TINY_BERT_DIMENSIONS);
    assert!(f.embedder.info().normalize);
    let got = f
        .embedder
        .embed(texts(&["the cat sat on the mat.", "a red fish swims"]))
        .await
        .unwrap();
    assert_eq!(got.vectors.len(), 2);
    for v in &got.vectors {
        assert_eq!(v.len(), TINY_BERT_DIMENSIONS);
        let norm: f64 = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    }
    // [CLS] the cat sat on the mat . [SEP] and [CLS] a red fish swims [SEP].
    assert_eq!(got.prompt_tokens, 9 + 6);
    assert!(
        cosine(&got.vectors[0], &got.vectors[1]) < 0.999,
        "different texts, different vectors"
    );
}

#[tokio::test]
async fn an_input_gets_the_same_vector_alone_in_a_batch_and_as_tokens() {
    let f = tiny();
    let alone = f
        .embedder
        .embed(texts(&["the dog runs fast"]))
        .await
        .unwrap();
    let crowd = ["a blue fish", "the dog runs fast", "slow cat ?", "the mat"];
    // Many concurrent requests: their inputs are encoded in shared batches.
    let requests = (0..8).map(|_| f.embedder.embed(texts(&crowd)));
    for batch in futures::future::join_all(requests).await {
        let batch = batch.unwrap();
        assert!(cosine(&alone.vectors[0], &batch.vectors[1]) > 0.999_999);
        assert!(cosine(&alone.vectors[0], &batch.vectors[0]) < 0.999);
    }
    // Token ids: [CLS] and [SEP] are added when not given (ids of the tiny
    // vocabulary: 5 specials, then each word and its `##` piece).
    let word = |w: &str| {
        let i = svc_engine_llama::testing::TINY_BERT_WORDS
            .iter()
            .position(|x| *x == w)
            .unwrap();
        5 + 2 * i as u32
    };
    let ids: Vec<u32> = ["the", "dog", "runs", "fast"].map(word).to_vec();
    let by_ids = EmbedRequest {
        inputs: vec![
            EmbedInput::Tokens(ids.clone()),
            EmbedInput::Tokens([vec![2], ids, vec![3]].concat()),
        ],
        dimensions: None,
        client: None,
        background: false,
    };
    let got = f.embedder.embed(by_ids).await.unwrap();
    for v in &got.vectors {
        assert!(cosine(&alone.vectors[0], v) > 0.999_999);
    }
}

#[tokio::test]
async fn a_request_of_many_inputs_comes_back_in_order() {
    let f = tiny();
    let words = svc_engine_llama::testing::TINY_BERT_WORDS;
    let many: Vec<String> = (0..300)
        .map(|i| {
            format!(
                "{} {} {}",
                words[i % 16],
                words[(i / 16) % 16],
                words[(i * 7) % 16]
            )
        })
        .collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let all = f.embedder.embed(texts(&refs)).await.unwrap();
    assert_eq!(all.vectors.len(), 300);
    for i in [0, 17, 150, 299] {
        let one = f.embedder.embed(texts(&[refs[i]])).await.unwrap();
        assert!(
            cosine(&one.vectors[0], &all.vectors[i]) > 0.999_999,
            "input {i}"
        );
    }
}

#[tokio::test]
async fn inputs_beyond_the_context_or_vocabulary_and_other_lengths_are_refused() {
    let f = tiny();
    let long = vec!["cat"; TINY_BERT_CONTEXT].join(" ");
    let e = f.embedder.embed(texts(&["a", &long])).await.unwrap_err();
    assert_eq!(invalid_param(e.clone()), "input");
    assert!(e.to_string().contains("input[1]"), "{e}");
    let fits = vec!["cat"; TINY_BERT_CONTEXT - 2].join(" ");
    assert!(f.embedder.embed(texts(&[&fits])).await.is_ok());
    let bad_id = EmbedRequest {
        inputs: vec![EmbedInput::Tokens(vec![5, 100_000])],
        dimensions: None,
        client: None,
        background: false,
    };
    assert_eq!(
        invalid_param(f.embedder.embed(bad_id).await.unwrap_err()),
        "input"
    );
    let mut shorter = texts(&["a"]);
    shorter.dimensions = Some(8);
    assert_eq!(
        invalid_param(f.embedder.embed(shorter).await.unwrap_err()),
        "dimensions"
    );
    let mut same = texts(&["a"]);
    same.dimensions = Some(TINY_BERT_DIMENSIONS as u32);
    assert!(f.embedder.embed(same).await.is_ok());
    // It offers embeddings and nothing else: asked for text, the client's
    // 400 naming `model`.
    let engine: &dyn Engine = &f.embedder;
    assert_eq!(engine.offered(), vec![Capability::Embedding]);
    let chat = engine.generating("svc-embed").err().unwrap();
    assert_eq!(invalid_param(chat), "model");
}

#[tokio::test]
async fn a_chat_model_is_not_an_embedding_model() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("tiny.gguf");
    svc_engine_llama::testing::TinyModel::hello()
        .write(&path)
        .unwrap();
    assert!(!is_embedding_model(&path));
    assert!(LlamaEmbedder::load(&path, Some(2)).is_err());
}

/// The committed texts and sentence-transformers' vectors for them.
#[derive(serde::Deserialize)]
struct Reference {
    texts: Vec<String>,
    vectors: Vec<Vec<f32>>,
    token_counts: Vec<u64>,
}

fn reference_model() -> Option<PathBuf> {
    match std::env::var_os("SVC_TEST_EMBED_MODEL") {
        Some(path) => Some(PathBuf::from(path)),
        None => {
            eprintln!("SVC_TEST_EMBED_MODEL is not set: skipping the reference vectors");
            None
        }
    }
}

#[tokio::test]
async fn the_default_models_vectors_match_sentence_transformers() {
    let Some(path) = reference_model() else {
        return;
    };
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/embeddings/reference.json"
    );
    let reference: Reference =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let embedder = LlamaEmbedder::load(&path, Some(2)).unwrap();
    assert_eq!(embedder.info().dimensions, 384);
    let refs: Vec<&str> = reference.texts.iter().map(String::as_str).collect();
    let got = embedder.embed(texts(&refs)).await.unwrap();
    let mut worst = 1.0f64;
    for (i, (mine, theirs)) in got.vectors.iter().zip(&reference.vectors).enumerate() {
        let c = cosine(mine, theirs);
        worst = worst.min(c);
        assert!(
            c >= 0.999,
            "text {i} ({:?}): cosine {c}",
            reference.texts[i]
        );
        let norm: f64 = mine
            .iter()
            .map(|x| f64::from(*x).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!(
            (norm - 1.0).abs() < 1e-4,
            "normalised as the model's Normalize module says"
        );
    }
    eprintln!("worst cosine against sentence-transformers: {worst:.6}");
    assert_eq!(
        got.prompt_tokens,
        reference.token_counts.iter().sum::<u64>()
    );
}
