//! The planner predicts every evaluator operation: the result's level,
//! scale (to the bit) and degree, and the error where the evaluator
//! refuses.

use std::sync::Arc;

use hecloud_ckks::plan::{CtShape, Planner, PtShape, Step};
use hecloud_ckks::polynomial::ChebyshevPolynomial;
use hecloud_ckks::{CkksError, CkksParameters, Encoder, Evaluator, KeySet, params::test_literal};
use hecloud_rlwe::Ciphertext;

struct Fixture {
    params: Arc<CkksParameters>,
    keys: KeySet,
    enc: Encoder,
    eval: Evaluator,
}

fn fixture() -> Fixture {
    let params = CkksParameters::new_insecure_for_tests(test_literal(10, 6), 45).unwrap();
    let keys = KeySet::generate(&params, &[1, 2, 4], true).unwrap();
    Fixture {
        enc: Encoder::new(&params),
        eval: Evaluator::new(&params, keys.evaluation_keys()),
        params,
        keys,
    }
}

impl Fixture {
    fn encrypt(&self, level: usize, scale: f64) -> Ciphertext {
        let x: Vec<f64> = (0..16).map(|i| (i as f64 / 16.0) - 0.5).collect();
        self.keys
            .encrypt(&self.enc.encode_real(&x, level, scale).unwrap())
            .unwrap()
    }
}

/// The plan and the run agree: same shape, or the same error.
#[track_caller]
fn agree(plan: Result<Step, CkksError>, run: Result<Ciphertext, CkksError>) -> Option<Ciphertext> {
    match (plan, run) {
        (Ok(p), Ok(c)) => {
            let got = CtShape::of(&c);
            assert_eq!((got.level, got.degree), (p.out.level, p.out.degree));
            assert_eq!(got.scale.to_bits(), p.out.scale.to_bits());
            Some(c)
        }
        (Err(a), Err(b)) => {
            assert_eq!(a, b);
            None
        }
        (p, r) => panic!("plan {p:?}, run {:?}", r.map(|c| CtShape::of(&c))),
    }
}

#[test]
fn every_operation_is_planned_as_it_runs() {
    let f = fixture();
    let (ev, plan) = (&f.eval, Planner::new(&f.params));
    let d = f.params.default_scale();
    let x = f.encrypt(6, d);
    let y = f.encrypt(4, d);
    let s = |c: &Ciphertext| CtShape::of(c);

    let sq = agree(
        plan.mul_relin_rescale(&s(&x), &s(&x)),
        ev.mul_relin_rescale(&x, &x),
    )
    .unwrap();
    agree(plan.add(&s(&sq), &s(&y)), ev.add(&sq, &y)).unwrap();
    agree(plan.sub(&s(&y), &s(&sq)), ev.sub(&y, &sq)).unwrap();
    let t = agree(plan.mul(&s(&x), &s(&y)), ev.mul(&x, &y)).unwrap();
    let r = agree(plan.relinearize(&s(&t)), ev.relinearize(&t)).unwrap();
    let r = agree(plan.rescale(&s(&r)), ev.rescale(&r)).unwrap();
    agree(plan.mul_const(&s(&r), 0.3), ev.mul_const(&r, 0.3)).unwrap();
    agree(plan.mul_const(&s(&r), -7.0), ev.mul_const(&r, -7.0)).unwrap();
    agree(
        Ok(plan.mul_const_raw(&s(&r), 1e3)),
        ev.mul_const_raw(&r, 0.5, 1e3),
    )
    .unwrap();
    agree(plan.rotate(&s(&r), 2), ev.rotate(&r, 2)).unwrap();
    agree(plan.rotate(&s(&r), 512), ev.rotate(&r, 512)).unwrap();
    agree(plan.conjugate(&s(&r)), ev.conjugate(&r)).unwrap();
    agree(plan.rotate_and_sum(&s(&r), 8), ev.rotate_and_sum(&r, 8)).unwrap();
    agree(plan.drop_level(&s(&r), 1), ev.drop_level(&r, 1)).unwrap();
    let pt = f.enc.encode_real(&[0.25; 8], 6, f.params.q_f64(3)).unwrap();
    agree(
        plan.mul_plain(&s(&r), &PtShape::of(&pt)),
        ev.mul_plain(&r, &pt),
    )
    .unwrap();
    let pt = f.enc.encode_real(&[0.25; 8], 6, r.scale()).unwrap();
    agree(
        plan.add_plain(&s(&r), &PtShape::of(&pt)),
        ev.add_plain(&r, &pt),
    )
    .unwrap();

    // The refusals.
    let low = ev.drop_level(&x, 0).unwrap();
    agree(plan.rescale(&s(&low)), ev.rescale(&low));
    agree(
        plan.mul_relin_rescale(&s(&low), &s(&x)),
        ev.mul_relin_rescale(&low, &x),
    );
    agree(plan.mul_const(&s(&low), 0.5), ev.mul_const(&low, 0.5));
    agree(plan.add(&s(&t), &s(&x)), ev.add(&t, &x));
    agree(plan.mul(&s(&t), &s(&x)), ev.mul(&t, &x));
    agree(plan.rotate(&s(&t), 1), ev.rotate(&t, 1));
    agree(plan.relinearize(&s(&x)), ev.relinearize(&x));
    agree(plan.drop_level(&s(&y), 5), ev.drop_level(&y, 5));
    agree(plan.rotate_and_sum(&s(&x), 3), ev.rotate_and_sum(&x, 3));
    let pt_low = f.enc.encode_real(&[0.25; 8], 2, d).unwrap();
    agree(
        plan.add_plain(&s(&x), &PtShape::of(&pt_low)),
        ev.add_plain(&x, &pt_low),
    );
    agree(
        plan.mul_plain(&s(&x), &PtShape::of(&pt_low)),
        ev.mul_plain(&x, &pt_low),
    );
    let pt_2d = f.enc.encode_real(&[0.25; 8], 6, 2.0 * d).unwrap();
    agree(
        plan.sub_plain(&s(&x), &PtShape::of(&pt_2d)),
        ev.sub_plain(&x, &pt_2d),
    );
}

#[test]
fn polynomial_plans_match_the_evaluation() {
    let f = fixture();
    let plan = Planner::new(&f.params);
    let x = f.encrypt(6, f.params.default_scale());
    for (d, a, b) in [
        (3, -1.0, 1.0),
        (15, -1.0, 1.0),
        (7, -2.0, 2.0),
        (1, -1.0, 3.0),
    ] {
        let p = ChebyshevPolynomial::interpolate(|v| (2.0 * v).sin(), d, a, b);
        let planned = plan.chebyshev(&CtShape::of(&x), &p).unwrap();
        let out = f.eval.evaluate_chebyshev(&x, &p).unwrap();
        assert_eq!(CtShape::of(&out).level, planned.out.level, "degree {d}");
        assert_eq!(
            out.scale().to_bits(),
            planned.out.scale.to_bits(),
            "degree {d}"
        );
        assert!(x.level() - out.level() <= planned.depth, "degree {d}");
        assert!(planned.key_switches >= 1 && planned.rescales >= planned.key_switches);
    }
    // Too deep for the ciphertext: both refuse the same way.
    let p = ChebyshevPolynomial::interpolate(|v| v, 63, -1.0, 1.0);
    let low = f.eval.drop_level(&x, 3).unwrap();
    assert_eq!(
        plan.chebyshev(&CtShape::of(&low), &p).unwrap_err(),
        f.eval.evaluate_chebyshev(&low, &p).unwrap_err()
    );
}
