//! Fast (approximate) base conversion between RNS bases, the core of hybrid
//! key switching and of BGV/BFV-style scaling.
//!
//! For x ∈ [0, Q) given by its residues x_i mod q_i, the converter returns
//! residues mod each p_j of
//!
//!   x' = Σ_i [x_i · (Q/q_i)^-1]_{q_i} · (Q/q_i) = x + u·Q,  0 ≤ u < L,
//!
//! where L is the number of primes of Q: the result is exact up to a small
//! multiple of Q (the documented error bound, checked by the tests).

use std::sync::Arc;

use rayon::prelude::*;

use crate::Modulus;
use crate::backend::{Combination, default_backend};
use crate::error::{MathError, Result};
use crate::poly::{Domain, RnsBasis, RnsPoly};

/// Precomputed constants for converting from basis Q to basis P.
///
/// ```
/// use hecloud_math::{BaseConverter, RnsBasis, RnsPoly, prime::ntt_primes};
/// let n = 16;
/// let q = RnsBasis::new(n, &ntt_primes(40, n, 3, &[]).unwrap()).unwrap();
/// let p = RnsBasis::new(n, &ntt_primes(50, n, 2, &[]).unwrap()).unwrap();
/// let conv = BaseConverter::new(&q, &p).unwrap();
/// let x = RnsPoly::from_signed(&q, &[5; 16]).unwrap();
/// let y = conv.convert(&x).unwrap();
/// assert_eq!(y.basis().len(), 2);
/// ```
#[derive(Debug)]
pub struct BaseConverter {
    from: Arc<RnsBasis>,
    to: Arc<RnsBasis>,
    /// (Q/q_i)^-1 mod q_i.
    qhat_inv: Vec<u64>,
    /// (Q/q_i) mod p_j, indexed [j][i].
    qhat_mod_p: Vec<Vec<u64>>,
}

impl BaseConverter {
    /// A converter from `from` to `to` (same degree).
    pub fn new(from: &Arc<RnsBasis>, to: &Arc<RnsBasis>) -> Result<Self> {
        if from.degree() != to.degree() {
            return Err(MathError::BasisMismatch);
        }
        let qs = from.moduli();
        let mut qhat_inv = Vec::with_capacity(qs.len());
        for (i, m) in qs.iter().enumerate() {
            let h = qs
                .iter()
                .enumerate()
                .filter(|(k, _)| *k != i)
                .fold(1u64, |acc, (_, qk)| m.mul(acc, m.reduce(qk.value())));
            let inv = m.inv(h)?;
            qhat_inv.push(inv);
        }
        let qhat_mod_p = to
            .moduli()
            .iter()
            .map(|p| {
                (0..qs.len())
                    .map(|i| {
                        qs.iter()
                            .enumerate()
                            .filter(|(k, _)| *k != i)
                            .fold(1u64, |acc, (_, qk)| p.mul(acc, p.reduce(qk.value())))
                    })
                    .collect()
            })
            .collect();
        Ok(Self {
            from: from.clone(),
            to: to.clone(),
            qhat_inv,
            qhat_mod_p,
        })
    }

    /// Source basis.
    pub fn from_basis(&self) -> &Arc<RnsBasis> {
        &self.from
    }

    /// Target basis.
    pub fn to_basis(&self) -> &Arc<RnsBasis> {
        &self.to
    }

    /// Converts a coefficient-domain polynomial over `from` to `to`.
    pub fn convert(&self, x: &RnsPoly) -> Result<RnsPoly> {
        if **x.basis() != *self.from {
            return Err(MathError::BasisMismatch);
        }
        if x.domain() != Domain::Coefficient {
            return Err(MathError::DomainMismatch {
                expected: Domain::Coefficient,
                found: x.domain(),
            });
        }
        let n = x.degree();
        let mut out = vec![0u64; self.to.len() * n];
        // Coefficient chunks are independent: give each task the matching
        // piece of every output limb.
        let mut per_chunk: Vec<Vec<&mut [u64]>> =
            (0..n.div_ceil(CHUNK)).map(|_| Vec::new()).collect();
        for limb in out.chunks_exact_mut(n) {
            for (c, piece) in limb.chunks_mut(CHUNK).enumerate() {
                per_chunk[c].push(piece);
            }
        }
        per_chunk
            .into_par_iter()
            .enumerate()
            .for_each(|(c, mut outs)| self.convert_chunk(x, c * CHUNK, &mut outs));
        RnsPoly::from_limbs(&self.to, Domain::Coefficient, out)
    }

    /// Converts coefficients `start..start + outs[0].len()`: first
    /// y_i = x_i · (Q/q_i)^-1 mod q_i for the whole chunk (small enough to
    /// stay in L1), then out_j = Σ_i y_i · (Q/q_i) mod p_j for every j in
    /// one backend call (which reads the chunk once per group of outputs).
    fn convert_chunk(&self, x: &RnsPoly, start: usize, outs: &mut [&mut [u64]]) {
        let be = default_backend();
        let len = outs[0].len();
        let qs = self.from.moduli();
        let mut y = vec![0u64; qs.len() * len];
        for (i, (yi, m)) in y.chunks_exact_mut(len).zip(qs).enumerate() {
            yi.copy_from_slice(&x.limb(i)[start..start + len]);
            be.mul_scalar(m, yi, self.qhat_inv[i]);
        }
        let srcs: Vec<&[u64]> = y.chunks_exact(len).collect();
        let bits: Vec<u32> = qs.iter().map(Modulus::bits).collect();
        let mut outputs: Vec<Combination<'_>> = outs
            .iter_mut()
            .zip(self.to.moduli())
            .zip(&self.qhat_mod_p)
            .map(|((out, q), w)| Combination { q, out, w })
            .collect();
        be.linear_combinations(&mut outputs, &srcs, &bits);
    }
}

/// Coefficients converted together (the scaled inputs of a chunk, 8·L·CHUNK
/// bytes, stay in L1).
const CHUNK: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prime::ntt_primes;
    use num_bigint::BigUint;

    #[test]
    fn conversion_is_exact_up_to_a_small_multiple_of_q() {
        let n = 64;
        let mut s = crate::testing::sampler();
        for (lq, lp) in [(1, 1), (3, 2), (8, 4), (20, 3)] {
            let q_primes = ntt_primes(50, n, lq, &[]).unwrap();
            let p_primes = ntt_primes(60, n, lp, &[]).unwrap();
            let q = RnsBasis::new(n, &q_primes).unwrap();
            let p = RnsBasis::new(n, &p_primes).unwrap();
            let conv = BaseConverter::new(&q, &p).unwrap();
            let x = s.uniform_poly(&q, Domain::Coefficient);
            let y = conv.convert(&x).unwrap();
            let qq = q.product();
            for (j, xj) in x.to_biguint().unwrap().into_iter().enumerate() {
                // Find u with y ≡ x + u·Q mod every p, 0 ≤ u < L.
                let ok = (0..lq as u64).any(|u| {
                    let want = &xj + &qq * BigUint::from(u);
                    p.moduli()
                        .iter()
                        .enumerate()
                        .all(|(k, pm)| (&want % pm.value()) == BigUint::from(y.limb(k)[j]))
                });
                assert!(ok, "coefficient {j} outside the bound (L = {lq})");
            }
        }
    }

    #[test]
    fn rejects_wrong_basis_or_domain() {
        let n = 16;
        let q = RnsBasis::new(n, &ntt_primes(40, n, 2, &[]).unwrap()).unwrap();
        let p = RnsBasis::new(n, &ntt_primes(50, n, 2, &[]).unwrap()).unwrap();
        let conv = BaseConverter::new(&q, &p).unwrap();
        let on_p = RnsPoly::zero(&p, Domain::Coefficient);
        assert_eq!(conv.convert(&on_p).unwrap_err(), MathError::BasisMismatch);
        let ntt = RnsPoly::zero(&q, Domain::Ntt);
        assert!(matches!(
            conv.convert(&ntt),
            Err(MathError::DomainMismatch { .. })
        ));
        let other_n = RnsBasis::new(32, &ntt_primes(50, 32, 2, &[]).unwrap()).unwrap();
        assert_eq!(
            BaseConverter::new(&q, &other_n).unwrap_err(),
            MathError::BasisMismatch
        );
    }
}
