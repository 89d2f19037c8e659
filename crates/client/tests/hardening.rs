//! The server probed as a hostile tenant or an unlucky operator would:
//! damaged blobs, job bombs and their cancel, racing quotas, fairness
//! between tenants, a data dir shared by two servers (and freed by a
//! stop, key-holder sessions open or not), and the minor
//! refusals (kinds, client refs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hecloud_bench::workload;
use hecloud_circuits::EncryptedUint;
use hecloud_ckks::Encoder;
use hecloud_client::Client;
use hecloud_protocol::rpc::{self, JobState};
use hecloud_protocol::{Graph, JobSubmission, Message, Object, ObjectId, ObjectKind};
use hecloud_server::{Quota, ServerConfig};
use tonic::Code;

mod common;

use common::{
    ALICE, BOB, Setup, code, config, connect, echo_key_holder, first_slot, random_bytes,
    random_values, server, small_ckks,
};

/// Flips one byte of a stored blob, as a failing disk would.
fn flip_byte(data_dir: &std::path::Path, id: &str, at: usize) {
    let path = data_dir.join("blobs").join(&id[..2]).join(id);
    let mut b = std::fs::read(&path).unwrap();
    b[at] ^= 0x40;
    std::fs::write(&path, b).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_damaged_blob_fails_its_job_instead_of_giving_a_wrong_answer() {
    let s = server(Quota::default(), 1).await;
    let alice = connect(&s, ALICE).await;
    let (params, keys, session) = small_ckks(&alice).await;
    let enc = Encoder::new(&params);
    let values = random_values(8);
    let ct = keys
        .encrypt(
            &enc.encode_real(&values, params.max_level(), params.default_scale())
                .unwrap(),
        )
        .unwrap()
        .to_bytes();
    // No session is loaded yet: nothing decodes the upload ahead of its
    // job, so the job reads the stored blob.
    let o = alice
        .upload("ckks.ciphertext", Arc::new(ct.clone()))
        .await
        .unwrap();
    flip_byte(s.dir.path(), &o.object_id, ct.len() / 2);
    let id = ObjectId::from_hex(&o.object_id).unwrap();
    let job = workload::statistics_graph(session, id, values.len());
    let (c, m) = code(alice.submit(rpc::JOB_KIND_GRAPH, job.encode(), "").await);
    assert_eq!(c, Code::DataLoss, "{m}");
    assert!(m.contains("damaged") && m.contains(&o.object_id), "{m}");
    // Marked: listed as damaged, and downloads refuse it.
    let listed = alice.list().await.unwrap();
    assert!(
        listed
            .iter()
            .any(|l| l.object_id == o.object_id && l.damaged)
    );
    let (c, _) = code(alice.download(&o.object_id, None).await);
    assert_eq!(c, Code::DataLoss);
    // The same bytes uploaded again repair it, and the job is right.
    alice.upload("ckks.ciphertext", Arc::new(ct)).await.unwrap();
    let done = workload::run_job(&alice, &job).await.unwrap();
    let out = workload::output(&alice, &done, "mean").await.unwrap();
    let mean = first_slot(&keys, &out);
    let want = values.iter().sum::<f64>() / values.len() as f64;
    assert!((mean - want).abs() < 1e-3, "mean {mean} vs {want}");

    // A blob damaged on disk after it was stored is caught by a download
    // too, before its last chunk goes out.
    flip_byte(s.dir.path(), &done.outputs[0].object_id, 10);
    let (c, m) = code(alice.download(&done.outputs[0].object_id, None).await);
    assert_eq!(c, Code::DataLoss, "{m}");
    s.server.stop().await.unwrap();
}

/// One TFHE integer of `width` bits, encrypted and uploaded.
async fn tfhe_input(
    client: &Client,
    tf: &workload::TfheSession,
    v: u128,
    width: usize,
) -> ObjectId {
    let (e, key) = (tf.engine.clone(), tf.key);
    let bytes = tokio::task::spawn_blocking(move || {
        Object::TfheUint(EncryptedUint::encrypt_u128(&*e, v, width).unwrap(), key).to_bytes()
    })
    .await
    .unwrap();
    let o = client
        .upload(rpc::object_kind_name(ObjectKind::TfheUint), Arc::new(bytes))
        .await
        .unwrap();
    ObjectId::from_hex(&o.object_id).unwrap()
}

/// `nodes` sums, each of `operands` copies of input 0, each an output (a
/// node no output depends on is not checked).
fn sums(session: ObjectId, input: ObjectId, nodes: usize, operands: usize) -> JobSubmission {
    let mut g = Graph::new();
    let x = g.input(0);
    for k in 0..nodes {
        let s = g.int_sum(vec![x; operands], false);
        g.output(format!("sum{k}"), s);
    }
    JobSubmission {
        session,
        graph: g,
        inputs: vec![input],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn job_bombs_are_refused_cheaply_and_a_long_node_stops_at_its_cancel() {
    let quota = Quota {
        max_job_seconds: 600.0,
        max_inflight_seconds: 900.0,
        ..Quota::default()
    };
    // Messages as large as the default chunks: the bomb's spec is 3 MB.
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), quota, 1);
    c.max_chunk_bytes = ServerConfig::default().max_chunk_bytes;
    let s = Setup {
        server: hecloud_server::start(c).await.unwrap(),
        dir,
    };
    let alice = connect(&s, ALICE).await;
    let tf = workload::tfhe_setup(&alice).await.unwrap();
    let x64 = tfhe_input(&alice, &tf, 12345, 64).await;

    // 200 sums of 4096 operands of 64 bits (it took 17.5 s of CPU to
    // validate, then was accepted): refused at the first, on the bound of
    // its shape (the graph's total shape is capped too, for validation
    // without a cost limit).
    let t = Instant::now();
    let bomb = sums(tf.id, x64, 200, 4096);
    let (c, m) = code(alice.submit(rpc::JOB_KIND_GRAPH, bomb.encode(), "").await);
    assert_eq!(c, Code::ResourceExhausted, "{m}");
    assert!(m.contains("upper bound, so far"), "{m}");
    // (That first check also loaded the session's 115 MiB server key.)
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // Seven pass the shape limit but not the tenant's cost limit: refused
    // before they are costed in full, with the figures.
    let t = Instant::now();
    let bomb = sums(tf.id, x64, 7, 4096);
    let (c, m) = code(alice.submit(rpc::JOB_KIND_GRAPH, bomb.encode(), "").await);
    assert_eq!(c, Code::ResourceExhausted, "{m}");
    assert!(m.contains("600"), "the limit is named: {m}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());

    // A long node (one sum of 48 numbers of 32 bits: tens of seconds on
    // two cores) is cancelled while it runs: it stops within a layer of
    // its circuit and ends CANCELLED, with no output.
    let x32 = tfhe_input(&alice, &tf, 777, 32).await;
    let long = sums(tf.id, x32, 1, 48);
    let job = alice
        .submit(rpc::JOB_KIND_GRAPH, long.encode(), "")
        .await
        .unwrap();
    // Cancelled once its inputs are loaded and the graph runs (the server
    // says "running", then reports nodes): the sum is its one long node.
    let t = Instant::now();
    loop {
        let j = alice.job(&job.job_id).await.unwrap();
        let graph_runs = j.message == "running" || j.message.starts_with("node ");
        if j.state == JobState::Running as i32 && graph_runs {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "never ran: {j:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancelled_at = Instant::now();
    let c = alice.cancel(&job.job_id).await.unwrap();
    assert_eq!(c.message, "cancelling");
    let done = alice.wait(&job.job_id, &|_| {}).await.unwrap();
    let stopped = cancelled_at.elapsed();
    assert_eq!(done.state, JobState::Cancelled as i32, "{done:?}");
    assert!(done.outputs.is_empty());
    assert!(
        stopped < Duration::from_secs(8),
        "stopped {stopped:?} after its cancel"
    );

    // The cost of jobs in flight is bounded per tenant: two sums each
    // estimated at about 500 s (under the 600 s per job; the estimate grows
    // with operands × width, as measured on the 48 × 32-bit one) do not
    // fit within 900 s together.
    assert!(job.est_seconds > 0.0);
    let operands = (48.0 * 32.0 * 500.0 / job.est_seconds / 64.0) as usize;
    let first = alice
        .submit(
            rpc::JOB_KIND_GRAPH,
            sums(tf.id, x64, 1, operands).encode(),
            "",
        )
        .await
        .unwrap();
    assert!(
        (450.0..=600.0).contains(&first.est_seconds),
        "{}",
        first.est_seconds
    );
    let second = sums(tf.id, x64, 1, operands - 1);
    let (c, m) = code(alice.submit(rpc::JOB_KIND_GRAPH, second.encode(), "").await);
    assert_eq!(c, Code::ResourceExhausted, "{m}");
    assert!(m.contains("in flight") && m.contains("900"), "{m}");
    alice.cancel(&first.job_id).await.unwrap();
    s.server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tenants_are_served_in_turn() {
    let s = server(Quota::default(), 1).await;
    let alice = connect(&s, ALICE).await;
    let bob = connect(&s, BOB).await;
    // Alice's key holder answers her first job only once Bob's job is
    // queued, so that her others are still queued then; every answer takes
    // 50 ms, so that the jobs' end times (in ms) differ.
    let (let_go, held) = std::sync::mpsc::channel::<()>();
    let held = std::sync::Mutex::new(held);
    let alices = Arc::new(move |_: &str, p: &[u8]| {
        let _ = held.lock().unwrap().recv_timeout(Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(50));
        Ok(p.to_vec())
    }) as hecloud_client::CallbackHandler;
    let bobs = Arc::new(|_: &str, p: &[u8]| {
        std::thread::sleep(Duration::from_millis(50));
        Ok(p.to_vec())
    }) as hecloud_client::CallbackHandler;
    let _a = alice
        .open_session(&[rpc::CALLBACK_ECHO], alices)
        .await
        .unwrap();
    let _b = bob.open_session(&[rpc::CALLBACK_ECHO], bobs).await.unwrap();
    let mut mine = vec![];
    for i in 0..4 {
        let j = alice
            .submit(rpc::JOB_KIND_ECHO, format!("a{i}").into_bytes(), "")
            .await
            .unwrap();
        mine.push(j.job_id);
    }
    // Queued behind three of Alice's jobs, Bob's runs after at most one
    // more of hers (first come, first served ran it last).
    let b = bob
        .submit(rpc::JOB_KIND_ECHO, b"b".to_vec(), "")
        .await
        .unwrap();
    // Let go once Bob's job is queued (then every call is let go at once).
    drop(let_go);
    let b = bob.wait(&b.job_id, &|_| {}).await.unwrap();
    assert_eq!(b.state, JobState::Succeeded as i32, "{}", b.error);
    let mut later = 0;
    for id in &mine {
        let j = alice.wait(id, &|_| {}).await.unwrap();
        assert_eq!(j.state, JobState::Succeeded as i32, "{}", j.error);
        later += usize::from(j.finished_unix_ms > b.finished_unix_ms);
    }
    assert!(later >= 2, "{later} of Alice's jobs ended after Bob's");
    s.server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_uploads_and_job_outputs_stay_within_the_quota() {
    let quota = Quota {
        max_objects: 6,
        ..Quota::default()
    };
    let s = server(quota, 1).await;
    let alice = connect(&s, ALICE).await;
    let uploads: Vec<_> = (0..20)
        .map(|i| {
            let c = alice.clone();
            tokio::spawn(async move {
                let bytes = format!("object number {i} of twenty").into_bytes();
                c.upload(rpc::OPAQUE_KIND, Arc::new(bytes)).await
            })
        })
        .collect();
    let mut stored = 0;
    for u in uploads {
        match u.await.unwrap() {
            Ok(_) => stored += 1,
            Err(e) => assert_eq!(code::<()>(Err(e)).0, Code::ResourceExhausted),
        }
    }
    assert_eq!(stored, 6);
    assert_eq!(alice.list().await.unwrap().len(), 6);
    // A job's output would be the seventh object: the job fails and says
    // why, and nothing is stored.
    let _echo = echo_key_holder(&alice).await;
    let j = alice
        .submit(rpc::JOB_KIND_ECHO, b"one too many".to_vec(), "")
        .await
        .unwrap();
    let done = alice.wait(&j.job_id, &|_| {}).await.unwrap();
    assert_eq!(done.state, JobState::Failed as i32);
    assert!(done.error.contains("object limit of 6"), "{}", done.error);
    assert_eq!(alice.list().await.unwrap().len(), 6);
    s.server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bytes_under_another_kind_and_a_reused_client_ref_are_refused() {
    let s = server(Quota::default(), 1).await;
    let alice = connect(&s, ALICE).await;
    let bytes = Arc::new(b"some bytes stored as opaque bytes".to_vec());
    let o = alice.upload(rpc::OPAQUE_KIND, bytes.clone()).await.unwrap();
    let (c, m) = code(alice.upload("ckks.galois_key", bytes.clone()).await);
    assert_eq!(c, Code::AlreadyExists, "{m}");
    assert!(m.contains(rpc::OPAQUE_KIND), "{m}");
    assert_eq!(alice.list().await.unwrap()[0].kind, rpc::OPAQUE_KIND);
    assert_eq!(alice.list().await.unwrap()[0].object_id, o.object_id);

    let _echo = echo_key_holder(&alice).await;
    let j = alice
        .submit(rpc::JOB_KIND_ECHO, b"first".to_vec(), "my-ref")
        .await
        .unwrap();
    let again = alice
        .submit(rpc::JOB_KIND_ECHO, b"first".to_vec(), "my-ref")
        .await
        .unwrap();
    assert_eq!(again.job_id, j.job_id);
    let (c, m) = code(
        alice
            .submit(rpc::JOB_KIND_ECHO, b"second".to_vec(), "my-ref")
            .await,
    );
    assert_eq!(c, Code::AlreadyExists, "{m}");
    assert!(m.contains(&j.job_id), "{m}");
    s.server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_server_on_a_data_dir_is_refused() {
    let s = server(Quota::default(), 1).await;
    let e = hecloud_server::start(config(s.dir.path(), Quota::default(), 1))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("in use by another hecloud server"), "{e}");
    // The first one is unharmed.
    let alice = connect(&s, ALICE).await;
    assert_eq!(alice.info().await.unwrap().tenant, "alice");
    // Stopped with a key-holder session open (a stream its client never
    // ends), it lets the data dir go before `stop` returns, and the
    // session ends: a server started on the dir at once runs.
    let echo = Arc::new(|_: &str, p: &[u8]| Ok(p.to_vec())) as hecloud_client::CallbackHandler;
    let session = alice
        .open_session(&[rpc::CALLBACK_ECHO], echo)
        .await
        .unwrap();
    s.server.stop().await.unwrap();
    let again = hecloud_server::start(config(s.dir.path(), Quota::default(), 1))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !session.is_closed() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        session.is_closed(),
        "the key-holder session outlived its server"
    );
    again.stop().await.unwrap();
}

/// The refusal of bytes that are not what their upload says; its message.
fn not_what_it_says<T: std::fmt::Debug>(r: Result<T, hecloud_client::ClientError>) -> String {
    let (c, m) = code(r);
    assert_eq!(c, Code::InvalidArgument, "{m}");
    assert!(m.contains("nothing was stored"), "{m}");
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploads_are_refused_as_they_arrive_unless_they_are_what_their_kind_says() {
    let s = server(Quota::default(), 1).await;
    let alice = connect(&s, ALICE).await;
    let (params, keys, session) = small_ckks(&alice).await;
    let stored = alice.list().await.unwrap();
    let enc = Encoder::new(&params);
    let values = random_values(8);
    let encrypted = || {
        keys.encrypt(
            &enc.encode_real(&values, params.max_level(), params.default_scale())
                .unwrap(),
        )
        .unwrap()
        .to_bytes()
    };
    let ct = encrypted();
    let ckks_ct = rpc::object_kind_name(ObjectKind::CkksCiphertext);

    // Random bytes announced as a ciphertext.
    let m = not_what_it_says(
        alice
            .upload(ckks_ct, Arc::new(random_bytes(ct.len())))
            .await,
    );
    assert!(m.contains("HECL"), "{m}");
    // A ciphertext announced as another kind, CKKS or TFHE.
    let m = not_what_it_says(alice.upload("ckks.plaintext", Arc::new(ct.clone())).await);
    assert!(m.contains("CkksCiphertext"), "{m}");
    not_what_it_says(alice.upload("ckks.galois_key", Arc::new(ct.clone())).await);
    let m = not_what_it_says(alice.upload("tfhe.uint", Arc::new(ct.clone())).await);
    assert!(m.contains("HECT"), "{m}");
    // Cut short, or with bytes after its end: its header (of this tenant's
    // session parameters) says how long it is.
    for len in [ct.len() - 1000, ct.len() - 1, 64, 10] {
        let m = not_what_it_says(alice.upload(ckks_ct, Arc::new(ct[..len].to_vec())).await);
        assert!(m.contains("length") || m.contains("truncated"), "{m}");
    }
    let mut long = ct.clone();
    long.extend_from_slice(&[0; 16]);
    let m = not_what_it_says(alice.upload(ckks_ct, Arc::new(long)).await);
    assert!(m.contains("length"), "{m}");
    // A TFHE integer whose items end before its last byte.
    let mut tfhe = b"HECT".to_vec();
    tfhe.extend_from_slice(&hecloud_protocol::object::TFHE_FORMAT_VERSION.to_le_bytes());
    tfhe.extend_from_slice(&[ObjectKind::TfheUint as u8, 0]);
    tfhe.extend_from_slice(&hecloud_protocol::TfheParamSpec::Message2Carry2.hash());
    tfhe.extend_from_slice(&[0; 16]); // key id
    tfhe.extend_from_slice(&2u32.to_le_bytes());
    for item in [&b"abc"[..], &b"defgh"[..]] {
        tfhe.extend_from_slice(&(item.len() as u32).to_le_bytes());
        tfhe.extend_from_slice(item);
    }
    let m = not_what_it_says(
        alice
            .upload("tfhe.uint", Arc::new(tfhe[..tfhe.len() - 2].to_vec()))
            .await,
    );
    assert!(m.contains("TFHE item"), "{m}");
    tfhe.push(0);
    not_what_it_says(alice.upload("tfhe.uint", Arc::new(tfhe)).await);
    // Nothing of them is stored, listed or pending.
    assert_eq!(alice.list().await.unwrap(), stored);

    // The resumable path checks the same: refused at its first part, the
    // upload is dropped.
    let junk = Arc::new(random_bytes(ct.len()));
    let h = rpc::UploadHeader {
        upload_id: "junk-resumable-upload-01".into(),
        kind: ckks_ct.into(),
        total_bytes: junk.len() as u64,
        blake3: blake3::hash(&junk).as_bytes().to_vec(),
    };
    not_what_it_says(
        alice
            .upload(&h.kind, junk.clone())
            .header(h.clone())
            .stop_after(20_000)
            .await,
    );
    assert_eq!(alice.upload_offset(&h.upload_id).await.unwrap(), 0);
    // Bytes held from an interrupted attempt are checked again when it
    // resumes (here changed behind the server's back, as bytes accepted
    // before these checks existed would be).
    let ct2 = Arc::new(encrypted());
    let mut h = rpc::UploadHeader {
        upload_id: "ckks-resumable-upload-01".into(),
        kind: ckks_ct.into(),
        total_bytes: ct2.len() as u64,
        blake3: blake3::hash(&ct2).as_bytes().to_vec(),
    };
    let (c, m) = code(
        alice
            .upload(&h.kind, ct2.clone())
            .header(h.clone())
            .stop_after(20_000)
            .await,
    );
    assert_eq!(c, Code::InvalidArgument, "{m}");
    assert!(m.contains("resume from"), "{m}");
    let part = s
        .dir
        .path()
        .join("uploads/alice")
        .join(format!("{}.part", h.upload_id));
    let held = std::fs::read(&part).unwrap();
    let mut forged = held.clone();
    forged[..4].copy_from_slice(b"JUNK");
    std::fs::write(&part, &forged).unwrap();
    let have = alice.upload_offset(&h.upload_id).await.unwrap();
    assert_eq!(have, 20_000);
    not_what_it_says(
        alice
            .upload(&h.kind, ct2.clone())
            .header(h.clone())
            .from_offset(have)
            .await,
    );
    assert_eq!(alice.upload_offset(&h.upload_id).await.unwrap(), 0);
    assert_eq!(alice.list().await.unwrap(), stored);
    // Interrupted and resumed as it should be, it is stored.
    h.upload_id = "ckks-resumable-upload-02".into();
    let (c, m) = code(
        alice
            .upload(&h.kind, ct2.clone())
            .header(h.clone())
            .stop_after(20_000)
            .await,
    );
    assert_eq!(c, Code::InvalidArgument, "{m}");
    let have = alice.upload_offset(&h.upload_id).await.unwrap();
    let resumed = alice
        .upload(&h.kind, ct2.clone())
        .header(h.clone())
        .from_offset(have)
        .await
        .unwrap();
    assert_eq!(resumed.object_id, ObjectId::of(&ct2).to_hex());

    // The ciphertext as it is: accepted, and its job computes.
    let o = alice.upload(ckks_ct, Arc::new(ct.clone())).await.unwrap();
    assert_eq!(o.kind, ckks_ct);
    let want = values.iter().sum::<f64>() / values.len() as f64;
    for id in [&o.object_id, &resumed.object_id] {
        let job =
            workload::statistics_graph(session, ObjectId::from_hex(id).unwrap(), values.len());
        let done = workload::run_job(&alice, &job).await.unwrap();
        let out = workload::output(&alice, &done, "mean").await.unwrap();
        let mean = first_slot(&keys, &out);
        assert!((mean - want).abs() < 1e-3, "mean {mean} vs {want}");
    }
    s.server.stop().await.unwrap();
}
