//! What preparing one hostile request costs the engine (issue 61): CPU
//! seconds, wall seconds and the growth of peak memory (VmHWM) while a chat
//! request is rendered and tokenized, and how it ends.
//!
//! ```text
//! cargo run --release -p svc-engine-llama --example prep_cost -- CASE [N]
//! ```
//! `CASE` is one of
//! - `looping`: a chat template that loops 3×10⁸ times before the prompt;
//! - `looping-max`: the same with the most messages a request may hold
//!   (its step limit is then the largest);
//! - `writing`: a chat template that writes its 1,000-byte message 65,536
//!   times (a 64 MB prompt);
//! - `word`: a 1 MiB one-word message on an ordinary template;
//! - `legacy`: a 1 MiB one-word legacy completion prompt.
//!
//! `N` requests at once (default 1). The model is the tiny test model
//! (byte-level BPE, ChatML) with a context of 4,096 tokens. Run each case
//! in a process of its own: peak memory only grows.

#![expect(clippy::print_stdout, reason = "an example prints its results")]

use std::time::Instant;

use anyhow::{Context as _, bail};
use svc_core::Generator as _;
use svc_core::engine::{ChatMessage, GenerateRequest, TextPrompt};
use svc_engine_llama::testing::{TINY_TEMPLATE, TinyModel};
use svc_engine_llama::{LlamaEngine, LlamaEngineOptions};

const LOOPING: &str =
    "{% for i in range(20000) %}{% for j in range(15000) %}{% endfor %}{% endfor %}";
const WRITING: &str = "{% for i in range(65536) %}{{ messages[0]['content'] }}{% endfor %}";

/// CPU seconds of this process (user and system), from `/proc/self/stat`
/// (clock ticks of 1/100 s, Linux's).
fn cpu_seconds() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let after_name = stat.rsplit(')').next().context("no ) in /proc/self/stat")?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of the line; the 12th and 13th after the name.
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    Ok(ticks / 100.0)
}

/// Peak resident memory of this process, in MB.
fn peak_mb() -> anyhow::Result<f64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .context("no VmHWM")?;
    let kb: f64 = line
        .split_whitespace()
        .nth(1)
        .context("no VmHWM value")?
        .parse()?;
    Ok(kb / 1024.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_default();
    let n: usize = args.next().map_or(Ok(1), |n| n.parse())?;
    let (template, request) = match case.as_str() {
        "looping" => (format!("{LOOPING}{TINY_TEMPLATE}"), chat("Hi".to_owned())),
        "looping-max" => (
            format!("{LOOPING}{TINY_TEMPLATE}"),
            GenerateRequest {
                messages: vec![ChatMessage::User("Hi".into()); svc_core::limits::MAX_MESSAGES],
                ..chat(String::new())
            },
        ),
        "writing" => (WRITING.to_owned(), chat("x".repeat(1000))),
        "word" => (TINY_TEMPLATE.to_owned(), chat("x".repeat(1 << 20))),
        "legacy" => (
            TINY_TEMPLATE.to_owned(),
            GenerateRequest {
                prompt: Some(TextPrompt {
                    text: "x".repeat(1 << 20),
                    suffix: None,
                    score: false,
                }),
                ..chat(String::new())
            },
        ),
        other => bail!("no case {other:?}: looping, looping-max, writing, word or legacy"),
    };
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("tiny.gguf");
    TinyModel::hello().with_template(&template).write(&path)?;
    let mut options = LlamaEngineOptions::new(&path);
    options.parallel = 4;
    options.context_per_sequence = 4096;
    options.threads = Some(1);
    let engine = LlamaEngine::load(&options)?;

    let (cpu, peak, wall) = (cpu_seconds()?, peak_mb()?, Instant::now());
    let results = futures::future::join_all((0..n).map(|_| engine.generate(request.clone()))).await;
    let (cpu, peak, wall) = (
        cpu_seconds()? - cpu,
        peak_mb()? - peak,
        wall.elapsed().as_secs_f64(),
    );
    let outcome = match results.into_iter().next() {
        Some(Ok(_)) => "started".to_owned(),
        Some(Err(e)) => format!("{e}"),
        None => "none".to_owned(),
    };
    let outcome: String = outcome.chars().take(120).collect();
    println!("{case} ×{n}: {wall:.2} s wall, {cpu:.2} CPU-s, peak memory +{peak:.0} MB; {outcome}");
    Ok(())
}

fn chat(content: String) -> GenerateRequest {
    GenerateRequest {
        messages: vec![ChatMessage::User(content)],
        max_tokens: Some(1),
        ..GenerateRequest::default()
    }
}
