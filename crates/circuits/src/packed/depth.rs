//! What the bits-in-slots circuits of [`super::slots`] need, computed
//! without running them: their multiplicative depth (ciphertext products in
//! a row, fresh inputs), the slots per row they reach and the row rotations
//! they use. One home for these numbers: the service's validation refuses a
//! graph with them before anything runs, and the tests hold them against
//! [`super::BitCircuit::measure`].
//!
//! ```
//! use hecloud_circuits::packed::depth;
//! assert_eq!(depth::add(8), 5); // 2 + ⌈log2 7⌉
//! assert_eq!(depth::lt(8), 4); // 1 + ⌈log2 8⌉
//! assert_eq!(depth::sum(3, 8), 7);
//! assert_eq!(depth::lt_row_need(8), 12); // 8 + the largest shift, 4
//! assert_eq!(depth::lt_rotations(8), vec![-1, -2, -4]);
//! ```

/// ⌈log2 x⌉ (0 for x ≤ 1).
fn ceil_log2(x: usize) -> usize {
    if x <= 1 {
        0
    } else {
        (usize::BITS - (x - 1).leading_zeros()) as usize
    }
}

/// Prefix rounds of a Kogge–Stone tree over `span` positions: shifts
/// 1, 2, 4, … below `span`.
fn prefix_shifts(span: usize) -> impl Iterator<Item = usize> {
    (0..ceil_log2(span)).map(|r| 1usize << r)
}

/// Depth of [`super::slots::add`] of two `width`-bit numbers (mod
/// 2^width): 2 + ⌈log2(width − 1)⌉.
pub fn add(width: usize) -> usize {
    sum(2, width)
}

/// Depth of [`super::slots::sum`] of `n` numbers of `width` bits (mod
/// 2^width): the carry-save stages walked as the circuit walks them
/// (shallowest rows first, the deepest of a triple as the full adder's
/// third input, which adds 2 to the depth of its two shallower inputs and
/// 1 to the deepest), then a half adder, ⌈log2(width − 1)⌉ prefix rounds
/// and a final XOR. Exact, not a bound; 0 for n ≤ 1 (nothing to add).
pub fn sum(n: usize, width: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    let mut rows = vec![0usize; n];
    while rows.len() > 2 {
        rows.sort_unstable();
        let triples = rows.len() / 3;
        let rest = rows.split_off(3 * triples);
        let mut next = rest;
        for t in rows.chunks_exact(3) {
            let d = (t[0].max(t[1]) + 2).max(t[2] + 1);
            next.push(d); // the sum row
            next.push(d); // the carry row
        }
        rows = next;
    }
    let half = rows[0].max(rows[1]) + 1;
    half + ceil_log2(width.saturating_sub(1)) + 1
}

/// Depth of [`super::slots::lt`] (and [`super::slots::gt`]) of two
/// `width`-bit numbers: 1 + ⌈log2 width⌉.
pub fn lt(width: usize) -> usize {
    1 + ceil_log2(width)
}

/// Slots per row [`super::slots::sum`] of `n` numbers of `width` bits needs
/// (its values reach width + ⌈log2 n⌉ slots, shifted by at most
/// 2^(⌈log2(width − 1)⌉ − 1)): below it the circuit refuses with
/// [`super::PackedError::RowTooShort`].
pub fn sum_row_need(n: usize, width: usize) -> usize {
    let largest_shift = prefix_shifts(width.saturating_sub(1)).last().unwrap_or(1);
    width + ceil_log2(n) + largest_shift
}

/// Slots per row [`super::slots::lt`] of `width`-bit numbers needs:
/// width + 2^(⌈log2 width⌉ − 1).
pub fn lt_row_need(width: usize) -> usize {
    width + prefix_shifts(width).last().unwrap_or(1)
}

/// The row rotations (negative: right) [`super::slots::sum`] of `n ≥ 2`
/// numbers of `width` bits performs, each once listed: right by 1 (carry
/// rows, final carries) and by each prefix shift; every one is in
/// [`super::slot_rotations`] when the row is long enough.
pub fn sum_rotations(width: usize) -> Vec<i64> {
    let mut r: Vec<i64> = prefix_shifts(width.saturating_sub(1))
        .map(|d| -(d as i64))
        .collect();
    if !r.contains(&-1) {
        r.insert(0, -1);
    }
    r
}

/// The row rotations [`super::slots::lt`] of `width`-bit numbers performs:
/// right by each prefix shift 1, 2, 4, … below `width`.
pub fn lt_rotations(width: usize) -> Vec<i64> {
    prefix_shifts(width).map(|d| -(d as i64)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formulas_of_the_module_docs() {
        for w in 2..=1024 {
            assert_eq!(add(w), 2 + ceil_log2(w - 1), "w = {w}");
            assert_eq!(lt(w), 1 + ceil_log2(w));
        }
        // The table of the packed module docs.
        for (w, a, s3, s4, s7, l) in [
            (8, 5, 7, 9, 12, 4),
            (32, 7, 9, 11, 14, 6),
            (64, 8, 10, 12, 15, 7),
        ] {
            assert_eq!(
                (add(w), sum(3, w), sum(4, w), sum(7, w), lt(w)),
                (a, s3, s4, s7, l)
            );
        }
        assert_eq!((add(1024), lt(1024)), (12, 11));
        assert_eq!(sum(1, 8), 0);
    }
}
