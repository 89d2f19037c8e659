//! Validation before running: structure (limits, dangling references, cycles,
//! outputs), types, CKKS levels and scales, keys present, and a cost
//! estimate, which [`validate_with_limits`] checks against the caller's
//! limit. A graph that passes is a [`ValidatedGraph`], the only thing
//! [`crate::execute`] runs.
//!
//! Levels, scales and key switches come from the evaluator's own planner
//! ([`hecloud_ckks::plan`]), not from a copy of its rules: what validation
//! predicts for a ciphertext is what execution produces, scale to the bit.
//! The work is split by concern: the graph's shape (`structure`), each
//! node's type and the policies the evaluator does not enforce (`types`),
//! and the cost model with its limits (`cost`).
//!
//! ```
//! use hecloud_protocol::{validate, Capabilities, Graph, ValidationError, ValueType};
//! use hecloud_ckks::{CkksParameters, params::test_literal};
//! let params = CkksParameters::new_insecure_for_tests(test_literal(10, 2), 45).unwrap();
//! let caps = Capabilities::ckks(&params).with_relin_key().with_rotations(&[1]);
//! let x = ValueType::CkksCiphertext { level: 2, scale: params.default_scale(), degree: 1 };
//!
//! let mut g = Graph::new();
//! let i = g.input(0);
//! let sq = g.mul(i, i);
//! let sq = g.rescale(sq);
//! let r = g.rotate(sq, 1);
//! g.output("r", r);
//! let v = validate(&g, &caps, &[x.clone()]).unwrap();
//! assert_eq!(v.cost().key_switches, 2); // relinearization + rotation
//!
//! // Rotating by 2 needs a key the session does not have: refused up front.
//! let mut bad = g.clone();
//! let r2 = bad.rotate(sq, 2);
//! bad.output("r2", r2);
//! assert!(matches!(validate(&bad, &caps, &[x]), Err(ValidationError::MissingGaloisKey { .. })));
//! ```

use std::collections::BTreeSet;

use crate::error::ValidationError;
use crate::graph::{Graph, NodeId};

mod auto_refresh;
mod bgv;
mod cost;
mod structure;
mod types;

pub use auto_refresh::insert_refreshes;
pub(crate) use bgv::is_bgv_op;
pub(crate) use cost::circuit_relation;
pub use cost::{
    BOOTSTRAP_SECONDS, CostEstimate, MAX_CIRCUIT_BITS, MAX_GRAPH_CIRCUIT_BITS, TFHE_BIT_BYTES,
    TFHE_CONTAINER_HEADER, ValidationLimits,
};
pub use types::{BootstrapCaps, Capabilities, MIN_LOG_SCALE, ValueType};

use structure::Schedule;
use types::Checker;

/// A graph that passed validation, with the type of every node, the order in
/// which the live nodes run and its cost. Only [`validate`] makes one.
#[derive(Debug, Clone)]
pub struct ValidatedGraph {
    pub(crate) graph: Graph,
    pub(crate) types: Vec<ValueType>,
    pub(crate) inputs: Vec<ValueType>,
    pub(crate) order: Vec<NodeId>,
    /// Number of later reads of each node (live consumers + outputs).
    pub(crate) uses: Vec<u32>,
    /// Mul nodes whose only reader is a rescale: run fused.
    pub(crate) fused: Vec<bool>,
    pub(crate) needs: Needs,
    cost: CostEstimate,
}

/// Keys and parameters a validated graph relies on (checked again at run time).
#[derive(Debug, Clone, Default)]
pub(crate) struct Needs {
    pub param_hash: Option<[u8; 32]>,
    pub relin_key: bool,
    pub galois: BTreeSet<usize>,
    pub tfhe: bool,
    pub bgv_param_hash: Option<[u8; 32]>,
    pub bgv_relin_key: bool,
    pub bgv_galois: BTreeSet<usize>,
    pub refresh_ckks: bool,
    pub refresh_bgv: bool,
    pub bootstrap: bool,
}

impl ValidatedGraph {
    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The type of node `id`.
    pub fn node_type(&self, id: NodeId) -> Option<&ValueType> {
        self.types.get(id as usize)
    }

    /// The types of the outputs, in order.
    pub fn output_types(&self) -> Vec<(&str, &ValueType)> {
        self.graph
            .outputs
            .iter()
            .map(|o| (o.name.as_str(), &self.types[o.node as usize]))
            .collect()
    }

    /// The input types the graph was validated against.
    pub fn input_types(&self) -> &[ValueType] {
        &self.inputs
    }

    /// The cost estimate.
    pub fn cost(&self) -> &CostEstimate {
        &self.cost
    }

    /// The nodes that run, in order.
    pub fn schedule(&self) -> &[NodeId] {
        &self.order
    }
}

type VResult<T> = Result<T, ValidationError>;

/// Validates `graph` for a session offering `caps`, with job inputs of
/// types `inputs`; returns the validated graph or the first problem found.
/// No limit on the cost ([`validate_with_limits`] with the default limits).
pub fn validate(
    graph: &Graph,
    caps: &Capabilities,
    inputs: &[ValueType],
) -> VResult<ValidatedGraph> {
    validate_with_limits(graph, caps, inputs, &ValidationLimits::UNLIMITED)
}

/// [`validate`], refusing a job whose estimated cost exceeds
/// `limits.max_est_seconds` with [`ValidationError::TooCostly`].
///
/// Nodes no output depends on are not checked (nor costed, nor run): an
/// error in one does not refuse the graph.
///
/// Integer nodes are costed in two passes. While types are checked, each
/// integer circuit's bootstraps are bounded from above from its shape
/// ([`hecloud_circuits::bound`]), without running it; once the bound of the
/// nodes checked so far exceeds the limit the job is refused
/// (`upper_bound: true` in the error), so an oversized job costs the
/// validator next to nothing. Since the bound can exceed the exact count
/// (by up to 8 % for sums, a few bootstraps per thread for comparisons), a
/// job whose exact estimate is just under the limit may be refused this
/// way. Then each distinct circuit runs once on the clear engine for the
/// exact count, and the exact estimate is checked against the limit again
/// (a backstop: it cannot exceed the bound that passed).
pub fn validate_with_limits(
    graph: &Graph,
    caps: &Capabilities,
    inputs: &[ValueType],
    limits: &ValidationLimits,
) -> VResult<ValidatedGraph> {
    let structure = structure::check(graph, inputs.len())?;
    let n = graph.nodes.len();

    let mut cx = Checker::new(caps);
    let mut types: Vec<Option<ValueType>> = vec![None; n];
    // Upper bound of the live nodes' cost so far: integer circuits by their
    // bootstrap bounds, everything else as costed.
    let mut bound_seconds = 0.0;
    // Only the nodes an output depends on: checking another would cost
    // time (a BGV comparison's interpolation, a circuit's clear run) that
    // no cost bound charges, for a node that does not run.
    for &id in &structure.order {
        let op = &graph.nodes[id as usize];
        let args: Vec<&ValueType> = structure.operands[id as usize]
            .iter()
            .map(|&m| types[m as usize].as_ref())
            .collect::<Option<_>>()
            .ok_or(ValidationError::Cycle { node: id })?;
        let t = cx.check(id, op, &args, inputs)?;
        types[id as usize] = Some(t);
        bound_seconds += cx.meter.bound_seconds(id);
        if !limits.allows(bound_seconds) {
            return Err(limits.refuse(bound_seconds, true));
        }
    }
    cx.meter.exact_costs(graph, &structure.order)?;
    let types: Vec<ValueType> = types
        .into_iter()
        .map(|t| t.unwrap_or(ValueType::Bit))
        .collect();

    let Schedule { order, uses, fused } = structure::schedule(graph, structure, &types);
    let cost = cx.meter.estimate(graph, &order, &types);
    for o in &graph.outputs {
        if matches!(
            types[o.node as usize],
            ValueType::Constant(_) | ValueType::Plain { .. }
        ) {
            return Err(ValidationError::BadOutput {
                name: o.name.clone(),
                reason: "a clear operand is not an object the server can return".into(),
            });
        }
    }
    if !limits.allows(cost.est_seconds) {
        return Err(limits.refuse(cost.est_seconds, false));
    }
    let mut needs = cx.needs;
    needs.param_hash = caps.ckks.as_ref().map(|p| *p.rlwe().hash());
    needs.bgv_param_hash = caps.bgv.as_ref().map(|p| *p.rlwe().hash());
    Ok(ValidatedGraph {
        graph: graph.clone(),
        types,
        inputs: inputs.to_vec(),
        order,
        uses,
        fused,
        needs,
        cost,
    })
}

/// The node being checked, for the errors that name it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At {
    node: NodeId,
    op: &'static str,
}

impl At {
    fn invalid(&self, reason: impl Into<String>) -> ValidationError {
        ValidationError::InvalidArgument {
            node: self.node,
            op: self.op,
            reason: reason.into(),
        }
    }

    fn exhausted(&self, level: usize, need: usize) -> ValidationError {
        ValidationError::LevelsExhausted {
            node: self.node,
            op: self.op,
            level,
            need,
        }
    }
}
