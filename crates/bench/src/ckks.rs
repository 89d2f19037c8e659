//! `hecloud bench ckks`: RNS-CKKS (issue 4) against Lattigo v6.2.0 and SEAL.
//!
//! At N = 2^14, 2^15 (our presets) and N = 2^16 (60 + 27×50-bit Q primes as
//! in the Lattigo anchor set; our P is 7×46-bit primes for 5 digits, log QP
//! ≈ 1732, Lattigo's 6×56 for the same 5 digits, see `peer_literal`): key generation
//! (sk, pk, relinearization and one rotation key), encode, encrypt (public
//! key; seeded secret key), decrypt, decode, multiply+relinearize+rescale and
//! rotate by one slot at the top level, serialized sizes and the precision of
//! one multiplication. Everything runs on one thread (ours in a 1-thread
//! rayon pool, Lattigo with GOMAXPROCS=1, SEAL single-threaded) in the same
//! run. Lattigo is `bench/peers/lattigo-ckks` (Go); SEAL 4.x is driven
//! through TenSEAL's low-level binding (`bench/peers/seal`, installed into a
//! venv by the bench) at N ≤ 2^15, with SEAL's single special prime.
//!
//! Then, at N = 2^16, multiply+relinearize+rescale and rotate for every
//! SIMD backend the CPU has and for one thread and all of them: each
//! (backend, threads) runs in a child process of this same binary with
//! `HECLOUD_BACKEND` set (the backend is chosen once per process), beside
//! Lattigo with `GOMAXPROCS` 1 and all.

use std::collections::BTreeMap;
use std::time::Duration;

use hecloud_ckks::{CkksParameters, Encoder, Evaluator, KeySet, Preset, precision::report};
use hecloud_math::Sampler;
use hecloud_rlwe::ParametersLiteral;
use num_complex::Complex64;

use crate::BenchOptions;
use crate::peers::{build_go, parse_json, run_go_threads, run_tenseal};
use crate::report::{ResultLine, Table};
use crate::timing::median_time;

/// Keys every peer line may carry.
const KEYS: [&str; 16] = [
    "keygen_ms",
    "encode_ms",
    "encrypt_pk_ms",
    "encrypt_sk_ms",
    "decrypt_ms",
    "decode_ms",
    "mul_relin_rescale_ms",
    "rotate_ms",
    "precision_bits",
    "rotate_precision_bits",
    "ct_bytes",
    "ct_seeded_bytes",
    "rlk_bytes",
    "rlk_seeded_bytes",
    "gk_bytes",
    "pk_bytes",
];

type Figures = BTreeMap<&'static str, f64>;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn list(bits: &[u32]) -> String {
    bits.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Our figures at one parameter set, on the current (1-thread) pool.
fn ours(params: &std::sync::Arc<CkksParameters>, samples: usize) -> anyhow::Result<Figures> {
    let mut f = Figures::new();
    let t = |op: &mut dyn FnMut()| ms(median_time(samples, Duration::ZERO, op));
    f.insert(
        "keygen_ms",
        t(&mut || {
            std::hint::black_box(KeySet::generate(params, &[1], false).expect("keygen"));
        }),
    );
    let keys = KeySet::generate(params, &[1], false)?;
    let enc = Encoder::new(params);
    let eval = Evaluator::new(params, keys.evaluation_keys());
    let slots = params.slots();
    let mut s = Sampler::from_os();
    let mut r = || (s.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
    let a: Vec<Complex64> = (0..slots).map(|_| Complex64::new(r(), r())).collect();
    let b: Vec<Complex64> = (0..slots).map(|_| Complex64::new(r(), r())).collect();
    let top = params.max_level();
    let scale = params.default_scale();
    f.insert(
        "encode_ms",
        t(&mut || {
            std::hint::black_box(enc.encode(&a, top, scale).expect("encode"));
        }),
    );
    let pa = enc.encode(&a, top, scale)?;
    let pb = enc.encode(&b, top, scale)?;
    f.insert(
        "encrypt_pk_ms",
        t(&mut || {
            std::hint::black_box(keys.encrypt(&pa).expect("encrypt"));
        }),
    );
    f.insert(
        "encrypt_sk_ms",
        t(&mut || {
            std::hint::black_box(keys.encrypt_sk(&pb).expect("encrypt"));
        }),
    );
    let ca = keys.encrypt(&pa)?;
    let cb = keys.encrypt_sk(&pb)?;
    f.insert(
        "mul_relin_rescale_ms",
        t(&mut || {
            std::hint::black_box(eval.mul_relin_rescale(&ca, &cb).expect("mul"));
        }),
    );
    f.insert(
        "rotate_ms",
        t(&mut || {
            std::hint::black_box(eval.rotate(&ca, 1).expect("rotate"));
        }),
    );
    f.insert(
        "decrypt_ms",
        t(&mut || {
            std::hint::black_box(keys.decrypt(&ca).expect("decrypt"));
        }),
    );
    let pt = keys.decrypt(&ca)?;
    f.insert(
        "decode_ms",
        t(&mut || {
            std::hint::black_box(enc.decode(&pt).expect("decode"));
        }),
    );
    let prod = eval.mul_relin_rescale(&ca, &cb)?;
    let want: Vec<Complex64> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
    let got = enc.decode(&keys.decrypt(&prod)?)?;
    f.insert("precision_bits", report(&want, &got).bits());
    let rot = eval.rotate(&ca, 1)?;
    let want: Vec<Complex64> = (0..slots).map(|i| a[(i + 1) % slots]).collect();
    let got = enc.decode(&keys.decrypt(&rot)?)?;
    f.insert("rotate_precision_bits", report(&want, &got).bits());
    f.insert("ct_bytes", ca.to_bytes().len() as f64);
    f.insert("ct_seeded_bytes", cb.to_bytes().len() as f64);
    let ev = keys.evaluation_keys();
    let rlk = ev.relin.as_ref().ok_or_else(|| anyhow::anyhow!("no rlk"))?;
    f.insert("rlk_bytes", rlk.to_bytes(false).len() as f64);
    f.insert("rlk_seeded_bytes", rlk.to_bytes(true).len() as f64);
    let g = ev
        .galois
        .elements()
        .next()
        .ok_or_else(|| anyhow::anyhow!("no gk"))?;
    f.insert("gk_bytes", ev.galois.get(g)?.to_bytes(true).len() as f64);
    f.insert("pk_bytes", keys.public_key().to_bytes().len() as f64);
    Ok(f)
}

/// The figures of a peer's JSON line: the numbers under [`KEYS`] (others
/// are ignored).
fn parse(line: &str) -> anyhow::Result<Figures> {
    let all: BTreeMap<String, serde_json::Value> = parse_json(line)?;
    Ok(KEYS
        .iter()
        .filter_map(|k| Some((*k, all.get(*k)?.as_f64()?)))
        .collect())
}

/// The literal a peer runs for ours: the same, except where our preset
/// pins the digit count to use more, smaller P primes (our 52-bit
/// kernels): there the peer gets one P prime per prime of a digit, its own
/// layout (Lattigo takes ⌈|Q|/|P|⌉ digits, so the same digits), each of 61
/// bits or as large as the HE Standard's bound leaves room for: 6 × 56 at
/// N = 2^16 (log QP 1746 against our 1732). Same Q.
fn peer_literal(lit: &ParametersLiteral) -> ParametersLiteral {
    let mut peer = lit.clone();
    if let Some(dnum) = lit.dnum {
        let count = lit.log_q.len().div_ceil(dnum);
        let log_q: u32 = lit.log_q.iter().sum();
        let room = hecloud_rlwe::params::max_log_qp(lit.log_n)
            .map_or(61, |max| max.saturating_sub(log_q) / count as u32);
        peer.log_p = vec![room.min(61); count];
        peer.dnum = None;
    }
    peer
}

/// Builds and runs the Lattigo peer at `lit` (as [`peer_literal`]) with
/// `threads` goroutines.
fn lattigo(
    lit: &ParametersLiteral,
    log_scale: u32,
    samples: usize,
    threads: usize,
) -> anyhow::Result<Figures> {
    let lit = &peer_literal(lit);
    let bin = build_go("lattigo-ckks", "lattigo-ckks-peer")?;
    let args: Vec<String> = [
        ("-logn", lit.log_n.to_string()),
        ("-logq", list(&lit.log_q)),
        ("-logp", list(&lit.log_p)),
        ("-scale", log_scale.to_string()),
        ("-samples", samples.to_string()),
    ]
    .into_iter()
    .flat_map(|(k, v)| [k.to_string(), v])
    .collect();
    parse(&run_go_threads(&bin, &args, threads)?)
}

/// Set in a child process: measure [`hot`] on a pool of this many threads
/// and print it as one JSON line.
const WORKER_ENV: &str = "HECLOUD_BENCH_CKKS_THREADS";

/// Multiply+relinearize+rescale and rotate at N = 2^16 for one backend and
/// thread count.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Hot {
    backend: String,
    threads: usize,
    mul_relin_rescale_ms: f64,
    rotate_ms: f64,
}

/// [`Hot`] on the current pool with this process's backend.
fn hot(samples: usize) -> anyhow::Result<Hot> {
    let params = Preset::N16.build()?;
    let keys = KeySet::generate(&params, &[1], false)?;
    let (enc, eval) = (
        Encoder::new(&params),
        Evaluator::new(&params, keys.evaluation_keys()),
    );
    let x = vec![Complex64::new(0.5, -0.25); params.slots()];
    let pt = enc.encode(&x, params.max_level(), params.default_scale())?;
    let (a, b) = (keys.encrypt(&pt)?, keys.encrypt_sk(&pt)?);
    let t = |op: &mut dyn FnMut()| ms(median_time(samples, Duration::ZERO, op));
    Ok(Hot {
        backend: hecloud_math::backend::default_backend().name().into(),
        threads: rayon::current_num_threads(),
        mul_relin_rescale_ms: t(&mut || {
            std::hint::black_box(eval.mul_relin_rescale(&a, &b).expect("mul"));
        }),
        rotate_ms: t(&mut || {
            std::hint::black_box(eval.rotate(&a, 1).expect("rotate"));
        }),
    })
}

/// [`Hot`] in a child process with `HECLOUD_BACKEND=backend`.
fn hot_in_child(backend: &str, threads: usize, quick: bool) -> anyhow::Result<Hot> {
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.args(["bench", "ckks"])
        .env("HECLOUD_BACKEND", backend)
        .env(WORKER_ENV, threads.to_string());
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd.output()?;
    anyhow::ensure!(
        out.status.success(),
        "the {backend} worker failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?;
    let line = text.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
    let h: Hot = parse_json(line)?;
    anyhow::ensure!(
        h.backend == backend && h.threads == threads,
        "asked for {backend} on {threads} threads, the worker ran {} on {}",
        h.backend,
        h.threads
    );
    Ok(h)
}

fn seal(lit: &ParametersLiteral, log_scale: u32, samples: usize) -> anyhow::Result<Figures> {
    let args: Vec<String> = [
        ("--logn", lit.log_n.to_string()),
        ("--logq", list(&lit.log_q)),
        ("--logp", list(&lit.log_p)),
        ("--scale", log_scale.to_string()),
        ("--samples", samples.to_string()),
    ]
    .into_iter()
    .flat_map(|(k, v)| [k.to_string(), v])
    .collect();
    parse(&run_tenseal("seal_ckks.py", &args)?)
}

fn cell(x: Option<&f64>, decimals: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.decimals$}"),
        _ => "NA".into(),
    }
}

/// Runs the experiment.
pub fn run(opts: &BenchOptions) -> anyhow::Result<()> {
    let (presets, samples) = if opts.quick {
        (vec![Preset::N14, Preset::N16], 2)
    } else {
        (vec![Preset::N14, Preset::N15, Preset::N16], 5)
    };
    // Results are fresh multi-MB polynomials: keep freed memory for reuse as
    // Go's runtime does for Lattigo (see `retain_freed_memory`).
    let retained = hecloud_server::alloc::retain_freed_memory();
    if let Ok(threads) = std::env::var(WORKER_ENV) {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.parse()?)
            .build()?;
        println!(
            "{}",
            serde_json::to_string(&pool.install(|| hot(samples))?)?
        );
        return Ok(());
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    println!(
        "backend: {}, 1 thread each, freed memory retained: {retained}; Lattigo v6.2.0 (GOMAXPROCS=1); SEAL 4.x via TenSEAL (N ≤ 2^15)",
        hecloud_math::backend::default_backend().name()
    );
    let mut table = Table::new(
        "ckks",
        &[
            "n",
            "log_qp",
            "figure",
            "ours",
            "lattigo",
            "seal",
            "ours/lattigo",
            "ours/seal",
        ],
    );
    let mut headline = None;
    for preset in presets {
        let (lit, log_scale) = preset.literal();
        let params = preset.build()?;
        let n = params.n();
        println!("N = 2^{} ({}) …", lit.log_n, preset.name());
        let ours = pool.install(|| ours(&params, samples))?;
        let lat = lattigo(&lit, log_scale, samples, 1).unwrap_or_else(|e| {
            eprintln!("Lattigo unavailable: {e}");
            Figures::new()
        });
        let seal = if lit.log_n <= 15 {
            seal(&lit, log_scale, samples).unwrap_or_else(|e| {
                eprintln!("SEAL unavailable: {e}");
                Figures::new()
            })
        } else {
            Figures::new()
        };
        for key in KEYS {
            let (o, l, s) = (ours.get(key), lat.get(key), seal.get(key));
            let ratio = |p: Option<&f64>| match (o, p) {
                (Some(a), Some(b)) if key.ends_with("_ms") || key.ends_with("bytes") => {
                    format!("{:.3}", a / b)
                }
                _ => "NA".into(),
            };
            let dec = if key.ends_with("bytes") { 0 } else { 2 };
            table.push(vec![
                n.to_string(),
                format!("{:.0}", params.rlwe().log_qp()),
                key.into(),
                cell(o, dec),
                cell(l, dec),
                cell(s, dec),
                ratio(l),
                ratio(s),
            ]);
        }
        if preset == Preset::N16 {
            headline = Some((ours, lat));
        }
    }
    print!("{}", table.render());
    let path = table.write_csv(&opts.out_dir)?;
    println!("wrote {}", path.display());
    let (ours, lat) = headline.unwrap_or_default();
    let get = |f: &Figures, k: &str| f.get(k).copied().unwrap_or(f64::NAN);

    // Every SIMD backend, one thread and all, at N = 2^16.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let mut thread_counts = vec![1, cores];
    thread_counts.dedup();
    let (lit16, scale16) = Preset::N16.literal();
    let lattigo_hot: BTreeMap<usize, Figures> = thread_counts
        .iter()
        .map(|&t| {
            let f = if t == 1 {
                Ok(lat.clone())
            } else {
                lattigo(&lit16, scale16, samples, t)
            };
            (t, f.unwrap_or_default())
        })
        .collect();
    let mut sweep = Table::new(
        "ckks_backends",
        &[
            "backend",
            "threads",
            "mul_relin_rescale_ms",
            "lattigo_mul_ms",
            "ratio_mul",
            "rotate_ms",
            "lattigo_rotate_ms",
            "ratio_rotate",
        ],
    );
    // Rounds over every combination, medians per combination: one child
    // each swings by 15 to 30 % on a shared VM, more than the thread
    // speedup target's margin; interleaving spreads a slow spell over all.
    let rounds = if opts.quick { 1 } else { 3 };
    let mut runs: BTreeMap<(usize, usize), Vec<Hot>> = BTreeMap::new();
    for _ in 0..rounds {
        let backends = hecloud_math::backend::available()
            .into_iter()
            .filter(|b| b.name() != "scalar");
        for (i, backend) in backends.enumerate() {
            for &t in &thread_counts {
                match hot_in_child(backend.name(), t, opts.quick) {
                    Ok(h) => runs.entry((i, t)).or_default().push(h),
                    Err(e) => eprintln!("{} on {t} threads: {e}", backend.name()),
                }
            }
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let hots: Vec<Hot> = runs
        .into_values()
        .map(|v| Hot {
            backend: v[0].backend.clone(),
            threads: v[0].threads,
            mul_relin_rescale_ms: median(v.iter().map(|h| h.mul_relin_rescale_ms).collect()),
            rotate_ms: median(v.iter().map(|h| h.rotate_ms).collect()),
        })
        .collect();
    for h in &hots {
        let l = &lattigo_hot[&h.threads];
        let (lm, lr) = (get(l, "mul_relin_rescale_ms"), get(l, "rotate_ms"));
        sweep.push(vec![
            h.backend.clone(),
            h.threads.to_string(),
            format!("{:.1}", h.mul_relin_rescale_ms),
            format!("{lm:.1}"),
            format!("{:.3}", h.mul_relin_rescale_ms / lm),
            format!("{:.1}", h.rotate_ms),
            format!("{lr:.1}"),
            format!("{:.3}", h.rotate_ms / lr),
        ]);
    }
    print!("{}", sweep.render());
    println!("wrote {}", sweep.write_csv(&opts.out_dir)?.display());
    let find = |backend: &str, threads: usize| {
        hots.iter()
            .find(|h| h.backend == backend && h.threads == threads)
    };
    let lat1 = &lattigo_hot[&1];
    let avx2 = find("avx2", 1);
    let default = hecloud_math::backend::default_backend().name();
    let speedup = match (find(default, 1), find(default, cores)) {
        (Some(a), Some(b)) if cores > 1 => a.mul_relin_rescale_ms / b.mul_relin_rescale_ms,
        _ => f64::NAN,
    };
    let mut r = ResultLine::new("ckks");
    r.push("n", 65536);
    r.push_f64(
        "mul_relin_rescale_ms",
        get(&ours, "mul_relin_rescale_ms"),
        1,
    );
    r.push_f64("lattigo_ms", get(&lat, "mul_relin_rescale_ms"), 1);
    r.push_f64(
        "ratio_lattigo",
        get(&ours, "mul_relin_rescale_ms") / get(&lat, "mul_relin_rescale_ms"),
        3,
    );
    r.push_f64("rotate_ms", get(&ours, "rotate_ms"), 1);
    r.push_f64("lattigo_rotate_ms", get(&lat, "rotate_ms"), 1);
    r.push_f64(
        "ratio_rotate_lattigo",
        get(&ours, "rotate_ms") / get(&lat, "rotate_ms"),
        3,
    );
    r.push_f64("precision_bits", get(&ours, "precision_bits"), 1);
    r.push_f64("lattigo_precision_bits", get(&lat, "precision_bits"), 1);
    r.push_f64(
        "seeded_ct_ratio",
        get(&ours, "ct_seeded_bytes") / get(&ours, "ct_bytes"),
        3,
    );
    r.push_f64(
        "seeded_key_ratio",
        get(&ours, "rlk_seeded_bytes") / get(&ours, "rlk_bytes"),
        3,
    );
    r.push_f64(
        "ratio_lattigo_avx2",
        avx2.map_or(f64::NAN, |h| h.mul_relin_rescale_ms) / get(lat1, "mul_relin_rescale_ms"),
        3,
    );
    r.push_f64(
        "ratio_rotate_lattigo_avx2",
        avx2.map_or(f64::NAN, |h| h.rotate_ms) / get(lat1, "rotate_ms"),
        3,
    );
    r.push_f64("speedup_threads", speedup, 2);
    r.push("threads", cores);
    println!("{r}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_gets_our_q_and_digits_within_the_bound() {
        let digits =
            |l: &ParametersLiteral| l.dnum.unwrap_or(l.log_q.len().div_ceil(l.log_p.len()));
        for p in [Preset::N14, Preset::N15, Preset::N16] {
            let (lit, _) = p.literal();
            let peer = peer_literal(&lit);
            assert_eq!(peer.log_q, lit.log_q, "{p:?}");
            assert_eq!(digits(&peer), digits(&lit), "{p:?}");
            let bits: u32 = peer.log_q.iter().chain(&peer.log_p).sum();
            let max = hecloud_rlwe::params::max_log_qp(lit.log_n).unwrap();
            assert!(bits <= max, "{p:?}: the peer's log QP {bits} > {max}");
        }
    }
}
