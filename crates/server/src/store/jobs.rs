//! Jobs: their rows, states and outputs. A job's outputs are stored in
//! the transaction that ends it, so a late result never overwrites a
//! cancel and outputs count against the quota like uploads.

use hecloud_protocol::{JobId, JobState, ObjectId};
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::objects::record_object;
use super::quota::{over_quota, usage};
use super::{ObjectMeta, Store, job_id_at, now_ms, object_id_at, rand_bytes};
use crate::config::Quota;
use crate::error::{Result, ServerError};

/// An output of a job, computed and about to be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyOutput {
    /// Output name.
    pub name: String,
    /// Object kind.
    pub kind: String,
    /// BLAKE3 of `bytes`: the object id it is stored under.
    pub id: ObjectId,
    /// Content.
    pub bytes: Vec<u8>,
}

impl ReadyOutput {
    /// An output named `name` of `kind` (its id is hashed here).
    pub fn new(name: String, kind: String, bytes: Vec<u8>) -> Self {
        let id = ObjectId::of(&bytes);
        Self {
            name,
            kind,
            id,
            bytes,
        }
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
    /// Job id.
    pub id: JobId,
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

/// A job state as the `jobs.state` column holds it: the protocol's
/// numbering (the statements that select or set states by number, such as
/// `state IN (1,2)` for the unfinished ones, use it too).
pub(super) fn state_column(state: JobState) -> i64 {
    state as i64
}

/// The job state of a `jobs.state` value (one this build does not know
/// reads as failed: the job cannot be resumed).
pub(super) fn state_of_column(v: i64) -> JobState {
    match v {
        1 => JobState::Queued,
        2 => JobState::Running,
        3 => JobState::Succeeded,
        5 => JobState::Cancelled,
        _ => JobState::Failed,
    }
}

/// Columns of a job row, in the order [`job_row`] reads them.
pub(super) const JOB_COLUMNS: &str = "kind,spec,state,progress,message,error,created,finished,compute_us,attempts,cancel_requested,est_seconds";

/// The job in `r`, whose [`JOB_COLUMNS`] start at column `at`.
pub(super) fn job_row(
    tenant: &str,
    id: JobId,
    r: &rusqlite::Row<'_>,
    at: usize,
) -> rusqlite::Result<JobRecord> {
    Ok(JobRecord {
        tenant: tenant.to_string(),
        id,
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

impl Store {
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
        let id: Option<JobId> = self
            .db()
            .query_row(
                "SELECT id FROM jobs WHERE tenant=?1 AND client_ref=?2",
                params![tenant, client_ref],
                |r| job_id_at(r, 0),
            )
            .optional()?;
        let Some(rec) = id.map(|id| self.job(tenant, id)).transpose()?.flatten() else {
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
        let id = JobId(rand_bytes::<16>());
        // Durable once the caller has run `sync_metadata`.
        self.execute_unsynced(
            "INSERT INTO jobs(tenant,id,kind,spec,state,progress,message,error,created,finished,compute_us,attempts,client_ref,est_seconds)
             VALUES(?1,?2,?3,?4,1,0,'queued','',?5,0,0,0,?6,?7)",
            params![tenant, id.to_hex(), kind, spec, now_ms(), client_ref, est_seconds],
        )?;
        Ok((self.job(tenant, id)?.expect("job just inserted"), true))
    }

    /// A job of a tenant, with its outputs.
    pub fn job(&self, tenant: &str, id: JobId) -> Result<Option<JobRecord>> {
        let db = self.db();
        let hex = id.to_hex();
        let rec = db
            .query_row(
                &format!("SELECT {JOB_COLUMNS} FROM jobs WHERE tenant=?1 AND id=?2"),
                params![tenant, hex],
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
            .query_map(params![tenant, hex], |r| {
                Ok(JobOutputMeta {
                    name: r.get(0)?,
                    object: ObjectMeta {
                        id: object_id_at(r, 1)?,
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
            let tenant: String = r.get(0)?;
            job_row(&tenant, job_id_at(r, 1)?, r, 2)
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// Marks a job running (one more attempt) unless it is already final
    /// or asked to cancel; returns whether it should run. The attempt count
    /// bounds restarts that the job itself causes (a crash of the process,
    /// which an unsynced commit survives), so the commit does not wait for
    /// the disk.
    pub fn start_job(&self, tenant: &str, id: JobId) -> Result<bool> {
        let n = self.execute_unsynced(
            "UPDATE jobs SET state=2, attempts=attempts+1, message='running'
             WHERE tenant=?1 AND id=?2 AND state IN (1,2) AND cancel_requested=0",
            params![tenant, id.to_hex()],
        )?;
        Ok(n == 1)
    }

    /// Records a client's cancel, durably, before it is answered: a queued
    /// job ends CANCELLED at once; a running one is marked, so that it ends
    /// CANCELLED even if the server restarts before its worker stops.
    pub fn request_cancel(&self, tenant: &str, id: JobId) -> Result<()> {
        let id = id.to_hex();
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
    pub fn set_progress(
        &self,
        tenant: &str,
        id: JobId,
        progress: f32,
        message: &str,
    ) -> Result<()> {
        self.execute_unsynced(
            // A requested cancel keeps its "cancelling" note: the job's
            // next report must not make it look as if it went on running.
            "UPDATE jobs SET progress=?3, message=CASE cancel_requested WHEN 1 THEN message ELSE ?4 END
             WHERE tenant=?1 AND id=?2 AND state=2",
            params![tenant, id.to_hex(), progress as f64, message],
        )?;
        Ok(())
    }

    /// Ends a job (failed or cancelled) unless it is already final.
    pub fn end_job(&self, tenant: &str, id: JobId, state: JobState, error: &str) -> Result<()> {
        self.db().execute(
            "UPDATE jobs SET state=?3, error=?4, message=?5, finished=?6 WHERE tenant=?1 AND id=?2 AND state IN (1,2)",
            params![tenant, id.to_hex(), state_column(state), error, format!("{state:?}").to_lowercase(), now_ms()],
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
        id: JobId,
        outputs: &[ReadyOutput],
        compute_us: u64,
        quota: &Quota,
    ) -> Result<Completion> {
        let id = id.to_hex();
        // Written and fsynced before taking the lock; installed under it.
        let staged = outputs
            .iter()
            .map(|o| self.stage_blob_as(o.id, &o.bytes))
            .collect::<Result<Vec<_>>>()?;
        let blobs = self.lock_blobs();
        for (o, tmp) in outputs.iter().zip(&staged) {
            self.install_blob(&blobs, tmp, o.id)?;
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
                    params![tenant, o.id.to_hex()],
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
                record_object(&tx, tenant, o.id, &o.kind, o.bytes.len() as u64, now)?;
                tx.execute(
                    "INSERT OR REPLACE INTO job_outputs(tenant,job,pos,name,object) VALUES(?1,?2,?3,?4,?5)",
                    params![tenant, id, pos as i64, o.name, o.id.to_hex()],
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
            let ids: Vec<ObjectId> = outputs.iter().map(|o| o.id).collect();
            self.drop_unreferenced(&blobs, &db, &ids);
        }
        completion
    }
}
