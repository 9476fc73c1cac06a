//! `[models.<id>]` tables: a model served from a GGUF file (`path`) or by
//! OpenAI-compatible endpoints (`upstreams`). A table is read as its serde
//! form, a `ModelTable`: `reasoning`, the fallbacks (`fallbacks`,
//! `fallback_on_context_length`) and two optional sections, each with
//! `deny_unknown_fields`, that serde fills from the table's keys: the
//! file's ([`FileModelConfig`], which needs `path`) and the endpoints'
//! ([`UpstreamModelConfig`], which needs `upstreams`). Exactly one must be
//! there, and becomes [`ModelSource`]; so a table with both, neither, one
//! kind's key beside the other's or a key of neither is refused at start,
//! naming the key.

use std::path::PathBuf;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use svc_engine_upstream::{EndpointConfig, UpstreamKey, UpstreamOptions};

use super::layers::{self, Given, Raw, Shape, Source};

/// One `[models.<id>]` table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(try_from = "ModelTable", into = "ModelTable")]
pub struct ModelConfig {
    /// Whether this id asks for reasoning (as `svc-thinking` does).
    pub reasoning: bool,
    pub source: ModelSource,
    /// Models asked in turn when this one fails before answering.
    pub fallbacks: Vec<String>,
    /// Whether a prompt longer than this model's context goes to the
    /// fallbacks too.
    pub fallback_on_context_length: bool,
}

/// What serves a model.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelSource {
    /// A GGUF file run by the embedded engine.
    File(FileModelConfig),
    /// OpenAI-compatible endpoints.
    Upstream(UpstreamModelConfig),
}

/// A `[models.<id>]` table as written: each kind's keys are a section of
/// their own, present when one of them is given.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct ModelTable {
    #[serde(default)]
    reasoning: bool,
    #[serde(default)]
    fallbacks: Vec<String>,
    #[serde(default)]
    fallback_on_context_length: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    file: Option<FileModelConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    upstream: Option<UpstreamModelConfig>,
}

impl TryFrom<ModelTable> for ModelConfig {
    type Error = &'static str;

    fn try_from(table: ModelTable) -> Result<Self, Self::Error> {
        let source = match (table.file, table.upstream) {
            (Some(file), None) => ModelSource::File(file),
            (None, Some(upstream)) => ModelSource::Upstream(upstream),
            _ => return Err("give exactly one of `path` (a GGUF file) or `upstreams`"),
        };
        Ok(ModelConfig {
            reasoning: table.reasoning,
            source,
            fallbacks: table.fallbacks,
            fallback_on_context_length: table.fallback_on_context_length,
        })
    }
}

impl From<ModelConfig> for ModelTable {
    fn from(model: ModelConfig) -> Self {
        let (file, upstream) = match model.source {
            ModelSource::File(file) => (Some(file), None),
            ModelSource::Upstream(upstream) => (None, Some(upstream)),
        };
        ModelTable {
            reasoning: model.reasoning,
            fallbacks: model.fallbacks,
            fallback_on_context_length: model.fallback_on_context_length,
            file,
            upstream,
        }
    }
}

/// A model in a GGUF file: `path`, and the engine's settings for it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileModelConfig {
    /// The GGUF file.
    pub path: PathBuf,
    /// Context tokens per sequence; the engine's `context` when absent.
    #[serde(default, deserialize_with = "context")]
    pub context: Option<u32>,
    /// Sequences decoded together; the engine's `parallel` when absent.
    #[serde(default, deserialize_with = "parallel")]
    pub parallel: Option<u32>,
    /// How the model writes tool calls (`hermes`, `mistral`, `llama3`,
    /// `pythonic`, ...); what its chat template teaches when absent.
    /// Checked when the model loads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_format: Option<String>,
    /// How the model marks its reasoning (`think`, `mistral`, `seed`,
    /// `harmony`, or `none`); what its chat template teaches when absent.
    /// Checked when the model loads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_format: Option<String>,
    /// Load the model at start (true), or when first asked (false, the
    /// default), within `models_memory`.
    #[serde(default)]
    pub preload: bool,
    /// How long the model stays loaded after its last request ends: a
    /// duration (`5m`, the default when not preloaded), `forever` (never
    /// unloaded, nor evicted to make room: the default when preloaded) or
    /// `0` (unloaded when idle).
    #[serde(default, with = "keep_alive", skip_serializing_if = "Option::is_none")]
    pub keep_alive: Option<KeepAlive>,
}

/// `keep_alive` of a model loaded on demand when the table gives none:
/// Ollama's 5 minutes.
pub const DEFAULT_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(300);

pub use svc_on_demand::KeepAlive;

/// `forever`, `0` or a duration (`30s`, `5m`, `1h`).
mod keep_alive {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    use super::KeepAlive;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<KeepAlive>, D::Error> {
        let text = String::deserialize(d)?;
        match text.trim() {
            "forever" => Ok(Some(KeepAlive::Forever)),
            "0" => Ok(Some(KeepAlive::For(Duration::ZERO))),
            other => svc_core::config::parse_duration(other)
                .map(|d| Some(KeepAlive::For(d)))
                .map_err(|e| serde::de::Error::custom(format!("{e}, or forever, or 0"))),
        }
    }

    pub fn serialize<S: Serializer>(value: &Option<KeepAlive>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            None => s.serialize_none(),
            Some(KeepAlive::Forever) => s.serialize_str("forever"),
            Some(KeepAlive::For(d)) if d.is_zero() => s.serialize_str("0"),
            Some(KeepAlive::For(d)) => s.serialize_str(&svc_core::config::format_duration(*d)),
        }
    }
}

impl FileModelConfig {
    /// The GGUF at `path` with the engine's settings.
    pub fn at(path: PathBuf) -> Self {
        FileModelConfig {
            path,
            context: None,
            parallel: None,
            tool_format: None,
            reasoning_format: None,
            preload: true,
            keep_alive: None,
        }
    }

    /// Its `keep_alive`, or the default: forever when preloaded, else
    /// [`DEFAULT_KEEP_ALIVE`].
    pub fn keep_alive(&self) -> KeepAlive {
        self.keep_alive.unwrap_or(if self.preload {
            KeepAlive::Forever
        } else {
            KeepAlive::For(DEFAULT_KEEP_ALIVE)
        })
    }
}

fn context<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    super::context_tokens(d).map(Some)
}

fn parallel<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    svc_core::config::at_least_one::deserialize(d).map(Some)
}

/// A model served by `upstreams`, with the upstream engine's settings
/// (timeouts, prefix affinity) as keys beside it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamModelConfig {
    /// Endpoints that serve the model (at least one).
    #[serde(deserialize_with = "listed")]
    pub upstreams: Vec<UpstreamConfig>,
    /// The upstream engine's settings; its defaults for keys not given.
    #[serde(default)]
    pub options: UpstreamOptions,
    /// The endpoints with their keys read from the environment at start.
    #[serde(skip)]
    pub endpoints: Vec<EndpointConfig>,
}

/// `upstreams`: at least one endpoint.
fn listed<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<UpstreamConfig>, D::Error> {
    let upstreams = Vec::<UpstreamConfig>::deserialize(d)?;
    if upstreams.is_empty() {
        return Err(serde::de::Error::custom("must list at least one endpoint"));
    }
    Ok(upstreams)
}

/// One entry of `upstreams = [...]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The API base, e.g. `http://gpu1:8000/v1`.
    pub base_url: String,
    /// The model's name at that endpoint.
    pub model: String,
    /// The environment variable holding its API key, if it needs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Share of the load relative to the other endpoints.
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_weight() -> u32 {
    1
}

impl UpstreamConfig {
    /// The endpoint, its key read from `api_key_env`; `at` names the entry.
    fn endpoint(&self, at: &str) -> anyhow::Result<EndpointConfig> {
        let api_key = match &self.api_key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(key) if !key.trim().is_empty() => Some(UpstreamKey::new(key.trim())),
                Ok(_) => bail!("{at}.api_key_env: the environment variable {var} is empty"),
                Err(_) => bail!("{at}.api_key_env: the environment variable {var} is not set"),
            },
        };
        let endpoint = EndpointConfig {
            base_url: self.base_url.clone(),
            model: self.model.clone(),
            api_key,
            weight: self.weight,
        };
        endpoint.validate().with_context(|| at.to_owned())?;
        Ok(endpoint)
    }
}

impl ModelConfig {
    /// Reads `[models.<id>]` (from `source`), reading upstream keys from
    /// the environment.
    pub fn from_toml(id: &str, table: &toml::Value, source: &Source) -> anyhow::Result<Self> {
        if id.is_empty() || id.chars().any(char::is_whitespace) {
            bail!("models.{id:?}: a model id must be non-empty and without spaces");
        }
        let toml::Value::Table(table) = table else {
            bail!("models.{id} must be a table ([models.{id}])");
        };
        let given: Vec<Given> = table
            .iter()
            .map(|(key, value)| Given {
                key: key.clone(),
                value: Raw::Toml(value.clone()),
                source: source.clone(),
            })
            .collect();
        let prefix = format!("models.{id}.");
        let mut model: ModelConfig = layers::read(
            &Shape::of::<ModelConfig>(),
            &prefix,
            given.iter().collect(),
            true,
        )
        .map_err(|e| {
            if e.names_its_key() {
                anyhow::Error::new(e)
            } else {
                anyhow::anyhow!("models.{id}: {e}")
            }
        })?;
        // Its keep_alive as it will run (the default depends on preload),
        // so that --print-config shows it.
        if let ModelSource::File(file) = &mut model.source {
            file.keep_alive = Some(file.keep_alive());
        }
        if let ModelSource::Upstream(upstream) = &mut model.source {
            upstream.endpoints = upstream
                .upstreams
                .iter()
                .enumerate()
                .map(|(i, u)| u.endpoint(&format!("models.{id}.upstreams[{i}]")))
                .collect::<anyhow::Result<_>>()?;
        }
        Ok(model)
    }

    /// The table as `--print-config` shows it: every key, defaults included.
    pub fn to_toml(&self) -> Result<toml::Table, toml::ser::Error> {
        let table = toml::Table::try_from(self)?;
        Ok(Shape::of::<ModelConfig>().flatten(table).0)
    }
}
