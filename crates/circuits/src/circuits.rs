//! Integer circuits over any [`BitEngine`]: carry-save reduction, adders,
//! multi-operand sums, subtraction, comparison, equality, min/max.
//!
//! Every circuit is built from layers of independent lookups; the bootstraps
//! and layers it costs are reported by [`with_cost`].
//!
//! # Encodings used to fuse gates into single lookups
//!
//! * A **carry status** (trit) of a bit position or a group of positions:
//!   0 = kill, 1 = propagate, 2 = generate. For one position it is `a + b`,
//!   a free linear combination. Two statuses combine in one lookup on
//!   `3·hi + lo` (result: `hi` unless `hi` propagates, then `lo`), which is
//!   the Kogge–Stone prefix operator `(g, p) ∘ (g', p')` in one bootstrap
//!   instead of two gates.
//! * A **comparison status**: the trit `t = sign(x − y)`, held as `t + 1`.
//!   For one position it is `x − y + 1`, free. Three statuses (most
//!   significant first) combine in one lookup on `4t₂ + 2t₁ + t₀`, whose sign
//!   is that of the first non-zero trit. The part that reaches the least
//!   significant bit only needs the bit `b` = "greater", and `4t₃ + 2t₂ + t₁ + b
//!   ≥ 1` combines four inputs. A lookup outputs its status already scaled by
//!   the weight its consumer gives it, so only raw positions (two fresh bits)
//!   pay for their weight in noise: [`compare`] costs `⌈w/2⌉` bootstraps.
//! * Counters: the sum of up to 15 bits is one linear combination; each output
//!   bit is one table, grouped into many-LUT bootstraps by the engine.
//! * Ripple digits: a carry chain reads each digit's carry and sum bits from
//!   one lookup input `Σ column bits · 2^i + carry`. Up to 8 rows fit bit by
//!   bit (`8 + 7 ≤ 15`, the carry stays ≤ 7), so one chain turns 8 operands
//!   into one for 2 bootstraps per column — cheaper than a counter tree (a
//!   (15,4) counter costs 4 bootstraps to remove 11 bits). [`sum`] with
//!   [`AdderKind::CarryChains`] (the default below 8 threads) runs such chains
//!   side by side in lockstep; with [`AdderKind::KoggeStone`] or
//!   [`AdderKind::Ripple`] it reduces with the counter tree first.
//!
//! # Bootstraps (32-bit operands, same as the TFHE engine)
//!
//! | circuit | bootstraps | layers |
//! | --- | --- | --- |
//! | sum of 8, carry chains | 63 | 32 |
//! | sum of 16, carry chains | 157 | 48 |
//! | comparison, two threads | 16 | 9 |
//! | comparison, carry of `¬X + Y` | 32 | 6 |

use crate::engine::{
    BitEngine, Expr, Lut, LutOp, NOISE_BUDGET, Stats, Wire, WireOf, bit_len, counter_op, mux_expr,
    mux_lut, one,
};
use crate::error::{CircuitError, Result};
use crate::uint::{EncryptedUint, UintOf, check_width};

/// Runs `f` and returns its result with the bootstraps and layers it cost on `e`.
///
/// ```
/// use hecloud_circuits::{circuits, with_cost, ClearEngine, EncryptedUint};
/// let e = ClearEngine::new();
/// let x = EncryptedUint::encrypt_u128(&e, 5, 8)?;
/// let y = EncryptedUint::encrypt_u128(&e, 9, 8)?;
/// let (lt, cost) = with_cost(&e, || circuits::lt(&e, &x, &y));
/// assert!(e.decrypt_bit(&lt?)?);
/// assert!(cost.bootstraps > 0 && cost.depth > 0);
/// # use hecloud_circuits::BitEngine;
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub fn with_cost<E: BitEngine, T>(e: &E, f: impl FnOnce() -> T) -> (T, Stats) {
    let before = e.stats();
    let out = f();
    (out, e.stats() - before)
}

/// Final adder of a sum: how two rows are added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AdderKind {
    /// Kogge–Stone parallel prefix on carry statuses: depth ⌈log2(w+1)⌉ + 1,
    /// about `w·log2 w` bootstraps.
    KoggeStone,
    /// Ripple carry: each digit (two columns, or one when two do not fit) is
    /// one lookup input `Σ bits + carry` from which the carry and the sum bits
    /// are read. Two rows: `w` bootstraps (carry and low bit share a many-LUT
    /// bootstrap), `w/2` carries deep. It also adds up to 4 rows over 2-bit
    /// digits (1.5 bootstraps per bit) or 7 rows bit by bit (2 per bit), which
    /// lets a sum stop its counter tree early. Sum-bit lookups fill the layers
    /// of the carry chain up to the engine's thread count.
    Ripple,
    /// For sums: no counter tree; operands are split into groups of up to 8
    /// rows, each group added by one ripple lane (2 bootstraps per column), all
    /// lanes in lockstep, repeated on the resulting rows. For two operands it
    /// is [`AdderKind::Ripple`].
    CarryChains,
    /// Carry chains below 8 threads, Kogge–Stone (after a counter tree) from 8
    /// threads on.
    #[default]
    Auto,
}

/// Width of a multi-operand sum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SumMode {
    /// Wraps modulo 2^width.
    #[default]
    Modular,
    /// Grows by ⌈log2 n⌉ bits so that nothing is lost.
    Full,
}

fn same_width<C>(x: &EncryptedUint<C>, y: &EncryptedUint<C>) -> Result<usize>
where
    C: Clone,
{
    if x.width() == y.width() {
        Ok(x.width())
    } else {
        Err(CircuitError::WidthMismatch {
            left: x.width(),
            right: y.width(),
        })
    }
}

/// Full adder of three bits: `(sum, carry)` from one bootstrap.
///
/// ```
/// use hecloud_circuits::{circuits, BitEngine, ClearEngine};
/// let e = ClearEngine::new();
/// let b: Vec<_> = [true, true, false].iter().map(|&v| e.encrypt_bit(v).unwrap()).collect();
/// let (s, c) = circuits::full_adder(&e, &b[0], &b[1], &b[2])?;
/// assert_eq!((e.decrypt_bit(&s)?, e.decrypt_bit(&c)?), (false, true));
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub fn full_adder<E: BitEngine>(
    e: &E,
    a: &WireOf<E>,
    b: &WireOf<E>,
    c: &WireOf<E>,
) -> Result<(WireOf<E>, WireOf<E>)> {
    e.full_adder(a, b, c)
}

/// Reduces columns of bits (column `c` has weight 2^c) to at most `max_height`
/// (≥ 2) bits per column with parallel counters, one layer per stage (a Wallace tree of
/// (3,2), (7,3) and (15,4) counters). Output bits at columns ≥ `columns.len()`
/// are dropped (the sum is taken modulo 2^len).
pub fn compress_columns<E: BitEngine>(
    e: &E,
    mut columns: Vec<Vec<WireOf<E>>>,
    max_height: usize,
) -> Result<Vec<Vec<WireOf<E>>>> {
    let width = columns.len();
    let max_height = max_height.max(2);
    while columns.iter().any(|c| c.len() > max_height) {
        let heights: Vec<usize> = columns.iter().map(Vec::len).collect();
        let groups = plan_stage(&heights, max_height);
        let ops = groups
            .iter()
            .map(|&(c, s, k)| {
                let bits: Vec<&WireOf<E>> = columns[c][s..s + k].iter().collect();
                let mut op = counter_op(&bits)?;
                op.luts.truncate(width - c);
                Ok(op)
            })
            .collect::<Result<Vec<_>>>()?;
        let outs = e.eval_layer(&ops)?;
        let mut next: Vec<Vec<WireOf<E>>> = vec![Vec::new(); width];
        let mut used: Vec<Vec<bool>> = columns.iter().map(|c| vec![false; c.len()]).collect();
        for (&(c, s, k), out) in groups.iter().zip(outs) {
            used[c][s..s + k].iter_mut().for_each(|u| *u = true);
            for (i, w) in out.into_iter().enumerate() {
                next[c + i].push(w);
            }
        }
        for (c, col) in columns.into_iter().enumerate() {
            next[c].extend(
                col.into_iter()
                    .zip(&used[c])
                    .filter(|(_, u)| !**u)
                    .map(|(w, _)| w),
            );
        }
        columns = next;
    }
    Ok(columns)
}

/// One stage of [`compress_columns`] planned from the column heights alone
/// (so that [`crate::bound`] counts it without wires): `(column, first
/// index, count)` of each counter. `max_height` must be at least 2.
pub(crate) fn plan_stage(heights: &[usize], max_height: usize) -> Vec<(usize, usize, usize)> {
    let width = heights.len();
    let mut groups: Vec<(usize, usize, usize)> = Vec::new();
    for (c, &height) in heights.iter().enumerate() {
        if height <= max_height {
            continue;
        }
        let (mut start, mut rem) = (0, height);
        // Slightly too tall: each full adder lowers every such column by one
        // per stage (−3 bits, +1 sum, +1 carry from below) for one bootstrap.
        let excess = height - max_height;
        if excess <= 3 && height >= 3 * excess {
            for i in 0..excess {
                groups.push((c, 3 * i, 3));
            }
            continue;
        }
        while rem >= 3 {
            let top = width - c; // outputs that still fit
            let k = if top <= 1 {
                rem.min(15)
            } else if rem >= 15 {
                15
            } else if rem >= 11 || (4..=7).contains(&rem) {
                rem
            } else if rem >= 8 {
                7
            } else {
                3
            };
            groups.push((c, start, k));
            start += k;
            rem -= k;
        }
    }
    groups
}

/// Which nodes of a Kogge–Stone prefix over `n` positions are needed so that
/// the prefixes at positions `required` are complete: `levels[l][p]` is true
/// when position `p` is combined at level `l` (distance 2^l).
pub(crate) fn kogge_stone_schedule(n: usize, required: &[usize]) -> Vec<Vec<bool>> {
    let mut dists = Vec::new();
    let mut d = 1;
    while d < n {
        dists.push(d);
        d *= 2;
    }
    let mut need = vec![false; n];
    for &p in required {
        need[p] = true;
    }
    let mut levels = vec![vec![false; n]; dists.len()];
    for (l, &d) in dists.iter().enumerate().rev() {
        let mut prev = vec![false; n];
        for p in 0..n {
            if need[p] {
                prev[p] = true;
                if p >= d {
                    levels[l][p] = true;
                    prev[p - d] = true;
                }
            }
        }
        need = prev;
    }
    levels
}

/// The adder [`AdderKind::Auto`] picks: carry chains below 8 threads (two
/// bootstraps per layer already fill the machine, and they need the fewest
/// bootstraps), Kogge–Stone from 8 threads on (shallower).
pub(crate) fn auto_kind(threads: usize) -> AdderKind {
    if threads >= 8 {
        AdderKind::KoggeStone
    } else {
        AdderKind::CarryChains
    }
}

/// Largest column height the ripple adder accepts (four rows: a 2-bit digit
/// of each plus a carry ≤ 3 stays within 0..16 and the noise budget).
pub const RIPPLE_MAX_ROWS: usize = 4;

/// Lookup input of ripple digit `j`: its bits and the carry of digit `j − 1`.
fn ripple_input<'a, C>(
    digits: &[(usize, usize)],
    cols: &[Vec<&'a Wire<C>>],
    carries: &'a [Option<Wire<C>>],
    cin: bool,
    j: usize,
) -> Expr<'a, C> {
    let (lo, k) = digits[j];
    let mut x = Expr::new().plus(i64::from(cin && j == 0));
    for i in 0..k {
        for &w in &cols[lo + i] {
            x = x.term(w, 1 << i);
        }
    }
    if j > 0
        && let Some(c) = &carries[j - 1]
    {
        x = x.term(c, 1);
    }
    x
}

/// Largest column height the ripple adder accepts bit by bit: eight bits plus
/// a carry ≤ 7 stay within 0..16 (and `(8 + 7) >> 1 = 7` keeps the carry bound).
pub const RIPPLE_MAX_BIT_ROWS: usize = 8;

/// Ripple-carry addition of columns of up to [`RIPPLE_MAX_BIT_ROWS`] bits (plus a
/// constant carry-in) over digits of two columns (one where two do not fit):
/// each digit is one lookup input `Σ digit bits + carry`, from which the carry
/// and the sum bits are read. The carry lookup of digit `j` shares its layer
/// with pending sum-bit lookups of earlier digits, so each layer fills the
/// engine's threads while the carry chain runs.
#[allow(clippy::type_complexity)]
fn ripple_columns<E: BitEngine>(
    e: &E,
    cols: &[Vec<&WireOf<E>>],
    cin: bool,
    need_carry: bool,
) -> Result<(Vec<WireOf<E>>, Option<WireOf<E>>)> {
    let mut out = ripple_lanes(e, std::slice::from_ref(&cols.to_vec()), cin, need_carry)?;
    out.pop().ok_or(CircuitError::EmptyOperands)
}

/// Digit plan of a ripple lane: `(first column, columns)` per digit, two
/// columns where the lookup input (with the carry bound so far) fits.
fn plan_digits<C>(cols: &[Vec<&Wire<C>>], cin: bool) -> Result<Vec<(usize, usize)>> {
    let heights: Vec<usize> = cols.iter().map(Vec::len).collect();
    Ok(plan_digit_heights(&heights, cin)?
        .into_iter()
        .map(|(lo, k, _)| (lo, k))
        .collect())
}

/// [`plan_digits`] from the column heights alone (bits of value ≤ 1):
/// `(first column, columns, largest lookup input)` per digit.
pub(crate) fn plan_digit_heights(heights: &[usize], cin: bool) -> Result<Vec<(usize, usize, u64)>> {
    let width = heights.len();
    let mut digits: Vec<(usize, usize, u64)> = Vec::new();
    let (mut lo, mut carry_max, mut carry_noise) = (0usize, u64::from(cin), 0u64);
    while lo < width {
        let fits = |k: usize| -> Option<u64> {
            if lo + k > width {
                return None;
            }
            let (mut v, mut n) = (carry_max, carry_noise);
            for i in 0..k {
                let h = heights[lo + i] as u64;
                v += h << i;
                n += h << (2 * i);
            }
            (v < crate::PLAINTEXT_SPACE && n <= NOISE_BUDGET).then_some(v)
        };
        let (k, vmax) = match (fits(2), fits(1)) {
            (Some(v), _) => (2, v),
            (None, Some(v)) => (1, v),
            (None, None) => {
                return Err(CircuitError::OutOfPlaintextSpace {
                    min: 0,
                    max: (heights[lo] as u64 + carry_max) as i64,
                    space: crate::PLAINTEXT_SPACE,
                });
            }
        };
        digits.push((lo, k, vmax));
        carry_max = vmax >> k;
        carry_noise = 1;
        lo += k;
    }
    Ok(digits)
}

/// Several independent ripple additions ("lanes", each columns of up to
/// [`RIPPLE_MAX_BIT_ROWS`] bits) run in lockstep: every layer holds the next
/// carry lookup of each lane and pending sum-bit lookups up to the engine's
/// thread count. Returns each lane's sum bits and carry out.
#[allow(clippy::type_complexity)]
fn ripple_lanes<E: BitEngine>(
    e: &E,
    lanes: &[Vec<Vec<&WireOf<E>>>],
    cin: bool,
    need_carry: bool,
) -> Result<Vec<(Vec<WireOf<E>>, Option<WireOf<E>>)>> {
    use std::collections::VecDeque;
    let plans: Vec<Vec<(usize, usize)>> = lanes
        .iter()
        .map(|c| plan_digits(c, cin))
        .collect::<Result<_>>()?;
    let threads = e.threads().max(1);
    let mut carries: Vec<Vec<Option<WireOf<E>>>> =
        plans.iter().map(|d| vec![None; d.len()]).collect();
    let mut sums: Vec<Vec<Option<WireOf<E>>>> = lanes.iter().map(|c| vec![None; c.len()]).collect();
    // Sum-bit lookups waiting for a slot: (digit, bit) per lane.
    let mut pending: Vec<VecDeque<(usize, usize)>> = vec![VecDeque::new(); lanes.len()];
    let mut j = 0;
    let longest = plans.iter().map(Vec::len).max().unwrap_or(0);
    while j < longest || pending.iter().any(|p| !p.is_empty()) {
        // This layer: each lane's next carry (with bit 0 when a many-LUT has
        // room), then pending sum bits up to the thread count (all at the end).
        // Jobs: (lane, digit, [None = carry | Some(bit)]).
        let mut jobs: Vec<(usize, usize, Vec<Option<usize>>)> = Vec::new();
        for (l, digits) in plans.iter().enumerate() {
            let nd = digits.len();
            if j >= nd {
                continue;
            }
            let k = digits[j].1;
            let mut outs: Vec<Option<usize>> = Vec::new();
            if j + 1 < nd || need_carry {
                outs.push(None);
            }
            let x = ripple_input(digits, &lanes[l], &carries[l], cin, j);
            let per = (crate::PLAINTEXT_SPACE / (x.range().1 as u64 + 1)) as usize;
            let mut bits: VecDeque<usize> = (0..k).collect();
            while outs.len() < per.max(1) {
                let Some(b) = bits.pop_front() else { break };
                outs.push(Some(b));
            }
            pending[l].extend(bits.into_iter().map(|b| (j, b)));
            jobs.push((l, j, outs));
        }
        let finishing = j + 1 >= longest;
        let cap = if finishing {
            usize::MAX
        } else {
            threads.max(jobs.len())
        };
        let mut progress = true;
        while jobs.len() < cap && progress {
            progress = false;
            for (l, p) in pending.iter_mut().enumerate() {
                if jobs.len() >= cap {
                    break;
                }
                if let Some((d, b)) = p.pop_front() {
                    jobs.push((l, d, vec![Some(b)]));
                    progress = true;
                }
            }
        }
        let ops: Vec<LutOp<'_, E::Ct>> = jobs
            .iter()
            .map(|(l, d, outs)| {
                let k = plans[*l][*d].1;
                let luts = outs
                    .iter()
                    .map(|o| match *o {
                        None => Lut::new(move |v| v >> k),
                        Some(b) => Lut::new(move |v| (v >> b) & 1),
                    })
                    .collect();
                LutOp::new(
                    ripple_input(&plans[*l], &lanes[*l], &carries[*l], cin, *d),
                    luts,
                )
            })
            .collect();
        let results = e.eval_layer(&ops)?;
        drop(ops);
        for ((l, d, outs), res) in jobs.iter().zip(results) {
            for (o, w) in outs.iter().zip(res) {
                match *o {
                    None => carries[*l][*d] = Some(w),
                    Some(b) => sums[*l][plans[*l][*d].0 + b] = Some(w),
                }
            }
        }
        j += 1;
    }
    sums.into_iter()
        .zip(carries)
        .map(|(sum, mut carries)| {
            let sum = sum
                .into_iter()
                .map(|w| w.ok_or(CircuitError::BadLutCount { got: 0, max: 1 }))
                .collect::<Result<Vec<_>>>()?;
            let carry = if need_carry {
                carries.pop().flatten()
            } else {
                None
            };
            Ok((sum, carry))
        })
        .collect()
}

/// Lanes of one round of [`sum_by_carry_chains`] over `r` rows (sizes as
/// even as possible, the first `r % groups` one row taller).
pub(crate) fn chain_groups(r: usize) -> usize {
    if r <= RIPPLE_MAX_ROWS {
        1
    } else {
        r.div_ceil(RIPPLE_MAX_BIT_ROWS)
    }
}

/// Sum of many rows by carry chains: rows are split into groups of at most
/// [`RIPPLE_MAX_BIT_ROWS`] (or one group of up to [`RIPPLE_MAX_ROWS`], added
/// over 2-bit digits), each group becomes one row through a ripple lane, all
/// lanes in lockstep, until one row is left.
fn sum_by_carry_chains<E: BitEngine>(
    e: &E,
    mut rows: Vec<Vec<WireOf<E>>>,
    width: usize,
) -> Result<Vec<WireOf<E>>> {
    while rows.len() > 1 {
        let r = rows.len();
        let groups = chain_groups(r);
        let mut lanes: Vec<Vec<Vec<&WireOf<E>>>> = Vec::with_capacity(groups);
        let mut start = 0;
        for g in 0..groups {
            let size = r / groups + usize::from(g < r % groups);
            let group = &rows[start..start + size];
            lanes.push(
                (0..width)
                    .map(|c| group.iter().filter_map(|row| row.get(c)).collect())
                    .collect(),
            );
            start += size;
        }
        let out = ripple_lanes(e, &lanes, false, false)?;
        drop(lanes);
        rows = out.into_iter().map(|(s, _)| s).collect();
    }
    rows.pop().ok_or(CircuitError::EmptyOperands)
}

/// Adds two rows of bits (`None` = 0) of `width` columns plus a constant carry-in;
/// returns the `width` sum bits and, if asked, the carry out.
#[allow(clippy::type_complexity)]
fn add_rows<E: BitEngine>(
    e: &E,
    a: &[Option<&WireOf<E>>],
    b: &[Option<&WireOf<E>>],
    cin: bool,
    need_carry: bool,
    kind: AdderKind,
) -> Result<(Vec<WireOf<E>>, Option<WireOf<E>>)> {
    let width = a.len();
    let kind = match kind {
        AdderKind::Auto => auto_kind(e.threads()),
        k => k,
    };
    let pair = |i: usize| -> Expr<'_, E::Ct> {
        let mut x = Expr::new();
        if let Some(w) = a[i] {
            x = x.term(w, 1);
        }
        if let Some(w) = b[i] {
            x = x.term(w, 1);
        }
        x
    };
    match kind {
        AdderKind::Ripple | AdderKind::CarryChains | AdderKind::Auto => {
            let cols: Vec<Vec<&WireOf<E>>> = (0..width)
                .map(|i| a[i].into_iter().chain(b[i]).collect())
                .collect();
            ripple_columns(e, &cols, cin, need_carry)
        }
        AdderKind::KoggeStone => {
            // Position 0 holds the carry-in (kill or generate); position i+1 bit i.
            let n = width + 1;
            let mut t: Vec<WireOf<E>> = Vec::with_capacity(n);
            t.push(e.constant(if cin { 2 } else { 0 }));
            for i in 0..width {
                t.push(e.linear(&pair(i))?);
            }
            let required: Vec<usize> = if need_carry {
                (0..n).collect()
            } else {
                (0..width).collect()
            };
            let schedule = kogge_stone_schedule(n, &required);
            let combine = Lut::new(|x| if x / 3 == 1 { x % 3 } else { x / 3 });
            let combine_bit =
                Lut::new(|x| u64::from((if x / 3 == 1 { x % 3 } else { x / 3 }) == 2));
            let mut d = 1;
            let last = schedule.len();
            for (l, level) in schedule.iter().enumerate() {
                let nodes: Vec<usize> = (0..n).filter(|&p| level[p]).collect();
                let ops: Vec<LutOp<'_, E::Ct>> = nodes
                    .iter()
                    .map(|&p| {
                        let lut = if l + 1 == last && p == width && need_carry {
                            combine_bit
                        } else {
                            combine
                        };
                        LutOp::new(Expr::new().term(&t[p], 3).term(&t[p - d], 1), vec![lut])
                    })
                    .collect();
                let outs = e.eval_layer(&ops)?;
                for (&p, out) in nodes.iter().zip(outs) {
                    t[p] = one(out)?;
                }
                d *= 2;
            }
            // Sum bits: parity of a + b + carry, the carry being status 2 of prefix i.
            let sum_lut = Lut::new(|x| if x >= 6 { (x - 6 + 1) & 1 } else { x & 1 });
            let ops: Vec<LutOp<'_, E::Ct>> = (0..width)
                .map(|i| LutOp::new(pair(i).term(&t[i], 3), vec![sum_lut]))
                .collect();
            let sum = e
                .eval_layer(&ops)?
                .into_iter()
                .map(one)
                .collect::<Result<Vec<_>>>()?;
            let carry = if need_carry {
                Some(t[width].clone())
            } else {
                None
            };
            Ok((sum, carry))
        }
    }
}

/// `x + y mod 2^w` with the given final adder.
///
/// ```
/// use hecloud_circuits::{circuits::{self, AdderKind}, ClearEngine, EncryptedUint};
/// let e = ClearEngine::new();
/// let x = EncryptedUint::encrypt_u128(&e, 200, 8)?;
/// let y = EncryptedUint::encrypt_u128(&e, 100, 8)?;
/// let s = circuits::add(&e, &x, &y, AdderKind::KoggeStone)?;
/// assert_eq!(s.decrypt_u128(&e)?, (300 % 256));
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub fn add<E: BitEngine>(
    e: &E,
    x: &UintOf<E>,
    y: &UintOf<E>,
    kind: AdderKind,
) -> Result<UintOf<E>> {
    same_width(x, y)?;
    let a: Vec<_> = x.bits().iter().map(Some).collect();
    let b: Vec<_> = y.bits().iter().map(Some).collect();
    EncryptedUint::from_bits(add_rows(e, &a, &b, false, false, kind)?.0)
}

/// `x + y` with the carry out: `(sum mod 2^w, carry)`.
pub fn add_with_carry<E: BitEngine>(
    e: &E,
    x: &UintOf<E>,
    y: &UintOf<E>,
    kind: AdderKind,
) -> Result<(UintOf<E>, WireOf<E>)> {
    same_width(x, y)?;
    let a: Vec<_> = x.bits().iter().map(Some).collect();
    let b: Vec<_> = y.bits().iter().map(Some).collect();
    let (s, c) = add_rows(e, &a, &b, false, true, kind)?;
    let c = c.ok_or(CircuitError::BadLutCount { got: 0, max: 1 })?;
    Ok((EncryptedUint::from_bits(s)?, c))
}

/// `x − y mod 2^w` (as `x + ¬y + 1`).
///
/// ```
/// use hecloud_circuits::{circuits::{self, AdderKind}, ClearEngine, EncryptedUint};
/// let e = ClearEngine::new();
/// let x = EncryptedUint::encrypt_u128(&e, 3, 8)?;
/// let y = EncryptedUint::encrypt_u128(&e, 5, 8)?;
/// assert_eq!(circuits::sub(&e, &x, &y, AdderKind::Auto)?.decrypt_u128(&e)?, 254);
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub fn sub<E: BitEngine>(
    e: &E,
    x: &UintOf<E>,
    y: &UintOf<E>,
    kind: AdderKind,
) -> Result<UintOf<E>> {
    same_width(x, y)?;
    let ny: Vec<WireOf<E>> = y.bits().iter().map(|b| e.not(b)).collect::<Result<_>>()?;
    let a: Vec<_> = x.bits().iter().map(Some).collect();
    let b: Vec<_> = ny.iter().map(Some).collect();
    EncryptedUint::from_bits(add_rows(e, &a, &b, true, false, kind)?.0)
}

/// Sum of `xs` (all of one width): a carry-save counter tree (each stage one
/// layer) down to two rows for Kogge–Stone, or to the 4 or 7 rows the ripple
/// adder takes, then the final adder. [`SumMode::Modular`] wraps at
/// the width; [`SumMode::Full`] returns `width + ⌈log2 n⌉` bits.
///
/// ```
/// use hecloud_circuits::{circuits::{self, AdderKind, SumMode}, ClearEngine, EncryptedUint};
/// let e = ClearEngine::new();
/// let xs: Vec<_> = [250u128, 7, 100].iter()
///     .map(|&v| EncryptedUint::encrypt_u128(&e, v, 8)).collect::<Result<_, _>>()?;
/// let full = circuits::sum(&e, &xs, SumMode::Full, AdderKind::Auto)?;
/// assert_eq!((full.width(), full.decrypt_u128(&e)?), (10, 357));
/// let wrapped = circuits::sum(&e, &xs, SumMode::Modular, AdderKind::Auto)?;
/// assert_eq!(wrapped.decrypt_u128(&e)?, 357 % 256);
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub fn sum<E: BitEngine>(
    e: &E,
    xs: &[UintOf<E>],
    mode: SumMode,
    kind: AdderKind,
) -> Result<UintOf<E>> {
    let first = xs.first().ok_or(CircuitError::EmptyOperands)?;
    let w = first.width();
    for x in xs {
        same_width(first, x)?;
    }
    let n = xs.len();
    let out_w = match mode {
        SumMode::Modular => w,
        SumMode::Full => w + bit_len((n - 1) as u64),
    };
    check_width(out_w)?;
    if n == 1 {
        let mut bits = first.bits().to_vec();
        bits.resize_with(out_w, || e.constant(0));
        return EncryptedUint::from_bits(bits);
    }
    let mut columns: Vec<Vec<WireOf<E>>> = vec![Vec::with_capacity(n); out_w];
    for x in xs {
        for (c, b) in x.bits().iter().enumerate() {
            columns[c].push(b.clone());
        }
    }
    let kind = if kind == AdderKind::Auto {
        auto_kind(e.threads())
    } else {
        kind
    };
    if kind == AdderKind::CarryChains {
        let rows: Vec<Vec<WireOf<E>>> = xs.iter().map(|x| x.bits().to_vec()).collect();
        return EncryptedUint::from_bits(sum_by_carry_chains(e, rows, out_w)?);
    }
    if kind == AdderKind::Ripple {
        // Up to 4 rows the ripple adds 2-bit digits (1.5 bootstraps per bit); with
        // taller columns, compressing to 7 rows and adding bit by bit (2 per bit)
        // saves more counter stages than it costs.
        let tallest = columns.iter().map(Vec::len).max().unwrap_or(0);
        let target = if tallest <= RIPPLE_MAX_ROWS {
            RIPPLE_MAX_ROWS
        } else {
            RIPPLE_MAX_BIT_ROWS
        };
        let columns = compress_columns(e, columns, target)?;
        let cols: Vec<Vec<&WireOf<E>>> = columns.iter().map(|c| c.iter().collect()).collect();
        return EncryptedUint::from_bits(ripple_columns(e, &cols, false, false)?.0);
    }
    let columns = compress_columns(e, columns, 2)?;
    let a: Vec<_> = columns.iter().map(|c| c.first()).collect();
    let b: Vec<_> = columns.iter().map(|c| c.get(1)).collect();
    EncryptedUint::from_bits(add_rows(e, &a, &b, false, false, kind)?.0)
}

/// `x < y` by the published method: the carry out of `¬x + y` through a
/// Kogge–Stone adder (only the prefix nodes the carry needs are evaluated).
///
/// ```
/// use hecloud_circuits::{circuits, BitEngine, ClearEngine, EncryptedUint};
/// let e = ClearEngine::new();
/// let x = EncryptedUint::encrypt_u128(&e, 7, 4)?;
/// let y = EncryptedUint::encrypt_u128(&e, 9, 4)?;
/// assert!(e.decrypt_bit(&circuits::lt_published(&e, &x, &y)?)?);
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub fn lt_published<E: BitEngine>(e: &E, x: &UintOf<E>, y: &UintOf<E>) -> Result<WireOf<E>> {
    let width = same_width(x, y)?;
    let nx: Vec<WireOf<E>> = x.bits().iter().map(|b| e.not(b)).collect::<Result<_>>()?;
    // Statuses ¬x_i + y_i; position 0 is the (zero) carry-in.
    let n = width + 1;
    let mut t: Vec<WireOf<E>> = Vec::with_capacity(n);
    t.push(e.constant(0));
    for (a, b) in nx.iter().zip(y.bits()) {
        t.push(e.linear(&Expr::new().term(a, 1).term(b, 1))?);
    }
    let schedule = kogge_stone_schedule(n, &[width]);
    let combine = Lut::new(|x| if x / 3 == 1 { x % 3 } else { x / 3 });
    let combine_bit = Lut::new(|x| u64::from((if x / 3 == 1 { x % 3 } else { x / 3 }) == 2));
    let mut d = 1;
    let last = schedule.len();
    for (l, level) in schedule.iter().enumerate() {
        let nodes: Vec<usize> = (0..n).filter(|&p| level[p]).collect();
        let lut = if l + 1 == last { combine_bit } else { combine };
        let ops: Vec<_> = nodes
            .iter()
            .map(|&p| LutOp::new(Expr::new().term(&t[p], 3).term(&t[p - d], 1), vec![lut]))
            .collect();
        for (&p, out) in nodes.iter().zip(e.eval_layer(&ops)?) {
            t[p] = one(out)?;
        }
        d *= 2;
    }
    Ok(t[width].clone())
}

/// Which relation a comparator outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// `x < y`
    Lt,
    /// `x ≤ y`
    Le,
    /// `x > y`
    Gt,
    /// `x ≥ y`
    Ge,
}

/// An input of a comparison lookup: the status `x_i − y_i + 1` of one raw bit
/// position (indexed from the most significant bit), or a planned node's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CmpItem {
    Raw(usize),
    Node(usize),
}

/// One comparison lookup: its inputs, most significant first, and its layer.
/// Its output is a *trit* (the sign of its part, scaled by the weight its
/// consumer gives it) unless its part reaches the least significant bit: then
/// it is a *bit*, "greater so far" (or the relation, at the root).
#[derive(Clone, Debug)]
struct CmpNode {
    inputs: Vec<CmpItem>,
    layer: usize,
    bottom: bool,
}

/// How a comparison is cut up (see [`compare`]): `trit_chains` chains of
/// `pairs` position pairs each from the top, a bottom chain of
/// `bottom_pairs` pairs, and whatever positions remain, absorbed by the merge.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmpLayout {
    /// Chains from the top whose outputs are trits.
    pub trit_chains: usize,
    /// Position pairs per trit chain.
    pub pairs: usize,
    /// Position pairs of the bottom chain (at least one).
    pub bottom_pairs: usize,
}

/// The lookups of a comparison; the last node is the root.
#[derive(Clone, Debug, Default)]
struct CmpPlan {
    nodes: Vec<CmpNode>,
}

/// Weights of a lookup's inputs, most significant first. With the bits below
/// summarised as a bit `b` ("greater") the inputs read `… + 2t₂ + t₁ + b`
/// (`tᵢ` trits in −1..=1): "greater" iff that is ≥ 1, and four inputs span
/// 16 values. Without it, `4t₂ + 2t₁ + t₀` has the sign of the first non-zero
/// trit and three inputs span 15 values.
fn cmp_weights(k: usize, bottom_bit: bool) -> Vec<i64> {
    (0..k)
        .map(|j| {
            let from_bottom = (k - 1 - j) as u32;
            match (bottom_bit, from_bottom) {
                (true, 0) => 1,
                (true, d) => 1 << (d - 1),
                (false, d) => 1 << d,
            }
        })
        .collect()
}

impl CmpPlan {
    fn layers(&self) -> usize {
        self.nodes.iter().map(|n| n.layer + 1).max().unwrap_or(0)
    }

    /// Rounds of `threads` parallel bootstraps the plan needs.
    fn rounds(&self, threads: usize) -> usize {
        let mut per_layer = vec![0usize; self.layers()];
        for n in &self.nodes {
            per_layer[n.layer] += 1;
        }
        per_layer.iter().map(|&k| k.div_ceil(threads.max(1))).sum()
    }

    fn is_bottom(&self, item: CmpItem) -> bool {
        matches!(item, CmpItem::Node(i) if self.nodes[i].bottom)
    }

    /// Whether `items` can be one lookup: at most 3 inputs (4 above a bottom
    /// bit), raw positions only at weights 1 and 2 — a raw status has the
    /// noise of two fresh bits, 2·4² > 25 at weight 4, while a node's output is
    /// bootstrapped already scaled, at the noise of one fresh ciphertext.
    fn fits(&self, items: &[CmpItem]) -> bool {
        let bottom_bit = items.last().is_some_and(|&i| self.is_bottom(i));
        let max = if bottom_bit { 4 } else { 3 };
        !items.is_empty()
            && items.len() <= max
            && items
                .iter()
                .zip(self.weights(items))
                .all(|(i, w)| matches!(i, CmpItem::Node(_)) || w <= 2)
    }

    /// [`cmp_weights`] of a lookup on `items` (most significant first).
    fn weights(&self, items: &[CmpItem]) -> Vec<i64> {
        let bottom_bit = items.last().is_some_and(|&i| self.is_bottom(i));
        cmp_weights(items.len(), bottom_bit)
    }

    fn add(&mut self, inputs: Vec<CmpItem>, bottom: bool) -> CmpItem {
        let layer = inputs
            .iter()
            .map(|&i| match i {
                CmpItem::Raw(_) => 0,
                CmpItem::Node(n) => self.nodes[n].layer + 1,
            })
            .max()
            .unwrap_or(0);
        self.nodes.push(CmpNode {
            inputs,
            layer,
            bottom,
        });
        CmpItem::Node(self.nodes.len() - 1)
    }

    /// The plan of `layout` over `width` positions, if the layout covers them.
    ///
    /// Trit chains start with a lookup on their top two positions and add the
    /// next two per lookup (`status, raw, raw`); the bottom chain starts on the
    /// two lowest positions and adds the next two above (`raw, raw, bit`). All
    /// chains advance in lockstep. Positions left between chains join the
    /// merge, which groups the chain outputs greedily from the top.
    fn build(width: usize, layout: CmpLayout) -> Option<Self> {
        let CmpLayout {
            trit_chains: t,
            pairs: k,
            bottom_pairs: kb,
        } = layout;
        let used = 2 * (t * k + kb);
        if kb == 0 || (t > 0 && k == 0) || used > width {
            return None;
        }
        // Leftover positions: at most two under each trit chain (two on top
        // when there is none).
        let left = width - used;
        let gaps = t.max(1);
        if left > 2 * gaps {
            return None;
        }
        let mut plan = CmpPlan::default();
        let mut items = Vec::new();
        let mut pos = 0;
        for g in 0..gaps {
            if t > 0 {
                let mut status = plan.add(vec![CmpItem::Raw(pos), CmpItem::Raw(pos + 1)], false);
                for s in 1..k {
                    let p = pos + 2 * s;
                    status = plan.add(vec![status, CmpItem::Raw(p), CmpItem::Raw(p + 1)], false);
                }
                items.push(status);
                pos += 2 * k;
            }
            // The lowest gaps take the leftovers, two each.
            let here = left.saturating_sub(2 * (gaps - 1 - g)).min(2);
            items.extend((pos..pos + here).map(CmpItem::Raw));
            pos += here;
        }
        let low = width - 2;
        let mut bit = plan.add(vec![CmpItem::Raw(low), CmpItem::Raw(low + 1)], true);
        for s in 1..kb {
            let p = low - 2 * s;
            bit = plan.add(vec![CmpItem::Raw(p), CmpItem::Raw(p + 1), bit], true);
        }
        items.push(bit);
        while items.len() > 1 {
            let mut next = Vec::new();
            let mut i = 0;
            while i < items.len() {
                let rest = &items[i..];
                let k = (1..=rest.len().min(4))
                    .rev()
                    .find(|&k| plan.fits(&rest[..k]))
                    .unwrap_or(1);
                // Two items left over at the bottom of a long level wait for the
                // next one, where they can join a bigger group.
                let wait = k == 2 && rest.len() == 2 && items.len() > 3;
                if k == 1 || wait {
                    let pass = if wait { 2 } else { 1 };
                    next.extend_from_slice(&rest[..pass]);
                    i += pass;
                    continue;
                }
                let bottom = i + k == items.len();
                next.push(plan.add(rest[..k].to_vec(), bottom));
                i += k;
            }
            if next.len() == items.len() {
                return None;
            }
            items = next;
        }
        Some(plan)
    }

    /// The plan with the fewest rounds of `threads` parallel bootstraps, then
    /// the fewest bootstraps, then the fewest layers, over all layouts.
    fn best(width: usize, threads: usize) -> Self {
        let half = width / 2;
        let mut layouts = vec![CmpLayout {
            trit_chains: 0,
            pairs: 0,
            bottom_pairs: half,
        }];
        for t in 1..half {
            for k in 1..=half / t {
                for kb in k.saturating_sub(1).max(1)..=k + 1 {
                    layouts.push(CmpLayout {
                        trit_chains: t,
                        pairs: k,
                        bottom_pairs: kb,
                    });
                }
            }
        }
        layouts
            .into_iter()
            .filter_map(|l| Self::build(width, l))
            .min_by_key(|p| (p.rounds(threads), p.nodes.len(), p.layers()))
            .unwrap_or_default()
    }
}

/// Comparator: comparison statuses combined by chains of lookups that run side
/// by side, then merged.
///
/// A position's status `x_i − y_i` is a free linear combination. A lookup
/// combines two positions, a status and two positions, or three statuses
/// (`4t₂ + 2t₁ + t₀` has the sign of the first non-zero trit). The part that
/// reaches the least significant bit only needs "greater or not", a bit `b`,
/// and `4t₃ + 2t₂ + t₁ + b ≥ 1` combines four inputs in 16 values. So one
/// chain of lookups from the bottom costs `⌈w/2⌉` bootstraps; with `t`
/// threads the comparator picks the cut into chains and merges that needs the
/// fewest rounds of `t` bootstraps (depth about `w/4 + 1` on two threads, down
/// to logarithmic with `w/2` threads).
///
/// ```
/// use hecloud_circuits::{circuits::{self, Relation}, BitEngine, ClearEngine, EncryptedUint};
/// let e = ClearEngine::new();
/// let x = EncryptedUint::encrypt_u128(&e, 1 << 40, 64)?;
/// let y = EncryptedUint::encrypt_u128(&e, 12345, 64)?;
/// assert!(e.decrypt_bit(&circuits::compare(&e, &x, &y, Relation::Gt)?)?);
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub fn compare<E: BitEngine>(
    e: &E,
    x: &UintOf<E>,
    y: &UintOf<E>,
    rel: Relation,
) -> Result<WireOf<E>> {
    let width = same_width(x, y)?;
    run_compare(e, x, y, rel, &best_plan(width, e.threads()))
}

/// [`CmpPlan::best`], memoised: the search builds thousands of plans at 1024 bits.
fn best_plan(width: usize, threads: usize) -> std::sync::Arc<CmpPlan> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    type Plans = HashMap<(usize, usize), Arc<CmpPlan>>;
    static PLANS: OnceLock<Mutex<Plans>> = OnceLock::new();
    let plans = PLANS.get_or_init(Default::default);
    if let Some(p) = plans
        .lock()
        .ok()
        .and_then(|m| m.get(&(width, threads)).cloned())
    {
        return p;
    }
    let plan = Arc::new(CmpPlan::best(width, threads));
    if let Ok(mut m) = plans.lock() {
        m.insert((width, threads), plan.clone());
    }
    plan
}

/// [`compare`] with a given layout (`None` if it does not cover the width),
/// so that tests reach every plan shape.
#[doc(hidden)]
pub fn compare_with_layout<E: BitEngine>(
    e: &E,
    x: &UintOf<E>,
    y: &UintOf<E>,
    rel: Relation,
    layout: CmpLayout,
) -> Result<Option<WireOf<E>>> {
    let width = same_width(x, y)?;
    CmpPlan::build(width, layout)
        .map(|p| run_compare(e, x, y, rel, &p))
        .transpose()
}

fn run_compare<E: BitEngine>(
    e: &E,
    x: &UintOf<E>,
    y: &UintOf<E>,
    rel: Relation,
    plan: &CmpPlan,
) -> Result<WireOf<E>> {
    // The plan computes "a > b"; the other relations swap or negate it.
    let ((a, b), negate) = match rel {
        Relation::Gt => ((x, y), false),
        Relation::Le => ((x, y), true),
        Relation::Lt => ((y, x), false),
        Relation::Ge => ((y, x), true),
    };
    // Raw statuses, most significant first: τ = a_i − b_i + 1 (free).
    let raw: Vec<WireOf<E>> = a
        .bits()
        .iter()
        .zip(b.bits())
        .rev()
        .map(|(p, q)| e.linear(&Expr::new().term(p, 1).term(q, -1).plus(1)))
        .collect::<Result<_>>()?;
    // Each node's output is bootstrapped at the weight its consumer gives it.
    let mut scale = vec![None; plan.nodes.len()];
    for n in &plan.nodes {
        for (item, w) in n.inputs.iter().zip(plan.weights(&n.inputs)) {
            if let CmpItem::Node(c) = *item {
                scale[c] = Some(w);
            }
        }
    }
    let mut out: Vec<Option<WireOf<E>>> = vec![None; plan.nodes.len()];
    for layer in 0..plan.layers() {
        let ids: Vec<usize> = (0..plan.nodes.len())
            .filter(|&i| plan.nodes[i].layer == layer)
            .collect();
        let ops: Vec<LutOp<'_, E::Ct>> = ids
            .iter()
            .map(|&i| {
                let node = &plan.nodes[i];
                let weights = plan.weights(&node.inputs);
                let mut expr = Expr::new();
                // Value when every trit is 0 ("equal") and the bit, if any, is 0.
                let mut mid = 0;
                for (item, &w) in node.inputs.iter().zip(&weights) {
                    expr = match *item {
                        CmpItem::Raw(p) => expr.term(&raw[p], w),
                        CmpItem::Node(c) => {
                            let wire = out[c].as_ref().ok_or(CircuitError::EmptyOperands)?;
                            expr.term(wire, 1)
                        }
                    };
                    if !plan.is_bottom(*item) {
                        mid += w;
                    }
                }
                let lut = match (node.bottom, scale[i]) {
                    (false, s) => {
                        let s = s.unwrap_or(1);
                        Lut::new(move |v| (((v as i64 - mid).signum() + 1) * s) as u64)
                    }
                    (true, Some(_)) => Lut::new(move |v| u64::from(v as i64 > mid)),
                    (true, None) => Lut::new(move |v| u64::from((v as i64 > mid) != negate)),
                };
                Ok(LutOp::new(expr, vec![lut]))
            })
            .collect::<Result<_>>()?;
        let results = e.eval_layer(&ops)?;
        for (&i, r) in ids.iter().zip(results) {
            out[i] = Some(one(r)?);
        }
    }
    out.pop().flatten().ok_or(CircuitError::EmptyOperands)
}

/// `x < y` ([`compare`]).
pub fn lt<E: BitEngine>(e: &E, x: &UintOf<E>, y: &UintOf<E>) -> Result<WireOf<E>> {
    compare(e, x, y, Relation::Lt)
}

/// `x > y` ([`compare`]).
pub fn gt<E: BitEngine>(e: &E, x: &UintOf<E>, y: &UintOf<E>) -> Result<WireOf<E>> {
    compare(e, x, y, Relation::Gt)
}

/// `x == y` (`want_equal = true`) or `x != y`: pairs of positions then
/// OR-trees of up to 15 "differs" bits per lookup.
///
/// ```
/// use hecloud_circuits::{circuits, BitEngine, ClearEngine, EncryptedUint};
/// let e = ClearEngine::new();
/// let x = EncryptedUint::encrypt_u128(&e, 77, 7)?;
/// assert!(e.decrypt_bit(&circuits::eq(&e, &x, &x.clone(), true)?)?);
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub fn eq<E: BitEngine>(
    e: &E,
    x: &UintOf<E>,
    y: &UintOf<E>,
    want_equal: bool,
) -> Result<WireOf<E>> {
    let width = same_width(x, y)?;
    let d: Vec<WireOf<E>> = x
        .bits()
        .iter()
        .zip(y.bits())
        .map(|(a, b)| e.linear(&Expr::new().term(a, 1).term(b, -1).plus(1)))
        .collect::<Result<_>>()?;
    let fin = move |differs: bool| u64::from(differs != want_equal);
    if width == 2 {
        let x = Expr::new().term(&d[1], 2).term(&d[0], 1);
        return one(e.lookup(LutOp::new(x, vec![Lut::new(move |v| fin(v != 3))]))?);
    }
    // Level 1: "differs" bits of pairs (2·d₁ + d₀ = 3 iff both equal) and of a leftover.
    let ops: Vec<LutOp<'_, E::Ct>> = d
        .chunks(2)
        .map(|c| match c {
            [lo, hi] => LutOp::new(
                Expr::new().term(hi, 2).term(lo, 1),
                vec![Lut::new(|v| u64::from(v != 3))],
            ),
            _ => LutOp::new(
                Expr::new().term(&c[0], 1),
                vec![Lut::new(|v| u64::from(v != 1))],
            ),
        })
        .collect();
    let mut bits: Vec<WireOf<E>> = e
        .eval_layer(&ops)?
        .into_iter()
        .map(one)
        .collect::<Result<_>>()?;
    loop {
        let is_final = bits.len() <= 15;
        let ops: Vec<LutOp<'_, E::Ct>> = bits
            .chunks(15)
            .map(|c| {
                let x = c.iter().fold(Expr::new(), |x, b| x.term(b, 1));
                let lut = if is_final {
                    Lut::new(move |v| fin(v != 0))
                } else {
                    Lut::new(|v| u64::from(v != 0))
                };
                LutOp::new(x, vec![lut])
            })
            .collect();
        bits = e
            .eval_layer(&ops)?
            .into_iter()
            .map(one)
            .collect::<Result<_>>()?;
        if is_final {
            return one(bits);
        }
    }
}

/// Bitwise `s ? a : b` on whole integers (one bootstrap per bit).
pub fn mux<E: BitEngine>(e: &E, s: &WireOf<E>, a: &UintOf<E>, b: &UintOf<E>) -> Result<UintOf<E>> {
    same_width(a, b)?;
    let ops: Vec<_> = a
        .bits()
        .iter()
        .zip(b.bits())
        .map(|(x, y)| LutOp::new(mux_expr(s, x, y), vec![mux_lut()]))
        .collect();
    EncryptedUint::from_bits(
        e.eval_layer(&ops)?
            .into_iter()
            .map(one)
            .collect::<Result<_>>()?,
    )
}

/// `(min(x, y), max(x, y))`: [`compare`], then one many-LUT
/// bootstrap per bit giving both the min and the max bit.
///
/// ```
/// use hecloud_circuits::{circuits, ClearEngine, EncryptedUint};
/// let e = ClearEngine::new();
/// let x = EncryptedUint::encrypt_u128(&e, 9, 5)?;
/// let y = EncryptedUint::encrypt_u128(&e, 30, 5)?;
/// let (lo, hi) = circuits::min_max(&e, &x, &y)?;
/// assert_eq!((lo.decrypt_u128(&e)?, hi.decrypt_u128(&e)?), (9, 30));
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub fn min_max<E: BitEngine>(
    e: &E,
    x: &UintOf<E>,
    y: &UintOf<E>,
) -> Result<(UintOf<E>, UintOf<E>)> {
    let s = lt(e, x, y)?;
    // On 4s + 2x + y: min = s ? x : y, max = s ? y : x.
    let min_lut = mux_lut();
    let max_lut = Lut::new(|v| if v >= 4 { v & 1 } else { (v >> 1) & 1 });
    let ops: Vec<_> = x
        .bits()
        .iter()
        .zip(y.bits())
        .map(|(a, b)| LutOp::new(mux_expr(&s, a, b), vec![min_lut, max_lut]))
        .collect();
    let (mut lo, mut hi) = (Vec::new(), Vec::new());
    for out in e.eval_layer(&ops)? {
        let mut it = out.into_iter();
        match (it.next(), it.next()) {
            (Some(a), Some(b)) => {
                lo.push(a);
                hi.push(b);
            }
            _ => return Err(CircuitError::BadLutCount { got: 0, max: 2 }),
        }
    }
    Ok((EncryptedUint::from_bits(lo)?, EncryptedUint::from_bits(hi)?))
}

/// `min(x, y)`.
pub fn min<E: BitEngine>(e: &E, x: &UintOf<E>, y: &UintOf<E>) -> Result<UintOf<E>> {
    Ok(min_max(e, x, y)?.0)
}

/// `max(x, y)`.
pub fn max<E: BitEngine>(e: &E, x: &UintOf<E>, y: &UintOf<E>) -> Result<UintOf<E>> {
    Ok(min_max(e, x, y)?.1)
}
