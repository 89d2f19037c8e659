//! Packed-bit BGV nodes (bits-in-slots numbers) through validation and
//! execution, against plain integers (num_bigint) on fresh random inputs
//! and named edge cases (0, 2^w − 1, equal values, width 2): each output
//! carrying exactly the level, factor and noise validation predicted. Then
//! the refusals, before anything runs: a depth the operands do not allow
//! (and the circuit itself does fail without a refresher one product
//! deeper), a row too short, bad widths, missing rotation or
//! relinearization keys; and the decoder on truncated or oversized
//! encodings.

mod common;

use hecloud_bgv::params::test_literal;
use hecloud_bgv::{BgvParameters, Encoder, KeySet};
use hecloud_circuits::packed::{self, slot_rotations};
use hecloud_math::testing::sampler;
use hecloud_protocol::*;
use num_bigint::BigUint;

const T: u64 = 65537;
/// The depth the test parameters admit: bits ops up to depth 6 run
/// without a refresh on 7 levels of 50-bit primes above q_0 (the last
/// level keeps the evaluator's minimum budget for the gates' additions).
const LEVELS: usize = 6;

struct Setup {
    ks: KeySet,
    enc: Encoder,
    keys: SessionKeys,
}

/// N = 2^11 (1024 slots per row), `levels` 50-bit primes above q_0, keys
/// for `rotations`.
fn setup_with(levels: usize, rotations: &[i64]) -> Setup {
    let params = BgvParameters::new_insecure_for_tests(test_literal(11, levels, T)).unwrap();
    let ks = KeySet::generate(&params, rotations, false).unwrap();
    Setup {
        enc: Encoder::new(&params),
        keys: common::bgv_session(&params, &ks),
        ks,
    }
}

fn setup() -> Setup {
    let n = 1 << 11;
    setup_with(LEVELS + 1, &slot_rotations(n))
}

impl Setup {
    fn encrypt(&self, v: &BigUint, w: usize) -> Object {
        let bits: Vec<u64> = (0..w as u64).map(|i| u64::from(v.bit(i))).collect();
        Object::BgvCiphertext(self.ks.encrypt(&self.enc.encode(&bits).unwrap()).unwrap())
    }

    fn slots(&self, o: &Object) -> Vec<u64> {
        let Object::BgvCiphertext(c) = o else {
            panic!("not a BGV ciphertext: {:?}", o.kind())
        };
        self.enc.decode(&self.ks.decrypt(c).unwrap()).unwrap()
    }

    /// The number in slots 0..w; every other slot must be 0.
    fn number(&self, o: &Object, w: usize) -> BigUint {
        let s = self.slots(o);
        let mut v = BigUint::default();
        for (i, &x) in s.iter().enumerate() {
            if i < w {
                assert!(x <= 1, "slot {i} holds {x}");
                v.set_bit(i as u64, x == 1);
            } else {
                assert_eq!(x, 0, "slot {i} above the width");
            }
        }
        v
    }

    /// A comparison's answer: slot w − 1, every other slot 0.
    fn answer(&self, o: &Object, w: usize) -> bool {
        let v = self.number(o, w);
        assert!(
            v == BigUint::default() || v == BigUint::from(1u32) << (w - 1),
            "{v:b}"
        );
        v != BigUint::default()
    }

    fn validate(&self, g: &Graph, inputs: &[Object]) -> Result<ValidatedGraph, ValidationError> {
        let types: Vec<ValueType> = inputs.iter().map(|o| o.value_type().unwrap()).collect();
        validate(g, &self.keys.capabilities(), &types)
    }

    /// Validates and runs `g`; every output must carry exactly the type
    /// validation predicted.
    fn run(&self, g: &Graph, inputs: Vec<Object>) -> Vec<(String, Object)> {
        let v = self.validate(g, &inputs).unwrap();
        assert!(v.cost().key_switches > 0 && v.cost().est_seconds > 0.0);
        common::execute_as_predicted(&v, &self.keys, &inputs)
    }
}

fn max_value(w: usize) -> BigUint {
    (BigUint::from(1u32) << w) - 1u32
}

fn random_value(w: usize) -> BigUint {
    let mut s = sampler();
    let mut v = BigUint::default();
    for i in 0..w as u64 {
        v.set_bit(i, s.uniform_mod(2) == 1);
    }
    v
}

/// Named edge pairs and two random ones.
fn pairs(w: usize) -> Vec<(BigUint, BigUint)> {
    let (zero, top) = (BigUint::default(), max_value(w));
    let r = random_value(w);
    vec![
        (zero.clone(), zero.clone()),
        (top.clone(), top.clone()),
        (zero.clone(), top.clone()),
        (top.clone(), zero.clone()),
        (r.clone(), r.clone()),
        (top.clone(), BigUint::from(1u32)),
        (random_value(w), random_value(w)),
        (random_value(w), random_value(w)),
    ]
}

#[test]
fn bits_ops_match_plain_integers() {
    let s = setup();
    // Depths: add 2 + ⌈log2(w − 1)⌉, lt 1 + ⌈log2 w⌉; all ≤ 6 here.
    for w in [2usize, 3, 5, 9, 16] {
        let modulus = BigUint::from(1u32) << w;
        for (a, b) in pairs(w) {
            let mut g = Graph::new();
            let (x, y) = (g.input(0), g.input(1));
            let add = g.bgv_bits_add(x, y, w as u32);
            let lt = g.bgv_bits_lt(x, y, w as u32);
            let gt = g.bgv_bits_gt(x, y, w as u32);
            let low = g.bgv_mod_switch(add, 0);
            for (name, node) in [("add", add), ("lt", lt), ("gt", gt), ("low", low)] {
                g.output(name, node);
            }
            let out = s.run(&g, vec![s.encrypt(&a, w), s.encrypt(&b, w)]);
            let want = (&a + &b) % &modulus;
            assert_eq!(s.number(&out[0].1, w), want, "w = {w}: {a} + {b}");
            assert_eq!(s.answer(&out[1].1, w), a < b, "w = {w}: {a} < {b}");
            assert_eq!(s.answer(&out[2].1, w), a > b, "w = {w}: {a} > {b}");
            assert_eq!(s.number(&out[3].1, w), want);
            let Object::BgvCiphertext(c) = &out[0].1 else {
                panic!()
            };
            assert_eq!(c.level(), LEVELS + 1 - packed::depth::add(w));
            assert_eq!(c.factor(), 1);
        }
    }
    // A comparison at width 32: depth 6.
    let w = 32;
    for (a, b) in pairs(w).into_iter().take(4) {
        let mut g = Graph::new();
        let (x, y) = (g.input(0), g.input(1));
        let lt = g.bgv_bits_lt(x, y, w as u32);
        g.output("lt", lt);
        let out = s.run(&g, vec![s.encrypt(&a, w), s.encrypt(&b, w)]);
        assert_eq!(s.answer(&out[0].1, w), a < b);
    }
}

#[test]
fn bits_sums_match_plain_integers() {
    let s = setup();
    // Sum of 3 at w ≤ 4 and of 4 at w = 2: depth ≤ 6.
    for (n, w) in [(3usize, 2usize), (3, 4), (4, 2)] {
        let modulus = BigUint::from(1u32) << w;
        let cases: Vec<Vec<BigUint>> = vec![
            vec![max_value(w); n],
            vec![BigUint::default(); n],
            (0..n).map(|_| random_value(w)).collect(),
            (0..n).map(|_| random_value(w)).collect(),
        ];
        for xs in cases {
            let mut g = Graph::new();
            let ins: Vec<u32> = (0..n as u32).map(|i| g.input(i)).collect();
            let sum = g.bgv_bits_sum(ins, w as u32);
            g.output("sum", sum);
            let out = s.run(&g, xs.iter().map(|v| s.encrypt(v, w)).collect());
            let want = xs.iter().fold(BigUint::default(), |acc, v| acc + v) % &modulus;
            assert_eq!(s.number(&out[0].1, w), want, "n = {n}, w = {w}: {xs:?}");
        }
    }
}

/// One product deeper than the parameters admit is refused, with the
/// depths named (what they admit runs: the other tests).
#[test]
fn too_deep_is_refused_before_running() {
    let s = setup();
    let (a, b) = (
        s.encrypt(&BigUint::from(5u32), 64),
        s.encrypt(&BigUint::from(9u32), 64),
    );
    for (w, op) in [(64u32, "lt"), (32, "add")] {
        let mut g = Graph::new();
        let (x, y) = (g.input(0), g.input(1));
        let node = if op == "lt" {
            g.bgv_bits_lt(x, y, w)
        } else {
            g.bgv_bits_add(x, y, w)
        };
        g.output("r", node);
        let need = if op == "lt" {
            packed::depth::lt(w as usize)
        } else {
            packed::depth::add(w as usize)
        };
        assert_eq!(need, LEVELS + 1);
        match s.validate(&g, &[a.clone(), b.clone()]).unwrap_err() {
            ValidationError::DepthExhausted {
                node: 2,
                need: n,
                available,
                ..
            } => assert_eq!((n, available), (need, LEVELS)),
            e => panic!("{e}"),
        }
    }
    // Operands already down the levels allow less: a product first.
    let mut g = Graph::new();
    let (x, y) = (g.input(0), g.input(1));
    let low = g.bgv_mod_switch(x, 3);
    let lt = g.bgv_bits_lt(low, y, 8); // depth 4 from level 3
    g.output("lt", lt);
    assert!(matches!(
        s.validate(&g, &[a.clone(), b.clone()]).unwrap_err(),
        ValidationError::DepthExhausted {
            node: 3,
            need: 4,
            available: 2,
            ..
        }
    ));
}

#[test]
fn bad_widths_rows_and_keys_are_refused() {
    let s = setup();
    let (a, b) = (
        s.encrypt(&BigUint::from(1u32), 2),
        s.encrypt(&BigUint::from(2u32), 2),
    );
    let graph = |f: &dyn Fn(&mut Graph, u32, u32) -> u32| {
        let mut g = Graph::new();
        let (x, y) = (g.input(0), g.input(1));
        let r = f(&mut g, x, y);
        g.output("r", r);
        g
    };
    for w in [0u32, 1, 1025, u32::MAX] {
        let g = graph(&|g, x, y| g.bgv_bits_add(x, y, w));
        assert!(
            matches!(
                s.validate(&g, &[a.clone(), b.clone()]).unwrap_err(),
                ValidationError::InvalidArgument { node: 2, .. }
            ),
            "width {w}"
        );
    }
    // A sum of one.
    let g = graph(&|g, x, _| g.bgv_bits_sum(vec![x], 4));
    assert!(matches!(
        s.validate(&g, &[a.clone(), b.clone()]).unwrap_err(),
        ValidationError::InvalidArgument { .. }
    ));
    // 1024 slots per row: a 600-bit comparison reaches 600 + 512.
    let g = graph(&|g, x, y| g.bgv_bits_gt(x, y, 600));
    match s.validate(&g, &[a.clone(), b.clone()]).unwrap_err() {
        ValidationError::RowTooShort { need, row, .. } => {
            assert_eq!((need, row), (packed::depth::lt_row_need(600), 1024))
        }
        e => panic!("{e}"),
    }
    // Keys: no rotation keys, then the right ones missing (left rotations
    // only), then no relinearization key.
    let g = graph(&|g, x, y| g.bgv_bits_lt(x, y, 4));
    for rotations in [vec![], vec![1, 2]] {
        let bare = setup_with(LEVELS, &rotations);
        let (a, b) = (
            bare.encrypt(&BigUint::from(1u32), 4),
            bare.encrypt(&BigUint::from(2u32), 4),
        );
        assert!(matches!(
            bare.validate(&g, &[a, b]).unwrap_err(),
            ValidationError::MissingGaloisKey { node: 2, .. }
        ));
    }
    let mut caps = s.keys.capabilities();
    caps.bgv_relin_key = false;
    let types: Vec<ValueType> = [&a, &b].iter().map(|o| o.value_type().unwrap()).collect();
    assert!(matches!(
        validate(&g, &caps, &types).unwrap_err(),
        ValidationError::MissingRelinKey { node: 2, .. }
    ));
}

#[test]
fn bits_nodes_roundtrip_and_truncations_are_refused() {
    let mut g = Graph::new();
    let (x, y, z) = (g.input(0), g.input(1), g.input(2));
    let a = g.bgv_bits_add(x, y, 8);
    let s = g.bgv_bits_sum(vec![x, y, z], 8);
    let l = g.bgv_bits_lt(a, s, 8);
    let r = g.bgv_bits_gt(x, y, 1024);
    g.output("l", l);
    g.output("r", r);
    let bytes = g.encode();
    assert_eq!(Graph::decode(&bytes).unwrap(), g);
    for cut in 0..bytes.len() {
        assert!(Graph::decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    // A sum claiming more operands than bytes left is refused before any
    // allocation; so is one past the operand limit.
    let mut g = Graph::new();
    let x = g.input(0);
    let s = g.bgv_bits_sum(vec![x, x], 4);
    g.output("s", s);
    let mut bytes = g.encode();
    let count = bytes
        .windows(4)
        .rposition(|w| w == 2u32.to_le_bytes())
        .unwrap();
    for n in [u32::MAX, 5000, 3] {
        bytes[count..count + 4].copy_from_slice(&n.to_le_bytes());
        assert!(Graph::decode(&bytes).is_err(), "{n} operands");
    }
}

/// Adds a node of the given width on the given inputs to a graph.
type GraphFn = fn(&mut Graph, &[u32], u32) -> u32;

/// Whatever validation admits runs and is right, on parameters with few
/// levels (3 to 5 above q_0) where the budget is tight; what it refuses is
/// refused for depth. Fresh random inputs.
#[test]
fn what_validation_admits_runs() {
    let mut admitted = 0;
    for levels in [3usize, 4, 5] {
        let s = setup_with(levels, &slot_rotations(1 << 11));
        for w in [2usize, 3, 4, 5, 8, 9] {
            let (a, b, c) = (random_value(w), random_value(w), random_value(w));
            let modulus = BigUint::from(1u32) << w;
            let ops: [(&str, GraphFn); 4] = [
                ("add", |g, x, w| g.bgv_bits_add(x[0], x[1], w)),
                ("lt", |g, x, w| g.bgv_bits_lt(x[0], x[1], w)),
                ("gt", |g, x, w| g.bgv_bits_gt(x[0], x[1], w)),
                ("sum3", |g, x, w| g.bgv_bits_sum(x.to_vec(), w)),
            ];
            for (name, f) in ops {
                let mut g = Graph::new();
                let ins: Vec<u32> = (0..3).map(|i| g.input(i)).collect();
                let r = f(&mut g, &ins, w as u32);
                g.output("r", r);
                let inputs = vec![s.encrypt(&a, w), s.encrypt(&b, w), s.encrypt(&c, w)];
                match s.validate(&g, &inputs) {
                    Ok(_) => {
                        admitted += 1;
                        let out = s.run(&g, inputs);
                        let o = &out[0].1;
                        match name {
                            "add" => assert_eq!(s.number(o, w), (&a + &b) % &modulus),
                            "lt" => assert_eq!(s.answer(o, w), a < b),
                            "gt" => assert_eq!(s.answer(o, w), a > b),
                            _ => assert_eq!(s.number(o, w), (&a + &b + &c) % &modulus),
                        }
                    }
                    Err(ValidationError::DepthExhausted {
                        need, available, ..
                    }) => {
                        assert!(need > available && available <= levels, "{name} w = {w}");
                    }
                    Err(e) => panic!("{name} w = {w}, {levels} levels: {e}"),
                }
            }
        }
    }
    assert!(admitted >= 20, "{admitted}");
}

/// Sums of five to seven numbers (carry-save stages whose operands come
/// from rotated carries; depths 7 to 10) at 11 levels: validation admits
/// them, and they run and are right.
#[test]
fn long_sums_admitted_run() {
    let s = setup_with(11, &slot_rotations(1 << 11));
    let mut admitted = 0;
    for (n, w) in [(5usize, 2usize), (5, 3), (7, 2), (7, 3), (6, 4)] {
        let xs: Vec<BigUint> = (0..n).map(|_| random_value(w)).collect();
        let mut g = Graph::new();
        let ins: Vec<u32> = (0..n as u32).map(|i| g.input(i)).collect();
        let sum = g.bgv_bits_sum(ins, w as u32);
        g.output("sum", sum);
        let inputs: Vec<Object> = xs.iter().map(|v| s.encrypt(v, w)).collect();
        match s.validate(&g, &inputs) {
            Ok(_) => {
                admitted += 1;
                let out = s.run(&g, inputs);
                let want =
                    xs.iter().fold(BigUint::default(), |a, v| a + v) % (BigUint::from(1u32) << w);
                assert_eq!(s.number(&out[0].1, w), want, "n = {n}, w = {w}");
            }
            Err(ValidationError::DepthExhausted { need, .. }) => {
                assert_eq!(need, packed::depth::sum(n, w));
                assert!(need > 10, "n = {n}, w = {w}: {need}");
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(admitted, 5);
}
