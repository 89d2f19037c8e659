//! Jobs: a submission (graph + input objects), its status while it runs and
//! its result (the output objects).
//!
//! ```
//! use hecloud_protocol::{Graph, JobSubmission, Message, ObjectId};
//! let mut g = Graph::new();
//! let x = g.input(0);
//! let y = g.rotate_and_sum(x, 4);
//! g.output("sum", y);
//! let job = JobSubmission {
//!     session: ObjectId([1; 32]),
//!     graph: g,
//!     inputs: vec![ObjectId::of(b"ciphertext bytes")],
//! };
//! assert_eq!(JobSubmission::decode(&job.encode()).unwrap(), job);
//! ```

use crate::codec::{DecodeError, DecodeResult, Message, MessageKind, Reader, Writer};
use crate::graph::{Graph, MAX_NAME_LEN, MAX_OUTPUTS};
use crate::session::{ObjectDescriptor, ObjectId, read_descriptor, write_descriptor};

/// Most input objects of one job.
pub const MAX_JOB_INPUTS: usize = 1 << 16;
/// Longest status message, in bytes.
pub const MAX_STATUS_MESSAGE: usize = 4096;

/// A job's identity (assigned by the server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JobId(pub [u8; 16]);

impl JobId {
    /// Lower-case hex (32 characters): the form the wire and the server's
    /// store carry.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses 32 lower-case hex characters (the only form [`Self::to_hex`]
    /// writes, so that one job has one spelling).
    pub fn from_hex(s: &str) -> Option<Self> {
        let s = s.as_bytes();
        if s.len() != 32 || !s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, o) in out.iter_mut().enumerate() {
            let hex = std::str::from_utf8(&s[2 * i..2 * i + 2]).ok()?;
            *o = u8::from_str_radix(hex, 16).ok()?;
        }
        Some(Self(out))
    }
}

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// A job as the client submits it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSubmission {
    /// The session ([`crate::SessionSpec::id`]) whose parameters and keys the job uses.
    pub session: ObjectId,
    /// What to compute.
    pub graph: Graph,
    /// The input objects, by position ([`crate::Op::Input`]).
    pub inputs: Vec<ObjectId>,
}

impl Message for JobSubmission {
    const KIND: MessageKind = MessageKind::JobSubmission;

    fn write_body(&self, w: &mut Writer) {
        w.bytes_raw(&self.session.0);
        self.graph.write(w);
        w.len(self.inputs.len());
        self.inputs.iter().for_each(|id| w.bytes_raw(&id.0));
    }

    fn read_body(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let session = ObjectId(r.hash()?);
        let graph = Graph::read(r)?;
        let n = r.count("job inputs", MAX_JOB_INPUTS, 32)?;
        let mut inputs = Vec::with_capacity(n);
        for _ in 0..n {
            inputs.push(ObjectId(r.hash()?));
        }
        Ok(Self {
            session,
            graph,
            inputs,
        })
    }
}

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum JobState {
    /// Accepted, waiting for a worker.
    Queued = 1,
    /// Running.
    Running = 2,
    /// Finished; the result is available.
    Succeeded = 3,
    /// Failed (the message says why).
    Failed = 4,
    /// Cancelled by the client or the server.
    Cancelled = 5,
}

impl JobState {
    fn from_u8(t: u8) -> DecodeResult<Self> {
        Ok(match t {
            1 => Self::Queued,
            2 => Self::Running,
            3 => Self::Succeeded,
            4 => Self::Failed,
            5 => Self::Cancelled,
            _ => {
                return Err(DecodeError::UnknownTag {
                    field: "job state",
                    tag: t as u64,
                });
            }
        })
    }

    /// Whether the job will not change state again.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

/// A job's status and progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStatus {
    /// The job.
    pub job: JobId,
    /// Its state.
    pub state: JobState,
    /// Nodes evaluated so far.
    pub nodes_done: u32,
    /// Nodes to evaluate in all.
    pub nodes_total: u32,
    /// A human-readable note (the reason of a failure); never a secret or plaintext.
    pub message: String,
}

impl Message for JobStatus {
    const KIND: MessageKind = MessageKind::JobStatus;

    fn write_body(&self, w: &mut Writer) {
        w.bytes_raw(&self.job.0);
        w.u8(self.state as u8);
        w.u32(self.nodes_done);
        w.u32(self.nodes_total);
        w.str(&self.message);
    }

    fn read_body(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let mut job = [0u8; 16];
        job.copy_from_slice(r.take(16)?);
        let state = JobState::from_u8(r.u8()?)?;
        let nodes_done = r.u32()?;
        let nodes_total = r.u32()?;
        if nodes_done > nodes_total {
            return Err(DecodeError::InvalidField {
                field: "nodes_done",
                reason: format!("{nodes_done} > total {nodes_total}"),
            });
        }
        let message = r.str("status message", MAX_STATUS_MESSAGE)?;
        Ok(Self {
            job: JobId(job),
            state,
            nodes_done,
            nodes_total,
            message,
        })
    }
}

/// One named output of a finished job.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedObject {
    /// The output's name in the graph.
    pub name: String,
    /// The stored output object.
    pub object: ObjectDescriptor,
}

/// The result of a finished job: its outputs, in the graph's order.
#[derive(Debug, Clone, PartialEq)]
pub struct JobResult {
    /// The job.
    pub job: JobId,
    /// The outputs.
    pub outputs: Vec<NamedObject>,
}

impl Message for JobResult {
    const KIND: MessageKind = MessageKind::JobResult;

    fn write_body(&self, w: &mut Writer) {
        w.bytes_raw(&self.job.0);
        w.len(self.outputs.len());
        for o in &self.outputs {
            w.str(&o.name);
            write_descriptor(w, &o.object);
        }
    }

    fn read_body(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let mut job = [0u8; 16];
        job.copy_from_slice(r.take(16)?);
        let n = r.count(
            "job outputs",
            MAX_OUTPUTS,
            4 + 32 + 1 + 8 + 32 + 4 + 8 + 4 + 8,
        )?;
        let mut outputs = Vec::with_capacity(n);
        for _ in 0..n {
            let name = r.str("output name", MAX_NAME_LEN)?;
            let object = read_descriptor(r)?;
            outputs.push(NamedObject { name, object });
        }
        Ok(Self {
            job: JobId(job),
            outputs,
        })
    }
}
