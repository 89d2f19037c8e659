//! Type inference: the type of every node from its operands', with CKKS
//! levels and scales from the evaluator's own planner
//! ([`hecloud_ckks::plan`]), so what validation predicts is what execution
//! produces; the evaluation keys each node needs; and the policies the
//! evaluator does not enforce: scales that neither overflow the modulus
//! nor drown in the noise, clear values small enough to encode, protocol
//! limits on arguments.

use std::collections::BTreeSet;
use std::sync::Arc;

use hecloud_bgv::BgvParameters;
use hecloud_circuits::{MAX_WIDTH, MIN_WIDTH};
use hecloud_ckks::plan::{CtShape, Planner, PtShape, Step};
use hecloud_ckks::polynomial::{ChebyshevOps, ChebyshevPolynomial};
use hecloud_ckks::{CkksError, CkksParameters};
use hecloud_rlwe::RlweError;
use hecloud_rlwe::keys::{galois_element_conjugate, galois_element_for_rotation};

use super::cost::{Circuit, MAX_CIRCUIT_BITS, Meter};
use super::{At, Needs, VResult};
use crate::error::ValidationError;
use crate::graph::{MAX_CHEBYSHEV_COEFFS, MAX_PLAIN_LEN, MAX_SUM_OPERANDS, NodeId, Op};

/// Smallest log2 of a ciphertext scale accepted: below it the message
/// drowns in the noise (a ciphertext rescaled once too often).
pub const MIN_LOG_SCALE: f64 = 20.0;
/// Why a job may not leave a ciphertext at `level`, below `checked`
/// ([`CkksParameters::checked_decoding_level`]): with no prime above those
/// decoding reads, a value that outgrew the headroom would wrap and decode
/// as another number, silently. Validation refuses the drops and refresh
/// targets that would do that; a computation that uses its levels up
/// reaches such a level on its own, and is not refused.
fn unchecked_level(level: usize, checked: usize) -> String {
    format!(
        "level {level} leaves decoding no prime to check the values against (a value \
         beyond the headroom would decode as another); level {checked} is the lowest \
         that keeps one"
    )
}

/// The type of a value flowing along the graph's edges.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueType {
    /// A CKKS ciphertext.
    CkksCiphertext {
        /// Level (number of primes − 1).
        level: usize,
        /// Exact scale.
        scale: f64,
        /// Degree (1 normally, 2 after an unrelinearized product).
        degree: usize,
    },
    /// An encoded CKKS plaintext (an input object).
    CkksPlaintext {
        /// Level.
        level: usize,
        /// Scale.
        scale: f64,
    },
    /// A real constant.
    Constant(f64),
    /// A clear vector of `len` reals (encoded when used).
    Plain {
        /// Number of values.
        len: usize,
        /// Largest magnitude among them.
        max_abs: f64,
    },
    /// An encrypted unsigned integer (TFHE).
    Uint {
        /// Width in bits.
        width: usize,
    },
    /// One encrypted bit (TFHE).
    Bit,
    /// A BGV ciphertext of a vector of integers mod t, with the metadata
    /// the evaluator carries: validation predicts all of it exactly.
    BgvCiphertext {
        /// Level (number of primes − 1).
        level: usize,
        /// log2 of the estimated noise bound (the evaluator's noise model).
        noise: f64,
        /// The factor (a unit of Z_t) the message is multiplied by.
        factor: u64,
        /// Degree (1 normally).
        degree: usize,
    },
}

impl ValueType {
    fn describe(&self) -> String {
        match self {
            ValueType::CkksCiphertext {
                level,
                scale,
                degree,
            } => format!(
                "CKKS ciphertext (level {level}, scale 2^{:.2}, degree {degree})",
                scale.log2()
            ),
            ValueType::CkksPlaintext { level, scale } => {
                format!(
                    "CKKS plaintext (level {level}, scale 2^{:.2})",
                    scale.log2()
                )
            }
            ValueType::Constant(c) => format!("constant {c}"),
            ValueType::Plain { len, .. } => format!("clear vector of {len} values"),
            ValueType::Uint { width } => format!("{width}-bit encrypted integer"),
            ValueType::Bit => "encrypted bit".into(),
            ValueType::BgvCiphertext { level, noise, .. } => {
                format!("BGV ciphertext (level {level}, noise 2^{noise:.1})")
            }
        }
    }
}

/// What a session offers a graph: the CKKS parameters, which evaluation keys
/// are present, whether a TFHE server key is.
#[derive(Debug, Clone, Default)]
pub struct Capabilities {
    /// CKKS parameters (None: no CKKS in this session).
    pub ckks: Option<Arc<CkksParameters>>,
    /// Whether the relinearization key is present.
    pub relin_key: bool,
    /// Galois elements with a key.
    pub galois_elements: BTreeSet<usize>,
    /// Whether the TFHE server key is present.
    pub tfhe_server_key: bool,
    /// BGV parameters (None: no BGV in this session).
    pub bgv: Option<Arc<BgvParameters>>,
    /// Whether the BGV relinearization key is present.
    pub bgv_relin_key: bool,
    /// Galois elements with a BGV Galois key.
    pub bgv_galois_elements: BTreeSet<usize>,
    /// Whether CKKS refresh nodes can run (the session names a CKKS public
    /// key to re-randomize with; a key holder must answer at run time).
    pub refresh_ckks: bool,
    /// Whether BGV refresh nodes can run (a BGV public key).
    pub refresh_bgv: bool,
    /// The CKKS mask policy refreshes use (its headroom decides the lowest
    /// level a refresh accepts).
    pub mask_policy: hecloud_ckks::refresh::MaskPolicy,
    /// The BGV refreshes' flooding (it decides the level a masked
    /// ciphertext is sent at, and the lowest a refresh accepts).
    pub bgv_mask_policy: hecloud_circuits::packed::BgvMaskPolicy,
    /// Whether bootstrap nodes can run, and what they do.
    pub bootstrap: Option<BootstrapCaps>,
    /// The slots a CKKS vector holds when the session packs them sparsely
    /// (its bootstrapping circuit's, below N/2); `None`: N/2. Vectors and
    /// slot sums are bounded by it.
    pub sparse_slots: Option<usize>,
}

/// What a session's bootstrapping offers a graph
/// ([`crate::Op::Bootstrap`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BootstrapCaps {
    /// The level of a bootstrapped ciphertext (at the default scale).
    pub output_level: usize,
    /// The largest operand scale accepted: q₀/2^ratio.
    pub max_input_scale: f64,
    /// Whether the planner bootstraps rather than refreshes even where a
    /// refresh part exists.
    pub prefer_over_refresh: bool,
    /// Key switches one bootstrapping runs (the cost estimate's unit).
    pub key_switches: usize,
}

impl Capabilities {
    /// CKKS with no evaluation key yet.
    pub fn ckks(params: &Arc<CkksParameters>) -> Self {
        Self {
            ckks: Some(params.clone()),
            ..Self::default()
        }
    }

    /// TFHE with the server key.
    pub fn tfhe() -> Self {
        Self {
            tfhe_server_key: true,
            ..Self::default()
        }
    }

    /// CKKS vectors of `slots` slots (a sparse packing).
    pub fn with_sparse_slots(mut self, slots: usize) -> Self {
        self.sparse_slots = Some(slots);
        self
    }

    /// The slots a CKKS vector holds under these capabilities.
    pub fn ckks_slots(&self) -> Option<usize> {
        let full = self.ckks.as_ref()?.slots();
        Some(self.sparse_slots.map_or(full, |s| s.min(full)))
    }

    /// Adds the relinearization key.
    pub fn with_relin_key(mut self) -> Self {
        self.relin_key = true;
        self
    }

    /// Adds the Galois keys of these rotations (needs CKKS parameters).
    pub fn with_rotations(mut self, ks: &[i64]) -> Self {
        if let Some(p) = &self.ckks {
            let n = p.n();
            self.galois_elements
                .extend(ks.iter().map(|&k| galois_element_for_rotation(k, n)));
        }
        self
    }

    /// Adds the conjugation key (needs CKKS parameters).
    pub fn with_conjugation(mut self) -> Self {
        if let Some(p) = &self.ckks {
            self.galois_elements.insert(galois_element_conjugate(p.n()));
        }
        self
    }

    /// Adds the TFHE server key.
    pub fn with_tfhe_server_key(mut self) -> Self {
        self.tfhe_server_key = true;
        self
    }

    /// Adds BGV parameters (no BGV evaluation key yet).
    pub fn with_bgv(mut self, params: &Arc<BgvParameters>) -> Self {
        self.bgv = Some(params.clone());
        self
    }

    /// Adds the BGV relinearization key.
    pub fn with_bgv_relin_key(mut self) -> Self {
        self.bgv_relin_key = true;
        self
    }

    /// Adds the BGV Galois keys of these row rotations, and of the column
    /// swap if `columns` (needs BGV parameters).
    pub fn with_bgv_rotations(mut self, ks: &[i64], columns: bool) -> Self {
        if let Some(p) = &self.bgv {
            let n = p.n();
            self.bgv_galois_elements
                .extend(ks.iter().map(|&k| galois_element_for_rotation(k, n)));
            if columns {
                self.bgv_galois_elements.insert(galois_element_conjugate(n));
            }
        }
        self
    }
}

impl ValueType {
    /// The shape of a ciphertext type.
    fn shape(&self) -> Option<CtShape> {
        match *self {
            ValueType::CkksCiphertext {
                level,
                scale,
                degree,
            } => Some(CtShape {
                level,
                scale,
                degree,
            }),
            _ => None,
        }
    }

    fn ciphertext(s: CtShape) -> Self {
        ValueType::CkksCiphertext {
            level: s.level,
            scale: s.scale,
            degree: s.degree,
        }
    }
}

/// Checks nodes one at a time, in an order where operands come first.
pub(super) struct Checker<'a> {
    pub(super) caps: &'a Capabilities,
    pub(super) needs: Needs,
    pub(super) meter: Meter,
    /// log2 Q_l for every level.
    log_q: Vec<f64>,
    at: At,
}

impl<'a> Checker<'a> {
    pub(super) fn new(caps: &'a Capabilities) -> Self {
        let log_q = caps
            .ckks
            .as_ref()
            .map(|p| {
                let mut acc = 0.0;
                (0..=p.max_level())
                    .map(|l| {
                        acc += p.q_f64(l).log2();
                        acc
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            caps,
            needs: Needs::default(),
            meter: Meter::new(caps.ckks.clone(), caps.bgv.clone()),
            log_q,
            at: At { node: 0, op: "" },
        }
    }

    fn params(&self) -> VResult<&'a Arc<CkksParameters>> {
        self.caps
            .ckks
            .as_ref()
            .ok_or(ValidationError::SchemeUnavailable {
                node: self.at.node,
                op: self.at.op,
                scheme: "CKKS",
            })
    }

    fn planner(&self) -> VResult<Planner<'a>> {
        Ok(Planner::new(self.params()?))
    }

    pub(super) fn mismatch(&self, args: &[&ValueType], accepted: &str) -> ValidationError {
        let found: Vec<String> = args.iter().map(|t| t.describe()).collect();
        ValidationError::TypeMismatch {
            node: self.at.node,
            op: self.at.op,
            reason: format!("got {}; accepted: {accepted}", found.join(" and ")),
        }
    }

    pub(super) fn invalid(&self, reason: impl Into<String>) -> ValidationError {
        self.at.invalid(reason)
    }

    pub(super) fn at(&self) -> At {
        self.at
    }

    /// The planner's refusal (the evaluator's, word for word) as this
    /// node's validation error.
    fn refused(&self, e: CkksError) -> ValidationError {
        match e {
            CkksError::ScaleMismatch { left, right } => ValidationError::ScaleMismatch {
                node: self.at.node,
                op: self.at.op,
                left,
                right,
            },
            CkksError::Rlwe(RlweError::LevelsExhausted { level, need }) => {
                self.at.exhausted(level, need)
            }
            CkksError::Rlwe(RlweError::LevelMismatch { left, right }) => self.invalid(format!(
                "the plaintext is at level {right}, below the ciphertext's level {left}"
            )),
            CkksError::Rlwe(RlweError::LevelOutOfRange { level, max }) => self.invalid(format!(
                "cannot raise a ciphertext from level {max} to {level}"
            )),
            e => self.invalid(e.to_string()),
        }
    }

    /// A value inside a node (a polynomial's intermediate products) must
    /// fit as its result must.
    fn fits(&self, x: &CtShape) -> VResult<()> {
        self.check_scale(ValueType::CkksCiphertext {
            level: x.level,
            scale: x.scale,
            degree: 1,
        })
        .map(drop)
    }

    /// A scale below the modulus (with a bit for the sign) and above the
    /// noise: the evaluator computes either way, the result would be wrong.
    fn check_scale(&self, t: ValueType) -> VResult<ValueType> {
        if let ValueType::CkksCiphertext { level, scale, .. } = t {
            let log_scale = scale.log2();
            let log_q = self.log_q.get(level).copied().unwrap_or(0.0);
            if !(scale.is_finite() && log_scale + 1.0 < log_q) {
                return Err(ValidationError::ScaleOverflow {
                    node: self.at.node,
                    op: self.at.op,
                    log_scale,
                    log_q,
                    level,
                });
            }
            if log_scale < MIN_LOG_SCALE {
                return Err(ValidationError::ScaleUnderflow {
                    node: self.at.node,
                    op: self.at.op,
                    log_scale,
                    min: MIN_LOG_SCALE,
                });
            }
        }
        Ok(t)
    }

    /// x · c as planned, for a constant far enough below 2^126 (what the
    /// evaluator can round) at scale q_l.
    fn mul_const(&mut self, plan: &Planner<'_>, x: &CtShape, c: f64) -> VResult<CtShape> {
        let step = plan.mul_const(x, c).map_err(|e| self.refused(e))?;
        if step.rescales > 0 && (c * plan.params().q_f64(x.level)).abs() >= 2f64.powi(120) {
            return Err(self.invalid(format!("constant {c} is too large")));
        }
        self.meter.charge(&step);
        Ok(step.out)
    }

    fn need_relin(&mut self) -> VResult<()> {
        if !self.caps.relin_key {
            return Err(ValidationError::MissingRelinKey {
                node: self.at.node,
                op: self.at.op,
            });
        }
        self.needs.relin_key = true;
        Ok(())
    }

    fn need_galois(&mut self, element: usize, what: String) -> VResult<()> {
        if !self.caps.galois_elements.contains(&element) {
            return Err(ValidationError::MissingGaloisKey {
                node: self.at.node,
                op: self.at.op,
                what,
                element,
            });
        }
        self.needs.galois.insert(element);
        Ok(())
    }

    fn need_tfhe(&mut self) -> VResult<()> {
        if !self.caps.tfhe_server_key {
            return Err(ValidationError::MissingServerKey {
                node: self.at.node,
                op: self.at.op,
            });
        }
        self.needs.tfhe = true;
        Ok(())
    }

    /// The type of node `node` from its operands' types `args`, with its
    /// cost recorded in the meter.
    pub(super) fn check(
        &mut self,
        node: NodeId,
        op: &Op,
        args: &[&ValueType],
        inputs: &[ValueType],
    ) -> VResult<ValueType> {
        self.at = At {
            node,
            op: op.name(),
        };
        self.meter.begin(node);
        let t = self.check_inner(op, args, inputs)?;
        let t = self.check_scale(t)?;
        self.meter.finish(node);
        Ok(t)
    }

    fn check_inner(
        &mut self,
        op: &Op,
        args: &[&ValueType],
        inputs: &[ValueType],
    ) -> VResult<ValueType> {
        use ValueType as T;
        let ct = T::ciphertext;
        if super::bgv::is_bgv_op(op) {
            return super::bgv::check(self, op, args);
        }
        match op {
            Op::Input(k) => {
                let t = inputs[*k as usize].clone();
                match &t {
                    T::CkksCiphertext {
                        level,
                        scale,
                        degree,
                    } => {
                        let p = self.params()?;
                        if *level > p.max_level() || !(*degree == 1 || *degree == 2) {
                            return Err(self.invalid(format!(
                                "input {k}: level {level} / degree {degree} impossible for these parameters"
                            )));
                        }
                        if !(scale.is_finite() && *scale > 0.0) {
                            return Err(self.invalid(format!("input {k}: invalid scale {scale}")));
                        }
                    }
                    T::CkksPlaintext { level, scale } => {
                        let p = self.params()?;
                        if *level > p.max_level() || !(scale.is_finite() && *scale > 0.0) {
                            return Err(self.invalid(format!(
                                "input {k}: level {level} / scale {scale} impossible for these parameters"
                            )));
                        }
                    }
                    T::Uint { width } => {
                        if !(MIN_WIDTH..=MAX_WIDTH).contains(width) {
                            return Err(self.invalid(format!("input {k}: width {width}")));
                        }
                    }
                    T::Bit => {}
                    T::BgvCiphertext {
                        level,
                        noise,
                        factor,
                        degree,
                    } => super::bgv::check_input(self, *k, *level, *noise, *factor, *degree)?,
                    T::Constant(_) | T::Plain { .. } => {
                        return Err(self.invalid(format!("input {k} is not an object type")));
                    }
                }
                Ok(t)
            }
            Op::Constant(c) => {
                if !c.is_finite() {
                    return Err(self.invalid(format!("constant {c} is not finite")));
                }
                Ok(T::Constant(*c))
            }
            Op::Plain(v) => {
                self.params()?;
                let slots = self.caps.ckks_slots().unwrap_or(0);
                if v.is_empty() || v.len() > slots.min(MAX_PLAIN_LEN) {
                    return Err(self.invalid(format!(
                        "a vector of {} values (1..={slots} accepted)",
                        v.len()
                    )));
                }
                if v.iter().any(|x| !x.is_finite()) {
                    return Err(self.invalid("the vector holds a non-finite value"));
                }
                Ok(T::Plain {
                    len: v.len(),
                    max_abs: v.iter().fold(0.0, |m, x| x.abs().max(m)),
                })
            }
            Op::Add(..) | Op::Sub(..) => {
                let accepted = "ciphertext with ciphertext, plaintext, vector or constant";
                match (args[0].shape(), args[1].shape()) {
                    (Some(a), Some(b)) => {
                        let plan = self.planner()?;
                        let s = plan.add(&a, &b).map_err(|e| self.refused(e))?;
                        Ok(ct(s.out))
                    }
                    (Some(x), None) | (None, Some(x)) => {
                        let other = if args[0].shape().is_some() {
                            args[1]
                        } else {
                            args[0]
                        };
                        let plan = self.planner()?;
                        let s = match other {
                            T::CkksPlaintext { level, scale } => plan.add_plain(
                                &x,
                                &PtShape {
                                    level: *level,
                                    scale: *scale,
                                },
                            ),
                            T::Constant(c) => plan.add_const(&x, *c),
                            T::Plain { max_abs, .. } => {
                                // Encoded at the ciphertext's level and scale.
                                plan.check_representable(x.level, x.scale, *max_abs)
                                    .map_err(|e| self.refused(e))?;
                                plan.add_plain(
                                    &x,
                                    &PtShape {
                                        level: x.level,
                                        scale: x.scale,
                                    },
                                )
                            }
                            _ => return Err(self.mismatch(args, accepted)),
                        };
                        Ok(ct(s.map_err(|e| self.refused(e))?.out))
                    }
                    _ => Err(self.mismatch(args, accepted)),
                }
            }
            Op::Neg(_) => match args[0].shape() {
                Some(x) => Ok(ct(self.planner()?.neg(&x).out)),
                None => Err(self.mismatch(args, "a ciphertext")),
            },
            Op::Mul(..) => {
                let accepted = "ciphertext with ciphertext, plaintext, vector or constant";
                match (args[0].shape(), args[1].shape()) {
                    (Some(a), Some(b)) => {
                        // The executor relinearizes every product of two ciphertexts.
                        let plan = self.planner()?;
                        let m = plan.mul(&a, &b).map_err(|e| match e {
                            CkksError::Rlwe(RlweError::CiphertextDegree { .. }) => {
                                self.mismatch(args, "degree-1 ciphertexts")
                            }
                            e => self.refused(e),
                        })?;
                        self.need_relin()?;
                        let r = plan.relinearize(&m.out).map_err(|e| self.refused(e))?;
                        self.meter.charge(&r);
                        Ok(ct(r.out))
                    }
                    (Some(x), None) | (None, Some(x)) => {
                        let other = if args[0].shape().is_some() {
                            args[1]
                        } else {
                            args[0]
                        };
                        let plan = self.planner()?;
                        let out = match other {
                            T::CkksPlaintext { level, scale } => {
                                let pt = PtShape {
                                    level: *level,
                                    scale: *scale,
                                };
                                plan.mul_plain(&x, &pt).map_err(|e| self.refused(e))?.out
                            }
                            T::Plain { max_abs, .. } => {
                                // Encoded at the ciphertext's level, at scale q_l.
                                let q = plan.params().q_f64(x.level);
                                plan.check_representable(x.level, q, *max_abs)
                                    .map_err(|e| self.refused(e))?;
                                let pt = PtShape {
                                    level: x.level,
                                    scale: q,
                                };
                                plan.mul_plain(&x, &pt).map_err(|e| self.refused(e))?.out
                            }
                            T::Constant(c) => self.mul_const(&plan, &x, *c)?,
                            _ => return Err(self.mismatch(args, accepted)),
                        };
                        Ok(ct(out))
                    }
                    _ => Err(self.mismatch(args, accepted)),
                }
            }
            Op::Rescale(_) => match args[0].shape() {
                Some(x) => {
                    let s = self.planner()?.rescale(&x).map_err(|e| self.refused(e))?;
                    self.meter.charge_rescale(&s);
                    Ok(ct(s.out))
                }
                None => Err(self.mismatch(args, "a ciphertext")),
            },
            Op::Rotate(_, k) => {
                let x = self.degree_one(args)?;
                let plan = self.planner()?;
                let s = plan.rotate(&x, *k).map_err(|e| self.refused(e))?;
                if let Some(g) = plan.rotation_key(*k) {
                    self.need_galois(g, format!("rotation by {k}"))?;
                }
                self.meter.charge(&s);
                Ok(ct(s.out))
            }
            Op::RotateAndSum(_, m) => {
                let x = self.degree_one(args)?;
                let plan = self.planner()?;
                let m = *m as usize;
                let slots = self.caps.ckks_slots().unwrap_or(0);
                let steps = plan
                    .rotate_and_sum_steps(m)
                    .ok()
                    .filter(|_| m <= slots)
                    .ok_or_else(|| {
                        self.invalid(format!(
                            "sums over {m} slots; a power of two in 1..={slots} is needed"
                        ))
                    })?;
                for k in steps {
                    if let Some(g) = plan.rotation_key(k) {
                        self.need_galois(g, format!("rotation by {k}"))?;
                    }
                }
                let s = plan.rotate_and_sum(&x, m).map_err(|e| self.refused(e))?;
                self.meter.charge(&s);
                Ok(ct(s.out))
            }
            Op::Bootstrap(_) => {
                let x = self.degree_one(args)?;
                let params = self.params()?;
                let refused = |reason: String| ValidationError::BootstrapRefused {
                    node: self.at.node,
                    op: self.at.op,
                    reason,
                };
                let Some(b) = self.caps.bootstrap else {
                    return Err(refused(
                        "the session has no bootstrapping part (circuit and keys)".into(),
                    ));
                };
                if x.scale > b.max_input_scale * (1.0 + 1e-9) {
                    return Err(refused(format!(
                        "the operand's scale 2^{:.2} is above the 2^{:.2} the circuit takes (rescale first)",
                        x.scale.log2(),
                        b.max_input_scale.log2()
                    )));
                }
                self.needs.bootstrap = true;
                self.meter.bootstrap(params.max_level(), b.key_switches);
                Ok(ct(CtShape {
                    level: b.output_level,
                    scale: params.default_scale(),
                    degree: 1,
                }))
            }
            Op::Refresh(_, target) => {
                let x = self.degree_one(args)?;
                let params = self.params()?;
                let refused = |reason: String| ValidationError::RefreshRefused {
                    node: self.at.node,
                    op: self.at.op,
                    reason,
                };
                if !self.caps.refresh_ckks {
                    return Err(refused(
                        "the session has no refresh part with a CKKS public key".into(),
                    ));
                }
                let target = *target as usize;
                if target > params.max_level() {
                    return Err(refused(format!(
                        "target level {target} above the top level {}",
                        params.max_level()
                    )));
                }
                let checked = params.checked_decoding_level(x.scale, params.max_level());
                if target < checked {
                    return Err(refused(unchecked_level(target, checked)));
                }
                self.caps
                    .mask_policy
                    .check_level(params, x.level, x.scale)
                    .map_err(|e| refused(e.to_string()))?;
                self.needs.refresh_ckks = true;
                self.meter.refresh(params.rlwe(), x.level, target);
                Ok(ct(CtShape { level: target, ..x }))
            }
            Op::DropLevel(..) | Op::DropForDecryption(_) => match args[0].shape() {
                Some(x) => {
                    let checked = self.params()?.checked_decoding_level(x.scale, x.level);
                    let target = match op {
                        Op::DropLevel(_, target) => *target as usize,
                        _ => checked,
                    };
                    let s = self
                        .planner()?
                        .drop_level(&x, target)
                        .map_err(|e| self.refused(e))?;
                    // A value that cannot fit at all says so first.
                    self.fits(&s.out)?;
                    if s.out.level < checked {
                        return Err(self.invalid(unchecked_level(s.out.level, checked)));
                    }
                    Ok(ct(s.out))
                }
                None => Err(self.mismatch(args, "a ciphertext")),
            },
            Op::Conjugate(_) => {
                let x = self.degree_one(args)?;
                let plan = self.planner()?;
                self.need_galois(plan.conjugation_key(), "conjugation".into())?;
                let s = plan.conjugate(&x).map_err(|e| self.refused(e))?;
                self.meter.charge(&s);
                Ok(ct(s.out))
            }
            Op::Chebyshev { coeffs, a, b, .. } => {
                let x = self.degree_one(args)?;
                if coeffs.is_empty() || coeffs.len() > MAX_CHEBYSHEV_COEFFS {
                    return Err(self.invalid(format!(
                        "{} coefficients (1..={MAX_CHEBYSHEV_COEFFS} accepted)",
                        coeffs.len()
                    )));
                }
                if coeffs.iter().any(|c| !c.is_finite()) {
                    return Err(self.invalid("coefficients must be finite"));
                }
                if !(a.is_finite() && b.is_finite() && a < b) {
                    return Err(
                        self.invalid(format!("interval [{a}, {b}] must be finite with a < b"))
                    );
                }
                self.need_relin()?;
                let poly = ChebyshevPolynomial {
                    coeffs: coeffs.clone(),
                    a: *a,
                    b: *b,
                };
                if x.level < poly.depth() {
                    return Err(self.at.exhausted(x.level, poly.depth()));
                }
                let plan = self.planner()?;
                let out = poly
                    .evaluate_with(&mut PolyCheck { cx: self, plan }, &x)
                    .map_err(|e| match e {
                        PolyError::Plan(e) => self.refused(e),
                        PolyError::Refused(e) => e,
                    })?;
                Ok(ct(out))
            }
            Op::IntSum { inputs: xs, full } => {
                if xs.is_empty() || xs.len() > MAX_SUM_OPERANDS {
                    return Err(self.invalid(format!(
                        "{} operands (1..={MAX_SUM_OPERANDS} accepted)",
                        xs.len()
                    )));
                }
                let w = self.uint_widths(args)?;
                let n = xs.len();
                let out_w = if *full {
                    w + (usize::BITS - (n - 1).leading_zeros()) as usize
                } else {
                    w
                };
                if out_w > MAX_WIDTH {
                    return Err(self.invalid(format!(
                        "the full sum needs {out_w} bits, more than {MAX_WIDTH}"
                    )));
                }
                if n * w > MAX_CIRCUIT_BITS {
                    return Err(self.invalid(format!(
                        "{n} operands of {w} bits exceed {MAX_CIRCUIT_BITS} bits"
                    )));
                }
                self.need_tfhe()?;
                self.meter.circuit(
                    self.at,
                    Circuit::Sum {
                        n,
                        width: w,
                        full: *full,
                    },
                )?;
                Ok(T::Uint { width: out_w })
            }
            Op::IntCompare(_, _, rel) => {
                let w = self.uint_widths(args)?;
                self.need_tfhe()?;
                self.meter.circuit(
                    self.at,
                    Circuit::Compare {
                        width: w,
                        rel: *rel,
                    },
                )?;
                Ok(T::Bit)
            }
            Op::IntMin(..) | Op::IntMax(..) => {
                let w = self.uint_widths(args)?;
                self.need_tfhe()?;
                self.meter.circuit(
                    self.at,
                    Circuit::MinMax {
                        width: w,
                        min: matches!(op, Op::IntMin(..)),
                    },
                )?;
                Ok(T::Uint { width: w })
            }
            _ => Err(self.invalid("a BGV operation outside the BGV checks")),
        }
    }

    fn degree_one(&self, args: &[&ValueType]) -> VResult<CtShape> {
        match args[0].shape() {
            Some(x) if x.degree == 1 => Ok(x),
            _ => Err(self.mismatch(args, "a degree-1 ciphertext")),
        }
    }

    fn uint_widths(&self, args: &[&ValueType]) -> VResult<usize> {
        let mut w = None;
        for t in args {
            match t {
                ValueType::Uint { width } => {
                    if w.is_some_and(|w| w != *width) {
                        return Err(self.mismatch(args, "encrypted integers of one width"));
                    }
                    w = Some(*width);
                }
                _ => return Err(self.mismatch(args, "encrypted integers")),
            }
        }
        w.ok_or_else(|| self.mismatch(args, "encrypted integers"))
    }
}

/// Why a polynomial's walk stopped: the planner refused a step, or one of
/// its values broke a validation policy.
enum PolyError {
    Plan(CkksError),
    Refused(ValidationError),
}

impl From<CkksError> for PolyError {
    fn from(e: CkksError) -> Self {
        Self::Plan(e)
    }
}

impl From<ValidationError> for PolyError {
    fn from(e: ValidationError) -> Self {
        Self::Refused(e)
    }
}

/// The evaluator's Chebyshev schedule walked on shapes, each step planned,
/// costed and its scale checked, so that a polynomial is refused where one
/// of its intermediate values would not fit.
struct PolyCheck<'c, 'a> {
    cx: &'c mut Checker<'a>,
    plan: Planner<'a>,
}

impl PolyCheck<'_, '_> {
    fn free(&self, s: Result<Step, CkksError>) -> Result<CtShape, PolyError> {
        Ok(s?.out)
    }
}

impl ChebyshevOps for PolyCheck<'_, '_> {
    type Value = CtShape;
    type Error = PolyError;

    fn level(&self, x: &CtShape) -> usize {
        x.level
    }

    fn scale(&self, x: &CtShape) -> f64 {
        x.scale
    }

    fn prime(&self, level: usize) -> f64 {
        self.plan.params().q_f64(level)
    }

    fn mul_const(&mut self, x: &CtShape, c: f64) -> Result<CtShape, PolyError> {
        Ok(self.cx.mul_const(&self.plan, x, c)?)
    }

    fn add_const(&mut self, x: &CtShape, c: f64) -> Result<CtShape, PolyError> {
        Ok(self.plan.add_const(x, c)?.out)
    }

    fn mul_relin_rescale(&mut self, a: &CtShape, b: &CtShape) -> Result<CtShape, PolyError> {
        let s = self.plan.mul_relin_rescale(a, b)?;
        self.cx.meter.charge(&s);
        self.cx.fits(&self.plan.mul(a, b)?.out)?;
        self.cx.fits(&s.out)?;
        Ok(s.out)
    }

    fn mul_int(&mut self, x: &CtShape, k: i64) -> Result<CtShape, PolyError> {
        Ok(self.plan.mul_int(x, k)?.out)
    }

    fn add(&mut self, a: &CtShape, b: &CtShape) -> Result<CtShape, PolyError> {
        self.free(self.plan.add(a, b))
    }

    fn sub(&mut self, a: &CtShape, b: &CtShape) -> Result<CtShape, PolyError> {
        self.free(self.plan.sub(a, b))
    }

    fn drop_level(&mut self, x: &CtShape, level: usize) -> Result<CtShape, PolyError> {
        self.free(self.plan.drop_level(x, level))
    }

    fn mul_const_raw(&mut self, x: &CtShape, _c: f64, s: f64) -> Result<CtShape, PolyError> {
        let out = self.plan.mul_const_raw(x, s).out;
        self.cx.fits(&out)?;
        Ok(out)
    }

    fn rescale(&mut self, x: &CtShape) -> Result<CtShape, PolyError> {
        let s = self.plan.rescale(x)?;
        self.cx.meter.charge_rescale(&s);
        Ok(s.out)
    }
}
