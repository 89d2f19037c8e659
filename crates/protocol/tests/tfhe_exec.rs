//! Integer circuits over TFHE through the whole server path: the server key
//! and the encrypted integers go through their payload bytes, the graph is
//! validated and executed, the outputs go back through bytes and are
//! decrypted by the client — checked against plaintext arithmetic on fresh
//! random inputs. TFHE is slow: one key generation and a handful of small
//! circuits. Mutated TFHE payloads are refused with typed errors.

use std::sync::atomic::{AtomicBool, Ordering};

use hecloud_circuits::{BitEngine, EncryptedUint, TfheEngine};
use hecloud_protocol::*;
use hecloud_rlwe::KeyId;
use rand_core::RngCore;

#[test]
fn tfhe_sum_compare_min_max_through_bytes() {
    let mut rng = hecloud_math::testing::rng();

    // Client: keys and inputs.
    let client = TfheEngine::generate();
    let key = object::tfhe_key_id(client.client_key().unwrap()).unwrap();
    let sk_bytes = Object::TfheServerKey(Box::new(client.server_key().clone()), key).to_bytes();
    const W: usize = 4;
    let vals: Vec<u128> = (0..3).map(|_| (rng.next_u32() % 16) as u128).collect();
    let payloads: Vec<Vec<u8>> = vals
        .iter()
        .map(|&v| {
            Object::TfheUint(EncryptedUint::encrypt_u128(&client, v, W).unwrap(), key).to_bytes()
        })
        .collect();

    eprintln!(
        "server key payload {} bytes, {W}-bit integer payload {} bytes",
        sk_bytes.len(),
        payloads[0].len()
    );

    // Server: session, objects, graph.
    let spec = SessionSpec {
        params: ParamSpec {
            ckks: None,
            tfhe: Some(TfheParamSpec::Message2Carry2),
        },
        tfhe_server_key: Some(ObjectId::of(&sk_bytes)),
        ..SessionSpec::default()
    };
    let sp = SessionParams::build(&spec.params, false).unwrap();
    let keys = SessionKeys::load(&spec, sp.clone(), |id| {
        (*id == ObjectId::of(&sk_bytes)).then(|| sk_bytes.clone())
    })
    .unwrap();
    let mut types = Vec::new();
    let mut inputs = Vec::new();
    for p in &payloads {
        let (d, obj) = sp.describe(ObjectKind::TfheUint, p).unwrap();
        assert_eq!(d.count as usize, W);
        types.push(value_type_of(&d).unwrap());
        inputs.push(obj);
    }
    let mut g = Graph::new();
    let x: Vec<u32> = (0..3).map(|i| g.input(i)).collect();
    let sum = g.int_sum(x.clone(), true);
    let lt = g.int_compare(x[0], x[1], Relation::Lt);
    let ge = g.int_compare(x[2], x[0], Relation::Ge);
    let mn = g.int_min(x[1], x[2]);
    let mx = g.int_max(x[0], x[2]);
    for (name, n) in [
        ("sum", sum),
        ("lt", lt),
        ("ge", ge),
        ("min", mn),
        ("max", mx),
    ] {
        g.output(name, n);
    }
    let v = validate(&g, &keys.capabilities(), &types).unwrap();
    assert!(v.cost().bootstraps > 0);
    let mut progress = 0;
    let out = execute(&v, &keys, &inputs, &AtomicBool::new(false), &mut |p| {
        progress = p.done
    })
    .unwrap();
    assert_eq!(progress, v.schedule().len());
    assert_eq!(keys.tfhe_key_id(), key);
    // Every output is under the session's client key.
    for (name, o) in &out {
        assert!(
            matches!(o, Object::TfheUint(_, k) | Object::TfheBit(_, k) if *k == key),
            "{name}"
        );
    }
    // An input under another client key (the id of another folder) is
    // refused before anything runs: it would compute garbage bits.
    let mut foreign = inputs.clone();
    let Object::TfheUint(u, _) = &inputs[2] else {
        unreachable!()
    };
    foreign[2] = Object::TfheUint(u.clone(), hecloud_rlwe::KeyId([9; 16]));
    let e = execute(&v, &keys, &foreign, &AtomicBool::new(false), &mut |_| {}).unwrap_err();
    assert!(
        matches!(&e, ExecError::InputMismatch { index: 2, reason } if reason.contains("key")),
        "{e}"
    );

    // The size estimate is exact for TFHE outputs.
    let sizes: u64 = out.iter().map(|(_, o)| o.to_bytes().len() as u64).sum();
    assert_eq!(v.cost().output_bytes, sizes);

    // Client: outputs back through bytes, decrypted.
    let back: Vec<Object> = out
        .iter()
        .map(|(_, o)| sp.decode(o.kind(), &o.to_bytes()).unwrap())
        .collect();
    let uint = |o: &Object| match o {
        Object::TfheUint(u, _) => u.decrypt_u128(&client).unwrap(),
        _ => panic!("not an integer"),
    };
    let bit = |o: &Object| match o {
        Object::TfheBit(b, _) => client.decrypt_bit(b).unwrap(),
        _ => panic!("not a bit"),
    };
    let (a, b, c) = (vals[0], vals[1], vals[2]);
    assert_eq!(uint(&back[0]), a + b + c, "sum of {vals:?}");
    assert_eq!(bit(&back[1]), a < b, "{a} < {b}");
    assert_eq!(bit(&back[2]), c >= a, "{c} >= {a}");
    assert_eq!(uint(&back[3]), b.min(c));
    assert_eq!(uint(&back[4]), a.max(c));
    assert!(matches!(&out[0].1, Object::TfheUint(u, _) if u.width() == W + 2));

    // Mutated payloads: a typed error or a well-formed object, never a panic.
    let bit_bytes = back[1].to_bytes();
    let mut refused = 0;
    for i in 0..300 {
        let mut m = bit_bytes.clone();
        match i % 3 {
            0 => {
                let k = (rng.next_u32() as usize) % m.len();
                m[k] ^= 1 << (rng.next_u32() % 8);
            }
            1 => m.truncate((rng.next_u32() as usize) % m.len()),
            _ => {
                // A huge length anywhere in the first 64 bytes.
                let k = (rng.next_u32() as usize) % 60;
                m[k..k + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            }
        }
        if sp.decode(ObjectKind::TfheBit, &m).is_err() {
            refused += 1;
        }
    }
    assert!(refused > 100, "{refused}");
    // The wrong kind, foreign parameters, a truncated server key.
    assert!(sp.decode(ObjectKind::TfheUint, &bit_bytes).is_err());
    assert!(matches!(
        SessionParams::build(&ParamSpec::default(), false)
            .unwrap()
            .decode(ObjectKind::TfheBit, &bit_bytes),
        Err(ObjectError::NoParameters { .. })
    ));
    assert!(
        sp.decode(ObjectKind::TfheServerKey, &sk_bytes[..sk_bytes.len() / 2])
            .is_err()
    );
    let mut bad_key = sk_bytes.clone();
    let mid = bad_key.len() / 3;
    bad_key[mid..mid + 64].fill(0xff);
    let _ = sp.decode(ObjectKind::TfheServerKey, &bad_key);
}

#[test]
fn a_cancel_raised_during_a_long_sum_stops_it_inside_the_node() {
    // Server side only: a fresh key pair, its server key in the session.
    let client = TfheEngine::generate();
    let spec = SessionSpec {
        params: ParamSpec {
            ckks: None,
            tfhe: Some(TfheParamSpec::Message2Carry2),
        },
        ..SessionSpec::default()
    };
    let sp = SessionParams::build(&spec.params, false).unwrap();
    let keys = SessionKeys::from_parts(
        sp,
        Default::default(),
        Some(TfheEngine::from_keys(None, client.server_key().clone())),
    )
    .unwrap();
    // The key is counted at about its stored size (the server's key cache
    // budgets by it).
    let stored = Object::TfheServerKey(Box::new(client.server_key().clone()), KeyId::NONE)
        .to_bytes()
        .len() as f64;
    let counted = keys.memory_bytes() as f64;
    assert!(
        (0.9..1.1).contains(&(counted / stored)),
        "{counted} vs {stored}"
    );
    // 64 operands of 8 bits: a few hundred bootstraps over tens of layers
    // (seconds on two cores) behind 64 input nodes.
    const N: usize = 64;
    const W: usize = 8;
    let inputs: Vec<Object> = (0..N)
        .map(|i| {
            Object::TfheUint(
                EncryptedUint::encrypt_u128(&client, (i % 256) as u128, W).unwrap(),
                KeyId::NONE,
            )
        })
        .collect();
    let types: Vec<ValueType> = inputs.iter().map(|o| o.value_type().unwrap()).collect();
    let mut g = Graph::new();
    let xs: Vec<u32> = (0..N as u32).map(|i| g.input(i)).collect();
    let s = g.int_sum(xs, true);
    g.output("sum", s);
    let v = validate(&g, &keys.capabilities(), &types).unwrap();
    let full = *v.cost();
    assert!(full.bootstrap_depth >= 4, "{full:?}");
    let total = N + 1;

    // Raised by the progress hook after the last input node: seen before the
    // sum starts, no bootstrap runs.
    let cancel = AtomicBool::new(false);
    let before = keys.tfhe_stats().unwrap();
    let r = execute(&v, &keys, &inputs, &cancel, &mut |p| {
        if p.done == N {
            cancel.store(true, Ordering::Relaxed);
        }
    });
    assert_eq!(r.unwrap_err(), ExecError::Cancelled { done: N, total });
    assert_eq!(keys.tfhe_stats().unwrap(), before);

    // Raised by a watcher once the sum's first layer is done: the node stops
    // at its next layer (or bootstrap) instead of running to its end.
    let cancel = AtomicBool::new(false);
    let finished = AtomicBool::new(false);
    let mut reported = 0;
    let r = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !finished.load(Ordering::SeqCst) {
                if keys.tfhe_stats().unwrap().depth > before.depth {
                    cancel.store(true, Ordering::SeqCst);
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        });
        let r = execute(&v, &keys, &inputs, &cancel, &mut |p| reported = p.done);
        finished.store(true, Ordering::SeqCst);
        r
    });
    assert_eq!(r.unwrap_err(), ExecError::Cancelled { done: N, total });
    assert_eq!(
        reported, N,
        "no progress is reported for the cancelled node"
    );
    let done = keys.tfhe_stats().unwrap() - before;
    eprintln!("cancelled after {done:?} of {full:?}");
    assert!(done.depth >= 1, "{done:?}");
    assert!(
        done.depth < full.bootstrap_depth && done.bootstraps < full.bootstraps,
        "the node ran to its end: {done:?} of {full:?}"
    );
}
