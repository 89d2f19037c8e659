//! AVX2 + FMA kernels in double precision for primes below 2^50: 4 lanes of
//! f64 per vector, the floating-point analogue of the IFMA kernels.
//!
//! AVX2 has no 64-bit multiply; its FMA unit has an exact 53-bit one. For
//! integers a, b below 2^52 the product is hi + lo exactly, with
//! hi = fl(a·b) and lo = fma(a, b, −hi). A quotient estimate c, the integer
//! nearest to hi/q (or to a·(w/q) for a constant w), makes a·b − c·q a small
//! integer, computed exactly as fma(−c, q, hi) + lo. The quotient is rounded
//! by adding and subtracting 1.5·2^52 (exact for |x| < 2^51), so results are
//! centred: |a·b − c·q| ≤ q/2 plus the estimate's error. Values are u64 in
//! memory; they are converted with the 2^52 trick (OR the exponent bits of
//! 2^52, subtract 2^52; back: add 2^52, clear the exponent bits).
//!
//! Every bound below assumes q < 2^50, so a value bounded by 8q is an exact
//! integer in f64 and a product's rounding error stays below 1/8 of a unit.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use crate::Modulus;
use crate::ntt::simd::{AHEAD, prefetch};
use crate::ntt::{NttTable, splits};

type D = __m256d;
const LANES: usize = 4;

/// Moduli these kernels accept (exclusive bound).
pub(crate) const MAX_MODULUS: u64 = 1 << 50;

/// 2^52: an integer in [0, 2^52) plus 2^52 has the integer as its mantissa.
const TWO52: f64 = 4_503_599_627_370_496.0;
/// The bits of 2^52 (exponent only).
const TWO52_BITS: i64 = 0x4330_0000_0000_0000;
/// 1.5·2^52: x + ROUND − ROUND is x rounded to an integer for |x| < 2^51.
const ROUND: f64 = 6_755_399_441_055_744.0;

#[inline]
#[target_feature(enable = "avx2,fma")]
fn splat(x: f64) -> D {
    _mm256_set1_pd(x)
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn add(a: D, b: D) -> D {
    _mm256_add_pd(a, b)
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn sub(a: D, b: D) -> D {
    _mm256_sub_pd(a, b)
}

/// Four u64 below 2^52 as f64.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn from_u64(v: __m256i) -> D {
    let bits = _mm256_or_si256(v, _mm256_set1_epi64x(TWO52_BITS));
    sub(_mm256_castsi256_pd(bits), splat(TWO52))
}

/// Four integers in [0, 2^52) held as f64, returned as the bits of u64.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn to_u64_bits(x: D) -> D {
    _mm256_xor_pd(
        add(x, splat(TWO52)),
        _mm256_castsi256_pd(_mm256_set1_epi64x(TWO52_BITS)),
    )
}

/// Four u64 entries (below 2^52) of `s` as f64.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn load_u64(s: &[u64]) -> D {
    assert!(s.len() >= LANES);
    // SAFETY: the slice holds at least LANES values; unaligned load.
    from_u64(unsafe { _mm256_loadu_si256(s.as_ptr().cast()) })
}

/// Stores four integers in [0, 2^52) held as f64 as u64 entries of `s`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn store_u64(s: &mut [u64], x: D) {
    store_bits(s, to_u64_bits(x));
}

/// Four entries of `s` as raw bits (f64 kept in a u64 buffer mid-transform).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn load_bits(s: &[u64]) -> D {
    assert!(s.len() >= LANES);
    // SAFETY: the slice holds at least LANES values; unaligned load of
    // plain bits (every bit pattern is a valid f64).
    unsafe { _mm256_loadu_pd(s.as_ptr().cast()) }
}

/// Stores the raw bits of `x` as four entries of `s`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn store_bits(s: &mut [u64], x: D) {
    assert!(s.len() >= LANES);
    // SAFETY: the slice holds at least LANES values; unaligned store.
    unsafe { _mm256_storeu_pd(s.as_mut_ptr().cast(), x) }
}

/// The integer nearest to a·b (exact product) for |a·b| < 2^51.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn round_product(a: D, b: D) -> D {
    sub(_mm256_fmadd_pd(a, b, splat(ROUND)), splat(ROUND))
}

/// A modulus q < 2^50 with 1/q, as vectors.
#[derive(Clone, Copy)]
struct Q {
    q: D,
    qinv: D,
}

impl Q {
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn new(q: u64) -> Self {
        debug_assert!((2..MAX_MODULUS).contains(&q));
        Self {
            q: splat(q as f64),
            qinv: splat(1.0 / q as f64),
        }
    }

    /// x − round(x/q)·q: for an integer |x| < 2^51 the result is congruent
    /// to x, with |result| ≤ q/2 + 1 (the estimate of x/q is within
    /// 2^-50 of the truth).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn reduce(&self, x: D) -> D {
        _mm256_fnmadd_pd(round_product(x, self.qinv), self.q, x)
    }

    /// a·b − c·q with c nearest to fl(a·b)/q, for integers 0 ≤ a, b < q: the
    /// estimate of a·b/q is within 1/4 of the truth, and
    /// |lo| ≤ a·b·2^-53 < q/8, so |result| < 3q/4.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn mul(&self, a: D, b: D) -> D {
        let hi = _mm256_mul_pd(a, b);
        let lo = _mm256_fmsub_pd(a, b, hi);
        let c = round_product(hi, self.qinv);
        add(_mm256_fnmadd_pd(c, self.q, hi), lo)
    }

    /// Maps an integer |x| < q to [0, q).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn canonical(&self, x: D) -> D {
        let neg = _mm256_cmp_pd::<_CMP_LT_OQ>(x, _mm256_setzero_pd());
        add(x, _mm256_and_pd(neg, self.q))
    }
}

/// y·w − c·q with c nearest to y·(w/q), for a constant 0 ≤ w < q given with
/// wq = fl(w/q): for integers |y| ≤ k·q the estimate is within k/8 of y·w/q
/// (|y·wq − y·w/q| ≤ |y|·2^-53), so |result| ≤ (1/2 + k/8)·q. Needs
/// |y·wq| < 2^51.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn mul_const(y: D, w: D, wq: D, q: D) -> D {
    let hi = _mm256_mul_pd(y, w);
    let lo = _mm256_fmsub_pd(y, w, hi);
    let c = round_product(y, wq);
    add(_mm256_fnmadd_pd(c, q, hi), lo)
}

/// A constant w < q as (w, fl(w/q)) vectors.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn constant(w: u64, q: u64) -> (D, D) {
    (splat(w as f64), splat(w as f64 / q as f64))
}

/// The NTT twiddles as f64 with their quotients w/q, built on first use;
/// the last n/2 (the gap-1 stage's) in the order [`pair_stage_order`]
/// gives them, not the table's.
#[derive(Debug, Clone)]
pub(crate) struct FpTwiddles {
    fwd_w: Vec<f64>,
    fwd_wq: Vec<f64>,
    inv_w: Vec<f64>,
    inv_wq: Vec<f64>,
    n_inv: (f64, f64),
}

/// The lazily built f64 twiddles of an [`NttTable`].
pub(crate) type FpCell = OnceLock<FpTwiddles>;

fn fp_twiddles(t: &NttTable) -> &FpTwiddles {
    t.fp.get_or_init(|| {
        let q = t.modulus().value() as f64;
        let conv = |w: &[u64]| -> (Vec<f64>, Vec<f64>) {
            w.iter().map(|&x| (x as f64, x as f64 / q)).unzip()
        };
        let (mut fwd_w, mut fwd_wq) = conv(&t.fwd_twiddles().w);
        let (mut inv_w, mut inv_wq) = conv(&t.inv_twiddles().w);
        for w in [&mut fwd_w, &mut fwd_wq, &mut inv_w, &mut inv_wq] {
            pair_stage_order(w);
        }
        let ni = t.n_inv().0 as f64;
        FpTwiddles {
            fwd_w,
            fwd_wq,
            inv_w,
            inv_wq,
            n_inv: (ni, ni / q),
        }
    })
}

/// Reorders the gap-1 stage's twiddles (the last n/2) for the transposed
/// gap-1/gap-2 pass: for each four groups of four values, the twiddles of
/// their first butterflies, then of their second ones.
fn pair_stage_order(w: &mut [f64]) {
    let half = w.len() / 2;
    let tail = w[half..].to_vec();
    for (out, tw) in w[half..]
        .chunks_exact_mut(2 * LANES)
        .zip(tail.chunks_exact(2 * LANES))
    {
        for i in 0..LANES {
            out[i] = tw[2 * i];
            out[LANES + i] = tw[2 * i + 1];
        }
    }
}

/// Coefficients per cache block (as the integer kernels).
const BLOCK: usize = 1 << 11;

/// Four vectors transposed: lane i of output j is lane j of input i.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn transpose(a: [D; 4]) -> [D; 4] {
    let t0 = _mm256_unpacklo_pd(a[0], a[1]);
    let t1 = _mm256_unpackhi_pd(a[0], a[1]);
    let t2 = _mm256_unpacklo_pd(a[2], a[3]);
    let t3 = _mm256_unpackhi_pd(a[2], a[3]);
    [
        _mm256_permute2f128_pd::<0x20>(t0, t2),
        _mm256_permute2f128_pd::<0x20>(t1, t3),
        _mm256_permute2f128_pd::<0x31>(t0, t2),
        _mm256_permute2f128_pd::<0x31>(t1, t3),
    ]
}

/// Four f64 of `s`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn load_f64(s: &[f64]) -> D {
    assert!(s.len() >= LANES);
    // SAFETY: the slice holds at least LANES values; unaligned load.
    unsafe { _mm256_loadu_pd(s.as_ptr()) }
}

/// Twiddles `i .. i + LANES` of `w` with their quotients from `wq`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn twiddles_at(w: &[f64], wq: &[f64], i: usize) -> (D, D) {
    (load_f64(&w[i..]), load_f64(&wq[i..]))
}

/// The first 16 values of `a`, transposed: vector j holds value j of four
/// consecutive groups of four (`U64`: entries are u64, else f64 bits).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn load_groups<const U64: bool>(a: &[u64]) -> [D; 4] {
    let load = |i: usize| {
        if U64 {
            load_u64(&a[i * LANES..])
        } else {
            load_bits(&a[i * LANES..])
        }
    };
    transpose([load(0), load(1), load(2), load(3)])
}

/// Inverse of [`load_groups`] (raw bits).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn store_groups(a: &mut [u64], x: [D; 4]) {
    for (i, v) in transpose(x).into_iter().enumerate() {
        store_bits(&mut a[i * LANES..], v);
    }
}

// The forward transform keeps every value an integer with |x| ≤ 1.9q.
// Stage s (s = 0 has gap n/2) reduces X to |X| ≤ q/2 + 1 first when s is
// odd. Stage 0 takes X, Y in [0, q), so V = Y·w is within 5q/8 and X ± V
// within 1.625q; from a bound B, an odd stage leaves (1 + B/8)·q and an
// even one (B + 1/2 + B/8)·q: 1.625, 1.21, 1.86, 1.24, 1.89, 1.24, … and
// never above 1.9. Every |Y·w/q| is then below 1.9·2^50 < 2^51, as
// `mul_const` needs.

/// Whether the forward stage with this gap reduces X (see above).
fn fwd_reduces(n: usize, gap: usize) -> bool {
    (n / 2 / gap).trailing_zeros() % 2 == 1
}

/// Forward butterflies on consecutive groups of `2·gap` values of `a`
/// (gap ≥ LANES, entries f64); group j uses twiddle `tw_base + j`.
#[target_feature(enable = "avx2,fma")]
fn fwd_stage<const R: bool>(tw: &FpTwiddles, k: &Q, a: &mut [u64], tw_base: usize, gap: usize) {
    for (j, grp) in a.chunks_exact_mut(2 * gap).enumerate() {
        let (w, wq) = (splat(tw.fwd_w[tw_base + j]), splat(tw.fwd_wq[tw_base + j]));
        let (lo, hi) = grp.split_at_mut(gap);
        for (x, y) in lo.chunks_exact_mut(LANES).zip(hi.chunks_exact_mut(LANES)) {
            let u = load_bits(x);
            let u = if R { k.reduce(u) } else { u };
            let v = mul_const(load_bits(y), w, wq, k.q);
            store_bits(x, add(u, v));
            store_bits(y, sub(u, v));
        }
    }
}

/// Two forward stages in one pass, gaps `gap` then `gap/2` (both ≥
/// LANES), as [`fwd_stage`] at each: the first stage's group j uses twiddle
/// `tw_base + j`, the second's halves of it `2·(tw_base + j)` and
/// `2·(tw_base + j) + 1`.
#[target_feature(enable = "avx2,fma")]
fn fwd_stage_pair<const R1: bool, const R2: bool>(
    tw: &FpTwiddles,
    k: &Q,
    a: &mut [u64],
    tw_base: usize,
    gap: usize,
) {
    for (j, grp) in a.chunks_exact_mut(2 * gap).enumerate() {
        let i = tw_base + j;
        let (w, wq) = (splat(tw.fwd_w[i]), splat(tw.fwd_wq[i]));
        let (w0, wq0) = (splat(tw.fwd_w[2 * i]), splat(tw.fwd_wq[2 * i]));
        let (w1, wq1) = (splat(tw.fwd_w[2 * i + 1]), splat(tw.fwd_wq[2 * i + 1]));
        for [p0, p1, p2, p3] in super::simd::quarters(grp, LANES) {
            let (mut u0, mut u1) = (load_bits(p0), load_bits(p1));
            if R1 {
                (u0, u1) = (k.reduce(u0), k.reduce(u1));
            }
            let v2 = mul_const(load_bits(p2), w, wq, k.q);
            let v3 = mul_const(load_bits(p3), w, wq, k.q);
            let (mut y0, y1, mut y2, y3) = (add(u0, v2), add(u1, v3), sub(u0, v2), sub(u1, v3));
            if R2 {
                (y0, y2) = (k.reduce(y0), k.reduce(y2));
            }
            let v1 = mul_const(y1, w0, wq0, k.q);
            let v3 = mul_const(y3, w1, wq1, k.q);
            store_bits(p0, add(y0, v1));
            store_bits(p1, sub(y0, v1));
            store_bits(p2, add(y2, v3));
            store_bits(p3, sub(y2, v3));
        }
    }
}

/// The first forward stage (gap n/2): reads u64 entries in [0, q).
#[target_feature(enable = "avx2,fma")]
fn fwd_first_stage(tw: &FpTwiddles, k: &Q, a: &mut [u64]) {
    let (w, wq) = (splat(tw.fwd_w[1]), splat(tw.fwd_wq[1]));
    let (lo, hi) = a.split_at_mut(a.len() / 2);
    for (x, y) in lo.chunks_exact_mut(LANES).zip(hi.chunks_exact_mut(LANES)) {
        let u = load_u64(x);
        let v = mul_const(load_u64(y), w, wq, k.q);
        store_bits(x, add(u, v));
        store_bits(y, sub(u, v));
    }
}

/// The last two forward stages (gaps 2 and 1) in one pass over `a`, the
/// values of a block starting at value `start`, 16 at a time transposed
/// ([`load_groups`]) so that both stages run lane by lane on four groups
/// of four, with their twiddles loaded whole (see [`pair_stage_order`]):
/// half the lane shuffles of the two stages on their own, and one pass
/// (measured at N = 2^16: the whole transform 182 → 177 µs, inverse 187 →
/// 183 µs; the gap-4 stage folded in as well measured slower, 193 µs: the
/// longer chain per value). Writes u64 in [0, q). `R2`: whether the gap-2
/// stage reduces X (the gap-1 stage does otherwise).
#[target_feature(enable = "avx2,fma")]
fn fwd_last_stages<const R2: bool>(tw: &FpTwiddles, k: &Q, a: &mut [u64], n: usize, start: usize) {
    for (b, vals) in a.chunks_exact_mut(4 * LANES).enumerate() {
        let g = (start + b * 4 * LANES) / 4;
        let x = load_groups::<false>(vals);
        let (w, wq) = (&tw.fwd_w[..], &tw.fwd_wq[..]);
        let e = n / 2 + 2 * g;
        let (w2, wq2) = twiddles_at(w, wq, n / 4 + g);
        let (w1, wq1) = twiddles_at(w, wq, e);
        let (w3, wq3) = twiddles_at(w, wq, e + LANES);
        let (u0, u1) = if R2 {
            (k.reduce(x[0]), k.reduce(x[1]))
        } else {
            (x[0], x[1])
        };
        let v2 = mul_const(x[2], w2, wq2, k.q);
        let v3 = mul_const(x[3], w2, wq2, k.q);
        let (y0, y1, y2, y3) = (add(u0, v2), add(u1, v3), sub(u0, v2), sub(u1, v3));
        let (u0, u2) = if R2 {
            (y0, y2)
        } else {
            (k.reduce(y0), k.reduce(y2))
        };
        let v1 = mul_const(y1, w1, wq1, k.q);
        let v3 = mul_const(y3, w3, wq3, k.q);
        let out = |z: D| to_u64_bits(k.canonical(k.reduce(z)));
        store_groups(
            vals,
            [
                out(add(u0, v1)),
                out(sub(u0, v1)),
                out(add(u2, v3)),
                out(sub(u2, v3)),
            ],
        );
    }
}

/// Forward NTT for q < 2^50; same contract as [`NttTable::forward_scalar`].
#[target_feature(enable = "avx2,fma")]
pub(crate) fn forward(t: &NttTable, a: &mut [u64]) {
    let n = t.degree();
    assert_eq!(a.len(), n, "NTT input length");
    let tw = fp_twiddles(t);
    let k = Q::new(t.modulus().value());
    fwd_first_stage(tw, &k, a);
    let (mut gap, mut groups) = (n / 4, 2);
    // Closures inherit the function's target features.
    let stage = |a: &mut [u64], tw_base: usize, gap: usize| {
        if fwd_reduces(n, gap) {
            fwd_stage::<true>(tw, &k, a, tw_base, gap)
        } else {
            fwd_stage::<false>(tw, &k, a, tw_base, gap)
        }
    };
    // Stages alternate in reducing X, so a pair reduces in one of its two.
    let pair = |a: &mut [u64], tw_base: usize, gap: usize| {
        if fwd_reduces(n, gap) {
            fwd_stage_pair::<true, false>(tw, &k, a, tw_base, gap)
        } else {
            fwd_stage_pair::<false, true>(tw, &k, a, tw_base, gap)
        }
    };
    while 2 * gap > BLOCK {
        if gap > BLOCK {
            pair(a, groups, gap);
            (groups, gap) = (4 * groups, gap / 4);
        } else {
            stage(a, groups, gap);
            (groups, gap) = (2 * groups, gap / 2);
        }
    }
    let block = n.min(BLOCK);
    // The last two stages: gap 2 reduces iff gap 1 does not.
    let r2 = fwd_reduces(n, 2);
    for (b, blk) in a.chunks_exact_mut(block).enumerate() {
        let (mut gap, mut groups) = (gap, groups);
        while gap >= LANES {
            let tw_base = groups + b * block / (2 * gap);
            if gap / 2 >= LANES {
                pair(blk, tw_base, gap);
                (groups, gap) = (4 * groups, gap / 4);
            } else {
                stage(blk, tw_base, gap);
                (groups, gap) = (2 * groups, gap / 2);
            }
        }
        if r2 {
            fwd_last_stages::<true>(tw, &k, blk, n, b * block);
        } else {
            fwd_last_stages::<false>(tw, &k, blk, n, b * block);
        }
    }
}

// The inverse transform keeps |x| ≤ 0.7q: X + Y is reduced to q/2 + 1 and
// (X − Y)·w, with |X − Y| ≤ 1.4q, is within (1/2 + 1.4/8)·q.

/// Two inverse stages in one pass, gaps `gap` then `2·gap`, as
/// [`inv_stage`] at each: in each group of `4·gap` values the first
/// stage's halves use twiddles `tw_base + 2j` and `tw_base + 2j + 1`, the
/// second stage twiddle `tw_base/2 + j`.
#[target_feature(enable = "avx2,fma")]
fn inv_stage_pair(tw: &FpTwiddles, k: &Q, a: &mut [u64], tw_base: usize, gap: usize) {
    for (j, grp) in a.chunks_exact_mut(4 * gap).enumerate() {
        let i = tw_base + 2 * j;
        let (w0, wq0) = (splat(tw.inv_w[i]), splat(tw.inv_wq[i]));
        let (w1, wq1) = (splat(tw.inv_w[i + 1]), splat(tw.inv_wq[i + 1]));
        let (w, wq) = (splat(tw.inv_w[i / 2]), splat(tw.inv_wq[i / 2]));
        for [p0, p1, p2, p3] in super::simd::quarters(grp, LANES) {
            let (u0, u1, u2, u3) = (load_bits(p0), load_bits(p1), load_bits(p2), load_bits(p3));
            let y0 = k.reduce(add(u0, u1));
            let y1 = mul_const(sub(u0, u1), w0, wq0, k.q);
            let y2 = k.reduce(add(u2, u3));
            let y3 = mul_const(sub(u2, u3), w1, wq1, k.q);
            store_bits(p0, k.reduce(add(y0, y2)));
            store_bits(p2, mul_const(sub(y0, y2), w, wq, k.q));
            store_bits(p1, k.reduce(add(y1, y3)));
            store_bits(p3, mul_const(sub(y1, y3), w, wq, k.q));
        }
    }
}

/// Inverse butterflies on consecutive groups of `2·gap` values
/// (gap ≥ LANES); group j uses twiddle `tw_base + j`.
#[target_feature(enable = "avx2,fma")]
fn inv_stage(tw: &FpTwiddles, k: &Q, a: &mut [u64], tw_base: usize, gap: usize) {
    for (j, grp) in a.chunks_exact_mut(2 * gap).enumerate() {
        let (w, wq) = (splat(tw.inv_w[tw_base + j]), splat(tw.inv_wq[tw_base + j]));
        let (lo, hi) = grp.split_at_mut(gap);
        for (x, y) in lo.chunks_exact_mut(LANES).zip(hi.chunks_exact_mut(LANES)) {
            let (u, v) = (load_bits(x), load_bits(y));
            store_bits(x, k.reduce(add(u, v)));
            store_bits(y, mul_const(sub(u, v), w, wq, k.q));
        }
    }
}

/// The first two inverse stages (gaps 1 and 2) in one pass over `a`, the
/// values of a block starting at value `start` (u64 entries in [0, q)),
/// transposed as in [`fwd_last_stages`]; the input is `src` (the block's
/// values elsewhere) where given, else `a` itself.
#[target_feature(enable = "avx2,fma")]
fn inv_first_stages(
    tw: &FpTwiddles,
    k: &Q,
    a: &mut [u64],
    src: Option<&[u64]>,
    n: usize,
    start: usize,
) {
    for (b, vals) in a.chunks_exact_mut(4 * LANES).enumerate() {
        let g = (start + b * 4 * LANES) / 4;
        let x = match src {
            Some(s) => load_groups::<true>(&s[b * 4 * LANES..]),
            None => load_groups::<true>(vals),
        };
        let (w, wq) = (&tw.inv_w[..], &tw.inv_wq[..]);
        let e = n / 2 + 2 * g;
        let (w0, wq0) = twiddles_at(w, wq, e);
        let (w1, wq1) = twiddles_at(w, wq, e + LANES);
        let (w2, wq2) = twiddles_at(w, wq, n / 4 + g);
        let y0 = k.reduce(add(x[0], x[1]));
        let y1 = mul_const(sub(x[0], x[1]), w0, wq0, k.q);
        let y2 = k.reduce(add(x[2], x[3]));
        let y3 = mul_const(sub(x[2], x[3]), w1, wq1, k.q);
        store_groups(
            vals,
            [
                k.reduce(add(y0, y2)),
                k.reduce(add(y1, y3)),
                mul_const(sub(y0, y2), w2, wq2, k.q),
                mul_const(sub(y1, y3), w2, wq2, k.q),
            ],
        );
    }
}

/// Inverse NTT for q < 2^50; same contract as [`NttTable::inverse_scalar`].
#[target_feature(enable = "avx2,fma")]
pub(crate) fn inverse(t: &NttTable, a: &mut [u64]) {
    inverse_with(t, None, a, None)
}

/// `out = c · INTT(src)` for q < 2^50 and c < q, as the scalar inverse
/// transform and a multiplication by c: the first pass reads `src`, the
/// last multiplies by c with the n⁻¹ it already applies.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn inverse_scaled(t: &NttTable, src: &[u64], out: &mut [u64], c: u64) {
    assert_eq!(src.len(), t.degree(), "NTT input length");
    inverse_with(t, Some(src), out, Some(c))
}

/// [`inverse`] of `src` into `a` where given (else of `a`), times `c`
/// where given.
#[target_feature(enable = "avx2,fma")]
fn inverse_with(t: &NttTable, src: Option<&[u64]>, a: &mut [u64], c: Option<u64>) {
    let n = t.degree();
    assert_eq!(a.len(), n, "NTT input length");
    let tw = fp_twiddles(t);
    let k = Q::new(t.modulus().value());
    let block = n.min(BLOCK);
    let mut gap = LANES;
    for (b, blk) in a.chunks_exact_mut(block).enumerate() {
        let from = src.map(|s| &s[b * block..(b + 1) * block]);
        inv_first_stages(tw, &k, blk, from, n, b * block);
        gap = LANES;
        while 2 * gap <= block && gap < n / 2 {
            let tw_base = n / (2 * gap) + b * block / (2 * gap);
            if 4 * gap <= block && 2 * gap < n / 2 {
                inv_stage_pair(tw, &k, blk, tw_base, gap);
                gap *= 4;
            } else {
                inv_stage(tw, &k, blk, tw_base, gap);
                gap *= 2;
            }
        }
    }
    while gap < n / 2 {
        if 2 * gap < n / 2 {
            inv_stage_pair(tw, &k, a, n / (2 * gap), gap);
            gap *= 4;
        } else {
            inv_stage(tw, &k, a, n / (2 * gap), gap);
            gap *= 2;
        }
    }
    // Last stage, n⁻¹ (and c) merged into both outputs: |result| ≤
    // (1/2 + 1.4/8)·q.
    let ((ni, niq), (w, wq)) = match c {
        None => (
            (splat(tw.n_inv.0), splat(tw.n_inv.1)),
            (splat(tw.inv_w[1]), splat(tw.inv_wq[1])),
        ),
        Some(c) => {
            let m = t.modulus();
            let q = m.value();
            (
                constant(m.mul(t.n_inv().0, c), q),
                constant(m.mul(t.inv_twiddles().w[1], c), q),
            )
        }
    };
    let (lo, hi) = a.split_at_mut(n / 2);
    for (x, y) in lo.chunks_exact_mut(LANES).zip(hi.chunks_exact_mut(LANES)) {
        let (u, v) = (load_bits(x), load_bits(y));
        store_u64(x, k.canonical(mul_const(add(u, v), ni, niq, k.q)));
        store_u64(y, k.canonical(mul_const(sub(u, v), w, wq, k.q)));
    }
}

/// `a[i] = a[i]·b[i] mod q` for q < 2^50 (tail in scalar code).
#[target_feature(enable = "avx2,fma")]
pub(crate) fn mul_pointwise(m: &Modulus, a: &mut [u64], b: &[u64]) {
    let k = Q::new(m.value());
    let len = a.len().min(b.len());
    let (a, b) = (&mut a[..len], &b[..len]);
    let mut ac = a.chunks_exact_mut(LANES);
    let mut bc = b.chunks_exact(LANES);
    for (x, y) in (&mut ac).zip(&mut bc) {
        store_u64(x, k.canonical(k.mul(load_u64(x), load_u64(y))));
    }
    for (x, y) in ac.into_remainder().iter_mut().zip(bc.remainder()) {
        *x = m.mul(*x, *y);
    }
}

/// `out[i] = a[i]·b[i] mod q` for q < 2^50 (tail in scalar code).
#[target_feature(enable = "avx2,fma")]
pub(crate) fn mul_pointwise_into(m: &Modulus, out: &mut [u64], a: &[u64], b: &[u64]) {
    let k = Q::new(m.value());
    let len = out.len().min(a.len()).min(b.len());
    let (out, a, b) = (&mut out[..len], &a[..len], &b[..len]);
    let mut oc = out.chunks_exact_mut(LANES);
    let (mut ac, mut bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for ((o, x), y) in (&mut oc).zip(&mut ac).zip(&mut bc) {
        store_u64(o, k.canonical(k.mul(load_u64(x), load_u64(y))));
    }
    for ((o, x), y) in oc
        .into_remainder()
        .iter_mut()
        .zip(ac.remainder())
        .zip(bc.remainder())
    {
        *o = m.mul(*x, *y);
    }
}

/// `acc[i] = acc[i] + a[i]·b[i] mod q` for q < 2^50 (tail in scalar code).
#[target_feature(enable = "avx2,fma")]
pub(crate) fn mul_add_pointwise(m: &Modulus, a: &[u64], b: &[u64], acc: &mut [u64]) {
    let k = Q::new(m.value());
    let len = acc.len().min(a.len()).min(b.len());
    let (a, b, acc) = (&a[..len], &b[..len], &mut acc[..len]);
    let mut oc = acc.chunks_exact_mut(LANES);
    let (mut ac, mut bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for ((o, x), y) in (&mut oc).zip(&mut ac).zip(&mut bc) {
        // |product| < 3q/4 and 0 ≤ o < q: the sum is within 2q.
        let s = add(k.mul(load_u64(x), load_u64(y)), load_u64(o));
        store_u64(o, k.canonical(k.reduce(s)));
    }
    for ((o, x), y) in oc
        .into_remainder()
        .iter_mut()
        .zip(ac.remainder())
        .zip(bc.remainder())
    {
        *o = m.reduce_u128(*o as u128 + *x as u128 * *y as u128);
    }
}

/// Four u64 entries of `s` as f64, rounded to nearest as `x as f64` rounds
/// them: the 32-bit halves exactly, then hi·2^32 + lo rounded once.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn load_u64_rounded(s: &[u64]) -> D {
    assert!(s.len() >= LANES);
    // SAFETY: the slice holds at least LANES values; unaligned load.
    let v = unsafe { _mm256_loadu_si256(s.as_ptr().cast()) };
    let lo = from_u64(_mm256_and_si256(v, _mm256_set1_epi64x(u32::MAX as i64)));
    let hi = from_u64(_mm256_srli_epi64::<32>(v));
    _mm256_fmadd_pd(hi, splat(4_294_967_296.0), lo)
}

/// `out[c] = round(Σ_k limbs[k][c]·inv[k])` on whole vectors of `out` (the
/// caller finishes the tail), as [`crate::backend::Backend::round_sums`]:
/// the same roundings in the same order as the scalar reference (no fused
/// multiply-add in the sum), so the same integers.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn round_sums(out: &mut [u64], limbs: &[&[u64]], inv: &[f64], bits: &[u32]) {
    let w: Vec<D> = inv.iter().map(|&x| splat(x)).collect();
    let whole = out.len() / LANES * LANES;
    for c in (0..whole).step_by(LANES) {
        let mut sum = _mm256_setzero_pd();
        for ((l, &w), &b) in limbs.iter().zip(&w).zip(bits) {
            let x = if b <= 52 {
                load_u64(&l[c..])
            } else {
                load_u64_rounded(&l[c..])
            };
            sum = add(sum, _mm256_mul_pd(x, w));
        }
        // The sum plus 2^52 is rounded to an integer (ties to even).
        store_bits(&mut out[c..], to_u64_bits(sum));
    }
}

/// Products summed between reductions: a sum from |x| ≤ q/2 + 1 plus RUN
/// terms below 3q/4 (or 5q/8 for constant weights) stays below 6.6q < 2^53.
const RUN: usize = 8;

/// `o0 = Σ_j s_j·b_j`, `o1 = Σ_j s_j·a_j` mod q on whole vectors (the caller
/// finishes the tail), for entries below q < 2^50: centred products summed
/// exactly, reduced every [`RUN`] terms.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn dot_product_pair(
    m: &Modulus,
    s: &[&[u64]],
    b: &[&[u64]],
    a: &[&[u64]],
    o0: &mut [u64],
    o1: &mut [u64],
) {
    let k = Q::new(m.value());
    let zero = _mm256_setzero_pd();
    let whole = o0.len() / LANES * LANES;
    for c in (0..whole).step_by(LANES) {
        let (mut r0, mut r1) = (zero, zero);
        for (j, ((x, y0), y1)) in s.iter().zip(b).zip(a).enumerate() {
            if j > 0 && j % RUN == 0 {
                r0 = k.reduce(r0);
                r1 = k.reduce(r1);
            }
            if c % 8 == 0 {
                prefetch(y0, c + AHEAD);
                prefetch(y1, c + AHEAD);
            }
            let x = load_u64(&x[c..]);
            r0 = add(r0, k.mul(x, load_u64(&y0[c..])));
            r1 = add(r1, k.mul(x, load_u64(&y1[c..])));
        }
        store_u64(&mut o0[c..], k.canonical(k.reduce(r0)));
        store_u64(&mut o1[c..], k.canonical(k.reduce(r1)));
    }
}

/// Constants of one output of a linear combination.
struct Combination {
    /// (w, w/q) of each source, and of w·2^32 mod q for the high halves of
    /// split sources.
    weights: Vec<[(D, D); 2]>,
    q: Q,
}

impl Combination {
    #[target_feature(enable = "avx2,fma")]
    fn new(m: &Modulus, w: &[u64]) -> Self {
        let q = m.value();
        let two32 = (1u64 << 32) % q;
        Self {
            weights: w
                .iter()
                .map(|&x| [constant(x, q), constant(m.mul(x, two32), q)])
                .collect(),
            q: Q::new(q),
        }
    }
}

/// A source vector, whole (below 2^50) or as its two 32-bit halves.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn load_source<const SPLIT: bool>(s: &[u64]) -> (D, D) {
    if SPLIT {
        assert!(s.len() >= LANES);
        // SAFETY: the slice holds at least LANES values; unaligned load.
        let v = unsafe { _mm256_loadu_si256(s.as_ptr().cast()) };
        (
            from_u64(_mm256_and_si256(v, _mm256_set1_epi64x(u32::MAX as i64))),
            from_u64(_mm256_srli_epi64::<32>(v)),
        )
    } else {
        (load_u64(s), _mm256_setzero_pd())
    }
}

/// acc + x·w for a source as [`load_source`] returns it.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn add_term<const SPLIT: bool>(acc: D, x: (D, D), w: &[(D, D); 2], q: D) -> D {
    let acc = add(acc, mul_const(x.0, w[0].0, w[0].1, q));
    if SPLIT {
        add(acc, mul_const(x.1, w[1].0, w[1].1, q))
    } else {
        acc
    }
}

/// `out = keep·out + Σ_k srcs[k]·w[k] mod q` on whole vectors of `out`
/// (the caller finishes the tail; its length is a multiple of 8), for
/// q < 2^50, weights and `out` entries below q, source k below
/// 2^src_bits\[k\]. Sources wider than 50 bits ([`crate::ntt::splits`])
/// enter as two 32-bit halves, the high one
/// weighted by w·2^32 mod q; the others whole. A term x·w with
/// x < 2^50 is within 5q/8 after [`mul_const`]; the sum is reduced every
/// [`RUN`] terms.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn linear_combination(
    m: &Modulus,
    out: &mut [u64],
    keep: Option<u64>,
    srcs: &[&[u64]],
    w: &[u64],
    src_bits: &[u32],
) {
    let k = [Combination::new(m, w)];
    let keep = keep.map(|x| constant(x, m.value()));
    let mut outs = [out];
    if src_bits.iter().any(|&b| splits(b)) {
        combine_all::<1, true>(&k, &mut outs, keep, srcs, src_bits);
    } else {
        combine_all::<1, false>(&k, &mut outs, keep, srcs, src_bits);
    }
}

/// [`linear_combination`] without `keep` into up to [`GROUP`] outputs
/// (moduli below 2^50) in one pass over the sources.
pub(crate) const GROUP: usize = 4;

/// See [`GROUP`]; every output has the same length, a multiple of 8.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn linear_combination_group(
    q: &[&Modulus],
    out: &mut [&mut [u64]],
    srcs: &[&[u64]],
    w: &[&[u64]],
    src_bits: &[u32],
) {
    let ks: Vec<Combination> = q
        .iter()
        .zip(w)
        .map(|(m, w)| Combination::new(m, w))
        .collect();
    macro_rules! run {
        ($t:literal) => {{
            let ks: &[Combination; $t] = ks.as_slice().try_into().expect("group size");
            if src_bits.iter().any(|&b| splits(b)) {
                combine_all::<$t, true>(ks, out, None, srcs, src_bits);
            } else {
                combine_all::<$t, false>(ks, out, None, srcs, src_bits);
            }
        }};
    }
    match ks.len() {
        1 => run!(1),
        2 => run!(2),
        3 => run!(3),
        4 => run!(4),
        g => unreachable!("group of {g} outputs"),
    }
}

/// Vectors of each output summed together in [`combine_all`].
const U: usize = 2;

/// The T outputs' sums plus source j's terms at entry c (U vectors).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn add_source<const T: usize, const SPLIT: bool>(
    acc: &mut [[D; U]; T],
    ks: &[Combination; T],
    j: usize,
    s: &[u64],
    c: usize,
) {
    for u in 0..U {
        let x = load_source::<SPLIT>(&s[c + u * LANES..]);
        for t in 0..T {
            acc[t][u] = add_term::<SPLIT>(acc[t][u], x, &ks[t].weights[j], ks[t].q.q);
        }
    }
}

/// The T outputs of a combination, two vectors at a time (2T independent
/// sums); `keep` multiplies the old contents of the outputs. With ANY_WIDE
/// the sources wider than 50 bits enter as two halves, without it none
/// does.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn combine_all<const T: usize, const ANY_WIDE: bool>(
    ks: &[Combination; T],
    out: &mut [&mut [u64]],
    keep: Option<(D, D)>,
    srcs: &[&[u64]],
    src_bits: &[u32],
) {
    let len = out[0].len();
    assert!(out.iter().all(|o| o.len() == len) && len.is_multiple_of(U * LANES));
    assert_eq!(src_bits.len(), srcs.len(), "one width per source");
    let zero = _mm256_setzero_pd();
    for c in (0..len).step_by(U * LANES) {
        let mut acc = [[zero; U]; T];
        if let Some((kw, kwq)) = keep {
            for t in 0..T {
                for u in 0..U {
                    let x = load_u64(&out[t][c + u * LANES..]);
                    acc[t][u] = mul_const(x, kw, kwq, ks[t].q.q);
                }
            }
        }
        let mut terms = 1;
        for (j, s) in srcs.iter().enumerate() {
            prefetch(s, c + AHEAD);
            let split = ANY_WIDE && splits(src_bits[j]);
            let per_term = if split { 2 } else { 1 };
            if terms + per_term > RUN {
                for (k, row) in ks.iter().zip(acc.iter_mut()) {
                    for x in row.iter_mut() {
                        *x = k.q.reduce(*x);
                    }
                }
                terms = 0;
            }
            if split {
                add_source::<T, true>(&mut acc, ks, j, s, c);
            } else {
                add_source::<T, false>(&mut acc, ks, j, s, c);
            }
            terms += per_term;
        }
        for t in 0..T {
            for u in 0..U {
                let r = ks[t].q.canonical(ks[t].q.reduce(acc[t][u]));
                store_u64(&mut out[t][c + u * LANES..], r);
            }
        }
    }
}
