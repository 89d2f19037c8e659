//! `hecloud demo`: the end-to-end tour on embedded defaults. It starts a
//! server on loopback (TLS, temporary store), then acts as a client: keys are
//! generated here and only evaluation keys and ciphertexts are uploaded; the
//! server computes; results are downloaded, decrypted and checked against a
//! plaintext computation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hecloud_bench::embedded::Embedded;
use hecloud_bench::report::{Table, bytes};
use hecloud_bench::workload::{self, StepReport};
use hecloud_ckks::Preset;

/// Two vectors of integers below 16 encrypted whole (one per slot), their
/// sum, product and comparison computed on the server, decrypted and checked
/// against plain arithmetic mod t.
async fn bgv_step(client: &hecloud_client::Client) -> anyhow::Result<Vec<StepReport>> {
    use hecloud_client::bgv;
    use hecloud_client::keys::{self, BgvKeyDir};
    use hecloud_protocol::{ObjectId, rpc};
    const COUNT: usize = 1000;
    const BOUND: u64 = 16;
    let dir = std::env::temp_dir().join(format!("hecloud-demo-bgv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let t = Instant::now();
    let r = keys::parse_bgv_preset("bgv-n14").and_then(|p| keys::bgv_keygen(&dir, p, false, false));
    let result = async {
        r?;
        let keygen = t.elapsed();
        let kd = BgvKeyDir::open(&dir)?;
        let t = Instant::now();
        let mut key_bytes = 0;
        for (p, kind) in kd.uploads()? {
            let b = std::fs::read(p)?;
            key_bytes += b.len() as u64;
            client.upload(kind, Arc::new(b)).await?;
        }
        println!(
            "  keygen {}, {} of evaluation keys uploaded in {}",
            ms(keygen),
            bytes(key_bytes),
            ms(t.elapsed())
        );
        let x: Vec<u64> = workload::random_values(COUNT)
            .iter()
            .map(|v| (v.abs() * 1.6) as u64 % BOUND)
            .collect();
        let y: Vec<u64> = workload::random_values(COUNT)
            .iter()
            .map(|v| (v.abs() * 1.6 + 3.0) as u64 % BOUND)
            .collect();
        let mut ids = vec![];
        for v in [&x, &y] {
            let ct = kd.encrypt(v)?;
            let o = client
                .upload(
                    rpc::object_kind_name(hecloud_protocol::ObjectKind::BgvCiphertext),
                    Arc::new(ct),
                )
                .await?;
            ids.push(ObjectId::from_hex(&o.object_id).ok_or_else(|| anyhow::anyhow!("object id"))?);
        }
        let t_mod = kd.t();
        let mut steps = vec![];
        for (op, name, want) in [
            (
                "bgv-sum",
                "BGV sum of two integer vectors",
                x.iter()
                    .zip(&y)
                    .map(|(a, b)| (a + b) % t_mod)
                    .collect::<Vec<_>>(),
            ),
            (
                "bgv-mul",
                "BGV product (relinearized)",
                x.iter().zip(&y).map(|(a, b)| a * b % t_mod).collect(),
            ),
            (
                "bgv-lt",
                "BGV comparison x < y (values < 16)",
                x.iter().zip(&y).map(|(a, b)| u64::from(a < b)).collect(),
            ),
        ] {
            let t = Instant::now();
            let (s0, r0) = client.traffic();
            let job = bgv::graph(kd.session()?, op, ids.clone(), BOUND)?;
            let (j, out) = bgv::run(client, &kd, &job).await?;
            let (s1, r1) = client.traffic();
            let ok = out.first().is_some_and(|o| o[..COUNT] == want[..]);
            let r = StepReport {
                name: name.into(),
                ok,
                detail: format!(
                    "{COUNT} slots, first {:?} → {:?}",
                    (x[0], y[0]),
                    out.first().map(|o| o[0])
                ),
                time: t.elapsed(),
                compute: Duration::from_micros(j.compute_micros),
                sent: s1 - s0,
                received: r1 - r0,
            };
            println!("  {}: {}", r.name, r.detail);
            steps.push(r);
        }
        anyhow::Ok(steps)
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn ms(d: Duration) -> String {
    if d >= Duration::from_secs(10) {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{:.0} ms", d.as_secs_f64() * 1e3)
    }
}

/// Runs the tour, prints the summary, and fails if any check failed.
/// The encryption proxy in front of the server: the proxy holds the
/// tenant's keys (sealed at rest, a plain-process enclave here, so
/// unattested and allowed explicitly), the client sends plaintext and a
/// graph in one request and gets plaintext back; the server sees only
/// ciphertexts.
async fn proxy_step(emb: &Embedded) -> anyhow::Result<StepReport> {
    const COUNT: usize = 1000;
    let dir = std::env::temp_dir().join(format!("hecloud-demo-proxy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let r = proxy_run(emb, &dir, COUNT).await;
    let _ = std::fs::remove_dir_all(&dir);
    r
}

async fn proxy_run(
    emb: &Embedded,
    dir: &std::path::Path,
    count: usize,
) -> anyhow::Result<StepReport> {
    use hecloud_proxy::{ProxyClient, RunInput};
    let t = Instant::now();
    // The tenant's keys are made here, sealed into the proxy's store, and
    // the clear folder is removed: from now on only the proxy has them.
    let (proxy, _, token) = hecloud_bench::proxy::start_proxy(emb, dir, Preset::N14).await?;
    println!(
        "  proxy {} (plain-process enclave: unattested, allowed for the demo); keys sealed in {}",
        proxy.url(),
        ms(t.elapsed())
    );
    let client = ProxyClient::connect(&proxy.url(), &token, proxy.ca_pem.as_deref(), true).await?;
    let x = workload::random_values(count);
    let y: Vec<f64> = workload::random_values(count)
        .iter()
        .map(|v| v / 4.0)
        .collect();
    let mut g = hecloud_protocol::Graph::new();
    let (a, b) = (g.input(0), g.input(1));
    let p = g.mul(a, b);
    let p = g.rescale(p);
    let s = g.add(a, b);
    g.output("product", p);
    g.output("sum", s);
    let t = Instant::now();
    let r = client
        .run(
            vec![RunInput::Values(x.clone()), RunInput::Values(y.clone())],
            &g,
            count,
        )
        .await?;
    let time = t.elapsed();
    let worst = |name: &str, f: &dyn Fn(f64, f64) -> f64| {
        r.outputs
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, got)| {
                x.iter()
                    .zip(&y)
                    .zip(got)
                    .map(|((a, b), v)| (f(*a, *b) - v).abs())
                    .fold(0.0, f64::max)
            })
            .unwrap_or(f64::INFINITY)
    };
    let (e_mul, e_add) = (worst("product", &|a, b| a * b), worst("sum", &|a, b| a + b));
    proxy.stop().await?;
    Ok(StepReport {
        name: "CKKS x·y and x + y through the proxy (plaintext in and out)".into(),
        ok: e_mul < 1e-3 && e_add < 1e-3,
        detail: format!(
            "{count} reals each, {} enclave crossings; max error {e_mul:.1e} (product), {e_add:.1e} (sum)",
            r.crossings
        ),
        time,
        compute: Duration::ZERO,
        sent: 2 * 8 * count as u64,
        received: 2 * 8 * count as u64,
    })
}

pub fn run() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(tour())
}

async fn tour() -> anyhow::Result<()> {
    println!(
        "hecloud demo: a server on loopback, this process as its client; every result is checked \
         against a plaintext reference.\n"
    );
    let t = Instant::now();
    let emb = Embedded::start(2, 16).await?;
    let client = emb.client().await?;
    let info = client.info().await?;
    println!(
        "[server] {} (TLS, local CA), tenant `{}`, protocol v{}, started in {}",
        emb.server.url(),
        info.tenant,
        info.protocol_version,
        ms(t.elapsed())
    );
    let mut steps: Vec<StepReport> = vec![];

    // Key-holder session: the server calls the client back and waits.
    let session = client
        .open_session(
            &[hecloud_protocol::rpc::CALLBACK_ECHO],
            Arc::new(|_, payload: &[u8]| Ok(payload.to_vec())),
        )
        .await?;
    let t = Instant::now();
    let (s0, r0) = client.traffic();
    let ping = b"hecloud callback".to_vec();
    let job = client
        .submit(hecloud_protocol::rpc::JOB_KIND_ECHO, ping.clone(), "")
        .await?;
    let job = client.wait(&job.job_id, &|_| {}).await?;
    let echoed = match job.outputs.first() {
        Some(o) => client.job_output(o, None).await?,
        None => vec![],
    };
    let (s1, r1) = client.traffic();
    println!(
        "\n[session] server → key holder callback round trip: {}",
        if echoed == ping { "ok" } else { "FAILED" }
    );
    steps.push(StepReport {
        name: "key-holder callback (session stream)".into(),
        ok: echoed == ping,
        detail: format!("{} bytes echoed", echoed.len()),
        time: t.elapsed(),
        compute: Duration::from_micros(job.compute_micros),
        sent: s1 - s0,
        received: r1 - r0,
    });
    drop(session);

    // CKKS statistics.
    const COUNT: usize = 1000;
    println!("\n[ckks] keygen (N = 2^14, 128-bit preset), upload evaluation keys …");
    let ck = workload::ckks_setup(
        &client,
        Preset::N14,
        &workload::sum_rotations(COUNT.next_power_of_two()),
    )
    .await?;
    println!(
        "  keygen {}, {} of evaluation keys uploaded in {}",
        ms(ck.keygen),
        bytes(ck.key_bytes),
        ms(ck.upload)
    );
    let values = workload::random_values(COUNT);
    let r = workload::ckks_statistics(&client, &ck, &values).await?;
    println!("  {}: {}", r.name, r.detail);
    steps.push(r);

    // A computation deeper than the parameters: the server refreshes
    // through this client (mask, decrypt, encrypt again, unmask).
    println!(
        "\n[refresh] a CKKS computation deeper than its parameters, refreshed by this client …"
    );
    let deep = workload::ckks_setup_with(&client, Preset::N14, &[], true).await?;
    // In [−1, 1], where (x² + 1)/2 stays in [1/2, 1].
    let unit: Vec<f64> = values.iter().map(|v| (v / 16.0).clamp(-1.0, 1.0)).collect();
    let r = workload::ckks_deep_refresh(&client, &deep, &unit, 6).await?;
    println!("  {}: {} in {}", r.name, r.detail, ms(r.time));
    steps.push(r);

    // TFHE sum and compare.
    println!("\n[tfhe] keygen (TFHE-rs shortint, 128-bit), upload the server key …");
    let t = Instant::now();
    let tf = workload::tfhe_setup(&client).await?;
    println!(
        "  keygen {}, {} server key uploaded; setup {}",
        ms(tf.keygen),
        bytes(tf.key_bytes),
        ms(t.elapsed())
    );
    let r = workload::tfhe_sum(&client, &tf, 4, 32).await?;
    println!("  {}: {}", r.name, r.detail);
    steps.push(r);
    let r = workload::tfhe_compare(&client, &tf, 32).await?;
    println!("  {}: {}", r.name, r.detail);
    steps.push(r);

    // BGV integer vectors: added, multiplied and compared on the server.
    println!("\n[bgv] keygen (bgv-n14, 128-bit preset), upload the relinearization key …");
    steps.extend(bgv_step(&client).await?);

    // The proxy: plaintext in, plaintext out; the server never sees either.
    println!("\n[proxy] the encryption proxy next to the server holds the keys …");
    let r = proxy_step(&emb).await?;
    println!("  {}: {} in {}", r.name, r.detail, ms(r.time));
    steps.push(r);

    let mut table = Table::new(
        "demo",
        &[
            "operation",
            "result",
            "time",
            "server compute",
            "sent",
            "received",
        ],
    );
    for s in &steps {
        table.push(vec![
            s.name.clone(),
            if s.ok { "ok" } else { "FAILED" }.into(),
            ms(s.time),
            ms(s.compute),
            bytes(s.sent),
            bytes(s.received),
        ]);
    }
    print!("\n{}", table.render());
    let (sent, recv) = client.traffic();
    println!(
        "total: {} sent (keys included), {} received; the server never saw a secret key or a plaintext.",
        bytes(sent),
        bytes(recv)
    );
    emb.server.stop().await?;
    let failed: Vec<_> = steps
        .iter()
        .filter(|s| !s.ok)
        .map(|s| s.name.clone())
        .collect();
    anyhow::ensure!(failed.is_empty(), "checks failed: {}", failed.join(", "));
    Ok(())
}
