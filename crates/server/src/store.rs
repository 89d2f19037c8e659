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
//!
//! The folder is the server's alone: it is locked while a store is open
//! (a second server on it is refused), created mode 0700 and its files
//! 0600 whatever the umask. A tenant's quota of objects and stored bytes
//! is checked in the transaction that reserves or records them, so
//! concurrent uploads and job outputs cannot overrun it. A blob read for a
//! job or a download is checked against its hash as it is read; one that
//! does not match is marked damaged and refused (uploading the same bytes
//! again repairs it). The metadata schema carries its version
//! (`PRAGMA user_version`) and older stores are migrated when opened.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use hecloud_protocol::JobState;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::arrivals::Arrivals;
use crate::config::Quota;
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
    /// Its blob was found not to hash to its id (see
    /// [`Store::read_blob_verified`]); uploading the bytes again repairs it.
    pub damaged: bool,
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
    /// A cancel was asked for while it ran (it ends CANCELLED).
    pub cancel_requested: bool,
    /// Its estimated single-core cost, checked against the tenant's limits.
    pub est_seconds: f64,
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
    /// Holds the folder's exclusive lock while the store is open.
    _lock: File,
}

/// How storing a job's outputs ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// Stored; the job succeeded.
    Stored,
    /// The job had ended or was asked to cancel meanwhile: its outputs are
    /// dropped and its state is left as it is.
    NotRunning,
    /// Storing them would overrun the tenant's quota; the job failed with
    /// this reason.
    OverQuota(String),
}

/// Current time in Unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Records an object of a tenant (idempotent); its blob is installed.
/// The same bytes already recorded under another kind are refused: the
/// kind says how jobs read them.
fn record_object(
    db: &Connection,
    tenant: &str,
    id: &str,
    kind: &str,
    size: u64,
    created: i64,
) -> Result<()> {
    let stored: Option<String> = db
        .query_row(
            "SELECT kind FROM objects WHERE tenant=?1 AND id=?2",
            params![tenant, id],
            |r| r.get(0),
        )
        .optional()?;
    match stored {
        Some(k) if k == kind => Ok(()),
        Some(k) => Err(kind_conflict(id, &k, kind)),
        None => {
            db.execute(
                "INSERT INTO objects(tenant,id,kind,size,created) VALUES(?1,?2,?3,?4,?5)",
                params![tenant, id, kind, size as i64, created],
            )?;
            Ok(())
        }
    }
}

/// The refusal of bytes already stored under another kind.
pub fn kind_conflict(id: &str, stored: &str, asked: &str) -> ServerError {
    ServerError::AlreadyExists(format!(
        "object {id} is already stored as a {stored}, not a {asked}: delete it first to store it as another kind"
    ))
}

/// The refusal of an object found damaged, and why.
pub fn damaged_error(id: &str, why: &str) -> ServerError {
    ServerError::Damaged(format!(
        "object {id} is damaged ({why}); upload its bytes again to repair it"
    ))
}

/// A tenant's objects and bytes, stored and reserved by pending uploads.
fn usage(db: &Connection, tenant: &str) -> Result<(u64, u64)> {
    Ok(db.query_row(
        "SELECT (SELECT COUNT(*) FROM objects WHERE tenant=?1) + (SELECT COUNT(*) FROM uploads WHERE tenant=?1),
                (SELECT IFNULL(SUM(size),0) FROM objects WHERE tenant=?1) + (SELECT IFNULL(SUM(total),0) FROM uploads WHERE tenant=?1)",
        params![tenant],
        |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
    )?)
}

/// Why adding `objects` objects of `bytes` bytes to a tenant's `usage`
/// would overrun `quota`, if it would.
fn over_quota(quota: &Quota, (have, held): (u64, u64), objects: u64, bytes: u64) -> Option<String> {
    if have + objects > quota.max_objects {
        return Some(format!(
            "object limit of {} reached ({have} stored or uploading)",
            quota.max_objects
        ));
    }
    if held + bytes > quota.max_stored_bytes {
        return Some(format!(
            "stored-bytes limit of {} reached ({held} bytes stored or uploading, {bytes} more asked)",
            quota.max_stored_bytes
        ));
    }
    None
}

/// Creates `dir` (and missing parents) readable by the server's user only.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

#[cfg(unix)]
fn make_private(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match fs::metadata(path) {
        Ok(m) if m.permissions().mode() & 0o777 != mode => {
            fs::set_permissions(path, fs::Permissions::from_mode(mode))
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(not(unix))]
fn make_private(_: &Path, _: u32) -> std::io::Result<()> {
    Ok(())
}

/// Takes the exclusive lock of the store folder `root`.
fn lock_folder(root: &Path) -> Result<File> {
    let mut o = File::options();
    o.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let f = o.open(root.join("lock"))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(fs::TryLockError::WouldBlock) => Err(ServerError::Precondition(format!(
            "the data dir {} is in use by another hecloud server (it holds {}); stop it or choose another --data-dir",
            root.display(),
            root.join("lock").display()
        ))),
        Err(fs::TryLockError::Error(e)) => Err(e.into()),
    }
}

/// Bytes read (and hashed) in one step by [`Store::read_blob_verified`].
const READ_STEP: u64 = 1 << 20;

fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The schema as first released (version 0); [`MIGRATIONS`] bring it up
/// to [`SCHEMA_VERSION`].
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

/// The metadata schema's version, kept in `PRAGMA user_version`.
pub const SCHEMA_VERSION: i64 = 1;

/// `MIGRATIONS[v]` brings a schema of version `v` to `v + 1`.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    // 1: damaged objects, durable cancels, job cost estimates.
    "ALTER TABLE objects ADD COLUMN damaged INTEGER NOT NULL DEFAULT 0;
     ALTER TABLE jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
     ALTER TABLE jobs ADD COLUMN est_seconds REAL NOT NULL DEFAULT 0;",
];

/// Brings the schema of `db` to [`SCHEMA_VERSION`], one migration per
/// transaction; a newer schema is refused.
fn migrate(db: &mut Connection) -> Result<()> {
    db.execute_batch(SCHEMA)?;
    loop {
        let v: i64 = db.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if v == SCHEMA_VERSION {
            return Ok(());
        }
        if !(0..SCHEMA_VERSION).contains(&v) {
            return Err(ServerError::Precondition(format!(
                "the store's schema is version {v}; this build reads versions up to {SCHEMA_VERSION}"
            )));
        }
        let tx = db.transaction()?;
        tx.execute_batch(MIGRATIONS[v as usize])?;
        tx.pragma_update(None, "user_version", v + 1)?;
        tx.commit()?;
        tracing::info!(from = v, to = v + 1, "store schema migrated");
    }
}

/// A job state as the `jobs.state` column holds it: the protocol's
/// numbering (the statements that select or set states by number, such as
/// `state IN (1,2)` for the unfinished ones, use it too).
fn state_column(state: JobState) -> i64 {
    state as i64
}

/// The job state of a `jobs.state` value (one this build does not know
/// reads as failed: the job cannot be resumed).
fn state_of_column(v: i64) -> JobState {
    match v {
        1 => JobState::Queued,
        2 => JobState::Running,
        3 => JobState::Succeeded,
        5 => JobState::Cancelled,
        _ => JobState::Failed,
    }
}

/// Columns of a job row, in the order [`job_row`] reads them.
const JOB_COLUMNS: &str = "kind,spec,state,progress,message,error,created,finished,compute_us,attempts,cancel_requested,est_seconds";

/// The job in `r`, whose [`JOB_COLUMNS`] start at column `at`.
fn job_row(
    tenant: &str,
    id: &str,
    r: &rusqlite::Row<'_>,
    at: usize,
) -> rusqlite::Result<JobRecord> {
    Ok(JobRecord {
        tenant: tenant.to_string(),
        id: id.to_string(),
        kind: r.get(at)?,
        spec: r.get(at + 1)?,
        state: state_of_column(r.get(at + 2)?),
        progress: r.get::<_, f64>(at + 3)? as f32,
        message: r.get(at + 4)?,
        error: r.get(at + 5)?,
        created_ms: r.get(at + 6)?,
        finished_ms: r.get(at + 7)?,
        compute_us: r.get::<_, i64>(at + 8)? as u64,
        attempts: r.get::<_, i64>(at + 9)? as u32,
        cancel_requested: r.get::<_, i64>(at + 10)? != 0,
        est_seconds: r.get(at + 11)?,
        outputs: vec![],
    })
}

/// Columns of an object row, in the order [`object_row`] reads them.
const OBJECT_COLUMNS: &str = "id,kind,size,created,damaged";

fn object_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ObjectMeta> {
    Ok(ObjectMeta {
        id: r.get(0)?,
        kind: r.get(1)?,
        size: r.get::<_, i64>(2)? as u64,
        created_ms: r.get(3)?,
        damaged: r.get::<_, i64>(4)? != 0,
    })
}

impl Store {
    /// Opens (creating if needed) the store under `root`.
    /// Refused while another store (another server) has the folder open.
    pub fn open(root: &Path) -> Result<Self> {
        create_private_dir(root)?;
        make_private(root, 0o700)?;
        let lock = lock_folder(root)?;
        for d in ["blobs", "uploads", "tmp"] {
            create_private_dir(&root.join(d))?;
        }
        // SQLite gives its journal files the database file's mode.
        let meta = root.join("meta.sqlite");
        let mut o = File::options();
        o.write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        o.open(&meta)?;
        for f in ["meta.sqlite", "meta.sqlite-wal", "meta.sqlite-shm"] {
            make_private(&root.join(f), 0o600)?;
        }
        let mut db = Connection::open(&meta)?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "FULL")?;
        db.busy_timeout(std::time::Duration::from_secs(10))?;
        migrate(&mut db)?;
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
            _lock: lock,
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
        self.unsynced(|db| Ok(db.execute(sql, params)?))
    }

    /// Runs `f` on the metadata connection with its commits not waiting
    /// for the disk (see [`Self::execute_unsynced`]).
    fn unsynced<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let mut db = self.db();
        db.pragma_update(None, "synchronous", "NORMAL")?;
        let r = f(&mut db);
        db.pragma_update(None, "synchronous", "FULL")?;
        r
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
    /// directory fsync). An existing blob with the same hash is kept, unless
    /// it was found damaged: then it is replaced and its objects repaired.
    ///
    /// `_locked` is the blob lock, held: the caller records the object
    /// before letting it go, so `delete_object` (which removes a blob no
    /// object refers to, under the same lock) cannot remove the blob
    /// between this check and that record.
    fn install_blob(&self, _locked: &MutexGuard<'_, ()>, file: &Path, id: &str) -> Result<()> {
        let dest = self.blob_path(id);
        let dir = dest.parent().expect("blob path has a parent");
        create_private_dir(dir)?;
        // A fresh blob (the usual case) needs no metadata work here; only
        // one already installed is looked up, and replaced if damaged.
        let replacing = dest.exists();
        if replacing {
            let damaged: bool = self.db().query_row(
                "SELECT EXISTS(SELECT 1 FROM objects WHERE id=?1 AND damaged=1)",
                params![id],
                |r| r.get(0),
            )?;
            if !damaged {
                fs::remove_file(file)?;
                return Ok(());
            }
        }
        fs::rename(file, &dest)?;
        fsync_dir(dir)?;
        if replacing {
            self.db()
                .execute("UPDATE objects SET damaged=0 WHERE id=?1", params![id])?;
            tracing::info!(object = %id, "damaged object repaired by new bytes");
        }
        Ok(())
    }

    /// Removes the blobs of `ids` that no object refers to (written for
    /// rows that were then not recorded). `_locked` is the blob lock.
    fn drop_unreferenced(&self, _locked: &MutexGuard<'_, ()>, db: &Connection, ids: &[&str]) {
        for id in ids {
            let used: rusqlite::Result<bool> = db.query_row(
                "SELECT EXISTS(SELECT 1 FROM objects WHERE id=?1)",
                params![id],
                |r| r.get(0),
            );
            if let Ok(false) = used {
                let _ = fs::remove_file(self.blob_path(id));
            }
        }
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
    /// No quota is checked: for the server's own objects and tests.
    pub fn put_object(&self, tenant: &str, kind: &str, bytes: &[u8]) -> Result<ObjectMeta> {
        let (id, tmp) = self.stage_blob(bytes)?;
        {
            let blobs = self.lock_blobs();
            self.install_blob(&blobs, &tmp, &id)?;
            let db = self.db();
            if let Err(e) = record_object(&db, tenant, &id, kind, bytes.len() as u64, now_ms()) {
                self.drop_unreferenced(&blobs, &db, &[id.as_str()]);
                return Err(e);
            }
        }
        self.recorded_object(tenant, &id)
    }

    /// Reads a whole blob, unchecked (see [`Self::read_blob_verified`]).
    pub fn read_blob(&self, id: &str) -> Result<Vec<u8>> {
        Ok(fs::read(self.blob_path(id))?)
    }

    /// Reads a whole blob and checks, in the same pass, that its bytes hash
    /// to `id`. A blob that does not (flipped on disk, truncated, missing)
    /// is marked damaged and refused with [`ServerError::Damaged`]: a job
    /// on it would compute garbage and store it under a fresh, valid hash.
    pub fn read_blob_verified(&self, id: &str) -> Result<Vec<u8>> {
        let read = || -> std::io::Result<(Vec<u8>, blake3::Hash)> {
            let mut f = File::open(self.blob_path(id))?;
            let len = f.metadata()?.len() as usize;
            let mut bytes = Vec::with_capacity(len);
            let mut hasher = blake3::Hasher::new();
            // Each step is hashed while it is still in the cache.
            loop {
                let start = bytes.len();
                if (&mut f).take(READ_STEP).read_to_end(&mut bytes)? == 0 {
                    break;
                }
                hasher.update(&bytes[start..]);
            }
            Ok((bytes, hasher.finalize()))
        };
        match read() {
            Ok((bytes, h)) if h.to_hex().as_str() == id => Ok(bytes),
            Ok(_) => Err(self.damaged(id, "its stored bytes no longer hash to its id")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(self.damaged(id, "its stored bytes are missing"))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Marks the objects of blob `id` damaged (every tenant's: they share
    /// it) and returns the error that says so.
    pub fn damaged(&self, id: &str, why: &str) -> ServerError {
        tracing::error!(object = %id, reason = why, "damaged blob");
        if let Err(e) = self
            .db()
            .execute("UPDATE objects SET damaged=1 WHERE id=?1", params![id])
        {
            tracing::error!(object = %id, error = %e, "could not mark the object damaged");
        }
        damaged_error(id, why)
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
                &format!("SELECT {OBJECT_COLUMNS} FROM objects WHERE tenant=?1 AND id=?2"),
                params![tenant, id],
                object_row,
            )
            .optional()?)
    }

    /// All objects of a tenant.
    pub fn list_objects(&self, tenant: &str) -> Result<Vec<ObjectMeta>> {
        let db = self.db();
        let mut st = db.prepare(&format!(
            "SELECT {OBJECT_COLUMNS} FROM objects WHERE tenant=?1 ORDER BY created, id"
        ))?;
        let rows = st.query_map(params![tenant], object_row)?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// A tenant's objects and bytes, stored and reserved by its pending
    /// uploads (what its quota bounds).
    pub fn usage(&self, tenant: &str) -> Result<(u64, u64)> {
        usage(&self.db(), tenant)
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
    /// A pending upload with a different header is refused. A new one
    /// reserves one object and its length against `quota`, in the
    /// transaction that records it.
    pub fn begin_upload(
        &self,
        tenant: &str,
        upload_id: &str,
        meta: &UploadMeta,
        quota: &Quota,
    ) -> Result<u64> {
        if let Some((old, have)) = self.upload(tenant, upload_id)? {
            if old != *meta {
                return Err(ServerError::InvalidArgument(format!(
                    "upload {upload_id} was started with a different kind, length or hash"
                )));
            }
            return Ok(have.min(meta.total));
        }
        create_private_dir(&self.root.join("uploads").join(tenant))?;
        // Nothing of a pending upload has to survive a crash: a lost row or
        // part file only makes the client start over from byte 0. So the
        // row is committed without waiting for the disk (the next fsynced
        // commit, at the latest the one that acknowledges an object, takes
        // it along), and `open_part` creates the part file unsynced.
        self.unsynced(|db| {
            let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some(why) = over_quota(quota, usage(&tx, tenant)?, 1, meta.total) {
                return Err(ServerError::Quota(why));
            }
            // A racing begin of the same upload id made the row first.
            tx.execute(
                "INSERT OR IGNORE INTO uploads(tenant,upload_id,kind,total,hash,created) VALUES(?1,?2,?3,?4,?5,?6)",
                params![tenant, upload_id, meta.kind, meta.total as i64, meta.hash, now_ms()],
            )?;
            tx.commit()?;
            Ok(())
        })?;
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

    /// A hasher fed with the first `len` bytes of a pending upload.
    pub fn part_hasher(&self, tenant: &str, upload_id: &str, len: u64) -> Result<blake3::Hasher> {
        let mut hasher = blake3::Hasher::new();
        self.replay_part(tenant, upload_id, len, |b| {
            hasher.update(b);
        })?;
        Ok(hasher)
    }

    /// Hands the first `len` bytes of a pending upload to `each`, in steps:
    /// a resumed upload goes on hashing and checking its bytes where the
    /// interrupted attempt stopped, and neither survived it.
    pub fn replay_part(
        &self,
        tenant: &str,
        upload_id: &str,
        len: u64,
        mut each: impl FnMut(&[u8]),
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let mut file = File::open(self.part_path(tenant, upload_id))?.take(len);
        let mut buf = vec![0u8; READ_STEP.min(len) as usize];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            each(&buf[..n]);
        }
    }

    /// The ids of a tenant's objects of one kind.
    pub fn object_ids_of_kind(&self, tenant: &str, kind: &str) -> Result<Vec<String>> {
        let db = self.db();
        let mut st = db.prepare("SELECT id FROM objects WHERE tenant=?1 AND kind=?2")?;
        let rows = st.query_map(params![tenant, kind], |r| r.get(0))?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
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
            let recorded = record_object(&tx, tenant, &got, &meta.kind, meta.total, now_ms());
            tx.execute(
                "DELETE FROM uploads WHERE tenant=?1 AND upload_id=?2",
                params![tenant, upload_id],
            )?;
            tx.commit()?;
            if let Err(e) = recorded {
                self.drop_unreferenced(&blobs, &db, &[got.as_str()]);
                return Err(e);
            }
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

    /// The part file of a pending upload, read whole (for small objects
    /// checked before they are stored).
    pub fn read_part(&self, tenant: &str, upload_id: &str) -> Result<Vec<u8>> {
        Ok(fs::read(self.part_path(tenant, upload_id))?)
    }

    /// The job a tenant submitted with `client_ref`, if any. The ref names
    /// one submission: reused with another kind or spec, it is refused with
    /// [`ServerError::AlreadyExists`] naming the job it names.
    pub fn job_by_ref(
        &self,
        tenant: &str,
        kind: &str,
        spec: &[u8],
        client_ref: &str,
    ) -> Result<Option<JobRecord>> {
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
        let Some(rec) = id.map(|id| self.job(tenant, &id)).transpose()?.flatten() else {
            return Ok(None);
        };
        if rec.kind != kind || rec.spec != spec {
            return Err(ServerError::AlreadyExists(format!(
                "client_ref {client_ref:?} already names job {}, submitted with another kind or spec",
                rec.id
            )));
        }
        Ok(Some(rec))
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

    /// Inserts a queued job of estimated cost `est_seconds`; with a
    /// non-empty `client_ref` an existing job with the same ref is returned
    /// instead (see [`Self::job_by_ref`]).
    pub fn insert_job(
        &self,
        tenant: &str,
        kind: &str,
        spec: &[u8],
        client_ref: &str,
        est_seconds: f64,
    ) -> Result<(JobRecord, bool)> {
        if let Some(rec) = self.job_by_ref(tenant, kind, spec, client_ref)? {
            return Ok((rec, false));
        }
        let id = hex::encode(rand_bytes::<16>());
        // Durable once the caller has run `sync_metadata`.
        self.execute_unsynced(
            "INSERT INTO jobs(tenant,id,kind,spec,state,progress,message,error,created,finished,compute_us,attempts,client_ref,est_seconds)
             VALUES(?1,?2,?3,?4,1,0,'queued','',?5,0,0,0,?6,?7)",
            params![tenant, id, kind, spec, now_ms(), client_ref, est_seconds],
        )?;
        Ok((self.job(tenant, &id)?.expect("job just inserted"), true))
    }

    /// A job of a tenant, with its outputs.
    pub fn job(&self, tenant: &str, id: &str) -> Result<Option<JobRecord>> {
        let db = self.db();
        let rec = db
            .query_row(
                &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE tenant=?1 AND id=?2"),
                params![tenant, id],
                |r| job_row(tenant, id, r, 0),
            )
            .optional()?;
        let Some(mut rec) = rec else { return Ok(None) };
        let mut st = db.prepare(
            "SELECT o.name, b.id, b.kind, b.size, b.created, b.damaged FROM job_outputs o
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
                        damaged: r.get::<_, i64>(5)? != 0,
                    },
                })
            })?
            .collect::<std::result::Result<_, _>>()?;
        Ok(Some(rec))
    }

    /// Jobs of a tenant not yet final, and their estimated seconds.
    pub fn active_jobs(&self, tenant: &str) -> Result<(u64, f64)> {
        Ok(self.db().query_row(
            "SELECT COUNT(*), IFNULL(SUM(est_seconds),0) FROM jobs WHERE tenant=?1 AND state IN (1,2)",
            params![tenant],
            |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?)),
        )?)
    }

    /// Every job not yet final (for recovery after a restart), oldest first.
    pub fn unfinished_jobs(&self) -> Result<Vec<JobRecord>> {
        let db = self.db();
        let mut st = db.prepare(&format!(
            "SELECT tenant,id,{JOB_COLUMNS} FROM jobs WHERE state IN (1,2) ORDER BY created"
        ))?;
        let rows = st.query_map([], |r| {
            let (tenant, id): (String, String) = (r.get(0)?, r.get(1)?);
            job_row(&tenant, &id, r, 2)
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// Marks a job running (one more attempt) unless it is already final
    /// or asked to cancel; returns whether it should run. The attempt count
    /// bounds restarts that the job itself causes (a crash of the process,
    /// which an unsynced commit survives), so the commit does not wait for
    /// the disk.
    pub fn start_job(&self, tenant: &str, id: &str) -> Result<bool> {
        let n = self.execute_unsynced(
            "UPDATE jobs SET state=2, attempts=attempts+1, message='running'
             WHERE tenant=?1 AND id=?2 AND state IN (1,2) AND cancel_requested=0",
            params![tenant, id],
        )?;
        Ok(n == 1)
    }

    /// Records a client's cancel, durably, before it is answered: a queued
    /// job ends CANCELLED at once; a running one is marked, so that it ends
    /// CANCELLED even if the server restarts before its worker stops.
    pub fn request_cancel(&self, tenant: &str, id: &str) -> Result<()> {
        let mut db = self.db();
        let tx = db.transaction()?;
        tx.execute(
            "UPDATE jobs SET state=5, error='cancelled by the client', message='cancelled', finished=?3
             WHERE tenant=?1 AND id=?2 AND state=1",
            params![tenant, id, now_ms()],
        )?;
        tx.execute(
            "UPDATE jobs SET cancel_requested=1, message='cancelling'
             WHERE tenant=?1 AND id=?2 AND state=2",
            params![tenant, id],
        )?;
        tx.commit()?;
        Ok(())
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
            params![tenant, id, state_column(state), error, format!("{state:?}").to_lowercase(), now_ms()],
        )?;
        Ok(())
    }

    /// Stores a job's outputs (blobs first, then one transaction for the
    /// object rows, the output list and the final state), if the job still
    /// runs with no cancel asked for and its new objects fit the tenant's
    /// `quota`: a late result never overwrites a cancelled or failed job,
    /// and outputs count against the quota like uploads. Outputs not
    /// stored leave no blob behind.
    pub fn complete_job(
        &self,
        tenant: &str,
        id: &str,
        outputs: &[ReadyOutput],
        compute_us: u64,
        quota: &Quota,
    ) -> Result<Completion> {
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
        let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let completion = (|| {
            let running: Option<bool> = tx
                .query_row(
                    "SELECT state=2 AND cancel_requested=0 FROM jobs WHERE tenant=?1 AND id=?2",
                    params![tenant, id],
                    |r| r.get(0),
                )
                .optional()?;
            if running != Some(true) {
                return Ok(Completion::NotRunning);
            }
            let mut new: Vec<&ReadyOutput> = Vec::new();
            for o in outputs {
                let held: bool = tx.query_row(
                    "SELECT EXISTS(SELECT 1 FROM objects WHERE tenant=?1 AND id=?2)",
                    params![tenant, o.id],
                    |r| r.get(0),
                )?;
                if !held && !new.iter().any(|n| n.id == o.id) {
                    new.push(o);
                }
            }
            let bytes = new.iter().map(|o| o.bytes.len() as u64).sum();
            if let Some(why) = over_quota(quota, usage(&tx, tenant)?, new.len() as u64, bytes) {
                return Ok(Completion::OverQuota(format!(
                    "its outputs were not stored: {why}"
                )));
            }
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
            Ok(Completion::Stored)
        })();
        match completion {
            Ok(Completion::Stored) => tx.commit()?,
            Ok(Completion::OverQuota(ref why)) => {
                tx.execute(
                    "UPDATE jobs SET state=4, error=?3, message='failed', finished=?4 WHERE tenant=?1 AND id=?2",
                    params![tenant, id, why, now_ms()],
                )?;
                tx.commit()?;
            }
            _ => drop(tx),
        }
        if completion
            .as_ref()
            .map_or(true, |c| *c != Completion::Stored)
        {
            let ids: Vec<&str> = outputs.iter().map(|o| o.id.as_str()).collect();
            self.drop_unreferenced(&blobs, &db, &ids);
        }
        completion
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

    fn quota(max_objects: u64, max_stored_bytes: u64) -> Quota {
        Quota {
            max_objects,
            max_stored_bytes,
            ..Quota::default()
        }
    }

    fn raw_upload(bytes: &[u8]) -> UploadMeta {
        UploadMeta {
            kind: "raw".into(),
            total: bytes.len() as u64,
            hash: blake3::hash(bytes).to_hex().to_string(),
        }
    }

    /// Uploads `bytes` whole as `upload_id`.
    fn upload(s: &Store, t: &str, upload_id: &str, bytes: &[u8], q: &Quota) -> Result<ObjectMeta> {
        let meta = raw_upload(bytes);
        s.begin_upload(t, upload_id, &meta, q)?;
        let mut f = s.open_part(t, upload_id, 0)?;
        f.write(bytes)?;
        f.finish()?;
        s.finish_upload(t, upload_id, &meta, None)
    }

    #[test]
    fn concurrent_uploads_never_overrun_the_object_or_byte_quota() {
        let dir = tempfile::tempdir().unwrap();
        let s = Arc::new(Store::open(dir.path()).unwrap());
        // Counted: 6 objects, then 6 000 bytes (20 uploads of 1 000 each).
        for (q, stored) in [(quota(6, 1 << 30), 6), (quota(1000, 6_000), 6)] {
            let tenant = format!("t{}", q.max_objects);
            let start = Arc::new(std::sync::Barrier::new(20));
            let threads: Vec<_> = (0..20)
                .map(|i| {
                    let (s, start, tenant) = (s.clone(), start.clone(), tenant.clone());
                    std::thread::spawn(move || {
                        let bytes = rand_bytes::<1000>();
                        start.wait();
                        upload(&s, &tenant, &format!("racing-upload-{i:04}"), &bytes, &q)
                    })
                })
                .collect();
            let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            let ok = results.iter().filter(|r| r.is_ok()).count();
            assert_eq!(ok, stored, "{tenant}");
            for r in results.into_iter().filter_map(|r| r.err()) {
                assert!(matches!(r, ServerError::Quota(_)), "{r:?}");
            }
            assert_eq!(
                s.usage(&tenant).unwrap(),
                (stored as u64, stored as u64 * 1000)
            );
            assert_eq!(s.list_objects(&tenant).unwrap().len(), stored);
        }
    }

    #[test]
    fn job_outputs_count_against_the_quota() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let q = quota(3, 1 << 30);
        upload(&s, "t", "first-upload-0001", b"input", &q).unwrap();
        let outputs = |n: usize| -> Vec<ReadyOutput> {
            (0..n)
                .map(|i| {
                    ReadyOutput::new(format!("o{i}"), "raw".into(), rand_bytes::<64>().to_vec())
                })
                .collect()
        };
        let job = |s: &Store| {
            let (rec, _) = s
                .insert_job("t", "graph.v1", &rand_bytes::<8>(), "", 1.0)
                .unwrap();
            assert!(s.start_job("t", &rec.id).unwrap());
            rec.id
        };
        // Three outputs with one object stored: over the limit of 3.
        let id = job(&s);
        let over = outputs(3);
        let c = s.complete_job("t", &id, &over, 5, &q).unwrap();
        assert!(
            matches!(&c, Completion::OverQuota(m) if m.contains("object limit of 3")),
            "{c:?}"
        );
        let rec = s.job("t", &id).unwrap().unwrap();
        assert_eq!(rec.state, JobState::Failed);
        assert!(rec.error.contains("object limit"), "{}", rec.error);
        assert_eq!(s.usage("t").unwrap().0, 1);
        // No blob left behind for them.
        for o in &over {
            assert!(!s.blob_path(&o.id).exists());
        }
        // Two fit.
        let id = job(&s);
        assert_eq!(
            s.complete_job("t", &id, &outputs(2), 5, &q).unwrap(),
            Completion::Stored
        );
        assert_eq!(s.usage("t").unwrap().0, 3);
        // Bytes too.
        let id = job(&s);
        let c = s
            .complete_job("t", &id, &outputs(1), 5, &quota(10, 100))
            .unwrap();
        assert!(
            matches!(&c, Completion::OverQuota(m) if m.contains("stored-bytes")),
            "{c:?}"
        );
    }

    #[test]
    fn a_late_result_never_overwrites_a_cancel() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let q = Quota::default();
        let (rec, _) = s.insert_job("t", "graph.v1", b"spec", "", 1.0).unwrap();
        assert!(s.start_job("t", &rec.id).unwrap());
        s.request_cancel("t", &rec.id).unwrap();
        let out = [ReadyOutput::new("o".into(), "raw".into(), b"late".to_vec())];
        assert_eq!(
            s.complete_job("t", &rec.id, &out, 5, &q).unwrap(),
            Completion::NotRunning
        );
        let after = s.job("t", &rec.id).unwrap().unwrap();
        assert_eq!(after.state, JobState::Running, "the worker ends it");
        assert!(after.cancel_requested && after.outputs.is_empty());
        assert!(s.object("t", &out[0].id).unwrap().is_none());
        assert!(!s.blob_path(&out[0].id).exists());
        // A cancel is durable: it is there after a reopen, and the job
        // cannot start again.
        drop(s);
        let s = Store::open(dir.path()).unwrap();
        let pending = s.unfinished_jobs().unwrap();
        assert_eq!(pending.len(), 1);
        assert!(pending[0].cancel_requested);
        assert!(!s.start_job("t", &rec.id).unwrap());
        // A queued job is cancelled at once.
        let (queued, _) = s.insert_job("t", "graph.v1", b"other", "", 1.0).unwrap();
        s.request_cancel("t", &queued.id).unwrap();
        assert_eq!(
            s.job("t", &queued.id).unwrap().unwrap().state,
            JobState::Cancelled
        );
    }

    #[test]
    fn a_client_ref_names_one_submission() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let (a, new) = s
            .insert_job("t", "graph.v1", b"spec", "ref-1", 1.0)
            .unwrap();
        assert!(new);
        let (again, new) = s
            .insert_job("t", "graph.v1", b"spec", "ref-1", 1.0)
            .unwrap();
        assert!(!new);
        assert_eq!(again.id, a.id);
        let e = s
            .insert_job("t", "graph.v1", b"other spec", "ref-1", 1.0)
            .unwrap_err();
        assert!(
            matches!(&e, ServerError::AlreadyExists(m) if m.contains(&a.id)),
            "{e:?}"
        );
        let e = s
            .insert_job("t", "echo.v1", b"spec", "ref-1", 1.0)
            .unwrap_err();
        assert!(matches!(e, ServerError::AlreadyExists(_)));
        // Another tenant's ref is its own.
        assert!(
            s.insert_job("u", "graph.v1", b"other spec", "ref-1", 1.0)
                .unwrap()
                .1
        );
    }

    #[test]
    fn the_same_bytes_under_another_kind_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let bytes = rand_bytes::<100>();
        let o = upload(&s, "t", "as-raw-upload-001", &bytes, &Quota::default()).unwrap();
        let mut meta = raw_upload(&bytes);
        meta.kind = "ckks.ciphertext".into();
        s.begin_upload("t", "as-ct-upload-0001", &meta, &Quota::default())
            .unwrap();
        let mut f = s.open_part("t", "as-ct-upload-0001", 0).unwrap();
        f.write(&bytes).unwrap();
        f.finish().unwrap();
        let e = s
            .finish_upload("t", "as-ct-upload-0001", &meta, None)
            .unwrap_err();
        assert!(
            matches!(&e, ServerError::AlreadyExists(m) if m.contains("raw")),
            "{e:?}"
        );
        assert_eq!(s.object("t", &o.id).unwrap().unwrap().kind, "raw");
        assert!(s.upload("t", "as-ct-upload-0001").unwrap().is_none());
        assert_eq!(s.read_blob(&o.id).unwrap(), bytes);
        assert!(matches!(
            s.put_object("t", "echo", &bytes),
            Err(ServerError::AlreadyExists(_))
        ));
        // A job output too: nothing of the job's is stored.
        let (rec, _) = s.insert_job("t", "graph.v1", b"spec", "", 1.0).unwrap();
        assert!(s.start_job("t", &rec.id).unwrap());
        let fresh = ReadyOutput::new("a".into(), "raw".into(), b"fresh".to_vec());
        let same = ReadyOutput::new("b".into(), "echo".into(), bytes.to_vec());
        let e = s
            .complete_job("t", &rec.id, &[fresh.clone(), same], 5, &Quota::default())
            .unwrap_err();
        assert!(matches!(e, ServerError::AlreadyExists(_)), "{e:?}");
        assert!(s.object("t", &fresh.id).unwrap().is_none());
        assert!(!s.blob_path(&fresh.id).exists());
        assert_eq!(s.read_blob(&o.id).unwrap(), bytes, "the shared blob stays");
        assert_eq!(
            s.job("t", &rec.id).unwrap().unwrap().state,
            JobState::Running
        );
    }

    #[test]
    fn a_damaged_blob_is_found_marked_and_repaired_by_a_new_upload() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let o = upload(&s, "t", "to-be-damaged-001", &bytes, &Quota::default()).unwrap();
        s.put_object("u", "raw", &bytes).unwrap();
        assert_eq!(s.read_blob_verified(&o.id).unwrap(), bytes);
        // One byte flipped on disk, in the last read step.
        let path = s.blob_path(&o.id);
        let mut on_disk = fs::read(&path).unwrap();
        on_disk[2_500_000] ^= 1;
        fs::write(&path, &on_disk).unwrap();
        let e = s.read_blob_verified(&o.id).unwrap_err();
        assert!(
            matches!(&e, ServerError::Damaged(m) if m.contains(&o.id)),
            "{e:?}"
        );
        // Both tenants' objects share the blob: both are damaged.
        assert!(s.object("t", &o.id).unwrap().unwrap().damaged);
        assert!(s.object("u", &o.id).unwrap().unwrap().damaged);
        // The bytes uploaded again replace the blob.
        upload(&s, "t", "repairing-upload1", &bytes, &Quota::default()).unwrap();
        assert!(!s.object("u", &o.id).unwrap().unwrap().damaged);
        assert_eq!(s.read_blob_verified(&o.id).unwrap(), bytes);
        // A missing blob is damaged too.
        fs::remove_file(&path).unwrap();
        assert!(matches!(
            s.read_blob_verified(&o.id),
            Err(ServerError::Damaged(_))
        ));
    }

    #[test]
    fn a_second_store_on_the_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let e = Store::open(dir.path()).unwrap_err();
        assert!(
            matches!(&e, ServerError::Precondition(m) if m.contains("in use")),
            "{e:?}"
        );
        drop(s);
        Store::open(dir.path()).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn the_folder_and_its_files_are_private_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("data");
        // An older store, or an operator's mkdir, left it readable.
        fs::create_dir(&root).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        let s = Store::open(&root).unwrap();
        upload(
            &s,
            "t",
            "private-upload-01",
            b"secret-ish",
            &Quota::default(),
        )
        .unwrap();
        let meta = raw_upload(b"partial");
        s.begin_upload("t", "pending-upload-1", &meta, &Quota::default())
            .unwrap();
        let mut f = s.open_part("t", "pending-upload-1", 0).unwrap();
        f.write(b"par").unwrap();
        f.finish().unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&root), 0o700);
        let mut stack = vec![root.clone()];
        let mut files = 0;
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    assert_eq!(mode(&p), 0o700, "{}", p.display());
                    stack.push(p);
                } else {
                    assert_eq!(mode(&p) & 0o077, 0, "{}", p.display());
                    files += 1;
                }
            }
        }
        // meta.sqlite and its journal, the lock, one blob, one part.
        assert!(files >= 5, "{files}");
    }

    /// A store written before the schema carried a version (today's
    /// released schema, version 0) opens, migrated, with its rows.
    /// The column keeps the protocol's numbering, which the statements
    /// that select states by number rely on.
    #[test]
    fn job_states_round_trip_through_their_column() {
        use JobState::*;
        for (state, n) in [
            (Queued, 1),
            (Running, 2),
            (Succeeded, 3),
            (Failed, 4),
            (Cancelled, 5),
        ] {
            assert_eq!(state_column(state), n);
            assert_eq!(state_of_column(n), state);
        }
        assert_eq!(state_of_column(99), Failed);
    }

    #[test]
    fn a_version_0_store_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Connection::open(dir.path().join("meta.sqlite")).unwrap();
            db.execute_batch(SCHEMA).unwrap();
            db.execute(
                "INSERT INTO objects(tenant,id,kind,size,created) VALUES('t','ab','raw',5,1)",
                [],
            )
            .unwrap();
            db.execute(
                "INSERT INTO jobs(tenant,id,kind,spec,state,progress,message,error,created,finished,compute_us,attempts,client_ref)
                 VALUES('t','j1','graph.v1',x'00',2,0.5,'running','',1,0,0,1,'r')",
                [],
            )
            .unwrap();
        }
        let s = Store::open(dir.path()).unwrap();
        let v: i64 = s
            .db()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        let o = s.object("t", "ab").unwrap().unwrap();
        assert_eq!((o.kind.as_str(), o.size, o.damaged), ("raw", 5, false));
        let j = s.job("t", "j1").unwrap().unwrap();
        assert_eq!(
            (j.state, j.attempts, j.cancel_requested),
            (JobState::Running, 1, false)
        );
        assert_eq!(j.est_seconds, 0.0);
        drop(s);
        // Opening again finds it current; a newer schema is refused.
        let s = Store::open(dir.path()).unwrap();
        s.db()
            .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        drop(s);
        let e = Store::open(dir.path()).unwrap_err();
        assert!(
            matches!(&e, ServerError::Precondition(m) if m.contains("version")),
            "{e:?}"
        );
    }

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
            let (rec, new) = s.insert_job("t", "graph.v1", b"spec", "", 0.0).unwrap();
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
            assert_eq!(
                s.begin_upload("t", "u1", &meta, &Quota::default()).unwrap(),
                0
            );
            let mut f = s.open_part("t", "u1", 0).unwrap();
            f.write(&data[..40_000]).unwrap();
            f.finish().unwrap();
        }
        let s = Store::open(dir.path()).unwrap();
        let have = s.begin_upload("t", "u1", &meta, &Quota::default()).unwrap();
        assert_eq!(have, 40_000);
        let mut f = s.open_part("t", "u1", have).unwrap();
        f.write(&data[have as usize..]).unwrap();
        f.finish().unwrap();
        let obj = s.finish_upload("t", "u1", &meta, None).unwrap();
        assert_eq!(obj.id, meta.hash);
        assert_eq!(s.read_blob(&obj.id).unwrap(), data);
        assert!(s.upload("t", "u1").unwrap().is_none());
        // A different header for a pending upload id is refused.
        s.begin_upload("t", "u2", &meta, &Quota::default()).unwrap();
        let other = UploadMeta { total: 5, ..meta };
        assert!(matches!(
            s.begin_upload("t", "u2", &other, &Quota::default()),
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
            s.begin_upload("t", u, &meta, &Quota::default()).unwrap();
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
            s.begin_upload("t", "held-upload-0001", &meta, &Quota::default())
                .unwrap();
            let mut f = s.open_part("t", "held-upload-0001", 0).unwrap();
            f.write(&data[..3000]).unwrap();
            f.finish().unwrap();
            s.begin_upload("t", "lost-part-000001", &meta, &Quota::default())
                .unwrap();
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
            s.begin_upload("t", "held-upload-0001", &meta, &Quota::default())
                .unwrap(),
            3000
        );
        // A row whose part file is gone resumes from 0; open_part creates it.
        assert_eq!(
            s.begin_upload("t", "lost-part-000001", &meta, &Quota::default())
                .unwrap(),
            0
        );
        let mut f = s.open_part("t", "lost-part-000001", 0).unwrap();
        f.write(&data).unwrap();
        f.finish().unwrap();
        let obj = s
            .finish_upload("t", "lost-part-000001", &meta, None)
            .unwrap();
        assert_eq!(s.read_blob(&obj.id).unwrap(), data);
    }
}
