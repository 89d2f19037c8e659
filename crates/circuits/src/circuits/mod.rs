//! Integer circuits over any [`BitEngine`]: carry-save reduction, adders,
//! multi-operand sums, subtraction, comparison, equality, min/max.
//!
//! Every circuit is built from layers of independent lookups; the bootstraps
//! and layers it costs are reported by [`with_cost`].
//!
//! # Encodings used to fuse gates into single lookups
//!
//! * A **carry status** (trit) of a bit position or a group of positions:
//!   0 = kill, 1 = propagate, 2 = generate. For one position it is `a + b`,
//!   a free linear combination. Two statuses combine in one lookup on
//!   `3·hi + lo` (result: `hi` unless `hi` propagates, then `lo`), which is
//!   the Kogge–Stone prefix operator `(g, p) ∘ (g', p')` in one bootstrap
//!   instead of two gates.
//! * A **comparison status**: the trit `t = sign(x − y)`, held as `t + 1`.
//!   For one position it is `x − y + 1`, free. Three statuses (most
//!   significant first) combine in one lookup on `4t₂ + 2t₁ + t₀`, whose sign
//!   is that of the first non-zero trit. The part that reaches the least
//!   significant bit only needs the bit `b` = "greater", and `4t₃ + 2t₂ + t₁ + b
//!   ≥ 1` combines four inputs. A lookup outputs its status already scaled by
//!   the weight its consumer gives it, so only raw positions (two fresh bits)
//!   pay for their weight in noise: [`compare`] costs `⌈w/2⌉` bootstraps.
//! * Counters: the sum of up to 15 bits is one linear combination; each output
//!   bit is one table, grouped into many-LUT bootstraps by the engine.
//! * Ripple digits: a carry chain reads each digit's carry and sum bits from
//!   one lookup input `Σ column bits · 2^i + carry`. Up to 8 rows fit bit by
//!   bit (`8 + 7 ≤ 15`, the carry stays ≤ 7), so one chain turns 8 operands
//!   into one for 2 bootstraps per column — cheaper than a counter tree (a
//!   (15,4) counter costs 4 bootstraps to remove 11 bits). [`sum`] with
//!   [`AdderKind::CarryChains`] (the default below 8 threads) runs such chains
//!   side by side in lockstep; with [`AdderKind::KoggeStone`] or
//!   [`AdderKind::Ripple`] it reduces with the counter tree first.
//!
//! # Bootstraps (32-bit operands, same as the TFHE engine)
//!
//! | circuit | bootstraps | layers |
//! | --- | --- | --- |
//! | sum of 8, carry chains | 63 | 32 |
//! | sum of 16, carry chains | 157 | 48 |
//! | comparison, two threads | 16 | 9 |
//! | comparison, carry of `¬X + Y` | 32 | 6 |

use crate::engine::{
    BitEngine, Expr, Lut, LutOp, NOISE_BUDGET, Stats, Wire, WireOf, bit_len, counter_op, mux_expr,
    mux_lut, one,
};
use crate::error::{CircuitError, Result};
use crate::uint::{EncryptedUint, UintOf, check_width};

/// Runs `f` and returns its result with the bootstraps and layers it cost on `e`.
///
/// ```
/// use hecloud_circuits::{circuits, with_cost, ClearEngine, EncryptedUint};
/// let e = ClearEngine::new();
/// let x = EncryptedUint::encrypt_u128(&e, 5, 8)?;
/// let y = EncryptedUint::encrypt_u128(&e, 9, 8)?;
/// let (lt, cost) = with_cost(&e, || circuits::lt(&e, &x, &y));
/// assert!(e.decrypt_bit(&lt?)?);
/// assert!(cost.bootstraps > 0 && cost.depth > 0);
/// # use hecloud_circuits::BitEngine;
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub fn with_cost<E: BitEngine, T>(e: &E, f: impl FnOnce() -> T) -> (T, Stats) {
    let before = e.stats();
    let out = f();
    (out, e.stats() - before)
}

/// Final adder of a sum: how two rows are added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AdderKind {
    /// Kogge–Stone parallel prefix on carry statuses: depth ⌈log2(w+1)⌉ + 1,
    /// about `w·log2 w` bootstraps.
    KoggeStone,
    /// Ripple carry: each digit (two columns, or one when two do not fit) is
    /// one lookup input `Σ bits + carry` from which the carry and the sum bits
    /// are read. Two rows: `w` bootstraps (carry and low bit share a many-LUT
    /// bootstrap), `w/2` carries deep. It also adds up to 4 rows over 2-bit
    /// digits (1.5 bootstraps per bit) or 7 rows bit by bit (2 per bit), which
    /// lets a sum stop its counter tree early. Sum-bit lookups fill the layers
    /// of the carry chain up to the engine's thread count.
    Ripple,
    /// For sums: no counter tree; operands are split into groups of up to 8
    /// rows, each group added by one ripple lane (2 bootstraps per column), all
    /// lanes in lockstep, repeated on the resulting rows. For two operands it
    /// is [`AdderKind::Ripple`].
    CarryChains,
    /// Carry chains below 8 threads, Kogge–Stone (after a counter tree) from 8
    /// threads on.
    #[default]
    Auto,
}

/// Width of a multi-operand sum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SumMode {
    /// Wraps modulo 2^width.
    #[default]
    Modular,
    /// Grows by ⌈log2 n⌉ bits so that nothing is lost.
    Full,
}

fn same_width<C>(x: &EncryptedUint<C>, y: &EncryptedUint<C>) -> Result<usize>
where
    C: Clone,
{
    if x.width() == y.width() {
        Ok(x.width())
    } else {
        Err(CircuitError::WidthMismatch {
            left: x.width(),
            right: y.width(),
        })
    }
}

mod adders;
mod compare;
mod select;

pub use adders::*;
pub use compare::*;
pub use select::*;
