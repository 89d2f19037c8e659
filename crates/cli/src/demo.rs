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

fn ms(d: Duration) -> String {
    if d >= Duration::from_secs(10) {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{:.0} ms", d.as_secs_f64() * 1e3)
    }
}

/// Runs the tour, prints the summary, and fails if any check failed.
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
