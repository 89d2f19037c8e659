//! Certificate checks shared by the SEV-SNP and TDX verifiers: each maps a
//! [`CertProblem`] into its own typed error, naming the certificate.

use std::time::{SystemTime, UNIX_EPOCH};

use x509_parser::certificate::X509Certificate;
use x509_parser::oid_registry::{OID_KEY_TYPE_EC_PUBLIC_KEY, Oid};
use x509_parser::prelude::FromDer;
use x509_parser::revocation_list::CertificateRevocationList;
use x509_parser::time::ASN1Time;
use x509_parser::x509::AlgorithmIdentifier;

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
    if !asn1_time(at).is_some_and(|t| cert.validity().is_valid_at(t)) {
        return Err(CertProblem::Expired);
    }
    Ok(cert)
}

/// `at` (`None`: now) as an ASN.1 time.
fn asn1_time(at: Option<SystemTime>) -> Option<ASN1Time> {
    let seconds = at
        .unwrap_or_else(SystemTime::now)
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    ASN1Time::from_timestamp(i64::try_from(seconds).ok()?).ok()
}

/// Signed bytes (a certificate's or a CRL's) with their algorithm and
/// signature.
pub(crate) struct Signed<'a> {
    pub alg: &'a AlgorithmIdentifier<'a>,
    pub data: &'a [u8],
    pub signature: &'a [u8],
}

impl<'a> Signed<'a> {
    /// What `cert`'s issuer signed.
    pub fn cert(cert: &'a X509Certificate<'_>) -> Self {
        Self {
            alg: &cert.signature_algorithm,
            data: cert.tbs_certificate.as_ref(),
            signature: cert.signature_value.data.as_ref(),
        }
    }

    /// What `crl`'s issuer signed.
    pub fn crl(crl: &'a CertificateRevocationList<'_>) -> Self {
        Self {
            alg: &crl.signature_algorithm,
            data: crl.tbs_cert_list.as_ref(),
            signature: crl.signature_value.data.as_ref(),
        }
    }
}

/// Why [`check_revocation`] refused a certificate; `E` is the error of
/// the signature check.
pub(crate) enum Revocation<E> {
    /// A CRL that does not parse, has bytes after it, or whose two
    /// signature algorithm fields differ.
    Malformed(String),
    /// The issuer's CRL whose signature does not verify.
    Signature(E),
    /// The issuer's CRL issued after `at`, without a next update, or past
    /// it: a CRL that old could omit a revocation since.
    OutOfDate,
    /// The issuer's CRL lists the certificate.
    Revoked,
    /// No CRL is the issuer's.
    NoCrl,
}

/// Checks `cert` against every CRL among `crls` (DER) that `issuer`
/// issued (its issuer name, byte for byte, is the certificate's subject):
/// each must verify under `check`, be current at `at` (`None`: now) and
/// not list `cert`'s serial number, and there must be one. Every CRL in
/// `crls` must parse. Whether it checked: no CRLs given means revocation
/// was not asked for (`false`).
pub(crate) fn check_revocation<E>(
    crls: &[Vec<u8>],
    issuer: &X509Certificate<'_>,
    cert: &X509Certificate<'_>,
    at: Option<SystemTime>,
    check: impl Fn(&Signed<'_>) -> Result<(), E>,
) -> Result<bool, Revocation<E>> {
    if crls.is_empty() {
        return Ok(false);
    }
    let mut found = false;
    for der in crls {
        let crl = parse_crl(der).map_err(Revocation::Malformed)?;
        if crl.issuer().as_raw() != issuer.subject().as_raw() {
            continue;
        }
        check(&Signed::crl(&crl)).map_err(Revocation::Signature)?;
        let current = asn1_time(at).is_some_and(|now| {
            crl.last_update() <= now && crl.next_update().is_some_and(|next| now <= next)
        });
        if !current {
            return Err(Revocation::OutOfDate);
        }
        if crl
            .iter_revoked_certificates()
            .any(|r| *r.serial() == cert.tbs_certificate.serial)
        {
            return Err(Revocation::Revoked);
        }
        found = true;
    }
    if found {
        Ok(true)
    } else {
        Err(Revocation::NoCrl)
    }
}

/// The CRL in `der`, all of it, with equal signature algorithm fields, or
/// why not.
fn parse_crl(der: &[u8]) -> Result<CertificateRevocationList<'_>, String> {
    let (rest, crl) =
        CertificateRevocationList::from_der(der).map_err(|e| format!("does not parse: {e}"))?;
    if !rest.is_empty() {
        return Err(format!("{} bytes after the CRL", rest.len()));
    }
    if crl.signature_algorithm != crl.tbs_cert_list.signature {
        return Err("its two signature algorithm fields differ".into());
    }
    Ok(crl)
}

/// The uncompressed point of an EC key on `curve`, or `None`.
pub(crate) fn ec_point<'a>(cert: &'a X509Certificate<'_>, curve: &Oid<'_>) -> Option<&'a [u8]> {
    let spki = cert.public_key();
    let key_curve = spki.algorithm.parameters.as_ref()?.as_oid().ok()?;
    (spki.algorithm.algorithm == OID_KEY_TYPE_EC_PUBLIC_KEY && key_curve == *curve)
        .then_some(spki.subject_public_key.data.as_ref())
}
