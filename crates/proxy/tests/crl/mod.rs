//! Test CRLs for the test chains.
#![allow(dead_code)]

use rcgen::{
    CertificateRevocationListParams, Issuer, KeyIdMethod, KeyPair, RevokedCertParams, SerialNumber,
    date_time_ymd,
};

/// A CRL (DER) `issuer` signs, issued on 1 January of `from` with its next
/// update on 1 January of `to`, listing the certificates `revoked` (DER).
pub fn crl(issuer: &Issuer<'_, &KeyPair>, revoked: &[&[u8]], from: i32, to: i32) -> Vec<u8> {
    let revoked_certs = revoked
        .iter()
        .map(|der| {
            let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
            RevokedCertParams {
                serial_number: SerialNumber::from_slice(cert.raw_serial()),
                revocation_time: date_time_ymd(from, 1, 1),
                reason_code: None,
                invalidity_date: None,
            }
        })
        .collect();
    CertificateRevocationListParams {
        this_update: date_time_ymd(from, 1, 1),
        next_update: date_time_ymd(to, 1, 1),
        crl_number: SerialNumber::from(1),
        issuing_distribution_point: None,
        revoked_certs,
        key_identifier_method: KeyIdMethod::Sha256,
    }
    .signed_by(issuer)
    .unwrap()
    .der()
    .to_vec()
}
