//! The Upload call, step by step: receive the header, check it, set the
//! upload up (or find the object already stored), stream the bytes to the
//! part file while they are hashed and checked, then install the object.
//!
//! Bytes that are not what their kind says are refused with
//! INVALID_ARGUMENT as soon as they show it, and the upload is dropped with
//! its part file: nothing of them is stored or listed.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

use hecloud_protocol::object::PayloadCheck;
use hecloud_protocol::rpc::{self, ObjectInfo, UploadChunk, UploadHeader};
use hecloud_protocol::{BgvParamSpec, CkksParamSpec, Message, ObjectId, ObjectKind, SessionSpec};
use hecloud_rlwe::Parameters;
use tokio_stream::StreamExt;
use tonic::{Response, Status, Streaming};

use super::{KeptBytes, Service, blocking, object_info, valid_upload_id};
use crate::config::Quota;
use crate::error::{Result, ServerError};
use crate::part::PartWriter;
use crate::store::{ObjectMeta, Store, UploadMeta};

/// Largest session spec accepted (specs name keys by id: even thousands
/// of Galois keys stay far below it).
const MAX_SESSION_BYTES: u64 = 1 << 20;

/// The CKKS and BGV parameter sets of the tenants' stored sessions, built
/// once each: what an uploaded CKKS or BGV object's parameter hash is looked
/// up in, to check its length exactly.
#[derive(Debug, Default)]
pub(crate) struct KnownParams {
    allow_insecure: bool,
    built: Mutex<Built>,
}

#[derive(Debug, Default)]
struct Built {
    /// Session id → its CKKS and BGV parameters (empty: the session has
    /// none, or they do not build). A stored session never changes: its id
    /// is the hash of its bytes.
    sessions: HashMap<ObjectId, Vec<Arc<Parameters>>>,
    /// Parameter sets built so far, shared by the sessions that use them.
    specs: Vec<(Spec, Arc<Parameters>)>,
}

/// A parameter spec of either RLWE scheme.
#[derive(Debug, Clone, PartialEq)]
enum Spec {
    Ckks(CkksParamSpec),
    Bgv(BgvParamSpec),
}

impl KnownParams {
    /// Builds insecure literal sets only with `allow_insecure`, as jobs do.
    pub(crate) fn new(allow_insecure: bool) -> Self {
        Self {
            allow_insecure,
            built: Mutex::default(),
        }
    }

    /// The CKKS and BGV parameter sets of `tenant`'s sessions.
    fn of_tenant(&self, store: &Store, tenant: &str) -> Result<Vec<Arc<Parameters>>> {
        let mut out: Vec<Arc<Parameters>> = Vec::new();
        for id in store.object_ids_of_kind(tenant, rpc::SESSION_KIND)? {
            let cached = self.lock().sessions.get(&id).cloned();
            let params = match cached {
                Some(p) => p,
                None => match self.build(store, id) {
                    Some(p) => p,
                    // Unreadable now: looked at again next time.
                    None => continue,
                },
            };
            for p in params {
                if !out.iter().any(|q| q.hash() == p.hash()) {
                    out.push(p);
                }
            }
        }
        Ok(out)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Built> {
        self.built.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The parameters of session `id`, built and remembered; `None` if its
    /// bytes cannot be read.
    fn build(&self, store: &Store, id: ObjectId) -> Option<Vec<Arc<Parameters>>> {
        let bytes = store.read_blob_verified(id).ok()?;
        let specs: Vec<Spec> = match SessionSpec::decode(&bytes) {
            Ok(s) => s
                .params
                .ckks
                .map(Spec::Ckks)
                .into_iter()
                .chain(s.bgv.map(Spec::Bgv))
                .collect(),
            Err(_) => vec![],
        };
        let params: Vec<Arc<Parameters>> = specs
            .into_iter()
            .filter_map(|spec| {
                if let Some((_, p)) = self.lock().specs.iter().find(|(s, _)| *s == spec) {
                    return Some(p.clone());
                }
                let p = match &spec {
                    Spec::Ckks(c) => c.build(self.allow_insecure).ok()?.rlwe().clone(),
                    Spec::Bgv(b) => b.build(self.allow_insecure).ok()?.rlwe().clone(),
                };
                self.lock().specs.push((spec, p.clone()));
                Some(p)
            })
            .collect();
        self.lock().sessions.insert(id, params.clone());
        Some(params)
    }
}

/// The first message of an upload stream and the header it carries.
async fn receive_header(
    stream: &mut Streaming<UploadChunk>,
) -> std::result::Result<(UploadChunk, UploadHeader), Status> {
    let first = stream
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument("empty upload stream"))?;
    let h = first.header.clone().ok_or_else(|| {
        Status::invalid_argument("the first upload message must carry the header")
    })?;
    Ok((first, h))
}

/// Checks a header on its own (id, kind, length, hash) and gives the
/// upload it announces.
fn check_header(h: &UploadHeader, quota: &Quota) -> std::result::Result<UploadMeta, Status> {
    if !valid_upload_id(&h.upload_id) {
        return Err(Status::invalid_argument(
            "upload_id must be 16..64 characters of [0-9A-Za-z_-]",
        ));
    }
    if !rpc::is_known_kind(&h.kind) {
        return Err(Status::invalid_argument(format!(
            "unknown object kind {:?}",
            h.kind
        )));
    }
    if h.total_bytes == 0 {
        return Err(Status::invalid_argument("an object has at least one byte"));
    }
    if h.total_bytes > quota.max_object_bytes {
        return Err(Status::invalid_argument(format!(
            "object of {} bytes exceeds the limit of {} bytes",
            h.total_bytes, quota.max_object_bytes
        )));
    }
    if !(h.blake3.is_empty() || h.blake3.len() == 32) {
        return Err(Status::invalid_argument(
            "blake3 must be 32 bytes, or empty when the client hashes as it sends",
        ));
    }
    if h.kind == rpc::SESSION_KIND && h.total_bytes > MAX_SESSION_BYTES {
        return Err(Status::invalid_argument("a session spec is at most 1 MiB"));
    }
    Ok(UploadMeta {
        kind: h.kind.clone(),
        total: h.total_bytes,
        hash: <[u8; 32]>::try_from(h.blake3.as_slice()).ok().map(ObjectId),
    })
}

/// The refusal of bytes that are not what their upload says.
fn refusal(kind: &str, why: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!(
        "the bytes are not a well-formed {kind}: {why}; nothing was stored"
    ))
}

/// An upload set up to receive bytes.
struct Receiving {
    /// Bytes held from an earlier attempt (a resume).
    have: u64,
    file: PartWriter,
    /// Fed with every byte held, so that finishing needs no second pass.
    hasher: blake3::Hasher,
    /// Fed with every byte held; `None` for kinds whose bytes are not
    /// checked as they arrive (opaque blobs; session specs, checked whole).
    check: Option<PayloadCheck>,
}

/// How receiving the bytes of one stream ended.
struct Received {
    /// Bytes held in all.
    received: u64,
    /// The stream broke off or broke a rule: what was received is kept
    /// for a resume.
    stream_error: Option<Status>,
    /// The bytes are not what the upload says: the upload is dropped.
    refused: Option<Status>,
}

impl Service {
    /// The Upload call (see the module's notes).
    pub(super) async fn upload_object(
        &self,
        tenant: String,
        mut stream: Streaming<UploadChunk>,
    ) -> std::result::Result<Response<ObjectInfo>, Status> {
        let (first, h) = receive_header(&mut stream).await?;
        let meta = check_header(&h, &self.quota)?;
        let mut rx = match self.begin_upload(&tenant, &h.upload_id, &meta).await? {
            ControlFlow::Continue(rx) => rx,
            ControlFlow::Break(stored) => return Ok(Response::new(object_info(&stored))),
        };
        // Executors may watch the bytes of an upload sent in one stream as
        // they arrive (the chunks as received, shared, not copied), to decode
        // it while it streams in. The budget bounds what slow or stalled
        // streams make them hold.
        let mut watching = (rx.have == 0)
            .then(|| KeptBytes::reserve(&self.kept_bytes, meta.total))
            .flatten()
            .map(|share| {
                let watchers = self.jobs.watch_upload(&tenant, &meta.kind, meta.total);
                (share, watchers)
            })
            .filter(|(_, watchers)| !watchers.is_empty());
        let Received {
            received,
            stream_error,
            mut refused,
        } = self
            .stream_to_part(&meta, first, &mut stream, &mut rx, &mut watching)
            .await?;
        let Receiving {
            file,
            hasher,
            check,
            ..
        } = rx;
        if refused.is_none()
            && stream_error.is_none()
            && received == meta.total
            && let Some(Err(e)) = check.as_ref().map(PayloadCheck::finish)
        {
            refused = Some(refusal(&meta.kind, e));
        }
        if let Some(refusal) = refused {
            // The part's writer is done with the file before it goes.
            drop(file);
            let (store, t, uid) = (self.store.clone(), tenant.clone(), h.upload_id.clone());
            blocking(move || store.abort_upload(&t, &uid)).await?;
            return Err(refusal);
        }
        let hashed = hasher.finalize();
        let id = ObjectId(*hashed.as_bytes());
        let arrived =
            stream_error.is_none() && received == meta.total && meta.hash.is_none_or(|h| h == id);
        if let Some((_share, watchers)) = watching
            && arrived
        {
            for w in watchers {
                w.complete(id);
            }
        }
        // Jobs may start on it while it is stored; the guard tells them how
        // storing ended (dropped on an early return: not stored).
        let arrival = arrived.then(|| {
            self.store
                .arrivals()
                .arrived(&tenant, id, &meta.kind, meta.total)
        });
        // What was received is kept (durably) for a resume.
        tokio::task::block_in_place(|| file.finish()).map_err(ServerError::Io)?;
        if let Some(e) = stream_error {
            return Err(e);
        }
        if received < meta.total {
            return Err(Status::invalid_argument(format!(
                "upload stream ended at {received} of {} bytes: resume from {received}",
                meta.total
            )));
        }
        let (store, t, uid) = (self.store.clone(), tenant.clone(), h.upload_id.clone());
        let obj = blocking(move || {
            let stored = install(&store, &t, &uid, &meta, hashed);
            if let (Some(a), Ok(_)) = (arrival, &stored) {
                a.stored();
            }
            stored
        })
        .await?;
        tracing::info!(%tenant, object = %obj.id, kind = %obj.kind, size = obj.size, "object stored");
        Ok(Response::new(object_info(&obj)))
    }

    /// Finds the object already stored (nothing to transfer), or sets the
    /// upload up: quota reserved, part file open, the bytes held from an
    /// interrupted attempt hashed and checked again. One trip to a blocking
    /// thread: this is on the path of every upload.
    async fn begin_upload(
        &self,
        tenant: &str,
        upload_id: &str,
        meta: &UploadMeta,
    ) -> std::result::Result<ControlFlow<ObjectMeta, Receiving>, Status> {
        let (store, known, t, m, uid, quota) = (
            self.store.clone(),
            self.known_params.clone(),
            tenant.to_string(),
            meta.clone(),
            upload_id.to_string(),
            self.quota,
        );
        blocking(move || {
            // Already stored for this tenant: nothing to transfer (unless
            // the stored bytes are damaged: these repair them).
            if let Some(h) = m.hash
                && let Some(o) = store.object(&t, h)?
            {
                if o.kind != m.kind {
                    return Err(crate::store::kind_conflict(o.id, &o.kind, &m.kind));
                }
                if !o.damaged {
                    return Ok(ControlFlow::Break(o));
                }
            }
            let mut check = match rpc::parse_object_kind(&m.kind) {
                Some(kind) => {
                    let params = match kind {
                        ObjectKind::TfheServerKey | ObjectKind::TfheUint | ObjectKind::TfheBit => {
                            vec![]
                        }
                        _ => known.of_tenant(&store, &t)?,
                    };
                    Some(PayloadCheck::new(kind, m.total, params))
                }
                None => None,
            };
            // Checks the tenant's quota, atomically with reserving.
            let have = store.begin_upload(&t, &uid, &m, &quota)?;
            let mut hasher = blake3::Hasher::new();
            store.replay_part(&t, &uid, have, |bytes| {
                hasher.update(bytes);
                if let Some(c) = &mut check {
                    // A refusal is kept and given by the next push.
                    let _ = c.push(bytes);
                }
            })?;
            Ok(ControlFlow::Continue(Receiving {
                have,
                file: store.open_part(&t, &uid, have)?,
                hasher,
                check,
            }))
        })
        .await
    }

    /// Receives the stream's bytes into the part file, hashing and checking
    /// them on the way (and handing them to the executors watching).
    async fn stream_to_part(
        &self,
        meta: &UploadMeta,
        first: UploadChunk,
        stream: &mut Streaming<UploadChunk>,
        rx: &mut Receiving,
        watching: &mut Option<(KeptBytes, Vec<Box<dyn crate::exec::UploadWatcher>>)>,
    ) -> std::result::Result<Received, Status> {
        let mut received = rx.have;
        let mut next = Some(first);
        let fail = |received, e| {
            Ok(Received {
                received,
                stream_error: Some(e),
                refused: None,
            })
        };
        // A resume whose held bytes are already refused goes no further.
        if let Some(Err(e)) = rx.check.as_mut().map(|c| c.push(&[])) {
            return Ok(Received {
                received,
                stream_error: None,
                refused: Some(refusal(&meta.kind, e)),
            });
        }
        loop {
            let msg = match next.take() {
                Some(m) => m,
                None => match stream.next().await {
                    None => break,
                    Some(Ok(m)) if m.header.is_some() => {
                        return fail(
                            received,
                            Status::invalid_argument(
                                "only the first upload message carries a header",
                            ),
                        );
                    }
                    Some(Ok(m)) => m,
                    Some(Err(e)) => return fail(received, e),
                },
            };
            if msg.data.is_empty() {
                continue;
            }
            if msg.offset != received {
                return fail(
                    received,
                    Status::invalid_argument(format!(
                        "chunk at offset {} but {received} bytes are held: resume from {received}",
                        msg.offset
                    )),
                );
            }
            if msg.data.len() > self.max_chunk as usize {
                return fail(
                    received,
                    Status::invalid_argument(format!(
                        "chunk of {} bytes exceeds the limit of {}",
                        msg.data.len(),
                        self.max_chunk
                    )),
                );
            }
            if received + msg.data.len() as u64 > meta.total {
                return fail(
                    received,
                    Status::invalid_argument(format!(
                        "more bytes than the {} announced",
                        meta.total
                    )),
                );
            }
            // Checked before anything else sees them.
            if let Some(Err(e)) = rx.check.as_mut().map(|c| c.push(&msg.data)) {
                return Ok(Received {
                    received,
                    stream_error: None,
                    refused: Some(refusal(&meta.kind, e)),
                });
            }
            if let Some((_, watchers)) = watching {
                for w in watchers.iter_mut() {
                    w.bytes(msg.data.clone());
                }
            }
            // Hashing and writing block.
            tokio::task::block_in_place(|| {
                rx.hasher.update(&msg.data);
                rx.file.write(&msg.data)
            })
            .map_err(ServerError::Io)?;
            received += msg.data.len() as u64;
        }
        Ok(Received {
            received,
            stream_error: None,
            refused: None,
        })
    }
}

/// Stores an upload whose bytes are all in: a session spec (small) must
/// decode first; its announced hash is checked as the blob is installed.
fn install(
    store: &Store,
    tenant: &str,
    upload_id: &str,
    meta: &UploadMeta,
    hashed: blake3::Hash,
) -> Result<ObjectMeta> {
    if meta.kind == rpc::SESSION_KIND {
        let bytes = store.read_part(tenant, upload_id)?;
        if let Err(e) = SessionSpec::decode(&bytes) {
            // It can never become valid: drop it.
            store.abort_upload(tenant, upload_id)?;
            return Err(ServerError::InvalidArgument(format!("session spec: {e}")));
        }
    }
    store.finish_upload(tenant, upload_id, meta, Some(hashed))
}
