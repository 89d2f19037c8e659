//! NTT loops shared by the SIMD backends. A backend module defines the vector
//! type `V`, `LANES`, and the primitives `load`, `store`, `splat`, `add`,
//! `sub`, `csub` (x ≥ b ? x − b : x), `mul_shoup_lazy`, `split` and `join`
//! (gather the X and Y operands of a stage with gap < LANES from two
//! consecutive vectors, and back), then invokes `simd_ntt_kernels!` with its
//! target features. The arithmetic is exactly the scalar reference's, so the
//! outputs are bit-identical.

macro_rules! simd_ntt_kernels {
    ($feat:literal) => {
        use crate::ntt::NttTable;

        /// Forward NTT; same contract as [`NttTable::forward_scalar`].
        #[target_feature(enable = $feat)]
        pub(crate) fn forward(t: &NttTable, a: &mut [u64]) {
            let n = t.degree();
            assert_eq!(a.len(), n, "NTT input length");
            let q = t.modulus().value();
            let (vq, v2q) = (splat(q), splat(2 * q));
            let tw = t.fwd_twiddles();
            let (mut gap, mut groups) = (n / 2, 1);
            while gap >= LANES {
                for i in 0..groups {
                    let (w, ws) = (splat(tw.w[groups + i]), splat(tw.ws[groups + i]));
                    let base = 2 * i * gap;
                    let (lo, hi) = a[base..base + 2 * gap].split_at_mut(gap);
                    for (x, y) in lo.chunks_exact_mut(LANES).zip(hi.chunks_exact_mut(LANES)) {
                        let u = csub(load(x), v2q);
                        let v = mul_shoup_lazy(load(y), w, ws, vq);
                        store(x, add(u, v));
                        store(y, sub(add(u, v2q), v));
                    }
                }
                groups *= 2;
                gap /= 2;
            }
            while gap >= 1 {
                let (gw, gws) = t.gap_twiddles(gap, false);
                let last = gap == 1;
                for (b, blk) in a.chunks_exact_mut(2 * LANES).enumerate() {
                    let (lo, hi) = blk.split_at_mut(LANES);
                    let (x, y) = split(load(lo), load(hi), gap);
                    let w = load(&gw[b * LANES..]);
                    let ws = load(&gws[b * LANES..]);
                    let u = csub(x, v2q);
                    let v = mul_shoup_lazy(y, w, ws, vq);
                    let (mut x, mut y) = (add(u, v), sub(add(u, v2q), v));
                    if last {
                        x = csub(csub(x, v2q), vq);
                        y = csub(csub(y, v2q), vq);
                    }
                    let (o0, o1) = join(x, y, gap);
                    store(lo, o0);
                    store(hi, o1);
                }
                gap /= 2;
            }
        }

        /// Inverse NTT; same contract as [`NttTable::inverse_scalar`].
        #[target_feature(enable = $feat)]
        pub(crate) fn inverse(t: &NttTable, a: &mut [u64]) {
            let n = t.degree();
            assert_eq!(a.len(), n, "NTT input length");
            let q = t.modulus().value();
            let (vq, v2q) = (splat(q), splat(2 * q));
            let tw = t.inv_twiddles();
            let mut gap = 1;
            while gap < LANES {
                let (gw, gws) = t.gap_twiddles(gap, true);
                for (b, blk) in a.chunks_exact_mut(2 * LANES).enumerate() {
                    let (lo, hi) = blk.split_at_mut(LANES);
                    let (u, v) = split(load(lo), load(hi), gap);
                    let w = load(&gw[b * LANES..]);
                    let ws = load(&gws[b * LANES..]);
                    let x = csub(add(u, v), v2q);
                    let y = mul_shoup_lazy(sub(add(u, v2q), v), w, ws, vq);
                    let (o0, o1) = join(x, y, gap);
                    store(lo, o0);
                    store(hi, o1);
                }
                gap *= 2;
            }
            let mut groups = n / (2 * gap);
            while groups > 1 {
                for i in 0..groups {
                    let (w, ws) = (splat(tw.w[groups + i]), splat(tw.ws[groups + i]));
                    let base = 2 * i * gap;
                    let (lo, hi) = a[base..base + 2 * gap].split_at_mut(gap);
                    for (x, y) in lo.chunks_exact_mut(LANES).zip(hi.chunks_exact_mut(LANES)) {
                        let (u, v) = (load(x), load(y));
                        store(x, csub(add(u, v), v2q));
                        store(y, mul_shoup_lazy(sub(add(u, v2q), v), w, ws, vq));
                    }
                }
                groups /= 2;
                gap *= 2;
            }
            let (ni, nis) = t.n_inv();
            let (ni, nis) = (splat(ni), splat(nis));
            let (w, ws) = (splat(tw.w[1]), splat(tw.ws[1]));
            let (lo, hi) = a.split_at_mut(n / 2);
            for (x, y) in lo.chunks_exact_mut(LANES).zip(hi.chunks_exact_mut(LANES)) {
                let (u, v) = (load(x), load(y));
                store(x, csub(mul_shoup_lazy(add(u, v), ni, nis, vq), vq));
                store(y, csub(mul_shoup_lazy(sub(add(u, v2q), v), w, ws, vq), vq));
            }
        }
    };
}

pub(crate) use simd_ntt_kernels;
