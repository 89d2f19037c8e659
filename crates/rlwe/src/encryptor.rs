//! Encryption (public key, secret key, seeded secret key) and decryption.

use std::sync::Arc;

use hecloud_math::{RnsPoly, Sampler};

use crate::ciphertext::{Ciphertext, Plaintext};
use crate::error::{Result, RlweError};
use crate::keys::{PublicKey, SecretKey, gaussian_ntt};
use crate::keyswitch::mod_down;
use crate::params::Parameters;

/// Encrypts plaintexts, drawing randomness from the OS CSPRNG.
#[derive(Debug)]
pub struct Encryptor {
    params: Arc<Parameters>,
    sampler: Sampler,
}

fn same(a: &Parameters, b: &Parameters) -> Result<()> {
    if a.hash() != b.hash() {
        return Err(RlweError::ParameterMismatch);
    }
    Ok(())
}

impl Encryptor {
    /// An encryptor for `params`.
    pub fn new(params: &Arc<Parameters>) -> Self {
        Self {
            params: params.clone(),
            sampler: Sampler::from_os(),
        }
    }

    /// A deterministic encryptor (tests only: never reuse a seed for real data).
    pub fn from_seed(params: &Arc<Parameters>, seed: [u8; 32]) -> Self {
        Self {
            params: params.clone(),
            sampler: Sampler::from_seed(seed),
        }
    }

    /// Public-key encryption at the plaintext's level: over Q_l·P,
    /// `(b·u + e_0, a·u + e_1)` with ternary u, divided by P (which removes
    /// the encryption noise up to rounding), then `m` added.
    pub fn encrypt_pk(&mut self, pk: &PublicKey, pt: &Plaintext) -> Result<Ciphertext> {
        same(&self.params, &pk.params)?;
        same(&self.params, pt.params())?;
        let level = pt.level();
        let ext = self.params.qp_at(level)?.clone();
        let n = self.params.n();
        let top = self.params.max_level();
        let mut u_coeffs = self.sampler.ternary(n);
        let mut u = RnsPoly::from_signed(&ext, &u_coeffs)?;
        zeroize::Zeroize::zeroize(&mut u_coeffs);
        u.to_ntt();
        // The key's limbs of Q_l and of P.
        let take = |p: &RnsPoly| {
            let mut data = p.data()[..(level + 1) * n].to_vec();
            data.extend_from_slice(&p.data()[(top + 1) * n..]);
            RnsPoly::from_limbs(&ext, p.domain(), data)
        };
        let (b, a) = (take(&pk.b)?, take(&pk.a)?);
        let mut c0 = gaussian_ntt(&mut self.sampler, &ext, &self.params)?;
        c0.mul_add_assign(&b, &u)?;
        let mut c1 = gaussian_ntt(&mut self.sampler, &ext, &self.params)?;
        c1.mul_add_assign(&a, &u)?;
        zeroize::Zeroize::zeroize(&mut u);
        let mut c0 = mod_down(&self.params, level, &c0)?;
        let c1 = mod_down(&self.params, level, &c1)?;
        c0.add_assign(pt.poly())?;
        let mut ct = Ciphertext::new(&self.params, vec![c0, c1], level, pt.scale())?;
        ct.set_key_id(pk.key);
        Ok(ct)
    }

    /// Seeded secret-key encryption: `(−a·s + e + m, a)` with `a` expanded
    /// from a fresh 32-byte seed, which is all the serialized form keeps of it.
    pub fn encrypt_sk(&mut self, sk: &SecretKey, pt: &Plaintext) -> Result<Ciphertext> {
        same(&self.params, sk.params())?;
        same(&self.params, pt.params())?;
        let level = pt.level();
        let basis = self.params.q_at(level)?.clone();
        let seed = self.sampler.seed();
        let a = hecloud_math::sampling::expand_seed_uniform(&seed, &basis);
        // e + a·s, negated: −a·s − e with −e as Gaussian as e. The product
        // reads the first limbs of s over Q·P in place: no copy of the
        // secret (tens of MB at N = 2^17) to make and to wipe.
        let mut c0 = gaussian_ntt(&mut self.sampler, &basis, &self.params)?;
        c0.mul_add_prefix_assign(&a, &sk.s)?;
        c0.neg_assign();
        c0.add_assign(pt.poly())?;
        let mut ct = Ciphertext::from_seed(&self.params, c0, a, seed, level, pt.scale())?;
        ct.set_key_id(sk.key_id());
        Ok(ct)
    }
}

/// Decrypts with the secret key.
#[derive(Debug)]
pub struct Decryptor<'a> {
    sk: &'a SecretKey,
}

impl<'a> Decryptor<'a> {
    /// A decryptor holding a borrow of `sk`.
    pub fn new(sk: &'a SecretKey) -> Self {
        Self { sk }
    }

    /// `Σ c_i·s^i` over Q_l (any degree). Refused: a ciphertext under
    /// another key ([`RlweError::KeyMismatch`]), whose decryption would be
    /// noise.
    pub fn decrypt(&self, ct: &Ciphertext) -> Result<Plaintext> {
        same(self.sk.params(), ct.params())?;
        self.sk.key_id().check(ct.key_id())?;
        let level = ct.level();
        let polys = ct.polys();
        // Horner: (((c_d)·s + c_{d-1})·s + …) + c_0, reading the first
        // limbs of s over Q·P in place (no copy of the secret).
        let mut acc = polys[polys.len() - 1].clone();
        for c in polys[..polys.len() - 1].iter().rev() {
            acc.mul_prefix_assign(&self.sk.s)?;
            acc.add_assign(c)?;
        }
        Plaintext::new(ct.params(), acc, level, ct.scale())
    }
}
