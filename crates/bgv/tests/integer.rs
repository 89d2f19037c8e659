//! Exact integer SIMD against u128 arithmetic: sums of 32- and 64-bit
//! vectors (CRT over two plaintext primes for 64 bits), the worst-case
//! noise of 2^16 terms, products, inner products and slot sums.

use hecloud_bgv::integer::{IntegerEvaluator, IntegerKeys, IntegerParameters, IntegerVector};

fn random_values(n: usize, bits: u32) -> Vec<u64> {
    let mut s = hecloud_math::testing::sampler();
    (0..n)
        .map(|_| {
            if bits == 64 {
                s.next_u64()
            } else {
                s.next_u64() >> (64 - bits)
            }
        })
        .collect()
}

fn check_sums(value_bits: u32, residues: usize) {
    let params = IntegerParameters::for_sums(13, value_bits, 1 << 16).unwrap();
    assert_eq!(params.residues().len(), residues);
    for p in params.residues() {
        assert!(p.rlwe().is_secure());
        eprintln!(
            "{value_bits}-bit sums: t = {} ({:.1} bits), {} Q primes of {} bits",
            p.t(),
            (p.t() as f64).log2(),
            p.max_level() + 1,
            p.rlwe().q_basis().moduli()[0].bits()
        );
    }
    let keys = IntegerKeys::generate(&params, false).unwrap();
    let eval = IntegerEvaluator::new(&params, &keys);
    let slots = params.slots();
    let max = if value_bits == 64 {
        u64::MAX
    } else {
        (1 << value_bits) - 1
    };
    // Random vectors, the first slots pinned to the edges 0 and 2^bits − 1.
    let vectors: Vec<Vec<u64>> = (0..40)
        .map(|_| {
            let mut v = random_values(slots, value_bits);
            v[0] = 0;
            v[1] = max;
            v
        })
        .collect();
    let cts: Vec<IntegerVector> = vectors.iter().map(|v| keys.encrypt(v).unwrap()).collect();
    let got = keys.decrypt(&eval.sum(&cts).unwrap()).unwrap();
    let want: Vec<u128> = (0..slots)
        .map(|j| vectors.iter().map(|v| v[j] as u128).sum())
        .collect();
    assert_eq!(got, want);
    // The worst case of 2^16 terms: all at the maximum. Adding one
    // ciphertext to itself 2^16 times is multiplying it by 2^16 (the noise
    // grows the same way), so the bound and the noise are both exercised.
    let full = keys.encrypt(&vec![max; slots]).unwrap();
    let scaled = IntegerVector::from_ciphertexts(
        full.ciphertexts()
            .iter()
            .zip(params.residues())
            .zip(keys.residues())
            .map(|((ct, p), k)| {
                hecloud_bgv::Evaluator::new(p, k.evaluation_keys())
                    .mul_scalar(ct, 1 << 16)
                    .unwrap()
            })
            .collect(),
    );
    let got = keys.decrypt(&scaled).unwrap();
    assert!(got.iter().all(|&x| x == (max as u128) << 16));
}

#[test]
fn sums_of_32_bit_vectors_are_exact() {
    check_sums(32, 1);
}

#[test]
fn sums_of_64_bit_vectors_are_exact_over_two_primes() {
    check_sums(64, 2);
}

#[test]
fn products_inner_products_and_slot_sums_are_exact() {
    // 32-bit values: products below 2^64, inner products of 8 below 2^67.
    let params = IntegerParameters::new(12, 68, 1, 8, false).unwrap();
    let keys = IntegerKeys::generate(&params, true).unwrap();
    let eval = IntegerEvaluator::new(&params, &keys);
    let slots = params.slots();
    let a: Vec<Vec<u64>> = (0..8).map(|_| random_values(slots, 32)).collect();
    let b: Vec<Vec<u64>> = (0..8).map(|_| random_values(slots, 32)).collect();
    let ca: Vec<_> = a.iter().map(|v| keys.encrypt(v).unwrap()).collect();
    let cb: Vec<_> = b.iter().map(|v| keys.encrypt(v).unwrap()).collect();
    let prod = keys.decrypt(&eval.mul(&ca[0], &cb[0]).unwrap()).unwrap();
    let want: Vec<u128> = (0..slots)
        .map(|j| a[0][j] as u128 * b[0][j] as u128)
        .collect();
    assert_eq!(prod, want);
    let dot = keys
        .decrypt(&eval.inner_product(&ca, &cb).unwrap())
        .unwrap();
    let want: Vec<u128> = (0..slots)
        .map(|j| (0..8).map(|i| a[i][j] as u128 * b[i][j] as u128).sum())
        .collect();
    assert_eq!(dot, want);
    // The sum of all slots of a[0] (32-bit values, 2^12 slots: below 2^44).
    let total: u128 = a[0].iter().map(|&x| x as u128).sum();
    let s = keys.decrypt(&eval.slot_sum(&ca[0]).unwrap()).unwrap();
    assert!(s.iter().all(|&x| x == total));
    // Mismatched shapes are typed errors.
    assert!(eval.inner_product(&ca[..2], &cb[..3]).is_err());
    let other = IntegerParameters::new(12, 20, 0, 2, false).unwrap();
    let other_keys = IntegerKeys::generate(&other, false).unwrap();
    assert!(other_keys.decrypt(&ca[0]).is_err());
}
