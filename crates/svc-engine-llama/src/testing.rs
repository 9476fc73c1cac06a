//! Test support (feature `testing`): a tiny llama-architecture model whose
//! greedy reply is known in advance, written with `svc-gguf`'s writer.
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
use std::io;
use std::path::Path;

pub use svc_gguf::GgufWriter;

/// What `LlamaEngine::pause_admission` returns: admission resumes when it drops.
pub use crate::scheduler::Pause;

/// What `LlamaEngine::freeze_at_first_token` returns: the engine goes on
/// when it drops.
pub use crate::scheduler::Freeze;

/// Runs `requests`, a future that sends `n` requests to `engine`, as if
/// they all came at the same instant: the engine admits none until the
/// `n` are queued, then as many at once as its slots and per-client shares
/// allow. (Sent one after another, a busy machine may run each to its end
/// before the next arrives, and nothing is decoded together.)
///
/// # Panics
/// When the `n` requests are not all queued within a minute.
pub async fn together<T>(
    engine: &crate::LlamaEngine,
    n: u64,
    requests: impl std::future::Future<Output = T>,
) -> T {
    let pause = engine.pause_admission();
    let resume = async move {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while engine.stats().waiting_requests < n {
            assert!(
                std::time::Instant::now() < deadline,
                "the requests were never all queued"
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        drop(pause);
    };
    tokio::join!(requests, resume).0
}

/// Flash-attention nodes svc's attention kernel (`kernel/attention.cpp`)
/// has computed so far, counted over every engine of the process: it grows
/// while an engine with batch-invariant numerics decodes.
pub fn attention_kernel_nodes() -> u64 {
    crate::numerics::attention_kernel_nodes()
}

/// Matrix products svc's product kernel (`kernel/product.cpp`) has computed
/// so far, counted over every engine of the process: it grows while an
/// engine with batch-invariant numerics runs a model with Q4_0, Q4_1, Q5_0,
/// Q4_K or Q6_K matrices (or others ggml sums otherwise for several tokens).
pub fn product_kernel_nodes() -> u64 {
    crate::numerics::product_kernel_nodes()
}

/// How many of those were a mixture of experts' products (MUL_MAT_ID).
pub fn mixture_kernel_nodes() -> u64 {
    crate::numerics::mixture_kernel_nodes()
}

/// What plain llama.cpp computes for `tokens` of the GGUF at `path`: each
/// token's log probability given those before it (the first has none),
/// from one decode of them all, in micro-batches of `ubatch` tokens, in a
/// context of llama.cpp's defaults (its own kernels, not the engine's
/// batch-invariant ones) but for the KV cache's type: the reference a
/// scored prompt is checked against.
///
/// # Errors
/// When the model cannot be loaded or the tokens decoded.
pub fn llama_cpp_prompt_logprobs(
    path: &Path,
    tokens: &[llama_cpp_2::token::LlamaToken],
    ubatch: u32,
    kv_type: crate::KvType,
) -> Result<Vec<f32>, String> {
    use llama_cpp_2::context::params::LlamaContextParams;
    use llama_cpp_2::llama_batch::LlamaBatch;
    use llama_cpp_2::model::LlamaModel;
    use llama_cpp_2::model::params::LlamaModelParams;

    let backend = crate::backend::backend()?;
    let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default())
        .map_err(|e| format!("cannot load {}: {e}", path.display()))?;
    let n = u32::try_from(tokens.len()).map_err(|e| e.to_string())?;
    let params = LlamaContextParams::default()
        .with_n_ctx(std::num::NonZeroU32::new(n.max(1)))
        .with_n_batch(n.max(1))
        .with_n_ubatch(ubatch.clamp(1, n.max(1)));
    let params = match kv_type {
        crate::KvType::F16 => params,
        crate::KvType::Q8_0 => {
            use llama_cpp_2::context::params::KvCacheType;
            params
                .with_type_k(KvCacheType::Q8_0)
                .with_type_v(KvCacheType::Q8_0)
                .with_flash_attention_policy(llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_ENABLED)
        }
    };
    let mut ctx = model
        .new_context(backend, params)
        .map_err(|e| format!("cannot create the context: {e}"))?;
    let mut batch = LlamaBatch::new(tokens.len().max(1), 1);
    for (i, &token) in tokens.iter().enumerate() {
        let position = i32::try_from(i).map_err(|e| e.to_string())?;
        batch
            .add(token, position, &[0], true)
            .map_err(|e| e.to_string())?;
    }
    ctx.decode(&mut batch).map_err(|e| e.to_string())?;
    tokens
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, next)| {
            let at = i32::try_from(i - 1).map_err(|e| e.to_string())?;
            let id = usize::try_from(next.0).map_err(|e| e.to_string())?;
            Ok(
                crate::logprobs::token_logprob(ctx.get_logits_ith(at), id, 0, |_| Vec::new())
                    .logprob,
            )
        })
        .collect()
}

/// ChatML, the template the tiny model carries.
pub const TINY_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// A template of gpt-oss's family (harmony): messages in channels, the
/// effort in the system message, and a generation prompt of
/// `<|start|>assistant` and a newline (after which a [`TinyModel`]'s
/// script starts).
pub const HARMONY_TEMPLATE: &str = "<|start|>system<|message|>Reasoning: {{ reasoning_effort | default('medium') }}<|end|>{% for message in messages %}<|start|>{{ message['role'] }}{% if message['role'] == 'assistant' %}<|channel|>final{% endif %}<|message|>{{ message['content'] }}<|end|>{% endfor %}{% if add_generation_prompt %}<|start|>assistant\n{% endif %}";

/// Devstral Small 2507's chat template, as its GGUFs ship it.
pub const DEVSTRAL_TEMPLATE: &str =
    include_str!("../tests/templates/unsloth-mistral-Devstral-Small-2507.jinja");

/// Mistral's control tokens (Tekken's, those Devstral's template writes).
pub const MISTRAL_CONTROLS: &[&str] = &[
    "[INST]",
    "[/INST]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
];

/// Harmony's control tokens. With `<|return|>` and `<|call|>` in the
/// vocabulary, llama.cpp no longer takes `<|end|>` for the end of the
/// generation, as with gpt-oss's own.
pub const HARMONY_CONTROLS: &[&str] = &[
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|constrain|>",
    "<|return|>",
    "<|call|>",
];

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
    /// Whether the vocabulary has fill-in-the-middle tokens
    /// (`<|fim_prefix|>`, `<|fim_suffix|>`, `<|fim_middle|>`); the script
    /// then also follows `<|fim_middle|>`.
    pub fim: bool,
    /// More control tokens (a family's markers, such as `[TOOL_CALLS]`): a
    /// script piece that is one of them is that token.
    pub controls: Vec<String>,
    /// More user-defined tokens (as Qwen's `<tool_call>`: llama.cpp reads
    /// their text as the token even with special-token parsing off, and
    /// writes it whatever it is asked): a script piece that is one of them
    /// is that token.
    pub user_defined: Vec<String>,
    /// The token the script follows: the newline that ends an assistant
    /// header (ChatML's, harmony's here), or a control token.
    pub follows: String,
    /// More scripts, each after a control token of its own, so that what
    /// the prompt ends with chooses the reply (a
    /// Mistral-family prompt ends `[/INST]` after the user's turn and
    /// `[/TOOL_RESULTS]` after a tool's result). No piece may be in two
    /// scripts: a token has one successor.
    pub branches: Vec<(String, Vec<Vec<u8>>)>,
    /// The context the GGUF says the model was trained for.
    pub context_length: u32,
    /// A mixture of experts' feed-forward (as Mixtral's, in the llama
    /// architecture): how many experts a layer has and how many each token
    /// uses; `None` for one feed-forward a layer.
    pub experts: Option<(u32, u32)>,
}

/// The fill-in-the-middle tokens of a [`TinyModel`] with `fim`, in the
/// order prefix, suffix, middle.
pub const FIM_TOKENS: [&str; 3] = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"];

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
            fim: false,
            controls: Vec::new(),
            user_defined: Vec::new(),
            follows: "\n".to_owned(),
            branches: Vec::new(),
            context_length: 4096,
            experts: None,
        }
    }

    /// A model whose greedy reply is `pieces` (one token each), then the end of its turn.
    pub fn scripted(pieces: &[&str]) -> Self {
        TinyModel {
            script: pieces.iter().map(|p| p.as_bytes().to_vec()).collect(),
            ..TinyModel::hello()
        }
    }

    /// A model of gpt-oss's family: it reasons "Need the weather." in the
    /// analysis channel, then calls `get_weather` with
    /// `{"city": "Paris"}` on the commentary channel, its markers control
    /// tokens. (Its next token depends on its last only, so a marker's
    /// second use is written as text, which a parser reads the same.)
    pub fn harmony_calling() -> Self {
        TinyModel::scripted(&[
            "<|channel|>",
            "analysis",
            "<|message|>",
            "Need the ",
            "weather.",
            "<|end|>",
            "<|start|>",
            "assistant<|channel|>commentary to=functions.get_weather ",
            "<|constrain|>",
            "json<|message|>",
            "{\"city\": ",
            "\"Paris\"}",
        ])
        .with_controls(HARMONY_CONTROLS)
        .with_template(HARMONY_TEMPLATE)
    }

    /// A model of Devstral's family, with Devstral's template as its GGUF
    /// ships it (Unsloth's, which llama.cpp keeps) and Mistral's control
    /// tokens, for an agent such as Codex CLI: after the user's turn
    /// (`[/INST]`) it calls `exec_command` with `{"cmd": "echo
    /// svc-codex-ok"}`, and after the tool's result (`[/TOOL_RESULTS]`) it
    /// answers "Ran it: svc-codex-ok." Its context is 128k tokens, as
    /// Devstral's is: an agent's instructions are long, and this
    /// vocabulary spends a token on most bytes.
    pub fn devstral_agent() -> Self {
        TinyModel {
            branches: vec![(
                "[/TOOL_RESULTS]".to_owned(),
                ["Ran it: ", "svc-codex-ok", "."]
                    .iter()
                    .map(|p| p.as_bytes().to_vec())
                    .collect(),
            )],
            follows: "[/INST]".to_owned(),
            context_length: 131_072,
            ..TinyModel::scripted(&[
                "[TOOL_CALLS]",
                "exec_command",
                "[ARGS]",
                "{\"cmd\": ",
                "\"echo svc-codex-ok\"}",
            ])
            .with_controls(MISTRAL_CONTROLS)
            .with_template(DEVSTRAL_TEMPLATE)
        }
    }

    /// The same model with another chat template.
    pub fn with_template(self, template: &str) -> Self {
        TinyModel {
            template: template.to_owned(),
            ..self
        }
    }

    /// The same model with these control tokens (see [`TinyModel::controls`]).
    pub fn with_controls(self, controls: &[&str]) -> Self {
        TinyModel {
            controls: controls.iter().map(|c| (*c).to_owned()).collect(),
            ..self
        }
    }

    /// The same model with these user-defined tokens (see [`TinyModel::user_defined`]).
    pub fn with_user_defined(self, tokens: &[&str]) -> Self {
        TinyModel {
            user_defined: tokens.iter().map(|t| (*t).to_owned()).collect(),
            ..self
        }
    }

    /// The same model with a mixture of `count` experts a layer, `used` of
    /// them a token (see [`TinyModel::experts`]).
    pub fn with_experts(self, count: u32, used: u32) -> Self {
        TinyModel {
            experts: Some((count, used)),
            ..self
        }
    }

    /// The same model with fill-in-the-middle tokens (see [`TinyModel::fim`]).
    pub fn with_fim(self) -> Self {
        TinyModel { fim: true, ..self }
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
        let mut controls: HashMap<&[u8], usize> = HashMap::new();
        for control in &self.controls {
            controls.insert(control.as_bytes(), tokens.len());
            tokens.push(control.clone());
            types.push(3);
        }
        for user_defined in &self.user_defined {
            controls.insert(user_defined.as_bytes(), tokens.len());
            tokens.push(user_defined.clone());
            types.push(4);
        }
        let mut merges = Vec::new();
        // A script's pieces as token ids, each piece one token: a control
        // token, or the byte-level text with the merges that make it one.
        let mut pieces_ids = |script: &[Vec<u8>]| -> Vec<usize> {
            let mut script_ids = Vec::new();
            for piece in script {
                if let Some(&id) = controls.get(piece.as_slice()) {
                    script_ids.push(id);
                    continue;
                }
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
            script_ids
        };
        let script_ids = pieces_ids(&self.script);
        let branch_ids: Vec<Vec<usize>> = self
            .branches
            .iter()
            .map(|(_, script)| pieces_ids(script))
            .collect();
        let fim_ids: Vec<usize> = if self.fim {
            FIM_TOKENS
                .iter()
                .map(|t| {
                    tokens.push((*t).to_owned());
                    types.push(3);
                    tokens.len() - 1
                })
                .collect()
        } else {
            Vec::new()
        };
        let n_vocab = tokens.len();

        // Successors: the token each script follows, then the script, then
        // the ending.
        let token = |text: &str| match controls.get(text.as_bytes()) {
            Some(&id) => id,
            None => ids[&byte_level(text.as_bytes(), &table)],
        };
        let mut successor: Vec<(usize, usize)> = Vec::new();
        let mut chain = |start: usize, script_ids: &[usize]| {
            let mut prev = start;
            for &id in script_ids {
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
        };
        chain(token(&self.follows), &script_ids);
        for ((start, _), script_ids) in self.branches.iter().zip(&branch_ids) {
            chain(token(start), script_ids);
        }
        if let Some(&middle) = fim_ids.last() {
            successor.push((middle, script_ids[0]));
        }

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
        w.metadata("general.architecture", "llama")
            .metadata("general.name", "svc tiny test model")
            .metadata("llama.context_length", self.context_length)
            .metadata("llama.embedding_length", N_EMBD as u32)
            .metadata("llama.block_count", N_LAYER as u32)
            .metadata("llama.feed_forward_length", N_FF as u32)
            .metadata("llama.attention.head_count", N_HEAD as u32)
            .metadata("llama.attention.head_count_kv", N_HEAD_KV as u32)
            .metadata("llama.attention.layer_norm_rms_epsilon", 1e-5f32)
            .metadata("llama.rope.dimension_count", HEAD_DIM as u32)
            .metadata("llama.rope.freq_base", 10000.0f32)
            .metadata("llama.vocab_size", n_vocab as u32)
            .metadata("tokenizer.ggml.model", "gpt2")
            .metadata("tokenizer.ggml.pre", "gpt-2")
            .metadata("tokenizer.ggml.tokens", tokens)
            .metadata("tokenizer.ggml.token_type", types)
            .metadata("tokenizer.ggml.merges", merges)
            .metadata("tokenizer.ggml.bos_token_id", 0u32)
            .metadata("tokenizer.ggml.eos_token_id", EOT_ID as u32)
            .metadata("tokenizer.ggml.add_bos_token", false)
            .metadata("tokenizer.chat_template", self.template.clone());
        if let Some((count, used)) = self.experts {
            w.metadata("llama.expert_count", count)
                .metadata("llama.expert_used_count", used);
        }
        if let [pre, suf, mid] = fim_ids[..] {
            w.metadata("tokenizer.ggml.fim_pre_token_id", pre as u32)
                .metadata("tokenizer.ggml.fim_suf_token_id", suf as u32)
                .metadata("tokenizer.ggml.fim_mid_token_id", mid as u32);
        }

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
            if let Some((count, _)) = self.experts {
                let n = u64::from(count);
                w.tensor(&name("ffn_gate_inp"), &[e, n], random(e * n));
                w.tensor(&name("ffn_gate_exps"), &[e, ff, n], random(e * ff * n));
                w.tensor(&name("ffn_up_exps"), &[e, ff, n], random(e * ff * n));
                w.tensor(&name("ffn_down_exps"), &[ff, e, n], random(ff * e * n));
            } else {
                w.tensor(&name("ffn_gate"), &[e, ff], random(e * ff));
                w.tensor(&name("ffn_up"), &[e, ff], random(e * ff));
                w.tensor(&name("ffn_down"), &[ff, e], random(ff * e));
            }
        }
        w
    }
}

/// A small deterministic generator (SplitMix64), so the test model is the same everywhere.
/// The words of [`tiny_bert`]'s vocabulary (after its five specials, each
/// also as a `##` piece).
pub const TINY_BERT_WORDS: [&str; 16] = [
    "the", "cat", "dog", "sat", "on", "mat", "a", "red", "blue", "fish", "swims", "runs", "fast",
    "slow", ".", "?",
];

/// Hidden size of [`tiny_bert`]: the length of its vectors.
pub const TINY_BERT_DIMENSIONS: usize = 32;

/// Positions of [`tiny_bert`]: the most tokens an input may have.
pub const TINY_BERT_CONTEXT: usize = 16;

/// A tiny sentence-transformers BERT (2 layers, 32 dimensions, 4 heads,
/// random weights, mean pooling then `Normalize`) converted to GGUF by
/// `svc_gguf::bert`, as the default embedding model is: what the embedder's
/// tests run, and what checks that llama.cpp reads the converter's files.
pub fn tiny_bert() -> Result<GgufWriter, String> {
    let files = TinySentenceTransformer::new(7);
    svc_gguf::bert::sentence_transformer_to_gguf(&files.files())
}

/// The files of a tiny sentence-transformers model folder.
pub struct TinySentenceTransformer {
    pub config: Vec<u8>,
    pub tokenizer: Vec<u8>,
    pub modules: Vec<u8>,
    pub pooling: Vec<u8>,
    pub weights: Vec<u8>,
}

impl TinySentenceTransformer {
    pub fn new(seed: u64) -> Self {
        let (e, ff, layers) = (TINY_BERT_DIMENSIONS, 64usize, 2usize);
        let mut vocab: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        for word in TINY_BERT_WORDS {
            vocab.push(word.to_owned());
            vocab.push(format!("##{word}"));
        }
        let ids: serde_json::Map<String, serde_json::Value> = vocab
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), serde_json::Value::from(i)))
            .collect();
        let added: Vec<serde_json::Value> = vocab[..5]
            .iter()
            .enumerate()
            .map(|(i, t)| serde_json::json!({"id": i, "content": t, "special": true}))
            .collect();
        let tokenizer = serde_json::json!({
            "added_tokens": added,
            "normalizer": {"type": "BertNormalizer", "lowercase": true, "strip_accents": null},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "vocab": ids},
        });
        let config = serde_json::json!({
            "model_type": "bert", "hidden_size": e, "num_hidden_layers": layers,
            "num_attention_heads": 4, "intermediate_size": ff, "max_position_embeddings": TINY_BERT_CONTEXT,
            "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
        });
        let modules = serde_json::json!([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ]);
        let pooling =
            serde_json::json!({"word_embedding_dimension": e, "pooling_mode_mean_tokens": true});
        let mut rng = SplitMix(seed);
        let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
        let mut add = |name: String, shape: Vec<usize>, ones: bool| {
            let n = shape.iter().product();
            let values = (0..n)
                .map(|_| {
                    if ones {
                        1.0 + rng.small()
                    } else {
                        rng.small() * 8.0
                    }
                })
                .collect();
            tensors.push((name, shape, values));
        };
        add(
            "embeddings.word_embeddings.weight".into(),
            vec![vocab.len(), e],
            false,
        );
        add(
            "embeddings.position_embeddings.weight".into(),
            vec![TINY_BERT_CONTEXT, e],
            false,
        );
        add(
            "embeddings.token_type_embeddings.weight".into(),
            vec![2, e],
            false,
        );
        add("embeddings.LayerNorm.weight".into(), vec![e], true);
        add("embeddings.LayerNorm.bias".into(), vec![e], false);
        for i in 0..layers {
            let l = |part: &str| format!("encoder.layer.{i}.{part}");
            for (part, rows, cols) in [
                ("attention.self.query", e, e),
                ("attention.self.key", e, e),
                ("attention.self.value", e, e),
                ("attention.output.dense", e, e),
                ("intermediate.dense", ff, e),
                ("output.dense", e, ff),
            ] {
                add(l(&format!("{part}.weight")), vec![rows, cols], false);
                add(l(&format!("{part}.bias")), vec![rows], false);
            }
            for part in ["attention.output.LayerNorm", "output.LayerNorm"] {
                add(l(&format!("{part}.weight")), vec![e], true);
                add(l(&format!("{part}.bias")), vec![e], false);
            }
        }
        TinySentenceTransformer {
            config: config.to_string().into_bytes(),
            tokenizer: tokenizer.to_string().into_bytes(),
            modules: modules.to_string().into_bytes(),
            pooling: pooling.to_string().into_bytes(),
            weights: safetensors(&tensors),
        }
    }

    /// The files as the converter takes them.
    pub fn files(&self) -> svc_gguf::bert::SentenceTransformerFiles<'_> {
        svc_gguf::bert::SentenceTransformerFiles {
            config: &self.config,
            tokenizer: &self.tokenizer,
            modules: &self.modules,
            pooling: &self.pooling,
            weights: &self.weights,
            name: "tiny-bert",
        }
    }
}

/// A safetensors file of F32 `tensors` (name, row-major shape, values).
fn safetensors(tensors: &[(String, Vec<usize>, Vec<f32>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, shape, values) in tensors {
        let end = offset + values.len() * 4;
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let header = serde_json::Value::Object(header).to_string();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    for (_, _, values) in tensors {
        out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    }
    out
}

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
        assert_eq!(bytes.len() % 32, 0);
    }
}
