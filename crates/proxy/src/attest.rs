//! Attestation reports through the Linux configfs-tsm interface, and the
//! client's verification of a report: signed by a genuine AMD chip (SEV-SNP)
//! or Intel platform (TDX), bound to the proxy's TLS key and the client's
//! nonce, of an expected guest.
//!
//! In a confidential VM (AMD SEV-SNP, Intel TDX) the kernel exposes
//! `/sys/kernel/config/tsm/report/`: a folder made there is a report
//! request; writing 64 bytes to its `inblob` sets the report data, reading
//! `outblob` returns the report signed by the platform, `provider` names
//! the producer (`sev_guest`, `tdx_guest`) and `generation` counts writes,
//! so that a reader can tell whether another writer raced it.
//! [`ConfigfsTsm`] takes the root folder as a parameter, so tests run
//! against a fake folder.
//!
//! The report data is [`report_data`]: SHA-512 of the proxy's TLS public
//! key bytes (the DER SubjectPublicKeyInfo of its certificate,
//! [`tls_public_key_of`]) followed by the client's 32-byte nonce. A client
//! that sends a fresh nonce and finds it, with the TLS key of the
//! certificate presented on its own connection, in the report knows the
//! report was made for this connection (not replayed, nor relayed by a man
//! in the middle: [`crate::client`] takes the key from the connection).
//!
//! What the client verifies ([`verify`], for `sev_guest` reports:
//! [`snp::verify_report`]):
//!
//! * the report's layout: an SEV-SNP `ATTESTATION_REPORT` of 1184 bytes,
//!   version 2 to 5, signed with ECDSA P-384 SHA-384 by the VCEK or the
//!   VLEK (`SIGNING_KEY` 0 or 1; any other, such as 7, none, is refused:
//!   [`snp::SnpError::UnsupportedSigningKey`]);
//! * the certificate chain: the VCEK (the client's, else the one in the
//!   certificate table the proxy reads from configfs-tsm `auxblob`)
//!   signed by the ASK, the ASK by the ARK, the ARK self-signed and equal
//!   to a pinned root ([`snp::TrustedRoot::amd`]: AMD's Milan, Genoa and
//!   Turin roots, built in); each certificate within its validity period;
//!   for a VLEK-signed report instead: the VLEK from the certificate table
//!   (never the client's VCEK; none: [`snp::SnpError::NoVlek`]) signed by
//!   the ASVK (the table's ASK slot, else the pinned root's ASVK:
//!   [`snp::TrustedRoot::amd`] pins AMD's three), the ASVK by the same
//!   pinned ARK; the intermediate's common name must be an ASVK's
//!   (`SEV-VLEK-<product>`) for a VLEK and an ASK's for a VCEK, so that
//!   neither stands in for the other;
//! * the report's signature over its bytes `[0, 0x2A0)` under the VCEK or
//!   VLEK ([`snp::SnpVerified::signed_by`] says which);
//! * the VCEK was issued for this report's chip and TCB: its AMD
//!   extensions `blSPL`, `teeSPL`, `snpSPL`, `ucodeSPL` (and `fmcSPL` on
//!   Turin) equal the components of `REPORTED_TCB`, and its `hwID` equals
//!   `CHIP_ID` (offset 0x1A0; the first 8 bytes on Turin); a VCEK without
//!   these extensions is refused, and so is a report whose chip id is
//!   masked (zeros) unless [`snp::SnpPolicy::allow_masked_chip_id`] (then
//!   [`snp::SnpVerified::chip_id_checked`] is `false`); a VLEK's TCB
//!   extensions (the same OIDs) equal `REPORTED_TCB` likewise, but a VLEK
//!   is issued to a cloud provider, not to a chip, and has no `hwID`: the
//!   chip id is not checked (`chip_id_checked` is `false`), and its
//!   `csp_id` extension, when present, is reported, not compared
//!   ([`snp::SnpVerified::csp_id`]);
//! * the binding: `REPORT_DATA` (offset 0x50) equals [`report_data`] of the
//!   TLS key and this client's nonce, so a replayed (stale) or relayed
//!   report fails;
//! * the guest policy's debug bit is off; when the client asks
//!   ([`snp::SnpPolicy::refuse_migration_agent`],
//!   [`snp::SnpPolicy::refuse_smt`]), its `MIGRATE_MA` bit is off and the
//!   platform's SMT is disabled (`PLATFORM_INFO`, 0x40); the VMPL is the
//!   expected one (0 by default), and the launch measurement (offset 0x90) equals the
//!   expected one when the client gives one; when it gives none,
//!   [`snp::SnpVerified::measurement_pinned`] says so (any guest image on
//!   a genuine AMD chip then passes);
//! * each component of `REPORTED_TCB` (offset 0x180) is at least the
//!   client's minimum ([`snp::SnpPolicy::min_tcb`]), read in the layout of
//!   the report's CPU family (`CPUID_FAM_ID`, 0x188: Milan and Genoa, or
//!   Turin with its FMC byte; an unknown family is refused); without a
//!   minimum [`snp::SnpVerified::min_tcb_checked`] says so.
//!
//! NOT verified for SEV-SNP: `CURRENT_TCB`, `COMMITTED_TCB` and
//! `LAUNCH_TCB` (returned or ignored, not compared), the VCEK's other AMD
//! extensions (product name, reserved levels), certificate revocation
//! unless the client gives AMD's CRL ([`snp::SnpPolicy::crls`]: the ASK
//! or ASVK against its ARK's CRL), the policy's SMT and migration agent bits unless the
//! client asks, the other policy bits (ABI version, single socket, ...)
//! and platform info bits (TSME, ciphertext hiding, ...), the host data,
//! ID key and author key digests; for a VLEK, its own revocation and its
//! `csp_id` against an expected provider; an ASVK the proxy
//! sends is, like its ASK, checked by its signature by the pinned ARK and
//! its common name, not compared with the pinned one.
//! A proxy that sends no certificate table is verified only with a VCEK
//! given to the client; without one it is refused ([`snp::SnpError::NoVcek`]).
//!
//! What the client verifies of a `tdx_guest` quote ([`tdx::verify_quote`]):
//!
//! * the quote's layout: version 4, attestation key ECDSA P-256 (type 2),
//!   TEE type TDX (0x81), a TD report body of 584 bytes, QE report
//!   certification data (type 6) holding a PEM PCK chain (type 5); every
//!   length bounded, only zeros after the signature data;
//! * the PCK chain from the quote: the PCK certificate signed by an Intel
//!   SGX PCK Platform or Processor CA (a CA by basic constraints and
//!   name), the CA signed by a pinned root ([`tdx::TrustedRoot::intel`]:
//!   Intel's SGX Root CA, built in), a root in the quote byte-equal to a
//!   pinned one; each certificate within its validity period; ECDSA P-256
//!   SHA-256 throughout;
//! * the QE report's signature under the PCK key, and its report data
//!   binding the attestation key: SHA-256 of the key and the QE
//!   authentication data, then 32 zero bytes;
//! * the quote's signature over header and TD report body under the
//!   attestation key;
//! * the binding: `REPORT_DATA` equals [`report_data`] of the TLS key and
//!   this client's nonce;
//! * the TD's `DEBUG` attribute is off; MRTD equals the expected one when
//!   the client gives one ([`tdx::TdxVerified::mrtd_pinned`] says whether
//!   it did), and so does each RTMR the client gives; each byte of
//!   `TEE_TCB_SVN` is at least the client's minimum when it gives one
//!   ([`tdx::TdxVerified::min_tee_tcb_svn_checked`]).
//!
//! NOT verified for TDX: anything that needs Intel's collateral, which
//! the client would fetch from Intel's provisioning certification service:
//! the platform's TCB status (TCB info: whether the platform's microcode,
//! TDX module and `TEE_TCB_SVN` are up to date or revoked; only the
//! client's own minimum `TEE_TCB_SVN` is compared), the QE identity
//! (the QE report's MRSIGNER, ISV SVN and attributes are not compared with
//! Intel's QE identity), certificate revocation unless the client gives
//! Intel's root and PCK CRLs ([`tdx::TdxPolicy::crls`]), and the PCK certificate's SGX extensions (FMSPC, CPU SVN).
//! Quotes of version 5 (TDX 1.5 platforms may produce them) and quotes
//! with other attestation keys are refused. `SEAM_ATTRIBUTES`, `XFAM`,
//! `MRSEAM`, `MRSIGNERSEAM`, `MRCONFIGID`, `MROWNER` and `MROWNERCONFIG`
//! are not compared (returned in [`tdx::TdxVerified::report`]), nor are
//! the header's QE and PCE SVNs. Any provider but
//! `sev_guest` and `tdx_guest` is refused
//! ([`AttestError::UnsupportedProvider`]).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use ring::digest::{SHA512, digest};

use crate::enclave::{Attestation, REPORT_DATA_LEN};
use crate::error::{ProxyError, Result};

pub mod snp;
pub mod tdx;
mod x509;

/// The configfs-tsm report folder of Linux.
pub const DEFAULT_TSM_ROOT: &str = "/sys/kernel/config/tsm/report";
/// Length of the client's nonce.
pub const CLIENT_NONCE_LEN: usize = 32;
/// Largest `outblob` or `auxblob` read (an SEV-SNP report is 1184 bytes,
/// a TDX quote a few KiB, an SEV-SNP certificate table a few KiB).
pub const MAX_REPORT: u64 = 1 << 20;
/// The provider name of SEV-SNP guests.
pub const PROVIDER_SEV_SNP: &str = "sev_guest";
/// The provider name of TDX guests.
pub const PROVIDER_TDX: &str = "tdx_guest";
/// Length of an SEV-SNP `ATTESTATION_REPORT`.
pub const SNP_REPORT_LEN: usize = snp::REPORT_LEN;
/// Byte offset of `REPORT_DATA` in an SEV-SNP `ATTESTATION_REPORT`.
pub const SNP_REPORT_DATA_AT: usize = snp::REPORT_DATA_AT;

/// The report data binding the proxy's TLS public key and a client nonce:
/// SHA-512(tls_public_key || nonce). The nonce has a fixed length, so the
/// concatenation is unambiguous.
pub fn report_data(tls_public_key: &[u8], nonce: &[u8; CLIENT_NONCE_LEN]) -> [u8; REPORT_DATA_LEN] {
    let mut buf = Vec::with_capacity(tls_public_key.len() + CLIENT_NONCE_LEN);
    buf.extend_from_slice(tls_public_key);
    buf.extend_from_slice(nonce);
    digest(&SHA512, &buf)
        .as_ref()
        .try_into()
        .expect("SHA-512 has 64 bytes")
}

/// The configfs-tsm report interface under a root folder.
#[derive(Debug, Clone)]
pub struct ConfigfsTsm {
    root: PathBuf,
}

impl Default for ConfigfsTsm {
    fn default() -> Self {
        Self::new(DEFAULT_TSM_ROOT)
    }
}

fn tsm_err(what: &str, path: &Path, e: impl std::fmt::Display) -> ProxyError {
    ProxyError::Attestation(format!("configfs-tsm {what} {}: {e}", path.display()))
}

fn read_small(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let f = std::fs::File::open(path).map_err(|e| tsm_err("read", path, e))?;
    let mut out = Vec::new();
    f.take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| tsm_err("read", path, e))?;
    if out.len() as u64 > limit {
        return Err(tsm_err("read", path, format!("more than {limit} bytes")));
    }
    Ok(out)
}

fn read_text(path: &Path) -> Result<String> {
    let b = read_small(path, 256)?;
    String::from_utf8(b)
        .map(|s| s.trim().to_string())
        .map_err(|_| tsm_err("read", path, "not UTF-8"))
}

fn read_generation(path: &Path) -> Result<u64> {
    read_text(path)?
        .parse()
        .map_err(|_| tsm_err("read", path, "not a number"))
}

impl ConfigfsTsm {
    /// The interface under `root` (normally [`DEFAULT_TSM_ROOT`]).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Whether the root folder exists (the kernel offers configfs-tsm).
    pub fn available(&self) -> bool {
        self.root.is_dir()
    }

    /// Requests a report with `report_data` in a new entry (removed after).
    pub fn report(&self, report_data: &[u8; REPORT_DATA_LEN]) -> Result<Attestation> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let entry = format!(
            "hecloud-proxy-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = self.root.join(&entry);
        std::fs::create_dir(&dir).map_err(|e| tsm_err("create", &dir, e))?;
        let out = self.report_in(&entry, report_data);
        // In configfs the attributes go with the folder; elsewhere (a fake
        // root) a folder with files stays, which does no harm.
        let _ = std::fs::remove_dir(&dir);
        out
    }

    /// Requests a report with `report_data` in the existing entry `entry`:
    /// writes `inblob`, reads `generation`, `outblob`, `provider`,
    /// `auxblob` (when there is one and it is not empty) and `generation`
    /// again, and fails if another writer changed the entry
    /// meanwhile. A writer between the write of `inblob` and the first
    /// read of `generation` goes unnoticed here (the report would then not
    /// carry this report data, and the client's binding check refuses it);
    /// a folder of the proxy's own ([`ConfigfsTsm::report`]) has no other
    /// writer.
    pub fn report_in(
        &self,
        entry: &str,
        report_data: &[u8; REPORT_DATA_LEN],
    ) -> Result<Attestation> {
        crate::seal::check_name("configfs-tsm entry", entry)?;
        let dir = self.root.join(entry);
        let inblob = dir.join("inblob");
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&inblob)
            .and_then(|mut f| f.write_all(report_data))
            .map_err(|e| tsm_err("write", &inblob, e))?;
        let generation = dir.join("generation");
        let before = read_generation(&generation)?;
        let report = read_small(&dir.join("outblob"), MAX_REPORT)?;
        let provider = read_text(&dir.join("provider"))?;
        let aux_path = dir.join("auxblob");
        let auxblob = match std::fs::metadata(&aux_path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            _ => Some(read_small(&aux_path, MAX_REPORT)?).filter(|b| !b.is_empty()),
        };
        let after = read_generation(&generation)?;
        if before != after {
            return Err(ProxyError::Attestation(format!(
                "configfs-tsm entry {entry} was written by another process meanwhile (generation {before} then {after})"
            )));
        }
        if report.is_empty() {
            return Err(ProxyError::Attestation(format!(
                "configfs-tsm entry {entry} returned an empty report"
            )));
        }
        Ok(Attestation::ConfigfsTsm {
            provider,
            report,
            auxblob,
        })
    }
}

/// Why the client refuses a proxy's attestation. Nothing secret is in
/// a message: reports, certificates and measurements are public.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AttestError {
    /// An unattested proxy (no TEE) while unattested proxies are not
    /// allowed.
    #[error("the proxy is unattested (no TEE); refusing it unless unattested proxies are allowed")]
    Unattested,
    /// The proxy's `Info` reply carries no attestation, or one of an
    /// unknown kind.
    #[error("the proxy announced {0}")]
    Malformed(String),
    /// A report of a provider this client does not verify (anything but
    /// `sev_guest` and `tdx_guest`).
    #[error(
        "reports of provider {0:?} are not verified (only {PROVIDER_SEV_SNP} and {PROVIDER_TDX})"
    )]
    UnsupportedProvider(String),
    /// An SEV-SNP report that does not verify.
    #[error("SEV-SNP report refused: {0}")]
    Snp(#[from] snp::SnpError),
    /// A TDX quote that does not verify.
    #[error("TDX quote refused: {0}")]
    Tdx(#[from] tdx::TdxError),
    /// The TLS public key the proxy announces is not the key of the
    /// certificate it presented on this connection: a report relayed by a
    /// man in the middle, or a misconfigured proxy.
    #[error(
        "the proxy announced a TLS public key that is not the key of the certificate on this \
         connection (a relayed attestation, or a man in the middle)"
    )]
    TlsKeyMismatch,
    /// A later TLS handshake of the same connection presented another key
    /// than the one verified when connecting.
    #[error(
        "the proxy presented another TLS public key than the one verified when connecting \
         (the key is pinned for the connection)"
    )]
    TlsKeyChanged,
    /// An attestation report over a connection without TLS (`http://`):
    /// there is no TLS key to bind it to, so it proves nothing about the
    /// connection.
    #[error(
        "the proxy sent an attestation report over http://: without TLS it cannot be bound to \
         the connection; connect with https://"
    )]
    NoTlsToBind,
    /// A proxy in a TEE whose launch measurement the policy does not pin,
    /// while [`VerifyPolicy::require_measurement`] is set.
    #[error(
        "the proxy is a {0} guest, and this client pins no launch measurement of that kind \
         (SEV-SNP: its MEASUREMENT, TDX: its MRTD); refusing an image it did not pin"
    )]
    MeasurementNotPinned(String),
    /// The proxy's TLS certificate could not be read for its public key.
    #[error("the proxy's TLS certificate: {0}")]
    TlsCertificate(String),
}

/// The TLS public key of a DER X.509 certificate, as reports bind it: its
/// DER SubjectPublicKeyInfo, byte for byte as in the certificate. The
/// proxy announces this key of its certificate and binds it in its
/// reports, and the client takes it from the certificate the proxy
/// presents on the connection, so both sides read the same bytes.
pub fn tls_public_key_of(cert_der: &[u8]) -> std::result::Result<Vec<u8>, AttestError> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der)
        .map_err(|e| AttestError::TlsCertificate(format!("not an X.509 certificate: {e}")))?;
    Ok(cert.tbs_certificate.subject_pki.raw.to_vec())
}

/// What the client requires of a proxy's attestation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyPolicy {
    /// Accept an unattested proxy (no TEE; it sees the data in clear).
    pub allow_unattested: bool,
    /// What an SEV-SNP report must show, and the roots it must chain to.
    pub snp: snp::SnpPolicy,
    /// What a TDX quote must show, and the roots it must chain to.
    pub tdx: tdx::TdxPolicy,
    /// Refuse a proxy whose TEE's launch measurement this policy does not
    /// pin (SEV-SNP: [`snp::SnpPolicy::measurement`]; TDX:
    /// [`tdx::TdxPolicy::mrtd`]). Without it, a client that pins one TEE's
    /// image accepts any image of the other TEE's kind on genuine hardware
    /// ([`Verified`] says it was not pinned).
    pub require_measurement: bool,
}

impl VerifyPolicy {
    /// AMD's roots, VMPL 0, no measurement pinned, no minimum TCB, no
    /// VCEK given for SEV-SNP; Intel's root, no MRTD or RTMR pinned, no
    /// minimum TEE TCB SVN for TDX; an unattested proxy is accepted only
    /// if `allow_unattested`.
    pub fn new(allow_unattested: bool) -> Self {
        Self {
            allow_unattested,
            ..Self::default()
        }
    }
}

/// What a client learned about a proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verified {
    /// The proxy is unattested and the client allowed it.
    Unattested,
    /// An SEV-SNP report verified ([`snp::verify_report`]): signature,
    /// chain to a pinned root, binding to this connection, policy; the
    /// measurement, and whether it was pinned, are in the details.
    SevSnp {
        /// The report's provider (`sev_guest`).
        provider: String,
        /// What was verified.
        report: snp::SnpVerified,
    },
    /// A TDX quote verified ([`tdx::verify_quote`]): signatures, PCK chain
    /// to a pinned root, binding to this connection, policy; MRTD, and
    /// whether it was pinned, are in the details.
    Tdx {
        /// The quote's provider (`tdx_guest`).
        provider: String,
        /// What was verified (boxed: a TD report body is large).
        quote: Box<tdx::TdxVerified>,
    },
}

/// The client's check of a proxy's attestation for the connection with
/// TLS public key `tls_public_key` (taken from the certificate presented
/// on that connection, not from what the proxy announces: see
/// [`crate::client`]) and the client's `nonce`: an unattested
/// proxy is refused unless `policy.allow_unattested`; an SEV-SNP report
/// must verify ([`snp::verify_report`], bound to [`report_data`] of the
/// key and nonce), and so must a TDX quote ([`tdx::verify_quote`]; an
/// `auxblob` beside it is ignored: its certificates are in the quote);
/// any other provider is refused.
pub fn verify(
    attestation: &Attestation,
    tls_public_key: &[u8],
    nonce: &[u8; CLIENT_NONCE_LEN],
    policy: &VerifyPolicy,
) -> std::result::Result<Verified, AttestError> {
    let verified = match attestation {
        Attestation::Unattested if policy.allow_unattested => Verified::Unattested,
        Attestation::Unattested => return Err(AttestError::Unattested),
        Attestation::ConfigfsTsm {
            provider,
            report,
            auxblob,
        } => match provider.as_str() {
            PROVIDER_SEV_SNP => Verified::SevSnp {
                provider: provider.clone(),
                report: snp::verify_report(
                    report,
                    auxblob.as_deref(),
                    &report_data(tls_public_key, nonce),
                    &policy.snp,
                )?,
            },
            PROVIDER_TDX => Verified::Tdx {
                provider: provider.clone(),
                quote: Box::new(tdx::verify_quote(
                    report,
                    &report_data(tls_public_key, nonce),
                    &policy.tdx,
                )?),
            },
            other => return Err(AttestError::UnsupportedProvider(other.into())),
        },
    };
    let unpinned = match &verified {
        Verified::SevSnp { provider, report } if !report.measurement_pinned => Some(provider),
        Verified::Tdx { provider, quote } if !quote.mrtd_pinned => Some(provider),
        _ => None,
    };
    match unpinned {
        Some(provider) if policy.require_measurement => {
            Err(AttestError::MeasurementNotPinned(provider.clone()))
        }
        _ => Ok(verified),
    }
}
