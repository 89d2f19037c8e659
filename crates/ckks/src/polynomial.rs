//! Polynomial evaluation in the Chebyshev basis with baby-step giant-step
//! (Han–Ki / Lattigo style): the Chebyshev polynomials T_1 … T_g (baby
//! steps, g a power of two near √(d+1)) and T_g, T_2g, T_4g, … (giant steps)
//! are computed once; p is split recursively by Chebyshev division,
//! p = q·T_n + r with T_{n+j} = 2·T_n·T_j − T_{n−j}, and the leaves are
//! linear combinations of baby steps. Levels are matched by dropping limbs
//! and scales tracked exactly (all stay within the evaluator's tolerance of
//! Δ because the primes are within 2^-30 of one another).

use std::sync::atomic::{AtomicBool, Ordering};

use hecloud_rlwe::Ciphertext;
use num_complex::Complex64;

use crate::error::{CkksError, Result};
use crate::evaluator::Evaluator;

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

    /// Levels consumed by [`Evaluator::evaluate_chebyshev`].
    pub fn depth(&self) -> usize {
        let d = self.degree().max(1);
        let log = usize::BITS as usize - d.leading_zeros() as usize; // ⌈log2(d+1)⌉
        log + 1 + self.needs_affine() as usize
    }
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

struct Basis<'a> {
    eval: &'a Evaluator,
    cancel: &'a AtomicBool,
    /// baby[k] = T_k for 1 ≤ k ≤ g (index 0 unused).
    baby: Vec<Option<Ciphertext>>,
    /// (n, T_n) for n = g, 2g, 4g, …
    giant: Vec<(usize, Ciphertext)>,
}

impl Basis<'_> {
    fn leaf(&self, c: &[f64]) -> Result<Ciphertext> {
        let ev = self.eval;
        // Linear combination at the lowest level among the terms used.
        let used: Vec<usize> = (1..c.len()).filter(|&k| c[k] != 0.0).collect();
        let terms: Vec<usize> = if used.is_empty() { vec![1] } else { used };
        let level = terms
            .iter()
            .filter_map(|&k| self.baby[k].as_ref().map(|t| t.level()))
            .min()
            .ok_or_else(|| CkksError::Polynomial("missing baby step".into()))?;
        if level == 0 {
            return Err(hecloud_rlwe::RlweError::LevelsExhausted { level, need: 1 }.into());
        }
        let ql = ev.params().q_f64(level);
        let mut acc: Option<Ciphertext> = None;
        for &k in &terms {
            let t = self.baby[k]
                .as_ref()
                .ok_or_else(|| CkksError::Polynomial("missing baby step".into()))?;
            let t = ev.drop_level(t, level)?;
            let coeff = c.get(k).copied().unwrap_or(0.0);
            let term = ev.mul_const_raw(&t, coeff, ql)?;
            acc = Some(match acc {
                None => term,
                Some(a) => ev.add(&a, &term)?,
            });
        }
        let acc = acc.ok_or_else(|| CkksError::Polynomial("empty combination".into()))?;
        let acc = ev.add_const(&acc, Complex64::new(c[0], 0.0))?;
        ev.rescale(&acc)
    }

    fn eval_rec(&self, c: &[f64]) -> Result<Ciphertext> {
        let g = self.giant[0].0;
        let d = c.len() - 1;
        if d < g {
            return self.leaf(c);
        }
        let (n, tn) = self
            .giant
            .iter()
            .rev()
            .find(|(n, _)| *n <= d)
            .ok_or_else(|| CkksError::Polynomial("missing giant step".into()))?;
        let (q, r) = divide(c, *n);
        let qv = self.eval_rec(&q)?;
        not_cancelled(self.cancel)?;
        let prod = self.eval.mul_relin_rescale(&qv, tn)?;
        let rv = self.eval_rec(&r)?;
        self.eval.add(&prod, &rv)
    }
}

/// Relaxed: the flag publishes no data, it only has to be seen eventually.
fn not_cancelled(cancel: &AtomicBool) -> Result<()> {
    if cancel.load(Ordering::Relaxed) {
        Err(CkksError::Cancelled)
    } else {
        Ok(())
    }
}

impl Evaluator {
    /// T_{2k} = 2·T_k² − 1 or T_{j+k} = 2·T_j·T_k − T_{|j−k|}.
    fn chebyshev_product(
        &self,
        tj: &Ciphertext,
        tk: &Ciphertext,
        t_diff: Option<&Ciphertext>,
    ) -> Result<Ciphertext> {
        let p = self.mul_relin_rescale(tj, tk)?;
        let p = self.mul_int(&p, 2)?;
        match t_diff {
            Some(t) => self.sub(&p, t),
            None => self.add_const(&p, Complex64::new(-1.0, 0.0)),
        }
    }

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
        let d = poly.degree();
        if poly.coeffs.is_empty() || poly.coeffs.iter().any(|c| !c.is_finite()) {
            return Err(CkksError::Polynomial("coefficients must be finite".into()));
        }
        if poly.a >= poly.b || !poly.a.is_finite() || !poly.b.is_finite() {
            return Err(CkksError::Polynomial("interval must satisfy a < b".into()));
        }
        if ct.level() < poly.depth() {
            return Err(CkksError::Polynomial(format!(
                "degree {d} needs {} levels, the ciphertext has {}",
                poly.depth(),
                ct.level()
            )));
        }
        // y = (2x − a − b)/(b − a).
        let y = if poly.needs_affine() {
            let s = self.mul_const(ct, 2.0 / (poly.b - poly.a))?;
            self.add_const(
                &s,
                Complex64::new(-(poly.a + poly.b) / (poly.b - poly.a), 0.0),
            )?
        } else {
            ct.clone()
        };
        let g = baby_count(d);
        let mut baby: Vec<Option<Ciphertext>> = vec![None; g + 1];
        baby[1] = Some(y);
        for k in 2..=g {
            let (j, i) = (k / 2, k - k / 2);
            let t = {
                let tj = baby[j]
                    .as_ref()
                    .ok_or_else(|| CkksError::Polynomial("T_j".into()))?;
                let ti = baby[i]
                    .as_ref()
                    .ok_or_else(|| CkksError::Polynomial("T_i".into()))?;
                let diff = if i == j { None } else { baby[i - j].as_ref() };
                not_cancelled(cancel)?;
                self.chebyshev_product(tj, ti, diff)?
            };
            baby[k] = Some(t);
        }
        let mut giant = vec![(
            g,
            baby[g]
                .clone()
                .ok_or_else(|| CkksError::Polynomial("T_g".into()))?,
        )];
        while giant.last().map(|(n, _)| 2 * n <= d).unwrap_or(false) {
            let (n, t) = giant
                .last()
                .cloned()
                .ok_or_else(|| CkksError::Polynomial("giant".into()))?;
            not_cancelled(cancel)?;
            giant.push((2 * n, self.chebyshev_product(&t, &t, None)?));
        }
        let basis = Basis {
            eval: self,
            cancel,
            baby,
            giant,
        };
        basis.eval_rec(&poly.coeffs)
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
}
