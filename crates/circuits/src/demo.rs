//! A short end-to-end TFHE demonstration for `hecloud demo`.

use crate::circuits::{self, AdderKind, SumMode};
use crate::engine::BitEngine;
use crate::error::Result;
use crate::tfhe_engine::TfheEngine;
use crate::uint::EncryptedUint;
use crate::with_cost;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use std::time::{Duration, Instant};

/// What [`run_tfhe_demo`] did: inputs, decrypted results, checks, costs.
#[derive(Clone, Debug)]
pub struct DemoReport {
    /// Key generation time.
    pub keygen: Duration,
    /// The 32-bit numbers summed.
    pub addends: Vec<u32>,
    /// Their decrypted encrypted sum (full width, no wrap).
    pub sum: u64,
    /// Whether the sum matches the plaintext sum.
    pub sum_ok: bool,
    /// Time of the encrypted sum.
    pub sum_time: Duration,
    /// Bootstraps of the encrypted sum.
    pub sum_bootstraps: u64,
    /// The two 32-bit numbers compared.
    pub compared: (u32, u32),
    /// Decrypted `a < b`.
    pub less: bool,
    /// Whether it matches the plaintext comparison.
    pub less_ok: bool,
    /// Time of the encrypted comparison.
    pub cmp_time: Duration,
    /// Bootstraps of the encrypted comparison.
    pub cmp_bootstraps: u64,
}

impl DemoReport {
    /// Both checks passed.
    pub fn ok(&self) -> bool {
        self.sum_ok && self.less_ok
    }
}

impl std::fmt::Display for DemoReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "TFHE keygen: {:.2} s", self.keygen.as_secs_f64())?;
        writeln!(
            f,
            "encrypted sum of {:?} = {} ({}) in {:.2} s, {} bootstraps",
            self.addends,
            self.sum,
            if self.sum_ok { "ok" } else { "WRONG" },
            self.sum_time.as_secs_f64(),
            self.sum_bootstraps
        )?;
        write!(
            f,
            "encrypted {} < {} is {} ({}) in {:.2} s, {} bootstraps",
            self.compared.0,
            self.compared.1,
            self.less,
            if self.less_ok { "ok" } else { "WRONG" },
            self.cmp_time.as_secs_f64(),
            self.cmp_bootstraps
        )
    }
}

/// Generates TFHE keys, sums four random encrypted 32-bit numbers (full width),
/// compares two random encrypted 32-bit numbers, decrypts and checks both
/// against plaintext arithmetic. About 10–20 s on 2 cores, keygen included.
pub fn run_tfhe_demo() -> Result<DemoReport> {
    let t = Instant::now();
    let e = TfheEngine::generate();
    let keygen = t.elapsed();
    let mut rng = ChaCha20Rng::from_os_rng();
    let addends: Vec<u32> = (0..4).map(|_| rng.next_u32()).collect();
    let xs = addends
        .iter()
        .map(|&v| EncryptedUint::encrypt_u128(&e, u128::from(v), 32))
        .collect::<Result<Vec<_>>>()?;
    let t = Instant::now();
    let (s, cost) = with_cost(&e, || {
        circuits::sum(&e, &xs, SumMode::Full, AdderKind::Auto)
    });
    let sum_time = t.elapsed();
    let sum = s?.decrypt_u128(&e)? as u64;
    let expect: u64 = addends.iter().map(|&v| u64::from(v)).sum();
    let (a, b) = (rng.next_u32(), rng.next_u32());
    let (ca, cb) = (
        EncryptedUint::encrypt_u128(&e, a.into(), 32)?,
        EncryptedUint::encrypt_u128(&e, b.into(), 32)?,
    );
    let t = Instant::now();
    let (lt, cmp_cost) = with_cost(&e, || circuits::lt(&e, &ca, &cb));
    let cmp_time = t.elapsed();
    let less = e.decrypt_bit(&lt?)?;
    Ok(DemoReport {
        keygen,
        addends,
        sum,
        sum_ok: sum == expect,
        sum_time,
        sum_bootstraps: cost.bootstraps,
        compared: (a, b),
        less,
        less_ok: less == (a < b),
        cmp_time,
        cmp_bootstraps: cmp_cost.bootstraps,
    })
}
