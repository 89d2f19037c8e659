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

super::simd::simd_ntt_kernels!("avx512f,avx512dq,avx512ifma");
