//! The metadata schema: its tables as first released, the migrations that
//! bring an older store up to date, and the version that says which ran
//! (`PRAGMA user_version`).

use rusqlite::Connection;

use crate::error::{Result, ServerError};

/// The schema as first released (version 0); [`MIGRATIONS`] bring it up
/// to [`SCHEMA_VERSION`].
pub(super) const SCHEMA: &str = "
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
pub(super) const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    // 1: damaged objects, durable cancels, job cost estimates.
    "ALTER TABLE objects ADD COLUMN damaged INTEGER NOT NULL DEFAULT 0;
     ALTER TABLE jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
     ALTER TABLE jobs ADD COLUMN est_seconds REAL NOT NULL DEFAULT 0;",
];

/// Brings the schema of `db` to [`SCHEMA_VERSION`], one migration per
/// transaction; a newer schema is refused.
pub(super) fn migrate(db: &mut Connection) -> Result<()> {
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
