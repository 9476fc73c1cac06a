//! Converts the Q4_1 tensors of a GGUF to Q8_0 (or Q4_0), keeping every
//! other tensor and all metadata (see `svc_gguf::repack`).
//!
//! ```text
//! cargo run --release -p svc-gguf --example repack -- IN.gguf OUT.gguf [q8_0|q4_0]
//! cargo run --release -p svc-gguf --example repack -- --info IN.gguf
//! ```

#![expect(clippy::print_stdout, reason = "an example prints its results")]

use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, bail};
use svc_gguf::GgufHeader;
use svc_gguf::repack::{self, RepackTarget};

fn type_name(t: u32) -> String {
    match t {
        0 => "F32".into(),
        1 => "F16".into(),
        2 => "Q4_0".into(),
        3 => "Q4_1".into(),
        8 => "Q8_0".into(),
        12 => "Q4_K".into(),
        14 => "Q6_K".into(),
        other => format!("type {other}"),
    }
}

fn info(path: &Path) -> anyhow::Result<()> {
    let header = GgufHeader::read(path)?;
    println!(
        "GGUF v{}, {} metadata entries, {} tensors, alignment {}, data at {}, {} bytes",
        header.version,
        header.metadata.len(),
        header.tensors.len(),
        header.alignment,
        header.data_offset,
        header.file_len
    );
    if let Some(ft) = header.get("general.file_type") {
        println!("general.file_type = {ft:?}");
    }
    let mut by_type: std::collections::BTreeMap<u32, (usize, u64)> = Default::default();
    for t in &header.tensors {
        let e = by_type.entry(t.ggml_type).or_default();
        e.0 += 1;
        e.1 += t.elements();
    }
    for (t, (n, elements)) in by_type {
        println!(
            "  {:>6}: {n:>4} tensors, {elements:>11} values ({:.1}%)",
            type_name(t),
            100.0 * header.share_of_type(t)
        );
    }
    for t in header.tensors.iter().take(12) {
        println!("  {} {:?} {}", t.name, t.dims, type_name(t.ggml_type));
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, path] if flag == "--info" => info(Path::new(path)),
        [input, output, rest @ ..] if rest.len() <= 1 => {
            let target: RepackTarget = match rest.first() {
                Some(t) => t.parse().map_err(anyhow::Error::msg)?,
                None => RepackTarget::Q8_0,
            };
            let start = Instant::now();
            let summary = repack::repack_file(Path::new(input), Path::new(output), target)
                .with_context(|| format!("converting {input}"))?;
            println!(
                "{output}: {} of {} tensors ({} values) converted from Q4_1 to {} in {:.2} s; \
                 {} bytes; max abs error {:.3e}, relative RMS error {:.3e}",
                summary.converted,
                summary.tensors,
                summary.converted_values,
                target.name(),
                start.elapsed().as_secs_f64(),
                summary.bytes_written,
                summary.max_abs_error,
                summary.relative_rms_error
            );
            Ok(())
        }
        _ => bail!("usage: repack IN.gguf OUT.gguf [q8_0|q4_0] | repack --info IN.gguf"),
    }
}
