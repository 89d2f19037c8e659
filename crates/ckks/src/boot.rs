//! CKKS bootstrapping (issue 25), a first test-sized form: [`mod_raise`],
//! [`EvalMod`], the homomorphic DFTs of [`crate::dft`], and
//! [`Bootstrapper`], which composes them. Not built yet: 128-bit presets
//! for it, sparse-secret encapsulation, sparse slots, the arcsine
//! correction, double hoisting, and its place in the service.
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
/// bound + 1], then r double-angle steps cos 2θ = 2cos²θ − 1; the
/// factor 1/2π is read into the scale (no level).
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
        self.cosine.depth() + self.double_angles as usize
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
        c.set_scale(c.scale() * 2.0 * std::f64::consts::PI);
        Ok(c)
    }
}

/// i·x in every slot: the product by the monomial X^(N/2), exact and free
/// of levels (X^(N/2) evaluates to ±i at the slot roots, +i at the
/// encoder's, 5^j ≡ 1 mod 4).
pub fn times_i(ct: &Ciphertext) -> Result<Ciphertext> {
    let mut out = ct.clone();
    for p in out.polys_mut() {
        p.to_coefficient();
        let n = p.degree();
        let moduli = p.basis().moduli().to_vec();
        for (l, m) in moduli.iter().enumerate() {
            let limb = p.limb_mut(l);
            let (lo, hi) = limb.split_at_mut(n / 2);
            // X^(N/2)·(a + b·X^(N/2)) = −b + a·X^(N/2).
            for (a, b) in lo.iter_mut().zip(hi.iter_mut()) {
                let (na, nb) = (m.neg(*b), *a);
                *a = na;
                *b = nb;
            }
        }
        p.to_ntt();
    }
    Ok(out)
}

/// What a bootstrapping circuit is made of (checked by
/// [`Bootstrapper::new`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootstrapLiteral {
    /// Levels of CoeffsToSlots (1 to log2 of the slots).
    pub cts_levels: usize,
    /// Levels of SlotsToCoeffs.
    pub stc_levels: usize,
    /// [`EvalMod`]'s bound on the integer part ModRaise adds.
    pub eval_mod_bound: u32,
    /// Degree of [`EvalMod`]'s Chebyshev cosine.
    pub eval_mod_degree: usize,
    /// [`EvalMod`]'s double-angle steps.
    pub double_angles: u32,
    /// log2 of q₀/Δ_in: the message is that many bits below q₀ inside
    /// EvalMod, where sin(2πy)/2π ≈ y holds to about 3·ratio bits; an input
    /// at a lower scale is first multiplied up by an integer.
    pub log_message_ratio: u32,
}

/// Bootstrapping at full slots, assembled from its pieces: ModRaise,
/// CoeffsToSlots, the real and imaginary parts apart (one conjugation),
/// EvalMod on each, the two together again, SlotsToCoeffs. Every constant
/// factor (CoeffsToSlots' 1/n, the halving of the real/imaginary split,
/// EvalMod's 1/2π, the message ratio) is read into a scale rather than
/// multiplied in: no level and no precision is spent on them. Not there
/// yet: sparse-secret encapsulation, the arcsine correction, sparse slots.
#[derive(Debug, Clone)]
pub struct Bootstrapper {
    params: Arc<CkksParameters>,
    encoder: crate::Encoder,
    cts: crate::dft::HomomorphicDft,
    stc: crate::dft::HomomorphicDft,
    eval_mod: EvalMod,
    literal: BootstrapLiteral,
}

impl Bootstrapper {
    /// The circuit of `literal` for `params`. Refused: DFT level counts out
    /// of range, an [`EvalMod`] it cannot build, a message ratio outside
    /// 1..=30, or a circuit deeper than the parameters' top level.
    pub fn new(params: &Arc<CkksParameters>, literal: BootstrapLiteral) -> Result<Self> {
        let encoder = crate::Encoder::new(params);
        if !(1..=30).contains(&literal.log_message_ratio) {
            return Err(CkksError::ValueOutOfRange(format!(
                "message ratio 2^{} (1 to 30 bits)",
                literal.log_message_ratio
            )));
        }
        let boot = Self {
            cts: crate::dft::HomomorphicDft::coeffs_to_slots(&encoder, literal.cts_levels)?,
            stc: crate::dft::HomomorphicDft::slots_to_coeffs(&encoder, literal.stc_levels)?,
            eval_mod: EvalMod::new(
                literal.eval_mod_bound,
                literal.eval_mod_degree,
                literal.double_angles,
            )?,
            params: params.clone(),
            encoder,
            literal,
        };
        if params.max_level() < boot.depth() {
            return Err(hecloud_rlwe::RlweError::LevelsExhausted {
                level: params.max_level(),
                need: boot.depth(),
            }
            .into());
        }
        Ok(boot)
    }

    /// The literal it was built from.
    pub fn literal(&self) -> &BootstrapLiteral {
        &self.literal
    }

    /// The rotations it needs keys for (and the conjugation key).
    pub fn rotations(&self) -> Vec<i64> {
        let mut r = self.cts.rotations();
        r.extend(self.stc.rotations());
        r.sort_unstable();
        r.dedup();
        r
    }

    /// Levels it spends from the top: CoeffsToSlots, EvalMod,
    /// SlotsToCoeffs. The result is at the top level minus this.
    pub fn depth(&self) -> usize {
        self.cts.levels() + self.eval_mod.depth() + self.stc.levels()
    }

    /// The level of a bootstrapped ciphertext.
    pub fn output_level(&self) -> usize {
        self.params.max_level() - self.depth()
    }

    /// Refused unless `eval` holds the relinearization key, the
    /// conjugation key and a key for each of [`Self::rotations`].
    pub fn check_keys(&self, eval: &Evaluator) -> Result<()> {
        let keys = eval.keys();
        if keys.relin.is_none() {
            return Err(hecloud_rlwe::RlweError::MissingRelinearizationKey.into());
        }
        let n = self.params.n();
        let conj = hecloud_rlwe::keys::galois_element_conjugate(n);
        let elements = self
            .rotations()
            .into_iter()
            .map(|k| hecloud_rlwe::keys::galois_element_for_rotation(k, n))
            .chain(std::iter::once(conj))
            .filter(|&g| g != 1);
        for g in elements {
            keys.galois.get(g)?;
        }
        Ok(())
    }

    /// A top-level encryption of `ct`'s slots, at level
    /// [`Self::output_level`] and the parameters' default scale. `ct` must
    /// be at level 0 (drop it there first) with a scale at most
    /// q₀/2^ratio; a lower scale is multiplied up to it by an integer
    /// (exact, no level). Keys and inputs are checked before any work.
    pub fn bootstrap(&self, eval: &Evaluator, ct: &Ciphertext) -> Result<Ciphertext> {
        let params = &self.params;
        self.check_keys(eval)?;
        let q0 = params.q_f64(0);
        let target = q0 / f64::from(self.literal.log_message_ratio).exp2();
        let scale = ct.scale();
        if !(scale.is_finite() && scale >= 1.0 && scale <= target * (1.0 + 1e-9)) {
            return Err(CkksError::ValueOutOfRange(format!(
                "bootstrapping takes a scale up to q0/2^{} = 2^{:.2}, not 2^{:.2}",
                self.literal.log_message_ratio,
                target.log2(),
                scale.log2()
            )));
        }
        let factor = (target / scale).floor() as i64;
        let mut ct = eval.mul_int(ct, factor)?;
        ct.set_scale(scale * factor as f64);
        let input_scale = ct.scale();
        let mut raised = mod_raise(params, &ct)?;
        // Read at scale 2·q₀ its slots are t/2q₀: half of an integer plus
        // the message's fraction once in the coefficient domain (the half
        // is what the real/imaginary split below wants).
        raised.set_scale(2.0 * q0);
        let eval_mod_scale = params.q_f64(params.max_level() - self.cts.levels());
        let half = self
            .cts
            .apply_to_scale(eval, &self.encoder, &raised, eval_mod_scale)?;
        let conj = eval.conjugate(&half)?;
        let re = eval.add(&half, &conj)?;
        let im = times_i(&eval.sub(&conj, &half)?)?;
        let re = self.eval_mod.apply(eval, &re)?;
        let im = self.eval_mod.apply(eval, &im)?;
        let mut u = eval.add(&re, &times_i(&im)?)?;
        // The slots hold (Δ_in/q₀)·m: read at this scale, m.
        u.set_scale(u.scale() * input_scale / q0);
        self.stc
            .apply_to_scale(eval, &self.encoder, &u, params.default_scale())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::test_literal;
    use crate::{Encoder, KeySet};

    #[test]
    fn times_i_multiplies_every_slot_by_i() {
        let params = CkksParameters::new_insecure_for_tests(test_literal(10, 1), 40).unwrap();
        let keys = KeySet::generate(&params, &[], false).unwrap();
        let enc = Encoder::new(&params);
        let z: Vec<Complex64> = (0..params.slots())
            .map(|k| Complex64::new(k as f64 / 512.0, 0.5 - k as f64 / 1024.0))
            .collect();
        let ct = keys
            .encrypt(&enc.encode(&z, 1, params.default_scale()).unwrap())
            .unwrap();
        let got = enc
            .decode(&keys.decrypt(&times_i(&ct).unwrap()).unwrap())
            .unwrap();
        for (a, b) in z.iter().zip(&got) {
            assert!((a * Complex64::i() - b).norm() < 1e-6);
        }
    }
}
