//! CKKS parameters: RLWE parameters plus the default scale, and the named
//! 128-bit presets.

use std::sync::Arc;

use hecloud_rlwe::{Parameters, ParametersLiteral, SecretDistribution, params::SIGMA};

use crate::error::{CkksError, Result};

/// Validated CKKS parameters (RLWE parameters + default scale), shared
/// behind `Arc`.
#[derive(Debug)]
pub struct CkksParameters {
    rlwe: Arc<Parameters>,
    log_scale: u32,
}

impl CkksParameters {
    /// CKKS parameters from a literal checked for 128-bit security, with
    /// default scale 2^log_scale.
    pub fn new(literal: ParametersLiteral, log_scale: u32) -> Result<Arc<Self>> {
        Self::from_rlwe(Parameters::new(literal)?, log_scale)
    }

    /// Like [`CkksParameters::new`] without the security check (tests only).
    ///
    /// ```
    /// use hecloud_ckks::CkksParameters;
    /// let p = CkksParameters::new_insecure_for_tests(hecloud_ckks::params::test_literal(10, 3), 40).unwrap();
    /// assert_eq!(p.max_level(), 3);
    /// assert_eq!(p.slots(), 512);
    /// ```
    pub fn new_insecure_for_tests(literal: ParametersLiteral, log_scale: u32) -> Result<Arc<Self>> {
        Self::from_rlwe(Parameters::new_insecure_for_tests(literal)?, log_scale)
    }

    /// CKKS parameters over existing RLWE parameters.
    pub fn from_rlwe(rlwe: Arc<Parameters>, log_scale: u32) -> Result<Arc<Self>> {
        let q0 = rlwe.q_basis().moduli()[0].bits();
        if log_scale == 0 || log_scale >= q0 || log_scale > 60 {
            return Err(CkksError::InvalidScale(log_scale as f64));
        }
        Ok(Arc::new(Self { rlwe, log_scale }))
    }

    /// The RLWE parameters.
    pub fn rlwe(&self) -> &Arc<Parameters> {
        &self.rlwe
    }

    /// Ring degree N.
    pub fn n(&self) -> usize {
        self.rlwe.n()
    }

    /// Maximum number of complex slots, N/2.
    pub fn slots(&self) -> usize {
        self.rlwe.n() / 2
    }

    /// Highest level (multiplicative depth available).
    pub fn max_level(&self) -> usize {
        self.rlwe.max_level()
    }

    /// Default scale Δ = 2^log_scale.
    pub fn default_scale(&self) -> f64 {
        (self.log_scale as f64).exp2()
    }

    /// log2 of the default scale.
    pub fn log_scale(&self) -> u32 {
        self.log_scale
    }

    /// The lowest level (at most `level`) whose modulus still holds any
    /// value decoding accepts at `scale`: decoding reads the primes up to
    /// it and no further. A ciphertext that is only to be decrypted should
    /// keep one prime more ([`Self::checked_decoding_level`]): at this
    /// level a value beyond the headroom wraps and decodes as another.
    ///
    /// Decoding accepts values below 2^(log2 scale + 55) in magnitude
    /// ([`DECODE_HEADROOM_BITS`]); where no prefix holds that, `level`.
    ///
    /// ```
    /// use hecloud_ckks::{CkksParameters, params::test_literal};
    /// // q_0 of 60 bits and 45-bit primes: at scale 2^40, two primes.
    /// let params = CkksParameters::new_insecure_for_tests(test_literal(10, 4), 40).unwrap();
    /// assert_eq!(params.decoding_level(2f64.powi(40), 4), 1);
    /// assert_eq!(params.decoding_level(2f64.powi(40), 0), 0);
    /// ```
    pub fn decoding_level(&self, scale: f64, level: usize) -> usize {
        let need = scale.log2() + DECODE_HEADROOM_BITS;
        let mut bits = 0.0;
        for l in 0..level {
            bits += self.q_f64(l).log2();
            if bits > need {
                return l;
            }
        }
        level
    }

    /// The lowest level (at most `level`) a ciphertext to be decrypted can
    /// drop to and still be decoded with a check: the primes decoding reads
    /// ([`Self::decoding_level`]) and one above them, which every decoded
    /// value must match, so that a value that outgrew the headroom is
    /// refused (or read over more primes) instead of decoded as another.
    /// Where `level` has no prime to spare, `level`.
    ///
    /// ```
    /// use hecloud_ckks::{CkksParameters, params::test_literal};
    /// let params = CkksParameters::new_insecure_for_tests(test_literal(10, 4), 40).unwrap();
    /// assert_eq!(params.checked_decoding_level(2f64.powi(40), 4), 2);
    /// assert_eq!(params.checked_decoding_level(2f64.powi(40), 1), 1);
    /// ```
    pub fn checked_decoding_level(&self, scale: f64, level: usize) -> usize {
        (self.decoding_level(scale, level) + 1).min(level)
    }

    /// The prime q_l as a float (the exact factor a rescale divides by).
    pub fn q_f64(&self, level: usize) -> f64 {
        self.rlwe
            .q_modulus(level)
            .map(|m| m.value() as f64)
            .unwrap_or(f64::NAN)
    }
}

/// Bits above the scale that a decoded value may use: decoding reads as
/// many primes as a value of 2^(log2 scale + this) needs.
pub const DECODE_HEADROOM_BITS: f64 = 55.0;

/// A small insecure literal for tests and examples: N = 2^log_n, a 60-bit
/// q_0, `levels` primes of 45 bits, two 60-bit special primes.
pub fn test_literal(log_n: u32, levels: usize) -> ParametersLiteral {
    let mut log_q = vec![60];
    log_q.extend(std::iter::repeat_n(45, levels));
    ParametersLiteral {
        log_n,
        log_q,
        log_p: vec![60, 60],
        secret: SecretDistribution::Ternary,
        sigma: SIGMA,
        dnum: None,
        plaintext_modulus: None,
    }
}

/// A named 128-bit preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// N = 2^13, log QP ≈ 200: Q = 60 + 2×40, P = 60. Depth 2, scale 2^40,
    /// ≈ 20 bits of precision after one multiplication.
    N13,
    /// N = 2^14, log QP ≈ 430: Q = 60 + 6×45, P = 2×50. Depth 6, scale 2^45,
    /// ≈ 25 bits after one multiplication.
    N14,
    /// N = 2^15, log QP ≈ 875: Q = 60 + 13×50, P = 3×55. Depth 13, scale 2^50,
    /// ≈ 28 bits after one multiplication.
    N15,
    /// N = 2^16, log QP ≈ 1732 (Q as Lattigo's anchor set): Q = 60 + 27×50,
    /// P = 7×46, 5 key-switching digits of 6 primes. Depth 27, scale 2^50,
    /// ≈ 28 bits after one multiplication.
    N16,
    /// N = 2^17, log QP ≈ 3500: Q = 60 + 59×50, P = 10×49, 7 digits of 9
    /// primes. Depth 59, scale 2^50, ≈ 27 bits after one multiplication.
    N17,
}

impl Preset {
    /// Every preset, smallest first.
    pub const ALL: [Preset; 5] = [Self::N13, Self::N14, Self::N15, Self::N16, Self::N17];

    /// The literal and log2 of the default scale.
    ///
    /// At N = 2^16 and 2^17, P is made of more primes below 2^50 (instead
    /// of 4 and 8 primes of 61 bits, as many digits): every P limb then
    /// takes the 52-bit kernels (IFMA, or double-precision FMA on AVX2).
    /// Measured (mul+relin+rescale at N = 2^16, one thread, interleaved
    /// runs, precision unchanged at 2^-33.3): 13 % faster on AVX2, 15 %
    /// with IFMA. At N = 2^16 a sixth P prime then allowed 6 digits of 5
    /// primes instead of 7 of 4 (fewer NTTs in ModUp, a smaller key to
    /// read): rotation 8–15 % and the product 2–12 % faster on AVX2, 6–8 %
    /// with IFMA, precision unchanged. Seven P primes of 46 bits (322, a
    /// seventh of 49 would pass the HE Standard's 1747) allow 5 digits of
    /// 6 (310 bits at most, with q₀): the product and rotation about 8 %
    /// faster again on AVX2 and with IFMA, precision unchanged. At N = 2^17,
    /// 7 digits of 9 primes (460 bits at most) instead of 8 of 8 under the
    /// same P: the product 0–11 % and rotation 4–8 % faster with IFMA.
    pub fn literal(self) -> (ParametersLiteral, u32) {
        let (log_n, q0, lq, nq, lp, np, dnum, scale) = match self {
            Self::N13 => (13, 60, 40, 2, 60, 1, None, 40),
            Self::N14 => (14, 60, 45, 6, 50, 2, None, 45),
            Self::N15 => (15, 60, 50, 13, 55, 3, None, 50),
            // The digits stay at most 6 (9) primes, below P's 322 (490)
            // bits: ⌈|Q|/|P|⌉ would make them larger than P.
            Self::N16 => (16, 60, 50, 27, 46, 7, Some(5), 50),
            Self::N17 => (17, 60, 50, 59, 49, 10, Some(7), 50),
        };
        let mut log_q = vec![q0];
        log_q.extend(std::iter::repeat_n(lq, nq));
        (
            ParametersLiteral {
                log_n,
                log_q,
                log_p: vec![lp; np],
                secret: SecretDistribution::Ternary,
                sigma: SIGMA,
                dnum,
                plaintext_modulus: None,
            },
            scale,
        )
    }

    /// Builds the parameters (checked for 128-bit security).
    pub fn build(self) -> Result<Arc<CkksParameters>> {
        let (lit, scale) = self.literal();
        CkksParameters::new(lit, scale)
    }

    /// Short name (`n13` … `n17`).
    pub fn name(self) -> &'static str {
        match self {
            Self::N13 => "n13",
            Self::N14 => "n14",
            Self::N15 => "n15",
            Self::N16 => "n16",
            Self::N17 => "n17",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_secure_literals() {
        for p in Preset::ALL {
            let (lit, scale) = p.literal();
            let bits: u32 = lit.log_q.iter().chain(&lit.log_p).sum();
            let max = hecloud_rlwe::params::max_log_qp(lit.log_n).unwrap();
            assert!(bits <= max, "{p:?}: {bits} > {max}");
            assert!(scale < lit.log_q[0]);
            // Each key-switching digit about P or below, its noise divided
            // out (N14's first digit, q0 and a 45-bit prime, is 5 bits
            // over its P: the HE Standard's 438 bits leave no room).
            let dnum = lit
                .dnum
                .unwrap_or(lit.log_q.len().div_ceil(lit.log_p.len()));
            let alpha = lit.log_q.len().div_ceil(dnum);
            let p_bits: u32 = lit.log_p.iter().sum();
            for digit in lit.log_q.chunks(alpha) {
                let d: u32 = digit.iter().sum();
                assert!(d <= p_bits + 5, "{p:?}: a digit of {d} bits, P of {p_bits}");
            }
        }
        // The small ones are built for real (the large ones in the release tests).
        for p in [Preset::N13, Preset::N14] {
            let params = p.build().unwrap();
            assert!(params.rlwe().is_secure());
        }
    }

    #[test]
    fn invalid_scale_is_refused() {
        assert!(CkksParameters::new_insecure_for_tests(test_literal(10, 2), 60).is_err());
        assert!(CkksParameters::new_insecure_for_tests(test_literal(10, 2), 0).is_err());
    }
}
