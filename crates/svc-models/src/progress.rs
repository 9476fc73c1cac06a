//! How a pull tells its caller what it is doing: lines of news and the
//! progress of each transfer, through a trait the caller implements (the
//! command line draws a bar on stderr; tests record the calls).

/// Receives what a pull is doing. Transfers come one at a time: `start`,
/// any number of `advance`, then `finish` when the last byte arrived (it is
/// verified after), or `abandon` when it stopped short (an error, an
/// interruption).
pub trait Progress: Send + Sync {
    /// A line of news for the person waiting, without a trailing newline.
    fn message(&self, text: &str);
    /// A transfer of `name` starts; `total` is its size in bytes when known.
    fn start(&self, name: &str, total: Option<u64>);
    /// `bytes` more bytes of the current transfer arrived.
    fn advance(&self, bytes: u64);
    /// The current transfer completed.
    fn finish(&self);
    /// The current transfer stopped short.
    fn abandon(&self);
}

/// A [`Progress`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn message(&self, _text: &str) {}
    fn start(&self, _name: &str, _total: Option<u64>) {}
    fn advance(&self, _bytes: u64) {}
    fn finish(&self) {}
    fn abandon(&self) {}
}

/// One transfer: `start` when made, `abandon` when dropped before `finish`.
pub(crate) struct Transfer<'a> {
    progress: &'a dyn Progress,
    finished: bool,
}

impl<'a> Transfer<'a> {
    pub(crate) fn start(progress: &'a dyn Progress, name: &str, total: Option<u64>) -> Self {
        progress.start(name, total);
        Transfer {
            progress,
            finished: false,
        }
    }

    pub(crate) fn advance(&self, bytes: u64) {
        self.progress.advance(bytes);
    }

    pub(crate) fn finish(mut self) {
        self.finished = true;
        self.progress.finish();
    }
}

impl Drop for Transfer<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.progress.abandon();
        }
    }
}
