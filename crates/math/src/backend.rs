//! The hot kernels behind one small interface.
//!
//! Scheme code never calls a SIMD routine directly: it goes through a
//! [`Backend`]. [`Scalar`] is the portable reference; [`Simd`] uses AVX2 or
//! AVX-512 when the CPU has them (detected at run time). A future GPU backend
//! implements the same trait and must pass [`parity::check`], which compares
//! every kernel bit for bit with the scalar reference.
//!
//! The process-wide default is chosen once: the best the CPU supports, or
//! what the `HECLOUD_BACKEND` environment variable names (`scalar`, `avx2`,
//! `avx512`, `avx512ifma`; an unavailable choice falls back to the best
//! available).

use std::sync::OnceLock;

use crate::modular::Modulus;
use crate::ntt::NttTable;

/// Kernels that dominate the cost of RNS arithmetic. Every method has the
/// scalar reference as its default so a backend accelerates what it can.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Short name for reports (`scalar`, `avx2`, `avx512`, …).
    fn name(&self) -> &'static str;

    /// Forward negacyclic NTT of one limb in place (entries in [0, q)).
    fn ntt_forward(&self, table: &NttTable, a: &mut [u64]) {
        table.forward_scalar(a);
    }

    /// Inverse negacyclic NTT of one limb in place.
    fn ntt_inverse(&self, table: &NttTable, a: &mut [u64]) {
        table.inverse_scalar(a);
    }

    /// `a[i] = a[i]·b[i] mod q`.
    fn mul_pointwise(&self, q: &Modulus, a: &mut [u64], b: &[u64]) {
        for (x, y) in a.iter_mut().zip(b) {
            *x = q.mul(*x, *y);
        }
    }

    /// `acc[i] = acc[i] + a[i]·b[i] mod q` (key-switching inner products).
    fn mul_add_pointwise(&self, q: &Modulus, a: &[u64], b: &[u64], acc: &mut [u64]) {
        for ((o, x), y) in acc.iter_mut().zip(a).zip(b) {
            *o = q.reduce_u128(*o as u128 + *x as u128 * *y as u128);
        }
    }

    /// `a[i] = a[i]·c mod q` for a constant `c < q`.
    fn mul_scalar(&self, q: &Modulus, a: &mut [u64], c: u64) {
        let cs = q.shoup(c);
        for x in a.iter_mut() {
            *x = q.mul_shoup(*x, c, cs);
        }
    }
}

/// The portable reference backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scalar;

impl Backend for Scalar {
    fn name(&self) -> &'static str {
        "scalar"
    }
}

/// Instruction sets the SIMD backend can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimdLevel {
    /// 256-bit AVX2.
    Avx2,
    /// 512-bit AVX-512 F + DQ.
    Avx512,
    /// AVX-512 with IFMA: 52-bit multiply-adds for primes below 2^50
    /// (larger primes use the AVX-512 kernels).
    Avx512Ifma,
}

/// SIMD backend (x86_64 only); NTTs vectorised, other kernels scalar.
#[derive(Debug, Clone, Copy)]
pub struct Simd {
    level: SimdLevel,
}

impl Simd {
    /// The backend for `level`, if this CPU supports it.
    pub fn new(level: SimdLevel) -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            let ok = match level {
                SimdLevel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
                SimdLevel::Avx512 => {
                    std::arch::is_x86_feature_detected!("avx512f")
                        && std::arch::is_x86_feature_detected!("avx512dq")
                }
                SimdLevel::Avx512Ifma => {
                    std::arch::is_x86_feature_detected!("avx512f")
                        && std::arch::is_x86_feature_detected!("avx512dq")
                        && std::arch::is_x86_feature_detected!("avx512ifma")
                }
            };
            ok.then_some(Self { level })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = level;
            None
        }
    }

    /// The instruction set in use.
    pub fn level(&self) -> SimdLevel {
        self.level
    }
}

impl Backend for Simd {
    fn name(&self) -> &'static str {
        match self.level {
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
            SimdLevel::Avx512Ifma => "avx512ifma",
        }
    }

    fn ntt_forward(&self, table: &NttTable, a: &mut [u64]) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::new` checked that the CPU supports the level's features.
        unsafe {
            match self.level {
                SimdLevel::Avx2 => crate::ntt::avx2::forward(table, a),
                SimdLevel::Avx512 => crate::ntt::avx512::forward(table, a),
                SimdLevel::Avx512Ifma
                    if table.modulus().value() < crate::ntt::avx512ifma::MAX_MODULUS =>
                {
                    crate::ntt::avx512ifma::forward(table, a)
                }
                SimdLevel::Avx512Ifma => crate::ntt::avx512::forward(table, a),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        table.forward_scalar(a);
    }

    fn ntt_inverse(&self, table: &NttTable, a: &mut [u64]) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::new` checked that the CPU supports the level's features.
        unsafe {
            match self.level {
                SimdLevel::Avx2 => crate::ntt::avx2::inverse(table, a),
                SimdLevel::Avx512 => crate::ntt::avx512::inverse(table, a),
                SimdLevel::Avx512Ifma
                    if table.modulus().value() < crate::ntt::avx512ifma::MAX_MODULUS =>
                {
                    crate::ntt::avx512ifma::inverse(table, a)
                }
                SimdLevel::Avx512Ifma => crate::ntt::avx512::inverse(table, a),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        table.inverse_scalar(a);
    }

    fn mul_pointwise(&self, q: &Modulus, a: &mut [u64], b: &[u64]) {
        #[cfg(target_arch = "x86_64")]
        if self.level == SimdLevel::Avx512Ifma && q.value() < crate::ntt::avx512ifma::MAX_MODULUS {
            // SAFETY: `Simd::new` checked the CPU supports AVX-512 IFMA.
            unsafe { crate::ntt::avx512ifma::mul_pointwise(q, a, b) };
            return;
        }
        Scalar.mul_pointwise(q, a, b);
    }

    fn mul_add_pointwise(&self, q: &Modulus, a: &[u64], b: &[u64], acc: &mut [u64]) {
        #[cfg(target_arch = "x86_64")]
        if self.level == SimdLevel::Avx512Ifma && q.value() < crate::ntt::avx512ifma::MAX_MODULUS {
            // SAFETY: `Simd::new` checked the CPU supports AVX-512 IFMA.
            unsafe { crate::ntt::avx512ifma::mul_add_pointwise(q, a, b, acc) };
            return;
        }
        Scalar.mul_add_pointwise(q, a, b, acc);
    }
}

/// Every backend this CPU can run, the scalar reference first.
pub fn available() -> Vec<Box<dyn Backend>> {
    let mut out: Vec<Box<dyn Backend>> = vec![Box::new(Scalar)];
    for level in [SimdLevel::Avx2, SimdLevel::Avx512, SimdLevel::Avx512Ifma] {
        if let Some(b) = Simd::new(level) {
            out.push(Box::new(b));
        }
    }
    out
}

/// The process-wide default backend (see the module docs).
pub fn default_backend() -> &'static dyn Backend {
    static DEFAULT: OnceLock<Box<dyn Backend>> = OnceLock::new();
    DEFAULT
        .get_or_init(|| {
            let wanted = std::env::var("HECLOUD_BACKEND").ok();
            let mut all = available();
            let pick = wanted
                .and_then(|w| all.iter().position(|b| b.name() == w))
                .unwrap_or(all.len() - 1);
            all.swap_remove(pick)
        })
        .as_ref()
}

pub mod parity {
    //! The parity suite: every kernel of a backend against [`Scalar`] on random
    //! inputs and edge values, bit for bit.

    use super::{Backend, Scalar};
    use crate::modular::Modulus;
    use crate::ntt::NttTable;
    use crate::prime::ntt_primes;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{RngCore, SeedableRng};

    /// Compares `backend` with the scalar reference for degrees `2^4..=2^max_log_n`
    /// and 30-, 50-, 60- and 61-bit primes; returns the first mismatch found.
    ///
    /// ```
    /// use hecloud_math::backend::{parity, Scalar};
    /// parity::check(&Scalar, 10).unwrap();
    /// ```
    pub fn check(backend: &dyn Backend, max_log_n: u32) -> Result<(), String> {
        let mut rng = ChaCha20Rng::from_os_rng();
        for log_n in crate::ntt::MIN_LOG_N..=max_log_n {
            let n = 1usize << log_n;
            for bits in [30, 50, 60, 61] {
                let q = ntt_primes(bits, n, 1, &[]).map_err(|e| e.to_string())?[0];
                let table = NttTable::new(q, n).map_err(|e| e.to_string())?;
                let m = Modulus::new(q).map_err(|e| e.to_string())?;
                let inputs = [
                    (0..n).map(|_| rng.next_u64() % q).collect::<Vec<_>>(),
                    vec![q - 1; n],
                    vec![0; n],
                ];
                for a in &inputs {
                    let b: Vec<u64> = (0..n).map(|_| rng.next_u64() % q).collect();
                    let ctx = format!("{} n={n} q={q}", backend.name());
                    let (mut x, mut y) = (a.clone(), a.clone());
                    Scalar.ntt_forward(&table, &mut x);
                    backend.ntt_forward(&table, &mut y);
                    if x != y {
                        return Err(format!("ntt_forward differs ({ctx})"));
                    }
                    Scalar.ntt_inverse(&table, &mut x);
                    backend.ntt_inverse(&table, &mut y);
                    if x != y {
                        return Err(format!("ntt_inverse differs ({ctx})"));
                    }
                    let (mut x, mut y) = (a.clone(), a.clone());
                    Scalar.mul_pointwise(&m, &mut x, &b);
                    backend.mul_pointwise(&m, &mut y, &b);
                    if x != y {
                        return Err(format!("mul_pointwise differs ({ctx})"));
                    }
                    Scalar.mul_add_pointwise(&m, a, &b, &mut x);
                    backend.mul_add_pointwise(&m, a, &b, &mut y);
                    if x != y {
                        return Err(format!("mul_add_pointwise differs ({ctx})"));
                    }
                    let c = b[0];
                    Scalar.mul_scalar(&m, &mut x, c);
                    backend.mul_scalar(&m, &mut y, c);
                    if x != y {
                        return Err(format!("mul_scalar differs ({ctx})"));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_available_backend_matches_scalar() {
        let all = available();
        assert_eq!(all[0].name(), "scalar");
        for b in &all {
            parity::check(b.as_ref(), 13).unwrap();
        }
    }

    #[test]
    fn simd_backends_match_scalar_at_large_degrees() {
        for b in available().iter().skip(1) {
            for log_n in [16, 17] {
                let n = 1 << log_n;
                let q = crate::prime::ntt_primes(60, n, 1, &[]).unwrap()[0];
                let t = NttTable::new(q, n).unwrap();
                let a: Vec<u64> = (0..n as u64)
                    .map(|i| (i * 0x9E37_79B9_7F4A_7C15) % q)
                    .collect();
                let (mut x, mut y) = (a.clone(), a.clone());
                Scalar.ntt_forward(&t, &mut x);
                b.ntt_forward(&t, &mut y);
                assert_eq!(x, y, "{} forward n={n}", b.name());
                Scalar.ntt_inverse(&t, &mut x);
                b.ntt_inverse(&t, &mut y);
                assert_eq!(x, y, "{} inverse n={n}", b.name());
                assert_eq!(x, a);
            }
        }
    }
}
