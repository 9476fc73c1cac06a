//! `svc serve --print-config`: the merged configuration as a TOML file
//! that `--config` would read back, with secrets hidden and, after each
//! value, where it came from.

use std::fmt::Write as _;
use std::sync::OnceLock;

use anyhow::Context;

use super::{Layers, ServeConfig, Source, sections, shape};

/// The text `--print-config` prints for `config`, read from `layers`
/// (`file_source` for the `[models.*]` tables); `unset` says what an unset
/// key means.
pub fn render(
    config: &ServeConfig,
    layers: &Layers,
    file_source: &Source,
    unset: impl Fn(&str) -> Option<&'static str>,
) -> anyhow::Result<String> {
    let (values, tables) = flat(config)?;
    let mut out = String::from(
        "# The configuration `svc serve` runs with; secrets are hidden. After each\n\
         # value, where it came from: default, file PATH, env VARIABLE or flag --FLAG.\n",
    );
    for (name, keys) in sections() {
        let _ = write!(out, "\n# {name}\n");
        for key in keys {
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
    for (name, table) in tables {
        // A table's own keys (`mcp.allow_urls`) under its header, then its
        // tables (`[prices.<id>]`, `[mcp.servers]`).
        let (keys, entries): (Vec<_>, Vec<_>) =
            table.into_iter().partition(|(_, entry)| !entry.is_table());
        if !keys.is_empty() {
            let header = format!("[{name}]");
            let _ = write!(out, "\n{header:<44} # {}\n", layers.source(name));
            for (key, value) in keys {
                let _ = writeln!(out, "{key} = {value}");
            }
        }
        for (id, entry) in entries {
            let header = format!("[{name}.{id}]");
            let _ = write!(out, "\n{header:<44} # {}\n", layers.source(name));
            if let toml::Value::Table(entry) = entry {
                for (key, value) in entry {
                    let _ = writeln!(out, "{key} = {value}");
                }
            }
        }
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

/// Every flat key's value (unset optional ones absent), and the tables of
/// tables (`prices`).
type Flat = (toml::Table, Vec<(&'static str, toml::Table)>);

fn flat(config: &ServeConfig) -> anyhow::Result<Flat> {
    let table = toml::Table::try_from(config).context("cannot show the configuration")?;
    Ok(shape().flatten(table))
}

/// The default of flat key `key` as `--help` shows it; `None` where the
/// default is "not set" (or the key is unknown).
pub fn default_text(key: &str) -> Option<String> {
    static DEFAULTS: OnceLock<toml::Table> = OnceLock::new();
    let defaults = DEFAULTS.get_or_init(|| {
        flat(&ServeConfig::default())
            .map(|(keys, _)| keys)
            .unwrap_or_default()
    });
    match defaults.get(key)? {
        toml::Value::String(text) => Some(text.clone()),
        toml::Value::Array(items) if items.is_empty() => None,
        value => Some(value.to_string()),
    }
}
