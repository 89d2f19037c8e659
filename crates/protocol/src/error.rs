//! Typed errors: a session that cannot be set up, an object payload that is
//! refused, a graph refused before it runs, a job that fails while running.
//! Each carries a human-readable reason (`Display`); the server maps
//! [`SessionError`], [`ObjectError`] and [`ValidationError`] to gRPC
//! `INVALID_ARGUMENT`.

use thiserror::Error;

use crate::codec::DecodeError;
use crate::graph::NodeId;
use crate::session::{ObjectId, ObjectKind};

/// A session that cannot be set up from its spec and key objects.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum SessionError {
    /// The CKKS parameters are invalid or not 128-bit secure.
    #[error("CKKS parameters: {0}")]
    Ckks(#[from] hecloud_ckks::CkksError),
    /// The BGV parameters are invalid or not 128-bit secure.
    #[error("BGV parameters: {0}")]
    Bgv(#[from] hecloud_bgv::BgvError),
    /// A referenced key object is not available.
    #[error("key object {0} is not available")]
    MissingObject(ObjectId),
    /// A key object's bytes do not hash to its id.
    #[error("key object {0} does not match its content hash")]
    HashMismatch(ObjectId),
    /// A key object is refused.
    #[error("key object {id}: {source}")]
    Object {
        /// The object.
        id: ObjectId,
        /// Why.
        source: ObjectError,
    },
    /// A key is given for a scheme the session has no parameters for.
    #[error("a {0} key is given but the session has no {0} parameters")]
    NoParameters(&'static str),
    /// Two Galois keys for one Galois element.
    #[error("two Galois keys for Galois element {0}")]
    DuplicateGaloisKey(u64),
    /// The bootstrapping part is refused: a circuit the parameters cannot
    /// hold, a key it needs missing (rotation, conjugation, relinearization,
    /// encapsulation), encapsulation keys of other parameters.
    #[error("bootstrapping: {0}")]
    Bootstrap(hecloud_ckks::CkksError),
    /// The session's keys of one scheme were made under different secret
    /// keys (e.g. a relinearization key of one key folder and a Galois key
    /// of another): evaluating with them would give noise.
    #[error("the session's {scheme} keys were made under different secret keys")]
    KeyMismatch {
        /// The scheme whose keys disagree.
        scheme: &'static str,
    },
}

/// An object payload refused (malformed, foreign, of the wrong kind).
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum ObjectError {
    /// The RLWE/CKKS deserializer refused the bytes.
    #[error("{0}")]
    Rlwe(#[from] hecloud_rlwe::RlweError),
    /// The TFHE container or a TFHE-rs object inside it was refused.
    #[error("TFHE object: {0}")]
    Tfhe(String),
    /// The container framing was refused.
    #[error("{0}")]
    Decode(#[from] DecodeError),
    /// The session has no parameters for this kind of object.
    #[error("the session has no {scheme} parameters for a {kind:?} object")]
    NoParameters {
        /// The scheme missing.
        scheme: &'static str,
        /// The object kind.
        kind: ObjectKind,
    },
    /// An object of another parameter set than the session's.
    #[error("object {0} belongs to another parameter set than the session's")]
    ParameterMismatch(ObjectId),
    /// A kind that cannot be used here (a key where a job input is expected…).
    #[error("a {kind:?} object cannot be used as {usage}")]
    WrongKind {
        /// The kind.
        kind: ObjectKind,
        /// What it was used as.
        usage: &'static str,
    },
}

/// Why a graph was refused before running. Every variant names the node at
/// fault (where there is one) and says why in words.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum ValidationError {
    /// A graph without outputs computes nothing.
    #[error("the graph has no outputs")]
    NoOutputs,
    /// More nodes, outputs, operands … than the protocol allows.
    #[error("{what}: {len} exceeds the limit {max}")]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A node reads a node that does not exist.
    #[error("node {node} ({op}) reads node {operand}, which does not exist")]
    DanglingOperand {
        /// The reading node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// The missing node.
        operand: NodeId,
    },
    /// An input node refers past the job's inputs.
    #[error("node {node} reads job input {index}, but the job has {count} inputs")]
    MissingInput {
        /// The input node.
        node: NodeId,
        /// The input position.
        index: u32,
        /// Number of inputs.
        count: usize,
    },
    /// The graph has a cycle through this node.
    #[error("the graph has a cycle through node {node}")]
    Cycle {
        /// A node on the cycle.
        node: NodeId,
    },
    /// An output that is empty, duplicated, too long or names no node.
    #[error("output {name:?}: {reason}")]
    BadOutput {
        /// The output name.
        name: String,
        /// Why.
        reason: String,
    },
    /// Operand types the operation does not accept.
    #[error("node {node} ({op}): {reason}")]
    TypeMismatch {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// What was found and what is accepted.
        reason: String,
    },
    /// Not enough levels left.
    #[error(
        "node {node} ({op}): levels exhausted — needs level ≥ {need}, the operand is at level {level}"
    )]
    LevelsExhausted {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// Level of the operand.
        level: usize,
        /// Level needed.
        need: usize,
    },
    /// Operands at different scales.
    #[error(
        "node {node} ({op}): scale mismatch 2^{left:.4} vs 2^{right:.4}, relative difference {:.1e} (rescale one operand first)",
        ((left - right) * std::f64::consts::LN_2).exp_m1().abs()
    )]
    ScaleMismatch {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// log2 of the left scale.
        left: f64,
        /// log2 of the right scale.
        right: f64,
    },
    /// A scale that leaves no room for the message at this level.
    #[error(
        "node {node} ({op}): scale 2^{log_scale:.1} exceeds the modulus 2^{log_q:.1} at level {level} (rescale first)"
    )]
    ScaleOverflow {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// log2 of the scale.
        log_scale: f64,
        /// log2 of Q_level.
        log_q: f64,
        /// The level.
        level: usize,
    },
    /// A scale so small that the message is lost in the noise.
    #[error(
        "node {node} ({op}): scale 2^{log_scale:.1} is below the minimum 2^{min} — the message would drown in noise (rescaled once too often?)"
    )]
    ScaleUnderflow {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// log2 of the scale.
        log_scale: f64,
        /// Smallest log2 accepted.
        min: f64,
    },
    /// A refresh node the session or the ciphertext cannot serve: no
    /// refresh part (public key) in the session, no modulus headroom for
    /// the mask at the operand's level, a target level out of range.
    #[error("node {node} ({op}) cannot refresh: {reason}")]
    RefreshRefused {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// Why.
        reason: String,
    },
    /// A bootstrap node the session or the ciphertext cannot serve: no
    /// bootstrapping part in the session, an operand whose scale is above
    /// what the circuit takes.
    #[error("node {node} ({op}) cannot bootstrap: {reason}")]
    BootstrapRefused {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// Why.
        reason: String,
    },
    /// The relinearization key is needed but the session has none.
    #[error("node {node} ({op}) needs the relinearization key, which the session does not have")]
    MissingRelinKey {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
    },
    /// A Galois key is needed but the session does not have it.
    #[error(
        "node {node} ({op}) needs the Galois key for {what} (Galois element {element}), which the session does not have"
    )]
    MissingGaloisKey {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// The rotation ("rotation by 3") or "conjugation".
        what: String,
        /// The Galois element.
        element: usize,
    },
    /// The TFHE server key is needed but the session does not have it.
    #[error("node {node} ({op}) needs the TFHE server key, which the session does not have")]
    MissingServerKey {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
    },
    /// The session has no parameters for the scheme an operation needs.
    #[error("node {node} ({op}): the session has no {scheme} parameters")]
    SchemeUnavailable {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// The scheme.
        scheme: &'static str,
    },
    /// A bad argument (rotation count, polynomial, widths, vector length…).
    #[error("node {node} ({op}): {reason}")]
    InvalidArgument {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// Why.
        reason: String,
    },
    /// The estimated noise budget of a BGV value would run out: the
    /// computation needs more depth than the parameters give (predicted by
    /// the evaluator's own noise model, before anything runs).
    #[error(
        "node {node} ({op}): BGV noise budget exhausted — the result would keep {budget_bits:.1} bits at level {level}, fewer than the 4 required (fewer products in a row, or larger parameters)"
    )]
    BudgetExhausted {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// Level of the value that would run out.
        level: usize,
        /// Its estimated budget in bits (below
        /// `hecloud_bgv::BgvParameters::MIN_BUDGET_BITS`).
        budget_bits: f64,
    },
    /// A packed-bit (bits-in-slots) BGV circuit deeper than its operands
    /// allow: the server runs it without a refresh (it holds no secret
    /// key), so every product needs a level and a noise budget of its own.
    #[error(
        "node {node} ({op}): needs multiplicative depth {need}, the operands allow {available} without a refresh (fewer bits, operands at a higher level, or larger parameters)"
    )]
    DepthExhausted {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// Depth the circuit needs ([`hecloud_circuits::packed::depth`]).
        need: usize,
        /// Products in a row the operands survive under the BGV noise
        /// model, each at a level above q_0.
        available: usize,
    },
    /// A bits-in-slots circuit whose numbers and shifts do not fit a row of
    /// slots (the circuit would refuse with
    /// [`hecloud_circuits::packed::PackedError::RowTooShort`]).
    #[error(
        "node {node} ({op}): the circuit needs {need} slots per row, the parameters have {row}"
    )]
    RowTooShort {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// Slots per row needed.
        need: usize,
        /// Slots per row (N/2).
        row: usize,
    },
    /// The job's estimated cost exceeds the caller's limit
    /// ([`crate::ValidationLimits`]).
    #[error(
        "the job's estimated cost{} of {est_seconds:.1} s exceeds the limit of {max_seconds:.1} s",
        bound_note(*upper_bound)
    )]
    TooCostly {
        /// Estimated single-core seconds ([`crate::CostEstimate::est_seconds`]),
        /// or an upper bound of it (see `upper_bound`); when the refusal came
        /// before every node was checked, only the nodes checked so far.
        est_seconds: f64,
        /// The limit.
        max_seconds: f64,
        /// Whether `est_seconds` is the upper bound computed before the
        /// circuits ran, rather than the exact estimate.
        upper_bound: bool,
    },
}

fn bound_note(upper_bound: bool) -> &'static str {
    if upper_bound {
        " (upper bound, so far)"
    } else {
        ""
    }
}

impl ValidationError {
    /// The node at fault, where there is one.
    pub fn node(&self) -> Option<NodeId> {
        match self {
            Self::DanglingOperand { node, .. }
            | Self::MissingInput { node, .. }
            | Self::Cycle { node }
            | Self::TypeMismatch { node, .. }
            | Self::LevelsExhausted { node, .. }
            | Self::ScaleMismatch { node, .. }
            | Self::ScaleOverflow { node, .. }
            | Self::ScaleUnderflow { node, .. }
            | Self::MissingRelinKey { node, .. }
            | Self::RefreshRefused { node, .. }
            | Self::BootstrapRefused { node, .. }
            | Self::MissingGaloisKey { node, .. }
            | Self::MissingServerKey { node, .. }
            | Self::SchemeUnavailable { node, .. }
            | Self::InvalidArgument { node, .. }
            | Self::BudgetExhausted { node, .. }
            | Self::DepthExhausted { node, .. }
            | Self::RowTooShort { node, .. } => Some(*node),
            Self::NoOutputs
            | Self::TooLarge { .. }
            | Self::BadOutput { .. }
            | Self::TooCostly { .. } => None,
        }
    }
}

/// Why a validated graph failed while running.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum ExecError {
    /// The cancellation flag was raised; `done` nodes had run.
    #[error("cancelled after {done} of {total} nodes")]
    Cancelled {
        /// Nodes evaluated before the cancellation was seen.
        done: usize,
        /// Nodes to evaluate in all.
        total: usize,
    },
    /// The inputs given differ from those the graph was validated against.
    #[error("input {index}: {reason}")]
    InputMismatch {
        /// The input position.
        index: usize,
        /// Why.
        reason: String,
    },
    /// The keys given differ from those the graph was validated against.
    #[error("the session keys do not match the validated graph: {0}")]
    KeysMismatch(String),
    /// The CKKS evaluator failed at this node.
    #[error("node {node} ({op}): {source}")]
    Ckks {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// The evaluator's error.
        source: hecloud_ckks::CkksError,
    },
    /// The BGV evaluator failed at this node.
    #[error("node {node} ({op}): {source}")]
    Bgv {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// The evaluator's error.
        source: hecloud_bgv::BgvError,
    },
    /// An integer circuit failed at this node.
    #[error("node {node} ({op}): {source}")]
    Circuit {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// The circuit's error.
        source: hecloud_circuits::CircuitError,
    },
    /// A refresh failed at this node: no key holder, a link failure, a
    /// refusal, or a reply that does not match its request
    /// ([`crate::refresh::RefreshError`]).
    #[error("node {node} ({op}): {reason}")]
    Refresh {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// Why.
        reason: String,
    },
    /// A value of an unexpected kind reached a node (a bug: validation
    /// should have refused the graph).
    #[error("node {node} ({op}): internal type error: {reason}")]
    Internal {
        /// The node.
        node: NodeId,
        /// Its operation.
        op: &'static str,
        /// What went wrong.
        reason: String,
    },
}
