//! `hecloud bench ntt`: the RNS/NTT engine against tfhe-ntt and Lattigo.
//!
//! One limb: forward and inverse NTT at n = 2^12..2^17 for 50- and 60-bit
//! primes, ours (default backend, and the scalar reference for context) vs
//! tfhe-ntt's `prime64::Plan` vs Lattigo's ring NTT, all on one thread and on
//! the same primes. Then a 28-limb polynomial at n = 2^16 (NTT on 1 and 2
//! threads, pointwise product, base conversion to 4 primes). tfhe-ntt's
//! inverse leaves out the division by n (its users fold it elsewhere); ours
//! includes it. The headline ratio is against tfhe-ntt's bare inverse (strict
//! for us); `tfhe_ntt_inv_norm_us` adds its `normalize` for a like-for-like
//! figure. On x86-64 also AVX2 against AVX2: our AVX2 backend forced, and
//! tfhe-ntt built without its AVX-512 feature (`bench/peers/tfhe-ntt-avx2`,
//! [`crate::peers::tfhe_ntt_avx2`]): `ratio_tfhe_ntt_avx2`.

use std::time::Duration;

use hecloud_math::backend::{Backend, Scalar, Simd, SimdLevel, default_backend};
use hecloud_math::prime::ntt_primes;
use hecloud_math::{BaseConverter, Domain, NttTable, RnsBasis, Sampler};

use crate::BenchOptions;
use crate::peers::{lattigo, tfhe_ntt_avx2};
use crate::report::{ResultLine, Table};
use crate::timing::min_time;

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn fmt(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.1}")
    } else {
        "NA".into()
    }
}

/// Runs the experiment.
pub fn run(opts: &BenchOptions) -> anyhow::Result<()> {
    // Many short batches, fastest kept: see `timing::min_time`.
    let (samples, batch) = if opts.quick {
        (20, Duration::from_millis(2))
    } else {
        (60, Duration::from_millis(3))
    };
    let time = |op: &mut dyn FnMut()| us(min_time(samples, batch, op));
    let log_ns: Vec<u32> = if opts.quick {
        vec![12, 14, 16]
    } else {
        (12..=17).collect()
    };
    let backend = default_backend();
    println!(
        "backend: {} (threads for single-limb figures: 1)",
        backend.name()
    );

    let mut cases = Vec::new();
    for &log_n in &log_ns {
        for bits in [50u32, 60] {
            let q = ntt_primes(bits, 1 << log_n, 1, &[])?[0];
            cases.push((log_n, bits, q));
        }
    }
    let limbs28 = ntt_primes(60, 1 << 16, 1, &[])?
        .into_iter()
        .chain(ntt_primes(50, 1 << 16, 27, &[])?)
        .collect::<Vec<_>>();
    let mut specs: Vec<(u32, Vec<u64>)> = cases.iter().map(|&(l, _, q)| (l, vec![q])).collect();
    specs.push((16, limbs28.clone()));
    let lattigo_times = match lattigo::ring_times(&specs, opts.quick) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("warning: Lattigo peer unavailable, its columns are NA: {e}");
            None
        }
    };
    let lat = |i: usize, f: fn(&lattigo::RingTimes) -> f64| {
        lattigo_times.as_ref().map_or(f64::NAN, |t| f(&t[i]) / 1e3)
    };
    // AVX2 against AVX2, on any x86-64 CPU: our AVX2 backend forced, and
    // tfhe-ntt built without AVX-512.
    let avx2 = Simd::new(SimdLevel::Avx2);
    let tfhe_avx2 = match avx2.map(|_| {
        let single: Vec<(u32, u64)> = cases.iter().map(|&(l, _, q)| (l, q)).collect();
        tfhe_ntt_avx2::ntt_times(&single, samples, batch.as_micros() as u64)
    }) {
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            eprintln!("warning: the tfhe-ntt AVX2 peer is unavailable, its columns are NA: {e}");
            None
        }
        None => None,
    };
    let tf_avx2 = |i: usize, f: fn(&tfhe_ntt_avx2::NttTimes) -> f64| {
        tfhe_avx2.as_ref().map_or(f64::NAN, |t| f(&t[i]) / 1e3)
    };

    let mut table = Table::new(
        "ntt",
        &[
            "n",
            "q_bits",
            "op",
            "ours_us",
            "scalar_us",
            "tfhe_ntt_us",
            "lattigo_us",
            "ours/tfhe_ntt",
            "ours/lattigo",
            "avx2_us",
            "tfhe_ntt_avx2_us",
            "avx2/tfhe_ntt_avx2",
        ],
    );
    let mut headline = None;
    let mut headline_avx2 = (f64::NAN, f64::NAN, f64::NAN, f64::NAN);
    let mut rng = Sampler::from_os();
    for (i, &(log_n, bits, q)) in cases.iter().enumerate() {
        let n = 1usize << log_n;
        let t = NttTable::new(q, n)?;
        let plan = tfhe_ntt::prime64::Plan::try_new(n, q)
            .ok_or_else(|| anyhow::anyhow!("tfhe-ntt rejects q={q}, n={n}"))?;
        let mut a: Vec<u64> = (0..n).map(|_| rng.uniform_mod(q)).collect();
        let ours_f = time(&mut || backend.ntt_forward(&t, &mut a));
        let ours_i = time(&mut || backend.ntt_inverse(&t, &mut a));
        let scal_f = time(&mut || Scalar.ntt_forward(&t, &mut a));
        let scal_i = time(&mut || Scalar.ntt_inverse(&t, &mut a));
        let tf_f = time(&mut || plan.fwd(&mut a));
        let tf_i = time(&mut || plan.inv(&mut a));
        let tf_in = time(&mut || {
            plan.inv(&mut a);
            plan.normalize(&mut a);
        });
        let (lat_f, lat_i) = (lat(i, |r| r.fwd_ns), lat(i, |r| r.inv_ns));
        let (avx2_f, avx2_i) = match &avx2 {
            Some(b) => (
                time(&mut || b.ntt_forward(&t, &mut a)),
                time(&mut || b.ntt_inverse(&t, &mut a)),
            ),
            None => (f64::NAN, f64::NAN),
        };
        let (tfa_f, tfa_i) = (tf_avx2(i, |r| r.fwd_ns), tf_avx2(i, |r| r.inv_ns));
        for (op, o, s, tf, la, av, tfa) in [
            ("fwd", ours_f, scal_f, tf_f, lat_f, avx2_f, tfa_f),
            ("inv", ours_i, scal_i, tf_i, lat_i, avx2_i, tfa_i),
        ] {
            table.push(vec![
                n.to_string(),
                bits.to_string(),
                op.into(),
                fmt(o),
                fmt(s),
                fmt(tf),
                fmt(la),
                format!("{:.2}", o / tf),
                format!("{:.2}", o / la),
                fmt(av),
                fmt(tfa),
                format!("{:.2}", av / tfa),
            ]);
        }
        if log_n == 16 && bits == 60 {
            headline = Some((q, ours_f, ours_i, tf_f, tf_i, tf_in, lat_f, lat_i));
            headline_avx2 = (avx2_f, avx2_i, tfa_f, tfa_i);
        }
    }
    print!("{}", table.render());

    // 28 limbs at n = 2^16.
    let n = 1 << 16;
    let basis = RnsBasis::new(n, &limbs28)?;
    let mut x = rng.uniform_poly(&basis, Domain::Coefficient);
    let y = rng.uniform_poly(&basis, Domain::Ntt);
    let mut poly_table = Table::new(
        "ntt_rns",
        &[
            "op (n=2^16, 28 limbs)",
            "threads",
            "ours_us",
            "lattigo_us (1 thread)",
        ],
    );
    let lat28 = specs.len() - 1;
    for threads in [1usize, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?;
        let fwd = pool.install(|| {
            time(&mut || {
                x.set_domain_unchecked(Domain::Coefficient);
                x.to_ntt();
            })
        });
        let mul = pool.install(|| {
            x.set_domain_unchecked(Domain::Ntt);
            time(&mut || x.mul_assign(&y).expect("same basis"))
        });
        poly_table.push(vec![
            "forward NTT".into(),
            threads.to_string(),
            fmt(fwd),
            fmt(lat(lat28, |r| r.fwd_ns)),
        ]);
        poly_table.push(vec![
            "pointwise product".into(),
            threads.to_string(),
            fmt(mul),
            fmt(lat(lat28, |r| r.mul_ns)),
        ]);
    }
    let p_basis = RnsBasis::new(n, &ntt_primes(61, n, 4, &limbs28)?)?;
    let conv = BaseConverter::new(&basis, &p_basis)?;
    x.set_domain_unchecked(Domain::Coefficient);
    for threads in [1usize, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?;
        let bc = pool.install(|| time(&mut || drop(conv.convert(&x).expect("coefficient domain"))));
        poly_table.push(vec![
            "base conversion 28 -> 4".into(),
            threads.to_string(),
            fmt(bc),
            "NA".into(),
        ]);
    }
    print!("\n{}", poly_table.render());
    let csv = table.write_csv(&opts.out_dir)?;
    let csv2 = poly_table.write_csv(&opts.out_dir)?;
    println!("\nwrote {} and {}", csv.display(), csv2.display());

    let (q, of, oi, tf, ti, tin, lf, li) = headline.expect("n = 2^16 is always measured");
    let mut r = ResultLine::new("ntt");
    r.push("n", 65536);
    r.push("q_bits", 60);
    r.push("q", q);
    r.push("backend", backend.name());
    r.push_f64("ours_us", of, 1);
    r.push_f64("ours_inv_us", oi, 1);
    r.push_f64("tfhe_ntt_us", tf, 1);
    r.push_f64("tfhe_ntt_inv_us", ti, 1);
    r.push_f64("tfhe_ntt_inv_norm_us", tin, 1);
    r.push_f64("lattigo_us", lf, 1);
    r.push_f64("lattigo_inv_us", li, 1);
    r.push_f64("ratio_tfhe_ntt", of / tf, 3);
    r.push_f64("ratio_tfhe_ntt_inv", oi / ti, 3);
    r.push_f64("ratio_tfhe_ntt_inv_norm", oi / tin, 3);
    r.push_f64("ratio_lattigo", of / lf, 3);
    r.push_f64("ratio_lattigo_inv", oi / li, 3);
    let (af, ai, taf, tai) = headline_avx2;
    r.push_f64("avx2_us", af, 1);
    r.push_f64("tfhe_ntt_avx2_us", taf, 1);
    r.push_f64("ratio_tfhe_ntt_avx2", af / taf, 3);
    r.push_f64("ratio_tfhe_ntt_avx2_inv", ai / tai, 3);
    println!("{r}");
    Ok(())
}
