//! Plaintexts and ciphertexts: RNS polynomials over Q_l in the NTT domain,
//! with their level and scale (CKKS) or plaintext-modulus metadata.

use std::sync::Arc;

use hecloud_math::{Domain, RnsPoly};

use crate::error::{Result, RlweError};
use crate::keys::KeyId;
use crate::params::Parameters;

/// A plaintext polynomial over Q_l (NTT domain) with its scale.
#[derive(Debug, Clone, PartialEq)]
pub struct Plaintext {
    params: Arc<Parameters>,
    poly: RnsPoly,
    level: usize,
    scale: f64,
}

fn check_poly(params: &Parameters, poly: &RnsPoly, level: usize) -> Result<()> {
    let basis = params.q_at(level)?;
    if **poly.basis() != **basis {
        return Err(RlweError::ParameterMismatch);
    }
    if poly.domain() != Domain::Ntt {
        return Err(hecloud_math::MathError::DomainMismatch {
            expected: Domain::Ntt,
            found: poly.domain(),
        }
        .into());
    }
    Ok(())
}

impl Plaintext {
    /// A plaintext from an NTT-domain polynomial over Q_level.
    pub fn new(params: &Arc<Parameters>, poly: RnsPoly, level: usize, scale: f64) -> Result<Self> {
        check_poly(params, &poly, level)?;
        Ok(Self {
            params: params.clone(),
            poly,
            level,
            scale,
        })
    }

    /// The parameters.
    pub fn params(&self) -> &Arc<Parameters> {
        &self.params
    }

    /// The polynomial (NTT domain over Q_l).
    pub fn poly(&self) -> &RnsPoly {
        &self.poly
    }

    /// Takes the polynomial out.
    pub fn into_poly(self) -> RnsPoly {
        self.poly
    }

    /// Level l (the polynomial has l + 1 limbs).
    pub fn level(&self) -> usize {
        self.level
    }

    /// Scale (CKKS) — 1.0 where unused.
    pub fn scale(&self) -> f64 {
        self.scale
    }
}

/// An RLWE ciphertext (c_0, c_1, …) decrypting to Σ c_i·s^i, every component
/// over Q_l in the NTT domain. A ciphertext fresh from secret-key encryption
/// remembers the seed of c_1 so it serializes at about half size. It carries
/// the [`KeyId`] of the secret it decrypts under (set by encryption, kept by
/// every operation, checked where two keys meet).
#[derive(Debug, Clone, PartialEq)]
pub struct Ciphertext {
    params: Arc<Parameters>,
    polys: Vec<RnsPoly>,
    level: usize,
    scale: f64,
    factor: u64,
    seed: Option<[u8; 32]>,
    key: KeyId,
}

impl Ciphertext {
    /// A ciphertext from its components (NTT domain over Q_level, at least two).
    pub fn new(
        params: &Arc<Parameters>,
        polys: Vec<RnsPoly>,
        level: usize,
        scale: f64,
    ) -> Result<Self> {
        if polys.len() < 2 {
            return Err(RlweError::CiphertextDegree {
                expected: 1,
                found: polys.len().saturating_sub(1),
            });
        }
        for p in &polys {
            check_poly(params, p, level)?;
        }
        Ok(Self {
            params: params.clone(),
            polys,
            level,
            scale,
            factor: 1,
            seed: None,
            key: KeyId::NONE,
        })
    }

    /// `f` of every component, at this ciphertext's level and with its
    /// scale and factor (not its seed): the out-of-place form of a componentwise
    /// operation (see `RnsPoly::mul_rns_scalar` and the like, which
    /// write each limb once).
    pub fn map_polys(&self, f: impl Fn(&RnsPoly) -> hecloud_math::Result<RnsPoly>) -> Result<Self> {
        let polys = self
            .polys
            .iter()
            .map(f)
            .collect::<hecloud_math::Result<Vec<_>>>()?;
        Ok(Self::new(&self.params, polys, self.level, self.scale)?.with_metadata_of(self))
    }

    /// `f` of the components of this ciphertext and `other` pair by pair,
    /// those the one of lower degree lacks read as zero, at this
    /// ciphertext's level and with its scale and factor (not its seed): the
    /// out-of-place form of a componentwise sum or difference. The caller
    /// checks that the two agree on what these keep; `f` refuses
    /// components over different primes, and two ciphertexts under
    /// different keys are refused ([`KeyId::join`]).
    pub fn zip_polys(
        &self,
        other: &Self,
        f: impl Fn(&RnsPoly, &RnsPoly) -> hecloud_math::Result<RnsPoly>,
    ) -> Result<Self> {
        let key = self.key.join(other.key)?;
        let n = self.polys.len().max(other.polys.len());
        let zero = || RnsPoly::zero(self.polys[0].basis(), hecloud_math::Domain::Ntt);
        let polys = (0..n)
            .map(|i| match (self.polys.get(i), other.polys.get(i)) {
                (Some(x), Some(y)) => f(x, y),
                (Some(x), None) => f(x, &zero()),
                (None, Some(y)) => f(&zero(), y),
                (None, None) => unreachable!("i is below one of the two lengths"),
            })
            .collect::<hecloud_math::Result<Vec<_>>>()?;
        let mut out =
            Self::new(&self.params, polys, self.level, self.scale)?.with_metadata_of(self);
        out.key = key;
        Ok(out)
    }

    /// This ciphertext with c_0 replaced by `f(c_0)` and the other
    /// components copied, with its level, scale and factor, and its seed:
    /// a seeded c_1 is unchanged, so the result still serializes at half
    /// size.
    pub fn map_c0(
        &self,
        f: impl FnOnce(&RnsPoly) -> hecloud_math::Result<RnsPoly>,
    ) -> Result<Self> {
        let mut polys = Vec::with_capacity(self.polys.len());
        polys.push(f(&self.polys[0])?);
        polys.extend(self.polys[1..].iter().cloned());
        let mut out =
            Self::new(&self.params, polys, self.level, self.scale)?.with_metadata_of(self);
        out.seed = self.seed;
        Ok(out)
    }

    /// A degree-1 ciphertext whose c_1 is `expand_seed_uniform(seed)` (the
    /// caller expanded it: only the seed is serialized).
    pub(crate) fn from_seed(
        params: &Arc<Parameters>,
        c0: RnsPoly,
        c1: RnsPoly,
        seed: [u8; 32],
        level: usize,
        scale: f64,
    ) -> Result<Self> {
        let mut ct = Self::new(params, vec![c0, c1], level, scale)?;
        ct.seed = Some(seed);
        Ok(ct)
    }

    /// The parameters.
    pub fn params(&self) -> &Arc<Parameters> {
        &self.params
    }

    /// Level l (each component has l + 1 limbs).
    pub fn level(&self) -> usize {
        self.level
    }

    /// Scale (CKKS) — 1.0 where unused.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Sets the scale metadata (no arithmetic).
    pub fn set_scale(&mut self, scale: f64) {
        self.scale = scale;
    }

    /// Under a plaintext modulus t (BGV): the unit of Z_t the message is
    /// multiplied by, which modulus switching changes (each switch past q
    /// multiplies it by q⁻¹ mod t) and decryption divides out. 1 for CKKS.
    pub fn factor(&self) -> u64 {
        self.factor
    }

    /// Sets the factor metadata (no arithmetic).
    pub fn set_factor(&mut self, factor: u64) {
        self.factor = factor;
    }

    /// `self` with another ciphertext's metadata (scale, factor and key),
    /// for operations that keep them.
    pub fn with_metadata_of(mut self, other: &Ciphertext) -> Self {
        self.scale = other.scale;
        self.factor = other.factor;
        self.key = other.key;
        self
    }

    /// The id of the secret key it decrypts under ([`KeyId::NONE`] for a
    /// ciphertext built from its components by hand).
    pub fn key_id(&self) -> KeyId {
        self.key
    }

    /// Sets the key metadata (no arithmetic): for a ciphertext built from
    /// its components that decrypts under `key`.
    pub fn set_key_id(&mut self, key: KeyId) {
        self.key = key;
    }

    /// Before an in-place operation with a term under `key`: refused
    /// (nothing changed) unless the two keys agree ([`KeyId::join`]), the
    /// joined key kept otherwise.
    pub fn join_key(&mut self, key: KeyId) -> Result<()> {
        self.key = self.key.join(key)?;
        Ok(())
    }

    /// Degree: number of components − 1.
    pub fn degree(&self) -> usize {
        self.polys.len() - 1
    }

    /// The components.
    pub fn polys(&self) -> &[RnsPoly] {
        &self.polys
    }

    /// The components, mutable (forgets the seed: the result is no longer
    /// the fresh encryption).
    pub fn polys_mut(&mut self) -> &mut Vec<RnsPoly> {
        self.seed = None;
        &mut self.polys
    }

    /// c_0, mutable: unlike [`Self::polys_mut`] this keeps the seed, since
    /// c_1 is not touched.
    pub fn c0_mut(&mut self) -> &mut RnsPoly {
        &mut self.polys[0]
    }

    /// Replaces the components and level (checked against the parameters).
    pub fn set_polys(&mut self, polys: Vec<RnsPoly>, level: usize) -> Result<()> {
        if polys.len() < 2 {
            return Err(RlweError::CiphertextDegree {
                expected: 1,
                found: polys.len().saturating_sub(1),
            });
        }
        for p in &polys {
            check_poly(&self.params, p, level)?;
        }
        self.polys = polys;
        self.level = level;
        self.seed = None;
        Ok(())
    }

    /// The seed of c_1 if this is a fresh secret-key encryption.
    pub fn seed(&self) -> Option<&[u8; 32]> {
        self.seed.as_ref()
    }

    /// Whether the ciphertext serializes in seeded (half-size) form.
    pub fn is_seeded(&self) -> bool {
        self.seed.is_some()
    }

    /// Forgets the seed (the serialized form then holds c_1 in full).
    pub fn unseed(&mut self) {
        self.seed = None;
    }

    /// A copy at `level` ≤ the current one that copies only the limbs it
    /// keeps (at N = 2^17 a full copy is tens of megabytes); a seeded `c_1`
    /// stays seeded, the metadata is kept.
    pub fn to_level(&self, level: usize) -> Result<Ciphertext> {
        if level > self.level {
            return Err(RlweError::LevelOutOfRange {
                level,
                max: self.level,
            });
        }
        let (basis, len) = (self.params.q_at(level)?, (level + 1) * self.params.n());
        let polys = self
            .polys
            .iter()
            .map(|p| RnsPoly::from_buffer_unchecked(basis, Domain::Ntt, p.data()[..len].to_vec()))
            .collect();
        Ok(Ciphertext {
            params: self.params.clone(),
            polys,
            level,
            scale: self.scale,
            factor: self.factor,
            seed: self.seed,
            key: self.key,
        })
    }

    /// Drops limbs down to `level` (no rounding: a pure modulus drop).
    pub fn drop_to_level(&mut self, level: usize) -> Result<()> {
        if level > self.level {
            return Err(RlweError::LevelOutOfRange {
                level,
                max: self.level,
            });
        }
        let seed = self.seed;
        for p in &mut self.polys {
            for _ in level..self.level {
                p.drop_last_limb()?;
            }
        }
        self.level = level;
        // Seeded c_1 is a limb-by-limb expansion, so a prefix stays seeded.
        self.seed = seed;
        Ok(())
    }
}
