//! A real `svc serve` process for tests: started with `--bind 127.0.0.1:0`
//! among its arguments, it is ready once it prints its address.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::watchdog::{Watched, watched};

/// A running `svc serve`, killed on drop, and in any case when the test
/// process ends (it runs under a [watchdog](crate::watchdog)).
pub struct ServeProcess {
    process: Watched,
    /// `http://127.0.0.1:<port>`, as the process printed it.
    pub base_url: String,
    /// What it printed on stderr so far, a line each.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl ServeProcess {
    /// Runs `svc serve ARGS` from the binary at `svc` with `env` added, and
    /// waits up to `startup` for `svc is serving on <url>` on stderr.
    pub fn start(
        svc: &str,
        args: &[&str],
        env: &[(&str, &str)],
        startup: Duration,
    ) -> ServeProcess {
        ServeProcess::start_removing(svc, args, env, startup, None)
    }

    /// As [`start`](Self::start), and removes the directory `remove` once
    /// the process is gone: for a server kept in a `static`, whose data
    /// directory no destructor would remove.
    pub fn start_removing(
        svc: &str,
        args: &[&str],
        env: &[(&str, &str)],
        startup: Duration,
        remove: Option<&Path>,
    ) -> ServeProcess {
        let args = [&["serve"], args].concat();
        let mut command = watched(svc, &args, remove);
        command
            .envs(env.iter().copied())
            .env("SVC_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut process = Watched::spawn(command).expect("start svc serve");
        let stderr = process.take_stderr().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::sync::Arc::<std::sync::Mutex<Vec<String>>>::default();
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("svc is serving on ") {
                    let _ = tx.send(url.trim().to_owned());
                }
                kept.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        });
        let base_url = rx
            .recv_timeout(startup)
            .expect("svc serve did not print its address");
        ServeProcess {
            process,
            base_url,
            log,
        }
    }

    /// The lines it printed on stderr so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Kills the process and waits until it is gone.
    pub fn stop(&mut self) {
        self.process.stop();
    }
}
