//! RNS polynomial operations against big-integer references.

use std::sync::Arc;

use hecloud_math::prime::ntt_primes;
use hecloud_math::{BaseConverter, Domain, MathError, RnsBasis, RnsPoly};
use num_bigint::{BigInt, BigUint};
use num_traits::{One, Zero};

fn basis(n: usize, bits: u32, count: usize) -> Arc<RnsBasis> {
    RnsBasis::new(n, &ntt_primes(bits, n, count, &[]).unwrap()).unwrap()
}

/// Negacyclic schoolbook product of big integers modulo Q.
fn bigint_schoolbook(a: &[BigUint], b: &[BigUint], q: &BigUint) -> Vec<BigUint> {
    let n = a.len();
    let mut pos = vec![BigUint::zero(); n];
    let mut neg = vec![BigUint::zero(); n];
    for i in 0..n {
        for j in 0..n {
            let p = &a[i] * &b[j];
            if i + j < n {
                pos[i + j] += p;
            } else {
                neg[i + j - n] += p;
            }
        }
    }
    pos.into_iter()
        .zip(neg)
        .map(|(p, m)| ((p % q) + q - (m % q)) % q)
        .collect()
}

#[test]
fn rns_product_through_crt_equals_bigint_schoolbook() {
    let mut s = hecloud_math::testing::sampler();
    for (n, bits, limbs) in [(16, 60, 1), (64, 50, 4), (256, 61, 3), (1024, 30, 2)] {
        let b = basis(n, bits, limbs);
        let mut x = s.uniform_poly(&b, Domain::Coefficient);
        let mut y = s.uniform_poly(&b, Domain::Coefficient);
        let want = bigint_schoolbook(
            &x.to_biguint().unwrap(),
            &y.to_biguint().unwrap(),
            &b.product(),
        );
        x.to_ntt();
        y.to_ntt();
        let mut z = x.mul(&y).unwrap();
        z.to_coefficient();
        assert_eq!(z.to_biguint().unwrap(), want, "n={n} limbs={limbs}");
    }
}

#[test]
fn signed_and_bigint_round_trips() {
    let b = basis(64, 50, 3);
    let mut s = hecloud_math::testing::sampler();
    let e = s.gaussian(64);
    let p = RnsPoly::from_signed(&b, &e).unwrap();
    let back = p.to_bigint_centered().unwrap();
    assert_eq!(back, e.iter().map(|&v| BigInt::from(v)).collect::<Vec<_>>());
    let big: Vec<BigInt> = (0..64)
        .map(|i| (BigInt::one() << (100 + i)) - BigInt::from(i * 7919))
        .collect();
    let p = RnsPoly::from_bigints(&b, &big).unwrap();
    let q = BigInt::from(b.product());
    let want: Vec<BigUint> = big
        .iter()
        .map(|v| ((v % &q + &q) % &q).to_biguint().unwrap())
        .collect();
    assert_eq!(p.to_biguint().unwrap(), want);
}

#[test]
fn automorphism_commutes_with_ntt() {
    let mut s = hecloud_math::testing::sampler();
    for n in [16usize, 1024, 1 << 12] {
        let b = basis(n, 60, 2);
        let a = s.uniform_poly(&b, Domain::Coefficient);
        for k in [1, 3, 5, 2 * n - 1, 5usize.pow(7) % (2 * n), 2 * n + 3] {
            let mut coeff_then_ntt = a.automorphism(k).unwrap();
            coeff_then_ntt.to_ntt();
            let mut a_ntt = a.clone();
            a_ntt.to_ntt();
            let ntt_then = a_ntt.automorphism(k).unwrap();
            assert_eq!(coeff_then_ntt, ntt_then, "n={n} k={k}");
        }
        // σ_k then σ_{k^-1 mod 2n} is the identity; σ_{-1} maps X to -X^(n-1).
        let k = 5usize;
        let k_inv = (1..2 * n)
            .step_by(2)
            .find(|i| i * k % (2 * n) == 1)
            .unwrap();
        assert_eq!(a.automorphism(k).unwrap().automorphism(k_inv).unwrap(), a);
        let mut x = vec![0i64; n];
        x[1] = 1;
        let mut want = vec![0i64; n];
        want[n - 1] = -1;
        let xp = RnsPoly::from_signed(&b, &x).unwrap();
        assert_eq!(
            xp.automorphism(2 * n - 1).unwrap(),
            RnsPoly::from_signed(&b, &want).unwrap()
        );
    }
}

#[test]
fn rescale_rounds_like_bigint_division_in_both_domains() {
    let mut s = hecloud_math::testing::sampler();
    let b = basis(256, 50, 4);
    let x = s.uniform_poly(&b, Domain::Coefficient);
    let ql = BigUint::from(b.moduli()[3].value());
    let q_rest = b.prefix(3).unwrap().product();
    let want: Vec<BigUint> = x
        .to_biguint()
        .unwrap()
        .into_iter()
        .map(|v| ((v + (&ql >> 1)) / &ql) % &q_rest)
        .collect();
    let mut c = x.clone();
    c.rescale().unwrap();
    assert_eq!(c.limbs(), 3);
    assert_eq!(c.to_biguint().unwrap(), want);
    assert_eq!(x.rescaled().unwrap(), c);
    let mut nt = x.clone();
    nt.to_ntt();
    let mut out_of_place = nt.rescaled().unwrap();
    nt.rescale().unwrap();
    assert_eq!(out_of_place, nt);
    nt.to_coefficient();
    assert_eq!(nt, c);
    out_of_place.to_coefficient();
    assert_eq!(out_of_place, c);
    // Large enough for the limbs to be divided on several threads.
    let big = basis(1 << 12, 50, 9);
    let mut y = s.uniform_poly(&big, Domain::Ntt);
    let z = y.rescaled().unwrap();
    y.rescale().unwrap();
    assert_eq!(z, y);
    let mut one = RnsPoly::zero(&b.prefix(1).unwrap(), Domain::Coefficient);
    assert_eq!(
        one.rescaled(),
        Err(MathError::TooFewModuli { have: 1, need: 2 })
    );
    assert_eq!(
        one.rescale(),
        Err(MathError::TooFewModuli { have: 1, need: 2 })
    );
    assert_eq!(
        one.drop_last_limb(),
        Err(MathError::TooFewModuli { have: 1, need: 2 })
    );
}

#[test]
fn mismatched_operands_are_typed_errors() {
    let a = RnsPoly::zero(&basis(64, 50, 2), Domain::Ntt);
    let other_primes = RnsPoly::zero(&basis(64, 40, 2), Domain::Ntt);
    let other_degree = RnsPoly::zero(&basis(128, 50, 2), Domain::Ntt);
    let coeff = RnsPoly::zero(a.basis(), Domain::Coefficient);
    assert_eq!(a.add(&other_primes), Err(MathError::BasisMismatch));
    assert_eq!(a.mul(&other_degree), Err(MathError::BasisMismatch));
    assert!(matches!(
        a.sub(&coeff),
        Err(MathError::DomainMismatch { .. })
    ));
    assert!(matches!(
        coeff.mul(&coeff),
        Err(MathError::DomainMismatch { .. })
    ));
    assert!(matches!(
        a.automorphism(4),
        Err(MathError::InvalidGaloisElement { .. })
    ));
    assert!(matches!(
        RnsPoly::from_signed(a.basis(), &[0; 3]),
        Err(MathError::LengthMismatch {
            expected: 64,
            found: 3
        })
    ));
    let q0 = a.basis().moduli()[0].value();
    assert_eq!(
        RnsPoly::from_limbs(a.basis(), Domain::Ntt, vec![q0; 128]),
        Err(MathError::ResidueOutOfRange { value: q0, q: q0 })
    );
    assert!(matches!(
        RnsPoly::from_limbs(a.basis(), Domain::Ntt, vec![0; 127]),
        Err(MathError::LengthMismatch {
            expected: 128,
            found: 127
        })
    ));
    assert!(matches!(
        RnsBasis::new(64, &[]),
        Err(MathError::TooFewModuli { .. })
    ));
    let q = ntt_primes(50, 64, 1, &[]).unwrap()[0];
    assert_eq!(
        RnsBasis::new(64, &[q, q]).unwrap_err(),
        MathError::DuplicateModulus(q)
    );
    assert_eq!(
        basis(64, 50, 2).concat(&basis(64, 50, 1)).unwrap_err(),
        MathError::DuplicateModulus(q)
    );
    let p = basis(64, 61, 2);
    let conv = BaseConverter::new(a.basis(), &p).unwrap();
    assert!(conv.convert(&a).is_err()); // NTT domain
}

#[test]
fn arithmetic_matches_bigint_reference() {
    let mut s = hecloud_math::testing::sampler();
    let b = basis(64, 61, 3);
    let q = b.product();
    let x = s.uniform_poly(&b, Domain::Coefficient);
    let y = s.uniform_poly(&b, Domain::Coefficient);
    let (xb, yb) = (x.to_biguint().unwrap(), y.to_biguint().unwrap());
    let sum = x.add(&y).unwrap().to_biguint().unwrap();
    let diff = x.sub(&y).unwrap().to_biguint().unwrap();
    let mut neg = x.clone();
    neg.neg_assign();
    assert_eq!(x.neg(), neg);
    let mut scaled = x.clone();
    scaled.mul_scalar_assign(u64::MAX);
    let cs: Vec<u64> = b.moduli().iter().map(|m| m.value() - 5).collect();
    let times_cs = x.mul_rns_scalar(&cs).unwrap().to_biguint().unwrap();
    let minus_five = &q - BigUint::from(5u32);
    let negb = neg.to_biguint().unwrap();
    let scaledb = scaled.to_biguint().unwrap();
    for j in 0..64 {
        assert_eq!(sum[j], (&xb[j] + &yb[j]) % &q);
        assert_eq!(diff[j], (&xb[j] + &q - &yb[j]) % &q);
        assert_eq!(negb[j], (&q - &xb[j]) % &q);
        assert_eq!(scaledb[j], (&xb[j] * BigUint::from(u64::MAX)) % &q);
        assert_eq!(times_cs[j], (&xb[j] * &minus_five) % &q);
    }
    assert_eq!(
        x.mul_rns_scalar(&cs[..2]),
        Err(MathError::LengthMismatch {
            expected: 3,
            found: 2
        })
    );
}

/// The prefix operations (a plaintext at a higher level than the
/// ciphertext it meets) against big integers mod the shorter basis's
/// product, and the typed refusals of operands whose basis does not
/// extend the target's.
#[test]
fn prefix_operations_match_bigint_reference() {
    let mut s = hecloud_math::testing::sampler();
    let (n, primes) = (64, ntt_primes(50, 64, 4, &[]).unwrap());
    let long = RnsBasis::new(n, &primes).unwrap();
    let short = RnsBasis::new(n, &primes[..2]).unwrap();
    let q = short.product();
    let mut acc = s.uniform_poly(&short, Domain::Ntt);
    let x = s.uniform_poly(&short, Domain::Ntt);
    let p = s.uniform_poly(&long, Domain::Ntt);
    let cs: Vec<u64> = short.moduli().iter().map(|m| m.value() - 3).collect();
    // The references: the NTT domain is pointwise, so residues compare as
    // integers modulo the short product.
    let coeff = |v: &RnsPoly| {
        let mut w = v.clone();
        w.set_domain_unchecked(Domain::Coefficient);
        w.to_biguint().unwrap()
    };
    let p_short = RnsPoly::from_limbs(&short, Domain::Ntt, p.data()[..2 * n].to_vec()).unwrap();
    let (a0, x0, p0) = (coeff(&acc), coeff(&x), coeff(&p_short));
    let mut prod = x.clone();
    prod.mul_prefix_assign(&p).unwrap();
    acc.mul_add_prefix_assign(&x, &p).unwrap();
    let mut scaled = x.clone();
    scaled.add_scaled_prefix_assign(&p, &cs).unwrap();
    let c_big = {
        // The constant whose residues are cs: q_i − 3 ≡ −3.
        (&q - BigUint::from(3u32)) % &q
    };
    let (pr, ac, sc) = (coeff(&prod), coeff(&acc), coeff(&scaled));
    assert_eq!(x.mul_prefix(&p).unwrap(), prod);
    let (sum, diff) = (
        coeff(&x.add_prefix(&p).unwrap()),
        coeff(&x.sub_prefix(&p).unwrap()),
    );
    let shifted = coeff(&x.add_rns_scalar(&cs).unwrap());
    let mut shifted_in_place = x.clone();
    shifted_in_place.add_rns_scalar_assign(&cs).unwrap();
    assert_eq!(coeff(&shifted_in_place), shifted);
    for j in 0..n {
        assert_eq!(pr[j], (&x0[j] * &p0[j]) % &q);
        assert_eq!(ac[j], (&a0[j] + &x0[j] * &p0[j]) % &q);
        assert_eq!(sc[j], (&x0[j] + &p0[j] * &c_big) % &q);
        assert_eq!(sum[j], (&x0[j] + &p0[j]) % &q);
        assert_eq!(diff[j], (&x0[j] + &q - &p0[j]) % &q);
        assert_eq!(shifted[j], (&x0[j] + &c_big) % &q);
    }
    // A longer target than the operand, another basis, the wrong domain.
    let mut long_acc = s.uniform_poly(&long, Domain::Ntt);
    assert_eq!(
        long_acc.mul_prefix_assign(&x),
        Err(MathError::BasisMismatch)
    );
    let other = basis(n, 45, 4);
    let q_other = s.uniform_poly(&other, Domain::Ntt);
    assert_eq!(
        acc.mul_add_prefix_assign(&x, &q_other),
        Err(MathError::BasisMismatch)
    );
    assert_eq!(
        acc.add_scaled_prefix_assign(&p, &cs[..1]),
        Err(MathError::BasisMismatch)
    );
    assert_eq!(long_acc.mul_prefix(&x), Err(MathError::BasisMismatch));
    assert_eq!(x.add_prefix(&q_other), Err(MathError::BasisMismatch));
    let coeff_p = s.uniform_poly(&long, Domain::Coefficient);
    assert!(matches!(
        acc.mul_prefix_assign(&coeff_p),
        Err(MathError::DomainMismatch { .. })
    ));
    assert!(matches!(
        x.sub_prefix(&coeff_p),
        Err(MathError::DomainMismatch { .. })
    ));
    assert!(matches!(
        coeff_p.add_rns_scalar(&[1; 4]),
        Err(MathError::DomainMismatch { .. })
    ));
    let mut coeff_q = coeff_p.clone();
    assert!(matches!(
        coeff_q.add_rns_scalar_assign(&[1; 4]),
        Err(MathError::DomainMismatch { .. })
    ));
    assert_eq!(coeff_q, coeff_p);
    let mut short_cs = x.clone();
    assert!(matches!(
        short_cs.add_rns_scalar_assign(&cs[..1]),
        Err(MathError::LengthMismatch { .. })
    ));
}
