//! The stored login: `$XDG_CONFIG_HOME/svc/credentials.toml` (else the
//! platform's configuration directory + `/svc`), holding one server's base
//! URL and the key `svc login` obtained for it.
//!
//! The directory is kept at mode 0700 and the file at 0600; the file is
//! written to a temporary file beside it and renamed over the old one, so a
//! crash never leaves half a key behind.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use svc_core::ApiKey;

use super::target::BaseUrl;

/// The login `svc login` stored.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub base_url: BaseUrl,
    pub api_key: ApiKey,
    /// The account that approved the login, when the server said.
    pub account: Option<String>,
    /// The key's name on the server.
    pub key_name: Option<String>,
    /// Unix seconds; `None`: never expires (or unknown).
    pub expires_at: Option<i64>,
    /// Unix seconds.
    pub logged_in_at: i64,
    /// Where keys are managed in the dashboard, for revoking by hand.
    pub dashboard_url: Option<String>,
}

impl Credentials {
    /// A login for `key` at `base_url`, made now.
    pub fn new(base_url: BaseUrl, api_key: ApiKey) -> Self {
        Credentials {
            base_url,
            api_key,
            account: None,
            key_name: None,
            expires_at: None,
            logged_in_at: Utc::now().timestamp(),
            dashboard_url: None,
        }
    }

    /// The page where this login's keys are listed and revoked.
    pub fn keys_page(&self) -> String {
        match &self.dashboard_url {
            Some(url) => format!("{url}/keys"),
            None => self.base_url.join("/dashboard/keys"),
        }
    }
}

/// The file's layout. Times are RFC 3339, to be readable by people.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    base_url: String,
    api_key: String,
    key_hint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at: Option<String>,
    logged_in_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dashboard_url: Option<String>,
}

const HEADER: &str = "# Written by `svc login`; removed by `svc logout`. It holds an API key:\n\
                      # keep it private (mode 0600) and out of backups you share.\n";

/// `2026-12-22T14:03:00Z`.
pub fn rfc3339(unix: i64) -> String {
    DateTime::<Utc>::from_timestamp(unix, 0)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

fn parse_time(text: &str) -> anyhow::Result<i64> {
    Ok(DateTime::parse_from_rfc3339(text)
        .with_context(|| format!("{text:?} is not an RFC 3339 time"))?
        .timestamp())
}

/// Where the login lives.
#[derive(Debug, Clone)]
pub struct CredentialsFile {
    path: PathBuf,
}

impl CredentialsFile {
    /// `$XDG_CONFIG_HOME/svc/credentials.toml`, else the platform's
    /// configuration directory.
    pub fn locate() -> anyhow::Result<Self> {
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(dirs::config_dir)
            .ok_or_else(|| {
                anyhow!("cannot find a configuration directory: set XDG_CONFIG_HOME or HOME")
            })?;
        Ok(CredentialsFile::at(
            base.join("svc").join("credentials.toml"),
        ))
    }

    /// A credentials file at `path`.
    pub fn at(path: PathBuf) -> Self {
        CredentialsFile { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored login, or `None` when there is none.
    pub fn load(&self) -> anyhow::Result<Option<Credentials>> {
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read {}", self.path.display()));
            }
        };
        let damaged = || {
            format!(
                "{} is damaged: delete it and run `svc login`",
                self.path.display()
            )
        };
        // Only the parser's message: its full text quotes the offending line,
        // which may be the key.
        let stored: Stored = toml::from_str(&text)
            .map_err(|e| anyhow!("{}", e.message()))
            .with_context(damaged)?;
        let credentials = Credentials {
            base_url: BaseUrl::parse(&stored.base_url)
                .map_err(|e| anyhow!("{e}"))
                .with_context(damaged)?,
            api_key: ApiKey::parse(&stored.api_key)
                .map_err(|e| anyhow!("{e}"))
                .with_context(damaged)?,
            account: stored.account,
            key_name: stored.key_name,
            expires_at: stored
                .expires_at
                .as_deref()
                .map(parse_time)
                .transpose()
                .with_context(damaged)?,
            logged_in_at: parse_time(&stored.logged_in_at).with_context(damaged)?,
            dashboard_url: stored.dashboard_url,
        };
        Ok(Some(credentials))
    }

    /// Replaces the stored login, atomically, with private modes.
    pub fn save(&self, credentials: &Credentials) -> anyhow::Result<()> {
        let dir = self
            .path
            .parent()
            .ok_or_else(|| anyhow!("{} has no directory", self.path.display()))?;
        create_private_dir(dir)?;
        let stored = Stored {
            base_url: credentials.base_url.to_string(),
            api_key: credentials.api_key.expose().to_owned(),
            key_hint: credentials.api_key.hint(),
            account: credentials.account.clone(),
            key_name: credentials.key_name.clone(),
            expires_at: credentials.expires_at.map(rfc3339),
            logged_in_at: rfc3339(credentials.logged_in_at),
            dashboard_url: credentials.dashboard_url.clone(),
        };
        let body = toml::to_string(&stored).context("cannot encode the credentials")?;
        let write = || -> std::io::Result<()> {
            // tempfile creates the file with mode 0600 on Unix.
            let mut file = tempfile::Builder::new()
                .prefix(".credentials.")
                .suffix(".tmp")
                .tempfile_in(dir)?;
            file.write_all(HEADER.as_bytes())?;
            file.write_all(body.as_bytes())?;
            file.as_file().sync_all()?;
            file.persist(&self.path).map_err(|e| e.error)?;
            Ok(())
        };
        write().with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// Deletes the stored login; `false` when there was none.
    pub fn remove(&self) -> anyhow::Result<bool> {
        match fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e).with_context(|| format!("cannot delete {}", self.path.display())),
        }
    }
}

/// Creates `dir` (and missing parents) with mode 0700, and tightens it to
/// 0700 if it was there already.
pub(crate) fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        builder.mode(0o700);
        builder
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot restrict {} to its owner", dir.display()))?;
    }
    #[cfg(not(unix))]
    builder
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn saves_privately_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let file = CredentialsFile::at(dir.path().join("cfg/svc/credentials.toml"));
        assert!(file.load().unwrap().is_none());
        let key = ApiKey::parse("sk-svc-0123456789abcdef0123456789abcdef01234567").unwrap();
        let mut login = Credentials::new(BaseUrl::parse("http://h:1").unwrap(), key);
        login.account = Some("ada@example.com".into());
        login.expires_at = Some(1_800_000_000);
        file.save(&login).unwrap();
        file.save(&login).unwrap();

        let back = file.load().unwrap().unwrap();
        assert_eq!(back.api_key, login.api_key);
        assert_eq!(back.base_url, login.base_url);
        assert_eq!(back.account.as_deref(), Some("ada@example.com"));
        assert_eq!(back.expires_at, Some(1_800_000_000));
        assert_eq!(back.logged_in_at, login.logged_in_at);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(file.path()), 0o600);
            assert_eq!(mode(file.path().parent().unwrap()), 0o700);
        }
        // No temporary files are left beside it.
        let names: Vec<_> = fs::read_dir(file.path().parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["credentials.toml"]);

        assert!(file.remove().unwrap());
        assert!(!file.remove().unwrap());
    }

    #[test]
    fn a_damaged_file_names_itself_without_showing_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = CredentialsFile::at(dir.path().join("credentials.toml"));
        fs::write(file.path(), "base_url = \"http://h\"\napi_key = \"sk-svc-secret\"\nkey_hint = \"x\"\nlogged_in_at = \"2026-01-01T00:00:00Z\"\n").unwrap();
        let err = format!("{:#}", file.load().unwrap_err());
        assert!(err.contains("credentials.toml is damaged"), "{err}");
        assert!(!err.contains("secret"), "{err}");
    }
}
