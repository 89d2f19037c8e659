//! Refresh through the service: the client answers the server's refresh
//! requests on its key-holder session while a job runs; a missing, silent,
//! refusing or lying key holder fails the job with a reason, the server
//! stays up and the job can be submitted again.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use hecloud_ckks::params::test_literal;
use hecloud_ckks::{CkksParameters, Encoder, KeySet};
use hecloud_client::Client;
use hecloud_protocol::refresh::{CALLBACK_REFRESH, RefreshReply, RefreshResponder};
use hecloud_protocol::rpc::{self, JOB_KIND_GRAPH, JobState};
use hecloud_protocol::{
    CkksParamSpec, Graph, JobSubmission, Message, ObjectId, ParamSpec, RefreshSpec, SessionSpec,
};
use hecloud_server::Quota;

struct Session {
    params: Arc<CkksParameters>,
    keys: KeySet,
    id: ObjectId,
}

/// A small CKKS session whose refresh part names the public key.
async fn refresh_session(client: &Client) -> Session {
    session_of(client, 11, 4).await
}

/// A CKKS session of N = 2^log_n and `levels` levels whose refresh part
/// names the public key.
async fn session_of(client: &Client, log_n: u32, levels: usize) -> Session {
    let lit = test_literal(log_n, levels);
    let params = CkksParameters::new_insecure_for_tests(lit.clone(), 45).unwrap();
    let keys = KeySet::generate(&params, &[], false).unwrap();
    let relin = keys.evaluation_keys().relin.unwrap().to_bytes(true);
    let pk = keys.public_key().to_bytes();
    client
        .upload("ckks.relin_key", Arc::new(relin.clone()))
        .await
        .unwrap();
    client
        .upload("ckks.public_key", Arc::new(pk.clone()))
        .await
        .unwrap();
    let spec = SessionSpec {
        params: ParamSpec {
            ckks: Some(CkksParamSpec::from_literal(&lit, 45)),
            tfhe: None,
        },
        relin_key: Some(ObjectId::of(&relin)),
        refresh: Some(RefreshSpec {
            ckks_public_key: Some(ObjectId::of(&pk)),
            ..RefreshSpec::default()
        }),
        ..SessionSpec::default()
    };
    client
        .upload(rpc::SESSION_KIND, Arc::new(spec.encode()))
        .await
        .unwrap();
    Session {
        params,
        keys,
        id: spec.id(),
    }
}

fn responder(s: &Session) -> Arc<RefreshResponder> {
    let sk = hecloud_rlwe::SecretKey::from_coefficients(
        s.params.rlwe(),
        &s.keys.secret_key().export_coefficients(),
    )
    .unwrap();
    Arc::new(RefreshResponder::new().with_ckks(s.params.clone(), sk))
}

/// Uploads x encrypted at level 2: the object id.
async fn upload_at_level_2(client: &Client, s: &Session, x: &[f64]) -> ObjectId {
    let pt = Encoder::new(&s.params)
        .encode_real(x, 2, s.params.default_scale())
        .unwrap();
    let ct = s.keys.encrypt(&pt).unwrap().to_bytes();
    let o = client
        .upload("ckks.ciphertext", Arc::new(ct))
        .await
        .unwrap();
    ObjectId::from_hex(&o.object_id).unwrap()
}

/// Uploads x at level 2 and returns the job x ↦ refresh(x)² at level 4.
async fn square_job(client: &Client, s: &Session, x: &[f64]) -> JobSubmission {
    let input = upload_at_level_2(client, s, x).await;
    let mut g = Graph::new();
    let i = g.input(0);
    let r = g.refresh(i, 4);
    let m = g.mul(r, r);
    let y = g.rescale(m);
    g.output("y", y);
    JobSubmission {
        session: s.id,
        graph: g,
        inputs: vec![input],
    }
}

async fn run(client: &Client, job: &JobSubmission) -> rpc::JobInfo {
    let j = client
        .submit(JOB_KIND_GRAPH, job.encode(), "")
        .await
        .unwrap();
    client.wait(&j.job_id, &|_| {}).await.unwrap()
}

fn failed_with(j: &rpc::JobInfo, what: &str) {
    assert_eq!(j.state, JobState::Failed as i32, "{j:?}");
    assert!(j.error.contains(what), "error {:?} lacks {what:?}", j.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_refreshes_through_its_key_holder_and_every_failure_has_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), Quota::default(), 2);
    cfg.refresh_wait_secs = 2;
    let server = hecloud_server::start(cfg).await.unwrap();
    let setup = Setup { server, dir };
    let client = connect(&setup, ALICE).await;
    let s = refresh_session(&client).await;
    let x = [0.5, -1.5, 3.0];
    let job = square_job(&client, &s, &x).await;

    // No key holder: the job fails, nothing is stored.
    let j = run(&client, &job).await;
    failed_with(&j, "no key-holder session answers `refresh`");
    assert!(j.outputs.is_empty());

    // A key holder that never answers within the wait.
    let silent = client
        .open_session(
            &[CALLBACK_REFRESH],
            Arc::new(|_, _: &[u8]| {
                std::thread::sleep(Duration::from_secs(3));
                Err("too late".into())
            }),
        )
        .await
        .unwrap();
    failed_with(&run(&client, &job).await, "did not answer within");
    drop(silent);

    // A key holder that refuses (it serves other jobs only).
    let picky = Arc::new(RefreshResponder::new().only_named_jobs());
    let h = client.serve_refreshes(picky).await.unwrap();
    failed_with(&run(&client, &job).await, "does not serve");
    drop(h);

    // A key holder whose answer does not match the request.
    let honest = responder(&s);
    let liar = client
        .open_session(
            &[CALLBACK_REFRESH],
            Arc::new(move |_, req: &[u8]| {
                let reply = honest.answer(req).map_err(|e| e.to_string())?;
                let mut r = RefreshReply::decode(&reply).unwrap();
                r.request_id[0] ^= 1;
                Ok(r.encode())
            }),
        )
        .await
        .unwrap();
    failed_with(&run(&client, &job).await, "does not match the request");
    drop(liar);

    // The same job, submitted again with an honest key holder, succeeds.
    let holder = responder(&s);
    let h = client.serve_refreshes(holder.clone()).await.unwrap();
    let j = run(&client, &job).await;
    drop(h);
    assert_eq!(j.state, JobState::Succeeded as i32, "{j:?}");
    let out = client.job_output(&j.outputs[0], None).await.unwrap();
    let ct = hecloud_rlwe::Ciphertext::from_bytes(s.params.rlwe(), &out).unwrap();
    assert_eq!(ct.level(), 3);
    let y = Encoder::new(&s.params)
        .decode_real(&s.keys.decrypt(&ct).unwrap())
        .unwrap();
    for (a, b) in x.iter().zip(&y) {
        assert!((a * a - b).abs() < 1e-6, "{a}² vs {b}");
    }
    assert_eq!(holder.stats().ciphertexts, 1);

    // A graph with no refresh node, deeper than the levels left: the server
    // plans the refreshes itself.
    // Values in [−1, 1], so that their 16th powers stay in range.
    let x = [0.5, -0.9, 0.99];
    let mut deep = square_job(&client, &s, &x).await;
    let mut g = Graph::new();
    let mut y = g.input(0);
    for _ in 0..4 {
        let m = g.mul(y, y);
        y = g.rescale(m);
    }
    g.output("y", y);
    deep.graph = g;
    let h = client.serve_refreshes(holder.clone()).await.unwrap();
    let j = run(&client, &deep).await;
    drop(h);
    assert_eq!(j.state, JobState::Succeeded as i32, "{j:?}");
    let out = client.job_output(&j.outputs[0], None).await.unwrap();
    let ct = hecloud_rlwe::Ciphertext::from_bytes(s.params.rlwe(), &out).unwrap();
    let y = Encoder::new(&s.params)
        .decode_real(&s.keys.decrypt(&ct).unwrap())
        .unwrap();
    for (a, b) in x.iter().zip(&y) {
        assert!(
            (a.powi(16) - b).abs() < 1e-3 * a.powi(16).abs().max(1.0),
            "{a}^16 vs {b}"
        );
    }
    assert!(holder.stats().ciphertexts >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refresh_reply_larger_than_an_upload_chunk_gets_through() {
    // The test server takes upload chunks of 256 KiB, so messages of about
    // 576 KiB; a top-level reply at N = 2^14 with 7 primes is larger.
    let setup = server(Quota::default(), 2).await;
    let client = connect(&setup, ALICE).await;
    let s = session_of(&client, 14, 6).await;
    let input = upload_at_level_2(&client, &s, &[0.25, -0.5]).await;
    let mut g = Graph::new();
    let i = g.input(0);
    let r = g.refresh(i, 6);
    g.output("r", r);
    let job = JobSubmission {
        session: s.id,
        graph: g,
        inputs: vec![input],
    };
    let holder = responder(&s);
    let h = client.serve_refreshes(holder.clone()).await.unwrap();
    let j = run(&client, &job).await;
    drop(h);
    assert_eq!(j.state, JobState::Succeeded as i32, "{j:?}");
    assert!(holder.stats().bytes_out > 600 << 10, "{:?}", holder.stats());
    let out = client.job_output(&j.outputs[0], None).await.unwrap();
    let ct = hecloud_rlwe::Ciphertext::from_bytes(s.params.rlwe(), &out).unwrap();
    assert_eq!(ct.level(), 6);
    let y = Encoder::new(&s.params)
        .decode_real(&s.keys.decrypt(&ct).unwrap())
        .unwrap();
    assert!(
        (y[0] - 0.25).abs() < 1e-6 && (y[1] + 0.5).abs() < 1e-6,
        "{:?}",
        &y[..2]
    );
}
