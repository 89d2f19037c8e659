//! What the service tests share: a server on loopback with two tenants
//! (TLS with its generated CA, a temporary store), clients of it, and a
//! small CKKS session.

#![allow(dead_code)]

use std::sync::Arc;

use hecloud_ckks::params::test_literal;
use hecloud_ckks::{CkksParameters, Encoder, KeySet};
use hecloud_client::{Client, ClientError, SessionHandle};
use hecloud_protocol::rpc;
use hecloud_protocol::{CkksParamSpec, Message, ObjectId, ParamSpec, SessionSpec};
use hecloud_server::{Quota, RunningServer, ServerConfig, TenantConfig};
use tonic::Code;

/// `n` bytes from the test's replayable random stream
/// (`hecloud_math::testing`: the seed is printed, `HECLOUD_TEST_SEED`
/// replays it).
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rand_core::RngCore::fill_bytes(&mut hecloud_math::testing::rng(), &mut v);
    v
}

/// `count` values in [-10, 10) from the same stream (drawn as
/// `hecloud_bench::workload::random_values` draws them).
pub fn random_values(count: usize) -> Vec<f64> {
    let mut rng = hecloud_math::testing::rng();
    (0..count)
        .map(|_| {
            let x = rand_core::RngCore::next_u64(&mut rng);
            (x >> 11) as f64 / (1u64 << 53) as f64 * 20.0 - 10.0
        })
        .collect()
}

pub const ALICE: &str = "alice-token-0123456789";
pub const BOB: &str = "bob-token-0123456789ab";

pub struct Setup {
    pub server: RunningServer,
    pub dir: tempfile::TempDir,
}

/// The configuration of a test server on `dir`: Alice's token in clear,
/// Bob's as its hash.
pub fn config(dir: &std::path::Path, quota: Quota, workers: usize) -> ServerConfig {
    ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        workers,
        tls: true,
        max_chunk_bytes: 256 << 10,
        allow_insecure_params: true,
        quota,
        tenants: vec![
            TenantConfig {
                name: "alice".into(),
                token: Some(ALICE.into()),
                token_blake3: None,
            },
            TenantConfig {
                name: "bob".into(),
                token: None,
                token_blake3: Some(blake3::hash(BOB.as_bytes()).to_hex().to_string()),
            },
        ],
        ..ServerConfig::default()
    }
}

pub async fn server(quota: Quota, workers: usize) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    Setup {
        server: hecloud_server::start(config(dir.path(), quota, workers))
            .await
            .unwrap(),
        dir,
    }
}

pub async fn connect(s: &Setup, token: &str) -> Client {
    Client::connect(
        &format!("https://localhost:{}", s.server.addr.port()),
        token,
        s.server.ca_pem.as_deref(),
    )
    .await
    .unwrap()
    .with_chunk_size(64 << 10)
}

/// The status code and message of a refusal.
pub fn code<T: std::fmt::Debug>(r: Result<T, ClientError>) -> (Code, String) {
    match r {
        Err(ClientError::Status { code, message }) => (code, message),
        other => panic!("expected a status error, got {other:?}"),
    }
}

/// A small (insecure, test-only) CKKS session with the rotations
/// `1, 2, 4, 8, 16`, uploaded.
pub async fn small_ckks(client: &Client) -> (Arc<CkksParameters>, KeySet, ObjectId) {
    let lit = test_literal(11, 4);
    let params = CkksParameters::new_insecure_for_tests(lit.clone(), 40).unwrap();
    let keys = KeySet::generate(&params, &[1, 2, 4, 8, 16], false).unwrap();
    let ev = keys.evaluation_keys();
    let mut spec = SessionSpec {
        params: ParamSpec {
            ckks: Some(CkksParamSpec::from_literal(&lit, 40)),
            tfhe: None,
        },
        ..SessionSpec::default()
    };
    let relin = ev.relin.as_ref().unwrap().to_bytes(true);
    spec.relin_key = Some(ObjectId::of(&relin));
    client
        .upload("ckks.relin_key", Arc::new(relin))
        .await
        .unwrap();
    for g in ev.galois.elements().collect::<Vec<_>>() {
        let b = ev.galois.get(g).unwrap().to_bytes(true);
        spec.galois_keys.push(ObjectId::of(&b));
        client.upload("ckks.galois_key", Arc::new(b)).await.unwrap();
    }
    client
        .upload(rpc::SESSION_KIND, Arc::new(spec.encode()))
        .await
        .unwrap();
    (params, keys, spec.id())
}

/// The first slot of a downloaded CKKS ciphertext, decrypted with `keys`.
pub fn first_slot(keys: &KeySet, bytes: &[u8]) -> f64 {
    let ct = hecloud_rlwe::Ciphertext::from_bytes(keys.params().rlwe(), bytes).unwrap();
    Encoder::new(keys.params())
        .decode_real(&keys.decrypt(&ct).unwrap())
        .unwrap()[0]
}

/// A key holder that answers every echo callback at once.
pub async fn echo_key_holder(client: &Client) -> SessionHandle {
    client
        .open_session(
            &[rpc::CALLBACK_ECHO],
            Arc::new(|_, p: &[u8]| Ok(p.to_vec())),
        )
        .await
        .unwrap()
}
