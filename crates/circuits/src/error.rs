//! Typed errors of the circuit layer.

/// Everything that can go wrong when building or running a circuit.
///
/// Bad input (a width out of range, operands of different widths, an empty
/// operand list, a value that does not fit) is always reported through this
/// type, never by a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CircuitError {
    /// An integer width outside the supported range.
    #[error("width {width} is outside the supported range {min}..={max}")]
    WidthOutOfRange {
        /// Requested width in bits.
        width: usize,
        /// Smallest supported width.
        min: usize,
        /// Largest supported width.
        max: usize,
    },
    /// Two operands that must have the same width do not.
    #[error("operand widths differ: {left} vs {right} bits")]
    WidthMismatch {
        /// Width of the first operand.
        left: usize,
        /// Width of the offending operand.
        right: usize,
    },
    /// A multi-operand operation was given no operand.
    #[error("the operand list is empty")]
    EmptyOperands,
    /// A clear value does not fit in the requested width.
    #[error("value needs {bits} bits but the width is {width}")]
    ValueTooWide {
        /// Bits the value needs.
        bits: u64,
        /// Requested width.
        width: usize,
    },
    /// A linear combination may leave the plaintext space `0..space`.
    #[error("linear combination ranges over {min}..={max}, outside the plaintext space 0..{space}")]
    OutOfPlaintextSpace {
        /// Smallest value the combination can take.
        min: i64,
        /// Largest value the combination can take.
        max: i64,
        /// Size of the plaintext space.
        space: u64,
    },
    /// A linear combination whose noise exceeds what the parameters guarantee.
    #[error("noise {noise} (sum of squared weights) exceeds the budget {budget}")]
    NoiseBudgetExceeded {
        /// Squared 2-norm of the combination, in units of a fresh ciphertext's variance.
        noise: u64,
        /// Largest squared 2-norm the parameters guarantee p_fail for.
        budget: u64,
    },
    /// A lookup asked for no output, or for more outputs than one lookup op supports.
    #[error("a lookup op must have 1..={max} output functions, got {got}")]
    BadLutCount {
        /// Number of functions requested.
        got: usize,
        /// Largest supported number.
        max: usize,
    },
    /// A counter was given more inputs than the plaintext space can count.
    #[error("a counter takes 1..={max} bits, got {got}")]
    CounterTooWide {
        /// Inputs given.
        got: usize,
        /// Largest supported count.
        max: usize,
    },
    /// A wire expected to hold a bit decrypted to something else.
    #[error("expected a bit, decrypted {value}")]
    NotABit {
        /// The decrypted value.
        value: u64,
    },
    /// Encryption or decryption was asked of an engine that holds no client key.
    #[error("this engine holds no client key (server side only)")]
    NoClientKey,
    /// The cancellation flag of the computation was raised (see
    /// [`crate::Cancellable`]); the circuit stopped at a layer boundary, or
    /// part-way through a layer on engines that check within layers.
    #[error("cancelled")]
    Cancelled,
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, CircuitError>;
