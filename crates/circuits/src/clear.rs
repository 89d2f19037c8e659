//! [`ClearEngine`]: plaintext wires, the test oracle.

use crate::engine::{
    BitEngine, Expr, LutOp, PLAINTEXT_SPACE, StatCounters, Stats, Wire, WireOf, plan,
};
use crate::error::{CircuitError, Result};

/// An engine on plaintext values. It applies exactly the checks and the
/// bootstrap grouping of [`crate::TfheEngine`] (plaintext space, noise budget,
/// many-LUT grouping), so its counts of bootstraps and layers equal the TFHE
/// engine's, and a circuit it accepts runs within the TFHE noise guarantee.
///
/// ```
/// use hecloud_circuits::{BitEngine, ClearEngine};
/// let e = ClearEngine::new();
/// let x = e.encrypt_bit(true)?;
/// let y = e.encrypt_bit(true)?;
/// assert!(!e.decrypt_bit(&e.xor(&x, &y)?)?);
/// assert_eq!(e.stats().bootstraps, 1);
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
#[derive(Debug, Default)]
pub struct ClearEngine {
    stats: StatCounters,
}

impl ClearEngine {
    /// A fresh engine with zeroed counters.
    pub fn new() -> Self {
        Self::default()
    }
}

fn check_space(v: i64) -> Result<u64> {
    if (0..PLAINTEXT_SPACE as i64).contains(&v) {
        Ok(v as u64)
    } else {
        Err(CircuitError::OutOfPlaintextSpace {
            min: v,
            max: v,
            space: PLAINTEXT_SPACE,
        })
    }
}

impl BitEngine for ClearEngine {
    type Ct = u64;

    fn name(&self) -> &'static str {
        "clear"
    }

    fn encrypt_value(&self, v: u64, max: u64) -> Result<WireOf<Self>> {
        check_space(max as i64)?;
        if v > max {
            return Err(CircuitError::OutOfPlaintextSpace {
                min: v as i64,
                max: v as i64,
                space: max + 1,
            });
        }
        Ok(Wire::from_parts(v, max, 1))
    }

    fn decrypt_value(&self, w: &WireOf<Self>) -> Result<u64> {
        Ok(w.ct)
    }

    fn constant(&self, v: u64) -> WireOf<Self> {
        let v = v % PLAINTEXT_SPACE;
        Wire::from_parts(v, v, 0)
    }

    fn linear(&self, expr: &Expr<'_, u64>) -> Result<WireOf<Self>> {
        let (_, hi) = expr.checked_range()?;
        let v = check_space(expr.eval_with(|c| *c))?;
        Ok(Wire::from_parts(v, hi, expr.noise()))
    }

    fn eval_layer(&self, ops: &[LutOp<'_, u64>]) -> Result<Vec<Vec<WireOf<Self>>>> {
        let plans = ops.iter().map(plan).collect::<Result<Vec<_>>>()?;
        let out = ops
            .iter()
            .zip(&plans)
            .map(|(op, p)| {
                let x = check_space(op.expr.eval_with(|c| *c))?;
                Ok(op
                    .luts
                    .iter()
                    .zip(&p.out_max)
                    .map(|(l, &m)| Wire::from_parts(l.eval(x), m, 1))
                    .collect())
            })
            .collect::<Result<Vec<_>>>()?;
        self.stats.record(&plans);
        Ok(out)
    }

    fn stats(&self) -> Stats {
        self.stats.get()
    }
}
