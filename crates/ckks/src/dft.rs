//! The homomorphic DFTs of bootstrapping: CoeffsToSlots and SlotsToCoeffs
//! as products of sparse diagonal matrices, a level each.
//!
//! Decoding evaluates the encoded polynomial at the slot roots: with u the
//! complex vector of coefficient pairs (u_k = t_k + i·t_{k+N/2} for full
//! slots), the slots are z = V·u, and the encoder's special FFT computes V
//! as log2(n) butterfly stages after a bit reversal. Each stage is a
//! matrix with three diagonals (0 and ±len/2), so
//!
//! - SlotsToCoeffs (u → z) is the stages of length 2, 4, …, n applied to u
//!   in bit-reversed order;
//! - CoeffsToSlots (z → u) is the inverse stages of length n, …, 2 and
//!   1/n, which leave u in bit-reversed order.
//!
//! The bit reversal itself is never computed: what lies between the two
//! (EvalMod) works slot by slot. Consecutive stages are merged into one
//! matrix per level (`levels` of them, each a [`LinearTransform`] with up
//! to 2^(k+1) − 1 diagonals for k stages merged): fewer levels, more
//! rotations, the trade bootstrapping's level budget sets.
//!
//! ```
//! use hecloud_ckks::{*, params::test_literal, dft::HomomorphicDft};
//! use num_complex::Complex64;
//! let params = CkksParameters::new_insecure_for_tests(test_literal(10, 6), 40)?;
//! let enc = Encoder::new(&params);
//! let (cts, stc) = (HomomorphicDft::coeffs_to_slots(&enc, 3)?, HomomorphicDft::slots_to_coeffs(&enc, 3)?);
//! let mut rotations = cts.rotations();
//! rotations.extend(stc.rotations());
//! let keys = KeySet::generate(&params, &rotations, false)?;
//! let eval = Evaluator::new(&params, keys.evaluation_keys());
//! let z: Vec<Complex64> = (0..params.slots()).map(|i| Complex64::new(i as f64 / 512.0, 0.25)).collect();
//! let ct = keys.encrypt(&enc.encode(&z, 6, params.default_scale())?)?;
//! let back = stc.apply(&eval, &enc, &cts.apply(&eval, &enc, &ct)?)?; // 6 levels
//! let got = enc.decode(&keys.decrypt(&back)?)?;
//! assert!((got[7] - z[7]).norm() < 1e-4);
//! # Ok::<(), CkksError>(())
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

use hecloud_rlwe::Ciphertext;
use num_complex::Complex64;

use crate::encoder::Encoder;
use crate::error::{CkksError, Result};
use crate::evaluator::Evaluator;
use crate::linear::LinearTransform;

/// An n × n matrix by its diagonals (indices mod n):
/// (M·x)[i] = Σ_d M_d[i]·x[i + d].
#[derive(Debug, Clone)]
struct Diagonals {
    n: usize,
    d: BTreeMap<usize, Vec<Complex64>>,
}

impl Diagonals {
    fn identity(n: usize) -> Self {
        Self {
            n,
            d: BTreeMap::from([(0, vec![Complex64::new(1.0, 0.0); n])]),
        }
    }

    /// A·B, that is x ↦ A(B(x)): C_{a+b}[i] = Σ A_a[i]·B_b[i + a].
    fn compose(&self, b: &Self) -> Self {
        let n = self.n;
        let mut d: BTreeMap<usize, Vec<Complex64>> = BTreeMap::new();
        for (&da, va) in &self.d {
            for (&db, vb) in &b.d {
                let c = d
                    .entry((da + db) % n)
                    .or_insert_with(|| vec![Complex64::default(); n]);
                for (i, ci) in c.iter_mut().enumerate() {
                    *ci += va[i] * vb[(i + da) % n];
                }
            }
        }
        Self { n, d }
    }

    fn into_transform(self) -> Result<LinearTransform> {
        let diagonals = self
            .d
            .into_iter()
            .filter(|(_, v)| v.iter().any(|x| x.norm() > 1e-15))
            .map(|(k, v)| (k as i64, v))
            .collect();
        LinearTransform::new(self.n, diagonals)
    }
}

/// One butterfly stage of the special FFT as a three-diagonal matrix:
/// decoding (`inverse` false): (u, w) ↦ (u + ω·w, u − ω·w); encoding:
/// (u, w) ↦ (u + w, (u − w)·ω̄), on the pairs len/2 apart in each block of
/// `len`.
fn stage(enc: &Encoder, len: usize, inverse: bool) -> Diagonals {
    let n = enc.slots();
    let h = len / 2;
    let zero = || vec![Complex64::default(); n];
    let (mut d0, mut up, mut down) = (zero(), zero(), zero());
    let one = Complex64::new(1.0, 0.0);
    for p in 0..n {
        let j = p % len;
        if j < h {
            let w = enc.twiddle(j, len, inverse);
            d0[p] = one;
            up[p] = if inverse { one } else { w };
        } else {
            let w = enc.twiddle(j - h, len, inverse);
            d0[p] = -w;
            down[p] = if inverse { w } else { one };
        }
    }
    // At len = n the two off-diagonals are one (n/2 = −n/2 mod n); they
    // fill disjoint rows, so they add.
    let mut d = BTreeMap::from([(0, d0), (h % n, up)]);
    let entry = d.entry((n - h) % n).or_insert_with(zero);
    entry.iter_mut().zip(&down).for_each(|(a, b)| *a += b);
    Diagonals { n, d }
}

/// Which way a [`HomomorphicDft`] goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DftDirection {
    /// Slots z → coefficient pairs u (bit-reversed): bootstrapping's first
    /// step after ModRaise.
    CoeffsToSlots,
    /// Coefficient pairs u (bit-reversed) → slots z: its last step.
    SlotsToCoeffs,
}

/// A homomorphic DFT: one [`LinearTransform`] per level it spends.
#[derive(Debug, Clone)]
pub struct HomomorphicDft {
    direction: DftDirection,
    factors: Vec<LinearTransform>,
    /// The constant the factors' product is multiplied by.
    normalization: f64,
}

impl HomomorphicDft {
    /// CoeffsToSlots for `enc`'s slots in `levels` levels (1 ≤ levels ≤
    /// log2(slots)).
    pub fn coeffs_to_slots(enc: &Encoder, levels: usize) -> Result<Self> {
        Self::new(enc, levels, DftDirection::CoeffsToSlots)
    }

    /// SlotsToCoeffs for `enc`'s slots in `levels` levels.
    pub fn slots_to_coeffs(enc: &Encoder, levels: usize) -> Result<Self> {
        Self::new(enc, levels, DftDirection::SlotsToCoeffs)
    }

    fn new(enc: &Encoder, levels: usize, direction: DftDirection) -> Result<Self> {
        // Sparse slots: the same DFT at the encoder's size, on slot vectors
        // that repeat every n slots (a rotation by k < n of such a vector is
        // its rotation mod n).
        let n = enc.slots();
        let stages = n.trailing_zeros() as usize;
        if n < 2 || levels == 0 || levels > stages {
            return Err(CkksError::ValueOutOfRange(format!(
                "a DFT of {n} slots in {levels} levels (1 to {stages})"
            )));
        }
        // Stage lengths in the order they apply.
        let lens: Vec<usize> = match direction {
            DftDirection::SlotsToCoeffs => (1..=stages).map(|k| 1 << k).collect(),
            DftDirection::CoeffsToSlots => (1..=stages).rev().map(|k| 1 << k).collect(),
        };
        let inverse = direction == DftDirection::CoeffsToSlots;
        // As even a split as can be, the larger groups first.
        let (base, extra) = (stages / levels, stages % levels);
        let mut factors = Vec::with_capacity(levels);
        let mut next = 0;
        for g in 0..levels {
            let size = base + usize::from(g < extra);
            let mut m = Diagonals::identity(n);
            for &len in &lens[next..next + size] {
                m = stage(enc, len, inverse).compose(&m);
            }
            next += size;
            factors.push(m.into_transform()?);
        }
        // CoeffsToSlots' 1/n stays out of the diagonals (entries of 2^-15
        // would keep 15 bits fewer of the encoding's precision): `apply`
        // folds it into the scale.
        let normalization = if inverse { 1.0 / n as f64 } else { 1.0 };
        Ok(Self {
            direction,
            factors,
            normalization,
        })
    }

    /// Which way it goes.
    pub fn direction(&self) -> DftDirection {
        self.direction
    }

    /// Levels it spends.
    pub fn levels(&self) -> usize {
        self.factors.len()
    }

    /// The rotations its factors need keys for.
    pub fn rotations(&self) -> Vec<i64> {
        let mut r: Vec<i64> = self
            .factors
            .iter()
            .flat_map(LinearTransform::rotations)
            .collect();
        r.sort_unstable();
        r.dedup();
        r
    }

    /// The transform in the clear.
    pub fn apply_clear(&self, x: &[Complex64]) -> Vec<Complex64> {
        let y = self
            .factors
            .iter()
            .fold(x.to_vec(), |v, f| f.apply_clear(&v));
        y.into_iter().map(|v| v * self.normalization).collect()
    }

    /// The transform on `ct`, one level per factor, the scale kept.
    pub fn apply(&self, eval: &Evaluator, enc: &Encoder, ct: &Ciphertext) -> Result<Ciphertext> {
        self.apply_to_scale(eval, enc, ct, ct.scale())
    }

    /// The transform on `ct` with the result at scale `out_scale`: each
    /// factor moves the scale by the same ratio
    /// ([`LinearTransform::apply_to_scale`]), and the normalization is
    /// read into the scale instead of multiplied in (the ciphertext is
    /// unchanged, its slots read at scale/c hold c times their values).
    pub fn apply_to_scale(
        &self,
        eval: &Evaluator,
        enc: &Encoder,
        ct: &Ciphertext,
        out_scale: f64,
    ) -> Result<Ciphertext> {
        self.apply_to_scale_cancellable(eval, enc, ct, out_scale, &AtomicBool::new(false))
    }

    /// [`Self::apply_to_scale`], giving up with [`CkksError::Cancelled`]
    /// before a factor once `cancel` is raised.
    pub fn apply_to_scale_cancellable(
        &self,
        eval: &Evaluator,
        enc: &Encoder,
        ct: &Ciphertext,
        out_scale: f64,
        cancel: &AtomicBool,
    ) -> Result<Ciphertext> {
        crate::error::require_levels(ct.level(), self.levels())?;
        let mut c = ct.clone();
        c.set_scale(ct.scale() / self.normalization);
        let step = (out_scale / c.scale()).powf(1.0 / self.levels() as f64);
        let last = self.levels() - 1;
        for (k, f) in self.factors.iter().enumerate() {
            crate::polynomial::not_cancelled(cancel)?;
            let target = if k == last {
                out_scale
            } else {
                c.scale() * step
            };
            c = f.apply_to_scale(eval, enc, &c, target)?;
        }
        Ok(c)
    }
}
