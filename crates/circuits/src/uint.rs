//! [`EncryptedUint`]: an unsigned integer of run-time width, one wire per bit.

use crate::engine::{BitEngine, Wire};
use crate::error::{CircuitError, Result};
use num_bigint::BigUint;

/// Smallest supported width.
pub const MIN_WIDTH: usize = 2;
/// Largest supported width.
pub const MAX_WIDTH: usize = 1024;

/// Checks `width` against `MIN_WIDTH..=MAX_WIDTH`.
pub fn check_width(width: usize) -> Result<()> {
    if (MIN_WIDTH..=MAX_WIDTH).contains(&width) {
        Ok(())
    } else {
        Err(CircuitError::WidthOutOfRange {
            width,
            min: MIN_WIDTH,
            max: MAX_WIDTH,
        })
    }
}

/// An unsigned integer of `width` bits (2..=1024), least significant bit first,
/// one encrypted bit per wire.
///
/// ```
/// use hecloud_circuits::{ClearEngine, EncryptedUint};
/// let e = ClearEngine::new();
/// let x = EncryptedUint::encrypt_u128(&e, 1000, 12)?;
/// assert_eq!(x.width(), 12);
/// assert_eq!(x.decrypt_u128(&e)?, 1000);
/// assert!(EncryptedUint::encrypt_u128(&e, 1 << 12, 12).is_err());
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
#[derive(Clone, Debug)]
pub struct EncryptedUint<C> {
    bits: Vec<Wire<C>>,
}

impl<C: Clone> EncryptedUint<C> {
    /// Wraps bit wires (LSB first); the width must be in range.
    pub fn from_bits(bits: Vec<Wire<C>>) -> Result<Self> {
        check_width(bits.len())?;
        Ok(Self { bits })
    }

    /// The bits, LSB first.
    pub fn bits(&self) -> &[Wire<C>] {
        &self.bits
    }

    /// Width in bits.
    pub fn width(&self) -> usize {
        self.bits.len()
    }

    /// Encrypts the low `width` bits given as booleans (LSB first).
    pub fn encrypt_bools<E: BitEngine<Ct = C>>(e: &E, bits: &[bool]) -> Result<Self> {
        check_width(bits.len())?;
        Ok(Self {
            bits: bits
                .iter()
                .map(|&b| e.encrypt_bit(b))
                .collect::<Result<_>>()?,
        })
    }

    /// Encrypts `value` in `width` bits; a value that does not fit is an error.
    pub fn encrypt_u128<E: BitEngine<Ct = C>>(e: &E, value: u128, width: usize) -> Result<Self> {
        check_width(width)?;
        let need = u128::BITS - value.leading_zeros();
        if need as usize > width {
            return Err(CircuitError::ValueTooWide {
                bits: u64::from(need),
                width,
            });
        }
        let bools: Vec<bool> = (0..width)
            .map(|i| i < 128 && (value >> i) & 1 == 1)
            .collect();
        Self::encrypt_bools(e, &bools)
    }

    /// Encrypts a big integer in `width` bits; a value that does not fit is an error.
    pub fn encrypt_biguint<E: BitEngine<Ct = C>>(
        e: &E,
        value: &BigUint,
        width: usize,
    ) -> Result<Self> {
        check_width(width)?;
        if value.bits() > width as u64 {
            return Err(CircuitError::ValueTooWide {
                bits: value.bits(),
                width,
            });
        }
        let bools: Vec<bool> = (0..width as u64).map(|i| value.bit(i)).collect();
        Self::encrypt_bools(e, &bools)
    }

    /// A noiseless constant (no client key needed).
    pub fn constant<E: BitEngine<Ct = C>>(e: &E, value: &BigUint, width: usize) -> Result<Self> {
        check_width(width)?;
        if value.bits() > width as u64 {
            return Err(CircuitError::ValueTooWide {
                bits: value.bits(),
                width,
            });
        }
        Ok(Self {
            bits: (0..width as u64)
                .map(|i| e.constant(u64::from(value.bit(i))))
                .collect(),
        })
    }

    /// Decrypts to booleans (LSB first); a wire that is not a bit is an error.
    pub fn decrypt_bools<E: BitEngine<Ct = C>>(&self, e: &E) -> Result<Vec<bool>> {
        self.bits.iter().map(|b| e.decrypt_bit(b)).collect()
    }

    /// Decrypts to a `u128`; a width over 128 bits with a set bit above bit 127 is an error.
    pub fn decrypt_u128<E: BitEngine<Ct = C>>(&self, e: &E) -> Result<u128> {
        let v = self.decrypt_biguint(e)?;
        u128::try_from(&v).map_err(|_| CircuitError::ValueTooWide {
            bits: v.bits(),
            width: 128,
        })
    }

    /// Decrypts to a big integer.
    pub fn decrypt_biguint<E: BitEngine<Ct = C>>(&self, e: &E) -> Result<BigUint> {
        let mut v = BigUint::default();
        for (i, b) in self.decrypt_bools(e)?.into_iter().enumerate() {
            if b {
                v.set_bit(i as u64, true);
            }
        }
        Ok(v)
    }
}

/// Bit wires of an engine's [`EncryptedUint`].
pub type UintOf<E> = EncryptedUint<<E as BitEngine>::Ct>;
