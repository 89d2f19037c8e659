//! Client-aided refresh: the [`Refresher`] interface, the two halves of
//! the protocol ([`RefreshMask`] on the server, [`reencrypt`] at the key
//! holder) and [`LocalRefresher`], both halves in one process.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hecloud_bgv::keys::encrypt_pk;
use hecloud_bgv::{Encoder, Evaluator, KeySet, Plaintext};
use hecloud_math::Sampler;
use hecloud_rlwe::{Ciphertext, PublicKey};
use rayon::prelude::*;

use super::Result;

/// Turns a ciphertext into a fresh top-level encryption of the same slots.
///
/// An implementation may run the protocol over the wire (the server masks,
/// the key holder decrypts and re-encrypts, the server unmasks), so it
/// takes `&self` and is shared between threads; [`Refresher::refresh_many`]
/// is the batch a circuit layer sends in one round trip.
pub trait Refresher: Send + Sync {
    /// A fresh encryption, at the top level, of the slots of `ct`.
    fn refresh(&self, ct: &Ciphertext) -> Result<Ciphertext>;

    /// [`Refresher::refresh`] of each ciphertext, in order (one round trip
    /// for a remote implementation; the default refreshes one at a time).
    fn refresh_many(&self, cts: &[Ciphertext]) -> Result<Vec<Ciphertext>> {
        cts.iter().map(|ct| self.refresh(ct)).collect()
    }
}

/// The server's half of a refresh: the mask it added, to remove from the
/// key holder's answer.
///
/// ```
/// use hecloud_bgv::{BgvParameters, Encoder, Evaluator, KeySet, params::test_literal};
/// use hecloud_circuits::packed::{RefreshMask, reencrypt};
/// let params = BgvParameters::new_insecure_for_tests(test_literal(10, 2, 65537))?;
/// let keys = KeySet::generate(&params, &[], false)?;
/// let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
/// let ct = keys.encrypt(&enc.encode(&[1, 0, 1])?)?;
/// let low = eval.mul_relin(&ct, &ct)?;                         // one level down
/// let (masked, mask) = RefreshMask::apply(&eval, &enc, keys.public_key(), &low)?; // server
/// assert_eq!(masked.level(), 0);
/// let fresh = reencrypt(&keys, &masked)?;                       // key holder: sees m + r
/// let back = mask.remove(&eval, &fresh)?;                       // server
/// assert_eq!(back.level(), params.max_level());
/// assert_eq!(&enc.decode(&keys.decrypt(&back)?)?[..4], &[1, 0, 1, 0]);
/// # Ok::<(), hecloud_circuits::packed::PackedError>(())
/// ```
pub struct RefreshMask {
    mask: Plaintext,
}

impl std::fmt::Debug for RefreshMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RefreshMask(..)")
    }
}

impl RefreshMask {
    /// Server side: switches `ct` to level 0 (the fewest bytes to send, and
    /// its noise brought down to the switching floor), re-randomizes it with
    /// a fresh encryption of zero under the public key `pk` and adds r, drawn
    /// uniformly mod t in every slot from the operating system's CSPRNG. The
    /// masked ciphertext decrypts to m + r, uniform whatever m is.
    pub fn apply(
        eval: &Evaluator,
        encoder: &Encoder,
        pk: &PublicKey,
        ct: &Ciphertext,
    ) -> Result<(Ciphertext, Self)> {
        let params = eval.params();
        let t = params.t();
        let mut rng = Sampler::from_os();
        let r: Vec<u64> = (0..params.n()).map(|_| rng.uniform_mod(t)).collect();
        let mask = encoder.encode(&r)?;
        let low = eval.mod_switch_to(ct, 0)?;
        // A fresh encryption of zero makes c_1 uniform: as the computation
        // left it, c_1 tells whoever made the inputs how it was computed.
        let mut zero = encrypt_pk(params, pk, &encoder.encode(&[])?, 0)?;
        zero.set_factor(low.factor());
        let masked = eval.add_plain(&eval.add(&low, &zero)?, &mask)?;
        Ok((masked, Self { mask }))
    }

    /// Server side: subtracts the mask from the key holder's fresh
    /// encryption of m + r.
    pub fn remove(&self, eval: &Evaluator, fresh: &Ciphertext) -> Result<Ciphertext> {
        Ok(eval.sub_plain(fresh, &self.mask)?)
    }
}

/// Key-holder side of a refresh: decrypts the masked ciphertext and
/// encrypts the plaintext again (secret-key, seeded: half the bytes on the
/// wire) at the top level.
pub fn reencrypt(keys: &KeySet, masked: &Ciphertext) -> Result<Ciphertext> {
    reencrypt_to(keys, masked, keys.params().max_level())
}

/// [`reencrypt`] at `level` (a lower level sends fewer bytes back when the
/// rest of the circuit needs fewer).
pub fn reencrypt_to(keys: &KeySet, masked: &Ciphertext, level: usize) -> Result<Ciphertext> {
    let pt = keys.decrypt(masked)?;
    Ok(keys.encrypt_sk(&pt, level)?)
}

/// Both halves of the refresh protocol in one process, with the key set:
/// for tests and benchmarks. Counts the ciphertexts it refreshed.
///
/// ```
/// use std::sync::Arc;
/// use hecloud_bgv::{BgvParameters, Encoder, Evaluator, KeySet, params::test_literal};
/// use hecloud_circuits::packed::{LocalRefresher, Refresher};
/// let params = BgvParameters::new_insecure_for_tests(test_literal(10, 1, 65537))?;
/// let keys = Arc::new(KeySet::generate(&params, &[], false)?);
/// let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
/// let ct = keys.encrypt(&enc.encode(&[5, 6])?)?;
/// let sq = eval.mul_relin(&ct, &ct)?;
/// let r = LocalRefresher::new(keys.clone());
/// let fresh = r.refresh(&sq)?;
/// assert_eq!(fresh.level(), params.max_level());
/// assert_eq!(&enc.decode(&keys.decrypt(&fresh)?)?[..2], &[25, 36]);
/// assert_eq!(r.refreshes(), 1);
/// # Ok::<(), hecloud_circuits::packed::PackedError>(())
/// ```
#[derive(Debug)]
pub struct LocalRefresher {
    keys: Arc<KeySet>,
    eval: Evaluator,
    encoder: Encoder,
    refreshes: AtomicU64,
}

impl LocalRefresher {
    /// A refresher holding `keys` (the server half uses their evaluation
    /// keys' parameters; it needs no key to mask).
    pub fn new(keys: Arc<KeySet>) -> Self {
        let params = keys.params().clone();
        Self {
            eval: Evaluator::new(&params, keys.evaluation_keys()),
            encoder: Encoder::new(&params),
            keys,
            refreshes: AtomicU64::new(0),
        }
    }

    /// Ciphertexts refreshed so far.
    pub fn refreshes(&self) -> u64 {
        self.refreshes.load(Ordering::Relaxed)
    }
}

impl Refresher for LocalRefresher {
    fn refresh(&self, ct: &Ciphertext) -> Result<Ciphertext> {
        let (masked, mask) =
            RefreshMask::apply(&self.eval, &self.encoder, self.keys.public_key(), ct)?;
        let fresh = reencrypt(&self.keys, &masked)?;
        let out = mask.remove(&self.eval, &fresh)?;
        self.refreshes.fetch_add(1, Ordering::Relaxed);
        Ok(out)
    }

    fn refresh_many(&self, cts: &[Ciphertext]) -> Result<Vec<Ciphertext>> {
        cts.par_iter().map(|ct| self.refresh(ct)).collect()
    }
}
