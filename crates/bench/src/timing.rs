//! Wall-clock timing of repeated operations.

use std::time::{Duration, Instant};

/// Median time of one call of `op`, measured over `samples` batches that each
/// run for at least `min_batch` (after one warm-up call).
///
/// ```
/// let t = hecloud_bench::timing::median_time(3, std::time::Duration::from_millis(1), || {
///     std::hint::black_box((0..1000u64).sum::<u64>());
/// });
/// assert!(t > std::time::Duration::ZERO);
/// ```
pub fn median_time(samples: usize, min_batch: Duration, op: impl FnMut()) -> Duration {
    let mut per_call = batch_times(samples, min_batch, op);
    per_call.sort();
    per_call[per_call.len() / 2]
}

/// Fastest time of one call of `op` over `samples` short batches (each at
/// least `min_batch`, after one warm-up call). On a machine shared with other
/// work the minimum is the least disturbed estimate of the cost itself.
///
/// ```
/// let t = hecloud_bench::timing::min_time(5, std::time::Duration::from_millis(1), || {
///     std::hint::black_box((0..1000u64).sum::<u64>());
/// });
/// assert!(t > std::time::Duration::ZERO);
/// ```
pub fn min_time(samples: usize, min_batch: Duration, op: impl FnMut()) -> Duration {
    batch_times(samples, min_batch, op)
        .into_iter()
        .min()
        .expect("at least one batch")
}

/// Time per call in each of `samples` (at least one) batches, after one
/// warm-up call and a calibration of how many calls fill `min_batch`.
fn batch_times(samples: usize, min_batch: Duration, mut op: impl FnMut()) -> Vec<Duration> {
    op();
    let start = Instant::now();
    let mut calls = 0u32;
    while start.elapsed() < min_batch || calls == 0 {
        op();
        calls += 1;
    }
    (0..samples.max(1))
        .map(|_| {
            let t = Instant::now();
            for _ in 0..calls {
                op();
            }
            t.elapsed() / calls
        })
        .collect()
}

/// Seconds of one run of `op` (for operations too long to repeat).
pub fn once<T>(op: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let out = op();
    (out, t.elapsed())
}
