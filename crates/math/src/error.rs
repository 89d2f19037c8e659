//! Typed errors of the math layer.

use thiserror::Error;

/// What can go wrong in the math layer. Every operation on untrusted sizes,
/// moduli or operands returns one of these instead of panicking.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum MathError {
    /// A modulus outside `2..2^62`.
    #[error("modulus {0} is outside 2..2^62")]
    ModulusOutOfRange(u64),
    /// A residue that is not below its prime.
    #[error("residue {value} is not below its modulus {q}")]
    ResidueOutOfRange {
        /// The residue.
        value: u64,
        /// The modulus it must be below.
        q: u64,
    },
    /// A ring degree that is not a power of two in the supported range.
    #[error("ring degree {0} is not a power of two in 2^{min}..=2^{max}", min = crate::ntt::MIN_LOG_N, max = crate::ntt::MAX_LOG_N)]
    InvalidDegree(usize),
    /// A modulus that does not support a negacyclic NTT of the requested degree.
    #[error("modulus {q} is not an NTT-friendly prime for degree {n} (need a prime q = 1 mod 2n)")]
    NotNttFriendly {
        /// The modulus.
        q: u64,
        /// The ring degree.
        n: usize,
    },
    /// A prime size outside the supported range.
    #[error("prime size of {0} bits is outside 20..=61")]
    InvalidPrimeBits(u32),
    /// Not enough primes of the requested shape exist.
    #[error("only {found} of {wanted} primes of {bits} bits with q = 1 mod {modulus} exist")]
    NotEnoughPrimes {
        /// Primes requested.
        wanted: usize,
        /// Primes found.
        found: usize,
        /// Bit size requested.
        bits: u32,
        /// The congruence modulus 2n.
        modulus: u64,
    },
    /// Two operands live over different RNS bases or ring degrees.
    #[error("operands have mismatched RNS bases")]
    BasisMismatch,
    /// An operand is in the wrong domain for the operation.
    #[error("operand is in the {found:?} domain, expected {expected:?}")]
    DomainMismatch {
        /// The domain required.
        expected: crate::poly::Domain,
        /// The domain found.
        found: crate::poly::Domain,
    },
    /// A basis needs at least one modulus (two for a rescale).
    #[error("basis has {have} moduli, the operation needs at least {need}")]
    TooFewModuli {
        /// Moduli present.
        have: usize,
        /// Moduli needed.
        need: usize,
    },
    /// The moduli of a basis must be pairwise distinct.
    #[error("modulus {0} appears twice in the basis")]
    DuplicateModulus(u64),
    /// A slice or buffer of the wrong length.
    #[error("expected {expected} values, got {found}")]
    LengthMismatch {
        /// Length required.
        expected: usize,
        /// Length given.
        found: usize,
    },
    /// A Galois element that is not an odd residue modulo 2n.
    #[error("automorphism exponent {k} is not odd modulo 2n = {two_n}")]
    InvalidGaloisElement {
        /// The exponent.
        k: usize,
        /// 2n.
        two_n: usize,
    },
    /// A Hamming weight larger than the degree.
    #[error("Hamming weight {h} exceeds the degree {n}")]
    InvalidHammingWeight {
        /// Weight requested.
        h: usize,
        /// Degree.
        n: usize,
    },
    /// A value has no inverse modulo q.
    #[error("{value} is not invertible modulo {q}")]
    NotInvertible {
        /// The value.
        value: u64,
        /// The modulus.
        q: u64,
    },
}

/// Result alias of the math layer.
pub type Result<T> = std::result::Result<T, MathError>;
