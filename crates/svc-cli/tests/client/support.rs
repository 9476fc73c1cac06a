//! Helpers of the client tests: a private home for each `svc` run (config
//! and state directories), real `svc serve` processes, approving device
//! codes through the dashboard, and a `svc login` process read line by line.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use svc_engine_llama::testing::TinyModel;
use svc_test_support::{Browser, ServeProcess, process_temp_dir};
use tempfile::TempDir;

pub const SVC: &str = env!("CARGO_BIN_EXE_svc");
pub const PASSWORD: &str = "correct horse battery";

/// A user's machine: its own config and state directories, so `svc login`
/// writes nowhere else and tests do not see each other's logins.
pub struct Home {
    dir: TempDir,
}

impl Home {
    pub fn new() -> Home {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `$XDG_CONFIG_HOME/svc`.
    pub fn svc_config_dir(&self) -> PathBuf {
        self.path().join("config/svc")
    }

    pub fn credentials(&self) -> PathBuf {
        self.svc_config_dir().join("credentials.toml")
    }

    /// `svc ARGS` as this user, with none of the tester's own settings.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(SVC);
        command
            .args(args)
            .env_remove("SVC_API_KEY")
            .env_remove("SVC_BASE_URL")
            .env_remove("SSL_CERT_FILE")
            .env("HOME", self.path())
            .env("XDG_CONFIG_HOME", self.path().join("config"))
            .env("XDG_STATE_HOME", self.path().join("state"))
            // Never start a real browser.
            .env("BROWSER", "true")
            .env("SVC_LOG", "warn");
        command
    }

    /// Runs `svc ARGS` with `env` added and stdin empty.
    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        Run(self
            .command(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap())
    }

    /// Runs `svc ARGS` with `input` piped on stdin.
    pub fn run_piped(&self, args: &[&str], env: &[(&str, &str)], input: &str) -> Run {
        let mut child = self
            .command(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        Run(child.wait_with_output().unwrap())
    }

    /// The stored key, read from the credentials file.
    pub fn stored_key(&self) -> String {
        let text = std::fs::read_to_string(self.credentials()).unwrap();
        let value: toml::Value = toml::from_str(&text).unwrap();
        value["api_key"].as_str().unwrap().to_owned()
    }
}

/// A finished `svc` run.
pub struct Run(pub Output);

impl Run {
    pub fn code(&self) -> i32 {
        self.0.status.code().unwrap_or(-1)
    }
    pub fn stdout(&self) -> String {
        String::from_utf8(self.0.stdout.clone()).unwrap()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8(self.0.stderr.clone()).unwrap()
    }
    /// Asserts the exit code, showing both streams when it differs.
    #[track_caller]
    pub fn expect(self, code: i32) -> Run {
        assert_eq!(
            self.code(),
            code,
            "stdout: {}\nstderr: {}",
            self.stdout(),
            self.stderr()
        );
        self
    }
}

/// A tiny random-weights GGUF, written once per test binary: these tests
/// are about the client, not the text.
pub fn tiny_model() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = process_temp_dir().join("tiny.gguf");
        TinyModel::hello().write(&path).unwrap();
        path.to_str().unwrap().to_owned()
    })
}

/// A real `svc serve` on port 0 with its own data directory, an account
/// `ada@example.com`, and device polls allowed every second.
pub struct Server {
    _process: ServeProcess,
    pub base_url: String,
    _data: TempDir,
}

impl Server {
    pub fn start(extra: &[&str]) -> Server {
        let data = tempfile::tempdir().unwrap();
        let data_dir = data.path().to_str().unwrap();
        create_user(data_dir, "ada@example.com");
        let args = [
            &[
                "--data-dir",
                data_dir,
                "--bind",
                "127.0.0.1:0",
                "--model",
                tiny_model(),
                "--device-interval",
                "1",
            ],
            extra,
        ]
        .concat();
        let process = ServeProcess::start(SVC, &args, &[], Duration::from_secs(60));
        let base_url = process.base_url.clone();
        Server {
            _process: process,
            base_url,
            _data: data,
        }
    }

    /// `GET /v1/models` with `key`: the status.
    pub async fn status_with(&self, key: &str) -> u16 {
        reqwest::Client::new()
            .get(format!("{}/v1/models", self.base_url))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// Signs in as ada and chooses `decision` (`approve` or `deny`) for `user_code`.
    pub async fn decide(&self, user_code: &str, decision: &str) {
        let browser = Browser::new(&self.base_url);
        browser.sign_in("ada@example.com", PASSWORD).await;
        // The link fills the code in; submitting the form looks it up.
        let confirm = browser.enter_device_code(user_code).await;
        assert_eq!(confirm.status, 200, "{}", confirm.body);
        let id = confirm.input_value("id").unwrap();
        let done = browser
            .post(
                "/dashboard/device/decide",
                &[
                    ("csrf", &confirm.csrf()),
                    ("id", &id),
                    ("decision", decision),
                ],
            )
            .await;
        assert!(
            done.status.is_success() || done.status.is_redirection(),
            "{}: {}",
            done.status,
            done.body
        );
    }
}

/// `svc users create` with the password on stdin, before the server starts.
fn create_user(data_dir: &str, email: &str) {
    let mut child = Command::new(SVC)
        .args(["users", "create", "--data-dir", data_dir, "--email", email])
        .env("SVC_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{PASSWORD}").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A running `svc login`, its stderr read line by line.
pub struct Login {
    pub child: Child,
    lines: Receiver<String>,
    /// Every stderr line so far.
    pub seen: Vec<String>,
}

impl Login {
    /// Starts `svc login ARGS` as `home`'s user with `env` added.
    pub fn start(home: &Home, args: &[&str], env: &[(&str, &str)]) -> Login {
        let mut child = home
            .command(&[&["login"], args].concat())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Login {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The user code, from the `user_code=` address it prints.
    pub fn user_code(&mut self) -> String {
        let line = self.wait_for(|l| l.contains("user_code="));
        let code = line.split("user_code=").nth(1).unwrap();
        code.chars().take(9).collect()
    }

    /// Waits up to 20 s for a stderr line matching `found`.
    pub fn wait_for(&mut self, found: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if found(&line) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    panic!("no such line; stderr so far:\n{}", self.seen.join("\n"))
                }
            }
        }
    }

    /// Waits up to `limit` for the process to end; its status and whole stderr.
    pub fn finish(mut self, limit: Duration) -> (ExitStatus, String) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "svc login did not end; stderr so far:\n{}",
                    self.seen.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(line);
        }
        (status, self.seen.join("\n"))
    }
}

impl Drop for Login {
    /// A test that failed half-way leaves no `svc login` polling behind.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The file mode bits of `path`.
pub fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// An address where nothing listens.
pub fn dead_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}
