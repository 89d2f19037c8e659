//! Arithmetic modulo a word-size modulus q < 2^62.
//!
//! Reduction of full 128-bit products is Barrett's, with the 128-bit constant
//! ⌊2^128 / q⌋; multiplication by a constant known in advance is Shoup's, with
//! ⌊w·2^64 / q⌋ precomputed. The `_lazy` variants leave results in [0, 2q)
//! (the NTT keeps values in [0, 4q)), which is why q must stay below 2^62.

use crate::error::{MathError, Result};

/// Largest supported modulus (exclusive): 4q must fit a u64.
pub const MAX_MODULUS: u64 = 1 << 62;

/// A modulus with its precomputed reduction constants.
///
/// ```
/// use hecloud_math::Modulus;
/// let q = Modulus::new(97).unwrap();
/// assert_eq!(q.mul(50, 60), (50 * 60) % 97);
/// assert_eq!(q.sub(3, 5), 95);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modulus {
    q: u64,
    /// ⌊2^128 / q⌋ as (low, high) words.
    ratio: (u64, u64),
}

impl Modulus {
    /// A modulus `q` in `2..2^62`.
    pub fn new(q: u64) -> Result<Self> {
        if !(2..MAX_MODULUS).contains(&q) {
            return Err(MathError::ModulusOutOfRange(q));
        }
        // ⌊2^128 / q⌋ = ⌊(2^128 - 1) / q⌋ because q is not a power of two
        // dividing 2^128 exactly, except q = 2^k where the two differ by one;
        // the Barrett correction step absorbs that.
        let r = u128::MAX / q as u128;
        Ok(Self {
            q,
            ratio: (r as u64, (r >> 64) as u64),
        })
    }

    /// The modulus value.
    #[inline(always)]
    pub const fn value(&self) -> u64 {
        self.q
    }

    /// Bit length of q.
    pub const fn bits(&self) -> u32 {
        64 - self.q.leading_zeros()
    }

    /// `a + b mod q` for `a, b < q`.
    #[inline(always)]
    pub fn add(&self, a: u64, b: u64) -> u64 {
        let s = a + b;
        if s >= self.q { s - self.q } else { s }
    }

    /// `a - b mod q` for `a, b < q`.
    #[inline(always)]
    pub fn sub(&self, a: u64, b: u64) -> u64 {
        if a >= b { a - b } else { a + self.q - b }
    }

    /// `-a mod q` for `a < q`.
    #[inline(always)]
    pub fn neg(&self, a: u64) -> u64 {
        if a == 0 { 0 } else { self.q - a }
    }

    /// Barrett reduction of any `x < 2^128`.
    ///
    /// The quotient estimate ⌊x·⌊2^128/q⌋ / 2^128⌋ (computed without the low
    /// word of the lowest partial product) falls short of ⌊x/q⌋ by at most 2,
    /// so the remainder is in [0, 3q) before two conditional subtractions.
    #[inline(always)]
    pub fn reduce_u128(&self, x: u128) -> u64 {
        let (x0, x1) = (x as u64, (x >> 64) as u64);
        let (r0, r1) = self.ratio;
        // Upper 128 bits of the 256-bit product x·ratio, keeping only the low
        // word of the quotient (enough since the remainder is computed mod 2^64).
        let carry = ((x0 as u128 * r0 as u128) >> 64) as u64;
        let t = x0 as u128 * r1 as u128 + carry as u128;
        let u = x1 as u128 * r0 as u128 + (t as u64) as u128;
        let quotient = x1
            .wrapping_mul(r1)
            .wrapping_add((t >> 64) as u64)
            .wrapping_add((u >> 64) as u64);
        let r = x0.wrapping_sub(quotient.wrapping_mul(self.q));
        let r = if r >= self.q { r - self.q } else { r };
        if r >= self.q { r - self.q } else { r }
    }

    /// `a mod q` for any u64.
    #[inline(always)]
    pub fn reduce(&self, a: u64) -> u64 {
        self.reduce_u128(a as u128)
    }

    /// `a · b mod q` for `a, b < 2^64` (Barrett on the 128-bit product).
    #[inline(always)]
    pub fn mul(&self, a: u64, b: u64) -> u64 {
        self.reduce_u128(a as u128 * b as u128)
    }

    /// Shoup's precomputed companion ⌊w·2^64 / q⌋ of a constant `w < q`.
    #[inline]
    pub fn shoup(&self, w: u64) -> u64 {
        debug_assert!(w < self.q);
        (((w as u128) << 64) / self.q as u128) as u64
    }

    /// `x · w mod q` in [0, 2q), for any `x < 2^64`, with `w_shoup = self.shoup(w)`.
    #[inline(always)]
    pub fn mul_shoup_lazy(&self, x: u64, w: u64, w_shoup: u64) -> u64 {
        let hi = ((x as u128 * w_shoup as u128) >> 64) as u64;
        x.wrapping_mul(w).wrapping_sub(hi.wrapping_mul(self.q))
    }

    /// `x · w mod q` in [0, q), with `w_shoup = self.shoup(w)`.
    #[inline(always)]
    pub fn mul_shoup(&self, x: u64, w: u64, w_shoup: u64) -> u64 {
        let r = self.mul_shoup_lazy(x, w, w_shoup);
        if r >= self.q { r - self.q } else { r }
    }

    /// `a^e mod q`.
    pub fn pow(&self, mut a: u64, mut e: u64) -> u64 {
        let mut r = 1 % self.q;
        a %= self.q;
        while e > 0 {
            if e & 1 == 1 {
                r = self.mul(r, a);
            }
            a = self.mul(a, a);
            e >>= 1;
        }
        r
    }

    /// The inverse of `a` modulo q, if `gcd(a, q) = 1`.
    pub fn inv(&self, a: u64) -> Result<u64> {
        // Extended Euclid on signed 128-bit values.
        let (mut r0, mut r1) = (self.q as i128, (a % self.q) as i128);
        let (mut t0, mut t1) = (0i128, 1i128);
        while r1 != 0 {
            let k = r0 / r1;
            (r0, r1) = (r1, r0 - k * r1);
            (t0, t1) = (t1, t0 - k * t1);
        }
        if r0 != 1 {
            return Err(MathError::NotInvertible {
                value: a,
                q: self.q,
            });
        }
        Ok(t0.rem_euclid(self.q as i128) as u64)
    }

    /// Reduces a value in [0, 2q) to [0, q).
    #[inline(always)]
    pub fn reduce_once(&self, a: u64) -> u64 {
        if a >= self.q { a - self.q } else { a }
    }

    /// Maps a signed integer with |a| < q to [0, q) without a branch on
    /// its value (secret coefficients): q is added where a is negative.
    #[inline(always)]
    pub fn from_small_i64(&self, a: i64) -> u64 {
        (a as u64).wrapping_add(self.q & ((a >> 63) as u64))
    }

    /// Maps a signed integer to [0, q).
    #[inline(always)]
    pub fn from_i64(&self, a: i64) -> u64 {
        let r = self.reduce(a.unsigned_abs());
        if a < 0 { self.neg(r) } else { r }
    }

    /// Centered representative of `a < q` in (-q/2, q/2].
    #[inline(always)]
    pub fn center(&self, a: u64) -> i64 {
        if a > self.q / 2 {
            a as i64 - self.q as i64
        } else {
            a as i64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn modulus() -> impl Strategy<Value = u64> {
        prop_oneof![
            2u64..1000,
            2u64..MAX_MODULUS,
            (MAX_MODULUS - 1000)..MAX_MODULUS
        ]
    }

    proptest! {
        #[test]
        fn barrett_matches_u128(q in modulus(), x in any::<u128>()) {
            let m = Modulus::new(q).unwrap();
            prop_assert_eq!(m.reduce_u128(x) as u128, x % q as u128);
        }

        #[test]
        fn mul_add_sub_neg_match_u128(q in modulus(), a in any::<u64>(), b in any::<u64>()) {
            let m = Modulus::new(q).unwrap();
            let (a, b) = (a % q, b % q);
            let qq = q as u128;
            prop_assert_eq!(m.mul(a, b) as u128, a as u128 * b as u128 % qq);
            prop_assert_eq!(m.add(a, b) as u128, (a as u128 + b as u128) % qq);
            prop_assert_eq!(m.sub(a, b) as u128, (a as u128 + qq - b as u128) % qq);
            prop_assert_eq!(m.neg(a) as u128, (qq - a as u128) % qq);
        }

        #[test]
        fn shoup_is_exact_and_lazy_in_range(q in modulus(), x in any::<u64>(), w in any::<u64>()) {
            let m = Modulus::new(q).unwrap();
            let w = w % q;
            let ws = m.shoup(w);
            let lazy = m.mul_shoup_lazy(x, w, ws);
            prop_assert!(lazy < 2 * q);
            prop_assert_eq!(lazy % q, ((x as u128 * w as u128) % q as u128) as u64);
            prop_assert_eq!(m.mul_shoup(x, w, ws), ((x as u128 * w as u128) % q as u128) as u64);
        }

        #[test]
        fn from_i64_matches_rem_euclid(q in modulus(), a in prop_oneof![any::<i64>(), Just(i64::MIN), Just(-1i64), Just(0i64)]) {
            let m = Modulus::new(q).unwrap();
            prop_assert_eq!(m.from_i64(a) as i128, (a as i128).rem_euclid(q as i128));
        }

        #[test]
        fn inverse_and_pow(a in 1u64..1_000_000_007) {
            let m = Modulus::new(1_000_000_007).unwrap();
            let inv = m.inv(a).unwrap();
            prop_assert_eq!(m.mul(a, inv), 1);
            prop_assert_eq!(m.pow(a, 1_000_000_006), 1); // Fermat
        }
    }

    #[test]
    fn rejects_out_of_range_and_non_invertible() {
        assert_eq!(Modulus::new(0), Err(MathError::ModulusOutOfRange(0)));
        assert_eq!(Modulus::new(1), Err(MathError::ModulusOutOfRange(1)));
        assert!(Modulus::new(MAX_MODULUS).is_err());
        assert!(Modulus::new(MAX_MODULUS - 1).is_ok());
        let m = Modulus::new(12).unwrap();
        assert_eq!(m.inv(4), Err(MathError::NotInvertible { value: 4, q: 12 }));
    }

    #[test]
    fn center_and_signed() {
        let m = Modulus::new(17).unwrap();
        assert_eq!(m.from_i64(-1), 16);
        assert_eq!(m.center(16), -1);
        assert_eq!(m.center(8), 8);
        assert_eq!(m.center(9), -8);
    }
}
