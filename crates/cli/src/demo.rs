//! `hecloud demo`.
pub fn run() -> anyhow::Result<()> { Ok(()) }
