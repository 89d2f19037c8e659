//! Peer libraries run side by side with ours. Rust peers are crates.io
//! dependencies; others are small programs under `bench/peers/<name>/` that
//! the bench builds itself, fetching the peer from its package registry.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `bench/peers/<name>` of this checkout (or of `$HECLOUD_PEERS_DIR`).
pub fn peer_dir(name: &str) -> PathBuf {
    let root = std::env::var_os("HECLOUD_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/peers"));
    root.join(name)
}

/// Builds the Go program in `bench/peers/<name>` into `build/<bin>` (the Go
/// toolchain fetches the peer module from the Go module proxy on first use)
/// and returns the binary's path.
pub fn build_go(name: &str, bin: &str) -> anyhow::Result<PathBuf> {
    let dir = peer_dir(name);
    let out = format!("build/{bin}");
    let status = Command::new("go")
        .args(["build", "-o", &out, "."])
        .current_dir(&dir)
        .status()
        .map_err(|e| anyhow::anyhow!("cannot run `go` (is Go installed?): {e}"))?;
    anyhow::ensure!(
        status.success(),
        "building the Go peer in {} failed",
        dir.display()
    );
    Ok(dir.join(out))
}

/// Runs a Go peer binary on one goroutine (`GOMAXPROCS=1`, like our
/// single-thread figures) and returns its standard output.
pub fn run_go(bin: &Path, args: &[String]) -> anyhow::Result<String> {
    let out = Command::new(bin)
        .args(args)
        .env("GOMAXPROCS", "1")
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// Reads one JSON object line that a peer printed.
pub fn parse_json<T: serde::de::DeserializeOwned>(line: &str) -> anyhow::Result<T> {
    serde_json::from_str(line.trim()).map_err(|e| anyhow::anyhow!("peer printed {line:?}: {e}"))
}

/// The TenSEAL version the SEAL peers are written against.
const TENSEAL: &str = "tenseal==0.3.18";

/// The Python of `bench/peers/seal/.venv`, with TenSEAL (SEAL 4.x and its
/// low-level binding `tenseal.sealapi`) installed from PyPI on first use.
/// Every SEAL peer script runs in it.
pub fn tenseal_python() -> anyhow::Result<PathBuf> {
    let dir = peer_dir("seal");
    let py = dir.join(".venv/bin/python");
    let ok = |py: &Path| {
        Command::new(py)
            .args(["-c", "import tenseal, tenseal.sealapi"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if !ok(&py) {
        let status = Command::new("python3")
            .args(["-m", "venv", ".venv"])
            .current_dir(&dir)
            .status()
            .map_err(|e| anyhow::anyhow!("cannot run `python3`: {e}"))?;
        anyhow::ensure!(status.success(), "python3 -m venv failed");
        let status = Command::new(dir.join(".venv/bin/pip"))
            .args(["install", "-q", TENSEAL])
            .current_dir(&dir)
            .status()?;
        anyhow::ensure!(status.success(), "pip install {TENSEAL} failed");
    }
    anyhow::ensure!(ok(&py), "TenSEAL is not importable in {}", py.display());
    Ok(py)
}

/// Runs the SEAL peer script `bench/peers/seal/<script>` with `args` in the
/// TenSEAL venv (see [`tenseal_python`]) on one thread and returns its
/// standard output.
pub fn run_tenseal(script: &str, args: &[String]) -> anyhow::Result<String> {
    let py = tenseal_python()?;
    let out = Command::new(py)
        .arg(peer_dir("seal").join(script))
        .args(args)
        .env("OMP_NUM_THREADS", "1")
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "SEAL peer {script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

pub mod lattigo {
    //! Lattigo v6.2.0 (Go), through `bench/peers/lattigo`.

    use super::*;

    /// Median times of one Lattigo ring operation over all limbs, in ns:
    /// one JSON line of the peer (whose other fields are ignored).
    #[derive(Debug, Clone, Copy, serde::Deserialize)]
    pub struct RingTimes {
        /// Forward NTT.
        pub fwd_ns: f64,
        /// Inverse NTT.
        pub inv_ns: f64,
        /// Pointwise (Montgomery) product.
        pub mul_ns: f64,
    }

    /// Times Lattigo's ring NTT for each (log n, primes) on one goroutine.
    pub fn ring_times(specs: &[(u32, Vec<u64>)], quick: bool) -> anyhow::Result<Vec<RingTimes>> {
        let bin = build_go("lattigo", "lattigo-peer")?;
        let args: Vec<String> = specs
            .iter()
            .map(|(logn, qs)| {
                let qs: Vec<String> = qs.iter().map(u64::to_string).collect();
                format!("{logn}:{}", qs.join(","))
            })
            .collect();
        let (batch, samples) = if quick { ("2", "20") } else { ("3", "60") };
        let mut all = vec![
            "-min-batch-ms".into(),
            batch.into(),
            "-samples".into(),
            samples.into(),
        ];
        all.extend(args);
        let text = run_go(&bin, &all)?;
        let times: Vec<RingTimes> = text
            .lines()
            .map(parse_json)
            .collect::<anyhow::Result<_>>()?;
        anyhow::ensure!(
            times.len() == specs.len(),
            "Lattigo peer printed {} results",
            times.len()
        );
        Ok(times)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn reads_json_lines() {
        let l = r#"{"logn":16,"limbs":1,"fwd_ns":1186916.9,"inv_ns":1156393.15,"mul_ns":7e4}"#;
        let t: lattigo::RingTimes = parse_json(l).unwrap();
        assert_eq!(t.fwd_ns, 1186916.9);
        assert_eq!(t.inv_ns, 1156393.15);
        assert_eq!(t.mul_ns, 70000.0);
        let m: BTreeMap<String, f64> = parse_json(l).unwrap();
        assert_eq!(m["logn"], 16.0);
        assert!(!m.contains_key("missing"));
        let e = parse_json::<lattigo::RingTimes>(r#"{"fwd_ns":1}"#).unwrap_err();
        assert!(e.to_string().contains("inv_ns"), "{e}");
    }
}
