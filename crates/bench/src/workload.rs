//! End-to-end workloads run against a server, each checked against a
//! plaintext computation: what `hecloud demo`, `hecloud bench service` and
//! the client's service tests run.

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hecloud_circuits::{BitEngine, EncryptedUint, TfheEngine};
use hecloud_ckks::{CkksParameters, Encoder, KeySet, Preset};
use hecloud_protocol::object::tfhe_key_id;
use hecloud_protocol::rpc::{self, JOB_KIND_GRAPH, JobInfo, JobState};
use hecloud_protocol::{
    CkksParamSpec, Graph, JobSubmission, Message, Object, ObjectId, ObjectKind, ParamSpec,
    Relation, SessionSpec,
};
use hecloud_rlwe::{Ciphertext, KeyId};

use hecloud_client::keys::{tfhe_params, tfhe_session_spec};
use hecloud_client::{Client, ClientError, Result};

/// One checked operation.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// What ran.
    pub name: String,
    /// Whether the decrypted result matched the plaintext reference.
    pub ok: bool,
    /// Result and reference, readable.
    pub detail: String,
    /// End-to-end time (encrypt → upload → job → download → decrypt).
    pub time: Duration,
    /// Server-side homomorphic compute time.
    pub compute: Duration,
    /// Payload bytes sent.
    pub sent: u64,
    /// Payload bytes received.
    pub received: u64,
}

fn crypto<E: std::fmt::Display>(e: E) -> ClientError {
    ClientError::Crypto(e.to_string())
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ClientError::Invalid(format!("worker panicked: {e}")))?
}

/// How long the server may wait for inputs still being uploaded when a job
/// is submitted right after their last bytes are sent.
const AWAIT_INPUTS: Duration = Duration::from_secs(10);

/// Runs a graph job to its end; fails unless it succeeded.
pub async fn run_job(client: &Client, job: &JobSubmission) -> Result<JobInfo> {
    let info = client.submit(JOB_KIND_GRAPH, job.encode(), "").await?;
    wait_job(client, &info).await
}

/// Waits for a submitted job to end; fails unless it succeeded.
async fn wait_job(client: &Client, info: &JobInfo) -> Result<JobInfo> {
    let done = client.wait(&info.job_id, &|_| {}).await?;
    if done.state != JobState::Succeeded as i32 {
        return Err(ClientError::Invalid(format!(
            "job {} ended {:?}: {}",
            done.job_id,
            JobState::try_from(done.state).unwrap_or(JobState::Unspecified),
            done.error
        )));
    }
    Ok(done)
}

/// The bytes of output `name` of a finished job.
pub async fn output(client: &Client, job: &JobInfo, name: &str) -> Result<Vec<u8>> {
    let o = job
        .outputs
        .iter()
        .find(|o| o.name == name)
        .ok_or_else(|| ClientError::Invalid(format!("job has no output `{name}`")))?;
    client.job_output(o, None).await
}

/// A CKKS key holder: its keys (secret included) and the server session
/// made of its evaluation keys.
#[derive(Debug)]
pub struct CkksSession {
    /// Parameters.
    pub params: Arc<CkksParameters>,
    /// The key set (secret key stays here).
    pub keys: Arc<KeySet>,
    /// The session spec uploaded.
    pub spec: SessionSpec,
    /// Its id.
    pub id: ObjectId,
    /// Bytes uploaded to set the session up.
    pub key_bytes: u64,
    /// Key generation time.
    pub keygen: Duration,
    /// Key upload time.
    pub upload: Duration,
}

/// Generates CKKS keys (relinearization and the given rotations) on the
/// client and uploads the evaluation keys and the session spec.
pub async fn ckks_setup(client: &Client, preset: Preset, rotations: &[i64]) -> Result<CkksSession> {
    ckks_setup_with(client, preset, rotations, false).await
}

/// [`ckks_setup`], with the public key uploaded too and named in the
/// session's refresh part when `refresh` (refresh nodes need it).
pub async fn ckks_setup_with(
    client: &Client,
    preset: Preset,
    rotations: &[i64],
    refresh: bool,
) -> Result<CkksSession> {
    let rot = rotations.to_vec();
    let t = Instant::now();
    let (params, keys, mut blobs) = blocking(move || {
        let params = preset.build().map_err(crypto)?;
        let keys = KeySet::generate(&params, &rot, false).map_err(crypto)?;
        let ev = keys.evaluation_keys();
        let mut blobs = vec![];
        if let Some(r) = &ev.relin {
            blobs.push((ObjectKind::CkksRelinKey, r.to_bytes(true)));
        }
        for g in ev.galois.elements().collect::<Vec<_>>() {
            let k = ev.galois.get(g).map_err(crypto)?;
            blobs.push((ObjectKind::CkksGaloisKey, k.to_bytes(true)));
        }
        if refresh {
            blobs.push((ObjectKind::CkksPublicKey, keys.public_key().to_bytes()));
        }
        Ok((params, keys, blobs))
    })
    .await?;
    let keygen = t.elapsed();
    let t = Instant::now();
    let mut spec = SessionSpec {
        params: ParamSpec {
            ckks: Some(CkksParamSpec::Preset(preset)),
            tfhe: None,
        },
        ..SessionSpec::default()
    };
    let mut key_bytes = 0;
    for (kind, bytes) in blobs.drain(..) {
        let id = ObjectId::of(&bytes);
        key_bytes += bytes.len() as u64;
        client
            .upload(rpc::object_kind_name(kind), bytes)
            .hashed(id)
            .await?;
        match kind {
            ObjectKind::CkksRelinKey => spec.relin_key = Some(id),
            ObjectKind::CkksPublicKey => {
                spec.refresh = Some(hecloud_protocol::RefreshSpec {
                    ckks_public_key: Some(id),
                    ..Default::default()
                })
            }
            _ => spec.galois_keys.push(id),
        }
    }
    let enc = spec.encode();
    client.upload(rpc::SESSION_KIND, enc).await?;
    Ok(CkksSession {
        params,
        keys: Arc::new(keys),
        id: spec.id(),
        spec,
        key_bytes,
        keygen,
        upload: t.elapsed(),
    })
}

impl CkksSession {
    /// Encrypts `values` (full slots, zero-padded) at the top level, with the
    /// secret key: the seeded form is half the size of a public-key encryption.
    pub fn encrypt(&self, values: &[f64]) -> Result<Vec<u8>> {
        let enc = Encoder::new(&self.params);
        let pt = enc
            .encode_real(values, self.params.max_level(), self.params.default_scale())
            .map_err(crypto)?;
        Ok(self.keys.encrypt_sk(&pt).map_err(crypto)?.to_bytes())
    }

    /// Encrypts `values` ([`Self::encrypt`]) and uploads them: the object id.
    pub async fn upload_encrypted(&self, client: &Client, values: &[f64]) -> Result<ObjectId> {
        upload_object(client, ObjectKind::CkksCiphertext, self.encrypt(values)?).await
    }

    /// Decodes and decrypts a ciphertext payload.
    pub fn decrypt(&self, bytes: &[u8]) -> Result<Vec<f64>> {
        let ct = Ciphertext::from_bytes(self.params.rlwe(), bytes).map_err(crypto)?;
        let enc = Encoder::new(&self.params);
        enc.decode_real(&self.keys.decrypt(&ct).map_err(crypto)?)
            .map_err(crypto)
    }
}

/// Uploads `bytes` as an object of `kind`, hashed here: its id.
pub async fn upload_object(client: &Client, kind: ObjectKind, bytes: Vec<u8>) -> Result<ObjectId> {
    let id = ObjectId::of(&bytes);
    client
        .upload(rpc::object_kind_name(kind), bytes)
        .hashed(id)
        .await?;
    Ok(id)
}

/// Rotations `rotate_and_sum(·, n)` needs.
pub fn sum_rotations(n: usize) -> Vec<i64> {
    (0..n.trailing_zeros()).map(|i| 1i64 << i).collect()
}

/// Random reals in [-10, 10].
pub fn random_values(count: usize) -> Vec<f64> {
    use rand_core::{OsRng, TryRngCore};
    (0..count)
        .map(|_| {
            let x = OsRng.try_next_u64().expect("OS randomness");
            (x >> 11) as f64 / (1u64 << 53) as f64 * 20.0 - 10.0
        })
        .collect()
}

/// A graph on TFHE integers: `int-sum` (full-width sum of every input, output
/// `sum`), `int-lt` / `int-gt` (output `bit`), `int-min` / `int-max` (output
/// `value`) of two inputs.
pub fn integer_graph(session: ObjectId, op: &str, inputs: Vec<ObjectId>) -> Result<JobSubmission> {
    let mut g = Graph::new();
    let nodes: Vec<_> = (0..inputs.len() as u32).map(|i| g.input(i)).collect();
    let pair = || -> Result<(_, _)> {
        match nodes[..] {
            [a, b] => Ok((a, b)),
            _ => Err(ClientError::Invalid(format!("{op} takes two inputs"))),
        }
    };
    let (name, out) = match op {
        "int-sum" if !nodes.is_empty() => ("sum", g.int_sum(nodes.clone(), true)),
        "int-sum" => return Err(ClientError::Invalid("int-sum takes inputs".into())),
        "int-lt" | "int-gt" => {
            let (a, b) = pair()?;
            let rel = if op == "int-lt" {
                Relation::Lt
            } else {
                Relation::Gt
            };
            ("bit", g.int_compare(a, b, rel))
        }
        "int-min" => {
            let (a, b) = pair()?;
            ("value", g.int_min(a, b))
        }
        "int-max" => {
            let (a, b) = pair()?;
            ("value", g.int_max(a, b))
        }
        other => {
            return Err(ClientError::Invalid(format!(
                "unknown integer op {other:?}"
            )));
        }
    };
    g.output(name, out);
    Ok(JobSubmission {
        session,
        graph: g,
        inputs,
    })
}

/// The mean and variance graph of `count` values (one input ciphertext).
pub fn statistics_graph(session: ObjectId, input: ObjectId, count: usize) -> JobSubmission {
    let slots = count.next_power_of_two() as u32;
    let inv = 1.0 / count as f64;
    let mut g = Graph::new();
    let x = g.input(0);
    let c = g.constant(inv);
    let s = g.rotate_and_sum(x, slots);
    let mean = g.mul(s, c);
    let sq = g.mul(x, x);
    let sq = g.rescale(sq);
    let sqs = g.rotate_and_sum(sq, slots);
    let c2 = g.constant(inv);
    let sq_mean = g.mul(sqs, c2);
    let m2 = g.mul(mean, mean);
    let m2 = g.rescale(m2);
    let var = g.sub(sq_mean, m2);
    // Answers to read, not to compute on: sent with the fewest primes.
    let mean = g.drop_for_decryption(mean);
    let var = g.drop_for_decryption(var);
    g.output("mean", mean);
    g.output("variance", var);
    JobSubmission {
        session,
        graph: g,
        inputs: vec![input],
    }
}

/// CKKS statistics: encrypt `values`, upload, run the mean/variance graph,
/// download, decrypt, compare with the plaintext (relative error ≤ 1e-4).
pub async fn ckks_statistics(
    client: &Client,
    s: &CkksSession,
    values: &[f64],
) -> Result<StepReport> {
    let (sent0, recv0) = client.traffic();
    let t = Instant::now();
    let input = s.upload_encrypted(client, values).await?;
    let job = run_job(client, &statistics_graph(s.id, input, values.len())).await?;
    let mean = s.decrypt(&output(client, &job, "mean").await?)?[0];
    let var = s.decrypt(&output(client, &job, "variance").await?)?[0];
    let time = t.elapsed();
    let n = values.len() as f64;
    let pm = values.iter().sum::<f64>() / n;
    let pv = values.iter().map(|x| x * x).sum::<f64>() / n - pm * pm;
    let rel = |a: f64, b: f64| (a - b).abs() / b.abs().max(1e-12);
    let err = rel(mean, pm).max(rel(var, pv));
    let (sent1, recv1) = client.traffic();
    Ok(StepReport {
        name: format!("CKKS mean + variance of {} reals", values.len()),
        ok: err <= 1e-4,
        detail: format!(
            "mean {mean:.6} (plain {pm:.6}), variance {var:.6} (plain {pv:.6}), rel. error {err:.1e}"
        ),
        time,
        compute: Duration::from_micros(job.compute_micros),
        sent: sent1 - sent0,
        received: recv1 - recv0,
    })
}

/// The deep-computation job: f(x) = (x² + 1)/2 applied `rounds` times
/// (two levels each), more than the preset has levels, with a refresh to
/// the top level whenever the next round would go below the lowest level
/// the session's mask allows; the result returned at the lowest level that
/// decodes with a check. The number
/// of refresh nodes comes back too.
pub fn deep_refresh_graph(
    s: &CkksSession,
    input: ObjectId,
    rounds: usize,
) -> Result<(JobSubmission, usize)> {
    let policy = s
        .spec
        .refresh
        .map(|r| r.mask_policy())
        .ok_or_else(|| ClientError::Invalid("the session has no refresh part".into()))?;
    let top = s.params.max_level();
    let lowest = policy
        .lowest_level(&s.params, s.params.default_scale() * 2.0)
        .filter(|&l| l < top)
        .ok_or_else(|| {
            ClientError::Invalid("this preset has no level to refresh at below its top".into())
        })?;
    let mut g = Graph::new();
    let mut x = g.input(0);
    let (mut level, mut refreshes) = (top, 0);
    for _ in 0..rounds {
        // A round takes two levels (the square's rescale, the product by
        // the real 1/2); refresh while the operand is still at or above the
        // lowest level the mask allows.
        if level < lowest + 2 {
            x = g.refresh(x, top as u32);
            level = top;
            refreshes += 1;
        }
        let sq = g.mul(x, x);
        let sq = g.rescale(sq);
        let half = g.constant(0.5);
        let y = g.mul(sq, half);
        x = g.add(y, half);
        level -= 2;
    }
    // Only decrypted: returned at the lowest level that decodes with a check.
    let out = g.drop_for_decryption(x);
    g.output("y", out);
    Ok((
        JobSubmission {
            session: s.id,
            graph: g,
            inputs: vec![input],
        },
        refreshes,
    ))
}

/// The deep computation through the service: the client answers the
/// server's refresh requests on a key-holder session while the job runs;
/// the result is checked against the plaintext (absolute error ≤ 1e-4).
pub async fn ckks_deep_refresh(
    client: &Client,
    s: &CkksSession,
    values: &[f64],
    rounds: usize,
) -> Result<StepReport> {
    let (sent0, recv0) = client.traffic();
    let t = Instant::now();
    let input = s.upload_encrypted(client, values).await?;
    let sk = hecloud_rlwe::SecretKey::from_coefficients(
        s.params.rlwe(),
        &s.keys.secret_key().export_coefficients(),
    )
    .map_err(crypto)?;
    let responder = Arc::new(
        hecloud_protocol::refresh::RefreshResponder::new().with_ckks(s.params.clone(), sk),
    );
    let session = client.serve_refreshes(responder.clone()).await?;
    let (job, planned) = deep_refresh_graph(s, input, rounds)?;
    let job = run_job(client, &job).await;
    drop(session);
    let job = job?;
    let got = s.decrypt(&output(client, &job, "y").await?)?;
    let time = t.elapsed();
    let want: Vec<f64> = values
        .iter()
        .map(|&v| (0..rounds).fold(v, |x, _| (x * x + 1.0) / 2.0))
        .collect();
    let err = want
        .iter()
        .zip(&got)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let st = responder.stats();
    let (sent1, recv1) = client.traffic();
    Ok(StepReport {
        name: format!(
            "CKKS depth {} on {} levels, refreshed",
            2 * rounds,
            s.params.max_level()
        ),
        ok: err <= 1e-4 && st.ciphertexts == planned as u64,
        detail: format!(
            "{} refreshes in {} round trips ({} to the key holder, {} back), max error {err:.1e}",
            st.ciphertexts,
            st.requests,
            crate::report::bytes(st.bytes_in),
            crate::report::bytes(st.bytes_out)
        ),
        time,
        compute: Duration::from_micros(job.compute_micros),
        sent: sent1 - sent0,
        received: recv1 - recv0,
    })
}

/// The multiply-rotate-sum job: `rotate_and_sum(rescale(x · y), n)`,
/// returned where it ends, or (`for_decryption`: a result that is only
/// decrypted) at the lowest level that decodes with a check.
pub fn mul_rotate_sum_graph(
    session: ObjectId,
    x: ObjectId,
    y: ObjectId,
    n: usize,
    for_decryption: bool,
) -> JobSubmission {
    let mut g = Graph::new();
    let a = g.input(0);
    let b = g.input(1);
    let p = g.mul(a, b);
    let p = g.rescale(p);
    let s = g.rotate_and_sum(p, n as u32);
    let s = if for_decryption {
        g.drop_for_decryption(s)
    } else {
        s
    };
    g.output("sum", s);
    JobSubmission {
        session,
        graph: g,
        inputs: vec![x, y],
    }
}

/// Timings of one multiply-rotate-sum job.
#[derive(Debug, Clone, Copy)]
pub struct MrsTiming {
    /// Client encryption (not service overhead: the client's own work).
    pub encrypt: Duration,
    /// Serialize + upload + submit + wait + download (service + compute).
    pub service: Duration,
    /// Homomorphic compute on the server.
    pub compute: Duration,
    /// Decrypt + check.
    pub decrypt: Duration,
    /// Whether the result matched the plaintext.
    pub ok: bool,
}

/// One multiply-rotate-sum job on fresh random vectors of `n` values; the
/// encrypted inner product is checked against the plaintext.
pub async fn mul_rotate_sum(client: &Client, s: &CkksSession, n: usize) -> Result<MrsTiming> {
    let xs = random_values(n);
    let ys = random_values(n);
    let t = Instant::now();
    let (cx, cy) = {
        let (a, b) = (xs.clone(), ys.clone());
        let keys = s.keys.clone();
        let params = s.params.clone();
        blocking(move || {
            let enc = Encoder::new(&params);
            let top = params.max_level();
            let e = |v: &[f64]| -> Result<Ciphertext> {
                let pt = enc
                    .encode_real(v, top, params.default_scale())
                    .map_err(crypto)?;
                keys.encrypt_sk(&pt).map_err(crypto)
            };
            Ok((e(&a)?, e(&b)?))
        })
        .await?
    };
    let encrypt = t.elapsed();
    let t = Instant::now();
    // Serialized as they are sent: the upload starts with the first limb.
    let kind = rpc::object_kind_name(ObjectKind::CkksCiphertext);
    // Kept until the end: freeing them is the client's work, not the
    // upload's.
    let (cx, cy) = (Arc::new(cx), Arc::new(cy));
    // The job is submitted as soon as every byte of both is sent: the server
    // starts it once they have arrived, while it stores them.
    let (sent_x, id_x) = tokio::sync::oneshot::channel::<String>();
    let (sent_y, id_y) = tokio::sync::oneshot::channel::<String>();
    let submit = async {
        // A dropped sender: that upload stopped, and says why below.
        let (Ok(hx), Ok(hy)) = (id_x.await, id_y.await) else {
            return None;
        };
        let id = |hex: &str| {
            ObjectId::from_hex(hex)
                .ok_or_else(|| ClientError::Integrity(format!("bad object id {hex}")))
        };
        Some(
            async {
                let (ix, iy) = (id(&hx)?, id(&hy)?);
                let job = mul_rotate_sum_graph(s.id, ix, iy, n, true);
                let info = client
                    .submit_awaiting_inputs(JOB_KIND_GRAPH, job.encode(), "", AWAIT_INPUTS)
                    .await?;
                Ok::<_, ClientError>((info, ix, iy))
            }
            .await,
        )
    };
    let (ux, uy, submitted) = tokio::join!(
        client
            .upload(kind, cx.clone())
            .announce(sent_x)
            .into_future(),
        client
            .upload(kind, cy.clone())
            .announce(sent_y)
            .into_future(),
        submit
    );
    // Acknowledged, so stored, under the ids announced.
    let (ux, uy) = (ux?, uy?);
    let (info, ix, iy) =
        submitted.ok_or_else(|| ClientError::Invalid("an upload stopped unannounced".into()))??;
    if ux.object_id != ix.to_hex() || uy.object_id != iy.to_hex() {
        return Err(ClientError::Integrity(
            "the objects stored are not those the job was submitted with".into(),
        ));
    }
    let job = wait_job(client, &info).await?;
    let out = output(client, &job, "sum").await?;
    let service = t.elapsed();
    let t = Instant::now();
    let got = s.decrypt(&out)?[0];
    let want: f64 = xs.iter().zip(&ys).map(|(a, b)| a * b).sum();
    drop((cx, cy));
    let decrypt = t.elapsed();
    // Best effort: the inputs and output are not needed any more.
    for id in [ix.to_hex(), iy.to_hex()] {
        let _ = client.delete(&id).await;
    }
    Ok(MrsTiming {
        encrypt,
        service,
        compute: Duration::from_micros(job.compute_micros),
        decrypt,
        ok: (got - want).abs() <= 1e-3 * want.abs().max(1.0),
    })
}

/// A TFHE key holder: the engine with its client key, and the session made
/// of its server key.
#[derive(Debug)]
pub struct TfheSession {
    /// Client + server keys.
    pub engine: Arc<TfheEngine>,
    /// The client key's id, which the objects carry.
    pub key: KeyId,
    /// Session id.
    pub id: ObjectId,
    /// Server key bytes uploaded.
    pub key_bytes: u64,
    /// Key generation time.
    pub keygen: Duration,
}

/// Generates TFHE keys on the client and uploads the server key and session.
pub async fn tfhe_setup(client: &Client) -> Result<TfheSession> {
    let t = Instant::now();
    let (engine, key, sk) = blocking(|| {
        let e = TfheEngine::generate();
        let ck = e
            .client_key()
            .expect("a generated engine has its client key");
        let key = tfhe_key_id(ck).map_err(crypto)?;
        let sk = Object::TfheServerKey(Box::new(e.server_key().clone()), key).to_bytes();
        Ok((e, key, sk))
    })
    .await?;
    let keygen = t.elapsed();
    let spec = tfhe_session_spec(ObjectId::of(&sk));
    let key_bytes = sk.len() as u64;
    client
        .upload(rpc::object_kind_name(ObjectKind::TfheServerKey), sk)
        .await?;
    client.upload(rpc::SESSION_KIND, spec.encode()).await?;
    Ok(TfheSession {
        engine: Arc::new(engine),
        key,
        id: spec.id(),
        key_bytes,
        keygen,
    })
}

fn random_u32s(n: usize) -> Vec<u32> {
    use rand_core::{OsRng, TryRngCore};
    (0..n)
        .map(|_| OsRng.try_next_u32().expect("OS randomness"))
        .collect()
}

async fn upload_uint(client: &Client, s: &TfheSession, v: u32, width: usize) -> Result<ObjectId> {
    let (e, key) = (s.engine.clone(), s.key);
    let bytes = blocking(move || {
        let u = EncryptedUint::encrypt_u128(&*e, u128::from(v), width).map_err(crypto)?;
        Ok(Object::TfheUint(u, key).to_bytes())
    })
    .await?;
    let id = ObjectId::of(&bytes);
    client
        .upload(rpc::object_kind_name(ObjectKind::TfheUint), bytes)
        .hashed(id)
        .await?;
    Ok(id)
}

/// TFHE: encrypted full-width sum of `count` random `width`-bit numbers.
pub async fn tfhe_sum(
    client: &Client,
    s: &TfheSession,
    count: usize,
    width: usize,
) -> Result<StepReport> {
    let (sent0, recv0) = client.traffic();
    let mask = if width >= 32 {
        u32::MAX
    } else {
        (1u32 << width) - 1
    };
    let xs: Vec<u32> = random_u32s(count).into_iter().map(|x| x & mask).collect();
    let t = Instant::now();
    let mut ids = vec![];
    for &x in &xs {
        ids.push(upload_uint(client, s, x, width).await?);
    }
    let mut g = Graph::new();
    let inputs: Vec<_> = (0..count as u32).map(|i| g.input(i)).collect();
    let sum = g.int_sum(inputs, true);
    g.output("sum", sum);
    let job = run_job(
        client,
        &JobSubmission {
            session: s.id,
            graph: g,
            inputs: ids,
        },
    )
    .await?;
    let bytes = output(client, &job, "sum").await?;
    let e = s.engine.clone();
    let got = blocking(
        move || match tfhe_params().decode(ObjectKind::TfheUint, &bytes) {
            Ok(Object::TfheUint(u, _)) => u.decrypt_u128(&*e).map_err(crypto),
            Ok(_) => Err(ClientError::Integrity("sum is not an integer".into())),
            Err(err) => Err(crypto(err)),
        },
    )
    .await?;
    let want: u128 = xs.iter().map(|&x| u128::from(x)).sum();
    let (sent1, recv1) = client.traffic();
    Ok(StepReport {
        name: format!("TFHE sum of {count} × {width}-bit"),
        ok: got == want,
        detail: format!("{xs:?} → {got} (plain {want})"),
        time: t.elapsed(),
        compute: Duration::from_micros(job.compute_micros),
        sent: sent1 - sent0,
        received: recv1 - recv0,
    })
}

/// TFHE: encrypted `a < b` of two random `width`-bit numbers.
pub async fn tfhe_compare(client: &Client, s: &TfheSession, width: usize) -> Result<StepReport> {
    let (sent0, recv0) = client.traffic();
    let mask = if width >= 32 {
        u32::MAX
    } else {
        (1u32 << width) - 1
    };
    let v = random_u32s(2);
    let (a, b) = (v[0] & mask, v[1] & mask);
    let t = Instant::now();
    let ia = upload_uint(client, s, a, width).await?;
    let ib = upload_uint(client, s, b, width).await?;
    let mut g = Graph::new();
    let (x, y) = (g.input(0), g.input(1));
    let lt = g.int_compare(x, y, Relation::Lt);
    g.output("lt", lt);
    let job = run_job(
        client,
        &JobSubmission {
            session: s.id,
            graph: g,
            inputs: vec![ia, ib],
        },
    )
    .await?;
    let bytes = output(client, &job, "lt").await?;
    let e = s.engine.clone();
    let got = blocking(
        move || match tfhe_params().decode(ObjectKind::TfheBit, &bytes) {
            Ok(Object::TfheBit(w, _)) => e.decrypt_bit(&w).map_err(crypto),
            Ok(_) => Err(ClientError::Integrity("comparison is not a bit".into())),
            Err(err) => Err(crypto(err)),
        },
    )
    .await?;
    let (sent1, recv1) = client.traffic();
    Ok(StepReport {
        name: format!("TFHE compare, {width}-bit"),
        ok: got == (a < b),
        detail: format!("{a} < {b} is {got} (plain {})", a < b),
        time: t.elapsed(),
        compute: Duration::from_micros(job.compute_micros),
        sent: sent1 - sent0,
        received: recv1 - recv0,
    })
}
