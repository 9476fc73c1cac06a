//! Installing a model file: its bytes go to `<file>.partial`, which is
//! synced and renamed onto the final name only once verified, and removed
//! otherwise (an error, an interruption, a dropped future).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Context, Result};

/// The buffer size for copying and hashing model files.
pub(crate) const COPY_BUFFER: usize = 1 << 20;

/// `<dest>.partial`, removed on drop unless installed.
pub(crate) struct Partial {
    partial: PathBuf,
    dest: PathBuf,
    installed: bool,
}

impl Partial {
    pub(crate) fn new(dest: &Path) -> Partial {
        let mut partial = dest.as_os_str().to_owned();
        partial.push(".partial");
        Partial {
            partial: PathBuf::from(partial),
            dest: dest.to_owned(),
            installed: false,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.partial
    }

    /// Syncs `file` (the partial, written in full), renames it onto the
    /// destination and syncs the directory, so the rename survives a crash.
    pub(crate) fn install(mut self, file: File) -> Result<()> {
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

/// Tells a blocking task to stop when the future that awaits it is dropped
/// (Ctrl-C in `svc pull`, shutdown in `svc serve`).
#[derive(Default)]
pub(crate) struct CancelOnDrop(Arc<AtomicBool>);

impl CancelOnDrop {
    pub(crate) fn flag(&self) -> Arc<AtomicBool> {
        self.0.clone()
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
