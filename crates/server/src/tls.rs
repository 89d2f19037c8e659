//! TLS material for the embedded setup: a local certificate authority (CA)
//! and a server certificate for `localhost`/`127.0.0.1`/`::1`, generated with
//! rcgen (ECDSA P-256, ring) and kept under `<data-dir>/tls/`:
//!
//! * `ca.pem`: the CA certificate, what clients trust;
//! * `ca.key`: the CA's private key (mode 0600), kept only to renew the
//!   server certificate;
//! * `server.pem`, `server.key` (mode 0600): the server certificate, signed
//!   by the CA, and its key.
//!
//! Every file is written atomically (temporary file, fsync, rename: see
//! [`hecloud_protocol::fs`]), the keys created with mode 0600 from the start.
//!
//! # Lifetimes
//!
//! The server certificate is valid for [`LEAF_LIFETIME`] (397 days, the
//! CA/Browser Forum's maximum), the CA for [`CA_LIFETIME`] (10 years). Both
//! start [`BACKDATE`] (1 hour) in the past, so that a client whose clock is a
//! little behind the server's still accepts them.
//!
//! # Renewal
//!
//! At every start, [`load_or_generate`] reads the expiry dates from the
//! certificates themselves and:
//!
//! * keeps the material when the server certificate is valid for more than
//!   [`RENEW_BEFORE`] (30 days) and its CA too;
//! * otherwise, or when the server certificate was made valid for more than
//!   [`MAX_LEAF_LIFETIME`] (398 days: material from older versions, valid
//!   until the year 4096), is not signed by `ca.pem`, does not match
//!   `server.key`, or is missing, issues a new server key and certificate
//!   from the same CA (`ca.key`): `ca.pem` does not change, so clients keep
//!   trusting the server. A renewed certificate never outlives its CA;
//! * when that is not possible (no `ca.key`, as with material from older
//!   versions; a CA that expires within 30 days; `ca.pem` missing or
//!   unreadable), makes everything afresh and logs a warning: clients must
//!   fetch the new `ca.pem`.
//!
//! The dates are read from the certificates themselves (a minimal DER
//! reader below), so no separate record can fall out of step with them.
//! Renewal happens at start only: a server that runs for over a year
//! without a restart serves an expired certificate.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use hecloud_protocol::fs::{write_atomic, write_private};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData,
};

use crate::error::{Result, ServerError};

const DAY: u64 = 24 * 3600;

/// How long a server certificate is valid: 397 days, the most the
/// CA/Browser Forum allows public TLS certificates (clients that enforce it
/// refuse longer ones).
pub const LEAF_LIFETIME: Duration = Duration::from_secs(397 * DAY);

/// How long the CA is valid: 10 years. Renewing it means handing every
/// client a new `ca.pem`, so it lives much longer than the server
/// certificate it signs.
pub const CA_LIFETIME: Duration = Duration::from_secs(3652 * DAY);

/// How far in the past certificates start, for clock skew between the
/// server and its clients.
pub const BACKDATE: Duration = Duration::from_secs(3600);

/// A certificate that expires within this margin is renewed at start.
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * DAY);

/// A server certificate made valid for longer than this (about 13 months)
/// comes from an older version (valid until 4096) and is renewed.
pub const MAX_LEAF_LIFETIME: Duration = Duration::from_secs(398 * DAY);

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

/// Seconds since the Unix epoch (negative before it).
fn unix(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

fn secs(d: Duration) -> i64 {
    d.as_secs() as i64
}

/// Sets `p`'s validity to `[not_before, not_after]` (Unix seconds).
fn set_validity(p: &mut CertificateParams, not_before: i64, not_after: i64) -> Result<()> {
    // rcgen takes `time::OffsetDateTime`s; building them from its own epoch
    // spares a direct dependency on `time`.
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let since_epoch = |t: i64| {
        u64::try_from(t)
            .map(Duration::from_secs)
            .map_err(|_| ServerError::Tls(format!("certificate date {t} is before 1970")))
    };
    p.not_before = epoch + since_epoch(not_before)?;
    p.not_after = epoch + since_epoch(not_after)?;
    Ok(())
}

/// The CA's parameters. Its name carries a fingerprint of its key, so that
/// a server certificate issued by another hecloud CA (one made before a
/// crash half-way through regenerating, say) never passes for one of this
/// CA's, and so that users can tell CAs apart in a trust store.
fn ca_params(ca_key: &KeyPair) -> Result<CertificateParams> {
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(tls_err)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let fp = blake3::hash(&ca_key.subject_public_key_info());
    ca.distinguished_name.push(
        DnType::CommonName,
        format!("hecloud local CA {}", &fp.to_hex()[..16]),
    );
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(ca)
}

/// Issues a server certificate for `names` from the CA, valid from
/// `now - BACKDATE` until `not_after`: (certificate PEM, key PEM).
fn issue_leaf(
    names: &[&str],
    ca_key: &KeyPair,
    now: i64,
    not_after: i64,
) -> Result<(String, String)> {
    let issuer = Issuer::new(ca_params(ca_key)?, ca_key);
    let key = KeyPair::generate().map_err(tls_err)?;
    let mut srv = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .map_err(tls_err)?;
    srv.distinguished_name
        .push(DnType::CommonName, "hecloud server");
    srv.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    srv.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    set_validity(&mut srv, now - secs(BACKDATE), not_after)?;
    let cert = srv.signed_by(&key, &issuer).map_err(tls_err)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A fresh CA and server certificate as of `now`, with the CA's key.
fn generate_at(names: &[&str], now: i64) -> Result<(TlsMaterial, KeyPair)> {
    let ca_key = KeyPair::generate().map_err(tls_err)?;
    let mut ca = ca_params(&ca_key)?;
    set_validity(&mut ca, now - secs(BACKDATE), now + secs(CA_LIFETIME))?;
    let ca_cert = ca.self_signed(&ca_key).map_err(tls_err)?;
    let (cert_pem, key_pem) = issue_leaf(names, &ca_key, now, now + secs(LEAF_LIFETIME))?;
    let m = TlsMaterial {
        ca_pem: ca_cert.pem(),
        cert_pem,
        key_pem,
    };
    Ok((m, ca_key))
}

/// Generates a fresh CA and a server certificate for `names` (DNS names or
/// IP addresses), with the lifetimes of [`LEAF_LIFETIME`] and
/// [`CA_LIFETIME`]. The CA's private key is dropped: use
/// [`load_or_generate`] for material that can be renewed.
pub fn generate(names: &[&str]) -> Result<TlsMaterial> {
    generate_at(names, unix(SystemTime::now())).map(|(m, _)| m)
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

/// Path of the CA's private key under `dir` (`ca.key`, mode 0600): keep it
/// as private as `server.key`, since it can sign certificates the clients
/// trust.
pub fn ca_key_path(dir: &Path) -> PathBuf {
    dir.join("ca.key")
}

/// Loads the material under `dir`, generating it on first use and renewing
/// it as the [module documentation](self) says.
pub fn load_or_generate(dir: &Path) -> Result<TlsMaterial> {
    load_or_generate_at(dir, SystemTime::now())
}

/// [`load_or_generate`] as of `now`.
fn load_or_generate_at(dir: &Path, now: SystemTime) -> Result<TlsMaterial> {
    let now = unix(now);
    let (ca_path, cert_path, key_path) = paths(dir);
    let ca_key_path = ca_key_path(dir);
    let files = [&ca_path, &cert_path, &key_path, &ca_key_path];
    if !files.iter().any(|p| p.exists()) {
        crate::store::create_private_dir(dir)?;
        let m = write_fresh(dir, now)?;
        tracing::info!(dir = %dir.display(), "generated a TLS CA and server certificate");
        return Ok(m);
    }
    let Some(ca_pem) = read_opt(&ca_path)? else {
        return regenerate(dir, now, "ca.pem is missing");
    };
    let Some(ca) = CertInfo::from_pem(&ca_pem) else {
        return regenerate(dir, now, "ca.pem is not a certificate");
    };
    // A missing or broken server certificate or key is renewed like an
    // expiring one: the CA, which clients hold, is what must not change.
    let renew = match (read_opt(&cert_path)?, read_opt(&key_path)?) {
        (Some(cert_pem), Some(key_pem)) => match leaf_problem(&cert_pem, &key_pem, &ca, now) {
            None => {
                if !ca_key_path.exists() {
                    tracing::warn!(
                        path = %ca_key_path.display(),
                        "the CA key is missing: the server certificate cannot be renewed; \
                         a new CA will be made when it expires"
                    );
                }
                return Ok(TlsMaterial {
                    ca_pem,
                    cert_pem,
                    key_pem,
                });
            }
            Some(why) => why,
        },
        _ => "server.pem or server.key is missing",
    };
    match renew_leaf(dir, &ca_pem, &ca, now)? {
        Ok(m) => {
            tracing::info!(
                reason = renew,
                "renewed the TLS server certificate with the same CA"
            );
            Ok(m)
        }
        Err(why) => regenerate(dir, now, &format!("{renew}, and {why}")),
    }
}

/// A file's text, or `None` if it does not exist or is not text (no PEM
/// then). Other errors (no permission, say) are returned: regenerating
/// over them could replace material that is only unreadable for a moment.
fn read_opt(path: &Path) -> Result<Option<String>> {
    use std::io::ErrorKind;
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::InvalidData) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Why the server certificate must be renewed, if it must.
fn leaf_problem(cert_pem: &str, key_pem: &str, ca: &CertInfo, now: i64) -> Option<&'static str> {
    let Some(leaf) = CertInfo::from_pem(cert_pem) else {
        return Some("server.pem is not a certificate");
    };
    if leaf.issuer != ca.subject {
        return Some("server.pem was not issued by ca.pem");
    }
    let key_matches =
        KeyPair::from_pem(key_pem).is_ok_and(|k| k.subject_public_key_info() == leaf.spki);
    if !key_matches {
        return Some("server.key does not match server.pem");
    }
    if leaf.not_after - leaf.not_before > secs(MAX_LEAF_LIFETIME) {
        return Some("the server certificate is valid for more than 398 days");
    }
    if leaf.not_after - now <= secs(RENEW_BEFORE) {
        return Some("the server certificate expires within 30 days");
    }
    // The certificate may be fine, but a chain whose CA expires is not.
    if ca.not_after - now <= secs(RENEW_BEFORE) {
        return Some("the CA expires within 30 days");
    }
    None
}

/// Issues and writes a new server certificate from the CA in `dir`.
/// `Ok(Err(why))` when the CA cannot be used for it.
fn renew_leaf(
    dir: &Path,
    ca_pem: &str,
    ca: &CertInfo,
    now: i64,
) -> Result<std::result::Result<TlsMaterial, &'static str>> {
    let Some(ca_key_pem) = read_opt(&ca_key_path(dir))? else {
        return Ok(Err("there is no CA key (ca.key) to sign a new one"));
    };
    let Ok(ca_key) = KeyPair::from_pem(&ca_key_pem) else {
        return Ok(Err("ca.key is not a private key"));
    };
    if ca_key.subject_public_key_info() != ca.spki {
        return Ok(Err("ca.key does not match ca.pem"));
    }
    if ca.not_after - now <= secs(RENEW_BEFORE) {
        return Ok(Err("the CA expires within 30 days"));
    }
    let not_after = (now + secs(LEAF_LIFETIME)).min(ca.not_after);
    let (cert_pem, key_pem) = issue_leaf(&LOCAL_NAMES, &ca_key, now, not_after)?;
    // The issuer name comes from `ca_params`: a CA named otherwise (by
    // another version, say) would not recognise the certificate as its own.
    if CertInfo::from_pem(&cert_pem).is_none_or(|leaf| leaf.issuer != ca.subject) {
        return Ok(Err(
            "ca.pem's name is not the one this version gives its CA",
        ));
    }
    let (_, cert_path, key_path) = paths(dir);
    // Key first: a crash between the two leaves a key that does not match
    // the certificate, which the next start renews again.
    write_private(&key_path, key_pem.as_bytes())?;
    write_atomic(&cert_path, cert_pem.as_bytes(), 0o644)?;
    Ok(Ok(TlsMaterial {
        ca_pem: ca_pem.to_string(),
        cert_pem,
        key_pem,
    }))
}

/// Replaces all the material under `dir`, warning that clients must fetch
/// the new CA.
fn regenerate(dir: &Path, now: i64, why: &str) -> Result<TlsMaterial> {
    let m = write_fresh(dir, now)?;
    tracing::warn!(
        reason = why,
        ca = %paths(dir).0.display(),
        "generated a new TLS CA: clients must fetch the new ca.pem"
    );
    Ok(m)
}

/// Generates and writes fresh material under `dir`.
fn write_fresh(dir: &Path, now: i64) -> Result<TlsMaterial> {
    let (m, ca_key) = generate_at(&LOCAL_NAMES, now)?;
    let (ca_path, cert_path, key_path) = paths(dir);
    // CA first: after a crash part-way, the next start finds either a CA key
    // that does not match ca.pem (and starts over) or a server certificate
    // from another CA (and renews it from the new one).
    write_private(&ca_key_path(dir), ca_key.serialize_pem().as_bytes())?;
    write_atomic(&ca_path, m.ca_pem.as_bytes(), 0o644)?;
    write_private(&key_path, m.key_pem.as_bytes())?;
    write_atomic(&cert_path, m.cert_pem.as_bytes(), 0o644)?;
    Ok(m)
}

/// What the renewal rules need of a certificate, read from its DER: just
/// enough of X.509 (RFC 5280) to not need a parser crate. Its raw names and
/// public key are compared byte for byte, which holds for certificates
/// that rcgen wrote.
#[derive(Debug, PartialEq)]
struct CertInfo {
    /// The issuer's name (DER).
    issuer: Vec<u8>,
    /// notBefore, Unix seconds.
    not_before: i64,
    /// notAfter, Unix seconds.
    not_after: i64,
    /// The subject's name (DER).
    subject: Vec<u8>,
    /// The SubjectPublicKeyInfo (DER).
    spki: Vec<u8>,
}

impl CertInfo {
    /// Reads the first certificate of a PEM text; `None` if there is none or
    /// it is malformed.
    fn from_pem(pem: &str) -> Option<Self> {
        const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
        const END: &str = "-----END CERTIFICATE-----";
        let body = pem.split_once(BEGIN)?.1.split_once(END)?.0;
        Self::from_der(&base64_decode(body)?)
    }

    /// Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm,
    /// signature }; tbsCertificate ::= SEQUENCE { [0] version OPTIONAL,
    /// serialNumber, signature, issuer, validity, subject,
    /// subjectPublicKeyInfo, ... }.
    fn from_der(der: &[u8]) -> Option<Self> {
        const SEQUENCE: u8 = 0x30;
        let (cert, rest) = Der(der).read(SEQUENCE)?;
        if !rest.0.is_empty() {
            return None;
        }
        let (tbs, _) = cert.read(SEQUENCE)?;
        let tbs = match tbs.peek() {
            Some(0xa0) => tbs.read(0xa0)?.1,
            _ => tbs,
        };
        let (_serial, tbs) = tbs.read(0x02)?;
        let (_sig_alg, tbs) = tbs.read(SEQUENCE)?;
        let (issuer, tbs) = tbs.read_raw(SEQUENCE)?;
        let (validity, tbs) = tbs.read(SEQUENCE)?;
        let (subject, tbs) = tbs.read_raw(SEQUENCE)?;
        let (spki, _) = tbs.read_raw(SEQUENCE)?;
        let (not_before, validity) = validity.read_time()?;
        let (not_after, validity) = validity.read_time()?;
        if !validity.0.is_empty() {
            return None;
        }
        Some(Self {
            issuer: issuer.to_vec(),
            not_before,
            not_after,
            subject: subject.to_vec(),
            spki: spki.to_vec(),
        })
    }
}

/// DER input being read.
#[derive(Clone, Copy)]
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    fn peek(self) -> Option<u8> {
        self.0.first().copied()
    }

    /// One element of tag `tag`: (the whole element, its contents, rest).
    fn element(self, tag: u8) -> Option<(&'a [u8], Self, Self)> {
        let (&t, rest) = self.0.split_first()?;
        if t != tag {
            return None;
        }
        let (&first, mut rest) = rest.split_first()?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            // Long form; 0x80 (indefinite) is not DER, and no certificate
            // needs more than 4 length bytes.
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let (bytes, r) = rest.split_at(n);
            rest = r;
            bytes.iter().fold(0usize, |l, &b| (l << 8) | usize::from(b))
        };
        let header = self.0.len() - rest.len();
        if rest.len() < len {
            return None;
        }
        let (whole, after) = self.0.split_at(header + len);
        Some((whole, Der(&whole[header..]), Der(after)))
    }

    /// One element of tag `tag`: (the whole element, rest).
    fn read_raw(self, tag: u8) -> Option<(&'a [u8], Self)> {
        self.element(tag).map(|(whole, _, rest)| (whole, rest))
    }

    /// One element of tag `tag`: (its contents, rest).
    fn read(self, tag: u8) -> Option<(Self, Self)> {
        self.element(tag)
            .map(|(_, contents, rest)| (contents, rest))
    }

    /// A UTCTime or GeneralizedTime, as Unix seconds.
    fn read_time(self) -> Option<(i64, Self)> {
        match self.peek()? {
            0x17 => {
                let (t, rest) = self.read(0x17)?;
                Some((parse_time(t.0, false)?, rest))
            }
            0x18 => {
                let (t, rest) = self.read(0x18)?;
                Some((parse_time(t.0, true)?, rest))
            }
            _ => None,
        }
    }
}

/// `YYMMDDHHMMSSZ` (UTCTime: 50–99 are 19xx, RFC 5280) or
/// `YYYYMMDDHHMMSSZ` (GeneralizedTime), the only forms DER allows in
/// certificates, as Unix seconds.
fn parse_time(s: &[u8], generalized: bool) -> Option<i64> {
    let digits = s.strip_suffix(b"Z")?;
    if digits.len() != if generalized { 14 } else { 12 } || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let num = |i: usize, n: usize| {
        digits[i..i + n]
            .iter()
            .fold(0i64, |v, &d| v * 10 + i64::from(d - b'0'))
    };
    let (year, at) = if generalized {
        (num(0, 4), 4)
    } else {
        let yy = num(0, 2);
        (if yy < 50 { 2000 + yy } else { 1900 + yy }, 2)
    };
    let (month, day) = (num(at, 2), num(at + 2, 2));
    let (hour, minute, second) = (num(at + 4, 2), num(at + 6, 2), num(at + 8, 2));
    if !(1..=12).contains(&month)
        || !(1..=days_in_month(year, month)).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's
/// algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// Standard base64 (RFC 4648) with padding, whitespace ignored.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let chars: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    if !chars.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(chars.len() / 4 * 3);
    for (i, quad) in chars.chunks(4).enumerate() {
        let last = i == chars.len() / 4 - 1;
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut acc = 0u32;
        for &c in &quad[..4 - pad] {
            acc = (acc << 6) | value(c)?;
        }
        acc <<= 6 * pad as u32;
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..4 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z

    fn at(t: i64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(t as u64)
    }

    fn cert(pem: &str) -> CertInfo {
        CertInfo::from_pem(pem).expect("a certificate")
    }

    fn read(p: PathBuf) -> String {
        std::fs::read_to_string(p).unwrap()
    }

    /// Everything under `dir`, to tell what a load changed.
    fn snapshot(dir: &Path) -> [String; 4] {
        let (ca, cert, key) = paths(dir);
        [read(ca), read(cert), read(key), read(ca_key_path(dir))]
    }

    /// The material of the versions that kept no CA key: rcgen's default
    /// validity (1975 to 4096), and a CA named without a fingerprint.
    fn write_legacy(dir: &Path) {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.distinguished_name
            .push(DnType::CommonName, "hecloud local CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut srv = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        srv.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = srv.signed_by(&key, &issuer).unwrap();
        let (ca_path, cert_path, key_path) = paths(dir);
        std::fs::write(ca_path, ca_cert.pem()).unwrap();
        std::fs::write(cert_path, leaf.pem()).unwrap();
        std::fs::write(key_path, key.serialize_pem()).unwrap();
    }

    /// Whether a TLS client that trusts `ca_pem` completes a handshake with
    /// a server presenting `m`'s certificate (rustls verifies the chain,
    /// the name and the validity against the real clock).
    async fn handshake(m: &TlsMaterial, ca_pem: &str) -> bool {
        use tonic::transport::{
            Certificate, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig,
            server::TcpIncoming,
        };
        hecloud_protocol::rpc::install_tls_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = Server::builder()
            .tls_config(
                ServerTlsConfig::new().identity(Identity::from_pem(&m.cert_pem, &m.key_pem)),
            )
            .unwrap()
            .add_routes(tonic::service::Routes::default())
            .serve_with_incoming(TcpIncoming::from(listener));
        let task = tokio::spawn(server);
        let ep = Endpoint::from_shared(format!("https://localhost:{port}"))
            .unwrap()
            .connect_timeout(Duration::from_secs(5))
            .tls_config(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(ca_pem))
                    .domain_name("localhost"),
            )
            .unwrap();
        let ok = ep.connect().await.is_ok();
        task.abort();
        ok
    }

    #[test]
    fn fresh_material_has_sane_lifetimes() {
        let dir = tempfile::tempdir().unwrap();
        let m = load_or_generate_at(dir.path(), at(T0)).unwrap();
        let (ca, leaf) = (cert(&m.ca_pem), cert(&m.cert_pem));
        assert_eq!(leaf.not_before, T0 - 3600);
        assert_eq!(leaf.not_after, T0 + 397 * 86400);
        assert!(leaf.not_after - leaf.not_before <= 398 * 86400);
        assert_eq!(ca.not_before, T0 - 3600);
        let ca_years = (ca.not_after - ca.not_before) as f64 / (365.25 * 86400.0);
        assert!((ca_years - 10.0).abs() < 0.01, "{ca_years} years");
        assert_eq!(leaf.issuer, ca.subject);
        assert_eq!(
            KeyPair::from_pem(&m.key_pem)
                .unwrap()
                .subject_public_key_info(),
            leaf.spki
        );
        let ca_key = KeyPair::from_pem(&read(ca_key_path(dir.path()))).unwrap();
        assert_eq!(ca_key.subject_public_key_info(), ca.spki);
        // What was returned is what was written.
        let [ca_pem, cert_pem, key_pem, _] = snapshot(dir.path());
        assert_eq!(
            (ca_pem, cert_pem, key_pem),
            (m.ca_pem, m.cert_pem, m.key_pem)
        );
    }

    #[test]
    fn healthy_material_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        load_or_generate_at(dir.path(), at(T0)).unwrap();
        let before = snapshot(dir.path());
        // Up to 31 days before the server certificate expires.
        load_or_generate_at(dir.path(), at(T0 + 366 * 86400)).unwrap();
        assert_eq!(snapshot(dir.path()), before);
    }

    /// The server certificate expires in 10 days: a new one from the same
    /// CA, which a client trusting the unchanged ca.pem accepts.
    #[tokio::test]
    async fn a_leaf_that_expires_soon_is_renewed_with_the_same_ca() {
        let dir = tempfile::tempdir().unwrap();
        let now = unix(SystemTime::now());
        let old = load_or_generate_at(dir.path(), at(now - 387 * 86400)).unwrap();
        assert_eq!(cert(&old.cert_pem).not_after, now + 10 * 86400);
        let [ca_pem, cert_pem, key_pem, ca_key] = snapshot(dir.path());

        let new = load_or_generate_at(dir.path(), at(now)).unwrap();
        let after = snapshot(dir.path());
        assert_eq!(after[0], ca_pem, "ca.pem changed");
        assert_eq!(after[3], ca_key, "ca.key changed");
        assert_ne!(after[1], cert_pem, "server.pem was not renewed");
        assert_ne!(after[2], key_pem, "server.key was not renewed");
        assert_eq!(new.ca_pem, ca_pem);
        let leaf = cert(&new.cert_pem);
        assert_eq!(leaf.issuer, cert(&ca_pem).subject);
        assert_eq!(
            (leaf.not_before, leaf.not_after),
            (now - 3600, now + 397 * 86400)
        );

        assert!(
            handshake(&new, &ca_pem).await,
            "the renewed leaf does not verify"
        );
        // The check can fail: another CA does not vouch for it.
        let other = generate(&LOCAL_NAMES).unwrap();
        assert!(!handshake(&new, &other.ca_pem).await);
    }

    #[test]
    fn a_renewed_leaf_never_outlives_its_ca() {
        let dir = tempfile::tempdir().unwrap();
        let ca_end = T0 + 100 * 86400;
        load_or_generate_at(dir.path(), at(ca_end - secs(CA_LIFETIME))).unwrap();
        let m = load_or_generate_at(dir.path(), at(T0)).unwrap();
        let (ca, leaf) = (cert(&m.ca_pem), cert(&m.cert_pem));
        assert_eq!(ca.not_after, ca_end, "the CA was replaced");
        assert_eq!(leaf.not_after, ca_end);
    }

    #[test]
    fn a_ca_that_expires_soon_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        load_or_generate_at(dir.path(), at(T0 + 10 * 86400 - secs(CA_LIFETIME))).unwrap();
        let old = snapshot(dir.path());
        let m = load_or_generate_at(dir.path(), at(T0)).unwrap();
        assert_ne!(m.ca_pem, old[0]);
        assert_ne!(read(ca_key_path(dir.path())), old[3]);
        assert_eq!(cert(&m.ca_pem).not_after, T0 + secs(CA_LIFETIME));
    }

    /// Material from versions that kept no CA key (and made everything
    /// valid until 4096) is replaced, CA included.
    #[test]
    fn legacy_material_without_a_ca_key_is_regenerated() {
        let dir = tempfile::tempdir().unwrap();
        write_legacy(dir.path());
        let legacy_ca = read(paths(dir.path()).0);
        assert!(cert(&read(paths(dir.path()).1)).not_after > T0 + 1000 * 365 * 86400);
        let m = load_or_generate_at(dir.path(), at(T0)).unwrap();
        assert_ne!(m.ca_pem, legacy_ca);
        assert_eq!(read(paths(dir.path()).0), m.ca_pem);
        let leaf = cert(&m.cert_pem);
        assert_eq!(leaf.not_after - leaf.not_before, 397 * 86400 + 3600);
        assert!(ca_key_path(dir.path()).exists());
        // From now on it is renewed, not replaced.
        let again = load_or_generate_at(dir.path(), at(T0 + 390 * 86400)).unwrap();
        assert_eq!(again.ca_pem, m.ca_pem);
        assert_ne!(again.cert_pem, m.cert_pem);
    }

    #[test]
    fn damaged_material_is_repaired() {
        let dir = tempfile::tempdir().unwrap();
        let (ca_path, cert_path, key_path) = paths(dir.path());
        let m = load_or_generate_at(dir.path(), at(T0)).unwrap();

        // A server key that does not match: renewed, same CA.
        write_private(
            &key_path,
            KeyPair::generate().unwrap().serialize_pem().as_bytes(),
        )
        .unwrap();
        let r = load_or_generate_at(dir.path(), at(T0)).unwrap();
        assert_eq!(r.ca_pem, m.ca_pem);
        assert_ne!(r.cert_pem, m.cert_pem);

        // A server certificate from another CA with the same name: renewed.
        let foreign = generate(&LOCAL_NAMES).unwrap();
        std::fs::write(&cert_path, &foreign.cert_pem).unwrap();
        write_private(&key_path, foreign.key_pem.as_bytes()).unwrap();
        let r = load_or_generate_at(dir.path(), at(T0)).unwrap();
        assert_eq!(r.ca_pem, m.ca_pem);
        assert_eq!(cert(&r.cert_pem).issuer, cert(&m.ca_pem).subject);

        // A CA key that does not match ca.pem, when renewal is due: all new.
        write_private(
            &ca_key_path(dir.path()),
            KeyPair::generate().unwrap().serialize_pem().as_bytes(),
        )
        .unwrap();
        let r = load_or_generate_at(dir.path(), at(T0 + 390 * 86400)).unwrap();
        assert_ne!(r.ca_pem, m.ca_pem);

        // A server certificate that is not even text: renewed.
        std::fs::write(&cert_path, [0xff, 0xfe, 0x00]).unwrap();
        let r1 = load_or_generate_at(dir.path(), at(T0 + 390 * 86400)).unwrap();
        assert_eq!(r1.ca_pem, r.ca_pem);
        assert!(CertInfo::from_pem(&r1.cert_pem).is_some());

        // A server key that is missing: renewed.
        std::fs::remove_file(&key_path).unwrap();
        let r1 = load_or_generate_at(dir.path(), at(T0 + 390 * 86400)).unwrap();
        assert_eq!(r1.ca_pem, r.ca_pem);
        assert_eq!(read(key_path.clone()), r1.key_pem);

        // ca.pem that is no certificate, or missing: all new.
        std::fs::write(&ca_path, "garbage").unwrap();
        let r2 = load_or_generate_at(dir.path(), at(T0)).unwrap();
        assert_ne!(r2.ca_pem, r.ca_pem);
        std::fs::remove_file(&ca_path).unwrap();
        let r3 = load_or_generate_at(dir.path(), at(T0)).unwrap();
        assert!(CertInfo::from_pem(&r3.ca_pem).is_some());
        assert_eq!(read(ca_path), r3.ca_pem);
    }

    #[cfg(unix)]
    #[test]
    fn keys_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        let (_, cert_path, key_path) = paths(dir.path());
        load_or_generate_at(dir.path(), at(T0)).unwrap();
        assert_eq!(mode(&key_path), 0o600);
        assert_eq!(mode(&ca_key_path(dir.path())), 0o600);
        // A renewal replaces the file: the new one is 0600 too, whatever the
        // old one was.
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o644)).unwrap();
        load_or_generate_at(dir.path(), at(T0 + 390 * 86400)).unwrap();
        assert_eq!(mode(&key_path), 0o600);
        // Certificates are public (under the test's umask), and no
        // temporary file is left behind.
        assert_eq!(mode(&cert_path) & 0o600, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    }

    #[test]
    fn der_times() {
        assert_eq!(parse_time(b"700101000000Z", false), Some(0));
        assert_eq!(parse_time(b"000301000000Z", false), Some(951_868_800));
        assert_eq!(parse_time(b"491231235959Z", false), Some(2_524_607_999));
        assert_eq!(parse_time(b"500101000000Z", false), Some(-631_152_000));
        assert_eq!(parse_time(b"20500101000000Z", true), Some(2_524_608_000));
        assert_eq!(parse_time(b"40960101000000Z", true), Some(67_090_118_400));
        assert_eq!(parse_time(b"20240229120000Z", true), Some(1_709_208_000));
        for bad in [
            &b"20230229120000Z"[..],
            b"20241301000000Z",
            b"20240101246000Z",
            b"20240101000000",
            b"2024010100000Z",
            b"2024010100000+Z",
        ] {
            assert_eq!(
                parse_time(bad, true),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(parse_time(b"20240101000000Z", false), None);
    }

    #[test]
    fn cert_reader_refuses_garbage() {
        let m = generate(&LOCAL_NAMES).unwrap();
        let der = base64_decode(
            m.cert_pem
                .split_once("-----BEGIN CERTIFICATE-----")
                .unwrap()
                .1
                .split_once("-----END CERTIFICATE-----")
                .unwrap()
                .0,
        )
        .unwrap();
        assert!(CertInfo::from_der(&der).is_some());
        for n in 0..der.len() {
            assert!(
                CertInfo::from_der(&der[..n]).is_none(),
                "prefix of {n} bytes"
            );
        }
        assert!(CertInfo::from_pem("").is_none());
        assert!(CertInfo::from_pem(&m.key_pem).is_none());
        assert_eq!(base64_decode("TWFu TWE= "), Some(b"ManMa".to_vec()));
        assert_eq!(base64_decode("TWE=TWFu"), None);
        assert_eq!(base64_decode("TWF"), None);
    }
}
