//! Upper bounds on the bootstraps of the circuits, from their shape alone.
//!
//! Running a circuit on the [`ClearEngine`](crate::ClearEngine) counts its
//! bootstraps exactly, but takes time proportional to the circuit (a sum of
//! 4096 operands of 64 bits: about 10⁵ lookups). A server that refuses jobs
//! above a cost limit needs a figure first, so that an oversized graph is
//! refused before any circuit runs. These bounds cost `O(width · log n)`
//! for sums by carry chains, one pass over the counter-tree plan for the
//! other adders and `O(1)` for comparisons, and never fall below the clear engine's count (checked in
//! `tests/bound.rs` over a range of operand counts, widths and thread
//! counts).
//!
//! The sum bounds replay the circuits' own planning (counter stages, ripple
//! digits, carry-chain groups, the Kogge–Stone schedule: the same functions
//! the circuits call) on column heights, assuming every bit may be 1. They are exact
//! while that holds, and above the real count where a circuit knows better
//! (a sum bit that can only be 0 narrows a later lookup's input, which lets
//! more tables share a bootstrap): within 8 % on the tested range. The
//! comparison bound is `min(w − 1, ⌈w/2⌉ + threads)`: the comparator's
//! lookups form a tree over the `w` bit positions in which each reads at
//! least two inputs (so at most `w − 1`, whatever the layout), and its chains
//! take two positions per lookup, the parallel layouts a thread count buys
//! adding fewer lookups than there are threads (observed over 1 to 128
//! threads, checked by the tests, not proven).
//!
//! ```
//! use hecloud_circuits::{bound, circuits::{self, AdderKind, SumMode}, with_cost, BitEngine, ClearEngine, EncryptedUint};
//! let e = ClearEngine::new();
//! let xs: Vec<_> = (0..20).map(|v| EncryptedUint::encrypt_u128(&e, v, 16)).collect::<Result<_, _>>()?;
//! let (_, cost) = with_cost(&e, || circuits::sum(&e, &xs, SumMode::Full, AdderKind::Auto));
//! let b = bound::sum_bootstraps(20, 16, SumMode::Full, AdderKind::Auto, e.threads())?;
//! assert!(b >= cost.bootstraps);
//! # Ok::<(), hecloud_circuits::CircuitError>(())
//! ```

use crate::circuits::{
    AdderKind, RIPPLE_MAX_BIT_ROWS, RIPPLE_MAX_ROWS, SumMode, auto_kind, chain_groups,
    kogge_stone_schedule, plan_digit_heights, plan_stage,
};
use crate::engine::{PLAINTEXT_SPACE, bit_len, lut_grouping};
use crate::error::{CircuitError, Result};
use crate::uint::check_width;

/// Upper bound on the bootstraps of [`circuits::sum`](crate::circuits::sum)
/// of `n` operands of `width` bits on an engine with `threads` threads (which
/// [`AdderKind::Auto`] picks the adder by). Bad shapes are the errors `sum`
/// itself returns: no operand, a width (or a full sum's width) out of range.
pub fn sum_bootstraps(
    n: usize,
    width: usize,
    mode: SumMode,
    kind: AdderKind,
    threads: usize,
) -> Result<u64> {
    if n == 0 {
        return Err(CircuitError::EmptyOperands);
    }
    check_width(width)?;
    let out_w = match mode {
        SumMode::Modular => width,
        SumMode::Full => width + bit_len((n - 1) as u64),
    };
    check_width(out_w)?;
    if n == 1 {
        return Ok(0);
    }
    let kind = match kind {
        AdderKind::Auto => auto_kind(threads),
        k => k,
    };
    // Columns of the operands' bits; the extra columns of a full sum start empty.
    let heights: Vec<usize> = (0..out_w).map(|c| if c < width { n } else { 0 }).collect();
    match kind {
        AdderKind::CarryChains | AdderKind::Auto => carry_chains(n, width, out_w),
        AdderKind::Ripple => {
            let target = if n <= RIPPLE_MAX_ROWS {
                RIPPLE_MAX_ROWS
            } else {
                RIPPLE_MAX_BIT_ROWS
            };
            let (tree, heights) = counter_tree(heights, target);
            Ok(tree + ripple_lane(&heights, false, false)?)
        }
        AdderKind::KoggeStone => {
            let (tree, _) = counter_tree(heights, 2);
            Ok(tree + kogge_stone(out_w))
        }
    }
}

/// Upper bound on the bootstraps of
/// [`circuits::compare`](crate::circuits::compare) (and `lt`, `gt`) at
/// `width` bits on an engine with `threads` threads (which the comparator
/// picks its layout by): `min(width − 1, ⌈width/2⌉ + threads)` (see the
/// module docs).
pub fn compare_bootstraps(width: usize, threads: usize) -> Result<u64> {
    check_width(width)?;
    let chains = width.div_ceil(2).saturating_add(threads.max(1));
    Ok((width - 1).min(chains) as u64)
}

/// Upper bound on the bootstraps of [`circuits::min`](crate::circuits::min),
/// [`circuits::max`](crate::circuits::max) and
/// [`circuits::min_max`](crate::circuits::min_max) at `width` bits: the
/// comparison, then one bootstrap per bit.
pub fn min_max_bootstraps(width: usize, threads: usize) -> Result<u64> {
    Ok(compare_bootstraps(width, threads)? + width as u64)
}

/// Rounds of carry-chain lanes down to one row: per round, lanes of the two
/// sizes [`chain_groups`] splits the rows into, the first round over the
/// operands' `width` columns (the columns above are empty), later rounds
/// over all `out_w`.
fn carry_chains(n: usize, width: usize, out_w: usize) -> Result<u64> {
    let (mut rows, mut row_width, mut total) = (n, width, 0u64);
    while rows > 1 {
        let groups = chain_groups(rows);
        let (size, taller) = (rows / groups, rows % groups);
        for (size, lanes) in [(size + 1, taller), (size, groups - taller)] {
            if lanes == 0 {
                continue;
            }
            let heights: Vec<usize> = (0..out_w)
                .map(|c| if c < row_width { size } else { 0 })
                .collect();
            total += lanes as u64 * ripple_lane(&heights, false, false)?;
        }
        rows = groups;
        row_width = out_w;
    }
    Ok(total)
}

/// Bootstraps of one ripple lane over columns of these heights: per digit,
/// the carry lookup (carrying the low sum bits a many-LUT bootstrap has
/// room for) and one lookup per remaining sum bit.
fn ripple_lane(heights: &[usize], cin: bool, need_carry: bool) -> Result<u64> {
    let digits = plan_digit_heights(heights, cin)?;
    let nd = digits.len();
    let mut total = 0u64;
    for (j, &(_, k, vmax)) in digits.iter().enumerate() {
        let carry = j + 1 < nd || need_carry;
        let per = ((PLAINTEXT_SPACE / (vmax + 1)) as usize).max(1);
        let shared = k.min(per.saturating_sub(usize::from(carry)));
        total += 1 + (k - shared) as u64;
    }
    Ok(total)
}

/// Bootstraps of the counter tree that brings every column down to
/// `max_height` bits, and the heights it leaves.
fn counter_tree(mut heights: Vec<usize>, max_height: usize) -> (u64, Vec<usize>) {
    let width = heights.len();
    let max_height = max_height.max(2);
    let mut total = 0u64;
    while heights.iter().any(|&h| h > max_height) {
        let mut next = heights.clone();
        for (c, _, k) in plan_stage(&heights, max_height) {
            let kept = bit_len(k as u64).min(width - c);
            total += lut_grouping(k as u64, kept).1 as u64;
            next[c] -= k;
            for h in &mut next[c..c + kept] {
                *h += 1;
            }
        }
        heights = next;
    }
    (total, heights)
}

/// Bootstraps of the Kogge–Stone adder of two rows of `width` bits without
/// carry out: the prefix nodes the sum bits need, then one per sum bit.
fn kogge_stone(width: usize) -> u64 {
    let required: Vec<usize> = (0..width).collect();
    let nodes: usize = kogge_stone_schedule(width + 1, &required)
        .iter()
        .map(|level| level.iter().filter(|&&b| b).count())
        .sum();
    (nodes + width) as u64
}
