//! Precision reports: how far decrypted values are from the expected ones.

use num_complex::Complex64;

/// Absolute errors of a result, and their log2 (the "bits of precision" is
/// −log2 of the maximum error).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrecisionReport {
    /// Largest |got − want|.
    pub max_abs_err: f64,
    /// Mean |got − want|.
    pub mean_abs_err: f64,
    /// log2 of the largest error.
    pub log2_max_err: f64,
    /// log2 of the mean error.
    pub log2_mean_err: f64,
}

impl PrecisionReport {
    /// Bits of precision: −log2(max error).
    pub fn bits(&self) -> f64 {
        -self.log2_max_err
    }
}

impl std::fmt::Display for PrecisionReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "max err 2^{:.2}, mean err 2^{:.2} ({:.1} bits)",
            self.log2_max_err,
            self.log2_mean_err,
            self.bits()
        )
    }
}

/// Compares complex vectors slot by slot (over the shorter length).
///
/// ```
/// use num_complex::Complex64;
/// let r = hecloud_ckks::precision::report(
///     &[Complex64::new(1.0, 0.0)], &[Complex64::new(1.0 + 2f64.powi(-20), 0.0)]);
/// assert!((r.bits() - 20.0).abs() < 1e-9);
/// ```
pub fn report(want: &[Complex64], got: &[Complex64]) -> PrecisionReport {
    let errs: Vec<f64> = want.iter().zip(got).map(|(a, b)| (a - b).norm()).collect();
    let max = errs.iter().cloned().fold(0.0, f64::max);
    let mean = errs.iter().sum::<f64>() / errs.len().max(1) as f64;
    PrecisionReport {
        max_abs_err: max,
        mean_abs_err: mean,
        log2_max_err: max.log2(),
        log2_mean_err: mean.log2(),
    }
}

/// Compares real vectors.
pub fn report_real(want: &[f64], got: &[f64]) -> PrecisionReport {
    let w: Vec<Complex64> = want.iter().map(|&x| Complex64::new(x, 0.0)).collect();
    let g: Vec<Complex64> = got.iter().map(|&x| Complex64::new(x, 0.0)).collect();
    report(&w, &g)
}
