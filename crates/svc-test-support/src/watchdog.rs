//! What a test starts ends with the test process, however that ends.
//!
//! A value kept in a `static` is never dropped, a panicking test may not
//! unwind, and a test binary killed by a signal runs no destructor at all, so
//! `Drop` alone cannot promise that a child process is killed or a temporary
//! directory removed. Here each such thing is handed to a small watchdog
//! process (`sh`) whose standard input is a pipe from the test process: the
//! kernel closes that pipe when the test process ends, for any reason, and
//! the watchdog then kills what it started and removes what it was given.
//! Its pipe is close-on-exec in the test process, so no other child keeps it
//! open.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

/// Runs the command given as its arguments with `/dev/null` as input, says
/// its pid on stderr (and then writes there no more: the shell's "Killed"
/// would end it by SIGPIPE once the test process, the reader, is gone),
/// waits for the end of its own input (its lifeline),
/// then kills the command with SIGKILL, waits for it, and removes the
/// directory named in `SVC_WATCHDOG_REMOVE` if any.
/// Ctrl-C at a terminal signals the whole process group: the watchdog
/// ignores it (the test process ending is its signal) and so outlives the
/// test process to clean up.
const RUN: &str = r#"
"$@" </dev/null &
pid=$!
trap '' INT TERM HUP
echo "svc-watchdog: child $pid" >&2
exec 2>/dev/null
cat >/dev/null
kill -KILL "$pid" 2>/dev/null
wait "$pid"
[ -n "$SVC_WATCHDOG_REMOVE" ] && rm -rf -- "$SVC_WATCHDOG_REMOVE"
exit 0
"#;

/// Waits for the end of its input, then removes the directory named by its argument.
const REMOVE: &str = r#"trap '' INT TERM HUP; cat >/dev/null; rm -rf -- "$1""#;

/// `command` (program and arguments) run under a watchdog: spawn the
/// returned [`Command`] with its stdin piped ([`Watched::spawn`] does) and
/// keep that pipe open for as long as the command should live. When
/// `remove` is given, that directory is removed once the command is gone.
pub fn watched(program: &str, args: &[&str], remove: Option<&Path>) -> Command {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(RUN)
        .arg("svc-watchdog")
        .arg(program)
        .args(args);
    match remove {
        Some(dir) => command.env("SVC_WATCHDOG_REMOVE", dir),
        None => command.env_remove("SVC_WATCHDOG_REMOVE"),
    };
    command
}

/// A process started under a watchdog (see [`watched`]).
pub struct Watched {
    /// The watchdog (`sh`), not the watched process itself.
    watchdog: Child,
    lifeline: Option<ChildStdin>,
}

impl Watched {
    /// Spawns `command`, made by [`watched`], with its lifeline piped in.
    pub fn spawn(mut command: Command) -> io::Result<Watched> {
        let mut watchdog = command.stdin(Stdio::piped()).spawn()?;
        let lifeline = watchdog.stdin.take();
        Ok(Watched { watchdog, lifeline })
    }

    /// The watchdog's stderr, when it was piped: the watched process's
    /// stderr too, after the watchdog's one line `svc-watchdog: child PID`.
    pub fn take_stderr(&mut self) -> Option<std::process::ChildStderr> {
        self.watchdog.stderr.take()
    }

    /// Kills the watched process and waits until it is gone and its
    /// directory removed.
    pub fn stop(&mut self) {
        // Closing the lifeline is what the watchdog waits for.
        self.lifeline.take();
        let _ = self.watchdog.wait();
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Lifelines of what lives as long as the test process (never closed).
static FOREVER: Mutex<Vec<ChildStdin>> = Mutex::new(Vec::new());

/// Makes `dir` be removed when the test process ends, however it ends: for
/// a directory kept in a `static`, whose destructor never runs.
pub fn remove_at_exit(dir: &Path) -> io::Result<()> {
    let mut watchdog = Command::new("sh")
        .arg("-c")
        .arg(REMOVE)
        .arg("svc-watchdog")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    if let Some(lifeline) = watchdog.stdin.take() {
        FOREVER
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(lifeline);
    }
    Ok(())
}

/// A fresh temporary directory that lives as long as the test process and
/// is removed when it ends: for what a `static` keeps.
pub fn process_temp_dir() -> PathBuf {
    let dir = tempfile::Builder::new()
        .prefix("svc-test-")
        .tempdir()
        .expect("create a temporary directory")
        .keep();
    remove_at_exit(&dir).expect("start the watchdog that removes it");
    dir
}
