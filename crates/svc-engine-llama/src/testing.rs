//! Test support (feature `testing`): a small GGUF writer and a tiny
//! llama-architecture model whose greedy reply is known in advance.
//!
//! The model has a real byte-level BPE (`gpt2`) vocabulary with merges, a
//! ChatML template and `<|im_end|>` as end of turn, and random weights in two
//! transformer layers. Its embeddings and output layer are built so that the
//! most likely next token is a fixed successor of the current one: greedy
//! decoding after the assistant header spells out a scripted reply, while
//! temperature sampling wanders off it (so seeds matter). The random layers
//! add small context-dependent noise, so attention and the KV cache are
//! really exercised. Nothing here is used outside tests.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

/// ChatML, the template the tiny model carries.
pub const TINY_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// A value in GGUF metadata.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    StrArray(Vec<String>),
    I32Array(Vec<i32>),
}

impl GgufValue {
    fn type_id(&self) -> u32 {
        match self {
            GgufValue::U32(_) => 4,
            GgufValue::I32(_) => 5,
            GgufValue::F32(_) => 6,
            GgufValue::Bool(_) => 7,
            GgufValue::Str(_) => 8,
            GgufValue::StrArray(_) | GgufValue::I32Array(_) => 9,
        }
    }
}

/// Writes GGUF version 3 files with F32 tensors (and tensors of other types
/// given as raw bytes).
#[derive(Debug, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<(String, Vec<u64>, TensorData)>,
}

/// A tensor's data.
#[derive(Debug, Clone)]
enum TensorData {
    F32(Vec<f32>),
    /// A ggml type id and the data in that type.
    Raw(u32, Vec<u8>),
}

impl TensorData {
    fn ggml_type(&self) -> u32 {
        match self {
            TensorData::F32(_) => GGML_TYPE_F32,
            TensorData::Raw(t, _) => *t,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        match self {
            TensorData::F32(data) => data.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::Raw(_, bytes) => bytes.clone(),
        }
    }
}

const ALIGNMENT: usize = 32;
const GGML_TYPE_F32: u32 = 0;

impl GgufWriter {
    /// An empty file.
    pub fn new() -> Self {
        GgufWriter::default()
    }

    /// Adds a metadata entry.
    pub fn metadata(&mut self, key: &str, value: GgufValue) -> &mut Self {
        self.metadata.push((key.to_owned(), value));
        self
    }

    /// Adds an F32 tensor; `dims` in ggml order (the fastest-moving first).
    pub fn tensor(&mut self, name: &str, dims: &[u64], data: Vec<f32>) -> &mut Self {
        debug_assert_eq!(dims.iter().product::<u64>() as usize, data.len(), "{name}");
        self.tensors
            .push((name.to_owned(), dims.to_vec(), TensorData::F32(data)));
        self
    }

    /// Adds a tensor of ggml type `ggml_type` whose data is already encoded.
    pub fn raw_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ggml_type: u32,
        data: Vec<u8>,
    ) -> &mut Self {
        self.tensors.push((
            name.to_owned(),
            dims.to_vec(),
            TensorData::Raw(ggml_type, data),
        ));
        self
    }

    /// The same file with every F32 matrix whose rows are a multiple of 32
    /// values quantized to Q4_1 (as llama.cpp's quantizer does it).
    pub fn with_q4_1_matrices(mut self) -> Self {
        for (_, dims, data) in &mut self.tensors {
            if let TensorData::F32(values) = data
                && dims.len() >= 2
                && dims[0] % 32 == 0
            {
                *data = TensorData::Raw(crate::repack::GGML_TYPE_Q4_1, quantize_q4_1(values));
            }
        }
        self
    }

    /// The alignment of tensor data: `general.alignment` when set, else 32.
    fn alignment(&self) -> usize {
        self.metadata
            .iter()
            .find_map(|(k, v)| match v {
                GgufValue::U32(a) if k == "general.alignment" => Some(*a as usize),
                _ => None,
            })
            .unwrap_or(ALIGNMENT)
    }

    /// The whole file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let align = self.alignment();
        let padded = |n: usize| n.div_ceil(align) * align;
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_str(&mut out, key);
            out.extend_from_slice(&value.type_id().to_le_bytes());
            put_value(&mut out, value);
        }
        let mut offset = 0usize;
        for (name, dims, data) in &self.tensors {
            put_str(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&data.ggml_type().to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset += padded(data.bytes().len());
        }
        out.resize(padded(out.len()), 0);
        for (_, _, data) in &self.tensors {
            let start = out.len();
            let bytes = data.bytes();
            out.extend_from_slice(&bytes);
            out.resize(start + padded(bytes.len()), 0);
        }
        out
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        let mut file = std::fs::File::create(path)?;
        file.write_all(&self.to_bytes())?;
        file.sync_all()
    }
}

/// `values` (a multiple of 32 of them) as Q4_1 blocks, the way ggml's
/// `quantize_row_q4_1_ref` makes them: d = (max - min) / 15, m = min.
pub fn quantize_q4_1(values: &[f32]) -> Vec<u8> {
    use crate::repack::f32_to_f16;
    debug_assert_eq!(values.len() % 32, 0);
    let mut out = Vec::with_capacity(values.len() / 32 * 20);
    for block in values.chunks_exact(32) {
        let min = block.iter().copied().fold(f32::INFINITY, f32::min);
        let max = block.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
        out.extend_from_slice(&f32_to_f16(min).to_le_bytes());
        let q = |x: f32| (((x - min) * id + 0.5) as i8).min(15) as u8;
        for j in 0..16 {
            out.push(q(block[j]) | (q(block[j + 16]) << 4));
        }
    }
    out
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, value: &GgufValue) {
    match value {
        GgufValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::Bool(v) => out.push(u8::from(*v)),
        GgufValue::Str(v) => put_str(out, v),
        GgufValue::StrArray(items) => {
            out.extend_from_slice(&8u32.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_str(out, item);
            }
        }
        GgufValue::I32Array(items) => {
            out.extend_from_slice(&5u32.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                out.extend_from_slice(&item.to_le_bytes());
            }
        }
    }
}

/// GPT-2's byte-to-character table of byte-level BPE.
pub fn byte_to_char() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut extra = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let code = if printable {
            u32::from(b)
        } else {
            extra += 1;
            255 + extra
        };
        table[b as usize] = char::from_u32(code).unwrap_or('\u{FFFD}');
    }
    table
}

fn byte_level(bytes: &[u8], table: &[char; 256]) -> String {
    bytes.iter().map(|&b| table[b as usize]).collect()
}

/// What follows the last scripted token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// `<|im_end|>`: the reply ends.
    EndOfTurn,
    /// The script starts over, so the reply goes on until a limit.
    Loop,
}

/// A tiny model whose greedy reply is `script` joined.
#[derive(Debug, Clone)]
pub struct TinyModel {
    /// The reply's tokens, as bytes (a token may hold part of a character).
    pub script: Vec<Vec<u8>>,
    /// What comes after the script.
    pub ending: Ending,
    /// Logit of the scripted successor; the others get noise of about `scale / 8`.
    pub logit_scale: f32,
    /// Seed of the random weights.
    pub seed: u64,
    /// The chat template the GGUF carries (`tokenizer.chat_template`).
    pub template: String,
}

/// Special tokens of the tiny vocabulary.
const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
const EOT_ID: usize = 2;
const N_EMBD: usize = 64;
const N_HEAD: usize = 4;
const N_HEAD_KV: usize = 2;
const N_FF: usize = 128;
const N_LAYER: usize = 2;
const HEAD_DIM: usize = N_EMBD / N_HEAD;

impl TinyModel {
    /// Replies "Hello, world! é 😀 end." then ends its turn. The "é" comes
    /// as two tokens (one byte each) and the "😀" as two tokens of two bytes.
    pub fn hello() -> Self {
        TinyModel {
            script: vec![
                b"Hel".to_vec(),
                b"lo".to_vec(),
                b",".to_vec(),
                b" wor".to_vec(),
                b"ld".to_vec(),
                b"!".to_vec(),
                b" \xC3".to_vec(),
                b"\xA9".to_vec(),
                b" \xF0\x9F".to_vec(),
                b"\x98\x80".to_vec(),
                b" end".to_vec(),
                b".".to_vec(),
            ],
            ending: Ending::EndOfTurn,
            logit_scale: 10.0,
            seed: 0x5eed,
            template: TINY_TEMPLATE.to_owned(),
        }
    }

    /// A model whose greedy reply is `pieces` (one token each), then the end of its turn.
    pub fn scripted(pieces: &[&str]) -> Self {
        TinyModel {
            script: pieces.iter().map(|p| p.as_bytes().to_vec()).collect(),
            ..TinyModel::hello()
        }
    }

    /// The same model with another chat template.
    pub fn with_template(self, template: &str) -> Self {
        TinyModel {
            template: template.to_owned(),
            ..self
        }
    }

    /// Like [`TinyModel::hello`], but the reply repeats forever.
    pub fn looping() -> Self {
        TinyModel {
            ending: Ending::Loop,
            ..TinyModel::hello()
        }
    }

    /// The greedy reply: the script once, as text.
    pub fn reply(&self) -> String {
        String::from_utf8_lossy(&self.script.concat()).into_owned()
    }

    /// Writes the model as a GGUF file.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        self.gguf().write(path)
    }

    /// The model as a GGUF writer.
    pub fn gguf(&self) -> GgufWriter {
        let table = byte_to_char();
        let mut tokens: Vec<String> = SPECIALS.iter().map(|s| (*s).to_owned()).collect();
        let mut types: Vec<i32> = vec![3; SPECIALS.len()];
        for b in 0..=255u8 {
            tokens.push(table[b as usize].to_string());
            types.push(1);
        }
        let mut ids: HashMap<String, usize> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i))
            .collect();
        let mut merges = Vec::new();
        let mut script_ids = Vec::new();
        for piece in &self.script {
            let text = byte_level(piece, &table);
            let chars: Vec<char> = text.chars().collect();
            let mut prefix = chars[0].to_string();
            for c in &chars[1..] {
                let next = format!("{prefix}{c}");
                if !ids.contains_key(&next) {
                    merges.push(format!("{prefix} {c}"));
                    ids.insert(next.clone(), tokens.len());
                    tokens.push(next.clone());
                    types.push(1);
                }
                prefix = next;
            }
            script_ids.push(ids[&text]);
        }
        let n_vocab = tokens.len();

        // Successors: the assistant header's "\n", then the script, then the ending.
        let newline = ids[&table[b'\n' as usize].to_string()];
        let mut successor: Vec<(usize, usize)> = Vec::new();
        let mut prev = newline;
        for &id in &script_ids {
            successor.push((prev, id));
            prev = id;
        }
        successor.push((
            prev,
            match self.ending {
                Ending::EndOfTurn => EOT_ID,
                Ending::Loop => script_ids[0],
            },
        ));

        let mut rng = SplitMix(self.seed);
        let embd: Vec<f32> = (0..n_vocab * N_EMBD)
            .map(|_| if rng.next() & 1 == 0 { 1.0 } else { -1.0 })
            .collect();
        let mut output = vec![0.0f32; n_vocab * N_EMBD];
        let scale = self.logit_scale / N_EMBD as f32;
        for &(from, to) in &successor {
            for k in 0..N_EMBD {
                output[to * N_EMBD + k] += scale * embd[from * N_EMBD + k];
            }
        }

        let mut w = GgufWriter::new();
        w.metadata("general.architecture", GgufValue::Str("llama".into()))
            .metadata("general.name", GgufValue::Str("svc tiny test model".into()))
            .metadata("llama.context_length", GgufValue::U32(4096))
            .metadata("llama.embedding_length", GgufValue::U32(N_EMBD as u32))
            .metadata("llama.block_count", GgufValue::U32(N_LAYER as u32))
            .metadata("llama.feed_forward_length", GgufValue::U32(N_FF as u32))
            .metadata("llama.attention.head_count", GgufValue::U32(N_HEAD as u32))
            .metadata(
                "llama.attention.head_count_kv",
                GgufValue::U32(N_HEAD_KV as u32),
            )
            .metadata(
                "llama.attention.layer_norm_rms_epsilon",
                GgufValue::F32(1e-5),
            )
            .metadata(
                "llama.rope.dimension_count",
                GgufValue::U32(HEAD_DIM as u32),
            )
            .metadata("llama.rope.freq_base", GgufValue::F32(10000.0))
            .metadata("llama.vocab_size", GgufValue::U32(n_vocab as u32))
            .metadata("tokenizer.ggml.model", GgufValue::Str("gpt2".into()))
            .metadata("tokenizer.ggml.pre", GgufValue::Str("gpt-2".into()))
            .metadata("tokenizer.ggml.tokens", GgufValue::StrArray(tokens))
            .metadata("tokenizer.ggml.token_type", GgufValue::I32Array(types))
            .metadata("tokenizer.ggml.merges", GgufValue::StrArray(merges))
            .metadata("tokenizer.ggml.bos_token_id", GgufValue::U32(0))
            .metadata("tokenizer.ggml.eos_token_id", GgufValue::U32(EOT_ID as u32))
            .metadata("tokenizer.ggml.add_bos_token", GgufValue::Bool(false))
            .metadata(
                "tokenizer.chat_template",
                GgufValue::Str(self.template.clone()),
            );

        let e = N_EMBD as u64;
        let kv = (N_HEAD_KV * HEAD_DIM) as u64;
        let ff = N_FF as u64;
        let nv = n_vocab as u64;
        w.tensor("token_embd.weight", &[e, nv], embd);
        w.tensor("output_norm.weight", &[e], vec![1.0; N_EMBD]);
        w.tensor("output.weight", &[e, nv], output);
        for layer in 0..N_LAYER {
            let mut random = |n: u64| -> Vec<f32> { (0..n).map(|_| rng.small()).collect() };
            let name = |t: &str| format!("blk.{layer}.{t}.weight");
            w.tensor(&name("attn_norm"), &[e], vec![1.0; N_EMBD]);
            w.tensor(&name("attn_q"), &[e, e], random(e * e));
            w.tensor(&name("attn_k"), &[e, kv], random(e * kv));
            w.tensor(&name("attn_v"), &[e, kv], random(e * kv));
            w.tensor(&name("attn_output"), &[e, e], random(e * e));
            w.tensor(&name("ffn_norm"), &[e], vec![1.0; N_EMBD]);
            w.tensor(&name("ffn_gate"), &[e, ff], random(e * ff));
            w.tensor(&name("ffn_up"), &[e, ff], random(e * ff));
            w.tensor(&name("ffn_down"), &[ff, e], random(ff * e));
        }
        w
    }
}

/// A small deterministic generator (SplitMix64), so the test model is the same everywhere.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform with standard deviation 0.05.
    fn small(&mut self) -> f32 {
        let unit = (self.next() >> 40) as f32 / (1u64 << 24) as f32;
        (unit * 2.0 - 1.0) * 0.05 * 3f32.sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_is_gpt2s() {
        let t = byte_to_char();
        assert_eq!(t[b'A' as usize], 'A');
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[0xC3], 'Ã');
        let distinct: std::collections::HashSet<char> = t.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
    }

    #[test]
    fn gguf_header_and_alignment() {
        let bytes = TinyModel::hello().gguf().to_bytes();
        assert_eq!(&bytes[..4], b"GGUF");
        assert_eq!(bytes.len() % ALIGNMENT, 0);
    }
}
