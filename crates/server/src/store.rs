//! The durable store: SQLite (WAL, `synchronous=FULL`) for metadata and
//! content-addressed blob files for object bytes.
//!
//! A blob is written to a temporary file, fsynced, renamed to
//! `blobs/<2 hex>/<64 hex>` and its directory fsynced; only then is the
//! metadata row committed and the object acknowledged. A crash at any point
//! leaves either no object or a complete one. Partial uploads live in
//! `uploads/<tenant>/<upload id>.part` so that a client can resume them;
//! their rows and part files are not fsynced when they start (a crash that
//! loses them only restarts the upload from byte 0).
//! One left idle past the server's upload expiry is dropped
//! ([`Store::expire_uploads`]).

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};

use crate::arrivals::Arrivals;
use crate::error::{Result, ServerError};
use crate::part::PartWriter;

/// Metadata of one stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Hex BLAKE3 of the content.
    pub id: String,
    /// Object kind (e.g. `ckks.ciphertext`).
    pub kind: String,
    /// Size in bytes.
    pub size: u64,
    /// Creation time (Unix ms).
    pub created_ms: i64,
}

/// An output of a job, computed and about to be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyOutput {
    /// Output name.
    pub name: String,
    /// Object kind.
    pub kind: String,
    /// Hex BLAKE3 of `bytes`: the object id it is stored under.
    pub id: String,
    /// Content.
    pub bytes: Vec<u8>,
}

impl ReadyOutput {
    /// An output named `name` of `kind` (its id is hashed here).
    pub fn new(name: String, kind: String, bytes: Vec<u8>) -> Self {
        let id = blake3::hash(&bytes).to_hex().to_string();
        Self {
            name,
            kind,
            id,
            bytes,
        }
    }
}

/// A pending (resumable) upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadMeta {
    /// Object kind.
    pub kind: String,
    /// Announced total length.
    pub total: u64,
    /// Announced hex BLAKE3; empty when the client hashes the bytes as it
    /// makes them and checks the id it is answered with.
    pub hash: String,
}

/// Job states as stored (the same numbering as the wire's `JobState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Waiting for a worker.
    Queued = 1,
    /// On a worker.
    Running = 2,
    /// Done; outputs stored.
    Succeeded = 3,
    /// Failed; `error` says why.
    Failed = 4,
    /// Cancelled.
    Cancelled = 5,
}

impl JobState {
    fn from_i64(v: i64) -> Self {
        match v {
            1 => Self::Queued,
            2 => Self::Running,
            3 => Self::Succeeded,
            5 => Self::Cancelled,
            _ => Self::Failed,
        }
    }

    /// Whether the state is final.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

/// One output of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutputMeta {
    /// Output name.
    pub name: String,
    /// The stored object.
    pub object: ObjectMeta,
}

/// A job row.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    /// Owner.
    pub tenant: String,
    /// Job id (32 hex).
    pub id: String,
    /// Job kind.
    pub kind: String,
    /// Kind-specific description.
    pub spec: Vec<u8>,
    /// State.
    pub state: JobState,
    /// 0..1.
    pub progress: f32,
    /// Human-readable note (never a secret or plaintext).
    pub message: String,
    /// Failure reason.
    pub error: String,
    /// Creation time (Unix ms).
    pub created_ms: i64,
    /// End time (Unix ms, 0 while running).
    pub finished_ms: i64,
    /// Homomorphic evaluation time.
    pub compute_us: u64,
    /// Times a worker started it.
    pub attempts: u32,
    /// Outputs (when succeeded).
    pub outputs: Vec<JobOutputMeta>,
}

/// The store.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    db: Mutex<Connection>,
    /// Held to install or remove a blob file, and across the metadata
    /// commit that follows an install (taken before `db`). Kept apart from
    /// `db` so that the directory fsync of an install holds up no other
    /// metadata work (a job being started, a lookup).
    blobs: Mutex<()>,
    /// The metadata's write-ahead log, opened to be synced on its own (see
    /// [`Self::sync_metadata`]).
    wal: std::sync::OnceLock<Option<File>>,
    arrivals: Arc<Arrivals>,
}

/// Current time in Unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Records an object of a tenant (idempotent); its blob is installed.
fn record_object(
    db: &Connection,
    tenant: &str,
    id: &str,
    kind: &str,
    size: u64,
    created: i64,
) -> Result<()> {
    db.execute(
        "INSERT OR IGNORE INTO objects(tenant,id,kind,size,created) VALUES(?1,?2,?3,?4,?5)",
        params![tenant, id, kind, size as i64, created],
    )?;
    Ok(())
}

fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS objects(
  tenant TEXT NOT NULL, id TEXT NOT NULL, kind TEXT NOT NULL, size INTEGER NOT NULL,
  created INTEGER NOT NULL, PRIMARY KEY(tenant, id));
CREATE TABLE IF NOT EXISTS uploads(
  tenant TEXT NOT NULL, upload_id TEXT NOT NULL, kind TEXT NOT NULL, total INTEGER NOT NULL,
  hash TEXT NOT NULL, created INTEGER NOT NULL, PRIMARY KEY(tenant, upload_id));
CREATE TABLE IF NOT EXISTS jobs(
  tenant TEXT NOT NULL, id TEXT NOT NULL, kind TEXT NOT NULL, spec BLOB NOT NULL,
  state INTEGER NOT NULL, progress REAL NOT NULL, message TEXT NOT NULL, error TEXT NOT NULL,
  created INTEGER NOT NULL, finished INTEGER NOT NULL, compute_us INTEGER NOT NULL,
  attempts INTEGER NOT NULL, client_ref TEXT NOT NULL, PRIMARY KEY(tenant, id));
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS job_outputs(
  tenant TEXT NOT NULL, job TEXT NOT NULL, pos INTEGER NOT NULL, name TEXT NOT NULL,
  object TEXT NOT NULL, PRIMARY KEY(tenant, job, pos));
";

impl Store {
    /// Opens (creating if needed) the store under `root`.
    pub fn open(root: &Path) -> Result<Self> {
        for d in ["blobs", "uploads", "tmp"] {
            fs::create_dir_all(root.join(d))?;
        }
        let db = Connection::open(root.join("meta.sqlite"))?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "FULL")?;
        db.busy_timeout(std::time::Duration::from_secs(10))?;
        db.execute_batch(SCHEMA)?;
        // Stale temporary files from a crash are never referenced.
        if let Ok(rd) = fs::read_dir(root.join("tmp")) {
            for e in rd.flatten() {
                let _ = fs::remove_file(e.path());
            }
        }
        let store = Self {
            root: root.to_path_buf(),
            db: Mutex::new(db),
            blobs: Mutex::new(()),
            wal: std::sync::OnceLock::new(),
            arrivals: Arc::default(),
        };
        store.remove_orphan_parts()?;
        Ok(store)
    }

    /// Removes part files whose upload row a crash lost (the row is
    /// committed without an fsync; see [`Self::begin_upload`]).
    fn remove_orphan_parts(&self) -> Result<()> {
        let Ok(tenants) = fs::read_dir(self.root.join("uploads")) else {
            return Ok(());
        };
        let pending: std::collections::HashSet<(String, String)> = self
            .db()
            .prepare("SELECT tenant, upload_id FROM uploads")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for dir in tenants.flatten() {
            let tenant = dir.file_name().to_string_lossy().into_owned();
            let Ok(parts) = fs::read_dir(dir.path()) else {
                continue;
            };
            for part in parts.flatten() {
                let name = part.file_name().to_string_lossy().into_owned();
                let held = name
                    .strip_suffix(".part")
                    .is_some_and(|id| pending.contains(&(tenant.clone(), id.to_string())));
                if !held {
                    let _ = fs::remove_file(part.path());
                }
            }
        }
        Ok(())
    }

    /// The store's folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn lock_blobs(&self) -> MutexGuard<'_, ()> {
        self.blobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn db(&self) -> MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes every metadata commit so far durable, those committed
    /// without waiting for the disk included, without taking the metadata
    /// lock: an fsync of the write-ahead log, which holds them (or, if a
    /// checkpoint moved them to the database file, SQLite synced that).
    /// A job is inserted this way so that it can start while its row is
    /// being made durable, instead of after.
    pub fn sync_metadata(&self) -> Result<()> {
        let wal = self.wal.get_or_init(|| {
            File::open(self.root.join("meta.sqlite-wal"))
                .inspect_err(|e| tracing::warn!(error = %e, "write-ahead log not found to sync"))
                .ok()
        });
        match wal {
            Some(f) => f.sync_data()?,
            // A checkpoint syncs the log first.
            None => self.db().execute_batch("PRAGMA wal_checkpoint(FULL)")?,
        }
        Ok(())
    }

    /// Runs one statement committed without waiting for the disk
    /// (`synchronous=NORMAL`): for rows that need not survive a machine
    /// crash. In WAL mode such a commit still survives a crash of the
    /// process; the next fsynced commit makes it durable too.
    fn execute_unsynced(&self, sql: &str, params: impl rusqlite::Params) -> Result<usize> {
        let db = self.db();
        db.pragma_update(None, "synchronous", "NORMAL")?;
        let r = db.execute(sql, params);
        db.pragma_update(None, "synchronous", "FULL")?;
        Ok(r?)
    }

    /// Objects whose bytes are in while they are being stored (jobs may
    /// start on them; nothing else sees them before they are stored).
    pub fn arrivals(&self) -> &Arc<Arrivals> {
        &self.arrivals
    }

    /// Path of the blob with hex hash `id`.
    pub fn blob_path(&self, id: &str) -> PathBuf {
        self.root.join("blobs").join(&id[..2]).join(id)
    }

    fn part_path(&self, tenant: &str, upload_id: &str) -> PathBuf {
        self.root
            .join("uploads")
            .join(tenant)
            .join(format!("{upload_id}.part"))
    }

    /// Moves a complete, fsynced file into the blob store (atomic rename +
    /// directory fsync). An existing blob with the same hash is kept.
    ///
    /// `_locked` is the blob lock, held: the caller records the object
    /// before letting it go, so `delete_object` (which removes a blob no
    /// object refers to, under the same lock) cannot remove the blob
    /// between this check and that record.
    fn install_blob(&self, _locked: &MutexGuard<'_, ()>, file: &Path, id: &str) -> Result<()> {
        let dest = self.blob_path(id);
        let dir = dest.parent().expect("blob path has a parent");
        fs::create_dir_all(dir)?;
        if dest.exists() {
            fs::remove_file(file)?;
            return Ok(());
        }
        fs::rename(file, &dest)?;
        fsync_dir(dir)?;
        Ok(())
    }

    /// Writes `bytes` to a fsynced temporary file, ready for
    /// [`Self::install_blob`]; returns its hex BLAKE3 and path.
    fn stage_blob(&self, bytes: &[u8]) -> Result<(String, PathBuf)> {
        let id = blake3::hash(bytes).to_hex().to_string();
        let tmp = self.stage_blob_as(&id, bytes)?;
        Ok((id, tmp))
    }

    /// [`Self::stage_blob`] of bytes whose hex BLAKE3 `id` is known.
    fn stage_blob_as(&self, id: &str, bytes: &[u8]) -> Result<PathBuf> {
        let tmp = self
            .root
            .join("tmp")
            .join(format!("{id}.{}", hex::encode(rand_bytes::<8>())));
        // Direct, as upload parts are (see `part`): job outputs reach their
        // watchers from memory, not from this file. (Through the page cache,
        // storing a 1 MB output took 2 ms more.)
        let mut f = PartWriter::open(&tmp, 0)?;
        f.write(bytes)?;
        f.finish()?;
        Ok(tmp)
    }

    /// Stores `bytes` as an object of `tenant` (blob written, fsynced and
    /// installed, then recorded, under the metadata lock like every object).
    pub fn put_object(&self, tenant: &str, kind: &str, bytes: &[u8]) -> Result<ObjectMeta> {
        let (id, tmp) = self.stage_blob(bytes)?;
        {
            let blobs = self.lock_blobs();
            self.install_blob(&blobs, &tmp, &id)?;
            record_object(&self.db(), tenant, &id, kind, bytes.len() as u64, now_ms())?;
        }
        self.recorded_object(tenant, &id)
    }

    /// Reads a whole blob.
    pub fn read_blob(&self, id: &str) -> Result<Vec<u8>> {
        Ok(fs::read(self.blob_path(id))?)
    }

    /// An object just recorded under the metadata lock (it cannot be
    /// missing unless the store is broken).
    fn recorded_object(&self, tenant: &str, id: &str) -> Result<ObjectMeta> {
        self.object(tenant, id)?
            .ok_or_else(|| ServerError::Internal("object vanished after insert".into()))
    }

    /// An object of a tenant.
    pub fn object(&self, tenant: &str, id: &str) -> Result<Option<ObjectMeta>> {
        Ok(self
            .db()
            .query_row(
                "SELECT id,kind,size,created FROM objects WHERE tenant=?1 AND id=?2",
                params![tenant, id],
                |r| {
                    Ok(ObjectMeta {
                        id: r.get(0)?,
                        kind: r.get(1)?,
                        size: r.get::<_, i64>(2)? as u64,
                        created_ms: r.get(3)?,
                    })
                },
            )
            .optional()?)
    }

    /// All objects of a tenant.
    pub fn list_objects(&self, tenant: &str) -> Result<Vec<ObjectMeta>> {
        let db = self.db();
        let mut st = db.prepare(
            "SELECT id,kind,size,created FROM objects WHERE tenant=?1 ORDER BY created, id",
        )?;
        let rows = st.query_map(params![tenant], |r| {
            Ok(ObjectMeta {
                id: r.get(0)?,
                kind: r.get(1)?,
                size: r.get::<_, i64>(2)? as u64,
                created_ms: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// Number of objects of a tenant.
    pub fn count_objects(&self, tenant: &str) -> Result<u64> {
        Ok(self.db().query_row(
            "SELECT COUNT(*) FROM objects WHERE tenant=?1",
            params![tenant],
            |r| r.get::<_, i64>(0),
        )? as u64)
    }

    /// Deletes a tenant's object; the blob goes when no tenant references it.
    pub fn delete_object(&self, tenant: &str, id: &str) -> Result<Option<ObjectMeta>> {
        let Some(meta) = self.object(tenant, id)? else {
            return Ok(None);
        };
        let _blobs = self.lock_blobs();
        let db = self.db();
        db.execute(
            "DELETE FROM objects WHERE tenant=?1 AND id=?2",
            params![tenant, id],
        )?;
        let left: i64 = db.query_row(
            "SELECT COUNT(*) FROM objects WHERE id=?1",
            params![id],
            |r| r.get(0),
        )?;
        if left == 0 {
            let _ = fs::remove_file(self.blob_path(id));
        }
        Ok(Some(meta))
    }

    /// A pending upload and the bytes durably received so far.
    pub fn upload(&self, tenant: &str, upload_id: &str) -> Result<Option<(UploadMeta, u64)>> {
        let meta = self
            .db()
            .query_row(
                "SELECT kind,total,hash FROM uploads WHERE tenant=?1 AND upload_id=?2",
                params![tenant, upload_id],
                |r| {
                    Ok(UploadMeta {
                        kind: r.get(0)?,
                        total: r.get::<_, i64>(1)? as u64,
                        hash: r.get(2)?,
                    })
                },
            )
            .optional()?;
        Ok(match meta {
            Some(m) => {
                let have = fs::metadata(self.part_path(tenant, upload_id))
                    .map(|m| m.len())
                    .unwrap_or(0);
                Some((m, have))
            }
            None => None,
        })
    }

    /// Starts (or finds) a pending upload; returns the bytes already held.
    /// A pending upload with a different header is refused.
    pub fn begin_upload(&self, tenant: &str, upload_id: &str, meta: &UploadMeta) -> Result<u64> {
        if let Some((old, have)) = self.upload(tenant, upload_id)? {
            if old != *meta {
                return Err(ServerError::InvalidArgument(format!(
                    "upload {upload_id} was started with a different kind, length or hash"
                )));
            }
            return Ok(have.min(meta.total));
        }
        fs::create_dir_all(self.root.join("uploads").join(tenant))?;
        // Nothing of a pending upload has to survive a crash: a lost row or
        // part file only makes the client start over from byte 0. So the
        // row is committed without waiting for the disk (the next fsynced
        // commit, at the latest the one that acknowledges an object, takes
        // it along), and `open_part` creates the part file unsynced.
        self.execute_unsynced(
            "INSERT INTO uploads(tenant,upload_id,kind,total,hash,created) VALUES(?1,?2,?3,?4,?5,?6)",
            params![tenant, upload_id, meta.kind, meta.total as i64, meta.hash, now_ms()],
        )?;
        Ok(0)
    }

    /// Opens (creating if needed) the part file of a pending upload for
    /// appending at `offset` (anything past `offset` from an interrupted
    /// write is cut off).
    pub fn open_part(&self, tenant: &str, upload_id: &str, offset: u64) -> Result<PartWriter> {
        Ok(PartWriter::open(
            &self.part_path(tenant, upload_id),
            offset,
        )?)
    }

    /// A hasher fed with the first `len` bytes of a pending upload (to go on
    /// hashing a resumed upload as its bytes arrive).
    pub fn part_hasher(&self, tenant: &str, upload_id: &str, len: u64) -> Result<blake3::Hasher> {
        let mut hasher = blake3::Hasher::new();
        let file = File::open(self.part_path(tenant, upload_id))?;
        std::io::copy(
            &mut std::io::BufReader::with_capacity(1 << 20, file.take(len)),
            &mut hasher,
        )?;
        Ok(hasher)
    }

    /// Finishes an upload whose part file holds every byte, synced by the
    /// caller: checks the announced hash, if any (against `hashed`, the hash
    /// of the bytes as they were written, or else read back from the file),
    /// installs the blob, then records the object and drops the upload row
    /// in one transaction.
    pub fn finish_upload(
        &self,
        tenant: &str,
        upload_id: &str,
        meta: &UploadMeta,
        hashed: Option<blake3::Hash>,
    ) -> Result<ObjectMeta> {
        let part = self.part_path(tenant, upload_id);
        let got = match hashed {
            Some(h) => h,
            None => self.part_hasher(tenant, upload_id, u64::MAX)?.finalize(),
        };
        let got = got.to_hex().to_string();
        if !meta.hash.is_empty() && got != meta.hash {
            // A corrupt upload cannot be resumed: start over.
            let _ = fs::remove_file(&part);
            self.db().execute(
                "DELETE FROM uploads WHERE tenant=?1 AND upload_id=?2",
                params![tenant, upload_id],
            )?;
            return Err(ServerError::InvalidArgument(format!(
                "content hash mismatch: header says {}, bytes hash to {got}",
                meta.hash
            )));
        }
        {
            let blobs = self.lock_blobs();
            self.install_blob(&blobs, &part, &got)?;
            let mut db = self.db();
            let tx = db.transaction()?;
            record_object(&tx, tenant, &got, &meta.kind, meta.total, now_ms())?;
            tx.execute(
                "DELETE FROM uploads WHERE tenant=?1 AND upload_id=?2",
                params![tenant, upload_id],
            )?;
            tx.commit()?;
        }
        self.recorded_object(tenant, &got)
    }

    /// Number of pending uploads of a tenant.
    pub fn count_uploads(&self, tenant: &str) -> Result<u64> {
        Ok(self.db().query_row(
            "SELECT COUNT(*) FROM uploads WHERE tenant=?1",
            params![tenant],
            |r| r.get::<_, i64>(0),
        )? as u64)
    }

    /// The job a tenant submitted with `client_ref`, if any.
    pub fn job_by_ref(&self, tenant: &str, client_ref: &str) -> Result<Option<JobRecord>> {
        if client_ref.is_empty() {
            return Ok(None);
        }
        let id: Option<String> = self
            .db()
            .query_row(
                "SELECT id FROM jobs WHERE tenant=?1 AND client_ref=?2",
                params![tenant, client_ref],
                |r| r.get(0),
            )
            .optional()?;
        match id {
            Some(id) => self.job(tenant, &id),
            None => Ok(None),
        }
    }

    /// Drops a pending upload and its partial data.
    pub fn abort_upload(&self, tenant: &str, upload_id: &str) -> Result<()> {
        let _ = fs::remove_file(self.part_path(tenant, upload_id));
        self.db().execute(
            "DELETE FROM uploads WHERE tenant=?1 AND upload_id=?2",
            params![tenant, upload_id],
        )?;
        Ok(())
    }

    /// Drops the pending uploads started more than `idle` ago whose part
    /// file has not changed for as long (rows and part files); returns how
    /// many. A client that comes back finds its offset at 0 and starts over.
    pub fn expire_uploads(&self, idle: std::time::Duration) -> Result<u64> {
        let Some(cutoff) = SystemTime::now().checked_sub(idle) else {
            return Ok(0);
        };
        let cutoff_ms = cutoff
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let stale: Vec<(String, String)> = self
            .db()
            .prepare("SELECT tenant, upload_id FROM uploads WHERE created < ?1")?
            .query_map(params![cutoff_ms], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut dropped = 0;
        for (tenant, upload_id) in stale {
            let written =
                fs::metadata(self.part_path(&tenant, &upload_id)).and_then(|m| m.modified());
            if written.is_ok_and(|t| t >= cutoff) {
                continue;
            }
            self.abort_upload(&tenant, &upload_id)?;
            dropped += 1;
        }
        Ok(dropped)
    }

    /// Inserts a queued job; with a non-empty `client_ref` an existing job
    /// with the same ref is returned instead.
    pub fn insert_job(
        &self,
        tenant: &str,
        kind: &str,
        spec: &[u8],
        client_ref: &str,
    ) -> Result<(JobRecord, bool)> {
        if !client_ref.is_empty() {
            let existing: Option<String> = self
                .db()
                .query_row(
                    "SELECT id FROM jobs WHERE tenant=?1 AND client_ref=?2",
                    params![tenant, client_ref],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(id) = existing {
                return Ok((self.job(tenant, &id)?.expect("job just found"), false));
            }
        }
        let id = hex::encode(rand_bytes::<16>());
        // Durable once the caller has run `sync_metadata`.
        self.execute_unsynced(
            "INSERT INTO jobs(tenant,id,kind,spec,state,progress,message,error,created,finished,compute_us,attempts,client_ref)
             VALUES(?1,?2,?3,?4,1,0,'queued','',?5,0,0,0,?6)",
            params![tenant, id, kind, spec, now_ms(), client_ref],
        )?;
        Ok((self.job(tenant, &id)?.expect("job just inserted"), true))
    }

    /// A job of a tenant, with its outputs.
    pub fn job(&self, tenant: &str, id: &str) -> Result<Option<JobRecord>> {
        let db = self.db();
        let rec = db
            .query_row(
                "SELECT kind,spec,state,progress,message,error,created,finished,compute_us,attempts
                 FROM jobs WHERE tenant=?1 AND id=?2",
                params![tenant, id],
                |r| {
                    Ok(JobRecord {
                        tenant: tenant.to_string(),
                        id: id.to_string(),
                        kind: r.get(0)?,
                        spec: r.get(1)?,
                        state: JobState::from_i64(r.get(2)?),
                        progress: r.get::<_, f64>(3)? as f32,
                        message: r.get(4)?,
                        error: r.get(5)?,
                        created_ms: r.get(6)?,
                        finished_ms: r.get(7)?,
                        compute_us: r.get::<_, i64>(8)? as u64,
                        attempts: r.get::<_, i64>(9)? as u32,
                        outputs: vec![],
                    })
                },
            )
            .optional()?;
        let Some(mut rec) = rec else { return Ok(None) };
        let mut st = db.prepare(
            "SELECT o.name, b.id, b.kind, b.size, b.created FROM job_outputs o
             JOIN objects b ON b.tenant=o.tenant AND b.id=o.object
             WHERE o.tenant=?1 AND o.job=?2 ORDER BY o.pos",
        )?;
        rec.outputs = st
            .query_map(params![tenant, id], |r| {
                Ok(JobOutputMeta {
                    name: r.get(0)?,
                    object: ObjectMeta {
                        id: r.get(1)?,
                        kind: r.get(2)?,
                        size: r.get::<_, i64>(3)? as u64,
                        created_ms: r.get(4)?,
                    },
                })
            })?
            .collect::<std::result::Result<_, _>>()?;
        Ok(Some(rec))
    }

    /// Jobs of a tenant not yet final.
    pub fn count_active_jobs(&self, tenant: &str) -> Result<u64> {
        Ok(self.db().query_row(
            "SELECT COUNT(*) FROM jobs WHERE tenant=?1 AND state IN (1,2)",
            params![tenant],
            |r| r.get::<_, i64>(0),
        )? as u64)
    }

    /// Every job not yet final (for recovery after a restart), oldest first.
    pub fn unfinished_jobs(&self) -> Result<Vec<(String, String, JobState, u32)>> {
        let db = self.db();
        let mut st = db.prepare(
            "SELECT tenant,id,state,attempts FROM jobs WHERE state IN (1,2) ORDER BY created",
        )?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                JobState::from_i64(r.get(2)?),
                r.get::<_, i64>(3)? as u32,
            ))
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// Marks a job running (one more attempt) unless it is already final;
    /// returns whether it should run. The attempt count bounds restarts
    /// that the job itself causes (a crash of the process, which an
    /// unsynced commit survives), so the commit does not wait for the disk.
    pub fn start_job(&self, tenant: &str, id: &str) -> Result<bool> {
        let n = self.execute_unsynced(
            "UPDATE jobs SET state=2, attempts=attempts+1, message='running' WHERE tenant=?1 AND id=?2 AND state IN (1,2)",
            params![tenant, id],
        )?;
        Ok(n == 1)
    }

    /// Records progress of a running job. Progress is advisory: its commit
    /// does not wait for the disk (it runs on the job's thread, inside the
    /// compute it reports on).
    pub fn set_progress(&self, tenant: &str, id: &str, progress: f32, message: &str) -> Result<()> {
        self.execute_unsynced(
            "UPDATE jobs SET progress=?3, message=?4 WHERE tenant=?1 AND id=?2 AND state=2",
            params![tenant, id, progress as f64, message],
        )?;
        Ok(())
    }

    /// Ends a job (failed or cancelled) unless it is already final.
    pub fn end_job(&self, tenant: &str, id: &str, state: JobState, error: &str) -> Result<()> {
        self.db().execute(
            "UPDATE jobs SET state=?3, error=?4, message=?5, finished=?6 WHERE tenant=?1 AND id=?2 AND state IN (1,2)",
            params![tenant, id, state as i64, error, format!("{state:?}").to_lowercase(), now_ms()],
        )?;
        Ok(())
    }

    /// Stores a job's outputs (blobs first, then one transaction for the
    /// object rows, the output list and the final state).
    pub fn complete_job(
        &self,
        tenant: &str,
        id: &str,
        outputs: &[ReadyOutput],
        compute_us: u64,
    ) -> Result<()> {
        // Written and fsynced before taking the lock; installed under it.
        let staged = outputs
            .iter()
            .map(|o| self.stage_blob_as(&o.id, &o.bytes))
            .collect::<Result<Vec<_>>>()?;
        let blobs = self.lock_blobs();
        for (o, tmp) in outputs.iter().zip(&staged) {
            self.install_blob(&blobs, tmp, &o.id)?;
        }
        let mut db = self.db();
        let tx = db.transaction()?;
        let now = now_ms();
        for (pos, o) in outputs.iter().enumerate() {
            record_object(&tx, tenant, &o.id, &o.kind, o.bytes.len() as u64, now)?;
            tx.execute(
                "INSERT OR REPLACE INTO job_outputs(tenant,job,pos,name,object) VALUES(?1,?2,?3,?4,?5)",
                params![tenant, id, pos as i64, o.name, o.id],
            )?;
        }
        tx.execute(
            "UPDATE jobs SET state=3, progress=1, message='succeeded', finished=?3, compute_us=?4 WHERE tenant=?1 AND id=?2",
            params![tenant, id, now, compute_us as i64],
        )?;
        tx.commit()?;
        Ok(())
    }
}

/// `N` bytes from the OS CSPRNG.
pub fn rand_bytes<const N: usize>() -> [u8; N] {
    use rand_core::{OsRng, TryRngCore};
    let mut b = [0u8; N];
    OsRng
        .try_fill_bytes(&mut b)
        .expect("the OS random number generator failed");
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_objects_and_tenants() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let bytes = rand_bytes::<1000>().to_vec();
        let id = s.put_object("a", "raw", &bytes).unwrap().id;
        assert_eq!(id, blake3::hash(&bytes).to_hex().to_string());
        assert_eq!(s.read_blob(&id).unwrap(), bytes);
        assert!(s.object("a", &id).unwrap().is_some());
        assert!(s.object("b", &id).unwrap().is_none());
        s.put_object("b", "raw", &bytes).unwrap();
        s.delete_object("a", &id).unwrap();
        // Still referenced by b.
        assert_eq!(s.read_blob(&id).unwrap(), bytes);
        s.delete_object("b", &id).unwrap();
        assert!(s.read_blob(&id).is_err());
    }

    #[test]
    fn a_job_inserted_then_synced_is_there_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let id = {
            let s = Store::open(dir.path()).unwrap();
            let (rec, new) = s.insert_job("t", "graph.v1", b"spec", "").unwrap();
            assert!(new);
            s.sync_metadata().unwrap();
            // The log was found: synced by itself, not by a checkpoint.
            assert!(matches!(s.wal.get(), Some(Some(_))));
            rec.id
        };
        let s = Store::open(dir.path()).unwrap();
        let rec = s.job("t", &id).unwrap().unwrap();
        assert_eq!(
            (rec.state, rec.spec.as_slice()),
            (JobState::Queued, &b"spec"[..])
        );
    }

    #[test]
    fn resumable_upload_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let meta = UploadMeta {
            kind: "raw".into(),
            total: data.len() as u64,
            hash: blake3::hash(&data).to_hex().to_string(),
        };
        {
            let s = Store::open(dir.path()).unwrap();
            assert_eq!(s.begin_upload("t", "u1", &meta).unwrap(), 0);
            let mut f = s.open_part("t", "u1", 0).unwrap();
            f.write(&data[..40_000]).unwrap();
            f.finish().unwrap();
        }
        let s = Store::open(dir.path()).unwrap();
        let have = s.begin_upload("t", "u1", &meta).unwrap();
        assert_eq!(have, 40_000);
        let mut f = s.open_part("t", "u1", have).unwrap();
        f.write(&data[have as usize..]).unwrap();
        f.finish().unwrap();
        let obj = s.finish_upload("t", "u1", &meta, None).unwrap();
        assert_eq!(obj.id, meta.hash);
        assert_eq!(s.read_blob(&obj.id).unwrap(), data);
        assert!(s.upload("t", "u1").unwrap().is_none());
        // A different header for a pending upload id is refused.
        s.begin_upload("t", "u2", &meta).unwrap();
        let other = UploadMeta { total: 5, ..meta };
        assert!(matches!(
            s.begin_upload("t", "u2", &other),
            Err(ServerError::InvalidArgument(_))
        ));
    }

    #[test]
    fn uploads_idle_past_the_expiry_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let meta = UploadMeta {
            kind: "raw".into(),
            total: 10,
            hash: "00".repeat(32),
        };
        let hour = std::time::Duration::from_secs(3600);
        for u in ["abandoned", "still-writing", "fresh"] {
            s.begin_upload("t", u, &meta).unwrap();
            let mut f = s.open_part("t", u, 0).unwrap();
            f.write(b"12345").unwrap();
            f.finish().unwrap();
        }
        // Two were started two hours ago; one of them was written to since.
        let two_hours_ago = now_ms() - 2 * 3600 * 1000;
        s.db()
            .execute(
                "UPDATE uploads SET created=?1 WHERE upload_id IN ('abandoned', 'still-writing')",
                params![two_hours_ago],
            )
            .unwrap();
        File::options()
            .write(true)
            .open(s.part_path("t", "abandoned"))
            .unwrap()
            .set_modified(SystemTime::now() - 2 * hour)
            .unwrap();
        assert_eq!(s.expire_uploads(hour).unwrap(), 1);
        assert!(s.upload("t", "abandoned").unwrap().is_none());
        assert!(!s.part_path("t", "abandoned").exists());
        for u in ["still-writing", "fresh"] {
            assert_eq!(s.upload("t", u).unwrap().map(|(_, have)| have), Some(5));
        }
        assert_eq!(s.count_uploads("t").unwrap(), 2);
        assert_eq!(s.expire_uploads(hour).unwrap(), 0);
    }

    /// The row and part file of a pending upload are not fsynced: a crash
    /// may lose either, and the upload then starts over from byte 0.
    #[test]
    fn upload_that_lost_its_part_or_row_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let data = rand_bytes::<5000>().to_vec();
        let meta = UploadMeta {
            kind: "raw".into(),
            total: data.len() as u64,
            hash: blake3::hash(&data).to_hex().to_string(),
        };
        let parts = dir.path().join("uploads").join("t");
        {
            let s = Store::open(dir.path()).unwrap();
            s.begin_upload("t", "held-upload-0001", &meta).unwrap();
            let mut f = s.open_part("t", "held-upload-0001", 0).unwrap();
            f.write(&data[..3000]).unwrap();
            f.finish().unwrap();
            s.begin_upload("t", "lost-part-000001", &meta).unwrap();
        }
        // Parts without a row, and strays, go when the store opens.
        fs::write(parts.join("lost-row-0000001.part"), b"partial").unwrap();
        fs::write(parts.join("stray"), b"?").unwrap();
        let s = Store::open(dir.path()).unwrap();
        let mut left: Vec<_> = fs::read_dir(&parts)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["held-upload-0001.part"]);
        assert_eq!(
            s.begin_upload("t", "held-upload-0001", &meta).unwrap(),
            3000
        );
        // A row whose part file is gone resumes from 0; open_part creates it.
        assert_eq!(s.begin_upload("t", "lost-part-000001", &meta).unwrap(), 0);
        let mut f = s.open_part("t", "lost-part-000001", 0).unwrap();
        f.write(&data).unwrap();
        f.finish().unwrap();
        let obj = s
            .finish_upload("t", "lost-part-000001", &meta, None)
            .unwrap();
        assert_eq!(s.read_blob(&obj.id).unwrap(), data);
    }
}
