//! The CKKS step of `hecloud demo`: the encrypted mean and variance of a
//! vector of real numbers, checked against the plaintext computation.

use std::time::Instant;

use crate::error::{CkksError, Result};
use crate::{Encoder, Evaluator, KeySet, Preset};

/// What the demo computed, how close it came and how long it took.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoReport {
    /// Number of values.
    pub count: usize,
    /// Ring degree used.
    pub n: usize,
    /// Mean computed under encryption.
    pub mean: f64,
    /// Variance computed under encryption.
    pub variance: f64,
    /// Plaintext mean.
    pub plain_mean: f64,
    /// Plaintext variance.
    pub plain_variance: f64,
    /// Key generation time (ms).
    pub keygen_ms: f64,
    /// Encode + encrypt time (ms).
    pub encrypt_ms: f64,
    /// Encrypted computation time (ms).
    pub compute_ms: f64,
    /// Decrypt + decode time (ms).
    pub decrypt_ms: f64,
}

impl DemoReport {
    /// Largest relative error of the two results.
    pub fn max_rel_error(&self) -> f64 {
        let rel = |a: f64, b: f64| (a - b).abs() / b.abs().max(1e-12);
        rel(self.mean, self.plain_mean).max(rel(self.variance, self.plain_variance))
    }
}

impl std::fmt::Display for DemoReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "CKKS (N = {}, 128-bit preset): mean and variance of {} encrypted reals",
            self.n, self.count
        )?;
        writeln!(
            f,
            "  mean     {:.9} (plaintext {:.9})",
            self.mean, self.plain_mean
        )?;
        writeln!(
            f,
            "  variance {:.9} (plaintext {:.9})",
            self.variance, self.plain_variance
        )?;
        write!(
            f,
            "  keygen {:.1} ms, encrypt {:.1} ms, compute {:.1} ms, decrypt {:.1} ms; max relative error {:.1e}",
            self.keygen_ms,
            self.encrypt_ms,
            self.compute_ms,
            self.decrypt_ms,
            self.max_rel_error()
        )
    }
}

/// Encrypts `values` (at most 8192, each |x| ≤ 2^20), computes their mean
/// and variance homomorphically with rotate-and-sum (N = 2^14 preset,
/// sparse slots) and checks both against the plaintext.
///
/// ```
/// let r = hecloud_ckks::demo::mean_variance_demo(&[1.0, 2.0, 3.0, 4.0]).unwrap();
/// assert!((r.mean - 2.5).abs() < 1e-6 && (r.variance - 1.25).abs() < 1e-6);
/// ```
pub fn mean_variance_demo(values: &[f64]) -> Result<DemoReport> {
    let count = values.len();
    if count == 0 || count > 8192 {
        return Err(CkksError::Slots(format!("{count} values (1..=8192)")));
    }
    if values
        .iter()
        .any(|x| !x.is_finite() || x.abs() > (1u64 << 20) as f64)
    {
        return Err(CkksError::ValueOutOfRange(
            "values must be finite, |x| ≤ 2^20".into(),
        ));
    }
    let params = Preset::N14.build()?;
    let slots = count.next_power_of_two();
    let rotations: Vec<i64> = (0..slots.trailing_zeros()).map(|i| 1i64 << i).collect();
    let t = Instant::now();
    let keys = KeySet::generate(&params, &rotations, false)?;
    let keygen_ms = t.elapsed().as_secs_f64() * 1e3;
    let enc = Encoder::with_slots(&params, slots)?;
    let eval = Evaluator::new(&params, keys.evaluation_keys());

    let t = Instant::now();
    let top = params.max_level();
    let ct = keys.encrypt(&enc.encode_real(values, top, params.default_scale())?)?;
    let encrypt_ms = t.elapsed().as_secs_f64() * 1e3;

    let t = Instant::now();
    let inv = 1.0 / count as f64;
    // mean = Σx / n (the zero padding adds nothing).
    let sum = eval.rotate_and_sum(&ct, slots)?;
    let mean = eval.mul_const(&sum, inv)?;
    // variance = Σx² / n − mean².
    let sq = eval.mul_relin_rescale(&ct, &ct)?;
    let sq_mean = eval.mul_const(&eval.rotate_and_sum(&sq, slots)?, inv)?;
    let mean_sq = eval.mul_relin_rescale(&mean, &mean)?;
    // Levels are matched by `sub`; the two scales (Δ²/q_top and Δ²/q_top−1)
    // agree within the evaluator's tolerance.
    let var = eval.sub(&sq_mean, &mean_sq)?;
    let compute_ms = t.elapsed().as_secs_f64() * 1e3;

    let t = Instant::now();
    let mean_out = enc.decode_real(&keys.decrypt(&mean)?)?[0];
    let var_out = enc.decode_real(&keys.decrypt(&var)?)?[0];
    let decrypt_ms = t.elapsed().as_secs_f64() * 1e3;

    let plain_mean = values.iter().sum::<f64>() * inv;
    let plain_variance = values.iter().map(|x| x * x).sum::<f64>() * inv - plain_mean * plain_mean;
    Ok(DemoReport {
        count,
        n: params.n(),
        mean: mean_out,
        variance: var_out,
        plain_mean,
        plain_variance,
        keygen_ms,
        encrypt_ms,
        compute_ms,
        decrypt_ms,
    })
}
