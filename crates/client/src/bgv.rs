//! BGV jobs on integer vectors: the graphs behind `hecloud submit --op
//! bgv-…`, and one call that runs a graph on the server and decrypts its
//! outputs with a key folder.
//!
//! | op | inputs | output (slot-wise, mod t) |
//! | --- | --- | --- |
//! | `bgv-sum` | 1 or more | x_1 + … + x_n |
//! | `bgv-mul` | 2 | x · y |
//! | `bgv-lt` | 2, values below `bound` | 1 where x < y, else 0 ([`decode_comparisons`]) |
//! | `bgv-slot-sum` | 1 | the sum of all slots, in every slot |
//!
//! The packed-bit operations ([`BITS_OPS`], [`bits_graph`]) take
//! bits-in-slots numbers of one width w
//! ([`crate::keys::BgvKeyDir::encrypt_bits`]: bit i in slot i of row 0,
//! every other slot 0) and need the key folder's bits-in-slots Galois keys
//! (`hecloud keygen --preset bgv-… --bits-in-slots`):
//!
//! | op | inputs | output | depth |
//! | --- | --- | --- | --- |
//! | `bgv-bits-add` | 2 | x + y mod 2^w, bits in slots ([`decode_bits`]) | 2 + ⌈log2(w − 1)⌉ |
//! | `bgv-bits-sum` | 2 or more | x_1 + … + x_n mod 2^w ([`decode_bits`]) | [`hecloud_circuits::packed::depth::sum`] |
//! | `bgv-bits-lt` | 2 | x < y: the bit in slot w − 1, every other slot 0 ([`decode_bit`]) | 1 + ⌈log2 w⌉ |
//! | `bgv-bits-gt` | 2 | x > y, the same layout | 1 + ⌈log2 w⌉ |
//!
//! The server runs them without a refresh, so the depth must fit what the
//! preset allows such a circuit (bgv-n13: none, bgv-n14: 4, bgv-n15: 6,
//! bgv-n16: 7 products in a row; docs/bgv.md); a deeper one is refused
//! before it runs.
//!
//! Every result is switched down to level 0 before it is returned: it
//! travels with one prime instead of all of them.

use std::sync::Arc;

use hecloud_protocol::rpc::{self, JobInfo, JobState};
use hecloud_protocol::{Graph, JobSubmission, Message, ObjectId};

use num_bigint::BigUint;

use crate::keys::BgvKeyDir;
use crate::{Client, ClientError, Result};

/// The `--op` names of BGV jobs on integer vectors ([`graph`]).
pub const OPS: [&str; 4] = ["bgv-sum", "bgv-mul", "bgv-lt", "bgv-slot-sum"];

/// The `--op` names of packed-bit BGV jobs on bits-in-slots numbers
/// ([`bits_graph`]).
pub const BITS_OPS: [&str; 4] = ["bgv-bits-add", "bgv-bits-sum", "bgv-bits-lt", "bgv-bits-gt"];

/// The job of BGV operation `op` (one of [`OPS`]) on `inputs` in
/// `session`; `bound` is the comparison's (values below it).
///
/// ```
/// use hecloud_client::bgv::graph;
/// use hecloud_protocol::ObjectId;
/// let (s, x) = (ObjectId([1; 32]), ObjectId([2; 32]));
/// assert!(graph(s, "bgv-mul", vec![x, x], 0).is_ok());
/// assert!(graph(s, "bgv-mul", vec![x], 0).is_err()); // two inputs
/// assert!(graph(s, "bgv-div", vec![x, x], 0).is_err());
/// ```
pub fn graph(
    session: ObjectId,
    op: &str,
    inputs: Vec<ObjectId>,
    bound: u64,
) -> Result<JobSubmission> {
    let (arity, node): (Arity, NodeFn) = match op {
        "bgv-sum" => (Arity::AtLeast(1), Box::new(|g, xs| g.bgv_sum(xs))),
        "bgv-mul" => (Arity::Exactly(2), Box::new(|g, xs| g.bgv_mul(xs[0], xs[1]))),
        "bgv-lt" => (
            Arity::Exactly(2),
            Box::new(move |g, xs| g.bgv_less_than(xs[0], xs[1], bound)),
        ),
        "bgv-slot-sum" => (Arity::Exactly(1), Box::new(|g, xs| g.bgv_slot_sum(xs[0]))),
        other => {
            return Err(ClientError::Invalid(format!(
                "unknown BGV op {other:?} (known: {})",
                OPS.join(", ")
            )));
        }
    };
    one_node_job(session, op, inputs, arity, node)
}

/// How many inputs an op takes.
#[derive(Clone, Copy)]
enum Arity {
    Exactly(usize),
    AtLeast(usize),
}

/// Adds an op's node on the graph's inputs; returns the node.
type NodeFn = Box<dyn FnOnce(&mut Graph, Vec<u32>) -> u32>;

/// The job of one node over `inputs` (checked against `arity`), its result
/// switched down to level 0.
fn one_node_job(
    session: ObjectId,
    op: &str,
    inputs: Vec<ObjectId>,
    arity: Arity,
    node: NodeFn,
) -> Result<JobSubmission> {
    let n = inputs.len();
    let (ok, what) = match arity {
        Arity::Exactly(k) => (n == k, format!("{k} input(s)")),
        Arity::AtLeast(k) => (n >= k, format!("{k} input(s) or more")),
    };
    if !ok {
        return Err(ClientError::Invalid(format!(
            "{op} takes {what}, {n} given"
        )));
    }
    let mut g = Graph::new();
    let xs: Vec<u32> = (0..n as u32).map(|i| g.input(i)).collect();
    let out = node(&mut g, xs);
    let small = g.bgv_mod_switch(out, 0);
    g.output("result", small);
    Ok(JobSubmission {
        session,
        graph: g,
        inputs,
    })
}

/// The job of packed-bit operation `op` (one of [`BITS_OPS`]) on
/// bits-in-slots numbers of `width` bits `inputs` in `session`.
///
/// ```
/// use hecloud_client::bgv::bits_graph;
/// use hecloud_protocol::ObjectId;
/// let (s, x) = (ObjectId([1; 32]), ObjectId([2; 32]));
/// assert!(bits_graph(s, "bgv-bits-lt", vec![x, x], 8).is_ok());
/// assert!(bits_graph(s, "bgv-bits-sum", vec![x], 8).is_err()); // two or more
/// assert!(bits_graph(s, "bgv-bits-mul", vec![x, x], 8).is_err());
/// ```
pub fn bits_graph(
    session: ObjectId,
    op: &str,
    inputs: Vec<ObjectId>,
    width: u32,
) -> Result<JobSubmission> {
    let (arity, node): (Arity, NodeFn) = match op {
        "bgv-bits-add" => (
            Arity::Exactly(2),
            Box::new(move |g, xs| g.bgv_bits_add(xs[0], xs[1], width)),
        ),
        "bgv-bits-sum" => (
            Arity::AtLeast(2),
            Box::new(move |g, xs| g.bgv_bits_sum(xs, width)),
        ),
        "bgv-bits-lt" => (
            Arity::Exactly(2),
            Box::new(move |g, xs| g.bgv_bits_lt(xs[0], xs[1], width)),
        ),
        "bgv-bits-gt" => (
            Arity::Exactly(2),
            Box::new(move |g, xs| g.bgv_bits_gt(xs[0], xs[1], width)),
        ),
        other => {
            return Err(ClientError::Invalid(format!(
                "unknown packed-bit op {other:?} (known: {})",
                BITS_OPS.join(", ")
            )));
        }
    };
    one_node_job(session, op, inputs, arity, node)
}

/// The number of `width` bits held in slots 0..width (LSB first) of
/// decrypted slot values; a slot below the width that is not 0 or 1, or
/// one above it that is not 0, is an error (never a silently wrong value).
///
/// ```
/// use hecloud_client::bgv::decode_bits;
/// assert_eq!(decode_bits(&[1, 0, 1, 0, 0], 3).unwrap(), 5u32.into());
/// assert!(decode_bits(&[1, 2, 0], 3).is_err());
/// assert!(decode_bits(&[1, 0, 0, 1], 3).is_err());
/// ```
pub fn decode_bits(slots: &[u64], width: usize) -> Result<BigUint> {
    if width > slots.len() {
        return Err(ClientError::Invalid(format!(
            "{width} bits in {} slots",
            slots.len()
        )));
    }
    let mut v = BigUint::default();
    for (i, &x) in slots.iter().enumerate() {
        match (i < width, x) {
            (_, 0) => {}
            (true, 1) => v.set_bit(i as u64, true),
            (true, _) => {
                return Err(ClientError::Invalid(format!(
                    "slot {i} holds {x}, not a bit"
                )));
            }
            (false, _) => {
                return Err(ClientError::Invalid(format!(
                    "slot {i} above the width {width} holds {x}, not 0"
                )));
            }
        }
    }
    Ok(v)
}

/// The answers of `bgv-lt`, slot by slot: each slot must hold 0 or 1. The
/// comparison is exact only for inputs below its bound; for others a slot
/// holds an unspecified value, most often neither 0 nor 1, which this
/// refuses instead of reading it as an answer (an out-of-range input whose
/// slot happens to come out 0 or 1 cannot be told apart).
///
/// ```
/// use hecloud_client::bgv::decode_comparisons;
/// assert_eq!(decode_comparisons(&[1, 0, 1]).unwrap(), vec![true, false, true]);
/// assert!(decode_comparisons(&[1, 57]).is_err());
/// ```
pub fn decode_comparisons(slots: &[u64]) -> Result<Vec<bool>> {
    slots
        .iter()
        .enumerate()
        .map(|(i, &x)| match x {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(ClientError::Invalid(format!(
                "slot {i} of a comparison holds {x}, not 0 or 1: an input was not below \
                 the comparison's bound"
            ))),
        })
        .collect()
}

/// The answer of a packed-bit comparison of `width`-bit numbers
/// (`bgv-bits-lt`, `bgv-bits-gt`): the bit in slot width − 1, every other
/// slot 0 (an error otherwise).
///
/// ```
/// use hecloud_client::bgv::decode_bit;
/// assert!(decode_bit(&[0, 0, 0, 1, 0], 4).unwrap());
/// assert!(!decode_bit(&[0; 5], 4).unwrap());
/// assert!(decode_bit(&[1, 0, 0, 1], 4).is_err());
/// ```
pub fn decode_bit(slots: &[u64], width: usize) -> Result<bool> {
    if width == 0 {
        return Err(ClientError::Invalid("width 0".into()));
    }
    let v = decode_bits(slots, width)?;
    let answer = BigUint::from(1u8) << (width - 1);
    if v == answer {
        Ok(true)
    } else if v == BigUint::default() {
        Ok(false)
    } else {
        Err(ClientError::Invalid(format!(
            "a comparison holds its answer in slot {} only, not {v:b}",
            width - 1
        )))
    }
}

/// Submits `job`, waits for it, and decrypts each of its outputs with
/// `keys` (the slot values, each below t). A job that does not succeed is
/// [`ClientError::Invalid`] with the server's reason.
pub async fn run(
    client: &Client,
    keys: &BgvKeyDir,
    job: &JobSubmission,
) -> Result<(JobInfo, Vec<Vec<u64>>)> {
    // The folder's key holder answers the job's refresh requests, if any.
    let _holder = client
        .serve_refreshes(Arc::new(keys.refresh_responder()?))
        .await?;
    let j = client.submit(rpc::JOB_KIND_GRAPH, job.encode(), "").await?;
    let j = client.wait(&j.job_id, &|_| {}).await?;
    if j.state != JobState::Succeeded as i32 {
        return Err(ClientError::Invalid(format!(
            "job {} did not succeed: {}",
            j.job_id, j.error
        )));
    }
    let mut out = Vec::with_capacity(j.outputs.len());
    for o in &j.outputs {
        let bytes = client.job_output(o, None).await?;
        out.push(keys.decrypt(&bytes)?);
    }
    Ok((j, out))
}
