//! Polynomials over Z_t on encrypted slots against plain evaluation, and the
//! comparison of whole integers against `<` on random and edge inputs.

use hecloud_bgv::params::test_literal;
use hecloud_bgv::poly::{LessThan, eval_poly, interpolate};
use hecloud_bgv::*;
use hecloud_math::Modulus;

const T: u64 = 65537;

fn random_vec(n: usize, below: u64) -> Vec<u64> {
    let mut s = hecloud_math::testing::sampler();
    (0..n).map(|_| s.uniform_mod(below)).collect()
}

fn horner(t: &Modulus, coeffs: &[u64], x: u64) -> u64 {
    coeffs
        .iter()
        .rev()
        .fold(0, |acc, &c| t.add(t.mul(acc, x), c))
}

#[test]
fn interpolation_goes_through_its_points() {
    let t = Modulus::new(T).unwrap();
    let ys = random_vec(40, T);
    let points: Vec<(u64, u64)> = ys
        .iter()
        .enumerate()
        .map(|(i, &y)| (i as u64 * 7, y))
        .collect();
    let c = interpolate(&t, &points).unwrap();
    assert_eq!(c.len(), 40);
    for &(x, y) in &points {
        assert_eq!(horner(&t, &c, x), y);
    }
    assert!(
        interpolate(&t, &[(1, 2), (T + 1, 3)]).is_err(),
        "coinciding points"
    );
}

#[test]
fn encrypted_polynomials_match_plain_evaluation() {
    let params = BgvParameters::new_insecure_for_tests(test_literal(10, 8, T)).unwrap();
    let keys = KeySet::generate(&params, &[], false).unwrap();
    let (enc, eval) = (
        Encoder::new(&params),
        Evaluator::new(&params, keys.evaluation_keys()),
    );
    let t = params.t_modulus();
    let xs = random_vec(params.n(), T);
    let ct = keys.encrypt(&enc.encode(&xs).unwrap()).unwrap();
    for degree in [0usize, 1, 2, 5, 16, 17, 40, 100] {
        let mut coeffs = random_vec(degree + 1, T);
        coeffs[degree] = coeffs[degree].max(1);
        let got = enc
            .decode(
                &keys
                    .decrypt(&eval_poly(&eval, &ct, &coeffs).unwrap())
                    .unwrap(),
            )
            .unwrap();
        let want: Vec<u64> = xs.iter().map(|&x| horner(t, &coeffs, x)).collect();
        assert_eq!(got, want, "degree {degree}");
    }
}

#[test]
fn whole_integers_compare_exactly() {
    let params = BgvParameters::new_insecure_for_tests(test_literal(10, 12, T)).unwrap();
    let keys = KeySet::generate(&params, &[], false).unwrap();
    let (enc, eval) = (
        Encoder::new(&params),
        Evaluator::new(&params, keys.evaluation_keys()),
    );
    for bound in [2u64, 16, 256] {
        let lt = LessThan::new(&params, bound).unwrap();
        assert_eq!(lt.coefficients().len() as u64, 2 * bound - 1);
        let n = params.n();
        let mut x = random_vec(n, bound);
        let mut y = random_vec(n, bound);
        // Edges: equal, off by one both ways, the extremes.
        let m = bound - 1;
        for (i, (a, b)) in [
            (0, 0),
            (m, m),
            (0, m),
            (m, 0),
            (1, 0),
            (0, 1),
            (m - 1, m),
            (m, m - 1),
        ]
        .into_iter()
        .enumerate()
        {
            x[i] = a;
            y[i] = b;
        }
        let cx = keys.encrypt(&enc.encode(&x).unwrap()).unwrap();
        let cy = keys.encrypt(&enc.encode(&y).unwrap()).unwrap();
        let got = enc
            .decode(&keys.decrypt(&lt.eval(&eval, &cx, &cy).unwrap()).unwrap())
            .unwrap();
        let want: Vec<u64> = x.iter().zip(&y).map(|(a, b)| (a < b) as u64).collect();
        assert_eq!(got, want, "bound {bound}");
    }
    assert!(matches!(
        LessThan::new(&params, T / 2 + 1),
        Err(BgvError::PlaintextModulus(_))
    ));
}
