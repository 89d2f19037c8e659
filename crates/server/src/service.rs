//! The gRPC service: authentication, uploads, downloads, jobs and sessions.

mod upload;

use std::collections::HashMap;
use std::io::{Read, Seek};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hecloud_protocol::rpc::{
    self, DataChunk, DownloadRequest, InfoReply, InfoRequest, JobInfo, JobRef, ListObjectsReply,
    ListObjectsRequest, ObjectInfo, ObjectRef, SessionClientMsg, SessionServerMsg, SessionWelcome,
    SubmitRequest, UploadChunk, UploadOffsetReply, UploadOffsetRequest, hecloud_server::Hecloud,
    session_client_msg, session_server_msg,
};
use hecloud_protocol::{JobId, ObjectId};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::config::{Quota, ServerConfig};
use crate::error::ServerError;
use crate::hub::{MAX_CALLBACK_BYTES, SessionHub};
use crate::jobs::Jobs;
use crate::store::{JobRecord, ObjectMeta, Store};

/// Bytes per download chunk.
pub const DOWNLOAD_CHUNK: usize = 1 << 20;
/// Longest a submission waits for inputs still being uploaded
/// (`SubmitRequest.await_inputs_ms` is capped to it).
pub const MAX_AWAIT_INPUTS_MS: u64 = 30_000;

/// The service state.
pub struct Service {
    store: Arc<Store>,
    jobs: Arc<Jobs>,
    hub: Arc<SessionHub>,
    /// BLAKE3(token) → tenant.
    tokens: Arc<HashMap<[u8; 32], String>>,
    quota: Quota,
    max_chunk: u32,
    /// Bytes of uploads watched by executors (see `upload`).
    kept_bytes: Arc<AtomicU64>,
    /// Submissions waiting for their inputs, per tenant (each holds a
    /// blocking thread while it waits).
    pub(crate) waiting: WaitingCount,
    /// What uploaded CKKS objects are checked against.
    known_params: Arc<upload::KnownParams>,
}

/// Submissions waiting for their inputs, per tenant.
pub(crate) type WaitingCount = Arc<std::sync::Mutex<HashMap<String, u32>>>;

/// A tenant's place among the submissions waiting for inputs, given back
/// when dropped.
struct Waiting {
    count: WaitingCount,
    tenant: String,
}

impl Waiting {
    /// A place, if the tenant has fewer than `max` waiting.
    fn enter(count: &WaitingCount, tenant: &str, max: u32) -> Result<Self, Status> {
        let mut c = count.lock().unwrap();
        let n = c.entry(tenant.to_string()).or_default();
        if *n >= max {
            return Err(Status::resource_exhausted(format!(
                "{max} submissions waiting for their inputs at most"
            )));
        }
        *n += 1;
        Ok(Self {
            count: count.clone(),
            tenant: tenant.to_string(),
        })
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut c = self.count.lock().unwrap();
        if let Some(n) = c.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                c.remove(&self.tenant);
            }
        }
    }
}

/// Most bytes of uploads watched by executors at once (what they hold of
/// them is bounded by it); past it, uploads are only written to the store.
const KEPT_BYTES_MAX: u64 = 512 << 20;

/// A share of [`KEPT_BYTES_MAX`], given back when dropped.
struct KeptBytes {
    pool: Arc<AtomicU64>,
    bytes: u64,
}

impl KeptBytes {
    fn reserve(pool: &Arc<AtomicU64>, bytes: u64) -> Option<Self> {
        pool.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            (used + bytes <= KEPT_BYTES_MAX).then_some(used + bytes)
        })
        .ok()?;
        Some(Self {
            pool: pool.clone(),
            bytes,
        })
    }
}

impl Drop for KeptBytes {
    fn drop(&mut self) {
        self.pool.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service").finish_non_exhaustive()
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ServerError> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| Status::internal("internal server error"))?
        .map_err(Status::from)
}

fn valid_upload_id(s: &str) -> bool {
    (16..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The object id a request names, parsed where it enters the server: 64
/// lower-case hex characters (one spelling per object), else
/// INVALID_ARGUMENT.
fn object_id(s: &str) -> Result<ObjectId, Status> {
    s.bytes()
        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        .then(|| ObjectId::from_hex(s))
        .flatten()
        .ok_or_else(|| {
            Status::invalid_argument(
                "object id must be 64 lower-case hex characters (a BLAKE3 hash)",
            )
        })
}

/// The job id a request names, parsed where it enters the server (32
/// lower-case hex characters), else INVALID_ARGUMENT.
fn job_id(s: &str) -> Result<JobId, Status> {
    JobId::from_hex(s)
        .ok_or_else(|| Status::invalid_argument("job id must be 32 lower-case hex characters"))
}

/// Wire form of an object's metadata.
pub fn object_info(m: &ObjectMeta) -> ObjectInfo {
    ObjectInfo {
        object_id: m.id.to_hex(),
        kind: m.kind.clone(),
        size: m.size,
        created_unix_ms: m.created_ms,
        damaged: m.damaged,
    }
}

/// Wire form of a job.
pub fn job_info(r: &JobRecord) -> JobInfo {
    JobInfo {
        job_id: r.id.to_hex(),
        kind: r.kind.clone(),
        state: rpc::JobState::from(r.state).into(),
        progress: r.progress,
        message: r.message.clone(),
        outputs: r
            .outputs
            .iter()
            .map(|o| rpc::JobOutput {
                name: o.name.clone(),
                object_id: o.object.id.to_hex(),
                kind: o.object.kind.clone(),
                size: o.object.size,
                data: Vec::new(),
            })
            .collect(),
        error: r.error.clone(),
        created_unix_ms: r.created_ms,
        finished_unix_ms: r.finished_ms,
        compute_micros: r.compute_us,
        est_seconds: r.est_seconds,
    }
}

/// Outputs of a succeeded job sent inside its WatchJob event when they are
/// this small together: the client then needs no Download. Under gRPC's
/// usual 4 MiB message limit, which other clients may keep.
pub const INLINE_OUTPUT_BYTES: usize = 2 << 20;

/// A job as WatchJob sends it, and whether it has ended; `None` if the
/// tenant has no such job. Small outputs carry their bytes: in an event of
/// their own while they are being stored, else in the final one (unless
/// their ids are in `sent`: sent already).
fn watched_job(
    store: &Store,
    jobs: &Jobs,
    tenant: &str,
    id: JobId,
    sent: &std::collections::HashSet<String>,
) -> Result<Option<(JobInfo, bool)>, ServerError> {
    let Some(r) = store.job(tenant, id)? else {
        return Ok(None);
    };
    let mut info = job_info(&r);
    let small = |total: u64| total <= INLINE_OUTPUT_BYTES as u64;
    if r.state == hecloud_protocol::JobState::Succeeded
        && small(info.outputs.iter().map(|o| o.size).sum())
    {
        for (o, stored) in info
            .outputs
            .iter_mut()
            .zip(&r.outputs)
            .filter(|(o, _)| !sent.contains(&o.object_id))
        {
            match store.read_blob_verified(stored.object.id) {
                Ok(bytes) => o.data = bytes,
                Err(e) => {
                    // The client downloads them instead.
                    tracing::warn!(error = %e, "job output unreadable for its event");
                    info.outputs.iter_mut().for_each(|o| o.data.clear());
                    break;
                }
            }
        }
    } else if !r.state.is_final()
        && let Some(ready) = jobs.ready_outputs(tenant, id)
        && small(ready.iter().map(|o| o.bytes.len() as u64).sum())
    {
        info.progress = 1.0;
        info.message = "storing outputs".into();
        info.outputs = ready
            .iter()
            .map(|o| rpc::JobOutput {
                name: o.name.clone(),
                object_id: o.id.to_hex(),
                kind: o.kind.clone(),
                size: o.bytes.len() as u64,
                data: o.bytes.clone(),
            })
            .collect();
    }
    Ok(Some((info, r.state.is_final())))
}

impl Service {
    /// A service over a store, a job manager and a session hub.
    pub fn new(
        config: &ServerConfig,
        store: Arc<Store>,
        jobs: Arc<Jobs>,
        hub: Arc<SessionHub>,
    ) -> Self {
        // `ServerConfig::validate` refused tenants without a well-formed
        // token and tokens given twice.
        let tokens = Arc::new(
            config
                .tenants
                .iter()
                .filter_map(|t| Some((t.token_hash()?, t.name.clone())))
                .collect(),
        );
        Self {
            store,
            jobs,
            hub,
            tokens,
            quota: config.quota,
            max_chunk: config.max_chunk_bytes,
            kept_bytes: Arc::default(),
            waiting: Arc::default(),
            known_params: Arc::new(upload::KnownParams::new(config.allow_insecure_params)),
        }
    }

    fn tenant<T>(&self, req: &Request<T>) -> Result<String, Status> {
        tenant_of(&self.tokens, req.metadata())
    }

    /// The interceptor that refuses a request without a known token
    /// before its message is decoded (an unauthenticated peer could
    /// otherwise make the server decode messages of tens of MiB); the
    /// handlers name the tenant from the same check.
    pub(crate) fn authenticator(&self) -> impl tonic::service::Interceptor + Clone + use<> {
        let tokens = self.tokens.clone();
        move |req: Request<()>| tenant_of(&tokens, req.metadata()).map(|_| req)
    }
}

/// The tenant whose token the request's `authorization: Bearer` header
/// carries (tokens are compared by their BLAKE3 hashes).
fn tenant_of(
    tokens: &HashMap<[u8; 32], String>,
    metadata: &tonic::metadata::MetadataMap,
) -> Result<String, Status> {
    let v = metadata
        .get("authorization")
        .ok_or_else(|| Status::unauthenticated("missing `authorization: Bearer <token>`"))?;
    let v = v
        .to_str()
        .map_err(|_| Status::unauthenticated("malformed authorization header"))?;
    let tok = v
        .strip_prefix("Bearer ")
        .ok_or_else(|| Status::unauthenticated("authorization must be `Bearer <token>`"))?;
    let h = *blake3::hash(tok.trim().as_bytes()).as_bytes();
    tokens
        .get(&h)
        .cloned()
        .ok_or_else(|| Status::unauthenticated("unknown token"))
}

#[tonic::async_trait]
impl Hecloud for Service {
    async fn info(&self, req: Request<InfoRequest>) -> Result<Response<InfoReply>, Status> {
        let tenant = self.tenant(&req)?;
        Ok(Response::new(InfoReply {
            server_version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: rpc::PROTOCOL_VERSION,
            tenant,
            max_object_bytes: self.quota.max_object_bytes,
            max_objects: self.quota.max_objects,
            max_concurrent_jobs: self.quota.max_concurrent_jobs,
            max_chunk_bytes: self.max_chunk,
            job_kinds: self.jobs.kinds(),
        }))
    }

    async fn upload(
        &self,
        req: Request<Streaming<UploadChunk>>,
    ) -> Result<Response<ObjectInfo>, Status> {
        let tenant = self.tenant(&req)?;
        self.upload_object(tenant, req.into_inner()).await
    }

    async fn upload_offset(
        &self,
        req: Request<UploadOffsetRequest>,
    ) -> Result<Response<UploadOffsetReply>, Status> {
        let tenant = self.tenant(&req)?;
        let uid = req.into_inner().upload_id;
        if !valid_upload_id(&uid) {
            return Err(Status::invalid_argument(
                "upload_id must be 16..64 characters of [0-9A-Za-z_-]",
            ));
        }
        let store = self.store.clone();
        let r = blocking(move || store.upload(&tenant, &uid)).await?;
        Ok(Response::new(match r {
            Some((_, have)) => UploadOffsetReply {
                received: have,
                complete: false,
                object_id: String::new(),
            },
            None => UploadOffsetReply::default(),
        }))
    }

    type DownloadStream = BoxStream<DataChunk>;

    async fn download(
        &self,
        req: Request<DownloadRequest>,
    ) -> Result<Response<Self::DownloadStream>, Status> {
        let tenant = self.tenant(&req)?;
        let r = req.into_inner();
        let id = object_id(&r.object_id)?;
        let store = self.store.clone();
        let meta = blocking(move || store.object(&tenant, id))
            .await?
            .ok_or_else(|| Status::not_found(format!("object {} not found", r.object_id)))?;
        if meta.damaged {
            return Err(crate::store::damaged_error(
                meta.id,
                "its stored bytes were found not to hash to its id",
            )
            .into());
        }
        if r.offset > meta.size {
            return Err(Status::invalid_argument(format!(
                "offset {} is past the end ({} bytes)",
                r.offset, meta.size
            )));
        }
        let path = self.store.blob_path(meta.id);
        let store = self.store.clone();
        let (tx, rx) = mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            // A download from byte 0 is checked against the id as it is
            // read: the last chunk goes out only if every byte matches.
            let mut hasher = (r.offset == 0).then(blake3::Hasher::new);
            let mut f = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) => {
                    let e = if e.kind() == std::io::ErrorKind::NotFound {
                        store.damaged(meta.id, "its stored bytes are missing")
                    } else {
                        ServerError::Io(e)
                    };
                    let _ = tx.blocking_send(Err(e.into()));
                    return;
                }
            };
            let mut off = r.offset;
            if f.seek(std::io::SeekFrom::Start(off)).is_err() {
                let _ = tx.blocking_send(Err(Status::internal("internal server error")));
                return;
            }
            while off < meta.size {
                let n = DOWNLOAD_CHUNK.min((meta.size - off) as usize);
                let mut buf = vec![0u8; n];
                let read = f.read_exact(&mut buf);
                if let Some(h) = &mut hasher
                    && read.is_ok()
                {
                    h.update(&buf);
                }
                let last = off + n as u64 == meta.size;
                let intact = match (&hasher, last) {
                    (Some(h), true) => *h.finalize().as_bytes() == meta.id.0,
                    _ => true,
                };
                if read.is_err() || !intact {
                    let why = if intact {
                        "its stored bytes are shorter than recorded"
                    } else {
                        "its stored bytes no longer hash to its id"
                    };
                    let _ = tx.blocking_send(Err(store.damaged(meta.id, why).into()));
                    return;
                }
                let chunk = DataChunk {
                    offset: off,
                    data: buf.into(),
                    total_bytes: meta.size,
                };
                off += n as u64;
                if tx.blocking_send(Ok(chunk)).is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn list_objects(
        &self,
        req: Request<ListObjectsRequest>,
    ) -> Result<Response<ListObjectsReply>, Status> {
        let tenant = self.tenant(&req)?;
        let store = self.store.clone();
        let objs = blocking(move || store.list_objects(&tenant)).await?;
        Ok(Response::new(ListObjectsReply {
            objects: objs.iter().map(object_info).collect(),
        }))
    }

    async fn delete_object(&self, req: Request<ObjectRef>) -> Result<Response<ObjectInfo>, Status> {
        let tenant = self.tenant(&req)?;
        let id = object_id(&req.into_inner().object_id)?;
        let store = self.store.clone();
        let m = blocking(move || store.delete_object(&tenant, id))
            .await?
            .ok_or_else(|| Status::not_found(format!("object {id} not found")))?;
        Ok(Response::new(object_info(&m)))
    }

    async fn submit(&self, req: Request<SubmitRequest>) -> Result<Response<JobInfo>, Status> {
        let tenant = self.tenant(&req)?;
        let r = req.into_inner();
        if r.client_ref.len() > 128 {
            return Err(Status::invalid_argument("client_ref is at most 128 bytes"));
        }
        if !r.inputs.is_empty() {
            return Err(Status::invalid_argument(
                "inputs are named inside the job spec for the built-in job kinds; leave `inputs` empty",
            ));
        }
        let jobs = self.jobs.clone();
        let wait = Duration::from_millis(u64::from(r.await_inputs_ms).min(MAX_AWAIT_INPUTS_MS));
        // As many waiting as jobs in flight; held until the blocking work
        // ends, even if the client goes away.
        let place = (!wait.is_zero())
            .then(|| Waiting::enter(&self.waiting, &tenant, self.quota.max_concurrent_jobs))
            .transpose()?;
        let rec = blocking(move || {
            let _place = place;
            jobs.submit(&tenant, &r.kind, &r.spec, &r.client_ref, wait)
        })
        .await?;
        Ok(Response::new(job_info(&rec)))
    }

    async fn get_job(&self, req: Request<JobRef>) -> Result<Response<JobInfo>, Status> {
        let tenant = self.tenant(&req)?;
        let id = job_id(&req.into_inner().job_id)?;
        let store = self.store.clone();
        let rec = blocking(move || store.job(&tenant, id))
            .await?
            .ok_or_else(|| Status::not_found(format!("job {id} not found")))?;
        Ok(Response::new(job_info(&rec)))
    }

    type WatchJobStream = BoxStream<JobInfo>;

    async fn watch_job(
        &self,
        req: Request<JobRef>,
    ) -> Result<Response<Self::WatchJobStream>, Status> {
        let tenant = self.tenant(&req)?;
        let id = job_id(&req.into_inner().job_id)?;
        let mut events = self.jobs.subscribe();
        let (store, jobs) = (self.store.clone(), self.jobs.clone());
        let t = tenant.clone();
        let (s, j) = (store.clone(), jobs.clone());
        let (mut last, done) = blocking(move || watched_job(&s, &j, &t, id, &Default::default()))
            .await?
            .ok_or_else(|| Status::not_found(format!("job {id} not found")))?;
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            // Outputs whose bytes this stream carried.
            let mut sent = std::collections::HashSet::new();
            let note = |sent: &mut std::collections::HashSet<String>, info: &JobInfo| {
                sent.extend(
                    info.outputs
                        .iter()
                        .filter(|o| !o.data.is_empty())
                        .map(|o| o.object_id.clone()),
                )
            };
            note(&mut sent, &last);
            if tx.send(Ok(last.clone())).await.is_err() || done {
                return;
            }
            loop {
                // Wake on an event for this job, or every second regardless.
                let wake = tokio::time::timeout(std::time::Duration::from_secs(1), async {
                    loop {
                        match events.recv().await {
                            Ok((t, j)) if t == tenant && j == id => return true,
                            Ok(_) => continue,
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                                return true;
                            }
                            Err(_) => return false,
                        }
                    }
                })
                .await;
                if wake == Ok(false) {
                    return;
                }
                let (s, j, t) = (store.clone(), jobs.clone(), tenant.clone());
                let had = sent.clone();
                let (info, done) =
                    match tokio::task::spawn_blocking(move || watched_job(&s, &j, &t, id, &had))
                        .await
                    {
                        Ok(Ok(Some(r))) => r,
                        _ => return,
                    };
                if info != last {
                    note(&mut sent, &info);
                    last = info.clone();
                    if tx.send(Ok(info)).await.is_err() {
                        return;
                    }
                }
                if done {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn cancel_job(&self, req: Request<JobRef>) -> Result<Response<JobInfo>, Status> {
        let tenant = self.tenant(&req)?;
        let id = job_id(&req.into_inner().job_id)?;
        let jobs = self.jobs.clone();
        let rec = blocking(move || jobs.cancel(&tenant, id)).await?;
        Ok(Response::new(job_info(&rec)))
    }

    type SessionStream = BoxStream<SessionServerMsg>;

    async fn session(
        &self,
        req: Request<Streaming<SessionClientMsg>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let tenant = self.tenant(&req)?;
        let mut inbound = req.into_inner();
        let hello = match inbound.message().await? {
            Some(SessionClientMsg {
                msg: Some(session_client_msg::Msg::Hello(h)),
            }) => h,
            _ => {
                return Err(Status::invalid_argument(
                    "a session starts with a hello message",
                ));
            }
        };
        if hello.capabilities.len() > 64 || hello.capabilities.iter().any(|c| c.len() > 64) {
            return Err(Status::invalid_argument(
                "at most 64 capabilities of 64 bytes",
            ));
        }
        let (tx, rx) = mpsc::channel(16);
        let sid = self.hub.register(&tenant, hello.capabilities, tx.clone());
        tracing::info!(%tenant, session = sid, "key-holder session opened");
        let _ = tx
            .send(Ok(SessionServerMsg {
                msg: Some(session_server_msg::Msg::Welcome(SessionWelcome {
                    session_id: sid.to_string(),
                })),
            }))
            .await;
        let hub = self.hub.clone();
        let closed = hub.closed();
        tokio::spawn(async move {
            tokio::pin!(closed);
            loop {
                let m = tokio::select! {
                    m = inbound.next() => match m {
                        Some(m) => m,
                        None => break,
                    },
                    () = &mut closed => break,
                };
                match m {
                    Ok(SessionClientMsg {
                        msg: Some(session_client_msg::Msg::Reply(r)),
                    }) => {
                        let reply = if !r.error.is_empty() {
                            Err(r.error.chars().take(512).collect())
                        } else if r.payload.len() > MAX_CALLBACK_BYTES {
                            Err("reply too large".into())
                        } else {
                            Ok(r.payload)
                        };
                        hub.deliver(&tenant, r.request_id, reply);
                    }
                    Ok(_) => {
                        let _ = tx
                            .send(Err(Status::invalid_argument(
                                "only replies are expected after the hello",
                            )))
                            .await;
                        break;
                    }
                    Err(_) => break,
                }
            }
            hub.unregister(sid);
            tracing::info!(%tenant, session = sid, "key-holder session closed");
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_bytes_stay_within_the_budget_and_are_given_back() {
        let pool = Arc::default();
        let a = KeptBytes::reserve(&pool, KEPT_BYTES_MAX - 10).unwrap();
        assert!(KeptBytes::reserve(&pool, 11).is_none());
        let b = KeptBytes::reserve(&pool, 10).unwrap();
        assert!(KeptBytes::reserve(&pool, 1).is_none());
        drop(a);
        assert_eq!(pool.load(Ordering::Acquire), 10);
        assert!(KeptBytes::reserve(&pool, KEPT_BYTES_MAX - 10).is_some());
        drop(b);
        assert_eq!(pool.load(Ordering::Acquire), 0);
    }
}
