//! # hecloud-math
//!
//! The RNS/NTT engine under hecloud's lattice schemes. It knows nothing of
//! encryption: primes, modular arithmetic below 2^62, the negacyclic NTT,
//! RNS polynomials that carry their domain and basis, base conversion, CRT,
//! seedable samplers, and the bit packing of serialized residues. Hot
//! kernels run behind the [`backend::Backend`] interface (scalar reference,
//! AVX2 and AVX-512 chosen at run time).
//!
//! ```
//! use hecloud_math::{Domain, RnsBasis, RnsPoly, Sampler, prime::ntt_primes};
//! let n = 1 << 12;
//! let basis = RnsBasis::new(n, &ntt_primes(60, n, 3, &[]).unwrap()).unwrap();
//! let mut s = Sampler::from_os();
//! let mut a = s.uniform_poly(&basis, Domain::Coefficient);
//! let orig = a.clone();
//! a.to_ntt();
//! a.to_coefficient();
//! assert_eq!(a, orig);
//! ```
#![deny(missing_docs)]

pub mod backend;
pub mod base_conv;
pub mod error;
pub mod modular;
pub mod ntt;
pub mod pack;
pub mod poly;
pub mod pool;
pub mod prime;
pub mod sampling;
pub mod testing;

pub use base_conv::BaseConverter;
pub use error::{MathError, Result};
pub use modular::Modulus;
pub use ntt::NttTable;
pub use poly::{Domain, RnsBasis, RnsPoly};
pub use sampling::Sampler;
