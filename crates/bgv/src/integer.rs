//! Exact integer SIMD (the research's "SEAL row"): vectors of unsigned
//! integers encrypted whole, one per slot, with sums, products, inner
//! products and the sum of all slots exact below a bound T.
//!
//! One plaintext modulus holds about 50 bits, so a larger bound is split
//! over several primes t_1 … t_k (each ≡ 1 mod 2N, for batching) and
//! recombined by the CRT on decryption: a vector is then k ciphertexts, one
//! per residue, over parameter sets that share N, the shape of Q and the
//! secret key. For example (by [`IntegerParameters::for_sums`]):
//!
//! | values | terms n | bound T | residues | Q primes (N = 2^13) |
//! | --- | --- | --- | --- | --- |
//! | 32-bit | ≤ 2^16 | ≥ 2^49 | one t of 50 bits | 2 |
//! | 64-bit | ≤ 2^16 | ≥ 2^81 | two t of 42 bits | 2 each |
//!
//! Q is the smallest that the noise model accepts for the sums (and
//! products, for [`IntegerParameters::new`] with depth ≥ 1) it is built for;
//! a result at or above T wraps mod T, so the bound is the caller's to pick.

use std::sync::Arc;

use hecloud_math::prime::ntt_primes;
use hecloud_rlwe::{Ciphertext, ParametersLiteral, SecretDistribution, SecretKey, params::SIGMA};
use num_bigint::BigUint;

use crate::encoder::Encoder;
use crate::error::{BgvError, Result};
use crate::evaluator::Evaluator;
use crate::keys::{KeySet, power_of_two_rotations};
use crate::params::BgvParameters;

/// Largest plaintext prime used for one residue.
const MAX_T_BITS: u32 = 50;

/// Parameters of the integer encoding: one BGV parameter set per residue.
#[derive(Debug)]
pub struct IntegerParameters {
    residues: Vec<Arc<BgvParameters>>,
    depth: usize,
    max_terms: u64,
}

impl IntegerParameters {
    /// Parameters at N = 2^log_n for vectors of `value_bits`-bit integers
    /// summed `max_terms` at a time, exactly (T > max_terms·(2^value_bits − 1)).
    ///
    /// ```
    /// use hecloud_bgv::integer::IntegerParameters;
    /// let p = IntegerParameters::for_sums(13, 32, 1 << 16).unwrap();
    /// assert_eq!(p.residues().len(), 1);
    /// assert!(p.bound_bits() >= 48.0);
    /// let p = IntegerParameters::for_sums(13, 64, 1 << 16).unwrap();
    /// assert_eq!(p.residues().len(), 2);
    /// ```
    pub fn for_sums(log_n: u32, value_bits: u32, max_terms: u64) -> Result<Arc<Self>> {
        let log_terms = 64 - max_terms.max(1).saturating_sub(1).leading_zeros();
        Self::new(log_n, value_bits + log_terms, 0, max_terms, true)
    }

    /// Parameters at N = 2^log_n for results below 2^result_bits, through
    /// `depth` levels of products, each level summing up to `max_terms`
    /// terms (an inner product of that length, say). Checked for 128-bit
    /// security unless `secure` is false (tests).
    pub fn new(
        log_n: u32,
        result_bits: u32,
        depth: usize,
        max_terms: u64,
        secure: bool,
    ) -> Result<Arc<Self>> {
        if !(1..=127).contains(&result_bits) {
            return Err(BgvError::PlaintextModulus(format!(
                "a bound of 2^{result_bits} (results must fit 1..=127 bits)"
            )));
        }
        let n = 1usize << log_n;
        // k primes of b bits: a product of at least 2^(result_bits + 1).
        let k = (result_bits + 1).div_ceil(MAX_T_BITS - 1);
        let b = (result_bits + 1).div_ceil(k) + 1;
        let ts = ntt_primes(b, n, k as usize, &[])?;
        // Q and P primes of equal size, as large as 128-bit security allows
        // (60 bits at most); the fewest that the noise model accepts.
        let max_log_qp = match hecloud_rlwe::params::max_log_qp(log_n) {
            Some(m) if secure => m as usize,
            _ => 61 * 32,
        };
        let mut last_err = None;
        for primes in 1..=30 {
            let q_bits = (max_log_qp / (primes + 1)).min(60) as u32;
            if q_bits < 20 {
                break;
            }
            let built: Result<Vec<_>> = ts
                .iter()
                .map(|&t| {
                    let lit = ParametersLiteral {
                        log_n,
                        log_q: vec![q_bits; primes],
                        log_p: vec![q_bits],
                        secret: SecretDistribution::Ternary,
                        sigma: SIGMA,
                        dnum: None,
                        plaintext_modulus: Some(t),
                    };
                    if secure {
                        BgvParameters::new(lit)
                    } else {
                        BgvParameters::new_insecure_for_tests(lit)
                    }
                })
                .collect();
            match built {
                Ok(residues) if residues.iter().all(|p| survives(p, depth, max_terms)) => {
                    return Ok(Arc::new(Self {
                        residues,
                        depth,
                        max_terms,
                    }));
                }
                Ok(_) => {}
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| {
            BgvError::PlaintextModulus(format!(
                "no 128-bit parameters at N = 2^{log_n} hold 2^{result_bits} through depth {depth}"
            ))
        }))
    }

    /// The parameter set of each residue.
    pub fn residues(&self) -> &[Arc<BgvParameters>] {
        &self.residues
    }

    /// log2 of the bound T = ∏ t_i below which results are exact.
    pub fn bound_bits(&self) -> f64 {
        self.residues.iter().map(|p| (p.t() as f64).log2()).sum()
    }

    /// The products depth these parameters were sized for.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The terms per sum these parameters were sized for.
    pub fn max_terms(&self) -> u64 {
        self.max_terms
    }

    /// Slots per vector.
    pub fn slots(&self) -> usize {
        self.residues[0].n()
    }
}

/// Whether a fresh top-level ciphertext survives `depth` levels of
/// (sum of `terms` products, relinearized and switched down) under the
/// noise model, then a sum of `terms`.
fn survives(p: &BgvParameters, depth: usize, terms: u64) -> bool {
    let nm = p.noise();
    let log_terms = (terms.max(1) as f64).log2();
    let mut level = p.max_level();
    let mut noise = nm.fresh_pk() + log_terms;
    for _ in 0..depth {
        let product = p.noise_after_key_switch(nm.mul(noise, noise), level);
        if !p.has_budget(level, product) || level == 0 {
            return false;
        }
        noise = p.noise_after_mod_switch(product, level) + log_terms;
        level -= 1;
    }
    p.has_budget(level, noise)
}

/// An encrypted integer vector: one ciphertext per residue.
#[derive(Debug, Clone)]
pub struct IntegerVector {
    cts: Vec<Ciphertext>,
}

impl IntegerVector {
    /// The ciphertext of each residue.
    pub fn ciphertexts(&self) -> &[Ciphertext] {
        &self.cts
    }

    /// A vector from its residue ciphertexts (as [`IntegerVector::ciphertexts`]
    /// gave them).
    pub fn from_ciphertexts(cts: Vec<Ciphertext>) -> Self {
        Self { cts }
    }
}

/// The key holder's keys of every residue, over one secret.
#[derive(Debug)]
pub struct IntegerKeys {
    params: Arc<IntegerParameters>,
    sets: Vec<KeySet>,
    encoders: Vec<Encoder>,
}

impl IntegerKeys {
    /// Fresh keys; with `slot_sums`, the rotation keys that
    /// [`IntegerEvaluator::slot_sum`] needs.
    pub fn generate(params: &Arc<IntegerParameters>, slot_sums: bool) -> Result<Self> {
        let rot = if slot_sums {
            power_of_two_rotations(params.slots())
        } else {
            Vec::new()
        };
        let first = KeySet::generate(&params.residues[0], &rot, slot_sums)?;
        let coeffs = first.secret_key().export_coefficients();
        let mut sets = vec![first];
        for p in &params.residues[1..] {
            let sk = SecretKey::from_coefficients(p.rlwe(), &coeffs)?;
            sets.push(KeySet::from_secret_key(p, sk, &rot, slot_sums)?);
        }
        let encoders = params.residues.iter().map(Encoder::new).collect();
        Ok(Self {
            params: params.clone(),
            sets,
            encoders,
        })
    }

    /// The key set of each residue.
    pub fn residues(&self) -> &[KeySet] {
        &self.sets
    }

    /// Encrypts up to N integers (public key, top level).
    pub fn encrypt(&self, values: &[u64]) -> Result<IntegerVector> {
        let cts = self
            .sets
            .iter()
            .zip(&self.encoders)
            .map(|(keys, enc)| {
                let t = keys.params().t();
                let residues: Vec<u64> = values.iter().map(|&v| v % t).collect();
                keys.encrypt(&enc.encode(&residues)?)
            })
            .collect::<Result<_>>()?;
        Ok(IntegerVector { cts })
    }

    /// Decrypts to the N slot values mod T, by the CRT.
    pub fn decrypt(&self, v: &IntegerVector) -> Result<Vec<u128>> {
        if v.cts.len() != self.sets.len() {
            return Err(BgvError::NotBgv(format!(
                "{} residues for parameters of {}",
                v.cts.len(),
                self.sets.len()
            )));
        }
        let residues: Vec<Vec<u64>> = self
            .sets
            .iter()
            .zip(&self.encoders)
            .zip(&v.cts)
            .map(|((keys, enc), ct)| enc.decode(&keys.decrypt(ct)?))
            .collect::<Result<_>>()?;
        let ts: Vec<u64> = self.params.residues.iter().map(|p| p.t()).collect();
        let crt = Crt::new(&ts);
        Ok((0..self.params.slots())
            .map(|j| crt.combine(residues.iter().map(|r| r[j])))
            .collect())
    }
}

/// CRT recombination for the primes t_i: x = Σ r_i·e_i mod T with
/// e_i = (T/t_i)·((T/t_i)⁻¹ mod t_i).
struct Crt {
    t: BigUint,
    e: Vec<BigUint>,
}

impl Crt {
    fn new(ts: &[u64]) -> Self {
        let t: BigUint = ts.iter().map(|&x| BigUint::from(x)).product();
        let e = ts
            .iter()
            .map(|&ti| {
                let hat = &t / ti;
                let m = hecloud_math::Modulus::new(ti).expect("t is a valid modulus");
                let hat_mod = (&hat % ti).to_u64_digits().first().copied().unwrap_or(0);
                let inv = m.inv(hat_mod).expect("the t_i are distinct primes");
                hat * inv
            })
            .collect();
        Self { t, e }
    }

    fn combine(&self, residues: impl Iterator<Item = u64>) -> u128 {
        let x: BigUint = residues.zip(&self.e).map(|(r, e)| e * r).sum::<BigUint>() % &self.t;
        x.to_u64_digits()
            .iter()
            .rev()
            .fold(0u128, |acc, &d| acc << 64 | d as u128)
    }
}

/// Evaluates on integer vectors: every operation runs once per residue.
///
/// ```
/// use hecloud_bgv::integer::{IntegerEvaluator, IntegerKeys, IntegerParameters};
/// // Depth 1, sums of up to 1024 terms (the slot sum adds all 1024 slots).
/// let params = IntegerParameters::new(10, 40, 1, 1024, false).unwrap(); // tests only
/// let keys = IntegerKeys::generate(&params, true).unwrap();
/// let eval = IntegerEvaluator::new(&params, &keys);
/// let a = keys.encrypt(&[1 << 20, 3]).unwrap();
/// let b = keys.encrypt(&[1 << 10, 5]).unwrap();
/// let p = eval.mul(&a, &b).unwrap();
/// assert_eq!(&keys.decrypt(&p).unwrap()[..2], &[1 << 30, 15]);
/// let dot = eval.slot_sum(&p).unwrap(); // Σ a_j·b_j in every slot
/// assert_eq!(keys.decrypt(&dot).unwrap()[7], (1 << 30) + 15);
/// ```
#[derive(Debug, Clone)]
pub struct IntegerEvaluator {
    evals: Vec<Evaluator>,
}

impl IntegerEvaluator {
    /// An evaluator with the key holder's evaluation keys.
    pub fn new(params: &Arc<IntegerParameters>, keys: &IntegerKeys) -> Self {
        Self {
            evals: params
                .residues
                .iter()
                .zip(&keys.sets)
                .map(|(p, k)| Evaluator::new(p, k.evaluation_keys()))
                .collect(),
        }
    }

    fn each(
        &self,
        vs: &[&IntegerVector],
        f: impl Fn(&Evaluator, &[&Ciphertext]) -> Result<Ciphertext>,
    ) -> Result<IntegerVector> {
        if let Some(v) = vs.iter().find(|v| v.cts.len() != self.evals.len()) {
            return Err(BgvError::NotBgv(format!(
                "{} residues for parameters of {}",
                v.cts.len(),
                self.evals.len()
            )));
        }
        let cts = self
            .evals
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let args: Vec<&Ciphertext> = vs.iter().map(|v| &v.cts[i]).collect();
                f(e, &args)
            })
            .collect::<Result<_>>()?;
        Ok(IntegerVector { cts })
    }

    /// a + b, slot-wise.
    pub fn add(&self, a: &IntegerVector, b: &IntegerVector) -> Result<IntegerVector> {
        self.each(&[a, b], |e, c| e.add(c[0], c[1]))
    }

    /// The slot-wise sum of many vectors (read in place, see
    /// [`Evaluator::add_many`]).
    pub fn sum(&self, vs: &[IntegerVector]) -> Result<IntegerVector> {
        let refs: Vec<&IntegerVector> = vs.iter().collect();
        self.each(&refs, |e, c| e.add_many(c.iter().copied()))
    }

    /// a · b, slot-wise (relinearized, switched down a level).
    pub fn mul(&self, a: &IntegerVector, b: &IntegerVector) -> Result<IntegerVector> {
        self.each(&[a, b], |e, c| e.mul_relin(c[0], c[1]))
    }

    /// Σ_i a_i·b_i, slot-wise: the products stay degree 2 and are
    /// relinearized once, after the sum.
    pub fn inner_product(&self, a: &[IntegerVector], b: &[IntegerVector]) -> Result<IntegerVector> {
        if a.len() != b.len() || a.is_empty() {
            return Err(BgvError::NotBgv(format!(
                "inner product of {} and {} vectors",
                a.len(),
                b.len()
            )));
        }
        let refs: Vec<&IntegerVector> = a.iter().chain(b).collect();
        let n = a.len();
        self.each(&refs, |e, c| {
            let products = (0..n)
                .map(|i| e.mul(c[i], c[n + i]))
                .collect::<Result<Vec<_>>>()?;
            let sum = e.add_many(&products)?;
            e.relinearize(&sum)
        })
    }

    /// The sum of all slots, in every slot.
    pub fn slot_sum(&self, a: &IntegerVector) -> Result<IntegerVector> {
        self.each(&[a], |e, c| e.inner_sum(c[0]))
    }
}
