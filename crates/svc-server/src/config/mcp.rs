//! `[mcp]`: the MCP servers svc calls tools on for its clients. Registered
//! servers are `[mcp.servers.<label>]` tables; `mcp.allow_urls` lists the
//! ad-hoc `server_url`s a request may name. A header's value is written
//! out or read from the environment at start (`{ env = "GITHUB_TOKEN" }`),
//! and is never shown again: the serialized form hides it.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Secret, SecretUrl};

/// What separates a registered server's label from its tool's name in the
/// names svc's own `/mcp` lists (`github__search_issues`); a label may not
/// hold it.
pub const SEPARATOR: &str = "__";

/// `[mcp]`: the registered servers and the ad-hoc URLs allowed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpConfig {
    /// `[mcp.servers.<label>]`, by label.
    pub servers: BTreeMap<String, McpServer>,
    /// `mcp.allow_urls`: the patterns an ad-hoc `server_url` must match
    /// (`https://mcp.example.com/*`).
    pub allow_urls: Vec<String>,
    /// `mcp.max_calls_per_project_per_day`: the most MCP tool calls the
    /// keys of one project make in a UTC day, all dialects and `/mcp`
    /// together; no cap when absent.
    pub max_calls_per_project_per_day: Option<u64>,
}

/// One registered server.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// Its Streamable HTTP endpoint (a password in it is shown hidden).
    pub url: SecretUrl,
    /// Headers sent with every request to it (`authorization`, ...).
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValue>,
    /// The only tools of it that are offered; all when absent.
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
    /// What it is for, shown to people (the dashboard, the admin API).
    #[serde(default)]
    pub description: Option<String>,
}

/// A header's value, read once at start: written out in the file, or
/// `{ env = "NAME" }`, the environment variable's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderValue(pub Secret);

impl<'de> Deserialize<'de> for HeaderValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Text(String),
            Env { env: String },
        }
        let text = match Given::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "a header's value is a string or { env = \"NAME\" }, an environment variable's name",
            )
        })? {
            Given::Text(text) => text,
            Given::Env { env } => std::env::var(&env).map_err(|_| {
                // The variable's name, never a value.
                serde::de::Error::custom(format!("the environment variable {env} is not set"))
            })?,
        };
        if text.trim().is_empty() {
            return Err(serde::de::Error::custom(
                "a header's value must not be empty",
            ));
        }
        Ok(HeaderValue(Secret::new(text.trim())))
    }
}

/// The file's `[mcp]` table, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    #[serde(default)]
    servers: BTreeMap<String, McpServer>,
    #[serde(default)]
    allow_urls: Vec<String>,
    #[serde(default)]
    max_calls_per_project_per_day: Option<u64>,
}

impl TryFrom<BTreeMap<String, serde_json::Value>> for McpConfig {
    type Error = String;

    fn try_from(table: BTreeMap<String, serde_json::Value>) -> Result<Self, String> {
        let object = serde_json::Value::Object(table.into_iter().collect());
        let written: Written = serde_json::from_value(object).map_err(|e| format!("mcp: {e}"))?;
        for label in written.servers.keys() {
            let fits = !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                && !label.contains(SEPARATOR);
            if !fits {
                return Err(format!(
                    "mcp.servers.{label}: a label is letters, digits, `-` and `_`, without `{SEPARATOR}`"
                ));
            }
        }
        for (label, server) in &written.servers {
            if !matches!(server.url.scheme(), "http" | "https") {
                return Err(format!(
                    "mcp.servers.{label}.url: an MCP server is reached over http or https"
                ));
            }
        }
        if written.max_calls_per_project_per_day == Some(0) {
            return Err(
                "mcp.max_calls_per_project_per_day: at least 1 (leave it out for no cap)".into(),
            );
        }
        Ok(McpConfig {
            servers: written.servers,
            allow_urls: written.allow_urls,
            max_calls_per_project_per_day: written.max_calls_per_project_per_day,
        })
    }
}

/// Read from the file's table of tables, as `[prices.<id>]` is.
impl<'de> Deserialize<'de> for McpConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let table = BTreeMap::<String, serde_json::Value>::deserialize(d)?;
        McpConfig::try_from(table).map_err(serde::de::Error::custom)
    }
}

/// For showing: each server's URL without its password, its headers'
/// names only.
impl Serialize for McpConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let servers: BTreeMap<&str, serde_json::Value> = self
            .servers
            .iter()
            .map(|(label, server)| {
                let headers: BTreeMap<&str, &str> = server
                    .headers
                    .keys()
                    .map(|name| (name.as_str(), "<hidden>"))
                    .collect();
                let mut shown =
                    serde_json::json!({"url": server.url.redacted(), "headers": headers});
                if let Some(tools) = &server.allowed_tools {
                    shown["allowed_tools"] = serde_json::json!(tools);
                }
                if let Some(description) = &server.description {
                    shown["description"] = serde_json::json!(description);
                }
                (label.as_str(), shown)
            })
            .collect();
        // Only what is set: an unset `[mcp]` is not shown at all.
        let mut shown = serde_json::Map::new();
        if !self.allow_urls.is_empty() {
            shown.insert("allow_urls".into(), serde_json::json!(self.allow_urls));
        }
        if let Some(cap) = self.max_calls_per_project_per_day {
            shown.insert(
                "max_calls_per_project_per_day".into(),
                serde_json::json!(cap),
            );
        }
        if !servers.is_empty() {
            shown.insert("servers".into(), serde_json::json!(servers));
        }
        shown.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: serde_json::Value) -> Result<McpConfig, String> {
        serde_json::from_value(json).map_err(|e| e.to_string())
    }

    #[test]
    fn servers_read_with_their_headers_and_show_none_of_them() {
        let config = read(serde_json::json!({
            "servers": {"docs": {
                "url": "https://mcp.example.com/mcp",
                "headers": {"authorization": "Bearer s3cret"},
                "allowed_tools": ["search"],
                "description": "The docs"
            }},
            "allow_urls": ["https://*.example.org/*"]
        }))
        .unwrap();
        let docs = &config.servers["docs"];
        assert_eq!(docs.headers["authorization"].0.expose(), "Bearer s3cret");
        assert_eq!(
            docs.allowed_tools.as_deref(),
            Some(&["search".to_owned()][..])
        );
        let shown = serde_json::to_string(&config).unwrap();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("authorization"), "{shown}");
    }

    #[test]
    fn a_header_from_an_unset_variable_names_the_variable() {
        let error = read(serde_json::json!({"servers": {"gh": {
            "url": "https://mcp.example.com/",
            "headers": {"authorization": {"env": "SVC_TEST_SURELY_UNSET_VARIABLE"}}
        }}}))
        .unwrap_err();
        assert!(
            error.contains("SVC_TEST_SURELY_UNSET_VARIABLE is not set"),
            "{error}"
        );
    }

    #[test]
    fn a_wrong_label_url_or_key_is_refused_with_its_place() {
        for (json, says) in [
            (
                serde_json::json!({"servers": {"a__b": {"url": "https://x/"}}}),
                "mcp.servers.a__b",
            ),
            (
                serde_json::json!({"servers": {"a": {"url": "file:///x"}}}),
                "mcp.servers.a.url",
            ),
            (
                serde_json::json!({"servers": {"a": {"url": "https://x/", "urll": 1}}}),
                "urll",
            ),
            (serde_json::json!({"allowed_urls": []}), "allowed_urls"),
        ] {
            let error = read(json).unwrap_err();
            assert!(error.contains(says), "{error} should name {says}");
        }
    }
}
