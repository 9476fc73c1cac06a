//! Which server a client command talks to and which key it sends, in this
//! order: the `--base-url` / `--api-key` flags, then `SVC_BASE_URL` /
//! `SVC_API_KEY`, then the stored login.
//!
//! The stored key is only ever sent to the server it was issued by: with a
//! different base URL it is not used, so a typo'd or hostile address never
//! sees it.

use std::fmt;

use reqwest::Url;
use svc_core::ApiKey;

use super::api::Api;
use super::credentials::{Credentials, CredentialsFile};
use super::failure::Failure;

/// Where `svc serve` listens by default.
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:8080";

/// An `http(s)://host[:port][/prefix]` address of the service, without
/// a trailing `/` or `/v1` (both are accepted and removed).
#[derive(Clone, PartialEq, Eq)]
pub struct BaseUrl(String);

impl BaseUrl {
    /// Checks and normalizes an address given by a person.
    pub fn parse(text: &str) -> Result<Self, Failure> {
        let bad = |why: &str| Failure::Usage(format!("{text:?} is not a base URL: {why}"));
        let url = Url::parse(text.trim()).map_err(|e| bad(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad("use http:// or https://"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(bad("it has no host"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(bad("it has a query or fragment"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad("put the key in SVC_API_KEY, not in the address"));
        }
        let mut text = url.as_str().trim_end_matches('/').to_owned();
        if let Some(stripped) = text.strip_suffix("/v1") {
            text = stripped.to_owned();
        }
        Ok(BaseUrl(text))
    }

    /// The address, as `http://host:port`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The address of `path` (which starts with `/`) on this server.
    pub fn join(&self, path: &str) -> String {
        format!("{}{path}", self.0)
    }
}

impl fmt::Display for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BaseUrl({})", self.0)
    }
}

/// Where a setting came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flag,
    Environment,
    StoredLogin,
    Default,
}

impl Source {
    /// `from --api-key`, `from SVC_API_KEY`, ... for messages.
    pub fn describe(self, flag: &str, variable: &str) -> String {
        match self {
            Source::Flag => format!("from {flag}"),
            Source::Environment => format!("from {variable}"),
            Source::StoredLogin => "from the stored login".into(),
            Source::Default => "the default".into(),
        }
    }
}

/// The server from `--base-url`, else `SVC_BASE_URL`, else the stored
/// login, else [`DEFAULT_BASE_URL`].
pub fn resolve_base_url(
    flag: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
    stored: Option<&Credentials>,
) -> Result<(BaseUrl, Source), Failure> {
    if let Some(url) = flag.filter(|s| !s.trim().is_empty()) {
        return Ok((BaseUrl::parse(url)?, Source::Flag));
    }
    if let Some(url) = env("SVC_BASE_URL").filter(|s| !s.trim().is_empty()) {
        let url = BaseUrl::parse(&url).map_err(|e| Failure::Usage(format!("SVC_BASE_URL: {e}")))?;
        return Ok((url, Source::Environment));
    }
    if let Some(stored) = stored {
        return Ok((stored.base_url.clone(), Source::StoredLogin));
    }
    Ok((BaseUrl::parse(DEFAULT_BASE_URL)?, Source::Default))
}

/// The process environment, for [`Target::resolve`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// What a command resolved: the server, the key (if any) and the stored
/// login it may have come from.
#[derive(Debug, Clone)]
pub struct Target {
    pub base_url: BaseUrl,
    pub base_source: Source,
    pub key: Option<(ApiKey, Source)>,
    /// The stored login, whether or not its key is used.
    pub stored: Option<Credentials>,
}

impl Target {
    /// Resolves flags, then `env` (`SVC_BASE_URL`, `SVC_API_KEY`), then the
    /// stored login. Empty values count as unset.
    pub fn resolve(
        base_flag: Option<&str>,
        key_flag: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
        stored: Option<Credentials>,
    ) -> Result<Target, Failure> {
        let given = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        let (base_url, base_source) = resolve_base_url(base_flag, &env, stored.as_ref())?;
        let parse_key = |text: String, name: &str| {
            ApiKey::parse(text.trim()).map_err(|e| {
                Failure::NotLoggedIn(format!(
                    "{name} does not hold an svc key ({e}); run `svc login` or fix {name}"
                ))
            })
        };
        let key = if let Some(text) = given(key_flag.map(str::to_owned)) {
            Some((parse_key(text, "--api-key")?, Source::Flag))
        } else if let Some(text) = given(env("SVC_API_KEY")) {
            Some((parse_key(text, "SVC_API_KEY")?, Source::Environment))
        } else {
            stored
                .as_ref()
                .filter(|s| s.base_url == base_url)
                .map(|s| (s.api_key.clone(), Source::StoredLogin))
        };
        Ok(Target {
            base_url,
            base_source,
            key,
            stored,
        })
    }

    /// Resolves against this process's environment and the stored login.
    pub fn from_process(base_flag: Option<&str>, key_flag: Option<&str>) -> anyhow::Result<Target> {
        let stored = CredentialsFile::locate()?.load()?;
        Ok(Target::resolve(base_flag, key_flag, process_env, stored)?)
    }

    /// A client for the resolved server that sends the key; fails without one.
    pub fn api(&self) -> Result<Api, Failure> {
        Api::new(self.base_url.clone(), Some(self.require_key()?.clone()))
    }

    /// The key, or why there is none.
    pub fn require_key(&self) -> Result<&ApiKey, Failure> {
        match &self.key {
            Some((key, _)) => Ok(key),
            None => Err(Failure::NotLoggedIn(match &self.stored {
                Some(stored) => format!(
                    "not logged in to {} (the stored login is for {}): run `svc login --base-url {}`, or set SVC_API_KEY",
                    self.base_url, stored.base_url, self.base_url
                ),
                None => format!(
                    "not logged in to {}: run `svc login`, or set SVC_API_KEY",
                    self.base_url
                ),
            })),
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    const KEY_A: &str = "sk-svc-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const KEY_B: &str = "sk-svc-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const KEY_C: &str = "sk-svc-cccccccccccccccccccccccccccccccccccccccc";

    fn stored(url: &str) -> Credentials {
        Credentials::new(BaseUrl::parse(url).unwrap(), ApiKey::parse(KEY_C).unwrap())
    }

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn base_urls_are_normalized() {
        for text in [
            "http://h:8080",
            "http://h:8080/",
            "http://h:8080/v1",
            "http://h:8080/v1/",
            " http://H:8080 ",
        ] {
            assert_eq!(BaseUrl::parse(text).unwrap().as_str(), "http://h:8080");
        }
        assert_eq!(
            BaseUrl::parse("https://x.test/svc/v1").unwrap().as_str(),
            "https://x.test/svc"
        );
        for bad in ["ftp://h", "h:8080", "http://u:p@h", "http://h/?q=1", ""] {
            assert!(BaseUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flags_beat_environment_beats_the_stored_login() {
        let login = Some(stored("http://stored:1"));
        let t = Target::resolve(
            Some("http://flag:1"),
            Some(KEY_A),
            env(&[("SVC_BASE_URL", "http://env:1"), ("SVC_API_KEY", KEY_B)]),
            login.clone(),
        )
        .unwrap();
        assert_eq!(t.base_url.as_str(), "http://flag:1");
        assert_eq!(t.base_source, Source::Flag);
        assert_eq!(t.key.as_ref().unwrap().0.expose(), KEY_A);

        let t = Target::resolve(
            None,
            None,
            env(&[("SVC_BASE_URL", "http://env:1"), ("SVC_API_KEY", KEY_B)]),
            login.clone(),
        )
        .unwrap();
        assert_eq!(
            (t.base_url.as_str(), t.base_source),
            ("http://env:1", Source::Environment)
        );
        assert_eq!(t.key.as_ref().unwrap().1, Source::Environment);

        let t = Target::resolve(None, None, env(&[("SVC_API_KEY", "")]), login).unwrap();
        assert_eq!(t.base_source, Source::StoredLogin);
        assert_eq!(t.key.as_ref().unwrap().0.expose(), KEY_C);

        let t = Target::resolve(None, None, env(&[]), None).unwrap();
        assert_eq!(
            (t.base_url.as_str(), t.base_source),
            (DEFAULT_BASE_URL, Source::Default)
        );
        assert!(t.require_key().is_err());
    }

    #[test]
    fn the_stored_key_goes_only_to_its_own_server() {
        let t = Target::resolve(
            Some("http://elsewhere:1"),
            None,
            env(&[]),
            Some(stored("http://stored:1")),
        )
        .unwrap();
        assert!(t.key.is_none());
        let message = t.require_key().unwrap_err().to_string();
        assert!(
            message.contains("svc login --base-url http://elsewhere:1"),
            "{message}"
        );
        // The same server written differently still matches.
        let t = Target::resolve(
            Some("http://stored:1/v1/"),
            None,
            env(&[]),
            Some(stored("http://stored:1")),
        )
        .unwrap();
        assert!(t.key.is_some());
    }

    #[test]
    fn malformed_keys_are_refused_without_echoing_them() {
        let err = Target::resolve(None, None, env(&[("SVC_API_KEY", "sk-other-secret")]), None)
            .unwrap_err();
        assert_eq!(err.exit_code(), 4);
        assert!(err.to_string().contains("SVC_API_KEY"));
        assert!(!err.to_string().contains("secret"));
    }
}
