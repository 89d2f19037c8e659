//! The plain enclave against the client's own key folder: what it encrypts
//! the clear folder decrypts, what the clear folder encrypts it decrypts,
//! it answers refresh requests the server's round accepts, and a batch is
//! one crossing.

use hecloud_ckks::Preset;
use hecloud_ckks::refresh::MaskPolicy;
use hecloud_client::ObjectSource;
use hecloud_client::keys::{BgvKeyDir, KeyDir, bgv_keygen, keygen};
use hecloud_protocol::refresh::RefreshRound;
use hecloud_proxy::enclave::REPORT_DATA_LEN;
use hecloud_proxy::{
    Attestation, Enclave, EnclaveOp, EnclaveReply, PlainEnclave, ProxyError, SealedKeyStore,
    SealingKey, StreamTo, Zeroizing, measure_fusion, unseal,
};
use hecloud_rlwe::{Ciphertext, PublicKey};
use ring::rand::{SecureRandom, SystemRandom};

/// Fresh random reals in [-10, 10).
fn random_reals(n: usize) -> Vec<f64> {
    let mut b = vec![0u8; 8 * n];
    SystemRandom::new().fill(&mut b).unwrap();
    b.chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()) as f64 / u64::MAX as f64 * 20.0 - 10.0)
        .collect()
}

fn close(want: &[f64], got: &[f64], tol: f64, what: &str) {
    assert!(got.len() >= want.len(), "{what}: {} values", got.len());
    for (i, (a, b)) in want.iter().zip(got).enumerate() {
        assert!((a - b).abs() < tol, "{what}: slot {i}: {a} vs {b}");
    }
    // The slots beyond the values hold zero.
    for (i, b) in got[want.len()..].iter().enumerate().take(8) {
        assert!(b.abs() < tol, "{what}: padding slot {i}: {b}");
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    clear: KeyDir,
    clear_dir: std::path::PathBuf,
    store: SealedKeyStore,
    key_file: std::path::PathBuf,
}

/// A test-sized (n13, no rotations) client key folder sealed for `alice`.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let clear_dir = dir.path().join("clear");
    keygen(&clear_dir, Preset::N13, &[]).unwrap();
    let key_file = dir.path().join("sealing.key");
    let key = SealingKey::generate().unwrap();
    key.write_file(&key_file).unwrap();
    let store = SealedKeyStore::new(dir.path().join("store"));
    // Sealed inside an enclave: the caller never holds the key.
    drop(key);
    let sealer = PlainEnclave::from_key_file(&key_file).unwrap();
    store.seal_folder_in(&sealer, "alice", &clear_dir).unwrap();
    Fixture {
        clear: KeyDir::open(&clear_dir).unwrap(),
        clear_dir,
        store,
        key_file,
        _dir: dir,
    }
}

fn load(tenant: &str, store: &SealedKeyStore) -> EnclaveOp {
    EnclaveOp::LoadTenant {
        tenant: tenant.into(),
        folder: store.read(tenant).unwrap(),
    }
}

fn in_batch(r: hecloud_proxy::Result<impl Sized>, index: usize) -> ProxyError {
    match r {
        Err(ProxyError::InBatch { index: i, source }) => {
            assert_eq!(i, index);
            *source
        }
        Err(e) => panic!("not an InBatch error: {e:?}"),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn plain_enclave_encrypts_decrypts_and_refreshes_like_the_clear_folder() {
    let f = fixture();
    let enclave = PlainEnclave::from_key_file(&f.key_file).unwrap();
    assert_eq!(enclave.crossings(), 0);
    assert_eq!(
        enclave.attestation(&[0u8; REPORT_DATA_LEN]).unwrap(),
        Attestation::Unattested
    );
    let loaded = enclave.call_one(load("alice", &f.store)).unwrap();
    assert_eq!(
        loaded,
        EnclaveReply::Loaded {
            preset: "n13".into()
        }
    );
    assert_eq!(enclave.tenants(), vec!["alice".to_string()]);

    // Enclave encrypts, the clear folder decrypts.
    let x = random_reals(300);
    let EnclaveReply::Ciphertext(ct) = enclave
        .call_one(EnclaveOp::EncryptReal {
            tenant: "alice".into(),
            values: Zeroizing::new(x.clone()),
        })
        .unwrap()
    else {
        panic!("not a ciphertext")
    };
    close(&x, &f.clear.decrypt(&ct).unwrap(), 1e-3, "enclave encrypt");

    // Streamed: the object is handed out before it is made, then holds a
    // ciphertext of the same length the clear folder decrypts.
    let (to, handed) = StreamTo::new();
    let reply = enclave
        .call_one(EnclaveOp::EncryptRealStreamed {
            tenant: "alice".into(),
            values: Zeroizing::new(x.clone()),
            to,
        })
        .unwrap();
    let object = handed.blocking_recv().expect("the object was handed out");
    assert!(object.is_complete());
    assert_eq!(reply, EnclaveReply::Streamed(ct.len() as u64));
    assert_eq!(object.byte_len(), ct.len() as u64);
    let mut streamed = vec![0; ct.len()];
    object.write_at(0, &mut streamed);
    assert_ne!(streamed, ct, "fresh randomness");
    close(
        &x,
        &f.clear.decrypt(&streamed).unwrap(),
        1e-3,
        "enclave streamed encrypt",
    );
    // Refused before it begins: nothing handed out.
    for (tenant, values) in [
        ("alice", vec![f64::NAN]),
        ("alice", vec![]),
        // Beyond what the encoding holds at this scale.
        ("alice", vec![1e30]),
        ("nobody", vec![1.0]),
    ] {
        let (to, handed) = StreamTo::new();
        enclave
            .call_one(EnclaveOp::EncryptRealStreamed {
                tenant: tenant.into(),
                values: Zeroizing::new(values),
                to,
            })
            .unwrap_err();
        assert!(handed.blocking_recv().is_err(), "{tenant}");
    }

    // The clear folder encrypts, the enclave decrypts.
    let y = random_reals(1000);
    let ct_y = f.clear.encrypt(&y).unwrap();
    let EnclaveReply::Reals(got) = enclave
        .call_one(EnclaveOp::Decrypt {
            tenant: "alice".into(),
            ciphertext: ct_y.clone(),
        })
        .unwrap()
    else {
        panic!("not reals")
    };
    close(&y, &got, 1e-3, "enclave decrypt");

    // A refresh round built by the server side, answered by the enclave.
    let params = f.clear.params.clone();
    let pk = PublicKey::from_bytes(
        params.rlwe(),
        &std::fs::read(f.clear_dir.join("public.key")).unwrap(),
    )
    .unwrap();
    let ct_obj = Ciphertext::from_bytes(params.rlwe(), &ct_y).unwrap();
    let target = params.max_level();
    let (round, request) = RefreshRound::ckks(
        "job-1",
        &params,
        &pk,
        &[&ct_obj],
        &MaskPolicy::default(),
        target,
    )
    .unwrap();
    let EnclaveReply::RefreshReply(reply) = enclave
        .call_one(EnclaveOp::AnswerRefresh {
            tenant: "alice".into(),
            request: request.clone(),
        })
        .unwrap()
    else {
        panic!("not a refresh reply")
    };
    let fresh = round.finish(&reply).unwrap();
    assert_eq!(fresh.len(), 1);
    assert_eq!(fresh[0].level(), target);
    close(
        &y,
        &f.clear.decrypt(&fresh[0].to_bytes()).unwrap(),
        1e-3,
        "refreshed",
    );
    // Each request is answered once.
    let replay = in_batch(
        enclave.call_one(EnclaveOp::AnswerRefresh {
            tenant: "alice".into(),
            request,
        }),
        0,
    );
    assert!(matches!(replay, ProxyError::Refresh(_)), "{replay:?}");
    // Nothing of the values in Debug output.
    let op = EnclaveOp::EncryptReal {
        tenant: "alice".into(),
        values: Zeroizing::new(vec![1234.5678]),
    };
    let reply = EnclaveReply::Reals(Zeroizing::new(vec![1234.5678]));
    for s in [
        format!("{op:?}"),
        format!("{reply:?}"),
        format!("{enclave:?}"),
    ] {
        assert!(!s.contains("1234"), "{s}");
    }
    // Unloaded: the tenant's operations are refused.
    assert_eq!(
        enclave
            .call_one(EnclaveOp::UnloadTenant {
                tenant: "alice".into()
            })
            .unwrap(),
        EnclaveReply::Unloaded(true)
    );
    let gone = in_batch(
        enclave.call_one(EnclaveOp::Decrypt {
            tenant: "alice".into(),
            ciphertext: ct_y,
        }),
        0,
    );
    assert!(matches!(gone, ProxyError::UnknownTenant(_)), "{gone:?}");
}

#[test]
fn a_batch_is_one_crossing_and_separate_calls_are_one_each() {
    let f = fixture();
    let enclave = PlainEnclave::from_key_file(&f.key_file).unwrap();
    let xs: Vec<Vec<f64>> = (0..3).map(|_| random_reals(64)).collect();
    let cts: Vec<Vec<u8>> = xs.iter().map(|x| f.clear.encrypt(x).unwrap()).collect();
    let decrypt = |ct: &Vec<u8>| EnclaveOp::Decrypt {
        tenant: "alice".into(),
        ciphertext: ct.clone(),
    };

    // Fused: bring the keys in and decrypt every ciphertext in one call.
    let mut batch = vec![load("alice", &f.store)];
    batch.extend(cts.iter().map(decrypt));
    let replies = enclave.call(batch).unwrap();
    assert_eq!(enclave.crossings(), 1);
    assert_eq!(replies.len(), 4);
    for (x, r) in xs.iter().zip(&replies[1..]) {
        let EnclaveReply::Reals(got) = r else {
            panic!("not reals")
        };
        close(x, got, 1e-3, "fused");
    }

    // One crossing per function: N calls, N crossings, the same values.
    for (i, (x, ct)) in xs.iter().zip(&cts).enumerate() {
        let EnclaveReply::Reals(got) = enclave.call_one(decrypt(ct)).unwrap() else {
            panic!("not reals")
        };
        close(x, &got, 1e-3, "separate");
        assert_eq!(enclave.crossings(), 2 + i as u64);
    }

    // A failing operation stops the batch at its index; an empty batch and
    // a failed one still cross.
    let before = enclave.crossings();
    let err = in_batch(
        enclave.call(vec![
            decrypt(&cts[0]),
            EnclaveOp::Decrypt {
                tenant: "alice".into(),
                ciphertext: b"not a ciphertext".to_vec(),
            },
            decrypt(&cts[1]),
        ]),
        1,
    );
    assert!(matches!(err, ProxyError::Crypto(_)), "{err:?}");
    assert!(enclave.call(vec![]).unwrap().is_empty());
    assert_eq!(enclave.crossings(), before + 2);
}

#[test]
fn bad_loads_and_bad_input_are_typed_errors() {
    let f = fixture();
    let enclave = PlainEnclave::from_key_file(&f.key_file).unwrap();
    // Under another sealing key.
    let other = PlainEnclave::new(SealingKey::generate().unwrap());
    let e = in_batch(other.call_one(load("alice", &f.store)), 0);
    assert!(matches!(e, ProxyError::WrongKey), "{e:?}");
    // Alice's sealed folder presented as Bob's.
    let e = in_batch(
        enclave.call_one(EnclaveOp::LoadTenant {
            tenant: "bob".into(),
            folder: f.store.read("alice").unwrap(),
        }),
        0,
    );
    assert!(matches!(e, ProxyError::WrongTenant(_)), "{e:?}");
    // A tenant never loaded; a bad tenant name.
    let e = in_batch(
        enclave.call_one(EnclaveOp::EncryptReal {
            tenant: "carol".into(),
            values: Zeroizing::new(vec![1.0]),
        }),
        0,
    );
    assert!(matches!(e, ProxyError::UnknownTenant(_)), "{e:?}");
    let e = in_batch(
        enclave.call_one(EnclaveOp::EncryptReal {
            tenant: "../carol".into(),
            values: Zeroizing::new(vec![1.0]),
        }),
        0,
    );
    assert!(matches!(e, ProxyError::InvalidName { .. }), "{e:?}");
    // A tampered sealed secret key on disk.
    let tampered = f
        .store
        .tenant_dir("alice")
        .unwrap()
        .join("secret.key.sealed");
    let mut b = std::fs::read(&tampered).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0x40;
    let good = std::fs::read(&tampered).unwrap();
    std::fs::write(&tampered, &b).unwrap();
    let e = in_batch(enclave.call_one(load("alice", &f.store)), 0);
    assert!(matches!(e, ProxyError::Tampered), "{e:?}");
    std::fs::write(&tampered, good).unwrap();
    enclave.call_one(load("alice", &f.store)).unwrap();
    // Too many values, none, a value that is not finite, one beyond what
    // decoding reads (it would come back as another value).
    let slots = f.clear.params.slots();
    for values in [
        vec![0.5; slots + 1],
        vec![],
        vec![1.0, f64::NAN],
        vec![1e18; slots],
    ] {
        let e = in_batch(
            enclave.call_one(EnclaveOp::EncryptReal {
                tenant: "alice".into(),
                values: Zeroizing::new(values),
            }),
            0,
        );
        assert!(matches!(e, ProxyError::Crypto(_)), "{e:?}");
    }
    // A folder whose public key belongs to another secret key.
    let dir = tempfile::tempdir().unwrap();
    let second = dir.path().join("second");
    keygen(&second, Preset::N13, &[]).unwrap();
    let mixed = dir.path().join("mixed");
    std::fs::create_dir(&mixed).unwrap();
    for n in ["preset", "secret.key"] {
        std::fs::copy(f.clear_dir.join(n), mixed.join(n)).unwrap();
    }
    std::fs::copy(second.join("public.key"), mixed.join("public.key")).unwrap();
    f.store.seal_folder_in(&enclave, "mixed", &mixed).unwrap();
    let e = in_batch(enclave.call_one(load("mixed", &f.store)), 0);
    assert!(matches!(e, ProxyError::Unsupported(_)), "{e:?}");
    // A folder of a preset the proxy does not hold.
    let tfhe = dir.path().join("tfhe");
    std::fs::create_dir(&tfhe).unwrap();
    for n in ["secret.key", "public.key"] {
        std::fs::copy(f.clear_dir.join(n), tfhe.join(n)).unwrap();
    }
    std::fs::write(tfhe.join("preset"), "tfhe").unwrap();
    f.store.seal_folder_in(&enclave, "tfhe", &tfhe).unwrap();
    let e = in_batch(enclave.call_one(load("tfhe", &f.store)), 0);
    assert!(matches!(e, ProxyError::Unsupported(_)), "{e:?}");
    // CKKS keys under a BGV preset's name.
    let bgv = dir.path().join("bgv");
    std::fs::create_dir(&bgv).unwrap();
    for n in ["secret.key", "public.key"] {
        std::fs::copy(f.clear_dir.join(n), bgv.join(n)).unwrap();
    }
    std::fs::write(bgv.join("preset"), "bgv-n13").unwrap();
    f.store.seal_folder_in(&enclave, "bgv", &bgv).unwrap();
    let e = in_batch(enclave.call_one(load("bgv", &f.store)), 0);
    assert!(
        matches!(e, ProxyError::Crypto(_) | ProxyError::Unsupported(_)),
        "{e:?}"
    );
    // The enclave is still up and serving Alice.
    assert_eq!(enclave.tenants(), vec!["alice".to_string()]);
}

/// Every file of a clear folder, read from disk.
fn clear_files(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn folders_sealed_inside_the_enclave_unseal_to_the_clear_files() {
    let f = fixture();
    // The reference: the clear folder on disk, unsealed file by file with
    // the key file through the free `unseal` function.
    let key = SealingKey::from_file(&f.key_file).unwrap();
    let clear = clear_files(&f.clear_dir);
    let sealed = f.store.read("alice").unwrap();
    assert_eq!(
        sealed.files().keys().collect::<Vec<_>>(),
        clear.keys().collect::<Vec<_>>()
    );
    for (name, bytes) in &clear {
        let got = unseal(&key, "alice", name, &sealed.files()[name]).unwrap();
        assert_eq!(&*got, bytes, "{name}");
    }

    // Through the enclave operation itself, and the store refusing a
    // tenant it already has before anything is sealed.
    let enclave = PlainEnclave::from_key_file(&f.key_file).unwrap();
    let e = f
        .store
        .seal_folder_in(&enclave, "alice", &f.clear_dir)
        .unwrap_err();
    assert!(matches!(e, ProxyError::Exists(_)), "{e:?}");
    assert_eq!(enclave.crossings(), 0);
    let files: std::collections::BTreeMap<String, Zeroizing<Vec<u8>>> = clear
        .iter()
        .map(|(n, b)| (n.clone(), Zeroizing::new(b.clone())))
        .collect();
    let EnclaveReply::Sealed(bob) = enclave
        .call_one(EnclaveOp::SealFolder {
            tenant: "bob".into(),
            files: files.clone(),
        })
        .unwrap()
    else {
        panic!("not a sealed folder")
    };
    assert_eq!(bob.tenant(), "bob");
    assert_eq!(
        &*unseal(&key, "bob", "secret.key", &bob.files()["secret.key"]).unwrap(),
        &clear["secret.key"]
    );
    // Nothing loaded by sealing; the folder loads and works.
    assert!(enclave.tenants().is_empty());
    let x = random_reals(50);
    let replies = enclave
        .call(vec![
            EnclaveOp::LoadTenant {
                tenant: "bob".into(),
                folder: bob,
            },
            EnclaveOp::EncryptReal {
                tenant: "bob".into(),
                values: Zeroizing::new(x.clone()),
            },
        ])
        .unwrap();
    let EnclaveReply::Ciphertext(ct) = &replies[1] else {
        panic!("not a ciphertext")
    };
    close(
        &x,
        &f.clear.decrypt(ct).unwrap(),
        1e-3,
        "sealed in the enclave",
    );

    // A folder without its secret key, a bad file name, a bad tenant.
    let mut missing = files.clone();
    missing.remove("secret.key");
    let e = in_batch(
        enclave.call_one(EnclaveOp::SealFolder {
            tenant: "carol".into(),
            files: missing,
        }),
        0,
    );
    assert!(
        matches!(&e, ProxyError::MissingFile { file, .. } if file == "secret.key"),
        "{e:?}"
    );
    let mut bad = files.clone();
    bad.insert("../escape".into(), Zeroizing::new(b"x".to_vec()));
    let e = in_batch(
        enclave.call_one(EnclaveOp::SealFolder {
            tenant: "carol".into(),
            files: bad,
        }),
        0,
    );
    assert!(
        matches!(e, ProxyError::InvalidName { what: "file", .. }),
        "{e:?}"
    );
    let e = in_batch(
        enclave.call_one(EnclaveOp::SealFolder {
            tenant: "../carol".into(),
            files: files.clone(),
        }),
        0,
    );
    assert!(
        matches!(e, ProxyError::InvalidName { what: "tenant", .. }),
        "{e:?}"
    );
    // Another enclave's sealing key: its folders do not load here.
    let other = PlainEnclave::new(SealingKey::generate().unwrap());
    let EnclaveReply::Sealed(foreign) = other
        .call_one(EnclaveOp::SealFolder {
            tenant: "dave".into(),
            files,
        })
        .unwrap()
    else {
        panic!("not a sealed folder")
    };
    let e = in_batch(
        enclave.call_one(EnclaveOp::LoadTenant {
            tenant: "dave".into(),
            folder: foreign,
        }),
        0,
    );
    assert!(matches!(e, ProxyError::WrongKey), "{e:?}");
    // Debug of the operation shows names, not contents.
    let op = EnclaveOp::SealFolder {
        tenant: "erin".into(),
        files: [(
            "secret.key".to_string(),
            Zeroizing::new(b"SECRETMARKER".to_vec()),
        )]
        .into_iter()
        .collect(),
    };
    let s = format!("{op:?}");
    assert!(
        s.contains("secret.key") && !s.contains("SECRETMARKER"),
        "{s}"
    );
}

#[test]
fn public_files_are_the_clear_uploads_and_never_the_secret_key() {
    let dir = tempfile::tempdir().unwrap();
    let clear_dir = dir.path().join("clear");
    keygen(&clear_dir, Preset::N13, &[1, 5]).unwrap();
    // A stray file is sealed with the folder but is not public.
    std::fs::write(clear_dir.join("notes.txt"), b"not for the server").unwrap();
    let key_file = dir.path().join("sealing.key");
    SealingKey::generate()
        .unwrap()
        .write_file(&key_file)
        .unwrap();
    let enclave = PlainEnclave::from_key_file(&key_file).unwrap();
    let store = SealedKeyStore::new(dir.path().join("store"));
    store.seal_folder_in(&enclave, "alice", &clear_dir).unwrap();
    assert!(
        store
            .read("alice")
            .unwrap()
            .files()
            .contains_key("notes.txt")
    );

    // The tenant need not be loaded.
    let public = |folder| {
        enclave.call_one(EnclaveOp::PublicFiles {
            tenant: "alice".into(),
            folder,
        })
    };
    let EnclaveReply::PublicFiles(files) = public(store.read("alice").unwrap()).unwrap() else {
        panic!("not public files")
    };
    // The reference: the clear folder minus its secret key and the stray
    // file, byte for byte.
    let mut want = clear_files(&clear_dir);
    assert!(want.remove("secret.key").is_some());
    assert!(want.remove("notes.txt").is_some());
    assert!(!files.contains_key("secret.key"));
    assert_eq!(files, want);
    assert!(files.keys().any(|n| n.starts_with("galois-")), "{files:?}");
    // Everything the client uploads is there.
    for (path, _) in KeyDir::open(&clear_dir).unwrap().uploads().unwrap() {
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_eq!(files[name], std::fs::read(&path).unwrap(), "{name}");
    }
    // Debug shows names and sizes only.
    let s = format!("{:?}", EnclaveReply::PublicFiles(files));
    assert!(s.contains("public.key") && !s.contains("secret"), "{s}");

    // The secret key is not even unsealed: a tampered one does not stop
    // the public files, a tampered public file does.
    let mut parts = store.read("alice").unwrap().files().clone();
    let mid = parts["secret.key"].len() / 2;
    parts.get_mut("secret.key").unwrap()[mid] ^= 1;
    let tampered_sk = hecloud_proxy::SealedFolder::from_parts("alice", parts.clone()).unwrap();
    assert!(public(tampered_sk).is_ok());
    let mid = parts["public.key"].len() / 2;
    parts.get_mut("public.key").unwrap()[mid] ^= 1;
    let tampered_pk = hecloud_proxy::SealedFolder::from_parts("alice", parts).unwrap();
    let e = in_batch(public(tampered_pk), 0);
    assert!(matches!(e, ProxyError::Tampered), "{e:?}");
    // Alice's folder presented as Bob's; another enclave's key.
    let e = in_batch(
        enclave.call_one(EnclaveOp::PublicFiles {
            tenant: "bob".into(),
            folder: store.read("alice").unwrap(),
        }),
        0,
    );
    assert!(matches!(e, ProxyError::WrongTenant(_)), "{e:?}");
    let other = PlainEnclave::new(SealingKey::generate().unwrap());
    let e = in_batch(
        other.call_one(EnclaveOp::PublicFiles {
            tenant: "alice".into(),
            folder: store.read("alice").unwrap(),
        }),
        0,
    );
    assert!(matches!(e, ProxyError::WrongKey), "{e:?}");
}

#[test]
fn measured_fusion_counts_one_crossing_against_one_per_operation() {
    let f = fixture();
    let enclave = PlainEnclave::from_key_file(&f.key_file).unwrap();
    let mut batch = vec![load("alice", &f.store)];
    for _ in 0..3 {
        batch.push(EnclaveOp::Decrypt {
            tenant: "alice".into(),
            ciphertext: f.clear.encrypt(&random_reals(32)).unwrap(),
        });
    }
    batch.push(EnclaveOp::PublicFiles {
        tenant: "alice".into(),
        folder: f.store.read("alice").unwrap(),
    });
    let r = measure_fusion(&enclave, &batch).unwrap();
    assert_eq!(r.operations, 5);
    assert_eq!(r.fused_crossings, 1);
    assert_eq!(r.separate_crossings, 5);
    assert_eq!(enclave.crossings(), 6);
    // A failure names its index in the batch.
    batch.insert(
        2,
        EnclaveOp::Decrypt {
            tenant: "alice".into(),
            ciphertext: b"not a ciphertext".to_vec(),
        },
    );
    let e = in_batch(measure_fusion(&enclave, &batch), 2);
    assert!(matches!(e, ProxyError::Crypto(_)), "{e:?}");
}

/// A `bgv-n13` client key folder sealed for `carol` in `f`'s store: its
/// clear folder.
fn bgv_tenant(f: &Fixture, dir: &std::path::Path) -> BgvKeyDir {
    let clear = dir.join("carol");
    bgv_keygen(&clear, hecloud_bgv::Preset::N13, false, false).unwrap();
    let sealer = PlainEnclave::from_key_file(&f.key_file).unwrap();
    f.store.seal_folder_in(&sealer, "carol", &clear).unwrap();
    BgvKeyDir::open(&clear).unwrap()
}

/// Fresh random integers below `t`.
fn random_ints(n: usize, t: u64) -> Vec<u64> {
    let mut b = vec![0u8; 8 * n];
    SystemRandom::new().fill(&mut b).unwrap();
    b.chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()) % t)
        .collect()
}

#[test]
fn a_bgv_tenant_encrypts_and_decrypts_integers_in_one_crossing_with_its_clear_folder() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let clear = bgv_tenant(&f, dir.path());
    let (t, n) = (clear.t(), clear.params.n());
    let enclave = PlainEnclave::from_key_file(&f.key_file).unwrap();
    match enclave.call_one(load("carol", &f.store)).unwrap() {
        EnclaveReply::Loaded { preset } => assert_eq!(preset, "bgv-n13"),
        other => panic!("{other:?}"),
    }
    // The enclave encrypts (two vectors, one crossing); the clear folder
    // decrypts. The clear folder encrypts; the enclave decrypts.
    let (x, y) = (random_ints(n, t), random_ints(100, t));
    let before = enclave.crossings();
    let replies = enclave
        .call(
            [&x, &y]
                .map(|v| EnclaveOp::EncryptInts {
                    tenant: "carol".into(),
                    values: Zeroizing::new(v.clone()),
                })
                .to_vec(),
        )
        .unwrap();
    assert_eq!(enclave.crossings(), before + 1);
    let cts: Vec<Vec<u8>> = replies
        .into_iter()
        .map(|r| match r {
            EnclaveReply::Ciphertext(b) => b,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(clear.decrypt(&cts[0]).unwrap(), x);
    let mut y_padded = y.clone();
    y_padded.resize(n, 0);
    assert_eq!(clear.decrypt(&cts[1]).unwrap(), y_padded);
    let reply = enclave
        .call_one(EnclaveOp::Decrypt {
            tenant: "carol".into(),
            ciphertext: clear.encrypt(&y).unwrap(),
        })
        .unwrap();
    assert_eq!(format!("{reply:?}"), format!("Ints({n} values, redacted)"));
    let EnclaveReply::Ints(got) = reply else {
        panic!("not integers")
    };
    assert_eq!(*got, y_padded);

    // Out of range (the value not echoed), too many values: refused.
    for (values, what) in [
        (vec![1, t], "value 1 is not below the plaintext modulus"),
        (vec![u64::MAX], "value 0 is not below the plaintext modulus"),
        (vec![0; n + 1], "values for"),
    ] {
        let e = in_batch(
            enclave.call_one(EnclaveOp::EncryptInts {
                tenant: "carol".into(),
                values: Zeroizing::new(values),
            }),
            0,
        );
        assert!(matches!(e, ProxyError::Crypto(_)), "{e:?}");
        assert!(e.to_string().contains(what), "{e}");
        assert!(!e.to_string().contains(&u64::MAX.to_string()), "{e}");
    }
    // Reals for the BGV tenant, integers for the CKKS one.
    enclave.call_one(load("alice", &f.store)).unwrap();
    let e = in_batch(
        enclave.call_one(EnclaveOp::EncryptReal {
            tenant: "carol".into(),
            values: Zeroizing::new(vec![1.0]),
        }),
        0,
    );
    assert!(matches!(e, ProxyError::WrongScheme { .. }), "{e:?}");
    let e = in_batch(
        enclave.call_one(EnclaveOp::EncryptInts {
            tenant: "alice".into(),
            values: Zeroizing::new(vec![1]),
        }),
        0,
    );
    assert!(matches!(e, ProxyError::WrongScheme { .. }), "{e:?}");
    // A CKKS ciphertext given to the BGV tenant.
    let e = in_batch(
        enclave.call_one(EnclaveOp::Decrypt {
            tenant: "carol".into(),
            ciphertext: f.clear.encrypt(&[1.0]).unwrap(),
        }),
        0,
    );
    assert!(matches!(e, ProxyError::ForeignParameters), "{e:?}");
    // Both still served.
    match enclave
        .call_one(EnclaveOp::EncryptInts {
            tenant: "carol".into(),
            values: Zeroizing::new(vec![3, 4]),
        })
        .unwrap()
    {
        EnclaveReply::Ciphertext(b) => assert_eq!(clear.decrypt(&b).unwrap()[..3], [3, 4, 0]),
        other => panic!("{other:?}"),
    }
    assert_eq!(enclave.tenants(), ["alice", "carol"]);
}

#[test]
fn a_bgv_folder_whose_public_key_is_not_its_secret_keys_is_refused() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    let second = dir.path().join("second");
    for d in [&first, &second] {
        bgv_keygen(d, hecloud_bgv::Preset::N13, false, false).unwrap();
    }
    let mixed = dir.path().join("mixed");
    std::fs::create_dir(&mixed).unwrap();
    for n in ["preset", "secret.key"] {
        std::fs::copy(first.join(n), mixed.join(n)).unwrap();
    }
    std::fs::copy(second.join("public.key"), mixed.join("public.key")).unwrap();
    let enclave = PlainEnclave::from_key_file(&f.key_file).unwrap();
    f.store.seal_folder_in(&enclave, "mixed", &mixed).unwrap();
    let e = in_batch(enclave.call_one(load("mixed", &f.store)), 0);
    assert!(matches!(e, ProxyError::Unsupported(_)), "{e:?}");
    assert!(enclave.tenants().is_empty());
    // The matching folder loads.
    f.store.seal_folder_in(&enclave, "first", &first).unwrap();
    enclave.call_one(load("first", &f.store)).unwrap();
}

/// A ciphertext under another key folder of the tenant's own preset (a
/// server returning another tenant's or session's object): refused as
/// foreign, for CKKS (whose decryption would be noise the decoder might
/// catch) and BGV (whose decryption would be integers mod t like any
/// other); the tenant is still served.
#[test]
fn a_ciphertext_under_another_key_folder_of_the_same_preset_is_foreign() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let clear_bgv = bgv_tenant(&f, dir.path());
    let (ckks_other, bgv_other) = (dir.path().join("other"), dir.path().join("other-bgv"));
    keygen(&ckks_other, Preset::N13, &[]).unwrap();
    bgv_keygen(&bgv_other, hecloud_bgv::Preset::N13, false, false).unwrap();
    let ckks_other = KeyDir::open(&ckks_other).unwrap();
    let bgv_other = BgvKeyDir::open(&bgv_other).unwrap();
    let enclave = PlainEnclave::from_key_file(&f.key_file).unwrap();
    enclave.call_one(load("alice", &f.store)).unwrap();
    enclave.call_one(load("carol", &f.store)).unwrap();
    for (tenant, ciphertext) in [
        ("alice", ckks_other.encrypt(&[1.0, 2.0]).unwrap()),
        ("carol", bgv_other.encrypt(&[1, 2]).unwrap()),
    ] {
        let e = in_batch(
            enclave.call_one(EnclaveOp::Decrypt {
                tenant: tenant.into(),
                ciphertext,
            }),
            0,
        );
        assert!(matches!(e, ProxyError::ForeignKey), "{tenant}: {e:?}");
    }
    let reply = enclave
        .call_one(EnclaveOp::Decrypt {
            tenant: "carol".into(),
            ciphertext: clear_bgv.encrypt(&[5, 6]).unwrap(),
        })
        .unwrap();
    let EnclaveReply::Ints(got) = reply else {
        panic!("not integers")
    };
    assert_eq!(got[..3], [5, 6, 0]);
    let reply = enclave
        .call_one(EnclaveOp::Decrypt {
            tenant: "alice".into(),
            ciphertext: f.clear.encrypt(&[0.5]).unwrap(),
        })
        .unwrap();
    let EnclaveReply::Reals(got) = reply else {
        panic!("not reals")
    };
    close(&[0.5], &got, 1e-3, "alice after a foreign ciphertext");
}
