//! [`LlamaEmbedder`]: an embedding model (BERT and its kin, a GGUF with a
//! pooling type) run in-process by llama.cpp, behind svc-core's `Engine`
//! trait as `Embedder::embed`.
//!
//! Requests are tokenized on a blocking thread (never on an async worker),
//! checked against the model's context (an input far past it refused
//! before it is tokenized, see `fit`), and queued. One thread owns the
//! llama.cpp context and encodes batches of at most [`BATCH_TOKENS`]
//! tokens: each batch takes the next input of every waiting request in
//! turn, so the inputs of many clients are encoded together, and a request
//! of 2,048 inputs never holds back another's one input for longer than a
//! batch. A batch is the same unit of work as one chunk of a chat prompt.
//! Background requests (a batch's lines) are encoded only in batches no
//! interactive input waits for, so they hold an interactive request back
//! by at most the one batch already running. A request whose caller went
//! away is dropped between batches.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use async_trait::async_trait;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::token::LlamaToken;
use svc_core::engine::{
    EmbedInput, EmbedRequest, Embedder, Embeddings, Engine, EngineError, EngineStatus,
};
use tokio::sync::oneshot;

use crate::backend;
use crate::engine::LoadError;
use crate::fit::TextBound;

/// The most tokens one encode takes (every input must fit in one).
pub const BATCH_TOKENS: u32 = 512;
/// The most inputs one encode takes.
const BATCH_SEQUENCES: u32 = 64;
/// Requests that may wait; one more is refused as overloaded.
const QUEUE: usize = 256;

/// Whether the GGUF at `path` is an embedding model: its architecture
/// has a pooling type (`<arch>.pooling_type`), as BERT-family models do.
pub fn is_embedding_model(path: &Path) -> bool {
    let Ok(header) = svc_gguf::GgufHeader::read(path) else {
        return false;
    };
    let Some(arch) = header
        .get("general.architecture")
        .and_then(svc_gguf::MetaValue::as_str)
    else {
        return false;
    };
    header.get(&format!("{arch}.pooling_type")).is_some()
}

/// What was loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedderInfo {
    pub path: PathBuf,
    /// `general.name` from the GGUF, when present.
    pub name: Option<String>,
    /// Length of the vectors.
    pub dimensions: u32,
    /// The most tokens one input may have (the model's context, at most
    /// [`BATCH_TOKENS`]).
    pub max_input_tokens: u32,
    /// Whether vectors are scaled to length 1 (the model's `Normalize`).
    pub normalize: bool,
    pub vocab_size: u32,
    /// Host memory the model's weights take.
    pub memory_bytes: u64,
}

/// An in-process llama.cpp embedding engine.
pub struct LlamaEmbedder {
    model: Arc<LlamaModel>,
    /// The fewest tokens a text can make: an input far past the context is
    /// refused before it is tokenized (see `fit`).
    bound: TextBound,
    shared: Arc<Shared>,
    info: EmbedderInfo,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LlamaEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaEmbedder")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// One request's inputs, as tokens, and where its vectors go.
struct Job {
    inputs: Vec<Vec<LlamaToken>>,
    /// The next input to encode.
    next: usize,
    vectors: Vec<Vec<f32>>,
    reply: oneshot::Sender<Result<Vec<Vec<f32>>, EngineError>>,
    /// Work nobody waits on: encoded only when no interactive input waits.
    background: bool,
}

impl Job {
    fn waiting(&self) -> bool {
        self.next < self.inputs.len()
    }
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn close(&self) {
        let mut queue = self.lock();
        queue.closed = true;
        for job in queue.jobs.drain(..) {
            let _ = job
                .reply
                .send(Err(EngineError::Unavailable("the embedder stopped".into())));
        }
        self.ready.notify_all();
    }
}

impl LlamaEmbedder {
    /// Loads the model and starts the embedder's thread with `threads`
    /// llama.cpp threads (`None`: every core). Blocks while the file is
    /// read (call it from `spawn_blocking` inside a runtime).
    pub fn load(path: &Path, threads: Option<u32>) -> Result<Self, LoadError> {
        let backend = backend::backend().map_err(LoadError::Unsupported)?;
        if !path.is_file() {
            return Err(LoadError::Model {
                path: path.to_owned(),
                reason: "no such file".into(),
            });
        }
        if !is_embedding_model(path) {
            return Err(LoadError::Model {
                path: path.to_owned(),
                reason: "not an embedding model (its GGUF names no pooling type)".into(),
            });
        }
        let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default())
            .map_err(|e| LoadError::Model {
                path: path.to_owned(),
                reason: e.to_string(),
            })?;
        let model = Arc::new(model);
        let normalize = model
            .meta_val_str(svc_gguf::bert::NORMALIZE_KEY)
            .map_or(true, |v| v != "false");
        let trained = model.n_ctx_train();
        let max_input_tokens = if trained == 0 {
            BATCH_TOKENS
        } else {
            trained.min(BATCH_TOKENS)
        };
        let info = EmbedderInfo {
            path: path.to_owned(),
            name: model.meta_val_str("general.name").ok(),
            dimensions: u32::try_from(model.n_embd()).unwrap_or(0),
            max_input_tokens,
            normalize,
            vocab_size: u32::try_from(model.n_vocab()).unwrap_or(0),
            memory_bytes: model.size(),
        };
        let threads = threads.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            |n| n as usize,
        );
        let threads = i32::try_from(threads.max(1)).unwrap_or(i32::MAX);
        let shared = Arc::new(Shared::default());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("llama-embedder".into())
            .spawn({
                let (model, shared, normalize) =
                    (Arc::clone(&model), Arc::clone(&shared), normalize);
                move || run(&model, threads, &shared, normalize, &ready_tx)
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => {
                let _ = thread.join();
                return Err(LoadError::Context(reason));
            }
            Err(_) => {
                let _ = thread.join();
                return Err(LoadError::Context(
                    "the embedder thread ended while starting".into(),
                ));
            }
        }
        tracing::info!(
            path = %info.path.display(),
            name = info.name.as_deref().unwrap_or(""),
            dimensions = info.dimensions,
            max_input_tokens,
            normalize,
            threads,
            "llama.cpp embedder ready"
        );
        Ok(LlamaEmbedder {
            bound: TextBound::of(&model),
            model,
            shared,
            info,
            thread: Some(thread),
        })
    }

    /// What was loaded.
    pub fn info(&self) -> &EmbedderInfo {
        &self.info
    }

    fn submit(&self, job: Job) -> Result<(), EngineError> {
        let mut queue = self.shared.lock();
        if queue.closed {
            return Err(EngineError::Unavailable("the embedder stopped".into()));
        }
        if queue.jobs.len() >= QUEUE {
            return Err(EngineError::Overloaded(format!(
                "{QUEUE} embedding requests are waiting; try again shortly"
            )));
        }
        queue.jobs.push_back(job);
        self.shared.ready.notify_one();
        Ok(())
    }
}

impl Drop for LlamaEmbedder {
    fn drop(&mut self) {
        self.shared.close();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[async_trait]
impl Embedder for LlamaEmbedder {
    async fn embed(&self, request: EmbedRequest) -> Result<Embeddings, EngineError> {
        if let Some(d) = request.dimensions.filter(|&d| d != self.info.dimensions) {
            return Err(EngineError::InvalidRequest {
                param: Some("dimensions".into()),
                message: format!(
                    "this model's vectors have {} dimensions and cannot be shortened (got dimensions {d})",
                    self.info.dimensions
                ),
            });
        }
        let inputs = request.inputs;
        // Tokenizing 2,048 inputs takes a while: not on an async worker.
        let (model, info, bound) = (Arc::clone(&self.model), self.info.clone(), self.bound);
        let tokens = tokio::task::spawn_blocking(move || tokenize(&model, &info, bound, inputs))
            .await
            .map_err(|e| EngineError::Internal(format!("the tokenizer task failed: {e}")))??;
        let prompt_tokens = tokens.iter().map(|t| t.len() as u64).sum();
        let (reply, vectors) = oneshot::channel();
        self.submit(Job {
            vectors: Vec::with_capacity(tokens.len()),
            inputs: tokens,
            next: 0,
            reply,
            background: request.background,
        })?;
        let vectors = vectors
            .await
            .map_err(|_| EngineError::Unavailable("the embedder stopped".into()))??;
        Ok(Embeddings {
            vectors,
            prompt_tokens,
        })
    }
}

/// An embedding model embeds, and does nothing else.
impl Engine for LlamaEmbedder {
    svc_core::offers!(embedder);

    fn name(&self) -> &str {
        "llama-embed"
    }

    fn status(&self) -> EngineStatus {
        let queue = self.shared.lock();
        EngineStatus {
            queued: queue.jobs.len() as u64,
            memory_bytes: Some(self.info.memory_bytes),
            ..EngineStatus::default()
        }
    }
}

/// `inputs` as the model's tokens, each with its `[CLS]`/`[SEP]` (or
/// the model's own markers), each checked against the context and the
/// vocabulary: a 400 naming `input` otherwise.
fn tokenize(
    model: &LlamaModel,
    info: &EmbedderInfo,
    bound: TextBound,
    inputs: Vec<EmbedInput>,
) -> Result<Vec<Vec<LlamaToken>>, EngineError> {
    let vocab = model.vocab();
    let (bos, sep) = (vocab.bos(), vocab.sep());
    let many = inputs.len() > 1;
    let at = |i: usize| {
        if many {
            format!("input[{i}]")
        } else {
            "input".to_owned()
        }
    };
    let invalid = |message: String| EngineError::InvalidRequest {
        param: Some("input".into()),
        message,
    };
    inputs
        .into_iter()
        .enumerate()
        .map(|(i, input)| {
            let tokens = match input {
                EmbedInput::Text(text) => {
                    // Far past the context: refused from its length alone.
                    if let Err(EngineError::ContextLengthExceeded { prompt_tokens, .. }) =
                        bound.check(&[text.as_str()], info.max_input_tokens)
                    {
                        return Err(invalid(format!(
                            "{} has at least {prompt_tokens} tokens ({} bytes); this model takes at most {} tokens an input",
                            at(i),
                            text.len(),
                            info.max_input_tokens
                        )));
                    }
                    vocab.tokenize(text.as_bytes(), true, false)
                }
                EmbedInput::Tokens(ids) => {
                    if let Some(bad) = ids.iter().find(|&&id| id >= info.vocab_size) {
                        return Err(invalid(format!(
                            "{} holds token id {bad}; this model's vocabulary has {} tokens",
                            at(i),
                            info.vocab_size
                        )));
                    }
                    let mut tokens: Vec<LlamaToken> = Vec::with_capacity(ids.len() + 2);
                    // The markers the model was trained with, unless given.
                    if vocab.should_add_bos() && ids.first() != Some(&(bos.0 as u32)) {
                        tokens.push(bos);
                    }
                    tokens.extend(ids.iter().map(|&id| LlamaToken(id as i32)));
                    if vocab.should_add_sep() && ids.last() != Some(&(sep.0 as u32)) {
                        tokens.push(sep);
                    }
                    tokens
                }
            };
            if tokens.len() > info.max_input_tokens as usize {
                return Err(invalid(format!(
                    "{} has {} tokens; this model takes at most {} tokens an input",
                    at(i),
                    tokens.len(),
                    info.max_input_tokens
                )));
            }
            if tokens.is_empty() {
                return Err(invalid(format!("{} makes no tokens", at(i))));
            }
            Ok(tokens)
        })
        .collect()
}

fn run(
    model: &LlamaModel,
    threads: i32,
    shared: &Shared,
    normalize: bool,
    ready: &std::sync::mpsc::Sender<Result<(), String>>,
) {
    let made = context(model, threads);
    let mut ctx = match made {
        Ok(ctx) => ctx,
        Err(e) => {
            let _ = ready.send(Err(e));
            shared.close();
            return;
        }
    };
    if ready.send(Ok(())).is_err() {
        shared.close();
        return;
    }
    let mut batch = LlamaBatch::new(BATCH_TOKENS as usize, BATCH_SEQUENCES as i32);
    loop {
        let taken = {
            let mut queue = shared.lock();
            while queue.jobs.is_empty() && !queue.closed {
                queue = shared.ready.wait(queue).unwrap_or_else(|e| e.into_inner());
            }
            if queue.closed {
                return;
            }
            queue.jobs.retain(|job| !job.reply.is_closed());
            let taken = next_batch(&mut queue.jobs);
            batch.clear();
            for (seq, &(j, i)) in taken.iter().enumerate() {
                let seq = i32::try_from(seq).unwrap_or(0);
                for (pos, &token) in queue.jobs[j].inputs[i].iter().enumerate() {
                    let _ = batch.add(token, pos as i32, &[seq], true);
                }
            }
            taken
        };
        if taken.is_empty() {
            continue;
        }
        let result = ctx
            .encode(&mut batch)
            .map_err(|e| EngineError::Internal(format!("llama.cpp could not encode: {e}")));
        let mut queue = shared.lock();
        for (seq, (j, _)) in taken.iter().enumerate() {
            let Some(job) = queue.jobs.get_mut(*j) else {
                continue;
            };
            let vector = result.clone().and_then(|()| {
                ctx.embeddings_seq_ith(seq as i32)
                    .map(|v| pooled(v, normalize))
                    .map_err(|e| EngineError::Internal(format!("no embedding: {e}")))
            });
            match vector {
                Ok(v) => job.vectors.push(v),
                Err(e) => {
                    // Mark the job failed: answer now, skip its other inputs.
                    let reply = std::mem::replace(&mut job.reply, oneshot::channel().0);
                    let _ = reply.send(Err(e));
                    job.next = job.inputs.len();
                    job.vectors.clear();
                }
            }
        }
        // Answer the requests whose every input is encoded.
        let mut i = 0;
        while i < queue.jobs.len() {
            let job = &queue.jobs[i];
            if job.next >= job.inputs.len() && job.vectors.len() == job.inputs.len() {
                if let Some(job) = queue.jobs.remove(i) {
                    let _ = job.reply.send(Ok(job.vectors));
                }
            } else if job.next >= job.inputs.len() && job.reply.is_closed() {
                queue.jobs.remove(i);
            } else {
                i += 1;
            }
        }
    }
}

/// The inputs of the next batch, as (job, input) pairs, each job's `next`
/// moved past them: the next input of each waiting job in turn until the
/// batch is full. Background jobs' inputs only when no interactive input
/// waits.
fn next_batch(jobs: &mut VecDeque<Job>) -> Vec<(usize, usize)> {
    let background = !jobs.iter().any(|job| !job.background && job.waiting());
    let mut taken = Vec::new();
    let mut tokens_in = 0usize;
    let mut progress = true;
    while progress && taken.len() < BATCH_SEQUENCES as usize {
        progress = false;
        for (j, job) in jobs.iter_mut().enumerate() {
            if job.background != background {
                continue;
            }
            let Some(input) = job.inputs.get(job.next) else {
                continue;
            };
            if tokens_in + input.len() > BATCH_TOKENS as usize
                || taken.len() >= BATCH_SEQUENCES as usize
            {
                continue;
            }
            tokens_in += input.len();
            taken.push((j, job.next));
            job.next += 1;
            progress = true;
        }
    }
    taken
}

/// The vector as the model's modules leave it: scaled to length 1 when
/// `normalize`.
fn pooled(vector: &[f32], normalize: bool) -> Vec<f32> {
    let mut out = vector.to_vec();
    if normalize {
        let norm = out
            .iter()
            .map(|x| f64::from(*x) * f64::from(*x))
            .sum::<f64>()
            .sqrt();
        if norm > 0.0 {
            for x in &mut out {
                *x = (f64::from(*x) / norm) as f32;
            }
        }
    }
    out
}

fn context(model: &LlamaModel, threads: i32) -> Result<LlamaContext<'_>, String> {
    let backend = backend::backend()?;
    let params = LlamaContextParams::default()
        .with_embeddings(true)
        .with_n_ctx(NonZeroU32::new(BATCH_TOKENS))
        .with_n_batch(BATCH_TOKENS)
        .with_n_ubatch(BATCH_TOKENS)
        .with_n_seq_max(BATCH_SEQUENCES)
        // The inputs of an encode share the BATCH_TOKENS cells: per
        // sequence, llama.cpp would pad BATCH_TOKENS / BATCH_SEQUENCES up to
        // 256 cells, make the context 16,384 and warn at every start.
        .with_kv_unified(true)
        .with_n_threads(threads)
        .with_n_threads_batch(threads)
        .with_no_perf(true);
    model
        .new_context(backend, params)
        .map_err(|e| format!("cannot create the llama.cpp embedding context: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(inputs: usize, tokens: usize, background: bool) -> Job {
        Job {
            inputs: vec![vec![LlamaToken::new(1); tokens]; inputs],
            next: 0,
            vectors: Vec::new(),
            reply: oneshot::channel().0,
            background,
        }
    }

    #[test]
    fn inputs_are_taken_in_turn_until_the_batch_is_full() {
        let mut jobs = VecDeque::from([job(3, 10, false), job(100, 10, false)]);
        let taken = next_batch(&mut jobs);
        // One of each in turn; once the first is done, the second's.
        assert_eq!(
            &taken[..6],
            [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
        );
        // 51 inputs of 10 tokens fill 512.
        assert_eq!(taken.len(), 51);
        assert_eq!(jobs[1].next, 48);
    }

    #[test]
    fn background_inputs_wait_while_an_interactive_one_waits() {
        // A batch's lines were queued first; a client's request came after.
        let mut jobs = VecDeque::from([job(200, 4, true), job(70, 4, false)]);
        let first = next_batch(&mut jobs);
        assert_eq!(first.len(), BATCH_SEQUENCES as usize);
        assert!(first.iter().all(|&(j, _)| j == 1), "{first:?}");
        // The interactive request's last inputs, alone.
        assert_eq!(
            next_batch(&mut jobs),
            (64..70).map(|i| (1, i)).collect::<Vec<_>>()
        );
        // Then the background work, as no interactive input waits.
        let third = next_batch(&mut jobs);
        assert_eq!(third.len(), BATCH_SEQUENCES as usize);
        assert!(third.iter().all(|&(j, _)| j == 0), "{third:?}");
    }
}
