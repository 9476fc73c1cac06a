//! TLS on the API listener (`tls_cert`, `tls_key`): the certificate chain
//! and its key from PEM files, TLS 1.2 and 1.3 with rustls' safe defaults,
//! HTTP/2 or HTTP/1.1 by ALPN.
//!
//! Certificates are rotated every few weeks, so the files are looked at
//! again (their size, modification time and inode) before each handshake:
//! a certificate replaced on disk, or a Kubernetes Secret's mount swapped,
//! is served from the next connection on, without a restart. Files that
//! changed but cannot be used (a key that does not match its certificate,
//! half of a rotation written) leave the previous certificate in service
//! and are tried again when they change again.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use url::Url;

/// What ALPN offers, preferred first.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The certificate files and what they held when last read.
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    current: Mutex<Loaded>,
}

struct Loaded {
    /// The files as they were when this was read from them.
    stamp: Stamp,
    acceptor: TlsAcceptor,
    /// The chain's first certificate (the server's own).
    leaf: CertificateDer<'static>,
}

/// What tells a file changed without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp([Option<(SystemTime, u64, u64)>; 2]);

impl Stamp {
    fn of(cert: &Path, key: &Path) -> Stamp {
        fn one(path: &Path) -> Option<(SystemTime, u64, u64)> {
            let meta = std::fs::metadata(path).ok()?;
            #[cfg(unix)]
            let inode = std::os::unix::fs::MetadataExt::ino(&meta);
            #[cfg(not(unix))]
            let inode = 0;
            Some((meta.modified().ok()?, meta.len(), inode))
        }
        Stamp([one(cert), one(key)])
    }
}

impl Tls {
    /// Reads the chain in `cert` and the key in `key` (PEM); why they
    /// cannot serve, if so.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, String> {
        let loaded = read(cert, key)?;
        Ok(Tls {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: Mutex::new(loaded),
        })
    }

    /// The acceptor for a new connection: the files' current certificate,
    /// read again first when they changed.
    pub fn acceptor(&self) -> TlsAcceptor {
        let stamp = Stamp::of(&self.cert, &self.key);
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if stamp != current.stamp {
            match read(&self.cert, &self.key) {
                Ok(loaded) => {
                    tracing::info!(cert = %self.cert.display(), "TLS certificate read again: it changed on disk");
                    *current = loaded;
                }
                Err(error) => {
                    tracing::warn!(%error, "TLS certificate files changed but cannot be used; the previous certificate stays in service");
                    current.stamp = stamp;
                }
            }
        }
        current.acceptor.clone()
    }

    /// Whether `public_url` fits a server that speaks TLS with this
    /// certificate: an error when it is `http://`, a warning when its
    /// host is not one of the certificate's names.
    pub fn check_public_url(&self, public_url: &Url) -> Result<Option<String>, String> {
        if public_url.scheme() != "https" {
            return Err(format!(
                "public_url {public_url} is http:// but svc serves TLS (tls_cert is set): make it https://"
            ));
        }
        let Some(host) = public_url.host_str() else {
            return Ok(None);
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let leaf = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .leaf
            .clone();
        let matches = ServerName::try_from(host).ok().is_some_and(|name| {
            rustls::server::ParsedCertificate::try_from(&leaf)
                .is_ok_and(|cert| rustls::client::verify_server_name(&cert, &name).is_ok())
        });
        Ok((!matches).then(|| {
            format!(
                "the TLS certificate ({}) is not valid for public_url's host {host}: clients will refuse it",
                self.cert.display()
            )
        }))
    }
}

/// The files' certificate chain and key, made into an acceptor.
fn read(cert: &Path, key: &Path) -> Result<Loaded, String> {
    // Taken first: a change while reading is seen at the next look.
    let stamp = Stamp::of(cert, key);
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("tls_cert {}: {e}", cert.display()))?;
    let Some(leaf) = chain.first().cloned() else {
        return Err(format!(
            "tls_cert {}: no certificate in it (PEM, -----BEGIN CERTIFICATE-----)",
            cert.display()
        ));
    };
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "tls_key {}: {e} (PEM: PKCS#8, PKCS#1 or SEC1)",
            key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| {
            format!(
                "tls_cert {} and tls_key {} cannot serve together: {e}",
                cert.display(),
                key.display()
            )
        })?;
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(Loaded {
        stamp,
        acceptor: TlsAcceptor::from(Arc::new(config)),
        leaf,
    })
}
