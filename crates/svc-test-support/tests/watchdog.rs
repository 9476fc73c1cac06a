//! What a test starts ends with the test process, even when that process
//! dies without running a destructor. The test runs this binary again as a
//! "victim" that starts a process and a directory under watchdogs (as a
//! `static` server would keep them), then aborts.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use svc_test_support::watchdog::{Watched, process_temp_dir, watched};

const VICTIM: &str = "SVC_WATCHDOG_TEST_VICTIM";

/// Only does something when run by `what_a_dead_test_started_ends_with_it`.
#[test]
fn victim() {
    if std::env::var_os(VICTIM).is_none() {
        return;
    }
    let kept = process_temp_dir();
    std::fs::write(kept.join("file"), "x").unwrap();
    let data = tempfile::tempdir().unwrap().keep();
    let mut command = watched("sleep", &["600"], Some(&data));
    command.stderr(Stdio::piped());
    let mut sleeper = Watched::spawn(command).unwrap();
    let line = BufReader::new(sleeper.take_stderr().unwrap())
        .lines()
        .next()
        .unwrap()
        .unwrap();
    let pid = line.strip_prefix("svc-watchdog: child ").unwrap().trim();
    println!("pid={pid}");
    println!("kept={}", kept.display());
    println!("data={}", data.display());
    // No destructor, no unwinding: as a test binary killed by a signal.
    std::mem::forget(sleeper);
    std::process::abort();
}

#[test]
fn what_a_dead_test_started_ends_with_it() {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "victim", "--nocapture", "--test-threads", "1"])
        .env(VICTIM, "1")
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success(), "the victim aborts");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let field = |name: &str| {
        stdout
            .lines()
            // The test harness may print `test victim ... ` before the first.
            .find_map(|l| l.split_once(&format!("{name}=")).map(|(_, v)| v))
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
            .to_owned()
    };
    let pid = field("pid");
    let kept = PathBuf::from(field("kept"));
    let data = PathBuf::from(field("data"));
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    eventually("the watched process is gone", || !running(&proc_dir));
    eventually("the static directory is removed", || !kept.exists());
    eventually("the process's directory is removed", || !data.exists());
}

/// Whether the process at `/proc/PID` is alive (a zombie is not).
fn running(proc_dir: &Path) -> bool {
    std::fs::read_to_string(proc_dir.join("stat"))
        .map(|stat| {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z')
        })
        .unwrap_or(false)
}

fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}
