//! What jobs run: the [`Executor`] interface and the built-in executors
//! (`graph.v1`: a [`hecloud_protocol`] computation graph; `echo.v1`: a
//! round trip to the tenant's key holder over its session stream).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hecloud_protocol::refresh::{CALLBACK_REFRESH, RefreshLink};
use hecloud_protocol::rpc::{self, JOB_KIND_ECHO, JOB_KIND_GRAPH, SESSION_KIND};
use hecloud_protocol::{
    JobId, JobSubmission, Message, ObjectId, SessionKeys, SessionParams, SessionSpec,
    ValidatedGraph, ValidationError, ValidationLimits, execute_with_refresh, insert_refreshes,
    validate_with_limits, value_type_of,
};
use rayon::prelude::*;

use crate::arrivals::Outcome;
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
    /// It would cost more than the tenant may spend (RESOURCE_EXHAUSTED at
    /// submission).
    OverLimit(String),
    /// An object it reads is damaged (DATA_LOSS at submission).
    Damaged(String),
}

/// One output: name, object kind, bytes.
pub type JobOutput = (String, String, Vec<u8>);

/// A tenant's view of the store: only its own objects can be read.
///
/// It also sees the tenant's objects that have arrived and are still being
/// stored (see [`crate::arrivals`]); [`Self::settle`] waits until those it
/// served are stored.
#[derive(Debug, Clone)]
pub struct TenantObjects {
    store: Arc<Store>,
    tenant: String,
    /// Until when a missing object is waited for (one its uploader is still
    /// sending).
    await_until: Option<Instant>,
    /// Objects served before they were stored.
    arriving: Arc<Mutex<Vec<ArrivingObject>>>,
    /// Whether a key holder of the tenant answers refreshes now: where the
    /// session can bootstrap too, the planner bootstraps without one.
    key_holder_online: bool,
}

/// An object served before it was stored: its id, and how storing it ends.
type ArrivingObject = (ObjectId, Arc<Outcome>);

impl TenantObjects {
    /// The view of `tenant`.
    pub fn new(store: Arc<Store>, tenant: &str) -> Self {
        Self {
            store,
            tenant: tenant.into(),
            await_until: None,
            arriving: Arc::default(),
            key_holder_online: true,
        }
    }

    /// The same view, saying whether a key holder of the tenant is
    /// connected to answer refreshes (assumed so unless said otherwise).
    pub fn with_key_holder(mut self, online: bool) -> Self {
        self.key_holder_online = online;
        self
    }

    /// The same view, in which an object not found is waited for until it
    /// arrives or `wait` has passed (for a job submitted while its uploads
    /// are still in flight).
    pub fn awaiting(mut self, wait: Duration) -> Self {
        self.await_until = (!wait.is_zero()).then(|| Instant::now() + wait);
        self
    }

    /// Metadata of one of the tenant's objects, stored or arrived.
    pub fn meta(&self, id: ObjectId) -> Result<ObjectMeta, JobError> {
        let mut found = None;
        // Arrivals first: one being stored holds the store's lock for its
        // commit, and is removed from the arrivals only once committed.
        let look = |found: &mut Option<ObjectMeta>| -> Result<bool, JobError> {
            if let Some(a) = self.store.arrivals().get(&self.tenant, id) {
                self.arriving.lock().unwrap().push((id, a.outcome));
                *found = Some(ObjectMeta {
                    id,
                    kind: a.kind,
                    size: a.size,
                    created_ms: crate::store::now_ms(),
                    damaged: false,
                });
            } else {
                *found = self
                    .store
                    .object(&self.tenant, id)
                    .map_err(|e| JobError::Failed(e.to_string()))?;
            }
            Ok(found.is_some())
        };
        match self.await_until {
            Some(deadline) => {
                self.store
                    .arrivals()
                    .wait_until(deadline, || look(&mut found))?;
            }
            None => {
                look(&mut found)?;
            }
        }
        found.ok_or_else(|| JobError::Invalid(format!("object {id} not found")))
    }

    /// Metadata and bytes of one of the tenant's objects.
    pub fn get(&self, id: ObjectId) -> Result<(ObjectMeta, Vec<u8>), JobError> {
        let meta = self.meta(id)?;
        let bytes = self.bytes(&meta)?;
        Ok((meta, bytes))
    }

    /// The bytes of an object whose metadata [`Self::meta`] returned (one
    /// still being stored is waited for), checked against its id as they
    /// are read: a damaged object fails the job instead of feeding it
    /// garbage.
    pub fn bytes(&self, meta: &ObjectMeta) -> Result<Vec<u8>, JobError> {
        let arriving = self
            .arriving
            .lock()
            .unwrap()
            .iter()
            .find(|(id, _)| *id == meta.id)
            .map(|(_, o)| o.clone());
        if let Some(o) = arriving {
            Self::stored(meta.id, &o)?;
        }
        self.store.read_blob_verified(meta.id).map_err(|e| match e {
            crate::ServerError::Damaged(m) => JobError::Damaged(m),
            e => JobError::Failed(format!("reading object {}: {e}", meta.id)),
        })
    }

    fn stored(id: ObjectId, outcome: &Outcome) -> Result<(), JobError> {
        outcome
            .wait()
            .clone()
            .map_err(|e| JobError::Failed(format!("input {id} could not be stored: {e}")))
    }

    /// Waits until every object this view served before it was stored is
    /// stored; fails if one could not be. A job succeeds only after this.
    pub fn settle(&self) -> Result<(), JobError> {
        let arriving = std::mem::take(&mut *self.arriving.lock().unwrap());
        arriving.iter().try_for_each(|(id, o)| Self::stored(*id, o))
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
}

/// What a running job can use.
pub struct JobContext<'a> {
    /// The job's id.
    pub job_id: JobId,
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
    /// Checks a submission before it is queued and returns its estimated
    /// single-core cost in seconds; the error is the reason sent back to
    /// the client. A job estimated over `max_seconds` is refused with
    /// [`JobError::OverLimit`], as early as the executor can tell (before
    /// it spends much on costing it).
    fn check(
        &self,
        spec: &[u8],
        objects: &TenantObjects,
        max_seconds: f64,
    ) -> Result<f64, JobError>;
    /// Runs a job.
    fn run(&self, spec: &[u8], ctx: JobContext<'_>) -> Result<RunOutput, JobError>;
    /// A watcher for an upload of `kind` and `size` bytes that `tenant` is
    /// starting, if the executor wants to see its bytes as they arrive (to
    /// decode it before a job names it). Must return quickly.
    fn watch_upload(
        &self,
        _tenant: &str,
        _kind: &str,
        _size: u64,
    ) -> Option<Box<dyn UploadWatcher>> {
        None
    }
    /// Job inputs taken already decoded from uploads (a statistic).
    fn inputs_decoded_on_upload(&self) -> u64 {
        0
    }
}

/// An executor's view of one upload as its bytes arrive (see
/// [`Executor::watch_upload`]). It is dropped without
/// [`UploadWatcher::complete`] when the upload fails or stops short.
pub trait UploadWatcher: Send {
    /// The next bytes, in order (shared with the store's writer, not
    /// copied). Must return quickly.
    fn bytes(&mut self, chunk: bytes::Bytes);
    /// Every byte is in and they hash to `id`. Called before the object is
    /// stored: an executor must still find it in the store before using it.
    fn complete(self: Box<Self>, id: ObjectId);
}

/// Executors by job kind.
pub type Executors = HashMap<String, Arc<dyn Executor>>;

/// The built-in executors.
pub fn builtin(config: &crate::ServerConfig) -> Executors {
    let graph = GraphExecutor::new(config.allow_insecure_params)
        .with_refresh_wait(Duration::from_secs(config.refresh_wait_secs.into()))
        .with_key_cache_bytes(config.key_cache_mib.saturating_mul(1 << 20))
        .with_max_output_bytes(
            config
                .max_job_output_mib
                .saturating_mul(1 << 20)
                .min(config.quota.max_stored_bytes),
        );
    let mut m: Executors = HashMap::new();
    m.insert(JOB_KIND_GRAPH.into(), Arc::new(graph));
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
    /// An echo waits on the key holder; it costs the server next to nothing.
    fn check(&self, spec: &[u8], _: &TenantObjects, _: f64) -> Result<f64, JobError> {
        if spec.len() > MAX_ECHO_BYTES {
            return Err(JobError::Invalid(format!(
                "echo payload of {} bytes (at most {MAX_ECHO_BYTES})",
                spec.len()
            )));
        }
        Ok(0.0)
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

/// How long a refresh round waits for the key holder by default.
pub const DEFAULT_REFRESH_WAIT: Duration = Duration::from_secs(60);

/// A job's way to its tenant's key holder: each refresh round is one
/// callback on the key-holder session stream (kind
/// [`hecloud_protocol::refresh::CALLBACK_REFRESH`]), waited for on the
/// server's runtime from the job's worker thread.
struct HubLink<'a> {
    hub: &'a SessionHub,
    runtime: &'a tokio::runtime::Handle,
    tenant: &'a str,
    job_id: String,
    wait: Duration,
}

impl RefreshLink for HubLink<'_> {
    fn job_id(&self) -> &str {
        &self.job_id
    }

    fn round_trip(&self, request: Vec<u8>) -> Result<Vec<u8>, String> {
        self.runtime
            .block_on(
                self.hub
                    .call(self.tenant, CALLBACK_REFRESH, request, self.wait),
            )
            .map_err(|e| e.to_string())
    }
}

/// A session's keys as loaded, with the bytes they hold
/// ([`SessionKeys::memory_bytes`], counted once at load).
type KeyCell = Arc<OnceLock<Result<(Arc<SessionKeys>, u64), JobError>>>;

/// A ciphertext being decoded as its upload completes: the CKKS parameter
/// hash it was decoded under and the object, or `None` if it did not
/// decode under any loaded session (the job's own decode then reports why).
type DecodeCell = Arc<OnceLock<Mutex<Option<([u8; 32], hecloud_protocol::Object)>>>>;

/// Uploads decoded ahead of their job, by tenant and object id.
type DecodedCache = Mutex<Vec<(TenantObject, Instant, DecodeCell)>>;

/// `graph.v1`: a [`JobSubmission`] (session, graph, inputs) run with
/// [`hecloud_protocol::execute`]. Session keys are loaded once per
/// (tenant, session) and kept in a small cache.
#[derive(Debug)]
pub struct GraphExecutor {
    allow_insecure: bool,
    refresh_wait: Duration,
    /// Loaded sessions, least recently used first.
    keys: Mutex<Vec<(TenantObject, KeyCell)>>,
    /// Bytes of keys [`Self::keys`] may hold.
    key_cache_bytes: u64,
    /// Bytes a job's outputs may take (estimated at validation).
    max_output_bytes: u64,
    key_loads: AtomicU64,
    /// Jobs checked at submission, kept decoded for their run.
    prepared: Mutex<Vec<(PreparedKey, Instant, Arc<Prepared>)>>,
    /// Uploaded ciphertexts decoded (or being decoded) before a job names
    /// them, by tenant and object id.
    decoded: Arc<DecodedCache>,
    decoded_hits: AtomicU64,
}

/// Sessions whose keys stay loaded, at most (fewer when their keys
/// exceed the executor's byte budget).
const KEY_CACHE: usize = 4;
/// Bytes of session keys kept loaded by default: two N = 2^16
/// bootstrapping sessions (2.7 GiB each) or a dozen N = 2^16 sessions
/// with relinearization and rotation keys for a sum.
pub const DEFAULT_KEY_CACHE_BYTES: u64 = 6 << 30;
/// Bytes a job's outputs may take by default: a hundred N = 2^17
/// ciphertexts at the top level. They are held in memory until stored.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 8 << 30;
/// Checked jobs kept decoded (each holds its input ciphertexts): the next
/// few to run skip reading and decoding their inputs a second time.
const PREPARED_CACHE: usize = 4;
/// A checked job not run within this time (cancelled, or queued behind
/// others) gives its place up.
const PREPARED_TTL: Duration = Duration::from_secs(60);

/// Uploads decoded ahead of their job: each holds a decoded ciphertext
/// (28 MiB at N = 2^16 with 28 primes), so only the last few are kept.
const DECODED_CACHE: usize = 8;
/// Largest upload decoded ahead.
const DECODE_AHEAD_MAX_BYTES: u64 = 256 << 20;

/// An object of a tenant.
type TenantObject = (String, ObjectId);

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
            refresh_wait: DEFAULT_REFRESH_WAIT,
            keys: Mutex::new(Vec::new()),
            key_cache_bytes: DEFAULT_KEY_CACHE_BYTES,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            key_loads: AtomicU64::new(0),
            prepared: Mutex::new(Vec::new()),
            decoded: Arc::default(),
            decoded_hits: AtomicU64::new(0),
        }
    }

    /// How long a refresh round waits for the key holder.
    pub fn with_refresh_wait(mut self, wait: Duration) -> Self {
        self.refresh_wait = wait;
        self
    }

    /// Bytes of session keys kept loaded between jobs (the session a job
    /// uses is loaded whatever its size; older ones are dropped until the
    /// rest fit).
    pub fn with_key_cache_bytes(mut self, bytes: u64) -> Self {
        self.key_cache_bytes = bytes;
        self
    }

    /// Bytes a job's outputs may take (their estimate at validation);
    /// more is refused at submission.
    pub fn with_max_output_bytes(mut self, bytes: u64) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// The sessions of `tenant` whose keys are loaded.
    fn loaded_sessions(&self, tenant: &str) -> Vec<Arc<SessionKeys>> {
        let cache = self.keys.lock().unwrap();
        cache
            .iter()
            .filter(|((t, _), _)| t == tenant)
            .filter_map(|(_, cell)| Some(cell.get()?.as_ref().ok()?.0.clone()))
            .collect()
    }

    /// The object decoded on upload, if it was and was decoded under the
    /// CKKS parameters `param_hash`. Waits for a decode still running
    /// (unless called on a rayon worker, where waiting could hold up the
    /// very pool the decode runs on).
    fn take_decoded(
        &self,
        tenant: &str,
        id: &ObjectId,
        param_hash: &[u8; 32],
    ) -> Option<hecloud_protocol::Object> {
        let cell = {
            let mut cache = self.decoded.lock().ok()?;
            let pos = cache
                .iter()
                .position(|((t, i), ..)| t == tenant && i == id)?;
            cache.swap_remove(pos).2
        };
        let slot = if rayon::current_thread_index().is_some() {
            cell.get()?
        } else {
            cell.wait()
        };
        let (hash, obj) = slot.lock().ok()?.take()?;
        (hash == *param_hash).then(|| {
            self.decoded_hits.fetch_add(1, Ordering::Relaxed);
            obj
        })
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
            .all(|id| objects.meta(*id).is_ok())
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
        let r = cell.get_or_init(|| {
            self.key_loads.fetch_add(1, Ordering::Relaxed);
            let keys = self.load_keys(objects, id)?;
            let bytes = keys.memory_bytes();
            Ok((Arc::new(keys), bytes))
        });
        match r {
            Ok((k, _)) => {
                self.trim_keys(&cell);
                Ok(k.clone())
            }
            Err(e) => {
                // Do not cache failures: the client may upload the missing key.
                let mut cache = self.keys.lock().unwrap();
                cache.retain(|(_, c)| !Arc::ptr_eq(c, &cell));
                Err(e.clone())
            }
        }
    }

    /// Drops the least recently used sessions but `keep` until the loaded
    /// keys fit the byte budget. (A dropped session's keys stay in memory
    /// while a job still holds them.)
    fn trim_keys(&self, keep: &KeyCell) {
        let mut cache = self.keys.lock().unwrap();
        let bytes = |cell: &KeyCell| cell.get().and_then(|r| r.as_ref().ok()).map_or(0, |k| k.1);
        let mut total: u64 = cache.iter().map(|(_, c)| bytes(c)).sum();
        let mut i = 0;
        while total > self.key_cache_bytes && i < cache.len() {
            let cell = &cache[i].1;
            if Arc::ptr_eq(cell, keep) || bytes(cell) == 0 {
                i += 1;
            } else {
                total -= bytes(cell);
                cache.remove(i);
            }
        }
    }

    fn load_keys(&self, objects: &TenantObjects, id: &ObjectId) -> Result<SessionKeys, JobError> {
        let invalid = |e: String| JobError::Invalid(format!("session {id}: {e}"));
        let (meta, bytes) = objects.get(*id).map_err(|e| match e {
            JobError::Invalid(_) => JobError::Invalid(format!("session {id} not found")),
            other => other,
        })?;
        if meta.kind != SESSION_KIND {
            return Err(JobError::Invalid(format!(
                "object {id} is a {}, not a session",
                meta.kind
            )));
        }
        let spec = SessionSpec::decode(&bytes).map_err(|e| invalid(e.to_string()))?;
        let params = SessionParams::for_session(&spec, self.allow_insecure)
            .map_err(|e| invalid(e.to_string()))?;
        // A damaged key is reported as such, not as a missing one.
        let damaged = Mutex::new(None);
        let keys = SessionKeys::load(&spec, params, |oid| match objects.get(*oid) {
            Ok((_, b)) => Some(b),
            Err(JobError::Damaged(m)) => {
                *damaged.lock().unwrap() = Some(m);
                None
            }
            Err(_) => None,
        });
        if let Some(m) = damaged.into_inner().unwrap() {
            return Err(JobError::Damaged(m));
        }
        keys.map_err(|e| invalid(e.to_string()))
    }

    /// Decodes the job, its keys and inputs, and validates its graph,
    /// refusing one estimated over `max_seconds`.
    fn prepare(
        &self,
        spec: &[u8],
        objects: &TenantObjects,
        max_seconds: f64,
    ) -> Result<Prepared, JobError> {
        let job = JobSubmission::decode(spec)
            .map_err(|e| JobError::Invalid(format!("job submission: {e}")))?;
        let keys = self.session_keys(objects, &job.session)?;
        let params = keys.params();
        // Inputs decoded as their uploads completed are taken first (on
        // this thread, which may wait for them: see `take_decoded`).
        let mut ahead = Vec::with_capacity(job.inputs.len());
        for (i, id) in job.inputs.iter().enumerate() {
            let meta = objects.meta(*id).map_err(|e| match e {
                JobError::Invalid(_) => {
                    JobError::Invalid(format!("input {i}: object {id} not found"))
                }
                other => other,
            })?;
            let obj = params
                .ckks
                .as_ref()
                .and_then(|p| self.take_decoded(objects.tenant(), id, p.rlwe().hash()));
            ahead.push((meta, obj));
        }
        // The others are read and decoded in parallel: decoding (residue
        // checks, seed expansion) of multi-MiB ciphertexts is most of a check.
        let decoded = job
            .inputs
            .par_iter()
            .zip(ahead)
            .enumerate()
            .map(|(i, (id, (meta, obj)))| {
                let kind = rpc::parse_object_kind(&meta.kind).ok_or_else(|| {
                    JobError::Invalid(format!(
                        "input {i}: a {} object cannot be a job input",
                        meta.kind
                    ))
                })?;
                let obj = match obj {
                    Some(o) => o,
                    None => {
                        let bytes = objects.bytes(&meta)?;
                        params
                            .decode(kind, &bytes)
                            .map_err(|e| JobError::Invalid(format!("input {i} ({id}): {e}")))?
                    }
                };
                // The store checked that the bytes hash to their id on upload.
                let desc = params.descriptor(*id, meta.size, &obj);
                let ty = value_type_of(&desc)
                    .map_err(|e| JobError::Invalid(format!("input {i}: {e}")))?;
                Ok((obj, ty))
            })
            .collect::<Result<Vec<_>, JobError>>()?;
        let (inputs, types): (Vec<_>, Vec<_>) = decoded.into_iter().unzip();
        keys.check_input_keys(&inputs)
            .map_err(|(i, e)| JobError::Invalid(format!("input {i} ({}): {e}", job.inputs[i])))?;
        let limits = ValidationLimits {
            max_est_seconds: max_seconds,
        };
        let caps = keys.capabilities();
        // Without a key holder online, a session that can bootstrap plans
        // bootstraps rather than refreshes that would wait for nobody.
        let mut plan_caps = caps.clone();
        if !objects.key_holder_online
            && let Some(b) = plan_caps.bootstrap.as_mut()
        {
            b.prefer_over_refresh = true;
        }
        let graph = match validate_with_limits(&job.graph, &caps, &types, &limits) {
            // A session with a refresh or bootstrapping part runs a graph
            // deeper than its parameters, with refreshes or bootstraps
            // where the levels run out.
            Err(
                ValidationError::LevelsExhausted { .. }
                | ValidationError::ScaleOverflow { .. }
                | ValidationError::BudgetExhausted { .. }
                | ValidationError::DepthExhausted { .. },
            ) if caps.refresh_ckks || caps.refresh_bgv || caps.bootstrap.is_some() => {
                insert_refreshes(&job.graph, &plan_caps, &types, &limits)
                    .and_then(|g| validate_with_limits(&g, &caps, &types, &limits))
            }
            r => r,
        }
        .map_err(|e| match e {
            ValidationError::TooCostly { .. } => JobError::OverLimit(format!("graph refused: {e}")),
            e => JobError::Invalid(format!("graph refused: {e}")),
        })?;
        // Every output is held in memory until the job's are stored.
        let output_bytes = graph.cost().output_bytes;
        if output_bytes > self.max_output_bytes {
            return Err(JobError::OverLimit(format!(
                "graph refused: its outputs would take {output_bytes} bytes, over the {} a job may return",
                self.max_output_bytes
            )));
        }
        Ok(Prepared {
            keys,
            graph,
            inputs,
            input_ids: job.inputs.clone(),
        })
    }
}

impl Executor for GraphExecutor {
    fn check(
        &self,
        spec: &[u8],
        objects: &TenantObjects,
        max_seconds: f64,
    ) -> Result<f64, JobError> {
        let p = self.prepare(spec, objects, max_seconds)?;
        let est = p.graph.cost().est_seconds;
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
        Ok(est)
    }

    fn run(&self, spec: &[u8], ctx: JobContext<'_>) -> Result<RunOutput, JobError> {
        (ctx.progress)(0.0, "loading keys and inputs");
        let p = match self.take_prepared(spec, ctx.objects) {
            Some(p) => p,
            // Checked against the tenant's limit when it was submitted.
            None => Arc::new(self.prepare(spec, ctx.objects, f64::INFINITY)?),
        };
        (ctx.progress)(0.0, "running");
        let t = Instant::now();
        let progress = ctx.progress;
        let link = HubLink {
            hub: ctx.hub,
            runtime: ctx.runtime,
            tenant: ctx.objects.tenant(),
            job_id: ctx.job_id.to_hex(),
            wait: self.refresh_wait,
        };
        let out = execute_with_refresh(
            &p.graph,
            &p.keys,
            &p.inputs,
            ctx.cancel,
            &mut |pr| {
                let f = pr.done as f32 / pr.total.max(1) as f32;
                progress(f, &format!("node {}/{}: {}", pr.done, pr.total, pr.op));
            },
            Some(&link),
        );
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

    /// Decodes a ciphertext on a thread of its own as its bytes arrive,
    /// under the tenant's loaded session whose parameters its header names,
    /// so that the job naming it (usually submitted right after the upload
    /// is acknowledged) finds it decoded. Nothing is done before the tenant
    /// has a session loaded.
    fn watch_upload(&self, tenant: &str, kind: &str, size: u64) -> Option<Box<dyn UploadWatcher>> {
        if kind != rpc::object_kind_name(hecloud_protocol::ObjectKind::CkksCiphertext)
            || size > DECODE_AHEAD_MAX_BYTES
        {
            return None;
        }
        let sessions = self.loaded_sessions(tenant);
        if sessions.is_empty() {
            return None;
        }
        let (feed, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("hecloud-decode".into())
            .spawn(move || decode_ahead(&sessions, size as usize, rx))
            .ok()?;
        Some(Box::new(DecodeAhead {
            tenant: tenant.into(),
            feed,
            cache: self.decoded.clone(),
        }))
    }

    fn inputs_decoded_on_upload(&self) -> u64 {
        self.decoded_hits.load(Ordering::Relaxed)
    }
}

/// What the upload handler sends the decoding thread.
enum Feed {
    Bytes(bytes::Bytes),
    /// Every byte is in and checked: finish into the cell.
    Complete(DecodeCell),
}

/// [`GraphExecutor::watch_upload`]'s watcher: feeds the decoding thread.
struct DecodeAhead {
    tenant: String,
    feed: std::sync::mpsc::Sender<Feed>,
    cache: Arc<DecodedCache>,
}

impl UploadWatcher for DecodeAhead {
    fn bytes(&mut self, chunk: bytes::Bytes) {
        // A thread gone (it panicked) is found out at `complete`.
        let _ = self.feed.send(Feed::Bytes(chunk));
    }

    fn complete(self: Box<Self>, id: ObjectId) {
        let cell = DecodeCell::default();
        {
            let mut cache = self.cache.lock().unwrap();
            cache.retain(|((t, i), at, _)| {
                at.elapsed() < PREPARED_TTL && !(*t == self.tenant && *i == id)
            });
            if cache.len() >= DECODED_CACHE {
                cache.remove(0);
            }
            cache.push(((self.tenant.clone(), id), Instant::now(), cell.clone()));
        }
        // The cell is always set, so that nothing waits on it forever.
        if let Err(std::sync::mpsc::SendError(Feed::Complete(cell))) =
            self.feed.send(Feed::Complete(cell))
        {
            let _ = cell.set(Mutex::new(None));
        }
    }
}

/// The decoding thread of one upload: picks the session from the parameter
/// hash in the header and decodes the bytes as they come. A ciphertext
/// that does not decode leaves `None` (the job's own decode then reports
/// why); an upload that stops short leaves nothing.
fn decode_ahead(sessions: &[Arc<SessionKeys>], size: usize, feed: std::sync::mpsc::Receiver<Feed>) {
    use hecloud_rlwe::serial::{CiphertextDecoder, HEADER_LEN};
    let mut head = Vec::new();
    let mut decoder: Option<([u8; 32], CiphertextDecoder)> = None;
    let mut failed = false;
    for msg in feed {
        match msg {
            Feed::Bytes(_) if failed => {}
            Feed::Bytes(b) => {
                let pushed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if let Some((_, d)) = &mut decoder {
                        return d.push(&b).is_ok();
                    }
                    // The parameter hash sits in the header.
                    head.extend_from_slice(&b);
                    if head.len() < HEADER_LEN.min(size) {
                        return true;
                    }
                    let Some(p) = sessions.iter().find_map(|k| {
                        let p = k.params().ckks.as_ref()?.rlwe();
                        (head.get(8..40) == Some(&p.hash()[..])).then_some(p)
                    }) else {
                        return false;
                    };
                    let mut d = CiphertextDecoder::new(p, size);
                    let ok = d.push(&std::mem::take(&mut head)).is_ok();
                    decoder = Some((*p.hash(), d));
                    ok
                }));
                failed = !matches!(pushed, Ok(true));
            }
            Feed::Complete(cell) => {
                let decoded = if failed {
                    None
                } else {
                    decoder.take().and_then(|(hash, d)| {
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.finish()))
                            .ok()?
                            .ok()
                            .map(|ct| (hash, hecloud_protocol::Object::CkksCiphertext(ct)))
                    })
                };
                let _ = cell.set(Mutex::new(decoded));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AB: ObjectId = ObjectId([0xab; 32]);
    const CD: ObjectId = ObjectId([0xcd; 32]);
    const EF: ObjectId = ObjectId([0xef; 32]);

    fn view() -> (tempfile::TempDir, Arc<Store>) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        (dir, store)
    }

    /// A stored session of `tenant` with a relinearization key of its own.
    fn stored_session(store: &Store, tenant: &str) -> ObjectId {
        stored_session_and_input(store, tenant).0
    }

    /// [`stored_session`] and a ciphertext under its key, stored.
    fn stored_session_and_input(store: &Store, tenant: &str) -> (ObjectId, ObjectId) {
        use hecloud_protocol::{CkksParamSpec, ObjectKind, ParamSpec};
        use hecloud_rlwe::{KeyGenerator, ParametersLiteral, SecretDistribution, params::SIGMA};
        let ckks = CkksParamSpec::from_literal(
            &ParametersLiteral {
                log_n: 10,
                log_q: vec![50, 40],
                log_p: vec![50],
                dnum: Some(2),
                secret: SecretDistribution::Ternary,
                sigma: SIGMA,
                plaintext_modulus: None,
            },
            40,
        );
        let params = ckks.build(true).unwrap();
        let mut kg = KeyGenerator::new(params.rlwe());
        let sk = kg.gen_secret_key().unwrap();
        let rlk = kg.gen_relinearization_key(&sk).unwrap().to_bytes(true);
        let kind = rpc::object_kind_name(ObjectKind::CkksRelinKey);
        let relin = store.put_object(tenant, kind, &rlk).unwrap().id;
        // Zero at the top level and the default scale.
        let basis = params.rlwe().q_at(params.max_level()).unwrap();
        let zero = hecloud_math::RnsPoly::zero(basis, hecloud_math::Domain::Ntt);
        let pt = hecloud_rlwe::Plaintext::new(
            params.rlwe(),
            zero,
            params.max_level(),
            params.default_scale(),
        )
        .unwrap();
        let ct = hecloud_rlwe::Encryptor::new(params.rlwe())
            .encrypt_sk(&sk, &pt)
            .unwrap();
        let kind = rpc::object_kind_name(ObjectKind::CkksCiphertext);
        let input = store
            .put_object(
                tenant,
                kind,
                &hecloud_protocol::Object::CkksCiphertext(ct).to_bytes(),
            )
            .unwrap()
            .id;
        let spec = SessionSpec {
            params: ParamSpec {
                ckks: Some(ckks),
                tfhe: None,
            },
            relin_key: Some(relin),
            ..SessionSpec::default()
        };
        let session = store
            .put_object(tenant, SESSION_KIND, &spec.encode())
            .unwrap()
            .id;
        (session, input)
    }

    /// A job whose outputs would take more than the executor returns is
    /// refused at submission, with the figures; one under it passes.
    #[test]
    fn jobs_whose_outputs_exceed_the_limit_are_refused() {
        let (_dir, store) = view();
        let objects = TenantObjects::new(store.clone(), "t");
        let (session, input) = stored_session_and_input(&store, "t");
        let job = |outputs: usize| {
            let mut g = hecloud_protocol::Graph::new();
            let x = g.input(0);
            for k in 0..outputs {
                let y = g.neg(x);
                g.output(format!("y{k}"), y);
            }
            JobSubmission {
                session,
                graph: g,
                inputs: vec![input],
            }
            .encode()
        };
        // One output's estimate (a top-level ciphertext, packed).
        let one = GraphExecutor::new(true)
            .prepare(&job(1), &objects, 60.0)
            .unwrap()
            .graph
            .cost()
            .output_bytes;
        assert!(one > 2 * 1024 * 8, "{one}");
        let exec = GraphExecutor::new(true).with_max_output_bytes(4 * one);
        assert!(exec.check(&job(3), &objects, 60.0).is_ok());
        match exec.check(&job(8), &objects, 60.0) {
            Err(JobError::OverLimit(m)) => assert!(m.contains("a job may return"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sessions_over_the_key_budget_are_dropped_least_recently_used_first() {
        let (_dir, store) = view();
        let objects = TenantObjects::new(store.clone(), "t");
        let [a, b, c] = [(); 3].map(|_| stored_session(&store, "t"));
        let one = GraphExecutor::new(true)
            .session_keys(&objects, &a)
            .unwrap()
            .memory_bytes();
        // Two digits, each a (b, a) pair over three primes of 2^10.
        assert_eq!(one, 2 * 2 * 3 * 1024 * 8);
        let loads = |budget: u64, order: &[ObjectId]| {
            let exec = GraphExecutor::new(true).with_key_cache_bytes(budget);
            for id in order {
                exec.session_keys(&objects, id).unwrap();
            }
            exec.key_loads.load(Ordering::Relaxed)
        };
        // Room for two: a, b loaded; a used (b least recent); c evicts b.
        assert_eq!(loads(2 * one, &[a, b, a, c, a, b]), 4);
        assert_eq!(loads(2 * one, &[a, b, a, b, a]), 2);
        // Room for one: every change of session loads.
        assert_eq!(loads(one, &[a, b, a, b]), 4);
        assert_eq!(loads(one, &[a, a, b, b]), 2);
        // A budget below one session still serves it.
        assert_eq!(loads(1, &[a, a]), 1);
        // Room for all: the count limit stays.
        assert_eq!(loads(u64::MAX, &[a, b, c, a, b, c]), 3);
    }

    #[test]
    fn an_arrived_object_is_served_and_settled_once_stored() {
        let (_dir, store) = view();
        let bytes = b"arrived bytes".to_vec();
        let id = ObjectId::of(&bytes);
        let guard = store.arrivals().arrived("t", id, "raw", bytes.len() as u64);
        let objects = TenantObjects::new(store.clone(), "t");
        let meta = objects.meta(id).unwrap();
        assert_eq!((meta.kind.as_str(), meta.size), ("raw", bytes.len() as u64));
        assert!(
            TenantObjects::new(store.clone(), "u").meta(id).is_err(),
            "another tenant's"
        );
        // Stored on another thread once the job waits to read it.
        let s = store.clone();
        let b = bytes.clone();
        let outcome = store.arrivals().get("t", id).unwrap().outcome;
        let storing = std::thread::spawn(move || {
            outcome.await_waiter();
            s.put_object("t", "raw", &b).unwrap();
            guard.stored();
        });
        assert_eq!(objects.bytes(&meta).unwrap(), bytes);
        objects.settle().unwrap();
        storing.join().unwrap();
    }

    #[test]
    fn a_job_on_an_object_that_was_not_stored_fails() {
        let (_dir, store) = view();
        let guard = store.arrivals().arrived("t", AB, "raw", 3);
        let objects = TenantObjects::new(store.clone(), "t");
        let meta = objects.meta(AB).unwrap();
        guard.failed("disk full".into());
        let e = objects.settle().unwrap_err();
        assert!(
            matches!(&e, JobError::Failed(m) if m.contains("disk full")),
            "{e:?}"
        );
        assert!(objects.bytes(&meta).is_err());
        // Gone from the arrivals, and never stored.
        assert!(matches!(objects.meta(AB), Err(JobError::Invalid(_))));
    }

    #[test]
    fn a_missing_object_is_waited_for_until_the_deadline() {
        let (_dir, store) = view();
        let objects = TenantObjects::new(store.clone(), "t").awaiting(Duration::from_secs(10));
        let s = store.clone();
        let arriving = std::thread::spawn(move || {
            // Announced once the job waits for it.
            s.arrivals().await_waiters(1);
            s.arrivals().arrived("t", CD, "raw", 3)
        });
        assert_eq!(objects.meta(CD).unwrap().size, 3);
        arriving.join().unwrap().stored();
        let t = Instant::now();
        let short = TenantObjects::new(store, "t").awaiting(Duration::from_millis(50));
        assert!(matches!(short.meta(EF), Err(JobError::Invalid(_))));
        assert!(t.elapsed() >= Duration::from_millis(50));
    }
}
