//! Replayable randomness for tests.
//!
//! A test draws its random inputs through this module: each test thread
//! gets one stream, seeded from the operating system or, when it is set,
//! from `HECLOUD_TEST_SEED`. The seed is printed on the thread's first draw
//! (libtest shows it beside a failure), so a failure seen once replays
//! exactly:
//!
//! ```sh
//! HECLOUD_TEST_SEED=1234 cargo test --workspace --release --locked --test ops
//! ```
//!
//! Every generator handed out ([`rng`], [`sampler`]) is seeded from the
//! thread's stream, so a test that takes several still sees different
//! values from each, and the same ones on a replay.
//!
//! ```
//! use rand_core::RngCore;
//! let mut rng = hecloud_math::testing::rng();
//! let mut other = hecloud_math::testing::rng();
//! assert_ne!(rng.next_u64(), other.next_u64());
//! ```

use std::cell::RefCell;

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng, TryRngCore};

use crate::Sampler;

/// The environment variable that fixes the seed of every test thread.
pub const SEED_VAR: &str = "HECLOUD_TEST_SEED";

thread_local! {
    static STREAM: RefCell<Option<(u64, ChaCha20Rng)>> = const { RefCell::new(None) };
}

/// The seed of this thread's stream: `HECLOUD_TEST_SEED` if set (a decimal
/// u64), otherwise fresh from the operating system; printed to stderr when
/// first drawn.
///
/// # Panics
/// If `HECLOUD_TEST_SEED` is set but is not a decimal u64: a replay that
/// silently used another seed would test something else.
pub fn seed() -> u64 {
    with_stream(|seed, _| seed)
}

/// A ChaCha20 generator seeded from this thread's stream.
pub fn rng() -> ChaCha20Rng {
    ChaCha20Rng::from_seed(next_seed())
}

/// A [`Sampler`] seeded from this thread's stream.
pub fn sampler() -> Sampler {
    Sampler::from_seed(next_seed())
}

fn next_seed() -> [u8; 32] {
    with_stream(|_, stream| {
        let mut s = [0u8; 32];
        stream.fill_bytes(&mut s);
        s
    })
}

fn with_stream<T>(f: impl FnOnce(u64, &mut ChaCha20Rng) -> T) -> T {
    STREAM.with(|cell| {
        let mut cell = cell.borrow_mut();
        let (seed, stream) = cell.get_or_insert_with(|| {
            let seed = match std::env::var(SEED_VAR) {
                Ok(s) => s
                    .trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{SEED_VAR}={s:?} is not a decimal u64")),
                Err(_) => rand_core::OsRng
                    .try_next_u64()
                    .expect("the operating system's random source"),
            };
            eprintln!("{SEED_VAR}={seed} replays this test");
            (seed, ChaCha20Rng::seed_from_u64(seed))
        });
        f(*seed, stream)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_per_thread_and_distinct_generators() {
        let here = seed();
        assert_eq!(seed(), here, "a thread keeps its seed");
        assert_ne!(rng().next_u64(), rng().next_u64());
        // Another thread draws its own seed (equal only by a 2^-64 chance,
        // or when HECLOUD_TEST_SEED fixes both).
        let there = std::thread::spawn(seed).join().unwrap();
        if std::env::var_os(SEED_VAR).is_some() {
            assert_eq!(there, here);
        } else {
            assert_ne!(there, here);
        }
    }
}
