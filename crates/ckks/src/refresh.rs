//! Client-aided refresh of a CKKS ciphertext: the server masks, the key
//! holder decrypts and encrypts again at a higher level, the server unmasks.
//! No level is spent and no bootstrapping key exists.
//!
//! The mask lives in the coefficient domain. CKKS decryption yields the
//! integer polynomial m + e (message times scale, plus noise), not a value
//! modulo a small plaintext modulus, so a uniform mask modulo Q would wrap
//! around and the key holder could not lift the result to a larger modulus
//! (that wrap is what bootstrapping's modular reduction removes). Instead the
//! server adds integers r drawn uniformly from a range 2^λs times wider than
//! any |m + e| ([`MaskPolicy::lambda_s`]): the key holder then sees
//! m + e + r, statistically within N·2^−λs of a value independent of m + e,
//! and the modulus at the refresh level must hold m + e + r without wrapping
//! (the *headroom*, [`MaskPolicy::mask_bits`]). A ciphertext below that
//! level is refused with [`CkksError::NoRefreshHeadroom`].
//!
//! Before masking, the server re-randomizes c₁ with a public-key encryption
//! of zero (see `docs/refresh.md`), whose noise is a few hundred times a
//! secret-key encryption's. So that it costs no precision, the server first
//! multiplies the ciphertext by 2^k (k up to [`MaskPolicy::BOOST_BITS`], as
//! far as the level's spare headroom allows; the scale becomes s·2^k) and
//! asks for a fresh encryption at scale s: the key holder divides the
//! decrypted integers by 2^k, rounding, and the server subtracts the mask
//! divided by 2^k. The added noise shrinks by 2^k and the refreshed value
//! is as precise as a fresh secret-key encryption.
//!
//! ```
//! use hecloud_ckks::{*, params::test_literal, refresh::*};
//! let params = CkksParameters::new_insecure_for_tests(test_literal(10, 6), 40)?;
//! let keys = KeySet::generate(&params, &[], false)?;
//! let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
//! let x = [0.5, -0.25];
//! let ct = keys.encrypt(&enc.encode_real(&x, 6, params.default_scale())?)?;
//! let sq = eval.mul_relin_rescale(&ct, &ct)?;                   // level 5
//! let low = eval.drop_level(&sq, 3)?;                           // used up to level 3
//! let policy = MaskPolicy::default();
//! let (masked, mask) = CkksMask::apply(&params, keys.public_key(), &low, &policy)?; // server
//! let fresh = reencrypt(&params, keys.secret_key(), &masked, 6, mask.target_scale())?; // key holder: sees m + e + r
//! let back = mask.remove(&fresh)?;                              // server
//! assert_eq!(back.level(), 6);
//! let y = enc.decode_real(&keys.decrypt(&back)?)?;
//! assert!((y[0] - 0.25).abs() < 1e-6 && (y[1] - 0.0625).abs() < 1e-6);
//! # Ok::<(), CkksError>(())
//! ```

use std::sync::Arc;

use hecloud_math::{Domain, Modulus, RnsPoly, Sampler};
use hecloud_rlwe::{Ciphertext, Decryptor, Encryptor, Plaintext, PublicKey, SecretKey};
use rayon::prelude::*;
use zeroize::Zeroize;

use crate::error::{CkksError, Result};
use crate::params::CkksParameters;
use crate::wide::I192;

/// How a refresh hides the server's values from the key holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaskPolicy {
    /// Statistical hiding of the mask in bits: the mask is 2^λs times wider
    /// than the masked coefficients. At least [`MaskPolicy::MIN_LAMBDA_S`].
    pub lambda_s: u32,
    /// log2 of the bound on |slot values| the mask covers. `None`: the
    /// largest value that decrypts at level 0 (log2 q_0 − log2 Δ − 1 bits),
    /// since a larger one could not be decrypted at the bottom level anyway.
    pub value_bits: Option<u32>,
    /// Circuit privacy: before masking, the server adds noise drawn
    /// uniformly with this many bits, which drowns the noise its computation
    /// left (and with it what that noise says about the computation). The
    /// cost is precision: the refreshed value carries 2^flood_bits of noise
    /// per coefficient, about log2(Δ) − flood_bits − log2(N)/2 bits of
    /// precision left in the slots. `None`: no flooding.
    pub flood_bits: Option<u32>,
}

impl Default for MaskPolicy {
    fn default() -> Self {
        Self {
            lambda_s: Self::DEFAULT_LAMBDA_S,
            value_bits: None,
            flood_bits: None,
        }
    }
}

impl MaskPolicy {
    /// The default statistical hiding (64 bits).
    pub const DEFAULT_LAMBDA_S: u32 = 64;
    /// The least statistical hiding accepted (40 bits).
    pub const MIN_LAMBDA_S: u32 = 40;
    /// Statistical distance, in bits, by which the default flooding drowns
    /// the computation's noise ([`MaskPolicy::circuit_private`]).
    pub const FLOOD_LAMBDA: u32 = 30;
    /// The widest mask for a ciphertext's own scale. Wider ones would be
    /// for scales of about Δ² (a product before its rescale), which are
    /// better refreshed after it. The boost adds up to
    /// [`Self::BOOST_BITS`] (the masked value stays below 2^190).
    pub const MAX_MASK_BITS: u32 = 125;
    /// The most bits the server multiplies a ciphertext by before
    /// re-randomizing it (the module's doc): 2^16 makes the public-key
    /// noise negligible next to the key holder's fresh encryption.
    pub const BOOST_BITS: u32 = 16;

    /// The default policy with noise flooding on: the flooding noise is
    /// 2^[`FLOOD_LAMBDA`](Self::FLOOD_LAMBDA) times an estimate of the
    /// noise a rescaled ciphertext carries, 2^(log2(N)/2 + 6) (rescaling
    /// rounds each coefficient, so after any product the noise is of the
    /// order of √N times the secret's weight, whatever came before).
    pub fn circuit_private(params: &CkksParameters) -> Self {
        let noise_bits = params.rlwe().log_n().div_ceil(2) + 6;
        Self {
            flood_bits: Some(noise_bits + Self::FLOOD_LAMBDA),
            ..Self::default()
        }
    }

    /// Checks λs and the value bound.
    pub fn validate(&self) -> Result<()> {
        if self.lambda_s < Self::MIN_LAMBDA_S {
            return Err(CkksError::MaskPolicy(format!(
                "λs = {} bits of statistical hiding, fewer than the {} required",
                self.lambda_s,
                Self::MIN_LAMBDA_S
            )));
        }
        Ok(())
    }

    /// log2 of the bound on |m + e| (and flooding) the mask must cover, for a
    /// ciphertext of scale `scale`.
    fn covered_bits(&self, params: &CkksParameters, scale: f64) -> u32 {
        let q0 = params.rlwe().q_basis().moduli()[0].bits();
        let value_bits = self
            .value_bits
            .unwrap_or_else(|| q0.saturating_sub(params.log_scale() + 1));
        let message = scale.log2().ceil().max(0.0) as u32 + value_bits;
        message.max(self.flood_bits.unwrap_or(0)) + 1
    }

    /// The mask's width in bits for a ciphertext of scale `scale`: r is
    /// uniform in [−2^b, 2^b).
    pub fn mask_bits(&self, params: &CkksParameters, scale: f64) -> u32 {
        self.covered_bits(params, scale) + self.lambda_s
    }

    /// log2 of the modulus a ciphertext of scale `scale` needs to be masked:
    /// m + e + r stays below Q/4 in magnitude, far from the wrap at Q/2
    /// that would corrupt the key holder's lift.
    pub fn headroom_bits(&self, params: &CkksParameters, scale: f64) -> u32 {
        self.mask_bits(params, scale) + 3
    }

    /// Whether a ciphertext of scale `scale` at `level` can be masked:
    /// refused with [`CkksError::NoRefreshHeadroom`] (naming the lowest
    /// level that can) or, for a bad policy, [`CkksError::MaskPolicy`].
    pub fn check_level(&self, params: &CkksParameters, level: usize, scale: f64) -> Result<()> {
        self.validate()?;
        if !(scale.is_finite() && scale >= 1.0) {
            return Err(CkksError::InvalidScale(scale.log2()));
        }
        let need = self.headroom_bits(params, scale);
        let have = log_q(params, level.min(params.max_level()));
        if self.mask_bits(params, scale) > Self::MAX_MASK_BITS || have < need as f64 {
            return Err(CkksError::NoRefreshHeadroom {
                level,
                need_bits: need,
                have_bits: have.floor() as u32,
                lowest_level: self.lowest_level(params, scale),
            });
        }
        Ok(())
    }

    /// The k the server multiplies a ciphertext of scale `scale` at `level`
    /// by 2^k with before re-randomizing: up to [`Self::BOOST_BITS`], as
    /// far as the headroom left by the mask allows (0 at a level without
    /// any to spare).
    pub fn boost_bits(&self, params: &CkksParameters, level: usize, scale: f64) -> u32 {
        let need = self.headroom_bits(params, scale);
        let spare = (log_q(params, level.min(params.max_level())) - need as f64).floor();
        (spare.max(0.0) as u32).min(Self::BOOST_BITS)
    }

    /// The lowest level at which a ciphertext of scale `scale` can be
    /// refreshed, if any.
    pub fn lowest_level(&self, params: &CkksParameters, scale: f64) -> Option<usize> {
        if self.mask_bits(params, scale) > Self::MAX_MASK_BITS {
            return None;
        }
        let need = self.headroom_bits(params, scale) as f64;
        (0..=params.max_level()).find(|&l| log_q(params, l) >= need)
    }
}

fn log_q(params: &CkksParameters, level: usize) -> f64 {
    params.rlwe().q_basis().moduli()[..=level]
        .iter()
        .map(|m| (m.value() as f64).log2())
        .sum()
}

/// Residues of the signed integers `v` over the primes of Q_level, in the
/// NTT domain.
fn to_rns(params: &CkksParameters, v: &[I192], level: usize) -> Result<RnsPoly> {
    let basis = params.rlwe().q_at(level)?.clone();
    let n = params.n();
    let mut data = vec![0u64; (level + 1) * n];
    data.par_chunks_exact_mut(n)
        .zip(basis.moduli())
        .for_each(|(limb, m)| {
            for (x, c) in limb.iter_mut().zip(v) {
                *x = c.residue(m);
            }
        });
    let mut p = RnsPoly::from_limbs(&basis, Domain::Coefficient, data)?;
    p.to_ntt();
    Ok(p)
}

/// k where `from` = `to`·2^k exactly, 0 ≤ k < 64.
fn scale_shift(from: f64, to: f64) -> Result<u32> {
    let k = (from / to).log2();
    if to > 0.0 && (0.0..64.0).contains(&k) && k.fract() == 0.0 && to * k.exp2() == from {
        return Ok(k as u32);
    }
    Err(CkksError::MaskPolicy(format!(
        "a target scale 2^{:.3} that is not the masked scale 2^{:.3} divided by a power of two below 2^64",
        to.log2(),
        from.log2()
    )))
}

/// The server's half of a refresh: the mask it added, kept secret until it
/// removes it from the key holder's answer (zeroized when dropped).
pub struct CkksMask {
    params: Arc<CkksParameters>,
    r: Vec<I192>,
    /// The scale of the fresh encryption: the masked one's over 2^shift.
    target: f64,
    shift: u32,
    /// The key the masked ciphertext was under, which the fresh one must be.
    key: hecloud_rlwe::KeyId,
}

impl std::fmt::Debug for CkksMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CkksMask(..)")
    }
}

impl Drop for CkksMask {
    fn drop(&mut self) {
        self.r.zeroize();
    }
}

impl CkksMask {
    /// Server side: multiplies `ct` by 2^k ([`MaskPolicy::boost_bits`]),
    /// re-randomizes it with a fresh encryption of zero under the public
    /// key `pk`, then adds the mask (and, per `policy`, flooding noise) to
    /// its constant term. The masked ciphertext keeps `ct`'s level, its
    /// scale is 2^k times `ct`'s; it decrypts to m + e + r, and neither of
    /// its components is the one the computation produced. The key holder
    /// is to encrypt at [`Self::target_scale`], `ct`'s scale.
    ///
    /// Refused: a policy below the minimum hiding, a ciphertext of degree
    /// above 1 (relinearize first: the key holder's answer is degree 1
    /// anyway), and a level whose modulus lacks the headroom
    /// ([`CkksError::NoRefreshHeadroom`]).
    pub fn apply(
        params: &Arc<CkksParameters>,
        pk: &PublicKey,
        ct: &Ciphertext,
        policy: &MaskPolicy,
    ) -> Result<(Ciphertext, Self)> {
        if ct.params().hash() != params.rlwe().hash() {
            return Err(hecloud_rlwe::RlweError::ParameterMismatch.into());
        }
        if ct.degree() != 1 {
            return Err(CkksError::Rlwe(hecloud_rlwe::RlweError::CiphertextDegree {
                expected: 1,
                found: ct.degree(),
            }));
        }
        let (target, level) = (ct.scale(), ct.level());
        policy.check_level(params, level, target)?;
        let shift = policy.boost_bits(params, level, target);
        let scale = target * f64::from(shift).exp2();
        // The computation's noise is boosted too: so is the flood drowning it.
        let policy = MaskPolicy {
            flood_bits: policy.flood_bits.map(|f| f + shift),
            ..*policy
        };
        let bits = policy.mask_bits(params, scale);
        let mut rng = Sampler::from_os();
        let r = uniform_signed(&mut rng, params.n(), bits);
        let mut added = match policy.flood_bits {
            Some(f) => {
                let e = uniform_signed(&mut rng, params.n(), f);
                r.iter().zip(&e).map(|(a, b)| a.add(*b)).collect()
            }
            None => r.clone(),
        };
        let poly = to_rns(params, &added, level);
        added.zeroize();
        // c_1 as the computation left it tells whoever made the inputs how
        // it was computed (after a product by a clear W, c_1 = W·c_1,in), so
        // a fresh encryption of zero is added first: c_1 becomes uniform.
        let zero = Plaintext::new(
            params.rlwe(),
            RnsPoly::zero(params.rlwe().q_at(level)?, Domain::Ntt),
            level,
            scale,
        )?;
        // The fresh zero must be under the ciphertext's key.
        pk.key_id().check(ct.key_id())?;
        let mut masked = ct.clone();
        let boost: Vec<u64> = params
            .rlwe()
            .q_at(level)?
            .moduli()
            .iter()
            .map(|m| m.reduce(1u64 << shift))
            .collect();
        for c in masked.polys_mut() {
            c.mul_rns_scalar_assign(&boost)?;
        }
        masked.set_scale(scale);
        let fresh_zero = Encryptor::new(params.rlwe()).encrypt_pk(pk, &zero)?;
        for (c, z) in masked.polys_mut().iter_mut().zip(fresh_zero.polys()) {
            c.add_assign(z)?;
        }
        masked.polys_mut()[0].add_assign(&poly?)?;
        Ok((
            masked,
            Self {
                params: params.clone(),
                r,
                target,
                shift,
                key: ct.key_id(),
            },
        ))
    }

    /// The scale the key holder's fresh encryption must have: the
    /// ciphertext's before masking.
    pub fn target_scale(&self) -> f64 {
        self.target
    }

    /// Server side: subtracts the mask (over 2^k, rounded as the key
    /// holder rounds) from the key holder's fresh encryption of
    /// (m + e + r)/2^k (at whatever level the server asked for), after
    /// checking that it is a degree-1 ciphertext under these parameters at
    /// [`Self::target_scale`], under the masked ciphertext's key (a key
    /// holder answering with another key is refused).
    pub fn remove(&self, fresh: &Ciphertext) -> Result<Ciphertext> {
        if fresh.params().hash() != self.params.rlwe().hash() {
            return Err(hecloud_rlwe::RlweError::ParameterMismatch.into());
        }
        self.key.check(fresh.key_id())?;
        if fresh.degree() != 1 {
            return Err(CkksError::Rlwe(hecloud_rlwe::RlweError::CiphertextDegree {
                expected: 1,
                found: fresh.degree(),
            }));
        }
        if fresh.scale() != self.target {
            return Err(CkksError::ScaleMismatch {
                left: fresh.scale().log2(),
                right: self.target.log2(),
            });
        }
        let mut shifted: Vec<I192> = self.r.iter().map(|r| r.shr_round(self.shift)).collect();
        let r = to_rns(&self.params, &shifted, fresh.level());
        shifted.zeroize();
        let r = r?;
        Ok(fresh.map_c0(|c0| c0.sub(&r))?)
    }
}

/// n integers uniform in [−2^bits, 2^bits) from the CSPRNG.
fn uniform_signed(rng: &mut Sampler, n: usize, bits: u32) -> Vec<I192> {
    (0..n).map(|_| I192::uniform(rng, bits)).collect()
}

/// Key-holder side: decrypts the masked ciphertext to the integer
/// polynomial m + e + r, lifts it exactly out of Q_level (the masked value
/// is far below Q_level/2, so its centred representative is the integer
/// itself), divides it by the masked scale over `target_scale` (a power of
/// two 2^k, rounding) and encrypts the result with the secret key at
/// `target_level` and `target_scale` (seeded: half the bytes on the wire).
/// The key holder sees m + e + r only.
///
/// Refused: a target level above the top, a target scale that is not the
/// masked scale over 2^k (0 ≤ k < 64).
pub fn reencrypt(
    params: &Arc<CkksParameters>,
    sk: &SecretKey,
    masked: &Ciphertext,
    target_level: usize,
    target_scale: f64,
) -> Result<Ciphertext> {
    let rlwe = params.rlwe();
    if target_level > params.max_level() {
        return Err(hecloud_rlwe::RlweError::LevelOutOfRange {
            level: target_level,
            max: params.max_level(),
        }
        .into());
    }
    let shift = scale_shift(masked.scale(), target_scale)?;
    let mut x = Decryptor::new(sk).decrypt(masked)?.into_poly();
    x.to_coefficient();
    let mut v = CenteredLift::new(&rlwe.q_basis().moduli()[..=masked.level()]).lift(&x);
    x.zeroize();
    v.par_iter_mut().for_each(|c| *c = c.shr_round(shift));
    let poly = to_rns(params, &v, target_level);
    v.zeroize();
    let pt = Plaintext::new(rlwe, poly?, target_level, target_scale)?;
    Ok(Encryptor::new(rlwe).encrypt_sk(sk, &pt)?)
}

/// Exact lift of small centred integers out of an RNS basis: for x given
/// mod q_0 … q_l with |x| far below both Q/2 and 2^191,
/// x = Σ y_i·(Q/q_i) − v·Q with y_i = x_i·(Q/q_i)^−1 mod q_i and
/// v = round(Σ y_i/q_i), where the rounding is exact in floating point
/// because x/Q is far from ±1/2. The sum is taken mod 2^192, where x is
/// exact though the terms are not.
struct CenteredLift<'a> {
    from: &'a [Modulus],
    qhat_inv: Vec<u64>,
    /// Q/q_i mod 2^192.
    qhat: Vec<I192>,
    /// Q mod 2^192.
    q: I192,
}

impl<'a> CenteredLift<'a> {
    fn new(from: &'a [Modulus]) -> Self {
        let others = |i: usize| from.iter().enumerate().filter(move |(k, _)| *k != i);
        let qhat_inv = from
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let h = others(i).fold(1u64, |acc, (_, qk)| m.mul(acc, m.reduce(qk.value())));
                m.inv(h).expect("distinct primes are coprime")
            })
            .collect();
        let qhat = (0..from.len())
            .map(|i| others(i).fold(I192::from_u64(1), |acc, (_, qk)| acc.mul_u64(qk.value())))
            .collect();
        let q = from
            .iter()
            .fold(I192::from_u64(1), |acc, qk| acc.mul_u64(qk.value()));
        Self {
            from,
            qhat_inv,
            qhat,
            q,
        }
    }

    /// The integers x (coefficient domain in, one per coefficient out).
    fn lift(&self, x: &RnsPoly) -> Vec<I192> {
        let n = x.degree();
        (0..n)
            .into_par_iter()
            .map(|j| {
                let mut acc = I192::default();
                let mut f = 0.0;
                for (i, m) in self.from.iter().enumerate() {
                    let y = m.mul(x.limb(i)[j], self.qhat_inv[i]);
                    f += y as f64 / m.value() as f64;
                    acc = acc.add(self.qhat[i].mul_u64(y));
                }
                acc.sub(self.q.mul_u64(f.round() as u64))
            })
            .collect()
    }
}
