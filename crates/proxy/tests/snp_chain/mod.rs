//! A test SEV-SNP chain (ARK → ASK → VCEK, and ARK → ASVK → VLEK under
//! the same ARK; ECDSA P-384 keys made here) and reports signed by its
//! VCEK or VLEK, laid out as AMD's firmware does.
#![allow(dead_code)]

use hecloud_proxy::attest::VerifyPolicy;
use hecloud_proxy::attest::snp::{
    CertTable, GUID_ARK, GUID_ASK, GUID_VCEK, GUID_VLEK, MEASUREMENT_AT, REPORT_DATA_AT,
    REPORT_LEN, SIGNATURE_AT, SnpPolicy, TrustedRoot, signature_field,
};
use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DnType, IsCa, Issuer, KeyPair,
    PKCS_ECDSA_P384_SHA384,
};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P384_SHA384_FIXED_SIGNING, EcdsaKeyPair};

/// A launch measurement for tests.
pub const MEASUREMENT: [u8; 48] = [0x5a; 48];
/// A guest policy without the debug bit (SMT allowed, reserved bit 17).
pub const POLICY: u64 = 0x30000;
/// The reported (and current, committed) TCB of test reports, Milan and
/// Genoa layout: boot loader 4, TEE 3, SNP 0x16, microcode 0xd1 (above
/// 127, so that its DER INTEGER takes two bytes).
pub const TCB: u64 = 0xd116_0000_0000_0304;
/// The CPU family of test reports (19h: Milan, Genoa).
pub const FAMILY: u8 = 0x19;
/// The chip id of test reports.
pub const CHIP_ID: [u8; 64] = [0xc1; 64];

fn params(cn: &str, ca: bool) -> CertificateParams {
    let mut p = CertificateParams::new(vec![]).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    if ca {
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    }
    p
}

/// OID arcs of AMD's VCEK extensions, written out here (not taken from the
/// crate) so that the tests check the crate's OIDs.
pub const OID_BL_SPL: [u64; 10] = [1, 3, 6, 1, 4, 1, 3704, 1, 3, 1];
/// teeSPL.
pub const OID_TEE_SPL: [u64; 10] = [1, 3, 6, 1, 4, 1, 3704, 1, 3, 2];
/// snpSPL.
pub const OID_SNP_SPL: [u64; 10] = [1, 3, 6, 1, 4, 1, 3704, 1, 3, 3];
/// ucodeSPL.
pub const OID_UCODE_SPL: [u64; 10] = [1, 3, 6, 1, 4, 1, 3704, 1, 3, 8];
/// fmcSPL (Turin).
pub const OID_FMC_SPL: [u64; 10] = [1, 3, 6, 1, 4, 1, 3704, 1, 3, 9];
/// hwID.
pub const OID_HWID: [u64; 9] = [1, 3, 6, 1, 4, 1, 3704, 1, 4];
/// csp_id (VLEK only).
pub const OID_CSP_ID: [u64; 9] = [1, 3, 6, 1, 4, 1, 3704, 1, 5];
/// The cloud provider named in test VLEKs.
pub const CSP_ID: &str = "cc-test-1.example.com";

/// A level as a DER INTEGER (a leading zero byte from 0x80 on).
pub fn der_int(v: u8) -> Vec<u8> {
    if v < 0x80 {
        vec![2, 1, v]
    } else {
        vec![2, 2, 0, v]
    }
}

/// A VCEK extension: OID arcs and DER content.
pub type Ext = (Vec<u64>, Vec<u8>);

/// The VCEK extensions matching [`TCB`] and [`CHIP_ID`] (Milan and Genoa
/// layout), hwID raw as AMD's key distribution service writes it.
pub fn extensions() -> Vec<Ext> {
    vec![
        (OID_BL_SPL.to_vec(), der_int(4)),
        (OID_TEE_SPL.to_vec(), der_int(3)),
        (OID_SNP_SPL.to_vec(), der_int(0x16)),
        (OID_UCODE_SPL.to_vec(), der_int(0xd1)),
        (OID_HWID.to_vec(), CHIP_ID.to_vec()),
    ]
}

/// The VLEK extensions matching [`TCB`] (Milan and Genoa layout): the TCB
/// levels and a csp_id (an IA5String, [`CSP_ID`]), no hwID.
pub fn vlek_extensions() -> Vec<Ext> {
    let mut exts = extensions();
    exts.retain(|(oid, _)| *oid != OID_HWID);
    let mut csp = vec![0x16, CSP_ID.len() as u8];
    csp.extend_from_slice(CSP_ID.as_bytes());
    exts.push((OID_CSP_ID.to_vec(), csp));
    exts
}

/// ARK → ASK → VCEK and ARK → ASVK → VLEK, DER.
#[derive(Debug)]
pub struct Chain {
    name: String,
    pub ark: Vec<u8>,
    ark_key: Vec<u8>,
    pub ask: Vec<u8>,
    pub vcek: Vec<u8>,
    vcek_key: Vec<u8>,
    pub asvk: Vec<u8>,
    pub vlek: Vec<u8>,
    vlek_key: Vec<u8>,
}

fn leaf(cn: &str, exts: &[Ext], issuer: &Issuer<'_, &KeyPair>) -> (Vec<u8>, Vec<u8>) {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).unwrap();
    let mut p = params(cn, false);
    p.custom_extensions = exts
        .iter()
        .map(|(oid, content)| CustomExtension::from_oid_content(oid, content.clone()))
        .collect();
    let der = p.signed_by(&key, issuer).unwrap().der().to_vec();
    (der, key.serialize_der())
}

impl Chain {
    /// A fresh chain named `name`, its VCEK with [`extensions`].
    pub fn new(name: &str) -> Self {
        Self::with_extensions(name, extensions())
    }

    /// A fresh chain named `name`, its VCEK with the extensions `exts`.
    pub fn with_extensions(name: &str, exts: Vec<Ext>) -> Self {
        Self::with_vlek(name, exts, vlek_extensions(), &format!("SEV-VLEK-{name}"))
    }

    /// A fresh chain named `name`, its VLEK with the extensions
    /// `vlek_exts`, its ASVK's common name `asvk_cn`.
    pub fn vlek_with(name: &str, vlek_exts: Vec<Ext>, asvk_cn: &str) -> Self {
        Self::with_vlek(name, extensions(), vlek_exts, asvk_cn)
    }

    fn with_vlek(name: &str, exts: Vec<Ext>, vlek_exts: Vec<Ext>, asvk_cn: &str) -> Self {
        let ark_key = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).unwrap();
        let ark_params = params(&format!("ARK-{name}"), true);
        let ark = ark_params.self_signed(&ark_key).unwrap().der().to_vec();
        let ark_issuer = Issuer::new(ark_params, &ark_key);
        let ask_key = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).unwrap();
        let ask_params = params(&format!("SEV-{name}"), true);
        let ask = ask_params
            .signed_by(&ask_key, &ark_issuer)
            .unwrap()
            .der()
            .to_vec();
        let ask_issuer = Issuer::new(ask_params, &ask_key);
        let (vcek, vcek_key) = leaf("SEV-VCEK", &exts, &ask_issuer);
        let asvk_key = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).unwrap();
        let asvk_params = params(asvk_cn, true);
        let asvk = asvk_params
            .signed_by(&asvk_key, &ark_issuer)
            .unwrap()
            .der()
            .to_vec();
        let asvk_issuer = Issuer::new(asvk_params, &asvk_key);
        let (vlek, vlek_key) = leaf("SEV-VLEK", &vlek_exts, &asvk_issuer);
        Self {
            name: name.into(),
            ark,
            ark_key: ark_key.serialize_der(),
            ask,
            vcek,
            vcek_key,
            asvk,
            vlek,
            vlek_key,
        }
    }

    /// The chain's root, to pin.
    pub fn root(&self) -> TrustedRoot {
        TrustedRoot {
            product: "Test".into(),
            ark: self.ark.clone(),
            ask: None,
            asvk: None,
        }
    }

    /// A CRL (DER) the ARK signs, issued on 1 January of `from` with its
    /// next update on 1 January of `to`, listing the certificates
    /// `revoked` (DER).
    pub fn ark_crl(&self, revoked: &[&[u8]], from: i32, to: i32) -> Vec<u8> {
        let key = KeyPair::try_from(self.ark_key.as_slice()).unwrap();
        let issuer = Issuer::new(params(&format!("ARK-{}", self.name), true), &key);
        crate::crl::crl(&issuer, revoked, from, to)
    }

    /// The certificate table a host provisions: VCEK, ASK, ARK.
    pub fn table(&self) -> Vec<u8> {
        CertTable {
            entries: vec![
                (GUID_VCEK, self.vcek.clone()),
                (GUID_ASK, self.ask.clone()),
                (GUID_ARK, self.ark.clone()),
            ],
        }
        .to_bytes()
    }

    /// The certificate table of a host whose reports a VLEK signs: VLEK,
    /// the ASVK in the ASK's slot, ARK.
    pub fn vlek_table(&self) -> Vec<u8> {
        CertTable {
            entries: vec![
                (GUID_VLEK, self.vlek.clone()),
                (GUID_ASK, self.asvk.clone()),
                (GUID_ARK, self.ark.clone()),
            ],
        }
        .to_bytes()
    }

    /// A client policy pinning this chain's root (and `measurement`).
    pub fn policy(&self, measurement: Option<[u8; 48]>) -> VerifyPolicy {
        VerifyPolicy {
            allow_unattested: false,
            snp: SnpPolicy {
                measurement,
                roots: vec![self.root()],
                ..SnpPolicy::default()
            },
            ..VerifyPolicy::default()
        }
    }

    /// Signs `report` (bytes `[0, 0x2A0)`) with the VCEK's key.
    pub fn sign(&self, report: &mut [u8]) {
        sign_with(&self.vcek_key, report);
    }

    /// Signs `report` (bytes `[0, 0x2A0)`) with the VLEK's key.
    pub fn sign_vlek(&self, report: &mut [u8]) {
        sign_with(&self.vlek_key, report);
    }

    /// A signed report with `data`, [`MEASUREMENT`] and [`POLICY`], its
    /// SIGNING_KEY 1 (VLEK), signed by the VLEK.
    pub fn vlek_report(&self, data: &[u8; 64]) -> Vec<u8> {
        let mut r = self.report(data);
        r[0x48] = 1 << 2;
        self.sign_vlek(&mut r);
        r
    }
}

fn sign_with(pkcs8: &[u8], report: &mut [u8]) {
    let rng = SystemRandom::new();
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P384_SHA384_FIXED_SIGNING, pkcs8, &rng).unwrap();
    let sig = key.sign(&rng, &report[..SIGNATURE_AT]).unwrap();
    report[SIGNATURE_AT..].copy_from_slice(&signature_field(sig.as_ref().try_into().unwrap()));
}

impl Chain {
    /// A signed version-3 report with `data`, `measurement` and `policy`,
    /// VMPL 0.
    pub fn report_with(&self, data: &[u8; 64], measurement: &[u8; 48], policy: u64) -> Vec<u8> {
        let mut r = vec![0u8; REPORT_LEN];
        r[0..4].copy_from_slice(&3u32.to_le_bytes());
        r[8..16].copy_from_slice(&policy.to_le_bytes());
        r[0x34..0x38].copy_from_slice(&1u32.to_le_bytes());
        r[0x38..0x40].copy_from_slice(&TCB.to_le_bytes());
        r[REPORT_DATA_AT..REPORT_DATA_AT + 64].copy_from_slice(data);
        r[MEASUREMENT_AT..MEASUREMENT_AT + 48].copy_from_slice(measurement);
        r[0x180..0x188].copy_from_slice(&TCB.to_le_bytes());
        r[0x188] = FAMILY;
        r[0x1A0..0x1E0].copy_from_slice(&CHIP_ID);
        r[0x1E0..0x1E8].copy_from_slice(&TCB.to_le_bytes());
        self.sign(&mut r);
        r
    }

    /// A signed report with `data`, [`MEASUREMENT`] and [`POLICY`].
    pub fn report(&self, data: &[u8; 64]) -> Vec<u8> {
        self.report_with(data, &MEASUREMENT, POLICY)
    }
}
