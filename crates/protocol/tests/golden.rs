//! Golden files: one small, seeded sample of every serialized object kind and
//! every protocol message, stored under `tests/golden/` with a manifest of
//! lengths and BLAKE3 checksums. A change to any wire format fails here, so
//! it can only be made on purpose: bump the format version, then regenerate
//! the files with
//!
//! ```sh
//! HECLOUD_BLESS_GOLDEN=1 cargo test --workspace --release --locked --test golden
//! ```
//!
//! and commit them with the version bump.
//!
//! Each object is checked three ways: the stored bytes match the manifest,
//! today's decoder accepts them and today's encoder writes them back byte for
//! byte, and what they decode to means what it meant when it was written
//! (ciphertexts decrypt to the stored message under the stored key, keys
//! do their job). The TFHE server key (115 MiB) has no golden file; it
//! travels in the same container as the `tfhe.uint` and `tfhe.bit` samples,
//! around TFHE-rs's own versioned serialization.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hecloud_circuits::{EncryptedUint, TFHE_PARAMS, Wire};
use hecloud_ckks::params::test_literal;
use hecloud_ckks::{CkksParameters, Encoder, EvaluationKeys, Evaluator};
use hecloud_protocol::object::{payload_kind, unversion, versioned_bytes};
use hecloud_protocol::*;
use hecloud_rlwe::{Ciphertext, Decryptor, Encryptor, GaloisKeys, KeyGenerator, SecretKey};
use tfhe::core_crypto::commons::generators::DeterministicSeeder;
use tfhe::core_crypto::commons::math::random::{DefaultRandomGenerator, Seed};
use tfhe::shortint::engine::ShortintEngine;

/// The message every CKKS sample encrypts.
const MESSAGE: [f64; 4] = [0.5, -0.25, 1.0, 0.125];
/// The integer and the bit every TFHE sample encrypts.
const TFHE_UINT: (u128, usize) = (2, 2);
const TFHE_BIT: bool = true;
/// Fixed seeds: golden files are deterministic by design.
const KEY_SEED: [u8; 32] = [7; 32];
const ENC_SEED: [u8; 32] = [11; 32];
/// The seed of the TFHE-rs engine that draws the TFHE samples' key and
/// encryption randomness.
const TFHE_SEED: u128 = 13;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn ckks_params() -> Arc<CkksParameters> {
    CkksParameters::new_insecure_for_tests(test_literal(5, 2), 40).unwrap()
}

fn session_params() -> SessionParams {
    SessionParams {
        ckks: Some(ckks_params()),
        tfhe: Some(TfheParamSpec::Message2Carry2),
        bgv: None,
    }
}

/// The golden files that hold stored objects, with their kinds (the others
/// hold protocol messages and the secret keys the checks decrypt with).
const OBJECTS: [(&str, ObjectKind); 7] = [
    ("ckks-ciphertext", ObjectKind::CkksCiphertext),
    ("ckks-ciphertext-seeded", ObjectKind::CkksCiphertext),
    ("ckks-plaintext", ObjectKind::CkksPlaintext),
    ("ckks-public-key", ObjectKind::CkksPublicKey),
    ("ckks-relin-key", ObjectKind::CkksRelinKey),
    ("ckks-galois-key", ObjectKind::CkksGaloisKey),
    ("tfhe-uint", ObjectKind::TfheUint),
];

/// Writes every sample afresh from the fixed seeds: blessing twice writes
/// the same bytes.
fn bless() {
    let params = ckks_params();
    let rlwe = params.rlwe();
    let mut kg = KeyGenerator::from_seed(rlwe, KEY_SEED);
    let sk = kg.gen_secret_key().unwrap();
    let pk = kg.gen_public_key(&sk).unwrap();
    let relin = kg.gen_relinearization_key(&sk).unwrap();
    let galois = kg.gen_galois_keys(&sk, &[1], false).unwrap();
    let g = galois.elements().next().unwrap();
    let pt = Encoder::new(&params)
        .encode_real(&MESSAGE, params.max_level(), params.default_scale())
        .unwrap();
    let mut enc = Encryptor::from_seed(rlwe, ENC_SEED);
    let ct = enc.encrypt_pk(&pk, &pt).unwrap();
    let ct_seeded = enc.encrypt_sk(&sk, &pt).unwrap();

    // An engine of its own, seeded, rather than TFHE-rs's thread-local one
    // (seeded from the OS).
    let mut engine = ShortintEngine::new_from_seeder(&mut DeterministicSeeder::<
        DefaultRandomGenerator,
    >::new(Seed(TFHE_SEED)));
    let ck = engine.new_client_key(TFHE_PARAMS);
    // A bit's degree is its public bound (1), as the TFHE engine sets it.
    let mut wire = |b: bool| {
        let mut ct = engine.encrypt(&ck, b as u64);
        ct.degree = tfhe::shortint::ciphertext::Degree::new(1);
        Wire::from_parts(ct, 1, 1)
    };
    let (value, width) = TFHE_UINT;
    let bits = (0..width).map(|i| wire(value >> i & 1 == 1)).collect();
    let key = hecloud_protocol::object::tfhe_key_id(&ck).unwrap();
    let uint = Object::TfheUint(EncryptedUint::from_bits(bits).unwrap(), key);
    let bit = Object::TfheBit(wire(TFHE_BIT), key);

    let mut files: Vec<(String, Vec<u8>)> = vec![
        ("ckks-secret-key".into(), sk.export_bytes().to_vec()),
        ("ckks-ciphertext".into(), ct.to_bytes()),
        ("ckks-ciphertext-seeded".into(), ct_seeded.to_bytes()),
        ("ckks-plaintext".into(), pt.to_bytes()),
        ("ckks-public-key".into(), pk.to_bytes()),
        ("ckks-relin-key".into(), relin.to_bytes(true)),
        (
            "ckks-galois-key".into(),
            galois.get(g).unwrap().to_bytes(true),
        ),
        ("tfhe-client-key".into(), versioned_bytes(&ck).unwrap()),
        ("tfhe-uint".into(), uint.to_bytes()),
        ("tfhe-bit".into(), bit.to_bytes()),
    ];
    for (name, bytes) in common::messages() {
        files.push((format!("message-{name}"), bytes));
    }
    files.push(("grpc-fields".into(), grpc_fields().into_bytes()));
    let d = dir();
    if d.exists() {
        std::fs::remove_dir_all(&d).unwrap();
    }
    std::fs::create_dir_all(&d).unwrap();
    let mut manifest = String::from("# name length blake3 (regenerate: see tests/golden.rs)\n");
    for (name, bytes) in &files {
        std::fs::write(d.join(format!("{name}.bin")), bytes).unwrap();
        let hash = blake3::hash(bytes).to_hex();
        manifest += &format!("{name} {} {hash}\n", bytes.len());
    }
    std::fs::write(d.join("MANIFEST"), manifest).unwrap();
}

/// The golden files, checked against the manifest (blessing them first when
/// `HECLOUD_BLESS_GOLDEN` is set).
fn golden() -> BTreeMap<String, Vec<u8>> {
    static BLESSED: std::sync::Once = std::sync::Once::new();
    if std::env::var_os("HECLOUD_BLESS_GOLDEN").is_some() {
        BLESSED.call_once(bless);
    }
    let d = dir();
    let manifest = std::fs::read_to_string(d.join("MANIFEST")).expect("tests/golden/MANIFEST");
    let mut files = BTreeMap::new();
    for line in manifest.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [name, len, hash] = f[..] else {
            panic!("bad manifest line {line:?}");
        };
        let bytes = std::fs::read(d.join(format!("{name}.bin"))).unwrap();
        assert_eq!(bytes.len().to_string(), len, "{name}: length");
        assert_eq!(
            blake3::hash(&bytes).to_hex().as_str(),
            hash,
            "{name}: checksum"
        );
        files.insert(name.to_string(), bytes);
    }
    let stored = std::fs::read_dir(&d).unwrap().count();
    assert_eq!(
        stored,
        files.len() + 1,
        "every file in tests/golden is in MANIFEST"
    );
    files
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() < 1e-3,
            "{what}: slot {i} is {g}, expected {w}"
        );
    }
}

#[test]
fn messages_are_frozen() {
    let files = golden();
    for (name, bytes) in common::messages() {
        let stored = &files[&format!("message-{name}")];
        assert!(stored == &bytes, "message {name}: encoding changed");
    }
    let spec = SessionSpec::decode(&files["message-spec"]).unwrap();
    assert_eq!(spec.encode(), files["message-spec"]);
    let job = JobSubmission::decode(&files["message-job"]).unwrap();
    assert_eq!(job.encode(), files["message-job"]);
    let status = JobStatus::decode(&files["message-status"]).unwrap();
    assert_eq!(status.state, JobState::Running);
    let result = JobResult::decode(&files["message-result"]).unwrap();
    assert_eq!(result.encode(), files["message-result"]);
    let d = ObjectDescriptor::decode(&files["message-descriptor"]).unwrap();
    assert_eq!(d.encode(), files["message-descriptor"]);
    let g = Graph::decode(&files["message-graph"]).unwrap();
    assert_eq!(g.encode(), files["message-graph"]);
    let g = Graph::decode(&files["message-bgv-bits-graph"]).unwrap();
    assert_eq!(g, common::bgv_bits_graph());
    let spec = SessionSpec::decode(&files["message-refresh-spec"]).unwrap();
    assert_eq!(spec.refresh.map(|r| r.mask_policy().lambda_s), Some(48));
    assert_eq!(spec.encode(), files["message-refresh-spec"]);
    let g = Graph::decode(&files["message-refresh-graph"]).unwrap();
    assert_eq!(g.encode(), files["message-refresh-graph"]);
    let r = refresh::RefreshRequest::decode(&files["message-refresh-request"]).unwrap();
    assert_eq!(r.encode(), files["message-refresh-request"]);
    let r = refresh::RefreshReply::decode(&files["message-refresh-reply"]).unwrap();
    assert_eq!(r.encode(), files["message-refresh-reply"]);
}

/// Every field of the gRPC schema as `message.field number type`, one per
/// line in file order: what decides the protobuf wire format (comments,
/// spacing and option lines do not), so renumbering or retyping a field
/// shows here.
fn grpc_fields() -> String {
    let proto = include_str!("../proto/hecloud.proto");
    let mut scopes: Vec<String> = Vec::new();
    let mut out = String::new();
    for line in proto.lines() {
        let line = line.split("//").next().unwrap().trim();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["message" | "enum" | "oneof" | "service", name, "{}"] => {
                out += &format!("{name} {{}}\n");
            }
            ["message" | "enum" | "oneof" | "service", name, "{"] => scopes.push(name.into()),
            ["}"] => {
                scopes.pop();
            }
            _ if line.ends_with(';') && line.contains('=') && !scopes.is_empty() => {
                let (decl, number) = line.trim_end_matches(';').split_once('=').unwrap();
                let decl: Vec<&str> = decl.split_whitespace().collect();
                let (field, ty) = decl.split_last().unwrap();
                let scope = scopes.join(".");
                out += &format!("{scope}.{field} {} {}\n", number.trim(), ty.join(" "));
            }
            _ if line.starts_with("rpc ") => out += &format!("{line}\n"),
            _ => {}
        }
    }
    out
}

#[test]
fn grpc_schema_is_frozen() {
    let files = golden();
    let stored = String::from_utf8(files["grpc-fields"].clone()).unwrap();
    let now = grpc_fields();
    assert!(
        now.lines().count() > 50,
        "the schema summary parsed:\n{now}"
    );
    assert!(
        stored == now,
        "gRPC schema changed:\n--- stored\n{stored}\n--- now\n{now}"
    );
}

#[test]
fn objects_decode_and_encode_back_byte_for_byte() {
    let files = golden();
    let sp = session_params();
    for (name, kind) in OBJECTS {
        let bytes = &files[name];
        let obj = sp
            .decode(kind, bytes)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(obj.kind(), kind, "{name}");
        assert!(&obj.to_bytes() == bytes, "{name}: encoding changed");
        let (d, _) = sp.describe(kind, bytes).unwrap();
        assert_eq!(d.size as usize, bytes.len(), "{name}");
        assert_eq!(
            payload_kind(bytes),
            Some(kind),
            "{name}: kind read from the header"
        );
    }
    // Not objects: a secret key is never uploaded, messages are not payloads.
    for name in [
        "ckks-secret-key",
        "tfhe-client-key",
        "message-spec",
        "message-job",
    ] {
        assert_eq!(payload_kind(&files[name]), None, "{name}");
    }
    let bit = sp.decode(ObjectKind::TfheBit, &files["tfhe-bit"]).unwrap();
    assert!(
        bit.to_bytes() == files["tfhe-bit"],
        "tfhe-bit: encoding changed"
    );
}

#[test]
fn ckks_objects_keep_their_meaning() {
    let files = golden();
    let params = ckks_params();
    let rlwe = params.rlwe();
    let sp = session_params();
    let sk = SecretKey::import_bytes(rlwe, &files["ckks-secret-key"]).unwrap();
    let dec = Decryptor::new(&sk);
    let encoder = Encoder::new(&params);
    let open = |ct: &Ciphertext| encoder.decode_real(&dec.decrypt(ct).unwrap()).unwrap();
    let ct = |name: &str| match sp.decode(ObjectKind::CkksCiphertext, &files[name]).unwrap() {
        Object::CkksCiphertext(c) => c,
        other => panic!("{name} decoded as {:?}", other.kind()),
    };
    let fresh = ct("ckks-ciphertext");
    assert_close(&open(&fresh), &MESSAGE, "ckks-ciphertext");
    assert_close(&open(&ct("ckks-ciphertext-seeded")), &MESSAGE, "seeded");
    let Object::CkksPlaintext(pt) = sp
        .decode(ObjectKind::CkksPlaintext, &files["ckks-plaintext"])
        .unwrap()
    else {
        panic!("plaintext")
    };
    assert_close(&encoder.decode_real(&pt).unwrap(), &MESSAGE, "plaintext");

    // The public key encrypts to the stored secret key.
    let Object::CkksPublicKey(pk) = sp
        .decode(ObjectKind::CkksPublicKey, &files["ckks-public-key"])
        .unwrap()
    else {
        panic!("public key")
    };
    let again = Encryptor::new(rlwe).encrypt_pk(&pk, &pt).unwrap();
    assert_close(&open(&again), &MESSAGE, "public key");

    // The relinearization key squares, the Galois key rotates by one slot.
    let Object::CkksRelinKey(relin) = sp
        .decode(ObjectKind::CkksRelinKey, &files["ckks-relin-key"])
        .unwrap()
    else {
        panic!("relin key")
    };
    let Object::CkksGaloisKey(gk) = sp
        .decode(ObjectKind::CkksGaloisKey, &files["ckks-galois-key"])
        .unwrap()
    else {
        panic!("galois key")
    };
    let mut galois = GaloisKeys::new();
    galois.insert(*gk);
    let ev = Evaluator::new(
        &params,
        EvaluationKeys {
            relin: Some(*relin),
            galois,
        },
    );
    let squares: Vec<f64> = MESSAGE.iter().map(|x| x * x).collect();
    assert_close(
        &open(&ev.mul_relin_rescale(&fresh, &fresh).unwrap()),
        &squares,
        "relin key",
    );
    let rotated = open(&ev.rotate(&fresh, 1).unwrap());
    assert_close(&rotated[..3], &MESSAGE[1..], "galois key");
}

#[test]
fn tfhe_objects_keep_their_meaning() {
    let files = golden();
    let sp = session_params();
    let ck: tfhe::shortint::ClientKey = unversion(&files["tfhe-client-key"]).unwrap();
    let key = hecloud_protocol::object::tfhe_key_id(&ck).unwrap();
    let Object::TfheUint(u, k) = sp
        .decode(ObjectKind::TfheUint, &files["tfhe-uint"])
        .unwrap()
    else {
        panic!("tfhe-uint")
    };
    assert_eq!(k, key);
    let (value, width) = TFHE_UINT;
    assert_eq!(u.width(), width);
    let got = u
        .bits()
        .iter()
        .enumerate()
        .map(|(i, b)| (ck.decrypt(b.ciphertext()) as u128) << i)
        .sum::<u128>();
    assert_eq!(got, value);
    let Object::TfheBit(b, k) = sp.decode(ObjectKind::TfheBit, &files["tfhe-bit"]).unwrap() else {
        panic!("tfhe-bit")
    };
    assert_eq!(k, key);
    assert_eq!(ck.decrypt(b.ciphertext()), TFHE_BIT as u64);
}
