//! Packed-bit circuits over BGV (the HElib approach): many bits in the
//! slots of one ciphertext, gates as arithmetic mod t.
//!
//! A bit is 0 or 1 in a slot of Z_t (t prime, t ≡ 1 mod 2N, so that the
//! batch encoder gives N slots). Every gate acts on all slots at once:
//!
//! | gate | formula | products |
//! | --- | --- | --- |
//! | NOT | 1 − a | 0 |
//! | AND | a·b | 1 |
//! | XOR | a + b − 2ab | 1 |
//! | OR | a + b − ab | 1 |
//! | majority, carry | ab + c·x with x = a ⊕ b (the two terms are never both 1) | 2 |
//! | full adder | x = a ⊕ b, sum = x ⊕ c, carry = ab + c·x | 2 |
//! | select | c·(a − b) + b | 1 |
//! | prefix (G, P) ∘ (G', P') | (G + P·G', P·P') (G and P·G' are never both 1) | 1 or 2 |
//!
//! [`BitCircuit`] is the gate layer: it holds the [`hecloud_bgv::Evaluator`],
//! an optional [`Refresher`] and counters ([`CircuitStats`]). Two layouts
//! sit on it:
//!
//! * [`SlicedUints`] ([`sliced`]): bit-sliced, one ciphertext per bit
//!   position, slot j holding a bit of number j: up to N independent numbers
//!   per circuit run, every gate of a circuit layer a batch (run in
//!   parallel, refreshed in one batch).
//! * [`SlotUint`] ([`slots`]): bits in slots (HElib's layout), the bits of one
//!   number in consecutive slots of row 0, LSB in slot 0, every other slot 0.
//!   A shift towards the high bits by k is a row rotation right by k, whose
//!   wrapped-in slots come from the zero padding while N/2 ≥ (extent of the
//!   non-zero slots) + k: no mask is needed before a product, since G = ab and
//!   P = a ⊕ b stay 0 in the padding. A whole adder or comparator is O(log w)
//!   ciphertext operations.
//!
//! # Noise, levels and refreshes
//!
//! Every BGV ciphertext carries an estimate of its noise
//! ([`hecloud_bgv::NoiseModel`]); each product is followed by a modulus
//! switch, so a chain of products walks down the levels. Before each batch
//! of products [`BitCircuit`] predicts the budget each product would leave
//! ([`hecloud_bgv::Evaluator::mul_relin_budget`]); where it would fall
//! below a margin (24 bits by default at t = 65537, room for the BGV factor
//! matching of a gate's additions: [`BitCircuit::default_margin`]), it
//! first refreshes the operands through its [`Refresher`] — the more
//! depleted operand of a pair first, the other only if that is not enough,
//! all operands of a batch in one [`Refresher::refresh_many`] call (one
//! round trip for a remote refresher). An operand used only linearly is
//! refreshed when its own budget is below the margin, and a product with a
//! plaintext mask when the mask's noise would leave less. Refreshes thus
//! happen at the first layer that cannot proceed, typically every L + 1
//! layers of products for L levels above q_0; in such a round the operands
//! of the batch at level 0 are taken along by default so that values stay
//! in step ([`RefreshPolicy`]: fewer rounds, or fewer ciphertexts with
//! [`RefreshPolicy::Lazy`]). Values a circuit keeps across layers (the G
//! and P of a Kogge–Stone prefix) are refreshed in place
//! ([`BitCircuit::refresh_for`]), so that one refresh serves all their
//! later uses. Without a refresher
//! nothing is refreshed and an operation that would exhaust the budget fails
//! with [`hecloud_bgv::BgvError::BudgetExhausted`] (in
//! [`PackedError::Bgv`]; [`PackedError::is_budget_exhausted`]): never a wrong
//! answer.
//!
//! [`LocalRefresher`] is the refresh protocol run in one process (tests,
//! benchmarks): the server side ([`RefreshMask`]) switches the ciphertext to
//! level 0 and adds a mask drawn uniformly mod t in every slot from the
//! operating system's CSPRNG; the key holder ([`reencrypt`]) decrypts — it
//! sees only m + r — and encrypts again at the top level; the server
//! subtracts r.
//!
//! # Depth
//!
//! Multiplicative depth (ciphertext products in a row; plaintext masks and
//! rotations cost none) with fresh inputs, width w ≥ 2, n operands. Every
//! result carries its depth ([`Depth`]) and [`BitCircuit::measure`] reports
//! it with the products, rotations and refreshes of a run.
//!
//! | circuit | depth | refreshes happen |
//! | --- | --- | --- |
//! | `add` (Kogge–Stone, mod 2^w) | 2 + ⌈log2(w − 1)⌉ | in the prefix layers |
//! | `sum` of n (carry-save, then Kogge–Stone) | ≤ 2·s(n) + 2 + ⌈log2(w − 1)⌉ | in the carry-save stages and the prefix |
//! | `lt` (carry of ¬X + Y, prefix tree) | 1 + ⌈log2 w⌉ | in the prefix layers |
//! | `min` / `max` (sliced only) | 2 + ⌈log2 w⌉ | in the prefix, or before the select |
//!
//! s(n) is the number of 3 → 2 carry-save stages (s(3) = 1, s(4) = 2,
//! s(5..=6) = 3, s(7..=9) = 4, s(10..=13) = 5, about log_{3/2}(n/2)). A
//! full adder adds 2 to the depth of its two shallower inputs and 1 to its
//! deepest, so each stage takes the shallowest rows first and feeds the
//! deepest of a triple as its third input; the bound is then reached for
//! n ≤ 4 and beaten by one from n = 7 on. Measured (the tests check the
//! formulas and the bound, and print these; at w = 1024 only `lt` runs in
//! the tests, the others are the formulas):
//!
//! | w | add | sum of 3 | sum of 4 | sum of 7 | lt | min/max |
//! | --- | --- | --- | --- | --- | --- | --- |
//! | 8 | 5 | 7 | 9 | 12 | 4 | 5 |
//! | 32 | 7 | 9 | 11 | 14 | 6 | 7 |
//! | 64 | 8 | 10 | 12 | 15 | 7 | 8 |
//! | 1024 | 12 | | | | 11 | 12 |
//!
//! Both layouts have the same depths; the bits-in-slots layout adds one
//! plaintext mask at the end of a sum (to clear the bits above w) and of a
//! comparison (to keep only the answer's slot), and costs O(log w)
//! ciphertext operations where the bit-sliced one costs O(w) (sum of n:
//! about 2w(n − 2) + w·log2 w products; lt: about 3w) for up to N numbers
//! at once.
//!
//! [`depth`] computes these depths (the sums' exactly, by walking the
//! carry-save stages), the slots per row and the rotations of the
//! bits-in-slots circuits without running them: the service refuses a job
//! with them before it runs. A masked result (every sum and comparison in
//! slots) has factor 1 ([`BitCircuit::mask`]).
//!
//! With L levels above q_0 a fresh ciphertext survives about L + 1
//! products in a row ([`hecloud_bgv::BgvParameters::depth`]), so a circuit
//! of depth D needs about ⌈D / (L + 1)⌉ − 1 refresh rounds.
//!
//! # The LUT circuits of [`crate::circuits`]
//!
//! They are not shared. Those circuits are written for TFHE: a gate is a
//! lookup table on a small linear combination (carry statuses as trits,
//! counters, fused comparison trees), whose cost is a bootstrap and whose
//! noise is reset by it. Here a gate is a polynomial in 0/1 values, whose
//! cost is a product and a level. The algorithms are the same ones —
//! carry-save reduction, Kogge–Stone prefix, comparison from the carry of
//! ¬X + Y, select — but nothing of their descriptions carries over beyond
//! the names.
//!
//! ```
//! use std::sync::Arc;
//! use hecloud_bgv::{BgvParameters, Encoder, Evaluator, KeySet, params::test_literal};
//! use hecloud_circuits::packed::{self, BitCircuit, LocalRefresher, SlicedUints};
//! use num_bigint::BigUint;
//!
//! let params = BgvParameters::new_insecure_for_tests(test_literal(10, 2, 65537))?;
//! let keys = Arc::new(KeySet::generate(&params, &[], false)?);
//! let (enc, eval) = (Encoder::new(&params), Evaluator::new(&params, keys.evaluation_keys()));
//! let refresher = LocalRefresher::new(keys.clone());
//! let bc = BitCircuit::new(&eval)?.with_refresher(&refresher);
//! let xs: Vec<BigUint> = [3u32, 200, 77].map(BigUint::from).into();
//! let ys: Vec<BigUint> = [5u32, 100, 77].map(BigUint::from).into();
//! let x = SlicedUints::encrypt(&keys, &enc, &xs, 8)?;
//! let y = SlicedUints::encrypt(&keys, &enc, &ys, 8)?;
//! let (lt, stats) = bc.measure(|| packed::sliced::lt(&bc, &x, &y))?;
//! assert_eq!(&lt.decrypt_bits(&keys, &enc)?[..3], &[true, false, false]);
//! assert_eq!(stats.depth, 4); // 1 + log2(8)
//! assert!(stats.refreshes > 0); // 2 levels above q_0: 3 products in a row
//! # Ok::<(), hecloud_circuits::packed::PackedError>(())
//! ```

use hecloud_bgv::{BgvError, Encoder, KeySet};
use hecloud_rlwe::Ciphertext;

use crate::error::CircuitError;

pub mod depth;
mod gates;
mod refresh;
pub mod sliced;
pub mod slots;

pub use gates::{BitCircuit, Combine, RefreshPolicy};
pub use refresh::{BgvMaskPolicy, LocalRefresher, RefreshMask, Refresher, reencrypt, reencrypt_to};
pub use sliced::SlicedUints;
pub use slots::{SlotBit, SlotUint, slot_rotations};

/// What can go wrong in a packed-bit circuit: bad input, a BGV error (an
/// exhausted noise budget without a refresher among them), a failed refresh.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PackedError {
    /// An error of the BGV layer ([`BgvError::BudgetExhausted`] when a
    /// circuit needs more depth than the parameters give and no refresher
    /// is there).
    #[error(transparent)]
    Bgv(#[from] BgvError),
    /// Bad widths, operand lists or values (the errors the bit-wire
    /// circuits share).
    #[error(transparent)]
    Circuit(#[from] CircuitError),
    /// A slot that should hold a bit holds something else.
    #[error("slot {slot} holds {value}, not a bit")]
    NotABit {
        /// The slot.
        slot: usize,
        /// Its value mod t.
        value: u64,
    },
    /// A slot above the width of a bits-in-slots number is not 0.
    #[error("slot {slot} above the width holds {value}, not 0")]
    Padding {
        /// The slot.
        slot: usize,
        /// Its value mod t.
        value: u64,
    },
    /// More numbers than slots.
    #[error("{given} numbers for {slots} slots")]
    TooManyNumbers {
        /// Numbers given.
        given: usize,
        /// Slots of the parameters.
        slots: usize,
    },
    /// Bit-sliced operands holding different counts of numbers.
    #[error("the operands hold {left} and {right} numbers")]
    CountMismatch {
        /// Numbers in the first operand.
        left: usize,
        /// Numbers in the offending operand.
        right: usize,
    },
    /// A bits-in-slots circuit whose values and shifts do not fit a row:
    /// it needs N/2 ≥ (bits the values reach) + (largest shift).
    #[error("bits in slots: the circuit needs {need} slots per row, the parameters have {row}")]
    RowTooShort {
        /// Slots per row needed.
        need: usize,
        /// Slots per row (N/2).
        row: usize,
    },
    /// A refresher failed (a remote one: the transport or the key holder),
    /// or answered with the wrong number of ciphertexts.
    #[error("refresh failed: {0}")]
    Refresh(String),
    /// Flooding a refresh needs a modulus that holds the flooded value
    /// without wrapping, and the ciphertext is below the lowest level that
    /// has it (a level is never gained back, so it must be refreshed
    /// earlier, or with a narrower flood).
    #[error(
        "flooding {flood_bits} bits needs log2 Q ≥ {need_bits:.1} bits, the ciphertext's level {level} has {have_bits:.1} (lowest level with the room: {})",
        lowest_level.map_or_else(|| "none".to_string(), |l| l.to_string())
    )]
    NoFloodHeadroom {
        /// Width of the flooding noise, in bits.
        flood_bits: u32,
        /// Level of the ciphertext.
        level: usize,
        /// log2 of the modulus the flooded ciphertext needs.
        need_bits: f64,
        /// log2 Q at the ciphertext's level.
        have_bits: f64,
        /// The lowest level with the room, if any level has it.
        lowest_level: Option<usize>,
    },
    /// The ciphertext's estimated noise is too large for the flood to drown
    /// it by [`BgvMaskPolicy::FLOOD_LAMBDA`] bits: refused rather than
    /// hiding less than the policy promises.
    #[error(
        "the ciphertext's noise estimate of {noise_bits:.1} bits at level {level} needs a flood of {need_flood_bits} bits, the policy floods {flood_bits}"
    )]
    FloodTooNarrow {
        /// Level the ciphertext would be sent at.
        level: usize,
        /// Its noise estimate there, in bits (message included).
        noise_bits: f64,
        /// Width of the policy's flooding noise, in bits.
        flood_bits: u32,
        /// The least width that would drown it.
        need_flood_bits: u32,
    },
    /// A flooding width this implementation does not draw.
    #[error("flooding {flood_bits} bits: the width must lie in 1..={max}")]
    FloodPolicy {
        /// The width asked for.
        flood_bits: u32,
        /// The widest allowed ([`BgvMaskPolicy::MAX_FLOOD_BITS`]).
        max: u32,
    },
}

impl PackedError {
    /// Whether this is an exhausted noise budget (a circuit too deep for
    /// the parameters without a refresher).
    pub fn is_budget_exhausted(&self) -> bool {
        matches!(self, Self::Bgv(BgvError::BudgetExhausted { .. }))
    }
}

/// Result alias of the packed circuits.
pub type Result<T> = std::result::Result<T, PackedError>;

/// A ciphertext whose slots hold bits (0 or 1 mod t), with the
/// multiplicative depth of the computation that produced it (0 for a fresh
/// encryption; a refresh keeps it: depth counts the circuit, not the level).
#[derive(Clone, Debug)]
pub struct PackedBits {
    pub(crate) ct: Ciphertext,
    pub(crate) depth: usize,
}

impl PackedBits {
    /// Wraps a ciphertext whose slots hold bits, at depth 0. Nothing checks
    /// that they are bits: gates on other values compute polynomials, not
    /// logic.
    pub fn new(ct: Ciphertext) -> Self {
        Self { ct, depth: 0 }
    }

    /// Encrypts bits (slot i holds `bits[i]`, the remaining slots 0) at the
    /// top level.
    pub fn encrypt(keys: &KeySet, encoder: &Encoder, bits: &[bool]) -> Result<Self> {
        let values: Vec<u64> = bits.iter().map(|&b| u64::from(b)).collect();
        Ok(Self::new(keys.encrypt(&encoder.encode(&values)?)?))
    }

    /// Decrypts the N slots; a slot that is not a bit is an error.
    pub fn decrypt_bits(&self, keys: &KeySet, encoder: &Encoder) -> Result<Vec<bool>> {
        self.decrypt_slots(keys, encoder)?
            .into_iter()
            .enumerate()
            .map(|(slot, value)| match value {
                0 => Ok(false),
                1 => Ok(true),
                _ => Err(PackedError::NotABit { slot, value }),
            })
            .collect()
    }

    /// Decrypts the N slot values (mod t).
    pub fn decrypt_slots(&self, keys: &KeySet, encoder: &Encoder) -> Result<Vec<u64>> {
        Ok(encoder.decode(&keys.decrypt(&self.ct)?)?)
    }

    /// The ciphertext.
    pub fn ciphertext(&self) -> &Ciphertext {
        &self.ct
    }

    /// The ciphertext, unwrapped.
    pub fn into_ciphertext(self) -> Ciphertext {
        self.ct
    }
}

/// The multiplicative depth a value was computed at.
pub trait Depth {
    /// Ciphertext products in a row behind the value (the deepest of its
    /// ciphertexts).
    fn depth(&self) -> usize;
}

impl Depth for PackedBits {
    fn depth(&self) -> usize {
        self.depth
    }
}

impl<T: Depth> Depth for Vec<T> {
    fn depth(&self) -> usize {
        self.iter().map(Depth::depth).max().unwrap_or(0)
    }
}

/// What a circuit run cost (see [`BitCircuit::measure`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CircuitStats {
    /// Ciphertext products (each relinearized and switched one level down).
    pub products: u64,
    /// Products with a plaintext (masks): no level, some noise.
    pub plain_products: u64,
    /// Row rotations.
    pub rotations: u64,
    /// Ciphertexts refreshed.
    pub refreshes: u64,
    /// Calls to [`Refresher::refresh_many`]: round trips for a remote
    /// refresher.
    pub refresh_rounds: u64,
    /// Multiplicative depth of the result.
    pub depth: usize,
}

impl std::ops::Sub for CircuitStats {
    type Output = Self;

    /// Counter differences; the depth of `self`.
    fn sub(self, rhs: Self) -> Self {
        Self {
            products: self.products - rhs.products,
            plain_products: self.plain_products - rhs.plain_products,
            rotations: self.rotations - rhs.rotations,
            refreshes: self.refreshes - rhs.refreshes,
            refresh_rounds: self.refresh_rounds - rhs.refresh_rounds,
            depth: self.depth,
        }
    }
}
