//! NTT-friendly primes: q prime with q ≡ 1 (mod 2n), and their roots of unity.

use crate::error::{MathError, Result};
use crate::modular::Modulus;

/// Deterministic Miller–Rabin for every u64 (the first 12 primes as bases
/// are a proven witness set below 3.3·10^24).
///
/// ```
/// use hecloud_math::prime::is_prime;
/// assert!(is_prime(1_000_000_007));
/// assert!(!is_prime(3_215_031_751)); // strong pseudoprime to bases 2, 3, 5, 7
/// ```
pub fn is_prime(n: u64) -> bool {
    const BASES: [u64; 12] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37];
    if n < 2 {
        return false;
    }
    for p in BASES {
        if n.is_multiple_of(p) {
            return n == p;
        }
    }
    let (mut d, mut s) = (n - 1, 0);
    while d % 2 == 0 {
        d /= 2;
        s += 1;
    }
    let mulmod = |a: u64, b: u64| (a as u128 * b as u128 % n as u128) as u64;
    let powmod = |mut a: u64, mut e: u64| {
        let mut r = 1u64;
        while e > 0 {
            if e & 1 == 1 {
                r = mulmod(r, a);
            }
            a = mulmod(a, a);
            e >>= 1;
        }
        r
    };
    'witness: for a in BASES {
        let mut x = powmod(a, d);
        if x == 1 || x == n - 1 {
            continue;
        }
        for _ in 1..s {
            x = mulmod(x, x);
            if x == n - 1 {
                continue 'witness;
            }
        }
        return false;
    }
    true
}

/// `count` distinct primes of exactly `bits` bits with q ≡ 1 (mod 2n),
/// largest first, skipping any listed in `exclude`. Above 50 bits they are
/// ≡ 1 mod 2^32 as well: the 64-bit SIMD kernels without a 64-bit
/// multiplier (AVX2) then form a quotient's multiple of q with one 32-bit
/// product instead of three (the NTT of a 60-bit limb 14–16 % faster).
///
/// ```
/// use hecloud_math::prime::ntt_primes;
/// let qs = ntt_primes(60, 1 << 16, 3, &[]).unwrap();
/// assert_eq!(qs.len(), 3);
/// assert!(qs.iter().all(|q| q % (1 << 32) == 1 && 64 - q.leading_zeros() == 60));
/// ```
pub fn ntt_primes(bits: u32, n: usize, count: usize, exclude: &[u64]) -> Result<Vec<u64>> {
    let step = if bits > 50 { 1 << 32 } else { 1 };
    ntt_primes_stepping(bits, n, step, count, exclude)
}

/// [`ntt_primes`] without the form above 50 bits: primes ≡ 1 (mod 2n) only
/// (tests of the kernels' general path).
///
/// ```
/// use hecloud_math::prime::ntt_primes_any_form;
/// let q = ntt_primes_any_form(60, 1 << 16, 1, &[]).unwrap()[0];
/// assert_eq!(q % (1 << 17), 1);
/// ```
pub fn ntt_primes_any_form(bits: u32, n: usize, count: usize, exclude: &[u64]) -> Result<Vec<u64>> {
    ntt_primes_stepping(bits, n, 1, count, exclude)
}

/// Primes ≡ 1 mod lcm(2n, step) (both powers of two).
fn ntt_primes_stepping(
    bits: u32,
    n: usize,
    step: u64,
    count: usize,
    exclude: &[u64],
) -> Result<Vec<u64>> {
    if !(20..=61).contains(&bits) {
        return Err(MathError::InvalidPrimeBits(bits));
    }
    if !n.is_power_of_two() || n < 2 {
        return Err(MathError::InvalidDegree(n));
    }
    let two_n = (2 * n as u64).max(step);
    let lo = 1u64 << (bits - 1);
    // Largest candidate ≡ 1 mod 2n below 2^bits.
    let mut q = ((1u64 << bits) - 1) / two_n * two_n + 1;
    let mut out = Vec::with_capacity(count);
    while out.len() < count && q > lo {
        if is_prime(q) && !exclude.contains(&q) {
            out.push(q);
        }
        q -= two_n;
    }
    if out.len() < count {
        return Err(MathError::NotEnoughPrimes {
            wanted: count,
            found: out.len(),
            bits,
            modulus: two_n,
        });
    }
    Ok(out)
}

/// The smallest primitive 2n-th root of unity ψ modulo the NTT-friendly prime
/// `q` (smallest so the choice is canonical across runs and machines).
///
/// ```
/// use hecloud_math::{prime::primitive_root_2n, Modulus};
/// let q = 12289; // ≡ 1 mod 2048
/// let psi = primitive_root_2n(q, 1024).unwrap();
/// let m = Modulus::new(q).unwrap();
/// assert_eq!(m.pow(psi, 1024), q - 1); // ψ^n = -1
/// ```
pub fn primitive_root_2n(q: u64, n: usize) -> Result<u64> {
    let two_n = 2 * n as u64;
    if !is_prime(q) || !(q - 1).is_multiple_of(two_n) || !n.is_power_of_two() {
        return Err(MathError::NotNttFriendly { q, n });
    }
    let m = Modulus::new(q)?;
    let cofactor = (q - 1) / two_n;
    // g^((q-1)/2n) has order dividing 2n; it is exactly 2n iff its n-th power is -1.
    let mut best = None;
    for g in 2..q {
        let psi = m.pow(g, cofactor);
        if m.pow(psi, n as u64) == q - 1 {
            best = Some(psi);
            break;
        }
    }
    let psi = best.ok_or(MathError::NotNttFriendly { q, n })?;
    // Canonical: the smallest of the primitive roots ψ^(odd k).
    let psi2 = m.mul(psi, psi);
    let (mut cur, mut min) = (psi, psi);
    for _ in 1..n {
        cur = m.mul(cur, psi2);
        min = min.min(cur);
    }
    Ok(min)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial_division(n: u64) -> bool {
        n >= 2
            && (2..)
                .take_while(|d| d * d <= n)
                .all(|d| !n.is_multiple_of(d))
    }

    #[test]
    fn miller_rabin_matches_trial_division() {
        for n in 0..20_000 {
            assert_eq!(is_prime(n), trial_division(n), "n = {n}");
        }
        for n in (1u64 << 40)..(1u64 << 40) + 2000 {
            assert_eq!(is_prime(n), trial_division(n), "n = {n}");
        }
    }

    #[test]
    fn named_pseudoprimes_and_large_primes() {
        // Carmichael numbers and strong pseudoprimes to several small bases.
        for c in [
            561u64,
            1105,
            3_215_031_751,
            2_152_302_898_747,
            3_474_749_660_383,
        ] {
            assert!(!is_prime(c), "{c}");
        }
        assert!(!is_prime(3_825_123_056_546_413_051));
        assert!(is_prime(0xffff_ffff_ffff_ffc5)); // largest 64-bit prime
        assert!(is_prime((1 << 61) - 1)); // Mersenne
        assert!(!is_prime(u64::MAX));
    }

    #[test]
    fn primes_have_requested_shape() {
        for bits in [20, 30, 50, 51, 60, 61] {
            let n = 1 << 12;
            let qs = ntt_primes(bits, n, 4, &[]).unwrap();
            let mut sorted = qs.clone();
            sorted.dedup();
            assert_eq!(sorted.len(), 4);
            for q in qs {
                assert!(is_prime(q));
                assert_eq!(q % (2 * n as u64), 1);
                assert_eq!(64 - q.leading_zeros(), bits);
                // The form the AVX2 kernels use, above 50 bits only.
                assert_eq!(q % (1 << 32) == 1, bits > 50, "q = {q}");
            }
            let any = ntt_primes_any_form(bits, n, 1, &[]).unwrap()[0];
            assert!(is_prime(any) && any % (2 * n as u64) == 1);
        }
        let first = ntt_primes(50, 1 << 16, 2, &[]).unwrap();
        let next = ntt_primes(50, 1 << 16, 2, &first).unwrap();
        assert!(next.iter().all(|q| !first.contains(q)));
    }

    #[test]
    fn errors_for_bad_requests() {
        assert_eq!(
            ntt_primes(19, 1024, 1, &[]),
            Err(MathError::InvalidPrimeBits(19))
        );
        assert_eq!(
            ntt_primes(62, 1024, 1, &[]),
            Err(MathError::InvalidPrimeBits(62))
        );
        assert!(matches!(
            ntt_primes(20, 1 << 17, 100, &[]),
            Err(MathError::NotEnoughPrimes { .. })
        ));
        assert!(matches!(
            primitive_root_2n(12289 + 2, 1024),
            Err(MathError::NotNttFriendly { .. })
        ));
        assert!(matches!(
            primitive_root_2n(97, 1024),
            Err(MathError::NotNttFriendly { .. })
        ));
    }

    #[test]
    fn root_has_exact_order() {
        for &n in &[1024usize, 1 << 16] {
            let q = ntt_primes(60, n, 1, &[]).unwrap()[0];
            let m = Modulus::new(q).unwrap();
            let psi = primitive_root_2n(q, n).unwrap();
            assert_eq!(m.pow(psi, 2 * n as u64), 1);
            assert_eq!(m.pow(psi, n as u64), q - 1);
        }
    }
}
