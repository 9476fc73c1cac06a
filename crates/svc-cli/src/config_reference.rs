//! The configuration reference of the manual
//! (`docs/src/configuration-reference.md`), generated from what defines
//! the configuration: each section's keys (its serde fields, in
//! [`crate::config::sections`]), each key's flag, variable, help and meaning when
//! unset (`cli::STORE_FLAGS`, `cli::SERVE_FLAGS`) and its default (the
//! section's `Default`). A test keeps the committed page equal to this, so
//! the reference cannot drift from the code.
//!
//! It stands above both the flags (`cli`) and the sections (`config`),
//! which `cli` reads: inside `config/` it made the two one circle.

use std::fmt::Write as _;

use crate::cli::{Flag, FlagKind, SERVE_FLAGS, STORE_FLAGS};

/// The page, as Markdown.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Configuration reference\n\n\
         <!-- Generated from the configuration's types by svc-cli's \
         `config_reference`; `SVC_UPDATE_DOCS=1 cargo test -p svc-cli --test \
         config_reference` writes it again. Do not edit by hand. -->\n\n\
         Every key of `svc serve`, by section. A key is given, from the \
         weakest to the strongest, by its default, the TOML file of \
         `--config` (the key as written here), the environment variable or \
         the flag. `svc serve --print-config` shows the values it would run \
         with and where each came from. The `[models.<id>]`, \
         `[prices.<model>]` and `[mcp]` tables are described in \
         [Configuration](configuration.md).\n",
    );
    for (section, keys) in crate::config::sections() {
        let keys = keys.iter().copied();
        let _ = write!(
            out,
            "\n## {}\n\n| key | flag | environment | default | what |\n|---|---|---|---|---|\n",
            capitalized(section)
        );
        for key in keys {
            let Some(flag) = flag_of(key) else {
                let _ = writeln!(out, "| `{key}` | | | | |");
                continue;
            };
            let value = match flag.kind {
                FlagKind::Switch => String::new(),
                _ => format!(" {}", flag.value_name),
            };
            let _ = writeln!(
                out,
                "| `{key}` | `--{}{value}` | `{}` | {} | {} |",
                flag.long(),
                flag.env(),
                default_of(&flag),
                cell(flag.help),
            );
        }
    }
    out
}

/// `text` in a table cell: `|` escaped, and `<` too, which Markdown would
/// read as HTML.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('<', "&lt;")
}

fn flag_of(key: &str) -> Option<Flag> {
    STORE_FLAGS
        .iter()
        .chain(SERVE_FLAGS)
        .find(|f| f.key == key)
        .copied()
}

/// The default as `--help` says it: what an unset key means, or the
/// section's default value.
fn default_of(flag: &Flag) -> String {
    if flag.kind == FlagKind::Secret {
        return match flag.unset {
            Some(meaning) => cell(meaning),
            None => "none".to_owned(),
        };
    }
    match flag.unset {
        Some(meaning) => cell(meaning),
        None => match crate::config::print::default_text(flag.key) {
            Some(text) => format!("`{text}`"),
            None => "none".to_owned(),
        },
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
