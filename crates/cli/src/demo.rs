//! `hecloud demo`: a tour of what hecloud does, on embedded defaults, with
//! every result checked against an independent plaintext computation.

use std::time::{Duration, Instant};

use hecloud_bench::report::Table;
use hecloud_math::backend::default_backend;
use hecloud_math::poly::negacyclic_coefficient;
use hecloud_math::prime::ntt_primes;
use hecloud_math::{Domain, RnsBasis, Sampler};

/// One line of the closing summary.
struct Step {
    name: &'static str,
    ok: bool,
    detail: String,
    time: Duration,
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Runs every step, prints the summary, and fails if any check failed.
pub fn run() -> anyhow::Result<()> {
    println!("hecloud demo: every result below is checked against a plaintext reference.\n");
    let steps = vec![ntt_product()?, ckks_statistics()?, tfhe_integers()?];
    let mut table = Table::new("demo", &["step", "result", "time", "detail"]);
    for s in &steps {
        table.push(vec![
            s.name.into(),
            if s.ok { "ok" } else { "FAILED" }.into(),
            ms(s.time),
            s.detail.clone(),
        ]);
    }
    print!("\n{}", table.render());
    let failed: Vec<_> = steps.iter().filter(|s| !s.ok).map(|s| s.name).collect();
    anyhow::ensure!(failed.is_empty(), "checks failed: {}", failed.join(", "));
    Ok(())
}

/// Product of two random polynomials of degree 2^16 over a 28-prime RNS
/// basis through the NTT, spot-checked against direct negacyclic sums.
fn ntt_product() -> anyhow::Result<Step> {
    const LOG_N: u32 = 16;
    const LIMBS: usize = 28;
    const CHECKED: usize = 8;
    let n = 1usize << LOG_N;
    println!(
        "[ntt] a·b in Z_Q[X]/(X^{n} + 1), Q = 28 primes (one of 60 bits, 27 of 50), backend {}",
        default_backend().name()
    );
    let start = Instant::now();
    let primes: Vec<u64> = ntt_primes(60, n, 1, &[])?
        .into_iter()
        .chain(ntt_primes(50, n, LIMBS - 1, &[])?)
        .collect();
    let basis = RnsBasis::new(n, &primes)?;
    let t_tables = start.elapsed();
    let mut rng = Sampler::from_os();
    let a = rng.uniform_poly(&basis, Domain::Coefficient);
    let b = rng.uniform_poly(&basis, Domain::Coefficient);

    let t0 = Instant::now();
    let (mut fa, mut fb) = (a.clone(), b.clone());
    fa.to_ntt();
    fb.to_ntt();
    let t_fwd = t0.elapsed();
    let t1 = Instant::now();
    fa.mul_assign(&fb)?;
    let t_mul = t1.elapsed();
    let t2 = Instant::now();
    fa.to_coefficient();
    let t_inv = t2.elapsed();
    let product = fa;

    let t3 = Instant::now();
    let mut mismatches = 0;
    for (i, m) in basis.moduli().iter().enumerate() {
        for _ in 0..CHECKED {
            let k = rng.uniform_mod(n as u64) as usize;
            if negacyclic_coefficient(m, a.limb(i), b.limb(i), k) != product.limb(i)[k] {
                mismatches += 1;
            }
        }
    }
    let t_check = t3.elapsed();
    let total = t_fwd + t_mul + t_inv;
    println!(
        "  tables {}  2 forward NTTs {}  pointwise {}  inverse NTT {}  (product {})",
        ms(t_tables),
        ms(t_fwd),
        ms(t_mul),
        ms(t_inv),
        ms(total)
    );
    println!(
        "  checked {} coefficients ({CHECKED} per prime) against O(n) sums in {}: {} mismatches",
        CHECKED * LIMBS,
        ms(t_check),
        mismatches
    );
    Ok(Step {
        name: "NTT product, n=2^16, 28 primes",
        ok: mismatches == 0,
        detail: format!(
            "{} coefficients checked, {mismatches} wrong",
            CHECKED * LIMBS
        ),
        time: total,
    })
}

/// CKKS: encrypted mean and variance of real numbers, against plaintext.
fn ckks_statistics() -> anyhow::Result<Step> {
    const COUNT: usize = 1000;
    /// CKKS is approximate: the decrypted statistics must match to 1e-4 (relative).
    const TOLERANCE: f64 = 1e-4;
    let mut rng = Sampler::from_os();
    let values: Vec<f64> = (0..COUNT)
        .map(|_| (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 20.0 - 10.0)
        .collect();
    println!("\n[ckks] mean and variance of {COUNT} encrypted reals in [-10, 10]");
    let r = hecloud_ckks::demo::mean_variance_demo(&values)?;
    println!("  {}", r.to_string().replace('\n', "\n  "));
    let err = r.max_rel_error();
    Ok(Step {
        name: "CKKS mean + variance",
        ok: err <= TOLERANCE,
        detail: format!(
            "N={}, max relative error {err:.1e} (bound {TOLERANCE:.0e})",
            r.n
        ),
        time: Duration::from_secs_f64((r.encrypt_ms + r.compute_ms + r.decrypt_ms) / 1e3),
    })
}

/// TFHE: encrypted sum of 32-bit numbers and an encrypted comparison.
fn tfhe_integers() -> anyhow::Result<Step> {
    println!(
        "\n[tfhe] encrypted sum of four 32-bit numbers and a 32-bit comparison (bit-level circuits)"
    );
    let r = hecloud_circuits::demo::run_tfhe_demo()?;
    println!("  {}", r.to_string().replace('\n', "\n  "));
    Ok(Step {
        name: "TFHE sum + compare, 32-bit",
        ok: r.ok(),
        detail: format!(
            "{} + {} bootstraps (keygen {:.1} s)",
            r.sum_bootstraps,
            r.cmp_bootstraps,
            r.keygen.as_secs_f64()
        ),
        time: r.sum_time + r.cmp_time,
    })
}
