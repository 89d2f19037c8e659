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
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use hecloud_protocol::{JobId, ObjectId};
use rusqlite::Connection;

use crate::arrivals::Arrivals;
use crate::error::{Result, ServerError};

mod jobs;
mod objects;
mod quota;
mod schema;
#[cfg(test)]
mod tests;
mod uploads;

pub use jobs::{Completion, JobOutputMeta, JobRecord, ReadyOutput};
pub use objects::{ObjectMeta, damaged_error, kind_conflict};
pub use schema::SCHEMA_VERSION;
pub use uploads::UploadMeta;

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

/// Current time in Unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
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

/// Whether a store holds the folder `root`'s lock: a store's count of
/// holders reaches zero before its fields (the metadata connection, then
/// the lock) are dropped, so only the lock says when the folder is free.
pub(crate) fn folder_is_locked(root: &Path) -> bool {
    match File::options()
        .read(true)
        .write(true)
        .open(root.join("lock"))
    {
        Ok(f) => matches!(f.try_lock(), Err(fs::TryLockError::WouldBlock)),
        Err(_) => false,
    }
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

/// The id in column `i` of a row: ids are stored as their hex text, and
/// read back (or written, with `to_hex`) only where a row is.
fn id_at<T>(
    r: &rusqlite::Row<'_>,
    i: usize,
    parse: impl FnOnce(&str) -> Option<T>,
) -> rusqlite::Result<T> {
    let hex: String = r.get(i)?;
    parse(&hex).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            i,
            rusqlite::types::Type::Text,
            format!("not an id: {hex:?}").into(),
        )
    })
}

/// The object id in column `i` of a row.
pub(super) fn object_id_at(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<ObjectId> {
    id_at(r, i, ObjectId::from_hex)
}

/// The job id in column `i` of a row.
pub(super) fn job_id_at(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<JobId> {
    id_at(r, i, JobId::from_hex)
}

fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
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
        schema::migrate(&mut db)?;
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
}
