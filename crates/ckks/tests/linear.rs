//! Plaintext matrix × encrypted vector by BSGS diagonals, against the same
//! product in the clear, on random matrices and vectors.

use std::collections::BTreeMap;

use hecloud_ckks::linear::LinearTransform;
use hecloud_ckks::params::test_literal;
use hecloud_ckks::precision::report;
use hecloud_ckks::{CkksError, CkksParameters, Encoder, Evaluator, KeySet};
use num_complex::Complex64;

fn random(rng: &mut hecloud_math::Sampler, n: usize) -> Vec<Complex64> {
    let mut f = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
    (0..n).map(|_| Complex64::new(f(), f())).collect()
}

#[test]
fn sparse_and_dense_matrices_match_the_clear_product() {
    let params = CkksParameters::new_insecure_for_tests(test_literal(10, 3), 40).unwrap();
    let n = params.slots();
    let mut rng = hecloud_math::testing::sampler();
    // Sparse: 12 diagonals at random offsets, negative ones included, and
    // the named edges 0, 1 and −1.
    let mut diagonals = BTreeMap::new();
    for d in [0i64, 1, -1] {
        diagonals.insert(d, random(&mut rng, n));
    }
    while diagonals.len() < 12 {
        let d = (rng.next_u64() % n as u64) as i64 - n as i64 / 2;
        if (d.rem_euclid(n as i64)) > 1 && d.rem_euclid(n as i64) < n as i64 - 1 {
            diagonals.insert(d, random(&mut rng, n));
        }
    }
    let sparse = LinearTransform::new(n, diagonals).unwrap();
    // Dense: every diagonal, entries scaled so that rows sum to about 1.
    let dense_rows: Vec<Vec<Complex64>> = (0..n)
        .map(|_| {
            random(&mut rng, n)
                .into_iter()
                .map(|c| c / n as f64)
                .collect()
        })
        .collect();
    let dense = LinearTransform::from_dense(&dense_rows).unwrap();
    let mut rotations = sparse.rotations();
    rotations.extend(dense.rotations());
    assert!(dense.rotations().len() < 2 * 2 * (n as f64).sqrt() as usize);
    let keys = KeySet::generate(&params, &rotations, false).unwrap();
    let (enc, eval) = (
        Encoder::new(&params),
        Evaluator::new(&params, keys.evaluation_keys()),
    );
    let x = random(&mut rng, n);
    let ct = keys
        .encrypt(&enc.encode(&x, 3, params.default_scale()).unwrap())
        .unwrap();
    for (name, lt) in [("sparse", &sparse), ("dense", &dense)] {
        let out = lt.apply(&eval, &enc, &ct).unwrap();
        assert_eq!(out.level(), 2, "{name}");
        assert!((out.scale() / ct.scale() - 1.0).abs() < 1e-12, "{name}");
        let got = enc.decode(&keys.decrypt(&out).unwrap()).unwrap();
        let r = report(&lt.apply_clear(&x), &got);
        assert!(r.bits() > 20.0, "{name}: {r}");
    }
    // The clear reference is itself the matrix product.
    let want: Vec<Complex64> = dense_rows
        .iter()
        .map(|row| row.iter().zip(&x).map(|(a, b)| a * b).sum())
        .collect();
    let r = report(&want, &dense.apply_clear(&x));
    assert!(r.bits() > 40.0, "{r}");
}

/// Kept encodings give the very ciphertexts fresh ones give, and are
/// encoded again when the level, the scale or the parameters change.
#[test]
fn kept_diagonals_give_the_same_ciphertexts_and_follow_level_scale_and_parameters() {
    let mut rng = hecloud_math::testing::sampler();
    let setup = |bits: u32| {
        let mut literal = test_literal(10, 3);
        literal.log_q[1..].fill(bits);
        let params = CkksParameters::new_insecure_for_tests(literal, 40).unwrap();
        let keys = KeySet::generate(&params, &(-8..=8).collect::<Vec<_>>(), false).unwrap();
        let eval = Evaluator::new(&params, keys.evaluation_keys());
        (Encoder::new(&params), eval, keys, params)
    };
    let (enc, eval, keys, params) = setup(45);
    let n = params.slots();
    let diagonals: BTreeMap<i64, Vec<Complex64>> = [-5i64, -1, 0, 2, 7]
        .into_iter()
        .map(|d| (d, random(&mut rng, n)))
        .collect();
    let fresh = LinearTransform::new(n, diagonals).unwrap();
    let mut kept = fresh.clone();
    kept.keep_encoded(true);
    let x = random(&mut rng, n);
    for level in [2, 2, 3, 2, 3] {
        let ct = keys
            .encrypt(&enc.encode(&x, level, params.default_scale()).unwrap())
            .unwrap();
        for out_scale in [ct.scale(), ct.scale() * 2.0, ct.scale()] {
            let want = fresh.apply_to_scale(&eval, &enc, &ct, out_scale).unwrap();
            let got = kept.apply_to_scale(&eval, &enc, &ct, out_scale).unwrap();
            assert_eq!(got, want, "level {level}, scale 2^{}", out_scale.log2());
        }
    }
    // Other parameters (other primes) at the same level and scale.
    let (enc4, eval4, keys4, params4) = setup(50);
    assert_eq!(params4.slots(), n);
    let ct = keys4
        .encrypt(&enc4.encode(&x, 3, params4.default_scale()).unwrap())
        .unwrap();
    // Output scales whose diagonals' encoding scale, out·q_l/scale, is the
    // one kept: only the level, or the parameters' hash, tells them apart.
    let out_for = |params: &CkksParameters, level: usize, ct_scale: f64, kept: f64| {
        let q = params.q_f64(level);
        (-8i64..=8)
            .map(|k| f64::from_bits((kept / q * ct_scale).to_bits().wrapping_add_signed(k)))
            .find(|out| (out * q / ct_scale).to_bits() == kept.to_bits())
            .expect("an output scale with the same encoding scale")
    };
    let at = |level: usize| {
        keys.encrypt(&enc.encode(&x, level, params.default_scale()).unwrap())
            .unwrap()
    };
    let (low, high) = (at(2), at(3));
    fresh.apply(&eval, &enc, &low).unwrap();
    kept.apply(&eval, &enc, &low).unwrap();
    let kept_scale = params.q_f64(2);
    let out = out_for(&params, 3, high.scale(), kept_scale);
    let want = fresh.apply_to_scale(&eval, &enc, &high, out).unwrap();
    assert_eq!(kept.apply_to_scale(&eval, &enc, &high, out).unwrap(), want);
    let out = out_for(&params4, 3, ct.scale(), kept_scale);
    let got = kept.apply_to_scale(&eval4, &enc4, &ct, out).unwrap();
    assert_eq!(got, fresh.apply_to_scale(&eval4, &enc4, &ct, out).unwrap());
    let r = report(
        &fresh.apply_clear(&x),
        &enc4.decode(&keys4.decrypt(&got).unwrap()).unwrap(),
    );
    assert!(r.bits() > 20.0, "{r}");
    // Turned off, it encodes afresh again.
    kept.keep_encoded(false);
    assert_eq!(kept.apply_to_scale(&eval4, &enc4, &ct, out).unwrap(), got);
}

#[test]
fn bad_matrices_and_ciphertexts_are_typed_errors() {
    let params = CkksParameters::new_insecure_for_tests(test_literal(10, 2), 40).unwrap();
    let n = params.slots();
    let one = vec![Complex64::new(1.0, 0.0); n];
    let bad = |m: BTreeMap<i64, Vec<Complex64>>, slots| {
        matches!(
            LinearTransform::new(slots, m),
            Err(CkksError::ValueOutOfRange(_))
        )
    };
    assert!(bad(BTreeMap::new(), n));
    assert!(bad(BTreeMap::from([(0, vec![Complex64::default(); 3])]), n));
    assert!(bad(BTreeMap::from([(0, one.clone())]), n - 1));
    assert!(bad(
        BTreeMap::from([(1, one.clone()), (1 - n as i64, one.clone())]),
        n
    ));
    assert!(bad(
        BTreeMap::from([(0, vec![Complex64::new(f64::NAN, 0.0); n])]),
        n
    ));
    let lt = LinearTransform::new(n, BTreeMap::from([(0, one.clone()), (3, one)])).unwrap();
    // No rotation keys: refused with the missing key, nothing computed.
    let keys = KeySet::generate(&params, &[], false).unwrap();
    let (enc, eval) = (
        Encoder::new(&params),
        Evaluator::new(&params, keys.evaluation_keys()),
    );
    let ct = keys
        .encrypt(&enc.encode_real(&[1.0], 2, params.default_scale()).unwrap())
        .unwrap();
    assert!(lt.apply(&eval, &enc, &ct).is_err());
    // Level 0 and another slot count.
    let keys = KeySet::generate(&params, &lt.rotations(), false).unwrap();
    let eval = Evaluator::new(&params, keys.evaluation_keys());
    // Under the first keys, the one ciphertext refused for its key alone.
    assert!(matches!(
        lt.apply(&eval, &enc, &ct),
        Err(CkksError::Rlwe(hecloud_rlwe::RlweError::KeyMismatch { .. }))
    ));
    let ct = keys
        .encrypt(&enc.encode_real(&[1.0], 2, params.default_scale()).unwrap())
        .unwrap();
    let low = eval.drop_level(&ct, 0).unwrap();
    assert!(lt.apply(&eval, &enc, &low).is_err());
    let other = LinearTransform::new(
        n / 2,
        BTreeMap::from([(0, vec![Complex64::new(1.0, 0.0); n / 2])]),
    )
    .unwrap();
    assert!(matches!(
        other.apply(&eval, &enc, &ct),
        Err(CkksError::ValueOutOfRange(_))
    ));
    lt.apply(&eval, &enc, &ct).unwrap();
}
