//! Attestation reports through the Linux configfs-tsm interface, and the
//! client's check that a report binds the proxy's TLS key and its nonce.
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
//! key bytes followed by the client's 32-byte nonce. A client that sends a
//! fresh nonce and finds it, with the TLS key of the connection, in the
//! report knows the report was made for this connection (not replayed).
//!
//! What [`check_report_binding`] verifies, and what it does NOT verify yet:
//!
//! * verified: for `sev_guest`, that the report is at least as long as an
//!   SEV-SNP `ATTESTATION_REPORT` (1184 bytes) and that its 64-byte
//!   `REPORT_DATA` at byte offset 0x50 equals the expected report data;
//! * NOT verified: the report's signature and its certificate chain (VCEK
//!   to AMD's ASK and ARK), the launch measurement against an expected
//!   value, the guest policy (the debug bit), the TCB versions and the
//!   VMPL. Anyone can forge a report that passes this check; it is only
//!   the binding half of a verification;
//! * `tdx_guest` (a TDX quote, whose report data sits elsewhere) and any
//!   other provider are refused with [`ProxyError::Attestation`].

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use ring::digest::{SHA512, digest};

use crate::enclave::{Attestation, REPORT_DATA_LEN};
use crate::error::{ProxyError, Result};

/// The configfs-tsm report folder of Linux.
pub const DEFAULT_TSM_ROOT: &str = "/sys/kernel/config/tsm/report";
/// Length of the client's nonce.
pub const CLIENT_NONCE_LEN: usize = 32;
/// Largest `outblob` read (an SEV-SNP report is 1184 bytes, a TDX quote a
/// few KiB; certificates are not read from here).
pub const MAX_REPORT: u64 = 1 << 20;
/// The provider name of SEV-SNP guests.
pub const PROVIDER_SEV_SNP: &str = "sev_guest";
/// Length of an SEV-SNP `ATTESTATION_REPORT`.
pub const SNP_REPORT_LEN: usize = 0x4A0;
/// Byte offset of `REPORT_DATA` in an SEV-SNP `ATTESTATION_REPORT`.
pub const SNP_REPORT_DATA_AT: usize = 0x50;

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
    /// writes `inblob`, reads `generation`, `outblob`, `provider` and
    /// `generation` again, and fails if another writer changed the entry
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
        Ok(Attestation::ConfigfsTsm { provider, report })
    }
}

/// Checks that a report carries `expected` (from [`report_data`]) as its
/// report data. This is NOT a full verification: see the module doc for
/// what is not verified (signature, certificate chain, measurement,
/// policy, TCB).
pub fn check_report_binding(
    provider: &str,
    report: &[u8],
    expected: &[u8; REPORT_DATA_LEN],
) -> Result<()> {
    match provider {
        PROVIDER_SEV_SNP => {
            if report.len() < SNP_REPORT_LEN {
                return Err(ProxyError::Attestation(format!(
                    "an SEV-SNP report of {} bytes (an ATTESTATION_REPORT has {SNP_REPORT_LEN})",
                    report.len()
                )));
            }
            let data = &report[SNP_REPORT_DATA_AT..SNP_REPORT_DATA_AT + REPORT_DATA_LEN];
            if data != expected {
                return Err(ProxyError::Attestation(
                    "the report's REPORT_DATA does not bind this TLS key and nonce".into(),
                ));
            }
            Ok(())
        }
        other => Err(ProxyError::Attestation(format!(
            "reports of provider {other:?} are not verified yet (only {PROVIDER_SEV_SNP})"
        ))),
    }
}

/// What a client learned about a proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verified {
    /// The proxy is unattested and the client allowed it.
    Unattested,
    /// The report binds the TLS key and nonce (and nothing more is checked
    /// yet: see the module doc).
    ReportDataBound {
        /// The report's provider.
        provider: String,
    },
}

/// The client's check of a proxy's attestation for the connection with
/// TLS public key `tls_public_key` and the client's `nonce`: an unattested
/// proxy is refused unless `allow_unattested`; a report must bind the key
/// and nonce ([`check_report_binding`], which does not verify the
/// signature).
pub fn verify(
    attestation: &Attestation,
    tls_public_key: &[u8],
    nonce: &[u8; CLIENT_NONCE_LEN],
    allow_unattested: bool,
) -> Result<Verified> {
    match attestation {
        Attestation::Unattested if allow_unattested => Ok(Verified::Unattested),
        Attestation::Unattested => Err(ProxyError::Attestation(
            "the proxy is unattested (no TEE); refusing it unless unattested proxies are allowed"
                .into(),
        )),
        Attestation::ConfigfsTsm { provider, report } => {
            check_report_binding(provider, report, &report_data(tls_public_key, nonce))?;
            Ok(Verified::ReportDataBound {
                provider: provider.clone(),
            })
        }
    }
}
