//! Running a validated graph: the evaluator interface the server calls.
//!
//! [`execute`] is synchronous (the server runs it on its worker pool),
//! evaluates the live nodes in order over the CKKS and BGV evaluators and
//! the TFHE circuits, checks the cancellation flag between nodes and inside the long
//! ones: an integer node before every bootstrap (a sum of thousands of
//! operands runs for minutes), a Chebyshev polynomial before every
//! ciphertext product (each a key switch); it reports progress after each
//! node and frees every intermediate value after its last use. Other CKKS
//! nodes are one or two key switches each and run to their end. Refresh
//! nodes go to a key holder over a [`RefreshLink`]
//! ([`execute_with_refresh`]), those ready together in one round trip.
//!
//! ```
//! use std::sync::atomic::AtomicBool;
//! use hecloud_ckks::{params::test_literal, CkksParameters, Encoder, KeySet};
//! use hecloud_protocol::*;
//! let params = CkksParameters::new_insecure_for_tests(test_literal(10, 2), 45).unwrap();
//! // Client: keys and an encrypted input.
//! let ks = KeySet::generate(&params, &[1, 2], false).unwrap();
//! let enc = Encoder::new(&params);
//! let x = [1.0, 2.0, 3.0, 4.0];
//! let ct = ks.encrypt(&enc.encode_real(&x, 2, params.default_scale()).unwrap()).unwrap();
//! // Server: the session's evaluation keys, the graph, validation, execution.
//! let sp = SessionParams { ckks: Some(params.clone()), tfhe: None, bgv: None };
//! let keys = SessionKeys::from_parts(sp, ks.evaluation_keys(), None).unwrap();
//! let mut g = Graph::new();
//! let i = g.input(0);
//! let sq = g.mul(i, i);
//! let sq = g.rescale(sq);
//! let s = g.rotate_and_sum(sq, 4);
//! g.output("sum_of_squares", s);
//! let input = Object::CkksCiphertext(ct);
//! let types = vec![input.value_type().unwrap()];
//! let v = validate(&g, &keys.capabilities(), &types).unwrap();
//! let out = execute(&v, &keys, &[input], &AtomicBool::new(false), &mut |_| {}).unwrap();
//! // Client: decrypt.
//! let Object::CkksCiphertext(r) = &out[0].1 else { panic!() };
//! let y = enc.decode_real(&ks.decrypt(r).unwrap()).unwrap();
//! assert!((y[0] - 30.0).abs() < 1e-6);
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use hecloud_circuits::circuits::{self, AdderKind, SumMode};
use hecloud_circuits::{Cancellable, CircuitError, EncryptedUint, TfheEngine, Wire};
use hecloud_ckks::polynomial::ChebyshevPolynomial;
use hecloud_ckks::{CkksError, Evaluator};
use hecloud_rlwe::{Ciphertext, Plaintext};
use num_complex::Complex64;

use crate::error::ExecError;
use crate::graph::{NodeId, Op};
use crate::object::{CkksRuntime, Object, SessionKeys, TfheCiphertext};
use crate::refresh::RefreshLink;
use crate::validate::{ValidatedGraph, circuit_relation};

/// Progress after one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Nodes evaluated so far.
    pub done: usize,
    /// Nodes to evaluate in all.
    pub total: usize,
    /// The node just evaluated.
    pub node: NodeId,
    /// Its operation.
    pub op: &'static str,
}

enum Slot {
    Empty,
    Input(usize),
    Const(f64),
    Plain(NodeId),
    /// A product left for the rescale that reads it (mul + relin + rescale fused).
    FusedMul(NodeId, NodeId),
    Ct(Ciphertext),
    Uint(EncryptedUint<TfheCiphertext>),
    Bit(Wire<TfheCiphertext>),
}

enum V<'a> {
    Ct(&'a Ciphertext),
    Pt(&'a Plaintext),
    Const(f64),
    Plain(&'a [f64]),
    Uint(&'a EncryptedUint<TfheCiphertext>),
    Bit(&'a Wire<TfheCiphertext>),
    Other,
}

/// Runs `graph` (validated for these keys and inputs) and returns its named
/// outputs in the graph's order. `cancel` is checked before every node,
/// within integer nodes before every bootstrap and within Chebyshev nodes
/// before every ciphertext product; once it is seen raised,
/// the result is [`ExecError::Cancelled`] with the number of nodes that
/// completed. `progress` is called after every node.
pub fn execute(
    graph: &ValidatedGraph,
    keys: &SessionKeys,
    inputs: &[Object],
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<(String, Object)>, ExecError> {
    execute_with_refresh(graph, keys, inputs, cancel, progress, None)
}

/// [`execute`] with a key holder reachable over `link` for the graph's
/// refresh nodes (without one, a refresh node fails the job with
/// [`ExecError::Refresh`]). When a refresh node runs, every later refresh
/// node of the same scheme and target level whose operand is already
/// computed is refreshed in the same round trip.
pub fn execute_with_refresh(
    graph: &ValidatedGraph,
    keys: &SessionKeys,
    inputs: &[Object],
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(Progress),
    link: Option<&dyn RefreshLink>,
) -> Result<Vec<(String, Object)>, ExecError> {
    check_keys(graph, keys)?;
    if inputs.len() != graph.inputs.len() {
        return Err(ExecError::InputMismatch {
            index: inputs.len().min(graph.inputs.len()),
            reason: format!(
                "{} inputs given, the graph was validated for {}",
                inputs.len(),
                graph.inputs.len()
            ),
        });
    }
    for (i, (obj, want)) in inputs.iter().zip(&graph.inputs).enumerate() {
        match obj.value_type() {
            Some(t) if t == *want => {}
            t => {
                return Err(ExecError::InputMismatch {
                    index: i,
                    reason: format!("a {t:?} object where {want:?} was validated"),
                });
            }
        }
    }
    keys.check_input_keys(inputs)
        .map_err(|(index, reason)| ExecError::InputMismatch { index, reason })?;
    let mut run = Run {
        g: graph,
        keys,
        inputs,
        cancel,
        slots: (0..graph.graph.nodes.len()).map(|_| Slot::Empty).collect(),
        uses: graph.uses.clone(),
        link,
        refreshed: HashMap::new(),
    };
    let total = graph.order.len();
    for (done, &id) in graph.order.iter().enumerate() {
        if cancel.load(Ordering::Relaxed) {
            return Err(ExecError::Cancelled { done, total });
        }
        let op = &graph.graph.nodes[id as usize];
        let slot = match run.node(id, op) {
            Err(
                ExecError::Circuit {
                    source: CircuitError::Cancelled,
                    ..
                }
                | ExecError::Ckks {
                    source: CkksError::Cancelled,
                    ..
                },
            ) => return Err(ExecError::Cancelled { done, total }),
            r => r?,
        };
        run.slots[id as usize] = slot;
        if !matches!(run.slots[id as usize], Slot::FusedMul(..)) {
            for m in op.operands() {
                run.release(m);
            }
        }
        progress(Progress {
            done: done + 1,
            total,
            node: id,
            op: op.name(),
        });
    }
    let mut out = Vec::with_capacity(graph.graph.outputs.len());
    for o in &graph.graph.outputs {
        let bgv = matches!(
            graph.types.get(o.node as usize),
            Some(crate::ValueType::BgvCiphertext { .. })
        );
        let obj = match run.view(o.node) {
            V::Ct(c) if bgv => Object::BgvCiphertext(c.clone()),
            V::Ct(c) => Object::CkksCiphertext(c.clone()),
            V::Pt(p) => Object::CkksPlaintext(p.clone()),
            V::Uint(u) => Object::TfheUint(u.clone(), keys.tfhe_key_id()),
            V::Bit(b) => Object::TfheBit(b.clone(), keys.tfhe_key_id()),
            _ => {
                return Err(ExecError::Internal {
                    node: o.node,
                    op: "output",
                    reason: "not an object".into(),
                });
            }
        };
        out.push((o.name.clone(), obj));
    }
    Ok(out)
}

fn check_keys(g: &ValidatedGraph, keys: &SessionKeys) -> Result<(), ExecError> {
    let mismatch = |s: &str| Err(ExecError::KeysMismatch(s.into()));
    let n = &g.needs;
    let rt = keys.ckks_runtime();
    if let Some(h) = &n.param_hash
        && keys.params().ckks.as_ref().map(|p| p.rlwe().hash()) != Some(h)
    {
        return mismatch("other CKKS parameters");
    }
    if n.relin_key && rt.is_none_or(|r| r.evaluator.keys().relin.is_none()) {
        return mismatch("no relinearization key");
    }
    for &e in &n.galois {
        if rt.is_none_or(|r| r.evaluator.keys().galois.get(e).is_err()) {
            return mismatch("a Galois key is missing");
        }
    }
    if n.tfhe && keys.tfhe_engine().is_none() {
        return mismatch("no TFHE server key");
    }
    let bgv = keys.bgv_runtime();
    if let Some(h) = &n.bgv_param_hash
        && keys.params().bgv.as_ref().map(|p| p.rlwe().hash()) != Some(h)
    {
        return mismatch("other BGV parameters");
    }
    let refresh = keys.refresh_keys();
    if n.refresh_ckks && refresh.is_none_or(|r| r.ckks_pk.is_none()) {
        return mismatch("no CKKS public key to refresh with");
    }
    if n.refresh_bgv && refresh.is_none_or(|r| r.bgv_pk.is_none()) {
        return mismatch("no BGV public key to refresh with");
    }
    if n.bootstrap && keys.boot_runtime().is_none() {
        return mismatch("no bootstrapping part");
    }
    if n.bgv_relin_key && bgv.is_none_or(|r| r.keys.relin.is_none()) {
        return mismatch("no BGV relinearization key");
    }
    for &e in &n.bgv_galois {
        if bgv.is_none_or(|r| r.keys.galois.get(e).is_err()) {
            return mismatch("a BGV Galois key is missing");
        }
    }
    Ok(())
}

struct Run<'a> {
    g: &'a ValidatedGraph,
    keys: &'a SessionKeys,
    inputs: &'a [Object],
    cancel: &'a AtomicBool,
    slots: Vec<Slot>,
    uses: Vec<u32>,
    link: Option<&'a dyn RefreshLink>,
    /// Refresh nodes answered ahead, in the round trip of an earlier one.
    refreshed: HashMap<NodeId, Ciphertext>,
}

impl<'a> Run<'a> {
    fn view(&self, id: NodeId) -> V<'_> {
        match &self.slots[id as usize] {
            Slot::Input(i) => match &self.inputs[*i] {
                Object::CkksCiphertext(c) | Object::BgvCiphertext(c) => V::Ct(c),
                Object::CkksPlaintext(p) => V::Pt(p),
                Object::TfheUint(u, _) => V::Uint(u),
                Object::TfheBit(b, _) => V::Bit(b),
                _ => V::Other,
            },
            Slot::Const(c) => V::Const(*c),
            Slot::Plain(n) => match &self.g.graph.nodes[*n as usize] {
                Op::Plain(v) => V::Plain(v),
                _ => V::Other,
            },
            Slot::Ct(c) => V::Ct(c),
            Slot::Uint(u) => V::Uint(u),
            Slot::Bit(b) => V::Bit(b),
            Slot::Empty | Slot::FusedMul(..) => V::Other,
        }
    }

    /// A refresh node: answered ahead, or now together with every later
    /// refresh node of its kind and level whose operand is computed.
    fn refresh_node(&mut self, id: NodeId, op: &Op, level: usize) -> Result<Slot, ExecError> {
        let failed = |reason: String| ExecError::Refresh {
            node: id,
            op: op.name(),
            reason,
        };
        if let Some(ct) = self.refreshed.remove(&id) {
            return Ok(Slot::Ct(ct));
        }
        let link = self
            .link
            .ok_or_else(|| failed("no key holder is reachable for this job".into()))?;
        let same_kind = |o: &Op| match o {
            Op::Refresh(_, l) => !op_is_bgv(op) && *l as usize == level,
            Op::BgvRefresh(_, l) => op_is_bgv(op) && *l as usize == level,
            _ => false,
        };
        let nodes = &self.g.graph.nodes;
        let mut batch: Vec<(NodeId, &Ciphertext)> = Vec::new();
        let from = self.g.order.iter().position(|&n| n == id).unwrap_or(0);
        for &n in &self.g.order[from..] {
            let o = &nodes[n as usize];
            if !same_kind(o) || (n != id && self.refreshed.contains_key(&n)) {
                continue;
            }
            if let V::Ct(c) = self.view(o.operands()[0]) {
                batch.push((n, c));
            } else if n == id {
                return Err(failed("the operand is not a ciphertext".into()));
            }
        }
        let cts: Vec<&Ciphertext> = batch.iter().map(|(_, c)| *c).collect();
        let rk = self
            .keys
            .refresh_keys()
            .ok_or_else(|| failed("the session has no refresh keys".into()))?;
        let fresh = if op_is_bgv(op) {
            let rt = self
                .keys
                .bgv_runtime()
                .ok_or_else(|| failed("no BGV runtime".into()))?;
            let pk = rk
                .bgv_pk
                .as_ref()
                .ok_or_else(|| failed("no BGV public key".into()))?;
            let enc = hecloud_bgv::Encoder::new(rt.evaluator.params());
            let policy = &rk.bgv_policy;
            crate::refresh::refresh_bgv(link, &rt.evaluator, &enc, pk, &cts, policy, level)
        } else {
            let params = self
                .keys
                .params()
                .ckks
                .as_ref()
                .ok_or_else(|| failed("no CKKS parameters".into()))?;
            let pk = rk
                .ckks_pk
                .as_ref()
                .ok_or_else(|| failed("no CKKS public key".into()))?;
            crate::refresh::refresh_ckks(link, params, pk, &rk.policy, &cts, level)
        }
        .map_err(|e| failed(e.to_string()))?;
        let ids: Vec<NodeId> = batch.iter().map(|(n, _)| *n).collect();
        let mut own = None;
        for (n, ct) in ids.into_iter().zip(fresh) {
            if n == id {
                own = Some(ct);
            } else {
                self.refreshed.insert(n, ct);
            }
        }
        own.map(Slot::Ct)
            .ok_or_else(|| failed("the round trip did not return this node's ciphertext".into()))
    }

    fn release(&mut self, m: NodeId) {
        let u = &mut self.uses[m as usize];
        *u = u.saturating_sub(1);
        if *u == 0 {
            self.slots[m as usize] = Slot::Empty;
        }
    }

    fn node(&mut self, id: NodeId, op: &Op) -> Result<Slot, ExecError> {
        let name = op.name();
        let internal = |reason: &str| ExecError::Internal {
            node: id,
            op: name,
            reason: reason.into(),
        };
        let ck = |r: Result<Ciphertext, CkksError>| {
            r.map(Slot::Ct).map_err(|source| ExecError::Ckks {
                node: id,
                op: name,
                source,
            })
        };
        let rt = || -> Result<&CkksRuntime, ExecError> {
            self.keys
                .ckks_runtime()
                .ok_or_else(|| internal("no CKKS runtime"))
        };
        if let Op::Refresh(_, level) | Op::BgvRefresh(_, level) = op {
            return self.refresh_node(id, op, *level as usize);
        }
        if crate::validate::is_bgv_op(op) {
            return self.bgv_node(id, op);
        }
        match op {
            Op::Input(i) => Ok(Slot::Input(*i as usize)),
            Op::Constant(c) => Ok(Slot::Const(*c)),
            Op::Plain(_) => Ok(Slot::Plain(id)),
            Op::Add(a, b) | Op::Sub(a, b) => {
                let rt = rt()?;
                let sub = matches!(op, Op::Sub(..));
                ck(add_sub(rt, self.view(*a), self.view(*b), sub)
                    .ok_or_else(|| internal("operand types"))?)
            }
            Op::Neg(a) => match self.view(*a) {
                V::Ct(c) => ck(rt()?.evaluator.neg(c)),
                _ => Err(internal("operand types")),
            },
            Op::Mul(a, b) => {
                if self.g.fused[id as usize] {
                    return Ok(Slot::FusedMul(*a, *b));
                }
                let rt = rt()?;
                ck(mul(rt, self.view(*a), self.view(*b))
                    .ok_or_else(|| internal("operand types"))?)
            }
            Op::Rescale(a) => {
                let ev = &rt()?.evaluator;
                if let Slot::FusedMul(x, y) = self.slots[*a as usize] {
                    let r = match (self.view(x), self.view(y)) {
                        (V::Ct(p), V::Ct(q)) => ev.mul_relin_rescale(p, q),
                        _ => return Err(internal("operand types")),
                    };
                    self.release(x);
                    self.release(y);
                    return ck(r);
                }
                match self.view(*a) {
                    V::Ct(c) => ck(ev.rescale(c)),
                    _ => Err(internal("operand types")),
                }
            }
            Op::Rotate(a, k) => match self.view(*a) {
                V::Ct(c) => ck(rt()?.evaluator.rotate(c, *k)),
                _ => Err(internal("operand types")),
            },
            Op::RotateAndSum(a, n) => match self.view(*a) {
                V::Ct(c) => ck(rt()?.evaluator.rotate_and_sum(c, *n as usize)),
                _ => Err(internal("operand types")),
            },
            Op::DropLevel(a, _) | Op::DropForDecryption(a) => match self.view(*a) {
                V::Ct(c) => {
                    let ev = &rt()?.evaluator;
                    let level = match op {
                        Op::DropLevel(_, l) => *l as usize,
                        _ => ev.params().checked_decoding_level(c.scale(), c.level()),
                    };
                    ck(ev.drop_level(c, level))
                }
                _ => Err(internal("operand types")),
            },
            Op::Conjugate(a) => match self.view(*a) {
                V::Ct(c) => ck(rt()?.evaluator.conjugate(c)),
                _ => Err(internal("operand types")),
            },
            Op::Bootstrap(a) => match self.view(*a) {
                V::Ct(c) => {
                    let ev = &rt()?.evaluator;
                    let boot = self
                        .keys
                        .boot_runtime()
                        .ok_or_else(|| internal("no bootstrapping part"))?;
                    ck(ev.drop_level(c, 0).and_then(|low| {
                        boot.bootstrapper.bootstrap_cancellable(
                            ev,
                            boot.encapsulation.as_ref(),
                            &low,
                            self.cancel,
                        )
                    }))
                }
                _ => Err(internal("operand types")),
            },
            Op::Chebyshev {
                input,
                coeffs,
                a,
                b,
            } => match self.view(*input) {
                V::Ct(c) => {
                    let p = ChebyshevPolynomial {
                        coeffs: coeffs.clone(),
                        a: *a,
                        b: *b,
                    };
                    ck(rt()?
                        .evaluator
                        .evaluate_chebyshev_cancellable(c, &p, self.cancel))
                }
                _ => Err(internal("operand types")),
            },
            Op::IntSum { inputs, full } => {
                let e = &self.engine(id, name)?;
                let xs = inputs
                    .iter()
                    .map(|&m| match self.view(m) {
                        V::Uint(u) => Some(u.clone()),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| internal("operand types"))?;
                let mode = if *full {
                    SumMode::Full
                } else {
                    SumMode::Modular
                };
                circuits::sum(e, &xs, mode, AdderKind::Auto)
                    .map(Slot::Uint)
                    .map_err(|source| circuit_err(id, name, source))
            }
            Op::IntCompare(a, b, rel) => {
                let e = &self.engine(id, name)?;
                match (self.view(*a), self.view(*b)) {
                    (V::Uint(x), V::Uint(y)) => circuits::compare(e, x, y, circuit_relation(*rel))
                        .map(Slot::Bit)
                        .map_err(|source| circuit_err(id, name, source)),
                    _ => Err(internal("operand types")),
                }
            }
            Op::IntMin(a, b) | Op::IntMax(a, b) => {
                let e = &self.engine(id, name)?;
                let min = matches!(op, Op::IntMin(..));
                match (self.view(*a), self.view(*b)) {
                    (V::Uint(x), V::Uint(y)) => {
                        let r = if min {
                            circuits::min(e, x, y)
                        } else {
                            circuits::max(e, x, y)
                        };
                        r.map(Slot::Uint)
                            .map_err(|source| circuit_err(id, name, source))
                    }
                    _ => Err(internal("operand types")),
                }
            }
            _ => Err(internal("a BGV operation outside the BGV path")),
        }
    }

    /// A BGV node: the evaluator's operation of the same name.
    fn bgv_node(&self, id: NodeId, op: &Op) -> Result<Slot, ExecError> {
        let name = op.name();
        let internal = |reason: &str| ExecError::Internal {
            node: id,
            op: name,
            reason: reason.into(),
        };
        let rt = self
            .keys
            .bgv_runtime()
            .ok_or_else(|| internal("no BGV runtime"))?;
        let ev = &rt.evaluator;
        let ct = |m: &NodeId| match self.view(*m) {
            V::Ct(c) => Ok(c),
            _ => Err(internal("operand types")),
        };
        let r = match op {
            Op::BgvAdd(a, b) => ev.add(ct(a)?, ct(b)?),
            Op::BgvSub(a, b) => ev.sub(ct(a)?, ct(b)?),
            Op::BgvNeg(a) => ev.neg(ct(a)?),
            Op::BgvMul(a, b) => ev.mul_relin(ct(a)?, ct(b)?),
            Op::BgvSum(xs) => {
                let cts = xs
                    .iter()
                    .map(|m| ct(m).cloned())
                    .collect::<Result<Vec<_>, _>>()?;
                ev.add_many(&cts)
            }
            Op::BgvSlotSum(a) => ev.inner_sum(ct(a)?),
            Op::BgvRotateRows(a, k) => ev.rotate_rows(ct(a)?, *k),
            Op::BgvRotateColumns(a) => ev.rotate_columns(ct(a)?),
            Op::BgvAddScalar(a, c) => ev.add_scalar(ct(a)?, *c),
            Op::BgvMulScalar(a, c) => ev.mul_scalar(ct(a)?, *c),
            Op::BgvLessThan { a, b, bound } => {
                let (x, y) = (ct(a)?, ct(b)?);
                hecloud_bgv::poly::LessThan::new(ev.params(), *bound)
                    .and_then(|lt| lt.eval(ev, x, y))
            }
            Op::BgvModSwitch(a, l) => ev.mod_switch_to(ct(a)?, *l as usize),
            Op::BgvBitsAdd { a, b, width }
            | Op::BgvBitsLessThan { a, b, width }
            | Op::BgvBitsGreaterThan { a, b, width } => {
                return self.bits_node(id, op, &[ct(a)?, ct(b)?], *width);
            }
            Op::BgvBitsSum { inputs, width } => {
                let cts = inputs.iter().map(ct).collect::<Result<Vec<_>, _>>()?;
                return self.bits_node(id, op, &cts, *width);
            }
            _ => return Err(internal("not a BGV operation")),
        };
        r.map(Slot::Ct).map_err(|source| ExecError::Bgv {
            node: id,
            op: name,
            source,
        })
    }

    /// A packed-bit node: the operands switched to their lowest level, the
    /// bits-in-slots circuit run without a refresher
    /// ([`hecloud_circuits::packed::slots`]), the result's noise estimate
    /// raised to the bound validation predicted
    /// ([`crate::validate::bgv::bits_output_noise`]) so that later nodes run
    /// as they were predicted. A circuit error (validation should have
    /// refused it) maps to [`ExecError::Bgv`] (an exhausted budget among
    /// them) or [`ExecError::Circuit`].
    fn bits_node(
        &self,
        id: NodeId,
        op: &Op,
        operands: &[&Ciphertext],
        width: u32,
    ) -> Result<Slot, ExecError> {
        use hecloud_circuits::packed::{BitCircuit, PackedBits, PackedError, SlotUint, slots};
        let name = op.name();
        let fail = |e: PackedError| match e {
            PackedError::Bgv(source) => ExecError::Bgv {
                node: id,
                op: name,
                source,
            },
            PackedError::Circuit(source) => ExecError::Circuit {
                node: id,
                op: name,
                source,
            },
            other => ExecError::Internal {
                node: id,
                op: name,
                reason: other.to_string(),
            },
        };
        let rt = self.keys.bgv_runtime().ok_or_else(|| ExecError::Internal {
            node: id,
            op: name,
            reason: "no BGV runtime".into(),
        })?;
        let ev = &rt.evaluator;
        let level = operands.iter().map(|c| c.level()).min().unwrap_or(0);
        let xs = operands
            .iter()
            .map(|c| {
                let c = ev
                    .mod_switch_to(c, level)
                    .map_err(|e| fail(PackedError::Bgv(e)))?;
                SlotUint::from_bits(PackedBits::new(c), width as usize).map_err(fail)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let bc = BitCircuit::new(ev).map_err(fail)?;
        let mut out = match op {
            Op::BgvBitsAdd { .. } => slots::add(&bc, &xs[0], &xs[1]).map(|u| u.bits().clone()),
            Op::BgvBitsSum { .. } => slots::sum(&bc, &xs).map(|u| u.bits().clone()),
            Op::BgvBitsLessThan { .. } => slots::lt(&bc, &xs[0], &xs[1]).map(|b| b.bits().clone()),
            _ => slots::gt(&bc, &xs[0], &xs[1]).map(|b| b.bits().clone()),
        }
        .map_err(fail)?
        .into_ciphertext();
        if let Some(crate::ValueType::BgvCiphertext { noise, .. }) = self.g.types.get(id as usize)
            && out.scale() < *noise
        {
            out.set_scale(*noise);
        }
        Ok(Slot::Ct(out))
    }

    /// The session's TFHE engine under this run's cancellation flag.
    fn engine(
        &self,
        id: NodeId,
        op: &'static str,
    ) -> Result<Cancellable<'a, TfheEngine>, ExecError> {
        let e = self.keys.tfhe_engine().ok_or(ExecError::Internal {
            node: id,
            op,
            reason: "no TFHE server key".into(),
        })?;
        Ok(Cancellable::new(e, self.cancel))
    }
}

fn circuit_err(
    node: NodeId,
    op: &'static str,
    source: hecloud_circuits::CircuitError,
) -> ExecError {
    ExecError::Circuit { node, op, source }
}

/// ct ± x or x ± ct; `None` for operand types validation refuses.
fn add_sub(
    rt: &CkksRuntime,
    a: V<'_>,
    b: V<'_>,
    sub: bool,
) -> Option<Result<Ciphertext, CkksError>> {
    let ev = &rt.evaluator;
    Some(match (a, b) {
        (V::Ct(x), V::Ct(y)) => {
            if sub {
                ev.sub(x, y)
            } else {
                ev.add(x, y)
            }
        }
        (V::Ct(x), other) => with_operand(rt, x, other, sub),
        (other, V::Ct(y)) => {
            // x − ct = −(ct − x); x + ct = ct + x.
            if sub {
                with_operand(rt, y, other, true).and_then(|r| ev.neg(&r))
            } else {
                with_operand(rt, y, other, false)
            }
        }
        _ => return None,
    })
}

fn with_operand(
    rt: &CkksRuntime,
    ct: &Ciphertext,
    x: V<'_>,
    sub: bool,
) -> Result<Ciphertext, CkksError> {
    let ev = &rt.evaluator;
    match x {
        V::Pt(p) => {
            if sub {
                ev.sub_plain(ct, p)
            } else {
                ev.add_plain(ct, p)
            }
        }
        V::Plain(v) => {
            let p = rt.encoder.encode_real(v, ct.level(), ct.scale())?;
            if sub {
                ev.sub_plain(ct, &p)
            } else {
                ev.add_plain(ct, &p)
            }
        }
        V::Const(c) => ev.add_const(ct, Complex64::new(if sub { -c } else { c }, 0.0)),
        _ => Err(CkksError::Polynomial("unsupported operand".into())),
    }
}

fn mul(rt: &CkksRuntime, a: V<'_>, b: V<'_>) -> Option<Result<Ciphertext, CkksError>> {
    let ev: &Evaluator = &rt.evaluator;
    Some(match (a, b) {
        (V::Ct(x), V::Ct(y)) => ev.mul(x, y).and_then(|t| ev.relinearize(&t)),
        (V::Ct(x), other) | (other, V::Ct(x)) => match other {
            V::Pt(p) => ev.mul_plain(x, p),
            V::Plain(v) => {
                let q = ev.params().q_f64(x.level());
                rt.encoder
                    .encode_real(v, x.level(), q)
                    .and_then(|p| ev.mul_plain(x, &p))
            }
            V::Const(c) => ev.mul_const(x, c),
            _ => return None,
        },
        _ => return None,
    })
}

fn op_is_bgv(op: &Op) -> bool {
    matches!(op, Op::BgvRefresh(..))
}
