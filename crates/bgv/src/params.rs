//! BGV parameters: RLWE parameters with a plaintext modulus t, validated
//! for decryption at level 0, the noise model of every operation, and the
//! named 128-bit presets.

use std::sync::Arc;

use hecloud_math::{Modulus, NttTable, prime::is_prime};
use hecloud_rlwe::{Parameters, ParametersLiteral, SecretDistribution, params::SIGMA};

use crate::error::{BgvError, Result};

/// Standard deviations a noise bound covers: a coefficient exceeds it with
/// probability about 10⁻¹⁵, so all N of a ciphertext stay below it with
/// overwhelming probability.
const TAIL: f64 = 8.0;

/// Validated BGV parameters, shared behind `Arc`.
///
/// ```
/// use hecloud_bgv::{BgvParameters, params::test_literal};
/// let params = BgvParameters::new_insecure_for_tests(test_literal(10, 3, 65537)).unwrap();
/// assert_eq!(params.t(), 65537);
/// assert_eq!(params.slots(), Some(1024)); // 65537 ≡ 1 mod 2048: batching
/// let no_batch = BgvParameters::new_insecure_for_tests(test_literal(10, 3, 1 << 16)).unwrap();
/// assert_eq!(no_batch.slots(), None);
/// ```
#[derive(Debug)]
pub struct BgvParameters {
    rlwe: Arc<Parameters>,
    t: Modulus,
    batch: Option<Arc<NttTable>>,
    noise: NoiseModel,
}

impl BgvParameters {
    /// BGV parameters from a literal with `plaintext_modulus` set, checked
    /// for 128-bit security.
    pub fn new(literal: ParametersLiteral) -> Result<Arc<Self>> {
        Self::from_rlwe(Parameters::new(literal)?)
    }

    /// Like [`BgvParameters::new`] without the security check (tests only).
    pub fn new_insecure_for_tests(literal: ParametersLiteral) -> Result<Arc<Self>> {
        Self::from_rlwe(Parameters::new_insecure_for_tests(literal)?)
    }

    /// BGV parameters over RLWE parameters that carry a plaintext modulus.
    /// Refused when t is missing or so large that a fresh ciphertext could
    /// not be decrypted at level 0.
    pub fn from_rlwe(rlwe: Arc<Parameters>) -> Result<Arc<Self>> {
        let t = rlwe.plaintext_modulus().ok_or_else(|| {
            BgvError::PlaintextModulus("the RLWE parameters have no plaintext modulus".into())
        })?;
        let t_mod = Modulus::new(t)?;
        let n = rlwe.n();
        let batch = if is_prime(t) && (t - 1).is_multiple_of(2 * n as u64) {
            Some(Arc::new(NttTable::new(t, n)?))
        } else {
            None
        };
        let noise = NoiseModel::new(&rlwe, t);
        let q0_bits = (rlwe.q_basis().moduli()[0].value() as f64).log2();
        if noise.switching_floor() + 1.0 >= q0_bits {
            return Err(BgvError::PlaintextModulus(format!(
                "t = {t} is too large for q_0 of {q0_bits:.0} bits: a ciphertext switched to level 0 would not decrypt"
            )));
        }
        Ok(Arc::new(Self {
            rlwe,
            t: t_mod,
            batch,
            noise,
        }))
    }

    /// The RLWE parameters.
    pub fn rlwe(&self) -> &Arc<Parameters> {
        &self.rlwe
    }

    /// The plaintext modulus t.
    pub fn t(&self) -> u64 {
        self.t.value()
    }

    /// t as a modulus (for arithmetic mod t).
    pub fn t_modulus(&self) -> &Modulus {
        &self.t
    }

    /// Ring degree N.
    pub fn n(&self) -> usize {
        self.rlwe.n()
    }

    /// Number of slots (N, as a 2 × N/2 matrix) when t allows batching.
    pub fn slots(&self) -> Option<usize> {
        self.batch.as_ref().map(|_| self.n())
    }

    /// Slots per row (N/2): the span of a row rotation.
    pub fn row_size(&self) -> usize {
        self.n() / 2
    }

    /// The NTT mod t behind the batch encoder.
    pub(crate) fn batch_table(&self) -> Result<&Arc<NttTable>> {
        self.batch.as_ref().ok_or(BgvError::NoBatching {
            t: self.t(),
            n: self.n(),
        })
    }

    /// Highest level.
    pub fn max_level(&self) -> usize {
        self.rlwe.max_level()
    }

    /// The noise model of these parameters.
    pub fn noise(&self) -> &NoiseModel {
        &self.noise
    }

    /// log2 of Q_l.
    pub fn log_q_at(&self, level: usize) -> f64 {
        self.rlwe
            .q_basis()
            .moduli()
            .iter()
            .take(level + 1)
            .map(|m| (m.value() as f64).log2())
            .sum()
    }

    /// The least estimated noise budget, in bits, a result may keep. The
    /// noise model is an estimate: measured against decryption it errs by
    /// up to about 1.6 bits on either side (a sum at level 0 of two
    /// products with unequal factors, bgv-n14), so a result whose estimate
    /// keeps less than this is refused — an error, never a wrong answer.
    pub const MIN_BUDGET_BITS: f64 = 4.0;

    /// Whether a ciphertext at `level` with noise below 2^`noise_bits`
    /// keeps at least [`BgvParameters::MIN_BUDGET_BITS`]: the one rule the
    /// evaluator, [`BgvParameters::depth`], the integer sizing and BGV
    /// validation refuse a result by.
    pub fn has_budget(&self, level: usize, noise_bits: f64) -> bool {
        self.budget_bits(level, noise_bits) >= Self::MIN_BUDGET_BITS
    }

    /// Estimated noise budget, in bits, of a ciphertext at `level` whose
    /// noise (message included) is below 2^`noise_bits`: how many bits the
    /// noise may still grow before decryption fails.
    pub fn budget_bits(&self, level: usize, noise_bits: f64) -> f64 {
        self.log_q_at(level) - 1.0 - noise_bits
    }

    /// The prime q_level (1 past the top level).
    pub fn q(&self, level: usize) -> u64 {
        self.rlwe.q_modulus(level).map_or(1, |m| m.value())
    }

    /// The factor after a modulus switch from `level`: f·q_level⁻¹ mod t.
    pub fn switched_factor(&self, factor: u64, level: usize) -> Result<u64> {
        let t = &self.t;
        Ok(t.mul(factor, t.inv(t.reduce(self.q(level)))?))
    }

    /// The noise after a key switch (relinearization, rotation) at `level`.
    pub fn noise_after_key_switch(&self, noise: f64, level: usize) -> f64 {
        self.noise.after_key_switch(noise, level, self.rlwe.dnum())
    }

    /// The noise after a modulus switch from `level` one level down.
    pub fn noise_after_mod_switch(&self, noise: f64, level: usize) -> f64 {
        self.noise.mod_switch(noise, self.q(level))
    }

    /// The noise of [`crate::Evaluator::mul_relin`]'s result from a degree-2
    /// product of noise `product` at `level`: relinearized, then switched
    /// one level down when there is one.
    pub fn noise_after_mul_relin(&self, product: f64, level: usize) -> f64 {
        let relinearized = self.noise_after_key_switch(product, level);
        if level == 0 {
            relinearized
        } else {
            self.noise_after_mod_switch(relinearized, level)
        }
    }

    /// How two operands of factors `a.0` and `b.0` and noises `a.1` and
    /// `b.1` come to one factor: multiply the one whose noise grows least by
    /// the ratio of the factors (the evaluator's and validation's rule).
    pub fn match_factors(&self, a: (u64, f64), b: (u64, f64)) -> Result<FactorMatch> {
        let t = &self.t;
        let kb = t.center(t.mul(a.0, t.inv(b.0)?));
        let ka = t.center(t.mul(b.0, t.inv(a.0)?));
        let nm = &self.noise;
        Ok(
            if nm.mul_scalar(b.1, kb.unsigned_abs()) <= nm.mul_scalar(a.1, ka.unsigned_abs()) {
                FactorMatch::ScaleB(kb)
            } else {
                FactorMatch::ScaleA(ka)
            },
        )
    }

    /// How many multiplications in a row (each followed by relinearization
    /// and a modulus switch) a fresh ciphertext at the top level survives
    /// under the noise model: the documented depth of the parameters.
    pub fn depth(&self) -> usize {
        let nm = &self.noise;
        let mut level = self.max_level();
        let mut noise = nm.fresh_pk();
        let mut depth = 0;
        loop {
            let after = self.noise_after_key_switch(nm.mul(noise, noise), level);
            if !self.has_budget(level, after) {
                return depth;
            }
            depth += 1;
            if level == 0 {
                // One last product at level 0 is allowed, then nothing.
                return depth;
            }
            noise = self.noise_after_mod_switch(after, level);
            level -= 1;
        }
    }
}

/// Which operand [`BgvParameters::match_factors`] multiplies, and by what
/// (a constant centered mod t).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactorMatch {
    /// Multiply the first operand; the result takes the second's factor.
    ScaleA(i64),
    /// Multiply the second operand; the result takes the first's factor.
    ScaleB(i64),
}

/// Estimates of the noise of BGV ciphertexts: log2 of a bound on
/// ‖c_0 + c_1·s mod Q_l‖_∞ (the message, up to t/2, included), per
/// operation, from the variance of each term (secret ternary, errors of
/// σ = 3.2, digits uniform) and a tail of eight standard deviations. An
/// estimate, not a proof: the tests check it against measured noise.
#[derive(Debug, Clone)]
pub struct NoiseModel {
    log_t: f64,
    log_n: f64,
    /// log2 of the largest key-switching digit product Q_j, and of P.
    log_digit: f64,
    log_p: f64,
}

impl NoiseModel {
    fn new(rlwe: &Parameters, t: u64) -> Self {
        let q = rlwe.q_basis().moduli();
        let alpha = rlwe.alpha();
        let log_digit = q
            .chunks(alpha)
            .map(|d| d.iter().map(|m| (m.value() as f64).log2()).sum::<f64>())
            .fold(0.0, f64::max);
        Self {
            log_t: (t as f64).log2(),
            log_n: (rlwe.n() as f64).log2(),
            log_digit,
            log_p: rlwe.log_qp() - rlwe.log_q(),
        }
    }

    fn n(&self) -> f64 {
        self.log_n.exp2()
    }

    /// The rounding noise of one division (ModDown or modulus switch):
    /// t·(δ_0 + δ_1·s) with δ_i uniform in [−1/2, 1/2].
    pub fn switching_floor(&self) -> f64 {
        self.log_t + (0.5 + TAIL * (self.n() / 18.0).sqrt()).log2()
    }

    /// A fresh secret-key encryption: m + t·e.
    pub fn fresh_sk(&self) -> f64 {
        self.log_t + (0.5 + TAIL * SIGMA).log2()
    }

    /// A fresh public-key encryption (its noise divided by P, rounding left).
    pub fn fresh_pk(&self) -> f64 {
        self.switching_floor().max(self.fresh_sk())
    }

    /// The sum of two ciphertexts of noise 2^a and 2^b.
    pub fn add(&self, a: f64, b: f64) -> f64 {
        log_add(a, b)
    }

    /// A ciphertext plus a plaintext or constant (at most t/2 per
    /// coefficient).
    pub fn add_plaintext(&self, a: f64) -> f64 {
        log_add(a, self.log_t - 1.0)
    }

    /// The product of two ciphertexts: ‖v_a·v_b‖ ≈ 8·√N·(B_a/8)·(B_b/8).
    pub fn mul(&self, a: f64, b: f64) -> f64 {
        a + b + 0.5 * self.log_n - TAIL.log2()
    }

    /// The product with a plaintext whose coefficients are uniform mod t:
    /// 8·√N·(B/8)·(t/√12).
    pub fn mul_plain(&self, a: f64) -> f64 {
        a + 0.5 * self.log_n + self.log_t - 12f64.sqrt().log2()
    }

    /// The product with a constant of absolute value `c` (centered mod t).
    pub fn mul_scalar(&self, a: f64, c: u64) -> f64 {
        a + (c.max(1) as f64).log2()
    }

    /// After a key switch (relinearization or rotation) at `level`: the
    /// digits' noise divided by P, plus the ModDown rounding.
    pub fn after_key_switch(&self, a: f64, level: usize, dnum: usize) -> f64 {
        let digits = (level + 1).min(dnum) as f64;
        let ks =
            self.log_t + (TAIL * SIGMA * (digits * self.n() / 12.0).sqrt()).log2() + self.log_digit
                - self.log_p;
        log_add(log_add(a, ks), self.switching_floor())
    }

    /// After a modulus switch dividing by the prime `q`.
    pub fn mod_switch(&self, a: f64, q: u64) -> f64 {
        log_add(a - (q as f64).log2(), self.switching_floor())
    }
}

/// log2(2^a + 2^b).
fn log_add(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    hi + (1.0 + (lo - hi).exp2()).log2()
}

/// A small insecure literal for tests and examples: N = 2^log_n, a 60-bit
/// q_0, `levels` primes of 50 bits, two 60-bit special primes, plaintext
/// modulus `t`.
pub fn test_literal(log_n: u32, levels: usize, t: u64) -> ParametersLiteral {
    let mut log_q = vec![60];
    log_q.extend(std::iter::repeat_n(50, levels));
    ParametersLiteral {
        log_n,
        log_q,
        log_p: vec![60, 60],
        secret: SecretDistribution::Ternary,
        sigma: SIGMA,
        dnum: None,
        plaintext_modulus: Some(t),
    }
}

/// A named 128-bit BGV preset (HE Standard table, ternary secret). The
/// depth each gives (multiplications in a row with relinearization and
/// modulus switching, by the noise model) is in [`Preset::depth`] and
/// checked by the tests.
///
/// A level only has to absorb one product before the switch brings the
/// noise back to its floor (about t·2^8), so the primes above q_0 are small
/// (36–40 bits); the bits saved go to P, which cuts the key-switching
/// digits (dnum) to 2–4 and with them the cost of every product and
/// rotation (half the time of one 55-bit prime per level with a single P).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// N = 2^13, log QP ≈ 218: Q = 60 + 2×36, P = 2×43; t = 65537. Depth 3.
    N13,
    /// N = 2^14, log QP ≈ 438: Q = 60 + 6×36, P = 3×54; t = 65537. Depth 7.
    N14,
    /// N = 2^15, log QP ≈ 864: Q = 60 + 14×36, P = 5×60; t = 65537. Depth 15.
    N15,
    /// N = 2^16, log QP ≈ 1740: Q = 60 + 30×40, P = 8×60; t = 786433. Depth 30.
    N16,
}

impl Preset {
    /// Every preset, smallest first.
    pub const ALL: [Preset; 4] = [Self::N13, Self::N14, Self::N15, Self::N16];

    /// The literal.
    pub fn literal(self) -> ParametersLiteral {
        let (log_n, lq, nq, lp, np, t) = match self {
            Self::N13 => (13, 36, 2, 43, 2, 65537),
            Self::N14 => (14, 36, 6, 54, 3, 65537),
            Self::N15 => (15, 36, 14, 60, 5, 65537),
            Self::N16 => (16, 40, 30, 60, 8, 786433),
        };
        let mut log_q = vec![60];
        log_q.extend(std::iter::repeat_n(lq, nq));
        ParametersLiteral {
            log_n,
            log_q,
            log_p: vec![lp; np],
            secret: SecretDistribution::Ternary,
            sigma: SIGMA,
            dnum: None,
            plaintext_modulus: Some(t),
        }
    }

    /// The documented depth.
    pub fn depth(self) -> usize {
        match self {
            Self::N13 => 3,
            Self::N14 => 7,
            Self::N15 => 15,
            Self::N16 => 30,
        }
    }

    /// Builds the parameters (checked for 128-bit security).
    pub fn build(self) -> Result<Arc<BgvParameters>> {
        BgvParameters::new(self.literal())
    }

    /// Short name (`bgv-n13` … `bgv-n16`).
    pub fn name(self) -> &'static str {
        match self {
            Self::N13 => "bgv-n13",
            Self::N14 => "bgv-n14",
            Self::N15 => "bgv-n15",
            Self::N16 => "bgv-n16",
        }
    }

    /// The preset of a name from [`Preset::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_secure_and_batch() {
        for p in Preset::ALL {
            let lit = p.literal();
            let bits: u32 = lit.log_q.iter().chain(&lit.log_p).sum();
            let max = hecloud_rlwe::params::max_log_qp(lit.log_n).unwrap();
            assert!(bits <= max, "{p:?}: {bits} > {max}");
            assert_eq!(Preset::from_name(p.name()), Some(p));
        }
        for p in [Preset::N13, Preset::N14] {
            let params = p.build().unwrap();
            assert!(params.rlwe().is_secure());
            assert_eq!(params.slots(), Some(params.n()));
            assert_eq!(params.depth(), p.depth(), "{p:?}");
        }
    }

    #[test]
    fn bad_plaintext_moduli_are_refused() {
        let mut lit = test_literal(10, 2, 65537);
        lit.plaintext_modulus = None;
        assert!(matches!(
            BgvParameters::new_insecure_for_tests(lit.clone()),
            Err(BgvError::PlaintextModulus(_))
        ));
        // t as large as q_0: nothing would decrypt at level 0.
        lit.plaintext_modulus = Some((1 << 59) + 1);
        assert!(matches!(
            BgvParameters::new_insecure_for_tests(lit),
            Err(BgvError::PlaintextModulus(_))
        ));
    }
}
