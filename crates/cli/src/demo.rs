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
    let steps = vec![ntt_product()?];
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
