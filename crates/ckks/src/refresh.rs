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
//! let fresh = reencrypt(&params, keys.secret_key(), &masked, 6)?; // key holder: sees m + e + r
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
    /// The widest mask this implementation draws (a coefficient plus its
    /// mask fit in an i128).
    pub const MAX_MASK_BITS: u32 = 125;

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

/// Residues of the signed integers `v` over `basis`'s first `limbs` primes,
/// in the NTT domain.
fn to_rns(params: &CkksParameters, v: &[i128], level: usize) -> Result<RnsPoly> {
    let basis = params.rlwe().q_at(level)?.clone();
    let n = params.n();
    let mut data = vec![0u64; (level + 1) * n];
    data.par_chunks_exact_mut(n)
        .zip(basis.moduli())
        .for_each(|(limb, m)| {
            for (x, &c) in limb.iter_mut().zip(v) {
                let r = m.reduce_u128(c.unsigned_abs());
                *x = if c < 0 { m.neg(r) } else { r };
            }
        });
    let mut p = RnsPoly::from_limbs(&basis, Domain::Coefficient, data)?;
    p.to_ntt();
    Ok(p)
}

/// The server's half of a refresh: the mask it added, kept secret until it
/// removes it from the key holder's answer (zeroized when dropped).
pub struct CkksMask {
    params: Arc<CkksParameters>,
    r: Vec<i128>,
    scale: f64,
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
    /// Server side: re-randomizes `ct` with a fresh encryption of zero under
    /// the public key `pk`, then adds the mask (and, per `policy`, flooding
    /// noise) to its constant term. The masked ciphertext keeps `ct`'s level
    /// and scale; it decrypts to m + e + r, and neither of its components
    /// is the one the computation produced.
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
        let (scale, level) = (ct.scale(), ct.level());
        policy.check_level(params, level, scale)?;
        let bits = policy.mask_bits(params, scale);
        let mut rng = Sampler::from_os();
        let r = uniform_signed(&mut rng, params.n(), bits);
        let mut added = match policy.flood_bits {
            Some(f) => {
                let e = uniform_signed(&mut rng, params.n(), f);
                r.iter().zip(&e).map(|(a, b)| a + b).collect()
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
        let mut masked = ct.clone();
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
                scale,
            },
        ))
    }

    /// Server side: subtracts the mask from the key holder's fresh
    /// encryption of m + e + r (at whatever level the server asked for),
    /// after checking that it is a degree-1 ciphertext under these
    /// parameters at the masked ciphertext's scale.
    pub fn remove(&self, fresh: &Ciphertext) -> Result<Ciphertext> {
        if fresh.params().hash() != self.params.rlwe().hash() {
            return Err(hecloud_rlwe::RlweError::ParameterMismatch.into());
        }
        if fresh.degree() != 1 {
            return Err(CkksError::Rlwe(hecloud_rlwe::RlweError::CiphertextDegree {
                expected: 1,
                found: fresh.degree(),
            }));
        }
        if fresh.scale() != self.scale {
            return Err(CkksError::ScaleMismatch {
                left: fresh.scale().log2(),
                right: self.scale.log2(),
            });
        }
        let r = to_rns(&self.params, &self.r, fresh.level())?;
        let mut out = fresh.clone();
        out.polys_mut()[0].sub_assign(&r)?;
        Ok(out)
    }
}

/// n integers uniform in [−2^bits, 2^bits) from the CSPRNG.
fn uniform_signed(rng: &mut Sampler, n: usize, bits: u32) -> Vec<i128> {
    debug_assert!(bits <= 126);
    let width = (1u128 << (bits + 1)) - 1;
    (0..n)
        .map(|_| {
            let w = ((rng.next_u64() as u128) << 64 | rng.next_u64() as u128) & width;
            w as i128 - (1i128 << bits)
        })
        .collect()
}

/// Key-holder side: decrypts the masked ciphertext to the integer
/// polynomial m + e + r, lifts it exactly from Q_level to Q_target (the
/// masked value is far below Q_level/2, so its centred representative is
/// the integer itself) and encrypts it again with the secret key at
/// `target_level`, at the same scale (seeded: half the bytes on the wire).
/// The key holder sees m + e + r only.
pub fn reencrypt(
    params: &Arc<CkksParameters>,
    sk: &SecretKey,
    masked: &Ciphertext,
    target_level: usize,
) -> Result<Ciphertext> {
    let rlwe = params.rlwe();
    if target_level > params.max_level() {
        return Err(hecloud_rlwe::RlweError::LevelOutOfRange {
            level: target_level,
            max: params.max_level(),
        }
        .into());
    }
    let mut x = Decryptor::new(sk).decrypt(masked)?.into_poly();
    x.to_coefficient();
    let level = masked.level();
    let n = params.n();
    let target = rlwe.q_at(target_level)?.clone();
    let mut data = vec![0u64; (target_level + 1) * n];
    let shared = level.min(target_level) + 1;
    data[..shared * n].copy_from_slice(&x.data()[..shared * n]);
    if target_level > level {
        let lift = CenteredLift::new(&rlwe.q_basis().moduli()[..=level]);
        lift.extend(
            &x,
            &target.moduli()[level + 1..],
            &mut data[(level + 1) * n..],
        );
    }
    x.zeroize();
    let mut poly = RnsPoly::from_limbs(&target, Domain::Coefficient, data)?;
    poly.to_ntt();
    let pt = Plaintext::new(rlwe, poly, target_level, masked.scale())?;
    Ok(Encryptor::new(rlwe).encrypt_sk(sk, &pt)?)
}

/// Exact extension of small centred integers from one RNS basis to more
/// primes: for x given mod q_0 … q_l with |x| well below Q/2,
/// x = Σ y_i·(Q/q_i) − v·Q with y_i = x_i·(Q/q_i)^−1 mod q_i and
/// v = round(Σ y_i/q_i), where the rounding is exact in floating point
/// because x/Q is far from ±1/2.
struct CenteredLift<'a> {
    from: &'a [Modulus],
    qhat_inv: Vec<u64>,
}

impl<'a> CenteredLift<'a> {
    fn new(from: &'a [Modulus]) -> Self {
        let qhat_inv = from
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let h = from
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| *k != i)
                    .fold(1u64, |acc, (_, qk)| m.mul(acc, m.reduce(qk.value())));
                m.inv(h).expect("distinct primes are coprime")
            })
            .collect();
        Self { from, qhat_inv }
    }

    /// Writes x mod each of `to` (limb after limb) into `out`.
    fn extend(&self, x: &RnsPoly, to: &[Modulus], out: &mut [u64]) {
        let n = x.degree();
        let l = self.from.len();
        let mut y = vec![0u64; l * n];
        for (i, m) in self.from.iter().enumerate() {
            let (xi, w) = (x.limb(i), self.qhat_inv[i]);
            for (yj, &xj) in y[i * n..(i + 1) * n].iter_mut().zip(xi) {
                *yj = m.mul(xj, w);
            }
        }
        let v: Vec<u64> = (0..n)
            .map(|j| {
                let f: f64 = (0..l)
                    .map(|i| y[i * n + j] as f64 / self.from[i].value() as f64)
                    .sum();
                f.round() as u64
            })
            .collect();
        out.par_chunks_exact_mut(n).zip(to).for_each(|(limb, p)| {
            let qhat: Vec<u64> = (0..l)
                .map(|i| {
                    self.from
                        .iter()
                        .enumerate()
                        .filter(|(k, _)| *k != i)
                        .fold(1u64, |acc, (_, qk)| p.mul(acc, p.reduce(qk.value())))
                })
                .collect();
            let q = self
                .from
                .iter()
                .fold(1u64, |acc, qk| p.mul(acc, p.reduce(qk.value())));
            for (j, o) in limb.iter_mut().enumerate() {
                let mut acc = p.neg(p.mul(p.reduce(v[j]), q));
                for i in 0..l {
                    acc = p.add(acc, p.mul(p.reduce(y[i * n + j]), qhat[i]));
                }
                *o = acc;
            }
        });
        y.zeroize();
    }
}
