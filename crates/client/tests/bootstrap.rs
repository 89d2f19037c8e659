//! Bootstrapping through the service: a bootstrappable key folder uploaded
//! as it is (evaluation keys, encapsulation keys, the session spec), and a
//! job deeper than its levels run with no key holder online, the server
//! planning the bootstraps itself.

mod common;

use std::sync::Arc;

use common::*;
use hecloud_ckks::boot::BootPreset;
use hecloud_client::keys::{self, BootOptions, KeyDir, RefreshOptions};
use hecloud_protocol::rpc::{JOB_KIND_GRAPH, JobState};
use hecloud_protocol::{Graph, JobSubmission, Message, ObjectId};
use hecloud_server::Quota;

/// `x` encrypted with `dir`, squared `times` times by a job on the server
/// (no key holder online: it bootstraps where the levels run out), and
/// decrypted.
async fn square_on_the_server(
    client: &hecloud_client::Client,
    dir: &KeyDir,
    x: &[f64],
    times: usize,
) -> Vec<f64> {
    let input = client
        .upload("ckks.ciphertext", Arc::new(dir.encrypt(x).unwrap()))
        .await
        .unwrap();
    let mut g = Graph::new();
    let mut y = g.input(0);
    for _ in 0..times {
        let m = g.mul(y, y);
        y = g.rescale(m);
    }
    g.output("y", y);
    let job = JobSubmission {
        session: dir.session().unwrap(),
        graph: g,
        inputs: vec![ObjectId::from_hex(&input.object_id).unwrap()],
    };
    let j = client
        .submit(JOB_KIND_GRAPH, job.encode(), "")
        .await
        .unwrap();
    let j = client.wait(&j.job_id, &|_| {}).await.unwrap();
    assert_eq!(j.state, JobState::Succeeded as i32, "{j:?}");
    let out = client.job_output(&j.outputs[0], None).await.unwrap();
    dir.decrypt(&out).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deep_job_is_bootstrapped_by_the_server_when_no_key_holder_is_online() {
    let setup = server(Quota::default(), 1).await;
    let client = connect(&setup, ALICE).await;
    let folder = tempfile::tempdir().unwrap();
    let report = keys::boot_keygen(
        folder.path(),
        BootPreset::TestN12,
        &[],
        &RefreshOptions::default(),
        &BootOptions::default(),
    )
    .unwrap();
    let names: Vec<String> = report
        .files
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n == "encaps-down.key"), "{names:?}");
    assert!(names.iter().any(|n| n == "encaps-up.key"), "{names:?}");
    let dir = KeyDir::open(folder.path()).unwrap();
    assert_eq!(dir.encrypt_level, BootPreset::TestN12.output_level());
    for (path, kind) in dir.uploads().unwrap() {
        client
            .upload(kind, Arc::new(std::fs::read(&path).unwrap()))
            .await
            .unwrap();
    }
    // Values near 1, so that x^64 stays in range.
    let x: Vec<f64> = random_values(64)
        .iter()
        .map(|v| 0.975 + 0.0025 * v)
        .collect();
    // Six squarings on three levels: two bootstraps, planned by the server.
    let y = square_on_the_server(&client, &dir, &x, 6).await;
    // Each bootstrap of near-constant slots is low by about 1e-4 (EvalMod's
    // sine), and later squarings multiply it: see boot_exec.rs.
    for (v, got) in x.iter().zip(&y) {
        let want = v.powi(64);
        assert!((want - got).abs() / want < 3e-3, "{want} vs {got}");
    }
}

/// A sparse bootstrappable folder (`BootOptions::slots`): the server
/// bootstraps 256-slot ciphertexts with the sparse circuit the session
/// names, and the folder encodes and decodes 256 slots. Random values
/// against their plaintext square after two bootstraps; a vector longer
/// than the slots is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sparse_bootstrappable_folder_is_bootstrapped_at_its_slots() {
    let setup = server(Quota::default(), 1).await;
    let client = connect(&setup, ALICE).await;
    let folder = tempfile::tempdir().unwrap();
    keys::boot_keygen(
        folder.path(),
        BootPreset::TestN12,
        &[],
        &RefreshOptions::default(),
        &BootOptions {
            prefer_over_refresh: true,
            slots: Some(256),
        },
    )
    .unwrap();
    let dir = KeyDir::open(folder.path()).unwrap();
    assert_eq!(dir.slots, 256);
    assert!(dir.encrypt(&random_values(257)).is_err());
    for (path, kind) in dir.uploads().unwrap() {
        client
            .upload(kind, Arc::new(std::fs::read(&path).unwrap()))
            .await
            .unwrap();
    }
    // random_values is uniform in ±10: here 0.1 to 0.9.
    let x: Vec<f64> = random_values(256).iter().map(|v| 0.5 + 0.04 * v).collect();
    // Four squarings on three levels: at least one bootstrap.
    let y = square_on_the_server(&client, &dir, &x, 4).await;
    assert_eq!(y.len(), 256);
    for (v, got) in x.iter().zip(&y) {
        let want = v.powi(16);
        assert!((want - got).abs() < 1e-3, "{want} vs {got}");
    }
}
