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
        assert_eq!(p.depth(), 6);
        let out = eval.evaluate_chebyshev(&ct, &p).unwrap();
        assert_eq!(out.level(), 9 - 6);
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

/// The presets' rescaling primes spread by up to 2^-20 around Δ (at
/// N = 2^16 they are ≡ 1 mod 2^17): every polynomial that fits a preset's
/// depth is planned, its result at exactly the input's scale, in exactly its
/// depth. (Before the scales were matched,
/// degree 15 failed at n17, 31 at n14 and 63 at n16.)
#[test]
fn every_preset_plans_every_degree_it_has_levels_for_at_the_input_scale() {
    for preset in Preset::ALL {
        let params = preset.build().unwrap();
        let planner = Planner::new(&params);
        let top = params.max_level();
        for d in [3usize, 7, 15, 31, 63, 127, 255] {
            let p = ChebyshevPolynomial::interpolate(|v| (2.0 * v).sin(), d, -1.0, 1.0);
            if p.depth() > top {
                continue;
            }
            // A drifted input scale is kept as it is.
            for scale in [params.default_scale(), params.default_scale() * 1.000_123] {
                let out = planner
                    .chebyshev(&CtShape::new(top, scale), &p)
                    .unwrap_or_else(|e| panic!("{} degree {d}: {e}", preset.name()))
                    .out;
                assert_eq!(top - out.level, p.depth(), "{} degree {d}", preset.name());
                assert!(
                    (out.scale / scale - 1.0).abs() < 1e-12,
                    "{} degree {d}: scale 2^{}",
                    preset.name(),
                    out.scale.log2()
                );
            }
        }
    }
}

/// Rescaling primes of 44, 45 and 46 bits in turn: the scales of the
/// Chebyshev basis spread by factors of 2, and the evaluation still
/// matches the clear polynomial at the input's scale.
#[test]
fn primes_far_from_the_scale_still_give_the_polynomial() {
    let mut literal = test_literal(11, 9);
    literal.log_q = vec![60, 45, 44, 46, 45, 44, 46, 45, 44, 46];
    let params = CkksParameters::new_insecure_for_tests(literal, 45).unwrap();
    let keys = KeySet::generate(&params, &[], false).unwrap();
    let enc = Encoder::new(&params);
    let eval = Evaluator::new(&params, keys.evaluation_keys());
    let mut s = hecloud_math::testing::sampler();
    let mut x: Vec<f64> = (0..params.slots())
        .map(|_| (s.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0)
        .collect();
    x[..3].copy_from_slice(&[-1.0, 0.0, 1.0]);
    let ct = keys
        .encrypt(&enc.encode_real(&x, 9, params.default_scale()).unwrap())
        .unwrap();
    for d in [7, 63] {
        let p = ChebyshevPolynomial::interpolate(|v| (3.0 * v).cos() / 2.0, d, -1.0, 1.0);
        let out = eval.evaluate_chebyshev(&ct, &p).unwrap();
        assert_eq!(9 - out.level(), p.depth());
        assert!((out.scale() / ct.scale() - 1.0).abs() < 1e-12);
        let got = enc.decode_real(&keys.decrypt(&out).unwrap()).unwrap();
        let want: Vec<f64> = x.iter().map(|&v| p.eval(v)).collect();
        let r = precision::report_real(&want, &got);
        assert!(r.bits() > 15.0, "degree {d}: {r}");
    }
}
