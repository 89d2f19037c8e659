//! The store's tests: quotas, races, damage, migrations, recovery.

use hecloud_protocol::{JobId, JobState, ObjectId};
use rusqlite::params;

use super::jobs::{state_column, state_of_column};
use super::schema::SCHEMA;
use super::*;
use crate::config::Quota;

/// `N` bytes from the test's replayable random stream
/// (`hecloud_math::testing`).
fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    rand_core::RngCore::fill_bytes(&mut hecloud_math::testing::rng(), &mut b);
    b
}

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
        hash: Some(ObjectId::of(bytes)),
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
                // Drawn here: the test's stream is this thread's.
                let bytes = random::<1000>();
                std::thread::spawn(move || {
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
            .map(|i| ReadyOutput::new(format!("o{i}"), "raw".into(), random::<64>().to_vec()))
            .collect()
    };
    let job = |s: &Store| {
        let (rec, _) = s
            .insert_job("t", "graph.v1", &random::<8>(), "", 1.0)
            .unwrap();
        assert!(s.start_job("t", rec.id).unwrap());
        rec.id
    };
    // Three outputs with one object stored: over the limit of 3.
    let id = job(&s);
    let over = outputs(3);
    let c = s.complete_job("t", id, &over, 5, &q).unwrap();
    assert!(
        matches!(&c, Completion::OverQuota(m) if m.contains("object limit of 3")),
        "{c:?}"
    );
    let rec = s.job("t", id).unwrap().unwrap();
    assert_eq!(rec.state, JobState::Failed);
    assert!(rec.error.contains("object limit"), "{}", rec.error);
    assert_eq!(s.usage("t").unwrap().0, 1);
    // No blob left behind for them.
    for o in &over {
        assert!(!s.blob_path(o.id).exists());
    }
    // Two fit.
    let id = job(&s);
    assert_eq!(
        s.complete_job("t", id, &outputs(2), 5, &q).unwrap(),
        Completion::Stored
    );
    assert_eq!(s.usage("t").unwrap().0, 3);
    // Bytes too.
    let id = job(&s);
    let c = s
        .complete_job("t", id, &outputs(1), 5, &quota(10, 100))
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
    assert!(s.start_job("t", rec.id).unwrap());
    s.set_progress("t", rec.id, 0.25, "node 1 of 4").unwrap();
    s.request_cancel("t", rec.id).unwrap();
    // Progress still counts after a cancel, but the note stays "cancelling".
    s.set_progress("t", rec.id, 0.5, "node 2 of 4").unwrap();
    let job = s.job("t", rec.id).unwrap().unwrap();
    assert_eq!((job.progress, job.message.as_str()), (0.5, "cancelling"));
    let out = [ReadyOutput::new("o".into(), "raw".into(), b"late".to_vec())];
    assert_eq!(
        s.complete_job("t", rec.id, &out, 5, &q).unwrap(),
        Completion::NotRunning
    );
    let after = s.job("t", rec.id).unwrap().unwrap();
    assert_eq!(after.state, JobState::Running, "the worker ends it");
    assert!(after.cancel_requested && after.outputs.is_empty());
    assert!(s.object("t", out[0].id).unwrap().is_none());
    assert!(!s.blob_path(out[0].id).exists());
    // A cancel is durable: it is there after a reopen, and the job
    // cannot start again.
    drop(s);
    let s = Store::open(dir.path()).unwrap();
    let pending = s.unfinished_jobs().unwrap();
    assert_eq!(pending.len(), 1);
    assert!(pending[0].cancel_requested);
    assert!(!s.start_job("t", rec.id).unwrap());
    // A queued job is cancelled at once.
    let (queued, _) = s.insert_job("t", "graph.v1", b"other", "", 1.0).unwrap();
    s.request_cancel("t", queued.id).unwrap();
    assert_eq!(
        s.job("t", queued.id).unwrap().unwrap().state,
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
        matches!(&e, ServerError::AlreadyExists(m) if m.contains(&a.id.to_hex())),
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
    let bytes = random::<100>();
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
    assert_eq!(s.object("t", o.id).unwrap().unwrap().kind, "raw");
    assert!(s.upload("t", "as-ct-upload-0001").unwrap().is_none());
    assert_eq!(s.read_blob(o.id).unwrap(), bytes);
    assert!(matches!(
        s.put_object("t", "echo", &bytes),
        Err(ServerError::AlreadyExists(_))
    ));
    // A job output too: nothing of the job's is stored.
    let (rec, _) = s.insert_job("t", "graph.v1", b"spec", "", 1.0).unwrap();
    assert!(s.start_job("t", rec.id).unwrap());
    let fresh = ReadyOutput::new("a".into(), "raw".into(), b"fresh".to_vec());
    let same = ReadyOutput::new("b".into(), "echo".into(), bytes.to_vec());
    let e = s
        .complete_job("t", rec.id, &[fresh.clone(), same], 5, &Quota::default())
        .unwrap_err();
    assert!(matches!(e, ServerError::AlreadyExists(_)), "{e:?}");
    assert!(s.object("t", fresh.id).unwrap().is_none());
    assert!(!s.blob_path(fresh.id).exists());
    assert_eq!(s.read_blob(o.id).unwrap(), bytes, "the shared blob stays");
    assert_eq!(
        s.job("t", rec.id).unwrap().unwrap().state,
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
    assert_eq!(s.read_blob_verified(o.id).unwrap(), bytes);
    // One byte flipped on disk, in the last read step.
    let path = s.blob_path(o.id);
    let mut on_disk = fs::read(&path).unwrap();
    on_disk[2_500_000] ^= 1;
    fs::write(&path, &on_disk).unwrap();
    let e = s.read_blob_verified(o.id).unwrap_err();
    assert!(
        matches!(&e, ServerError::Damaged(m) if m.contains(&o.id.to_hex())),
        "{e:?}"
    );
    // Both tenants' objects share the blob: both are damaged.
    assert!(s.object("t", o.id).unwrap().unwrap().damaged);
    assert!(s.object("u", o.id).unwrap().unwrap().damaged);
    // The bytes uploaded again replace the blob.
    upload(&s, "t", "repairing-upload1", &bytes, &Quota::default()).unwrap();
    assert!(!s.object("u", o.id).unwrap().unwrap().damaged);
    assert_eq!(s.read_blob_verified(o.id).unwrap(), bytes);
    // A missing blob is damaged too.
    fs::remove_file(&path).unwrap();
    assert!(matches!(
        s.read_blob_verified(o.id),
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
    const OBJECT: ObjectId = ObjectId([0xab; 32]);
    const JOB: JobId = JobId([0x1f; 16]);
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Connection::open(dir.path().join("meta.sqlite")).unwrap();
        db.execute_batch(SCHEMA).unwrap();
        db.execute(
            "INSERT INTO objects(tenant,id,kind,size,created) VALUES('t',?1,'raw',5,1)",
            [OBJECT.to_hex()],
        )
        .unwrap();
        db.execute(
            "INSERT INTO jobs(tenant,id,kind,spec,state,progress,message,error,created,finished,compute_us,attempts,client_ref)
             VALUES('t',?1,'graph.v1',x'00',2,0.5,'running','',1,0,0,1,'r')",
            [JOB.to_hex()],
        )
        .unwrap();
    }
    let s = Store::open(dir.path()).unwrap();
    let v: i64 = s
        .db()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    let o = s.object("t", OBJECT).unwrap().unwrap();
    assert_eq!((o.kind.as_str(), o.size, o.damaged), ("raw", 5, false));
    let j = s.job("t", JOB).unwrap().unwrap();
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
    let bytes = random::<1000>().to_vec();
    let id = s.put_object("a", "raw", &bytes).unwrap().id;
    assert_eq!(id, ObjectId::of(&bytes));
    assert_eq!(s.read_blob(id).unwrap(), bytes);
    assert!(s.object("a", id).unwrap().is_some());
    assert!(s.object("b", id).unwrap().is_none());
    s.put_object("b", "raw", &bytes).unwrap();
    s.delete_object("a", id).unwrap();
    // Still referenced by b.
    assert_eq!(s.read_blob(id).unwrap(), bytes);
    s.delete_object("b", id).unwrap();
    assert!(s.read_blob(id).is_err());
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
    let rec = s.job("t", id).unwrap().unwrap();
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
        hash: Some(ObjectId::of(&data)),
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
    assert_eq!(Some(obj.id), meta.hash);
    assert_eq!(s.read_blob(obj.id).unwrap(), data);
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
        hash: Some(ObjectId([0; 32])),
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
    let data = random::<5000>().to_vec();
    let meta = UploadMeta {
        kind: "raw".into(),
        total: data.len() as u64,
        hash: Some(ObjectId::of(&data)),
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
    assert_eq!(s.read_blob(obj.id).unwrap(), data);
}
