//! # hecloud-bgv
//!
//! BGV (exact arithmetic mod a plaintext modulus t on encrypted integer
//! vectors) over the RLWE core: the message sits in the low digits, so keys
//! and fresh encryptions carry noise t·e and every division keeps values
//! mod t (the RLWE layer does both when its parameters name t). This crate
//! adds the batch encoder (N slots as a 2 × N/2 matrix, for a prime
//! t ≡ 1 mod 2N) and the coefficient encoder (any t, 2^k included), the
//! evaluator (sums, products, relinearization, rotations, modulus switching
//! with factor tracking), a noise model that every result carries as an
//! estimate, the measured budget for tests, and the 128-bit presets.
//!
//! ```
//! use hecloud_bgv::{Encoder, Evaluator, KeySet, Preset};
//! let params = Preset::N13.build().unwrap();
//! let keys = KeySet::generate(&params, &[], false).unwrap();
//! let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
//! let x = keys.encrypt(&enc.encode(&[1000, 2000]).unwrap()).unwrap();
//! let y = eval.mul_relin(&x, &x).unwrap(); // 10^6 and 4·10^6, mod 65537
//! let out = enc.decode(&keys.decrypt(&y).unwrap()).unwrap();
//! assert_eq!(&out[..2], &[1_000_000 % 65537, 4_000_000 % 65537]);
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod encoder;
pub mod error;
pub mod evaluator;
pub mod integer;
pub mod keys;
pub mod params;
pub mod poly;

pub use encoder::{Encoder, Plaintext};
pub use error::{BgvError, Result};
pub use evaluator::Evaluator;
pub use keys::{EvaluationKeys, KeySet};
pub use params::{BgvParameters, FactorMatch, NoiseModel, Preset};
