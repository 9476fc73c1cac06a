//! The version behind [`KeyStore::keys_version`](svc_core::store::KeyStore::keys_version):
//! a number that changes whenever a key is revoked or its limits are set,
//! or an account is disabled, enabled or deleted (its keys are judged with
//! it), here or in another process sharing the data, and that costs no query to
//! read (it is read on every authenticated request).
//!
//! - An in-memory SQLite database belongs to this process alone: a counter.
//! - A SQLite file can be changed by any process on the machine (`svc keys
//!   revoke` beside a running `svc serve`): every change appends one byte
//!   to `<file>-keychanges` once it is committed, and the version is that
//!   file's size, which only ever grows (one `stat` a request), plus this
//!   process's own changes.
//! - PostgreSQL: triggers (migrations 0004 and 0005) notify the channel
//!   `svc_keys_<schema>` on every change, by any client, psql included.
//!   Each store listens on a connection of its own; while that connection
//!   is down the version is `None` (nothing may be reused), and it changes
//!   when listening starts again, since notifications sent meanwhile are
//!   lost. A store that changed a key itself waits (briefly) until its own
//!   notification comes back, by which time the other replicas' listeners
//!   have been sent theirs.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The longest a change made here waits for its own notification.
const ECHO_WAIT: Duration = Duration::from_millis(250);
/// The longest a change made here waits for this store to start listening.
const LIVE_WAIT: Duration = Duration::from_secs(1);
/// Waits between attempts at listening again, doubling up to the last.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// How one store learns of key changes.
pub(crate) enum KeyChanges {
    /// An in-memory database: only this process changes it.
    Local(AtomicU64),
    /// A SQLite file: the size of the file every change appends to, and
    /// the changes made here (should appending fail).
    File(PathBuf, AtomicU64),
    /// PostgreSQL: notifications on a listening connection.
    Listen(Arc<Listening>),
}

impl KeyChanges {
    /// For an in-memory SQLite database.
    pub(crate) fn local() -> Self {
        KeyChanges::Local(AtomicU64::new(0))
    }

    /// For the SQLite file `database`.
    pub(crate) fn file(database: PathBuf) -> Self {
        let mut name = database.into_os_string();
        name.push("-keychanges");
        KeyChanges::File(PathBuf::from(name), AtomicU64::new(0))
    }

    /// For PostgreSQL at `url`: starts listening (in the background; the
    /// version is `None` until it does).
    pub(crate) fn listen(url: &str) -> Self {
        let listening = Arc::new(Listening {
            version: AtomicU64::new(0),
            live: AtomicBool::new(false),
            heard: AtomicU64::new(0),
            hear: Notify::new(),
            stop: CancellationToken::new(),
        });
        #[expect(
            clippy::disallowed_methods,
            reason = "the listener ends when the store is closed or dropped (the `stop` token)"
        )]
        tokio::spawn(listen(
            url.to_owned(),
            Arc::downgrade(&listening),
            listening.stop.clone(),
        ));
        KeyChanges::Listen(listening)
    }

    /// The current version, when it can be told.
    pub(crate) fn version(&self) -> Option<u64> {
        match self {
            KeyChanges::Local(n) => Some(n.load(Ordering::Acquire)),
            // Both only grow, so their sum changes whenever either does.
            KeyChanges::File(path, here) => {
                let size = match std::fs::metadata(path) {
                    Ok(meta) => meta.len(),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
                    Err(_) => return None,
                };
                Some(size + here.load(Ordering::Acquire))
            }
            KeyChanges::Listen(l) => l.live.load(Ordering::Acquire).then(|| l.version()),
        }
    }

    /// What [`KeyChanges::changed`] needs to know from before the change.
    ///
    /// On PostgreSQL, first waits (at most [`LIVE_WAIT`]) for this store's
    /// listener to be live: a store opened just to change one key (`svc
    /// keys revoke`, `svc users disable`) would otherwise make its change
    /// before it can hear the echo, exit at once, and let the caller ask a
    /// replica that has not heard the notification yet.
    pub(crate) async fn before_change(&self) -> u64 {
        match self {
            KeyChanges::Listen(l) => {
                l.wait_until_live().await;
                l.heard.load(Ordering::Acquire)
            }
            _ => 0,
        }
    }

    /// Announces a committed change. Should a SQLite file's announcement
    /// fail to be written, other processes reuse what they read for at most
    /// the auth cache's time limit; this process sees the change either way.
    pub(crate) async fn changed(&self, before: u64) {
        match self {
            KeyChanges::Local(n) => {
                n.fetch_add(1, Ordering::AcqRel);
            }
            KeyChanges::File(path, here) => {
                here.fetch_add(1, Ordering::AcqRel);
                let _ = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .and_then(|mut f| f.write_all(b"."));
            }
            KeyChanges::Listen(l) => {
                l.bump();
                l.wait_for_echo(before).await;
            }
        }
    }

    /// Stops listening (the store is being closed).
    pub(crate) fn stop(&self) {
        if let KeyChanges::Listen(l) = self {
            l.stop.cancel();
        }
    }
}

/// A store's listening connection, as the rest of the store sees it.
pub(crate) struct Listening {
    /// Changes heard or made here, and restarts of listening.
    version: AtomicU64,
    /// Whether the connection is listening now.
    live: AtomicBool,
    /// Notifications heard.
    heard: AtomicU64,
    /// Woken by every notification heard, and when listening starts.
    hear: Notify,
    stop: CancellationToken,
}

impl Listening {
    fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    fn bump(&self) {
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// Waits until the connection listens, or [`LIVE_WAIT`] passed.
    async fn wait_until_live(&self) {
        let _ = tokio::time::timeout(LIVE_WAIT, async {
            loop {
                let started = self.hear.notified();
                if self.live.load(Ordering::Acquire) {
                    return;
                }
                started.await;
            }
        })
        .await;
    }

    /// Waits until a notification newer than `before` was heard, or
    /// [`ECHO_WAIT`] passed; at once when nothing listens here (listening
    /// could not start in [`LIVE_WAIT`]).
    async fn wait_for_echo(&self, before: u64) {
        if !self.live.load(Ordering::Acquire) {
            return;
        }
        let _ = tokio::time::timeout(ECHO_WAIT, async {
            loop {
                let heard = self.hear.notified();
                if self.heard.load(Ordering::Acquire) > before {
                    return;
                }
                heard.await;
            }
        })
        .await;
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Listens until `stop`, connecting again whenever the connection is lost.
async fn listen(url: String, listening: Weak<Listening>, stop: CancellationToken) {
    let mut retry = RETRY_FIRST;
    loop {
        let started = tokio::select! {
            () = stop.cancelled() => return,
            started = start_listening(&url) => started,
        };
        let mut listener = match started {
            Ok(listener) => listener,
            Err(_) => {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(RETRY_MAX);
                continue;
            }
        };
        retry = RETRY_FIRST;
        {
            let Some(l) = listening.upgrade() else { return };
            // Whatever was sent while nobody listened is lost: start afresh.
            l.bump();
            l.live.store(true, Ordering::Release);
            l.hear.notify_waiters();
        }
        loop {
            let next = tokio::select! {
                () = stop.cancelled() => return,
                next = listener.try_recv() => next,
            };
            let Some(l) = listening.upgrade() else { return };
            match next {
                Ok(Some(_)) => {
                    l.bump();
                    l.heard.fetch_add(1, Ordering::AcqRel);
                    l.hear.notify_waiters();
                }
                // The connection is gone: nothing may be reused until
                // listening starts again.
                Ok(None) | Err(_) => {
                    l.live.store(false, Ordering::Release);
                    l.bump();
                    break;
                }
            }
        }
    }
}

/// A connection listening on this database's channel.
async fn start_listening(url: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect(url).await?;
    // The trigger names the channel after the table's schema.
    let channel: String = sqlx::query_scalar(CHANNEL).fetch_one(&mut listener).await?;
    listener.listen(&channel).await?;
    Ok(listener)
}

/// The channel's name, as the trigger of migration 0004 computes it.
const CHANNEL: &str = "SELECT left('svc_keys_' || current_schema(), 63)";
