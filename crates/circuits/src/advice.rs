//! Which engine for which job: the research's conclusion (TFHE below six
//! operands, packed HElib-style bits above, SEAL for plain integer sums),
//! turned into a prediction measured on the user's machine.
//!
//! [`predict`] prices a task (a sum of n numbers, a comparison, a min/max,
//! at a width, for a number of independent instances) on every engine from
//! operation counts and a [`Calibration`] of the primitive costs:
//!
//! - **TFHE** (one bit per ciphertext): the circuit's bootstraps, from
//!   [`crate::bound`], times the seconds of one bootstrap on this machine's
//!   thread pool; instances run one after the other.
//! - **Packed BGV, bits in slots** (HElib's layout): one number per
//!   ciphertext, shifts by rotation. Each full-adder row costs two products
//!   and one rotation. Each Kogge–Stone round costs two products and two
//!   rotations. Instances run one after the other.
//! - **Packed BGV, bit-sliced**: one ciphertext per bit position, one
//!   instance per slot. Each bit of a full-adder row costs two products, and
//!   each Kogge–Stone round about two products per bit; a comparison's
//!   carry-out tree about three products per bit. Up to N instances share
//!   one run.
//! - **Integer SIMD** (SEAL's row): whole integers in slots. A sum costs n − 1
//!   additions, and up to N instances share one run. Comparisons are priced
//!   only for small widths (an interpolated polynomial of degree 2^(w+1)).
//!
//! The packed engines add the key holder's refreshes. When a circuit is
//! deeper than the parameters give, every live ciphertext is refreshed once
//! per `depth` levels.
//!
//! The counts are modelled, not exact. `hecloud bench addcmp` calibrates
//! the primitive costs on the machine. The defaults
//! ([`Calibration::default`]) were measured on a 2-core AMD EPYC with AVX2.
//!
//! ```
//! use hecloud_circuits::advice::{Calibration, Engine, Task, advise};
//! let cal = Calibration::default();
//! // One 8-bit comparison: bits in slots (a few products and rotations;
//! // TFHE needs a few bootstraps of 27 ms).
//! let one = advise(Task::Compare { width: 8 }, 1, &cal, &Engine::ALL);
//! assert_eq!(one.engine, Engine::PackedSlots);
//! // A thousand sums of 1000 numbers, kept as bits: packed BGV, bit-sliced.
//! let many = advise(Task::Sum { width: 32, operands: 1000 }, 1000, &cal, &Engine::BITS);
//! assert_eq!(many.engine, Engine::PackedSliced);
//! ```

use std::fmt;

use crate::bound;
use crate::circuits::{AdderKind, SumMode};

/// A job to price.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// The sum of `operands` numbers of `width` bits (mod 2^width).
    Sum {
        /// Bits per number.
        width: usize,
        /// How many numbers.
        operands: usize,
    },
    /// Whether X < Y, for two numbers of `width` bits.
    Compare {
        /// Bits per number.
        width: usize,
    },
    /// min(X, Y) and max(X, Y) of two numbers of `width` bits.
    MinMax {
        /// Bits per number.
        width: usize,
    },
}

impl Task {
    fn width(self) -> usize {
        match self {
            Task::Sum { width, .. } | Task::Compare { width } | Task::MinMax { width } => width,
        }
    }
}

/// The engines hecloud can run a task on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// TFHE, one bit per ciphertext ([`crate::TfheEngine`]).
    Tfhe,
    /// BGV, the bits of one number in consecutive slots.
    PackedSlots,
    /// BGV, one ciphertext per bit position, one instance per slot.
    PackedSliced,
    /// BGV, whole integers in slots (`hecloud_bgv::integer`).
    IntegerSimd,
}

impl Engine {
    /// Every engine.
    pub const ALL: [Engine; 4] = [
        Engine::Tfhe,
        Engine::PackedSlots,
        Engine::PackedSliced,
        Engine::IntegerSimd,
    ];

    /// The engines that keep numbers as encrypted bits.
    pub const BITS: [Engine; 3] = [Engine::Tfhe, Engine::PackedSlots, Engine::PackedSliced];
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Engine::Tfhe => "tfhe",
            Engine::PackedSlots => "bgv-slots",
            Engine::PackedSliced => "bgv-sliced",
            Engine::IntegerSimd => "bgv-integer",
        })
    }
}

/// The primitive costs the predictions are built from, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// Where the figures come from (machine, date, or "defaults").
    pub source: String,
    /// TFHE: one bootstrap on the machine's thread pool. Wall time per
    /// bootstrap of a whole circuit, so the pool's parallelism is included.
    pub tfhe_bootstrap_s: f64,
    /// Threads of that pool (the comparator's layout depends on it).
    pub threads: usize,
    /// Packed BGV: slots per ciphertext (N) of the parameters used.
    pub bgv_slots: usize,
    /// Packed BGV: a product with relinearization and modulus switch.
    pub bgv_mul_s: f64,
    /// Packed BGV: a row rotation.
    pub bgv_rotate_s: f64,
    /// Packed BGV: the refresh of one ciphertext by the key holder.
    pub bgv_refresh_s: f64,
    /// Packed BGV: products in a row the parameters allow before a refresh.
    pub bgv_depth: usize,
    /// Integer SIMD: slots per vector.
    pub int_slots: usize,
    /// Integer SIMD: one addition of two vectors.
    pub int_add_s: f64,
}

impl Default for Calibration {
    /// What `hecloud bench addcmp --quick` wrote on a 2-core AMD EPYC
    /// (AVX2, no AVX-512), 2026-11-26, rounded: TFHE's median wall time per
    /// bootstrap over its circuits (2 threads); packed BGV at the
    /// `bgv-n13` preset (one thread, refresh = local mask, decrypt,
    /// encrypt, unmask); integer sums at N = 2^13 with the parameters of
    /// 32-bit sums.
    fn default() -> Self {
        Self {
            source: "defaults (2-core AMD EPYC, AVX2)".into(),
            tfhe_bootstrap_s: 0.027,
            threads: 2,
            bgv_slots: 1 << 13,
            bgv_mul_s: 0.002_6,
            bgv_rotate_s: 0.002_3,
            bgv_refresh_s: 0.002_1,
            bgv_depth: 3,
            int_slots: 1 << 13,
            int_add_s: 0.000_02,
        }
    }
}

impl Calibration {
    /// The `key = value` text form, one figure per line.
    pub fn to_text(&self) -> String {
        format!(
            "# hecloud advise calibration\nsource = {}\ntfhe_bootstrap_s = {}\nthreads = {}\nbgv_slots = {}\nbgv_mul_s = {}\nbgv_rotate_s = {}\nbgv_refresh_s = {}\nbgv_depth = {}\nint_slots = {}\nint_add_s = {}\n",
            self.source,
            self.tfhe_bootstrap_s,
            self.threads,
            self.bgv_slots,
            self.bgv_mul_s,
            self.bgv_rotate_s,
            self.bgv_refresh_s,
            self.bgv_depth,
            self.int_slots,
            self.int_add_s
        )
    }

    /// Parses [`Calibration::to_text`]. Keys it does not set keep their
    /// defaults. An unknown key, a malformed or non-positive value is an
    /// error naming the line.
    pub fn from_text(text: &str) -> Result<Self, String> {
        let mut c = Self::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| format!("line {}: expected `key = value`", i + 1))?;
            let (key, value) = (key.trim(), value.trim());
            let bad = || format!("line {}: bad value {value:?} for {key}", i + 1);
            let secs = || -> Result<f64, String> {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(bad)
            };
            let count = || -> Result<usize, String> {
                value
                    .parse::<usize>()
                    .ok()
                    .filter(|&x| x > 0)
                    .ok_or_else(bad)
            };
            match key {
                "source" => c.source = value.to_string(),
                "tfhe_bootstrap_s" => c.tfhe_bootstrap_s = secs()?,
                "threads" => c.threads = count()?,
                "bgv_slots" => c.bgv_slots = count()?,
                "bgv_mul_s" => c.bgv_mul_s = secs()?,
                "bgv_rotate_s" => c.bgv_rotate_s = secs()?,
                "bgv_refresh_s" => c.bgv_refresh_s = secs()?,
                "bgv_depth" => c.bgv_depth = count()?,
                "int_slots" => c.int_slots = count()?,
                "int_add_s" => c.int_add_s = secs()?,
                _ => return Err(format!("line {}: unknown key {key:?}", i + 1)),
            }
        }
        Ok(c)
    }
}

/// The price of a task on one engine.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// The engine.
    pub engine: Engine,
    /// Predicted seconds for all instances, `None` where the engine cannot
    /// run the task.
    pub seconds: Option<f64>,
    /// How the figure was reached (counts and primitive costs), or why the
    /// engine cannot run the task.
    pub detail: String,
}

/// Operation counts of one packed circuit run.
#[derive(Debug, Clone, Copy, Default)]
struct PackedCounts {
    products: f64,
    rotations: f64,
    depth: usize,
    /// Ciphertexts alive across a refresh point.
    live: f64,
}

/// Rounds of 3 → 2 full-adder rows from n operands down to two.
fn csa_rounds(mut n: usize) -> usize {
    let mut rounds = 0;
    while n > 2 {
        n -= n / 3;
        rounds += 1;
    }
    rounds
}

fn log2_ceil(x: usize) -> usize {
    x.max(1).next_power_of_two().trailing_zeros() as usize
}

/// Counts of the packed circuits (see the module docs).
fn packed_counts(task: Task, sliced: bool) -> PackedCounts {
    let w = task.width() as f64;
    let lw = log2_ceil(task.width());
    // Per bit in the sliced layout; per ciphertext in the slot layout.
    let per = if sliced { w } else { 1.0 };
    let ksa_products = per + 2.0 * per * lw as f64;
    let ksa_rotations = if sliced { 0.0 } else { 2.0 * lw as f64 + 1.0 };
    match task {
        Task::Sum { operands, .. } => {
            let rows = operands.saturating_sub(2) as f64;
            PackedCounts {
                products: 2.0 * per * rows + ksa_products,
                rotations: if sliced { 0.0 } else { rows } + ksa_rotations,
                depth: 2 * csa_rounds(operands) + lw + 2,
                live: 2.0 * per,
            }
        }
        Task::Compare { .. } | Task::MinMax { .. } => {
            let select = matches!(task, Task::MinMax { .. });
            // Only the carry out is wanted: in the sliced layout its prefix
            // tree costs about 3w products (measured: 3060 at w = 1024), not
            // a whole adder's w·log2 w.
            let prefix = if sliced { 3.0 * w } else { ksa_products };
            PackedCounts {
                products: prefix + if select { per } else { 0.0 },
                rotations: ksa_rotations + if select && !sliced { lw as f64 } else { 0.0 },
                depth: lw + 2 + usize::from(select),
                live: if sliced { w } else { 2.0 },
            }
        }
    }
}

fn price_packed(task: Task, instances: u64, cal: &Calibration, sliced: bool) -> Prediction {
    let engine = if sliced {
        Engine::PackedSliced
    } else {
        Engine::PackedSlots
    };
    let c = packed_counts(task, sliced);
    let refresh_points = c.depth.saturating_sub(1) / cal.bgv_depth.max(1);
    let refreshes = refresh_points as f64 * c.live;
    let run =
        c.products * cal.bgv_mul_s + c.rotations * cal.bgv_rotate_s + refreshes * cal.bgv_refresh_s;
    let runs = if sliced {
        instances.div_ceil(cal.bgv_slots as u64)
    } else {
        instances
    };
    Prediction {
        engine,
        seconds: Some(run * runs as f64),
        detail: format!(
            "{runs} run(s) × ({:.0} products, {:.0} rotations, {refreshes:.0} refreshes; depth {})",
            c.products, c.rotations, c.depth
        ),
    }
}

fn price_tfhe(task: Task, instances: u64, cal: &Calibration) -> Prediction {
    let bootstraps = match task {
        Task::Sum { width, operands } => bound::sum_bootstraps(
            operands,
            width,
            SumMode::Modular,
            AdderKind::Auto,
            cal.threads,
        ),
        Task::Compare { width } => bound::compare_bootstraps(width, cal.threads),
        Task::MinMax { width } => bound::min_max_bootstraps(width, cal.threads),
    };
    match bootstraps {
        Ok(b) => Prediction {
            engine: Engine::Tfhe,
            seconds: Some(b as f64 * cal.tfhe_bootstrap_s * instances as f64),
            detail: format!("{instances} run(s) × {b} bootstraps"),
        },
        Err(e) => Prediction {
            engine: Engine::Tfhe,
            seconds: None,
            detail: e.to_string(),
        },
    }
}

/// Widest comparison priced on integer SIMD (a polynomial of degree
/// 2^(w+1) − 2 over t = 65537).
const INT_COMPARE_MAX_WIDTH: usize = 12;

fn price_integer(task: Task, instances: u64, cal: &Calibration) -> Prediction {
    let runs = instances.div_ceil(cal.int_slots as u64);
    let engine = Engine::IntegerSimd;
    match task {
        Task::Sum { operands, .. } => Prediction {
            engine,
            seconds: Some((operands.saturating_sub(1)) as f64 * cal.int_add_s * runs as f64),
            detail: format!(
                "{runs} run(s) × {} additions (the full sum; reduce mod 2^w after decryption)",
                operands.saturating_sub(1)
            ),
        },
        Task::Compare { width } if width <= INT_COMPARE_MAX_WIDTH => {
            let degree = (1u64 << (width + 1)) as f64;
            let products = 2.0 * degree.sqrt();
            let depth = width + 2;
            let refreshes = (depth.saturating_sub(1) / cal.bgv_depth.max(1)) as f64;
            Prediction {
                engine,
                seconds: Some(
                    (products * cal.bgv_mul_s + refreshes * cal.bgv_refresh_s) * runs as f64,
                ),
                detail: format!(
                    "{runs} run(s) × {products:.0} products (comparison polynomial of degree {degree:.0})"
                ),
            }
        }
        _ => Prediction {
            engine,
            seconds: None,
            detail: format!(
                "integers encrypted whole compare only up to {INT_COMPARE_MAX_WIDTH} bits"
            ),
        },
    }
}

/// The price of `task` for `instances` independent instances on every
/// engine.
pub fn predict(task: Task, instances: u64, cal: &Calibration) -> Vec<Prediction> {
    let instances = instances.max(1);
    vec![
        price_tfhe(task, instances, cal),
        price_packed(task, instances, cal, false),
        price_packed(task, instances, cal, true),
        price_integer(task, instances, cal),
    ]
}

/// The engine hecloud would use among `engines`: the cheapest prediction.
/// Pass [`Engine::BITS`] when the result must stay encrypted bit by bit
/// (for more bit-level work), [`Engine::ALL`] otherwise.
pub fn advise(task: Task, instances: u64, cal: &Calibration, engines: &[Engine]) -> Prediction {
    predict(task, instances, cal)
        .into_iter()
        .filter(|p| p.seconds.is_some() && engines.contains(&p.engine))
        .min_by(|a, b| a.seconds.partial_cmp(&b.seconds).expect("finite"))
        .unwrap_or_else(|| Prediction {
            engine: engines.first().copied().unwrap_or(Engine::Tfhe),
            seconds: None,
            detail: "no engine among those allowed can run this task".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_text_round_trips_and_rejects_bad_lines() {
        let c = Calibration {
            bgv_mul_s: 0.25,
            source: "test machine".into(),
            ..Calibration::default()
        };
        assert_eq!(Calibration::from_text(&c.to_text()).unwrap(), c);
        for bad in [
            "bgv_mul_s = -1",
            "bgv_mul_s = nan",
            "what = 1",
            "no equals sign",
        ] {
            assert!(Calibration::from_text(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_pick_is_the_cheapest_and_follows_the_shape_of_the_job() {
        let cal = Calibration::default();
        let bits = &Engine::BITS;
        // The pick is the cheapest of the allowed predictions.
        let task = Task::Sum {
            width: 32,
            operands: 3,
        };
        let all = predict(task, 1, &cal);
        let best = advise(task, 1, &cal, bits);
        assert!(
            all.iter()
                .filter(|p| bits.contains(&p.engine))
                .all(|p| p.seconds >= best.seconds)
        );
        assert_eq!(advise(task, 1, &cal, &[Engine::Tfhe]).engine, Engine::Tfhe);
        // Many operands, kept as bits: packed BGV.
        let many = advise(
            Task::Sum {
                width: 32,
                operands: 64,
            },
            1,
            &cal,
            bits,
        );
        assert_ne!(many.engine, Engine::Tfhe, "{many:?}");
        // Sums of whole integers: integer SIMD, by far (SEAL's row).
        let ints = advise(
            Task::Sum {
                width: 32,
                operands: 1024,
            },
            1,
            &cal,
            &Engine::ALL,
        );
        assert_eq!(ints.engine, Engine::IntegerSimd, "{ints:?}");
        // Thousands of wide comparisons at once: bit-sliced.
        let wide = advise(Task::Compare { width: 64 }, 10_000, &cal, &Engine::ALL);
        assert_eq!(wide.engine, Engine::PackedSliced, "{wide:?}");
        // Nothing allowed: a prediction without a price, not a panic.
        assert!(advise(wide_task(), 1, &cal, &[]).seconds.is_none());
        // Every engine prices a valid task or says why not.
        for p in predict(Task::Compare { width: 1024 }, 1, &cal) {
            assert!(p.seconds.is_some() || !p.detail.is_empty());
        }
    }

    fn wide_task() -> Task {
        Task::Compare { width: 1024 }
    }

    #[test]
    fn counts_grow_with_the_task() {
        let small = packed_counts(
            Task::Sum {
                width: 8,
                operands: 4,
            },
            true,
        );
        let large = packed_counts(
            Task::Sum {
                width: 32,
                operands: 64,
            },
            true,
        );
        assert!(large.products > small.products && large.depth > small.depth);
        assert_eq!(csa_rounds(2), 0);
        assert_eq!(csa_rounds(3), 1);
        assert!(csa_rounds(1024) > 10);
    }
}
