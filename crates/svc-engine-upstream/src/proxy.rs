//! Upstream connections through an HTTP proxy, as the environment says:
//! `http_proxy`/`HTTP_PROXY` for `http://` endpoints,
//! `https_proxy`/`HTTPS_PROXY` for `https://` ones (tunnelled with
//! `CONNECT`), `all_proxy`/`ALL_PROXY` for either, and
//! `no_proxy`/`NO_PROXY` for the hosts that are reached directly: the
//! conventions curl and reqwest follow. Only `http://` proxies are spoken
//! to; credentials in the proxy URL go as `Proxy-Authorization: Basic`.

use std::net::IpAddr;

use base64::Engine as _;
use hyper::Uri;
use hyper::header::HeaderValue;
use percent_encoding::percent_decode_str;

use crate::config::ConfigError;

/// The proxies of the environment, read once.
#[derive(Debug, Clone, Default)]
pub struct Proxies {
    http: Option<Proxy>,
    https: Option<Proxy>,
    direct: Vec<Rule>,
}

/// One HTTP proxy.
#[derive(Clone)]
pub struct Proxy {
    pub host: String,
    pub port: u16,
    /// `Basic …`, marked sensitive so it is never logged.
    pub authorization: Option<HeaderValue>,
    /// The proxy's URL without credentials, for logs and errors.
    pub shown: String,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Proxies {
    /// From this process's environment.
    pub fn from_env() -> Result<Proxies, ConfigError> {
        Proxies::from_vars(|name| std::env::var(name).ok())
    }

    /// From the variables `get` returns; the lowercase name wins, as in
    /// curl.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Proxies, ConfigError> {
        let var = |names: [&str; 2]| {
            names
                .into_iter()
                .find_map(|name| get(name).filter(|v| !v.trim().is_empty()))
        };
        let all = var(["all_proxy", "ALL_PROXY"]);
        let http = var(["http_proxy", "HTTP_PROXY"]).or_else(|| all.clone());
        let https = var(["https_proxy", "HTTPS_PROXY"]).or(all);
        let direct = var(["no_proxy", "NO_PROXY"])
            .map(|list| list.split(',').filter_map(Rule::parse).collect())
            .unwrap_or_default();
        Ok(Proxies {
            http: http.as_deref().map(Proxy::parse).transpose()?,
            https: https.as_deref().map(Proxy::parse).transpose()?,
            direct,
        })
    }

    /// The proxy for a connection to `host` (as in a URL: an IPv6 literal
    /// in brackets or not), if any.
    pub fn for_host(&self, https: bool, host: &str) -> Option<Proxy> {
        let proxy = if https { &self.https } else { &self.http };
        let proxy = proxy.as_ref()?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if self.direct.iter().any(|rule| rule.matches(&host)) {
            return None;
        }
        Some(proxy.clone())
    }
}

impl Proxy {
    fn parse(value: &str) -> Result<Proxy, ConfigError> {
        let value = value.trim();
        // `host:port` alone means an HTTP proxy, as in curl.
        let with_scheme = if value.contains("://") {
            value.to_owned()
        } else {
            format!("http://{value}")
        };
        // Credentials are taken out before anything is shown or parsed.
        let (scheme, rest) = with_scheme.split_once("://").unwrap_or(("", ""));
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((userinfo, host_port)) => (Some(userinfo), host_port),
            None => (None, authority),
        };
        let clean = format!("{scheme}://{host_port}{path}");
        let bad = || ConfigError::Proxy(clean.clone());
        let uri: Uri = clean.parse().map_err(|_| bad())?;
        if uri.scheme_str() != Some("http") {
            return Err(bad());
        }
        let authority = uri.authority().ok_or_else(bad)?;
        let host = authority.host();
        if host.is_empty() {
            return Err(bad());
        }
        let authorization = match userinfo {
            None => None,
            Some(userinfo) => {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
                let token = base64::engine::general_purpose::STANDARD.encode(format!(
                    "{}:{}",
                    decode(user),
                    decode(password)
                ));
                let mut value =
                    HeaderValue::from_str(&format!("Basic {token}")).map_err(|_| bad())?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        Ok(Proxy {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: authority.port_u16().unwrap_or(80),
            authorization,
            shown: format!("http://{authority}"),
        })
    }
}

/// One `no_proxy` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rule {
    /// `*`: every host.
    All,
    /// A name and every name under it (`example.com`, `.example.com`).
    Domain(String),
    /// An address, or a network in CIDR notation.
    Net(IpAddr, u8),
}

impl Rule {
    fn parse(entry: &str) -> Option<Rule> {
        let entry = entry.trim();
        if entry.is_empty() {
            return None;
        }
        if entry == "*" {
            return Some(Rule::All);
        }
        let (address, bits) = match entry.split_once('/') {
            Some((address, bits)) => (address, bits.parse::<u8>().ok()),
            None => (entry, None),
        };
        let address = address.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = address.parse::<IpAddr>() {
            let full = if ip.is_ipv4() { 32 } else { 128 };
            return Some(Rule::Net(ip, bits.unwrap_or(full).min(full)));
        }
        let name = entry
            .trim_start_matches("*.")
            .trim_start_matches('.')
            .trim_end_matches('.')
            .to_ascii_lowercase();
        (!name.is_empty()).then_some(Rule::Domain(name))
    }

    /// `host`: lowercase, without brackets or a final dot.
    fn matches(&self, host: &str) -> bool {
        match self {
            Rule::All => true,
            Rule::Domain(name) => {
                host == name
                    || host
                        .strip_suffix(name.as_str())
                        .is_some_and(|head| head.ends_with('.'))
            }
            Rule::Net(net, bits) => match (host.parse::<IpAddr>(), net) {
                (Ok(IpAddr::V4(ip)), IpAddr::V4(net)) => prefix(
                    u128::from(u32::from(ip)),
                    u128::from(u32::from(*net)),
                    *bits,
                    32,
                ),
                (Ok(IpAddr::V6(ip)), IpAddr::V6(net)) => {
                    prefix(u128::from(ip), u128::from(*net), *bits, 128)
                }
                _ => false,
            },
        }
    }
}

/// Whether `a` and `b` (numbers of `width` bits) share their first `bits`.
fn prefix(a: u128, b: u128, bits: u8, width: u32) -> bool {
    let shift = width - u32::from(bits);
    shift >= width || (a >> shift) == (b >> shift)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn proxies(vars: &[(&str, &str)]) -> Result<Proxies, ConfigError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Proxies::from_vars(|name| vars.get(name).cloned())
    }

    fn shown(p: Option<Proxy>) -> Option<String> {
        p.map(|p| p.shown)
    }

    #[test]
    fn each_scheme_has_its_variable_and_all_proxy_covers_the_rest() {
        let p = proxies(&[
            ("HTTP_PROXY", "http://upper:3128"),
            ("http_proxy", "http://lower:3128"),
            ("ALL_PROXY", "proxy.internal:8080"),
        ])
        .unwrap();
        assert_eq!(
            shown(p.for_host(false, "api.example.com")).as_deref(),
            Some("http://lower:3128")
        );
        assert_eq!(
            shown(p.for_host(true, "api.example.com")).as_deref(),
            Some("http://proxy.internal:8080")
        );
        let none = proxies(&[("NO_PROXY", "*")]).unwrap();
        assert!(none.for_host(true, "x").is_none());
    }

    #[test]
    fn no_proxy_names_addresses_and_networks() {
        let p = proxies(&[
            ("https_proxy", "http://proxy:3128"),
            (
                "no_proxy",
                "localhost, .internal,example.com., 10.0.0.0/8, ::1, 192.168.1.7",
            ),
        ])
        .unwrap();
        for direct in [
            "localhost",
            "LOCALHOST",
            "gpu1.internal",
            "internal",
            "example.com",
            "api.example.com",
            "10.1.2.3",
            "[::1]",
            "192.168.1.7",
        ] {
            assert!(p.for_host(true, direct).is_none(), "{direct}");
        }
        for proxied in [
            "notexample.com",
            "example.com.evil",
            "11.0.0.1",
            "192.168.1.8",
            "[::2]",
            "api.openai.com",
        ] {
            assert!(p.for_host(true, proxied).is_some(), "{proxied}");
        }
    }

    #[test]
    fn credentials_become_a_sensitive_basic_header_and_are_never_shown() {
        let p = proxies(&[("HTTPS_PROXY", "http://user:p%40ss@proxy:3128/")]).unwrap();
        let proxy = p.for_host(true, "api.openai.com").unwrap();
        assert_eq!((proxy.host.as_str(), proxy.port), ("proxy", 3128));
        let auth = proxy.authorization.clone().unwrap();
        // "user:p@ss"
        assert_eq!(auth, "Basic dXNlcjpwQHNz");
        assert!(auth.is_sensitive());
        assert_eq!(proxy.shown, "http://proxy:3128");
        assert!(!format!("{p:?}").contains("p%40ss"));
        assert_eq!(
            proxies(&[("HTTP_PROXY", "http://[::1]")])
                .unwrap()
                .for_host(false, "x")
                .map(|p| (p.host, p.port)),
            Some(("::1".to_owned(), 80))
        );
    }

    #[test]
    fn other_kinds_of_proxy_are_refused() {
        for bad in ["socks5://proxy:1080", "https://proxy:443", "http://"] {
            assert!(
                matches!(proxies(&[("ALL_PROXY", bad)]), Err(ConfigError::Proxy(_))),
                "{bad}"
            );
        }
        // The error shows no credentials.
        let Err(ConfigError::Proxy(shown)) = proxies(&[("ALL_PROXY", "socks5://u:secret@p:1")])
        else {
            panic!("accepted");
        };
        assert!(!shown.contains("secret"), "{shown}");
    }
}
