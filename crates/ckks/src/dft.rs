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

    /// The same matrix on vectors of `m` slots (a multiple of n) that
    /// repeat every n: each diagonal repeated, the indices kept.
    fn lift(&self, m: usize) -> Self {
        Self {
            n: m,
            d: self
                .d
                .iter()
                .map(|(&k, v)| (k, v.iter().copied().cycle().take(m).collect()))
                .collect(),
        }
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

/// x ↦ D·x with D the diagonal matrix of `d`.
fn diagonal(d: Vec<Complex64>) -> Diagonals {
    Diagonals {
        n: d.len(),
        d: BTreeMap::from([(0, d)]),
    }
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
///
/// With sparse slots (n ≤ N/4) the real and imaginary parts of the n
/// coefficient pairs fit side by side in 2n real slots, so bootstrapping
/// evaluates one EvalMod instead of two:
/// [`HomomorphicDft::coeffs_to_slots_split`] ends with the parts apart
/// (once its output is added to its conjugate) and
/// [`HomomorphicDft::slots_to_coeffs_joined`] starts by joining them. The
/// factor that does it works on 2n slots, with the same levels.
#[derive(Debug, Clone)]
pub struct HomomorphicDft {
    direction: DftDirection,
    factors: Vec<LinearTransform>,
    /// The constant the factors' product is multiplied by.
    normalization: f64,
    /// The encoder of a factor on twice the slots (split or joined parts).
    wide: Option<Encoder>,
    /// The slots of its input (CoeffsToSlots) or output (SlotsToCoeffs).
    slots: usize,
}

/// What the factor at the edge of a sparse DFT does besides its stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parts {
    /// Nothing: the complex coefficient pairs in n slots.
    Complex,
    /// CoeffsToSlots' last factor times D, D = 1 on the first n of every
    /// 2n slots and −i on the others: y + ȳ then holds 2·Re u in the
    /// first half and 2·Im u in the second.
    Split,
    /// SlotsToCoeffs' first factor after P, the inverse of [`Parts::Split`]:
    /// (P·w)_i = w_i + i·w_(i+n) on the first half, repeated on the second.
    Join,
}

impl HomomorphicDft {
    /// CoeffsToSlots for `enc`'s slots in `levels` levels (1 ≤ levels ≤
    /// log2(slots)).
    pub fn coeffs_to_slots(enc: &Encoder, levels: usize) -> Result<Self> {
        Self::new(enc, levels, DftDirection::CoeffsToSlots, Parts::Complex)
    }

    /// SlotsToCoeffs for `enc`'s slots in `levels` levels.
    pub fn slots_to_coeffs(enc: &Encoder, levels: usize) -> Result<Self> {
        Self::new(enc, levels, DftDirection::SlotsToCoeffs, Parts::Complex)
    }

    /// CoeffsToSlots for `enc`'s n slots (n ≤ N/4) whose output y, added
    /// to its conjugate, holds 2·Re u in the first n of every 2n slots and
    /// 2·Im u in the others: real values, one EvalMod for both parts.
    pub fn coeffs_to_slots_split(enc: &Encoder, levels: usize) -> Result<Self> {
        Self::new(enc, levels, DftDirection::CoeffsToSlots, Parts::Split)
    }

    /// SlotsToCoeffs for `enc`'s n slots (n ≤ N/4) taking its input as
    /// [`Self::coeffs_to_slots_split`] leaves it: the real parts in the
    /// first n of every 2n slots, the imaginary parts in the others.
    pub fn slots_to_coeffs_joined(enc: &Encoder, levels: usize) -> Result<Self> {
        Self::new(enc, levels, DftDirection::SlotsToCoeffs, Parts::Join)
    }

    fn new(enc: &Encoder, levels: usize, direction: DftDirection, parts: Parts) -> Result<Self> {
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
        let wide = match parts {
            Parts::Complex => None,
            Parts::Split | Parts::Join => {
                Some(Encoder::with_slots(enc.params(), 2 * n).map_err(|_| {
                    CkksError::ValueOutOfRange(format!(
                        "{n} slots: the real and imaginary parts need 2n ≤ N/2 slots"
                    ))
                })?)
            }
        };
        let one = Complex64::new(1.0, 0.0);
        let (i, minus_i) = (Complex64::new(0.0, 1.0), Complex64::new(0.0, -1.0));
        let halves = |a: Complex64, b: Complex64| -> Vec<Complex64> {
            (0..2 * n).map(|k| if k < n { a } else { b }).collect()
        };
        let mut factors = Vec::with_capacity(levels);
        let mut next = 0;
        for g in 0..levels {
            let size = base + usize::from(g < extra);
            let mut m = Diagonals::identity(n);
            for &len in &lens[next..next + size] {
                m = stage(enc, len, inverse).compose(&m);
            }
            next += size;
            let m = match parts {
                Parts::Split if g == levels - 1 => {
                    diagonal(halves(one, minus_i)).compose(&m.lift(2 * n))
                }
                Parts::Join if g == 0 => {
                    let mut p = diagonal(halves(one, i));
                    p.d.insert(n, halves(i, one));
                    m.lift(2 * n).compose(&p)
                }
                _ => m,
            };
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
            wide,
            slots: n,
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

    /// Its factors, in the order they are applied (one level each).
    pub fn factors(&self) -> &[LinearTransform] {
        &self.factors
    }

    /// Its factors, in the order they are applied (one level each).
    pub fn factors_mut(&mut self) -> &mut [LinearTransform] {
        &mut self.factors
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

    /// The transform in the clear. A factor on 2n slots takes the n
    /// values before it repeated, and the factor after it the first n of
    /// its 2n (the rest repeat them); SlotsToCoeffs returns n values,
    /// CoeffsToSlots 2n when it splits the parts.
    pub fn apply_clear(&self, x: &[Complex64]) -> Vec<Complex64> {
        let mut y = self.factors.iter().fold(x.to_vec(), |v, f| {
            let v: Vec<Complex64> = v.iter().copied().cycle().take(f.slots()).collect();
            f.apply_clear(&v)
        });
        if self.direction == DftDirection::SlotsToCoeffs {
            y.truncate(self.slots);
        }
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
            let enc = match &self.wide {
                Some(wide) if wide.slots() == f.slots() => wide,
                _ => enc,
            };
            c = f.apply_to_scale(eval, enc, &c, target)?;
        }
        Ok(c)
    }
}
