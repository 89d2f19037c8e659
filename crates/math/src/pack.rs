//! Residues packed at the bit length of their prime, LSB first: the layout
//! of every serialized limb (a 50-bit prime takes 50 bits, not 64).
//!
//! The whole-limb routines here are the scalar reference behind
//! [`Backend::pack_bits`](crate::backend::Backend::pack_bits) and
//! [`Backend::unpack_bits`](crate::backend::Backend::unpack_bits); a SIMD
//! backend hands them its own kernel for whole groups of eight values.
//!
//! Eight values of `bits` bits fill exactly `bits` bytes, so whole groups
//! of eight are packed by a routine specialised to the width, where every
//! shift is a constant and groups do not depend on one another; what is
//! left (fewer than eight values) goes through the general loop.

use std::mem::MaybeUninit;
use std::sync::Arc;

use crate::backend::default_backend;
use crate::poly::{Domain, RnsBasis, RnsPoly};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

/// Bytes taken by `n` values of `bits` bits, packed: `n·bits` rounded up to
/// whole bytes (the padding bits are zero).
///
/// ```
/// assert_eq!(hecloud_math::pack::packed_len(1 << 16, 50), 50 << 13);
/// assert_eq!(hecloud_math::pack::packed_len(3, 5), 2);
/// ```
pub fn packed_len(n: usize, bits: u32) -> usize {
    (n * bits as usize).div_ceil(8)
}

/// A polynomial unpacked limb by limb (in any order, on any threads, over
/// several calls) into a buffer that is not zeroed first: a decoder fills
/// tens of MB without writing them twice. The polynomial is made only once
/// every limb is in.
///
/// ```
/// use hecloud_math::{Domain, RnsBasis, RnsPoly, prime::ntt_primes};
/// use hecloud_math::backend::default_backend;
/// use hecloud_math::pack::{PolyUnpacker, packed_len};
/// let basis = RnsBasis::new(16, &ntt_primes(40, 16, 2, &[]).unwrap()).unwrap();
/// let p = RnsPoly::from_signed(&basis, &[3; 16]).unwrap();
/// let mut u = PolyUnpacker::new(&basis);
/// for (slot, limb) in u.limbs().zip(p.data().chunks_exact(16)) {
///     let mut bytes = vec![0; packed_len(16, 40)];
///     default_backend().pack_bits(limb, 40, &mut bytes);
///     assert!(slot.unpack(&bytes, 40));
/// }
/// assert_eq!(u.finish(Domain::Coefficient), Some(p));
/// ```
#[derive(Debug)]
pub struct PolyUnpacker {
    basis: Arc<RnsBasis>,
    data: Vec<u64>,
    unpacked: Vec<bool>,
}

impl PolyUnpacker {
    /// An empty polynomial over `basis`.
    pub fn new(basis: &Arc<RnsBasis>) -> Self {
        Self {
            basis: basis.clone(),
            data: Vec::with_capacity(basis.len() * basis.degree()),
            unpacked: vec![false; basis.len()],
        }
    }

    /// Its basis.
    pub fn basis(&self) -> &Arc<RnsBasis> {
        &self.basis
    }

    /// Its limbs, in order, each to be unpacked once (those already in
    /// included: unpacking one again overwrites it).
    pub fn limbs(&mut self) -> impl Iterator<Item = LimbSlot<'_>> {
        let len = self.basis.len() * self.basis.degree();
        self.data.spare_capacity_mut()[..len]
            .chunks_exact_mut(self.basis.degree())
            .zip(self.basis.moduli())
            .zip(self.unpacked.iter_mut())
            .map(|((dst, m), done)| LimbSlot {
                dst,
                q: m.value(),
                done,
            })
    }

    /// The polynomial, tagged `domain`, once every limb is unpacked (with
    /// or without out-of-range residues: the caller has refused those);
    /// `None` before.
    pub fn finish(mut self, domain: Domain) -> Option<RnsPoly> {
        if !self.unpacked.iter().all(|&d| d) {
            return None;
        }
        // SAFETY: every limb went through `LimbSlot::unpack`, which writes
        // each of its values.
        unsafe { self.data.set_len(self.basis.len() * self.basis.degree()) };
        Some(RnsPoly::from_buffer_unchecked(
            &self.basis,
            domain,
            self.data,
        ))
    }
}

/// One limb of a [`PolyUnpacker`], to be unpacked (`Send`: limbs unpack in
/// parallel).
#[derive(Debug)]
pub struct LimbSlot<'a> {
    dst: &'a mut [MaybeUninit<u64>],
    q: u64,
    done: &'a mut bool,
}

impl LimbSlot<'_> {
    /// Unpacks the limb from `src` (its residues packed at `bits` bits, as
    /// [`Backend::pack_bits`](crate::backend::Backend::pack_bits) writes
    /// them) on the process's backend; false if a residue is not below the
    /// limb's prime, a padding bit is set, or `src` is not the limb's
    /// [`packed_len`] (the limb then stays missing).
    pub fn unpack(self, src: &[u8], bits: u32) -> bool {
        if !(1..=64).contains(&bits) || src.len() != packed_len(self.dst.len(), bits) {
            return false;
        }
        // The default backend is one of this crate's (`backend::available`),
        // whose `unpack_bits` writes every value whatever it returns:
        // `PolyUnpacker::finish` relies on it.
        let ok = default_backend().unpack_bits(src, bits, self.q, self.dst);
        *self.done = true;
        ok
    }
}

/// Calls `$f::<BITS>($args)` for `BITS` = `$bits` in 1..=64; false when
/// `$bits` is outside that range.
macro_rules! with_width {
    ($bits:expr, $f:ident, $($arg:expr),*) => {
        with_width!(@arms $bits, $f, ($($arg),*);
            1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60
            61 62 63 64)
    };
    (@arms $bits:expr, $f:ident, $args:tt; $($w:literal)*) => {
        match $bits {
            $($w => { with_width!(@call $f, $w, $args); true })*
            _ => false,
        }
    };
    (@call $f:ident, $w:literal, ($($arg:expr),*)) => {
        $f::<$w>($($arg),*)
    };
}

/// Packs `src` (each value below 2^bits) into `dst` (its
/// [`packed_len`] bytes), LSB first. Whole groups of eight go to `groups`
/// (a vector kernel) when it takes them (returns true, having written
/// `bits` bytes per group), else to the loop specialised to the width.
pub(crate) fn pack(
    src: &[u64],
    bits: u32,
    dst: &mut [u8],
    groups: impl FnOnce(&[u64], &mut [u8]) -> bool,
) {
    let whole = src.len() / 8;
    let (head, tail) = dst.split_at_mut(whole * bits as usize);
    if !groups(&src[..whole * 8], head) && !with_width!(bits, pack_groups, &src[..whole * 8], head)
    {
        pack_loop(&src[..whole * 8], bits, head);
    }
    pack_loop(&src[whole * 8..], bits, tail);
}

/// Unpacks `dst.len()` values of `bits` bits from `src` (as written by
/// [`pack`]) into a buffer that need not be initialised: every value of
/// `dst` is written, whatever is returned; false if a value is not below
/// `q` or a padding bit is set. Whole groups of eight values (`bits` bytes
/// each) go to `groups` (a vector kernel: `None` where it does not apply,
/// else whether every value is below `q`), else to the loop specialised to
/// the width; the rest to the general loop.
pub(crate) fn unpack(
    src: &[u8],
    bits: u32,
    q: u64,
    dst: &mut [MaybeUninit<u64>],
    groups: impl FnOnce(&[u8], &mut [MaybeUninit<u64>]) -> Option<bool>,
) -> bool {
    let whole = dst.len() / 8;
    let split = (whole * bits as usize).min(src.len());
    let (head, tail) = src.split_at(split);
    let (dst_head, dst_tail) = dst.split_at_mut(whole * 8);
    let mut ok = true;
    if let Some(vector_ok) = groups(head, dst_head) {
        ok = vector_ok;
    } else if !with_width!(bits, unpack_groups, head, q, dst_head, &mut ok) {
        ok = unpack_loop(head, bits, q, dst_head);
    }
    unpack_loop(tail, bits, q, dst_tail) && ok
}

/// [`pack`] of whole groups of eight values at a width known at
/// compile time.
fn pack_groups<const BITS: u32>(src: &[u64], dst: &mut [u8]) {
    for (vals, out) in src.chunks_exact(8).zip(dst.chunks_exact_mut(BITS as usize)) {
        // Unrolled: `have` and the byte positions are constants.
        let mut acc: u128 = 0;
        let mut have = 0u32;
        let mut at = 0usize;
        for &x in vals {
            acc |= u128::from(x) << have;
            have += BITS;
            if have >= 64 {
                out[at..at + 8].copy_from_slice(&(acc as u64).to_le_bytes());
                at += 8;
                acc >>= 64;
                have -= 64;
            }
        }
        // 8·BITS bits in all: what is left is whole bytes.
        let rest = (have / 8) as usize;
        out[at..at + rest].copy_from_slice(&(acc as u64).to_le_bytes()[..rest]);
    }
}

/// The general packing loop, for any number of values.
fn pack_loop(src: &[u64], bits: u32, dst: &mut [u8]) {
    let (words, tail) = dst.as_chunks_mut::<8>();
    let mut words = words.iter_mut();
    let mut acc: u128 = 0;
    let mut have = 0u32;
    for &x in src {
        acc |= u128::from(x) << have;
        have += bits;
        if have >= 64 {
            if let Some(w) = words.next() {
                *w = (acc as u64).to_le_bytes();
            }
            acc >>= 64;
            have -= 64;
        }
    }
    // Fewer than 64 bits are left: one last word, or the byte tail.
    let last = (acc as u64).to_le_bytes();
    match words.next() {
        Some(w) => *w = last,
        None => tail.copy_from_slice(&last[..tail.len()]),
    }
}
/// [`unpack`] of whole groups of eight values at a width known at
/// compile time; clears `ok` if a value is not below `q`.
fn unpack_groups<const BITS: u32>(src: &[u8], q: u64, dst: &mut [MaybeUninit<u64>], ok: &mut bool) {
    let mask = u64::MAX >> (64 - BITS);
    let mut bad = false;
    for (g, vals) in src.chunks_exact(BITS as usize).zip(dst.chunks_exact_mut(8)) {
        // Unrolled: each value's bytes and shift are constants, and its
        // bytes end at or before the group's end.
        for (i, y) in vals.iter_mut().enumerate() {
            let o = i * BITS as usize;
            let (b, shift) = (o / 8, o % 8);
            let need = (shift + BITS as usize).div_ceil(8);
            let mut w = [0u8; 16];
            w[..need].copy_from_slice(&g[b..b + need]);
            let x = (u128::from_le_bytes(w) >> shift) as u64 & mask;
            bad |= x >= q;
            y.write(x);
        }
    }
    *ok &= !bad;
}

/// The general unpacking loop. Each value is read on its own from a
/// 16-byte window (no carried state), so the loop pipelines.
fn unpack_loop(src: &[u8], bits: u32, q: u64, dst: &mut [MaybeUninit<u64>]) -> bool {
    let width = bits as usize;
    let mask = u64::MAX >> (64 - bits);
    let read = |buf: &[u8], o: usize| -> u64 {
        let window: [u8; 16] = buf[o / 8..o / 8 + 16].try_into().expect("16-byte window");
        (u128::from_le_bytes(window) >> (o % 8)) as u64 & mask
    };
    let mut bad = false;
    // Values whose window lies inside `src`, then the rest from a padded copy.
    let direct = if src.len() >= 16 {
        ((src.len() - 16) * 8 / width + 1).min(dst.len())
    } else {
        0
    };
    for (k, y) in dst[..direct].iter_mut().enumerate() {
        let x = read(src, k * width);
        bad |= x >= q;
        y.write(x);
    }
    let start = direct * width / 8 * 8;
    let mut tail = src[start / 8..].to_vec();
    tail.resize(tail.len() + 16, 0);
    for (k, y) in dst.iter_mut().enumerate().skip(direct) {
        let x = read(&tail, k * width - start);
        bad |= x >= q;
        y.write(x);
    }
    // Bits past the last value in the last byte must be zero.
    let used = dst.len() * width % 8;
    let padding_clear = used == 0 || src.last().is_none_or(|&b| b >> used == 0);
    !bad && padding_clear
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use super::*;

    fn pack_scalar(src: &[u64], bits: u32) -> Vec<u8> {
        let mut out = vec![0xAA; packed_len(src.len(), bits)];
        pack(src, bits, &mut out, |_, _| false);
        out
    }

    fn unpack_scalar(src: &[u8], bits: u32, q: u64, n: usize) -> (bool, Vec<u64>) {
        let mut out = vec![MaybeUninit::new(7); n];
        let ok = unpack(src, bits, q, &mut out, |_, _| None);
        // SAFETY: every entry was initialised above.
        (ok, out.iter().map(|x| unsafe { x.assume_init() }).collect())
    }

    /// Packing against a naive reference: the values' bits, LSB first, one
    /// after the other, zero-padded to a whole byte.
    #[test]
    fn packing_matches_a_bit_string() {
        let mut s = crate::testing::sampler();
        for bits in 1..=64u32 {
            // Tails alone (1, 3), whole groups of eight (8, 64, 1000), both (1003).
            for n in [1usize, 3, 8, 64, 1000, 1003] {
                let top = u64::MAX >> (64 - bits);
                // Random values, plus the edges 0 and 2^bits − 1.
                let mut v: Vec<u64> = (0..n).map(|_| s.next_u64() & top).collect();
                v[n - 1] = 0;
                v[0] = top;
                let mut want = vec![0u8; packed_len(n, bits)];
                for (i, x) in v.iter().enumerate() {
                    for b in 0..bits as usize {
                        if x >> b & 1 == 1 {
                            let at = i * bits as usize + b;
                            want[at / 8] |= 1 << (at % 8);
                        }
                    }
                }
                let got = pack_scalar(&v, bits);
                assert_eq!(got, want, "bits {bits}, n {n}");
                if bits < 64 {
                    assert_eq!(unpack_scalar(&got, bits, 1 << bits, n), (true, v.clone()));
                }
                // A value at or above the prime is refused (v[0] = 2^bits − 1).
                assert_eq!(unpack_scalar(&got, bits, top, n), (false, v.clone()));
                // A set padding bit is refused (there is one when n·bits is not
                // a multiple of 8).
                if !(n * bits as usize).is_multiple_of(8) {
                    let mut p = got.clone();
                    *p.last_mut().unwrap() |= 0x80;
                    assert!(!unpack_scalar(&p, bits, u64::MAX, n).0);
                }
            }
        }
    }

    /// The loops specialised to a width agree with the general loops on
    /// whole groups, at every width, and on which hold a value at or above
    /// the prime.
    #[test]
    fn specialised_loops_agree_with_the_general_ones() {
        let mut s = crate::testing::sampler();
        for bits in 1..=64u32 {
            let top = u64::MAX >> (64 - bits);
            let groups = 129;
            let mut v: Vec<u64> = (0..8 * groups).map(|_| s.next_u64() & top).collect();
            v[0] = top;
            v[8 * groups - 1] = 0;
            let bytes = groups * bits as usize;
            let mut general = vec![0xAAu8; bytes];
            pack_loop(&v, bits, &mut general);
            let mut special = vec![0x55u8; bytes];
            assert!(with_width!(bits, pack_groups, &v, &mut special));
            assert_eq!(special, general, "pack, bits {bits}");
            for q in [top, top.saturating_add(1)] {
                let mut general = vec![MaybeUninit::new(0u64); 8 * groups];
                let want_ok = unpack_loop(&special, bits, q, &mut general);
                let mut special_ok = true;
                let mut out = vec![MaybeUninit::new(1u64); 8 * groups];
                with_width!(bits, unpack_groups, &special, q, &mut out, &mut special_ok);
                assert_eq!(special_ok, want_ok, "unpack, bits {bits}, q {q}");
                // SAFETY: every entry was initialised above.
                let read = |x: &[MaybeUninit<u64>]| -> Vec<u64> {
                    x.iter().map(|x| unsafe { x.assume_init() }).collect()
                };
                assert_eq!(read(&out), v, "unpack, bits {bits}");
                assert_eq!(read(&general), v, "unpack, bits {bits}");
            }
        }
    }
}
