//! `svc serve --print-config`: the merged configuration as a TOML file
//! that `--config` would read back, with secrets hidden and, after each
//! value, where it came from.

use std::fmt::Write as _;

use anyhow::Context;
use serde::Serialize;
use svc_server::config::RateLimitConfig;

use super::{Layers, ServeConfig, Source, sections};

/// The text `--print-config` prints for `config`, read from `layers`
/// (`file_source` for the `[models.*]` tables); `unset` says what an unset
/// key means.
pub fn render(
    config: &ServeConfig,
    layers: &Layers,
    file_source: &Source,
    unset: impl Fn(&str) -> Option<&'static str>,
) -> anyhow::Result<String> {
    let rate_limits = RateLimitConfig {
        rate_limit_rpm: limit(config.server.rate_limits.requests_per_minute),
        rate_limit_tpm: limit(config.server.rate_limits.tokens_per_minute),
    };
    let tables = [
        table(&config.store)?,
        table(&config.server)?,
        table(&config.server.sso)?,
        table(&config.server.device)?,
        table(&rate_limits)?,
        table(&config.engine)?,
    ];
    let mut out = String::from(
        "# The configuration `svc serve` runs with; secrets are hidden. After each\n\
         # value, where it came from: default, file PATH, env VARIABLE or flag --FLAG.\n",
    );
    for ((name, keys), values) in sections().iter().zip(&tables) {
        let _ = write!(out, "\n# {name}\n");
        for key in *keys {
            let line = match values.get(*key) {
                Some(value) => format!("{key} = {value}"),
                None => match unset(key) {
                    Some(meaning) => format!("# {key} is not set: {meaning}"),
                    None => format!("# {key} is not set"),
                },
            };
            let _ = writeln!(out, "{line:<44} # {}", layers.source(key));
        }
    }
    for (id, price) in &config.server.prices {
        let _ = write!(out, "\n{:<44} # {file_source}\n", format!("[prices.{id}]"));
        let _ = writeln!(out, "input = {}\noutput = {}", price.input, price.output);
    }
    for (id, model) in &config.models {
        let _ = write!(out, "\n{:<44} # {file_source}\n", format!("[models.{id}]"));
        let keys = model
            .to_toml()
            .with_context(|| format!("cannot show models.{id}"))?;
        for (key, value) in keys {
            let _ = writeln!(out, "{key} = {value}");
        }
    }
    Ok(out)
}

/// A section's values by key; unset optional values are absent.
fn table<T: Serialize>(section: &T) -> anyhow::Result<toml::Table> {
    match toml::Value::try_from(section).context("cannot show the configuration")? {
        toml::Value::Table(table) => Ok(table),
        _ => anyhow::bail!("a configuration section is not a table"),
    }
}

fn limit(per_minute: Option<i64>) -> u32 {
    per_minute.map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// The default of flat key `key` as `--help` shows it; `None` where the
/// default is "not set" (or the key is unknown).
pub fn default_text(key: &str) -> Option<String> {
    let server = svc_server::ServerConfig::default();
    let tables = [
        table(&super::StoreConfig::default()),
        table(&server),
        table(&server.sso),
        table(&server.device),
        table(&RateLimitConfig::default()),
        table(&super::EngineConfig::default()),
    ];
    let value = tables
        .into_iter()
        .flatten()
        .find_map(|table| table.get(key).cloned())?;
    match value {
        toml::Value::String(text) => Some(text),
        toml::Value::Array(items) if items.is_empty() => None,
        value => Some(value.to_string()),
    }
}
