//! `svc chat` in a real terminal: tmux runs it, `send-keys` types and
//! `capture-pane` reads the screen. The server is the real one built in
//! process (`TestApp`) with engines that show what they were sent, so the
//! conversation's context and a stopped reply can be checked exactly.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use svc_core::{
    ChatMessage, Engine, EngineError, EngineEvent, EventStream, FinishReason, GenerateRequest,
    TokenUsage,
};
use svc_server::{ModelRegistry, ModelRoute, ServerConfig};
use svc_test_support::{Database, Probe, TestApp};
use tempfile::TempDir;

use crate::support::{Home, SVC, mode};

/// A tmux server of its own, with one session `t` running one command.
struct Tmux {
    socket: PathBuf,
    /// Where the command's exit status is written when it ends: tmux does
    /// not always reap a program that ends quickly, so `#{pane_dead_status}`
    /// cannot be relied on.
    status_file: PathBuf,
    _dir: TempDir,
}

impl Tmux {
    /// Runs `svc ARGS` in a 100x40 terminal, with `env` set, as `home`'s user.
    fn start(home: &Home, args: &[&str], env: &[(&str, &str)]) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let tmux = Tmux {
            socket: dir.path().join("tmux.sock"),
            status_file: dir.path().join("status"),
            _dir: dir,
        };
        let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
        // The shell around svc shrugs off Ctrl-C (its own trap; svc gets the
        // default disposition) and records the exit status.
        let mut line = String::from("trap : INT; env -u SVC_API_KEY -u SVC_BASE_URL");
        let home_path = home.path().to_str().unwrap();
        let mut vars = vec![
            ("HOME".to_owned(), home_path.to_owned()),
            ("XDG_CONFIG_HOME".to_owned(), format!("{home_path}/config")),
            ("XDG_STATE_HOME".to_owned(), format!("{home_path}/state")),
            ("SVC_LOG".to_owned(), "warn".to_owned()),
        ];
        vars.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        for (name, value) in vars {
            line.push_str(&format!(" {name}={}", quote(&value)));
        }
        line.push(' ');
        line.push_str(&quote(SVC));
        for arg in args {
            line.push(' ');
            line.push_str(&quote(arg));
        }
        line.push_str(&format!(
            "; echo $? > {}",
            quote(tmux.status_file.to_str().unwrap())
        ));
        let output = tmux.tmux(&[
            "start-server",
            ";",
            "set-option",
            "-g",
            "remain-on-exit",
            "on",
            ";",
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "100",
            "-y",
            "40",
            &line,
        ]);
        assert!(
            output.status.success(),
            "tmux is needed for these tests (apt-get install tmux): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        tmux
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(["-f", "/dev/null"])
            .args(args)
            .output()
            .expect("tmux is needed for these tests (apt-get install tmux)")
    }

    /// Types `text` literally, then Enter.
    fn type_line(&self, text: &str) {
        assert!(
            self.tmux(&["send-keys", "-t", "t", "-l", text])
                .status
                .success()
        );
        self.key("Enter");
    }

    /// Presses a key by tmux's name (`Enter`, `C-c`, `C-d`).
    fn key(&self, name: &str) {
        assert!(self.tmux(&["send-keys", "-t", "t", name]).status.success());
    }

    /// The screen and its scrollback, as text.
    fn screen(&self) -> String {
        String::from_utf8(
            self.tmux(&["capture-pane", "-p", "-t", "t", "-S", "-", "-J"])
                .stdout,
        )
        .unwrap()
    }

    /// The screen with its colours and styles as escape sequences.
    fn screen_with_styles(&self) -> String {
        String::from_utf8(
            self.tmux(&["capture-pane", "-p", "-e", "-t", "t", "-S", "-", "-J"])
                .stdout,
        )
        .unwrap()
    }

    /// Waits up to 15 s until the screen satisfies `ready`.
    fn wait_for(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "waited in vain for {what}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The exit status once the program ended, else `None`.
    fn exit_status(&self) -> Option<i32> {
        let text = std::fs::read_to_string(&self.status_file).ok()?;
        text.trim().parse().ok()
    }

    /// Waits up to 10 s for the program to end; its exit status.
    fn wait_exit(&self) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.exit_status() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the program did not end; the screen:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

/// What the recording engine saw and did.
#[derive(Default)]
struct Record {
    /// Each request's messages, as `role: text`.
    requests: Mutex<Vec<Vec<String>>>,
    /// Replies whose stream was dropped before they finished.
    stopped: AtomicUsize,
}

/// Replies `Reply N: heard [first | second | ...]`, listing every user
/// message it was sent; a message containing "long" gets 200 words, one
/// every 50 ms.
struct Recorder(Arc<Record>);

struct StopGuard(Arc<Record>, bool);

impl Drop for StopGuard {
    fn drop(&mut self) {
        if !self.1 {
            self.0.stopped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl svc_core::Generator for Recorder {
    async fn generate(&self, request: GenerateRequest) -> Result<EventStream, EngineError> {
        let mut seen = Vec::new();
        let mut users = Vec::new();
        for message in &request.messages {
            match message {
                ChatMessage::System(t) => seen.push(format!("system: {t}")),
                ChatMessage::User(t) => {
                    seen.push(format!("user: {t}"));
                    users.push(t.clone());
                }
                ChatMessage::Assistant { content, .. } => {
                    seen.push(format!(
                        "assistant: {}",
                        content.clone().unwrap_or_default()
                    ));
                }
                ChatMessage::Tool { content, .. } => seen.push(format!("tool: {content}")),
                ChatMessage::UserParts(_) => panic!("the terminal client sends no images"),
            }
        }
        self.0.requests.lock().unwrap().push(seen);
        let long = users.last().is_some_and(|u| u.contains("long"));
        let reply = format!("Reply {}: heard [{}]", users.len(), users.join(" | "));
        let record = self.0.clone();
        Ok(Box::pin(async_stream::stream! {
            let mut guard = StopGuard(record, false);
            if long {
                for i in 0..200 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    yield Ok(EngineEvent::Text(format!("word{i} ")));
                }
            } else {
                yield Ok(EngineEvent::Text(reply));
            }
            guard.1 = true;
            yield Ok(EngineEvent::Finish {
                reason: FinishReason::Stop,
                usage: TokenUsage { prompt_tokens: 1, completion_tokens: 1, ..TokenUsage::default() },
            });
        }))
    }

    async fn count_tokens(&self, request: &GenerateRequest) -> Result<u64, EngineError> {
        Ok(svc_core::estimate_tokens(request))
    }

    fn sees_images(&self) -> bool {
        false
    }
}

impl Engine for Recorder {
    svc_core::offers!(generator);

    fn name(&self) -> &str {
        "recorder"
    }
}

async fn recording_server() -> (TestApp, Arc<Record>) {
    let record = Arc::new(Record::default());
    let models = ModelRegistry::new(vec![ModelRoute {
        id: "svc".into(),
        engine: Arc::new(Recorder(record.clone())),
        reasoning: false,
        created: 1_700_000_000,
        owned_by: "svc".into(),
        default_system_prompt: None,
        fallbacks: svc_server::Fallbacks::default(),
    }]);
    let app = TestApp::spawn_models(
        Database::Sqlite,
        ServerConfig::default(),
        models,
        Arc::new(Probe::default()),
    )
    .await;
    (app, record)
}

/// The screen ends with an empty prompt.
fn at_prompt(screen: &str) -> bool {
    screen.trim_end().ends_with(">>>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interactive_session_keeps_context_stops_on_ctrl_c_and_exits() {
    let (app, record) = recording_server().await;
    let key = app.create_key().await;
    let home = Home::new();
    let env = [
        ("SVC_BASE_URL", app.base_url.as_str()),
        ("SVC_API_KEY", key.as_str()),
    ];
    let tmux = Tmux::start(&home, &["chat"], &env);
    let screen = tmux.wait_for("the prompt", at_prompt);
    assert!(screen.contains("Type /help for help"), "{screen}");

    // Two turns: the second request carries the first exchange.
    tmux.type_line("My name is Ada");
    tmux.wait_for("the first reply", |s| {
        s.contains("Reply 1: heard [My name is Ada]") && at_prompt(s)
    });
    tmux.type_line("What is my name?");
    tmux.wait_for("the second reply", |s| {
        s.contains("Reply 2: heard [My name is Ada | What is my name?]") && at_prompt(s)
    });
    assert_eq!(
        record.requests.lock().unwrap()[1],
        [
            "user: My name is Ada",
            "assistant: Reply 1: heard [My name is Ada]",
            "user: What is my name?"
        ]
    );

    // A multi-line message, and the commands.
    tmux.type_line("\"\"\"");
    tmux.type_line("line one");
    tmux.type_line("line two\"\"\"");
    tmux.wait_for("the multi-line reply", |s| {
        s.contains("Reply 3: heard") && at_prompt(s)
    });
    assert_eq!(
        record.requests.lock().unwrap()[2].last().unwrap(),
        "user: line one\nline two"
    );
    tmux.type_line("/system Answer in French.");
    tmux.wait_for("the system prompt", |s| s.contains("(system prompt set)"));
    tmux.type_line("/clear");
    tmux.wait_for("the cleared conversation", |s| {
        s.contains("(conversation cleared)")
    });
    tmux.type_line("/model nope");
    tmux.wait_for("the unknown model", |s| {
        s.contains("No model \"nope\" on this server")
    });
    tmux.type_line("Hello again");
    tmux.wait_for("the reply after /clear", |s| {
        s.contains("Reply 1: heard [Hello again]") && at_prompt(s)
    });
    assert_eq!(
        record.requests.lock().unwrap()[3],
        ["system: Answer in French.", "user: Hello again"]
    );

    // Ctrl-C stops a long reply, and the session goes on.
    tmux.type_line("Tell me something long");
    tmux.wait_for("the long reply to start", |s| s.contains("word3 "));
    tmux.key("C-c");
    let screen = tmux.wait_for("the stop", |s| s.contains("(stopped)") && at_prompt(s));
    assert!(!screen.contains("word199"), "{screen}");
    assert!(tmux.exit_status().is_none(), "Ctrl-C ended the session");
    let deadline = Instant::now() + Duration::from_secs(5);
    while record.stopped.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the server went on generating");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // What came before the stop is kept as context.
    tmux.type_line("And now?");
    tmux.wait_for("the reply after the stop", |s| {
        s.contains("Reply 3: heard [Hello again | Tell me something long | And now?]")
    });
    let last = record.requests.lock().unwrap().last().unwrap().clone();
    assert!(
        last[4].starts_with("assistant: word0 word1 word2 word3"),
        "{last:?}"
    );

    // Ctrl-C at the prompt does not leave; /exit does, with status 0.
    tmux.key("C-c");
    tmux.wait_for("the hint", |s| {
        s.contains("(To leave, press Ctrl-D or type /exit.)")
    });
    assert!(tmux.exit_status().is_none());
    tmux.type_line("/exit");
    assert_eq!(tmux.wait_exit(), 0);

    // The history is kept, privately.
    let history = home.path().join("state/svc/chat_history");
    let text = std::fs::read_to_string(&history).unwrap();
    assert!(text.contains("My name is Ada"), "{text}");
    assert_eq!(mode(&history), 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ctrl_d_leaves_and_errors_keep_the_session() {
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let home = Home::new();
    let env = [
        ("SVC_BASE_URL", app.base_url.as_str()),
        ("SVC_API_KEY", key.as_str()),
    ];
    let tmux = Tmux::start(&home, &["chat", "-m", "fake-fail"], &env);
    tmux.wait_for("the prompt", at_prompt);
    tmux.type_line("one two three four");
    let screen = tmux.wait_for("the failure", |s| {
        s.contains("error: the reply failed midway") && at_prompt(s)
    });
    assert!(screen.contains("You said: "), "{screen}");
    tmux.key("C-d");
    assert_eq!(tmux.wait_exit(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reasoning_is_dimmed_on_a_terminal_and_never_in_redirected_output() {
    // The fake svc-thinking thinks "Thinking it over. Done thinking." first.
    let app = TestApp::spawn().await;
    let key = app.create_key().await;
    let home = Home::new();
    let env = [
        ("SVC_BASE_URL", app.base_url.as_str()),
        ("SVC_API_KEY", key.as_str()),
    ];

    let tmux = Tmux::start(&home, &["chat", "-m", "svc-thinking", "Hello there"], &env);
    assert_eq!(tmux.wait_exit(), 0);
    let screen = tmux.screen();
    assert!(
        screen.contains("Thinking it over. Done thinking."),
        "{screen}"
    );
    assert!(screen.contains("You said: Hello there"), "{screen}");
    let styled = tmux.screen_with_styles();
    assert!(
        styled.contains("\x1b[2mThinking it over."),
        "the reasoning is not dimmed: {styled:?}"
    );
    assert!(!styled.contains("\x1b[2mYou said"), "{styled:?}");

    let tmux = Tmux::start(
        &home,
        &[
            "chat",
            "-m",
            "svc-thinking",
            "--hide-reasoning",
            "Hello there",
        ],
        &env,
    );
    assert_eq!(tmux.wait_exit(), 0);
    let screen = tmux.screen();
    assert!(!screen.contains("Thinking"), "{screen}");
    assert!(screen.contains("You said: Hello there"), "{screen}");

    // Redirected: only the answer.
    let run = tokio::task::block_in_place(|| {
        home.run(&["chat", "-m", "svc-thinking", "Hello there"], &env)
    })
    .expect(0);
    assert_eq!(run.stdout(), "You said: Hello there\n");
    assert!(!run.stderr().contains("Thinking"), "{}", run.stderr());
}
