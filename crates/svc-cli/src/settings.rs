//! Layered settings: built-in defaults, then the TOML file, then `SVC_*`
//! environment and flags (clap resolves those two, flags first).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;
use svc_core::DeviceSettings;
use svc_core::duration::parse_seconds;
use svc_server::ServerConfig;
use svc_server::config::DEFAULT_MAX_BODY_BYTES;

use crate::cli::{EngineArgs, ServeArgs, StoreArgs};

/// The TOML file's contents; an unknown key is an error that names it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub bind: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
    pub database_url: Option<String>,
    pub public_url: Option<String>,
    pub max_body_bytes: Option<usize>,
    pub dashboard_url: Option<String>,
    pub allow_signup: Option<bool>,
    pub device_code_lifetime: Option<String>,
    pub device_interval: Option<u32>,
    pub device_key_lifetime: Option<String>,
    pub model: Option<PathBuf>,
    pub context: Option<u32>,
    pub parallel: Option<u32>,
    pub threads: Option<u32>,
    pub queue: Option<usize>,
    /// `[models.<id>]` tables: more models served from GGUF files.
    #[serde(default)]
    pub models: BTreeMap<String, ModelTable>,
}

/// One `[models.<id>]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelTable {
    /// The GGUF file.
    pub path: PathBuf,
    /// Whether this id asks for reasoning (as `svc-thinking` does).
    #[serde(default)]
    pub reasoning: bool,
    /// Context tokens per sequence; the engine default when absent.
    pub context: Option<u32>,
    /// Sequences decoded together; the engine default when absent.
    pub parallel: Option<u32>,
}

impl FileConfig {
    /// Reads `path`, or nothing when no file was given.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let Some(path) = path else {
            return Ok(FileConfig::default());
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        toml::from_str(&text)
            .with_context(|| format!("invalid configuration file {}", path.display()))
    }
}

/// Where the state is, resolved.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    pub data_dir: PathBuf,
    /// Given explicitly; `None` means SQLite in `data_dir`.
    pub database_url: Option<String>,
}

impl StoreSettings {
    pub fn resolve(args: &StoreArgs, file: &FileConfig) -> anyhow::Result<Self> {
        let data_dir = match args.data_dir.clone().or_else(|| file.data_dir.clone()) {
            Some(dir) => dir,
            None => dirs::data_dir()
                .context("no data directory is known for this user: pass --data-dir")?
                .join("svc"),
        };
        let database_url = args
            .database_url
            .clone()
            .or_else(|| file.database_url.clone());
        if let Some(url) = &database_url
            && !(url.starts_with("postgres://")
                || url.starts_with("postgresql://")
                || url.starts_with("sqlite:"))
        {
            bail!("database_url must start with postgres://, postgresql:// or sqlite:");
        }
        Ok(StoreSettings {
            data_dir,
            database_url,
        })
    }

    /// The URL to connect to: the given one, or SQLite in the data directory.
    pub fn url(&self) -> anyhow::Result<String> {
        if let Some(url) = &self.database_url {
            return Ok(url.clone());
        }
        std::fs::create_dir_all(&self.data_dir).with_context(|| {
            format!(
                "cannot create the data directory {}",
                self.data_dir.display()
            )
        })?;
        Ok(format!(
            "sqlite://{}?mode=rwc",
            self.data_dir.join("svc.db").display()
        ))
    }

    /// Where the state is, for people: never prints credentials.
    pub fn describe(&self) -> String {
        match &self.database_url {
            Some(url) if url.starts_with("sqlite:") => format!("SQLite ({url})"),
            Some(_) => "PostgreSQL".to_owned(),
            None => format!("SQLite ({})", self.data_dir.join("svc.db").display()),
        }
    }
}

/// The embedded engine's settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineSettings {
    /// GGUF for `svc` and `svc-thinking`; `None` means the default model.
    pub model: Option<PathBuf>,
    pub context: u32,
    pub parallel: u32,
    pub threads: Option<u32>,
    pub queue: usize,
    /// More models, by id.
    pub models: BTreeMap<String, ModelTable>,
}

/// Default context tokens per sequence.
pub const DEFAULT_CONTEXT: u32 = 4096;
/// Default sequences decoded together.
pub const DEFAULT_PARALLEL: u32 = 8;
/// Default requests waiting for a slot.
pub const DEFAULT_QUEUE: usize = 64;

impl EngineSettings {
    fn resolve(args: &EngineArgs, file: &FileConfig) -> anyhow::Result<Self> {
        let settings = EngineSettings {
            model: args.model.clone().or_else(|| file.model.clone()),
            context: args.context.or(file.context).unwrap_or(DEFAULT_CONTEXT),
            parallel: args.parallel.or(file.parallel).unwrap_or(DEFAULT_PARALLEL),
            threads: args.threads.or(file.threads),
            queue: args.queue.or(file.queue).unwrap_or(DEFAULT_QUEUE),
            models: file.models.clone(),
        };
        if settings.context < 64 {
            bail!("context must be at least 64 tokens");
        }
        if settings.parallel == 0 || settings.threads == Some(0) {
            bail!("parallel and threads must be at least 1");
        }
        for (id, table) in &settings.models {
            if id.is_empty() || id.chars().any(char::is_whitespace) {
                bail!("models.{id:?}: a model id must be non-empty and without spaces");
            }
            if table.context.is_some_and(|c| c < 64) || table.parallel == Some(0) {
                bail!("models.{id}: context must be at least 64 and parallel at least 1");
            }
        }
        Ok(settings)
    }
}

/// Everything `svc serve` needs.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub store: StoreSettings,
    pub server: ServerConfig,
    pub engine: EngineSettings,
}

impl ServeSettings {
    pub fn resolve(args: &ServeArgs) -> anyhow::Result<Self> {
        let file = FileConfig::load(args.store.config.as_deref())?;
        let store = StoreSettings::resolve(&args.store, &file)?;
        let defaults = ServerConfig::default();
        let public_url = args.public_url.clone().or(file.public_url.clone());
        if let Some(url) = &public_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            bail!("public_url must start with http:// or https:// (got {url:?})");
        }
        let max_body_bytes = args
            .max_body_bytes
            .or(file.max_body_bytes)
            .unwrap_or(DEFAULT_MAX_BODY_BYTES);
        if max_body_bytes == 0 {
            bail!("max_body_bytes must be positive");
        }
        let dashboard_url = args.dashboard_url.clone().or(file.dashboard_url.clone());
        if let Some(url) = &dashboard_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            bail!("dashboard_url must start with http:// or https:// (got {url:?})");
        }
        let seconds =
            |flag: &Option<String>, file: &Option<String>, name: &str, default: i64| match flag
                .as_ref()
                .or(file.as_ref())
            {
                Some(text) => parse_seconds(text)
                    .with_context(|| format!("invalid {name}"))
                    .and_then(|s| {
                        if s > 0 {
                            Ok(s)
                        } else {
                            bail!("{name} must be positive")
                        }
                    }),
                None => Ok(default),
            };
        let device_defaults = DeviceSettings::default();
        let interval = args
            .device_interval
            .or(file.device_interval)
            .map_or(device_defaults.interval, i64::from);
        if interval == 0 {
            bail!("device_interval must be positive");
        }
        let device = DeviceSettings {
            code_lifetime: seconds(
                &args.device_code_lifetime,
                &file.device_code_lifetime,
                "device_code_lifetime",
                device_defaults.code_lifetime,
            )?,
            interval,
            key_lifetime: seconds(
                &args.device_key_lifetime,
                &file.device_key_lifetime,
                "device_key_lifetime",
                device_defaults.key_lifetime,
            )?,
        };
        Ok(ServeSettings {
            engine: EngineSettings::resolve(&args.engine, &file)?,
            store,
            server: ServerConfig {
                bind: args.bind.or(file.bind).unwrap_or(defaults.bind),
                public_url,
                max_body_bytes,
                dashboard_url,
                allow_signup: args.allow_signup.or(file.allow_signup).unwrap_or(false),
                device,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_file_beat_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("svc.toml");
        std::fs::write(
            &path,
            "bind = \"127.0.0.1:9000\"\npublic_url = \"https://file.example\"\n",
        )
        .unwrap();
        let mut args = ServeArgs::default();
        args.store.config = Some(path.clone());
        args.store.data_dir = Some(dir.path().to_owned());
        let s = ServeSettings::resolve(&args).unwrap();
        assert_eq!(s.server.bind.port(), 9000);
        assert_eq!(s.server.public_url.as_deref(), Some("https://file.example"));
        assert_eq!(s.server.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
        args.bind = Some("127.0.0.1:9001".parse().unwrap());
        assert_eq!(
            ServeSettings::resolve(&args).unwrap().server.bind.port(),
            9001
        );
    }

    #[test]
    fn model_tables_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("svc.toml");
        std::fs::write(
            &path,
            "parallel = 2\n[models.qwen]\npath = \"/m/qwen.gguf\"\nreasoning = true\n",
        )
        .unwrap();
        let mut args = ServeArgs::default();
        args.store.config = Some(path);
        args.store.data_dir = Some(dir.path().to_owned());
        let s = ServeSettings::resolve(&args).unwrap();
        assert_eq!(s.engine.parallel, 2);
        assert_eq!(s.engine.context, DEFAULT_CONTEXT);
        let qwen = &s.engine.models["qwen"];
        assert!(qwen.reasoning);
        assert_eq!(qwen.path, PathBuf::from("/m/qwen.gguf"));
        args.engine.parallel = Some(0);
        assert!(ServeSettings::resolve(&args).is_err());
    }

    #[test]
    fn unknown_keys_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("svc.toml");
        std::fs::write(&path, "bnd = \"127.0.0.1:9000\"\n").unwrap();
        let err = FileConfig::load(Some(&path)).unwrap_err();
        assert!(format!("{err:#}").contains("bnd"), "{err:#}");
    }
}
