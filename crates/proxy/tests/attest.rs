//! configfs-tsm against a fake report folder, and the client's SEV-SNP
//! verification against a test chain (ARK → ASK → VCEK made here) and
//! reports signed by its VCEK: forged, modified, stale, debug, unpinned
//! and malformed reports are refused with typed errors.

mod crl;
mod snp_chain;

use hecloud_proxy::attest::snp::{
    self, CertTable, GUID_ARK, GUID_ASK, GUID_VCEK, MinTcb, SnpError, TcbComponent, TcbLayout,
    TcbVersion, TrustedRoot, VcekSource,
};
use hecloud_proxy::attest::snp::{GUID_VLEK, SigningKey};
use hecloud_proxy::attest::*;
use hecloud_proxy::{Attestation, ProxyError};
use ring::digest::{SHA512, digest};
use ring::rand::{SecureRandom, SystemRandom};
use snp_chain::{
    CHIP_ID, CSP_ID, Chain, Ext, MEASUREMENT, OID_BL_SPL, OID_CSP_ID, OID_FMC_SPL, OID_HWID,
    OID_SNP_SPL, OID_TEE_SPL, OID_UCODE_SPL, POLICY, der_int, extensions, vlek_extensions,
};

fn nonce() -> [u8; CLIENT_NONCE_LEN] {
    let mut n = [0u8; CLIENT_NONCE_LEN];
    SystemRandom::new().fill(&mut n).unwrap();
    n
}

fn sev(report: Vec<u8>, auxblob: Option<Vec<u8>>) -> Attestation {
    Attestation::ConfigfsTsm {
        provider: PROVIDER_SEV_SNP.into(),
        report,
        auxblob,
    }
}

/// The SEV-SNP error of a refused attestation (panics if accepted).
fn snp_err(r: Result<Verified, AttestError>) -> SnpError {
    match r {
        Err(AttestError::Snp(e)) => {
            // A clear message, no panic, and the type says what failed.
            assert!(!e.to_string().is_empty());
            e
        }
        other => panic!("expected an SEV-SNP refusal, got {other:?}"),
    }
}

#[test]
fn report_data_is_sha512_of_key_then_nonce() {
    let key = b"proxy TLS public key bytes";
    let n = nonce();
    let mut cat = key.to_vec();
    cat.extend_from_slice(&n);
    assert_eq!(&report_data(key, &n)[..], digest(&SHA512, &cat).as_ref());
    assert_ne!(report_data(key, &n), report_data(key, &nonce()));
    assert_ne!(report_data(key, &n), report_data(b"another key", &n));
}

#[test]
fn a_valid_report_verifies_and_says_what_was_verified() {
    let chain = Chain::new("Test");
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let report = chain.report(&report_data(tls, &n));
    // The measurement pinned.
    let v = verify(
        &sev(report.clone(), Some(chain.table())),
        tls,
        &n,
        &chain.policy(Some(MEASUREMENT)),
    )
    .unwrap();
    let Verified::SevSnp {
        provider,
        report: r,
    } = v
    else {
        panic!("{v:?}")
    };
    assert_eq!(provider, "sev_guest");
    assert_eq!(r.product, "Test");
    assert_eq!(r.vcek_source, VcekSource::CertTable);
    assert_eq!((r.version, r.policy, r.vmpl), (3, POLICY, 0));
    assert_eq!(r.measurement, MEASUREMENT);
    assert!(r.measurement_pinned);
    assert_eq!(r.reported_tcb.raw, snp_chain::TCB);
    assert_eq!(r.reported_tcb.layout, TcbLayout::MilanGenoa);
    assert_eq!(
        (
            r.reported_tcb.fmc(),
            r.reported_tcb.boot_loader(),
            r.reported_tcb.tee(),
            r.reported_tcb.snp(),
            r.reported_tcb.microcode()
        ),
        (None, 4, 3, 0x16, 0xd1)
    );
    assert_eq!(
        (r.current_tcb, r.committed_tcb),
        (r.reported_tcb, r.reported_tcb)
    );
    assert!(!r.min_tcb_checked);
    // Not pinned: still verified, and it says so.
    let Verified::SevSnp { report: r, .. } = verify(
        &sev(report.clone(), Some(chain.table())),
        tls,
        &n,
        &chain.policy(None),
    )
    .unwrap() else {
        panic!()
    };
    assert!(!r.measurement_pinned);
    // Refused when the client requires a pinned measurement.
    let mut policy = chain.policy(None);
    policy.require_measurement = true;
    assert_eq!(
        verify(&sev(report.clone(), Some(chain.table())), tls, &n, &policy).unwrap_err(),
        AttestError::MeasurementNotPinned("sev_guest".into())
    );
    // The VCEK given to the client, no table from the proxy: the ASK must
    // then be pinned with the root.
    let mut policy = chain.policy(None);
    policy.snp.vcek = Some(chain.vcek.clone());
    assert!(matches!(
        snp_err(verify(&sev(report.clone(), None), tls, &n, &policy)),
        SnpError::Chain(_)
    ));
    policy.snp.roots[0].ask = Some(chain.ask.clone());
    let Verified::SevSnp { report: r, .. } =
        verify(&sev(report.clone(), None), tls, &n, &policy).unwrap()
    else {
        panic!()
    };
    assert_eq!(r.vcek_source, VcekSource::Client);
    // The VCEK from a PEM file.
    let pem = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        base64(&chain.vcek)
    );
    assert_eq!(snp::cert_der(pem.as_bytes()).unwrap(), chain.vcek);
    assert_eq!(snp::cert_der(&chain.vcek).unwrap(), chain.vcek);
}

/// Base64 (standard, padded) for the PEM test.
fn base64(b: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn forged_modified_and_foreign_reports_are_refused() {
    let chain = Chain::new("Test");
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let good = chain.report(&report_data(tls, &n));
    let policy = chain.policy(None);
    let check =
        |report: Vec<u8>| snp_err(verify(&sev(report, Some(chain.table())), tls, &n, &policy));
    // A flipped bit anywhere in the signed body (REPORT_DATA, the
    // measurement, the policy, the chip id) or in r or s.
    for at in [
        0x0C, 0x50, 0x8F, 0x90, 0xBF, 0x1A0, 0x29F, 0x2A0, 0x2E7, 0x2E8, 0x32F,
    ] {
        let mut r = good.clone();
        r[at] ^= 1;
        assert_eq!(check(r), SnpError::BadSignature, "bit at {at:#x}");
    }
    // Non-zero bytes above a 48-byte scalar.
    let mut r = good.clone();
    r[0x2A0 + 60] = 1;
    assert_eq!(check(r), SnpError::BadSignature);
    // Signed by another key: a VCEK of another chain, whose own table
    // chains to another root; with this chain's table the signature fails.
    let other = Chain::new("Test");
    let forged = other.report(&report_data(tls, &n));
    assert_eq!(check(forged.clone()), SnpError::BadSignature);
    // A layout this verifier does not read, unsigned or not.
    let mut r = good.clone();
    r[0] = 9;
    assert_eq!(check(r), SnpError::UnsupportedVersion(9));
    let mut r = good.clone();
    r[0x34] = 2;
    assert_eq!(check(r), SnpError::UnsupportedSignatureAlgorithm(2));
    let mut r = good.clone();
    r[0x48] = 1 << 2; // VLEK, and the table has none
    assert_eq!(check(r), SnpError::NoVlek);
    for key in [7u8, 2, 3] {
        let mut r = good.clone();
        r[0x48] = key << 2;
        assert_eq!(check(r), SnpError::UnsupportedSigningKey(key));
    }
    // The valid report is still accepted after all that.
    assert!(verify(&sev(good, Some(chain.table())), tls, &n, &policy).is_ok());
}

#[test]
fn chains_not_ending_in_the_pinned_root_are_refused() {
    let chain = Chain::new("Test");
    let other = Chain::new("Other");
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let data = report_data(tls, &n);
    // The proxy's whole chain is another one: its ARK is not pinned.
    let r = other.report(&data);
    assert_eq!(
        snp_err(verify(
            &sev(r.clone(), Some(other.table())),
            tls,
            &n,
            &chain.policy(None)
        )),
        SnpError::UnpinnedRoot
    );
    // The same without the ARK in the table: the ASK does not verify under
    // the pinned ARK.
    let no_ark = CertTable {
        entries: vec![
            (GUID_VCEK, other.vcek.clone()),
            (GUID_ASK, other.ask.clone()),
        ],
    }
    .to_bytes();
    assert_eq!(
        snp_err(verify(
            &sev(r.clone(), Some(no_ark)),
            tls,
            &n,
            &chain.policy(None)
        )),
        SnpError::Chain("the ASK is not signed by the ARK".into())
    );
    // The pinned ARK sent, but the other chain's ASK and VCEK.
    let mixed = CertTable {
        entries: vec![
            (GUID_VCEK, other.vcek.clone()),
            (GUID_ASK, other.ask.clone()),
            (GUID_ARK, chain.ark.clone()),
        ],
    }
    .to_bytes();
    assert!(matches!(
        snp_err(verify(
            &sev(r.clone(), Some(mixed)),
            tls,
            &n,
            &chain.policy(None)
        )),
        SnpError::Chain(_)
    ));
    // The right ASK, a VCEK from another ASK.
    let vcek_elsewhere = CertTable {
        entries: vec![
            (GUID_VCEK, other.vcek.clone()),
            (GUID_ASK, chain.ask.clone()),
        ],
    }
    .to_bytes();
    assert_eq!(
        snp_err(verify(
            &sev(r.clone(), Some(vcek_elsewhere)),
            tls,
            &n,
            &chain.policy(None)
        )),
        SnpError::Chain("the VCEK is not signed by the ASK".into())
    );
    // AMD's roots (the default policy) refuse a test chain.
    let mut amd = VerifyPolicy::new(false);
    assert_eq!(
        snp_err(verify(&sev(r.clone(), Some(other.table())), tls, &n, &amd)),
        SnpError::UnpinnedRoot
    );
    // No VCEK at all: refused.
    assert_eq!(
        snp_err(verify(&sev(r.clone(), None), tls, &n, &chain.policy(None))),
        SnpError::NoVcek
    );
    amd.snp.roots.clear();
    assert!(matches!(
        snp_err(verify(&sev(r, Some(other.table())), tls, &n, &amd)),
        SnpError::Chain(_)
    ));
}

#[test]
fn policy_measurement_and_binding_are_enforced() {
    let chain = Chain::new("Test");
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let data = report_data(tls, &n);
    let table = || Some(chain.table());
    let pinned = chain.policy(Some(MEASUREMENT));
    // A debug guest, even with the right measurement.
    let debug = chain.report_with(&data, &MEASUREMENT, POLICY | snp::POLICY_DEBUG);
    assert_eq!(
        snp_err(verify(&sev(debug, table()), tls, &n, &pinned)),
        SnpError::DebugGuest(POLICY | snp::POLICY_DEBUG)
    );
    // Another measurement than the expected.
    let mut m = MEASUREMENT;
    m[47] ^= 0x80;
    let other_image = chain.report_with(&data, &m, POLICY);
    assert!(matches!(
        snp_err(verify(&sev(other_image.clone(), table()), tls, &n, &pinned)),
        SnpError::MeasurementMismatch { .. }
    ));
    // ... which passes when nothing is pinned, saying so.
    match verify(&sev(other_image, table()), tls, &n, &chain.policy(None)).unwrap() {
        Verified::SevSnp { report, .. } => {
            assert!(!report.measurement_pinned);
            assert_eq!(report.measurement, m);
        }
        v => panic!("{v:?}"),
    }
    // Another VMPL than the expected.
    let mut vmpl1 = chain.report(&data);
    vmpl1[0x30] = 1;
    chain.sign(&mut vmpl1);
    assert_eq!(
        snp_err(verify(&sev(vmpl1.clone(), table()), tls, &n, &pinned)),
        SnpError::Vmpl { got: 1, want: 0 }
    );
    let mut at_vmpl1 = pinned.clone();
    at_vmpl1.snp.vmpl = 1;
    assert!(verify(&sev(vmpl1, table()), tls, &n, &at_vmpl1).is_ok());
    // Replayed: a genuine report made for another nonce (stale) or another
    // TLS key (relayed).
    let good = chain.report(&data);
    assert_eq!(
        snp_err(verify(&sev(good.clone(), table()), tls, &nonce(), &pinned)),
        SnpError::ReportDataMismatch
    );
    assert_eq!(
        snp_err(verify(
            &sev(good.clone(), table()),
            b"other-key",
            &n,
            &pinned
        )),
        SnpError::ReportDataMismatch
    );
    assert!(verify(&sev(good, table()), tls, &n, &pinned).is_ok());
}

#[test]
fn truncated_reports_and_malformed_tables_fail_with_typed_errors() {
    let chain = Chain::new("Test");
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let good = chain.report(&report_data(tls, &n));
    let policy = chain.policy(None);
    let with = |report: &[u8], table: Vec<u8>| {
        snp_err(verify(&sev(report.to_vec(), Some(table)), tls, &n, &policy))
    };
    for len in [0, 1, 0x4F, 0x2A0, 0x49F] {
        assert_eq!(with(&good[..len], chain.table()), SnpError::BadLength(len));
    }
    let mut long = good.clone();
    long.push(0);
    assert_eq!(with(&long, chain.table()), SnpError::BadLength(0x4A1));
    // Tables: truncated at every length, an entry pointing outside, no
    // terminator, garbage certificates, too large.
    let table = chain.table();
    for len in 0..table.len() {
        let e = with(&good, table[..len].to_vec());
        assert!(
            matches!(e, SnpError::CertTable(_) | SnpError::Certificate { .. }),
            "length {len}: {e:?}"
        );
    }
    let mut outside = table.clone();
    outside[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(with(&good, outside), SnpError::CertTable(_)));
    let mut offset = table.clone();
    offset[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(with(&good, offset), SnpError::CertTable(_)));
    assert!(matches!(with(&good, vec![1; 24]), SnpError::CertTable(_)));
    assert!(matches!(
        with(&good, vec![0; snp::MAX_CERT_TABLE + 1]),
        SnpError::CertTable(_)
    ));
    // Zero padding after the table is fine.
    let mut padded = table.clone();
    padded.resize(16 << 10, 0);
    assert!(verify(&sev(good.clone(), Some(padded)), tls, &n, &policy).is_ok());
    let garbage = CertTable {
        entries: vec![(GUID_VCEK, b"not a certificate".to_vec())],
    }
    .to_bytes();
    assert!(matches!(
        with(&good, garbage),
        SnpError::Certificate { which: "VCEK", .. }
    ));
    let mut flipped_cert = CertTable::parse(&table).unwrap();
    let vcek = &mut flipped_cert.entries[0].1;
    let last = vcek.len() - 1;
    vcek[last] ^= 1; // in the certificate's signature
    assert!(matches!(
        with(&good, flipped_cert.to_bytes()),
        SnpError::Chain(_) | SnpError::Certificate { .. }
    ));
    // Random bytes as a table and as a report: errors, never a panic.
    let mut noise = vec![0u8; 4096];
    for _ in 0..64 {
        SystemRandom::new().fill(&mut noise).unwrap();
        let _ = with(&good, noise.clone());
        let _ = verify(
            &sev(noise[..0x4A0].to_vec(), Some(table.clone())),
            tls,
            &n,
            &policy,
        )
        .unwrap_err();
    }
    // Mixed-endian GUIDs (the kernel's guid_t order) are read too.
    let mut mixed = CertTable::parse(&table).unwrap();
    for (g, _) in &mut mixed.entries {
        g[..4].reverse();
        g[4..6].reverse();
        g[6..8].reverse();
    }
    assert!(verify(&sev(good, Some(mixed.to_bytes())), tls, &n, &policy).is_ok());
}

#[test]
fn amd_roots_are_built_in_and_verify_with_rsa_pss() {
    // AMD's ARK and ASK per product: each ARK self-signed and each ASK
    // signed by its ARK (RSASSA-PSS SHA-384), checked by the same code
    // path as a proxy's chain, through a chain whose VCEK is missing.
    let roots = TrustedRoot::amd();
    assert_eq!(
        roots.iter().map(|r| r.product.as_str()).collect::<Vec<_>>(),
        ["Milan", "Genoa", "Turin"]
    );
    for root in &roots {
        snp::check_root(root).unwrap_or_else(|e| panic!("{}: {e}", root.product));
        // An ASK of another product is not signed by this ARK.
        let foreign = roots.iter().find(|r| r.product != root.product).unwrap();
        let mut mixed = root.clone();
        mixed.ask = foreign.ask.clone();
        assert!(matches!(snp::check_root(&mixed), Err(SnpError::Chain(_))));
        // A flipped bit in the ASK's key (inside its signed part).
        let mut flipped = root.clone();
        flipped.ask.as_mut().unwrap()[400] ^= 1;
        assert_eq!(
            snp::check_root(&flipped),
            Err(SnpError::Chain("the ASK is not signed by the ARK".into()))
        );
        // The ASVK (VLEK intermediate): signed by the same ARK, named
        // SEV-VLEK-<product>; the ASK and ASVK swapped are refused by name.
        let asvk = root.asvk.as_ref().unwrap();
        let cert = x509_parser::parse_x509_certificate(asvk).unwrap().1;
        let cn = cert.subject().iter_common_name().next().unwrap();
        assert_eq!(cn.as_str().unwrap(), format!("SEV-VLEK-{}", root.product));
        let mut swapped = root.clone();
        (swapped.ask, swapped.asvk) = (root.asvk.clone(), root.ask.clone());
        assert!(matches!(snp::check_root(&swapped), Err(SnpError::Chain(_))));
        let mut mixed = root.clone();
        mixed.asvk = foreign.asvk.clone();
        assert!(matches!(snp::check_root(&mixed), Err(SnpError::Chain(_))));
    }
    // A test root checks out the same way, and a non-self-signed one not.
    let chain = Chain::new("Test");
    let mut root = chain.root();
    root.ask = Some(chain.ask.clone());
    snp::check_root(&root).unwrap();
    root.ark = chain.ask.clone();
    assert!(snp::check_root(&root).is_err());
}

#[test]
fn unknown_providers_and_unattested_are_refused() {
    let chain = Chain::new("Test");
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let good = chain.report(&report_data(tls, &n));
    let policy = chain.policy(None);
    for provider in ["other", "sev_guest ", ""] {
        let a = Attestation::ConfigfsTsm {
            provider: provider.into(),
            report: good.clone(),
            auxblob: Some(chain.table()),
        };
        assert_eq!(
            verify(&a, tls, &n, &policy).unwrap_err(),
            AttestError::UnsupportedProvider(provider.into())
        );
    }
    // An SEV-SNP report announced as TDX goes to the TDX verifier, which
    // reads its first bytes as a quote version (3) and refuses it.
    let a = Attestation::ConfigfsTsm {
        provider: PROVIDER_TDX.into(),
        report: good.clone(),
        auxblob: Some(chain.table()),
    };
    assert_eq!(
        verify(&a, tls, &n, &policy).unwrap_err(),
        AttestError::Tdx(hecloud_proxy::attest::tdx::TdxError::UnsupportedVersion(3))
    );
    assert_eq!(
        verify(&Attestation::Unattested, tls, &n, &policy).unwrap_err(),
        AttestError::Unattested
    );
    assert_eq!(
        verify(&Attestation::Unattested, tls, &n, &VerifyPolicy::new(true)).unwrap(),
        Verified::Unattested
    );
}

#[test]
fn configfs_tsm_reads_report_provider_and_auxblob() {
    let chain = Chain::new("Test");
    let root = tempfile::tempdir().unwrap();
    let entry = root.path().join("e1");
    std::fs::create_dir(&entry).unwrap();
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let rd = report_data(tls, &n);
    let report = chain.report(&rd);
    std::fs::write(entry.join("outblob"), &report).unwrap();
    std::fs::write(entry.join("provider"), "sev_guest\n").unwrap();
    std::fs::write(entry.join("generation"), "1\n").unwrap();
    let tsm = ConfigfsTsm::new(root.path());
    assert!(tsm.available());
    // No auxblob: none sent, and the client without a VCEK refuses.
    let a = tsm.report_in("e1", &rd).unwrap();
    assert_eq!(std::fs::read(entry.join("inblob")).unwrap(), rd.to_vec());
    assert_eq!(a, sev(report.clone(), None));
    assert_eq!(
        snp_err(verify(&a, tls, &n, &chain.policy(None))),
        SnpError::NoVcek
    );
    // An empty auxblob (no certificates provisioned) is none.
    std::fs::write(entry.join("auxblob"), b"").unwrap();
    assert_eq!(tsm.report_in("e1", &rd).unwrap(), sev(report.clone(), None));
    // The host's certificate table.
    std::fs::write(entry.join("auxblob"), chain.table()).unwrap();
    let a = tsm.report_in("e1", &rd).unwrap();
    assert_eq!(a, sev(report.clone(), Some(chain.table())));
    assert!(
        matches!(verify(&a, tls, &n, &chain.policy(Some(MEASUREMENT))).unwrap(),
            Verified::SevSnp { report, .. } if report.measurement_pinned)
    );
    // The Debug form shows sizes, not bytes.
    let shown = format!("{a:?}");
    assert!(shown.contains("report_bytes: 1184"), "{shown}");
    // A fresh entry in the fake root has no outblob: a clear error.
    assert!(matches!(tsm.report(&rd), Err(ProxyError::Attestation(_))));
    // No such root.
    let none = ConfigfsTsm::new(root.path().join("absent"));
    assert!(!none.available());
    assert!(matches!(none.report(&rd), Err(ProxyError::Attestation(_))));
    // A bad generation, an empty report, an oversized auxblob.
    std::fs::write(entry.join("generation"), "x").unwrap();
    assert!(matches!(
        tsm.report_in("e1", &rd),
        Err(ProxyError::Attestation(_))
    ));
    std::fs::write(entry.join("generation"), "2").unwrap();
    std::fs::write(entry.join("auxblob"), vec![0u8; (MAX_REPORT + 1) as usize]).unwrap();
    assert!(matches!(
        tsm.report_in("e1", &rd),
        Err(ProxyError::Attestation(_))
    ));
    std::fs::write(entry.join("auxblob"), b"").unwrap();
    std::fs::write(entry.join("outblob"), b"").unwrap();
    assert!(matches!(
        tsm.report_in("e1", &rd),
        Err(ProxyError::Attestation(_))
    ));
    assert!(matches!(
        tsm.report_in("../e1", &rd),
        Err(ProxyError::InvalidName { .. })
    ));
}

/// A report of `chain` with `tcb` as REPORTED_TCB and CPU family `family`,
/// re-signed.
fn report_tcb(chain: &Chain, data: &[u8; 64], family: u8, tcb: u64) -> Vec<u8> {
    let mut r = chain.report(data);
    r[0x180..0x188].copy_from_slice(&tcb.to_le_bytes());
    r[0x188] = family;
    chain.sign(&mut r);
    r
}

#[test]
fn tcb_layouts_follow_the_cpu_family() {
    // Each component in its own byte, so that a misplaced byte shows.
    let raw = u64::from_le_bytes([10, 11, 12, 13, 14, 15, 16, 17]);
    let milan = TcbVersion {
        raw,
        layout: TcbLayout::MilanGenoa,
    };
    let turin = TcbVersion {
        raw,
        layout: TcbLayout::Turin,
    };
    let parts = |t: TcbVersion| (t.fmc(), t.boot_loader(), t.tee(), t.snp(), t.microcode());
    assert_eq!(parts(milan), (None, 10, 11, 16, 17));
    assert_eq!(parts(turin), (Some(10), 11, 12, 13, 17));
    assert_eq!(TcbLayout::of(2, 0).unwrap(), TcbLayout::MilanGenoa);
    assert_eq!(TcbLayout::of(2, 0x1A).unwrap(), TcbLayout::MilanGenoa);
    assert_eq!(TcbLayout::of(3, 0x19).unwrap(), TcbLayout::MilanGenoa);
    assert_eq!(TcbLayout::of(5, 0x1A).unwrap(), TcbLayout::Turin);
    for family in [0, 0x17, 0x1B, 0xFF] {
        assert_eq!(
            TcbLayout::of(3, family),
            Err(SnpError::UnknownCpuFamily(family))
        );
    }
    // A signed report of an unknown family is refused; a Turin one is read
    // in the Turin layout.
    let chain = Chain::new("Test");
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let data = report_data(tls, &n);
    let policy = chain.policy(None);
    let r = report_tcb(&chain, &data, 0x1B, raw);
    assert_eq!(
        snp_err(verify(&sev(r, Some(chain.table())), tls, &n, &policy)),
        SnpError::UnknownCpuFamily(0x1B)
    );
    let turin_chain = Chain::with_extensions("Test", turin_extensions(raw));
    let r = report_tcb(&turin_chain, &data, 0x1A, raw);
    let Verified::SevSnp { report, .. } = verify(
        &sev(r, Some(turin_chain.table())),
        tls,
        &n,
        &turin_chain.policy(None),
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(report.reported_tcb, turin);
}

/// The VCEK extensions of a Turin chip at `raw` (FMC byte 0, boot loader
/// 1, TEE 2, SNP 3, microcode 7) with an 8-byte hwID, the first bytes of
/// [`CHIP_ID`].
fn turin_extensions(raw: u64) -> Vec<Ext> {
    let b = raw.to_le_bytes();
    vec![
        (OID_FMC_SPL.to_vec(), der_int(b[0])),
        (OID_BL_SPL.to_vec(), der_int(b[1])),
        (OID_TEE_SPL.to_vec(), der_int(b[2])),
        (OID_SNP_SPL.to_vec(), der_int(b[3])),
        (OID_UCODE_SPL.to_vec(), der_int(b[7])),
        (OID_HWID.to_vec(), CHIP_ID[..8].to_vec()),
    ]
}

#[test]
fn min_tcb_parses_and_refuses_malformed_text() {
    let m: MinTcb = "bootloader=3,tee=0,snp=8,microcode=115".parse().unwrap();
    assert_eq!(
        m,
        MinTcb {
            fmc: 0,
            boot_loader: 3,
            tee: 0,
            snp: 8,
            microcode: 115
        }
    );
    let m: MinTcb = " UCODE=255 , bl=1,fmc=2 ".parse().unwrap();
    assert_eq!(
        (m.microcode, m.boot_loader, m.fmc, m.tee, m.snp),
        (255, 1, 2, 0, 0)
    );
    for bad in [
        "",
        " ",
        "snp",
        "snp=",
        "snp=256",
        "snp=-1",
        "snp=+1",
        "snp=0x10",
        "snp=1.5",
        "cpu=1",
        "snp=1,snp=2",
        "snp=1,",
        "snp=1;tee=2",
    ] {
        let e = bad.parse::<MinTcb>().unwrap_err();
        assert!(
            e.to_string().contains("malformed minimum TCB"),
            "{bad:?}: {e}"
        );
    }
}

#[test]
fn reported_tcb_below_a_minimum_is_refused() {
    let chain = Chain::new("Test");
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let data = report_data(tls, &n);
    let good = chain.report(&data);
    let tcb = TcbVersion {
        raw: snp_chain::TCB,
        layout: TcbLayout::MilanGenoa,
    };
    let at_of = |chain: &Chain, min: MinTcb| {
        let mut p = chain.policy(Some(MEASUREMENT));
        p.snp.min_tcb = Some(min);
        p
    };
    let at = |min: MinTcb| at_of(&chain, min);
    let exact = MinTcb {
        fmc: 0,
        boot_loader: tcb.boot_loader(),
        tee: tcb.tee(),
        snp: tcb.snp(),
        microcode: tcb.microcode(),
    };
    // Exactly the reported levels pass, and say a minimum was checked; an
    // FMC minimum does not apply to a Milan or Genoa report.
    for min in [exact, MinTcb::default(), MinTcb { fmc: 200, ..exact }] {
        let Verified::SevSnp { report, .. } =
            verify(&sev(good.clone(), Some(chain.table())), tls, &n, &at(min)).unwrap()
        else {
            panic!()
        };
        assert!(report.min_tcb_checked);
    }
    // One above in any component: refused, naming it.
    for (component, min) in [
        (
            TcbComponent::BootLoader,
            MinTcb {
                boot_loader: 5,
                ..exact
            },
        ),
        (TcbComponent::Tee, MinTcb { tee: 4, ..exact }),
        (TcbComponent::Snp, MinTcb { snp: 0x17, ..exact }),
        (
            TcbComponent::Microcode,
            MinTcb {
                microcode: 0xd2,
                ..exact
            },
        ),
        (
            TcbComponent::Microcode,
            MinTcb {
                microcode: 255,
                ..MinTcb::default()
            },
        ),
    ] {
        let found = tcb.get(component).unwrap();
        assert_eq!(
            snp_err(verify(
                &sev(good.clone(), Some(chain.table())),
                tls,
                &n,
                &at(min)
            )),
            SnpError::TcbBelowMinimum {
                component,
                found,
                minimum: min.get(component)
            }
        );
    }
    // Turin: the same bytes read otherwise, and the FMC minimum applies.
    let raw = u64::from_le_bytes([10, 11, 12, 13, 0, 0, 0, 17]);
    let chain = Chain::with_extensions("Test", turin_extensions(raw));
    let at = |min: MinTcb| at_of(&chain, min);
    let turin = report_tcb(&chain, &data, 0x1A, raw);
    let turin_min = MinTcb {
        fmc: 10,
        boot_loader: 11,
        tee: 12,
        snp: 13,
        microcode: 17,
    };
    assert!(
        verify(
            &sev(turin.clone(), Some(chain.table())),
            tls,
            &n,
            &at(turin_min)
        )
        .is_ok()
    );
    for (component, min) in [
        (
            TcbComponent::Fmc,
            MinTcb {
                fmc: 11,
                ..turin_min
            },
        ),
        (
            TcbComponent::BootLoader,
            MinTcb {
                boot_loader: 12,
                ..turin_min
            },
        ),
        (
            TcbComponent::Tee,
            MinTcb {
                tee: 13,
                ..turin_min
            },
        ),
        (
            TcbComponent::Snp,
            MinTcb {
                snp: 14,
                ..turin_min
            },
        ),
        (
            TcbComponent::Microcode,
            MinTcb {
                microcode: 18,
                ..turin_min
            },
        ),
    ] {
        assert_eq!(
            snp_err(verify(
                &sev(turin.clone(), Some(chain.table())),
                tls,
                &n,
                &at(min)
            )),
            SnpError::TcbBelowMinimum {
                component,
                found: min.get(component) - 1,
                minimum: min.get(component)
            }
        );
    }
    // Without a minimum any TCB passes, and it says so.
    let Verified::SevSnp { report, .. } = verify(
        &sev(turin, Some(chain.table())),
        tls,
        &n,
        &chain.policy(None),
    )
    .unwrap() else {
        panic!()
    };
    assert!(!report.min_tcb_checked);
}

/// [`extensions`] with the extension of OID `oid` replaced by `content`
/// (removed when `None`).
fn replaced(mut exts: Vec<Ext>, oid: &[u64], content: Option<Vec<u8>>) -> Vec<Ext> {
    let at = exts.iter().position(|(o, _)| o == oid).unwrap();
    match content {
        Some(c) => exts[at].1 = c,
        None => {
            exts.remove(at);
        }
    }
    exts
}

#[test]
fn the_vceks_tcb_and_chip_id_must_be_the_reports() {
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let data = report_data(tls, &n);
    // A VCEK with `exts`, signing a report of `chip` (and the test TCB).
    let verify_with = |exts: Vec<Ext>, chip: [u8; 64], masked_ok: bool| {
        let chain = Chain::with_extensions("Test", exts);
        let mut r = chain.report(&data);
        r[0x1A0..0x1E0].copy_from_slice(&chip);
        chain.sign(&mut r);
        let mut policy = chain.policy(Some(MEASUREMENT));
        policy.snp.allow_masked_chip_id = masked_ok;
        verify(&sev(r, Some(chain.table())), tls, &n, &policy)
    };
    let checked = |v: Verified| match v {
        Verified::SevSnp { report, .. } => report.chip_id_checked,
        v => panic!("{v:?}"),
    };
    // Matching: passes, chip id compared. hwID as a DER OCTET STRING too.
    assert!(checked(verify_with(extensions(), CHIP_ID, false).unwrap()));
    let mut octets = vec![4, 64];
    octets.extend_from_slice(&CHIP_ID);
    assert!(checked(
        verify_with(
            replaced(extensions(), &OID_HWID, Some(octets)),
            CHIP_ID,
            false
        )
        .unwrap()
    ));
    // Each TCB component off by one, either way: refused, naming it.
    for (oid, component, report) in [
        (OID_BL_SPL, TcbComponent::BootLoader, 4u8),
        (OID_TEE_SPL, TcbComponent::Tee, 3),
        (OID_SNP_SPL, TcbComponent::Snp, 0x16),
        (OID_UCODE_SPL, TcbComponent::Microcode, 0xd1),
    ] {
        for vcek in [report - 1, report + 1] {
            let exts = replaced(extensions(), &oid, Some(der_int(vcek)));
            assert_eq!(
                snp_err(verify_with(exts, CHIP_ID, false)),
                SnpError::VcekTcbMismatch {
                    component,
                    vcek,
                    report
                }
            );
        }
    }
    // Another chip's VCEK (one byte off, first or last), or the report of
    // another chip.
    for at in [0, 63] {
        let mut other = CHIP_ID;
        other[at] ^= 0x10;
        let exts = replaced(extensions(), &OID_HWID, Some(other.to_vec()));
        assert!(matches!(
            snp_err(verify_with(exts, CHIP_ID, false)),
            SnpError::VcekChipIdMismatch { .. }
        ));
        assert!(matches!(
            snp_err(verify_with(extensions(), other, false)),
            SnpError::VcekChipIdMismatch { .. }
        ));
    }
    // A missing extension, each.
    for (oid, name) in [
        (OID_BL_SPL.to_vec(), "blSPL"),
        (OID_TEE_SPL.to_vec(), "teeSPL"),
        (OID_SNP_SPL.to_vec(), "snpSPL"),
        (OID_UCODE_SPL.to_vec(), "ucodeSPL"),
        (OID_HWID.to_vec(), "hwID"),
    ] {
        assert_eq!(
            snp_err(verify_with(
                replaced(extensions(), &oid, None),
                CHIP_ID,
                false
            )),
            SnpError::VcekMissingExtension(name)
        );
    }
    // No AMD extension at all (a VCEK as this test chain had before).
    assert!(matches!(
        snp_err(verify_with(vec![], CHIP_ID, false)),
        SnpError::VcekMissingExtension(_)
    ));
    // Malformed levels: not minimal, too large, negative, another type,
    // trailing bytes, empty.
    for bad in [
        vec![2, 2, 0, 4],
        vec![2, 2, 1, 0],
        vec![2, 1, 0xfc],
        vec![4, 1, 4],
        vec![2, 1, 4, 0],
        vec![],
    ] {
        let exts = replaced(extensions(), &OID_BL_SPL, Some(bad.clone()));
        assert!(
            matches!(
                snp_err(verify_with(exts, CHIP_ID, false)),
                SnpError::VcekMalformedExtension {
                    extension: "blSPL",
                    ..
                }
            ),
            "{bad:?}"
        );
    }
    // Malformed hwID: short, long, an OCTET STRING of the wrong length.
    for bad in [
        CHIP_ID[..63].to_vec(),
        [&CHIP_ID[..], &[0]].concat(),
        [&[4, 8][..], &CHIP_ID[..8]].concat(),
    ] {
        let exts = replaced(extensions(), &OID_HWID, Some(bad));
        assert!(matches!(
            snp_err(verify_with(exts, CHIP_ID, false)),
            SnpError::VcekMalformedExtension {
                extension: "hwID",
                ..
            }
        ));
    }
    // A duplicated extension: refused (by x509-parser or here).
    let mut twice = extensions();
    twice.push((OID_SNP_SPL.to_vec(), der_int(0x16)));
    assert!(matches!(
        snp_err(verify_with(twice, CHIP_ID, false)),
        SnpError::VcekMalformedExtension { .. } | SnpError::Certificate { which: "VCEK", .. }
    ));
    // A masked chip id: refused unless allowed, then not compared.
    assert_eq!(
        snp_err(verify_with(extensions(), [0; 64], false)),
        SnpError::ChipIdMasked
    );
    assert!(!checked(verify_with(extensions(), [0; 64], true).unwrap()));
    // ... but the TCB is still compared then, and a missing hwID refused.
    let exts = replaced(extensions(), &OID_SNP_SPL, Some(der_int(0x15)));
    assert!(matches!(
        snp_err(verify_with(exts, [0; 64], true)),
        SnpError::VcekTcbMismatch { .. }
    ));
    let exts = replaced(extensions(), &OID_HWID, None);
    assert_eq!(
        snp_err(verify_with(exts, [0; 64], true)),
        SnpError::VcekMissingExtension("hwID")
    );
    // A VCEK given to the client is checked the same way.
    let chain = Chain::with_extensions(
        "Test",
        replaced(extensions(), &OID_TEE_SPL, Some(der_int(9))),
    );
    let mut policy = chain.policy(None);
    policy.snp.vcek = Some(chain.vcek.clone());
    policy.snp.roots[0].ask = Some(chain.ask.clone());
    assert_eq!(
        snp_err(verify(&sev(chain.report(&data), None), tls, &n, &policy)),
        SnpError::VcekTcbMismatch {
            component: TcbComponent::Tee,
            vcek: 9,
            report: 3
        }
    );
}

#[test]
fn a_turin_vcek_names_its_fmc_level_and_an_8_byte_hwid() {
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let data = report_data(tls, &n);
    let raw = u64::from_le_bytes([10, 11, 12, 13, 0, 0, 0, 17]);
    let verify_with = |exts: Vec<Ext>, chip: [u8; 64]| {
        let chain = Chain::with_extensions("Test", exts);
        let mut r = report_tcb(&chain, &data, 0x1A, raw);
        r[0x1A0..0x1E0].copy_from_slice(&chip);
        chain.sign(&mut r);
        verify(&sev(r, Some(chain.table())), tls, &n, &chain.policy(None))
    };
    assert!(verify_with(turin_extensions(raw), CHIP_ID).is_ok());
    // The hwID is the chip id's first 8 bytes: the rest is not compared.
    let mut tail = CHIP_ID;
    tail[8] ^= 1;
    assert!(verify_with(turin_extensions(raw), tail).is_ok());
    let mut head = CHIP_ID;
    head[7] ^= 1;
    assert!(matches!(
        snp_err(verify_with(turin_extensions(raw), head)),
        SnpError::VcekChipIdMismatch { .. }
    ));
    // A 64-byte hwID is not a Turin one.
    let exts = replaced(turin_extensions(raw), &OID_HWID, Some(CHIP_ID.to_vec()));
    assert!(matches!(
        snp_err(verify_with(exts, CHIP_ID)),
        SnpError::VcekMalformedExtension {
            extension: "hwID",
            ..
        }
    ));
    // fmcSPL: compared, and required.
    let exts = replaced(turin_extensions(raw), &OID_FMC_SPL, Some(der_int(9)));
    assert_eq!(
        snp_err(verify_with(exts, CHIP_ID)),
        SnpError::VcekTcbMismatch {
            component: TcbComponent::Fmc,
            vcek: 9,
            report: 10
        }
    );
    let exts = replaced(turin_extensions(raw), &OID_FMC_SPL, None);
    assert_eq!(
        snp_err(verify_with(exts, CHIP_ID)),
        SnpError::VcekMissingExtension("fmcSPL")
    );
    // The Turin levels are read from Turin bytes: the Milan and Genoa
    // extensions of the same report do not match.
    assert!(matches!(
        snp_err(verify_with(extensions(), CHIP_ID)),
        SnpError::VcekTcbMismatch { .. } | SnpError::VcekMissingExtension("fmcSPL")
    ));
}

#[test]
fn smt_and_migration_agent_are_refused_when_asked() {
    let chain = Chain::new("Test");
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let data = report_data(tls, &n);
    // A report with guest policy `policy` and PLATFORM_INFO `info`.
    let report = |policy: u64, info: u64| {
        let mut r = chain.report_with(&data, &MEASUREMENT, policy);
        r[0x40..0x48].copy_from_slice(&info.to_le_bytes());
        chain.sign(&mut r);
        r
    };
    let run = |r: Vec<u8>, smt: bool, ma: bool| {
        let mut p = chain.policy(Some(MEASUREMENT));
        p.snp.refuse_smt = smt;
        p.snp.refuse_migration_agent = ma;
        verify(&sev(r, Some(chain.table())), tls, &n, &p)
    };
    const MA: u64 = 1 << 18;
    const SMT_EN: u64 = 1;
    // Not asked (the default): both pass, and the details show them.
    let Verified::SevSnp { report: v, .. } =
        run(report(POLICY | MA, SMT_EN | 0b100), false, false).unwrap()
    else {
        panic!()
    };
    assert_eq!((v.policy, v.platform_info), (POLICY | MA, SMT_EN | 0b100));
    // Asked: SMT enabled on the platform is refused, whatever the guest
    // policy's SMT bit; other platform bits are not SMT.
    assert_eq!(
        snp_err(run(report(POLICY, SMT_EN | 0b100), true, false)),
        SnpError::SmtEnabled(SMT_EN | 0b100)
    );
    assert!(run(report(POLICY, 0b110), true, false).is_ok());
    assert!(run(report(POLICY & !(1 << 16), 0), true, true).is_ok());
    // Asked: a guest policy allowing a migration agent is refused.
    assert_eq!(
        snp_err(run(report(POLICY | MA, 0), false, true)),
        SnpError::MigrationAgentAllowed(POLICY | MA)
    );
    assert!(run(report(POLICY, SMT_EN), false, true).is_ok());
    assert!(run(report(POLICY, 0), true, true).is_ok());
}

/// The SEV-SNP report of an accepted attestation (panics if refused).
fn snp_ok(r: Result<Verified, AttestError>) -> snp::SnpVerified {
    match r {
        Ok(Verified::SevSnp { report, .. }) => report,
        other => panic!("expected an accepted SEV-SNP report, got {other:?}"),
    }
}

/// A certificate table of `entries`.
fn table(entries: &[([u8; 16], &[u8])]) -> Vec<u8> {
    CertTable {
        entries: entries.iter().map(|(g, c)| (*g, c.to_vec())).collect(),
    }
    .to_bytes()
}

#[test]
fn a_vlek_signed_report_verifies_through_the_asvk() {
    let chain = Chain::new("Test");
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let report = chain.vlek_report(&report_data(tls, &n));
    let r = snp_ok(verify(
        &sev(report.clone(), Some(chain.vlek_table())),
        tls,
        &n,
        &chain.policy(Some(MEASUREMENT)),
    ));
    assert_eq!(r.product, "Test");
    assert_eq!(r.signed_by, SigningKey::Vlek);
    assert_eq!(r.vcek_source, VcekSource::CertTable);
    assert_eq!(r.csp_id.as_deref(), Some(CSP_ID));
    // A VLEK is not per chip: the chip id is not compared (the report's is
    // the test chip's, which the VLEK does not name).
    assert!(!r.chip_id_checked);
    assert!(r.measurement_pinned);
    assert_eq!(r.reported_tcb.raw, snp_chain::TCB);
    // A masked chip id is no reason to refuse a VLEK-signed report.
    let mut masked = report.clone();
    masked[0x1A0..0x1E0].fill(0);
    chain.sign_vlek(&mut masked);
    assert!(
        !snp_ok(verify(
            &sev(masked, Some(chain.vlek_table())),
            tls,
            &n,
            &chain.policy(None)
        ))
        .chip_id_checked
    );
    // A client's VCEK does not stand in for the proxy's VLEK; both keys
    // in the table: the signing key picks.
    let mut policy = chain.policy(None);
    policy.snp.vcek = Some(chain.vcek.clone());
    let both = table(&[
        (GUID_VCEK, &chain.vcek),
        (GUID_VLEK, &chain.vlek),
        (GUID_ASK, &chain.asvk),
        (GUID_ARK, &chain.ark),
    ]);
    let r = snp_ok(verify(&sev(report.clone(), Some(both)), tls, &n, &policy));
    assert_eq!(r.signed_by, SigningKey::Vlek);
    // Without a csp_id the VLEK still verifies (reported as none).
    let chain = Chain::vlek_with(
        "Test",
        replaced(vlek_extensions(), &OID_CSP_ID, None),
        "SEV-VLEK-Test",
    );
    let report = chain.vlek_report(&report_data(tls, &n));
    let r = snp_ok(verify(
        &sev(report, Some(chain.vlek_table())),
        tls,
        &n,
        &chain.policy(None),
    ));
    assert_eq!((r.signed_by, r.csp_id), (SigningKey::Vlek, None));
    // A VCEK-signed report says so.
    let chain = Chain::new("Test");
    let report = chain.report(&report_data(tls, &n));
    let r = snp_ok(verify(
        &sev(report, Some(chain.table())),
        tls,
        &n,
        &chain.policy(None),
    ));
    assert_eq!(
        (r.signed_by, r.csp_id, r.chip_id_checked),
        (SigningKey::Vcek, None, true)
    );
}

#[test]
fn vlek_reports_with_a_wrong_key_chain_or_tcb_are_refused() {
    let chain = Chain::new("Test");
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let data = report_data(tls, &n);
    let vlek_report = chain.vlek_report(&data);
    let vcek_report = chain.report(&data);
    let policy = chain.policy(None);
    let check = |report: &[u8], t: Vec<u8>| {
        snp_err(verify(&sev(report.to_vec(), Some(t)), tls, &n, &policy))
    };

    // No VLEK in the table (no table at all, or the VCEK's table).
    assert_eq!(
        snp_err(verify(&sev(vlek_report.clone(), None), tls, &n, &policy)),
        SnpError::NoVlek
    );
    assert_eq!(check(&vlek_report, chain.table()), SnpError::NoVlek);
    // SIGNING_KEY 1 with the VCEK in the VLEK's slot (and the ASK): the
    // ASK is not an ASVK.
    let e = check(
        &vlek_report,
        table(&[
            (GUID_VLEK, &chain.vcek),
            (GUID_ASK, &chain.ask),
            (GUID_ARK, &chain.ark),
        ]),
    );
    assert!(
        matches!(&e, SnpError::Chain(m) if m.contains("not an ASVK")),
        "{e:?}"
    );
    // A VCEK-signed report with only a VLEK in the table.
    assert_eq!(check(&vcek_report, chain.vlek_table()), SnpError::NoVcek);
    // A VCEK-signed report (SIGNING_KEY 0) with the VLEK in the VCEK's slot
    // and the ASVK: the ASVK is not an ASK.
    let e = check(
        &vcek_report,
        table(&[
            (GUID_VCEK, &chain.vlek),
            (GUID_ASK, &chain.asvk),
            (GUID_ARK, &chain.ark),
        ]),
    );
    assert!(
        matches!(&e, SnpError::Chain(m) if m.contains("not an ASK")),
        "{e:?}"
    );
    // A VLEK report relabelled as VCEK-signed (re-signing impossible
    // without the key): the bit is signed.
    let mut r = vlek_report.clone();
    r[0x48] = 0;
    assert_eq!(check(&r, chain.table()), SnpError::BadSignature);
    // No ASVK in the table: the pinned root's ASK does not stand in; a
    // pinned ASVK does.
    let mut pinned = chain.policy(None);
    pinned.snp.roots[0].ask = Some(chain.ask.clone());
    let vlek_only = table(&[(GUID_VLEK, &chain.vlek), (GUID_ARK, &chain.ark)]);
    let e = snp_err(verify(
        &sev(vlek_report.clone(), Some(vlek_only.clone())),
        tls,
        &n,
        &pinned,
    ));
    assert!(
        matches!(&e, SnpError::Chain(m) if m.contains("no ASVK")),
        "{e:?}"
    );
    pinned.snp.roots[0].asvk = Some(chain.ask.clone());
    let e = snp_err(verify(
        &sev(vlek_report.clone(), Some(vlek_only.clone())),
        tls,
        &n,
        &pinned,
    ));
    assert!(
        matches!(&e, SnpError::Chain(m) if m.contains("not an ASVK")),
        "{e:?}"
    );
    pinned.snp.roots[0].asvk = Some(chain.asvk.clone());
    let r = snp_ok(verify(
        &sev(vlek_report.clone(), Some(vlek_only)),
        tls,
        &n,
        &pinned,
    ));
    assert_eq!(r.signed_by, SigningKey::Vlek);

    // Tampered: a flipped bit in the signed body or the signature.
    for at in [0x0C, 0x50, 0x90, 0x180, 0x1A0, 0x29F, 0x2A0, 0x2E8] {
        let mut r = vlek_report.clone();
        r[at] ^= 1;
        assert_eq!(
            check(&r, chain.vlek_table()),
            SnpError::BadSignature,
            "bit at {at:#x}"
        );
    }
    // Signed by another chain's VLEK.
    let other = Chain::new("Test");
    assert_eq!(
        check(&other.vlek_report(&data), chain.vlek_table()),
        SnpError::BadSignature
    );
    // Another chain's VLEK and ASVK under this pinned root: the table's
    // ARK is not pinned, and without it the chain does not verify.
    assert_eq!(
        check(&other.vlek_report(&data), other.vlek_table()),
        SnpError::UnpinnedRoot
    );
    let e = check(
        &other.vlek_report(&data),
        table(&[(GUID_VLEK, &other.vlek), (GUID_ASK, &other.asvk)]),
    );
    assert!(matches!(e, SnpError::Chain(_)), "{e:?}");
    // This chain's VLEK with another chain's ASVK.
    let e = check(
        &vlek_report,
        table(&[
            (GUID_VLEK, &chain.vlek),
            (GUID_ASK, &other.asvk),
            (GUID_ARK, &chain.ark),
        ]),
    );
    assert!(matches!(e, SnpError::Chain(_)), "{e:?}");

    // An intermediate named as an ASK, though the pinned ARK signed it.
    let ask_named = Chain::vlek_with("Test", vlek_extensions(), "SEV-Test");
    let e = snp_err(verify(
        &sev(ask_named.vlek_report(&data), Some(ask_named.vlek_table())),
        tls,
        &n,
        &ask_named.policy(None),
    ));
    assert!(
        matches!(&e, SnpError::Chain(m) if m.contains("not an ASVK")),
        "{e:?}"
    );

    // TCB extensions: each must equal REPORTED_TCB's, none missing.
    let tcb_check = |exts: Vec<Ext>| {
        let c = Chain::vlek_with("Test", exts, "SEV-VLEK-Test");
        snp_err(verify(
            &sev(c.vlek_report(&data), Some(c.vlek_table())),
            tls,
            &n,
            &c.policy(None),
        ))
    };
    for (oid, component, level, report) in [
        (OID_BL_SPL, TcbComponent::BootLoader, 5, 4),
        (OID_TEE_SPL, TcbComponent::Tee, 2, 3),
        (OID_SNP_SPL, TcbComponent::Snp, 0x17, 0x16),
        (OID_UCODE_SPL, TcbComponent::Microcode, 0xd0, 0xd1),
    ] {
        assert_eq!(
            tcb_check(replaced(vlek_extensions(), &oid, Some(der_int(level)))),
            SnpError::VcekTcbMismatch {
                component,
                vcek: level,
                report
            }
        );
        assert!(matches!(
            tcb_check(replaced(vlek_extensions(), &oid, None)),
            SnpError::VcekMissingExtension(_)
        ));
    }
}

#[test]
fn the_arks_crl_is_checked_when_given() {
    let chain = Chain::new("Test");
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let data = report_data(tls, &n);
    let vcek_signed = sev(chain.report(&data), Some(chain.table()));
    let vlek_signed = sev(chain.vlek_report(&data), Some(chain.vlek_table()));
    let verify_with = |att: &Attestation, crls: &[&Vec<u8>]| {
        let mut policy = chain.policy(None);
        policy.snp.crls = crls.iter().map(|c| c.to_vec()).collect();
        verify(att, tls, &n, &policy)
    };
    // No CRL given: verified, and it says revocation was not checked.
    assert!(!snp_ok(verify_with(&vcek_signed, &[])).revocation_checked);
    // A current CRL listing the ASVK: the VCEK's chain passes, checked;
    // the VLEK's is refused.
    let asvk_revoked = chain.ark_crl(&[&chain.asvk], 2020, 2099);
    assert!(snp_ok(verify_with(&vcek_signed, &[&asvk_revoked])).revocation_checked);
    assert_eq!(
        snp_err(verify_with(&vlek_signed, &[&asvk_revoked])),
        SnpError::Revoked("ASVK")
    );
    let ask_revoked = chain.ark_crl(&[&chain.ask], 2020, 2099);
    assert_eq!(
        snp_err(verify_with(&vcek_signed, &[&ask_revoked])),
        SnpError::Revoked("ASK")
    );
    assert!(snp_ok(verify_with(&vlek_signed, &[&ask_revoked])).revocation_checked);
    // Another product's CRL beside it is skipped; alone, it is no CRL.
    let other = Chain::new("Other").ark_crl(&[], 2020, 2099);
    assert!(snp_ok(verify_with(&vcek_signed, &[&other, &asvk_revoked])).revocation_checked);
    assert_eq!(
        snp_err(verify_with(&vcek_signed, &[&other])),
        SnpError::NoCrl("Test".into())
    );
    // Every CRL of the ARK counts: a revoking one is not outvoted.
    assert_eq!(
        snp_err(verify_with(&vcek_signed, &[&asvk_revoked, &ask_revoked])),
        SnpError::Revoked("ASK")
    );
    // Past its next update, or issued in the future: out of date.
    for (from, to) in [(2020, 2021), (2098, 2099)] {
        let crl = chain.ark_crl(&[], from, to);
        assert_eq!(
            snp_err(verify_with(&vcek_signed, &[&crl])),
            SnpError::CrlOutOfDate("Test".into()),
            "{from}-{to}"
        );
    }
    // Signed by another key under the same issuer name, or with its list
    // of serials modified (the ASK's serial changed): not the ARK's.
    let forged = Chain::new("Test").ark_crl(&[], 2020, 2099);
    let (_, ask) = x509_parser::parse_x509_certificate(&chain.ask).unwrap();
    let serial = ask.raw_serial();
    let at = ask_revoked
        .windows(serial.len())
        .position(|w| w == serial)
        .unwrap();
    let mut unrevoked = ask_revoked.clone();
    unrevoked[at + serial.len() - 1] ^= 1;
    for crl in [&forged, &unrevoked] {
        assert!(
            matches!(snp_err(verify_with(&vcek_signed, &[crl])), SnpError::Chain(ref e) if e.contains("CRL")),
        );
    }
    // Malformed: truncated, trailing bytes, not DER.
    let mut trailing = asvk_revoked.clone();
    trailing.push(0);
    let truncated = asvk_revoked[..asvk_revoked.len() - 1].to_vec();
    for crl in [&truncated, &trailing, &b"not a CRL".to_vec()] {
        assert!(matches!(
            snp_err(verify_with(&vcek_signed, &[crl])),
            SnpError::Crl(_)
        ));
    }
    // PEM CRLs decode to the same DER; a PEM certificate is not a CRL.
    let pem = format!(
        "-----BEGIN X509 CRL-----\n{}\n-----END X509 CRL-----\n",
        base64(&asvk_revoked)
    );
    assert_eq!(snp::crl_der(pem.as_bytes()).unwrap(), asvk_revoked);
    assert_eq!(snp::crl_der(&asvk_revoked).unwrap(), asvk_revoked);
    let cert = pem.replace("X509 CRL", "CERTIFICATE");
    assert!(snp::crl_der(cert.as_bytes()).is_err());
}
