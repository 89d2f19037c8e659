//! `hecloud bench proxy`: the research's paper D experiment (issue 27).
//! Full-slot real vectors at the 128-bit N = 2^16 and N = 2^17 presets go
//! end to end (encrypt, send, one server operation, return, decrypt) on
//! the client's best path without a proxy and through the encryption
//! proxy next to the server, on loopback and on the default emulated link
//! (200 Mbit/s up, 1 Gbit/s down, 20 ms round trip, [`crate::netem`]).
//!
//! - **Client side**: seeded secret-key encryption (half-size uploads),
//!   both inputs uploaded at once and the job submitted while they are
//!   still arriving, the output downloaded and decrypted here.
//! - **Through the proxy**: plaintext and the graph in one request
//!   ([`hecloud_proxy::ProxyClient::run`]), plaintext out; the proxy and
//!   the server share a machine, so only the client's link is shaped.
//!
//! On both paths the graph drops its output to the primes decryption
//! reads and the one that checks them ([`Graph::drop_for_decryption`])
//! before the server stores it:
//! a client that decrypts the result right away (either way) has no use
//! for the other limbs, which at N = 2^17 are 95 MB of output to store and
//! move.
//!
//! Also the enclave crossings of one request fused into one call against
//! one call per operation ([`hecloud_proxy::measure_fusion`]). With the
//! plain-process enclave a crossing costs nothing, so the time gain is
//! near zero here; in an SGX enclave each crossing costs microseconds.
//!
//! Writes `proxy.csv` and `proxy.png`; headline `RESULT proxy
//! n16_speedup=… n17_speedup=… fused_gain_pct=… bytes_client_side=…
//! bytes_via_proxy=…` (the speedups on the emulated link, addition; bytes
//! at N = 2^16, both directions).

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hecloud_ckks::keys::encrypt_real_sk_pieces;
use hecloud_ckks::{Encoder, Preset};
use hecloud_client::Client;
use hecloud_protocol::rpc::{JOB_KIND_GRAPH, JobState};
use hecloud_protocol::{Graph, JobSubmission, Message, ObjectId};
use hecloud_proxy::service::DEFAULT_MAX_VECTORS;
use hecloud_proxy::{
    EnclaveOp, PlainEnclave, ProxyClient, ProxyConfig, ProxyTenant, RunInput, SealedKeyStore,
    SealingKey, TlsSource, Zeroizing,
};

use crate::embedded::{Embedded, random_token};
use crate::netem::{self, Link, Method, Relay};
use crate::report::{BenchOptions, ResultLine, Table, bytes, cpu_name};
use crate::workload::{self, CkksSession};

/// The server operation of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Add,
    Mul,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Mul => "mul",
        }
    }

    /// The operation on two fresh ciphertexts, its output dropped to the
    /// primes decryption reads: both paths decrypt it right away, so
    /// neither stores or moves the limbs decryption would not read.
    fn graph(self) -> Graph {
        let mut g = Graph::new();
        let (a, b) = (g.input(0), g.input(1));
        let y = match self {
            Op::Add => g.add(a, b),
            Op::Mul => {
                let m = g.mul(a, b);
                g.rescale(m)
            }
        };
        let y = g.drop_for_decryption(y);
        g.output("y", y);
        g
    }

    fn clear(self, a: f64, b: f64) -> f64 {
        match self {
            Op::Add => a + b,
            Op::Mul => a * b,
        }
    }
}

/// One measured configuration.
struct Row {
    preset: Preset,
    link: &'static str,
    op: Op,
    client_side: Duration,
    via_proxy: Duration,
    bytes_client_side: u64,
    bytes_via_proxy: u64,
    max_error: f64,
}

/// Bytes through a relay since its recording started, both directions.
fn relay_bytes(relay: &Relay) -> u64 {
    let t = relay.take_traffic();
    t.to_target
        .iter()
        .chain(&t.from_target)
        .map(|c| c.bytes)
        .sum()
}

fn worst_error(x: &[f64], y: &[f64], got: &[f64], op: Op) -> f64 {
    x.iter()
        .zip(y)
        .zip(got)
        .map(|((a, b), v)| (op.clear(*a, *b) - v).abs())
        .fold(0.0, f64::max)
}

/// The client's best path: seeded encryption a limb at a time, both
/// inputs side by side, both uploads at once, the job submitted while they
/// arrive, the output decrypted here.
async fn client_side(
    client: &Client,
    s: &CkksSession,
    x: &[f64],
    y: &[f64],
    op: Op,
) -> anyhow::Result<(Duration, Vec<f64>)> {
    let t = Instant::now();
    let enc = Encoder::new(&s.params);
    let level = s.params.max_level();
    let encrypt = |v: &[f64]| -> anyhow::Result<Arc<Vec<u8>>> {
        let mut out = Vec::with_capacity(s.params.rlwe().seeded_ciphertext_bytes(level));
        encrypt_real_sk_pieces(&s.params, s.keys.secret_key(), &enc, v, level, |p| {
            out.extend_from_slice(&p)
        })?;
        Ok(Arc::new(out))
    };
    let (a, b) = rayon::join(|| encrypt(x), || encrypt(y));
    let (a, b) = (a?, b?);
    let job = JobSubmission {
        session: s.id,
        graph: op.graph(),
        inputs: vec![ObjectId::of(&a), ObjectId::of(&b)],
    };
    let (ua, ub, j) = tokio::join!(
        client.upload("ckks.ciphertext", a).into_future(),
        client.upload("ckks.ciphertext", b).into_future(),
        client.submit_awaiting_inputs(JOB_KIND_GRAPH, job.encode(), "", Duration::from_secs(60))
    );
    ua?;
    ub?;
    let j = client.wait(&j?.job_id, &|_| {}).await?;
    anyhow::ensure!(j.state == JobState::Succeeded as i32, "job failed: {j:?}");
    let out = client.job_output(&j.outputs[0], None).await?;
    let ct = hecloud_rlwe::Ciphertext::from_bytes(s.params.rlwe(), &out)?;
    let got = enc.decode_real(&s.keys.decrypt(&ct)?)?;
    Ok((t.elapsed(), got))
}

async fn via_proxy(
    proxy: &ProxyClient,
    x: &[f64],
    y: &[f64],
    op: Op,
) -> anyhow::Result<(Duration, Vec<f64>)> {
    let t = Instant::now();
    let r = proxy
        .run(
            vec![RunInput::Values(x.to_vec()), RunInput::Values(y.to_vec())],
            &op.graph(),
            x.len(),
        )
        .await?;
    let got = r
        .outputs
        .into_iter()
        .next()
        .map(|(_, _, v)| v)
        .ok_or_else(|| anyhow::anyhow!("the proxy returned no output"))?;
    Ok((t.elapsed(), got))
}

/// A proxy in front of `emb` (a plain-process enclave, its files under
/// `dir`) holding a fresh `preset` key folder of the embedded tenant
/// `demo`: made here, sealed into the proxy's store, the clear copy
/// removed. Returns the proxy, its enclave and the client token.
pub async fn start_proxy(
    emb: &Embedded,
    dir: &std::path::Path,
    preset: Preset,
) -> anyhow::Result<(hecloud_proxy::RunningProxy, Arc<PlainEnclave>, String)> {
    let key_file = dir.join("sealing.key");
    SealingKey::generate()?.write_file(&key_file)?;
    let enclave = Arc::new(PlainEnclave::from_key_file(&key_file)?);
    let clear = dir.join("clear-keys");
    hecloud_client::keys::keygen(&clear, preset, &[])?;
    SealedKeyStore::new(dir.join("store")).seal_folder_in(enclave.as_ref(), "demo", &clear)?;
    std::fs::remove_dir_all(&clear)?;
    let token = random_token();
    let proxy = hecloud_proxy::service::start(
        ProxyConfig {
            listen: "127.0.0.1:0".parse()?,
            server_url: emb.server.url(),
            server_ca_pem: emb.server.ca_pem.clone(),
            store_dir: dir.join("store"),
            tls: TlsSource::Generated(dir.join("tls")),
            tenants: vec![ProxyTenant::new("demo", &token, &emb.token)?],
            max_vectors: DEFAULT_MAX_VECTORS,
        },
        enclave.clone(),
    )
    .await?;
    Ok((proxy, enclave, token))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Every configuration of one preset: `reps` runs each, medians.
async fn preset_rows(
    emb: &Embedded,
    preset: Preset,
    reps: usize,
    fusion: &mut Option<hecloud_proxy::FusionReport>,
) -> anyhow::Result<Vec<Row>> {
    let dir = tempfile::tempdir()?;
    let direct = emb.client().await?;
    let s = workload::ckks_setup(&direct, preset, &[]).await?;
    let (proxy, enclave, token) = start_proxy(emb, dir.path(), preset).await?;
    let slots = s.params.slots();
    let x: Vec<f64> = workload::random_values(slots);
    let y: Vec<f64> = workload::random_values(slots)
        .iter()
        .map(|v| v / 8.0)
        .collect();
    let mut rows = vec![];
    for (link, method) in [("loopback", Method::None), ("link", Method::Auto)] {
        for op in [Op::Add, Op::Mul] {
            let mut row = Row {
                preset,
                link,
                op,
                client_side: Duration::ZERO,
                via_proxy: Duration::ZERO,
                bytes_client_side: 0,
                bytes_via_proxy: 0,
                max_error: 0.0,
            };
            // One relay at a time: the kernel shapes lo for one only.
            {
                let relay = netem::shaped_relay(emb.server.addr, Link::DEFAULT, method).await?;
                let client = Client::connect(
                    &format!("https://localhost:{}", relay.addr().port()),
                    &emb.token,
                    emb.server.ca_pem.as_deref(),
                )
                .await?;
                client_side(&client, &s, &x, &y, op).await?; // warm-up
                let mut times = vec![];
                for _ in 0..reps {
                    relay.record();
                    let (t, got) = client_side(&client, &s, &x, &y, op).await?;
                    row.bytes_client_side = relay_bytes(&relay);
                    row.max_error = row.max_error.max(worst_error(&x, &y, &got, op));
                    times.push(t);
                }
                row.client_side = median(times);
            }
            {
                let relay = netem::shaped_relay(proxy.addr, Link::DEFAULT, method).await?;
                let client = ProxyClient::connect(
                    &format!("https://localhost:{}", relay.addr().port()),
                    &token,
                    proxy.ca_pem.as_deref(),
                    true,
                )
                .await?;
                via_proxy(&client, &x, &y, op).await?; // warm-up (the tenant's first request)
                let mut times = vec![];
                for _ in 0..reps {
                    relay.record();
                    let (t, got) = via_proxy(&client, &x, &y, op).await?;
                    row.bytes_via_proxy = relay_bytes(&relay);
                    row.max_error = row.max_error.max(worst_error(&x, &y, &got, op));
                    times.push(t);
                }
                row.via_proxy = median(times);
            }
            println!(
                "  {} {link} {}: client side {:.0} ms, via proxy {:.0} ms",
                preset.name(),
                op.name(),
                row.client_side.as_secs_f64() * 1e3,
                row.via_proxy.as_secs_f64() * 1e3
            );
            rows.push(row);
        }
    }
    if fusion.is_none() {
        // The crossing of one request's inputs: both encrypted in one
        // call, or in one call each.
        let batch = vec![
            EnclaveOp::EncryptReal {
                tenant: "demo".into(),
                values: Zeroizing::new(x.clone()),
            },
            EnclaveOp::EncryptReal {
                tenant: "demo".into(),
                values: Zeroizing::new(y.clone()),
            },
        ];
        *fusion = Some(hecloud_proxy::measure_fusion(enclave.as_ref(), &batch)?);
    }
    proxy.stop().await?;
    Ok(rows)
}

/// Runs the experiment.
pub fn run(opts: &BenchOptions) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(bench(opts))
}

async fn bench(opts: &BenchOptions) -> anyhow::Result<()> {
    let presets: &[Preset] = if opts.quick {
        &[Preset::N14]
    } else {
        &[Preset::N16, Preset::N17]
    };
    let reps = if opts.quick { 1 } else { 3 };
    println!(
        "proxy: end to end, client side vs through the proxy ({}; {} thread(s) in this process's pool)",
        cpu_name(),
        rayon::current_num_threads()
    );
    let emb = Embedded::start(2, 16).await?;
    let mut rows = vec![];
    let mut fusion = None;
    for &p in presets {
        rows.extend(preset_rows(&emb, p, reps, &mut fusion).await?);
    }
    let mut table = Table::new(
        "proxy",
        &[
            "preset",
            "link",
            "op",
            "client side ms",
            "via proxy ms",
            "speedup",
            "bytes client side",
            "bytes via proxy",
            "max error",
        ],
    );
    for r in &rows {
        table.push(vec![
            r.preset.name().into(),
            r.link.into(),
            r.op.name().into(),
            format!("{:.1}", r.client_side.as_secs_f64() * 1e3),
            format!("{:.1}", r.via_proxy.as_secs_f64() * 1e3),
            format!(
                "{:.2}",
                r.client_side.as_secs_f64() / r.via_proxy.as_secs_f64()
            ),
            r.bytes_client_side.to_string(),
            r.bytes_via_proxy.to_string(),
            format!("{:.1e}", r.max_error),
        ]);
    }
    println!("\n{}", table.render());
    std::fs::create_dir_all(&opts.out_dir)?;
    table.write_csv(&opts.out_dir)?;
    plot(&rows, &opts.out_dir.join("proxy.png"))?;
    let speedup = |p: Preset| {
        rows.iter()
            .find(|r| r.preset == p && r.link == "link" && r.op == Op::Add)
            .map(|r| r.client_side.as_secs_f64() / r.via_proxy.as_secs_f64())
    };
    let first = rows
        .iter()
        .find(|r| r.link == "link" && r.op == Op::Add)
        .ok_or_else(|| anyhow::anyhow!("no row on the emulated link"))?;
    let mut line = ResultLine::new("proxy");
    let f = fusion.ok_or_else(|| anyhow::anyhow!("no fusion measurement"))?;
    let gain = 100.0 * (1.0 - f.fused_time.as_secs_f64() / f.separate_time.as_secs_f64());
    match (speedup(Preset::N16), speedup(Preset::N17)) {
        (Some(a), Some(b)) => {
            line.push_f64("n16_speedup", a, 2);
            line.push_f64("n17_speedup", b, 2);
        }
        _ => {
            // Quick: one preset, reported under its own name.
            let s = first.client_side.as_secs_f64() / first.via_proxy.as_secs_f64();
            line.push_f64(&format!("{}_speedup", first.preset.name()), s, 2);
            line.push("n16_speedup", "NA");
            line.push("n17_speedup", "NA");
        }
    }
    line.push_f64("fused_gain_pct", gain, 1);
    line.push("fused_crossings", f.fused_crossings);
    line.push("separate_crossings", f.separate_crossings);
    line.push("bytes_client_side", first.bytes_client_side);
    line.push("bytes_via_proxy", first.bytes_via_proxy);
    println!(
        "bytes on the client's link at {} (addition): {} client side, {} via the proxy",
        first.preset.name(),
        bytes(first.bytes_client_side),
        bytes(first.bytes_via_proxy)
    );
    println!("{line}");
    Ok(())
}

/// End-to-end times per configuration, client side and via the proxy.
fn plot(rows: &[Row], path: &std::path::Path) -> anyhow::Result<()> {
    use plotters::prelude::*;
    crate::tfhe::plot::register().map_err(|e| anyhow::anyhow!(e))?;
    let root = BitMapBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let max = rows
        .iter()
        .map(|r| r.client_side.max(r.via_proxy).as_secs_f64() * 1e3)
        .fold(1.0, f64::max);
    let n = rows.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "End to end: client side vs through the proxy (measured)",
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(60)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..n as f64, 0f64..max * 1.1)?;
    let labels: Vec<String> = rows
        .iter()
        .map(|r| format!("{} {} {}", r.preset.name(), r.link, r.op.name()))
        .collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("ms")
        .draw()?;
    // Each group's name above it (the mesh's own labels skip some).
    chart.draw_series(labels.iter().enumerate().map(|(i, l)| {
        Text::new(
            l.clone(),
            (i as f64 + 0.05, max * 1.05),
            ("sans-serif", 12).into_font(),
        )
    }))?;
    for (i, r) in rows.iter().enumerate() {
        let x = i as f64;
        let bars = [
            (x + 0.1, x + 0.45, r.client_side, RED),
            (x + 0.55, x + 0.9, r.via_proxy, BLUE),
        ];
        for (a, b, t, color) in bars {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(a, 0.0), (b, t.as_secs_f64() * 1e3)],
                color.filled(),
            )))?;
        }
    }
    chart
        .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
        .label("client side")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], RED.filled()));
    chart
        .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
        .label("via proxy")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], BLUE.filled()));
    chart.configure_series_labels().border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}
