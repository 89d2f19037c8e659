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

/// One timed operation of the BGV/BFV peers (`bench/peers/lattigo-bgv`,
/// `bench/peers/seal/seal_bfv.py`), each run on one thread with its result
/// decrypted and checked against the plaintexts by the peer itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOp {
    /// Adds `n` ciphertexts: n − 1 in-place additions into an accumulator.
    Sum {
        /// Number of ciphertexts.
        n: usize,
    },
    /// One ciphertext × ciphertext product with relinearization.
    Mul,
    /// One row rotation by one slot, with its Galois key.
    Rotate,
}

impl IntOp {
    /// The name the peers use for the operation.
    pub fn name(self) -> &'static str {
        match self {
            IntOp::Sum { .. } => "sum",
            IntOp::Mul => "mul",
            IntOp::Rotate => "rotate",
        }
    }
}

/// Bit sizes of the RNS primes a BGV/BFV peer is to use instead of its
/// default (SEAL's 128-bit `CoeffModulus::BFVDefault` for N, in both peers).
/// The peers refuse sizes above the HE Standard's 128-bit bound on log QP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moduli {
    /// Bit sizes of the ciphertext primes Q.
    pub log_q: Vec<u32>,
    /// Bit sizes of the key-switching primes P (SEAL takes exactly one).
    pub log_p: Vec<u32>,
}

/// The JSON line a BGV/BFV peer prints for one [`IntOp`].
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct IntOpTime {
    /// The operation's name ([`IntOp::name`]).
    pub op: String,
    /// log2 of the ring degree N.
    pub logn: u32,
    /// Median time of the operation in milliseconds (for a sum: of all
    /// n − 1 additions together).
    pub ms: f64,
    /// The plaintext modulus.
    pub t: u64,
    /// Bit sizes of the Q primes.
    pub logq: Vec<u32>,
    /// Bit sizes of the P primes (SEAL's single special prime).
    pub logp: Vec<u32>,
    /// Number of ciphertexts added (sums only).
    #[serde(default)]
    pub n: Option<usize>,
}

/// Reads a BGV/BFV peer's output (one JSON line) and checks that it answers
/// `op` at `log_n`.
pub fn parse_int_op(text: &str, op: IntOp, log_n: u32) -> anyhow::Result<IntOpTime> {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .ok_or_else(|| anyhow::anyhow!("the peer printed nothing"))?;
    let r: IntOpTime = parse_json(line)?;
    anyhow::ensure!(
        r.op == op.name() && r.logn == log_n,
        "asked for {} at logn {log_n}, the peer answered {line:?}",
        op.name()
    );
    if let IntOp::Sum { n } = op {
        anyhow::ensure!(r.n == Some(n), "asked for a sum of {n}, got {line:?}");
    }
    anyhow::ensure!(
        r.ms.is_finite() && r.ms >= 0.0,
        "the peer printed no time: {line:?}"
    );
    Ok(r)
}

/// `a,b,c` for a peer's command line.
fn comma_list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// Flags for `op` at `log_n` common to both BGV/BFV peers (`--flag value`
/// pairs: Go's `flag` package takes the double dash too).
fn int_op_flags(op: IntOp, log_n: u32, samples: usize, moduli: Option<&Moduli>) -> Vec<String> {
    let mut args = vec![
        "--logn".to_string(),
        log_n.to_string(),
        "--samples".into(),
        samples.to_string(),
    ];
    if let IntOp::Sum { n } = op {
        args.extend(["--n".into(), n.to_string()]);
    }
    if let Some(m) = moduli {
        args.extend([
            "--logq".into(),
            comma_list(&m.log_q),
            "--logp".into(),
            comma_list(&m.log_p),
        ]);
    }
    args
}

pub mod lattigo_bgv {
    //! Lattigo v6.2.0 BGV (Go), through `bench/peers/lattigo-bgv`, run with
    //! `GOMAXPROCS=1`. Default moduli: SEAL's 128-bit BFV defaults (N = 2^13:
    //! 43, 43, 44, 44 + 44 bits; N = 2^14: 48 × 3, 49 × 5 + 49 bits), primes
    //! just below 2^bits; t = 65537. A sum is n − 1 in-place `Add`s of fresh
    //! ciphertexts, a product one `MulRelin` at the top level, a rotation
    //! `RotateColumns(ct, 1)` (one slot, each row).

    use super::*;

    /// Times `op` at N = 2^`log_n`: the median of `samples` runs, checked by
    /// decryption in the peer.
    pub fn time(
        op: IntOp,
        log_n: u32,
        samples: usize,
        moduli: Option<&Moduli>,
    ) -> anyhow::Result<IntOpTime> {
        let bin = build_go("lattigo-bgv", "lattigo-bgv-peer")?;
        let mut args = vec!["-op".to_string(), op.name().into()];
        args.extend(int_op_flags(op, log_n, samples, moduli));
        parse_int_op(&run_go(&bin, &args)?, op, log_n)
    }
}

pub mod seal_bfv {
    //! SEAL 4.x BFV through TenSEAL's `bfv_vector`
    //! (`bench/peers/seal/seal_bfv.py`, in the venv of [`tenseal_python`]),
    //! single-threaded. Default moduli: SEAL's `CoeffModulus::BFVDefault`;
    //! t = 65537. A sum is n − 1 in-place `add_`s, each through TenSEAL's
    //! Python wrapper; a product an in-place `mul_`, which TenSEAL
    //! relinearizes automatically (SEAL's `multiply_inplace` +
    //! `relinearize_inplace`); a rotation `rotate_rows(ct, 1)` through
    //! `tenseal.sealapi` (TenSEAL's vectors have no rotation).

    use super::*;

    /// Times `op` at N = 2^`log_n`: the median of `samples` runs, checked by
    /// decryption in the peer. SEAL takes a single P prime.
    pub fn time(
        op: IntOp,
        log_n: u32,
        samples: usize,
        moduli: Option<&Moduli>,
    ) -> anyhow::Result<IntOpTime> {
        let mut args = vec![op.name().to_string()];
        args.extend(int_op_flags(op, log_n, samples, moduli));
        parse_int_op(&run_tenseal("seal_bfv.py", &args)?, op, log_n)
    }
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

    #[test]
    fn reads_int_op_lines() {
        // As printed by the Lattigo BGV peer (keys sorted, extra log_qp).
        let go = r#"{"log_qp":217.99999977561694,"logn":13,"logp":[44],"logq":[43,43,44,44],"ms":93.2,"n":1024,"op":"sum","t":65537}"#;
        let r = parse_int_op(go, IntOp::Sum { n: 1024 }, 13).unwrap();
        assert_eq!(r.ms, 93.2);
        assert_eq!((r.logn, r.t, r.n), (13, 65537, Some(1024)));
        assert_eq!((r.logq, r.logp), (vec![43, 43, 44, 44], vec![44]));
        // As printed by the SEAL peer (Python's json.dumps, trailing newline).
        let py = "{\"op\": \"mul\", \"logn\": 14, \"t\": 65537, \"logq\": [48, 49], \"logp\": [49], \"ms\": 101.8}\n";
        let r = parse_int_op(py, IntOp::Mul, 14).unwrap();
        assert_eq!((r.op.as_str(), r.ms, r.n), ("mul", 101.8, None));
        assert!(parse_int_op(py, IntOp::Rotate, 14).is_err());
        assert!(parse_int_op(py, IntOp::Mul, 13).is_err());
        assert!(parse_int_op(go, IntOp::Sum { n: 512 }, 13).is_err());
        assert!(parse_int_op("", IntOp::Mul, 14).is_err());
        let e = parse_int_op(r#"{"op":"mul","logn":14}"#, IntOp::Mul, 14).unwrap_err();
        assert!(e.to_string().contains("ms"), "{e}");
    }

    #[test]
    fn int_op_command_lines() {
        let m = Moduli {
            log_q: vec![43, 44],
            log_p: vec![44],
        };
        assert_eq!(
            int_op_flags(IntOp::Sum { n: 8 }, 13, 3, Some(&m)).join(" "),
            "--logn 13 --samples 3 --n 8 --logq 43,44 --logp 44"
        );
        assert_eq!(
            int_op_flags(IntOp::Rotate, 14, 5, None).join(" "),
            "--logn 14 --samples 5"
        );
    }

    /// Runs the four peers once (network on first use; never in CI):
    /// `cargo test --workspace --release --locked --lib -- --ignored peers_end_to_end --nocapture`.
    #[test]
    #[ignore = "builds and runs the Lattigo and SEAL peers"]
    fn peers_end_to_end() {
        let ms = |time: fn(IntOp, u32, usize, Option<&Moduli>) -> anyhow::Result<IntOpTime>,
                  op,
                  log_n| time(op, log_n, 5, None).unwrap().ms;
        let sum = IntOp::Sum { n: 1024 };
        let l_sum = ms(lattigo_bgv::time, sum, 13);
        let l_mul = ms(lattigo_bgv::time, IntOp::Mul, 14);
        let l_rot = ms(lattigo_bgv::time, IntOp::Rotate, 14);
        let s_sum = ms(seal_bfv::time, sum, 13);
        let s_mul = ms(seal_bfv::time, IntOp::Mul, 14);
        let s_rot = ms(seal_bfv::time, IntOp::Rotate, 14);
        println!(
            "lattigo bgv: sum(2^13, 1024) {l_sum:.2} ms, mul(2^14) {l_mul:.2} ms, rotate(2^14) {l_rot:.2} ms"
        );
        println!(
            "seal bfv:    sum(2^13, 1024) {s_sum:.2} ms, mul(2^14) {s_mul:.2} ms, rotate(2^14) {s_rot:.2} ms"
        );
    }
}
