//! The CKKS evaluator: additions, multiplications, relinearization,
//! rescaling, rotations and conjugation on ciphertexts, with exact scale
//! tracking and automatic level matching. Every operation takes its
//! result's level, scale and degree from the [`Planner`], and only then
//! does the arithmetic.

use std::borrow::Cow;
use std::sync::Arc;

use hecloud_math::{Domain, RnsPoly, backend::default_backend};
use hecloud_rlwe::keyswitch::{key_switch_ext, mod_down_rescale_pair_adding};
use hecloud_rlwe::ops::{ExtCiphertext, GaloisSum};
use hecloud_rlwe::pool::pooled_uninit;
use hecloud_rlwe::{Ciphertext, GaloisKeys, KeyId, Plaintext, RelinearizationKey, RlweError, ops};
use num_complex::Complex64;
use rayon::prelude::*;

use crate::error::{CkksError, Result};
use crate::params::CkksParameters;
use crate::plan::{CtShape, Planner, PtShape};

pub use crate::plan::SCALE_TOLERANCE;

/// The bound on |round(c·s)| for a constant taken at scale s (it is an
/// i128 on its way to the residues).
pub(crate) const MAX_CONSTANT: f64 = (1u128 << 126) as f64;

/// The server-side keys: relinearization and Galois keys.
#[derive(Debug, Clone, Default)]
pub struct EvaluationKeys {
    /// Relinearization key (needed by `relinearize` and `mul_relin_rescale`).
    pub relin: Option<RelinearizationKey>,
    /// Galois keys (rotations, conjugation).
    pub galois: GaloisKeys,
}

/// A sum of rotated ciphertexts, rescaled at the end
/// ([`Evaluator::add_rotation`], [`Evaluator::rescale_rotation_sum`]):
/// the rotations' key switches share one ModDown, fused with the rescale
/// ([`hecloud_rlwe::ops::GaloisSum`]), where rotating each term, adding
/// and rescaling takes a ModDown per rotation and the rescale's own
/// transforms.
///
/// ```
/// use hecloud_ckks::{*, evaluator::RotationSum, params::test_literal};
/// let params = CkksParameters::new_insecure_for_tests(test_literal(10, 2), 40).unwrap();
/// let keys = KeySet::generate(&params, &[1, 2], false).unwrap();
/// let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
/// let x: Vec<f64> = (0..512).map(|i| i as f64 / 512.0).collect();
/// let pt = enc.encode_real(&x, 2, params.default_scale()).unwrap();
/// // Raised by q_2 (as by a plaintext product), which the rescale divides out.
/// let ct = eval.mul_const_raw(&keys.encrypt(&pt).unwrap(), 1.0, params.q_f64(2)).unwrap();
/// let mut sum = RotationSum::default();
/// for k in [0, 1, 2] {
///     eval.add_rotation(&mut sum, &ct, k).unwrap();
/// }
/// let out = eval.rescale_rotation_sum(sum).unwrap();
/// assert_eq!(out.level(), 1);
/// let got = enc.decode_real(&keys.decrypt(&out).unwrap()).unwrap();
/// assert!((got[0] - (x[0] + x[1] + x[2])).abs() < 1e-6);
/// ```
#[derive(Debug, Default)]
pub struct RotationSum {
    sum: GaloisSum,
    shape: Option<CtShape>,
}

/// Homomorphic operations on CKKS ciphertexts.
///
/// ```
/// use hecloud_ckks::{*, params::test_literal};
/// let params = CkksParameters::new_insecure_for_tests(test_literal(10, 2), 40).unwrap();
/// let keys = KeySet::generate(&params, &[1], false).unwrap();
/// let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
/// let x: Vec<f64> = (0..512).map(|i| i as f64 / 512.0).collect();
/// let ct = keys.encrypt(&enc.encode_real(&x, 2, params.default_scale()).unwrap()).unwrap();
/// let sq = eval.mul_relin_rescale(&ct, &ct).unwrap();
/// let rot = eval.rotate(&sq, 1).unwrap();
/// let out = enc.decode_real(&keys.decrypt(&rot).unwrap()).unwrap();
/// assert!((out[0] - x[1] * x[1]).abs() < 1e-6);
/// ```
#[derive(Debug, Clone)]
pub struct Evaluator {
    params: Arc<CkksParameters>,
    keys: EvaluationKeys,
}

impl Evaluator {
    /// An evaluator with the given keys.
    pub fn new(params: &Arc<CkksParameters>, keys: EvaluationKeys) -> Self {
        Self {
            params: params.clone(),
            keys,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &Arc<CkksParameters> {
        &self.params
    }

    /// The evaluation keys.
    pub fn keys(&self) -> &EvaluationKeys {
        &self.keys
    }

    /// The planner of these parameters: what each operation will give
    /// and cost, before it runs.
    pub fn planner(&self) -> Planner<'_> {
        Planner::new(&self.params)
    }

    fn check(&self, ct: &Ciphertext) -> Result<()> {
        if ct.params().hash() != self.params.rlwe().hash() {
            return Err(RlweError::ParameterMismatch.into());
        }
        Ok(())
    }

    fn check_plain(&self, pt: &Plaintext) -> Result<()> {
        if pt.params().hash() != self.params.rlwe().hash() {
            return Err(RlweError::ParameterMismatch.into());
        }
        Ok(())
    }

    /// A copy of `ct` reduced to `level` (limbs dropped, value and scale kept).
    pub fn drop_level(&self, ct: &Ciphertext, level: usize) -> Result<Ciphertext> {
        self.check(ct)?;
        self.planner().drop_level(&CtShape::of(ct), level)?;
        Ok(ct.to_level(level)?)
    }

    /// `ct` at `level`: itself where it is there, else a copy reduced to it.
    fn at_level<'a>(&self, ct: &'a Ciphertext, level: usize) -> Result<Cow<'a, Ciphertext>> {
        if ct.level() == level {
            return Ok(Cow::Borrowed(ct));
        }
        Ok(Cow::Owned(self.drop_level(ct, level)?))
    }

    /// Copies of `a` and `b` at the lower of their levels.
    pub fn match_levels(&self, a: &Ciphertext, b: &Ciphertext) -> Result<(Ciphertext, Ciphertext)> {
        let l = a.level().min(b.level());
        Ok((self.drop_level(a, l)?, self.drop_level(b, l)?))
    }

    fn binary(
        &self,
        a: &Ciphertext,
        b: &Ciphertext,
        f: impl Fn(&RnsPoly, &RnsPoly) -> hecloud_math::Result<RnsPoly>,
    ) -> Result<Ciphertext> {
        self.check(a)?;
        self.check(b)?;
        let out = self.planner().add(&CtShape::of(a), &CtShape::of(b))?.out;
        if a.level() != b.level() {
            let l = a.level().min(b.level());
            let (a, b) = (self.at_level(a, l)?, self.at_level(b, l)?);
            return self.binary(&a, &b, f);
        }
        let mut ct = a.zip_polys(b, f)?;
        ct.set_scale(out.scale);
        Ok(ct)
    }

    /// a + b (levels matched, scales must agree).
    pub fn add(&self, a: &Ciphertext, b: &Ciphertext) -> Result<Ciphertext> {
        self.binary(a, b, RnsPoly::add)
    }

    /// acc += b, in place where the two are at the same level and degree
    /// (otherwise as [`Self::add`]): the accumulation of sums, with no
    /// copy of `acc`.
    pub fn add_assign(&self, acc: &mut Ciphertext, b: &Ciphertext) -> Result<()> {
        self.binary_assign(acc, b, RnsPoly::add_assign, Self::add)
    }

    /// a − b.
    pub fn sub(&self, a: &Ciphertext, b: &Ciphertext) -> Result<Ciphertext> {
        self.binary(a, b, RnsPoly::sub)
    }

    /// acc −= b, in place as [`Self::add_assign`] is.
    pub fn sub_assign(&self, acc: &mut Ciphertext, b: &Ciphertext) -> Result<()> {
        self.binary_assign(acc, b, RnsPoly::sub_assign, Self::sub)
    }

    /// acc = acc ∘ b by `f` limb by limb where the two are at one level and
    /// acc's degree covers b's, by `out_of_place` otherwise.
    fn binary_assign(
        &self,
        acc: &mut Ciphertext,
        b: &Ciphertext,
        f: impl Fn(&mut RnsPoly, &RnsPoly) -> hecloud_math::Result<()>,
        out_of_place: impl Fn(&Self, &Ciphertext, &Ciphertext) -> Result<Ciphertext>,
    ) -> Result<()> {
        self.check(acc)?;
        self.check(b)?;
        let out = self.planner().add(&CtShape::of(acc), &CtShape::of(b))?.out;
        if acc.level() != b.level() || acc.degree() < b.degree() {
            *acc = out_of_place(self, acc, b)?;
            return Ok(());
        }
        acc.join_key(b.key_id())?;
        for (x, y) in acc.polys_mut().iter_mut().zip(b.polys()) {
            f(x, y)?;
        }
        acc.set_scale(out.scale);
        Ok(())
    }

    /// −a.
    pub fn neg(&self, a: &Ciphertext) -> Result<Ciphertext> {
        self.check(a)?;
        Ok(a.map_polys(|p| Ok(p.neg()))?)
    }

    /// ct + pt (pt at the ciphertext's level or above, same scale).
    pub fn add_plain(&self, ct: &Ciphertext, pt: &Plaintext) -> Result<Ciphertext> {
        self.check(ct)?;
        self.check_plain(pt)?;
        self.planner()
            .add_plain(&CtShape::of(ct), &PtShape::of(pt))?;
        Ok(ct.map_c0(|c0| c0.add_prefix(pt.poly()))?)
    }

    /// ct − pt.
    pub fn sub_plain(&self, ct: &Ciphertext, pt: &Plaintext) -> Result<Ciphertext> {
        self.check(ct)?;
        self.check_plain(pt)?;
        self.planner()
            .sub_plain(&CtShape::of(ct), &PtShape::of(pt))?;
        Ok(ct.map_c0(|c0| c0.sub_prefix(pt.poly()))?)
    }

    /// Residues of round(x) modulo each prime of Q_level
    /// (|x| < [`MAX_CONSTANT`]).
    fn round_residues(&self, x: f64, level: usize) -> Result<Vec<u64>> {
        let r = x.round();
        if !r.is_finite() || r.abs() >= MAX_CONSTANT {
            return Err(CkksError::ValueOutOfRange(format!("constant {x}")));
        }
        let r = r as i128;
        Ok(self
            .params
            .rlwe()
            .q_at(level)?
            .moduli()
            .iter()
            .map(|m| r.rem_euclid(m.value() as i128) as u64)
            .collect())
    }

    /// ct + c in every slot (no level consumed). Refused: a constant not
    /// representable at the ciphertext's level and scale
    /// ([`Planner::check_representable`]).
    pub fn add_const(&self, ct: &Ciphertext, c: Complex64) -> Result<Ciphertext> {
        let (re, im) = self.const_residues(ct, c)?;
        Ok(ct.map_c0(|c0| {
            let mut c0 = c0.add_rns_scalar(&re)?;
            add_imaginary_const(&mut c0, im.as_deref())?;
            Ok(c0)
        })?)
    }

    /// ct += c in every slot, in place: [`Self::add_const`] with no copy
    /// (c_0 alone changes).
    pub fn add_const_assign(&self, ct: &mut Ciphertext, c: Complex64) -> Result<()> {
        let (re, im) = self.const_residues(ct, c)?;
        let c0 = ct.c0_mut();
        c0.add_rns_scalar_assign(&re)?;
        add_imaginary_const(c0, im.as_deref())?;
        Ok(())
    }

    /// The residues of round(c·scale) at ct's level, real and imaginary
    /// parts (none for a real c), checked as [`Self::add_const`] states.
    fn const_residues(
        &self,
        ct: &Ciphertext,
        c: Complex64,
    ) -> Result<(Vec<u64>, Option<Vec<u64>>)> {
        self.check(ct)?;
        self.planner()
            .add_const(&CtShape::of(ct), c.re.abs().max(c.im.abs()))?;
        let level = ct.level();
        let re = self.round_residues(c.re * ct.scale(), level)?;
        let im = if c.im == 0.0 {
            None
        } else {
            Some(self.round_residues(c.im * ct.scale(), level)?)
        };
        Ok((re, im))
    }

    /// ct · k for an integer k (no level consumed); refused as
    /// [`Planner::mul_int`] refuses it.
    pub fn mul_int(&self, ct: &Ciphertext, k: i64) -> Result<Ciphertext> {
        self.check(ct)?;
        self.planner().mul_int(&CtShape::of(ct), k)?;
        let res: Vec<u64> = self
            .params
            .rlwe()
            .q_at(ct.level())?
            .moduli()
            .iter()
            .map(|m| m.from_i64(k))
            .collect();
        Ok(ct.map_polys(|p| p.mul_rns_scalar(&res))?)
    }

    /// ct · round(c·s) with the scale multiplied by s (no rescale): the
    /// building block of constant products inside larger circuits.
    pub fn mul_const_raw(&self, ct: &Ciphertext, c: f64, s: f64) -> Result<Ciphertext> {
        self.check(ct)?;
        if !c.is_finite() {
            return Err(CkksError::ValueOutOfRange(format!("constant {c}")));
        }
        let plan = self.planner().mul_const_raw(&CtShape::of(ct), s);
        let res = self.round_residues(c * s, ct.level())?;
        let mut out = ct.map_polys(|p| p.mul_rns_scalar(&res))?;
        out.set_scale(plan.out.scale);
        Ok(out)
    }

    /// acc += x · round(c·s) with x taken at acc's level (x at that level
    /// or above), in place: the terms of a polynomial's linear
    /// combinations. The term's scale, x's times s, must agree with acc's.
    pub fn mul_const_raw_add_assign(
        &self,
        acc: &mut Ciphertext,
        x: &Ciphertext,
        c: f64,
        s: f64,
    ) -> Result<()> {
        self.check(acc)?;
        self.check(x)?;
        if !c.is_finite() {
            return Err(CkksError::ValueOutOfRange(format!("constant {c}")));
        }
        let term = self.planner().mul_const_raw(&CtShape::of(x), s).out;
        self.planner().add(&CtShape::of(acc), &term)?;
        if x.level() < acc.level() || x.degree() > acc.degree() {
            let t = self.mul_const_raw(x, c, s)?;
            return self.add_assign(acc, &t);
        }
        let res = self.round_residues(c * s, acc.level())?;
        acc.join_key(x.key_id())?;
        for (a, p) in acc.polys_mut().iter_mut().zip(x.polys()) {
            a.add_scaled_prefix_assign(p, &res)?;
        }
        Ok(())
    }

    /// ct · c for a real constant: exact integers cost no level; other
    /// constants are scaled by q_l and rescaled away (one level, scale kept).
    pub fn mul_const(&self, ct: &Ciphertext, c: f64) -> Result<Ciphertext> {
        let plan = self.planner().mul_const(&CtShape::of(ct), c)?;
        if plan.rescales == 0 {
            return self.mul_int(ct, c as i64);
        }
        let ql = self.params.q_f64(ct.level());
        let out = self.mul_const_raw(ct, c, ql)?;
        let mut out = self.rescale(&out)?;
        out.set_scale(plan.out.scale);
        Ok(out)
    }

    /// The tensor product (degree 2) of two degree-1 ciphertexts.
    pub fn mul(&self, a: &Ciphertext, b: &Ciphertext) -> Result<Ciphertext> {
        self.check(a)?;
        self.check(b)?;
        let out = self.planner().mul(&CtShape::of(a), &CtShape::of(b))?.out;
        let key = a.key_id().join(b.key_id())?;
        let polys = self.tensor_parts(a, b)?;
        self.output(polys.to_vec(), out, key)
    }

    /// A result ciphertext of this evaluator's parameters with the shape
    /// its plan gave and the key of its operands.
    fn output(&self, polys: Vec<RnsPoly>, shape: CtShape, key: KeyId) -> Result<Ciphertext> {
        let mut ct = Ciphertext::new(self.params.rlwe(), polys, shape.level, shape.scale)?;
        ct.set_key_id(key);
        Ok(ct)
    }

    /// The tensor product of two degree-1 ciphertexts (checked by the
    /// caller's plan) at the lower of their levels.
    fn tensor_parts(&self, a: &Ciphertext, b: &Ciphertext) -> Result<[RnsPoly; 3]> {
        let (x, y) = (a.polys(), b.polys());
        tensor(&x[0], &x[1], &y[0], &y[1])
    }

    /// ct · pt (scale multiplied, no rescale).
    pub fn mul_plain(&self, ct: &Ciphertext, pt: &Plaintext) -> Result<Ciphertext> {
        self.check(ct)?;
        self.check_plain(pt)?;
        let plan = self
            .planner()
            .mul_plain(&CtShape::of(ct), &PtShape::of(pt))?;
        let mut out = ct.map_polys(|c| c.mul_prefix(pt.poly()))?;
        out.set_scale(plan.out.scale);
        Ok(out)
    }

    /// acc += ct · pt with no temporary: `acc` must have the product's
    /// level, scale and degree (the terms of a plaintext matrix product,
    /// [`crate::linear`]). Refused as [`Self::mul_plain`] and
    /// [`Self::add`] would refuse the two steps.
    pub fn mul_plain_add_assign(
        &self,
        acc: &mut Ciphertext,
        ct: &Ciphertext,
        pt: &Plaintext,
    ) -> Result<()> {
        self.check(acc)?;
        self.check(ct)?;
        self.check_plain(pt)?;
        let plan = self
            .planner()
            .mul_plain(&CtShape::of(ct), &PtShape::of(pt))?;
        let out = self.planner().add(&CtShape::of(acc), &plan.out)?.out;
        if acc.level() != ct.level() || acc.degree() != ct.degree() {
            let term = self.mul_plain(ct, pt)?;
            return self.add_assign(acc, &term);
        }
        acc.join_key(ct.key_id())?;
        for (a, c) in acc.polys_mut().iter_mut().zip(ct.polys()) {
            a.mul_add_prefix_assign(c, pt.poly())?;
        }
        acc.set_scale(out.scale);
        Ok(())
    }

    fn rlk(&self) -> Result<&RelinearizationKey> {
        self.keys
            .relin
            .as_ref()
            .ok_or(CkksError::Rlwe(RlweError::MissingRelinearizationKey))
    }

    /// Degree 2 → degree 1.
    pub fn relinearize(&self, ct: &Ciphertext) -> Result<Ciphertext> {
        self.check(ct)?;
        let rlk = self.rlk()?;
        self.planner().relinearize(&CtShape::of(ct))?;
        Ok(ops::relinearize(ct, rlk)?)
    }

    /// Divides by the last prime q_l: level − 1, scale / q_l.
    pub fn rescale(&self, ct: &Ciphertext) -> Result<Ciphertext> {
        self.check(ct)?;
        let out = self.planner().rescale(&CtShape::of(ct))?.out;
        let polys = ct
            .polys()
            .iter()
            .map(RnsPoly::rescaled)
            .collect::<hecloud_math::Result<Vec<_>>>()?;
        self.output(polys, out, ct.key_id())
    }

    /// Multiply, relinearize and rescale in one call, with the ModDown of
    /// key switching fused into the rescale.
    pub fn mul_relin_rescale(&self, a: &Ciphertext, b: &Ciphertext) -> Result<Ciphertext> {
        let rlk = self.rlk()?;
        self.check(a)?;
        self.check(b)?;
        let plan = self
            .planner()
            .mul_relin_rescale(&CtShape::of(a), &CtShape::of(b))?;
        let level = plan.level;
        let key = a.key_id().join(b.key_id())?;
        rlk.0.check_operand(key)?;
        let [d0, d1, d2] = self.tensor_parts(a, b)?;
        let rl = self.params.rlwe();
        let ext = key_switch_ext(rl, &d2, &rlk.0)?;
        let (c0, c1) = mod_down_rescale_pair_adding(rl, level, [&ext.c0, &ext.c1], [&d0, &d1])?;
        self.output(vec![c0, c1], plan.out, key)
    }

    /// Rotates the slots left by `k` (negative: right).
    pub fn rotate(&self, ct: &Ciphertext, k: i64) -> Result<Ciphertext> {
        self.check(ct)?;
        let Some(g) = self.planner().rotation_key(k) else {
            return Ok(ct.clone());
        };
        let key = self.keys.galois.get(g)?;
        self.planner().rotate(&CtShape::of(ct), k)?;
        Ok(ops::apply_galois(ct, key)?)
    }

    /// Complex conjugation of every slot.
    pub fn conjugate(&self, ct: &Ciphertext) -> Result<Ciphertext> {
        self.check(ct)?;
        let key = self.keys.galois.get(self.planner().conjugation_key())?;
        self.planner().conjugate(&CtShape::of(ct))?;
        Ok(ops::apply_galois(ct, key)?)
    }

    /// Adds `ct` rotated left by `k` to `sum`. Refused (leaving `sum` as it
    /// was): a term not of degree 1, at another level than the first term
    /// (no realignment, unlike [`Self::add`]) or at another scale, a
    /// rotation without its key.
    pub fn add_rotation(&self, sum: &mut RotationSum, ct: &Ciphertext, k: i64) -> Result<()> {
        self.check(ct)?;
        let planner = self.planner();
        let rotated = planner.rotate(&CtShape::of(ct), k)?.out;
        let shape = match &sum.shape {
            None => rotated,
            Some(s) => planner.add(s, &rotated)?.out,
        };
        let key = match planner.rotation_key(k) {
            Some(g) => Some(self.keys.galois.get(g)?),
            None => None,
        };
        sum.sum.add(ct, key)?;
        sum.shape = Some(shape);
        Ok(())
    }

    /// The sum of `sum`'s rotated terms, rescaled (one level down, the
    /// scale divided by the level's prime, as [`Self::rescale`]).
    pub fn rescale_rotation_sum(&self, sum: RotationSum) -> Result<Ciphertext> {
        let shape = sum.shape.ok_or(RlweError::EmptySum)?;
        let out = self.planner().rescale(&shape)?.out;
        let key = sum.sum.key_id();
        let (c0, c1) = sum.sum.finish_rescaled()?;
        self.output(vec![c0, c1], out, key)
    }

    /// Several rotations of one ciphertext, decomposing it once (hoisting).
    pub fn rotate_hoisted(&self, ct: &Ciphertext, ks: &[i64]) -> Result<Vec<Ciphertext>> {
        self.check(ct)?;
        let plan = self.planner();
        let mut keys = Vec::new();
        for &k in ks {
            if let Some(g) = plan.rotation_key(k) {
                keys.push(self.keys.galois.get(g)?);
            }
        }
        plan.rotate_hoisted(&CtShape::of(ct), ks)?;
        let mut rotated = ops::apply_galois_hoisted(ct, &keys)?.into_iter();
        ks.iter()
            .map(|&k| {
                if plan.rotation_key(k).is_none() {
                    Ok(ct.clone())
                } else {
                    rotated
                        .next()
                        .ok_or(CkksError::Rlwe(RlweError::ParameterMismatch))
                }
            })
            .collect()
    }

    /// [`Self::rotate_hoisted`] without the division by P: each rotation
    /// over Q_l ∪ P, as an [`ExtCiphertext`], for a sum of rotations times
    /// plaintexts over Q_l ∪ P ([`crate::Encoder::encode_ext`]) that takes
    /// one ModDown ([`Self::mod_down_ext`], or none of its own in
    /// [`Self::add_ext_rotation`]): double hoisting. Each k needs its
    /// rotation key (a rotation by 0 is the ciphertext itself).
    ///
    /// ```
    /// use hecloud_ckks::{*, params::test_literal};
    /// use num_complex::Complex64;
    /// let params = CkksParameters::new_insecure_for_tests(test_literal(10, 2), 40)?;
    /// let keys = KeySet::generate(&params, &[1, 2], false)?;
    /// let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
    /// let n = params.slots();
    /// let x: Vec<f64> = (0..n).map(|i| i as f64 / n as f64).collect();
    /// let ct = keys.encrypt(&enc.encode_real(&x, 2, params.default_scale())?)?;
    /// // 2·rot(x, 1) + 3·rot(x, 2), divided by P once.
    /// let ext = eval.rotate_hoisted_ext(&ct, &[1, 2])?;
    /// let q = params.q_f64(2);
    /// let constant = |c: f64| enc.encode_ext(&vec![Complex64::new(c, 0.0); n], 2, q);
    /// let mut sum = ext[0].mul_plain(&constant(2.0)?, q)?;
    /// sum.mul_plain_add_assign(&ext[1], &constant(3.0)?, q)?;
    /// let out = eval.rescale(&eval.mod_down_ext(sum, None)?)?;
    /// let y = enc.decode_real(&keys.decrypt(&out)?)?;
    /// assert!((y[0] - (2.0 * x[1] + 3.0 * x[2])).abs() < 1e-6);
    /// // A rotation by 0 has no undivided form.
    /// assert!(eval.rotate_hoisted_ext(&ct, &[0]).is_err());
    /// # Ok::<(), CkksError>(())
    /// ```
    pub fn rotate_hoisted_ext(&self, ct: &Ciphertext, ks: &[i64]) -> Result<Vec<ExtCiphertext>> {
        self.check(ct)?;
        let plan = self.planner();
        plan.rotate_hoisted(&CtShape::of(ct), ks)?;
        let keys = ks
            .iter()
            .map(|&k| match plan.rotation_key(k) {
                Some(g) => Ok(self.keys.galois.get(g)?),
                None => Err(CkksError::ValueOutOfRange(format!(
                    "an undivided rotation by {k}, a multiple of the slots"
                ))),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ops::apply_galois_hoisted_ext(ct, &keys)?)
    }

    /// `x` divided by P, plus `add` (a ciphertext at x's level and scale)
    /// in the same pass: one ModDown for a sum of undivided terms.
    pub fn mod_down_ext(&self, x: ExtCiphertext, add: Option<&Ciphertext>) -> Result<Ciphertext> {
        self.check_ext(&x)?;
        if let Some(a) = add {
            self.check(a)?;
        }
        Ok(x.mod_down(add)?)
    }

    /// Adds `x` to `sum` as a term rotated by 0, undivided: the sum's one
    /// ModDown divides it ([`crate::linear`] adds giant step 0 this way).
    pub fn add_ext_rotation(&self, sum: &mut RotationSum, x: ExtCiphertext) -> Result<()> {
        self.check_ext(&x)?;
        let term = CtShape::new(x.level(), x.scale());
        let shape = match &sum.shape {
            None => term,
            Some(s) => self.planner().add(s, &term)?.out,
        };
        sum.sum.add_ext(x)?;
        sum.shape = Some(shape);
        Ok(())
    }

    fn check_ext(&self, x: &ExtCiphertext) -> Result<()> {
        if x.params().hash() != self.params.rlwe().hash() {
            return Err(RlweError::ParameterMismatch.into());
        }
        Ok(())
    }

    /// Slot j of the result holds Σ_{t < n} slot (j + t) of `ct` (n a power
    /// of two; needs rotation keys for 1, 2, 4, …, n/2).
    pub fn rotate_and_sum(&self, ct: &Ciphertext, n: usize) -> Result<Ciphertext> {
        let mut acc = ct.clone();
        for k in self.planner().rotate_and_sum_steps(n)? {
            let r = self.rotate(&acc, k)?;
            acc = self.add(&acc, &r)?;
        }
        Ok(acc)
    }
}

/// Limb i of the three tensor outputs.
type OutputLimbs<'a> = ((&'a mut [u64], &'a mut [u64]), &'a mut [u64]);

/// (a0 + a1·s)(b0 + b1·s) = d0 + d1·s + d2·s², limb by limb into pooled
/// buffers (each limb is copied and multiplied while it sits in cache).
fn tensor(a0: &RnsPoly, a1: &RnsPoly, b0: &RnsPoly, b1: &RnsPoly) -> Result<[RnsPoly; 3]> {
    // Over the shorter operand's basis: the longer one's extra limbs (a
    // higher level) are not read, where a copy at the lower level would
    // cost a pass over both of its components.
    let low = if a0.limbs() <= b0.limbs() { a0 } else { b0 };
    for p in [a0, a1, b0, b1] {
        low.check_prefix(p)?;
    }
    let (basis, n) = (low.basis(), low.degree());
    let be = default_backend();
    let [mut d0, mut d1, mut d2] = [(); 3].map(|_| pooled_uninit(basis, Domain::Ntt));
    let work = |(i, ((o0, o1), o2)): (usize, OutputLimbs)| {
        let m = &basis.moduli()[i];
        let (x0, x1, y0, y1) = (a0.limb(i), a1.limb(i), b0.limb(i), b1.limb(i));
        be.mul_pointwise_into(m, o0, x0, y0);
        be.mul_pointwise_into(m, o2, x1, y1);
        be.mul_pointwise_into(m, o1, x0, y1);
        be.mul_add_pointwise(m, x1, y0, o1);
    };
    let (o0, o1, o2) = (d0.data_mut(), d1.data_mut(), d2.data_mut());
    if n >= 1 << 11 {
        let limbs = o0.par_chunks_exact_mut(n).zip(o1.par_chunks_exact_mut(n));
        limbs
            .zip(o2.par_chunks_exact_mut(n))
            .enumerate()
            .for_each(work);
    } else {
        let limbs = o0.chunks_exact_mut(n).zip(o1.chunks_exact_mut(n));
        limbs.zip(o2.chunks_exact_mut(n)).enumerate().for_each(work);
    }
    Ok([d0, d1, d2])
}

/// c0 += i·c for the residues `im` of the constant c (a constant polynomial
/// is the same constant in every NTT slot; i is X^{N/2} in every slot).
fn add_imaginary_const(c0: &mut RnsPoly, im: Option<&[u64]>) -> hecloud_math::Result<()> {
    let Some(im) = im else {
        return Ok(());
    };
    let n = c0.degree();
    let mut p = RnsPoly::zero(c0.basis(), Domain::Coefficient);
    for (i, r) in im.iter().enumerate() {
        p.limb_mut(i)[n / 2] = *r;
    }
    p.to_ntt();
    c0.add_assign(&p)
}
