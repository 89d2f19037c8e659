//! BGV end to end through the service: keys made in a key folder (bgv-n13),
//! evaluation keys and ciphertexts uploaded, sums, products, slot sums and
//! comparisons run on the server, results decrypted and checked against
//! plain arithmetic mod t on fresh random inputs; then the refusals, typed
//! and with nothing stored: a graph whose noise budget would run out, a
//! BGV op in a session without BGV, forged and truncated BGV bytes.

mod common;

use std::sync::Arc;

use common::*;
use hecloud_client::bgv;
use hecloud_client::keys::{self, BgvKeyDir};
use hecloud_protocol::rpc;
use hecloud_protocol::{Graph, JobSubmission, Message, ObjectId, ObjectKind};
use hecloud_server::Quota;
use tonic::Code;

fn random(n: usize, below: u64) -> Vec<u64> {
    let mut s = hecloud_math::testing::sampler();
    (0..n).map(|_| s.uniform_mod(below)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bgv_jobs_match_plain_arithmetic_and_bad_input_is_refused() {
    let s = server(Quota::default(), 2).await;
    let c = connect(&s, ALICE).await;
    let dir = tempfile::tempdir().unwrap();
    let r = keys::bgv_keygen(dir.path(), hecloud_bgv::Preset::N13, true).unwrap();
    assert!(keys::is_bgv_dir(dir.path()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("secret.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let kd = BgvKeyDir::open(dir.path()).unwrap();
    for (p, kind) in kd.uploads().unwrap() {
        c.upload(kind, Arc::new(std::fs::read(p).unwrap()))
            .await
            .unwrap();
    }
    let session = kd.session().unwrap();
    assert_eq!(session, r.session);
    let t = kd.t();
    let n = kd.params.n();

    // Integer vectors, uploaded as `bgv.ciphertext` (the kind read from the bytes).
    let (x, y, z) = (random(n, t), random(n, t), random(n, t));
    let (a, b) = (random(n, 2), random(n, 2)); // depth 3: what bgv-n13 gives
    let mut ids = vec![];
    for v in [&x, &y, &z, &a, &b] {
        let ct = kd.encrypt(v).unwrap();
        let kind = hecloud_protocol::object::payload_kind(&ct).unwrap();
        assert_eq!(kind, ObjectKind::BgvCiphertext);
        let o = c
            .upload(rpc::object_kind_name(kind), Arc::new(ct))
            .await
            .unwrap();
        ids.push(ObjectId::from_hex(&o.object_id).unwrap());
    }
    let m = |p: u128| (p % t as u128) as u64;
    let cases: Vec<(&str, Vec<ObjectId>, u64, Vec<u64>)> = vec![
        (
            "bgv-sum",
            ids[..3].to_vec(),
            0,
            (0..n)
                .map(|i| m(x[i] as u128 + y[i] as u128 + z[i] as u128))
                .collect(),
        ),
        (
            "bgv-mul",
            ids[..2].to_vec(),
            0,
            (0..n).map(|i| m(x[i] as u128 * y[i] as u128)).collect(),
        ),
        (
            "bgv-slot-sum",
            ids[..1].to_vec(),
            0,
            vec![m(x.iter().map(|&v| v as u128).sum()); n],
        ),
        (
            "bgv-lt",
            ids[3..].to_vec(),
            2,
            (0..n).map(|i| u64::from(a[i] < b[i])).collect(),
        ),
    ];
    for (op, inputs, bound, want) in cases {
        let job = bgv::graph(session, op, inputs, bound).unwrap();
        let (j, out) = bgv::run(&c, &kd, &job).await.unwrap();
        assert_eq!(out.len(), 1, "{op}");
        assert_eq!(out[0], want, "{op}");
        assert!(j.outputs[0].kind == "bgv.ciphertext", "{op}");
    }
    // A value that does not fit t is a typed error.
    assert!(matches!(
        kd.encrypt(&[t]),
        Err(hecloud_client::ClientError::Invalid(_))
    ));

    let before = c.list().await.unwrap().len();
    // Depth exhausted: x^(2^5) at bgv-n13 (depth 3), refused before it runs.
    let mut g = Graph::new();
    let mut v = g.input(0);
    for _ in 0..5 {
        v = g.bgv_mul(v, v);
    }
    g.output("y", v);
    let job = JobSubmission {
        session,
        graph: g,
        inputs: vec![ids[0]],
    };
    let j = c.submit(rpc::JOB_KIND_GRAPH, job.encode(), "").await;
    let msg = match j {
        Ok(j) => {
            let j = c.wait(&j.job_id, &|_| {}).await.unwrap();
            assert_ne!(j.state, rpc::JobState::Succeeded as i32);
            j.error
        }
        Err(e) => e.to_string(),
    };
    assert!(msg.contains("budget"), "{msg}");

    // Forged and truncated BGV bytes: refused on upload, nothing stored.
    let ct = kd.encrypt(&x[..4]).unwrap();
    let mut forged = ct.clone();
    forged[56..64].copy_from_slice(&0u64.to_le_bytes()); // no factor
    let (st, _) = code(c.upload("bgv.ciphertext", Arc::new(forged)).await);
    assert_eq!(st, Code::InvalidArgument);
    let (st, _) = code(
        c.upload("bgv.ciphertext", Arc::new(ct[..ct.len() - 7].to_vec()))
            .await,
    );
    assert_eq!(st, Code::InvalidArgument);
    let (st, _) = code(c.upload("ckks.ciphertext", Arc::new(ct.clone())).await);
    assert_eq!(st, Code::InvalidArgument);
    assert_eq!(c.list().await.unwrap().len(), before, "nothing stored");
}
