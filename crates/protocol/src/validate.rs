//! Validation before running: structure (limits, dangling references, cycles,
//! outputs), types, CKKS levels and scales (tracked exactly as the evaluator
//! tracks them, from the primes of the parameter set), keys present, and a
//! cost estimate, which [`validate_with_limits`] checks against the caller's
//! limit. A graph that passes is a [`ValidatedGraph`], the only thing
//! [`crate::execute`] runs.
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

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use hecloud_circuits::circuits::{self, AdderKind, SumMode};
use hecloud_circuits::{
    BitEngine, ClearEngine, EncryptedUint, MAX_WIDTH, MIN_WIDTH, Stats, bound, with_cost,
};
use hecloud_ckks::CkksParameters;
use hecloud_ckks::evaluator::SCALE_TOLERANCE;
use hecloud_rlwe::keys::{galois_element_conjugate, galois_element_for_rotation};

use crate::error::ValidationError;
use crate::graph::{
    Graph, MAX_CHEBYSHEV_COEFFS, MAX_NAME_LEN, MAX_NODES, MAX_OUTPUTS, MAX_PLAIN_LEN,
    MAX_SUM_OPERANDS, NodeId, Op,
};
use crate::object::ckks_ciphertext_bytes;

/// Most bits (operands × width) one integer operation may touch.
pub const MAX_CIRCUIT_BITS: usize = 1 << 18;
/// Most bits (operands × width, summed over every integer node, live or not)
/// one graph may hold: 8 operations of [`MAX_CIRCUIT_BITS`].
///
/// Validation costs integer nodes exactly by running their circuits on the
/// clear engine, at about a third of a microsecond per bit (a sum of 4096
/// operands of 64 bits: about 0.1 s on one core); this cap keeps that under
/// a second or so per graph even without a cost limit
/// ([`ValidationLimits`]), dead nodes included (they are checked too).
/// Identical circuits run once. Not covered: the comparator's layout search
/// for a width not seen before (up to 0.1 s at 1024 bits, remembered for
/// the life of the process).
pub const MAX_GRAPH_CIRCUIT_BITS: usize = 8 * MAX_CIRCUIT_BITS;
/// Serialized size of one TFHE bit in a container (an LWE ciphertext of
/// dimension 2048, its metadata and length prefix).
pub const TFHE_BIT_BYTES: u64 = 16_558;
/// Header of a TFHE container.
pub const TFHE_CONTAINER_HEADER: u64 = 44;
/// Smallest log2 of a ciphertext scale accepted: below it the message
/// drowns in the noise (a ciphertext rescaled once too often).
pub const MIN_LOG_SCALE: f64 = 20.0;
/// Estimated seconds per TFHE bootstrap on one core (for the cost estimate).
pub const BOOTSTRAP_SECONDS: f64 = 0.012;

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
}

/// Limits a caller puts on the jobs it validates
/// ([`validate_with_limits`]).
///
/// ```
/// use hecloud_protocol::{validate_with_limits, Capabilities, Graph, ValidationError, ValidationLimits, ValueType};
/// let mut g = Graph::new();
/// let xs: Vec<u32> = (0..64).map(|i| g.input(i)).collect();
/// let s = g.int_sum(xs, true);
/// g.output("s", s);
/// let types = vec![ValueType::Uint { width: 32 }; 64];
/// let caps = Capabilities::tfhe();
/// let ok = validate_with_limits(&g, &caps, &types, &ValidationLimits::default()).unwrap();
/// let limit = ValidationLimits { max_est_seconds: ok.cost().est_seconds / 2.0 };
/// assert!(matches!(
///     validate_with_limits(&g, &caps, &types, &limit),
///     Err(ValidationError::TooCostly { .. })
/// ));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ValidationLimits {
    /// Largest [`CostEstimate::est_seconds`] a job may have. Infinite (the
    /// default): no limit. NaN refuses every job (a broken configuration
    /// fails closed).
    pub max_est_seconds: f64,
}

impl ValidationLimits {
    /// No limit on the cost (the structural limits still apply).
    pub const UNLIMITED: Self = Self {
        max_est_seconds: f64::INFINITY,
    };

    fn allows(&self, est_seconds: f64) -> bool {
        est_seconds <= self.max_est_seconds
    }

    fn refuse(&self, est_seconds: f64, upper_bound: bool) -> ValidationError {
        ValidationError::TooCostly {
            est_seconds,
            max_seconds: self.max_est_seconds,
            upper_bound,
        }
    }
}

impl Default for ValidationLimits {
    /// [`ValidationLimits::UNLIMITED`].
    fn default() -> Self {
        Self::UNLIMITED
    }
}

/// What running the graph will cost, estimated before it runs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CostEstimate {
    /// Nodes that will run (those the outputs depend on).
    pub nodes: usize,
    /// CKKS key switches (relinearizations, rotations, conjugations).
    pub key_switches: u64,
    /// CKKS rescales.
    pub rescales: u64,
    /// TFHE programmable bootstraps (exact: counted on the clear engine).
    pub bootstraps: u64,
    /// TFHE bootstrap layers (the sequential depth).
    pub bootstrap_depth: u64,
    /// Rough single-core time estimate in seconds (an order of magnitude
    /// for scheduling and quotas, not a measurement).
    pub est_seconds: f64,
    /// Total size of the outputs in bytes.
    pub output_bytes: u64,
}

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
    let n = graph.nodes.len();
    if n > MAX_NODES {
        return Err(ValidationError::TooLarge {
            what: "nodes",
            len: n,
            max: MAX_NODES,
        });
    }
    if graph.outputs.is_empty() {
        return Err(ValidationError::NoOutputs);
    }
    if graph.outputs.len() > MAX_OUTPUTS {
        return Err(ValidationError::TooLarge {
            what: "outputs",
            len: graph.outputs.len(),
            max: MAX_OUTPUTS,
        });
    }
    let mut names = HashSet::new();
    for o in &graph.outputs {
        let bad = |reason: String| ValidationError::BadOutput {
            name: o.name.clone(),
            reason,
        };
        if o.name.is_empty() || o.name.len() > MAX_NAME_LEN {
            return Err(bad(format!("names must have 1..={MAX_NAME_LEN} bytes")));
        }
        if !names.insert(o.name.as_str()) {
            return Err(bad("the name is used twice".into()));
        }
        if o.node as usize >= n {
            return Err(bad(format!("node {} does not exist", o.node)));
        }
    }
    let operands: Vec<Vec<NodeId>> = graph.nodes.iter().map(Op::operands).collect();
    for (i, (op, ops)) in graph.nodes.iter().zip(&operands).enumerate() {
        if let Some(&m) = ops.iter().find(|&&m| m as usize >= n) {
            return Err(ValidationError::DanglingOperand {
                node: i as NodeId,
                op: op.name(),
                operand: m,
            });
        }
        if let Op::Input(k) = op
            && *k as usize >= inputs.len()
        {
            return Err(ValidationError::MissingInput {
                node: i as NodeId,
                index: *k,
                count: inputs.len(),
            });
        }
    }
    let topo = topological_order(&operands)?;

    // Live nodes: those the outputs depend on (only they count in the cost).
    let mut live = vec![false; n];
    let mut stack: Vec<NodeId> = graph.outputs.iter().map(|o| o.node).collect();
    while let Some(v) = stack.pop() {
        if !std::mem::replace(&mut live[v as usize], true) {
            stack.extend(&operands[v as usize]);
        }
    }

    let mut cx = Checker::new(caps);
    let mut types: Vec<Option<ValueType>> = vec![None; n];
    // Upper bound of the live nodes' cost so far: integer circuits by their
    // bootstrap bounds, everything else as costed.
    let mut bound_seconds = 0.0;
    for &id in &topo {
        let op = &graph.nodes[id as usize];
        let args: Vec<&ValueType> = operands[id as usize]
            .iter()
            .map(|&m| types[m as usize].as_ref())
            .collect::<Option<_>>()
            .ok_or(ValidationError::Cycle { node: id })?;
        let t = cx.check(id, op, &args, inputs)?;
        types[id as usize] = Some(t);
        if live[id as usize] {
            let c = &cx.node_costs[id as usize];
            bound_seconds += c.seconds + c.bound_seconds;
            if !limits.allows(bound_seconds) {
                return Err(limits.refuse(bound_seconds, true));
            }
        }
    }
    // Exact costs, once per distinct circuit (dead nodes too: a circuit that
    // fails refuses the graph wherever it is).
    for &id in &topo {
        if let Some(c) = cx.node_costs[id as usize].circuit {
            cx.exact_circuit_cost(id, graph.nodes[id as usize].name(), c)?;
        }
    }
    let types: Vec<ValueType> = types
        .into_iter()
        .map(|t| t.unwrap_or(ValueType::Bit))
        .collect();

    let order: Vec<NodeId> = topo.into_iter().filter(|&v| live[v as usize]).collect();
    let mut uses = vec![0u32; n];
    for &v in &order {
        for &m in &operands[v as usize] {
            uses[m as usize] += 1;
        }
    }
    for o in &graph.outputs {
        uses[o.node as usize] += 1;
    }
    let mut fused = vec![false; n];
    for &v in &order {
        if let Op::Rescale(m) = graph.nodes[v as usize] {
            let m = m as usize;
            if uses[m] == 1
                && let Op::Mul(a, b) = graph.nodes[m]
                && matches!(types[a as usize], ValueType::CkksCiphertext { .. })
                && matches!(types[b as usize], ValueType::CkksCiphertext { .. })
            {
                fused[m] = true;
            }
        }
    }

    // Cost of the live nodes.
    let mut cost = CostEstimate {
        nodes: order.len(),
        ..CostEstimate::default()
    };
    for &v in &order {
        let c = cx.node_costs[v as usize];
        cost.key_switches += c.key_switches;
        cost.rescales += c.rescales;
        cost.bootstraps += c.bootstraps;
        cost.bootstrap_depth += c.bootstrap_depth;
        cost.est_seconds += c.seconds;
    }
    for o in &graph.outputs {
        cost.output_bytes += match &types[o.node as usize] {
            ValueType::CkksCiphertext { level, degree, .. } => caps
                .ckks
                .as_ref()
                .map(|p| ckks_ciphertext_bytes(p, *level, degree + 1))
                .unwrap_or(0),
            ValueType::CkksPlaintext { level, .. } => caps
                .ckks
                .as_ref()
                .map(|p| ckks_ciphertext_bytes(p, *level, 1))
                .unwrap_or(0),
            ValueType::Uint { width } => TFHE_CONTAINER_HEADER + *width as u64 * TFHE_BIT_BYTES,
            ValueType::Bit => TFHE_CONTAINER_HEADER + TFHE_BIT_BYTES,
            ValueType::Constant(_) | ValueType::Plain { .. } => 0,
        };
    }
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

/// Depth-first topological order of all nodes; a back edge is a cycle.
fn topological_order(operands: &[Vec<NodeId>]) -> VResult<Vec<NodeId>> {
    let n = operands.len();
    // 0: unvisited, 1: on the stack, 2: done.
    let mut state = vec![0u8; n];
    let mut order = Vec::with_capacity(n);
    for root in 0..n {
        if state[root] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        state[root] = 1;
        while let Some(&mut (v, ref mut next)) = stack.last_mut() {
            if let Some(&m) = operands[v].get(*next) {
                *next += 1;
                let m = m as usize;
                match state[m] {
                    0 => {
                        state[m] = 1;
                        stack.push((m, 0));
                    }
                    1 => return Err(ValidationError::Cycle { node: m as NodeId }),
                    _ => {}
                }
            } else {
                state[v] = 2;
                order.push(v as NodeId);
                stack.pop();
            }
        }
    }
    Ok(order)
}

#[derive(Debug, Clone, Copy, Default)]
struct NodeCost {
    key_switches: u64,
    rescales: u64,
    bootstraps: u64,
    bootstrap_depth: u64,
    seconds: f64,
    /// The node's integer circuit, costed exactly after the type pass.
    circuit: Option<Circuit>,
    /// Upper bound of the circuit's seconds (not included in `seconds`).
    bound_seconds: f64,
}

/// The shape of an integer node's circuit: all its cost depends on (with the
/// thread count, fixed for one validation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Circuit {
    Sum {
        n: usize,
        width: usize,
        full: bool,
    },
    Compare {
        width: usize,
        rel: crate::graph::Relation,
    },
    MinMax {
        width: usize,
        min: bool,
    },
}

impl Circuit {
    /// Operand count and width.
    fn shape(self) -> (usize, usize) {
        match self {
            Circuit::Sum { n, width, .. } => (n, width),
            Circuit::Compare { width, .. } | Circuit::MinMax { width, .. } => (2, width),
        }
    }

    fn mode(full: bool) -> SumMode {
        if full {
            SumMode::Full
        } else {
            SumMode::Modular
        }
    }

    /// Upper bound of its bootstraps, from its shape alone.
    fn bound(self, threads: usize) -> hecloud_circuits::Result<u64> {
        match self {
            Circuit::Sum { n, width, full } => {
                bound::sum_bootstraps(n, width, Self::mode(full), AdderKind::Auto, threads)
            }
            Circuit::Compare { width, .. } => bound::compare_bootstraps(width, threads),
            Circuit::MinMax { width, .. } => bound::min_max_bootstraps(width, threads),
        }
    }

    /// Runs it on the clear engine (which counts the same bootstraps and
    /// layers as the TFHE engine) to cost it exactly.
    fn run(self) -> hecloud_circuits::Result<Stats> {
        let e = ClearEngine::new();
        let (n, width) = self.shape();
        let xs: Vec<EncryptedUint<u64>> = (0..n)
            .map(|_| EncryptedUint::encrypt_u128(&e, 0, width))
            .collect::<Result<_, _>>()?;
        let (r, stats) = with_cost(&e, || match self {
            Circuit::Sum { full, .. } => {
                circuits::sum(&e, &xs, Self::mode(full), AdderKind::Auto).map(drop)
            }
            Circuit::Compare { rel, .. } => {
                circuits::compare(&e, &xs[0], &xs[1], circuit_relation(rel)).map(drop)
            }
            Circuit::MinMax { min: true, .. } => circuits::min(&e, &xs[0], &xs[1]).map(drop),
            Circuit::MinMax { min: false, .. } => circuits::max(&e, &xs[0], &xs[1]).map(drop),
        });
        r.map(|()| stats)
    }
}

/// Level and scale of a CKKS ciphertext, as the evaluator tracks them.
#[derive(Debug, Clone, Copy)]
struct Ls {
    level: usize,
    scale: f64,
}

struct Checker<'a> {
    caps: &'a Capabilities,
    needs: Needs,
    node_costs: Vec<NodeCost>,
    /// Threads the clear engine plans circuits for (the adder and the
    /// comparator layout depend on it).
    threads: usize,
    /// Operands × width over the integer nodes checked so far.
    circuit_bits: usize,
    /// Exact costs of the circuits run so far.
    exact: HashMap<Circuit, Stats>,
    /// log2 Q_l for every level.
    log_q: Vec<f64>,
    cur: NodeCost,
    node: NodeId,
    op: &'static str,
}

impl<'a> Checker<'a> {
    fn new(caps: &'a Capabilities) -> Self {
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
            node_costs: Vec::new(),
            threads: ClearEngine::new().threads(),
            circuit_bits: 0,
            exact: HashMap::new(),
            log_q,
            cur: NodeCost::default(),
            node: 0,
            op: "",
        }
    }

    fn params(&self) -> VResult<&'a Arc<CkksParameters>> {
        self.caps
            .ckks
            .as_ref()
            .ok_or(ValidationError::SchemeUnavailable {
                node: self.node,
                op: self.op,
                scheme: "CKKS",
            })
    }

    fn mismatch(&self, args: &[&ValueType], accepted: &str) -> ValidationError {
        let found: Vec<String> = args.iter().map(|t| t.describe()).collect();
        ValidationError::TypeMismatch {
            node: self.node,
            op: self.op,
            reason: format!("got {}; accepted: {accepted}", found.join(" and ")),
        }
    }

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

    fn q(&self, level: usize) -> VResult<f64> {
        Ok(self.params()?.q_f64(level))
    }

    // ---- the evaluator's level and scale rules, op by op ----

    fn scales_match(&self, a: f64, b: f64) -> VResult<()> {
        if ((a - b) / a.max(b)).abs() > SCALE_TOLERANCE {
            return Err(ValidationError::ScaleMismatch {
                node: self.node,
                op: self.op,
                left: a.log2(),
                right: b.log2(),
            });
        }
        Ok(())
    }

    fn add(&self, a: Ls, b: Ls) -> VResult<Ls> {
        self.scales_match(a.scale, b.scale)?;
        Ok(Ls {
            level: a.level.min(b.level),
            scale: a.scale,
        })
    }

    fn rescale(&mut self, a: Ls) -> VResult<Ls> {
        if a.level == 0 {
            return Err(self.exhausted(0, 1));
        }
        self.cur.rescales += 1;
        self.cur.seconds += self.rescale_seconds(a.level);
        Ok(Ls {
            level: a.level - 1,
            scale: a.scale / self.q(a.level)?,
        })
    }

    fn mul_relin_rescale(&mut self, a: Ls, b: Ls) -> VResult<Ls> {
        let l = a.level.min(b.level);
        if l == 0 {
            return Err(self.exhausted(0, 1));
        }
        self.key_switch(l);
        self.cur.rescales += 1;
        self.fits(Ls {
            level: l,
            scale: a.scale * b.scale,
        })?;
        self.fits(Ls {
            level: l - 1,
            scale: a.scale * b.scale / self.q(l)?,
        })
    }

    /// An intermediate value (inside a polynomial evaluation) must fit too.
    fn fits(&self, x: Ls) -> VResult<Ls> {
        self.check_scale(ValueType::CkksCiphertext {
            level: x.level,
            scale: x.scale,
            degree: 1,
        })?;
        Ok(x)
    }

    fn mul_const(&mut self, a: Ls, c: f64) -> VResult<Ls> {
        if c.fract() == 0.0 && c.abs() < 2f64.powi(62) {
            return Ok(a);
        }
        if a.level == 0 {
            return Err(self.exhausted(0, 1));
        }
        if (c * self.q(a.level)?).abs() >= 2f64.powi(120) {
            return Err(self.invalid(format!("constant {c} is too large")));
        }
        self.cur.rescales += 1;
        Ok(Ls {
            level: a.level - 1,
            scale: a.scale,
        })
    }

    fn key_switch(&mut self, level: usize) {
        self.cur.key_switches += 1;
        self.cur.seconds += self.key_switch_seconds(level);
    }

    /// A rough model: a key switch at level l costs (dnum + 2)·(l + 1 + |P|)
    /// NTTs of size N, one NTT ≈ N·log2 N ns.
    fn key_switch_seconds(&self, level: usize) -> f64 {
        let Some(p) = &self.caps.ckks else { return 0.0 };
        let n = p.n() as f64;
        let k = p.rlwe().p_basis().len() as f64;
        let dnum = p.rlwe().dnum() as f64;
        (dnum + 2.0) * (level as f64 + 1.0 + k) * n * n.log2() * 1e-9
    }

    fn rescale_seconds(&self, level: usize) -> f64 {
        let Some(p) = &self.caps.ckks else { return 0.0 };
        let n = p.n() as f64;
        2.0 * (level as f64 + 1.0) * n * n.log2() * 1e-9
    }

    fn check_scale(&self, t: ValueType) -> VResult<ValueType> {
        if let ValueType::CkksCiphertext { level, scale, .. } = t {
            let log_scale = scale.log2();
            let log_q = self.log_q.get(level).copied().unwrap_or(0.0);
            if !(scale.is_finite() && log_scale + 1.0 < log_q) {
                return Err(ValidationError::ScaleOverflow {
                    node: self.node,
                    op: self.op,
                    log_scale,
                    log_q,
                    level,
                });
            }
            if log_scale < MIN_LOG_SCALE {
                return Err(ValidationError::ScaleUnderflow {
                    node: self.node,
                    op: self.op,
                    log_scale,
                    min: MIN_LOG_SCALE,
                });
            }
        }
        Ok(t)
    }

    fn need_relin(&mut self) -> VResult<()> {
        if !self.caps.relin_key {
            return Err(ValidationError::MissingRelinKey {
                node: self.node,
                op: self.op,
            });
        }
        self.needs.relin_key = true;
        Ok(())
    }

    fn need_galois(&mut self, element: usize, what: String) -> VResult<()> {
        if !self.caps.galois_elements.contains(&element) {
            return Err(ValidationError::MissingGaloisKey {
                node: self.node,
                op: self.op,
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
                node: self.node,
                op: self.op,
            });
        }
        self.needs.tfhe = true;
        Ok(())
    }

    fn check(
        &mut self,
        node: NodeId,
        op: &Op,
        args: &[&ValueType],
        inputs: &[ValueType],
    ) -> VResult<ValueType> {
        self.node = node;
        self.op = op.name();
        self.cur = NodeCost::default();
        if self.node_costs.len() <= node as usize {
            self.node_costs
                .resize(node as usize + 1, NodeCost::default());
        }
        let t = self.check_inner(op, args, inputs)?;
        let t = self.check_scale(t)?;
        self.node_costs[node as usize] = self.cur;
        Ok(t)
    }

    fn check_inner(
        &mut self,
        op: &Op,
        args: &[&ValueType],
        inputs: &[ValueType],
    ) -> VResult<ValueType> {
        use ValueType as T;
        let ct = |l: Ls, degree: usize| T::CkksCiphertext {
            level: l.level,
            scale: l.scale,
            degree,
        };
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
                let slots = self.params()?.slots();
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
                let (a, b) = (args[0], args[1]);
                match (a, b) {
                    (
                        T::CkksCiphertext {
                            level: la,
                            scale: sa,
                            degree: da,
                        },
                        T::CkksCiphertext {
                            level: lb,
                            scale: sb,
                            degree: db,
                        },
                    ) => {
                        let l = self.add(
                            Ls {
                                level: *la,
                                scale: *sa,
                            },
                            Ls {
                                level: *lb,
                                scale: *sb,
                            },
                        )?;
                        Ok(ct(l, (*da).max(*db)))
                    }
                    (
                        T::CkksCiphertext {
                            level,
                            scale,
                            degree,
                        },
                        other,
                    )
                    | (
                        other,
                        T::CkksCiphertext {
                            level,
                            scale,
                            degree,
                        },
                    ) => {
                        match other {
                            T::CkksPlaintext {
                                level: lp,
                                scale: sp,
                            } => {
                                self.scales_match(*scale, *sp)?;
                                if lp < level {
                                    return Err(self.invalid(format!(
                                        "the plaintext is at level {lp}, below the ciphertext's level {level}"
                                    )));
                                }
                            }
                            T::Constant(c) => {
                                if (c * scale).abs() >= 2f64.powi(120) {
                                    return Err(self.invalid(format!("constant {c} is too large")));
                                }
                            }
                            T::Plain { max_abs, .. } => {
                                // Encoded at the ciphertext's scale: the encoder takes
                                // |value · scale| < 2^126.
                                if max_abs * scale >= 2f64.powi(125) {
                                    return Err(self.invalid(format!(
                                        "a vector up to {max_abs} at scale 2^{:.1} is too large to encode (rescale first)",
                                        scale.log2()
                                    )));
                                }
                            }
                            _ => return Err(self.mismatch(args, accepted)),
                        }
                        Ok(ct(
                            Ls {
                                level: *level,
                                scale: *scale,
                            },
                            *degree,
                        ))
                    }
                    _ => Err(self.mismatch(args, accepted)),
                }
            }
            Op::Neg(_) => match args[0] {
                t @ T::CkksCiphertext { .. } => Ok(t.clone()),
                _ => Err(self.mismatch(args, "a ciphertext")),
            },
            Op::Mul(..) => {
                let accepted = "ciphertext with ciphertext, plaintext, vector or constant";
                match (args[0], args[1]) {
                    (
                        T::CkksCiphertext {
                            level: la,
                            scale: sa,
                            degree: da,
                        },
                        T::CkksCiphertext {
                            level: lb,
                            scale: sb,
                            degree: db,
                        },
                    ) => {
                        if *da != 1 || *db != 1 {
                            return Err(self.mismatch(args, "degree-1 ciphertexts"));
                        }
                        self.need_relin()?;
                        let level = (*la).min(*lb);
                        self.key_switch(level);
                        Ok(ct(
                            Ls {
                                level,
                                scale: sa * sb,
                            },
                            1,
                        ))
                    }
                    (
                        T::CkksCiphertext {
                            level,
                            scale,
                            degree,
                        },
                        other,
                    )
                    | (
                        other,
                        T::CkksCiphertext {
                            level,
                            scale,
                            degree,
                        },
                    ) => {
                        let a = Ls {
                            level: *level,
                            scale: *scale,
                        };
                        let out = match other {
                            T::CkksPlaintext {
                                level: lp,
                                scale: sp,
                            } => {
                                if lp < level {
                                    return Err(self.invalid(format!(
                                        "the plaintext is at level {lp}, below the ciphertext's level {level}"
                                    )));
                                }
                                Ls {
                                    level: *level,
                                    scale: scale * sp,
                                }
                            }
                            T::Plain { max_abs, .. } => {
                                // Encoded at scale q_l: the encoder takes |value · q_l| < 2^126.
                                let q = self.q(*level)?;
                                if max_abs * q >= 2f64.powi(125) {
                                    return Err(self.invalid(format!(
                                        "a vector up to {max_abs} is too large to encode"
                                    )));
                                }
                                Ls {
                                    level: *level,
                                    scale: scale * q,
                                }
                            }
                            T::Constant(c) => self.mul_const(a, *c)?,
                            _ => return Err(self.mismatch(args, accepted)),
                        };
                        Ok(ct(out, *degree))
                    }
                    _ => Err(self.mismatch(args, accepted)),
                }
            }
            Op::Rescale(_) => match args[0] {
                T::CkksCiphertext {
                    level,
                    scale,
                    degree,
                } => {
                    let l = self.rescale(Ls {
                        level: *level,
                        scale: *scale,
                    })?;
                    Ok(ct(l, *degree))
                }
                _ => Err(self.mismatch(args, "a ciphertext")),
            },
            Op::Rotate(_, k) => {
                let t = self.degree_one(args)?;
                let n = self.params()?.n();
                let g = galois_element_for_rotation(*k, n);
                if g != 1 {
                    self.need_galois(g, format!("rotation by {k}"))?;
                    self.key_switch(level_of(&t));
                }
                Ok(t)
            }
            Op::RotateAndSum(_, m) => {
                let t = self.degree_one(args)?;
                let p = self.params()?;
                let m = *m as usize;
                if !m.is_power_of_two() || m > p.slots() {
                    return Err(self.invalid(format!(
                        "sums over {m} slots; a power of two in 1..={} is needed",
                        p.slots()
                    )));
                }
                let mut step = 1;
                while step < m {
                    let g = galois_element_for_rotation(step as i64, p.n());
                    if g != 1 {
                        self.need_galois(g, format!("rotation by {step}"))?;
                        self.key_switch(level_of(&t));
                    }
                    step *= 2;
                }
                Ok(t)
            }
            Op::DropLevel(_, target) => match args[0] {
                T::CkksCiphertext {
                    level,
                    scale,
                    degree,
                } => {
                    let target = *target as usize;
                    if target > *level {
                        return Err(self.invalid(format!(
                            "cannot raise a ciphertext from level {level} to {target}"
                        )));
                    }
                    Ok(ct(
                        Ls {
                            level: target,
                            scale: *scale,
                        },
                        *degree,
                    ))
                }
                _ => Err(self.mismatch(args, "a ciphertext")),
            },
            Op::Conjugate(_) => {
                let t = self.degree_one(args)?;
                let g = galois_element_conjugate(self.params()?.n());
                self.need_galois(g, "conjugation".into())?;
                self.key_switch(level_of(&t));
                Ok(t)
            }
            Op::Chebyshev { coeffs, a, b, .. } => {
                let t = self.degree_one(args)?;
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
                let T::CkksCiphertext { level, scale, .. } = t else {
                    return Err(self.mismatch(args, "a degree-1 ciphertext"));
                };
                let out = self.chebyshev(Ls { level, scale }, coeffs, *a, *b)?;
                Ok(ct(out, 1))
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
                self.circuit(Circuit::Sum {
                    n,
                    width: w,
                    full: *full,
                })?;
                Ok(T::Uint { width: out_w })
            }
            Op::IntCompare(_, _, rel) => {
                let w = self.uint_widths(args)?;
                self.need_tfhe()?;
                self.circuit(Circuit::Compare {
                    width: w,
                    rel: *rel,
                })?;
                Ok(T::Bit)
            }
            Op::IntMin(..) | Op::IntMax(..) => {
                let w = self.uint_widths(args)?;
                self.need_tfhe()?;
                self.circuit(Circuit::MinMax {
                    width: w,
                    min: matches!(op, Op::IntMin(..)),
                })?;
                Ok(T::Uint { width: w })
            }
        }
    }

    fn degree_one(&self, args: &[&ValueType]) -> VResult<ValueType> {
        match args[0] {
            t @ ValueType::CkksCiphertext { degree: 1, .. } => Ok(t.clone()),
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

    /// Records the node's circuit with the upper bound of its cost; the
    /// graph's total of circuit bits is capped here, before anything runs.
    fn circuit(&mut self, c: Circuit) -> VResult<()> {
        let (n, width) = c.shape();
        self.circuit_bits = self.circuit_bits.saturating_add(n.saturating_mul(width));
        if self.circuit_bits > MAX_GRAPH_CIRCUIT_BITS {
            return Err(ValidationError::TooLarge {
                what: "integer circuit bits (operands × width over all integer nodes)",
                len: self.circuit_bits,
                max: MAX_GRAPH_CIRCUIT_BITS,
            });
        }
        let bootstraps = c
            .bound(self.threads)
            .map_err(|e| self.invalid(e.to_string()))?;
        self.cur.circuit = Some(c);
        self.cur.bound_seconds = bootstraps as f64 * BOOTSTRAP_SECONDS;
        Ok(())
    }

    /// Adds the exact cost of node `node`'s circuit (run once per distinct
    /// circuit) to the node's cost.
    fn exact_circuit_cost(&mut self, node: NodeId, op: &'static str, c: Circuit) -> VResult<()> {
        self.node = node;
        self.op = op;
        let stats = match self.exact.get(&c) {
            Some(s) => *s,
            None => {
                let s = c.run().map_err(|e| self.invalid(e.to_string()))?;
                self.exact.insert(c, s);
                s
            }
        };
        let cost = &mut self.node_costs[node as usize];
        cost.bootstraps += stats.bootstraps;
        cost.bootstrap_depth += stats.depth;
        cost.seconds += stats.bootstraps as f64 * BOOTSTRAP_SECONDS;
        Ok(())
    }

    /// The level and scale `Evaluator::evaluate_chebyshev` produces, by the
    /// same steps (baby steps, giant steps, recursive division, leaves).
    fn chebyshev(&mut self, x: Ls, coeffs: &[f64], a: f64, b: f64) -> VResult<Ls> {
        let d = coeffs.len() - 1;
        let affine = a != -1.0 || b != 1.0;
        let log = (usize::BITS - d.max(1).leading_zeros()) as usize;
        let depth = log + 1 + affine as usize;
        if x.level < depth {
            return Err(self.exhausted(x.level, depth));
        }
        let y = if affine {
            self.mul_const(x, 2.0 / (b - a))?
        } else {
            x
        };
        let g = baby_count(d);
        let mut baby: Vec<Ls> = vec![y; g + 1];
        for k in 2..=g {
            let (j, i) = (k / 2, k - k / 2);
            let diff = if i == j { None } else { Some(baby[i - j]) };
            baby[k] = self.chebyshev_product(baby[j], baby[i], diff)?;
        }
        let mut giant = vec![(g, baby[g])];
        while let Some(&(n, t)) = giant.last()
            && 2 * n <= d
        {
            let t2 = self.chebyshev_product(t, t, None)?;
            giant.push((2 * n, t2));
        }
        self.cheb_rec(coeffs, &baby, &giant)
    }

    fn chebyshev_product(&mut self, tj: Ls, tk: Ls, diff: Option<Ls>) -> VResult<Ls> {
        let p = self.mul_relin_rescale(tj, tk)?;
        match diff {
            Some(t) => self.add(p, t),
            None => Ok(p),
        }
    }

    fn cheb_rec(&mut self, c: &[f64], baby: &[Ls], giant: &[(usize, Ls)]) -> VResult<Ls> {
        let g = giant[0].0;
        let d = c.len() - 1;
        if d < g {
            return self.cheb_leaf(c, baby);
        }
        let &(n, tn) = giant
            .iter()
            .rev()
            .find(|(n, _)| *n <= d)
            .ok_or_else(|| self.invalid("no giant step"))?;
        let (q, r) = divide(c, n);
        let qv = self.cheb_rec(&q, baby, giant)?;
        let prod = self.mul_relin_rescale(qv, tn)?;
        let rv = self.cheb_rec(&r, baby, giant)?;
        self.add(prod, rv)
    }

    fn cheb_leaf(&mut self, c: &[f64], baby: &[Ls]) -> VResult<Ls> {
        let used: Vec<usize> = (1..c.len()).filter(|&k| c[k] != 0.0).collect();
        let terms = if used.is_empty() { vec![1] } else { used };
        let level = terms.iter().map(|&k| baby[k].level).min().unwrap_or(0);
        if level == 0 {
            return Err(self.exhausted(0, 1));
        }
        let ql = self.q(level)?;
        let mut acc: Option<Ls> = None;
        for &k in &terms {
            let term = self.fits(Ls {
                level,
                scale: baby[k].scale * ql,
            })?;
            acc = Some(match acc {
                None => term,
                Some(a) => self.add(a, term)?,
            });
        }
        let acc = acc.ok_or_else(|| self.invalid("empty combination"))?;
        self.rescale(acc)
    }
}

fn level_of(t: &ValueType) -> usize {
    match t {
        ValueType::CkksCiphertext { level, .. } | ValueType::CkksPlaintext { level, .. } => *level,
        _ => 0,
    }
}

/// Baby-step count of the evaluator: a power of two near √(d + 1).
fn baby_count(d: usize) -> usize {
    let mut g = 1;
    while g * g < d + 1 {
        g *= 2;
    }
    g.max(2)
}

/// p = q·T_n + r in the Chebyshev basis (as the evaluator splits it).
fn divide(c: &[f64], n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut r = c[..n.min(c.len())].to_vec();
    let mut q = vec![0.0; c.len() - n];
    q[0] = c[n];
    for j in 1..c.len() - n {
        q[j] = 2.0 * c[n + j];
        r[n - j] -= c[n + j];
    }
    (q, r)
}

pub(crate) fn circuit_relation(r: crate::graph::Relation) -> circuits::Relation {
    match r {
        crate::graph::Relation::Lt => circuits::Relation::Lt,
        crate::graph::Relation::Le => circuits::Relation::Le,
        crate::graph::Relation::Gt => circuits::Relation::Gt,
        crate::graph::Relation::Ge => circuits::Relation::Ge,
    }
}
