//! Every way a graph is refused before it runs, each with its typed error.

use std::sync::Arc;

use hecloud_ckks::{CkksParameters, params::test_literal};
use hecloud_protocol::validate::{BOOTSTRAP_SECONDS, MAX_CIRCUIT_BITS, MAX_GRAPH_CIRCUIT_BITS};
use hecloud_protocol::{
    Capabilities, Graph, Op, Relation, ValidationError, ValidationLimits, ValueType,
    graph::MAX_NODES, validate, validate_with_limits,
};
use hecloud_rlwe::serial::HEADER_LEN;

fn params() -> Arc<CkksParameters> {
    CkksParameters::new_insecure_for_tests(test_literal(10, 3), 45).unwrap()
}

/// Bytes of one serialized polynomial at `level`: N residues per prime at
/// the prime's bit length.
fn poly_bytes(p: &CkksParameters, level: usize) -> u64 {
    (0..=level)
        .map(|i| 1024 * u64::from(64 - (p.q_f64(i) as u64).leading_zeros()) / 8)
        .sum()
}

fn ct(p: &CkksParameters, level: usize) -> ValueType {
    ValueType::CkksCiphertext {
        level,
        scale: p.default_scale(),
        degree: 1,
    }
}

fn full_caps(p: &Arc<CkksParameters>) -> Capabilities {
    Capabilities::ckks(p)
        .with_relin_key()
        .with_rotations(&[1, 2, 4, -1])
        .with_conjugation()
        .with_tfhe_server_key()
}

/// One-input graph `f(x)` with output "y".
fn unary(f: impl FnOnce(&mut Graph, u32) -> u32) -> Graph {
    let mut g = Graph::new();
    let x = g.input(0);
    let y = f(&mut g, x);
    g.output("y", y);
    g
}

/// `rescale(x · y)` of inputs 0 and 1.
fn rescaled_product(g: &mut Graph) -> u32 {
    let x = g.input(0);
    let y = g.input(1);
    let m = g.mul(x, y);
    g.rescale(m)
}

#[test]
fn a_good_graph_passes_with_exact_levels_scales_and_costs() {
    let p = params();
    let caps = full_caps(&p);
    let mut g = Graph::new();
    let m = rescaled_product(&mut g);
    let h = g.constant(0.5);
    let h = g.mul(m, h); // non-integer constant: one level, scale kept
    let r = g.rotate_and_sum(h, 4);
    g.output("r", r);
    let v = validate(&g, &caps, &[ct(&p, 3), ct(&p, 3)]).unwrap();
    let ValueType::CkksCiphertext {
        level,
        scale,
        degree,
    } = v.node_type(r).unwrap().clone()
    else {
        panic!()
    };
    assert_eq!((level, degree), (1, 1));
    let want = p.default_scale() * p.default_scale() / p.q_f64(3);
    assert!((scale / want - 1.0).abs() < 1e-12);
    let c = v.cost();
    assert_eq!(c.key_switches, 1 + 2); // relinearization, rotations by 1 and 2
    assert_eq!(c.rescales, 2);
    assert_eq!(c.bootstraps, 0);
    assert_eq!(c.nodes, 7);
    assert!(c.est_seconds > 0.0);
    assert_eq!(c.output_bytes, HEADER_LEN as u64 + 2 * poly_bytes(&p, 1));
}

#[test]
fn structure_errors() {
    let p = params();
    let caps = full_caps(&p);
    let inputs = [ct(&p, 3)];

    // No outputs.
    let mut g = Graph::new();
    g.input(0);
    assert_eq!(
        validate(&g, &caps, &inputs).unwrap_err(),
        ValidationError::NoOutputs
    );

    // Dangling operand.
    let g = unary(|g, x| g.add(x, 7));
    assert!(matches!(
        validate(&g, &caps, &inputs).unwrap_err(),
        ValidationError::DanglingOperand {
            node: 1,
            operand: 7,
            ..
        }
    ));

    // Input past the job's inputs.
    let g = unary(|g, _| g.input(3));
    assert!(matches!(
        validate(&g, &caps, &inputs).unwrap_err(),
        ValidationError::MissingInput {
            index: 3,
            count: 1,
            ..
        }
    ));

    // A cycle: 1 -> 2 -> 1.
    let mut g = Graph::new();
    let x = g.input(0);
    g.nodes.push(Op::Add(x, 2));
    g.nodes.push(Op::Add(1, x));
    g.output("y", 2);
    let e = validate(&g, &caps, &inputs).unwrap_err();
    assert!(
        matches!(e, ValidationError::Cycle { node } if node == 1 || node == 2),
        "{e}"
    );
    // A self-loop.
    let mut g = Graph::new();
    g.input(0);
    g.nodes.push(Op::Neg(1));
    g.output("y", 1);
    assert_eq!(
        validate(&g, &caps, &inputs).unwrap_err(),
        ValidationError::Cycle { node: 1 }
    );

    // Outputs: unknown node, duplicate name, a node named twice (each
    // output is an object of its own: a thousand names of one ciphertext
    // would be a thousand copies), empty name.
    let mut g = unary(|_, x| x);
    g.output("z", 9);
    assert!(
        matches!(validate(&g, &caps, &inputs).unwrap_err(), ValidationError::BadOutput { name, .. } if name == "z")
    );
    let mut g = unary(|_, x| x);
    g.output("y", 0);
    assert!(matches!(
        validate(&g, &caps, &inputs).unwrap_err(),
        ValidationError::BadOutput { .. }
    ));
    let mut g = unary(|_, x| x);
    g.output("again", 0);
    assert!(
        matches!(validate(&g, &caps, &inputs).unwrap_err(), ValidationError::BadOutput { name, reason } if name == "again" && reason.contains("already an output"))
    );
    let mut g = Graph::new();
    let x = g.input(0);
    g.output("", x);
    assert!(matches!(
        validate(&g, &caps, &inputs).unwrap_err(),
        ValidationError::BadOutput { .. }
    ));
    // A clear constant is not an output object.
    let g = unary(|g, _| g.constant(1.0));
    assert!(matches!(
        validate(&g, &caps, &inputs).unwrap_err(),
        ValidationError::BadOutput { .. }
    ));

    // Too many nodes.
    let mut g = Graph::new();
    for _ in 0..=MAX_NODES {
        g.input(0);
    }
    g.output("y", 0);
    assert!(matches!(
        validate(&g, &caps, &inputs).unwrap_err(),
        ValidationError::TooLarge { what: "nodes", .. }
    ));
}

#[test]
fn type_mismatches() {
    let p = params();
    let caps = full_caps(&p);
    let u8t = ValueType::Uint { width: 8 };
    let inputs = [ct(&p, 3), u8t.clone(), ValueType::Uint { width: 16 }];
    let check = |g: &Graph| {
        let e = validate(g, &caps, &inputs).unwrap_err();
        assert!(
            matches!(e, ValidationError::TypeMismatch { .. }),
            "{e:?} for {g:?}"
        );
        e.to_string()
    };
    // CKKS op on an encrypted integer.
    let mut g = Graph::new();
    let (x, u) = (g.input(0), g.input(1));
    let s = g.add(x, u);
    g.output("s", s);
    let msg = check(&g);
    assert!(msg.contains("8-bit encrypted integer"), "{msg}");
    // Integer circuit on a CKKS ciphertext.
    let mut g = Graph::new();
    let (x, u) = (g.input(0), g.input(1));
    let s = g.int_compare(x, u, Relation::Lt);
    g.output("s", s);
    check(&g);
    // Integers of different widths.
    let mut g = Graph::new();
    let (a, b) = (g.input(1), g.input(2));
    let s = g.int_max(a, b);
    g.output("s", s);
    check(&g);
    // Two constants cannot be added (no ciphertext).
    let mut g = Graph::new();
    g.input(0);
    let (c, d) = (g.constant(1.0), g.constant(2.0));
    let s = g.add(c, d);
    g.output("s", s);
    check(&g);
    // Rotating a degree-2 ciphertext.
    let deg2 = [ValueType::CkksCiphertext {
        level: 3,
        scale: p.default_scale(),
        degree: 2,
    }];
    let g = unary(|g, x| g.rotate(x, 1));
    assert!(matches!(
        validate(&g, &caps, &deg2).unwrap_err(),
        ValidationError::TypeMismatch { .. }
    ));
}

#[test]
fn exhausted_levels() {
    let p = params();
    let caps = full_caps(&p);
    // Rescale at level 0.
    let g = unary(|g, x| g.rescale(x));
    assert!(matches!(
        validate(&g, &caps, &[ct(&p, 0)]).unwrap_err(),
        ValidationError::LevelsExhausted {
            level: 0,
            need: 1,
            ..
        }
    ));
    // Four products by 0.5 on three levels: the fourth fails.
    let g = unary(|g, x| {
        let c = g.constant(0.5);
        let mut y = x;
        for _ in 0..4 {
            y = g.mul(y, c);
        }
        y
    });
    let e = validate(&g, &caps, &[ct(&p, 3)]).unwrap_err();
    assert!(
        matches!(e, ValidationError::LevelsExhausted { node: 5, .. }),
        "{e:?}"
    );
    // Multiply-rescale down to level 0, then one more product: its scale
    // 2^90 no longer fits the 60-bit modulus.
    let g = unary(|g, x| {
        let mut y = x;
        for _ in 0..4 {
            let m = g.mul(y, y);
            y = g.rescale(m);
        }
        y
    });
    let e = validate(&g, &caps, &[ct(&p, 3)]).unwrap_err();
    assert!(
        matches!(
            e,
            ValidationError::ScaleOverflow {
                node: 7,
                level: 0,
                ..
            }
        ),
        "{e:?}"
    );
    // A non-integer constant product needs a level.
    let g = unary(|g, x| {
        let c = g.constant(0.25);
        g.mul(x, c)
    });
    assert!(matches!(
        validate(&g, &caps, &[ct(&p, 0)]).unwrap_err(),
        ValidationError::LevelsExhausted { .. }
    ));
    // …an integer one does not.
    let g = unary(|g, x| {
        let c = g.constant(-3.0);
        g.mul(x, c)
    });
    assert!(validate(&g, &caps, &[ct(&p, 0)]).is_ok());
    // A degree-7 polynomial needs ⌈log2 8⌉ = 3 levels.
    let g = unary(|g, x| g.chebyshev(x, vec![0.1; 8], -1.0, 1.0));
    assert!(matches!(
        validate(&g, &caps, &[ct(&p, 2)]).unwrap_err(),
        ValidationError::LevelsExhausted { need: 3, .. }
    ));
    assert!(validate(&g, &caps, &[ct(&p, 3)]).is_ok());
    let p4 = CkksParameters::new_insecure_for_tests(test_literal(10, 4), 45).unwrap();
    let v = validate(&g, &Capabilities::ckks(&p4).with_relin_key(), &[ct(&p4, 4)]).unwrap();
    assert!(v.cost().key_switches >= 4);
}

#[test]
fn mismatched_scales() {
    let p = params();
    let caps = full_caps(&p);
    // x·x (scale Δ², not rescaled) + x (scale Δ).
    let g = unary(|g, x| {
        let sq = g.mul(x, x);
        g.add(sq, x)
    });
    let e = validate(&g, &caps, &[ct(&p, 3)]).unwrap_err();
    assert!(
        matches!(e, ValidationError::ScaleMismatch { node: 2, left, right, .. } if (left - 90.0).abs() < 0.01 && (right - 45.0).abs() < 0.01),
        "{e:?}"
    );
    assert!(e.to_string().contains("rescale"));
    // A plaintext input at another scale.
    let mut g = Graph::new();
    let (x, pt) = (g.input(0), g.input(1));
    let s = g.sub(x, pt);
    g.output("s", s);
    let pt_t = ValueType::CkksPlaintext {
        level: 3,
        scale: p.default_scale() * 2.0,
    };
    assert!(matches!(
        validate(&g, &caps, &[ct(&p, 3), pt_t]).unwrap_err(),
        ValidationError::ScaleMismatch { .. }
    ));
    // Rescaling a fresh ciphertext leaves a scale of about 1: the message is lost.
    let g = unary(|g, x| g.rescale(x));
    assert!(matches!(
        validate(&g, &caps, &[ct(&p, 3)]).unwrap_err(),
        ValidationError::ScaleUnderflow { node: 1, .. }
    ));
    // A polynomial of an unrescaled product: its intermediate scales
    // (2^135 after the first square) outgrow the modulus and the range of
    // constants, refused rather than computed wrong.
    let g = unary(|g, x| {
        let sq = g.mul(x, x);
        g.chebyshev(sq, vec![0.5, 0.25, 0.125, 0.0625], -1.0, 1.0)
    });
    let e = validate(&g, &caps, &[ct(&p, 3)]).unwrap_err();
    assert!(
        matches!(
            e,
            ValidationError::ScaleOverflow { node: 2, .. }
                | ValidationError::InvalidArgument { node: 2, .. }
        ),
        "{e}"
    );
    // Products without rescaling until the scale outgrows the modulus.
    let g = unary(|g, x| {
        let a = g.mul(x, x);
        let b = g.mul(a, a);
        g.mul(b, b)
    });
    assert!(matches!(
        validate(&g, &caps, &[ct(&p, 3)]).unwrap_err(),
        ValidationError::ScaleOverflow { .. }
    ));
}

#[test]
fn missing_keys() {
    let p = params();
    let x = [ct(&p, 3)];
    let none = Capabilities::ckks(&p);
    // Relinearization key for a product of ciphertexts.
    let g = unary(|g, x| g.mul(x, x));
    assert!(matches!(
        validate(&g, &none, &x).unwrap_err(),
        ValidationError::MissingRelinKey { node: 1, .. }
    ));
    // …but not for a product with a clear vector.
    let g2 = unary(|g, x| {
        let v = g.plain(vec![1.0, 2.0]);
        g.mul(x, v)
    });
    assert!(validate(&g2, &none, &x).is_ok());
    // Galois keys: rotation by 3 with keys for 1, 2, 4.
    let caps = Capabilities::ckks(&p).with_rotations(&[1, 2, 4]);
    let g = unary(|g, x| g.rotate(x, 3));
    let e = validate(&g, &caps, &x).unwrap_err();
    assert!(
        matches!(&e, ValidationError::MissingGaloisKey { what, .. } if what == "rotation by 3"),
        "{e:?}"
    );
    // A rotation by a multiple of the slot count is the identity: no key needed.
    let g = unary(|g, x| g.rotate(x, 512));
    assert_eq!(validate(&g, &caps, &x).unwrap().cost().key_switches, 0);
    // Rotate-and-sum over 16 slots needs the key of 8.
    let g = unary(|g, x| g.rotate_and_sum(x, 16));
    assert!(matches!(
        validate(&g, &caps, &x).unwrap_err(),
        ValidationError::MissingGaloisKey { element, .. } if element == hecloud_rlwe::keys::galois_element_for_rotation(8, 1024)
    ));
    let g = unary(|g, x| g.rotate_and_sum(x, 8));
    assert!(validate(&g, &caps, &x).is_ok());
    // Conjugation key.
    let g = unary(|g, x| g.conjugate(x));
    assert!(matches!(
        validate(&g, &caps, &x).unwrap_err(),
        ValidationError::MissingGaloisKey { what, .. } if what == "conjugation"
    ));
    // TFHE server key.
    let mut g = Graph::new();
    let (a, b) = (g.input(0), g.input(1));
    let s = g.int_sum(vec![a, b], true);
    g.output("s", s);
    let u = ValueType::Uint { width: 8 };
    assert!(matches!(
        validate(&g, &Capabilities::default(), &[u.clone(), u.clone()]).unwrap_err(),
        ValidationError::MissingServerKey { .. }
    ));
    // No CKKS parameters at all.
    let g = unary(|g, x| g.neg(x));
    assert!(matches!(
        validate(&g, &Capabilities::tfhe(), &x).unwrap_err(),
        ValidationError::SchemeUnavailable { scheme: "CKKS", .. }
    ));
}

#[test]
fn drop_level_keeps_the_scale_and_shrinks_the_output() {
    let p = params();
    let caps = full_caps(&p);
    let mut g = Graph::new();
    let m = rescaled_product(&mut g);
    // Decoding reads q0 and q1 at this scale, checked by q2.
    let d = g.drop_level(m, 2);
    g.output("d", d);
    let v = validate(&g, &caps, &[ct(&p, 3), ct(&p, 3)]).unwrap();
    let ValueType::CkksCiphertext { level, scale, .. } = v.node_type(d).unwrap().clone() else {
        panic!()
    };
    let want = p.default_scale() * p.default_scale() / p.q_f64(3);
    assert_eq!(level, 2);
    assert_eq!(p.checked_decoding_level(scale, 2), 2);
    assert!((scale / want - 1.0).abs() < 1e-12);
    assert_eq!(
        v.cost().output_bytes,
        HEADER_LEN as u64 + 2 * poly_bytes(&p, 2)
    );
    // The server finds the same level on its own.
    let mut g = Graph::new();
    let m = rescaled_product(&mut g);
    let d = g.drop_for_decryption(m);
    g.output("d", d);
    let v = validate(&g, &caps, &[ct(&p, 3), ct(&p, 3)]).unwrap();
    assert!(matches!(
        v.node_type(d).unwrap(),
        ValueType::CkksCiphertext { level: 2, .. }
    ));
    // Lower, a value beyond the headroom would decode as another number:
    // refused, naming the lowest level that keeps a check.
    for low in [0, 1] {
        let mut g = Graph::new();
        let m = rescaled_product(&mut g);
        let d = g.drop_level(m, low);
        g.output("d", d);
        let e = validate(&g, &caps, &[ct(&p, 3), ct(&p, 3)]).unwrap_err();
        assert!(
            matches!(&e, ValidationError::InvalidArgument { reason, .. }
                if reason.contains("level 2 is the lowest")),
            "{e:?}"
        );
    }
    // No level can be gained.
    let e = validate(&unary(|g, x| g.drop_level(x, 4)), &caps, &[ct(&p, 3)]).unwrap_err();
    assert!(
        matches!(e, ValidationError::InvalidArgument { .. }),
        "{e:?}"
    );
    // An unrescaled product does not fit the level-0 modulus.
    let e = validate(
        &unary(|g, x| {
            let m = g.mul(x, x);
            g.drop_level(m, 0)
        }),
        &caps,
        &[ct(&p, 3)],
    )
    .unwrap_err();
    assert!(matches!(e, ValidationError::ScaleOverflow { .. }), "{e:?}");
    // Only ciphertexts have levels to drop.
    let e = validate(
        &unary(|g, _| {
            let c = g.constant(1.0);
            g.drop_level(c, 0)
        }),
        &caps,
        &[ct(&p, 3)],
    )
    .unwrap_err();
    assert!(matches!(e, ValidationError::TypeMismatch { .. }), "{e:?}");
}

#[test]
fn invalid_arguments() {
    let p = params();
    let caps = full_caps(&p);
    let x = [ct(&p, 3)];
    let bad = |g: Graph| {
        let e = validate(&g, &caps, &x).unwrap_err();
        assert!(
            matches!(e, ValidationError::InvalidArgument { .. }),
            "{e:?}"
        );
    };
    bad(unary(|g, x| g.rotate_and_sum(x, 3)));
    bad(unary(|g, x| g.rotate_and_sum(x, 1024)));
    bad(unary(|g, x| g.chebyshev(x, vec![], -1.0, 1.0)));
    bad(unary(|g, x| g.chebyshev(x, vec![1.0, f64::NAN], -1.0, 1.0)));
    bad(unary(|g, x| g.chebyshev(x, vec![1.0, 2.0], 1.0, -1.0)));
    bad(unary(|g, x| {
        let v = g.plain(vec![0.0; 513]);
        g.add(x, v)
    }));
    bad(unary(|g, x| {
        let c = g.constant(f64::INFINITY);
        g.add(x, c)
    }));
    // A plaintext below the ciphertext's level.
    let mut g = Graph::new();
    let (c, pt) = (g.input(0), g.input(1));
    let s = g.add(c, pt);
    g.output("s", s);
    let pt_t = ValueType::CkksPlaintext {
        level: 1,
        scale: p.default_scale(),
    };
    assert!(matches!(
        validate(&g, &caps, &[ct(&p, 3), pt_t]).unwrap_err(),
        ValidationError::InvalidArgument { .. }
    ));
    // Integer sums: empty, too wide.
    let u = ValueType::Uint { width: 1024 };
    let mut g = Graph::new();
    g.input(0);
    let s = g.int_sum(vec![], false);
    g.output("s", s);
    assert!(matches!(
        validate(&g, &caps, std::slice::from_ref(&u)).unwrap_err(),
        ValidationError::InvalidArgument { .. }
    ));
    let mut g = Graph::new();
    let a = g.input(0);
    let s = g.int_sum(vec![a, a], true);
    g.output("s", s);
    assert!(matches!(
        validate(&g, &caps, &[u]).unwrap_err(),
        ValidationError::InvalidArgument { .. }
    ));
    // An impossible input level.
    let g = unary(|g, x| g.neg(x));
    assert!(matches!(
        validate(&g, &caps, &[ct(&p, 9)]).unwrap_err(),
        ValidationError::InvalidArgument { .. }
    ));
}

#[test]
fn integer_circuit_costs_match_the_clear_engine() {
    let caps = Capabilities::tfhe();
    let u = ValueType::Uint { width: 8 };
    let mut g = Graph::new();
    let xs: Vec<u32> = (0..4).map(|i| g.input(i)).collect();
    let s = g.int_sum(xs.clone(), true);
    let c = g.int_compare(xs[0], xs[1], Relation::Ge);
    let m = g.int_min(xs[2], xs[3]);
    g.output("sum", s);
    g.output("ge", c);
    g.output("min", m);
    let v = validate(&g, &caps, &vec![u; 4]).unwrap();
    assert_eq!(v.node_type(s), Some(&ValueType::Uint { width: 10 }));
    assert_eq!(v.node_type(c), Some(&ValueType::Bit));
    assert_eq!(v.node_type(m), Some(&ValueType::Uint { width: 8 }));
    // The same circuits on the clear engine, counted directly.
    use hecloud_circuits::circuits::{self, AdderKind, SumMode};
    use hecloud_circuits::{ClearEngine, EncryptedUint, with_cost};
    let e = ClearEngine::new();
    let ins: Vec<_> = (0..4)
        .map(|v| EncryptedUint::encrypt_u128(&e, v, 8).unwrap())
        .collect();
    let (_, a) = with_cost(&e, || {
        circuits::sum(&e, &ins, SumMode::Full, AdderKind::Auto).unwrap()
    });
    let (_, b) = with_cost(&e, || {
        circuits::compare(&e, &ins[0], &ins[1], circuits::Relation::Ge).unwrap()
    });
    let (_, c) = with_cost(&e, || circuits::min(&e, &ins[2], &ins[3]).unwrap());
    assert_eq!(
        v.cost().bootstraps,
        a.bootstraps + b.bootstraps + c.bootstraps
    );
    assert!(v.cost().bootstraps > 0);
    assert_eq!(v.cost().key_switches, 0);
}

/// Nodes no output depends on are neither checked nor scheduled: checking
/// them would take time no cost bound charges (a BGV comparison's
/// interpolation, 150 ms at bound 1024, for each of up to 65536 nodes).
#[test]
fn dead_nodes_are_neither_checked_nor_scheduled() {
    let p = params();
    let caps = full_caps(&p);
    let mut g = Graph::new();
    let x = g.input(0);
    let _dead = g.rotate(x, 1);
    let y = g.neg(x);
    g.output("y", y);
    let v = validate(&g, &caps, &[ct(&p, 3)]).unwrap();
    assert_eq!(v.schedule(), &[0, 2]);
    assert_eq!(v.cost().key_switches, 0);
    // Not even an error in one: here a rotation without its key, which
    // refuses the graph once an output depends on it.
    let mut g2 = g.clone();
    g2.nodes[1] = Op::Rotate(x, 3);
    let v = validate(&g2, &caps, &[ct(&p, 3)]).unwrap();
    assert_eq!(v.schedule(), &[0, 2]);
    g2.output("dead", 1);
    assert!(matches!(
        validate(&g2, &caps, &[ct(&p, 3)]),
        Err(ValidationError::MissingGaloisKey { .. })
    ));
}

/// `nodes` full sums, each over all of `n` inputs of `width` bits, each an output.
fn many_sums(nodes: usize, n: usize, width: usize) -> (Graph, Vec<ValueType>) {
    let mut g = Graph::new();
    let xs: Vec<u32> = (0..n as u32).map(|i| g.input(i)).collect();
    for k in 0..nodes {
        let s = g.int_sum(xs.clone(), true);
        g.output(format!("s{k}"), s);
    }
    (g, vec![ValueType::Uint { width }; n])
}

#[test]
fn a_costly_graph_is_refused_before_its_circuits_run() {
    // 200 sums of 4096 operands of 64 bits: about 3.5 minutes of CPU to cost
    // exactly, and days of TFHE.
    let (g, types) = many_sums(200, 4096, 64);
    let caps = Capabilities::tfhe();
    let limits = ValidationLimits {
        max_est_seconds: 3600.0,
    };
    let t = std::time::Instant::now();
    let e = validate_with_limits(&g, &caps, &types, &limits).unwrap_err();
    let took = t.elapsed();
    assert!(took.as_secs_f64() < 2.0, "refused after {took:?}");
    let ValidationError::TooCostly {
        est_seconds,
        max_seconds,
        upper_bound,
    } = e
    else {
        panic!("{e:?}")
    };
    assert!(upper_bound);
    assert_eq!(max_seconds, 3600.0);
    assert!(est_seconds > 3600.0, "{est_seconds}");
    // Refused as soon as the bound passed the limit: a few nodes in.
    assert!(est_seconds < 2.0 * 3600.0, "{est_seconds}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("{est_seconds:.1}")) && msg.contains("3600.0"),
        "{msg}"
    );
    // Without a limit, the cap on the graph's circuit bits refuses it, as fast.
    let t = std::time::Instant::now();
    let e = validate(&g, &caps, &types).unwrap_err();
    assert!(
        t.elapsed().as_secs_f64() < 2.0,
        "refused after {:?}",
        t.elapsed()
    );
    assert!(
        matches!(e, ValidationError::TooLarge { len, max, .. } if max == MAX_GRAPH_CIRCUIT_BITS && len > max),
        "{e:?}"
    );
}

#[test]
fn a_cheap_graph_passes_a_limit_with_the_unlimited_estimate() {
    let caps = Capabilities::tfhe();
    let u = ValueType::Uint { width: 16 };
    let mut g = Graph::new();
    let xs: Vec<u32> = (0..12).map(|i| g.input(i)).collect();
    let s = g.int_sum(xs.clone(), true);
    let c = g.int_compare(xs[0], xs[1], Relation::Lt);
    let m = g.int_max(xs[2], xs[3]);
    g.output("s", s);
    g.output("c", c);
    g.output("m", m);
    let types = vec![u.clone(); 12];
    let free = validate(&g, &caps, &types).unwrap();
    let limited = validate_with_limits(
        &g,
        &caps,
        &types,
        &ValidationLimits {
            max_est_seconds: 3600.0,
        },
    )
    .unwrap();
    assert_eq!(limited.cost(), free.cost());
    let est = free.cost().est_seconds;
    assert!(est > 0.0);
    assert!((est - free.cost().bootstraps as f64 * BOOTSTRAP_SECONDS).abs() < 1e-9);
    assert_eq!(
        validate_with_limits(&g, &caps, &types, &ValidationLimits::default())
            .unwrap()
            .cost(),
        free.cost()
    );
    // At the upper bound of its cost it passes; below its estimate, it is
    // refused with the figures.
    use hecloud_circuits::circuits::{AdderKind, SumMode};
    use hecloud_circuits::{BitEngine, ClearEngine, bound};
    let t = ClearEngine::new().threads();
    let upper = (bound::sum_bootstraps(12, 16, SumMode::Full, AdderKind::Auto, t).unwrap()
        + bound::compare_bootstraps(16, t).unwrap()
        + bound::min_max_bootstraps(16, t).unwrap()) as f64
        * BOOTSTRAP_SECONDS;
    assert!(upper >= est && upper < 1.5 * est, "{upper} vs {est}");
    assert!(
        validate_with_limits(
            &g,
            &caps,
            &types,
            &ValidationLimits {
                max_est_seconds: upper + 1e-9
            }
        )
        .is_ok()
    );
    let e = validate_with_limits(
        &g,
        &caps,
        &types,
        &ValidationLimits {
            max_est_seconds: est / 2.0,
        },
    )
    .unwrap_err();
    assert!(
        matches!(e, ValidationError::TooCostly { est_seconds, max_seconds, .. }
            if est_seconds > max_seconds && max_seconds == est / 2.0),
        "{e:?}"
    );
    // A NaN limit fails closed; a graph without circuits costs nothing.
    assert!(matches!(
        validate_with_limits(
            &g,
            &caps,
            &types,
            &ValidationLimits {
                max_est_seconds: f64::NAN
            }
        ),
        Err(ValidationError::TooCostly { .. })
    ));
    let mut pass = Graph::new();
    let x = pass.input(0);
    pass.output("x", x);
    let zero = ValidationLimits {
        max_est_seconds: 0.0,
    };
    assert!(validate_with_limits(&pass, &caps, &[ValueType::Bit], &zero).is_ok());
    // Dead nodes do not count against the limit.
    let mut dead = pass.clone();
    let a = dead.input(1);
    let b = dead.input(2);
    dead.int_sum(vec![a, b], false);
    let types = [ValueType::Bit, u.clone(), u.clone()];
    assert!(validate_with_limits(&dead, &caps, &types, &zero).is_ok());
}

#[test]
fn identical_circuits_are_costed_once_and_capped_in_total() {
    let caps = Capabilities::tfhe();
    // The most a graph may hold: eight of the largest sums, all run at once
    // on the clear engine would take a second; costed once, a fraction.
    let largest = MAX_CIRCUIT_BITS / 64;
    let nodes = MAX_GRAPH_CIRCUIT_BITS / MAX_CIRCUIT_BITS;
    let (one, types) = many_sums(1, largest, 64);
    let (all, _) = many_sums(nodes, largest, 64);
    let one = validate(&one, &caps, &types).unwrap();
    let all = validate(&all, &caps, &types).unwrap();
    assert_eq!(all.cost().bootstraps, nodes as u64 * one.cost().bootstraps);
    assert_eq!(
        all.cost().bootstrap_depth,
        nodes as u64 * one.cost().bootstrap_depth
    );
    // One more operand anywhere is over the cap.
    let (mut over, mut types) = many_sums(nodes, largest, 64);
    let a = over.input(largest as u32);
    let b = over.input(largest as u32);
    let s = over.int_compare(a, b, Relation::Le);
    over.output("one_more", s);
    types.push(ValueType::Uint { width: 64 });
    assert!(matches!(
        validate(&over, &caps, &types).unwrap_err(),
        ValidationError::TooLarge { max, .. } if max == MAX_GRAPH_CIRCUIT_BITS
    ));
}

/// A constant or vector added at a level whose modulus cannot hold it at
/// the operand's scale (it would wrap around and decrypt as another value:
/// x + 2^20 at level 0 came back as 0.625) is refused, as is a polynomial
/// whose constant term lands there, or an integer factor that takes a
/// value of 1 there; just below the bound passes.
#[test]
fn values_beyond_the_modulus_at_their_level_are_refused() {
    let p = params();
    let caps = full_caps(&p);
    let log_q0 = p.rlwe().q_at(0).unwrap().log_q();
    // Q_0 / 2 at the default scale (below the decoding headroom there).
    let cap = (log_q0 - 1.0).exp2() / p.default_scale();
    assert!(cap < (hecloud_ckks::DECODE_HEADROOM_BITS - 1.0).exp2());
    for (c, ok) in [(0.9 * cap, true), (1.1 * cap, false), (-1.1 * cap, false)] {
        let add = unary(|g, x| {
            let k = g.constant(c);
            g.add(x, k)
        });
        let sub = unary(|g, x| {
            let v = g.plain(vec![0.5, c]);
            g.sub(x, v)
        });
        // An integer factor costs no level, so nothing would rescale the
        // product back below the modulus: x · k with |k| past the bound
        // wraps for every |x| ≥ 1.
        let mul = unary(|g, x| {
            let k = g.constant(c.round());
            g.mul(x, k)
        });
        for g in [add, sub, mul] {
            let r = validate(&g, &caps, &[ct(&p, 0)]);
            assert_eq!(r.is_ok(), ok, "{c}: {:?}", r.err());
            if !ok {
                assert!(
                    matches!(&r, Err(ValidationError::InvalidArgument { reason, .. }) if reason.contains("exceeds the modulus")),
                    "{r:?}"
                );
            }
            // One level up the same value fits.
            assert!(validate(&g, &caps, &[ct(&p, 1)]).is_ok());
        }
    }
    // T_0's coefficient of a degree-2 polynomial evaluated from level 2
    // lands at level 0.
    let poly = |c0: f64| {
        unary(|g, x| {
            g.push(Op::Chebyshev {
                input: x,
                coeffs: vec![c0, 0.0, 0.5],
                a: -1.0,
                b: 1.0,
            })
        })
    };
    assert!(validate(&poly(0.5 * cap), &caps, &[ct(&p, 2)]).is_ok());
    assert!(matches!(
        validate(&poly(2.0 * cap), &caps, &[ct(&p, 2)]),
        Err(ValidationError::InvalidArgument { .. })
    ));
}
