//! NTT loops shared by the SIMD backends. A backend module defines the vector
//! type `V`, `LANES`, and the primitives `load`, `load_repeated` (LANES / gap
//! values, each repeated `gap` times), `store`, `splat`, `add`,
//! `sub`, `csub` (x ≥ b ? x − b : x, which callers use only for x < 2b
//! and b ≤ 2^63: AVX2's reads the sign of x − b), `mul_shoup_lazy` (below 2q),
//! `mul_shoup_loose` (below 4q, for moduli below `LOOSE_MAX_MODULUS`), both
//! generic over `Q1` (q ≡ 1 mod 2^32: a shortcut the backend may take),
//! `split` and `join` (gather the X and Y operands of a stage with gap <
//! LANES from two consecutive vectors, and back), then invokes
//! `simd_ntt_kernels!` with its target features, and `LAZY_CAP`, how many
//! multiples of q its lazy values may reach with the exact product (8 where
//! 8q and its products fit the kernel's word, else 4; with the loose one
//! too from 2^60 to 2^61), and `PAIRED_STAGES`,
//! whether its stages with gaps of at least 2·LANES run two per pass.
//! Intermediate values may differ from the scalar reference's, which reduces
//! at every stage, but both end fully reduced, so outputs are bit-identical.

/// How far ahead (in entries) the streaming kernels ask for their
/// operands: key switching's base conversion and inner product read their
/// sources and keys from beyond L2, megabytes each in several streams at
/// once, and stalled on those loads (a profile at N = 2^16 on a Zen 5 EPYC
/// put the conversion's hottest instructions on its source loads). Asking
/// 2 KiB ahead made mul+relin+rescale at N = 2^16 8–12 % faster on AVX2
/// and about as much with IFMA; 1 and 4 KiB measured the same as 2.
pub(crate) const AHEAD: usize = 256;

/// Asks for the cache line of `s[i]` ahead of its use (nothing past the
/// end of `s`).
#[inline]
pub(crate) fn prefetch<T>(s: &[T], i: usize) {
    if i < s.len() {
        // SAFETY: `i` is in bounds; a prefetch has no effect on memory and
        // SSE is part of x86_64.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                s.as_ptr().add(i).cast(),
            )
        };
    }
}

/// The four quarters of `grp`, `lanes` values at a time from each: the
/// operands of two NTT stages run in one pass.
pub(super) fn quarters(grp: &mut [u64], lanes: usize) -> impl Iterator<Item = [&mut [u64]; 4]> {
    let quarter = grp.len() / 4;
    let (lo, hi) = grp.split_at_mut(2 * quarter);
    let (a0, a1) = lo.split_at_mut(quarter);
    let (a2, a3) = hi.split_at_mut(quarter);
    a0.chunks_exact_mut(lanes)
        .zip(a1.chunks_exact_mut(lanes))
        .zip(a2.chunks_exact_mut(lanes).zip(a3.chunks_exact_mut(lanes)))
        .map(|((p0, p1), (p2, p3))| [p0, p1, p2, p3])
}

/// Calls `f::<LOOSE, Q1>(args)` (or `f::<G, LOOSE, Q1>(args)`) with
/// LOOSE = `loose` and Q1 = whether the modulus `q` is ≡ 1 mod 2^32.
macro_rules! with_product {
    ($q:expr, $loose:expr, $f:ident$(::<$g:tt>)?($($arg:expr),*)) => {{
        let q1 = $q & 0xffff_ffff == 1;
        match ($loose, q1) {
            (true, true) => $f::<$($g,)? true, true>($($arg),*),
            (true, false) => $f::<$($g,)? true, false>($($arg),*),
            (false, true) => $f::<$($g,)? false, true>($($arg),*),
            (false, false) => $f::<$($g,)? false, false>($($arg),*),
        }
    }};
}

pub(crate) use with_product;

macro_rules! simd_ntt_kernels {
    ($feat:literal) => {
        use crate::ntt::NttTable;

        /// Coefficients per cache block: the stages whose butterfly groups fit
        /// in a block run depth-first on it while it sits in L1.
        const BLOCK: usize = 1 << 11;

        /// A product by a constant with its Shoup companion: Shoup's, below
        /// 2q, or the loose one (a quotient estimate with fewer 32-bit
        /// products), below 4q. The NTTs, the linear combinations and the
        /// wide sums' folds take the loose one for moduli below
        /// `LOOSE_MAX_MODULUS` (2^61 where it is not 0: the NTTs' lazy
        /// values then reach 16q, or 8q from 2^60 on: [`FwdPlan`]; the
        /// others' sums 8q). Q1: q ≡ 1
        /// mod 2^32 ([`crate::prime::ntt_primes`] above 50 bits), which
        /// makes the quotient's multiple of q cheaper.
        #[inline]
        #[target_feature(enable = $feat)]
        fn mul_twiddle<const LOOSE: bool, const Q1: bool>(x: V, w: V, ws: V, q: V) -> V {
            if LOOSE {
                mul_shoup_loose::<Q1>(x, w, ws, q)
            } else {
                mul_shoup_lazy::<Q1>(x, w, ws, q)
            }
        }

        /// The bound of [`mul_twiddle`]'s products, in multiples of q.
        const fn twiddle_bound(loose: bool) -> u64 {
            if loose { 4 } else { 2 }
        }

        /// Forward butterflies on consecutive groups of `2·gap` values of `a`
        /// (gap ≥ LANES); group j uses twiddle `tw_base + j`. X is first
        /// reduced by `red[0]`, then `red[1]`, … (the first R of them).
        #[target_feature(enable = $feat)]
        fn fwd_stage<const R: usize, const LOOSE: bool, const Q1: bool>(
            t: &NttTable,
            a: &mut [u64],
            tw_base: usize,
            gap: usize,
            red: [u64; 3],
        ) {
            let tw = t.fwd_twiddles();
            let q = t.modulus().value();
            let (vq, vmq) = (splat(q), splat(twiddle_bound(LOOSE) * q));
            let red = [splat(red[0]), splat(red[1]), splat(red[2])];
            for (j, grp) in a.chunks_exact_mut(2 * gap).enumerate() {
                let (w, ws) = (splat(tw.w[tw_base + j]), splat(tw.ws[tw_base + j]));
                let (lo, hi) = grp.split_at_mut(gap);
                for (x, y) in lo.chunks_exact_mut(LANES).zip(hi.chunks_exact_mut(LANES)) {
                    let mut u = load(x);
                    for r in &red[..R] {
                        u = csub(u, *r);
                    }
                    let v = mul_twiddle::<LOOSE, Q1>(load(y), w, ws, vq);
                    store(x, add(u, v));
                    store(y, sub(add(u, vmq), v));
                }
            }
        }

        /// Two forward stages in one pass, gaps `gap` then `gap/2` (both
        /// ≥ LANES): each group of `2·gap` values is loaded once for both,
        /// halving the stages' loads and stores. The first stage's group j
        /// uses twiddle `tw_base + j`, the second's halves of it
        /// `2·(tw_base + j)` and `2·(tw_base + j) + 1`, as two calls of
        /// [`fwd_stage`] would; the reductions are the two stages' own.
        #[target_feature(enable = $feat)]
        fn fwd_stage_pair<const R1: usize, const R2: usize, const LOOSE: bool, const Q1: bool>(
            t: &NttTable,
            a: &mut [u64],
            tw_base: usize,
            gap: usize,
            red: [u64; 2],
        ) {
            let tw = t.fwd_twiddles();
            let q = t.modulus().value();
            let (vq, vmq) = (splat(q), splat(twiddle_bound(LOOSE) * q));
            let (red1, red2) = (splat(red[0]), splat(red[1]));
            for (j, grp) in a.chunks_exact_mut(2 * gap).enumerate() {
                let k = tw_base + j;
                let (w, ws) = (splat(tw.w[k]), splat(tw.ws[k]));
                let (w0, ws0) = (splat(tw.w[2 * k]), splat(tw.ws[2 * k]));
                let (w1, ws1) = (splat(tw.w[2 * k + 1]), splat(tw.ws[2 * k + 1]));
                for [p0, p1, p2, p3] in super::simd::quarters(grp, LANES) {
                    let (mut u0, mut u1) = (load(p0), load(p1));
                    if R1 == 1 {
                        (u0, u1) = (csub(u0, red1), csub(u1, red1));
                    }
                    let v2 = mul_twiddle::<LOOSE, Q1>(load(p2), w, ws, vq);
                    let v3 = mul_twiddle::<LOOSE, Q1>(load(p3), w, ws, vq);
                    let (mut y0, y1) = (add(u0, v2), add(u1, v3));
                    let (mut y2, y3) = (sub(add(u0, vmq), v2), sub(add(u1, vmq), v3));
                    if R2 == 1 {
                        (y0, y2) = (csub(y0, red2), csub(y2, red2));
                    }
                    let v1 = mul_twiddle::<LOOSE, Q1>(y1, w0, ws0, vq);
                    let v3 = mul_twiddle::<LOOSE, Q1>(y3, w1, ws1, vq);
                    store(p0, add(y0, v1));
                    store(p1, sub(add(y0, vmq), v1));
                    store(p2, add(y2, v3));
                    store(p3, sub(add(y2, vmq), v3));
                }
            }
        }

        /// Plans the reductions of the large forward stages: values stay
        /// below `cap·q`; each stage adds at most m·q (m the twiddle
        /// product's bound), so X is reduced by cap/2·q only when skipping
        /// would pass the cap. The last large stage brings X below m·q so
        /// the small stages start below 2m·q.
        #[derive(Clone, Copy)]
        struct FwdPlan<const LOOSE: bool, const Q1: bool> {
            q: u64,
            cap: u64,
            bound: u64,
        }

        impl<const LOOSE: bool, const Q1: bool> FwdPlan<LOOSE, Q1> {
            fn new(q: u64) -> Self {
                // 16q < 2^64 below 2^60; from there to 2^61 the loose
                // products' 4q bound leaves a stage only 8q, so it reduces
                // X at every stage (one comparison) where the exact product
                // reduced it every other one.
                let cap = if LOOSE && q < (1 << 60) {
                    16
                } else if q < (1 << 61) {
                    LAZY_CAP
                } else {
                    4
                };
                Self { q, cap, bound: 1 }
            }

            #[target_feature(enable = $feat)]
            fn stage(&mut self, t: &NttTable, a: &mut [u64], tw_base: usize, gap: usize) {
                let (q, m) = (self.q, twiddle_bound(LOOSE));
                if gap == LANES {
                    // Below m·q from below bound·q ≤ cap·q, halving.
                    let (mut red, mut r, mut c) = ([0; 3], 0, self.cap / 2);
                    while c >= m {
                        if self.bound > c {
                            red[r] = c * q;
                            r += 1;
                            self.bound = c;
                        }
                        c /= 2;
                    }
                    match r {
                        0 => fwd_stage::<0, LOOSE, Q1>(t, a, tw_base, gap, red),
                        1 => fwd_stage::<1, LOOSE, Q1>(t, a, tw_base, gap, red),
                        2 => fwd_stage::<2, LOOSE, Q1>(t, a, tw_base, gap, red),
                        _ => fwd_stage::<3, LOOSE, Q1>(t, a, tw_base, gap, red),
                    }
                    self.bound = 2 * m;
                } else if self.reduces() {
                    fwd_stage::<1, LOOSE, Q1>(t, a, tw_base, gap, [self.cap / 2 * q, 0, 0]);
                } else {
                    fwd_stage::<0, LOOSE, Q1>(t, a, tw_base, gap, [0; 3]);
                }
            }

            /// Whether a stage with gap > LANES reduces X by cap/2·q first
            /// (only when skipping would pass the cap), and its new bound.
            fn reduces(&mut self) -> bool {
                let m = twiddle_bound(LOOSE);
                let reduce = self.bound + m > self.cap;
                self.bound = if reduce { self.cap / 2 } else { self.bound } + m;
                reduce
            }

            /// [`Self::stage`] at `gap` and then at `gap/2`, in one pass
            /// ([`fwd_stage_pair`]); both gaps above LANES.
            #[target_feature(enable = $feat)]
            fn stage_pair(&mut self, t: &NttTable, a: &mut [u64], tw_base: usize, gap: usize) {
                let red = [self.cap / 2 * self.q; 2];
                match (self.reduces(), self.reduces()) {
                    (false, false) => fwd_stage_pair::<0, 0, LOOSE, Q1>(t, a, tw_base, gap, red),
                    (false, true) => fwd_stage_pair::<0, 1, LOOSE, Q1>(t, a, tw_base, gap, red),
                    (true, false) => fwd_stage_pair::<1, 0, LOOSE, Q1>(t, a, tw_base, gap, red),
                    (true, true) => fwd_stage_pair::<1, 1, LOOSE, Q1>(t, a, tw_base, gap, red),
                }
            }
        }

        /// Forward stage with gap < LANES on `a`, whose first butterfly is
        /// butterfly `first` of the stage: values below 2m·q in and out;
        /// the last stage reduces to [0, q).
        #[target_feature(enable = $feat)]
        fn fwd_small_stage<const LOOSE: bool, const Q1: bool>(
            t: &NttTable,
            a: &mut [u64],
            first: usize,
            gap: usize,
        ) {
            let q = t.modulus().value();
            let m = twiddle_bound(LOOSE);
            let (vq, vmq) = (splat(q), splat(m * q));
            let (gw, gws) = t.gap_twiddles(gap, false);
            let (gw, gws) = (&gw[first / gap..], &gws[first / gap..]);
            for (b, blk) in a.chunks_exact_mut(2 * LANES).enumerate() {
                let (lo, hi) = blk.split_at_mut(LANES);
                let (x, y) = split(load(lo), load(hi), gap);
                let i = b * LANES / gap;
                let (w, ws) = (load_repeated(&gw[i..], gap), load_repeated(&gws[i..], gap));
                let u = csub(x, vmq);
                let v = mul_twiddle::<LOOSE, Q1>(y, w, ws, vq);
                let (mut x, mut y) = (add(u, v), sub(add(u, vmq), v));
                if gap == 1 {
                    let mut c = m;
                    while c >= 1 {
                        let vc = splat(c * q);
                        (x, y) = (csub(x, vc), csub(y, vc));
                        c /= 2;
                    }
                }
                let (o0, o1) = join(x, y, gap);
                store(lo, o0);
                store(hi, o1);
            }
        }

        /// Forward NTT; same contract as [`NttTable::forward_scalar`].
        #[target_feature(enable = $feat)]
        pub(crate) fn forward(t: &NttTable, a: &mut [u64]) {
            let q = t.modulus().value();
            super::simd::with_product!(q, q < LOOSE_MAX_MODULUS, forward_with(t, a))
        }

        #[target_feature(enable = $feat)]
        fn forward_with<const LOOSE: bool, const Q1: bool>(t: &NttTable, a: &mut [u64]) {
            let n = t.degree();
            assert_eq!(a.len(), n, "NTT input length");
            let mut plan = FwdPlan::<LOOSE, Q1>::new(t.modulus().value());
            let (mut gap, mut groups) = (n / 2, 1);
            while 2 * gap > BLOCK {
                if PAIRED_STAGES && gap > BLOCK {
                    plan.stage_pair(t, a, groups, gap);
                    (groups, gap) = (4 * groups, gap / 4);
                } else {
                    plan.stage(t, a, groups, gap);
                    (groups, gap) = (2 * groups, gap / 2);
                }
            }
            let block = n.min(BLOCK);
            for (b, blk) in a.chunks_exact_mut(block).enumerate() {
                let (mut gap, mut groups, mut plan) = (gap, groups, plan);
                while gap >= LANES {
                    let tw_base = groups + b * block / (2 * gap);
                    if PAIRED_STAGES && gap / 2 > LANES {
                        plan.stage_pair(t, blk, tw_base, gap);
                        (groups, gap) = (4 * groups, gap / 4);
                    } else {
                        plan.stage(t, blk, tw_base, gap);
                        (groups, gap) = (2 * groups, gap / 2);
                    }
                }
                while gap >= 1 {
                    fwd_small_stage::<LOOSE, Q1>(t, blk, b * block / 2, gap);
                    gap /= 2;
                }
            }
        }

        /// Inverse butterflies on consecutive groups of `2·gap` values
        /// (gap ≥ LANES); group j uses twiddle `tw_base + j`. Values stay
        /// below m·q.
        #[target_feature(enable = $feat)]
        fn inv_stage<const LOOSE: bool, const Q1: bool>(
            t: &NttTable,
            a: &mut [u64],
            tw_base: usize,
            gap: usize,
        ) {
            let tw = t.inv_twiddles();
            let q = t.modulus().value();
            let (vq, vmq) = (splat(q), splat(twiddle_bound(LOOSE) * q));
            for (j, grp) in a.chunks_exact_mut(2 * gap).enumerate() {
                let (w, ws) = (splat(tw.w[tw_base + j]), splat(tw.ws[tw_base + j]));
                let (lo, hi) = grp.split_at_mut(gap);
                for (x, y) in lo.chunks_exact_mut(LANES).zip(hi.chunks_exact_mut(LANES)) {
                    let (u, v) = (load(x), load(y));
                    store(x, csub(add(u, v), vmq));
                    store(y, mul_twiddle::<LOOSE, Q1>(sub(add(u, vmq), v), w, ws, vq));
                }
            }
        }

        /// Two inverse stages in one pass, gaps `gap` then `2·gap` (see
        /// [`fwd_stage_pair`]): in each group of `4·gap` values the first
        /// stage's halves use twiddles `tw_base + 2j` and `tw_base + 2j + 1`,
        /// the second stage twiddle `tw_base/2 + j`, as two calls of
        /// [`inv_stage`] would.
        #[target_feature(enable = $feat)]
        fn inv_stage_pair<const LOOSE: bool, const Q1: bool>(
            t: &NttTable,
            a: &mut [u64],
            tw_base: usize,
            gap: usize,
        ) {
            let tw = t.inv_twiddles();
            let q = t.modulus().value();
            let (vq, vmq) = (splat(q), splat(twiddle_bound(LOOSE) * q));
            for (j, grp) in a.chunks_exact_mut(4 * gap).enumerate() {
                let k = tw_base + 2 * j;
                let (w0, ws0) = (splat(tw.w[k]), splat(tw.ws[k]));
                let (w1, ws1) = (splat(tw.w[k + 1]), splat(tw.ws[k + 1]));
                let (w, ws) = (splat(tw.w[k / 2]), splat(tw.ws[k / 2]));
                for [p0, p1, p2, p3] in super::simd::quarters(grp, LANES) {
                    let (u0, u1, u2, u3) = (load(p0), load(p1), load(p2), load(p3));
                    let y0 = csub(add(u0, u1), vmq);
                    let y1 = mul_twiddle::<LOOSE, Q1>(sub(add(u0, vmq), u1), w0, ws0, vq);
                    let y2 = csub(add(u2, u3), vmq);
                    let y3 = mul_twiddle::<LOOSE, Q1>(sub(add(u2, vmq), u3), w1, ws1, vq);
                    store(p0, csub(add(y0, y2), vmq));
                    store(
                        p2,
                        mul_twiddle::<LOOSE, Q1>(sub(add(y0, vmq), y2), w, ws, vq),
                    );
                    store(p1, csub(add(y1, y3), vmq));
                    store(
                        p3,
                        mul_twiddle::<LOOSE, Q1>(sub(add(y1, vmq), y3), w, ws, vq),
                    );
                }
            }
        }

        /// Inverse stage with gap < LANES (see [`fwd_small_stage`]); values
        /// stay below m·q.
        #[target_feature(enable = $feat)]
        fn inv_small_stage<const LOOSE: bool, const Q1: bool>(
            t: &NttTable,
            a: &mut [u64],
            first: usize,
            gap: usize,
        ) {
            let q = t.modulus().value();
            let (vq, vmq) = (splat(q), splat(twiddle_bound(LOOSE) * q));
            let (gw, gws) = t.gap_twiddles(gap, true);
            let (gw, gws) = (&gw[first / gap..], &gws[first / gap..]);
            for (b, blk) in a.chunks_exact_mut(2 * LANES).enumerate() {
                let (lo, hi) = blk.split_at_mut(LANES);
                let (u, v) = split(load(lo), load(hi), gap);
                let i = b * LANES / gap;
                let (w, ws) = (load_repeated(&gw[i..], gap), load_repeated(&gws[i..], gap));
                let x = csub(add(u, v), vmq);
                let y = mul_twiddle::<LOOSE, Q1>(sub(add(u, vmq), v), w, ws, vq);
                let (o0, o1) = join(x, y, gap);
                store(lo, o0);
                store(hi, o1);
            }
        }

        /// Inverse NTT; same contract as [`NttTable::inverse_scalar`].
        #[target_feature(enable = $feat)]
        pub(crate) fn inverse(t: &NttTable, a: &mut [u64]) {
            let q = t.modulus().value();
            super::simd::with_product!(q, q < LOOSE_MAX_MODULUS, inverse_with(t, a, None))
        }

        /// [`inverse`] times a constant c < q, merged into the last stage's
        /// products by n⁻¹.
        #[target_feature(enable = $feat)]
        pub(crate) fn inverse_scaled(t: &NttTable, a: &mut [u64], c: u64) {
            let q = t.modulus().value();
            super::simd::with_product!(q, q < LOOSE_MAX_MODULUS, inverse_with(t, a, Some(c)))
        }

        /// The last stage's products are exact (below 2q), so one
        /// subtraction of q ends them.
        #[target_feature(enable = $feat)]
        fn inverse_with<const LOOSE: bool, const Q1: bool>(
            t: &NttTable,
            a: &mut [u64],
            c: Option<u64>,
        ) {
            let n = t.degree();
            assert_eq!(a.len(), n, "NTT input length");
            let block = n.min(BLOCK);
            // Depth-first inside each block, stopping before the last stage.
            let mut gap = 1;
            for (b, blk) in a.chunks_exact_mut(block).enumerate() {
                gap = 1;
                while gap < LANES {
                    inv_small_stage::<LOOSE, Q1>(t, blk, b * block / 2, gap);
                    gap *= 2;
                }
                while 2 * gap <= block && gap < n / 2 {
                    let tw_base = n / (2 * gap) + b * block / (2 * gap);
                    if PAIRED_STAGES && 4 * gap <= block && 2 * gap < n / 2 {
                        inv_stage_pair::<LOOSE, Q1>(t, blk, tw_base, gap);
                        gap *= 4;
                    } else {
                        inv_stage::<LOOSE, Q1>(t, blk, tw_base, gap);
                        gap *= 2;
                    }
                }
            }
            while gap < n / 2 {
                if PAIRED_STAGES && 2 * gap < n / 2 {
                    inv_stage_pair::<LOOSE, Q1>(t, a, n / (2 * gap), gap);
                    gap *= 4;
                } else {
                    inv_stage::<LOOSE, Q1>(t, a, n / (2 * gap), gap);
                    gap *= 2;
                }
            }
            let tw = t.inv_twiddles();
            let q = t.modulus().value();
            let (vq, vmq) = (splat(q), splat(twiddle_bound(LOOSE) * q));
            let ((ni, nis), (w, ws)) = match c {
                None => (t.n_inv(), (tw.w[1], tw.ws[1])),
                Some(c) => {
                    let m = t.modulus();
                    let (ni, w) = (m.mul(t.n_inv().0, c), m.mul(tw.w[1], c));
                    ((ni, m.shoup(ni)), (w, m.shoup(w)))
                }
            };
            let (ni, nis, w, ws) = (splat(ni), splat(nis), splat(w), splat(ws));
            let (lo, hi) = a.split_at_mut(n / 2);
            for (x, y) in lo.chunks_exact_mut(LANES).zip(hi.chunks_exact_mut(LANES)) {
                let (u, v) = (load(x), load(y));
                store(x, csub(mul_shoup_lazy::<Q1>(add(u, v), ni, nis, vq), vq));
                store(
                    y,
                    csub(mul_shoup_lazy::<Q1>(sub(add(u, vmq), v), w, ws, vq), vq),
                );
            }
        }
    };
}

pub(crate) use simd_ntt_kernels;

/// The kernels of the backends without IFMA, whose 64-bit products are
/// built from 32 × 32-bit ones (`swap32`, `mul32`, `low32`, `high32`):
/// the high half of a product, the loose quotient estimate, the linear
/// combinations and the exact sums of products.
macro_rules! simd_linear_kernels {
    ($feat:literal) => {
        /// High 64 bits of a·b. The high halves are fetched by swapping
        /// 32-bit lanes, not by shifting: with shifts LLVM recognises a
        /// 64-bit multiply and scalarises it.
        #[inline]
        #[target_feature(enable = $feat)]
        fn mul_hi(a: V, b: V) -> V {
            let (ah, bh) = (swap32(a), swap32(b));
            let (ll, lh, hl, hh) = (mul32(a, b), mul32(a, bh), mul32(ah, b), mul32(ah, bh));
            // Carry chain: lh + (ll >> 32) cannot overflow, nor can hl + its
            // low half.
            let t = add(lh, high32(ll));
            let t2 = add(hl, low32(t));
            add(add(hh, high32(t)), high32(t2))
        }

        /// ⌊x·ws/2^64⌋ or up to 2 less, from three 32 × 32-bit products
        /// instead of four: the low product and the carries of the middle
        /// ones are left out. With Shoup's ws = ⌊w·2^64/q⌋ the remainder
        /// x·w − quotient·q is then below 4q for any 64-bit x (the exact
        /// quotient leaves it below 2q).
        #[inline]
        #[target_feature(enable = $feat)]
        fn loose_quotient(x: V, ws: V) -> V {
            let (xh, wsh) = (swap32(x), swap32(ws));
            add(
                mul32(xh, wsh),
                add(high32(mul32(x, wsh)), high32(mul32(xh, ws))),
            )
        }

        /// `out = keep·out + Σ_k srcs[k]·w[k] mod q` on whole vectors of
        /// `out` (the caller finishes the tail): one lazy Shoup product per
        /// term, the running sum kept below m·q (m the product's bound: the
        /// loose product, m = 4, for q < 2^61, where 8q fits a lane).
        /// Source entries may be any 64-bit values; `out` entries must be
        /// below q.
        #[target_feature(enable = $feat)]
        pub(crate) fn linear_combination(
            m: &crate::Modulus,
            out: &mut [u64],
            keep: Option<u64>,
            srcs: &[&[u64]],
            w: &[u64],
        ) {
            let q = m.value();
            super::simd::with_product!(
                q,
                q < LOOSE_MAX_MODULUS,
                linear_combination_with(m, out, keep, srcs, w)
            )
        }

        #[target_feature(enable = $feat)]
        fn linear_combination_with<const LOOSE: bool, const Q1: bool>(
            m: &crate::Modulus,
            out: &mut [u64],
            keep: Option<u64>,
            srcs: &[&[u64]],
            w: &[u64],
        ) {
            debug_assert!(!LOOSE || m.value() < LOOSE_MAX_MODULUS);
            let q = m.value();
            let bound = twiddle_bound(LOOSE);
            let (vq, vmq) = (splat(q), splat(bound * q));
            let consts: Vec<(V, V)> = w.iter().map(|&x| (splat(x), splat(m.shoup(x)))).collect();
            let keep = keep.map(|k| (splat(k), splat(m.shoup(k))));
            let whole = out.len() / LANES * LANES;
            for c in (0..whole).step_by(LANES) {
                let mut acc = match keep {
                    Some((k, ks)) => mul_twiddle::<LOOSE, Q1>(load(&out[c..]), k, ks, vq),
                    None => splat(0),
                };
                for (s, &(wk, wks)) in srcs.iter().zip(&consts) {
                    super::simd::prefetch(s, c + super::simd::AHEAD);
                    let term = mul_twiddle::<LOOSE, Q1>(load(&s[c..]), wk, wks, vq);
                    acc = csub(add(acc, term), vmq);
                }
                if LOOSE {
                    acc = csub(acc, splat(2 * q));
                }
                store(&mut out[c..], csub(acc, vq));
            }
        }

        /// [`linear_combination`] without `keep` into up to
        /// [`WIDE_GROUP`] outputs in one pass over the sources, for moduli
        /// of one kind (all below 2^61 or none, all ≡ 1 mod 2^32 or
        /// none), sources and weights below 2^62: the products exact, as
        /// in [`dot_product_pair_wide`], folded every 15 terms. The
        /// outputs are whole vectors of one length. Where the Shoup
        /// product of [`linear_combination`] takes 9 32-bit products a
        /// term, this takes 4, and each source is loaded once for the
        /// group.
        #[target_feature(enable = $feat)]
        pub(crate) fn linear_combination_wide_group(
            ms: &[&crate::Modulus],
            outs: &mut [&mut [u64]],
            srcs: &[&[u64]],
            ws: &[&[u64]],
        ) {
            let q = ms[0].value();
            let loose = q < LOOSE_MAX_MODULUS;
            debug_assert!(ms.iter().all(|m| {
                let v = m.value();
                (v < LOOSE_MAX_MODULUS) == loose && (v & 0xffff_ffff == 1) == (q & 0xffff_ffff == 1)
            }));
            assert!(ms.len() == outs.len() && ms.len() == ws.len());
            match ms.len() {
                1 => super::simd::with_product!(
                    q,
                    loose,
                    linear_combination_wide_with::<1>(ms, outs, srcs, ws)
                ),
                2 => super::simd::with_product!(
                    q,
                    loose,
                    linear_combination_wide_with::<2>(ms, outs, srcs, ws)
                ),
                3 => super::simd::with_product!(
                    q,
                    loose,
                    linear_combination_wide_with::<3>(ms, outs, srcs, ws)
                ),
                n => panic!("{n} outputs in a group of at most {WIDE_GROUP}"),
            }
        }

        #[target_feature(enable = $feat)]
        fn linear_combination_wide_with<const G: usize, const LOOSE: bool, const Q1: bool>(
            ms: &[&crate::Modulus],
            outs: &mut [&mut [u64]],
            srcs: &[&[u64]],
            ws: &[&[u64]],
        ) {
            const RUN: usize = 15;
            let n = outs[0].len();
            assert!(n % LANES == 0 && outs.iter().all(|o| o.len() == n));
            assert!(srcs.iter().all(|s| s.len() >= n) && ws.iter().all(|w| w.len() == srcs.len()));
            debug_assert!(ws.iter().all(|w| w.iter().all(|&x| x >> 62 == 0)));
            debug_assert!(srcs.iter().all(|s| s[..n].iter().all(|&x| x >> 62 == 0)));
            let folds: [WideFold; G] = std::array::from_fn(|g| WideFold::new(ms[g]));
            // Each weight with its swapped halves, by source then output.
            let weights: Vec<[(V, V); G]> = (0..srcs.len())
                .map(|j| {
                    std::array::from_fn(|g| {
                        let y = splat(ws[g][j]);
                        (y, swap32(y))
                    })
                })
                .collect();
            for c in (0..n).step_by(LANES) {
                let mut r = [splat(0); G];
                for j0 in (0..srcs.len()).step_by(RUN) {
                    let mut sums: [WideSum; G] = std::array::from_fn(|g| WideSum::from(r[g]));
                    for j in j0..srcs.len().min(j0 + RUN) {
                        super::simd::prefetch(srcs[j], c + super::simd::AHEAD);
                        let x = load(&srcs[j][c..]);
                        let xh = swap32(x);
                        for (sum, &(y, yh)) in sums.iter_mut().zip(&weights[j]) {
                            sum.add_product_halves(x, xh, y, yh);
                        }
                    }
                    for (g, sum) in sums.into_iter().enumerate() {
                        r[g] = sum.fold::<LOOSE, Q1>(&folds[g]);
                    }
                }
                for (out, &v) in outs.iter_mut().zip(&r) {
                    store(&mut out[c..], v);
                }
            }
        }

        /// `o0 = Σ_j s_j·b_j`, `o1 = Σ_j s_j·a_j` mod q on whole vectors
        /// (the caller finishes the tail), for any q < 2^62, entries below
        /// q: the primes the floating-point and IFMA kernels do not take.
        /// Each product is exact, from four 32 × 32-bit products, gathered
        /// in three sums of weight 1, 2^32 and 2^64 (see [`WideSum`]); every
        /// 15 terms they are folded to [0, q) and the next run starts
        /// from it.
        #[target_feature(enable = $feat)]
        pub(crate) fn dot_product_pair_wide(
            m: &crate::Modulus,
            s: &[&[u64]],
            b: &[&[u64]],
            a: &[&[u64]],
            o0: &mut [u64],
            o1: &mut [u64],
        ) {
            let q = m.value();
            super::simd::with_product!(
                q,
                q < LOOSE_MAX_MODULUS,
                dot_product_pair_wide_with(m, s, b, a, o0, o1)
            )
        }

        #[target_feature(enable = $feat)]
        fn dot_product_pair_wide_with<const LOOSE: bool, const Q1: bool>(
            m: &crate::Modulus,
            s: &[&[u64]],
            b: &[&[u64]],
            a: &[&[u64]],
            o0: &mut [u64],
            o1: &mut [u64],
        ) {
            debug_assert!(!LOOSE || m.value() < LOOSE_MAX_MODULUS);
            const RUN: usize = 15;
            let fold = WideFold::new(m);
            let whole = o0.len() / LANES * LANES;
            for c in (0..whole).step_by(LANES) {
                let (mut r0, mut r1) = (splat(0), splat(0));
                for j0 in (0..s.len()).step_by(RUN) {
                    let (mut sum0, mut sum1) = (WideSum::from(r0), WideSum::from(r1));
                    for j in j0..s.len().min(j0 + RUN) {
                        super::simd::prefetch(b[j], c + super::simd::AHEAD);
                        super::simd::prefetch(a[j], c + super::simd::AHEAD);
                        let y = load(&s[j][c..]);
                        let yh = swap32(y);
                        sum0.add_product(load(&b[j][c..]), y, yh);
                        sum1.add_product(load(&a[j][c..]), y, yh);
                    }
                    r0 = sum0.fold::<LOOSE, Q1>(&fold);
                    r1 = sum1.fold::<LOOSE, Q1>(&fold);
                }
                store(&mut o0[c..], r0);
                store(&mut o1[c..], r1);
            }
        }

        /// `acc = acc + a·b mod q` on whole vectors (the caller finishes the
        /// tail), for any q < 2^62, entries below q: the product exact as in
        /// [`dot_product_pair_wide`], folded to [0, q) with the old value.
        #[target_feature(enable = $feat)]
        pub(crate) fn mul_add_pointwise_wide(
            m: &crate::Modulus,
            a: &[u64],
            b: &[u64],
            acc: &mut [u64],
        ) {
            let q = m.value();
            super::simd::with_product!(
                q,
                q < LOOSE_MAX_MODULUS,
                mul_add_pointwise_wide_with(m, a, b, acc)
            )
        }

        #[target_feature(enable = $feat)]
        fn mul_add_pointwise_wide_with<const LOOSE: bool, const Q1: bool>(
            m: &crate::Modulus,
            a: &[u64],
            b: &[u64],
            acc: &mut [u64],
        ) {
            debug_assert!(!LOOSE || m.value() < LOOSE_MAX_MODULUS);
            let fold = WideFold::new(m);
            let whole = acc.len() / LANES * LANES;
            for c in (0..whole).step_by(LANES) {
                let y = load(&b[c..]);
                let mut sum = WideSum::from(load(&acc[c..]));
                sum.add_product(load(&a[c..]), y, swap32(y));
                store(&mut acc[c..], sum.fold::<LOOSE, Q1>(&fold));
            }
        }

        /// A sum of products below 2^124 as t0 + t1·2^32 + t2·2^64, each
        /// part in a 64-bit lane: for up to 15 products of values below
        /// 2^62 after a start below 2^62, t0 < 2^63, t1 < 2^37 and
        /// t2 < 15·(2^31 + 2^60) < 2^64.
        #[derive(Clone, Copy)]
        struct WideSum {
            t0: V,
            t1: V,
            t2: V,
        }

        /// Constants of [`WideSum::fold`]: ⌊2^64/q⌋ (the Shoup companion
        /// of 1), 2^64 mod q with its companion, q, 2q and 4q.
        struct WideFold {
            one_s: V,
            w64: (V, V),
            q: V,
            q2: V,
            q4: V,
        }

        impl WideFold {
            #[inline]
            #[target_feature(enable = $feat)]
            fn new(m: &crate::Modulus) -> Self {
                let q = m.value();
                debug_assert!(q < 1 << 62);
                let weight = |c: u64| (splat(c), splat(m.shoup(c)));
                Self {
                    one_s: splat(m.shoup(1)),
                    w64: weight(((1u128 << 64) % u128::from(q)) as u64),
                    q: splat(q),
                    q2: splat(2 * q),
                    q4: splat(4 * q),
                }
            }
        }

        impl WideSum {
            #[inline]
            #[target_feature(enable = $feat)]
            fn from(start: V) -> Self {
                Self {
                    t0: start,
                    t1: splat(0),
                    t2: splat(0),
                }
            }

            /// Adds x·y, with `yh` = [`swap32`] of y (shared by the products
            /// of one y): xl·yl goes to t0 and t1 by halves, the cross terms
            /// xl·yh + xh·yl (< 2^63) to t1 and t2 by halves, xh·yh to t2.
            #[inline]
            #[target_feature(enable = $feat)]
            fn add_product(&mut self, x: V, y: V, yh: V) {
                self.add_product_halves(x, swap32(x), y, yh);
            }

            /// [`Self::add_product`] with `xh` = [`swap32`] of x given too.
            #[inline]
            #[target_feature(enable = $feat)]
            fn add_product_halves(&mut self, x: V, xh: V, y: V, yh: V) {
                let ll = mul32(x, y);
                let cross = add(mul32(x, yh), mul32(xh, y));
                self.t0 = add(self.t0, low32(ll));
                self.t1 = add(self.t1, add(high32(ll), low32(cross)));
                self.t2 = add(self.t2, add(high32(cross), mul32(xh, yh)));
            }

            /// The sum mod q, in [0, q). The middle part is split between
            /// the others without a carry: with u = t0/2^32 + t1 (below
            /// 2^38), the sum is lo + hi·2^64 for lo = t0 mod 2^32 +
            /// (u mod 2^32)·2^32 and hi = t2 + u/2^32 (below 2^64). lo is
            /// reduced by a Shoup product by 1 without its low product (the
            /// quotient alone), hi is multiplied by 2^64 mod q; each is
            /// below m·q (m = 4 for LOOSE, which needs q < 2^61, else 2),
            /// and conditional subtractions end the sum. 15 32-bit
            /// products where three full Shoup products of the parts took
            /// 27.
            #[inline]
            #[target_feature(enable = $feat)]
            fn fold<const LOOSE: bool, const Q1: bool>(self, f: &WideFold) -> V {
                let u = add(high32(self.t0), self.t1);
                let lo = add(low32(self.t0), shl32(u));
                let hi = add(self.t2, high32(u));
                let quotient = if LOOSE {
                    loose_quotient(lo, f.one_s)
                } else {
                    mul_hi(lo, f.one_s)
                };
                let lo = sub(lo, mul_lo_q::<Q1>(quotient, f.q));
                let (w, ws) = f.w64;
                let hi = mul_twiddle::<LOOSE, Q1>(hi, w, ws, f.q);
                let mut r = add(lo, hi);
                if LOOSE {
                    r = csub(r, f.q4);
                }
                csub(csub(r, f.q2), f.q)
            }
        }
    };
}

pub(crate) use simd_linear_kernels;

/// Checks a backend's `mul_shoup_loose`, given as the lanes of one
/// product of splatted (x, w, ws, q) with its `Q1` (taken for the primes
/// ≡ 1 mod 2^32 and never for the others): congruent to x·w and below 4q,
/// for q NTT primes of 50 to 61 bits (the NTTs and linear combinations
/// take it below 2^61) of both forms, w and x at their edges
/// (x anywhere in 64 bits: lazy values reach 16q) and random.
#[cfg(test)]
pub(super) fn check_loose_products(product: impl Fn(u64, u64, u64, u64, bool) -> Vec<u64>) {
    use crate::prime::{ntt_primes, ntt_primes_any_form};
    use rand_core::RngCore;
    let mut rng = crate::testing::rng();
    let n = 1 << 16;
    let primes = [50, 55, 60, 61].into_iter().flat_map(|bits| {
        [
            ntt_primes(bits, n, 1, &[]),
            ntt_primes_any_form(bits, n, 1, &[]),
        ]
    });
    for q in primes {
        let q = q.unwrap()[0];
        let m = crate::Modulus::new(q).unwrap();
        for w in [0, 1, 2, q / 2, q - 2, q - 1, rng.next_u64() % q] {
            let edges = [
                0,
                1,
                q - 1,
                q,
                4 * q - 1,
                8 * q - 1,
                16u64.saturating_mul(q) - 1,
                u64::MAX - 1,
                u64::MAX,
            ];
            let random: Vec<u64> = (0..64).map(|_| rng.next_u64()).collect();
            for &x in edges.iter().chain(&random) {
                let want = (u128::from(x) * u128::from(w) % u128::from(q)) as u64;
                let q1 = q % (1 << 32) == 1;
                let mut lanes = product(x, w, m.shoup(w), q, false);
                if q1 {
                    lanes.extend(product(x, w, m.shoup(w), q, true));
                }
                for got in lanes {
                    assert!(got < 4 * q, "q={q} w={w} x={x}: {got} not below 4q");
                    assert_eq!(got % q, want, "q={q} w={w} x={x}");
                }
            }
        }
    }
}
