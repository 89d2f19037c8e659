//! `hecloud bench boot`: our CKKS bootstrapping ([`hecloud_ckks::boot`])
//! against Lattigo v6.2.0's default bootstrapping, in the same run.
//!
//! Both bootstrap one full-slot random complex vector (real and imaginary
//! parts uniform in [−1, 1]) encrypted at level 0. Ours: the 128-bit
//! preset [`BootPreset::N16`] (H = 192 with an H = 32 ephemeral secret,
//! log QP ≈ 1519, 9 levels left);
//! Lattigo: `N16QP1546H192H32` (H = 192 with an H = 32 ephemeral secret, 9
//! levels left). Reported for each: the time of one bootstrapping with one
//! thread (our rayon pool of 1, Lattigo `GOMAXPROCS=1`) and with every
//! core, the precision of the real parts like Lattigo's precision stats
//! (min bits −log2 of the largest error, mean bits −log2 of the mean
//! error), the levels left, the evaluation keys' serialized size (ours
//! seeded: each key's uniform half as a 32-byte seed; the rotation,
//! conjugation, relinearization and encapsulation keys) and the peak memory
//! (each process's VmHWM; Lattigo runs alone, as a child process, before
//! ours and again after it).
//! Each side bootstraps the ciphertext once, untimed, before its
//! [`RUNS`] timed runs ([`WARMUP`]), and reports their median. Our process
//! keeps freed memory for reuse, as the server does by default, and hands
//! it back before Lattigo's second one-thread run. That run brackets ours:
//! Lattigo's one-thread figure is the mean of the runs before and after
//! ours, so that a slow spell of the host on one side of the run does not
//! alone decide the ratio (on a shared VM one side's time moved by 30 %
//! between runs minutes apart); both are in the headline.
//!
//! `--quick`: the same layout at N = 2^12 ([`BootPreset::TestN12`]) and
//! Lattigo's own shrunk N = 2^12 set, both insecure.

use std::time::Instant;

use hecloud_ckks::boot::{BootPreset, EncapsulationKeys};
use hecloud_ckks::{Encoder, Evaluator, KeySet};
use num_complex::Complex64;

use crate::BenchOptions;
use crate::peers::lattigo_boot::{self, BootFigures};
use crate::refresh::{Peer, lattigo};
use crate::report::{ResultLine, Table, bytes, cpu_name};

/// Our side's figures.
#[derive(Debug, Clone)]
struct Ours {
    keygen_ms: f64,
    /// One bootstrapping with one thread, then with every core.
    boot_ms: [f64; 2],
    min_bits: f64,
    mean_bits: f64,
    levels_left: usize,
    key_bytes: u64,
    peak_rss_bytes: Option<u64>,
}

/// Real-part precision like Lattigo's `GetPrecisionStats`: (min, mean) bits.
fn precision_bits(want: &[Complex64], got: &[Complex64]) -> (f64, f64) {
    let errs: Vec<f64> = want
        .iter()
        .zip(got)
        .map(|(a, b)| (a.re - b.re).abs())
        .collect();
    let max = errs.iter().cloned().fold(0.0, f64::max);
    let mean = errs.iter().sum::<f64>() / errs.len().max(1) as f64;
    (-max.log2(), -mean.log2())
}

/// VmHWM of this process in bytes.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// Untimed bootstrappings each side runs before each timed one, in the
/// same process and thread pool: the first one also pays for growing the
/// heap to its working set (zeroing fresh pages took 6 % of our first
/// bootstrapping's time at N = 2^16, and it ran 13 % slower than the
/// second), which a long-running server pays once. Lattigo gets the same.
pub const WARMUP: u32 = 1;

/// Timed bootstrappings per side and thread count; each reports their
/// median (one run let a single disturbed bootstrapping decide a ratio:
/// Lattigo's one-thread time above its two-thread one in two of four runs
/// on 2026-11-28).
pub const RUNS: u32 = 3;

fn ours(preset: BootPreset) -> anyhow::Result<Ours> {
    let (params, boot) = preset.build()?;
    let t = Instant::now();
    let mut keys = KeySet::generate_at_levels(&params, &boot.rotation_levels(), true)?;
    let encapsulation = boot
        .literal()
        .ephemeral_hamming
        .map(|h| EncapsulationKeys::generate(&params, keys.secret_key(), h))
        .transpose()?;
    let keygen_ms = t.elapsed().as_secs_f64() * 1e3;
    let eval_keys = keys.take_evaluation_keys();
    let mut key_bytes = eval_keys
        .relin
        .as_ref()
        .map_or(0, |k| k.0.serialized_len(true) as u64);
    for g in eval_keys.galois.elements().collect::<Vec<_>>() {
        key_bytes += eval_keys
            .galois
            .get(g)?
            .switching_key()
            .serialized_len(true) as u64;
    }
    key_bytes += encapsulation
        .as_ref()
        .map_or(0, |k| k.serialized_len(true) as u64);
    let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, eval_keys));
    let mut rng = hecloud_math::Sampler::from_os();
    let mut uniform = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
    let z: Vec<Complex64> = (0..params.slots())
        .map(|_| Complex64::new(uniform(), uniform()))
        .collect();
    let ct = keys.encrypt(&enc.encode(&z, 0, params.default_scale())?)?;
    let mut boot_ms = [0.0; 2];
    let mut out = None;
    for (slot, threads) in [(0, 1), (1, rayon::current_num_threads())] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?;
        // In the pool that is timed: the warm-up fills its threads'
        // buffer pools and the heap.
        for _ in 0..WARMUP {
            pool.install(|| boot.bootstrap(&eval, encapsulation.as_ref(), &ct))?;
        }
        let mut times = Vec::new();
        for _ in 0..RUNS {
            let t = Instant::now();
            out = Some(pool.install(|| boot.bootstrap(&eval, encapsulation.as_ref(), &ct))?);
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        boot_ms[slot] = times[times.len() / 2];
    }
    let out = out.expect("bootstrapped at least once");
    let (min_bits, mean_bits) = precision_bits(&z, &enc.decode(&keys.decrypt(&out)?)?);
    Ok(Ours {
        keygen_ms,
        boot_ms,
        min_bits,
        mean_bits,
        levels_left: out.level(),
        key_bytes,
        peak_rss_bytes: peak_rss_bytes(),
    })
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// Runs the experiment.
pub fn run(opts: &BenchOptions) -> anyhow::Result<()> {
    let (preset, logn, min_free) = if opts.quick {
        (BootPreset::TestN12, 12, 2 << 30)
    } else {
        (BootPreset::N16, 16, lattigo_boot::MIN_FREE_BYTES)
    };
    // As the server does by default (`retain_freed_memory` in its config),
    // and as Go's runtime does for Lattigo; before the thread pool exists.
    let retained = hecloud_server::alloc::retain_freed_memory();
    let cores = rayon::current_num_threads();
    println!(
        "CKKS bootstrapping at N = 2^{logn}, ours ({}, backend {}, freed memory retained: {retained}) vs Lattigo v6.2.0 on {}; one thread each, then {cores}",
        preset.name(),
        hecloud_math::backend::default_backend().name(),
        cpu_name()
    );
    // Lattigo first, alone: its N = 2^16 keys need most of the memory.
    // Each side times `RUNS` bootstrappings, after one untimed one in the
    // same process (`WARMUP`), and reports their median.
    let lattigo_1: Peer<BootFigures> = lattigo(
        &format!("bootstrapping at N = 2^{logn}, 1 thread"),
        min_free,
        || lattigo_boot::boot(logn, 1, WARMUP, RUNS),
    );
    let lattigo_all: Peer<BootFigures> = lattigo(
        &format!("bootstrapping at N = 2^{logn}, {cores} threads"),
        min_free,
        || lattigo_boot::boot(logn, cores, WARMUP, RUNS),
    );
    let t = Instant::now();
    let o = ours(preset)?;
    println!(
        "ours: done in {:.1} s (key generation included)",
        t.elapsed().as_secs_f64()
    );
    hecloud_server::alloc::release_freed_memory();
    let lattigo_after: Peer<BootFigures> = lattigo(
        &format!("bootstrapping at N = 2^{logn}, 1 thread, after ours"),
        min_free,
        || lattigo_boot::boot(logn, 1, WARMUP, RUNS),
    );
    let after_ms = lattigo_after.as_ref().ok().map(|b| b.boot_ms);
    let before_ms = lattigo_1.as_ref().ok().map(|b| b.boot_ms);
    // The one-thread figure the ratio divides by: the runs' mean.
    let lattigo_ms = match (before_ms, after_ms) {
        (Some(a), Some(b)) => (a + b) / 2.0,
        (a, b) => a.or(b).unwrap_or(f64::NAN),
    };

    let l = lattigo_1.as_ref().ok().or(lattigo_after.as_ref().ok());
    let l_all = lattigo_all.as_ref().ok().map(|b| b.boot_ms);
    let na = || "NA".to_string();
    let mut table = Table::new(
        "boot",
        &[
            "library",
            "boot_ms_1t",
            "boot_ms_all",
            "keygen_ms",
            "prec_min_bits",
            "prec_mean_bits",
            "levels_left",
            "key_bytes",
            "peak_rss",
        ],
    );
    table.push(vec![
        format!("hecloud {}", preset.name()),
        format!("{:.0}", o.boot_ms[0]),
        format!("{:.0}", o.boot_ms[1]),
        format!("{:.0}", o.keygen_ms),
        format!("{:.1}", o.min_bits),
        format!("{:.1}", o.mean_bits),
        o.levels_left.to_string(),
        bytes(o.key_bytes),
        o.peak_rss_bytes.map_or_else(na, bytes),
    ]);
    table.push(match l {
        Some(b) => vec![
            if logn == 16 {
                "Lattigo N16QP1546H192H32".into()
            } else {
                format!("Lattigo N16QP1546H192H32 at 2^{logn}")
            },
            format!("{lattigo_ms:.0}"),
            l_all.map_or_else(na, |v| format!("{v:.0}")),
            format!("{:.0}", b.keygen_ms),
            format!("{:.1}", b.precision_min_bits),
            format!("{:.1}", b.precision_mean_bits),
            b.levels_left.to_string(),
            bytes(b.key_bytes),
            bytes(b.peak_rss_bytes),
        ],
        None => vec![
            "Lattigo (skipped)".into(),
            na(),
            na(),
            na(),
            na(),
            na(),
            na(),
            na(),
            na(),
        ],
    });
    println!("{}", table.render());
    let ms = |v: Option<f64>| v.map_or_else(na, |v| format!("{v:.0} ms"));
    println!(
        "Lattigo one thread: {} before ours, {} after (the table holds their mean)",
        ms(before_ms),
        ms(after_ms)
    );
    let csv = table.write_csv(&opts.out_dir)?;
    println!("wrote {}", csv.display());

    let lat = |f: fn(&BootFigures) -> f64| l.map_or(f64::NAN, f);
    let mut r = ResultLine::new("boot");
    r.push_f64("boot_ms", o.boot_ms[0], 0);
    r.push_f64("lattigo_boot_ms", lattigo_ms, 0);
    r.push_f64("ratio_lattigo", o.boot_ms[0] / lattigo_ms, 3);
    r.push_f64("precision_bits", o.min_bits, 1);
    r.push_f64("lattigo_precision_bits", lat(|b| b.precision_min_bits), 1);
    r.push_f64("precision_mean_bits", o.mean_bits, 1);
    r.push_f64(
        "lattigo_precision_mean_bits",
        lat(|b| b.precision_mean_bits),
        1,
    );
    r.push("levels_left", o.levels_left);
    r.push_f64("lattigo_levels_left", lat(|b| f64::from(b.levels_left)), 0);
    r.push_f64("key_mib", mib(o.key_bytes), 0);
    r.push_f64("lattigo_key_mib", lat(|b| mib(b.key_bytes)), 0);
    r.push_f64("peak_mib", o.peak_rss_bytes.map_or(f64::NAN, mib), 0);
    r.push_f64("lattigo_peak_mib", lat(|b| mib(b.peak_rss_bytes)), 0);
    r.push_f64("boot_ms_all_threads", o.boot_ms[1], 0);
    r.push_f64("lattigo_boot_ms_all_threads", l_all.unwrap_or(f64::NAN), 0);
    r.push("threads", cores);
    r.push_f64("lattigo_boot_ms_before", before_ms.unwrap_or(f64::NAN), 0);
    r.push_f64("lattigo_boot_ms_after", after_ms.unwrap_or(f64::NAN), 0);
    println!("{r}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precision_reads_real_parts_like_lattigo() {
        let want = [Complex64::new(1.0, 5.0), Complex64::new(0.0, 0.0)];
        let got = [
            Complex64::new(1.0 + 2f64.powi(-20), 0.0),
            Complex64::new(2f64.powi(-22), 9.0),
        ];
        let (min, mean) = precision_bits(&want, &got);
        assert!((min - 20.0).abs() < 1e-9, "{min}");
        let m = (2f64.powi(-20) + 2f64.powi(-22)) / 2.0;
        assert!((mean + m.log2()).abs() < 1e-9, "{mean}");
    }
}
