//! TLS for the agent and its clients: rustls over ring, from PEM files named on the command
//! line. The server side ([`server_config`]) reads a certificate chain and a private key (the key
//! file under the token file's rules: a regular file of this user that nobody else may read);
//! the client side ([`client_config`]) trusts exactly the certificates of one CA file, so
//! `accel cluster build --from-agent https://...` verifies the agent it reads. Only TLS 1.2 and
//! 1.3 with rustls's safe defaults, ALPN `http/1.1`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub use rustls;

/// The certificate chain and key an agent serves TLS with (`--tls-cert`, `--tls-key`).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Why TLS cannot be set up; each names the file.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TlsError {
    #[error("--tls-cert {0}: {1}")]
    Cert(String, String),
    #[error("--tls-key {0}: {1}")]
    Key(String, String),
    #[error("--ca-file {0}: {1}")]
    Ca(String, String),
    #[error("TLS: {0}")]
    Config(String),
}

/// Largest certificate or CA file read.
const MAX_PEM: u64 = 1 << 20;

/// rustls over ring, the crypto crate the tree already builds (the transport's AEAD records).
/// rustls 0.23.48 marks it deprecated for lacking post-quantum key exchange, which only its
/// aws-lc backend has; that backend would add a C and CMake build to every build of accel, for
/// a protection against recording traffic now to decrypt it with a quantum computer later, which
/// an agent's readings and a lab's pages do not call for.
#[allow(deprecated)]
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificates(path: &Path, error: fn(String, String) -> TlsError) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let shown = path.display().to_string();
    let rules = crate::files::Rules { max: MAX_PEM, owner: None, follow_links: true };
    let bytes = crate::files::read(path, rules).map_err(|r| error(shown.clone(), format!("cannot read it ({r:?})")))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(shown.clone(), format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(error(shown, "holds no CERTIFICATE block".into()));
    }
    Ok(certs)
}

/// The server side: the chain in `files.cert`, the key in `files.key` (refused unless only this
/// user may read it).
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs = certificates(&files.cert, TlsError::Cert)?;
    let shown = files.key.display().to_string();
    let pem = crate::auth::read_private(&files.key, MAX_PEM).map_err(|m| TlsError::Key(shown.clone(), m))?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Key(shown, format!("no private key: {e}")))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(format!("the certificate and key do not go together: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The client side: trusts the certificates in `ca_file` and nothing else.
pub fn client_config(ca_file: &Path) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(ca_file, TlsError::Ca)? {
        roots
            .add(cert)
            .map_err(|e| TlsError::Ca(ca_file.display().to_string(), format!("not a usable CA certificate: {e}")))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
