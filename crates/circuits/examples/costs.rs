//! Prints bootstrap counts and depths of the main circuits on the clear engine
//! (they equal the TFHE engine's): `cargo run --release --example costs`.

use hecloud_circuits::circuits::{self, AdderKind, SumMode};
use hecloud_circuits::{ClearEngine, EncryptedUint, with_cost};

fn main() -> Result<(), hecloud_circuits::CircuitError> {
    let e = ClearEngine::new();
    for w in [32usize, 64] {
        for n in [3usize, 4, 8, 16, 32, 64, 128, 256, 512, 1024] {
            let xs = (0..n)
                .map(|_| EncryptedUint::encrypt_u128(&e, 0, w))
                .collect::<Result<Vec<_>, _>>()?;
            let (_, c) = with_cost(&e, || {
                circuits::sum(&e, &xs, SumMode::Modular, AdderKind::Auto)
            });
            println!(
                "sum w={w} n={n}: {} bootstraps, depth {}",
                c.bootstraps, c.depth
            );
        }
    }
    for threads in [1usize, 2, 4, 16] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|_| hecloud_circuits::CircuitError::EmptyOperands)?;
        for w in [2usize, 4, 8, 16, 32, 64, 128, 256, 512, 1024] {
            let x = EncryptedUint::encrypt_u128(&e, 0, w)?;
            let (_, c) = pool.install(|| with_cost(&e, || circuits::lt(&e, &x, &x)));
            let (_, p) = with_cost(&e, || circuits::lt_published(&e, &x, &x));
            println!(
                "cmp threads={threads} w={w}: tree {} bootstraps depth {}, published {} depth {}",
                c.bootstraps, c.depth, p.bootstraps, p.depth
            );
        }
    }
    Ok(())
}
