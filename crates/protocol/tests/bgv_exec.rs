//! BGV graphs through validation and execution, checked against plain
//! integer arithmetic mod t on fresh random inputs: every operation, each
//! output carrying exactly the level, factor and noise estimate validation
//! predicted; then the refusals, before anything runs: wrong parameters,
//! missing keys, an exhausted noise budget (the graph one product shorter
//! runs and decrypts right), forged and truncated bytes.

mod common;

use std::sync::Arc;

use hecloud_bgv::keys::power_of_two_rotations;
use hecloud_bgv::params::test_literal;
use hecloud_bgv::{BgvParameters, Encoder, KeySet};
use hecloud_math::testing::sampler;
use hecloud_protocol::object::PayloadCheck;
use hecloud_protocol::*;

const T: u64 = 65537;
const LEVELS: usize = 6;

struct Setup {
    params: Arc<BgvParameters>,
    ks: KeySet,
    enc: Encoder,
    keys: SessionKeys,
}

/// N = 2^11, keys for the powers of two, 3 and the column swap.
fn setup() -> Setup {
    let params = BgvParameters::new_insecure_for_tests(test_literal(11, LEVELS, T)).unwrap();
    let mut rots = power_of_two_rotations(params.n());
    rots.push(3);
    let ks = KeySet::generate(&params, &rots, true).unwrap();
    Setup {
        enc: Encoder::new(&params),
        keys: common::bgv_session(&params, &ks),
        params,
        ks,
    }
}

impl Setup {
    fn encrypt(&self, x: &[u64]) -> Object {
        Object::BgvCiphertext(self.ks.encrypt(&self.enc.encode(x).unwrap()).unwrap())
    }

    fn decrypt(&self, o: &Object) -> Vec<u64> {
        let Object::BgvCiphertext(c) = o else {
            panic!("not a BGV ciphertext: {:?}", o.kind())
        };
        self.enc.decode(&self.ks.decrypt(c).unwrap()).unwrap()
    }

    /// Validates and runs `g`; every output must carry exactly the type
    /// validation predicted.
    fn run(&self, g: &Graph, inputs: Vec<Object>) -> Vec<(String, Object)> {
        let types: Vec<ValueType> = inputs.iter().map(|o| o.value_type().unwrap()).collect();
        let v = validate(g, &self.keys.capabilities(), &types).unwrap();
        // BGV work is costed: products and rotations are key switches.
        let switches = g
            .nodes
            .iter()
            .filter(|op| matches!(op, Op::BgvMul(..) | Op::BgvRotateRows(..)))
            .count() as u64;
        assert!(v.cost().key_switches >= switches, "{:?}", v.cost());
        assert!(v.cost().est_seconds > 0.0 && v.cost().output_bytes > 0);
        common::execute_as_predicted(&v, &self.keys, &inputs)
    }
}

fn random(n: usize, below: u64) -> Vec<u64> {
    let mut s = sampler();
    (0..n).map(|_| s.uniform_mod(below)).collect()
}

/// Both rows rotated left by k.
fn rotate_rows(x: &[u64], k: i64) -> Vec<u64> {
    let half = x.len() / 2;
    let k = k.rem_euclid(half as i64) as usize;
    (0..x.len())
        .map(|i| {
            let (row, j) = (i / half, i % half);
            x[row * half + (j + k) % half]
        })
        .collect()
}

#[test]
fn every_operation_matches_plain_arithmetic_mod_t() {
    let s = setup();
    let n = s.params.n();
    let (x, y, z) = (random(n, T), random(n, T), random(n, T));
    let (a, b) = (random(n, 8), random(n, 8));
    let (c1, c2) = (random(1, T)[0], random(1, T)[0]);
    let mut g = Graph::new();
    let (xi, yi, zi, ai, bi) = (g.input(0), g.input(1), g.input(2), g.input(3), g.input(4));
    let add = g.bgv_add(xi, yi);
    let sub = g.bgv_sub(xi, yi);
    let neg = g.bgv_neg(xi);
    let mul = g.bgv_mul(xi, yi);
    // A product meets a fresh value: levels and factors matched.
    let mixed = g.bgv_add(mul, zi);
    let sum = g.bgv_sum(vec![xi, yi, zi, mul]);
    let slot_sum = g.bgv_slot_sum(xi);
    let r3 = g.bgv_rotate_rows(xi, 3);
    let r_neg = g.bgv_rotate_rows(xi, -5); // a chain of power-of-two keys
    let cols = g.bgv_rotate_columns(xi);
    let adds = g.bgv_add_scalar(xi, c1);
    let muls = g.bgv_mul_scalar(xi, c2);
    let lt = g.bgv_less_than(ai, bi, 8);
    let low = g.bgv_mod_switch(mul, 0);
    for (name, node) in [
        ("add", add),
        ("sub", sub),
        ("neg", neg),
        ("mul", mul),
        ("mixed", mixed),
        ("sum", sum),
        ("slot_sum", slot_sum),
        ("r3", r3),
        ("r_neg", r_neg),
        ("cols", cols),
        ("adds", adds),
        ("muls", muls),
        ("lt", lt),
        ("low", low),
    ] {
        g.output(name, node);
    }
    let inputs = [&x, &y, &z, &a, &b].map(|v| s.encrypt(v)).to_vec();
    let out = s.run(&g, inputs);
    let m = |p: u128| (p % T as u128) as u64;
    let prod: Vec<u64> = x
        .iter()
        .zip(&y)
        .map(|(&p, &q)| m(p as u128 * q as u128))
        .collect();
    let total = m(x.iter().map(|&v| v as u128).sum());
    let half = n / 2;
    let want: Vec<(&str, Vec<u64>)> = vec![
        ("add", (0..n).map(|i| (x[i] + y[i]) % T).collect()),
        ("sub", (0..n).map(|i| (x[i] + T - y[i]) % T).collect()),
        ("neg", x.iter().map(|&v| (T - v) % T).collect()),
        ("mul", prod.clone()),
        ("mixed", (0..n).map(|i| (prod[i] + z[i]) % T).collect()),
        (
            "sum",
            (0..n)
                .map(|i| m(x[i] as u128 + y[i] as u128 + z[i] as u128 + prod[i] as u128))
                .collect(),
        ),
        ("slot_sum", vec![total; n]),
        ("r3", rotate_rows(&x, 3)),
        ("r_neg", rotate_rows(&x, -5)),
        ("cols", (0..n).map(|i| x[(i + half) % n]).collect()),
        ("adds", x.iter().map(|&v| (v + c1) % T).collect()),
        (
            "muls",
            x.iter().map(|&v| m(v as u128 * c2 as u128)).collect(),
        ),
        ("lt", (0..n).map(|i| u64::from(a[i] < b[i])).collect()),
        ("low", prod),
    ];
    for ((name, o), (wname, w)) in out.iter().zip(&want) {
        assert_eq!(name, wname);
        assert_eq!(&s.decrypt(o), w, "{name}");
    }
    let Object::BgvCiphertext(low) = &out[13].1 else {
        panic!()
    };
    assert_eq!(low.level(), 0, "switched down: travels small");
}

#[test]
fn refusals_come_before_anything_runs() {
    let s = setup();
    let n = s.params.n();
    let x = s.encrypt(&random(n, T));
    let bgv_t = x.value_type().unwrap();
    let caps = s.keys.capabilities();

    // A BGV op on a CKKS value, and a CKKS op on a BGV value.
    let ckks_t = ValueType::CkksCiphertext {
        level: 1,
        scale: 2f64.powi(40),
        degree: 1,
    };
    let mut both = caps.clone();
    both.ckks = Some(
        hecloud_ckks::CkksParameters::new_insecure_for_tests(
            hecloud_ckks::params::test_literal(10, 2),
            40,
        )
        .unwrap(),
    );
    let both = both.with_relin_key();
    let mut g = Graph::new();
    let i = g.input(0);
    let y = g.bgv_mul(i, i);
    g.output("y", y);
    assert!(matches!(
        validate(&g, &both, std::slice::from_ref(&ckks_t)),
        Err(ValidationError::TypeMismatch { .. })
    ));
    let mut h = Graph::new();
    let i = h.input(0);
    let y = h.mul(i, i);
    h.output("y", y);
    assert!(matches!(
        validate(&h, &both, std::slice::from_ref(&bgv_t)),
        Err(ValidationError::TypeMismatch { .. })
    ));
    // A session without BGV parameters.
    assert!(matches!(
        validate(&g, &Capabilities::default(), std::slice::from_ref(&bgv_t)),
        Err(ValidationError::SchemeUnavailable { scheme: "BGV", .. })
            | Err(ValidationError::InvalidArgument { .. })
    ));

    // Missing keys: the rotation is named.
    let bare = Capabilities::default().with_bgv(&s.params);
    assert!(matches!(
        validate(&g, &bare, std::slice::from_ref(&bgv_t)),
        Err(ValidationError::MissingRelinKey { .. })
    ));
    let mut r = Graph::new();
    let i = r.input(0);
    let y = r.bgv_rotate_rows(i, 6);
    r.output("y", y);
    let only_one = Capabilities::default()
        .with_bgv(&s.params)
        .with_bgv_rotations(&[1], false);
    match validate(&r, &only_one, std::slice::from_ref(&bgv_t)) {
        Err(ValidationError::MissingGaloisKey { what, .. }) => {
            assert!(what.contains("row rotation by 6"), "{what}")
        }
        other => panic!("{other:?}"),
    }
    let mut c = Graph::new();
    let i = c.input(0);
    let y = c.bgv_slot_sum(i);
    c.output("y", y);
    match validate(&c, &only_one, std::slice::from_ref(&bgv_t)) {
        Err(ValidationError::MissingGaloisKey { what, .. }) => {
            assert!(what.contains("row rotation by 2"), "{what}")
        }
        other => panic!("{other:?}"),
    }

    // Bad arguments.
    let mut b = Graph::new();
    let i = b.input(0);
    let y = b.bgv_mul_scalar(i, T);
    b.output("y", y);
    assert!(matches!(
        validate(&b, &caps, std::slice::from_ref(&bgv_t)),
        Err(ValidationError::InvalidArgument { .. })
    ));
    let mut b = Graph::new();
    let i = b.input(0);
    let y = b.bgv_less_than(i, i, T);
    b.output("y", y);
    assert!(matches!(
        validate(&b, &caps, std::slice::from_ref(&bgv_t)),
        Err(ValidationError::InvalidArgument { .. })
    ));
    let mut b = Graph::new();
    let i = b.input(0);
    let y = b.bgv_mod_switch(i, LEVELS as u32 + 1);
    b.output("y", y);
    assert!(validate(&b, &caps, std::slice::from_ref(&bgv_t)).is_err());

    // An input whose noise estimate is below any ciphertext's (it would let
    // a graph run past the budget): the floor itself passes.
    let ValueType::BgvCiphertext {
        level,
        factor,
        degree,
        ..
    } = bgv_t
    else {
        unreachable!()
    };
    let floor = s
        .params
        .noise()
        .fresh_sk()
        .min(s.params.noise().switching_floor());
    let with_noise = |noise: f64| ValueType::BgvCiphertext {
        level,
        noise,
        factor,
        degree,
    };
    for (noise, ok) in [
        (floor, true),
        (floor - 0.5, false),
        (1.0, false),
        (f64::NAN, false),
    ] {
        let r = validate(&g, &caps, &[with_noise(noise)]);
        assert_eq!(r.is_ok(), ok, "noise 2^{noise}: {r:?}");
    }

    // A plaintext modulus without slots (65521 is prime, not 1 mod 2N):
    // refused as a session's parameters, and by the validator where
    // capabilities carry it anyway.
    let spec = BgvParamSpec::from_literal(&test_literal(11, LEVELS, 65521));
    assert!(matches!(
        spec.build(true),
        Err(SessionError::Bgv(hecloud_bgv::BgvError::NoBatching { .. }))
    ));
    let coefficients =
        BgvParameters::new_insecure_for_tests(test_literal(11, LEVELS, 65521)).unwrap();
    let no_slots = Capabilities::default()
        .with_bgv(&coefficients)
        .with_bgv_relin_key();
    let r = validate(&g, &no_slots, &[with_noise(floor + 10.0)]);
    assert!(
        matches!(&r, Err(ValidationError::InvalidArgument { reason, .. }) if reason.contains("no slots")),
        "{r:?}"
    );
}

#[test]
fn an_exhausted_budget_is_refused_where_it_would_run_out() {
    let s = setup();
    let n = s.params.n();
    let x = random(n, T);
    let caps = s.keys.capabilities();
    let input = s.encrypt(&x);
    let ty = input.value_type().unwrap();
    // x^(2^k): squarings in a row until validation refuses.
    let mut depth = 0;
    let mut refused = None;
    for k in 1..=LEVELS + 4 {
        let mut g = Graph::new();
        let mut v = g.input(0);
        for _ in 0..k {
            v = g.bgv_mul(v, v);
        }
        g.output("y", v);
        match validate(&g, &caps, std::slice::from_ref(&ty)) {
            Ok(_) => depth = k,
            Err(e) => {
                refused = Some((k, e));
                break;
            }
        }
    }
    let (k, e) = refused.expect("the budget runs out within the levels");
    assert!(
        matches!(e, ValidationError::BudgetExhausted { node, .. } if node == k as u32),
        "{e}"
    );
    assert_eq!(depth, s.params.depth(), "the parameters' documented depth");
    // The deepest accepted graph runs, and decrypts right.
    let mut g = Graph::new();
    let mut v = g.input(0);
    for _ in 0..depth {
        v = g.bgv_mul(v, v);
    }
    g.output("y", v);
    let out = s.run(&g, vec![input]);
    let want: Vec<u64> = x
        .iter()
        .map(|&v| {
            let mut r = v as u128;
            for _ in 0..depth {
                r = r * r % T as u128;
            }
            r as u64
        })
        .collect();
    assert_eq!(s.decrypt(&out[0].1), want);
}

#[test]
fn forged_truncated_and_foreign_bytes_are_refused() {
    let s = setup();
    let sp = s.keys.params().clone();
    let ct = s.encrypt(&random(8, T)).to_bytes();
    let (d, obj) = sp.describe(ObjectKind::BgvCiphertext, &ct).unwrap();
    assert_eq!(d.kind, ObjectKind::BgvCiphertext);
    assert_eq!(d.param_hash, *s.params.rlwe().hash());
    assert_eq!(value_type_of(&d).unwrap(), obj.value_type().unwrap());
    assert_eq!(object::payload_kind(&ct), Some(ObjectKind::BgvCiphertext));
    let known = vec![s.params.rlwe().clone()];
    let check = |kind, bytes: &[u8]| {
        let mut c = PayloadCheck::new(kind, bytes.len() as u64, known.clone());
        c.push(bytes).and_then(|()| c.finish())
    };
    check(ObjectKind::BgvCiphertext, &ct).unwrap();
    // Truncated, extended.
    for len in [0, 10, 64, ct.len() - 1] {
        assert!(sp.decode(ObjectKind::BgvCiphertext, &ct[..len]).is_err());
        assert!(check(ObjectKind::BgvCiphertext, &ct[..len]).is_err());
    }
    let mut long = ct.clone();
    long.push(0);
    assert!(sp.decode(ObjectKind::BgvCiphertext, &long).is_err());
    // A forged factor: 0, t, or not a unit.
    for f in [0u64, T, T + 1] {
        let mut b = ct.clone();
        b[56..64].copy_from_slice(&f.to_le_bytes());
        assert!(
            sp.decode(ObjectKind::BgvCiphertext, &b).is_err(),
            "factor {f}"
        );
    }
    // A residue above its prime.
    let mut b = ct.clone();
    let len = b.len();
    b[len - 8..].fill(0xff); // the last residue: 2^50 − 1, above its prime
    assert!(sp.decode(ObjectKind::BgvCiphertext, &b).is_err());
    // Labelled a CKKS ciphertext, or decoded by a session without BGV.
    assert!(check(ObjectKind::CkksCiphertext, &ct).is_err());
    assert!(sp.decode(ObjectKind::CkksCiphertext, &ct).is_err());
    let no_bgv = SessionParams {
        ckks: None,
        tfhe: None,
        bgv: None,
    };
    assert!(matches!(
        no_bgv.decode(ObjectKind::BgvCiphertext, &ct),
        Err(ObjectError::NoParameters { scheme: "BGV", .. })
    ));
    // Of other BGV parameters.
    let other = BgvParameters::new_insecure_for_tests(test_literal(11, LEVELS - 1, T)).unwrap();
    let osp = SessionParams {
        ckks: None,
        tfhe: None,
        bgv: Some(other),
    };
    assert!(osp.decode(ObjectKind::BgvCiphertext, &ct).is_err());
    // Keys: each under its own kind only.
    let relin =
        s.ks.evaluation_keys()
            .relin
            .as_ref()
            .unwrap()
            .to_bytes(true);
    assert!(matches!(
        sp.decode(ObjectKind::BgvRelinKey, &relin),
        Ok(Object::BgvRelinKey(_))
    ));
    assert!(sp.decode(ObjectKind::BgvGaloisKey, &relin).is_err());
    assert!(sp.decode(ObjectKind::BgvCiphertext, &relin).is_err());
    check(ObjectKind::BgvRelinKey, &relin).unwrap();
    assert!(check(ObjectKind::BgvRelinKey, &relin[..relin.len() - 3]).is_err());
}

#[test]
fn sessions_load_bgv_keys_by_id_and_encode_with_a_bgv_part() {
    let s = setup();
    let relin =
        s.ks.evaluation_keys()
            .relin
            .as_ref()
            .unwrap()
            .to_bytes(true);
    let ek = s.ks.evaluation_keys();
    let galois: Vec<Vec<u8>> = ek
        .galois
        .elements()
        .map(|g| ek.galois.get(g).unwrap().to_bytes(true))
        .collect();
    let spec = SessionSpec {
        bgv: Some(BgvParamSpec::from_literal(&test_literal(11, LEVELS, T))),
        bgv_relin_key: Some(ObjectId::of(&relin)),
        bgv_galois_keys: galois.iter().map(|b| ObjectId::of(b)).collect(),
        ..SessionSpec::default()
    };
    let bytes = spec.encode();
    assert_eq!(SessionSpec::decode(&bytes).unwrap(), spec);
    // A session without BGV encodes as it always did.
    assert_eq!(
        SessionSpec::default().encode().len(),
        SessionSpec::decode(&SessionSpec::default().encode())
            .unwrap()
            .encode()
            .len()
    );
    assert!(
        SessionParams::for_session(&spec, false).is_err(),
        "insecure literal"
    );
    let sp = SessionParams::for_session(&spec, true).unwrap();
    let store: Vec<Vec<u8>> = std::iter::once(relin.clone()).chain(galois).collect();
    let keys = SessionKeys::load(&spec, sp, |id| {
        store.iter().find(|b| ObjectId::of(b) == *id).cloned()
    })
    .unwrap();
    let caps = keys.capabilities();
    assert!(caps.bgv_relin_key);
    assert_eq!(
        caps.bgv_galois_elements,
        s.keys.capabilities().bgv_galois_elements
    );
    // A missing key is named.
    assert!(matches!(
        SessionKeys::load(
            &spec,
            SessionParams::for_session(&spec, true).unwrap(),
            |_| None
        ),
        Err(SessionError::MissingObject(_))
    ));
    // A preset by name.
    let p = BgvParamSpec::from_name("bgv-n13").unwrap();
    let spec = SessionSpec {
        bgv: Some(p),
        ..SessionSpec::default()
    };
    assert_eq!(SessionSpec::decode(&spec.encode()).unwrap(), spec);
}
