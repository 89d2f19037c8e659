//! Polynomial evaluation in the Chebyshev basis with baby-step giant-step
//! (Han–Ki / Lattigo style): the Chebyshev polynomials T_1 … T_g (baby
//! steps, g a power of two near √(d+1)) and T_g, T_2g, T_4g, … (giant steps)
//! are computed once; p is split recursively by Chebyshev division,
//! p = q·T_n + r with T_{n+j} = 2·T_n·T_j − T_{n−j}, and the leaves are
//! linear combinations of baby steps.
//!
//! Depth is optimal, ⌈log2(d + 1)⌉ levels, as in Lattigo: each node is
//! given the level its result must have (the quotient one above its
//! product's), a leaf combines its baby steps at the level above its own
//! and is rescaled once, and a leaf whose baby steps sit too low for the
//! level it is given (T_5 … T_7 under the highest quotient) is divided
//! further by a lower power of two among the baby steps.
//!
//! Scales are matched exactly, whatever the primes: the rescaling primes
//! differ from Δ and from one another (by up to 2^-20 relative at
//! N = 2^16, where they are ≡ 1 mod 2^17), so products drift, and a sum
//! of two drifted terms would either fail the evaluator's tolerance or
//! lose precision. As in Lattigo, each node is given the scale its result
//! must have: a leaf takes each coefficient at the scale that brings its
//! term to that target, a quotient is computed at the target times
//! q_l / scale(T_n) so that its product with T_n lands on the target, and
//! the T_j that a baby step subtracts is first brought to the product's
//! scale (a product by 1 at one level it has to spare). The result has the
//! input's scale.
//!
//! The schedule is written once, in [`ChebyshevPolynomial::evaluate_with`]
//! over the [`ChebyshevOps`] it is made of, so the evaluator, the planner
//! and a validator that checks each step cannot disagree on it.

use std::sync::atomic::{AtomicBool, Ordering};

use hecloud_rlwe::Ciphertext;
use num_complex::Complex64;

use crate::error::{CkksError, Result};
use crate::evaluator::{Evaluator, MAX_CONSTANT};

/// p(x) = Σ c_k·T_k(y) with y = (2x − a − b)/(b − a) mapping [a, b] to [−1, 1].
#[derive(Debug, Clone, PartialEq)]
pub struct ChebyshevPolynomial {
    /// Chebyshev coefficients c_0 … c_d.
    pub coeffs: Vec<f64>,
    /// Left end of the interval.
    pub a: f64,
    /// Right end of the interval.
    pub b: f64,
}

impl ChebyshevPolynomial {
    /// The interpolant of `f` at the d + 1 Chebyshev nodes of [a, b].
    ///
    /// ```
    /// use hecloud_ckks::polynomial::ChebyshevPolynomial;
    /// let p = ChebyshevPolynomial::interpolate(|x| x.exp(), 15, -1.0, 1.0);
    /// assert!((p.eval(0.3) - 0.3f64.exp()).abs() < 1e-12);
    /// ```
    pub fn interpolate(f: impl Fn(f64) -> f64, degree: usize, a: f64, b: f64) -> Self {
        let m = degree + 1;
        let nodes: Vec<f64> = (0..m)
            .map(|j| (std::f64::consts::PI * (j as f64 + 0.5) / m as f64).cos())
            .collect();
        let vals: Vec<f64> = nodes
            .iter()
            .map(|&y| f((y * (b - a) + a + b) / 2.0))
            .collect();
        let coeffs = (0..m)
            .map(|k| {
                let s: f64 = (0..m)
                    .map(|j| {
                        vals[j]
                            * (std::f64::consts::PI * k as f64 * (j as f64 + 0.5) / m as f64).cos()
                    })
                    .sum();
                if k == 0 {
                    s / m as f64
                } else {
                    2.0 * s / m as f64
                }
            })
            .collect();
        Self { coeffs, a, b }
    }

    /// Degree d.
    pub fn degree(&self) -> usize {
        self.coeffs.len().saturating_sub(1)
    }

    /// p(x) in the clear (Clenshaw's recurrence): the reference the
    /// encrypted evaluation is checked against.
    pub fn eval(&self, x: f64) -> f64 {
        let y = (2.0 * x - self.a - self.b) / (self.b - self.a);
        let (mut b1, mut b2) = (0.0, 0.0);
        for &c in self.coeffs.iter().skip(1).rev() {
            let b0 = 2.0 * y * b1 - b2 + c;
            b2 = b1;
            b1 = b0;
        }
        y * b1 - b2 + self.coeffs.first().copied().unwrap_or(0.0)
    }

    fn needs_affine(&self) -> bool {
        self.a != -1.0 || self.b != 1.0
    }

    /// Levels [`Evaluator::evaluate_chebyshev`] consumes: ⌈log2(d + 1)⌉,
    /// one more for an interval other than [−1, 1].
    pub fn depth(&self) -> usize {
        log2_ceil_succ(self.degree()) + self.needs_affine() as usize
    }
}

/// ⌈log2(d + 1)⌉ for d ≥ 1 (1 for d = 0): the levels degree d needs.
fn log2_ceil_succ(d: usize) -> usize {
    (usize::BITS - d.max(1).leading_zeros()) as usize
}

/// Baby step count: a power of two near √(d + 1).
fn baby_count(d: usize) -> usize {
    let mut g = 1;
    while g * g < d + 1 {
        g *= 2;
    }
    g.max(2)
}

/// Splits p = q·T_n + r (deg p < 2n, deg r < n).
fn divide(c: &[f64], n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut r = c[..n.min(c.len())].to_vec();
    let mut q = vec![0.0; c.len() - n];
    q[0] = c[n];
    for j in 1..c.len() - n {
        q[j] = 2.0 * c[n + j];
        r[n - j] -= c[n + j];
    }
    (q, r)
}

/// The operations a Chebyshev evaluation is made of, each with the meaning
/// of the [`Evaluator`] method of the same name.
///
/// [`ChebyshevPolynomial::evaluate_with`] writes the baby-step giant-step
/// schedule once over this trait: the evaluator runs it on ciphertexts,
/// the [`Planner`](crate::plan::Planner) on shapes
/// ([`Planner::chebyshev`](crate::plan::Planner::chebyshev)), and a caller
/// that checks or costs each step (a job validator) on its own values, so
/// all of them follow the same steps.
pub trait ChebyshevOps {
    /// A ciphertext, or what stands for one.
    type Value: Clone;
    /// What a step fails with (the schedule's own refusals are
    /// [`CkksError`]s).
    type Error: From<CkksError>;
    /// The level of `x`.
    fn level(&self, x: &Self::Value) -> usize;
    /// The scale of `x`.
    fn scale(&self, x: &Self::Value) -> f64;
    /// The prime q_level as a float ([`crate::CkksParameters::q_f64`]).
    fn prime(&self, level: usize) -> f64;
    /// x · c ([`Evaluator::mul_const`]).
    fn mul_const(
        &mut self,
        x: &Self::Value,
        c: f64,
    ) -> std::result::Result<Self::Value, Self::Error>;
    /// x + c ([`Evaluator::add_const`]).
    fn add_const(
        &mut self,
        x: &Self::Value,
        c: f64,
    ) -> std::result::Result<Self::Value, Self::Error>;
    /// a · b, relinearized and rescaled ([`Evaluator::mul_relin_rescale`]).
    fn mul_relin_rescale(
        &mut self,
        a: &Self::Value,
        b: &Self::Value,
    ) -> std::result::Result<Self::Value, Self::Error>;
    /// x · k ([`Evaluator::mul_int`]).
    fn mul_int(&mut self, x: &Self::Value, k: i64)
    -> std::result::Result<Self::Value, Self::Error>;
    /// a + b ([`Evaluator::add`]).
    fn add(
        &mut self,
        a: &Self::Value,
        b: &Self::Value,
    ) -> std::result::Result<Self::Value, Self::Error>;
    /// a − b ([`Evaluator::sub`]).
    fn sub(
        &mut self,
        a: &Self::Value,
        b: &Self::Value,
    ) -> std::result::Result<Self::Value, Self::Error>;
    /// x at `level` ([`Evaluator::drop_level`]).
    fn drop_level(
        &mut self,
        x: &Self::Value,
        level: usize,
    ) -> std::result::Result<Self::Value, Self::Error>;
    /// x · round(c·s), scale times s ([`Evaluator::mul_const_raw`]).
    fn mul_const_raw(
        &mut self,
        x: &Self::Value,
        c: f64,
        s: f64,
    ) -> std::result::Result<Self::Value, Self::Error>;
    /// x / q_l ([`Evaluator::rescale`]).
    fn rescale(&mut self, x: &Self::Value) -> std::result::Result<Self::Value, Self::Error>;
    /// acc + x · round(c·s), x taken at acc's level
    /// ([`Evaluator::mul_const_raw_add_assign`]). The default drops,
    /// multiplies and adds; ciphertexts do it in place.
    fn mul_const_raw_add(
        &mut self,
        acc: &mut Self::Value,
        x: &Self::Value,
        c: f64,
        s: f64,
    ) -> std::result::Result<(), Self::Error> {
        let x = self.drop_level(x, self.level(acc))?;
        let term = self.mul_const_raw(&x, c, s)?;
        self.add_assign(acc, &term)
    }
    /// acc + x into acc ([`Evaluator::add_assign`]). The default adds and
    /// replaces; ciphertexts add in place.
    fn add_assign(
        &mut self,
        acc: &mut Self::Value,
        x: &Self::Value,
    ) -> std::result::Result<(), Self::Error> {
        *acc = self.add(acc, x)?;
        Ok(())
    }
    /// acc − x into acc ([`Evaluator::sub_assign`]), as
    /// [`Self::add_assign`].
    fn sub_assign(
        &mut self,
        acc: &mut Self::Value,
        x: &Self::Value,
    ) -> std::result::Result<(), Self::Error> {
        *acc = self.sub(acc, x)?;
        Ok(())
    }
    /// x + c into x ([`Evaluator::add_const_assign`]), as
    /// [`Self::add_assign`].
    fn add_const_assign(
        &mut self,
        x: &mut Self::Value,
        c: f64,
    ) -> std::result::Result<(), Self::Error> {
        *x = self.add_const(x, c)?;
        Ok(())
    }
}

fn polynomial_error<E: From<CkksError>>(what: &str) -> E {
    CkksError::Polynomial(what.into()).into()
}

struct Basis<V> {
    /// baby[k] = T_k for 1 ≤ k < g (index 0 unused, T_g a giant step).
    baby: Vec<Option<V>>,
    /// (n, T_n) for n = g, 2g, 4g, …
    giant: Vec<(usize, V)>,
}

impl<V: Clone> Basis<V> {
    /// The baby steps a leaf combines (T_1 alone, with coefficient 0, for
    /// a constant).
    fn leaf_terms(c: &[f64]) -> Vec<usize> {
        let used: Vec<usize> = (1..c.len()).filter(|&k| c[k] != 0.0).collect();
        if used.is_empty() { vec![1] } else { used }
    }

    fn baby_step(&self, k: usize) -> std::result::Result<&V, CkksError> {
        self.baby
            .get(k)
            .and_then(Option::as_ref)
            .ok_or_else(|| polynomial_error("missing baby step"))
    }

    /// T_n for a power of two n: a baby step below g, a giant step from g.
    fn power_of_two(&self, n: usize) -> std::result::Result<&V, CkksError> {
        match self.giant.iter().find(|(m, _)| *m == n) {
            Some((_, t)) => Ok(t),
            None => self.baby_step(n),
        }
    }

    /// Σ c_k·T_k at scale `target` and `level`: the baby steps are taken
    /// at level + 1 and each coefficient at q_{level+1}·target/scale(T_k),
    /// so every term has scale q_{level+1}·target before the one rescale.
    /// `None` where a baby step it needs is below level + 1.
    fn leaf<O: ChebyshevOps<Value = V>>(
        &self,
        ops: &mut O,
        c: &[f64],
        target: f64,
        level: usize,
    ) -> std::result::Result<Option<V>, O::Error> {
        let terms = Self::leaf_terms(c);
        let above = level + 1;
        for &k in &terms {
            if ops.level(self.baby_step(k)?) < above {
                return Ok(None);
            }
        }
        let ql = ops.prime(above);
        let mut acc: Option<V> = None;
        for &k in &terms {
            let t = self.baby_step(k)?;
            let coeff = c.get(k).copied().unwrap_or(0.0);
            let s = ql * target / ops.scale(t);
            match acc.as_mut() {
                None => {
                    let t = ops.drop_level(t, above)?;
                    acc = Some(scaled_const(ops, &t, coeff, s)?);
                }
                Some(a) => {
                    constant_fits(coeff, s, ops.scale(t))?;
                    ops.mul_const_raw_add(a, t, coeff, s)?;
                }
            }
        }
        let mut acc = acc.ok_or_else(|| polynomial_error("empty combination"))?;
        shift(ops, &mut acc, c[0])?;
        ops.rescale(&acc).map(Some)
    }

    /// p at scale `target` and `level`: a leaf where p's degree is below
    /// the giant steps and its baby steps are high enough, otherwise
    /// p = q·T_n + r for the largest power of two n ≤ deg p, q at the
    /// level above (where T_n is, for the depth [`ChebyshevPolynomial::depth`]
    /// gives: T_n takes log2 n levels and q fewer). Refused where a
    /// quotient's scale would fall below `floor`.
    fn eval_rec<O: ChebyshevOps<Value = V>>(
        &self,
        ops: &mut O,
        c: &[f64],
        target: f64,
        level: usize,
        floor: f64,
    ) -> std::result::Result<V, O::Error> {
        let d = c.len() - 1;
        if d < self.giant[0].0
            && let Some(v) = self.leaf(ops, c, target, level)?
        {
            return Ok(v);
        }
        if d == 0 {
            let e: CkksError = hecloud_rlwe::RlweError::LevelsExhausted { level, need: 1 }.into();
            return Err(e.into());
        }
        let n = 1 << (log2_ceil_succ(d) - 1);
        let tn = self.power_of_two(n)?;
        if ops.level(tn) <= level {
            return Err(polynomial_error("a power of two below its product's level"));
        }
        let (q, r) = divide(c, n);
        let q_target = target * ops.prime(level + 1) / ops.scale(tn);
        if q_target < floor {
            return Err(polynomial_error(&format!(
                "T_{n} is at scale 2^{:.1} over a prime of 2^{:.1} (primes of mixed sizes \
                 under one polynomial): a quotient would be taken at scale 2^{:.1}, {:.1} \
                 bits below the result's (at most {MAX_QUOTIENT_LOSS_BITS}), and its rounding \
                 would cost the result about as many bits; give the polynomial's levels \
                 primes of one size",
                ops.scale(tn).log2(),
                ops.prime(level + 1).log2(),
                q_target.log2(),
                (floor / q_target).log2() + MAX_QUOTIENT_LOSS_BITS,
            )));
        }
        let qv = self.eval_rec(ops, &q, q_target, level + 1, floor)?;
        let mut prod = ops.mul_relin_rescale(&qv, tn)?;
        let rv = self.eval_rec(ops, &r, target, level, floor)?;
        ops.add_assign(&mut prod, &rv)?;
        Ok(prod)
    }
}

/// How far below the result's scale a quotient's may fall. A product
/// rescaled by a prime smaller than its operands' scales lands above
/// them, and the giant steps, squared again and again, drift further: a
/// quotient multiplying T_n is taken at scale·q/scale(T_n), and its
/// rounding reaches the result that many bits larger. Measured at
/// N = 2^16, bootstrapping's cosine with one 61-bit prime above 60-bit
/// ones took a quotient 14 bits low and lost 8 bits; with two, 7 bits
/// low, it lost 1.3.
const MAX_QUOTIENT_LOSS_BITS: f64 = 10.0;

/// x · round(c·s), refused by the schedule itself (so that a validator
/// refuses it too) where c·s is beyond the evaluator's constants: the
/// basis's scales are far from the primes when the input's scale is.
fn scaled_const<O: ChebyshevOps>(
    ops: &mut O,
    x: &O::Value,
    c: f64,
    s: f64,
) -> std::result::Result<O::Value, O::Error> {
    constant_fits(c, s, ops.scale(x))?;
    ops.mul_const_raw(x, c, s)
}

/// x += c, refused like [`scaled_const`] where c at x's scale is out of
/// range.
fn shift<O: ChebyshevOps>(
    ops: &mut O,
    x: &mut O::Value,
    c: f64,
) -> std::result::Result<(), O::Error> {
    let s = ops.scale(x);
    constant_fits(c, s, s)?;
    ops.add_const_assign(x, c)
}

/// The least scale a nonzero constant is taken at: round(c·s) is c to
/// 2^-21 at this scale. Below it the rounding would eat the constant
/// silently (a polynomial on primes far below its input's scale).
const MIN_CONSTANT_SCALE: f64 = (1u64 << 20) as f64;

fn constant_fits(c: f64, s: f64, input: f64) -> std::result::Result<(), CkksError> {
    let v = (c * s).round();
    if v.is_finite() && v.abs() < MAX_CONSTANT && (c == 0.0 || s >= MIN_CONSTANT_SCALE) {
        return Ok(());
    }
    Err(CkksError::ValueOutOfRange(format!(
        "constant {c} at scale 2^{:.1} (an operand at scale 2^{:.1}): a polynomial needs an input scale near the primes",
        s.log2(),
        input.log2()
    )))
}

/// T_{2k} = 2·T_k² − 1 or T_{j+k} = 2·T_j·T_k − T_{|j−k|}. A T_{|j−k|}
/// whose scale differs from the product's is first multiplied by 1 at the
/// ratio and rescaled, at the level above the product's (it always has
/// one: it is of lower degree than T_j or T_k, so it was computed in fewer
/// levels).
pub(crate) fn chebyshev_product<O: ChebyshevOps>(
    ops: &mut O,
    tj: &O::Value,
    tk: &O::Value,
    t_diff: Option<&O::Value>,
) -> std::result::Result<O::Value, O::Error> {
    // Doubled before the product, so that the rescale's rounding is not
    // doubled with it (the product's own value is the same).
    let twice = ops.mul_int(tj, 2)?;
    let mut p = ops.mul_relin_rescale(&twice, tk)?;
    let Some(t) = t_diff else {
        shift(ops, &mut p, -1.0)?;
        return Ok(p);
    };
    let (sp, st) = (ops.scale(&p), ops.scale(t));
    if sp == st || ops.level(t) <= ops.level(&p) {
        ops.sub_assign(&mut p, t)?;
        return Ok(p);
    }
    let above = ops.level(&p) + 1;
    let t = ops.drop_level(t, above)?;
    let t = scaled_const(ops, &t, 1.0, ops.prime(above) * sp / st)?;
    let t = ops.rescale(&t)?;
    ops.sub_assign(&mut p, &t)?;
    Ok(p)
}

impl ChebyshevPolynomial {
    /// The baby-step giant-step evaluation of this polynomial on `x`, step
    /// by step on `ops`: the schedule [`Evaluator::evaluate_chebyshev`]
    /// runs and [`Planner::chebyshev`](crate::plan::Planner::chebyshev)
    /// plans. Refuses (with [`CkksError::Polynomial`]) empty or non-finite
    /// coefficients, an interval without a < b, an `x` below
    /// [`Self::depth`], and levels whose primes are so far from the
    /// scales that a quotient would be taken more than 10 bits below the
    /// result's scale (primes of mixed sizes); a ciphertext product comes
    /// only after every step it depends on.
    pub fn evaluate_with<O: ChebyshevOps>(
        &self,
        ops: &mut O,
        x: &O::Value,
    ) -> std::result::Result<O::Value, O::Error> {
        let d = self.degree();
        if self.coeffs.is_empty() || self.coeffs.iter().any(|c| !c.is_finite()) {
            return Err(polynomial_error("coefficients must be finite"));
        }
        if self.a >= self.b || !self.a.is_finite() || !self.b.is_finite() {
            return Err(polynomial_error("interval must satisfy a < b"));
        }
        let level = ops.level(x);
        if level < self.depth() {
            return Err(polynomial_error(&format!(
                "degree {d} needs {} levels, the ciphertext has {level}",
                self.depth(),
            )));
        }
        // y = (2x − a − b)/(b − a).
        let y = if self.needs_affine() {
            let mut s = ops.mul_const(x, 2.0 / (self.b - self.a))?;
            shift(ops, &mut s, -(self.a + self.b) / (self.b - self.a))?;
            s
        } else {
            x.clone()
        };
        let out_level = ops.level(&y) - log2_ceil_succ(d);
        let g = baby_count(d);
        let mut baby: Vec<Option<O::Value>> = vec![None; g + 1];
        baby[1] = Some(y);
        for k in 2..=g {
            let (j, i) = (k / 2, k - k / 2);
            let tj = baby[j].as_ref().ok_or_else(|| polynomial_error("T_j"))?;
            let ti = baby[i].as_ref().ok_or_else(|| polynomial_error("T_i"))?;
            let diff = if i == j { None } else { baby[i - j].as_ref() };
            let t = chebyshev_product(ops, tj, ti, diff)?;
            baby[k] = Some(t);
        }
        // T_g moves to the giant steps: leaves combine T_k for k < g only.
        let tg = baby[g].take().ok_or_else(|| polynomial_error("T_g"))?;
        let mut giant = vec![(g, tg)];
        while let Some((n, t)) = giant.last()
            && 2 * n <= d
        {
            let next = (2 * n, chebyshev_product(ops, t, t, None)?);
            giant.push(next);
        }
        let target = ops.scale(x);
        let floor = target / MAX_QUOTIENT_LOSS_BITS.exp2();
        Basis { baby, giant }.eval_rec(ops, &self.coeffs, target, out_level, floor)
    }
}

/// [`CkksError::Cancelled`] once `cancel` is raised (every cancellable
/// evaluation reads it through this). Relaxed: the flag publishes no data,
/// it only has to be seen eventually.
pub(crate) fn not_cancelled(cancel: &AtomicBool) -> Result<()> {
    if cancel.load(Ordering::Relaxed) {
        Err(CkksError::Cancelled)
    } else {
        Ok(())
    }
}

/// The schedule on ciphertexts, giving up before a product once `cancel`
/// is raised.
pub(crate) struct Cancellable<'a> {
    pub(crate) eval: &'a Evaluator,
    pub(crate) cancel: &'a AtomicBool,
}

impl ChebyshevOps for Cancellable<'_> {
    type Value = Ciphertext;
    type Error = CkksError;

    fn level(&self, x: &Ciphertext) -> usize {
        x.level()
    }

    fn scale(&self, x: &Ciphertext) -> f64 {
        x.scale()
    }

    fn prime(&self, level: usize) -> f64 {
        self.eval.params().q_f64(level)
    }

    fn mul_const(&mut self, x: &Ciphertext, c: f64) -> Result<Ciphertext> {
        self.eval.mul_const(x, c)
    }

    fn add_const(&mut self, x: &Ciphertext, c: f64) -> Result<Ciphertext> {
        self.eval.add_const(x, Complex64::new(c, 0.0))
    }

    /// Every key switch of the evaluation is one of these: the flag is
    /// read before each.
    fn mul_relin_rescale(&mut self, a: &Ciphertext, b: &Ciphertext) -> Result<Ciphertext> {
        not_cancelled(self.cancel)?;
        self.eval.mul_relin_rescale(a, b)
    }

    fn mul_int(&mut self, x: &Ciphertext, k: i64) -> Result<Ciphertext> {
        self.eval.mul_int(x, k)
    }

    fn add(&mut self, a: &Ciphertext, b: &Ciphertext) -> Result<Ciphertext> {
        self.eval.add(a, b)
    }

    fn sub(&mut self, a: &Ciphertext, b: &Ciphertext) -> Result<Ciphertext> {
        self.eval.sub(a, b)
    }

    fn drop_level(&mut self, x: &Ciphertext, level: usize) -> Result<Ciphertext> {
        self.eval.drop_level(x, level)
    }

    fn mul_const_raw(&mut self, x: &Ciphertext, c: f64, s: f64) -> Result<Ciphertext> {
        self.eval.mul_const_raw(x, c, s)
    }

    fn rescale(&mut self, x: &Ciphertext) -> Result<Ciphertext> {
        self.eval.rescale(x)
    }

    fn mul_const_raw_add(
        &mut self,
        acc: &mut Ciphertext,
        x: &Ciphertext,
        c: f64,
        s: f64,
    ) -> Result<()> {
        self.eval.mul_const_raw_add_assign(acc, x, c, s)
    }

    fn add_assign(&mut self, acc: &mut Ciphertext, x: &Ciphertext) -> Result<()> {
        self.eval.add_assign(acc, x)
    }

    fn sub_assign(&mut self, acc: &mut Ciphertext, x: &Ciphertext) -> Result<()> {
        self.eval.sub_assign(acc, x)
    }

    fn add_const_assign(&mut self, x: &mut Ciphertext, c: f64) -> Result<()> {
        self.eval.add_const_assign(x, Complex64::new(c, 0.0))
    }
}

impl Evaluator {
    /// Evaluates `poly` slot-wise on `ct` (real slots in [a, b]) with
    /// baby-step giant-step in the Chebyshev basis; consumes
    /// [`ChebyshevPolynomial::depth`] levels.
    ///
    /// ```
    /// use hecloud_ckks::{*, params::test_literal, polynomial::ChebyshevPolynomial};
    /// let params = CkksParameters::new_insecure_for_tests(test_literal(10, 6), 45).unwrap();
    /// let keys = KeySet::generate(&params, &[], false).unwrap();
    /// let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
    /// let p = ChebyshevPolynomial::interpolate(|x| 1.0 / (1.0 + (-4.0 * x).exp()), 15, -1.0, 1.0);
    /// let x: Vec<f64> = (0..512).map(|i| i as f64 / 256.0 - 1.0).collect();
    /// let ct = keys.encrypt(&enc.encode_real(&x, 6, params.default_scale()).unwrap()).unwrap();
    /// let out = eval.evaluate_chebyshev(&ct, &p).unwrap();
    /// let got = enc.decode_real(&keys.decrypt(&out).unwrap()).unwrap();
    /// assert!((got[100] - p.eval(x[100])).abs() < 1e-5);
    /// ```
    pub fn evaluate_chebyshev(
        &self,
        ct: &Ciphertext,
        poly: &ChebyshevPolynomial,
    ) -> Result<Ciphertext> {
        self.evaluate_chebyshev_cancellable(ct, poly, &AtomicBool::new(false))
    }

    /// [`Self::evaluate_chebyshev`] that gives up with
    /// [`CkksError::Cancelled`] once `cancel` is raised: the flag is read
    /// before every ciphertext product (each a key switch), so a
    /// high-degree evaluation stops within one of them.
    ///
    /// ```
    /// use std::sync::atomic::AtomicBool;
    /// use hecloud_ckks::{*, params::test_literal, polynomial::ChebyshevPolynomial};
    /// let params = CkksParameters::new_insecure_for_tests(test_literal(10, 6), 45).unwrap();
    /// let keys = KeySet::generate(&params, &[], false).unwrap();
    /// let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
    /// let p = ChebyshevPolynomial::interpolate(|x| x.sin(), 15, -1.0, 1.0);
    /// let ct = keys.encrypt(&enc.encode_real(&[0.5], 6, params.default_scale()).unwrap()).unwrap();
    /// let raised = AtomicBool::new(true);
    /// assert!(matches!(
    ///     eval.evaluate_chebyshev_cancellable(&ct, &p, &raised),
    ///     Err(CkksError::Cancelled)
    /// ));
    /// ```
    pub fn evaluate_chebyshev_cancellable(
        &self,
        ct: &Ciphertext,
        poly: &ChebyshevPolynomial,
        cancel: &AtomicBool,
    ) -> Result<Ciphertext> {
        poly.evaluate_with(&mut Cancellable { eval: self, cancel }, ct)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn division_identity_holds_in_the_clear() {
        let p = ChebyshevPolynomial::interpolate(|x| (3.0 * x).sin(), 20, -1.0, 1.0);
        let (q, r) = divide(&p.coeffs, 16);
        let (qp, rp) = (
            ChebyshevPolynomial {
                coeffs: q,
                a: -1.0,
                b: 1.0,
            },
            ChebyshevPolynomial {
                coeffs: r,
                a: -1.0,
                b: 1.0,
            },
        );
        let t16 = ChebyshevPolynomial {
            coeffs: (0..=16).map(|k| if k == 16 { 1.0 } else { 0.0 }).collect(),
            a: -1.0,
            b: 1.0,
        };
        for x in [-0.9, -0.2, 0.0, 0.4, 0.77] {
            let want = p.eval(x);
            let got = qp.eval(x) * t16.eval(x) + rp.eval(x);
            assert!((want - got).abs() < 1e-12, "{x}: {want} vs {got}");
        }
        assert_eq!(baby_count(63), 8);
        assert_eq!(baby_count(3), 2);
    }

    /// The schedule on clear values (value, level): it must compute p(x)
    /// and consume exactly `depth` levels.
    struct Clear;

    impl ChebyshevOps for Clear {
        type Value = (f64, usize);
        type Error = CkksError;
        fn level(&self, x: &(f64, usize)) -> usize {
            x.1
        }
        // Every scale and prime 2^40, as in a layout at the default scale.
        fn scale(&self, _: &(f64, usize)) -> f64 {
            (1u64 << 40) as f64
        }
        fn prime(&self, _: usize) -> f64 {
            (1u64 << 40) as f64
        }
        fn mul_const(&mut self, x: &(f64, usize), c: f64) -> Result<(f64, usize)> {
            Ok((x.0 * c, x.1 - 1))
        }
        fn add_const(&mut self, x: &(f64, usize), c: f64) -> Result<(f64, usize)> {
            Ok((x.0 + c, x.1))
        }
        fn mul_relin_rescale(
            &mut self,
            a: &(f64, usize),
            b: &(f64, usize),
        ) -> Result<(f64, usize)> {
            Ok((a.0 * b.0, a.1.min(b.1) - 1))
        }
        fn mul_int(&mut self, x: &(f64, usize), k: i64) -> Result<(f64, usize)> {
            Ok((x.0 * k as f64, x.1))
        }
        fn add(&mut self, a: &(f64, usize), b: &(f64, usize)) -> Result<(f64, usize)> {
            Ok((a.0 + b.0, a.1.min(b.1)))
        }
        fn sub(&mut self, a: &(f64, usize), b: &(f64, usize)) -> Result<(f64, usize)> {
            Ok((a.0 - b.0, a.1.min(b.1)))
        }
        fn drop_level(&mut self, x: &(f64, usize), level: usize) -> Result<(f64, usize)> {
            Ok((x.0, level))
        }
        fn mul_const_raw(&mut self, x: &(f64, usize), c: f64, _: f64) -> Result<(f64, usize)> {
            Ok((x.0 * c, x.1))
        }
        fn rescale(&mut self, x: &(f64, usize)) -> Result<(f64, usize)> {
            Ok((x.0, x.1 - 1))
        }
    }

    #[test]
    fn the_schedule_computes_the_polynomial_in_its_depth() {
        let intervals = [(-1.0, 1.0), (-3.0, 2.0)];
        for (d, (a, b)) in (0..=70).chain([127, 128]).zip(intervals.iter().cycle()) {
            let p = ChebyshevPolynomial::interpolate(|x| (2.0 * x).cos() + x, d, *a, *b);
            for x in [*a, 0.3 * a + 0.7 * b, *b] {
                let (y, level) = p.evaluate_with(&mut Clear, &(x, 20)).unwrap();
                assert!((y - p.eval(x)).abs() < 1e-9, "degree {d} at {x}");
                assert_eq!(20 - level, p.depth(), "degree {d}");
            }
        }
        // ⌈log2(d + 1)⌉ levels, as Lattigo's: degree 30 (the cosine of
        // bootstrapping) in 5, 31 in 5, 32 in 6.
        for (d, depth) in [(1, 1), (2, 2), (3, 2), (6, 3), (30, 5), (31, 5), (32, 6)] {
            let p = ChebyshevPolynomial::interpolate(|x| x, d, -1.0, 1.0);
            assert_eq!(p.depth(), depth, "degree {d}");
        }
        let p = ChebyshevPolynomial::interpolate(|x| x, 7, -1.0, 1.0);
        assert!(matches!(
            p.evaluate_with(&mut Clear, &(0.5, p.depth() - 1)),
            Err(CkksError::Polynomial(_))
        ));
    }
}
