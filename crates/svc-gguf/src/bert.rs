//! A sentence-transformers BERT model (`config.json`, `tokenizer.json`,
//! `model.safetensors`, `modules.json` and the pooling config, as the
//! sentence-transformers library saves one) to a GGUF file that llama.cpp
//! runs as an embedding model: architecture `bert`, the WordPiece
//! vocabulary written the way llama.cpp's WPM tokenizer reads it (a word's
//! first piece behind a phantom space, `##` pieces bare), the pooling the
//! model's pooling config names, and whether its last module normalises the
//! vectors (`svc.embedding.normalize`, read by svc's embedder).
//!
//! The weights are copied as they are (F32 in, F32 out): the file is the
//! model, with nothing rounded away.

use std::collections::HashMap;

use serde_json::Value;

use crate::{GgufWriter, MetaValue};

/// The GGUF key saying whether vectors are scaled to length 1 after
/// pooling (sentence-transformers' `Normalize` module).
pub const NORMALIZE_KEY: &str = "svc.embedding.normalize";

/// llama.cpp's pooling types, as `bert.pooling_type` stores them.
const POOLING_MEAN: u32 = 1;
const POOLING_CLS: u32 = 2;

/// ggml's token types (`tokenizer.ggml.token_type`).
const TOKEN_NORMAL: i32 = 1;
const TOKEN_CONTROL: i32 = 3;
const TOKEN_USER_DEFINED: i32 = 4;

/// The files of a sentence-transformers model folder that the conversion reads.
#[derive(Debug, Clone, Copy)]
pub struct SentenceTransformerFiles<'a> {
    /// `config.json`: the BERT hyperparameters.
    pub config: &'a [u8],
    /// `tokenizer.json`: the WordPiece vocabulary and its normaliser.
    pub tokenizer: &'a [u8],
    /// `modules.json`: whether a `Normalize` module follows the pooling.
    pub modules: &'a [u8],
    /// `1_Pooling/config.json` (or wherever `modules.json` puts the pooling).
    pub pooling: &'a [u8],
    /// `model.safetensors`: the weights.
    pub weights: &'a [u8],
    /// The name written as `general.name`.
    pub name: &'a str,
}

/// The GGUF of the model in `files`, or why it cannot be converted.
pub fn sentence_transformer_to_gguf(
    files: &SentenceTransformerFiles,
) -> Result<GgufWriter, String> {
    let config: Value = json(files.config, "config.json")?;
    let tokenizer: Value = json(files.tokenizer, "tokenizer.json")?;
    let modules: Value = json(files.modules, "modules.json")?;
    let pooling: Value = json(files.pooling, "the pooling config")?;
    let model_type = config["model_type"].as_str().unwrap_or_default();
    if model_type != "bert" {
        return Err(format!(
            "config.json: model_type is {model_type:?}, not \"bert\""
        ));
    }
    let hp = |key: &str| -> Result<u32, String> {
        config[key]
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| format!("config.json has no {key}"))
    };
    let (embd, layers, heads, ff, ctx) = (
        hp("hidden_size")?,
        hp("num_hidden_layers")?,
        hp("num_attention_heads")?,
        hp("intermediate_size")?,
        hp("max_position_embeddings")?,
    );
    let type_vocab = hp("type_vocab_size").unwrap_or(2);
    let eps = config["layer_norm_eps"].as_f64().unwrap_or(1e-12) as f32;
    if config["hidden_act"].as_str().is_some_and(|a| a != "gelu") {
        return Err("config.json: only hidden_act \"gelu\" is supported".into());
    }
    let pooling_type = if pooling["pooling_mode_mean_tokens"].as_bool() == Some(true) {
        POOLING_MEAN
    } else if pooling["pooling_mode_cls_token"].as_bool() == Some(true) {
        POOLING_CLS
    } else {
        return Err("the pooling config asks for neither mean nor CLS pooling".into());
    };
    let normalize = modules.as_array().is_some_and(|m| {
        m.iter().any(|module| {
            module["type"]
                .as_str()
                .is_some_and(|t| t.ends_with(".Normalize"))
        })
    });

    let mut out = GgufWriter::new();
    out.metadata("general.architecture", "bert")
        .metadata("general.name", files.name)
        .metadata("bert.context_length", ctx)
        .metadata("bert.embedding_length", embd)
        .metadata("bert.feed_forward_length", ff)
        .metadata("bert.block_count", layers)
        .metadata("bert.attention.head_count", heads)
        .metadata("bert.attention.layer_norm_epsilon", eps)
        .metadata("bert.attention.causal", false)
        .metadata("bert.pooling_type", pooling_type)
        .metadata(NORMALIZE_KEY, normalize);
    vocabulary(&mut out, &tokenizer, type_vocab)?;
    weights(&mut out, files.weights, layers)?;
    Ok(out)
}

fn json(bytes: &[u8], what: &str) -> Result<Value, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("{what} is not JSON: {e}"))
}

/// The WordPiece vocabulary in llama.cpp's form, its special tokens and
/// its normaliser's settings.
fn vocabulary(out: &mut GgufWriter, tokenizer: &Value, type_vocab: u32) -> Result<(), String> {
    let model = &tokenizer["model"];
    if model["type"].as_str() != Some("WordPiece") {
        return Err("tokenizer.json: only a WordPiece tokenizer is supported".into());
    }
    let prefix = model["continuing_subword_prefix"].as_str().unwrap_or("##");
    let vocab = model["vocab"]
        .as_object()
        .ok_or("tokenizer.json has no vocabulary")?;
    let mut tokens: Vec<Option<&str>> = vec![None; vocab.len()];
    for (token, id) in vocab {
        let slot = id
            .as_u64()
            .and_then(|id| tokens.get_mut(usize::try_from(id).ok()?))
            .ok_or_else(|| format!("tokenizer.json: token {token:?} has id {id} out of range"))?;
        *slot = Some(token);
    }
    let added: HashMap<&str, bool> = tokenizer["added_tokens"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| Some((t["content"].as_str()?, t["special"].as_bool()?)))
        .collect();
    let mut list = Vec::with_capacity(tokens.len());
    let mut types = Vec::with_capacity(tokens.len());
    for (id, token) in tokens.iter().enumerate() {
        let token = token.ok_or_else(|| format!("tokenizer.json: no token has id {id}"))?;
        let (text, kind) = match added.get(token) {
            Some(true) => (token.to_owned(), TOKEN_CONTROL),
            Some(false) => (token.to_owned(), TOKEN_USER_DEFINED),
            None => match token.strip_prefix(prefix) {
                Some(piece) => (piece.to_owned(), TOKEN_NORMAL),
                // llama.cpp's WPM tokenizer starts every word with U+2581.
                None => (format!("\u{2581}{token}"), TOKEN_NORMAL),
            },
        };
        list.push(MetaValue::Str(text.into_bytes()));
        types.push(MetaValue::I32(kind));
    }
    let special = |name: &str| -> Result<u32, String> {
        vocab
            .get(name)
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| format!("tokenizer.json has no {name} token"))
    };
    let normalizer = &tokenizer["normalizer"];
    let lowercase = normalizer["lowercase"].as_bool().unwrap_or(false);
    // BERT's normaliser strips accents when it lowercases unless told otherwise.
    let strip_accents = normalizer["strip_accents"].as_bool().unwrap_or(lowercase);
    out.metadata("tokenizer.ggml.model", "bert")
        .metadata("tokenizer.ggml.tokens", MetaValue::Array(8, list))
        .metadata("tokenizer.ggml.token_type", MetaValue::Array(5, types))
        .metadata("tokenizer.ggml.token_type_count", type_vocab)
        .metadata("tokenizer.ggml.bos_token_id", special("[CLS]")?)
        .metadata("tokenizer.ggml.seperator_token_id", special("[SEP]")?)
        .metadata("tokenizer.ggml.unknown_token_id", special("[UNK]")?)
        .metadata("tokenizer.ggml.padding_token_id", special("[PAD]")?)
        .metadata("tokenizer.ggml.mask_token_id", special("[MASK]")?)
        .metadata("tokenizer.ggml.normalizer.lowercase", lowercase)
        .metadata("tokenizer.ggml.normalizer.strip_accents", strip_accents);
    Ok(())
}

/// One tensor of a safetensors file: its shape and its F32 values.
struct Tensor {
    shape: Vec<u64>,
    values: Vec<f32>,
}

/// The F32 tensors of a safetensors file, by name (a `bert.` prefix removed).
fn safetensors(bytes: &[u8]) -> Result<HashMap<String, Tensor>, String> {
    let len = bytes
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
        .ok_or("model.safetensors is shorter than its header")?;
    let header_end = usize::try_from(len)
        .ok()
        .and_then(|len| len.checked_add(8))
        .filter(|&end| end <= bytes.len())
        .ok_or("model.safetensors: its header runs past the file")?;
    let header: serde_json::Map<String, Value> = serde_json::from_slice(&bytes[8..header_end])
        .map_err(|e| format!("model.safetensors: the header is not JSON: {e}"))?;
    let data = &bytes[header_end..];
    let mut tensors = HashMap::new();
    for (name, entry) in &header {
        if name == "__metadata__" || entry["dtype"].as_str() != Some("F32") {
            // Only `embeddings.position_ids` (I64) is not F32, and it is not needed.
            continue;
        }
        let shape: Vec<u64> = entry["shape"]
            .as_array()
            .map(|s| s.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        let range = entry["data_offsets"]
            .as_array()
            .and_then(|o| Some((o.first()?.as_u64()?, o.get(1)?.as_u64()?)))
            .and_then(|(a, b)| Some(usize::try_from(a).ok()?..usize::try_from(b).ok()?))
            .ok_or_else(|| format!("model.safetensors: {name} has no data offsets"))?;
        let raw = data
            .get(range)
            .filter(|raw| raw.len() as u64 == shape.iter().product::<u64>() * 4)
            .ok_or_else(|| format!("model.safetensors: {name}'s data does not fit its shape"))?;
        let values = raw
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let name = name.strip_prefix("bert.").unwrap_or(name).to_owned();
        tensors.insert(name, Tensor { shape, values });
    }
    Ok(tensors)
}

/// The weights under llama.cpp's names, in ggml's dimension order.
fn weights(out: &mut GgufWriter, bytes: &[u8], layers: u32) -> Result<(), String> {
    let mut tensors = safetensors(bytes)?;
    let mut names: Vec<(String, String)> = [
        ("embeddings.word_embeddings.weight", "token_embd.weight"),
        (
            "embeddings.token_type_embeddings.weight",
            "token_types.weight",
        ),
        (
            "embeddings.position_embeddings.weight",
            "position_embd.weight",
        ),
        ("embeddings.LayerNorm.weight", "token_embd_norm.weight"),
        ("embeddings.LayerNorm.bias", "token_embd_norm.bias"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .collect();
    for i in 0..layers {
        for (hf, gguf) in [
            ("attention.self.query", "attn_q"),
            ("attention.self.key", "attn_k"),
            ("attention.self.value", "attn_v"),
            ("attention.output.dense", "attn_output"),
            ("attention.output.LayerNorm", "attn_output_norm"),
            ("intermediate.dense", "ffn_up"),
            ("output.dense", "ffn_down"),
            ("output.LayerNorm", "layer_output_norm"),
        ] {
            for part in ["weight", "bias"] {
                names.push((
                    format!("encoder.layer.{i}.{hf}.{part}"),
                    format!("blk.{i}.{gguf}.{part}"),
                ));
            }
        }
    }
    for (hf, gguf) in names {
        let tensor = tensors
            .remove(&hf)
            .ok_or_else(|| format!("model.safetensors has no {hf}"))?;
        // Row-major [rows, columns] is ggml's [columns, rows]: the same bytes.
        let dims: Vec<u64> = tensor.shape.iter().rev().copied().collect();
        out.tensor(&gguf, &dims, tensor.values);
    }
    Ok(())
}
