//! Keys: the secret holder's [`KeySet`] (encryption, decryption, measured
//! noise budget) and the server's [`EvaluationKeys`].

use std::sync::Arc;

use hecloud_math::{Domain, Modulus};
use hecloud_rlwe::{
    Ciphertext, Decryptor, Encryptor, GaloisKeys, KeyGenerator, PublicKey, RelinearizationKey,
    SecretKey,
};

use crate::encoder::{Encoder, Plaintext};
use crate::error::{BgvError, Result};
use crate::params::BgvParameters;

/// What the evaluator needs: the relinearization key and the Galois keys of
/// the rotations it will perform.
#[derive(Debug)]
pub struct EvaluationKeys {
    /// Relinearization key (needed by products of ciphertexts).
    pub relin: Option<RelinearizationKey>,
    /// Galois keys (row rotations and the column swap).
    pub galois: GaloisKeys,
}

/// The row rotations (powers of two below N/2) that [`crate::Evaluator::inner_sum`]
/// and rotations by any amount use.
pub fn power_of_two_rotations(n: usize) -> Vec<i64> {
    (0..)
        .map(|k| 1i64 << k)
        .take_while(|&r| (r as usize) < n / 2)
        .collect()
}

/// A key holder's keys: secret and public key, and the evaluation keys it
/// hands to a server.
///
/// ```
/// use hecloud_bgv::{BgvParameters, Encoder, KeySet, params::test_literal};
/// let params = BgvParameters::new_insecure_for_tests(test_literal(10, 2, 65537)).unwrap();
/// let keys = KeySet::generate(&params, &[1], true).unwrap();
/// let enc = Encoder::new(&params);
/// let ct = keys.encrypt(&enc.encode(&[7, 8, 9]).unwrap()).unwrap();
/// assert_eq!(&enc.decode(&keys.decrypt(&ct).unwrap()).unwrap()[..3], &[7, 8, 9]);
/// assert!(keys.noise_budget(&ct).unwrap() > 100.0);
/// ```
#[derive(Debug)]
pub struct KeySet {
    params: Arc<BgvParameters>,
    sk: SecretKey,
    pk: PublicKey,
    eval: Arc<EvaluationKeys>,
}

impl KeySet {
    /// Fresh keys: secret, public, relinearization, and Galois keys for the
    /// row rotations `rotations` (and the column swap if `columns`).
    pub fn generate(params: &Arc<BgvParameters>, rotations: &[i64], columns: bool) -> Result<Self> {
        let mut kg = KeyGenerator::new(params.rlwe());
        let sk = kg.gen_secret_key()?;
        Self::from_secret_key(params, sk, rotations, columns)
    }

    /// Keys around an existing secret key.
    pub fn from_secret_key(
        params: &Arc<BgvParameters>,
        sk: SecretKey,
        rotations: &[i64],
        columns: bool,
    ) -> Result<Self> {
        let mut kg = KeyGenerator::new(params.rlwe());
        let pk = kg.gen_public_key(&sk)?;
        let relin = Some(kg.gen_relinearization_key(&sk)?);
        let galois = kg.gen_galois_keys(&sk, rotations, columns)?;
        Ok(Self {
            params: params.clone(),
            sk,
            pk,
            eval: Arc::new(EvaluationKeys { relin, galois }),
        })
    }

    /// Keys around an existing secret key with no evaluation keys (its
    /// public key only): for a key holder that decrypts and re-encrypts
    /// (a refresh responder), where a relinearization key, hundreds of
    /// megabytes at N = 2^16, would go unused. An evaluator over
    /// [`Self::evaluation_keys`] then refuses products and rotations.
    ///
    /// ```
    /// use hecloud_bgv::{BgvParameters, Encoder, KeySet, params::test_literal};
    /// let params = BgvParameters::new_insecure_for_tests(test_literal(10, 2, 65537)).unwrap();
    /// let full = KeySet::generate(&params, &[], false).unwrap();
    /// let sk = hecloud_rlwe::SecretKey::from_coefficients(
    ///     params.rlwe(),
    ///     &full.secret_key().export_coefficients(),
    /// )
    /// .unwrap();
    /// let holder = KeySet::for_key_holder(&params, sk).unwrap();
    /// assert!(holder.evaluation_keys().relin.is_none());
    /// let enc = Encoder::new(&params);
    /// let ct = full.encrypt(&enc.encode(&[4, 5]).unwrap()).unwrap();
    /// assert_eq!(&enc.decode(&holder.decrypt(&ct).unwrap()).unwrap()[..2], &[4, 5]);
    /// ```
    pub fn for_key_holder(params: &Arc<BgvParameters>, sk: SecretKey) -> Result<Self> {
        let mut kg = KeyGenerator::new(params.rlwe());
        let pk = kg.gen_public_key(&sk)?;
        let galois = kg.gen_galois_keys(&sk, &[], false)?;
        Ok(Self {
            params: params.clone(),
            sk,
            pk,
            eval: Arc::new(EvaluationKeys {
                relin: None,
                galois,
            }),
        })
    }

    /// The parameters.
    pub fn params(&self) -> &Arc<BgvParameters> {
        &self.params
    }

    /// The secret key.
    pub fn secret_key(&self) -> &SecretKey {
        &self.sk
    }

    /// The public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.pk
    }

    /// The evaluation keys (shared).
    pub fn evaluation_keys(&self) -> Arc<EvaluationKeys> {
        self.eval.clone()
    }

    /// Public-key encryption at the top level.
    pub fn encrypt(&self, pt: &Plaintext) -> Result<Ciphertext> {
        encrypt_pk(&self.params, &self.pk, pt, self.params.max_level())
    }

    /// Seeded secret-key encryption at `level` (half the bytes on the wire).
    pub fn encrypt_sk(&self, pt: &Plaintext, level: usize) -> Result<Ciphertext> {
        let rpt = pt.lift(&self.params, level, 1)?;
        let mut ct = Encryptor::new(self.params.rlwe()).encrypt_sk(&self.sk, &rpt)?;
        ct.set_scale(self.params.noise().fresh_sk());
        Ok(ct)
    }

    /// Decrypts: the plaintext mod t, the factor divided out.
    pub fn decrypt(&self, ct: &Ciphertext) -> Result<Plaintext> {
        check(&self.params, ct)?;
        let mut v = Decryptor::new(&self.sk).decrypt(ct)?.into_poly();
        v.to_coefficient();
        let coeffs = centered_mod_t(&v, self.params.t_modulus())?;
        let t = self.params.t_modulus();
        let unfactor = t.inv(ct.factor())?;
        Ok(Encoder::from_coefficients(
            coeffs.into_iter().map(|c| t.mul(c, unfactor)).collect(),
        ))
    }

    /// The true noise budget of `ct` in bits: log2(Q_l/2) minus log2 of the
    /// largest coefficient of c_0 + c_1·s (message included); decryption is
    /// correct while it is positive. For tests and diagnostics (it needs
    /// the secret key).
    pub fn noise_budget(&self, ct: &Ciphertext) -> Result<f64> {
        check(&self.params, ct)?;
        let mut v = Decryptor::new(&self.sk).decrypt(ct)?.into_poly();
        v.to_coefficient();
        let max = v
            .to_bigint_centered()?
            .into_iter()
            .map(|x| x.magnitude().clone())
            .max()
            .unwrap_or_default();
        let bits = if max.bits() == 0 {
            0.0
        } else {
            let shift = max.bits().saturating_sub(53);
            let top: f64 = num_bigint::BigUint::to_u64_digits(&(max >> shift))
                .first()
                .copied()
                .unwrap_or(0) as f64;
            top.log2() + shift as f64
        };
        Ok(self.params.log_q_at(ct.level()) - 1.0 - bits)
    }
}

/// Public-key encryption of `pt` at `level`.
pub fn encrypt_pk(
    params: &Arc<BgvParameters>,
    pk: &PublicKey,
    pt: &Plaintext,
    level: usize,
) -> Result<Ciphertext> {
    let rpt = pt.lift(params, level, 1)?;
    let mut ct = Encryptor::new(params.rlwe()).encrypt_pk(pk, &rpt)?;
    ct.set_scale(params.noise().fresh_pk());
    Ok(ct)
}

/// Checks that `ct` belongs to `params`.
pub(crate) fn check(params: &BgvParameters, ct: &Ciphertext) -> Result<()> {
    if ct.params().hash() != params.rlwe().hash() {
        return Err(hecloud_rlwe::RlweError::ParameterMismatch.into());
    }
    let t = params.t();
    if ct.factor() == 0 || ct.factor() >= t {
        return Err(BgvError::NotBgv(format!(
            "factor {} is not a unit mod {t}",
            ct.factor()
        )));
    }
    Ok(())
}

/// The coefficients of x (over Q_l, coefficient domain), taken in
/// (−Q_l/2, Q_l/2] and reduced mod t, by the CRT without big integers:
/// x = Σ y_i·(Q/q_i) − v·Q with y_i = [x_i·(Q/q_i)⁻¹]_{q_i} and
/// v = round(Σ y_i/q_i), the rounding exact while |x| ≪ Q/2.
fn centered_mod_t(x: &hecloud_math::RnsPoly, t: &Modulus) -> Result<Vec<u64>> {
    debug_assert_eq!(x.domain(), Domain::Coefficient);
    let moduli = x.basis().moduli();
    let prod_except = |m: &Modulus, skip: usize| {
        moduli
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != skip)
            .fold(1 % m.value(), |acc, (_, q)| m.mul(acc, m.reduce(q.value())))
    };
    let qhat_inv: Vec<u64> = moduli
        .iter()
        .enumerate()
        .map(|(i, m)| m.inv(prod_except(m, i)))
        .collect::<hecloud_math::Result<_>>()?;
    let qhat_mod_t: Vec<u64> = (0..moduli.len()).map(|i| prod_except(t, i)).collect();
    let q_mod_t = prod_except(t, usize::MAX);
    let inv_f: Vec<f64> = moduli.iter().map(|m| 1.0 / m.value() as f64).collect();
    let n = x.degree();
    let mut y = vec![0u64; moduli.len()];
    Ok((0..n)
        .map(|j| {
            let mut frac = 0.0;
            for (i, m) in moduli.iter().enumerate() {
                y[i] = m.mul(x.limb(i)[j], qhat_inv[i]);
                frac += y[i] as f64 * inv_f[i];
            }
            let v = frac.round() as u64;
            let sum = y
                .iter()
                .zip(&qhat_mod_t)
                .fold(0, |acc, (&yi, &w)| t.add(acc, t.mul(t.reduce(yi), w)));
            t.sub(sum, t.mul(t.reduce(v), q_mod_t))
        })
        .collect())
}
