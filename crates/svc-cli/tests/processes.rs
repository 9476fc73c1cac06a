//! The `svc` binary as operators run it: `svc serve` processes and
//! `svc keys` commands sharing one store, on SQLite and on PostgreSQL.

// Serves models from GGUF files: needs the embedded engine.
#![cfg(feature = "embedded")]
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed check fails the test, output goes to its log, and its tasks end with it"
)]

use std::path::Path;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use svc_engine_llama::testing::TinyModel;

use svc_store::testing::{TestSchema, postgres_url};
use svc_test_support::{ServeProcess, process_temp_dir};

const SVC: &str = env!("CARGO_BIN_EXE_svc");

/// A running `svc serve` on this test's store.
struct Serve(ServeProcess);

impl Serve {
    fn start(args: &[&str]) -> Serve {
        Serve::start_with_env(args, &[])
    }

    /// Serves the models from a tiny generated GGUF: these tests are about
    /// keys and stores, not text, and must not fetch the real model.
    fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Serve {
        let args = [args, &["--model", tiny_model()]].concat();
        Serve(ServeProcess::start(
            SVC,
            &args,
            env,
            Duration::from_secs(30),
        ))
    }

    async fn models(&self, key: &str) -> reqwest::Response {
        reqwest::Client::new()
            .get(format!("{}/v1/models", self.0.base_url))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
    }
}

/// A tiny random-weights GGUF, written once per test binary.
fn tiny_model() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = process_temp_dir().join("tiny.gguf");
        TinyModel::hello().write(&path).unwrap();
        path.to_str().unwrap().to_owned()
    })
}

fn svc(args: &[&str]) -> Output {
    Command::new(SVC)
        .args(args)
        .env("SVC_LOG", "warn")
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// `svc keys create` prints the key alone on stdout.
fn create_key(store: &[&str], name: &str) -> String {
    let output = svc(&[&["keys", "create", "--name", name], store].concat());
    assert!(output.status.success(), "{}", stderr(&output));
    let out = stdout(&output);
    assert_eq!(
        out.lines().count(),
        1,
        "stdout holds the key alone: {out:?}"
    );
    let key = out.trim().to_owned();
    assert!(key.starts_with("sk-svc-") && key.len() == 47, "{key}");
    assert!(
        !stderr(&output).contains(&key),
        "the key went to stderr too"
    );
    key
}

/// The id of the key named `name`, from `svc keys list`.
fn key_id(store: &[&str], name: &str) -> String {
    let output = svc(&[&["keys", "list"], store].concat());
    assert!(output.status.success(), "{}", stderr(&output));
    let list = stdout(&output);
    let line = list
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("{name} not listed: {list}"));
    line.split_whitespace().next().unwrap().to_owned()
}

fn list_line(store: &[&str], id: &str) -> String {
    let list = stdout(&svc(&[&["keys", "list"], store].concat()));
    list.lines().find(|l| l.starts_with(id)).unwrap().to_owned()
}

async fn assert_revoked(serve: &Serve, key: &str) {
    assert_revoked_within(serve, key, Duration::ZERO).await;
}

/// As [`assert_revoked`], allowing `within` for PostgreSQL's notification
/// to reach the server (SQLite's change file is read on the next request).
async fn assert_revoked_within(serve: &Serve, key: &str, within: Duration) {
    let response = next_other_than(serve, key, 200, within).await;
    assert_eq!(response.status(), 401);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["message"], "This API key has been revoked.");
}

#[tokio::test]
async fn keys_made_by_the_cli_work_on_a_running_server_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let store = ["--data-dir", data_dir];
    let serve = Serve::start(&["--data-dir", data_dir, "--bind", "127.0.0.1:0"]);
    assert!(Path::new(data_dir).join("svc.db").exists());

    let key = create_key(&store, "laptop");
    assert_eq!(serve.models(&key).await.status(), 200);
    let id = key_id(&store, "laptop");
    let line = list_line(&store, &id);
    assert!(
        line.contains(&format!("{}…{}", &key[..11], &key[43..])),
        "hint: {line}"
    );
    assert!(line.ends_with("active"), "{line}");
    assert!(
        !line.contains(&key[7..]),
        "the list shows the secret: {line}"
    );

    let output = svc(&[&["keys", "revoke", &id], &store[..]].concat());
    assert!(output.status.success(), "{}", stderr(&output));
    assert_revoked(&serve, &key).await;
    assert!(list_line(&store, &id).ends_with("revoked"));

    let again = svc(&[&["keys", "revoke", &id], &store[..]].concat());
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("no active key"),
        "{}",
        stderr(&again)
    );
}

#[tokio::test]
async fn expiry_flag_is_read_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let store = ["--data-dir", dir.path().to_str().unwrap()];
    create_key(&[&store[..], &["--expires-in", "30d"]].concat(), "month");
    let id = key_id(&store, "month");
    let line = list_line(&store, &id);
    let expires = chrono::Utc::now() + chrono::Duration::days(30);
    assert!(
        line.contains(&expires.format("%Y-%m-%d").to_string()),
        "{line}"
    );

    let bad = svc(&[
        &["keys", "create", "--name", "x", "--expires-in", "5x"],
        &store[..],
    ]
    .concat());
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("invalid duration"),
        "{}",
        stderr(&bad)
    );
    assert!(stdout(&bad).is_empty());
}

#[tokio::test]
async fn two_servers_share_postgres_and_see_revocation_at_once() {
    let schema = TestSchema::create(&postgres_url()).await.unwrap();
    let url = schema.url().to_owned();
    let store = ["--database-url", url.as_str()];
    // Both start at once: concurrent migrations must not collide.
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| Serve::start(&["--database-url", &url, "--bind", "127.0.0.1:0"]));
        let b = s.spawn(|| Serve::start(&["--database-url", &url, "--bind", "127.0.0.1:0"]));
        (a.join().unwrap(), b.join().unwrap())
    });

    let key = create_key(&store, "shared");
    assert_eq!(a.models(&key).await.status(), 200);
    assert_eq!(b.models(&key).await.status(), 200);

    let id = key_id(&store, "shared");
    assert!(
        svc(&[&["keys", "revoke", &id], &store[..]].concat())
            .status
            .success()
    );
    // Each server hears of it through PostgreSQL's notification, a moment
    // after the command's commit.
    assert_revoked_within(&a, &key, Duration::from_secs(3)).await;
    assert_revoked_within(&b, &key, Duration::from_secs(3)).await;
    drop((a, b));
    schema.remove().await.unwrap();
}

#[tokio::test]
async fn settings_come_from_file_and_environment() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let config = dir.path().join("svc.toml");
    std::fs::write(
        &config,
        format!(
            "bind = \"127.0.0.1:0\"\npublic_url = \"https://api.example.test\"\ndata_dir = {:?}\n",
            data_dir.to_str().unwrap()
        ),
    )
    .unwrap();
    let serve = Serve::start(&["--config", config.to_str().unwrap()]);
    let doc: serde_json::Value = reqwest::get(format!("{}/openapi.json", serve.0.base_url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["servers"][0]["url"], "https://api.example.test");
    assert!(data_dir.join("svc.db").exists());
    drop(serve);

    // SVC_* environment works the same as the flags.
    let env_dir = dir.path().join("env-data");
    let serve = Serve::start_with_env(
        &["--bind", "127.0.0.1:0"],
        &[("SVC_DATA_DIR", env_dir.to_str().unwrap())],
    );
    assert!(env_dir.join("svc.db").exists());
    drop(serve);

    std::fs::write(&config, "bnd = \"127.0.0.1:0\"\n").unwrap();
    let bad = svc(&["serve", "--config", config.to_str().unwrap()]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("bnd"), "{}", stderr(&bad));
}

/// `svc` with `input` on stdin (for the password of `svc users create`).
fn svc_with_stdin(args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(SVC)
        .args(args)
        .env("SVC_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// An account made by `svc users create`, and a key of its own (made on
/// the store directly: `svc keys create` makes operator keys, owned by no
/// account).
async fn account_with_key(store: &[&str], url: &str, email: &str, admin: bool) -> String {
    let mut args = vec!["users", "create", "--email", email];
    if admin {
        args.push("--admin");
    }
    let made = svc_with_stdin(&[&args[..], store].concat(), "password123\n");
    assert!(made.status.success(), "{}", stderr(&made));
    let sql = std::sync::Arc::new(svc_store::SqlStore::connect(url).await.unwrap());
    let accounts = svc_core::AccountService::new(sql.clone());
    let user = accounts.user_by_email(email).await.unwrap().unwrap();
    let (key, _) = svc_core::KeyService::new(sql.clone())
        .create(
            svc_core::NewKey {
                name: format!("{email}'s key"),
                owner_id: Some(user.id.clone()),
                created_via: svc_core::KeyOrigin::Dashboard,
                expires_in: None,
                scope: Default::default(),
            },
            &svc_core::Actor::Operator,
        )
        .await
        .unwrap();
    sql.close().await;
    key.expose().to_owned()
}

/// The first answer to `key` other than `not`, asking every 2 ms for at
/// most `within`: PostgreSQL's notification reaches a server's listener a
/// moment after the command's commit (SQLite's file is there at once).
async fn next_other_than(
    serve: &Serve,
    key: &str,
    not: u16,
    within: Duration,
) -> reqwest::Response {
    let start = std::time::Instant::now();
    loop {
        let response = serve.models(key).await;
        if response.status() != not || start.elapsed() >= within {
            return response;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn assert_refused_as_disabled(serve: &Serve, key: &str, within: Duration) {
    let response = next_other_than(serve, key, 200, within).await;
    assert_eq!(response.status(), 401);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_api_key");
    assert_eq!(
        body["error"]["message"],
        "The account this API key belongs to is disabled."
    );
}

/// `svc users disable|enable|delete` beside running servers: seen on the
/// very next request, as `svc keys revoke` is.
async fn offboarding_beside_running_servers(
    store: &[&str],
    url: &str,
    serves: &[Serve],
    within: Duration,
) {
    account_with_key(store, url, "admin@example.com", true).await;
    let key = account_with_key(store, url, "alice@example.com", false).await;
    for serve in serves {
        assert_eq!(serve.models(&key).await.status(), 200);
    }

    let done = svc(&[&["users", "disable", "Alice@Example.com"], store].concat());
    assert!(done.status.success(), "{}", stderr(&done));
    for serve in serves {
        assert_refused_as_disabled(serve, &key, within).await;
    }
    let list = stdout(&svc(&[&["users", "list"], store].concat()));
    let line = list
        .lines()
        .find(|l| l.contains("alice@example.com"))
        .unwrap();
    assert!(line.contains("disabled"), "{list}");
    let again = svc(&[&["users", "disable", "alice@example.com"], store].concat());
    assert!(again.status.success());
    assert!(stderr(&again).contains("already"), "{}", stderr(&again));

    let done = svc(&[&["users", "enable", "alice@example.com"], store].concat());
    assert!(done.status.success(), "{}", stderr(&done));
    for serve in serves {
        let response = next_other_than(serve, &key, 401, within).await;
        assert_eq!(response.status(), 200);
    }

    // Deleting asks for --yes when nobody is at a terminal.
    let unconfirmed = svc(&[&["users", "delete", "alice@example.com"], store].concat());
    assert!(!unconfirmed.status.success());
    assert!(
        stderr(&unconfirmed).contains("--yes"),
        "{}",
        stderr(&unconfirmed)
    );
    assert_eq!(serves[0].models(&key).await.status(), 200);
    let done = svc(&[&["users", "delete", "alice@example.com", "--yes"], store].concat());
    assert!(done.status.success(), "{}", stderr(&done));
    for serve in serves {
        let response = next_other_than(serve, &key, 200, within).await;
        assert_eq!(response.status(), 401);
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["message"], "This API key has been revoked.");
    }
    let list = stdout(&svc(&[&["users", "list"], store].concat()));
    assert!(!list.contains("alice@example.com"), "{list}");

    // The last admin stays; unknown accounts are named.
    let last = svc(&[&["users", "disable", "admin@example.com"], store].concat());
    assert!(!last.status.success());
    assert!(
        stderr(&last).contains("last enabled admin"),
        "{}",
        stderr(&last)
    );
    let last = svc(&[&["users", "delete", "admin@example.com", "--yes"], store].concat());
    assert!(!last.status.success());
    let unknown = svc(&[&["users", "disable", "nobody@example.com"], store].concat());
    assert!(!unknown.status.success());
    assert!(
        stderr(&unknown).contains("no account nobody@example.com"),
        "{}",
        stderr(&unknown)
    );
}

#[tokio::test]
async fn users_disabled_by_the_cli_are_refused_by_a_running_server_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let serve = Serve::start(&["--data-dir", data_dir, "--bind", "127.0.0.1:0"]);
    let url = svc_store::SqlStore::data_dir_url(dir.path()).unwrap();
    // A SQLite file's change is seen on the very next request.
    offboarding_beside_running_servers(&["--data-dir", data_dir], &url, &[serve], Duration::ZERO)
        .await;
}

#[tokio::test]
async fn users_disabled_by_the_cli_are_refused_by_two_postgres_servers() {
    let schema = TestSchema::create(&postgres_url()).await.unwrap();
    let url = schema.url().to_owned();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| Serve::start(&["--database-url", &url, "--bind", "127.0.0.1:0"]));
        let b = s.spawn(|| Serve::start(&["--database-url", &url, "--bind", "127.0.0.1:0"]));
        (a.join().unwrap(), b.join().unwrap())
    });
    offboarding_beside_running_servers(
        &["--database-url", &url],
        &url,
        &[a, b],
        Duration::from_secs(3),
    )
    .await;
    schema.remove().await.unwrap();
}
