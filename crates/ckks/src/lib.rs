//! # hecloud-ckks
//!
//! RNS-CKKS (approximate arithmetic on encrypted complex vectors) over the
//! RLWE core: an encoder through the canonical embedding (special FFT, full
//! or sparse slots), an evaluator (additions, products, relinearization,
//! rescaling with exact scale tracking, rotations, conjugation, hoisting,
//! rotate-and-sum), polynomial evaluation in the Chebyshev basis with
//! baby-step giant-step, named 128-bit presets and precision reports.
//! The [`plan`] module holds the rules the evaluator follows (each
//! operation's result level, scale and key switches), so that a circuit can
//! be checked and costed before any ciphertext exists.
//!
//! ```
//! use hecloud_ckks::{*, params::test_literal};
//! let params = CkksParameters::new_insecure_for_tests(test_literal(10, 3), 40).unwrap();
//! let keys = KeySet::generate(&params, &[], false).unwrap();
//! let enc = Encoder::new(&params);
//! let eval = Evaluator::new(&params, keys.evaluation_keys());
//! let x = vec![0.5, -0.25, 0.125];
//! let ct = keys.encrypt(&enc.encode_real(&x, 3, params.default_scale()).unwrap()).unwrap();
//! let y = eval.mul_relin_rescale(&ct, &ct).unwrap();      // x²
//! let y = eval.add_const(&y, 1.0.into()).unwrap();         // x² + 1
//! let out = enc.decode_real(&keys.decrypt(&y).unwrap()).unwrap();
//! assert!((out[1] - 1.0625).abs() < 1e-6);
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod boot;
pub mod demo;
pub mod dft;
pub mod encoder;
pub mod error;
pub mod evaluator;
mod fixed;
pub mod keys;
pub mod linear;
pub mod params;
pub mod plan;
pub mod polynomial;
pub mod precision;
pub mod refresh;
mod wide;

pub use encoder::{Coefficients, Encoder};
pub use error::{CkksError, Result};
pub use evaluator::{EvaluationKeys, Evaluator};
pub use keys::KeySet;
pub use params::{CkksParameters, DECODE_HEADROOM_BITS, Preset};
pub use plan::{CtShape, Planner, PtShape, Step};
pub use precision::PrecisionReport;
