//! Throughput of the embedded engine on one GGUF, without HTTP:
//! single-stream prompt and decode tokens/s, time to first token, and the
//! aggregate decode tokens/s of several concurrent streams.
//!
//! ```text
//! cargo run --release -p svc-engine-llama --example bench -- MODEL.gguf \
//!     [--threads N] [--batch-size 512] [--prompt 512] [--gen 128] [--runs 3] [--streams 1,4,16]
//!     [--stream-rounds 3] [--flash-attn on|off|auto] [--repack | --no-repack] [--kv-type f16|q8_0]
//!     [--choices N] [--no-invariance]
//! ```
//! `MODEL.gguf` defaults to `$SVC_TEST_MODEL`. `--repack` loads a Q4_1
//! model from the engine's Q8_0 copy of it (`LlamaEngineOptions::repack`);
//! `--no-repack` (the engine's default) loads it as it is.
//! The concurrent part loads the engine with `parallel` equal to the
//! largest stream count (16 by default) and measures every level
//! `--stream-rounds` times, taking turns; it prints medians, the median of
//! the per-round ratios to the first level, and every round.
//! `--choices N` measures instead one chat request (of about `--prompt`
//! tokens) with `n = N` on an
//! engine of N slots (with every slot open to it, and with the default
//! share of half the slots) against N separate requests, taking turns:
//! aggregate tokens/s of each, and another request's time to first token
//! while the `n = N` request runs.

#![expect(clippy::print_stdout, reason = "an example prints its results")]

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use svc_core::Generator as _;
use svc_core::engine::{ChatMessage, EngineEvent, EventStream, GenerateRequest, Sampling};
use svc_engine_llama::{CompletionParams, KvType, LlamaEngine, LlamaEngineOptions};

struct Args {
    model: String,
    threads: Option<u32>,
    /// Tokens a step decodes at most (`LlamaEngineOptions::batch_size`).
    batch_size: Option<u32>,
    prompt: usize,
    gen_tokens: u32,
    runs: usize,
    streams: Vec<u32>,
    stream_rounds: usize,
    flash_attention: Option<bool>,
    repack: Option<bool>,
    kv_type: KvType,
    choices: Option<u32>,
    batch_invariant: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        model: std::env::var("SVC_TEST_MODEL").unwrap_or_default(),
        threads: None,
        batch_size: None,
        prompt: 512,
        gen_tokens: 128,
        runs: 3,
        streams: vec![1, 4, 16],
        stream_rounds: 3,
        flash_attention: None,
        repack: None,
        kv_type: KvType::F16,
        choices: None,
        batch_invariant: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--threads" => args.threads = Some(value()?.parse()?),
            "--batch-size" => args.batch_size = Some(value()?.parse()?),
            "--prompt" => args.prompt = value()?.parse()?,
            "--gen" => args.gen_tokens = value()?.parse()?,
            "--runs" => args.runs = value()?.parse()?,
            "--stream-rounds" => args.stream_rounds = value()?.parse()?,
            "--choices" => args.choices = Some(value()?.parse()?),
            "--repack" => args.repack = Some(true),
            "--no-repack" => args.repack = Some(false),
            "--no-invariance" => args.batch_invariant = false,
            "--kv-type" => {
                let name = value()?;
                args.kv_type = KvType::parse(&name)
                    .with_context(|| format!("--kv-type {name}: f16 or q8_0"))?;
            }
            "--flash-attn" => {
                args.flash_attention = match value()?.as_str() {
                    "on" => Some(true),
                    "off" => Some(false),
                    _ => None,
                };
            }
            "--streams" => {
                args.streams = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?;
            }
            _ if arg.starts_with("--") => bail!("unknown option {arg}"),
            _ => args.model = arg,
        }
    }
    if args.model.is_empty() {
        bail!("usage: bench MODEL.gguf [options] (or set SVC_TEST_MODEL)");
    }
    Ok(args)
}

/// Timings of one stream.
struct Timing {
    first_event: Duration,
    total: Duration,
    completion_tokens: u64,
}

async fn time_stream(mut stream: EventStream, start: Instant) -> anyhow::Result<Timing> {
    let mut first = None;
    while let Some(event) = stream.next().await {
        let now = start.elapsed();
        first.get_or_insert(now);
        if let EngineEvent::Finish { usage, .. } = event? {
            return Ok(Timing {
                first_event: first.unwrap_or(now),
                total: now,
                completion_tokens: usage.completion_tokens,
            });
        }
    }
    bail!("the stream ended without finishing")
}

fn params(max_tokens: u32) -> CompletionParams {
    CompletionParams {
        sampling: Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
        max_tokens: Some(max_tokens),
        ignore_eos: true,
        ..CompletionParams::default()
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// A prompt of about `n` tokens of plain prose.
fn prompt_of(engine: &LlamaEngine, n: usize) -> String {
    let sentence =
        "The quick brown fox jumps over the lazy dog while the farmer watches from the porch. ";
    let mut text = String::new();
    while engine.tokenize(&text).len() < n {
        text.push_str(sentence);
    }
    text
}

fn load(args: &Args, parallel: u32) -> anyhow::Result<LlamaEngine> {
    load_with(args, parallel, |_| {})
}

fn load_with(
    args: &Args,
    parallel: u32,
    set: impl FnOnce(&mut LlamaEngineOptions),
) -> anyhow::Result<LlamaEngine> {
    let mut options = LlamaEngineOptions::new(&args.model);
    options.parallel = parallel;
    options.threads = args.threads;
    if let Some(batch_size) = args.batch_size {
        options.batch_size = batch_size;
    }
    options.flash_attention = args.flash_attention;
    options.kv_type = args.kv_type;
    options.batch_invariant = args.batch_invariant;
    if let Some(repack) = args.repack {
        options.repack = repack;
    }
    options.queue_capacity = 0;
    options.context_per_sequence = u32::try_from(args.prompt)? + args.gen_tokens + 64;
    set(&mut options);
    Ok(LlamaEngine::load(&options)?)
}

/// A chat request for a long story after `context`, sampled with `seed`.
fn story(args: &Args, context: &str, seed: u64, n: u32, client: &str) -> GenerateRequest {
    GenerateRequest {
        messages: vec![ChatMessage::User(format!(
            "{context}\n\nWrite a long story about a dragon who learns to bake bread."
        ))],
        sampling: Sampling {
            temperature: 0.8,
            seed: Some(seed),
            ..Sampling::default()
        },
        max_tokens: Some(args.gen_tokens),
        stream: true,
        n,
        client: Some(client.into()),
        ..GenerateRequest::default()
    }
}

/// Completion tokens of every choice of `stream`, and when its first event came.
async fn drain(mut stream: EventStream, start: Instant) -> anyhow::Result<(u64, Duration)> {
    let (mut tokens, mut first) = (0, None);
    while let Some(event) = stream.next().await {
        first.get_or_insert_with(|| start.elapsed());
        if let EngineEvent::Finish { usage, .. } = event? {
            tokens += usage.completion_tokens;
        }
    }
    Ok((tokens, first.unwrap_or_else(|| start.elapsed())))
}

/// `--choices N`: one `n = N` request against N separate ones.
async fn choices(args: &Args, n: u32) -> anyhow::Result<()> {
    let open = load_with(args, n, |o| {
        o.slots_per_client = Some(n);
        o.queue_capacity = 64;
    })?;
    let shared = load_with(args, n, |o| o.queue_capacity = 64)?;
    let context = prompt_of(&open, args.prompt.saturating_sub(40));
    let (mut one, mut separate, mut halved, mut other_ttft) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..args.stream_rounds.max(1) {
        let seed = round as u64 * 1000;
        let start = Instant::now();
        let (tokens, _) = drain(
            open.generate(story(args, &context, seed, n, "a")).await?,
            start,
        )
        .await?;
        one.push(tokens as f64 / start.elapsed().as_secs_f64());

        let start = Instant::now();
        let mut streams = Vec::new();
        for i in 0..n {
            let client = format!("client {i}");
            streams.push(
                open.generate(story(args, &context, seed + u64::from(i), 1, &client))
                    .await?,
            );
        }
        let done = futures::future::try_join_all(streams.into_iter().map(|s| drain(s, start)));
        let tokens: u64 = done.await?.iter().map(|(t, _)| t).sum();
        separate.push(tokens as f64 / start.elapsed().as_secs_f64());

        // The default share, with another client arriving once it runs.
        let start = Instant::now();
        let mut hog = shared.generate(story(args, &context, seed, n, "a")).await?;
        let first = hog.next().await;
        anyhow::ensure!(first.is_some(), "the n = {n} request ended at once");
        let asked = Instant::now();
        let mut other = story(args, &context, seed, 1, "b");
        other.max_tokens = Some(8);
        other.messages = vec![ChatMessage::User(format!("Run {round}: say hello."))];
        let (_, ttft) = drain(shared.generate(other).await?, asked).await?;
        other_ttft.push(ttft.as_secs_f64() * 1000.0);
        let (tokens, _) = drain(hog, start).await?;
        halved.push(tokens as f64 / start.elapsed().as_secs_f64());
    }
    println!(
        "n = {n}, prompt about {} tokens, {} tokens each: one request {:.1} tokens/s, {n} separate requests {:.1} tokens/s ({:.2}x); with the default share ({} slots): {:.1} tokens/s, another client's time to first token {:.0} ms",
        args.prompt,
        args.gen_tokens,
        median(one.clone()),
        median(separate.clone()),
        median(one) / median(separate),
        n / 2,
        median(halved),
        median(other_ttft),
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    if let Some(n) = args.choices {
        return choices(&args, n).await;
    }
    let engine = load(&args, 1)?;
    println!(
        "model: {} ({}; loaded {}), threads: {}, llama.cpp SIMD: {}",
        args.model,
        engine.info().name.as_deref().unwrap_or("?"),
        engine.info().loaded_path.display(),
        args.threads
            .map_or_else(|| "all".to_owned(), |t| t.to_string()),
        svc_engine_llama::cpu::required_features().join(","),
    );

    // Single stream: prompt processing, then decoding. Each run's prompt
    // starts differently, so that the engine cannot reuse an earlier run's
    // prompt cells: this measures evaluating a prompt.
    let base = prompt_of(&engine, args.prompt);
    let prompt_tokens = engine.tokenize(&base).len();
    let warmup = engine.complete(&format!("Warm-up. {base}"), params(8))?;
    time_stream(warmup, Instant::now()).await?;
    let (mut pp, mut tg, mut ttft) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..args.runs {
        let prompt = format!("Run {run}. {base}");
        let start = Instant::now();
        let t = time_stream(engine.complete(&prompt, params(args.gen_tokens))?, start).await?;
        let decode = (t.total - t.first_event).as_secs_f64();
        pp.push(prompt_tokens as f64 / t.first_event.as_secs_f64());
        tg.push((t.completion_tokens - 1) as f64 / decode);
        ttft.push(t.first_event.as_secs_f64() * 1000.0);
    }
    println!(
        "single stream: prompt {prompt_tokens} tokens: {:.1} tokens/s (time to first token {:.1} ms); decode {} tokens: {:.1} tokens/s",
        median(pp),
        median(ttft),
        args.gen_tokens,
        median(tg)
    );
    drop(engine);

    // Concurrent streams, each with a short prompt of its own. Every level
    // is measured `--stream-rounds` times, the levels taking turns, so that
    // each round's ratios compare measurements taken seconds apart.
    let most = args.streams.iter().copied().max().unwrap_or(1);
    let engine = load(&args, most)?;
    let mut rates = vec![Vec::new(); args.streams.len()];
    let mut ttfts = vec![Vec::new(); args.streams.len()];
    for _ in 0..args.stream_rounds.max(1) {
        for (level, &n) in args.streams.iter().enumerate() {
            let start = Instant::now();
            let streams = (0..n)
                .map(|i| {
                    engine.complete(
                        &format!("Story number {i}: once upon a time"),
                        params(args.gen_tokens),
                    )
                })
                .collect::<Result<Vec<_>, _>>()?;
            let timings =
                futures::future::try_join_all(streams.into_iter().map(|s| time_stream(s, start)))
                    .await?;
            let wall = start.elapsed().as_secs_f64();
            let tokens: u64 = timings.iter().map(|t| t.completion_tokens).sum();
            rates[level].push(tokens as f64 / wall);
            ttfts[level].push(
                timings
                    .iter()
                    .map(|t| t.first_event.as_secs_f64())
                    .sum::<f64>()
                    * 1000.0
                    / f64::from(n),
            );
        }
    }
    for (level, &n) in args.streams.iter().enumerate() {
        // Per-round ratios to the first level (one stream by default).
        let ratios: Vec<f64> = rates[level]
            .iter()
            .zip(&rates[0])
            .map(|(r, base)| r / base)
            .collect();
        println!(
            "{n:>3} streams: {:.1} tokens/s aggregate ({:.2}x one stream), mean time to first token {:.1} ms; rounds: {}",
            median(rates[level].clone()),
            median(ratios.clone()),
            median(ttfts[level].clone()),
            rates[level]
                .iter()
                .zip(&ratios)
                .map(|(r, x)| format!("{r:.1} ({x:.2}x)"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let stats = engine.stats();
    println!(
        "most sequences in one decode step: {}",
        stats.max_sequences_per_step
    );
    Ok(())
}
