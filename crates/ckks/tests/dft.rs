//! The homomorphic DFTs of bootstrapping against a naive DFT at the slot
//! roots: in the clear for every level count, and on ciphertexts.

use hecloud_ckks::dft::HomomorphicDft;
use hecloud_ckks::params::test_literal;
use hecloud_ckks::precision::report;
use hecloud_ckks::{CkksError, CkksParameters, Encoder, Evaluator, KeySet};
use num_complex::Complex64;

fn random(n: usize) -> Vec<Complex64> {
    let mut rng = hecloud_math::testing::sampler();
    let mut f = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
    (0..n).map(|_| Complex64::new(f(), f())).collect()
}

/// V with V_jk = ζ_j^k, ζ_j = e^{2πi·5^j/2N}: decoding's matrix, written
/// from its definition.
fn vandermonde(big_n: usize) -> Vec<Vec<Complex64>> {
    let (n, m) = (big_n / 2, 2 * big_n);
    let mut g = 1usize;
    (0..n)
        .map(|_| {
            let root = g;
            g = g * 5 % m;
            (0..n)
                .map(|k| {
                    let a = 2.0 * std::f64::consts::PI * ((root * k) % m) as f64 / m as f64;
                    Complex64::new(a.cos(), a.sin())
                })
                .collect()
        })
        .collect()
}

fn bit_reversed(v: &[Complex64]) -> Vec<Complex64> {
    let bits = v.len().trailing_zeros();
    (0..v.len())
        .map(|i| v[i.reverse_bits() >> (usize::BITS - bits)])
        .collect()
}

fn mat_vec(m: &[Vec<Complex64>], x: &[Complex64]) -> Vec<Complex64> {
    m.iter()
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

#[test]
fn every_level_count_computes_the_dft_in_the_clear() {
    let params = CkksParameters::new_insecure_for_tests(test_literal(9, 2), 40).unwrap();
    let enc = Encoder::new(&params);
    let n = params.slots();
    let v = vandermonde(params.n());
    let v_inv: Vec<Vec<Complex64>> = (0..n)
        .map(|k| (0..n).map(|j| v[j][k].conj() / n as f64).collect())
        .collect();
    let u = random(n);
    let z = mat_vec(&v, &u);
    for levels in 1..=n.trailing_zeros() as usize {
        let stc = HomomorphicDft::slots_to_coeffs(&enc, levels).unwrap();
        let cts = HomomorphicDft::coeffs_to_slots(&enc, levels).unwrap();
        assert_eq!((stc.levels(), cts.levels()), (levels, levels));
        let r = report(&z, &stc.apply_clear(&bit_reversed(&u)));
        assert!(r.bits() > 40.0, "StC in {levels}: {r}");
        let r = report(&bit_reversed(&mat_vec(&v_inv, &z)), &cts.apply_clear(&z));
        assert!(r.bits() > 40.0, "CtS in {levels}: {r}");
    }
    assert!(matches!(
        HomomorphicDft::coeffs_to_slots(&enc, 0),
        Err(CkksError::ValueOutOfRange(_))
    ));
    assert!(HomomorphicDft::slots_to_coeffs(&enc, 9).is_err());
    // Sparse slots: the DFT of their size, rotating within them.
    let sparse = Encoder::with_slots(&params, n / 2).unwrap();
    let stc = HomomorphicDft::slots_to_coeffs(&sparse, 2).unwrap();
    assert_eq!(stc.levels(), 2);
    assert!(
        stc.rotations()
            .iter()
            .all(|r| r.unsigned_abs() < n as u64 / 2)
    );
}

#[test]
fn coeffs_to_slots_then_slots_to_coeffs_on_ciphertexts() {
    let params = CkksParameters::new_insecure_for_tests(test_literal(10, 6), 40).unwrap();
    let enc = Encoder::new(&params);
    let (cts, stc) = (
        HomomorphicDft::coeffs_to_slots(&enc, 3).unwrap(),
        HomomorphicDft::slots_to_coeffs(&enc, 3).unwrap(),
    );
    let mut rotations = cts.rotations();
    rotations.extend(stc.rotations());
    let keys = KeySet::generate(&params, &rotations, false).unwrap();
    let eval = Evaluator::new(&params, keys.evaluation_keys());
    let z = random(params.slots());
    let ct = keys
        .encrypt(&enc.encode(&z, 6, params.default_scale()).unwrap())
        .unwrap();
    let u = cts.apply(&eval, &enc, &ct).unwrap();
    assert_eq!(u.level(), 3);
    let got = enc.decode(&keys.decrypt(&u).unwrap()).unwrap();
    let r = report(&cts.apply_clear(&z), &got);
    assert!(r.bits() > 20.0, "CtS: {r}");
    let back = stc.apply(&eval, &enc, &u).unwrap();
    assert_eq!(back.level(), 0);
    let got = enc.decode(&keys.decrypt(&back).unwrap()).unwrap();
    let r = report(&z, &got);
    assert!(r.bits() > 18.0, "StC∘CtS: {r}");
    // Not enough levels: refused before any work.
    assert!(stc.apply(&eval, &enc, &back).is_err());
}

/// Sparse slots with the parts apart: CoeffsToSlots' output y, added to
/// its conjugate, is the real parts of the plain CoeffsToSlots' output in
/// the first n of every 2n slots and the imaginary parts in the others
/// (twice over), and SlotsToCoeffs takes that back to the slots, in the
/// clear for every level count. Refused where 2n slots do not fit.
#[test]
fn split_parts_make_one_real_vector_and_join_again() {
    let params = CkksParameters::new_insecure_for_tests(test_literal(9, 2), 40).unwrap();
    let full = params.slots();
    for n in [2, 8, full / 2] {
        let enc = Encoder::with_slots(&params, n).unwrap();
        let z = random(n);
        for levels in 1..=n.trailing_zeros() as usize {
            let cts = HomomorphicDft::coeffs_to_slots(&enc, levels).unwrap();
            let split = HomomorphicDft::coeffs_to_slots_split(&enc, levels).unwrap();
            let stc = HomomorphicDft::slots_to_coeffs_joined(&enc, levels).unwrap();
            assert_eq!((split.levels(), stc.levels()), (levels, levels));
            let u = cts.apply_clear(&z);
            let y = split.apply_clear(&z);
            assert_eq!(y.len(), 2 * n);
            let parts: Vec<Complex64> = y.iter().map(|v| v + v.conj()).collect();
            let want: Vec<Complex64> = (0..2 * n)
                .map(|k| Complex64::new(2.0 * if k < n { u[k].re } else { u[k - n].im }, 0.0))
                .collect();
            let r = report(&want, &parts);
            assert!(r.bits() > 40.0, "{n} slots, {levels} levels, split: {r}");
            let halved: Vec<Complex64> = parts.iter().map(|v| v / 2.0).collect();
            let back = stc.apply_clear(&halved);
            assert_eq!(back.len(), n);
            let r = report(&z, &back);
            assert!(r.bits() > 40.0, "{n} slots, {levels} levels, joined: {r}");
            // Twice the slots: rotations stay below 2n.
            for r in split.rotations().into_iter().chain(stc.rotations()) {
                assert!(r.unsigned_abs() < 2 * n as u64, "{n} slots: rotation {r}");
            }
        }
    }
    let enc = Encoder::new(&params);
    assert!(matches!(
        HomomorphicDft::coeffs_to_slots_split(&enc, 2),
        Err(CkksError::ValueOutOfRange(_))
    ));
    assert!(HomomorphicDft::slots_to_coeffs_joined(&enc, 2).is_err());
}
