//! Sealing at rest: round trips on random bytes, and every tampered,
//! swapped, truncated or foreign sealed file refused with its own error.

use hecloud_proxy::seal::{HEADER_LEN, MAGIC, SealedKeyStore, TAG_LEN, VERSION};
use hecloud_proxy::{ProxyError, SealingKey, seal, unseal};
use ring::rand::{SecureRandom, SystemRandom};

fn random_bytes(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    SystemRandom::new().fill(&mut v).unwrap();
    v
}

fn flip(sealed: &[u8], at: usize) -> Vec<u8> {
    let mut v = sealed.to_vec();
    v[at] ^= 0x01;
    v
}

#[test]
fn random_bytes_round_trip_and_nonces_differ() {
    let key = SealingKey::generate().unwrap();
    for n in [0usize, 1, 15, 16, 17, 1000, 65_537] {
        let data = random_bytes(n);
        let a = seal(&key, "alice", "secret.key", &data).unwrap();
        let b = seal(&key, "alice", "secret.key", &data).unwrap();
        assert_eq!(a.len(), HEADER_LEN + n + TAG_LEN);
        assert_eq!(&a[..6], MAGIC);
        assert_eq!(a[6], VERSION);
        // Fresh random nonce each time, so the two sealings differ.
        assert_ne!(a, b);
        assert_ne!(
            a[HEADER_LEN - 12..HEADER_LEN],
            b[HEADER_LEN - 12..HEADER_LEN]
        );
        // The plaintext does not appear in the clear.
        if n >= 16 {
            assert!(!a.windows(16).any(|w| w == &data[..16]));
        }
        assert_eq!(
            &*unseal(&key, "alice", "secret.key", &a).unwrap(),
            &data[..]
        );
        assert_eq!(
            &*unseal(&key, "alice", "secret.key", &b).unwrap(),
            &data[..]
        );
    }
}

fn assert_err(r: hecloud_proxy::Result<impl Sized>, want: fn(&ProxyError) -> bool, what: &str) {
    match r {
        Ok(_) => panic!("{what}: accepted"),
        Err(e) => assert!(want(&e), "{what}: wrong error {e:?}"),
    }
}

#[test]
fn every_tampered_or_foreign_file_gets_its_typed_error() {
    let key = SealingKey::generate().unwrap();
    let data = random_bytes(300);
    let s = seal(&key, "alice", "secret.key", &data).unwrap();
    let open = |b: &[u8]| unseal(&key, "alice", "secret.key", b);
    let tampered = |e: &ProxyError| matches!(e, ProxyError::Tampered);

    // Header fields: magic, version, key id, tenant tag, file tag, length.
    assert_err(
        open(&flip(&s, 0)),
        |e| matches!(e, ProxyError::NotSealed),
        "magic",
    );
    assert_err(
        open(&flip(&s, 6)),
        |e| matches!(e, ProxyError::UnknownVersion(v) if *v == VERSION ^ 1),
        "version",
    );
    assert_err(
        open(&flip(&s, 7)),
        |e| matches!(e, ProxyError::WrongKey),
        "key id",
    );
    assert_err(
        open(&flip(&s, 15)),
        |e| matches!(e, ProxyError::WrongTenant(_)),
        "tenant tag",
    );
    assert_err(
        open(&flip(&s, 23)),
        |e| matches!(e, ProxyError::WrongFile(_)),
        "file tag",
    );
    // Length raised: the body is shorter than declared; lowered: longer.
    assert_err(
        open(&flip(&s, 31)),
        |e| matches!(e, ProxyError::Truncated { .. }),
        "length up",
    );
    let mut lower = s.clone();
    lower[31] = lower[31].wrapping_sub(1);
    assert_err(open(&lower), tampered, "length down");
    // Nonce, ciphertext (first, middle, last byte), tag (first, last).
    for (at, what) in [
        (HEADER_LEN - 12, "nonce first"),
        (HEADER_LEN - 1, "nonce last"),
        (HEADER_LEN, "ciphertext first"),
        (HEADER_LEN + 150, "ciphertext middle"),
        (HEADER_LEN + 299, "ciphertext last"),
        (HEADER_LEN + 300, "tag first"),
        (s.len() - 1, "tag last"),
    ] {
        for bit in [0u8, 7] {
            let mut t = s.clone();
            t[at] ^= 1 << bit;
            assert_err(open(&t), tampered, what);
        }
    }
    // A header with the tags of another tenant copied in: the tag check
    // passes, the authentication does not.
    let bob = seal(&key, "bob", "secret.key", &data).unwrap();
    let mut forged = bob.clone();
    forged[15..23].copy_from_slice(&s[15..23]);
    assert_err(open(&forged), tampered, "tenant tag forged");
    // Swapped between tenants and between files.
    assert_err(
        open(&bob),
        |e| matches!(e, ProxyError::WrongTenant(_)),
        "tenant swap",
    );
    let pk = seal(&key, "alice", "public.key", &data).unwrap();
    assert_err(
        open(&pk),
        |e| matches!(e, ProxyError::WrongFile(_)),
        "file swap",
    );
    // Another sealing key.
    let other = SealingKey::generate().unwrap();
    assert_err(
        unseal(&other, "alice", "secret.key", &s),
        |e| matches!(e, ProxyError::WrongKey),
        "wrong key",
    );
    // Truncated: anywhere, from nothing to one byte short; one byte added.
    for len in [
        0,
        3,
        6,
        7,
        20,
        HEADER_LEN,
        HEADER_LEN + TAG_LEN,
        s.len() - 1,
    ] {
        assert_err(
            open(&s[..len]),
            |e| matches!(e, ProxyError::Truncated { .. }),
            &format!("truncated to {len}"),
        );
    }
    let mut longer = s.clone();
    longer.push(0);
    assert_err(open(&longer), tampered, "appended byte");
    // Not a sealed file at all; bad names.
    assert_err(
        open(b"HECL this is no sealed file at all, not even close......"),
        |e| matches!(e, ProxyError::NotSealed),
        "foreign",
    );
    for bad in ["", "../x", ".hidden", "a/b", "tenant with space"] {
        assert_err(
            seal(&key, bad, "secret.key", &data),
            |e| matches!(e, ProxyError::InvalidName { .. }),
            bad,
        );
    }
    // The untouched file still opens.
    assert_eq!(&*open(&s).unwrap(), &data[..]);
}

#[test]
fn key_files_are_private_exact_and_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sealing.key");
    let key = SealingKey::generate().unwrap();
    key.write_file(&path).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 32);
    let back = SealingKey::from_file(&path).unwrap();
    assert_eq!(back.id(), key.id());
    let s = seal(&key, "t", "f", b"payload").unwrap();
    assert_eq!(&*unseal(&back, "t", "f", &s).unwrap(), b"payload");
    // Not overwritten.
    let other = SealingKey::generate().unwrap();
    assert!(matches!(
        other.write_file(&path),
        Err(ProxyError::Exists(_))
    ));
    assert_eq!(SealingKey::from_file(&path).unwrap().id(), key.id());
    // Debug shows nothing of the key.
    assert_eq!(format!("{key:?}"), "SealingKey(<redacted>)");
    // Wrong length; readable by others.
    let short = dir.path().join("short.key");
    hecloud_protocol_write(&short, &[7u8; 31]);
    assert!(matches!(
        SealingKey::from_file(&short),
        Err(ProxyError::KeyFile { .. })
    ));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let open = dir.path().join("open.key");
        std::fs::write(&open, [7u8; 32]).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            SealingKey::from_file(&open),
            Err(ProxyError::KeyFile { .. })
        ));
    }
    assert!(matches!(
        SealingKey::from_file(&dir.path().join("missing.key")),
        Err(ProxyError::Io(_))
    ));
}

/// A 0600 file, as a key file would be.
fn hecloud_protocol_write(path: &std::path::Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

#[test]
fn store_keeps_sealed_files_per_tenant_and_refuses_swaps() {
    let dir = tempfile::tempdir().unwrap();
    let clear = dir.path().join("clear");
    std::fs::create_dir(&clear).unwrap();
    let secret = random_bytes(4096);
    let files = [
        ("preset", b"n13".to_vec()),
        ("secret.key", secret.clone()),
        ("public.key", random_bytes(2048)),
        ("session.spec", random_bytes(100)),
    ];
    for (n, b) in &files {
        std::fs::write(clear.join(n), b).unwrap();
    }
    std::fs::write(clear.join(".secret.key.tmp-1-0"), b"skipped").unwrap();
    let store = SealedKeyStore::new(dir.path().join("store"));
    let key = SealingKey::generate().unwrap();
    let sealed = store.seal_folder(&key, "alice", &clear).unwrap();
    assert_eq!(sealed.files().len(), 4);
    // Every file on disk is sealed (no clear secret), 0600, in a 0700 folder.
    let tdir = store.tenant_dir("alice").unwrap();
    for (n, _) in &files {
        let p = tdir.join(format!("{n}.sealed"));
        let b = std::fs::read(&p).unwrap();
        assert_eq!(&b[..6], MAGIC);
        assert!(!b.windows(64).any(|w| w == &secret[..64]));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{n}");
        }
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&tdir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
    assert_eq!(std::fs::read_dir(&tdir).unwrap().count(), 4);
    // Unsealed into memory, equal to the clear files.
    let u = store.unseal(&key, "alice").unwrap();
    for (n, b) in &files {
        assert_eq!(u.get(n).unwrap(), &b[..], "{n}");
    }
    assert!(!format!("{u:?}").contains(&format!("{:?}", &secret[..4])));
    assert_eq!(store.read("alice").unwrap(), sealed);
    // Not overwritten.
    assert!(matches!(
        store.seal_folder(&key, "alice", &clear),
        Err(ProxyError::Exists(_))
    ));
    // Bob's folder holding Alice's secret key: refused.
    store.seal_folder(&key, "bob", &clear).unwrap();
    std::fs::copy(
        tdir.join("secret.key.sealed"),
        store.tenant_dir("bob").unwrap().join("secret.key.sealed"),
    )
    .unwrap();
    assert!(matches!(
        store.unseal(&key, "bob"),
        Err(ProxyError::WrongTenant(_))
    ));
    // Alice's public key renamed to her secret key: refused.
    std::fs::copy(
        tdir.join("public.key.sealed"),
        tdir.join("secret.key.sealed"),
    )
    .unwrap();
    assert!(matches!(
        store.unseal(&key, "alice"),
        Err(ProxyError::WrongFile(_))
    ));
    // A folder without a secret key cannot be sealed; a bad tenant name.
    std::fs::remove_file(clear.join("secret.key")).unwrap();
    assert!(matches!(
        store.seal_folder(&key, "carol", &clear),
        Err(ProxyError::MissingFile { .. })
    ));
    assert!(!store.contains("carol").unwrap());
    assert!(matches!(
        store.tenant_dir("../alice"),
        Err(ProxyError::InvalidName { .. })
    ));
}
