//! Typed errors of the BGV layer.

use hecloud_rlwe::RlweError;
use thiserror::Error;

/// What can go wrong in BGV: every bad input, exhausted level or missing key
/// is one of these, never a panic or a wrong answer.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum BgvError {
    /// An error of the RLWE layer (parameters, keys, levels, decoding).
    #[error(transparent)]
    Rlwe(#[from] RlweError),
    /// A plaintext modulus the parameters cannot use.
    #[error("plaintext modulus: {0}")]
    PlaintextModulus(String),
    /// The batch encoder needs a prime t ≡ 1 (mod 2N).
    #[error("t = {t} does not allow batching at N = {n} (it needs a prime t ≡ 1 mod 2N)")]
    NoBatching {
        /// The plaintext modulus.
        t: u64,
        /// The ring degree.
        n: usize,
    },
    /// A value that is not below t.
    #[error("value {value} at index {index} does not fit the plaintext modulus t = {t}")]
    ValueOutOfRange {
        /// The offending value.
        value: u64,
        /// Its index in the input.
        index: usize,
        /// The plaintext modulus.
        t: u64,
    },
    /// More values than slots (or coefficients).
    #[error("{given} values for {slots} slots")]
    TooManyValues {
        /// Values given.
        given: usize,
        /// Slots available.
        slots: usize,
    },
    /// The estimated noise of a result would exceed what decryption
    /// tolerates: the computation needs more depth than the parameters give.
    #[error(
        "noise budget exhausted: the result would keep {budget_bits:.1} bits at level {level}, fewer than the 4 required (a refresh or larger parameters are needed)"
    )]
    BudgetExhausted {
        /// Level of the result.
        level: usize,
        /// Estimated budget left, in bits (below
        /// [`crate::BgvParameters::MIN_BUDGET_BITS`]).
        budget_bits: f64,
    },
    /// No Galois key for a rotation.
    #[error("no rotation key for {0}")]
    MissingRotationKey(String),
    /// A ciphertext that is not BGV (no plaintext modulus) or of the wrong
    /// degree for the operation.
    #[error("not a BGV ciphertext of these parameters: {0}")]
    NotBgv(String),
}

impl From<hecloud_math::MathError> for BgvError {
    fn from(e: hecloud_math::MathError) -> Self {
        Self::Rlwe(RlweError::Math(e))
    }
}

/// Result alias of the BGV layer.
pub type Result<T> = std::result::Result<T, BgvError>;
