//! The graph's shape, before any type is known: size limits, output names,
//! operands that exist, inputs that were given, no cycle; then which nodes
//! the outputs need, in which order they run and which products run fused
//! with their rescale.

use std::collections::HashSet;

use super::{VResult, ValueType};
use crate::error::ValidationError;
use crate::graph::{Graph, MAX_NAME_LEN, MAX_NODES, MAX_OUTPUTS, NodeId, Op};

/// A graph whose shape is sound.
pub(super) struct Structure {
    /// The operands of every node.
    pub operands: Vec<Vec<NodeId>>,
    /// The nodes the outputs depend on, each after its operands: the only
    /// ones checked, costed and run.
    pub order: Vec<NodeId>,
}

/// Checks the shape of `graph` run on `inputs` job inputs.
pub(super) fn check(graph: &Graph, inputs: usize) -> VResult<Structure> {
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
    let mut nodes = HashSet::new();
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
        // Each output is a stored object of its own: one node named many
        // times would multiply a ciphertext in memory and in transfer for
        // nothing (a 12 KB job, a thousand copies).
        if !nodes.insert(o.node) {
            return Err(bad(format!(
                "node {} is already an output (name each value once)",
                o.node
            )));
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
            && *k as usize >= inputs
        {
            return Err(ValidationError::MissingInput {
                node: i as NodeId,
                index: *k,
                count: inputs,
            });
        }
    }
    let topo = topological_order(&operands)?;

    let mut live = vec![false; n];
    let mut stack: Vec<NodeId> = graph.outputs.iter().map(|o| o.node).collect();
    while let Some(v) = stack.pop() {
        if !std::mem::replace(&mut live[v as usize], true) {
            stack.extend(&operands[v as usize]);
        }
    }
    let order = topo.into_iter().filter(|&v| live[v as usize]).collect();
    Ok(Structure { operands, order })
}

/// How the live nodes run, once their types are known.
pub(super) struct Schedule {
    /// The live nodes, each after its operands.
    pub order: Vec<NodeId>,
    /// Number of later reads of each node (live consumers + outputs), so
    /// the executor frees a value after its last use.
    pub uses: Vec<u32>,
    /// Products of two ciphertexts whose only reader is a rescale: they
    /// run fused with it (one key switch with the rescale in its ModDown).
    pub fused: Vec<bool>,
}

/// The schedule of a graph of sound `structure` and node `types`.
pub(super) fn schedule(graph: &Graph, structure: Structure, types: &[ValueType]) -> Schedule {
    let Structure { operands, order } = structure;
    let n = graph.nodes.len();
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
    Schedule { order, uses, fused }
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
