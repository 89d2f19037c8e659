//! Quick single-thread timings of the main CKKS operations at a preset
//! (`cargo run --release -p hecloud-ckks --example timing -- n16`); the
//! full comparison with peers is `hecloud bench ckks`. A second argument
//! `mul` or `rotate` repeats only that operation, for profilers; `encrypt`
//! times a fresh seeded secret-key encryption of real values in its phases
//! (encode, encrypt, serialize), and the same in pieces, a limb at a time
//! (`keys::encrypt_real_sk_pieces`), as the proxy makes them. `timing
//! boot [runs]` bootstraps at [`boot::BootPreset::N16`] (one thread,
//! `runs` times after one warm-up), for profilers; `hecloud bench boot`
//! is the comparison with Lattigo.
//!
//! The server and the benches keep freed memory in the C allocator
//! (`hecloud_server::alloc::retain_freed_memory`); for the same figures
//! here, run with
//! `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=2147483647:glibc.malloc.mmap_max=0:glibc.malloc.arena_max=1`.

use std::time::Instant;

use hecloud_ckks::{precision::report, *};
use num_complex::Complex64;

fn main() -> Result<()> {
    let which = std::env::args().nth(1).unwrap_or_else(|| "n14".into());
    if which == "boot" {
        let runs = std::env::args()
            .nth(2)
            .and_then(|r| r.parse().ok())
            .unwrap_or(3);
        return boot(runs);
    }
    let preset = Preset::ALL
        .into_iter()
        .find(|p| p.name() == which)
        .unwrap_or(Preset::N14);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("thread pool");
    pool.install(|| {
        let params = preset.build()?;
        let t = Instant::now();
        let keys = KeySet::generate(&params, &[1], false)?;
        println!("keygen {:?}", t.elapsed());
        let enc = Encoder::new(&params);
        let eval = Evaluator::new(&params, keys.evaluation_keys());
        let slots = params.slots();
        let a: Vec<Complex64> = (0..slots)
            .map(|i| Complex64::new((i as f64 * 0.37).sin(), (i as f64 * 0.11).cos()))
            .collect();
        let top = params.max_level();
        let pt = enc.encode(&a, top, params.default_scale())?;
        let ct = keys.encrypt(&pt)?;
        // `timing n16 mul|rotate`: only that operation, 30 times (for profilers).
        match std::env::args().nth(2).as_deref() {
            Some("mul") => {
                for _ in 0..30 {
                    eval.mul_relin_rescale(&ct, &ct)?;
                }
                return Ok(());
            }
            Some("encrypt") => {
                let sk = keys.secret_key();
                let reals: Vec<f64> = a.iter().map(|z| z.re).collect();
                let mut encryptor = hecloud_rlwe::Encryptor::new(params.rlwe());
                for _ in 0..5 {
                    let t = Instant::now();
                    let pt = enc.encode_real(&reals, top, params.default_scale())?;
                    let t1 = t.elapsed();
                    let ct = encryptor.encrypt_sk(sk, &pt)?;
                    let t2 = t.elapsed();
                    let bytes = ct.to_bytes();
                    let t3 = t.elapsed();
                    // The same encryption a limb at a time, serialized as made.
                    let t = Instant::now();
                    let mut pieces = 0;
                    keys::encrypt_real_sk_pieces(&params, sk, &enc, &reals, top, |p| {
                        pieces += p.len()
                    })?;
                    let t4 = t.elapsed();
                    assert_eq!(pieces, bytes.len());
                    println!(
                        "encode {t1:?} encrypt {:?} serialize {:?} ({} bytes); in pieces {t4:?}",
                        t2 - t1,
                        t3 - t2,
                        bytes.len()
                    );
                }
                return Ok(());
            }
            Some("rotate") => {
                for _ in 0..30 {
                    eval.rotate(&ct, 1)?;
                }
                return Ok(());
            }
            _ => {}
        }
        let (mut best_mul, mut best_rot) = (f64::MAX, f64::MAX);
        for _ in 0..8 {
            let t = Instant::now();
            let p = eval.mul_relin_rescale(&ct, &ct)?;
            let t1 = t.elapsed();
            let t = Instant::now();
            let r = eval.rotate(&ct, 1)?;
            let t2 = t.elapsed();
            let want: Vec<Complex64> = a.iter().map(|x| x * x).collect();
            let got = enc.decode(&keys.decrypt(&p)?)?;
            let _ = r;
            best_mul = best_mul.min(t1.as_secs_f64() * 1e3);
            best_rot = best_rot.min(t2.as_secs_f64() * 1e3);
            println!(
                "mul_relin_rescale {t1:?} rotate {t2:?} precision {}",
                report(&want, &got)
            );
        }
        println!("best of 8: mul_relin_rescale {best_mul:.1} ms, rotate {best_rot:.1} ms");
        Ok(())
    })
}

/// One warm-up and `runs` timed bootstrappings at the N = 2^16 preset, one
/// thread, with their precision.
fn boot(runs: usize) -> Result<()> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("thread pool");
    pool.install(|| {
        let (params, boot) = boot::BootPreset::N16.build()?;
        let t = Instant::now();
        let mut keys = KeySet::generate_at_levels(&params, &boot.rotation_levels(), true)?;
        let encapsulation = boot
            .literal()
            .ephemeral_hamming
            .map(|h| boot::EncapsulationKeys::generate(&params, keys.secret_key(), h))
            .transpose()?;
        println!("keygen {:?}", t.elapsed());
        let enc = Encoder::new(&params);
        let eval = Evaluator::new(&params, keys.take_evaluation_keys());
        let z: Vec<Complex64> = (0..params.slots())
            .map(|i| Complex64::new((i as f64 * 0.37).sin(), (i as f64 * 0.11).cos()))
            .collect();
        let ct = keys.encrypt(&enc.encode(&z, 0, params.default_scale())?)?;
        for run in 0..=runs {
            let t = Instant::now();
            let out = boot.bootstrap(&eval, encapsulation.as_ref(), &ct)?;
            let took = t.elapsed();
            let got = enc.decode(&keys.decrypt(&out)?)?;
            let label = if run == 0 { "warm-up" } else { "bootstrap" };
            println!("{label} {took:?} precision {}", report(&z, &got));
        }
        Ok(())
    })
}
