//! Typed errors of the CKKS layer.

use hecloud_rlwe::RlweError;
use thiserror::Error;

/// What can go wrong in CKKS: every bad input, exhausted level, scale
/// mismatch or missing key is one of these, never a panic.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum CkksError {
    /// An error of the RLWE layer (parameters, keys, levels, decoding).
    #[error(transparent)]
    Rlwe(#[from] RlweError),
    /// Operands whose scales differ by more than the tolerance.
    #[error(
        "scale mismatch: 2^{left:.4} vs 2^{right:.4} (relative difference {:.1e})",
        ((left - right) * std::f64::consts::LN_2).exp_m1().abs()
    )]
    ScaleMismatch {
        /// log2 of the left scale.
        left: f64,
        /// log2 of the right scale.
        right: f64,
    },
    /// More values than slots, or a slot count that is not a power of two
    /// in 1..=N/2.
    #[error("invalid slot count or input length: {0}")]
    Slots(String),
    /// A NaN, an infinity, or a value too large for the scale.
    #[error("value out of range: {0}")]
    ValueOutOfRange(String),
    /// A scale that is not a positive finite number, or too large for the
    /// remaining modulus.
    #[error("invalid scale 2^{0:.2}")]
    InvalidScale(f64),
    /// A polynomial-evaluation request that cannot be satisfied.
    #[error("polynomial evaluation: {0}")]
    Polynomial(String),
    /// A key an operation needs and was not given (e.g. bootstrapping's
    /// sparse-secret encapsulation keys).
    #[error("missing key: {0}")]
    MissingKey(String),
    /// The caller's cancellation flag was raised during an evaluation.
    #[error("cancelled")]
    Cancelled,
    /// A refresh policy outside what is accepted (e.g. too little hiding).
    #[error("refresh policy: {0}")]
    MaskPolicy(String),
    /// A ciphertext whose level's modulus cannot hold the refresh mask
    /// without wrapping ([`crate::refresh`]).
    #[error(
        "no modulus headroom to refresh at level {level}: the mask needs {need_bits} bits, Q_{level} has {have_bits}{}",
        lowest_level.map_or_else(|| " (no level of these parameters has enough)".to_string(), |l| format!(" (refresh at level {l} or above)"))
    )]
    NoRefreshHeadroom {
        /// The ciphertext's level.
        level: usize,
        /// log2 of the modulus the mask needs.
        need_bits: u32,
        /// log2 of the modulus at that level.
        have_bits: u32,
        /// The lowest level with enough headroom, if any.
        lowest_level: Option<usize>,
    },
}

impl From<hecloud_math::MathError> for CkksError {
    fn from(e: hecloud_math::MathError) -> Self {
        Self::Rlwe(RlweError::Math(e))
    }
}

/// Result alias of the CKKS layer.
pub type Result<T> = std::result::Result<T, CkksError>;

/// Refused (levels exhausted) unless `level` holds `need` levels.
pub(crate) fn require_levels(level: usize, need: usize) -> Result<()> {
    if level < need {
        return Err(RlweError::LevelsExhausted { level, need }.into());
    }
    Ok(())
}
