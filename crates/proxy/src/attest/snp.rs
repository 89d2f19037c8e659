//! AMD SEV-SNP attestation reports: parsing the `ATTESTATION_REPORT`,
//! the certificate table the host provisions, and the verification of a
//! report's signature, its certificate chain up to a pinned AMD root and
//! the guest's policy.
//!
//! Layouts follow AMD's SEV-SNP firmware ABI specification (the
//! `ATTESTATION_REPORT` structure, 1184 bytes) and the GHCB specification
//! (the certificate table of the extended guest request, which Linux
//! configfs-tsm returns in `auxblob`).
//!
//! The chain is VCEK (an ECDSA P-384 key, per chip and TCB) signed by the
//! ASK, the ASK signed by the ARK, the ARK self-signed and byte-equal to
//! a pinned root ([`TrustedRoot`]; [`TrustedRoot::amd`] pins AMD's ARK and
//! ASK for Milan, Genoa and Turin). A report signed by a VLEK (an ECDSA
//! P-384 key per cloud provider and TCB, loaded into the firmware by the
//! host; AWS uses one) chains instead through the ASVK, the intermediate
//! that AMD's key distribution service publishes per product at
//! `/vlek/v1/<product>/cert_chain` (AMD's VLEK certificate specification),
//! signed by the same ARK. The GUIDs read here (VCEK, VLEK, ASK, ARK, as
//! in the GHCB specification) give the ASVK none of its own: it is read
//! from the ASK's slot (go-sev-guest likewise takes an `SEV-VLEK`
//! intermediate as the ASVK), and the subject's common name tells the two
//! apart (`SEV-<product>` for an ASK, `SEV-VLEK-<product>` for an ASVK,
//! as AMD's key distribution service issues them). Certificate signatures are accepted in
//! two algorithms only, as named in each certificate: RSASSA-PSS with
//! SHA-384 (MGF1 SHA-384, 48-byte salt; AMD's ARK and ASK) and ECDSA P-384
//! with SHA-384. The report's own signature is ECDSA P-384 with SHA-384
//! over its bytes `[0, 0x2A0)`. ring does the cryptography; x509-parser
//! reads the certificates.

use std::fmt;

use ring::signature::{
    ECDSA_P384_SHA384_ASN1, ECDSA_P384_SHA384_FIXED, RSA_PSS_2048_8192_SHA384, UnparsedPublicKey,
    VerificationAlgorithm,
};
use x509_parser::certificate::X509Certificate;
use x509_parser::oid_registry::{
    OID_NIST_EC_P384, OID_NIST_HASH_SHA384, OID_PKCS1_RSAENCRYPTION, OID_PKCS1_RSASSAPSS,
    OID_SIG_ECDSA_WITH_SHA384,
};
use x509_parser::signature_algorithm::RsaSsaPssParams;
use x509_parser::x509::AlgorithmIdentifier;

use super::x509::{self, CertProblem, Revocation, Signed, ec_point, hex};
use crate::enclave::REPORT_DATA_LEN;

/// Length of an SEV-SNP `ATTESTATION_REPORT`.
pub const REPORT_LEN: usize = 0x4A0;
/// Byte offset of `REPORT_DATA`.
pub const REPORT_DATA_AT: usize = 0x50;
/// Byte offset of `MEASUREMENT`.
pub const MEASUREMENT_AT: usize = 0x90;
/// Length of the launch measurement.
pub const MEASUREMENT_LEN: usize = 48;
/// Byte offset of the signature; the signed bytes are `[0, SIGNATURE_AT)`.
pub const SIGNATURE_AT: usize = 0x2A0;
/// Report versions this verifier reads (the fields it uses sit at the
/// same offsets in each).
pub const SUPPORTED_VERSIONS: std::ops::RangeInclusive<u32> = 2..=5;
/// `SIGNATURE_ALGO` of ECDSA P-384 with SHA-384.
pub const SIG_ALGO_ECDSA_P384_SHA384: u32 = 1;
/// The `DEBUG` bit of the guest policy.
pub const POLICY_DEBUG: u64 = 1 << 19;
/// The `SMT` bit of the guest policy: the guest may run with SMT enabled.
pub const POLICY_SMT: u64 = 1 << 16;
/// The `MIGRATE_MA` bit of the guest policy: a migration agent may be
/// associated with the guest.
pub const POLICY_MIGRATE_MA: u64 = 1 << 18;
/// The `SMT_EN` bit of `PLATFORM_INFO` (0x40): SMT is enabled on the
/// platform.
pub const PLATFORM_SMT_EN: u64 = 1;
/// Byte offset of `CURRENT_TCB`.
pub const CURRENT_TCB_AT: usize = 0x38;
/// Byte offset of `REPORTED_TCB`.
pub const REPORTED_TCB_AT: usize = 0x180;
/// Byte offset of `CPUID_FAM_ID` (report version 3 and later; reserved,
/// zero, in version 2).
pub const CPUID_FAM_ID_AT: usize = 0x188;
/// Byte offset of `CHIP_ID`.
pub const CHIP_ID_AT: usize = 0x1A0;
/// Byte offset of `COMMITTED_TCB`.
pub const COMMITTED_TCB_AT: usize = 0x1E0;
/// CPUID family of Milan and Genoa (19h).
pub const CPUID_FAMILY_MILAN_GENOA: u8 = 0x19;
/// CPUID family of Turin (1Ah).
pub const CPUID_FAMILY_TURIN: u8 = 0x1A;
/// OID arcs of the VCEK's `hwID` extension (1.3.6.1.4.1.3704.1.4): the
/// chip id the VCEK was issued for (64 bytes; 8 on Turin), in AMD's
/// VCEK certificate and KDS interface specification.
pub const OID_VCEK_HWID: [u64; 9] = [1, 3, 6, 1, 4, 1, 3704, 1, 4];
/// OID arcs of the VLEK's `csp_id` extension (1.3.6.1.4.1.3704.1.5): the
/// cloud provider the VLEK was issued to (an IA5String; an AWS VLEK of
/// 2026 carries `CN=cc-us-east-2.amazonaws.com`); a VCEK has none.
pub const OID_VLEK_CSP_ID: [u64; 9] = [1, 3, 6, 1, 4, 1, 3704, 1, 5];
/// Common-name prefix of an ASVK's subject (`SEV-VLEK-Milan`, ...); an
/// ASK's is `SEV-<product>`.
pub const ASVK_CN_PREFIX: &str = "SEV-VLEK-";
/// Length of the `hwID` of a Turin VCEK (the first bytes of the chip id).
pub const TURIN_HWID_LEN: usize = 8;
/// Largest certificate table read (the certificates take a few KiB; the
/// kernel's buffer may be padded with zeros after them).
pub const MAX_CERT_TABLE: usize = 1 << 20;

/// GUID of the VCEK in the certificate table (RFC 4122 byte order).
pub const GUID_VCEK: [u8; 16] = guid(0x63da758d, 0xe664, 0x4564, 0xadc5f4b93be8accd);
/// GUID of the VLEK (the key a cloud provider's hosts sign reports with
/// in place of the VCEK).
pub const GUID_VLEK: [u8; 16] = guid(0xa8074bc2, 0xa25a, 0x483e, 0xaae639c045a0b8a1);
/// GUID of the ASK; for a VLEK-signed report, of the ASVK (the table has
/// no GUID of its own for it).
pub const GUID_ASK: [u8; 16] = guid(0x4ab7b379, 0xbbac, 0x4fe4, 0xa02f05aef327c782);
/// GUID of the ARK.
pub const GUID_ARK: [u8; 16] = guid(0xc0b406a4, 0xa803, 0x4952, 0x97433fb6014cd0ae);

const fn guid(a: u32, b: u16, c: u16, d: u64) -> [u8; 16] {
    let (a, b, c, d) = (
        a.to_be_bytes(),
        b.to_be_bytes(),
        c.to_be_bytes(),
        d.to_be_bytes(),
    );
    [
        a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], d[0], d[1], d[2], d[3], d[4], d[5], d[6],
        d[7],
    ]
}

/// The same GUID in the mixed-endian byte order of Windows and of the
/// Linux kernel's `guid_t` (first three fields little-endian).
const fn mixed_endian(g: [u8; 16]) -> [u8; 16] {
    [
        g[3], g[2], g[1], g[0], g[5], g[4], g[7], g[6], g[8], g[9], g[10], g[11], g[12], g[13],
        g[14], g[15],
    ]
}

/// Why an SEV-SNP report was refused. Messages carry no secret: a report,
/// its certificates and the measurements are public.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnpError {
    /// Not an `ATTESTATION_REPORT`'s length.
    #[error("a report of {0} bytes (an ATTESTATION_REPORT has {REPORT_LEN})")]
    BadLength(usize),
    /// A report version this verifier does not read.
    #[error("report version {0} is not supported (2 to 5)")]
    UnsupportedVersion(u32),
    /// A report signed with another algorithm than ECDSA P-384 SHA-384.
    #[error("report signature algorithm {0} is not supported (1: ECDSA P-384 with SHA-384)")]
    UnsupportedSignatureAlgorithm(u32),
    /// A report signed by another key than the VCEK (0) or the VLEK (1),
    /// such as 7 (none).
    #[error("the report is signed by key kind {0} (0, the VCEK, and 1, the VLEK, are verified)")]
    UnsupportedSigningKey(u8),
    /// No VCEK: the proxy sent no certificate table with one and the
    /// client was given none.
    #[error(
        "no VCEK to verify the report with (the proxy sent no certificate table with one, and none was given)"
    )]
    NoVcek,
    /// No VLEK for a VLEK-signed report: the proxy's certificate table has
    /// none.
    #[error("the report is signed by a VLEK and the proxy sent no certificate table with one")]
    NoVlek,
    /// A certificate table that does not parse.
    #[error("malformed certificate table: {0}")]
    CertTable(String),
    /// A certificate that does not parse or cannot be used.
    #[error("certificate {which}: {reason}")]
    Certificate {
        /// `VCEK`, `VLEK`, `ASK`, `ASVK` or `ARK`.
        which: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A certificate outside its validity period.
    #[error("certificate {0} is not valid now (expired or not yet valid)")]
    Expired(&'static str),
    /// The ARK the proxy sent is not one of the pinned roots.
    #[error("the ARK the proxy sent is not a pinned root")]
    UnpinnedRoot,
    /// A link of the chain whose signature does not verify.
    #[error("certificate chain: {0}")]
    Chain(String),
    /// A CRL given in [`SnpPolicy::crls`] that does not parse.
    #[error("malformed CRL: {0}")]
    Crl(String),
    /// Revocation checking was asked ([`SnpPolicy::crls`] not empty) and
    /// no CRL given is issued by the ARK the chain ends in.
    #[error("no CRL given is issued by the {0} ARK (revocation checking was asked)")]
    NoCrl(String),
    /// The ARK's CRL is not current: issued in the future, without a next
    /// update, or past it.
    #[error("the {0} ARK's CRL is out of date (fetch a current one from AMD)")]
    CrlOutOfDate(String),
    /// The ARK's CRL lists the ASK or ASVK of the chain.
    #[error("the {0} of the chain is revoked by its ARK's CRL")]
    Revoked(&'static str),
    /// The report's signature does not verify under the VCEK or VLEK that
    /// signed it (a forged or modified report, or the key of another chip,
    /// provider or TCB).
    #[error("the report's signature does not verify under its VCEK or VLEK")]
    BadSignature,
    /// `REPORT_DATA` does not bind the TLS key and nonce (a report made
    /// for another connection: stale, replayed or relayed).
    #[error("the report's REPORT_DATA does not bind this TLS key and nonce")]
    ReportDataMismatch,
    /// A guest launched with the debug policy bit (the host can read its
    /// memory).
    #[error("the guest policy allows debugging (policy {0:#x}); refusing a debuggable guest")]
    DebugGuest(u64),
    /// A report requested from another VMPL than expected.
    #[error("the report comes from VMPL {got} (expected {want})")]
    Vmpl {
        /// The report's VMPL.
        got: u32,
        /// The expected one.
        want: u32,
    },
    /// A launch measurement other than the expected one.
    #[error("the launch measurement {got} is not the expected {want}")]
    MeasurementMismatch {
        /// The report's, hex.
        got: String,
        /// The expected, hex.
        want: String,
    },
    /// SMT is enabled on the platform (`PLATFORM_INFO`'s `SMT_EN`) and the
    /// policy refuses it ([`SnpPolicy::refuse_smt`]).
    #[error("SMT is enabled on the proxy's platform (platform info {0:#x}); refusing it as asked")]
    SmtEnabled(u64),
    /// The guest policy allows a migration agent (`MIGRATE_MA`) and the
    /// verifier's policy refuses it ([`SnpPolicy::refuse_migration_agent`]).
    #[error("the guest policy allows a migration agent (policy {0:#x}); refusing it as asked")]
    MigrationAgentAllowed(u64),
    /// A report (version 3 or later) of a CPU family whose TCB layout this
    /// verifier does not know (it knows 19h, Milan and Genoa, and 1Ah,
    /// Turin).
    #[error(
        "the report names CPU family {0:#04x}, whose TCB layout is unknown here (19h: Milan, Genoa; 1Ah: Turin)"
    )]
    UnknownCpuFamily(u8),
    /// The VCEK or VLEK lacks one of AMD's extensions that a genuine one
    /// carries (the TCB it was issued for, per component, and for a VCEK
    /// the chip id).
    #[error("the VCEK or VLEK has no {0} extension (a genuine one has it)")]
    VcekMissingExtension(&'static str),
    /// One of AMD's extensions of the VCEK or VLEK does not parse, or is
    /// given twice.
    #[error("the VCEK's or VLEK's {extension} extension is malformed: {reason}")]
    VcekMalformedExtension {
        /// The extension (`blSPL`, `hwID`, ...).
        extension: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The VCEK or VLEK was issued for another TCB than the report's
    /// `REPORTED_TCB`, in one component.
    #[error(
        "the VCEK or VLEK was issued for {component} security patch level {vcek}, the report's REPORTED_TCB has {report}"
    )]
    VcekTcbMismatch {
        /// Which component.
        component: TcbComponent,
        /// The VCEK's or VLEK's level.
        vcek: u8,
        /// The report's level.
        report: u8,
    },
    /// The VCEK was issued for another chip than the report's `CHIP_ID`.
    #[error("the VCEK was issued for chip {vcek}, the report comes from chip {report}")]
    VcekChipIdMismatch {
        /// The VCEK's `hwID`, hex.
        vcek: String,
        /// The report's `CHIP_ID` (as many bytes as the `hwID` has), hex.
        report: String,
    },
    /// The report's `CHIP_ID` is zeros (the host masks it), so the VCEK
    /// cannot be matched to the chip, and the policy does not allow that.
    #[error(
        "the report's CHIP_ID is masked (zeros): the VCEK cannot be matched to the chip; refusing unless masked chip ids are allowed"
    )]
    ChipIdMasked,
    /// A component of `REPORTED_TCB` below the policy's minimum.
    #[error(
        "the reported TCB's {component} security patch level is {found}, below the minimum {minimum}"
    )]
    TcbBelowMinimum {
        /// Which component.
        component: TcbComponent,
        /// The report's level.
        found: u8,
        /// The policy's minimum.
        minimum: u8,
    },
}

type Result<T> = std::result::Result<T, SnpError>;

/// How the bytes of a `TCB_VERSION` are laid out; it depends on the CPU
/// generation, which a report of version 3 or later names
/// (`CPUID_FAM_ID`, 0x188).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcbLayout {
    /// Milan and Genoa (family 19h, and every version 2 report): boot
    /// loader in byte 0, TEE 1, SNP 6, microcode 7.
    MilanGenoa,
    /// Turin (family 1Ah): FMC in byte 0, boot loader 1, TEE 2, SNP 3,
    /// microcode 7.
    Turin,
}

impl TcbLayout {
    /// The layout of a report of `version` naming `cpuid_family`: Milan
    /// and Genoa for version 2 (which has no family field and predates
    /// Turin) and for family 19h, Turin for family 1Ah; any other family
    /// is refused ([`SnpError::UnknownCpuFamily`]).
    pub fn of(version: u32, cpuid_family: u8) -> Result<Self> {
        match (version, cpuid_family) {
            (..=2, _) | (_, CPUID_FAMILY_MILAN_GENOA) => Ok(Self::MilanGenoa),
            (_, CPUID_FAMILY_TURIN) => Ok(Self::Turin),
            (_, f) => Err(SnpError::UnknownCpuFamily(f)),
        }
    }

    /// The byte of `component` in this layout (`None`: FMC on Milan and
    /// Genoa, which have none).
    pub fn byte_of(self, component: TcbComponent) -> Option<usize> {
        use TcbComponent::*;
        match (self, component) {
            (Self::MilanGenoa, Fmc) => None,
            (Self::MilanGenoa, BootLoader) => Some(0),
            (Self::MilanGenoa, Tee) => Some(1),
            (Self::MilanGenoa, Snp) => Some(6),
            (Self::Turin, Fmc) => Some(0),
            (Self::Turin, BootLoader) => Some(1),
            (Self::Turin, Tee) => Some(2),
            (Self::Turin, Snp) => Some(3),
            (_, Microcode) => Some(7),
        }
    }
}

/// A component of a TCB version: a security patch level (SPL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcbComponent {
    /// The FMC's (Turin only).
    Fmc,
    /// The PSP boot loader's.
    BootLoader,
    /// The PSP OS's (TEE).
    Tee,
    /// The SNP firmware's.
    Snp,
    /// The microcode's.
    Microcode,
}

impl TcbComponent {
    /// Every component, in the order they are checked and shown.
    pub const ALL: [Self; 5] = [
        Self::Fmc,
        Self::BootLoader,
        Self::Tee,
        Self::Snp,
        Self::Microcode,
    ];

    /// The OID arcs of the VCEK extension naming this component's level
    /// (1.3.6.1.4.1.3704.1.3.n: blSPL 1, teeSPL 2, snpSPL 3, ucodeSPL 8,
    /// fmcSPL 9), a DER INTEGER.
    pub fn vcek_oid(self) -> [u64; 10] {
        let last = match self {
            Self::BootLoader => 1,
            Self::Tee => 2,
            Self::Snp => 3,
            Self::Microcode => 8,
            Self::Fmc => 9,
        };
        [1, 3, 6, 1, 4, 1, 3704, 1, 3, last]
    }

    /// The name of the VCEK extension of this component (`blSPL`,
    /// `teeSPL`, `snpSPL`, `ucodeSPL`, `fmcSPL`).
    pub fn vcek_extension(self) -> &'static str {
        match self {
            Self::Fmc => "fmcSPL",
            Self::BootLoader => "blSPL",
            Self::Tee => "teeSPL",
            Self::Snp => "snpSPL",
            Self::Microcode => "ucodeSPL",
        }
    }

    /// The component's name as `--min-tcb` takes it (`fmc`, `bootloader`,
    /// `tee`, `snp`, `microcode`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Fmc => "fmc",
            Self::BootLoader => "bootloader",
            Self::Tee => "tee",
            Self::Snp => "snp",
            Self::Microcode => "microcode",
        }
    }
}

impl fmt::Display for TcbComponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A TCB version as the report carries it (`u64`), read in its CPU
/// generation's layout.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TcbVersion {
    /// The raw value.
    pub raw: u64,
    /// How its bytes are laid out.
    pub layout: TcbLayout,
}

impl TcbVersion {
    /// The security patch level of `component` (`None`: FMC on Milan and
    /// Genoa).
    pub fn get(&self, component: TcbComponent) -> Option<u8> {
        self.layout
            .byte_of(component)
            .map(|i| self.raw.to_le_bytes()[i])
    }
    /// FMC security patch level (Turin only).
    pub fn fmc(&self) -> Option<u8> {
        self.get(TcbComponent::Fmc)
    }
    /// Boot loader security patch level.
    pub fn boot_loader(&self) -> u8 {
        self.get(TcbComponent::BootLoader).unwrap_or_default()
    }
    /// PSP OS (TEE) security patch level.
    pub fn tee(&self) -> u8 {
        self.get(TcbComponent::Tee).unwrap_or_default()
    }
    /// SNP firmware security patch level.
    pub fn snp(&self) -> u8 {
        self.get(TcbComponent::Snp).unwrap_or_default()
    }
    /// Microcode patch level.
    pub fn microcode(&self) -> u8 {
        self.get(TcbComponent::Microcode).unwrap_or_default()
    }
}

impl fmt::Debug for TcbVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TcbVersion({:#018x}, {:?}:", self.raw, self.layout)?;
        for c in TcbComponent::ALL {
            if let Some(v) = self.get(c) {
                write!(f, " {c} {v}")?;
            }
        }
        f.write_str(")")
    }
}

/// Minimum security patch levels of `REPORTED_TCB`, per component (0: no
/// minimum for it). The FMC minimum applies to Turin reports only (Milan
/// and Genoa have no FMC).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MinTcb {
    /// FMC (Turin only).
    pub fmc: u8,
    /// PSP boot loader.
    pub boot_loader: u8,
    /// PSP OS (TEE).
    pub tee: u8,
    /// SNP firmware.
    pub snp: u8,
    /// Microcode.
    pub microcode: u8,
}

impl MinTcb {
    /// The minimum of `component`.
    pub fn get(&self, component: TcbComponent) -> u8 {
        match component {
            TcbComponent::Fmc => self.fmc,
            TcbComponent::BootLoader => self.boot_loader,
            TcbComponent::Tee => self.tee,
            TcbComponent::Snp => self.snp,
            TcbComponent::Microcode => self.microcode,
        }
    }

    fn slot(&mut self, component: TcbComponent) -> &mut u8 {
        match component {
            TcbComponent::Fmc => &mut self.fmc,
            TcbComponent::BootLoader => &mut self.boot_loader,
            TcbComponent::Tee => &mut self.tee,
            TcbComponent::Snp => &mut self.snp,
            TcbComponent::Microcode => &mut self.microcode,
        }
    }

    /// Checks `tcb` against the minimums: the first component below its
    /// minimum is [`SnpError::TcbBelowMinimum`].
    pub fn check(&self, tcb: &TcbVersion) -> Result<()> {
        for component in TcbComponent::ALL {
            let minimum = self.get(component);
            if let Some(found) = tcb.get(component)
                && found < minimum
            {
                return Err(SnpError::TcbBelowMinimum {
                    component,
                    found,
                    minimum,
                });
            }
        }
        Ok(())
    }
}

/// Why a `--min-tcb` text does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "malformed minimum TCB {text:?}: {reason} (expected comma-separated component=level, \
     components fmc, bootloader, tee, snp, microcode, levels 0 to 255, e.g. \
     bootloader=3,tee=0,snp=8,microcode=115)"
)]
pub struct MinTcbParseError {
    /// The text given.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

impl std::str::FromStr for MinTcb {
    type Err = MinTcbParseError;

    /// Parses `component=level` pairs separated by commas, such as
    /// `bootloader=3,tee=0,snp=8,microcode=115`: components `fmc`,
    /// `bootloader` (or `bl`), `tee`, `snp`, `microcode` (or `ucode`),
    /// case-insensitive, each at most once; levels decimal, 0 to 255;
    /// components not named have no minimum.
    fn from_str(text: &str) -> std::result::Result<Self, Self::Err> {
        let err = |reason: String| MinTcbParseError {
            text: text.into(),
            reason,
        };
        if text.trim().is_empty() {
            return Err(err("it is empty".into()));
        }
        let mut out = Self::default();
        let mut seen = vec![];
        for pair in text.split(',') {
            let pair = pair.trim();
            let (name, level) = pair
                .split_once('=')
                .ok_or_else(|| err(format!("{pair:?} is not component=level")))?;
            let component = match name.trim().to_ascii_lowercase().as_str() {
                "fmc" => TcbComponent::Fmc,
                "bootloader" | "bl" => TcbComponent::BootLoader,
                "tee" => TcbComponent::Tee,
                "snp" => TcbComponent::Snp,
                "microcode" | "ucode" => TcbComponent::Microcode,
                other => return Err(err(format!("unknown component {other:?}"))),
            };
            if seen.contains(&component) {
                return Err(err(format!("{component} is given twice")));
            }
            seen.push(component);
            let level = level.trim();
            *out.slot(component) = level
                .parse::<u8>()
                .ok()
                .filter(|_| level.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| err(format!("{component} level {level:?} is not 0 to 255")))?;
        }
        Ok(out)
    }
}

/// The fields of an `ATTESTATION_REPORT` this verifier uses.
#[derive(Clone, PartialEq, Eq)]
pub struct Report<'a> {
    /// `VERSION` (0x00).
    pub version: u32,
    /// `GUEST_SVN` (0x04).
    pub guest_svn: u32,
    /// `POLICY` (0x08): the guest policy.
    pub policy: u64,
    /// `VMPL` (0x30).
    pub vmpl: u32,
    /// `SIGNATURE_ALGO` (0x34).
    pub signature_algo: u32,
    /// `SIGNING_KEY` (bits 4:2 at 0x48): 0 VCEK, 1 VLEK, 7 none.
    pub signing_key: u8,
    /// `REPORT_DATA` (0x50).
    pub report_data: [u8; REPORT_DATA_LEN],
    /// `MEASUREMENT` (0x90): the launch measurement.
    pub measurement: [u8; MEASUREMENT_LEN],
    /// `CURRENT_TCB` (0x38), raw.
    pub current_tcb: u64,
    /// `PLATFORM_INFO` (0x40).
    pub platform_info: u64,
    /// `REPORTED_TCB` (0x180), raw: the TCB the VCEK is derived from.
    pub reported_tcb: u64,
    /// `CPUID_FAM_ID` (0x188; zero in version 2).
    pub cpuid_family: u8,
    /// `CHIP_ID` (0x1A0; zeros when the host masks it).
    pub chip_id: [u8; 64],
    /// `COMMITTED_TCB` (0x1E0), raw.
    pub committed_tcb: u64,
    /// The signed bytes `[0, 0x2A0)`.
    pub signed: &'a [u8],
    /// The signature as ring reads it: r then s, 48 bytes each, big-endian.
    pub signature: [u8; 96],
}

impl fmt::Debug for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Report")
            .field("version", &self.version)
            .field("policy", &format_args!("{:#x}", self.policy))
            .field("vmpl", &self.vmpl)
            .field("measurement", &hex(&self.measurement))
            .field("reported_tcb", &format_args!("{:#018x}", self.reported_tcb))
            .field("cpuid_family", &format_args!("{:#04x}", self.cpuid_family))
            .finish_non_exhaustive()
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A 72-byte little-endian signature component as 48 big-endian bytes
/// (the upper 24 bytes must be zero for a P-384 scalar).
fn component(le: &[u8]) -> Option<[u8; 48]> {
    if le[48..72].iter().any(|&b| b != 0) {
        return None;
    }
    let mut be = [0u8; 48];
    for (o, i) in be.iter_mut().zip(le[..48].iter().rev()) {
        *o = *i;
    }
    Some(be)
}

impl<'a> Report<'a> {
    /// Parses a report: its length must be [`REPORT_LEN`]. Checks nothing
    /// else (see [`verify_report`]).
    pub fn parse(b: &'a [u8]) -> Result<Self> {
        if b.len() != REPORT_LEN {
            return Err(SnpError::BadLength(b.len()));
        }
        let mut signature = [0u8; 96];
        // A non-zero upper half cannot be a P-384 scalar: the signature
        // stays zero and does not verify.
        if let (Some(r), Some(s)) = (
            component(&b[SIGNATURE_AT..SIGNATURE_AT + 72]),
            component(&b[SIGNATURE_AT + 72..SIGNATURE_AT + 144]),
        ) {
            signature[..48].copy_from_slice(&r);
            signature[48..].copy_from_slice(&s);
        }
        Ok(Self {
            version: u32_at(b, 0),
            guest_svn: u32_at(b, 4),
            policy: u64_at(b, 8),
            vmpl: u32_at(b, 0x30),
            signature_algo: u32_at(b, 0x34),
            signing_key: ((u32_at(b, 0x48) >> 2) & 7) as u8,
            report_data: b[REPORT_DATA_AT..REPORT_DATA_AT + REPORT_DATA_LEN]
                .try_into()
                .expect("64 bytes"),
            measurement: b[MEASUREMENT_AT..MEASUREMENT_AT + MEASUREMENT_LEN]
                .try_into()
                .expect("48 bytes"),
            current_tcb: u64_at(b, CURRENT_TCB_AT),
            platform_info: u64_at(b, 0x40),
            reported_tcb: u64_at(b, REPORTED_TCB_AT),
            cpuid_family: b[CPUID_FAM_ID_AT],
            chip_id: b[CHIP_ID_AT..CHIP_ID_AT + 64].try_into().expect("64 bytes"),
            committed_tcb: u64_at(b, COMMITTED_TCB_AT),
            signed: &b[..SIGNATURE_AT],
            signature,
        })
    }

    /// The layout of the report's TCB versions ([`TcbLayout::of`]).
    pub fn tcb_layout(&self) -> Result<TcbLayout> {
        TcbLayout::of(self.version, self.cpuid_family)
    }
}

/// The signature field (0x2A0) for an ECDSA P-384 signature given as r
/// then s, 48 bytes each, big-endian (as ring signs): r and s as 72-byte
/// little-endian fields, the rest zero. For building test reports.
pub fn signature_field(rs_be: &[u8; 96]) -> [u8; REPORT_LEN - SIGNATURE_AT] {
    let mut out = [0u8; REPORT_LEN - SIGNATURE_AT];
    for i in 0..48 {
        out[i] = rs_be[47 - i];
        out[72 + i] = rs_be[95 - i];
    }
    out
}

/// A certificate table (GHCB extended guest request): entries of a
/// 16-byte GUID, a 4-byte offset and a 4-byte length (little-endian,
/// offsets from the table's start), ended by an all-zero entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CertTable {
    /// (GUID in RFC 4122 byte order, certificate bytes) per entry.
    pub entries: Vec<([u8; 16], Vec<u8>)>,
}

impl CertTable {
    /// Parses a table. GUIDs are read in RFC 4122 byte order and, for the
    /// known ones, in the mixed-endian order too.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let bad = |m: String| SnpError::CertTable(m);
        if b.len() > MAX_CERT_TABLE {
            return Err(bad(format!("{} bytes (at most {MAX_CERT_TABLE})", b.len())));
        }
        let mut entries = vec![];
        let mut at = 0;
        loop {
            let Some(e) = b.get(at..at + 24) else {
                return Err(bad(format!(
                    "entry {} runs past the table's end ({} bytes; no terminating entry)",
                    entries.len(),
                    b.len()
                )));
            };
            if e.iter().all(|&x| x == 0) {
                break;
            }
            let mut g: [u8; 16] = e[..16].try_into().expect("16 bytes");
            for known in [GUID_VCEK, GUID_VLEK, GUID_ASK, GUID_ARK] {
                if g == mixed_endian(known) {
                    g = known;
                }
            }
            let offset = u32_at(e, 16) as usize;
            let len = u32_at(e, 20) as usize;
            let cert = offset
                .checked_add(len)
                .and_then(|end| b.get(offset..end))
                .ok_or_else(|| {
                    bad(format!(
                        "entry {} (offset {offset}, length {len}) lies outside the table ({} bytes)",
                        entries.len(),
                        b.len()
                    ))
                })?;
            entries.push((g, cert.to_vec()));
            at += 24;
        }
        Ok(Self { entries })
    }

    /// The table's bytes (RFC 4122 GUIDs): the inverse of
    /// [`CertTable::parse`].
    pub fn to_bytes(&self) -> Vec<u8> {
        let head = 24 * (self.entries.len() + 1);
        let mut out = vec![0u8; head];
        for (i, (g, cert)) in self.entries.iter().enumerate() {
            let e = &mut out[24 * i..24 * (i + 1)];
            e[..16].copy_from_slice(g);
            let offset = head
                + self.entries[..i]
                    .iter()
                    .map(|(_, c)| c.len())
                    .sum::<usize>();
            e[16..20].copy_from_slice(&(offset as u32).to_le_bytes());
            e[20..24].copy_from_slice(&(cert.len() as u32).to_le_bytes());
        }
        for (_, cert) in &self.entries {
            out.extend_from_slice(cert);
        }
        out
    }

    /// The first certificate with GUID `g`.
    pub fn get(&self, g: &[u8; 16]) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|(x, _)| x == g)
            .map(|(_, c)| c.as_slice())
    }
}

/// A pinned root: an ARK (self-signed) and, optionally, the ASK and the
/// ASVK it signed (used when the proxy sends no ASK or ASVK).
#[derive(Clone, PartialEq, Eq)]
pub struct TrustedRoot {
    /// The product (`Milan`, `Genoa`, `Turin`, or a test name).
    pub product: String,
    /// The ARK, DER.
    pub ark: Vec<u8>,
    /// The ASK, DER.
    pub ask: Option<Vec<u8>>,
    /// The ASVK (the intermediate of VLEKs), DER.
    pub asvk: Option<Vec<u8>>,
}

impl fmt::Debug for TrustedRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustedRoot")
            .field("product", &self.product)
            .field("ark_bytes", &self.ark.len())
            .field("ask", &self.ask.is_some())
            .field("asvk", &self.asvk.is_some())
            .finish()
    }
}

/// AMD's ARK, ASK and ASVK certificates (PEM), as AMD's key distribution
/// service publishes them (`https://kdsintf.amd.com/vcek/v1/<product>/cert_chain`
/// for the ASK and ARK, `.../vlek/v1/<product>/cert_chain` for the ASVK
/// and ARK; the ASVKs as go-sev-guest embeds them, each checked here to be
/// signed by the pinned ARK).
const AMD_ROOTS: [(&str, &str, &str, &str); 3] = [
    (
        "Milan",
        include_str!("../../certs/amd/milan-ark.pem"),
        include_str!("../../certs/amd/milan-ask.pem"),
        include_str!("../../certs/amd/milan-asvk.pem"),
    ),
    (
        "Genoa",
        include_str!("../../certs/amd/genoa-ark.pem"),
        include_str!("../../certs/amd/genoa-ask.pem"),
        include_str!("../../certs/amd/genoa-asvk.pem"),
    ),
    (
        "Turin",
        include_str!("../../certs/amd/turin-ark.pem"),
        include_str!("../../certs/amd/turin-ask.pem"),
        include_str!("../../certs/amd/turin-asvk.pem"),
    ),
];

/// A certificate's DER from DER or PEM bytes (a `CERTIFICATE` block).
pub fn cert_der(bytes: &[u8]) -> std::result::Result<Vec<u8>, String> {
    pem_or_der(bytes, "CERTIFICATE")
}

/// A CRL's DER from DER or PEM bytes (an `X509 CRL` block), such as AMD's
/// key distribution service or Intel's PCS serve.
pub fn crl_der(bytes: &[u8]) -> std::result::Result<Vec<u8>, String> {
    pem_or_der(bytes, "X509 CRL")
}

/// DER bytes as they are, or the contents of a PEM block labelled `label`.
fn pem_or_der(bytes: &[u8], label: &str) -> std::result::Result<Vec<u8>, String> {
    if bytes.trim_ascii_start().starts_with(b"-----BEGIN") {
        let (_, pem) = x509_parser::pem::parse_x509_pem(bytes.trim_ascii_start())
            .map_err(|e| format!("not a PEM block: {e}"))?;
        if pem.label != label {
            return Err(format!("a PEM {:?} block, not {label:?}", pem.label));
        }
        Ok(pem.contents)
    } else {
        Ok(bytes.to_vec())
    }
}

impl TrustedRoot {
    /// AMD's roots for Milan, Genoa and Turin (ARK, ASK and ASVK each).
    pub fn amd() -> Vec<Self> {
        AMD_ROOTS
            .iter()
            .map(|(product, ark, ask, asvk)| Self {
                product: (*product).into(),
                ark: cert_der(ark.as_bytes()).expect("a built-in AMD ARK"),
                ask: Some(cert_der(ask.as_bytes()).expect("a built-in AMD ASK")),
                asvk: Some(cert_der(asvk.as_bytes()).expect("a built-in AMD ASVK")),
            })
            .collect()
    }
}

/// What the verifier requires of a report.
#[derive(Clone, PartialEq, Eq)]
pub struct SnpPolicy {
    /// The expected launch measurement; `None`: any (reported as not
    /// pinned in [`SnpVerified::measurement_pinned`]).
    pub measurement: Option<[u8; MEASUREMENT_LEN]>,
    /// The VMPL the report must come from (0: the most privileged).
    pub vmpl: u32,
    /// Minimum security patch levels of `REPORTED_TCB`; `None`: any
    /// (reported as not checked in [`SnpVerified::min_tcb_checked`]).
    pub min_tcb: Option<MinTcb>,
    /// Refuse a report from a platform with SMT enabled (`PLATFORM_INFO`'s
    /// `SMT_EN`, whatever the guest policy's `SMT` bit says). Off by
    /// default.
    pub refuse_smt: bool,
    /// Refuse a guest whose policy allows a migration agent
    /// (`MIGRATE_MA`). Off by default.
    pub refuse_migration_agent: bool,
    /// Accept a report whose `CHIP_ID` is masked (zeros): the VCEK's
    /// `hwID` is then not compared (reported in
    /// [`SnpVerified::chip_id_checked`]). Refused by default.
    pub allow_masked_chip_id: bool,
    /// A VCEK (DER) given to the client; preferred to the proxy's. Used
    /// for VCEK-signed reports only: a VLEK-signed report is verified with
    /// the VLEK of the proxy's certificate table.
    pub vcek: Option<Vec<u8>>,
    /// The pinned roots ([`TrustedRoot::amd`] by default).
    pub roots: Vec<TrustedRoot>,
    /// Certificate revocation lists (DER) of the ARKs, such as AMD's key
    /// distribution service serves at `/vcek/v1/{product}/crl`. Empty (the
    /// default): revocation is not checked (reported in
    /// [`SnpVerified::revocation_checked`]). Otherwise one of them must be
    /// issued by the ARK the chain ends in, signed by it and current, and
    /// each such one must not list the chain's ASK or ASVK.
    pub crls: Vec<Vec<u8>>,
}

impl Default for SnpPolicy {
    fn default() -> Self {
        Self {
            measurement: None,
            vmpl: 0,
            min_tcb: None,
            allow_masked_chip_id: false,
            refuse_smt: false,
            refuse_migration_agent: false,
            vcek: None,
            roots: TrustedRoot::amd(),
            crls: vec![],
        }
    }
}

impl fmt::Debug for SnpPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnpPolicy")
            .field("measurement", &self.measurement.as_ref().map(|m| hex(m)))
            .field("vmpl", &self.vmpl)
            .field("min_tcb", &self.min_tcb)
            .field("allow_masked_chip_id", &self.allow_masked_chip_id)
            .field("refuse_smt", &self.refuse_smt)
            .field("refuse_migration_agent", &self.refuse_migration_agent)
            .field("vcek", &self.vcek.is_some())
            .field("roots", &self.roots)
            .field("crls", &self.crls.len())
            .finish()
    }
}

/// Where the key that signed the report (VCEK or VLEK) came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VcekSource {
    /// Given to the client ([`SnpPolicy::vcek`]; VCEK only).
    Client,
    /// The proxy's certificate table (`auxblob`).
    CertTable,
}

/// The kind of key that signed a report (its `SIGNING_KEY` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigningKey {
    /// The VCEK (0): per chip and TCB, chained through the ASK.
    Vcek,
    /// The VLEK (1): per cloud provider and TCB, not per chip, chained
    /// through the ASVK.
    Vlek,
}

impl SigningKey {
    /// `VCEK` or `VLEK`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Vcek => "VCEK",
            Self::Vlek => "VLEK",
        }
    }

    /// The name of the intermediate it chains through: `ASK` or `ASVK`.
    pub fn intermediate(self) -> &'static str {
        match self {
            Self::Vcek => "ASK",
            Self::Vlek => "ASVK",
        }
    }
}

impl fmt::Display for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What [`verify_report`] established.
#[derive(Clone, PartialEq, Eq)]
pub struct SnpVerified {
    /// The pinned root the chain ends in (`Milan`, `Genoa`, ...).
    pub product: String,
    /// Which key signed the report (VCEK or VLEK).
    pub signed_by: SigningKey,
    /// Where that key came from.
    pub vcek_source: VcekSource,
    /// For a VLEK, its `csp_id` extension ([`OID_VLEK_CSP_ID`]): the
    /// cloud provider AMD issued it to, as the certificate says (not
    /// compared with anything); `None` for a VCEK or a VLEK without one.
    pub csp_id: Option<String>,
    /// The report's version.
    pub version: u32,
    /// The guest policy (its debug bit is off; its `MIGRATE_MA` bit too
    /// when [`SnpPolicy::refuse_migration_agent`]).
    pub policy: u64,
    /// `PLATFORM_INFO` (`SMT_EN` off when [`SnpPolicy::refuse_smt`]).
    pub platform_info: u64,
    /// The report's VMPL (the expected one).
    pub vmpl: u32,
    /// The launch measurement.
    pub measurement: [u8; MEASUREMENT_LEN],
    /// Whether the measurement was compared with an expected value; when
    /// `false` any guest image on a genuine AMD chip passes.
    pub measurement_pinned: bool,
    /// The reported TCB (the one the VCEK is derived from).
    pub reported_tcb: TcbVersion,
    /// Whether the reported TCB was compared with a minimum
    /// ([`SnpPolicy::min_tcb`]); when `false` a chip at any patch level
    /// passes.
    pub min_tcb_checked: bool,
    /// Whether the VCEK's `hwID` was compared with the report's
    /// `CHIP_ID`: `false` for a masked chip id the policy allowed
    /// ([`SnpPolicy::allow_masked_chip_id`]), and always `false` for a
    /// VLEK-signed report (a VLEK is not chip-specific and has no `hwID`:
    /// the report is bound to the provider, not to a chip). The VCEK's or
    /// VLEK's TCB extensions are always compared with `REPORTED_TCB`.
    pub chip_id_checked: bool,
    /// The TCB the firmware runs at (`CURRENT_TCB`; not compared).
    pub current_tcb: TcbVersion,
    /// The TCB the firmware cannot roll back below (`COMMITTED_TCB`; not
    /// compared).
    pub committed_tcb: TcbVersion,
    /// The guest's security version number.
    pub guest_svn: u32,
    /// Whether the chain's ASK or ASVK was checked against its ARK's CRL
    /// ([`SnpPolicy::crls`]); when `false` a revoked intermediate passes.
    pub revocation_checked: bool,
}

impl fmt::Debug for SnpVerified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnpVerified")
            .field("product", &self.product)
            .field("signed_by", &self.signed_by)
            .field("vcek_source", &self.vcek_source)
            .field("csp_id", &self.csp_id)
            .field("version", &self.version)
            .field("policy", &format_args!("{:#x}", self.policy))
            .field("platform_info", &format_args!("{:#x}", self.platform_info))
            .field("vmpl", &self.vmpl)
            .field("measurement", &hex(&self.measurement))
            .field("measurement_pinned", &self.measurement_pinned)
            .field("reported_tcb", &self.reported_tcb)
            .field("min_tcb_checked", &self.min_tcb_checked)
            .field("chip_id_checked", &self.chip_id_checked)
            .field("current_tcb", &self.current_tcb)
            .field("committed_tcb", &self.committed_tcb)
            .field("guest_svn", &self.guest_svn)
            .field("revocation_checked", &self.revocation_checked)
            .finish()
    }
}

impl SnpVerified {
    /// The launch measurement, hex.
    pub fn measurement_hex(&self) -> String {
        hex(&self.measurement)
    }
}

/// `which` in `der` ([`x509::parse_cert`]), valid now.
fn parse_cert<'a>(which: &'static str, der: &'a [u8]) -> Result<X509Certificate<'a>> {
    x509::parse_cert(der, None).map_err(|e| match e {
        CertProblem::Malformed(reason) => SnpError::Certificate { which, reason },
        CertProblem::Expired => SnpError::Expired(which),
    })
}

/// The P-384 point of an EC P-384 key, or `None`.
fn p384_point<'a>(cert: &'a X509Certificate<'_>) -> Option<&'a [u8]> {
    ec_point(cert, &OID_NIST_EC_P384)
}

/// Whether RSASSA-PSS parameters are SHA-384, MGF1 with SHA-384, a
/// 48-byte salt and the usual trailer.
fn pss_sha384(alg: &AlgorithmIdentifier<'_>) -> bool {
    let Some(params) = alg.parameters.as_ref() else {
        return false;
    };
    let Ok(p) = RsaSsaPssParams::try_from(params) else {
        return false;
    };
    let mgf_ok = p
        .mask_gen_algorithm()
        .is_ok_and(|m| m.hash == OID_NIST_HASH_SHA384);
    *p.hash_algorithm_oid() == OID_NIST_HASH_SHA384
        && mgf_ok
        && p.salt_length() == 48
        && p.trailer_field() == 1
}

/// Verifies that `issuer`'s key signed `cert` with one of the two accepted
/// algorithms.
fn check_signed_by(
    cert: &X509Certificate<'_>,
    which: &'static str,
    issuer: &X509Certificate<'_>,
    issuer_name: &'static str,
) -> Result<()> {
    check_signature(&Signed::cert(cert), which, issuer, issuer_name)
}

/// Verifies that `issuer`'s key made `signed`'s signature with one of the
/// two accepted algorithms (`which` names what was signed).
fn check_signature(
    signed: &Signed<'_>,
    which: &'static str,
    issuer: &X509Certificate<'_>,
    issuer_name: &'static str,
) -> Result<()> {
    let alg = &signed.alg.algorithm;
    let spki = issuer.public_key();
    let (verifier, key): (&dyn VerificationAlgorithm, &[u8]) = if *alg == OID_PKCS1_RSASSAPSS {
        if !pss_sha384(signed.alg) {
            return Err(SnpError::Certificate {
                which,
                reason: "RSASSA-PSS with other parameters than SHA-384, MGF1 SHA-384, salt 48"
                    .into(),
            });
        }
        if spki.algorithm.algorithm != OID_PKCS1_RSAENCRYPTION
            && spki.algorithm.algorithm != OID_PKCS1_RSASSAPSS
        {
            return Err(SnpError::Chain(format!(
                "{which} is signed with RSASSA-PSS but the {issuer_name} has no RSA key"
            )));
        }
        (
            &RSA_PSS_2048_8192_SHA384,
            spki.subject_public_key.data.as_ref(),
        )
    } else if *alg == OID_SIG_ECDSA_WITH_SHA384 {
        let point = p384_point(issuer).ok_or_else(|| {
            SnpError::Chain(format!(
                "{which} is signed with ECDSA P-384 but the {issuer_name} has no P-384 key"
            ))
        })?;
        (&ECDSA_P384_SHA384_ASN1, point)
    } else {
        return Err(SnpError::Certificate {
            which,
            reason: format!(
                "signature algorithm {alg} (accepted: RSASSA-PSS SHA-384, ECDSA P-384 SHA-384)"
            ),
        });
    };
    UnparsedPublicKey::new(verifier, key)
        .verify(signed.data, signed.signature)
        .map_err(|_| SnpError::Chain(format!("the {which} is not signed by the {issuer_name}")))
}

/// Verifies an SEV-SNP report, in this order: its layout (length,
/// version, signature algorithm, VCEK or VLEK as signing key); the
/// certificate chain (for a VCEK-signed report, the VCEK from
/// `policy.vcek` or else `certs`, the table from the proxy, and the ASK
/// from the table or else the pinned root's; for a VLEK-signed report,
/// the VLEK and the ASVK from the table; the intermediate's common name
/// must name an ASK or an ASVK as the signing key asks; the ARK pinned,
/// and a table's ARK byte-equal to a pinned one); the report's signature
/// under the VCEK or VLEK; that key's extensions against the report (its
/// TCB levels equal to `REPORTED_TCB`'s, a VCEK's `hwID` to `CHIP_ID`:
/// missing extensions refused; a VLEK has no `hwID`); then its claims: `REPORT_DATA` equal to
/// `expected_data`, the debug bit off (and, when `policy` asks, the
/// migration agent bit and the platform's SMT), the VMPL, the measurement
/// and the minimum `REPORTED_TCB` as `policy` says. The TCB layout follows the
/// report's CPU family ([`TcbLayout::of`]); an unknown family is refused.
pub fn verify_report(
    report: &[u8],
    certs: Option<&[u8]>,
    expected_data: &[u8; REPORT_DATA_LEN],
    policy: &SnpPolicy,
) -> Result<SnpVerified> {
    let r = Report::parse(report)?;
    if !SUPPORTED_VERSIONS.contains(&r.version) {
        return Err(SnpError::UnsupportedVersion(r.version));
    }
    if r.signature_algo != SIG_ALGO_ECDSA_P384_SHA384 {
        return Err(SnpError::UnsupportedSignatureAlgorithm(r.signature_algo));
    }
    // SIGNING_KEY: 0 VCEK, 1 VLEK, 7 none (AMD's SEV-SNP firmware ABI
    // specification, ATTESTATION_REPORT).
    let signed_by = match r.signing_key {
        0 => SigningKey::Vcek,
        1 => SigningKey::Vlek,
        k => return Err(SnpError::UnsupportedSigningKey(k)),
    };
    let table = certs.map(CertTable::parse).transpose()?.unwrap_or_default();
    let (vcek_der, vcek_source) = match signed_by {
        SigningKey::Vcek => match (&policy.vcek, table.get(&GUID_VCEK)) {
            (Some(v), _) => (v.as_slice(), VcekSource::Client),
            (None, Some(v)) => (v, VcekSource::CertTable),
            (None, None) => return Err(SnpError::NoVcek),
        },
        SigningKey::Vlek => (
            table.get(&GUID_VLEK).ok_or(SnpError::NoVlek)?,
            VcekSource::CertTable,
        ),
    };
    let vcek = parse_cert(signed_by.name(), vcek_der)?;
    let (product, revocation_checked) =
        verify_chain(&vcek, signed_by, &table, &policy.roots, &policy.crls)?;

    let point = p384_point(&vcek).ok_or_else(|| SnpError::Certificate {
        which: signed_by.name(),
        reason: "its key is not an ECDSA P-384 key".into(),
    })?;
    UnparsedPublicKey::new(&ECDSA_P384_SHA384_FIXED, point)
        .verify(r.signed, &r.signature)
        .map_err(|_| SnpError::BadSignature)?;
    // The report is AMD's from here on: its CPU family says how to read
    // its TCB versions.
    let layout = r.tcb_layout()?;
    let tcb = |raw| TcbVersion { raw, layout };
    let reported_tcb = tcb(r.reported_tcb);
    let chip_id_checked = match signed_by {
        SigningKey::Vcek => check_vcek_extensions(&vcek, &reported_tcb, &r.chip_id, policy)?,
        SigningKey::Vlek => {
            check_tcb_extensions(&vcek, &reported_tcb)?;
            false
        }
    };
    let csp_id = match signed_by {
        SigningKey::Vcek => None,
        SigningKey::Vlek => csp_id(&vcek)?,
    };

    if r.report_data != *expected_data {
        return Err(SnpError::ReportDataMismatch);
    }
    if r.policy & POLICY_DEBUG != 0 {
        return Err(SnpError::DebugGuest(r.policy));
    }
    if policy.refuse_migration_agent && r.policy & POLICY_MIGRATE_MA != 0 {
        return Err(SnpError::MigrationAgentAllowed(r.policy));
    }
    if policy.refuse_smt && r.platform_info & PLATFORM_SMT_EN != 0 {
        return Err(SnpError::SmtEnabled(r.platform_info));
    }
    if r.vmpl != policy.vmpl {
        return Err(SnpError::Vmpl {
            got: r.vmpl,
            want: policy.vmpl,
        });
    }
    if let Some(want) = &policy.measurement
        && *want != r.measurement
    {
        return Err(SnpError::MeasurementMismatch {
            got: hex(&r.measurement),
            want: hex(want),
        });
    }
    if let Some(min) = &policy.min_tcb {
        min.check(&reported_tcb)?;
    }
    Ok(SnpVerified {
        product,
        signed_by,
        vcek_source,
        csp_id,
        version: r.version,
        policy: r.policy,
        platform_info: r.platform_info,
        vmpl: r.vmpl,
        measurement: r.measurement,
        measurement_pinned: policy.measurement.is_some(),
        reported_tcb,
        min_tcb_checked: policy.min_tcb.is_some(),
        chip_id_checked,
        current_tcb: tcb(r.current_tcb),
        committed_tcb: tcb(r.committed_tcb),
        guest_svn: r.guest_svn,
        revocation_checked,
    })
}

/// The value of the VCEK's one extension with OID `oid`.
fn vcek_extension<'a>(
    vcek: &'a X509Certificate<'_>,
    oid: &[u64],
    name: &'static str,
) -> Result<&'a [u8]> {
    let mut found = vcek.extensions().iter().filter(|e| {
        e.oid
            .iter()
            .is_some_and(|arcs| arcs.eq(oid.iter().copied()))
    });
    let ext = found.next().ok_or(SnpError::VcekMissingExtension(name))?;
    if found.next().is_some() {
        return Err(SnpError::VcekMalformedExtension {
            extension: name,
            reason: "given more than once".into(),
        });
    }
    Ok(ext.value)
}

/// The VLEK's `csp_id` extension, if it has one: the contents of a DER
/// UTF8String, PrintableString or IA5String, or else the raw value read
/// as UTF-8 (lossily; it is only reported, never compared).
fn csp_id(vlek: &X509Certificate<'_>) -> Result<Option<String>> {
    let value = match vcek_extension(vlek, &OID_VLEK_CSP_ID, "csp_id") {
        Ok(v) => v,
        Err(SnpError::VcekMissingExtension(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let text = match value {
        [0x0c | 0x13 | 0x16, l, v @ ..] if usize::from(*l) == v.len() && *l < 0x80 => v,
        v => v,
    };
    Ok(Some(String::from_utf8_lossy(text).into_owned()))
}

/// A DER INTEGER from 0 to 255 (minimal encoding), alone.
fn der_u8(v: &[u8]) -> Option<u8> {
    match v {
        [0x02, 0x01, x] if *x < 0x80 => Some(*x),
        [0x02, 0x02, 0x00, x] if *x >= 0x80 => Some(*x),
        _ => None,
    }
}

/// Checks the VCEK's AMD extensions against a (signature-verified)
/// report: each TCB level extension of the report's layout (`blSPL`,
/// `teeSPL`, `snpSPL`, `ucodeSPL`, and `fmcSPL` on Turin; DER INTEGERs)
/// equals that component of `reported_tcb`, and `hwID` (the chip id, 64
/// bytes, or the first 8 on Turin; raw, as AMD's key distribution service
/// writes it, or a DER OCTET STRING) equals `chip_id`. Any of them
/// missing is refused: a genuine VCEK has them all. A masked (all-zero)
/// `chip_id` is refused ([`SnpError::ChipIdMasked`]) unless
/// `policy.allow_masked_chip_id`; the result says whether the chip id was
/// compared.
fn check_vcek_extensions(
    vcek: &X509Certificate<'_>,
    reported_tcb: &TcbVersion,
    chip_id: &[u8; 64],
    policy: &SnpPolicy,
) -> Result<bool> {
    check_tcb_extensions(vcek, reported_tcb)?;
    check_hwid(vcek, reported_tcb.layout, chip_id, policy)
}

/// Checks that each TCB level extension of the report's layout of a VCEK
/// or VLEK (the same OIDs in both, per AMD's VCEK and VLEK certificate
/// specifications) equals that component of `reported_tcb`; missing ones
/// are refused.
fn check_tcb_extensions(vcek: &X509Certificate<'_>, reported_tcb: &TcbVersion) -> Result<()> {
    for component in TcbComponent::ALL {
        let Some(report) = reported_tcb.get(component) else {
            continue;
        };
        let name = component.vcek_extension();
        let value = vcek_extension(vcek, &component.vcek_oid(), name)?;
        let vcek_level = der_u8(value).ok_or_else(|| SnpError::VcekMalformedExtension {
            extension: name,
            reason: format!("not a DER INTEGER from 0 to 255 ({})", hex(value)),
        })?;
        if vcek_level != report {
            return Err(SnpError::VcekTcbMismatch {
                component,
                vcek: vcek_level,
                report,
            });
        }
    }
    Ok(())
}

/// Checks the VCEK's `hwID` against `chip_id` (see
/// [`check_vcek_extensions`]): whether it was compared.
fn check_hwid(
    vcek: &X509Certificate<'_>,
    layout: TcbLayout,
    chip_id: &[u8; 64],
    policy: &SnpPolicy,
) -> Result<bool> {
    let len = match layout {
        TcbLayout::MilanGenoa => chip_id.len(),
        TcbLayout::Turin => TURIN_HWID_LEN,
    };
    let value = vcek_extension(vcek, &OID_VCEK_HWID, "hwID")?;
    let hwid = match value {
        v if v.len() == len => v,
        [0x04, l, v @ ..] if usize::from(*l) == len && v.len() == len => v,
        v => {
            return Err(SnpError::VcekMalformedExtension {
                extension: "hwID",
                reason: format!(
                    "{} bytes, not a chip id of {len} bytes (raw or a DER OCTET STRING)",
                    v.len()
                ),
            });
        }
    };
    if chip_id.iter().all(|&b| b == 0) {
        return if policy.allow_masked_chip_id {
            Ok(false)
        } else {
            Err(SnpError::ChipIdMasked)
        };
    }
    if hwid != &chip_id[..len] {
        return Err(SnpError::VcekChipIdMismatch {
            vcek: hex(hwid),
            report: hex(&chip_id[..len]),
        });
    }
    Ok(true)
}

/// Checks a pinned root on its own: its ARK parses, is valid now and is
/// self-signed, and its ASK and ASVK, when it has them, are signed by the
/// ARK and named as an ASK and an ASVK.
pub fn check_root(root: &TrustedRoot) -> Result<()> {
    let ark = parse_cert("ARK", &root.ark)?;
    check_signed_by(&ark, "ARK", &ark, "ARK itself")?;
    for (cert, key) in [
        (&root.ask, SigningKey::Vcek),
        (&root.asvk, SigningKey::Vlek),
    ] {
        if let Some(der) = cert {
            let which = key.intermediate();
            let cert = parse_cert(which, der)?;
            check_intermediate_name(&cert, key)?;
            check_signed_by(&cert, which, &ark, "ARK")?;
        }
    }
    Ok(())
}

/// The first common name of a certificate's subject, if any.
fn common_name<'a>(cert: &'a X509Certificate<'_>) -> Option<&'a str> {
    cert.subject().iter_common_name().next()?.as_str().ok()
}

/// Checks that an intermediate is the kind `key` chains through, by its
/// subject's common name: an ASVK's starts with [`ASVK_CN_PREFIX`], an
/// ASK's does not (AMD names them `SEV-VLEK-<product>` and
/// `SEV-<product>`). Both are signed by the same ARK, so without this an
/// ASK could stand in for an ASVK.
fn check_intermediate_name(cert: &X509Certificate<'_>, key: SigningKey) -> Result<()> {
    let cn = common_name(cert).unwrap_or("");
    let is_asvk = cn.starts_with(ASVK_CN_PREFIX);
    if is_asvk != (key == SigningKey::Vlek) {
        return Err(SnpError::Chain(format!(
            "the {key}'s intermediate is named {cn:?}, not an {} (an {}'s common name {} with {ASVK_CN_PREFIX:?})",
            key.intermediate(),
            key.intermediate(),
            if key == SigningKey::Vlek {
                "starts"
            } else {
                "does not start"
            },
        )));
    }
    Ok(())
}

/// Verifies VCEK ← ASK ← ARK, or VLEK ← ASVK ← ARK (the ARK pinned,
/// self-signed; the intermediate from the table, else the pinned root's)
/// and the intermediate against the ARK's CRLs: the pinned root's product
/// and whether revocation was checked.
fn verify_chain(
    vcek: &X509Certificate<'_>,
    key: SigningKey,
    table: &CertTable,
    roots: &[TrustedRoot],
    crls: &[Vec<u8>],
) -> Result<(String, bool)> {
    let (which, inter) = (key.name(), key.intermediate());
    if roots.is_empty() {
        return Err(SnpError::Chain("no pinned root".into()));
    }
    // A table's ARK must be pinned; it then picks the root.
    let roots: Vec<&TrustedRoot> = match table.get(&GUID_ARK) {
        Some(ark) => vec![
            roots
                .iter()
                .find(|r| r.ark == ark)
                .ok_or(SnpError::UnpinnedRoot)?,
        ],
        None => roots.iter().collect(),
    };
    let table_ask = table.get(&GUID_ASK);
    let mut errors = vec![];
    for root in &roots {
        let ark = parse_cert("ARK", &root.ark)?;
        check_signed_by(&ark, "ARK", &ark, "ARK itself")?;
        let pinned = match key {
            SigningKey::Vcek => root.ask.as_deref(),
            SigningKey::Vlek => root.asvk.as_deref(),
        };
        let Some(ask_der) = table_ask.or(pinned) else {
            errors.push((
                root,
                SnpError::Chain(match key {
                    SigningKey::Vcek => "no ASK (none in the proxy's table, none pinned)".into(),
                    SigningKey::Vlek => "no ASVK (none in the proxy's table, none pinned)".into(),
                }),
            ));
            continue;
        };
        let ask = parse_cert(inter, ask_der)?;
        match check_intermediate_name(&ask, key)
            .and_then(|()| check_signed_by(&ask, inter, &ark, "ARK"))
            .and_then(|()| check_signed_by(vcek, which, &ask, inter))
        {
            Ok(()) => {
                let checked = check_revocation(&ark, &ask, inter, &root.product, crls)?;
                return Ok((root.product.clone(), checked));
            }
            Err(e) => errors.push((root, e)),
        }
    }
    if let [(_, e)] = &errors[..] {
        return Err(e.clone());
    }
    Err(SnpError::Chain(format!(
        "the {which} does not chain to a pinned root ({})",
        errors
            .iter()
            .map(|(r, e)| format!("{}: {e}", r.product))
            .collect::<Vec<_>>()
            .join("; ")
    )))
}

/// Checks the ARK-issued `inter` against the ARK's CRLs among `crls`:
/// whether it did (`false` when `crls` is empty).
fn check_revocation(
    ark: &X509Certificate<'_>,
    inter: &X509Certificate<'_>,
    inter_name: &'static str,
    product: &str,
    crls: &[Vec<u8>],
) -> Result<bool> {
    x509::check_revocation(crls, ark, inter, None, |signed| {
        check_signature(signed, "CRL", ark, "ARK")
    })
    .map_err(|e| match e {
        Revocation::Malformed(reason) => SnpError::Crl(reason),
        Revocation::Signature(e) => e,
        Revocation::OutOfDate => SnpError::CrlOutOfDate(product.into()),
        Revocation::Revoked => SnpError::Revoked(inter_name),
        Revocation::NoCrl => SnpError::NoCrl(product.into()),
    })
}
