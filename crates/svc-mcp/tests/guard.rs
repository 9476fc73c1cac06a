//! The SSRF guard on ad-hoc server URLs: each refusal is checked against a
//! real server on loopback that must see nothing, so each test fails
//! without its part of the guard (the URL check, the resolver, the
//! redirect policy).

#![expect(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    reason = "test code: a failed check fails the test, and its tasks end with it"
)]

mod common;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use common::{Fake, Speaks};
use serde_json::json;
use svc_mcp::{AddressKind, Client, Error, Guard, Lookup, LookupFuture, Refusal};

/// A fake DNS: each name answers the next of its lists of addresses.
struct FakeDns {
    answers: Mutex<HashMap<String, Vec<Vec<IpAddr>>>>,
    asked: AtomicUsize,
}

impl FakeDns {
    fn new(answers: &[(&str, &[&[&str]])]) -> Arc<Self> {
        let answers = answers
            .iter()
            .map(|(name, lists)| {
                let lists = lists
                    .iter()
                    .map(|l| l.iter().map(|a| a.parse().unwrap()).collect())
                    .collect();
                ((*name).to_owned(), lists)
            })
            .collect();
        Arc::new(Self {
            answers: Mutex::new(answers),
            asked: AtomicUsize::new(0),
        })
    }
}

impl Lookup for FakeDns {
    fn lookup(&self, host: &str) -> LookupFuture {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let mut answers = self.answers.lock().unwrap();
        let found = match answers.get_mut(host) {
            Some(lists) if lists.len() > 1 => Ok(lists.remove(0)),
            Some(lists) => Ok(lists[0].clone()),
            None => Err(std::io::Error::other("no such name")),
        };
        Box::pin(async move { found })
    }
}

async fn fake_server() -> common::Server {
    Arc::new(Fake::new(Speaks::Both)).start().await
}

fn refused_kind(result: Result<Client, Error>) -> Option<AddressKind> {
    match result {
        Err(Error::Refused(Refusal::Address { kind, .. })) => Some(kind),
        _ => None,
    }
}

#[tokio::test]
async fn a_loopback_literal_is_refused_unless_its_host_is_listed() {
    let server = fake_server().await;
    let open = Guard::new(["http://*:*"]).unwrap();
    let built = Client::builder(&server.url).guard(open).build();
    assert_eq!(refused_kind(built), Some(AddressKind::Loopback));
    let mapped = format!("http://[::ffff:127.0.0.1]:{}/mcp", server.port);
    let built = Client::builder(mapped)
        .guard(Guard::new(["http://*:*"]).unwrap())
        .build();
    assert_eq!(refused_kind(built), Some(AddressKind::Loopback));
    assert!(server.methods().is_empty(), "nothing reached the server");

    // Listed literally, the same host is allowed and reached.
    let listed = Guard::new(["http://127.0.0.1:*/mcp"]).unwrap();
    let client = Client::builder(&server.url).guard(listed).build().unwrap();
    assert_eq!(client.list_tools().await.unwrap().len(), 3);
}

#[tokio::test]
async fn private_link_local_shared_and_metadata_literals_are_refused() {
    let open = || Guard::new(["http://*:*", "https://*:*"]).unwrap();
    for (url, kind) in [
        ("http://10.0.0.7/mcp", AddressKind::Private),
        ("http://192.168.1.1:8080/mcp", AddressKind::Private),
        ("https://[fd12:3456::1]/mcp", AddressKind::Private),
        ("http://169.254.10.10/mcp", AddressKind::LinkLocal),
        ("http://[fe80::1]/mcp", AddressKind::LinkLocal),
        ("http://100.100.100.100/mcp", AddressKind::SharedNat),
        ("http://0.0.0.0:9/mcp", AddressKind::Unspecified),
        (
            "http://169.254.169.254/latest/meta-data",
            AddressKind::Metadata,
        ),
        ("http://[fd00:ec2::254]/mcp", AddressKind::Metadata),
        // 2852039166 is 169.254.169.254 written as one number.
        ("http://2852039166/", AddressKind::Metadata),
    ] {
        let built = Client::builder(url).guard(open()).build();
        assert_eq!(refused_kind(built), Some(kind), "{url}");
    }
}

#[tokio::test]
async fn a_url_matching_no_pattern_is_refused_before_any_connection() {
    let server = fake_server().await;
    let guard = Guard::new(["https://mcp.example.com/*"]).unwrap();
    let err = Client::builder(&server.url)
        .guard(guard)
        .build()
        .unwrap_err();
    assert!(
        matches!(err, Error::Refused(Refusal::NotAllowed)),
        "{err:?}"
    );
    assert!(server.methods().is_empty());
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_at_connection() {
    let server = fake_server().await;
    let dns = FakeDns::new(&[("evil.test", &[&["127.0.0.1"]])]);
    let guard = Guard::new(["http://*.test:*"])
        .unwrap()
        .with_lookup(dns.clone());
    let url = format!("http://evil.test:{}/mcp", server.port);
    let client = Client::builder(url).guard(guard).build().unwrap();
    let err = client.list_tools().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Refused(Refusal::Address {
                kind: AddressKind::Loopback,
                ..
            })
        ),
        "{err:?}"
    );
    assert!(
        dns.asked.load(Ordering::SeqCst) > 0,
        "the guard's resolver was used"
    );
    assert!(server.methods().is_empty(), "nothing reached the server");
}

#[tokio::test]
async fn localhost_through_the_system_resolver_is_refused() {
    let server = fake_server().await;
    let guard = Guard::new(["http://*:*"]).unwrap();
    let url = format!("http://localhost:{}/mcp", server.port);
    let client = Client::builder(url).guard(guard).build().unwrap();
    let err = client.list_tools().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Refused(Refusal::Address {
                kind: AddressKind::Loopback,
                ..
            })
        ),
        "{err:?}"
    );
    assert!(server.methods().is_empty());
}

#[tokio::test]
async fn a_name_that_rebinds_after_the_early_check_is_refused_at_connection() {
    let server = fake_server().await;
    // Public when checked, loopback when connected to.
    let dns = FakeDns::new(&[("rebind.test", &[&["93.184.216.34"], &["127.0.0.1"]])]);
    let guard = Guard::new(["http://*.test:*"]).unwrap().with_lookup(dns);
    let url = url::Url::parse(&format!("http://rebind.test:{}/mcp", server.port)).unwrap();
    guard.check(&url).await.unwrap();
    let client = Client::builder(url.as_str()).guard(guard).build().unwrap();
    let err = client.list_tools().await.unwrap_err();
    assert!(
        matches!(err, Error::Refused(Refusal::Address { .. })),
        "{err:?}"
    );
    assert!(server.methods().is_empty());
}

#[tokio::test]
async fn refused_addresses_are_dropped_from_an_answer_that_also_has_allowed_ones() {
    let server = fake_server().await;
    // The name is listed literally, so its loopback address is allowed; a
    // second, unlisted name with the same answer is not.
    let dns = FakeDns::new(&[
        ("listed.test", &[&["127.0.0.1"]]),
        ("other.test", &[&["127.0.0.1"]]),
    ]);
    let guard = Guard::new(["http://listed.test:*", "http://*.test:*"])
        .unwrap()
        .with_lookup(dns);
    let listed = format!("http://listed.test:{}/mcp", server.port);
    let client = Client::builder(listed)
        .guard(guard.clone())
        .build()
        .unwrap();
    assert_eq!(client.list_tools().await.unwrap().len(), 3);
    let other = format!("http://other.test:{}/mcp", server.port);
    let client = Client::builder(other).guard(guard).build().unwrap();
    assert!(client.list_tools().await.is_err());
}

/// A server that redirects every POST to `target` with a 307.
async fn redirecting_to(target: String) -> common::Server {
    common::serve(common::handler(move |_seen| {
        (
            StatusCode::TEMPORARY_REDIRECT,
            [("location", target.clone())],
        )
            .into_response()
    }))
    .await
}

#[tokio::test]
async fn a_redirect_to_an_unlisted_loopback_address_is_refused() {
    let inner = common::serve_on(
        "127.0.0.2",
        common::handler(|_seen| StatusCode::OK.into_response()),
    )
    .await;
    let outer = redirecting_to(inner.url.clone()).await;
    // The first server is listed by its address; any other host is allowed
    // by pattern but not on a refused address.
    let guard = Guard::new(["http://127.0.0.1:*", "http://*:*"]).unwrap();
    let client = Client::builder(&outer.url).guard(guard).build().unwrap();
    let err = client.call_tool("echo", json!({})).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Refused(Refusal::Address {
                kind: AddressKind::Loopback,
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(outer.methods().len(), 1, "the first server was asked");
    assert!(inner.methods().is_empty(), "the redirect was not followed");
}

#[tokio::test]
async fn a_redirect_to_a_url_matching_no_pattern_is_refused() {
    let inner = fake_server().await;
    let outer = redirecting_to(inner.url.replace("/mcp", "/elsewhere")).await;
    let guard = Guard::new(["http://127.0.0.1:*/mcp"]).unwrap();
    let client = Client::builder(&outer.url).guard(guard).build().unwrap();
    let err = client.list_tools().await.unwrap_err();
    assert!(
        matches!(err, Error::Refused(Refusal::NotAllowed)),
        "{err:?}"
    );
    assert!(inner.methods().is_empty());
}

#[tokio::test]
async fn a_registered_server_is_not_guarded() {
    let server = fake_server().await;
    let client = Client::builder(&server.url).build().unwrap();
    assert_eq!(client.list_tools().await.unwrap().len(), 3);
}
