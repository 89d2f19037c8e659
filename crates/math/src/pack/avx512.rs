//! The bit-packing loops on AVX-512 (F, BW, VBMI, VBMI2).
//!
//! Eight values of `bits` bits fill exactly `bits` bytes, at most one
//! 512-bit register. Unpacking gathers, for each 64-bit lane, the bytes of
//! its value with two byte permutations and shifts them into place; packing
//! shifts each value to its bit offset and merges the (at most two) values
//! that share each output byte with two permutations and an OR. Widths
//! below 8, where a byte can hold parts of more than two values, stay on
//! the scalar loops.

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// Narrowest width handled here.
const MIN_BITS: u32 = 8;

/// Whether this CPU has the instructions of these kernels. The backend
/// asks once, when it is made, not on every limb.
pub(crate) fn detected() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vbmi")
        && is_x86_feature_detected!("avx512vbmi2")
}

/// Whether the kernels take values of `bits` bits.
fn takes(bits: u32) -> bool {
    (MIN_BITS..=64).contains(&bits)
}

/// Packs whole groups of eight values of `src` (each below 2^bits) into
/// `dst` (`bits` bytes per group), as the scalar loops do; false, with
/// nothing written, where the kernel does not apply.
///
/// # Safety
/// The CPU must have the features [`detected`] looks for.
pub(crate) unsafe fn pack_groups(src: &[u64], bits: u32, dst: &mut [u8]) -> bool {
    if !takes(bits) || src.len() != dst.len() / bits as usize * 8 {
        return false;
    }
    // SAFETY: the caller's promise, and the width and lengths checked above.
    unsafe { pack_groups_avx512(src, bits, dst) };
    true
}

/// Unpacks whole groups of eight values of `bits` bits (`dst.len() / 8`
/// groups) from `src`, as the scalar loops do: whether every value is below
/// `q`; `None`, with nothing written, where the kernel does not apply.
///
/// # Safety
/// The CPU must have the features [`detected`] looks for.
pub(crate) unsafe fn unpack_groups(
    src: &[u8],
    bits: u32,
    q: u64,
    dst: &mut [MaybeUninit<u64>],
) -> Option<bool> {
    if !takes(bits) || src.len() != dst.len() / 8 * bits as usize {
        return None;
    }
    // SAFETY: the caller's promise, and the width and lengths checked above.
    Some(unsafe { unpack_groups_avx512(src, bits, q, dst) })
}

/// The first `bits` bytes of a register.
fn byte_mask(bits: u32) -> u64 {
    u64::MAX >> (64 - bits)
}

/// [`pack_groups`] itself.
///
/// # Safety
/// The CPU must have the features [`detected`] looks for, `bits` be in
/// 8..=64 and `src` hold eight values per group of `dst`.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vbmi2")]
unsafe fn pack_groups_avx512(src: &[u64], bits: u32, dst: &mut [u8]) {
    let w = bits as usize;
    let groups = dst.len() / w;
    assert!((MIN_BITS..=64).contains(&bits) && src.len() >= 8 * groups);
    // Lane i holds value i shifted left by its bit offset within its first
    // byte: 128 bits, the low half in `lo`, the high half in `hi`. Byte j of
    // the group takes, from the value holding its bit 0 (and from the one
    // holding its bit 7, when another), the byte at j less that value's first
    // byte. Two-table permutations index `lo` by 0..64 and `hi` by 64..128.
    let mut shifts = [0u64; 8];
    let mut first = [0u8; 64];
    let mut second = [0u8; 64];
    let mut has_second = 0u64;
    for (i, s) in shifts.iter_mut().enumerate() {
        *s = (i * w % 8) as u64;
    }
    let index = |i: usize, j: usize| -> u8 {
        let p = j - i * w / 8;
        (if p < 8 { 8 * i + p } else { 64 + 8 * i + p - 8 }) as u8
    };
    for j in 0..w {
        let (i0, i1) = (8 * j / w, (8 * j + 7) / w);
        first[j] = index(i0, j);
        if i1 != i0 {
            second[j] = index(i1, j);
            has_second |= 1 << j;
        }
    }
    let keep = byte_mask(bits);
    // SAFETY: the tables are 64 bytes; group g reads values 8g..8g + 8 of
    // `src` and writes bytes g·w..g·w + w of `dst` (masked), in bounds.
    unsafe {
        let shifts = _mm512_loadu_si512(shifts.as_ptr().cast());
        let first = _mm512_loadu_si512(first.as_ptr().cast());
        let second = _mm512_loadu_si512(second.as_ptr().cast());
        let zero = _mm512_setzero_si512();
        for g in 0..groups {
            let x = _mm512_loadu_si512(src.as_ptr().add(8 * g).cast());
            let lo = _mm512_sllv_epi64(x, shifts);
            let hi = _mm512_shldv_epi64(zero, x, shifts);
            let a = _mm512_maskz_permutex2var_epi8(keep, lo, first, hi);
            let b = _mm512_maskz_permutex2var_epi8(has_second, lo, second, hi);
            _mm512_mask_storeu_epi8(
                dst.as_mut_ptr().add(g * w).cast(),
                keep,
                _mm512_or_si512(a, b),
            );
        }
    }
}

/// [`unpack_groups`] itself.
///
/// # Safety
/// The CPU must have the features [`detected`] looks for, `bits` be in
/// 8..=64 and `src` hold `bits` bytes per group of `dst`.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vbmi2")]
unsafe fn unpack_groups_avx512(
    src: &[u8],
    bits: u32,
    q: u64,
    dst: &mut [MaybeUninit<u64>],
) -> bool {
    let w = bits as usize;
    let groups = dst.len() / 8;
    assert!((MIN_BITS..=64).contains(&bits) && src.len() >= w * groups);
    // Lane i gathers the 16 bytes from its value's first byte (indices
    // wrap at 64: bytes past the group only reach bits the mask clears),
    // then shifts the value down from its bit offset.
    let mut shifts = [0u64; 8];
    let mut low = [0u8; 64];
    let mut high = [0u8; 64];
    for (i, s) in shifts.iter_mut().enumerate() {
        let (b, off) = (i * w / 8, i * w % 8);
        *s = off as u64;
        for k in 0..8 {
            low[8 * i + k] = ((b + k) % 64) as u8;
            high[8 * i + k] = ((b + 8 + k) % 64) as u8;
        }
    }
    let keep = byte_mask(bits);
    let mut bad: __mmask8 = 0;
    // SAFETY: the tables are 64 bytes; group g reads bytes g·w..g·w + w of
    // `src` (masked) and writes values 8g..8g + 8 of `dst`, in bounds.
    unsafe {
        let shifts = _mm512_loadu_si512(shifts.as_ptr().cast());
        let low = _mm512_loadu_si512(low.as_ptr().cast());
        let high = _mm512_loadu_si512(high.as_ptr().cast());
        let mask = _mm512_set1_epi64((u64::MAX >> (64 - w)) as i64);
        let q = _mm512_set1_epi64(q as i64);
        for g in 0..groups {
            let v = _mm512_maskz_loadu_epi8(keep, src.as_ptr().add(g * w).cast());
            let lo = _mm512_permutexvar_epi8(low, v);
            let hi = _mm512_permutexvar_epi8(high, v);
            let x = _mm512_and_si512(_mm512_shrdv_epi64(lo, hi, shifts), mask);
            bad |= _mm512_cmpge_epu64_mask(x, q);
            _mm512_storeu_si512(dst.as_mut_ptr().add(8 * g).cast(), x);
        }
    }
    bad == 0
}
