//! Chebyshev BSGS evaluation of degree-63 approximations (ReLU and a smooth
//! sign) against the same polynomials evaluated in the clear.

use hecloud_ckks::{params::test_literal, polynomial::ChebyshevPolynomial, *};

/// (name, function, allowed approximation error).
type Case = (&'static str, fn(f64) -> f64, f64);

#[test]
fn degree_63_relu_and_sign_match_plaintext() {
    let params = CkksParameters::new_insecure_for_tests(test_literal(11, 9), 45).unwrap();
    let keys = KeySet::generate(&params, &[], false).unwrap();
    let enc = Encoder::new(&params);
    let eval = Evaluator::new(&params, keys.evaluation_keys());
    let slots = params.slots();
    let x: Vec<f64> = (0..slots)
        .map(|i| -1.0 + 2.0 * i as f64 / (slots - 1) as f64)
        .collect();
    let ct = keys
        .encrypt(&enc.encode_real(&x, 9, params.default_scale()).unwrap())
        .unwrap();
    let cases: [Case; 2] = [
        ("relu", |v: f64| v.max(0.0), 0.02),
        ("sign", |v: f64| (20.0 * v).tanh(), 0.05),
    ];
    for (name, f, approx) in cases {
        let p = ChebyshevPolynomial::interpolate(f, 63, -1.0, 1.0);
        assert_eq!(p.depth(), 7);
        let out = eval.evaluate_chebyshev(&ct, &p).unwrap();
        assert_eq!(out.level(), 9 - 7);
        let got = enc.decode_real(&keys.decrypt(&out).unwrap()).unwrap();
        let want: Vec<f64> = x.iter().map(|&v| p.eval(v)).collect();
        let r = precision::report_real(&want, &got);
        assert!(r.bits() > 15.0, "{name}: {r}");
        // And the polynomial does approximate the function.
        let worst = x
            .iter()
            .map(|&v| (p.eval(v) - f(v)).abs())
            .fold(0.0, f64::max);
        assert!(worst < approx, "{name}: approximation error {worst}");
    }
    // An interval other than [-1, 1] costs one more level.
    let p = ChebyshevPolynomial::interpolate(|v| v * v, 7, -2.0, 2.0);
    let out = eval.evaluate_chebyshev(&ct, &p).unwrap();
    let got = enc.decode_real(&keys.decrypt(&out).unwrap()).unwrap();
    assert!((got[10] - x[10] * x[10]).abs() < 1e-4);
    // With a flag that stays down, the cancellable form is the same
    // evaluation; with it raised, it stops (before its first key switch).
    let p = ChebyshevPolynomial::interpolate(|v| (3.0 * v).sin(), 63, -1.0, 1.0);
    let down = std::sync::atomic::AtomicBool::new(false);
    assert_eq!(
        eval.evaluate_chebyshev_cancellable(&ct, &p, &down).unwrap(),
        eval.evaluate_chebyshev(&ct, &p).unwrap()
    );
    let raised = std::sync::atomic::AtomicBool::new(true);
    assert!(matches!(
        eval.evaluate_chebyshev_cancellable(&ct, &p, &raised),
        Err(CkksError::Cancelled)
    ));
    // Not enough levels: a typed error.
    let low = eval.drop_level(&ct, 3).unwrap();
    let p = ChebyshevPolynomial::interpolate(|v| v, 63, -1.0, 1.0);
    assert!(matches!(
        eval.evaluate_chebyshev(&low, &p),
        Err(CkksError::Polynomial(_))
    ));
}
