//! TLS with rustls: the server's certificate and key, optionally a CA that
//! every client must present a certificate from (mutual TLS), HTTP/2 and
//! HTTP/1.1 offered by ALPN. Files are PEM, as cert-manager and
//! `kubernetes.io/tls` Secrets hold them.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

use super::reload::Reloading;

/// Where the TLS files are.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM CA certificates; when set, clients must present a certificate
    /// signed by one of them.
    pub client_ca: Option<PathBuf>,
}

/// The server's TLS configuration, rebuilt when any of its files change.
pub type Tls = Reloading<Arc<ServerConfig>>;

/// Loads the files once; errors name the file and what is wrong with it.
pub fn load(files: &TlsFiles) -> Result<Tls, String> {
    let mut paths = vec![files.cert.clone(), files.key.clone()];
    paths.extend(files.client_ca.clone());
    Reloading::load("TLS certificate", paths, |bytes| {
        server_config(&bytes[0], &bytes[1], bytes.get(2).map(Vec::as_slice)).map(Arc::new)
    })
}

/// A rustls configuration from PEM bytes.
pub fn server_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    client_ca_pem: Option<&[u8]>,
) -> Result<ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(cert_pem, "--tls-cert-file")?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|err| format!("--tls-key-file holds no usable PEM private key ({err})"))?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|err| err.to_string())?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for ca in certificates(pem, "--tls-client-ca-file")? {
                roots
                    .add(ca)
                    .map_err(|err| format!("--tls-client-ca-file: {err}"))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|err| format!("--tls-client-ca-file: {err}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|err| format!("--tls-cert-file and --tls-key-file do not make a pair: {err}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

fn certificates(pem: &[u8], flag: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| format!("{flag}: {err}"))?;
    if certs.is_empty() {
        return Err(format!("{flag} holds no PEM certificate"));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_that_are_not_a_certificate_and_key_are_refused_by_name() {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let (cert_pem, key_pem) = (cert.cert.pem(), cert.signing_key.serialize_pem());
        assert!(server_config(cert_pem.as_bytes(), key_pem.as_bytes(), None).is_ok());
        let other = rcgen::generate_simple_self_signed(vec!["x".into()]).unwrap();
        let err = server_config(
            cert_pem.as_bytes(),
            other.signing_key.serialize_pem().as_bytes(),
            None,
        )
        .unwrap_err();
        assert!(err.contains("do not make a pair"), "{err}");
        let err = server_config(b"nothing", key_pem.as_bytes(), None).unwrap_err();
        assert_eq!(err, "--tls-cert-file holds no PEM certificate");
        let err = server_config(cert_pem.as_bytes(), b"", None).unwrap_err();
        assert!(err.starts_with("--tls-key-file"), "{err}");
        let err = server_config(cert_pem.as_bytes(), key_pem.as_bytes(), Some(b"")).unwrap_err();
        assert_eq!(err, "--tls-client-ca-file holds no PEM certificate");
    }
}
