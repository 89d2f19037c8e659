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
