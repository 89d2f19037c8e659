//! What a job costs, estimated before it runs: CKKS key switches and
//! rescales timed by a rough model, TFHE bootstraps counted on the clear
//! engine (bounded from the circuit's shape first, so an oversized job is
//! refused before anything runs), output sizes; and the limits a caller
//! holds the estimate to.

use std::collections::HashMap;
use std::sync::Arc;

use hecloud_bgv::BgvParameters;
use hecloud_circuits::circuits::{self, AdderKind, SumMode};
use hecloud_circuits::{BitEngine, ClearEngine, EncryptedUint, Stats, bound, with_cost};
use hecloud_ckks::CkksParameters;
use hecloud_ckks::plan::Step;

use super::{At, VResult, ValueType};
use crate::error::ValidationError;
use crate::graph::{Graph, NodeId};
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
/// Header of a TFHE container (see [`crate::object`]).
pub const TFHE_CONTAINER_HEADER: u64 = crate::object::TFHE_HEADER_LEN as u64;
/// Estimated seconds per TFHE bootstrap on one core (for the cost estimate).
pub const BOOTSTRAP_SECONDS: f64 = 0.012;

/// Limits a caller puts on the jobs it validates
/// ([`validate_with_limits`](super::validate_with_limits)).
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

    pub(super) fn allows(&self, est_seconds: f64) -> bool {
        est_seconds <= self.max_est_seconds
    }

    pub(super) fn refuse(&self, est_seconds: f64, upper_bound: bool) -> ValidationError {
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
    /// CKKS and BGV key switches (relinearizations, rotations, conjugations).
    pub key_switches: u64,
    /// CKKS rescales and BGV modulus switches.
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
    /// Ciphertexts refreshed by the key holder (refresh nodes).
    pub refreshes: u64,
    /// Bytes the refreshes send to the key holder (masked ciphertexts).
    pub refresh_bytes_up: u64,
    /// Bytes the key holder sends back (seeded fresh encryptions).
    pub refresh_bytes_down: u64,
}

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct NodeCost {
    key_switches: u64,
    rescales: u64,
    bootstraps: u64,
    bootstrap_depth: u64,
    seconds: f64,
    refreshes: u64,
    refresh_bytes_up: u64,
    refresh_bytes_down: u64,
    /// The node's integer circuit, costed exactly after the type pass.
    circuit: Option<Circuit>,
    /// Upper bound of the circuit's seconds (not included in `seconds`).
    bound_seconds: f64,
}

/// The shape of an integer node's circuit: all its cost depends on (with the
/// thread count, fixed for one validation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Circuit {
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

/// The cost of each node, gathered while the types are checked.
pub(super) struct Meter {
    ckks: Option<Arc<CkksParameters>>,
    bgv: Option<Arc<BgvParameters>>,
    node_costs: Vec<NodeCost>,
    /// The node being checked.
    cur: NodeCost,
    /// Threads the clear engine plans circuits for (the adder and the
    /// comparator layout depend on it).
    threads: usize,
    /// Operands × width over the integer nodes checked so far.
    circuit_bits: usize,
    /// Exact costs of the circuits run so far.
    exact: HashMap<Circuit, Stats>,
}

impl Meter {
    pub(super) fn new(ckks: Option<Arc<CkksParameters>>, bgv: Option<Arc<BgvParameters>>) -> Self {
        Self {
            ckks,
            bgv,
            node_costs: Vec::new(),
            cur: NodeCost::default(),
            threads: ClearEngine::new().threads(),
            circuit_bits: 0,
            exact: HashMap::new(),
        }
    }

    /// Starts costing node `node`.
    pub(super) fn begin(&mut self, node: NodeId) {
        self.cur = NodeCost::default();
        if self.node_costs.len() <= node as usize {
            self.node_costs
                .resize(node as usize + 1, NodeCost::default());
        }
    }

    /// Records the cost of node `node`, checked without error.
    pub(super) fn finish(&mut self, node: NodeId) {
        self.node_costs[node as usize] = self.cur;
    }

    /// Adds a planned CKKS step: its key switches timed at its level, its
    /// rescales counted. Rescales are timed only where the graph asks for
    /// one ([`Self::charge_rescale`]): those fused into a product ride in
    /// its key switch.
    pub(super) fn charge(&mut self, step: &Step) {
        for _ in 0..step.key_switches {
            self.cur.key_switches += 1;
            self.cur.seconds += self.key_switch_seconds(step.level);
        }
        self.cur.rescales += u64::from(step.rescales);
    }

    /// Adds a planned rescale, timed.
    pub(super) fn charge_rescale(&mut self, step: &Step) {
        self.charge(step);
        for _ in 0..step.rescales {
            self.cur.seconds += self.rescale_seconds(step.level);
        }
    }

    /// A rough model: a key switch at level l costs (dnum + 2)·(l + 1 + |P|)
    /// NTTs of size N, one NTT ≈ N·log2 N ns.
    fn key_switch_seconds(&self, level: usize) -> f64 {
        let Some(p) = &self.ckks else { return 0.0 };
        rlwe_key_switch_seconds(p.rlwe(), level)
    }

    /// A BGV key switch (relinearization, rotation) at `level`: timed as
    /// a CKKS one ([`Self::key_switch_seconds`]).
    pub(super) fn bgv_key_switch(&mut self, level: usize) {
        let Some(p) = &self.bgv else { return };
        self.cur.key_switches += 1;
        self.cur.seconds += rlwe_key_switch_seconds(p.rlwe(), level);
    }

    /// A BGV modulus switch of `polys` polynomials from `level`: one
    /// inverse and one forward NTT per polynomial and prime (counted with
    /// the rescales).
    pub(super) fn bgv_mod_switch(&mut self, level: usize, polys: usize) {
        let Some(p) = &self.bgv else { return };
        let n = p.n() as f64;
        self.cur.rescales += 1;
        self.cur.seconds += polys as f64 * (level as f64 + 1.0) * n * n.log2() * 1e-9;
    }

    /// A bootstrapping of `key_switches` key switches, timed as if all
    /// ran at the top level `top` (most of its rotations run near it).
    pub(super) fn bootstrap(&mut self, top: usize, key_switches: usize) {
        for _ in 0..key_switches {
            self.cur.key_switches += 1;
            self.cur.seconds += self.key_switch_seconds(top);
        }
    }

    /// A refresh of a ciphertext at `level` to `target` (either scheme):
    /// the server's mask (a public-key encryption of zero, about three
    /// NTTs per limb) and unmask, and the bytes each way (the masked
    /// ciphertext in full, the fresh one seeded).
    pub(super) fn refresh(&mut self, p: &hecloud_rlwe::Parameters, level: usize, target: usize) {
        let n = p.n() as f64;
        let header = hecloud_rlwe::serial::HEADER_LEN as u64;
        self.cur.refreshes += 1;
        self.cur.refresh_bytes_up += header + 2 * p.poly_bytes(level) as u64;
        self.cur.refresh_bytes_down += header + p.poly_bytes(target) as u64 + 32;
        self.cur.seconds += (3.0 * (level + 1 + p.p_basis().len()) as f64 + target as f64 + 1.0)
            * n
            * n.log2()
            * 1e-9;
    }

    /// Slot-wise BGV work on `polys` polynomials at `level` (sums, tensor
    /// products, scalar products): a few nanoseconds per residue.
    pub(super) fn bgv_pointwise(&mut self, level: usize, polys: usize) {
        let Some(p) = &self.bgv else { return };
        self.cur.seconds += 2.0 * polys as f64 * (level as f64 + 1.0) * p.n() as f64 * 1e-9;
    }

    fn rescale_seconds(&self, level: usize) -> f64 {
        let Some(p) = &self.ckks else { return 0.0 };
        let n = p.n() as f64;
        2.0 * (level as f64 + 1.0) * n * n.log2() * 1e-9
    }

    /// Records the node's circuit with the upper bound of its cost; the
    /// graph's total of circuit bits is capped here, before anything runs.
    pub(super) fn circuit(&mut self, at: At, c: Circuit) -> VResult<()> {
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
            .map_err(|e| at.invalid(e.to_string()))?;
        self.cur.circuit = Some(c);
        self.cur.bound_seconds = bootstraps as f64 * BOOTSTRAP_SECONDS;
        Ok(())
    }

    /// Upper bound of node `node`'s seconds: its integer circuit by its
    /// bootstrap bound, the rest as costed.
    pub(super) fn bound_seconds(&self, node: NodeId) -> f64 {
        let c = &self.node_costs[node as usize];
        c.seconds + c.bound_seconds
    }

    /// Adds the exact cost of the circuit of every integer node in `order`
    /// (the nodes that run; each distinct circuit run once: one that fails
    /// refuses the graph).
    pub(super) fn exact_costs(&mut self, graph: &Graph, order: &[NodeId]) -> VResult<()> {
        for &id in order {
            let Some(c) = self.node_costs[id as usize].circuit else {
                continue;
            };
            let at = At {
                node: id,
                op: graph.nodes[id as usize].name(),
            };
            let stats = match self.exact.get(&c) {
                Some(s) => *s,
                None => {
                    let s = c.run().map_err(|e| at.invalid(e.to_string()))?;
                    self.exact.insert(c, s);
                    s
                }
            };
            let cost = &mut self.node_costs[id as usize];
            cost.bootstraps += stats.bootstraps;
            cost.bootstrap_depth += stats.depth;
            cost.seconds += stats.bootstraps as f64 * BOOTSTRAP_SECONDS;
        }
        Ok(())
    }

    /// The estimate of the nodes that run (`order`) and of the outputs.
    pub(super) fn estimate(
        &self,
        graph: &Graph,
        order: &[NodeId],
        types: &[ValueType],
    ) -> CostEstimate {
        let mut cost = CostEstimate {
            nodes: order.len(),
            ..CostEstimate::default()
        };
        for &v in order {
            let c = self.node_costs[v as usize];
            cost.key_switches += c.key_switches;
            cost.rescales += c.rescales;
            cost.bootstraps += c.bootstraps;
            cost.bootstrap_depth += c.bootstrap_depth;
            cost.est_seconds += c.seconds;
            cost.refreshes += c.refreshes;
            cost.refresh_bytes_up += c.refresh_bytes_up;
            cost.refresh_bytes_down += c.refresh_bytes_down;
        }
        for o in &graph.outputs {
            cost.output_bytes += match &types[o.node as usize] {
                ValueType::CkksCiphertext { level, degree, .. } => self
                    .ckks
                    .as_ref()
                    .map(|p| ckks_ciphertext_bytes(p, *level, degree + 1))
                    .unwrap_or(0),
                ValueType::CkksPlaintext { level, .. } => self
                    .ckks
                    .as_ref()
                    .map(|p| ckks_ciphertext_bytes(p, *level, 1))
                    .unwrap_or(0),
                ValueType::Uint { width } => TFHE_CONTAINER_HEADER + *width as u64 * TFHE_BIT_BYTES,
                ValueType::Bit => TFHE_CONTAINER_HEADER + TFHE_BIT_BYTES,
                ValueType::BgvCiphertext { level, degree, .. } => self
                    .bgv
                    .as_ref()
                    .map(|p| {
                        (hecloud_rlwe::serial::HEADER_LEN
                            + p.rlwe().poly_bytes(*level) * (degree + 1))
                            as u64
                    })
                    .unwrap_or(0),
                ValueType::Constant(_) | ValueType::Plain { .. } => 0,
            };
        }
        cost
    }
}

/// The rough model of a key switch at level l: (dnum + 2)·(l + 1 + |P|)
/// NTTs of size N, one NTT ≈ N·log2 N ns.
fn rlwe_key_switch_seconds(p: &hecloud_rlwe::Parameters, level: usize) -> f64 {
    let n = p.n() as f64;
    let k = p.p_basis().len() as f64;
    let dnum = p.dnum() as f64;
    (dnum + 2.0) * (level as f64 + 1.0 + k) * n * n.log2() * 1e-9
}

pub(crate) fn circuit_relation(r: crate::graph::Relation) -> circuits::Relation {
    match r {
        crate::graph::Relation::Lt => circuits::Relation::Lt,
        crate::graph::Relation::Le => circuits::Relation::Le,
        crate::graph::Relation::Gt => circuits::Relation::Gt,
        crate::graph::Relation::Ge => circuits::Relation::Ge,
    }
}
