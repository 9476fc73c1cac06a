//! The configuration of `svc serve` (and the store part of the operator
//! commands): one typed section per concern, each declared once with its
//! keys, types and defaults, filled from defaults < the TOML file given by
//! `--config` < `SVC_*` environment < flags (see [`layers`]).
//!
//! The file's keys are flat (`bind`, `context`, ...) plus `[prices.<id>]`
//! and `[models.<id>]` tables; the flag of key `data_dir` is `--data-dir`
//! and its variable `SVC_DATA_DIR` (the flags are declared in `cli.rs`).
//! An unknown key in the file is an error that names it.
//!
//! [`ServeConfig`] is one serde type: its sections are fields, nested
//! sections fields of those (`server.sso`), and [`layers`] fills each from
//! the flat keys its serde form declares. [`SECTIONS`] gives the sections
//! their titles and order, for `--print-config` and the reference.

pub mod layers;
pub mod models;
pub mod print;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::{Deserialize, Deserializer, Serialize};
use svc_core::DeviceConfig;
use svc_server::ServerConfig;
use svc_server::config::{RateLimitConfig, SecretUrl, SsoConfig};
use svc_store::SQLITE_FILE_NAME;
use svc_store::SqlStore;

pub use layers::{Given, Layers, Raw, Shape, Source};
pub use models::{
    DEFAULT_KEEP_ALIVE, FileModelConfig, KeepAlive, ModelConfig, ModelSource, UpstreamConfig,
    UpstreamModelConfig,
};

/// Where the state lives: the `data_dir` and `database_url` keys.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct StoreConfig {
    /// Directory for the embedded database and models; `None` only where
    /// the user has no data directory and none was given.
    pub data_dir: Option<PathBuf>,
    /// `postgres://…` or `sqlite:…`; `None` is SQLite in `data_dir`.
    #[serde(deserialize_with = "database_url")]
    pub database_url: Option<SecretUrl>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            data_dir: dirs::data_dir().map(|dir| dir.join("svc")),
            database_url: None,
        }
    }
}

fn database_url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SecretUrl>, D::Error> {
    let url = SecretUrl::deserialize(d)?;
    if !matches!(url.scheme(), "postgres" | "postgresql" | "sqlite") {
        // The URL is not echoed: it may hold a password.
        return Err(serde::de::Error::custom(
            "must start with postgres://, postgresql:// or sqlite:",
        ));
    }
    Ok(Some(url))
}

impl StoreConfig {
    /// The data directory.
    pub fn data_dir(&self) -> anyhow::Result<&Path> {
        self.data_dir
            .as_deref()
            .context("no data directory is known for this user: pass --data-dir")
    }

    /// Opens (creating it when missing) the database: the given URL, or
    /// SQLite in the data directory under the store's own URL rules.
    pub async fn open(&self) -> anyhow::Result<SqlStore> {
        let store = match &self.database_url {
            Some(url) => SqlStore::connect(url.expose()).await,
            None => SqlStore::connect_data_dir(self.data_dir()?).await,
        };
        store.with_context(|| format!("cannot open the store: {}", self.describe()))
    }

    /// Where the state is, for people: never prints credentials.
    pub fn describe(&self) -> String {
        match (&self.database_url, &self.data_dir) {
            (Some(url), _) if url.scheme() == "sqlite" => format!("SQLite ({url})"),
            (Some(_), _) => "PostgreSQL".to_owned(),
            (None, Some(dir)) => format!("SQLite ({})", dir.join(SQLITE_FILE_NAME).display()),
            (None, None) => "SQLite (no data directory)".to_owned(),
        }
    }
}

/// Default context tokens per sequence.
pub const DEFAULT_CONTEXT: u32 = 4096;
/// Default sequences decoded together.
pub const DEFAULT_PARALLEL: u32 = 8;
/// Default requests waiting for a slot.
pub const DEFAULT_QUEUE: usize = 64;

/// The embedded engine behind `svc` and `svc-thinking`, and the defaults of
/// `[models.<id>]` tables with a `path`. Free of the engine crate: the
/// engine's own options are built from it where the engine is started.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct EngineConfig {
    /// GGUF for `svc` and `svc-thinking`; `None` means the default model.
    pub model: Option<PathBuf>,
    /// GGUF of an embedding model for `svc-embed`; `None` means the default
    /// one (all-MiniLM-L6-v2) when `model` is the default too, else no
    /// `svc-embed`.
    pub embedding_model: Option<PathBuf>,
    /// Context tokens of each sequence, prompt and reply together.
    #[serde(deserialize_with = "context_tokens")]
    pub context: u32,
    /// Requests decoded together in one batch.
    #[serde(with = "svc_core::config::at_least_one")]
    pub parallel: u32,
    /// CPU threads for inference; `None` is every core.
    #[serde(deserialize_with = "threads")]
    pub threads: Option<u32>,
    /// Requests that may wait for a free slot before 429.
    pub queue: usize,
    /// The most slots one API key's requests (or one request's `n`
    /// choices) hold while another key's request waits (a key alone takes
    /// every slot, and gives back the rest when another asks). `None` is
    /// half of `parallel`.
    #[serde(deserialize_with = "slots")]
    pub slots_per_client: Option<u32>,
    /// KV cells (tokens) of the one pool all sequences share; `None` is
    /// `parallel × context`.
    #[serde(deserialize_with = "kv_tokens")]
    pub kv_cache: Option<u32>,
    /// How KV cells are stored.
    #[serde(deserialize_with = "kv_type")]
    pub kv_type: KvType,
    /// Host memory for the prompt prefixes of finished requests whose slot
    /// was taken, in bytes or with a unit; 0 keeps none.
    #[serde(with = "byte_count_or_zero")]
    pub prefix_cache: usize,
    /// Serve a model whose weights are mostly Q4_1 from a Q8_0 copy made
    /// once beside it (prompts within 5%, one or a few streams decoded
    /// slower, 1.5 times the file; off by default: svc's own Q4_1 product
    /// batches the file's rows as they are, see BENCHMARKS.md).
    pub repack: bool,
    /// Batch-invariant numerics in the embedded engine: a greedy or seeded
    /// request gives the same text whatever runs beside it (on by default).
    pub batch_invariant: bool,
    /// Memory (bytes) the local models share (the default ones and every
    /// `[models.<id>]` GGUF): before one loads, the least recently used
    /// idle ones are unloaded until it fits. `None`: what the machine can
    /// spare when `svc serve` starts (see `serve::spare_memory`).
    #[serde(deserialize_with = "models_memory")]
    pub models_memory: Option<usize>,
    /// How long a request for a model loaded on demand waits for its load.
    #[serde(with = "svc_core::config::duration")]
    pub load_timeout: Duration,
    /// How long the requests running on a local model may keep it loaded
    /// while another model waits for its room in `models_memory`: then
    /// they are ended (with an error) and it is unloaded. New requests for
    /// it meanwhile wait for its next load.
    #[serde(with = "svc_core::config::duration")]
    pub max_hold: Duration,
    /// Loads of one local model in any minute: a load past it waits (up
    /// to `load_timeout`), so that requests for models that do not fit
    /// together cannot keep loading them in turn.
    #[serde(with = "svc_core::config::at_least_one")]
    pub max_loads_per_minute: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            model: None,
            embedding_model: None,
            context: DEFAULT_CONTEXT,
            parallel: DEFAULT_PARALLEL,
            threads: None,
            queue: DEFAULT_QUEUE,
            slots_per_client: None,
            kv_cache: None,
            kv_type: KvType::F16,
            prefix_cache: DEFAULT_PREFIX_CACHE,
            repack: false,
            batch_invariant: true,
            models_memory: None,
            load_timeout: DEFAULT_LOAD_TIMEOUT,
            max_hold: DEFAULT_MAX_HOLD,
            max_loads_per_minute: DEFAULT_MAX_LOADS_PER_MINUTE,
        }
    }
}

/// Default wait for a model loaded on demand: 2 minutes.
pub const DEFAULT_LOAD_TIMEOUT: Duration = Duration::from_secs(120);

// Half of DEFAULT_LOAD_TIMEOUT, so that the waiting model's requests are
// answered.
pub use svc_on_demand::{DEFAULT_MAX_HOLD, DEFAULT_MAX_LOADS_PER_MINUTE};

fn models_memory<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    svc_core::config::byte_count::deserialize(d).map(Some)
}

/// Default host memory for saved prompt prefixes: 512 MiB.
pub const DEFAULT_PREFIX_CACHE: usize = 512 << 20;

/// The type of the embedded engine's KV cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum KvType {
    /// 16-bit floats.
    #[default]
    #[serde(rename = "f16")]
    F16,
    /// 8-bit blocks, about half the memory (turns flash attention on).
    #[serde(rename = "q8_0")]
    Q8_0,
}

fn kv_type<'de, D: Deserializer<'de>>(d: D) -> Result<KvType, D::Error> {
    match String::deserialize(d)?.as_str() {
        "f16" => Ok(KvType::F16),
        "q8_0" => Ok(KvType::Q8_0),
        other => Err(serde::de::Error::custom(format!(
            "{other:?} is not a KV cell type: f16 or q8_0"
        ))),
    }
}

fn kv_tokens<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let tokens = context_tokens(d)?;
    Ok(Some(tokens))
}

/// A byte count as [`svc_core::config::byte_count`] reads it, where 0 is allowed (off).
mod byte_count_or_zero {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        let bytes = match Raw::deserialize(d)? {
            Raw::Number(0) => return Ok(0),
            Raw::Number(n) => n,
            Raw::Text(text) if text.trim() == "0" => return Ok(0),
            Raw::Text(text) => {
                svc_core::config::parse_bytes(&text).map_err(serde::de::Error::custom)?
            }
        };
        usize::try_from(bytes).map_err(serde::de::Error::custom)
    }

    pub fn serialize<S: Serializer>(value: &usize, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*value as u64)
    }
}

/// Fewest context tokens a sequence may have.
pub const MIN_CONTEXT: u32 = 64;

pub(crate) fn context_tokens<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let tokens = u32::deserialize(d)?;
    if tokens < MIN_CONTEXT {
        return Err(serde::de::Error::custom(format!(
            "must be at least {MIN_CONTEXT} tokens"
        )));
    }
    Ok(tokens)
}

fn slots<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    svc_core::config::at_least_one::deserialize(d).map(Some)
}

fn threads<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    svc_core::config::at_least_one::deserialize(d).map(Some)
}

/// Everything `svc serve` needs. Its serde form is every flat key and the
/// `[prices.<id>]` tables, by section; the `[models.<id>]` tables are read
/// on their own ([`ModelConfig::from_toml`]), their upstream keys from the
/// environment.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct ServeConfig {
    pub store: StoreConfig,
    /// The HTTP layer, with its `sso`, `device` and `rate_limits` sections
    /// and the `[prices.<id>]` tables.
    pub server: ServerConfig,
    pub engine: EngineConfig,
    /// More models, by id (`[models.<id>]` tables).
    #[serde(skip)]
    pub models: BTreeMap<String, ModelConfig>,
}

/// A section of the flat keys, as `--print-config` and the reference show
/// it: a title, and the type whose keys it has (a nested section that is
/// not in [`SECTIONS`] shows its keys in its parent's).
#[derive(Clone, Copy)]
pub struct Section {
    pub title: &'static str,
    shape: fn() -> Shape,
}

impl Section {
    const fn of<T: serde::de::DeserializeOwned>(title: &'static str) -> Self {
        Section {
            title,
            shape: Shape::of::<T>,
        }
    }
}

/// Every section of [`ServeConfig`], once, in the order they are shown.
/// Adding a section is a field on its parent's type and a line here.
pub const SECTIONS: [Section; 6] = [
    Section::of::<StoreConfig>("store"),
    Section::of::<ServerConfig>("server"),
    Section::of::<SsoConfig>("single sign-on"),
    Section::of::<DeviceConfig>("device flow"),
    Section::of::<RateLimitConfig>("rate limits"),
    Section::of::<EngineConfig>("engine"),
];

/// The shape of [`ServeConfig`]: every key, where it is.
pub fn shape() -> &'static Shape {
    static SHAPE: OnceLock<Shape> = OnceLock::new();
    SHAPE.get_or_init(Shape::of::<ServeConfig>)
}

/// The sections of the flat keys with their keys, in the order they are
/// shown (tables such as `[prices.<id>]` are not among the keys).
pub fn sections() -> &'static [(&'static str, Vec<&'static str>)] {
    static SECTIONS_KEYS: OnceLock<Vec<(&'static str, Vec<&'static str>)>> = OnceLock::new();
    SECTIONS_KEYS.get_or_init(|| {
        let shapes: Vec<Shape> = SECTIONS.iter().map(|s| (s.shape)()).collect();
        let titled: Vec<&str> = shapes.iter().map(|s| s.name).collect();
        SECTIONS
            .iter()
            .zip(&shapes)
            .map(|(section, shape)| (section.title, own_keys(shape, &titled)))
            .collect()
    })
}

/// The keys of `shape`, and of its nested sections not named in `titled`.
fn own_keys(shape: &Shape, titled: &[&str]) -> Vec<&'static str> {
    let mut keys = Vec::new();
    for (name, field) in &shape.fields {
        match field {
            layers::Field::Key => keys.push(*name),
            layers::Field::Table => {}
            layers::Field::Section { shape, .. } if !titled.contains(&shape.name) => {
                keys.extend(own_keys(shape, titled));
            }
            layers::Field::Section { .. } => {}
        }
    }
    keys
}

/// Whether `key` is a flat key or a table (`prices`) of the configuration.
pub fn is_key(key: &str) -> bool {
    shape().contains(key)
}

/// The configuration file's contents as a layer, plus its `[models.*]`
/// tables (only the file gives those).
#[derive(Debug, Clone, Default)]
pub struct FileLayer {
    pub path: Option<PathBuf>,
    pub values: Vec<Given>,
    pub models: toml::Table,
}

impl FileLayer {
    /// Reads `path`, or nothing when no file was given; an unknown key is
    /// an error that names it.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let Some(path) = path else {
            return Ok(FileLayer::default());
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        let table: toml::Table = toml::from_str(&text)
            .with_context(|| format!("invalid configuration file {}", path.display()))?;
        let mut layer = FileLayer {
            path: Some(path.to_owned()),
            ..FileLayer::default()
        };
        for (key, value) in table {
            if key == "models" {
                let toml::Value::Table(models) = value else {
                    bail!(
                        "{}: `models` must be tables such as [models.qwen]",
                        path.display()
                    );
                };
                layer.models = models;
            } else if is_key(&key) {
                layer.values.push(Given {
                    key,
                    value: Raw::Toml(value),
                    source: Source::File(path.to_owned()),
                });
            } else {
                bail!(
                    "invalid configuration file {}: unknown key `{key}`",
                    path.display()
                );
            }
        }
        Ok(layer)
    }
}

/// The file, then the environment and flags (`given`, as clap read them),
/// merged.
pub fn merge(file: &FileLayer, given: &[Given]) -> Layers {
    let mut layers = Layers::default();
    for given in file.values.iter().chain(given) {
        layers.set(given.clone());
    }
    layers
}

impl StoreConfig {
    /// The store section of the file at `config` and of `given`.
    pub fn load(config: Option<&Path>, given: &[Given]) -> anyhow::Result<Self> {
        let file = FileLayer::load(config)?;
        Ok(merge(&file, given).section()?)
    }
}

impl ServeConfig {
    /// Every section from the merged layers, and the models from the file.
    pub fn from_layers(layers: &Layers, file: &FileLayer) -> anyhow::Result<Self> {
        let mut config: ServeConfig = layers.section()?;
        config
            .server
            .sso
            .check(config.server.allow_signup)
            .map_err(anyhow::Error::msg)?;
        let source = match &file.path {
            Some(path) => Source::File(path.clone()),
            None => Source::Default,
        };
        config.models = file
            .models
            .iter()
            .map(|(id, table)| Ok((id.clone(), ModelConfig::from_toml(id, table, &source)?)))
            .collect::<anyhow::Result<_>>()?;
        Ok(config)
    }
}

/// Whether `value` is a valid value of `key` (a flag's or an environment
/// variable's), as its section reads it; the message says why not. What
/// the key needs of others (`oidc_issuer` of `oidc_client_id`) is checked
/// at load, when all are known.
pub fn check_value(key: &str, value: Raw) -> Result<(), String> {
    if !is_key(key) {
        return Ok(());
    }
    let given = Given {
        key: key.to_owned(),
        value,
        source: Source::Default,
    };
    match layers::read::<ServeConfig>(shape(), "", vec![&given], false) {
        Err(e) if e.is_about_a_given_value() => Err(e.to_string()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
