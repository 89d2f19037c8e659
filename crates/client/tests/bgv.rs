//! BGV end to end through the service: keys made in a key folder (bgv-n13),
//! evaluation keys and ciphertexts uploaded, sums, products, slot sums and
//! comparisons run on the server, results decrypted and checked against
//! plain arithmetic mod t on fresh random inputs; then the refusals, typed
//! and with nothing stored: a graph whose noise budget would run out, a
//! BGV op in a session without BGV, forged and truncated BGV bytes. The
//! packed-bit ops on bits-in-slots numbers at bgv-n14 (4-bit numbers and
//! a sum of three 2-bit ones, what its depth allows without a refresh) on
//! edge and random values against plain integers, and the refusals: 16
//! bits (depth 5), anything at bgv-n13, a key folder without the
//! bits-in-slots keys.

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
    let r = keys::bgv_keygen(dir.path(), hecloud_bgv::Preset::N13, true, false).unwrap();
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

    // Deeper than the parameters: x^(2^5) at bgv-n13 (depth 3). The
    // session names its public key for refresh, so the server plans
    // refreshes where the budget runs out: with no key holder online the
    // job fails saying so, nothing half-done stored ...
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
    let j = c
        .submit(rpc::JOB_KIND_GRAPH, job.encode(), "")
        .await
        .unwrap();
    let j = c.wait(&j.job_id, &|_| {}).await.unwrap();
    assert_ne!(j.state, rpc::JobState::Succeeded as i32);
    assert!(j.error.contains("key-holder"), "{}", j.error);
    assert!(j.outputs.is_empty());
    // ... and with the key folder answering (`bgv::run` serves refreshes)
    // it runs.
    let (_, out) = bgv::run(&c, &kd, &job).await.unwrap();
    let want: Vec<u64> = x
        .iter()
        .map(|&v| (0..5).fold(v as u128, |w, _| w * w % t as u128) as u64)
        .collect();
    assert_eq!(out[0][..n], want[..]);

    let before = c.list().await.unwrap().len();
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

/// Submits `job` and returns the server's refusal (on submission or as the
/// job's error).
async fn refusal(c: &hecloud_client::Client, job: &JobSubmission) -> String {
    match c.submit(rpc::JOB_KIND_GRAPH, job.encode(), "").await {
        Ok(j) => {
            let j = c.wait(&j.job_id, &|_| {}).await.unwrap();
            assert_ne!(j.state, rpc::JobState::Succeeded as i32);
            j.error
        }
        Err(e) => e.to_string(),
    }
}

/// A BGV key folder of `preset` (with the bits-in-slots keys when
/// `bits`), its keys uploaded.
async fn bgv_folder(
    c: &hecloud_client::Client,
    preset: hecloud_bgv::Preset,
    bits: bool,
) -> (tempfile::TempDir, BgvKeyDir) {
    let dir = tempfile::tempdir().unwrap();
    keys::bgv_keygen(dir.path(), preset, false, bits).unwrap();
    let kd = BgvKeyDir::open(dir.path()).unwrap();
    for (p, kind) in kd.uploads().unwrap() {
        c.upload(kind, Arc::new(std::fs::read(p).unwrap()))
            .await
            .unwrap();
    }
    (dir, kd)
}

async fn upload_bits(
    c: &hecloud_client::Client,
    kd: &BgvKeyDir,
    v: &num_bigint::BigUint,
    w: usize,
) -> ObjectId {
    let ct = kd.encrypt_bits(v, w).unwrap();
    let o = c.upload("bgv.ciphertext", Arc::new(ct)).await.unwrap();
    ObjectId::from_hex(&o.object_id).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bits_in_slots_jobs_match_plain_integers_and_too_deep_is_refused() {
    use num_bigint::BigUint;
    let s = server(Quota::default(), 2).await;
    let c = connect(&s, ALICE).await;

    // bgv-n14: 6 levels of 36 bits above q_0, 4 products in a row for a
    // packed-bit circuit without a refresh. Width 4: add depth 4, lt and
    // gt 3; a sum of three 2-bit numbers depth 4.
    let (_d14, kd) = bgv_folder(&c, hecloud_bgv::Preset::N14, true).await;
    let session = kd.session().unwrap();
    let w = 4;
    let mut rng = hecloud_math::testing::sampler();
    let mut r = || BigUint::from(rng.uniform_mod(16));
    let same = r();
    let pairs = [
        (0u32.into(), 0u32.into()),
        (15u32.into(), 15u32.into()),
        (0u32.into(), 15u32.into()),
        (15u32.into(), 1u32.into()),
        (same.clone(), same),
        (r(), r()),
        (r(), r()),
    ];
    for (a, b) in pairs {
        let ids = vec![
            upload_bits(&c, &kd, &a, w).await,
            upload_bits(&c, &kd, &b, w).await,
        ];
        let mut g = Graph::new();
        let (x, y) = (g.input(0), g.input(1));
        let outs = [
            g.bgv_bits_add(x, y, w as u32),
            g.bgv_bits_lt(x, y, w as u32),
            g.bgv_bits_gt(x, y, w as u32),
        ];
        for (name, node) in ["add", "lt", "gt"].into_iter().zip(outs) {
            let low = g.bgv_mod_switch(node, 0);
            g.output(name, low);
        }
        let job = JobSubmission {
            session,
            graph: g,
            inputs: ids,
        };
        let (_, out) = bgv::run(&c, &kd, &job).await.unwrap();
        assert_eq!(
            bgv::decode_bits(&out[0], w).unwrap(),
            (&a + &b) % 16u32,
            "{a} + {b}"
        );
        assert_eq!(bgv::decode_bit(&out[1], w).unwrap(), a < b, "{a} < {b}");
        assert_eq!(bgv::decode_bit(&out[2], w).unwrap(), a > b, "{a} > {b}");
    }
    // The client's own graphs, and its decryption of a downloaded result.
    let xs = [3u32, 2, 3].map(BigUint::from);
    let mut ids = vec![];
    for x in &xs {
        ids.push(upload_bits(&c, &kd, x, 2).await);
    }
    let job = bgv::bits_graph(session, "bgv-bits-sum", ids.clone(), 2).unwrap();
    let (j, out) = bgv::run(&c, &kd, &job).await.unwrap();
    assert_eq!(bgv::decode_bits(&out[0], 2).unwrap(), BigUint::from(0u32)); // 8 mod 4
    let bytes = c.job_output(&j.outputs[0], None).await.unwrap();
    assert_eq!(kd.decrypt_bits(&bytes, 2).unwrap(), BigUint::from(0u32));
    let job = bgv::bits_graph(session, "bgv-bits-gt", ids[..2].to_vec(), 2).unwrap();
    let (j, _) = bgv::run(&c, &kd, &job).await.unwrap();
    let bytes = c.job_output(&j.outputs[0], None).await.unwrap();
    assert!(kd.decrypt_bit(&bytes, 2).unwrap());
    // A value too wide for its width; a width past the limit.
    assert!(kd.encrypt_bits(&BigUint::from(4u32), 2).is_err());
    assert!(kd.encrypt_bits(&BigUint::from(4u32), 1025).is_err());

    // 16 bits: lt needs depth 5, refused before it runs, the depths named.
    let before = c.list().await.unwrap().len();
    let (x, y) = (
        upload_bits(&c, &kd, &BigUint::from(5u32), 16).await,
        upload_bits(&c, &kd, &BigUint::from(6u32), 16).await,
    );
    let job = bgv::bits_graph(session, "bgv-bits-lt", vec![x, y], 16).unwrap();
    let msg = refusal(&c, &job).await;
    assert!(
        msg.contains("needs multiplicative depth 5") && msg.contains("allow 4"),
        "{msg}"
    );
    assert_eq!(
        c.list().await.unwrap().len(),
        before + 2,
        "only the inputs stored"
    );

    // bgv-n13 (2 levels of 36 bits): even 2 bits are too deep without a
    // refresh; and a folder without the bits-in-slots keys names the
    // rotation missing.
    for bits in [true, false] {
        let (_d, k13) = bgv_folder(&c, hecloud_bgv::Preset::N13, bits).await;
        let ids = vec![
            upload_bits(&c, &k13, &BigUint::from(1u32), 2).await,
            upload_bits(&c, &k13, &BigUint::from(2u32), 2).await,
        ];
        let job = bgv::bits_graph(k13.session().unwrap(), "bgv-bits-add", ids, 2).unwrap();
        let msg = refusal(&c, &job).await;
        if bits {
            assert!(msg.contains("needs multiplicative depth 2"), "{msg}");
        } else {
            assert!(msg.contains("rotation right by 1"), "{msg}");
        }
    }
}
