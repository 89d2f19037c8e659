//! # hecloud-rlwe
//!
//! The RLWE core shared by CKKS and BGV: parameter literals validated into
//! immutable parameters (with the HE Standard 128-bit check), secret, public,
//! relinearization and Galois keys, public-key and (seeded) secret-key
//! encryption, decryption, hybrid key switching with dnum digits and
//! hoisting, and a versioned, length-checked binary serialization.
//!
//! ```
//! use hecloud_rlwe::*;
//! let params = Parameters::new_insecure_for_tests(ParametersLiteral {
//!     log_n: 10, log_q: vec![50, 40], log_p: vec![50],
//!     secret: SecretDistribution::Ternary, sigma: params::SIGMA, dnum: None, plaintext_modulus: None,
//! }).unwrap();
//! let mut kg = KeyGenerator::new(&params);
//! let sk = kg.gen_secret_key().unwrap();
//! let pk = kg.gen_public_key(&sk).unwrap();
//! // Encrypt the zero plaintext and decrypt: a small polynomial comes back.
//! let zero = hecloud_math::RnsPoly::zero(params.q_at(1).unwrap(), hecloud_math::Domain::Ntt);
//! let pt = Plaintext::new(&params, zero, 1, 1.0).unwrap();
//! let ct = Encryptor::new(&params).encrypt_pk(&pk, &pt).unwrap();
//! let mut back = Decryptor::new(&sk).decrypt(&ct).unwrap().into_poly();
//! back.to_coefficient();
//! let m = back.basis().moduli()[0];
//! assert!(back.limb(0).iter().all(|&x| m.center(x).abs() < 1 << 20));
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod ciphertext;
pub mod encryptor;
pub mod error;
pub mod keys;
pub mod keyswitch;
pub mod ops;
pub mod params;
pub mod pool;
pub mod serial;

pub use ciphertext::{Ciphertext, Plaintext};
pub use encryptor::{Decryptor, Encryptor};
pub use error::{DecodeError, Result, RlweError};
pub use keys::{
    GaloisKey, GaloisKeys, KeyGenerator, KeyId, PublicKey, RelinearizationKey, SecretKey,
    SwitchingKey,
};
pub use params::{Parameters, ParametersLiteral, SecretDistribution};

#[cfg(test)]
mod tests;
