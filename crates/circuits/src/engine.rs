//! The [`BitEngine`] abstraction: wires, linear combinations, lookups, layers.
//!
//! A *wire* holds a small non-negative integer (a bit, or a small count) in
//! one ciphertext. Engines offer two kinds of operation:
//!
//! * **linear combinations** `Σ wᵢ·xᵢ + k` of wires — free (no bootstrap);
//! * **lookups**: a function table applied to a linear combination — one
//!   bootstrap each, or one bootstrap for several tables when the input range
//!   is small enough for a *many-LUT* bootstrap.
//!
//! Every lookup input must stay inside the plaintext space `0..16`
//! ([`PLAINTEXT_SPACE`]) and its noise — the squared 2-norm of the weights,
//! in units of a fresh ciphertext's variance — must stay within
//! [`NOISE_BUDGET`]. These are the guarantees of the TFHE parameter set the
//! [`crate::TfheEngine`] uses (`PARAM_MESSAGE_2_CARRY_2_KS_PBS_TUNIFORM_2M128`:
//! 4 bits of plaintext with a padding bit, p_fail ≤ 2^-129.6 for a dot product
//! of 2-norm ≤ 5). [`crate::ClearEngine`] enforces the same rules, so a circuit
//! that runs on the clear engine runs within the p_fail guarantee on TFHE.
//!
//! Independent lookups are submitted together as one *layer*
//! ([`BitEngine::eval_layer`]); an engine may evaluate a layer in parallel.
//! Engines count bootstraps and layers ([`Stats`]).
//!
//! A long circuit is stopped from outside through a cancellation flag:
//! [`Cancellable`] runs any engine with one, and every layer then reads it
//! first ([`BitEngine::eval_layer_cancellable`]).

use crate::error::{CircuitError, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Size of the plaintext space of a wire: values `0..16`.
pub const PLAINTEXT_SPACE: u64 = 16;

/// Largest squared 2-norm of a linear combination fed to a lookup, in units of
/// the variance of a freshly bootstrapped (or freshly encrypted) ciphertext.
pub const NOISE_BUDGET: u64 = 25;

/// Most output functions one lookup op may request.
pub const MAX_LUTS_PER_OP: usize = 8;

/// A function table on the plaintext space: `x ↦ table[x]`, outputs in `0..16`.
///
/// ```
/// use hecloud_circuits::Lut;
/// let parity = Lut::new(|x| x & 1);
/// assert_eq!(parity.eval(5), 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lut([u8; PLAINTEXT_SPACE as usize]);

impl Lut {
    /// Tabulates `f` on `0..16`; outputs are reduced modulo 16.
    pub fn new(f: impl Fn(u64) -> u64) -> Self {
        let mut t = [0u8; PLAINTEXT_SPACE as usize];
        for (x, v) in t.iter_mut().enumerate() {
            *v = (f(x as u64) % PLAINTEXT_SPACE) as u8;
        }
        Self(t)
    }

    /// The table's value at `x` (`x` is reduced modulo 16).
    pub fn eval(&self, x: u64) -> u64 {
        u64::from(self.0[(x % PLAINTEXT_SPACE) as usize])
    }
}

/// A value held in one ciphertext `C`, with the bookkeeping engines need:
/// an upper bound on its value and its noise (in units of a fresh ciphertext).
#[derive(Clone, Debug)]
pub struct Wire<C> {
    pub(crate) ct: C,
    pub(crate) max: u64,
    pub(crate) noise: u64,
}

impl<C> Wire<C> {
    /// Wraps a ciphertext with its value bound and noise (engine implementors only).
    pub fn from_parts(ct: C, max: u64, noise: u64) -> Self {
        Self { ct, max, noise }
    }

    /// Largest value this wire can hold.
    pub fn max_value(&self) -> u64 {
        self.max
    }

    /// Noise relative to a fresh ciphertext (0 for a trivial constant).
    pub fn noise(&self) -> u64 {
        self.noise
    }

    /// The underlying ciphertext.
    pub fn ciphertext(&self) -> &C {
        &self.ct
    }
}

/// A linear combination `Σ wᵢ·xᵢ + offset` of wires.
///
/// ```
/// use hecloud_circuits::{BitEngine, ClearEngine, Expr};
/// let e = ClearEngine::new();
/// let (a, b) = (e.encrypt_bit(true).unwrap(), e.encrypt_bit(true).unwrap());
/// let x = Expr::new().term(&a, 2).term(&b, 1).plus(3);
/// assert_eq!(x.range(), (3, 6));
/// assert_eq!(x.noise(), 5);
/// ```
#[derive(Clone, Debug)]
pub struct Expr<'a, C> {
    pub(crate) terms: Vec<(&'a Wire<C>, i64)>,
    pub(crate) offset: i64,
}

impl<C> Default for Expr<'_, C> {
    fn default() -> Self {
        Self {
            terms: Vec::new(),
            offset: 0,
        }
    }
}

impl<'a, C> Expr<'a, C> {
    /// The empty combination (value 0).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `weight · w`.
    pub fn term(mut self, w: &'a Wire<C>, weight: i64) -> Self {
        self.terms.push((w, weight));
        self
    }

    /// Adds the constant `k`.
    pub fn plus(mut self, k: i64) -> Self {
        self.offset += k;
        self
    }

    /// Adds `weight · other`.
    pub fn add_scaled(mut self, other: &Expr<'a, C>, weight: i64) -> Self {
        for &(w, c) in &other.terms {
            self.terms.push((w, c * weight));
        }
        self.offset += other.offset * weight;
        self
    }

    /// Smallest and largest value the combination can take.
    pub fn range(&self) -> (i64, i64) {
        let (mut lo, mut hi) = (self.offset, self.offset);
        for &(w, c) in &self.terms {
            let m = w.max as i64;
            if c >= 0 {
                hi += c * m;
            } else {
                lo += c * m;
            }
        }
        (lo, hi)
    }

    /// [`range`](Self::range), or an error if any value it can take falls
    /// outside the plaintext space [0, PLAINTEXT_SPACE).
    pub fn checked_range(&self) -> Result<(u64, u64)> {
        let (lo, hi) = self.range();
        if lo < 0 || hi >= PLAINTEXT_SPACE as i64 {
            return Err(CircuitError::OutOfPlaintextSpace {
                min: lo,
                max: hi,
                space: PLAINTEXT_SPACE,
            });
        }
        Ok((lo as u64, hi as u64))
    }

    /// Noise: `Σ wᵢ² · noise(xᵢ)`.
    pub fn noise(&self) -> u64 {
        self.terms
            .iter()
            .map(|&(w, c)| (c * c) as u64 * w.noise)
            .sum()
    }

    /// Value of the combination given the clear values of its wires.
    pub(crate) fn eval_with(&self, value: impl Fn(&C) -> u64) -> i64 {
        self.terms
            .iter()
            .map(|&(w, c)| c * value(&w.ct) as i64)
            .sum::<i64>()
            + self.offset
    }
}

/// One lookup request: tables applied to one linear combination.
#[derive(Clone, Debug)]
pub struct LutOp<'a, C> {
    /// The lookup input.
    pub expr: Expr<'a, C>,
    /// One table per output wire.
    pub luts: Vec<Lut>,
}

impl<'a, C> LutOp<'a, C> {
    /// A lookup of `luts` on `expr`.
    pub fn new(expr: Expr<'a, C>, luts: Vec<Lut>) -> Self {
        Self { expr, luts }
    }
}

/// How an engine will evaluate one [`LutOp`]: checked range, noise, and the
/// grouping of its tables into bootstraps (many-LUT when the range allows).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Smallest lookup input.
    pub min: u64,
    /// Largest lookup input.
    pub max: u64,
    /// Tables per bootstrap.
    pub per_bootstrap: usize,
    /// Bootstraps needed.
    pub bootstraps: usize,
    /// Largest output value of each table over the input range.
    pub out_max: Vec<u64>,
}

/// Checks `op` against the plaintext space and noise budget and groups its tables.
///
/// ```
/// use hecloud_circuits::{plan, BitEngine, ClearEngine, Expr, Lut, LutOp};
/// let e = ClearEngine::new();
/// let bits: Vec<_> = (0..3).map(|_| e.encrypt_bit(true).unwrap()).collect();
/// let sum = bits.iter().fold(Expr::new(), |x, b| x.term(b, 1));
/// // A full adder: sum and carry from one bootstrap (inputs 0..=3 leave room for up to 4 tables).
/// let p = plan(&LutOp::new(sum, vec![Lut::new(|x| x & 1), Lut::new(|x| x >> 1)])).unwrap();
/// assert_eq!((p.bootstraps, p.per_bootstrap), (1, 2));
/// ```
pub fn plan<C>(op: &LutOp<'_, C>) -> Result<Plan> {
    let n = op.luts.len();
    if n == 0 || n > MAX_LUTS_PER_OP {
        return Err(CircuitError::BadLutCount {
            got: n,
            max: MAX_LUTS_PER_OP,
        });
    }
    let (lo, hi) = op.expr.checked_range()?;
    let noise = op.expr.noise();
    if noise > NOISE_BUDGET {
        return Err(CircuitError::NoiseBudgetExceeded {
            noise,
            budget: NOISE_BUDGET,
        });
    }
    let (per, bootstraps) = lut_grouping(hi, n);
    let out_max = op
        .luts
        .iter()
        .map(|l| (lo..=hi).map(|x| l.eval(x)).max().unwrap_or(0))
        .collect();
    Ok(Plan {
        min: lo,
        max: hi,
        per_bootstrap: per,
        bootstraps,
        out_max,
    })
}

/// Tables per bootstrap and bootstraps for `luts` tables (≥ 1) on inputs up
/// to `hi`: a many-LUT bootstrap with k tables needs inputs < 16 / k (and k ≤ 8).
pub(crate) fn lut_grouping(hi: u64, luts: usize) -> (usize, usize) {
    let per = ((PLAINTEXT_SPACE / (hi + 1)) as usize)
        .clamp(1, MAX_LUTS_PER_OP)
        .min(luts)
        .max(1);
    (per, luts.div_ceil(per))
}

/// Counters of work done by an engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Programmable bootstraps (a many-LUT bootstrap counts once).
    pub bootstraps: u64,
    /// Layers that held at least one bootstrap (the bootstrap depth of what ran).
    pub depth: u64,
    /// Lookup tables evaluated (≥ bootstraps).
    pub luts: u64,
}

impl std::ops::Sub for Stats {
    type Output = Stats;
    fn sub(self, rhs: Stats) -> Stats {
        Stats {
            bootstraps: self.bootstraps - rhs.bootstraps,
            depth: self.depth - rhs.depth,
            luts: self.luts - rhs.luts,
        }
    }
}

/// Thread-safe [`Stats`] an engine updates.
#[derive(Debug, Default)]
pub struct StatCounters {
    bootstraps: AtomicU64,
    depth: AtomicU64,
    luts: AtomicU64,
}

impl StatCounters {
    /// Records one layer of the given plans.
    pub fn record(&self, plans: &[Plan]) {
        let b: usize = plans.iter().map(|p| p.bootstraps).sum();
        let l: usize = plans.iter().map(|p| p.out_max.len()).sum();
        if b > 0 {
            self.depth.fetch_add(1, Ordering::Relaxed);
        }
        self.bootstraps.fetch_add(b as u64, Ordering::Relaxed);
        self.luts.fetch_add(l as u64, Ordering::Relaxed);
    }

    /// Current values.
    pub fn get(&self) -> Stats {
        Stats {
            bootstraps: self.bootstraps.load(Ordering::Relaxed),
            depth: self.depth.load(Ordering::Relaxed),
            luts: self.luts.load(Ordering::Relaxed),
        }
    }
}

/// Wire type of engine `E`.
pub type WireOf<E> = Wire<<E as BitEngine>::Ct>;

/// A bit-level homomorphic engine: encrypt/decrypt on the client side, free
/// linear combinations and bootstrapped lookups on the server side.
///
/// Gates (`xor`, `and`, `or`, `not`, `mux`, `full_adder`, `counter`) are
/// provided on top of [`BitEngine::eval_layer`]; circuits submit whole layers
/// of independent lookups so that an engine can run them in parallel.
///
/// ```
/// use hecloud_circuits::{BitEngine, ClearEngine};
/// let e = ClearEngine::new();
/// let a = e.encrypt_bit(true)?;
/// let b = e.encrypt_bit(false)?;
/// let c = e.encrypt_bit(true)?;
/// let (s, carry) = e.full_adder(&a, &b, &c)?;
/// assert_eq!((e.decrypt_bit(&s)?, e.decrypt_bit(&carry)?), (false, true));
/// assert_eq!(e.stats().bootstraps, 1); // sum and carry share one bootstrap
/// # Ok::<(), hecloud_circuits::CircuitError>(())
/// ```
pub trait BitEngine: Sync {
    /// Ciphertext of one wire.
    type Ct: Clone + Send + Sync + std::fmt::Debug;

    /// Short engine name for reports.
    fn name(&self) -> &'static str;

    /// Encrypts `v ≤ max < 16` as a fresh wire (client side). `max` is the
    /// public bound circuits plan with; the value itself never shows in the
    /// wire's metadata.
    fn encrypt_value(&self, v: u64, max: u64) -> Result<WireOf<Self>>;

    /// Decrypts a wire (client side).
    fn decrypt_value(&self, w: &WireOf<Self>) -> Result<u64>;

    /// A noiseless constant wire (no key needed).
    fn constant(&self, v: u64) -> WireOf<Self>;

    /// Computes a linear combination into a new wire (no bootstrap). Its value
    /// must stay within the plaintext space.
    fn linear(&self, expr: &Expr<'_, Self::Ct>) -> Result<WireOf<Self>>;

    /// Evaluates a layer of independent lookups; returns one vector of output
    /// wires per op (one wire per table). Counts bootstraps and one layer.
    fn eval_layer(&self, ops: &[LutOp<'_, Self::Ct>]) -> Result<Vec<Vec<WireOf<Self>>>>;

    /// Counters of the work done so far.
    fn stats(&self) -> Stats;

    /// Threads a layer may use (for cost estimates).
    fn threads(&self) -> usize {
        rayon::current_num_threads()
    }

    /// [`eval_layer`](Self::eval_layer) that gives up with
    /// [`CircuitError::Cancelled`] once `cancel` is raised. The flag is read
    /// before the layer; an engine whose layers take long also reads it
    /// within (the TFHE engine before every bootstrap). A layer given up
    /// part-way is not counted in [`stats`](Self::stats).
    fn eval_layer_cancellable(
        &self,
        ops: &[LutOp<'_, Self::Ct>],
        cancel: &AtomicBool,
    ) -> Result<Vec<Vec<WireOf<Self>>>> {
        // Relaxed: the flag publishes no data, it only has to be seen eventually.
        if cancel.load(Ordering::Relaxed) {
            return Err(CircuitError::Cancelled);
        }
        self.eval_layer(ops)
    }

    /// This engine with a cancellation flag: every circuit run on the result
    /// stops at its next layer (or bootstrap, on TFHE) once `cancel` is raised.
    ///
    /// ```
    /// use std::sync::atomic::AtomicBool;
    /// use hecloud_circuits::{circuits::{self, AdderKind, SumMode}, BitEngine, CircuitError, ClearEngine, EncryptedUint};
    /// let e = ClearEngine::new();
    /// let xs: Vec<_> = (0..8).map(|v| EncryptedUint::encrypt_u128(&e, v, 8)).collect::<Result<_, _>>()?;
    /// let cancel = AtomicBool::new(true);
    /// let r = circuits::sum(&e.with_cancel(&cancel), &xs, SumMode::Full, AdderKind::Auto);
    /// assert_eq!(r.unwrap_err(), CircuitError::Cancelled);
    /// assert_eq!(e.stats().bootstraps, 0);
    /// # Ok::<(), CircuitError>(())
    /// ```
    fn with_cancel<'a>(&'a self, cancel: &'a AtomicBool) -> Cancellable<'a, Self>
    where
        Self: Sized,
    {
        Cancellable::new(self, cancel)
    }

    /// Encrypts a bit (client side).
    fn encrypt_bit(&self, b: bool) -> Result<WireOf<Self>> {
        self.encrypt_value(u64::from(b), 1)
    }

    /// Decrypts a bit (client side); a value other than 0 or 1 is an error.
    fn decrypt_bit(&self, w: &WireOf<Self>) -> Result<bool> {
        match self.decrypt_value(w)? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(CircuitError::NotABit { value }),
        }
    }

    /// One lookup op on its own layer.
    fn lookup(&self, op: LutOp<'_, Self::Ct>) -> Result<Vec<WireOf<Self>>> {
        Ok(self
            .eval_layer(std::slice::from_ref(&op))?
            .pop()
            .unwrap_or_default())
    }

    /// `¬a` (free: `1 − a`).
    fn not(&self, a: &WireOf<Self>) -> Result<WireOf<Self>> {
        self.linear(&Expr::new().term(a, -1).plus(1))
    }

    /// `a ⊕ b` (one bootstrap on `a + b`).
    fn xor(&self, a: &WireOf<Self>, b: &WireOf<Self>) -> Result<WireOf<Self>> {
        one(self.lookup(LutOp::new(
            Expr::new().term(a, 1).term(b, 1),
            vec![Lut::new(|x| x & 1)],
        ))?)
    }

    /// `a ∧ b` (one bootstrap on `a + b`).
    fn and(&self, a: &WireOf<Self>, b: &WireOf<Self>) -> Result<WireOf<Self>> {
        one(self.lookup(LutOp::new(
            Expr::new().term(a, 1).term(b, 1),
            vec![Lut::new(|x| u64::from(x >= 2))],
        ))?)
    }

    /// `a ∨ b` (one bootstrap on `a + b`).
    fn or(&self, a: &WireOf<Self>, b: &WireOf<Self>) -> Result<WireOf<Self>> {
        one(self.lookup(LutOp::new(
            Expr::new().term(a, 1).term(b, 1),
            vec![Lut::new(|x| u64::from(x >= 1))],
        ))?)
    }

    /// `s ? a : b` (one bootstrap on `4s + 2a + b`).
    fn mux(&self, s: &WireOf<Self>, a: &WireOf<Self>, b: &WireOf<Self>) -> Result<WireOf<Self>> {
        one(self.lookup(LutOp::new(mux_expr(s, a, b), vec![mux_lut()]))?)
    }

    /// Full adder: `(a ⊕ b ⊕ c, maj(a, b, c))`, both from one bootstrap.
    fn full_adder(
        &self,
        a: &WireOf<Self>,
        b: &WireOf<Self>,
        c: &WireOf<Self>,
    ) -> Result<(WireOf<Self>, WireOf<Self>)> {
        let mut out = self.counter(&[a, b, c])?.into_iter();
        match (out.next(), out.next()) {
            (Some(s), Some(cy)) => Ok((s, cy)),
            _ => Err(CircuitError::BadLutCount {
                got: 0,
                max: MAX_LUTS_PER_OP,
            }),
        }
    }

    /// Parallel counter: the bits (LSB first) of the number of ones among
    /// `bits` (1 to 15 bits). The engine groups the output tables into as few
    /// bootstraps as the input range allows (a (3,2) counter takes one, a
    /// (7,3) counter two, a (15,4) counter four).
    fn counter(&self, bits: &[&WireOf<Self>]) -> Result<Vec<WireOf<Self>>> {
        self.lookup(counter_op(bits)?)
    }
}

/// An engine run under a cancellation flag: the same wires, keys and
/// counters as the engine it borrows, but every layer first reads the flag
/// ([`BitEngine::eval_layer_cancellable`]) and fails with
/// [`CircuitError::Cancelled`] once it is raised. One is made per computation
/// (it borrows both), so the engine itself stays shareable between jobs.
#[derive(Debug)]
pub struct Cancellable<'a, E> {
    engine: &'a E,
    cancel: &'a AtomicBool,
}

// By hand: derived impls would require `E: Clone`, but only references are copied.
impl<E> Clone for Cancellable<'_, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for Cancellable<'_, E> {}

impl<'a, E: BitEngine> Cancellable<'a, E> {
    /// `engine` under `cancel`.
    pub fn new(engine: &'a E, cancel: &'a AtomicBool) -> Self {
        Self { engine, cancel }
    }

    /// The engine underneath.
    pub fn engine(&self) -> &'a E {
        self.engine
    }

    /// Whether the flag is raised.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

impl<E: BitEngine> BitEngine for Cancellable<'_, E> {
    type Ct = E::Ct;

    fn name(&self) -> &'static str {
        self.engine.name()
    }

    fn encrypt_value(&self, v: u64, max: u64) -> Result<WireOf<Self>> {
        self.engine.encrypt_value(v, max)
    }

    fn decrypt_value(&self, w: &WireOf<Self>) -> Result<u64> {
        self.engine.decrypt_value(w)
    }

    fn constant(&self, v: u64) -> WireOf<Self> {
        self.engine.constant(v)
    }

    fn linear(&self, expr: &Expr<'_, Self::Ct>) -> Result<WireOf<Self>> {
        self.engine.linear(expr)
    }

    fn eval_layer(&self, ops: &[LutOp<'_, Self::Ct>]) -> Result<Vec<Vec<WireOf<Self>>>> {
        self.engine.eval_layer_cancellable(ops, self.cancel)
    }

    fn stats(&self) -> Stats {
        self.engine.stats()
    }

    fn threads(&self) -> usize {
        self.engine.threads()
    }

    // eval_layer_cancellable: the default (check `cancel`, then eval_layer,
    // which checks this wrapper's own flag) lets either flag stop a layer.
}

pub(crate) fn one<W>(v: Vec<W>) -> Result<W> {
    v.into_iter().next().ok_or(CircuitError::BadLutCount {
        got: 0,
        max: MAX_LUTS_PER_OP,
    })
}

/// `4s + 2a + b`, the input of a mux lookup.
pub(crate) fn mux_expr<'a, C>(s: &'a Wire<C>, a: &'a Wire<C>, b: &'a Wire<C>) -> Expr<'a, C> {
    Expr::new().term(s, 4).term(a, 2).term(b, 1)
}

/// Table of `s ? a : b` on `4s + 2a + b`.
pub(crate) fn mux_lut() -> Lut {
    Lut::new(|x| if x >= 4 { (x >> 1) & 1 } else { x & 1 })
}

/// Bits needed to write `n`.
pub(crate) fn bit_len(n: u64) -> usize {
    (u64::BITS - n.leading_zeros()) as usize
}

/// The lookup op of a counter over `bits`.
pub(crate) fn counter_op<'a, C>(bits: &[&'a Wire<C>]) -> Result<LutOp<'a, C>> {
    let max = (PLAINTEXT_SPACE - 1) as usize;
    if bits.is_empty() || bits.len() > max {
        return Err(CircuitError::CounterTooWide {
            got: bits.len(),
            max,
        });
    }
    let expr = bits.iter().fold(Expr::new(), |x, b| x.term(b, 1));
    let outs = bit_len(bits.len() as u64);
    Ok(LutOp::new(
        expr,
        (0..outs).map(|i| Lut::new(move |x| (x >> i) & 1)).collect(),
    ))
}
