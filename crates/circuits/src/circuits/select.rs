//! Selection: multiplexing whole integers, minimum and maximum.

use super::*;

/// Bitwise `s ? a : b` on whole integers (one bootstrap per bit).
pub fn mux<E: BitEngine>(e: &E, s: &WireOf<E>, a: &UintOf<E>, b: &UintOf<E>) -> Result<UintOf<E>> {
    same_width(a, b)?;
    let ops: Vec<_> = a
        .bits()
        .iter()
        .zip(b.bits())
        .map(|(x, y)| LutOp::new(mux_expr(s, x, y), vec![mux_lut()]))
        .collect();
    EncryptedUint::from_bits(
        e.eval_layer(&ops)?
            .into_iter()
            .map(one)
            .collect::<Result<_>>()?,
    )
}

/// `(min(x, y), max(x, y))`: [`compare`], then one many-LUT
/// bootstrap per bit giving both the min and the max bit.
///
/// ```
/// use hecloud_circuits::{circuits, ClearEngine, EncryptedUint};
/// let e = ClearEngine::new();
/// let x = EncryptedUint::encrypt_u128(&e, 9, 5)?;
/// let y = EncryptedUint::encrypt_u128(&e, 30, 5)?;
/// let (lo, hi) = circuits::min_max(&e, &x, &y)?;
/// assert_eq!((lo.decrypt_u128(&e)?, hi.decrypt_u128(&e)?), (9, 30));
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub fn min_max<E: BitEngine>(
    e: &E,
    x: &UintOf<E>,
    y: &UintOf<E>,
) -> Result<(UintOf<E>, UintOf<E>)> {
    let s = lt(e, x, y)?;
    // On 4s + 2x + y: min = s ? x : y, max = s ? y : x.
    let min_lut = mux_lut();
    let max_lut = Lut::new(|v| if v >= 4 { v & 1 } else { (v >> 1) & 1 });
    let ops: Vec<_> = x
        .bits()
        .iter()
        .zip(y.bits())
        .map(|(a, b)| LutOp::new(mux_expr(&s, a, b), vec![min_lut, max_lut]))
        .collect();
    let (mut lo, mut hi) = (Vec::new(), Vec::new());
    for out in e.eval_layer(&ops)? {
        let mut it = out.into_iter();
        match (it.next(), it.next()) {
            (Some(a), Some(b)) => {
                lo.push(a);
                hi.push(b);
            }
            _ => return Err(CircuitError::BadLutCount { got: 0, max: 2 }),
        }
    }
    Ok((EncryptedUint::from_bits(lo)?, EncryptedUint::from_bits(hi)?))
}

/// `min(x, y)`.
pub fn min<E: BitEngine>(e: &E, x: &UintOf<E>, y: &UintOf<E>) -> Result<UintOf<E>> {
    Ok(min_max(e, x, y)?.0)
}

/// `max(x, y)`.
pub fn max<E: BitEngine>(e: &E, x: &UintOf<E>, y: &UintOf<E>) -> Result<UintOf<E>> {
    Ok(min_max(e, x, y)?.1)
}
