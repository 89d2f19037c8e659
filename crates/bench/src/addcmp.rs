//! `hecloud bench addcmp`: the research's addition/comparison experiment
//! (Paper A of `SEED-FIGURES.md`: HElib vs TFHE vs SEAL on sums of n
//! encrypted integers and comparisons of two) re-run side by side in one
//! run on this machine, with the paper's published points on the same
//! log2-seconds axes as its figures 8 and 18.
//!
//! Rows (every one in `addcmp.csv`; a `source` column tells measured rows
//! from the paper's):
//!
//! - **ours, integer SIMD** ([`hecloud_bgv::integer`], the paper's "SEAL
//!   row" done exactly): sums of n = 3 … 1024 encrypted vectors of 32- and
//!   64-bit integers at N = 2^13, each n with
//!   `IntegerParameters::for_sums(13, bits, n)` — the smallest Q our noise
//!   model accepts for that job (2 Q primes of 60 bits, one plaintext prime
//!   for 32-bit values and two for 64-bit ones). Only the sum is timed
//!   (encryption is not), and every sum is decrypted and checked against
//!   u128 sums. A vector holds N = 8192 numbers, so the amortized time per
//!   number added is the time over n·N.
//! - **ours, ct × ct** at N = 2^14 ([`hecloud_bgv::Preset::N14`], its
//!   primes in the table): `Evaluator::mul` + `relinearize` (the
//!   headline: the same work as Lattigo's `MulRelin`, which does not switch
//!   the modulus), `mul_relin` (which also switches one level down, fused
//!   with the key switch's division by P), the two halves apart, and one
//!   row rotation.
//! - **peers** ([`crate::peers::lattigo_bgv`], [`crate::peers::seal_bfv`]):
//!   Lattigo v6.2.0 BGV and SEAL 4.x BFV on SEAL's default 128-bit moduli
//!   (N = 2^13: 4 Q primes of 43–44 bits; N = 2^14: 8 of 48–49 bits) and
//!   t = 65537: each system picks its parameters for the job, and ours are
//!   sized for exact 32- or 64-bit sums, the peers' for 16-bit values.
//! - **TFHE** (bit level, one bit per ciphertext): our circuits on
//!   [`hecloud_circuits::TfheEngine`] and TFHE-rs's integer API, measured
//!   by the functions of [`crate::tfhe`] (same keys, same thread pool):
//!   sums of 32- and 64-bit numbers and comparisons of 2 … 1024 bits.
//! - **the paper's points** ([`paper`]; Intel i7-6700 3.4 GHz, 2019):
//!   figure 8 (64-bit sums, TFHE and HElib), SEAL's integer additions,
//!   figure 18 (comparisons), table 5, and the cost model standing in for
//!   figure 6 (32-bit sums), labelled as the paper's.
//! - **ours, packed bits** ([`packed`], the paper's HElib row on our
//!   engine) at the `bgv-n13` preset: bits in slots (the latency of one
//!   comparison of 2 … 1024 bits and of one sum of n 64-bit numbers) and
//!   bit-sliced (N = 8192 sums of n 32-bit numbers, N comparisons of 1024
//!   bits, reported per number), the key holder's refreshes run in
//!   process and included.
//!
//! From this run's figures the bench writes the calibration of `hecloud
//! advise` (`advise.txt`) and checks every point of the paper's figures 8
//! and 18 against our measured time on the engine `advise` picks for it.
//!
//! Everything BGV/BFV runs on one thread (ours in a 1-thread rayon pool,
//! Lattigo with `GOMAXPROCS=1`, SEAL single-threaded) and reports the
//! median of several samples; ours and the peers run in turn for two
//! rounds (three without `--quick`), the later rounds repeating the
//! headline cases, and each row keeps its fastest round (a shared machine
//! only ever adds time). TFHE runs on the default rayon pool for both
//! sides, as `hecloud bench tfhe` does. Writes
//! `addcmp.csv`, `addcmp-sums.png` (log2 s vs log2 n) and `addcmp-cmp.png`
//! (log2 s vs log2 width).

pub mod packed;
pub mod plot;

use std::time::Duration;

use hecloud_bgv::integer::{IntegerEvaluator, IntegerKeys, IntegerParameters, IntegerVector};
use hecloud_bgv::{BgvParameters, Encoder, Evaluator, KeySet, Preset};
use hecloud_circuits::advice::{Calibration, Engine, Task, advise};
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};

use crate::BenchOptions;
use crate::peers::{self, IntOp, IntOpTime};
use crate::report::{ResultLine, Table};
use crate::tfhe;
use crate::timing::median_time;

pub mod paper {
    //! The paper's published points (Paper A of `SEED-FIGURES.md`: HElib,
    //! TFHE and SEAL on an Intel i7-6700 3.4 GHz, 16 GB; HElib and TFHE on
    //! Ubuntu 14.04, SEAL 2.2 on Windows 10), as log2 of seconds. Never a
    //! measurement of ours.

    /// The n of figure 8 and of SEAL's additions.
    pub const NS: [usize; 10] = [3, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
    /// Figure 8: TFHE, sum of n 64-bit numbers.
    pub const FIG8_TFHE_64: [f64; 10] = [
        6.909, 7.241, 8.607, 9.235, 10.9, 11.18, 12.47, 13.46, 14.46, 15.46,
    ];
    /// Figure 8: HElib, sum of n 64-bit numbers.
    pub const FIG8_HELIB_64: [f64; 10] = [
        8.044, 8.077, 8.384, 8.801, 9.388, 9.767, 10.98, 11.89, 11.98, 13.03,
    ];
    /// SEAL's addition of n integers (figure 7 or 9; the width is not in
    /// the extracted text).
    pub const SEAL_ADD: [f64; 10] = [
        -4.14, -3.34, -2.06, -1.25, -0.35, 0.848, 1.722, 3.178, 3.753, 5.463,
    ];
    /// The widths of figure 18.
    pub const WIDTHS: [usize; 10] = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
    /// Figure 18: TFHE, comparison of two nb-bit numbers.
    pub const FIG18_TFHE: [f64; 10] = [
        0.379, 1.585, 3.17, 4.459, 5.833, 7.267, 8.276, 9.476, 10.64, 11.87,
    ];
    /// Figure 18: HElib, comparison of two nb-bit numbers.
    pub const FIG18_HELIB: [f64; 10] = [
        6.807, 6.82, 6.846, 6.858, 6.883, 8.17, 8.842, 9.606, 10.49, 11.44,
    ];
    /// Table 5 (seconds, 32-bit): HElib's Kogge–Stone adder t1, full adder
    /// t2, and the sum of three numbers.
    pub const HELIB_KSA_S: f64 = 120.0;
    /// See [`HELIB_KSA_S`].
    pub const HELIB_FULL_ADDER_S: f64 = 7.0;
    /// See [`HELIB_KSA_S`].
    pub const HELIB_SUM3_S: f64 = 127.0;
    /// Table 5 (seconds, 32-bit): TFHE's Kogge–Stone adder, full adder, and
    /// the sum of three numbers.
    pub const TFHE_KSA_S: f64 = 63.0;
    /// See [`TFHE_KSA_S`].
    pub const TFHE_FULL_ADDER_S: f64 = 22.0;
    /// See [`TFHE_KSA_S`].
    pub const TFHE_SUM3_S: f64 = 85.0;

    /// The paper's cost model of HElib for n numbers (t1 = HElib's KSA,
    /// t2 = HElib's full adder): (n − 2)·t2 + t1 seconds. Plotted for
    /// figure 6 (32-bit sums), which is not in the extracted text.
    pub fn helib_model_s(n: usize) -> f64 {
        (n as f64 - 2.0) * HELIB_FULL_ADDER_S + HELIB_KSA_S
    }

    /// The paper's cost model of TFHE for n numbers, in the same t1 and t2:
    /// (n − 2)·3·t2 + t1/2 seconds.
    pub fn tfhe_model_s(n: usize) -> f64 {
        (n as f64 - 2.0) * 3.0 * HELIB_FULL_ADDER_S + HELIB_KSA_S / 2.0
    }
}

/// Where a row's figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Measured in this run, on this machine.
    Measured,
    /// Published by the paper (its hardware, 2019).
    Paper,
    /// The paper's cost model (t1, t2 of its table 5).
    PaperModel,
}

impl Source {
    /// The name in the table and CSV.
    pub fn name(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Paper => "paper (i7-6700)",
            Source::PaperModel => "paper model",
        }
    }
}

/// The operation a row times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// The sum of `n` encrypted numbers (or vectors of them).
    Sum,
    /// The comparison of two encrypted numbers.
    Cmp,
    /// Ciphertext × ciphertext product and relinearization, no modulus
    /// switch (Lattigo's `MulRelin`, SEAL's multiply + relinearize).
    MulRelin,
    /// Ours: the product, relinearized and switched a level down, fused
    /// (`Evaluator::mul_relin`).
    MulRelinSwitch,
    /// Ours: the degree-2 tensor product alone (`Evaluator::mul`).
    Tensor,
    /// Ours: relinearizing a degree-2 ciphertext alone.
    Relinearize,
    /// One row rotation by one slot.
    Rotate,
    /// The paper's Kogge–Stone adder alone (table 5).
    Ksa,
    /// The paper's full adder alone (table 5).
    FullAdder,
}

impl Op {
    /// The name in the table and CSV.
    pub fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Cmp => "cmp",
            Op::MulRelin => "mul+relin",
            Op::MulRelinSwitch => "mul+relin+switch",
            Op::Tensor => "tensor",
            Op::Relinearize => "relin",
            Op::Rotate => "rotate",
            Op::Ksa => "ksa",
            Op::FullAdder => "full adder",
        }
    }
}

/// System names (the `system` column).
pub mod system {
    /// Ours: exact integer SIMD over BGV (`hecloud_bgv::integer`).
    pub const OURS_INT: &str = "ours BGV integer SIMD";
    /// Ours: the BGV evaluator (`hecloud_bgv::Evaluator`).
    pub const OURS_BGV: &str = "ours BGV";
    /// Lattigo v6.2.0 BGV.
    pub const LATTIGO: &str = "Lattigo BGV";
    /// SEAL 4.x BFV (through TenSEAL).
    pub const SEAL: &str = "SEAL BFV";
    /// Our TFHE circuits (carry-save tree + adder; comparison tree).
    pub const OURS_TFHE: &str = "ours TFHE";
    /// Our TFHE circuits running the paper's comparison (carry of ¬X + Y).
    pub const OURS_TFHE_PAPER_METHOD: &str = "ours TFHE (carry of ~X+Y)";
    /// TFHE-rs's integer API.
    pub const TFHERS: &str = "TFHE-rs";
    /// The paper's HElib.
    pub const HELIB: &str = "HElib";
    /// The paper's TFHE.
    pub const TFHE: &str = "TFHE";
    /// The paper's SEAL.
    pub const PAPER_SEAL: &str = "SEAL";
    /// Ours, packed BGV: bits in slots.
    pub const OURS_PACKED: &str = "ours BGV packed bits";
    /// Ours, packed BGV: bit-sliced.
    pub const OURS_SLICED: &str = "ours BGV bit-sliced";
}

/// One row of the experiment.
#[derive(Debug, Clone)]
pub struct Row {
    /// Where the figure comes from.
    pub source: Source,
    /// Which system (see [`system`]).
    pub system: &'static str,
    /// The operation.
    pub op: Op,
    /// Bits per number (None where the source does not say, or for
    /// operations on the plaintext ring mod t).
    pub bits: Option<usize>,
    /// Numbers (or vectors) added; 2 for comparisons and products.
    pub n: usize,
    /// The ring degree N of RLWE rows.
    pub ring: Option<usize>,
    /// Latency of the operation in seconds (NaN when not measured).
    pub seconds: f64,
    /// How many numbers the operation adds (n·N for a sum of SIMD vectors,
    /// n for one bit-level sum) or how many comparisons it makes (N for a
    /// bit-sliced one, 1 for one in slots); 0 when a time per number means
    /// nothing.
    pub numbers: usize,
    /// Parameters and notes.
    pub params: String,
}

impl Row {
    fn measured(system: &'static str, op: Op, bits: Option<usize>, n: usize) -> Self {
        Self {
            source: Source::Measured,
            system,
            op,
            bits,
            n,
            ring: None,
            seconds: f64::NAN,
            numbers: 0,
            params: String::new(),
        }
    }

    /// Seconds per number added (NaN when not meaningful).
    pub fn per_number_s(&self) -> f64 {
        if self.numbers == 0 {
            f64::NAN
        } else {
            self.seconds / self.numbers as f64
        }
    }
}

/// The paper's rows (figures 8 and 18, SEAL's additions, table 5, and the
/// cost model for 32-bit sums).
pub fn paper_rows() -> Vec<Row> {
    let row = |source, system, op, bits: Option<usize>, n, log2_s: f64, params: &str| Row {
        source,
        system,
        op,
        bits,
        n,
        ring: None,
        seconds: log2_s.exp2(),
        numbers: if op == Op::Sum { n } else { 0 },
        params: params.into(),
    };
    let mut rows = Vec::new();
    for (i, &n) in paper::NS.iter().enumerate() {
        rows.push(row(
            Source::Paper,
            system::TFHE,
            Op::Sum,
            Some(64),
            n,
            paper::FIG8_TFHE_64[i],
            "fig. 8; lambda = 100",
        ));
        rows.push(row(
            Source::Paper,
            system::HELIB,
            Op::Sum,
            Some(64),
            n,
            paper::FIG8_HELIB_64[i],
            "fig. 8; 1200 slots, GF(2^20), security 93",
        ));
        rows.push(row(
            Source::Paper,
            system::PAPER_SEAL,
            Op::Sum,
            None,
            n,
            paper::SEAL_ADD[i],
            "fig. 7/9 (width not given); N = 2048, t = 2^8",
        ));
        for (system, s) in [
            (system::HELIB, paper::helib_model_s(n)),
            (system::TFHE, paper::tfhe_model_s(n)),
        ] {
            rows.push(row(
                Source::PaperModel,
                system,
                Op::Sum,
                Some(32),
                n,
                s.log2(),
                "cost model for fig. 6: (n-2)t2+t1, (n-2)3t2+t1/2",
            ));
        }
    }
    for (i, &w) in paper::WIDTHS.iter().enumerate() {
        rows.push(row(
            Source::Paper,
            system::TFHE,
            Op::Cmp,
            Some(w),
            2,
            paper::FIG18_TFHE[i],
            "fig. 18; carry of ~X+Y",
        ));
        rows.push(row(
            Source::Paper,
            system::HELIB,
            Op::Cmp,
            Some(w),
            2,
            paper::FIG18_HELIB[i],
            "fig. 18; carry of ~X+Y, 32-bit blocks",
        ));
    }
    for (system, ksa, fa, sum3) in [
        (
            system::HELIB,
            paper::HELIB_KSA_S,
            paper::HELIB_FULL_ADDER_S,
            paper::HELIB_SUM3_S,
        ),
        (
            system::TFHE,
            paper::TFHE_KSA_S,
            paper::TFHE_FULL_ADDER_S,
            paper::TFHE_SUM3_S,
        ),
    ] {
        for (op, n, s) in [
            (Op::Ksa, 2, ksa),
            (Op::FullAdder, 3, fa),
            (Op::Sum, 3, sum3),
        ] {
            rows.push(row(
                Source::Paper,
                system,
                op,
                Some(32),
                n,
                s.log2(),
                "table 5",
            ));
        }
    }
    rows
}

/// The table's columns.
pub const COLUMNS: [&str; 11] = [
    "source",
    "system",
    "op",
    "bits",
    "n",
    "ring",
    "seconds",
    "log2_s",
    "per_number_s",
    "vs_ours",
    "params",
];

fn num(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "NA".into()
    }
}

/// `x` with four significant digits (at least), in plain decimals.
fn sig(x: f64) -> String {
    if !x.is_finite() || x <= 0.0 {
        return num(x, 0);
    }
    let decimals = (3 - x.log10().floor() as i64).clamp(0, 12) as usize;
    format!("{x:.decimals$}")
}

/// `x` in scientific notation, four significant digits.
fn sci(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3e}")
    } else {
        "NA".into()
    }
}

/// The cells of one row; `ours` is our time for the same job, for the
/// peers' `vs_ours` column (ours / theirs).
pub fn cells(r: &Row, ours: Option<f64>) -> Vec<String> {
    vec![
        r.source.name().into(),
        r.system.into(),
        r.op.name().into(),
        r.bits.map_or("NA".into(), |b| b.to_string()),
        r.n.to_string(),
        r.ring.map_or("NA".into(), |n| n.to_string()),
        sig(r.seconds),
        num(r.seconds.log2(), 3),
        sci(r.per_number_s()),
        ours.map_or("NA".into(), |o| num(o / r.seconds, 3)),
        r.params.clone(),
    ]
}

/// The table (and CSV) of `rows`, with the `vs_ours` ratios of measured
/// peer rows against our measured row of the same job.
pub fn table(rows: &[Row]) -> Table {
    let mut t = Table::new("addcmp", &COLUMNS);
    for r in rows {
        t.push(cells(r, ours_for(rows, r)));
    }
    t
}

/// Our measured time for the job of the measured peer row `r`.
fn ours_for(rows: &[Row], r: &Row) -> Option<f64> {
    if r.source != Source::Measured {
        return None;
    }
    let ours_system = match r.system {
        system::LATTIGO | system::SEAL => match r.op {
            Op::Sum => system::OURS_INT,
            _ => system::OURS_BGV,
        },
        system::TFHERS => system::OURS_TFHE,
        _ => return None,
    };
    // The peers' sums (16-bit values mod t) stand against our 32-bit ones.
    let bits = if ours_system == system::OURS_INT {
        Some(32)
    } else {
        r.bits
    };
    rows.iter()
        .find(|o| {
            o.source == Source::Measured
                && o.system == ours_system
                && o.op == r.op
                && o.n == r.n
                && o.ring == r.ring
                && o.bits == bits
        })
        .map(|o| o.seconds)
}

pub(crate) fn param_bits(p: &BgvParameters) -> String {
    let lit = p.rlwe().literal();
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join("+");
    format!(
        "Q {} P {} bits, t {:.0} bits",
        list(&lit.log_q),
        list(&lit.log_p),
        (p.t() as f64).log2()
    )
}

fn peer_params(r: &IntOpTime) -> String {
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join("+");
    format!(
        "Q {} P {} bits, t {} (SEAL's default moduli)",
        list(&r.logq),
        list(&r.logp),
        r.t
    )
}

fn random_values(rng: &mut ChaCha20Rng, n: usize, bits: u32) -> Vec<u64> {
    (0..n)
        .map(|_| {
            let x = rng.next_u64();
            if bits >= 64 { x } else { x >> (64 - bits) }
        })
        .collect()
}

/// Our integer SIMD sums of n vectors of `bits`-bit numbers at N = 2^13,
/// each checked by decryption against u128 sums.
fn ours_sums(
    bits: u32,
    ns: &[usize],
    samples: usize,
    rng: &mut ChaCha20Rng,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &n in ns {
        let params = IntegerParameters::for_sums(13, bits, n as u64)?;
        let keys = IntegerKeys::generate(&params, false)?;
        let eval = IntegerEvaluator::new(&params, &keys);
        let slots = params.slots();
        let mut want = vec![0u128; slots];
        let cts: Vec<IntegerVector> = (0..n)
            .map(|_| {
                let v = random_values(rng, slots, bits);
                want.iter_mut().zip(&v).for_each(|(w, &x)| *w += x as u128);
                keys.encrypt(&v)
            })
            .collect::<hecloud_bgv::Result<_>>()?;
        let t = median_time(samples, Duration::from_millis(20), || {
            std::hint::black_box(eval.sum(&cts).expect("sum"));
        });
        let got = keys.decrypt(&eval.sum(&cts)?)?;
        anyhow::ensure!(
            got == want,
            "our sum of {n} {bits}-bit vectors decrypted wrongly"
        );
        let residues = params.residues();
        let mut row = Row::measured(system::OURS_INT, Op::Sum, Some(bits as usize), n);
        row.ring = Some(slots);
        row.seconds = t.as_secs_f64();
        row.numbers = n * slots;
        row.params = format!(
            "{} residue(s): {}; smallest Q for the job",
            residues.len(),
            param_bits(&residues[0])
        );
        eprintln!(
            "ours: sum of {n} {bits}-bit vectors at N = {slots}: {:.3} ms",
            row.seconds * 1e3
        );
        rows.push(row);
    }
    Ok(rows)
}

/// Our ct × ct product (separate and fused with the modulus switch), its
/// two halves, and one row rotation at N = 2^14, each checked by decryption.
fn ours_mul(samples: usize, rng: &mut ChaCha20Rng) -> anyhow::Result<Vec<Row>> {
    let params = Preset::N14.build()?;
    let keys = KeySet::generate(&params, &[1], false)?;
    let enc = Encoder::new(&params);
    let eval = Evaluator::new(&params, keys.evaluation_keys());
    let n = params.n();
    let t = params.t();
    let a: Vec<u64> = (0..n).map(|_| rng.next_u64() % t).collect();
    let b: Vec<u64> = (0..n).map(|_| rng.next_u64() % t).collect();
    let (ca, cb) = (
        keys.encrypt(&enc.encode(&a)?)?,
        keys.encrypt(&enc.encode(&b)?)?,
    );
    let prod: Vec<u64> = a.iter().zip(&b).map(|(x, y)| x * y % t).collect();
    let decrypt = |ct: &hecloud_rlwe::Ciphertext| -> anyhow::Result<Vec<u64>> {
        Ok(enc.decode(&keys.decrypt(ct)?)?)
    };
    let time = |op: &mut dyn FnMut()| median_time(samples, Duration::ZERO, op).as_secs_f64();

    let s_mul_relin = time(&mut || {
        let d = eval.mul(&ca, &cb).expect("mul");
        std::hint::black_box(eval.relinearize(&d).expect("relinearize"));
    });
    let r = eval.relinearize(&eval.mul(&ca, &cb)?)?;
    anyhow::ensure!(
        decrypt(&r)? == prod,
        "our mul + relinearize decrypted wrongly"
    );
    let s_fused = time(&mut || {
        std::hint::black_box(eval.mul_relin(&ca, &cb).expect("mul_relin"));
    });
    anyhow::ensure!(
        decrypt(&eval.mul_relin(&ca, &cb)?)? == prod,
        "our mul_relin decrypted wrongly"
    );
    let s_tensor = time(&mut || {
        std::hint::black_box(eval.mul(&ca, &cb).expect("mul"));
    });
    let d = eval.mul(&ca, &cb)?;
    let s_relin = time(&mut || {
        std::hint::black_box(eval.relinearize(&d).expect("relinearize"));
    });
    let s_rot = time(&mut || {
        std::hint::black_box(eval.rotate_rows(&ca, 1).expect("rotate"));
    });
    let half = n / 2;
    let want: Vec<u64> = (0..n)
        .map(|i| a[(i / half) * half + (i % half + 1) % half])
        .collect();
    anyhow::ensure!(
        decrypt(&eval.rotate_rows(&ca, 1)?)? == want,
        "our rotation decrypted wrongly"
    );

    let p = param_bits(&params);
    let mk = |op, s: f64, note: &str| {
        let mut r = Row::measured(system::OURS_BGV, op, None, 2);
        r.ring = Some(n);
        r.seconds = s;
        r.params = format!("{p}; {note}");
        r
    };
    eprintln!(
        "ours at N = {n}: mul+relin {:.2} ms (fused with the switch {:.2} ms; tensor {:.2} + relin {:.2}), rotate {:.2} ms",
        s_mul_relin * 1e3,
        s_fused * 1e3,
        s_tensor * 1e3,
        s_relin * 1e3,
        s_rot * 1e3
    );
    let mut rot = mk(Op::Rotate, s_rot, "top level, Galois key of 1");
    rot.n = 1;
    Ok(vec![
        mk(
            Op::MulRelin,
            s_mul_relin,
            "mul + relinearize (comparable to Lattigo MulRelin: no modulus switch)",
        ),
        mk(
            Op::MulRelinSwitch,
            s_fused,
            "mul_relin (also switches a level down, fused)",
        ),
        mk(Op::Tensor, s_tensor, "mul alone (degree 2)"),
        mk(Op::Relinearize, s_relin, "relinearize alone"),
        rot,
    ])
}

/// One BGV/BFV peer row, or a warning and `None` when the peer cannot run.
fn peer_row(
    system: &'static str,
    op: IntOp,
    log_n: u32,
    samples: usize,
    time: fn(IntOp, u32, usize, Option<&peers::Moduli>) -> anyhow::Result<IntOpTime>,
) -> Option<Row> {
    match time(op, log_n, samples, None) {
        Ok(r) => {
            let (kind, n) = match op {
                IntOp::Sum { n } => (Op::Sum, n),
                IntOp::Mul => (Op::MulRelin, 2),
                IntOp::Rotate => (Op::Rotate, 1),
            };
            let mut row = Row::measured(system, kind, None, n);
            row.ring = Some(1 << log_n);
            row.seconds = r.ms / 1e3;
            if kind == Op::Sum {
                row.numbers = n << log_n;
            }
            row.params = peer_params(&r);
            let what = match op {
                IntOp::Sum { n } => format!("sum of {n}"),
                _ => op.name().into(),
            };
            eprintln!("{system}: {what} at N = 2^{log_n}: {:.3} ms", r.ms);
            Some(row)
        }
        Err(e) => {
            eprintln!("warning: {system} unavailable for {}: {e}", op.name());
            None
        }
    }
}

fn tfhe_rows(r: &tfhe::Row, threads: usize) -> Vec<Row> {
    let mk = |system, seconds: f64, params: String| {
        let mut row = Row::measured(system, Op::Sum, Some(r.width), r.n);
        if r.op == "cmp" {
            row.op = Op::Cmp;
        } else {
            row.numbers = r.n;
        }
        row.seconds = seconds;
        row.params = params;
        row
    };
    let mut rows = vec![
        mk(
            system::OURS_TFHE,
            r.ours_s,
            format!(
                "{} PBS, depth {}; {threads} threads",
                r.ours_pbs, r.ours_depth
            ),
        ),
        mk(
            system::TFHERS,
            r.tfhers_s,
            format!("{} PBS; {threads} threads", r.tfhers_pbs),
        ),
    ];
    if r.published_s.is_finite() {
        rows.insert(
            1,
            mk(
                system::OURS_TFHE_PAPER_METHOD,
                r.published_s,
                format!("{} PBS; {threads} threads", r.published_pbs),
            ),
        );
    }
    rows
}

/// The cases each part runs.
struct Plan {
    sum_ns: Vec<usize>,
    peer_sum_ns: Vec<usize>,
    samples: usize,
    /// Rounds of the BGV/BFV headline cases (ours and the peers in turn,
    /// each side keeping its fastest round).
    rounds: usize,
    tfhe_sums: Vec<(usize, usize)>,
    tfhe_widths: Vec<usize>,
}

impl Plan {
    fn new(quick: bool) -> Self {
        let all = paper::NS.to_vec();
        if quick {
            Self {
                sum_ns: all,
                peer_sum_ns: vec![8, 64, 1024],
                samples: 5,
                rounds: 2,
                tfhe_sums: vec![(32, 3), (32, 8), (64, 3), (64, 8)],
                tfhe_widths: vec![2, 4, 8, 16, 32, 64],
            }
        } else {
            Self {
                sum_ns: all.clone(),
                peer_sum_ns: all.clone(),
                samples: 7,
                rounds: 3,
                tfhe_sums: [32, 64]
                    .into_iter()
                    .flat_map(|w| all.iter().map(move |&n| (w, n)))
                    .collect(),
                tfhe_widths: paper::WIDTHS.to_vec(),
            }
        }
    }
}

/// Runs the experiment.
pub fn run(opts: &BenchOptions) -> anyhow::Result<()> {
    let plan = Plan::new(opts.quick);
    let retained = hecloud_server::alloc::retain_freed_memory();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let threads = rayon::current_num_threads();
    println!(
        "backend: {}; BGV/BFV on 1 thread each (ours in a 1-thread pool, freed memory retained: {retained}; Lattigo v6.2.0 GOMAXPROCS=1; SEAL 4.x via TenSEAL), medians of {} samples, fastest of {} rounds for the headline cases; TFHE on {threads} threads both sides",
        hecloud_math::backend::default_backend().name(),
        plan.samples,
        plan.rounds
    );
    let mut rng = ChaCha20Rng::from_os_rng();
    let mut rows = Vec::new();

    // 1. Ours (integer SIMD sums at N = 2^13, ct × ct at N = 2^14) and the
    // BGV/BFV peers, in turn, for `plan.rounds` rounds: the first runs
    // every case, later ones the headline cases again (n = 1024, mul,
    // rotate); each row keeps its fastest round.
    type TimeFn = fn(IntOp, u32, usize, Option<&peers::Moduli>) -> anyhow::Result<IntOpTime>;
    let peer_list: [(&'static str, TimeFn); 2] = [
        (system::LATTIGO, peers::lattigo_bgv::time),
        (system::SEAL, peers::seal_bfv::time),
    ];
    let headline_n = [*paper::NS.last().expect("n")];
    let mut bgv_rows: Vec<Row> = Vec::new();
    for round in 0..plan.rounds {
        let (ns, peer_ns) = if round == 0 {
            (&plan.sum_ns[..], &plan.peer_sum_ns[..])
        } else {
            (&headline_n[..], &headline_n[..])
        };
        let mut this = Vec::new();
        for bits in [32, 64] {
            this.extend(pool.install(|| ours_sums(bits, ns, plan.samples, &mut rng))?);
        }
        this.extend(pool.install(|| ours_mul(plan.samples, &mut rng))?);
        for (name, time) in peer_list {
            for &n in peer_ns {
                this.extend(peer_row(name, IntOp::Sum { n }, 13, plan.samples, time));
            }
            this.extend(peer_row(name, IntOp::Mul, 14, plan.samples, time));
            this.extend(peer_row(name, IntOp::Rotate, 14, plan.samples, time));
        }
        let h = result_line(&this, &[]);
        eprintln!(
            "round {}: ours/SEAL sum1024 {}, ours/Lattigo sum1024 {}, ours/Lattigo mul {}",
            round + 1,
            num(h.targets[0].1, 3),
            num(h.targets[1].1, 3),
            num(h.targets[2].1, 3)
        );
        merge_fastest(&mut bgv_rows, this);
    }
    rows.extend(bgv_rows);

    // 2. Ours, packed bits (bgv-n13, the same one thread), every result
    // checked.
    let (packed_rows, prims) =
        pool.install(|| packed::run(&packed::Plan::new(opts.quick), plan.samples, &mut rng))?;
    rows.extend(packed_rows);

    // 3. TFHE: our circuits and TFHE-rs, same keys and pool.
    let ((ours_tfhe, peer_tfhe), tk) = crate::timing::once(tfhe::keys);
    let mut pbs_s = Vec::new();
    eprintln!("TFHE key generation: {:.1} s", tk.as_secs_f64());
    for &(w, n) in &plan.tfhe_sums {
        let reps = if n >= 256 { 1 } else { tfhe::REPEATS };
        let r = tfhe::best_of(reps, || {
            tfhe::measure_sum(&ours_tfhe, &peer_tfhe, &mut rng, w, n)
        })?;
        eprintln!(
            "TFHE sum of {n} {w}-bit: ours {:.3} s, TFHE-rs {:.3} s",
            r.ours_s, r.tfhers_s
        );
        pbs_s.push(r.ours_s / r.ours_pbs.max(1) as f64);
        rows.extend(tfhe_rows(&r, threads));
    }
    for &w in &plan.tfhe_widths {
        let r = tfhe::best_of(tfhe::REPEATS, || {
            tfhe::measure_cmp(&ours_tfhe, &peer_tfhe, &mut rng, w)
        })?;
        eprintln!(
            "TFHE cmp {w}-bit: ours {:.3} s, TFHE-rs {:.3} s",
            r.ours_s, r.tfhers_s
        );
        pbs_s.push(r.ours_s / r.ours_pbs.max(1) as f64);
        rows.extend(tfhe_rows(&r, threads));
    }
    drop((ours_tfhe, peer_tfhe));

    // 4. The paper's points, and advise's calibration from this run.
    rows.extend(paper_rows());
    pbs_s.sort_by(f64::total_cmp);
    let cal = calibration(&rows, &prims, pbs_s[pbs_s.len() / 2], threads);
    std::fs::create_dir_all(&opts.out_dir)?;
    let cal_path = opts.out_dir.join("advise.txt");
    std::fs::write(&cal_path, cal.to_text())?;

    let table = table(&rows);
    print!("{}", table.render());
    let csv = table.write_csv(&opts.out_dir)?;
    println!("wrote {}", csv.display());
    for (name, res) in plot::draw(&opts.out_dir, &rows) {
        match res {
            Ok(path) => println!("wrote {}", path.display()),
            Err(e) => eprintln!("warning: plot {name} not written: {e}"),
        }
    }
    println!(
        "wrote {} (hecloud advise's calibration)",
        cal_path.display()
    );
    let checks = paper_checks(&rows, &cal);
    for c in &checks {
        println!("{c}");
    }
    let result = result_line(&rows, &checks);
    for line in targets(&result) {
        println!("{line}");
    }
    println!("{}", result.line);
    Ok(())
}

/// The calibration of `hecloud advise` from this run: TFHE's median
/// seconds per bootstrap over its rows (`pbs_s`), the packed primitives at
/// `bgv-n13`, and the integer sum of 1024 32-bit vectors (one addition:
/// its time over 1023).
pub fn calibration(
    rows: &[Row],
    prims: &packed::Primitives,
    pbs_s: f64,
    threads: usize,
) -> Calibration {
    let sum = find(rows, system::OURS_INT, Op::Sum, Some(32), 1024);
    let defaults = Calibration::default();
    Calibration {
        source: format!(
            "hecloud bench addcmp on {} (backend {})",
            crate::report::cpu_name(),
            hecloud_math::backend::default_backend().name()
        ),
        tfhe_bootstrap_s: pbs_s,
        threads,
        bgv_slots: prims.slots,
        bgv_mul_s: prims.mul_s,
        bgv_rotate_s: prims.rotate_s,
        bgv_refresh_s: prims.refresh_s,
        bgv_depth: prims.depth,
        int_slots: rows
            .iter()
            .find(|r| r.system == system::OURS_INT)
            .and_then(|r| r.ring)
            .unwrap_or(defaults.int_slots),
        int_add_s: if sum.is_finite() {
            sum / 1023.0
        } else {
            defaults.int_add_s
        },
    }
}

/// One point of the paper's figures 8 or 18 against our time on the engine
/// `advise` picks for its job.
#[derive(Debug, Clone)]
pub struct PaperCheck {
    /// The paper's row.
    pub paper: Row,
    /// The engine `advise` picks (among all for sums, among the bit-level
    /// ones for comparisons: integer SIMD comparisons are not in the bench).
    pub engine: Engine,
    /// Our measured time on that engine (NaN when this run did not measure
    /// that job there).
    pub ours_s: f64,
}

impl PaperCheck {
    /// The paper's time over ours (≥ 100 wanted).
    pub fn speedup(&self) -> f64 {
        self.paper.seconds / self.ours_s
    }
}

impl std::fmt::Display for PaperCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = &self.paper;
        let what = match p.op {
            Op::Cmp => format!("{}-bit comparison", p.bits.unwrap_or(0)),
            _ => format!("sum of {} {}-bit", p.n, p.bits.unwrap_or(0)),
        };
        let x = self.speedup();
        let verdict = if !x.is_finite() {
            "not measured"
        } else if x >= 100.0 {
            "met"
        } else {
            "MISSED"
        };
        write!(
            f,
            "paper point: {} {what}: {} s (i7-6700); advise picks {}: ours {} s, {}x faster ({verdict})",
            p.system,
            sig(p.seconds),
            self.engine,
            sig(self.ours_s),
            num(x, 1)
        )
    }
}

/// Every point of figures 8 (64-bit sums) and 18 (comparisons) against the
/// engine `advise` picks with `cal`, for one instance.
pub fn paper_checks(rows: &[Row], cal: &Calibration) -> Vec<PaperCheck> {
    rows.iter()
        .filter(|r| {
            r.source == Source::Paper
                && matches!(r.system, system::TFHE | system::HELIB)
                && (r.op == Op::Cmp || (r.op == Op::Sum && r.bits == Some(64)))
        })
        .map(|r| {
            let width = r.bits.unwrap_or(0);
            let (task, engines): (Task, &[Engine]) = match r.op {
                Op::Cmp => (Task::Compare { width }, &Engine::BITS),
                _ => (
                    Task::Sum {
                        width,
                        operands: r.n,
                    },
                    &Engine::ALL,
                ),
            };
            let engine = advise(task, 1, cal, engines).engine;
            let ours = match engine {
                Engine::Tfhe => system::OURS_TFHE,
                Engine::PackedSlots => system::OURS_PACKED,
                Engine::PackedSliced => system::OURS_SLICED,
                Engine::IntegerSimd => system::OURS_INT,
            };
            PaperCheck {
                paper: r.clone(),
                engine,
                ours_s: find(rows, ours, r.op, r.bits, r.n),
            }
        })
        .collect()
}

/// Adds `new` to `rows`, keeping the fastest time of rows of the same job.
fn merge_fastest(rows: &mut Vec<Row>, new: Vec<Row>) {
    for r in new {
        match rows.iter_mut().find(|o| {
            o.source == r.source
                && o.system == r.system
                && o.op == r.op
                && o.bits == r.bits
                && o.n == r.n
                && o.ring == r.ring
        }) {
            Some(o) if r.seconds < o.seconds => *o = r,
            Some(_) => {}
            None => rows.push(r),
        }
    }
}

/// The measured time of a row, in seconds (NaN when absent).
fn find(rows: &[Row], system: &str, op: Op, bits: Option<usize>, n: usize) -> f64 {
    rows.iter()
        .find(|r| {
            r.source == Source::Measured
                && r.system == system
                && r.op == op
                && r.n == n
                && (bits.is_none() || r.bits == bits)
        })
        .map_or(f64::NAN, |r| r.seconds)
}

/// The RESULT line and the ratios the targets are checked on.
#[derive(Debug)]
pub struct Headline {
    /// The `RESULT addcmp …` line.
    pub line: ResultLine,
    /// Each target: what it asks, ours / the reference, and the largest
    /// ratio that meets it.
    pub targets: Vec<(&'static str, f64, f64)>,
}

/// The per-number (or per-comparison) time of a measured row, in seconds.
fn find_per_number(rows: &[Row], system: &str, op: Op, bits: usize, n: usize) -> f64 {
    rows.iter()
        .find(|r| {
            r.source == Source::Measured
                && r.system == system
                && r.op == op
                && r.bits == Some(bits)
                && r.n == n
        })
        .map_or(f64::NAN, Row::per_number_s)
}

/// The headline figures of `rows` and of the paper checks.
pub fn result_line(rows: &[Row], checks: &[PaperCheck]) -> Headline {
    let sum = find(rows, system::OURS_INT, Op::Sum, Some(32), 1024);
    let sum64 = find(rows, system::OURS_INT, Op::Sum, Some(64), 1024);
    let seal = find(rows, system::SEAL, Op::Sum, None, 1024);
    let lat = find(rows, system::LATTIGO, Op::Sum, None, 1024);
    let mul = find(rows, system::OURS_BGV, Op::MulRelin, None, 2);
    let fused = find(rows, system::OURS_BGV, Op::MulRelinSwitch, None, 2);
    let lat_mul = find(rows, system::LATTIGO, Op::MulRelin, None, 2);
    let seal_mul = find(rows, system::SEAL, Op::MulRelin, None, 2);
    let rot = find(rows, system::OURS_BGV, Op::Rotate, None, 1);
    let lat_rot = find(rows, system::LATTIGO, Op::Rotate, None, 1);
    let seal_rot = find(rows, system::SEAL, Op::Rotate, None, 1);
    let tfhers_cmp = find(rows, system::TFHERS, Op::Cmp, Some(1024), 2);
    let cmp = find(rows, system::OURS_TFHE, Op::Cmp, Some(1024), 2);
    let packed_cmp = find(rows, system::OURS_PACKED, Op::Cmp, Some(1024), 2);
    let tfhe_sum = find(rows, system::OURS_TFHE, Op::Sum, Some(32), 1024);
    let tfhers_sum = find(rows, system::TFHERS, Op::Sum, Some(32), 1024);
    let sliced_sum = find_per_number(rows, system::OURS_SLICED, Op::Sum, 32, 1024);
    let sliced_cmp = find_per_number(rows, system::OURS_SLICED, Op::Cmp, 1024, 2);
    let beaten = checks.iter().filter(|c| c.speedup() >= 100.0).count();
    // Over the points measured (a pick this run did not measure is NaN).
    let worst = checks
        .iter()
        .map(PaperCheck::speedup)
        .fold(f64::INFINITY, f64::min);
    let mut r = ResultLine::new("addcmp");
    let ms = |s: f64| s * 1e3;
    r.push_f64("sum1024_ms", ms(sum), 2);
    r.push_f64("seal_sum1024_ms", ms(seal), 2);
    r.push_f64("ratio_seal", sum / seal, 3);
    r.push_f64("lattigo_sum1024_ms", ms(lat), 2);
    r.push_f64("ratio_lattigo_bgv", sum / lat, 3);
    r.push_f64("mul_ms", ms(mul), 2);
    r.push_f64("lattigo_mul_ms", ms(lat_mul), 2);
    r.push_f64("ratio_mul_lattigo", mul / lat_mul, 3);
    r.push_f64("cmp1024_packed_s", packed_cmp, 3);
    r.push_f64("tfhers_cmp1024_s", tfhers_cmp, 3);
    r.push_f64("ratio_cmp1024_tfhers", packed_cmp / tfhers_cmp, 3);
    r.push_f64("sum32_n1024_sliced_per_number_ms", ms(sliced_sum), 6);
    r.push_f64("sum32_n1024_tfhe_per_number_ms", ms(tfhe_sum / 1024.0), 3);
    r.push_f64("cmp1024_sliced_per_number_ms", ms(sliced_cmp), 4);
    r.push("paper_points", checks.len());
    r.push("paper_points_100x", beaten);
    r.push_f64("worst_paper_speedup", worst, 1);
    r.push_f64("sum64_1024_ms", ms(sum64), 2);
    r.push_f64("mul_relin_switch_ms", ms(fused), 2);
    r.push_f64("seal_mul_ms", ms(seal_mul), 2);
    r.push_f64("rotate_ms", ms(rot), 2);
    r.push_f64("lattigo_rotate_ms", ms(lat_rot), 2);
    r.push_f64("seal_rotate_ms", ms(seal_rot), 2);
    r.push_f64("cmp1024_s", cmp, 3);
    r.push_f64(
        "tfhers_sum32_n1024_per_number_ms",
        ms(tfhers_sum / 1024.0),
        3,
    );
    let paper_ratio = if checks.is_empty() {
        f64::NAN
    } else {
        (checks.len() - beaten) as f64
    };
    Headline {
        line: r,
        targets: vec![
            (
                "sum of 1024 ciphertexts (N = 8192) <= 0.5x SEAL BFV",
                sum / seal,
                0.5,
            ),
            (
                "sum of 1024 ciphertexts (N = 8192) <= 0.5x Lattigo BGV",
                sum / lat,
                0.5,
            ),
            (
                "ct x ct multiply + relinearize (N = 2^14) <= 0.5x Lattigo BGV",
                mul / lat_mul,
                0.5,
            ),
            (
                "one 1024-bit comparison, bits in slots, <= 0.1x TFHE-rs gt",
                packed_cmp / tfhers_cmp,
                0.1,
            ),
            (
                "bit-sliced 32-bit sum of 1024, per number, <= 0.01x our TFHE",
                sliced_sum / (tfhe_sum / 1024.0),
                0.01,
            ),
            (
                "bit-sliced 1024-bit comparison, per comparison, <= 0.01x our TFHE",
                sliced_cmp / cmp,
                0.01,
            ),
            (
                "paper points (figures 8 and 18) not beaten 100x by advise's pick",
                paper_ratio,
                0.0,
            ),
        ],
    }
}

/// The targets, one line each: the ratio and whether it is met.
pub fn targets(h: &Headline) -> Vec<String> {
    h.targets
        .iter()
        .map(|&(what, ratio, limit)| {
            let verdict = if !ratio.is_finite() {
                "not measured"
            } else if ratio <= limit {
                "met"
            } else {
                "MISSED"
            };
            format!("target: {what}: {} ({verdict})", sig(ratio))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_points_are_transcribed() {
        let rows = paper_rows();
        let get = |system: &str, op: Op, bits: Option<usize>, n: usize| {
            rows.iter()
                .find(|r| {
                    r.source == Source::Paper
                        && r.system == system
                        && r.op == op
                        && r.bits == bits
                        && r.n == n
                })
                .map(|r| r.seconds.log2())
                .unwrap()
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(get(system::TFHE, Op::Sum, Some(64), 1024), 15.46));
        assert!(close(get(system::HELIB, Op::Sum, Some(64), 3), 8.044));
        assert!(close(get(system::PAPER_SEAL, Op::Sum, None, 1024), 5.463));
        assert!(close(get(system::TFHE, Op::Cmp, Some(2), 2), 0.379));
        assert!(close(get(system::HELIB, Op::Cmp, Some(1024), 2), 11.44));
        assert!(close(get(system::TFHE, Op::Sum, Some(32), 3), 85f64.log2()));
        // 10 points × (TFHE, HElib, SEAL, two models) + 10 × 2 comparisons
        // + table 5 (3 × 2).
        assert_eq!(rows.len(), 50 + 20 + 6);
        // The cost model meets table 5 at three numbers (HElib exactly).
        assert_eq!(paper::helib_model_s(3), paper::HELIB_SUM3_S);
        assert_eq!(paper::tfhe_model_s(3), 81.0);
        // Every series is increasing in n or width except where the paper's
        // own figure is flat (HElib's comparisons below 64 bits).
        for s in [
            paper::FIG8_TFHE_64,
            paper::FIG8_HELIB_64,
            paper::SEAL_ADD,
            paper::FIG18_TFHE,
        ] {
            assert!(s.windows(2).all(|w| w[0] < w[1]));
        }
    }

    fn sample_rows() -> Vec<Row> {
        let mut rows = paper_rows();
        let mut m = |system, op, bits, n, ring, s: f64| {
            let mut r = Row::measured(system, op, bits, n);
            r.ring = ring;
            r.seconds = s;
            if op == Op::Sum {
                r.numbers = n * ring.unwrap_or(1);
            }
            rows.push(r);
        };
        m(system::OURS_INT, Op::Sum, Some(32), 1024, Some(8192), 0.040);
        m(system::OURS_INT, Op::Sum, Some(32), 8, Some(8192), 0.0003);
        m(system::SEAL, Op::Sum, None, 1024, Some(8192), 0.250);
        m(system::LATTIGO, Op::Sum, None, 1024, Some(8192), 0.100);
        m(system::OURS_BGV, Op::MulRelin, None, 2, Some(16384), 0.030);
        m(system::LATTIGO, Op::MulRelin, None, 2, Some(16384), 0.080);
        m(system::OURS_TFHE, Op::Cmp, Some(8), 2, None, 0.1);
        m(system::TFHERS, Op::Cmp, Some(8), 2, None, 0.2);
        m(system::OURS_TFHE, Op::Sum, Some(32), 3, None, 0.5);
        m(system::OURS_PACKED, Op::Cmp, Some(8), 2, Some(8192), 0.04);
        m(system::OURS_SLICED, Op::Sum, Some(32), 64, Some(8192), 30.0);
        rows
    }

    #[test]
    fn csv_has_one_line_per_row_and_the_ratios_and_times_per_number() {
        let rows = sample_rows();
        let csv = table(&rows).to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), rows.len() + 1);
        assert_eq!(lines[0], COLUMNS.join(","));
        // The peers' rows carry ours/theirs.
        let seal = lines
            .iter()
            .find(|l| l.starts_with("measured,SEAL BFV,sum"))
            .unwrap();
        assert!(seal.contains(",0.160,"), "{seal}");
        // Our sum per number: 40 ms over 1024 · 8192 numbers.
        let ours = lines
            .iter()
            .find(|l| l.starts_with("measured,ours BGV integer SIMD,sum,32,1024"))
            .unwrap();
        assert!(ours.contains(",0.04000,-4.644,4.768e-9,"), "{ours}");
    }

    #[test]
    fn result_line_has_every_key_and_na_for_what_was_skipped() {
        let h = result_line(&sample_rows(), &[]);
        let line = h.line.to_string();
        assert!(line.starts_with(
            "RESULT addcmp sum1024_ms=40.00 seal_sum1024_ms=250.00 ratio_seal=0.160 lattigo_sum1024_ms=100.00 ratio_lattigo_bgv=0.400 mul_ms=30.00 lattigo_mul_ms=80.00 ratio_mul_lattigo=0.375 cmp1024_packed_s=NA tfhers_cmp1024_s=NA ratio_cmp1024_tfhers=NA sum32_n1024_sliced_per_number_ms=NA "
        ), "{line}");
        let t = targets(&h);
        assert_eq!(t.len(), 7);
        assert!(t[..3].iter().all(|l| l.ends_with("(met)")), "{t:?}");
        assert!(
            t[3..].iter().all(|l| l.ends_with("(not measured)")),
            "{t:?}"
        );
    }

    #[test]
    fn paper_points_meet_the_engine_advise_picks() {
        let mut rows = sample_rows();
        // Bootstraps of 1 ms: TFHE is advise's pick for small comparisons.
        let cal = Calibration {
            tfhe_bootstrap_s: 0.001,
            ..Calibration::default()
        };
        // Figure 18 at 8 bits: 2^3.17 s; advise picks TFHE for one 8-bit
        // comparison, measured at 0.1 s here: 90x, missed.
        let checks = paper_checks(&rows, &cal);
        assert_eq!(checks.len(), 40, "10 points x 2 systems x 2 figures");
        let at8 = |checks: &[PaperCheck]| {
            checks
                .iter()
                .find(|c| {
                    c.paper.op == Op::Cmp
                        && c.paper.bits == Some(8)
                        && c.paper.system == system::TFHE
                })
                .cloned()
                .unwrap()
        };
        let c = at8(&checks);
        assert_eq!(c.engine, Engine::Tfhe);
        assert!((c.speedup() - 3.17f64.exp2() / 0.1).abs() < 1e-9);
        assert!(c.to_string().ends_with("(MISSED)"), "{c}");
        // HElib's 8-bit point (2^6.846 s) is met; the other picks were not
        // measured here: not met.
        let h = result_line(&rows, &checks);
        assert!(
            h.line
                .to_string()
                .contains(" paper_points=40 paper_points_100x=1 worst_paper_speedup=90.0 "),
            "{}",
            h.line
        );
        // Faster: met.
        rows.iter_mut()
            .filter(|r| r.system == system::OURS_TFHE && r.op == Op::Cmp)
            .for_each(|r| r.seconds = 0.01);
        assert!(
            at8(&paper_checks(&rows, &cal))
                .to_string()
                .ends_with("(met)")
        );
    }

    #[test]
    fn calibration_comes_from_the_run() {
        let prims = packed::Primitives {
            slots: 8192,
            mul_s: 0.003,
            rotate_s: 0.002,
            refresh_s: 0.001,
            depth: 3,
        };
        let cal = calibration(&sample_rows(), &prims, 0.02, 2);
        assert_eq!(
            (cal.bgv_slots, cal.bgv_depth, cal.int_slots),
            (8192, 3, 8192)
        );
        assert!((cal.int_add_s - 0.040 / 1023.0).abs() < 1e-12);
        assert_eq!(Calibration::from_text(&cal.to_text()).unwrap(), cal);
    }

    #[test]
    fn plots_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let out = plot::draw(dir.path(), &sample_rows());
        assert_eq!(out.len(), 2);
        for (name, res) in out {
            let path = res.unwrap_or_else(|e| panic!("{name}: {e}"));
            let bytes = std::fs::read(&path).unwrap();
            assert!(bytes.starts_with(b"\x89PNG"), "{}", path.display());
        }
    }
}
