//! The computation graph a client submits: typed nodes for the CKKS operations
//! and the integer circuits over TFHE, and named outputs.
//!
//! A graph is a list of nodes; a node refers to other nodes by their index
//! ([`NodeId`]) and to the job's input objects by their position
//! ([`Op::Input`]). Nothing about a graph is trusted: references may dangle,
//! form cycles or mix types — [`crate::validate()`] finds all of that before
//! anything runs.
//!
//! ```
//! use hecloud_protocol::{Graph, Message};
//! // y = rotate-and-sum over 8 slots of (x0 · x1 + 0.5)
//! let mut g = Graph::new();
//! let (x0, x1) = (g.input(0), g.input(1));
//! let p = g.mul(x0, x1);
//! let p = g.rescale(p);
//! let c = g.constant(0.5);
//! let s = g.add(p, c);
//! let y = g.rotate_and_sum(s, 8);
//! g.output("y", y);
//! let bytes = g.encode();
//! assert_eq!(Graph::decode(&bytes).unwrap(), g);
//! ```

use crate::codec::{DecodeError, DecodeResult, Message, MessageKind, Reader, Writer};

/// Index of a node in [`Graph::nodes`].
pub type NodeId = u32;

/// Most nodes in one graph.
pub const MAX_NODES: usize = 1 << 16;
/// Most named outputs of one graph.
pub const MAX_OUTPUTS: usize = 1024;
/// Longest output name, in bytes.
pub const MAX_NAME_LEN: usize = 128;
/// Longest clear vector operand (N/2 slots at N = 2^17).
pub const MAX_PLAIN_LEN: usize = 1 << 16;
/// Most Chebyshev coefficients of one polynomial (degree + 1).
pub const MAX_CHEBYSHEV_COEFFS: usize = 1 << 11;
/// Most operands of one integer sum.
pub const MAX_SUM_OPERANDS: usize = 1 << 12;
/// Largest bound of a BGV comparison ([`Op::BgvLessThan`]): its polynomial
/// has degree 2·bound − 2 and is interpolated when the graph is validated.
pub const MAX_BGV_COMPARE_BOUND: u64 = 1 << 10;

/// Which relation an integer comparison outputs (as one encrypted bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Relation {
    /// `a < b`
    Lt = 0,
    /// `a ≤ b`
    Le = 1,
    /// `a > b`
    Gt = 2,
    /// `a ≥ b`
    Ge = 3,
}

impl Relation {
    fn from_u8(t: u8) -> DecodeResult<Self> {
        Ok(match t {
            0 => Self::Lt,
            1 => Self::Le,
            2 => Self::Gt,
            3 => Self::Ge,
            _ => {
                return Err(DecodeError::UnknownTag {
                    field: "relation",
                    tag: t as u64,
                });
            }
        })
    }

    /// Whether the relation holds between two clear values (the reference).
    pub fn holds(self, a: u128, b: u128) -> bool {
        match self {
            Self::Lt => a < b,
            Self::Le => a <= b,
            Self::Gt => a > b,
            Self::Ge => a >= b,
        }
    }
}

/// One operation of the graph.
///
/// CKKS operations take ciphertexts and, where noted, plaintext operands: a
/// plaintext input object, a clear vector ([`Op::Plain`], encoded by the server
/// at the level and scale the operation needs) or a real constant
/// ([`Op::Constant`]). Integer operations take encrypted unsigned integers
/// (TFHE, one bit per ciphertext). BGV operations (`Bgv…`) take BGV
/// ciphertexts of integer vectors mod t and compute slot-wise, exactly; the
/// noise budget of every value is predicted before anything runs. The enum
/// grows with the schemes: a tag this build does not know is refused when
/// decoding.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Op {
    /// The job's input object at this position.
    Input(u32),
    /// A real constant operand (in every slot).
    Constant(f64),
    /// A clear real vector operand (slot i holds value i, the rest 0).
    Plain(Vec<f64>),
    /// `a + b`: ciphertext + ciphertext, plaintext, vector or constant (either order).
    Add(NodeId, NodeId),
    /// `a − b`: ciphertext − ciphertext, plaintext, vector or constant (either order).
    Sub(NodeId, NodeId),
    /// `−a` of a ciphertext.
    Neg(NodeId),
    /// `a · b` (no rescale): ciphertext × ciphertext (relinearized, needs the
    /// relinearization key), × plaintext or vector (scale multiplied; a vector
    /// is encoded at scale q_l so a following rescale restores the scale),
    /// × constant (an integer costs nothing, and must itself be representable
    /// at the ciphertext's level and scale, or every value of magnitude 1
    /// would wrap; another real consumes one level and keeps the scale).
    Mul(NodeId, NodeId),
    /// Divides by the last prime: one level down, scale / q_l.
    Rescale(NodeId),
    /// Rotates the slots left by k (negative: right); needs the Galois key of k.
    Rotate(NodeId, i64),
    /// Slot j gets Σ_{t<n} slot (j + t); n a power of two; needs the Galois keys
    /// of 1, 2, 4, …, n/2.
    RotateAndSum(NodeId, u32),
    /// Complex conjugation of every slot; needs the conjugation Galois key.
    Conjugate(NodeId),
    /// The ciphertext reduced to the given lower level: primes dropped, value
    /// and scale kept, no noise added. A result the client only decrypts
    /// travels best at `CkksParameters::checked_decoding_level` (the primes
    /// decoding reads and one that checks them); validation refuses a
    /// lower one, where a value beyond the headroom would decode as another.
    DropLevel(NodeId, u32),
    /// The ciphertext reduced to the lowest level that still decodes with a
    /// check, `CkksParameters::checked_decoding_level` of its scale and
    /// level, computed by the server: a [`Op::DropLevel`] for a result the
    /// client only decrypts, without the client working the level out.
    DropForDecryption(NodeId),
    /// p(x) = Σ c_k T_k(y), y = (2x − a − b)/(b − a), slot-wise (Chebyshev basis,
    /// baby-step giant-step).
    Chebyshev {
        /// The ciphertext x.
        input: NodeId,
        /// Chebyshev coefficients c_0 … c_d.
        coeffs: Vec<f64>,
        /// Left end of the interval.
        a: f64,
        /// Right end of the interval.
        b: f64,
    },
    /// Sum of n encrypted integers of one width (carry-save tree and a final
    /// adder); `full` grows the width by ⌈log2 n⌉ bits, else it wraps.
    IntSum {
        /// Operands, all of one width.
        inputs: Vec<NodeId>,
        /// Full-width result instead of wrapping.
        full: bool,
    },
    /// One encrypted bit: whether `a rel b` holds.
    IntCompare(NodeId, NodeId, Relation),
    /// min(a, b) of two encrypted integers.
    IntMin(NodeId, NodeId),
    /// max(a, b) of two encrypted integers.
    IntMax(NodeId, NodeId),
    /// `a + b` of two BGV ciphertexts (slot-wise mod t).
    BgvAdd(NodeId, NodeId),
    /// `a − b` of two BGV ciphertexts.
    BgvSub(NodeId, NodeId),
    /// `−a` of a BGV ciphertext.
    BgvNeg(NodeId),
    /// `a · b` of two BGV ciphertexts, relinearized and switched one level
    /// down (needs the BGV relinearization key).
    BgvMul(NodeId, NodeId),
    /// The sum of many BGV ciphertexts.
    BgvSum(Vec<NodeId>),
    /// The sum of all N slots, in every slot (needs the Galois keys of the
    /// row rotations by 1, 2, 4, …, N/4 and of the column swap).
    BgvSlotSum(NodeId),
    /// Rotates both rows left by k (negative: right); needs the Galois key
    /// of k, or those of the powers of two k is made of.
    BgvRotateRows(NodeId, i64),
    /// Swaps the two rows (needs the column-swap Galois key).
    BgvRotateColumns(NodeId),
    /// `a + c` in every slot (c below t).
    BgvAddScalar(NodeId, u64),
    /// `a · c` in every slot (c below t).
    BgvMulScalar(NodeId, u64),
    /// 1 in the slots where `a < b`, 0 elsewhere, for values below `bound`
    /// (2·bound ≤ t, bound ≤ [`MAX_BGV_COMPARE_BOUND`]): one polynomial of
    /// degree 2·bound − 2 in a − b ([`hecloud_bgv::poly::LessThan`]); needs
    /// the relinearization key and about log2(2·bound) + 1 levels of depth.
    BgvLessThan {
        /// Left operand.
        a: NodeId,
        /// Right operand.
        b: NodeId,
        /// The values compared lie below this bound.
        bound: u64,
    },
    /// The ciphertext switched down to this level (noise divided by the
    /// primes dropped): a result travels smaller.
    BgvModSwitch(NodeId, u32),
    /// `a + b mod 2^width` of two bits-in-slots numbers: BGV ciphertexts
    /// holding the bits of one number in slots 0..width of row 0 (LSB in
    /// slot 0), 0 or 1 each, every other slot 0
    /// ([`hecloud_circuits::packed::SlotUint`]). The result has the same
    /// layout. Kogge–Stone in the slots
    /// ([`hecloud_circuits::packed::slots::add`]): multiplicative depth
    /// [`hecloud_circuits::packed::depth::add`] = 2 + ⌈log2(width − 1)⌉,
    /// run without a refresh (the server holds no secret key), so the
    /// operands need that many levels; needs the relinearization key and the
    /// Galois keys of the row rotations right by 1, 2, 4, …
    /// ([`hecloud_circuits::packed::slot_rotations`]). Width 2..=1024,
    /// width + 2^(⌈log2(width − 1)⌉ − 1) + 1 ≤ N/2.
    BgvBitsAdd {
        /// Left operand.
        a: NodeId,
        /// Right operand.
        b: NodeId,
        /// Bits per number.
        width: u32,
    },
    /// The sum mod 2^width of n ≥ 2 bits-in-slots numbers (layout of
    /// [`Op::BgvBitsAdd`]): carry-save stages on whole rows, one
    /// Kogge–Stone adder, a mask clearing the slots ≥ width
    /// ([`hecloud_circuits::packed::slots::sum`]); depth
    /// [`hecloud_circuits::packed::depth::sum`] (2 + ⌈log2(width − 1)⌉
    /// for two, 2·s(n) + 2 + ⌈log2(width − 1)⌉ at most with s(n) ≈
    /// log_{3/2}(n/2) carry-save stages).
    BgvBitsSum {
        /// Operands, all of `width` bits.
        inputs: Vec<NodeId>,
        /// Bits per number.
        width: u32,
    },
    /// Whether `a < b` for two bits-in-slots numbers of `width` bits: the
    /// carry of ¬a + b ([`hecloud_circuits::packed::slots::lt`]). The result
    /// holds the answer bit (0 or 1) in slot width − 1 of row 0 — the slot
    /// [`hecloud_circuits::packed::SlotBit::slot`] names — and 0 in every
    /// other slot (masked), factor 1. Depth
    /// [`hecloud_circuits::packed::depth::lt`] = 1 + ⌈log2 width⌉; needs
    /// width + 2^(⌈log2 width⌉ − 1) ≤ N/2.
    BgvBitsLessThan {
        /// Left operand.
        a: NodeId,
        /// Right operand.
        b: NodeId,
        /// Bits per number.
        width: u32,
    },
    /// Whether `a > b`: [`Op::BgvBitsLessThan`] of (b, a), the same layout
    /// (answer in slot width − 1, every other slot 0) and depth.
    BgvBitsGreaterThan {
        /// Left operand.
        a: NodeId,
        /// Right operand.
        b: NodeId,
        /// Bits per number.
        width: u32,
    },
    /// A fresh encryption of the CKKS ciphertext's values at the given
    /// level, same scale, by client-aided refresh ([`crate::refresh`]): the
    /// server masks, the session's key holder decrypts and encrypts again,
    /// the server unmasks. No level is spent. Needs a session with a refresh
    /// part (a CKKS public key), a relinearized (degree-1) operand at a
    /// level whose modulus has the mask's headroom
    /// ([`hecloud_ckks::refresh::MaskPolicy::lowest_level`]), and a key
    /// holder online while the job runs. Refreshes that are ready together
    /// travel in one round trip.
    Refresh(NodeId, u32),
    /// A fresh encryption of the BGV ciphertext's slots at the given level
    /// (fresh noise, factor 1), by client-aided refresh: the operand is
    /// switched to level 0 and masked uniformly mod t. Needs a session with
    /// a BGV public key and a key holder online.
    BgvRefresh(NodeId, u32),
    /// A fresh encryption of the CKKS ciphertext's values by bootstrapping
    /// ([`hecloud_ckks::boot`]), on the server alone: the operand is
    /// dropped to level 0 and comes out at the circuit's output level and
    /// the default scale. Needs a session with a bootstrapping part (the
    /// circuit, its encapsulation keys, the rotation, conjugation and
    /// relinearization keys it uses) and a relinearized operand whose
    /// scale is at most q₀/2^ratio. Seconds of work at N = 2^16.
    Bootstrap(NodeId),
}

/// The places of an operation's operands, in operand order: one match for
/// both [`Op::operands`] and [`Op::operands_mut`] (the bindings borrow as
/// the matched reference does).
macro_rules! operand_places {
    ($op:expr) => {
        match $op {
            Op::Input(_) | Op::Constant(_) | Op::Plain(_) => vec![],
            Op::Neg(a)
            | Op::Rescale(a)
            | Op::Rotate(a, _)
            | Op::RotateAndSum(a, _)
            | Op::Conjugate(a)
            | Op::DropLevel(a, _)
            | Op::DropForDecryption(a)
            | Op::Chebyshev { input: a, .. }
            | Op::BgvNeg(a)
            | Op::BgvSlotSum(a)
            | Op::BgvRotateRows(a, _)
            | Op::BgvRotateColumns(a)
            | Op::BgvAddScalar(a, _)
            | Op::BgvMulScalar(a, _)
            | Op::BgvModSwitch(a, _)
            | Op::Refresh(a, _)
            | Op::BgvRefresh(a, _)
            | Op::Bootstrap(a) => vec![a],
            Op::Add(a, b)
            | Op::Sub(a, b)
            | Op::Mul(a, b)
            | Op::IntCompare(a, b, _)
            | Op::IntMin(a, b)
            | Op::IntMax(a, b)
            | Op::BgvAdd(a, b)
            | Op::BgvSub(a, b)
            | Op::BgvMul(a, b)
            | Op::BgvLessThan { a, b, .. }
            | Op::BgvBitsAdd { a, b, .. }
            | Op::BgvBitsLessThan { a, b, .. }
            | Op::BgvBitsGreaterThan { a, b, .. } => vec![a, b],
            Op::IntSum { inputs, .. } | Op::BgvSum(inputs) | Op::BgvBitsSum { inputs, .. } => {
                inputs.into_iter().collect()
            }
        }
    };
}

impl Op {
    /// Short name (for errors and logs).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input(_) => "input",
            Op::Constant(_) => "constant",
            Op::Plain(_) => "plain",
            Op::Add(..) => "add",
            Op::Sub(..) => "sub",
            Op::Neg(_) => "neg",
            Op::Mul(..) => "mul",
            Op::Rescale(_) => "rescale",
            Op::Rotate(..) => "rotate",
            Op::RotateAndSum(..) => "rotate_and_sum",
            Op::Conjugate(_) => "conjugate",
            Op::DropLevel(..) => "drop_level",
            Op::DropForDecryption(_) => "drop_for_decryption",
            Op::Chebyshev { .. } => "chebyshev",
            Op::IntSum { .. } => "int_sum",
            Op::IntCompare(..) => "int_compare",
            Op::IntMin(..) => "int_min",
            Op::IntMax(..) => "int_max",
            Op::BgvAdd(..) => "bgv_add",
            Op::BgvSub(..) => "bgv_sub",
            Op::BgvNeg(_) => "bgv_neg",
            Op::BgvMul(..) => "bgv_mul",
            Op::BgvSum(_) => "bgv_sum",
            Op::BgvSlotSum(_) => "bgv_slot_sum",
            Op::BgvRotateRows(..) => "bgv_rotate_rows",
            Op::BgvRotateColumns(_) => "bgv_rotate_columns",
            Op::BgvAddScalar(..) => "bgv_add_scalar",
            Op::BgvMulScalar(..) => "bgv_mul_scalar",
            Op::BgvLessThan { .. } => "bgv_less_than",
            Op::BgvModSwitch(..) => "bgv_mod_switch",
            Op::BgvBitsAdd { .. } => "bgv_bits_add",
            Op::BgvBitsSum { .. } => "bgv_bits_sum",
            Op::BgvBitsLessThan { .. } => "bgv_bits_lt",
            Op::BgvBitsGreaterThan { .. } => "bgv_bits_gt",
            Op::Refresh(..) => "refresh",
            Op::BgvRefresh(..) => "bgv_refresh",
            Op::Bootstrap(_) => "bootstrap",
        }
    }

    /// The nodes this operation reads, in operand order.
    pub fn operands(&self) -> Vec<NodeId> {
        operand_places!(self).into_iter().copied().collect()
    }

    /// The operands, mutable (for graph rewrites such as the insertion of
    /// refreshes), in the order of [`Op::operands`].
    pub fn operands_mut(&mut self) -> Vec<&mut NodeId> {
        operand_places!(self)
    }
}

/// A named result of the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Name (unique in the graph, 1..=[`MAX_NAME_LEN`] bytes).
    pub name: String,
    /// The node whose value is returned.
    pub node: NodeId,
}

/// A computation graph: nodes and named outputs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Graph {
    /// The operations; node i is `nodes[i]`.
    pub nodes: Vec<Op>,
    /// The results returned, in order.
    pub outputs: Vec<Output>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a node and returns its id.
    pub fn push(&mut self, op: Op) -> NodeId {
        self.nodes.push(op);
        (self.nodes.len() - 1) as NodeId
    }

    /// Names the value of `node` as an output.
    pub fn output(&mut self, name: impl Into<String>, node: NodeId) {
        self.outputs.push(Output {
            name: name.into(),
            node,
        });
    }

    /// [`Op::Input`].
    pub fn input(&mut self, index: u32) -> NodeId {
        self.push(Op::Input(index))
    }
    /// [`Op::Constant`].
    pub fn constant(&mut self, c: f64) -> NodeId {
        self.push(Op::Constant(c))
    }
    /// [`Op::Plain`].
    pub fn plain(&mut self, values: Vec<f64>) -> NodeId {
        self.push(Op::Plain(values))
    }
    /// [`Op::Add`].
    pub fn add(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.push(Op::Add(a, b))
    }
    /// [`Op::Sub`].
    pub fn sub(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.push(Op::Sub(a, b))
    }
    /// [`Op::Neg`].
    pub fn neg(&mut self, a: NodeId) -> NodeId {
        self.push(Op::Neg(a))
    }
    /// [`Op::Mul`].
    pub fn mul(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.push(Op::Mul(a, b))
    }
    /// [`Op::Rescale`].
    pub fn rescale(&mut self, a: NodeId) -> NodeId {
        self.push(Op::Rescale(a))
    }
    /// [`Op::Rotate`].
    pub fn rotate(&mut self, a: NodeId, k: i64) -> NodeId {
        self.push(Op::Rotate(a, k))
    }
    /// [`Op::RotateAndSum`].
    pub fn rotate_and_sum(&mut self, a: NodeId, n: u32) -> NodeId {
        self.push(Op::RotateAndSum(a, n))
    }
    /// [`Op::DropLevel`].
    pub fn drop_level(&mut self, a: NodeId, level: u32) -> NodeId {
        self.push(Op::DropLevel(a, level))
    }
    /// [`Op::DropForDecryption`].
    pub fn drop_for_decryption(&mut self, a: NodeId) -> NodeId {
        self.push(Op::DropForDecryption(a))
    }
    /// [`Op::Conjugate`].
    pub fn conjugate(&mut self, a: NodeId) -> NodeId {
        self.push(Op::Conjugate(a))
    }
    /// [`Op::Chebyshev`].
    pub fn chebyshev(&mut self, input: NodeId, coeffs: Vec<f64>, a: f64, b: f64) -> NodeId {
        self.push(Op::Chebyshev {
            input,
            coeffs,
            a,
            b,
        })
    }
    /// [`Op::IntSum`].
    pub fn int_sum(&mut self, inputs: Vec<NodeId>, full: bool) -> NodeId {
        self.push(Op::IntSum { inputs, full })
    }
    /// [`Op::IntCompare`].
    pub fn int_compare(&mut self, a: NodeId, b: NodeId, rel: Relation) -> NodeId {
        self.push(Op::IntCompare(a, b, rel))
    }
    /// [`Op::IntMin`].
    pub fn int_min(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.push(Op::IntMin(a, b))
    }
    /// [`Op::IntMax`].
    pub fn int_max(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.push(Op::IntMax(a, b))
    }

    /// [`Op::BgvAdd`].
    pub fn bgv_add(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.push(Op::BgvAdd(a, b))
    }
    /// [`Op::BgvSub`].
    pub fn bgv_sub(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.push(Op::BgvSub(a, b))
    }
    /// [`Op::BgvNeg`].
    pub fn bgv_neg(&mut self, a: NodeId) -> NodeId {
        self.push(Op::BgvNeg(a))
    }
    /// [`Op::BgvMul`].
    pub fn bgv_mul(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.push(Op::BgvMul(a, b))
    }
    /// [`Op::BgvSum`].
    pub fn bgv_sum(&mut self, inputs: Vec<NodeId>) -> NodeId {
        self.push(Op::BgvSum(inputs))
    }
    /// [`Op::BgvSlotSum`].
    pub fn bgv_slot_sum(&mut self, a: NodeId) -> NodeId {
        self.push(Op::BgvSlotSum(a))
    }
    /// [`Op::BgvRotateRows`].
    pub fn bgv_rotate_rows(&mut self, a: NodeId, k: i64) -> NodeId {
        self.push(Op::BgvRotateRows(a, k))
    }
    /// [`Op::BgvRotateColumns`].
    pub fn bgv_rotate_columns(&mut self, a: NodeId) -> NodeId {
        self.push(Op::BgvRotateColumns(a))
    }
    /// [`Op::BgvAddScalar`].
    pub fn bgv_add_scalar(&mut self, a: NodeId, c: u64) -> NodeId {
        self.push(Op::BgvAddScalar(a, c))
    }
    /// [`Op::BgvMulScalar`].
    pub fn bgv_mul_scalar(&mut self, a: NodeId, c: u64) -> NodeId {
        self.push(Op::BgvMulScalar(a, c))
    }
    /// [`Op::BgvLessThan`].
    pub fn bgv_less_than(&mut self, a: NodeId, b: NodeId, bound: u64) -> NodeId {
        self.push(Op::BgvLessThan { a, b, bound })
    }
    /// [`Op::Refresh`].
    pub fn refresh(&mut self, a: NodeId, level: u32) -> NodeId {
        self.push(Op::Refresh(a, level))
    }

    /// [`Op::BgvRefresh`].
    pub fn bgv_refresh(&mut self, a: NodeId, level: u32) -> NodeId {
        self.push(Op::BgvRefresh(a, level))
    }

    /// [`Op::Bootstrap`].
    pub fn bootstrap(&mut self, a: NodeId) -> NodeId {
        self.push(Op::Bootstrap(a))
    }

    /// [`Op::BgvModSwitch`].
    pub fn bgv_mod_switch(&mut self, a: NodeId, level: u32) -> NodeId {
        self.push(Op::BgvModSwitch(a, level))
    }
    /// [`Op::BgvBitsAdd`].
    pub fn bgv_bits_add(&mut self, a: NodeId, b: NodeId, width: u32) -> NodeId {
        self.push(Op::BgvBitsAdd { a, b, width })
    }
    /// [`Op::BgvBitsSum`].
    pub fn bgv_bits_sum(&mut self, inputs: Vec<NodeId>, width: u32) -> NodeId {
        self.push(Op::BgvBitsSum { inputs, width })
    }
    /// [`Op::BgvBitsLessThan`].
    pub fn bgv_bits_lt(&mut self, a: NodeId, b: NodeId, width: u32) -> NodeId {
        self.push(Op::BgvBitsLessThan { a, b, width })
    }
    /// [`Op::BgvBitsGreaterThan`].
    pub fn bgv_bits_gt(&mut self, a: NodeId, b: NodeId, width: u32) -> NodeId {
        self.push(Op::BgvBitsGreaterThan { a, b, width })
    }

    /// Writes the graph (no envelope): used inside other messages.
    pub fn write(&self, w: &mut Writer) {
        w.len(self.nodes.len());
        for op in &self.nodes {
            write_op(w, op);
        }
        w.len(self.outputs.len());
        for o in &self.outputs {
            w.str(&o.name);
            w.u32(o.node);
        }
    }

    /// Reads a graph written by [`Graph::write`]. Only the encoding is checked
    /// here (limits, tags, finite numbers); the graph's meaning is checked by
    /// [`crate::validate()`].
    pub fn read(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let n = r.count("nodes", MAX_NODES, 5)?;
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            nodes.push(read_op(r)?);
        }
        let m = r.count("outputs", MAX_OUTPUTS, 8)?;
        let mut outputs = Vec::with_capacity(m);
        for _ in 0..m {
            let name = r.str("output name", MAX_NAME_LEN)?;
            let node = r.u32()?;
            outputs.push(Output { name, node });
        }
        Ok(Self { nodes, outputs })
    }
}

impl Message for Graph {
    const KIND: MessageKind = MessageKind::Graph;
    fn write_body(&self, w: &mut Writer) {
        self.write(w);
    }
    fn read_body(r: &mut Reader<'_>) -> DecodeResult<Self> {
        Self::read(r)
    }
}

mod tag {
    pub const INPUT: u8 = 1;
    pub const CONSTANT: u8 = 2;
    pub const PLAIN: u8 = 3;
    pub const ADD: u8 = 4;
    pub const SUB: u8 = 5;
    pub const NEG: u8 = 6;
    pub const MUL: u8 = 7;
    pub const RESCALE: u8 = 8;
    pub const ROTATE: u8 = 9;
    pub const ROTATE_AND_SUM: u8 = 10;
    pub const CONJUGATE: u8 = 11;
    pub const CHEBYSHEV: u8 = 12;
    pub const DROP_LEVEL: u8 = 13;
    pub const REFRESH: u8 = 14;
    pub const BOOTSTRAP: u8 = 15;
    pub const DROP_FOR_DECRYPTION: u8 = 16;
    pub const INT_SUM: u8 = 32;
    pub const INT_COMPARE: u8 = 33;
    pub const INT_MIN: u8 = 34;
    pub const INT_MAX: u8 = 35;
    // 64..=95 are BGV operations.
    pub const BGV_ADD: u8 = 64;
    pub const BGV_SUB: u8 = 65;
    pub const BGV_NEG: u8 = 66;
    pub const BGV_MUL: u8 = 67;
    pub const BGV_SUM: u8 = 68;
    pub const BGV_SLOT_SUM: u8 = 69;
    pub const BGV_ROTATE_ROWS: u8 = 70;
    pub const BGV_ROTATE_COLUMNS: u8 = 71;
    pub const BGV_ADD_SCALAR: u8 = 72;
    pub const BGV_MUL_SCALAR: u8 = 73;
    pub const BGV_LESS_THAN: u8 = 74;
    pub const BGV_MOD_SWITCH: u8 = 75;
    pub const BGV_BITS_ADD: u8 = 76;
    pub const BGV_BITS_SUM: u8 = 77;
    pub const BGV_BITS_LT: u8 = 78;
    pub const BGV_BITS_GT: u8 = 79;
    pub const BGV_REFRESH: u8 = 80;
}

fn write_op(w: &mut Writer, op: &Op) {
    match op {
        Op::Input(i) => {
            w.u8(tag::INPUT);
            w.u32(*i);
        }
        Op::Constant(c) => {
            w.u8(tag::CONSTANT);
            w.f64(*c);
        }
        Op::Plain(v) => {
            w.u8(tag::PLAIN);
            w.len(v.len());
            v.iter().for_each(|&x| w.f64(x));
        }
        Op::Add(a, b) => pair(w, tag::ADD, *a, *b),
        Op::Sub(a, b) => pair(w, tag::SUB, *a, *b),
        Op::Neg(a) => one(w, tag::NEG, *a),
        Op::Mul(a, b) => pair(w, tag::MUL, *a, *b),
        Op::Rescale(a) => one(w, tag::RESCALE, *a),
        Op::Rotate(a, k) => {
            one(w, tag::ROTATE, *a);
            w.i64(*k);
        }
        Op::RotateAndSum(a, n) => {
            one(w, tag::ROTATE_AND_SUM, *a);
            w.u32(*n);
        }
        Op::Conjugate(a) => one(w, tag::CONJUGATE, *a),
        Op::DropLevel(a, l) => {
            one(w, tag::DROP_LEVEL, *a);
            w.u32(*l);
        }
        Op::DropForDecryption(a) => one(w, tag::DROP_FOR_DECRYPTION, *a),
        Op::Chebyshev {
            input,
            coeffs,
            a,
            b,
        } => {
            one(w, tag::CHEBYSHEV, *input);
            w.f64(*a);
            w.f64(*b);
            w.len(coeffs.len());
            coeffs.iter().for_each(|&x| w.f64(x));
        }
        Op::IntSum { inputs, full } => {
            w.u8(tag::INT_SUM);
            w.bool(*full);
            w.len(inputs.len());
            inputs.iter().for_each(|&x| w.u32(x));
        }
        Op::IntCompare(a, b, rel) => {
            pair(w, tag::INT_COMPARE, *a, *b);
            w.u8(*rel as u8);
        }
        Op::IntMin(a, b) => pair(w, tag::INT_MIN, *a, *b),
        Op::IntMax(a, b) => pair(w, tag::INT_MAX, *a, *b),
        Op::BgvAdd(a, b) => pair(w, tag::BGV_ADD, *a, *b),
        Op::BgvSub(a, b) => pair(w, tag::BGV_SUB, *a, *b),
        Op::BgvNeg(a) => one(w, tag::BGV_NEG, *a),
        Op::BgvMul(a, b) => pair(w, tag::BGV_MUL, *a, *b),
        Op::BgvSum(inputs) => {
            w.u8(tag::BGV_SUM);
            w.len(inputs.len());
            inputs.iter().for_each(|&x| w.u32(x));
        }
        Op::BgvSlotSum(a) => one(w, tag::BGV_SLOT_SUM, *a),
        Op::BgvRotateRows(a, k) => {
            one(w, tag::BGV_ROTATE_ROWS, *a);
            w.i64(*k);
        }
        Op::BgvRotateColumns(a) => one(w, tag::BGV_ROTATE_COLUMNS, *a),
        Op::BgvAddScalar(a, c) => {
            one(w, tag::BGV_ADD_SCALAR, *a);
            w.u64(*c);
        }
        Op::BgvMulScalar(a, c) => {
            one(w, tag::BGV_MUL_SCALAR, *a);
            w.u64(*c);
        }
        Op::BgvLessThan { a, b, bound } => {
            pair(w, tag::BGV_LESS_THAN, *a, *b);
            w.u64(*bound);
        }
        Op::BgvModSwitch(a, l) => {
            one(w, tag::BGV_MOD_SWITCH, *a);
            w.u32(*l);
        }
        Op::BgvBitsAdd { a, b, width } => {
            pair(w, tag::BGV_BITS_ADD, *a, *b);
            w.u32(*width);
        }
        Op::BgvBitsSum { inputs, width } => {
            w.u8(tag::BGV_BITS_SUM);
            w.u32(*width);
            w.len(inputs.len());
            inputs.iter().for_each(|&x| w.u32(x));
        }
        Op::BgvBitsLessThan { a, b, width } => {
            pair(w, tag::BGV_BITS_LT, *a, *b);
            w.u32(*width);
        }
        Op::BgvBitsGreaterThan { a, b, width } => {
            pair(w, tag::BGV_BITS_GT, *a, *b);
            w.u32(*width);
        }
        Op::Refresh(a, l) => {
            one(w, tag::REFRESH, *a);
            w.u32(*l);
        }
        Op::BgvRefresh(a, l) => {
            one(w, tag::BGV_REFRESH, *a);
            w.u32(*l);
        }
        Op::Bootstrap(a) => one(w, tag::BOOTSTRAP, *a),
    }
}

fn one(w: &mut Writer, t: u8, a: NodeId) {
    w.u8(t);
    w.u32(a);
}

fn pair(w: &mut Writer, t: u8, a: NodeId, b: NodeId) {
    w.u8(t);
    w.u32(a);
    w.u32(b);
}

fn f64s(r: &mut Reader<'_>, field: &'static str, max: usize) -> DecodeResult<Vec<f64>> {
    let n = r.count(field, max, 8)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(r.finite_f64(field)?);
    }
    Ok(v)
}

fn read_op(r: &mut Reader<'_>) -> DecodeResult<Op> {
    let t = r.u8()?;
    Ok(match t {
        tag::INPUT => Op::Input(r.u32()?),
        tag::CONSTANT => Op::Constant(r.finite_f64("constant")?),
        tag::PLAIN => Op::Plain(f64s(r, "plain vector", MAX_PLAIN_LEN)?),
        tag::ADD => Op::Add(r.u32()?, r.u32()?),
        tag::SUB => Op::Sub(r.u32()?, r.u32()?),
        tag::NEG => Op::Neg(r.u32()?),
        tag::MUL => Op::Mul(r.u32()?, r.u32()?),
        tag::RESCALE => Op::Rescale(r.u32()?),
        tag::ROTATE => Op::Rotate(r.u32()?, r.i64()?),
        tag::ROTATE_AND_SUM => Op::RotateAndSum(r.u32()?, r.u32()?),
        tag::CONJUGATE => Op::Conjugate(r.u32()?),
        tag::DROP_LEVEL => Op::DropLevel(r.u32()?, r.u32()?),
        tag::DROP_FOR_DECRYPTION => Op::DropForDecryption(r.u32()?),
        tag::CHEBYSHEV => {
            let input = r.u32()?;
            let a = r.finite_f64("chebyshev interval")?;
            let b = r.finite_f64("chebyshev interval")?;
            let coeffs = f64s(r, "chebyshev coefficients", MAX_CHEBYSHEV_COEFFS)?;
            Op::Chebyshev {
                input,
                coeffs,
                a,
                b,
            }
        }
        tag::INT_SUM => {
            let full = r.bool("int_sum mode")?;
            let n = r.count("int_sum operands", MAX_SUM_OPERANDS, 4)?;
            let mut inputs = Vec::with_capacity(n);
            for _ in 0..n {
                inputs.push(r.u32()?);
            }
            Op::IntSum { inputs, full }
        }
        tag::INT_COMPARE => {
            let (a, b) = (r.u32()?, r.u32()?);
            Op::IntCompare(a, b, Relation::from_u8(r.u8()?)?)
        }
        tag::INT_MIN => Op::IntMin(r.u32()?, r.u32()?),
        tag::INT_MAX => Op::IntMax(r.u32()?, r.u32()?),
        tag::BGV_ADD => Op::BgvAdd(r.u32()?, r.u32()?),
        tag::BGV_SUB => Op::BgvSub(r.u32()?, r.u32()?),
        tag::BGV_NEG => Op::BgvNeg(r.u32()?),
        tag::BGV_MUL => Op::BgvMul(r.u32()?, r.u32()?),
        tag::BGV_SUM => {
            let n = r.count("bgv_sum operands", MAX_SUM_OPERANDS, 4)?;
            let mut inputs = Vec::with_capacity(n);
            for _ in 0..n {
                inputs.push(r.u32()?);
            }
            Op::BgvSum(inputs)
        }
        tag::BGV_SLOT_SUM => Op::BgvSlotSum(r.u32()?),
        tag::BGV_ROTATE_ROWS => Op::BgvRotateRows(r.u32()?, r.i64()?),
        tag::BGV_ROTATE_COLUMNS => Op::BgvRotateColumns(r.u32()?),
        tag::BGV_ADD_SCALAR => Op::BgvAddScalar(r.u32()?, r.u64()?),
        tag::BGV_MUL_SCALAR => Op::BgvMulScalar(r.u32()?, r.u64()?),
        tag::BGV_LESS_THAN => {
            let (a, b) = (r.u32()?, r.u32()?);
            Op::BgvLessThan {
                a,
                b,
                bound: r.u64()?,
            }
        }
        tag::BGV_MOD_SWITCH => Op::BgvModSwitch(r.u32()?, r.u32()?),
        tag::REFRESH => Op::Refresh(r.u32()?, r.u32()?),
        tag::BGV_REFRESH => Op::BgvRefresh(r.u32()?, r.u32()?),
        tag::BOOTSTRAP => Op::Bootstrap(r.u32()?),
        tag::BGV_BITS_ADD => {
            let (a, b) = (r.u32()?, r.u32()?);
            Op::BgvBitsAdd {
                a,
                b,
                width: r.u32()?,
            }
        }
        tag::BGV_BITS_SUM => {
            let width = r.u32()?;
            let n = r.count("bgv_bits_sum operands", MAX_SUM_OPERANDS, 4)?;
            let mut inputs = Vec::with_capacity(n);
            for _ in 0..n {
                inputs.push(r.u32()?);
            }
            Op::BgvBitsSum { inputs, width }
        }
        tag::BGV_BITS_LT => {
            let (a, b) = (r.u32()?, r.u32()?);
            Op::BgvBitsLessThan {
                a,
                b,
                width: r.u32()?,
            }
        }
        tag::BGV_BITS_GT => {
            let (a, b) = (r.u32()?, r.u32()?);
            Op::BgvBitsGreaterThan {
                a,
                b,
                width: r.u32()?,
            }
        }
        81..=95 => {
            return Err(DecodeError::InvalidField {
                field: "op",
                reason: format!("tag {t} is reserved for BGV operations this build does not know"),
            });
        }
        _ => {
            return Err(DecodeError::UnknownTag {
                field: "op",
                tag: t as u64,
            });
        }
    })
}
