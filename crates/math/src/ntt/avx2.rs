//! AVX2 NTT kernels: 4 lanes of u64. AVX2 has no 64×64-bit multiply, so the
//! high and low halves of products are assembled from 32×32 → 64 `vpmuludq`.

use std::arch::x86_64::*;

type V = __m256i;
const LANES: usize = 4;

#[inline]
#[target_feature(enable = "avx2")]
fn load(s: &[u64]) -> V {
    assert!(s.len() >= LANES);
    // SAFETY: the slice holds at least LANES values; unaligned load.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// LANES / gap values of `s`, each repeated `gap` times (gap 1 or 2).
#[inline]
#[target_feature(enable = "avx2")]
fn load_repeated(s: &[u64], gap: usize) -> V {
    if gap == 1 {
        return load(s);
    }
    assert!(s.len() >= 2);
    // SAFETY: the slice holds at least 2 values; unaligned load.
    let v = unsafe { _mm_loadu_si128(s.as_ptr().cast()) };
    _mm256_permute4x64_epi64::<0b01_01_00_00>(_mm256_castsi128_si256(v))
}

#[inline]
#[target_feature(enable = "avx2")]
fn store(s: &mut [u64], v: V) {
    assert!(s.len() >= LANES);
    // SAFETY: the slice holds at least LANES values; unaligned store.
    unsafe { _mm256_storeu_si256(s.as_mut_ptr().cast(), v) }
}

#[inline]
#[target_feature(enable = "avx2")]
fn splat(x: u64) -> V {
    _mm256_set1_epi64x(x as i64)
}

#[inline]
#[target_feature(enable = "avx2")]
fn add(a: V, b: V) -> V {
    _mm256_add_epi64(a, b)
}

#[inline]
#[target_feature(enable = "avx2")]
fn sub(a: V, b: V) -> V {
    _mm256_sub_epi64(a, b)
}

/// x ≥ b ? x − b : x for x < 2b and b ≤ 2^63, the bounds every caller
/// keeps (a halving chain of reductions, or a sum of two values below b):
/// then x − b wraps to a value with its top bit set exactly when x < b,
/// and `vblendvpd` selects on that bit. Two instructions where an
/// unsigned comparison (AVX2 compares signed) took four: at N = 2^16 the
/// 60-bit forward NTT 301 → 280 µs, a 5-term 61-bit linear combination
/// 3.30 → 2.77 ns per coefficient.
#[inline]
#[target_feature(enable = "avx2")]
fn csub(x: V, b: V) -> V {
    let d = _mm256_castsi256_pd(_mm256_sub_epi64(x, b));
    _mm256_castpd_si256(_mm256_blendv_pd(d, _mm256_castsi256_pd(x), d))
}

/// The 32-bit halves of each lane swapped: the high half's value in the
/// low half, where `vpmuludq` reads it.
#[inline]
#[target_feature(enable = "avx2")]
fn swap32(a: V) -> V {
    _mm256_shuffle_epi32::<0xB1>(a)
}

/// Low 32 bits of a times low 32 bits of b, as 64-bit lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn mul32(a: V, b: V) -> V {
    _mm256_mul_epu32(a, b)
}

/// Each lane's low 32 bits.
#[inline]
#[target_feature(enable = "avx2")]
fn low32(a: V) -> V {
    _mm256_and_si256(a, _mm256_set1_epi64x(0xffff_ffff))
}

/// Each lane shifted right by 32.
#[inline]
#[target_feature(enable = "avx2")]
fn high32(a: V) -> V {
    _mm256_srli_epi64(a, 32)
}

/// Each lane shifted left by 32.
#[inline]
#[target_feature(enable = "avx2")]
fn shl32(a: V) -> V {
    _mm256_slli_epi64(a, 32)
}

/// Low 64 bits of a·b.
#[inline]
#[target_feature(enable = "avx2")]
fn mul_lo(a: V, b: V) -> V {
    let ll = _mm256_mul_epu32(a, b);
    let lh = _mm256_mul_epu32(a, _mm256_shuffle_epi32::<0xB1>(b));
    let hl = _mm256_mul_epu32(_mm256_shuffle_epi32::<0xB1>(a), b);
    _mm256_add_epi64(ll, _mm256_slli_epi64(_mm256_add_epi64(lh, hl), 32))
}

/// Low 64 bits of t·q; with Q1 (q ≡ 1 mod 2^32) t + (t·⌊q/2^32⌋ mod
/// 2^32)·2^32, one 32-bit product instead of three.
#[inline]
#[target_feature(enable = "avx2")]
fn mul_lo_q<const Q1: bool>(t: V, q: V) -> V {
    if Q1 {
        add(t, _mm256_slli_epi64(mul32(t, swap32(q)), 32))
    } else {
        mul_lo(t, q)
    }
}

/// x·w mod q in [0, 2q) (Shoup), as `Modulus::mul_shoup_lazy`; Q1 as
/// [`mul_lo_q`].
#[inline]
#[target_feature(enable = "avx2")]
fn mul_shoup_lazy<const Q1: bool>(x: V, w: V, ws: V, q: V) -> V {
    let hi = mul_hi(x, ws);
    _mm256_sub_epi64(mul_lo(x, w), mul_lo_q::<Q1>(hi, q))
}

/// Moduli below this take [`mul_shoup_loose`] in the NTTs and the linear
/// kernels (LAZY_CAP's 8q holds two of its 4q products' sums).
const LOOSE_MAX_MODULUS: u64 = 1 << 61;

/// Outputs of one pass of `linear_combination_wide_group`: three sums of
/// three registers each, with the source and its halves, fit the 16
/// vector registers.
pub(crate) const WIDE_GROUP: usize = 3;

/// x·w mod q in [0, 4q) for any x, with Shoup's `ws` = ⌊w·2^64/q⌋ and
/// the quotient of [`loose_quotient`]; the two low products are gathered
/// before one shift. Q1 as [`mul_lo_q`]: the quotient's multiple of q
/// takes one 32-bit product (7 in all instead of 9).
#[inline]
#[target_feature(enable = "avx2")]
fn mul_shoup_loose<const Q1: bool>(x: V, w: V, ws: V, q: V) -> V {
    let hi = loose_quotient(x, ws);
    // hi·q as low + cross·2^32 (mod 2^64); with Q1 its low half is hi.
    let (hq_low, hq_cross) = if Q1 {
        (hi, mul32(hi, swap32(q)))
    } else {
        let hq_cross = add(mul32(hi, swap32(q)), mul32(swap32(hi), q));
        (mul32(hi, q), hq_cross)
    };
    let low = sub(mul32(x, w), hq_low);
    let cross = sub(add(mul32(x, swap32(w)), mul32(swap32(x), w)), hq_cross);
    add(low, _mm256_slli_epi64(cross, 32))
}

/// X and Y operands (butterfly order) of a stage with gap 1 or 2 from the
/// eight values a‖b.
#[inline]
#[target_feature(enable = "avx2")]
fn split(a: V, b: V, gap: usize) -> (V, V) {
    if gap == 2 {
        (
            _mm256_permute2x128_si256(a, b, 0x20),
            _mm256_permute2x128_si256(a, b, 0x31),
        )
    } else {
        let x = _mm256_unpacklo_epi64(a, b); // a0 b0 a2 b2
        let y = _mm256_unpackhi_epi64(a, b); // a1 b1 a3 b3
        (
            _mm256_permute4x64_epi64(x, 0xD8),
            _mm256_permute4x64_epi64(y, 0xD8),
        )
    }
}

/// Inverse of [`split`].
#[inline]
#[target_feature(enable = "avx2")]
fn join(x: V, y: V, gap: usize) -> (V, V) {
    if gap == 2 {
        (
            _mm256_permute2x128_si256(x, y, 0x20),
            _mm256_permute2x128_si256(x, y, 0x31),
        )
    } else {
        let x = _mm256_permute4x64_epi64(x, 0xD8); // x0 x2 x1 x3
        let y = _mm256_permute4x64_epi64(y, 0xD8);
        (_mm256_unpacklo_epi64(x, y), _mm256_unpackhi_epi64(x, y))
    }
}

/// Lazy values stay below LAZY_CAP·q: 64-bit lanes hold 8q for q < 2^61.
const LAZY_CAP: u64 = 8;

/// One stage per pass: pairing the stages needs more than the 16 vector
/// registers and measured 10 % slower at N = 2^16 (60-bit prime).
const PAIRED_STAGES: bool = false;

super::simd::simd_ntt_kernels!("avx2");
super::simd::simd_linear_kernels!("avx2");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loose_product_is_congruent_and_below_4q() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        crate::ntt::simd::check_loose_products(|x, w, ws, q, q1| {
            let mut out = [0u64; LANES];
            let product = if q1 {
                mul_shoup_loose::<true>
            } else {
                mul_shoup_loose::<false>
            };
            // SAFETY: AVX2 was detected above.
            unsafe { store(&mut out, product(splat(x), splat(w), splat(ws), splat(q))) };
            out.to_vec()
        });
    }
}
