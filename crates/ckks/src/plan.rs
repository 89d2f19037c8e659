//! Planning: the level, scale and degree each evaluator operation gives its
//! result, and the key switches and rescales it costs, from the operands'
//! shapes alone.
//!
//! This is the one home of those rules. The [`Evaluator`](crate::Evaluator)
//! asks the [`Planner`] before it does any arithmetic and takes its
//! result's level and scale from the plan, so a plan made without
//! ciphertexts (a job checked before it runs, a circuit sized before keys
//! exist) predicts the executed ciphertexts exactly, to the bit of the f64
//! scale. A scheme with other scale rules (BGV) gets its own planner over
//! the same [`CtShape`] and [`Step`].
//!
//! ```
//! use hecloud_ckks::{CkksParameters, params::test_literal};
//! use hecloud_ckks::plan::{CtShape, Planner};
//! let params = CkksParameters::new_insecure_for_tests(test_literal(10, 3), 45).unwrap();
//! let plan = Planner::new(&params);
//! let x = CtShape::new(3, params.default_scale());
//! let sq = plan.mul_relin_rescale(&x, &x).unwrap();
//! assert_eq!((sq.out.level, sq.key_switches, sq.rescales), (2, 1, 1));
//! assert_eq!(sq.out.scale, x.scale * x.scale / params.q_f64(3));
//! // x² + x: the scales agree within the tolerance, so the sum is allowed.
//! let sum = plan.add(&sq.out, &x).unwrap();
//! assert_eq!(sum.out.level, 2);
//! // x·x (not rescaled) + x: refused, as the evaluator would refuse it.
//! let raw = plan.mul(&x, &x).unwrap().out;
//! assert!(plan.add(&raw, &x).is_err());
//! ```

use hecloud_rlwe::keys::{galois_element_conjugate, galois_element_for_rotation};
use hecloud_rlwe::{Ciphertext, Plaintext, RlweError};

use crate::error::{CkksError, Result};
use crate::params::CkksParameters;
use crate::polynomial::{ChebyshevOps, ChebyshevPolynomial};

/// Relative difference below which two scales count as equal (the exact
/// prime-dependent scales of operands at the same depth differ by less).
pub const SCALE_TOLERANCE: f64 = 1e-6;

/// What the planner knows of a ciphertext: its level, exact scale and
/// degree (the rest of a ciphertext does not change what an operation may
/// do with it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CtShape {
    /// Level (number of primes − 1).
    pub level: usize,
    /// Exact scale.
    pub scale: f64,
    /// Degree: 1 normally, 2 after an unrelinearized product.
    pub degree: usize,
}

impl CtShape {
    /// A degree-1 ciphertext at `level` with `scale` (a fresh encryption).
    pub fn new(level: usize, scale: f64) -> Self {
        Self {
            level,
            scale,
            degree: 1,
        }
    }

    /// The shape of `ct`.
    pub fn of(ct: &Ciphertext) -> Self {
        Self {
            level: ct.level(),
            scale: ct.scale(),
            degree: ct.degree(),
        }
    }
}

/// What the planner knows of a plaintext: its level and exact scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PtShape {
    /// Level.
    pub level: usize,
    /// Exact scale.
    pub scale: f64,
}

impl PtShape {
    /// The shape of `pt`.
    pub fn of(pt: &Plaintext) -> Self {
        Self {
            level: pt.level(),
            scale: pt.scale(),
        }
    }
}

/// One planned operation: the shape of its result and what it costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// The result.
    pub out: CtShape,
    /// The level the operation works at: its key switches and rescales
    /// handle this many primes + 1, which is what their time depends on.
    pub level: usize,
    /// Key switches (relinearizations, rotations, conjugations).
    pub key_switches: u32,
    /// Rescales (divisions by the last prime).
    pub rescales: u32,
}

impl Step {
    /// An operation that costs neither key switch nor rescale.
    fn free(out: CtShape) -> Self {
        Self {
            out,
            level: out.level,
            key_switches: 0,
            rescales: 0,
        }
    }
}

/// The plan of a polynomial evaluation ([`Planner::chebyshev`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolynomialPlan {
    /// The result.
    pub out: CtShape,
    /// Levels the input needs ([`ChebyshevPolynomial::depth`]); the
    /// evaluation consumes at most this many (`input level − out.level`).
    pub depth: usize,
    /// Ciphertext products, each one relinearization (key switch).
    pub key_switches: u32,
    /// Rescales, those fused into the products included.
    pub rescales: u32,
}

/// Whether two scales agree within [`SCALE_TOLERANCE`] (what additions
/// need); the error names both as log2.
pub fn check_scales(a: f64, b: f64) -> Result<()> {
    if ((a - b) / a.max(b)).abs() > SCALE_TOLERANCE {
        return Err(CkksError::ScaleMismatch {
            left: a.log2(),
            right: b.log2(),
        });
    }
    Ok(())
}

/// Whether a constant product by `c` is one by an integer, which costs no
/// level ([`Planner::mul_const`]).
pub fn is_small_integer(c: f64) -> bool {
    c.fract() == 0.0 && c.abs() < 2f64.powi(62)
}

fn exhausted(level: usize) -> CkksError {
    RlweError::LevelsExhausted { level, need: 1 }.into()
}

fn need_degree(x: &CtShape, expected: usize) -> Result<()> {
    if x.degree != expected {
        return Err(RlweError::CiphertextDegree {
            expected,
            found: x.degree,
        }
        .into());
    }
    Ok(())
}

/// Plans evaluator operations for one parameter set: one method per
/// [`Evaluator`](crate::Evaluator) operation, taking the operands' shapes
/// and refusing exactly what the evaluator refuses (with the same
/// [`CkksError`]), except what only the bytes can tell: foreign parameters,
/// missing keys, constants too large to encode.
#[derive(Debug, Clone, Copy)]
pub struct Planner<'a> {
    params: &'a CkksParameters,
}

impl<'a> Planner<'a> {
    /// A planner for `params`.
    pub fn new(params: &'a CkksParameters) -> Self {
        Self { params }
    }

    /// The parameters.
    pub fn params(&self) -> &'a CkksParameters {
        self.params
    }

    /// a + b: the scales must agree; the result is at the lower level, with
    /// a's scale and the higher degree.
    pub fn add(&self, a: &CtShape, b: &CtShape) -> Result<Step> {
        check_scales(a.scale, b.scale)?;
        Ok(Step::free(CtShape {
            level: a.level.min(b.level),
            scale: a.scale,
            degree: a.degree.max(b.degree),
        }))
    }

    /// a − b: as [`Self::add`].
    pub fn sub(&self, a: &CtShape, b: &CtShape) -> Result<Step> {
        self.add(a, b)
    }

    /// −a: the shape is kept.
    pub fn neg(&self, a: &CtShape) -> Step {
        Step::free(*a)
    }

    /// ct + pt: the scales must agree and the plaintext must hold the
    /// ciphertext's primes (its level at least the ciphertext's).
    pub fn add_plain(&self, ct: &CtShape, pt: &PtShape) -> Result<Step> {
        check_scales(ct.scale, pt.scale)?;
        plain_covers(ct, pt)?;
        Ok(Step::free(*ct))
    }

    /// ct − pt: as [`Self::add_plain`].
    pub fn sub_plain(&self, ct: &CtShape, pt: &PtShape) -> Result<Step> {
        self.add_plain(ct, pt)
    }

    /// ct + c: the shape is kept (the constant is taken at the
    /// ciphertext's scale). Refused: a constant not representable there
    /// ([`Self::check_representable`]).
    pub fn add_const(&self, ct: &CtShape, c: f64) -> Result<Step> {
        self.check_representable(ct.level, ct.scale, c.abs())?;
        Ok(Step::free(*ct))
    }

    /// Refused with [`CkksError::ValueOutOfRange`] unless values up to
    /// `max_abs` at `scale` are representable at `level`: |v·scale| below
    /// Q_level / 2, beyond which a value wraps around the modulus and
    /// decrypts as another one, below 2^126, what encoding rounds through,
    /// and |v| below 2^54, what decoding reads
    /// ([`crate::DECODE_HEADROOM_BITS`]). What a constant added to a
    /// ciphertext, or a vector encoded at its level, must pass.
    pub fn check_representable(&self, level: usize, scale: f64, max_abs: f64) -> Result<()> {
        let log_q = self.params.rlwe().q_at(level)?.log_q();
        let v = max_abs * scale;
        if v.is_finite() && v.round() < crate::encoder::representable_bound(log_q, scale) {
            return Ok(());
        }
        Err(CkksError::ValueOutOfRange(format!(
            "a value of {max_abs} at scale 2^{:.1} exceeds the modulus at level {level} \
             (2^{log_q:.1}) or the decoding headroom (2^{}): it would decode as another value",
            scale.log2(),
            crate::DECODE_HEADROOM_BITS - 1.0,
        )))
    }

    /// ct · k for an integer k: the shape is kept. Refused with
    /// [`CkksError::ValueOutOfRange`] unless k itself is representable at
    /// the ciphertext's level and scale ([`Self::check_representable`]):
    /// beyond that, every input of magnitude 1 or more wraps around the
    /// modulus and decrypts as another value, and nothing after the
    /// product could tell.
    ///
    /// ```
    /// # use hecloud_ckks::{CkksParameters, params::test_literal, plan::{CtShape, Planner}};
    /// # let params = CkksParameters::new_insecure_for_tests(test_literal(10, 3), 45).unwrap();
    /// let plan = Planner::new(&params);
    /// let x = CtShape::new(0, params.default_scale());
    /// assert_eq!(plan.mul_int(&x, -3).unwrap().out, x);
    /// // q_0 is about 2^60: 2^20 · 2^45 does not fit below it.
    /// assert!(plan.mul_int(&x, 1 << 20).is_err());
    /// ```
    pub fn mul_int(&self, ct: &CtShape, k: i64) -> Result<Step> {
        self.check_representable(ct.level, ct.scale, k.unsigned_abs() as f64)?;
        Ok(Step::free(*ct))
    }

    /// ct · round(c·s): the scale is multiplied by s, nothing rescaled.
    pub fn mul_const_raw(&self, ct: &CtShape, s: f64) -> Step {
        Step::free(CtShape {
            scale: ct.scale * s,
            ..*ct
        })
    }

    /// ct · c: free for an integer ([`is_small_integer`], refused as
    /// [`Self::mul_int`] refuses it); any other
    /// constant is taken at scale q_l and rescaled away, one level for the
    /// same scale.
    ///
    /// ```
    /// # use hecloud_ckks::{CkksParameters, params::test_literal, plan::{CtShape, Planner}};
    /// # let params = CkksParameters::new_insecure_for_tests(test_literal(10, 3), 45).unwrap();
    /// let plan = Planner::new(&params);
    /// let x = CtShape::new(1, params.default_scale());
    /// assert_eq!(plan.mul_const(&x, -3.0).unwrap().out, x);
    /// let half = plan.mul_const(&x, 0.5).unwrap();
    /// assert_eq!((half.out.level, half.out.scale, half.rescales), (0, x.scale, 1));
    /// assert!(plan.mul_const(&half.out, 0.5).is_err()); // no level left
    /// ```
    pub fn mul_const(&self, ct: &CtShape, c: f64) -> Result<Step> {
        if is_small_integer(c) {
            return self.mul_int(ct, c as i64);
        }
        if ct.level == 0 {
            return Err(exhausted(0));
        }
        Ok(Step {
            out: CtShape {
                level: ct.level - 1,
                ..*ct
            },
            level: ct.level,
            key_switches: 0,
            rescales: 1,
        })
    }

    /// a ⊗ b, the tensor product: degree-1 operands; the result has degree
    /// 2, the lower level and the product of the scales.
    pub fn mul(&self, a: &CtShape, b: &CtShape) -> Result<Step> {
        need_degree(a, 1)?;
        need_degree(b, 1)?;
        Ok(Step::free(CtShape {
            level: a.level.min(b.level),
            scale: a.scale * b.scale,
            degree: 2,
        }))
    }

    /// ct · pt: the plaintext must hold the ciphertext's primes; the scales
    /// multiply, nothing rescaled.
    pub fn mul_plain(&self, ct: &CtShape, pt: &PtShape) -> Result<Step> {
        plain_covers(ct, pt)?;
        Ok(Step::free(CtShape {
            scale: ct.scale * pt.scale,
            ..*ct
        }))
    }

    /// Degree 2 → degree 1, one key switch.
    pub fn relinearize(&self, ct: &CtShape) -> Result<Step> {
        need_degree(ct, 2)?;
        Ok(Step {
            key_switches: 1,
            ..Step::free(CtShape { degree: 1, ..*ct })
        })
    }

    /// Division by the last prime q_l: one level down, the scale divided
    /// by q_l.
    pub fn rescale(&self, ct: &CtShape) -> Result<Step> {
        if ct.level == 0 {
            return Err(exhausted(0));
        }
        Ok(Step {
            out: CtShape {
                level: ct.level - 1,
                scale: ct.scale / self.params.q_f64(ct.level),
                degree: ct.degree,
            },
            level: ct.level,
            key_switches: 0,
            rescales: 1,
        })
    }

    /// [`Self::mul`], [`Self::relinearize`] and [`Self::rescale`] in one
    /// (the evaluator fuses them): the same result, one key switch and one
    /// rescale at the lower level of the operands, which must be above 0.
    pub fn mul_relin_rescale(&self, a: &CtShape, b: &CtShape) -> Result<Step> {
        let level = a.level.min(b.level);
        if level == 0 {
            return Err(exhausted(0));
        }
        let product = self.mul(a, b)?.out;
        Ok(Step {
            out: CtShape {
                level: level - 1,
                scale: product.scale / self.params.q_f64(level),
                degree: 1,
            },
            level,
            key_switches: 1,
            rescales: 1,
        })
    }

    /// ct reduced to `level` (limbs dropped, scale kept): no level can be
    /// gained.
    pub fn drop_level(&self, ct: &CtShape, level: usize) -> Result<Step> {
        if level > ct.level {
            return Err(RlweError::LevelOutOfRange {
                level,
                max: ct.level,
            }
            .into());
        }
        Ok(Step::free(CtShape { level, ..*ct }))
    }

    /// The Galois element whose key rotates by `k`; `None` where the
    /// rotation is the identity (k a multiple of the slot count).
    pub fn rotation_key(&self, k: i64) -> Option<usize> {
        let g = galois_element_for_rotation(k, self.params.n());
        (g != 1).then_some(g)
    }

    /// The Galois element whose key conjugates.
    pub fn conjugation_key(&self) -> usize {
        galois_element_conjugate(self.params.n())
    }

    /// Rotation of the slots by `k`: one key switch on a degree-1
    /// ciphertext, or nothing at all for the identity.
    pub fn rotate(&self, ct: &CtShape, k: i64) -> Result<Step> {
        if self.rotation_key(k).is_none() {
            return Ok(Step::free(*ct));
        }
        need_degree(ct, 1)?;
        Ok(Step {
            key_switches: 1,
            ..Step::free(*ct)
        })
    }

    /// Several rotations of one degree-1 ciphertext sharing one
    /// decomposition: a key switch for each rotation that is not the
    /// identity.
    pub fn rotate_hoisted(&self, ct: &CtShape, ks: &[i64]) -> Result<Step> {
        need_degree(ct, 1)?;
        let n = ks.iter().filter(|&&k| self.rotation_key(k).is_some());
        Ok(Step {
            key_switches: n.count() as u32,
            ..Step::free(*ct)
        })
    }

    /// Complex conjugation: one key switch on a degree-1 ciphertext.
    pub fn conjugate(&self, ct: &CtShape) -> Result<Step> {
        need_degree(ct, 1)?;
        Ok(Step {
            key_switches: 1,
            ..Step::free(*ct)
        })
    }

    /// The rotations of [`Self::rotate_and_sum`] over `n` slots, in the
    /// order they run: 1, 2, 4, …, n/2 (`n` a power of two no larger than
    /// the slot count).
    pub fn rotate_and_sum_steps(&self, n: usize) -> Result<impl Iterator<Item = i64> + use<>> {
        if !n.is_power_of_two() || n > self.params.slots() {
            return Err(CkksError::Slots(format!("rotate_and_sum over {n} slots")));
        }
        Ok((0..n.trailing_zeros()).map(|i| 1i64 << i))
    }

    /// Slot j ← Σ_{t < n} slot j + t: a rotation and an addition per
    /// [`Self::rotate_and_sum_steps`].
    pub fn rotate_and_sum(&self, ct: &CtShape, n: usize) -> Result<Step> {
        let mut plan = Step::free(*ct);
        for k in self.rotate_and_sum_steps(n)? {
            let r = self.rotate(&plan.out, k)?;
            plan.out = self.add(&plan.out, &r.out)?.out;
            plan.key_switches += r.key_switches;
        }
        Ok(plan)
    }

    /// Evaluation of `poly` on `ct` by the evaluator's baby-step
    /// giant-step schedule
    /// ([`Evaluator::evaluate_chebyshev`](crate::Evaluator::evaluate_chebyshev)),
    /// walked on shapes.
    ///
    /// ```
    /// # use hecloud_ckks::{CkksParameters, params::test_literal, plan::{CtShape, Planner}};
    /// use hecloud_ckks::polynomial::ChebyshevPolynomial;
    /// # let params = CkksParameters::new_insecure_for_tests(test_literal(10, 6), 45).unwrap();
    /// let p = ChebyshevPolynomial::interpolate(|x| x.sin(), 15, -1.0, 1.0);
    /// let x = CtShape::new(6, params.default_scale());
    /// let plan = Planner::new(&params).chebyshev(&x, &p).unwrap();
    /// assert_eq!(plan.depth, 4);
    /// assert_eq!(plan.out.level, 6 - plan.depth);
    /// assert!(plan.key_switches > 0);
    /// // One level short: refused, as the evaluator refuses it.
    /// assert!(Planner::new(&params).chebyshev(&CtShape::new(3, x.scale), &p).is_err());
    /// ```
    pub fn chebyshev(&self, ct: &CtShape, poly: &ChebyshevPolynomial) -> Result<PolynomialPlan> {
        let mut walk = ShapeWalk::new(*self);
        let out = poly.evaluate_with(&mut walk, ct)?;
        Ok(PolynomialPlan {
            out,
            depth: poly.depth(),
            key_switches: walk.key_switches,
            rescales: walk.rescales,
        })
    }
}

/// The plaintext must hold every prime of the ciphertext.
fn plain_covers(ct: &CtShape, pt: &PtShape) -> Result<()> {
    if pt.level < ct.level {
        return Err(RlweError::LevelMismatch {
            left: ct.level,
            right: pt.level,
        }
        .into());
    }
    Ok(())
}

/// The Chebyshev schedule on shapes, counting what it costs.
pub(crate) struct ShapeWalk<'a> {
    planner: Planner<'a>,
    key_switches: u32,
    rescales: u32,
}

impl<'a> ShapeWalk<'a> {
    /// A walk under `planner`'s parameters, with nothing counted yet.
    pub(crate) fn new(planner: Planner<'a>) -> Self {
        Self {
            planner,
            key_switches: 0,
            rescales: 0,
        }
    }
}

impl ShapeWalk<'_> {
    fn count(&mut self, step: Step) -> CtShape {
        self.key_switches += step.key_switches;
        self.rescales += step.rescales;
        step.out
    }
}

impl ChebyshevOps for ShapeWalk<'_> {
    type Value = CtShape;
    type Error = CkksError;

    fn level(&self, x: &CtShape) -> usize {
        x.level
    }

    fn scale(&self, x: &CtShape) -> f64 {
        x.scale
    }

    fn prime(&self, level: usize) -> f64 {
        self.planner.params.q_f64(level)
    }

    fn mul_const(&mut self, x: &CtShape, c: f64) -> Result<CtShape> {
        let s = self.planner.mul_const(x, c)?;
        Ok(self.count(s))
    }

    fn add_const(&mut self, x: &CtShape, c: f64) -> Result<CtShape> {
        Ok(self.planner.add_const(x, c)?.out)
    }

    fn mul_relin_rescale(&mut self, a: &CtShape, b: &CtShape) -> Result<CtShape> {
        let s = self.planner.mul_relin_rescale(a, b)?;
        Ok(self.count(s))
    }

    fn mul_int(&mut self, x: &CtShape, k: i64) -> Result<CtShape> {
        Ok(self.planner.mul_int(x, k)?.out)
    }

    fn add(&mut self, a: &CtShape, b: &CtShape) -> Result<CtShape> {
        Ok(self.planner.add(a, b)?.out)
    }

    fn sub(&mut self, a: &CtShape, b: &CtShape) -> Result<CtShape> {
        Ok(self.planner.sub(a, b)?.out)
    }

    fn drop_level(&mut self, x: &CtShape, level: usize) -> Result<CtShape> {
        Ok(self.planner.drop_level(x, level)?.out)
    }

    fn mul_const_raw(&mut self, x: &CtShape, _c: f64, s: f64) -> Result<CtShape> {
        Ok(self.planner.mul_const_raw(x, s).out)
    }

    fn rescale(&mut self, x: &CtShape) -> Result<CtShape> {
        let s = self.planner.rescale(x)?;
        Ok(self.count(s))
    }
}
