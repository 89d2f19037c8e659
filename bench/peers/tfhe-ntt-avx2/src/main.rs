//! Times tfhe-ntt's `prime64::Plan` forward and inverse NTT, AVX2 only,
//! for each `log_n:q` argument, on one thread: fastest of `samples`
//! batches of at least `batch_us` microseconds each (hecloud's
//! `timing::min_time`). Prints one JSON line per case:
//! `{"log_n":…,"q":…,"fwd_ns":…,"inv_ns":…}`.

use std::time::{Duration, Instant};

fn min_time(samples: usize, batch: Duration, op: &mut dyn FnMut()) -> f64 {
    op();
    let mut calls = 1usize;
    loop {
        let t = Instant::now();
        for _ in 0..calls {
            op();
        }
        if t.elapsed() >= batch {
            break;
        }
        calls *= 2;
    }
    (0..samples)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..calls {
                op();
            }
            t.elapsed().as_secs_f64() * 1e9 / calls as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (samples, batch_us) = (
        args[0].parse().expect("samples"),
        args[1].parse().expect("batch_us"),
    );
    let batch = Duration::from_micros(batch_us);
    for case in &args[2..] {
        let (log_n, q) = case.split_once(':').expect("log_n:q");
        let (log_n, q): (u32, u64) = (log_n.parse().expect("log_n"), q.parse().expect("q"));
        let n = 1usize << log_n;
        let plan = tfhe_ntt::prime64::Plan::try_new(n, q).expect("tfhe-ntt takes the prime");
        let mut a: Vec<u64> = (0..n as u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % q)
            .collect();
        let fwd = min_time(samples, batch, &mut || plan.fwd(&mut a));
        let inv = min_time(samples, batch, &mut || plan.inv(&mut a));
        println!("{{\"log_n\":{log_n},\"q\":{q},\"fwd_ns\":{fwd:.1},\"inv_ns\":{inv:.1}}}");
    }
}
