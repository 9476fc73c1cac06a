//! TLS on the API listener (issue 33): HTTPS with a certificate from a CA
//! made here, HTTP/2 by ALPN, a certificate replaced on disk served on the
//! next connection without a restart, and settings that cannot serve
//! refused at start.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use serde_json::Value;
use svc_server::{Application, ServerConfig};
use svc_test_support::{Database, TestApp, fake_models};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

use super::body;

/// A certificate authority of the test's own.
struct Ca(CertifiedIssuer<'static, KeyPair>);

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Ca(CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap())
    }

    /// A server certificate for `localhost` and 127.0.0.1: its PEM chain
    /// and PEM key.
    fn issue(&self) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let cert = params.signed_by(&key, &self.0).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A client that trusts this CA only, on a fresh connection pool.
    fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(self.0.pem().as_bytes()).unwrap())
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    }

    fn der(&self) -> CertificateDer<'static> {
        self.0.der().clone()
    }
}

/// Where a test's certificate and key live.
struct Files {
    cert: PathBuf,
    key: PathBuf,
    _dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        Files {
            cert: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
            _dir: dir,
        }
    }

    /// Writes `pem` to `path` as a rotation tool does: a new file renamed
    /// over the old one.
    fn replace(path: &Path, pem: &str) {
        let new = path.with_extension("new");
        std::fs::write(&new, pem).unwrap();
        std::fs::rename(&new, path).unwrap();
    }

    fn write(&self, (cert, key): &(String, String)) {
        Files::replace(&self.cert, cert);
        Files::replace(&self.key, key);
    }

    fn config(&self) -> ServerConfig {
        ServerConfig {
            tls_cert: Some(self.cert.clone()),
            tls_key: Some(self.key.clone()),
            ..ServerConfig::default()
        }
    }
}

/// Whether a new connection from a client trusting only `ca` gets
/// `/health` answered.
async fn trusted_by(ca: &Ca, app: &TestApp) -> bool {
    let url = format!("https://localhost:{}/health", app.addr.port());
    match ca.client().get(url).send().await {
        Ok(response) => response.status() == 200,
        Err(_) => false,
    }
}

#[tokio::test]
async fn the_api_is_served_over_https_with_http2_offered() {
    let (ca, files) = (Ca::new("svc test CA"), Files::new());
    files.write(&ca.issue());
    let app = TestApp::spawn_with(Database::Sqlite, files.config()).await;
    let key = app.create_key().await;
    let base = format!("https://localhost:{}", app.addr.port());

    let reply = ca
        .client()
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&body("svc", "hello there"))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let reply: Value = reply.json().await.unwrap();
    assert_eq!(reply["object"], "chat.completion");

    // What svc hands out follows: the device flow's page is https.
    let device: Value = ca
        .client()
        .post(format!("{base}/v1/auth/device/code"))
        .form(&[("client_id", "svc-cli"), ("scope", "api")])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let page = device["verification_uri"].as_str().unwrap();
    assert!(
        page.starts_with(&format!("https://127.0.0.1:{}/", app.addr.port())),
        "{page}"
    );

    // ALPN picks HTTP/2, and a request over it is answered.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::get(format!("{base}/health"))
        .body(String::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.version(), hyper::Version::HTTP_2);
    assert_eq!(response.status(), 200);

    // Plain HTTP on the TLS port is not served.
    let plain = reqwest::get(format!("http://{}/health", app.addr)).await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
}

#[tokio::test]
async fn a_certificate_replaced_on_disk_is_served_on_the_next_connection() {
    let (first, second) = (Ca::new("first CA"), Ca::new("second CA"));
    let files = Files::new();
    files.write(&first.issue());
    let app = TestApp::spawn_with(Database::Sqlite, files.config()).await;
    assert!(trusted_by(&first, &app).await);
    assert!(!trusted_by(&second, &app).await);

    files.write(&second.issue());
    assert!(
        trusted_by(&second, &app).await,
        "the new certificate is served"
    );
    assert!(!trusted_by(&first, &app).await, "the old one no longer");

    // Half a rotation (a new certificate, its key not written yet) leaves
    // the certificate in service alone, and the whole one is then taken.
    let (cert, key) = first.issue();
    Files::replace(&files.cert, &cert);
    assert!(
        trusted_by(&second, &app).await,
        "the previous certificate stays"
    );
    Files::replace(&files.key, &key);
    assert!(
        trusted_by(&first, &app).await,
        "the completed rotation is served"
    );
}

#[tokio::test]
async fn a_tls_handshake_must_be_done_within_the_header_timeout() {
    let (ca, files) = (Ca::new("svc test CA"), Files::new());
    files.write(&ca.issue());
    let config = ServerConfig {
        header_timeout: Duration::from_secs(1),
        ..files.config()
    };
    let app = TestApp::spawn_with(Database::Sqlite, config).await;
    let mut silent = TcpStream::connect(app.addr).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut buf))
        .await
        .expect("a silent connection is closed, not held");
    assert_eq!(read.map_or(0, |n| n), 0, "closed without an answer");
    assert!(trusted_by(&ca, &app).await, "others are still served");
}

/// The error `Application::build` gives for `config`.
async fn refused(config: ServerConfig) -> String {
    let dir = tempfile::tempdir().unwrap();
    let url = svc_store::SqlStore::data_dir_url(dir.path()).unwrap();
    let store = Arc::new(svc_store::SqlStore::connect(&url).await.unwrap());
    let probe = Arc::default();
    match Application::build(config, store, fake_models(probe)).await {
        Ok(_) => panic!("the server started"),
        Err(e) => {
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
            e.to_string()
        }
    }
}

#[tokio::test]
async fn tls_settings_that_cannot_serve_are_refused_at_start() {
    let (ca, files) = (Ca::new("svc test CA"), Files::new());
    files.write(&ca.issue());
    let bind = std::net::SocketAddr::from(([127, 0, 0, 1], 0));

    let only_cert = ServerConfig {
        tls_key: None,
        bind,
        ..files.config()
    };
    assert!(refused(only_cert).await.contains("tls_cert needs tls_key"));
    let only_key = ServerConfig {
        tls_cert: None,
        bind,
        ..files.config()
    };
    assert!(refused(only_key).await.contains("tls_key needs tls_cert"));

    let http = ServerConfig {
        public_url: Some("http://localhost:8443".parse().unwrap()),
        bind,
        ..files.config()
    };
    let message = refused(http).await;
    assert!(message.contains("make it https://"), "{message}");

    let missing = ServerConfig {
        tls_cert: Some(files.cert.with_file_name("nowhere.pem")),
        bind,
        ..files.config()
    };
    let message = refused(missing).await;
    assert!(message.contains("nowhere.pem"), "{message}");

    // Another certificate's key.
    let (_, other_key) = ca.issue();
    Files::replace(&files.key, &other_key);
    let message = refused(ServerConfig {
        bind,
        ..files.config()
    })
    .await;
    assert!(
        message.contains("cannot serve together") && message.contains("key.pem"),
        "{message}"
    );
}
