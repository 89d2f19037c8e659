//! Rejection sampling's filter on AVX-512 F.

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// [`Backend::keep_below`](crate::backend::Backend::keep_below) eight
/// words at a time: a compare and a compress (in a register: compressing
/// straight to memory is slow on AMD's cores); the last words, fewer than
/// eight, one at a time.
///
/// # Safety
/// The CPU must have AVX-512 F.
///
/// # Panics
/// As the backend method.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn keep_below(
    src: &[u8],
    mask: u64,
    q: u64,
    dst: &mut [MaybeUninit<u64>],
) -> usize {
    let words = src.len() / 8;
    assert!(src.len().is_multiple_of(8), "whole words");
    assert!(dst.len() >= words, "room for every word");
    let whole = words / 8 * 8;
    // On x86 the little-endian words of `src` are its 64-bit lanes, in order.
    let from = src.as_ptr();
    let out = dst.as_mut_ptr().cast::<u64>();
    let (m, qv) = (_mm512_set1_epi64(mask as i64), _mm512_set1_epi64(q as i64));
    let mut j = 0;
    for k in (0..whole).step_by(8) {
        // SAFETY: words k..k + 8 are inside `src`; at most k words were
        // kept so far, so words j..j + 8 are inside `dst`.
        unsafe {
            let w = _mm512_and_si512(_mm512_loadu_si512(from.add(8 * k).cast()), m);
            let keep = _mm512_cmplt_epu64_mask(w, qv);
            _mm512_storeu_si512(out.add(j).cast(), _mm512_maskz_compress_epi64(keep, w));
            j += keep.count_ones() as usize;
        }
    }
    j + super::keep_below_scalar(&src[8 * whole..], mask, q, &mut dst[j..])
}
