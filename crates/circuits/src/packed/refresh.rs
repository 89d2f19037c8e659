//! Client-aided refresh: the [`Refresher`] interface, the two halves of
//! the protocol ([`RefreshMask`] on the server, [`reencrypt`] at the key
//! holder), the optional noise flooding ([`BgvMaskPolicy`]) and
//! [`LocalRefresher`], both halves in one process.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hecloud_bgv::keys::encrypt_pk;
use hecloud_bgv::{BgvError, BgvParameters, Encoder, Evaluator, KeySet, Plaintext};
use hecloud_math::{Domain, RnsPoly, Sampler};
use hecloud_rlwe::{Ciphertext, PublicKey};
use rayon::prelude::*;
use zeroize::Zeroize;

use super::{PackedError, Result};

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

/// How a BGV refresh hides the server's noise from the key holder
/// (circuit privacy, optional per session).
///
/// Decrypting the masked ciphertext, the key holder computes
/// c₀ + c₁·s = m + r + t·e before reducing mod t: the mask r hides m
/// perfectly, but e is the computation's noise and depends on what the
/// server computed. With `flood_bits = Some(b)` the server adds t·e_f to c₀
/// along with the mask, e_f uniform in [−2^b, 2^b) per coefficient (from the
/// operating system's CSPRNG), which vanishes
/// mod t (no slot changes, and the key holder's fresh encryption carries
/// none of it) and drowns e: a computation noise below 2^(b − λc) leaves a
/// statistical distance of at most 2^(−λc−1) per coefficient between two
/// computations. The width is fixed by the policy, not by the ciphertext,
/// so the width, the level sent at and the header's noise estimate say
/// nothing about the computation; a ciphertext whose noise it would not
/// drown by [`BgvMaskPolicy::FLOOD_LAMBDA`] bits is refused
/// ([`PackedError::FloodTooNarrow`]).
///
/// The cost is modulus: m + r + t·(e + e_f) must not wrap mod Q, so the
/// masked ciphertext is sent at the lowest level with the room
/// ([`BgvMaskPolicy::lowest_level`]; level 1 at every preset, where level 0
/// suffices without flooding) and a ciphertext already below it is refused
/// ([`PackedError::NoFloodHeadroom`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BgvMaskPolicy {
    /// Width b in bits of the flooding noise e_f, uniform in [−2^b, 2^b);
    /// `None`: no flooding (the masked ciphertext goes at level 0).
    pub flood_bits: Option<u32>,
}

impl BgvMaskPolicy {
    /// Bits by which the flood drowns the computation's noise (statistical
    /// circuit privacy).
    pub const FLOOD_LAMBDA: u32 = 30;
    /// The widest flood drawn (e_f and its product by t are handled as
    /// 128-bit integers).
    pub const MAX_FLOOD_BITS: u32 = 120;
    /// How far above the switching floor the noise that
    /// [`BgvMaskPolicy::circuit_private`] covers may lie, in bits: a
    /// ciphertext switched down to the sending level from one level or more
    /// above, which leaves it within ~1.6 bits of the floor unless it came
    /// with almost no budget, passes.
    pub const FLOOR_SLACK_BITS: f64 = 2.0;

    /// No flooding (what [`RefreshMask::apply`] does).
    pub fn none() -> Self {
        Self::default()
    }

    /// Flooding that drowns, by [`BgvMaskPolicy::FLOOD_LAMBDA`] bits, the
    /// noise of any ciphertext whose estimate at the sending level is at
    /// most [`BgvMaskPolicy::FLOOR_SLACK_BITS`] above the switching floor:
    /// what modulus switching leaves, whatever came before it. The width
    /// depends on the parameters only (40 or 41 bits at the presets).
    pub fn circuit_private(params: &BgvParameters) -> Self {
        Self::covering(
            params,
            params.noise().switching_floor() + Self::FLOOR_SLACK_BITS,
        )
    }

    /// Flooding that drowns, by [`BgvMaskPolicy::FLOOD_LAMBDA`] bits, a
    /// noise estimate of `noise_bits` (log2 of the bound on
    /// ‖c₀ + c₁·s‖, message included, as ciphertexts carry it): the width
    /// is ⌈noise_bits − log2 t⌉ + λc, at least λc + 1.
    pub fn covering(params: &BgvParameters, noise_bits: f64) -> Self {
        let e_bits = (noise_bits - log_t(params)).ceil().max(1.0) as u32;
        Self {
            flood_bits: Some(e_bits + Self::FLOOD_LAMBDA),
        }
    }

    /// The largest noise estimate, in bits, the flood drowns by λc bits;
    /// `None` without flooding.
    pub fn covered_noise_bits(&self, params: &BgvParameters) -> Option<f64> {
        self.flood_bits
            .map(|b| log_t(params) + f64::from(b) - f64::from(Self::FLOOD_LAMBDA))
    }

    /// log2 of the bound on ‖c₀ + c₁·s‖ of a flooded ciphertext:
    /// t/2 + t·2^b + t·(the covered noise and the encryption of zero's)
    /// is below t·2^(b+1). `None` without flooding. It is the noise
    /// estimate the masked ciphertext carries, the same whatever was
    /// computed.
    pub fn flooded_noise_bits(&self, params: &BgvParameters) -> Option<f64> {
        self.flood_bits.map(|b| log_t(params) + f64::from(b) + 1.0)
    }

    /// log2 of the modulus a flooded ciphertext needs (its bound plus the
    /// budget every BGV result keeps, [`BgvParameters::MIN_BUDGET_BITS`]);
    /// `None` without flooding.
    pub fn need_bits(&self, params: &BgvParameters) -> Option<f64> {
        self.flooded_noise_bits(params)
            .map(|f| f + 1.0 + BgvParameters::MIN_BUDGET_BITS)
    }

    /// The level a masked ciphertext is sent at: 0 without flooding (the
    /// fewest bytes), else the lowest level whose modulus holds the flooded
    /// value; `None` when no level does.
    pub fn lowest_level(&self, params: &BgvParameters) -> Option<usize> {
        match self.flooded_noise_bits(params) {
            None => Some(0),
            Some(bits) => (0..=params.max_level()).find(|&l| params.has_budget(l, bits)),
        }
    }

    /// Whether a ciphertext at `level` can be masked under this policy:
    /// [`PackedError::FloodPolicy`] for a width out of range,
    /// [`PackedError::NoFloodHeadroom`] below the lowest level with the room.
    /// (Whether its noise is drowned is known only from its estimate:
    /// [`RefreshMask::apply_with`] checks that.)
    pub fn check_level(&self, params: &BgvParameters, level: usize) -> Result<()> {
        let Some(b) = self.flood_bits else {
            return Ok(());
        };
        if b == 0 || b > Self::MAX_FLOOD_BITS {
            return Err(PackedError::FloodPolicy {
                flood_bits: b,
                max: Self::MAX_FLOOD_BITS,
            });
        }
        let lowest = self.lowest_level(params);
        if lowest.is_none_or(|l| level < l) {
            return Err(PackedError::NoFloodHeadroom {
                flood_bits: b,
                level,
                need_bits: self.need_bits(params).unwrap_or(f64::INFINITY),
                have_bits: params.log_q_at(level.min(params.max_level())),
                lowest_level: lowest,
            });
        }
        Ok(())
    }
}

fn log_t(params: &BgvParameters) -> f64 {
    (params.t() as f64).log2()
}

/// t·e_f over Q_level, e_f uniform in [−2^bits, 2^bits) from `rng`, in
/// `domain`. The flood is a secret: the integers are zeroized here (the NTT
/// works in place), the caller zeroizes what it returns once added.
fn flood_poly(
    params: &BgvParameters,
    rng: &mut Sampler,
    level: usize,
    bits: u32,
    domain: Domain,
) -> hecloud_bgv::Result<RnsPoly> {
    debug_assert!((1..=BgvMaskPolicy::MAX_FLOOD_BITS).contains(&bits));
    let n = params.n();
    let width = (1u128 << (bits + 1)) - 1;
    let mut e: Vec<i128> = (0..n)
        .map(|_| {
            let w = ((rng.next_u64() as u128) << 64 | rng.next_u64() as u128) & width;
            w as i128 - (1i128 << bits)
        })
        .collect();
    let basis = params.rlwe().q_at(level)?.clone();
    let t = params.t();
    let mut data = vec![0u64; basis.len() * n];
    for (limb, m) in data.chunks_exact_mut(n).zip(basis.moduli()) {
        let tq = m.reduce(t);
        for (x, &c) in limb.iter_mut().zip(&e) {
            let r = m.reduce_u128(c.unsigned_abs());
            let r = if c < 0 { m.neg(r) } else { r };
            *x = m.mul(r, tq);
        }
    }
    e.zeroize();
    let mut poly = RnsPoly::from_limbs(&basis, Domain::Coefficient, data)?;
    if domain == Domain::Ntt {
        poly.to_ntt();
    }
    Ok(poly)
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
    /// The key the masked ciphertext was under, which the fresh one must be.
    key: hecloud_rlwe::KeyId,
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
    /// masked ciphertext decrypts to m + r, uniform whatever m is. No
    /// flooding: [`RefreshMask::apply_with`] under [`BgvMaskPolicy::none`].
    pub fn apply(
        eval: &Evaluator,
        encoder: &Encoder,
        pk: &PublicKey,
        ct: &Ciphertext,
    ) -> Result<(Ciphertext, Self)> {
        Self::apply_with(eval, encoder, pk, ct, &BgvMaskPolicy::none())
    }

    /// Server side, under `policy`: [`RefreshMask::apply`] without flooding;
    /// with flooding of b bits, `ct` goes down to the lowest level with the
    /// room ([`BgvMaskPolicy::lowest_level`]) instead of level 0, and t·e_f
    /// (e_f uniform in [−2^b, 2^b), from the operating system's CSPRNG) is
    /// added to c₀ after the encryption of zero and the mask. The masked
    /// ciphertext then carries the noise estimate
    /// [`BgvMaskPolicy::flooded_noise_bits`], whatever was computed.
    ///
    /// Refused, before anything is drawn: a width out of range
    /// ([`PackedError::FloodPolicy`]), a ciphertext below the lowest level
    /// with the room ([`PackedError::NoFloodHeadroom`]), and one whose noise
    /// estimate at that level the flood would not drown by λc bits
    /// ([`PackedError::FloodTooNarrow`]).
    pub fn apply_with(
        eval: &Evaluator,
        encoder: &Encoder,
        pk: &PublicKey,
        ct: &Ciphertext,
        policy: &BgvMaskPolicy,
    ) -> Result<(Ciphertext, Self)> {
        let params = eval.params();
        policy.check_level(params, ct.level())?;
        let level = policy.lowest_level(params).unwrap_or(0);
        let low = eval.mod_switch_to(ct, level)?;
        if let (Some(b), Some(covered)) = (policy.flood_bits, policy.covered_noise_bits(params))
            && low.scale() > covered
        {
            return Err(PackedError::FloodTooNarrow {
                level,
                noise_bits: low.scale(),
                flood_bits: b,
                need_flood_bits: BgvMaskPolicy::covering(params, low.scale())
                    .flood_bits
                    .unwrap_or(b),
            });
        }
        let t = params.t();
        let mut rng = Sampler::from_os();
        let mut r: Vec<u64> = (0..params.n()).map(|_| rng.uniform_mod(t)).collect();
        let mask = encoder.encode(&r);
        r.zeroize();
        let mask = mask?;
        // A fresh encryption of zero makes c_1 uniform: as the computation
        // left it, c_1 tells whoever made the inputs how it was computed.
        let mut zero = encrypt_pk(params, pk, &encoder.encode(&[])?, level)?;
        zero.set_factor(low.factor());
        let mut masked = eval.add_plain(&eval.add(&low, &zero)?, &mask)?;
        if let (Some(b), Some(bits)) = (policy.flood_bits, policy.flooded_noise_bits(params)) {
            let c0 = &mut masked.polys_mut()[0];
            let mut flood = flood_poly(params, &mut rng, level, b, c0.domain())?;
            let added = c0.add_assign(&flood);
            flood.zeroize();
            added.map_err(BgvError::from)?;
            // The estimate the computation left would tell the key holder
            // about the computation; the flood's bound covers it.
            masked.set_scale(bits);
        }
        let key = masked.key_id();
        Ok((masked, Self { mask, key }))
    }

    /// Server side: subtracts the mask from the key holder's fresh
    /// encryption of m + r, which must be under the masked ciphertext's
    /// key (a key holder answering with another key is refused).
    pub fn remove(&self, eval: &Evaluator, fresh: &Ciphertext) -> Result<Ciphertext> {
        self.key
            .check(fresh.key_id())
            .map_err(hecloud_bgv::BgvError::from)?;
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
    policy: BgvMaskPolicy,
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
            policy: BgvMaskPolicy::none(),
            refreshes: AtomicU64::new(0),
        }
    }

    /// The same refresher masking under `policy` (flooding, for circuit
    /// privacy; a ciphertext below the policy's lowest level then fails to
    /// refresh with [`PackedError::NoFloodHeadroom`]).
    pub fn with_policy(mut self, policy: BgvMaskPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Ciphertexts refreshed so far.
    pub fn refreshes(&self) -> u64 {
        self.refreshes.load(Ordering::Relaxed)
    }
}

impl Refresher for LocalRefresher {
    fn refresh(&self, ct: &Ciphertext) -> Result<Ciphertext> {
        let (masked, mask) = RefreshMask::apply_with(
            &self.eval,
            &self.encoder,
            self.keys.public_key(),
            ct,
            &self.policy,
        )?;
        let fresh = reencrypt(&self.keys, &masked)?;
        let out = mask.remove(&self.eval, &fresh)?;
        self.refreshes.fetch_add(1, Ordering::Relaxed);
        Ok(out)
    }

    fn refresh_many(&self, cts: &[Ciphertext]) -> Result<Vec<Ciphertext>> {
        cts.par_iter().map(|ct| self.refresh(ct)).collect()
    }
}
