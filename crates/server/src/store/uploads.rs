//! Pending uploads: their rows (which reserve quota), their part files,
//! and how one ends (installed as an object, dropped or expired).

use std::fs::{self, File};
use std::io::Read;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use hecloud_protocol::ObjectId;
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::objects::{READ_STEP, record_object};
use super::quota::{over_quota, usage};
use super::{ObjectMeta, Store, create_private_dir, now_ms};
use crate::config::Quota;
use crate::error::{Result, ServerError};
use crate::part::PartWriter;

/// A pending (resumable) upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadMeta {
    /// Object kind.
    pub kind: String,
    /// Announced total length.
    pub total: u64,
    /// Announced BLAKE3 (the `hash` column holds its hex, or is empty
    /// without one); `None` when the client hashes the bytes as it
    /// makes them and checks the id it is answered with.
    pub hash: Option<ObjectId>,
}

impl Store {
    /// Removes part files whose upload row a crash lost (the row is
    /// committed without an fsync; see [`Self::begin_upload`]).
    pub(super) fn remove_orphan_parts(&self) -> Result<()> {
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

    pub(super) fn part_path(&self, tenant: &str, upload_id: &str) -> PathBuf {
        self.root
            .join("uploads")
            .join(tenant)
            .join(format!("{upload_id}.part"))
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
                        hash: match r.get::<_, String>(2)?.is_empty() {
                            true => None,
                            false => Some(super::object_id_at(r, 2)?),
                        },
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
                params![tenant, upload_id, meta.kind, meta.total as i64, meta.hash.map(|h| h.to_hex()).unwrap_or_default(), now_ms()],
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
        let got = ObjectId(*got.as_bytes());
        if let Some(announced) = meta.hash
            && got != announced
        {
            // A corrupt upload cannot be resumed: start over.
            let _ = fs::remove_file(&part);
            self.db().execute(
                "DELETE FROM uploads WHERE tenant=?1 AND upload_id=?2",
                params![tenant, upload_id],
            )?;
            return Err(ServerError::InvalidArgument(format!(
                "content hash mismatch: header says {announced}, bytes hash to {got}"
            )));
        }
        {
            let blobs = self.lock_blobs();
            self.install_blob(&blobs, &part, got)?;
            let mut db = self.db();
            let tx = db.transaction()?;
            let recorded = record_object(&tx, tenant, got, &meta.kind, meta.total, now_ms());
            tx.execute(
                "DELETE FROM uploads WHERE tenant=?1 AND upload_id=?2",
                params![tenant, upload_id],
            )?;
            tx.commit()?;
            if let Err(e) = recorded {
                self.drop_unreferenced(&blobs, &db, &[got]);
                return Err(e);
            }
        }
        self.recorded_object(tenant, got)
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
}
