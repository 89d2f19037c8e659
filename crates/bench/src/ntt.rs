//! `hecloud bench ntt` (work in progress).
use crate::BenchOptions;
/// Runs the experiment.
pub fn run(_o: &BenchOptions) -> anyhow::Result<()> { anyhow::bail!("not yet") }
