//! How `svc pull` and `svc serve` show model downloads: news as lines on
//! stderr, each transfer as a bar in bytes (hidden when stderr is not a
//! terminal). `svc-models` reports; this draws.

use std::sync::{Mutex, PoisonError};

use indicatif::{ProgressBar, ProgressStyle};
use svc_models::Progress;

use crate::output::errln;

/// A [`Progress`] that draws on stderr.
#[derive(Debug, Default)]
pub struct StderrProgress {
    bar: Mutex<Option<ProgressBar>>,
}

impl StderrProgress {
    fn bar(&self) -> std::sync::MutexGuard<'_, Option<ProgressBar>> {
        self.bar.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Progress for StderrProgress {
    fn message(&self, text: &str) {
        errln!("{text}");
    }

    fn start(&self, name: &str, total: Option<u64>) {
        *self.bar() = Some(byte_bar(total, name));
    }

    fn advance(&self, bytes: u64) {
        if let Some(bar) = self.bar().as_ref() {
            bar.inc(bytes);
        }
    }

    fn finish(&self) {
        if let Some(bar) = self.bar().take() {
            bar.finish_and_clear();
        }
    }

    fn abandon(&self) {
        // Dropped unfinished, indicatif leaves the bar where it stopped.
        drop(self.bar().take());
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
