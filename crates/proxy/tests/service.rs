//! The proxy's network service on loopback, in front of a real server:
//! plaintext in, plaintext out, checked against plaintext arithmetic on
//! fresh random inputs; tokens, attestation, tampered keys and foreign
//! ciphertexts refused with typed errors while the proxy keeps serving;
//! a job deeper than its parameters refreshed by the proxy (SEV-SNP and TDX
//! test chains); a BGV tenant's
//! integer vectors through the same proxy, checked against plaintext
//! arithmetic mod t, and integers and reals refused for a tenant of the
//! other scheme.

mod crl;
mod snp_chain;
mod tdx_chain;

use std::path::PathBuf;
use std::sync::Arc;

use hecloud_ckks::params::test_literal;
use hecloud_ckks::{CkksParameters, Encoder, KeySet, Preset};
use hecloud_client::Client;
use hecloud_client::keys::{BgvKeyDir, KeyDir, bgv_keygen, keygen};
use hecloud_protocol::Graph;
use hecloud_protocol::rpc::OPAQUE_KIND;
use hecloud_proxy::attest::snp::SnpError;
use hecloud_proxy::attest::{AttestError, Verified, VerifyPolicy};
use hecloud_proxy::service::{DEFAULT_MAX_VECTORS, ErrorKind};
use hecloud_proxy::{
    Attestation, CvmEnclave, Enclave, PlainEnclave, ProxyClient, ProxyClientError, ProxyConfig,
    ProxyTenant, ReportSource, RunInput, RunningProxy, SealedKeyStore, TlsSource,
};
use hecloud_server::{RunningServer, ServerConfig, TenantConfig};
use ring::rand::{SecureRandom, SystemRandom};
use tonic::Code;

const ALICE_SERVER: &str = "alice-server-token-0123";
const BOB_SERVER: &str = "bob-server-token-012345";
const ALICE: &str = "alice-proxy-token-0123";
const BOB: &str = "bob-proxy-token-0123456";
const CAROL_SERVER: &str = "carol-server-token-0123";
const CAROL: &str = "carol-proxy-token-012345";

/// Fresh random integers below `t`, with 0 and t − 1 among them.
fn random_ints(n: usize, t: u64) -> Vec<u64> {
    let mut b = vec![0u8; 8 * n];
    SystemRandom::new().fill(&mut b).unwrap();
    let mut v: Vec<u64> = b
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()) % t)
        .collect();
    v[0] = t - 1;
    v[n / 2] = 0;
    v
}

/// Fresh random reals in [lo, hi).
fn random_reals(n: usize, lo: f64, hi: f64) -> Vec<f64> {
    let mut b = vec![0u8; 8 * n];
    SystemRandom::new().fill(&mut b).unwrap();
    b.chunks(8)
        .map(|c| {
            let u = (u64::from_le_bytes(c.try_into().unwrap()) >> 11) as f64 / (1u64 << 53) as f64;
            lo + u * (hi - lo)
        })
        .collect()
}

fn close(want: &[f64], got: &[f64], tol: f64, what: &str) {
    assert!(got.len() >= want.len(), "{what}: {} values", got.len());
    for (i, (a, b)) in want.iter().zip(got).enumerate() {
        assert!((a - b).abs() < tol, "{what}: slot {i}: {a} vs {b}");
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    server: RunningServer,
    proxy: RunningProxy,
    /// Alice's clear key folder (the test's independent decryptor).
    alice_keys: PathBuf,
    /// Carol's clear BGV key folder (bgv-n13).
    carol_keys: PathBuf,
    enclave: Arc<PlainEnclave>,
}

impl Fixture {
    async fn client(
        &self,
        token: &str,
        allow_unattested: bool,
    ) -> Result<ProxyClient, ProxyClientError> {
        ProxyClient::connect(
            &self.proxy.url(),
            token,
            self.proxy.ca_pem.as_deref(),
            allow_unattested,
        )
        .await
    }

    /// A client verifying the proxy's attestation under `policy`.
    async fn client_with(
        &self,
        token: &str,
        policy: &VerifyPolicy,
    ) -> Result<ProxyClient, ProxyClientError> {
        ProxyClient::connect_with(
            &self.proxy.url(),
            token,
            self.proxy.ca_pem.as_deref(),
            policy,
        )
        .await
    }

    /// Alice's own connection to the server, past the proxy.
    async fn alice_on_server(&self) -> Client {
        Client::connect(
            &format!("https://localhost:{}", self.server.addr.port()),
            ALICE_SERVER,
            self.server.ca_pem.as_deref(),
        )
        .await
        .unwrap()
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }
}

/// The server's configuration: tenants alice and bob, TLS, its files under
/// `dir` (a restart with the same `dir` keeps its objects and certificate).
fn server_config(dir: &std::path::Path, listen: std::net::SocketAddr) -> ServerConfig {
    ServerConfig {
        listen,
        data_dir: dir.join("server"),
        workers: 2,
        tls: true,
        tenants: vec![
            TenantConfig {
                name: "alice".into(),
                token: Some(ALICE_SERVER.into()),
                token_blake3: None,
            },
            TenantConfig {
                name: "bob".into(),
                token: Some(BOB_SERVER.into()),
                token_blake3: None,
            },
            TenantConfig {
                name: "carol".into(),
                token: Some(CAROL_SERVER.into()),
                token_blake3: None,
            },
        ],
        // The bootstrappable folder of the tests is boot-test-n12
        // (insecure, small); every other folder here is a 128-bit preset.
        allow_insecure_params: true,
        ..ServerConfig::default()
    }
}

/// A server with tenants alice and bob, their N = 2^13 CKKS key folders
/// sealed in the proxy's store, carol with a BGV key folder (`bgv-n13`,
/// the smallest BGV preset), and the proxy in front of the server.
async fn fixture() -> Fixture {
    fixture_with(|e| e).await
}

/// [`fixture`] with the proxy's enclave wrapped by `wrap`.
async fn fixture_with(wrap: impl FnOnce(Arc<dyn Enclave>) -> Arc<dyn Enclave>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let server = hecloud_server::start(server_config(dir.path(), "127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();

    let key_file = dir.path().join("sealing.key");
    hecloud_proxy::SealingKey::generate()
        .unwrap()
        .write_file(&key_file)
        .unwrap();
    let enclave = Arc::new(PlainEnclave::from_key_file(&key_file).unwrap());
    let store = SealedKeyStore::new(dir.path().join("store"));
    for tenant in ["alice", "bob"] {
        let clear = dir.path().join(format!("{tenant}-keys"));
        keygen(&clear, Preset::N13, &[]).unwrap();
        store
            .seal_folder_in(enclave.as_ref(), tenant, &clear)
            .unwrap();
    }
    let carol_keys = dir.path().join("carol-keys");
    bgv_keygen(&carol_keys, hecloud_bgv::Preset::N13, false, false).unwrap();
    store
        .seal_folder_in(enclave.as_ref(), "carol", &carol_keys)
        .unwrap();
    let proxy = hecloud_proxy::service::start(
        ProxyConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            server_url: format!("https://localhost:{}", server.addr.port()),
            server_ca_pem: server.ca_pem.clone(),
            store_dir: dir.path().join("store"),
            tls: TlsSource::Generated(dir.path().join("proxy-tls")),
            tenants: vec![
                ProxyTenant::new("alice", ALICE, ALICE_SERVER).unwrap(),
                ProxyTenant::new("bob", BOB, BOB_SERVER).unwrap(),
                ProxyTenant::new("carol", CAROL, CAROL_SERVER).unwrap(),
            ],
            max_vectors: DEFAULT_MAX_VECTORS,
        },
        wrap(enclave.clone() as Arc<dyn Enclave>),
    )
    .await
    .unwrap();
    Fixture {
        enclave,
        alice_keys: dir.path().join("alice-keys"),
        carol_keys,
        dir,
        server,
        proxy,
    }
}

fn refused(r: Result<impl std::fmt::Debug, ProxyClientError>) -> (Option<ErrorKind>, Code, String) {
    match r {
        Err(ProxyClientError::Refused {
            kind,
            code,
            message,
        }) => (kind, code, message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn add_graph() -> Graph {
    let mut g = Graph::new();
    let (a, b) = (g.input(0), g.input(1));
    let s = g.add(a, b);
    g.output("sum", s);
    g
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_adds_fresh_random_inputs_and_the_server_holds_real_ciphertexts() {
    let f = fixture().await;
    let c = f.client(ALICE, true).await.unwrap();
    let n = 1000;
    let (x, y) = (random_reals(n, -10.0, 10.0), random_reals(n, -10.0, 10.0));
    let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| a + b).collect();

    // Plaintext and graph in, plaintext out: one crossing to encrypt both
    // inputs, one to decrypt the output.
    let r = c
        .run(
            vec![RunInput::Values(x.clone()), RunInput::Values(y.clone())],
            &add_graph(),
            0,
        )
        .await
        .unwrap();
    assert_eq!(r.outputs.len(), 1);
    assert_eq!(r.crossings, 2);
    let (name, out_id, got) = &r.outputs[0];
    assert_eq!(name, "sum");
    assert_eq!(got.len(), 4096, "every slot of N = 2^13");
    close(&want, got, 1e-3, "x + y");
    close(&vec![0.0; 4096 - n], &got[n..], 1e-3, "padding");

    // What the server holds are ciphertexts under alice's keys: her own
    // clear key folder decrypts them to the same values.
    let keys = KeyDir::open(&f.alice_keys).unwrap();
    let server = f.alice_on_server().await;
    let x_ct = server.download(&r.input_ids[0], None).await.unwrap();
    assert!(x_ct.len() > 8 * 4096, "{} bytes", x_ct.len());
    close(&x, &keys.decrypt(&x_ct).unwrap(), 1e-3, "x on the server");
    let out_ct = server.download(out_id, None).await.unwrap();
    close(
        &want,
        &keys.decrypt(&out_ct).unwrap(),
        1e-3,
        "x + y on the server",
    );

    // Put then Get; and Run on a stored object plus fresh values.
    let z = random_reals(300, -5.0, 5.0);
    let ids = c.put(&[z.clone(), y.clone()]).await.unwrap();
    assert_eq!(ids.len(), 2);
    close(&z, &c.get(&ids[0], 300).await.unwrap(), 1e-3, "get z");
    let r = c
        .run(
            vec![
                RunInput::Object(ids[0].clone()),
                RunInput::Values(x.clone()),
            ],
            &add_graph(),
            n,
        )
        .await
        .unwrap();
    let want: Vec<f64> = (0..n)
        .map(|i| x[i] + z.get(i).copied().unwrap_or(0.0))
        .collect();
    assert_eq!(r.outputs[0].2.len(), n);
    close(&want, &r.outputs[0].2, 1e-3, "z + x");
    assert_eq!(r.input_ids[0], ids[0]);

    // Bad input: a value that is not finite, a graph that does not decode.
    let (kind, code, _) = refused(c.put(&[vec![1.0, f64::NAN]]).await);
    assert_eq!(
        (kind, code),
        (Some(ErrorKind::InvalidRequest), Code::InvalidArgument)
    );
    let (kind, _, _) = refused(c.get("not-an-id", 0).await);
    assert_eq!(kind, Some(ErrorKind::InvalidRequest));
    let (kind, _, message) = refused(c.put(&vec![vec![1.0]; DEFAULT_MAX_VECTORS + 1]).await);
    assert_eq!(kind, Some(ErrorKind::InvalidRequest), "{message}");
    let (kind, _, _) = refused(
        c.run(vec![RunInput::Values(x.clone())], &add_graph(), 0)
            .await,
    );
    assert_eq!(
        kind,
        Some(ErrorKind::InvalidRequest),
        "a graph with an input it lacks"
    );
    f.proxy.stop().await.unwrap();
}

/// x + y and x · y of BGV ciphertexts.
fn bgv_add_mul_graph() -> Graph {
    let mut g = Graph::new();
    let (a, b) = (g.input(0), g.input(1));
    let s = g.bgv_add(a, b);
    let m = g.bgv_mul(a, b);
    g.output("sum", s);
    g.output("product", m);
    g
}

/// `want` then zeros, as `got`'s `n` slots.
fn padded(want: &[u64], n: usize) -> Vec<u64> {
    let mut v = want.to_vec();
    v.resize(n, 0);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bgv_tenant_adds_and_multiplies_integer_vectors_mod_t() {
    let f = fixture().await;
    let keys = BgvKeyDir::open(&f.carol_keys).unwrap();
    let (t, n) = (keys.t(), keys.params.n());
    assert_eq!((t, n), (65537, 8192));
    let c = f.client(CAROL, true).await.unwrap();
    let len = 1000;
    let (x, y) = (random_ints(len, t), random_ints(len, t));
    // The reference: plain arithmetic mod t, in u128.
    let m = |v: u128| (v % t as u128) as u64;
    let sum: Vec<u64> = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| m(a as u128 + b as u128))
        .collect();
    let product: Vec<u64> = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| m(a as u128 * b as u128))
        .collect();

    let r = c
        .run(
            vec![RunInput::Ints(x.clone()), RunInput::Ints(y.clone())],
            &bgv_add_mul_graph(),
            0,
        )
        .await
        .unwrap();
    assert!(r.outputs.is_empty(), "no reals from a BGV tenant");
    assert_eq!(r.crossings, 2);
    let mut outs = r.int_outputs.clone();
    outs.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        outs.iter().map(|o| o.0.as_str()).collect::<Vec<_>>(),
        ["product", "sum"]
    );
    assert_eq!(outs[0].2, padded(&product, n), "x · y mod t");
    assert_eq!(outs[1].2, padded(&sum, n), "x + y mod t");

    // The server holds BGV ciphertexts under carol's keys: her own clear
    // key folder decrypts them.
    let server = Client::connect(
        &format!("https://localhost:{}", f.server.addr.port()),
        CAROL_SERVER,
        f.server.ca_pem.as_deref(),
    )
    .await
    .unwrap();
    let x_ct = server.download(&r.input_ids[0], None).await.unwrap();
    assert_eq!(
        keys.decrypt(&x_ct).unwrap(),
        padded(&x, n),
        "x on the server"
    );
    let sum_ct = server.download(&outs[1].1, None).await.unwrap();
    assert_eq!(keys.decrypt(&sum_ct).unwrap(), padded(&sum, n));

    // Put then Get; and Run on a stored object plus fresh integers, `len`
    // values returned.
    let z = random_ints(300, t);
    let ids = c.put_ints(&[z.clone(), y.clone()]).await.unwrap();
    assert_eq!(ids.len(), 2);
    assert_eq!(c.get_ints(&ids[0], 300).await.unwrap(), z, "get z");
    assert_eq!(c.get_ints(&ids[1], 0).await.unwrap(), padded(&y, n));
    let r = c
        .run(
            vec![RunInput::Object(ids[0].clone()), RunInput::Ints(x.clone())],
            &bgv_add_mul_graph(),
            len,
        )
        .await
        .unwrap();
    assert_eq!(r.input_ids[0], ids[0]);
    let zx: Vec<u64> = (0..len)
        .map(|i| m(x[i] as u128 + z.get(i).copied().unwrap_or(0) as u128))
        .collect();
    let got = r.int_outputs.iter().find(|o| o.0 == "sum").unwrap();
    assert_eq!(got.2, zx, "z + x mod t");
    f.proxy.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn integers_out_of_range_or_of_the_wrong_scheme_are_refused_and_the_proxy_stays_up() {
    let f = fixture().await;
    let t = BgvKeyDir::open(&f.carol_keys).unwrap().t();
    let carol = f.client(CAROL, true).await.unwrap();
    let alice = f.client(ALICE, true).await.unwrap();
    let invalid = |r: (Option<ErrorKind>, Code, String), what: &str| {
        let (kind, code, message) = r;
        assert_eq!(
            (kind, code),
            (Some(ErrorKind::InvalidRequest), Code::InvalidArgument),
            "{what}: {message}"
        );
        message
    };
    // Values not below t, never wrapped; the value is not echoed.
    let secretish = 0xdead_beef_cafe_u64;
    for (values, at) in [
        (vec![1, 2, t], 2),
        (vec![secretish, 1], 0),
        (vec![5, u64::MAX], 1),
    ] {
        let message = invalid(
            refused(carol.put_ints(std::slice::from_ref(&values)).await),
            "out of range",
        );
        assert!(
            message.contains("plaintext modulus") && message.contains(&format!("value {at} ")),
            "{message}"
        );
        for v in [secretish, u64::MAX] {
            assert!(!message.contains(&v.to_string()), "{message}");
        }
        invalid(
            refused(
                carol
                    .run(
                        vec![RunInput::Ints(values.clone()), RunInput::Ints(vec![1])],
                        &bgv_add_mul_graph(),
                        0,
                    )
                    .await,
            ),
            "out of range in run",
        );
    }
    // More values than slots.
    invalid(
        refused(carol.put_ints(&[vec![1; 8193]]).await),
        "too many values",
    );
    // Reals for a BGV tenant, integers for a CKKS tenant.
    let message = invalid(refused(carol.put(&[vec![1.0, 2.0]]).await), "reals for BGV");
    assert!(message.contains("BGV"), "{message}");
    invalid(
        refused(
            carol
                .run(
                    vec![RunInput::Values(vec![1.0]), RunInput::Values(vec![2.0])],
                    &add_graph(),
                    0,
                )
                .await,
        ),
        "reals for BGV in run",
    );
    let message = invalid(
        refused(alice.put_ints(&[vec![1, 2]]).await),
        "ints for CKKS",
    );
    assert!(message.contains("CKKS"), "{message}");
    invalid(
        refused(
            alice
                .run(
                    vec![RunInput::Ints(vec![1]), RunInput::Ints(vec![2])],
                    &bgv_add_mul_graph(),
                    0,
                )
                .await,
        ),
        "ints for CKKS in run",
    );
    // Objects asked back in the other scheme's form: refused by the client.
    let alice_ids = alice.put(&[vec![0.25]]).await.unwrap();
    let carol_ids = carol.put_ints(&[vec![7]]).await.unwrap();
    assert!(matches!(
        alice.get_ints(&alice_ids[0], 1).await,
        Err(ProxyClientError::Invalid(_))
    ));
    assert!(matches!(
        carol.get(&carol_ids[0], 1).await,
        Err(ProxyClientError::Invalid(_))
    ));
    // The proxy is up and serves both.
    let v = random_ints(50, t);
    let ids = carol.put_ints(std::slice::from_ref(&v)).await.unwrap();
    assert_eq!(carol.get_ints(&ids[0], 50).await.unwrap(), v);
    assert_eq!(carol.get_ints(&carol_ids[0], 2).await.unwrap(), [7, 0]);
    close(
        &[0.25],
        &alice.get(&alice_ids[0], 1).await.unwrap(),
        1e-3,
        "alice",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wrong_or_unknown_token_is_refused() {
    let f = fixture().await;
    for bad in [
        "nobody-token-0123456789",
        "alice-proxy-token-0124",
        ALICE_SERVER,
        "",
    ] {
        // Info needs no token: the refusal comes with the first call.
        let c = f.client(bad, true).await.unwrap();
        let (kind, code, message) = refused(c.put(&[vec![1.0]]).await);
        assert_eq!(kind, Some(ErrorKind::Unauthenticated), "{bad:?}: {message}");
        assert_eq!(code, Code::Unauthenticated);
        assert!(
            !message.contains(bad) || bad.is_empty(),
            "the token is echoed: {message}"
        );
    }
    // The right token still works, for each tenant.
    for tok in [ALICE, BOB] {
        let c = f.client(tok, true).await.unwrap();
        let v = random_reals(10, -1.0, 1.0);
        let ids = c.put(std::slice::from_ref(&v)).await.unwrap();
        close(&v, &c.get(&ids[0], 10).await.unwrap(), 1e-3, tok);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unattested_proxy_is_refused_unless_allowed() {
    let f = fixture().await;
    match f.client(ALICE, false).await {
        Err(ProxyClientError::Attestation(e)) => {
            assert_eq!(e, AttestError::Unattested);
            assert!(e.to_string().contains("unattested"), "{e}");
        }
        other => panic!("an unattested proxy was not refused: {other:?}"),
    }
    let c = f.client(ALICE, true).await.unwrap();
    assert_eq!(c.verified(), &Verified::Unattested);
    assert_eq!(c.info().tls_public_key, f.proxy.tls_public_key);
    assert_eq!(c.info().attestation.as_ref().unwrap().kind, "unattested");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tampered_sealed_key_file_is_a_typed_error_and_other_tenants_are_served() {
    let f = fixture().await;
    let sealed = f.store().join("bob").join("secret.key.sealed");
    let mut b = std::fs::read(&sealed).unwrap();
    let at = b.len() - 40;
    b[at] ^= 0x01;
    std::fs::write(&sealed, &b).unwrap();

    let bob = f.client(BOB, true).await.unwrap();
    for _ in 0..2 {
        let (kind, code, message) = refused(bob.put(&[vec![1.0, 2.0]]).await);
        assert_eq!(kind, Some(ErrorKind::SealedKeys), "{message}");
        assert_eq!(code, Code::FailedPrecondition);
        assert!(message.contains("tampered"), "{message}");
    }
    // Alice is served all the same.
    let alice = f.client(ALICE, true).await.unwrap();
    let (x, y) = (random_reals(64, -3.0, 3.0), random_reals(64, -3.0, 3.0));
    let r = alice
        .run(
            vec![RunInput::Values(x.clone()), RunInput::Values(y.clone())],
            &add_graph(),
            64,
        )
        .await
        .unwrap();
    let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
    close(&want, &r.outputs[0].2, 1e-3, "alice after bob's failure");

    // A missing folder is the same kind of error.
    std::fs::remove_dir_all(f.store().join("bob")).unwrap();
    let (kind, _, _) = refused(bob.get(&r.input_ids[0], 1).await);
    assert_eq!(kind, Some(ErrorKind::SealedKeys));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ciphertext_under_other_parameters_from_the_server_is_a_typed_error() {
    let f = fixture().await;
    // The server holds, for alice, a ciphertext of another parameter set
    // and bytes that are no ciphertext (stored opaque: the server does not
    // read them), as a faulty or malicious server could return.
    let lit = test_literal(11, 2);
    let params = CkksParameters::new_insecure_for_tests(lit, 40).unwrap();
    let keys = KeySet::generate(&params, &[], false).unwrap();
    let pt = Encoder::new(&params)
        .encode_real(&[1.0, 2.0], params.max_level(), params.default_scale())
        .unwrap();
    let foreign = keys.encrypt(&pt).unwrap().to_bytes();
    let server = f.alice_on_server().await;
    let foreign_id = server
        .upload(OPAQUE_KIND, Arc::new(foreign))
        .await
        .unwrap()
        .object_id;
    let junk_id = server
        .upload(
            OPAQUE_KIND,
            Arc::new(
                random_reals(64, 0.0, 1.0)
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect::<Vec<u8>>(),
            ),
        )
        .await
        .unwrap()
        .object_id;

    let c = f.client(ALICE, true).await.unwrap();
    let (kind, code, message) = refused(c.get(&foreign_id, 4).await);
    assert_eq!(kind, Some(ErrorKind::ForeignCiphertext), "{message}");
    assert_eq!(code, Code::DataLoss);
    let (kind, _, message) = refused(c.get(&junk_id, 4).await);
    assert_eq!(kind, Some(ErrorKind::BadCiphertext), "{message}");

    // The proxy keeps serving.
    let v = random_reals(32, -1.0, 1.0);
    let ids = c.put(std::slice::from_ref(&v)).await.unwrap();
    close(
        &v,
        &c.get(&ids[0], 32).await.unwrap(),
        1e-3,
        "after the failures",
    );
}

/// refresh(x)^4 on N = 2^13: the refresh mask needs headroom that N = 2^13
/// has only at its top level (2), so the graph refreshes its input there,
/// then squares it twice (both levels).
fn refresh_then_square_twice() -> Graph {
    let mut g = Graph::new();
    let mut y = g.input(0);
    y = g.refresh(y, 2);
    for _ in 0..2 {
        let m = g.mul(y, y);
        y = g.rescale(m);
    }
    g.output("x4", y);
    g
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_with_a_refresh_is_answered_by_the_proxy() {
    let f = fixture().await;
    let c = f.client(ALICE, true).await.unwrap();
    // The refresh mask needs headroom that N = 2^13 has only at its top
    // level (2): the graph refreshes its input there, then squares it
    // twice (both levels). The job succeeds only if a key holder answers
    // the server's refresh request: no client is connected to the
    // server, the proxy's enclave answers it.
    let x = random_reals(200, -1.0, 1.0);
    let before = f.enclave.crossings();
    let g = refresh_then_square_twice();
    let r = c
        .run(vec![RunInput::Values(x.clone())], &g, x.len())
        .await
        .unwrap();
    let want: Vec<f64> = x.iter().map(|v| v.powi(4)).collect();
    close(&want, &r.outputs[0].2, 1e-2, "refresh(x)^4");
    // The request's own crossings (encrypt, decrypt), and the enclave's:
    // those two, the tenant's setup (unseal and public files) and the
    // refresh answer.
    assert_eq!(r.crossings, 2);
    assert_eq!(f.enclave.crossings() - before, 2 + 1 + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bgv_job_with_refreshes_is_answered_by_the_proxy() {
    let f = fixture().await;
    let t = BgvKeyDir::open(&f.carol_keys).unwrap().t();
    let c = f.client(CAROL, true).await.unwrap();
    // (refresh(x)^2 refreshed)^2 = x^4 mod t: each refresh is a request
    // of the server to the key holder, answered inside the proxy's
    // enclave with the tenant's BGV key (no client is connected to the
    // server); the server re-randomizes it with the BGV public key the
    // proxy uploaded.
    let mut g = Graph::new();
    let mut y = g.input(0);
    for _ in 0..2 {
        y = g.bgv_refresh(y, 2);
        y = g.bgv_mul(y, y);
    }
    g.output("x4", y);
    let x = random_ints(300, t);
    let before = f.enclave.crossings();
    let r = c
        .run(vec![RunInput::Ints(x.clone())], &g, x.len())
        .await
        .unwrap();
    let want: Vec<u64> = x
        .iter()
        .map(|&v| {
            let sq = (v as u128 * v as u128) % t as u128;
            ((sq * sq) % t as u128) as u64
        })
        .collect();
    assert_eq!(r.int_outputs[0].2, want, "x^4 mod t");
    // Encrypt, decrypt, the tenant's setup and the two refresh answers.
    assert_eq!(r.crossings, 2);
    assert_eq!(f.enclave.crossings() - before, 2 + 1 + 2);
}

/// SEV-SNP reports signed by the test chain's VCEK, whose report data is
/// what the proxy asked to bind (`stale: false`) or another value (a
/// replayed report for another key or nonce): the reports of a
/// [`CvmEnclave`] in a confidential VM on a chip of the test chain.
#[derive(Debug)]
struct TestReports {
    /// The test chain whose VCEK signs the reports.
    chain: Arc<snp_chain::Chain>,
    stale: bool,
}

impl ReportSource for TestReports {
    fn report(
        &self,
        report_data: &[u8; hecloud_proxy::enclave::REPORT_DATA_LEN],
    ) -> hecloud_proxy::Result<Attestation> {
        use hecloud_proxy::attest::PROVIDER_SEV_SNP;
        let data = if self.stale {
            hecloud_proxy::attest::report_data(b"another TLS key", &[7; 32])
        } else {
            *report_data
        };
        Ok(Attestation::ConfigfsTsm {
            provider: PROVIDER_SEV_SNP.into(),
            report: self.chain.report(&data),
            auxblob: Some(self.chain.table()),
        })
    }
}

/// The proxy's enclave in a confidential VM of the test chain.
fn in_a_cvm(
    chain: &Arc<snp_chain::Chain>,
    stale: bool,
) -> impl FnOnce(Arc<dyn Enclave>) -> Arc<dyn Enclave> {
    let chain = chain.clone();
    move |ops| Arc::new(CvmEnclave::new(ops, TestReports { chain, stale }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_report_binding_the_proxy_key_and_nonce_is_accepted_and_a_stale_one_refused() {
    let chain = Arc::new(snp_chain::Chain::new("Test"));
    let policy = chain.policy(Some(snp_chain::MEASUREMENT));
    let f = fixture_with(in_a_cvm(&chain, false)).await;
    // No allow flag needed: the report is signed by a VCEK that chains to
    // the pinned (test) root, and binds this proxy's TLS key and this
    // client's fresh nonce.
    let c = f.client_with(ALICE, &policy).await.unwrap();
    assert!(
        matches!(c.verified(), Verified::SevSnp { provider, report }
            if provider == "sev_guest" && report.measurement_pinned),
        "{:?}",
        c.verified()
    );
    let (x, y) = (random_reals(16, -1.0, 1.0), random_reals(16, -1.0, 1.0));
    let r = c
        .run(
            vec![RunInput::Values(x.clone()), RunInput::Values(y.clone())],
            &add_graph(),
            16,
        )
        .await
        .unwrap();
    let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
    close(&want, &r.outputs[0].2, 1e-3, "through an attested proxy");
    // The default client pins AMD's roots: the test chain is refused.
    for allow in [false, true] {
        match f.client(ALICE, allow).await {
            Err(ProxyClientError::Attestation(AttestError::Snp(SnpError::UnpinnedRoot))) => {}
            other => panic!("a test chain passed AMD's roots: {other:?}"),
        }
    }

    let f = fixture_with(in_a_cvm(&chain, true)).await;
    let mut allowing = policy.clone();
    allowing.allow_unattested = true;
    for p in [&policy, &allowing] {
        match f.client_with(ALICE, p).await {
            Err(ProxyClientError::Attestation(e)) => {
                assert_eq!(e, AttestError::Snp(SnpError::ReportDataMismatch));
                assert!(e.to_string().contains("does not bind"), "{e}");
            }
            other => panic!("a stale report was accepted: {other:?}"),
        }
    }
}

/// TDX quotes of the test chain, binding what the proxy asked (`stale:
/// false`) or another key and nonce: the quotes of a [`CvmEnclave`] in a
/// TDX confidential VM on a platform of the test chain.
#[derive(Debug)]
struct TestQuotes {
    chain: Arc<tdx_chain::Chain>,
    stale: bool,
}

impl ReportSource for TestQuotes {
    fn report(
        &self,
        report_data: &[u8; hecloud_proxy::enclave::REPORT_DATA_LEN],
    ) -> hecloud_proxy::Result<Attestation> {
        let data = if self.stale {
            hecloud_proxy::attest::report_data(b"another TLS key", &[7; 32])
        } else {
            *report_data
        };
        Ok(Attestation::ConfigfsTsm {
            provider: hecloud_proxy::attest::PROVIDER_TDX.into(),
            report: self.chain.quote(&data),
            auxblob: None,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tdx_quote_binding_the_proxy_key_and_nonce_is_accepted_and_a_stale_one_refused() {
    use hecloud_proxy::attest::tdx::TdxError;
    let chain = Arc::new(tdx_chain::Chain::new("Test"));
    let policy = chain.policy(Some(tdx_chain::MRTD));
    let c2 = chain.clone();
    let f = fixture_with(move |ops| {
        Arc::new(CvmEnclave::new(
            ops,
            TestQuotes {
                chain: c2,
                stale: false,
            },
        ))
    })
    .await;
    let c = f.client_with(ALICE, &policy).await.unwrap();
    assert!(
        matches!(c.verified(), Verified::Tdx { provider, quote }
            if provider == "tdx_guest" && quote.mrtd_pinned && quote.report.mrtd == tdx_chain::MRTD),
        "{:?}",
        c.verified()
    );
    let (x, y) = (random_reals(16, -1.0, 1.0), random_reals(16, -1.0, 1.0));
    let r = c
        .run(
            vec![RunInput::Values(x.clone()), RunInput::Values(y.clone())],
            &add_graph(),
            16,
        )
        .await
        .unwrap();
    let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
    close(&want, &r.outputs[0].2, 1e-3, "through a TDX-attested proxy");
    // The default client pins Intel's root: the test chain is refused,
    // with or without the allow flag (an attested proxy that fails is
    // not taken for an unattested one).
    for allow in [false, true] {
        match f.client(ALICE, allow).await {
            Err(ProxyClientError::Attestation(AttestError::Tdx(TdxError::UnpinnedRoot))) => {}
            other => panic!("a test chain passed Intel's root: {other:?}"),
        }
    }
    // Another MRTD expected.
    let mut other = policy.clone();
    other.tdx.mrtd = Some([0; 48]);
    assert!(matches!(
        f.client_with(ALICE, &other).await,
        Err(ProxyClientError::Attestation(AttestError::Tdx(
            TdxError::MrtdMismatch { .. }
        )))
    ));

    let c2 = chain.clone();
    let f = fixture_with(move |ops| {
        Arc::new(CvmEnclave::new(
            ops,
            TestQuotes {
                chain: c2,
                stale: true,
            },
        ))
    })
    .await;
    match f.client_with(ALICE, &policy).await {
        Err(ProxyClientError::Attestation(e)) => {
            assert_eq!(e, AttestError::Tdx(TdxError::ReportDataMismatch));
        }
        other => panic!("a stale quote was accepted: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_tenants_at_once_each_get_their_own_results() {
    let f = fixture().await;
    let (alice, bob) = (
        f.client(ALICE, true).await.unwrap(),
        f.client(BOB, true).await.unwrap(),
    );
    let inputs: Vec<(Vec<f64>, Vec<f64>)> = (0..4)
        .map(|_| {
            (
                random_reals(100, -10.0, 10.0),
                random_reals(100, -10.0, 10.0),
            )
        })
        .collect();
    let runs = inputs.iter().enumerate().map(|(i, (x, y))| {
        let c = if i % 2 == 0 {
            alice.clone()
        } else {
            bob.clone()
        };
        let (x, y) = (x.clone(), y.clone());
        tokio::spawn(async move {
            c.run(
                vec![RunInput::Values(x), RunInput::Values(y)],
                &add_graph(),
                100,
            )
            .await
        })
    });
    let mut outs = vec![];
    for r in runs.collect::<Vec<_>>() {
        outs.push(r.await.unwrap().unwrap());
    }
    for (i, ((x, y), r)) in inputs.iter().zip(&outs).enumerate() {
        let want: Vec<f64> = x.iter().zip(y).map(|(a, b)| a + b).collect();
        close(&want, &r.outputs[0].2, 1e-3, &format!("run {i}"));
    }
    // Bob's ciphertexts are under Bob's key: Alice's clear folder does not
    // decrypt them to his values.
    let keys = KeyDir::open(&f.alice_keys).unwrap();
    let bobs = alice_or_bob_object(&f, &outs[1].input_ids[0]).await;
    assert!(
        bobs.is_none(),
        "alice's tenant on the server holds bob's object"
    );
    let alices = alice_or_bob_object(&f, &outs[0].input_ids[0])
        .await
        .unwrap();
    close(
        &inputs[0].0,
        &keys.decrypt(&alices).unwrap(),
        1e-3,
        "alice's x",
    );
}

/// The object through alice's own server connection (`None`: her tenant
/// does not hold it).
async fn alice_or_bob_object(f: &Fixture, id: &str) -> Option<Vec<u8>> {
    f.alice_on_server().await.download(id, None).await.ok()
}

/// The server restarts on the same address and files: the proxy notices
/// that its key-holder session ended, sets the tenant up again (keys,
/// session, key holder), and a job that needs a refresh runs again. Then
/// the server comes back with its objects lost: the first request fails
/// on the server, the proxy sets the tenant up again and retries it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_proxy_sets_a_tenant_up_again_after_a_server_restart() {
    let Fixture {
        dir, server, proxy, ..
    } = fixture().await;
    let c = ProxyClient::connect(&proxy.url(), ALICE, proxy.ca_pem.as_deref(), true)
        .await
        .unwrap();
    let g = refresh_then_square_twice();
    let x = random_reals(200, -1.0, 1.0);
    let want: Vec<f64> = x.iter().map(|v| v.powi(4)).collect();
    let run = |what: &'static str| {
        let (c, g, x, want) = (&c, &g, &x, &want);
        async move {
            let r = c
                .run(vec![RunInput::Values(x.clone())], g, x.len())
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            close(want, &r.outputs[0].2, 1e-2, what);
        }
    };
    run("before the restart").await;
    let addr = server.addr;
    server.stop().await.unwrap();
    let server = hecloud_server::start(server_config(dir.path(), addr))
        .await
        .unwrap();
    run("after the restart").await;
    // Objects lost: the same address and certificate, an empty store.
    server.stop().await.unwrap();
    let data = dir.path().join("server");
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|n| n == "tls") {
            continue;
        }
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
    let server = hecloud_server::start(server_config(dir.path(), addr))
        .await
        .unwrap();
    let (a, b) = (random_reals(100, -1.0, 1.0), random_reals(100, -1.0, 1.0));
    let r = c
        .run(
            vec![RunInput::Values(a.clone()), RunInput::Values(b.clone())],
            &add_graph(),
            a.len(),
        )
        .await
        .unwrap();
    let sum: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    close(
        &sum,
        &r.outputs[0].2,
        1e-4,
        "a + b with the server's objects lost",
    );
    server.stop().await.unwrap();
    proxy.stop().await.unwrap();
}

/// TLS material under `to` with the CA of the material under `from` and a
/// new server certificate and key (another TLS key the client trusts).
fn another_leaf_of_the_same_ca(
    from: &std::path::Path,
    to: &std::path::Path,
) -> hecloud_server::tls::TlsMaterial {
    use hecloud_server::tls::{ca_key_path, load_or_generate, paths};
    std::fs::create_dir_all(to).unwrap();
    std::fs::copy(paths(from).0, paths(to).0).unwrap();
    std::fs::copy(ca_key_path(from), ca_key_path(to)).unwrap();
    let m = load_or_generate(to).unwrap();
    assert_eq!(m.ca_pem, std::fs::read_to_string(paths(from).0).unwrap());
    m
}

/// A man in the middle with its own certificate from the proxy's CA: it
/// relays `Info` (the client's nonce, the genuine proxy's reply) and
/// records every call that reaches it with a token, or any other call.
struct Mitm {
    genuine: hecloud_proxy::rpc::proxy_client::ProxyClient<tonic::transport::Channel>,
    /// What reached it past `Info`, or with a token.
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Mitm {
    fn record<T>(&self, what: &str, req: &tonic::Request<T>) {
        let mut seen = self.seen.lock().unwrap();
        seen.push(format!(
            "{what} (authorization: {})",
            req.metadata().contains_key("authorization")
        ));
    }
}

#[tonic::async_trait]
impl hecloud_proxy::rpc::proxy_server::Proxy for Mitm {
    async fn info(
        &self,
        req: tonic::Request<hecloud_proxy::rpc::InfoRequest>,
    ) -> Result<tonic::Response<hecloud_proxy::rpc::InfoReply>, tonic::Status> {
        if req.metadata().contains_key("authorization") {
            self.record("Info", &req);
        }
        self.genuine.clone().info(req.into_inner()).await
    }

    async fn put(
        &self,
        req: tonic::Request<hecloud_proxy::rpc::PutRequest>,
    ) -> Result<tonic::Response<hecloud_proxy::rpc::PutReply>, tonic::Status> {
        self.record("Put", &req);
        Err(tonic::Status::unavailable("a man in the middle"))
    }

    async fn run(
        &self,
        req: tonic::Request<hecloud_proxy::rpc::RunRequest>,
    ) -> Result<tonic::Response<hecloud_proxy::rpc::RunReply>, tonic::Status> {
        self.record("Run", &req);
        Err(tonic::Status::unavailable("a man in the middle"))
    }

    async fn get(
        &self,
        req: tonic::Request<hecloud_proxy::rpc::GetRequest>,
    ) -> Result<tonic::Response<hecloud_proxy::rpc::GetReply>, tonic::Status> {
        self.record("Get", &req);
        Err(tonic::Status::unavailable("a man in the middle"))
    }
}

/// A [`Mitm`] in front of `f`'s proxy on a loopback port, serving TLS with
/// `tls` (plaintext without): its port, what it saw, its task.
async fn start_mitm(
    f: &Fixture,
    tls: Option<&hecloud_server::tls::TlsMaterial>,
) -> (
    u16,
    Arc<std::sync::Mutex<Vec<String>>>,
    tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
) {
    use tonic::transport::{Identity, Server, ServerTlsConfig};
    let genuine = tonic::transport::Endpoint::from_shared(f.proxy.url()).unwrap();
    let genuine = hecloud_client::trusting_ca(genuine, f.proxy.ca_pem.as_deref().unwrap())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut server = Server::builder();
    if let Some(m) = tls {
        server = server
            .tls_config(
                ServerTlsConfig::new().identity(Identity::from_pem(&m.cert_pem, &m.key_pem)),
            )
            .unwrap();
    }
    let mitm = server
        .add_service(hecloud_proxy::rpc::proxy_server::ProxyServer::new(Mitm {
            genuine: hecloud_proxy::rpc::proxy_client::ProxyClient::new(genuine),
            seen: seen.clone(),
        }))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    (port, seen, tokio::spawn(mitm))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proxy_announcing_another_tls_key_than_its_connection_is_refused_before_the_token() {
    let chain = Arc::new(snp_chain::Chain::new("Test"));
    let policy = chain.policy(Some(snp_chain::MEASUREMENT));
    let f = fixture_with(in_a_cvm(&chain, false)).await;
    // The proxy announces the key of the certificate it presents.
    let leaf_pem =
        std::fs::read_to_string(hecloud_server::tls::paths(&f.dir.path().join("proxy-tls")).1)
            .unwrap();
    let leaf = x509_der(&leaf_pem);
    assert_eq!(
        hecloud_proxy::attest::tls_public_key_of(&leaf).unwrap(),
        f.proxy.tls_public_key
    );

    // The man in the middle: a certificate from the same CA (the client
    // trusts it), another key, the genuine proxy's Info relayed.
    let m = another_leaf_of_the_same_ca(
        &f.dir.path().join("proxy-tls"),
        &f.dir.path().join("mitm-tls"),
    );
    let (port, seen, mitm) = start_mitm(&f, Some(&m)).await;
    let url = format!("https://localhost:{port}");
    let mut allowing = policy.clone();
    allowing.allow_unattested = true;
    for p in [&policy, &allowing] {
        match ProxyClient::connect_with(&url, ALICE, f.proxy.ca_pem.as_deref(), p).await {
            Err(ProxyClientError::Attestation(e)) => {
                assert_eq!(e, AttestError::TlsKeyMismatch);
                assert!(
                    e.to_string().contains("not the key of the certificate"),
                    "{e}"
                );
            }
            Ok(c) => {
                // Show what the man in the middle would get.
                let _ = c.put(&[vec![1.0]]).await;
                panic!(
                    "a relayed attestation was accepted; the man in the middle saw {:?}",
                    seen.lock().unwrap()
                );
            }
            Err(other) => panic!("expected a TLS key mismatch, got {other:?}"),
        }
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "the token reached the man in the middle: {:?}",
        seen.lock().unwrap()
    );
    // The genuine proxy, reached directly, is accepted under the same policy.
    let c = f.client_with(ALICE, &policy).await.unwrap();
    assert!(matches!(c.verified(), Verified::SevSnp { .. }));
    mitm.abort();
}

/// The DER of the first certificate of a PEM text.
fn x509_der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

/// A TCP relay (TLS passes through it untouched) whose target can be
/// switched; switching drops the connections open so far.
struct Relay {
    port: u16,
    target: Arc<std::sync::Mutex<std::net::SocketAddr>>,
    open: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(target: std::net::SocketAddr) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = Arc::new(std::sync::Mutex::new(target));
        let open = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (t, o) = (target.clone(), open.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let to = *t.lock().unwrap();
                o.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                }));
            }
        });
        Relay {
            port,
            target,
            open,
            task,
        }
    }

    fn switch(&self, to: std::net::SocketAddr) {
        *self.target.lock().unwrap() = to;
        for c in self.open.lock().unwrap().drain(..) {
            c.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reconnection_presenting_another_tls_key_fails() {
    let f = fixture().await;
    // Another proxy in front of the same server and store, with a
    // certificate from the same CA and another key.
    let m = another_leaf_of_the_same_ca(
        &f.dir.path().join("proxy-tls"),
        &f.dir.path().join("other-tls"),
    );
    let other = hecloud_proxy::service::start(
        ProxyConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            server_url: format!("https://localhost:{}", f.server.addr.port()),
            server_ca_pem: f.server.ca_pem.clone(),
            store_dir: f.store(),
            tls: TlsSource::Generated(f.dir.path().join("other-tls")),
            tenants: vec![ProxyTenant::new("alice", ALICE, ALICE_SERVER).unwrap()],
            max_vectors: DEFAULT_MAX_VECTORS,
        },
        f.enclave.clone() as Arc<dyn Enclave>,
    )
    .await
    .unwrap();
    assert_eq!(other.ca_pem.as_deref(), Some(m.ca_pem.as_str()));
    assert_ne!(other.tls_public_key, f.proxy.tls_public_key);

    let relay = Relay::start(f.proxy.addr).await;
    let url = format!("https://localhost:{}", relay.port);
    let c = ProxyClient::connect(&url, ALICE, f.proxy.ca_pem.as_deref(), true)
        .await
        .unwrap();
    let v = random_reals(8, -1.0, 1.0);
    c.put(std::slice::from_ref(&v)).await.unwrap();

    // The channel connects again, to a proxy with another key: every call
    // fails, and not for lack of a working proxy behind the relay.
    relay.switch(other.addr);
    let mut messages = vec![];
    for _ in 0..6 {
        match c.put(std::slice::from_ref(&v)).await {
            Ok(_) => panic!("a call went to a proxy with another TLS key: {messages:?}"),
            Err(e) => messages.push(format!("{e:?}")),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // rustls shows the pinning verifier's error by its name.
    assert!(
        messages.iter().any(|m| m.contains("TlsKeyChanged")),
        "{messages:?}"
    );
    // A new client verifies the other proxy's key afresh and is served.
    let c = ProxyClient::connect(&url, ALICE, f.proxy.ca_pem.as_deref(), true)
        .await
        .unwrap();
    assert_eq!(c.info().tls_public_key, other.tls_public_key);
    c.put(std::slice::from_ref(&v)).await.unwrap();
    relay.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_http_only_an_allowed_unattested_proxy_is_accepted() {
    // An unattested proxy behind a plaintext (loopback) front: allowed
    // when unattested proxies are, refused otherwise; no TLS key to check.
    let f = fixture().await;
    let (port, seen, front) = start_mitm(&f, None).await;
    let url = format!("http://127.0.0.1:{port}");
    let c = ProxyClient::connect(&url, ALICE, None, true).await.unwrap();
    assert_eq!(c.verified(), &Verified::Unattested);
    match ProxyClient::connect(&url, ALICE, None, false).await {
        Err(ProxyClientError::Attestation(AttestError::Unattested)) => {}
        other => panic!("an unattested proxy was not refused over http: {other:?}"),
    }
    // https:// needs the proxy's CA: no other roots are trusted.
    match ProxyClient::connect(&f.proxy.url(), ALICE, None, true).await {
        Err(ProxyClientError::Invalid(m)) => assert!(m.contains("CA certificate"), "{m}"),
        other => panic!("https without a CA: {other:?}"),
    }
    front.abort();

    // An attested proxy behind it: its report cannot be bound to a
    // connection without TLS, and is refused under any policy.
    let chain = Arc::new(snp_chain::Chain::new("Test"));
    let policy = chain.policy(Some(snp_chain::MEASUREMENT));
    let f = fixture_with(in_a_cvm(&chain, false)).await;
    let (port, seen2, front) = start_mitm(&f, None).await;
    let url = format!("http://127.0.0.1:{port}");
    let mut allowing = policy.clone();
    allowing.allow_unattested = true;
    for p in [&policy, &allowing] {
        match ProxyClient::connect_with(&url, ALICE, None, p).await {
            Err(ProxyClientError::Attestation(e)) => {
                assert_eq!(e, AttestError::NoTlsToBind);
                assert!(e.to_string().contains("https://"), "{e}");
            }
            other => panic!("a report over http was accepted: {other:?}"),
        }
    }
    assert!(seen.lock().unwrap().is_empty() && seen2.lock().unwrap().is_empty());
    front.abort();
}

/// Client and proxy speak one protocol version: the proxy refuses an
/// `Info` of another (or of a version-1 client, which sends none) with a
/// typed error naming both, before any attestation or token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_of_another_protocol_version_is_refused() {
    use hecloud_proxy::rpc::{InfoRequest, PROTOCOL_VERSION, proxy_client};
    let f = fixture().await;
    let channel = tonic::transport::Endpoint::from_shared(f.proxy.url()).unwrap();
    let channel = hecloud_client::trusting_ca(channel, f.proxy.ca_pem.as_deref().unwrap())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut raw = proxy_client::ProxyClient::new(channel);
    let info = |protocol_version| InfoRequest {
        nonce: vec![7; 32],
        protocol_version,
    };
    for v in [0, 1, PROTOCOL_VERSION + 1] {
        let e = raw.info(info(v)).await.unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{v}: {e:?}");
        assert_eq!(
            e.metadata()
                .get(hecloud_proxy::service::ERROR_KIND_HEADER)
                .unwrap(),
            ErrorKind::Incompatible.as_str(),
            "{v}"
        );
        assert!(e.message().contains("protocol version 2"), "{e:?}");
    }
    let reply = raw.info(info(PROTOCOL_VERSION)).await.unwrap().into_inner();
    assert_eq!(reply.protocol_version, PROTOCOL_VERSION);
    // And the proxy is still up for a client of its version.
    f.client(ALICE, true).await.unwrap();
}

/// A bootstrappable folder (`boot-test-n12`, sparse at 256 slots, the
/// server preferring bootstrapping) held by the proxy: plaintext in, a
/// job deeper than the folder's levels bootstrapped by the server,
/// plaintext out, against the plaintext powers; more values than the
/// circuit's slots are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bootstrappable_folder_runs_a_job_deeper_than_its_levels() {
    let f = fixture().await;
    // Bob's folder, before his first request, becomes a bootstrappable one.
    std::fs::remove_dir_all(f.store().join("bob")).unwrap();
    let boot_keys = f.dir.path().join("bob-boot-keys");
    hecloud_client::keys::boot_keygen(
        &boot_keys,
        hecloud_ckks::boot::BootPreset::TestN12,
        &[],
        &hecloud_client::keys::RefreshOptions::default(),
        &hecloud_client::keys::BootOptions {
            prefer_over_refresh: true,
            slots: Some(256),
        },
    )
    .unwrap();
    SealedKeyStore::new(f.store())
        .seal_folder_in(f.enclave.as_ref(), "bob", &boot_keys)
        .unwrap();
    let c = f.client(BOB, true).await.unwrap();
    // random_reals(n, lo, hi): here 0.1 to 0.9.
    let x = random_reals(256, 0.1, 0.9);
    // Four squarings on the folder's two levels: bootstrapped.
    let mut g = Graph::new();
    let mut y = g.input(0);
    for _ in 0..4 {
        let m = g.mul(y, y);
        y = g.rescale(m);
    }
    g.output("y", y);
    let r = c
        .run(vec![RunInput::Values(x.clone())], &g, 256)
        .await
        .unwrap();
    let want: Vec<f64> = x.iter().map(|v| v.powi(16)).collect();
    close(&want, &r.outputs[0].2, 1e-3, "x^16 through a bootstrap");
    let (kind, _, msg) = refused(
        c.run(vec![RunInput::Values(random_reals(257, 0.1, 0.9))], &g, 257)
            .await,
    );
    assert_eq!(kind, Some(ErrorKind::InvalidRequest), "{msg}");
    assert!(msg.contains("257 values for 256 slots"), "{msg}");
}
