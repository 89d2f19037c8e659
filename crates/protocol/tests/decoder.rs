//! Randomized decoder test: random, truncated, bit-flipped and
//! oversized-length bytes for every message and CKKS object payload give a
//! typed error (or a well-formed value), never a panic — and no decode
//! allocates much more than its input (a counting allocator checks the
//! largest single allocation made while decoding).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

mod common;
use common::{messages, sample_graph};

use hecloud_ckks::{CkksParameters, Encoder, KeySet, params::test_literal};
use hecloud_protocol::*;
use rand_chacha::ChaCha20Rng;
use rand_core::RngCore;

struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|m| m.set(m.get().max(layout.size())));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LARGEST.try_with(|m| m.set(m.get().max(new_size)));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` and returns its result with the largest allocation it made.
fn largest_alloc<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|m| m.set(0));
    let r = f();
    (r, LARGEST.with(|m| m.get()))
}

/// Decodes `bytes` as every message type; returns how many accepted them.
fn decode_all(bytes: &[u8]) -> usize {
    [
        SessionSpec::decode(bytes).is_ok(),
        ObjectDescriptor::decode(bytes).is_ok(),
        JobSubmission::decode(bytes).is_ok(),
        JobStatus::decode(bytes).is_ok(),
        JobResult::decode(bytes).is_ok(),
        Graph::decode(bytes).is_ok(),
        hecloud_protocol::refresh::RefreshRequest::decode(bytes).is_ok(),
        hecloud_protocol::refresh::RefreshReply::decode(bytes).is_ok(),
    ]
    .iter()
    .filter(|&&b| b)
    .count()
}

fn mutate(rng: &mut ChaCha20Rng, b: &[u8]) -> Vec<u8> {
    let mut m = b.to_vec();
    let r = |rng: &mut ChaCha20Rng, n: usize| (rng.next_u32() as usize) % n.max(1);
    match rng.next_u32() % 6 {
        0 => {
            for _ in 0..1 + r(rng, 4) {
                let k = r(rng, m.len());
                if let Some(x) = m.get_mut(k) {
                    *x ^= 1 << (rng.next_u32() % 8);
                }
            }
        }
        1 => m.truncate(r(rng, m.len())),
        2 => {
            // An oversized length or count anywhere.
            if m.len() >= 4 {
                let k = r(rng, m.len() - 3);
                let big = [u32::MAX, u32::MAX / 2, 1 << 20, 65_537][r(rng, 4)];
                m[k..k + 4].copy_from_slice(&big.to_le_bytes());
            }
        }
        3 => {
            let k = r(rng, m.len());
            m.insert(k, rng.next_u32() as u8);
        }
        4 => {
            let n = r(rng, 64);
            m.extend((0..n).map(|_| rng.next_u32() as u8));
        }
        _ => {
            // Random bytes behind a valid envelope prefix.
            let keep = r(rng, 9).min(m.len());
            let n = r(rng, 256);
            m.truncate(keep);
            m.extend((0..n).map(|_| rng.next_u32() as u8));
        }
    }
    m
}

#[test]
fn messages_round_trip_and_every_prefix_is_refused() {
    // Seeds for the fuzz target (its first byte selects the decoder).
    if let Ok(dir) = std::env::var("HECLOUD_FUZZ_CORPUS") {
        for (name, bytes) in messages() {
            let mut seed = vec![0u8];
            seed.extend_from_slice(&bytes);
            std::fs::write(format!("{dir}/{name}"), seed).unwrap();
        }
        let mut w = hecloud_protocol::codec::Writer::new();
        w.u8(1);
        sample_graph().write(&mut w);
        std::fs::write(format!("{dir}/graph-body"), w.into_bytes()).unwrap();
    }
    for (name, bytes) in messages() {
        assert_eq!(decode_all(&bytes), 1, "{name} decodes as exactly one kind");
        for cut in 0..bytes.len() {
            assert_eq!(decode_all(&bytes[..cut]), 0, "{name} cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode_all(&longer), 0, "{name} with a trailing byte");
    }
    // Named refusals.
    let spec = &messages()[0].1;
    let mut m = spec.clone();
    m[0] = b'X';
    assert_eq!(SessionSpec::decode(&m), Err(DecodeError::BadMagic));
    let mut m = spec.clone();
    m[4] = 2;
    assert!(matches!(
        SessionSpec::decode(&m),
        Err(DecodeError::UnsupportedVersion { found: 2, .. })
    ));
    assert!(matches!(
        JobSubmission::decode(spec),
        Err(DecodeError::WrongKind { .. })
    ));
    let mut m = spec.clone();
    m[7] = 1;
    assert!(matches!(
        SessionSpec::decode(&m),
        Err(DecodeError::InvalidField { field: "flags", .. })
    ));
    // A BGV operation tag is refused with its reason.
    let mut g = Graph::new().encode();
    g.truncate(8);
    g.extend_from_slice(&1u32.to_le_bytes());
    g.push(90);
    g.extend_from_slice(&[0; 8]);
    let e = Graph::decode(&g).unwrap_err();
    assert!(e.to_string().contains("BGV"), "{e}");
}

#[test]
fn random_and_mutated_bytes_never_panic_or_overallocate() {
    let mut rng = hecloud_math::testing::rng();
    let seed = hecloud_math::testing::seed();
    let msgs = messages();
    let mut accepted = 0;
    let mut worst = 0.0f64;
    for i in 0..60_000 {
        let bytes = if i % 10 == 0 {
            let n = (rng.next_u32() % 300) as usize;
            (0..n).map(|_| rng.next_u32() as u8).collect()
        } else {
            let (_, b) = &msgs[i % msgs.len()];
            let mut m = mutate(&mut rng, b);
            if rng.next_u32().is_multiple_of(4) {
                m = mutate(&mut rng, &m);
            }
            m
        };
        let (n, largest) = largest_alloc(|| decode_all(&bytes));
        accepted += n;
        let ratio = largest as f64 / (bytes.len() + 64) as f64;
        worst = worst.max(ratio);
        assert!(
            largest <= 64 * (bytes.len() + 64),
            "seed {seed}: {largest} bytes allocated decoding {} bytes",
            bytes.len()
        );
    }
    eprintln!("accepted {accepted}, worst allocation/input ratio {worst:.1}");
}

#[test]
fn ckks_payloads_refuse_mutations_with_typed_errors() {
    let mut rng = hecloud_math::testing::rng();
    let params = CkksParameters::new_insecure_for_tests(test_literal(10, 2), 45).unwrap();
    let ks = KeySet::generate(&params, &[1], false).unwrap();
    let enc = Encoder::new(&params);
    let pt = enc
        .encode_real(&[0.5, 0.25], 2, params.default_scale())
        .unwrap();
    let ct = ks.encrypt(&pt).unwrap();
    let ct_sk = ks.encrypt_sk(&pt).unwrap();
    let ev = ks.evaluation_keys();
    let payloads: Vec<(ObjectKind, Vec<u8>)> = vec![
        (ObjectKind::CkksCiphertext, ct.to_bytes()),
        (ObjectKind::CkksCiphertext, ct_sk.to_bytes()),
        (ObjectKind::CkksPlaintext, pt.to_bytes()),
        (ObjectKind::CkksPublicKey, ks.public_key().to_bytes()),
        (ObjectKind::CkksRelinKey, ev.relin.unwrap().to_bytes(true)),
        (
            ObjectKind::CkksGaloisKey,
            ev.galois
                .get(ev.galois.elements().next().unwrap())
                .unwrap()
                .to_bytes(false),
        ),
        (ObjectKind::CkksSwitchingKey, {
            let mut kg = hecloud_rlwe::KeyGenerator::new(params.rlwe());
            let sparse = kg.gen_sparse_secret_key(16).unwrap();
            kg.gen_switching_key_between(ks.secret_key(), &sparse)
                .unwrap()
                .to_bytes(true, 16)
        }),
    ];
    let sp = SessionParams {
        ckks: Some(params.clone()),
        tfhe: None,
        bgv: None,
    };
    for (kind, bytes) in &payloads {
        let (d, _) = sp.describe(*kind, bytes).unwrap();
        assert_eq!(d.size as usize, bytes.len());
        assert!(sp.decode(ObjectKind::TfheBit, bytes).is_err());
        // Serializing with the id in one pass gives the same bytes and id.
        let (again, id) = sp.decode(*kind, bytes).unwrap().to_bytes_with_id();
        assert_eq!((&again, id), (bytes, ObjectId::of(bytes)), "{kind:?}");
    }
    // Another parameter set refuses them.
    let other = CkksParameters::new_insecure_for_tests(test_literal(10, 3), 45).unwrap();
    let osp = SessionParams {
        ckks: Some(other),
        tfhe: None,
        bgv: None,
    };
    assert!(matches!(
        osp.decode(ObjectKind::CkksCiphertext, &payloads[0].1),
        Err(ObjectError::Rlwe(_))
    ));
    let mut refused = 0;
    let mut tried = 0;
    for i in 0..3000 {
        let (kind, bytes) = &payloads[i % payloads.len()];
        // Mutations mostly in the header (the body is residues).
        let mut m = bytes.clone();
        match i % 4 {
            0 => {
                let k = (rng.next_u32() % 64) as usize;
                m[k] ^= 1 << (rng.next_u32() % 8);
            }
            1 => m.truncate((rng.next_u32() as usize) % m.len()),
            2 => {
                let k = (rng.next_u32() % 61) as usize;
                m[k..k + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            }
            _ => {
                let k = (rng.next_u32() as usize) % m.len();
                m[k] ^= 0x80;
            }
        }
        tried += 1;
        let (r, largest) = largest_alloc(|| sp.decode(*kind, &m));
        if r.is_err() {
            refused += 1;
        }
        // Keys expand seeds into full polynomials: bounded by the parameters, not the bytes.
        assert!(largest <= 4 * params.rlwe().qp_basis().len() * params.n() * 8 + 4 * m.len());
    }
    assert!(refused * 2 > tried, "{refused} of {tried}");
}

/// The fuzz target's body on 10^6 mutated inputs without libFuzzer (for
/// machines without a nightly toolchain): decoders, validation of whatever
/// graph decodes, CKKS payloads. Run with
/// `cargo test -p hecloud-protocol --release --test decoder -- --ignored`.
#[test]
#[ignore]
fn a_million_mutated_inputs() {
    let mut rng = hecloud_math::testing::rng();
    let params = CkksParameters::new_insecure_for_tests(test_literal(10, 3), 45).unwrap();
    let caps = Capabilities::ckks(&params)
        .with_relin_key()
        .with_rotations(&[1, 2, 4, -1])
        .with_conjugation()
        .with_tfhe_server_key();
    let ct = ValueType::CkksCiphertext {
        level: 3,
        scale: params.default_scale(),
        degree: 1,
    };
    let u8t = ValueType::Uint { width: 8 };
    let inputs = vec![ct.clone(), ct, u8t.clone(), u8t.clone(), u8t.clone(), u8t];
    validate(&sample_graph(), &caps, &inputs).unwrap();
    let graph_body = {
        let mut w = hecloud_protocol::codec::Writer::new();
        sample_graph().write(&mut w);
        w.into_bytes()
    };
    let msgs = messages();
    let start = std::time::Instant::now();
    let (mut graphs, mut valid) = (0, 0);
    let n = 1_000_000;
    for i in 0..n {
        let base = if i % 2 == 0 {
            &graph_body
        } else {
            &msgs[i % msgs.len()].1
        };
        let mut m = mutate(&mut rng, base);
        for _ in 0..rng.next_u32() % 3 {
            m = mutate(&mut rng, &m);
        }
        decode_all(&m);
        let mut r = hecloud_protocol::codec::Reader::new(&m);
        if let Ok(g) = Graph::read(&mut r) {
            graphs += 1;
            if validate(&g, &caps, &inputs).is_ok() {
                valid += 1;
            }
        }
    }
    eprintln!(
        "{n} inputs in {:.1} s: {graphs} decoded as graphs, {valid} of them valid, no panic",
        start.elapsed().as_secs_f64()
    );
    assert!(graphs > 0 && valid > 0);
}
