//! Typed errors of the RLWE layer.

use hecloud_math::MathError;
use thiserror::Error;

/// What can go wrong in the RLWE layer. Bad parameters, mismatched operands,
/// missing keys and untrusted bytes all end here, never in a panic.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum RlweError {
    /// An error of the math layer (mismatched bases, domains, …).
    #[error("math: {0}")]
    Math(#[from] MathError),
    /// A parameter literal that cannot be turned into parameters.
    #[error("invalid parameters: {0}")]
    InvalidParameters(String),
    /// A parameter set below 128-bit security per the HE Standard table.
    #[error(
        "parameters are not 128-bit secure: log2(QP) = {log_qp:.1} exceeds the HE Standard maximum {max} for N = 2^{log_n}"
    )]
    Insecure {
        /// log2 N.
        log_n: u32,
        /// log2(Q·P) of the set.
        log_qp: f64,
        /// Maximum allowed for this N (0 when N is below the table).
        max: u32,
    },
    /// A level above the maximum of the parameters, or below what the
    /// operation needs.
    #[error("level {level} is outside 0..={max}")]
    LevelOutOfRange {
        /// Level asked for.
        level: usize,
        /// Highest valid level.
        max: usize,
    },
    /// A scale that is not a positive finite number.
    #[error("invalid scale {0}: a positive finite number is needed")]
    InvalidScale(f64),
    /// No level left for an operation that consumes one.
    #[error(
        "levels exhausted: the operation needs level ≥ {need}, the operand is at level {level}"
    )]
    LevelsExhausted {
        /// Level of the operand.
        level: usize,
        /// Minimal level needed.
        need: usize,
    },
    /// Operands (or an object and the parameters it is used with) belong to
    /// different parameter sets.
    #[error("operands belong to different parameter sets")]
    ParameterMismatch,
    /// A sum finished with no term in it.
    #[error("a sum with no term")]
    EmptySum,
    /// Two operands at different levels where equal levels are needed.
    #[error("level mismatch: {left} vs {right}")]
    LevelMismatch {
        /// Level of the left operand.
        left: usize,
        /// Level of the right operand.
        right: usize,
    },
    /// A ciphertext of a degree the operation does not accept.
    #[error("ciphertext has degree {found}, expected {expected}")]
    CiphertextDegree {
        /// Degree required.
        expected: usize,
        /// Degree found.
        found: usize,
    },
    /// No Galois key for the needed Galois element.
    #[error("no Galois key for Galois element {0}")]
    MissingGaloisKey(usize),
    /// A switching key cut below the level it is asked to switch at
    /// ([`crate::SwitchingKey::at_level`]).
    #[error("the key reaches level {key}, the operand is at level {level}")]
    KeyBelowLevel {
        /// The key's highest level.
        key: usize,
        /// The operand's level.
        level: usize,
    },
    /// No relinearization key.
    #[error("no relinearization key")]
    MissingRelinearizationKey,
    /// Objects made under different secret keys used together (two
    /// ciphertexts of different clients or sessions, a ciphertext and
    /// another key's evaluation key, a decryption under another key):
    /// their result would be noise, never an error of its own.
    #[error("key mismatch: an object under key {found} where key {expected} was expected")]
    KeyMismatch {
        /// The key the operation works under.
        expected: crate::KeyId,
        /// The key of the object offered.
        found: crate::KeyId,
    },
    /// Malformed, truncated, oversized or foreign serialized bytes.
    #[error("deserialization: {0}")]
    Decode(#[from] DecodeError),
}

/// Why serialized bytes were refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes than the header or the declared contents need.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// Bytes after the end of the object.
    #[error("{0} trailing bytes after the object")]
    TrailingBytes(usize),
    /// Not a hecloud object.
    #[error("bad magic bytes")]
    BadMagic,
    /// A format version this build does not read.
    #[error("unsupported format version {found} (this build reads {supported})")]
    UnsupportedVersion {
        /// Version in the header.
        found: u16,
        /// Version this build reads.
        supported: u16,
    },
    /// An object of another kind than the one asked for.
    #[error("object kind {found} where kind {expected} was expected")]
    WrongKind {
        /// Kind asked for.
        expected: u8,
        /// Kind in the header.
        found: u8,
    },
    /// The object belongs to another parameter set.
    #[error("parameter hash does not match the parameters")]
    ParameterHash,
    /// A header or body field with an impossible value.
    #[error("invalid field {field}: {value}")]
    InvalidField {
        /// Field name.
        field: &'static str,
        /// The offending value.
        value: u64,
    },
    /// A residue not below its prime.
    #[error("residue out of range")]
    ResidueOutOfRange,
}

/// Result alias of the RLWE layer.
pub type Result<T> = std::result::Result<T, RlweError>;
