//! A test Intel PCK chain (root → PCK CA → PCK certificate, ECDSA P-256
//! keys made here), an attestation key, and TDX quotes (version 4) signed
//! with them, laid out as Intel's quoting library does. Offsets are
//! written out here, not taken from the crate, so that the tests check
//! the crate's.
#![allow(dead_code)]

use hecloud_proxy::attest::VerifyPolicy;
use hecloud_proxy::attest::tdx::{TdxPolicy, TrustedRoot};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, PKCS_ECDSA_P256_SHA256,
};
use ring::digest::{SHA256, digest};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};

/// The MRTD of test quotes.
pub const MRTD: [u8; 48] = [0x7d; 48];
/// The TEE_TCB_SVN of test quotes.
pub const TEE_TCB_SVN: [u8; 16] = [3, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
/// RTMR i of test quotes is `[0x30 + i; 48]`.
pub fn rtmr(i: usize) -> [u8; 48] {
    [0x30 + i as u8; 48]
}
/// TD_ATTRIBUTES of test quotes: SEPT_VE_DISABLE (bit 28), not DEBUG.
pub const TD_ATTRIBUTES: u64 = 1 << 28;

/// Offsets in a version 4 quote.
pub const BODY_AT: usize = 48;
/// TD_ATTRIBUTES.
pub const TD_ATTRIBUTES_AT: usize = 48 + 120;
/// MRTD.
pub const MRTD_AT: usize = 48 + 136;
/// RTMR0.
pub const RTMR_AT: usize = 48 + 328;
/// REPORT_DATA.
pub const REPORT_DATA_AT: usize = 48 + 520;
/// The signature data's length (u32).
pub const SIG_DATA_LEN_AT: usize = 632;
/// The quote's signature.
pub const SIG_AT: usize = 636;
/// The attestation key.
pub const ATT_KEY_AT: usize = 700;
/// The outer certification data type (u16) and size (u32).
pub const CERT_TYPE_AT: usize = 764;
/// The QE report.
pub const QE_REPORT_AT: usize = 770;
/// The QE report's signature.
pub const QE_SIG_AT: usize = QE_REPORT_AT + 384;
/// The QE authentication data's size (u16).
pub const QE_AUTH_AT: usize = QE_SIG_AT + 64;

/// What a quote is built from; [`Chain::quote_of`] signs it.
#[derive(Debug, Clone)]
pub struct Parts {
    /// Header, 48 bytes.
    pub header: Vec<u8>,
    /// TD report body, 584 bytes.
    pub body: Vec<u8>,
    /// QE report body, 384 bytes (its report data set by the build
    /// unless `bind_qe` is false).
    pub qe_report: Vec<u8>,
    /// QE authentication data.
    pub qe_auth: Vec<u8>,
    /// Set the QE report data to SHA-256(attestation key || qe_auth).
    pub bind_qe: bool,
    /// The PCK certificate chain, PEM.
    pub pem: Vec<u8>,
    /// Outer and inner certification data types.
    pub cert_types: (u16, u16),
}

fn params(cn: &str, ca: bool) -> CertificateParams {
    let mut p = CertificateParams::new(vec![]).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.distinguished_name
        .push(DnType::OrganizationName, "Test Corporation");
    if ca {
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(1));
    }
    p
}

fn pem(der: &[u8]) -> String {
    pem_block(der)
}

/// A DER certificate as PEM (64 base64 characters a line).
pub fn pem_block(der: &[u8]) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::new();
    for c in der.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                b64.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// How a test chain is made.
#[derive(Debug, Clone)]
pub struct Options {
    /// The PCK CA's common name.
    pub ca_name: String,
    /// The PCK certificate expired.
    pub leaf_expired: bool,
    /// The PCK CA expired.
    pub ca_expired: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            ca_name: "Intel SGX PCK Platform CA".into(),
            leaf_expired: false,
            ca_expired: false,
        }
    }
}

/// root → PCK CA → PCK certificate, DER, and the PCK and attestation keys.
#[derive(Debug)]
pub struct Chain {
    pub root: Vec<u8>,
    pub ca: Vec<u8>,
    pub leaf: Vec<u8>,
    root_name: String,
    root_key: Vec<u8>,
    ca_name: String,
    ca_key: Vec<u8>,
    pck_key: Vec<u8>,
    att_key: Vec<u8>,
}

fn expire(p: &mut CertificateParams) {
    p.not_before = rcgen::date_time_ymd(2000, 1, 1);
    p.not_after = rcgen::date_time_ymd(2001, 1, 1);
}

impl Chain {
    /// A fresh chain named `name`.
    pub fn new(name: &str) -> Self {
        Self::with(name, Options::default())
    }

    /// A fresh chain named `name`, made as `o` says.
    pub fn with(name: &str, o: Options) -> Self {
        let root_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let root_name = format!("{name} SGX Root CA");
        let root_params = params(&root_name, true);
        let root = root_params.self_signed(&root_key).unwrap().der().to_vec();
        let root_issuer = Issuer::new(root_params, &root_key);
        let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut ca_params = params(&o.ca_name, true);
        if o.ca_expired {
            expire(&mut ca_params);
        }
        let ca = ca_params
            .signed_by(&ca_key, &root_issuer)
            .unwrap()
            .der()
            .to_vec();
        let ca_issuer = Issuer::new(ca_params, &ca_key);
        let pck_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut leaf_params = params("Intel SGX PCK Certificate", false);
        if o.leaf_expired {
            expire(&mut leaf_params);
        }
        let leaf = leaf_params
            .signed_by(&pck_key, &ca_issuer)
            .unwrap()
            .der()
            .to_vec();
        let att_key =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .unwrap()
                .as_ref()
                .to_vec();
        Self {
            root,
            ca,
            leaf,
            root_name,
            root_key: root_key.serialize_der(),
            ca_name: o.ca_name,
            ca_key: ca_key.serialize_der(),
            pck_key: pck_key.serialize_der(),
            att_key,
        }
    }

    /// A CRL (DER) of the root listing `revoked` (DER), issued on 1
    /// January of `from`, next update on 1 January of `to`.
    pub fn root_crl(&self, revoked: &[&[u8]], from: i32, to: i32) -> Vec<u8> {
        let key = KeyPair::try_from(self.root_key.as_slice()).unwrap();
        let issuer = Issuer::new(params(&self.root_name, true), &key);
        crate::crl::crl(&issuer, revoked, from, to)
    }

    /// A CRL (DER) of the PCK CA, as [`Chain::root_crl`].
    pub fn ca_crl(&self, revoked: &[&[u8]], from: i32, to: i32) -> Vec<u8> {
        let key = KeyPair::try_from(self.ca_key.as_slice()).unwrap();
        let issuer = Issuer::new(params(&self.ca_name, true), &key);
        crate::crl::crl(&issuer, revoked, from, to)
    }

    /// The chain's root, to pin.
    pub fn trusted_root(&self) -> TrustedRoot {
        TrustedRoot {
            name: "Test root".into(),
            der: self.root.clone(),
        }
    }

    /// A client policy pinning this chain's root (and `mrtd`).
    pub fn policy(&self, mrtd: Option<[u8; 48]>) -> VerifyPolicy {
        VerifyPolicy {
            tdx: TdxPolicy {
                mrtd,
                roots: vec![self.trusted_root()],
                ..TdxPolicy::default()
            },
            ..VerifyPolicy::default()
        }
    }

    /// The PEM chain as Intel's quoting library writes it: PCK
    /// certificate, PCK CA, root, then a NUL byte.
    pub fn pem(&self) -> Vec<u8> {
        let mut out = pem(&self.leaf) + &pem(&self.ca) + &pem(&self.root);
        out.push('\0');
        out.into_bytes()
    }

    fn key(pkcs8: &[u8]) -> EcdsaKeyPair {
        EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8,
            &SystemRandom::new(),
        )
        .unwrap()
    }

    fn sign(pkcs8: &[u8], msg: &[u8]) -> Vec<u8> {
        let rng = SystemRandom::new();
        Self::key(pkcs8).sign(&rng, msg).unwrap().as_ref().to_vec()
    }

    /// The attestation public key, x || y.
    pub fn att_public(&self) -> Vec<u8> {
        Self::key(&self.att_key).public_key().as_ref()[1..].to_vec()
    }

    /// The parts of a good quote with `data` as REPORT_DATA.
    pub fn parts(&self, data: &[u8; 64]) -> Parts {
        let mut header = vec![0u8; 48];
        header[0..2].copy_from_slice(&4u16.to_le_bytes());
        header[2..4].copy_from_slice(&2u16.to_le_bytes());
        header[4..8].copy_from_slice(&0x81u32.to_le_bytes());
        header[8..10].copy_from_slice(&8u16.to_le_bytes());
        header[10..12].copy_from_slice(&13u16.to_le_bytes());
        header[12..28].copy_from_slice(&[0x93; 16]);
        let mut body = vec![0u8; 584];
        body[..16].copy_from_slice(&TEE_TCB_SVN);
        body[16..64].copy_from_slice(&[0x5e; 48]);
        body[120..128].copy_from_slice(&TD_ATTRIBUTES.to_le_bytes());
        body[128..136].copy_from_slice(&0xe7u64.to_le_bytes());
        body[136..184].copy_from_slice(&MRTD);
        for i in 0..4 {
            body[328 + 48 * i..376 + 48 * i].copy_from_slice(&rtmr(i));
        }
        body[520..584].copy_from_slice(data);
        let mut qe_report = vec![0u8; 384];
        qe_report[64..96].copy_from_slice(&[0x9e; 32]);
        Parts {
            header,
            body,
            qe_report,
            qe_auth: (0..32).collect(),
            bind_qe: true,
            pem: self.pem(),
            cert_types: (6, 5),
        }
    }

    /// The quote of `p`, signed: the QE report by the PCK key, header and
    /// body by the attestation key.
    pub fn quote_of(&self, p: &Parts) -> Vec<u8> {
        let mut qe_report = p.qe_report.clone();
        if p.bind_qe {
            let mut bound = self.att_public();
            bound.extend_from_slice(&p.qe_auth);
            qe_report[320..352].copy_from_slice(digest(&SHA256, &bound).as_ref());
            qe_report[352..384].fill(0);
        }
        let mut signed = p.header.clone();
        signed.extend_from_slice(&p.body);
        let mut cert = qe_report.clone();
        cert.extend_from_slice(&Self::sign(&self.pck_key, &qe_report));
        cert.extend_from_slice(&(p.qe_auth.len() as u16).to_le_bytes());
        cert.extend_from_slice(&p.qe_auth);
        cert.extend_from_slice(&p.cert_types.1.to_le_bytes());
        cert.extend_from_slice(&(p.pem.len() as u32).to_le_bytes());
        cert.extend_from_slice(&p.pem);
        let mut sig_data = Self::sign(&self.att_key, &signed);
        sig_data.extend_from_slice(&self.att_public());
        sig_data.extend_from_slice(&p.cert_types.0.to_le_bytes());
        sig_data.extend_from_slice(&(cert.len() as u32).to_le_bytes());
        sig_data.extend_from_slice(&cert);
        let mut q = signed;
        q.extend_from_slice(&(sig_data.len() as u32).to_le_bytes());
        q.extend_from_slice(&sig_data);
        q
    }

    /// A good quote with `data` as REPORT_DATA.
    pub fn quote(&self, data: &[u8; 64]) -> Vec<u8> {
        self.quote_of(&self.parts(data))
    }

    /// Re-signs header and body of `quote` with the attestation key (after
    /// a change to them).
    pub fn resign(&self, quote: &mut [u8]) {
        let sig = Self::sign(&self.att_key, &quote[..632]);
        quote[SIG_AT..SIG_AT + 64].copy_from_slice(&sig);
    }
}
