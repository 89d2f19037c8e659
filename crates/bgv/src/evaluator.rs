//! The evaluator: exact slot-wise arithmetic mod t on ciphertexts, with
//! automatic level and factor matching, modulus switching after products,
//! and a noise estimate carried by every result.
//!
//! Every ciphertext carries two pieces of BGV metadata in its RLWE header:
//! the factor (a unit of Z_t the message is multiplied by, changed by each
//! modulus switch) and, in the scale field, log2 of the estimated noise
//! bound (see [`crate::params::NoiseModel`]). An operation whose result
//! would have no estimated budget left fails with
//! [`BgvError::BudgetExhausted`] instead of returning a ciphertext that
//! decrypts wrongly.

use std::borrow::Cow;
use std::sync::Arc;

use hecloud_math::RnsPoly;
use hecloud_rlwe::keys::{galois_element_conjugate, galois_element_for_rotation};
use hecloud_rlwe::keyswitch::{
    key_switch_ext, lift_times_p, mod_down_rescale, mod_down_rescale_pair_adding,
};
use hecloud_rlwe::{Ciphertext, RlweError, ops};

use crate::encoder::Plaintext;
use crate::error::{BgvError, Result};
use crate::keys::{EvaluationKeys, check};
use crate::params::{BgvParameters, FactorMatch};

/// Terms [`Evaluator::add_many`] adds in one pass over its accumulator: the
/// accumulator and seven residues below q < 2^61 sum below 8·q < 2^64, and
/// three conditional subtractions (of 4q, 2q, q) reduce that sum. One pass
/// instead of seven halves the memory traffic of a long sum, whose terms
/// stream from memory once each.
pub const LAZY_TERMS: usize = 7;

/// `acc += Σ terms`, limb by limb: [`LAZY_TERMS`] terms of the same basis
/// and domain with one reduction, anything else one term at a time (where
/// a mismatch is reported).
fn add_lazy(acc: &mut RnsPoly, terms: &[&RnsPoly]) -> hecloud_math::Result<()> {
    let lazy = terms.len() == LAZY_TERMS
        && terms
            .iter()
            .all(|t| acc.same_basis(t) && acc.domain() == t.domain())
        && acc.basis().moduli().iter().all(|m| m.value() < 1 << 61);
    if !lazy {
        return terms.iter().try_for_each(|t| acc.add_assign(t));
    }
    let qs: Vec<u64> = acc.basis().moduli().iter().map(|m| m.value()).collect();
    for (i, q) in qs.into_iter().enumerate() {
        let limbs: [&[u64]; LAZY_TERMS] = std::array::from_fn(|k| terms[k].limb(i));
        add_limbs(acc.limb_mut(i), limbs, q);
    }
    Ok(())
}

/// `acc[j] = (acc[j] + Σ_k t_k[j]) mod q` for residues below q < 2^61.
fn add_limbs(acc: &mut [u64], t: [&[u64]; LAZY_TERMS], q: u64) {
    let n = acc.len();
    let t = t.map(|x| &x[..n]);
    let (q2, q4) = (2 * q, 4 * q);
    for j in 0..n {
        let s = acc[j] + t[0][j] + t[1][j] + t[2][j] + t[3][j] + t[4][j] + t[5][j] + t[6][j];
        let s = if s >= q4 { s - q4 } else { s };
        let s = if s >= q2 { s - q2 } else { s };
        acc[j] = if s >= q { s - q } else { s };
    }
}

/// Evaluates on BGV ciphertexts of one parameter set.
///
/// ```
/// use hecloud_bgv::{BgvParameters, Encoder, Evaluator, KeySet, params::test_literal};
/// let params = BgvParameters::new_insecure_for_tests(test_literal(10, 3, 65537)).unwrap();
/// let keys = KeySet::generate(&params, &[1], false).unwrap();
/// let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
/// let a = keys.encrypt(&enc.encode(&[3, 4, 5]).unwrap()).unwrap();
/// let b = keys.encrypt(&enc.encode(&[10, 20, 30]).unwrap()).unwrap();
/// let c = eval.mul_relin(&a, &b).unwrap();            // 30, 80, 150
/// let c = eval.add(&c, &a).unwrap();                   // 33, 84, 155
/// let c = eval.rotate_rows(&c, 1).unwrap();            // 84, 155, 0, …
/// assert_eq!(&enc.decode(&keys.decrypt(&c).unwrap()).unwrap()[..3], &[84, 155, 0]);
/// ```
#[derive(Debug, Clone)]
pub struct Evaluator {
    params: Arc<BgvParameters>,
    keys: Arc<EvaluationKeys>,
}

impl Evaluator {
    /// An evaluator with the server's evaluation keys.
    pub fn new(params: &Arc<BgvParameters>, keys: Arc<EvaluationKeys>) -> Self {
        Self {
            params: params.clone(),
            keys,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &Arc<BgvParameters> {
        &self.params
    }

    /// The estimated noise budget of `ct`, in bits (no secret needed).
    pub fn budget_estimate(&self, ct: &Ciphertext) -> f64 {
        self.params.budget_bits(ct.level(), ct.scale())
    }

    /// Sets the noise estimate of `ct`, refusing a result without budget.
    fn with_noise(&self, mut ct: Ciphertext, noise: f64) -> Result<Ciphertext> {
        if !self.params.has_budget(ct.level(), noise) {
            let budget_bits = self.params.budget_bits(ct.level(), noise);
            return Err(BgvError::BudgetExhausted {
                level: ct.level(),
                budget_bits,
            });
        }
        ct.set_scale(noise);
        Ok(ct)
    }

    /// `ct` times the signed constant `c` (factor and noise unchanged but
    /// for |c|).
    fn times(&self, ct: &Ciphertext, c: i64) -> Result<Ciphertext> {
        let cs: Vec<u64> = ct.polys()[0]
            .basis()
            .moduli()
            .iter()
            .map(|m| m.from_i64(c))
            .collect();
        let mut out = ct.map_polys(|p| p.mul_rns_scalar(&cs))?;
        out.set_scale(self.params.noise().mul_scalar(ct.scale(), c.unsigned_abs()));
        Ok(out)
    }

    /// Brings `a` and `b` to one level (switching the higher one down) and
    /// one factor (multiplying the one whose noise grows least).
    fn matched<'a>(
        &self,
        a: &'a Ciphertext,
        b: &'a Ciphertext,
    ) -> Result<(Cow<'a, Ciphertext>, Cow<'a, Ciphertext>)> {
        check(&self.params, a)?;
        check(&self.params, b)?;
        let level = a.level().min(b.level());
        let mut a = Cow::Borrowed(a);
        let mut b = Cow::Borrowed(b);
        if a.level() > level {
            a = Cow::Owned(self.mod_switch_to(&a, level)?);
        }
        if b.level() > level {
            b = Cow::Owned(self.mod_switch_to(&b, level)?);
        }
        if a.factor() != b.factor() {
            match self
                .params
                .match_factors((a.factor(), a.scale()), (b.factor(), b.scale()))?
            {
                FactorMatch::ScaleB(k) => {
                    let mut nb = self.times(&b, k)?;
                    nb.set_factor(a.factor());
                    b = Cow::Owned(nb);
                }
                FactorMatch::ScaleA(k) => {
                    let mut na = self.times(&a, k)?;
                    na.set_factor(b.factor());
                    a = Cow::Owned(na);
                }
            }
        }
        Ok((a, b))
    }

    fn combine(
        &self,
        a: &Ciphertext,
        b: &Ciphertext,
        f: impl Fn(&RnsPoly, &RnsPoly) -> hecloud_math::Result<RnsPoly>,
    ) -> Result<Ciphertext> {
        let (a, b) = self.matched(a, b)?;
        let noise = self.params.noise().add(a.scale(), b.scale());
        self.with_noise(a.zip_polys(&b, f)?, noise)
    }

    /// a + b.
    pub fn add(&self, a: &Ciphertext, b: &Ciphertext) -> Result<Ciphertext> {
        self.combine(a, b, RnsPoly::add)
    }

    /// a − b.
    pub fn sub(&self, a: &Ciphertext, b: &Ciphertext) -> Result<Ciphertext> {
        self.combine(a, b, RnsPoly::sub)
    }

    /// −a.
    pub fn neg(&self, a: &Ciphertext) -> Result<Ciphertext> {
        check(&self.params, a)?;
        Ok(a.map_polys(|p| Ok(p.neg()))?)
    }

    /// The sum of many ciphertexts, read in place (any iterator of
    /// references: nothing is copied but the first term). One accumulator;
    /// terms at its level and factor are added [`LAZY_TERMS`] at a time in
    /// one pass over it with a single reduction, others are matched first.
    pub fn add_many<'a>(
        &self,
        cts: impl IntoIterator<Item = &'a Ciphertext>,
    ) -> Result<Ciphertext> {
        let mut cts = cts.into_iter();
        let first = cts
            .next()
            .ok_or_else(|| BgvError::NotBgv("nothing to add".into()))?;
        check(&self.params, first)?;
        let mut acc = first.clone();
        let mut group: Vec<&Ciphertext> = Vec::with_capacity(LAZY_TERMS);
        for ct in cts {
            check(&self.params, ct)?;
            if ct.level() == acc.level()
                && ct.factor() == acc.factor()
                && ct.degree() == acc.degree()
            {
                group.push(ct);
                if group.len() == LAZY_TERMS {
                    acc = self.add_group(acc, &group)?;
                    group.clear();
                }
            } else {
                acc = self.add_group(acc, &group)?;
                group.clear();
                acc = self.add(&acc, ct)?;
            }
        }
        self.add_group(acc, &group)
    }

    /// `acc` plus `terms`, all of `acc`'s level, factor and degree.
    fn add_group(&self, mut acc: Ciphertext, terms: &[&Ciphertext]) -> Result<Ciphertext> {
        if terms.is_empty() {
            return Ok(acc);
        }
        let nm = self.params.noise();
        let noise = terms.iter().fold(acc.scale(), |n, t| nm.add(n, t.scale()));
        for t in terms {
            acc.join_key(t.key_id())?;
        }
        for (k, p) in acc.polys_mut().iter_mut().enumerate() {
            let polys: Vec<&RnsPoly> = terms.iter().map(|t| &t.polys()[k]).collect();
            add_lazy(p, &polys)?;
        }
        self.with_noise(acc, noise)
    }

    /// a + pt (slot-wise).
    pub fn add_plain(&self, a: &Ciphertext, pt: &Plaintext) -> Result<Ciphertext> {
        self.plain_term(a, pt, false)
    }

    /// a − pt (slot-wise).
    pub fn sub_plain(&self, a: &Ciphertext, pt: &Plaintext) -> Result<Ciphertext> {
        self.plain_term(a, pt, true)
    }

    fn plain_term(&self, a: &Ciphertext, pt: &Plaintext, sub: bool) -> Result<Ciphertext> {
        check(&self.params, a)?;
        let m = pt.lift(&self.params, a.level(), a.factor())?;
        let out = a.map_c0(|c0| {
            if sub {
                c0.sub(m.poly())
            } else {
                c0.add(m.poly())
            }
        })?;
        let noise = self.params.noise().add_plaintext(a.scale());
        self.with_noise(out, noise)
    }

    /// a + c in every slot.
    pub fn add_scalar(&self, a: &Ciphertext, c: u64) -> Result<Ciphertext> {
        check(&self.params, a)?;
        let t = self.params.t_modulus();
        let cf = t.center(t.mul(t.reduce(c), a.factor()));
        // A constant polynomial is the same value at every NTT point.
        let out = a.map_c0(|c0| {
            let cs: Vec<u64> = c0.basis().moduli().iter().map(|m| m.from_i64(cf)).collect();
            c0.add_rns_scalar(&cs)
        })?;
        let noise = self.params.noise().add_plaintext(a.scale());
        self.with_noise(out, noise)
    }

    /// a · c in every slot.
    pub fn mul_scalar(&self, a: &Ciphertext, c: u64) -> Result<Ciphertext> {
        check(&self.params, a)?;
        let t = self.params.t_modulus();
        let out = self.times(a, t.center(t.reduce(c)))?;
        let noise = out.scale();
        self.with_noise(out, noise)
    }

    /// a · pt (slot-wise).
    pub fn mul_plain(&self, a: &Ciphertext, pt: &Plaintext) -> Result<Ciphertext> {
        check(&self.params, a)?;
        let m = pt.lift(&self.params, a.level(), 1)?;
        let out = a.map_polys(|p| p.mul(m.poly()))?;
        let noise = self.params.noise().mul_plain(a.scale());
        self.with_noise(out, noise)
    }

    /// The degree-2 product a·b (levels and factors matched), before
    /// relinearization.
    pub fn mul(&self, a: &Ciphertext, b: &Ciphertext) -> Result<Ciphertext> {
        check(&self.params, a)?;
        check(&self.params, b)?;
        for ct in [a, b] {
            if ct.degree() != 1 {
                return Err(RlweError::CiphertextDegree {
                    expected: 1,
                    found: ct.degree(),
                }
                .into());
            }
        }
        let key = a.key_id().join(b.key_id())?;
        let level = a.level().min(b.level());
        let a = self.at_level(a, level)?;
        let b = self.at_level(b, level)?;
        let (x, y) = (a.polys(), b.polys());
        let d0 = x[0].mul(&y[0])?;
        let mut d1 = x[0].mul(&y[1])?;
        d1.mul_add_assign(&x[1], &y[0])?;
        let d2 = x[1].mul(&y[1])?;
        let mut out = Ciphertext::new(self.params.rlwe(), vec![d0, d1, d2], level, 1.0)?;
        out.set_key_id(key);
        let t = self.params.t_modulus();
        out.set_factor(t.mul(a.factor(), b.factor()));
        let noise = self.params.noise().mul(a.scale(), b.scale());
        self.with_noise(out, noise)
    }

    fn at_level<'a>(&self, ct: &'a Ciphertext, level: usize) -> Result<Cow<'a, Ciphertext>> {
        Ok(if ct.level() > level {
            Cow::Owned(self.mod_switch_to(ct, level)?)
        } else {
            Cow::Borrowed(ct)
        })
    }

    fn relin_key(&self) -> Result<&hecloud_rlwe::RelinearizationKey> {
        self.keys
            .relin
            .as_ref()
            .ok_or(RlweError::MissingRelinearizationKey.into())
    }

    /// Relinearizes a degree-2 ciphertext.
    pub fn relinearize(&self, a: &Ciphertext) -> Result<Ciphertext> {
        check(&self.params, a)?;
        let out = ops::relinearize(a, self.relin_key()?)?;
        let noise = self.params.noise_after_key_switch(a.scale(), a.level());
        self.with_noise(out, noise)
    }

    /// a·b relinearized, then switched one level down (fused with the key
    /// switch's division by P) when there is a level below: the noise comes
    /// back near the switching floor.
    pub fn mul_relin(&self, a: &Ciphertext, b: &Ciphertext) -> Result<Ciphertext> {
        let d = self.mul(a, b)?;
        if d.level() == 0 {
            return self.relinearize(&d);
        }
        let level = d.level();
        let params = self.params.rlwe();
        let p = d.polys();
        let rlk = &self.relin_key()?.0;
        rlk.check_operand(d.key_id())?;
        let ext = key_switch_ext(params, &p[2], rlk)?;
        let (c0, c1) =
            mod_down_rescale_pair_adding(params, level, [&ext.c0, &ext.c1], [&p[0], &p[1]])?;
        let mut out = Ciphertext::new(params, vec![c0, c1], level - 1, 1.0)?;
        out.set_key_id(d.key_id());
        out.set_factor(self.params.switched_factor(d.factor(), level)?);
        let noise = self.params.noise_after_mul_relin(d.scale(), level);
        self.with_noise(out, noise)
    }

    /// The estimated noise budget, in bits, that [`Evaluator::mul_relin`]
    /// of `a` and `b` would leave, without computing it: ≤ 0 when it would
    /// fail with [`BgvError::BudgetExhausted`] (at the degree-2 product or
    /// after the switch). For callers that refresh operands before a
    /// product rather than after a failed one.
    pub fn mul_relin_budget(&self, a: &Ciphertext, b: &Ciphertext) -> f64 {
        let p = &self.params;
        let level = a.level().min(b.level());
        let at_level = |ct: &Ciphertext| {
            (level + 1..=ct.level())
                .rev()
                .fold(ct.scale(), |noise, l| p.noise_after_mod_switch(noise, l))
        };
        let product = p.noise().mul(at_level(a), at_level(b));
        let before = p.budget_bits(level, product);
        let after = p.budget_bits(
            level.saturating_sub(1),
            p.noise_after_mul_relin(product, level),
        );
        before.min(after)
    }

    /// Switches one level down (divides by q_l, rounding to a multiple of
    /// t): the noise shrinks by q_l, the factor is multiplied by q_l⁻¹.
    pub fn mod_switch(&self, a: &Ciphertext) -> Result<Ciphertext> {
        check(&self.params, a)?;
        let level = a.level();
        if level == 0 {
            return Err(RlweError::LevelsExhausted { level, need: 1 }.into());
        }
        let params = self.params.rlwe();
        let polys = a
            .polys()
            .iter()
            .map(|c| mod_down_rescale(params, level, &lift_times_p(params, c)?))
            .collect::<hecloud_rlwe::Result<Vec<_>>>()?;
        let mut out = Ciphertext::new(params, polys, level - 1, 1.0)?;
        out.set_key_id(a.key_id());
        out.set_factor(self.params.switched_factor(a.factor(), level)?);
        let noise = self.params.noise_after_mod_switch(a.scale(), level);
        self.with_noise(out, noise)
    }

    /// Switches down to `level`.
    pub fn mod_switch_to(&self, a: &Ciphertext, level: usize) -> Result<Ciphertext> {
        if level > a.level() {
            return Err(RlweError::LevelOutOfRange {
                level,
                max: a.level(),
            }
            .into());
        }
        let mut out = a.clone();
        while out.level() > level {
            out = self.mod_switch(&out)?;
        }
        Ok(out)
    }

    fn galois(&self, a: &Ciphertext, g: usize, what: impl Fn() -> String) -> Result<Ciphertext> {
        check(&self.params, a)?;
        let gk = self
            .keys
            .galois
            .get(g)
            .map_err(|_| BgvError::MissingRotationKey(what()))?;
        let out = ops::apply_galois(a, gk)?;
        let noise = self.params.noise_after_key_switch(a.scale(), a.level());
        self.with_noise(out, noise)
    }

    /// Rotates both rows left by `k` (negative: right). Uses the key of
    /// `k` if there is one, else a chain of power-of-two rotations.
    pub fn rotate_rows(&self, a: &Ciphertext, k: i64) -> Result<Ciphertext> {
        let n = self.params.n();
        let half = (n / 2) as i64;
        let k = k.rem_euclid(half);
        if k == 0 {
            return Ok(a.clone());
        }
        let g = galois_element_for_rotation(k, n);
        if self.keys.galois.get(g).is_ok() {
            return self.galois(a, g, || format!("row rotation by {k}"));
        }
        // Left by k = Σ 2^j over the bits of k.
        let mut out = a.clone();
        for j in 0..64 {
            if k >> j & 1 == 1 {
                let step = 1i64 << j;
                let g = galois_element_for_rotation(step, n);
                out = self.galois(&out, g, || {
                    format!("row rotation by {k} (no key for it, nor for the power of two {step})")
                })?;
            }
        }
        Ok(out)
    }

    /// Swaps the two rows.
    pub fn rotate_columns(&self, a: &Ciphertext) -> Result<Ciphertext> {
        let g = galois_element_conjugate(self.params.n());
        self.galois(a, g, || "the column swap".into())
    }

    /// The sum of all N slots, in every slot: log2(N/2) row rotations and
    /// one column swap (the keys of [`crate::keys::power_of_two_rotations`]
    /// and the column swap).
    pub fn inner_sum(&self, a: &Ciphertext) -> Result<Ciphertext> {
        let mut acc = a.clone();
        let mut step = 1usize;
        while step < self.params.n() / 2 {
            let r = self.rotate_rows(&acc, step as i64)?;
            acc = self.add(&acc, &r)?;
            step *= 2;
        }
        let r = self.rotate_columns(&acc)?;
        self.add(&acc, &r)
    }
}
