//! Test engines shared by the test binaries.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hecloud_circuits::{BitEngine, Expr, LutOp, Result, Stats, WireOf};

/// An engine that raises `flag` once `after` layers have run on it: a
/// cancellation at a chosen point of a running circuit, without timing.
pub struct Tripwire<'a, E> {
    inner: &'a E,
    flag: &'a AtomicBool,
    after: u64,
    layers: AtomicU64,
}

impl<'a, E: BitEngine> Tripwire<'a, E> {
    /// `inner`, raising `flag` after `after` layers.
    pub fn new(inner: &'a E, flag: &'a AtomicBool, after: u64) -> Self {
        Self {
            inner,
            flag,
            after,
            layers: AtomicU64::new(0),
        }
    }

    /// Layers completed so far.
    pub fn layers(&self) -> u64 {
        self.layers.load(Ordering::SeqCst)
    }

    fn completed(&self) {
        if self.layers.fetch_add(1, Ordering::SeqCst) + 1 == self.after {
            self.flag.store(true, Ordering::SeqCst);
        }
    }
}

impl<E: BitEngine> BitEngine for Tripwire<'_, E> {
    type Ct = E::Ct;

    fn name(&self) -> &'static str {
        "tripwire"
    }

    fn encrypt_value(&self, v: u64, max: u64) -> Result<WireOf<Self>> {
        self.inner.encrypt_value(v, max)
    }

    fn decrypt_value(&self, w: &WireOf<Self>) -> Result<u64> {
        self.inner.decrypt_value(w)
    }

    fn constant(&self, v: u64) -> WireOf<Self> {
        self.inner.constant(v)
    }

    fn linear(&self, expr: &Expr<'_, Self::Ct>) -> Result<WireOf<Self>> {
        self.inner.linear(expr)
    }

    fn eval_layer(&self, ops: &[LutOp<'_, Self::Ct>]) -> Result<Vec<Vec<WireOf<Self>>>> {
        let r = self.inner.eval_layer(ops)?;
        self.completed();
        Ok(r)
    }

    fn eval_layer_cancellable(
        &self,
        ops: &[LutOp<'_, Self::Ct>],
        cancel: &AtomicBool,
    ) -> Result<Vec<Vec<WireOf<Self>>>> {
        // Through the inner engine's own check, so that an engine that also
        // checks within layers is exercised.
        let r = self.inner.eval_layer_cancellable(ops, cancel)?;
        self.completed();
        Ok(r)
    }

    fn stats(&self) -> Stats {
        self.inner.stats()
    }

    fn threads(&self) -> usize {
        self.inner.threads()
    }
}
