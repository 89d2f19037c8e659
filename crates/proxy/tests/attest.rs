//! configfs-tsm against a fake report folder, and the client's binding
//! check against a report laid out by hand (SEV-SNP offsets).

use hecloud_proxy::attest::*;
use hecloud_proxy::{Attestation, ProxyError};
use ring::digest::{SHA512, digest};
use ring::rand::{SecureRandom, SystemRandom};

fn nonce() -> [u8; CLIENT_NONCE_LEN] {
    let mut n = [0u8; CLIENT_NONCE_LEN];
    SystemRandom::new().fill(&mut n).unwrap();
    n
}

/// An SEV-SNP-sized report with `data` at REPORT_DATA (0x50), the rest
/// random.
fn snp_report(data: &[u8; 64]) -> Vec<u8> {
    let mut r = vec![0u8; 0x4A0];
    SystemRandom::new().fill(&mut r).unwrap();
    r[0x50..0x90].copy_from_slice(data);
    r
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
fn configfs_tsm_writes_inblob_and_reads_the_report() {
    let root = tempfile::tempdir().unwrap();
    let entry = root.path().join("e1");
    std::fs::create_dir(&entry).unwrap();
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let rd = report_data(tls, &n);
    let report = snp_report(&rd);
    std::fs::write(entry.join("outblob"), &report).unwrap();
    std::fs::write(entry.join("provider"), "sev_guest\n").unwrap();
    std::fs::write(entry.join("generation"), "1\n").unwrap();
    let tsm = ConfigfsTsm::new(root.path());
    assert!(tsm.available());
    let a = tsm.report_in("e1", &rd).unwrap();
    assert_eq!(std::fs::read(entry.join("inblob")).unwrap(), rd.to_vec());
    assert_eq!(
        a,
        Attestation::ConfigfsTsm {
            provider: "sev_guest".into(),
            report: report.clone()
        }
    );
    assert_eq!(
        verify(&a, tls, &n, false).unwrap(),
        Verified::ReportDataBound {
            provider: "sev_guest".into()
        }
    );
    // A fresh entry in the fake root has no outblob: a clear error.
    assert!(matches!(tsm.report(&rd), Err(ProxyError::Attestation(_))));
    // No such root.
    let none = ConfigfsTsm::new(root.path().join("absent"));
    assert!(!none.available());
    assert!(matches!(none.report(&rd), Err(ProxyError::Attestation(_))));
    // A bad generation, an empty report.
    std::fs::write(entry.join("generation"), "x").unwrap();
    assert!(matches!(
        tsm.report_in("e1", &rd),
        Err(ProxyError::Attestation(_))
    ));
    std::fs::write(entry.join("generation"), "2").unwrap();
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

#[test]
fn client_refuses_unbound_stale_short_unknown_and_unattested_reports() {
    let (tls, n) = (b"tls-key".as_slice(), nonce());
    let good = snp_report(&report_data(tls, &n));
    let att = |provider: &str, report: Vec<u8>| Attestation::ConfigfsTsm {
        provider: provider.into(),
        report,
    };
    assert!(verify(&att("sev_guest", good.clone()), tls, &n, false).is_ok());
    let refused = |a: &Attestation, key: &[u8], nonce: &[u8; 32]| {
        assert!(
            matches!(
                verify(a, key, nonce, false),
                Err(ProxyError::Attestation(_))
            ),
            "{a:?} accepted"
        )
    };
    // Stale: made for another nonce. Another TLS key (a relay).
    refused(&att("sev_guest", good.clone()), tls, &nonce());
    refused(&att("sev_guest", good.clone()), b"other-key", &n);
    // Each bit of REPORT_DATA matters; bytes outside it do not (they are
    // not checked: no signature verification yet).
    for at in [0x50, 0x6F, 0x8F] {
        let mut r = good.clone();
        r[at] ^= 1;
        refused(&att("sev_guest", r), tls, &n);
    }
    let mut outside = good.clone();
    outside[0x4F] ^= 1;
    outside[0x90] ^= 1;
    assert!(verify(&att("sev_guest", outside), tls, &n, false).is_ok());
    // Too short; TDX and unknown providers are not verified yet.
    refused(&att("sev_guest", good[..0x49F].to_vec()), tls, &n);
    refused(&att("tdx_guest", good.clone()), tls, &n);
    refused(&att("other", good), tls, &n);
    // Unattested: refused unless allowed.
    refused(&Attestation::Unattested, tls, &n);
    assert_eq!(
        verify(&Attestation::Unattested, tls, &n, true).unwrap(),
        Verified::Unattested
    );
}
