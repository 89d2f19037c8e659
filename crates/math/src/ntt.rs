//! Negacyclic number-theoretic transform over Z_q\[X\]/(X^n + 1).
//!
//! The forward transform is Cooley–Tukey with ψ merged into the twiddles
//! (no pre-multiplication by powers of ψ) and Harvey's lazy butterflies:
//! values stay in [0, 4q) between stages and are fully reduced at the end.
//! The inverse is Gentleman–Sande with n⁻¹ merged into the last stage.
//! Outputs of the forward transform are in bit-reversed order: slot `p`
//! holds the evaluation at ψ^(2·brev(p)+1). Both transforms take inputs in
//! [0, q) and return fully reduced outputs, so every backend's output is the
//! same canonical vector.

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2fma;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512ifma;
#[cfg(target_arch = "x86_64")]
pub(crate) mod simd;

/// Whether the 52-bit kernels (IFMA, and double-precision FMA on AVX2)
/// take a linear combination's source of `bits`-bit entries as two 32-bit
/// halves: above 50 bits; narrower sources enter whole.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn splits(bits: u32) -> bool {
    bits > 50
}

use crate::error::{MathError, Result};
use crate::modular::Modulus;
use crate::prime::primitive_root_2n;

/// Smallest supported log2 of the ring degree (16 coefficients; small rings
/// are for tests, the HE Standard starts at 2^10).
pub const MIN_LOG_N: u32 = 4;
/// Largest supported log2 of the ring degree.
pub const MAX_LOG_N: u32 = 17;

/// Twiddle factors and their Shoup companions for one (q, n).
///
/// ```
/// use hecloud_math::{NttTable, prime::ntt_primes};
/// let q = ntt_primes(50, 1024, 1, &[]).unwrap()[0];
/// let table = NttTable::new(q, 1024).unwrap();
/// let mut a: Vec<u64> = (0..1024).collect();
/// let orig = a.clone();
/// table.forward(&mut a);
/// table.inverse(&mut a);
/// assert_eq!(a, orig);
/// ```
#[derive(Clone)]
pub struct NttTable {
    n: usize,
    modulus: Modulus,
    psi: u64,
    /// ψ^brev(k), k in 0..n (index 0 unused).
    fwd: Twiddles,
    /// ψ^-brev(k), k in 0..n; entry 1 has n⁻¹ merged in.
    inv: Twiddles,
    n_inv: u64,
    n_inv_shoup: u64,
    /// The twiddles as f64 for the AVX2 + FMA kernels, built on first use.
    #[cfg(target_arch = "x86_64")]
    fp: avx2fma::FpCell,
}

impl std::fmt::Debug for NttTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NttTable")
            .field("n", &self.n)
            .field("q", &self.modulus.value())
            .field("psi", &self.psi)
            .finish_non_exhaustive()
    }
}

/// Twiddle values with their Shoup companions.
#[derive(Debug, Clone)]
pub(crate) struct Twiddles {
    pub(crate) w: Vec<u64>,
    pub(crate) ws: Vec<u64>,
}

impl Twiddles {
    fn from_values(m: &Modulus, w: Vec<u64>) -> Self {
        let ws = w.iter().map(|&x| m.shoup(x)).collect();
        Self { w, ws }
    }
}

/// `i` with its lowest `bits` bits reversed.
#[inline]
pub fn bit_reverse(i: usize, bits: u32) -> usize {
    if bits == 0 {
        0
    } else {
        i.reverse_bits() >> (usize::BITS - bits)
    }
}

impl NttTable {
    /// Tables for the NTT-friendly prime `q` (q ≡ 1 mod 2n) and degree `n`.
    pub fn new(q: u64, n: usize) -> Result<Self> {
        if !n.is_power_of_two() || !(MIN_LOG_N..=MAX_LOG_N).contains(&n.trailing_zeros()) {
            return Err(MathError::InvalidDegree(n));
        }
        let modulus = Modulus::new(q)?;
        let psi = primitive_root_2n(q, n)?;
        let psi_inv = modulus.inv(psi)?;
        let log_n = n.trailing_zeros();
        let powers = |base: u64| {
            let mut pw = vec![1u64; n];
            for i in 1..n {
                pw[i] = modulus.mul(pw[i - 1], base);
            }
            (0..n)
                .map(|k| pw[bit_reverse(k, log_n)])
                .collect::<Vec<_>>()
        };
        let n_inv = modulus.inv(n as u64)?;
        let fwd = Twiddles::from_values(&modulus, powers(psi));
        let mut inv_w = powers(psi_inv);
        // The last inverse stage multiplies both outputs by n⁻¹: its
        // difference twiddle carries n⁻¹ too.
        inv_w[1] = modulus.mul(inv_w[1], n_inv);
        let inv = Twiddles::from_values(&modulus, inv_w);
        Ok(Self {
            n,
            modulus,
            psi,
            fwd,
            inv,
            n_inv,
            n_inv_shoup: modulus.shoup(n_inv),
            #[cfg(target_arch = "x86_64")]
            fp: avx2fma::FpCell::new(),
        })
    }

    /// The ring degree n.
    pub fn degree(&self) -> usize {
        self.n
    }

    /// The modulus q.
    pub fn modulus(&self) -> &Modulus {
        &self.modulus
    }

    /// The primitive 2n-th root of unity ψ the transform evaluates at.
    pub fn psi(&self) -> u64 {
        self.psi
    }

    pub(crate) fn fwd_twiddles(&self) -> &Twiddles {
        &self.fwd
    }

    pub(crate) fn inv_twiddles(&self) -> &Twiddles {
        &self.inv
    }

    /// Twiddles of a stage with gap 1, 2 or 4, one per butterfly group:
    /// butterfly k of the stage uses entry k / gap (SIMD kernels load
    /// LANES / gap of them and repeat each `gap` times).
    pub(crate) fn gap_twiddles(&self, gap: usize, inverse: bool) -> (&[u64], &[u64]) {
        debug_assert!(matches!(gap, 1 | 2 | 4));
        let base = if inverse { &self.inv } else { &self.fwd };
        let m = self.n / (2 * gap);
        (&base.w[m..], &base.ws[m..])
    }

    pub(crate) fn n_inv(&self) -> (u64, u64) {
        (self.n_inv, self.n_inv_shoup)
    }

    /// Forward NTT of `a` (length n, entries in [0, q)) in place, with the
    /// default backend.
    pub fn forward(&self, a: &mut [u64]) {
        crate::backend::default_backend().ntt_forward(self, a);
    }

    /// Inverse NTT of `a` in place, with the default backend.
    pub fn inverse(&self, a: &mut [u64]) {
        crate::backend::default_backend().ntt_inverse(self, a);
    }

    /// Portable reference forward transform.
    pub fn forward_scalar(&self, a: &mut [u64]) {
        assert_eq!(a.len(), self.n, "NTT input length");
        let m = &self.modulus;
        let two_q = 2 * m.value();
        let (n, w, ws) = (self.n, &self.fwd.w, &self.fwd.ws);
        let mut gap = n / 2;
        let mut groups = 1;
        while groups < n {
            for i in 0..groups {
                let (wi, wsi) = (w[groups + i], ws[groups + i]);
                let base = 2 * i * gap;
                let (lo, hi) = a[base..base + 2 * gap].split_at_mut(gap);
                for (x, y) in lo.iter_mut().zip(hi.iter_mut()) {
                    let u = if *x >= two_q { *x - two_q } else { *x };
                    let t = m.mul_shoup_lazy(*y, wi, wsi);
                    *x = u + t;
                    *y = u + two_q - t;
                }
            }
            groups *= 2;
            gap /= 2;
        }
        for x in a.iter_mut() {
            let u = if *x >= two_q { *x - two_q } else { *x };
            *x = m.reduce_once(u);
        }
    }

    /// Portable reference inverse transform.
    pub fn inverse_scalar(&self, a: &mut [u64]) {
        assert_eq!(a.len(), self.n, "NTT input length");
        let m = &self.modulus;
        let two_q = 2 * m.value();
        let (n, w, ws) = (self.n, &self.inv.w, &self.inv.ws);
        let mut gap = 1;
        let mut groups = n / 2;
        while groups > 1 {
            for i in 0..groups {
                let (wi, wsi) = (w[groups + i], ws[groups + i]);
                let base = 2 * i * gap;
                let (lo, hi) = a[base..base + 2 * gap].split_at_mut(gap);
                for (x, y) in lo.iter_mut().zip(hi.iter_mut()) {
                    let (u, v) = (*x, *y);
                    let s = u + v;
                    *x = if s >= two_q { s - two_q } else { s };
                    *y = m.mul_shoup_lazy(u + two_q - v, wi, wsi);
                }
            }
            groups /= 2;
            gap *= 2;
        }
        // Last stage, n⁻¹ merged: x = (u + v)/n, y = (u - v)·ψ⁻¹…/n.
        let (lo, hi) = a.split_at_mut(n / 2);
        for (x, y) in lo.iter_mut().zip(hi.iter_mut()) {
            let (u, v) = (*x, *y);
            *x = m.reduce_once(m.mul_shoup_lazy(u + v, self.n_inv, self.n_inv_shoup));
            *y = m.reduce_once(m.mul_shoup_lazy(u + two_q - v, w[1], ws[1]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prime::ntt_primes;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{RngCore, SeedableRng};

    /// Negacyclic schoolbook product, O(n²), in u128.
    #[allow(clippy::needless_range_loop)] // index form mirrors the definition
    pub(crate) fn schoolbook(a: &[u64], b: &[u64], q: u64) -> Vec<u64> {
        let n = a.len();
        let mut c = vec![0u128; n];
        let q = q as u128;
        for i in 0..n {
            for j in 0..n {
                let p = a[i] as u128 * b[j] as u128 % q;
                let k = i + j;
                if k < n {
                    c[k] = (c[k] + p) % q;
                } else {
                    c[k - n] = (c[k - n] + q - p) % q;
                }
            }
        }
        c.into_iter().map(|x| x as u64).collect()
    }

    fn random_vec(rng: &mut ChaCha20Rng, n: usize, q: u64) -> Vec<u64> {
        (0..n).map(|_| rng.next_u64() % q).collect()
    }

    fn ntt_product(t: &NttTable, a: &[u64], b: &[u64]) -> Vec<u64> {
        let m = t.modulus();
        let (mut fa, mut fb) = (a.to_vec(), b.to_vec());
        t.forward(&mut fa);
        t.forward(&mut fb);
        let mut c: Vec<u64> = fa.iter().zip(&fb).map(|(x, y)| m.mul(*x, *y)).collect();
        t.inverse(&mut c);
        c
    }

    #[test]
    fn product_matches_schoolbook() {
        let mut rng = crate::testing::rng();
        for log_n in MIN_LOG_N..=12 {
            let n = 1 << log_n;
            for bits in [20, 50, 60, 61] {
                let q = ntt_primes(bits, n, 1, &[]).unwrap()[0];
                let t = NttTable::new(q, n).unwrap();
                let (a, b) = (random_vec(&mut rng, n, q), random_vec(&mut rng, n, q));
                assert_eq!(
                    ntt_product(&t, &a, &b),
                    schoolbook(&a, &b, q),
                    "n={n} bits={bits}"
                );
            }
        }
    }

    #[test]
    fn edge_inputs_round_trip_and_multiply() {
        let n = 1 << 10;
        let q = ntt_primes(61, n, 1, &[]).unwrap()[0];
        let t = NttTable::new(q, n).unwrap();
        for a in [
            vec![0; n],
            vec![q - 1; n],
            (0..n as u64).collect::<Vec<_>>(),
        ] {
            let mut f = a.clone();
            t.forward(&mut f);
            assert!(f.iter().all(|&x| x < q));
            t.inverse(&mut f);
            assert_eq!(f, a);
            assert_eq!(ntt_product(&t, &a, &a), schoolbook(&a, &a, q));
        }
        // X · X^(n-1) = X^n = -1.
        let (mut x, mut y) = (vec![0; n], vec![0; n]);
        x[1] = 1;
        y[n - 1] = 1;
        let mut minus_one = vec![0; n];
        minus_one[0] = q - 1;
        assert_eq!(ntt_product(&t, &x, &y), minus_one);
    }

    #[test]
    fn forward_slot_is_evaluation_at_odd_power_of_psi() {
        let n = 64;
        let q = ntt_primes(30, n, 1, &[]).unwrap()[0];
        let t = NttTable::new(q, n).unwrap();
        let m = t.modulus();
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let a = random_vec(&mut rng, n, q);
        let mut f = a.clone();
        t.forward(&mut f);
        for (p, &fp) in f.iter().enumerate() {
            let x = m.pow(t.psi(), (2 * bit_reverse(p, 6) + 1) as u64);
            let eval = a.iter().rev().fold(0, |acc, &c| m.add(m.mul(acc, x), c));
            assert_eq!(fp, eval, "slot {p}");
        }
    }

    /// Every coefficient of the negacyclic schoolbook product, O(n²) with
    /// 128-bit sums reduced every 128 terms, spread over threads.
    fn schoolbook_parallel(a: &[u64], b: &[u64], m: &Modulus) -> Vec<u64> {
        use rayon::prelude::*;
        let n = a.len();
        (0..n)
            .into_par_iter()
            .map(|k| {
                // Terms with i ≤ k add, the wrapped ones (i > k) subtract.
                let sum = |range: std::ops::Range<usize>, j: &dyn Fn(usize) -> usize| {
                    let mut acc = 0u64;
                    for start in range.clone().step_by(128) {
                        let end = (start + 128).min(range.end);
                        let s: u128 = (start..end).map(|i| a[i] as u128 * b[j(i)] as u128).sum();
                        acc = m.add(acc, m.reduce_u128(s));
                    }
                    acc
                };
                let pos = sum(0..k + 1, &|i| k - i);
                let neg = sum(k + 1..n, &|i| n + k - i);
                m.sub(pos, neg)
            })
            .collect()
    }

    #[test]
    fn degree_65536_product_matches_full_schoolbook() {
        let n = 1 << 16;
        let q = ntt_primes(60, n, 1, &[]).unwrap()[0];
        let t = NttTable::new(q, n).unwrap();
        let mut rng = crate::testing::rng();
        let (a, b) = (random_vec(&mut rng, n, q), random_vec(&mut rng, n, q));
        let c = ntt_product(&t, &a, &b);
        assert_eq!(c, schoolbook_parallel(&a, &b, t.modulus()));
        let mut f = a.clone();
        t.forward(&mut f);
        t.inverse(&mut f);
        assert_eq!(f, a);
    }

    #[test]
    fn rejects_bad_sizes_and_moduli() {
        assert!(matches!(
            NttTable::new(12289, 1000),
            Err(MathError::InvalidDegree(1000))
        ));
        assert!(matches!(
            NttTable::new(12289, 8),
            Err(MathError::InvalidDegree(8))
        ));
        assert!(matches!(
            NttTable::new(12289, 1 << 18),
            Err(MathError::InvalidDegree(_))
        ));
        assert!(matches!(
            NttTable::new(12289, 1 << 12),
            Err(MathError::NotNttFriendly { .. })
        ));
        assert!(matches!(
            NttTable::new(12291, 1024),
            Err(MathError::NotNttFriendly { .. })
        ));
        assert!(matches!(
            NttTable::new(1 << 62, 1024),
            Err(MathError::ModulusOutOfRange(_))
        ));
    }
}
