//! `[models.<id>]` tables: a model served from a GGUF file (`path`) or by
//! OpenAI-compatible endpoints (`upstreams`). The two are variants of
//! [`ModelSource`], each with only its own keys, so a table with both,
//! neither, or the other kind's keys is refused at start, naming the key.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use svc_engine_upstream::{EndpointConfig, UpstreamKey, UpstreamOptions};

use super::layers::{Entries, Given, Raw, Source, fields_of};

/// One `[models.<id>]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Whether this id asks for reasoning (as `svc-thinking` does).
    pub reasoning: bool,
    pub source: ModelSource,
}

/// What serves a model.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelSource {
    /// A GGUF file run by the embedded engine.
    File(FileModelConfig),
    /// OpenAI-compatible endpoints.
    Upstream(UpstreamModelConfig),
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
}

fn context<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    super::context_tokens(d).map(Some)
}

fn parallel<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    svc_core::config::at_least_one::deserialize(d).map(Some)
}

/// A model served by `upstreams`, with the timeouts of calling them.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamModelConfig {
    /// Endpoints that serve the model (at least one).
    pub upstreams: Vec<UpstreamConfig>,
    /// Opening a connection (`5s`, `500ms`).
    #[serde(with = "svc_core::config::duration")]
    pub connect_timeout: Duration,
    /// From the request to the first byte of the reply.
    #[serde(with = "svc_core::config::duration")]
    pub first_byte_timeout: Duration,
    /// Between two chunks of a reply.
    #[serde(with = "svc_core::config::duration")]
    pub idle_timeout: Duration,
    /// A whole (non-streamed) reply, to its last byte.
    #[serde(with = "svc_core::config::duration")]
    pub whole_timeout: Duration,
    /// Between two health checks (`GET <base_url>/models`).
    #[serde(with = "svc_core::config::duration")]
    pub health_interval: Duration,
    /// Prefix affinity: prompt prefixes whose endpoint is remembered, so
    /// a conversation's next turn goes where its prefix is cached (0: off,
    /// every request goes by least outstanding).
    pub affinity_entries: usize,
    /// The shortest prefix, in bytes of text, that affinity follows.
    pub affinity_min_bytes: usize,
    /// Requests in flight beyond the least-loaded endpoint's that the
    /// remembered endpoint may have before a request goes elsewhere.
    pub affinity_slack: usize,
    /// The endpoints with their keys read from the environment at start.
    #[serde(skip)]
    pub endpoints: Vec<EndpointConfig>,
}

impl Default for UpstreamModelConfig {
    fn default() -> Self {
        let options = UpstreamOptions::default();
        UpstreamModelConfig {
            upstreams: Vec::new(),
            connect_timeout: options.connect_timeout,
            first_byte_timeout: options.first_byte_timeout,
            idle_timeout: options.idle_timeout,
            whole_timeout: options.whole_timeout,
            health_interval: options.health_interval,
            affinity_entries: options.affinity_entries,
            affinity_min_bytes: options.affinity_min_bytes,
            affinity_slack: options.affinity_slack,
            endpoints: Vec::new(),
        }
    }
}

impl UpstreamModelConfig {
    /// The upstream engine's options: these timeouts, its defaults for the rest.
    pub fn options(&self) -> UpstreamOptions {
        UpstreamOptions {
            connect_timeout: self.connect_timeout,
            first_byte_timeout: self.first_byte_timeout,
            idle_timeout: self.idle_timeout,
            whole_timeout: self.whole_timeout,
            health_interval: self.health_interval,
            affinity_entries: self.affinity_entries,
            affinity_min_bytes: self.affinity_min_bytes,
            affinity_slack: self.affinity_slack,
            ..UpstreamOptions::default()
        }
    }
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
        let mut table = table.clone();
        let reasoning = match table.remove("reasoning") {
            None => false,
            Some(toml::Value::Boolean(reasoning)) => reasoning,
            Some(_) => bail!("models.{id}.reasoning must be true or false"),
        };
        let prefix = format!("models.{id}.");
        let read = |table: toml::Table| -> Vec<Given> {
            table
                .into_iter()
                .map(|(key, value)| Given {
                    key,
                    value: Raw::Toml(value),
                    source: source.clone(),
                })
                .collect()
        };
        let source = match (table.contains_key("path"), table.contains_key("upstreams")) {
            (true, true) | (false, false) => {
                bail!("models.{id}: give exactly one of `path` (a GGUF file) or `upstreams`")
            }
            (true, false) => {
                let upstream_only = fields_of::<UpstreamModelConfig>();
                if let Some(key) = upstream_only.iter().find(|k| table.contains_key(**k)) {
                    bail!("models.{id}.{key} applies only to a model with `upstreams`");
                }
                let given = read(table);
                ModelSource::File(FileModelConfig::deserialize(Entries::new(
                    &prefix,
                    given.iter().collect(),
                ))?)
            }
            (false, true) => {
                if table.contains_key("context") || table.contains_key("parallel") {
                    bail!("models.{id}: context and parallel apply only to a model with `path`");
                }
                let given = read(table);
                let mut upstream = UpstreamModelConfig::deserialize(Entries::new(
                    &prefix,
                    given.iter().collect(),
                ))?;
                if upstream.upstreams.is_empty() {
                    bail!("models.{id}.upstreams must list at least one endpoint");
                }
                upstream.endpoints = upstream
                    .upstreams
                    .iter()
                    .enumerate()
                    .map(|(i, u)| u.endpoint(&format!("models.{id}.upstreams[{i}]")))
                    .collect::<anyhow::Result<_>>()?;
                ModelSource::Upstream(upstream)
            }
        };
        Ok(ModelConfig { reasoning, source })
    }

    /// The table as `--print-config` shows it: every key, defaults included.
    pub fn to_toml(&self) -> Result<toml::Table, toml::ser::Error> {
        let value = match &self.source {
            ModelSource::File(file) => toml::Value::try_from(file)?,
            ModelSource::Upstream(upstream) => toml::Value::try_from(upstream)?,
        };
        let mut table = toml::Table::new();
        table.insert("reasoning".into(), self.reasoning.into());
        if let toml::Value::Table(keys) = value {
            table.extend(keys);
        }
        Ok(table)
    }
}
