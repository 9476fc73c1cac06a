//! The converted copy of a model: `<stem>.svc-q8_0.gguf` (or `-q4_0`) beside
//! the model itself, made once by [`prepare`] and reused while it is at
//! least as new as the model and its header is exactly the one a conversion
//! of the model's current header would have (the provenance entry names the
//! source's file name, its size and the converter's version). A new copy is
//! written under a temporary name and renamed into place, so a reader never
//! sees half a file.
//!
//! The engine asks for it when `LlamaEngineOptions::repack` is on; it keeps
//! the copy beside the model rather than in the data directory because a
//! model may be any file, pulled or not, and its copy should go where it goes.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::header::{GgufHeader, MetaValue};
use crate::repack::{RepackSummary, RepackTarget, converted_header, provenance, repack_file};
use crate::{GGML_TYPE_Q4_1, Problem};

/// The cache file beside `source` for `target`: `<stem>.svc-<type>.gguf`.
pub fn cache_path(source: &Path, target: RepackTarget) -> PathBuf {
    let stem = source
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    source.with_file_name(format!(
        "{stem}.svc-{}.gguf",
        target.name().to_ascii_lowercase()
    ))
}

/// The share of a model's values in Q4_1 tensors above which [`prepare`] converts it.
pub const MOSTLY: f64 = 0.5;

/// What [`prepare`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Prepared {
    /// The model is not mostly Q4_1 (or could not be read here): load it as it is.
    Unchanged,
    /// A valid cache file was already there.
    Reused(PathBuf),
    /// The model was converted into a new cache file.
    Converted {
        /// The cache file.
        path: PathBuf,
        /// The conversion's report.
        summary: RepackSummary,
        /// How long it took, in seconds.
        seconds: f64,
    },
    /// Converting failed (for example, a read-only folder): load the original.
    Failed(String),
}

impl Prepared {
    /// The file to load instead of the source, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Prepared::Reused(path) | Prepared::Converted { path, .. } => Some(path),
            Prepared::Unchanged | Prepared::Failed(_) => None,
        }
    }
}

/// For a model whose values are mostly Q4_1: the `target` copy of it in the
/// cache file beside it ([`cache_path`]), made now unless one is there that is
/// at least as new as the source and whose header matches the source's. The
/// new file is written under a temporary name and renamed into place, so a
/// reader never sees half a file.
pub fn prepare(source: &Path, target: RepackTarget) -> Prepared {
    let Ok(header) = GgufHeader::read(source) else {
        // llama.cpp will say what is wrong with it.
        return Prepared::Unchanged;
    };
    // A model split over several files is left alone: llama.cpp finds the
    // other parts by the first one's name.
    let split = header.get("split.count").and_then(MetaValue::as_u64);
    if header.share_of_type(GGML_TYPE_Q4_1) <= MOSTLY || split.is_some_and(|n| n > 1) {
        return Prepared::Unchanged;
    }
    let cache = cache_path(source, target);
    if cache_is_valid(source, &header, &cache, target) {
        return Prepared::Reused(cache);
    }
    let started = Instant::now();
    let temp = cache.with_file_name(format!(
        ".{}.tmp-{}-{:x}",
        cache
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id(),
        nonce(),
    ));
    let result = repack_file(source, &temp, target).and_then(|summary| {
        std::fs::rename(&temp, &cache)
            .map_err(|e| Problem::Io(e).at(&cache))
            .map(|()| summary)
    });
    match result {
        Ok(summary) => Prepared::Converted {
            path: cache,
            summary,
            seconds: started.elapsed().as_secs_f64(),
        },
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Prepared::Failed(e.to_string())
        }
    }
}

/// A number that differs between calls, for temporary file names.
fn nonce() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (u64::from(now) << 20) ^ NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Whether `cache` is a complete conversion of the current `source`.
fn cache_is_valid(source: &Path, header: &GgufHeader, cache: &Path, target: RepackTarget) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (modified(source), modified(cache)) {
        (Some(s), Some(c)) if c >= s => {}
        _ => return false,
    }
    let Ok(cached) = GgufHeader::read(cache) else {
        return false;
    };
    let Ok(sizes) = header.tensor_sizes() else {
        return false;
    };
    let note = provenance(source, header.file_len, target);
    converted_header(header, &sizes, target, note).is_ok_and(|expected| cached == expected)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::fixtures::{f32_file, small_file, small_writer};

    #[test]
    fn prepare_skips_models_that_are_not_mostly_q4_1() {
        let dir = tempfile::tempdir().unwrap();
        let path = f32_file(dir.path());
        assert_eq!(prepare(&path, RepackTarget::Q8_0), Prepared::Unchanged);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let missing = dir.path().join("missing.gguf");
        assert_eq!(prepare(&missing, RepackTarget::Q8_0), Prepared::Unchanged);
    }

    #[test]
    fn prepare_rebuilds_a_stale_or_broken_cache() {
        let dir = tempfile::tempdir().unwrap();
        let source = small_file(dir.path());
        let Prepared::Converted { path: cache, .. } = prepare(&source, RepackTarget::Q8_0) else {
            panic!("not converted");
        };
        assert_eq!(
            prepare(&source, RepackTarget::Q8_0),
            Prepared::Reused(cache.clone())
        );
        // Cut short: rebuilt.
        let bytes = std::fs::read(&cache).unwrap();
        std::fs::write(&cache, &bytes[..bytes.len() / 2]).unwrap();
        assert!(matches!(
            prepare(&source, RepackTarget::Q8_0),
            Prepared::Converted { .. }
        ));
        assert_eq!(std::fs::read(&cache).unwrap(), bytes);
        // Another source under the same name (a different model): rebuilt.
        std::thread::sleep(std::time::Duration::from_millis(20));
        small_writer(7).write(&source).unwrap();
        assert!(matches!(
            prepare(&source, RepackTarget::Q8_0),
            Prepared::Converted { .. }
        ));
        assert_ne!(std::fs::read(&cache).unwrap(), bytes);
    }

    #[test]
    fn prepare_reports_a_folder_it_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        let source = small_file(dir.path());
        let mut perms = std::fs::metadata(dir.path()).unwrap().permissions();
        perms.set_readonly(true);
        std::fs::set_permissions(dir.path(), perms.clone()).unwrap();
        let outcome = prepare(&source, RepackTarget::Q8_0);
        #[expect(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(dir.path(), perms).unwrap();
        // Root may write anyway; otherwise the failure is reported, not fatal.
        match outcome {
            Prepared::Failed(reason) => assert!(reason.contains("tmp"), "{reason}"),
            Prepared::Converted { .. } => {}
            other => panic!("{other:?}"),
        }
    }
}
