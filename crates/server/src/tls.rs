//! TLS material for the embedded setup: a local certificate authority and a
//! server certificate for `localhost`/`127.0.0.1`/`::1`, generated with
//! rcgen (ECDSA P-256, ring). The CA certificate is what clients trust; the
//! CA's private key is not kept after signing.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::error::{Result, ServerError};

/// PEM-encoded TLS material.
#[derive(Clone)]
pub struct TlsMaterial {
    /// The CA certificate (give it to clients).
    pub ca_pem: String,
    /// The server certificate, signed by the CA.
    pub cert_pem: String,
    /// The server's private key.
    pub key_pem: String,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial").finish_non_exhaustive()
    }
}

fn tls_err(e: rcgen::Error) -> ServerError {
    ServerError::Tls(e.to_string())
}

/// Generates a fresh CA and a server certificate for `names` (DNS names or
/// IP addresses).
pub fn generate(names: &[&str]) -> Result<TlsMaterial> {
    let ca_key = KeyPair::generate().map_err(tls_err)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(tls_err)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "hecloud local CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).map_err(tls_err)?;
    let issuer = Issuer::new(ca, ca_key);

    let key = KeyPair::generate().map_err(tls_err)?;
    let mut srv = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .map_err(tls_err)?;
    srv.distinguished_name
        .push(DnType::CommonName, "hecloud server");
    srv.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    srv.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = srv.signed_by(&key, &issuer).map_err(tls_err)?;
    Ok(TlsMaterial {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Default names of the embedded setup's server certificate.
pub const LOCAL_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Paths of the generated material under `dir`: (ca.pem, server.pem, server.key).
pub fn paths(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    )
}

/// Loads the material under `dir`, generating it on first use (the key file
/// is written with mode 0600).
pub fn load_or_generate(dir: &Path) -> Result<TlsMaterial> {
    let (ca, cert, key) = paths(dir);
    if ca.exists() && cert.exists() && key.exists() {
        return Ok(TlsMaterial {
            ca_pem: std::fs::read_to_string(ca)?,
            cert_pem: std::fs::read_to_string(cert)?,
            key_pem: std::fs::read_to_string(key)?,
        });
    }
    std::fs::create_dir_all(dir)?;
    let m = generate(&LOCAL_NAMES)?;
    write_private(&key, m.key_pem.as_bytes())?;
    std::fs::write(&cert, &m.cert_pem)?;
    std::fs::write(&ca, &m.ca_pem)?;
    Ok(m)
}

/// Writes a file readable only by its owner (0600 on Unix), fsynced.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let mut f = o.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}
