//! GGUF files from a Hugging Face hub: `hf:ORG/REPO/PATH.gguf[@REVISION]`,
//! downloaded over HTTP into `<data_dir>/models/ORG/REPO/PATH`, the token
//! sent to the hub's own origin only, the body checked for the GGUF magic
//! and against the hub's SHA-256 ETag when it sends one.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Context, ModelError, Result, fail};
use reqwest::{StatusCode, Url, header};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::install::{COPY_BUFFER, Partial};
use crate::progress::{Progress, Transfer};
use crate::{GGUF_MAGIC, models_dir};

/// The Hugging Face hub, unless `HF_ENDPOINT` names another.
pub const DEFAULT_HF_ENDPOINT: &str = "https://huggingface.co";

const MAX_REDIRECTS: usize = 10;

/// The forms `svc pull` accepts, for error messages. Here, not in
/// `reference.rs` which reads them all, because reading `hf:` names them
/// too, and `reference.rs` stands on this module, not the other way.
pub const ACCEPTED_FORMS: &str = "accepted: no argument (or `default`) for the default model \
     (SmolLM2-135M-Instruct Q4_1), `embeddings` for the default embedding model \
     (all-MiniLM-L6-v2), `gemma3` for the third-party model the tests serve (Gemma 3 \
     270M Q4_K_M), or hf:ORG/REPO/FILE.gguf, hf:ORG/REPO/PATH/TO/FILE.gguf, \
     optionally followed by @REVISION (default main)";

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

impl HfFile {
    /// Parses `hf:ORG/REPO/PATH/TO/FILE.gguf[@REVISION]`.
    pub fn parse(text: &str) -> Result<HfFile> {
        let Some(rest) = text.strip_prefix("hf:") else {
            fail!("{text:?} is not a model `svc pull` knows; {ACCEPTED_FORMS}");
        };
        // `@` separates the revision only when what precedes it is the file.
        let (location, revision) = match rest.rsplit_once('@') {
            Some((location, revision)) if is_gguf_name(location) => (location, revision),
            _ => (rest, "main"),
        };
        let parts: Vec<&str> = location.split('/').collect();
        let bad = |why: &str| ModelError::Failed(format!("{text:?}: {why}; {ACCEPTED_FORMS}"));
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
    pub fn url(&self, endpoint: &str) -> Result<Url> {
        let mut url = Url::parse(endpoint)
            .with_context(|| format!("HF_ENDPOINT {endpoint:?} is not a valid URL"))?;
        {
            let mut segments = url.path_segments_mut().map_err(|()| {
                ModelError::Failed(format!("HF_ENDPOINT {endpoint:?} cannot be a base URL"))
            })?;
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
/// unless a GGUF file is already there; returns its path. What it does goes
/// to `progress`.
pub async fn pull_hf(
    data_dir: &Path,
    file: &HfFile,
    hub: &HfHub,
    progress: &Arc<dyn Progress>,
) -> Result<PathBuf> {
    let dest = file.local_path(data_dir);
    if dest.exists() {
        match has_gguf_magic(&dest).await {
            Ok(true) => {
                progress.message(&format!(
                    "{file} is already in place: {} (delete it to download it again)",
                    dest.display()
                ));
                return Ok(dest);
            }
            _ => progress.message(&format!(
                "The copy at {} is not a GGUF file; downloading it again.",
                dest.display()
            )),
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
    progress.message(&format!("Downloading {file} from {}", hub.endpoint));
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
        fail!("{file}: {hint} (HTTP {status} from {})", hub.endpoint);
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
    let transfer = Transfer::start(progress.as_ref(), &name, total);
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
                fail!(
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
        transfer.advance(chunk.len() as u64);
    }
    transfer.finish();
    if head.as_slice() != GGUF_MAGIC {
        fail!("{file}: the server did not send a GGUF file ({written} bytes)");
    }
    if let Some(total) = total
        && written != total
    {
        fail!("{file}: received {written} bytes of {total}");
    }
    let got = hex::encode(hasher.finalize());
    let verified = match &expected_sha256 {
        Some(want) if !got.eq_ignore_ascii_case(want) => {
            fail!(
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
    progress.message(&format!(
        "Downloaded {file} ({written} bytes, {}).",
        if verified {
            "SHA-256 verified"
        } else {
            "the hub sent no SHA-256 to check"
        }
    ));
    Ok(dest)
}

/// GETs `url`, following redirects by hand so that the token goes only to
/// the hub's own origin and the hub's SHA-256 ETag (sent on its redirect to
/// the storage backend) is seen. Returns the last response and that SHA-256.
async fn get_following_redirects(
    client: &reqwest::Client,
    mut url: Url,
    hub: &HfHub,
) -> Result<(reqwest::Response, Option<String>)> {
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
    fail!("too many redirects from {}", display_origin(&url))
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

#[cfg(test)]
mod tests {

    use super::*;
    use crate::ModelRef;

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
        assert_eq!(ModelRef::parse(Some("gemma3")).unwrap(), ModelRef::Gemma3);
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
