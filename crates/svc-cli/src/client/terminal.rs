//! The terminal around the client: whether streams are terminals, ANSI
//! styles (only on a terminal, and never with `NO_COLOR` or `TERM=dumb`),
//! opening the browser, and times as people read them.

use std::io::IsTerminal;
use std::process::{Command, Stdio};

use chrono::{DateTime, Utc};

pub const BOLD: &str = "\x1b[1m";
pub const DIM: &str = "\x1b[2m";
pub const RESET: &str = "\x1b[0m";

/// Whether ANSI styles may be written to a stream that `is_terminal` or not.
pub fn styles_allowed(is_terminal: bool) -> bool {
    is_terminal
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

/// Whether stderr takes styles.
pub fn stderr_styled() -> bool {
    styles_allowed(std::io::stderr().is_terminal())
}

/// `text` in bold when `styled`.
pub fn bold(text: &str, styled: bool) -> String {
    if styled {
        format!("{BOLD}{text}{RESET}")
    } else {
        text.to_owned()
    }
}

/// Opens `url` in the person's browser: `$BROWSER`, else `xdg-open` (or
/// `open` on macOS). Whether a program could be started; failures are
/// otherwise ignored (the address is printed anyway).
pub fn open_browser(url: &str) -> bool {
    let program = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| {
            if cfg!(target_os = "macos") {
                "open".into()
            } else {
                "xdg-open".into()
            }
        });
    let child = Command::new(program)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    match child {
        Ok(mut child) => {
            // Reap it in the background; the browser may outlive svc.
            std::thread::spawn(move || child.wait());
            true
        }
        Err(_) => false,
    }
}

/// Stops the terminal on stdin from echoing what is typed, while it lives
/// (so that pressing Enter during `svc login` does not break the spinner).
/// Does nothing when stdin is not a terminal.
pub struct EchoOff {
    #[cfg(unix)]
    saved: Option<nix::sys::termios::Termios>,
}

impl EchoOff {
    pub fn on_stdin() -> Self {
        #[cfg(unix)]
        {
            use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
            let stdin = std::io::stdin();
            if !stdin.is_terminal() {
                return EchoOff { saved: None };
            }
            let Ok(saved) = tcgetattr(&stdin) else {
                return EchoOff { saved: None };
            };
            let mut quiet = saved.clone();
            quiet.local_flags.remove(LocalFlags::ECHO);
            if tcsetattr(&stdin, SetArg::TCSANOW, &quiet).is_err() {
                return EchoOff { saved: None };
            }
            EchoOff { saved: Some(saved) }
        }
        #[cfg(not(unix))]
        EchoOff {}
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(saved) = &self.saved {
            let _ = nix::sys::termios::tcsetattr(
                std::io::stdin(),
                nix::sys::termios::SetArg::TCSANOW,
                saved,
            );
        }
    }
}

/// Resolves at Ctrl-C (SIGINT); never, if the handler cannot be installed.
/// Once awaited, Ctrl-C no longer kills the process: callers handle it.
pub async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// `2026-12-22 14:03 UTC`.
pub fn when(unix: i64) -> String {
    DateTime::<Utc>::from_timestamp(unix, 0)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|| unix.to_string())
}

/// `in 29 days`, `in 3 hours`, `2 days ago`.
pub fn relative(unix: i64, now: i64) -> String {
    let delta = unix - now;
    let span = delta.unsigned_abs();
    let amount = match span {
        s if s < 90 => format!("{s} seconds"),
        s if s < 90 * 60 => format!("{} minutes", (s + 30) / 60),
        s if s < 36 * 3600 => format!("{} hours", (s + 1800) / 3600),
        s => format!("{} days", (s + 43_200) / 86_400),
    };
    if delta >= 0 {
        format!("in {amount}")
    } else {
        format!("{amount} ago")
    }
}

/// `2026-12-22 14:03 UTC (in 29 days)`, or `never`.
pub fn expiry(expires_at: Option<i64>) -> String {
    match expires_at {
        Some(t) => format!("{} ({})", when(t), relative(t, Utc::now().timestamp())),
        None => "never".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_well() {
        assert_eq!(when(1_800_000_000), "2027-01-15 08:00 UTC");
        assert_eq!(relative(100 + 29 * 86_400 + 5, 100), "in 29 days");
        assert_eq!(relative(30 * 86_400 - 60, 0), "in 30 days");
        assert_eq!(relative(100, 100 + 3 * 3600), "3 hours ago");
        assert_eq!(relative(130, 100), "in 30 seconds");
        assert_eq!(expiry(None), "never");
    }
}
