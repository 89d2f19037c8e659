//! The service end to end over TLS on loopback: uploads and resumes,
//! malformed input, tenant isolation, quotas, jobs, callbacks, and 16
//! concurrent clients on the demo workload.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hecloud_bench::workload;
use hecloud_ckks::{CkksParameters, Encoder, KeySet};
use hecloud_client::Client;
use hecloud_protocol::rpc::{self, JobState, UploadChunk, UploadHeader};
use hecloud_protocol::{Message, ObjectId, ObjectKind};
use hecloud_server::Quota;
use tonic::Code;

mod common;

use common::{
    ALICE, BOB, code, connect, first_slot, random_bytes, random_values, server, small_ckks,
};

fn header(bytes: &[u8], kind: &str, id: &str) -> UploadHeader {
    UploadHeader {
        upload_id: id.into(),
        kind: kind.into(),
        total_bytes: bytes.len() as u64,
        blake3: blake3::hash(bytes).as_bytes().to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upload_resume_download_and_isolation() {
    let s = server(Quota::default(), 2).await;
    let alice = connect(&s, ALICE).await;
    let bob = connect(&s, BOB).await;
    assert_eq!(alice.info().await.unwrap().tenant, "alice");
    assert_eq!(bob.info().await.unwrap().tenant, "bob");

    // A multi-chunk object, interrupted after ~40% and resumed.
    let data = Arc::new(random_bytes(3_000_000 + 17));
    let h = header(&data, rpc::OPAQUE_KIND, "resume-test-upload-0001");
    let r = alice
        .upload(&h.kind, data.clone())
        .header(h.clone())
        .stop_after(1_200_000)
        .await;
    let (c, m) = code(r);
    assert_eq!(c, Code::InvalidArgument, "{m}");
    assert!(m.contains("resume from"), "{m}");
    let have = alice
        .upload_offset("resume-test-upload-0001")
        .await
        .unwrap();
    assert_eq!(have, 1_200_000);
    // Resuming at a wrong offset is refused with the offset to use.
    let (c, m) = code(
        alice
            .upload(&h.kind, data.clone())
            .header(h.clone())
            .from_offset(5)
            .await,
    );
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("1200000"), "{m}");
    let o = alice
        .upload(&h.kind, data.clone())
        .header(h.clone())
        .from_offset(have)
        .await
        .unwrap();
    assert_eq!(o.object_id, blake3::hash(&data).to_hex().as_str());
    assert_eq!(o.size, data.len() as u64);
    let back = alice.download(&o.object_id, None).await.unwrap();
    assert_eq!(&back, &*data);
    // The SDK's own upload of the same content is deduplicated.
    let again = alice.upload(rpc::OPAQUE_KIND, data.clone()).await.unwrap();
    assert_eq!(again.object_id, o.object_id);

    // Bob sees nothing of Alice's.
    let (c, _) = code(bob.download(&o.object_id, None).await);
    assert_eq!(c, Code::NotFound);
    assert!(bob.list().await.unwrap().is_empty());
    let (c, _) = code(bob.delete(&o.object_id).await);
    assert_eq!(c, Code::NotFound);
    assert_eq!(
        bob.upload_offset("resume-test-upload-0001").await.unwrap(),
        0
    );
    // Nor can he use it in a job.
    let mut g = hecloud_protocol::Graph::new();
    let x = g.input(0);
    g.output("x", x);
    let job = hecloud_protocol::JobSubmission {
        session: ObjectId::of(b"no such session"),
        graph: g,
        inputs: vec![ObjectId::from_hex(&o.object_id).unwrap()],
    };
    let (c, m) = code(bob.submit(rpc::JOB_KIND_GRAPH, job.encode(), "").await);
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("not found"), "{m}");
    // Alice's job ids are invisible to Bob.
    let _session = alice
        .open_session(
            &[rpc::CALLBACK_ECHO],
            Arc::new(|_, p: &[u8]| Ok(p.to_vec())),
        )
        .await
        .unwrap();
    let j = alice
        .submit(rpc::JOB_KIND_ECHO, b"ping".to_vec(), "")
        .await
        .unwrap();
    let (c, _) = code(bob.job(&j.job_id).await);
    assert_eq!(c, Code::NotFound);
    let (c, _) = code(bob.cancel(&j.job_id).await);
    assert_eq!(c, Code::NotFound);
    // The echo job calls Alice's key holder back over her session stream.
    let done = alice.wait(&j.job_id, &|_| {}).await.unwrap();
    assert_eq!(done.state, JobState::Succeeded as i32, "{}", done.error);
    let reply = alice
        .download(&done.outputs[0].object_id, None)
        .await
        .unwrap();
    assert_eq!(reply, b"ping");
    // Bob has no key holder connected: his echo job fails with a reason.
    let j = bob
        .submit(rpc::JOB_KIND_ECHO, b"ping".to_vec(), "")
        .await
        .unwrap();
    let done = bob.wait(&j.job_id, &|_| {}).await.unwrap();
    assert_eq!(done.state, JobState::Failed as i32);
    assert!(
        done.error.contains("no key-holder session"),
        "{}",
        done.error
    );

    // Deleting leaves nothing to download.
    alice.delete(&o.object_id).await.unwrap();
    let (c, _) = code(alice.download(&o.object_id, None).await);
    assert_eq!(c, Code::NotFound);
    s.server.stop().await.unwrap();
}

/// Bytes made on demand, as a serializer would, counting the bytes made.
struct Made {
    data: Vec<u8>,
    made: std::sync::atomic::AtomicU64,
}

impl Made {
    fn new(data: &[u8]) -> Arc<Self> {
        Arc::new(Self {
            data: data.to_vec(),
            made: 0.into(),
        })
    }
}

impl hecloud_client::ObjectSource for Made {
    fn byte_len(&self) -> u64 {
        self.data.len() as u64
    }

    fn write_at(&self, offset: u64, dst: &mut [u8]) {
        let at = offset as usize;
        dst.copy_from_slice(&self.data[at..at + dst.len()]);
        self.made.fetch_add(dst.len() as u64, Ordering::Relaxed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streamed_uploads_are_hashed_by_the_server_and_resume() {
    let s = server(Quota::default(), 2).await;
    let alice = connect(&s, ALICE).await;
    let data = random_bytes(1_000_000 + 3);

    // Made as it is sent, chunk by chunk (64 KiB here), each byte once.
    let src = Made::new(&data);
    let o = alice.upload(rpc::OPAQUE_KIND, src.clone()).await.unwrap();
    assert_eq!(o.object_id, blake3::hash(&data).to_hex().as_str());
    assert_eq!(src.made.load(Ordering::Relaxed), data.len() as u64);
    assert_eq!(alice.download(&o.object_id, None).await.unwrap(), data);
    // Sent again: with no hash announced, the server cannot skip it, and it
    // stores the same object.
    let again = alice
        .upload(rpc::OPAQUE_KIND, Made::new(&data))
        .await
        .unwrap();
    assert_eq!(again.object_id, o.object_id);
    assert_eq!(alice.list().await.unwrap().len(), 1);

    // Resumed after an interruption: the bytes the server holds are made
    // again to be hashed, not sent.
    let more = random_bytes(500_000);
    let mut h = header(&more, rpc::OPAQUE_KIND, "streamed-resume-test-02");
    h.blake3.clear();
    let (c, m) = code(
        alice
            .upload(&h.kind, Arc::new(more.clone()))
            .header(h.clone())
            .stop_after(200_000)
            .await,
    );
    assert_eq!(c, Code::InvalidArgument, "{m}");
    let sent_before = alice.traffic().0;
    let src = Made::new(&more);
    let o = alice
        .upload(&h.kind, src.clone())
        .header(h.clone())
        .from_offset(200_000)
        .await
        .unwrap();
    assert_eq!(o.object_id, blake3::hash(&more).to_hex().as_str());
    assert_eq!(src.made.load(Ordering::Relaxed), more.len() as u64);
    assert_eq!(alice.traffic().0 - sent_before, 300_000);
    assert_eq!(alice.download(&o.object_id, None).await.unwrap(), more);

    // The wire side: an upload without an announced hash, interrupted and
    // resumed, is stored under the hash of what arrived.
    let other = Arc::new(random_bytes(300_000));
    let mut h = header(&other, rpc::OPAQUE_KIND, "streamed-resume-test-01");
    h.blake3.clear();
    let (c, m) = code(
        alice
            .upload(&h.kind, other.clone())
            .header(h.clone())
            .stop_after(100_000)
            .await,
    );
    assert_eq!(c, Code::InvalidArgument, "{m}");
    let have = alice
        .upload_offset("streamed-resume-test-01")
        .await
        .unwrap();
    assert_eq!(have, 100_000);
    let o = alice
        .upload(&h.kind, other.clone())
        .header(h.clone())
        .from_offset(have)
        .await
        .unwrap();
    assert_eq!(o.object_id, blake3::hash(&other).to_hex().as_str());
    assert_eq!(alice.download(&o.object_id, None).await.unwrap(), *other);
    s.server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_growing_object_uploads_while_it_is_made_and_an_abandoned_one_fails() {
    let s = server(Quota::default(), 2).await;
    let alice = connect(&s, ALICE).await;
    let data = random_bytes(700_000 + 11);
    // Pieces of uneven sizes, some across chunk bounds, appended while the
    // upload waits for them.
    let (object, mut writer) = hecloud_client::GrowingObject::new(data.len() as u64);
    let pieces = data.clone();
    let maker = tokio::spawn(async move {
        let mut at = 0;
        for len in [80, 65_536, 1, 200_000, 99_999].into_iter().cycle() {
            let end = (at + len).min(pieces.len());
            writer.push(pieces[at..end].to_vec()).unwrap();
            at = end;
            if at == pieces.len() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let o = alice
        .upload(rpc::OPAQUE_KIND, object.clone())
        .await
        .unwrap();
    maker.await.unwrap();
    assert_eq!(o.object_id, blake3::hash(&data).to_hex().as_str());
    assert_eq!(alice.download(&o.object_id, None).await.unwrap(), data);

    // A writer dropped half way: the upload fails, it does not wait.
    let (object, mut writer) = hecloud_client::GrowingObject::new(data.len() as u64);
    writer.push(data[..300_000].to_vec()).unwrap();
    let upload = tokio::spawn({
        let alice = alice.clone();
        async move { alice.upload(rpc::OPAQUE_KIND, object).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(writer);
    let e = tokio::time::timeout(Duration::from_secs(30), upload)
        .await
        .expect("the abandoned upload ends")
        .unwrap()
        .unwrap_err();
    assert!(
        e.to_string().contains("abandoned after 300000 of its"),
        "{e}"
    );
    assert_eq!(alice.list().await.unwrap().len(), 1);
    s.server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_and_oversized_input_is_invalid_argument() {
    let quota = Quota {
        max_object_bytes: 1 << 20,
        max_objects: 5,
        max_concurrent_jobs: 1,
        ..Quota::default()
    };
    let s = server(quota, 1).await;
    let alice = connect(&s, ALICE).await;
    let raw = alice.raw();
    let data = Arc::new(random_bytes(10_000));

    // No token / a wrong token.
    let anon = Client::connect(
        &format!("https://localhost:{}", s.server.addr.port()),
        "not-a-valid-token-xx",
        s.server.ca_pem.as_deref(),
    )
    .await
    .unwrap();
    assert_eq!(code(anon.info().await).0, Code::Unauthenticated);
    // Refused before the message is decoded (an interceptor checks the
    // token): a submission of 3 MiB, and a listing, alike.
    let (c, _) = code(anon.submit(rpc::JOB_KIND_GRAPH, vec![7; 3 << 20], "").await);
    assert_eq!(c, Code::Unauthenticated);
    assert_eq!(code(anon.list().await).0, Code::Unauthenticated);

    let cases: Vec<(UploadHeader, &str)> = vec![
        (
            header(&data, "nonsense.kind", "bad-kind-upload-0001"),
            "unknown object kind",
        ),
        (header(&data, rpc::OPAQUE_KIND, "short"), "upload_id"),
        (
            UploadHeader {
                total_bytes: 2 << 20,
                ..header(&data, rpc::OPAQUE_KIND, "too-big-upload-00001")
            },
            "exceeds the limit",
        ),
        (
            UploadHeader {
                blake3: vec![1, 2, 3],
                ..header(&data, rpc::OPAQUE_KIND, "bad-hash-upload-0001")
            },
            "blake3",
        ),
        (
            UploadHeader {
                total_bytes: 0,
                ..header(&data, rpc::OPAQUE_KIND, "empty-upload-0000001")
            },
            "at least one byte",
        ),
    ];
    for (h, why) in cases {
        let (c, m) = code(
            alice
                .upload(&h.kind, data.clone())
                .header(h.clone())
                .from_offset(0)
                .await,
        );
        assert_eq!(c, Code::InvalidArgument, "{why}: {m}");
        assert!(m.contains(why), "{why}: {m}");
    }
    // Content that does not match its announced hash.
    let mut h = header(&data, rpc::OPAQUE_KIND, "hash-mismatch-upload-1");
    h.blake3 = blake3::hash(b"other").as_bytes().to_vec();
    let (c, m) = code(
        alice
            .upload(&h.kind, data.clone())
            .header(h.clone())
            .from_offset(0)
            .await,
    );
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("hash mismatch"), "{m}");
    // The SDK trusts no id its caller computed: the server checks it.
    let wrong = ObjectId::of(b"other");
    let (c, m) = code(
        alice
            .upload(rpc::OPAQUE_KIND, data.clone())
            .hashed(wrong)
            .await,
    );
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("hash mismatch"), "{m}");
    // More bytes than announced.
    let mut h = header(&data, rpc::OPAQUE_KIND, "overlong-upload-00001");
    h.total_bytes = 5_000;
    let (c, m) = code(
        alice
            .upload(&h.kind, data.clone())
            .header(h.clone())
            .from_offset(0)
            .await,
    );
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("more bytes"), "{m}");
    // A stream without a header, an empty stream, a chunk above the limit.
    let s1 = tokio_stream::iter(vec![UploadChunk {
        header: None,
        offset: 0,
        data: vec![1, 2, 3].into(),
    }]);
    let e = raw.clone().upload(s1).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("header"));
    let e = raw
        .clone()
        .upload(tokio_stream::iter(Vec::<UploadChunk>::new()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let big = random_bytes(300 << 10);
    let s2 = tokio_stream::iter(vec![UploadChunk {
        header: Some(header(&big, rpc::OPAQUE_KIND, "big-chunk-upload-0001")),
        offset: 0,
        data: big.clone().into(),
    }]);
    let e = raw.clone().upload(s2).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("chunk of"), "{}", e.message());
    // A malformed session spec is refused at upload.
    let junk = Arc::new(b"HCPR this is not a session".to_vec());
    let (c, m) = code(alice.upload(rpc::SESSION_KIND, junk).await);
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("session spec"), "{m}");
    // Malformed ids.
    assert_eq!(
        code(alice.download("xyz", None).await).0,
        Code::InvalidArgument
    );
    assert_eq!(code(alice.job("not-hex").await).0, Code::InvalidArgument);
    // Job specs: unknown kind, garbage, truncated, random.
    let (c, m) = code(alice.submit("nope.v9", vec![], "").await);
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("unknown job kind"), "{m}");
    let mut g = hecloud_protocol::Graph::new();
    let x = g.input(0);
    g.output("x", x);
    let good = hecloud_protocol::JobSubmission {
        session: ObjectId::of(b"s"),
        graph: g,
        inputs: vec![ObjectId::of(b"i")],
    }
    .encode();
    for cut in [0, 1, 7, good.len() / 2, good.len() - 1] {
        let (c, m) = code(
            alice
                .submit(rpc::JOB_KIND_GRAPH, good[..cut].to_vec(), "")
                .await,
        );
        assert_eq!(c, Code::InvalidArgument, "cut at {cut}: {m}");
    }
    for _ in 0..50 {
        let n = 1 + (random_bytes(1)[0] as usize) * 4;
        let (c, _) = code(alice.submit(rpc::JOB_KIND_GRAPH, random_bytes(n), "").await);
        assert_eq!(c, Code::InvalidArgument);
    }
    let mut flipped = good.clone();
    let last = flipped.len() - 40;
    flipped[last] ^= 0xff;
    let (c, _) = code(alice.submit(rpc::JOB_KIND_GRAPH, flipped, "").await);
    assert_eq!(c, Code::InvalidArgument);

    // Object-count quota (5): the two pending uploads above (the overlong
    // one and the one with a big chunk, both resumable) count too.
    for i in 0..3 {
        let d = Arc::new(random_bytes(100 + i));
        alice.upload(rpc::OPAQUE_KIND, d).await.unwrap();
    }
    let (c, m) = code(
        alice
            .upload(rpc::OPAQUE_KIND, Arc::new(random_bytes(50)))
            .await,
    );
    assert_eq!(c, Code::ResourceExhausted, "{m}");
    // The server is still healthy.
    assert_eq!(alice.info().await.unwrap().tenant, "alice");
    s.server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn job_quota_and_cancellation() {
    let quota = Quota {
        max_object_bytes: 1 << 20,
        max_objects: 100,
        max_concurrent_jobs: 2,
        ..Quota::default()
    };
    let s = server(quota, 1).await;
    let alice = connect(&s, ALICE).await;
    // A key holder that answers only once let go keeps the single worker
    // busy (and j2 queued) until the checks below are done.
    let (let_go, held) = std::sync::mpsc::channel::<()>();
    let held = std::sync::Mutex::new(held);
    let _session = alice
        .open_session(
            &[rpc::CALLBACK_ECHO],
            Arc::new(move |_, p: &[u8]| {
                let _ = held.lock().unwrap().recv_timeout(Duration::from_secs(60));
                Ok(p.to_vec())
            }),
        )
        .await
        .unwrap();
    let j1 = alice
        .submit(rpc::JOB_KIND_ECHO, b"one".to_vec(), "")
        .await
        .unwrap();
    let j2 = alice
        .submit(rpc::JOB_KIND_ECHO, b"two".to_vec(), "ref-2")
        .await
        .unwrap();
    // Idempotent resubmission by client_ref.
    let j2b = alice
        .submit(rpc::JOB_KIND_ECHO, b"two".to_vec(), "ref-2")
        .await
        .unwrap();
    assert_eq!(j2.job_id, j2b.job_id);
    // A third concurrent job exceeds the quota.
    let (c, m) = code(
        alice
            .submit(rpc::JOB_KIND_ECHO, b"three".to_vec(), "")
            .await,
    );
    assert_eq!(c, Code::ResourceExhausted, "{m}");
    // j2 is still queued behind j1: cancel it.
    let c2 = alice.cancel(&j2.job_id).await.unwrap();
    assert_eq!(c2.state, JobState::Cancelled as i32);
    drop(let_go);
    let events = std::sync::Mutex::new(vec![]);
    let d1 = alice
        .wait(&j1.job_id, &|j| events.lock().unwrap().push(j.state))
        .await
        .unwrap();
    assert_eq!(d1.state, JobState::Succeeded as i32, "{}", d1.error);
    assert!(
        events.lock().unwrap().len() >= 2,
        "progress events were streamed"
    );
    let d2 = alice.job(&j2.job_id).await.unwrap();
    assert_eq!(d2.state, JobState::Cancelled as i32);
    assert!(d2.outputs.is_empty());
    s.server.stop().await.unwrap();
}

/// `values` encoded at the top level, encrypted and serialized.
fn encrypted(params: &Arc<CkksParameters>, keys: &KeySet, values: &[f64]) -> Vec<u8> {
    let enc = Encoder::new(params);
    keys.encrypt(
        &enc.encode_real(values, params.max_level(), params.default_scale())
            .unwrap(),
    )
    .unwrap()
    .to_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ckks_graph_jobs_match_plaintext_and_bad_graphs_are_refused() {
    let s = server(Quota::default(), 2).await;
    let alice = connect(&s, ALICE).await;
    let bob = connect(&s, BOB).await;
    let (params, keys, session) = small_ckks(&alice).await;
    let enc = Encoder::new(&params);
    for count in [1usize, 5, 32] {
        let values = random_values(count);
        let ct = keys
            .encrypt(
                &enc.encode_real(&values, params.max_level(), params.default_scale())
                    .unwrap(),
            )
            .unwrap();
        // Serialized as it is sent: stored as its `to_bytes`.
        let info = alice
            .upload("ckks.ciphertext", Arc::new(ct.clone()))
            .await
            .unwrap();
        let ct = ct.to_bytes();
        let id = ObjectId::of(&ct);
        assert_eq!(info.object_id, id.to_hex());
        let job = workload::statistics_graph(session, id, count);
        let done = workload::run_job(&alice, &job).await.unwrap();
        // The small outputs came with the job's final event: the same bytes
        // as stored, and bytes that do not hash to the id are refused.
        for o in &done.outputs {
            assert_eq!(o.data.len() as u64, o.size);
            assert_eq!(alice.download(&o.object_id, None).await.unwrap(), o.data);
            let mut forged = o.clone();
            forged.data[0] ^= 1;
            assert!(matches!(
                alice.job_output(&forged, None).await,
                Err(hecloud_client::ClientError::Integrity(_))
            ));
        }
        // Asked for after it ended, the job's one event carries them too.
        let again = alice.wait(&done.job_id, &|_| {}).await.unwrap();
        assert_eq!(again.outputs, done.outputs);
        let dec = |b: &[u8]| first_slot(&keys, b);
        let mean = dec(&workload::output(&alice, &done, "mean").await.unwrap());
        let var = dec(&workload::output(&alice, &done, "variance").await.unwrap());
        let n = count as f64;
        let pm = values.iter().sum::<f64>() / n;
        let pv = values.iter().map(|x| x * x).sum::<f64>() / n - pm * pm;
        assert!(
            (mean - pm).abs() < 1e-3,
            "count {count}: mean {mean} vs {pm}"
        );
        assert!(
            (var - pv).abs() < 1e-2 * pv.abs().max(1.0),
            "count {count}: var {var} vs {pv}"
        );

        // Bob uploads the same ciphertext bytes but has no such session.
        bob.upload("ckks.ciphertext", Arc::new(ct)).await.unwrap();
        let (c, m) = code(bob.submit(rpc::JOB_KIND_GRAPH, job.encode(), "").await);
        assert_eq!(c, Code::InvalidArgument);
        assert!(m.contains("not found"), "{m}");
    }
    // A graph that needs a rotation key the session lacks is refused up front.
    let values = random_values(4);
    let ct = encrypted(&params, &keys, &values);
    let id = ObjectId::of(&ct);
    alice.upload("ckks.ciphertext", Arc::new(ct)).await.unwrap();
    let mut g = hecloud_protocol::Graph::new();
    let x = g.input(0);
    let r = g.rotate(x, 3);
    g.output("r", r);
    let job = hecloud_protocol::JobSubmission {
        session,
        graph: g,
        inputs: vec![id],
    };
    let (c, m) = code(alice.submit(rpc::JOB_KIND_GRAPH, job.encode(), "").await);
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("graph refused"), "{m}");
    // A job that returns its input as it is, submitted: refused as
    // INVALID_ARGUMENT, with the server's message.
    let refused_identity = async |object_id: &str| {
        let mut g = hecloud_protocol::Graph::new();
        let x = g.input(0);
        g.output("x", x);
        let job = hecloud_protocol::JobSubmission {
            session,
            graph: g,
            inputs: vec![ObjectId::from_hex(object_id).unwrap()],
        };
        let (c, m) = code(alice.submit(rpc::JOB_KIND_GRAPH, job.encode(), "").await);
        assert_eq!(c, Code::InvalidArgument, "{m}");
        m
    };
    // Bytes that are not a ciphertext are refused as they arrive; stored
    // as opaque bytes, they are no job input.
    let junk = Arc::new(random_bytes(5000));
    let (c, m) = code(alice.upload("ckks.ciphertext", junk.clone()).await);
    assert_eq!(c, Code::InvalidArgument, "{m}");
    let o = alice.upload(rpc::OPAQUE_KIND, junk).await.unwrap();
    let m = refused_identity(&o.object_id).await;
    assert!(m.contains("input 0"), "{m}");
    // A ciphertext of this session with a residue out of range in its last
    // limb (128 bits set cover one whole), sent in small chunks: the decoder
    // watching the upload fails mid-stream, and the job's own decode says
    // why.
    let mut bad = encrypted(&params, &keys, &values);
    let at = bad.len() - 24;
    bad[at..at + 16].fill(0xff);
    let o = alice
        .clone()
        .with_chunk_size(7000)
        .upload("ckks.ciphertext", Arc::new(bad))
        .await
        .unwrap();
    let m = refused_identity(&o.object_id).await;
    assert!(m.contains("input 0") && m.contains("range"), "{m}");
    // Once the first job had loaded the session, the next three ciphertexts
    // (count 5 and 32, the rotation input) were decoded as their uploads
    // streamed in, and the jobs above computed correctly on them; the junk
    // and corrupt uploads did not decode and their jobs decoded them again
    // to say why.
    assert_eq!(s.server.inputs_decoded_on_upload(), 3);
    // A ciphertext of another key folder over the same parameters (well
    // formed, so accepted as an upload) is refused at submission, naming
    // the input and the keys: computed, it would decrypt as noise.
    let stranger = KeySet::generate(&params, &[], false).unwrap();
    let o = alice
        .upload(
            "ckks.ciphertext",
            Arc::new(encrypted(&params, &stranger, &values)),
        )
        .await
        .unwrap();
    let m = refused_identity(&o.object_id).await;
    assert!(m.contains("input 0") && m.contains("under key"), "{m}");
    let _ = ObjectKind::CkksCiphertext;
    s.server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_submitted_while_its_input_uploads_starts_once_the_bytes_are_in() {
    let quota = Quota {
        max_concurrent_jobs: 2,
        ..Quota::default()
    };
    let s = server(quota, 2).await;
    let alice = connect(&s, ALICE).await;
    let bob = connect(&s, BOB).await;
    let (params, keys, session) = small_ckks(&alice).await;
    let values = random_values(8);
    let ct = encrypted(&params, &keys, &values);
    let id = ObjectId::of(&ct);
    let job = workload::statistics_graph(session, id, values.len());

    // Every byte but the last thousand is sent; the stream stays open.
    let mut h = header(&ct, "ckks.ciphertext", "arriving-input-test-01");
    h.blake3.clear();
    let cut = ct.len() - 1000;
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    for (i, piece) in ct[..cut].chunks(32 << 10).enumerate() {
        tx.send(UploadChunk {
            header: (i == 0).then(|| h.clone()),
            offset: (i * (32 << 10)) as u64,
            data: piece.to_vec().into(),
        })
        .await
        .unwrap();
    }
    let mut raw = alice.raw();
    let upload = tokio::spawn(async move {
        raw.upload(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
    });
    let submit = alice.submit_awaiting_inputs(
        rpc::JOB_KIND_GRAPH,
        job.encode(),
        "",
        Duration::from_secs(20),
    );
    tokio::pin!(submit);
    // Bob's view does not hold Alice's object, arriving or not.
    let (c, m) = code(
        bob.submit_awaiting_inputs(
            rpc::JOB_KIND_GRAPH,
            job.encode(),
            "",
            Duration::from_millis(300),
        )
        .await,
    );
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("not found"), "{m}");
    // Not accepted before the input is in.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut submit)
            .await
            .is_err()
    );
    // As many may wait as jobs may be in flight (two here).
    let second = {
        let (alice, spec) = (alice.clone(), job.encode());
        tokio::spawn(async move {
            alice
                .submit_awaiting_inputs(rpc::JOB_KIND_GRAPH, spec, "", Duration::from_secs(20))
                .await
        })
    };
    // Refused once both wait (the server's count, polled).
    let t = std::time::Instant::now();
    while s.server.waiting_submissions("alice") < 2 {
        assert!(t.elapsed() < Duration::from_secs(20), "never waited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (c, m) = code(
        alice
            .submit_awaiting_inputs(
                rpc::JOB_KIND_GRAPH,
                job.encode(),
                "",
                Duration::from_secs(20),
            )
            .await,
    );
    assert_eq!(c, Code::ResourceExhausted, "{m}");
    tx.send(UploadChunk {
        header: None,
        offset: cut as u64,
        data: ct[cut..].to_vec().into(),
    })
    .await
    .unwrap();
    drop(tx);
    let info = submit.await.unwrap();
    let stored = upload.await.unwrap().unwrap().into_inner();
    assert_eq!(stored.object_id, id.to_hex());
    let second = second.await.unwrap().unwrap();
    let again = alice.wait(&second.job_id, &|_| {}).await.unwrap();
    assert_eq!(again.state, JobState::Succeeded as i32, "{}", again.error);
    let done = alice.wait(&info.job_id, &|_| {}).await.unwrap();
    assert_eq!(done.state, JobState::Succeeded as i32, "{}", done.error);
    assert_eq!(again.outputs, done.outputs);
    let out = workload::output(&alice, &done, "mean").await.unwrap();
    let mean = first_slot(&keys, &out);
    let want = values.iter().sum::<f64>() / values.len() as f64;
    assert!((mean - want).abs() < 1e-3, "mean {mean} vs {want}");

    // An input that never comes is refused once the wait is over; without
    // a wait, at once.
    let never = workload::statistics_graph(session, ObjectId::of(b"never sent"), 8).encode();
    let t = std::time::Instant::now();
    let (c, m) = code(
        alice
            .submit_awaiting_inputs(
                rpc::JOB_KIND_GRAPH,
                never.clone(),
                "",
                Duration::from_millis(300),
            )
            .await,
    );
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("not found"), "{m}");
    assert!(t.elapsed() >= Duration::from_millis(300));
    let (c, _) = code(alice.submit(rpc::JOB_KIND_GRAPH, never, "").await);
    assert_eq!(c, Code::InvalidArgument);
    s.server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_clients_run_the_demo_workload() {
    let s = server(
        Quota {
            max_object_bytes: 1 << 30,
            max_objects: 10_000,
            max_concurrent_jobs: 64,
            ..Quota::default()
        },
        2,
    )
    .await;
    let setup = connect(&s, ALICE).await;
    // One key holder's sessions (as for 16 clients of one tenant): CKKS
    // (128-bit preset N13) and TFHE.
    let ck = Arc::new(
        workload::ckks_setup(
            &setup,
            hecloud_ckks::Preset::N13,
            &workload::sum_rotations(64),
        )
        .await
        .unwrap(),
    );
    let tf = Arc::new(workload::tfhe_setup(&setup).await.unwrap());
    let mut tasks = vec![];
    for i in 0..16 {
        let c = connect(&s, ALICE).await;
        let (ck, tf) = (ck.clone(), tf.clone());
        tasks.push(tokio::spawn(async move {
            let values = random_values(10 + 3 * i);
            let a = workload::ckks_statistics(&c, &ck, &values).await?;
            let b = workload::tfhe_compare(&c, &tf, 4).await?;
            let d = workload::tfhe_sum(&c, &tf, 2, 3).await?;
            Ok::<_, hecloud_client::ClientError>([a, b, d])
        }));
    }
    let mut errors = vec![];
    for t in tasks {
        match t.await.unwrap() {
            Ok(steps) => {
                for s in steps {
                    if !s.ok {
                        errors.push(format!("{}: {}", s.name, s.detail));
                    }
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    assert!(errors.is_empty(), "{errors:?}");
    s.server.stop().await.unwrap();
}
