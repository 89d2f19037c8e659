//! What jobs run: the [`Executor`] interface and the built-in executors
//! (`graph.v1`: a [`hecloud_protocol`] computation graph; `echo.v1`: a
//! round trip to the tenant's key holder over its session stream).

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hecloud_protocol::rpc::{self, JOB_KIND_ECHO, JOB_KIND_GRAPH, SESSION_KIND};
use hecloud_protocol::{
    JobSubmission, Message, ObjectId, SessionKeys, SessionParams, SessionSpec, ValidatedGraph,
    execute, validate, value_type_of,
};
use rayon::prelude::*;

use crate::hub::SessionHub;
use crate::store::{ObjectMeta, Store};

/// Why a job did not produce outputs.
#[derive(Debug, Clone, PartialEq)]
pub enum JobError {
    /// The job is refused (bad spec, missing objects, invalid graph): gRPC
    /// INVALID_ARGUMENT at submission, FAILED when found while running.
    Invalid(String),
    /// It was cancelled.
    Cancelled,
    /// It failed while running.
    Failed(String),
}

/// One output: name, object kind, bytes.
pub type JobOutput = (String, String, Vec<u8>);

/// A tenant's view of the store: only its own objects can be read.
#[derive(Debug, Clone)]
pub struct TenantObjects {
    store: Arc<Store>,
    tenant: String,
}

impl TenantObjects {
    /// The view of `tenant`.
    pub fn new(store: Arc<Store>, tenant: &str) -> Self {
        Self {
            store,
            tenant: tenant.into(),
        }
    }

    /// Metadata of one of the tenant's objects.
    pub fn meta(&self, id: &str) -> Result<ObjectMeta, JobError> {
        self.store
            .object(&self.tenant, id)
            .map_err(|e| JobError::Failed(e.to_string()))?
            .ok_or_else(|| JobError::Invalid(format!("object {id} not found")))
    }

    /// Metadata and bytes of one of the tenant's objects.
    pub fn get(&self, id: &str) -> Result<(ObjectMeta, Vec<u8>), JobError> {
        let meta = self.meta(id)?;
        let bytes = self
            .store
            .read_blob(&meta.id)
            .map_err(|e| JobError::Failed(format!("reading object {id}: {e}")))?;
        Ok((meta, bytes))
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
}

/// What a running job can use.
pub struct JobContext<'a> {
    /// The job's objects (its tenant's only).
    pub objects: &'a TenantObjects,
    /// Reports progress (0..1) and a short note (never a secret or plaintext).
    pub progress: &'a mut dyn FnMut(f32, &str),
    /// Set when the job is cancelled; check it between steps.
    pub cancel: &'a AtomicBool,
    /// Key-holder callbacks.
    pub hub: &'a SessionHub,
    /// The runtime the hub's futures run on.
    pub runtime: &'a tokio::runtime::Handle,
}

impl std::fmt::Debug for JobContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobContext")
            .field("tenant", &self.objects.tenant)
            .finish_non_exhaustive()
    }
}

/// Result of a run: outputs and the time spent in homomorphic evaluation.
#[derive(Debug)]
pub struct RunOutput {
    /// Named outputs.
    pub outputs: Vec<JobOutput>,
    /// Time spent computing (excludes loading and storing).
    pub compute: Duration,
}

/// Runs one kind of job.
pub trait Executor: Send + Sync + 'static {
    /// Checks a submission before it is queued; the error is the reason sent
    /// back to the client.
    fn check(&self, spec: &[u8], objects: &TenantObjects) -> Result<(), JobError>;
    /// Runs a job.
    fn run(&self, spec: &[u8], ctx: JobContext<'_>) -> Result<RunOutput, JobError>;
}

/// Executors by job kind.
pub type Executors = HashMap<String, Arc<dyn Executor>>;

/// The built-in executors.
pub fn builtin(allow_insecure: bool) -> Executors {
    let mut m: Executors = HashMap::new();
    m.insert(
        JOB_KIND_GRAPH.into(),
        Arc::new(GraphExecutor::new(allow_insecure)),
    );
    m.insert(JOB_KIND_ECHO.into(), Arc::new(EchoExecutor));
    m
}

/// `echo.v1`: sends the spec to the tenant's key holder (callback kind
/// `echo`) and stores its answer as the output `reply` (kind `raw`... but
/// stored under the `session` namespace is wrong, so `echo`).
#[derive(Debug)]
pub struct EchoExecutor;

/// Largest echo payload.
pub const MAX_ECHO_BYTES: usize = 1 << 20;

impl Executor for EchoExecutor {
    fn check(&self, spec: &[u8], _: &TenantObjects) -> Result<(), JobError> {
        if spec.len() > MAX_ECHO_BYTES {
            return Err(JobError::Invalid(format!(
                "echo payload of {} bytes (at most {MAX_ECHO_BYTES})",
                spec.len()
            )));
        }
        Ok(())
    }

    fn run(&self, spec: &[u8], ctx: JobContext<'_>) -> Result<RunOutput, JobError> {
        (ctx.progress)(0.1, "calling the key holder");
        let t = Instant::now();
        let reply = ctx
            .runtime
            .block_on(ctx.hub.call(
                ctx.objects.tenant(),
                rpc::CALLBACK_ECHO,
                spec.to_vec(),
                Duration::from_secs(30),
            ))
            .map_err(|e| JobError::Failed(e.to_string()))?;
        Ok(RunOutput {
            outputs: vec![("reply".into(), "echo".into(), reply)],
            compute: t.elapsed(),
        })
    }
}

type KeyCell = Arc<OnceLock<Result<Arc<SessionKeys>, String>>>;

/// `graph.v1`: a [`JobSubmission`] (session, graph, inputs) run with
/// [`hecloud_protocol::execute`]. Session keys are loaded once per
/// (tenant, session) and kept in a small cache.
#[derive(Debug)]
pub struct GraphExecutor {
    allow_insecure: bool,
    keys: Mutex<Vec<((String, ObjectId), KeyCell)>>,
    /// Jobs checked at submission, kept decoded for their run.
    prepared: Mutex<Vec<(PreparedKey, Instant, Arc<Prepared>)>>,
}

/// Sessions whose keys stay loaded.
const KEY_CACHE: usize = 4;
/// Checked jobs kept decoded (each holds its input ciphertexts): the next
/// few to run skip reading and decoding their inputs a second time.
const PREPARED_CACHE: usize = 4;
/// A checked job not run within this time (cancelled, or queued behind
/// others) gives its place up.
const PREPARED_TTL: Duration = Duration::from_secs(60);

/// A checked job: its tenant and the BLAKE3 of its spec.
type PreparedKey = (String, [u8; 32]);

struct Prepared {
    keys: Arc<SessionKeys>,
    graph: ValidatedGraph,
    inputs: Vec<hecloud_protocol::Object>,
    input_ids: Vec<ObjectId>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("inputs", &self.input_ids.len())
            .finish_non_exhaustive()
    }
}

impl GraphExecutor {
    /// A graph executor.
    pub fn new(allow_insecure: bool) -> Self {
        Self {
            allow_insecure,
            keys: Mutex::new(Vec::new()),
            prepared: Mutex::new(Vec::new()),
        }
    }

    fn prepared_key(spec: &[u8], objects: &TenantObjects) -> PreparedKey {
        (objects.tenant().to_string(), *blake3::hash(spec).as_bytes())
    }

    /// The job as decoded when it was checked, if it is still cached and its
    /// inputs still exist (they may have been deleted since).
    fn take_prepared(&self, spec: &[u8], objects: &TenantObjects) -> Option<Arc<Prepared>> {
        let key = Self::prepared_key(spec, objects);
        let p = {
            let mut cache = self.prepared.lock().ok()?;
            let pos = cache.iter().position(|(k, ..)| *k == key)?;
            cache.swap_remove(pos).2
        };
        p.input_ids
            .iter()
            .all(|id| objects.meta(&id.to_hex()).is_ok())
            .then_some(p)
    }

    fn session_keys(
        &self,
        objects: &TenantObjects,
        id: &ObjectId,
    ) -> Result<Arc<SessionKeys>, JobError> {
        let key = (objects.tenant().to_string(), *id);
        let cell = {
            let mut cache = self.keys.lock().unwrap();
            if let Some(pos) = cache.iter().position(|(k, _)| *k == key) {
                let entry = cache.remove(pos);
                let cell = entry.1.clone();
                cache.push(entry);
                cell
            } else {
                let cell: KeyCell = Arc::new(OnceLock::new());
                cache.push((key, cell.clone()));
                if cache.len() > KEY_CACHE {
                    cache.remove(0);
                }
                cell
            }
        };
        let r = cell.get_or_init(|| self.load_keys(objects, id).map(Arc::new));
        match r {
            Ok(k) => Ok(k.clone()),
            Err(e) => {
                // Do not cache failures: the client may upload the missing key.
                let mut cache = self.keys.lock().unwrap();
                cache.retain(|(_, c)| !Arc::ptr_eq(c, &cell));
                Err(JobError::Invalid(e.clone()))
            }
        }
    }

    fn load_keys(&self, objects: &TenantObjects, id: &ObjectId) -> Result<SessionKeys, String> {
        let hex = id.to_hex();
        let (meta, bytes) = objects.get(&hex).map_err(|e| match e {
            JobError::Invalid(_) => format!("session {hex} not found"),
            JobError::Failed(m) => m,
            JobError::Cancelled => "cancelled".into(),
        })?;
        if meta.kind != SESSION_KIND {
            return Err(format!("object {hex} is a {}, not a session", meta.kind));
        }
        let spec = SessionSpec::decode(&bytes).map_err(|e| format!("session {hex}: {e}"))?;
        let params = SessionParams::build(&spec.params, self.allow_insecure)
            .map_err(|e| format!("session {hex}: {e}"))?;
        SessionKeys::load(&spec, params, |oid| {
            let h = oid.to_hex();
            match objects.meta(&h) {
                Ok(_) => objects.get(&h).ok().map(|(_, b)| b),
                Err(_) => None,
            }
        })
        .map_err(|e| format!("session {hex}: {e}"))
    }

    fn prepare(&self, spec: &[u8], objects: &TenantObjects) -> Result<Prepared, JobError> {
        let job = JobSubmission::decode(spec)
            .map_err(|e| JobError::Invalid(format!("job submission: {e}")))?;
        let keys = self.session_keys(objects, &job.session)?;
        // Inputs are read and decoded in parallel: decoding (residue checks,
        // seed expansion) of multi-MiB ciphertexts is most of a check.
        let decoded = job
            .inputs
            .par_iter()
            .enumerate()
            .map(|(i, id)| {
                let hex = id.to_hex();
                let (meta, bytes) = objects.get(&hex).map_err(|e| match e {
                    JobError::Invalid(_) => {
                        JobError::Invalid(format!("input {i}: object {hex} not found"))
                    }
                    other => other,
                })?;
                let kind = rpc::parse_object_kind(&meta.kind).ok_or_else(|| {
                    JobError::Invalid(format!(
                        "input {i}: a {} object cannot be a job input",
                        meta.kind
                    ))
                })?;
                let params = keys.params();
                let obj = params
                    .decode(kind, &bytes)
                    .map_err(|e| JobError::Invalid(format!("input {i} ({hex}): {e}")))?;
                // The store checked that the bytes hash to their id on upload.
                let desc = params.descriptor(*id, bytes.len() as u64, &obj);
                let ty = value_type_of(&desc)
                    .map_err(|e| JobError::Invalid(format!("input {i}: {e}")))?;
                Ok((obj, ty))
            })
            .collect::<Result<Vec<_>, JobError>>()?;
        let (inputs, types): (Vec<_>, Vec<_>) = decoded.into_iter().unzip();
        let graph = validate(&job.graph, &keys.capabilities(), &types)
            .map_err(|e| JobError::Invalid(format!("graph refused: {e}")))?;
        Ok(Prepared {
            keys,
            graph,
            inputs,
            input_ids: job.inputs.clone(),
        })
    }
}

impl Executor for GraphExecutor {
    fn check(&self, spec: &[u8], objects: &TenantObjects) -> Result<(), JobError> {
        let p = self.prepare(spec, objects)?;
        if let Ok(mut cache) = self.prepared.lock() {
            cache.retain(|(_, at, _)| at.elapsed() < PREPARED_TTL);
            if cache.len() < PREPARED_CACHE {
                cache.push((
                    Self::prepared_key(spec, objects),
                    Instant::now(),
                    Arc::new(p),
                ));
            }
        }
        Ok(())
    }

    fn run(&self, spec: &[u8], ctx: JobContext<'_>) -> Result<RunOutput, JobError> {
        (ctx.progress)(0.0, "loading keys and inputs");
        let p = match self.take_prepared(spec, ctx.objects) {
            Some(p) => p,
            None => Arc::new(self.prepare(spec, ctx.objects)?),
        };
        let t = Instant::now();
        let progress = ctx.progress;
        let out = execute(&p.graph, &p.keys, &p.inputs, ctx.cancel, &mut |pr| {
            let f = pr.done as f32 / pr.total.max(1) as f32;
            progress(f, &format!("node {}/{}: {}", pr.done, pr.total, pr.op));
        });
        let compute = t.elapsed();
        let out = out.map_err(|e| match e {
            hecloud_protocol::ExecError::Cancelled { .. } => JobError::Cancelled,
            other => JobError::Failed(other.to_string()),
        })?;
        let outputs = out
            .into_iter()
            .map(|(name, obj)| {
                let kind = rpc::object_kind_name(obj.kind()).to_string();
                (name, kind, obj.to_bytes())
            })
            .collect();
        Ok(RunOutput { outputs, compute })
    }
}
