//! Polynomials as packed limbs: their sizes and byte ranges, packing on
//! the process's backend, and unpacking into buffers that are not zeroed
//! first, each residue checked against its prime as it is read.

use std::sync::Arc;

use hecloud_math::backend::default_backend;
use hecloud_math::pack::{LimbSlot, PolyUnpacker, packed_len};
use hecloud_math::{Domain, RnsBasis, RnsPoly};
use rayon::prelude::*;

use super::header::HEADER_LEN;
use crate::error::{DecodeError, Result};

/// Bits stored per residue of a limb: the bit length of its prime.
pub(crate) fn residue_bits(q: u64) -> u32 {
    64 - q.leading_zeros()
}

/// Serialized size of one polynomial over `basis`: each limb is its N
/// residues packed at the bit length of its prime (LSB first), rounded up
/// to whole bytes.
pub fn packed_poly_bytes(basis: &RnsBasis) -> usize {
    basis
        .moduli()
        .iter()
        .map(|m| packed_len(basis.degree(), residue_bits(m.value())))
        .sum()
}

/// The byte ranges of the limbs of a packed polynomial over `basis`,
/// starting at `at`.
pub(super) fn limb_ranges(basis: &RnsBasis, at: usize) -> Vec<(std::ops::Range<usize>, u32)> {
    let mut start = at;
    basis
        .moduli()
        .iter()
        .map(|m| {
            let bits = residue_bits(m.value());
            let end = start + packed_len(basis.degree(), bits);
            let r = (start..end, bits);
            start = end;
            r
        })
        .collect()
}

pub(super) fn write_poly(out: &mut Vec<u8>, p: &RnsPoly) {
    let at = out.len();
    let ranges = limb_ranges(p.basis(), at);
    out.resize(at + packed_poly_bytes(p.basis()), 0);
    let mut rest = &mut out[at..];
    let mut dsts = Vec::with_capacity(ranges.len());
    for (r, bits) in &ranges {
        let (limb, tail) = rest.split_at_mut(r.len());
        dsts.push((limb, *bits));
        rest = tail;
    }
    dsts.into_par_iter()
        .zip(p.data().par_chunks_exact(p.degree()))
        .for_each(|((dst, bits), src)| pack_limb(src, bits, dst));
}

/// Packs a limb (each residue below 2^bits) into `dst`, LSB first, on the
/// process's backend (see [`hecloud_math::pack`]).
pub(crate) fn pack_limb(src: &[u64], bits: u32, dst: &mut [u8]) {
    default_backend().pack_bits(src, bits, dst);
}

/// Bytes `from..from + dst.len()` of what [`pack_limb`] makes of `src`:
/// whole groups of eight values packed in place, the groups cut by either
/// end packed aside and copied in part.
pub(super) fn pack_limb_range(src: &[u64], bits: u32, from: usize, dst: &mut [u8]) {
    let w = bits as usize;
    let to = from + dst.len();
    if !src.len().is_multiple_of(8) {
        // Fewer than eight values at the end (degrees below 8 only).
        let mut all = vec![0; packed_len(src.len(), bits)];
        pack_limb(src, bits, &mut all);
        dst.copy_from_slice(&all[from..to]);
        return;
    }
    let (first, last) = (from.div_ceil(w), to / w);
    if first < last {
        pack_limb(
            &src[8 * first..8 * last],
            bits,
            &mut dst[first * w - from..last * w - from],
        );
    }
    let head = (!from.is_multiple_of(w)).then_some(from / w);
    let tail = (!to.is_multiple_of(w) && head != Some(last)).then_some(last);
    let mut group = [0u8; 64];
    for g in head.into_iter().chain(tail) {
        let (start, end) = (from.max(g * w), to.min(g * w + w));
        pack_limb(&src[8 * g..8 * g + 8], bits, &mut group[..w]);
        dst[start - from..end - from].copy_from_slice(&group[start - g * w..end - g * w]);
    }
}

/// A limb to unpack, its packed bytes and residue bits.
pub(super) type LimbToUnpack<'a> = (LimbSlot<'a>, &'a [u8], u32);

/// Unpacks limbs in parallel, each `(destination, packed bytes, bits)`.
/// Every residue is checked against its prime as it is unpacked: no second
/// pass.
pub(super) fn unpack_limbs(limbs: Vec<LimbToUnpack<'_>>) -> Result<()> {
    let ok = limbs
        .into_par_iter()
        .map(|(dst, src, bits)| dst.unpack(src, bits))
        .reduce(|| true, |a, b| a && b);
    if ok {
        Ok(())
    } else {
        Err(DecodeError::ResidueOutOfRange.into())
    }
}

/// A reader over the body whose total length was checked up front.
pub(super) struct Body<'a> {
    pub(super) bytes: &'a [u8],
    at: usize,
}

impl<'a> Body<'a> {
    /// Checks that exactly `expected` body bytes follow the header.
    pub(super) fn new(bytes: &'a [u8], expected: usize) -> Result<Self> {
        let need = HEADER_LEN
            .checked_add(expected)
            .ok_or(DecodeError::InvalidField {
                field: "length",
                value: u64::MAX,
            })?;
        if bytes.len() < need {
            return Err(DecodeError::Truncated {
                need,
                have: bytes.len(),
            }
            .into());
        }
        if bytes.len() > need {
            return Err(DecodeError::TrailingBytes(bytes.len() - need).into());
        }
        Ok(Self {
            bytes,
            at: HEADER_LEN,
        })
    }

    pub(super) fn poly(&mut self, basis: &Arc<RnsBasis>) -> Result<RnsPoly> {
        let ranges = limb_ranges(basis, self.at);
        self.at += packed_poly_bytes(basis);
        let mut buf = PolyUnpacker::new(basis);
        let limbs = buf
            .limbs()
            .zip(ranges)
            .map(|(dst, (r, bits))| (dst, &self.bytes[r], bits))
            .collect();
        unpack_limbs(limbs)?;
        Ok(buf.finish(Domain::Ntt).expect("every limb unpacked"))
    }

    pub(super) fn seed(&mut self) -> [u8; 32] {
        let mut s = [0u8; 32];
        s.copy_from_slice(&self.bytes[self.at..self.at + 32]);
        self.at += 32;
        s
    }
}
