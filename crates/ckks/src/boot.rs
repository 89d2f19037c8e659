//! Pieces of CKKS bootstrapping (issue 25), each tested on its own:
//! [`mod_raise`] and [`EvalMod`]; the homomorphic DFTs are in
//! [`crate::dft`]. Bootstrapping itself (their composition, with its
//! parameters and keys) is not built yet.
//!
//! After [`mod_raise`], a ciphertext that decrypted to t mod q₀ decrypts to
//! t + q₀·I mod Q_L, with I a small integer polynomial (its coefficients
//! are bounded by about the secret's Hamming weight, in practice a few
//! standard deviations of √(h/12)). CoeffsToSlots puts the coefficients
//! into slots; there, divided by q₀, each is an integer plus the message's
//! small fraction, and [`EvalMod`] removes the integer:
//! y mod 1 ≈ sin(2πy)/2π for y near an integer.

use std::sync::Arc;

use hecloud_math::{Domain, RnsPoly};
use hecloud_rlwe::Ciphertext;
use num_complex::Complex64;

use crate::error::{CkksError, Result};
use crate::evaluator::Evaluator;
use crate::params::CkksParameters;
use crate::polynomial::ChebyshevPolynomial;

/// The ciphertext at level 0 lifted to the top level: each coefficient of
/// c₀ and c₁, centred mod q₀, is taken as an integer mod every prime of
/// Q_L. The scale is kept. Refused: a ciphertext above level 0 (drop it
/// first: the lift reads q₀ only) or not of degree 1.
pub fn mod_raise(params: &Arc<CkksParameters>, ct: &Ciphertext) -> Result<Ciphertext> {
    if ct.level() != 0 {
        return Err(CkksError::ValueOutOfRange(format!(
            "ModRaise takes a ciphertext at level 0, not {}",
            ct.level()
        )));
    }
    if ct.degree() != 1 {
        return Err(hecloud_rlwe::RlweError::CiphertextDegree {
            expected: 1,
            found: ct.degree(),
        }
        .into());
    }
    let rlwe = params.rlwe();
    let top = params.max_level();
    let basis = rlwe.q_at(top)?.clone();
    let q0 = rlwe.q_basis().moduli()[0].value();
    let n = params.n();
    let polys = ct
        .polys()
        .iter()
        .map(|p| {
            let mut c = p.clone();
            c.to_coefficient();
            let mut data = vec![0u64; (top + 1) * n];
            for (limb, m) in data.chunks_exact_mut(n).zip(basis.moduli()) {
                for (x, &v) in limb.iter_mut().zip(c.limb(0)) {
                    // Centred: v > q₀/2 stands for v − q₀.
                    *x = if v > q0 / 2 {
                        m.neg(m.reduce(q0 - v))
                    } else {
                        m.reduce(v)
                    };
                }
            }
            let mut out = RnsPoly::from_limbs(&basis, Domain::Coefficient, data)?;
            out.to_ntt();
            Ok(out)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Ciphertext::new(rlwe, polys, top, ct.scale())?)
}

/// y mod 1, homomorphically, for real slot values y = I + δ with I an
/// integer, |I| ≤ `bound`, and δ small: sin(2πy)/2π = δ − (2π)²δ³/6 + …
/// (the cubic term is what an arcsine correction would remove), computed as
/// cos(2π(y − 1/4)/2^r) by a Chebyshev interpolant on [−bound − 1,
/// bound + 1], then r double-angle steps cos 2θ = 2cos²θ − 1, then a
/// product by 1/2π.
#[derive(Debug, Clone)]
pub struct EvalMod {
    cosine: ChebyshevPolynomial,
    double_angles: u32,
}

impl EvalMod {
    /// For integers up to `bound` in magnitude, with a Chebyshev
    /// interpolant of `degree` and `double_angles` double-angle steps (the
    /// interpolant covers (2·bound + 2)·2π/2^r radians of cosine).
    pub fn new(bound: u32, degree: usize, double_angles: u32) -> Result<Self> {
        if bound == 0 || degree == 0 || double_angles > 16 {
            return Err(CkksError::ValueOutOfRange(format!(
                "EvalMod with bound {bound}, degree {degree}, {double_angles} double angles"
            )));
        }
        let r = f64::from(double_angles).exp2();
        let b = f64::from(bound) + 1.0;
        let tau = 2.0 * std::f64::consts::PI;
        let cosine =
            ChebyshevPolynomial::interpolate(move |y| (tau * (y - 0.25) / r).cos(), degree, -b, b);
        Ok(Self {
            cosine,
            double_angles,
        })
    }

    /// Levels [`Self::apply`] spends.
    pub fn depth(&self) -> usize {
        self.cosine.depth() + self.double_angles as usize + 1
    }

    /// sin(2πy)/2π in the clear: what [`Self::apply`] approximates.
    pub fn reference(y: f64) -> f64 {
        (2.0 * std::f64::consts::PI * y).sin() / (2.0 * std::f64::consts::PI)
    }

    /// The slots' values mod 1 (real slots; [`Self::depth`] levels).
    pub fn apply(&self, eval: &Evaluator, ct: &Ciphertext) -> Result<Ciphertext> {
        if ct.level() < self.depth() {
            return Err(hecloud_rlwe::RlweError::LevelsExhausted {
                level: ct.level(),
                need: self.depth(),
            }
            .into());
        }
        let mut c = eval.evaluate_chebyshev(ct, &self.cosine)?;
        for _ in 0..self.double_angles {
            let sq = eval.mul_relin_rescale(&c, &c)?;
            c = eval.add_const(&eval.mul_int(&sq, 2)?, Complex64::new(-1.0, 0.0))?;
        }
        eval.mul_const(&c, 1.0 / (2.0 * std::f64::consts::PI))
    }
}
