//! Adders: full adders, carry-save reduction by counters, Kogge–Stone,
//! ripple and carry-chain additions, sums of many operands, subtraction.

use super::*;

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
