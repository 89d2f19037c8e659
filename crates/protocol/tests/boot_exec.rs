//! Bootstrap nodes in graphs: a computation deeper than its parameters runs
//! on the server alone, the planner chooses between bootstrapping and
//! refresh, the session's bootstrapping part travels as objects and a spec,
//! and every missing piece is refused with a reason.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use hecloud_ckks::boot::{BootPreset, Bootstrapper, EncapsulationKeys};
use hecloud_ckks::refresh::MaskPolicy;
use hecloud_ckks::{CkksParameters, Encoder, KeySet};
use hecloud_protocol::object::PayloadCheck;
use hecloud_protocol::*;

struct Boot {
    params: Arc<CkksParameters>,
    boot: Bootstrapper,
    keys: KeySet,
    encapsulation: EncapsulationKeys,
}

/// The insecure test preset with its circuit's keys.
fn boot_setup() -> Boot {
    boot_setup_with(2)
}

/// The test preset's layout with `residual` levels of 40 bits above q₀.
fn boot_setup_with(residual: usize) -> Boot {
    let (mut literal, log_scale, circuit) = BootPreset::TestN12.literal();
    literal
        .log_q
        .splice(1..3, std::iter::repeat_n(40, residual));
    let params = CkksParameters::new_insecure_for_tests(literal, log_scale).unwrap();
    let boot = Bootstrapper::new(&params, circuit).unwrap();
    let keys = KeySet::generate_at_levels(&params, &boot.rotation_levels(), true).unwrap();
    let h = boot.literal().ephemeral_hamming.unwrap();
    let encapsulation = EncapsulationKeys::generate(&params, keys.secret_key(), h).unwrap();
    Boot {
        params,
        boot,
        keys,
        encapsulation,
    }
}

fn session(b: &Boot, refresh: bool, prefer: bool) -> SessionKeys {
    let sp = SessionParams {
        ckks: Some(b.params.clone()),
        tfhe: None,
        bgv: None,
    };
    let mut keys = SessionKeys::from_parts(sp, b.keys.evaluation_keys(), None).unwrap();
    if refresh {
        keys = keys
            .with_refresh(
                Some(b.keys.public_key().clone()),
                None,
                MaskPolicy::default(),
            )
            .unwrap();
    }
    keys.with_bootstrap(*b.boot.literal(), Some(b.encapsulation.clone()), prefer)
        .unwrap()
}

fn count(g: &Graph, name: &str) -> usize {
    g.nodes.iter().filter(|op| op.name() == name).count()
}

/// A fresh encryption at the level bootstrapping leaves (where a
/// bootstrappable session's values live).
fn input(b: &Boot, x: &[f64]) -> Object {
    let pt = Encoder::new(&b.params)
        .encode_real(x, b.boot.output_level(), b.params.default_scale())
        .unwrap();
    Object::CkksCiphertext(b.keys.encrypt(&pt).unwrap())
}

/// Six squarings on three levels: refused as it stands; with the
/// bootstraps the planner inserts (no key holder anywhere) it runs, as
/// predicted, to x^64 against the clear.
#[test]
fn the_planner_bootstraps_a_deep_graph_with_no_key_holder() {
    let b = boot_setup();
    let keys = session(&b, false, false);
    let mut rng = hecloud_math::testing::sampler();
    let x: Vec<f64> = (0..b.params.slots())
        .map(|_| 0.95 + 0.05 * (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
        .chain([1.0, 0.95])
        .take(b.params.slots())
        .collect();
    let inputs = [input(&b, &x)];
    let types = vec![inputs[0].value_type().unwrap()];
    let caps = keys.capabilities();
    let g = common::squares(6);
    let e = validate(&g, &caps, &types).unwrap_err();
    assert!(matches!(e, ValidationError::ScaleOverflow { .. }), "{e}");
    let planned = insert_refreshes(&g, &caps, &types, &ValidationLimits::UNLIMITED).unwrap();
    // Levels 2 → 0, bootstrap to 2, 2 → 0, bootstrap, 2 → 0.
    assert_eq!(count(&planned, "bootstrap"), 2, "{planned:?}");
    assert_eq!(count(&planned, "refresh"), 0);
    let v = validate(&planned, &caps, &types).unwrap();
    assert!(v.cost().key_switches >= 2 * b.boot.key_switches() as u64);
    let out = common::execute_as_predicted(&v, &keys, &inputs);
    let Object::CkksCiphertext(ct) = &out[0].1 else {
        panic!("not a CKKS ciphertext")
    };
    let got = Encoder::new(&b.params)
        .decode_real(&b.keys.decrypt(ct).unwrap())
        .unwrap();
    // These slots are close to a constant, so their energy sits in one
    // coefficient, where EvalMod's sine is furthest from the identity:
    // each bootstrap is low by a relative (2π·2^-8)²/6 ≈ 1.0e-4 (the
    // arcsine correction would remove it), and the errors grow with every
    // later squaring: ×16 for the first, ×4 for the second.
    let errors: Vec<f64> = x
        .iter()
        .zip(&got)
        .map(|(v, y)| (v.powi(64) - y).abs() / v.powi(64))
        .collect();
    let worst = errors.iter().copied().fold(0.0, f64::max);
    let mean = errors.iter().sum::<f64>() / errors.len() as f64;
    assert!(
        worst < 3e-3 && mean < 2.5e-3,
        "relative error: worst {worst}, mean {mean}"
    );
}

/// With a key holder (a refresh part) the planner refreshes, unless the
/// session prefers bootstrapping, or the residual chain is too short for a
/// refresh mask's headroom (then it bootstraps).
#[test]
fn the_planner_refreshes_where_a_key_holder_is_and_bootstraps_when_told() {
    for (residual, prefer, refreshes) in [(6, false, true), (6, true, false), (2, false, false)] {
        let b = boot_setup_with(residual);
        let inputs = [input(&b, &[0.9; 8])];
        let types = vec![inputs[0].value_type().unwrap()];
        let g = common::squares(12);
        let caps = session(&b, true, prefer).capabilities();
        let planned = insert_refreshes(&g, &caps, &types, &ValidationLimits::UNLIMITED).unwrap();
        let what = format!("{residual} levels, prefer {prefer}: {planned:?}");
        assert_eq!(count(&planned, "refresh") > 0, refreshes, "{what}");
        assert_eq!(count(&planned, "bootstrap") > 0, !refreshes, "{what}");
        validate(&planned, &caps, &types).unwrap();
    }
}

#[test]
fn bootstrap_nodes_and_parts_are_refused_with_reasons() {
    let b = boot_setup();
    let inputs = [input(&b, &[0.5])];
    let types = vec![inputs[0].value_type().unwrap()];
    let mut g = Graph::new();
    let x = g.input(0);
    let y = g.bootstrap(x);
    g.output("y", y);
    // No bootstrapping part in the session.
    let sp = SessionParams {
        ckks: Some(b.params.clone()),
        tfhe: None,
        bgv: None,
    };
    let bare = SessionKeys::from_parts(sp.clone(), b.keys.evaluation_keys(), None).unwrap();
    let e = validate(&g, &bare.capabilities(), &types).unwrap_err();
    assert!(
        matches!(&e, ValidationError::BootstrapRefused { reason, .. } if reason.contains("no bootstrapping part")),
        "{e}"
    );
    // A product not rescaled: its scale is above what the circuit takes.
    let keys = session(&b, false, false);
    let mut g = Graph::new();
    let x = g.input(0);
    let m = g.mul(x, x);
    let y = g.bootstrap(m);
    g.output("y", y);
    let e = validate(&g, &keys.capabilities(), &types).unwrap_err();
    assert!(
        matches!(&e, ValidationError::BootstrapRefused { reason, .. } if reason.contains("scale")),
        "{e}"
    );
    // Missing rotation keys, encapsulation keys of another weight or none.
    let few = KeySet::generate(&b.params, &[1], true).unwrap();
    let partial = SessionKeys::from_parts(sp.clone(), few.evaluation_keys(), None).unwrap();
    assert!(matches!(
        partial.with_bootstrap(*b.boot.literal(), Some(b.encapsulation.clone()), false),
        Err(SessionError::Bootstrap(_))
    ));
    let h = b.encapsulation.hamming();
    let other = EncapsulationKeys::generate(&b.params, b.keys.secret_key(), h + 1).unwrap();
    for enc in [Some(other), None] {
        let keys = SessionKeys::from_parts(sp.clone(), b.keys.evaluation_keys(), None).unwrap();
        assert!(matches!(
            keys.with_bootstrap(*b.boot.literal(), enc, false),
            Err(SessionError::Bootstrap(_))
        ));
    }
}

/// The bootstrapping part as a client uploads it: two switching-key
/// objects (checked as they arrive), a spec naming them, and the session's
/// keys loaded from the store.
#[test]
fn a_bootstrapping_session_travels_as_objects_and_a_spec() {
    let b = boot_setup();
    let (literal, log_scale, circuit) = BootPreset::TestN12.literal();
    let mut store: HashMap<ObjectId, Vec<u8>> = HashMap::new();
    let mut put = |bytes: Vec<u8>| {
        let id = ObjectId::of(&bytes);
        store.insert(id, bytes);
        id
    };
    let ev = b.keys.evaluation_keys();
    let relin_key = Some(put(ev.relin.as_ref().unwrap().to_bytes(true)));
    let galois_keys = ev
        .galois
        .elements()
        .map(|g| put(ev.galois.get(g).unwrap().to_bytes(true)))
        .collect();
    let [down, up] = b.encapsulation.key_bytes(true);
    for bytes in [&down, &up] {
        let mut check = PayloadCheck::new(
            ObjectKind::CkksSwitchingKey,
            bytes.len() as u64,
            vec![b.params.rlwe().clone()],
        );
        check.push(bytes).unwrap();
        check.finish().unwrap();
        let mut short = PayloadCheck::new(
            ObjectKind::CkksSwitchingKey,
            bytes.len() as u64 - 1,
            vec![b.params.rlwe().clone()],
        );
        let _ = short.push(&bytes[..bytes.len() - 1]);
        assert!(short.finish().is_err());
    }
    let spec = SessionSpec {
        params: ParamSpec {
            ckks: Some(CkksParamSpec::from_literal(&literal, log_scale)),
            tfhe: None,
        },
        relin_key,
        galois_keys,
        bootstrap: Some(BootstrapSpec {
            circuit,
            to_sparse_key: Some(put(down.clone())),
            from_sparse_key: Some(put(up.clone())),
            prefer_over_refresh: true,
        }),
        ..SessionSpec::default()
    };
    let bytes = spec.encode();
    let back = SessionSpec::decode(&bytes).unwrap();
    assert_eq!(back, spec);
    let params = SessionParams::build(&back.params, true).unwrap();
    let loaded = SessionKeys::load(&back, params.clone(), |id| store.get(id).cloned()).unwrap();
    let caps = loaded.capabilities().bootstrap.unwrap();
    assert_eq!(caps.output_level, b.boot.output_level());
    assert!(caps.prefer_over_refresh);
    // The two halves swapped: refused when the keys load.
    let mut swapped = back.clone();
    let bs = swapped.bootstrap.as_mut().unwrap();
    std::mem::swap(&mut bs.to_sparse_key, &mut bs.from_sparse_key);
    assert!(matches!(
        SessionKeys::load(&swapped, params.clone(), |id| store.get(id).cloned()),
        Err(SessionError::Bootstrap(_))
    ));
    // One half named without the other, or not stored.
    let mut half = back.clone();
    half.bootstrap.as_mut().unwrap().to_sparse_key = None;
    assert!(matches!(
        SessionKeys::load(&half, params.clone(), |id| store.get(id).cloned()),
        Err(SessionError::Bootstrap(_))
    ));
    let mut missing = back.clone();
    missing.bootstrap.as_mut().unwrap().to_sparse_key = Some(ObjectId([7; 32]));
    assert!(matches!(
        SessionKeys::load(&missing, params, |id| store.get(id).cloned()),
        Err(SessionError::MissingObject(_))
    ));
    // A spec announcing a bootstrapping part that is cut short.
    assert!(SessionSpec::decode(&bytes[..bytes.len() - 1]).is_err());
    // Sparse slots travel too.
    let mut sparse = spec.clone();
    sparse.bootstrap.as_mut().unwrap().circuit.slots = Some(512);
    assert_eq!(SessionSpec::decode(&sparse.encode()).unwrap(), sparse);
    // The fit at the integers is the top bit of the degree's field: the
    // same spec with the whole-interval fit differs in that bit alone
    // (specs written before the fit existed keep their encoding and id),
    // and both round trip.
    assert!(
        spec.bootstrap
            .as_ref()
            .unwrap()
            .circuit
            .eval_mod_at_integers
    );
    let mut interval = spec.clone();
    interval
        .bootstrap
        .as_mut()
        .unwrap()
        .circuit
        .eval_mod_at_integers = false;
    let interval_bytes = interval.encode();
    assert_eq!(SessionSpec::decode(&interval_bytes).unwrap(), interval);
    assert_eq!(interval_bytes.len(), bytes.len());
    let differ: Vec<usize> = (0..bytes.len())
        .filter(|&i| bytes[i] != interval_bytes[i])
        .collect();
    assert_eq!(differ.len(), 1);
    assert_eq!(bytes[differ[0]] ^ interval_bytes[differ[0]], 0x80);
    // So does an arcsine correction, as four bytes after the rest: a spec
    // without one keeps its encoding, and a written 0 is refused (one
    // encoding, one id, per spec).
    let mut arcsine = spec.clone();
    arcsine.bootstrap.as_mut().unwrap().circuit.arcsine_degree = 5;
    let arcsine_bytes = arcsine.encode();
    assert_eq!(SessionSpec::decode(&arcsine_bytes).unwrap(), arcsine);
    assert_eq!(arcsine_bytes[..bytes.len()], bytes[..]);
    assert_eq!(arcsine_bytes[bytes.len()..], 5u32.to_le_bytes());
    let mut zero = bytes.clone();
    zero.extend_from_slice(&[0; 4]);
    assert!(matches!(
        SessionSpec::decode(&zero),
        Err(DecodeError::InvalidField {
            field: "arcsine degree",
            ..
        })
    ));
}

/// A session bootstrapping 8 sparse slots packs its vectors in 8 slots: the
/// plaintext operands the server encodes for a graph are packed alike
/// (x + v and x · v decode right under the client's sparse encoder, where
/// the full-slot encoding decoded x + v as x + v/64), and vectors or slot
/// sums beyond 8 slots are refused.
#[test]
fn a_sparse_slot_session_encodes_its_vectors_in_its_slots() {
    let params = BootPreset::TestN12.params().unwrap();
    let n = 8;
    let circuit = hecloud_ckks::boot::BootstrapLiteral {
        slots: Some(n),
        cts_levels: 3,
        stc_levels: 3,
        ..BootPreset::TestN12.literal().2
    };
    let boot = Bootstrapper::new(&params, circuit).unwrap();
    let keys = KeySet::generate_at_levels(&params, &boot.rotation_levels(), true).unwrap();
    let h = circuit.ephemeral_hamming.unwrap();
    let encapsulation = EncapsulationKeys::generate(&params, keys.secret_key(), h).unwrap();
    let sp = SessionParams {
        ckks: Some(params.clone()),
        tfhe: None,
        bgv: None,
    };
    let session = SessionKeys::from_parts(sp, keys.evaluation_keys(), None)
        .unwrap()
        .with_bootstrap(circuit, Some(encapsulation), false)
        .unwrap();
    let caps = session.capabilities();
    assert_eq!(caps.ckks_slots(), Some(n));

    let sparse = Encoder::with_slots(&params, n).unwrap();
    let x: Vec<f64> = (0..n).map(|i| i as f64 / 10.0 - 0.3).collect();
    let v: Vec<f64> = (0..n).map(|i| 0.5 - i as f64 / 16.0).collect();
    let level = boot.output_level();
    let ct = keys
        .encrypt(
            &sparse
                .encode_real(&x, level, params.default_scale())
                .unwrap(),
        )
        .unwrap();
    let mut g = Graph::new();
    let i = g.input(0);
    let pv = g.plain(v.clone());
    let sum = g.add(i, pv);
    let prod = g.mul(i, pv);
    let prod = g.rescale(prod);
    g.output("sum", sum);
    g.output("prod", prod);
    let inputs = [Object::CkksCiphertext(ct)];
    let types = [inputs[0].value_type().unwrap()];
    let valid = validate(&g, &caps, &types).unwrap();
    let out = common::execute_as_predicted(&valid, &session, &inputs);
    for (name, o) in &out {
        let Object::CkksCiphertext(c) = o else {
            panic!("{name}: {:?}", o.kind())
        };
        let got = sparse.decode_real(&keys.decrypt(c).unwrap()).unwrap();
        for k in 0..n {
            let want = if name == "sum" {
                x[k] + v[k]
            } else {
                x[k] * v[k]
            };
            assert!(
                (got[k] - want).abs() < 1e-4,
                "{name}[{k}]: {} vs {want}",
                got[k]
            );
        }
    }

    // Beyond 8 slots: a longer vector, a slot sum over 16.
    let long = {
        let mut g = Graph::new();
        let i = g.input(0);
        let pv = g.plain(vec![0.5; n + 1]);
        let y = g.add(i, pv);
        g.output("y", y);
        g
    };
    let wide_sum = {
        let mut g = Graph::new();
        let i = g.input(0);
        let y = g.rotate_and_sum(i, 2 * n as u32);
        g.output("y", y);
        g
    };
    for g in [long, wide_sum] {
        assert!(matches!(
            validate(&g, &caps, &types),
            Err(ValidationError::InvalidArgument { .. })
        ));
    }
}
