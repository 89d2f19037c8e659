//! Encrypted integer circuits for hecloud.
//!
//! Integers of any width from 2 to 1024 bits are held one bit per wire
//! ([`EncryptedUint`]); circuits ([`circuits`]) — carry-save counter trees,
//! Kogge–Stone and ripple adders, multi-operand sums, subtraction, comparison
//! (the published carry-of-`¬X + Y` method and a faster one at half a
//! bootstrap per bit),
//! equality, min/max — are generic over a [`BitEngine`]:
//!
//! * [`ClearEngine`]: plaintext values, the test oracle; it enforces the same
//!   plaintext-space and noise rules as the TFHE engine and counts the same
//!   bootstraps and layers;
//! * [`TfheEngine`]: TFHE-rs shortint ciphertexts (see [`tfhe_engine`] for the
//!   parameter choice: 128-bit security, p_fail ≤ 2^-128).
//!
//! Any engine runs under a cancellation flag through [`Cancellable`]
//! ([`BitEngine::with_cancel`]): a circuit then stops with
//! [`CircuitError::Cancelled`] at its next layer. [`bound`] bounds a
//! circuit's bootstraps from its shape, without running it.
//!
//! [`packed`] holds the same algorithms over BGV with many bits packed in
//! the slots of one ciphertext (the HElib approach): bit-sliced numbers
//! (up to N at once) and bits in slots (one number per ciphertext), gates
//! as arithmetic mod t, and refreshes through a client-aided
//! [`packed::Refresher`] when the levels run out.
//!
//! ```
//! use hecloud_circuits::{circuits::{self, AdderKind, SumMode}, with_cost, BitEngine, ClearEngine, EncryptedUint};
//! let e = ClearEngine::new();
//! let xs: Vec<_> = [1u128, 2, 3].iter()
//!     .map(|&v| EncryptedUint::encrypt_u128(&e, v, 32)).collect::<Result<_, _>>()?;
//! let (s, cost) = with_cost(&e, || circuits::sum(&e, &xs, SumMode::Modular, AdderKind::Auto));
//! assert_eq!(s?.decrypt_u128(&e)?, 6);
//! assert!(cost.bootstraps > 0);
//! # Ok::<(), hecloud_circuits::CircuitError>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod advice;
pub mod bound;
pub mod circuits;
pub mod clear;
pub mod demo;
pub mod engine;
pub mod error;
pub mod packed;
pub mod tfhe_engine;
pub mod uint;

pub use circuits::with_cost;
pub use clear::ClearEngine;
pub use engine::{
    BitEngine, Cancellable, Expr, Lut, LutOp, MAX_LUTS_PER_OP, NOISE_BUDGET, PLAINTEXT_SPACE, Plan,
    Stats, Wire, WireOf, plan,
};
pub use error::{CircuitError, Result};
pub use tfhe_engine::{TFHE_PARAMS, TfheEngine};
pub use uint::{EncryptedUint, MAX_WIDTH, MIN_WIDTH, UintOf};
