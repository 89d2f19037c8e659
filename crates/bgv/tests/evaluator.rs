//! BGV against plain arithmetic mod t on fresh random inputs: every
//! operation, rotations, modulus switching, factor matching, the noise
//! estimate against the measured noise, and the typed errors.

use std::sync::Arc;

use hecloud_bgv::keys::power_of_two_rotations;
use hecloud_bgv::params::test_literal;
use hecloud_bgv::*;
use hecloud_math::Modulus;

const T: u64 = 65537;

fn setup(levels: usize, t: u64) -> (Arc<BgvParameters>, KeySet, Encoder, Evaluator) {
    let params = BgvParameters::new_insecure_for_tests(test_literal(10, levels, t)).unwrap();
    let mut rot = power_of_two_rotations(params.n());
    rot.push(3);
    let keys = KeySet::generate(&params, &rot, true).unwrap();
    let eval = Evaluator::new(&params, keys.evaluation_keys());
    (params.clone(), keys, Encoder::new(&params), eval)
}

fn random_vec(n: usize, t: u64) -> Vec<u64> {
    let mut s = hecloud_math::testing::sampler();
    (0..n).map(|_| s.uniform_mod(t)).collect()
}

fn slotwise(a: &[u64], b: &[u64], f: impl Fn(u64, u64) -> u64) -> Vec<u64> {
    a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
}

#[test]
fn encoders_round_trip() {
    let (params, _, enc, _) = setup(1, T);
    let n = params.n();
    let v = random_vec(n, T);
    assert_eq!(enc.decode(&enc.encode(&v).unwrap()).unwrap(), v);
    // Edge values and a short input (the rest is zero).
    let edge = [0, 1, T - 1, T / 2, T / 2 + 1];
    let mut want = edge.to_vec();
    want.resize(n, 0);
    assert_eq!(enc.decode(&enc.encode(&edge).unwrap()).unwrap(), want);
    let c = enc.encode_coefficients(&edge).unwrap();
    assert_eq!(&c.coefficients()[..5], &edge);
    let k = enc.encode_constant(42).unwrap();
    assert!(enc.decode(&k).unwrap().iter().all(|&x| x == 42));
}

#[test]
fn arithmetic_matches_plain_mod_t() {
    let (params, keys, enc, eval) = setup(3, T);
    let tm = Modulus::new(T).unwrap();
    let n = params.n();
    let (a, b) = (random_vec(n, T), random_vec(n, T));
    let ca = keys.encrypt(&enc.encode(&a).unwrap()).unwrap();
    let cb = keys
        .encrypt_sk(&enc.encode(&b).unwrap(), params.max_level())
        .unwrap();
    let dec = |ct: &hecloud_rlwe::Ciphertext| enc.decode(&keys.decrypt(ct).unwrap()).unwrap();
    assert_eq!(dec(&ca), a);
    assert_eq!(dec(&cb), b);
    assert_eq!(
        dec(&eval.add(&ca, &cb).unwrap()),
        slotwise(&a, &b, |x, y| tm.add(x, y))
    );
    assert_eq!(
        dec(&eval.sub(&ca, &cb).unwrap()),
        slotwise(&a, &b, |x, y| tm.sub(x, y))
    );
    assert_eq!(
        dec(&eval.neg(&ca).unwrap()),
        slotwise(&a, &a, |x, _| tm.neg(x))
    );
    let pb = enc.encode(&b).unwrap();
    assert_eq!(
        dec(&eval.add_plain(&ca, &pb).unwrap()),
        slotwise(&a, &b, |x, y| tm.add(x, y))
    );
    assert_eq!(
        dec(&eval.sub_plain(&ca, &pb).unwrap()),
        slotwise(&a, &b, |x, y| tm.sub(x, y))
    );
    assert_eq!(
        dec(&eval.mul_plain(&ca, &pb).unwrap()),
        slotwise(&a, &b, |x, y| tm.mul(x, y))
    );
    for c in [0, 1, 2, T - 1, 12345] {
        assert_eq!(
            dec(&eval.mul_scalar(&ca, c).unwrap()),
            slotwise(&a, &a, |x, _| tm.mul(x, c))
        );
        assert_eq!(
            dec(&eval.add_scalar(&ca, c).unwrap()),
            slotwise(&a, &a, |x, _| tm.add(x, c))
        );
    }
    let prod = slotwise(&a, &b, |x, y| tm.mul(x, y));
    let d = eval.mul(&ca, &cb).unwrap();
    assert_eq!(d.degree(), 2);
    assert_eq!(dec(&d), prod, "degree-2 decryption");
    assert_eq!(dec(&eval.relinearize(&d).unwrap()), prod);
    let m = eval.mul_relin(&ca, &cb).unwrap();
    assert_eq!(m.level(), params.max_level() - 1);
    assert_eq!(dec(&m), prod);
    // Mixed levels and factors: the product (one level down, factor q_l⁻¹)
    // plus a fresh ciphertext.
    assert_ne!(m.factor(), ca.factor());
    let sum = eval.add(&m, &ca).unwrap();
    assert_eq!(dec(&sum), slotwise(&prod, &a, |x, y| tm.add(x, y)));
    let sum = eval.sub(&ca, &m).unwrap();
    assert_eq!(dec(&sum), slotwise(&a, &prod, |x, y| tm.sub(x, y)));
    // Degree 2 and degree 1, in both orders (the missing component is a
    // zero, also when subtracted).
    assert_eq!(
        dec(&eval.add(&ca, &d).unwrap()),
        slotwise(&a, &prod, |x, y| tm.add(x, y))
    );
    assert_eq!(
        dec(&eval.add(&d, &ca).unwrap()),
        slotwise(&a, &prod, |x, y| tm.add(x, y))
    );
    assert_eq!(
        dec(&eval.sub(&ca, &d).unwrap()),
        slotwise(&a, &prod, |x, y| tm.sub(x, y))
    );
    assert_eq!(
        dec(&eval.sub(&d, &ca).unwrap()),
        slotwise(&prod, &a, |x, y| tm.sub(x, y))
    );
    let many: Vec<_> = (0..20).map(|_| ca.clone()).collect();
    assert_eq!(
        dec(&eval.add_many(&many).unwrap()),
        slotwise(&a, &a, |x, _| tm.mul(x, 20))
    );
    // Long sums across the lazy groups of add_many, read in place: fresh
    // terms, the product (another level and factor) in the middle of a
    // group, and a degree-2 term last.
    let xs: Vec<Vec<u64>> = (0..17).map(|_| random_vec(n, T)).collect();
    let cxs: Vec<_> = xs
        .iter()
        .map(|x| keys.encrypt(&enc.encode(x).unwrap()).unwrap())
        .collect();
    let plain_sum = xs
        .iter()
        .fold(vec![0; n], |acc, x| slotwise(&acc, x, |p, q| tm.add(p, q)));
    assert_eq!(dec(&eval.add_many(&cxs).unwrap()), plain_sum);
    let mut terms: Vec<&hecloud_rlwe::Ciphertext> = cxs.iter().collect();
    terms.insert(10, &m);
    terms.push(&d);
    let want = slotwise(&plain_sum, &prod, |p, q| tm.add(p, tm.add(q, q)));
    assert_eq!(dec(&eval.add_many(terms).unwrap()), want);
    assert!(
        eval.add_many(Vec::<&hecloud_rlwe::Ciphertext>::new())
            .is_err()
    );
}

#[test]
fn rotations_and_inner_sum_match_plain() {
    let (params, keys, enc, eval) = setup(2, T);
    let n = params.n();
    let half = n / 2;
    let a = random_vec(n, T);
    let ca = keys.encrypt(&enc.encode(&a).unwrap()).unwrap();
    let dec = |ct: &hecloud_rlwe::Ciphertext| enc.decode(&keys.decrypt(ct).unwrap()).unwrap();
    let rotate = |k: i64| -> Vec<u64> {
        (0..n)
            .map(|i| {
                let (row, col) = (i / half, i % half);
                a[row * half + (col as i64 + k).rem_euclid(half as i64) as usize]
            })
            .collect()
    };
    // 3 has its own key; 5 and -1 go through powers of two.
    for k in [1, 3, 5, -1, half as i64 - 1, 0] {
        assert_eq!(
            dec(&eval.rotate_rows(&ca, k).unwrap()),
            rotate(k),
            "k = {k}"
        );
    }
    let swapped: Vec<u64> = a[half..].iter().chain(&a[..half]).copied().collect();
    assert_eq!(dec(&eval.rotate_columns(&ca).unwrap()), swapped);
    let total = a.iter().fold(0u64, |s, &x| (s + x) % T);
    assert!(
        dec(&eval.inner_sum(&ca).unwrap())
            .iter()
            .all(|&x| x == total)
    );
}

#[test]
fn modulus_switching_keeps_the_message_and_lowers_the_noise() {
    let (params, keys, enc, eval) = setup(4, T);
    let a = random_vec(params.n(), T);
    let ca = keys.encrypt(&enc.encode(&a).unwrap()).unwrap();
    let sq = eval.relinearize(&eval.mul(&ca, &ca).unwrap()).unwrap();
    let before = keys.noise_budget(&sq).unwrap();
    let mut ct = sq.clone();
    let tm = Modulus::new(T).unwrap();
    let want: Vec<u64> = a.iter().map(|&x| tm.mul(x, x)).collect();
    while ct.level() > 0 {
        ct = eval.mod_switch(&ct).unwrap();
        assert_eq!(enc.decode(&keys.decrypt(&ct).unwrap()).unwrap(), want);
    }
    // Switching spends modulus but keeps most of the budget: the noise
    // fell with it.
    let after = keys.noise_budget(&ct).unwrap();
    assert!(after > 20.0, "budget after switching to level 0: {after}");
    assert!(before > after);
    assert!(eval.mod_switch(&ct).is_err(), "no level below 0");
}

/// The estimate is an upper bound of the measured noise (the estimated
/// budget never exceeds the measured one) and not far above it, along a
/// chain of products until the estimate says stop; no result ever decrypts
/// wrongly.
#[test]
fn noise_estimate_bounds_the_measured_noise_through_a_depth_chain() {
    let (params, keys, enc, eval) = setup(5, T);
    depth_chain(&params, &keys, &enc, &eval);
    // The secure presets of the smaller rings, as users get them.
    for preset in [Preset::N13, Preset::N14] {
        let params = preset.build().unwrap();
        let keys = KeySet::generate(&params, &[], false).unwrap();
        let eval = Evaluator::new(&params, keys.evaluation_keys());
        let depth = depth_chain(&params, &keys, &Encoder::new(&params), &eval);
        assert!(depth >= preset.depth(), "{preset:?}: {depth}");
    }
}

/// Multiplies by a fresh ciphertext until the estimate says stop, checking
/// every step; returns the depth reached.
fn depth_chain(
    params: &Arc<BgvParameters>,
    keys: &KeySet,
    enc: &Encoder,
    eval: &Evaluator,
) -> usize {
    let t = params.t();
    let tm = Modulus::new(t).unwrap();
    let a = random_vec(params.n(), t);
    let mut want = a.clone();
    let ca = keys.encrypt(&enc.encode(&a).unwrap()).unwrap();
    let mut ct = ca.clone();
    let mut depth = 0;
    loop {
        let est = eval.budget_estimate(&ct);
        let real = keys.noise_budget(&ct).unwrap();
        assert!(
            est <= real + 0.5,
            "depth {depth}: estimate {est:.1} > measured {real:.1}"
        );
        assert!(
            real - est < 30.0,
            "depth {depth}: estimate {est:.1} vs measured {real:.1}"
        );
        assert_eq!(enc.decode(&keys.decrypt(&ct).unwrap()).unwrap(), want);
        // The prediction without computing (operands at different levels).
        let predicted = eval.mul_relin_budget(&ct, &ca);
        match eval.mul_relin(&ct, &ca) {
            Ok(next) => {
                assert!(
                    (eval.budget_estimate(&next) - predicted).abs() < 1e-9,
                    "depth {depth}: predicted {predicted:.3} vs {:.3}",
                    eval.budget_estimate(&next)
                );
                ct = next;
                want = slotwise(&want, &a, |x, y| tm.mul(x, y));
                depth += 1;
            }
            Err(BgvError::BudgetExhausted { .. }) => {
                assert!(predicted <= 0.0, "predicted {predicted:.3} but exhausted");
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        depth >= params.depth(),
        "{depth} < documented {}",
        params.depth()
    );
    depth
}

#[test]
fn coefficient_encoding_with_a_power_of_two_t() {
    let t = 1u64 << 16;
    let (params, keys, enc, eval) = setup(2, t);
    assert!(matches!(enc.encode(&[1]), Err(BgvError::NoBatching { .. })));
    let n = params.n();
    let (a, b) = (random_vec(n, t), random_vec(n, t));
    let ca = keys.encrypt(&enc.encode_coefficients(&a).unwrap()).unwrap();
    let cb = keys.encrypt(&enc.encode_coefficients(&b).unwrap()).unwrap();
    let sum = keys.decrypt(&eval.add(&ca, &cb).unwrap()).unwrap();
    assert_eq!(sum.coefficients(), slotwise(&a, &b, |x, y| (x + y) % t));
    // The negacyclic product mod 2^16.
    let prod = keys.decrypt(&eval.mul_relin(&ca, &cb).unwrap()).unwrap();
    let mut want = vec![0u64; n];
    for (i, &x) in a.iter().enumerate() {
        for (j, &y) in b.iter().enumerate() {
            let p = x * y % t;
            let k = (i + j) % n;
            want[k] = if i + j < n {
                (want[k] + p) % t
            } else {
                (want[k] + t - p) % t
            };
        }
    }
    assert_eq!(prod.coefficients(), want);
}

#[test]
fn bad_input_gets_typed_errors() {
    let (params, keys, enc, eval) = setup(2, T);
    assert!(matches!(
        enc.encode(&[T]),
        Err(BgvError::ValueOutOfRange {
            value: T,
            index: 0,
            t: T
        })
    ));
    assert!(matches!(
        enc.encode(&vec![0; params.n() + 1]),
        Err(BgvError::TooManyValues { .. })
    ));
    let ct = keys.encrypt(&enc.encode(&[1]).unwrap()).unwrap();
    // Another parameter set (another t): refused, never decrypted wrongly.
    let (_, keys2, enc2, eval2) = setup(2, 786433);
    let other = keys2.encrypt(&enc2.encode(&[1]).unwrap()).unwrap();
    assert!(eval.add(&ct, &other).is_err());
    assert!(eval2.mul_relin(&ct, &ct).is_err());
    assert!(keys2.decrypt(&ct).is_err());
    // A rotation without its key.
    let bare = Evaluator::new(
        &params,
        Arc::new(EvaluationKeys {
            relin: None,
            galois: Default::default(),
        }),
    );
    assert!(matches!(
        bare.rotate_rows(&ct, 1),
        Err(BgvError::MissingRotationKey(_))
    ));
    assert!(matches!(
        bare.rotate_columns(&ct),
        Err(BgvError::MissingRotationKey(_))
    ));
    assert!(bare.mul_relin(&ct, &ct).is_err());
    // The factor survives serialization; a forged one is refused.
    let m = eval.mul_relin(&ct, &ct).unwrap();
    let back = hecloud_rlwe::Ciphertext::from_bytes(params.rlwe(), &m.to_bytes()).unwrap();
    assert_eq!(back.factor(), m.factor());
    assert_eq!(enc.decode(&keys.decrypt(&back).unwrap()).unwrap()[0], 1);
}

/// Ciphertexts of two key sets over the same parameters: every operation
/// that would mix them (sums, lazy sums, products, relinearization,
/// rotations with the other set's keys) is refused with `KeyMismatch` —
/// their result would decrypt to integers mod t like any other — and the
/// other set cannot decrypt a result of the first.
#[test]
fn ciphertexts_of_another_key_set_are_refused() {
    let (params, keys, enc, eval) = setup(3, T);
    let other = KeySet::generate(&params, &[1], true).unwrap();
    let v = random_vec(params.n(), T);
    let pt = enc.encode(&v).unwrap();
    let (mine, theirs) = (keys.encrypt(&pt).unwrap(), other.encrypt(&pt).unwrap());
    let mismatch = |r: Result<hecloud_rlwe::Ciphertext>| {
        matches!(
            r,
            Err(BgvError::Rlwe(hecloud_rlwe::RlweError::KeyMismatch { .. }))
        )
    };
    assert!(mismatch(eval.add(&mine, &theirs)));
    assert!(mismatch(eval.sub(&theirs, &mine)));
    assert!(mismatch(eval.add_many([&mine, &mine, &theirs])));
    assert!(mismatch(eval.mul(&mine, &theirs)));
    // The other set's own ciphertexts, with this set's keys.
    assert!(mismatch(eval.mul_relin(&theirs, &theirs)));
    assert!(mismatch(
        eval.relinearize(&eval.mul(&theirs, &theirs).unwrap())
    ));
    assert!(mismatch(eval.rotate_rows(&theirs, 1)));
    assert!(matches!(
        other.decrypt(&mine),
        Err(BgvError::Rlwe(hecloud_rlwe::RlweError::KeyMismatch { .. }))
    ));
    // This set's own: computed, kept under its key, decrypted.
    let sq = eval.mul_relin(&mine, &mine).unwrap();
    let sum = eval.add_many([&mine, &mine, &mine]).unwrap();
    let t = Modulus::new(T).unwrap();
    for (ct, want) in [
        (sq, slotwise(&v, &v, |a, b| t.mul(a, b))),
        (sum, v.iter().map(|&a| t.mul(a, 3)).collect()),
    ] {
        assert_eq!(ct.key_id(), keys.secret_key().key_id());
        assert_eq!(enc.decode(&keys.decrypt(&ct).unwrap()).unwrap(), want);
    }
}
