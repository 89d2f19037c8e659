//! Signed 192-bit integers, two's complement and wrapping: the width of a
//! refresh mask plus the value it hides (up to about 190 bits, beyond
//! i128), and of the exact centred lift of a decryption.
//!
//! Arithmetic wraps modulo 2^192, which is what makes the lift cheap: a
//! value known to be below 2^191 in magnitude is computed exactly by any
//! chain of products and sums mod 2^192, however large the intermediate
//! terms (the CRT terms y_i·Q/q_i are hundreds of bits).

use hecloud_math::{Modulus, Sampler};
use zeroize::Zeroize;

/// A signed integer mod 2^192, limbs least significant first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Zeroize)]
pub(crate) struct I192([u64; 3]);

impl I192 {
    /// Magnitudes below 2^BITS are exact.
    pub(crate) const BITS: u32 = 191;

    #[cfg(test)]
    pub(crate) fn from_i128(v: i128) -> Self {
        let hi = if v < 0 { u64::MAX } else { 0 };
        Self([v as u64, (v >> 64) as u64, hi])
    }

    pub(crate) fn from_u64(v: u64) -> Self {
        Self([v, 0, 0])
    }

    /// Uniform in [−2^bits, 2^bits) (bits < [`Self::BITS`]).
    pub(crate) fn uniform(rng: &mut Sampler, bits: u32) -> Self {
        debug_assert!(bits < Self::BITS);
        let mut m = [rng.next_u64(), rng.next_u64(), rng.next_u64()];
        // Keep bits + 1 bits: uniform in [0, 2^(bits+1)).
        for (i, limb) in m.iter_mut().enumerate() {
            let low = 64 * i as u32;
            let keep = (bits + 1).saturating_sub(low).min(64);
            *limb = if keep == 64 {
                *limb
            } else {
                *limb & ((1u64 << keep) - 1)
            };
        }
        let mut half = [0u64; 3];
        half[(bits / 64) as usize] = 1u64 << (bits % 64);
        Self(m).sub(Self(half))
    }

    pub(crate) fn add(self, o: Self) -> Self {
        let mut out = [0u64; 3];
        let mut carry = false;
        for (i, o_limb) in o.0.iter().enumerate() {
            let (s, c1) = self.0[i].overflowing_add(*o_limb);
            let (s, c2) = s.overflowing_add(carry as u64);
            out[i] = s;
            carry = c1 || c2;
        }
        Self(out)
    }

    pub(crate) fn neg(self) -> Self {
        Self([!self.0[0], !self.0[1], !self.0[2]]).add(Self::from_u64(1))
    }

    pub(crate) fn sub(self, o: Self) -> Self {
        self.add(o.neg())
    }

    /// self · k mod 2^192.
    pub(crate) fn mul_u64(self, k: u64) -> Self {
        let mut out = [0u64; 3];
        let mut carry = 0u128;
        for (o, &a) in out.iter_mut().zip(&self.0) {
            let t = a as u128 * k as u128 + carry;
            *o = t as u64;
            carry = t >> 64;
        }
        Self(out)
    }

    pub(crate) fn is_negative(self) -> bool {
        self.0[2] >> 63 == 1
    }

    /// round(self / 2^k), halves rounded up (k < 64).
    pub(crate) fn shr_round(self, k: u32) -> Self {
        debug_assert!(k < 64);
        if k == 0 {
            return self;
        }
        let v = self.add(Self::from_u64(1u64 << (k - 1))).0;
        let sign = if v[2] >> 63 == 1 { u64::MAX } else { 0 };
        Self([
            v[0] >> k | v[1] << (64 - k),
            v[1] >> k | v[2] << (64 - k),
            v[2] >> k | sign << (64 - k),
        ])
    }

    /// self mod q, in [0, q).
    pub(crate) fn residue(self, m: &Modulus) -> u64 {
        let (neg, mag) = if self.is_negative() {
            (true, self.neg().0)
        } else {
            (false, self.0)
        };
        let hi = m.reduce_u128((mag[2] as u128) << 64 | mag[1] as u128);
        let r = m.reduce_u128((hi as u128) << 64 | mag[0] as u128);
        if neg { m.neg(r) } else { r }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_bigint::BigInt;

    fn big(v: I192) -> BigInt {
        let mut b = BigInt::from(0);
        for &limb in v.0.iter().rev() {
            b = (b << 64) + limb;
        }
        if v.is_negative() {
            b -= BigInt::from(1) << 192;
        }
        b
    }

    #[test]
    fn matches_big_integers() {
        let mut rng = hecloud_math::testing::sampler();
        let m = Modulus::new((1u64 << 61) - 1).unwrap();
        let q = BigInt::from(m.value());
        for bits in [0u32, 1, 63, 64, 65, 127, 128, 150, 189] {
            for _ in 0..200 {
                let a = I192::uniform(&mut rng, bits);
                let bound = BigInt::from(1) << bits;
                assert!(big(a) >= -bound.clone() && big(a) < bound, "{bits}");
                let k = rng.next_u64();
                let b = I192::uniform(&mut rng, bits);
                assert_eq!(big(a.add(b)), big(a) + big(b));
                assert_eq!(big(a.sub(b)), big(a) - big(b));
                if bits < 125 {
                    assert_eq!(big(a.mul_u64(k)), big(a) * k);
                }
                let r = big(a) % &q;
                let r = if r < BigInt::from(0) { r + &q } else { r };
                assert_eq!(BigInt::from(a.residue(&m)), r);
                for s in [1u32, 7, 40, 63] {
                    // round half up: floor((a + 2^(s−1)) / 2^s).
                    let d = BigInt::from(1) << s;
                    let want = num_integer_floor(big(a) + (&d >> 1), &d);
                    assert_eq!(big(a.shr_round(s)), want, "{bits} {s}");
                }
            }
        }
        // Named edges.
        assert_eq!(big(I192::from_i128(i128::MIN)), BigInt::from(i128::MIN));
        assert_eq!(big(I192::from_i128(-1).shr_round(1)), BigInt::from(0));
        assert_eq!(big(I192::from_i128(-3).shr_round(1)), BigInt::from(-1));
        assert_eq!(I192::from_i128(-1).residue(&m), m.value() - 1);
    }

    fn num_integer_floor(a: BigInt, d: &BigInt) -> BigInt {
        let (q, r) = (&a / d, &a % d);
        if r < BigInt::from(0) { q - 1 } else { q }
    }
}
