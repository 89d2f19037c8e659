//! The client's TDX verification against a test PCK chain (root → PCK CA
//! → PCK certificate made here) and quotes signed with it: forged,
//! modified, stale, debug, unpinned and malformed quotes are refused with
//! typed errors, through `attest::verify` as the client calls it.

mod crl;
mod tdx_chain;

use hecloud_proxy::Attestation;
use hecloud_proxy::attest::tdx::{self, TdxError, TdxPolicy};
use hecloud_proxy::attest::*;
use ring::rand::{SecureRandom, SystemRandom};
use tdx_chain::{
    ATT_KEY_AT, CERT_TYPE_AT, Chain, MRTD, MRTD_AT, Options, QE_AUTH_AT, QE_REPORT_AT,
    REPORT_DATA_AT, RTMR_AT, SIG_DATA_LEN_AT, TD_ATTRIBUTES, TD_ATTRIBUTES_AT, TEE_TCB_SVN, rtmr,
};

fn nonce() -> [u8; CLIENT_NONCE_LEN] {
    let mut n = [0u8; CLIENT_NONCE_LEN];
    SystemRandom::new().fill(&mut n).unwrap();
    n
}

fn tdx(report: Vec<u8>) -> Attestation {
    Attestation::ConfigfsTsm {
        provider: PROVIDER_TDX.into(),
        report,
        auxblob: None,
    }
}

/// The TDX error of a refused attestation (panics if accepted).
fn tdx_err(r: Result<Verified, AttestError>) -> TdxError {
    match r {
        Err(AttestError::Tdx(e)) => {
            assert!(!e.to_string().is_empty());
            e
        }
        other => panic!("expected a TDX refusal, got {other:?}"),
    }
}

const TLS: &[u8] = b"proxy TLS public key";

/// A chain, a nonce, and a good quote binding TLS and the nonce.
fn setup() -> (Chain, [u8; CLIENT_NONCE_LEN], Vec<u8>) {
    let chain = Chain::new("Test");
    let n = nonce();
    let q = chain.quote(&report_data(TLS, &n));
    (chain, n, q)
}

#[test]
fn a_good_quote_verifies_and_says_what_was_verified() {
    let (chain, n, q) = setup();
    let v = verify(&tdx(q.clone()), TLS, &n, &chain.policy(Some(MRTD))).unwrap();
    let Verified::Tdx { provider, quote } = v else {
        panic!("not a TDX verification: {v:?}");
    };
    assert_eq!(provider, "tdx_guest");
    assert_eq!(quote.root, "Test root");
    assert_eq!(quote.pck_ca, "Intel SGX PCK Platform CA");
    assert_eq!((quote.qe_svn, quote.pce_svn), (8, 13));
    assert_eq!(quote.report.mrtd, MRTD);
    assert_eq!(quote.mrtd_hex(), "7d".repeat(48));
    assert_eq!(quote.report.tee_tcb_svn, TEE_TCB_SVN);
    assert_eq!(quote.report.td_attributes, TD_ATTRIBUTES);
    assert_eq!(quote.report.xfam, 0xe7);
    assert_eq!(quote.report.mrseam, [0x5e; 48]);
    assert_eq!(quote.report.rtmrs, [rtmr(0), rtmr(1), rtmr(2), rtmr(3)]);
    assert_eq!(quote.report.report_data, report_data(TLS, &n));
    assert!(quote.mrtd_pinned);
    assert_eq!(quote.rtmrs_pinned, [false; 4]);
    assert!(!quote.min_tee_tcb_svn_checked);
    // Without an expected MRTD it still verifies, and says so.
    let Verified::Tdx { quote, .. } =
        verify(&tdx(q.clone()), TLS, &n, &chain.policy(None)).unwrap()
    else {
        panic!()
    };
    assert!(!quote.mrtd_pinned);
    // Unless the client requires a pinned measurement (it pinned an
    // SEV-SNP image, say).
    let require = |mrtd| VerifyPolicy {
        require_measurement: true,
        ..chain.policy(mrtd)
    };
    assert_eq!(
        verify(&tdx(q.clone()), TLS, &n, &require(None)).unwrap_err(),
        AttestError::MeasurementNotPinned("tdx_guest".into())
    );
    assert!(verify(&tdx(q.clone()), TLS, &n, &require(Some(MRTD))).is_ok());
    // An auxblob beside the quote is ignored.
    let a = Attestation::ConfigfsTsm {
        provider: PROVIDER_TDX.into(),
        report: q.clone(),
        auxblob: Some(b"ignored".to_vec()),
    };
    assert!(matches!(
        verify(&a, TLS, &n, &chain.policy(None)),
        Ok(Verified::Tdx { .. })
    ));
    // A chain without the root (leaf and CA only) verifies against the
    // pinned root too.
    let mut p = chain.parts(&report_data(TLS, &n));
    p.pem = (tdx_chain::pem_block(&chain.leaf) + &tdx_chain::pem_block(&chain.ca)).into_bytes();
    assert!(verify(&tdx(chain.quote_of(&p)), TLS, &n, &chain.policy(None)).is_ok());
    // The Processor CA issues PCK certificates too.
    let processor = Chain::with(
        "Test",
        Options {
            ca_name: "Intel SGX PCK Processor CA".into(),
            ..Options::default()
        },
    );
    let q = processor.quote(&report_data(TLS, &n));
    assert!(verify(&tdx(q), TLS, &n, &processor.policy(None)).is_ok());
}

#[test]
fn tampered_quotes_and_qe_reports_are_refused() {
    let (chain, n, q) = setup();
    let policy = chain.policy(None);
    // Any byte of header or TD report body: the quote signature.
    for at in [
        0x08,
        0x0c,
        47,
        48,
        MRTD_AT,
        RTMR_AT + 100,
        REPORT_DATA_AT + 3,
        631,
    ] {
        let mut t = q.clone();
        t[at] ^= 0x01;
        assert_eq!(
            tdx_err(verify(&tdx(t), TLS, &n, &policy)),
            TdxError::BadSignature,
            "byte {at}"
        );
    }
    // The quote's signature itself, and the attestation key.
    for at in [tdx_chain::SIG_AT + 5, ATT_KEY_AT + 7] {
        let mut t = q.clone();
        t[at] ^= 0x01;
        let e = tdx_err(verify(&tdx(t), TLS, &n, &policy));
        // A changed key also breaks the QE's binding of it.
        assert!(
            matches!(e, TdxError::BadSignature | TdxError::QeReportDataMismatch),
            "byte {at}: {e:?}"
        );
    }
    // A QE report byte: the QE report signature.
    for at in [0, 64, 300, 383] {
        let mut t = q.clone();
        t[QE_REPORT_AT + at] ^= 0x01;
        assert_eq!(
            tdx_err(verify(&tdx(t), TLS, &n, &policy)),
            TdxError::BadQeReportSignature,
            "QE report byte {at}"
        );
    }
    let mut t = q.clone();
    t[QE_REPORT_AT + 384 + 10] ^= 0x01;
    assert_eq!(
        tdx_err(verify(&tdx(t), TLS, &n, &policy)),
        TdxError::BadQeReportSignature
    );
    // QE auth data changed after the QE bound it.
    let mut t = q.clone();
    t[QE_AUTH_AT + 2] ^= 0x01;
    assert_eq!(
        tdx_err(verify(&tdx(t), TLS, &n, &policy)),
        TdxError::QeReportDataMismatch
    );
}

#[test]
fn the_qe_report_must_bind_the_attestation_key() {
    let (chain, n, _) = setup();
    let policy = chain.policy(None);
    let rd = report_data(TLS, &n);
    // A QE report (correctly signed by the PCK key) binding another key.
    let mut p = chain.parts(&rd);
    p.bind_qe = false;
    p.qe_report[320..352].copy_from_slice(&[0xab; 32]);
    assert_eq!(
        tdx_err(verify(&tdx(chain.quote_of(&p)), TLS, &n, &policy)),
        TdxError::QeReportDataMismatch
    );
    // The right hash, but the upper half not zero.
    let mut p = chain.parts(&rd);
    let good = chain.quote_of(&p);
    p.bind_qe = false;
    p.qe_report[320..384].copy_from_slice(&good[QE_REPORT_AT + 320..QE_REPORT_AT + 384]);
    assert!(verify(&tdx(chain.quote_of(&p)), TLS, &n, &policy).is_ok());
    p.qe_report[383] = 1;
    assert_eq!(
        tdx_err(verify(&tdx(chain.quote_of(&p)), TLS, &n, &policy)),
        TdxError::QeReportDataMismatch
    );
    // Empty QE auth data binds too (the hash of the key alone).
    let mut p = chain.parts(&rd);
    p.qe_auth.clear();
    assert!(verify(&tdx(chain.quote_of(&p)), TLS, &n, &policy).is_ok());
}

#[test]
fn chains_not_ending_in_the_pinned_root_are_refused() {
    let (chain, n, q) = setup();
    let other = Chain::new("Other");
    // The quote's root is not pinned.
    assert_eq!(
        tdx_err(verify(&tdx(q.clone()), TLS, &n, &other.policy(None))),
        TdxError::UnpinnedRoot
    );
    // The default policy pins Intel's root only.
    assert_eq!(
        tdx_err(verify(&tdx(q.clone()), TLS, &n, &VerifyPolicy::default())),
        TdxError::UnpinnedRoot
    );
    // No root in the quote: the CA must be signed by a pinned one.
    let rd = report_data(TLS, &n);
    let mut p = chain.parts(&rd);
    p.pem = (tdx_chain::pem_block(&chain.leaf) + &tdx_chain::pem_block(&chain.ca)).into_bytes();
    let q2 = chain.quote_of(&p);
    assert_eq!(
        tdx_err(verify(&tdx(q2.clone()), TLS, &n, &other.policy(None))),
        TdxError::Chain("the PCK CA is not signed by the root".into())
    );
    let mut both = other.policy(None);
    both.tdx.roots.push(tdx::TrustedRoot::intel());
    assert!(matches!(
        tdx_err(verify(&tdx(q2.clone()), TLS, &n, &both)),
        TdxError::Chain(m) if m.contains("does not chain to a pinned root")
    ));
    both.tdx.roots.push(chain.trusted_root());
    assert!(verify(&tdx(q2), TLS, &n, &both).is_ok());
    // Another chain's root given in the quote with this chain's CA.
    let mut p = chain.parts(&rd);
    p.pem = (tdx_chain::pem_block(&chain.leaf)
        + &tdx_chain::pem_block(&chain.ca)
        + &tdx_chain::pem_block(&other.root))
        .into_bytes();
    assert_eq!(
        tdx_err(verify(
            &tdx(chain.quote_of(&p)),
            TLS,
            &n,
            &other.policy(None)
        )),
        TdxError::Chain("the PCK CA is not signed by the root".into())
    );
    // A leaf of another CA.
    let mut p = chain.parts(&rd);
    p.pem = (tdx_chain::pem_block(&other.leaf) + &tdx_chain::pem_block(&chain.ca)).into_bytes();
    assert_eq!(
        tdx_err(verify(
            &tdx(chain.quote_of(&p)),
            TLS,
            &n,
            &chain.policy(None)
        )),
        TdxError::Chain("the PCK is not signed by the PCK CA".into())
    );
    // Leaf alone, or the CA not a PCK CA (the root's TCB signing leaf, a
    // CA of another name).
    let mut p = chain.parts(&rd);
    p.pem = tdx_chain::pem_block(&chain.leaf).into_bytes();
    assert!(matches!(
        tdx_err(verify(
            &tdx(chain.quote_of(&p)),
            TLS,
            &n,
            &chain.policy(None)
        )),
        TdxError::PemChain(_)
    ));
    let odd = Chain::with(
        "Test",
        Options {
            ca_name: "Intel SGX TCB Signing".into(),
            ..Options::default()
        },
    );
    let q = odd.quote(&rd);
    assert!(matches!(
        tdx_err(verify(&tdx(q), TLS, &n, &odd.policy(None))),
        TdxError::Certificate {
            which: "PCK CA",
            ..
        }
    ));
    // No pinned root at all.
    let mut none = chain.policy(None);
    none.tdx.roots.clear();
    assert!(matches!(
        tdx_err(verify(&tdx(chain.quote(&rd)), TLS, &n, &none)),
        TdxError::Chain(_)
    ));
}

#[test]
fn expired_certificates_are_refused() {
    let n = nonce();
    let rd = report_data(TLS, &n);
    for (o, which) in [
        (
            Options {
                leaf_expired: true,
                ..Options::default()
            },
            "PCK",
        ),
        (
            Options {
                ca_expired: true,
                ..Options::default()
            },
            "PCK CA",
        ),
    ] {
        let chain = Chain::with("Test", o);
        assert_eq!(
            tdx_err(verify(&tdx(chain.quote(&rd)), TLS, &n, &chain.policy(None))),
            TdxError::Expired(which)
        );
    }
}

#[test]
fn stale_or_relayed_quotes_are_refused() {
    let (chain, n, q) = setup();
    let policy = chain.policy(None);
    // Another nonce (a replayed quote), another TLS key (a relayed one).
    assert_eq!(
        tdx_err(verify(&tdx(q.clone()), TLS, &nonce(), &policy)),
        TdxError::ReportDataMismatch
    );
    assert_eq!(
        tdx_err(verify(&tdx(q.clone()), b"another TLS key", &n, &policy)),
        TdxError::ReportDataMismatch
    );
    let e = verify(&tdx(q), b"another TLS key", &n, &policy).unwrap_err();
    assert!(e.to_string().contains("does not bind"), "{e}");
}

#[test]
fn debug_tds_and_policy_mismatches_are_refused() {
    let (chain, n, q) = setup();
    // The debug attribute (re-signed: the attestation key signs it).
    let mut t = q.clone();
    let attrs = TD_ATTRIBUTES | 1;
    t[TD_ATTRIBUTES_AT..TD_ATTRIBUTES_AT + 8].copy_from_slice(&attrs.to_le_bytes());
    chain.resign(&mut t);
    assert_eq!(
        tdx_err(verify(&tdx(t), TLS, &n, &chain.policy(None))),
        TdxError::DebugTd(attrs)
    );
    // Another MRTD than expected.
    let want = [0x11; 48];
    assert_eq!(
        tdx_err(verify(&tdx(q.clone()), TLS, &n, &chain.policy(Some(want)))),
        TdxError::MrtdMismatch {
            got: "7d".repeat(48),
            want: "11".repeat(48),
        }
    );
    // RTMRs: each pinned one must match.
    let mut p = chain.policy(Some(MRTD));
    p.tdx.rtmrs = [Some(rtmr(0)), None, Some(rtmr(2)), None];
    let Verified::Tdx { quote, .. } = verify(&tdx(q.clone()), TLS, &n, &p).unwrap() else {
        panic!()
    };
    assert_eq!(quote.rtmrs_pinned, [true, false, true, false]);
    p.tdx.rtmrs[3] = Some([0; 48]);
    assert!(matches!(
        tdx_err(verify(&tdx(q.clone()), TLS, &n, &p)),
        TdxError::RtmrMismatch { index: 3, .. }
    ));
}

#[test]
fn tee_tcb_svn_below_a_minimum_is_refused() {
    let (chain, n, q) = setup();
    let mut p = chain.policy(None);
    // Equal passes, and says it was checked.
    p.tdx.min_tee_tcb_svn = Some(TEE_TCB_SVN);
    let Verified::Tdx { quote, .. } = verify(&tdx(q.clone()), TLS, &n, &p).unwrap() else {
        panic!()
    };
    assert!(quote.min_tee_tcb_svn_checked);
    assert_eq!(quote.tee_tcb_svn_hex(), "03010200000000000000000000000000");
    // Below in one byte (component-wise: a higher earlier byte does not
    // make up for it).
    let mut min = [0u8; 16];
    min[2] = 3;
    p.tdx.min_tee_tcb_svn = Some(min);
    assert_eq!(
        tdx_err(verify(&tdx(q.clone()), TLS, &n, &p)),
        TdxError::TcbSvnBelowMinimum {
            index: 2,
            found: 2,
            minimum: 3
        }
    );
    min[2] = 0;
    min[0] = 4;
    p.tdx.min_tee_tcb_svn = Some(min);
    assert!(matches!(
        tdx_err(verify(&tdx(q.clone()), TLS, &n, &p)),
        TdxError::TcbSvnBelowMinimum { index: 0, .. }
    ));
    min[0] = 1;
    p.tdx.min_tee_tcb_svn = Some(min);
    assert!(verify(&tdx(q), TLS, &n, &p).is_ok());
}

#[test]
fn wrong_versions_tee_types_and_layouts_are_refused() {
    let (chain, n, q) = setup();
    let policy = chain.policy(None);
    let with = |at: usize, bytes: &[u8]| {
        let mut t = q.clone();
        t[at..at + bytes.len()].copy_from_slice(bytes);
        tdx_err(verify(&tdx(t), TLS, &n, &policy))
    };
    assert_eq!(
        with(0, &3u16.to_le_bytes()),
        TdxError::UnsupportedVersion(3)
    );
    assert_eq!(
        with(0, &5u16.to_le_bytes()),
        TdxError::UnsupportedVersion(5)
    );
    assert_eq!(
        with(2, &3u16.to_le_bytes()),
        TdxError::UnsupportedKeyType(3)
    );
    assert_eq!(with(4, &0u32.to_le_bytes()), TdxError::NotTdx(0));
    // Certification data of other types.
    assert_eq!(
        with(CERT_TYPE_AT, &5u16.to_le_bytes()),
        TdxError::CertDataType {
            which: "outer",
            got: 5,
            want: 6
        }
    );
    let rd = report_data(TLS, &n);
    let mut p = chain.parts(&rd);
    p.cert_types.1 = 3;
    assert_eq!(
        tdx_err(verify(&tdx(chain.quote_of(&p)), TLS, &n, &policy)),
        TdxError::CertDataType {
            which: "inner",
            got: 3,
            want: 5
        }
    );
    // Zeros after the signature data pass (real quotes come padded);
    // another byte there does not.
    let mut t = q.clone();
    t.extend_from_slice(&[0; 70]);
    assert!(verify(&tdx(t.clone()), TLS, &n, &policy).is_ok());
    t[q.len() + 69] = 1;
    assert_eq!(
        tdx_err(verify(&tdx(t), TLS, &n, &policy)),
        TdxError::TrailingBytes(70, "signature data")
    );
    // A signature data length that overruns or stops short (the byte
    // left over is not zero).
    let len = u32::from_le_bytes(q[SIG_DATA_LEN_AT..SIG_DATA_LEN_AT + 4].try_into().unwrap());
    assert!(matches!(
        with(SIG_DATA_LEN_AT, &(len + 1).to_le_bytes()),
        TdxError::Truncated {
            what: "signature data",
            ..
        }
    ));
    // One byte short: the byte left over is the chain's final NUL, a
    // zero, but the certification data then runs past its end.
    assert_eq!(q.last(), Some(&0), "the PEM chain ends with a NUL");
    assert!(matches!(
        with(SIG_DATA_LEN_AT, &(len - 1).to_le_bytes()),
        TdxError::Truncated {
            what: "certification data",
            ..
        }
    ));
    assert!(matches!(
        with(SIG_DATA_LEN_AT, &(len - 2).to_le_bytes()),
        TdxError::TrailingBytes(2, "signature data")
    ));
    assert!(matches!(
        with(SIG_DATA_LEN_AT, &u32::MAX.to_le_bytes()),
        TdxError::Truncated { .. }
    ));
    assert!(matches!(
        with(QE_AUTH_AT, &u16::MAX.to_le_bytes()),
        TdxError::Truncated { .. }
    ));
    // Too long.
    assert_eq!(
        tdx_err(verify(
            &tdx(vec![0; tdx::MAX_QUOTE_LEN + 1]),
            TLS,
            &n,
            &policy
        )),
        TdxError::TooLong(tdx::MAX_QUOTE_LEN + 1)
    );
    // A PEM chain of garbage.
    let mut p = chain.parts(&rd);
    p.pem = b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".to_vec();
    assert!(matches!(
        tdx_err(verify(&tdx(chain.quote_of(&p)), TLS, &n, &policy)),
        TdxError::PemChain(_)
    ));
}

#[test]
fn truncated_and_garbage_quotes_fail_with_typed_errors() {
    let (chain, n, q) = setup();
    let policy = chain.policy(None);
    // Every prefix (a quote is a few KiB): a typed error, never a panic.
    for len in 0..q.len() {
        let e = tdx_err(verify(&tdx(q[..len].to_vec()), TLS, &n, &policy));
        assert!(
            matches!(
                e,
                TdxError::Truncated { .. } | TdxError::UnsupportedVersion(_)
            ),
            "{len}: {e:?}"
        );
    }
    // Random bytes, alone and after a valid header and body.
    let rng = SystemRandom::new();
    for len in [0, 1, 47, 48, 631, 632, 636, 1020, 2000, 5000] {
        for _ in 0..20 {
            let mut g = vec![0u8; len];
            rng.fill(&mut g).unwrap();
            assert!(verify(&tdx(g.clone()), TLS, &n, &policy).is_err());
            let mut t = q[..632.min(q.len())].to_vec();
            t.extend_from_slice(&g);
            assert!(verify(&tdx(t), TLS, &n, &policy).is_err());
            // Random signature data of a consistent length.
            let mut t = q[..632].to_vec();
            t.extend_from_slice(&(len as u32).to_le_bytes());
            t.extend_from_slice(&g);
            assert!(verify(&tdx(t), TLS, &n, &policy).is_err());
        }
    }
    // Random flips: refused before the PEM chain (every byte there is
    // signed or structure); in the PEM text never a panic (a flip may
    // leave the decoded certificates as they were: the final NUL made a
    // space, the unused bits of the last base64 digit).
    let pem_at = q.len() - chain.pem().len();
    for _ in 0..400 {
        let mut b = [0u8; 4];
        rng.fill(&mut b).unwrap();
        let at = u32::from_le_bytes(b) as usize % q.len();
        let mut t = q.clone();
        t[at] ^= 1 << (b[0] % 8);
        let r = verify(&tdx(t), TLS, &n, &policy);
        if at < pem_at {
            assert!(r.is_err(), "flip at {at}");
        }
    }
}

#[test]
fn the_default_policy_pins_intels_root_and_tdx_is_no_longer_unsupported() {
    let p = TdxPolicy::default();
    assert_eq!(p.roots, vec![tdx::TrustedRoot::intel()]);
    assert_eq!(
        (p.mrtd, p.rtmrs, p.min_tee_tcb_svn),
        (None, [None; 4], None)
    );
    tdx::check_root(&p.roots[0]).unwrap();
    assert_eq!(VerifyPolicy::default().tdx, p);
    // A test chain's root checks out the same way; a non-self-signed
    // certificate not.
    let chain = Chain::new("Test");
    tdx::check_root(&chain.trusted_root()).unwrap();
    let mut r = chain.trusted_root();
    r.der = chain.ca.clone();
    assert!(tdx::check_root(&r).is_err());
    r.der = chain.leaf.clone();
    assert!(tdx::check_root(&r).is_err());
}

/// A real TDX quote (version 4) from a dstack confidential VM, as the
/// `near/mpc` repository publishes it in its tests
/// (`tee_authority/src/tee_authority.rs`, `VALID_QUOTE_HEX`): its PCK
/// chain ends in Intel's SGX Root CA, so it checks the layout read here,
/// and the pinned root, against Intel's hardware and certificates rather
/// than against this crate's own test builder. Its PCK certificate is
/// valid from 2025-06-09 to 2032-06-09: the test verifies it at a time
/// in between ([`TdxPolicy::at`]).
const REAL_QUOTE_HEX: &str = include_str!("data/tdx-quote-v4-dstack.hex");

fn real_quote() -> Vec<u8> {
    let h = REAL_QUOTE_HEX.trim();
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn a_real_quote_verifies_under_intels_pinned_root() {
    let q = real_quote();
    assert_eq!(q.len(), 5006);
    // Its own report data stands for the binding (it was made for another
    // connection, by dstack).
    let data: [u8; 64] = q[REPORT_DATA_AT..REPORT_DATA_AT + 64].try_into().unwrap();
    let mut mrtd = [0u8; 48];
    mrtd.copy_from_slice(&q[MRTD_AT..MRTD_AT + 48]);
    // At a fixed time within its PCK certificate's validity (2025-06-09
    // to 2032-06-09), so that the test outlives the certificate; now
    // too while it is valid.
    let in_2027 = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
    let policy = TdxPolicy {
        mrtd: Some(mrtd),
        at: Some(in_2027),
        ..TdxPolicy::default()
    };
    let now = TdxPolicy {
        at: None,
        ..policy.clone()
    };
    if std::time::SystemTime::now() < in_2027 {
        tdx::verify_quote(&q, &data, &now).unwrap();
    }
    let after = TdxPolicy {
        at: Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(2_000_000_000)),
        ..policy.clone()
    };
    assert_eq!(
        tdx::verify_quote(&q, &data, &after).unwrap_err(),
        tdx::TdxError::Expired("PCK")
    );
    let v = tdx::verify_quote(&q, &data, &policy).unwrap();
    assert_eq!(v.root, "Intel SGX Root CA");
    assert_eq!(v.pck_ca, "Intel SGX PCK Platform CA");
    assert!(v.mrtd_pinned);
    assert_eq!(&v.mrtd_hex()[..16], "c68518a0ebb42136");
    assert_eq!(v.report.td_attributes, 1 << 28);
    assert_eq!(v.report.xfam, 0x602e7);
    // Not for this connection.
    assert_eq!(
        tdx::verify_quote(&q, &report_data(TLS, &nonce()), &policy),
        Err(TdxError::ReportDataMismatch)
    );
    // A flipped byte of its TD report, or of its QE report.
    for (at, want) in [
        (MRTD_AT, TdxError::BadSignature),
        (REPORT_DATA_AT, TdxError::BadSignature),
        (QE_REPORT_AT + 10, TdxError::BadQeReportSignature),
    ] {
        let mut t = q.clone();
        t[at] ^= 1;
        assert_eq!(
            tdx::verify_quote(&t, &data, &policy),
            Err(want),
            "byte {at}"
        );
    }
    // Under a test root instead of Intel's: refused.
    let other = Chain::new("Other");
    let mut p = policy.clone();
    p.roots = vec![other.trusted_root()];
    assert_eq!(
        tdx::verify_quote(&q, &data, &p),
        Err(TdxError::UnpinnedRoot)
    );
}

#[test]
fn the_roots_and_pck_cas_crls_are_checked_when_given() {
    let (chain, n, q) = setup();
    let att = tdx(q);
    let verify_at = |crls: &[&Vec<u8>], at: Option<std::time::SystemTime>| {
        let mut policy = chain.policy(None);
        policy.tdx.crls = crls.iter().map(|c| c.to_vec()).collect();
        policy.tdx.at = at;
        verify(&att, TLS, &n, &policy)
    };
    let verify_with = |crls: &[&Vec<u8>]| verify_at(crls, None);
    let checked = |r: Result<Verified, AttestError>| match r {
        Ok(Verified::Tdx { quote, .. }) => quote.revocation_checked,
        other => panic!("expected an accepted quote, got {other:?}"),
    };
    assert!(!checked(verify_with(&[])));
    let root_crl = chain.root_crl(&[], 2020, 2099);
    let ca_crl = chain.ca_crl(&[], 2020, 2099);
    assert!(checked(verify_with(&[&root_crl, &ca_crl])));
    // Both issuers' CRLs are needed.
    assert_eq!(
        tdx_err(verify_with(&[&root_crl])),
        TdxError::NoCrl("PCK CA Intel SGX PCK Platform CA".into())
    );
    assert_eq!(
        tdx_err(verify_with(&[&ca_crl])),
        TdxError::NoCrl("root Test root".into())
    );
    // The PCK CA revoked by the root, the PCK certificate by the CA.
    let ca_revoked = chain.root_crl(&[&chain.ca], 2020, 2099);
    assert_eq!(
        tdx_err(verify_with(&[&ca_revoked, &ca_crl])),
        TdxError::Revoked("PCK CA")
    );
    let leaf_revoked = chain.ca_crl(&[&chain.leaf], 2020, 2099);
    assert_eq!(
        tdx_err(verify_with(&[&root_crl, &leaf_revoked])),
        TdxError::Revoked("PCK")
    );
    // A serial is the issuer's: the leaf's in the root's CRL is not it.
    let other_scope = chain.root_crl(&[&chain.leaf], 2020, 2099);
    assert!(checked(verify_with(&[&other_scope, &ca_crl])));
    // Out of date now; current at the policy's time.
    let stale = chain.ca_crl(&[], 2020, 2021);
    assert_eq!(
        tdx_err(verify_with(&[&root_crl, &stale])),
        TdxError::CrlOutOfDate("PCK CA Intel SGX PCK Platform CA".into())
    );
    let mid_2020 = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_593_561_600);
    assert!(checked(verify_at(&[&root_crl, &stale], Some(mid_2020))));
    // A CRL under the CA's name signed by another key; one not DER.
    let forged = Chain::new("Test").ca_crl(&[], 2020, 2099);
    assert!(matches!(
        tdx_err(verify_with(&[&root_crl, &forged])),
        TdxError::Chain(ref e) if e.contains("CRL")
    ));
    assert!(matches!(
        tdx_err(verify_with(&[&root_crl, &ca_crl, &b"garbage".to_vec()])),
        TdxError::Crl(_)
    ));
}
