//! The confidential-VM enclave: the proxy runs unmodified inside an AMD
//! SEV-SNP (or Intel TDX) guest, whose memory the hardware encrypts and
//! keeps from the host. The secret operations run in the process as in
//! [`PlainEnclave`](crate::PlainEnclave); what the VM adds is proof and a
//! sealing key:
//!
//! * **Reports** ([`ReportSource`]): each `Info` gets a fresh report from
//!   the kernel's configfs-tsm interface ([`ConfigfsTsm`]) with the
//!   proxy's TLS key and the client's nonce in its report data, which the
//!   client verifies ([`crate::attest::verify`]).
//! * **A sealing key from the TEE** ([`snp_derived_sealing_key`]): the AMD
//!   secure processor derives a key from the chip's VCEK root, the guest's
//!   launch measurement and its policy (`SNP_GET_DERIVED_KEY` on
//!   `/dev/sev-guest`). The same proxy image on the same chip gets the same
//!   key after a restart; another image, another chip or the host gets
//!   another, so the sealed key folders on the host's disk stay closed to
//!   them. Upgrading the proxy image changes the key: import the folders
//!   again. TDX guests have no such key in the guest ABI: they seal under
//!   a key file, which must then sit on the VM's encrypted disk.
//!
//! Not tested on hardware here (the machines hecloud is built on have no
//! SEV-SNP guest): the request layout and the answer's parsing are, and so
//! is the whole path from a report source to a client that verifies it,
//! with a test chain of AMD-like certificates.

use std::path::Path;
use std::sync::Arc;

use crate::attest::ConfigfsTsm;
use crate::enclave::{Attestation, Enclave, EnclaveOp, EnclaveReply, REPORT_DATA_LEN};
use crate::error::{ProxyError, Result};
use crate::seal::SealingKey;

/// What makes the attestation reports of a confidential VM.
pub trait ReportSource: Send + Sync + std::fmt::Debug {
    /// A report carrying `report_data`.
    fn report(&self, report_data: &[u8; REPORT_DATA_LEN]) -> Result<Attestation>;
}

impl ReportSource for ConfigfsTsm {
    fn report(&self, report_data: &[u8; REPORT_DATA_LEN]) -> Result<Attestation> {
        ConfigfsTsm::report(self, report_data)
    }
}

/// The enclave of a proxy inside a confidential VM: the operations of
/// `ops` (a [`PlainEnclave`](crate::PlainEnclave), sealing under a key
/// from the TEE), reports from `reports`. See the module doc.
#[derive(Debug)]
pub struct CvmEnclave {
    ops: Arc<dyn Enclave>,
    reports: Box<dyn ReportSource>,
}

impl CvmEnclave {
    /// The operations of `ops` with reports from `reports`.
    pub fn new(ops: Arc<dyn Enclave>, reports: impl ReportSource + 'static) -> Self {
        Self {
            ops,
            reports: Box::new(reports),
        }
    }

    /// Checks that `tsm` makes reports, before an enclave is built on it:
    /// a VM without configfs-tsm, or whose interface makes no report,
    /// fails here rather than on a client's first request. The provider
    /// of the probe report (`sev_guest`, `tdx_guest`).
    pub fn probe(tsm: &ConfigfsTsm) -> Result<String> {
        if !tsm.available() {
            return Err(ProxyError::Attestation(
                "configfs-tsm is not there (no /sys/kernel/config/tsm/report): not a confidential VM, or configfs is not mounted".into(),
            ));
        }
        match tsm.report(&[0; REPORT_DATA_LEN])? {
            Attestation::ConfigfsTsm { provider, .. } => Ok(provider),
            other => Err(ProxyError::Attestation(format!(
                "configfs-tsm answered {other:?}"
            ))),
        }
    }
}

impl Enclave for CvmEnclave {
    fn call(&self, batch: Vec<EnclaveOp>) -> Result<Vec<EnclaveReply>> {
        self.ops.call(batch)
    }

    fn crossings(&self) -> u64 {
        self.ops.crossings()
    }

    fn attestation(&self, report_data: &[u8; REPORT_DATA_LEN]) -> Result<Attestation> {
        self.reports.report(report_data)
    }
}

/// The SEV-SNP guest device.
pub const SEV_GUEST_DEVICE: &str = "/dev/sev-guest";

/// `GUEST_FIELD_SELECT` of the derived key: the guest policy (bit 0) and
/// the launch measurement (bit 3) are mixed in.
const FIELDS_POLICY_AND_MEASUREMENT: u64 = 1 | 1 << 3;

/// Label of the sealing key made from the derived key.
const SEALING_KEY_CONTEXT: &str = "hecloud proxy 2026-11 sealing key from an SEV-SNP derived key";

/// `struct snp_derived_key_req` of Linux's `uapi/linux/sev-guest.h`.
#[repr(C)]
#[derive(Debug, Default)]
struct DerivedKeyRequest {
    /// 0: derived from the VCEK (chip-unique), 1: from the VMRK.
    root_key_select: u32,
    rsvd: u32,
    guest_field_select: u64,
    vmpl: u32,
    guest_svn: u32,
    tcb_version: u64,
}

/// Bytes of `struct snp_derived_key_resp`: the firmware's `MSG_KEY_RSP`.
const RESPONSE_LEN: usize = 64;

/// `struct snp_guest_request_ioctl`.
#[repr(C)]
#[derive(Debug)]
struct GuestRequest {
    msg_version: u8,
    req_data: u64,
    resp_data: u64,
    /// Firmware error (low 32 bits) and VMM error (high 32 bits).
    exitinfo2: u64,
}

/// `_IOWR('S', 0x1, struct snp_guest_request_ioctl)`.
const fn snp_get_derived_key() -> u64 {
    const IOC_READ_WRITE: u64 = 3;
    (IOC_READ_WRITE << 30)
        | ((std::mem::size_of::<GuestRequest>() as u64) << 16)
        | ((b'S' as u64) << 8)
        | 1
}

/// The 32-byte key of a `MSG_KEY_RSP` (status at 0x00, key at 0x20), or
/// the firmware's refusal.
fn key_of_response(data: &[u8; RESPONSE_LEN]) -> Result<zeroize::Zeroizing<[u8; 32]>> {
    let status = u32::from_le_bytes(data[..4].try_into().expect("4 bytes"));
    if status != 0 {
        return Err(ProxyError::Attestation(format!(
            "the AMD secure processor refused the derived key (status {status:#x})"
        )));
    }
    let mut key = zeroize::Zeroizing::new([0u8; 32]);
    key.copy_from_slice(&data[32..64]);
    if key.iter().all(|&b| b == 0) {
        return Err(ProxyError::Attestation(
            "the AMD secure processor returned an all-zero derived key".into(),
        ));
    }
    Ok(key)
}

/// The sealing key from a raw derived key: a keyed derivation under a
/// label of its own, so the firmware's key is used for nothing else.
fn sealing_key_of(derived: &[u8; 32]) -> SealingKey {
    SealingKey::from_bytes(blake3::derive_key(SEALING_KEY_CONTEXT, derived))
}

/// A sealing key the AMD secure processor derives for this guest, at
/// VMPL `vmpl` (0 unless the proxy runs under an SVSM), from the chip's
/// VCEK root, the launch measurement and the guest policy: see the module
/// doc. `device` is normally [`SEV_GUEST_DEVICE`]. Fails (typed, with the
/// firmware's error code) outside an SEV-SNP guest.
#[cfg(target_os = "linux")]
pub fn snp_derived_sealing_key(device: &Path, vmpl: u32) -> Result<SealingKey> {
    use std::os::fd::AsRawFd;
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(device)
        .map_err(|e| ProxyError::Attestation(format!("opening {}: {e}", device.display())))?;
    let request = DerivedKeyRequest {
        guest_field_select: FIELDS_POLICY_AND_MEASUREMENT,
        vmpl,
        ..Default::default()
    };
    let mut response = zeroize::Zeroizing::new([0u8; RESPONSE_LEN]);
    let mut ioctl = GuestRequest {
        msg_version: 1,
        req_data: &request as *const DerivedKeyRequest as u64,
        resp_data: response.as_mut_ptr() as u64,
        exitinfo2: 0,
    };
    // SAFETY: the request and response buffers outlive the call and have
    // the kernel's layouts (`repr(C)`, sizes checked in the tests); the
    // kernel writes at most RESPONSE_LEN bytes into the response, and
    // `exitinfo2`.
    let rc = unsafe {
        libc::ioctl(
            dev.as_raw_fd(),
            snp_get_derived_key() as _,
            &mut ioctl as *mut GuestRequest,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(ProxyError::Attestation(format!(
            "SNP_GET_DERIVED_KEY on {}: {e} (firmware error {:#x}, VMM error {:#x})",
            device.display(),
            ioctl.exitinfo2 & 0xffff_ffff,
            ioctl.exitinfo2 >> 32
        )));
    }
    Ok(sealing_key_of(&*key_of_response(&response)?))
}

/// Outside Linux there is no SEV-SNP guest device.
#[cfg(not(target_os = "linux"))]
pub fn snp_derived_sealing_key(device: &Path, _vmpl: u32) -> Result<SealingKey> {
    Err(ProxyError::Attestation(format!(
        "{}: SEV-SNP derived keys need Linux",
        device.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layouts and the request number match Linux's
    /// `uapi/linux/sev-guest.h` (SNP_GET_DERIVED_KEY is 0xC0205301).
    #[test]
    fn the_ioctl_layouts_are_the_kernels() {
        assert_eq!(std::mem::size_of::<DerivedKeyRequest>(), 32);
        assert_eq!(std::mem::size_of::<GuestRequest>(), 32);
        assert_eq!(std::mem::offset_of!(GuestRequest, req_data), 8);
        assert_eq!(std::mem::offset_of!(GuestRequest, exitinfo2), 24);
        assert_eq!(
            std::mem::offset_of!(DerivedKeyRequest, guest_field_select),
            8
        );
        assert_eq!(std::mem::offset_of!(DerivedKeyRequest, tcb_version), 24);
        assert_eq!(snp_get_derived_key(), 0xC020_5301);
    }

    #[test]
    fn a_response_gives_its_key_or_the_firmwares_refusal() {
        let mut data = [0u8; 64];
        for (i, b) in data[32..].iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        let key = key_of_response(&data).unwrap();
        assert_eq!(&key[..], &data[32..]);
        // Another derived key, another sealing key; the same, the same.
        let mut other = *key;
        other[0] ^= 1;
        assert_eq!(sealing_key_of(&key).id(), sealing_key_of(&key).id());
        assert_ne!(sealing_key_of(&key).id(), sealing_key_of(&other).id());
        // Not the raw key itself.
        assert_ne!(sealing_key_of(&key).id(), SealingKey::from_bytes(*key).id());

        data[0] = 0x16; // INVALID_KEY
        let e = key_of_response(&data).unwrap_err().to_string();
        assert!(e.contains("refused") && e.contains("0x16"), "{e}");
        let zero = [0u8; 64];
        assert!(key_of_response(&zero).is_err());
    }

    #[test]
    fn outside_a_guest_the_device_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = snp_derived_sealing_key(&dir.path().join("sev-guest"), 0).unwrap_err();
        assert!(matches!(e, ProxyError::Attestation(_)), "{e}");
        // A file that is not the device: the ioctl is refused, not run.
        let f = dir.path().join("plain-file");
        std::fs::write(&f, b"").unwrap();
        let e = snp_derived_sealing_key(&f, 0).unwrap_err().to_string();
        assert!(e.contains("SNP_GET_DERIVED_KEY"), "{e}");
    }

    #[test]
    fn probe_refuses_a_machine_without_configfs_tsm() {
        let dir = tempfile::tempdir().unwrap();
        let e = CvmEnclave::probe(&ConfigfsTsm::new(dir.path().join("missing"))).unwrap_err();
        assert!(e.to_string().contains("configfs-tsm is not there"), "{e}");
        // There, but making no report (an empty root): refused too.
        assert!(CvmEnclave::probe(&ConfigfsTsm::new(dir.path())).is_err());
    }
}
