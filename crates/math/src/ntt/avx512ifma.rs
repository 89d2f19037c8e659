//! AVX-512 IFMA NTT kernels for primes below 2^50: every value of the lazy
//! butterflies stays below 4q < 2^52, so Shoup's product needs three 52-bit
//! multiply-adds (`vpmadd52{lo,hi}uq`) instead of a 64-bit high product
//! assembled from four 32-bit multiplies and two `vpmullq`.

use std::arch::x86_64::*;

use super::avx512::{LANES, V, add, csub, join, load, splat, split, store, sub};

/// Moduli this kernel accepts (exclusive bound).
pub(crate) const MAX_MODULUS: u64 = 1 << 50;

/// x·w mod q in [0, 2q) for x < 2^52, with `ws` = ⌊w·2^64/q⌋ as elsewhere:
/// ⌊w·2^52/q⌋ = ws >> 12, the quotient estimate ⌊x·(ws >> 12)/2^52⌋ is short
/// by at most one, and x·w − quotient·q < 2q < 2^52 is exact modulo 2^52;
/// the subtraction rides on the last multiply-add as + quotient·(2^52 − q).
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
fn mul_shoup_lazy(x: V, w: V, ws: V, q: V) -> V {
    let mask52 = _mm512_set1_epi64((1 << 52) - 1);
    let neg_q = _mm512_sub_epi64(_mm512_set1_epi64(1 << 52), q);
    let quotient = _mm512_madd52hi_epu64(_mm512_setzero_si512(), x, _mm512_srli_epi64(ws, 12));
    let xw = _mm512_madd52lo_epu64(_mm512_setzero_si512(), x, w);
    _mm512_and_si512(_mm512_madd52lo_epu64(xw, quotient, neg_q), mask52)
}

/// Lazy values stay below LAZY_CAP·q: the 52-bit multipliers need every value below 4q < 2^52.
const LAZY_CAP: u64 = 4;

super::simd::simd_ntt_kernels!("avx512f,avx512dq,avx512ifma");

/// Barrett constants of a modulus q < 2^50 with k bits for [`mul_pointwise`]:
/// the shift s = k − 2 and μ = ⌊2^(s+52) / q⌋ < 2^51.
#[derive(Clone, Copy)]
pub(crate) struct Barrett52 {
    q: u64,
    shift: u32,
    mu: u64,
}

impl Barrett52 {
    pub(crate) fn new(q: u64) -> Self {
        debug_assert!((2..MAX_MODULUS).contains(&q));
        let shift = (64 - q.leading_zeros()).saturating_sub(2);
        let mu = ((1u128 << (shift + 52)) / q as u128) as u64;
        Self { q, shift, mu }
    }
}

/// (acc + a·b) mod q for a, b, acc < q < 2^50. The product is hi·2^52 + lo
/// (lo may carry acc past 2^52); the quotient estimate
/// ⌊⌊P/2^s⌋·μ / 2^52⌋ falls short of ⌊P/q⌋ by at most 3, so the remainder,
/// exact modulo 2^52, is below 4q and two conditional subtractions finish.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
fn mul_add_mod(a: V, b: V, acc: V, c: &Barrett52) -> V {
    let mask52 = _mm512_set1_epi64((1 << 52) - 1);
    let (q, two_q) = (splat(c.q), splat(2 * c.q));
    let lo = _mm512_madd52lo_epu64(acc, a, b);
    let hi = _mm512_madd52hi_epu64(_mm512_setzero_si512(), a, b);
    let top = _mm512_add_epi64(
        _mm512_sll_epi64(hi, _mm_cvtsi64_si128(52 - c.shift as i64)),
        _mm512_srl_epi64(lo, _mm_cvtsi64_si128(c.shift as i64)),
    );
    let quotient = _mm512_madd52hi_epu64(_mm512_setzero_si512(), top, splat(c.mu));
    let neg_q = _mm512_sub_epi64(_mm512_set1_epi64(1 << 52), q);
    let r = _mm512_and_si512(_mm512_madd52lo_epu64(lo, quotient, neg_q), mask52);
    csub(csub(r, two_q), q)
}

/// `a[i] = a[i]·b[i] mod q` for q < 2^50 (tail in scalar code).
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
pub(crate) fn mul_pointwise(m: &crate::Modulus, a: &mut [u64], b: &[u64]) {
    let c = Barrett52::new(m.value());
    let zero = _mm512_setzero_si512();
    let mut ac = a.chunks_exact_mut(LANES);
    let mut bc = b.chunks_exact(LANES);
    for (x, y) in (&mut ac).zip(&mut bc) {
        store(x, mul_add_mod(load(x), load(y), zero, &c));
    }
    for (x, y) in ac.into_remainder().iter_mut().zip(bc.remainder()) {
        *x = m.mul(*x, *y);
    }
}

/// `acc[i] = acc[i] + a[i]·b[i] mod q` for q < 2^50 (tail in scalar code).
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
pub(crate) fn mul_add_pointwise(m: &crate::Modulus, a: &[u64], b: &[u64], acc: &mut [u64]) {
    let c = Barrett52::new(m.value());
    let mut oc = acc.chunks_exact_mut(LANES);
    let (mut ac, mut bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for ((o, x), y) in (&mut oc).zip(&mut ac).zip(&mut bc) {
        store(o, mul_add_mod(load(x), load(y), load(o), &c));
    }
    for ((o, x), y) in oc
        .into_remainder()
        .iter_mut()
        .zip(ac.remainder())
        .zip(bc.remainder())
    {
        *o = m.reduce_u128(*o as u128 + *x as u128 * *y as u128);
    }
}
