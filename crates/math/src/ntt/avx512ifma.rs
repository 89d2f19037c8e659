//! AVX-512 IFMA NTT kernels for primes below 2^50: every value of the lazy
//! butterflies stays below 4q < 2^52, so Shoup's product needs three 52-bit
//! multiply-adds (`vpmadd52{lo,hi}uq`) instead of a 64-bit high product
//! assembled from four 32-bit multiplies and two `vpmullq`.

use std::arch::x86_64::*;

use super::avx512::{LANES, V, add, csub, join, load, load_repeated, splat, split, store, sub};
use super::simd::{AHEAD, prefetch};
use super::splits;

/// Moduli this kernel accepts (exclusive bound).
pub(crate) const MAX_MODULUS: u64 = 1 << 50;

/// x·w mod q in [0, 2q) for x < 2^52, with `ws` = ⌊w·2^64/q⌋ as elsewhere:
/// ⌊w·2^52/q⌋ = ws >> 12, the quotient estimate ⌊x·(ws >> 12)/2^52⌋ is short
/// by at most one, and x·w − quotient·q < 2q < 2^52 is exact modulo 2^52;
/// the subtraction rides on the last multiply-add as + quotient·(2^52 − q).
/// The form of q (Q1) changes nothing here.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
fn mul_shoup_lazy<const Q1: bool>(x: V, w: V, ws: V, q: V) -> V {
    let mask52 = _mm512_set1_epi64((1 << 52) - 1);
    let neg_q = _mm512_sub_epi64(_mm512_set1_epi64(1 << 52), q);
    let quotient = _mm512_madd52hi_epu64(_mm512_setzero_si512(), x, _mm512_srli_epi64(ws, 12));
    let xw = _mm512_madd52lo_epu64(_mm512_setzero_si512(), x, w);
    _mm512_and_si512(_mm512_madd52lo_epu64(xw, quotient, neg_q), mask52)
}

/// Never: the exact product is already three instructions.
const LOOSE_MAX_MODULUS: u64 = 0;

#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
fn mul_shoup_loose<const Q1: bool>(x: V, w: V, ws: V, q: V) -> V {
    mul_shoup_lazy::<Q1>(x, w, ws, q)
}

/// Lazy values stay below LAZY_CAP·q: the 52-bit multipliers need every value below 4q < 2^52.
const LAZY_CAP: u64 = 4;

/// Two stages per pass ([`fwd_stage_pair`]): the 52-bit products are cheap
/// enough that loads and stores limit the stages (measured at N = 2^16:
/// forward 153 → 138 µs, inverse 145 → 124 µs).
const PAIRED_STAGES: bool = true;

super::simd::simd_ntt_kernels!("avx512f,avx512dq,avx512ifma");

/// Barrett constants of a modulus q < 2^50 with k bits for [`mul_pointwise`]:
/// the shift s = k − 2 and μ = ⌊2^(s+52) / q⌋ < 2^51.
#[derive(Clone, Copy)]
pub(crate) struct Barrett52 {
    q: u64,
    shift: u32,
    mu: u64,
}

impl Barrett52 {
    pub(crate) fn new(q: u64) -> Self {
        debug_assert!((2..MAX_MODULUS).contains(&q));
        let shift = (64 - q.leading_zeros()).saturating_sub(2);
        let mu = ((1u128 << (shift + 52)) / q as u128) as u64;
        Self { q, shift, mu }
    }
}

/// (acc + a·b) mod q for a, b, acc < q < 2^50. The product is hi·2^52 + lo
/// (lo may carry acc past 2^52); the quotient estimate
/// ⌊⌊P/2^s⌋·μ / 2^52⌋ falls short of ⌊P/q⌋ by at most 3, so the remainder,
/// exact modulo 2^52, is below 4q and two conditional subtractions finish.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
fn mul_add_mod(a: V, b: V, acc: V, c: &Barrett52) -> V {
    let mask52 = _mm512_set1_epi64((1 << 52) - 1);
    let (q, two_q) = (splat(c.q), splat(2 * c.q));
    let lo = _mm512_madd52lo_epu64(acc, a, b);
    let hi = _mm512_madd52hi_epu64(_mm512_setzero_si512(), a, b);
    let top = _mm512_add_epi64(
        _mm512_sll_epi64(hi, _mm_cvtsi64_si128(52 - c.shift as i64)),
        _mm512_srl_epi64(lo, _mm_cvtsi64_si128(c.shift as i64)),
    );
    let quotient = _mm512_madd52hi_epu64(_mm512_setzero_si512(), top, splat(c.mu));
    let neg_q = _mm512_sub_epi64(_mm512_set1_epi64(1 << 52), q);
    let r = _mm512_and_si512(_mm512_madd52lo_epu64(lo, quotient, neg_q), mask52);
    csub(csub(r, two_q), q)
}

/// `a[i] = a[i]·b[i] mod q` for q < 2^50 (tail in scalar code).
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
pub(crate) fn mul_pointwise(m: &crate::Modulus, a: &mut [u64], b: &[u64]) {
    let c = Barrett52::new(m.value());
    let zero = _mm512_setzero_si512();
    let mut ac = a.chunks_exact_mut(LANES);
    let mut bc = b.chunks_exact(LANES);
    for (x, y) in (&mut ac).zip(&mut bc) {
        store(x, mul_add_mod(load(x), load(y), zero, &c));
    }
    for (x, y) in ac.into_remainder().iter_mut().zip(bc.remainder()) {
        *x = m.mul(*x, *y);
    }
}

/// `out[i] = a[i]·b[i] mod q` for q < 2^50 (tail in scalar code).
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
pub(crate) fn mul_pointwise_into(m: &crate::Modulus, out: &mut [u64], a: &[u64], b: &[u64]) {
    let c = Barrett52::new(m.value());
    let zero = _mm512_setzero_si512();
    let mut oc = out.chunks_exact_mut(LANES);
    let (mut ac, mut bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for ((o, x), y) in (&mut oc).zip(&mut ac).zip(&mut bc) {
        store(o, mul_add_mod(load(x), load(y), zero, &c));
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
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
pub(crate) fn mul_add_pointwise(m: &crate::Modulus, a: &[u64], b: &[u64], acc: &mut [u64]) {
    let c = Barrett52::new(m.value());
    let mut oc = acc.chunks_exact_mut(LANES);
    let (mut ac, mut bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for ((o, x), y) in (&mut oc).zip(&mut ac).zip(&mut bc) {
        store(o, mul_add_mod(load(x), load(y), load(o), &c));
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

/// `o0 = Σ_j s_j·b_j`, `o1 = Σ_j s_j·a_j` mod q on whole vectors (the caller
/// finishes the tail), for entries below q < 2^50. Products are summed
/// lazily as 52-bit halves (`lo` gains < 2^52 and `hi` < 2^48 per term);
/// every 15 terms the pair hi·2^52 + lo is folded to [0, q) by two Shoup
/// products (by 2^52 mod q and by 1), and the next run starts from it.
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
pub(crate) fn dot_product_pair(
    m: &crate::Modulus,
    s: &[&[u64]],
    b: &[&[u64]],
    a: &[&[u64]],
    o0: &mut [u64],
    o1: &mut [u64],
) {
    const RUN: usize = 15;
    let q = m.value();
    let c52 = ((1u128 << 52) % q as u128) as u64;
    let (w52, w52s, one, ones) = (splat(c52), splat(m.shoup(c52)), splat(1), splat(m.shoup(1)));
    let vq = splat(q);
    let zero = _mm512_setzero_si512();
    let whole = o0.len() / LANES * LANES;
    for c in (0..whole).step_by(LANES) {
        let (mut r0, mut r1) = (zero, zero);
        for j0 in (0..s.len()).step_by(RUN) {
            let (mut lo0, mut hi0, mut lo1, mut hi1) = (r0, zero, r1, zero);
            for j in j0..s.len().min(j0 + RUN) {
                prefetch(b[j], c + AHEAD);
                prefetch(a[j], c + AHEAD);
                let x = load(&s[j][c..]);
                let (y0, y1) = (load(&b[j][c..]), load(&a[j][c..]));
                lo0 = _mm512_madd52lo_epu64(lo0, x, y0);
                hi0 = _mm512_madd52hi_epu64(hi0, x, y0);
                lo1 = _mm512_madd52lo_epu64(lo1, x, y1);
                hi1 = _mm512_madd52hi_epu64(hi1, x, y1);
            }
            r0 = fold104(lo0, hi0, w52, w52s, one, ones, vq);
            r1 = fold104(lo1, hi1, w52, w52s, one, ones, vq);
        }
        store(&mut o0[c..], r0);
        store(&mut o1[c..], r1);
    }
}

/// hi·2^52 + lo mod q in [0, q) for lo < 2^63, hi + lo/2^52 < 2^52.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
fn fold104(lo: V, hi: V, w52: V, w52s: V, one: V, ones: V, q: V) -> V {
    let hi = add(hi, _mm512_srli_epi64(lo, 52));
    let lo = _mm512_and_si512(lo, splat((1 << 52) - 1));
    let r = add(
        mul_shoup_lazy::<false>(hi, w52, w52s, q),
        mul_shoup_lazy::<false>(lo, one, ones, q),
    );
    csub(csub(r, add(q, q)), q)
}

/// Constants of one [`linear_combination`] call.
struct Combination {
    /// Weight of each source and of its high half (w·2^32 mod q).
    weights: Vec<(V, V)>,
    keep: Option<V>,
    fold: Fold104,
}

/// Constants of [`fold104`].
#[derive(Clone, Copy)]
struct Fold104 {
    w52: V,
    w52s: V,
    one: V,
    ones: V,
    q: V,
}

impl Fold104 {
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
    fn new(m: &crate::Modulus) -> Self {
        let c52 = ((1u128 << 52) % m.value() as u128) as u64;
        Self {
            w52: splat(c52),
            w52s: splat(m.shoup(c52)),
            one: splat(1),
            ones: splat(m.shoup(1)),
            q: splat(m.value()),
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
    fn apply(&self, lo: V, hi: V) -> V {
        fold104(lo, hi, self.w52, self.w52s, self.one, self.ones, self.q)
    }
}

/// `out = keep·out + Σ_k srcs[k]·w[k] mod q` on whole vectors (the caller
/// finishes the tail), for q < 2^50, weights and `out` entries below q and
/// source k below 2^src_bits\[k\]: 104-bit lazy sums as in
/// [`dot_product_pair`]. Sources wider than 50 bits
/// ([`crate::ntt::splits`]) enter as two 32-bit halves, the high one
/// weighted by w·2^32 mod q, so every product stays below 2^100.
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
pub(crate) fn linear_combination(
    m: &crate::Modulus,
    out: &mut [u64],
    keep: Option<u64>,
    srcs: &[&[u64]],
    w: &[u64],
    src_bits: &[u32],
) {
    let two32 = (1u64 << 32) % m.value();
    let k = Combination {
        weights: w
            .iter()
            .map(|&x| (splat(x), splat(m.mul(x, two32))))
            .collect(),
        keep: keep.map(|k| splat(k)),
        fold: Fold104::new(m),
    };
    // Four vectors at a time: the multiply-add chains are latency-bound.
    const U: usize = 4;
    let whole = out.len() / LANES * LANES;
    let unrolled = whole / (U * LANES) * (U * LANES);
    if src_bits.iter().any(|&b| splits(b)) {
        for c in (0..unrolled).step_by(U * LANES) {
            combine_vectors::<U, true>(&k, out, srcs, src_bits, c);
        }
        for c in (unrolled..whole).step_by(LANES) {
            combine_vectors::<1, true>(&k, out, srcs, src_bits, c);
        }
    } else {
        for c in (0..unrolled).step_by(U * LANES) {
            combine_vectors::<U, false>(&k, out, srcs, src_bits, c);
        }
        for c in (unrolled..whole).step_by(LANES) {
            combine_vectors::<1, false>(&k, out, srcs, src_bits, c);
        }
    }
}

/// [`linear_combination`] on the U vectors of `out` from entry `c`; with
/// ANY_WIDE the sources wider than 50 bits enter as two halves.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
fn combine_vectors<const U: usize, const ANY_WIDE: bool>(
    k: &Combination,
    out: &mut [u64],
    srcs: &[&[u64]],
    src_bits: &[u32],
    c: usize,
) {
    const RUN: usize = 15;
    let zero = _mm512_setzero_si512();
    let (mut lo, mut hi, mut terms) = ([zero; U], [zero; U], 0);
    if let Some(kv) = k.keep {
        for u in 0..U {
            let x = load(&out[c + u * LANES..]);
            lo[u] = _mm512_madd52lo_epu64(lo[u], x, kv);
            hi[u] = _mm512_madd52hi_epu64(hi[u], x, kv);
        }
        terms = 1;
    }
    for ((s, &(wl, wh)), &bits) in srcs.iter().zip(&k.weights).zip(src_bits) {
        // Before a source terms ≤ RUN − 2: a split one (2 terms) fits.
        if ANY_WIDE && splits(bits) {
            for u in 0..U {
                let x = load(&s[c + u * LANES..]);
                (lo[u], hi[u]) = add_term::<true>(lo[u], hi[u], x, wl, wh);
            }
            terms += 2;
        } else {
            for u in 0..U {
                let x = load(&s[c + u * LANES..]);
                (lo[u], hi[u]) = add_term::<false>(lo[u], hi[u], x, wl, wh);
            }
            terms += 1;
        }
        if terms >= RUN - 1 {
            for u in 0..U {
                lo[u] = k.fold.apply(lo[u], hi[u]);
                hi[u] = zero;
            }
            terms = 0;
        }
    }
    for u in 0..U {
        store(&mut out[c + u * LANES..], k.fold.apply(lo[u], hi[u]));
    }
}

/// [`linear_combination`] without `keep` into up to [`GROUP`] outputs
/// (moduli below 2^50) in one pass over the sources: conversions are bound
/// by reading the sources, and each is read once for the whole group.
pub(crate) const GROUP: usize = 4;

/// See [`GROUP`]; every output has the same length.
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
pub(crate) fn linear_combination_group(
    m: &[&crate::Modulus],
    out: &mut [&mut [u64]],
    srcs: &[&[u64]],
    w: &[&[u64]],
    src_bits: &[u32],
) {
    let ks: Vec<Combination> = m
        .iter()
        .zip(w)
        .map(|(m, w)| {
            let two32 = (1u64 << 32) % m.value();
            Combination {
                weights: w
                    .iter()
                    .map(|&x| (splat(x), splat(m.mul(x, two32))))
                    .collect(),
                keep: None,
                fold: Fold104::new(m),
            }
        })
        .collect();
    let whole = out[0].len() / LANES * LANES;
    macro_rules! run {
        ($t:literal) => {{
            let ks: &[Combination; $t] = ks.as_slice().try_into().expect("group size");
            for c in (0..whole).step_by(LANES) {
                if src_bits.iter().any(|&b| splits(b)) {
                    combine_group::<$t, true>(ks, out, srcs, src_bits, c);
                } else {
                    combine_group::<$t, false>(ks, out, srcs, src_bits, c);
                }
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

/// One vector from entry `c` of each of the T outputs of
/// [`linear_combination_group`]; 2T independent multiply-add chains. With
/// ANY_WIDE the sources wider than 50 bits enter as two halves.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
fn combine_group<const T: usize, const ANY_WIDE: bool>(
    ks: &[Combination; T],
    out: &mut [&mut [u64]],
    srcs: &[&[u64]],
    src_bits: &[u32],
    c: usize,
) {
    const RUN: usize = 15;
    let zero = _mm512_setzero_si512();
    let (mut lo, mut hi, mut terms) = ([zero; T], [zero; T], 0);
    for (k, s) in srcs.iter().enumerate() {
        prefetch(s, c + AHEAD);
        let x = load(&s[c..]);
        if ANY_WIDE && splits(src_bits[k]) {
            for t in 0..T {
                let (wl, wh) = ks[t].weights[k];
                (lo[t], hi[t]) = add_term::<true>(lo[t], hi[t], x, wl, wh);
            }
            terms += 2;
        } else {
            for t in 0..T {
                let (wl, wh) = ks[t].weights[k];
                (lo[t], hi[t]) = add_term::<false>(lo[t], hi[t], x, wl, wh);
            }
            terms += 1;
        }
        if terms >= RUN - 1 {
            for t in 0..T {
                lo[t] = ks[t].fold.apply(lo[t], hi[t]);
                hi[t] = zero;
            }
            terms = 0;
        }
    }
    for t in 0..T {
        store(&mut out[t][c..], ks[t].fold.apply(lo[t], hi[t]));
    }
}

/// (lo, hi) += x·w as 52-bit halves, w given as (w, w·2^32 mod q): x below
/// 2^50 enters whole, a wider x (SPLIT) as its two 32-bit halves.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx512ifma")]
fn add_term<const SPLIT: bool>(lo: V, hi: V, x: V, wl: V, wh: V) -> (V, V) {
    if SPLIT {
        let (xl, xh) = (
            _mm512_and_si512(x, splat(u32::MAX as u64)),
            _mm512_srli_epi64(x, 32),
        );
        let (lo, hi) = (
            _mm512_madd52lo_epu64(lo, xl, wl),
            _mm512_madd52hi_epu64(hi, xl, wl),
        );
        (
            _mm512_madd52lo_epu64(lo, xh, wh),
            _mm512_madd52hi_epu64(hi, xh, wh),
        )
    } else {
        (
            _mm512_madd52lo_epu64(lo, x, wl),
            _mm512_madd52hi_epu64(hi, x, wl),
        )
    }
}
