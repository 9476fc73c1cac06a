//! A real `svc serve` process for tests: started with `--bind 127.0.0.1:0`
//! among its arguments, it is ready once it prints its address.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `svc serve`, killed on drop.
pub struct ServeProcess {
    child: Child,
    /// `http://127.0.0.1:<port>`, as the process printed it.
    pub base_url: String,
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
        let mut child = Command::new(svc)
            .arg("serve")
            .args(args)
            .envs(env.iter().copied())
            .env("SVC_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start svc serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("svc is serving on ") {
                    let _ = tx.send(url.trim().to_owned());
                }
            }
        });
        let base_url = rx
            .recv_timeout(startup)
            .expect("svc serve did not print its address");
        ServeProcess { child, base_url }
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
