//! BGV nodes: the type of every BGV value (level, noise estimate, factor)
//! predicted step by step with the evaluator's own noise model
//! ([`hecloud_bgv::NoiseModel`]) and budget ([`BgvParameters::budget_bits`]),
//! walking exactly the operations [`hecloud_bgv::Evaluator`] performs
//! (level and factor matching, products relinearized and switched down,
//! rotations as chains of power-of-two keys, the baby-step giant-step
//! schedule of [`hecloud_bgv::poly::eval_poly`]), so that a graph whose
//! budget would run out is refused before it runs, at the node where it
//! would, and what validation predicts is what execution carries, to the
//! bit. The tests hold the two side by side.
//!
//! The packed-bit nodes (`BgvBits…`, bits in slots) run a whole circuit of
//! [`hecloud_circuits::packed::slots`] without a refresh (the server holds
//! no secret key; refresh over the wire is issue 24). They are not walked
//! product by product: their depth comes from
//! [`hecloud_circuits::packed::depth`] and is held against the products in
//! a row the operands survive under the same noise rules
//! ([`BgvParameters::noise_after_mul_relin`], as
//! [`BgvParameters::depth`] counts them for a fresh ciphertext), each
//! product at a level above q_0 since the circuit ends with additions and a
//! plaintext mask, and each after the first with the rotation and the
//! factor matching the circuits' gates add (`product_chain`). A circuit deeper than that is refused
//! ([`ValidationError::DepthExhausted`]) before it runs. Their result's
//! level (the operands' lowest level minus the depth) and factor (1, the
//! mask's) are exact; its noise is a pessimistic bound, which execution
//! writes into the result (see [`bits_output_noise`]).

use std::sync::Arc;

use hecloud_bgv::poly::LessThan;
use hecloud_bgv::{BgvParameters, FactorMatch};
use hecloud_circuits::packed::depth;
use hecloud_circuits::{MAX_WIDTH, MIN_WIDTH};
use hecloud_rlwe::keys::{galois_element_conjugate, galois_element_for_rotation};

use super::types::Checker;
use super::{VResult, ValueType};
use crate::error::ValidationError;
use crate::graph::{MAX_BGV_COMPARE_BOUND, Op};

/// What the evaluator carries of a BGV ciphertext.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shape {
    level: usize,
    noise: f64,
    factor: u64,
    degree: usize,
}

impl Shape {
    fn of(t: &ValueType) -> Option<Self> {
        match *t {
            ValueType::BgvCiphertext {
                level,
                noise,
                factor,
                degree,
            } => Some(Self {
                level,
                noise,
                factor,
                degree,
            }),
            _ => None,
        }
    }

    fn value(self) -> ValueType {
        ValueType::BgvCiphertext {
            level: self.level,
            noise: self.noise,
            factor: self.factor,
            degree: self.degree,
        }
    }
}

/// Whether `op` is a BGV operation (checked here).
pub(crate) fn is_bgv_op(op: &Op) -> bool {
    matches!(
        op,
        Op::BgvAdd(..)
            | Op::BgvSub(..)
            | Op::BgvNeg(_)
            | Op::BgvMul(..)
            | Op::BgvSum(_)
            | Op::BgvSlotSum(_)
            | Op::BgvRotateRows(..)
            | Op::BgvRotateColumns(_)
            | Op::BgvAddScalar(..)
            | Op::BgvMulScalar(..)
            | Op::BgvLessThan { .. }
            | Op::BgvModSwitch(..)
            | Op::BgvBitsAdd { .. }
            | Op::BgvBitsSum { .. }
            | Op::BgvBitsLessThan { .. }
            | Op::BgvBitsGreaterThan { .. }
            | Op::BgvRefresh(..)
    )
}

fn params(cx: &Checker<'_>) -> VResult<Arc<BgvParameters>> {
    let p = cx
        .caps
        .bgv
        .clone()
        .ok_or(ValidationError::SchemeUnavailable {
            node: cx.at().node,
            op: cx.at().op,
            scheme: "BGV",
        })?;
    // Every BGV operation here is slotwise (`BgvParamSpec::build` refuses
    // such a session; capabilities built by hand may still carry one).
    if p.slots().is_none() {
        return Err(cx.invalid(format!(
            "t = {} has no slots at N = {}: BGV operations are slotwise",
            p.t(),
            p.n()
        )));
    }
    Ok(p)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Checks a BGV job input's metadata against the parameters.
pub(super) fn check_input(
    cx: &Checker<'_>,
    k: u32,
    level: usize,
    noise: f64,
    factor: u64,
    degree: usize,
) -> VResult<()> {
    let p = params(cx)?;
    if level > p.max_level() || degree != 1 {
        return Err(cx.invalid(format!(
            "input {k}: a BGV ciphertext at level {level} of degree {degree} (degree 1 at level ≤ {} accepted)",
            p.max_level()
        )));
    }
    // No ciphertext is below the noise model's floor (a fresh encryption's
    // or a modulus switch's rounding, both above t/2): a lower estimate
    // would let a graph run past the budget and decrypt wrongly.
    let floor = p.noise().fresh_sk().min(p.noise().switching_floor());
    if !(noise.is_finite() && noise >= floor) {
        return Err(cx.invalid(format!(
            "input {k}: noise estimate 2^{noise} is below any ciphertext's 2^{floor:.1}"
        )));
    }
    let t = p.t();
    if factor == 0 || factor >= t || gcd(factor, t) != 1 {
        return Err(cx.invalid(format!("input {k}: factor {factor} is not a unit mod {t}")));
    }
    if !p.has_budget(level, noise) {
        return Err(ValidationError::BudgetExhausted {
            node: cx.at().node,
            op: cx.at().op,
            level,
            budget_bits: p.budget_bits(level, noise),
        });
    }
    Ok(())
}

/// The type of a BGV node from its operands' types.
pub(super) fn check(cx: &mut Checker<'_>, op: &Op, args: &[&ValueType]) -> VResult<ValueType> {
    let p = params(cx)?;
    let shapes: Vec<Shape> = match args.iter().map(|t| Shape::of(t)).collect::<Option<_>>() {
        Some(s) => s,
        None => return Err(cx.mismatch(args, "BGV ciphertexts")),
    };
    if shapes.iter().any(|s| s.degree != 1) {
        return Err(cx.mismatch(args, "degree-1 BGV ciphertexts"));
    }
    let mut sim = Sim { cx, p };
    let out = match op {
        Op::BgvAdd(..) | Op::BgvSub(..) => sim.combine(shapes[0], shapes[1])?,
        Op::BgvNeg(_) => shapes[0],
        Op::BgvMul(..) => sim.mul_relin(shapes[0], shapes[1])?,
        Op::BgvSum(_) => {
            if shapes.is_empty() {
                return Err(sim.cx.invalid("a sum of no operands"));
            }
            sim.add_many(&shapes)?
        }
        Op::BgvSlotSum(_) => sim.inner_sum(shapes[0])?,
        Op::BgvRotateRows(_, k) => sim.rotate_rows(shapes[0], *k)?,
        Op::BgvRotateColumns(_) => sim.rotate_columns(shapes[0])?,
        Op::BgvAddScalar(_, c) => {
            sim.scalar_below_t(*c)?;
            sim.add_scalar(shapes[0])?
        }
        Op::BgvMulScalar(_, c) => {
            sim.scalar_below_t(*c)?;
            sim.mul_scalar(shapes[0], *c)?
        }
        Op::BgvLessThan { bound, .. } => {
            if *bound > MAX_BGV_COMPARE_BOUND {
                return Err(sim.cx.invalid(format!(
                    "values below {bound} (a bound up to {MAX_BGV_COMPARE_BOUND} accepted)"
                )));
            }
            let lt = LessThan::new(&sim.p, *bound).map_err(|e| sim.cx.invalid(e.to_string()))?;
            let diff = sim.combine(shapes[0], shapes[1])?;
            sim.eval_poly(diff, lt.coefficients())?
        }
        Op::BgvModSwitch(_, level) => sim.mod_switch_to(shapes[0], *level as usize)?,
        Op::BgvRefresh(_, target) => sim.refresh(shapes[0], *target as usize)?,
        Op::BgvBitsAdd { width, .. } | Op::BgvBitsSum { width, .. } => {
            sim.bits(true, *width, &shapes)?
        }
        Op::BgvBitsLessThan { width, .. } | Op::BgvBitsGreaterThan { width, .. } => {
            sim.bits(false, *width, &shapes)?
        }
        _ => return Err(sim.cx.invalid("not a BGV operation")),
    };
    Ok(out.value())
}

/// log2 of the largest constant (centered mod t, up to (t − 1)/2) the
/// evaluator may multiply an operand by to match the factors of two
/// operands of an addition ([`BgvParameters::match_factors`]): inside a
/// packed-bit circuit, values reach one level along paths of different
/// products and modulus switches, so their factors differ.
fn factor_match_bits(p: &BgvParameters) -> f64 {
    p.noise().mul_scalar(0.0, (p.t() - 1) / 2)
}

/// The noise, under the BGV noise model, after each product of a chain
/// from a ciphertext at `level` of noise `noise`: entry d − 1 is the noise
/// after d products in a row (at level `level` − d). The circuits' first
/// products take the operands as they come (with the worst factor match
/// unless `same_factor`: operands of one factor); every later product
/// takes one operand through a key switch (a rotation) and the worst factor
/// match ([`factor_match_bits`]), the other through a key switch. The chain stops
/// at the first product that would exhaust the budget, that would run at
/// level 0 (a packed-bit circuit adds and masks after its last product,
/// which a product at level 0 leaves no room for), or whose result the
/// final mask (after one more factor match and addition) would exhaust. A
/// pessimistic walk: where the real circuits leave 3 to 5 bits at q_0 (50-
/// or 36-bit primes above it), it stops a level earlier on 36-bit primes;
/// the tests hold it against the circuits run without a refresher.
pub(crate) fn product_chain(
    p: &BgvParameters,
    level: usize,
    noise: f64,
    same_factor: bool,
) -> Vec<f64> {
    let nm = p.noise();
    let slack = factor_match_bits(p);
    let mut out = Vec::new();
    let (mut l, mut n) = (level, noise);
    while l >= 1 {
        let product = if out.is_empty() {
            nm.mul(if same_factor { n } else { n + slack }, n)
        } else {
            let rotated = p.noise_after_key_switch(n, l);
            nm.mul(rotated + slack, rotated)
        };
        if !p.has_budget(l, product) {
            break;
        }
        let after = p.noise_after_mul_relin(product, l);
        if !p.has_budget(l - 1, after) || !p.has_budget(l - 1, nm.mul_plain(after + slack + 1.0)) {
            break;
        }
        l -= 1;
        n = after;
        out.push(n);
    }
    out
}

/// The noise written into the result of a packed-bit node whose last
/// product left `noise` at `level`: the chain's noise through one more key
/// switch, the worst factor match of the gates' additions and the final
/// plaintext mask — but no more than leaves the evaluator's minimum
/// (`BgvParameters::MIN_BUDGET_BITS`), since the
/// depth check has admitted the circuit. A bound (the circuits' own
/// estimates stay below it in the tests); execution raises the result's
/// estimate to it, so that what follows the node is predicted exactly as
/// it runs.
pub(crate) fn bits_output_noise(p: &BgvParameters, level: usize, noise: f64) -> f64 {
    let matched = p.noise_after_key_switch(noise, level) + factor_match_bits(p) + 1.0;
    p.noise()
        .mul_plain(matched)
        .min(p.log_q_at(level) - 1.0 - BgvParameters::MIN_BUDGET_BITS)
}

/// The evaluator's steps on shapes: each costed, its noise estimated as the
/// evaluator estimates it, and refused where the evaluator would refuse.
struct Sim<'c, 'a> {
    cx: &'c mut Checker<'a>,
    p: Arc<BgvParameters>,
}

impl Sim<'_, '_> {
    fn scalar_below_t(&self, c: u64) -> VResult<()> {
        if c >= self.p.t() {
            return Err(self.cx.invalid(format!(
                "scalar {c} does not fit the plaintext modulus t = {}",
                self.p.t()
            )));
        }
        Ok(())
    }

    /// `s` with noise `noise`, refused when no budget would be left
    /// (`Evaluator::with_noise`).
    fn with_noise(&self, mut s: Shape, noise: f64) -> VResult<Shape> {
        if !self.p.has_budget(s.level, noise) {
            return Err(ValidationError::BudgetExhausted {
                node: self.cx.at().node,
                op: self.cx.at().op,
                level: s.level,
                budget_bits: self.p.budget_bits(s.level, noise),
            });
        }
        s.noise = noise;
        Ok(s)
    }

    /// `s` times the signed constant `c` (`Evaluator::times`).
    fn times(&mut self, s: Shape, c: i64) -> Shape {
        self.cx.meter.bgv_pointwise(s.level, s.degree + 1);
        Shape {
            noise: self.p.noise().mul_scalar(s.noise, c.unsigned_abs()),
            ..s
        }
    }

    fn switched_factor(&self, factor: u64, level: usize) -> VResult<u64> {
        self.p
            .switched_factor(factor, level)
            .map_err(|e| self.cx.invalid(e.to_string()))
    }

    fn mod_switch(&mut self, s: Shape) -> VResult<Shape> {
        if s.level == 0 {
            return Err(self.cx.at().exhausted(0, 1));
        }
        self.cx.meter.bgv_mod_switch(s.level, s.degree + 1);
        let out = Shape {
            level: s.level - 1,
            factor: self.switched_factor(s.factor, s.level)?,
            ..s
        };
        let noise = self.p.noise_after_mod_switch(s.noise, s.level);
        self.with_noise(out, noise)
    }

    fn mod_switch_to(&mut self, s: Shape, level: usize) -> VResult<Shape> {
        if level > s.level {
            return Err(self.cx.invalid(format!(
                "cannot switch a ciphertext from level {} up to {level}",
                s.level
            )));
        }
        let mut out = s;
        while out.level > level {
            out = self.mod_switch(out)?;
        }
        Ok(out)
    }

    /// One level and one factor (`Evaluator::matched`).
    fn matched(&mut self, a: Shape, b: Shape) -> VResult<(Shape, Shape)> {
        let level = a.level.min(b.level);
        let mut a = if a.level > level {
            self.mod_switch_to(a, level)?
        } else {
            a
        };
        let mut b = if b.level > level {
            self.mod_switch_to(b, level)?
        } else {
            b
        };
        if a.factor != b.factor {
            let rule = self
                .p
                .match_factors((a.factor, a.noise), (b.factor, b.noise))
                .map_err(|e| self.cx.invalid(e.to_string()))?;
            match rule {
                FactorMatch::ScaleB(k) => {
                    let mut nb = self.times(b, k);
                    nb.factor = a.factor;
                    b = nb;
                }
                FactorMatch::ScaleA(k) => {
                    let mut na = self.times(a, k);
                    na.factor = b.factor;
                    a = na;
                }
            }
        }
        Ok((a, b))
    }

    /// a ± b (`Evaluator::combine`).
    fn combine(&mut self, a: Shape, b: Shape) -> VResult<Shape> {
        let (a, b) = self.matched(a, b)?;
        let noise = self.p.noise().add(a.noise, b.noise);
        let out = Shape {
            degree: a.degree.max(b.degree),
            ..a
        };
        self.cx.meter.bgv_pointwise(out.level, out.degree + 1);
        self.with_noise(out, noise)
    }

    fn add_many(&mut self, xs: &[Shape]) -> VResult<Shape> {
        let Some((first, rest)) = xs.split_first() else {
            return Err(self.cx.invalid("nothing to add"));
        };
        let mut acc = *first;
        for ct in rest {
            if ct.level == acc.level && ct.factor == acc.factor && ct.degree == acc.degree {
                let noise = self.p.noise().add(acc.noise, ct.noise);
                self.cx.meter.bgv_pointwise(acc.level, acc.degree + 1);
                acc = self.with_noise(acc, noise)?;
            } else {
                acc = self.combine(acc, *ct)?;
            }
        }
        Ok(acc)
    }

    /// A refresh (`protocol::refresh`, `packed::RefreshMask`): switched to
    /// level 0, re-randomized by a public-key encryption of zero and masked
    /// there (each refused without budget, as the evaluator refuses), then
    /// the key holder's fresh secret-key encryption at `target` minus the
    /// mask.
    fn refresh(&mut self, s: Shape, target: usize) -> VResult<Shape> {
        let refused = |cx: &Checker<'_>, reason: String| ValidationError::RefreshRefused {
            node: cx.at().node,
            op: cx.at().op,
            reason,
        };
        if !self.cx.caps.refresh_bgv {
            return Err(refused(
                self.cx,
                "the session has no refresh part with a BGV public key".into(),
            ));
        }
        if target > self.p.max_level() {
            return Err(refused(
                self.cx,
                format!(
                    "target level {target} above the top level {}",
                    self.p.max_level()
                ),
            ));
        }
        // Sent at level 0, or with flooding at the lowest level whose
        // modulus holds the flood.
        let policy = self.cx.caps.bgv_mask_policy;
        let send = match policy.lowest_level(&self.p) {
            Some(l) if s.level >= l => l,
            _ => {
                let why = policy
                    .check_level(&self.p, s.level)
                    .err()
                    .map_or_else(|| "no level holds the flood".into(), |e| e.to_string());
                return Err(refused(self.cx, why));
            }
        };
        let low = self.mod_switch_to(s, send)?;
        let zero = Shape {
            noise: self.p.noise().fresh_pk(),
            ..low
        };
        let masked = self.combine(low, zero)?;
        self.add_scalar(masked)?;
        self.cx.needs.refresh_bgv = true;
        self.cx.meter.refresh(self.p.rlwe(), send, target);
        let fresh = Shape {
            level: target,
            noise: self.p.noise().fresh_sk(),
            factor: 1,
            degree: 1,
        };
        self.add_scalar(fresh)
    }

    fn add_scalar(&mut self, a: Shape) -> VResult<Shape> {
        let noise = self.p.noise().add_plaintext(a.noise);
        self.cx.meter.bgv_pointwise(a.level, 1);
        self.with_noise(a, noise)
    }

    fn mul_scalar(&mut self, a: Shape, c: u64) -> VResult<Shape> {
        let t = self.p.t_modulus();
        let c = t.center(t.reduce(c));
        let out = self.times(a, c);
        self.with_noise(out, out.noise)
    }

    /// The degree-2 product (`Evaluator::mul`).
    fn mul(&mut self, a: Shape, b: Shape) -> VResult<Shape> {
        let level = a.level.min(b.level);
        let a = self.mod_switch_to(a, level)?;
        let b = self.mod_switch_to(b, level)?;
        self.cx.meter.bgv_pointwise(level, 4);
        let t = self.p.t_modulus();
        let out = Shape {
            level,
            noise: 0.0,
            factor: t.mul(a.factor, b.factor),
            degree: 2,
        };
        let noise = self.p.noise().mul(a.noise, b.noise);
        self.with_noise(out, noise)
    }

    fn need_relin(&mut self) -> VResult<()> {
        if !self.cx.caps.bgv_relin_key {
            return Err(ValidationError::MissingRelinKey {
                node: self.cx.at().node,
                op: self.cx.at().op,
            });
        }
        self.cx.needs.bgv_relin_key = true;
        Ok(())
    }

    /// a·b relinearized and switched one level down
    /// (`Evaluator::mul_relin`).
    fn mul_relin(&mut self, a: Shape, b: Shape) -> VResult<Shape> {
        self.need_relin()?;
        let d = self.mul(a, b)?;
        let noise = self.p.noise_after_mul_relin(d.noise, d.level);
        if d.level == 0 {
            self.cx.meter.bgv_key_switch(0);
            return self.with_noise(Shape { degree: 1, ..d }, noise);
        }
        let level = d.level;
        self.cx.meter.bgv_key_switch(level);
        self.cx.meter.bgv_mod_switch(level, 2);
        let out = Shape {
            level: level - 1,
            noise: 0.0,
            factor: self.switched_factor(d.factor, level)?,
            degree: 1,
        };
        self.with_noise(out, noise)
    }

    /// One key switch by the Galois key of `g` (`Evaluator::galois`).
    fn galois(&mut self, a: Shape, g: usize, what: impl Fn() -> String) -> VResult<Shape> {
        if !self.cx.caps.bgv_galois_elements.contains(&g) {
            return Err(ValidationError::MissingGaloisKey {
                node: self.cx.at().node,
                op: self.cx.at().op,
                what: what(),
                element: g,
            });
        }
        self.cx.needs.bgv_galois.insert(g);
        self.cx.meter.bgv_key_switch(a.level);
        let noise = self.p.noise_after_key_switch(a.noise, a.level);
        self.with_noise(a, noise)
    }

    fn rotate_rows(&mut self, a: Shape, k: i64) -> VResult<Shape> {
        let n = self.p.n();
        let half = (n / 2) as i64;
        let k = k.rem_euclid(half);
        if k == 0 {
            return Ok(a);
        }
        let g = galois_element_for_rotation(k, n);
        if self.cx.caps.bgv_galois_elements.contains(&g) {
            return self.galois(a, g, || format!("row rotation by {k}"));
        }
        let mut out = a;
        for j in 0..64 {
            if k >> j & 1 == 1 {
                let step = 1i64 << j;
                let g = galois_element_for_rotation(step, n);
                out = self.galois(out, g, || {
                    format!("row rotation by {k} (no key for it, nor for the power of two {step})")
                })?;
            }
        }
        Ok(out)
    }

    fn rotate_columns(&mut self, a: Shape) -> VResult<Shape> {
        let g = galois_element_conjugate(self.p.n());
        self.galois(a, g, || "the column swap".into())
    }

    fn inner_sum(&mut self, a: Shape) -> VResult<Shape> {
        let mut acc = a;
        let mut step = 1usize;
        while step < self.p.n() / 2 {
            let r = self.rotate_rows(acc, step as i64)?;
            acc = self.combine(acc, r)?;
            step *= 2;
        }
        let r = self.rotate_columns(acc)?;
        self.combine(acc, r)
    }

    /// A packed-bit circuit on bits-in-slots numbers of `width` bits: a sum
    /// (`sum`: [`Op::BgvBitsAdd`], [`Op::BgvBitsSum`]) or a comparison.
    /// Refuses a width outside 2..=1024, a sum of fewer than two, a row too
    /// short, a missing relinearization key or Galois key of a rotation the
    /// circuit performs, and a depth the operands do not allow; the result
    /// at the operands' lowest level minus the depth, factor 1.
    fn bits(&mut self, sum: bool, width: u32, xs: &[Shape]) -> VResult<Shape> {
        let w = width as usize;
        if !(MIN_WIDTH..=MAX_WIDTH).contains(&w) {
            return Err(self.cx.invalid(format!(
                "width {width} (bits-in-slots numbers of {MIN_WIDTH}..={MAX_WIDTH} bits accepted)"
            )));
        }
        let n = xs.len();
        if sum && n < 2 {
            return Err(self
                .cx
                .invalid("a bits-in-slots sum of fewer than two numbers"));
        }
        let (need, row_need, rotations) = if sum {
            (
                depth::sum(n, w),
                depth::sum_row_need(n, w),
                depth::sum_rotations(w),
            )
        } else {
            (depth::lt(w), depth::lt_row_need(w), depth::lt_rotations(w))
        };
        let row = self.p.row_size();
        if row_need > row {
            return Err(ValidationError::RowTooShort {
                node: self.cx.at().node,
                op: self.cx.at().op,
                need: row_need,
                row,
            });
        }
        self.need_relin()?;
        let level = xs.iter().map(|s| s.level).min().unwrap_or(0);
        let mut noise = f64::MIN;
        let mut base = xs[0];
        let mut factors = Vec::with_capacity(n);
        for &x in xs {
            let s = self.mod_switch_to(x, level)?;
            noise = noise.max(s.noise);
            factors.push(s.factor);
            base = s;
        }
        let same_factor = factors.iter().all(|&f| f == factors[0]);
        // Each rotation once: the keys checked, one key switch costed.
        for &k in &rotations {
            let g = galois_element_for_rotation(k, self.p.n());
            self.galois(base, g, || {
                format!("row rotation right by {} (bits in slots)", -k)
            })?;
        }
        let chain = product_chain(&self.p, level, noise, same_factor);
        let available = chain.len();
        if need > available {
            return Err(ValidationError::DepthExhausted {
                node: self.cx.at().node,
                op: self.cx.at().op,
                need,
                available,
            });
        }
        // Cost: the circuit's products and rotations, all costed at the
        // operands' level (an upper bound).
        let rounds = rotations.len() as u64;
        let (products, rots) = if sum {
            let adders = (n - 2) as u64;
            (2 * adders + 2 * rounds + 1, adders + 2 * rounds)
        } else {
            (2 * rounds, 2 * rounds - 1)
        };
        for _ in 0..products {
            self.cx.meter.bgv_pointwise(level, 4);
            self.cx.meter.bgv_key_switch(level);
            self.cx.meter.bgv_mod_switch(level, 2);
        }
        for _ in 0..rots {
            self.cx.meter.bgv_key_switch(level);
        }
        self.cx.meter.bgv_pointwise(level - need, 2);
        let out_level = level - need;
        Ok(Shape {
            level: out_level,
            noise: bits_output_noise(&self.p, out_level, chain[need - 1]),
            factor: 1,
            degree: 1,
        })
    }

    /// `hecloud_bgv::poly::eval_poly` on shapes.
    fn eval_poly(&mut self, z: Shape, coeffs: &[u64]) -> VResult<Shape> {
        let d = coeffs.iter().rposition(|&c| c != 0).unwrap_or(0);
        let k = (((d + 1) as f64).sqrt().ceil() as usize)
            .next_power_of_two()
            .max(2);
        let mut baby: Vec<Shape> = vec![z];
        for i in 2..=k.min(d.max(1)) {
            let (a, b) = (i.div_ceil(2), i / 2);
            let p = self.mul_relin(baby[a - 1], baby[b - 1])?;
            baby.push(p);
        }
        let floor = baby.iter().map(|s| s.level).min().unwrap_or(0);
        let baby = baby
            .into_iter()
            .map(|c| self.mod_switch_to(c, floor))
            .collect::<VResult<Vec<_>>>()?;
        let mut giant: Vec<Shape> = Vec::new();
        if d >= k {
            let mut g = baby[k - 1];
            let mut span = k;
            while span <= d {
                giant.push(g);
                span *= 2;
                if span <= d {
                    g = self.mul_relin(g, g)?;
                }
            }
        }
        self.split(&baby, &giant, k, &coeffs[..=d])
    }

    fn split(
        &mut self,
        baby: &[Shape],
        giant: &[Shape],
        k: usize,
        coeffs: &[u64],
    ) -> VResult<Shape> {
        if coeffs.len() <= k {
            return self.leaf(baby, coeffs);
        }
        let j = (0..giant.len())
            .rev()
            .find(|&j| k << j < coeffs.len())
            .ok_or_else(|| self.cx.invalid("polynomial split without a giant step"))?;
        let m = k << j;
        let low = self.split(baby, giant, k, &coeffs[..m])?;
        let high = self.split(baby, giant, k, &coeffs[m..])?;
        let top = self.mul_relin(giant[j], high)?;
        self.combine(top, low)
    }

    fn leaf(&mut self, baby: &[Shape], coeffs: &[u64]) -> VResult<Shape> {
        let terms = coeffs[1..]
            .iter()
            .zip(baby)
            .filter(|(c, _)| **c != 0)
            .map(|(&c, z)| self.mul_scalar(*z, c))
            .collect::<VResult<Vec<_>>>()?;
        let sum = if terms.is_empty() {
            self.mul_scalar(baby[0], 0)?
        } else {
            self.add_many(&terms)?
        };
        if coeffs[0] == 0 {
            Ok(sum)
        } else {
            self.add_scalar(sum)
        }
    }
}
