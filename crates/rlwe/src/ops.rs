//! Ciphertext-level operations shared by CKKS and BGV: relinearization and
//! automorphisms (single and hoisted).

use std::sync::Arc;

use hecloud_math::{Domain, RnsPoly};

use crate::ciphertext::Ciphertext;
use crate::error::{Result, RlweError};
use crate::keys::{GaloisKey, KeyId, RelinearizationKey, SwitchingKey};
use crate::keyswitch::{
    ExtPair, decompose, key_switch_ext, key_switch_ext_add_moved, key_switch_hoisted_ext,
    key_switch_hoisted_moved_ext, mod_down_pair_adding, mod_down_pair_moved,
    mod_down_rescale_pair_adding,
};
use crate::params::Parameters;

/// `ct` may be switched with `key`: the same parameters and the key's
/// secret.
fn same(ct: &Ciphertext, key: &SwitchingKey) -> Result<()> {
    if ct.params().hash() != key.params().hash() {
        return Err(RlweError::ParameterMismatch);
    }
    key.check_operand(ct.key_id())
}

/// Relinearizes a degree-2 ciphertext (c_0, c_1, c_2) to degree 1.
pub fn relinearize(ct: &Ciphertext, rlk: &RelinearizationKey) -> Result<Ciphertext> {
    same(ct, &rlk.0)?;
    if ct.degree() != 2 {
        return Err(RlweError::CiphertextDegree {
            expected: 2,
            found: ct.degree(),
        });
    }
    let p = ct.polys();
    let ext = key_switch_ext(ct.params(), &p[2], &rlk.0)?;
    let (c0, c1) =
        mod_down_pair_adding(ct.params(), ext.level, [&ext.c0, &ext.c1], [&p[0], &p[1]])?;
    Ok(Ciphertext::new(ct.params(), vec![c0, c1], ct.level(), ct.scale())?.with_metadata_of(ct))
}

/// Applies X → X^g to a degree-1 ciphertext and switches back to s.
pub fn apply_galois(ct: &Ciphertext, gk: &GaloisKey) -> Result<Ciphertext> {
    same(ct, &gk.key)?;
    if ct.degree() != 1 {
        return Err(RlweError::CiphertextDegree {
            expected: 1,
            found: ct.degree(),
        });
    }
    let ext = key_switch_ext(ct.params(), &ct.polys()[1], &gk.key)?;
    moved(ct, gk, ext)
}

/// The automorphism of `gk` applied to `ct` from the undivided key switch
/// of its c1 as it is: the key is held permuted by π⁻¹ (see `GaloisKey`),
/// so c0 is added and both results are moved by π, all in the ModDown.
fn moved(ct: &Ciphertext, gk: &GaloisKey, ext: ExtPair) -> Result<Ciphertext> {
    let (c0, c1) = mod_down_pair_moved(
        ct.params(),
        ext.level,
        [&ext.c0, &ext.c1],
        &ct.polys()[0],
        &gk.perm,
    )?;
    Ok(Ciphertext::new(ct.params(), vec![c0, c1], ct.level(), ct.scale())?.with_metadata_of(ct))
}

/// `ct` is of degree 1 and each of `gks` may switch it at its level.
fn check_hoisted(ct: &Ciphertext, gks: &[&GaloisKey]) -> Result<()> {
    if ct.degree() != 1 {
        return Err(RlweError::CiphertextDegree {
            expected: 1,
            found: ct.degree(),
        });
    }
    for gk in gks {
        same(ct, &gk.key)?;
        gk.key.reaches(ct.level())?;
    }
    Ok(())
}

/// Applies several automorphisms to one ciphertext, decomposing c_1 once.
pub fn apply_galois_hoisted(ct: &Ciphertext, gks: &[&GaloisKey]) -> Result<Vec<Ciphertext>> {
    check_hoisted(ct, gks)?;
    let dec = decompose(ct.params(), &ct.polys()[1])?;
    gks.iter()
        .map(|gk| {
            let ext = key_switch_hoisted_ext(ct.params(), &dec, &gk.key)?;
            moved(ct, gk, ext)
        })
        .collect()
}

/// A degree-1 ciphertext over Q_l ∪ P, not yet divided by P: each
/// component is P·c_i plus a key switch's error, as a hoisted rotation
/// leaves it before its ModDown ([`apply_galois_hoisted_ext`]). Products
/// by plaintexts over Q_l ∪ P and their sums keep this form, so a sum of
/// rotations of one ciphertext, each times a plaintext (the baby steps of
/// a linear transform), takes one ModDown ([`Self::mod_down`], or none of
/// its own in a [`GaloisSum`]) where each rotation took one: double
/// hoisting (Bossuat, Mouchet, Troncoso-Pastoriza and Hubaux, Eurocrypt
/// 2021). The division is CKKS's, as [`GaloisSum`]'s: not for BGV.
///
/// ```
/// use hecloud_rlwe::ops::{apply_galois_hoisted_ext, apply_galois_hoisted};
/// use hecloud_rlwe::*;
/// let params = Parameters::new_insecure_for_tests(ParametersLiteral {
///     log_n: 10, log_q: vec![50, 40], log_p: vec![50],
///     secret: SecretDistribution::Ternary, sigma: params::SIGMA, dnum: None, plaintext_modulus: None,
/// }).unwrap();
/// let mut kg = KeyGenerator::new(&params);
/// let sk = kg.gen_secret_key().unwrap();
/// let gk = kg.gen_galois_key(&sk, 5).unwrap();
/// let mut m = hecloud_math::RnsPoly::zero(params.q_at(1).unwrap(), hecloud_math::Domain::Coefficient);
/// m.limb_mut(0)[0] = 1 << 30;
/// m.limb_mut(1)[0] = 1 << 30;
/// m.to_ntt();
/// let ct = Encryptor::new(&params).encrypt_sk(&sk, &Plaintext::new(&params, m, 1, 1.0).unwrap()).unwrap();
/// // Divided by P, the undivided rotation is the rotation.
/// let ext = apply_galois_hoisted_ext(&ct, &[&gk]).unwrap().remove(0);
/// let once = ext.mod_down(None).unwrap();
/// let rotated = apply_galois_hoisted(&ct, &[&gk]).unwrap().remove(0);
/// let dec = |c: &Ciphertext| {
///     let mut p = Decryptor::new(&sk).decrypt(c).unwrap().into_poly();
///     p.to_coefficient();
///     p.basis().moduli()[0].center(p.limb(0)[0])
/// };
/// assert!((dec(&once) - dec(&rotated)).abs() < 64);
/// assert!((dec(&once) - (1 << 30)).abs() < 1 << 10);
/// ```
#[derive(Debug)]
pub struct ExtCiphertext {
    params: Arc<Parameters>,
    level: usize,
    scale: f64,
    key: KeyId,
    polys: [RnsPoly; 2],
}

impl ExtCiphertext {
    /// The parameters.
    pub fn params(&self) -> &Arc<Parameters> {
        &self.params
    }

    /// The level l of its Q part.
    pub fn level(&self) -> usize {
        self.level
    }

    /// The scale of what it encrypts (P aside).
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// The key it decrypts under, once divided.
    pub fn key_id(&self) -> KeyId {
        self.key
    }

    /// The two components over Q_l ∪ P (NTT).
    pub fn polys(&self) -> &[RnsPoly; 2] {
        &self.polys
    }

    /// `pt` is a plaintext for it: over Q_l ∪ P in the NTT domain.
    fn check_plain(&self, pt: &RnsPoly) -> Result<()> {
        if **pt.basis() != **self.params.qp_at(self.level)? || pt.domain() != Domain::Ntt {
            return Err(RlweError::ParameterMismatch);
        }
        Ok(())
    }

    /// self · pt, for `pt` over Q_l ∪ P (NTT) encoding at `pt_scale`: the
    /// scale is the product of the two.
    pub fn mul_plain(&self, pt: &RnsPoly, pt_scale: f64) -> Result<Self> {
        self.check_plain(pt)?;
        let [c0, c1] = &self.polys;
        Ok(Self {
            params: self.params.clone(),
            level: self.level,
            scale: self.scale * pt_scale,
            key: self.key,
            polys: [c0.mul_prefix(pt)?, c1.mul_prefix(pt)?],
        })
    }

    /// Σ_j x_j · pt_j over `terms` (x_j, pt_j), every x_j at one level and
    /// scale under the same parameters, each pt_j over Q_l ∪ P (NTT)
    /// encoding at `pt_scale`: one baby-step sum of a linear transform.
    /// Each limb of the result is one inner product with lazy reduction
    /// (`Backend::dot_product_pair`, the plaintexts in the role of key
    /// switching's digits), where a product per term ([`Self::mul_plain`],
    /// [`Self::mul_plain_add_assign`]) read and wrote the whole sum again
    /// for each term and reduced every product. Refused for no terms (as
    /// [`GaloisSum`] refuses an empty sum) or terms that differ.
    pub fn sum_of_products(terms: &[(&Self, &RnsPoly)], pt_scale: f64) -> Result<Self> {
        let Some(((first, _), _)) = terms.split_first() else {
            return Err(RlweError::EmptySum);
        };
        let mut key = first.key;
        for (x, pt) in terms {
            x.check_plain(pt)?;
            if x.params.hash() != first.params.hash() || x.level != first.level {
                return Err(RlweError::ParameterMismatch);
            }
            same_scale(first.scale, x.scale)?;
            key = key.join(x.key)?;
        }
        let (params, level) = (&first.params, first.level);
        let basis = params.qp_at(level)?;
        let n = params.n();
        let mut polys = [
            crate::pool::pooled_uninit(basis, Domain::Ntt),
            crate::pool::pooled_uninit(basis, Domain::Ntt),
        ];
        let be = hecloud_math::backend::default_backend();
        let [c0, c1] = &mut polys;
        let work = |(i, (o0, o1)): (usize, (&mut [u64], &mut [u64]))| {
            let pts: Vec<&[u64]> = terms.iter().map(|(_, pt)| pt.limb(i)).collect();
            let x0: Vec<&[u64]> = terms.iter().map(|(x, _)| x.polys[0].limb(i)).collect();
            let x1: Vec<&[u64]> = terms.iter().map(|(x, _)| x.polys[1].limb(i)).collect();
            be.dot_product_pair(&basis.moduli()[i], &pts, &x0, &x1, o0, o1);
        };
        crate::keyswitch::for_each_limb_pair(c0.data_mut(), c1.data_mut(), n, work);
        Ok(Self {
            params: params.clone(),
            level,
            scale: first.scale * pt_scale,
            key,
            polys,
        })
    }

    /// self += x · pt with no temporary ([`Self::mul_plain`]); refused
    /// (nothing changed) unless x is at self's level under the same
    /// parameters and key, and the product is at self's scale.
    pub fn mul_plain_add_assign(&mut self, x: &Self, pt: &RnsPoly, pt_scale: f64) -> Result<()> {
        x.check_plain(pt)?;
        if x.params.hash() != self.params.hash() || x.level != self.level {
            return Err(RlweError::ParameterMismatch);
        }
        same_scale(self.scale, x.scale * pt_scale)?;
        let key = self.key.join(x.key)?;
        for (a, c) in self.polys.iter_mut().zip(&x.polys) {
            a.mul_add_prefix_assign(c, pt)?;
        }
        self.key = key;
        Ok(())
    }

    /// ≈ self / P over Q_l (NTT), plus `add` (a degree-1 ciphertext at the
    /// same level and scale, under the same parameters) in the same pass.
    pub fn mod_down(self, add: Option<&Ciphertext>) -> Result<Ciphertext> {
        let [x0, x1] = &self.polys;
        let mut key = self.key;
        let (c0, c1) = match add {
            None => crate::keyswitch::mod_down_pair(&self.params, self.level, x0, x1)?,
            Some(a) => {
                if a.params().hash() != self.params.hash() || a.degree() != 1 {
                    return Err(RlweError::ParameterMismatch);
                }
                same_scale(self.scale, a.scale())?;
                key = key.join(a.key_id())?;
                let p = a.polys();
                mod_down_pair_adding(&self.params, self.level, [x0, x1], [&p[0], &p[1]])?
            }
        };
        let mut out = Ciphertext::new(&self.params, vec![c0, c1], self.level, self.scale)?;
        out.set_key_id(key);
        Ok(out)
    }
}

/// Two scales that must agree: equal to within rounding (1 part in 2^40).
fn same_scale(a: f64, b: f64) -> Result<()> {
    if (a - b).abs() <= a.abs() * 2f64.powi(-40) {
        Ok(())
    } else {
        Err(RlweError::InvalidScale(b.log2()))
    }
}

/// [`apply_galois_hoisted`] without the division by P: each rotation over
/// Q_l ∪ P as an [`ExtCiphertext`], P·σ(c_0) added to its key switch's
/// c_0 (the Q limbs; P divides it on the others). One decomposition of
/// c_1 for all of them.
pub fn apply_galois_hoisted_ext(ct: &Ciphertext, gks: &[&GaloisKey]) -> Result<Vec<ExtCiphertext>> {
    check_hoisted(ct, gks)?;
    if gks.is_empty() {
        return Ok(vec![]);
    }
    let params = ct.params();
    let (level, c0) = (ct.level(), &ct.polys()[0]);
    let dec = decompose(params, &ct.polys()[1])?;
    gks.iter()
        .map(|gk| {
            let ext = key_switch_hoisted_moved_ext(params, &dec, &gk.key, &gk.perm, c0)?;
            Ok(ExtCiphertext {
                params: params.clone(),
                level,
                scale: ct.scale(),
                key: ct.key_id(),
                polys: [ext.c0, ext.c1],
            })
        })
        .collect()
}

/// A sum Σ σ_i(ct_i) of degree-1 ciphertexts at one level l, each moved
/// by an automorphism (or added as it is), whose key switches share one
/// division by P: their products are summed over Q_l ∪ P and
/// [`GaloisSum::finish_rescaled`] divides the sum by P·q_l in one
/// ModDown+rescale. The giant steps of a baby-step giant-step linear
/// transform are such a sum, rescaled: one ModDown instead of one per
/// rotation, and no rescale of its own. The products are moved before
/// their division (each rotation alone divides, then moves): the division
/// commutes with the automorphism's signed permutation of coefficients up
/// to the rounding of ties, so the result equals the rotations' sum
/// rescaled to within that rounding, not bit for bit. The rescale is
/// CKKS's (a rounded division, no plaintext-modulus correction): not for
/// BGV.
///
/// ```
/// use hecloud_rlwe::ops::GaloisSum;
/// use hecloud_rlwe::*;
/// let params = Parameters::new_insecure_for_tests(ParametersLiteral {
///     log_n: 10, log_q: vec![50, 40], log_p: vec![50],
///     secret: SecretDistribution::Ternary, sigma: params::SIGMA, dnum: None, plaintext_modulus: None,
/// }).unwrap();
/// let mut kg = KeyGenerator::new(&params);
/// let sk = kg.gen_secret_key().unwrap();
/// let gk = kg.gen_galois_key(&sk, 5).unwrap();
/// let zero = hecloud_math::RnsPoly::zero(params.q_at(1).unwrap(), hecloud_math::Domain::Ntt);
/// let pt = Plaintext::new(&params, zero, 1, 1.0).unwrap();
/// let ct = Encryptor::new(&params).encrypt_sk(&sk, &pt).unwrap();
/// // σ(ct) + ct, divided by q_1: one ModDown for both terms.
/// let mut sum = GaloisSum::new();
/// sum.add(&ct, Some(&gk)).unwrap();
/// sum.add(&ct, None).unwrap();
/// let (c0, c1) = sum.finish_rescaled().unwrap();
/// assert_eq!((c0.limbs(), c1.limbs()), (1, 1));
/// // It decrypts to the rounding of (σ(0) + 0 + noise)/q_1: about zero.
/// let out = Ciphertext::new(&params, vec![c0, c1], 0, 1.0).unwrap();
/// let mut back = Decryptor::new(&sk).decrypt(&out).unwrap().into_poly();
/// back.to_coefficient();
/// let m = back.basis().moduli()[0];
/// assert!(back.limb(0).iter().all(|&x| m.center(x).abs() < 64));
/// // Nothing to sum: refused.
/// assert!(matches!(GaloisSum::new().finish_rescaled(), Err(RlweError::EmptySum)));
/// ```
#[derive(Debug, Default)]
pub struct GaloisSum {
    /// The terms' parameters and level.
    shape: Option<(std::sync::Arc<crate::params::Parameters>, usize)>,
    /// The terms' key.
    key: KeyId,
    /// Σ of the moved key-switching products, over Q_l ∪ P.
    ext: [Option<RnsPoly>; 2],
    /// Σ of what needs no division: the moved c_0 of each rotated term,
    /// both components of the others; over Q_l.
    direct: [Option<RnsPoly>; 2],
}

impl GaloisSum {
    /// An empty sum.
    pub fn new() -> Self {
        Self::default()
    }

    /// The key its terms are under (what the sum decrypts under).
    pub fn key_id(&self) -> KeyId {
        self.key
    }

    /// A term under other parameters or at another level than the first
    /// term's is refused.
    fn check_term(&self, params: &Parameters, level: usize) -> Result<()> {
        match &self.shape {
            Some((p, _)) if p.hash() != params.hash() => Err(RlweError::ParameterMismatch),
            Some((_, l)) if *l != level => Err(RlweError::LevelMismatch {
                left: *l,
                right: level,
            }),
            _ => Ok(()),
        }
    }

    /// Adds σ(ct) for `gk` the key of σ, or ct itself for `None`. Every
    /// term must be of degree 1, at the first term's level and under its
    /// parameters; a refused term leaves the sum as it was.
    pub fn add(&mut self, ct: &Ciphertext, gk: Option<&GaloisKey>) -> Result<()> {
        if ct.degree() != 1 {
            return Err(RlweError::CiphertextDegree {
                expected: 1,
                found: ct.degree(),
            });
        }
        self.check_term(ct.params(), ct.level())?;
        let key = self.key.join(ct.key_id())?;
        let p = ct.polys();
        match gk {
            Some(gk) => {
                same(ct, &gk.key)?;
                // Every check is behind this point (the key's level
                // among them): what follows cannot fail.
                match &mut self.ext {
                    [Some(e0), Some(e1)] => {
                        key_switch_ext_add_moved(ct.params(), &p[1], &gk.key, &gk.perm, [e0, e1])?
                    }
                    [e0, e1] => {
                        let ext = key_switch_ext(ct.params(), &p[1], &gk.key)?;
                        add_moved(e0, &ext.c0, Some(&gk.perm))?;
                        add_moved(e1, &ext.c1, Some(&gk.perm))?;
                    }
                }
                add_moved(&mut self.direct[0], &p[0], Some(&gk.perm))?;
            }
            None => {
                let [d0, d1] = &mut self.direct;
                add_moved(d0, &p[0], None)?;
                add_moved(d1, &p[1], None)?;
            }
        }
        if self.shape.is_none() {
            self.shape = Some((ct.params().clone(), ct.level()));
        }
        self.key = key;
        Ok(())
    }

    /// Adds an undivided term over Q_l ∪ P (its division by P is the
    /// sum's). Refused as [`Self::add`] refuses terms.
    pub fn add_ext(&mut self, x: ExtCiphertext) -> Result<()> {
        self.check_term(&x.params, x.level)?;
        let key = self.key.join(x.key)?;
        if self.shape.is_none() {
            self.shape = Some((x.params.clone(), x.level));
        }
        for (acc, p) in self.ext.iter_mut().zip(x.polys) {
            match acc {
                Some(a) => a.add_assign(&p)?,
                None => *acc = Some(p),
            }
        }
        self.key = key;
        Ok(())
    }

    /// The sum divided by q_l with rounding, over Q_{l−1} (NTT): (c_0,
    /// c_1). Refused for an empty sum or at level 0.
    pub fn finish_rescaled(self) -> Result<(RnsPoly, RnsPoly)> {
        let Some((params, level)) = self.shape else {
            return Err(RlweError::EmptySum);
        };
        let [d0, d1] = self.direct;
        let zero = || -> Result<RnsPoly> { Ok(RnsPoly::zero(params.q_at(level)?, Domain::Ntt)) };
        let (d0, d1) = (d0.map_or_else(zero, Ok)?, d1.map_or_else(zero, Ok)?);
        match self.ext {
            [Some(e0), Some(e1)] => {
                let out = mod_down_rescale_pair_adding(&params, level, [&e0, &e1], [&d0, &d1])?;
                Ok(out)
            }
            _ => {
                if level == 0 {
                    return Err(RlweError::LevelsExhausted { level, need: 1 });
                }
                let (mut d0, mut d1) = (d0, d1);
                d0.rescale()?;
                d1.rescale()?;
                Ok((d0, d1))
            }
        }
    }
}

/// acc += x moved by `perm` (as it is for `None`), or acc = that where
/// acc is empty; both NTT.
fn add_moved(acc: &mut Option<RnsPoly>, x: &RnsPoly, perm: Option<&[u32]>) -> Result<()> {
    let Some(a) = acc.as_mut() else {
        *acc = Some(match perm {
            Some(perm) => permute(x, perm)?,
            None => x.clone(),
        });
        return Ok(());
    };
    let Some(perm) = perm else {
        return Ok(a.add_assign(x)?);
    };
    check_moved(x, perm)?;
    if !a.same_basis(x) || a.domain() != Domain::Ntt {
        return Err(RlweError::ParameterMismatch);
    }
    let moduli = x.basis().moduli();
    crate::keyswitch::for_each_limb(a.data_mut(), x.degree(), |(i, o)| {
        hecloud_math::poly::gather_add(&moduli[i], o, x.limb(i), perm);
    });
    Ok(())
}

/// out[p] = x[perm[p]] (an automorphism in the NTT domain).
pub(crate) fn permute(x: &RnsPoly, perm: &[u32]) -> Result<RnsPoly> {
    check_moved(x, perm)?;
    Ok(permute_slots(x, perm))
}

/// x can be moved by `perm`: NTT domain, one entry per slot.
fn check_moved(x: &RnsPoly, perm: &[u32]) -> Result<()> {
    if perm.len() != x.degree() || x.domain() != Domain::Ntt {
        return Err(RlweError::ParameterMismatch);
    }
    Ok(())
}

/// [`permute`] for a permutation of x's degree (any domain: a key's
/// polynomials are moved by it too).
pub(crate) fn permute_slots(x: &RnsPoly, perm: &[u32]) -> RnsPoly {
    let n = x.degree();
    debug_assert_eq!(perm.len(), n);
    let mut out = crate::pool::pooled_uninit(x.basis(), x.domain());
    crate::keyswitch::for_each_limb(out.data_mut(), n, |(i, o)| {
        hecloud_math::poly::gather(o, x.limb(i), perm);
    });
    out
}
