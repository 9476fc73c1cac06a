//! `svc serve --print-config`: the merged configuration (file, `SVC_*`
//! environment and flags over the defaults) with secrets hidden and each
//! value's source, compared with a committed snapshot; nothing is started.
//! `SVC_UPDATE_SNAPSHOTS=1` rewrites the snapshot.

use std::path::Path;
use std::process::Command;

const SVC: &str = env!("CARGO_BIN_EXE_svc");

const CONFIG: &str = r#"bind = "127.0.0.1:9000"
public_url = "https://file.example"
database_url = "postgres://svc:hunter2@db.example/svc"
trusted_proxies = ["10.0.0.0/8", "::1"]
device_interval = 3
context = 2048
parallel = 2
oidc_issuer = "https://id.example/realms/staff"
oidc_client_id = "svc"

[prices.qwen]
input = 0.15
output = 0.6

[models.qwen]
path = "/models/qwen.gguf"
reasoning = true

[models.big]
idle_timeout = "500ms"
upstreams = [{ base_url = "http://gpu1:8000/v1", model = "org/Big", api_key_env = "BIG_KEY", weight = 3 }]
"#;

/// The padding before each ` # source` comment depends on the length of
/// the temporary directory's path: compare without it.
fn unpadded(text: &str) -> String {
    text.lines()
        .map(|line| match line.rfind(" # ") {
            Some(at) => format!("{} # {}\n", line[..at].trim_end(), &line[at + 3..]),
            None => format!("{line}\n"),
        })
        .collect()
}

#[test]
fn print_config_shows_the_merged_values_and_their_sources() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("svc.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let out = Command::new(SVC)
        .args(["serve", "--config", config.to_str().unwrap()])
        .args([
            "--bind",
            "127.0.0.1:9100",
            "--oidc-create-accounts",
            "--print-config",
        ])
        .env_clear()
        .env("HOME", dir.path())
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .env("SVC_PARALLEL", "4")
        .env("SVC_RATE_LIMIT_RPM", "120")
        .env("SVC_DEVICE_CODE_LIFETIME", "15m")
        .env("SVC_METRICS_TOKEN", "m3trics-s3cret")
        .env("SVC_OIDC_CLIENT_SECRET", "oidc-s3cret")
        .env("BIG_KEY", "upstream-s3cret")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8(out.stdout).unwrap();
    for secret in [
        "hunter2",
        "m3trics-s3cret",
        "upstream-s3cret",
        "oidc-s3cret",
    ] {
        assert!(!text.contains(secret), "{secret} shown:\n{text}");
    }
    assert!(
        !dir.path().join("data").exists(),
        "nothing was started or created"
    );
    let text = unpadded(&text.replace(dir.path().to_str().unwrap(), "<DIR>"));
    let snapshot = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/print_config.toml");
    if std::env::var_os("SVC_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&snapshot, &text).unwrap();
    }
    let expected = std::fs::read_to_string(&snapshot).unwrap();
    assert_eq!(
        text,
        unpadded(&expected),
        "rerun with SVC_UPDATE_SNAPSHOTS=1 to accept"
    );

    // What it prints is a configuration file that reads back the same.
    let printed = dir.path().join("printed.toml");
    std::fs::write(
        &printed,
        text.replace("<DIR>", dir.path().to_str().unwrap()),
    )
    .unwrap();
    let again = Command::new(SVC)
        .args([
            "serve",
            "--config",
            printed.to_str().unwrap(),
            "--print-config",
        ])
        .env_clear()
        .env("HOME", dir.path())
        .env("BIG_KEY", "upstream-s3cret")
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

#[test]
fn print_config_refuses_what_serve_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("svc.toml");
    std::fs::write(
        &config,
        "[models.m]\npath = \"/m.gguf\"\nidle_timeout = \"5s\"\n",
    )
    .unwrap();
    let out = Command::new(SVC)
        .args([
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--print-config",
        ])
        .env_clear()
        .env("HOME", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("models.m.idle_timeout (file ")
            && stderr.contains(") goes with models.m.upstreams, which is not set"),
        "{stderr}"
    );
    // A bad value from the environment is named by its flag, as before.
    let out = Command::new(SVC)
        .args(["serve", "--print-config"])
        .env_clear()
        .env("HOME", dir.path())
        .env("SVC_CONTEXT", "10")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--context") && stderr.contains("at least 64"),
        "{stderr}"
    );
}
