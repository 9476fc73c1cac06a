//! Layered settings: built-in defaults, then the TOML file, then `SVC_*`
//! environment and flags (clap resolves those two, flags first).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;
use svc_core::duration::parse_seconds;
use svc_core::{DeviceSettings, KeyLimits};
use svc_engine_upstream::{EndpointConfig, UpstreamKey, UpstreamOptions};
use svc_server::ServerConfig;
use svc_server::config::{Cidr, DEFAULT_MAX_BODY_BYTES, MetricsToken};

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
    pub rate_limit_rpm: Option<i64>,
    pub rate_limit_tpm: Option<i64>,
    pub redis_url: Option<String>,
    pub shutdown_grace: Option<String>,
    pub header_timeout: Option<String>,
    pub body_timeout: Option<String>,
    pub max_connections: Option<usize>,
    pub max_connections_per_address: Option<usize>,
    pub trusted_proxies: Option<Vec<String>>,
    pub metrics_token: Option<String>,
    pub metrics_bind: Option<SocketAddr>,
    pub model: Option<PathBuf>,
    pub context: Option<u32>,
    pub parallel: Option<u32>,
    pub threads: Option<u32>,
    pub queue: Option<usize>,
    /// `[models.<id>]` tables: more models served from GGUF files.
    #[serde(default)]
    pub models: BTreeMap<String, ModelTable>,
}

/// One `[models.<id>]` table: a GGUF file (`path`) or OpenAI-compatible
/// endpoints (`upstreams`), exactly one of them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelTable {
    /// The GGUF file.
    pub path: Option<PathBuf>,
    /// Endpoints that serve the model.
    pub upstreams: Option<Vec<UpstreamTable>>,
    /// Whether this id asks for reasoning (as `svc-thinking` does).
    #[serde(default)]
    pub reasoning: bool,
    /// Context tokens per sequence; the engine default when absent.
    pub context: Option<u32>,
    /// Sequences decoded together; the engine default when absent.
    pub parallel: Option<u32>,
    /// Upstreams: opening a connection (`5s`, `500ms`).
    pub connect_timeout: Option<String>,
    /// Upstreams: from the request to the first byte of the reply.
    pub first_byte_timeout: Option<String>,
    /// Upstreams: between two chunks of a reply.
    pub idle_timeout: Option<String>,
    /// Upstreams: a whole (non-streamed) reply, to its last byte.
    pub whole_timeout: Option<String>,
    /// Upstreams: between two health checks (`GET <base_url>/models`).
    pub health_interval: Option<String>,
}

/// One entry of `upstreams = [...]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTable {
    /// The API base, e.g. `http://gpu1:8000/v1`.
    pub base_url: String,
    /// The model's name at that endpoint.
    pub model: String,
    /// The environment variable holding its API key, if it needs one.
    pub api_key_env: Option<String>,
    /// Share of the load relative to the other endpoints.
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_weight() -> u32 {
    1
}

/// A resolved `[models.<id>]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSettings {
    /// Whether this id asks for reasoning (as `svc-thinking` does).
    pub reasoning: bool,
    pub source: ModelSource,
}

/// What serves a model.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelSource {
    /// A GGUF file run by the embedded engine.
    File {
        path: PathBuf,
        /// Context tokens per sequence; the engine default when absent.
        context: Option<u32>,
        /// Sequences decoded together; the engine default when absent.
        parallel: Option<u32>,
    },
    /// OpenAI-compatible endpoints, keys already read from the environment.
    Upstream {
        endpoints: Vec<EndpointConfig>,
        options: UpstreamOptions,
    },
}

/// `500ms`, or whatever [`parse_seconds`] reads (`5s`, `2m`, ...).
fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    if let Some(ms) = text.trim().strip_suffix("ms") {
        return match ms.parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => bail!("invalid duration {text:?}: use e.g. 500ms, 5s or 2m"),
        };
    }
    let seconds = parse_seconds(text)?;
    Ok(Duration::from_secs(u64::try_from(seconds)?))
}

impl ModelSettings {
    /// Checks one table and reads its keys from the environment.
    fn resolve(id: &str, table: &ModelTable) -> anyhow::Result<Self> {
        let upstream_only = [
            ("connect_timeout", &table.connect_timeout),
            ("first_byte_timeout", &table.first_byte_timeout),
            ("idle_timeout", &table.idle_timeout),
            ("whole_timeout", &table.whole_timeout),
            ("health_interval", &table.health_interval),
        ];
        let source = match (&table.path, &table.upstreams) {
            (Some(_), Some(_)) | (None, None) => {
                bail!("models.{id}: give exactly one of `path` (a GGUF file) or `upstreams`")
            }
            (Some(path), None) => {
                if let Some((key, _)) = upstream_only.iter().find(|(_, v)| v.is_some()) {
                    bail!("models.{id}.{key} applies only to a model with `upstreams`");
                }
                if table.context.is_some_and(|c| c < 64) || table.parallel == Some(0) {
                    bail!("models.{id}: context must be at least 64 and parallel at least 1");
                }
                ModelSource::File {
                    path: path.clone(),
                    context: table.context,
                    parallel: table.parallel,
                }
            }
            (None, Some(upstreams)) => {
                if table.context.is_some() || table.parallel.is_some() {
                    bail!("models.{id}: context and parallel apply only to a model with `path`");
                }
                if upstreams.is_empty() {
                    bail!("models.{id}.upstreams must list at least one endpoint");
                }
                let mut options = UpstreamOptions::default();
                for (key, value) in upstream_only {
                    let Some(text) = value else { continue };
                    let duration =
                        parse_duration(text).with_context(|| format!("models.{id}.{key}"))?;
                    match key {
                        "connect_timeout" => options.connect_timeout = duration,
                        "first_byte_timeout" => options.first_byte_timeout = duration,
                        "idle_timeout" => options.idle_timeout = duration,
                        "whole_timeout" => options.whole_timeout = duration,
                        _ => options.health_interval = duration,
                    }
                }
                let endpoints = upstreams
                    .iter()
                    .enumerate()
                    .map(|(i, u)| {
                        let at = format!("models.{id}.upstreams[{i}]");
                        let api_key = match &u.api_key_env {
                            None => None,
                            Some(var) => match std::env::var(var) {
                                Ok(key) if !key.trim().is_empty() => {
                                    Some(UpstreamKey::new(key.trim()))
                                }
                                Ok(_) => bail!(
                                    "{at}.api_key_env: the environment variable {var} is empty"
                                ),
                                Err(_) => bail!(
                                    "{at}.api_key_env: the environment variable {var} is not set"
                                ),
                            },
                        };
                        let endpoint = EndpointConfig {
                            base_url: u.base_url.clone(),
                            model: u.model.clone(),
                            api_key,
                            weight: u.weight,
                        };
                        endpoint.validate().with_context(|| at.clone())?;
                        Ok(endpoint)
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                ModelSource::Upstream { endpoints, options }
            }
        };
        Ok(ModelSettings {
            reasoning: table.reasoning,
            source,
        })
    }
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
    pub models: BTreeMap<String, ModelSettings>,
}

/// Default context tokens per sequence.
pub const DEFAULT_CONTEXT: u32 = 4096;
/// Default sequences decoded together.
pub const DEFAULT_PARALLEL: u32 = 8;
/// Default requests waiting for a slot.
pub const DEFAULT_QUEUE: usize = 64;

impl EngineSettings {
    fn resolve(args: &EngineArgs, file: &FileConfig) -> anyhow::Result<Self> {
        let mut settings = EngineSettings {
            model: args.model.clone().or_else(|| file.model.clone()),
            context: args.context.or(file.context).unwrap_or(DEFAULT_CONTEXT),
            parallel: args.parallel.or(file.parallel).unwrap_or(DEFAULT_PARALLEL),
            threads: args.threads.or(file.threads),
            queue: args.queue.or(file.queue).unwrap_or(DEFAULT_QUEUE),
            models: BTreeMap::new(),
        };
        if settings.context < 64 {
            bail!("context must be at least 64 tokens");
        }
        if settings.parallel == 0 || settings.threads == Some(0) {
            bail!("parallel and threads must be at least 1");
        }
        for (id, table) in &file.models {
            if id.is_empty() || id.chars().any(char::is_whitespace) {
                bail!("models.{id:?}: a model id must be non-empty and without spaces");
            }
            settings
                .models
                .insert(id.clone(), ModelSettings::resolve(id, table)?);
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
        let limit = |flag: Option<i64>, file: Option<i64>, name: &str| -> anyhow::Result<_> {
            match flag.or(file) {
                Some(n) if n < 0 => bail!("{name} must be 0 (unlimited) or more"),
                Some(0) | None => Ok(None),
                Some(n) => Ok(Some(n)),
            }
        };
        let rate_limits = KeyLimits {
            requests_per_minute: limit(args.rate_limit_rpm, file.rate_limit_rpm, "rate_limit_rpm")?,
            tokens_per_minute: limit(args.rate_limit_tpm, file.rate_limit_tpm, "rate_limit_tpm")?,
        };
        let redis_url = args.redis_url.clone().or(file.redis_url.clone());
        if let Some(url) = &redis_url
            && !(url.starts_with("redis://") || url.starts_with("rediss://"))
        {
            // The URL is not echoed: it may hold a password.
            bail!("redis_url must start with redis:// or rediss://");
        }
        let shutdown_grace = std::time::Duration::from_secs(seconds(
            &args.shutdown_grace,
            &file.shutdown_grace,
            "shutdown_grace",
            defaults.shutdown_grace.as_secs() as i64,
        )? as u64);
        let timeout = |flag: &Option<String>,
                       file: &Option<String>,
                       name: &str,
                       default: Duration| {
            match flag.as_ref().or(file.as_ref()) {
                Some(text) => parse_duration(text).with_context(|| format!("invalid {name}")),
                None => Ok(default),
            }
        };
        let header_timeout = timeout(
            &args.header_timeout,
            &file.header_timeout,
            "header_timeout",
            defaults.header_timeout,
        )?;
        let body_timeout = timeout(
            &args.body_timeout,
            &file.body_timeout,
            "body_timeout",
            defaults.body_timeout,
        )?;
        let at_least_one = |value: Option<usize>, name: &str, default: usize| match value {
            Some(0) => bail!("{name} must be at least 1"),
            Some(n) => Ok(n),
            None => Ok(default),
        };
        let max_connections = at_least_one(
            args.max_connections.or(file.max_connections),
            "max_connections",
            defaults.max_connections,
        )?;
        let max_connections_per_address = at_least_one(
            args.max_connections_per_address
                .or(file.max_connections_per_address),
            "max_connections_per_address",
            defaults.max_connections_per_address,
        )?;
        let trusted_proxies = args
            .trusted_proxies
            .as_ref()
            .or(file.trusted_proxies.as_ref())
            .map(|blocks| {
                blocks
                    .iter()
                    .filter(|b| !b.trim().is_empty())
                    .map(|b| b.parse::<Cidr>().map_err(anyhow::Error::msg))
                    .collect::<anyhow::Result<Vec<_>>>()
            })
            .transpose()
            .context("invalid trusted_proxies")?
            .unwrap_or_default();
        let metrics_token = match args.metrics_token.as_ref().or(file.metrics_token.as_ref()) {
            // The token is not echoed.
            Some(token) if token.trim().is_empty() => bail!("metrics_token must not be empty"),
            Some(token) => Some(MetricsToken::new(token.trim())),
            None => None,
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
                rate_limits,
                redis_url,
                shutdown_grace,
                header_timeout,
                body_timeout,
                max_connections,
                max_connections_per_address,
                trusted_proxies,
                metrics_token,
                metrics_bind: args.metrics_bind.or(file.metrics_bind),
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
        assert_eq!(
            qwen.source,
            ModelSource::File {
                path: PathBuf::from("/m/qwen.gguf"),
                context: None,
                parallel: None
            }
        );
        args.engine.parallel = Some(0);
        assert!(ServeSettings::resolve(&args).is_err());
    }

    fn resolve_models(toml: &str) -> anyhow::Result<BTreeMap<String, ModelSettings>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("svc.toml");
        std::fs::write(&path, toml).unwrap();
        let mut args = ServeArgs::default();
        args.store.config = Some(path);
        args.store.data_dir = Some(dir.path().to_owned());
        Ok(ServeSettings::resolve(&args)?.engine.models)
    }

    #[test]
    fn upstream_models_are_read() {
        // PATH is set wherever tests run; it stands in for a key variable.
        let models = resolve_models(
            r#"
[models.big]
reasoning = true
idle_timeout = "500ms"
first_byte_timeout = "2m"
upstreams = [
  { base_url = "http://gpu1:8000/v1", model = "org/Big", api_key_env = "PATH", weight = 3 },
  { base_url = "https://gpu2.example/v1/", model = "big" },
]
"#,
        )
        .unwrap();
        let big = &models["big"];
        assert!(big.reasoning);
        let ModelSource::Upstream { endpoints, options } = &big.source else {
            panic!("{big:?}")
        };
        assert_eq!(options.idle_timeout, Duration::from_millis(500));
        assert_eq!(options.first_byte_timeout, Duration::from_secs(120));
        assert_eq!(
            options.connect_timeout,
            UpstreamOptions::default().connect_timeout
        );
        assert_eq!(endpoints.len(), 2);
        assert_eq!(endpoints[0].model, "org/Big");
        assert_eq!(endpoints[0].weight, 3);
        let path = std::env::var("PATH").unwrap();
        assert_eq!(endpoints[0].api_key, Some(UpstreamKey::new(path.trim())));
        assert_eq!(endpoints[1].weight, 1);
        assert_eq!(endpoints[1].api_key, None);
        assert!(!format!("{big:?}").contains(&path), "keys are redacted");
    }

    #[test]
    fn bad_model_tables_are_refused_by_name() {
        let cases = [
            ("[models.m]\nreasoning = true\n", "exactly one of"),
            (
                "[models.m]\npath = \"/m.gguf\"\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\" }]\n",
                "exactly one of",
            ),
            ("[models.m]\nupstreams = []\n", "models.m.upstreams"),
            (
                "[models.m]\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\", api_key_env = \"SVC_SURELY_UNSET_VARIABLE\" }]\n",
                "models.m.upstreams[0].api_key_env: the environment variable SVC_SURELY_UNSET_VARIABLE is not set",
            ),
            (
                "[models.m]\nupstreams = [{ base_url = \"ftp://h/v1\", model = \"x\" }]\n",
                "models.m.upstreams[0]",
            ),
            (
                "[models.m]\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\", weight = 0 }]\n",
                "weight",
            ),
            (
                "[models.m]\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\", key = \"k\" }]\n",
                "key",
            ),
            (
                "[models.m]\nidle_timeout = \"soon\"\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\" }]\n",
                "models.m.idle_timeout",
            ),
            (
                "[models.m]\ncontext = 128\nupstreams = [{ base_url = \"http://h/v1\", model = \"x\" }]\n",
                "context and parallel",
            ),
            (
                "[models.m]\npath = \"/m.gguf\"\nidle_timeout = \"5s\"\n",
                "models.m.idle_timeout applies only",
            ),
        ];
        for (toml, want) in cases {
            let err = format!("{:#}", resolve_models(toml).unwrap_err());
            assert!(err.contains(want), "{toml}: {err}");
        }
    }

    #[test]
    fn hardening_settings_are_read_from_file_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("svc.toml");
        std::fs::write(
            &path,
            "header_timeout = \"5s\"\nbody_timeout = \"2m\"\nmax_connections = 500\n\
             max_connections_per_address = 20\ntrusted_proxies = [\"10.0.0.0/8\", \"::1\"]\n\
             metrics_token = \"tok\"\nmetrics_bind = \"127.0.0.1:9100\"\n",
        )
        .unwrap();
        let mut args = ServeArgs::default();
        args.store.config = Some(path);
        args.store.data_dir = Some(dir.path().to_owned());
        let s = ServeSettings::resolve(&args).unwrap().server;
        assert_eq!(s.header_timeout, Duration::from_secs(5));
        assert_eq!(s.body_timeout, Duration::from_secs(120));
        assert_eq!(
            (s.max_connections, s.max_connections_per_address),
            (500, 20)
        );
        assert_eq!(s.trusted_proxies.len(), 2);
        assert!(s.trusted_proxies[0].contains("10.1.2.3".parse().unwrap()));
        assert!(s.metrics_token.as_ref().unwrap().matches("tok"));
        assert_eq!(s.metrics_bind.unwrap().port(), 9100);
        assert!(
            !format!("{s:?}").contains("\"tok\""),
            "the token is not shown"
        );

        args.header_timeout = Some("500ms".into());
        args.trusted_proxies = Some(vec!["192.0.2.0/24".into()]);
        let s = ServeSettings::resolve(&args).unwrap().server;
        assert_eq!(s.header_timeout, Duration::from_millis(500));
        assert_eq!(s.trusted_proxies.len(), 1);

        for (bad, want) in [
            (("header_timeout", "0s"), "header_timeout"),
            (("trusted_proxies", "10.0.0.1/8"), "trusted_proxies"),
            (("max_connections", "0"), "max_connections"),
        ] {
            let mut args = args.clone();
            match bad.0 {
                "header_timeout" => args.header_timeout = Some(bad.1.into()),
                "trusted_proxies" => args.trusted_proxies = Some(vec![bad.1.into()]),
                _ => args.max_connections = Some(0),
            }
            let err = format!("{:#}", ServeSettings::resolve(&args).unwrap_err());
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn defaults_hold_without_settings() {
        let dir = tempfile::tempdir().unwrap();
        let mut args = ServeArgs::default();
        args.store.data_dir = Some(dir.path().to_owned());
        let s = ServeSettings::resolve(&args).unwrap().server;
        let d = ServerConfig::default();
        assert_eq!(s.header_timeout, d.header_timeout);
        assert_eq!(s.body_timeout, d.body_timeout);
        assert_eq!(s.max_connections, d.max_connections);
        assert!(s.trusted_proxies.is_empty() && s.metrics_token.is_none());
        assert!(s.metrics_bind.is_none());
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
