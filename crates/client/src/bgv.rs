//! BGV jobs on integer vectors: the graphs behind `hecloud submit --op
//! bgv-…`, and one call that runs a graph on the server and decrypts its
//! outputs with a key folder.
//!
//! | op | inputs | output (slot-wise, mod t) |
//! | --- | --- | --- |
//! | `bgv-sum` | 1 or more | x_1 + … + x_n |
//! | `bgv-mul` | 2 | x · y |
//! | `bgv-lt` | 2, values below `bound` | 1 where x < y, else 0 |
//! | `bgv-slot-sum` | 1 | the sum of all slots, in every slot |
//!
//! Every result is switched down to level 0 before it is returned: it
//! travels with one prime instead of all of them.

use hecloud_protocol::rpc::{self, JobInfo, JobState};
use hecloud_protocol::{Graph, JobSubmission, Message, ObjectId};

use crate::keys::BgvKeyDir;
use crate::{Client, ClientError, Result};

/// The `--op` names of BGV jobs.
pub const OPS: [&str; 4] = ["bgv-sum", "bgv-mul", "bgv-lt", "bgv-slot-sum"];

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
    let n = inputs.len();
    let want = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(ClientError::Invalid(format!(
                "{op} takes {what}, {n} given"
            )))
        }
    };
    let mut g = Graph::new();
    let xs: Vec<u32> = (0..n as u32).map(|i| g.input(i)).collect();
    let out = match op {
        "bgv-sum" => {
            want(n >= 1, "one input or more")?;
            g.bgv_sum(xs)
        }
        "bgv-mul" => {
            want(n == 2, "two inputs")?;
            g.bgv_mul(xs[0], xs[1])
        }
        "bgv-lt" => {
            want(n == 2, "two inputs")?;
            g.bgv_less_than(xs[0], xs[1], bound)
        }
        "bgv-slot-sum" => {
            want(n == 1, "one input")?;
            g.bgv_slot_sum(xs[0])
        }
        other => {
            return Err(ClientError::Invalid(format!(
                "unknown BGV op {other:?} (known: {})",
                OPS.join(", ")
            )));
        }
    };
    let small = g.bgv_mod_switch(out, 0);
    g.output("result", small);
    Ok(JobSubmission {
        session,
        graph: g,
        inputs,
    })
}

/// Submits `job`, waits for it, and decrypts each of its outputs with
/// `keys` (the slot values, each below t). A job that does not succeed is
/// [`ClientError::Invalid`] with the server's reason.
pub async fn run(
    client: &Client,
    keys: &BgvKeyDir,
    job: &JobSubmission,
) -> Result<(JobInfo, Vec<Vec<u64>>)> {
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
