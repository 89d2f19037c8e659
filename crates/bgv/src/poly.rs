//! Polynomials over Z_t on encrypted slots, and what they give: the
//! comparison of integers encrypted whole (what the research called
//! impossible for SEAL).
//!
//! [`eval_poly`] evaluates p(z) = Σ c_i·z^i of degree d with baby steps
//! z, z², …, z^k (k a power of two near √d) and giant steps z^k, z^2k,
//! z^4k, …: p = low + z^m·high, split recursively at the largest giant
//! power below the degree, leaves Σ c_i·z^i by constants only. It costs
//! about k + d/k + log2(d/k) products (≈ 2√d) at depth ⌈log2(d + 1)⌉ + 1.
//!
//! [`LessThan`] compares x, y ∈ [0, D) (2D ≤ t) slot by slot: x < y exactly
//! when x − y mod t lies in [t − D + 1, t − 1], and the indicator of that
//! set on the 2D − 1 possible differences is one polynomial of degree
//! 2D − 2 over Z_t (Lagrange interpolation), so one comparison costs about
//! 2·√(2D) products at depth log2(2D) + 1:
//!
//! | D | degree | products | depth |
//! | --- | --- | --- | --- |
//! | 2^4 | 30 | 12 | 6 |
//! | 2^8 | 510 | 50 | 10 |
//! | 2^12 | 8190 | 190 | 14 |
//!
//! Larger integers go through the bit layouts of `hecloud-circuits` (or a
//! key holder's refresh between the steps of a longer chain).

use crate::error::{BgvError, Result};
use crate::evaluator::Evaluator;
use hecloud_math::Modulus;
use hecloud_rlwe::Ciphertext;

/// p(z) for coefficients `coeffs` (lowest first, each below t).
pub fn eval_poly(eval: &Evaluator, z: &Ciphertext, coeffs: &[u64]) -> Result<Ciphertext> {
    let d = coeffs.iter().rposition(|&c| c != 0).unwrap_or(0);
    let k = (((d + 1) as f64).sqrt().ceil() as usize)
        .next_power_of_two()
        .max(2);
    // z^1 … z^k by a product tree (z^i = z^⌈i/2⌉·z^⌊i/2⌋), then all at the
    // lowest of their levels so the leaves add without switching.
    let mut baby: Vec<Ciphertext> = vec![z.clone()];
    for i in 2..=k.min(d.max(1)) {
        let (a, b) = (i.div_ceil(2), i / 2);
        let p = eval.mul_relin(&baby[a - 1], &baby[b - 1])?;
        baby.push(p);
    }
    let floor = baby.iter().map(Ciphertext::level).min().unwrap_or(0);
    let baby = baby
        .iter()
        .map(|c| eval.mod_switch_to(c, floor))
        .collect::<Result<Vec<_>>>()?;
    // Giant powers z^k, z^2k, z^4k, … up to the degree.
    let mut giant: Vec<Ciphertext> = Vec::new();
    if d >= k {
        let mut g = baby[k - 1].clone();
        let mut span = k;
        while span <= d {
            giant.push(g.clone());
            span *= 2;
            if span <= d {
                g = eval.mul_relin(&g, &g)?;
            }
        }
    }
    split(eval, &baby, &giant, k, &coeffs[..=d])
}

/// Σ c_i·z^i for a part of at most k coefficients, or low + z^m·high.
fn split(
    eval: &Evaluator,
    baby: &[Ciphertext],
    giant: &[Ciphertext],
    k: usize,
    coeffs: &[u64],
) -> Result<Ciphertext> {
    if coeffs.len() <= k {
        return leaf(eval, baby, coeffs);
    }
    // The largest giant power k·2^j below the length.
    let j = (0..giant.len())
        .rev()
        .find(|&j| k << j < coeffs.len())
        .ok_or_else(|| BgvError::NotBgv("polynomial split without a giant step".into()))?;
    let m = k << j;
    let low = split(eval, baby, giant, k, &coeffs[..m])?;
    let high = split(eval, baby, giant, k, &coeffs[m..])?;
    let top = eval.mul_relin(&giant[j], &high)?;
    eval.add(&top, &low)
}

fn leaf(eval: &Evaluator, baby: &[Ciphertext], coeffs: &[u64]) -> Result<Ciphertext> {
    let terms = coeffs[1..]
        .iter()
        .zip(baby)
        .filter(|(c, _)| **c != 0)
        .map(|(&c, z)| eval.mul_scalar(z, c))
        .collect::<Result<Vec<_>>>()?;
    let sum = if terms.is_empty() {
        // A constant: 0·z keeps the shape of a ciphertext.
        eval.mul_scalar(&baby[0], 0)?
    } else {
        eval.add_many(&terms)?
    };
    if coeffs[0] == 0 {
        Ok(sum)
    } else {
        eval.add_scalar(&sum, coeffs[0])
    }
}

/// The coefficients (lowest first) of the polynomial of degree < points.len()
/// through `(x_i, y_i)` over Z_t, by Newton's divided differences.
pub fn interpolate(t: &Modulus, points: &[(u64, u64)]) -> Result<Vec<u64>> {
    let n = points.len();
    let xs: Vec<u64> = points.iter().map(|p| t.reduce(p.0)).collect();
    let mut dd: Vec<u64> = points.iter().map(|p| t.reduce(p.1)).collect();
    for level in 1..n {
        for i in (level..n).rev() {
            let den = t.sub(xs[i], xs[i - level]);
            let inv = t.inv(den).map_err(|_| {
                BgvError::PlaintextModulus(format!(
                    "interpolation points coincide mod {}",
                    t.value()
                ))
            })?;
            dd[i] = t.mul(t.sub(dd[i], dd[i - 1]), inv);
        }
    }
    // Newton form to monomials: p = dd_0 + (x − x_0)(dd_1 + (x − x_1)(…)).
    let mut coeffs = vec![0u64; n];
    for i in (0..n).rev() {
        // coeffs ← coeffs·(x − x_i) + dd_i
        let mut next = vec![0u64; n];
        for j in 0..n {
            if coeffs[j] == 0 {
                continue;
            }
            if j + 1 < n {
                next[j + 1] = t.add(next[j + 1], coeffs[j]);
            }
            next[j] = t.sub(next[j], t.mul(coeffs[j], xs[i]));
        }
        next[0] = t.add(next[0], dd[i]);
        coeffs = next;
    }
    Ok(coeffs)
}

/// Slot-wise x < y for integers below a bound D, by one polynomial of
/// degree 2D − 2 in x − y (see the module docs for its cost).
///
/// ```
/// use hecloud_bgv::{BgvParameters, Encoder, Evaluator, KeySet, params::test_literal};
/// use hecloud_bgv::poly::LessThan;
/// let params = BgvParameters::new_insecure_for_tests(test_literal(10, 7, 65537)).unwrap();
/// let keys = KeySet::generate(&params, &[], false).unwrap();
/// let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
/// let lt = LessThan::new(&params, 16).unwrap();
/// let x = keys.encrypt(&enc.encode(&[3, 9, 15, 0]).unwrap()).unwrap();
/// let y = keys.encrypt(&enc.encode(&[4, 9, 2, 0]).unwrap()).unwrap();
/// let r = lt.eval(&eval, &x, &y).unwrap();
/// assert_eq!(&enc.decode(&keys.decrypt(&r).unwrap()).unwrap()[..4], &[1, 0, 0, 0]);
/// ```
#[derive(Debug, Clone)]
pub struct LessThan {
    bound: u64,
    coeffs: std::sync::Arc<[u64]>,
}

/// Comparison polynomials already interpolated, by (t, bound), most
/// recent last: an interpolation takes about 150 ms at bound 1024, and
/// every job validating or running a comparison needed it again.
static INTERPOLATED: std::sync::Mutex<Vec<Interpolated>> = std::sync::Mutex::new(Vec::new());

/// (t, bound) and the comparison's coefficients.
type Interpolated = ((u64, u64), std::sync::Arc<[u64]>);

/// Polynomials [`INTERPOLATED`] keeps (16 KiB each at bound 1024).
const INTERPOLATED_KEPT: usize = 64;

impl LessThan {
    /// The comparison of values in [0, `bound`) under the parameters' t
    /// (which must be at least 2·bound).
    pub fn new(params: &crate::BgvParameters, bound: u64) -> Result<Self> {
        let t = params.t_modulus();
        if bound < 2 || bound.saturating_mul(2) > t.value() {
            return Err(BgvError::PlaintextModulus(format!(
                "comparing values below {bound} needs t ≥ {} (t = {})",
                bound.saturating_mul(2),
                t.value()
            )));
        }
        let key = (t.value(), bound);
        let cached = |kept: &mut Vec<Interpolated>| {
            let i = kept.iter().position(|(k, _)| *k == key)?;
            let entry = kept.remove(i);
            let coeffs = entry.1.clone();
            kept.push(entry);
            Some(coeffs)
        };
        let lock = || INTERPOLATED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(coeffs) = cached(&mut lock()) {
            return Ok(Self { bound, coeffs });
        }
        // Interpolated outside the lock.
        let points: Vec<(u64, u64)> = (0..bound)
            .map(|d| (d, 0))
            .chain((1..bound).map(|d| (t.value() - d, 1)))
            .collect();
        let coeffs: std::sync::Arc<[u64]> = interpolate(t, &points)?.into();
        let mut kept = lock();
        if cached(&mut kept).is_none() {
            if kept.len() >= INTERPOLATED_KEPT {
                kept.remove(0);
            }
            kept.push((key, coeffs.clone()));
        }
        Ok(Self { bound, coeffs })
    }

    /// The values compared lie below this bound.
    pub fn bound(&self) -> u64 {
        self.bound
    }

    /// The polynomial, lowest coefficient first.
    pub fn coefficients(&self) -> &[u64] {
        &self.coeffs
    }

    /// 1 in the slots where x < y, 0 elsewhere (for x, y below the bound;
    /// other values give unspecified slots).
    pub fn eval(&self, eval: &Evaluator, x: &Ciphertext, y: &Ciphertext) -> Result<Ciphertext> {
        let diff = eval.sub(x, y)?;
        eval_poly(eval, &diff, &self.coeffs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BgvParameters, params::test_literal};

    /// A comparison's polynomial is interpolated once per (t, bound) and
    /// shared: the second is the first's buffer, equal to a fresh
    /// interpolation; another bound or t is another polynomial.
    #[test]
    fn comparisons_share_their_interpolation() {
        let p = BgvParameters::new_insecure_for_tests(test_literal(10, 2, 65537)).unwrap();
        let (a, b) = (
            LessThan::new(&p, 33).unwrap(),
            LessThan::new(&p, 33).unwrap(),
        );
        assert!(std::sync::Arc::ptr_eq(&a.coeffs, &b.coeffs));
        let t = p.t_modulus();
        let points: Vec<(u64, u64)> = (0..33)
            .map(|d| (d, 0))
            .chain((1..33).map(|d| (t.value() - d, 1)))
            .collect();
        assert_eq!(a.coefficients(), &interpolate(t, &points).unwrap()[..]);
        let c = LessThan::new(&p, 34).unwrap();
        assert_eq!(c.coefficients().len(), 67);
        let other = BgvParameters::new_insecure_for_tests(test_literal(10, 2, 786433)).unwrap();
        let d = LessThan::new(&other, 33).unwrap();
        assert_ne!(a.coefficients(), d.coefficients());
    }
}
