//! One production-size run (N = 2^16, log QP ≈ 1732: the Lattigo anchor
//! set's Q, our P): keys, encryption, multiplication, rotation, with precision bounds.
//! Meant for release builds (CI runs `cargo test --release`).

use hecloud_ckks::{precision::report, *};
use num_complex::Complex64;

#[test]
fn preset_n16_multiply_and_rotate() {
    let params = Preset::N16.build().unwrap();
    assert!(params.rlwe().is_secure());
    assert!((params.rlwe().log_qp() - 1732.0).abs() < 1.0);
    let keys = KeySet::generate(&params, &[1], false).unwrap();
    let enc = Encoder::new(&params);
    let eval = Evaluator::new(&params, keys.evaluation_keys());
    let slots = params.slots();
    let mut s = hecloud_math::testing::sampler();
    let mut f = || (s.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
    let a: Vec<Complex64> = (0..slots).map(|_| Complex64::new(f(), f())).collect();
    let b: Vec<Complex64> = (0..slots).map(|_| Complex64::new(f(), f())).collect();
    let top = params.max_level();
    let ca = keys
        .encrypt(&enc.encode(&a, top, params.default_scale()).unwrap())
        .unwrap();
    let cb = keys
        .encrypt_sk(&enc.encode(&b, top, params.default_scale()).unwrap())
        .unwrap();
    let prod = eval.mul_relin_rescale(&ca, &cb).unwrap();
    let want: Vec<Complex64> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
    let r = report(&want, &enc.decode(&keys.decrypt(&prod).unwrap()).unwrap());
    assert!(r.bits() > 20.0, "mul at N=2^16: {r}");
    let rot = eval.rotate(&prod, 1).unwrap();
    let want: Vec<Complex64> = (0..slots).map(|i| want[(i + 1) % slots]).collect();
    let r = report(&want, &enc.decode(&keys.decrypt(&rot).unwrap()).unwrap());
    assert!(r.bits() > 20.0, "rotate at N=2^16: {r}");
}
