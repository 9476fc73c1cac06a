//! How files are kept and batches run: the settings and the shared
//! bounds of the Batch API's files and lines (and of the audio files
//! written beside them), which the state holds. The Batch API itself is
//! `crate::batches`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::ratelimit::InFlight;
use crate::upload::Spool;

/// Uploads one key may stream at once: each holds a connection and a
/// temporary file of up to `files_max_bytes` until it ends.
const UPLOADS_PER_KEY: usize = 4;

/// Pieces of uploads (a batch of received chunks parsed, checked and
/// written) worked on at once in all, on blocking threads: half the cores.
/// An upload holds a turn only while a piece of it is worked on, never
/// while it waits for its client's next bytes, so slow uploads hold none
/// (see [`InFlight`]).
fn uploads_at_once() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// Creates that read a file and copy its lines at once, in all (the others
/// wait their turn): each holds the file's lines in memory meanwhile.
const CREATES_AT_ONCE: usize = 2;

/// How files are kept and batches run.
#[derive(Debug)]
pub struct Batches {
    /// Where files' bytes are (one file each, by id).
    pub(crate) dir: PathBuf,
    /// The largest file uploaded.
    pub(crate) file_max_bytes: usize,
    /// The largest audio file transcribed (written beside the files while
    /// it is needed).
    pub(crate) audio_max_bytes: usize,
    /// The most bytes of files one project keeps.
    pub(crate) quota_bytes: u64,
    /// Lines one replica runs at once.
    pub(crate) concurrency: usize,
    /// How long a replica holds lines (and a batch it finishes) before
    /// another may take them; renewed while it works.
    pub(crate) lease: Duration,
    /// How long an ended batch, its lines and its files are kept.
    pub(crate) retention: Duration,
    /// The paths batch lines may call: the endpoints that declare it.
    pub(crate) callable: Arc<[&'static str]>,
    /// Wakes the runner: a batch was created or cancelled.
    pub(crate) wake: Notify,
    /// Uploads in flight per key, and their pieces worked on in all.
    pub(crate) uploads: InFlight,
    /// The bytes uploads in progress hold on disk, all keys together.
    pub(crate) spool: Spool,
    /// Turns of the creates that read a file and copy its lines.
    pub(crate) creates: tokio::sync::Semaphore,
}

impl Batches {
    /// Files and batches as `config` says, whose lines may call `callable`
    /// (the paths of the endpoints that allow it).
    pub fn new(config: &crate::config::ServerConfig, callable: Arc<[&'static str]>) -> Self {
        Batches {
            callable,
            dir: config
                .files_dir
                .clone()
                .unwrap_or_else(|| std::env::temp_dir().join("svc-files")),
            file_max_bytes: config.files_max_bytes,
            audio_max_bytes: config.audio_max_bytes,
            quota_bytes: u64::try_from(config.files_quota_bytes).unwrap_or(u64::MAX),
            concurrency: config.batch_concurrency,
            lease: config.batch_lease,
            retention: config.batch_retention,
            wake: Notify::new(),
            uploads: InFlight::new("file upload", UPLOADS_PER_KEY, uploads_at_once()),
            spool: Spool::new(config.uploads_disk_bytes),
            creates: tokio::sync::Semaphore::new(CREATES_AT_ONCE),
        }
    }

    /// Makes the files' folder at start, with the folders above it.
    pub(crate) fn make_dir(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir).map_err(|e| {
            std::io::Error::new(e.kind(), format!("files_dir {}: {e}", self.dir.display()))
        })
    }

    /// Where the file `id` is (ids are checked to be `file-` and hex
    /// before they name a path).
    pub(crate) fn path(&self, id: &str) -> Option<PathBuf> {
        let hex = id.strip_prefix("file-")?;
        (!hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| self.dir.join(format!("{id}.jsonl")))
    }
}

/// Makes the files' folder `dir` again if it is gone, but never the folders
/// above it (those [`Batches::make_dir`] made at start): a data directory
/// deleted under a running server (a test's, as it stops) is not made again
/// by a write that was under way.
pub(crate) fn remake_dir(dir: &std::path::Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}
