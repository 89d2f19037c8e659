//! Intel TDX quotes: parsing a version 4 quote signed with an ECDSA P-256
//! attestation key, and the verification of its signatures, its PCK
//! certificate chain up to a pinned Intel root and the TD's claims.
//!
//! The layout is that of Intel's "TDX DCAP Quoting Library API" (appendix:
//! quote format, version 4). It was taken from public code that follows
//! it, not from the PDF itself: the sizes of Intel's
//! `SGX-TDX-DCAP-QuoteVerificationLibrary` (`QuoteConstants.h`, as cited by
//! `automata-network/automata-dcap-attestation`), parsers derived from
//! Google's `go-tdx-guest` (`abi/abi.go`), and the QE report data
//! binding as `dcap-qvl`-style verifiers build it (no code taken from
//! them); then checked end to end against a real quote (`tests/tdx.rs`),
//! whose signatures verify only if every offset below is right:
//!
//! * header, 48 bytes: version (u16, 4), attestation key type (u16, 2:
//!   ECDSA P-256), TEE type (u32, 0x81: TDX), QE SVN (u16), PCE SVN (u16),
//!   QE vendor id (16), user data (20); integers little-endian;
//! * TD report body, 584 bytes ([`TdReport`]);
//! * the length of the signature data (u32), then the signature data:
//!   the quote's ECDSA signature r‖s (64) over header‖body (632 bytes),
//!   the attestation public key x‖y (64), and certification data of type
//!   6 (u16 type, u32 size): the QE's SGX report body (384; its report
//!   data is its last 64 bytes), the QE report's signature (64) by the
//!   PCK key, the QE authentication data (u16 size, bytes), and inner
//!   certification data of type 5 (u16, u32 size): the PCK certificate
//!   chain, PEM, leaf first (Intel's library ends it with a NUL byte);
//! * zeros may follow the signature data (a real quote came padded).
//!
//! The chain is the PCK leaf (per platform) signed by an Intel SGX PCK
//! Platform or Processor CA, signed by the Intel SGX Root CA, which must
//! be byte-equal to a pinned root ([`TrustedRoot::intel`]). Every
//! signature is ECDSA P-256 with SHA-256: DER-encoded in certificates,
//! r‖s (32 bytes each, big-endian) for the QE report and the quote.
//! ring does the cryptography; x509-parser reads the certificates.

use std::fmt;
use std::time::SystemTime;

use ring::digest::{SHA256, digest};
use ring::signature::{ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
use x509_parser::certificate::X509Certificate;
use x509_parser::oid_registry::{OID_EC_P256, OID_SIG_ECDSA_WITH_SHA256};

use super::x509::{self, CertProblem, Revocation, Signed, ec_point, hex};
use crate::enclave::REPORT_DATA_LEN;

/// The quote version this verifier reads.
pub const QUOTE_VERSION: u16 = 4;
/// Attestation key type ECDSA P-256 with SHA-256.
pub const ATT_KEY_TYPE_ECDSA_P256: u16 = 2;
/// TEE type of TDX.
pub const TEE_TYPE_TDX: u32 = 0x81;
/// Length of the quote header.
pub const HEADER_LEN: usize = 48;
/// Length of a TD report body (TDX 1.0, as in version 4 quotes).
pub const TD_REPORT_LEN: usize = 584;
/// Length of the bytes the quote signature covers: header and body.
pub const SIGNED_LEN: usize = HEADER_LEN + TD_REPORT_LEN;
/// Length of an SGX report body (the QE's report).
pub const QE_REPORT_LEN: usize = 384;
/// Byte offset of the report data in an SGX report body.
pub const QE_REPORT_DATA_AT: usize = 320;
/// Certification data type of QE report certification data.
pub const CERT_DATA_QE_REPORT: u16 = 6;
/// Certification data type of a PEM PCK certificate chain.
pub const CERT_DATA_PCK_CHAIN: u16 = 5;
/// Length of a TDX measurement register (MRTD, RTMRs, ...).
pub const MR_LEN: usize = 48;
/// Length of `TEE_TCB_SVN`.
pub const TEE_TCB_SVN_LEN: usize = 16;
/// Byte offset of `TEE_TCB_SVN` in a quote.
pub const TEE_TCB_SVN_AT: usize = HEADER_LEN;
/// Byte offset of `TD_ATTRIBUTES` in a quote.
pub const TD_ATTRIBUTES_AT: usize = HEADER_LEN + 120;
/// Byte offset of `MRTD` in a quote.
pub const MRTD_AT: usize = HEADER_LEN + 136;
/// Byte offset of `RTMR0` in a quote (the four RTMRs follow each other).
pub const RTMR_AT: usize = HEADER_LEN + 328;
/// Byte offset of `REPORT_DATA` in a quote.
pub const REPORT_DATA_AT: usize = HEADER_LEN + 520;
/// The `DEBUG` bit of `TD_ATTRIBUTES`: the host can read the TD's state.
pub const TD_ATTRIBUTES_DEBUG: u64 = 1;
/// Largest quote read (a quote with its PEM chain takes a few KiB).
pub const MAX_QUOTE_LEN: usize = 1 << 16;
/// Most certificates read from a quote's PCK chain (leaf, CA, root).
pub const MAX_CHAIN_CERTS: usize = 3;
/// Common names of the Intel CAs that issue PCK certificates.
pub const PCK_CA_NAMES: [&str; 2] = ["Intel SGX PCK Platform CA", "Intel SGX PCK Processor CA"];

/// Why a TDX quote was refused. Messages carry no secret: a quote, its
/// certificates and the measurements are public.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TdxError {
    /// A quote longer than [`MAX_QUOTE_LEN`].
    #[error("a quote of {0} bytes (at most {MAX_QUOTE_LEN} are read)")]
    TooLong(usize),
    /// A field that runs past the end of its enclosing structure.
    #[error(
        "malformed quote: the {what} ({need} bytes at offset {at}) runs past the end ({len} bytes)"
    )]
    Truncated {
        /// Which field.
        what: &'static str,
        /// Its offset in the enclosing structure.
        at: usize,
        /// Its length.
        need: usize,
        /// The enclosing structure's length.
        len: usize,
    },
    /// Bytes after a structure that should end there.
    #[error("malformed quote: {0} bytes after the {1}")]
    TrailingBytes(usize, &'static str),
    /// A quote version this verifier does not read.
    #[error("quote version {0} is not supported (only {QUOTE_VERSION})")]
    UnsupportedVersion(u16),
    /// An attestation key other than ECDSA P-256.
    #[error("attestation key type {0} is not supported (only 2: ECDSA P-256)")]
    UnsupportedKeyType(u16),
    /// A quote of another TEE than TDX (an SGX quote).
    #[error("TEE type {0:#x} is not TDX (0x81)")]
    NotTdx(u32),
    /// Certification data of an unexpected type.
    #[error("the {which} certification data has type {got} (expected {want})")]
    CertDataType {
        /// `outer` (QE report, 6) or `inner` (PCK chain, 5).
        which: &'static str,
        /// The quote's.
        got: u16,
        /// The expected one.
        want: u16,
    },
    /// A PCK chain that is not PEM certificates, or too many of them.
    #[error("malformed PCK certificate chain: {0}")]
    PemChain(String),
    /// A certificate that does not parse or cannot be used.
    #[error("certificate {which}: {reason}")]
    Certificate {
        /// `PCK`, `PCK CA` or `root`.
        which: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A certificate outside its validity period.
    #[error("certificate {0} is not valid now (expired or not yet valid)")]
    Expired(&'static str),
    /// The root in the quote's chain is not one of the pinned roots.
    #[error("the root certificate in the quote is not a pinned root")]
    UnpinnedRoot,
    /// A link of the chain whose signature does not verify.
    #[error("certificate chain: {0}")]
    Chain(String),
    /// A CRL given in [`TdxPolicy::crls`] that does not parse.
    #[error("malformed CRL: {0}")]
    Crl(String),
    /// Revocation checking was asked ([`TdxPolicy::crls`] not empty) and
    /// no CRL given is issued by the root or the PCK CA of the chain.
    #[error("no CRL given is issued by the {0} (revocation checking was asked)")]
    NoCrl(String),
    /// The root's or the PCK CA's CRL is not current: issued after the
    /// verification time, without a next update, or past it.
    #[error("the {0}'s CRL is out of date (fetch a current one from Intel's PCS)")]
    CrlOutOfDate(String),
    /// The PCK CA is listed in the root's CRL, or the PCK certificate in
    /// the PCK CA's.
    #[error("the {0} certificate of the quote is revoked")]
    Revoked(&'static str),
    /// The QE report's signature does not verify under the PCK key.
    #[error("the QE report's signature does not verify under the PCK certificate's key")]
    BadQeReportSignature,
    /// The QE report's data does not bind the attestation key and QE
    /// authentication data.
    #[error(
        "the QE report's data does not bind the attestation key (SHA-256 of key and QE authentication data, then zeros)"
    )]
    QeReportDataMismatch,
    /// The quote's signature does not verify under the attestation key (a
    /// forged or modified quote).
    #[error("the quote's signature does not verify under its attestation key")]
    BadSignature,
    /// `REPORT_DATA` does not bind the TLS key and nonce (a quote made for
    /// another connection: stale, replayed or relayed).
    #[error("the quote's REPORT_DATA does not bind this TLS key and nonce")]
    ReportDataMismatch,
    /// A TD launched with the debug attribute (the host can read it).
    #[error("the TD attributes allow debugging ({0:#x}); refusing a debuggable TD")]
    DebugTd(u64),
    /// An MRTD other than the expected one.
    #[error("the MRTD {got} is not the expected {want}")]
    MrtdMismatch {
        /// The quote's, hex.
        got: String,
        /// The expected, hex.
        want: String,
    },
    /// An RTMR other than the expected one.
    #[error("RTMR{index} {got} is not the expected {want}")]
    RtmrMismatch {
        /// Which RTMR (0 to 3).
        index: usize,
        /// The quote's, hex.
        got: String,
        /// The expected, hex.
        want: String,
    },
    /// A byte of `TEE_TCB_SVN` below the policy's minimum.
    #[error("TEE_TCB_SVN byte {index} is {found}, below the minimum {minimum}")]
    TcbSvnBelowMinimum {
        /// The byte's index (0 to 15).
        index: usize,
        /// The quote's.
        found: u8,
        /// The policy's minimum.
        minimum: u8,
    },
}

type Result<T> = std::result::Result<T, TdxError>;

/// Reads fields off a byte string, each bounded by its end.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8]) -> Self {
        Self { b, at: 0 }
    }

    fn take(&mut self, need: usize, what: &'static str) -> Result<&'a [u8]> {
        let out = self
            .at
            .checked_add(need)
            .and_then(|end| self.b.get(self.at..end))
            .ok_or(TdxError::Truncated {
                what,
                at: self.at,
                need,
                len: self.b.len(),
            })?;
        self.at += need;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        Ok(self.take(N, what)?.try_into().expect("N bytes"))
    }

    fn u16(&mut self, what: &'static str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A certification data entry: its type (u16, which must be `want`),
    /// its size (u32) and that many bytes; `names` name the three in
    /// errors.
    fn cert_data(
        &mut self,
        which: &'static str,
        want: u16,
        names: [&'static str; 3],
    ) -> Result<&'a [u8]> {
        let got = self.u16(names[0])?;
        if got != want {
            return Err(TdxError::CertDataType { which, got, want });
        }
        let len = self.u32(names[1])? as usize;
        self.take(len, names[2])
    }

    fn end_or_zeros(&self, what: &'static str) -> Result<()> {
        match self.b[self.at..].iter().all(|&b| b == 0) {
            true => Ok(()),
            false => Err(TdxError::TrailingBytes(self.b.len() - self.at, what)),
        }
    }

    fn end(&self, what: &'static str) -> Result<()> {
        match self.b.len() - self.at {
            0 => Ok(()),
            n => Err(TdxError::TrailingBytes(n, what)),
        }
    }
}

/// A TD report body (TDX 1.0, 584 bytes), integers little-endian.
#[derive(Clone, PartialEq, Eq)]
pub struct TdReport {
    /// `TEE_TCB_SVN`: the TDX module's and platform's security versions.
    pub tee_tcb_svn: [u8; TEE_TCB_SVN_LEN],
    /// `MRSEAM`: the TDX module's measurement.
    pub mrseam: [u8; MR_LEN],
    /// `MRSIGNERSEAM`: the TDX module signer's (zeros for Intel's).
    pub mrsignerseam: [u8; MR_LEN],
    /// `SEAM_ATTRIBUTES`.
    pub seam_attributes: u64,
    /// `TD_ATTRIBUTES` (bit 0: debug).
    pub td_attributes: u64,
    /// `XFAM`: the extended features the TD may use.
    pub xfam: u64,
    /// `MRTD`: the TD's build-time measurement (its initial image).
    pub mrtd: [u8; MR_LEN],
    /// `MRCONFIGID`: set by the host at launch.
    pub mrconfigid: [u8; MR_LEN],
    /// `MROWNER`: set by the host at launch.
    pub mrowner: [u8; MR_LEN],
    /// `MROWNERCONFIG`: set by the host at launch.
    pub mrownerconfig: [u8; MR_LEN],
    /// `RTMR0` to `RTMR3`: run-time measurements (firmware, kernel, ...).
    pub rtmrs: [[u8; MR_LEN]; 4],
    /// `REPORT_DATA`: what the TD asked to bind.
    pub report_data: [u8; REPORT_DATA_LEN],
}

impl fmt::Debug for TdReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TdReport")
            .field("tee_tcb_svn", &hex(&self.tee_tcb_svn))
            .field("td_attributes", &format_args!("{:#x}", self.td_attributes))
            .field("mrtd", &hex(&self.mrtd))
            .finish_non_exhaustive()
    }
}

impl TdReport {
    fn read(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            tee_tcb_svn: r.array("TEE_TCB_SVN")?,
            mrseam: r.array("MRSEAM")?,
            mrsignerseam: r.array("MRSIGNERSEAM")?,
            seam_attributes: r.u64("SEAM_ATTRIBUTES")?,
            td_attributes: r.u64("TD_ATTRIBUTES")?,
            xfam: r.u64("XFAM")?,
            mrtd: r.array("MRTD")?,
            mrconfigid: r.array("MRCONFIGID")?,
            mrowner: r.array("MROWNER")?,
            mrownerconfig: r.array("MROWNERCONFIG")?,
            rtmrs: [
                r.array("RTMR0")?,
                r.array("RTMR1")?,
                r.array("RTMR2")?,
                r.array("RTMR3")?,
            ],
            report_data: r.array("REPORT_DATA")?,
        })
    }
}

/// The parts of a version 4 TDX quote this verifier uses.
#[derive(Clone, PartialEq, Eq)]
pub struct Quote<'a> {
    /// The header's QE security version.
    pub qe_svn: u16,
    /// The header's PCE security version.
    pub pce_svn: u16,
    /// The TD report body.
    pub body: TdReport,
    /// The signed bytes: header and body.
    pub signed: &'a [u8],
    /// The quote's signature, r‖s big-endian.
    pub signature: [u8; 64],
    /// The attestation public key, x‖y big-endian.
    pub attestation_key: [u8; 64],
    /// The QE's SGX report body (384 bytes).
    pub qe_report: &'a [u8],
    /// The QE report's signature by the PCK key, r‖s big-endian.
    pub qe_report_signature: [u8; 64],
    /// The QE authentication data.
    pub qe_auth_data: &'a [u8],
    /// The PCK certificate chain, PEM.
    pub pck_chain: &'a [u8],
}

impl fmt::Debug for Quote<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quote")
            .field("qe_svn", &self.qe_svn)
            .field("pce_svn", &self.pce_svn)
            .field("body", &self.body)
            .field("pck_chain_bytes", &self.pck_chain.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Quote<'a> {
    /// Parses a quote: its header must name version 4, an ECDSA P-256
    /// attestation key and TDX; every length is bounded by its enclosing
    /// structure, and only zeros may follow the signature data. Verifies
    /// nothing (see [`verify_quote`]).
    pub fn parse(b: &'a [u8]) -> Result<Self> {
        if b.len() > MAX_QUOTE_LEN {
            return Err(TdxError::TooLong(b.len()));
        }
        let mut r = Reader::new(b);
        // The header is checked before the rest is read: another version,
        // key or TEE has another layout, and should be named as such.
        let version = r.u16("version")?;
        if version != QUOTE_VERSION {
            return Err(TdxError::UnsupportedVersion(version));
        }
        let key_type = r.u16("attestation key type")?;
        if key_type != ATT_KEY_TYPE_ECDSA_P256 {
            return Err(TdxError::UnsupportedKeyType(key_type));
        }
        let tee_type = r.u32("TEE type")?;
        if tee_type != TEE_TYPE_TDX {
            return Err(TdxError::NotTdx(tee_type));
        }
        let qe_svn = r.u16("QE SVN")?;
        let pce_svn = r.u16("PCE SVN")?;
        r.take(16 + 20, "QE vendor id and user data")?;
        let body = TdReport::read(&mut r)?;
        let signed = &b[..SIGNED_LEN];
        let sig_len = r.u32("signature data length")? as usize;
        let sig_data = r.take(sig_len, "signature data")?;
        // Quotes as guests receive them may be padded with zeros (seen in
        // a dstack quote read through configfs-tsm): no signature covers
        // them, so zeros are harmless; anything else is refused.
        r.end_or_zeros("signature data")?;

        let mut s = Reader::new(sig_data);
        let signature = s.array("quote signature")?;
        let attestation_key = s.array("attestation key")?;
        let outer = s.cert_data(
            "outer",
            CERT_DATA_QE_REPORT,
            [
                "certification data type",
                "certification data size",
                "certification data",
            ],
        )?;
        s.end("certification data")?;

        let mut c = Reader::new(outer);
        let qe_report = c.take(QE_REPORT_LEN, "QE report")?;
        let qe_report_signature = c.array("QE report signature")?;
        let auth_len = c.u16("QE authentication data size")? as usize;
        let qe_auth_data = c.take(auth_len, "QE authentication data")?;
        let pck_chain = c.cert_data(
            "inner",
            CERT_DATA_PCK_CHAIN,
            [
                "PCK certification data type",
                "PCK certification data size",
                "PCK certificate chain",
            ],
        )?;
        c.end("PCK certificate chain")?;

        Ok(Self {
            qe_svn,
            pce_svn,
            body,
            signed,
            signature,
            attestation_key,
            qe_report,
            qe_report_signature,
            qe_auth_data,
            pck_chain,
        })
    }
}

/// The DER certificates of a PEM chain, in order. Intel's quoting
/// library ends the chain with a NUL byte, which is allowed, as is
/// whitespace between certificates; anything else is refused. Each block
/// is cut out here (ASCII only) before x509-parser decodes it, so that
/// garbage never reaches its line reader.
fn pem_chain(pem: &[u8]) -> Result<Vec<Vec<u8>>> {
    const BEGIN: &[u8] = b"-----BEGIN CERTIFICATE-----";
    const END: &[u8] = b"-----END CERTIFICATE-----";
    let bad = |m: String| TdxError::PemChain(m);
    let text = pem.trim_ascii_end();
    let text = text.strip_suffix(b"\0").unwrap_or(text).trim_ascii();
    if !text.is_ascii() {
        return Err(bad("it is not ASCII".into()));
    }
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let mut out = vec![];
    let mut rest = text;
    while !rest.is_empty() {
        if out.len() == MAX_CHAIN_CERTS {
            return Err(bad(format!("more than {MAX_CHAIN_CERTS} certificates")));
        }
        if !rest.starts_with(BEGIN) {
            return Err(bad(format!(
                "certificate {} does not start with {}",
                out.len(),
                String::from_utf8_lossy(BEGIN)
            )));
        }
        let end = find(rest, END)
            .ok_or_else(|| bad(format!("certificate {} has no END line", out.len())))?
            + END.len();
        let (_, pem) = x509_parser::pem::parse_x509_pem(&rest[..end])
            .map_err(|e| bad(format!("certificate {}: {e}", out.len())))?;
        if pem.label != "CERTIFICATE" {
            return Err(bad(format!("a PEM {:?}, not a CERTIFICATE", pem.label)));
        }
        out.push(pem.contents);
        rest = rest[end..].trim_ascii_start();
    }
    Ok(out)
}

/// `which` in `der` ([`x509::parse_cert`]), within its validity period at
/// `at` (`None`: now).
fn parse_cert<'a>(
    which: &'static str,
    der: &'a [u8],
    at: Option<SystemTime>,
) -> Result<X509Certificate<'a>> {
    x509::parse_cert(der, at).map_err(|e| match e {
        CertProblem::Malformed(reason) => TdxError::Certificate { which, reason },
        CertProblem::Expired => TdxError::Expired(which),
    })
}

/// The uncompressed P-256 point of an EC P-256 key, or `None`.
fn p256_point<'a>(cert: &'a X509Certificate<'_>) -> Option<&'a [u8]> {
    ec_point(cert, &OID_EC_P256)
}

/// Verifies that `issuer`'s P-256 key signed `cert` with ECDSA SHA-256,
/// the one algorithm of Intel's PCK hierarchy.
fn check_signed_by(
    cert: &X509Certificate<'_>,
    which: &'static str,
    issuer: &X509Certificate<'_>,
    issuer_name: &'static str,
) -> Result<()> {
    check_signature(&Signed::cert(cert), which, issuer, issuer_name)
}

/// Verifies that `issuer`'s P-256 key made `signed`'s signature with
/// ECDSA SHA-256 (`which` names what was signed).
fn check_signature(
    signed: &Signed<'_>,
    which: &'static str,
    issuer: &X509Certificate<'_>,
    issuer_name: &'static str,
) -> Result<()> {
    if signed.alg.algorithm != OID_SIG_ECDSA_WITH_SHA256 {
        return Err(TdxError::Certificate {
            which,
            reason: format!(
                "signature algorithm {} (accepted: ECDSA with SHA-256)",
                signed.alg.algorithm
            ),
        });
    }
    let point = p256_point(issuer).ok_or_else(|| {
        TdxError::Chain(format!(
            "the {issuer_name} has no P-256 key to verify the {which} with"
        ))
    })?;
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, point)
        .verify(signed.data, signed.signature)
        .map_err(|_| TdxError::Chain(format!("the {which} is not signed by the {issuer_name}")))
}

/// Checks `cert` (`which`) against the CRLs among `crls` that `issuer`
/// (`issuer_name`, for messages) issued, at `at`: whether it did (`false`
/// when `crls` is empty).
fn check_revocation(
    crls: &[Vec<u8>],
    issuer: &X509Certificate<'_>,
    issuer_name: &str,
    cert: &X509Certificate<'_>,
    which: &'static str,
    at: Option<SystemTime>,
) -> Result<bool> {
    x509::check_revocation(crls, issuer, cert, at, |signed| {
        check_signature(signed, "CRL", issuer, "issuer it names")
    })
    .map_err(|e| match e {
        Revocation::Malformed(reason) => TdxError::Crl(reason),
        Revocation::Signature(e) => e,
        Revocation::OutOfDate => TdxError::CrlOutOfDate(issuer_name.into()),
        Revocation::Revoked => TdxError::Revoked(which),
        Revocation::NoCrl => TdxError::NoCrl(issuer_name.into()),
    })
}

/// Whether `cert` says it is a CA (basic constraints, `cA` true).
fn is_ca(cert: &X509Certificate<'_>) -> bool {
    matches!(cert.basic_constraints(), Ok(Some(bc)) if bc.value.ca)
}

/// A pinned Intel root: a self-signed certificate that PCK CAs chain to.
#[derive(Clone, PartialEq, Eq)]
pub struct TrustedRoot {
    /// A name for messages (`Intel SGX Root CA`, or a test name).
    pub name: String,
    /// The certificate, DER.
    pub der: Vec<u8>,
}

impl fmt::Debug for TrustedRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustedRoot")
            .field("name", &self.name)
            .field("der_bytes", &self.der.len())
            .finish()
    }
}

/// Intel's SGX Root CA (PEM), the root of the PCK certificates of SGX and
/// TDX platforms; see `certs/intel/README.md` for its origin and
/// fingerprint.
const INTEL_ROOT: &str = include_str!("../../certs/intel/sgx-root-ca.pem");

impl TrustedRoot {
    /// Intel's SGX Root CA, built in.
    pub fn intel() -> Self {
        Self {
            name: "Intel SGX Root CA".into(),
            der: super::snp::cert_der(INTEL_ROOT.as_bytes()).expect("the built-in Intel root"),
        }
    }
}

/// Checks a pinned root on its own: it parses, is valid now, is a CA and
/// its self-signature verifies (ECDSA P-256 SHA-256).
pub fn check_root(root: &TrustedRoot) -> Result<()> {
    let cert = parse_cert("root", &root.der, None)?;
    if !is_ca(&cert) {
        return Err(TdxError::Certificate {
            which: "root",
            reason: "it is not a CA".into(),
        });
    }
    check_signed_by(&cert, "root", &cert, "root itself")
}

/// What the verifier requires of a quote.
#[derive(Clone, PartialEq, Eq)]
pub struct TdxPolicy {
    /// The expected MRTD; `None`: any (reported as not pinned in
    /// [`TdxVerified::mrtd_pinned`]).
    pub mrtd: Option<[u8; MR_LEN]>,
    /// The expected RTMR0 to RTMR3, each when given; `None`: any
    /// (reported in [`TdxVerified::rtmrs_pinned`]).
    pub rtmrs: [Option<[u8; MR_LEN]>; 4],
    /// Minimum `TEE_TCB_SVN`, byte by byte; `None`: any (reported in
    /// [`TdxVerified::min_tee_tcb_svn_checked`]).
    pub min_tee_tcb_svn: Option<[u8; TEE_TCB_SVN_LEN]>,
    /// The pinned roots ([`TrustedRoot::intel`] by default).
    pub roots: Vec<TrustedRoot>,
    /// When the certificates must be valid; `None` (the default): now. A
    /// fixed time verifies a recorded quote after its PCK certificate
    /// expired (tests, audits of old sessions).
    pub at: Option<SystemTime>,
    /// Certificate revocation lists (DER), such as Intel's PCS serves:
    /// the root CA's (`https://certificates.trustedservices.intel.com/IntelSGXRootCA.der`)
    /// and the PCK CAs' (`.../sgx/certification/v4/pckcrl?ca=platform`
    /// or `?ca=processor`). Empty (the default): revocation is not checked
    /// (reported in [`TdxVerified::revocation_checked`]). Otherwise the
    /// root's CRL and the PCK CA's must be among them, signed by their
    /// issuer and current at [`TdxPolicy::at`], and must not list the PCK
    /// CA and the PCK certificate.
    pub crls: Vec<Vec<u8>>,
}

impl Default for TdxPolicy {
    fn default() -> Self {
        Self {
            mrtd: None,
            rtmrs: [None; 4],
            min_tee_tcb_svn: None,
            roots: vec![TrustedRoot::intel()],
            at: None,
            crls: vec![],
        }
    }
}

impl fmt::Debug for TdxPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let opt = |m: &Option<[u8; MR_LEN]>| m.as_ref().map(|m| hex(m));
        f.debug_struct("TdxPolicy")
            .field("mrtd", &opt(&self.mrtd))
            .field("rtmrs", &self.rtmrs.iter().map(opt).collect::<Vec<_>>())
            .field(
                "min_tee_tcb_svn",
                &self.min_tee_tcb_svn.as_ref().map(|m| hex(m)),
            )
            .field("roots", &self.roots)
            .field("at", &self.at)
            .field("crls", &self.crls.len())
            .finish()
    }
}

/// What [`verify_quote`] established.
#[derive(Clone, PartialEq, Eq)]
pub struct TdxVerified {
    /// The pinned root the chain ends in.
    pub root: String,
    /// The common name of the PCK CA that issued the PCK certificate.
    pub pck_ca: String,
    /// The header's QE security version (not compared: that needs Intel's
    /// QE identity collateral).
    pub qe_svn: u16,
    /// The header's PCE security version (not compared).
    pub pce_svn: u16,
    /// The TD report body (its debug bit is off, its report data binds
    /// the connection).
    pub report: TdReport,
    /// Whether MRTD was compared with an expected value; when `false` any
    /// TD image on a genuine Intel platform passes.
    pub mrtd_pinned: bool,
    /// Which RTMRs were compared with an expected value.
    pub rtmrs_pinned: [bool; 4],
    /// Whether `TEE_TCB_SVN` was compared with a minimum; when `false` a
    /// TDX module at any version passes.
    pub min_tee_tcb_svn_checked: bool,
    /// Whether the PCK CA and the PCK certificate were checked against
    /// their issuers' CRLs ([`TdxPolicy::crls`]); when `false` a revoked
    /// one passes.
    pub revocation_checked: bool,
}

impl fmt::Debug for TdxVerified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TdxVerified")
            .field("root", &self.root)
            .field("pck_ca", &self.pck_ca)
            .field("qe_svn", &self.qe_svn)
            .field("pce_svn", &self.pce_svn)
            .field("tee_tcb_svn", &hex(&self.report.tee_tcb_svn))
            .field(
                "td_attributes",
                &format_args!("{:#x}", self.report.td_attributes),
            )
            .field("mrtd", &hex(&self.report.mrtd))
            .field("mrtd_pinned", &self.mrtd_pinned)
            .field("rtmrs_pinned", &self.rtmrs_pinned)
            .field("min_tee_tcb_svn_checked", &self.min_tee_tcb_svn_checked)
            .field("revocation_checked", &self.revocation_checked)
            .finish()
    }
}

impl TdxVerified {
    /// MRTD, hex.
    pub fn mrtd_hex(&self) -> String {
        hex(&self.report.mrtd)
    }

    /// `TEE_TCB_SVN`, hex.
    pub fn tee_tcb_svn_hex(&self) -> String {
        hex(&self.report.tee_tcb_svn)
    }
}

/// Verifies the PCK chain of a quote: leaf ← PCK CA ← pinned root. The
/// quote's chain is the leaf, the CA and optionally the root, which must
/// then be byte-equal to a pinned one. With `crls`, the CA is checked
/// against the root's CRL and the leaf against the CA's. Returns the
/// leaf's P-256 point, the CA's name, the root's name and whether
/// revocation was checked.
fn verify_chain(
    pem: &[u8],
    roots: &[TrustedRoot],
    at: Option<SystemTime>,
    crls: &[Vec<u8>],
) -> Result<(Vec<u8>, String, String, bool)> {
    if roots.is_empty() {
        return Err(TdxError::Chain("no pinned root".into()));
    }
    let ders = pem_chain(pem)?;
    let (leaf_der, ca_der, root_der) = match &ders[..] {
        [leaf, ca] => (leaf, ca, None),
        [leaf, ca, root] => (leaf, ca, Some(root)),
        other => {
            return Err(TdxError::PemChain(format!(
                "{} certificates (expected the PCK certificate, its CA and optionally the root)",
                other.len()
            )));
        }
    };
    // A quote's root must be pinned; it then picks the root.
    let roots: Vec<&TrustedRoot> = match root_der {
        Some(der) => vec![
            roots
                .iter()
                .find(|r| r.der == *der)
                .ok_or(TdxError::UnpinnedRoot)?,
        ],
        None => roots.iter().collect(),
    };
    let leaf = parse_cert("PCK", leaf_der, at)?;
    let ca = parse_cert("PCK CA", ca_der, at)?;
    let ca_name = ca
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string();
    // The Intel root signs other CAs and leaves (TCB signing) too: only
    // a PCK CA may vouch for a PCK key.
    if !is_ca(&ca) || !PCK_CA_NAMES.contains(&ca_name.as_str()) {
        return Err(TdxError::Certificate {
            which: "PCK CA",
            reason: format!(
                "{ca_name:?} is not a PCK CA (a CA named {})",
                PCK_CA_NAMES.join(" or ")
            ),
        });
    }
    let mut errors = vec![];
    for root in &roots {
        let root_cert = parse_cert("root", &root.der, at)?;
        check_signed_by(&root_cert, "root", &root_cert, "root itself")?;
        match check_signed_by(&ca, "PCK CA", &root_cert, "root")
            .and_then(|()| check_signed_by(&leaf, "PCK", &ca, "PCK CA"))
        {
            Ok(()) => {
                let root_name = format!("root {}", root.name);
                let checked = check_revocation(crls, &root_cert, &root_name, &ca, "PCK CA", at)?;
                let ca_label = format!("PCK CA {ca_name}");
                check_revocation(crls, &ca, &ca_label, &leaf, "PCK", at)?;
                let point = p256_point(&leaf).ok_or_else(|| TdxError::Certificate {
                    which: "PCK",
                    reason: "its key is not an ECDSA P-256 key".into(),
                })?;
                return Ok((point.to_vec(), ca_name, root.name.clone(), checked));
            }
            Err(e) => errors.push((root, e)),
        }
    }
    if let [(_, e)] = &errors[..] {
        return Err(e.clone());
    }
    Err(TdxError::Chain(format!(
        "the PCK CA does not chain to a pinned root ({})",
        errors
            .iter()
            .map(|(r, e)| format!("{}: {e}", r.name))
            .collect::<Vec<_>>()
            .join("; ")
    )))
}

/// Verifies a TDX quote, in this order: its layout ([`Quote::parse`]:
/// version 4, ECDSA P-256 attestation key, TDX); the PCK chain from the
/// quote (leaf ← PCK CA ← pinned root, each valid now); the QE report's
/// signature under the PCK key; the QE report's data binding the
/// attestation key (SHA-256 of the key and the QE authentication data,
/// then 32 zero bytes); the quote's signature over header and body under
/// the attestation key; then the TD's claims: `REPORT_DATA` equal to
/// `expected_data`, the debug attribute off, MRTD, RTMRs and minimum
/// `TEE_TCB_SVN` as `policy` says.
pub fn verify_quote(
    quote: &[u8],
    expected_data: &[u8; REPORT_DATA_LEN],
    policy: &TdxPolicy,
) -> Result<TdxVerified> {
    let q = Quote::parse(quote)?;
    let (pck_key, pck_ca, root, revocation_checked) =
        verify_chain(q.pck_chain, &policy.roots, policy.at, &policy.crls)?;
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &pck_key)
        .verify(q.qe_report, &q.qe_report_signature)
        .map_err(|_| TdxError::BadQeReportSignature)?;
    let mut bound = q.attestation_key.to_vec();
    bound.extend_from_slice(q.qe_auth_data);
    let qe_data = &q.qe_report[QE_REPORT_DATA_AT..QE_REPORT_DATA_AT + 64];
    if qe_data[..32] != *digest(&SHA256, &bound).as_ref() || qe_data[32..].iter().any(|&b| b != 0) {
        return Err(TdxError::QeReportDataMismatch);
    }
    let mut att_key = Vec::with_capacity(65);
    att_key.push(0x04);
    att_key.extend_from_slice(&q.attestation_key);
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &att_key)
        .verify(q.signed, &q.signature)
        .map_err(|_| TdxError::BadSignature)?;

    let body = q.body;
    if body.report_data != *expected_data {
        return Err(TdxError::ReportDataMismatch);
    }
    if body.td_attributes & TD_ATTRIBUTES_DEBUG != 0 {
        return Err(TdxError::DebugTd(body.td_attributes));
    }
    if let Some(want) = &policy.mrtd
        && *want != body.mrtd
    {
        return Err(TdxError::MrtdMismatch {
            got: hex(&body.mrtd),
            want: hex(want),
        });
    }
    for (index, (want, got)) in policy.rtmrs.iter().zip(&body.rtmrs).enumerate() {
        if let Some(want) = want
            && want != got
        {
            return Err(TdxError::RtmrMismatch {
                index,
                got: hex(got),
                want: hex(want),
            });
        }
    }
    if let Some(min) = &policy.min_tee_tcb_svn {
        for (index, (&found, &minimum)) in body.tee_tcb_svn.iter().zip(min).enumerate() {
            if found < minimum {
                return Err(TdxError::TcbSvnBelowMinimum {
                    index,
                    found,
                    minimum,
                });
            }
        }
    }
    Ok(TdxVerified {
        root,
        pck_ca,
        qe_svn: q.qe_svn,
        pce_svn: q.pce_svn,
        report: body,
        mrtd_pinned: policy.mrtd.is_some(),
        rtmrs_pinned: policy.rtmrs.map(|r| r.is_some()),
        min_tee_tcb_svn_checked: policy.min_tee_tcb_svn.is_some(),
        revocation_checked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_intel_root_parses_is_self_signed_and_verifies() {
        let root = TrustedRoot::intel();
        check_root(&root).unwrap();
        let cert = parse_cert("root", &root.der, None).unwrap();
        assert_eq!(cert.subject(), cert.issuer());
        assert_eq!(
            cert.subject().to_string(),
            "CN=Intel SGX Root CA, O=Intel Corporation, L=Santa Clara, ST=CA, C=US"
        );
        // The fingerprint in certs/intel/README.md.
        assert_eq!(
            hex(digest(&SHA256, &root.der).as_ref()),
            "44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3"
        );
        // A flipped signature byte no longer verifies.
        let mut flipped = root.clone();
        let n = flipped.der.len();
        flipped.der[n - 3] ^= 1;
        assert!(check_root(&flipped).is_err());
    }

    #[test]
    fn pem_chains_allow_a_final_nul_and_refuse_garbage() {
        let one = INTEL_ROOT.as_bytes();
        let mut two = one.to_vec();
        two.extend_from_slice(one);
        two.push(0);
        assert_eq!(pem_chain(&two).unwrap().len(), 2);
        let mut four = two.clone();
        four.pop();
        four.extend_from_slice(&two);
        assert!(matches!(pem_chain(&four), Err(TdxError::PemChain(_))));
        for bad in [
            &b"garbage"[..],
            b"-----BEGIN CERTIFICATE-----\nAAAA",
            b"\xff\xfe",
            b"\0\0",
        ] {
            assert!(
                matches!(pem_chain(bad), Err(TdxError::PemChain(_))),
                "{bad:?}"
            );
        }
        assert_eq!(pem_chain(b"").unwrap().len(), 0);
    }
}
