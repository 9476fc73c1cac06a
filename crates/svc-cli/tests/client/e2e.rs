//! `svc login`, `whoami`, `models`, `chat` and `logout` against real
//! `svc serve` processes, with the approval done in the dashboard as a
//! signed-in person does it; and every failure with its message and code.

use std::time::Duration;

use crate::support::{Home, Login, Server, dead_address, mode};

/// The tiny model's greedy reply.
const HELLO: &str = "Hello, world! é 😀 end.";

/// Logs `home` in to `server`, approving as ada; the whole stderr.
async fn log_in(home: &Home, server: &Server, env: &[(&str, &str)]) -> String {
    let mut login = Login::start(home, &["--base-url", &server.base_url, "--no-browser"], env);
    let code = login.user_code();
    server.decide(&code, "approve").await;
    let (status, stderr) = login.finish(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread")]
async fn login_whoami_models_chat_and_logout_against_a_real_server() {
    let server = Server::start(&[]);
    let home = Home::new();
    let url = server.base_url.as_str();

    // Before logging in: nothing to send.
    let run = home.run(&["whoami"], &[]).expect(4);
    assert!(run.stdout().contains("Key:      none"), "{}", run.stdout());
    assert!(run.stderr().contains("run `svc login`"), "{}", run.stderr());
    let run = home.run(&["chat", "--base-url", url, "hi"], &[]).expect(4);
    assert!(run.stderr().contains("not logged in"), "{}", run.stderr());

    // Log in: the code is shown, approved in the dashboard, the key stored.
    let stderr = log_in(&home, &server, &[]).await;
    assert!(stderr.contains("Your one-time code: "), "{stderr}");
    assert!(
        stderr.contains(&format!("{url}/dashboard/device")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "Logged in to {url} as ada@example.com.\nKey sk-svc-"
        )),
        "{stderr}"
    );
    assert!(stderr.contains(", expires 20"), "{stderr}");
    assert!(stderr.contains("(in 30 days).\nStored in "), "{stderr}");
    assert!(!stderr.contains("SVC_API_KEY"), "{stderr}");
    let key = home.stored_key();
    assert!(key.starts_with("sk-svc-") && key.len() == 47);
    assert!(!stderr.contains(&key), "the full key was printed");
    assert_eq!(mode(&home.credentials()), 0o600);
    assert_eq!(mode(&home.svc_config_dir()), 0o700);
    let stored = std::fs::read_to_string(home.credentials()).unwrap();
    assert!(
        stored.contains(&format!("base_url = \"{url}\"")),
        "{stored}"
    );
    assert!(stored.contains("account = \"ada@example.com\""), "{stored}");
    assert_eq!(server.status_with(&key).await, 200);

    // whoami (and its alias status) say who and where, without the key.
    for command in ["whoami", "status"] {
        let run = home.run(&[command], &[]).expect(0);
        let out = run.stdout();
        assert!(
            out.contains(&format!("Server:   {url} (from the stored login)")),
            "{out}"
        );
        let hint = format!("{}…{}", &key[..11], &key[43..]);
        assert!(
            out.contains(&format!("Key:      {hint} (from the stored login)")),
            "{out}"
        );
        assert!(out.contains("Account:  ada@example.com"), "{out}");
        assert!(out.contains("Key name: Device login: svc-cli"), "{out}");
        assert!(out.contains("Status:   accepted by the server"), "{out}");
        assert!(!out.contains(&key) && !run.stderr().contains(&key));
    }

    // models, one id per line.
    let run = home.run(&["models"], &[]).expect(0);
    assert_eq!(run.stdout(), "svc\nsvc-thinking\n");

    // chat with a prompt: just the answer on stdout.
    let run = home
        .run(&["chat", "--temperature", "0", "Say hello"], &[])
        .expect(0);
    assert_eq!(run.stdout(), format!("{HELLO}\n"));
    // ... with the prompt on stdin, and with --system and --max-tokens.
    let run = home
        .run_piped(
            &[
                "chat",
                "--temperature",
                "0",
                "--system",
                "Be brief.",
                "--max-tokens",
                "64",
            ],
            &[],
            "Say hello\n",
        )
        .expect(0);
    assert_eq!(run.stdout(), format!("{HELLO}\n"));
    // A cut-short reply says so on stderr only.
    let run = home
        .run(
            &["chat", "--temperature", "0", "--max-tokens", "2", "hi"],
            &[],
        )
        .expect(0);
    assert_eq!(run.stdout(), "Hello\n");
    assert!(run.stderr().contains("token limit"), "{}", run.stderr());
    // An unknown model is the server's 404, said plainly.
    let run = home.run(&["chat", "-m", "nope", "hi"], &[]).expect(1);
    assert!(run.stderr().contains("nope"), "{}", run.stderr());
    assert!(run.stderr().contains("HTTP 404"), "{}", run.stderr());

    // Flags beat SVC_API_KEY, which beats the stored key.
    let bogus = "sk-svc-0000000000000000000000000000000000000000";
    let run = home.run(&["models"], &[("SVC_API_KEY", bogus)]).expect(4);
    assert!(
        run.stderr().contains("refused the key (sk-svc-0000…0000)"),
        "{}",
        run.stderr()
    );
    assert!(run.stderr().contains("Run `svc login`"), "{}", run.stderr());
    home.run(&["models", "--api-key", &key], &[("SVC_API_KEY", bogus)])
        .expect(0);
    let run = home
        .run(
            &["whoami"],
            &[("SVC_API_KEY", bogus), ("SVC_BASE_URL", url)],
        )
        .expect(4);
    assert!(
        run.stdout().contains("(from SVC_API_KEY)"),
        "{}",
        run.stdout()
    );
    assert!(
        run.stdout().contains("(from SVC_BASE_URL)"),
        "{}",
        run.stdout()
    );
    assert!(
        run.stdout().contains("Status:   refused by the server"),
        "{}",
        run.stdout()
    );
    // The stored key never goes to another server.
    let elsewhere = dead_address();
    let run = home
        .run(&["models", "--base-url", &elsewhere], &[])
        .expect(4);
    assert!(
        run.stderr()
            .contains(&format!("svc login --base-url {elsewhere}")),
        "{}",
        run.stderr()
    );

    // Logging in again replaces the key and revokes the old one; with
    // SVC_API_KEY set, it says that the variable wins.
    let stderr = log_in(&home, &server, &[("SVC_API_KEY", bogus)]).await;
    assert!(
        stderr.contains("Revoked the key of the previous login"),
        "{stderr}"
    );
    assert!(
        stderr.contains("SVC_API_KEY is set, and it takes precedence"),
        "{stderr}"
    );
    assert_eq!(server.status_with(&key).await, 401);
    let key = home.stored_key();
    assert_eq!(server.status_with(&key).await, 200);

    // Logout revokes the key on the server and deletes the file.
    let run = home.run(&["logout"], &[]).expect(0);
    assert!(
        run.stderr().contains("Revoked key sk-svc-"),
        "{}",
        run.stderr()
    );
    assert!(run.stderr().contains("Logged out."), "{}", run.stderr());
    assert!(!home.credentials().exists());
    assert_eq!(server.status_with(&key).await, 401);
    let run = home.run(&["logout"], &[]).expect(0);
    assert!(run.stderr().contains("Not logged in"), "{}", run.stderr());
    // And a revoked key, given by hand, is refused with the advice to log in.
    let run = home
        .run(&["chat", "--base-url", url, "--api-key", &key, "hi"], &[])
        .expect(4);
    assert!(run.stderr().contains("revoked"), "{}", run.stderr());
    assert!(run.stderr().contains("svc login"), "{}", run.stderr());
}

#[tokio::test(flavor = "multi_thread")]
async fn denied_and_cancelled_logins_store_nothing() {
    let server = Server::start(&[]);
    let home = Home::new();

    let mut login = Login::start(
        &home,
        &["--base-url", &server.base_url, "--no-browser"],
        &[],
    );
    let code = login.user_code();
    server.decide(&code, "deny").await;
    let (status, stderr) = login.finish(Duration::from_secs(20));
    assert_eq!(status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("error: the login was denied"), "{stderr}");
    assert!(!home.credentials().exists());

    // Ctrl-C while waiting for approval.
    let mut login = Login::start(
        &home,
        &["--base-url", &server.base_url, "--no-browser"],
        &[],
    );
    login.user_code();
    login.wait_for(|l| l.contains("Waiting for approval"));
    let killed = std::process::Command::new("kill")
        .args(["-INT", &login.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let (status, stderr) = login.finish(Duration::from_secs(10));
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("error: login cancelled; no key was stored"),
        "{stderr}"
    );
    assert!(!home.credentials().exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unapproved_code_expires() {
    let server = Server::start(&["--device-code-lifetime", "2s"]);
    let home = Home::new();
    let login = Login::start(
        &home,
        &["--base-url", &server.base_url, "--no-browser"],
        &[],
    );
    let (status, stderr) = login.finish(Duration::from_secs(20));
    assert_eq!(status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains("expired before it was approved"),
        "{stderr}"
    );
    assert!(
        stderr.contains("Run `svc login` to start again"),
        "{stderr}"
    );
    assert!(!home.credentials().exists());
}

#[test]
fn an_unreachable_server_and_bad_usage_have_their_own_codes() {
    let home = Home::new();
    let dead = dead_address();
    let key = "sk-svc-1111111111111111111111111111111111111111";

    let run = home
        .run(&["login", "--base-url", &dead, "--no-browser"], &[])
        .expect(3);
    assert!(
        run.stderr().contains(&format!("cannot reach {dead}")),
        "{}",
        run.stderr()
    );
    assert_eq!(run.stderr().lines().count(), 1, "{}", run.stderr());
    let run = home
        .run(
            &["chat", "hi"],
            &[("SVC_BASE_URL", &dead), ("SVC_API_KEY", key)],
        )
        .expect(3);
    assert!(
        run.stderr().contains("Is `svc serve` running there?"),
        "{}",
        run.stderr()
    );
    home.run(
        &["models"],
        &[("SVC_BASE_URL", &dead), ("SVC_API_KEY", key)],
    )
    .expect(3);

    // A malformed key is refused before anything is sent, without echoing it.
    let run = home
        .run(
            &["models"],
            &[("SVC_BASE_URL", &dead), ("SVC_API_KEY", "sk-secret-thing")],
        )
        .expect(4);
    assert!(
        run.stderr()
            .contains("SVC_API_KEY does not hold an svc key"),
        "{}",
        run.stderr()
    );
    assert!(!run.stderr().contains("secret-thing"));

    // Usage errors.
    home.run(&["chat", "--temperature", "3", "hi"], &[])
        .expect(2);
    home.run(&["login", "--base-url", "ftp://x"], &[]).expect(2);
    let run = home
        .run_piped(
            &["chat"],
            &[("SVC_BASE_URL", &dead), ("SVC_API_KEY", key)],
            "  \n",
        )
        .expect(2);
    assert!(run.stderr().contains("nothing to send"), "{}", run.stderr());

    // Logout with the server gone: the key is deleted here, with advice.
    let login = format!(
        "base_url = \"{dead}\"\napi_key = \"{key}\"\nkey_hint = \"x\"\nlogged_in_at = \"2026-01-01T00:00:00Z\"\n"
    );
    std::fs::create_dir_all(home.svc_config_dir()).unwrap();
    std::fs::write(home.credentials(), login).unwrap();
    let run = home.run(&["logout"], &[]).expect(3);
    assert!(
        run.stderr().contains("could not revoke it on the server"),
        "{}",
        run.stderr()
    );
    assert!(
        run.stderr().contains(&format!("{dead}/dashboard/keys")),
        "{}",
        run.stderr()
    );
    assert!(!home.credentials().exists());
}

/// A server without `DELETE /v1/auth/key` (404): logout deletes the key here
/// and says where to revoke it.
#[tokio::test(flavor = "multi_thread")]
async fn logout_from_a_server_that_cannot_revoke() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(|| async {
        (
            axum::http::StatusCode::NOT_FOUND,
            axum::Json(serde_json::json!({"error": {"message": "Unknown URL", "type": "invalid_request_error", "param": null, "code": "unknown_url"}})),
        )
    });
    tokio::spawn(async move { axum::serve(listener, app).await });

    let home = Home::new();
    let key = "sk-svc-2222222222222222222222222222222222222222";
    std::fs::create_dir_all(home.svc_config_dir()).unwrap();
    std::fs::write(
        home.credentials(),
        format!("base_url = \"{url}\"\napi_key = \"{key}\"\nkey_hint = \"x\"\nlogged_in_at = \"2026-01-01T00:00:00Z\"\n"),
    )
    .unwrap();
    let run = tokio::task::spawn_blocking(move || {
        let run = home.run(&["logout"], &[]);
        (run, home)
    })
    .await
    .unwrap();
    let (run, home) = run;
    let run = run.expect(0);
    assert!(
        run.stderr().contains("cannot revoke keys for clients"),
        "{}",
        run.stderr()
    );
    assert!(
        run.stderr().contains(&format!("{url}/dashboard/keys")),
        "{}",
        run.stderr()
    );
    assert!(!home.credentials().exists());
}

/// A server whose certificate a private CA signed is trusted once
/// `SSL_CERT_FILE` names that CA, and not before.
#[test]
fn a_private_certificate_authority_is_trusted_through_ssl_cert_file() {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "svc test CA");
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server_cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&server_key, &ca)
        .unwrap();
    let files = tempfile::tempdir().unwrap();
    let write = |name: &str, pem: String| {
        let path = files.path().join(name);
        std::fs::write(&path, pem).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (cert, key) = (
        write("cert.pem", server_cert.pem()),
        write("key.pem", server_key.serialize_pem()),
    );
    let ca_file = write("ca.pem", ca.pem());
    let server = Server::start(&["--tls-cert", &cert, "--tls-key", &key]);
    assert!(
        server.base_url.starts_with("https://"),
        "{}",
        server.base_url
    );
    let home = Home::new();
    let unknown = "sk-svc-1111111111111111111111111111111111111111";
    let env = [
        ("SVC_BASE_URL", server.base_url.as_str()),
        ("SVC_API_KEY", unknown),
    ];

    // The built-in authorities do not know it: no connection.
    let run = home.run(&["models"], &env).expect(3);
    assert!(run.stderr().contains("cannot reach"), "{}", run.stderr());
    // Trusted: the server answers (and refuses the unknown key).
    let trusted = [env[0], env[1], ("SSL_CERT_FILE", ca_file.as_str())];
    let run = home.run(&["models"], &trusted).expect(4);
    assert!(!run.stderr().contains("cannot reach"), "{}", run.stderr());
    // A file that is not there is said, not ignored.
    let missing = [env[0], env[1], ("SSL_CERT_FILE", "/nonexistent/ca.pem")];
    let run = home.run(&["models"], &missing);
    assert_ne!(run.code(), 0);
    assert!(
        run.stderr().contains("SSL_CERT_FILE /nonexistent/ca.pem"),
        "{}",
        run.stderr()
    );
}
