//! `hecloud advise`: which engine hecloud would use for a job, with the
//! predicted time on every engine and why (see `hecloud_circuits::advice`).

use std::path::{Path, PathBuf};

use hecloud_circuits::advice::{self, Calibration, Engine, Task};

/// The calibration `hecloud bench addcmp` writes, where `advise` looks for
/// it when no `--calibration` is given.
pub const DEFAULT_CALIBRATION: &str = "bench-results/advise.txt";

/// Arguments of `hecloud advise`.
#[derive(Debug, clap::Args)]
pub struct AdviseArgs {
    /// The operation: `sum`, `compare` or `minmax`.
    pub op: String,
    /// Bits per number (2..=1024).
    #[arg(long, default_value_t = 32)]
    pub width: usize,
    /// Numbers per sum (sums only).
    #[arg(long, default_value_t = 2)]
    pub operands: usize,
    /// Independent instances of the job (bit-sliced and integer engines run
    /// up to one per slot at once).
    #[arg(long, default_value_t = 1)]
    pub instances: u64,
    /// Only the engines that keep numbers as encrypted bits (for further
    /// bit-level work).
    #[arg(long)]
    pub bits: bool,
    /// The calibration file (`key = value` lines) from `hecloud bench
    /// addcmp`; default `bench-results/advise.txt` if present, else the
    /// built-in figures.
    #[arg(long)]
    pub calibration: Option<PathBuf>,
}

fn load(path: Option<&Path>) -> anyhow::Result<Calibration> {
    let (path, explicit) = match path {
        Some(p) => (p.to_path_buf(), true),
        None => (PathBuf::from(DEFAULT_CALIBRATION), false),
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => Calibration::from_text(&text)
            .map_err(|e| anyhow::anyhow!("calibration {}: {e}", path.display())),
        Err(e) if explicit => Err(anyhow::anyhow!("calibration {}: {e}", path.display())),
        Err(_) => Ok(Calibration::default()),
    }
}

/// Runs `hecloud advise`.
pub fn run(a: &AdviseArgs) -> anyhow::Result<()> {
    hecloud_circuits::uint::check_width(a.width).map_err(|e| anyhow::anyhow!("--width: {e}"))?;
    let task = match a.op.as_str() {
        "sum" if a.operands >= 2 => Task::Sum {
            width: a.width,
            operands: a.operands,
        },
        "sum" => anyhow::bail!("a sum needs --operands ≥ 2"),
        "compare" | "lt" => Task::Compare { width: a.width },
        "minmax" | "min" | "max" => Task::MinMax { width: a.width },
        other => anyhow::bail!("unknown operation {other:?} (sum, compare or minmax)"),
    };
    let cal = load(a.calibration.as_deref())?;
    let engines: &[Engine] = if a.bits { &Engine::BITS } else { &Engine::ALL };
    println!("calibration: {}", cal.source);
    println!("{:<12} {:>14}  how", "engine", "predicted");
    for p in advice::predict(task, a.instances, &cal) {
        let time = match p.seconds {
            Some(s) if engines.contains(&p.engine) => format_seconds(s),
            Some(_) => "(not allowed)".into(),
            None => "cannot".into(),
        };
        println!("{:<12} {time:>14}  {}", p.engine.to_string(), p.detail);
    }
    let pick = advice::advise(task, a.instances, &cal, engines);
    match pick.seconds {
        Some(s) => println!("use: {} ({})", pick.engine, format_seconds(s)),
        None => anyhow::bail!("{}", pick.detail),
    }
    Ok(())
}

fn format_seconds(s: f64) -> String {
    match s {
        s if s >= 3600.0 => format!("{:.1} h", s / 3600.0),
        s if s >= 1.0 => format!("{s:.2} s"),
        s => format!("{:.2} ms", s * 1e3),
    }
}
