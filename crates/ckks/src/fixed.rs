//! Fixed-point reals on big integers (256 fractional bits), for the one
//! computation f64 cannot do here: interpolating at equispaced nodes.
//! Their Lebesgue constant (about 2^n/(e·n·ln n) for n + 1 nodes, 2^23 at
//! n = 30) multiplies f64's rounding of the data to about 2^-30, while
//! bootstrapping's EvalMod needs its polynomial to 2^-50.

use num_bigint::BigInt;

/// Fractional bits: 2^-256 leaves 2^-200 after the Lebesgue constant and
/// the sums, far below f64's 2^-53.
const FRAC: u32 = 256;

/// x · 2^256, rounded down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fixed(BigInt);

impl Fixed {
    pub(crate) fn int(i: i64) -> Self {
        Self(BigInt::from(i) << FRAC)
    }

    pub(crate) fn ratio(num: i64, den: i64) -> Self {
        Self((BigInt::from(num) << FRAC) / den)
    }

    pub(crate) fn add(&self, o: &Self) -> Self {
        Self(&self.0 + &o.0)
    }

    pub(crate) fn sub(&self, o: &Self) -> Self {
        Self(&self.0 - &o.0)
    }

    pub(crate) fn mul(&self, o: &Self) -> Self {
        Self((&self.0 * &o.0) >> FRAC)
    }

    pub(crate) fn div(&self, o: &Self) -> Self {
        Self((&self.0 << FRAC) / &o.0)
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.0 == BigInt::ZERO
    }

    /// The nearest f64 (to within one rounding): the top 64 of the 256
    /// fractional bits, integer part up to 2^63.
    pub(crate) fn to_f64(&self) -> f64 {
        let top: BigInt = &self.0 >> (FRAC - 64);
        i128::try_from(&top).map_or(f64::NAN, |t| t as f64 / 2f64.powi(64))
    }

    /// π by Machin's formula, 16·atan(1/5) − 4·atan(1/239).
    pub(crate) fn pi() -> Self {
        Self::atan_inv(5)
            .mul(&Self::int(16))
            .sub(&Self::atan_inv(239).mul(&Self::int(4)))
    }

    /// atan(1/k) = Σ (−1)^i / ((2i + 1)·k^(2i+1)).
    fn atan_inv(k: i64) -> Self {
        let mut power = Self::ratio(1, k);
        let mut sum = Self::int(0);
        for i in 0i64.. {
            if power.is_zero() {
                break;
            }
            let term = Self(&power.0 / (2 * i + 1));
            sum = if i % 2 == 0 {
                sum.add(&term)
            } else {
                sum.sub(&term)
            };
            power = Self(&power.0 / (k * k));
        }
        sum
    }

    /// cos x: x reduced to [−π, π] by a multiple of 2π, then Taylor's
    /// series to the last nonzero term.
    pub(crate) fn cos(&self, pi: &Self) -> Self {
        let two_pi = pi.add(pi);
        let turns = BigInt::from(self.add(pi).div(&two_pi).to_f64().floor() as i64);
        let x = Self(&self.0 - &two_pi.0 * turns);
        let x2 = x.mul(&x);
        let (mut term, mut sum) = (Self::int(1), Self::int(1));
        for i in 1i64.. {
            term = Self(-(term.mul(&x2).0) / ((2 * i - 1) * (2 * i)));
            if term.is_zero() {
                break;
            }
            sum = sum.add(&term);
        }
        sum
    }
}

/// The Chebyshev coefficients, on [−h, h], of the polynomial of degree 2b
/// through (i, f(i)) for every integer |i| ≤ b (h ≥ b): its values at
/// the 2b + 1 Chebyshev points of [−h, h] by the barycentric formula (the
/// weights of equispaced nodes are binomials, (−1)^j·C(2b, j)), then
/// their discrete cosine transform.
pub(crate) fn chebyshev_through_integers(b: i64, h: i64, f: impl Fn(i64) -> Fixed) -> Vec<f64> {
    let n = 2 * b;
    let m = n + 1;
    let pi = Fixed::pi();
    let mut weight = Fixed::int(1);
    let nodes: Vec<(Fixed, Fixed, Fixed)> = (0..=n)
        .map(|j| {
            let w = if j % 2 == 0 {
                weight.clone()
            } else {
                Fixed::int(0).sub(&weight)
            };
            // C(n, j + 1) from C(n, j).
            weight = Fixed(&weight.0 * (n - j) / (j + 1));
            (Fixed::int(j - b), w, f(j - b))
        })
        .collect();
    // u_k = cos(π(k + 1/2)/m) and p(h·u_k).
    let points: Vec<(Fixed, Fixed)> = (0..m)
        .map(|k| {
            let u = pi.mul(&Fixed::ratio(2 * k + 1, 2 * m)).cos(&pi);
            let x = u.mul(&Fixed::int(h));
            let (mut num, mut den) = (Fixed::int(0), Fixed::int(0));
            for (xj, wj, fj) in &nodes {
                let d = x.sub(xj);
                if d.is_zero() {
                    return (u, fj.clone());
                }
                let r = wj.div(&d);
                num = num.add(&r.mul(fj));
                den = den.add(&r);
            }
            (u, num.div(&den))
        })
        .collect();
    // c_j = (2/m)·Σ_k p_k·T_j(u_k), c_0 halved; T_j(u_k) by its
    // recurrence, all of it in fixed point.
    let mut t_prev: Vec<Fixed> = points.iter().map(|_| Fixed::int(1)).collect();
    let mut t: Vec<Fixed> = points.iter().map(|(u, _)| u.clone()).collect();
    let mut coeffs = Vec::with_capacity(m as usize);
    for j in 0..m {
        let t_j = if j == 0 { &t_prev } else { &t };
        let s = points
            .iter()
            .zip(t_j)
            .fold(Fixed::int(0), |s, ((_, p), tj)| s.add(&p.mul(tj)));
        let scale = if j == 0 { 1 } else { 2 };
        coeffs.push(s.mul(&Fixed::ratio(scale, m)).to_f64());
        if j >= 1 {
            let next: Vec<Fixed> = points
                .iter()
                .zip(t.iter().zip(&t_prev))
                .map(|((u, _), (tj, tp))| u.mul(tj).mul(&Fixed::int(2)).sub(tp))
                .collect();
            t_prev = std::mem::replace(&mut t, next);
        }
    }
    coeffs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pi_and_cos_match_f64() {
        let pi = Fixed::pi();
        assert_eq!(pi.to_f64(), std::f64::consts::PI);
        for (num, den) in [(0, 1), (1, 3), (-7, 2), (25, 1), (-100, 7)] {
            let x = num as f64 / den as f64;
            let got = Fixed::ratio(num, den).cos(&pi).to_f64();
            assert!((got - x.cos()).abs() < 1e-15, "cos {x}: {got}");
        }
    }
}
