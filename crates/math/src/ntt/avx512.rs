//! AVX-512 NTT kernels: 8 lanes of u64, `vpmullq` for low products and
//! unsigned min for conditional subtraction.

use std::arch::x86_64::*;

pub(super) type V = __m512i;
pub(super) const LANES: usize = 8;

#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
pub(super) fn load(s: &[u64]) -> V {
    assert!(s.len() >= LANES);
    // SAFETY: the slice holds at least LANES values; unaligned load.
    unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
}

/// LANES / gap values of `s`, each repeated `gap` times (gap 1, 2 or 4).
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
pub(super) fn load_repeated(s: &[u64], gap: usize) -> V {
    match gap {
        1 => load(s),
        2 => {
            assert!(s.len() >= 4);
            // SAFETY: the slice holds at least 4 values; unaligned load.
            let v = unsafe { _mm256_loadu_si256(s.as_ptr().cast()) };
            _mm512_permutexvar_epi64(
                _mm512_set_epi64(3, 3, 2, 2, 1, 1, 0, 0),
                _mm512_castsi256_si512(v),
            )
        }
        _ => {
            assert!(s.len() >= 2);
            // SAFETY: the slice holds at least 2 values; unaligned load.
            let v = unsafe { _mm_loadu_si128(s.as_ptr().cast()) };
            _mm512_permutexvar_epi64(
                _mm512_set_epi64(1, 1, 1, 1, 0, 0, 0, 0),
                _mm512_castsi128_si512(v),
            )
        }
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
pub(super) fn store(s: &mut [u64], v: V) {
    assert!(s.len() >= LANES);
    // SAFETY: the slice holds at least LANES values; unaligned store.
    unsafe { _mm512_storeu_si512(s.as_mut_ptr().cast(), v) }
}

#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
pub(super) fn splat(x: u64) -> V {
    _mm512_set1_epi64(x as i64)
}

#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
pub(super) fn add(a: V, b: V) -> V {
    _mm512_add_epi64(a, b)
}

#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
pub(super) fn sub(a: V, b: V) -> V {
    _mm512_sub_epi64(a, b)
}

/// x ≥ b ? x − b : x: when x < b the difference wraps above x.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
pub(super) fn csub(x: V, b: V) -> V {
    _mm512_min_epu64(x, _mm512_sub_epi64(x, b))
}

/// High 64 bits of a·b.
/// The 32-bit halves of each lane swapped: the high half's value in the
/// low half, where `vpmuludq` reads it.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn swap32(a: V) -> V {
    _mm512_shuffle_epi32::<{ _MM_PERM_CDAB }>(a)
}

/// Low 32 bits of a times low 32 bits of b, as 64-bit lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn mul32(a: V, b: V) -> V {
    _mm512_mul_epu32(a, b)
}

/// Each lane's low 32 bits.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn low32(a: V) -> V {
    _mm512_and_si512(a, _mm512_set1_epi64(0xffff_ffff))
}

/// Each lane shifted right by 32.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn high32(a: V) -> V {
    _mm512_srli_epi64(a, 32)
}

/// Each lane shifted left by 32.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn shl32(a: V) -> V {
    _mm512_slli_epi64(a, 32)
}

/// Low 64 bits of t·q (Q1 unused, as in [`mul_shoup_lazy`]).
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn mul_lo_q<const Q1: bool>(t: V, q: V) -> V {
    _mm512_mullo_epi64(t, q)
}

/// x·w mod q in [0, 2q) (Shoup), as `Modulus::mul_shoup_lazy`. Q1 (q ≡ 1
/// mod 2^32) is not used: replacing the 64-bit multiply by q with AVX2's
/// one-product form measured 12 % slower on Zen 4 (60-bit NTT, 190 → 213
/// µs).
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn mul_shoup_lazy<const Q1: bool>(x: V, w: V, ws: V, q: V) -> V {
    let hi = mul_hi(x, ws);
    _mm512_sub_epi64(_mm512_mullo_epi64(x, w), _mm512_mullo_epi64(hi, q))
}

/// Moduli below this take [`mul_shoup_loose`] in the NTTs and the linear
/// kernels (LAZY_CAP's 8q holds two of its 4q products' sums).
const LOOSE_MAX_MODULUS: u64 = 1 << 61;

/// Outputs of one pass of `linear_combination_wide_group`: as AVX2's
/// (the dispatch shares one grouping), though 32 registers could hold more.
pub(crate) const WIDE_GROUP: usize = 3;

/// x·w mod q in [0, 4q) for any x, with the quotient of
/// [`loose_quotient`].
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn mul_shoup_loose<const Q1: bool>(x: V, w: V, ws: V, q: V) -> V {
    let hi = loose_quotient(x, ws);
    _mm512_sub_epi64(_mm512_mullo_epi64(x, w), _mm512_mullo_epi64(hi, q))
}

/// Lane indices into a‖b of the X operands (first 8) and Y operands (last 8)
/// for gaps 1, 2, 4; joining uses the inverse permutation.
const SPLIT: [[i64; 16]; 3] = [
    [0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15],
    [0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15],
    [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15],
];
const JOIN: [[i64; 16]; 3] = [
    [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15],
    [0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15],
    [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15],
];

#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn permute_pair(a: V, b: V, idx: &[i64; 16]) -> (V, V) {
    // SAFETY: idx holds 16 values; unaligned loads.
    let (i0, i1) = unsafe {
        (
            _mm512_loadu_si512(idx.as_ptr().cast()),
            _mm512_loadu_si512(idx[8..].as_ptr().cast()),
        )
    };
    (
        _mm512_permutex2var_epi64(a, i0, b),
        _mm512_permutex2var_epi64(a, i1, b),
    )
}

#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
pub(super) fn split(a: V, b: V, gap: usize) -> (V, V) {
    permute_pair(a, b, &SPLIT[gap.trailing_zeros() as usize])
}

#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
pub(super) fn join(x: V, y: V, gap: usize) -> (V, V) {
    permute_pair(x, y, &JOIN[gap.trailing_zeros() as usize])
}

/// Lazy values stay below LAZY_CAP·q: 64-bit lanes hold 8q for q < 2^61.
const LAZY_CAP: u64 = 8;

/// One stage per pass: the 64-bit products built from 32-bit ones limit
/// the stages, and pairing them measured 1.5 % slower at N = 2^16.
const PAIRED_STAGES: bool = false;

super::simd::simd_ntt_kernels!("avx512f,avx512dq");
super::simd::simd_linear_kernels!("avx512f,avx512dq");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loose_product_is_congruent_and_below_4q() {
        if !(is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512dq")) {
            return;
        }
        crate::ntt::simd::check_loose_products(|x, w, ws, q, q1| {
            let mut out = [0u64; LANES];
            let product = if q1 {
                mul_shoup_loose::<true>
            } else {
                mul_shoup_loose::<false>
            };
            // SAFETY: AVX-512 F and DQ were detected above.
            unsafe { store(&mut out, product(splat(x), splat(w), splat(ws), splat(q))) };
            out.to_vec()
        });
    }
}
