//! The key holder's side in one place: a secret key with its public,
//! relinearization and Galois keys, encryption and decryption.

use std::sync::Arc;

use hecloud_rlwe::{
    Ciphertext, Decryptor, Encryptor, KeyGenerator, Plaintext, PublicKey, SecretKey,
};

use crate::error::Result;
use crate::evaluator::EvaluationKeys;
use crate::params::CkksParameters;

/// A secret key and everything derived from it.
#[derive(Debug)]
pub struct KeySet {
    params: Arc<CkksParameters>,
    sk: SecretKey,
    pk: PublicKey,
    eval: EvaluationKeys,
}

impl KeySet {
    /// Generates a secret key, the public key, the relinearization key and
    /// Galois keys for the slot rotations `rotations` (plus conjugation if
    /// `conjugate`).
    pub fn generate(
        params: &Arc<CkksParameters>,
        rotations: &[i64],
        conjugate: bool,
    ) -> Result<Self> {
        let top = params.max_level();
        let at: Vec<(i64, usize)> = rotations.iter().map(|&k| (k, top)).collect();
        Self::generate_at_levels(params, &at, conjugate)
    }

    /// [`Self::generate`] with each rotation's key cut to the highest
    /// level it is used at (`(rotation, level)` pairs, as
    /// `Bootstrapper::rotation_levels` gives them): a rotation at a
    /// higher level is then refused (`KeyBelowLevel`).
    pub fn generate_at_levels(
        params: &Arc<CkksParameters>,
        rotations: &[(i64, usize)],
        conjugate: bool,
    ) -> Result<Self> {
        let mut kg = KeyGenerator::new(params.rlwe());
        let sk = kg.gen_secret_key()?;
        let pk = kg.gen_public_key(&sk)?;
        let relin = Some(kg.gen_relinearization_key(&sk)?);
        let galois = kg.gen_galois_keys_at_levels(&sk, rotations, conjugate)?;
        Ok(Self {
            params: params.clone(),
            sk,
            pk,
            eval: EvaluationKeys { relin, galois },
        })
    }

    /// The parameters.
    pub fn params(&self) -> &Arc<CkksParameters> {
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

    /// A copy of the evaluation keys (for the server).
    pub fn evaluation_keys(&self) -> EvaluationKeys {
        self.eval.clone()
    }

    /// Moves the evaluation keys out (leaving none behind): bootstrapping's
    /// keys are gigabytes, a copy would double the memory.
    pub fn take_evaluation_keys(&mut self) -> EvaluationKeys {
        std::mem::take(&mut self.eval)
    }

    /// Public-key encryption.
    pub fn encrypt(&self, pt: &Plaintext) -> Result<Ciphertext> {
        Ok(Encryptor::new(self.params.rlwe()).encrypt_pk(&self.pk, pt)?)
    }

    /// Seeded secret-key encryption (half-size serialized form).
    pub fn encrypt_sk(&self, pt: &Plaintext) -> Result<Ciphertext> {
        Ok(Encryptor::new(self.params.rlwe()).encrypt_sk(&self.sk, pt)?)
    }

    /// Decryption, over the primes decoding reads and the one checking
    /// them ([`CkksParameters::checked_decoding_level`]): the plaintext may
    /// be at a lower level than `ct`, with the same decoded values.
    pub fn decrypt(&self, ct: &Ciphertext) -> Result<Plaintext> {
        decrypt_for_decoding(&self.params, &self.sk, ct)
    }
}

/// Seeded secret-key encryption of real `values` at `level` and the
/// default scale, serialized as it is made: `piece` receives the bytes
/// [`Ciphertext::to_bytes`] would give (of length
/// [`hecloud_rlwe::Parameters::seeded_ciphertext_bytes`]) a limb at a time
/// ([`crate::Encoder::coefficients_real`] into
/// [`Encryptor::encrypt_sk_pieces`]): about half the time of encoding,
/// encrypting and serializing in turn (95 ms instead of 195 ms at N = 2^17,
/// one thread), and a sender can send the first limbs while the last are
/// made.
///
/// ```
/// use hecloud_ckks::{CkksParameters, Encoder, KeySet, params::test_literal};
/// use hecloud_ckks::keys::{decrypt_decode_real, encrypt_real_sk_pieces};
/// let params = CkksParameters::new_insecure_for_tests(test_literal(10, 2), 40).unwrap();
/// let keys = KeySet::generate(&params, &[], false).unwrap();
/// let enc = Encoder::new(&params);
/// let mut bytes = vec![];
/// encrypt_real_sk_pieces(&params, keys.secret_key(), &enc, &[0.25, -3.0], 2, |p| bytes.extend(p))
///     .unwrap();
/// let ct = hecloud_rlwe::Ciphertext::from_bytes(params.rlwe(), &bytes).unwrap();
/// let back = decrypt_decode_real(&params, keys.secret_key(), &enc, &ct).unwrap();
/// assert!((back[0] - 0.25).abs() < 1e-6 && (back[1] + 3.0).abs() < 1e-6);
/// ```
pub fn encrypt_real_sk_pieces(
    params: &CkksParameters,
    sk: &SecretKey,
    encoder: &crate::Encoder,
    values: &[f64],
    level: usize,
    piece: impl FnMut(Vec<u8>),
) -> Result<()> {
    let form = encoder.coefficients_real(values, level, params.default_scale())?;
    encrypt_coefficients_sk_pieces(params, sk, &form, level, piece)
}

/// [`encrypt_real_sk_pieces`] of values already encoded at `level` and the
/// default scale ([`crate::Encoder::coefficients_real`]): for a caller that
/// checks the encoding before it commits to the ciphertext's bytes.
pub fn encrypt_coefficients_sk_pieces(
    params: &CkksParameters,
    sk: &SecretKey,
    form: &crate::Coefficients,
    level: usize,
    piece: impl FnMut(Vec<u8>),
) -> Result<()> {
    Encryptor::new(params.rlwe()).encrypt_sk_pieces(
        sk,
        |_, q, dst| form.write_limb(q, dst),
        level,
        params.default_scale(),
        piece,
    )?;
    Ok(())
}

/// Decrypts and decodes `ct`'s real parts: over the primes decoding reads
/// and the one checking them ([`decrypt_for_decoding`]) and, for a value
/// beyond that headroom (a computation that outgrew it), over all of
/// `ct`'s primes, which decoding reads over all but the last and checks
/// by it. Refused only where even those do not hold the value.
pub fn decrypt_decode_real(
    params: &CkksParameters,
    sk: &SecretKey,
    encoder: &crate::Encoder,
    ct: &Ciphertext,
) -> Result<Vec<f64>> {
    let pt = decrypt_for_decoding(params, sk, ct)?;
    match encoder.decode_real(&pt) {
        Err(crate::CkksError::ValueOutOfRange(_)) if pt.level() < ct.level() => {
            encoder.decode_real(&Decryptor::new(sk).decrypt(ct)?)
        }
        r => r,
    }
}

/// Decrypts `ct` under `sk` over the primes decoding reads and one more,
/// which decoding checks them against
/// ([`CkksParameters::checked_decoding_level`]: a value beyond the
/// headroom is refused, not decoded as another): the plaintext may be at a
/// lower level than `ct`, with the same decoded values. At N = 2^17 that
/// is three limbs' products with the secret instead of fifty.
pub fn decrypt_for_decoding(
    params: &CkksParameters,
    sk: &SecretKey,
    ct: &Ciphertext,
) -> Result<Plaintext> {
    let level = params.checked_decoding_level(ct.scale(), ct.level());
    let dec = Decryptor::new(sk);
    if level == ct.level() {
        return Ok(dec.decrypt(ct)?);
    }
    Ok(dec.decrypt(&ct.to_level(level)?)?)
}
