//! Bits in slots ([`SlotUint`], HElib's layout): the bits of one number in
//! consecutive slots of row 0, LSB in slot 0, every other slot 0.
//!
//! A shift towards the high bits by k is a row rotation right by k
//! (`rotate_rows(ct, −k)`); its wrapped-in slots come from the top of the
//! row, which is zero padding as long as N/2 ≥ e + k for values reaching
//! e slots. G = ab and P = a ⊕ b are 0 wherever both inputs are, so the
//! prefix rounds need no mask. A carry-save stage keeps the exact sum (a
//! carry above the width is kept, not masked), so the rows of a sum of n
//! numbers reach e = w + ⌈log2 n⌉ slots and one plaintext mask at the end
//! reduces mod 2^w. Circuits return [`PackedError::RowTooShort`] when
//! N/2 < e + (largest shift).
//!
//! Rotations right by powers of two need their Galois keys:
//! [`slot_rotations`].
//!
//! ```
//! use hecloud_bgv::{BgvParameters, Encoder, Evaluator, KeySet, params::test_literal};
//! use hecloud_circuits::packed::{slots, slot_rotations, BitCircuit, SlotUint};
//! use num_bigint::BigUint;
//! let params = BgvParameters::new_insecure_for_tests(test_literal(10, 7, 65537))?;
//! let keys = KeySet::generate(&params, &slot_rotations(params.n()), false)?;
//! let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
//! let bc = BitCircuit::new(&eval)?;
//! let x = SlotUint::encrypt(&keys, &enc, &BigUint::from(41u32), 16)?;
//! let y = SlotUint::encrypt(&keys, &enc, &BigUint::from(42u32), 16)?;
//! let (lt, stats) = bc.measure(|| slots::lt(&bc, &x, &y))?;
//! assert!(lt.decrypt(&keys, &enc)?);
//! assert_eq!((stats.depth, stats.products, stats.rotations), (5, 8, 7));
//! let s = slots::add(&bc, &x, &y)?;
//! assert_eq!(s.decrypt(&keys, &enc)?, BigUint::from(83u32));
//! # Ok::<(), hecloud_circuits::packed::PackedError>(())
//! ```

use hecloud_bgv::keys::power_of_two_rotations;
use hecloud_bgv::{Encoder, KeySet};
use num_bigint::BigUint;

use super::{BitCircuit, Combine, Depth, PackedBits, PackedError, Result, depth};
use crate::error::CircuitError;
use crate::uint::check_width;

/// The row rotations the bits-in-slots circuits use: right by each power of
/// two below N/2 (pass them to [`KeySet::generate`]).
pub fn slot_rotations(n: usize) -> Vec<i64> {
    power_of_two_rotations(n).into_iter().map(|k| -k).collect()
}

/// An unsigned integer of `width` bits (2..=min(1024, N/2)) in the slots of
/// one ciphertext: bit i in slot i of row 0, every other slot 0.
#[derive(Clone, Debug)]
pub struct SlotUint {
    bits: PackedBits,
    width: usize,
}

impl Depth for SlotUint {
    fn depth(&self) -> usize {
        self.bits.depth
    }
}

fn check_row(keys_n: usize, need: usize) -> Result<()> {
    let row = keys_n / 2;
    if need > row {
        return Err(PackedError::RowTooShort { need, row });
    }
    Ok(())
}

/// Checks every slot: bits below `width` (their values returned), zeros
/// above.
fn slot_bits(slots: &[u64], width: usize) -> Result<Vec<bool>> {
    for (slot, &value) in slots.iter().enumerate().skip(width) {
        if value != 0 {
            return Err(PackedError::Padding { slot, value });
        }
    }
    slots[..width]
        .iter()
        .enumerate()
        .map(|(slot, &value)| match value {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(PackedError::NotABit { slot, value }),
        })
        .collect()
}

impl SlotUint {
    /// Encrypts `value` (below 2^`width`) in the first `width` slots.
    pub fn encrypt(
        keys: &KeySet,
        encoder: &Encoder,
        value: &BigUint,
        width: usize,
    ) -> Result<Self> {
        check_width(width)?;
        check_row(keys.params().n(), width)?;
        if value.bits() > width as u64 {
            return Err(CircuitError::ValueTooWide {
                bits: value.bits(),
                width,
            }
            .into());
        }
        let bits: Vec<bool> = (0..width as u64).map(|i| value.bit(i)).collect();
        Ok(Self {
            bits: PackedBits::encrypt(keys, encoder, &bits)?,
            width,
        })
    }

    /// Wraps a ciphertext holding a `width`-bit number in its first slots
    /// (every other slot 0: nothing checks it).
    pub fn from_bits(bits: PackedBits, width: usize) -> Result<Self> {
        check_width(width)?;
        Ok(Self { bits, width })
    }

    /// Decrypts; a slot below the width that is not a bit, or one above it
    /// that is not 0, is an error.
    pub fn decrypt(&self, keys: &KeySet, encoder: &Encoder) -> Result<BigUint> {
        let bits = slot_bits(&self.bits.decrypt_slots(keys, encoder)?, self.width)?;
        let mut v = BigUint::default();
        for (i, b) in bits.into_iter().enumerate() {
            if b {
                v.set_bit(i as u64, true);
            }
        }
        Ok(v)
    }

    /// Width in bits.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The ciphertext.
    pub fn bits(&self) -> &PackedBits {
        &self.bits
    }
}

/// A bit in one slot of a ciphertext whose other slots are 0 (the result of
/// a comparison: nothing else of the computation is left for the key
/// holder to see).
#[derive(Clone, Debug)]
pub struct SlotBit {
    bits: PackedBits,
    slot: usize,
}

impl Depth for SlotBit {
    fn depth(&self) -> usize {
        self.bits.depth
    }
}

impl SlotBit {
    /// Decrypts the bit; any other slot not 0 is an error.
    pub fn decrypt(&self, keys: &KeySet, encoder: &Encoder) -> Result<bool> {
        let slots = self.bits.decrypt_slots(keys, encoder)?;
        for (slot, &value) in slots.iter().enumerate() {
            if slot != self.slot && value != 0 {
                return Err(PackedError::Padding { slot, value });
            }
        }
        match slots[self.slot] {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(PackedError::NotABit {
                slot: self.slot,
                value,
            }),
        }
    }

    /// The slot holding the bit.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The ciphertext.
    pub fn bits(&self) -> &PackedBits {
        &self.bits
    }
}

fn same_width(xs: &[&SlotUint]) -> Result<usize> {
    let first = xs.first().ok_or(CircuitError::EmptyOperands)?;
    match xs.iter().find(|x| x.width != first.width) {
        Some(x) => Err(CircuitError::WidthMismatch {
            left: first.width,
            right: x.width,
        }
        .into()),
        None => Ok(first.width),
    }
}

/// Prefix rounds d = 1, 2, 4, … while d < `span`: G ← G + P·(G ≫ d),
/// P ← P·(P ≫ d) (P only while a later round needs it); "≫ d" is a
/// rotation right by d. Afterwards slot i holds the G of positions
/// max(0, i − 2^rounds + 1)..=i.
fn prefix(
    bc: &BitCircuit<'_>,
    mut g: PackedBits,
    mut p: PackedBits,
    span: usize,
) -> Result<PackedBits> {
    let mut d = 1;
    while d < span {
        let need_p = 2 * d < span;
        // G and P serve this round's rotations and products: refresh them
        // before rotating (rather than their rotations after).
        let pairs: &[(usize, usize)] = if need_p { &[(1, 0), (1, 1)] } else { &[(1, 0)] };
        bc.refresh_for(&mut [&mut g, &mut p], pairs)?;
        let mut rot = if need_p {
            bc.rotate_many(&[(&g, -(d as i64)), (&p, -(d as i64))])?
        } else {
            bc.rotate_many(&[(&g, -(d as i64))])?
        };
        let p_low = need_p.then(|| rot.pop()).flatten();
        let g_low = rot.pop();
        let (g_new, p_new) = bc
            .combine_many(&[Combine {
                g: Some(&g),
                p: &p,
                g_low: g_low.as_ref(),
                p_low: p_low.as_ref(),
            }])?
            .remove(0);
        g = g_new.expect("G is present");
        if let Some(p_new) = p_new {
            p = p_new;
        }
        d *= 2;
    }
    Ok(g)
}

/// x + y mod 2^w (Kogge–Stone in the slots): depth 2 + ⌈log2(w − 1)⌉.
pub fn add(bc: &BitCircuit<'_>, x: &SlotUint, y: &SlotUint) -> Result<SlotUint> {
    sum(bc, &[x.clone(), y.clone()])
}

/// The sum of `xs` mod 2^w: carry-save stages of full adders acting on
/// whole rows (each carry row rotated right by one), one Kogge–Stone adder
/// in the slots, and a plaintext mask clearing the slots ≥ w. Depth as
/// [`super::sliced::sum`]; needs N/2 ≥ w + ⌈log2 n⌉ + 2^(⌈log2(w − 1)⌉ − 1).
pub fn sum(bc: &BitCircuit<'_>, xs: &[SlotUint]) -> Result<SlotUint> {
    let refs: Vec<&SlotUint> = xs.iter().collect();
    let w = same_width(&refs)?;
    if xs.len() == 1 {
        return Ok(xs[0].clone());
    }
    let span = w - 1; // positions whose carries matter
    check_row(
        bc.evaluator().params().n(),
        depth::sum_row_need(xs.len(), w),
    )?;

    let mut rows: Vec<PackedBits> = xs.iter().map(|x| x.bits.clone()).collect();
    while rows.len() > 2 {
        rows.sort_by_key(|r| r.depth);
        let triples = rows.len() / 3;
        let rest = rows.split_off(3 * triples);
        let items: Vec<_> = rows
            .chunks_exact(3)
            .map(|t| (&t[0], &t[1], &t[2]))
            .collect();
        let (sums, carries): (Vec<_>, Vec<_>) = bc.full_adder_many(&items)?.into_iter().unzip();
        let shifts: Vec<_> = carries.iter().map(|c| (c, -1)).collect();
        let shifted = bc.rotate_many(&shifts)?;
        rows = rest.into_iter().chain(sums).chain(shifted).collect();
    }
    let (p, g) = bc.half_adder(&rows[0], &rows[1])?;
    let g = prefix(bc, g, p.clone(), span)?;
    let carries = bc.rotate(&g, -1)?;
    let s = bc.xor(&p, &carries)?;
    let keep = vec![true; w];
    Ok(SlotUint {
        bits: bc.mask(&s, &keep)?,
        width: w,
    })
}

/// x < y: the carry out of ¬x + y, ¬x = (1 in slots < w) − x without a
/// product, g = ¬x·y and p = ¬x ⊕ y, ⌈log2 w⌉ prefix rounds (each a
/// rotation of G and P and two products, the last round one), and a mask
/// keeping the answer's slot w − 1. Depth 1 + ⌈log2 w⌉, 2⌈log2 w⌉ products,
/// 2⌈log2 w⌉ − 1 rotations; needs N/2 ≥ w + 2^(⌈log2 w⌉ − 1).
pub fn lt(bc: &BitCircuit<'_>, x: &SlotUint, y: &SlotUint) -> Result<SlotBit> {
    let w = same_width(&[x, y])?;
    check_row(bc.evaluator().params().n(), depth::lt_row_need(w))?;
    let ones: Vec<u64> = vec![1; w];
    let nx = bc.plain_minus(&bc.encoder().encode(&ones)?, &x.bits)?;
    let (p, g) = bc.half_adder(&nx, &y.bits)?;
    let g = prefix(bc, g, p, w)?;
    let mut keep = vec![false; w];
    keep[w - 1] = true;
    Ok(SlotBit {
        bits: bc.mask(&g, &keep)?,
        slot: w - 1,
    })
}

/// x > y: [`lt`] of (y, x).
pub fn gt(bc: &BitCircuit<'_>, x: &SlotUint, y: &SlotUint) -> Result<SlotBit> {
    lt(bc, y, x)
}
