//! Encryption (public key, secret key, seeded secret key) and decryption.

use std::sync::Arc;

use hecloud_math::backend::default_backend;
use hecloud_math::sampling::expand_seed_uniform_limb;
use hecloud_math::{Modulus, RnsPoly, Sampler};
use rayon::prelude::*;

use crate::ciphertext::{Ciphertext, Plaintext};
use crate::error::{Result, RlweError};
use crate::keys::{PublicKey, SecretKey, gaussian_ntt};
use crate::keyswitch::mod_down;
use crate::params::Parameters;
use crate::serial::{CiphertextMeta, HEADER_LEN, pack_limb, residue_bits, write_ciphertext_header};

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

    /// [`Encryptor::encrypt_sk`] of the plaintext at `level` and `scale`
    /// whose coefficient form `m` gives a limb at a time, serialized as it
    /// is made: `piece` receives, in order, pieces whose concatenation is
    /// what [`Ciphertext::to_bytes`] makes of the seeded ciphertext (the
    /// header with the seed, then each packed limb of c_0), the same bytes
    /// for the same randomness. `m(i, q, dst)` writes the plaintext's
    /// coefficients modulo the level's `i`-th prime `q` into `dst`, reduced.
    ///
    /// Why: a consumer can send the first limbs while the last are being
    /// encrypted, and nothing is made over all of Q (at N = 2^17 with 60
    /// primes `a`, the error, the plaintext and c_0 are 63 MB each in
    /// memory): each limb is made, transformed and packed while it is in
    /// cache, and `m − e` takes one NTT instead of two. Limbs are made in
    /// parallel groups on the current thread pool.
    ///
    /// ```
    /// # use hecloud_rlwe::{Encryptor, KeyGenerator, Parameters, ParametersLiteral, Plaintext, SecretDistribution};
    /// # use hecloud_math::{Domain, RnsPoly};
    /// # let params = Parameters::new(ParametersLiteral {
    /// #     log_n: 12, log_q: vec![40, 30], log_p: vec![38],
    /// #     secret: SecretDistribution::Ternary, sigma: 3.2, dnum: None, plaintext_modulus: None,
    /// # }).unwrap();
    /// let sk = KeyGenerator::new(&params).gen_secret_key().unwrap();
    /// // The plaintext 5 (its constant coefficient) at level 1, scale 1.
    /// let five = |_, q: &hecloud_math::Modulus, dst: &mut [u64]| {
    ///     dst.fill(0);
    ///     dst[0] = 5 % q.value();
    /// };
    /// let mut bytes = vec![];
    /// Encryptor::new(&params)
    ///     .encrypt_sk_pieces(&sk, five, 1, 1.0, |piece| bytes.extend(piece))
    ///     .unwrap();
    /// let ct = hecloud_rlwe::Ciphertext::from_bytes(&params, &bytes).unwrap();
    /// let mut pt = hecloud_rlwe::Decryptor::new(&sk).decrypt(&ct).unwrap().into_poly();
    /// pt.to_coefficient();
    /// let q0 = params.q_at(1).unwrap().moduli()[0];
    /// assert!(q0.center(q0.sub(pt.limb(0)[0], 5)).abs() < 40);
    /// ```
    pub fn encrypt_sk_pieces<M, P>(
        &mut self,
        sk: &SecretKey,
        m: M,
        level: usize,
        scale: f64,
        mut piece: P,
    ) -> Result<()>
    where
        M: Fn(usize, &Modulus, &mut [u64]) + Sync,
        P: FnMut(Vec<u8>),
    {
        same(&self.params, sk.params())?;
        if !(scale.is_finite() && scale > 0.0) {
            return Err(RlweError::InvalidScale(scale));
        }
        let basis = self.params.q_at(level)?.clone();
        let n = basis.degree();
        // The randomness in `encrypt_sk`'s order: the seed, then the error.
        let seed = self.sampler.seed();
        let e = zeroize::Zeroizing::new(self.sampler.gaussian(n));
        let t = self.params.plaintext_modulus();
        let mut head = Vec::with_capacity(HEADER_LEN + seed.len());
        write_ciphertext_header(
            &mut head,
            &self.params,
            CiphertextMeta {
                seeded: true,
                level,
                scale,
                count: 2,
                factor: 1,
                key: sk.key_id(),
            },
        );
        head.extend_from_slice(&seed);
        piece(head);
        let be = default_backend();
        // One limb's packed bytes, made in its scratch `c` and `a` (each
        // left holding public values: −c_0 and a).
        let limb = |i: usize, c: &mut [u64], a: &mut [u64]| {
            let q = &basis.moduli()[i];
            // m − t·e, then to the NTT domain: −c_0 before a·s. |e| is far
            // below q.
            m(i, q, c);
            match t {
                None => c
                    .iter_mut()
                    .zip(e.iter())
                    .for_each(|(x, &e)| *x = q.sub(q.from_small_i64(e), *x)),
                Some(t) => {
                    let t = q.reduce(t);
                    c.iter_mut()
                        .zip(e.iter())
                        .for_each(|(x, &e)| *x = q.sub(q.mul(q.from_small_i64(e), t), *x));
                }
            }
            be.ntt_forward(&basis.tables()[i], c);
            expand_seed_uniform_limb(&seed, i, q.value(), a);
            be.mul_add_pointwise(q, a, sk.s.limb(i), c);
            c.iter_mut().for_each(|x| *x = q.neg(*x));
            let bits = residue_bits(q.value());
            let mut out = vec![0; hecloud_math::pack::packed_len(n, bits)];
            pack_limb(c, bits, &mut out);
            out
        };
        // Groups of a few limbs per thread: parallel, and in order. Each
        // limb of a group has its scratch, reused by the next group (no
        // fresh pages to fault in per limb).
        let group = 2 * rayon::current_num_threads();
        let mut scratch: Vec<(Vec<u64>, Vec<u64>)> = (0..group.min(basis.len()))
            .map(|_| (vec![0; n], vec![0; n]))
            .collect();
        let limbs: Vec<usize> = (0..basis.len()).collect();
        for g in limbs.chunks(group) {
            let packed: Vec<Vec<u8>> = g
                .par_iter()
                .zip(scratch.par_iter_mut())
                .map(|(&i, (c, a))| limb(i, c, a))
                .collect();
            packed.into_iter().for_each(&mut piece);
        }
        Ok(())
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
