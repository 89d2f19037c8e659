//! Certificate checks shared by the SEV-SNP and TDX verifiers: each maps a
//! [`CertProblem`] into its own typed error, naming the certificate.

use std::time::{SystemTime, UNIX_EPOCH};

use x509_parser::certificate::X509Certificate;
use x509_parser::oid_registry::{OID_KEY_TYPE_EC_PUBLIC_KEY, Oid};
use x509_parser::prelude::FromDer;
use x509_parser::time::ASN1Time;

/// Lower-case hex of `b`.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Why [`parse_cert`] refused a certificate.
pub(crate) enum CertProblem {
    /// It does not parse, has bytes after it, or its two signature
    /// algorithm fields differ.
    Malformed(String),
    /// It is outside its validity period.
    Expired,
}

/// The certificate in `der`, all of it, with equal signature algorithm
/// fields, within its validity period at `at` (`None`: now).
pub(crate) fn parse_cert(
    der: &[u8],
    at: Option<SystemTime>,
) -> Result<X509Certificate<'_>, CertProblem> {
    let (rest, cert) = X509Certificate::from_der(der)
        .map_err(|e| CertProblem::Malformed(format!("does not parse: {e}")))?;
    if !rest.is_empty() {
        return Err(CertProblem::Malformed(format!(
            "{} bytes after the certificate",
            rest.len()
        )));
    }
    if cert.signature_algorithm != cert.tbs_certificate.signature {
        return Err(CertProblem::Malformed(
            "its two signature algorithm fields differ".into(),
        ));
    }
    let seconds = at
        .unwrap_or_else(SystemTime::now)
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let valid = i64::try_from(seconds)
        .ok()
        .and_then(|t| ASN1Time::from_timestamp(t).ok())
        .is_some_and(|t| cert.validity().is_valid_at(t));
    if !valid {
        return Err(CertProblem::Expired);
    }
    Ok(cert)
}

/// The uncompressed point of an EC key on `curve`, or `None`.
pub(crate) fn ec_point<'a>(cert: &'a X509Certificate<'_>, curve: &Oid<'_>) -> Option<&'a [u8]> {
    let spki = cert.public_key();
    let key_curve = spki.algorithm.parameters.as_ref()?.as_oid().ok()?;
    (spki.algorithm.algorithm == OID_KEY_TYPE_EC_PUBLIC_KEY && key_curve == *curve)
        .then_some(spki.subject_public_key.data.as_ref())
}
