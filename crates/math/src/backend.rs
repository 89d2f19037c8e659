//! The hot kernels behind one small interface.
//!
//! Scheme code never calls a SIMD routine directly: it goes through a
//! [`Backend`]. [`Scalar`] is the portable reference; [`Simd`] uses AVX2 or
//! AVX-512 when the CPU has them (detected at run time). A future GPU backend
//! implements the same trait and must pass [`parity::check`], which compares
//! every kernel bit for bit with the scalar reference.
//!
//! The process-wide default is chosen once: the best the CPU supports, or
//! what the `HECLOUD_BACKEND` environment variable names (`scalar`, `avx2`,
//! `avx512`, `avx512ifma`; an unavailable choice falls back to the best
//! available).

use std::mem::MaybeUninit;
use std::sync::OnceLock;

use crate::modular::Modulus;
use crate::ntt::NttTable;

/// Kernels that dominate the cost of RNS arithmetic. Every method has the
/// scalar reference as its default so a backend accelerates what it can.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Short name for reports (`scalar`, `avx2`, `avx512`, …).
    fn name(&self) -> &'static str;

    /// Forward negacyclic NTT of one limb in place (entries in [0, q)).
    fn ntt_forward(&self, table: &NttTable, a: &mut [u64]) {
        table.forward_scalar(a);
    }

    /// Inverse negacyclic NTT of one limb in place.
    fn ntt_inverse(&self, table: &NttTable, a: &mut [u64]) {
        table.inverse_scalar(a);
    }

    /// `out = c · INTT(src)` mod q for a constant `c < q`: the inverse
    /// transform out of place with a constant factor, the first step of
    /// every base conversion out of the NTT domain (where the copy, the
    /// transform and the scaling took three passes over the limb).
    ///
    /// # Panics
    /// If `src` and `out` differ in length from the table's degree.
    fn ntt_inverse_scaled(&self, table: &NttTable, src: &[u64], out: &mut [u64], c: u64) {
        out.copy_from_slice(src);
        self.ntt_inverse(table, out);
        self.mul_scalar(table.modulus(), out, c);
    }

    /// `out[c] = round(Σ_k limbs[k][c]·inv[k])` to the nearest integer
    /// (ties to even) for entries of limb k below `2^bits[k]` and sums in
    /// [0, 2^51): the rounded quotient that centers a base conversion. Each
    /// entry becomes the nearest f64, each product and each partial sum
    /// (from the first limb on) is rounded to f64 once, so that every
    /// backend returns the same integers.
    ///
    /// # Panics
    /// If `limbs`, `inv` and `bits` differ in length or a limb is shorter
    /// than `out`.
    fn round_sums(&self, out: &mut [u64], limbs: &[&[u64]], inv: &[f64], bits: &[u32]) {
        check_round_sums(out.len(), limbs, inv, bits);
        round_sums_scalar(out, limbs, inv);
    }

    /// `a[i] = a[i]·b[i] mod q`.
    fn mul_pointwise(&self, q: &Modulus, a: &mut [u64], b: &[u64]) {
        for (x, y) in a.iter_mut().zip(b) {
            *x = q.mul(*x, *y);
        }
    }

    /// `out[i] = a[i]·b[i] mod q`: [`Self::mul_pointwise`] into a third
    /// buffer, without first copying `a` there (a pass over memory less:
    /// the tensor product of a ciphertext multiplication).
    fn mul_pointwise_into(&self, q: &Modulus, out: &mut [u64], a: &[u64], b: &[u64]) {
        for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
            *o = q.mul(*x, *y);
        }
    }

    /// `acc[i] = acc[i] + a[i]·b[i] mod q` (key-switching inner products).
    fn mul_add_pointwise(&self, q: &Modulus, a: &[u64], b: &[u64], acc: &mut [u64]) {
        for ((o, x), y) in acc.iter_mut().zip(a).zip(b) {
            *o = q.reduce_u128(*o as u128 + *x as u128 * *y as u128);
        }
    }

    /// `a[i] = a[i]·c mod q` for a constant `c < q`.
    fn mul_scalar(&self, q: &Modulus, a: &mut [u64], c: u64) {
        let cs = q.shoup(c);
        for x in a.iter_mut() {
            *x = q.mul_shoup(*x, c, cs);
        }
    }

    /// `out[i] = (keep·out[i] + Σ_k srcs[k][i]·w[k]) mod q` for constant
    /// weights `w[k] < q` and `keep < q` (`None`: the old contents of `out`
    /// are ignored). Entries of source k are below `2^src_bits[k]` (kernels
    /// take narrow sources whole and split only the wide ones), old entries
    /// of `out` below q. This is fast base conversion and the scaled
    /// additions around it.
    ///
    /// # Panics
    /// If `srcs`, `w` and `src_bits` differ in length or a source is
    /// shorter than `out`.
    fn linear_combination(
        &self,
        q: &Modulus,
        out: &mut [u64],
        keep: Option<u64>,
        srcs: &[&[u64]],
        w: &[u64],
        src_bits: &[u32],
    ) {
        check_sources(out.len(), srcs, w.len(), src_bits);
        // Terms that fit a u128 on top of a value below q (see the bound in
        // the parity tests): 2^headroom − 1 products of the widest source's
        // bits + q bits.
        let widest = src_bits.iter().copied().max().unwrap_or(0);
        let headroom = 128 - widest.min(64) - q.bits();
        let per = if headroom >= 16 {
            1 << 16
        } else {
            (1usize << headroom) - 1
        };
        for (i, o) in out.iter_mut().enumerate() {
            let mut acc = keep.map_or(0, |k| q.mul(*o, k) as u128);
            for (k, (s, &wk)) in srcs.iter().zip(w).enumerate() {
                if k > 0 && k % per == 0 {
                    acc = q.reduce_u128(acc) as u128;
                }
                acc += s[i] as u128 * wk as u128;
            }
            *o = q.reduce_u128(acc);
        }
    }

    /// [`Backend::linear_combination`] (without `keep`) for several outputs
    /// of the same sources: the conversion of one set of limbs to several
    /// primes. Backends read each source once for a group of outputs.
    ///
    /// # Panics
    /// As [`Backend::linear_combination`], for any output.
    fn linear_combinations(
        &self,
        outputs: &mut [Combination<'_>],
        srcs: &[&[u64]],
        src_bits: &[u32],
    ) {
        for o in outputs {
            self.linear_combination(o.q, o.out, None, srcs, o.w, src_bits);
        }
    }

    /// `o0[i] = Σ_j s[j][i]·b[j][i]` and `o1[i] = Σ_j s[j][i]·a[j][i]`
    /// (mod q), every entry below q: the inner product of key switching
    /// with both halves of a key.
    ///
    /// # Panics
    /// If the slices of `s`, `b`, `a` differ in number or are shorter than
    /// the outputs, or the outputs differ in length.
    fn dot_product_pair(
        &self,
        q: &Modulus,
        s: &[&[u64]],
        b: &[&[u64]],
        a: &[&[u64]],
        o0: &mut [u64],
        o1: &mut [u64],
    ) {
        check_pair(s, b, a, o0.len(), o1.len());
        // Products are below 2^124: 15 of them and a value below q fit a u128.
        const RUN: usize = 15;
        for (i, (r0, r1)) in o0.iter_mut().zip(o1.iter_mut()).enumerate() {
            let (mut acc0, mut acc1) = (0u128, 0u128);
            for (j, ((x, y0), y1)) in s.iter().zip(b).zip(a).enumerate() {
                if j > 0 && j % RUN == 0 {
                    acc0 = q.reduce_u128(acc0) as u128;
                    acc1 = q.reduce_u128(acc1) as u128;
                }
                acc0 += x[i] as u128 * y0[i] as u128;
                acc1 += x[i] as u128 * y1[i] as u128;
            }
            *r0 = q.reduce_u128(acc0);
            *r1 = q.reduce_u128(acc1);
        }
    }

    /// Packs `src` (each value below `2^bits`, `bits` in 1..=64) into `dst`,
    /// LSB first, one value after the other: the layout of a serialized
    /// limb (see [`crate::pack`]). `dst` is [`crate::pack::packed_len`]
    /// bytes; the padding bits of its last byte are zero.
    fn pack_bits(&self, src: &[u64], bits: u32, dst: &mut [u8]) {
        crate::pack::pack(src, bits, dst, |_, _| false);
    }

    /// Unpacks `dst.len()` values of `bits` bits from `src` (as
    /// [`Backend::pack_bits`] writes them). `dst` need not be initialised:
    /// every value is written whatever the outcome, so a decoder fills a
    /// fresh buffer without zeroing it first. Returns false if a value is
    /// not below `q` or a padding bit is set: every residue is checked as it
    /// is read, with no second pass.
    fn unpack_bits(&self, src: &[u8], bits: u32, q: u64, dst: &mut [MaybeUninit<u64>]) -> bool {
        crate::pack::unpack(src, bits, q, dst, |_, _| None)
    }

    /// The filter of rejection sampling: writes each little-endian 64-bit
    /// word of `src`, ANDed with `mask`, that is below `q` to the front of
    /// `dst`, in order; returns how many. Slots of `dst` past that count may
    /// be overwritten too. The accepted words are uniform below `q` when the
    /// words of `src` are uniform and `mask` covers `q`; the work does not
    /// depend on which are accepted.
    ///
    /// # Panics
    /// If `src` is not whole words or `dst` has room for fewer than
    /// `src.len() / 8` words.
    fn keep_below(&self, src: &[u8], mask: u64, q: u64, dst: &mut [MaybeUninit<u64>]) -> usize {
        crate::sampling::keep_below_scalar(src, mask, q, dst)
    }
}

/// One output of [`Backend::linear_combinations`]: `out = Σ_k srcs[k]·w[k]`
/// modulo `q`.
#[derive(Debug)]
pub struct Combination<'a> {
    /// The output's modulus.
    pub q: &'a Modulus,
    /// The output limb.
    pub out: &'a mut [u64],
    /// One weight (below q) per source.
    pub w: &'a [u64],
}

fn check_sources(len: usize, srcs: &[&[u64]], weights: usize, src_bits: &[u32]) {
    assert_eq!(srcs.len(), weights, "one weight per source");
    assert_eq!(srcs.len(), src_bits.len(), "one width per source");
    assert!(
        srcs.iter().all(|s| s.len() >= len),
        "source shorter than output"
    );
    // A width below a source's entries would give wrong sums silently.
    debug_assert!(
        srcs.iter()
            .zip(src_bits)
            .all(|(s, &b)| b >= 64 || s[..len].iter().all(|&x| x >> b == 0)),
        "a source has entries wider than its declared width"
    );
}

/// The shapes [`Backend::round_sums`] requires.
fn check_round_sums(len: usize, limbs: &[&[u64]], inv: &[f64], bits: &[u32]) {
    assert!(
        limbs.len() == inv.len() && limbs.len() == bits.len(),
        "one weight and one width per limb"
    );
    assert!(
        limbs.iter().all(|l| l.len() >= len),
        "limbs as long as the output"
    );
}

/// The reference [`Backend::round_sums`], limb by limb over the output
/// (the loops vectorize; coefficient by coefficient they did not).
fn round_sums_scalar(out: &mut [u64], limbs: &[&[u64]], inv: &[f64]) {
    // 2^52: the f64 whose last mantissa place is 1.
    const SHIFT: f64 = (1u64 << 52) as f64;
    let mut sums = vec![0f64; out.len()];
    for (l, &inv) in limbs.iter().zip(inv) {
        for (f, &x) in sums.iter_mut().zip(&l[..out.len()]) {
            *f += x as f64 * inv;
        }
    }
    // The sums lie in [0, 2^51): adding 2^52 rounds them to the nearest
    // integer in the mantissa's last place, in vector registers
    // (`f64::round` is a call per value).
    for (e, f) in out.iter_mut().zip(&sums) {
        *e = (f + SHIFT).to_bits() - SHIFT.to_bits();
    }
}

fn check_pair(s: &[&[u64]], b: &[&[u64]], a: &[&[u64]], n0: usize, n1: usize) {
    assert_eq!(n0, n1, "output lengths");
    assert!(s.len() == b.len() && s.len() == a.len(), "operand counts");
    let short = |v: &[&[u64]]| v.iter().any(|x| x.len() < n0);
    assert!(
        !(short(s) || short(b) || short(a)),
        "operand shorter than output"
    );
}

/// Whole SIMD vectors of an n-entry limb (8 lanes covers every backend).
#[cfg(target_arch = "x86_64")]
const fn whole_vectors(n: usize) -> usize {
    n / 8 * 8
}

/// Runs a grouped linear-combination kernel on a group of outputs of one
/// length: `kernel(moduli, whole vectors of the outputs, weights)`; the
/// tail past the whole 8-entry vectors is the scalar backend's.
#[cfg(target_arch = "x86_64")]
fn combine_group(
    group: &mut [&mut Combination<'_>],
    srcs: &[&[u64]],
    src_bits: &[u32],
    kernel: impl FnOnce(&[&Modulus], &mut [&mut [u64]], &[&[u64]]),
) {
    let n = group[0].out.len();
    for o in group.iter() {
        assert_eq!(o.out.len(), n, "output lengths");
        check_sources(n, srcs, o.w.len(), src_bits);
    }
    let whole = whole_vectors(n);
    let qs: Vec<&Modulus> = group.iter().map(|o| o.q).collect();
    let ws: Vec<&[u64]> = group.iter().map(|o| o.w).collect();
    let mut outs: Vec<&mut [u64]> = group.iter_mut().map(|o| &mut o.out[..whole]).collect();
    kernel(&qs, &mut outs, &ws);
    if whole < n {
        let tails: Vec<&[u64]> = srcs.iter().map(|s| &s[whole..]).collect();
        for o in group.iter_mut() {
            Scalar.linear_combination(o.q, &mut o.out[whole..], None, &tails, o.w, src_bits);
        }
    }
}

/// The portable reference backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scalar;

impl Backend for Scalar {
    fn name(&self) -> &'static str {
        "scalar"
    }
}

/// Instruction sets the SIMD backend can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimdLevel {
    /// 256-bit AVX2; with FMA (detected at run time), double-precision
    /// kernels for primes below 2^50 (larger primes use 64-bit integer
    /// kernels built from 32-bit multiplies).
    Avx2,
    /// 512-bit AVX-512 F + DQ; with FMA, the AVX2 level's double-precision
    /// kernels for primes below 2^50 (on a Xeon without IFMA they measured
    /// faster than the 64-bit integer kernels: an NTT of a 50-bit limb at
    /// N = 2^16 in 416 µs rather than 505 µs, and a pointwise product no
    /// longer in scalar code).
    Avx512,
    /// AVX-512 with IFMA: 52-bit multiply-adds for primes below 2^50
    /// (larger primes use the AVX-512 kernels).
    Avx512Ifma,
}

/// SIMD backend (x86_64 only). NTTs and base conversion are vectorised at
/// every level; rejection sampling at the AVX-512 levels, and residue
/// packing there too on CPUs that also have VBMI2; pointwise and inner
/// products with IFMA, and with AVX2 + FMA for primes below 2^50; the other
/// kernels are scalar.
#[derive(Debug, Clone, Copy)]
pub struct Simd {
    level: SimdLevel,
    /// AVX-512 BW, VBMI and VBMI2 alongside an AVX-512 level: the packing
    /// kernels' byte permutations and funnel shifts.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    vbmi: bool,
    /// FMA alongside the AVX2 or AVX-512 level: the double-precision
    /// kernels for primes below 2^50 (IFMA's take them where it has it).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fma: bool,
    /// AVX2 and FMA on this CPU at any level: the kernels with no IFMA
    /// counterpart (`round_sums`).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    avx2_fma: bool,
}

impl Simd {
    /// The backend for `level`, if this CPU supports it.
    pub fn new(level: SimdLevel) -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            let ok = match level {
                SimdLevel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
                SimdLevel::Avx512 => {
                    std::arch::is_x86_feature_detected!("avx512f")
                        && std::arch::is_x86_feature_detected!("avx512dq")
                }
                SimdLevel::Avx512Ifma => {
                    std::arch::is_x86_feature_detected!("avx512f")
                        && std::arch::is_x86_feature_detected!("avx512dq")
                        && std::arch::is_x86_feature_detected!("avx512ifma")
                }
            };
            let vbmi = level != SimdLevel::Avx2 && crate::pack::avx512::detected();
            let avx2_fma = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma");
            let fma = level != SimdLevel::Avx512Ifma && avx2_fma;
            ok.then_some(Self {
                level,
                vbmi,
                fma,
                avx2_fma,
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = level;
            None
        }
    }

    /// The instruction set in use.
    pub fn level(&self) -> SimdLevel {
        self.level
    }

    /// This backend without the AVX2 + FMA double-precision kernels: the
    /// level's 64-bit integer kernels (and scalar code) for every prime, as
    /// on a CPU without FMA. For comparisons and tests.
    pub fn without_fma(self) -> Self {
        Self {
            fma: false,
            avx2_fma: false,
            ..self
        }
    }

    /// Whether the AVX2 + FMA kernels take modulus `q`.
    #[cfg(target_arch = "x86_64")]
    fn fp(&self, q: u64) -> bool {
        self.fma && q < crate::ntt::avx2fma::MAX_MODULUS
    }
}

impl Backend for Simd {
    fn name(&self) -> &'static str {
        match self.level {
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
            SimdLevel::Avx512Ifma => "avx512ifma",
        }
    }

    fn ntt_forward(&self, table: &NttTable, a: &mut [u64]) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::new` checked that the CPU supports the level's features.
        unsafe {
            match self.level {
                // Never on the IFMA level: `fma` is unset there.
                _ if self.fp(table.modulus().value()) => crate::ntt::avx2fma::forward(table, a),
                SimdLevel::Avx2 => crate::ntt::avx2::forward(table, a),
                SimdLevel::Avx512 => crate::ntt::avx512::forward(table, a),
                SimdLevel::Avx512Ifma
                    if table.modulus().value() < crate::ntt::avx512ifma::MAX_MODULUS =>
                {
                    crate::ntt::avx512ifma::forward(table, a)
                }
                SimdLevel::Avx512Ifma => crate::ntt::avx512::forward(table, a),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        table.forward_scalar(a);
    }

    fn ntt_inverse(&self, table: &NttTable, a: &mut [u64]) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::new` checked that the CPU supports the level's features.
        unsafe {
            match self.level {
                // Never on the IFMA level: `fma` is unset there.
                _ if self.fp(table.modulus().value()) => crate::ntt::avx2fma::inverse(table, a),
                SimdLevel::Avx2 => crate::ntt::avx2::inverse(table, a),
                SimdLevel::Avx512 => crate::ntt::avx512::inverse(table, a),
                SimdLevel::Avx512Ifma
                    if table.modulus().value() < crate::ntt::avx512ifma::MAX_MODULUS =>
                {
                    crate::ntt::avx512ifma::inverse(table, a)
                }
                SimdLevel::Avx512Ifma => crate::ntt::avx512::inverse(table, a),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        table.inverse_scalar(a);
    }

    fn round_sums(&self, out: &mut [u64], limbs: &[&[u64]], inv: &[f64], bits: &[u32]) {
        check_round_sums(out.len(), limbs, inv, bits);
        let mut whole = 0;
        #[cfg(target_arch = "x86_64")]
        if self.avx2_fma {
            // SAFETY: `Simd::new` checked the CPU supports AVX2 and FMA.
            unsafe { crate::ntt::avx2fma::round_sums(out, limbs, inv, bits) };
            whole = out.len() / 4 * 4;
        }
        if whole < out.len() {
            let tails: Vec<&[u64]> = limbs.iter().map(|l| &l[whole..]).collect();
            round_sums_scalar(&mut out[whole..], &tails, inv);
        }
    }

    fn ntt_inverse_scaled(&self, table: &NttTable, src: &[u64], out: &mut [u64], c: u64) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::new` checked that the CPU supports the level's
        // features (and FMA where `fp` holds).
        unsafe {
            use crate::ntt::{avx2, avx2fma, avx512, avx512ifma};
            let q = table.modulus().value();
            if self.fp(q) {
                return avx2fma::inverse_scaled(table, src, out, c);
            }
            out.copy_from_slice(src);
            match self.level {
                SimdLevel::Avx2 => avx2::inverse_scaled(table, out, c),
                SimdLevel::Avx512Ifma if q < avx512ifma::MAX_MODULUS => {
                    avx512ifma::inverse_scaled(table, out, c)
                }
                SimdLevel::Avx512 | SimdLevel::Avx512Ifma => avx512::inverse_scaled(table, out, c),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            out.copy_from_slice(src);
            self.ntt_inverse(table, out);
            self.mul_scalar(table.modulus(), out, c);
        }
    }

    fn mul_pointwise(&self, q: &Modulus, a: &mut [u64], b: &[u64]) {
        #[cfg(target_arch = "x86_64")]
        if self.level == SimdLevel::Avx512Ifma && q.value() < crate::ntt::avx512ifma::MAX_MODULUS {
            // SAFETY: `Simd::new` checked the CPU supports AVX-512 IFMA.
            unsafe { crate::ntt::avx512ifma::mul_pointwise(q, a, b) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.fp(q.value()) {
            // SAFETY: `Simd::new` checked the CPU supports AVX2 and FMA.
            unsafe { crate::ntt::avx2fma::mul_pointwise(q, a, b) };
            return;
        }
        Scalar.mul_pointwise(q, a, b);
    }

    fn mul_pointwise_into(&self, q: &Modulus, out: &mut [u64], a: &[u64], b: &[u64]) {
        #[cfg(target_arch = "x86_64")]
        if self.level == SimdLevel::Avx512Ifma && q.value() < crate::ntt::avx512ifma::MAX_MODULUS {
            // SAFETY: `Simd::new` checked the CPU supports AVX-512 IFMA.
            unsafe { crate::ntt::avx512ifma::mul_pointwise_into(q, out, a, b) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.fp(q.value()) {
            // SAFETY: `Simd::new` checked the CPU supports AVX2 and FMA.
            unsafe { crate::ntt::avx2fma::mul_pointwise_into(q, out, a, b) };
            return;
        }
        Scalar.mul_pointwise_into(q, out, a, b);
    }

    fn mul_add_pointwise(&self, q: &Modulus, a: &[u64], b: &[u64], acc: &mut [u64]) {
        #[cfg(target_arch = "x86_64")]
        if self.level == SimdLevel::Avx512Ifma && q.value() < crate::ntt::avx512ifma::MAX_MODULUS {
            // SAFETY: `Simd::new` checked the CPU supports AVX-512 IFMA.
            unsafe { crate::ntt::avx512ifma::mul_add_pointwise(q, a, b, acc) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.fp(q.value()) {
            // SAFETY: `Simd::new` checked the CPU supports AVX2 and FMA.
            unsafe { crate::ntt::avx2fma::mul_add_pointwise(q, a, b, acc) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if q.value() < 1 << 62 {
            // As the other kernels: the common length.
            let len = acc.len().min(a.len()).min(b.len());
            let (a, b, acc) = (&a[..len], &b[..len], &mut acc[..len]);
            let whole = whole_vectors(len);
            // SAFETY: `Simd::new` checked the CPU supports the level's
            // features; q is below the kernel's bound.
            unsafe {
                match self.level {
                    SimdLevel::Avx2 => {
                        crate::ntt::avx2::mul_add_pointwise_wide(q, a, b, &mut acc[..whole])
                    }
                    _ => crate::ntt::avx512::mul_add_pointwise_wide(q, a, b, &mut acc[..whole]),
                }
            };
            Scalar.mul_add_pointwise(q, &a[whole..], &b[whole..], &mut acc[whole..]);
            return;
        }
        Scalar.mul_add_pointwise(q, a, b, acc);
    }

    fn mul_scalar(&self, q: &Modulus, a: &mut [u64], c: u64) {
        self.linear_combination(q, a, Some(c), &[], &[], &[]);
    }

    fn linear_combination(
        &self,
        q: &Modulus,
        out: &mut [u64],
        keep: Option<u64>,
        srcs: &[&[u64]],
        w: &[u64],
        src_bits: &[u32],
    ) {
        #[cfg(target_arch = "x86_64")]
        {
            use crate::ntt::{avx2, avx2fma, avx512, avx512ifma};
            check_sources(out.len(), srcs, w.len(), src_bits);
            let whole = whole_vectors(out.len());
            let ifma = q.value() < avx512ifma::MAX_MODULUS;
            let body = &mut out[..whole];
            // SAFETY: `Simd::new` checked that the CPU supports the level's
            // features (and FMA where `fp` holds); the IFMA and FMA kernels
            // get q below their bounds and a body of whole 8-entry vectors.
            unsafe {
                match self.level {
                    _ if self.fp(q.value()) => {
                        avx2fma::linear_combination(q, body, keep, srcs, w, src_bits)
                    }
                    SimdLevel::Avx2 => avx2::linear_combination(q, body, keep, srcs, w),
                    SimdLevel::Avx512Ifma if ifma => {
                        avx512ifma::linear_combination(q, body, keep, srcs, w, src_bits)
                    }
                    _ => avx512::linear_combination(q, body, keep, srcs, w),
                }
            }
            if whole < out.len() {
                let tails: Vec<&[u64]> = srcs.iter().map(|s| &s[whole..]).collect();
                Scalar.linear_combination(q, &mut out[whole..], keep, &tails, w, src_bits);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Scalar.linear_combination(q, out, keep, srcs, w, src_bits);
    }

    fn linear_combinations(
        &self,
        outputs: &mut [Combination<'_>],
        srcs: &[&[u64]],
        src_bits: &[u32],
    ) {
        #[allow(unused_mut)]
        let mut rest: Vec<&mut Combination<'_>> = outputs.iter_mut().collect();
        #[cfg(target_arch = "x86_64")]
        if self.level == SimdLevel::Avx512Ifma || self.fma {
            use crate::ntt::{avx2fma, avx512ifma};
            use avx512ifma::{GROUP, MAX_MODULUS};
            const _: () = assert!(GROUP == avx2fma::GROUP && MAX_MODULUS == avx2fma::MAX_MODULUS);
            let ifma = self.level == SimdLevel::Avx512Ifma;
            // Groups of outputs below 2^50 share one pass over the sources.
            let mut small;
            (small, rest) = rest.into_iter().partition(|o| o.q.value() < MAX_MODULUS);
            for group in small.chunks_mut(GROUP) {
                // SAFETY: `Simd::new` checked the CPU supports AVX-512 IFMA
                // (or, with `fma` set, AVX2 and FMA); every modulus is below
                // the kernel's bound.
                combine_group(group, srcs, src_bits, |qs, outs, ws| unsafe {
                    if ifma {
                        avx512ifma::linear_combination_group(qs, outs, srcs, ws, src_bits)
                    } else {
                        avx2fma::linear_combination_group(qs, outs, srcs, ws, src_bits)
                    }
                });
            }
        }
        #[cfg(target_arch = "x86_64")]
        if src_bits.iter().all(|&b| b <= 62) {
            // The other outputs in groups of one kind (the bound of the
            // loose product, the form ≡ 1 mod 2^32), with exact products.
            use crate::ntt::{avx2, avx512};
            const _: () = assert!(avx2::WIDE_GROUP == avx512::WIDE_GROUP);
            let kind = |q: &Modulus| (q.value() < 1 << 61, q.value() & 0xffff_ffff == 1);
            rest.sort_by_key(|o| kind(o.q));
            for same in rest.chunk_by_mut(|a, b| kind(a.q) == kind(b.q)) {
                for group in same.chunks_mut(avx2::WIDE_GROUP) {
                    // SAFETY: `Simd::new` checked the CPU supports the
                    // level's features; the moduli are of one kind, the
                    // sources below 2^62 and the weights below q < 2^62.
                    combine_group(group, srcs, src_bits, |qs, outs, ws| unsafe {
                        match self.level {
                            SimdLevel::Avx2 => {
                                avx2::linear_combination_wide_group(qs, outs, srcs, ws)
                            }
                            _ => avx512::linear_combination_wide_group(qs, outs, srcs, ws),
                        }
                    });
                }
            }
            return;
        }
        for o in rest {
            self.linear_combination(o.q, o.out, None, srcs, o.w, src_bits);
        }
    }

    fn dot_product_pair(
        &self,
        q: &Modulus,
        s: &[&[u64]],
        b: &[&[u64]],
        a: &[&[u64]],
        o0: &mut [u64],
        o1: &mut [u64],
    ) {
        #[cfg(target_arch = "x86_64")]
        let ifma =
            self.level == SimdLevel::Avx512Ifma && q.value() < crate::ntt::avx512ifma::MAX_MODULUS;
        #[cfg(target_arch = "x86_64")]
        if ifma || self.fp(q.value()) {
            check_pair(s, b, a, o0.len(), o1.len());
            let whole = whole_vectors(o0.len());
            let (w0, w1) = (&mut o0[..whole], &mut o1[..whole]);
            // SAFETY: `Simd::new` checked the CPU supports AVX-512 IFMA, or
            // AVX2 and FMA where `fp` holds; q is below the kernel's bound.
            unsafe {
                if ifma {
                    crate::ntt::avx512ifma::dot_product_pair(q, s, b, a, w0, w1)
                } else {
                    crate::ntt::avx2fma::dot_product_pair(q, s, b, a, w0, w1)
                }
            };
            if whole < o0.len() {
                fn tail<'a>(v: &[&'a [u64]], from: usize) -> Vec<&'a [u64]> {
                    v.iter().map(|x| &x[from..]).collect()
                }
                let (o0, o1) = (&mut o0[whole..], &mut o1[whole..]);
                Scalar.dot_product_pair(
                    q,
                    &tail(s, whole),
                    &tail(b, whole),
                    &tail(a, whole),
                    o0,
                    o1,
                );
            }
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if q.value() < 1 << 62 {
            check_pair(s, b, a, o0.len(), o1.len());
            let whole = whole_vectors(o0.len());
            let (w0, w1) = (&mut o0[..whole], &mut o1[..whole]);
            // SAFETY: `Simd::new` checked the CPU supports the level's
            // features; q is below the kernels' bound.
            unsafe {
                match self.level {
                    SimdLevel::Avx2 => crate::ntt::avx2::dot_product_pair_wide(q, s, b, a, w0, w1),
                    _ => crate::ntt::avx512::dot_product_pair_wide(q, s, b, a, w0, w1),
                }
            };
            if whole < o0.len() {
                fn tail<'a>(v: &[&'a [u64]], from: usize) -> Vec<&'a [u64]> {
                    v.iter().map(|x| &x[from..]).collect()
                }
                let (o0, o1) = (&mut o0[whole..], &mut o1[whole..]);
                let (s, b, a) = (tail(s, whole), tail(b, whole), tail(a, whole));
                Scalar.dot_product_pair(q, &s, &b, &a, o0, o1);
            }
            return;
        }
        Scalar.dot_product_pair(q, s, b, a, o0, o1);
    }

    fn pack_bits(&self, src: &[u64], bits: u32, dst: &mut [u8]) {
        crate::pack::pack(src, bits, dst, |src, dst| {
            #[cfg(target_arch = "x86_64")]
            if self.vbmi {
                // SAFETY: `Simd::new` checked the CPU has the kernel's features.
                return unsafe { crate::pack::avx512::pack_groups(src, bits, dst) };
            }
            let _ = (src, dst);
            false
        });
    }

    fn unpack_bits(&self, src: &[u8], bits: u32, q: u64, dst: &mut [MaybeUninit<u64>]) -> bool {
        crate::pack::unpack(src, bits, q, dst, |src, dst| {
            #[cfg(target_arch = "x86_64")]
            if self.vbmi {
                // SAFETY: `Simd::new` checked the CPU has the kernel's features.
                return unsafe { crate::pack::avx512::unpack_groups(src, bits, q, dst) };
            }
            let _ = (src, dst);
            None
        })
    }

    fn keep_below(&self, src: &[u8], mask: u64, q: u64, dst: &mut [MaybeUninit<u64>]) -> usize {
        #[cfg(target_arch = "x86_64")]
        if self.level != SimdLevel::Avx2 {
            // SAFETY: `Simd::new` checked the CPU supports AVX-512 F.
            return unsafe { crate::sampling::avx512::keep_below(src, mask, q, dst) };
        }
        Scalar.keep_below(src, mask, q, dst)
    }
}

/// Every backend this CPU can run, the scalar reference first.
pub fn available() -> Vec<Box<dyn Backend>> {
    let mut out: Vec<Box<dyn Backend>> = vec![Box::new(Scalar)];
    for level in [SimdLevel::Avx2, SimdLevel::Avx512, SimdLevel::Avx512Ifma] {
        if let Some(b) = Simd::new(level) {
            out.push(Box::new(b));
        }
    }
    out
}

/// The process-wide default backend (see the module docs).
pub fn default_backend() -> &'static dyn Backend {
    static DEFAULT: OnceLock<Box<dyn Backend>> = OnceLock::new();
    DEFAULT
        .get_or_init(|| {
            let wanted = std::env::var("HECLOUD_BACKEND").ok();
            let mut all = available();
            let pick = wanted
                .and_then(|w| all.iter().position(|b| b.name() == w))
                .unwrap_or(all.len() - 1);
            all.swap_remove(pick)
        })
        .as_ref()
}

pub mod parity {
    //! The parity suite: every kernel of a backend against [`Scalar`] on random
    //! inputs and edge values, bit for bit.

    use std::mem::MaybeUninit;

    use super::{Backend, Scalar};
    use crate::modular::Modulus;
    use crate::ntt::NttTable;
    use crate::prime::{ntt_primes, ntt_primes_any_form};
    use rand_chacha::ChaCha20Rng;
    use rand_core::RngCore;

    /// Compares `backend` with the scalar reference for degrees `2^4..=2^max_log_n`
    /// and 20-, 30-, 49-, 50-, 60- and 61-bit primes (the 50-bit one the
    /// largest NTT prime below 2^50), the pointwise and combination kernels
    /// on edge moduli and values, residue packing at every width and
    /// rejection sampling's filter; returns the first mismatch found.
    ///
    /// ```
    /// use hecloud_math::backend::{parity, Scalar};
    /// parity::check(&Scalar, 10).unwrap();
    /// ```
    pub fn check(backend: &dyn Backend, max_log_n: u32) -> Result<(), String> {
        let mut rng = crate::testing::rng();
        for log_n in crate::ntt::MIN_LOG_N..=max_log_n {
            let n = 1usize << log_n;
            // Above 50 bits both forms: ≡ 1 mod 2^32 (ntt_primes) or not.
            let any_form = [55, 60, 61].map(|bits| ntt_primes_any_form(bits, n, 1, &[]));
            let primes = [20, 30, 49, 50, 55, 60, 61]
                .map(|bits| ntt_primes(bits, n, 1, &[]))
                .into_iter()
                .chain(any_form);
            for q in primes {
                let q = q.map_err(|e| e.to_string())?[0];
                let table = NttTable::new(q, n).map_err(|e| e.to_string())?;
                let m = Modulus::new(q).map_err(|e| e.to_string())?;
                let inputs = [
                    (0..n).map(|_| rng.next_u64() % q).collect::<Vec<_>>(),
                    vec![q - 1; n],
                    vec![0; n],
                    edge_values(q, n, &mut rng),
                ];
                for a in &inputs {
                    let b: Vec<u64> = (0..n).map(|_| rng.next_u64() % q).collect();
                    let ctx = format!("{} n={n} q={q}", backend.name());
                    let (mut x, mut y) = (a.clone(), a.clone());
                    Scalar.ntt_forward(&table, &mut x);
                    backend.ntt_forward(&table, &mut y);
                    if x != y {
                        return Err(format!("ntt_forward differs ({ctx})"));
                    }
                    Scalar.ntt_inverse(&table, &mut x);
                    backend.ntt_inverse(&table, &mut y);
                    if x != y {
                        return Err(format!("ntt_inverse differs ({ctx})"));
                    }
                    for c in [0, 1, q - 1, b[0]] {
                        let mut want = a.clone();
                        Scalar.ntt_inverse(&table, &mut want);
                        Scalar.mul_scalar(&m, &mut want, c);
                        let mut got = vec![u64::MAX; n];
                        backend.ntt_inverse_scaled(&table, a, &mut got, c);
                        if want != got {
                            return Err(format!("ntt_inverse_scaled differs ({ctx} c={c})"));
                        }
                    }
                    let (mut x, mut y) = (a.clone(), a.clone());
                    Scalar.mul_pointwise(&m, &mut x, &b);
                    backend.mul_pointwise(&m, &mut y, &b);
                    if x != y {
                        return Err(format!("mul_pointwise differs ({ctx})"));
                    }
                    let mut z = vec![0; n];
                    backend.mul_pointwise_into(&m, &mut z, a, &b);
                    if x != z {
                        return Err(format!("mul_pointwise_into differs ({ctx})"));
                    }
                    Scalar.mul_add_pointwise(&m, a, &b, &mut x);
                    backend.mul_add_pointwise(&m, a, &b, &mut y);
                    if x != y {
                        return Err(format!("mul_add_pointwise differs ({ctx})"));
                    }
                    let c = b[0];
                    Scalar.mul_scalar(&m, &mut x, c);
                    backend.mul_scalar(&m, &mut y, c);
                    if x != y {
                        return Err(format!("mul_scalar differs ({ctx})"));
                    }
                }
                check_combinations(backend, &m, n, &mut rng)?;
            }
            check_multi(backend, n, &mut rng)?;
        }
        check_edge_moduli(backend, &mut rng)?;
        check_packing(backend, &mut rng)?;
        check_keep_below(backend, &mut rng)?;
        check_round_sums(backend, &mut rng)?;
        Ok(())
    }

    /// `round_sums` over 1 to 12 limbs of 20- to 62-bit moduli (entries
    /// random, at their largest and zero), lengths with and without a
    /// partial vector: the scalar reference's integers exactly.
    fn check_round_sums(backend: &dyn Backend, rng: &mut impl RngCore) -> Result<(), String> {
        let widths = [20, 30, 49, 50, 52, 53, 55, 60, 61, 62];
        for limbs in 1..=12usize {
            for len in [1, 7, 64, 4099] {
                let qs: Vec<u64> = (0..limbs)
                    .map(|i| (1u64 << widths[(i + len) % widths.len()]) - 1 - 2 * i as u64)
                    .collect();
                let inv: Vec<f64> = qs.iter().map(|&q| 1.0 / q as f64).collect();
                let bits: Vec<u32> = qs.iter().map(|&q| 64 - q.leading_zeros()).collect();
                let ys: Vec<Vec<u64>> = qs
                    .iter()
                    .map(|&q| {
                        (0..len)
                            .map(|c| match c % 5 {
                                0 => q - 1,
                                1 => 0,
                                _ => rng.next_u64() % q,
                            })
                            .collect()
                    })
                    .collect();
                let refs: Vec<&[u64]> = ys.iter().map(Vec::as_slice).collect();
                let (mut want, mut got) = (vec![0; len], vec![u64::MAX; len]);
                Scalar.round_sums(&mut want, &refs, &inv, &bits);
                backend.round_sums(&mut got, &refs, &inv, &bits);
                if want != got {
                    return Err(format!(
                        "round_sums differs ({} limbs={limbs} len={len})",
                        backend.name()
                    ));
                }
            }
        }
        Ok(())
    }

    /// n values below q cycling through 0, 1, q − 1, q − 2, ⌊q/2⌋, ⌈q/2⌉ and
    /// random ones: the edges of centred (floating-point) reductions.
    fn edge_values(q: u64, n: usize, rng: &mut ChaCha20Rng) -> Vec<u64> {
        let edges = [0, 1, q - 1, q - 2, q / 2, q / 2 + 1];
        (0..n)
            .map(|i| match edges.get(i % 8) {
                Some(&e) => e.min(q - 1),
                None => rng.next_u64() % q,
            })
            .collect()
    }

    /// The pointwise and combination kernels on moduli that need not be NTT
    /// primes: just below 2^50 and just above it, just above 2^49, small
    /// ones, with edge values (see [`edge_values`]) against each other and
    /// sources near 2^50 and 2^64, for lengths with partial vectors.
    fn check_edge_moduli(backend: &dyn Backend, rng: &mut ChaCha20Rng) -> Result<(), String> {
        for q in [
            (1u64 << 62) - 57,
            (1 << 61) - 1,
            (1 << 60) + 33,
            (1u64 << 50) - 27,
            (1 << 50) - 1,
            (1 << 50) + 1,
            (1 << 49) + 1,
            (1 << 49) - 1,
            (1 << 40) + 15,
            65537,
            3,
        ] {
            let m = Modulus::new(q).map_err(|e| e.to_string())?;
            for n in [8usize, 21, 64] {
                let ctx = format!("{} n={n} q={q}", backend.name());
                let a = edge_values(q, n, rng);
                let mut b = edge_values(q, n, rng);
                b.rotate_left(3);
                let (mut x, mut y) = (a.clone(), a.clone());
                Scalar.mul_pointwise(&m, &mut x, &b);
                backend.mul_pointwise(&m, &mut y, &b);
                if x != y {
                    return Err(format!("mul_pointwise differs ({ctx})"));
                }
                let mut z = vec![0; n];
                backend.mul_pointwise_into(&m, &mut z, &a, &b);
                if x != z {
                    return Err(format!("mul_pointwise_into differs ({ctx})"));
                }
                Scalar.mul_add_pointwise(&m, &a, &b, &mut x);
                backend.mul_add_pointwise(&m, &a, &b, &mut y);
                if x != y {
                    return Err(format!("mul_add_pointwise differs ({ctx})"));
                }
                for c in [0, 1, q - 1, q / 2, rng.next_u64() % q] {
                    Scalar.mul_scalar(&m, &mut x, c);
                    backend.mul_scalar(&m, &mut y, c);
                    if x != y {
                        return Err(format!("mul_scalar differs ({ctx} c={c})"));
                    }
                }
                // Source k's width is pattern[k % len]: uniform and mixed.
                let cases: [(usize, &[u32]); 9] = [
                    (9, &[50]),
                    (3, &[51]),
                    (20, &[64]),
                    (70, &[50]),
                    (70, &[64]),
                    (17, &[62]),
                    (7, &[60, 50, 50, 3]),
                    (23, &[3, 64, 40, 61, 50]),
                    (40, &[50, 50, 50, 50, 50, 62]),
                ];
                for (count, pattern) in cases {
                    let src_bits = cycled(pattern, count);
                    let srcs: Vec<Vec<u64>> = (0..count)
                        .map(|k| {
                            let top = u64::MAX >> (64 - src_bits[k]);
                            (0..n)
                                .map(|i| match (i + k) % 4 {
                                    0 => top,
                                    1 => top.saturating_sub(rng.next_u64() % 1024),
                                    2 => rng.next_u64() & top,
                                    _ => (i % 2) as u64,
                                })
                                .collect()
                        })
                        .collect();
                    let refs: Vec<&[u64]> = srcs.iter().map(Vec::as_slice).collect();
                    let w: Vec<u64> = (0..count)
                        .map(|k| match k % 3 {
                            0 => q - 1,
                            1 => rng.next_u64() % q,
                            _ => q / 2,
                        })
                        .collect();
                    for keep in [None, Some(q - 1)] {
                        let (mut x, mut y) = (a.clone(), a.clone());
                        Scalar.linear_combination(&m, &mut x, keep, &refs, &w, &src_bits);
                        backend.linear_combination(&m, &mut y, keep, &refs, &w, &src_bits);
                        if x != y {
                            return Err(format!(
                                "linear_combination differs ({ctx} sources={count}x{pattern:?} bits)"
                            ));
                        }
                    }
                    let (mut x, mut y) = (a.clone(), a.clone());
                    let mut want = [super::Combination {
                        q: &m,
                        out: &mut x,
                        w: &w,
                    }];
                    Scalar.linear_combinations(&mut want, &refs, &src_bits);
                    let mut got = [super::Combination {
                        q: &m,
                        out: &mut y,
                        w: &w,
                    }];
                    backend.linear_combinations(&mut got, &refs, &src_bits);
                    if x != y {
                        return Err(format!(
                            "linear_combinations differs ({ctx} sources={count}x{pattern:?} bits)"
                        ));
                    }
                }
                // Every term at its largest: sources 2^62 − 1, weights q − 1
                // (the sums of exact products overflow if folded too late).
                let top = vec![(1u64 << 62) - 1; n];
                let srcs = vec![top.as_slice(); 40];
                let (mut x, mut y) = (a.clone(), a.clone());
                Scalar.linear_combination(&m, &mut x, None, &srcs, &[q - 1; 40], &[62; 40]);
                backend.linear_combination(&m, &mut y, None, &srcs, &[q - 1; 40], &[62; 40]);
                if x != y {
                    return Err(format!("linear_combination differs ({ctx} largest terms)"));
                }
                for count in [1, 8, 9, 40] {
                    let ops: Vec<Vec<u64>> = (0..3 * count)
                        .map(|k| {
                            let mut v = edge_values(q, n, rng);
                            v.rotate_left(k % 8);
                            v
                        })
                        .collect();
                    let refs: Vec<&[u64]> = ops.iter().map(Vec::as_slice).collect();
                    let (s, rest) = refs.split_at(count);
                    let (b, a) = rest.split_at(count);
                    let mut want = (vec![0; n], vec![0; n]);
                    let mut got = (vec![0; n], vec![0; n]);
                    Scalar.dot_product_pair(&m, s, b, a, &mut want.0, &mut want.1);
                    backend.dot_product_pair(&m, s, b, a, &mut got.0, &mut got.1);
                    if want != got {
                        return Err(format!("dot_product_pair differs ({ctx} terms={count})"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Reads back values a kernel wrote (over an initialised buffer).
    fn read(x: &[MaybeUninit<u64>]) -> Vec<u64> {
        // SAFETY: the callers' buffers are initialised before the kernels
        // write to them.
        x.iter().map(|x| unsafe { x.assume_init() }).collect()
    }

    /// `pack_bits` and `unpack_bits` at every width 1..=64, for lengths
    /// with and without a partial group of eight, on random values with
    /// the edges 0, q − 1 and 2^bits − 1; unpacking with primes that accept
    /// every value and with ones that refuse some, and with a set padding
    /// bit. Every value written is compared, whatever the outcome.
    fn check_packing(backend: &dyn Backend, rng: &mut ChaCha20Rng) -> Result<(), String> {
        for bits in 1..=64u32 {
            let top = u64::MAX >> (64 - bits);
            // A prime-sized bound with the top bit set, as a limb has.
            let q = (top >> 1) + 1 + rng.next_u64() % (top >> 1).max(1);
            for n in [1usize, 3, 7, 8, 9, 64, 1000, 1003, 4096] {
                let mut v: Vec<u64> = (0..n).map(|_| rng.next_u64() % q).collect();
                v[0] = q - 1;
                v[n - 1] = 0;
                if n > 2 {
                    v[n / 2] = top;
                }
                let ctx = format!("{} bits={bits} n={n}", backend.name());
                let len = crate::pack::packed_len(n, bits);
                let (mut want, mut got) = (vec![0x55; len], vec![0xAA; len]);
                Scalar.pack_bits(&v, bits, &mut want);
                backend.pack_bits(&v, bits, &mut got);
                if want != got {
                    return Err(format!("pack_bits differs ({ctx})"));
                }
                let mut padded = want.clone();
                if !(n * bits as usize).is_multiple_of(8) {
                    *padded.last_mut().expect("a byte") |= 0x80;
                }
                for (bytes, q) in [
                    (&want, q),
                    (&want, top),
                    (&want, top.saturating_add(1)),
                    (&want, q - 1),
                    (&padded, u64::MAX),
                ] {
                    let mut x = vec![MaybeUninit::new(1); n];
                    let mut y = vec![MaybeUninit::new(2); n];
                    let ok_x = Scalar.unpack_bits(bytes, bits, q, &mut x);
                    let ok_y = backend.unpack_bits(bytes, bits, q, &mut y);
                    if ok_x != ok_y || read(&x) != read(&y) {
                        return Err(format!("unpack_bits differs ({ctx} q={q})"));
                    }
                }
            }
        }
        Ok(())
    }

    /// `keep_below` on whole keystream buffers and on lengths that leave a
    /// partial vector, for bounds that accept nearly every word, about half
    /// of them and only those with a clear low bit (q = 1), with the words
    /// q − 1 and q among them.
    fn check_keep_below(backend: &dyn Backend, rng: &mut ChaCha20Rng) -> Result<(), String> {
        let mask_of = |q: u64| u64::MAX >> (q - 1).leading_zeros().min(63);
        for q in [
            (1 << 49) + 1,
            (1u64 << 50) - 27,
            65537,
            u64::MAX - 58,
            (1 << 62) - 1,
            1,
        ] {
            let mask = mask_of(q);
            for words in [0usize, 1, 7, 8, 13, 512] {
                let mut src: Vec<u8> = (0..8 * words).map(|_| rng.next_u64() as u8).collect();
                if words > 3 {
                    src[16..24].copy_from_slice(&(q - 1).to_le_bytes());
                    src[24..32].copy_from_slice(&q.to_le_bytes());
                }
                let mut x = vec![MaybeUninit::new(1); words + 3];
                let mut y = vec![MaybeUninit::new(2); words + 3];
                let kept_x = Scalar.keep_below(&src, mask, q, &mut x);
                let kept_y = backend.keep_below(&src, mask, q, &mut y);
                if kept_x != kept_y || read(&x[..kept_x]) != read(&y[..kept_y]) {
                    return Err(format!(
                        "keep_below differs ({} q={q} words={words})",
                        backend.name()
                    ));
                }
            }
        }
        Ok(())
    }

    /// `count` widths repeating `pattern`.
    fn cycled(pattern: &[u32], count: usize) -> Vec<u32> {
        pattern.iter().copied().cycle().take(count).collect()
    }

    /// `linear_combinations` into outputs of mixed sizes (IFMA pairs, an odd
    /// one out, 61-bit primes) against one `linear_combination` each.
    fn check_multi(backend: &dyn Backend, n: usize, rng: &mut ChaCha20Rng) -> Result<(), String> {
        let mut primes = ntt_primes(50, n, 3, &[]).map_err(|e| e.to_string())?;
        // Four 61-bit primes of one kind make a whole group of the wide
        // kernel and one left over; 62-bit ones take its exact products.
        primes.extend(ntt_primes(61, n, 4, &[]).map_err(|e| e.to_string())?);
        primes.extend(ntt_primes_any_form(61, n, 1, &[]).map_err(|e| e.to_string())?);
        // (Moduli, not primes: the sums need no prime.)
        primes.extend([(1 << 62) - 57, (1 << 61) + (5 << 32) + 1]);
        primes.extend(ntt_primes(30, n, 1, &[]).map_err(|e| e.to_string())?);
        let moduli: Vec<Modulus> = primes
            .iter()
            .map(|&q| Modulus::new(q).expect("prime"))
            .collect();
        // Source k's width is pattern[k % len]: uniform and mixed, and a
        // split (wide) source after 13 narrow ones, where the lazy sums
        // reach their most terms before a fold (15).
        let after_13: Vec<u32> = [50; 13].into_iter().chain([61]).collect();
        let cases: [(usize, &[u32]); 9] = [
            (5, &[50]),
            (5, &[61]),
            (1, &[64]),
            (30, &[50]),
            (9, &[64]),
            (7, &[61, 50, 50, 50, 50, 50, 3]),
            (9, &[49, 60]),
            (14, &after_13),
            (29, &after_13),
        ];
        // Random entries, then every source and weight at its maximum.
        for ((count, pattern), max) in cases.into_iter().flat_map(|c| [(c, false), (c, true)]) {
            let src_bits = cycled(pattern, count);
            let entry = |rng: &mut ChaCha20Rng, b: u32| {
                if max {
                    u64::MAX >> (64 - b)
                } else {
                    rng.next_u64() >> (64 - b)
                }
            };
            let srcs: Vec<Vec<u64>> = src_bits
                .iter()
                .map(|&b| (0..n).map(|_| entry(rng, b)).collect())
                .collect();
            let refs: Vec<&[u64]> = srcs.iter().map(Vec::as_slice).collect();
            let weights: Vec<Vec<u64>> = primes
                .iter()
                .map(|&q| {
                    (0..count)
                        .map(|_| if max { q - 1 } else { rng.next_u64() % q })
                        .collect()
                })
                .collect();
            let mut want = vec![vec![0u64; n]; primes.len()];
            for ((m, w), o) in moduli.iter().zip(&weights).zip(&mut want) {
                Scalar.linear_combination(m, o, None, &refs, w, &src_bits);
            }
            let mut got = vec![vec![0u64; n]; primes.len()];
            let mut outputs: Vec<super::Combination<'_>> = moduli
                .iter()
                .zip(&weights)
                .zip(&mut got)
                .map(|((q, w), out)| super::Combination { q, out, w })
                .collect();
            backend.linear_combinations(&mut outputs, &refs, &src_bits);
            if want != got {
                return Err(format!(
                    "linear_combinations differs ({} n={n} sources={count}x{pattern:?} bits, max={max})",
                    backend.name()
                ));
            }
        }
        Ok(())
    }

    /// `linear_combination` and `dot_product_pair` for source widths up to
    /// 64 bits, counts that cross the backends' flush points, and maximal
    /// entries (the worst case of every lazy bound).
    fn check_combinations(
        backend: &dyn Backend,
        m: &Modulus,
        n: usize,
        rng: &mut ChaCha20Rng,
    ) -> Result<(), String> {
        let q = m.value();
        let limb = |rng: &mut ChaCha20Rng, bound: u64, max: bool| -> Vec<u64> {
            (0..n)
                .map(|_| {
                    if max {
                        bound - 1
                    } else {
                        rng.next_u64() % bound
                    }
                })
                .collect()
        };
        for max in [false, true] {
            for (count, src_bits) in [
                (0, 0),
                (1, 52),
                (4, q.ilog2() + 1),
                (5, 60),
                (40, 64),
                (33, 50),
                (17, 51),
            ] {
                let bound = if src_bits == 64 {
                    u64::MAX
                } else {
                    1u64 << src_bits
                };
                let srcs: Vec<Vec<u64>> =
                    (0..count).map(|_| limb(rng, bound.max(1), max)).collect();
                let refs: Vec<&[u64]> = srcs.iter().map(Vec::as_slice).collect();
                let w: Vec<u64> = (0..count)
                    .map(|_| if max { q - 1 } else { rng.next_u64() % q })
                    .collect();
                for keep in [None, Some(q - 1), Some(rng.next_u64() % q)] {
                    let start = limb(rng, q, max);
                    let (mut x, mut y) = (start.clone(), start);
                    let widths = vec![src_bits; count];
                    Scalar.linear_combination(m, &mut x, keep, &refs, &w, &widths);
                    backend.linear_combination(m, &mut y, keep, &refs, &w, &widths);
                    if x != y {
                        return Err(format!(
                            "linear_combination differs ({} n={n} q={q} sources={count}x{src_bits} bits)",
                            backend.name()
                        ));
                    }
                }
            }
            for count in [1, 7, 8, 9, 15, 16, 17, 31, 40] {
                let ops: Vec<Vec<u64>> = (0..3 * count).map(|_| limb(rng, q, max)).collect();
                let refs: Vec<&[u64]> = ops.iter().map(Vec::as_slice).collect();
                let (s, rest) = refs.split_at(count);
                let (b, a) = rest.split_at(count);
                let mut want = (vec![0; n], vec![0; n]);
                let mut got = (vec![0; n], vec![0; n]);
                Scalar.dot_product_pair(m, s, b, a, &mut want.0, &mut want.1);
                backend.dot_product_pair(m, s, b, a, &mut got.0, &mut got.1);
                if want != got {
                    return Err(format!(
                        "dot_product_pair differs ({} n={n} q={q} terms={count})",
                        backend.name()
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_available_backend_matches_scalar() {
        let all = available();
        assert_eq!(all[0].name(), "scalar");
        for b in &all {
            parity::check(b.as_ref(), 13).unwrap();
        }
    }

    /// The AVX2 and AVX-512 levels' integer kernels, which the FMA ones
    /// replace for primes below 2^50 on CPUs with FMA.
    #[test]
    fn integer_kernels_without_fma_match_scalar() {
        for level in [SimdLevel::Avx2, SimdLevel::Avx512] {
            if let Some(b) = Simd::new(level) {
                parity::check(&b.without_fma(), 13).unwrap();
            }
        }
    }

    /// The scalar reference against a term-by-term modular sum.
    #[test]
    fn scalar_combinations_match_naive_sums() {
        let q = crate::prime::ntt_primes(61, 16, 1, &[]).unwrap()[0];
        let m = Modulus::new(q).unwrap();
        let naive = |terms: &mut dyn Iterator<Item = (u64, u64)>| {
            terms.fold(0u128, |acc, (x, y)| {
                (acc + x as u128 * y as u128 % q as u128) % q as u128
            }) as u64
        };
        let srcs: Vec<Vec<u64>> = (0..20u64)
            .map(|k| (0..16u64).map(|i| u64::MAX - k * 977 - i).collect())
            .collect();
        let refs: Vec<&[u64]> = srcs.iter().map(Vec::as_slice).collect();
        let w: Vec<u64> = (0..20).map(|k| q - 1 - k).collect();
        let mut out = vec![q - 1; 16];
        Scalar.linear_combination(&m, &mut out, Some(q - 2), &refs, &w, &[64; 20]);
        for (i, &o) in out.iter().enumerate() {
            let mut terms = std::iter::once((q - 1, q - 2))
                .chain(refs.iter().zip(&w).map(|(s, &wk)| (s[i], wk)));
            assert_eq!(o, naive(&mut terms));
        }
        let (mut o0, mut o1) = (vec![0; 16], vec![0; 16]);
        let (s, rest) = refs.split_at(5);
        let rest: Vec<Vec<u64>> = rest
            .iter()
            .map(|r| r.iter().map(|x| x % q).collect())
            .collect();
        let s: Vec<Vec<u64>> = s
            .iter()
            .map(|r| r.iter().map(|x| x % q).collect())
            .collect();
        let sr: Vec<&[u64]> = s.iter().map(Vec::as_slice).collect();
        let br: Vec<&[u64]> = rest[..5].iter().map(Vec::as_slice).collect();
        let ar: Vec<&[u64]> = rest[5..10].iter().map(Vec::as_slice).collect();
        Scalar.dot_product_pair(&m, &sr, &br, &ar, &mut o0, &mut o1);
        for i in 0..16 {
            assert_eq!(
                o0[i],
                naive(&mut sr.iter().zip(&br).map(|(x, y)| (x[i], y[i])))
            );
            assert_eq!(
                o1[i],
                naive(&mut sr.iter().zip(&ar).map(|(x, y)| (x[i], y[i])))
            );
        }
    }

    #[test]
    fn simd_backends_match_scalar_at_large_degrees() {
        for b in available().iter().skip(1) {
            for (log_n, bits) in [
                (16, 61),
                (17, 61),
                (16, 60),
                (17, 60),
                (16, 50),
                (17, 50),
                (17, 49),
            ] {
                let n = 1 << log_n;
                let q = crate::prime::ntt_primes(bits, n, 1, &[]).unwrap()[0];
                let t = NttTable::new(q, n).unwrap();
                let a: Vec<u64> = (0..n as u64)
                    .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % q)
                    .collect();
                let (mut x, mut y) = (a.clone(), a.clone());
                Scalar.ntt_forward(&t, &mut x);
                b.ntt_forward(&t, &mut y);
                assert_eq!(x, y, "{} forward n={n}", b.name());
                Scalar.ntt_inverse(&t, &mut x);
                b.ntt_inverse(&t, &mut y);
                assert_eq!(x, y, "{} inverse n={n}", b.name());
                assert_eq!(x, a);
            }
        }
    }
}
