//! Objects: content-addressed blob files and their metadata rows. A blob
//! is fsynced and installed before its row is committed; one found not to
//! hash to its id is marked damaged until its bytes are uploaded again.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::MutexGuard;

use hecloud_protocol::ObjectId;
use rusqlite::{Connection, OptionalExtension, params};

use super::{Store, create_private_dir, fsync_dir, now_ms, object_id_at, rand_bytes};
use crate::error::{Result, ServerError};
use crate::part::PartWriter;

/// Metadata of one stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// BLAKE3 of the content.
    pub id: ObjectId,
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

/// Records an object of a tenant (idempotent); its blob is installed.
/// The same bytes already recorded under another kind are refused: the
/// kind says how jobs read them.
pub(super) fn record_object(
    db: &Connection,
    tenant: &str,
    id: ObjectId,
    kind: &str,
    size: u64,
    created: i64,
) -> Result<()> {
    let hex = id.to_hex();
    let stored: Option<String> = db
        .query_row(
            "SELECT kind FROM objects WHERE tenant=?1 AND id=?2",
            params![tenant, hex],
            |r| r.get(0),
        )
        .optional()?;
    match stored {
        Some(k) if k == kind => Ok(()),
        Some(k) => Err(kind_conflict(id, &k, kind)),
        None => {
            db.execute(
                "INSERT INTO objects(tenant,id,kind,size,created) VALUES(?1,?2,?3,?4,?5)",
                params![tenant, hex, kind, size as i64, created],
            )?;
            Ok(())
        }
    }
}

/// The refusal of bytes already stored under another kind.
pub fn kind_conflict(id: ObjectId, stored: &str, asked: &str) -> ServerError {
    ServerError::AlreadyExists(format!(
        "object {id} is already stored as a {stored}, not a {asked}: delete it first to store it as another kind"
    ))
}

/// The refusal of an object found damaged, and why.
pub fn damaged_error(id: ObjectId, why: &str) -> ServerError {
    ServerError::Damaged(format!(
        "object {id} is damaged ({why}); upload its bytes again to repair it"
    ))
}

/// Columns of an object row, in the order [`object_row`] reads them.
pub(super) const OBJECT_COLUMNS: &str = "id,kind,size,created,damaged";

pub(super) fn object_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ObjectMeta> {
    Ok(ObjectMeta {
        id: object_id_at(r, 0)?,
        kind: r.get(1)?,
        size: r.get::<_, i64>(2)? as u64,
        created_ms: r.get(3)?,
        damaged: r.get::<_, i64>(4)? != 0,
    })
}

/// Bytes read (and hashed) in one step by [`Store::read_blob_verified`].
pub(super) const READ_STEP: u64 = 1 << 20;

impl Store {
    /// Path of the blob of `id`: `blobs/<2 hex>/<64 hex>`.
    pub fn blob_path(&self, id: ObjectId) -> PathBuf {
        let hex = id.to_hex();
        self.root.join("blobs").join(&hex[..2]).join(hex)
    }

    /// Moves a complete, fsynced file into the blob store (atomic rename +
    /// directory fsync). An existing blob with the same hash is kept, unless
    /// it was found damaged: then it is replaced and its objects repaired.
    ///
    /// `_locked` is the blob lock, held: the caller records the object
    /// before letting it go, so `delete_object` (which removes a blob no
    /// object refers to, under the same lock) cannot remove the blob
    /// between this check and that record.
    pub(super) fn install_blob(
        &self,
        _locked: &MutexGuard<'_, ()>,
        file: &Path,
        id: ObjectId,
    ) -> Result<()> {
        let dest = self.blob_path(id);
        let dir = dest.parent().expect("blob path has a parent");
        create_private_dir(dir)?;
        // A fresh blob (the usual case) needs no metadata work here; only
        // one already installed is looked up, and replaced if damaged.
        let replacing = dest.exists();
        if replacing {
            let damaged: bool = self.db().query_row(
                "SELECT EXISTS(SELECT 1 FROM objects WHERE id=?1 AND damaged=1)",
                params![id.to_hex()],
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
            self.db().execute(
                "UPDATE objects SET damaged=0 WHERE id=?1",
                params![id.to_hex()],
            )?;
            tracing::info!(object = %id, "damaged object repaired by new bytes");
        }
        Ok(())
    }

    /// Removes the blobs of `ids` that no object refers to (written for
    /// rows that were then not recorded). `_locked` is the blob lock.
    pub(super) fn drop_unreferenced(
        &self,
        _locked: &MutexGuard<'_, ()>,
        db: &Connection,
        ids: &[ObjectId],
    ) {
        for &id in ids {
            let used: rusqlite::Result<bool> = db.query_row(
                "SELECT EXISTS(SELECT 1 FROM objects WHERE id=?1)",
                params![id.to_hex()],
                |r| r.get(0),
            );
            if let Ok(false) = used {
                let _ = fs::remove_file(self.blob_path(id));
            }
        }
    }

    /// Writes `bytes` to a fsynced temporary file, ready for
    /// [`Self::install_blob`]; returns its id (BLAKE3) and path.
    pub(super) fn stage_blob(&self, bytes: &[u8]) -> Result<(ObjectId, PathBuf)> {
        let id = ObjectId::of(bytes);
        let tmp = self.stage_blob_as(id, bytes)?;
        Ok((id, tmp))
    }

    /// [`Self::stage_blob`] of bytes whose BLAKE3 `id` is known.
    pub(super) fn stage_blob_as(&self, id: ObjectId, bytes: &[u8]) -> Result<PathBuf> {
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
            self.install_blob(&blobs, &tmp, id)?;
            let db = self.db();
            if let Err(e) = record_object(&db, tenant, id, kind, bytes.len() as u64, now_ms()) {
                self.drop_unreferenced(&blobs, &db, &[id]);
                return Err(e);
            }
        }
        self.recorded_object(tenant, id)
    }

    /// Reads a whole blob, unchecked (see [`Self::read_blob_verified`]).
    pub fn read_blob(&self, id: ObjectId) -> Result<Vec<u8>> {
        Ok(fs::read(self.blob_path(id))?)
    }

    /// Reads a whole blob and checks, in the same pass, that its bytes hash
    /// to `id`. A blob that does not (flipped on disk, truncated, missing)
    /// is marked damaged and refused with [`ServerError::Damaged`]: a job
    /// on it would compute garbage and store it under a fresh, valid hash.
    pub fn read_blob_verified(&self, id: ObjectId) -> Result<Vec<u8>> {
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
            Ok((bytes, h)) if *h.as_bytes() == id.0 => Ok(bytes),
            Ok(_) => Err(self.damaged(id, "its stored bytes no longer hash to its id")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(self.damaged(id, "its stored bytes are missing"))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Marks the objects of blob `id` damaged (every tenant's: they share
    /// it) and returns the error that says so.
    pub fn damaged(&self, id: ObjectId, why: &str) -> ServerError {
        tracing::error!(object = %id, reason = why, "damaged blob");
        if let Err(e) = self.db().execute(
            "UPDATE objects SET damaged=1 WHERE id=?1",
            params![id.to_hex()],
        ) {
            tracing::error!(object = %id, error = %e, "could not mark the object damaged");
        }
        damaged_error(id, why)
    }

    /// An object just recorded under the metadata lock (it cannot be
    /// missing unless the store is broken).
    pub(super) fn recorded_object(&self, tenant: &str, id: ObjectId) -> Result<ObjectMeta> {
        self.object(tenant, id)?
            .ok_or_else(|| ServerError::Internal("object vanished after insert".into()))
    }

    /// An object of a tenant.
    pub fn object(&self, tenant: &str, id: ObjectId) -> Result<Option<ObjectMeta>> {
        Ok(self
            .db()
            .query_row(
                &format!("SELECT {OBJECT_COLUMNS} FROM objects WHERE tenant=?1 AND id=?2"),
                params![tenant, id.to_hex()],
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

    /// Deletes a tenant's object; the blob goes when no tenant references it.
    pub fn delete_object(&self, tenant: &str, id: ObjectId) -> Result<Option<ObjectMeta>> {
        let Some(meta) = self.object(tenant, id)? else {
            return Ok(None);
        };
        let _blobs = self.lock_blobs();
        let db = self.db();
        let hex = id.to_hex();
        db.execute(
            "DELETE FROM objects WHERE tenant=?1 AND id=?2",
            params![tenant, hex],
        )?;
        let left: i64 = db.query_row(
            "SELECT COUNT(*) FROM objects WHERE id=?1",
            params![hex],
            |r| r.get(0),
        )?;
        if left == 0 {
            let _ = fs::remove_file(self.blob_path(id));
        }
        Ok(Some(meta))
    }

    /// The ids of a tenant's objects of one kind.
    pub fn object_ids_of_kind(&self, tenant: &str, kind: &str) -> Result<Vec<ObjectId>> {
        let db = self.db();
        let mut st = db.prepare("SELECT id FROM objects WHERE tenant=?1 AND kind=?2")?;
        let rows = st.query_map(params![tenant, kind], |r| object_id_at(r, 0))?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }
}
