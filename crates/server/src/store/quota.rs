//! Tenant quotas: objects and stored bytes, counted with the pending
//! uploads that reserve them, checked in the transaction that records.

use rusqlite::{Connection, params};

use super::Store;
use crate::config::Quota;
use crate::error::Result;

/// A tenant's objects and bytes, stored and reserved by pending uploads.
pub(super) fn usage(db: &Connection, tenant: &str) -> Result<(u64, u64)> {
    Ok(db.query_row(
        "SELECT (SELECT COUNT(*) FROM objects WHERE tenant=?1) + (SELECT COUNT(*) FROM uploads WHERE tenant=?1),
                (SELECT IFNULL(SUM(size),0) FROM objects WHERE tenant=?1) + (SELECT IFNULL(SUM(total),0) FROM uploads WHERE tenant=?1)",
        params![tenant],
        |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
    )?)
}

/// Why adding `objects` objects of `bytes` bytes to a tenant's `usage`
/// would overrun `quota`, if it would.
pub(super) fn over_quota(
    quota: &Quota,
    (have, held): (u64, u64),
    objects: u64,
    bytes: u64,
) -> Option<String> {
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

impl Store {
    /// A tenant's objects and bytes, stored and reserved by its pending
    /// uploads (what its quota bounds).
    pub fn usage(&self, tenant: &str) -> Result<(u64, u64)> {
        usage(&self.db(), tenant)
    }
}
