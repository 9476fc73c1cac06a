//! The SSRF guard for ad-hoc server URLs (those a request names, not the
//! operator): the URL must match one of the operator's `allow_urls`
//! patterns, and its host may not be, or resolve to, a loopback, private,
//! link-local, shared-NAT, unspecified or cloud-metadata address unless a
//! pattern names that host literally (no `*` in its host).
//!
//! The check is made where the connection is made, not only beforehand: the
//! client's DNS resolver ([`GuardedResolver`]) drops refused addresses from
//! every answer, so a name cannot resolve to a public address when checked
//! and a private one when connected; the redirect policy checks each
//! redirect's target as it checks the first URL; and a guarded client uses
//! no proxy, whose own resolution would bypass the resolver. An IP literal
//! never reaches a resolver, so the URL check covers it, first and on every
//! redirect. Registered servers (configured by the operator) do not use the
//! guard.

use std::collections::HashSet;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use svc_core::project::glob_matches;
use url::{Host, Url};

use crate::error::{AddressKind, Error, Refusal};

/// The most redirects a client follows before refusing.
pub const MAX_REDIRECTS: usize = 5;

/// A host name lookup, replaceable so tests can make a name resolve anywhere.
pub trait Lookup: Send + Sync {
    /// The addresses of `host`.
    fn lookup(&self, host: &str) -> LookupFuture;
}

/// What [`Lookup::lookup`] returns.
pub type LookupFuture = Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>>;

/// The system's resolver, through tokio.
struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: &str) -> LookupFuture {
        let host = host.to_owned();
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// The operator's `allow_urls` patterns and what follows from them.
#[derive(Clone)]
pub struct Guard {
    inner: Arc<Inner>,
}

struct Inner {
    patterns: Vec<Pattern>,
    /// Hosts a pattern names literally: their addresses are not checked.
    explicit: HashSet<String>,
    lookup: Arc<dyn Lookup>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("patterns", &self.inner.patterns.len())
            .finish_non_exhaustive()
    }
}

impl Guard {
    /// A guard allowing the URLs that match one of `patterns`.
    ///
    /// A pattern is `scheme://host[:port][/path]`. `*` in the host matches
    /// any run of host characters (`https://*.example.com`); a port of `*`
    /// matches any port, and no port means the scheme's default; `*` in the
    /// path matches anything, and no path means any path.
    pub fn new<I, S>(patterns: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let patterns = patterns
            .into_iter()
            .map(|p| Pattern::parse(p.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        let explicit = patterns
            .iter()
            .filter(|p| !p.host.contains('*'))
            .map(|p| p.host.clone())
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                patterns,
                explicit,
                lookup: Arc::new(SystemLookup),
            }),
        })
    }

    /// The same guard resolving names through `lookup` instead of the system.
    #[must_use]
    pub fn with_lookup(self, lookup: Arc<dyn Lookup>) -> Self {
        let inner = &self.inner;
        Self {
            inner: Arc::new(Inner {
                patterns: inner.patterns.clone(),
                explicit: inner.explicit.clone(),
                lookup,
            }),
        }
    }

    /// Checks `url` without resolving it: scheme, patterns, and the address
    /// when the host is an IP literal. Cheap; for refusing a request before
    /// anything else happens.
    pub fn check_url(&self, url: &Url) -> Result<(), Refusal> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refusal::Scheme);
        }
        let Some(host) = url.host_str() else {
            return Err(Refusal::Scheme);
        };
        if !self.inner.patterns.iter().any(|p| p.matches(url)) {
            return Err(Refusal::NotAllowed);
        }
        let ip = match url.host() {
            Some(Host::Ipv4(ip)) => IpAddr::V4(ip),
            Some(Host::Ipv6(ip)) => IpAddr::V6(ip),
            _ => return Ok(()),
        };
        self.check_addr(host, ip)
    }

    /// Checks `url` and every address its host resolves to now. The client
    /// checks again at connection time; this is for refusing early.
    pub async fn check(&self, url: &Url) -> Result<(), Refusal> {
        self.check_url(url)?;
        if let Some(Host::Domain(host)) = url.host() {
            self.resolve(host).await?;
        }
        Ok(())
    }

    /// Refuses `ip` for `host` when it is of a refused kind and `host` is
    /// not named literally by a pattern.
    fn check_addr(&self, host: &str, ip: IpAddr) -> Result<(), Refusal> {
        match classify(ip) {
            Some(kind) if !self.inner.explicit.contains(&host.to_ascii_lowercase()) => {
                Err(Refusal::Address { addr: ip, kind })
            }
            _ => Ok(()),
        }
    }

    /// The addresses of `host` that may be connected to; a refusal when none.
    async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, Refusal> {
        let found = self
            .inner
            .lookup
            .lookup(host)
            .await
            .map_err(|_| Refusal::Unresolved)?;
        let mut refused = None;
        let allowed: Vec<IpAddr> = found
            .into_iter()
            .filter(|ip| match self.check_addr(host, *ip) {
                Ok(()) => true,
                Err(refusal) => {
                    refused.get_or_insert(refusal);
                    false
                }
            })
            .collect();
        match (allowed.is_empty(), refused) {
            (false, _) => Ok(allowed),
            (true, Some(refusal)) => Err(refusal),
            (true, None) => Err(Refusal::Unresolved),
        }
    }

    /// The DNS resolver a guarded client connects through.
    pub(crate) fn resolver(&self) -> Arc<GuardedResolver> {
        Arc::new(GuardedResolver {
            guard: self.clone(),
        })
    }

    /// The redirect policy of a guarded client: each target checked as the
    /// first URL was, at most [`MAX_REDIRECTS`] of them.
    pub(crate) fn redirect_policy(&self) -> reqwest::redirect::Policy {
        let guard = self.clone();
        reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > MAX_REDIRECTS {
                return attempt.error(Refusal::TooManyRedirects);
            }
            match guard.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(refusal) => attempt.error(refusal),
            }
        })
    }
}

/// A `reqwest` resolver that hands the connector only the addresses the
/// guard allows, so the address connected to is the address checked.
pub struct GuardedResolver {
    guard: Guard,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.guard.clone();
        Box::pin(async move {
            let allowed = guard.resolve(name.as_str()).await?;
            let addrs: reqwest::dns::Addrs =
                Box::new(allowed.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

/// One `allow_urls` pattern, in parts so that a `*` in the host cannot
/// match across the host's end (`https://*.example.com` must not match
/// `https://evil.test/.example.com`).
#[derive(Clone, Debug)]
struct Pattern {
    scheme: String,
    host: String,
    /// `None`: any port; otherwise the one port (the scheme's default when
    /// the pattern names none).
    port: Option<u16>,
    /// The glob over the path and query; `None`: any.
    path: Option<String>,
}

impl Pattern {
    fn parse(text: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::Config(format!("MCP URL pattern {text:?}: {why}"));
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| bad("it needs a scheme, as in https://host/*"))?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return Err(bad("the scheme must be http or https")),
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], Some(rest[at..].to_owned())),
            None => (rest, None),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (inside, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 host needs its closing bracket"))?;
            (format!("[{inside}]"), after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host.to_owned(), Some(port)),
                None => (authority.to_owned(), None),
            }
        };
        if host.is_empty() || host.contains('@') {
            return Err(bad("it needs a host, and no user name"));
        }
        let port = match port {
            None => Some(default_port),
            Some("*") => None,
            Some(port) => Some(port.parse().map_err(|_| bad("the port is not a number"))?),
        };
        // The host as `Url` writes it, so that `127.000.0.1` or `LOCALHOST`
        // in a pattern names the host the URL will show.
        let host = if host.contains('*') {
            host.to_ascii_lowercase()
        } else {
            Url::parse(&format!("{scheme}://{host}/"))
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .ok_or_else(|| bad("the host is not valid"))?
        };
        Ok(Self {
            scheme,
            host,
            port,
            path,
        })
    }

    fn matches(&self, url: &Url) -> bool {
        let Some(host) = url.host_str() else {
            return false;
        };
        if url.scheme() != self.scheme || !glob_matches(&self.host, host) {
            return false;
        }
        if self.port.is_some() && url.port_or_known_default() != self.port {
            return false;
        }
        match &self.path {
            None => true,
            Some(path) => {
                let mut target = url.path().to_owned();
                if let Some(query) = url.query() {
                    target.push('?');
                    target.push_str(query);
                }
                glob_matches(path, &target)
            }
        }
    }
}

/// The kind of `ip` when it is one the guard refuses unless listed.
pub fn classify(ip: IpAddr) -> Option<AddressKind> {
    match ip {
        IpAddr::V4(ip) => classify_v4(ip),
        IpAddr::V6(ip) => classify_v6(ip),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<AddressKind> {
    let [a, b, ..] = ip.octets();
    if ip == Ipv4Addr::new(169, 254, 169, 254) {
        Some(AddressKind::Metadata)
    } else if ip.is_loopback() {
        Some(AddressKind::Loopback)
    } else if ip.is_private() {
        Some(AddressKind::Private)
    } else if ip.is_link_local() {
        Some(AddressKind::LinkLocal)
    } else if a == 100 && (64..128).contains(&b) {
        Some(AddressKind::SharedNat)
    } else if a == 0 {
        Some(AddressKind::Unspecified)
    } else if ip.is_multicast() || ip.is_broadcast() {
        Some(AddressKind::Multicast)
    } else {
        None
    }
}

fn classify_v6(ip: Ipv6Addr) -> Option<AddressKind> {
    let segments = ip.segments();
    // An IPv4 address written as IPv6 (mapped ::ffff:a.b.c.d, the old
    // compatible ::a.b.c.d, or NAT64's 64:ff9b::a.b.c.d) reaches that IPv4
    // address, so it is judged as one.
    let embedded = |s: &[u16; 8]| Ipv4Addr::from(((u32::from(s[6])) << 16) | u32::from(s[7]));
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return classify_v4(embedded(&segments));
    }
    if segments[..6] == [0; 6] && !ip.is_loopback() && !ip.is_unspecified() {
        return classify_v4(embedded(&segments));
    }
    if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        Some(AddressKind::Metadata)
    } else if ip.is_loopback() {
        Some(AddressKind::Loopback)
    } else if ip.is_unspecified() {
        Some(AddressKind::Unspecified)
    } else if segments[0] & 0xfe00 == 0xfc00 {
        Some(AddressKind::Private)
    } else if segments[0] & 0xffc0 == 0xfe80 {
        Some(AddressKind::LinkLocal)
    } else if ip.is_multicast() {
        Some(AddressKind::Multicast)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(ip: &str) -> Option<AddressKind> {
        classify(ip.parse().unwrap())
    }

    #[test]
    fn refused_kinds_of_address_are_told_apart_from_public_ones() {
        assert_eq!(kind("127.0.0.1"), Some(AddressKind::Loopback));
        assert_eq!(kind("10.1.2.3"), Some(AddressKind::Private));
        assert_eq!(kind("172.31.0.1"), Some(AddressKind::Private));
        assert_eq!(kind("192.168.1.1"), Some(AddressKind::Private));
        assert_eq!(kind("169.254.1.1"), Some(AddressKind::LinkLocal));
        assert_eq!(kind("169.254.169.254"), Some(AddressKind::Metadata));
        assert_eq!(kind("100.64.0.1"), Some(AddressKind::SharedNat));
        assert_eq!(kind("0.0.0.0"), Some(AddressKind::Unspecified));
        assert_eq!(kind("::1"), Some(AddressKind::Loopback));
        assert_eq!(kind("::"), Some(AddressKind::Unspecified));
        assert_eq!(kind("fd12::1"), Some(AddressKind::Private));
        assert_eq!(kind("fe80::1"), Some(AddressKind::LinkLocal));
        assert_eq!(kind("fd00:ec2::254"), Some(AddressKind::Metadata));
        assert_eq!(kind("::ffff:127.0.0.1"), Some(AddressKind::Loopback));
        assert_eq!(kind("64:ff9b::a9fe:a9fe"), Some(AddressKind::Metadata));
        assert_eq!(kind("::10.0.0.1"), Some(AddressKind::Private));
        assert_eq!(kind("100.128.0.1"), None);
        assert_eq!(kind("172.32.0.1"), None);
        assert_eq!(kind("93.184.216.34"), None);
        assert_eq!(kind("2606:4700::1111"), None);
    }

    #[test]
    fn a_wildcard_host_cannot_match_past_the_host() {
        let guard = Guard::new(["https://*.example.com/*"]).unwrap();
        let ok = |u: &str| guard.check_url(&Url::parse(u).unwrap());
        assert_eq!(ok("https://mcp.example.com/mcp"), Ok(()));
        assert_eq!(
            ok("https://evil.test/.example.com/"),
            Err(Refusal::NotAllowed)
        );
        assert_eq!(
            ok("https://evil.test/?x=.example.com/"),
            Err(Refusal::NotAllowed)
        );
        assert_eq!(
            ok("https://mcp.example.com.evil.test/"),
            Err(Refusal::NotAllowed)
        );
        assert_eq!(
            ok("https://mcp.example.com:8443/"),
            Err(Refusal::NotAllowed)
        );
        assert_eq!(ok("http://mcp.example.com/"), Err(Refusal::NotAllowed));
        assert_eq!(ok("ftp://mcp.example.com/"), Err(Refusal::Scheme));
    }

    #[test]
    fn paths_and_ports_in_a_pattern_bound_what_it_allows() {
        let guard = Guard::new(["https://mcp.example.com/tools/*", "http://10.0.0.5:*"]).unwrap();
        let ok = |u: &str| guard.check_url(&Url::parse(u).unwrap());
        assert_eq!(ok("https://MCP.example.com/tools/a?b=c"), Ok(()));
        assert_eq!(
            ok("https://mcp.example.com/admin"),
            Err(Refusal::NotAllowed)
        );
        // Listed literally, the private host is allowed, on any port.
        assert_eq!(ok("http://10.0.0.5:9000/mcp"), Ok(()));
        assert!(Guard::new(["mcp.example.com"]).is_err());
        assert!(Guard::new(["https://user@mcp.example.com/"]).is_err());
    }
}
