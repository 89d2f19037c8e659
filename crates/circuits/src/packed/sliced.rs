//! Bit-sliced numbers ([`SlicedUints`]): one ciphertext per bit position,
//! slot j holding a bit of number j, so one circuit run computes on up to N
//! independent numbers. Every layer of a circuit is one batch of gates
//! (parallel products, one refresh round).
//!
//! Circuits (depths in [the module docs](super)): [`add`] (Kogge–Stone),
//! [`sum`] (carry-save full adders, then Kogge–Stone; both mod 2^w),
//! [`lt`] / [`gt`] (the carry of ¬X + Y through a prefix tree), [`min`] /
//! [`max`] (a comparison and a select).
//!
//! ```
//! use hecloud_bgv::{BgvParameters, Encoder, Evaluator, KeySet, params::test_literal};
//! use hecloud_circuits::packed::{sliced, BitCircuit, SlicedUints};
//! use num_bigint::BigUint;
//! let params = BgvParameters::new_insecure_for_tests(test_literal(10, 8, 65537))?;
//! let keys = KeySet::generate(&params, &[], false)?;
//! let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
//! let bc = BitCircuit::new(&eval)?;
//! let rows: Vec<SlicedUints> = [[1u32, 250], [2, 3], [3, 4]]
//!     .iter()
//!     .map(|r| SlicedUints::encrypt(&keys, &enc, &r.map(BigUint::from), 8))
//!     .collect::<Result<_, _>>()?;
//! let (s, stats) = bc.measure(|| sliced::sum(&bc, &rows))?;
//! assert_eq!(s.decrypt(&keys, &enc)?, [6u32, 1].map(BigUint::from)); // 257 mod 256
//! assert_eq!(stats.depth, 2 + 2 + 3);
//! # Ok::<(), hecloud_circuits::packed::PackedError>(())
//! ```

use std::collections::HashMap;

use hecloud_bgv::{Encoder, KeySet};
use num_bigint::BigUint;
use rayon::prelude::*;

use super::{BitCircuit, Combine, Depth, PackedBits, PackedError, Result};
use crate::error::CircuitError;
use crate::uint::check_width;

/// Up to N unsigned integers of one width (2..=1024 bits), bit-sliced: bit
/// i of number j in slot j of ciphertext i.
#[derive(Clone, Debug)]
pub struct SlicedUints {
    bits: Vec<PackedBits>,
    count: usize,
}

impl Depth for SlicedUints {
    fn depth(&self) -> usize {
        self.bits.depth()
    }
}

impl SlicedUints {
    /// Encrypts `values` (at most N of them, each below 2^`width`) in
    /// `width` ciphertexts.
    pub fn encrypt(
        keys: &KeySet,
        encoder: &Encoder,
        values: &[BigUint],
        width: usize,
    ) -> Result<Self> {
        check_width(width)?;
        if values.is_empty() {
            return Err(CircuitError::EmptyOperands.into());
        }
        let slots = keys.params().n();
        if values.len() > slots {
            return Err(PackedError::TooManyNumbers {
                given: values.len(),
                slots,
            });
        }
        if let Some(v) = values.iter().find(|v| v.bits() > width as u64) {
            return Err(CircuitError::ValueTooWide {
                bits: v.bits(),
                width,
            }
            .into());
        }
        let bits = (0..width as u64)
            .into_par_iter()
            .map(|i| {
                let column: Vec<u64> = values.iter().map(|v| u64::from(v.bit(i))).collect();
                Ok(PackedBits::new(keys.encrypt(&encoder.encode(&column)?)?))
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            bits,
            count: values.len(),
        })
    }

    /// Wraps bit ciphertexts (LSB first) holding `count` numbers.
    pub fn from_bits(bits: Vec<PackedBits>, count: usize) -> Result<Self> {
        check_width(bits.len())?;
        Ok(Self { bits, count })
    }

    /// Decrypts the numbers; a slot that is not a bit is an error.
    pub fn decrypt(&self, keys: &KeySet, encoder: &Encoder) -> Result<Vec<BigUint>> {
        let columns = self
            .bits
            .par_iter()
            .map(|b| b.decrypt_bits(keys, encoder))
            .collect::<Result<Vec<_>>>()?;
        Ok((0..self.count)
            .map(|j| {
                let mut v = BigUint::default();
                for (i, column) in columns.iter().enumerate() {
                    if column[j] {
                        v.set_bit(i as u64, true);
                    }
                }
                v
            })
            .collect())
    }

    /// Width in bits.
    pub fn width(&self) -> usize {
        self.bits.len()
    }

    /// How many numbers (slots in use).
    pub fn count(&self) -> usize {
        self.count
    }

    /// The bit ciphertexts, LSB first.
    pub fn bits(&self) -> &[PackedBits] {
        &self.bits
    }
}

/// Width and count shared by all operands.
fn shape(xs: &[&SlicedUints]) -> Result<(usize, usize)> {
    let first = xs.first().ok_or(CircuitError::EmptyOperands)?;
    for x in xs {
        if x.width() != first.width() {
            return Err(CircuitError::WidthMismatch {
                left: first.width(),
                right: x.width(),
            }
            .into());
        }
        if x.count != first.count {
            return Err(PackedError::CountMismatch {
                left: first.count,
                right: x.count,
            });
        }
    }
    Ok((first.width(), first.count))
}

/// A row of bits, LSB first; `None` is a known 0 (the low bit of a carry
/// row), which saves its products.
type Row = Vec<Option<PackedBits>>;

fn row_depth(row: &Row) -> usize {
    row.iter().flatten().map(|b| b.depth).max().unwrap_or(0)
}

/// The numbers of a row, its known zeros encrypted as zeros like `like`.
fn finish(bc: &BitCircuit<'_>, row: Row, like: &PackedBits, count: usize) -> Result<SlicedUints> {
    let bits = row
        .into_iter()
        .map(|b| match b {
            Some(b) => Ok(b),
            None => bc.zero_like(like),
        })
        .collect::<Result<_>>()?;
    SlicedUints::from_bits(bits, count)
}

/// x + y mod 2^w (Kogge–Stone): depth 2 + ⌈log2(w − 1)⌉.
pub fn add(bc: &BitCircuit<'_>, x: &SlicedUints, y: &SlicedUints) -> Result<SlicedUints> {
    sum(bc, &[x.clone(), y.clone()])
}

/// The sum of `xs` mod 2^w: 3 → 2 carry-save stages of full adders (the
/// shallowest rows first, the deepest input of each adder as its third),
/// then one Kogge–Stone adder. Depth ≤ 2·s(n) + 2 + ⌈log2(w − 1)⌉ for s(n)
/// stages.
pub fn sum(bc: &BitCircuit<'_>, xs: &[SlicedUints]) -> Result<SlicedUints> {
    let refs: Vec<&SlicedUints> = xs.iter().collect();
    let (w, count) = shape(&refs)?;
    if xs.len() == 1 {
        return Ok(xs[0].clone());
    }
    let mut rows: Vec<Row> = xs
        .iter()
        .map(|x| x.bits.iter().cloned().map(Some).collect())
        .collect();
    while rows.len() > 2 {
        rows = carry_save_stage(bc, rows, w)?;
    }
    let out = match &rows[..] {
        [a, b] => kogge_stone(bc, a, b, w)?,
        _ => rows.swap_remove(0), // a carry row that was all zeros
    };
    finish(bc, out, &xs[0].bits[0], count)
}

/// One stage: the rows in triples (by depth, the deepest left over), each
/// triple to a sum row and a carry row shifted one position up (the carry
/// out of the top dropped: mod 2^w).
fn carry_save_stage(bc: &BitCircuit<'_>, mut rows: Vec<Row>, w: usize) -> Result<Vec<Row>> {
    rows.sort_by_key(row_depth);
    let triples = rows.len() / 3;
    let rest = rows.split_off(3 * triples);
    // Per triple and position: the present bits, shallowest first.
    let mut fa = Vec::new();
    let mut fa_at = Vec::new();
    let mut ha = Vec::new();
    let mut ha_at = Vec::new();
    let mut sums: Vec<Row> = vec![vec![None; w]; triples];
    let mut carries: Vec<Row> = vec![vec![None; w]; triples];
    for k in 0..triples {
        for i in 0..w {
            let mut present: Vec<&PackedBits> =
                (0..3).filter_map(|r| rows[3 * k + r][i].as_ref()).collect();
            present.sort_by_key(|b| b.depth);
            match present[..] {
                [a, b, c] => {
                    fa.push((a, b, c));
                    fa_at.push((k, i));
                }
                [a, b] => {
                    ha.push((a, b));
                    ha_at.push((k, i));
                }
                [a] => sums[k][i] = Some(a.clone()),
                _ => {}
            }
        }
    }
    let fa_out = bc.full_adder_many(&fa)?;
    let ha_out = bc.half_adder_many(&ha)?;
    for ((k, i), (s, c)) in fa_at
        .into_iter()
        .chain(ha_at)
        .zip(fa_out.into_iter().chain(ha_out))
    {
        sums[k][i] = Some(s);
        if i + 1 < w {
            carries[k][i + 1] = Some(c);
        }
    }
    let mut out = rest;
    out.extend(sums);
    out.extend(
        carries
            .into_iter()
            .filter(|r| r.iter().any(Option::is_some)),
    );
    Ok(out)
}

/// a + b mod 2^w, Kogge–Stone: g = ab and p = a ⊕ b per position (one
/// product), ⌈log2(w − 1)⌉ prefix rounds for the carries into positions
/// 1..w, and s = p ⊕ carry.
fn kogge_stone(bc: &BitCircuit<'_>, a: &Row, b: &Row, w: usize) -> Result<Row> {
    let mut g: Row = vec![None; w];
    let mut p: Row = vec![None; w];
    let mut pairs = Vec::new();
    let mut at = Vec::new();
    for i in 0..w {
        match (&a[i], &b[i]) {
            (Some(x), Some(y)) => {
                pairs.push((x, y));
                at.push(i);
            }
            (Some(x), None) | (None, Some(x)) => p[i] = Some(x.clone()),
            (None, None) => {}
        }
    }
    for (i, (s, c)) in at.into_iter().zip(bc.half_adder_many(&pairs)?) {
        p[i] = Some(s);
        g[i] = Some(c);
    }
    // Prefix over the positions 0..m whose carries matter.
    let m = w - 1;
    let mut gg: Row = g[..m].to_vec();
    let mut pp: Row = p[..m].to_vec();
    let mut d = 1;
    while d < m {
        let need_p = 2 * d < m;
        refresh_round(bc, &mut gg, &mut pp, d, need_p)?;
        let mut items = Vec::new();
        let mut at = Vec::new();
        // Positions whose P' is a known 0: their P becomes 0.
        let mut zero_p = Vec::new();
        for i in d..m {
            let Some(pi) = &pp[i] else { continue };
            let g_low = gg[i - d].as_ref();
            let want_p = need_p && i >= 2 * d;
            let p_low = if want_p { pp[i - d].as_ref() } else { None };
            if want_p && p_low.is_none() {
                zero_p.push(i);
            }
            if g_low.is_none() && p_low.is_none() {
                continue;
            }
            items.push(Combine {
                g: gg[i].as_ref(),
                p: pi,
                g_low,
                p_low,
            });
            at.push((i, p_low.is_some()));
        }
        let out = bc.combine_many(&items)?;
        drop(items);
        for ((i, with_p), (g_new, p_new)) in at.into_iter().zip(out) {
            gg[i] = g_new;
            if with_p {
                pp[i] = p_new;
            }
        }
        for i in zero_p {
            pp[i] = None;
        }
        d *= 2;
    }
    // s_i = p_i ⊕ G_{i−1}.
    let mut out: Row = vec![None; w];
    out[0] = p[0].clone();
    let mut pairs = Vec::new();
    let mut at = Vec::new();
    for i in 1..w {
        match (&p[i], &gg[i - 1]) {
            (Some(x), Some(y)) => {
                pairs.push((x, y));
                at.push(i);
            }
            (Some(x), None) | (None, Some(x)) => out[i] = Some(x.clone()),
            (None, None) => {}
        }
    }
    for (i, s) in at.into_iter().zip(bc.xor_many(&pairs)?) {
        out[i] = Some(s);
    }
    Ok(out)
}

/// Refreshes in place the G and P a prefix round at distance `d` will use
/// (G and P of the low positions serve several rounds: refreshed once).
fn refresh_round(
    bc: &BitCircuit<'_>,
    gg: &mut Row,
    pp: &mut Row,
    d: usize,
    need_p: bool,
) -> Result<()> {
    let m = gg.len();
    let (mut use_g, mut use_p) = (vec![false; m], vec![false; m]);
    // Products as ((is P, position), (is P, position)).
    let mut products = Vec::new();
    for i in d..m {
        if pp[i].is_none() {
            continue;
        }
        let g_low = gg[i - d].is_some();
        let p_low = need_p && i >= 2 * d && pp[i - d].is_some();
        if !g_low && !p_low {
            continue;
        }
        use_p[i] = true;
        use_g[i] = gg[i].is_some();
        if g_low {
            use_g[i - d] = true;
            products.push(((true, i), (false, i - d)));
        }
        if p_low {
            use_p[i - d] = true;
            products.push(((true, i), (true, i - d)));
        }
    }
    let mut index = HashMap::new();
    let mut cells: Vec<&mut PackedBits> = Vec::new();
    for (is_p, row, used) in [(false, gg, &use_g), (true, pp, &use_p)] {
        for (i, bit) in row.iter_mut().enumerate() {
            if let (true, Some(bit)) = (used[i], bit) {
                index.insert((is_p, i), cells.len());
                cells.push(bit);
            }
        }
    }
    let pairs: Vec<(usize, usize)> = products.iter().map(|(a, b)| (index[a], index[b])).collect();
    bc.refresh_for(&mut cells, &pairs)
}

/// Slot-wise x < y: the carry out of ¬x + y, from g = ¬x·y and p = ¬x ⊕ y
/// per position through a balanced prefix tree (only the carry out is
/// needed). Depth 1 + ⌈log2 w⌉; about 3w products.
pub fn lt(bc: &BitCircuit<'_>, x: &SlicedUints, y: &SlicedUints) -> Result<PackedBits> {
    let (w, _) = shape(&[x, y])?;
    let nx = bc.not_many(&x.bits.iter().collect::<Vec<_>>())?;
    let pairs: Vec<_> = nx.iter().zip(&y.bits).collect();
    // Segments, lowest first: (G, P); the lowest needs no P.
    let mut segs: Vec<(PackedBits, Option<PackedBits>)> = bc
        .half_adder_many(&pairs)?
        .into_iter()
        .enumerate()
        .map(|(i, (p, g))| (g, (i > 0).then_some(p)))
        .collect();
    debug_assert_eq!(segs.len(), w);
    while segs.len() > 1 {
        let items: Vec<Combine<'_>> = segs
            .chunks_exact(2)
            .map(|pair| {
                let (lo, hi) = (&pair[0], &pair[1]);
                Combine {
                    g: Some(&hi.0),
                    p: hi.1.as_ref().expect("only the lowest segment lacks P"),
                    g_low: Some(&lo.0),
                    p_low: lo.1.as_ref(),
                }
            })
            .collect();
        let combined = bc.combine_many(&items)?;
        drop(items);
        let leftover = (segs.len() % 2 == 1).then(|| segs.pop()).flatten();
        segs = combined
            .into_iter()
            .map(|(g, p)| (g.expect("G' is present"), p))
            .chain(leftover)
            .collect();
    }
    Ok(segs.remove(0).0)
}

/// Slot-wise x > y: [`lt`] of (y, x).
pub fn gt(bc: &BitCircuit<'_>, x: &SlicedUints, y: &SlicedUints) -> Result<PackedBits> {
    lt(bc, y, x)
}

/// Slot-wise min(x, y): the select `lt ? x : y`, one product per bit after
/// the comparison. Depth 2 + ⌈log2 w⌉.
pub fn min(bc: &BitCircuit<'_>, x: &SlicedUints, y: &SlicedUints) -> Result<SlicedUints> {
    let c = lt(bc, x, y)?;
    select(bc, &c, x, y)
}

/// Slot-wise max(x, y): the select `lt ? y : x`. Depth 2 + ⌈log2 w⌉.
pub fn max(bc: &BitCircuit<'_>, x: &SlicedUints, y: &SlicedUints) -> Result<SlicedUints> {
    let c = lt(bc, x, y)?;
    select(bc, &c, y, x)
}

/// Slot-wise `cond ? a : b` on every bit.
pub fn select(
    bc: &BitCircuit<'_>,
    cond: &PackedBits,
    a: &SlicedUints,
    b: &SlicedUints,
) -> Result<SlicedUints> {
    let (_, count) = shape(&[a, b])?;
    let triples: Vec<_> = a
        .bits
        .iter()
        .zip(&b.bits)
        .map(|(x, y)| (cond, x, y))
        .collect();
    SlicedUints::from_bits(bc.select_many(&triples)?, count)
}
